//! Host shared memory when one side of an exchange fails (issue 11, item 5, the host
//! path; the device path is `tests/gpu/faults/ipc.rs`): the producer exits or is killed
//! while a consumer maps its memory, a consumer is killed while it maps the producer's
//! memory, a handle is opened twice and the two mappings are closed in either order.
//! Each case gives valid data or an error, never a crash or a hang; nothing stays
//! mapped or open afterwards.
//!
//! What "nothing leaks" means here is read from the kernel, per memory file (so tests
//! running in parallel do not disturb it): the mappings of the file in
//! `/proc/self/maps` and the descriptors naming it in `/proc/self/fd`.
//!
//! Cross-process cases re-run this test binary as the other process (`child_entry`
//! with `DEVBUF_IPC_FAULTS_CHILD=<role>`, see tests/common/peer.rs); every child is
//! waited for with a deadline, and a child that must die holding memory is killed only
//! after it reported that it holds it.

#![cfg(target_os = "linux")]

#[path = "common/batches.rs"]
mod batches;
#[path = "common/peer.rs"]
mod peer;

use arrow_buffer::Buffer;
use batches::Rng;
use devbuf::Error;
use devbuf::ipc::{HostIpcHandle, SharedMemory};
use peer::{CHILD_LIMIT, Peer, env, fnv, say, wait_line};

const ROLE: &str = "DEVBUF_IPC_FAULTS_CHILD";

fn spawn(role: &str, env: &[(&str, String)]) -> Peer {
    Peer::spawn("child_entry", ROLE, role, env)
}

/// The tag of the memory file a handle names (bytes 24..32 of its layout).
fn tag_of(h: &HostIpcHandle) -> u64 {
    u64::from_le_bytes(Vec::from(h)[24..32].try_into().unwrap())
}

/// The name the kernel shows for the memory file of `tag`.
fn memfd_name(tag: u64) -> String {
    format!("/memfd:devbuf-{tag:016x} (deleted)")
}

/// Mappings of the memory file of `tag` in this process.
fn mappings_of(tag: u64) -> usize {
    let name = memfd_name(tag);
    std::fs::read_to_string("/proc/self/maps")
        .expect("/proc/self/maps")
        .lines()
        .filter(|l| l.ends_with(&name))
        .count()
}

/// Descriptors of this process that name the memory file of `tag`.
fn descriptors_of(tag: u64) -> usize {
    let name = memfd_name(tag);
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|t| t.as_os_str() == name.as_str())
        .count()
}

/// `n` reproducible random bytes.
fn data(seed: u64, n: usize) -> Vec<u8> {
    Rng::new(seed).bytes(n)
}

/// Shared memory holding `data(seed, n)`.
fn filled(seed: u64, n: usize) -> SharedMemory {
    let mut shm = SharedMemory::create(n).unwrap();
    shm.copy_from_slice(&data(seed, n));
    shm
}

