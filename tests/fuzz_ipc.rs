//! Fuzzing (time-bounded, `DEVBUF_FUZZ_SECS`; see tests/common/fuzz.rs) of the IPC
//! surfaces a peer process feeds devbuf: handle bytes (device memory, event and host
//! shared-memory handles), host handles opened against live shared memory, and Arrow
//! IPC messages and schemas read on the host.
//!
//! Each input is a valid encoding damaged (bit flips, bytes, extreme 64-bit and small
//! 32-bit words, truncation, extension, splices) or random bytes. Outcomes: a
//! [`Error::Malformed`] for handles; for host handles, an error or exactly the shared
//! bytes; for Arrow messages, an error or a batch that passes arrow-rs's full
//! validation. Never a panic or a hang. (The device readers run the same parser; they
//! need a GPU.)

#[path = "common/batches.rs"]
mod batches;
#[path = "common/fuzz.rs"]
mod fuzz;

use std::sync::Arc;

use arrow_array::{Array, RecordBatch};
use arrow_buffer::Buffer;
use devbuf::Error;
use devbuf::ipc::IpcEventHandle;
use devbuf::ipc::IpcMemHandle;
use devbuf::ipc::{HostIpcHandle, IpcHandle, SharedMemory};
use fuzz::{Damage, apply, damages, fuzz};
use proptest::prelude::*;

fn valid_handles() -> Vec<Vec<u8>> {
    let raw: [u8; 64] = std::array::from_fn(|i| i as u8 ^ 0x5a);
    vec![
        Vec::from(
            &IpcMemHandle::from_parts(
                raw,
                4099,
                1_000_001,
                1 << 24,
                Some(([7; 16], 3)),
                true,
                1234,
                99,
            )
            .unwrap(),
        ),
        Vec::from(&IpcMemHandle::from_parts(raw, 0, 1, 1, None, false, 1, 1).unwrap()),
        Vec::from(&IpcEventHandle::from_parts(
            [9; 64],
            Some(([4; 16], 1)),
            true,
            77,
            5,
        )),
        Vec::from(&HostIpcHandle::from_parts(5, 6, 7, 100, 1, 2).unwrap()),
    ]
}

/// Every parser on `bytes`: `Malformed`, or a handle that encodes back to the same bytes.
fn parse_all(bytes: &[u8]) -> Result<fuzz::Outcome, String> {
    let mut parsed = 0;
    macro_rules! check {
        ($t:ty) => {
            match <$t>::try_from(bytes) {
                Ok(h) => {
                    if Vec::from(&h) != bytes {
                        return Err(format!(
                            "{} parsed bytes that do not encode back: {h:?}",
                            stringify!($t)
                        ));
                    }
                    parsed += 1;
                }
                Err(Error::Malformed(m)) if !m.is_empty() => {}
                Err(e) => return Err(format!("{}: not Malformed: {e:?}", stringify!($t))),
            }
        };
    }
    check!(IpcMemHandle);
    check!(IpcEventHandle);
    check!(HostIpcHandle);
    check!(IpcHandle);
    Ok(if parsed > 0 { "parsed" } else { "refused" })
}

#[test]
fn fuzz_ipc_handle_bytes() {
    let handles = valid_handles();
    let input = prop_oneof![
        3 => (0..handles.len(), damages(4)),
        1 => proptest::collection::vec(any::<u8>(), 0..200).prop_map(|b| (usize::MAX, vec![Damage::Extend { bytes: b }])),
    ];
    let handles2 = valid_handles();
    let r = fuzz("ipc handle bytes", input, |(i, ds)| {
        let mut b = if i == usize::MAX {
            Vec::new()
        } else {
            handles2[i].clone()
        };
        for d in &ds {
            apply(&mut b, d);
        }
        parse_all(&b)
    });
    // The valid handles are among the inputs (damage that changed nothing) rarely; the
    // refusals are the point.
    assert!(r.tally.get("refused") > 0);
}

