//! [`ArraySpec`] and [`Compressor`]: what [`ZarrArray::create`](super::ZarrArray::create)
//! makes (shape, chunks, data type, fill value, compressor, sharding), validated, and
//! its zarrs codecs.

use std::sync::Arc;

use ::zarrs::array::BytesToBytesCodecTraits;
use ::zarrs::array::codec::{
    BloscCodec, BloscCompressionLevel, BloscCompressor, BloscShuffleMode, Crc32cCodec, GzipCodec,
    ZlibCodec, ZlibCompressionLevel, ZstdCodec,
};

use devbuf_core::error::{Error, Result};
use devbuf_core::zarr::{Dtype, Scalar};

/// A compressor for [`ArraySpec`] (a zarr v3 bytes-to-bytes codec).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Compressor {
    /// No compression.
    #[default]
    None,
    /// `zstd` at this level (zarr-python's default is 0; 1..=22 as zstd defines).
    Zstd {
        /// Compression level.
        level: i32,
    },
    /// `gzip` at this level (0..=9).
    Gzip {
        /// Compression level.
        level: u32,
    },
    /// `numcodecs.zlib` at this level (0..=9): zarr v2's `zlib` compressor, a zlib
    /// stream (header, deflate, Adler-32) per chunk.
    Zlib {
        /// Compression level.
        level: u32,
    },
    /// `numcodecs.lz4`: zarr v2's `lz4` compressor (numcodecs' `LZ4`), the decoded
    /// size then one LZ4 block per chunk.
    Lz4,
    /// `blosc` with lz4 and byte shuffle at this level (0..=9).
    Blosc {
        /// Compression level.
        level: u8,
    },
}

/// What [`ZarrArray::create`](super::ZarrArray::create) makes: a zarr v3 array with a regular chunk grid, the
/// `bytes` codec in the data type's byte order, an optional compressor and optional
/// sharding.
///
/// ```
/// use devbuf_zarr::{ArraySpec, Compressor};
/// use devbuf_core::zarr::{Dtype, Scalar};
/// let spec = ArraySpec::new(&[100, 100], &[10, 10], Dtype::FLOAT32)
///     .with_fill_value(Scalar::from(f32::NAN))
///     .with_compressor(Compressor::Zstd { level: 3 });
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct ArraySpec {
    pub(super) shape: Vec<u64>,
    pub(super) chunk_shape: Vec<u64>,
    pub(super) dtype: Dtype,
    pub(super) fill_value: Option<Scalar>,
    pub(super) compressor: Compressor,
    pub(super) subchunk_shape: Option<Vec<u64>>,
    pub(super) crc32c: bool,
}

impl ArraySpec {
    /// An array of `shape` in chunks of `chunk_shape`, of `dtype` (big-endian data
    /// types are stored big-endian), fill value zero, uncompressed, not sharded.
    pub fn new(shape: &[u64], chunk_shape: &[u64], dtype: Dtype) -> ArraySpec {
        ArraySpec {
            shape: shape.to_vec(),
            chunk_shape: chunk_shape.to_vec(),
            dtype,
            fill_value: None,
            compressor: Compressor::None,
            subchunk_shape: None,
            crc32c: false,
        }
    }

    /// The fill value (converted to the data type as numpy's unsafe cast does).
    pub fn with_fill_value(mut self, fill_value: Scalar) -> ArraySpec {
        self.fill_value = Some(fill_value);
        self
    }

    /// The compressor of each chunk (of each inner chunk when sharded).
    pub fn with_compressor(mut self, compressor: Compressor) -> ArraySpec {
        self.compressor = compressor;
        self
    }

    /// A `crc32c` checksum after the compressor of each chunk (of each inner chunk
    /// when sharded). The read engine verifies it on the host, and
    /// [`Decoder::Auto`](super::Decoder::Auto) sends gzip, zlib, LZ4 and blosc chunks
    /// to nvCOMP only with it (zstd frames, which the host checks, with or without).
    pub fn with_crc32c(mut self) -> ArraySpec {
        self.crc32c = true;
        self
    }

