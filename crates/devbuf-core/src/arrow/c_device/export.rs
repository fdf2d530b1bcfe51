//! Producers: [`DeviceArray`] → `ArrowDeviceArray` (CUDA), host arrays → CPU or
//! CUDA_HOST; one function, [`export_array`], with [`ExportDevice`] saying which.
//!
//! Every exported structure (the base array, each child, each dictionary) owns a boxed
//! [`Private`] in `private_data`: the buffer and child pointer arrays, and whatever
//! keeps its memory alive (clones of the device buffers, arrow-rs buffers, the sync
//! event). The release callback frees it and releases the children that were not moved
//! out, exactly once.

use std::any::Any;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use arrow_buffer::Buffer;
use arrow_data::{ArrayData, layout};
use arrow_schema::ffi::FFI_ArrowSchema;
use arrow_schema::{DataType, Field};

use super::abi::{
    ARROW_DEVICE_CPU, ARROW_DEVICE_CUDA, ARROW_DEVICE_CUDA_HOST, ArrowArray, ArrowDeviceArray,
};
use super::types::{Side, check_type};
use crate::arrow::{AnyArray, DeviceArray};
use crate::cuda::{Context, DeviceBuffer, Event, EventFlags, Stream};
use crate::error::{Error, Result};

static RELEASED: AtomicU64 = AtomicU64::new(0);
static LIVE: AtomicI64 = AtomicI64::new(0);

/// Number of release callbacks of devbuf's exports that have run in this process:
/// one per exported structure (base array, child, dictionary, stream). For tests that
/// check "released exactly once"; not a stable API.
#[doc(hidden)]
pub fn release_count() -> u64 {
    RELEASED.load(Ordering::SeqCst)
}

/// Number of structures devbuf has exported and that are not released yet (arrays,
/// children, dictionaries and streams). For tests that check nothing leaks; not a
/// stable API.
#[doc(hidden)]
pub fn live_exports() -> i64 {
    LIVE.load(Ordering::SeqCst)
}

pub(super) fn count_export() {
    LIVE.fetch_add(1, Ordering::SeqCst);
}

pub(super) fn count_release() {
    RELEASED.fetch_add(1, Ordering::SeqCst);
    LIVE.fetch_sub(1, Ordering::SeqCst);
}

/// Which event the exporter records for `sync_event`.
///
/// The Arrow C Device Data Interface lets a consumer read the buffers only after the
/// event has completed; the exporter must record it after the work that produced
/// the data.
#[derive(Debug, Clone, Copy, Default)]
pub enum SyncEvent<'a> {
    /// Record an event on the *legacy default stream* of the context(s) the buffers
    /// belong to. devbuf's synchronous copies and its kernels run there, so this covers
    /// everything devbuf itself did (and any blocking-stream work of other libraries
    /// that synchronises with the legacy stream). The usual choice.
    #[default]
    DefaultStream,
    /// Record the event on this stream: the producing work was queued on it (or before
    /// it in stream order).
    Stream(&'a Stream),
    /// No event (`sync_event` null): the caller asserts that the data is complete and
    /// visible to any stream, e.g. after `Context::synchronize`.
    None,
}

/// What one exported structure is made of.
pub(super) struct Node {
    pub length: usize,
    pub null_count: usize,
    pub offset: usize,
    pub buffers: Vec<*const c_void>,
    pub children: Vec<ArrowArray>,
    pub dictionary: Option<ArrowArray>,
    pub keep: Box<dyn Any + Send>,
}

/// The `private_data` of an exported structure.
struct Private {
    buffers: Box<[*const c_void]>,
    children: Box<[*mut ArrowArray]>,
    dictionary: *mut ArrowArray,
    _keep: Box<dyn Any + Send>,
}

fn to_i64(v: usize, what: &str) -> Result<i64> {
    i64::try_from(v).map_err(|_| Error::invalid(format!("{what} {v} does not fit in an int64_t")))
}

