//! Read a real zarr array (written by zarr-python) chunk by chunk onto the GPU, or into
//! host memory on a machine without one, and print its shape, data type and sum.
//!
//! ```text
//! cargo run --release --features zarr,object_store,flight --example zarrs_read [PATH.zarr | URL]
//! ```
//!
//! A URL (`s3://bucket/array.zarr`, `gs://...`, `az://...`, `https://...`, `file://...`)
//! reads from object storage; credentials and endpoint come from the environment
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`, ...).
//!
//! `PATH.zarr` defaults to the bundled fixture `tests/fixtures/zarr/v3_float32_sharded.zarr`;
//! when it cannot be found (a GPU bundle run outside a checkout) the example writes a
//! small array of its own and reads that. Reads longer than a second show a progress
//! bar on stderr; `RUST_LOG=devbuf_zarr=debug` logs every read's span and each chunk
//! file or fetch. Built without the `zarrs` feature it only says
//! how to build it.

#[cfg(feature = "zarr")]
#[path = "common/mod.rs"]
mod common;

#[cfg(not(feature = "zarr"))]
fn main() {
    println!("zarrs_read: built without the `zarrs` feature; run it with --features zarr");
}

/// Reads a zarr array chunk by chunk onto the GPU (or into host memory without one) and
/// prints its shape, data type and sum.
#[cfg(feature = "zarr")]
#[derive(clap::Parser)]
#[command(name = "zarrs_read")]
struct Cli {
    /// The array: a directory, or a URL (s3://, gs://, az://, http(s)://, file://)
    /// [default: the bundled fixture tests/fixtures/zarr/v3_float32_sharded.zarr].
    #[arg(value_name = "PATH.zarr | URL")]
    source: Option<String>,
}

#[cfg(feature = "zarr")]
fn main() -> std::process::ExitCode {
    common::exit(run())
}

#[cfg(feature = "zarr")]
fn run() -> devbuf::Result<()> {
    use std::path::PathBuf;
    use std::time::Instant;

    use devbuf::cuda;
    use devbuf::zarr::{ArraySpec, Compressor, ZarrArray};
    use devbuf::zarr::{BufferPrototype, Dtype, NDBuffer};

    let default = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/zarr/v3_float32_sharded.zarr");
    let local = PathBuf::from("tests/fixtures/zarr/v3_float32_sharded.zarr");
    let path = match <Cli as clap::Parser>::parse().source {
        Some(p) => p,
        None if default.is_dir() => default.display().to_string(),
        None if local.is_dir() => local.display().to_string(),
        None => {
            // No checkout around: make a 512 x 512 float32 array, 64 x 64 chunks, zstd.
            let dir =
                std::env::temp_dir().join(format!("devbuf-zarrs-read-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let spec = ArraySpec::new(&[512, 512], &[64, 64], Dtype::FLOAT32)
                .with_compressor(Compressor::Zstd { level: 3 });
            let a = ZarrArray::create(&dir, &spec)?;
            let values =
                ndarray::Array2::from_shape_fn((512, 512), |(i, j)| (i * 512 + j) as f32 * 0.5);
            a.write_subset(&[0, 0], &NDBuffer::from_ndarray(values))?;
            println!(
                "(fixture not found: wrote a demo array to {})",
                dir.display()
            );
            dir.display().to_string()
        }
    };

    common::progress::init_logging();
    let mut array = common::open_array(&path)?;
    // A progress bar on reads longer than a second.
    common::progress::show_progress(&mut array)?;
    let m = array.metadata();
    println!("{path}");
    println!(
        "  zarr v{}, shape {:?}, stored as {} in {:?} order, read as {}",
        m.zarr_format,
        m.shape,
        m.stored_dtype,
        m.order,
        array.dtype()
    );
    println!(
        "  chunks {:?} (grid {:?}){}, codecs {:?}, fill value {}",
        m.chunk_shape,
        m.grid_shape,
        m.subchunk_shape
            .as_ref()
            .map(|s| format!(" of inner chunks {s:?}"))
            .unwrap_or_default(),
        m.codecs,
        m.fill_value
    );

    let proto = if cuda::is_available() {
        BufferPrototype::Device(0)
    } else {
        println!(
            "  no GPU ({}): reading into host memory",
            cuda::unavailable_reason().unwrap_or_default()
        );
        BufferPrototype::Host
    };

    // Every chunk, in one call: decoded on the host in parallel, moved to the device in
    // batches through page-locked staging (one copy per batch).
    let grid = &m.grid_shape;
    let n: u64 = grid.iter().product();
    let indices: Vec<Vec<u64>> = (0..n)
        .map(|mut lin| {
            let mut idx = vec![0u64; grid.len()];
            for axis in (0..grid.len()).rev() {
                idx[axis] = lin % grid[axis];
                lin /= grid[axis];
            }
            idx
        })
        .collect();
    let t = Instant::now();
    let mut report = devbuf::zarr::ReadReport::default();
    let chunks = array.read_chunks(&indices).report(&mut report).to(&proto)?;
    if let BufferPrototype::Device(o) = proto {
        cuda::Context::new(o)?.synchronize()?;
    }
    let took = t.elapsed();
    let bytes: usize = chunks.iter().map(|c| c.nbytes()).sum();
    println!(
        "  read {} chunks, {} bytes, into {proto} in {:.2} ms",
        chunks.len(),
        bytes,
        took.as_secs_f64() * 1e3
    );
    println!("  read engine: {report}");

    // The sum, in float64 (the chunks come back to the host for it).
    let mut sum = 0.0f64;
    let mut count = 0usize;
    for c in &chunks {
        let f = c
            .astype(Dtype::FLOAT64)?
            .to_prototype(&BufferPrototype::Host)?;
        let v = f.to_ndarray::<f64>()?;
        sum += v.iter().filter(|x| x.is_finite()).sum::<f64>();
        count += v.len();
    }
    println!("  {count} elements, sum of the finite ones (real parts) {sum:.6}");

    // The same array in one read, as a check.
    let mut report = devbuf::zarr::ReadReport::default();
    let whole = array.read(..).report(&mut report).to(&proto)?;
    println!(
        "  read_all: shape {:?}, {} on {}",
        whole.shape(),
        whole.dtype(),
        if whole.prototype().is_device() {
            "the device"
        } else {
            "the host"
        }
    );
    println!("  read engine: {report}");
    Ok(())
}
