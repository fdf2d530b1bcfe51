//! Consumers: `ArrowDeviceArray` (+ `ArrowSchema`) → [`DeviceArray`] (CUDA) or an
//! arrow-rs array (CPU, CUDA_HOST).
//!
//! The import moves the structure out of the caller's (marking the source released,
//! so a second import is an error), checks every field a foreign producer could get
//! wrong before reading through it, computes each buffer's size from the data type,
//! the length and the offset, and wraps the buffers without copying: device buffers as
//! [`Context::view`]s, host buffers as arrow-rs custom allocations. All of them share
//! one owner that calls the producer's release callback when the last buffer drops.

use std::ffi::{CStr, c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::Arc;

use arrow_array::{ArrayRef, make_array};
use arrow_buffer::Buffer;
use arrow_data::{BufferSpec, layout};
use arrow_schema::ffi::FFI_ArrowSchema;
use arrow_schema::{DataType, Schema};

use super::abi::{
    ARROW_DEVICE_CPU, ARROW_DEVICE_CUDA, ARROW_DEVICE_CUDA_HOST, ArrowArray, ArrowDeviceArray,
    ArrowDeviceType, device_type_name,
};
use super::types::{Side, base_buffer_count, check_type};
use crate::arrow::device::{ByteLen, Parts, child_fields, has_offsets};
use crate::arrow::{AnyArray, DeviceArray};
use crate::cuda::{Context, DeviceBuffer, Stream};
use crate::error::{Error, Result};

fn bad(path: &str, msg: impl std::fmt::Display) -> Error {
    Error::invalid(format!("ArrowDeviceArray import: {path}: {msg}"))
}

/// The raw layout of `struct ArrowSchema`, to check a schema before arrow-rs reads it
/// (arrow-rs panics on a null format or non-UTF-8 strings).
#[repr(C)]
struct RawSchema {
    format: *const c_char,
    name: *const c_char,
    metadata: *const c_char,
    flags: i64,
    n_children: i64,
    children: *mut *mut RawSchema,
    dictionary: *mut RawSchema,
    release: Option<unsafe extern "C" fn(*mut RawSchema)>,
    private_data: *mut c_void,
}

const _: () = assert!(std::mem::size_of::<RawSchema>() == std::mem::size_of::<FFI_ArrowSchema>());

/// Checks the structure of a schema (released, null or non-UTF-8 strings, child
/// pointers, nesting depth).
///
/// # Safety
/// `s` must point at a schema that is released or valid per the C Data Interface.
unsafe fn check_schema(s: *const RawSchema, path: &str, depth: usize) -> Result<()> {
    let err = |m: String| Error::invalid(format!("ArrowSchema {path}: {m}"));
    if depth > 64 {
        return Err(err("nested more than 64 levels deep".into()));
    }
    // Safety: guaranteed by the caller (valid or released, readable).
    let s = unsafe { &*s };
    if s.release.is_none() {
        return Err(err("is released".into()));
    }
    if s.format.is_null() {
        return Err(err("has a null format string".into()));
    }
    // Safety: a valid schema's strings are NUL-terminated.
    if unsafe { CStr::from_ptr(s.format) }.to_str().is_err() {
        return Err(err("format string is not UTF-8".into()));
    }
    // Safety: as above.
    if !s.name.is_null() && unsafe { CStr::from_ptr(s.name) }.to_str().is_err() {
        return Err(err("name is not UTF-8".into()));
    }
    if s.n_children < 0 {
        return Err(err(format!("negative n_children {}", s.n_children)));
    }
    if s.n_children > 0 && s.children.is_null() {
        return Err(err(format!(
            "n_children is {} but children is null",
            s.n_children
        )));
    }
    for i in 0..s.n_children as usize {
        // Safety: a valid schema has `n_children` readable child pointers.
        let c = unsafe { *s.children.add(i) };
        if c.is_null() {
            return Err(err(format!("child {i} is null")));
        }
        // Safety: a non-null child of a valid schema is a valid schema.
        unsafe { check_schema(c, &format!("{path}.children[{i}]"), depth + 1)? };
    }
    if !s.dictionary.is_null() {
        // Safety: as for the children.
        unsafe { check_schema(s.dictionary, &format!("{path}.dictionary"), depth + 1)? };
    }
    Ok(())
}

/// The data type a C schema describes, without panicking on a malformed one.
pub(super) fn data_type_of(schema: &FFI_ArrowSchema) -> Result<DataType> {
    // Safety: `FFI_ArrowSchema` is `#[repr(C)]` with the C layout (size checked above);
    // a value of it is released or valid (it can only be made by arrow-rs or moved in
    // from C through an unsafe `from_raw`).
    unsafe { check_schema((schema as *const FFI_ArrowSchema).cast(), "schema", 0)? };
    match catch_unwind(AssertUnwindSafe(|| DataType::try_from(schema))) {
        Ok(r) => Ok(r?),
        Err(_) => Err(Error::invalid(
            "ArrowSchema: malformed schema (arrow-rs could not parse it)",
        )),
    }
}

/// The record batch schema a C schema describes (a struct), without panicking.
pub(super) fn schema_of(schema: &FFI_ArrowSchema) -> Result<Schema> {
    // Safety: as in `data_type_of`.
    unsafe { check_schema((schema as *const FFI_ArrowSchema).cast(), "schema", 0)? };
    match catch_unwind(AssertUnwindSafe(|| Schema::try_from(schema))) {
        Ok(r) => Ok(r?),
        Err(_) => Err(Error::invalid(
            "ArrowSchema: malformed schema (arrow-rs could not parse it)",
        )),
    }
}

/// Where imported buffers live, and how their few values the importer must read are
/// read (the last offset of binary arrays, validity bits when `null_count` is -1).
pub(super) trait ImportedMemory {
    type Buf: Clone + ByteLen;
    /// `len` bytes at `ptr`, kept alive by the import's owner (`ptr` is non-null when
    /// `len > 0`).
    fn buffer(&mut self, ptr: *const c_void, len: usize, path: &str) -> Result<Self::Buf>;
    /// The `index`-th offset (`width` 4 or 8 bytes) of an offsets buffer.
    fn read_offset(&mut self, offsets: &Self::Buf, index: usize, width: usize) -> Result<i64>;
    /// The number of unset bits in `offset..offset+len` of a bitmap.
    fn count_nulls(&mut self, bitmap: &Self::Buf, offset: usize, len: usize) -> Result<usize>;
    /// `n` int64 values (the variadic buffer sizes of view types).
    fn read_sizes(&mut self, sizes: &Self::Buf, n: usize) -> Result<Vec<i64>>;
}

fn count_unset(bytes: &[u8], first_byte: usize, offset: usize, len: usize) -> usize {
    (offset..offset + len)
        .filter(|&bit| bytes[bit / 8 - first_byte] & (1 << (bit % 8)) == 0)
        .count()
}

fn le_value(bytes: &[u8], width: usize) -> i64 {
    if width == 4 {
        i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as i64
    } else {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[..8]);
        i64::from_le_bytes(b)
    }
}