impl Node {
    /// Builds the C structure; it owns everything through `private_data`.
    pub(super) fn into_c(self) -> Result<ArrowArray> {
        let length = to_i64(self.length, "length")?;
        let null_count = to_i64(self.null_count, "null count")?;
        let offset = to_i64(self.offset, "offset")?;
        let n_buffers = self.buffers.len() as i64;
        let n_children = self.children.len() as i64;
        let children: Box<[*mut ArrowArray]> = self
            .children
            .into_iter()
            .map(|c| Box::into_raw(Box::new(c)))
            .collect();
        let dictionary = match self.dictionary {
            Some(d) => Box::into_raw(Box::new(d)),
            None => std::ptr::null_mut(),
        };
        let mut private = Box::new(Private {
            buffers: self.buffers.into_boxed_slice(),
            children,
            dictionary,
            _keep: self.keep,
        });
        let buffers = if private.buffers.is_empty() {
            std::ptr::null_mut()
        } else {
            private.buffers.as_mut_ptr()
        };
        let children_ptr = if private.children.is_empty() {
            std::ptr::null_mut()
        } else {
            private.children.as_mut_ptr()
        };
        count_export();
        Ok(ArrowArray {
            length,
            null_count,
            offset,
            n_buffers,
            n_children,
            buffers,
            children: children_ptr,
            dictionary,
            release: Some(release_exported),
            private_data: Box::into_raw(private).cast(),
        })
    }
}

/// The release callback of every array devbuf exports.
///
/// # Safety
/// `array` must be null or point at a structure made by [`Node::into_c`] (possibly
/// moved), released or not.
unsafe extern "C" fn release_exported(array: *mut ArrowArray) {
    if array.is_null() {
        return;
    }
    // Safety: the consumer passes the structure this callback belongs to (possibly
    // moved to another address, which is fine: nothing points into it).
    let a = unsafe { &mut *array };
    let private = a.private_data.cast::<Private>();
    a.private_data = std::ptr::null_mut();
    a.release = None;
    if private.is_null() {
        // Called twice through a saved pointer: nothing left to free.
        return;
    }
    // Safety: `private_data` was made by `Box::into_raw` in `Node::into_c` and is
    // reclaimed exactly once (it was nulled above).
    let private = unsafe { Box::from_raw(private) };
    // Dropping runs the destructors of whatever keeps the memory alive (arrow-rs
    // buffers may have foreign owners): a panic there must not unwind into the C
    // caller. What a panicking destructor leaves behind is leaked.
    let _ = catch_unwind(AssertUnwindSafe(move || {
        for &child in private.children.iter() {
            // Safety: each child was made by `Box::into_raw` and is owned by this
            // parent. Dropping the box releases the child unless the consumer moved it
            // out (then its `release` is null here and only the box's memory is freed).
            drop(unsafe { Box::from_raw(child) });
        }
        if !private.dictionary.is_null() {
            // Safety: as for the children.
            drop(unsafe { Box::from_raw(private.dictionary) });
        }
        drop(private);
    }));
    count_release();
}

/// The schema devbuf exports next to an array: a nullable field with an empty name of
/// the array's data type (what `FFI_ArrowSchema::try_from(&Field::new("", data_type,
/// true))` gives).
pub(crate) fn export_schema(data_type: &DataType) -> Result<FFI_ArrowSchema> {
    Ok(FFI_ArrowSchema::try_from(&Field::new(
        "",
        data_type.clone(),
        true,
    ))?)
}

fn ptr_of(b: &DeviceBuffer) -> *const c_void {
    b.address() as usize as *const c_void
}

/// Collects the contexts of every buffer (distinct by identity) and checks that they
/// are all on one device.
fn contexts_of(array: &DeviceArray) -> Result<Vec<Context>> {
    let mut out: Vec<Context> = Vec::new();
    for b in array.all_buffers() {
        let c = b.context();
        if let Some(first) = out.first()
            && first.ordinal() != c.ordinal()
        {
            return Err(Error::invalid(format!(
                "the array's buffers live on devices {} and {}: an ArrowDeviceArray has one device_id",
                first.ordinal(),
                c.ordinal()
            )));
        }
        if !out.iter().any(|o| o.same_as(c)) {
            out.push(c.clone());
        }
    }
    Ok(out)
}

