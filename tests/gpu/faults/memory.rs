//! Memory the device or the OS refuses (issue 11, item 6): allocations larger than the
//! device, the device filled step by step until it refuses, a zarr read whose result
//! cannot fit the device, page-locked memory the OS refuses (more than an address space
//! holds; a process whose page-locking limit is zero). Each is an error, the process
//! goes on, and the counters return to where they were once the memory is freed.

use devbuf::Error;
use devbuf::cuda::{self, Context, DeviceBuffer, PageableMode, TransferConfig};

use super::{NOTHING, held, outcome, same};
use crate::common::*;
use crate::peer::{Peer, say};

const MIB: usize = 1 << 20;
const ROLE: &str = "DEVBUF_FAULTS_MEMORY_CHILD";
const CHILD: &str = "faults::memory::child_entry";

/// Asserts that `e` is the out-of-memory error of device 0 for `requested` bytes.
fn assert_oom(e: &Error, requested: usize, total: usize) {
    match e {
        Error::OutOfMemory {
            device,
            requested: r,
            total: t,
            ..
        } => {
            assert_eq!((*device, *r, *t), (0, requested, total), "{e}");
        }
        other => panic!("expected OutOfMemory for {requested} bytes, got {other}"),
    }
}

/// The child side of the page-locking test.
#[test]
#[ignore = "child role of the memory fault tests (they run it)"]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    assert_eq!(role, "memlock_zero", "unknown child role {role}");
    // The context first (as a program that runs into the limit later would), then no
    // page-locked memory allowed for this process any more.
    let c = Context::new_dedicated(0).unwrap();
    let warm = DeviceBuffer::from_slice(&c, &[1u8, 2, 3]).unwrap();
    assert_eq!(warm.to_vec::<u8>().unwrap(), [1, 2, 3]);
    drop(warm);
    let zero = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // Safety: setrlimit with a valid resource and a pointer to a live struct.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &zero) }, 0);
    let want = fast_random(16 * MIB + 5, 61);
    say(
        "host",
        outcome(c.allocate_host(want.len()), |mut h| {
            h.copy_from_slice(&want);
            let back = DeviceBuffer::from_slice(&c, &h).and_then(|d| d.to_vec::<u8>());
            back.map_or_else(|e| format!("copy failed: {e}"), |b| same(&b, &want))
        }),
    );
    let d = c.allocate(want.len()).unwrap();
    for (key, pageable) in [
        ("staged", PageableMode::Staged),
        ("registered", PageableMode::Registered),
        ("direct", PageableMode::Driver),
    ] {
        c.set_transfer_config(TransferConfig {
            pageable,
            ..c.transfer_config()
        })
        .unwrap();
        d.fill(0).unwrap();
        say(
            key,
            outcome(
                d.copy_from_host(0, &want).and_then(|_| d.to_vec::<u8>()),
                |b| same(&b, &want),
            ),
        );
    }
    drop(d);
    let h = held(&c);
    say(
        "held",
        format!("{} {} {}", h.device_bytes, h.host_bytes, h.pinned_in_use),
    );
}

