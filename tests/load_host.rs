//! Load on the host (issue 11, item 7, the host path; the device path is
//! `tests/gpu/faults/load.rs`): 16 threads mixing shared memory export/open (in this
//! process and in another), Arrow record batches through shared memory, ChunkBatch
//! builds and zarr reads, for a few seconds (`DEVBUF_LOAD_SECS`, default 2). Every
//! operation checks its data against an oracle; none fails; afterwards the process holds
//! as many descriptors and shared-memory mappings as before.
//!
//! The counts are process-wide (`/proc/self/fd`, devbuf's memory files in
//! `/proc/self/maps`): this binary holds this one test, so nothing else moves them. The
//! baseline is taken after one operation of each kind.

#![cfg(target_os = "linux")]

#[path = "common/batches.rs"]
mod batches;
#[path = "common/peer.rs"]
mod peer;
#[cfg(feature = "zarr")]
#[path = "common/zarrs.rs"]
mod zarrs_common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, mpsc};
use std::time::{Duration, Instant};

use devbuf::arrow::{ChunkBatch, ChunkGrid, serialize_record_batch_shared};
use devbuf::ipc::{HostIpcHandle, SharedMemory};
use devbuf::zarr::{BufferPrototype, Dtype, NDBuffer};
use peer::{Peer, fnv, say, wait_line};
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

const THREADS: usize = 16;
const ROLE: &str = "DEVBUF_LOAD_HOST_CHILD";
const KINDS: [&str; 5] = ["shared_memory", "arrow_ipc", "chunk_batch", "zarr", "peer"];
const PEER: usize = 4;

/// The child that opens shared-memory handles sent to it (one hex handle per line),
/// answers with the fingerprint of the bytes after unmapping them, and ends at "quit".
#[test]
#[ignore = "child role of the load test (it runs it)"]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    assert_eq!(role, "echo", "unknown child role {role}");
    loop {
        let line = wait_line();
        if line == "quit" || line.is_empty() {
            break;
        }
        let b = line.parse::<HostIpcHandle>().unwrap().open().unwrap();
        let print = fnv(b.as_slice());
        drop(b);
        say("print", print);
    }
    say("done", "");
}

/// Descriptors this process holds.
fn descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Mappings of devbuf memory files in this process.
fn shared_mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains("/memfd:devbuf-"))
        .count()
}

struct Shared {
    #[cfg(feature = "zarr")]
    zarr: zarrs_common::LoadArray,
    peer: Mutex<Option<Peer>>,
}

type Check = Result<(), String>;

fn ensure(ok: bool, what: &str) -> Check {
    if ok {
        Ok(())
    } else {
        Err(format!("{what}: wrong data"))
    }
}

fn bytes(r: &mut SmallRng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    r.fill_bytes(&mut v);
    v
}

/// Shared memory of random bytes, a slice of it opened twice in this process and
/// compared, the two mappings closed in a random order.
fn shared_memory(_: &Shared, r: &mut SmallRng) -> Check {
    let n = r.random_range(1..1 << 20);
    let data = bytes(r, n);
    let mut shm = SharedMemory::create(n).map_err(|e| e.to_string())?;
    shm.copy_from_slice(&data);
    let o = r.random_range(0..n);
    let l = r.random_range(1..=n - o);
    let h = shm.export_ipc(o..o + l).map_err(|e| e.to_string())?;
    let h = h
        .to_string()
        .parse::<HostIpcHandle>()
        .map_err(|e| e.to_string())?;
    let (a, b) = (
        h.open().map_err(|e| e.to_string())?,
        h.open().map_err(|e| e.to_string())?,
    );
    let (first, second) = if r.random_bool(0.5) { (a, b) } else { (b, a) };
    ensure(first.as_slice() == &data[o..o + l], "first opening")?;
    drop(first);
    ensure(
        second.as_slice() == &data[o..o + l],
        "second opening after the first closed",
    )
}

/// A record batch written into shared memory and read back through a mapping.
fn arrow_ipc(_: &Shared, r: &mut SmallRng) -> Check {
    let batch = batches::mixed_batch(r.random(), r.random_range(0..300));
    let shm = serialize_record_batch_shared(&batch).map_err(|e| e.to_string())?;
    let mapped = shm
        .export_ipc(..)
        .and_then(|h| h.open())
        .map_err(|e| e.to_string())?;
    let back = read_host(&mapped, batch.schema()).map_err(|e| e.to_string())?;
    ensure(back == batch, "record batch")
}

/// A ChunkBatch of random float32 chunks of a random grid, read back chunk by chunk.
fn chunk_batch(_: &Shared, r: &mut SmallRng) -> Check {
    let shape = [r.random_range(5..45), r.random_range(5..45)];
    let chunk = [r.random_range(2..10), r.random_range(2..10)];
    let grid = ChunkGrid::new(&shape, &chunk, Dtype::FLOAT32).map_err(|e| e.to_string())?;
    let g = grid.grid_shape();
    let mut chunks = Vec::new();
    for _ in 0..r.random_range(1..13) {
        let c = vec![
            r.random_range(0..g[0]) as u64,
            r.random_range(0..g[1]) as u64,
        ];
        let ext = grid.chunk_extent(&c).map_err(|e| e.to_string())?;
        let vals: Vec<f32> = (0..ext.iter().product::<usize>())
            .map(|_| r.random_range(-1e6f32..1e6))
            .collect();
        let nd = NDBuffer::from_ndarray(ndarray::ArrayD::from_shape_vec(ext, vals).unwrap());
        chunks.push((c, nd));
    }
    let batch = ChunkBatch::from_chunks(
        &grid,
        chunks.iter().map(|(c, n)| (c.as_slice(), n)),
        &BufferPrototype::Host,
    )
    .map_err(|e| e.to_string())?;
    for (k, (c, nd)) in chunks.iter().enumerate() {
        ensure(batch.coords(k) == Some(&c[..]), "coordinates")?;
        let got = batch
            .chunk(k)
            .and_then(|x| x.to_ndarray::<f32>())
            .map_err(|e| e.to_string())?;
        ensure(got == nd.to_ndarray::<f32>().unwrap(), "chunk values")?;
    }
    Ok(())
}

