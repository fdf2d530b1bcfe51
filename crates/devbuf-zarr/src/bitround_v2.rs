//! numcodecs' `BitRound` filter in zarr v2 arrays (`{"id": "bitround", "keepbits": n}`):
//! zarrs reads it in zarr v3 (`bitround`, `numcodecs.bitround`) but registers no zarr v2
//! name for it, so zarr v2 arrays with it did not open. This registers the v2 name and
//! makes zarrs' own codec (decoding is the identity: bit rounding happens when writing).

use std::sync::Arc;

use zarrs::array::codec::BitroundCodec;
use zarrs::array::codec::api::{Codec, CodecPluginV2, CodecTraitsV2};
use zarrs::metadata::v2::MetadataV2;
use zarrs::plugin::PluginCreateError;

/// The zarr v2 name of zarrs' `bitround` codec.
pub(crate) struct BitroundV2;

zarrs::plugin::impl_extension_aliases!(BitroundV2, v2: "bitround");

inventory::submit! {
    CodecPluginV2::new::<BitroundV2>()
}

impl CodecTraitsV2 for BitroundV2 {
    fn create(metadata: &MetadataV2) -> Result<Codec, PluginCreateError> {
        let c = metadata.configuration();
        let keepbits = c
            .get("keepbits")
            .and_then(|k| k.as_u64())
            .and_then(|k| u32::try_from(k).ok())
            .ok_or_else(|| {
                PluginCreateError::Other(format!(
                    "bitround: keepbits {:?} is not a non-negative integer",
                    c.get("keepbits")
                ))
            })?;
        if let Some(k) = c.keys().find(|k| k.as_str() != "keepbits") {
            return Err(PluginCreateError::Other(format!(
                "bitround: unknown configuration key {k:?} (numcodecs' BitRound has `keepbits` only)"
            )));
        }
        Ok(Codec::ArrayToArray(Arc::new(BitroundCodec::new(keepbits))))
    }
}
