//! IPC on the GPU: memory and event handles across processes, the same-process path,
//! the device reader/writer, and Arrow record batches in device memory.
//!
//! Cross-process cases re-run this binary as the other process (`ipc::child_entry`
//! with `DEVBUF_IPC_GPU_CHILD=<role>`; see tests/common/peer.rs). Data is random and
//! reproducible from a seed the parent passes; the child regenerates the expected
//! bytes and reports fingerprints, and the parent checks them.

use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Array, Int32Array, RecordBatch, StringArray};
use devbuf::__test::{StreamGate, copy_on_stream, open_mapping_count};
use devbuf::Error;
use devbuf::arrow::{Batch, DeviceArray};
use devbuf::cuda::{
    Context, DeviceBuffer, DeviceBufferReader, DeviceBufferWriter, Event, EventFlags, Stream,
};
use devbuf::ipc::IpcEventHandle;
use devbuf::ipc::IpcMemHandle;

use crate::batches::{Rng, mixed_batch};
use crate::common::*;
use crate::peer::{Peer, env, fnv, say, wait_line};

const ROLE: &str = "DEVBUF_IPC_GPU_CHILD";
const CHILD: &str = "ipc::child_entry";

fn spawn(role: &str, env: &[(&str, String)]) -> Peer {
    Peer::spawn(CHILD, ROLE, role, env)
}

/// `n` reproducible random bytes (never all zero).
fn data(seed: u64, n: usize) -> Vec<u8> {
    Rng::new(seed).bytes(n)
}

