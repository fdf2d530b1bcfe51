//! The devbuf pipeline, end to end:
//!
//! ```text
//! cargo run --release --features zarr,object_store,flight --example tour
//! ```
//!
//! 1. opens a zarr array written by zarr-python (the bundled fixture) and a larger one
//!    it writes itself (64 MiB of float32, zstd);
//! 2. loads every chunk onto the GPU (decoded on the host, moved in page-locked batches) —
//!    or into host memory when there is no GPU;
//! 3. turns the chunks into one Arrow record batch (chunk coordinates plus an
//!    `arrow.fixed_shape_tensor` column) without leaving the device, and hands the tensor
//!    column through the Arrow C Device Data Interface (zero-copy, checked by address);
//! 4. shares the batch with a consumer process through an IPC handle (device memory, or
//!    shared host memory), and the consumer verifies every chunk bit for bit against the
//!    source array it reads itself;
//! 5. prints a short report.
//!
//! Reads longer than a second show a progress bar on stderr; `RUST_LOG=info` (or
//! `debug`) logs devbuf's `tracing` spans and events there.
//!
//! `tour PATH.zarr` or `tour URL` (`s3://bucket/array.zarr`, `https://...`; with the
//! `object_store` feature, credentials and endpoint from the environment) reads that array
//! in step 1 instead of the fixture.
//!
//! Runs in well under a minute on a 2-core machine without a GPU.

#[path = "common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use clap::Parser;
use devbuf::ElementType;
use devbuf::arrow::c_device::{ExportDevice, SyncEvent, export_array, import_array};
use devbuf::arrow::{
    CHUNK_COLUMN, ChunkBatch, ChunkGrid, read_record_batch, serialize_record_batch,
    serialize_record_batch_shared,
};
use devbuf::cuda::{self, Context};
use devbuf::ipc::IpcHandle;
use devbuf::memory::Memory;
use devbuf::zarr::{ArraySpec, Compressor, ZarrArray};
use devbuf::zarr::{BufferPrototype, Dtype, NDBuffer};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The sharded fixture: under `DEVBUF_ZARR_FIXTURES` (the GPU bundle sets it), next
/// to the sources, or under the working directory.
fn fixture() -> PathBuf {
    let name = "v3_float32_sharded.zarr";
    let rel = Path::new("tests/fixtures/zarr").join(name);
    let candidates = [
        std::env::var_os("DEVBUF_ZARR_FIXTURES").map(|d| PathBuf::from(d).join(name)),
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join(&rel)),
        std::env::current_exe().ok().and_then(|e| {
            e.parent()?
                .parent()
                .map(|b| b.join("fixtures/zarr").join(name))
        }),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|p| p.is_dir())
        .unwrap_or(rel)
}

/// A size for people: bytes, KiB or MiB with one decimal (the steps and the summary
/// table print sizes with this one function, so they agree).
fn size(n: usize) -> String {
    let n = n as f64;
    if n < 1024.0 {
        format!("{n:.0} B")
    } else if n < 1024.0 * 1024.0 {
        format!("{:.1} KiB", n / 1024.0)
    } else {
        format!("{:.1} MiB", n / (1024.0 * 1024.0))
    }
}

/// A rate for people, in GB/s with three significant digits (0.0123 GB/s, 1.23 GB/s,
/// 12.3 GB/s): a small array's rate does not print as 0.00.
fn rate(bytes: usize, seconds: f64) -> String {
    let r = bytes as f64 / seconds / 1e9;
    let decimals = if r >= 100.0 {
        0
    } else if r > 0.0 {
        (2 - r.log10().floor() as i32).clamp(1, 6) as usize
    } else {
        2
    };
    format!("{r:.decimals$} GB/s")
}

/// Every chunk coordinate of an array's grid, in C order.
fn all_chunks(grid_shape: &[u64]) -> Vec<Vec<u64>> {
    let mut out = vec![vec![]];
    for &n in grid_shape {
        out = out
            .into_iter()
            .flat_map(|p| (0..n).map(move |i| [p.clone(), vec![i]].concat()))
            .collect();
    }
    out
}

