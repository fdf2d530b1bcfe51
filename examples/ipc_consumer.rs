//! IPC consumer: opens the record batch an `ipc_producer` shared (GPU memory or shared
//! host memory), reads it without copying, prints it and checks it.
//!
//! ```text
//! cargo run --release --features zarr,object_store,flight --example ipc_consumer -- /tmp/batch.handle
//! cargo run --release --features zarr,object_store,flight --example ipc_consumer -- <handle hex> <schema hex>
//! ```
//!
//! With a path, it creates `<path>.done` when finished, which lets the producer exit.

#[path = "common/mod.rs"]
mod common;

#[path = "ipc_common/mod.rs"]
mod ipc_common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use clap::Parser;
use devbuf::arrow::{Batch, read_record_batch};
use devbuf::ipc::IpcHandle;
use devbuf::memory::Memory;

/// How long a consumer given a path waits for the producer to write it.
const WAIT: Duration = Duration::from_secs(60);

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    hex::decode(s.trim()).map_err(|e| e.to_string())
}

fn print_batch(batch: &RecordBatch) {
    println!("schema: {}", batch.schema());
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        let text = format!("{column:?}");
        println!(
            "  {}: {}",
            field.name(),
            text.split_whitespace().collect::<Vec<_>>().join(" ")
        );
    }
}

/// IPC consumer: opens the record batch an `ipc_producer` shared, reads it without
/// copying, prints it and checks it.
#[derive(Parser)]
#[command(name = "ipc_consumer")]
struct Cli {
    /// The producer's handle file (then `<path>.done` is created when finished), or the
    /// handle's hex followed by the schema's hex.
    #[arg(
        required = true,
        num_args = 1..=2,
        value_names = ["HANDLE_FILE | HANDLE_HEX", "SCHEMA_HEX"]
    )]
    args: Vec<String>,
}

fn main() -> std::process::ExitCode {
    common::exit(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = Cli::parse().args;
    let (handle_hex, schema_hex, path) = match args.as_slice() {
        [p] => {
            let p = PathBuf::from(p);
            // Wait (a little) for the producer to write the file, saying so.
            let start = Instant::now();
            if !p.exists() {
                println!(
                    "waiting up to {} s for the producer to write {} ...",
                    WAIT.as_secs(),
                    p.display()
                );
            }
            while !p.exists() && start.elapsed() < WAIT {
                std::thread::sleep(Duration::from_millis(50));
            }
            if !p.exists() {
                return Err(format!(
                    "no handle file at {} after {} s: start `ipc_producer {}` first, or pass \
                     the path it printed",
                    p.display(),
                    WAIT.as_secs(),
                    p.display()
                )
                .into());
            }
            let text = std::fs::read_to_string(&p)
                .map_err(|e| format!("cannot read the handle file {}: {e}", p.display()))?;
            let mut lines = text.lines();
            let h = lines.next().ok_or("the handle file is empty")?.to_string();
            let s = lines
                .next()
                .ok_or("the handle file has no schema line")?
                .to_string();
            (h, s, Some(p))
        }
        [h, s] => (h.clone(), s.clone(), None),
        _ => {
            eprintln!("usage: ipc_consumer <handle file> | ipc_consumer <handle hex> <schema hex>");
            std::process::exit(2);
        }
    };
    let handle = handle_hex.parse::<IpcHandle>()?;
    // The schema's Arrow IPC `Schema` message, as arrow-ipc reads it.
    let schema = std::sync::Arc::new(arrow_ipc::convert::try_schema_from_ipc_buffer(&unhex(
        &schema_hex,
    )?)?);
    let t = Instant::now();
    let batch = match &handle {
        IpcHandle::Device(h) => {
            let message = h.open()?;
            let opened = t.elapsed();
            let Batch::Device(on_device) =
                read_record_batch(&Memory::from(message.clone()), schema)?
            else {
                unreachable!("device memory reads to a device batch")
            };
            println!(
                "opened {} bytes of GPU memory from process {} in {:.1} us on {}; {} rows, {} columns stay on the device",
                message.len(),
                h.exporter_pid().unwrap_or(0),
                opened.as_secs_f64() * 1e6,
                message.context().properties().name,
                on_device.num_rows(),
                on_device.columns().len()
            );
            let zero_copy = on_device
                .columns()
                .iter()
                .flat_map(|c| c.all_buffers())
                .all(|b| {
                    b.is_empty()
                        || (b.address() >= message.address()
                            && b.address() + b.len() as u64
                                <= message.address() + message.len() as u64)
                });
            println!("every column buffer is a slice of the producer's memory: {zero_copy}");
            on_device.to_host()?
        }
        IpcHandle::Host(h) => {
            let mapped = h.open()?;
            println!(
                "mapped {} bytes of shared host memory from process {} read-only in {:.1} us",
                mapped.len(),
                h.exporter_pid(),
                t.elapsed().as_secs_f64() * 1e6
            );
            read_record_batch(&Memory::from(mapped), schema)?.to_host()?
        }
    };
    print_batch(&batch);
    let ok = batch == ipc_common::demo_batch();
    println!(
        "{}",
        if ok {
            "verified: identical to the producer's batch"
        } else {
            "MISMATCH: the batch differs from the producer's"
        }
    );
    if let Some(p) = path {
        let mut done = p.into_os_string();
        done.push(".done");
        let done = PathBuf::from(done);
        std::fs::write(&done, b"done\n")
            .map_err(|e| format!("cannot write {}: {e}", done.display()))?;
    }
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
