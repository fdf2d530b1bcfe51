//! [`ZarrArray`]: a zarr v2/v3 array opened with `zarrs`, read into and written from
//! [`NDBuffer`]s on the host or a device.

use std::borrow::Cow;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use ::zarrs::array::codec::{
    BloscCodec, BloscCompressionLevel, BloscCompressor, BloscShuffleMode, BytesCodec, GzipCodec,
    ZstdCodec,
};
use ::zarrs::array::{
    Array, ArrayBuilder, ArrayBytes, ArrayError, ArrayMetadataOptions, ArraySubset,
    BytesToBytesCodecTraits, CodecOptions, FillValue,
};
use ::zarrs::filesystem::FilesystemStore;
use ::zarrs::metadata::Endianness as ZEndianness;
use ::zarrs::storage::{ReadableStorageTraits, ReadableWritableStorageTraits, StoreKey};
use rayon::prelude::*;

use super::guard;
use super::metadata::ZarrMetadata;
use super::read::{self, ReadOptions, ReadReport, Request, Source};
use super::storage::StoreAdapter;
use crate::cuda::DeviceBuffer;
use crate::error::{Error, Result};
use crate::zarr::index::{Resolved, resolve};
use crate::zarr::{
    AxisSel, BufferPrototype, DataType, Endianness, Memory, NDBuffer, Order, Scalar, Store,
};

type Storage = dyn ReadableWritableStorageTraits;

/// A zarr array (format 2 or 3) opened with the [`zarrs`] crate, read into and
/// written from [`NDBuffer`]s of any [`BufferPrototype`].
///
/// * **Reads** ([`read_chunk`](Self::read_chunk), [`read_chunks`](Self::read_chunks),
///   [`read_subset`](Self::read_subset), [`read`](Self::read), [`read_all`](Self::read_all))
///   return native-endian, C-contiguous arrays whatever the stored byte order and
///   order (numpy's values, as zarr-python returns them); missing chunks read as the
///   fill value. Every read goes through the read engine (`docs/zarr.md`, "The read
///   engine"): one worker per core fetches and decodes each chunk it touches exactly
///   once (on the CPU, or batched through nvCOMP on the GPU), and places it into host
///   memory or — through page-locked slots of the context's transfer pool — onto the
///   device, where the placement runs as device copies. [`ReadOptions`] tunes it, and
///   the `*_with_report` reads say what ran.
/// * **Writes** ([`write_chunk`](Self::write_chunk), [`write_chunks`](Self::write_chunks),
///   [`write_subset`](Self::write_subset)) take host or device arrays of the array's
///   element type (either byte order, any layout). Device data is gathered per chunk on
///   the device, brought back through the same pool's slots, and encoded by one worker
///   per core, each chunk once. Chunks equal to the fill value everywhere are not
///   stored (an existing one is erased), as zarr-python does by default.
///
/// A `ZarrArray` is `Send + Sync`; reads may run from several threads at once. As with
/// `zarrs`, concurrent writes that touch the same chunk race (one of them is lost).
///
/// ```
/// use devbuf::zarr::zarrs::ZarrArray;
/// use devbuf::zarr::{BufferPrototype, DataType};
/// let a = ZarrArray::open("tests/fixtures/zarr/v2_float32_F.zarr")?;
/// assert_eq!(a.metadata().shape, vec![10, 7]);
/// assert_eq!(a.dtype(), DataType::FLOAT32);
/// // BufferPrototype::Device(0) on a machine with a GPU.
/// let chunk = a.read_chunk(&[2, 2], &BufferPrototype::Host)?; // clipped at the edge
/// assert_eq!(chunk.shape(), &[2, 1]);
/// let whole = a.read_all(&BufferPrototype::Host)?;
/// assert!(whole.is_c_contiguous());
/// let v = whole.to_ndarray::<f32>()?;
/// assert_eq!(v[[9, 6]], chunk.to_ndarray::<f32>()?[[1, 0]]);
/// # Ok::<(), devbuf::Error>(())
/// ```
pub struct ZarrArray {
    array: Array<Storage>,
    meta: ZarrMetadata,
    location: String,
    read_options: ReadOptions,
    /// The directory of a filesystem store (chunk files are read directly).
    root: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for ZarrArray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZarrArray")
            .field("location", &self.location)
            .field("metadata", &self.meta)
            .field("read_options", &self.read_options)
            .finish()
    }
}

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
    /// `blosc` with lz4 and byte shuffle at this level (0..=9).
    Blosc {
        /// Compression level.
        level: u8,
    },
}

/// What [`ZarrArray::create`] makes: a zarr v3 array with a regular chunk grid, the
/// `bytes` codec in the data type's byte order, an optional compressor and optional
/// sharding.
///
/// ```
/// use devbuf::zarr::zarrs::{ArraySpec, Compressor};
/// use devbuf::zarr::{DataType, Scalar};
/// let spec = ArraySpec::new(&[100, 100], &[10, 10], DataType::FLOAT32)
///     .with_fill_value(Scalar::from(f32::NAN))
///     .with_compressor(Compressor::Zstd { level: 3 });
/// assert_eq!(spec.shape(), &[100, 100]);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct ArraySpec {
    shape: Vec<u64>,
    chunk_shape: Vec<u64>,
    dtype: DataType,
    fill_value: Option<Scalar>,
    compressor: Compressor,
    subchunk_shape: Option<Vec<u64>>,
}

