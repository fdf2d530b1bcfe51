//! An Arrow Flight client of `flight_server` (the second terminal; see docs/flight.md).
//!
//! ```sh
//! cargo run --release --features zarr,object_store,flight --example flight_client -- \
//!     --uri grpc://127.0.0.1:8815 --token-file /tmp/flight.token [--tls-ca cert.pem] \
//!     [--tls-domain NAME] \
//!     [--device N] COMMAND
//! ```
//!
//! Commands:
//! * `list`: every flight the server offers (arrays and batches), with its endpoints;
//! * `read PATH [START:END ...]`: reads an array (or a box of it: one range per axis),
//!   into the host or, with `--device N`, into GPU N's memory, and prints its shape, a
//!   checksum and the rate;
//! * `demo`: checks the arrays `flight_server --demo` writes against the formulas they
//!   were written from (the whole arrays, boxes and stepped selections, on the host and
//!   with `--device N` on a GPU), then uploads a record batch (DoPut) and reads it back.
//!   Exits non-zero on any difference.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{Float64Array, Int32Array, RecordBatch, StringArray};
use clap::{Parser, Subcommand};
use devbuf::flight::{Batch, Client, ClientOptions, Target, read_token_file};
use devbuf::zarr::{AxisSel, BufferPrototype, NDBuffer, Slice};

mod common;

fn main() -> ExitCode {
    // `RUST_LOG=info` logs devbuf's tracing spans and events (calls, streams, reads).
    common::progress::init_logging();
    common::exit(run())
}

/// An Arrow Flight client of `flight_server` (or any devbuf Flight server).
#[derive(Parser)]
#[command(name = "flight_client")]
struct Cli {
    /// The server: grpc://HOST:PORT or grpc+tls://HOST:PORT.
    #[arg(long, global = true, value_name = "URI")]
    uri: Option<String>,
    /// A file holding the bearer token (as `flight_server --token-file` writes it).
    #[arg(long, global = true, value_name = "PATH", conflicts_with = "token")]
    token_file: Option<PathBuf>,
    /// The bearer token.
    #[arg(long, global = true, value_name = "T")]
    token: Option<String>,
    /// A certificate (PEM) to trust for TLS, e.g. `flight_server --tls-self-signed`'s.
    #[arg(long, global = true, value_name = "PEM")]
    tls_ca: Option<PathBuf>,
    /// The name the server's certificate must carry (by default the URI's host).
    #[arg(long, global = true, value_name = "NAME")]
    tls_domain: Option<String>,
    /// Reads into GPU N's memory instead of host memory.
    #[arg(long, global = true, value_name = "N")]
    device: Option<usize>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Every flight the server offers (arrays and batches), with its endpoints.
    List,
    /// Reads an array (or a box of it: one START:END range per axis) and prints its
    /// shape, a checksum and the rate.
    Read {
        /// The array's path under the server's root.
        path: String,
        /// One START:END range per axis.
        #[arg(value_name = "START:END")]
        ranges: Vec<String>,
    },
    /// Checks the arrays `flight_server --demo` writes against the formulas they were
    /// written from, then uploads a record batch (DoPut) and reads it back.
    Demo,
}

fn run() -> Result<(), String> {
    let cli = Cli::parse();
    let mut options = ClientOptions::default();
    if let Some(t) = cli.token {
        options.token = Some(t);
    }
    if let Some(p) = &cli.token_file {
        options.token = Some(read_token_file(p).map_err(|e| e.to_string())?);
    }
    if let Some(p) = &cli.tls_ca {
        let pem = std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
        options.tls_ca = Some(pem);
    }
    options.tls_domain = cli.tls_domain;
    let device = cli.device;
    let uri = cli
        .uri
        .ok_or("the server's address is missing: give --uri URI (see --help)")?;
    let client = Client::connect(&uri, &options).map_err(|e| e.to_string())?;
    let proto = match device {
        Some(d) => BufferPrototype::Device(d),
        None => BufferPrototype::Host,
    };
    match &cli.command {
        Command::List => list(&client),
        Command::Read { path, ranges } => read(&client, path, ranges, &proto),
        Command::Demo => demo(&client, device),
    }
}

fn list(client: &Client) -> Result<(), String> {
    for f in client.list("").map_err(|e| e.to_string())? {
        let what = match &f.target {
            Some(t) => t.to_string(),
            None => format!("{:?}", f.descriptor),
        };
        println!(
            "{what}: {} records, {} bytes, {} endpoint(s)",
            f.total_records,
            f.total_bytes,
            f.endpoints.len()
        );
        for (i, e) in f.endpoints.iter().enumerate() {
            let at = if e.locations.is_empty() {
                "this server".to_string()
            } else {
                e.locations.join(" | ")
            };
            println!(
                "  endpoint {i}: {} ({at})",
                String::from_utf8_lossy(&e.ticket)
            );
        }
    }
    Ok(())
}

fn parse_range(s: &str) -> Result<AxisSel, String> {
    let (a, b) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?} is not START:END"))?;
    let n = |x: &str| {
        x.parse::<usize>()
            .map_err(|_| format!("{s:?} is not START:END"))
    };
    Ok(AxisSel::from(n(a)?..n(b)?))
}

fn checksum(nd: &NDBuffer) -> Result<u64, String> {
    let host = nd
        .to_prototype(&BufferPrototype::Host)
        .and_then(|h| h.to_buffer())
        .and_then(|b| b.to_host())
        .map_err(|e| e.to_string())?;
    Ok(host.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x0000_0100_0000_01b3)
    }))
}

