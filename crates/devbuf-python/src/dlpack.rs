//! DLPack capsules (`__dlpack__`): `DLManagedTensor` (legacy, capsule `"dltensor"`) and
//! `DLManagedTensorVersioned` (DLPack 1.x, `"dltensor_versioned"`, with the read-only
//! flag).
//!
//! Written here rather than taken from a crate: the structs are a small, frozen C ABI
//! (dlpack.h), and the crates that wrap them (`dlpark`) pin their own PyO3 version, which
//! would tie this module's PyO3 to theirs.
//!
//! Lifetime: the capsule's `manager_ctx` owns a clone of the array (its memory is
//! reference counted on the Rust side), so the memory lives until the consumer calls the
//! deleter, or until the capsule is collected unconsumed. The deleter needs no GIL.

use std::ffi::{c_char, c_void};

use devbuf::ElementType;
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

/// `kDLCPU`.
pub const KDL_CPU: i32 = 1;
/// `kDLCUDA`.
pub const KDL_CUDA: i32 = 2;

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
struct DLPackVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
struct DLManagedTensorVersioned {
    version: DLPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

const DLPACK_FLAG_BITMASK_READ_ONLY: u64 = 1;

/// What a capsule exports: the owner (kept alive by the capsule) and the layout.
pub struct Export {
    /// Keeps the memory alive (a clone of the array; `Send`, dropped without the GIL).
    pub owner: Box<dyn std::any::Any + Send>,
    pub data: u64,
    pub device_type: i32,
    pub device_id: i32,
    pub element: ElementType,
    pub shape: Vec<usize>,
    /// Byte strides (multiples of the element size).
    pub strides: Vec<usize>,
    pub readonly: bool,
}

struct Ctx {
    _owner: Box<dyn std::any::Any + Send>,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

fn dtype(e: ElementType) -> DLDataType {
    use ElementType::*;
    let code = match e {
        Bool => 6,
        Int8 | Int16 | Int32 | Int64 => 0,
        UInt8 | UInt16 | UInt32 | UInt64 => 1,
        Float16 | Float32 | Float64 => 2,
        Complex64 | Complex128 => 5,
    };
    DLDataType {
        code,
        bits: (e.size() * 8) as u8,
        lanes: 1,
    }
}

fn tensor(e: &Export, ctx: &mut Ctx) -> DLTensor {
    DLTensor {
        data: e.data as *mut c_void,
        device: DLDevice {
            device_type: e.device_type,
            device_id: e.device_id,
        },
        ndim: e.shape.len() as i32,
        dtype: dtype(e.element),
        shape: ctx.shape.as_mut_ptr(),
        strides: ctx.strides.as_mut_ptr(),
        byte_offset: 0,
    }
}

unsafe extern "C" fn delete_legacy(t: *mut DLManagedTensor) {
    // Safety: `t` and its ctx were made by `capsule` with `Box::into_raw`; the deleter
    // is called once, by the consumer or by the capsule's destructor.
    unsafe {
        let t = Box::from_raw(t);
        drop(Box::from_raw(t.manager_ctx.cast::<Ctx>()));
    }
}

unsafe extern "C" fn delete_versioned(t: *mut DLManagedTensorVersioned) {
    // Safety: as `delete_legacy`.
    unsafe {
        let t = Box::from_raw(t);
        drop(Box::from_raw(t.manager_ctx.cast::<Ctx>()));
    }
}

const LEGACY: &std::ffi::CStr = c"dltensor";
const VERSIONED: &std::ffi::CStr = c"dltensor_versioned";

unsafe extern "C" fn capsule_destructor(capsule: *mut ffi::PyObject) {
    // A consumer renames the capsule ("used_dltensor") and owns the tensor from then
    // on; an unconsumed capsule still has its name and its tensor is deleted here.
    // Safety: called by CPython with the capsule; IsValid/GetPointer with the right
    // name do not fail (and set no error) for a capsule of that name.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, LEGACY.as_ptr()) == 1 {
            let t = ffi::PyCapsule_GetPointer(capsule, LEGACY.as_ptr()).cast::<DLManagedTensor>();
            if let Some(d) = (*t).deleter {
                d(t);
            }
        } else if ffi::PyCapsule_IsValid(capsule, VERSIONED.as_ptr()) == 1 {
            let t = ffi::PyCapsule_GetPointer(capsule, VERSIONED.as_ptr())
                .cast::<DLManagedTensorVersioned>();
            if let Some(d) = (*t).deleter {
                d(t);
            }
        }
    }
}

/// A DLPack capsule of `e`: versioned (1.0, with the read-only flag) when the consumer
/// said it takes DLPack 1 (`max_version >= (1, 0)`), else the legacy struct.
pub fn capsule(py: Python<'_>, e: Export, versioned: bool) -> PyResult<Py<PyAny>> {
    let itemsize = e.element.size();
    if e.strides.iter().any(|s| s % itemsize != 0) {
        return Err(PyBufferError::new_err(
            "strides are not multiples of the element size: DLPack cannot describe this view",
        ));
    }
    let mut ctx = Box::new(Ctx {
        shape: e.shape.iter().map(|&n| n as i64).collect(),
        strides: e.strides.iter().map(|&s| (s / itemsize) as i64).collect(),
        _owner: Box::new(()),
    });
    let dl_tensor = tensor(&e, &mut ctx);
    let readonly = e.readonly;
    ctx._owner = e.owner;
    let ctx = Box::into_raw(ctx).cast::<c_void>();
    let (pointer, name): (*mut c_void, *const c_char) = if versioned {
        let t = Box::new(DLManagedTensorVersioned {
            version: DLPackVersion { major: 1, minor: 0 },
            manager_ctx: ctx,
            deleter: Some(delete_versioned),
            flags: if readonly {
                DLPACK_FLAG_BITMASK_READ_ONLY
            } else {
                0
            },
            dl_tensor,
        });
        (Box::into_raw(t).cast(), VERSIONED.as_ptr())
    } else {
        let t = Box::new(DLManagedTensor {
            dl_tensor,
            manager_ctx: ctx,
            deleter: Some(delete_legacy),
        });
        (Box::into_raw(t).cast(), LEGACY.as_ptr())
    };
    // Safety: `pointer` is non-null and owned by the capsule from here; `name` is static.
    let cap = unsafe { ffi::PyCapsule_New(pointer, name, Some(capsule_destructor)) };
    if cap.is_null() {
        // Safety: not handed over: free it ourselves.
        unsafe {
            if versioned {
                delete_versioned(pointer.cast());
            } else {
                delete_legacy(pointer.cast());
            }
        }
        return Err(PyErr::fetch(py));
    }
    // Safety: a new reference.
    Ok(unsafe { Bound::from_owned_ptr(py, cap) }.unbind())
}

/// Parses `__dlpack__`'s `max_version` (None or `(major, minor)`): whether the consumer
/// takes a versioned capsule.
pub fn wants_versioned(max_version: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
    match max_version {
        None => Ok(false),
        Some(v) if v.is_none() => Ok(false),
        Some(v) => {
            let (major, _minor): (u32, u32) = v.extract()?;
            Ok(major >= 1)
        }
    }
}
