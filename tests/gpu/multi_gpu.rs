//! Everything that lives on device 1 and across devices (issue 31): peer copies with
//! peer access on and off, both directions, blocking and on a stream of either device,
//! at odd offsets and sizes up to 1 GiB; IPC between processes that work on different
//! devices; a `ChunkBatch` and C Device Data Interface exports on device 1; a zarr read
//! into device 1 while device 0 reads; both devices used from many threads at once;
//! allocation counters, device memory pools and page-locked staging pools per device.
//!
//! Every test needs two GPUs and starts with `second_ctx`, which prints why it was
//! skipped on a machine with one. Tests that turn peer access off run alone
//! (`gpu_test_exclusive!`, so that no other test's peer copy races the change) and turn
//! it on again when they end, failed or not ([`PeerOnAgain`]). The cross-process tests
//! re-run this binary as the child (`multi_gpu::child_entry` with
//! `DEVBUF_MULTI_GPU_CHILD=<role>`; see tests/common/peer.rs).

use std::sync::Barrier;
use std::time::Instant;

use arrow_array::cast::AsArray;
use arrow_array::types::Float32Type;
use arrow_array::{Array, StructArray};
use cudarc::driver::sys;
use devbuf::Error;
use devbuf::arrow::c_device::{
    ARROW_DEVICE_CUDA, ArrowArray, SyncEvent, batch_as_struct, export_device_array,
    export_device_stream, import_device_array, import_device_stream,
};
use devbuf::arrow::{ChunkBatch, ChunkGrid, DeviceArray};
use devbuf::cuda::{Context, DeviceBuffer, IpcMemHandle, Stream};
use devbuf::zarr::{BufferPrototype, Dtype, ElementType, NDBuffer};
use rand::Rng;

use crate::common::*;
use crate::corpus::{counts, serial};
use crate::peer::{Peer, env, fnv, say, wait_line};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
const GIB: usize = 1024 * MIB;

/// The first differing index, for readable failures of large comparisons.
#[track_caller]
fn assert_bytes(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    if got.len() != want.len() {
        panic!("{what}: {} bytes, expected {}", got.len(), want.len());
    }
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!(
            "{what}: bytes differ at {i} of {} (got {:#04x}, want {:#04x})",
            want.len(),
            got[i],
            want[i]
        );
    }
}

fn ok(r: sys::CUresult, what: &str) {
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "{what}");
}

/// Whether the driver has direct access from `from`'s context to `to`'s memory on,
/// found without changing it: enabling access that is on already is refused with
/// `PEER_ACCESS_ALREADY_ENABLED`; access that this probe did turn on is turned off again.
fn driver_peer_access(from: &Context, to: &Context) -> bool {
    // Safety: both are live contexts (their `Context`s are borrowed); flags must be 0.
    unsafe {
        ok(
            sys::cuCtxSetCurrent(from.as_raw() as sys::CUcontext),
            "cuCtxSetCurrent",
        );
        match sys::cuCtxEnablePeerAccess(to.as_raw() as sys::CUcontext, 0) {
            sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => true,
            sys::CUresult::CUDA_SUCCESS => {
                ok(
                    sys::cuCtxDisablePeerAccess(to.as_raw() as sys::CUcontext),
                    "cuCtxDisablePeerAccess (undoing the probe)",
                );
                false
            }
            sys::CUresult::CUDA_ERROR_PEER_ACCESS_UNSUPPORTED => false,
            other => panic!("cuCtxEnablePeerAccess (probe): {other:?}"),
        }
    }
}

/// The device ordinal the driver says `addr` belongs to.
fn device_of_pointer(addr: u64) -> i32 {
    let mut ordinal: i32 = -1;
    // Safety: a valid out pointer for the attribute's `int`.
    let r = unsafe {
        sys::cuPointerGetAttribute(
            (&mut ordinal as *mut i32).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            addr,
        )
    };
    ok(
        r,
        &format!("cuPointerGetAttribute(DEVICE_ORDINAL, {addr:#x})"),
    );
    ordinal
}

/// Turns peer access between two contexts on again when dropped (also when the test
/// fails half-way), so that the tests after it find the pair as devbuf sets it up.
struct PeerOnAgain(Context, Context);

impl Drop for PeerOnAgain {
    fn drop(&mut self) {
        let _ = self.0.enable_peer_access(&self.1);
    }
}

/// How a peer copy is issued.
#[derive(Clone, Copy, Debug)]
enum How {
    /// `copy_from_device`.
    Blocking,
    /// `copy_from_device_on` a stream of the destination's device.
    OnDestinationStream,
    /// `copy_from_device_on` a stream of the source's device.
    OnSourceStream,
    /// `copy_from_device_async` (a stream of the destination's context) and wait.
    Pending,
}

const HOWS: [How; 4] = [
    How::Blocking,
    How::OnDestinationStream,
    How::OnSourceStream,
    How::Pending,
];

/// Copies all of `src` into `dst` at `pos`, complete on return.
fn peer_copy(how: How, dst: &DeviceBuffer, pos: usize, src: &DeviceBuffer) {
    match how {
        How::Blocking => dst.copy_from_device(pos, src).unwrap(),
        How::OnDestinationStream | How::OnSourceStream => {
            let owner = match how {
                How::OnDestinationStream => dst.context(),
                _ => src.context(),
            };
            let s = Stream::new(owner).unwrap();
            dst.copy_from_device_on(pos, src, &s).unwrap();
            s.synchronize().unwrap();
        }
        How::Pending => {
            let s = Stream::new(dst.context()).unwrap();
            dst.copy_from_device_async(pos, src, &s)
                .unwrap()
                .wait()
                .unwrap();
        }
    }
}

