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
    ExportDevice, SyncEvent, count_export, count_release, export_device_array_only,
    export_host_data,
};
use super::import::{import_cuda, import_host, schema_of};
use super::types::{Side, check_type};
use crate::arrow::{Batch, DeviceArray, DeviceRecordBatch};
use crate::cuda::{Context, Stream};
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
        Ok(None) => (ArrowDeviceArray::default(), 0),
        Ok(Some(Ok(a))) => (a, 0),
        Ok(Some(Err(e))) => {
            let code = errno_of(&e);
            (ArrowDeviceArray::default(), p.fail(e, code))
        }
        Err(_) => (
            ArrowDeviceArray::default(),
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

/// The owned form of a [`SyncEvent`] (a stream export outlives the caller's borrows).
#[derive(Clone)]
enum OwnedSync {
    DefaultStream,
    Stream(Stream),
    None,
}

impl OwnedSync {
    fn of(sync: SyncEvent<'_>) -> OwnedSync {
        match sync {
            SyncEvent::DefaultStream => OwnedSync::DefaultStream,
            SyncEvent::Stream(s) => OwnedSync::Stream(s.clone()),
            SyncEvent::None => OwnedSync::None,
        }
    }

    fn borrow(&self) -> SyncEvent<'_> {
        match self {
            OwnedSync::DefaultStream => SyncEvent::DefaultStream,
            OwnedSync::Stream(s) => SyncEvent::Stream(s),
            OwnedSync::None => SyncEvent::None,
        }
    }
}

/// The owned form of an [`ExportDevice`].
enum Target {
    Cpu,
    CudaHost(Context, OwnedSync),
    Cuda(OwnedSync),
}

impl Target {
    fn of(device: ExportDevice<'_>) -> Target {
        match device {
            ExportDevice::Cpu => Target::Cpu,
            ExportDevice::CudaHost { context, sync } => {
                Target::CudaHost(context.clone(), OwnedSync::of(sync))
            }
            ExportDevice::Cuda(sync) => Target::Cuda(OwnedSync::of(sync)),
        }
    }

    fn borrow(&self) -> ExportDevice<'_> {
        match self {
            Target::Cpu => ExportDevice::Cpu,
            Target::CudaHost(context, sync) => ExportDevice::CudaHost {
                context,
                sync: sync.borrow(),
            },
            Target::Cuda(sync) => ExportDevice::Cuda(sync.borrow()),
        }
    }

    fn device_type(&self) -> ArrowDeviceType {
        match self {
            Target::Cpu => ARROW_DEVICE_CPU,
            Target::CudaHost(..) => ARROW_DEVICE_CUDA_HOST,
            Target::Cuda(_) => ARROW_DEVICE_CUDA,
        }
    }
}

