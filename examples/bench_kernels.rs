//! Bandwidth of devbuf's device kernels on a 256 MiB float32 array (8192 x 8192), against
//! a device-to-device copy of the same bytes in the same run.
//!
//! ```text
//! cargo run --release --features zarr,object_store,flight --example bench_kernels            # on a machine with a GPU
//! cargo run --release --features zarr,object_store,flight --example bench_kernels -- 20      # 20 timed runs per op
//! ```
//!
//! Each op is warmed up, then timed `runs` times (default 15) with CUDA events; the
//! table shows the median. "kernel GB/s" times the stream variant (`ops::*_on`) with
//! events recorded on that stream: device time, comparable with a cupy timing by events.
//! "call GB/s" times the synchronous function with `Context::time_ms`, so it includes
//! the wait for completion on the host (a few microseconds per call). all_equal returns
//! its answer to the host, so both of its columns include that round trip. GB/s counts
//! bytes read plus bytes written (1 GB = 1e9 bytes); "vs D2D" is the ratio to the
//! device-to-device copy's GB/s (`DeviceBuffer::copy_from_device`, 256 MiB read + 256
//! MiB written). `scripts/bench_peers.py ndbuffer` measures the same ops with cupy.

#[path = "common/mod.rs"]
mod common;
#[path = "common/stats.rs"]
mod stats;

use clap::Parser;
use devbuf::__test::ops;
use devbuf::cuda::{self, Context, DeviceBuffer, Event, EventFlags, Stream};
use devbuf::{ElementType, EqualMode};
use devbuf::{Error, Result};
use stats::median;

/// Median milliseconds of `f` queued on `stream`, timed by events on that stream.
fn time_on(
    ctx: &Context,
    stream: &Stream,
    runs: usize,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f64> {
    let flags = EventFlags {
        timing: true,
        ..Default::default()
    };
    for _ in 0..3 {
        f()?;
    }
    stream.synchronize()?;
    let mut ms = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Event::new(ctx, flags)?;
        let end = Event::new(ctx, flags)?;
        start.record(stream)?;
        f()?;
        end.record(stream)?;
        end.synchronize()?;
        ms.push(start.elapsed_ms(&end)? as f64);
    }
    Ok(median(ms))
}

/// Median milliseconds of the synchronous `f`, timed with `Context::time_ms`.
fn time_call(ctx: &Context, runs: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..3 {
        f()?;
    }
    let mut ms = Vec::with_capacity(runs);
    for _ in 0..runs {
        ms.push(ctx.time_ms(&mut f)?.1);
    }
    Ok(median(ms))
}

fn gbs(bytes: usize, ms: f64) -> f64 {
    bytes as f64 / (ms * 1e-3) / 1e9
}

fn check(ok: bool, what: &str) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "benchmark self-check failed: {what}"
        )))
    }
}

fn element(buf: &DeviceBuffer, index: usize, size: usize) -> Result<Vec<u8>> {
    let mut b = vec![0u8; size];
    buf.copy_to_host(index * size, &mut b)?;
    Ok(b)
}