/// Copies `n` random bytes from a slice at an odd offset of a buffer in `src_ctx` into a
/// slice at an odd offset of a noise-filled buffer in `dst_ctx`, at an odd position, and
/// checks the whole destination against a host oracle (nothing written around the range).
fn check_peer_copy(
    r: &mut rand::rngs::SmallRng,
    src_ctx: &Context,
    dst_ctx: &Context,
    n: usize,
    how: How,
    what: &str,
) {
    let src_off = 1 + 2 * below(r, 8);
    let whole = random_bytes(r, src_off + n + 5);
    let src_parent = DeviceBuffer::from_host(src_ctx, &whole).unwrap();
    let src = src_parent.slice(src_off, n).unwrap();
    let noise = random_bytes(r, n + 16);
    let dst_parent = DeviceBuffer::from_host(dst_ctx, &noise).unwrap();
    let dst = dst_parent.slice(3, n + 9).unwrap();
    let pos = 1 + 2 * below(r, 5);
    peer_copy(how, &dst, pos, &src);
    assert_eq!(dst.context().ordinal(), dst_ctx.ordinal());
    let mut want = noise;
    want[3 + pos..3 + pos + n].copy_from_slice(&whole[src_off..src_off + n]);
    assert_bytes(&dst_parent.to_host_vec().unwrap(), &want, what);
}

// These turn peer access off: they run alone (see the module docs).
gpu_test_exclusive! {
    /// Peer copies of 1 byte to 8 MiB (odd sizes, odd offsets of source and destination)
    /// give exactly the source's bytes in both directions, blocking and on a stream of
    /// either device, with peer access on and with it off; copying with access off does
    /// not turn it on again (the driver's own view is probed), and `enable_peer_access`
    /// turns it on again from either side.
    fn peer_copies_with_peer_access_on_and_off() {
        let Some(d1) = second_ctx("peer_copies_with_peer_access_on_and_off") else { return };
        let d0 = ctx();
        let _again = PeerOnAgain(d0.clone(), d1.clone());
        let direct = d0.enable_peer_access(&d1).unwrap();
        assert_eq!(d1.enable_peer_access(&d0).unwrap(), direct, "peer access is symmetric");
        println!("peer access between devices 0 and 1 possible: {direct}");
        assert_eq!(driver_peer_access(&d0, &d1), direct);
        assert_eq!(driver_peer_access(&d1, &d0), direct);
        let mut r = rng("peer_copies_with_peer_access_on_and_off");
        let sizes = [1usize, 2, 3, 17, 255, 4095, 4097, 65_537, (1 << 20) + 13, (8 << 20) + 1];
        for on in [true, false] {
            if on {
                assert_eq!(d0.enable_peer_access(&d1).unwrap(), direct);
            } else {
                d0.disable_peer_access(&d1).unwrap();
                assert!(!driver_peer_access(&d0, &d1), "disable_peer_access: 0 -> 1 still on");
                assert!(!driver_peer_access(&d1, &d0), "disable_peer_access: 1 -> 0 still on");
            }
            let state = if on { "on" } else { "off" };
            for (src, dst) in [(&d0, &d1), (&d1, &d0)] {
                for &n in &sizes {
                    for how in HOWS {
                        let what = format!(
                            "peer access {state}: device {} -> {}, {n} bytes, {how:?}",
                            src.ordinal(),
                            dst.ordinal()
                        );
                        check_peer_copy(&mut r, src, dst, n, how, &what);
                    }
                }
                // An empty copy is fine in every form and writes nothing.
                let a = DeviceBuffer::from_host(src, &[1, 2, 3]).unwrap();
                let b = DeviceBuffer::from_host(dst, &[4, 5, 6]).unwrap();
                for how in HOWS {
                    peer_copy(how, &b, 3, &a.slice(1, 0).unwrap());
                }
                assert_eq!(b.to_host_vec().unwrap(), vec![4, 5, 6]);
            }
            // Copies with access off did not turn it on behind the caller's back.
            assert_eq!(driver_peer_access(&d0, &d1), on && direct, "peer access {state}, 0 -> 1");
            assert_eq!(driver_peer_access(&d1, &d0), on && direct, "peer access {state}, 1 -> 0");
        }
        // Off from device 1's side, on again from device 0's: both directions follow.
        d1.disable_peer_access(&d0).unwrap();
        assert!(!driver_peer_access(&d0, &d1) && !driver_peer_access(&d1, &d0));
        check_peer_copy(&mut r, &d1, &d0, 4097, How::OnSourceStream, "off from device 1's side");
        assert!(!driver_peer_access(&d0, &d1) && !driver_peer_access(&d1, &d0));
        d1.disable_peer_access(&d0).unwrap(); // twice is fine
        assert_eq!(d0.enable_peer_access(&d1).unwrap(), direct);
        assert_eq!(driver_peer_access(&d0, &d1), direct);
        assert_eq!(driver_peer_access(&d1, &d0), direct);
        check_peer_copy(&mut r, &d0, &d1, 4097, How::OnDestinationStream, "on again");
        // A pair on one device is always "on" and cannot be turned off.
        let other0 = Context::new_dedicated(0).unwrap();
        other0.disable_peer_access(&d0).unwrap();
        assert!(other0.enable_peer_access(&d0).unwrap());
    }

    /// 1 GiB (64 MiB under `DEVBUF_TEST_SMALL`) from device 0 to device 1 and back, with
    /// peer access on and off: blocking copies of the whole buffer, and stream-ordered
    /// copies of slices at odd offsets on a stream of device 1 and of device 0; every
    /// byte compared with the uploaded data. Skipped (saying why) when either device has
    /// too little free memory.
    fn peer_copy_of_one_gib_both_directions_peer_access_on_and_off() {
        let test = "peer_copy_of_one_gib_both_directions_peer_access_on_and_off";
        let Some(d1) = second_ctx(test) else { return };
        let d0 = ctx();
        let _again = PeerOnAgain(d0.clone(), d1.clone());
        let direct = d0.enable_peer_access(&d1).unwrap();
        let n = if small_sizes() { (64 << 20) + 5 } else { GIB };
        let (need0, need1) = (2 * n + 512 * MIB, n + 512 * MIB);
        let (free0, free1) = (d0.free_memory().unwrap(), d1.free_memory().unwrap());
        if free0 < need0 || free1 < need1 {
            let why = format!(
                "needs {need0} bytes free on device 0 and {need1} on device 1, they have {free0} and {free1}"
            );
            println!("SKIPPED {test}: {why}");
            eprintln!("SKIPPED {test}: {why}");
            return;
        }
        let data = fast_random(n, 0x5eed_0031);
        let a = DeviceBuffer::from_host(&d0, &data).unwrap();
        let b = d1.allocate(n).unwrap();
        let back = d0.allocate(n).unwrap();
        let (s0, s1) = (Stream::new(&d0).unwrap(), Stream::new(&d1).unwrap());
        let mut host = vec![0u8; n];
        let gbps = |secs: f64| n as f64 / secs / 1e9;
        for on in [true, false] {
            if on {
                assert_eq!(d0.enable_peer_access(&d1).unwrap(), direct);
            } else {
                d0.disable_peer_access(&d1).unwrap();
            }
            let state = if on { "on" } else { "off" };
            // 0 -> 1, blocking, the whole buffer.
            b.fill(0).unwrap();
            let t = Instant::now();
            b.copy_from_device(0, &a).unwrap();
            d1.synchronize().unwrap(); // cuMemcpyPeer may return before the copy is done
            let blocking = t.elapsed().as_secs_f64();
            b.copy_to_host_into(0, &mut host).unwrap();
            assert_bytes(&host, &data, &format!("peer access {state}: 0 -> 1 blocking"));
            // 1 -> 0 on a stream of device 1 (the source's), odd offsets.
            let len = n - 7;
            back.fill(0).unwrap();
            let t = Instant::now();
            back.copy_from_device_on(1, &b.slice(3, len).unwrap(), &s1).unwrap();
            s1.synchronize().unwrap();
            let on_src = t.elapsed().as_secs_f64();
            back.copy_to_host_into(0, &mut host).unwrap();
            assert_eq!(host[0], 0, "peer access {state}: wrote before the range");
            assert_bytes(&host[1..1 + len], &data[3..3 + len], &format!("peer access {state}: 1 -> 0 on device 1's stream"));
            assert!(host[1 + len..].iter().all(|&x| x == 0), "peer access {state}: wrote past the range");
            // 0 -> 1 on a stream of device 0 (the source's again, other direction), odd offsets.
            b.fill(0).unwrap();
            let t = Instant::now();
            b.copy_from_device_on(5, &back.slice(1, len).unwrap(), &s0).unwrap();
            s0.synchronize().unwrap();
            let on_other = t.elapsed().as_secs_f64();
            b.copy_to_host_into(0, &mut host).unwrap();
            assert!(host[..5].iter().all(|&x| x == 0), "peer access {state}: wrote before the range");
            assert_bytes(&host[5..5 + len], &data[3..3 + len], &format!("peer access {state}: 0 -> 1 on device 0's stream"));
            assert!(host[5 + len..].iter().all(|&x| x == 0), "peer access {state}: wrote past the range");
            println!(
                "{n} bytes, peer access {state} (possible: {direct}): 0 -> 1 blocking {:.1} GB/s, \
                 1 -> 0 on device 1's stream {:.1} GB/s, 0 -> 1 on device 0's stream {:.1} GB/s",
                gbps(blocking),
                gbps(on_src),
                gbps(on_other)
            );
        }
        assert_eq!(d0.enable_peer_access(&d1).unwrap(), direct);
    }
}

