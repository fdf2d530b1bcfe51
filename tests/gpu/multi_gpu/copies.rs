//! Peer copies between devices 0 and 1, and both devices from many threads.

use super::*;

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
    let src_parent = DeviceBuffer::from_slice(src_ctx, &whole).unwrap();
    let src = src_parent.slice(src_off, n).unwrap();
    let noise = random_bytes(r, n + 16);
    let dst_parent = DeviceBuffer::from_slice(dst_ctx, &noise).unwrap();
    let dst = dst_parent.slice(3, n + 9).unwrap();
    let pos = 1 + 2 * below(r, 5);
    peer_copy(how, &dst, pos, &src);
    assert_eq!(dst.context().ordinal(), dst_ctx.ordinal());
    let mut want = noise;
    want[3 + pos..3 + pos + n].copy_from_slice(&whole[src_off..src_off + n]);
    assert_bytes(&dst_parent.to_vec::<u8>().unwrap(), &want, what);
}

// These turn peer access off: they run alone (see the module docs).
gpu_test_exclusive! {
    /// Peer copies of 1 byte to 8 MiB (odd sizes, odd offsets of source and destination)
    /// give exactly the source's bytes in both directions, blocking and on a stream of
    /// either device, with peer access on and with it off; copying with access off does
    /// not turn it on again (the driver's own view is probed), and `set_peer_access(peer, true)`
    /// turns it on again from either side.
    fn peer_copies_with_peer_access_on_and_off() {
        let Some(d1) = second_ctx("peer_copies_with_peer_access_on_and_off") else { return };
        let d0 = ctx();
        let _again = PeerOnAgain(d0.clone(), d1.clone());
        let direct = d0.set_peer_access(&d1, true).unwrap();
        assert_eq!(d1.set_peer_access(&d0, true).unwrap(), direct, "peer access is symmetric");
        println!("peer access between devices 0 and 1 possible: {direct}");
        assert_eq!(driver_peer_access(&d0, &d1), direct);
        assert_eq!(driver_peer_access(&d1, &d0), direct);
        let mut r = rng("peer_copies_with_peer_access_on_and_off");
        let sizes = [1usize, 2, 3, 17, 255, 4095, 4097, 65_537, (1 << 20) + 13, (8 << 20) + 1];
        for on in [true, false] {
            if on {
                assert_eq!(d0.set_peer_access(&d1, true).unwrap(), direct);
            } else {
                d0.set_peer_access(&d1, false).unwrap();
                assert!(!driver_peer_access(&d0, &d1), "set_peer_access(false): 0 -> 1 still on");
                assert!(!driver_peer_access(&d1, &d0), "set_peer_access(false): 1 -> 0 still on");
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
                let a = DeviceBuffer::from_slice(src, &[1u8, 2, 3]).unwrap();
                let b = DeviceBuffer::from_slice(dst, &[4u8, 5, 6]).unwrap();
                for how in HOWS {
                    peer_copy(how, &b, 3, &a.slice(1, 0).unwrap());
                }
                assert_eq!(b.to_vec::<u8>().unwrap(), vec![4, 5, 6]);
            }
            // Copies with access off did not turn it on behind the caller's back.
            assert_eq!(driver_peer_access(&d0, &d1), on && direct, "peer access {state}, 0 -> 1");
            assert_eq!(driver_peer_access(&d1, &d0), on && direct, "peer access {state}, 1 -> 0");
        }
        // Off from device 1's side, on again from device 0's: both directions follow.
        d1.set_peer_access(&d0, false).unwrap();
        assert!(!driver_peer_access(&d0, &d1) && !driver_peer_access(&d1, &d0));
        check_peer_copy(&mut r, &d1, &d0, 4097, How::OnSourceStream, "off from device 1's side");
        assert!(!driver_peer_access(&d0, &d1) && !driver_peer_access(&d1, &d0));
        d1.set_peer_access(&d0, false).unwrap(); // twice is fine
        assert_eq!(d0.set_peer_access(&d1, true).unwrap(), direct);
        assert_eq!(driver_peer_access(&d0, &d1), direct);
        assert_eq!(driver_peer_access(&d1, &d0), direct);
        check_peer_copy(&mut r, &d0, &d1, 4097, How::OnDestinationStream, "on again");
        // A pair on one device is always "on" and cannot be turned off.
        let other0 = Context::new_dedicated(0).unwrap();
        other0.set_peer_access(&d0, false).unwrap();
        assert!(other0.set_peer_access(&d0, true).unwrap());
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
        let direct = d0.set_peer_access(&d1, true).unwrap();
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
        let a = DeviceBuffer::from_slice(&d0, &data).unwrap();
        let b = d1.allocate(n).unwrap();
        let back = d0.allocate(n).unwrap();
        let (s0, s1) = (Stream::new(&d0).unwrap(), Stream::new(&d1).unwrap());
        let mut host = vec![0u8; n];
        let gbps = |secs: f64| n as f64 / secs / 1e9;
        for on in [true, false] {
            if on {
                assert_eq!(d0.set_peer_access(&d1, true).unwrap(), direct);
            } else {
                d0.set_peer_access(&d1, false).unwrap();
            }
            let state = if on { "on" } else { "off" };
            // 0 -> 1, blocking, the whole buffer.
            b.fill(0).unwrap();
            let t = Instant::now();
            b.copy_from_device(0, &a).unwrap();
            d1.synchronize().unwrap(); // cuMemcpyPeer may return before the copy is done
            let blocking = t.elapsed().as_secs_f64();
            b.copy_to_host(0, &mut host).unwrap();
            assert_bytes(&host, &data, &format!("peer access {state}: 0 -> 1 blocking"));
            // 1 -> 0 on a stream of device 1 (the source's), odd offsets.
            let len = n - 7;
            back.fill(0).unwrap();
            let t = Instant::now();
            back.copy_from_device_on(1, &b.slice(3, len).unwrap(), &s1).unwrap();
            s1.synchronize().unwrap();
            let on_src = t.elapsed().as_secs_f64();
            back.copy_to_host(0, &mut host).unwrap();
            assert_eq!(host[0], 0, "peer access {state}: wrote before the range");
            assert_bytes(&host[1..1 + len], &data[3..3 + len], &format!("peer access {state}: 1 -> 0 on device 1's stream"));
            assert!(host[1 + len..].iter().all(|&x| x == 0), "peer access {state}: wrote past the range");
            // 0 -> 1 on a stream of device 0 (the source's again, other direction), odd offsets.
            b.fill(0).unwrap();
            let t = Instant::now();
            b.copy_from_device_on(5, &back.slice(1, len).unwrap(), &s0).unwrap();
            s0.synchronize().unwrap();
            let on_other = t.elapsed().as_secs_f64();
            b.copy_to_host(0, &mut host).unwrap();
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
        assert_eq!(d0.set_peer_access(&d1, true).unwrap(), direct);
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
            let src = DeviceBuffer::from_slice(src_ctx, &data).unwrap();
            let dst = DeviceBuffer::from_slice(dst_ctx, &noise).unwrap();
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
            assert_eq!(dst.to_vec::<u8>().unwrap(), noise, "device {so} -> {dd}: a refused copy wrote");
            assert_eq!(src.to_vec::<u8>().unwrap(), data);
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
                        let a0 = DeviceBuffer::from_slice(&d0, &data).unwrap();
                        let b1 = d1.allocate(n).unwrap();
                        peer_copy(HOWS[(t + round as usize) % 4], &b1, 0, &a0);
                        assert_bytes(&b1.to_vec::<u8>().unwrap(), &data, &format!("{what}: 0 -> 1"));
                        let c0 = d0.allocate(n + 1).unwrap();
                        peer_copy(HOWS[(t + round as usize + 1) % 4], &c0, 1, &b1);
                        assert_bytes(&c0.slice(1, n).unwrap().to_host().unwrap(), &data, &format!("{what}: 1 -> 0"));
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
            assert_bytes(&shared1.slice(t * per, len_of(t)).unwrap().to_vec::<u8>().unwrap(), &want, &format!("thread {t}: final data on device 1"));
            assert_bytes(&shared0.slice(t * per + 1, len_of(t)).unwrap().to_vec::<u8>().unwrap(), &want, &format!("thread {t}: final data on device 0"));
        }
    }
}
