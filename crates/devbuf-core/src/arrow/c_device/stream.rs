//! `ArrowDeviceArrayStream`: export an iterator of batches, import a foreign stream as
//! an iterator.
//!
//! Each batch crosses the interface as a struct array whose fields are the columns
//! (the C Stream Interface's convention for record batches); the stream's schema is
//! that struct type, with the schema's metadata.

use std::ffi::{CStr, CString, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};

use arrow_array::{Array, RecordBatch, RecordBatchOptions, StructArray};
use arrow_schema::ffi::FFI_ArrowSchema;
use arrow_schema::{DataType, SchemaRef};

use super::abi::{
    ARROW_DEVICE_CPU, ARROW_DEVICE_CUDA, ARROW_DEVICE_CUDA_HOST, ArrowDeviceArray,
    ArrowDeviceArrayStream, ArrowDeviceType, device_type_name,
};
use super::export::{
    HostDevice, SyncEvent, count_export, count_release, export_device_array_only, export_host_data,
};
use super::import::{import_cuda, import_host, schema_of};
use super::types::{Side, check_type};
use crate::arrow::DeviceArray;
use crate::cuda::Stream;
use crate::error::{Error, ErrorKind, Result};

type NextFn = Box<dyn FnMut() -> Option<Result<ArrowDeviceArray>> + Send>;

/// The `private_data` of a stream devbuf exports.
struct StreamPrivate {
    schema: SchemaRef,
    next: NextFn,
    last_error: Option<CString>,
}

impl StreamPrivate {
    fn fail(&mut self, msg: impl std::fmt::Display, code: c_int) -> c_int {
        let text = msg.to_string().replace('\0', " ");
        self.last_error = CString::new(text).ok();
        code
    }
}

fn errno_of(e: &Error) -> c_int {
    match e.kind() {
        ErrorKind::OutOfMemory => libc::ENOMEM,
        ErrorKind::NotFound => libc::ENOENT,
        ErrorKind::PermissionDenied => libc::EACCES,
        ErrorKind::Timeout => libc::ETIMEDOUT,
        ErrorKind::Unsupported => libc::ENOSYS,
        ErrorKind::Io | ErrorKind::Cuda => libc::EIO,
        _ => libc::EINVAL,
    }
}

fn errno_name(code: c_int) -> &'static str {
    match code {
        libc::EINVAL => "EINVAL",
        libc::ENOMEM => "ENOMEM",
        libc::EIO => "EIO",
        libc::ENOENT => "ENOENT",
        libc::EACCES => "EACCES",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ENOSYS => "ENOSYS",
        _ => "error",
    }
}

/// # Safety
/// `stream` must be null or point at a stream made by [`make_stream`].
unsafe fn private_of<'a>(stream: *mut ArrowDeviceArrayStream) -> Option<&'a mut StreamPrivate> {
    if stream.is_null() {
        return None;
    }
    // Safety: guaranteed by the caller; the private data is ours while not released.
    unsafe { (*stream).private_data.cast::<StreamPrivate>().as_mut() }
}

/// The private data of `stream` for the callback `call`, whose output structure `out`
/// (a `what`) must not be null; otherwise the error code the callback returns.
///
/// # Safety
/// As for [`private_of`].
unsafe fn callback_state<'a, T>(
    stream: *mut ArrowDeviceArrayStream,
    out: *mut T,
    call: &str,
    what: &str,
) -> std::result::Result<&'a mut StreamPrivate, c_int> {
    // Safety: guaranteed by the caller.
    let p = unsafe { private_of(stream) }.ok_or(libc::EINVAL)?;
    if out.is_null() {
        return Err(p.fail(
            format!("{call}: the output {what} pointer is null"),
            libc::EINVAL,
        ));
    }
    Ok(p)
}

