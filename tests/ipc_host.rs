//! IPC on every machine (no GPU needed): handle byte layouts (property tests of the
//! parsers), host shared memory between processes, and Arrow IPC record batches over
//! host memory — the same reader code that runs on device memory.
//!
//! Cross-process tests re-run this test binary as the other process: the parent runs
//! `child_entry` with `DEVBUF_IPC_HOST_CHILD=<role>` and talks to it over stdin/stdout
//! (`CHILD <key> <value>` lines).

#[path = "common/batches.rs"]
mod batches;
#[path = "common/peer.rs"]
mod peer;

use std::sync::Arc;

use arrow_array::types::Int32Type;
use arrow_array::{Array, ArrayRef, DictionaryArray, RecordBatch, StringArray};
use arrow_buffer::Buffer;
use arrow_schema::{DataType, Field, Schema};
use batches::{Rng, exotic_batch, mixed_batch};
use devbuf::Error;
use devbuf::arrow::serialize_record_batch_shared;
use devbuf::ipc::IpcEventHandle;
use devbuf::ipc::IpcMemHandle;
use devbuf::ipc::{HostIpcHandle, IpcHandle, SharedMemory};
use peer::{env, fnv, say, wait_line};
use proptest::prelude::*;

const ROLE: &str = "DEVBUF_IPC_HOST_CHILD";

// ---------------------------------------------------------------------------
// Child processes
// ---------------------------------------------------------------------------

/// Whether `/proc/self/maps` shows the page of `p` mapped read-only and shared.
fn mapped_read_only_shared(p: *const u8) -> bool {
    let a = p as usize;
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    for line in maps.lines() {
        let mut it = line.split_whitespace();
        let (Some(range), Some(perms)) = (it.next(), it.next()) else {
            continue;
        };
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let lo = usize::from_str_radix(lo, 16).unwrap_or(usize::MAX);
        let hi = usize::from_str_radix(hi, 16).unwrap_or(0);
        if lo <= a && a < hi {
            return perms == "r--s";
        }
    }
    false
}

type Peer = peer::Peer;

/// Every buffer of `a` (and its children) lies inside `range`.
fn buffers_within(a: &dyn Array, range: &std::ops::Range<usize>) -> bool {
    let d = a.to_data();
    fn walk(d: &arrow_data::ArrayData, range: &std::ops::Range<usize>) -> bool {
        d.buffers()
            .iter()
            .chain(d.nulls().map(|n| n.buffer()))
            .filter(|b| !b.is_empty())
            .all(|b| {
                range.contains(&(b.as_ptr() as usize)) && b.as_ptr() as usize + b.len() <= range.end
            })
            && d.child_data().iter().all(|c| walk(c, range))
    }
    walk(&d, range)
}

/// The child side of every cross-process test.
#[test]
#[ignore = "child role of the cross-process tests (they run it)"]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    match role.as_str() {
        "open_check" => {
            // Open each handle, report length, checksum and whether it is a read-only
            // shared mapping; then wait, and report the checksum again (the parent
            // changes the memory in between: a zero-copy mapping sees it).
            let handles: Vec<HostIpcHandle> = env("HANDLES")
                .split(',')
                .map(|h| h.parse::<HostIpcHandle>().expect("handle"))
                .collect();
            let bufs: Vec<Buffer> = handles.iter().map(|h| h.open().expect("open")).collect();
            for (i, b) in bufs.iter().enumerate() {
                say(
                    &format!("open{i}"),
                    format!(
                        "{} {:016x} {}",
                        b.len(),
                        fnv(b.as_slice()),
                        b.is_empty() || mapped_read_only_shared(b.as_ptr())
                    ),
                );
            }
            say("waiting", "");
            wait_line();
            for (i, b) in bufs.iter().enumerate() {
                say(&format!("again{i}"), format!("{:016x}", fnv(b.as_slice())));
            }
        }
        "open_expect_error" => {
            let text = env("HANDLE");
            let err = match text.parse::<HostIpcHandle>() {
                Err(e) => e,
                Ok(h) => match h.open() {
                    Err(e) => e,
                    Ok(b) => panic!("opening succeeded with {} bytes", b.len()),
                },
            };
            say("error", err.to_string().replace('\n', " "));
        }
        "export_and_exit" => {
            let mut shm = SharedMemory::create(4096).expect("create");
            shm.fill(0xab);
            say("handle", shm.export_ipc(..).expect("export").to_string());
            // Exits (dropping the memory) right away.
        }
        "export_drop_wait" => {
            let shm = SharedMemory::create(4096).expect("create");
            say("handle", shm.export_ipc(..).expect("export").to_string());
            drop(shm);
            say("dropped", "");
            wait_line();
        }
        "arrow_read" => {
            let schema = schema_of(&devbuf_hex(&env("SCHEMA"))).expect("schema");
            let h = env("HANDLE").parse::<HostIpcHandle>().expect("handle");
            let mapped = h.open().expect("open");
            let batch = read_host(&mapped, schema).expect("read batch");
            let seed: u64 = env("SEED").parse().expect("seed");
            let rows: usize = env("ROWS").parse().expect("rows");
            let expected = mixed_batch(seed, rows);
            let range = mapped.as_ptr() as usize..mapped.as_ptr() as usize + mapped.len();
            let zero_copy = batch
                .columns()
                .iter()
                .all(|c| buffers_within(c.as_ref(), &range));
            say(
                "batch",
                format!(
                    "{} {} {} {}",
                    batch.num_rows(),
                    batch == expected,
                    zero_copy,
                    mapped_read_only_shared(mapped.as_ptr())
                ),
            );
        }
        other => panic!("unknown child role {other}"),
    }
}