/// Writes a deterministic 4096 x 4096 float32 array (64 MiB) with zstd into `dir`.
fn make_big_array(dir: &Path) -> Res<ZarrArray> {
    let (rows, cols, chunk) = (4096usize, 4096usize, 512usize);
    let spec = ArraySpec::new(
        &[rows as u64, cols as u64],
        &[chunk as u64, chunk as u64],
        Dtype::from(ElementType::Float32),
    )
    .with_compressor(Compressor::Zstd { level: 1 });
    let array = ZarrArray::create(dir, &spec)?;
    let values: Vec<f32> = (0..rows * cols)
        .map(|i| ((i % 65_521) as f32 * 0.25).sin() * 1000.0)
        .collect();
    let nd = NDBuffer::from_ndarray(ndarray::ArrayD::from_shape_vec(vec![rows, cols], values)?);
    array.write_subset(&[0, 0], &nd)?;
    Ok(array)
}

struct Report {
    name: String,
    chunks: usize,
    bytes: usize,
    load_s: f64,
    arrow_s: f64,
    share_verify_s: f64,
    zero_copy: bool,
}

fn run_one(
    name: &str,
    array: &ZarrArray,
    prototype: &BufferPrototype,
    ctx: Option<&Context>,
) -> Res<Report> {
    let meta = array.metadata().clone();
    println!(
        "\n== {name}: zarr v{}, shape {:?}, chunks {:?}, {} ({}), codecs {:?}",
        meta.zarr_format, meta.shape, meta.chunk_shape, meta.stored_dtype, meta.order, meta.codecs
    );
    let coords = all_chunks(&meta.grid_shape);

    // 1. Load every chunk into the prototype's memory.
    let t = Instant::now();
    let mut read_report = devbuf::zarr::ReadReport::default();
    let chunks = array
        .read_chunks(&coords)
        .report(&mut read_report)
        .to(prototype)?;
    if let Some(c) = ctx {
        c.synchronize()?;
    }
    let load_s = t.elapsed().as_secs_f64();
    let bytes: usize = chunks.iter().map(|c| c.nbytes()).sum();
    println!(
        "  loaded {} chunks, {}, into {} in {:.1} ms ({})",
        chunks.len(),
        size(bytes),
        if ctx.is_some() {
            "GPU memory"
        } else {
            "host memory"
        },
        load_s * 1e3,
        rate(bytes, load_s)
    );
    println!("  read engine: {read_report}");

    // 2. One Arrow record batch: coordinates + a fixed_shape_tensor column.
    let t = Instant::now();
    let shape: Vec<usize> = meta.shape.iter().map(|&x| x as usize).collect();
    let chunk_shape: Vec<usize> = meta.chunk_shape.iter().map(|&x| x as usize).collect();
    let grid =
        ChunkGrid::new(&shape, &chunk_shape, array.dtype())?.with_fill_value(meta.fill_value);
    let batch = ChunkBatch::from_chunks(
        &grid,
        coords.iter().map(|c| c.as_slice()).zip(chunks.iter()),
        prototype,
    )?;
    // Hand the tensor column to an in-process Arrow consumer through the C Device Data
    // Interface: the consumer's buffers must be the producer's (zero-copy).
    let zero_copy = if let Some(d) = batch.batch().as_device() {
        let col = d.column_by_name(CHUNK_COLUMN).ok_or("no chunk column")?;
        let (mut c_array, schema) = export_array(col, SyncEvent::DefaultStream)?;
        let imported = import_array(&mut c_array, &schema, None)?.into_device()?;
        let a: Vec<u64> = col.all_buffers().iter().map(|b| b.address()).collect();
        let b: Vec<u64> = imported.all_buffers().iter().map(|b| b.address()).collect();
        a == b
    } else {
        let rb = batch.batch().as_host().ok_or("no host batch")?;
        let col = rb.column_by_name(CHUNK_COLUMN).ok_or("no chunk column")?;
        let (mut c_array, schema) = export_array(col.as_ref(), ExportDevice::Cpu)?;
        let imported = import_array(&mut c_array, &schema, None)?.into_host()?;
        imported.to_data().child_data()[0].buffers()[0].as_ptr()
            == col.to_data().child_data()[0].buffers()[0].as_ptr()
    };
    let arrow_s = t.elapsed().as_secs_f64();
    println!(
        "  Arrow batch of {} rows ({} coordinate columns + tensor column) in {:.1} ms; \
         C Device Data Interface round trip zero-copy: {zero_copy}",
        batch.len(),
        batch.chunk_shape().len(),
        arrow_s * 1e3
    );

    // 3. Share it with a consumer process.
    let t = Instant::now();
    let (handle, schema, _keep_device, _keep_host) = if let Some(d) = batch.batch().as_device() {
        let message = serialize_record_batch(batch.batch(), &batch.prototype())?; // device to device
        let message = message
            .as_device()
            .expect("serialized on the device")
            .clone();
        let h = IpcHandle::Device(message.export_ipc()?);
        (h, d.schema(), Some(message), None)
    } else {
        let rb = batch.batch().to_host()?;
        let shm = serialize_record_batch_shared(&rb)?;
        let h = IpcHandle::Host(shm.export_ipc(..)?);
        (h, rb.schema(), None, Some(shm))
    };
    // The schema travels as an Arrow IPC `Schema` message (the first message of a stream).
    let mut schema_message = Vec::new();
    arrow_ipc::writer::StreamWriter::try_new(&mut schema_message, &schema)?;
    let exe = std::env::current_exe()?;
    let status = Command::new(exe)
        .arg("--consumer")
        .arg(handle.to_string())
        .arg(hex::encode(&schema_message))
        .arg(array.location())
        .status()?;
    let share_verify_s = t.elapsed().as_secs_f64();
    if !status.success() {
        return Err(format!("the consumer failed: {status}").into());
    }
    println!(
        "  shared and verified in another process in {:.0} ms (serialize, export the \
         handle, start the process, open, read and verify: the consumer's own times above)",
        share_verify_s * 1e3
    );
    Ok(Report {
        name: name.to_string(),
        chunks: chunks.len(),
        bytes,
        load_s,
        arrow_s,
        share_verify_s,
        zero_copy,
    })
}