#[cfg(feature = "zarr")]
fn zarr(s: &Shared, r: &mut SmallRng) -> Check {
    s.zarr.read(r, &BufferPrototype::Host)
}

/// Without the `zarrs` feature there is no zarr reader: counted, nothing done.
#[cfg(not(feature = "zarr"))]
fn zarr(_: &Shared, _: &mut SmallRng) -> Check {
    Ok(())
}

/// Shared memory opened by the child process (thread 0 only).
fn peer(s: &Shared, r: &mut SmallRng) -> Check {
    let n = r.random_range(1..1 << 20);
    let data = bytes(r, n);
    let mut shm = SharedMemory::create(n).map_err(|e| e.to_string())?;
    shm.copy_from_slice(&data);
    let o = r.random_range(0..n);
    let l = r.random_range(1..=n - o);
    let h = shm.export_ipc(o..o + l).map_err(|e| e.to_string())?;
    let mut guard = s.peer.lock().unwrap();
    let p = guard.as_mut().ok_or("no peer")?;
    p.send(&h.to_string());
    ensure(
        p.expect("print") == fnv(&data[o..o + l]).to_string(),
        "the other process's fingerprint",
    )
}

fn run_one(kind: usize, s: &Shared, r: &mut SmallRng) -> Check {
    match kind {
        0 => shared_memory(s, r),
        1 => arrow_ipc(s, r),
        2 => chunk_batch(s, r),
        3 => zarr(s, r),
        _ => peer(s, r),
    }
}

#[test]
fn load_sixteen_threads_mixing_host_work() {
    let secs: f64 = std::env::var("DEVBUF_LOAD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let seed = std::env::var("DEVBUF_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().next_u64());
    println!("load_host: seed {seed}");
    let mut r = SmallRng::seed_from_u64(seed);
    let shared = Arc::new(Shared {
        #[cfg(feature = "zarr")]
        zarr: zarrs_common::LoadArray::new(r.random()),
        peer: Mutex::new(Some(Peer::spawn("child_entry", ROLE, "echo", &[]))),
    });
    for (kind, name) in KINDS.iter().enumerate() {
        run_one(kind, &shared, &mut r).unwrap_or_else(|e| panic!("warm-up {name}: {e}"));
    }
    let (fds0, maps0) = (descriptors(), shared_mappings());
    let counts: Arc<Vec<AtomicUsize>> =
        Arc::new((0..KINDS.len()).map(|_| AtomicUsize::new(0)).collect());
    let start = Arc::new(Barrier::new(THREADS));
    let results: Vec<_> = (0..THREADS)
        .map(|t| {
            let (shared, counts, start) = (shared.clone(), counts.clone(), start.clone());
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let mut r = SmallRng::seed_from_u64(seed ^ (t as u64 + 1));
                start.wait();
                let deadline = Instant::now() + Duration::from_secs_f64(secs);
                let mut i = 0;
                let result = loop {
                    if i >= KINDS.len() && (Instant::now() >= deadline || i >= 100_000) {
                        break Ok(i);
                    }
                    // Every kind first, then at random; only thread 0 talks to the child.
                    let mut kind = if i < KINDS.len() {
                        (t + i) % KINDS.len()
                    } else {
                        r.random_range(0..KINDS.len())
                    };
                    if kind == PEER && t != 0 {
                        kind = 0;
                    }
                    if let Err(e) = run_one(kind, &shared, &mut r) {
                        break Err(format!("thread {t}, operation {i} ({}): {e}", KINDS[kind]));
                    }
                    counts[kind].fetch_add(1, Ordering::Relaxed);
                    i += 1;
                };
                let _ = tx.send(result);
            });
            rx
        })
        .collect();
    let limit = Duration::from_secs_f64(secs) + Duration::from_secs(120);
    let mut total = 0;
    for (t, rx) in results.into_iter().enumerate() {
        let r = rx
            .recv_timeout(limit)
            .unwrap_or_else(|_| panic!("thread {t} hung"));
        total += r.unwrap_or_else(|e| panic!("{e}"));
    }
    let tally: Vec<String> = KINDS
        .iter()
        .zip(counts.iter())
        .map(|(k, c)| format!("{k} {}", c.load(Ordering::Relaxed)))
        .collect();
    println!(
        "load_host: {total} operations by {THREADS} threads in {secs} s: {}",
        tally.join(", ")
    );
    if cfg!(not(feature = "zarr")) {
        println!("load_host: no zarr reads (built without the zarrs feature)");
    }
    for (k, c) in KINDS.iter().zip(counts.iter()) {
        assert!(c.load(Ordering::Relaxed) > 0, "no {k} operation ran");
    }
    assert_eq!(descriptors(), fds0, "descriptors of this process");
    assert_eq!(
        shared_mappings(),
        maps0,
        "shared-memory mappings of this process"
    );
    let mut p = shared.peer.lock().unwrap().take().unwrap();
    p.send("quit");
    p.expect("done");
    p.finish();
}

#[path = "common/ipc_messages.rs"]
mod ipc_messages;
use ipc_messages::read_host;
