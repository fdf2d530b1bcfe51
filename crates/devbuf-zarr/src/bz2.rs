//! numcodecs' `BZ2` compressor as a zarrs codec: zarr v2's `{"id": "bz2", "level": 1..9}`
//! and zarr v3's `numcodecs.bz2`. Each chunk is one bzip2 stream (numcodecs'
//! `bz2.compress`; concatenated streams are read too, as Python's `bz2.decompress` does).
//!
//! zarrs has a `bz2` codec of its own (its `bz2` feature), but it decodes with
//! `read_to_end`: a few kilobytes of bzip2 can declare gigabytes (a "bomb"), and zarrs
//! would allocate and fill them all before checking the chunk's size. This one never
//! decodes more than the chunk holds: a stream that goes on past the chunk's decoded
//! size is cut off there and refused, so the bound is the chunk's size (itself at most
//! [`MAX_CHUNK_BYTES`](crate::MAX_CHUNK_BYTES)). zarrs' `bz2` feature stays off (two
//! codecs of one name cannot both be registered).
//!
//! The read engine does not decode bzip2 itself (nvCOMP has no bzip2 either): reads of
//! these arrays go through zarrs, on the CPU, with this codec.

use std::borrow::Cow;
use std::io::Read;
use std::sync::Arc;

use zarrs::array::codec::api::{
    ArrayBytesRaw, BytesRepresentation, BytesToBytesCodecTraits, Codec, CodecError,
    CodecMetadataOptions, CodecOptions, CodecPluginV2, CodecPluginV3, CodecTraits, CodecTraitsV2,
    CodecTraitsV3, PartialDecoderCapability, PartialEncoderCapability, RecommendedConcurrency,
};
use zarrs::metadata::Configuration;
use zarrs::metadata::v2::MetadataV2;
use zarrs::metadata::v3::MetadataV3;
use zarrs::plugin::{PluginCreateError, ZarrVersion};

use crate::validate::MAX_CHUNK_BYTES;

/// numcodecs' `BZ2` compressor (see the module documentation).
#[derive(Clone, Debug)]
pub(crate) struct Bz2Codec {
    /// 1 (fastest) ..= 9 (best; numcodecs' default is 1).
    level: u32,
}

zarrs::plugin::impl_extension_aliases!(Bz2Codec,
    v3: "numcodecs.bz2", [],
    v2: "bz2", []
);

inventory::submit! {
    CodecPluginV3::new::<Bz2Codec>()
}

inventory::submit! {
    CodecPluginV2::new::<Bz2Codec>()
}

impl Bz2Codec {
    fn from_configuration(c: &Configuration) -> Result<Bz2Codec, PluginCreateError> {
        let level = match c.get("level") {
            None => 1,
            Some(v) => v.as_u64().filter(|l| (1..=9).contains(l)).ok_or_else(|| {
                PluginCreateError::Other(format!(
                    "bz2: level {v} is not an integer in 1..=9 (numcodecs' BZ2 levels)"
                ))
            })? as u32,
        };
        if let Some(k) = c.keys().find(|k| k.as_str() != "level") {
            return Err(PluginCreateError::Other(format!(
                "bz2: unknown configuration key {k:?} (numcodecs' BZ2 has `level` only)"
            )));
        }
        Ok(Bz2Codec { level })
    }
}

impl CodecTraitsV3 for Bz2Codec {
    fn create(metadata: &MetadataV3) -> Result<Codec, PluginCreateError> {
        let empty = Configuration::default();
        let c = metadata.configuration().unwrap_or(&empty);
        Ok(Codec::BytesToBytes(Arc::new(Bz2Codec::from_configuration(
            c,
        )?)))
    }
}

impl CodecTraitsV2 for Bz2Codec {
    fn create(metadata: &MetadataV2) -> Result<Codec, PluginCreateError> {
        Ok(Codec::BytesToBytes(Arc::new(Bz2Codec::from_configuration(
            metadata.configuration(),
        )?)))
    }
}