/// Bandwidth of devbuf's device kernels on a 256 MiB float32 array (8192 x 8192), against
/// a device-to-device copy of the same bytes in the same run. Without a GPU it says so.
#[derive(Parser)]
#[command(name = "bench_kernels")]
struct Cli {
    /// Timed runs per op (at least 10).
    #[arg(default_value_t = 15)]
    runs: usize,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() -> std::process::ExitCode {
    common::exit(run())
}

fn run() -> Result<()> {
    let runs = Cli::parse().runs.max(10);
    if !cuda::is_available() {
        println!(
            "bench_kernels: no GPU ({})",
            cuda::unavailable_reason().unwrap_or_default()
        );
        return Ok(());
    }
    // The matrix edge (8192: 256 MiB); DEVBUF_BENCH_N changes it (for quick trials).
    let n: usize = std::env::var("DEVBUF_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8192)
        .max(4);
    let bytes = n * n * 4;
    let ctx = Context::new(0)?;
    let stream = Stream::new(&ctx)?;
    println!(
        "device: {} (sm_{}{}, {} SMs); array: {n} x {n} float32 = {} MiB; median of {runs} runs",
        ctx.properties().name,
        ctx.properties().compute_capability.0,
        ctx.properties().compute_capability.1,
        ctx.properties().multiprocessor_count,
        bytes >> 20
    );

    // a[i, j] = i * n + j (exact in f32 below 2^24; the spot checks stay there).
    let host: Vec<f32> = (0..n * n).map(|k| k as f32).collect();
    let a = DeviceBuffer::from_slice(&ctx, &host)?;
    drop(host);
    let b = ctx.allocate(bytes)?;
    let wide = ctx.allocate(2 * bytes)?;
    let sub = ctx.allocate((n / 2) * (n - 2) * 4)?;
    let scratch = ctx.allocate(bytes)?;

    let mut rows: Vec<(String, usize, f64, Option<f64>)> = Vec::new();

    // Device-to-device copy: the yardstick.
    let d2d = time_call(&ctx, runs, || b.copy_from_device(0, &a))?;
    rows.push(("D2D copy (cuMemcpyDtoD)".into(), 2 * bytes, d2d, None));

    // fill
    let pattern = 1.5f32.to_le_bytes();
    let k = time_on(&ctx, &stream, runs, || {
        ops::fill(&scratch, &pattern, Some(&stream))
    })?;
    let c = time_call(&ctx, runs, || ops::fill(&scratch, &pattern, None))?;
    check(
        ops::all_equal(
            &scratch,
            ElementType::Float32,
            &pattern,
            EqualMode::Bitwise,
            None,
        )?,
        "fill",
    )?;
    rows.push(("fill f32".into(), bytes, k, Some(c)));

    // astype f32 -> f64
    let k = time_on(&ctx, &stream, runs, || {
        ops::cast(
            &a,
            ElementType::Float32,
            &wide,
            ElementType::Float64,
            Some(&stream),
        )
    })?;
    let c = time_call(&ctx, runs, || {
        ops::cast(&a, ElementType::Float32, &wide, ElementType::Float64, None)
    })?;
    for idx in [0usize, 12345, n * n - 1]
        .into_iter()
        .filter(|&i| i < n * n)
    {
        let got = f64::from_le_bytes(element(&wide, idx, 8)?.try_into().unwrap_or([0; 8]));
        check(got == (idx as f32) as f64, "cast")?;
    }
    rows.push(("astype f32->f64".into(), 3 * bytes, k, Some(c)));

    // transpose: b[j, i] = a[i, j]
    let row = (n * 4) as isize;
    let t_src = [4isize, row];
    let t_dst = [row, 4isize];
    let k = time_on(&ctx, &stream, runs, || {
        ops::strided_copy(&a, 0, &t_src, &b, 0, &t_dst, &[n, n], 4, Some(&stream))
    })?;
    let c = time_call(&ctx, runs, || {
        ops::strided_copy(&a, 0, &t_src, &b, 0, &t_dst, &[n, n], 4, None)
    })?;
    for (i, j) in [(0usize, 1usize), (5, 7), (1000, 33), (n - 1, n - 2)]
        .into_iter()
        .filter(|&(i, j)| i < n && j < n)
    {
        let got = f32::from_le_bytes(element(&b, j * n + i, 4)?.try_into().unwrap_or([0; 4]));
        check(
            i * n + j >= 1 << 24 || got == (i * n + j) as f32,
            "transpose",
        )?;
    }
    rows.push(("transpose 2-d".into(), 2 * bytes, k, Some(c)));

    // strided get a[::2, 1:-1] into a contiguous (N/2) x (N-2) array
    let g_src = [2 * row, 4isize];
    let g_dst = [((n - 2) * 4) as isize, 4isize];
    let shape = [n / 2, n - 2];
    let k = time_on(&ctx, &stream, runs, || {
        ops::strided_copy(&a, 4, &g_src, &sub, 0, &g_dst, &shape, 4, Some(&stream))
    })?;
    let c = time_call(&ctx, runs, || {
        ops::strided_copy(&a, 4, &g_src, &sub, 0, &g_dst, &shape, 4, None)
    })?;
    for (i, j) in [(0usize, 0usize), (3, 5), (100, n - 3)]
        .into_iter()
        .filter(|&(i, j)| i < n / 2 && j < n - 2)
    {
        let got = f32::from_le_bytes(
            element(&sub, i * (n - 2) + j, 4)?
                .try_into()
                .unwrap_or([0; 4]),
        );
        check(
            2 * i * n + j + 1 >= 1 << 24 || got == (2 * i * n + j + 1) as f32,
            "strided get",
        )?;
    }
    rows.push((
        "strided get [::2, 1:-1]".into(),
        2 * (n / 2) * (n - 2) * 4,
        k,
        Some(c),
    ));

    // all_equal (answer true: every element is compared)
    ops::fill(&scratch, &pattern, None)?;
    let k = time_on(&ctx, &stream, runs, || {
        check(
            ops::all_equal(
                &scratch,
                ElementType::Float32,
                &pattern,
                EqualMode::Bitwise,
                Some(&stream),
            )?,
            "all_equal",
        )
    })?;
    let c = time_call(&ctx, runs, || {
        check(
            ops::all_equal(
                &scratch,
                ElementType::Float32,
                &pattern,
                EqualMode::Bitwise,
                None,
            )?,
            "all_equal",
        )
    })?;
    rows.push(("all_equal (true)".into(), bytes, k, Some(c)));

    // byteswap in place, 4-byte elements
    let k = time_on(&ctx, &stream, runs, || {
        ops::byteswap(&scratch, 4, Some(&stream))
    })?;
    let c = time_call(&ctx, runs, || ops::byteswap(&scratch, 4, None))?;
    rows.push(("byteswap 4-byte".into(), 2 * bytes, k, Some(c)));

    let base = gbs(2 * bytes, d2d);
    println!();
    println!(
        "| {:<26} | {:>10} | {:>9} | {:>11} | {:>7} | {:>9} |",
        "op", "MB moved", "ms", "kernel GB/s", "vs D2D", "call GB/s"
    );
    println!(
        "|{:-<28}|{:->12}|{:->11}|{:->13}|{:->9}|{:->11}|",
        "", "", "", "", "", ""
    );
    for (name, bytes, ms, call) in &rows {
        let g = gbs(*bytes, *ms);
        let call = call.map_or("-".to_string(), |c| format!("{:.0}", gbs(*bytes, c)));
        println!(
            "| {:<26} | {:>10.1} | {:>9.3} | {:>11.0} | {:>6.2}x | {:>9} |",
            name,
            *bytes as f64 / 1e6,
            ms,
            g,
            g / base,
            call
        );
    }
    Ok(())
}
