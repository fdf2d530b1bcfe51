//! [`BufferPrototype`]: which memory new buffers get, and the process-wide default.

use std::sync::RwLock;

use crate::cuda::Context;
use crate::error::Result;
use crate::memory::{Memory, Place};

/// Which memory a buffer is made in: the host, or a CUDA device (by ordinal).
///
/// zarr-python's `BufferPrototype` is a pair of classes (`buffer`, `nd_buffer`); here it
/// is a value, and the classes' constructors are its methods (in `constructors.rs`): `prototype.buffer.from_bytes(b)`
/// is `prototype.buffer_from_bytes(b)`, `prototype.nd_buffer.create(...)` is
/// [`nd_create`](Self::nd_create).
///
/// ```
/// use devbuf_core::zarr::{BufferPrototype, Dtype, Order, Scalar};
/// let host = BufferPrototype::Host;
/// let b = host.buffer_from_bytes(&b"abc"[..])?;
/// assert!(b.is_host());
/// let nd = host.nd_create(&[2, 2], Dtype::INT32, Order::C, Some(Scalar::from(7i32)))?;
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

    /// The prototype whose memory `m` is.
    pub fn of(m: &Memory) -> BufferPrototype {
        match m.device_ordinal() {
            None => BufferPrototype::Host,
            Some(o) => BufferPrototype::Device(o),
        }
    }

    /// True when `m` already is memory of this prototype (so conversions are zero-copy).
    pub fn holds(&self, m: &Memory) -> bool {
        BufferPrototype::of(m) == *self
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
/// [`enable_gpu`] (or [`set_default_buffer_prototype`]) said otherwise. Process-wide,
/// like zarr-python's config.
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
pub fn set_default_buffer_prototype(prototype: BufferPrototype) -> BufferPrototype {
    let mut g = DEFAULT.write().unwrap_or_else(|p| p.into_inner());
    std::mem::replace(&mut *g, prototype)
}

/// zarr-python's `zarr.config.enable_gpu()`: new buffers go to device 0 by default.
/// Returns the previous default. Nothing is checked here: without a GPU, creating a
/// buffer from the default prototype then fails with
/// [`Error::CudaUnavailable`](crate::Error::CudaUnavailable).
pub fn enable_gpu() -> BufferPrototype {
    set_default_buffer_prototype(BufferPrototype::Device(0))
}

/// Back to host buffers by default; returns the previous default.
pub fn disable_gpu() -> BufferPrototype {
    set_default_buffer_prototype(BufferPrototype::Host)
}
