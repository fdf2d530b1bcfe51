//! The Flight client's and server's async API on the caller's tokio runtime, in a
//! current-thread and a multi-thread runtime: a devbuf server started with
//! `Server::start_async` and a tonic service of the test's own (an arrow-flight
//! `FlightService` whose DoGet handler reads through devbuf's async Flight client and
//! reads the same array with `ZarrArray::read(..).to_async`), all on the test's runtime; blocking
//! calls on a current-thread runtime are errors naming the async form; dropping an async
//! read's future cancels its stream on the server.
#![cfg(feature = "flight")]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::{Float32Array, Int64Array, RecordBatch};
use devbuf::flight::arrow_flight::encode::FlightDataEncoderBuilder;
use devbuf::flight::arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use devbuf::flight::arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use devbuf::flight::tonic::{self, Request, Response, Status, Streaming};
use devbuf::flight::{
    Batch, Client, ClientOptions, Endpoint, Flight, Query, Server, ServerEvent, StreamEnd, Target,
};
use devbuf::zarr::{BufferPrototype, Compressor, Dtype, Scalar, ZarrArray};
use futures::TryStreamExt;
use futures::stream::BoxStream;

#[path = "common/arrays.rs"]
mod arrays;
#[path = "common/flight.rs"]
mod flight_common;
#[path = "common/random.rs"]
mod random;
#[path = "common/zarrs.rs"]
mod zarrs_common;

use flight_common::{bytes_of, config, opts, random_array};
use zarrs_common::TempDir;

const HOST: BufferPrototype = BufferPrototype::Host;
const FIXTURES: &str = "tests/fixtures/zarr";
const ARRAY: &str = "v3_float32.zarr";
const WAIT: Duration = Duration::from_secs(20);

/// A tonic service of the test's own: DoGet of a ticket naming an array reads it through
/// devbuf's async Flight client from the devbuf server and with `ZarrArray::read(..).to_async`
/// from the same directory, checks that both agree, and sends the values as one batch.
struct Proxy {
    client: Arc<Client>,
    root: PathBuf,
}

fn internal(e: impl std::fmt::Display) -> Status {
    Status::internal(e.to_string())
}

type Boxed<T> = BoxStream<'static, Result<T, Status>>;

#[tonic::async_trait]
impl FlightService for Proxy {
    type HandshakeStream = Boxed<HandshakeResponse>;
    type ListFlightsStream = Boxed<FlightInfo>;
    type DoGetStream = Boxed<FlightData>;
    type DoPutStream = Boxed<PutResult>;
    type DoExchangeStream = Boxed<FlightData>;
    type DoActionStream = Boxed<devbuf::flight::arrow_flight::Result>;
    type ListActionsStream = Boxed<ActionType>;

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        let path = String::from_utf8(request.into_inner().ticket.to_vec()).map_err(internal)?;
        let remote = self
            .client
            .read_async(&path, .., &HOST)
            .await
            .map_err(internal)?;
        let local = ZarrArray::open_async(self.root.join(&path))
            .await
            .map_err(internal)?
            .read(..)
            .to_async(&HOST)
            .await
            .map_err(internal)?;
        let (remote, local) = (bytes_of(&remote), bytes_of(&local));
        if remote != local {
            return Err(Status::internal(
                "the Flight read and the local read differ",
            ));
        }
        let values: Vec<f32> = remote
            .chunks_exact(4)
            .map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let batch = RecordBatch::try_from_iter([(
            "v",
            Arc::new(Float32Array::from(values)) as arrow_array::ArrayRef,
        )])
        .map_err(internal)?;
        let stream = FlightDataEncoderBuilder::new()
            .build(futures::stream::iter([Ok(batch)]))
            .map_err(|e| Status::internal(e.to_string()));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn handshake(
        &self,
        _: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        Err(Status::unimplemented("handshake"))
    }
    async fn list_flights(
        &self,
        _: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        Err(Status::unimplemented("list_flights"))
    }
    async fn get_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(Status::unimplemented("get_flight_info"))
    }
    async fn poll_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        Err(Status::unimplemented("poll_flight_info"))
    }
    async fn get_schema(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        Err(Status::unimplemented("get_schema"))
    }
    async fn do_put(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        Err(Status::unimplemented("do_put"))
    }
    async fn do_exchange(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        Err(Status::unimplemented("do_exchange"))
    }
    async fn do_action(
        &self,
        _: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        Err(Status::unimplemented("do_action"))
    }
    async fn list_actions(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        Err(Status::unimplemented("list_actions"))
    }
}

/// The proxy on 127.0.0.1, on the caller's runtime; its URI.
async fn start_proxy(proxy: Proxy) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(FlightServiceServer::new(proxy))
            .serve_with_incoming(incoming),
    );
    format!("grpc://{addr}")
}

