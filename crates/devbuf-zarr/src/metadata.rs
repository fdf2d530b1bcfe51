//! [`ZarrMetadata`]: an opened array's metadata in devbuf's types.

use zarrs::array::{Array, ArrayMetadata, ArrayMetadataV3, ArrayShardedExt};
use zarrs::metadata::v2::ArrayMetadataV2Order;
use zarrs::metadata::v3::MetadataV3;

use super::validate;
use devbuf_core::__private::host_ops;
use devbuf_core::ElementType;
use devbuf_core::error::{Error, Result};
use devbuf_core::zarr::{Dtype, Endianness, Order, Scalar};

/// The metadata of a zarr array opened with [`ZarrArray`](super::ZarrArray), mapped to
/// devbuf's types.
///
/// Arrays are read into native-endian, C-order [`NDBuffer`](devbuf_core::zarr::NDBuffer)s
/// whatever their stored layout: `stored_dtype` and `order` say how the chunks are
/// *stored*, [`ZarrArray::dtype`](super::ZarrArray::dtype) is the data type of what reads return.
///
/// ```
/// use devbuf_zarr::ZarrArray;
/// use devbuf_core::zarr::{Dtype, Endianness, Order, Scalar};
/// use devbuf_core::ElementType;
/// let a = ZarrArray::open("../../tests/fixtures/zarr/v2_float64_bigendian.zarr")?;
/// let m = a.metadata();
/// assert_eq!(m.zarr_format, 2);
/// assert_eq!(m.shape, vec![10, 7]);
/// assert_eq!(m.chunk_shape, vec![4, 3]);
/// assert_eq!(m.grid_shape, vec![3, 3]);
/// assert_eq!(m.stored_dtype, Dtype::new(ElementType::Float64, Endianness::Big)); // stored big-endian
/// assert_eq!(a.dtype(), Dtype::FLOAT64);                         // read as native values
/// assert_eq!(m.fill_value, Scalar::Float64(0.0));
/// assert_eq!(m.order, Order::C);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ZarrMetadata {
    /// 2 or 3.
    pub zarr_format: u8,
    /// The array's shape.
    pub shape: Vec<u64>,
    /// The shape of every chunk of the regular chunk grid: for a sharded array, the
    /// shard (the unit of storage, and of [`ZarrArray::read_chunks`](super::ZarrArray::read_chunks)).
    /// Chunks at the upper edges extend past the array; reads clip them.
    pub chunk_shape: Vec<u64>,
    /// Chunks per axis (`ceil(shape / chunk_shape)`).
    pub grid_shape: Vec<u64>,
    /// For a sharded array, the shape of the inner chunks of each shard.
    pub subchunk_shape: Option<Vec<u64>>,
    /// The element type and the byte order chunks are stored in (zarr v2's `dtype`, or
    /// the `endian` of zarr v3's `bytes` codec; single-byte types report native order).
    pub stored_dtype: Dtype,
    /// The fill value: what missing chunks read as.
    pub fill_value: Scalar,
    /// Order of the elements within a stored chunk: zarr v2's `order`; for zarr v3,
    /// `F` when the first codec is a `transpose` that reverses the axes, else `C`.
    pub order: Order,
    /// The codecs, outermost (array side) first, in zarr v3 names (v2 filters and
    /// compressors converted as `zarrs` does): e.g. `["transpose", "bytes", "blosc"]`.
    pub codecs: Vec<String>,
    /// For a numpy `datetime64` / `timedelta64` array (zarr v3's `numpy.datetime64` /
    /// `numpy.timedelta64`, zarr v2's `"<M8[ns]"` / `"<m8[10s]"`): its unit. Such arrays
    /// are read as `int64` ([`stored_dtype`](Self::stored_dtype) is int64): each value
    /// counts units since the epoch (1970-01-01T00:00:00, datetime64) or is a duration
    /// (timedelta64) in units, and `i64::MIN` is NaT, as numpy stores them. `None`
    /// for every other data type.
    pub time_unit: Option<TimeUnit>,
}

/// Whether a [`TimeUnit`] is numpy's `datetime64` or `timedelta64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeKind {
    /// `numpy.datetime64`: instants, in units since 1970-01-01T00:00:00.
    Datetime64,
    /// `numpy.timedelta64`: durations, in units.
    Timedelta64,
}

