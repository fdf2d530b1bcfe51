//! The C structures: `ArrowArray` (C Data Interface), `ArrowDeviceArray` (C Device
//! Data Interface) and `ArrowDeviceArrayStream` (C Device Stream Interface), laid out
//! exactly as the C definitions (checked at compile time below and against a C
//! compiler in the tests).
//!
//! The fields are private: a structure made by devbuf's exporters is valid by
//! construction, one from a foreign producer enters through an `unsafe` `from_raw`,
//! and dropping a structure that is not released calls its release callback (so an
//! owned structure is released exactly once, whatever path the program takes).

use std::ffi::{c_char, c_int, c_void};
use std::mem::{offset_of, size_of};

use arrow_data::ffi::FFI_ArrowArray;
use arrow_schema::ffi::FFI_ArrowSchema;

/// The device type of an [`ArrowDeviceArray`] (`ArrowDeviceType`, an `int32_t`; the
/// values are dlpack's `DLDeviceType`).
pub type ArrowDeviceType = i32;

/// CPU memory: the same as a plain C Data Interface `ArrowArray`.
pub const ARROW_DEVICE_CPU: ArrowDeviceType = 1;
/// CUDA device memory (`cudaMalloc` / `cuMemAlloc`).
pub const ARROW_DEVICE_CUDA: ArrowDeviceType = 2;
/// Page-locked host memory from CUDA (`cudaMallocHost` / `cuMemAllocHost`).
pub const ARROW_DEVICE_CUDA_HOST: ArrowDeviceType = 3;
/// OpenCL device memory.
pub const ARROW_DEVICE_OPENCL: ArrowDeviceType = 4;
/// Vulkan buffer.
pub const ARROW_DEVICE_VULKAN: ArrowDeviceType = 7;
/// Apple Metal.
pub const ARROW_DEVICE_METAL: ArrowDeviceType = 8;
/// Verilog simulator buffer.
pub const ARROW_DEVICE_VPI: ArrowDeviceType = 9;
/// AMD ROCm device memory.
pub const ARROW_DEVICE_ROCM: ArrowDeviceType = 10;
/// Page-locked host memory from ROCm (`hipMallocHost`).
pub const ARROW_DEVICE_ROCM_HOST: ArrowDeviceType = 11;
/// Extension device (producer-defined semantics).
pub const ARROW_DEVICE_EXT_DEV: ArrowDeviceType = 12;
/// CUDA managed (unified) memory (`cudaMallocManaged`).
pub const ARROW_DEVICE_CUDA_MANAGED: ArrowDeviceType = 13;
/// oneAPI unified shared memory.
pub const ARROW_DEVICE_ONEAPI: ArrowDeviceType = 14;
/// WebGPU.
pub const ARROW_DEVICE_WEBGPU: ArrowDeviceType = 15;
/// Qualcomm Hexagon DSP.
pub const ARROW_DEVICE_HEXAGON: ArrowDeviceType = 16;

/// The name of a device type as the specification spells it (`"CUDA"`,
/// `"CUDA_HOST"`...), or `"unknown"`: what error messages call it.
pub(crate) fn device_type_name(device_type: ArrowDeviceType) -> &'static str {
    match device_type {
        ARROW_DEVICE_CPU => "CPU",
        ARROW_DEVICE_CUDA => "CUDA",
        ARROW_DEVICE_CUDA_HOST => "CUDA_HOST",
        ARROW_DEVICE_OPENCL => "OPENCL",
        ARROW_DEVICE_VULKAN => "VULKAN",
        ARROW_DEVICE_METAL => "METAL",
        ARROW_DEVICE_VPI => "VPI",
        ARROW_DEVICE_ROCM => "ROCM",
        ARROW_DEVICE_ROCM_HOST => "ROCM_HOST",
        ARROW_DEVICE_EXT_DEV => "EXT_DEV",
        ARROW_DEVICE_CUDA_MANAGED => "CUDA_MANAGED",
        ARROW_DEVICE_ONEAPI => "ONEAPI",
        ARROW_DEVICE_WEBGPU => "WEBGPU",
        ARROW_DEVICE_HEXAGON => "HEXAGON",
        _ => "unknown",
    }
}

