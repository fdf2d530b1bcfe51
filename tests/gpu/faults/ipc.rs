//! Device IPC when one side fails (issue 11, item 5): a producer that exits (cleanly or
//! killed) while a consumer holds its memory and event handles open; a consumer that
//! dies holding them (the producer's memory is unaffected and freed at its drop); a
//! handle opened twice (and by two contexts) and closed in either order.
//!
//! CUDA calls it undefined to free exported memory (or destroy an exported event)
//! while another process still has it open; what the driver does then is what these
//! tests record: every outcome must be an error or the exporter's bytes, never a crash,
//! a hang or other bytes. The consumer's side runs in child processes (this binary
//! re-run as `faults::ipc::child_entry` with `DEVBUF_FAULTS_GPU_CHILD=<role>`), so that
//! this process opens no mapping (other tests count them) and a consumer may die.
//! Outcomes that may legitimately be either come back as `ok:...` / `err:...`.

use devbuf::__test::open_mapping_count;
use devbuf::cuda::{Context, DeviceBuffer, Event, EventFlags, Stream};
use devbuf::ipc::IpcEventHandle;
use devbuf::ipc::IpcMemHandle;

use super::{NOTHING, held, outcome, same};
use crate::batches::Rng;
use crate::common::*;
use crate::peer::{CHILD_LIMIT, Peer, env, fnv, say, wait_line};

const ROLE: &str = "DEVBUF_FAULTS_GPU_CHILD";
const CHILD: &str = "faults::ipc::child_entry";

fn spawn(role: &str, env: &[(&str, String)]) -> Peer {
    Peer::spawn(CHILD, ROLE, role, env)
}

/// `n` reproducible random bytes (never all zero).
fn data(seed: u64, n: usize) -> Vec<u8> {
    Rng::new(seed).bytes(n)
}

/// An interprocess event recorded on the legacy default stream after the work queued
/// so far, and complete.
fn recorded_event(c: &Context) -> Event {
    let e = Event::new(
        c,
        EventFlags {
            interprocess: true,
            ..Default::default()
        },
    )
    .unwrap();
    e.record(None).unwrap();
    e.synchronize().unwrap();
    e
}

/// `"equal"` when `b` holds `want`, else `"differ"`.
fn compare(b: &DeviceBuffer, want: &[u8]) -> String {
    outcome(b.to_vec::<u8>(), |v| {
        if v == want {
            "equal".into()
        } else {
            "differ".into()
        }
    })
}

