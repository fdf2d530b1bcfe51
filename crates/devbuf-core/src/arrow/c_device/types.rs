//! Which data types cross the interface, and the C Data Interface's view of each type:
//! the number of buffers (the children are `arrow::device::child_fields`, the offsets
//! `arrow::device::has_offsets`).

use arrow_data::layout;
use arrow_schema::DataType;

use crate::error::{Error, Result};

/// Where the buffers live (view types are host-only, see [`check_type`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    Host,
    Device,
}

/// Checks that `dt` (and every nested type) can be exported or imported on `side`,
/// before anything calls `arrow_data::layout` (which panics on a negative
/// fixed-size-binary width).
///
/// Refused, with the reason: view types on the device — the C Data Interface appends
/// a buffer with the sizes of the variadic data buffers, and for device arrays it is
/// not settled whether that buffer lives in device memory (as the specification's
/// "all buffers are device pointers" says) or in host memory (what Arrow C++ exports);
/// guessing wrong would read the wrong memory.
pub(super) fn check_type(dt: &DataType, side: Side) -> Result<()> {
    match dt {
        DataType::Utf8View | DataType::BinaryView if side == Side::Device => {
            Err(Error::unsupported(format!(
                "{dt} arrays are not supported on CUDA devices by devbuf's C Device Data Interface: the variadic buffer sizes of view types have no agreed place for device arrays (Arrow C++ puts them in host memory, the specification says device memory); convert to {} first or use CPU/CUDA_HOST",
                if *dt == DataType::Utf8View {
                    "Utf8/LargeUtf8"
                } else {
                    "Binary/LargeBinary"
                }
            )))
        }
        DataType::FixedSizeBinary(n) if *n < 0 => Err(Error::invalid(format!(
            "fixed-size binary with a negative width {n}"
        ))),
        DataType::FixedSizeList(f, n) => {
            if *n < 0 {
                return Err(Error::invalid(format!(
                    "fixed-size list with a negative size {n}"
                )));
            }
            check_type(f.data_type(), side)
        }
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::Map(f, _) => check_type(f.data_type(), side),
        DataType::Struct(fs) => fs.iter().try_for_each(|f| check_type(f.data_type(), side)),
        DataType::Union(fs, _) => fs
            .iter()
            .try_for_each(|(_, f)| check_type(f.data_type(), side)),
        DataType::RunEndEncoded(r, v) => {
            if !matches!(
                r.data_type(),
                DataType::Int16 | DataType::Int32 | DataType::Int64
            ) {
                return Err(Error::invalid(format!(
                    "run-end encoded array with run ends of type {}: must be Int16, Int32 or Int64",
                    r.data_type()
                )));
            }
            check_type(v.data_type(), side)
        }
        DataType::Dictionary(k, v) => {
            if !k.is_dictionary_key_type() {
                return Err(Error::invalid(format!(
                    "dictionary with keys of type {k}: keys must be an integer type"
                )));
            }
            check_type(v, side)
        }
        _ => Ok(()),
    }
}

/// The number of C buffers of a non-view type: validity (if the type has one) plus the
/// type's buffers. View types have this many plus the variadic data buffers plus one.
/// Only call after [`check_type`].
pub(super) fn base_buffer_count(dt: &DataType) -> usize {
    let l = layout(dt);
    l.buffers.len() + usize::from(l.can_contain_null_mask)
}