/// # Safety
/// `stream` must be null or point at a stream made by [`make_stream`] (possibly moved),
/// and `out` null or valid for writes.
unsafe extern "C" fn stream_get_schema(
    stream: *mut ArrowDeviceArrayStream,
    out: *mut FFI_ArrowSchema,
) -> c_int {
    // Safety: the consumer passes the stream this callback belongs to.
    let p = match unsafe { callback_state(stream, out, "get_schema", "ArrowSchema") } {
        Ok(p) => p,
        Err(code) => return code,
    };
    match catch_unwind(AssertUnwindSafe(|| {
        FFI_ArrowSchema::try_from(p.schema.as_ref())
    })) {
        Ok(Ok(s)) => {
            // Safety: `out` is the consumer's (possibly uninitialised) structure; it is
            // written without reading or dropping what was there.
            unsafe { std::ptr::write(out, s) };
            0
        }
        Ok(Err(e)) => p.fail(format!("get_schema: {e}"), libc::EINVAL),
        Err(_) => p.fail("get_schema: the producer panicked", libc::EIO),
    }
}

/// # Safety
/// `stream` must be null or point at a stream made by [`make_stream`] (possibly moved),
/// and `out` null or valid for writes.
unsafe extern "C" fn stream_get_next(
    stream: *mut ArrowDeviceArrayStream,
    out: *mut ArrowDeviceArray,
) -> c_int {
    // Safety: the consumer passes the stream this callback belongs to.
    let p = match unsafe { callback_state(stream, out, "get_next", "ArrowDeviceArray") } {
        Ok(p) => p,
        Err(code) => return code,
    };
    let (result, code) = match catch_unwind(AssertUnwindSafe(|| (p.next)())) {
        Ok(None) => (ArrowDeviceArray::empty(), 0),
        Ok(Some(Ok(a))) => (a, 0),
        Ok(Some(Err(e))) => {
            let code = errno_of(&e);
            (ArrowDeviceArray::empty(), p.fail(e, code))
        }
        Err(_) => (
            ArrowDeviceArray::empty(),
            p.fail("get_next: the producer panicked", libc::EIO),
        ),
    };
    // Safety: `out` is the consumer's (possibly uninitialised) structure; written
    // without reading or dropping it. At the end of the stream and on errors it is a
    // released structure.
    unsafe { std::ptr::write(out, result) };
    code
}

/// # Safety
/// `stream` must be null or point at a stream made by [`make_stream`] (possibly moved).
unsafe extern "C" fn stream_get_last_error(stream: *mut ArrowDeviceArrayStream) -> *const c_char {
    // Safety: the consumer passes the stream this callback belongs to.
    match unsafe { private_of(stream) } {
        Some(p) => p
            .last_error
            .as_ref()
            .map_or(std::ptr::null(), |s| s.as_ptr()),
        None => std::ptr::null(),
    }
}

/// # Safety
/// `stream` must be null or point at a stream made by [`make_stream`] (possibly moved).
unsafe extern "C" fn stream_release(stream: *mut ArrowDeviceArrayStream) {
    if stream.is_null() {
        return;
    }
    // Safety: the consumer passes the stream this callback belongs to.
    let s = unsafe { &mut *stream };
    let private = s.private_data.cast::<StreamPrivate>();
    s.private_data = std::ptr::null_mut();
    s.release = None;
    s.get_schema = None;
    s.get_next = None;
    s.get_last_error = None;
    if private.is_null() {
        return;
    }
    // Safety: made by `Box::into_raw` in `make_stream`, reclaimed once (nulled above).
    let private = unsafe { Box::from_raw(private) };
    // The iterator is the caller's code: do not let a panic in its drop unwind into C.
    let _ = catch_unwind(AssertUnwindSafe(move || drop(private)));
    count_release();
}

fn make_stream(
    device_type: ArrowDeviceType,
    schema: SchemaRef,
    next: NextFn,
) -> ArrowDeviceArrayStream {
    let private = Box::new(StreamPrivate {
        schema,
        next,
        last_error: None,
    });
    count_export();
    ArrowDeviceArrayStream {
        device_type,
        get_schema: Some(stream_get_schema),
        get_next: Some(stream_get_next),
        get_last_error: Some(stream_get_last_error),
        release: Some(stream_release),
        private_data: Box::into_raw(private).cast(),
    }
}