/// Host memory (CPU, CUDA_HOST).
struct HostMemory {
    owner: Arc<ArrowDeviceArray>,
}

impl ImportedMemory for HostMemory {
    type Buf = Buffer;

    fn buffer(&mut self, ptr: *const c_void, len: usize, path: &str) -> Result<Buffer> {
        if len == 0 {
            return Ok(Buffer::from_vec(Vec::<u8>::new()));
        }
        if len > isize::MAX as usize {
            return Err(bad(path, format!("buffer of {len} bytes is too large")));
        }
        let ptr = NonNull::new(ptr as *mut u8).ok_or_else(|| bad(path, "null buffer"))?;
        // Safety: the producer guarantees (the import's contract) that the buffer holds
        // at least the `len` bytes its data type, length and offset require, and that
        // it stays valid until the release callback runs, which `owner` delays until
        // the last arrow-rs buffer referring to it drops.
        Ok(unsafe { Buffer::from_custom_allocation(ptr, len, self.owner.clone()) })
    }

    fn read_offset(&mut self, offsets: &Buffer, index: usize, width: usize) -> Result<i64> {
        let at = index * width;
        let bytes = offsets
            .as_slice()
            .get(at..at + width)
            .ok_or_else(|| Error::invalid("offset index out of range"))?;
        Ok(le_value(bytes, width))
    }

    fn count_nulls(&mut self, bitmap: &Buffer, offset: usize, len: usize) -> Result<usize> {
        Ok(count_unset(bitmap.as_slice(), 0, offset, len))
    }

    fn read_sizes(&mut self, sizes: &Buffer, n: usize) -> Result<Vec<i64>> {
        Ok((0..n)
            .map(|i| le_value(&sizes.as_slice()[i * 8..], 8))
            .collect())
    }
}