fn devbuf_hex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

// ---------------------------------------------------------------------------
// Host shared memory across processes
// ---------------------------------------------------------------------------

#[test]
fn shared_memory_slices_open_read_only_and_zero_copy_in_another_process() {
    let mut r = Rng::new(1);
    let n = 3 * 4096 + 17;
    let mut shm = SharedMemory::create(n).unwrap();
    let data = r.bytes(n);
    shm.copy_from_slice(&data);
    // The whole memory, a slice at an odd offset, a one-byte slice at the end, empty.
    let ranges = [(0, n), (4099, 5003), (n - 1, 1), (5, 0)];
    let handles: Vec<HostIpcHandle> = ranges
        .iter()
        .map(|&(o, l)| shm.export_ipc(o..o + l).unwrap())
        .collect();
    assert!(handles[3].is_empty());
    let list = handles
        .iter()
        .map(|h| h.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mut peer = Peer::spawn("child_entry", ROLE, "open_check", &[("HANDLES", list)]);
    for (i, &(o, l)) in ranges.iter().enumerate() {
        let v = peer.expect(&format!("open{i}"));
        assert_eq!(
            v,
            format!("{l} {:016x} true", fnv(&data[o..o + l])),
            "range {o}+{l}"
        );
    }
    peer.expect("waiting");
    // Change the memory under the consumer's mapping: it sees the change (zero-copy).
    for b in shm.iter_mut() {
        *b = !*b;
    }
    peer.send("go");
    for (i, &(o, l)) in ranges.iter().enumerate() {
        let v = peer.expect(&format!("again{i}"));
        assert_eq!(v, format!("{:016x}", fnv(&shm[o..o + l])), "range {o}+{l}");
        if l > 0 {
            assert_ne!(fnv(&shm[o..o + l]), fnv(&data[o..o + l]));
        }
    }
    peer.finish();
}

#[test]
fn many_shared_memory_handles_at_once() {
    let mut r = Rng::new(2);
    let mut keep = Vec::new();
    let mut expect = Vec::new();
    let mut list = Vec::new();
    for i in 0..32 {
        let n = 1 + r.below(100_000) as usize;
        let mut shm = SharedMemory::create(n).unwrap();
        shm.copy_from_slice(&r.bytes(n));
        let o = r.below(n as u64) as usize;
        let l = r.below((n - o) as u64 + 1) as usize;
        let h = shm.export_ipc(o..o + l).unwrap();
        expect.push(format!("{l} {:016x} true", fnv(&shm[o..o + l])));
        list.push(h.to_string());
        keep.push(shm);
        let _ = i;
    }
    let mut peer = Peer::spawn(
        "child_entry",
        ROLE,
        "open_check",
        &[("HANDLES", list.join(","))],
    );
    for (i, e) in expect.iter().enumerate() {
        assert_eq!(&peer.expect(&format!("open{i}")), e, "handle {i}");
    }
    peer.expect("waiting");
    peer.send("go");
    peer.finish();
}

#[test]
fn exporter_gone_is_a_clear_error() {
    // The exporter exits before the consumer opens.
    let mut peer = Peer::spawn("child_entry", ROLE, "export_and_exit", &[]);
    let h = peer.expect("handle").parse::<HostIpcHandle>().unwrap();
    peer.finish();
    let e = h.open().unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::NotFound { .. }), "{msg}");
    assert!(msg.contains("has exited or dropped"), "{msg}");

    // The exporter drops the memory but lives on.
    let mut peer = Peer::spawn("child_entry", ROLE, "export_drop_wait", &[]);
    let h = peer.expect("handle").parse::<HostIpcHandle>().unwrap();
    peer.expect("dropped");
    let msg = h.open().unwrap_err().to_string();
    assert!(
        msg.contains("has exited or dropped") || msg.contains("not the shared memory"),
        "{msg}"
    );
    peer.send("done");
    peer.finish();
}