/// Whether index `i` is below the C count `n` (an `int64_t` that a foreign producer may
/// have set negative; `i` may exceed `i64::MAX`, so it is not cast).
fn in_range(i: usize, n: i64) -> bool {
    u64::try_from(n).is_ok_and(|n| (i as u64) < n)
}

/// The release callback of an [`ArrowArray`].
pub type ArrowArrayRelease = unsafe extern "C" fn(*mut ArrowArray);

/// `struct ArrowArray` of the Arrow C Data Interface.
///
/// Buffers may live on a device (see [`ArrowDeviceArray`]); everything else is host
/// memory. Dropping a structure that is not released calls its release callback.
///
/// ```
/// use devbuf_core::arrow::c_device::ArrowArray;
/// let a = ArrowArray::default();
/// assert!(a.is_released());
/// ```
#[repr(C)]
#[derive(Debug)]
pub struct ArrowArray {
    pub(crate) length: i64,
    pub(crate) null_count: i64,
    pub(crate) offset: i64,
    pub(crate) n_buffers: i64,
    pub(crate) n_children: i64,
    pub(crate) buffers: *mut *const c_void,
    pub(crate) children: *mut *mut ArrowArray,
    pub(crate) dictionary: *mut ArrowArray,
    pub(crate) release: Option<ArrowArrayRelease>,
    pub(crate) private_data: *mut c_void,
}

// Safety: the C Data Interface lets a consumer hand a structure to another thread and
// release it there; devbuf's own release callbacks are thread-safe, and importing a
// foreign structure requires the same of its producer (see `from_raw`).
unsafe impl Send for ArrowArray {}
// Safety: shared references only read plain fields.
unsafe impl Sync for ArrowArray {}

/// A released (empty) structure, e.g. as an out-parameter for a producer.
impl Default for ArrowArray {
    fn default() -> ArrowArray {
        ArrowArray {
            length: 0,
            null_count: 0,
            offset: 0,
            n_buffers: 0,
            n_children: 0,
            buffers: std::ptr::null_mut(),
            children: std::ptr::null_mut(),
            dictionary: std::ptr::null_mut(),
            release: None,
            private_data: std::ptr::null_mut(),
        }
    }
}

impl ArrowArray {
    /// Moves the structure out of `ptr` (a bitwise copy), marking the source released
    /// as the specification's "moving an array" prescribes. (Public callers take a C
    /// `ArrowArray*` with arrow-rs's `FFI_ArrowArray::from_raw` and
    /// `ArrowArray::from(FFI_ArrowArray)`: the same move, the same layout.)
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes and point at an initialised
    /// `ArrowArray` that is released or valid per the C Data Interface (buffers,
    /// children and dictionary readable as its data type says), whose release callback
    /// may be called from any thread.
    pub(crate) unsafe fn from_raw(ptr: *mut ArrowArray) -> ArrowArray {
        // Safety: guaranteed by the caller; `replace` leaves a released structure behind.
        unsafe { std::ptr::replace(ptr, ArrowArray::default()) }
    }

    /// Whether the structure is released (its `release` callback is null).
    pub fn is_released(&self) -> bool {
        self.release.is_none()
    }

    /// `length`: the number of elements.
    pub fn length(&self) -> i64 {
        self.length
    }

    /// `null_count`: the number of nulls, or -1 when not computed.
    pub fn null_count(&self) -> i64 {
        self.null_count
    }

    /// `offset`: the logical offset into the buffers, in elements.
    pub fn offset(&self) -> i64 {
        self.offset
    }

    /// `n_buffers`.
    pub fn n_buffers(&self) -> i64 {
        self.n_buffers
    }

    /// `n_children`.
    pub fn n_children(&self) -> i64 {
        self.n_children
    }

