//! An Arrow Flight server of the zarr arrays under a directory (one terminal; the
//! client is `flight_client`, or any Flight client: see docs/flight.md).
//!
//! ```sh
//! cargo run --release --features zarr,object_store,flight --example flight_server -- \
//!     --root /data/zarr --token-file /tmp/flight.token [--addr 0.0.0.0:8815] \
//!     [--tls-self-signed /tmp/flight-tls | --tls-cert cert.pem --tls-key key.pem] \
//!     [--endpoints 4] [--locations grpc://a:8815,grpc://b:8815] [--basic user:password] \
//!     [--demo] [--verbose]
//! ```
//!
//! * `--token-file`: the bearer token clients send; read from the file, or — when the
//!   file does not exist — generated and written there (mode 0600) for the clients.
//! * `--demo`: first writes two arrays of known values under the root,
//!   `demo/f32.zarr` (100 x 70 float32 in 16 x 16 zstd chunks, value
//!   `((i * 7919 + j * 104729) % 65521) / 8 - 1000`) and `demo/i16.zarr` (50 x 40 int16
//!   in 10 x 10 chunks, value `(i * 31 + j * 17) % 2000 - 1000`, chunks with
//!   `(ci + cj) % 3 == 0` not stored: they read as the fill value -7), which
//!   `flight_client --demo` and `scripts/flight_check.py` verify.
//! * `--tls-self-signed DIR`: makes a certificate for `localhost` (DIR/cert.pem,
//!   DIR/key.pem) and serves TLS with it; clients trust DIR/cert.pem.
//!
//! Prints `READY <uri>` once it serves, then one line per event with `--verbose`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use devbuf::flight::{Server, ServerConfig, ServerEvent, Tls, generate_token, read_token_file};
use devbuf::zarr::{ArraySpec, Compressor, ZarrArray};
use devbuf::zarr::{Dtype, NDBuffer, Order, Scalar};

mod common;

fn main() -> ExitCode {
    // `RUST_LOG=info` logs devbuf's tracing spans and events (calls, streams, reads).
    common::progress::init_logging();
    common::exit(run())
}

struct Args {
    root: PathBuf,
    addr: String,
    token_file: Option<PathBuf>,
    token: Option<String>,
    tls_self_signed: Option<PathBuf>,
    tls: Option<(PathBuf, PathBuf)>,
    endpoints: usize,
    locations: Vec<String>,
    basic: Option<(String, String)>,
    demo: bool,
    verbose: bool,
}

/// An Arrow Flight server of the zarr arrays under a directory. Prints `READY <uri>` once
/// it serves.
#[derive(Parser)]
#[command(name = "flight_server")]
struct Cli {
    /// The directory whose zarr arrays are served.
    #[arg(long, value_name = "DIR")]
    root: PathBuf,
    /// The address to listen on (port 0: any free port).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8815")]
    addr: String,
    /// The bearer token clients send: read from the file, or, when the file does not
    /// exist, generated and written there (mode 0600) for the clients.
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// The bearer token clients send.
    #[arg(long, value_name = "T")]
    token: Option<String>,
    /// Makes a certificate for `localhost` (DIR/cert.pem, DIR/key.pem) and serves TLS
    /// with it; clients trust DIR/cert.pem.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["tls_cert", "tls_key"])]
    tls_self_signed: Option<PathBuf>,
    /// The server's TLS certificate (PEM); with --tls-key.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The server's TLS private key (PEM); with --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Endpoints per flight.
    #[arg(long, value_name = "N", default_value_t = 4)]
    endpoints: usize,
    /// Locations the endpoints name (other servers of the same root).
    #[arg(long, value_name = "URI,URI", value_delimiter = ',')]
    locations: Vec<String>,
    /// Credentials the handshake exchanges for a token (HTTP Basic).
    #[arg(long, value_name = "USER:PASSWORD", value_parser = parse_basic)]
    basic: Option<(String, String)>,
    /// First writes the demo arrays (demo/f32.zarr, demo/i16.zarr) under the root.
    #[arg(long)]
    demo: bool,
    /// Prints one line per event.
    #[arg(long)]
    verbose: bool,
}

fn parse_basic(v: &str) -> Result<(String, String), String> {
    let (u, p) = v
        .split_once(':')
        .ok_or_else(|| "--basic takes USER:PASSWORD".to_string())?;
    Ok((u.to_string(), p.to_string()))
}

fn parse() -> Result<Args, String> {
    let c = Cli::parse();
    if c.token_file.is_none() && c.token.is_none() && c.basic.is_none() {
        return Err(
            "give --token-file, --token or --basic: a server without one refuses every call \
             (see --help)"
                .into(),
        );
    }
    Ok(Args {
        root: c.root,
        addr: c.addr,
        token_file: c.token_file,
        token: c.token,
        tls_self_signed: c.tls_self_signed,
        tls: c.tls_cert.zip(c.tls_key),
        endpoints: c.endpoints,
        locations: c.locations,
        basic: c.basic,
        demo: c.demo,
        verbose: c.verbose,
    })
}