fn check_columns(types: Vec<&DataType>, schema: &SchemaRef, batch: usize) -> Result<()> {
    let fields = schema.fields();
    if types.len() != fields.len() {
        return Err(Error::invalid(format!(
            "batch {batch} has {} columns, the stream's schema {}",
            types.len(),
            fields.len()
        )));
    }
    for (i, (t, f)) in types.iter().zip(fields.iter()).enumerate() {
        if *t != f.data_type() {
            return Err(Error::invalid(format!(
                "batch {batch}: column {i} ('{}') is {t}, the stream's schema says {}",
                f.name(),
                f.data_type()
            )));
        }
    }
    Ok(())
}

fn device_stream(
    schema: SchemaRef,
    batches: impl Iterator<Item = Result<DeviceArray>> + Send + 'static,
    record_on: Option<Stream>,
) -> ArrowDeviceArrayStream {
    let mut batches = batches;
    let mut index = 0usize;
    let s = schema.clone();
    let next: NextFn = Box::new(move || {
        let item = batches.next()?;
        let i = index;
        index += 1;
        Some(item.and_then(|a| {
            let DataType::Struct(fields) = a.data_type() else {
                return Err(Error::invalid(format!(
                    "batch {i} is a {} array: a stream batch must be a struct array",
                    a.data_type()
                )));
            };
            check_columns(fields.iter().map(|f| f.data_type()).collect(), &s, i)?;
            let sync = match &record_on {
                Some(st) => SyncEvent::Stream(st),
                None => SyncEvent::DefaultStream,
            };
            export_device_array_only(&a, sync)
        }))
    });
    make_stream(ARROW_DEVICE_CUDA, schema, next)
}

/// Exports a sequence of device batches as an `ArrowDeviceArrayStream` of device type
/// CUDA. Each item must be a struct array whose fields have the schema's column types
/// (`DeviceArray::try_from(batch)` makes one of a [`DeviceRecordBatch`]); each is exported as by
/// [`export_device_array`](super::export_device_array) with an event recorded when the
/// consumer pulls it: on the legacy default stream when `on` is `None`, on `stream`
/// (where the batches are produced) when it is `Some(stream)`.
///
/// An `Err` item, or a batch that does not match the schema, makes `get_next` return
/// an error code (`EINVAL`, `ENOMEM` or `EIO`) with the message available from
/// `get_last_error`. The iterator is dropped when the consumer releases the stream;
/// arrays already handed out live on independently.
///
/// ```no_run
/// use std::sync::Arc;
/// use arrow_array::{Int32Array, RecordBatch, StructArray};
/// use arrow_schema::{DataType, Field, Schema};
/// use devbuf_core::arrow::DeviceArray;
/// use devbuf_core::arrow::c_device::{export_device_stream, import_device_stream};
/// use devbuf_core::cuda::Context;
/// let ctx = Context::new(0)?;
/// let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int32, false)]));
/// let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int32Array::from(vec![1, 2]))])?;
/// let on_device = DeviceArray::from_host(&StructArray::from(batch), &ctx)?;
/// let mut stream = export_device_stream(schema, vec![Ok(on_device)], None);
/// let reader = import_device_stream(&mut stream, None)?;
/// let arrays: Vec<DeviceArray> = reader.collect::<Result<_, _>>()?;
/// assert_eq!(arrays[0].len(), 2);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub fn export_device_stream<I>(
    schema: SchemaRef,
    batches: I,
    on: Option<&Stream>,
) -> ArrowDeviceArrayStream
where
    I: IntoIterator<Item = Result<DeviceArray>>,
    I::IntoIter: Send + 'static,
{
    device_stream(schema, batches.into_iter(), on.cloned())
}