/// The unit of a numpy `datetime64` / `timedelta64` array read as `int64`
/// ([`ZarrMetadata::time_unit`]): numpy's unit (`"Y"`, `"M"`, `"W"`, `"D"`, `"h"`,
/// `"m"`, `"s"`, `"ms"`, `"us"`, `"ns"`, `"ps"`, `"fs"`, `"as"`, or `"generic"`) times
/// a scale factor (numpy's `"10s"`: 10 seconds).
///
/// ```
/// use devbuf_zarr::{TimeKind, ZarrArray};
/// let a = ZarrArray::open("../../tests/fixtures/zarr_codecs/v3_timedelta64_10s.zarr")?;
/// let t = a.metadata().time_unit.clone().unwrap();
/// assert_eq!((t.kind, t.unit.as_str(), t.scale_factor), (TimeKind::Timedelta64, "s", 10));
/// assert_eq!(t.to_string(), "timedelta64[10s]");
/// assert_eq!(a.dtype(), devbuf_core::zarr::Dtype::INT64);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct TimeUnit {
    /// datetime64 or timedelta64.
    pub kind: TimeKind,
    /// numpy's unit name, e.g. `"ns"`.
    pub unit: String,
    /// How many `unit`s one count is (1 for `"ns"`, 10 for `"10s"`).
    pub scale_factor: u32,
}

impl TimeUnit {
    /// numpy's spelling of the unit: `"ns"`, or `"10s"` with a scale factor.
    fn numpy_unit(&self) -> String {
        if self.scale_factor == 1 {
            self.unit.clone()
        } else {
            format!("{}{}", self.scale_factor, self.unit)
        }
    }

    /// The unit of a zarr v3 `numpy.datetime64` / `numpy.timedelta64` data type.
    fn of(dt: &MetadataV3) -> Option<TimeUnit> {
        let kind = match dt.name() {
            "numpy.datetime64" => TimeKind::Datetime64,
            "numpy.timedelta64" => TimeKind::Timedelta64,
            _ => return None,
        };
        let cfg = dt.configuration();
        let unit = cfg
            .and_then(|c| c.get("unit"))
            .and_then(|u| u.as_str())
            .unwrap_or("generic")
            .to_string();
        let scale_factor = cfg
            .and_then(|c| c.get("scale_factor"))
            .and_then(|s| s.as_u64())
            .and_then(|s| u32::try_from(s).ok())
            .unwrap_or(1);
        Some(TimeUnit {
            kind,
            unit,
            scale_factor,
        })
    }
}

impl std::fmt::Display for TimeUnit {
    /// numpy's dtype name: `datetime64[ns]`, `timedelta64[10s]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            TimeKind::Datetime64 => "datetime64",
            TimeKind::Timedelta64 => "timedelta64",
        };
        write!(f, "{kind}[{}]", self.numpy_unit())
    }
}

impl ZarrMetadata {
    /// The data type of arrays read from this array: the stored element type in native
    /// byte order (what numpy and zarr-python return); public as [`ZarrArray::dtype`](super::ZarrArray::dtype).
    pub(crate) fn dtype(&self) -> Dtype {
        Dtype::from(self.stored_dtype.element())
    }

