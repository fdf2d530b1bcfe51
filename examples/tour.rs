//! A tour of devbuf: allocate, fill, slice, copy, convert to Arrow.
//!
//! ```text
//! cargo run --release --example tour
//! ```
//!
//! On a machine with a GPU it runs on device 0 and prints what happened; without one it
//! says so and runs the host-side parts.

use std::time::Instant;

use arrow_array::types::Float32Type;
use devbuf::cuda::{self, Context, DeviceBuffer};

fn values(n: usize) -> Vec<f32> {
    // Deterministic, non-trivial data.
    (0..n)
        .map(|i| ((i % 10_007) as f32 * 0.37).sin() * 100.0)
        .collect()
}

fn main() -> devbuf::Result<()> {
    let n = 16 << 20; // 16 Mi float32 = 64 MiB
    let host = values(n);
    let host_sum: f64 = host.iter().map(|&x| x as f64).sum();

    if !cuda::is_available() {
        println!(
            "devbuf tour: no GPU here ({}).",
            cuda::unavailable_reason().unwrap_or_default()
        );
        println!("running the host-side parts:");
        let t = Instant::now();
        let ptr = host.as_ptr();
        let buffer = arrow_buffer::Buffer::from_vec(host);
        let array = arrow_array::PrimitiveArray::<Float32Type>::new(buffer.into(), None);
        let sum: f64 = array.values().iter().map(|&x| x as f64).sum();
        println!(
            "  {} float32 values -> Arrow without a copy (same address: {}), sum {:.3} (expected {:.3}) in {:?}",
            array.len(),
            array.values().as_ptr() == ptr,
            sum,
            host_sum,
            t.elapsed()
        );
        let tail = array.slice(n - 4, 4);
        println!(
            "  zero-copy slice of the last 4 values: {:?}",
            tail.values()
        );
        return Ok(());
    }

    let ctx = Context::new(0)?;
    let p = ctx.properties();
    println!(
        "devbuf tour on device 0: {} (sm_{}{}, {} GiB, {} SMs), driver CUDA {:?}",
        p.name,
        p.compute_capability.0,
        p.compute_capability.1,
        p.total_memory >> 30,
        p.multiprocessor_count,
        cuda::driver_version()?
    );

    let t = Instant::now();
    let d = DeviceBuffer::from_slice(&ctx, &host)?;
    ctx.synchronize()?;
    let secs = t.elapsed().as_secs_f64();
    println!(
        "1. copied {} MiB host -> device in {:.2} ms ({:.1} GB/s); device memory in use: {} MiB",
        d.len() >> 20,
        secs * 1e3,
        d.len() as f64 / secs / 1e9,
        ctx.bytes_allocated() >> 20
    );

    let scratch = ctx.allocate(4096)?;
    scratch.fill(0xAB)?;
    println!(
        "2. allocated 4 KiB and filled it on the device: first bytes {}",
        &scratch.slice(0, 8)?.hex()?
    );

    let half = d.slice(d.len() / 2, d.len() / 2)?;
    println!(
        "3. zero-copy slice of the second half: address {:#x} = parent {:#x} + {} (offset in parent {})",
        half.address(),
        d.address(),
        d.len() / 2,
        half.offset_in_parent()
    );

    let copy = ctx.allocate(half.len())?;
    let t = Instant::now();
    copy.copy_from_device(0, &half)?;
    ctx.synchronize()?;
    let secs = t.elapsed().as_secs_f64();
    println!(
        "4. device -> device copy of {} MiB in {:.3} ms; equal on the device (no host copy): {}",
        copy.len() >> 20,
        secs * 1e3,
        copy.equals(&half)?
    );

    let t = Instant::now();
    let array = d.to_arrow::<Float32Type>()?;
    let sum: f64 = array.values().iter().map(|&x| x as f64).sum();
    println!(
        "5. device -> page-locked host -> Arrow Float32Array of {} values in {:?} (one PCIe copy, none on the host); sum {:.3}, host sum {:.3}, equal: {}",
        array.len(),
        t.elapsed(),
        sum,
        host_sum,
        array.values().as_ref() == host.as_slice()
    );
    let tail = half.slice(half.len() - 16, 16)?.to_vec::<f32>()?;
    println!("6. last 4 values read back from the slice: {tail:?}");

    drop((d, half, copy, scratch));
    println!(
        "7. after dropping every buffer, device memory in use: {} bytes",
        ctx.bytes_allocated()
    );
    Ok(())
}