/// The child side of every cross-process test here.
#[test]
#[ignore = "child role of the cross-process fault tests (they run it)"]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let c = ctx();
    match role.as_str() {
        "produce" => {
            // data(SEED, N) on the device, handles to all of it and to a slice at an odd
            // offset, an event recorded after it; then wait for "exit" or be killed.
            let (seed, n): (u64, usize) = (env("SEED").parse().unwrap(), env("N").parse().unwrap());
            let b = DeviceBuffer::from_slice(&c, &data(seed, n)).unwrap();
            let e = recorded_event(&c);
            say("mem", b.export_ipc().unwrap().to_string());
            say(
                "slice",
                b.slice(4099, n - 5000)
                    .unwrap()
                    .export_ipc()
                    .unwrap()
                    .to_string(),
            );
            say("event", e.export_ipc().unwrap().to_string());
            assert_eq!(wait_line(), "exit");
            drop((b, e));
            c.synchronize().unwrap();
        }
        "use_after_producer" => {
            // Open MEM, SLICE and EVENT and check them; after "go" (the producer is gone)
            // use everything and report each outcome; then close, reopen, carry on.
            let (seed, n): (u64, usize) = (env("SEED").parse().unwrap(), env("N").parse().unwrap());
            let want = data(seed, n);
            let mh = env("MEM").parse::<IpcMemHandle>().unwrap();
            let sh = env("SLICE").parse::<IpcMemHandle>().unwrap();
            let whole = c.open_ipc(&mh).unwrap();
            let slice = c.open_ipc(&sh).unwrap();
            let event = c
                .open_ipc_event(&env("EVENT").parse::<IpcEventHandle>().unwrap())
                .unwrap();
            say(
                "opened",
                format!(
                    "{} {} {} {}",
                    compare(&whole, &want),
                    compare(&slice, &want[4099..n - 901]),
                    open_mapping_count(),
                    outcome(event.is_complete(), |b| b.to_string())
                ),
            );
            assert_eq!(wait_line(), "go");
            let stream = Stream::new(&c).unwrap();
            say(
                "event",
                format!(
                    "{} {} {}",
                    outcome(event.is_complete(), |b| b.to_string()),
                    outcome(event.synchronize(), |_| "synced".into()),
                    outcome(
                        stream.wait_event(&event).and_then(|_| stream.synchronize()),
                        |_| "waited".into()
                    )
                ),
            );
            say(
                "data",
                format!(
                    "{} {}",
                    compare(&whole, &want),
                    compare(&slice, &want[4099..n - 901])
                ),
            );
            let inverted: Vec<u8> = want[..4096].iter().map(|x| !x).collect();
            let wrote = whole
                .copy_from_host(0, &inverted)
                .and_then(|_| whole.slice(0, 4096).and_then(|p| p.to_host()));
            let written = wrote.is_ok();
            say("write", outcome(wrote, |h| same(&h, &inverted)));
            // A second open of the held handle shares the mapping: the bytes as written
            // (after a failed write their state is unknown: only the open is checked).
            let mut now = want.clone();
            now[..4096].copy_from_slice(&inverted);
            say(
                "reopen_held",
                outcome(c.open_ipc(&mh), |b| {
                    if written {
                        compare(&b, &now)
                    } else {
                        "opened".into()
                    }
                }),
            );
            drop((whole, slice, event, stream));
            say("closed", open_mapping_count());
            say(
                "reopen_closed",
                outcome(c.open_ipc(&mh), |b| compare(&b, &now)),
            );
            say("mappings", open_mapping_count());
            let mine = DeviceBuffer::from_slice(&c, &want[..1 << 20]).unwrap();
            say("alive", mine.to_vec::<u8>().unwrap() == want[..1 << 20]);
        }
        "hold" => {
            // Open MEM and EVENT, check them, report, then die holding them as END says:
            // "wait" (the parent kills us) or "exit" (exit status 3, no destructors).
            let want_print: u64 = env("PRINT").parse().unwrap();
            let m = env("MEM").parse::<IpcMemHandle>().unwrap().open().unwrap();
            let e = c
                .open_ipc_event(&env("EVENT").parse::<IpcEventHandle>().unwrap())
                .unwrap();
            let s = Stream::new(&c).unwrap();
            s.wait_event(&e).unwrap();
            s.synchronize().unwrap();
            say(
                "holding",
                format!(
                    "{} {}",
                    fnv(&m.to_vec::<u8>().unwrap()) == want_print,
                    open_mapping_count()
                ),
            );
            if env("END") == "exit" {
                std::process::exit(3);
            }
            wait_line();
            panic!("the parent was to kill this process");
        }
        "open_twice" => {
            // MEM opened twice (and once more by a dedicated context), SLICE once, EVENT
            // twice; closed in ORDER ("ab": the first opening first), each survivor
            // checked; then opened again once all are closed.
            let (seed, n): (u64, usize) = (env("SEED").parse().unwrap(), env("N").parse().unwrap());
            let want = data(seed, n);
            let mh = env("MEM").parse::<IpcMemHandle>().unwrap();
            let sh = env("SLICE").parse::<IpcMemHandle>().unwrap();
            let eh = env("EVENT").parse::<IpcEventHandle>().unwrap();
            let (a, b) = (c.open_ipc(&mh).unwrap(), mh.open().unwrap());
            let other = Context::new_dedicated(0).unwrap();
            let d = other.open_ipc(&mh).unwrap();
            let s = c.open_ipc(&sh).unwrap();
            let slice_want = &want[sh.offset()..sh.offset() + sh.len()];
            let (ea, eb) = (
                c.open_ipc_event(&eh).unwrap(),
                c.open_ipc_event(&eh).unwrap(),
            );
            say(
                "opened",
                format!(
                    "{} {} {} {} {} {} {}",
                    compare(&a, &want),
                    compare(&b, &want),
                    compare(&d, &want),
                    compare(&s, slice_want),
                    a.address() == b.address() && a.address() == d.address(),
                    open_mapping_count(),
                    ea.is_complete().unwrap() && eb.is_complete().unwrap()
                ),
            );
            let ab = env("ORDER") == "ab";
            let ((first, second), (efirst, esecond)) = if ab {
                ((a, b), (ea, eb))
            } else {
                ((b, a), (eb, ea))
            };
            drop((first, efirst));
            let stream = Stream::new(&c).unwrap();
            say(
                "after_first",
                format!(
                    "{} {} {}",
                    compare(&second, &want),
                    open_mapping_count(),
                    outcome(
                        stream
                            .wait_event(&esecond)
                            .and_then(|_| stream.synchronize()),
                        |_| "waited".into()
                    )
                ),
            );
            drop((second, esecond, d));
            say(
                "after_second",
                format!("{} {}", compare(&s, slice_want), open_mapping_count()),
            );
            drop(s);
            say("after_all", open_mapping_count());
            let again = c.open_ipc(&mh).unwrap();
            say(
                "reopened",
                format!("{} {}", compare(&again, &want), open_mapping_count()),
            );
            drop(again);
            say("closed", open_mapping_count());
        }
        other => panic!("unknown child role {other}"),
    }
}