impl ArraySpec {
    /// An array of `shape` in chunks of `chunk_shape`, of `dtype` (big-endian data
    /// types are stored big-endian), fill value zero, uncompressed, not sharded.
    pub fn new(shape: &[u64], chunk_shape: &[u64], dtype: DataType) -> ArraySpec {
        ArraySpec {
            shape: shape.to_vec(),
            chunk_shape: chunk_shape.to_vec(),
            dtype,
            fill_value: None,
            compressor: Compressor::None,
            subchunk_shape: None,
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

    /// Shards the array: each chunk (shard) holds inner chunks of this shape, which
    /// must divide the chunk shape.
    pub fn with_subchunks(mut self, subchunk_shape: &[u64]) -> ArraySpec {
        self.subchunk_shape = Some(subchunk_shape.to_vec());
        self
    }

    /// The array shape.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    fn validate(&self) -> Result<()> {
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
            Compressor::Blosc { level } if level > 9 => Err(Error::invalid(format!(
                "blosc level {level} is out of range (0..=9)"
            ))),
            Compressor::Zstd { level } if !(-131072..=22).contains(&level) => Err(Error::invalid(
                format!("zstd level {level} is out of range (-131072..=22)"),
            )),
            _ => Ok(()),
        }
    }

    fn compressors(&self) -> Result<Vec<Arc<dyn BytesToBytesCodecTraits>>> {
        Ok(match self.compressor {
            Compressor::None => vec![],
            Compressor::Zstd { level } => vec![Arc::new(ZstdCodec::new(level, false))],
            Compressor::Gzip { level } => vec![Arc::new(
                GzipCodec::new(level).map_err(|e| Error::invalid(format!("gzip: {e}")))?,
            )],
            Compressor::Blosc { level } => {
                let clevel = BloscCompressionLevel::try_from(level)
                    .map_err(|e| Error::invalid(format!("blosc level {level}: {e}")))?;
                let shuffle = if self.dtype.size() > 1 {
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
                        Some(self.dtype.size()),
                    )
                    .map_err(|e| Error::invalid(format!("blosc: {e}")))?,
                )]
            }
        })
    }
}

fn to_usize(v: u64, what: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| Error::invalid(format!("{what} {v} does not fit in usize")))
}

fn shape_usize(shape: &[u64]) -> Result<Vec<usize>> {
    shape.iter().map(|&s| to_usize(s, "extent")).collect()
}

/// Bytes of a C-order box of `shape`, checked for overflow.
fn checked_bytes(shape: &[u64], elem: usize) -> Result<usize> {
    shape
        .iter()
        .try_fold(elem, |acc, &s| {
            usize::try_from(s).ok().and_then(|s| acc.checked_mul(s))
        })
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| {
            Error::invalid(format!(
                "a selection of shape {shape:?} with {elem}-byte elements is too large to hold \
                 in memory"
            ))
        })
}

impl ZarrArray {
    // ------------------------------------------------------------------ opening

    /// Opens the zarr array (v3 `zarr.json` or v2 `.zarray`) in the directory `path`.
    ///
    /// Errors when the directory does not exist, holds no array metadata, or the array
    /// uses a data type, chunk grid or codec devbuf or `zarrs` does not support.
    ///
    /// ```
    /// use devbuf::zarr::zarrs::ZarrArray;
    /// let a = ZarrArray::open("tests/fixtures/zarr/v3_uint8_sharded.zarr")?;
    /// assert_eq!(a.metadata().subchunk_shape, Some(vec![4, 4]));
    /// assert!(ZarrArray::open("tests/fixtures/zarr/no_such.zarr").is_err());
    /// # Ok::<(), devbuf::Error>(())
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<ZarrArray> {
        let path = path.as_ref();
        let location = path.display().to_string();
        if !path.is_dir() {
            return Err(Error::invalid(format!(
                "no zarr array at {location}: not a directory"
            )));
        }
        let storage: Arc<Storage> =
            Arc::new(FilesystemStore::new(path).map_err(|e| {
                Error::invalid(format!("cannot open {location} as a zarr store: {e}"))
            })?);
        let mut a = Self::open_storage(storage, "/", location)?;
        a.root = Some(path.to_path_buf());
        Ok(a)
    }

    /// Opens the zarr array at `path` (`""` for the root, else `"group/array"`) of a
    /// devbuf [`Store`], through [`StoreAdapter`].
    ///
    /// ```
    /// use std::sync::Arc;
    /// use devbuf::zarr::zarrs::{ArraySpec, ZarrArray};
    /// use devbuf::zarr::{BufferPrototype, DataType, MemoryStore, NDBuffer};
    /// let store = Arc::new(MemoryStore::new());
    /// let a = ZarrArray::create_in_store(store.clone(), "g/a", &ArraySpec::new(&[4], &[2], DataType::INT32))?;
    /// a.write_subset(&[1], &NDBuffer::from_ndarray(ndarray::arr1(&[7i32, 8])))?;
    /// let b = ZarrArray::open_store(store, "g/a")?;
    /// let v = b.read_all(&BufferPrototype::Host)?.to_ndarray::<i32>()?;
    /// assert_eq!(v.as_slice().unwrap(), &[0, 7, 8, 0]);
    /// # Ok::<(), devbuf::Error>(())
    /// ```
    pub fn open_store(store: Arc<dyn Store>, path: &str) -> Result<ZarrArray> {
        let (node, location) = node_path(path)?;
        Self::open_storage(Arc::new(StoreAdapter::new(store)), &node, location)
    }

    fn open_storage(storage: Arc<Storage>, node: &str, location: String) -> Result<ZarrArray> {
        let array = guard(&format!("opening {location}"), || {
            Array::open(storage, node).map_err(|e| match e {
                ::zarrs::array::ArrayCreateError::MissingMetadata => Error::invalid(format!(
                    "no zarr array at {location}: neither zarr.json (v3) nor .zarray (v2) found"
                )),
                ::zarrs::array::ArrayCreateError::StorageError(s) => Error::Io {
                    op: "opening a zarr array",
                    message: format!("{location}: {s}"),
                },
                e => Error::Malformed(format!("cannot open the zarr array at {location}: {e}")),
            })
        })?;
        Self::from_array(array, location)
    }