/// Exports a sequence of record batches as an `ArrowDeviceArrayStream`. Each batch
/// crosses as a struct array whose fields are its columns, exported as by
/// [`export_array`](super::export_array), zero-copy.
///
/// `device` fixes the stream's device type before any batch is pulled (the C
/// structure carries it from the start, and an empty stream has one too), and with it
/// which batches it carries:
///
/// * [`ExportDevice::Cpu`] (CPU) or [`ExportDevice::CudaHost`] (CUDA_HOST, page-locked
///   memory): host batches ([`Batch::Host`], or `RecordBatch` items);
/// * [`ExportDevice::Cuda`] (CUDA; a [`SyncEvent`] converts into it): device batches
///   ([`Batch::Device`], or [`DeviceRecordBatch`](crate::arrow::DeviceRecordBatch)
///   items; `DeviceRecordBatch::try_from(struct_device_array)` makes one of a struct
///   [`DeviceArray`]). Each batch's event is recorded when the consumer pulls it: on
///   the legacy default stream ([`SyncEvent::DefaultStream`]), on the stream where the
///   batches are produced ([`SyncEvent::Stream`]), or none ([`SyncEvent::None`]).
///
/// An `Err` item, a batch that does not match the schema or a batch on the other side
/// (a device batch in a CPU stream: copy it with [`Batch::to_host`]) makes `get_next`
/// return an error code (`EINVAL`, `ENOMEM` or `EIO`) with the message available from
/// `get_last_error`. The iterator is dropped when the consumer releases the stream;
/// arrays already handed out live on independently.
///
/// ```
/// use std::sync::Arc;
/// use arrow_array::{Int32Array, RecordBatch};
/// use arrow_schema::{DataType, Field, Schema};
/// use devbuf_core::arrow::Batch;
/// use devbuf_core::arrow::c_device::{export_stream, import_stream, ExportDevice};
/// let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int32, false)]));
/// let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int32Array::from(vec![1, 2]))])?;
/// let mut stream = export_stream(schema, vec![Ok(batch.clone()), Ok(batch.clone())], ExportDevice::Cpu);
/// let back: Vec<Batch> = import_stream(&mut stream, None)?.collect::<Result<_, _>>()?;
/// assert_eq!(back[1].as_host(), Some(&batch));
/// # Ok::<(), devbuf_core::Error>(())
/// ```
///
/// Device batches:
///
/// ```no_run
/// use std::sync::Arc;
/// use arrow_array::{Int32Array, RecordBatch, StructArray};
/// use devbuf_core::arrow::{DeviceArray, DeviceRecordBatch};
/// use devbuf_core::arrow::c_device::{export_stream, import_stream, SyncEvent};
/// use devbuf_core::cuda::Context;
/// let ctx = Context::new(0)?;
/// let batch = RecordBatch::try_from_iter([("x", Arc::new(Int32Array::from(vec![1, 2])) as _)])?;
/// let on_device = DeviceArray::from_host(&StructArray::from(batch.clone()), &ctx)?;
/// let on_device = DeviceRecordBatch::try_from(on_device)?;
/// let mut stream = export_stream(batch.schema(), vec![Ok(on_device)], SyncEvent::DefaultStream);
/// for b in import_stream(&mut stream, None)? {
///     assert_eq!(b?.to_host()?, batch); // a Batch::Device
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn export_stream<'a, I, B>(
    schema: SchemaRef,
    batches: I,
    device: impl Into<ExportDevice<'a>>,
) -> ArrowDeviceArrayStream
where
    I: IntoIterator<Item = Result<B>>,
    I::IntoIter: Send + 'static,
    B: Into<Batch>,
{
    let target = Target::of(device.into());
    let device_type = target.device_type();
    let mut batches = batches.into_iter();
    let mut index = 0usize;
    let s = schema.clone();
    let next: NextFn = Box::new(move || {
        let item = batches.next()?;
        let i = index;
        index += 1;
        Some(item.and_then(|b| {
            let b: Batch = b.into();
            let bs = b.schema();
            check_columns(bs.fields().iter().map(|f| f.data_type()).collect(), &s, i)?;
            match (b, &target) {
                (Batch::Host(b), Target::Cpu | Target::CudaHost(..)) => {
                    let rows = b.num_rows();
                    let fields = s.fields().clone();
                    let array =
                        StructArray::try_new_with_length(fields, b.columns().to_vec(), None, rows)?;
                    export_host_data(&array.to_data(), target.borrow())
                }
                (Batch::Device(b), Target::Cuda(sync)) => {
                    export_device_array_only(&DeviceArray::try_from(b)?, sync.borrow())
                }
                (Batch::Device(_), _) => Err(Error::invalid(format!(
                    "batch {i} is in device memory, the stream is {}: copy it to the host \
                     (Batch::to_host) or export a CUDA stream",
                    device_type_name(device_type)
                ))),
                (Batch::Host(_), _) => Err(Error::invalid(format!(
                    "batch {i} is in host memory, the stream is CUDA: export a CPU or \
                     CUDA_HOST stream, or copy the batch to the device"
                ))),
            }
        }))
    });
    make_stream(device_type, schema, next)
}

/// The consumer side of [`StreamReader`].
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
        let mut owned = std::mem::take(stream);
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
        let mut out = ArrowDeviceArray::default();
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

/// A foreign `ArrowDeviceArrayStream` (CPU, CUDA_HOST or CUDA) as an iterator of
/// [`Batch`]es, made by [`import_stream`]: host batches zero-copy and fully validated,
/// device batches as [`DeviceRecordBatch`](crate::arrow::DeviceRecordBatch)es whose
/// columns are views of the producer's memory (imported as by
/// [`import_array`](super::import_array)). A batch with null rows at the top level is
/// an error (a record batch has none). The first error ends the iteration; dropping the
/// reader releases the stream (batches already imported live on).
///
/// For code that takes arrow-rs readers, [`into_host_reader`](Self::into_host_reader)
/// makes it a [`RecordBatchReader`](arrow_array::RecordBatchReader).
pub struct StreamReader {
    inner: Consumer,
    wait_on: Option<Stream>,
}

impl StreamReader {
    /// The stream's schema (the columns of every batch).
    pub fn schema(&self) -> SchemaRef {
        self.inner.schema.clone()
    }