gpu_test! {
    /// A stream of a third context (neither buffer's) is an InvalidArgument naming the
    /// devices; ranges out of bounds and read-only destinations are refused; nothing is
    /// written by a refused copy.
    fn peer_copy_errors_name_the_devices_and_write_nothing() {
        let Some(d1) = second_ctx("peer_copy_errors_name_the_devices_and_write_nothing") else { return };
        let d0 = ctx();
        let mut r = rng("peer_copy_errors_name_the_devices_and_write_nothing");
        for (src_ctx, dst_ctx) in [(&d0, &d1), (&d1, &d0)] {
            let (so, dd) = (src_ctx.ordinal(), dst_ctx.ordinal());
            let data = random_bytes(&mut r, 100);
            let noise = random_bytes(&mut r, 100);
            let src = DeviceBuffer::from_host(src_ctx, &data).unwrap();
            let dst = DeviceBuffer::from_host(dst_ctx, &noise).unwrap();
            for third_dev in [0, 1] {
                let third = Context::new_dedicated(third_dev).unwrap();
                let s = Stream::new(&third).unwrap();
                let e = dst.copy_from_device_on(0, &src, &s).unwrap_err();
                let m = e.to_string();
                assert!(matches!(e, Error::InvalidArgument(_)), "{m}");
                assert!(m.contains("stream"), "{m}");
                assert!(m.contains(&format!("device {third_dev}")), "names the stream's device: {m}");
                assert!(m.contains(&format!("device {dd}")) && m.contains(&format!("device {so}")), "names both buffers' devices: {m}");
                // copy_from_device_async takes a stream of the destination's context only.
                let e = dst.copy_from_device_async(0, &src, &s).map(drop).unwrap_err();
                assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
            }
            let e = dst.copy_from_device_async(0, &src, &Stream::new(src_ctx).unwrap()).map(drop).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "async on the source's stream: {e}");
            let check = |e: Error, what: &str| {
                let m = e.to_string();
                assert!(matches!(e, Error::OutOfBounds { .. }), "{what}: {m}");
                assert!(m.contains(what), "{m}");
            };
            let s_dst = Stream::new(dst_ctx).unwrap();
            let s_src = Stream::new(src_ctx).unwrap();
            check(dst.copy_from_device(1, &src).unwrap_err(), "copy_from_device");
            check(dst.copy_from_device(usize::MAX, &src.slice(0, 2).unwrap()).unwrap_err(), "copy_from_device");
            check(dst.slice(10, 50).unwrap().copy_from_device(45, &src.slice(0, 6).unwrap()).unwrap_err(), "copy_from_device");
            check(dst.copy_from_device_on(1, &src, &s_dst).unwrap_err(), "copy_from_device_on");
            check(dst.copy_from_device_on(usize::MAX, &src.slice(0, 2).unwrap(), &s_src).unwrap_err(), "copy_from_device_on");
            check(dst.slice(1, 10).unwrap().copy_from_device_on(0, &src.slice(0, 11).unwrap(), &s_src).unwrap_err(), "copy_from_device_on");
            check(dst.copy_from_device_async(99, &src.slice(0, 2).unwrap(), &s_dst).map(drop).unwrap_err(), "copy_from_device_async");
            let ro = dst.read_only();
            assert!(matches!(ro.copy_from_device(0, &src), Err(Error::ReadOnly(_))));
            assert!(matches!(ro.copy_from_device_on(0, &src, &s_src), Err(Error::ReadOnly(_))));
            s_dst.synchronize().unwrap();
            s_src.synchronize().unwrap();
            assert_eq!(dst.to_host_vec().unwrap(), noise, "device {so} -> {dd}: a refused copy wrote");
            assert_eq!(src.to_host_vec().unwrap(), data);
        }
    }

    /// One context per device used by 8 threads at once: each allocates on both devices,
    /// uploads, copies between the devices (every way of issuing a peer copy, in turn) and
    /// downloads, and writes its own slice of a buffer shared by all threads on each
    /// device; every result is compared with the thread's data.
    fn both_devices_from_eight_threads_at_once() {
        let Some(d1) = second_ctx("both_devices_from_eight_threads_at_once") else { return };
        let d0 = ctx();
        let threads = 8;
        let per = (1 << 20) + 64;
        let shared0 = d0.allocate(threads * per).unwrap();
        let shared1 = d1.allocate(threads * per).unwrap();
        let mut r = rng("both_devices_from_eight_threads_at_once");
        let seeds: Vec<u64> = (0..threads).map(|_| r.random()).collect();
        let start = Barrier::new(threads);
        let rounds = 6u64;
        let len_of = |t: usize| per - 3 * t - 1;
        std::thread::scope(|s| {
            for (t, &seed) in seeds.iter().enumerate() {
                let (d0, d1) = (d0.clone(), d1.clone());
                let (shared0, shared1, start) = (&shared0, &shared1, &start);
                s.spawn(move || {
                    start.wait();
                    let n = len_of(t);
                    for round in 0..rounds {
                        let what = format!("thread {t} round {round}");
                        let data = fast_random(n, seed ^ round);
                        // 0 -> 1 into a new buffer, then 1 -> 0 back.
                        let a0 = DeviceBuffer::from_host(&d0, &data).unwrap();
                        let b1 = d1.allocate(n).unwrap();
                        peer_copy(HOWS[(t + round as usize) % 4], &b1, 0, &a0);
                        assert_bytes(&b1.to_host_vec().unwrap(), &data, &format!("{what}: 0 -> 1"));
                        let c0 = d0.allocate(n + 1).unwrap();
                        peer_copy(HOWS[(t + round as usize + 1) % 4], &c0, 1, &b1);
                        assert_bytes(&c0.copy_to_host(1, n).unwrap(), &data, &format!("{what}: 1 -> 0"));
                        // This thread's slices of the shared buffers, written across devices.
                        let mine1 = shared1.slice(t * per, n).unwrap();
                        let mine0 = shared0.slice(t * per + 1, n).unwrap();
                        peer_copy(HOWS[(t + round as usize + 2) % 4], &mine1, 0, &a0);
                        peer_copy(HOWS[(t + round as usize + 3) % 4], &mine0, 0, &mine1);
                        assert!(mine0.equals(&a0).unwrap(), "{what}: shared slice on device 0");
                        assert!(b1.equals(&mine1).unwrap(), "{what}: shared slice on device 1");
                    }
                });
            }
        });
        for (t, &seed) in seeds.iter().enumerate() {
            let want = fast_random(len_of(t), seed ^ (rounds - 1));
            assert_bytes(&shared1.slice(t * per, len_of(t)).unwrap().to_host_vec().unwrap(), &want, &format!("thread {t}: final data on device 1"));
            assert_bytes(&shared0.slice(t * per + 1, len_of(t)).unwrap().to_host_vec().unwrap(), &want, &format!("thread {t}: final data on device 0"));
        }
    }
}

