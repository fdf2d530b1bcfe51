//! [`Batch`]: a record batch in host memory or in device memory.

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::DeviceRecordBatch;
use crate::error::Result;
use crate::zarr::BufferPrototype;

/// A record batch in host memory (an arrow-rs [`RecordBatch`]) or in device memory (a
/// [`DeviceRecordBatch`]): what a [`ChunkBatch`](super::ChunkBatch) holds, what the
/// Flight server and client carry (`devbuf::flight::Batch` is this type) and what
/// [`c_device::export_stream`](super::c_device::export_stream) and its reader pass.
///
/// ```
/// use std::sync::Arc;
/// use arrow_array::{ArrayRef, Int32Array, RecordBatch};
/// use devbuf_core::arrow::Batch;
/// use devbuf_core::zarr::BufferPrototype;
/// let rb = RecordBatch::try_from_iter([("x", Arc::new(Int32Array::from(vec![1, 2])) as ArrayRef)])?;
/// let b = Batch::from(rb.clone());
/// assert_eq!((b.num_rows(), b.prototype()), (2, BufferPrototype::Host));
/// assert_eq!(b.as_host(), Some(&rb));
/// assert_eq!(b.to_host()?, rb);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub enum Batch {
    /// An arrow-rs record batch.
    Host(RecordBatch),
    /// A record batch whose columns live in device memory.
    Device(DeviceRecordBatch),
}

impl From<RecordBatch> for Batch {
    /// Zero-copy.
    fn from(b: RecordBatch) -> Batch {
        Batch::Host(b)
    }
}

impl From<DeviceRecordBatch> for Batch {
    /// Zero-copy.
    fn from(b: DeviceRecordBatch) -> Batch {
        Batch::Device(b)
    }
}

impl Batch {
    /// The schema.
    pub fn schema(&self) -> SchemaRef {
        match self {
            Batch::Host(b) => b.schema(),
            Batch::Device(b) => b.schema(),
        }
    }

    /// Number of rows.
    pub fn num_rows(&self) -> usize {
        match self {
            Batch::Host(b) => b.num_rows(),
            Batch::Device(b) => b.num_rows(),
        }
    }

    /// Where the batch lives: [`BufferPrototype::Host`], or the device of a device
    /// batch's message.
    pub fn prototype(&self) -> BufferPrototype {
        match self {
            Batch::Host(_) => BufferPrototype::Host,
            Batch::Device(b) => BufferPrototype::Device(b.message().context().ordinal()),
        }
    }

    /// The host batch (`None` for a device batch).
    pub fn as_host(&self) -> Option<&RecordBatch> {
        match self {
            Batch::Host(b) => Some(b),
            Batch::Device(_) => None,
        }
    }

    /// The device batch (`None` for a host batch).
    pub fn as_device(&self) -> Option<&DeviceRecordBatch> {
        match self {
            Batch::Host(_) => None,
            Batch::Device(b) => Some(b),
        }
    }

    /// The batch on the host (a device batch is copied, see
    /// [`DeviceRecordBatch::to_host`]).
    pub fn to_host(&self) -> Result<RecordBatch> {
        match self {
            Batch::Host(b) => Ok(b.clone()),
            Batch::Device(b) => b.to_host(),
        }
    }
}
