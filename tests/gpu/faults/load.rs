//! Load (issue 11, item 7): 16 threads mixing allocations, copies, slices, batched
//! copies, page-locked host buffers, IPC export/open in this process and in another,
//! zarr reads and ChunkBatch builds on the device, for a few seconds
//! (`DEVBUF_FAULTS_LOAD_SECS`, default 3). Every operation checks the data it wrote
//! against a host oracle; no operation fails; afterwards every counter is back to its
//! baseline.
//!
//! The baseline is taken after one operation of each kind (caches that are made once —
//! kernels, pools, streams — are not leaks). Allocations, copies, host buffers and IPC
//! count on a dedicated context; zarr reads and ChunkBatch builds allocate in the
//! primary context (`BufferPrototype::Device`), so the test runs alone.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, mpsc};
use std::time::{Duration, Instant};

use devbuf::__test::open_mapping_count;
use devbuf::arrow::{ChunkBatch, ChunkGrid};
use devbuf::cuda::{self, Context, DeviceBuffer};
use devbuf::ipc::IpcMemHandle;
use devbuf::zarr::{BufferPrototype, Dtype, NDBuffer};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::held;
use crate::common::*;
use crate::peer::{Peer, fnv, say, wait_line};

const THREADS: usize = 16;
const ROLE: &str = "DEVBUF_FAULTS_LOAD_CHILD";
const CHILD: &str = "faults::load::child_entry";
const DEV: BufferPrototype = BufferPrototype::Device(0);

/// The kinds of work, by index.
const KINDS: [&str; 7] = [
    "copies",
    "batched",
    "host",
    "ipc",
    "chunk_batch",
    "zarr",
    "peer",
];
const PEER: usize = 6;

/// The child that opens handles sent to it: one hex handle per line, answered with the
/// fingerprint of the bytes; "quit" ends it after reporting its open mappings.
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
        let b = line.parse::<IpcMemHandle>().unwrap().open().unwrap();
        let print = fnv(&b.to_vec::<u8>().unwrap());
        // Closed before answering: the exporter frees the memory once it has the answer.
        drop(b);
        say("print", print);
    }
    say("mappings", open_mapping_count());
}

/// What the threads share.
struct Shared {
    own: Context,
    #[cfg(feature = "zarr")]
    zarr: crate::zarrs::zarrs_common::LoadArray,
    peer: Mutex<Option<Peer>>,
}

type Check = Result<(), String>;

fn fail<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> String {
    move |e| format!("{what}: {e}")
}

fn ensure(ok: bool, what: &str) -> Check {
    if ok {
        Ok(())
    } else {
        Err(format!("{what}: wrong bytes"))
    }
}

/// Allocation, copies in both directions (some staged), slices, a pooled buffer, a
/// device-to-device copy, a write through a slice.
fn copies(s: &Shared, r: &mut SmallRng) -> Check {
    let n = 1 + below(r, 6 << 20);
    let mut data = random_bytes(r, n);
    let d = s.own.allocate(n).map_err(fail("allocate"))?;
    d.copy_from_host(0, &data).map_err(fail("copy_from_host"))?;
    let (o, l) = {
        let o = below(r, n);
        (o, below(r, n - o + 1))
    };
    let sl = d.slice(o, l).map_err(fail("slice"))?;
    ensure(
        sl.to_vec::<u8>().map_err(fail("slice to host"))? == data[o..o + l],
        "slice",
    )?;
    let p = s
        .own
        .allocate_pooled(l + 17, None)
        .map_err(fail("allocate_pooled"))?;
    p.copy_from_device(17, &sl)
        .map_err(fail("copy_from_device"))?;
    let back = p
        .slice(17, l)
        .and_then(|x| x.to_vec::<u8>())
        .map_err(fail("pooled to host"))?;
    ensure(back == data[o..o + l], "device-to-device copy")?;
    let w = random_bytes(r, l.min(4096));
    sl.copy_from_host(0, &w)
        .map_err(fail("write through a slice"))?;
    data[o..o + w.len()].copy_from_slice(&w);
    ensure(
        d.to_vec::<u8>().map_err(fail("to host"))? == data,
        "after a write through a slice",
    )
}

/// Many pieces in few transfers, both directions.
fn batched(s: &Shared, r: &mut SmallRng) -> Check {
    let k = 1 + below(r, 200);
    let (mut at, mut pieces) = (0, Vec::with_capacity(k));
    for _ in 0..k {
        let len = below(r, 64 << 10);
        at += below(r, 33);
        pieces.push((at, random_bytes(r, len)));
        at += len;
    }
    let dev = s.own.allocate(at.max(1)).map_err(fail("allocate"))?;
    dev.fill(0).map_err(fail("fill"))?;
    let list: Vec<(&[u8], &DeviceBuffer, usize)> =
        pieces.iter().map(|(o, p)| (&p[..], &dev, *o)).collect();
    cuda::copy_many_from_host(&list).map_err(fail("copy_many_from_host"))?;
    let mut outs: Vec<Vec<u8>> = pieces.iter().map(|(_, p)| vec![0u8; p.len()]).collect();
    let mut list: Vec<(&mut [u8], &DeviceBuffer, usize)> = outs
        .iter_mut()
        .zip(&pieces)
        .map(|(o, (at, _))| (&mut o[..], &dev, *at))
        .collect();
    cuda::copy_many_to_host(&mut list).map_err(fail("copy_many_to_host"))?;
    ensure(
        outs.iter().zip(&pieces).all(|(o, (_, p))| o == p),
        "batched pieces",
    )
}