    fn from_array(array: Array<Storage>, location: String) -> Result<ZarrArray> {
        let meta = ZarrMetadata::from_array(&array, &location)?;
        Ok(ZarrArray {
            array,
            meta,
            location,
            read_options: ReadOptions::default(),
            root: None,
        })
    }

    /// Creates a zarr v3 array described by `spec` in the directory `path` (created if
    /// missing) and writes its metadata. Errors when an array already exists there.
    ///
    /// ```
    /// use devbuf::zarr::zarrs::{ArraySpec, Compressor, ZarrArray};
    /// use devbuf::zarr::{BufferPrototype, DataType, Scalar};
    /// let dir = std::env::temp_dir().join(format!("devbuf-doc-create-{}", std::process::id()));
    /// let spec = ArraySpec::new(&[6, 4], &[3, 2], DataType::UINT16)
    ///     .with_fill_value(Scalar::from(9u16))
    ///     .with_compressor(Compressor::Gzip { level: 5 });
    /// let a = ZarrArray::create(&dir, &spec)?;
    /// assert!(a.read_all(&BufferPrototype::Host)?.all_equal(Some(Scalar::from(9u16)), true)?);
    /// assert!(ZarrArray::create(&dir, &spec).is_err()); // already there
    /// std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), devbuf::Error>(())
    /// ```
    pub fn create(path: impl AsRef<Path>, spec: &ArraySpec) -> Result<ZarrArray> {
        let path = path.as_ref();
        let location = path.display().to_string();
        if path.join("zarr.json").exists() || path.join(".zarray").exists() {
            return Err(Error::invalid(format!(
                "a zarr array already exists at {location}"
            )));
        }
        std::fs::create_dir_all(path).map_err(|e| Error::Io {
            op: "creating a zarr array directory",
            message: format!("{location}: {e}"),
        })?;
        let storage: Arc<Storage> =
            Arc::new(FilesystemStore::new(path).map_err(|e| {
                Error::invalid(format!("cannot open {location} as a zarr store: {e}"))
            })?);
        let mut a = Self::create_storage(storage, "/", location, spec)?;
        a.root = Some(path.to_path_buf());
        Ok(a)
    }

    /// Creates a zarr v3 array described by `spec` at `path` of a devbuf [`Store`]
    /// (see [`open_store`](Self::open_store)). Errors when an array already exists there.
    pub fn create_in_store(
        store: Arc<dyn Store>,
        path: &str,
        spec: &ArraySpec,
    ) -> Result<ZarrArray> {
        let (node, location) = node_path(path)?;
        let prefix = node.trim_start_matches('/');
        for meta in ["zarr.json", ".zarray"] {
            let key = if prefix.is_empty() {
                meta.to_string()
            } else {
                format!("{prefix}/{meta}")
            };
            if store.exists(&key)? {
                return Err(Error::invalid(format!(
                    "a zarr array already exists at {location}"
                )));
            }
        }
        Self::create_storage(Arc::new(StoreAdapter::new(store)), &node, location, spec)
    }

    fn create_storage(
        storage: Arc<Storage>,
        node: &str,
        location: String,
        spec: &ArraySpec,
    ) -> Result<ZarrArray> {
        spec.validate()?;
        let element = spec.dtype.element();
        let fill = spec
            .fill_value
            .unwrap_or(Scalar::UInt8(0))
            .to_bytes_as(DataType::native(element));
        let endian = (spec.dtype.size() > 1).then(|| match spec.dtype.byteorder() {
            Endianness::Little => ZEndianness::Little,
            Endianness::Big => ZEndianness::Big,
        });
        let compressors = spec.compressors()?;
        let array = guard(&format!("creating {location}"), || {
            let mut builder = ArrayBuilder::new(
                spec.shape.clone(),
                spec.chunk_shape.clone(),
                element.name(),
                FillValue::new(fill),
            );
            builder
                .array_to_bytes_codec(Arc::new(BytesCodec::new(endian)))
                .bytes_to_bytes_codecs(compressors);
            if let Some(sub) = &spec.subchunk_shape {
                builder.subchunk_shape(sub.clone());
            }
            let array = builder.build(storage, node).map_err(|e| {
                Error::invalid(format!("cannot create a zarr array at {location}: {e}"))
            })?;
            array
                .store_metadata_opt(
                    &ArrayMetadataOptions::default().with_include_zarrs_metadata(false),
                )
                .map_err(|e| Error::Io {
                    op: "writing zarr metadata",
                    message: format!("{location}: {e}"),
                })?;
            Ok(array)
        })?;
        Self::from_array(array, location)
    }

    // ------------------------------------------------------------------ properties

    /// The array's metadata in devbuf's types.
    pub fn metadata(&self) -> &ZarrMetadata {
        &self.meta
    }

    /// The shape.
    pub fn shape(&self) -> &[u64] {
        &self.meta.shape
    }

    /// The data type of what reads return (the stored element type, native byte order).
    pub fn dtype(&self) -> DataType {
        self.meta.dtype()
    }

