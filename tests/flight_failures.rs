//! Flight failures on the host: a server killed mid-stream (a child process: this test
//! binary re-run in a server role) gives an error, never a partial result; a client
//! that drops a stream mid-way frees the server's stream (back to its baseline); a
//! server that ends streams early or repeats chunks is caught by the client's checks.
//! Threads are ordered by what they see (lines from the child, the server's events),
//! never by sleeps.
#![cfg(feature = "flight")]

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use devbuf::flight::arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use devbuf::flight::arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use devbuf::flight::tonic::{Request, Response, Status, Streaming};
use devbuf::flight::{
    Client, Query, Server, ServerConfig, ServerEvent, Service, StreamEnd, Target,
};
use devbuf::zarr::{ArraySpec, Compressor, ZarrArray};
use devbuf::zarr::{BufferPrototype, Dtype, Scalar};
use futures::StreamExt;
use futures::stream::BoxStream;

#[path = "common/arrays.rs"]
mod arrays;
#[path = "common/flight.rs"]
mod flight_common;
#[path = "common/peer.rs"]
mod peer;
#[path = "common/random.rs"]
mod random;
#[path = "common/zarrs.rs"]
mod zarrs_common;

use flight_common::{TOKEN, bytes_of, opts, random_array, serve};
use zarrs_common::TempDir;

const HOST: BufferPrototype = BufferPrototype::Host;
const ROLE: &str = "DEVBUF_FLIGHT_CHILD";

/// An array of random float32 in many small chunks.
fn many_chunks(dir: &TempDir) -> ZarrArray {
    let mut rng = random::seeded(7);
    let values = arrays::random_values(&mut rng, 64 * 64, Dtype::FLOAT32);
    random_array(
        &dir.join("a.zarr"),
        &[64, 64],
        &[8, 8],
        Dtype::FLOAT32,
        Scalar::from(0.0f32),
        Compressor::None,
        values,
        |_| false,
    )
}

/// The child role: serves `DEVBUF_FLIGHT_ROOT` and stalls every stream at its third
/// message (saying so), until the parent kills it. Without the role set, a no-op.
#[test]
fn child_server() {
    if std::env::var(ROLE).as_deref() != Ok("server") {
        return;
    }
    let root = peer::env("DEVBUF_FLIGHT_ROOT");
    let mut cfg = ServerConfig::default();
    cfg.root = Some(root.into());
    cfg.tokens.push(TOKEN.into());
    cfg.endpoints = 2;
    cfg.batch_bytes = 300; // one chunk per message
    cfg.observer = Some(std::sync::Arc::new(|e: &ServerEvent| {
        if let ServerEvent::MessageQueued { id, index: 2, .. } = e {
            peer::say("stalled", id);
            loop {
                std::thread::park();
            }
        }
    }));
    let server = Server::start(cfg, "127.0.0.1:0").unwrap();
    peer::say("uri", server.uri());
    // Serves until killed (or until the parent closes stdin).
    let _ = peer::wait_line();
}

fn spawn_server(root: &Path) -> (peer::Peer, String) {
    let mut p = peer::Peer::spawn(
        "child_server",
        ROLE,
        "server",
        &[("DEVBUF_FLIGHT_ROOT", root.display().to_string())],
    );
    let uri = p.expect("uri");
    (p, uri)
}

