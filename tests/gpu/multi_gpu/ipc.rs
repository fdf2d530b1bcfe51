//! IPC between processes that work on different devices.

use super::*;

// IPC across devices.

const ROLE: &str = "DEVBUF_MULTI_GPU_CHILD";
const CHILD: &str = "multi_gpu::ipc::child_entry";

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
    let h = env("HANDLE").parse::<IpcMemHandle>().unwrap();
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
    let got = mine.to_vec::<u8>().unwrap();
    let stream = Stream::new(&work).unwrap();
    let mine2 = work.allocate(len + 3).unwrap();
    mine2.copy_from_device_on(3, &opened, &stream).unwrap();
    stream.synchronize().unwrap();
    let got2 = mine2.slice(3, len).unwrap().to_host().unwrap();
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
    let src = DeviceBuffer::from_slice(&work, &inverted).unwrap();
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
    let buf = DeviceBuffer::from_slice(export, &host).unwrap();
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
        ("HANDLE", h.to_string()),
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
        &buf.to_vec::<u8>().unwrap(),
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