/// The child side of every cross-process test.
#[test]
#[ignore = "child role of the cross-process fault tests (they run it)"]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    match role.as_str() {
        "produce" => {
            // Shared memory of data(SEED, N); handles to all of it and to OFF+LEN.
            // Then wait for "exit" (or to be killed).
            let (seed, n): (u64, usize) = (env("SEED").parse().unwrap(), env("N").parse().unwrap());
            let (off, len): (usize, usize) =
                (env("OFF").parse().unwrap(), env("LEN").parse().unwrap());
            let shm = filled(seed, n);
            say("whole", shm.export_ipc(..).unwrap().to_string());
            say("slice", shm.export_ipc(off..off + len).unwrap().to_string());
            let line = wait_line();
            assert_eq!(line, "exit", "the parent says how to end");
            drop(shm);
        }
        "hold" => {
            // Map HANDLE, report its fingerprint and the mapping count, then end as
            // END says without unmapping: "wait" (the parent kills us) or "exit" (exit
            // with status 3, no destructors run).
            let h = env("HANDLE").parse::<HostIpcHandle>().unwrap();
            let b = h.open().unwrap();
            say(
                "holding",
                format!("{:016x} {}", fnv(b.as_slice()), mappings_of(tag_of(&h))),
            );
            match env("END").as_str() {
                "exit" => std::process::exit(3),
                _ => {
                    wait_line();
                    panic!("the parent was to kill this process");
                }
            }
        }
        "open_twice" => {
            // Open HANDLE twice and SLICE once (three mappings of one file), close them
            // in ORDER ("ab": the first opening first; "ba": the second first), checking
            // what stays open after each close; then open again once all are closed.
            let (seed, n): (u64, usize) = (env("SEED").parse().unwrap(), env("N").parse().unwrap());
            let expected = data(seed, n);
            let h = env("HANDLE").parse::<HostIpcHandle>().unwrap();
            let s = env("SLICE").parse::<HostIpcHandle>().unwrap();
            let tag = tag_of(&h);
            let (a, b) = (h.open().unwrap(), h.open().unwrap());
            let c = s.open().unwrap();
            let slice_ok = c.as_slice() == &expected[s.offset()..s.offset() + s.len()];
            say(
                "opened",
                format!(
                    "{} {} {} {}",
                    a.as_slice() == expected,
                    b.as_slice() == expected,
                    slice_ok,
                    mappings_of(tag)
                ),
            );
            let (first, second) = if env("ORDER") == "ab" { (a, b) } else { (b, a) };
            drop(first);
            say(
                "after_first",
                format!("{} {}", second.as_slice() == expected, mappings_of(tag)),
            );
            drop(second);
            say(
                "after_second",
                format!(
                    "{} {}",
                    c.as_slice() == &expected[s.offset()..s.offset() + s.len()],
                    mappings_of(tag)
                ),
            );
            drop(c);
            let again = h.open().unwrap();
            say(
                "reopened",
                format!("{} {}", again.as_slice() == expected, mappings_of(tag)),
            );
            drop(again);
            say("closed", mappings_of(tag));
        }
        "address_space_limit" => {
            // With the address space limited to what the process maps now plus LIMIT
            // bytes, shared memory beyond the limit is refused (an error), and smaller
            // memory still works.
            let extra: u64 = env("LIMIT").parse().unwrap();
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let vm_kib: u64 = status
                .lines()
                .find_map(|l| l.strip_prefix("VmSize:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .expect("VmSize in /proc/self/status");
            let mut rl = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // Safety: getrlimit with a valid resource and a pointer to a live struct.
            assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut rl) }, 0);
            // The soft limit only, within the hard one (a shell's `ulimit -v` may have
            // set both).
            rl.rlim_cur = (vm_kib * 1024 + extra).min(rl.rlim_max);
            // Safety: setrlimit with a valid resource and a pointer to a live struct.
            assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &rl) }, 0);
            let big = SharedMemory::create(4 * extra as usize);
            say(
                "big",
                match big {
                    Ok(m) => format!("NONE: created {} bytes", m.len()),
                    Err(e) => format!("{} | {e}", matches!(e, Error::Io { .. })),
                },
            );
            let small = filled(9, 1 << 20);
            let back = small.export_ipc(..).unwrap().open().unwrap();
            say("small", back.as_slice() == data(9, 1 << 20).as_slice());
        }
        other => panic!("unknown child role {other}"),
    }
}

/// The producer exits (cleanly, or killed) while this process maps its memory: the
/// mappings stay valid with the producer's bytes until dropped, a new open is an error
/// saying the exporter is gone, and nothing stays mapped afterwards.
#[test]
fn producer_gone_while_the_consumer_maps_its_memory() {
    for (i, end) in ["exit", "kill"].into_iter().enumerate() {
        let (seed, n, off, len) = (100 + i as u64, 3 * 4096 + 123, 4097, 5000);
        let expected = data(seed, n);
        let mut p = spawn(
            "produce",
            &[
                ("SEED", seed.to_string()),
                ("N", n.to_string()),
                ("OFF", off.to_string()),
                ("LEN", len.to_string()),
            ],
        );
        let whole = p.expect("whole").parse::<HostIpcHandle>().unwrap();
        let slice = p.expect("slice").parse::<HostIpcHandle>().unwrap();
        let tag = tag_of(&whole);
        let (a, b): (Buffer, Buffer) = (whole.open().unwrap(), slice.open().unwrap());
        assert_eq!(a.as_slice(), expected.as_slice());
        assert_eq!(b.as_slice(), &expected[off..off + len]);
        assert_eq!(mappings_of(tag), 2, "one mapping per open");
        assert_eq!(descriptors_of(tag), 0, "opening keeps no descriptor");
        let status = match end {
            "exit" => {
                p.send("exit");
                let (status, seen) = p.wait_exit(CHILD_LIMIT);
                assert!(status.success(), "{status}: {seen:#?}");
                status
            }
            _ => p.kill(),
        };
        println!("producer ended ({end}): {status}");
        // The memory lives as long as a mapping does.
        assert_eq!(a.as_slice(), expected.as_slice(), "{end}: whole mapping");
        assert_eq!(
            b.as_slice(),
            &expected[off..off + len],
            "{end}: slice mapping"
        );
        let e = whole.open().unwrap_err().to_string();
        assert!(e.contains("has exited or dropped"), "{end}: {e}");
        drop(a);
        assert_eq!(mappings_of(tag), 1, "{end}");
        assert_eq!(
            b.as_slice(),
            &expected[off..off + len],
            "{end}: after the other closed"
        );
        drop(b);
        assert_eq!(mappings_of(tag), 0, "{end}: nothing stays mapped");
    }
}

