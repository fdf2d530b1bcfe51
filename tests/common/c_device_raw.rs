//! The C Data Interface structures as a foreign producer sees them (the raw C layout,
//! every field writable), for feeding devbuf malformed structures
//! (tests/c_device_host.rs, tests/fuzz_c_device.rs).

#![allow(dead_code)]

use std::ffi::c_void;

/// `struct ArrowArray`.
#[repr(C)]
pub struct RawArray {
    pub length: i64,
    pub null_count: i64,
    pub offset: i64,
    pub n_buffers: i64,
    pub n_children: i64,
    pub buffers: *mut *const c_void,
    pub children: *mut *mut RawArray,
    pub dictionary: *mut RawArray,
    pub release: Option<unsafe extern "C" fn(*mut RawArray)>,
    pub private_data: *mut c_void,
}

/// `struct ArrowDeviceArray`.
#[repr(C)]
pub struct RawDeviceArray {
    pub array: RawArray,
    pub device_id: i64,
    pub device_type: i32,
    pub sync_event: *mut c_void,
    pub reserved: [i64; 3],
}