gpu_test! {
    /// A producer exits cleanly, or is killed, while a consumer holds its memory (the
    /// whole allocation and a slice: one mapping) and its event open. Then, in the
    /// consumer: the event, the data, a write, a second open of the held handle — each
    /// an error or valid data (the exporter's bytes, or the consumer's own write),
    /// never other bytes, a crash or a hang; once closed, the handle no longer opens,
    /// nothing stays mapped, and the consumer carries on and exits cleanly.
    fn faults_ipc_producer_exits_while_a_consumer_holds_its_handles() {
        for (i, end) in ["exit", "kill"].into_iter().enumerate() {
            let (seed, n) = (300 + i as u64, (8 << 20) + 13);
            let env_sn = [("SEED", seed.to_string()), ("N", n.to_string())];
            let mut p = spawn("produce", &env_sn);
            let (mem, slice, event) = (p.expect("mem"), p.expect("slice"), p.expect("event"));
            let mut env_c = env_sn.to_vec();
            env_c.extend([("MEM", mem), ("SLICE", slice), ("EVENT", event)]);
            let mut q = spawn("use_after_producer", &env_c);
            assert_eq!(q.expect("opened"), "ok:equal ok:equal 1 ok:true", "{end}");
            let status = match end {
                "exit" => {
                    p.send("exit");
                    let (status, seen) = p.wait_exit(CHILD_LIMIT);
                    assert!(status.success(), "the producer's clean exit: {status} {seen:#?}");
                    status
                }
                _ => p.kill(),
            };
            q.send("go");
            let ev = q.expect("event");
            let data = q.expect("data");
            let write = q.expect("write");
            let reopen = q.expect("reopen_held");
            println!("producer ended ({end}, {status}); consumer: event [{ev}] data [{data}] write [{write}] reopen [{reopen}]");
            for part in ev.split(' ') {
                assert!(part.starts_with("ok:") || part.starts_with("err:"), "{end}: event {ev}");
            }
            assert!(!ev.contains("ok:false"), "{end}: a complete event is complete: {ev}");
            for (what, v) in [("data", &data), ("write", &write), ("reopen", &reopen)] {
                assert!(!v.contains("differ"), "{end}: {what} gave other bytes: {v}");
            }
            assert_eq!(q.expect("closed"), "0", "{end}");
            let after = q.expect("reopen_closed");
            println!("reopened after closing ({end}): {after}");
            assert!(after.starts_with("err:") && after.contains("freed the memory or exited"), "{end}: {after}");
            assert_eq!(q.expect("mappings"), "0", "{end}");
            assert_eq!(q.expect("alive"), "true", "{end}");
            q.finish();
        }
    }

    /// Handles opened twice in a consumer — by the same context twice, through
    /// `IpcMemHandle::open`, by a second (dedicated) context, plus a slice; an event
    /// opened twice — share one mapping; closing them in either order leaves the others
    /// valid, the mapping goes with the last, and the handle opens again afterwards.
    fn faults_ipc_handles_opened_twice_close_in_either_order() {
        let c = Context::new_dedicated(0).unwrap();
        let (seed, n) = (310u64, (1 << 20) + 9);
        let b = DeviceBuffer::from_slice(&c, &data(seed, n)).unwrap();
        let e = recorded_event(&c);
        let env_base = [
            ("SEED", seed.to_string()),
            ("N", n.to_string()),
            ("MEM", b.export_ipc().unwrap().to_string()),
            ("SLICE", b.slice(333, 70_000).unwrap().export_ipc().unwrap().to_string()),
            ("EVENT", e.export_ipc().unwrap().to_string()),
        ];
        for order in ["ab", "ba"] {
            let mut env = env_base.to_vec();
            env.push(("ORDER", order.into()));
            let mut p = spawn("open_twice", &env);
            assert_eq!(p.expect("opened"), "ok:equal ok:equal ok:equal ok:equal true 1 true", "{order}");
            assert_eq!(p.expect("after_first"), "ok:equal 1 ok:waited", "{order}");
            assert_eq!(p.expect("after_second"), "ok:equal 1", "{order}");
            assert_eq!(p.expect("after_all"), "0", "{order}");
            assert_eq!(p.expect("reopened"), "ok:equal 1", "{order}");
            assert_eq!(p.expect("closed"), "0", "{order}");
            p.finish();
        }
        assert!(b.to_vec::<u8>().unwrap() == data(seed, n), "the exporter's bytes");
        drop((b, e));
        assert_eq!(held(&c), NOTHING);
    }
}