/// CUDA device memory.
struct DeviceMemory {
    ctx: Context,
    owner: Arc<ArrowDeviceArray>,
    /// The producer's `CUevent` (null when none).
    event: *mut c_void,
    /// Whether the legacy default stream (where devbuf's copies run) already waits on
    /// `event`.
    legacy_waits: bool,
}

impl DeviceMemory {
    /// Orders devbuf's synchronous reads after the producer's event.
    fn before_read(&mut self) -> Result<()> {
        if !self.legacy_waits && !self.event.is_null() {
            // Safety: the event belongs to the producer and lives until its release
            // callback runs, which `owner` (held by `self`) delays.
            unsafe { self.ctx.default_stream_wait_raw_event(self.event)? };
            self.legacy_waits = true;
        }
        Ok(())
    }
}

impl ImportedMemory for DeviceMemory {
    type Buf = DeviceBuffer;

    fn buffer(&mut self, ptr: *const c_void, len: usize, path: &str) -> Result<DeviceBuffer> {
        self.ctx
            .view(ptr as u64, len, self.owner.clone())
            .map_err(|e| bad(path, format!("buffer of {len} bytes at {ptr:p}: {e}")))
    }

    fn read_offset(&mut self, offsets: &DeviceBuffer, index: usize, width: usize) -> Result<i64> {
        self.before_read()?;
        let v = offsets.slice(index * width, width)?.to_vec::<u8>()?;
        Ok(le_value(&v, width))
    }

    fn count_nulls(&mut self, bitmap: &DeviceBuffer, offset: usize, len: usize) -> Result<usize> {
        if len == 0 {
            return Ok(0);
        }
        self.before_read()?;
        let first = offset / 8;
        let last = (offset + len).div_ceil(8);
        let bytes = bitmap.slice(first, last - first)?.to_vec::<u8>()?;
        Ok(count_unset(&bytes, first, offset, len))
    }

    fn read_sizes(&mut self, _sizes: &DeviceBuffer, _n: usize) -> Result<Vec<i64>> {
        // `check_type` refuses view types on the device before any buffer is read.
        Err(Error::unsupported(
            "view types are not supported on CUDA devices by devbuf's C Device Data Interface",
        ))
    }
}

fn non_negative(v: i64, what: &str, path: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| bad(path, format!("negative {what} {v}")))
}

fn mul(a: usize, b: usize, path: &str) -> Result<usize> {
    a.checked_mul(b)
        .ok_or_else(|| bad(path, "buffer size overflows"))
}