/// Exports host record batches as an `ArrowDeviceArrayStream` of device type CPU, each
/// batch a struct array (zero-copy, as [`export_host_array`](super::export_host_array)).
/// Errors as for [`export_device_stream`].
///
/// ```
/// use std::sync::Arc;
/// use arrow_array::{Int32Array, RecordBatch};
/// use arrow_schema::{DataType, Field, Schema};
/// use devbuf_core::arrow::c_device::{export_host_stream, import_host_stream};
/// let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int32, false)]));
/// let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int32Array::from(vec![1, 2]))])?;
/// let mut stream = export_host_stream(schema, vec![Ok(batch.clone()), Ok(batch.clone())]);
/// let back: Vec<RecordBatch> = import_host_stream(&mut stream)?.collect::<Result<_, _>>()?;
/// assert_eq!(back, vec![batch.clone(), batch]);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub fn export_host_stream<I>(schema: SchemaRef, batches: I) -> ArrowDeviceArrayStream
where
    I: IntoIterator<Item = Result<RecordBatch>>,
    I::IntoIter: Send + 'static,
{
    let mut batches = batches.into_iter();
    let mut index = 0usize;
    let s = schema.clone();
    let next: NextFn = Box::new(move || {
        let item = batches.next()?;
        let i = index;
        index += 1;
        Some(item.and_then(|b| {
            check_columns(b.columns().iter().map(|c| c.data_type()).collect(), &s, i)?;
            let rows = b.num_rows();
            let fields = s.fields().clone();
            let array = StructArray::try_new_with_length(fields, b.columns().to_vec(), None, rows)?;
            export_host_data(&array.to_data(), HostDevice::Cpu)
        }))
    });
    make_stream(ARROW_DEVICE_CPU, schema, next)
}

/// The consumer side shared by both readers.
struct Consumer {
    stream: ArrowDeviceArrayStream,
    schema: SchemaRef,
    data_type: DataType,
    done: bool,
    index: usize,
}

fn stream_error(stream: &mut ArrowDeviceArrayStream, call: &str, code: c_int) -> Error {
    let msg = match stream.get_last_error {
        // Safety: the stream is live (not released) and its last call failed.
        Some(f) => {
            let p = unsafe { f(stream) };
            if p.is_null() {
                "no description".to_string()
            } else {
                // Safety: a NUL-terminated string valid until the next call.
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            }
        }
        None => "no description".to_string(),
    };
    Error::invalid(format!(
        "ArrowDeviceArrayStream: {call} failed with error {code} ({}): {msg}",
        errno_name(code)
    ))
}

impl Consumer {
    fn open(
        stream: &mut ArrowDeviceArrayStream,
        accept: &[ArrowDeviceType],
        side: Side,
        what: &str,
    ) -> Result<Consumer> {
        if stream.is_released() {
            return Err(Error::invalid(
                "ArrowDeviceArrayStream import: the stream is released (already imported, moved out or released)",
            ));
        }
        if !accept.contains(&stream.device_type) {
            return Err(Error::invalid(format!(
                "ArrowDeviceArrayStream import: unsupported device type {} ({}): {what} imports {}",
                device_type_name(stream.device_type),
                stream.device_type,
                accept
                    .iter()
                    .map(|t| format!("{} ({t})", device_type_name(*t)))
                    .collect::<Vec<_>>()
                    .join(" or ")
            )));
        }
        // From here on the stream is ours; dropping it releases it.
        let mut owned = std::mem::replace(stream, ArrowDeviceArrayStream::empty());
        let (Some(get_schema), Some(_), Some(_)) =
            (owned.get_schema, owned.get_next, owned.get_last_error)
        else {
            return Err(Error::invalid(
                "ArrowDeviceArrayStream import: get_schema, get_next and get_last_error are mandatory, one is null",
            ));
        };
        let mut c_schema = FFI_ArrowSchema::empty();
        // Safety: a live stream's callback, with a writable output structure.
        let code = unsafe { get_schema(&mut owned, &mut c_schema) };
        if code != 0 {
            return Err(stream_error(&mut owned, "get_schema", code));
        }
        let schema = std::sync::Arc::new(schema_of(&c_schema)?);
        let data_type = DataType::Struct(schema.fields().clone());
        check_type(&data_type, side)?;
        Ok(Consumer {
            stream: owned,
            schema,
            data_type,
            done: false,
            index: 0,
        })
    }