fn hexs(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// A device whose every buffer lies inside `outer` (zero-copy check by address).
fn within(b: &DeviceBuffer, outer: &DeviceBuffer) -> bool {
    b.is_empty()
        || (b.address() >= outer.address()
            && b.address() + b.len() as u64 <= outer.address() + outer.len() as u64)
}

/// The child side of every cross-process test.
#[test]
#[ignore = "child role of the cross-process IPC tests (they run it)"]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let c = ctx();
    match role.as_str() {
        "open_slices" => {
            // HANDLES: comma-separated handles of slices of one allocation whose whole
            // contents are data(SEED, N); OFFSETS: their offsets. Report each slice's
            // fingerprint, check that they share one mapping, then write !data into
            // slice WRITE and report; close everything and report the mapping count.
            let seed: u64 = env("SEED").parse().unwrap();
            let n: usize = env("N").parse().unwrap();
            let expected = data(seed, n);
            let handles: Vec<IpcMemHandle> = env("HANDLES")
                .split(',')
                .map(|h| h.parse::<IpcMemHandle>().unwrap())
                .collect();
            let opened: Vec<DeviceBuffer> = handles.iter().map(|h| h.open().unwrap()).collect();
            for (i, (h, b)) in handles.iter().zip(&opened).enumerate() {
                let host = b.to_vec::<u8>().unwrap();
                let want = &expected[h.offset()..h.offset() + h.len()];
                say(
                    &format!("slice{i}"),
                    format!("{} {}", b.len(), host == want),
                );
            }
            let nonempty: Vec<(&IpcMemHandle, &DeviceBuffer)> = handles
                .iter()
                .zip(&opened)
                .filter(|(h, _)| !h.is_empty())
                .collect();
            let (h0, b0) = nonempty[0];
            let shared = nonempty.iter().all(|(h, b)| {
                b.address() as i128 - b0.address() as i128
                    == h.offset() as i128 - h0.offset() as i128
            });
            say("shared", format!("{shared} {}", open_mapping_count()));
            println!(
                "mapped allocation: {} bytes (exported: {n})",
                b0.parent().len()
            );
            let w: usize = env("WRITE").parse().unwrap();
            let (h, b) = (&handles[w], &opened[w]);
            let inverted: Vec<u8> = expected[h.offset()..h.offset() + h.len()]
                .iter()
                .map(|x| !x)
                .collect();
            b.copy_from_host(0, &inverted).unwrap();
            b.context().synchronize().unwrap();
            say("written", "");
            let clone = opened[w].slice(1, 1).unwrap();
            drop(opened);
            say("after_drop_with_clone", open_mapping_count());
            drop(clone);
            say("after_drop_all", open_mapping_count());
        }
        "open_compare_on_device" => {
            // One big handle: compare on the device against the regenerated data.
            let seed: u64 = env("SEED").parse().unwrap();
            let n: usize = env("N").parse().unwrap();
            let h = env("HANDLE").parse::<IpcMemHandle>().unwrap();
            let mut expected = data(seed, n);
            expected.drain(..h.offset());
            expected.truncate(h.len());
            let mine = DeviceBuffer::from_slice(&c, &expected).unwrap();
            drop(expected);
            let b = c.open_ipc(&h).unwrap();
            say("equal", format!("{} {}", b.len(), b.equals(&mine).unwrap()));
        }
        "open_many" => {
            let handles: Vec<IpcMemHandle> = env("HANDLES")
                .split(',')
                .map(|h| h.parse::<IpcMemHandle>().unwrap())
                .collect();
            let prints: Vec<u64> = env("PRINTS")
                .split(',')
                .map(|p| p.parse().unwrap())
                .collect();
            let opened: Vec<DeviceBuffer> = handles.iter().map(|h| h.open().unwrap()).collect();
            let ok = opened
                .iter()
                .zip(&prints)
                .filter(|(b, p)| fnv(&b.to_vec::<u8>().unwrap()) == **p)
                .count();
            say("many", format!("{ok} {}", open_mapping_count()));
            drop(opened);
            say("closed", open_mapping_count());
        }
        "open_expect_error" => {
            let r = match env("HANDLE").parse::<IpcMemHandle>() {
                Ok(h) => c.open_ipc(&h).map(|b| b.len()),
                Err(e) => Err(e),
            };
            match r {
                Ok(n) => say("error", format!("NONE: opened {n} bytes")),
                Err(e) => say(
                    "error",
                    format!("{} | {}", kind(&e), e.to_string().replace('\n', " ")),
                ),
            }
            say("mappings", open_mapping_count());
        }
        "export_and_exit" => {
            let b = c.allocate(64 << 20).unwrap();
            b.fill(7).unwrap();
            say("handle", b.export_ipc().unwrap().to_string());
        }
        "export_free_wait" => {
            let b = c.allocate(64 << 20).unwrap();
            b.fill(7).unwrap();
            say("handle", b.export_ipc().unwrap().to_string());
            drop(b);
            c.synchronize().unwrap();
            say("freed", "");
            wait_line();
        }
        "event_consumer" => {
            let seed: u64 = env("SEED").parse().unwrap();
            let n: usize = env("N").parse().unwrap();
            let dst = env("HANDLE")
                .parse::<IpcMemHandle>()
                .unwrap()
                .open()
                .unwrap();
            let event = c
                .open_ipc_event(&env("EVENT").parse::<IpcEventHandle>().unwrap())
                .unwrap();
            assert!(event.flags().interprocess);
            let mine = Stream::new(&c).unwrap();
            mine.wait_event(&event).unwrap();
            let after = Event::new(&c, EventFlags::default()).unwrap();
            after.record(&mine).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            // The producer's stream is held: our stream waits on the device, and the
            // data is not there yet.
            let pending = !after.is_complete().unwrap();
            let still_zero = dst.to_vec::<u8>().unwrap().iter().all(|&x| x == 0);
            say("pending", format!("{pending} {still_zero}"));
            wait_line();
            after.synchronize().unwrap();
            let got = dst.to_vec::<u8>().unwrap();
            say("after", format!("{}", got == data(seed, n)));
        }
        "arrow_consumer" => {
            let seed: u64 = env("SEED").parse().unwrap();
            let rows: usize = env("ROWS").parse().unwrap();
            let schema = schema_of(&unhex(&env("SCHEMA"))).unwrap();
            let message = env("HANDLE")
                .parse::<IpcMemHandle>()
                .unwrap()
                .open()
                .unwrap();
            let batch = read_device(&message, schema).unwrap();
            let zero_copy = batch
                .columns()
                .iter()
                .flat_map(|c| c.all_buffers())
                .all(|b| within(b, &message));
            let host = batch.to_host().unwrap();
            say(
                "arrow",
                format!(
                    "{} {} {}",
                    host.num_rows(),
                    host == mixed_batch(seed, rows),
                    zero_copy
                ),
            );
        }
        other => panic!("unknown child role {other}"),
    }
}

fn kind(e: &Error) -> &'static str {
    match e {
        Error::Driver { .. } => "Driver",
        Error::InvalidArgument(_) => "InvalidArgument",
        Error::OutOfBounds { .. } => "OutOfBounds",
        Error::Malformed(_) => "Malformed",
        Error::CudaUnavailable { .. } => "CudaUnavailable",
        _ => "Other",
    }
}