#[test]
fn a_server_killed_mid_stream_is_an_error_not_a_partial_result() {
    let dir = TempDir::new("flight-kill");
    many_chunks(&dir);

    // A whole read: both endpoints stall; the read waits until the child dies.
    let (mut p, uri) = spawn_server(&dir.0);
    let client = Client::connect(&uri, &opts()).unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let r = client.read("a.zarr", .., &HOST);
        tx.send(()).unwrap();
        r
    });
    p.expect("stalled");
    assert!(rx.try_recv().is_err(), "the read cannot have finished");
    p.kill();
    let r = reader.join().unwrap();
    let e = r
        .expect_err("a read from a killed server must fail")
        .to_string();
    assert!(e.contains("stream broke off") || e.contains("DoGet"), "{e}");

    // Chunk batches as received: the same.
    let (mut p, uri) = spawn_server(&dir.0);
    let client = Client::connect(&uri, &opts()).unwrap();
    let reader = std::thread::spawn(move || client.read_chunks("a.zarr", None, &HOST));
    p.expect("stalled");
    p.kill();
    assert!(reader.join().unwrap().is_err());

    // One endpoint as an iterator: the batches before the kill, then an error.
    let (mut p, uri) = spawn_server(&dir.0);
    let client = Client::connect(&uri, &opts()).unwrap();
    let f = client
        .info(&Query::whole(Target::array("a.zarr").unwrap()))
        .unwrap();
    let mut s = client.stream(&f.endpoints[0]).unwrap();
    let first = s.next().unwrap().unwrap();
    assert_eq!(first.num_rows(), 1);
    p.expect("stalled");
    p.kill();
    let rest: Vec<_> = s.by_ref().collect();
    assert!(
        rest.last().is_some_and(|r| r.is_err()),
        "the stream must end with an error, got {} items",
        rest.len()
    );
    assert!(s.next().is_none());
}

#[test]
fn a_client_dropped_mid_stream_frees_the_server() {
    let dir = TempDir::new("flight-drop");
    // 64 MiB of fill values (no chunk stored): more than HTTP/2 lets the server send
    // ahead (16 MiB per stream), so the stream is still running when it is dropped.
    let spec = ArraySpec::new(&[4096, 4096], &[256, 4096], Dtype::FLOAT32)
        .with_fill_value(Scalar::from(1.5f32));
    ZarrArray::create(dir.join("big.zarr"), &spec).unwrap();
    let (tx, rx) = mpsc::channel::<ServerEvent>();
    let tx = std::sync::Mutex::new(tx);
    let server = serve(&dir.0, |c| {
        c.endpoints = 1;
        c.batch_bytes = 1 << 20;
        c.queue_depth = 2;
        c.observer = Some(std::sync::Arc::new(move |e: &ServerEvent| {
            if matches!(
                e,
                ServerEvent::StreamStarted { .. } | ServerEvent::StreamEnded { .. }
            ) {
                let _ = tx.lock().unwrap().send(e.clone());
            }
        }));
    });
    let baseline = server.stats();
    assert_eq!((baseline.active_streams, baseline.queued_bytes), (0, 0));
    let client = Client::connect(&server.uri(), &opts()).unwrap();
    let f = client
        .info(&Query::whole(Target::array("big.zarr").unwrap()))
        .unwrap();
    let mut s = client.stream(&f.endpoints[0]).unwrap();
    let b = s.next().unwrap().unwrap();
    assert_eq!(b.num_rows(), 1);
    assert!(matches!(
        rx.recv().unwrap(),
        ServerEvent::StreamStarted { .. }
    ));
    let during = server.stats();
    assert_eq!(during.active_streams, 1);
    assert!(
        during.queued_bytes <= 3 * (4 << 20),
        "{during:?}: the queue is bounded"
    );
    drop(s);
    match rx.recv_timeout(Duration::from_secs(60)).unwrap() {
        ServerEvent::StreamEnded { end, .. } => assert_eq!(end, StreamEnd::ClientGone),
        e => panic!("{e:?}"),
    }
    assert!(server.wait_idle(Duration::from_secs(60)));
    let after = server.stats();
    assert_eq!(
        (after.active_streams, after.queued_bytes),
        (0, 0),
        "{after:?}"
    );
    assert!(
        after.bytes_sent < 64 << 20,
        "{after:?}: the stream was cut short"
    );
    // The server still serves, and a whole read completes.
    let part = client
        .read("big.zarr", [devbuf::zarr::AxisSel::from(0..300)], &HOST)
        .unwrap();
    assert_eq!(part.shape(), &[300, 4096]);
    match rx.recv().unwrap() {
        ServerEvent::StreamStarted { .. } => {}
        e => panic!("{e:?}"),
    }
    match rx.recv_timeout(Duration::from_secs(60)).unwrap() {
        ServerEvent::StreamEnded { end, .. } => {
            assert!(
                matches!(end, StreamEnd::Completed { messages: 3 }),
                "{end:?}"
            )
        }
        e => panic!("{e:?}"),
    }
}