    /// The next array of the stream, still in C form.
    fn next_raw(&mut self) -> Option<Result<ArrowDeviceArray>> {
        if self.done {
            return None;
        }
        let Some(get_next) = self.stream.get_next else {
            self.done = true;
            return None;
        };
        let mut out = ArrowDeviceArray::empty();
        // Safety: a live stream's callback, with a writable output structure.
        let code = unsafe { get_next(&mut self.stream, &mut out) };
        if code != 0 {
            self.done = true;
            // Whatever the producer may have left in `out` is dropped (released) here.
            drop(out);
            return Some(Err(stream_error(&mut self.stream, "get_next", code)));
        }
        if out.is_released() {
            self.done = true;
            return None;
        }
        let i = self.index;
        self.index += 1;
        if out.device_type != self.stream.device_type {
            self.done = true;
            return Some(Err(Error::invalid(format!(
                "ArrowDeviceArrayStream: batch {i} is on device type {} but the stream's is {}",
                device_type_name(out.device_type),
                device_type_name(self.stream.device_type)
            ))));
        }
        Some(Ok(out))
    }
}

/// A foreign CUDA `ArrowDeviceArrayStream` as an iterator of [`DeviceArray`]s (struct
/// arrays whose children are the columns), each imported as by
/// [`import_device_array`](super::import_device_array). The first error ends the
/// iteration; dropping the reader releases the stream (arrays already imported live
/// on).
pub struct DeviceStreamReader {
    inner: Consumer,
    wait_on: Option<Stream>,
}

impl DeviceStreamReader {
    /// The stream's schema (the columns of every batch).
    pub fn schema(&self) -> SchemaRef {
        self.inner.schema.clone()
    }
}

impl Iterator for DeviceStreamReader {
    type Item = Result<DeviceArray>;

    fn next(&mut self) -> Option<Result<DeviceArray>> {
        let mut raw = match self.inner.next_raw()? {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        let r = import_cuda(&mut raw, &self.inner.data_type, self.wait_on.as_ref());
        if r.is_err() {
            self.inner.done = true;
        }
        Some(r)
    }
}

impl std::fmt::Debug for DeviceStreamReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceStreamReader")
            .field("schema", &self.inner.schema)
            .field("done", &self.inner.done)
            .finish()
    }
}

/// Imports a CUDA `ArrowDeviceArrayStream`: the stream is moved out of `stream` (left
/// released) and its schema read. Each batch's `sync_event` is waited on by the legacy
/// default stream when `on` is `None`, by `on`'s stream when it is `Some` (work queued
/// there afterwards sees the batch); the host does not block.
///
/// Errors: a released stream or another device type (left untouched); a null callback
/// or a failing `get_schema` (the stream is released).
///
/// ```no_run
/// # use std::sync::Arc;
/// # use arrow_array::{Int32Array, RecordBatch, StructArray};
/// # use devbuf_core::arrow::DeviceArray;
/// use devbuf_core::arrow::c_device::{export_device_stream, import_device_stream};
/// use devbuf_core::cuda::{Context, Stream};
/// # let ctx = Context::new(0)?;
/// # let batch = RecordBatch::try_from_iter(vec![("x", Arc::new(Int32Array::from(vec![1])) as _)])?;
/// # let d = DeviceArray::from_host(&StructArray::from(batch.clone()), &ctx)?;
/// let mut c_stream = export_device_stream(batch.schema(), vec![Ok(d)], None);
/// let mine = Stream::new(&ctx)?;
/// for array in import_device_stream(&mut c_stream, Some(&mine))? {
///     let array = array?; // `mine` waits for its producer before later work
///     println!("{} rows", array.len());
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn import_device_stream(
    stream: &mut ArrowDeviceArrayStream,
    on: Option<&Stream>,
) -> Result<DeviceStreamReader> {
    Ok(DeviceStreamReader {
        inner: Consumer::open(
            stream,
            &[ARROW_DEVICE_CUDA],
            Side::Device,
            "import_device_stream",
        )?,
        wait_on: on.cloned(),
    })
}