gpu_test! {
    /// Slices at odd offsets (and the whole buffer, a last byte, an empty slice) open
    /// in another process as exactly those bytes, share one mapping there, writes
    /// through a slice land exactly in the exporter's range, and the mapping is closed
    /// when the last clone drops.
    fn ipc_slices_at_odd_offsets_cross_process() {
        let c = ctx();
        let (seed, n) = (11u64, (1 << 20) + 7);
        let host = data(seed, n);
        let buf = DeviceBuffer::from_slice(&c, &host).unwrap();
        let ranges = [(0, n), (3, 1000), (4097, 65_535), (n - 1, 1), (9, 0), (123_457, 500_001)];
        let handles: Vec<IpcMemHandle> = ranges
            .iter()
            .map(|&(o, l)| buf.slice(o, l).unwrap().export_ipc().unwrap())
            .collect();
        for (h, &(o, l)) in handles.iter().zip(&ranges) {
            if l > 0 {
                assert_eq!((h.offset(), h.len(), h.allocation_size()), (o, l, Some(n)));
            } else {
                assert!(h.is_empty());
            }
            assert_eq!(h.device_uuid(), Some(c.properties().uuid));
        }
        let write = 2;
        let list = handles.iter().map(|h| h.to_string()).collect::<Vec<_>>().join(",");
        let mut p = spawn("open_slices", &[
            ("SEED", seed.to_string()),
            ("N", n.to_string()),
            ("HANDLES", list),
            ("WRITE", write.to_string()),
        ]);
        for (i, &(_, l)) in ranges.iter().enumerate() {
            assert_eq!(p.expect(&format!("slice{i}")), format!("{l} true"), "range {i}");
        }
        assert_eq!(p.expect("shared"), "true 1");
        p.expect("written");
        let now = buf.to_vec::<u8>().unwrap();
        let (o, l) = ranges[write];
        for (i, (a, b)) in now.iter().zip(&host).enumerate() {
            if (o..o + l).contains(&i) {
                assert_eq!(*a, !*b, "byte {i} inside the written slice");
            } else {
                assert_eq!(a, b, "byte {i} outside the written slice changed");
            }
        }
        assert_eq!(p.expect("after_drop_with_clone"), "1");
        assert_eq!(p.expect("after_drop_all"), "0");
        p.finish();
    }

    /// 1 GiB exported at an odd offset, compared on the device in the other process.
    fn ipc_one_gib_cross_process() {
        let c = ctx();
        let (seed, n) = (12u64, 1usize << 30);
        let host = data(seed, n);
        let buf = DeviceBuffer::from_slice(&c, &host).unwrap();
        drop(host);
        let (o, l) = (12_345, n - 12_345 - 1);
        let h = buf.slice(o, l).unwrap().export_ipc().unwrap();
        let mut p = spawn("open_compare_on_device", &[
            ("SEED", seed.to_string()),
            ("N", n.to_string()),
            ("HANDLE", h.to_string()),
        ]);
        assert_eq!(p.expect("equal"), format!("{l} true"));
        p.finish();
    }

    /// 64 buffers of random sizes, random slices, all open at once in the other process.
    fn ipc_many_handles_at_once() {
        let c = ctx();
        let mut r = rng("ipc_many_handles_at_once");
        let mut keep = Vec::new();
        let (mut handles, mut prints) = (Vec::new(), Vec::new());
        for _ in 0..64 {
            let n = 1 + below(&mut r, 1 << 20);
            let bytes = random_bytes(&mut r, n);
            let b = DeviceBuffer::from_slice(&c, &bytes).unwrap();
            let o = below(&mut r, n);
            let l = 1 + below(&mut r, n - o);
            handles.push(b.slice(o, l).unwrap().export_ipc().unwrap().to_string());
            prints.push(fnv(&bytes[o..o + l]).to_string());
            keep.push(b);
        }
        let mut p = spawn("open_many", &[
            ("HANDLES", handles.join(",")),
            ("PRINTS", prints.join(",")),
        ]);
        assert_eq!(p.expect("many"), "64 64");
        assert_eq!(p.expect("closed"), "0");
        p.finish();
    }

}