#[test]
fn bad_host_handles_are_errors_in_the_consumer() {
    let shm = SharedMemory::create(100).unwrap();
    let good = shm.export_ipc(..).unwrap();
    // A handle to our live memory but with the wrong tag: refused, not mapped.
    let b = Vec::from(&good);
    let pid = u32::from_le_bytes(b[16..20].try_into().unwrap());
    let fd = i32::from_le_bytes(b[20..24].try_into().unwrap());
    let tag = u64::from_le_bytes(b[24..32].try_into().unwrap());
    let wrong_tag = HostIpcHandle::from_parts(pid, fd, tag ^ 1, 100, 0, 100).unwrap();
    let wrong_size = HostIpcHandle::from_parts(pid, fd, tag, 200, 0, 150).unwrap();
    let no_fd = HostIpcHandle::from_parts(pid, 999_999, tag, 100, 0, 100).unwrap();
    let cases = [
        (wrong_tag.to_string(), "not the shared memory"),
        (wrong_size.to_string(), "the handle says 200"),
        (no_fd.to_string(), "does not exist"),
        ("00112233".to_string(), "malformed"),
        (hex(&[b'D'; 64]), "wrong magic"),
    ];
    for (text, want) in cases {
        let mut peer = Peer::spawn(
            "child_entry",
            ROLE,
            "open_expect_error",
            &[("HANDLE", text)],
        );
        let msg = peer.expect("error");
        assert!(msg.contains(want), "expected {want:?} in {msg:?}");
        peer.finish();
    }
    // The good one still opens here (same process works for host memory).
    assert_eq!(good.open().unwrap().len(), 100);
}

#[test]
fn arrow_batch_in_shared_memory_is_read_zero_copy_by_another_process() {
    let (seed, rows) = (42u64, 1000usize);
    let batch = mixed_batch(seed, rows);
    let shm = serialize_record_batch_shared(&batch).unwrap();
    let handle = IpcHandle::Host(shm.export_ipc(..).unwrap());
    let text = handle.to_string();
    let IpcHandle::Host(h) = text.parse::<IpcHandle>().unwrap() else {
        panic!("host handle expected");
    };
    let schema = hex(&schema_message(&batch.schema()));
    let mut peer = Peer::spawn(
        "child_entry",
        ROLE,
        "arrow_read",
        &[
            ("HANDLE", h.to_string()),
            ("SCHEMA", schema),
            ("SEED", seed.to_string()),
            ("ROWS", rows.to_string()),
        ],
    );
    assert_eq!(peer.expect("batch"), format!("{rows} true true true"));
    peer.finish();
}

// ---------------------------------------------------------------------------
// Handle byte layouts
// ---------------------------------------------------------------------------

fn sample_mem_handle() -> IpcMemHandle {
    let mut raw = [0u8; 64];
    for (i, b) in raw.iter_mut().enumerate() {
        *b = i as u8 ^ 0x5a;
    }
    IpcMemHandle::from_parts(
        raw,
        4099,
        1_000_001,
        1 << 24,
        Some(([7; 16], 3)),
        true,
        1234,
        99,
    )
    .unwrap()
}

fn assert_malformed(r: Result<impl std::fmt::Debug, Error>, want: &str) {
    match r {
        Err(Error::Malformed(m)) => assert!(m.contains(want), "expected {want:?} in {m:?}"),
        other => panic!("expected Malformed containing {want:?}, got {other:?}"),
    }
}

/// Rewrites the checksum so that only the field under test is wrong.
fn reseal(mut b: Vec<u8>) -> Vec<u8> {
    let n = b.len();
    let c = fnv(&b[..n - 8]);
    b[n - 8..].copy_from_slice(&c.to_le_bytes());
    b
}