/// What a context holds: devbuf's counters, its device pool and its staging pool.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Usage {
    device_bytes: usize,
    host_bytes: usize,
    pool_reserved: u64,
    pool_used: u64,
    pinned: usize,
    pinned_in_use: usize,
    scratch: usize,
    staged_copies: u64,
    direct_copies: u64,
}

fn usage(c: &Context) -> Usage {
    let p = c.device_pool_stats().unwrap();
    let t = c.transfer_stats();
    Usage {
        device_bytes: c.bytes_allocated(),
        host_bytes: c.host_bytes_allocated(),
        pool_reserved: p.reserved_bytes,
        pool_used: p.used_bytes,
        pinned: t.pinned_bytes,
        pinned_in_use: t.pinned_in_use_bytes,
        scratch: t.device_scratch_bytes,
        staged_copies: t.staged_copies,
        direct_copies: t.direct_copies,
    }
}

/// Gives a context cached memory to lose: freed pool memory and idle staging kits.
fn warm(c: &Context) {
    drop(c.allocate_pooled(8 * MIB, None).unwrap());
    let d = c.allocate(8 * MIB).unwrap();
    d.copy_from_host(0, &fast_random(8 * MIB, 77)).unwrap(); // ordinary memory: staged
    drop(d);
    c.synchronize().unwrap();
    let u = usage(c);
    assert!(
        u.pool_reserved >= (8 * MIB) as u64 && u.pinned > 0,
        "device {}: {u:?}",
        c.ordinal()
    );
}