// Holds a stream with a blocked host function: runs alone (see common.rs).
gpu_test_exclusive! {
    /// The consumer's stream waits, on the device, for the producer's copy recorded
    /// by an IPC event; then it sees the data.
    fn ipc_event_wait_is_device_side() {
        let c = ctx();
        let (seed, n) = (13u64, (4 << 20) + 3);
        let src = DeviceBuffer::from_slice(&c, &data(seed, n)).unwrap();
        let dst = c.allocate(n).unwrap();
        dst.fill(0).unwrap();
        let stream = Stream::new(&c).unwrap();
        let done = Event::new(&c, EventFlags { interprocess: true, ..Default::default() }).unwrap();
        // Export before the stream is held: while it is, other tests' device-wide
        // synchronising calls (cuMemFree, cuIpcCloseMemHandle) stall, and one of them may
        // hold the IPC registry that exporting needs.
        let eh = done.export_ipc().unwrap();
        let dst_handle = dst.export_ipc().unwrap().to_string();
        assert_eq!(IpcEventHandle::try_from(&Vec::from(&eh)[..]).unwrap(), eh);
        let gate = StreamGate::block(&stream).unwrap();
        copy_on_stream(&stream, &dst, &src).unwrap();
        done.record(&stream).unwrap();
        let mut p = spawn("event_consumer", &[
            ("SEED", seed.to_string()),
            ("N", n.to_string()),
            ("HANDLE", dst_handle),
            ("EVENT", eh.to_string()),
        ]);
        assert_eq!(p.expect("pending"), "true true");
        gate.open();
        p.send("go");
        assert_eq!(p.expect("after"), "true");
        p.finish();
        stream.synchronize().unwrap();
        // Events without the interprocess flag cannot be exported; opening our own
        // event handle is refused with a clear message.
        let plain = Event::new(&c, EventFlags::default()).unwrap();
        assert!(matches!(plain.export_ipc(), Err(Error::InvalidArgument(_))));
        let e = c.open_ipc_event(&eh).unwrap_err().to_string();
        assert!(e.contains("exported by this process"), "{e}");
    }
}

