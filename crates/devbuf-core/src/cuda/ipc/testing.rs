//! Helpers for tests, benchmarks and examples of IPC: stream-ordered work whose timing
//! the caller controls. Not part of the stable API.
//!
//! Only with the `test-support` feature (the crate's own tests turn it on).

use std::sync::{Arc, Condvar, Mutex};

use super::super::buffer::DeviceBuffer;
use super::super::driver::{self, ipc as dipc};
use super::super::stream::Stream;
use crate::error::{Error, Result};

/// Number of IPC mappings this process holds open.
pub fn open_mapping_count() -> usize {
    super::registry::registry()
        .opened
        .values()
        .filter(|w| w.strong_count() > 0)
        .count()
}

/// Queues a device-to-device copy of all of `src` into `dst` (same length, same
/// context) on `stream`.
pub fn copy_on_stream(stream: &Stream, dst: &DeviceBuffer, src: &DeviceBuffer) -> Result<()> {
    if dst.len() != src.len() {
        return Err(Error::invalid(format!(
            "copy_on_stream: lengths differ ({} vs {})",
            dst.len(),
            src.len()
        )));
    }
    if !dst.is_mutable() {
        return Err(Error::ReadOnly("copy_on_stream destination".into()));
    }
    stream.context().bind()?;
    driver::memcpy_dtod_async(dst.address(), src.address(), src.len(), stream.raw())
}

type Gate = (Mutex<bool>, Condvar);

/// Holds a stream: work queued on it after [`StreamGate::block`] waits until the
/// gate is opened (or dropped).
pub struct StreamGate {
    gate: Arc<Gate>,
}

unsafe extern "C" fn wait_for_gate(data: *mut std::ffi::c_void) {
    // Safety: `data` is the `Arc<Gate>` leaked by `StreamGate::block` for this call.
    let gate = unsafe { Arc::from_raw(data as *const Gate) };
    let mut open = gate.0.lock().unwrap_or_else(|p| p.into_inner());
    while !*open {
        open = gate.1.wait(open).unwrap_or_else(|p| p.into_inner());
    }
}

impl StreamGate {
    /// Blocks `stream` (on the device side) until the gate opens.
    pub fn block(stream: &Stream) -> Result<StreamGate> {
        let gate: Arc<Gate> = Arc::new((Mutex::new(false), Condvar::new()));
        let data = Arc::into_raw(gate.clone()) as *mut std::ffi::c_void;
        stream.context().bind()?;
        // Safety: `data` stays valid until the host function runs (it owns one
        // reference), and the function only waits on a condition variable.
        let r = unsafe { dipc::launch_host_func(stream.raw(), wait_for_gate, data) };
        if let Err(e) = r {
            // Safety: the function was not queued, so reclaim its reference.
            drop(unsafe { Arc::from_raw(data as *const Gate) });
            return Err(e);
        }
        Ok(StreamGate { gate })
    }

    /// Lets the stream run on.
    pub fn open(&self) {
        *self.gate.0.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.gate.1.notify_all();
    }
}

impl Drop for StreamGate {
    fn drop(&mut self) {
        self.open();
    }
}