    /// The pointer `buffers[i]` (a device pointer for device arrays), or `None` when
    /// `i` is out of range or the structure is released.
    pub fn buffer(&self, i: usize) -> Option<*const c_void> {
        if self.is_released() || self.buffers.is_null() || !in_range(i, self.n_buffers) {
            return None;
        }
        // Safety: a live structure has `n_buffers` readable pointers at `buffers`.
        Some(unsafe { *self.buffers.add(i) })
    }

    /// Child `i`, or `None` when out of range, null or the structure is released.
    pub fn child(&self, i: usize) -> Option<&ArrowArray> {
        if self.is_released() || self.children.is_null() || !in_range(i, self.n_children) {
            return None;
        }
        // Safety: a live structure has `n_children` readable child pointers, each to a
        // structure that lives as long as the parent.
        unsafe { (*self.children.add(i)).as_ref() }
    }

    /// The dictionary values of a dictionary-encoded array.
    pub fn dictionary(&self) -> Option<&ArrowArray> {
        if self.is_released() {
            return None;
        }
        // Safety: a live structure's dictionary is null or valid as long as the parent.
        unsafe { self.dictionary.as_ref() }
    }

    /// Moves child `i` out of this structure (the C Data Interface's "moving child
    /// arrays"): the returned structure is released independently, and the child slot
    /// is marked released. The parent must then be released (dropped) without being
    /// used as a whole again: importing it is an error.
    pub fn take_child(&mut self, i: usize) -> Option<ArrowArray> {
        if self.is_released() || self.children.is_null() || !in_range(i, self.n_children) {
            return None;
        }
        // Safety: a live structure has `n_children` child pointers, each null or to a
        // valid structure that the parent owns; moving it out leaves a released one.
        unsafe {
            let p = *self.children.add(i);
            if p.is_null() || (*p).is_released() {
                return None;
            }
            Some(ArrowArray::from_raw(p))
        }
    }
}

impl Drop for ArrowArray {
    fn drop(&mut self) {
        if let Some(release) = self.release {
            // Safety: a structure that is not released owns its release callback, which
            // must be called exactly once; the callback marks it released.
            unsafe { release(self) };
            self.release = None;
        }
    }
}

impl From<FFI_ArrowArray> for ArrowArray {
    /// Takes over an arrow-rs C Data Interface array (same layout; no copy).
    fn from(a: FFI_ArrowArray) -> ArrowArray {
        let a = std::mem::ManuallyDrop::new(a);
        // Safety: both types are `#[repr(C)]` with the C `ArrowArray` layout (checked at
        // compile time below), and the release callbacks' argument types are raw
        // pointers, which are ABI-compatible. `a` is not dropped, so ownership moves.
        unsafe { std::ptr::read((&*a as *const FFI_ArrowArray).cast::<ArrowArray>()) }
    }
}

impl From<ArrowArray> for FFI_ArrowArray {
    /// Hands the structure to arrow-rs (same layout; no copy), e.g. to import a CPU
    /// array with `arrow_array::ffi::from_ffi`.
    fn from(a: ArrowArray) -> FFI_ArrowArray {
        let a = std::mem::ManuallyDrop::new(a);
        // Safety: as in `From<FFI_ArrowArray> for ArrowArray`.
        unsafe { std::ptr::read((&*a as *const ArrowArray).cast::<FFI_ArrowArray>()) }
    }
}

/// `struct ArrowDeviceArray` of the Arrow C Device Data Interface: an [`ArrowArray`]
/// whose buffers live on `device_type`/`device_id`, with an optional event to wait on
/// before reading them.
///
/// Dropping a structure that is not released calls the array's release callback.
///
/// ```
/// use devbuf_core::arrow::c_device::{export_array, ExportDevice, ARROW_DEVICE_CPU};
/// use arrow_array::Int32Array;
/// let (array, _schema) = export_array(&Int32Array::from(vec![1, 2, 3]), ExportDevice::Cpu)?;
/// assert_eq!(array.device_type(), ARROW_DEVICE_CPU);
/// assert_eq!(array.device_id(), -1);
/// assert_eq!(array.array().length(), 3);
/// assert!(array.sync_event().is_null());
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[repr(C)]
#[derive(Debug)]
pub struct ArrowDeviceArray {
    pub(crate) array: ArrowArray,
    pub(crate) device_id: i64,
    pub(crate) device_type: ArrowDeviceType,
    pub(crate) sync_event: *mut c_void,
    pub(crate) reserved: [i64; 3],
}

