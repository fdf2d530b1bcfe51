//! Transfer benchmark: devbuf against the raw CUDA driver call, in the same run.
//!
//! ```text
//! cargo run --release --example bench_transfer [-- --quick]
//! ```
//!
//! For 4 KiB, 1 MiB, 64 MiB and 1 GiB it measures host->device and device->host from
//! page-locked and from ordinary (pageable) memory, and device->device, each through
//! devbuf and through the plain driver call (`cuMemcpyHtoD_v2` and friends), alternating
//! the two, and prints the median bandwidth of each with the ratio devbuf / driver.
//! `scripts/bench_peers.py transfer` prints the same table for cupy and torch.
//!
//! Without a GPU it says so and exits successfully.

use std::time::Instant;

use cudarc::driver::sys;
use devbuf::cuda::{self, Context, DeviceBuffer};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
const GIB: usize = 1024 * MIB;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn reps_for(n: usize, quick: bool) -> usize {
    let r = match n {
        n if n <= 64 * KIB => 2000,
        n if n <= 4 * MIB => 200,
        n if n <= 256 * MIB => 20,
        _ => 6,
    };
    if quick { (r / 10).max(3) } else { r }
}

/// Times `ours` and `raw` alternately in batches; returns (ours GB/s, raw GB/s).
fn measure(
    n: usize,
    quick: bool,
    mut ours: impl FnMut() -> devbuf::Result<()>,
    mut raw: impl FnMut() -> sys::CUresult,
) -> (f64, f64) {
    let reps = reps_for(n, quick);
    let batch = (reps / 10).max(1);
    // Warm up both paths.
    for _ in 0..3.min(reps) {
        ours().expect("devbuf transfer");
        assert_eq!(raw(), sys::CUresult::CUDA_SUCCESS);
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..(reps / batch).max(3) {
        let t = Instant::now();
        for _ in 0..batch {
            ours().expect("devbuf transfer");
        }
        a.push(t.elapsed().as_secs_f64() / batch as f64);
        let t = Instant::now();
        for _ in 0..batch {
            assert_eq!(raw(), sys::CUresult::CUDA_SUCCESS);
        }
        b.push(t.elapsed().as_secs_f64() / batch as f64);
    }
    (n as f64 / median(a) / 1e9, n as f64 / median(b) / 1e9)
}

fn main() -> devbuf::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    if !cuda::is_available() {
        println!(
            "bench_transfer: no GPU ({}); nothing to measure",
            cuda::unavailable_reason().unwrap_or_default()
        );
        return Ok(());
    }
    let ctx = Context::new(0)?;
    println!(
        "# bench_transfer on {} (device 0), driver CUDA {:?}",
        ctx.device_name(),
        cuda::driver_version()?
    );
    println!();
    println!("| transfer | size | devbuf GB/s | driver GB/s | devbuf / driver |");
    println!("|---|---|---|---|---|");
    let sizes = [4 * KIB, MIB, 64 * MIB, GIB];
    for &n in &sizes {
        let label = match n {
            n if n >= GIB => format!("{} GiB", n / GIB),
            n if n >= MIB => format!("{} MiB", n / MIB),
            n => format!("{} KiB", n / KIB),
        };
        let dev = ctx.allocate(n)?;
        let dev2 = ctx.allocate(n)?;
        dev.fill(0x5A)?;
        let mut pinned = ctx.allocate_host(n)?;
        pinned
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = i as u8);
        let mut pageable = vec![0u8; n];
        pageable
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = (i * 7) as u8);
        let raw_ctx = ctx.as_raw() as sys::CUcontext;
        // Safety: the primary context is live for the whole program.
        let bind = || unsafe { sys::cuCtxSetCurrent(raw_ctx) };
        let d = dev.address();
        let d2 = dev2.address();

        let row = |name: &str, r: (f64, f64)| {
            println!(
                "| {name} | {label} | {:.2} | {:.2} | {:.3} |",
                r.0,
                r.1,
                r.0 / r.1
            );
        };

        let pp = pinned.as_ptr();
        let r = measure(
            n,
            quick,
            || dev.copy_from_host(0, &pinned),
            || {
                bind();
                // Safety: `pinned` holds n readable bytes; `d` is an n-byte allocation.
                unsafe { sys::cuMemcpyHtoD_v2(d, pp.cast(), n) }
            },
        );
        row("host->device, page-locked", r);

        let pm = pinned.as_mut_ptr();
        // Safety (both closures): `pm` points at the n-byte page-locked buffer, which
        // outlives the measurement and is not otherwise accessed meanwhile.
        let r = measure(
            n,
            quick,
            || dev.copy_to_host_into(0, unsafe { std::slice::from_raw_parts_mut(pm, n) }),
            || {
                bind();
                // Safety: `pinned` holds n writable bytes; `d` is an n-byte allocation.
                unsafe { sys::cuMemcpyDtoH_v2(pm.cast(), d, n) }
            },
        );
        row("device->host, page-locked", r);

        let gp = pageable.as_ptr();
        let r = measure(
            n,
            quick,
            || dev.copy_from_host(0, &pageable),
            || {
                bind();
                // Safety: `pageable` holds n readable bytes.
                unsafe { sys::cuMemcpyHtoD_v2(d, gp.cast(), n) }
            },
        );
        row("host->device, ordinary", r);

        let gm = pageable.as_mut_ptr();
        // Safety (both closures): `gm` points at the n-byte pageable buffer, which
        // outlives the measurement and is not otherwise accessed meanwhile.
        let r = measure(
            n,
            quick,
            || dev.copy_to_host_into(0, unsafe { std::slice::from_raw_parts_mut(gm, n) }),
            || {
                bind();
                // Safety: `pageable` holds n writable bytes.
                unsafe { sys::cuMemcpyDtoH_v2(gm.cast(), d, n) }
            },
        );
        row("device->host, ordinary", r);

        // Device-to-device: count bytes read + written, as cupy/torch tables do.
        let r = measure(
            n,
            quick,
            || {
                dev2.copy_from_device(0, &dev)?;
                ctx.synchronize()
            },
            || {
                bind();
                // Safety: both are n-byte device allocations.
                let r = unsafe { sys::cuMemcpyDtoD_v2(d2, d, n) };
                if r != sys::CUresult::CUDA_SUCCESS {
                    return r;
                }
                // Safety: no arguments.
                unsafe { sys::cuCtxSynchronize() }
            },
        );
        row("device->device (read+write)", (2.0 * r.0, 2.0 * r.1));
        // The last transfer wrote the device data into `pageable`: check it.
        assert!(DeviceBuffer::from_host(&ctx, &pageable)?.equals(&dev)?);
    }
    Ok(())
}
