//! numcodecs' `LZ4` compressor as a zarrs codec: zarr v2's `{"id": "lz4"}` and zarr v3's
//! `numcodecs.lz4`. zarrs has no LZ4 codec of its own, so without this such arrays do
//! not open. Each chunk is numcodecs' `lz4.block.compress(..., store_size=True)`: the
//! decoded size as a 4-byte little-endian integer, then one raw LZ4 block.
//!
//! The read engine decodes these chunks itself (`read/codec.rs`, and nvCOMP's LZ4 on
//! the GPU); zarrs uses this codec where the engine does not decode (writes of host
//! values, a partial chunk's read-modify-write). Both check the stored size against
//! the chunk's before anything is allocated or decoded. `acceleration` is kept in the
//! metadata; the encoder (`lz4_flex`) has one speed.

use std::borrow::Cow;
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

/// Bytes of the size prefix.
pub(crate) const PREFIX: usize = 4;

/// liblz4's largest input (`LZ4_MAX_INPUT_SIZE`): numcodecs cannot read larger chunks.
const MAX_INPUT: usize = 0x7E00_0000;

/// numcodecs' `LZ4` compressor (see the module documentation).
#[derive(Clone, Debug)]
pub(crate) struct Lz4Codec {
    acceleration: i64,
}

zarrs::plugin::impl_extension_aliases!(Lz4Codec,
    v3: "numcodecs.lz4", [],
    v2: "lz4", []
);

inventory::submit! {
    CodecPluginV3::new::<Lz4Codec>()
}

inventory::submit! {
    CodecPluginV2::new::<Lz4Codec>()
}

impl Lz4Codec {
    /// The codec with numcodecs' default acceleration (1).
    pub(crate) fn new() -> Lz4Codec {
        Lz4Codec { acceleration: 1 }
    }

    fn from_configuration(c: &Configuration) -> Result<Lz4Codec, PluginCreateError> {
        let acceleration = match c.get("acceleration") {
            None => 1,
            Some(v) => v.as_i64().ok_or_else(|| {
                PluginCreateError::Other(format!(
                    "lz4: acceleration {v} is not an integer (numcodecs writes 1 by default)"
                ))
            })?,
        };
        if let Some(k) = c.keys().find(|k| k.as_str() != "acceleration") {
            return Err(PluginCreateError::Other(format!(
                "lz4: unknown configuration key {k:?} (numcodecs' LZ4 has `acceleration` only)"
            )));
        }
        Ok(Lz4Codec { acceleration })
    }
}

impl CodecTraitsV3 for Lz4Codec {
    fn create(metadata: &MetadataV3) -> Result<Codec, PluginCreateError> {
        let empty = Configuration::default();
        let c = metadata.configuration().unwrap_or(&empty);
        Ok(Codec::BytesToBytes(Arc::new(Lz4Codec::from_configuration(
            c,
        )?)))
    }
}

impl CodecTraitsV2 for Lz4Codec {
    fn create(metadata: &MetadataV2) -> Result<Codec, PluginCreateError> {
        Ok(Codec::BytesToBytes(Arc::new(Lz4Codec::from_configuration(
            metadata.configuration(),
        )?)))
    }
}