/// Page-locked host buffers: up and back down, zero-copy into `Bytes`.
fn host(s: &Shared, r: &mut SmallRng) -> Check {
    let n = 1 + below(r, 2 << 20);
    let data = random_bytes(r, n);
    let mut h = s.own.allocate_host(n).map_err(fail("allocate_host"))?;
    h.copy_from_slice(&data);
    let d = DeviceBuffer::from_slice(&s.own, &h).map_err(fail("from page-locked"))?;
    drop(h);
    let back = d.to_host().map_err(fail("to_host"))?;
    let ptr = back.as_ptr();
    let bytes = bytes::Bytes::from(back);
    ensure(
        bytes.as_ptr() == ptr,
        "Bytes::from(HostBuffer) is zero-copy",
    )?;
    ensure(bytes[..] == data[..], "page-locked round trip")
}

/// IPC in this process: a slice exported and opened (a pointer-equal view), through
/// the handle's bytes and the device lookup too; a read-only export opens read-only.
fn ipc(s: &Shared, r: &mut SmallRng) -> Check {
    let n = 1 + below(r, 1 << 20);
    let data = random_bytes(r, n);
    let b = DeviceBuffer::from_slice(&s.own, &data).map_err(fail("from_slice"))?;
    let o = below(r, n);
    let l = 1 + below(r, n - o);
    let h = b
        .slice(o, l)
        .and_then(|x| x.export_ipc())
        .map_err(fail("export"))?;
    let v = s.own.open_ipc(&h).map_err(fail("open"))?;
    ensure(
        v.address() == b.address() + o as u64,
        "a pointer-equal view",
    )?;
    ensure(
        v.to_vec::<u8>().map_err(fail("view to host"))? == data[o..o + l],
        "opened view",
    )?;
    let again = h
        .to_string()
        .parse::<IpcMemHandle>()
        .and_then(|h| h.open())
        .map_err(fail("reopen"))?;
    ensure(again.address() == v.address(), "reopened through the bytes")?;
    let ro = b
        .read_only()
        .export_ipc()
        .and_then(|h| s.own.open_ipc(&h))
        .map_err(fail("read-only"))?;
    ensure(!ro.is_mutable(), "read-only export opens read-only")
}

/// IPC with the child process (thread 0 only): it opens a slice and fingerprints it.
fn peer(s: &Shared, r: &mut SmallRng) -> Check {
    let n = 1 + below(r, 1 << 20);
    let data = random_bytes(r, n);
    let b = DeviceBuffer::from_slice(&s.own, &data).map_err(fail("from_slice"))?;
    let o = below(r, n);
    let l = 1 + below(r, n - o);
    let h = b
        .slice(o, l)
        .and_then(|x| x.export_ipc())
        .map_err(fail("export"))?;
    let mut guard = s.peer.lock().unwrap();
    let p = guard.as_mut().ok_or("no peer")?;
    p.send(&h.to_string());
    let got = p.expect("print");
    ensure(
        got == fnv(&data[o..o + l]).to_string(),
        "the other process's fingerprint",
    )
    // `b` drops after the child answered (it closed its mapping before answering).
}

/// A ChunkBatch of random float32 chunks of a random grid, built in device memory from
/// host chunks (some already on the device), read back chunk by chunk.
fn chunk_batch(_: &Shared, r: &mut SmallRng) -> Check {
    let shape = [5 + below(r, 40), 5 + below(r, 40)];
    let chunk = [2 + below(r, 8), 2 + below(r, 8)];
    let grid = ChunkGrid::new(&shape, &chunk, Dtype::FLOAT32).map_err(fail("grid"))?;
    let g = grid.grid_shape();
    let mut chunks = Vec::new();
    for _ in 0..1 + below(r, 12) {
        let c = vec![below(r, g[0]) as u64, below(r, g[1]) as u64];
        let ext = grid.chunk_extent(&c).map_err(fail("extent"))?;
        let vals: Vec<f32> = (0..ext.iter().product::<usize>())
            .map(|_| r.random_range(-1e6f32..1e6))
            .collect();
        let nd = NDBuffer::from_ndarray(ndarray::ArrayD::from_shape_vec(ext, vals).unwrap());
        let nd = if r.random_bool(0.3) {
            nd.to_prototype(&DEV).map_err(fail("to device"))?
        } else {
            nd
        };
        chunks.push((c, nd));
    }
    let batch = ChunkBatch::from_chunks(&grid, chunks.iter().map(|(c, n)| (c.as_slice(), n)), &DEV)
        .map_err(fail("from_chunks"))?;
    ensure(
        batch.prototype().is_device() && batch.len() == chunks.len(),
        "a device batch of every chunk",
    )?;
    for (k, (c, nd)) in chunks.iter().enumerate() {
        ensure(batch.coords(k) == Some(&c[..]), "coordinates")?;
        let got = batch
            .chunk(k)
            .and_then(|x| x.to_ndarray::<f32>())
            .map_err(fail("chunk"))?;
        ensure(
            got == nd.to_ndarray::<f32>().map_err(fail("source"))?,
            "chunk values",
        )?;
    }
    Ok(())
}