fn device_node(a: &DeviceArray) -> Result<Node> {
    let dt = a.data_type();
    let l = layout(dt);
    let mut buffers = Vec::with_capacity(a.buffers().len() + 1);
    let mut keep: Vec<DeviceBuffer> = Vec::with_capacity(a.buffers().len() + 1);
    if l.can_contain_null_mask {
        match a.validity() {
            Some(v) => {
                buffers.push(ptr_of(v));
                keep.push(v.clone());
            }
            None => buffers.push(std::ptr::null()),
        }
    } else if a.validity().is_some() {
        return Err(Error::invalid(format!(
            "a {dt} array has no validity bitmap in the C Data Interface, but this one has one"
        )));
    }
    for b in a.buffers() {
        buffers.push(ptr_of(b));
        keep.push(b.clone());
    }
    let children = a
        .children()
        .iter()
        .map(|c| device_node(c)?.into_c())
        .collect::<Result<Vec<_>>>()?;
    let dictionary = match a.dictionary() {
        Some(d) => Some(device_node(d)?.into_c()?),
        None => None,
    };
    Ok(Node {
        length: a.len(),
        null_count: if *dt == DataType::Null {
            a.len()
        } else {
            a.null_count()
        },
        offset: a.offset(),
        buffers,
        children,
        dictionary,
        keep: Box::new(keep),
    })
}

/// An event recorded per `sync`, in the context that will own it.
fn record_event(contexts: &[Context], sync: SyncEvent<'_>) -> Result<Option<Event>> {
    match sync {
        SyncEvent::None => Ok(None),
        SyncEvent::Stream(s) => Ok(Some(s.record_event()?)),
        SyncEvent::DefaultStream => {
            let Some((main, others)) = contexts.split_first() else {
                // No device memory at all: nothing to wait for.
                return Ok(None);
            };
            // Buffers of other contexts on the same device: order their legacy streams
            // before the main context's, then record once there.
            for c in others {
                let e = Event::new(c, EventFlags::default())?;
                e.record(None)?;
                main.default_stream_wait_event(&e)?;
            }
            let e = Event::new(main, EventFlags::default())?;
            e.record(None)?;
            Ok(Some(e))
        }
    }
}

/// The heap cell `sync_event` points at: a `CUevent` handle (`#[repr(transparent)]`,
/// so the cell's address is the handle's).
#[repr(transparent)]
struct EventCell(*mut c_void);

// Safety: the handle is only read (by consumers, through `sync_event`); the event it
// names is owned by the same private data and may be used from any thread.
unsafe impl Send for EventCell {}

/// Wraps an exported base array with its device fields and (optional) event, which the
/// base structure's private data then owns.
fn with_device(
    node: Node,
    device_type: i32,
    device_id: i64,
    event: Option<Event>,
) -> Result<ArrowDeviceArray> {
    let (node, sync_event) = match event {
        None => (node, std::ptr::null_mut()),
        Some(e) => {
            // `sync_event` is a `CUevent*`: it points at a heap cell holding the handle,
            // owned (with the event) by the base structure's private data.
            let mut cell = Box::new(EventCell(e.as_raw()));
            let ptr: *mut *mut c_void = &mut cell.0;
            let keep = node.keep;
            (
                Node {
                    keep: Box::new((keep, e, cell)),
                    ..node
                },
                ptr.cast::<c_void>(),
            )
        }
    };
    Ok(ArrowDeviceArray {
        array: node.into_c()?,
        device_id,
        device_type,
        sync_event,
        reserved: [0; 3],
    })
}

/// The CUDA export of [`export_array`], without the schema.
pub(super) fn export_device_array_only(
    array: &DeviceArray,
    sync: SyncEvent<'_>,
) -> Result<ArrowDeviceArray> {
    check_type(array.data_type(), Side::Device)?;
    let contexts = contexts_of(array)?;
    let device_id = match (contexts.first(), sync) {
        (Some(c), _) => c.ordinal(),
        (None, SyncEvent::Stream(s)) => s.context().ordinal(),
        (None, _) => 0,
    };
    let node = device_node(array)?;
    let event = record_event(&contexts, sync)?;
    with_device(node, ARROW_DEVICE_CUDA, device_id as i64, event)
}