/// Reads one C structure (and its children) of type `dt` into array parts.
///
/// # Safety
/// `a` must be a structure of a valid (not released) base array, as the import's
/// contract requires; this function checks everything a producer can get wrong in the
/// structure itself (counts, nulls, signs) before reading through it.
unsafe fn walk<M: ImportedMemory>(
    a: &ArrowArray,
    dt: &DataType,
    mem: &mut M,
    path: &str,
) -> Result<Parts<M::Buf>> {
    if a.is_released() {
        return Err(bad(
            path,
            "is released (a child that was moved out, or a released structure)",
        ));
    }
    let len = non_negative(a.length, "length", path)?;
    let offset = non_negative(a.offset, "offset", path)?;
    if a.null_count < -1 {
        return Err(bad(path, format!("negative null_count {}", a.null_count)));
    }
    let end = offset
        .checked_add(len)
        .ok_or_else(|| bad(path, "offset + length overflows"))?;
    let l = layout(dt);
    let base = base_buffer_count(dt);
    let n_buffers = non_negative(a.n_buffers, "n_buffers", path)?;
    let variadic = if l.variadic {
        if n_buffers < base + 1 {
            return Err(bad(
                path,
                format!(
                    "a {dt} array has at least {} buffers, n_buffers is {n_buffers}",
                    base + 1
                ),
            ));
        }
        n_buffers - base - 1
    } else {
        if n_buffers != base {
            return Err(bad(
                path,
                format!("a {dt} array has {base} buffers, n_buffers is {n_buffers}"),
            ));
        }
        0
    };
    if n_buffers > 0 && a.buffers.is_null() {
        return Err(bad(
            path,
            format!("n_buffers is {n_buffers} but buffers is null"),
        ));
    }
    // Safety: a valid structure has `n_buffers` readable pointers at `buffers`.
    let ptrs: Vec<*const c_void> = (0..n_buffers)
        .map(|i| unsafe { *a.buffers.add(i) })
        .collect();
    let kids = child_fields(dt);
    if a.n_children != kids.len() as i64 {
        return Err(bad(
            path,
            format!(
                "a {dt} array has {} children, n_children is {}",
                kids.len(),
                a.n_children
            ),
        ));
    }
    if !kids.is_empty() && a.children.is_null() {
        return Err(bad(
            path,
            format!("n_children is {} but children is null", kids.len()),
        ));
    }
    let dict_type = match dt {
        DataType::Dictionary(_, v) => Some(v.as_ref()),
        _ => None,
    };
    match (dict_type, a.dictionary.is_null()) {
        (Some(_), true) => return Err(bad(path, format!("a {dt} array without dictionary"))),
        (None, false) => {
            return Err(bad(
                path,
                format!("a {dt} array must not have a dictionary"),
            ));
        }
        _ => {}
    }

    // Validity.
    let mut next = 0;
    let (validity, null_count) = if l.can_contain_null_mask {
        next = 1;
        let p = ptrs[0];
        match a.null_count {
            0 => (None, 0),
            -1 if p.is_null() => (None, 0),
            n if p.is_null() => {
                return Err(bad(
                    path,
                    format!("null_count is {n} but the validity bitmap is null"),
                ));
            }
            n => {
                let bitmap = mem.buffer(p, end.div_ceil(8), &format!("{path} validity"))?;
                let count = if n == -1 {
                    mem.count_nulls(&bitmap, offset, len)?
                } else {
                    n as usize
                };
                if count > len {
                    return Err(bad(
                        path,
                        format!("null_count {count} exceeds the length {len}"),
                    ));
                }
                (Some(bitmap), count)
            }
        }
    } else if *dt == DataType::Null {
        (None, len)
    } else {
        (None, 0)
    };

    // The type's buffers.
    let mut buffers = Vec::with_capacity(n_buffers);
    let mut offsets: Option<(M::Buf, usize)> = None;
    for (i, spec) in l.buffers.iter().enumerate() {
        let index = next + i;
        let p = ptrs[index];
        let size = match spec {
            BufferSpec::FixedWidth { byte_width, .. } if i == 0 && has_offsets(dt) => {
                if end == 0 && p.is_null() {
                    0
                } else {
                    mul(end + 1, *byte_width, path)?
                }
            }
            BufferSpec::FixedWidth { byte_width, .. } => mul(end, *byte_width, path)?,
            BufferSpec::BitMap => end.div_ceil(8),
            BufferSpec::VariableWidth => match &offsets {
                Some((o, w)) if o.byte_len() > 0 => {
                    let last = mem.read_offset(o, end, *w)?;
                    non_negative(last, "last offset", path)?
                }
                _ => 0,
            },
            BufferSpec::AlwaysNull => 0,
        };
        if size > 0 && p.is_null() {
            return Err(bad(
                path,
                format!("buffer {index} of a {dt} array is null but must hold {size} bytes"),
            ));
        }
        let b = mem.buffer(p, size, &format!("{path} buffer {index}"))?;
        if i == 0
            && has_offsets(dt)
            && let BufferSpec::FixedWidth { byte_width, .. } = spec
        {
            offsets = Some((b.clone(), *byte_width));
        }
        buffers.push(b);
    }
    if l.variadic {
        // View types: the data buffers, then their sizes (int64) in the last buffer.
        let sizes_ptr = ptrs[n_buffers - 1];
        if variadic > 0 && sizes_ptr.is_null() {
            return Err(bad(path, "the variadic buffer sizes buffer is null"));
        }
        let sizes_buf = mem.buffer(
            sizes_ptr,
            mul(variadic, 8, path)?,
            &format!("{path} variadic sizes"),
        )?;
        let sizes = mem.read_sizes(&sizes_buf, variadic)?;
        for (j, size) in sizes.into_iter().enumerate() {
            let index = base + j;
            let size = non_negative(size, "variadic buffer size", path)?;
            let p = ptrs[index];
            if size > 0 && p.is_null() {
                return Err(bad(
                    path,
                    format!("variadic buffer {index} is null but holds {size} bytes"),
                ));
            }
            buffers.push(mem.buffer(p, size, &format!("{path} buffer {index}"))?);
        }
    }

    // Children and dictionary.
    let mut children = Vec::with_capacity(kids.len());
    for (i, t) in kids.iter().map(|f| f.data_type()).enumerate() {
        // Safety: a valid structure has `n_children` readable child pointers.
        let cp = unsafe { *a.children.add(i) };
        let cpath = format!("{path}.children[{i}]");
        // Safety: a non-null child pointer of a valid structure points at a structure.
        let c = unsafe { cp.as_ref() }.ok_or_else(|| bad(&cpath, "is a null pointer"))?;
        // Safety: the child is part of the same valid base structure.
        children.push(unsafe { walk(c, t, mem, &cpath)? });
    }
    let dictionary = match dict_type {
        Some(v) => {
            let dpath = format!("{path}.dictionary");
            // Safety: checked non-null above; part of the same valid base structure.
            let d = unsafe { &*a.dictionary };
            Some(Box::new(unsafe { walk(d, v, mem, &dpath)? }))
        }
        None => None,
    };
    Ok(Parts {
        data_type: dt.clone(),
        len,
        null_count,
        offset,
        validity,
        buffers,
        children,
        dictionary,
    })
}