    /// The stream as an arrow-rs [`RecordBatchReader`](arrow_array::RecordBatchReader)
    /// (an iterator of `Result<RecordBatch, ArrowError>` with a schema). Host batches
    /// are zero-copy; a CUDA stream's batches are copied to the host
    /// ([`Batch::to_host`]). Its errors are `ArrowError::ExternalError` wrapping
    /// devbuf's (`devbuf_core::Error::from` gives them back); iterate the
    /// `StreamReader` itself for devbuf's errors.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use arrow_array::{RecordBatch, RecordBatchReader, StringArray};
    /// use arrow_schema::{DataType, Field, Schema};
    /// use devbuf_core::Error;
    /// use devbuf_core::arrow::c_device::{export_stream, import_stream, ExportDevice};
    /// let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, true)]));
    /// let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(StringArray::from(vec!["a"]))])?;
    /// let items = vec![Ok(batch.clone()), Err(Error::invalid("source failed"))];
    /// let mut stream = export_stream(schema.clone(), items, ExportDevice::Cpu);
    /// let mut reader = import_stream(&mut stream, None)?.into_host_reader();
    /// assert_eq!(reader.schema(), schema);
    /// assert_eq!(reader.next().unwrap()?, batch);
    /// let e = reader.next().unwrap().unwrap_err(); // an ArrowError
    /// assert!(e.to_string().contains("source failed"));
    /// assert!(reader.next().is_none());
    /// // As a boxed arrow-rs RecordBatchReader:
    /// let mut stream = export_stream(batch.schema(), vec![Ok(batch.clone())], ExportDevice::Cpu);
    /// let reader: Box<dyn RecordBatchReader> = Box::new(import_stream(&mut stream, None)?.into_host_reader());
    /// assert_eq!(reader.schema(), batch.schema());
    /// # Ok::<(), Error>(())
    /// ```
    pub fn into_host_reader(self) -> impl arrow_array::RecordBatchReader + Send + 'static {
        let schema = self.schema();
        arrow_array::RecordBatchIterator::new(
            self.map(|r| r.and_then(|b| b.to_host()).map_err(Into::into)),
            schema,
        )
    }

    fn host_batch(&self, mut raw: ArrowDeviceArray) -> Result<RecordBatch> {
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

    fn device_batch(&self, mut raw: ArrowDeviceArray) -> Result<DeviceRecordBatch> {
        let i = self.inner.index - 1;
        let device = usize::try_from(raw.device_id).unwrap_or(0);
        let array = import_cuda(&mut raw, &self.inner.data_type, self.wait_on.as_ref())?;
        DeviceRecordBatch::from_struct(self.inner.schema.clone(), array, device)
            .map_err(|e| Error::invalid(format!("batch {i}: {e}")))
    }
}

impl Iterator for StreamReader {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Result<Batch>> {
        let raw = match self.inner.next_raw()? {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        let r = if self.inner.stream.device_type == ARROW_DEVICE_CUDA {
            self.device_batch(raw).map(Batch::Device)
        } else {
            self.host_batch(raw).map(Batch::Host)
        };
        if r.is_err() {
            self.inner.done = true;
        }
        Some(r)
    }
}

impl std::fmt::Debug for StreamReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamReader")
            .field("device_type", &self.inner.stream.device_type)
            .field("schema", &self.inner.schema)
            .field("done", &self.inner.done)
            .finish()
    }
}

/// Imports an `ArrowDeviceArrayStream` of device type CPU, CUDA_HOST or CUDA as a
/// [`StreamReader`] (an iterator of [`Batch`]es): the stream is moved out of `stream`
/// (left released) and its schema read. A CUDA stream's batches are
/// [`Batch::Device`], each batch's `sync_event` waited on by the legacy default stream
/// when `on` is `None`, by `on`'s stream when it is `Some` (work queued there
/// afterwards sees the batch); the host does not block. A CPU or CUDA_HOST stream's
/// are [`Batch::Host`] (`on` is not used; a CUDA_HOST event is waited on by the host).
///
/// Errors: a released stream or another device type (left untouched: to accept one
/// device type only, look at [`ArrowDeviceArrayStream::device_type`] first); a null
/// callback or a failing `get_schema` (the stream is released).
///
/// ```no_run
/// # use std::sync::Arc;
/// # use arrow_array::{Int32Array, RecordBatch, StructArray};
/// # use devbuf_core::arrow::{DeviceArray, DeviceRecordBatch};
/// use devbuf_core::arrow::c_device::{export_stream, import_stream, SyncEvent};
/// use devbuf_core::cuda::{Context, Stream};
/// # let ctx = Context::new(0)?;
/// # let batch = RecordBatch::try_from_iter(vec![("x", Arc::new(Int32Array::from(vec![1])) as _)])?;
/// # let d = DeviceArray::from_host(&StructArray::from(batch.clone()), &ctx)?;
/// let on_device = DeviceRecordBatch::try_from(d); // a struct DeviceArray as a batch
/// let mut c_stream = export_stream(batch.schema(), vec![on_device], SyncEvent::DefaultStream);
/// let mine = Stream::new(&ctx)?;
/// for b in import_stream(&mut c_stream, Some(&mine))? {
///     let b = b?; // `mine` waits for its producer before later work
///     println!("{} rows", b.num_rows());
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn import_stream(
    stream: &mut ArrowDeviceArrayStream,
    on: Option<&Stream>,
) -> Result<StreamReader> {
    let side = if stream.device_type == ARROW_DEVICE_CUDA {
        Side::Device
    } else {
        Side::Host
    };
    Ok(StreamReader {
        inner: Consumer::open(
            stream,
            &[ARROW_DEVICE_CPU, ARROW_DEVICE_CUDA_HOST, ARROW_DEVICE_CUDA],
            side,
            "import_stream",
        )?,
        wait_on: on.cloned(),
    })
}