#[test]
fn mem_handle_round_trips_and_documented_layout() {
    let h = sample_mem_handle();
    let b = Vec::from(&h);
    assert_eq!(b.len(), IpcMemHandle::ENCODED_LEN);
    assert_eq!(b.len(), 144);
    assert_eq!(&b[..8], b"DEVBUFIM");
    assert_eq!(u16::from_le_bytes([b[8], b[9]]), 1);
    assert_eq!(u16::from_le_bytes([b[10], b[11]]), 144);
    assert_eq!(u32::from_le_bytes(b[12..16].try_into().unwrap()), 3);
    assert_eq!(&b[16..80], &h.raw_cuda());
    assert_eq!(u64::from_le_bytes(b[80..88].try_into().unwrap()), 4099);
    assert_eq!(u64::from_le_bytes(b[88..96].try_into().unwrap()), 1_000_001);
    assert_eq!(u64::from_le_bytes(b[96..104].try_into().unwrap()), 1 << 24);
    assert_eq!(&b[104..120], &[7; 16]);
    assert_eq!(u32::from_le_bytes(b[120..124].try_into().unwrap()), 3);
    assert_eq!(u32::from_le_bytes(b[124..128].try_into().unwrap()), 1234);
    assert_eq!(u64::from_le_bytes(b[128..136].try_into().unwrap()), 99);
    assert_eq!(
        u64::from_le_bytes(b[136..].try_into().unwrap()),
        fnv(&b[..136])
    );
    let back = IpcMemHandle::try_from(&b[..]).unwrap();
    assert_eq!(back, h);
    assert_eq!(h.to_string().parse::<IpcMemHandle>().unwrap(), h);
    assert_eq!(back.offset(), 4099);
    assert_eq!(back.len(), 1_000_001);
    assert_eq!(back.allocation_size(), Some(1 << 24));
    assert_eq!(back.device_uuid(), Some([7; 16]));
    assert_eq!(back.device_ordinal(), Some(3));
    assert!(back.is_read_only());
    assert_eq!(back.exporter_pid(), Some(1234));
    assert!(!back.is_from_this_process());
    // Through the enum too.
    assert_eq!(
        IpcHandle::try_from(&b[..]).unwrap(),
        IpcHandle::Device(h.clone())
    );
}

#[test]
fn raw_cuda_interop_and_empty_handles() {
    let raw: Vec<u8> = (0..64).map(|i| 200 - i as u8).collect();
    let h = IpcMemHandle::from_raw_cuda(&raw, 12, 34, None).unwrap();
    assert_eq!(h.raw_cuda().to_vec(), raw);
    assert_eq!((h.offset(), h.len(), h.allocation_size()), (12, 34, None));
    assert_eq!(h.device_uuid(), None);
    let h2 = IpcMemHandle::from_raw_cuda(&raw, 12, 34, Some([1; 16])).unwrap();
    assert_eq!(h2.device_uuid(), Some([1; 16]));
    for x in [&h, &h2] {
        assert_eq!(&IpcMemHandle::try_from(&Vec::from(x)[..]).unwrap(), x);
    }
    assert!(matches!(
        IpcMemHandle::from_raw_cuda(&raw[..63], 0, 1, None),
        Err(Error::InvalidArgument(_))
    ));
    assert!(IpcMemHandle::from_raw_cuda(&[0; 64], 0, 1, None).is_err());
    assert!(IpcMemHandle::from_raw_cuda(&raw, usize::MAX, 2, None).is_err());
    // Zero length: the empty handle, whatever the raw bytes.
    let e = IpcMemHandle::from_raw_cuda(&raw, 5, 0, None).unwrap();
    assert!(e.is_empty());
    assert_eq!(e.raw_cuda(), [0; 64]);
    assert_eq!(IpcMemHandle::try_from(&Vec::from(&e)[..]).unwrap(), e);
    // A zero-length handle that is not the canonical empty one is malformed.
    assert_malformed(
        IpcMemHandle::from_parts([1; 64], 0, 0, 0, None, false, 0, 0),
        "must be the empty handle",
    );
    assert_malformed(
        IpcMemHandle::from_parts([0; 64], 0, 5, 0, None, false, 0, 0),
        "all-zero CUDA handle",
    );
}