impl CodecTraits for Bz2Codec {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn configuration(
        &self,
        _version: ZarrVersion,
        _options: &CodecMetadataOptions,
    ) -> Option<Configuration> {
        let mut m = serde_json::Map::new();
        m.insert("level".into(), self.level.into());
        Some(Configuration::from(m))
    }

    fn partial_decoder_capability(&self) -> PartialDecoderCapability {
        PartialDecoderCapability {
            partial_read: false,
            partial_decode: false,
        }
    }

    fn partial_encoder_capability(&self) -> PartialEncoderCapability {
        PartialEncoderCapability {
            partial_encode: false,
        }
    }
}

/// Decodes the bzip2 stream(s) `stored` into exactly `dst.len()` bytes: a stream that
/// ends early or goes on past `dst` is an error (nothing is written past `dst`, and at
/// most one byte past it is decoded).
pub(crate) fn decode_into(stored: &[u8], dst: &mut [u8]) -> Result<(), String> {
    let n = dst.len();
    let mut dec = bzip2::read::MultiBzDecoder::new(stored);
    let mut filled = 0;
    while filled < n {
        match dec.read(&mut dst[filled..]) {
            Ok(0) => {
                return Err(format!(
                    "bz2 chunk decodes to {filled} bytes, the chunk holds exactly {n} bytes"
                ));
            }
            Ok(k) => filled += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("bz2: {e}")),
        }
    }
    let mut extra = [0u8; 1];
    loop {
        match dec.read(&mut extra) {
            Ok(0) => return Ok(()),
            Ok(_) => {
                return Err(format!(
                    "bz2 chunk decodes to more than {n} bytes, the chunk holds exactly {n} bytes"
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("bz2: {e}")),
        }
    }
}

/// Decodes `stored` into at most `limit` bytes (a chunk whose size is only bounded):
/// the output grows as the stream decodes, never past `limit` (plus one byte to see
/// that the stream goes on).
fn decode_bounded(stored: &[u8], limit: u64) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    bzip2::read::MultiBzDecoder::new(stored)
        .take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| format!("bz2: {e}"))?;
    if out.len() as u64 > limit {
        return Err(format!(
            "bz2 chunk decodes to more than {limit} bytes, the most the chunk can hold"
        ));
    }
    Ok(out)
}

impl BytesToBytesCodecTraits for Bz2Codec {
    fn into_dyn(self: Arc<Self>) -> Arc<dyn BytesToBytesCodecTraits> {
        self as Arc<dyn BytesToBytesCodecTraits>
    }

    fn recommended_concurrency(
        &self,
        _decoded_representation: &BytesRepresentation,
    ) -> Result<RecommendedConcurrency, CodecError> {
        Ok(RecommendedConcurrency::new_maximum(1))
    }