fn run() -> Result<(), String> {
    let a = parse()?;
    if a.demo {
        write_demo(&a.root).map_err(|e| format!("writing the demo arrays: {e}"))?;
    }
    let mut cfg = ServerConfig::default();
    cfg.root = Some(a.root.clone());
    cfg.endpoints = a.endpoints;
    cfg.locations = a.locations.clone();
    if let Some(t) = &a.token {
        cfg.tokens.push(t.clone());
    }
    if let Some(p) = &a.token_file {
        if !p.exists() {
            let t = generate_token().map_err(|e| e.to_string())?;
            write_private(p, format!("{t}\n").as_bytes())?;
            eprintln!("wrote a new token to {}", p.display());
        }
        cfg.tokens
            .push(read_token_file(p).map_err(|e| e.to_string())?);
    }
    cfg.basic_auth = a.basic.clone();
    if let Some(dir) = &a.tls_self_signed {
        let c = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
            .map_err(|e| format!("making a certificate: {e}"))?;
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let (cert, key) = (c.cert.pem(), c.signing_key.serialize_pem());
        std::fs::write(dir.join("cert.pem"), &cert).map_err(|e| e.to_string())?;
        write_private(&dir.join("key.pem"), key.as_bytes())?;
        eprintln!(
            "TLS certificate for localhost: {}",
            dir.join("cert.pem").display()
        );
        cfg.tls = Some(Tls {
            cert_pem: cert.into(),
            key_pem: key.into(),
        });
    }
    if let Some((c, k)) = &a.tls {
        let read = |p: &Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
        cfg.tls = Some(Tls {
            cert_pem: read(c)?,
            key_pem: read(k)?,
        });
    }
    if a.verbose {
        cfg.observer = Some(Arc::new(|e: &ServerEvent| match e {
            ServerEvent::MessageQueued { .. } => {}
            e => eprintln!("{e:?}"),
        }));
    }
    let server = Server::start(cfg, a.addr.as_str()).map_err(|e| e.to_string())?;
    let arrays = count_arrays(&a.root);
    eprintln!(
        "serving {} array(s) under {} at {}",
        arrays,
        a.root.display(),
        server.uri()
    );
    println!("READY {}", server.uri());
    server.wait().map_err(|e| e.to_string())
}

fn write_private(p: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o.open(p)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(|e| format!("{}: {e}", p.display()))
}

fn count_arrays(root: &Path) -> usize {
    fn walk(d: &Path, depth: usize) -> usize {
        if d.join("zarr.json").is_file() || d.join(".zarray").is_file() {
            return 1;
        }
        if depth > 8 {
            return 0;
        }
        std::fs::read_dir(d)
            .map(|r| {
                r.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| walk(&e.path(), depth + 1))
                    .sum()
            })
            .unwrap_or(0)
    }
    walk(root, 0)
}

/// The demo arrays (see the module docs), written when missing.
fn write_demo(root: &Path) -> devbuf::Result<()> {
    let f32_path = root.join("demo/f32.zarr");
    if !f32_path.join("zarr.json").exists() {
        let (r, c) = (100usize, 70usize);
        let v: Vec<f32> = (0..r * c)
            .map(|k| {
                let (i, j) = ((k / c) as u64, (k % c) as u64);
                ((i * 7919 + j * 104729) % 65521) as f32 / 8.0 - 1000.0
            })
            .collect();
        let spec = ArraySpec::new(&[r as u64, c as u64], &[16, 16], Dtype::FLOAT32)
            .with_fill_value(Scalar::from(0.5f32))
            .with_compressor(Compressor::Zstd { level: 1 });
        let a = ZarrArray::create(&f32_path, &spec)?;
        let nd = NDBuffer::from_ndarray(
            ndarray::Array2::from_shape_vec((r, c), v)
                .map_err(|e| devbuf::Error::InvalidArgument(e.to_string()))?,
        );
        a.write_subset(&[0, 0], &nd)?;
    }
    let i16_path = root.join("demo/i16.zarr");
    if !i16_path.join("zarr.json").exists() {
        let (r, c) = (50usize, 40usize);
        let spec = ArraySpec::new(&[r as u64, c as u64], &[10, 10], Dtype::INT16)
            .with_fill_value(Scalar::from(-7i16));
        let a = ZarrArray::create(&i16_path, &spec)?;
        for ci in 0..5u64 {
            for cj in 0..4u64 {
                if (ci + cj) % 3 == 0 {
                    continue;
                }
                let v: Vec<i16> = (0..100)
                    .map(|k| {
                        let (i, j) = (ci * 10 + k / 10, cj * 10 + k % 10);
                        ((i * 31 + j * 17) % 2000) as i16 - 1000
                    })
                    .collect();
                let nd = NDBuffer::from_memory(
                    v.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>(),
                    &[10, 10],
                    Dtype::INT16,
                    Order::C,
                )?;
                a.write_subset(&[ci * 10, cj * 10], &nd)?;
            }
        }
    }
    Ok(())
}