gpu_test! {
    /// Device memory (plain and pooled), page-locked memory and staging on one device
    /// are counted by that device's context only; freeing and trimming on it brings it
    /// back to nothing held and leaves the other device's counters and cached pool and
    /// staging memory exactly as they were. Both ways round.
    fn allocations_and_pools_are_counted_per_device() {
        let test = "allocations_and_pools_are_counted_per_device";
        let Some(_d1) = second_ctx(test) else { return };
        // Dedicated contexts: their counters move only with this test.
        let c0 = Context::new_dedicated(0).unwrap();
        let c1 = Context::new_dedicated(1).unwrap();
        if c0.allocate_pooled(1, None).is_err() || c1.allocate_pooled(1, None).is_err() {
            println!("SKIPPED {test}: no stream-ordered memory pools on these devices");
            eprintln!("SKIPPED {test}: no stream-ordered memory pools on these devices");
            return;
        }
        let mut r = rng(test);
        for (busy, idle) in [(&c1, &c0), (&c0, &c1)] {
            let (b, i) = (busy.ordinal(), idle.ordinal());
            warm(idle);
            warm(busy);
            busy.trim_device_pool(0).unwrap();
            busy.trim_transfer_pool();
            let idle_before = usage(idle);
            let start = usage(busy);
            assert_eq!((start.device_bytes, start.host_bytes, start.pool_reserved, start.pool_used, start.pinned), (0, 0, 0, 0, 0), "device {b}: {start:?}");
            // Allocate on `busy`: plain, pooled (legacy stream and a stream), page-locked.
            let s = Stream::new(busy).unwrap();
            let plain = busy.allocate((8 << 20) + 5).unwrap();
            let pooled = busy.allocate_pooled((5 << 20) + 1, None).unwrap();
            let pooled_s = busy.allocate_pooled((3 << 20) + 7, Some(&s)).unwrap();
            let mut pinned = busy.allocate_host(4097 + b).unwrap();
            assert_eq!(busy.bytes_allocated(), (8 << 20) + 5 + (5 << 20) + 1 + (3 << 20) + 7, "device {b}");
            assert_eq!(busy.host_bytes_allocated(), 4097 + b, "device {b}");
            let p = busy.device_pool_stats().unwrap();
            assert!(p.used_bytes >= ((8 << 20) + 8) as u64 && p.reserved_bytes >= p.used_bytes, "device {b}: {p:?}");
            for buf in [&plain, &pooled, &pooled_s] {
                assert_eq!(buf.context().ordinal(), b);
                assert_eq!(device_of_pointer(buf.address()), b as i32);
            }
            // Data through each (the 8 MiB upload from ordinary memory is staged).
            let big = fast_random(plain.len(), r.random());
            plain.copy_from_host(0, &big).unwrap();
            pooled.copy_from_device(0, &plain.slice(11, pooled.len()).unwrap()).unwrap();
            // `s` is a non-blocking stream: not ordered after the legacy stream's copy.
            busy.synchronize().unwrap();
            pooled_s.copy_from_device_on(0, &pooled.slice(2, pooled_s.len()).unwrap(), &s).unwrap();
            s.synchronize().unwrap();
            let small = random_bytes(&mut r, pinned.len());
            pinned.copy_from_slice(&small);
            let mut out = vec![0u8; pooled_s.len()];
            pooled_s.copy_to_host_into(0, &mut out).unwrap();
            assert_bytes(&out, &big[13..13 + pooled_s.len()], &format!("device {b}: through the pooled buffers"));
            plain.copy_from_host(100, &pinned).unwrap();
            assert_bytes(&plain.copy_to_host(100, pinned.len()).unwrap(), &small, &format!("device {b}: page-locked upload"));
            let t = busy.transfer_stats();
            assert!(t.staged_copies > start.staged_copies && t.pinned_bytes > 0, "device {b} staged: {t:?}");
            assert_eq!(usage(idle), idle_before, "working on device {b} changed device {i}'s context");
            // Free and trim on `busy` only.
            drop((plain, pooled, pooled_s, pinned, s));
            busy.synchronize().unwrap();
            busy.trim_device_pool(0).unwrap();
            let freed = busy.trim_transfer_pool();
            assert!(freed > 0, "device {b}: staging to free");
            let end = usage(busy);
            assert_eq!((end.device_bytes, end.host_bytes, end.pool_reserved, end.pool_used, end.pinned, end.pinned_in_use), (0, 0, 0, 0, 0, 0), "device {b} back to nothing held: {end:?}");
            assert_eq!(usage(idle), idle_before, "freeing and trimming device {b} changed device {i}'s context");
        }
    }
}

// ---------------------------------------------------------------------------------------
// IPC across devices.

const ROLE: &str = "DEVBUF_MULTI_GPU_CHILD";
const CHILD: &str = "multi_gpu::child_entry";

/// The child side of the cross-device IPC tests.
#[test]
#[ignore = "child role of the cross-device IPC tests (they run it)"]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    match role.as_str() {
        "open_on_other_device" => child_open_on_other_device(),
        other => panic!("unknown child role {other}"),
    }
}

/// HANDLE: a slice (OFF, LEN) of an allocation holding `fast_random(N, SEED)`, on the
/// device that is OPEN_DEV in this process. Works on device WORK_DEV: opening the handle
/// with its context is refused (reported); the handle opens where its memory is; the
/// bytes are copied to WORK_DEV (blocking and on a WORK_DEV stream) and their digest
/// reported; then the inverted bytes of W_OFF..+W_LEN of the slice are written from a
/// WORK_DEV buffer into the mapping, on a WORK_DEV stream.
fn child_open_on_other_device() {
    let num = |k: &str| -> usize { env(k).parse().unwrap() };
    let seed: u64 = env("SEED").parse().unwrap();
    let (n, off, len) = (num("N"), num("OFF"), num("LEN"));
    let (open_dev, work_dev) = (num("OPEN_DEV"), num("WORK_DEV"));
    let (w_off, w_len) = (num("W_OFF"), num("W_LEN"));
    let work = Context::new(work_dev).unwrap();
    work.synchronize().unwrap(); // current on this thread
    let h = IpcMemHandle::from_hex(&env("HANDLE")).unwrap();
    match work.open_ipc(&h) {
        Ok(b) => say("refused", format!("NONE: opened {} bytes", b.len())),
        Err(e) => say(
            "refused",
            format!(
                "{} | {}",
                matches!(e, Error::InvalidArgument(_)),
                e.to_string().replace('\n', " ")
            ),
        ),
    }
    let opened = h.open().unwrap();
    assert_eq!(opened.context().ordinal(), open_dev);
    say(
        "opened",
        format!(
            "{} {} {} {}",
            opened.len(),
            opened.context().ordinal(),
            h.device_ordinal().map_or(-1, |o| o as i64),
            opened.context().properties().uuid_string()
        ),
    );
    let expected = fast_random(n, seed)[off..off + len].to_vec();
    let mine = work.allocate(len).unwrap();
    mine.copy_from_device(0, &opened).unwrap();
    let got = mine.to_host_vec().unwrap();
    let stream = Stream::new(&work).unwrap();
    let mine2 = work.allocate(len + 3).unwrap();
    mine2.copy_from_device_on(3, &opened, &stream).unwrap();
    stream.synchronize().unwrap();
    let got2 = mine2.copy_to_host(3, len).unwrap();
    say(
        "read",
        format!(
            "{} {} {}",
            fnv(&got),
            got == expected,
            got2[..] == expected[..]
        ),
    );
    let inverted: Vec<u8> = expected[w_off..w_off + w_len].iter().map(|x| !x).collect();
    let src = DeviceBuffer::from_host(&work, &inverted).unwrap();
    opened
        .slice(w_off, w_len)
        .unwrap()
        .copy_from_device_on(0, &src, &stream)
        .unwrap();
    stream.synchronize().unwrap();
    say("written", "");
    wait_line();
}

