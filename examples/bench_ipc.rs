//! IPC benchmarks: the device writer against raw copies, and the time to open a handle
//! in another process.
//!
//! ```text
//! cargo run --release --features zarr,object_store,flight --example bench_ipc
//! ```
//!
//! Tables (markdown):
//! 1. `DeviceBufferWriter` throughput for 256 B / 4 KiB / 1 MiB writes, against one
//!    `cuMemcpyHtoD` per piece (the unbuffered way), and the ratio.
//! 2. Opening an IPC memory handle in a second process (this program, re-run as a
//!    child): median and spread of many opens (each a real `cuIpcOpenMemHandle`,
//!    closed before the next), and the close time; the same for host shared memory.
//!
//! Without a GPU only the host shared-memory rows are measured.

#[path = "common/mod.rs"]
mod common;
#[path = "common/stats.rs"]
mod stats;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

use clap::Parser;
use devbuf::cuda::{self, Context, DeviceBufferWriter};
use devbuf::ipc::IpcMemHandle;
use devbuf::ipc::{HostIpcHandle, SharedMemory};
use stats::{gbs, quantile};

const OPENS: usize = 400;

/// IPC benchmarks: the device writer against raw copies, and the time to open a handle
/// in another process. Without a GPU only the host shared-memory rows are measured.
#[derive(Parser)]
#[command(name = "bench_ipc")]
struct Cli {
    /// Internal: run as the child that opens the handles it reads on stdin (`device` or
    /// `host`).
    #[arg(long, hide = true, value_name = "KIND")]
    child: Option<String>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() -> std::process::ExitCode {
    common::exit(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    if let Some(kind) = &cli.child {
        return child(kind);
    }
    if cuda::is_available() {
        let ctx = Context::new(0)?;
        println!(
            "device: {} (driver CUDA {:?})",
            ctx.properties().name,
            cuda::driver_version()?
        );
        writer_table(&ctx)?;
        open_table_device(&ctx)?;
    } else {
        println!(
            "no GPU ({}): device rows skipped",
            cuda::unavailable_reason().unwrap_or_default()
        );
    }
    open_table_host()?;
    Ok(())
}

fn writer_table(ctx: &Context) -> Result<(), Box<dyn std::error::Error>> {
    let total = 256usize << 20;
    let buf = ctx.allocate(total)?;
    let src: Vec<u8> = (0..total).map(|i| (i as u8).wrapping_mul(31)).collect();
    println!();
    println!("## DeviceBufferWriter (1 MiB page-locked staging) vs one cuMemcpyHtoD per piece");
    println!();
    println!("| write size | writer GB/s | raw cuMemcpyHtoD GB/s | ratio |");
    println!("|---:|---:|---:|---:|");
    for piece in [256usize, 4096, 1 << 20] {
        // Writer: all 256 MiB in pieces; best of 3.
        let mut best = f64::MAX;
        for _ in 0..3 {
            let mut w = DeviceBufferWriter::new(buf.clone())?;
            ctx.synchronize()?;
            let t = Instant::now();
            for chunk in src.chunks(piece) {
                w.write_all(chunk)?;
            }
            w.flush()?;
            ctx.synchronize()?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        let writer = gbs(total as f64, best);
        // Raw: one synchronous copy per piece (bounded to keep small pieces quick).
        let raw_total = match piece {
            256 => 16 << 20,
            4096 => 64 << 20,
            _ => total,
        };
        let mut best = f64::MAX;
        for _ in 0..3 {
            ctx.synchronize()?;
            let t = Instant::now();
            for (i, chunk) in src[..raw_total].chunks(piece).enumerate() {
                buf.copy_from_host(i * piece, chunk)?;
            }
            ctx.synchronize()?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        let raw = gbs(raw_total as f64, best);
        let size = match piece {
            256 => "256 B".to_string(),
            4096 => "4 KiB".to_string(),
            _ => "1 MiB".to_string(),
        };
        println!("| {size} | {writer:.2} | {raw:.3} | {:.0}x |", writer / raw);
    }
    // Check the writer wrote the bytes.
    let mut w = DeviceBufferWriter::new(buf.clone())?;
    for chunk in src.chunks(256) {
        w.write_all(chunk)?;
    }
    drop(w);
    let probe = buf.slice(total - 4096, 4096)?.to_host()?;
    if probe[..] != src[total - 4096..] {
        return Err("the writer's bytes differ from the source".into());
    }
    Ok(())
}

/// Runs this program as a child that opens the handles it reads on stdin.
fn run_child(
    kind: &str,
    handles: &[String],
) -> Result<Vec<(f64, f64)>, Box<dyn std::error::Error>> {
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .args(["--child", kind])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    {
        let mut stdin = child.stdin.take().ok_or("child stdin")?;
        for h in handles {
            writeln!(stdin, "{h}")?;
        }
    }
    let out = BufReader::new(child.stdout.take().ok_or("child stdout")?);
    let mut times = Vec::new();
    for line in out.lines() {
        let line = line?;
        if let Some(rest) = line.strip_prefix("T ") {
            let mut it = rest.split_whitespace();
            let open: f64 = it.next().ok_or("open time")?.parse()?;
            let close: f64 = it.next().ok_or("close time")?.parse()?;
            times.push((open, close));
        } else {
            eprintln!("child: {line}");
        }
    }
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("child failed: {status}").into());
    }
    Ok(times)
}

fn child(kind: &str) -> Result<(), Box<dyn std::error::Error>> {
    let handles: Vec<String> = std::io::stdin().lock().lines().collect::<Result<_, _>>()?;
    let mut out = std::io::stdout().lock();
    match kind {
        "device" => {
            let parsed: Vec<IpcMemHandle> = handles
                .iter()
                .map(|h| h.parse::<IpcMemHandle>())
                .collect::<Result<_, _>>()?;
            let ctx = Context::new(0)?;
            ctx.synchronize()?;
            for i in 0..OPENS {
                let h = &parsed[i % parsed.len()];
                let t = Instant::now();
                let b = ctx.open_ipc(h)?;
                let open = t.elapsed().as_secs_f64();
                let t = Instant::now();
                drop(b);
                let close = t.elapsed().as_secs_f64();
                writeln!(out, "T {open} {close}")?;
            }
        }
        "host" => {
            let parsed: Vec<HostIpcHandle> = handles
                .iter()
                .map(|h| h.parse::<HostIpcHandle>())
                .collect::<Result<_, _>>()?;
            for i in 0..OPENS {
                let h = &parsed[i % parsed.len()];
                let t = Instant::now();
                let b = h.open()?;
                let open = t.elapsed().as_secs_f64();
                let t = Instant::now();
                drop(b);
                let close = t.elapsed().as_secs_f64();
                writeln!(out, "T {open} {close}")?;
            }
        }
        other => return Err(format!("unknown child kind {other:?}").into()),
    }
    Ok(())
}

fn print_open_row(what: &str, times: &[(f64, f64)]) {
    let mut open: Vec<f64> = times.iter().map(|t| t.0 * 1e6).collect();
    let mut close: Vec<f64> = times.iter().map(|t| t.1 * 1e6).collect();
    println!(
        "| {what} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
        times.len(),
        quantile(&mut open, 0.5),
        quantile(&mut open, 0.1),
        quantile(&mut open, 0.9),
        quantile(&mut close, 0.5)
    );
}

fn open_header() {
    println!();
    println!("## Opening a handle in a second process (us)");
    println!();
    println!("| memory | opens | median | p10 | p90 | close (median) |");
    println!("|---|---:|---:|---:|---:|---:|");
}

fn open_table_device(ctx: &Context) -> Result<(), Box<dyn std::error::Error>> {
    let bufs = (0..20)
        .map(|_| ctx.allocate(64 << 20))
        .collect::<Result<Vec<_>, _>>()?;
    let handles: Vec<String> = bufs
        .iter()
        .map(|b| {
            b.slice(4097, 1 << 20)
                .and_then(|s| s.export_ipc())
                .map(|h| h.to_string())
        })
        .collect::<Result<_, _>>()?;
    let times = run_child("device", &handles)?;
    open_header();
    print_open_row("GPU (64 MiB allocations, 1 MiB slices)", &times);
    Ok(())
}

fn open_table_host() -> Result<(), Box<dyn std::error::Error>> {
    let mut keep = Vec::new();
    let mut handles = Vec::new();
    for _ in 0..20 {
        let shm = SharedMemory::create(64 << 20)?;
        handles.push(shm.export_ipc(4097..4097 + (1 << 20))?.to_string());
        keep.push(shm);
    }
    let times = run_child("host", &handles)?;
    if !cuda::is_available() {
        open_header();
    }
    print_open_row("host shared memory (64 MiB memfd, 1 MiB slices)", &times);
    Ok(())
}
