//! CUDA core: Context, DeviceBuffer, HostBuffer, host Arrow conversions.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arrow_array::types::{Float16Type, Float64Type, Int32Type};
use arrow_array::{Array, ArrowPrimitiveType, Int8Array, PrimitiveArray, UInt64Array};
use arrow_buffer::Buffer;
use bytes::Bytes;
use devbuf::Error;
use devbuf::cuda::{self, Context, DeviceBuffer, HostBuffer};
use rand::Rng;

use crate::common::*;

fn hex_of(v: &[u8]) -> String {
    v.iter().map(|b| format!("{b:02x}")).collect()
}

fn assert_send_sync<T: Send + Sync>() {}

gpu_test! {
    fn context_queries() {
        assert!(cuda::is_available());
        assert!(cuda::device_count() >= 1);
        assert!(cuda::unavailable_reason().is_none());
        let (major, minor) = cuda::driver_version().unwrap();
        println!("driver supports CUDA {major}.{minor}");
        assert!(major >= 12);
        let a = ctx();
        let b = Context::new(0).unwrap();
        assert!(a == b, "Context::new must return the cached primary context");
        assert!(a.is_primary());
        assert!(!a.properties().name.is_empty());
        let (cc_major, _) = a.properties().compute_capability;
        assert!(cc_major >= 5);
        assert!(a.properties().total_memory > (1 << 30));
        let free = a.free_memory().unwrap();
        assert!(free > 0 && free <= a.properties().total_memory);
        let p = a.properties();
        assert_ne!(p.uuid, [0u8; 16]);
        assert!(p.multiprocessor_count > 0);
        assert!(p.unified_addressing);
        println!(
            "device 0: {} sm_{}{} {} MiB, uuid {}, pci {}",
            p.name,
            p.compute_capability.0,
            p.compute_capability.1,
            p.total_memory >> 20,
            p.uuid_string(),
            p.pci_bus_id
        );
        a.synchronize().unwrap();
    }

    fn bad_ordinal_names_valid_range() {
        let n = cuda::device_count();
        let e = Context::new(n).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, Error::InvalidArgument(_)), "{msg}");
        assert!(msg.contains(&format!("ordinal {n}")), "{msg}");
        assert!(msg.contains(&format!("0..={}", n - 1)), "{msg}");
        assert!(Context::new(usize::MAX).is_err());
    }

    fn zero_length_everything() {
        let c = ctx();
        let b = c.allocate(0).unwrap();
        assert!(b.is_empty());
        assert_eq!(b.len(), 0);
        assert_eq!(b.address(), 0);
        b.copy_from_host(0, &[]).unwrap();
        b.copy_to_host(0, &mut []).unwrap();
        assert_eq!(b.slice(0, 0).unwrap().to_host().unwrap().len(), 0);
        assert_eq!(b.to_vec::<u32>().unwrap(), Vec::<u32>::new());
        assert_eq!(hex::encode(b.to_vec::<u8>().unwrap()), "");
        assert!(b.slice(0, 0).unwrap().is_empty());
        assert!(b.slice(0, 1).is_err());
        assert!(b.copy_from_host(0, &[1]).is_err());
        b.fill(7).unwrap();
        assert!(b.equals(&c.allocate(0).unwrap()).unwrap());
        let src = DeviceBuffer::from_slice::<u8>(&c, &[]).unwrap();
        b.copy_from_device(0, &src).unwrap();
        assert_eq!(Buffer::from(b.to_host().unwrap()).len(), 0);
        assert_eq!(PrimitiveArray::<Int32Type>::try_from(b.to_host().unwrap()).unwrap().len(), 0);
        assert_eq!(Bytes::from(b.to_host().unwrap()).len(), 0);
        let h = c.allocate_host(0).unwrap();
        assert!(h.is_empty());
        assert!(h.device_address().is_err());
        assert_eq!(Buffer::from(h).len(), 0);
        // A non-empty buffer sliced to nothing at its end.
        let d = DeviceBuffer::from_slice(&c, &[1u8, 2, 3]).unwrap();
        let end = d.slice(3, 0).unwrap();
        assert!(end.is_empty());
        assert_eq!(end.to_vec::<u8>().unwrap(), Vec::<u8>::new());
    }

    fn round_trip_random_odd_sizes() {
        let c = ctx();
        let mut r = rng("round_trip_random_odd_sizes");
        for &n in &[1usize, 3, 17, 255, 4095, 4096, 4097, 65_537, (1 << 20) + 7] {
            let data = random_bytes(&mut r, n);
            let d = DeviceBuffer::from_slice(&c, &data).unwrap();
            assert_eq!(d.len(), n);
            assert_ne!(d.address(), 0);
            assert_eq!(d.to_vec::<u8>().unwrap(), data, "size {n}");
            let h = d.slice(0, n).unwrap().to_host().unwrap();
            assert_eq!(&h[..], &data[..]);
            let pos = below(&mut r, n);
            let len = below(&mut r, n - pos + 1);
            let part = d.slice(pos, len).unwrap().to_host().unwrap();
            assert_eq!(&part[..], &data[pos..pos + len], "size {n} part {pos}+{len}");
            let mut into = vec![0u8; len];
            d.copy_to_host(pos, &mut into).unwrap();
            assert_eq!(into, &data[pos..pos + len]);
        }
    }

    fn slices_at_odd_offsets_compose_and_outlive_parent() {
        let c = Context::new_dedicated(0).unwrap();
        let mut r = rng("slices_at_odd_offsets");
        let n = 10_007;
        let data = random_bytes(&mut r, n);
        let parent = DeviceBuffer::from_slice(&c, &data).unwrap();
        assert_eq!(c.bytes_allocated(), n);
        let s1 = parent.slice(3, 9_001).unwrap();
        let s2 = s1.slice(5, 4_001).unwrap();
        let s3 = s2.slice(1, 999).unwrap();
        assert_eq!(s1.address(), parent.address() + 3);
        assert_eq!(s2.address(), parent.address() + 8);
        assert_eq!(s3.address(), parent.address() + 9);
        assert_eq!(s3.address() - s3.parent().address(), 9);
        assert_eq!(s3.parent().address(), parent.address());
        assert_eq!(s3.parent().len(), n);
        assert_eq!(s3.to_vec::<u8>().unwrap(), &data[9..9 + 999]);
        assert!(s3.slice(999, 1).is_err());
        assert!(s3.slice(500, 500).is_err());
        // Nested slices outlive every handle to their parent.
        drop(parent);
        drop(s1);
        assert_eq!(c.bytes_allocated(), n, "the allocation must stay alive");
        assert_eq!(s2.to_vec::<u8>().unwrap(), &data[8..8 + 4_001]);
        s3.copy_from_host(10, &[0xAB; 5]).unwrap();
        let mut expect = data[8..8 + 4_001].to_vec();
        expect[1 + 10..1 + 15].copy_from_slice(&[0xAB; 5]);
        assert_eq!(s2.to_vec::<u8>().unwrap(), expect);
        drop(s2);
        assert_eq!(c.bytes_allocated(), n);
        drop(s3);
        assert_eq!(c.bytes_allocated(), 0, "last slice frees the allocation");
    }

    fn writes_into_slices_match_host_oracle() {
        let c = ctx();
        let mut r = rng("writes_into_slices");
        let n = 50_001;
        let mut oracle = random_bytes(&mut r, n);
        let d = DeviceBuffer::from_slice(&c, &oracle).unwrap();
        for _ in 0..50 {
            let off = below(&mut r, n);
            let len = below(&mut r, n - off + 1);
            let s = d.slice(off, len).unwrap();
            let pos = below(&mut r, len + 1);
            let wlen = below(&mut r, len - pos + 1);
            let w = random_bytes(&mut r, wlen);
            s.copy_from_host(pos, &w).unwrap();
            oracle[off + pos..off + pos + wlen].copy_from_slice(&w);
        }
        assert_eq!(d.to_vec::<u8>().unwrap(), oracle);
    }

    fn every_range_error_names_sizes_and_changes_nothing() {
        let c = ctx();
        let mut r = rng("range_errors");
        let data = random_bytes(&mut r, 100);
        let d = DeviceBuffer::from_slice(&c, &data).unwrap();
        let s = d.slice(10, 50).unwrap();
        let check = |e: Error, what: &str| {
            let m = e.to_string();
            assert!(matches!(e, Error::OutOfBounds { .. }), "{m}");
            assert!(m.contains(what) && m.contains("50"), "{m}");
        };
        check(s.slice(40, 11).unwrap_err(), "slice");
        check(s.slice(51, 0).unwrap_err(), "slice");
        check(s.slice(usize::MAX, 2).unwrap_err(), "slice");
        check(s.copy_to_host(49, &mut [0u8; 2]).unwrap_err(), "copy_to_host");
        check(s.copy_to_host(45, &mut [0u8; 6]).unwrap_err(), "copy_to_host");
        check(s.copy_from_host(45, &[1u8; 6]).unwrap_err(), "copy_from_host");
        check(s.copy_from_host(usize::MAX, &[1u8; 6]).unwrap_err(), "copy_from_host");
        let src = DeviceBuffer::from_slice(&c, &[9u8; 20]).unwrap();
        check(s.copy_from_device(31, &src).unwrap_err(), "copy_from_device");
        let e = d.to_vec::<u64>().unwrap_err();
        assert!(e.to_string().contains("100 bytes"), "{e}");
        assert!(PrimitiveArray::<Int32Type>::try_from(d.to_host().unwrap()).is_ok());
        assert!(PrimitiveArray::<Int32Type>::try_from(d.slice(0, 99).unwrap().to_host().unwrap()).is_err());
        assert_eq!(d.to_vec::<u8>().unwrap(), data, "failed calls must not write");
    }

    fn read_only_buffers_refuse_writes() {
        let c = ctx();
        let d = DeviceBuffer::from_slice(&c, &[1u8, 2, 3, 4]).unwrap();
        let ro = d.read_only();
        assert!(!ro.is_mutable());
        assert!(d.is_mutable());
        assert_eq!(ro.address(), d.address());
        assert!(matches!(ro.copy_from_host(0, &[9]), Err(Error::ReadOnly(_))));
        assert!(matches!(ro.fill(0), Err(Error::ReadOnly(_))));
        assert!(matches!(ro.slice(1, 2).unwrap().copy_from_device(0, &d.slice(0, 1).unwrap()), Err(Error::ReadOnly(_))));
        assert!(!ro.slice(1, 2).unwrap().is_mutable());
        assert_eq!(ro.to_vec::<u8>().unwrap(), vec![1, 2, 3, 4]);
    }

    fn device_to_device_same_context_and_overlap() {
        let c = ctx();
        let mut r = rng("device_to_device");
        let n = 100_003;
        let data = random_bytes(&mut r, n);
        let a = DeviceBuffer::from_slice(&c, &data).unwrap();
        let b = c.allocate(n + 10).unwrap();
        b.fill(0x5A).unwrap();
        b.copy_from_device(7, &a).unwrap();
        let got = b.to_vec::<u8>().unwrap();
        assert_eq!(&got[7..7 + n], &data[..]);
        assert!(got[..7].iter().all(|&x| x == 0x5A));
        assert!(got[7 + n..].iter().all(|&x| x == 0x5A));
        // Overlapping copies within one allocation behave like memmove.
        for &(src_off, dst_off, len) in &[(0usize, 1usize, 50_000usize), (1, 0, 50_000), (10, 10, 100), (3, 4_000, 5_000)] {
            let mut oracle = data.clone();
            let d = DeviceBuffer::from_slice(&c, &data).unwrap();
            let src = d.slice(src_off, len).unwrap();
            d.copy_from_device(dst_off, &src).unwrap();
            oracle.copy_within(src_off..src_off + len, dst_off);
            assert_eq!(d.to_vec::<u8>().unwrap(), oracle, "overlap {src_off}->{dst_off} x{len}");
        }
    }

    fn cross_context_copies() {
        let p = ctx();
        let q = Context::new_dedicated(0).unwrap();
        assert!(q != p);
        assert!(!q.is_primary());
        let mut r = rng("cross_context_copies");
        let n = 1_000_003;
        let data = random_bytes(&mut r, n);
        let a = DeviceBuffer::from_slice(&p, &data).unwrap();
        let b = q.allocate(n).unwrap();
        b.copy_from_device(0, &a).unwrap();
        assert_eq!(b.to_vec::<u8>().unwrap(), data);
        assert!(b.equals(&a).unwrap());
        assert!(a.equals(&b).unwrap());
        let c2 = p.allocate(n - 1).unwrap();
        c2.copy_from_device(0, &b.slice(1, n - 1).unwrap()).unwrap();
        assert_eq!(c2.to_vec::<u8>().unwrap(), &data[1..]);
        b.copy_from_host(n / 2, &[data[n / 2] ^ 0xFF]).unwrap();
        assert!(!a.equals(&b).unwrap());
        drop((a, b, c2));
        assert_eq!(q.bytes_allocated(), 0);
    }

    fn peer_copies_between_two_devices() {
        let Some(d1) = second_ctx("peer_copies_between_two_devices") else { return };
        let d0 = ctx();
        let direct = d0.set_peer_access(&d1, true).unwrap();
        println!("peer access 0<->1: {direct}");
        let mut r = rng("peer_copies");
        let n = (64 << 20) + 5;
        let data = random_bytes(&mut r, n);
        let a = DeviceBuffer::from_slice(&d0, &data).unwrap();
        let b = d1.allocate(n).unwrap();
        b.copy_from_device(0, &a).unwrap();
        assert_eq!(b.context().ordinal(), 1);
        assert_eq!(b.to_vec::<u8>().unwrap(), data);
        assert!(a.equals(&b).unwrap());
        let back = d0.allocate(n - 3).unwrap();
        back.copy_from_device(0, &b.slice(3, n - 3).unwrap()).unwrap();
        assert_eq!(back.to_vec::<u8>().unwrap(), &data[3..]);
    }

    fn typed_round_trips() {
        let c = ctx();
        let mut r = rng("typed_round_trips");
        let i8s: Vec<i8> = (0..1001).map(|_| r.random()).collect();
        assert_eq!(DeviceBuffer::from_slice(&c, &i8s).unwrap().to_vec::<i8>().unwrap(), i8s);
        let u16s: Vec<u16> = (0..1001).map(|_| r.random()).collect();
        assert_eq!(DeviceBuffer::from_slice(&c, &u16s).unwrap().to_vec::<u16>().unwrap(), u16s);
        let i32s: Vec<i32> = (0..1001).map(|_| r.random()).collect();
        let d = DeviceBuffer::from_slice(&c, &i32s).unwrap();
        assert_eq!(d.len(), 4004);
        assert_eq!(d.to_vec::<i32>().unwrap(), i32s);
        let u64s: Vec<u64> = (0..1001).map(|_| r.random()).collect();
        assert_eq!(DeviceBuffer::from_slice(&c, &u64s).unwrap().to_vec::<u64>().unwrap(), u64s);
        let f32s: Vec<f32> = (0..1001).map(|_| r.random::<f32>() * 1e6 - 5e5).collect();
        let back = DeviceBuffer::from_slice(&c, &f32s).unwrap().to_vec::<f32>().unwrap();
        assert!(back.iter().zip(&f32s).all(|(a, b)| a.to_bits() == b.to_bits()));
        let f64s: Vec<f64> = (0..1001).map(|_| r.random::<f64>() - 0.5).collect();
        let back = DeviceBuffer::from_slice(&c, &f64s).unwrap().to_vec::<f64>().unwrap();
        assert!(back.iter().zip(&f64s).all(|(a, b)| a.to_bits() == b.to_bits()));
        type F16 = <Float16Type as ArrowPrimitiveType>::Native;
        let f16s: Vec<F16> = (0..1001).map(|_| F16::from_f32(r.random::<f32>())).collect();
        let back = DeviceBuffer::from_slice(&c, &f16s).unwrap().to_vec::<F16>().unwrap();
        assert!(back.iter().zip(&f16s).all(|(a, b)| a.to_bits() == b.to_bits()));
        // Typed reads of a slice at an odd byte offset.
        let s = d.slice(4 * 10, 4 * 5).unwrap();
        assert_eq!(s.to_vec::<i32>().unwrap(), &i32s[10..15]);
        let odd = DeviceBuffer::from_slice(&c, &i32s).unwrap();
        let odd = odd.slice(1, 8).unwrap();
        let mut expect = Vec::new();
        expect.extend_from_slice(&bytemuck_i32(&i32s)[1..9]);
        assert_eq!(odd.to_vec::<u8>().unwrap(), expect);
        assert_eq!(odd.to_vec::<u32>().unwrap().len(), 2);
    }

    fn to_bytes_and_hex() {
        let c = ctx();
        let mut r = rng("to_bytes_and_hex");
        let data = random_bytes(&mut r, 777);
        let d = DeviceBuffer::from_slice(&c, &data).unwrap();
        let b = Bytes::from(d.to_host().unwrap());
        assert_eq!(&b[..], &data[..]);
        assert_eq!(hex::encode(d.to_vec::<u8>().unwrap()), hex_of(&data));
        assert_eq!(hex::encode(d.slice(5, 3).unwrap().to_vec::<u8>().unwrap()), hex_of(&data[5..8]));
    }

    fn equals_on_device() {
        let c = ctx();
        let mut r = rng("equals_on_device");
        for &n in &[1usize, 15, 16, 17, 4096, 1_000_001, 64 << 20] {
            let data = random_bytes(&mut r, n);
            let a = DeviceBuffer::from_slice(&c, &data).unwrap();
            let b = DeviceBuffer::from_slice(&c, &data).unwrap();
            assert!(a.equals(&b).unwrap(), "equal buffers of {n} bytes");
            for pos in [0, n / 2, n - 1, below(&mut r, n)] {
                let mut changed = data.clone();
                changed[pos] ^= 1 << below(&mut r, 8);
                let e = DeviceBuffer::from_slice(&c, &changed).unwrap();
                assert!(!a.equals(&e).unwrap(), "{n} bytes differing at {pos}");
                assert!(!e.equals(&a).unwrap());
            }
            assert!(a.equals(&a.clone()).unwrap());
            if n > 1 {
                assert!(!a.equals(&a.slice(0, n - 1).unwrap()).unwrap(), "length differs");
            }
        }
        // Ranges whose alignments differ (byte-wise path) and ranges that share a
        // misalignment (vector path with a head and a tail).
        let n = 3_000_017;
        let data = random_bytes(&mut r, n + 64);
        let big = DeviceBuffer::from_slice(&c, &data).unwrap();
        let other = DeviceBuffer::from_slice(&c, &data).unwrap();
        for &(oa, ob) in &[(1usize, 2usize), (3, 3), (0, 5), (17, 33), (7, 7)] {
            let a = big.slice(oa, n).unwrap();
            let b = other.slice(ob, n).unwrap();
            assert_eq!(a.equals(&b).unwrap(), data[oa..oa + n] == data[ob..ob + n], "offsets {oa} {ob}");
            let b_same = other.slice(oa, n).unwrap();
            assert!(a.equals(&b_same).unwrap());
        }
        let x = DeviceBuffer::from_slice(&c, &data).unwrap();
        x.copy_from_host(n + 10, &[data[n + 10] ^ 0x80]).unwrap();
        assert!(!big.slice(7, n + 10).unwrap().equals(&x.slice(7, n + 10).unwrap()).unwrap());
        assert!(big.slice(7, n).unwrap().equals(&x.slice(7, n).unwrap()).unwrap());
    }

    fn host_buffer_basics() {
        let c = Context::new_dedicated(0).unwrap();
        let mut h = c.allocate_host(4097).unwrap();
        assert_eq!(c.host_bytes_allocated(), 4097);
        assert!(h.iter().all(|&b| b == 0), "allocate_host zero-fills");
        let mut r = rng("host_buffer_basics");
        let data = random_bytes(&mut r, 4097);
        h.copy_from_slice(&data);
        let dev_addr = h.device_address().unwrap();
        assert_ne!(dev_addr, 0);
        if c.properties().unified_addressing {
            assert_eq!(dev_addr, h.as_ptr() as u64, "UVA maps host pointers 1:1");
        }
        // Page-locked source and destination.
        let d = c.allocate(4097).unwrap();
        d.copy_from_host(0, &h).unwrap();
        let mut back = c.allocate_host(4097).unwrap();
        d.copy_to_host(0, &mut back).unwrap();
        assert_eq!(&back[..], &data[..]);
        drop((h, back, d));
        assert_eq!(c.host_bytes_allocated(), 0);
    }

    fn host_buffer_to_arrow_is_zero_copy_and_frees_with_last_owner() {
        let c = Context::new_dedicated(0).unwrap();
        let mut r = rng("arrow_zero_copy");
        let data = random_bytes(&mut r, 1 << 16);
        let mut h = c.allocate_host(data.len()).unwrap();
        h.copy_from_slice(&data);
        let ptr = h.as_ptr();
        let buf = Buffer::from(h);
        assert_eq!(buf.as_ptr(), ptr, "Arrow buffer must point at the page-locked memory");
        assert_eq!(buf.as_slice(), &data[..]);
        let sliced = buf.slice_with_length(100, 1000);
        assert_eq!(sliced.as_ptr(), ptr.wrapping_add(100));
        drop(buf);
        assert_eq!(c.host_bytes_allocated(), data.len(), "a slice still owns the memory");
        assert_eq!(sliced.as_slice(), &data[100..1100]);
        drop(sliced);
        assert_eq!(c.host_bytes_allocated(), 0, "freed with the last Arrow owner");

        let mut h = c.allocate_host(data.len()).unwrap();
        h.copy_from_slice(&data);
        let ptr = h.as_ptr();
        let bytes = Bytes::from(h);
        assert_eq!(bytes.as_ptr(), ptr, "Bytes must point at the page-locked memory");
        let clone = bytes.slice(10..20);
        assert_eq!(clone.as_ptr(), ptr.wrapping_add(10));
        drop(bytes);
        assert_eq!(c.host_bytes_allocated(), data.len());
        assert_eq!(&clone[..], &data[10..20]);
        drop(clone);
        assert_eq!(c.host_bytes_allocated(), 0, "freed with the last Bytes owner");
    }

    fn device_to_arrow() {
        let c = ctx();
        let mut r = rng("device_to_arrow");
        let v: Vec<f64> = (0..10_001).map(|_| r.random::<f64>()).collect();
        let d = DeviceBuffer::from_slice(&c, &v).unwrap();
        let a = PrimitiveArray::<Float64Type>::try_from(d.to_host().unwrap()).unwrap();
        assert_eq!(a.len(), v.len());
        assert_eq!(a.null_count(), 0);
        assert_eq!(a.values().as_ref(), &v[..]);
        let u: Vec<u64> = (0..333).map(|_| r.random()).collect();
        let a = UInt64Array::try_from(DeviceBuffer::from_slice(&c, &u).unwrap().slice(8, 8 * 300).unwrap().to_host().unwrap()).unwrap();
        assert_eq!(a.values().as_ref(), &u[1..301]);
        let bytes = random_bytes(&mut r, 99);
        let a = Int8Array::try_from(DeviceBuffer::from_slice(&c, &bytes).unwrap().to_host().unwrap()).unwrap();
        assert_eq!(a.values().iter().map(|&x| x as u8).collect::<Vec<_>>(), bytes);
        let b = Buffer::from(DeviceBuffer::from_slice(&c, &bytes).unwrap().to_host().unwrap());
        assert_eq!(b.as_slice(), &bytes[..]);
    }

    fn one_gib_round_trip() {
        let c = ctx();
        let n = 1usize << 30;
        let data = fast_random(n, 0x9E37_79B9_7F4A_7C15);
        let t = std::time::Instant::now();
        let d = DeviceBuffer::from_slice(&c, &data).unwrap();
        let h = d.slice(0, n).unwrap().to_host().unwrap();
        println!("1 GiB host->device->page-locked in {:?}", t.elapsed());
        assert!(h[..] == data[..], "1 GiB round trip differs");
        let d2 = c.allocate(n).unwrap();
        d2.copy_from_device(0, &d).unwrap();
        assert!(d2.equals(&d).unwrap());
        d2.copy_from_host(n - 1, &[data[n - 1] ^ 1]).unwrap();
        assert!(!d2.equals(&d).unwrap());
        let mut tail = vec![0u8; 4096];
        d.copy_to_host(n - 4096, &mut tail).unwrap();
        assert_eq!(&tail[..], &data[n - 4096..]);
    }

    fn eight_threads_copy_at_once() {
        let c = ctx();
        let per = 4 << 20;
        let shared = c.allocate(8 * per).unwrap();
        let mut r = rng("eight_threads");
        let seeds: Vec<u64> = (0..8).map(|_| r.random()).collect();
        std::thread::scope(|s| {
            for (t, &seed) in seeds.iter().enumerate() {
                let shared = shared.clone();
                let c = c.clone();
                s.spawn(move || {
                    for round in 0..10u64 {
                        let data = fast_random(per - t - 1, seed ^ round);
                        let mine = shared.slice(t * per, per - t - 1).unwrap();
                        mine.copy_from_host(0, &data).unwrap();
                        let own = DeviceBuffer::from_slice(&c, &data).unwrap();
                        assert!(own.equals(&mine).unwrap());
                        let other = c.allocate(data.len()).unwrap();
                        other.copy_from_device(0, &mine).unwrap();
                        let back = other.slice(0, data.len()).unwrap().to_host().unwrap();
                        assert!(back[..] == data[..], "thread {t} round {round}");
                    }
                });
            }
        });
        for (t, &seed) in seeds.iter().enumerate() {
            let expect = fast_random(per - t - 1, seed ^ 9);
            let got = shared.slice(t * per, per - t - 1).unwrap().to_vec::<u8>().unwrap();
            assert!(got == expect, "thread {t}'s final data");
        }
    }

    fn bytes_allocated_returns_to_start() {
        let c = Context::new_dedicated(0).unwrap();
        assert_eq!(c.bytes_allocated(), 0);
        let mut keep = Vec::new();
        let mut total = 0;
        for n in [1usize, 100, 4096, 1 << 20, 12_345] {
            keep.push(c.allocate(n).unwrap());
            total += n;
            assert_eq!(c.bytes_allocated(), total);
        }
        let slices: Vec<_> = keep.iter().map(|b| b.slice(0, b.len() / 2).unwrap()).collect();
        drop(keep);
        assert_eq!(c.bytes_allocated(), total, "slices keep allocations alive");
        drop(slices);
        assert_eq!(c.bytes_allocated(), 0);
        let _zero = c.allocate(0).unwrap();
        assert_eq!(c.bytes_allocated(), 0);
    }

    fn view_of_foreign_memory() {
        let c = ctx();
        let mut r = rng("view_of_foreign_memory");
        let data = random_bytes(&mut r, 4096);
        let backing = DeviceBuffer::from_slice(&c, &data).unwrap();
        struct Owner(#[allow(dead_code)] DeviceBuffer, Arc<AtomicBool>);
        impl Drop for Owner {
            fn drop(&mut self) {
                self.1.store(true, Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(AtomicBool::new(false));
        let addr = backing.address();
        let view = c.view(addr + 100, 1000, Owner(backing.clone(), dropped.clone())).unwrap();
        drop(backing);
        assert_eq!(view.address(), addr + 100, "a view is zero-copy");
        assert!(!view.is_owned());
        assert_eq!(view.to_vec::<u8>().unwrap(), &data[100..1100]);
        let s = view.slice(10, 10).unwrap();
        drop(view);
        assert!(!dropped.load(Ordering::SeqCst), "slices keep the owner alive");
        assert_eq!(s.to_vec::<u8>().unwrap(), &data[110..120]);
        drop(s);
        assert!(dropped.load(Ordering::SeqCst), "owner dropped with the last view");

        let b = c.allocate(256).unwrap();
        let e = c.view(b.address() + 200, 100, ()).unwrap_err();
        assert!(matches!(e, Error::OutOfBounds { .. }), "{e}");
        let host = [0u8; 64];
        assert!(c.view(host.as_ptr() as u64, 64, ()).is_err(), "host memory is not a device range");
        let h = c.allocate_host(64).unwrap();
        assert!(c.view(h.as_ptr() as u64, 64, ()).is_err(), "page-locked memory is not device memory");
        assert!(c.view(0xdead_0000, 16, ()).is_err());
        assert!(c.view(0, 0, ()).unwrap().is_empty());
    }

    fn out_of_memory_is_an_error_and_the_process_carries_on() {
        let c = ctx();
        let e = c.allocate(c.properties().total_memory * 2).unwrap_err();
        println!("{e}");
        match &e {
            Error::OutOfMemory { requested, total, .. } => {
                assert_eq!(*requested, c.properties().total_memory * 2);
                assert_eq!(*total, c.properties().total_memory);
            }
            other => panic!("expected OutOfMemory, got {other}"),
        }
        let ok = DeviceBuffer::from_slice(&c, &[1u8, 2, 3]).unwrap();
        assert_eq!(ok.to_vec::<u8>().unwrap(), vec![1, 2, 3]);
    }

    fn fill_sets_every_byte() {
        let c = ctx();
        let mut r = rng("fill");
        let data = random_bytes(&mut r, 10_000);
        let d = DeviceBuffer::from_slice(&c, &data).unwrap();
        d.slice(33, 5_000).unwrap().fill(0xC3).unwrap();
        let mut expect = data.clone();
        expect[33..5_033].fill(0xC3);
        assert_eq!(d.to_vec::<u8>().unwrap(), expect);
        let z = c.allocate(999).unwrap();
        z.fill(0).unwrap();
        assert!(z.to_vec::<u8>().unwrap().iter().all(|&b| b == 0));
    }

    fn types_are_send_and_sync() {
        assert_send_sync::<DeviceBuffer>();
        assert_send_sync::<HostBuffer>();
        assert_send_sync::<Context>();
        let c = ctx();
        let d = DeviceBuffer::from_slice(&c, &[1u8, 2, 3]).unwrap();
        let h = std::thread::spawn(move || d.to_vec::<u8>().unwrap()).join().unwrap();
        assert_eq!(h, vec![1, 2, 3]);
    }
}

fn bytemuck_i32(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

gpu_test! {
    fn streams_and_events_order_work() {
        use devbuf::cuda::{Event, EventFlags, Stream};
        let c = ctx();
        let a = Stream::new(&c).unwrap();
        let b = Stream::new(&c).unwrap();
        let e = Event::new(&c, EventFlags::default()).unwrap();
        e.record(&a).unwrap();
        b.wait_event(&e).unwrap();
        b.synchronize().unwrap();
        assert!(e.is_complete().unwrap());
        assert!(a.is_complete().unwrap());
        let t0 = Event::new(&c, EventFlags { timing: true, ..Default::default() }).unwrap();
        let t1 = Event::new(&c, EventFlags { timing: true, ..Default::default() }).unwrap();
        t0.record(&a).unwrap();
        t1.record(&a).unwrap();
        t1.synchronize().unwrap();
        assert!(t0.elapsed_ms(&t1).unwrap() >= 0.0);
        assert!(e.elapsed_ms(&t1).is_err(), "no timing on a default event");
        assert!(Event::new(&c, EventFlags { timing: true, interprocess: true, ..Default::default() }).is_err());
        let ipc = Event::new(&c, EventFlags { interprocess: true, ..Default::default() }).unwrap();
        ipc.record(None).unwrap();
        ipc.synchronize().unwrap();
        let (_, ms) = c.time_ms(|| c.synchronize()).unwrap();
        assert!(ms >= 0.0);
    }
}

gpu_test! {
    /// Copies between two views of the same memory that devbuf sees as different
    /// allocations (`Context::view`) overlap like any other: memmove semantics.
    fn overlapping_copies_between_distinct_views_are_memmove() {
        let c = ctx();
        let host: Vec<u8> = (0u8..64).collect();
        let a = DeviceBuffer::from_slice(&c, &host).unwrap();
        let front = c.view(a.address(), 32, a.clone()).unwrap();
        a.slice(8, 32).unwrap().copy_from_device(0, &front).unwrap();
        let mut want = host.clone();
        want.copy_within(0..32, 8);
        assert_eq!(a.to_vec::<u8>().unwrap(), want);
        // And backwards.
        let back = c.view(a.address() + 8, 32, a.clone()).unwrap();
        a.slice(2, 32).unwrap().copy_from_device(0, &back).unwrap();
        want.copy_within(8..40, 2);
        assert_eq!(a.to_vec::<u8>().unwrap(), want);
        assert_eq!(hex::encode(a.slice(0, 3).unwrap().to_vec::<u8>().unwrap()), hex_of(&want[..3]));
    }
}