/// Exports a slice of a buffer on `export`; a child working on device `work_dev` (its
/// numbering; `extra` may renumber its devices) opens it where the memory is (its
/// device `open_dev`), reads it to its working device and writes into it from there.
/// `work_uuid`: the UUID of the child's working device.
fn ipc_across_devices(
    export: &Context,
    open_dev: usize,
    work_dev: usize,
    work_uuid: &str,
    extra: &[(&str, String)],
) {
    let seed = 0x1bc0 + export.ordinal() as u64 + 10 * work_dev as u64;
    let n = (4 << 20) + 7;
    let host = fast_random(n, seed);
    let buf = DeviceBuffer::from_host(export, &host).unwrap();
    let (off, len) = (4099, n - 4099 - 5);
    let (w_off, w_len) = (13, 100_001);
    let h = buf.slice(off, len).unwrap().export_ipc().unwrap();
    assert_eq!(h.device_ordinal(), Some(export.ordinal()));
    assert_eq!(h.device_uuid(), Some(export.properties().uuid));
    let mut vars = vec![
        ("SEED", seed.to_string()),
        ("N", n.to_string()),
        ("OFF", off.to_string()),
        ("LEN", len.to_string()),
        ("HANDLE", h.to_hex()),
        ("OPEN_DEV", open_dev.to_string()),
        ("WORK_DEV", work_dev.to_string()),
        ("W_OFF", w_off.to_string()),
        ("W_LEN", w_len.to_string()),
    ];
    vars.extend(extra.iter().cloned());
    let mut p = Peer::spawn(CHILD, ROLE, "open_on_other_device", &vars);
    let refused = p.expect("refused");
    let uuid = export.properties().uuid_string();
    assert!(
        refused.starts_with("true |") && refused.contains(&uuid) && refused.contains(work_uuid),
        "opening with the other device's context: an InvalidArgument naming both devices: {refused}"
    );
    assert_eq!(
        p.expect("opened"),
        format!("{len} {open_dev} {} {uuid}", export.ordinal())
    );
    assert_eq!(
        p.expect("read"),
        format!("{} true true", fnv(&host[off..off + len]))
    );
    p.expect("written");
    let mut want = host;
    for x in &mut want[off + w_off..off + w_off + w_len] {
        *x = !*x;
    }
    assert_bytes(
        &buf.to_host_vec().unwrap(),
        &want,
        &format!(
            "device {} after the child's write from its device {work_dev}",
            export.ordinal()
        ),
    );
    p.send("done");
    p.finish();
}

gpu_test! {
    /// Exported on device 0, opened by a child working on device 1: the child's device-1
    /// context refuses the handle naming both devices, the handle opens on device 0, the
    /// child reads the right bytes onto device 1 (digest checked here) and its write
    /// from device 1 lands exactly in the exported range.
    fn ipc_export_on_device_0_used_from_device_1() {
        let Some(d1) = second_ctx("ipc_export_on_device_0_used_from_device_1") else { return };
        ipc_across_devices(&ctx(), 0, 1, &d1.properties().uuid_string(), &[]);
    }

    /// The reverse: exported on device 1, used by a child working on device 0.
    fn ipc_export_on_device_1_used_from_device_0() {
        let Some(d1) = second_ctx("ipc_export_on_device_1_used_from_device_0") else { return };
        ipc_across_devices(&d1, 1, 0, &ctx().properties().uuid_string(), &[]);
    }

    /// A child that numbers the devices the other way round (CUDA_VISIBLE_DEVICES by
    /// UUID): the handle of device 0 records the exporter's ordinal 0, yet opens on the
    /// child's device 1 (found by UUID), and the child works on its device 0 (the
    /// exporter's device 1).
    fn ipc_handles_find_their_device_when_the_child_numbers_devices_otherwise() {
        let test = "ipc_handles_find_their_device_when_the_child_numbers_devices_otherwise";
        let Some(d1) = second_ctx(test) else { return };
        let d0 = ctx();
        let (u0, u1) = (d0.properties().uuid_string(), d1.properties().uuid_string());
        let visible = format!("GPU-{u1},GPU-{u0}");
        ipc_across_devices(&d0, 1, 0, &u1, &[("CUDA_VISIBLE_DEVICES", visible)]);
    }
}

// ---------------------------------------------------------------------------------------
// Arrow on device 1.

/// The non-null buffer addresses of a C structure tree (buffers, children, dictionary).
fn c_addrs(a: &ArrowArray, out: &mut Vec<u64>) {
    for i in 0..a.n_buffers() as usize {
        let p = a.buffer(i).expect("buffer") as u64;
        if p != 0 {
            out.push(p);
        }
    }
    for i in 0..a.n_children() as usize {
        c_addrs(a.child(i).expect("child"), out);
    }
    if let Some(d) = a.dictionary() {
        c_addrs(d, out);
    }
}

/// The device addresses of an array tree, in C buffer order. `validity_if_nulls`: list
/// the validity bitmap only when there are nulls (the importer drops a bitmap that a
/// producer sends with `null_count` 0).
fn dev_addrs(d: &DeviceArray, validity_if_nulls: bool, out: &mut Vec<u64>) {
    if let Some(v) = d.validity()
        && (!validity_if_nulls || d.null_count() > 0)
        && v.address() != 0
    {
        out.push(v.address());
    }
    out.extend(d.buffers().iter().map(|b| b.address()).filter(|&a| a != 0));
    for c in d.children() {
        dev_addrs(c, validity_if_nulls, out);
    }
    if let Some(x) = d.dictionary() {
        dev_addrs(x, validity_if_nulls, out);
    }
}

fn addrs(d: &DeviceArray, validity_if_nulls: bool) -> Vec<u64> {
    let mut v = Vec::new();
    dev_addrs(d, validity_if_nulls, &mut v);
    v
}

/// Whether `b` lies inside `outer` (zero-copy check by address).
fn within(b: &DeviceBuffer, outer: &DeviceBuffer) -> bool {
    b.is_empty()
        || (b.address() >= outer.address()
            && b.address() + b.len() as u64 <= outer.address() + outer.len() as u64)
}