fn batch(rows: i64) -> RecordBatch {
    RecordBatch::try_from_iter([(
        "x",
        Arc::new(Int64Array::from((0..rows).collect::<Vec<_>>())) as arrow_array::ArrayRef,
    )])
    .unwrap()
}

/// Everything async on the caller's runtime: a devbuf server, its client's calls, and
/// the proxy service calling the client from its handler.
async fn everything_on_the_callers_runtime() {
    let root = Path::new(FIXTURES);
    let mut cfg = config(root);
    cfg.endpoints = 3;
    let server = Server::start_async(cfg, "127.0.0.1:0").await.unwrap();
    let client = Arc::new(Client::connect_async(&server.uri(), &opts()).await.unwrap());

    // Reads agree with the local async read.
    let local = ZarrArray::open_async(root.join(ARRAY)).await.unwrap();
    let whole = local.read(..).to_async(&HOST).await.unwrap();
    let got = client.read_async(ARRAY, .., &HOST).await.unwrap();
    assert_eq!(bytes_of(&got), bytes_of(&whole));
    let chunks = client.read_chunks_async(ARRAY, None, &HOST).await.unwrap();
    assert!(!chunks.is_empty());
    assert!(client.list_async("").await.unwrap().len() > 10);

    // Uploads, batches as a list and as a RecordBatchStream-style stream.
    let up = [Batch::from(batch(5)), Batch::from(batch(7))];
    client.put_async("numbers", up.clone()).await.unwrap();
    let back = client.read_batches_async("numbers", &HOST).await.unwrap();
    assert_eq!(back.iter().map(|b| b.num_rows()).sum::<usize>(), 12);
    let flight = client
        .info_async(&Query::whole(Target::batch("numbers").unwrap()))
        .await
        .unwrap();
    let s = client.batch_stream(&flight);
    assert_eq!(s.schema().fields(), batch(1).schema().fields());
    let streamed: Vec<RecordBatch> = s.try_collect().await.unwrap();
    assert_eq!(streamed, vec![batch(5), batch(7)]);
    client.remove_async("numbers").await.unwrap();
    let gone = client
        .read_batches_async("numbers", &HOST)
        .await
        .unwrap_err();
    assert_eq!(gone.kind(), devbuf::ErrorKind::NotFound, "{gone}");

    // A tonic service whose handler awaits devbuf's async client and read(..).to_async.
    let proxy = start_proxy(Proxy {
        client: client.clone(),
        root: root.to_path_buf(),
    })
    .await;
    let via = Client::connect_async(&proxy, &ClientOptions::default())
        .await
        .unwrap();
    let schema = Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
        "v",
        arrow_schema::DataType::Float32,
        false,
    )]));
    let flight = Flight {
        target: None,
        schema,
        endpoints: vec![Endpoint {
            ticket: bytes::Bytes::from_static(ARRAY.as_bytes()),
            locations: vec![],
        }],
        total_records: -1,
        total_bytes: -1,
        descriptor: None,
    };
    let batches: Vec<RecordBatch> = via.batch_stream(&flight).try_collect().await.unwrap();
    assert_eq!(batches.len(), 1);
    let values = batches[0]
        .column(0)
        .as_any()
        .downcast_ref::<Float32Array>()
        .unwrap();
    let bytes: Vec<u8> = values
        .values()
        .iter()
        .flat_map(|v| v.to_ne_bytes())
        .collect();
    assert_eq!(bytes, bytes_of(&whole));

    drop((via, client));
    tokio::time::timeout(WAIT, server.shutdown_async())
        .await
        .expect("the server stops")
        .unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn current_thread_runtime() {
    everything_on_the_callers_runtime().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_thread_runtime() {
    everything_on_the_callers_runtime().await;
}

#[test]
fn blocking_calls_on_a_current_thread_runtime_name_the_async_form() {
    let server = flight_common::serve(Path::new(FIXTURES), |_| {});
    let client = Client::connect(&server.uri(), &opts()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let e = client.read(ARRAY, .., &HOST).unwrap_err();
        assert!(e.to_string().contains("Client::read_async"), "{e}");
        let e = client.list("").unwrap_err();
        assert!(e.to_string().contains("Client::list_async"), "{e}");
        let e = Client::connect(&server.uri(), &opts()).unwrap_err();
        assert!(e.to_string().contains("Client::connect_async"), "{e}");
        // The async form works there, with the client that the blocking connect made.
        let a = client.read_async(ARRAY, .., &HOST).await.unwrap();
        assert!(a.nbytes() > 0);
    });
    // A server with a runtime of its own: its blocking wait there is an error naming
    // wait_async, not tokio's panic on a runtime started inside another.
    let own = flight_common::serve(Path::new(FIXTURES), |_| {});
    let e = rt.block_on(async { own.wait().unwrap_err() });
    assert!(e.to_string().contains("wait_async"), "{e}");
    // On a multi-thread runtime the blocking form hands its thread over and works.
    let mt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let n = mt.block_on(async {
        let c = Client::connect(&server.uri(), &opts()).unwrap();
        tokio::spawn(async move { c.read(ARRAY, .., &HOST).map(|a| a.nbytes()) })
            .await
            .unwrap()
    });
    assert!(n.unwrap() > 0);
    // And a blocking server's wait on the caller's runtime names wait_async.
    let e = mt.block_on(async {
        let mut cfg = devbuf::flight::ServerConfig::default();
        cfg.tokens.push(flight_common::TOKEN.into());
        let s = Server::start_async(cfg, "127.0.0.1:0").await.unwrap();
        s.wait().unwrap_err()
    });
    assert!(e.to_string().contains("wait_async"), "{e}");
}