/// A random box or a few whole chunks of a zstd array read into the device, compared
/// with its bytes.
#[cfg(feature = "zarr")]
fn zarr(s: &Shared, r: &mut SmallRng) -> Check {
    s.zarr.read(r, &DEV)
}

/// Without the `zarrs` feature there is no zarr reader: counted, nothing done.
#[cfg(not(feature = "zarr"))]
fn zarr(_: &Shared, _: &mut SmallRng) -> Check {
    Ok(())
}

fn run_one(kind: usize, s: &Shared, r: &mut SmallRng) -> Check {
    match kind {
        0 => copies(s, r),
        1 => batched(s, r),
        2 => host(s, r),
        3 => ipc(s, r),
        4 => chunk_batch(s, r),
        5 => zarr(s, r),
        _ => peer(s, r),
    }
}

/// The load run's length.
fn seconds() -> f64 {
    std::env::var("DEVBUF_FAULTS_LOAD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0)
}

gpu_test_exclusive! {
    fn faults_load_sixteen_threads_mixing_everything() {
        let mut r = rng("faults_load");
        let seed: u64 = r.random();
        let primary = Context::new(0).unwrap();
        let shared = Arc::new(Shared {
            own: Context::new_dedicated(0).unwrap(),
            #[cfg(feature = "zarr")]
            zarr: crate::zarrs::zarrs_common::LoadArray::new(r.random()),
            peer: Mutex::new(Some(Peer::spawn(CHILD, ROLE, "echo", &[]))),
        });
        // One of each kind first: what is made once is part of the baseline.
        for (kind, name) in KINDS.iter().enumerate() {
            run_one(kind, &shared, &mut r).unwrap_or_else(|e| panic!("warm-up {name}: {e}"));
        }
        let (own, base_own, base_primary) = (shared.own.clone(), held(&shared.own), held(&primary));
        let (maps0, abandoned0) = (open_mapping_count(), own.transfer_stats().staging_abandoned);
        let counts: Arc<Vec<AtomicUsize>> = Arc::new((0..KINDS.len()).map(|_| AtomicUsize::new(0)).collect());
        let start = Arc::new(Barrier::new(THREADS));
        let secs = seconds();
        let results: Vec<_> = (0..THREADS)
            .map(|t| {
                let (shared, counts, start) = (shared.clone(), counts.clone(), start.clone());
                let (tx, rx) = mpsc::channel();
                std::thread::spawn(move || {
                    let mut r = SmallRng::seed_from_u64(seed ^ t as u64);
                    start.wait();
                    let deadline = Instant::now() + Duration::from_secs_f64(secs);
                    let mut i = 0;
                    let result = loop {
                        if i >= KINDS.len() && (Instant::now() >= deadline || i >= 100_000) {
                            break Ok(i);
                        }
                        // Each thread runs every kind first, then picks at random; only
                        // thread 0 talks to the child.
                        let mut kind = if i < KINDS.len() { (t + i) % KINDS.len() } else { below(&mut r, KINDS.len()) };
                        if kind == PEER && t != 0 {
                            kind = 3;
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
            let r = rx.recv_timeout(limit).unwrap_or_else(|_| panic!("thread {t} hung"));
            total += r.unwrap_or_else(|e| panic!("{e}"));
        }
        let tally: Vec<String> = KINDS.iter().zip(counts.iter()).map(|(k, c)| format!("{k} {}", c.load(Ordering::Relaxed))).collect();
        println!("load: {total} operations by {THREADS} threads in {secs} s: {}", tally.join(", "));
        if cfg!(not(feature = "zarr")) {
            println!("load: no zarr reads (built without the zarrs feature)");
        }
        for (k, c) in KINDS.iter().zip(counts.iter()) {
            assert!(c.load(Ordering::Relaxed) > 0, "no {k} operation ran");
        }
        let mut peer = shared.peer.lock().unwrap().take().unwrap();
        peer.send("quit");
        assert_eq!(peer.expect("mappings"), "0", "the other process closed every mapping");
        peer.finish();
        println!("dedicated context: {:?}\nprimary context: {:?}", own.transfer_stats(), primary.transfer_stats());
        assert_eq!(held(&own), base_own, "dedicated context");
        assert_eq!(held(&primary), base_primary, "primary context");
        assert_eq!(open_mapping_count(), maps0, "IPC mappings of this process");
        assert_eq!(own.transfer_stats().staging_abandoned, abandoned0);
        own.trim_transfer_pool();
        let s = own.transfer_stats();
        assert_eq!((s.pinned_bytes, s.device_scratch_bytes), (0, 0), "idle staging freed: {s:?}");
    }
}
