//! Driver calls for streams and events.

use super::*;

/// Creates a stream. `non_blocking`: it does not synchronise with the legacy default
/// stream.
pub(crate) fn stream_create(non_blocking: bool) -> Result<CUstream> {
    let mut s: CUstream = std::ptr::null_mut();
    let flags = if non_blocking {
        sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32
    } else {
        0
    };
    // Safety: valid out pointer.
    check(
        unsafe { sys::cuStreamCreate(&mut s, flags) },
        "cuStreamCreate",
    )?;
    Ok(s)
}

/// # Safety
/// `s` must come from [`stream_create`] and not be used afterwards.
pub(crate) unsafe fn stream_destroy(s: CUstream) -> Result<()> {
    // Safety: guaranteed by the caller.
    check(unsafe { sys::cuStreamDestroy_v2(s) }, "cuStreamDestroy_v2")
}

pub(crate) fn stream_synchronize(s: CUstream) -> Result<()> {
    // Safety: `s` is a live stream or null (legacy default stream).
    check(
        unsafe { sys::cuStreamSynchronize(s) },
        "cuStreamSynchronize",
    )
}

/// Whether all work queued on `s` has finished.
pub(crate) fn stream_query(s: CUstream) -> Result<bool> {
    // Safety: `s` is a live stream or null.
    let r = unsafe { sys::cuStreamQuery(s) };
    if r == sys::CUresult::CUDA_ERROR_NOT_READY {
        return Ok(false);
    }
    check(r, "cuStreamQuery").map(|_| true)
}

/// Makes future work on `s` wait until `e` has completed (device-side; the host does
/// not block).
pub(crate) fn stream_wait_event(s: CUstream, e: CUevent) -> Result<()> {
    // Safety: live stream (or null) and live event; flags must be 0.
    check(
        unsafe { sys::cuStreamWaitEvent(s, e, 0) },
        "cuStreamWaitEvent",
    )
}

/// Event creation flags (`CU_EVENT_*`).
pub(crate) fn event_create_flags(flags: u32) -> Result<CUevent> {
    let mut e: CUevent = std::ptr::null_mut();
    // Safety: valid out pointer.
    check(
        unsafe { sys::cuEventCreate(&mut e, flags) },
        "cuEventCreate",
    )?;
    Ok(e)
}

pub(crate) const EVENT_BLOCKING_SYNC: u32 = sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32;
pub(crate) const EVENT_DISABLE_TIMING: u32 = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
pub(crate) const EVENT_INTERPROCESS: u32 = sys::CUevent_flags::CU_EVENT_INTERPROCESS as u32;

pub(crate) fn event_create(timing: bool) -> Result<CUevent> {
    event_create_flags(if timing { 0 } else { EVENT_DISABLE_TIMING })
}

pub(crate) fn event_record(e: CUevent, s: CUstream) -> Result<()> {
    // Safety: live event and stream.
    check(unsafe { sys::cuEventRecord(e, s) }, "cuEventRecord")
}

pub(crate) fn event_synchronize(e: CUevent) -> Result<()> {
    // Safety: live event.
    check(unsafe { sys::cuEventSynchronize(e) }, "cuEventSynchronize")
}

/// Whether the work captured by `e` has completed.
pub(crate) fn event_query(e: CUevent) -> Result<bool> {
    // Safety: live event.
    let r = unsafe { sys::cuEventQuery(e) };
    if r == sys::CUresult::CUDA_ERROR_NOT_READY {
        return Ok(false);
    }
    check(r, "cuEventQuery").map(|_| true)
}

/// Milliseconds between two recorded timing events.
pub(crate) fn event_elapsed_ms(start: CUevent, end: CUevent) -> Result<f32> {
    let mut ms = 0f32;
    // Safety: valid out pointer; live events.
    check(
        unsafe { sys::cuEventElapsedTime_v2(&mut ms, start, end) },
        "cuEventElapsedTime_v2",
    )?;
    Ok(ms)
}

/// # Safety
/// `e` must come from [`event_create_flags`] and not be used afterwards.
pub(crate) unsafe fn event_destroy(e: CUevent) -> Result<()> {
    // Safety: guaranteed by the caller.
    check(unsafe { sys::cuEventDestroy_v2(e) }, "cuEventDestroy_v2")
}