/// The checks that leave the caller's structure untouched when they fail: released,
/// or a device type that `accept` does not list.
fn check_header(array: &ArrowDeviceArray, accept: &[ArrowDeviceType], what: &str) -> Result<()> {
    if array.is_released() {
        return Err(Error::invalid(
            "ArrowDeviceArray import: the structure is released (already imported, moved out or released)",
        ));
    }
    if !accept.contains(&array.device_type) {
        let names: Vec<String> = accept
            .iter()
            .map(|t| format!("{} ({t})", device_type_name(*t)))
            .collect();
        return Err(Error::invalid(format!(
            "ArrowDeviceArray import: unsupported device type {} ({}): {what} imports {}",
            device_type_name(array.device_type),
            array.device_type,
            names.join(" or ")
        )));
    }
    Ok(())
}

/// Moves the structure out of the caller's (leaving it released) after
/// [`check_header`].
fn take(
    array: &mut ArrowDeviceArray,
    accept: &[ArrowDeviceType],
    what: &str,
) -> Result<ArrowDeviceArray> {
    check_header(array, accept, what)?;
    Ok(std::mem::take(array))
}

/// The producer's `CUevent` from `sync_event` (a `CUevent*`), or null.
fn cuda_event(owned: &ArrowDeviceArray) -> Result<*mut c_void> {
    if owned.sync_event.is_null() {
        return Ok(std::ptr::null_mut());
    }
    // Safety: for CUDA device types a non-null `sync_event` points at a `CUevent`
    // (the import's contract), readable until the release callback runs.
    let ev = unsafe { *(owned.sync_event as *const *mut c_void) };
    if ev.is_null() {
        return Err(Error::invalid(
            "ArrowDeviceArray import: sync_event points at a null CUevent",
        ));
    }
    Ok(ev)
}

fn device_ordinal(owned: &ArrowDeviceArray) -> Result<usize> {
    usize::try_from(owned.device_id).map_err(|_| {
        Error::invalid(format!(
            "ArrowDeviceArray import: device_id {} is not a CUDA device ordinal",
            owned.device_id
        ))
    })
}

pub(super) fn import_cuda(
    array: &mut ArrowDeviceArray,
    dt: &DataType,
    stream: Option<&Stream>,
) -> Result<DeviceArray> {
    check_type(dt, Side::Device)?;
    let owned = take(array, &[ARROW_DEVICE_CUDA], "a CUDA import")?;
    // From here on every error releases the array (when `owned` / `owner` drops).
    let ctx = Context::new(device_ordinal(&owned)?)?;
    let event = cuda_event(&owned)?;
    if !event.is_null() {
        // Safety: `event` is the producer's live `CUevent` (it lives until release,
        // which cannot run before this call returns: we own the structure).
        unsafe {
            match stream {
                Some(s) => s.wait_raw_event(event)?,
                None => ctx.default_stream_wait_raw_event(event)?,
            }
        }
    }
    let owner = Arc::new(owned);
    let mut mem = DeviceMemory {
        ctx,
        owner: owner.clone(),
        event,
        legacy_waits: stream.is_none(),
    };
    // Safety: the structure is not released (checked by `take`) and valid per the
    // import's contract.
    let parts = unsafe { walk(&owner.array, dt, &mut mem, "array")? };
    parts.validate()?;
    Ok(DeviceArray::from_parts(parts))
}