gpu_test! {
    /// A ChunkBatch built on device 1 (from chunks on the host and on device 0) is one
    /// device-1 allocation; its C Device Data Interface export says device 1 and points
    /// at exactly those device-1 buffers (addresses compared, and the driver asked);
    /// a consumer on device 1 imports it (zero-copy, waiting on its own stream) and reads
    /// the host batch's values; the same through a C device stream; released once.
    fn chunk_batch_and_c_device_export_on_device_1() {
        let Some(d1) = second_ctx("chunk_batch_and_c_device_export_on_device_1") else { return };
        let _g = serial();
        let mut r = rng("chunk_batch_and_c_device_export_on_device_1");
        let grid = ChunkGrid::new(&[10, 7], &[4, 3], Dtype::native(ElementType::Float32)).unwrap();
        let mut chunks = Vec::new();
        for i in 0..3u64 {
            for j in 0..3u64 {
                let ext = grid.chunk_extent(&[i, j]).unwrap();
                let vals: Vec<f32> = (0..ext.iter().product::<usize>()).map(|_| r.random::<f32>() * 100.0 - 50.0).collect();
                let nd = NDBuffer::from_ndarray(ndarray::ArrayD::from_shape_vec(ext.clone(), vals).unwrap());
                // Every other chunk comes from device 0: moved to device 1 by the build.
                let nd = if (i + j) % 2 == 1 { nd.to_prototype(&BufferPrototype::Device(0)).unwrap() } else { nd };
                chunks.push((vec![i, j], nd));
            }
        }
        let host = ChunkBatch::from_chunks(&grid, chunks.iter().map(|(c, n)| (c.as_slice(), n)), &BufferPrototype::Host).unwrap();
        let dev = ChunkBatch::from_chunks(&grid, chunks.iter().map(|(c, n)| (c.as_slice(), n)), &BufferPrototype::Device(1)).unwrap();
        assert!(dev.is_device());
        let host_rb = host.record_batch().unwrap().clone();
        let d = dev.device_record_batch().unwrap();
        let message = d.message();
        assert_eq!(message.context().ordinal(), 1);
        assert_eq!(device_of_pointer(message.address()), 1);
        for col in d.columns() {
            for b in col.all_buffers() {
                assert_eq!(b.context().ordinal(), 1);
                assert!(within(b, message), "{:?}: not inside the batch's device-1 allocation", col.data_type());
            }
        }
        for k in 0..host.len() {
            assert_eq!(dev.coords(k), host.coords(k));
            let c = dev.chunk(k).unwrap();
            assert_eq!(c.as_ndarray_like().memory.device_ordinal(), Some(1), "chunk {k}");
            assert_eq!(c.to_ndarray::<f32>().unwrap(), host.chunk(k).unwrap().to_ndarray::<f32>().unwrap(), "chunk {k}");
        }
        for (i, col) in d.columns().iter().enumerate() {
            assert_eq!(col.to_host().unwrap().as_ref(), host_rb.column(i).as_ref(), "column {i}");
        }

        // Export as one struct array, import on a device-1 consumer stream.
        let s = batch_as_struct(d).unwrap();
        let want = StructArray::from(host_rb.clone());
        let nodes = crate::corpus::node_count(&want.to_data());
        let k = counts();
        let (mut c_array, c_schema) = export_device_array(&s, SyncEvent::DefaultStream).unwrap();
        assert_eq!(c_array.device_type(), ARROW_DEVICE_CUDA);
        assert_eq!(c_array.device_id(), 1);
        assert!(!c_array.sync_event().is_null(), "an event to wait on");
        let exported = {
            let mut v = Vec::new();
            c_addrs(c_array.array(), &mut v);
            v
        };
        assert_eq!(exported, addrs(&s, false), "the exported pointers are the device-1 buffers");
        assert!(!exported.is_empty());
        for &a in &exported {
            assert_eq!(device_of_pointer(a), 1, "{a:#x}");
            assert!(a >= message.address() && a < message.address() + message.len() as u64, "{a:#x}");
        }
        assert_eq!(k.live_since(), nodes as i64);
        let consumer = Stream::new(&d1).unwrap();
        let imported = import_device_array(&mut c_array, &c_schema, Some(&consumer)).unwrap();
        assert!(c_array.is_released());
        assert_eq!(addrs(&imported, true), addrs(&s, true), "imported zero-copy");
        assert!(imported.all_buffers().iter().all(|b| b.context().ordinal() == 1 && !b.is_owned()));
        consumer.synchronize().unwrap();
        assert_eq!(imported.len(), host.len());
        for (i, child) in imported.children().iter().enumerate() {
            assert_eq!(child.to_host().unwrap().as_ref(), want.column(i).as_ref(), "column {i}");
        }
        // The consumer copies the chunk column's values on device 1 and reads them.
        let values = imported.children()[2].children()[0].buffers()[0].clone();
        let copy = d1.allocate(values.len()).unwrap();
        copy.copy_from_device_on(0, &values, &consumer).unwrap();
        consumer.synchronize().unwrap();
        let host_values: Vec<u8> = want
            .column(2)
            .as_fixed_size_list()
            .values()
            .as_primitive::<Float32Type>()
            .values()
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let got = copy.to_host_vec().unwrap();
        assert!(got.len() >= host_values.len(), "{} value bytes on device 1, {} expected", got.len(), host_values.len());
        assert_bytes(&got[..host_values.len()], &host_values, "chunk values copied on device 1");
        drop(imported);
        assert_eq!(k.released_since(), nodes, "released exactly once");
        assert_eq!(k.live_since(), 0);

        // The same batch through a C device stream.
        let k = counts();
        let mut stream = export_device_stream(d.schema(), vec![Ok(s.clone())], None);
        let arrays: Vec<DeviceArray> = import_device_stream(&mut stream, Some(&consumer)).unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(arrays.len(), 1);
        assert_eq!(addrs(&arrays[0], true), addrs(&s, true));
        assert!(arrays[0].all_buffers().iter().all(|b| b.context().ordinal() == 1));
        consumer.synchronize().unwrap();
        for (i, child) in arrays[0].children().iter().enumerate() {
            assert_eq!(child.to_host().unwrap().as_ref(), want.column(i).as_ref(), "stream column {i}");
        }
        drop(arrays);
        drop(stream);
        assert_eq!(k.live_since(), 0);
    }
}

// ---------------------------------------------------------------------------------------
// zarr reads into device 1.

