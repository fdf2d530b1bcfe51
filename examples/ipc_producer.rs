//! IPC producer: writes a record batch into GPU memory (or, without a GPU, into shared
//! host memory), prints the handle, and waits until a consumer is done.
//!
//! ```text
//! cargo run --release --features zarr,object_store,flight --example ipc_producer -- /tmp/batch.handle     # terminal 1
//! cargo run --release --features zarr,object_store,flight --example ipc_consumer -- /tmp/batch.handle     # terminal 2
//! ```
//!
//! With a path, the producer writes two lines there (the buffer handle and the schema,
//! both as hex) and waits until `<path>.done` appears (the consumer creates it). Without
//! a path it prints the two lines and waits for Enter.

#[path = "common/mod.rs"]
mod common;

#[path = "ipc_common/mod.rs"]
mod ipc_common;

use std::io::BufRead;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use devbuf::arrow::{Batch, serialize_record_batch, serialize_record_batch_shared};
use devbuf::cuda::{self, Context};
use devbuf::ipc::IpcHandle;
use devbuf::zarr::BufferPrototype;

/// IPC producer: writes a record batch into GPU memory (or, without a GPU, into shared
/// host memory), shares its handle and waits until a consumer is done.
#[derive(Parser)]
#[command(name = "ipc_producer")]
struct Cli {
    /// Writes the handle and the schema (two lines of hex) here and waits for
    /// `<PATH>.done`; without it, prints them and waits for Enter.
    path: Option<PathBuf>,
}

fn main() -> std::process::ExitCode {
    common::exit(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let path = Cli::parse().path;
    let batch = ipc_common::demo_batch();
    // Whatever holds the memory must live until the consumer is done.
    let mut _device_memory = None;
    let mut _host_memory = None;
    let handle = if cuda::is_available() {
        let ctx = Context::new(0)?;
        let message =
            serialize_record_batch(&Batch::from(batch.clone()), &BufferPrototype::Device(0))?;
        let message = message
            .as_device()
            .expect("serialized for device 0")
            .clone();
        println!(
            "wrote a {}-row batch as {} bytes of Arrow IPC into GPU memory on {} (device 0)",
            batch.num_rows(),
            message.len(),
            ctx.properties().name
        );
        let h = IpcHandle::Device(message.export_ipc()?);
        _device_memory = Some(message);
        h
    } else {
        println!(
            "no GPU ({}): using shared host memory",
            cuda::unavailable_reason().unwrap_or_default()
        );
        let shm = serialize_record_batch_shared(&batch)?;
        println!(
            "wrote a {}-row batch as {} bytes of Arrow IPC into shared host memory",
            batch.num_rows(),
            shm.len()
        );
        let h = IpcHandle::Host(shm.export_ipc(..)?);
        _host_memory = Some(shm);
        h
    };
    // The schema as an Arrow IPC `Schema` message (what arrow-ipc's StreamWriter writes
    // first), for the consumer.
    let mut schema_message = Vec::new();
    arrow_ipc::writer::StreamWriter::try_new(&mut schema_message, &batch.schema())?;
    let schema = hex::encode(&schema_message);
    match &path {
        Some(p) => {
            let done = done_path(p);
            let _ = std::fs::remove_file(&done);
            let tmp = p.with_extension("tmp");
            std::fs::write(&tmp, format!("{handle}\n{schema}\n"))
                .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
            std::fs::rename(&tmp, p)
                .map_err(|e| format!("cannot rename {} to {}: {e}", tmp.display(), p.display()))?;
            println!("handle written to {}", p.display());
            println!("waiting for the consumer to create {} ...", done.display());
            while !done.exists() {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = std::fs::remove_file(&done);
            let _ = std::fs::remove_file(p);
        }
        None => {
            println!("handle: {handle}");
            println!("schema: {schema}");
            println!(
                "run: cargo run --release --features zarr,object_store,flight --example ipc_consumer -- <handle> <schema>"
            );
            println!("press Enter when the consumer is done ...");
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line)?;
        }
    }
    println!("consumer done; releasing the memory");
    Ok(())
}

fn done_path(p: &std::path::Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".done");
    PathBuf::from(s)
}