pub(super) fn import_host(array: &mut ArrowDeviceArray, dt: &DataType) -> Result<ArrayRef> {
    check_type(dt, Side::Host)?;
    let owned = take(
        array,
        &[ARROW_DEVICE_CPU, ARROW_DEVICE_CUDA_HOST],
        "a host import",
    )?;
    if owned.device_type == ARROW_DEVICE_CUDA_HOST {
        let event = cuda_event(&owned)?;
        if !event.is_null() {
            // The CPU reads the result: wait on the host.
            let ctx = Context::new(usize::try_from(owned.device_id).unwrap_or(0))?;
            // Safety: the producer's live event, as in `import_cuda`.
            unsafe { ctx.synchronize_raw_event(event)? };
        }
    }
    let owner = Arc::new(owned);
    let mut mem = HostMemory {
        owner: owner.clone(),
    };
    // Safety: as in `import_cuda`.
    let parts = unsafe { walk(&owner.array, dt, &mut mem, "array")? };
    parts.validate()?;
    Ok(make_array(parts.into_array_data()?))
}

/// Imports an `ArrowDeviceArray` of any device type devbuf supports, without copying:
/// CUDA as [`AnyArray::Device`], CPU and CUDA_HOST as [`AnyArray::Host`] (an arrow-rs
/// array). [`AnyArray::into_device`] / [`AnyArray::into_host`] take the side you expect.
///
/// * CUDA: every buffer is a [`Context::view`] of the producer's memory (validated
///   with the driver: device memory of `device_id`, large enough). If `sync_event` is
///   set, a stream waits on it on the device and the host does not block: the *legacy
///   default stream* (where devbuf's copies and kernels run) when `on` is `None`;
///   `on`'s stream (the consumer's) when it is `Some`, so that work queued there
///   afterwards sees the data. String and binary arrays need their last offset to
///   know the size of the values buffer: that is one small synchronous copy per such
///   array, ordered after the event.
/// * CPU, CUDA_HOST: an arrow-rs array (buffers misaligned for their type excepted:
///   arrow-rs realigns those), fully validated (offsets, UTF-8, dictionary keys). For
///   CUDA_HOST with a `sync_event`, the calling thread waits for the event
///   (`cuEventSynchronize`): the result is read by the CPU. `on` is not used.
///
/// The structure is moved out of `array`, which is left released: importing it again
/// is an error. The producer's release callback runs exactly once, when the last
/// imported buffer drops.
///
/// Errors (never a panic): a released structure or another device type (the structure
/// is then left untouched); a schema arrow-rs cannot parse or a type devbuf does not
/// support on that side (untouched too); a `device_id` that is no device here,
/// structures that contradict the type (buffer or child counts, null buffers that must
/// hold data, negative lengths, offsets or counts), pointers that are not device
/// memory of the device or too small (the array is released before the error returns).
/// To accept one side only and leave anything else untouched, look at
/// [`ArrowDeviceArray::device_type`] before importing.
///
/// ```
/// use arrow_array::{Array, BooleanArray};
/// use devbuf_core::arrow::AnyArray;
/// use devbuf_core::arrow::c_device::{export_array, import_array, ExportDevice, ARROW_DEVICE_CUDA};
/// let a = BooleanArray::from(vec![true, false]);
/// let (mut c_array, c_schema) = export_array(&a, ExportDevice::Cpu)?;
/// // A consumer that only takes device memory leaves this one to its owner:
/// assert_ne!(c_array.device_type(), ARROW_DEVICE_CUDA);
/// match import_array(&mut c_array, &c_schema, None)? {
///     AnyArray::Host(b) => assert_eq!(b.as_ref(), &a as &dyn Array),
///     AnyArray::Device(_) => unreachable!(),
/// }
/// assert!(c_array.array().is_released());
/// assert!(import_array(&mut c_array, &c_schema, None).is_err()); // imported once only
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub fn import_array(
    array: &mut ArrowDeviceArray,
    schema: &FFI_ArrowSchema,
    on: Option<&Stream>,
) -> Result<AnyArray> {
    let dt = data_type_of(schema)?;
    check_header(
        array,
        &[ARROW_DEVICE_CPU, ARROW_DEVICE_CUDA, ARROW_DEVICE_CUDA_HOST],
        "import_array",
    )?;
    if array.device_type == ARROW_DEVICE_CUDA {
        Ok(AnyArray::Device(import_cuda(array, &dt, on)?))
    } else {
        Ok(AnyArray::Host(import_host(array, &dt)?))
    }
}