/// How a [`Lying`] server misbehaves on DoGet.
#[derive(Clone, Copy)]
enum Lie {
    /// Ends every stream cleanly one message early.
    Truncate,
    /// Sends the last message twice.
    Repeat,
}

/// devbuf's service with a DoGet that lies.
struct Lying {
    inner: Service,
    lie: Lie,
}

#[devbuf::flight::tonic::async_trait]
impl FlightService for Lying {
    type HandshakeStream = BoxStream<'static, Result<HandshakeResponse, Status>>;
    type ListFlightsStream = BoxStream<'static, Result<FlightInfo, Status>>;
    type DoGetStream = BoxStream<'static, Result<FlightData, Status>>;
    type DoPutStream = BoxStream<'static, Result<PutResult, Status>>;
    type DoExchangeStream = BoxStream<'static, Result<FlightData, Status>>;
    type DoActionStream = BoxStream<'static, Result<devbuf::flight::arrow_flight::Result, Status>>;
    type ListActionsStream = BoxStream<'static, Result<ActionType, Status>>;

    async fn handshake(
        &self,
        r: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        Ok(self.inner.handshake(r).await?.map(|s| s.boxed()))
    }
    async fn list_flights(
        &self,
        r: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        Ok(self.inner.list_flights(r).await?.map(|s| s.boxed()))
    }
    async fn get_flight_info(
        &self,
        r: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.inner.get_flight_info(r).await
    }
    async fn poll_flight_info(
        &self,
        r: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        self.inner.poll_flight_info(r).await
    }
    async fn get_schema(
        &self,
        r: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        self.inner.get_schema(r).await
    }
    async fn do_get(&self, r: Request<Ticket>) -> Result<Response<Self::DoGetStream>, Status> {
        let all: Vec<Result<FlightData, Status>> =
            self.inner.do_get(r).await?.into_inner().collect().await;
        let mut all = all;
        match self.lie {
            Lie::Truncate => {
                all.pop();
            }
            Lie::Repeat => {
                if let Some(last) = all.last().cloned() {
                    all.push(last);
                }
            }
        }
        Ok(Response::new(futures::stream::iter(all).boxed()))
    }
    async fn do_put(
        &self,
        r: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        Ok(self.inner.do_put(r).await?.map(|s| s.boxed()))
    }
    async fn do_exchange(
        &self,
        r: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        Ok(self.inner.do_exchange(r).await?.map(|s| s.boxed()))
    }
    async fn do_action(
        &self,
        r: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        Ok(self.inner.do_action(r).await?.map(|s| s.boxed()))
    }
    async fn list_actions(
        &self,
        r: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        Ok(self.inner.list_actions(r).await?.map(|s| s.boxed()))
    }
}