    pub(crate) fn from_array<T: ?Sized>(array: &Array<T>, location: &str) -> Result<ZarrMetadata> {
        // The document as `zarrs` parsed it, checked before anything below (or a read)
        // computes with its shapes: see `validate`.
        let format = match array.metadata() {
            ArrayMetadata::V3(_) => 3,
            ArrayMetadata::V2(_) => 2,
        };
        let doc = serde_json::to_value(array.metadata()).map_err(|e| {
            Error::Malformed(format!("zarr array at {location}: its metadata: {e}"))
        })?;
        validate::check_document(&doc, format, location)?;
        let (zarr_format, v3, v2_order) = match array.metadata() {
            ArrayMetadata::V3(m) => (3u8, m.clone(), None),
            ArrayMetadata::V2(m) => {
                let v3 = zarrs::convert::array_metadata_v2_to_v3(m).map_err(|e| {
                    Error::Malformed(format!(
                        "zarr v2 array at {location}: its metadata has no zarr v3 equivalent ({e})"
                    ))
                })?;
                let order = match m.order {
                    ArrayMetadataV2Order::C => Order::C,
                    ArrayMetadataV2Order::F => Order::F,
                };
                (2u8, v3, Some(order))
            }
        };
        if v3.chunk_grid.name() != "regular" {
            return Err(Error::unsupported(format!(
                "zarr array at {location}: chunk grid {:?} is not supported (devbuf reads \
                 regular chunk grids)",
                v3.chunk_grid.name()
            )));
        }
        let element = element_type(&v3.data_type).ok_or_else(|| {
            Error::unsupported(format!(
                "zarr array at {location}: {:?} is an unsupported data type (devbuf reads {})",
                v3.data_type.name(),
                validate::SUPPORTED_TYPES
            ))
        })?;
        if array.data_type().fixed_size() != Some(element.size()) {
            return Err(Error::Malformed(format!(
                "zarr array at {location}: data type {} has {:?} bytes per element, expected {}",
                v3.data_type.name(),
                array.data_type().fixed_size(),
                element.size()
            )));
        }
        let endianness = stored_endianness(&v3.codecs).unwrap_or(Endianness::Little);
        let stored_dtype = Dtype::new(element, endianness);

        let mut ne = array.fill_value().as_ne_bytes().to_vec();
        if cfg!(target_endian = "big") {
            host_ops::swap_in_place(&mut ne, devbuf_core::__private::swap_width(element));
        }
        let fill_value = Scalar::from_le_bytes(element, &ne).map_err(|e| {
            Error::Malformed(format!(
                "zarr array at {location}: fill value: {}",
                e.detail()
            ))
        })?;

        let ndim = array.dimensionality();
        let chunk_shape: Vec<u64> = array
            .chunk_shape(&vec![0; ndim])
            .map_err(|e| Error::Malformed(format!("zarr array at {location}: chunk grid: {e}")))?
            .iter()
            .map(|c| c.get())
            .collect();
        let order = v2_order.unwrap_or_else(|| v3_order(&v3));
        Ok(ZarrMetadata {
            zarr_format,
            shape: array.shape().to_vec(),
            chunk_shape,
            grid_shape: array.chunk_grid_shape().to_vec(),
            subchunk_shape: array
                .subchunk_shape()
                .map(|s| s.iter().map(|c| c.get()).collect()),
            stored_dtype,
            fill_value,
            order,
            codecs: v3.codecs.iter().map(|c| c.name().to_string()).collect(),
            time_unit: TimeUnit::of(&v3.data_type),
        })
    }
}

/// devbuf's element type of a zarr v3 data type name (and `zarrs`' aliases).
fn element_type(dt: &MetadataV3) -> Option<ElementType> {
    let name = dt.name();
    ElementType::ALL
        .iter()
        .copied()
        .find(|t| t.name() == name)
        .or(match name {
            "complex_float32" => Some(ElementType::Complex64),
            "complex_float64" => Some(ElementType::Complex128),
            // Read as int64 counts of the unit (`ZarrMetadata::time_unit`).
            "numpy.datetime64" | "numpy.timedelta64" => Some(ElementType::Int64),
            _ => None,
        })
}

/// The `endian` of the `bytes` codec (looked for inside `sharding_indexed` too).
fn stored_endianness(codecs: &[MetadataV3]) -> Option<Endianness> {
    for c in codecs {
        let cfg = c.configuration();
        match c.name() {
            "bytes" => {
                return Some(
                    match cfg.and_then(|c| c.get("endian")).and_then(|e| e.as_str()) {
                        Some("big") => Endianness::Big,
                        _ => Endianness::Little,
                    },
                );
            }
            "sharding_indexed" => {
                let inner = cfg
                    .and_then(|c| c.get("codecs"))
                    .and_then(|v| v.as_array())?;
                for codec in inner {
                    if codec.get("name").and_then(|n| n.as_str()) == Some("bytes") {
                        let big = codec
                            .get("configuration")
                            .and_then(|c| c.get("endian"))
                            .and_then(|e| e.as_str())
                            == Some("big");
                        return Some(if big {
                            Endianness::Big
                        } else {
                            Endianness::Little
                        });
                    }
                }
                return None;
            }
            _ => {}
        }
    }
    None
}

/// `F` when the first codec is a transpose reversing the axes.
fn v3_order(v3: &ArrayMetadataV3) -> Order {
    let n = v3.shape.len();
    let Some(first) = v3.codecs.first() else {
        return Order::C;
    };
    if first.name() != "transpose" || n < 2 {
        return Order::C;
    }
    let perm: Option<Vec<u64>> = first
        .configuration()
        .and_then(|c| c.get("order"))
        .and_then(|o| o.as_array())
        .map(|o| o.iter().filter_map(|v| v.as_u64()).collect());
    let reversed: Vec<u64> = (0..n as u64).rev().collect();
    if perm.as_deref() == Some(&reversed[..]) {
        Order::F
    } else {
        Order::C
    }
}