#[test]
fn mem_handle_parser_names_what_is_wrong() {
    let good = Vec::from(&sample_mem_handle());
    assert_malformed(IpcMemHandle::try_from(&[0u8; 0][..]), "truncated");
    assert_malformed(IpcMemHandle::try_from(&good[..10]), "truncated");
    assert_malformed(IpcMemHandle::try_from(&good[..143]), "truncated");
    let mut long = good.clone();
    long.push(0);
    assert_malformed(IpcMemHandle::try_from(&long[..]), "trailing");
    let mut b = good.clone();
    b[0] = b'X';
    assert_malformed(IpcMemHandle::try_from(&b[..]), "wrong magic");
    let mut b = good.clone();
    b[8] = 2;
    assert_malformed(IpcMemHandle::try_from(&reseal(b)[..]), "version 2");
    let mut b = good.clone();
    b[10] = 100;
    assert_malformed(
        IpcMemHandle::try_from(&reseal(b)[..]),
        "declares a size of 100",
    );
    let mut b = good.clone();
    b[50] ^= 1;
    assert_malformed(IpcMemHandle::try_from(&b[..]), "checksum mismatch");
    let mut b = good.clone();
    b[12] |= 4;
    assert_malformed(IpcMemHandle::try_from(&reseal(b)[..]), "unknown flag bits");
    // Offset + length beyond the recorded allocation size.
    let mut b = good.clone();
    b[96..104].copy_from_slice(&1000u64.to_le_bytes());
    assert_malformed(IpcMemHandle::try_from(&reseal(b)[..]), "inconsistent");
    // Offset + length overflows.
    let mut b = good.clone();
    b[80..88].copy_from_slice(&u64::MAX.to_le_bytes());
    b[96..104].copy_from_slice(&0u64.to_le_bytes());
    assert_malformed(IpcMemHandle::try_from(&reseal(b)[..]), "overflows");
    // Device bytes without the flag.
    let mut b = good.clone();
    b[12] &= !1;
    assert_malformed(
        IpcMemHandle::try_from(&reseal(b)[..]),
        "'device known' flag",
    );
    // Other kinds of handle are named.
    let ev = Vec::from(&IpcEventHandle::from_parts([3; 64], None, false, 1, 1));
    assert_malformed(IpcMemHandle::try_from(&ev[..]), "an IPC event handle");
    let host = Vec::from(&HostIpcHandle::from_parts(1, 3, 9, 10, 0, 10).unwrap());
    assert_malformed(
        IpcMemHandle::try_from(&host[..]),
        "host shared-memory handle",
    );
    assert_malformed(IpcHandle::try_from(&ev[..]), "event handle");
    assert_malformed(
        IpcHandle::try_from(&b"garbage"[..]),
        "not a devbuf buffer handle",
    );
    assert_malformed("abc".parse::<IpcMemHandle>(), "odd number");
    assert_malformed(
        "xyz".parse::<IpcMemHandle>(),
        "'x' at byte 0 is not a hexadecimal",
    );
    assert_malformed("zz".parse::<IpcMemHandle>(), "not a hexadecimal digit");
}

#[test]
fn event_handle_round_trips_and_layout() {
    let h = IpcEventHandle::from_parts([9; 64], Some(([4; 16], 1)), true, 77, 5);
    let b = Vec::from(&h);
    assert_eq!(b.len(), IpcEventHandle::ENCODED_LEN);
    assert_eq!(b.len(), 120);
    assert_eq!(&b[..8], b"DEVBUFIE");
    assert_eq!(&b[16..80], &[9; 64]);
    assert_eq!(&b[80..96], &[4; 16]);
    assert_eq!(
        u64::from_le_bytes(b[112..].try_into().unwrap()),
        fnv(&b[..112])
    );
    assert_eq!(IpcEventHandle::try_from(&b[..]).unwrap(), h);
    assert_eq!(h.to_string().parse::<IpcEventHandle>().unwrap(), h);
    assert_eq!(h.device_uuid(), Some([4; 16]));
    assert_eq!(h.exporter_pid(), Some(77));
    let raw = IpcEventHandle::from_raw_cuda(&[1; 64]).unwrap();
    assert_eq!(raw.raw_cuda(), [1; 64]);
    assert_eq!(IpcEventHandle::try_from(&Vec::from(&raw)[..]).unwrap(), raw);
    assert!(IpcEventHandle::from_raw_cuda(&[1; 65]).is_err());
    assert_malformed(IpcEventHandle::try_from(&b[..100]), "truncated");
    assert_malformed(
        IpcEventHandle::try_from(&Vec::from(&sample_mem_handle())[..]),
        "an IPC memory handle",
    );
    let mut bad = b.clone();
    bad[12] |= 8;
    assert_malformed(
        IpcEventHandle::try_from(&reseal(bad)[..]),
        "unknown flag bits",
    );
    let zero = Vec::from(&IpcEventHandle::from_parts([0; 64], None, false, 0, 0));
    assert_malformed(IpcEventHandle::try_from(&zero[..]), "all-zero");
}