// Compares the device's free memory before and after: runs alone.
gpu_test_exclusive! {
    /// A consumer dies holding the producer's memory and event open (killed, or exits
    /// without closing): the producer's memory, bytes and event are unaffected, the
    /// handle still opens in a well-behaved consumer, and the memory is freed at the
    /// producer's drop — devbuf's counters back to zero and the device's free memory
    /// back to where it was (the 256 MiB would show).
    fn faults_ipc_consumer_dies_holding_handles_and_nothing_leaks() {
        let c = Context::new_dedicated(0).unwrap();
        let free0 = c.free_memory().unwrap();
        let n = (256 << 20) + 7;
        let want = fast_random(n, 320);
        let b = DeviceBuffer::from_slice(&c, &want).unwrap();
        let e = recorded_event(&c);
        let env_base = [
            ("MEM", b.export_ipc().unwrap().to_string()),
            ("EVENT", e.export_ipc().unwrap().to_string()),
            ("PRINT", fnv(&want).to_string()),
        ];
        for end in ["wait", "exit"] {
            let mut env = env_base.to_vec();
            env.push(("END", end.into()));
            let mut p = spawn("hold", &env);
            assert_eq!(p.expect("holding"), "true 1", "{end}");
            let status = if end == "wait" { p.kill() } else { p.wait_exit(CHILD_LIMIT).0 };
            println!("consumer ended ({end}): {status}");
            assert!(!status.success(), "{end}: {status}");
            assert!(b.to_vec::<u8>().unwrap() == want, "{end}: the producer's bytes");
            b.copy_from_host(n - 3, &[1, 2, 3]).unwrap();
            assert_eq!(&b.slice(n - 3, 3).unwrap().to_host().unwrap()[..], &[1, 2, 3], "{end}: writes");
            b.copy_from_host(n - 3, &want[n - 3..]).unwrap();
            e.record(None).unwrap();
            e.synchronize().unwrap();
        }
        let mut env = env_base.to_vec();
        env.push(("END", "exit".into()));
        let mut p = spawn("hold", &env);
        assert_eq!(p.expect("holding"), "true 1", "a consumer after the dead ones");
        let _ = p.wait_exit(CHILD_LIMIT);
        drop((b, e));
        c.trim_transfer_pool();
        assert_eq!(held(&c), NOTHING);
        let free1 = c.free_memory().unwrap();
        println!("device free memory: {free0} before, {free1} after");
        assert!(free1 + (64 << 20) >= free0, "device memory not freed: {free0} before, {free1} after");
        // The device is usable as before.
        let again = DeviceBuffer::from_slice(&c, &want[..1 << 20]).unwrap();
        assert!(again.to_vec::<u8>().unwrap() == want[..1 << 20]);
    }
}