gpu_test! {

    /// Bad handles give clear errors in the consumer, and leave nothing mapped.
    fn ipc_bad_handles_are_clear_errors() {
        let c = ctx();
        let buf = DeviceBuffer::from_slice(&c, &data(14, 4096)).unwrap();
        let good = buf.export_ipc().unwrap();
        let raw = good.raw_cuda();
        let uuid = c.properties().uuid;
        let mut other = uuid;
        other[0] ^= 0xff;
        let cases: Vec<(String, &str, &str)> = vec![
            // Random bytes as a CUDA handle: the driver's error, explained.
            (
                IpcMemHandle::from_raw_cuda(&data(15, 64), 0, 16, None).unwrap().to_string(),
                "Driver",
                "could not map the IPC memory handle",
            ),
            // A handle of another device: both UUIDs named.
            (
                IpcMemHandle::from_parts(raw, 0, 16, 4096, Some((other, 5)), false, 1, 1)
                    .unwrap()
                    .to_string(),
                "InvalidArgument",
                "ordinal 5 in the exporting process",
            ),
            // A range past the end of the real allocation (size unknown in the handle).
            (
                IpcMemHandle::from_raw_cuda(&raw, 1 << 40, 200, Some(uuid)).unwrap().to_string(),
                "OutOfBounds",
                "exceeds the size",
            ),
            // A larger allocation size than the real one recorded.
            (
                IpcMemHandle::from_parts(raw, 0, 16, 1 << 40, Some((uuid, 0)), false, 1, 1)
                    .unwrap()
                    .to_string(),
                "InvalidArgument",
                "stale or was altered",
            ),
            ("0badc0de".into(), "Malformed", "truncated"),
        ];
        for (text, want_kind, want_msg) in cases {
            let mut p = spawn("open_expect_error", &[("HANDLE", text)]);
            let msg = p.expect("error");
            assert!(msg.starts_with(want_kind), "expected {want_kind}: {msg}");
            assert!(msg.contains(want_msg), "expected {want_msg:?} in {msg}");
            if want_msg.contains("ordinal") {
                // Both devices are named.
                assert!(msg.contains(&c.properties().uuid_string()), "{msg}");
                assert!(msg.contains(&format!("GPU-{:02x}", other[0])), "{msg}");
            }
            assert_eq!(p.expect("mappings"), "0");
            p.finish();
        }
        // And the good handle still opens in another process afterwards.
        let mut p = spawn("open_many", &[
            ("HANDLES", good.to_string()),
            ("PRINTS", fnv(&data(14, 4096)).to_string()),
        ]);
        assert_eq!(p.expect("many"), "1 1");
        p.finish();
    }

    /// The exporter exited, or freed the memory, before the consumer opened: an error
    /// that says what probably happened.
    fn ipc_exporter_gone_is_a_clear_error() {
        let c = ctx();
        let mut p = spawn("export_and_exit", &[]);
        let h = p.expect("handle").parse::<IpcMemHandle>().unwrap();
        p.finish();
        let e = c.open_ipc(&h).unwrap_err();
        println!("exporter exited: {e}");
        assert!(matches!(e, Error::Driver { .. }), "{e}");
        assert!(e.to_string().contains("freed the memory or exited"), "{e}");
        assert_eq!(open_mapping_count(), 0);

        let mut p = spawn("export_free_wait", &[]);
        let h = p.expect("handle").parse::<IpcMemHandle>().unwrap();
        p.expect("freed");
        let r = c.open_ipc(&h);
        p.send("done");
        p.finish();
        let e = r.map(|b| b.len()).unwrap_err();
        println!("exporter freed: {e}");
        assert!(e.to_string().contains("freed the memory or exited"), "{e}");
    }

    /// In the exporting process, opening returns a view of the original allocation:
    /// pointer-equal, no new memory; dead once the allocation is freed. Exporting does
    /// not leak.
    fn ipc_same_process_open_is_a_pointer_equal_view() {
        let c = Context::new_dedicated(0).unwrap();
        let base = c.bytes_allocated();
        let buf = DeviceBuffer::from_slice(&c, &data(16, 10_007)).unwrap();
        let s = buf.slice(13, 5000).unwrap();
        let h = s.export_ipc().unwrap();
        assert!(h.is_from_this_process());
        let v = c.open_ipc(&h).unwrap();
        assert_eq!(v.address(), s.address());
        assert_eq!(v.len(), 5000);
        assert!(v.context() == &c);
        assert_eq!(c.bytes_allocated(), base + 10_007);
        assert_eq!(open_mapping_count(), 0, "no IPC mapping in the exporting process");
        // The primary context of the same device gets the same view.
        let v2 = ctx().open_ipc(&h).unwrap();
        assert_eq!(v2.address(), s.address());
        // Read-only exports open read-only.
        let ro = buf.read_only().slice(1, 2).unwrap().export_ipc().unwrap();
        assert!(ro.is_read_only());
        let rv = c.open_ipc(&ro).unwrap();
        assert!(!rv.is_mutable());
        assert!(matches!(rv.copy_from_host(0, &[1]), Err(Error::ReadOnly(_))));
        // The view keeps the allocation alive after the original drops.
        drop((buf, s));
        assert_eq!(v.to_vec::<u8>().unwrap(), data(16, 10_007)[13..5013].to_vec());
        drop((v, v2, rv));
        assert_eq!(c.bytes_allocated(), base, "exporting must not leak");
        // Now the handle is dead.
        let e = c.open_ipc(&h).unwrap_err().to_string();
        assert!(e.contains("has been freed"), "{e}");
        // Zero-length buffers export as the empty handle and open as empty buffers.
        let empty = c.allocate(0).unwrap().export_ipc().unwrap();
        assert!(empty.is_empty());
        assert!(c.open_ipc(&empty).unwrap().is_empty());
        let end = DeviceBuffer::from_slice(&c, &[1u8, 2, 3]).unwrap().slice(3, 0).unwrap();
        assert!(c.open_ipc(&end.export_ipc().unwrap()).unwrap().is_empty());
    }

    /// Views of foreign memory: exportable when the driver says it is cuMemAlloc memory.
    fn ipc_export_of_foreign_views() {
        let c = ctx();
        let owner = DeviceBuffer::from_slice(&c, &data(17, 8192)).unwrap();
        let view = c.view(owner.address() + 100, 1000, owner.clone()).unwrap();
        let h = view.slice(5, 10).unwrap().export_ipc().unwrap();
        // Offsets are relative to the driver's allocation (owner), not the view.
        assert_eq!((h.offset(), h.len(), h.allocation_size()), (105, 10, Some(8192)));
        let v = c.open_ipc(&h).unwrap();
        assert_eq!(v.address(), owner.address() + 105);
        // A re-export of the opened view names the same memory.
        let again = v.export_ipc().unwrap();
        assert_eq!(again.raw_cuda(), h.raw_cuda());
        assert_eq!((again.offset(), again.len()), (105, 10));
        // Exporting the owner itself reuses the same CUDA handle.
        assert_eq!(owner.export_ipc().unwrap().raw_cuda(), h.raw_cuda());
    }

    fn io_writer_gathers_small_writes_and_refuses_past_the_end() {
        let c = ctx();
        let mut r = rng("io_writer");
        let n = (3 << 20) + 11;
        let buf = c.allocate(n).unwrap();
        buf.fill(0).unwrap();
        let mut w = DeviceBufferWriter::with_capacity(buf.clone(), 64 << 10).unwrap();
        let mut host = vec![0u8; n];
        let mut pos = 0;
        while pos < n {
            let k = [1, 7, 256, 4096, 100_000, 200_000][below(&mut r, 6)].min(n - pos);
            let piece = random_bytes(&mut r, k);
            w.write_all(&piece).unwrap();
            host[pos..pos + k].copy_from_slice(&piece);
            pos += k;
        }
        assert!(w.write_all(&[1]).is_err(), "writing past the end must fail");
        let e = w.write(&[1, 2]).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WriteZero);
        // Seek back, overwrite, flush.
        w.seek(SeekFrom::Start(5)).unwrap();
        w.write_all(&[0xee; 3]).unwrap();
        host[5..8].fill(0xee);
        assert!(w.seek(SeekFrom::End(1)).is_err());
        w.flush().unwrap();
        assert_eq!(w.buffered(), 0);
        let back = w.into_inner().unwrap();
        assert_eq!(back.address(), buf.address());
        assert_eq!(buf.to_vec::<u8>().unwrap(), host);
        // Drop flushes.
        {
            let mut w = DeviceBufferWriter::new(buf.slice(1, 10).unwrap()).unwrap();
            w.write_all(b"dropflush!").unwrap();
        }
        assert_eq!(buf.slice(1, 10).unwrap().to_host().unwrap().to_vec(), b"dropflush!".to_vec());
        assert!(DeviceBufferWriter::new(buf.read_only()).is_err());
    }

    fn io_reader_reads_seeks_and_slices_zero_copy() {
        let c = ctx();
        let host = data(18, 100_003);
        let buf = DeviceBuffer::from_slice(&c, &host).unwrap();
        let mut r = DeviceBufferReader::new(buf.clone());
        let mut head = vec![0u8; 777];
        r.read_exact(&mut head).unwrap();
        assert_eq!(head, &host[..777]);
        let s = r.read_buffer(1000).unwrap();
        assert_eq!(s.address(), buf.address() + 777);
        assert_eq!(s.to_vec::<u8>().unwrap(), &host[777..1777]);
        assert_eq!(r.position(), 1777);
        r.seek(SeekFrom::End(-3)).unwrap();
        let rest = r.read_buffer(10).unwrap();
        assert_eq!(rest.len(), 3);
        assert_eq!(r.read_buffer(10).unwrap().len(), 0);
        r.seek(SeekFrom::Start(200_000)).unwrap();
        assert_eq!(r.read(&mut [0u8; 4]).unwrap(), 0);
        // Past the end, read_buffer is empty too (it was an out-of-bounds error).
        let past = r.read_buffer(10).unwrap();
        assert_eq!((past.len(), past.address()), (0, buf.address() + 100_003));
        assert_eq!(r.position(), 200_000);
        assert!(r.seek(SeekFrom::Current(-300_000)).is_err());
        r.seek(SeekFrom::Start(0)).unwrap();
        let mut all = Vec::new();
        BufReader::new(r).read_to_end(&mut all).unwrap();
        assert_eq!(all, host);
    }

    /// Arrow IPC in device memory: every column kind, sliced batches, buffers are
    /// zero-copy slices of the message, the device bytes equal the host encoding.
    fn arrow_record_batches_on_the_device() {
        let c = ctx();
        for (seed, rows) in [(1u64, 0usize), (2, 1), (3, 1000)] {
            let b = mixed_batch(seed, rows);
            let message = to_device_message(b.clone(), &c).unwrap();
            assert_eq!(message.to_vec::<u8>().unwrap(), serialize_to_vec(&b).unwrap());
            let d = read_device(&message, b.schema()).unwrap();
            assert_eq!(d.num_rows(), rows);
            assert_eq!(d.columns().len(), b.num_columns());
            for col in d.columns() {
                for x in col.all_buffers() {
                    assert!(within(x, &message), "{:?} is not a slice of the message", col.data_type());
                }
            }
            assert_eq!(d.to_host().unwrap(), b);
            // Column by column (one copy per buffer) too.
            for (i, col) in d.columns().iter().enumerate() {
                assert_eq!(col.to_host().unwrap().as_ref(), b.column(i).as_ref());
            }
            let s = b.slice(rows / 3, rows / 2);
            let m = to_device_message(s.clone(), &c).unwrap();
            assert_eq!(read_device(&m, s.schema()).unwrap().to_host().unwrap(), s);
        }
        // The device path and the host path read the same bytes the same way.
        let b = mixed_batch(4, 300);
        let bytes = serialize_to_vec(&b).unwrap();
        let on_dev = DeviceBuffer::from_slice(&c, &bytes).unwrap();
        let host = read_host(&arrow_buffer::Buffer::from_vec(bytes), b.schema()).unwrap();
        assert_eq!(read_device(&on_dev, b.schema()).unwrap().to_host().unwrap(), host);
        // Malformed device messages are errors.
        let bad = DeviceBuffer::from_slice(&c, &[0xffu8, 0xff, 0xff, 0xff, 0x40, 0, 0, 0]).unwrap();
        assert!(matches!(read_device(&bad, b.schema()), Err(Error::Malformed(_))));
    }

    fn arrow_device_arrays_from_and_to_host() {
        let c = ctx();
        let b = mixed_batch(5, 257);
        for col in b.columns() {
            let d = DeviceArray::from_host(col.as_ref(), &c).unwrap();
            assert_eq!(d.len(), col.len());
            assert_eq!(d.data_type(), col.data_type());
            assert_eq!(d.to_host().unwrap().as_ref(), col.as_ref());
            let sliced = col.slice(3, 100);
            let ds = DeviceArray::from_host(sliced.as_ref(), &c).unwrap();
            assert_eq!(ds.to_host().unwrap().as_ref(), sliced.as_ref());
        }
        // Structure is checked.
        let values = DeviceBuffer::from_slice(&c, &[1i32, 2, 3]).unwrap();
        assert!(DeviceArray::try_new(arrow_schema::DataType::Int32, 3, 0, 0, None, vec![values.clone()], vec![], None).is_ok());
        assert!(DeviceArray::try_new(arrow_schema::DataType::Int32, 4, 0, 0, None, vec![values.clone()], vec![], None).is_err());
        assert!(DeviceArray::try_new(arrow_schema::DataType::Int32, 3, 1, 0, None, vec![values], vec![], None).is_err());
        let small = Int32Array::from(vec![7, 8]);
        let strings = StringArray::from(vec!["x", "yz"]);
        let rb = RecordBatch::try_from_iter([
            ("a", Arc::new(small) as _),
            ("b", Arc::new(strings) as _),
        ]).unwrap();
        let m = to_device_message(rb.clone(), &c).unwrap();
        let d = read_device(&m, rb.schema()).unwrap();
        assert_eq!(d.column_by_name("b").unwrap().len(), 2);
        assert!(d.columns().get(2).is_none());
    }

    /// The Arrow flow across processes: serialize on the device, export, read in the
    /// other process zero-copy, compare with the expected batch.
    fn arrow_batch_cross_process() {
        let c = ctx();
        let (seed, rows) = (21u64, 5000usize);
        let b = mixed_batch(seed, rows);
        let message = to_device_message(b.clone(), &c).unwrap();
        let mut p = spawn("arrow_consumer", &[
            ("SEED", seed.to_string()),
            ("ROWS", rows.to_string()),
            ("SCHEMA", hexs(&schema_message(&b.schema()))),
            ("HANDLE", message.export_ipc().unwrap().to_string()),
        ]);
        assert_eq!(p.expect("arrow"), format!("{rows} true true"));
        p.finish();
    }
}