#[test]
fn host_handle_round_trips_and_layout() {
    let h = HostIpcHandle::from_parts(4321, 7, 0xdead_beef, 1000, 10, 990).unwrap();
    let b = Vec::from(&h);
    assert_eq!(b.len(), HostIpcHandle::ENCODED_LEN);
    assert_eq!(b.len(), 64);
    assert_eq!(&b[..8], b"DEVBUFIH");
    assert_eq!(u32::from_le_bytes(b[16..20].try_into().unwrap()), 4321);
    assert_eq!(i32::from_le_bytes(b[20..24].try_into().unwrap()), 7);
    assert_eq!(
        u64::from_le_bytes(b[24..32].try_into().unwrap()),
        0xdead_beef
    );
    assert_eq!(u64::from_le_bytes(b[32..40].try_into().unwrap()), 1000);
    assert_eq!(u64::from_le_bytes(b[40..48].try_into().unwrap()), 10);
    assert_eq!(u64::from_le_bytes(b[48..56].try_into().unwrap()), 990);
    assert_eq!(HostIpcHandle::try_from(&b[..]).unwrap(), h);
    assert_eq!(IpcHandle::try_from(&b[..]).unwrap(), IpcHandle::Host(h));
    assert_eq!(h.len(), 990);
    assert_malformed(
        HostIpcHandle::from_parts(1, 1, 1, 100, 50, 51),
        "inconsistent",
    );
    assert_malformed(
        HostIpcHandle::from_parts(1, -1, 1, 100, 0, 1),
        "names no memory file",
    );
    assert_malformed(
        HostIpcHandle::from_parts(1, 1, 1, 100, 3, 0),
        "empty handle",
    );
    let empty = SharedMemory::create(0).unwrap().export_ipc(..).unwrap();
    assert!(empty.is_empty());
    assert_eq!(empty.open().unwrap().len(), 0);
    assert_eq!(
        HostIpcHandle::try_from(&Vec::from(&empty)[..]).unwrap(),
        empty
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn parsers_never_panic_on_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        for r in [
            IpcMemHandle::try_from(&bytes[..]).map(|_| ()),
            IpcEventHandle::try_from(&bytes[..]).map(|_| ()),
            HostIpcHandle::try_from(&bytes[..]).map(|_| ()),
            IpcHandle::try_from(&bytes[..]).map(|_| ()),
        ] {
            prop_assert!(matches!(r, Err(Error::Malformed(_))), "{:?}", r);
        }
    }

    #[test]
    fn any_corruption_of_a_valid_handle_is_detected(
        pos in 0usize..144, bit in 0u8..8, cut in 0usize..144,
    ) {
        let good = Vec::from(&sample_mem_handle());
        let mut b = good.clone();
        b[pos] ^= 1 << bit;
        prop_assert!(matches!(IpcMemHandle::try_from(&b[..]), Err(Error::Malformed(_))));
        prop_assert!(matches!(IpcMemHandle::try_from(&good[..cut]), Err(Error::Malformed(_))));
        let host = Vec::from(&HostIpcHandle::from_parts(5, 6, 7, 100, 1, 2).unwrap());
        let mut h = host.clone();
        h[pos % 64] ^= 1 << bit;
        prop_assert!(matches!(HostIpcHandle::try_from(&h[..]), Err(Error::Malformed(_))));
    }

    #[test]
    fn valid_fields_round_trip(
        raw in proptest::array::uniform32(1u8..),
        offset in 0u64..(1 << 40), len in 1u64..(1 << 40), extra in 0u64..(1 << 20),
        dev in proptest::option::of((proptest::array::uniform16(any::<u8>()), any::<u32>())),
        ro in any::<bool>(), pid in any::<u32>(), token in any::<u64>(),
    ) {
        let mut r64 = [0u8; 64];
        r64[..32].copy_from_slice(&raw);
        let h = IpcMemHandle::from_parts(r64, offset, len, offset + len + extra, dev, ro, pid, token).unwrap();
        prop_assert_eq!(IpcMemHandle::try_from(&Vec::from(&h)[..]).unwrap(), h.clone());
        prop_assert_eq!(h.to_string().parse::<IpcMemHandle>().unwrap(), h);
    }
}

// ---------------------------------------------------------------------------
// Arrow IPC over host memory (the reader that also runs on the device)
// ---------------------------------------------------------------------------

fn round_trip(batch: &RecordBatch) -> RecordBatch {
    let bytes = serialize_to_vec(batch).unwrap();
    let buf = Buffer::from_vec(bytes);
    let back = read_host(&buf, batch.schema()).unwrap();
    // Zero-copy: every buffer of the result points into the message.
    let range = buf.as_ptr() as usize..buf.as_ptr() as usize + buf.len();
    for c in back.columns() {
        assert!(
            buffers_within(c.as_ref(), &range),
            "{:?} was copied",
            c.data_type()
        );
    }
    back
}

#[test]
fn mixed_batch_round_trips_zero_copy() {
    for rows in [0usize, 1, 7, 1000] {
        let b = mixed_batch(rows as u64 + 3, rows);
        assert_eq!(round_trip(&b), b, "{rows} rows");
    }
}

