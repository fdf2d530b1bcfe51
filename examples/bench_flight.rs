//! bench_flight: a localhost Arrow Flight DoGet of one array (1 GiB of float32 by
//! default, uncompressed, 4 MiB chunks, page cache warm) from devbuf's server, read by
//!
//! * arrow-flight's plain `FlightClient` (every endpoint at once, record batches
//!   collected), over one channel with tonic's defaults, and over a connection per
//!   endpoint with devbuf's window sizes;
//! * devbuf's client into host memory: the chunk batches as received (`read_chunks`)
//!   and the array assembled (`read`);
//! * devbuf's client into device memory (when there is a GPU): the same two;
//! * `pyarrow.flight` (when `python3` with pyarrow is there): `scripts/flight_check.py
//!   bench`, one thread per endpoint;
//!
//! and prints a table (best of `--repeat` runs, GB/s of array bytes).
//!
//! ```sh
//! cargo run --release --features zarr,object_store,flight --example bench_flight -- \
//!     [--gib 1] [--chunk-mib 4] [--endpoints 8] [--repeat 3] [--dir DIR] [--device 0] \
//!     [--pyarrow-script scripts/flight_check.py] [--python python3]
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use devbuf::flight::arrow_flight::flight_service_client::FlightServiceClient;
use devbuf::flight::arrow_flight::{FlightClient, FlightDescriptor};
use devbuf::flight::{Client, ClientOptions, Server, ServerConfig, generate_token};
use devbuf::zarr::{ArraySpec, ZarrArray};
use devbuf::zarr::{BufferPrototype, Dtype, NDBuffer, Order};
use futures::TryStreamExt;

mod common;
#[path = "common/stats.rs"]
mod stats;

use stats::time_best;

fn main() -> ExitCode {
    common::exit(run())
}

/// bench_flight: a localhost Arrow Flight DoGet of one array from devbuf's server, read
/// by arrow-flight's client, devbuf's client (host and device) and pyarrow.flight; prints
/// the best of `--repeat` runs in GB/s of array bytes.
#[derive(Parser)]
#[command(name = "bench_flight")]
struct Args {
    /// GiB of float32 in the array, in (0, 64].
    #[arg(long, default_value_t = 1.0)]
    gib: f64,
    /// MiB per chunk (whole rows), 1 to 512.
    #[arg(long, default_value_t = 4)]
    chunk_mib: usize,
    /// Endpoints the server offers (and the clients read at once).
    #[arg(long, default_value_t = 8)]
    endpoints: usize,
    /// Timed runs after a warm-up (at least 1).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Where the array is written (and kept); a temporary directory otherwise.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The GPU the device rows read into.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// `scripts/flight_check.py`, for the pyarrow.flight row.
    #[arg(long = "pyarrow-script")]
    script: Option<PathBuf>,
    /// The Python with pyarrow that runs the script.
    #[arg(long, default_value = "python3")]
    python: String,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn parse() -> Result<Args, String> {
    let mut a = Args::parse();
    a.repeat = a.repeat.max(1);
    if !(a.gib > 0.0 && a.gib <= 64.0) || a.chunk_mib == 0 || a.chunk_mib > 512 {
        return Err("--gib must be in (0, 64], --chunk-mib in 1..=512".into());
    }
    Ok(a)
}

/// Columns of the array: rows of 16 KiB.
const COLS: u64 = 4096;

/// Writes (or reuses) the benchmark array: float32, `rows` x 4096, chunks of whole
/// rows, uncompressed, values from a xorshift generator.
fn make_array(path: &Path, rows: u64, chunk_rows: u64) -> Result<ZarrArray, String> {
    if let Ok(a) = ZarrArray::open(path) {
        if a.shape() == [rows, COLS] && a.metadata().chunk_shape == [chunk_rows, COLS] {
            return Ok(a);
        }
        std::fs::remove_dir_all(path).map_err(|e| e.to_string())?;
    }
    let spec = ArraySpec::new(&[rows, COLS], &[chunk_rows, COLS], Dtype::FLOAT32);
    let a = ZarrArray::create(path, &spec).map_err(|e| e.to_string())?;
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut r = 0;
    while r < rows {
        let n = chunk_rows.min(rows - r);
        let vals: Vec<u8> = (0..n * COLS)
            .flat_map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / 1024.0).to_ne_bytes()
            })
            .collect();
        let nd =
            NDBuffer::from_memory(vals, &[n as usize, COLS as usize], Dtype::FLOAT32, Order::C)
                .map_err(|e| e.to_string())?;
        a.write_subset(&[r, 0], &nd).map_err(|e| e.to_string())?;
        r += n;
    }
    Ok(a)
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn host_checksum(nd: &NDBuffer) -> Result<u64, String> {
    let b = nd
        .to_prototype(&BufferPrototype::Host)
        .and_then(|h| h.to_buffer())
        .and_then(|b| b.to_host())
        .map_err(|e| e.to_string())?;
    Ok(fnv(&b))
}