enum Seen {
    Queued,
    Ended(StreamEnd),
}

/// A server whose only stream stops after its first batch until the test opens the
/// gate: the read is held mid-stream, deterministically.
async fn dropped_read_cancels_the_servers_stream() {
    let dir = TempDir::new("flight-async-cancel");
    let mut rng = random::seeded(11);
    let values = arrays::random_values(&mut rng, 64 * 64, Dtype::FLOAT32);
    let _ = random_array(
        &dir.0.join("a.zarr"),
        &[64, 64],
        &[8, 8],
        Dtype::FLOAT32,
        Scalar::from(0.0f32),
        Compressor::None,
        values,
        |_| false,
    );
    let (ev_tx, mut ev_rx) = tokio::sync::mpsc::unbounded_channel();
    let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
    let gate_rx = Mutex::new(gate_rx);
    let mut config = config(&dir.0);
    config.endpoints = 1;
    config.batch_bytes = 256;
    config.queue_depth = 1;
    config.observer = Some(Arc::new(move |e: &ServerEvent| match e {
        ServerEvent::MessageQueued { index: 1, .. } => {
            let _ = ev_tx.send(Seen::Queued);
            // Bounded: a broken test must not hang the producer forever.
            let _ = gate_rx.lock().unwrap().recv_timeout(WAIT);
        }
        ServerEvent::StreamEnded { end, .. } => {
            let _ = ev_tx.send(Seen::Ended(end.clone()));
        }
        _ => {}
    }));
    let server = Server::start_async(config, "127.0.0.1:0").await.unwrap();
    let client = Client::connect_async(&server.uri(), &opts()).await.unwrap();
    let mut read = Box::pin(client.read_async("a.zarr", .., &HOST));
    tokio::select! {
        r = &mut read => panic!("the read finished while its stream was held: {:?}", r.map(|a| a.nbytes())),
        e = tokio::time::timeout(WAIT, ev_rx.recv()) => {
            assert!(matches!(e.expect("the stream started"), Some(Seen::Queued)));
        }
    }
    assert_eq!(server.stats().active_streams, 1);
    drop(read);
    gate_tx.send(()).unwrap();
    let end = tokio::time::timeout(WAIT, async {
        loop {
            if let Some(Seen::Ended(end)) = ev_rx.recv().await {
                break end;
            }
        }
    })
    .await
    .expect("the server's stream ended after the read was dropped");
    assert_eq!(end, StreamEnd::ClientGone);
    // wait_idle blocks: on a blocking thread, with the server shared for the wait.
    let server = Arc::new(server);
    let waiting = server.clone();
    let idle = tokio::task::spawn_blocking(move || waiting.wait_idle(WAIT))
        .await
        .unwrap();
    assert!(idle, "{:?}", server.stats());
    let server = Arc::try_unwrap(server).expect("the wait is over");
    // The client still reads after the cancelled read (its stream passes the gate).
    gate_tx.send(()).unwrap();
    let a = client.read_async("a.zarr", .., &HOST).await.unwrap();
    assert_eq!(a.shape(), &[64, 64]);
    drop(client);
    let _ = tokio::time::timeout(WAIT, server.shutdown_async()).await;
}

#[tokio::test(flavor = "current_thread")]
async fn dropped_read_cancels_the_servers_stream_current_thread() {
    dropped_read_cancels_the_servers_stream().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_read_cancels_the_servers_stream_multi_thread() {
    dropped_read_cancels_the_servers_stream().await;
}

/// The client's async futures are `Send` (a multi-thread runtime can spawn them, a tonic
/// handler can await them).
#[allow(dead_code)]
fn futures_are_send(c: &Client) {
    fn send<T: Send>(_: T) {}
    send(c.read_async(ARRAY, .., &HOST));
    send(c.read_chunks_async(ARRAY, None, &HOST));
    send(c.read_batches_async("x", &HOST));
    send(c.put_async("x", Vec::<Batch>::new()));
    send(c.list_async(""));
    send(c.batch_stream(&Flight {
        target: None,
        schema: Arc::new(arrow_schema::Schema::empty()),
        endpoints: vec![],
        total_records: 0,
        total_bytes: 0,
        descriptor: None,
    }));
}
