//! The HTTP/2 service under a client's connections. Plain `grpc://` connections use a
//! hyper HTTP/2 client of their own: tonic's channel cannot change the largest frame
//! it accepts (HTTP/2's default, 16 KiB), so a server would send a DoGet body of 1 GiB
//! in 65536 frames, one write each; gRPC C++ clients (pyarrow.flight) raise the limit
//! as they measure the connection. `grpc+tls://` connections keep tonic's channel
//! (rustls).

use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tonic::body::Body;
use tonic::codegen::{BoxFuture, Service, StdError, http};
use tonic::transport::Channel;

/// Flow-control window of each stream.
pub(crate) const STREAM_WINDOW: u32 = 16 << 20;
/// Flow-control window of each connection.
pub(crate) const CONNECTION_WINDOW: u32 = 64 << 20;
/// Keep-alive pings on a connection with streams open.
pub(crate) const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// How long a ping may go unanswered before the connection counts as dead.
pub(crate) const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// One client connection's HTTP/2 service: tonic's channel (TLS) or a hyper client
/// (plain; each has its own pool, so a fetch slot keeps a connection of its own).
#[derive(Clone, Debug)]
pub(crate) enum Transport {
    Tonic(Channel),
    Plain(Box<HyperClient<HttpConnector, Body>>),
}

impl Service<http::Request<Body>> for Transport {
    type Response = http::Response<Body>;
    type Error = StdError;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StdError>> {
        match self {
            Transport::Tonic(c) => c.poll_ready(cx).map_err(Into::into),
            Transport::Plain(h) => h.poll_ready(cx).map_err(Into::into),
        }
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        match self {
            Transport::Tonic(c) => {
                let f = c.call(req);
                Box::pin(async move { f.await.map_err(Into::into) })
            }
            Transport::Plain(h) => {
                let f = h.call(req);
                Box::pin(async move { Ok(f.await?.map(Body::new)) })
            }
        }
    }
}

/// A plain HTTP/2 transport to `origin` (`http://host:port`), after checking that the
/// server accepts TCP connections within the connect timeout (the hyper client itself
/// connects at the first call). `connect_timeout` and `max_frame_bytes`: the client's
/// [`ClientOptions`](super::ClientOptions)' settings.
pub(crate) async fn plain(
    origin: &http::Uri,
    connect_timeout: Duration,
    max_frame_bytes: u32,
) -> Result<Transport, StdError> {
    let host = origin
        .host()
        .ok_or_else(|| format!("{origin}: no host"))?
        .trim_start_matches('[')
        .trim_end_matches(']');
    let port = origin.port_u16().unwrap_or(80);
    match tokio::time::timeout(
        connect_timeout,
        tokio::net::TcpStream::connect((host, port)),
    )
    .await
    {
        Ok(Ok(_probe)) => {}
        Ok(Err(e)) => return Err(e.into()),
        Err(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no connection within {:?}", connect_timeout),
            )
            .into());
        }
    }
    let mut tcp = HttpConnector::new();
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(connect_timeout));
    let client = HyperClient::builder(TokioExecutor::new())
        .http2_only(true)
        .http2_max_frame_size(max_frame_bytes)
        .http2_initial_stream_window_size(STREAM_WINDOW)
        .http2_initial_connection_window_size(CONNECTION_WINDOW)
        .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .http2_keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
        .http2_keep_alive_while_idle(false)
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(None::<Duration>)
        .build(tcp);
    Ok(Transport::Plain(Box::new(client)))
}