/// Host handles of a live shared memory, with fields changed: opening gives an error or
/// exactly the exported bytes, never another file's or a hang.
#[test]
fn fuzz_host_handles_opened() {
    let mut shm = SharedMemory::create(4096 + 5).unwrap();
    for (i, b) in shm.iter_mut().enumerate() {
        *b = (i * 31 % 251) as u8;
    }
    let good = shm.export_ipc(3..4003).unwrap();
    let b = Vec::from(&good);
    let pid = u32::from_le_bytes(b[16..20].try_into().unwrap());
    let fd = i32::from_le_bytes(b[20..24].try_into().unwrap());
    let tag = u64::from_le_bytes(b[24..32].try_into().unwrap());
    let field = prop_oneof![
        Just(None),
        (0usize..6, proptest::sample::select(&fuzz::EXTREME_U64[..])).prop_map(Some),
        (0usize..6, 0u64..5000).prop_map(Some),
    ];
    let shared: Vec<u8> = shm.to_vec();
    let r = fuzz(
        "host ipc handles opened",
        proptest::collection::vec(field, 1..3),
        |changes| {
            let mut f = [pid as u64, fd as u64, tag, shm.len() as u64, 3, 4000];
            for (k, v) in changes.iter().flatten() {
                f[*k] = match k {
                    0 => *v as u32 as u64,
                    1 => *v as i32 as i64 as u64,
                    _ => *v,
                };
            }
            let h = match HostIpcHandle::from_parts(
                f[0] as u32,
                f[1] as i64 as i32,
                f[2],
                f[3],
                f[4],
                f[5],
            ) {
                Ok(h) => h,
                Err(Error::Malformed(_)) => return Ok("refused"),
                Err(e) => return Err(format!("from_parts: not Malformed: {e:?}")),
            };
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(h.open());
            });
            let opened = rx
                .recv_timeout(std::time::Duration::from_secs(10))
                .map_err(|_| format!("opening {f:?} hung"))?;
            match opened {
                Err(_) => Ok("error"),
                Ok(buf) => {
                    let (o, l) = (f[4] as usize, f[5] as usize);
                    if o.checked_add(l).is_some_and(|e| e <= shared.len())
                        && buf.as_slice() == &shared[o..o + l]
                    {
                        Ok("opened")
                    } else {
                        Err(format!("opened {f:?} but got {} other bytes", buf.len()))
                    }
                }
            }
        },
    );
    assert!(r.tally.get("error") + r.tally.get("refused") > 0);
}

/// Full validation of every column (what the reader promises for an `Ok`).
fn validate(b: &RecordBatch) -> Result<(), String> {
    for c in b.columns() {
        c.to_data()
            .validate_full()
            .map_err(|e| format!("the reader returned an invalid column: {e}"))?;
    }
    Ok(())
}

#[test]
fn fuzz_arrow_ipc_messages_into_the_host_reader() {
    let batches = [
        batches::mixed_batch(1, 12),
        batches::mixed_batch(2, 3),
        batches::exotic_batch(),
        batches::exotic_batch().slice(1, 3),
    ];
    let messages: Vec<Vec<u8>> = batches
        .iter()
        .map(|b| serialize_to_vec(b).unwrap())
        .collect();
    let input = prop_oneof![
        8 => (0..messages.len(), damages(5)),
        1 => (0..messages.len(), proptest::collection::vec(any::<u8>(), 0..600))
            .prop_map(|(i, b)| (i, vec![Damage::Truncate { len: 0 }, Damage::Extend { bytes: b }])),
    ];
    fuzz("arrow ipc messages (host reader)", input, |(i, ds)| {
        let mut m = messages[i].clone();
        for d in &ds {
            apply(&mut m, d);
        }
        let unchanged = m == messages[i];
        match read_host(&Buffer::from_vec(m), batches[i].schema()) {
            Err(e) if unchanged => Err(format!("the undamaged message was refused: {e}")),
            Err(e) if e.to_string().is_empty() => Err("an empty error message".into()),
            Err(_) => Ok("refused"),
            Ok(b) => {
                validate(&b)?;
                if unchanged && b != batches[i] {
                    return Err("the undamaged message read other values".into());
                }
                if b.num_columns() != batches[i].num_columns() {
                    return Err("a batch of another schema".into());
                }
                Ok("read")
            }
        }
    });
}

#[test]
fn fuzz_arrow_ipc_schemas() {
    let schemas: Vec<Vec<u8>> = [batches::mixed_batch(1, 2), batches::exotic_batch()]
        .iter()
        .map(|b| schema_message(&b.schema()))
        .collect();
    let exotic = batches::exotic_batch();
    let msg = serialize_to_vec(&exotic).unwrap();
    fuzz(
        "arrow ipc schemas",
        (0..schemas.len(), damages(4)),
        |(i, ds)| {
            let mut s = schemas[i].clone();
            for d in &ds {
                apply(&mut s, d);
            }
            match schema_of(&s) {
                Err(_) => Ok("refused"),
                Ok(schema) => {
                    // A damaged schema that parses may describe another batch: reading a
                    // message with it is an error or a valid batch.
                    match read_host(&Buffer::from_vec(msg.clone()), Arc::clone(&schema)) {
                        Ok(b) => validate(&b).map(|_| "parsed+read"),
                        Err(_) => Ok("parsed+message refused"),
                    }
                }
            }
        },
    );
}

#[path = "common/ipc_messages.rs"]
mod ipc_messages;
use ipc_messages::{read_host, schema_message, schema_of, serialize_to_vec};