/// Which memory an exported array is in, and so the device type of the
/// `ArrowDeviceArray` (or stream) that [`export_array`] and
/// [`export_stream`](super::export_stream) make: ordinary host memory is CPU,
/// page-locked CUDA memory is CUDA_HOST, device memory is CUDA. A [`SyncEvent`]
/// converts into [`ExportDevice::Cuda`], so a device export reads
/// `export_array(&device_array, SyncEvent::DefaultStream)`.
///
/// ```
/// use arrow_array::Int32Array;
/// use devbuf_core::arrow::c_device::{export_array, ExportDevice, ARROW_DEVICE_CPU};
/// let (c_array, _schema) = export_array(&Int32Array::from(vec![1, 2]), ExportDevice::Cpu)?;
/// assert_eq!(c_array.device_type(), ARROW_DEVICE_CPU);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub enum ExportDevice<'a> {
    /// Ordinary host memory (a host array): device type CPU (1), `device_id` -1, no
    /// event.
    #[default]
    Cpu,
    /// Page-locked host memory of `context` (a host array, e.g. from
    /// `arrow_buffer::Buffer::from(`[`HostBuffer`](crate::cuda::HostBuffer)`)` or
    /// copied from the device by [`DeviceArray::to_host`]): device type CUDA_HOST (3),
    /// `device_id` = the context's ordinal. Every non-empty buffer is checked with the
    /// driver to be page-locked; buffers the export has to make are allocated
    /// page-locked in `context`. `sync`: see [`SyncEvent`] (`SyncEvent::None` when the
    /// host wrote the data or devbuf's synchronous copies did).
    CudaHost {
        /// The context the page-locked memory belongs to.
        context: &'a Context,
        /// Which event to record for `sync_event`.
        sync: SyncEvent<'a>,
    },
    /// Device memory (a [`DeviceArray`]): device type CUDA (2), `device_id` = the
    /// buffers' device, `sync_event` as the [`SyncEvent`] says.
    Cuda(SyncEvent<'a>),
}

impl<'a> From<SyncEvent<'a>> for ExportDevice<'a> {
    /// [`ExportDevice::Cuda`].
    fn from(sync: SyncEvent<'a>) -> ExportDevice<'a> {
        ExportDevice::Cuda(sync)
    }
}

impl ExportDevice<'_> {
    /// A buffer the export makes (a realigned validity bitmap, the variadic buffer sizes
    /// of view types), in memory of this kind.
    fn synth(&self, bytes: &[u8]) -> Result<Buffer> {
        match self {
            ExportDevice::Cpu | ExportDevice::Cuda(_) => Ok(Buffer::from_slice_ref(bytes)),
            ExportDevice::CudaHost { context, .. } => {
                let mut h = context.allocate_host(bytes.len())?;
                h.copy_from_slice(bytes);
                Ok(Buffer::from(h))
            }
        }
    }

    /// Checks that `b` is memory of this kind (page-locked for CUDA_HOST).
    fn check(&self, b: &Buffer, what: &str, dt: &DataType) -> Result<()> {
        if let ExportDevice::CudaHost { context, .. } = self
            && !b.is_empty()
            && !context.is_page_locked(b.as_ptr(), b.len())?
        {
            return Err(Error::invalid(format!(
                "cannot export as CUDA_HOST: the {what} of a {dt} array ({} bytes at {:p}) is not page-locked memory known to CUDA (allocate it with Context::allocate_host, or export as CPU)",
                b.len(),
                b.as_ptr()
            )));
        }
        Ok(())
    }
}

/// The validity bitmap of `data` indexed by the array's own offset (arrow-rs keeps a
/// separate offset for the null buffer; the C Data Interface has one offset).
fn aligned_validity(data: &ArrayData, target: &ExportDevice<'_>) -> Result<Option<Buffer>> {
    let Some(nulls) = data.nulls() else {
        return Ok(None);
    };
    let (off, len) = (data.offset(), data.len());
    let noff = nulls.offset();
    if noff == off {
        return Ok(Some(nulls.buffer().clone()));
    }
    if noff > off && (noff - off) % 8 == 0 {
        // Same bit position within a byte: a byte slice is enough (zero-copy).
        return Ok(Some(nulls.buffer().slice((noff - off) / 8)));
    }
    let total = off
        .checked_add(len)
        .ok_or_else(|| Error::invalid("offset + length overflows"))?;
    let mut bytes = vec![0u8; total.div_ceil(8)];
    for i in 0..len {
        if nulls.is_valid(i) {
            let bit = off + i;
            bytes[bit / 8] |= 1 << (bit % 8);
        }
    }
    Ok(Some(target.synth(&bytes)?))
}