/// The consumer process: opens the handle, reads the batch, and compares every chunk with
/// the source array (read here, on the host).
fn consumer(handle_hex: &str, schema_hex: &str, source: &str) -> Res<()> {
    let t = Instant::now();
    let handle = handle_hex.parse::<IpcHandle>()?;
    let schema_message = hex::decode(schema_hex).map_err(|e| format!("bad hex text: {e}"))?;
    let schema = std::sync::Arc::new(arrow_ipc::convert::try_schema_from_ipc_buffer(
        &schema_message,
    )?);
    let batch = match &handle {
        IpcHandle::Device(h) => {
            ChunkBatch::try_from(read_record_batch(&Memory::from(h.open()?), schema)?)?
        }
        IpcHandle::Host(h) => {
            ChunkBatch::try_from(read_record_batch(&Memory::from(h.open()?), schema)?)?
        }
    };
    let open_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let array = common::open_array(source)?;
    let mut checked = 0usize;
    for i in 0..batch.len() {
        let coords = batch.coords(i).ok_or("missing coordinates")?.to_vec();
        let got = batch.chunk(i)?.to_buffer()?.to_host()?;
        let want = array
            .read_chunks(&[&coords])
            .to(&BufferPrototype::Host)
            .map(|mut v| v.remove(0))?
            .to_buffer()?
            .to_host()?;
        if got != want {
            return Err(format!("chunk {coords:?} differs from the source").into());
        }
        checked += got.len();
    }
    println!(
        "  consumer (pid {}): opened the {} handle and read {} chunks zero-copy in {:.2} ms; \
         verified {} bit for bit against the zarr source in {:.1} ms",
        std::process::id(),
        if matches!(handle, IpcHandle::Device(_)) {
            "GPU memory"
        } else {
            "shared host memory"
        },
        batch.len(),
        open_s * 1e3,
        size(checked),
        t.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}

/// The devbuf tour: a zarr array -> chunks on the GPU (or the host) -> Arrow -> the C
/// Device Data Interface -> shared with another process, which verifies every chunk.
#[derive(Parser)]
#[command(name = "tour")]
struct Cli {
    /// Reads this array in step 1 instead of the fixture: a directory, or a URL with the
    /// `object_store` feature (s3://, gs://, az://, http(s)://, file://).
    #[arg(value_name = "PATH.zarr | URL", conflicts_with = "consumer")]
    source: Option<String>,
    /// Internal: the consumer process the tour starts.
    #[arg(
        long,
        hide = true,
        num_args = 3,
        value_names = ["HANDLE_HEX", "SCHEMA_HEX", "SOURCE"]
    )]
    consumer: Option<Vec<String>>,
}