gpu_test! {
    /// Page-locked memory the OS cannot give (larger than any address space) is an
    /// error naming the request, nothing is counted, and page-locked memory that fits
    /// still works. In a process whose page-locking limit (`RLIMIT_MEMLOCK`) is zero,
    /// `HostBuffer`s, staged and registered copies each work or fail with an error that
    /// says page-locked memory was refused (the driver decides whether the limit
    /// applies: the run prints which), plain driver copies work, and nothing is held
    /// afterwards.
    fn faults_page_locked_memory_refused_is_an_error() {
        let c = Context::new_dedicated(0).unwrap();
        for n in [1usize << 50, usize::MAX / 2] {
            let e = c.allocate_host(n).map(|h| h.len()).unwrap_err().to_string();
            println!("{n} page-locked bytes: {e}");
            assert!(e.contains("page-locked") && e.contains(&n.to_string()), "{e}");
            assert_eq!(held(&c), NOTHING);
        }
        let want = fast_random(MIB + 3, 62);
        let mut h = c.allocate_host(want.len()).unwrap();
        h.copy_from_slice(&want);
        let d = DeviceBuffer::from_slice(&c, &h).unwrap();
        assert!(d.slice(0, want.len()).unwrap().to_host().unwrap()[..] == want[..]);
        drop((h, d));
        assert_eq!(held(&c), NOTHING);

        let mut p = Peer::spawn(CHILD, ROLE, "memlock_zero", &[]);
        for key in ["host", "staged", "registered"] {
            let v = p.expect(key);
            println!("RLIMIT_MEMLOCK 0, {key}: {v}");
            assert!(v == "ok:equal" || (v.starts_with("err:") && v.contains("page-locked")), "{key}: {v}");
        }
        assert_eq!(p.expect("direct"), "ok:equal");
        assert_eq!(p.expect("held"), "0 0 0");
        p.finish();
    }
}

// These fill the device, or count the primary context: they run alone.
gpu_test_exclusive! {
    /// More than the device has, at once (plain and pooled): `OutOfMemory` naming the
    /// request and the device's size. Then the device filled in steps (1 GiB, halved at
    /// each refusal down to 2 MiB) until it refuses: while it is full, pooled
    /// allocations are refused too, the memory already held still reads and writes, and
    /// copies that need no new device memory work (a batched copy, which needs device
    /// scratch memory, may fail: an error). Once everything is dropped the counters are
    /// zero, the device's free memory is back, and allocation works again.
    fn faults_device_memory_exhausted_then_freed() {
        let c = Context::new_dedicated(0).unwrap();
        let total = c.properties().total_memory;
        let free0 = c.free_memory().unwrap();
        assert_oom(&c.allocate(2 * total).map(|b| b.len()).unwrap_err(), 2 * total, total);
        assert_oom(&c.allocate_pooled(2 * total, None).map(|b| b.len()).unwrap_err(), 2 * total, total);
        assert_eq!(held(&c), NOTHING);
        // The pool and the streams of direct copies exist before the device is full
        // (their later refusals are allocations'; small copies need nothing new).
        drop(c.allocate_pooled(MIB, None).unwrap());
        let warm = DeviceBuffer::from_slice(&c, &fast_random(MIB, 60)).unwrap();
        assert!(warm.to_vec::<u8>().unwrap() == fast_random(MIB, 60));
        drop(warm);
        let (mut keep, mut step, mut filled) = (Vec::new(), 1usize << 30, 0usize);
        let refused = loop {
            match c.allocate(step) {
                Ok(b) => {
                    filled += step;
                    keep.push(b);
                    assert!(keep.len() < 100_000, "the device never filled up");
                }
                Err(Error::OutOfMemory { .. }) if step > 2 * MIB => step /= 2,
                Err(e) => break e,
            }
        };
        println!("filled {filled} of {total} bytes in {} allocations; then: {refused}", keep.len());
        assert!(matches!(refused, Error::OutOfMemory { .. }), "{refused}");
        assert!(filled >= free0 / 2, "filled {filled}, {free0} were free");
        assert_eq!(c.bytes_allocated(), filled);
        let e = c.allocate_pooled(64 * MIB, None).map(|b| b.len()).unwrap_err();
        assert_oom(&e, 64 * MIB, total);
        // What is held still works.
        let probe = fast_random(MIB, 63);
        let last = keep.last().unwrap();
        keep[0].copy_from_host(0, &probe).unwrap();
        last.copy_from_host(last.len() - MIB, &probe).unwrap();
        let mut back = vec![0u8; MIB];
        keep[0].copy_to_host(0, &mut back).unwrap();
        assert!(back == probe);
        last.copy_to_host(last.len() - MIB, &mut back).unwrap();
        assert!(back == probe);
        // A staged copy needs a new staging kit (each refusal above trimmed the idle
        // ones), whose stream the driver may refuse on a full device: the bytes or an error.
        let big = fast_random(64 * MIB, 64);
        let target = keep.iter().find(|b| b.len() >= big.len()).unwrap_or(&keep[0]);
        let n = big.len().min(target.len());
        let mut got = vec![0u8; n];
        let staged = target.copy_from_host(0, &big[..n]).and_then(|_| target.copy_to_host(0, &mut got));
        let ok = staged.is_ok();
        println!("a staged copy while the device is full: {}", outcome(staged, |_| same(&got, &big[..n])));
        assert!(!ok || got == big[..n], "a staged copy that succeeded gave other bytes");
        let pieces: Vec<(&[u8], &DeviceBuffer, usize)> =
            (0..64).map(|i| (&probe[i * 1000..i * 1000 + 999], last, i * 1000)).collect();
        match cuda::copy_many_from_host(&pieces) {
            Ok(()) => {
                let mut got = vec![0u8; 64_000];
                last.copy_to_host(0, &mut got).unwrap();
                for i in 0..64 {
                    assert!(got[i * 1000..i * 1000 + 999] == probe[i * 1000..i * 1000 + 999], "piece {i}");
                }
            }
            Err(e) => println!("a batched copy while the device is full: {e}"),
        }
        drop(keep);
        c.trim_transfer_pool();
        c.trim_device_pool(0).unwrap();
        assert_eq!(held(&c), NOTHING);
        let free1 = c.free_memory().unwrap();
        println!("device free memory: {free0} before, {free1} after");
        assert!(free1 + (256 << 20) >= free0, "not freed: {free0} before, {free1} after");
        let again = c.allocate(free1 / 2).unwrap();
        again.copy_from_host(again.len() - MIB, &probe).unwrap();
        again.copy_to_host(again.len() - MIB, &mut back).unwrap();
        assert!(back == probe, "allocation works again");
        drop(again);
        assert_eq!(held(&c), NOTHING);
    }
}