    /// Where the array is: its directory, or `store:<path>` for a devbuf store.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The box of chunk `indices` clipped to the array: `start..end` per axis.
    ///
    /// ```
    /// use devbuf::zarr::zarrs::ZarrArray;
    /// let a = ZarrArray::open("tests/fixtures/zarr/v3_float32.zarr")?; // 10 x 7 in 4 x 3
    /// assert_eq!(a.chunk_ranges(&[2, 1])?, vec![8..10, 3..6]);
    /// assert!(a.chunk_ranges(&[3, 0]).is_err());
    /// # Ok::<(), devbuf::Error>(())
    /// ```
    pub fn chunk_ranges(&self, indices: &[u64]) -> Result<Vec<Range<u64>>> {
        let (start, shape) = self.chunk_box(indices)?;
        Ok(start.iter().zip(&shape).map(|(&s, &n)| s..s + n).collect())
    }

    /// Whether chunk `indices` is stored (a missing chunk reads as the fill value).
    pub fn chunk_is_stored(&self, indices: &[u64]) -> Result<bool> {
        self.check_chunk(indices)?;
        let key: StoreKey = self.array.chunk_key(indices);
        let size = self.array.storage().size_key(&key).map_err(|e| Error::Io {
            op: "reading a zarr store",
            message: format!("{}: {e}", self.location),
        })?;
        Ok(size.is_some())
    }

    // ------------------------------------------------------------------ reading

    /// Reads chunk `indices` (a shard, for a sharded array) clipped to the array's
    /// bounds, into `prototype`'s memory. A missing chunk reads as the fill value.
    pub fn read_chunk(&self, indices: &[u64], prototype: &BufferPrototype) -> Result<NDBuffer> {
        let mut v = self.read_chunks(&[indices], prototype)?;
        v.pop()
            .ok_or_else(|| Error::invalid("read_chunks returned no chunk"))
    }

    /// Reads many chunks, each clipped to the array's bounds, into `prototype`'s memory,
    /// in the order given (repeats allowed).
    ///
    /// On the host every chunk gets its own memory and chunks decode in parallel. On a
    /// device the chunks are decoded in parallel into page-locked batches and land in
    /// **one** device allocation, one copy per batch; the returned arrays are
    /// consecutive zero-copy slices of it (so writing into one of them first copies
    /// that chunk: copy-on-write).
    ///
    /// ```
    /// use devbuf::zarr::zarrs::ZarrArray;
    /// use devbuf::zarr::{BufferPrototype, Scalar};
    /// let a = ZarrArray::open("tests/fixtures/zarr/v3_int16.zarr")?; // chunk (1, 1) missing
    /// let chunks = a.read_chunks(&[[0u64, 0], [1, 1]], &BufferPrototype::Host)?;
    /// assert_eq!(chunks[0].shape(), &[4, 3]);
    /// assert!(chunks[1].all_equal(Some(Scalar::from(-7i16)), true)?); // the fill value
    /// # Ok::<(), devbuf::Error>(())
    /// ```
    pub fn read_chunks<I: AsRef<[u64]>>(
        &self,
        chunks: &[I],
        prototype: &BufferPrototype,
    ) -> Result<Vec<NDBuffer>> {
        Ok(self.read_chunks_with_report(chunks, prototype)?.0)
    }