    fn encode<'a>(
        &self,
        decoded_value: ArrayBytesRaw<'a>,
        _options: &CodecOptions,
    ) -> Result<ArrayBytesRaw<'a>, CodecError> {
        let mut out = Vec::new();
        bzip2::read::BzEncoder::new(&decoded_value[..], bzip2::Compression::new(self.level))
            .read_to_end(&mut out)?;
        Ok(Cow::Owned(out))
    }

    fn decode<'a>(
        &self,
        encoded_value: ArrayBytesRaw<'a>,
        decoded_representation: &BytesRepresentation,
        _options: &CodecOptions,
    ) -> Result<ArrayBytesRaw<'a>, CodecError> {
        let out = match decoded_representation {
            BytesRepresentation::FixedSize(n) => {
                let n = usize::try_from(*n)
                    .ok()
                    .filter(|&n| n as u64 <= MAX_CHUNK_BYTES)
                    .ok_or_else(|| CodecError::Other(format!("bz2: a chunk of {n} bytes")))?;
                let mut out = Vec::new();
                out.try_reserve_exact(n)
                    .map_err(|_| CodecError::Other(format!("bz2: cannot allocate {n} bytes")))?;
                out.resize(n, 0);
                decode_into(&encoded_value, &mut out).map_err(CodecError::Other)?;
                out
            }
            BytesRepresentation::BoundedSize(n) => {
                decode_bounded(&encoded_value, (*n).min(MAX_CHUNK_BYTES))
                    .map_err(CodecError::Other)?
            }
            BytesRepresentation::UnboundedSize => {
                decode_bounded(&encoded_value, MAX_CHUNK_BYTES).map_err(CodecError::Other)?
            }
        };
        Ok(Cow::Owned(out))
    }

    fn encoded_representation(
        &self,
        decoded_representation: &BytesRepresentation,
    ) -> BytesRepresentation {
        decoded_representation
            .size()
            .map_or(BytesRepresentation::UnboundedSize, |size| {
                // bzip2's worst case: n + n / 100 + 600 (its manual).
                BytesRepresentation::BoundedSize(size + size / 100 + 600)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bz2(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        bzip2::read::BzEncoder::new(data, bzip2::Compression::new(9))
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn round_trip_and_bounded_decode() {
        let data: Vec<u8> = (0..50_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let stored = bz2(&data);
        let mut out = vec![0u8; data.len()];
        decode_into(&stored, &mut out).unwrap();
        assert_eq!(out, data);
        let e = decode_into(&stored, &mut [0u8; 10]).unwrap_err();
        assert!(e.contains("more than 10 bytes"), "{e}");
        let e = decode_into(&stored, &mut vec![0u8; data.len() + 1]).unwrap_err();
        assert!(e.contains("decodes to 50000 bytes"), "{e}");
        assert!(decode_into(&stored[..stored.len() / 2], &mut out).is_err());
        assert!(decode_into(b"not bzip2 at all", &mut out).is_err());
        // Two streams, as Python's bz2.decompress reads them.
        let two = [bz2(&data[..20_000]), bz2(&data[20_000..])].concat();
        decode_into(&two, &mut out).unwrap();
        assert_eq!(out, data);

        let codec = Bz2Codec { level: 5 };
        let opts = CodecOptions::default();
        let enc = codec.encode(Cow::Borrowed(&data), &opts).unwrap();
        let fixed = BytesRepresentation::FixedSize(data.len() as u64);
        let dec = codec.decode(enc.clone(), &fixed, &opts).unwrap();
        assert_eq!(dec.as_ref(), data.as_slice());
        let bounded = BytesRepresentation::BoundedSize(data.len() as u64);
        let dec = codec.decode(enc.clone(), &bounded, &opts).unwrap();
        assert_eq!(dec.as_ref(), data.as_slice());
        let tight = BytesRepresentation::BoundedSize(data.len() as u64 - 1);
        assert!(codec.decode(enc, &tight, &opts).is_err());
    }

    #[test]
    fn a_bomb_is_cut_off_at_the_chunk_size() {
        // 64 MiB of zeros in a few hundred bytes, declared as a 4 KiB chunk: refused
        // after decoding 4 KiB + 1 byte (zarrs' own bz2 would allocate 64 MiB).
        let zeros = vec![0u8; 64 << 20];
        let bomb = bz2(&zeros);
        assert!(bomb.len() < 4096, "{}", bomb.len());
        let codec = Bz2Codec { level: 9 };
        let e = codec
            .decode(
                Cow::Owned(bomb),
                &BytesRepresentation::FixedSize(4096),
                &CodecOptions::default(),
            )
            .unwrap_err();
        assert!(e.to_string().contains("more than 4096 bytes"), "{e}");
    }

    #[test]
    fn configuration_is_checked() {
        let ok: Configuration = serde_json::from_str(r#"{"level": 9}"#).unwrap();
        assert_eq!(Bz2Codec::from_configuration(&ok).unwrap().level, 9);
        for bad in [
            r#"{"level": 0}"#,
            r#"{"level": "x"}"#,
            r#"{"blocksize": 9}"#,
        ] {
            let c: Configuration = serde_json::from_str(bad).unwrap();
            assert!(Bz2Codec::from_configuration(&c).is_err(), "{bad}");
        }
    }
}