#[cfg(feature = "zarr")]
gpu_test_exclusive! {
    /// A zarr read into the device whose result is twice the device's memory: an
    /// `OutOfMemory` for the whole result before anything is read, nothing held
    /// afterwards (the primary context's counters), and a read that fits still works.
    fn faults_a_zarr_read_larger_than_the_device_is_out_of_memory() {
        use devbuf::zarr::{ArraySpec, ZarrArray};
        use devbuf::zarr::{BufferPrototype, Dtype, MemoryStore, NDBuffer, Order};
        use std::sync::Arc;
        let c = Context::new(0).unwrap();
        let base = held(&c);
        let chunk = 1usize << 22; // float32 elements: 16 MiB chunks
        let n = (2 * c.properties().total_memory / 4).div_ceil(chunk) * chunk;
        let spec = ArraySpec::new(&[n as u64], &[chunk as u64], Dtype::FLOAT32);
        let a = ZarrArray::create((Arc::new(MemoryStore::new()), "big"), &spec).unwrap();
        let bytes = fast_random(4 * chunk, 65);
        a.write_chunks(&[&[1]], std::slice::from_ref(&NDBuffer::from_memory(bytes.clone(), &[chunk], Dtype::FLOAT32, Order::C).unwrap()))
            .unwrap();
        let dev = BufferPrototype::Device(0);
        let e = a.read(..).to(&dev).map(|nd| nd.nbytes()).unwrap_err();
        println!("{e}");
        assert_oom(&e, 4 * n, c.properties().total_memory);
        assert_eq!(held(&c), base);
        let second = chunk as u64..2 * chunk as u64;
        let part = a.read(std::slice::from_ref(&second)).to(&dev).unwrap();
        assert!(part.to_buffer().unwrap().to_host().unwrap() == bytes);
        drop(part);
        assert_eq!(held(&c), base);
    }
}