    /// [`read_chunks`](Self::read_chunks), and what the read engine did.
    pub fn read_chunks_with_report<I: AsRef<[u64]>>(
        &self,
        chunks: &[I],
        prototype: &BufferPrototype,
    ) -> Result<(Vec<NDBuffer>, ReadReport)> {
        let elem = self.elem();
        let mut requests = Vec::with_capacity(chunks.len());
        let mut offset = 0usize;
        for c in chunks {
            let (start, shape) = self.chunk_box(c.as_ref())?;
            let len = checked_bytes(&shape, elem)?;
            requests.push(Request {
                start,
                shape,
                offset,
            });
            offset = offset
                .checked_add(len)
                .filter(|&n| n <= isize::MAX as usize)
                .ok_or_else(|| Error::invalid("the chunks are too large to hold in memory"))?;
        }
        let (mem, report) = self.run_read(&requests, offset, prototype)?;
        let out = requests
            .iter()
            .map(|r| {
                let len = checked_bytes(&r.shape, elem)?;
                self.wrap(mem.slice(r.offset, len)?, &r.shape)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((out, report))
    }

    /// Reads the box `ranges` (`start..end` per axis, within the shape) into
    /// `prototype`'s memory as one C-contiguous array of that box's shape.
    ///
    /// On the host `zarrs` decodes every chunk the box touches straight into the
    /// result, in parallel. On a device the box is cut into C-contiguous slabs of about
    /// [`batch_bytes`](Self::batch_bytes) that follow the chunk grid; each slab is
    /// decoded into page-locked memory and copied to its place in the result with one
    /// copy, overlapping the decoding of the next slab.
    ///
    /// ```
    /// use devbuf::zarr::zarrs::ZarrArray;
    /// use devbuf::zarr::BufferPrototype;
    /// let a = ZarrArray::open("tests/fixtures/zarr/v2_int16_zstd.zarr")?; // 6 x 5 x 4
    /// let s = a.read_subset(&[1..5, 0..5, 2..3], &BufferPrototype::Host)?;
    /// assert_eq!(s.shape(), &[4, 5, 1]);
    /// assert!(a.read_subset(&[0..7, 0..5, 0..4], &BufferPrototype::Host).is_err());
    /// # Ok::<(), devbuf::Error>(())
    /// ```
    pub fn read_subset(
        &self,
        ranges: &[Range<u64>],
        prototype: &BufferPrototype,
    ) -> Result<NDBuffer> {
        Ok(self.read_subset_with_report(ranges, prototype)?.0)
    }

    /// [`read_subset`](Self::read_subset), and what the read engine did.
    pub fn read_subset_with_report(
        &self,
        ranges: &[Range<u64>],
        prototype: &BufferPrototype,
    ) -> Result<(NDBuffer, ReadReport)> {
        let (start, shape) = self.check_ranges(ranges)?;
        let total = checked_bytes(&shape, self.elem())?;
        let request = Request {
            start,
            shape: shape.clone(),
            offset: 0,
        };
        let (mem, report) = self.run_read(std::slice::from_ref(&request), total, prototype)?;
        Ok((self.wrap(mem, &shape)?, report))
    }

    /// [`read_all`](Self::read_all), and what the read engine did.
    pub fn read_all_with_report(
        &self,
        prototype: &BufferPrototype,
    ) -> Result<(NDBuffer, ReadReport)> {
        let ranges: Vec<Range<u64>> = self.meta.shape.iter().map(|&s| 0..s).collect();
        self.read_subset_with_report(&ranges, prototype)
    }

    /// How reads run: decoder, worker threads, staging slot size.
    pub fn read_options(&self) -> &ReadOptions {
        &self.read_options
    }

    /// Sets how reads run (see [`ReadOptions`]).
    ///
    /// ```
    /// use devbuf::zarr::zarrs::{ReadOptions, ZarrArray};
    /// use devbuf::zarr::BufferPrototype;
    /// let mut a = ZarrArray::open("tests/fixtures/zarr/v3_float32.zarr")?;
    /// a.set_read_options(ReadOptions { threads: Some(1), ..ReadOptions::default() })?;
    /// let (_, report) = a.read_all_with_report(&BufferPrototype::Host)?;
    /// assert_eq!(report.workers, 1);
    /// # Ok::<(), devbuf::Error>(())
    /// ```
    pub fn set_read_options(&mut self, options: ReadOptions) -> Result<()> {
        if options.threads == Some(0) || options.threads.is_some_and(|t| t > 1024) {
            return Err(Error::invalid(format!(
                "ReadOptions::threads must be 1..=1024 (or None for one per core), got {:?}",
                options.threads
            )));
        }
        if options.slot_bytes == 0 || options.slot_bytes > 1 << 30 {
            return Err(Error::invalid(format!(
                "ReadOptions::slot_bytes must be 1..=1073741824, got {}",
                options.slot_bytes
            )));
        }
        self.read_options = options;
        Ok(())
    }

    /// Runs the read engine over `requests` into `prototype`'s memory.
    fn run_read(
        &self,
        requests: &[Request],
        total: usize,
        prototype: &BufferPrototype,
    ) -> Result<(Memory, ReadReport)> {
        let ctx = prototype.context()?;
        let fill = self.meta.fill_value.to_bytes_as(self.dtype());
        let src = Source::new(
            &self.array,
            &self.location,
            &self.meta.chunk_shape,
            self.elem(),
            self.meta.stored_dtype.element().swap_width(),
            fill,
            self.root.clone(),
        )?;
        read::read(&src, requests, total, ctx.as_ref(), &self.read_options)
    }

    /// Reads a numpy-style selection (integers, ranges, [`Slice`](crate::zarr::Slice)s
    /// with positive steps, full axes; fewer selectors than axes select the rest whole)
    /// into `prototype`'s memory. Integer axes are dropped, as in numpy.
    ///
    /// The bounding box of the selection is read (see [`read_subset`](Self::read_subset))
    /// and a stepped selection is returned as a zero-copy strided view of it.
    ///
    /// ```
    /// use devbuf::zarr::zarrs::ZarrArray;
    /// use devbuf::zarr::{AxisSel, BufferPrototype, Slice};
    /// let a = ZarrArray::open("tests/fixtures/zarr/v3_float64.zarr")?; // 10 x 7
    /// let v = a.read(&[Slice::every(3).into(), AxisSel::Index(-1)], &BufferPrototype::Host)?;
    /// assert_eq!(v.shape(), &[4]); // rows 0, 3, 6, 9 of the last column
    /// # Ok::<(), devbuf::Error>(())
    /// ```
    pub fn read(&self, selection: &[AxisSel], prototype: &BufferPrototype) -> Result<NDBuffer> {
        let shape = shape_usize(&self.meta.shape)?;
        let resolved = resolve(selection, &shape)?;
        let mut ranges = Vec::with_capacity(resolved.len());
        let mut rel = Vec::with_capacity(resolved.len());
        let mut strided = false;
        for r in &resolved {
            match *r {
                Resolved::Index(i) => {
                    ranges.push(i as u64..i as u64 + 1);
                    rel.push(AxisSel::Index(0));
                    strided = true;
                }
                Resolved::Range { start, count, step } => {
                    let span = if count == 0 {
                        0
                    } else {
                        (count - 1) * step + 1
                    };
                    ranges.push(start as u64..(start + span) as u64);
                    rel.push(AxisSel::Range {
                        start: 0,
                        end: span,
                        step,
                    });
                    strided |= step != 1;
                }
            }
        }
        let boxed = self.read_subset(&ranges, prototype)?;
        if strided { boxed.get(&rel) } else { Ok(boxed) }
    }

    /// Reads the whole array into `prototype`'s memory.
    pub fn read_all(&self, prototype: &BufferPrototype) -> Result<NDBuffer> {
        let ranges: Vec<Range<u64>> = self.meta.shape.iter().map(|&s| 0..s).collect();
        self.read_subset(&ranges, prototype)
    }

    // ------------------------------------------------------------------ writing

    /// Writes `value` into the box of chunk `indices` clipped to the array (its shape
    /// must be that box's shape; see [`chunk_ranges`](Self::chunk_ranges)). `value` may
    /// be on the host or a device, of the array's element type in either byte order,
    /// in any layout.
    pub fn write_chunk(&self, indices: &[u64], value: &NDBuffer) -> Result<()> {
        self.write_chunks(&[indices], std::slice::from_ref(value))
    }

    /// Writes many chunks: `values[i]` into the clipped box of `chunks[i]`. Each chunk
    /// may be listed once. Host values are encoded in parallel; device values come back
    /// through page-locked memory in batches (values that are consecutive slices of one
    /// device allocation, as [`read_chunks`](Self::read_chunks) returns them, in one
    /// copy per batch), encoded in parallel while the next batch is copied.
    ///
    /// ```
    /// use devbuf::zarr::zarrs::{ArraySpec, ZarrArray};
    /// use devbuf::zarr::{BufferPrototype, DataType, MemoryStore, Order, Scalar};
    /// let a = ZarrArray::create_in_store(std::sync::Arc::new(MemoryStore::new()), "",
    ///     &ArraySpec::new(&[5], &[2], DataType::INT8))?;
    /// let one = BufferPrototype::Host.nd_create(&[2], DataType::INT8, Order::C, Some(Scalar::from(1i8)))?;
    /// let edge = BufferPrototype::Host.nd_create(&[1], DataType::INT8, Order::C, Some(Scalar::from(2i8)))?;
    /// a.write_chunks(&[[0u64], [2]], &[one, edge])?;
    /// let v = a.read_all(&BufferPrototype::Host)?.to_ndarray::<i8>()?;
    /// assert_eq!(v.as_slice().unwrap(), &[1, 1, 0, 0, 2]);
    /// # Ok::<(), devbuf::Error>(())
    /// ```
    pub fn write_chunks<I: AsRef<[u64]>>(&self, chunks: &[I], values: &[NDBuffer]) -> Result<()> {
        if chunks.len() != values.len() {
            return Err(Error::invalid(format!(
                "write_chunks: {} chunk indices but {} values",
                chunks.len(),
                values.len()
            )));
        }
        let mut seen = std::collections::HashSet::new();
        let mut host = Vec::new();
        let mut device = Vec::new();
        for (c, v) in chunks.iter().zip(values) {
            let idx = c.as_ref();
            if !seen.insert(idx.to_vec()) {
                return Err(Error::invalid(format!(
                    "write_chunks: chunk {idx:?} is listed more than once"
                )));
            }
            let (start, shape) = self.chunk_box(idx)?;
            let v = self.prepare(v, &shape, &format!("chunk {idx:?}"))?;
            if v.is_device() {
                device.push((start, shape, v));
            } else {
                host.push((start, shape, v));
            }
        }
        host.par_iter()
            .try_for_each(|(start, shape, v)| self.encode_host(start, shape, v))?;
        if device.is_empty() {
            return Ok(());
        }
        let mut requests = Vec::with_capacity(device.len());
        let mut bufs = Vec::with_capacity(device.len());
        for (start, shape, v) in device {
            requests.push(Request {
                start,
                shape,
                offset: 0,
            });
            bufs.push(device_bytes(&v)?);
        }
        self.write_device(&requests, &bufs)
    }

    /// Writes `value` into the box that starts at `start` (per axis) and has `value`'s
    /// shape, which must lie within the array. `value` may be on the host or a device,
    /// of the array's element type in either byte order, in any layout. Chunks the box
    /// covers partly are read, updated and rewritten.
    ///
    /// ```
    /// use devbuf::zarr::zarrs::{ArraySpec, ZarrArray};
    /// use devbuf::zarr::{BufferPrototype, DataType, MemoryStore, NDBuffer};
    /// let a = ZarrArray::create_in_store(std::sync::Arc::new(MemoryStore::new()), "",
    ///     &ArraySpec::new(&[4, 4], &[2, 2], DataType::FLOAT32))?;
    /// a.write_subset(&[1, 1], &NDBuffer::from_ndarray(ndarray::arr2(&[[1.0f32, 2.0], [3.0, 4.0]])))?;
    /// let v = a.read_subset(&[1..3, 1..3], &BufferPrototype::Host)?.to_ndarray::<f32>()?;
    /// assert_eq!(v.as_slice().unwrap(), &[1.0, 2.0, 3.0, 4.0]);
    /// // Wrong element type: an error, no conversion.
    /// assert!(a.write_subset(&[0, 0], &NDBuffer::from_ndarray(ndarray::arr1(&[1i32]))).is_err());
    /// # Ok::<(), devbuf::Error>(())
    /// ```
    pub fn write_subset(&self, start: &[u64], value: &NDBuffer) -> Result<()> {
        if start.len() != self.meta.ndim() {
            return Err(Error::invalid(format!(
                "write_subset: start {start:?} has {} coordinate(s), the array has {} \
                 dimension(s) (shape {:?})",
                start.len(),
                self.meta.ndim(),
                self.meta.shape
            )));
        }
        let shape: Vec<u64> = value.shape().iter().map(|&s| s as u64).collect();
        let ranges: Vec<Range<u64>> = start
            .iter()
            .zip(&shape)
            .map(|(&s, &n)| s..s.saturating_add(n))
            .collect();
        let (start, shape) = self.check_ranges(&ranges)?;
        let v = self.prepare(value, &shape, "write_subset")?;
        if !v.is_device() {
            return self.encode_host(&start, &shape, &v);
        }
        let request = Request {
            start,
            shape,
            offset: 0,
        };
        self.write_device(std::slice::from_ref(&request), &[device_bytes(&v)?])
    }

    /// Writes device values (C-order native) into the boxes of `requests` through the
    /// device write engine (`write.rs`).
    fn write_device(&self, requests: &[Request], values: &[DeviceBuffer]) -> Result<()> {
        let Some(ctx) = values.first().map(|v| v.context().clone()) else {
            return Ok(());
        };
        let fill = self.meta.fill_value.to_bytes_as(self.dtype());
        let target = super::write::Target {
            array: &self.array,
            location: &self.location,
            shape: &self.meta.shape,
            chunk_shape: &self.meta.chunk_shape,
            elem: self.elem(),
            fill: &fill,
        };
        let threads = self
            .read_options
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(4, |n| n.get()));
        super::write::write_device(
            &target,
            requests,
            values,
            &ctx,
            threads,
            self.read_options.slot_bytes,
        )
    }

    // ------------------------------------------------------------------ internals

    fn elem(&self) -> usize {
        self.meta.stored_dtype.size()
    }

    fn check_chunk(&self, indices: &[u64]) -> Result<()> {
        let grid = &self.meta.grid_shape;
        if indices.len() != grid.len() || indices.iter().zip(grid).any(|(&i, &g)| i >= g) {
            return Err(Error::invalid(format!(
                "chunk indices {indices:?} are out of range for {}: the chunk grid is {grid:?} \
                 (valid: {} indices, each below the grid extent)",
                self.location,
                grid.len()
            )));
        }
        Ok(())
    }

    /// The clipped box of a chunk.
    fn chunk_box(&self, indices: &[u64]) -> Result<(Vec<u64>, Vec<u64>)> {
        self.check_chunk(indices)?;
        let mut start = Vec::with_capacity(indices.len());
        let mut shape = Vec::with_capacity(indices.len());
        for ((&i, &c), &n) in indices
            .iter()
            .zip(&self.meta.chunk_shape)
            .zip(&self.meta.shape)
        {
            let s = i.saturating_mul(c);
            start.push(s);
            shape.push(c.min(n.saturating_sub(s)));
        }
        Ok((start, shape))
    }

    fn check_ranges(&self, ranges: &[Range<u64>]) -> Result<(Vec<u64>, Vec<u64>)> {
        let shape = &self.meta.shape;
        if ranges.len() != shape.len() {
            return Err(Error::invalid(format!(
                "selection {ranges:?} has {} range(s), the array at {} has {} dimension(s) \
                 (shape {shape:?})",
                ranges.len(),
                self.location,
                shape.len()
            )));
        }
        for (axis, (r, &n)) in ranges.iter().zip(shape).enumerate() {
            if r.start > r.end || r.end > n {
                return Err(Error::invalid(format!(
                    "range {r:?} is out of bounds for axis {axis} of {} with size {n} \
                     (valid: start <= end <= {n})",
                    self.location
                )));
            }
        }
        Ok((
            ranges.iter().map(|r| r.start).collect(),
            ranges.iter().map(|r| r.end - r.start).collect(),
        ))
    }

    /// `mem` (C-order, native bytes of `shape`) as an NDBuffer.
    fn wrap(&self, mem: Memory, shape: &[u64]) -> Result<NDBuffer> {
        NDBuffer::from_memory(mem, &shape_usize(shape)?, self.dtype(), Order::C)
    }

    fn array_err(&self, what: &str, e: ArrayError) -> Error {
        match e {
            ArrayError::StorageError(s) => Error::Io {
                op: "zarr store access",
                message: format!("{what} {}: {s}", self.location),
            },
            ArrayError::CodecError(c) => Error::Malformed(format!("{what} {}: {c}", self.location)),
            e => Error::invalid(format!("{what} {}: {e}", self.location)),
        }
    }

    /// Runs `f` on the array subset `start`/`shape` inside [`guard`]; `f` gets the
    /// subset and the text that opens its error messages (`"<verb> [a..b, ...] of"`).
    fn on_subset(
        &self,
        verb: &str,
        start: &[u64],
        shape: &[u64],
        f: impl FnOnce(&ArraySubset, &str) -> Result<()>,
    ) -> Result<()> {
        let what = format!("{verb} {} of", fmt_box(start, shape));
        guard(&what, || {
            let subset = ArraySubset::new_with_start_shape(start.to_vec(), shape.to_vec())
                .map_err(|e| Error::invalid(format!("{what} {}: {e}", self.location)))?;
            f(&subset, &what)
        })
    }

    /// Decodes the box `start`/`shape` into `out` (C order, native; exactly its bytes)
    /// with zarrs' own subset decoding: the tests' oracle for the read engine.
    #[cfg(test)]
    fn decode_into(&self, start: &[u64], shape: &[u64], out: &mut [u8]) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        self.on_subset("reading", start, shape, |subset, what| {
            let dims = shape.to_vec();
            let whole = ArraySubset::new_with_shape(dims.clone());
            // Safety: `ArrayBytesFixedDisjointView::new` requires that no other view of
            // the same bytes overlaps this one: this is the only view made over `out`,
            // which this function borrows exclusively, and it covers `out` exactly once.
            let mut view = unsafe {
                ::zarrs::array::ArrayBytesFixedDisjointView::new(
                    unsafe_cell_slice::UnsafeCellSlice::new(out),
                    self.elem(),
                    &dims,
                    whole,
                )
            }
            .map_err(|e| Error::invalid(format!("{what} {}: {e}", self.location)))?;
            self.array
                .retrieve_array_subset_into_opt(
                    subset,
                    (&mut view).into(),
                    &CodecOptions::default(),
                )
                .map_err(|e| self.array_err(what, e))
        })
    }