/// A CPU or CUDA_HOST `ArrowDeviceArrayStream` as an arrow-rs
/// [`RecordBatchReader`](arrow_array::RecordBatchReader) (an iterator of
/// `Result<RecordBatch, ArrowError>` with a schema: zero-copy, fully validated), for
/// code that takes arrow-rs readers; [`next_batch`](Self::next_batch) is the same with
/// devbuf's errors (the iterator's errors are `ArrowError::ExternalError` wrapping them:
/// `devbuf_core::Error::from` gives them back). The first error ends the iteration;
/// dropping the reader releases the stream.
pub struct HostStreamReader {
    inner: Consumer,
}

impl HostStreamReader {
    /// The stream's schema.
    pub fn schema(&self) -> SchemaRef {
        self.inner.schema.clone()
    }
}

impl std::fmt::Debug for HostStreamReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostStreamReader")
            .field("schema", &self.inner.schema)
            .field("done", &self.inner.done)
            .finish()
    }
}

impl HostStreamReader {
    fn batch(&mut self, mut raw: ArrowDeviceArray) -> Result<RecordBatch> {
        let i = self.inner.index - 1;
        let array = import_host(&mut raw, &self.inner.data_type)?;
        let s = array
            .as_any()
            .downcast_ref::<StructArray>()
            .ok_or_else(|| Error::invalid(format!("batch {i} is not a struct array")))?;
        if s.null_count() > 0 {
            return Err(Error::invalid(format!(
                "batch {i} has {} null rows at the top level: a record batch cannot",
                s.null_count()
            )));
        }
        Ok(RecordBatch::try_new_with_options(
            self.inner.schema.clone(),
            s.columns().to_vec(),
            &RecordBatchOptions::new().with_row_count(Some(s.len())),
        )?)
    }
}

impl HostStreamReader {
    /// The next batch, with devbuf's error (what the iterator yields as an
    /// `ArrowError`); `None` after the last batch or the first error.
    pub fn next_batch(&mut self) -> Option<Result<RecordBatch>> {
        let raw = match self.inner.next_raw()? {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        let r = self.batch(raw);
        if r.is_err() {
            self.inner.done = true;
        }
        Some(r)
    }
}

impl Iterator for HostStreamReader {
    type Item = std::result::Result<RecordBatch, arrow_schema::ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_batch().map(|r| r.map_err(Into::into))
    }
}

impl arrow_array::RecordBatchReader for HostStreamReader {
    fn schema(&self) -> SchemaRef {
        self.inner.schema.clone()
    }
}

/// Imports a CPU or CUDA_HOST `ArrowDeviceArrayStream` as record batches (see
/// [`HostStreamReader`]); errors as for [`import_device_stream`].
///
/// ```
/// use std::sync::Arc;
/// use arrow_array::{RecordBatch, StringArray};
/// use arrow_schema::{DataType, Field, Schema};
/// use devbuf_core::Error;
/// use devbuf_core::arrow::c_device::{export_host_stream, import_host_stream};
/// let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, true)]));
/// let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(StringArray::from(vec!["a"]))])?;
/// let items = vec![Ok(batch.clone()), Err(Error::invalid("source failed"))];
/// let mut stream = export_host_stream(schema, items);
/// let mut reader = import_host_stream(&mut stream)?;
/// assert_eq!(reader.next().unwrap()?, batch);
/// let e = reader.next().unwrap().unwrap_err(); // an ArrowError
/// assert!(e.to_string().contains("source failed"));
/// assert!(reader.next().is_none());
/// // As an arrow-rs RecordBatchReader:
/// let mut stream = export_host_stream(batch.schema(), vec![Ok(batch.clone())]);
/// let reader: Box<dyn arrow_array::RecordBatchReader> = Box::new(import_host_stream(&mut stream)?);
/// assert_eq!(reader.schema(), batch.schema());
/// # Ok::<(), Error>(())
/// ```
pub fn import_host_stream(stream: &mut ArrowDeviceArrayStream) -> Result<HostStreamReader> {
    Ok(HostStreamReader {
        inner: Consumer::open(
            stream,
            &[ARROW_DEVICE_CPU, ARROW_DEVICE_CUDA_HOST],
            Side::Host,
            "import_host_stream",
        )?,
    })
}
