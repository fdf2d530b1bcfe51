//! numpy's `datetime64` / `timedelta64` in zarr v2 arrays (`"<M8[ns]"`, `">m8[10s]"`):
//! zarrs reads them in zarr v3 (`numpy.datetime64`, `numpy.timedelta64`) but registers
//! no zarr v2 name for them, so zarr v2 arrays of them did not open. This registers the
//! numpy type strings and makes zarrs' own data types (8-byte counts of the unit; the
//! byte order comes from the type string as for every v2 type). devbuf reads them as
//! int64 ([`ZarrMetadata::time_unit`](crate::ZarrMetadata::time_unit) names the unit).

use std::num::NonZeroU32;
use std::sync::Arc;

use zarrs::array::data_type::api::{DataType, DataTypePluginV2, DataTypeTraitsV2};
use zarrs::array::data_type::{NumpyDateTime64DataType, NumpyTimeDelta64DataType, NumpyTimeUnit};
use zarrs::metadata::v2::DataTypeMetadataV2;
use zarrs::plugin::{PluginCreateError, Regex};

/// The zarr v2 names of zarrs' `numpy.datetime64` and `numpy.timedelta64`.
pub(crate) struct NumpyTimeV2;

zarrs::plugin::impl_extension_aliases!(NumpyTimeV2, v2: "<M8[ns]", [],
    [Regex::new(r"^[<>=|][Mm]8(\[[0-9]*[a-zA-Zμ]+\])?$").expect("a valid regex")]);

inventory::submit! {
    DataTypePluginV2::new::<NumpyTimeV2>()
}

/// `(datetime?, unit, scale)` of a numpy type string such as `"<M8[10s]"`.
pub(crate) fn parse(name: &str) -> Option<(bool, NumpyTimeUnit, NonZeroU32)> {
    let rest = name.strip_prefix(['<', '>', '=', '|'])?;
    let (datetime, rest) = match rest.split_at_checked(2)? {
        ("M8", r) => (true, r),
        ("m8", r) => (false, r),
        _ => return None,
    };
    if rest.is_empty() {
        return Some((datetime, NumpyTimeUnit::Generic, NonZeroU32::MIN));
    }
    let inner = rest.strip_prefix('[')?.strip_suffix(']')?;
    let digits = inner
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(inner.len());
    let scale = match &inner[..digits] {
        "" => NonZeroU32::MIN,
        d => d.parse().ok()?,
    };
    let unit: NumpyTimeUnit = serde_json::from_value(inner[digits..].into()).ok()?;
    Some((datetime, unit, scale))
}

impl DataTypeTraitsV2 for NumpyTimeV2 {
    fn create(metadata: &DataTypeMetadataV2) -> Result<DataType, PluginCreateError> {
        let DataTypeMetadataV2::Simple(name) = metadata else {
            return Err(PluginCreateError::Other(
                "numpy datetime64 / timedelta64: a structured type".into(),
            ));
        };
        let (datetime, unit, scale) =
            parse(name).ok_or_else(|| PluginCreateError::NameInvalid { name: name.clone() })?;
        Ok(if datetime {
            Arc::new(NumpyDateTime64DataType::new(unit, scale)).into()
        } else {
            Arc::new(NumpyTimeDelta64DataType::new(unit, scale)).into()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numpy_type_strings() {
        let s = |n: u32| NonZeroU32::new(n).unwrap();
        assert_eq!(
            parse("<M8[ns]"),
            Some((true, NumpyTimeUnit::Nanosecond, s(1)))
        );
        assert_eq!(
            parse(">m8[10s]"),
            Some((false, NumpyTimeUnit::Second, s(10)))
        );
        assert_eq!(parse("<M8[D]"), Some((true, NumpyTimeUnit::Day, s(1))));
        assert_eq!(
            parse("<m8[us]"),
            Some((false, NumpyTimeUnit::Microsecond, s(1)))
        );
        assert_eq!(parse("<M8"), Some((true, NumpyTimeUnit::Generic, s(1))));
        for bad in [
            "<M8[0s]", "<M8[xx]", "<M8[ns", "<i8", "M8[ns]", "<M4[ns]", "",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
