//! Helpers of the Flight tests (tests/flight_*.rs, tests/gpu/flight.rs): servers on
//! 127.0.0.1 ephemeral ports, zarr arrays of random data, the bytes of an array, raw
//! arrow-flight clients for calls devbuf's client does not make.

#![allow(dead_code)]

use std::path::Path;

use devbuf::flight::arrow_flight::flight_service_client::FlightServiceClient;
use devbuf::flight::tonic::transport::Channel;
use devbuf::flight::{ClientOptions, Server, ServerConfig};
use devbuf::zarr::{ArraySpec, Compressor, ZarrArray};
use devbuf::zarr::{Dtype, NDBuffer, Scalar};

/// The token of the test servers.
pub const TOKEN: &str = "flight-test-token-7f3a";

/// The configuration of a test server of `root`: the test token, 2 runtime threads.
pub fn config(root: &Path) -> ServerConfig {
    let mut cfg = ServerConfig::default();
    cfg.root = Some(root.to_path_buf());
    cfg.tokens.push(TOKEN.to_string());
    cfg.runtime_threads = 2;
    cfg
}

/// A server of `root` with the test token, `f` adjusting the configuration.
pub fn serve(root: &Path, f: impl FnOnce(&mut ServerConfig)) -> Server {
    let mut cfg = config(root);
    f(&mut cfg);
    Server::start(cfg, "127.0.0.1:0").expect("start a Flight server")
}

/// Client options carrying `token`.
pub fn with_token(token: &str) -> ClientOptions {
    let mut o = ClientOptions::default();
    o.token = Some(token.to_string());
    o
}

/// Client options carrying the test token.
pub fn opts() -> ClientOptions {
    with_token(TOKEN)
}

/// The values of an array as C-order native bytes (one copy to the host for device
/// arrays).
pub fn bytes_of(nd: &NDBuffer) -> Vec<u8> {
    nd.to_prototype(&devbuf::zarr::BufferPrototype::Host)
        .unwrap()
        .to_buffer()
        .unwrap()
        .to_host()
        .unwrap()
        .to_vec()
}

/// A zarr v3 array at `path` of random `values` (C-order native bytes of `shape`),
/// written chunk by chunk except every chunk whose index passes `skip` (left missing:
/// it reads as the fill value).
#[allow(clippy::too_many_arguments)]
pub fn random_array(
    path: &Path,
    shape: &[u64],
    chunks: &[u64],
    dtype: Dtype,
    fill: Scalar,
    compressor: Compressor,
    values: Vec<u8>,
    skip: impl Fn(&[u64]) -> bool,
) -> ZarrArray {
    let spec = ArraySpec::new(shape, chunks, dtype)
        .with_fill_value(fill)
        .with_compressor(compressor);
    let a = ZarrArray::create(path, &spec).expect("create a zarr array");
    let ushape: Vec<usize> = shape.iter().map(|&n| n as usize).collect();
    let full = NDBuffer::from_memory(values, &ushape, dtype, devbuf::zarr::Order::C).unwrap();
    let grid: Vec<u64> = shape
        .iter()
        .zip(chunks)
        .map(|(&s, &c)| s.div_ceil(c))
        .collect();
    let n: u64 = grid.iter().product();
    for lin in 0..n {
        let mut idx = vec![0u64; grid.len()];
        let mut rem = lin;
        for d in (0..grid.len()).rev() {
            idx[d] = rem % grid[d];
            rem /= grid[d];
        }
        if skip(&idx) {
            continue;
        }
        let sel: Vec<devbuf::zarr::AxisSel> = idx
            .iter()
            .zip(chunks.iter().zip(shape))
            .map(|(&i, (&c, &s))| ((i * c) as usize..((i + 1) * c).min(s) as usize).into())
            .collect();
        let part = full.get(&sel).unwrap();
        let start: Vec<u64> = idx.iter().zip(chunks).map(|(&i, &c)| i * c).collect();
        a.write_subset(&start, &part).expect("write a chunk");
    }
    a
}

/// A raw arrow-flight gRPC client of a server (no token attached).
pub fn raw_client(rt: &tokio::runtime::Runtime, uri: &str) -> FlightServiceClient<Channel> {
    let http = uri.replace("grpc://", "http://");
    rt.block_on(async {
        let ch = Channel::from_shared(http).unwrap().connect().await.unwrap();
        FlightServiceClient::new(ch).max_decoding_message_size(1 << 30)
    })
}

/// A request carrying `authorization: <value>` (none when `None`).
pub fn with_auth<T>(msg: T, value: Option<&str>) -> devbuf::flight::tonic::Request<T> {
    let mut r = devbuf::flight::tonic::Request::new(msg);
    if let Some(v) = value {
        r.metadata_mut().insert("authorization", v.parse().unwrap());
    }
    r
}

/// `Bearer <TOKEN>`.
pub fn bearer() -> String {
    format!("Bearer {TOKEN}")
}