gpu_test! {
    fn ipc_export_of_pool_memory_is_refused() {
        let c = devbuf::cuda::Context::new(0).unwrap();
        let pooled = c.allocate_pooled(4096, None).unwrap();
        assert!(pooled.is_pooled());
        let e = pooled.slice(16, 64).unwrap().export_ipc().unwrap_err();
        let m = e.to_string();
        assert!(m.contains("stream-ordered pool") && m.contains("Context::allocate"), "{m}");
        // Ordinary allocations still export.
        assert!(c.allocate(4096).unwrap().export_ipc().is_ok());
    }
}

gpu_test! {
    /// A batch already on the device is serialized device to device; the message reads
    /// back (zero-copy slices of the new message) to the same values, and a device
    /// ChunkBatch survives the trip.
    fn arrow_device_batches_serialize_on_the_device() {
        use devbuf::arrow::{ChunkBatch, ChunkGrid};
        use devbuf::zarr::{BufferPrototype, Dtype as ZType, NDBuffer};
        use devbuf::ElementType;
        // A context of its own: its allocation counter moves only with this test (other
        // tests allocate in the primary context concurrently).
        let c = Context::new_dedicated(0).unwrap();
        let n = 10_007usize;
        let batch = RecordBatch::try_from_iter([
            ("i", Arc::new(Int32Array::from_iter((0..n as i32).map(|i| (i % 3 != 0).then_some(i * 31)))) as _),
            ("s", Arc::new(StringArray::from_iter((0..n).map(|i| (i % 5 != 2).then(|| format!("v{}", i * 7))))) as _),
        ])
        .unwrap();
        let first = read_device(&to_device_message(batch.clone(), &c).unwrap(), batch.schema()).unwrap();
        let allocated = c.bytes_allocated();
        let again = to_device_message(first.clone(), first.message().context()).unwrap();
        // Serialised on the device: the new message is the one allocation made, in the
        // batch's context, and about as large as the first.
        assert_eq!(c.bytes_allocated(), allocated + again.len());
        assert!(again.len() >= first.message().len() / 2, "{} of {}", again.len(), first.message().len());
        let back = read_device(&again, batch.schema()).unwrap();
        for col in back.columns() {
            for b in col.all_buffers() {
                assert!(b.address() >= again.address() && b.address() + b.len() as u64 <= again.address() + again.len() as u64);
            }
        }
        assert_eq!(back.to_host().unwrap(), batch);
        // Reading it made no copy on the device; dropping it frees the message.
        assert_eq!(c.bytes_allocated(), allocated + again.len());
        drop((back, again));
        assert_eq!(c.bytes_allocated(), allocated);
        // Chunks of a zarr-like array, on the device, through the device serializer.
        let grid = ChunkGrid::new(&[10, 7], &[4, 3], ZType::from(ElementType::Float32)).unwrap();
        let mut chunks = Vec::new();
        for i in 0..3u64 {
            for j in 0..3u64 {
                let ext = grid.chunk_extent(&[i, j]).unwrap();
                let vals: Vec<f32> = (0..ext.iter().product::<usize>()).map(|k| (i * 100 + j * 10) as f32 + k as f32 * 0.5).collect();
                let nd = NDBuffer::from_ndarray(ndarray::ArrayD::from_shape_vec(ext.clone(), vals).unwrap());
                chunks.push((vec![i, j], nd));
            }
        }
        let host = ChunkBatch::from_chunks(&grid, chunks.iter().map(|(c, n)| (c.as_slice(), n)), &BufferPrototype::Host).unwrap();
        let dev = ChunkBatch::from_chunks(&grid, chunks.iter().map(|(c, n)| (c.as_slice(), n)), &BufferPrototype::Device(0)).unwrap();
        let d = dev.batch().as_device().unwrap();
        let msg = to_device_message(d.clone(), d.message().context()).unwrap();
        let read = ChunkBatch::try_from(Batch::Device(read_device(&msg, d.schema()).unwrap())).unwrap();
        assert_eq!(read.len(), host.len());
        for k in 0..host.len() {
            assert_eq!(read.coords(k), host.coords(k));
            let (a, b) = (read.chunk(k).unwrap(), host.chunk(k).unwrap());
            assert_eq!(a.to_ndarray::<f32>().unwrap(), b.to_ndarray::<f32>().unwrap(), "chunk {k}");
        }
    }
}

use crate::ipc_messages::{read_host, schema_message, schema_of, serialize_to_vec};