// Safety: see `ArrowArray`; the sync event is only read by importers.
unsafe impl Send for ArrowDeviceArray {}
// Safety: shared references only read plain fields.
unsafe impl Sync for ArrowDeviceArray {}

/// A released structure (e.g. an out-parameter for a producer, or the end-of-stream
/// marker of a stream).
impl Default for ArrowDeviceArray {
    fn default() -> ArrowDeviceArray {
        ArrowDeviceArray {
            array: ArrowArray::default(),
            device_id: -1,
            device_type: 0,
            sync_event: std::ptr::null_mut(),
            reserved: [0; 3],
        }
    }
}

impl ArrowDeviceArray {
    /// Assembles a device array from a C Data Interface array whose buffers live on
    /// `device_type`/`device_id` (e.g. a child moved out of a device array), with an
    /// optional event. The reserved words are zero.
    ///
    /// # Safety
    /// The buffers must be memory of that device type, and `sync_event` null or a
    /// pointer to a live event of the device type's kind (`CUevent` for CUDA) that
    /// outlives the structure's release.
    pub unsafe fn new(
        array: ArrowArray,
        device_id: i64,
        device_type: ArrowDeviceType,
        sync_event: *mut c_void,
    ) -> ArrowDeviceArray {
        ArrowDeviceArray {
            array,
            device_id,
            device_type,
            sync_event,
            reserved: [0; 3],
        }
    }

    /// Moves the structure out of `ptr`, marking the source released.
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes and point at an initialised
    /// `ArrowDeviceArray` that is released or valid per the C Device Data Interface:
    /// buffers of the memory `device_type` says, readable as the data type describes;
    /// `sync_event` null or pointing at a live event of the device type's kind (a
    /// `CUevent` for CUDA and CUDA_HOST) that lives until the array is released; and a
    /// release callback that may be called from any thread.
    pub unsafe fn from_raw(ptr: *mut ArrowDeviceArray) -> ArrowDeviceArray {
        // Safety: guaranteed by the caller; `replace` leaves a released structure behind.
        unsafe { std::ptr::replace(ptr, ArrowDeviceArray::default()) }
    }

    /// Whether the structure is released (its array's `release` is null; users:
    /// `array().is_released()`).
    pub(crate) fn is_released(&self) -> bool {
        self.array.is_released()
    }

    /// The embedded [`ArrowArray`].
    pub fn array(&self) -> &ArrowArray {
        &self.array
    }

    /// `device_id`: the device ordinal (-1 for CPU).
    pub fn device_id(&self) -> i64 {
        self.device_id
    }

    /// `device_type`, e.g. [`ARROW_DEVICE_CUDA`].
    pub fn device_type(&self) -> ArrowDeviceType {
        self.device_type
    }

    /// `sync_event`: null, or a pointer to the producer's event (`CUevent*` for CUDA).
    pub fn sync_event(&self) -> *mut c_void {
        self.sync_event
    }

    /// Moves the embedded array out (for a consumer that only wants the C Data
    /// Interface part); `self` is left released.
    pub fn take_array(&mut self) -> ArrowArray {
        std::mem::take(&mut self.array)
    }
}

/// `get_schema` of an [`ArrowDeviceArrayStream`].
pub(crate) type StreamGetSchema =
    unsafe extern "C" fn(*mut ArrowDeviceArrayStream, *mut FFI_ArrowSchema) -> c_int;
/// `get_next` of an [`ArrowDeviceArrayStream`].
pub(crate) type StreamGetNext =
    unsafe extern "C" fn(*mut ArrowDeviceArrayStream, *mut ArrowDeviceArray) -> c_int;
/// `get_last_error` of an [`ArrowDeviceArrayStream`].
pub(crate) type StreamGetLastError =
    unsafe extern "C" fn(*mut ArrowDeviceArrayStream) -> *const c_char;
