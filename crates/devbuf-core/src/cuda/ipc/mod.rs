//! Sharing device memory and events between processes: [`IpcMemHandle`] and
//! [`IpcEventHandle`].
//!
//! How it works, the lifetime contract and the byte layouts are documented on the
//! public module, `crate::ipc`.
//!
//! # Files
//!
//! This file: the byte-layout constants and the device checks both handles share.
//! `mem.rs`: [`IpcMemHandle`]. `event.rs`: [`IpcEventHandle`]. `registry.rs`: the
//! process-wide registry of exports and mappings. `testing.rs` (feature `test-support`):
//! stream-ordered helpers for the tests.

mod event;
mod mem;
mod registry;
#[cfg(feature = "test-support")]
pub(crate) mod testing;

pub use event::IpcEventHandle;
pub use mem::IpcMemHandle;
#[allow(unused_imports)]
use {event::*, mem::*, registry::*};

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use super::buffer::{Allocation, DeviceBuffer, DeviceOwner, IpcExport};
use super::context::{Context, format_uuid};
use super::driver::{self, CUdeviceptr, ipc as dipc};
use super::stream::{Event, EventFlags};
use crate::error::{Error, Result, check_range};
use crate::handle_layout;

pub(crate) const MEM_MAGIC: &[u8; 8] = b"DEVBUFIM";
pub(crate) const EVENT_MAGIC: &[u8; 8] = b"DEVBUFIE";
/// The host shared-memory handle's magic (see `crate::ipc`), named here so that the
/// parsers can say what they were given.
pub(crate) const HOST_MAGIC: &[u8; 8] = b"DEVBUFIH";
const VERSION: u16 = 1;
const MEM_SIZE: usize = 144;
const EVENT_SIZE: usize = 120;
const FLAG_DEVICE_KNOWN: u32 = 1;
const FLAG_READ_ONLY: u32 = 2;
const FLAG_BLOCKING_SYNC: u32 = 2;
const RAW: usize = dipc::IPC_HANDLE_SIZE;

const MEM_WHAT: &str = "an IPC memory handle";
const EVENT_WHAT: &str = "an IPC event handle";
const HOST_WHAT: &str = "a host shared-memory handle";

/// The device a handle belongs to: its UUID, and its ordinal in the exporting process
/// (ordinals differ between processes; the UUID does not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct DeviceId {
    uuid: [u8; 16],
    ordinal: u32,
}

fn device_id(ctx: &Context) -> DeviceId {
    DeviceId {
        uuid: ctx.properties().uuid,
        ordinal: ctx.ordinal() as u32,
    }
}

/// The `FLAG_DEVICE_KNOWN` bit for `dev`.
fn device_flag(dev: Option<DeviceId>) -> u32 {
    if dev.is_some() { FLAG_DEVICE_KNOWN } else { 0 }
}

/// Writes the fields both handle layouts end with: device UUID and ordinal (zero when
/// unknown), exporting process id and token.
fn write_origin(w: &mut handle_layout::Writer, dev: Option<DeviceId>, pid: u32, token: u64) {
    let dev = dev.unwrap_or(DeviceId {
        uuid: [0; 16],
        ordinal: 0,
    });
    w.bytes(&dev.uuid).u32(dev.ordinal).u32(pid).u64(token);
}

/// Reads what [`write_origin`] wrote; a device recorded while the `flags` say it is
/// unknown is malformed.
fn read_origin(
    r: &mut handle_layout::Reader<'_>,
    flags: u32,
    what: &str,
) -> Result<(Option<DeviceId>, u32, u64)> {
    let uuid = r.array::<16>()?;
    let ordinal = r.u32()?;
    let pid = r.u32()?;
    let token = r.u64()?;
    let device = if flags & FLAG_DEVICE_KNOWN != 0 {
        Some(DeviceId { uuid, ordinal })
    } else if uuid != [0; 16] || ordinal != 0 {
        return Err(Error::Malformed(format!(
            "{what} records a device but its 'device known' flag is clear"
        )));
    } else {
        None
    };
    Ok((device, pid, token))
}

/// The ordinal in this process of the device a handle records (found by UUID), or
/// device 0 when it records none.
fn local_ordinal(dev: Option<DeviceId>) -> Result<usize> {
    match dev {
        Some(d) => ordinal_of(&d.uuid),
        None => Ok(0),
    }
}

/// Adds the device (when known) to a handle's `Debug` output.
fn debug_device(d: &mut fmt::DebugStruct<'_, '_>, dev: Option<DeviceId>) {
    if let Some(dev) = dev {
        d.field(
            "device",
            &format_args!("GPU-{} (ordinal {})", format_uuid(&dev.uuid), dev.ordinal),
        );
    }
}

/// The ordinal of the device with `uuid` in this process.
fn ordinal_of(uuid: &[u8; 16]) -> Result<usize> {
    let info = driver::init_with_device()?;
    let mut seen = Vec::new();
    for i in 0..info.device_count {
        let dev = driver::device_get(i)?;
        let u = driver::device_uuid(dev)?;
        if &u == uuid {
            return Ok(i);
        }
        seen.push(format!("{i}: GPU-{}", format_uuid(&u)));
    }
    Err(Error::invalid(format!(
        "no device of this process has UUID GPU-{} (the handle comes from another machine, or \
         CUDA_VISIBLE_DEVICES hides that device); devices here: {}",
        format_uuid(uuid),
        seen.join(", ")
    )))
}

fn check_device(handle_dev: Option<DeviceId>, ctx: &Context, what: &str) -> Result<()> {
    if let Some(d) = handle_dev {
        let mine = ctx.properties().uuid;
        if d.uuid != mine {
            return Err(Error::invalid(format!(
                "{what} belongs to device GPU-{} (ordinal {} in the exporting process), but this \
                 context is on device {} (GPU-{}); open it with the context of the device that \
                 has that UUID (the handle's `open()` finds it)",
                format_uuid(&d.uuid),
                d.ordinal,
                ctx.ordinal(),
                format_uuid(&mine)
            )));
        }
    }
    Ok(())
}
