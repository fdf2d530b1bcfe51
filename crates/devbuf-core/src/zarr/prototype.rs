//! [`BufferPrototype`]: which memory new buffers get, and the process-wide default.

use std::sync::RwLock;

use crate::cuda::Context;
use crate::error::Result;
use crate::memory::{Memory, Place};

/// Which memory a buffer is made in: the host, or a CUDA device (by ordinal).
///
/// zarr-python's `BufferPrototype` is a pair of classes (`buffer`, `nd_buffer`); here it
/// is a value that the buffers' constructors take: `prototype.buffer.from_bytes(b)` is
/// `ByteBuffer::from(b).to_prototype(&prototype)`, `prototype.nd_buffer.create(...)` is
/// [`NDBuffer::create(&prototype, ...)`](super::NDBuffer::create),
/// `prototype.nd_buffer.from_numpy_array(a)` is
/// `NDBuffer::from_ndarray(a).to_prototype(&prototype)`. Every host-or-device value
/// answers `prototype()` ([`Memory::prototype`], [`ByteBuffer::prototype`](super::ByteBuffer::prototype),
/// [`NDBuffer::prototype`](super::NDBuffer::prototype)); compare it with `==`.
///
/// ```
/// use devbuf_core::zarr::{BufferPrototype, ByteBuffer, Dtype, NDBuffer, Order, Scalar};
/// let host = BufferPrototype::Host;
/// let b = ByteBuffer::from(&b"abc"[..]).to_prototype(&host)?;
/// assert!(b.prototype().is_host());
/// assert!(b.as_memory().prototype() == host); // already there: conversions are zero-copy
/// let nd = NDBuffer::create(&host, &[2, 2], Dtype::INT32, Order::C, Some(Scalar::from(7i32)))?;
/// assert!(nd.all_equal(Some(Scalar::from(7i32)), true)?);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum BufferPrototype {
    /// Host memory (`zarr.buffer.cpu`).
    #[default]
    Host,
    /// Memory of the CUDA device with this ordinal (`zarr.buffer.gpu`), in its primary
    /// context.
    Device(usize),
}

impl BufferPrototype {
    /// True for [`BufferPrototype::Host`].
    pub fn is_host(&self) -> bool {
        matches!(self, BufferPrototype::Host)
    }

    /// True for a device prototype.
    pub fn is_device(&self) -> bool {
        !self.is_host()
    }

    /// The device context of a device prototype (`None` for the host). Errors with
    /// [`Error::CudaUnavailable`](crate::Error::CudaUnavailable) on a machine without
    /// CUDA, or for an ordinal that does not exist.
    pub fn context(&self) -> Result<Option<Context>> {
        match self {
            BufferPrototype::Host => Ok(None),
            BufferPrototype::Device(o) => Ok(Some(Context::new(*o)?)),
        }
    }

    pub(crate) fn place(&self) -> Result<Place> {
        Ok(match self.context()? {
            None => Place::Host,
            Some(ctx) => Place::Device(ctx),
        })
    }
}

// Here rather than in `memory`, which sits below `zarr` and does not import it.
impl Memory {
    /// The prototype whose memory this is: [`BufferPrototype::Host`] for host memory,
    /// [`BufferPrototype::Device`] with the device's ordinal for device memory. Memory
    /// `m` already is where `p` puts buffers (so conversions to `p` are zero-copy) when
    /// `m.prototype() == p`.
    ///
    /// ```
    /// use devbuf_core::memory::Memory;
    /// use devbuf_core::zarr::BufferPrototype;
    /// let m = Memory::from(vec![1u8, 2, 3]);
    /// assert_eq!(m.prototype(), BufferPrototype::Host);
    /// assert!(m.prototype().is_host());
    /// ```
    pub fn prototype(&self) -> BufferPrototype {
        match self.as_device().map(|d| d.context().ordinal()) {
            None => BufferPrototype::Host,
            Some(o) => BufferPrototype::Device(o),
        }
    }
}

impl std::fmt::Display for BufferPrototype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BufferPrototype::Host => f.write_str("host"),
            BufferPrototype::Device(o) => write!(f, "cuda:{o}"),
        }
    }
}

static DEFAULT: RwLock<BufferPrototype> = RwLock::new(BufferPrototype::Host);

/// The prototype that code without an explicit one uses: the host unless
/// [`set_default_buffer_prototype`] said otherwise. Process-wide, like zarr-python's
/// config.
///
/// ```
/// use devbuf_core::zarr::{BufferPrototype, default_buffer_prototype};
/// // (other threads may change it; a fresh process starts on the host)
/// let p = default_buffer_prototype();
/// assert!(p == BufferPrototype::Host || p.is_device());
/// ```
pub fn default_buffer_prototype() -> BufferPrototype {
    *DEFAULT.read().unwrap_or_else(|p| p.into_inner())
}

/// Sets the process-wide default prototype; returns the previous one (to restore it,
/// as zarr-python's `with config.enable_gpu():` does on exit).
///
/// zarr-python's `zarr.config.enable_gpu()` is
/// `set_default_buffer_prototype(BufferPrototype::Device(0))`: new buffers go to device
/// 0 by default. Nothing is checked here: without a GPU, creating a buffer from the
/// default prototype then fails with
/// [`Error::CudaUnavailable`](crate::Error::CudaUnavailable). Back to host buffers:
/// `set_default_buffer_prototype(BufferPrototype::Host)`.
///
/// ```
/// use devbuf_core::zarr::{BufferPrototype, default_buffer_prototype, set_default_buffer_prototype};
/// let before = set_default_buffer_prototype(BufferPrototype::Device(0)); // enable_gpu()
/// assert_eq!(default_buffer_prototype(), BufferPrototype::Device(0));
/// set_default_buffer_prototype(before); // restore
/// ```
pub fn set_default_buffer_prototype(prototype: BufferPrototype) -> BufferPrototype {
    let mut g = DEFAULT.write().unwrap_or_else(|p| p.into_inner());
    std::mem::replace(&mut *g, prototype)
}