/// `release` of an [`ArrowDeviceArrayStream`].
pub(crate) type StreamRelease = unsafe extern "C" fn(*mut ArrowDeviceArrayStream);

/// `struct ArrowDeviceArrayStream` of the C Device Stream Interface: a pull-style
/// source of [`ArrowDeviceArray`]s of one schema on one device type.
///
/// Dropping a stream that is not released calls its release callback.
///
/// ```
/// use std::sync::Arc;
/// use arrow_schema::Schema;
/// use devbuf_core::arrow::Batch;
/// use devbuf_core::arrow::c_device::{export_stream, ExportDevice, ARROW_DEVICE_CPU};
/// let stream = export_stream(Arc::new(Schema::empty()), Vec::<devbuf_core::Result<Batch>>::new(), ExportDevice::Cpu);
/// assert_eq!(stream.device_type(), ARROW_DEVICE_CPU);
/// assert!(!stream.is_released());
/// drop(stream); // released here
/// ```
#[repr(C)]
#[derive(Debug)]
pub struct ArrowDeviceArrayStream {
    pub(crate) device_type: ArrowDeviceType,
    pub(crate) get_schema: Option<StreamGetSchema>,
    pub(crate) get_next: Option<StreamGetNext>,
    pub(crate) get_last_error: Option<StreamGetLastError>,
    pub(crate) release: Option<StreamRelease>,
    pub(crate) private_data: *mut c_void,
}

// Safety: a stream may be handed to another thread (its calls are serialised by
// `&mut`); devbuf's producers only hold `Send` state, and importing a foreign stream
// requires the same (see `from_raw`).
unsafe impl Send for ArrowDeviceArrayStream {}

/// A released stream (e.g. an out-parameter for a producer).
impl Default for ArrowDeviceArrayStream {
    fn default() -> ArrowDeviceArrayStream {
        ArrowDeviceArrayStream {
            device_type: 0,
            get_schema: None,
            get_next: None,
            get_last_error: None,
            release: None,
            private_data: std::ptr::null_mut(),
        }
    }
}

impl ArrowDeviceArrayStream {
    /// Moves the stream out of `ptr`, marking the source released.
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes and point at an initialised stream that
    /// is released or valid per the C Device Stream Interface, whose callbacks may be
    /// called from any thread (one at a time), and whose arrays satisfy
    /// [`ArrowDeviceArray::from_raw`]'s requirements.
    pub unsafe fn from_raw(ptr: *mut ArrowDeviceArrayStream) -> ArrowDeviceArrayStream {
        // Safety: guaranteed by the caller; `replace` leaves a released stream behind.
        unsafe { std::ptr::replace(ptr, ArrowDeviceArrayStream::default()) }
    }

    /// Whether the stream is released.
    pub fn is_released(&self) -> bool {
        self.release.is_none()
    }

    /// The device type of every array of the stream.
    pub fn device_type(&self) -> ArrowDeviceType {
        self.device_type
    }
}

impl Drop for ArrowDeviceArrayStream {
    fn drop(&mut self) {
        if let Some(release) = self.release {
            // Safety: a stream that is not released owns its release callback, which
            // must be called exactly once; it marks the stream released.
            unsafe { release(self) };
            self.release = None;
        }
    }
}

// ---------------------------------------------------------------------------
// The C layout, checked at compile time (x86-64 / aarch64: 8-byte pointers; the tests
// compare with what a C compiler says).
// ---------------------------------------------------------------------------

