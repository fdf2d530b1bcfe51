//! Throughput of reading (and writing) a zarr array through `devbuf::zarr::zarrs`:
//! host reads (decode only) against device reads (decode into page-locked staging +
//! one copy per batch, overlapped), for uncompressed and zstd chunks.
//!
//! ```text
//! cargo run --release --features zarrs --example bench_zarrs [MiB]
//! ```
//!
//! `MiB` (default 256 with a GPU, 64 without) is the array size: float32, 1024 x 1024
//! chunks (4 MiB), written to a temporary directory first. Prints the median of 5 runs
//! after a warm-up. Built without the `zarrs` feature it only says how to build it.

#[cfg(not(feature = "zarrs"))]
fn main() {
    println!("bench_zarrs: built without the `zarrs` feature; run it with --features zarrs");
}

#[cfg(feature = "zarrs")]
fn main() -> devbuf::Result<()> {
    use std::time::Instant;

    use devbuf::cuda::{self, Context};
    use devbuf::zarr::zarrs::{ArraySpec, Compressor, ZarrArray};
    use devbuf::zarr::{BufferPrototype, DataType, NDBuffer};

    let gpu = cuda::is_available();
    let mib: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(if gpu { 256 } else { 64 });
    let rows = (mib * 1024 * 1024 / 4 / 4096).max(1024);
    let shape = [rows, 4096u64];
    let bytes = (rows * 4096 * 4) as f64;
    println!(
        "bench_zarrs: float32 {shape:?} ({:.0} MiB) in 1024 x 1024 chunks, {} threads{}",
        bytes / 1048576.0,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        if gpu {
            format!(", device 0: {}", Context::new(0)?.device_name())
        } else {
            ", no GPU: host only".to_string()
        }
    );
    let values = ndarray::Array2::from_shape_fn((rows as usize, 4096), |(i, j)| {
        ((i * 4096 + j) % 100_003) as f32 * 0.25 + (j % 7) as f32
    });
    let value = NDBuffer::from_ndarray(values);
    let dir = std::env::temp_dir().join(format!("devbuf-bench-zarrs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);

    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let time = |f: &mut dyn FnMut() -> devbuf::Result<()>| -> devbuf::Result<f64> {
        f()?; // warm-up
        let mut t = Vec::new();
        for _ in 0..5 {
            let s = Instant::now();
            f()?;
            t.push(s.elapsed().as_secs_f64());
        }
        Ok(median(t))
    };
    let report = |what: &str, secs: f64| {
        println!(
            "  {what:<42} {:>8.1} ms {:>8.2} GB/s",
            secs * 1e3,
            bytes / secs / 1e9
        );
    };

    for (name, compressor) in [
        ("none", Compressor::None),
        ("zstd-1", Compressor::Zstd { level: 1 }),
    ] {
        let path = dir.join(name);
        let spec =
            ArraySpec::new(&shape, &[1024, 1024], DataType::FLOAT32).with_compressor(compressor);
        let a = ZarrArray::create(&path, &spec)?;
        let s = Instant::now();
        a.write_subset(&[0, 0], &value)?;
        let stored: u64 = std::fs::read_dir(path.join("c"))
            .map(|d| d.count() as u64)
            .unwrap_or(0);
        println!(
            "{name}: wrote from the host in {:.1} ms ({} chunk rows)",
            s.elapsed().as_secs_f64() * 1e3,
            stored
        );
        let grid = a.metadata().grid_shape.clone();
        let chunks: Vec<[u64; 2]> = (0..grid[0])
            .flat_map(|i| (0..grid[1]).map(move |j| [i, j]))
            .collect();
        let host = BufferPrototype::Host;
        report(
            "read_all -> host",
            time(&mut || a.read_all(&host).map(drop))?,
        );
        report(
            "read_chunks -> host",
            time(&mut || a.read_chunks(&chunks, &host).map(drop))?,
        );
        if gpu {
            let dev = BufferPrototype::Device(0);
            let ctx = Context::new(0)?;
            report(
                "read_all -> device (8 MiB batches)",
                time(&mut || {
                    a.read_all(&dev)?;
                    ctx.synchronize()
                })?,
            );
            report(
                "read_chunks -> device",
                time(&mut || {
                    a.read_chunks(&chunks, &dev)?;
                    ctx.synchronize()
                })?,
            );
            let on_dev = a.read_all(&dev)?;
            report(
                "write_subset <- device",
                time(&mut || a.write_subset(&[0, 0], &on_dev))?,
            );
            let a = a.with_batch_bytes(32 << 20);
            report(
                "read_all -> device (32 MiB batches)",
                time(&mut || {
                    a.read_all(&dev)?;
                    ctx.synchronize()
                })?,
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