/// A consumer dies (killed, or exits without closing) while it maps this process's
/// memory: the memory and its handle are unaffected (another consumer reads the same
/// bytes), and dropping it leaves no mapping or descriptor behind.
#[test]
fn consumer_dies_holding_a_mapping_and_nothing_leaks() {
    let (seed, n) = (7u64, 64 * 1024 + 5);
    let expected = data(seed, n);
    let shm = filled(seed, n);
    let h = shm.export_ipc(..).unwrap();
    let tag = tag_of(&h);
    assert_eq!((mappings_of(tag), descriptors_of(tag)), (1, 1));
    for end in ["wait", "exit"] {
        let mut p = spawn("hold", &[("HANDLE", h.to_string()), ("END", end.into())]);
        assert_eq!(p.expect("holding"), format!("{:016x} 1", fnv(&expected)));
        let status = match end {
            "wait" => p.kill(),
            _ => p.wait_exit(CHILD_LIMIT).0,
        };
        println!("consumer ended ({end}): {status}");
        assert!(!status.success(), "{end}: {status}");
        if end == "exit" {
            assert_eq!(status.code(), Some(3));
        }
        assert_eq!(
            &shm[..],
            expected.as_slice(),
            "{end}: the exporter's memory"
        );
        assert_eq!((mappings_of(tag), descriptors_of(tag)), (1, 1), "{end}");
    }
    // The handle still works for a consumer that behaves.
    let mut p = spawn("hold", &[("HANDLE", h.to_string()), ("END", "exit".into())]);
    assert_eq!(p.expect("holding"), format!("{:016x} 1", fnv(&expected)));
    let _ = p.wait_exit(CHILD_LIMIT);
    drop(shm);
    assert_eq!(
        (mappings_of(tag), descriptors_of(tag)),
        (0, 0),
        "freed at the drop"
    );
    let e = h.open().unwrap_err().to_string();
    assert!(
        e.contains("has exited or dropped") || e.contains("not the shared memory"),
        "{e}"
    );
}

/// A handle opened twice (plus a slice of the same memory) in another process: each
/// opening is a mapping of its own; closing them in either order leaves the others
/// valid, and opening again after all are closed works.
#[test]
fn a_handle_opened_twice_closes_in_either_order() {
    let (seed, n) = (21u64, 5 * 4096 + 77);
    let shm = filled(seed, n);
    let h = shm.export_ipc(..).unwrap();
    let s = shm.export_ipc(4095..8194).unwrap();
    for order in ["ab", "ba"] {
        let mut p = spawn(
            "open_twice",
            &[
                ("SEED", seed.to_string()),
                ("N", n.to_string()),
                ("HANDLE", h.to_string()),
                ("SLICE", s.to_string()),
                ("ORDER", order.into()),
            ],
        );
        assert_eq!(p.expect("opened"), "true true true 3", "{order}");
        assert_eq!(p.expect("after_first"), "true 2", "{order}");
        assert_eq!(p.expect("after_second"), "true 1", "{order}");
        assert_eq!(p.expect("reopened"), "true 1", "{order}");
        assert_eq!(p.expect("closed"), "0", "{order}");
        p.finish();
    }
    // The same in this process (the exporter may open its own handles).
    let tag = tag_of(&h);
    let expected = data(seed, n);
    for first_a in [true, false] {
        let (a, b) = (h.open().unwrap(), h.open().unwrap());
        assert_eq!(
            mappings_of(tag),
            3,
            "the exporter's own mapping and two more"
        );
        let (first, second) = if first_a { (a, b) } else { (b, a) };
        drop(first);
        assert_eq!(second.as_slice(), expected.as_slice());
        assert_eq!(mappings_of(tag), 2);
        drop(second);
        assert_eq!(mappings_of(tag), 1);
    }
    assert_eq!(&shm[..], expected.as_slice());
}

/// Memory the OS refuses — more than the address space, or beyond a process's address
/// space limit — is an error, and the process goes on (smaller memory works).
#[test]
fn shared_memory_the_os_refuses_is_an_error() {
    for n in [1usize << 50, usize::MAX / 2, usize::MAX] {
        let e = SharedMemory::create(n).map(|m| m.len()).unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{n}: {e}");
        assert!(e.to_string().contains("creating shared memory"), "{n}: {e}");
    }
    let shm = filled(3, 4096);
    assert_eq!(
        shm.export_ipc(..).unwrap().open().unwrap().as_slice(),
        data(3, 4096).as_slice()
    );

    let mut p = spawn(
        "address_space_limit",
        &[("LIMIT", (64u64 << 20).to_string())],
    );
    let big = p.expect("big");
    assert!(big.starts_with("true | "), "{big}");
    assert!(big.contains("mapping 268435456 bytes"), "{big}");
    assert_eq!(p.expect("small"), "true");
    p.finish();
}