#[test]
fn messages_agree_with_arrow_ipc_reader() {
    // Our bytes, prefixed by the schema message, are a valid Arrow IPC stream.
    let b = mixed_batch(5, 100);
    let mut stream = schema_message(&b.schema());
    stream.extend(serialize_to_vec(&b).unwrap());
    stream.extend([0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
    let reader =
        arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(&stream), None).unwrap();
    let read: Vec<RecordBatch> = reader.map(|r| r.unwrap()).collect();
    assert_eq!(read, vec![b.clone()]);
    // And our reader accepts the whole stream (schema message first) too.
    let back = read_host(&Buffer::from_vec(stream), b.schema()).unwrap();
    assert_eq!(back, b);
    // A stream written by arrow-ipc's StreamWriter reads back with our reader.
    let mut w = arrow_ipc::writer::StreamWriter::try_new(Vec::new(), &b.schema()).unwrap();
    w.write(&b).unwrap();
    w.finish().unwrap();
    let theirs = w.into_inner().unwrap();
    assert_eq!(read_host(&Buffer::from_vec(theirs), b.schema()).unwrap(), b);
}

#[test]
fn sliced_batches_are_written_correctly() {
    let b = mixed_batch(11, 300);
    for (o, l) in [
        (0, 300),
        (1, 299),
        (3, 10),
        (7, 1),
        (63, 130),
        (299, 1),
        (150, 0),
    ] {
        let s = b.slice(o, l);
        assert_eq!(round_trip(&s), s, "slice {o}+{l}");
    }
}

#[test]
fn exotic_types_round_trip() {
    let b = exotic_batch();
    assert_eq!(round_trip(&b), b);
    for (o, l) in [(1, 3), (2, 3), (4, 1)] {
        let s = b.slice(o, l);
        assert_eq!(round_trip(&s), s, "slice {o}+{l}");
    }
}

#[test]
fn wrong_schema_and_bad_messages_are_clear_errors() {
    let b = mixed_batch(9, 20);
    let bytes = serialize_to_vec(&b).unwrap();
    let buf = Buffer::from_vec(bytes.clone());
    // A schema with one column fewer.
    let fewer = Arc::new(Schema::new(b.schema().fields()[..3].to_vec()));
    let msg = read_host(&buf, fewer).unwrap_err().to_string();
    assert!(msg.contains("is the schema the one"), "{msg}");
    // Another type for a column.
    let mut fields = b.schema().fields().to_vec();
    fields[0] = Arc::new(Field::new("i32", DataType::Int64, true));
    let e = read_host(&buf, Arc::new(Schema::new(fields))).unwrap_err();
    assert!(
        matches!(e, Error::Malformed(_) | Error::Arrow { .. }),
        "{e}"
    );
    // Empty input, end-of-stream only, truncated prefix.
    let cases: [(Vec<u8>, &str); 5] = [
        (vec![], "no record batch"),
        (vec![0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0], "end-of-stream"),
        (vec![0xff, 0xff], "too few"),
        (
            vec![0xff, 0xff, 0xff, 0xff, 0x10, 0, 0, 0],
            "runs past the end",
        ),
        (
            vec![0xff, 0xff, 0xff, 0xff, 0xf0, 0xff, 0xff, 0xff],
            "negative",
        ),
    ];
    for (input, want) in cases {
        let msg = read_host(&Buffer::from_vec(input), b.schema())
            .unwrap_err()
            .to_string();
        assert!(msg.contains(want), "expected {want:?} in {msg:?}");
    }
    // Every truncation of a valid message is an error, never a panic.
    for cut in (0..bytes.len()).step_by(7) {
        let r = read_host(&Buffer::from_vec(bytes[..cut].to_vec()), b.schema());
        assert!(r.is_err(), "cut at {cut} of {}", bytes.len());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn reader_never_panics_on_corrupted_messages(
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
    ) {
        let b = mixed_batch(1, 12);
        let mut bytes = serialize_to_vec(&b).unwrap();
        let n = bytes.len();
        for (pos, v) in flips {
            bytes[pos % n] = v;
        }
        // Either a clean error or a batch that passed full validation.
        let _ = read_host(&Buffer::from_vec(bytes), b.schema());
    }

    #[test]
    fn reader_never_panics_on_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let b = mixed_batch(1, 3);
        let _ = read_host(&Buffer::from_vec(bytes), b.schema());
    }
}

/// A message whose buffer lengths are not whole numbers of elements (legal: a writer
/// may pad) is read, not a panic: arrow-rs asserts whole elements when it views a
/// fixed-width buffer as typed values.
#[test]
fn buffers_with_a_partial_trailing_element_are_read() {
    let b = RecordBatch::try_from_iter([(
        "s",
        Arc::new(StringArray::from(vec!["ab", "c"])) as ArrayRef,
    )])
    .unwrap();
    let mut bytes = serialize_to_vec(&b).unwrap();
    // The offsets buffer is the flatbuffer struct {offset: 0i64, length: 12i64}
    // (three i32 offsets); make it 13 bytes long.
    let entry: Vec<u8> = [0i64.to_le_bytes(), 12i64.to_le_bytes()].concat();
    let at = bytes
        .windows(16)
        .position(|w| w == entry.as_slice())
        .expect("the offsets buffer entry");
    bytes[at + 8] = 13;
    let back = read_host(&Buffer::from_vec(bytes), b.schema()).unwrap();
    assert_eq!(back, b);
}

/// A schema with a negative `FixedSizeBinary` width is an error (arrow-rs's layout
/// function panics on it), wherever the type sits.
#[test]
fn negative_fixed_size_binary_width_is_an_error() {
    let b = mixed_batch(1, 4);
    let msg = Buffer::from_vec(serialize_to_vec(&b).unwrap());
    let bad = DataType::FixedSizeBinary(-1);
    for col in 0..b.num_columns() {
        let mut fields = b.schema().fields().to_vec();
        fields[col] = Arc::new(Field::new("w", bad.clone(), true));
        let e = read_host(&msg, Arc::new(Schema::new(fields))).unwrap_err();
        assert!(!e.to_string().is_empty());
    }
    // The values of an all-null dictionary column (no dictionary batch is written).
    let all_null: DictionaryArray<Int32Type> = vec![None::<&str>; 3].into_iter().collect();
    let b = RecordBatch::try_from_iter([("d", Arc::new(all_null) as ArrayRef)]).unwrap();
    let msg = Buffer::from_vec(serialize_to_vec(&b).unwrap());
    let dt = DataType::Dictionary(Box::new(DataType::Int32), Box::new(bad));
    let schema = Arc::new(Schema::new(vec![Field::new("d", dt, true)]));
    let e = read_host(&msg, schema).unwrap_err();
    assert!(e.to_string().contains("negative"), "{e}");
}

/// Deterministic corruption of messages with every exotic column kind (views, unions,
/// run-end encoding, maps, nested dictionaries) and of a sliced one: each read is a
/// clean error or a batch that passed full validation, never a panic.
#[test]
fn reader_never_panics_on_corrupted_exotic_messages() {
    let base = exotic_batch();
    let inputs = [
        serialize_to_vec(&base).unwrap(),
        serialize_to_vec(&base.slice(1, 3)).unwrap(),
    ];
    let schema = base.schema();
    let mut rng = Rng::new(7);
    for it in 0..1500 {
        let mut b = inputs[it % inputs.len()].clone();
        let n = b.len();
        for _ in 0..1 + rng.below(3) {
            let p = rng.below(n as u64) as usize;
            match rng.below(4) {
                0 => b[p] ^= 1 << rng.below(8),
                1 => b[p] = rng.next() as u8,
                2 => {
                    // A small or extreme length/offset in an aligned 64-bit field.
                    let q = (p & !7).min(n - 8);
                    let v = [0u64, 1, 7, 9, 63, 65, 1 << 31, u64::MAX][rng.below(8) as usize];
                    b[q..q + 8].copy_from_slice(&v.to_le_bytes());
                }
                _ => {
                    let q = (p & !3).min(n - 4);
                    let v = rng.below(40) as i32 - 5;
                    b[q..q + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        let r =
            std::panic::catch_unwind(|| read_host(&Buffer::from_vec(b.clone()), schema.clone()));
        assert!(r.is_ok(), "iteration {it}: the reader panicked");
    }
}

/// A handle that names a descriptor of something other than a memory file — here a
/// FIFO without a writer, which a plain open() waits on forever — is an error at once.
#[cfg(target_os = "linux")]
#[test]
fn a_handle_naming_a_fifo_does_not_block() {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = std::env::temp_dir().join(format!("devbuf-fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("fifo");
    let _ = std::fs::remove_file(&path);
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // Safety: a NUL-terminated path and a mode.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // Our own read end (non-blocking so that opening it does not wait for a writer).
    let fifo = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .unwrap();
    let h =
        HostIpcHandle::from_parts(std::process::id(), fifo.as_raw_fd(), 7, 100, 0, 100).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(h.open().map(|b| b.len()));
    });
    let r = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("opening a handle that names a FIFO blocked");
    let e = r.unwrap_err().to_string();
    assert!(e.contains("not the shared memory"), "{e}");
    drop(fifo);
    let _ = std::fs::remove_dir_all(&dir);
}

#[path = "common/ipc_messages.rs"]
mod ipc_messages;
use ipc_messages::{read_host, schema_message, schema_of, serialize_to_vec};
