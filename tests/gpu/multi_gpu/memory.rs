//! Allocation counters, device memory pools and page-locked staging pools per device.

use super::*;

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
            pooled_s.copy_to_host(0, &mut out).unwrap();
            assert_bytes(&out, &big[13..13 + pooled_s.len()], &format!("device {b}: through the pooled buffers"));
            plain.copy_from_host(100, &pinned).unwrap();
            assert_bytes(&plain.slice(100, pinned.len()).unwrap().to_host().unwrap(), &small, &format!("device {b}: page-locked upload"));
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