/// arrow-flight's FlightClient: every endpoint at once, batches collected; returns the
/// rows (chunks) received.
fn plain(
    rt: &tokio::runtime::Runtime,
    uri: &str,
    token: &str,
    tuned: bool,
) -> Result<usize, String> {
    rt.block_on(async {
        let mut ep = devbuf::flight::tonic::transport::Endpoint::from_shared(
            uri.replace("grpc://", "http://"),
        )
        .map_err(|e| e.to_string())?;
        if tuned {
            ep = ep
                .initial_stream_window_size(Some(16 << 20))
                .initial_connection_window_size(Some(64 << 20))
                .tcp_nodelay(true);
        }
        let channel = ep.connect().await.map_err(|e| e.to_string())?;
        let make = |channel: devbuf::flight::tonic::transport::Channel| {
            let inner = FlightServiceClient::new(channel).max_decoding_message_size(usize::MAX);
            let mut c = FlightClient::new_from_inner(inner);
            c.add_header("authorization", &format!("Bearer {token}"))
                .map(|_| c)
                .map_err(|e| e.to_string())
        };
        let mut c = make(channel.clone())?;
        let info = c
            .get_flight_info(FlightDescriptor::new_path(vec![
                "zarr".into(),
                "bench.zarr".into(),
            ]))
            .await
            .map_err(|e| e.to_string())?;
        let fetches = info.endpoint.iter().map(|e| {
            let ticket = e.ticket.clone();
            let (ep, channel, make) = (&ep, &channel, &make);
            async move {
                // As devbuf's client does: a connection per endpoint.
                let ch = if tuned {
                    ep.connect().await.map_err(|e| e.to_string())?
                } else {
                    channel.clone()
                };
                let mut c = make(ch)?;
                let t = ticket.ok_or("an endpoint without a ticket")?;
                let batches: Vec<arrow_array::RecordBatch> = c
                    .do_get(t)
                    .await
                    .map_err(|e| e.to_string())?
                    .try_collect()
                    .await
                    .map_err(|e| e.to_string())?;
                Ok::<usize, String>(batches.iter().map(|b| b.num_rows()).sum())
            }
        });
        let rows: Vec<usize> = futures::future::try_join_all(fetches).await?;
        Ok(rows.iter().sum())
    })
}

