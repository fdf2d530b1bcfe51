//! NDBuffer operations on the GPU against a device-to-device copy.
//!
//! On a 256 MiB float32 array (8192 x 8192) on device 0: fill, astype float32 →
//! float64, a 2-d transpose (materialised), the strided get `[::2, 1:-1]`
//! (materialised) and all_equal; each timed with CUDA events (`Context::time_ms`),
//! after warm-up, as the median of 15 runs, and reported as GB/s of bytes read plus
//! written, next to a `DeviceBuffer::copy_from_device` of the same array in the same
//! run. Destinations are preallocated (as a chunk pipeline reuses its buffers), so the
//! timings are the kernels, not `cuMemAlloc`.
//!
//! `cargo run --release --features zarr,object_store,flight --example bench_ndbuffer`. Without a GPU it says so and exits 0.

#[path = "common/mod.rs"]
mod common;
#[path = "common/stats.rs"]
mod stats;

use devbuf::cuda::{self, Context};
use devbuf::zarr::{AxisSel, BufferPrototype, Dtype, NDBuffer, Order, Scalar, Slice};

const N: usize = 8192;
const WARMUP: usize = 3;
const RUNS: usize = 15;

fn median_ms(ctx: &Context, mut f: impl FnMut() -> devbuf::Result<()>) -> devbuf::Result<f64> {
    for _ in 0..WARMUP {
        f()?;
    }
    let mut t = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        t.push(ctx.time_ms(&mut f)?.1);
    }
    Ok(stats::median(t))
}

fn main() -> std::process::ExitCode {
    common::exit(run())
}

fn run() -> devbuf::Result<()> {
    if !cuda::is_available() {
        println!(
            "bench_ndbuffer: no GPU here ({}); nothing to measure",
            cuda::unavailable_reason().unwrap_or_default()
        );
        return Ok(());
    }
    let ctx = Context::new(0)?;
    let dev = BufferPrototype::Device(0);
    let bytes = N * N * 4;
    println!(
        "bench_ndbuffer: {} ({} SMs), float32 {N}x{N} = {} MiB, median of {RUNS} after {WARMUP} warm-up runs",
        ctx.properties().name,
        ctx.properties().multiprocessor_count,
        bytes >> 20
    );

    let mut a = NDBuffer::create(
        &dev,
        &[N, N],
        Dtype::FLOAT32,
        Order::C,
        Some(Scalar::from(1.5f32)),
    )?;
    let mut rows: Vec<(&str, usize, f64)> = Vec::new();

    // Reference: device-to-device copy of the same bytes (read + write).
    let src = ctx.allocate(bytes)?;
    let dst = ctx.allocate(bytes)?;
    src.fill(1)?;
    let copy_ms = median_ms(&ctx, || dst.copy_from_device(0, &src))?;
    rows.push(("device-to-device copy", 2 * bytes, copy_ms));

    let fill_ms = median_ms(&ctx, || a.set_scalar(&[], Scalar::from(2.5f32)))?;
    rows.push(("fill", bytes, fill_ms));

    let mut f64s = NDBuffer::empty(&dev, &[N, N], Dtype::FLOAT64, Order::C)?;
    let astype_ms = median_ms(&ctx, || f64s.set(&[], &a))?;
    rows.push(("astype f32->f64", bytes + 2 * bytes, astype_ms));

    let mut t_out = NDBuffer::empty(&dev, &[N, N], Dtype::FLOAT32, Order::C)?;
    let t_view = a.transpose(None)?;
    let transpose_ms = median_ms(&ctx, || t_out.set(&[], &t_view))?;
    rows.push(("transpose 2-d", 2 * bytes, transpose_ms));

    let sel = [
        AxisSel::Slice(Slice::new(None, None, 2)),
        AxisSel::Slice(Slice::new(Some(1), Some(-1), 1)),
    ];
    let view = a.get(&sel)?;
    let mut s_out = NDBuffer::empty(&dev, view.shape(), Dtype::FLOAT32, Order::C)?;
    let strided_ms = median_ms(&ctx, || s_out.set(&[], &view))?;
    rows.push(("strided get [::2, 1:-1]", 2 * view.nbytes(), strided_ms));

    let value = Some(Scalar::from(2.5f32));
    let mut equal = false;
    let all_equal_ms = median_ms(&ctx, || {
        equal = a.all_equal(value, false)?;
        Ok(())
    })?;
    rows.push(("all_equal", bytes, all_equal_ms));
    // Self-checks: the results are what they should be.
    assert!(equal, "all_equal must see the filled value");
    assert!(t_out.all_equal(value, false)? && s_out.all_equal(value, false)?);
    assert!(f64s.all_equal(Some(Scalar::from(2.5f64)), false)?);

    let copy_gbs = 2.0 * bytes as f64 / (copy_ms * 1e-3) / 1e9;
    println!();
    println!("| op | bytes read+written | median ms | GB/s | vs device copy |");
    println!("|---|---:|---:|---:|---:|");
    for (name, moved, ms) in rows {
        let gbs = moved as f64 / (ms * 1e-3) / 1e9;
        println!(
            "| {name} | {} MiB | {ms:.3} | {gbs:.0} | {:.2}x |",
            moved >> 20,
            gbs / copy_gbs
        );
    }
    Ok(())
}