fn host_node(data: &ArrayData, target: &ExportDevice<'_>) -> Result<Node> {
    let dt = data.data_type();
    let l = layout(dt);
    let mut buffers = Vec::with_capacity(data.buffers().len() + 2);
    let mut keep: Vec<Buffer> = Vec::with_capacity(data.buffers().len() + 2);
    if l.can_contain_null_mask {
        match aligned_validity(data, target)? {
            Some(v) => {
                target.check(&v, "validity bitmap", dt)?;
                buffers.push(v.as_ptr().cast::<c_void>());
                keep.push(v);
            }
            None => buffers.push(std::ptr::null()),
        }
    }
    for (i, b) in data.buffers().iter().enumerate() {
        target.check(b, &format!("buffer {i}"), dt)?;
        buffers.push(b.as_ptr().cast::<c_void>());
        keep.push(b.clone());
    }
    if l.variadic {
        // View types: one more buffer, the int64 sizes of the variadic data buffers.
        let sizes: Vec<u8> = data
            .buffers()
            .iter()
            .skip(1)
            .flat_map(|b| (b.len() as i64).to_le_bytes())
            .collect();
        let sizes = target.synth(&sizes)?;
        buffers.push(if sizes.is_empty() {
            std::ptr::null()
        } else {
            sizes.as_ptr().cast::<c_void>()
        });
        keep.push(sizes);
    }
    let (children, dictionary) = match dt {
        DataType::Dictionary(_, _) => {
            let values = data
                .child_data()
                .first()
                .ok_or_else(|| Error::invalid(format!("a {dt} array without dictionary values")))?;
            (Vec::new(), Some(host_node(values, target)?.into_c()?))
        }
        _ => (
            data.child_data()
                .iter()
                .map(|c| host_node(c, target)?.into_c())
                .collect::<Result<Vec<_>>>()?,
            None,
        ),
    };
    Ok(Node {
        length: data.len(),
        null_count: if *dt == DataType::Null {
            data.len()
        } else {
            data.null_count()
        },
        offset: data.offset(),
        buffers,
        children,
        dictionary,
        keep: Box::new(keep),
    })
}