    /// Encodes C-order native bytes of the box `start`/`shape` into the array.
    fn encode_from(&self, start: &[u64], shape: &[u64], bytes: &[u8]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.on_subset("writing", start, shape, |subset, what| {
            self.array
                .store_array_subset_opt(
                    subset,
                    ArrayBytes::new_flen(Cow::Borrowed(bytes)),
                    &CodecOptions::default(),
                )
                .map_err(|e| self.array_err(what, e))
        })
    }

    /// A host value (already prepared: native, C-contiguous) into the box.
    fn encode_host(&self, start: &[u64], shape: &[u64], v: &NDBuffer) -> Result<()> {
        let bytes = v.to_buffer()?.to_host()?;
        self.encode_from(start, shape, &bytes)
    }

    /// Checks a value against the box it is written to, and brings it to native byte
    /// order and C order (on its own side: host or device).
    fn prepare(&self, value: &NDBuffer, shape: &[u64], what: &str) -> Result<NDBuffer> {
        let element = self.meta.stored_dtype.element();
        if value.dtype().element() != element {
            return Err(Error::invalid(format!(
                "{what}: data type mismatch: the array at {} holds {element}, the value is {} \
                 (convert it with NDBuffer::astype first)",
                self.location,
                value.dtype()
            )));
        }
        let vshape: Vec<u64> = value.shape().iter().map(|&s| s as u64).collect();
        if vshape != shape {
            return Err(Error::invalid(format!(
                "{what}: the value has shape {vshape:?}, the destination box of {} has shape \
                 {shape:?}",
                self.location
            )));
        }
        let native = DataType::native(element);
        let v = if value.dtype() != native {
            value.astype(native)?
        } else {
            value.clone()
        };
        if v.is_c_contiguous() { Ok(v) } else { v.copy() }
    }
}