const _: () = {
    assert!(
        size_of::<*const c_void>() == 8,
        "devbuf supports 64-bit targets only"
    );
    assert!(size_of::<Option<ArrowArrayRelease>>() == 8);

    assert!(size_of::<ArrowArray>() == 80);
    assert!(offset_of!(ArrowArray, length) == 0);
    assert!(offset_of!(ArrowArray, null_count) == 8);
    assert!(offset_of!(ArrowArray, offset) == 16);
    assert!(offset_of!(ArrowArray, n_buffers) == 24);
    assert!(offset_of!(ArrowArray, n_children) == 32);
    assert!(offset_of!(ArrowArray, buffers) == 40);
    assert!(offset_of!(ArrowArray, children) == 48);
    assert!(offset_of!(ArrowArray, dictionary) == 56);
    assert!(offset_of!(ArrowArray, release) == 64);
    assert!(offset_of!(ArrowArray, private_data) == 72);
    assert!(size_of::<ArrowArray>() == size_of::<FFI_ArrowArray>());

    assert!(size_of::<ArrowDeviceArray>() == 128);
    assert!(offset_of!(ArrowDeviceArray, array) == 0);
    assert!(offset_of!(ArrowDeviceArray, device_id) == 80);
    assert!(offset_of!(ArrowDeviceArray, device_type) == 88);
    assert!(offset_of!(ArrowDeviceArray, sync_event) == 96);
    assert!(offset_of!(ArrowDeviceArray, reserved) == 104);

    assert!(size_of::<ArrowDeviceArrayStream>() == 48);
    assert!(offset_of!(ArrowDeviceArrayStream, device_type) == 0);
    assert!(offset_of!(ArrowDeviceArrayStream, get_schema) == 8);
    assert!(offset_of!(ArrowDeviceArrayStream, get_next) == 16);
    assert!(offset_of!(ArrowDeviceArrayStream, get_last_error) == 24);
    assert!(offset_of!(ArrowDeviceArrayStream, release) == 32);
    assert!(offset_of!(ArrowDeviceArrayStream, private_data) == 40);

    // ArrowSchema: format, name, metadata, flags, n_children, children, dictionary,
    // release, private_data.
    assert!(size_of::<FFI_ArrowSchema>() == 72);
};

/// One structure's layout: name, size, `(field, offset)`s.
#[doc(hidden)]
pub type StructLayout = (&'static str, usize, Vec<(&'static str, usize)>);

/// The layout of each structure, for the C compiler comparison in the tests.
#[doc(hidden)]
pub fn layout_table() -> Vec<StructLayout> {
    vec![
        (
            "ArrowArray",
            size_of::<ArrowArray>(),
            vec![
                ("length", offset_of!(ArrowArray, length)),
                ("null_count", offset_of!(ArrowArray, null_count)),
                ("offset", offset_of!(ArrowArray, offset)),
                ("n_buffers", offset_of!(ArrowArray, n_buffers)),
                ("n_children", offset_of!(ArrowArray, n_children)),
                ("buffers", offset_of!(ArrowArray, buffers)),
                ("children", offset_of!(ArrowArray, children)),
                ("dictionary", offset_of!(ArrowArray, dictionary)),
                ("release", offset_of!(ArrowArray, release)),
                ("private_data", offset_of!(ArrowArray, private_data)),
            ],
        ),
        (
            "ArrowDeviceArray",
            size_of::<ArrowDeviceArray>(),
            vec![
                ("array", offset_of!(ArrowDeviceArray, array)),
                ("device_id", offset_of!(ArrowDeviceArray, device_id)),
                ("device_type", offset_of!(ArrowDeviceArray, device_type)),
                ("sync_event", offset_of!(ArrowDeviceArray, sync_event)),
                ("reserved", offset_of!(ArrowDeviceArray, reserved)),
            ],
        ),
        (
            "ArrowDeviceArrayStream",
            size_of::<ArrowDeviceArrayStream>(),
            vec![
                (
                    "device_type",
                    offset_of!(ArrowDeviceArrayStream, device_type),
                ),
                ("get_schema", offset_of!(ArrowDeviceArrayStream, get_schema)),
                ("get_next", offset_of!(ArrowDeviceArrayStream, get_next)),
                (
                    "get_last_error",
                    offset_of!(ArrowDeviceArrayStream, get_last_error),
                ),
                ("release", offset_of!(ArrowDeviceArrayStream, release)),
                (
                    "private_data",
                    offset_of!(ArrowDeviceArrayStream, private_data),
                ),
            ],
        ),
        ("ArrowSchema", size_of::<FFI_ArrowSchema>(), vec![]),
    ]
}