fn pyarrow(a: &Args, uri: &str, token: &str) -> Result<f64, String> {
    let script = match &a.script {
        Some(s) => s.clone(),
        None => ["scripts/flight_check.py", "../scripts/flight_check.py"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .ok_or("scripts/flight_check.py not found (give --pyarrow-script)")?,
    };
    let out = std::process::Command::new(&a.python)
        .arg(&script)
        .args([
            "--uri",
            uri,
            "--token",
            token,
            "--path",
            "bench.zarr",
            "--repeat",
        ])
        .arg(a.repeat.to_string())
        .arg("bench")
        .output()
        .map_err(|e| format!("{}: {e}", a.python))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(err.lines().last().unwrap_or("failed").to_string());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(text.lines().last().unwrap_or(""))
        .map_err(|e| format!("pyarrow bench output: {e}"))?;
    v.get("seconds")
        .and_then(|s| s.as_f64())
        .ok_or_else(|| "pyarrow bench output without seconds".into())
}

fn run() -> Result<(), String> {
    let a = parse()?;
    let chunk_rows = ((a.chunk_mib as u64) << 20) / (COLS * 4);
    let rows = (((a.gib * (1u64 << 30) as f64) as u64) / (COLS * 4)).max(chunk_rows);
    let rows = rows.div_ceil(chunk_rows) * chunk_rows;
    let bytes = (rows * COLS * 4) as f64;
    let tmp;
    let dir = match &a.dir {
        Some(d) => d.clone(),
        None => {
            tmp = std::env::temp_dir().join(format!("devbuf-bench-flight-{}", std::process::id()));
            tmp.clone()
        }
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let t = Instant::now();
    let local = make_array(&dir.join("bench.zarr"), rows, chunk_rows)?;
    eprintln!(
        "array: {rows} x {COLS} float32 ({:.2} GiB) in {} MiB chunks at {} ({:.1} s to prepare)",
        bytes / (1u64 << 30) as f64,
        a.chunk_mib,
        dir.display(),
        t.elapsed().as_secs_f64()
    );
    let token = generate_token().map_err(|e| e.to_string())?;
    let mut cfg = ServerConfig::default();
    cfg.root = Some(dir.clone());
    cfg.tokens.push(token.clone());
    cfg.endpoints = a.endpoints;
    cfg.runtime_threads = 8;
    let server = Server::start(cfg, "127.0.0.1:0").map_err(|e| e.to_string())?;
    let uri = server.uri();
    let mut options = ClientOptions::default();
    options.token = Some(token.clone());
    options.concurrency = a.endpoints;
    let client = Client::connect(&uri, &options).map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let e = |e: devbuf::Error| e.to_string();
    let want = host_checksum(&local.read(..).to(&BufferPrototype::Host).map_err(e)?)?;
    let mut table: Vec<(String, String, Result<f64, String>)> = Vec::new();

    let chunks = (rows / chunk_rows) as usize;
    for (label, tuned) in [
        ("arrow-flight FlightClient (default channel)", false),
        (
            "arrow-flight FlightClient (devbuf's window sizes, a connection per endpoint)",
            true,
        ),
    ] {
        let r = time_best(a.repeat, || plain(&rt, &uri, &token, tuned)).and_then(|(s, n)| {
            if n == chunks {
                Ok(s)
            } else {
                Err(format!("{n} of {chunks} chunks"))
            }
        });
        table.push((label.into(), "host batches".into(), r));
    }
    let host = BufferPrototype::Host;
    let r = time_best(a.repeat, || {
        client.read_chunks("bench.zarr", None, &host).map_err(e)
    })
    .map(|(s, _)| s);
    table.push((
        "devbuf Client::read_chunks".into(),
        "host batches".into(),
        r,
    ));
    let r = time_best(a.repeat, || client.read("bench.zarr", .., &host).map_err(e)).and_then(
        |(s, nd)| {
            if host_checksum(&nd)? == want {
                Ok(s)
            } else {
                Err("wrong data".into())
            }
        },
    );
    table.push(("devbuf Client::read".into(), "host array".into(), r));
    // The same client with HTTP/2's default frame size (what tonic's channel uses) and
    // two runtime threads (the default before 1 MiB frames): the two changes' effect.
    let mut small_options = options.clone();
    small_options.max_frame_bytes = 16 << 10;
    small_options.runtime_threads = 2;
    let small = Client::connect(&uri, &small_options).map_err(|e| e.to_string())?;
    let r = time_best(a.repeat, || {
        small.read_chunks("bench.zarr", None, &host).map_err(e)
    })
    .map(|(s, _)| s);
    table.push((
        "devbuf Client::read_chunks, 16 KiB frames, 2 runtime threads".into(),
        "host batches".into(),
        r,
    ));
    drop(small);
    let dev = BufferPrototype::Device(a.device);
    if devbuf::cuda::is_available() {
        let r = time_best(a.repeat, || {
            client.read_chunks("bench.zarr", None, &dev).map_err(e)
        })
        .map(|(s, _)| s);
        table.push((
            "devbuf Client::read_chunks".into(),
            format!("device {} batches", a.device),
            r,
        ));
        let r = time_best(a.repeat, || client.read("bench.zarr", .., &dev).map_err(e)).and_then(
            |(s, nd)| {
                if host_checksum(&nd)? == want {
                    Ok(s)
                } else {
                    Err("wrong data".into())
                }
            },
        );
        table.push((
            "devbuf Client::read".into(),
            format!("device {} array", a.device),
            r,
        ));
    } else {
        let why = devbuf::cuda::unavailable_reason().unwrap_or_default();
        table.push((
            "devbuf Client::read".into(),
            "device".into(),
            Err(format!("no GPU: {why}")),
        ));
    }
    table.push((
        "pyarrow.flight (thread per endpoint)".into(),
        "host tables".into(),
        pyarrow(&a, &uri, &token),
    ));

    let plain_rate = table
        .first()
        .and_then(|r| r.2.as_ref().ok())
        .map(|s| stats::gbs(bytes, *s));
    println!(
        "\nbench_flight: localhost DoGet of {:.2} GiB ({} endpoints, {} MiB chunks, best of {})\n",
        bytes / (1u64 << 30) as f64,
        a.endpoints,
        a.chunk_mib,
        a.repeat
    );
    println!("| client | into | seconds | GB/s | vs FlightClient |");
    println!("|---|---|---:|---:|---:|");
    for (who, into, r) in &table {
        match r {
            Ok(s) => {
                let gbps = stats::gbs(bytes, *s);
                let rel = plain_rate
                    .map(|p| format!("{:.2}x", gbps / p))
                    .unwrap_or_default();
                println!("| {who} | {into} | {s:.3} | {gbps:.2} | {rel} |");
            }
            Err(why) => println!("| {who} | {into} | n/a | n/a | {why} |"),
        }
    }
    drop(server);
    if a.dir.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}
