//! Reads zarr arrays from an S3-compatible server on this machine (`s3s-fs` on
//! 127.0.0.1) into host and device memory, beside the raw I/O ceiling and the peers, in
//! one run:
//!
//! ```text
//! cargo run --release --features zarr,object_store,flight --example bench_object_store -- \
//!     [--mib 512] [--repeat 5] [--concurrency 64] [--only c1m,sh64k] [--no-peers]
//! ```
//!
//! * arrays (float32, `--mib` MiB each, written by devbuf through the server): `c1m`,
//!   1 MiB chunks, zstd-1; `sh64k`, 4 MiB shards of 64 KiB inner chunks, zstd-1;
//! * **raw GET**: an `object_store` GET loop over the same objects (whole objects, the
//!   same concurrency), the I/O ceiling: its figure is the array's decoded bytes over
//!   the loop's time, so it compares with the reads directly;
//! * **devbuf**: `ZarrArray::open(url).read(..).to(..)` into host memory and, with a GPU,
//!   into device memory;
//! * **peers** (`scripts/peers/object_store.py`, when Python has them): zarr-python on
//!   obstore, tensorstore's S3 driver, and with cupy each followed by an upload.
//!
//! Figures are GB/s of decoded bytes (1 GB = 1e9 B), the median of `--repeat` runs after
//! a warm-up. `s3s-fs` is found through `DEVBUF_S3S_FS`, next to this binary, or on
//! `PATH` (`cargo install s3s-fs@0.14.1 --locked --features binary`).

#[path = "common/mod.rs"]
mod common;
#[path = "common/field.rs"]
mod field;
#[path = "common/stats.rs"]
mod stats;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::{ArgAction, Parser};
use devbuf::cuda;
use devbuf::zarr::object_store::{ObjectStoreOptions, UrlStore};
use devbuf::zarr::{ArraySpec, Compressor, ZarrArray};
use devbuf::zarr::{BufferPrototype, Dtype};
use futures::StreamExt;
use stats::gbs;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const KEY: &str = "AKIADEVBUFBENCH";
const SECRET: &str = "devbuf-bench-secret";
const BUCKET: &str = "bench";

/// Reads zarr arrays from an S3-compatible server on this machine (`s3s-fs`) into host
/// and device memory, beside the raw GET ceiling and the peers; GB/s of decoded bytes,
/// the median of `--repeat` runs after a warm-up.
#[derive(Parser)]
#[command(name = "bench_object_store")]
struct Args {
    /// MiB of float32 per array (a positive multiple of 4).
    #[arg(long, default_value_t = 512)]
    mib: usize,
    /// Timed runs after a warm-up (positive).
    #[arg(long, default_value_t = 5)]
    repeat: usize,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Only these arrays (c1m, sh64k).
    #[arg(long, value_name = "A,B", value_delimiter = ',')]
    only: Option<Vec<String>>,
    /// Skips the peers (zarr-python, tensorstore).
    #[arg(long = "no-peers", action = ArgAction::SetFalse)]
    peers: bool,
}

fn args() -> Res<Args> {
    let a = Args::parse();
    if a.mib == 0 || a.mib % 4 != 0 || a.repeat == 0 {
        return Err("--mib must be a positive multiple of 4, --repeat positive".into());
    }
    Ok(a)
}

fn s3s_fs() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("DEVBUF_S3S_FS") {
        return Some(PathBuf::from(p));
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("s3s-fs")));
    let path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("s3s-fs"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    beside.into_iter().chain(path).find(|p| p.is_file())
}

/// The server process, stopped on drop.
struct Server(Child, PathBuf);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