/// Serves a lying service on a runtime of the test's; returns the runtime (the server
/// stops when it drops) and the URI.
fn lying_server(root: &Path, lie: Lie) -> (tokio::runtime::Runtime, String) {
    let mut cfg = ServerConfig::default();
    cfg.root = Some(root.into());
    cfg.tokens.push(TOKEN.into());
    cfg.endpoints = 3;
    cfg.batch_bytes = 1000;
    let svc = Lying {
        inner: Service::new(&cfg).unwrap(),
        lie,
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let uri = format!("grpc://{}", listener.local_addr().unwrap());
    listener.set_nonblocking(true).unwrap();
    let incoming = {
        let _g = rt.enter();
        devbuf::flight::tonic::transport::server::TcpIncoming::from(
            tokio::net::TcpListener::from_std(listener).unwrap(),
        )
    };
    rt.spawn(
        devbuf::flight::tonic::transport::Server::builder()
            .add_service(FlightServiceServer::new(svc))
            .serve_with_incoming(incoming),
    );
    (rt, uri)
}

#[test]
fn streams_that_end_early_or_repeat_chunks_are_errors() {
    let dir = TempDir::new("flight-lies");
    let local = many_chunks(&dir);
    let want = bytes_of(&local.read(..).to(&HOST).unwrap());
    // Honest: the read is whole.
    let honest = serve(&dir.0, |c| {
        c.endpoints = 3;
        c.batch_bytes = 1000;
    });
    let client = Client::connect(&honest.uri(), &opts()).unwrap();
    assert_eq!(bytes_of(&client.read("a.zarr", .., &HOST).unwrap()), want);

    let (_rt, uri) = lying_server(&dir.0, Lie::Truncate);
    let client = Client::connect(&uri, &opts()).unwrap();
    let e = client.read("a.zarr", .., &HOST).unwrap_err().to_string();
    assert!(e.contains("ended after") && e.contains("incomplete"), "{e}");
    let e = client
        .read_chunks("a.zarr", None, &HOST)
        .unwrap_err()
        .to_string();
    assert!(e.contains("incomplete"), "{e}");

    let (_rt2, uri) = lying_server(&dir.0, Lie::Repeat);
    let client = Client::connect(&uri, &opts()).unwrap();
    let e = client.read("a.zarr", .., &HOST).unwrap_err().to_string();
    assert!(e.contains("twice"), "{e}");
    let e = client
        .read_chunks("a.zarr", None, &HOST)
        .unwrap_err()
        .to_string();
    assert!(e.contains("twice"), "{e}");
}

/// A gate the observer of a test server waits at (stalling a stream) until the test
/// opens it.
#[derive(Default)]
struct Gate {
    open: std::sync::Mutex<bool>,
    cv: std::sync::Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut g = self.open.lock().unwrap();
        while !*g {
            g = self.cv.wait(g).unwrap();
        }
    }
    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

/// A server over `dir` whose streams stall at their third message until `gate` opens;
/// `stalled` receives the stalled stream's id.
fn stalling_server(
    dir: &TempDir,
    gate: std::sync::Arc<Gate>,
    f: impl FnOnce(&mut ServerConfig),
) -> (Server, mpsc::Receiver<u64>) {
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let server = serve(&dir.0, |c| {
        c.endpoints = 1;
        c.batch_bytes = 300;
        c.observer = Some(std::sync::Arc::new(move |e: &ServerEvent| {
            if let ServerEvent::MessageQueued { id, index: 2, .. } = e {
                let _ = tx.lock().unwrap().send(*id);
                gate.wait();
            }
        }));
        f(c);
    });
    (server, rx)
}

#[test]
fn a_silent_server_times_out_and_streams_are_limited() {
    let dir = TempDir::new("flight-silent");
    let local = many_chunks(&dir);
    let gate = std::sync::Arc::new(Gate::default());
    let (server, stalled) = stalling_server(&dir, gate.clone(), |c| c.max_streams = 1);
    let mut options = opts();
    options.idle_timeout = Some(Duration::from_millis(300));
    let client = Client::connect(&server.uri(), &options).unwrap();
    // The stream stalls after two messages: the read gives up after the idle timeout.
    let e = client.read("a.zarr", .., &HOST).unwrap_err().to_string();
    assert!(
        e.contains("sent nothing") && e.contains("idle_timeout"),
        "{e}"
    );
    stalled.recv().unwrap();
    // While that stream's producer is held, a second stream is refused (max_streams 1).
    let e = client.read("a.zarr", .., &HOST).unwrap_err().to_string();
    assert!(
        e.contains("ResourceExhausted") && e.contains("at once"),
        "{e}"
    );
    gate.open();
    assert!(server.wait_idle(Duration::from_secs(60)));
    let all = client.read("a.zarr", .., &HOST).unwrap();
    assert_eq!(bytes_of(&all), bytes_of(&local.read(..).to(&HOST).unwrap()));
}