fn read(
    client: &Client,
    path: &str,
    sel: &[String],
    proto: &BufferPrototype,
) -> Result<(), String> {
    let sel = sel
        .iter()
        .map(|s| parse_range(s))
        .collect::<Result<Vec<_>, _>>()?;
    let t = Instant::now();
    let nd = client.read(path, &sel, proto).map_err(|e| e.to_string())?;
    let secs = t.elapsed().as_secs_f64();
    println!(
        "{path}: {:?} {} in {} memory, {} bytes in {:.3} s ({:.2} GB/s), fnv64 {:016x}",
        nd.shape(),
        nd.dtype(),
        if nd.prototype().is_device() {
            "device"
        } else {
            "host"
        },
        nd.nbytes(),
        secs,
        nd.nbytes() as f64 / secs / 1e9,
        checksum(&nd)?
    );
    Ok(())
}

fn f32_value(i: u64, j: u64) -> f32 {
    ((i * 7919 + j * 104729) % 65521) as f32 / 8.0 - 1000.0
}

fn i16_value(i: u64, j: u64) -> i16 {
    if ((i / 10) + (j / 10)).is_multiple_of(3) {
        -7 // a chunk that is not stored: the fill value
    } else {
        ((i * 31 + j * 17) % 2000) as i16 - 1000
    }
}

/// Checks `nd` (the selection `rows`/`cols` of a demo array) against `value`.
fn check<T: devbuf::zarr::Element + PartialEq + std::fmt::Debug>(
    what: &str,
    nd: &NDBuffer,
    rows: &[u64],
    cols: &[u64],
    value: impl Fn(u64, u64) -> T,
) -> Result<(), String> {
    let host = nd
        .to_prototype(&BufferPrototype::Host)
        .map_err(|e| e.to_string())?;
    let a = host.to_ndarray::<T>().map_err(|e| e.to_string())?;
    if a.shape() != [rows.len(), cols.len()] {
        return Err(format!(
            "{what}: shape {:?}, expected {:?}",
            a.shape(),
            [rows.len(), cols.len()]
        ));
    }
    for (x, &i) in rows.iter().enumerate() {
        for (y, &j) in cols.iter().enumerate() {
            let (got, want) = (&a[[x, y]], value(i, j));
            if *got != want {
                return Err(format!("{what}: [{i}, {j}] is {got:?}, expected {want:?}"));
            }
        }
    }
    println!(
        "ok  {what}: {:?} in {} memory",
        a.shape(),
        if nd.prototype().is_device() {
            "device"
        } else {
            "host"
        }
    );
    Ok(())
}

fn demo(client: &Client, device: Option<usize>) -> Result<(), String> {
    let mut protos = vec![BufferPrototype::Host];
    if let Some(d) = device {
        protos.push(BufferPrototype::Device(d));
    }
    let e = |e: devbuf::Error| e.to_string();
    for proto in &protos {
        let all = client.read("demo/f32.zarr", .., proto).map_err(e)?;
        check(
            "demo/f32.zarr",
            &all,
            &(0..100).collect::<Vec<_>>(),
            &(0..70).collect::<Vec<_>>(),
            f32_value,
        )?;
        let boxed = client
            .read(
                "demo/f32.zarr",
                [AxisSel::from(17..59), AxisSel::from(3..40)],
                proto,
            )
            .map_err(e)?;
        check(
            "demo/f32.zarr[17:59, 3:40]",
            &boxed,
            &(17..59).collect::<Vec<_>>(),
            &(3..40).collect::<Vec<_>>(),
            f32_value,
        )?;
        let stepped = client
            .read(
                "demo/i16.zarr",
                [
                    AxisSel::from(Slice::new(None, None, 3)),
                    Slice::new(Some(5), None, 2).into(),
                ],
                proto,
            )
            .map_err(e)?;
        let rows: Vec<u64> = (0..50).step_by(3).collect();
        let cols: Vec<u64> = (5..40).step_by(2).collect();
        check(
            "demo/i16.zarr[::3, 5::2]",
            &stepped,
            &rows,
            &cols,
            i16_value,
        )?;
    }
    // DoPut and back.
    let batch = RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(Int32Array::from((0..1000).collect::<Vec<i32>>())) as _,
        ),
        (
            "score",
            Arc::new(Float64Array::from(
                (0..1000).map(|i| i as f64 * 0.25).collect::<Vec<_>>(),
            )) as _,
        ),
        (
            "name",
            Arc::new(StringArray::from(
                (0..1000).map(|i| format!("row {i}")).collect::<Vec<_>>(),
            )) as _,
        ),
    ])
    .map_err(|e| e.to_string())?;
    let name = format!("demo-upload-{}", std::process::id());
    client.put(&name, [batch.clone()]).map_err(e)?;
    let back = client
        .read_batches(&name, &BufferPrototype::Host)
        .map_err(e)?;
    client.remove(&name).map_err(e)?;
    let back: Vec<RecordBatch> = back
        .iter()
        .map(Batch::to_host)
        .collect::<Result<_, _>>()
        .map_err(e)?;
    if back != vec![batch] {
        return Err("the uploaded batch came back different".into());
    }
    println!("ok  DoPut of {name} (1000 rows) read back and removed");
    let listed = client.list("").map_err(e)?;
    let arrays = listed
        .iter()
        .filter(|f| matches!(f.target, Some(Target::Array(_))))
        .count();
    println!("ok  the server lists {arrays} array(s)");
    Ok(())
}