fn main() -> std::process::ExitCode {
    common::exit(run())
}

fn run() -> Res<()> {
    let cli = Cli::parse();
    if let Some([h, s, src]) = cli.consumer.as_deref() {
        return consumer(h, s, src);
    }
    let started = Instant::now();
    let ctx = if cuda::is_available() {
        Some(Context::new(0)?)
    } else {
        None
    };
    let prototype = match &ctx {
        Some(c) => {
            let p = c.properties();
            println!(
                "devbuf tour on {} (device 0, sm_{}{}, {} GiB), driver CUDA {:?}",
                p.name,
                p.compute_capability.0,
                p.compute_capability.1,
                p.total_memory >> 30,
                cuda::driver_version()?
            );
            BufferPrototype::Device(0)
        }
        None => {
            println!(
                "devbuf tour on the host: no GPU here ({})",
                cuda::unavailable_reason().unwrap_or_default()
            );
            BufferPrototype::Host
        }
    };
    common::progress::init_logging();
    let mut reports = Vec::new();
    let (mut fixture, label) = match &cli.source {
        Some(source) => (common::open_array(source)?, "your array"),
        None => (ZarrArray::open(fixture())?, "zarr-python fixture"),
    };
    // A progress bar on reads longer than a second (a large array of yours).
    common::progress::show_progress(&mut fixture)?;
    reports.push(run_one(label, &fixture, &prototype, ctx.as_ref())?);
    let dir = std::env::temp_dir().join(format!("devbuf-tour-{}", std::process::id()));
    let t = Instant::now();
    let mut big = make_big_array(&dir)?;
    common::progress::show_progress(&mut big)?;
    println!(
        "\n(wrote a 64 MiB float32 zarr v3 array with zstd to {} in {:.0} ms)",
        dir.display(),
        t.elapsed().as_secs_f64() * 1e3
    );
    let big_report = run_one("64 MiB float32, zstd", &big, &prototype, ctx.as_ref());
    let _ = std::fs::remove_dir_all(&dir);
    reports.push(big_report?);

    println!(
        "\n== report ({})",
        if ctx.is_some() { "GPU" } else { "host" }
    );
    println!(
        "| array | chunks | size | load ms | load rate | to Arrow ms | C interface zero-copy | share + verify in another process ms |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in &reports {
        println!(
            "| {} | {} | {} | {:.1} | {} | {:.1} | {} | {:.0} |",
            r.name,
            r.chunks,
            size(r.bytes),
            r.load_s * 1e3,
            rate(r.bytes, r.load_s),
            r.arrow_s * 1e3,
            r.zero_copy,
            r.share_verify_s * 1e3
        );
    }
    if let Some(c) = &ctx {
        println!(
            "device memory still in use by devbuf: {} bytes",
            c.bytes_allocated()
        );
    }
    println!(
        "total {:.2} s; every chunk verified by the consumer",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