/// Exports an array — on the host (an arrow-rs array) or on a device (a
/// [`DeviceArray`]) — as an `ArrowDeviceArray` and its schema, zero-copy: the C buffers
/// are the array's own memory (`buffers[0]` the validity bitmap or null, then the
/// type's buffers; children and dictionary as their own structures), which the export
/// keeps alive until the consumer releases it (each child independently when moved
/// out). A host validity bitmap whose bit offset differs from the array's is realigned
/// into a new buffer, as the C Data Interface has a single offset.
///
/// `device` says which memory the buffers are, and so the device type
/// ([`ExportDevice`]): a host array as CPU (1) with `device_id` -1 and no event
/// ([`ExportDevice::Cpu`]) or, in page-locked CUDA memory, as CUDA_HOST (3)
/// ([`ExportDevice::CudaHost`]; ordinary memory is then an error: export it as CPU); a
/// device array as CUDA (2) with `device_id` = its device and the event the
/// [`SyncEvent`] asks for (a `SyncEvent` converts into [`ExportDevice::Cuda`]); an
/// array without any device memory (e.g. of type `Null`) gets no event and
/// `device_id` 0 unless the event is recorded on a stream.
///
/// Errors: a host array with [`ExportDevice::Cuda`] or a device array with a host
/// device type (copy it: [`DeviceArray::from_host`], [`DeviceArray::to_host`]); device
/// buffers on more than one device; view types (`Utf8View`, `BinaryView`) on a device,
/// whose variadic buffer sizes have no agreed device-side home (see the docs).
///
/// ```
/// use arrow_array::{Array, StringArray};
/// use devbuf_core::arrow::c_device::{export_array, import_array, ExportDevice};
/// let strings = StringArray::from(vec![Some("a"), None, Some("ccc")]);
/// let (mut c_array, c_schema) = export_array(&strings, ExportDevice::Cpu)?;
/// let back = import_array(&mut c_array, &c_schema, None)?.into_host()?;
/// assert_eq!(back.as_ref(), &strings as &dyn Array);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
///
/// A device array, and page-locked memory (a device array copied to the host):
///
/// ```no_run
/// use arrow_array::Int32Array;
/// use devbuf_core::arrow::DeviceArray;
/// use devbuf_core::arrow::c_device::{
///     export_array, import_array, ExportDevice, SyncEvent, ARROW_DEVICE_CUDA_HOST,
/// };
/// use devbuf_core::cuda::Context;
/// let ctx = Context::new(0)?;
/// let d = DeviceArray::from_host(&Int32Array::from(vec![1, 2, 3]), &ctx)?;
/// let (mut c_array, c_schema) = export_array(&d, SyncEvent::DefaultStream)?;
/// // ... hand both to any C Device Data Interface consumer; or back to devbuf:
/// let back = import_array(&mut c_array, &c_schema, None)?.into_device()?;
/// assert_eq!(back.buffers()[0].address(), d.buffers()[0].address()); // zero-copy
///
/// let pinned = d.to_host()?; // one copy into page-locked memory
/// let device = ExportDevice::CudaHost { context: &ctx, sync: SyncEvent::None };
/// let (c_array, _schema) = export_array(pinned.as_ref(), device)?;
/// assert_eq!(c_array.device_type(), ARROW_DEVICE_CUDA_HOST);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub fn export_array<'a>(
    array: impl Into<AnyArray>,
    device: impl Into<ExportDevice<'a>>,
) -> Result<(ArrowDeviceArray, FFI_ArrowSchema)> {
    let array = array.into();
    let schema = export_schema(array.data_type())?;
    Ok((export_any(&array, device.into())?, schema))
}

/// [`export_array`] without the schema.
pub(super) fn export_any(array: &AnyArray, device: ExportDevice<'_>) -> Result<ArrowDeviceArray> {
    match (array, device) {
        (AnyArray::Device(a), ExportDevice::Cuda(sync)) => export_device_array_only(a, sync),
        (AnyArray::Host(a), ExportDevice::Cpu | ExportDevice::CudaHost { .. }) => {
            export_host_data(&a.to_data(), device)
        }
        (AnyArray::Device(a), _) => Err(Error::invalid(format!(
            "cannot export a {} array in device memory as {}: a device array exports as CUDA \
             (pass a SyncEvent), or copy it to the host first (DeviceArray::to_host)",
            a.data_type(),
            host_name(&device)
        ))),
        (AnyArray::Host(a), _) => Err(Error::invalid(format!(
            "cannot export a {} array in host memory as CUDA: a host array exports as CPU or \
             CUDA_HOST (ExportDevice::Cpu / CudaHost), or copy it to a device first \
             (DeviceArray::from_host)",
            a.data_type()
        ))),
    }
}

fn host_name(d: &ExportDevice<'_>) -> &'static str {
    match d {
        ExportDevice::Cpu => "CPU",
        ExportDevice::CudaHost { .. } => "CUDA_HOST",
        ExportDevice::Cuda(_) => "CUDA",
    }
}

/// The host export of [`export_array`] (arrow-rs array data), without the schema.
pub(super) fn export_host_data(
    data: &ArrayData,
    device: ExportDevice<'_>,
) -> Result<ArrowDeviceArray> {
    check_type(data.data_type(), Side::Host)?;
    let node = host_node(data, &device)?;
    match device {
        ExportDevice::Cpu | ExportDevice::Cuda(_) => with_device(node, ARROW_DEVICE_CPU, -1, None),
        ExportDevice::CudaHost { context, sync } => {
            let event = record_event(std::slice::from_ref(context), sync)?;
            with_device(
                node,
                ARROW_DEVICE_CUDA_HOST,
                context.ordinal() as i64,
                event,
            )
        }
    }
}