#[cfg(feature = "zarr")]
mod zarr_on_device_1 {
    use std::sync::Barrier;
    use std::sync::atomic::{AtomicBool, Ordering};

    use devbuf::cuda::DeviceBuffer;
    use devbuf::zarr::{
        ArraySpec, BufferPrototype, Compressor, Decoder, Dtype, ElementType, ReadOptions, ZarrArray,
    };
    use rand::Rng;

    use super::{assert_bytes, device_of_pointer};
    use crate::common::*;
    use crate::zarrs::zarrs_common::{TempDir, grid_indices};
    use crate::zarrs::{bytes_of, host_nd, nvcomp_missing, random_elements};

    const HOST: BufferPrototype = BufferPrototype::Host;
    const DEV0: BufferPrototype = BufferPrototype::Device(0);
    const DEV1: BufferPrototype = BufferPrototype::Device(1);

    gpu_test! {
        /// While a second thread keeps device 0 busy reading the same array (both start
        /// at a barrier; device 0 reads on until device 1 is done), reads into device 1
        /// (all, a box, chunks, into the caller's device-1 memory, and with nvCOMP where
        /// available) give exactly the host read's bytes, in device-1 memory, and report
        /// "device 1"; every device-0 read is right too.
        fn zarr_reads_into_device_1_while_device_0_reads() {
            let test = "zarr_reads_into_device_1_while_device_0_reads";
            let Some(d1) = second_ctx(test) else { return };
            let mut r = rng(test);
            let dir = TempDir::new("multi-gpu");
            let shape = [512u64, 384];
            let path = dir.0.join("a");
            let spec = ArraySpec::new(&shape, &[64, 48], Dtype::FLOAT32).with_compressor(Compressor::Zstd { level: 1 });
            let a = ZarrArray::create(&path, &spec).unwrap();
            let n = 512 * 384;
            a.write_subset(&[0, 0], &host_nd(random_elements(&mut r, ElementType::Float32, n), &shape, ElementType::Float32)).unwrap();
            let mut a = ZarrArray::open(&path).unwrap();
            a.set_read_options(ReadOptions { threads: Some(3), slot_bytes: 64 << 10, ..ReadOptions::default() }).unwrap();
            let want = bytes_of(&a.read_all(&HOST).unwrap());
            let boxed = [100..420u64, 7..300];
            let want_box = bytes_of(&a.read_subset(&boxed, &HOST).unwrap());
            let indices = grid_indices(&a.metadata().grid_shape);
            let want_chunks: Vec<Vec<u8>> = a.read_chunks(&indices, &HOST).unwrap().iter().map(bytes_of).collect();
            let gpu = !nvcomp_missing(&format!("{test} (nvCOMP part)"));
            let start = Barrier::new(2);
            let done = AtomicBool::new(false);
            let a = &a;
            // Ends the device-0 reads also when this thread fails half-way.
            struct Done<'a>(&'a AtomicBool);
            impl Drop for Done<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::SeqCst);
                }
            }
            std::thread::scope(|s| {
                let busy = s.spawn(|| {
                    start.wait();
                    let mut reads = 0;
                    loop {
                        let (nd, report) = a.read_all_with_report(&DEV0).unwrap();
                        assert_eq!(report.target, "device 0", "{report}");
                        assert_eq!(nd.as_ndarray_like().memory.device_ordinal(), Some(0));
                        assert!(bytes_of(&nd) == want, "device 0 read {reads}");
                        reads += 1;
                        if done.load(Ordering::SeqCst) {
                            return reads;
                        }
                    }
                });
                start.wait();
                let done_guard = Done(&done);
                let (nd, report) = a.read_all_with_report(&DEV1).unwrap();
                assert_eq!(report.target, "device 1", "{report}");
                let mem = nd.as_ndarray_like().memory;
                assert_eq!(mem.device_ordinal(), Some(1));
                assert_eq!(mem.as_device().unwrap().context().ordinal(), 1);
                assert_eq!(device_of_pointer(mem.address()), 1);
                assert_bytes(&bytes_of(&nd), &want, "read_all into device 1");
                let (nd, report) = a.read_subset_with_report(&boxed, &DEV1).unwrap();
                assert_eq!(report.target, "device 1", "{report}");
                assert_eq!(nd.as_ndarray_like().memory.device_ordinal(), Some(1));
                assert_bytes(&bytes_of(&nd), &want_box, "read_subset into device 1");
                let chunks = a.read_chunks(&indices, &DEV1).unwrap();
                for ((c, w), idx) in chunks.iter().zip(&want_chunks).zip(&indices) {
                    assert_eq!(c.as_ndarray_like().memory.device_ordinal(), Some(1), "chunk {idx:?}");
                    assert_bytes(&bytes_of(c), w, &format!("chunk {idx:?} into device 1"));
                }
                // Into the caller's device-1 memory: a view in the middle of noise.
                let noise: Vec<u8> = (0..want_box.len() + 512).map(|_| r.random()).collect();
                let whole = DeviceBuffer::from_host(&d1, &noise).unwrap();
                let view = whole.slice(256, want_box.len()).unwrap();
                let report = a.read_subset_into(&boxed, &view).unwrap();
                assert!(report.target.starts_with("device 1 (the caller's memory)"), "{report}");
                let got = whole.to_host_vec().unwrap();
                assert_bytes(&got[256..256 + want_box.len()], &want_box, "read_subset_into device-1 memory");
                assert!(got[..256] == noise[..256] && got[256 + want_box.len()..] == noise[256 + want_box.len()..], "bytes around the view changed");
                if gpu {
                    let mut g = ZarrArray::open(&path).unwrap();
                    g.set_read_options(ReadOptions { decoder: Decoder::Gpu, ..ReadOptions::default() }).unwrap();
                    let (nd, report) = g.read_all_with_report(&DEV1).unwrap();
                    println!("nvCOMP into device 1: {report}");
                    assert_eq!(report.target, "device 1", "{report}");
                    assert_eq!(nd.as_ndarray_like().memory.device_ordinal(), Some(1));
                    assert_bytes(&bytes_of(&nd), &want, "nvCOMP read into device 1");
                }
                drop(done_guard);
                let reads = busy.join().unwrap();
                println!("device 0 read the array {reads} times meanwhile");
                assert!(reads >= 1);
            });
        }
    }
}