impl CodecTraits for Lz4Codec {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn configuration(
        &self,
        _version: ZarrVersion,
        _options: &CodecMetadataOptions,
    ) -> Option<Configuration> {
        let mut m = serde_json::Map::new();
        m.insert("acceleration".into(), self.acceleration.into());
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

/// The decoded size an LZ4 chunk's prefix declares, or an error saying what is wrong.
pub(crate) fn declared_size(stored: &[u8]) -> Result<usize, String> {
    match stored.get(..PREFIX) {
        Some(p) => Ok(u32::from_le_bytes([p[0], p[1], p[2], p[3]]) as usize),
        None => Err(format!(
            "{} bytes cannot hold numcodecs' LZ4 size prefix (4 bytes)",
            stored.len()
        )),
    }
}

/// Decodes the LZ4 chunk `stored` into `dst`, which holds exactly the chunk's decoded
/// size: the prefix must declare that size, and the block must decode to exactly it
/// (never writing past `dst`).
pub(crate) fn decode_into(stored: &[u8], dst: &mut [u8]) -> Result<(), String> {
    let n = dst.len();
    let declared = declared_size(stored)?;
    if declared != n {
        return Err(format!(
            "lz4 chunk declares {declared} bytes, the chunk holds exactly {n} bytes"
        ));
    }
    match lz4_flex::block::decompress_into(&stored[PREFIX..], dst) {
        Ok(got) if got == n => Ok(()),
        Ok(got) => Err(format!(
            "lz4 chunk decodes to {got} bytes, the chunk holds exactly {n} bytes"
        )),
        Err(e) => Err(format!("lz4: {e} (a chunk of exactly {n} bytes expected)")),
    }
}

/// Checks an LZ4 block's structure without decoding it, for nvCOMP, which was
/// measured to report success on blocks truncated to half (it reads past the block,
/// into whatever follows in its input buffer): every sequence's literals lie within
/// the block, every match offset points into bytes already decoded, and the sequences
/// decode to exactly `n` bytes, the last one literals only (as the format says). One
/// pass over the compressed bytes; what it cannot see is damage that keeps this
/// structure (the values then differ, as LZ4 has no checksum). Matches must also keep
/// the format's end-of-block rules, as liblz4's decoder requires.
pub(crate) fn check_block(block: &[u8], n: usize) -> Result<(), String> {
    let len = block.len();
    let short = || format!("truncated lz4 block ({len} bytes; a chunk of {n} bytes expected)");
    let mut i = 0usize;
    let mut out = 0usize;
    // A length nibble of 15 goes on in bytes, each 255 but the last.
    let extend = |i: &mut usize, mut v: usize| -> Result<usize, String> {
        loop {
            let b = *block.get(*i).ok_or_else(short)?;
            *i += 1;
            v = v.checked_add(b as usize).ok_or_else(short)?;
            if b != 255 {
                return Ok(v);
            }
        }
    };
    loop {
        let token = *block.get(i).ok_or_else(short)?;
        i += 1;
        let mut lit = (token >> 4) as usize;
        if lit == 15 {
            lit = extend(&mut i, lit)?;
        }
        if lit > len - i {
            return Err(short());
        }
        i += lit;
        out = out.saturating_add(lit);
        if out > n {
            return Err(format!("lz4 block decodes to more than {n} bytes"));
        }
        if i == len {
            break; // the last sequence: literals only
        }
        let off = match block.get(i..i + 2) {
            Some(o) => u16::from_le_bytes([o[0], o[1]]) as usize,
            None => return Err(short()),
        };
        i += 2;
        if off == 0 || off > out {
            return Err(format!(
                "lz4 block: a match {off} bytes back from byte {out} of the chunk"
            ));
        }
        let mut ml = (token & 15) as usize;
        if ml == 15 {
            ml = extend(&mut i, ml)?;
        }
        // The format's end-of-block rules (liblz4's decoder enforces them): a match
        // starts at least 12 bytes before the end and ends at least 5 before it.
        if n < 12 || out > n - 12 || out.saturating_add(ml + 4) > n - 5 {
            return Err(format!(
                "lz4 block: a match at byte {out} of {n} breaks the end-of-block rules"
            ));
        }
        out += ml + 4;
    }
    if out != n {
        return Err(format!(
            "lz4 block decodes to {out} bytes, the chunk holds exactly {n} bytes"
        ));
    }
    Ok(())
}

impl BytesToBytesCodecTraits for Lz4Codec {
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
        if decoded_value.len() > MAX_INPUT {
            return Err(CodecError::Other(format!(
                "lz4: a chunk of {} bytes; LZ4 (liblz4, numcodecs) takes at most {MAX_INPUT}",
                decoded_value.len()
            )));
        }
        Ok(Cow::Owned(lz4_flex::block::compress_prepend_size(
            &decoded_value,
        )))
    }

    fn decode<'a>(
        &self,
        encoded_value: ArrayBytesRaw<'a>,
        decoded_representation: &BytesRepresentation,
        _options: &CodecOptions,
    ) -> Result<ArrayBytesRaw<'a>, CodecError> {
        let declared = declared_size(&encoded_value).map_err(CodecError::Other)?;
        // The size is checked before the allocation: a prefix cannot make this
        // allocate more than the chunk, or (a chunk of unknown size) more than an LZ4
        // block of these bytes can hold (each byte decodes to at most 255).
        match decoded_representation.size() {
            Some(n) if n != declared as u64 => {
                return Err(CodecError::Other(format!(
                    "lz4 chunk declares {declared} bytes, the chunk holds exactly {n} bytes"
                )));
            }
            None if declared
                > (encoded_value.len() - PREFIX)
                    .saturating_mul(255)
                    .saturating_add(64) =>
            {
                return Err(CodecError::Other(format!(
                    "lz4 chunk declares {declared} bytes, more than its {} bytes can hold",
                    encoded_value.len()
                )));
            }
            _ => {}
        }
        let mut out = Vec::new();
        out.try_reserve_exact(declared)
            .map_err(|_| CodecError::Other(format!("lz4: cannot allocate {declared} bytes")))?;
        out.resize(declared, 0);
        decode_into(&encoded_value, &mut out).map_err(CodecError::Other)?;
        Ok(Cow::Owned(out))
    }

    fn encoded_representation(
        &self,
        decoded_representation: &BytesRepresentation,
    ) -> BytesRepresentation {
        decoded_representation
            .size()
            .map_or(BytesRepresentation::UnboundedSize, |size| {
                // LZ4's worst case: n + n / 255 + 16, plus the prefix.
                BytesRepresentation::BoundedSize(size + size / 255 + 16 + PREFIX as u64)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bounded_decode() {
        let data: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
        let stored = lz4_flex::block::compress_prepend_size(&data);
        let mut out = vec![0u8; data.len()];
        decode_into(&stored, &mut out).unwrap();
        assert_eq!(out, data);
        let e = decode_into(&stored, &mut [0u8; 10]).unwrap_err();
        assert!(e.contains("declares 50000 bytes"), "{e}");
        assert!(decode_into(&stored[..3], &mut out).is_err());
        assert!(decode_into(&stored[..stored.len() / 2], &mut out).is_err());
        // A prefix that lies: more than the block holds.
        let mut lying = stored.clone();
        lying[..4].copy_from_slice(&50_001u32.to_le_bytes());
        assert!(decode_into(&lying, &mut vec![0u8; 50_001]).is_err());

        let codec = Lz4Codec::new();
        let rep = BytesRepresentation::FixedSize(data.len() as u64);
        let enc = codec
            .encode(Cow::Borrowed(&data), &CodecOptions::default())
            .unwrap();
        assert_eq!(enc.as_ref(), stored.as_slice());
        let dec = codec.decode(enc, &rep, &CodecOptions::default()).unwrap();
        assert_eq!(dec.as_ref(), data.as_slice());
        // The structure check: intact, truncated anywhere, a bad offset, too long.
        check_block(&stored[PREFIX..], data.len()).unwrap();
        for cut in [1, 2, 7, stored.len() / 2, stored.len() - PREFIX - 1] {
            let e = check_block(&stored[PREFIX..stored.len() - cut], data.len()).unwrap_err();
            assert!(
                e.contains("truncated") || e.contains("decodes to"),
                "{cut}: {e}"
            );
        }
        assert!(check_block(&stored[PREFIX..], data.len() - 1).is_err());
        assert!(check_block(&stored[PREFIX..], data.len() + 1).is_err());
        let random: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let r = lz4_flex::block::compress(&random);
        check_block(&r, random.len()).unwrap();
        assert!(check_block(&r[..r.len() / 2], random.len()).is_err());
        // A first sequence with a match: nothing decoded yet to point back into.
        assert!(check_block(&[0x00, 0x01, 0x00, 0x00], 4).is_err());
        check_block(&[0x00], 0).unwrap();
        check_block(&[0x30, 1, 2, 3], 3).unwrap();
        // A match that ends the block (no 5 literals after it): liblz4 refuses it.
        let mut tail = vec![0xc0u8];
        tail.extend_from_slice(&[7u8; 12]);
        tail.extend_from_slice(&[12, 0]);
        assert!(check_block(&tail, 12 + 4).is_err());
        // ... and one 12 bytes before the end, ending 8 before it: kept.
        tail.push(0x80);
        tail.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        check_block(&tail, 12 + 4 + 8).unwrap();
        let mut out = vec![0u8; 24];
        assert_eq!(
            lz4_flex::block::decompress_into(&tail, &mut out).unwrap(),
            24
        );
        // Only 5 literals after it: the match starts 9 bytes before the end.
        let short_tail = [&tail[..tail.len() - 9], &[0x50u8, 1, 2, 3, 4, 5][..]].concat();
        assert!(check_block(&short_tail, 12 + 4 + 5).is_err());
        // A bomb's prefix is refused before anything is allocated.
        let mut bomb = stored.clone();
        bomb[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = codec
            .decode(Cow::Owned(bomb), &rep, &CodecOptions::default())
            .unwrap_err();
        assert!(e.to_string().contains("4294967295"), "{e}");
    }
}