fn start_server(bin: &Path) -> Res<(Server, u16)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let root = std::env::temp_dir().join(format!("devbuf-bench-s3-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join(BUCKET))?;
    let child = Command::new(bin)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--access-key", KEY, "--secret-key", SECRET])
        .arg(&root)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let server = Server(child, root);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err("s3s-fs did not start listening within 20 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((server, port))
}

/// Seconds of `f`: one warm-up, then the median of `repeat` runs.
fn time(repeat: usize, f: &mut dyn FnMut() -> Res<()>) -> Res<f64> {
    stats::time_median(repeat, f)
}

/// Every object under `prefix` and its size.
fn objects(
    store: &UrlStore,
    rt: &tokio::runtime::Runtime,
    prefix: &str,
) -> Res<Vec<(object_store::path::Path, u64)>> {
    let os = store.object_store().clone();
    let p = object_store::path::Path::from(prefix);
    let metas: Vec<object_store::ObjectMeta> = rt.block_on(async move {
        os.list(Some(&p))
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()
    })?;
    Ok(metas
        .into_iter()
        .filter(|m| !m.location.as_ref().ends_with("zarr.json"))
        .map(|m| (m.location, m.size))
        .collect())
}

/// One pass of the raw GET loop: every object, `concurrency` at a time. Returns bytes.
fn raw_get(
    store: &UrlStore,
    rt: &tokio::runtime::Runtime,
    objs: &[(object_store::path::Path, u64)],
    concurrency: usize,
) -> Res<u64> {
    let os = store.object_store().clone();
    let paths: Vec<object_store::path::Path> = objs.iter().map(|(p, _)| p.clone()).collect();
    let total = rt.block_on(async move {
        let mut s = futures::stream::iter(paths)
            .map(|p| {
                let os = os.clone();
                async move {
                    use object_store::ObjectStoreExt;
                    os.get(&p).await?.bytes().await.map(|b| b.len() as u64)
                }
            })
            .buffer_unordered(concurrency);
        let mut total = 0u64;
        while let Some(n) = s.next().await {
            total += n?;
        }
        Ok::<u64, object_store::Error>(total)
    })?;
    Ok(total)
}

struct Row {
    name: String,
    ratio: f64,
    write: f64,
    raw: f64,
    host: f64,
    device: Option<f64>,
    peers: Vec<(String, Option<f64>, String)>,
}

fn main() -> std::process::ExitCode {
    common::exit(run())
}

fn run() -> Res<()> {
    let a = args()?;
    let Some(bin) = s3s_fs() else {
        println!(
            "bench_object_store: no s3s-fs (cargo install s3s-fs@0.14.1 --locked --features \
             binary, or set DEVBUF_S3S_FS): nothing measured"
        );
        return Ok(());
    };
    let (_server, port) = start_server(&bin)?;
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut opts = ObjectStoreOptions::default();
    opts.config = [
        ("aws_endpoint", endpoint.as_str()),
        ("aws_allow_http", "true"),
        ("aws_region", "us-east-1"),
        ("aws_access_key_id", KEY),
        ("aws_secret_access_key", SECRET),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .to_vec();
    opts.concurrency = a.concurrency;
    let gpu = cuda::is_available();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "bench_object_store: {} MiB float32 arrays in s3s-fs at {endpoint}, {cores} cores, {}, \
         concurrency {}, median of {} after a warm-up",
        a.mib,
        if gpu {
            let ctx = cuda::Context::new(0)?;
            format!("GPU {}", ctx.properties().name)
        } else {
            "no GPU".to_string()
        },
        a.concurrency,
        a.repeat
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores.clamp(2, 8))
        .enable_all()
        .build()?;
    let rows_n = a.mib * 256; // rows of 1024 float32
    let cases = [
        (
            "c1m",
            ArraySpec::new(&[rows_n as u64, 1024], &[256, 1024], Dtype::FLOAT32)
                .with_compressor(Compressor::Zstd { level: 1 }),
        ),
        (
            "sh64k",
            ArraySpec::new(&[rows_n as u64, 1024], &[1024, 1024], Dtype::FLOAT32)
                .with_subchunks(&[128, 128])
                .with_compressor(Compressor::Zstd { level: 1 }),
        ),
    ];
    let data = field::field(rows_n, 1024);
    let decoded = (rows_n * 1024 * 4) as f64;
    let mut rows = Vec::new();
    for (name, spec) in cases {
        if a.only
            .as_ref()
            .is_some_and(|o| !o.iter().any(|x| x == name))
        {
            continue;
        }
        let url = format!("s3://{BUCKET}/{name}");
        let t = Instant::now();
        let arr = ZarrArray::create(
            devbuf::zarr::Location::Url(url.to_string(), opts.clone()),
            &spec,
        )?;
        arr.write_subset(&[0, 0], &data)?;
        let write = gbs(decoded, t.elapsed().as_secs_f64());
        let store = UrlStore::open(&format!("s3://{BUCKET}"), &opts)?;
        let objs = objects(&store, &rt, name)?;
        let stored: u64 = objs.iter().map(|(_, n)| n).sum();
        let raw_t = time(a.repeat, &mut || {
            let got = raw_get(&store, &rt, &objs, a.concurrency)?;
            if got != stored {
                return Err(format!("raw GET: {got} bytes, expected {stored}").into());
            }
            Ok(())
        })?;
        let arr = ZarrArray::open(devbuf::zarr::Location::Url(url.to_string(), opts.clone()))?;
        let host_t = time(a.repeat, &mut || {
            arr.read(..).to(&BufferPrototype::Host)?;
            Ok(())
        })?;
        let want = arr
            .read(..)
            .to(&BufferPrototype::Host)?
            .to_buffer()?
            .to_host()?;
        if want != data.to_buffer()?.to_host()? {
            return Err(format!("{name}: the host read differs from what was written").into());
        }
        let device = if gpu {
            let dev = arr
                .read(..)
                .to(&BufferPrototype::Device(0))?
                .to_buffer()?
                .to_host()?;
            if dev != want {
                return Err(format!("{name}: the device read differs from the host read").into());
            }
            Some(gbs(
                decoded,
                time(a.repeat, &mut || {
                    arr.read(..).to(&BufferPrototype::Device(0))?;
                    Ok(())
                })?,
            ))
        } else {
            None
        };
        let crc = crc32c::crc32c(&want);
        let peers = if a.peers {
            run_peers(&endpoint, name, a.repeat, crc)
        } else {
            Vec::new()
        };
        rows.push(Row {
            name: name.to_string(),
            ratio: decoded / stored as f64,
            write,
            raw: gbs(decoded, raw_t),
            host: gbs(decoded, host_t),
            device,
            peers,
        });
    }
    print_table(&rows);
    Ok(())
}

/// The peers' figures on one array: `(peer, GB/s or None, note)`.
fn run_peers(
    endpoint: &str,
    name: &str,
    repeat: usize,
    crc: u32,
) -> Vec<(String, Option<f64>, String)> {
    let script = [
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/peers/object_store.py"),
        std::env::current_exe()
            .ok()
            .and_then(|e| Some(e.parent()?.parent()?.join("scripts/peers/object_store.py")))
            .unwrap_or_default(),
    ]
    .into_iter()
    .find(|p| p.is_file());
    let Some(script) = script else {
        return vec![(
            "peers".into(),
            None,
            "scripts/peers/object_store.py not found".into(),
        )];
    };
    let out = Command::new("python3")
        .arg(script)
        .args(["--endpoint", endpoint, "--bucket", BUCKET, "--array", name])
        .args([
            "--repeat",
            &repeat.to_string(),
            "--crc32c",
            &crc.to_string(),
        ])
        .env("AWS_ACCESS_KEY_ID", KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("AWS_REGION", "us-east-1")
        .stderr(Stdio::inherit())
        .output();
    let out = match out {
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        Err(e) => return vec![("peers".into(), None, format!("python3: {e}"))],
    };
    out.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| {
            (
                v["peer"].as_str().unwrap_or("?").to_string(),
                v["gbs"].as_f64(),
                v["note"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn print_table(rows: &[Row]) {
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    println!(
        "\n| array | ratio | devbuf write | raw GET (ceiling) | devbuf -> host | devbuf -> device | host / raw | device / raw |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {:.2} | {} |",
            r.name,
            r.ratio,
            r.write,
            r.raw,
            r.host,
            f(r.device),
            r.host / r.raw,
            r.device.map_or("-".into(), |d| format!("{:.2}", d / r.raw)),
        );
    }
    println!(
        "\n| array | peer | peer GB/s | devbuf -> host / peer | devbuf -> device / peer | note |"
    );
    println!("|---|---|---|---|---|---|");
    for r in rows {
        for (peer, v, note) in &r.peers {
            println!(
                "| {} | {peer} | {} | {} | {} | {note} |",
                r.name,
                f(*v),
                v.map_or("-".into(), |v| format!("{:.1}x", r.host / v)),
                match (v, r.device) {
                    (Some(v), Some(d)) => format!("{:.1}x", d / v),
                    _ => "-".into(),
                },
            );
        }
    }
}