    /// Shards the array: each chunk (shard) holds inner chunks of this shape, which
    /// must divide the chunk shape.
    pub fn with_subchunks(mut self, subchunk_shape: &[u64]) -> ArraySpec {
        self.subchunk_shape = Some(subchunk_shape.to_vec());
        self
    }

    pub(super) fn validate(&self) -> Result<()> {
        let n = self.shape.len();
        if self.chunk_shape.len() != n {
            return Err(Error::invalid(format!(
                "chunk shape {:?} has {} dimension(s), the array shape {:?} has {n}",
                self.chunk_shape,
                self.chunk_shape.len(),
                self.shape
            )));
        }
        if self.chunk_shape.contains(&0) {
            return Err(Error::invalid(format!(
                "chunk shape {:?} has a zero extent (every chunk extent must be at least 1)",
                self.chunk_shape
            )));
        }
        if let Some(sub) = &self.subchunk_shape {
            let divides = sub.len() == n
                && sub
                    .iter()
                    .zip(&self.chunk_shape)
                    .all(|(&s, &c)| s > 0 && c % s == 0);
            if !divides {
                return Err(Error::invalid(format!(
                    "subchunk shape {sub:?} must have {n} non-zero extents that divide the chunk \
                     shape {:?}",
                    self.chunk_shape
                )));
            }
        }
        match self.compressor {
            Compressor::Gzip { level } if level > 9 => Err(Error::invalid(format!(
                "gzip level {level} is out of range (0..=9)"
            ))),
            Compressor::Zlib { level } if level > 9 => Err(Error::invalid(format!(
                "zlib level {level} is out of range (0..=9)"
            ))),
            Compressor::Blosc { level } if level > 9 => Err(Error::invalid(format!(
                "blosc level {level} is out of range (0..=9)"
            ))),
            Compressor::Zstd { level } if !(-131072..=22).contains(&level) => Err(Error::invalid(
                format!("zstd level {level} is out of range (-131072..=22)"),
            )),
            _ => Ok(()),
        }
    }

    pub(super) fn compressors(&self) -> Result<Vec<Arc<dyn BytesToBytesCodecTraits>>> {
        let mut codecs = self.compressor_codecs()?;
        if self.crc32c {
            codecs.push(Arc::new(Crc32cCodec::new()));
        }
        Ok(codecs)
    }

    fn compressor_codecs(&self) -> Result<Vec<Arc<dyn BytesToBytesCodecTraits>>> {
        Ok(match self.compressor {
            Compressor::None => vec![],
            Compressor::Zstd { level } => vec![Arc::new(ZstdCodec::new(level, false))],
            Compressor::Gzip { level } => vec![Arc::new(
                GzipCodec::new(level).map_err(|e| Error::invalid(format!("gzip: {e}")))?,
            )],
            Compressor::Zlib { level } => {
                let level = ZlibCompressionLevel::try_from(level).map_err(|l| {
                    Error::invalid(format!("zlib level {l} is out of range (0..=9)"))
                })?;
                vec![Arc::new(ZlibCodec::new(level))]
            }
            Compressor::Lz4 => vec![Arc::new(super::lz4::Lz4Codec::new())],
            Compressor::Blosc { level } => {
                let clevel = BloscCompressionLevel::try_from(level)
                    .map_err(|e| Error::invalid(format!("blosc level {level}: {e}")))?;
                let shuffle = if self.dtype.element().size() > 1 {
                    BloscShuffleMode::Shuffle
                } else {
                    BloscShuffleMode::NoShuffle
                };
                vec![Arc::new(
                    BloscCodec::new(
                        BloscCompressor::LZ4,
                        clevel,
                        None,
                        shuffle,
                        Some(self.dtype.element().size()),
                    )
                    .map_err(|e| Error::invalid(format!("blosc: {e}")))?,
                )]
            }
        })
    }
}