/// `[a..b, c..d]` for messages.
fn fmt_box(start: &[u64], shape: &[u64]) -> String {
    let axes: Vec<String> = start
        .iter()
        .zip(shape)
        .map(|(&s, &n)| format!("{s}..{}", s + n))
        .collect();
    format!("[{}]", axes.join(", "))
}

/// The device bytes of a prepared (C-contiguous) device value.
fn device_bytes(v: &NDBuffer) -> Result<DeviceBuffer> {
    let buf = v.to_buffer()?;
    match buf.as_array_like() {
        Memory::Device(d) => Ok(d.clone()),
        Memory::Host(_) => Err(Error::invalid("expected a device value")),
    }
}

/// zarrs' node path and devbuf's description of `path` in a store.
fn node_path(path: &str) -> Result<(String, String)> {
    let p = path.trim_matches('/');
    if p.split('/').any(|c| c == "." || c == "..") || p.contains("//") {
        return Err(Error::invalid(format!(
            "invalid array path {path:?} (use names separated by '/', without '.' or '..')"
        )));
    }
    Ok((format!("/{p}"), format!("store:/{p}")))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    fn fixture(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/zarr")
            .join(name)
    }

    fn host_bytes(nd: &NDBuffer) -> Vec<u8> {
        nd.to_buffer().unwrap().to_bytes().unwrap()
    }

    fn random_ranges(rng: &mut SmallRng, shape: &[u64]) -> Vec<Range<u64>> {
        shape
            .iter()
            .map(|&n| {
                let s = rng.random_range(0..=n);
                s..rng.random_range(s..=n)
            })
            .collect()
    }

    /// The read engine (every thread count, every kind of box, whole chunks, repeated
    /// chunks) gives exactly what zarrs' own subset decoding gives, on every fixture.
    #[test]
    fn engine_reads_equal_zarrs_reads() {
        let mut rng = SmallRng::seed_from_u64(11);
        let dir = fixture("");
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".zarr"))
            .collect();
        names.sort();
        let mut checked = 0;
        for name in names {
            let Ok(mut a) = ZarrArray::open(fixture(&name)) else {
                continue;
            };
            let elem = a.elem();
            for threads in [1usize, 3] {
                a.set_read_options(ReadOptions {
                    threads: Some(threads),
                    ..ReadOptions::default()
                })
                .unwrap();
                let mut boxes: Vec<Vec<Range<u64>>> =
                    vec![a.metadata().shape.iter().map(|&n| 0..n).collect()];
                for _ in 0..6 {
                    boxes.push(random_ranges(&mut rng, &a.metadata().shape));
                }
                for ranges in boxes {
                    let (start, shape) = a.check_ranges(&ranges).unwrap();
                    let mut want = vec![0x55u8; checked_bytes(&shape, elem).unwrap()];
                    a.decode_into(&start, &shape, &mut want).unwrap();
                    let got = host_bytes(&a.read_subset(&ranges, &HOST_PROTO).unwrap());
                    assert!(got == want, "{name} threads {threads} box {ranges:?}");
                    checked += 1;
                }
                // Whole chunks, one of them twice.
                let grid = a.metadata().grid_shape.clone();
                let n: u64 = grid.iter().product::<u64>().min(50);
                let mut indices: Vec<Vec<u64>> = (0..n)
                    .map(|mut lin| {
                        let mut idx = vec![0u64; grid.len()];
                        for ax in (0..grid.len()).rev() {
                            idx[ax] = lin % grid[ax];
                            lin /= grid[ax];
                        }
                        idx
                    })
                    .collect();
                if let Some(first) = indices.first().cloned() {
                    indices.push(first);
                }
                let chunks = a.read_chunks(&indices, &HOST_PROTO).unwrap();
                for (idx, c) in indices.iter().zip(&chunks) {
                    let (start, shape) = a.chunk_box(idx).unwrap();
                    let mut want = vec![0u8; checked_bytes(&shape, elem).unwrap()];
                    a.decode_into(&start, &shape, &mut want).unwrap();
                    assert!(host_bytes(c) == want, "{name} chunk {idx:?}");
                }
            }
        }
        assert!(checked > 100, "only {checked} boxes checked");
    }

    const HOST_PROTO: BufferPrototype = BufferPrototype::Host;
}
