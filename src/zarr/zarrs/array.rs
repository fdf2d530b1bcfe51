//! [`ZarrArray`]: a zarr v2/v3 array opened with `zarrs`, read into and written from
//! [`NDBuffer`]s on the host or a device.

use std::borrow::Cow;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Arc;

use ::zarrs::array::codec::{
    BloscCodec, BloscCompressionLevel, BloscCompressor, BloscShuffleMode, BytesCodec, GzipCodec,
    ZstdCodec,
};
use ::zarrs::array::{
    Array, ArrayBuilder, ArrayBytes, ArrayBytesFixedDisjointView, ArrayError, ArrayMetadataOptions,
    ArraySubset, BytesToBytesCodecTraits, CodecOptions, FillValue,
};
use ::zarrs::metadata::Endianness as ZEndianness;
use ::zarrs::storage::{ReadableStorageTraits, ReadableWritableStorageTraits, StoreKey};
use rayon::prelude::*;
use unsafe_cell_slice::UnsafeCellSlice;

use super::metadata::ZarrMetadata;
use super::staging::{self, Lanes, Piece, Staging};
use super::storage::StoreAdapter;
use crate::cuda::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::zarr::index::{Resolved, resolve};
use crate::zarr::{
    AxisSel, BufferPrototype, DataType, Endianness, Memory, NDBuffer, Order, Scalar, Store,
};

type Storage = dyn ReadableWritableStorageTraits;

/// Default bytes per staging batch (see [`ZarrArray::set_batch_bytes`]).
pub const DEFAULT_BATCH_BYTES: usize = 8 << 20;

/// A zarr array (format 2 or 3) opened with the [`zarrs`] crate, read into and
/// written from [`NDBuffer`]s of any [`BufferPrototype`].
///
/// * **Reads** ([`read_chunk`](Self::read_chunk), [`read_chunks`](Self::read_chunks),
///   [`read_subset`](Self::read_subset), [`read`](Self::read), [`read_all`](Self::read_all))
///   return native-endian, C-contiguous arrays whatever the stored byte order and
///   order (numpy's values, as zarr-python returns them); missing chunks read as the
///   fill value. Chunks are fetched and decoded on the host by `zarrs`' codecs, in
///   parallel (rayon). For a host prototype they are decoded straight into the result's
///   memory. For a device prototype they are decoded into a page-locked staging buffer,
///   one *batch* (several chunks, or a slab of a subset) at a time, and each batch goes
///   to the device in one copy while the next batch is decoded into a second buffer.
///   The two staging buffers belong to the array and are reused by later calls.
/// * **Writes** ([`write_chunk`](Self::write_chunk), [`write_chunks`](Self::write_chunks),
///   [`write_subset`](Self::write_subset)) take host or device arrays of the array's
///   element type (either byte order, any layout); device data comes back through the
///   same page-locked buffers in batches, and is encoded on the host. Chunks equal to
///   the fill value everywhere are not stored (an existing one is erased), as
///   zarr-python does by default.
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
    staging: Staging,
    batch_bytes: usize,
}

impl std::fmt::Debug for ZarrArray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZarrArray")
            .field("location", &self.location)
            .field("metadata", &self.meta)
            .field("batch_bytes", &self.batch_bytes)
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

/// Runs a `zarrs` call, turning a panic inside it into an error (devbuf never panics
/// on bad input; `zarrs` may on malformed data it does not expect).
fn guard<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            Err(Error::Malformed(format!("{what}: zarrs panicked: {msg}")))
        }
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
        let storage: Arc<Storage> = super::fs_store::checked_filesystem_store(path)?;
        Self::open_storage(storage, "/", location)
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
            staging: Staging::default(),
            batch_bytes: DEFAULT_BATCH_BYTES,
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
        let storage: Arc<Storage> = super::fs_store::checked_filesystem_store(path)?;
        Self::create_storage(storage, "/", location, spec)
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

    /// Bytes per staging batch for device transfers.
    pub fn batch_bytes(&self) -> usize {
        self.batch_bytes
    }

    /// Sets the bytes per staging batch (at least 4 KiB; default
    /// [`DEFAULT_BATCH_BYTES`]). Each device read or write moves its data in batches of
    /// about this size through two page-locked buffers; a batch of whole chunks grows to
    /// hold the largest chunk. Larger batches mean fewer copies; a subset read whose
    /// chunk rows exceed a batch decodes those chunks once per slab.
    pub fn set_batch_bytes(&mut self, bytes: usize) {
        self.batch_bytes = bytes.max(4096);
        self.staging.release();
    }

    /// [`set_batch_bytes`](Self::set_batch_bytes), by value.
    pub fn with_batch_bytes(mut self, bytes: usize) -> ZarrArray {
        self.set_batch_bytes(bytes);
        self
    }

    /// Bytes of page-locked staging memory this array keeps for reuse (0 until it has
    /// moved data to or from a device).
    pub fn staging_bytes(&self) -> usize {
        self.staging.held_bytes()
    }

    /// How many page-locked staging buffers this array has allocated so far (a
    /// diagnostic: repeated device reads of similar size reuse the same two buffers, so
    /// this stays at 2).
    pub fn staging_allocations(&self) -> usize {
        self.staging.allocations()
    }

    /// Frees the page-locked staging buffers (the next device transfer allocates again).
    pub fn release_staging(&self) {
        self.staging.release();
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
        let elem = self.elem();
        let mut pieces = Vec::with_capacity(chunks.len());
        let mut offset = 0usize;
        for c in chunks {
            let (start, shape) = self.chunk_box(c.as_ref())?;
            let len = checked_bytes(&shape, elem)?;
            pieces.push(Piece {
                start,
                shape,
                offset,
                len,
            });
            offset = offset
                .checked_add(len)
                .filter(|&n| n <= isize::MAX as usize)
                .ok_or_else(|| Error::invalid("the chunks are too large to hold in memory"))?;
        }
        match prototype.context()? {
            None => pieces
                .par_iter()
                .map(|p| {
                    let mut out = vec![0u8; p.len];
                    self.decode_into(&p.start, &p.shape, &mut out)?;
                    self.wrap(Memory::from(out), &p.shape)
                })
                .collect(),
            Some(ctx) => {
                let cap = pieces
                    .iter()
                    .map(|p| p.len)
                    .max()
                    .unwrap_or(0)
                    .max(self.batch_bytes);
                let dev = self.upload(&ctx, &pieces, offset, cap)?;
                pieces
                    .iter()
                    .map(|p| self.wrap(Memory::Device(dev.slice(p.offset, p.len)?), &p.shape))
                    .collect()
            }
        }
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
        let (start, shape) = self.check_ranges(ranges)?;
        let elem = self.elem();
        let total = checked_bytes(&shape, elem)?;
        match prototype.context()? {
            None => {
                let mut out = vec![0u8; total];
                self.decode_into(&start, &shape, &mut out)?;
                self.wrap(Memory::from(out), &shape)
            }
            Some(ctx) => {
                let pieces = staging::slabs(
                    &start,
                    &shape,
                    &self.meta.chunk_shape,
                    elem,
                    self.batch_bytes,
                );
                let dev = self.upload(&ctx, &pieces, total, self.batch_bytes)?;
                self.wrap(Memory::Device(dev), &shape)
            }
        }
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
        if !device.is_empty() {
            self.download_chunks(&device)?;
        }
        Ok(())
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
        let elem = self.elem();
        let pieces = staging::slabs(
            &start,
            &shape,
            &self.meta.chunk_shape,
            elem,
            self.batch_bytes,
        );
        let src = device_bytes(&v)?;
        let ctx = src.context().clone();
        // Sequential within a batch: slabs of one batch may share chunks.
        self.stage_writes(
            &self.staging.lanes(&ctx),
            &pieces,
            self.batch_bytes,
            false,
            |g, buf| src.copy_to_host_into(pieces[g.start].offset, buf),
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

    /// Decodes the box `start`/`shape` into `out` (C order, native; exactly its bytes).
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
                ArrayBytesFixedDisjointView::new(
                    UnsafeCellSlice::new(out),
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

    /// Decodes `pieces` (consecutive ranges of a `total`-byte result) into one new
    /// device allocation of `ctx`, in batches of at most `cap` bytes through the
    /// staging buffers: one host-to-device copy per batch.
    fn upload(
        &self,
        ctx: &Context,
        pieces: &[Piece],
        total: usize,
        cap: usize,
    ) -> Result<DeviceBuffer> {
        let dev = ctx.allocate(total)?;
        self.stage_reads(&self.staging.lanes(ctx), pieces, cap, |offset, buf| {
            dev.copy_from_host(offset, buf)
        })?;
        Ok(dev)
    }

    /// Decodes `pieces` (consecutive ranges of a result) batch by batch through
    /// `lanes` (batches of at most `cap` bytes, pieces of a batch decoded in parallel)
    /// and hands each batch to `deliver(offset in the result, bytes)`.
    fn stage_reads<L, D>(&self, lanes: &L, pieces: &[Piece], cap: usize, deliver: D) -> Result<()>
    where
        L: Lanes,
        D: Fn(usize, &[u8]) -> Result<()> + Sync,
    {
        let groups = staging::batches(pieces, cap);
        let lens: Vec<usize> = groups.iter().map(|g| span(&pieces[g.clone()])).collect();
        lanes.pipeline(
            &lens,
            |k, buf| {
                staging::for_each_piece(buf, &pieces[groups[k].clone()], |p, out| {
                    self.decode_into(&p.start, &p.shape, out)
                })
            },
            |k, buf| deliver(pieces[groups[k].start].offset, buf),
        )
    }

    /// Encodes `pieces` batch by batch through `lanes`: `fetch(piece indices, buf)`
    /// fills a batch with those pieces' bytes (consecutive), which are then encoded into
    /// the array — in parallel when `parallel` (pieces in distinct chunks), else in
    /// order — while the next batch is fetched.
    fn stage_writes<L, F>(
        &self,
        lanes: &L,
        pieces: &[Piece],
        cap: usize,
        parallel: bool,
        fetch: F,
    ) -> Result<()>
    where
        L: Lanes,
        F: Fn(Range<usize>, &mut [u8]) -> Result<()> + Sync,
    {
        let groups = staging::batches(pieces, cap);
        let lens: Vec<usize> = groups.iter().map(|g| span(&pieces[g.clone()])).collect();
        lanes.pipeline(
            &lens,
            |k, buf| fetch(groups[k].clone(), buf),
            |k, buf| {
                let g = &pieces[groups[k].clone()];
                let base = g.first().map(|p| p.offset).unwrap_or(0);
                let one = |p: &Piece| {
                    let at = p.offset - base;
                    self.encode_from(&p.start, &p.shape, &buf[at..at + p.len])
                };
                if parallel {
                    g.par_iter().try_for_each(one)
                } else {
                    g.iter().try_for_each(one)
                }
            },
        )
    }

    /// Writes prepared device values into their chunk boxes: copied to page-locked
    /// batches (adjacent slices of one allocation in one copy), encoded in parallel.
    fn download_chunks(&self, values: &[(Vec<u64>, Vec<u64>, NDBuffer)]) -> Result<()> {
        let srcs: Vec<DeviceBuffer> = values
            .iter()
            .map(|(_, _, v)| device_bytes(v))
            .collect::<Result<_>>()?;
        let ctx = srcs
            .first()
            .map(|d| d.context().clone())
            .ok_or_else(|| Error::invalid("no device values"))?;
        let mut pieces = Vec::with_capacity(values.len());
        let mut offset = 0usize;
        for ((start, shape, _), src) in values.iter().zip(&srcs) {
            pieces.push(Piece {
                start: start.clone(),
                shape: shape.clone(),
                offset,
                len: src.len(),
            });
            offset += src.len();
        }
        let cap = pieces
            .iter()
            .map(|p| p.len)
            .max()
            .unwrap_or(0)
            .max(self.batch_bytes);
        self.stage_writes(&self.staging.lanes(&ctx), &pieces, cap, true, |g, buf| {
            copy_runs(&srcs[g.clone()], &pieces[g], buf)
        })
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

/// Bytes spanned by consecutive pieces.
fn span(pieces: &[Piece]) -> usize {
    pieces.iter().map(|p| p.len).sum()
}

/// The device bytes of a prepared (C-contiguous) device value.
fn device_bytes(v: &NDBuffer) -> Result<DeviceBuffer> {
    let buf = v.to_buffer()?;
    match buf.as_array_like() {
        Memory::Device(d) => Ok(d.clone()),
        Memory::Host(_) => Err(Error::invalid("expected a device value")),
    }
}

/// Copies device buffers into their consecutive places in `buf`, one copy per run of
/// buffers that follow each other in one allocation.
fn copy_runs(srcs: &[DeviceBuffer], pieces: &[Piece], buf: &mut [u8]) -> Result<()> {
    let base = pieces.first().map(|p| p.offset).unwrap_or(0);
    let spans: Vec<Span> = srcs
        .iter()
        .map(|s| Span {
            device: s.context().ordinal(),
            allocation: s.parent().address(),
            address: s.address(),
            len: s.len(),
        })
        .collect();
    for run in runs(&spans) {
        let first = &srcs[run.start];
        let len: usize = spans[run.clone()].iter().map(|s| s.len).sum();
        let at = pieces[run.start].offset - base;
        first
            .parent()
            .copy_to_host_into(first.offset_in_parent(), &mut buf[at..at + len])?;
    }
    Ok(())
}

/// Where a device buffer is: device, allocation base address, its address and length.
#[derive(Clone, Copy, Debug)]
struct Span {
    device: usize,
    allocation: u64,
    address: u64,
    len: usize,
}

/// Index ranges of consecutive spans that follow each other in one allocation.
fn runs(spans: &[Span]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < spans.len() {
        let first = spans[i];
        let mut end = first.address + first.len as u64;
        let mut j = i + 1;
        while j < spans.len() {
            let s = spans[j];
            if s.device != first.device || s.allocation != first.allocation || s.address != end {
                break;
            }
            end += s.len as u64;
            j += 1;
        }
        out.push(i..j);
        i = j;
    }
    out
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
    use std::sync::Mutex;

    use rand::rngs::SmallRng;
    use rand::{Rng, RngCore, SeedableRng};

    use super::staging::VecLanes;
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

    /// The device read path's batching (slabs, batches, parallel pieces, two
    /// alternating lanes) run with host vectors as lanes and as the "device": the
    /// result equals a direct host read for every batch size.
    #[test]
    fn staged_reads_equal_direct_reads() {
        let mut rng = SmallRng::seed_from_u64(11);
        for name in [
            "v3_float32_sharded.zarr",
            "v2_float64_F.zarr",
            "v3_int16_blosc.zarr",
            "v3_float64_nanfill_1d.zarr",
            "v3_int32_0d.zarr",
            "v2_complex128_C.zarr",
            "v3_bool.zarr",
        ] {
            let a = ZarrArray::open(fixture(name)).unwrap();
            let elem = a.elem();
            for cap in [1usize, 16, 64, 200, 4096] {
                let mut boxes: Vec<Vec<Range<u64>>> =
                    vec![a.metadata().shape.iter().map(|&n| 0..n).collect()];
                for _ in 0..6 {
                    boxes.push(random_ranges(&mut rng, &a.metadata().shape));
                }
                for ranges in boxes {
                    let (start, shape) = a.check_ranges(&ranges).unwrap();
                    let total = checked_bytes(&shape, elem).unwrap();
                    let pieces = staging::slabs(&start, &shape, &a.meta.chunk_shape, elem, cap);
                    let out = Mutex::new(vec![0x55u8; total]);
                    a.stage_reads(&VecLanes, &pieces, cap.max(elem), |off, b| {
                        out.lock().unwrap()[off..off + b.len()].copy_from_slice(b);
                        Ok(())
                    })
                    .unwrap();
                    let want = host_bytes(&a.read_subset(&ranges, &HOST_PROTO).unwrap());
                    assert!(
                        out.into_inner().unwrap() == want,
                        "{name} cap {cap} box {ranges:?}"
                    );
                }
                // Whole chunks, in batches (a batch holds at least the largest chunk).
                let grid = a.metadata().grid_shape.clone();
                let n: u64 = grid.iter().product();
                let indices: Vec<Vec<u64>> = (0..n)
                    .map(|mut lin| {
                        let mut idx = vec![0u64; grid.len()];
                        for ax in (0..grid.len()).rev() {
                            idx[ax] = lin % grid[ax];
                            lin /= grid[ax];
                        }
                        idx
                    })
                    .collect();
                let mut pieces = Vec::new();
                let mut offset = 0;
                for idx in &indices {
                    let (start, shape) = a.chunk_box(idx).unwrap();
                    let len = checked_bytes(&shape, elem).unwrap();
                    pieces.push(Piece {
                        start,
                        shape,
                        offset,
                        len,
                    });
                    offset += len;
                }
                let big = pieces.iter().map(|p| p.len).max().unwrap_or(0).max(cap);
                let out = Mutex::new(vec![0x55u8; offset]);
                a.stage_reads(&VecLanes, &pieces, big, |off, b| {
                    out.lock().unwrap()[off..off + b.len()].copy_from_slice(b);
                    Ok(())
                })
                .unwrap();
                let out = out.into_inner().unwrap();
                for (p, idx) in pieces.iter().zip(&indices) {
                    let want = host_bytes(&a.read_chunk(idx, &HOST_PROTO).unwrap());
                    assert!(
                        out[p.offset..p.offset + p.len] == want[..],
                        "{name} cap {cap} chunk {idx:?}"
                    );
                }
            }
        }
    }

    /// The device write path's batching with host vectors: slabs written in order
    /// (partial chunks read-modify-write), chunks written in parallel.
    #[test]
    fn staged_writes_round_trip() {
        let dir = std::env::temp_dir().join(format!("devbuf-staged-writes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut rng = SmallRng::seed_from_u64(12);
        for (k, cap) in [4usize, 40, 400, 1 << 20].into_iter().enumerate() {
            let spec = ArraySpec::new(&[23, 17], &[4, 5], DataType::INT32)
                .with_compressor(Compressor::Zstd { level: 1 });
            let a = ZarrArray::create(dir.join(format!("a{k}")), &spec).unwrap();
            // A box, in slabs.
            let (start, shape) = a.check_ranges(&[3..22, 2..16]).unwrap();
            let mut data = vec![0u8; checked_bytes(&shape, 4).unwrap()];
            rng.fill_bytes(&mut data);
            let pieces = staging::slabs(&start, &shape, &a.meta.chunk_shape, 4, cap);
            a.stage_writes(&VecLanes, &pieces, cap.max(4), false, |g, buf| {
                let off = pieces[g.start].offset;
                buf.copy_from_slice(&data[off..off + buf.len()]);
                Ok(())
            })
            .unwrap();
            let back = host_bytes(&a.read_subset(&[3..22, 2..16], &HOST_PROTO).unwrap());
            assert!(back == data, "cap {cap}: box");
            // Every chunk, in parallel batches.
            let grid = a.metadata().grid_shape.clone();
            let mut pieces = Vec::new();
            let mut offset = 0;
            for i in 0..grid[0] {
                for j in 0..grid[1] {
                    let (start, shape) = a.chunk_box(&[i, j]).unwrap();
                    let len = checked_bytes(&shape, 4).unwrap();
                    pieces.push(Piece {
                        start,
                        shape,
                        offset,
                        len,
                    });
                    offset += len;
                }
            }
            let mut data = vec![0u8; offset];
            rng.fill_bytes(&mut data);
            let big = pieces.iter().map(|p| p.len).max().unwrap().max(cap);
            a.stage_writes(&VecLanes, &pieces, big, true, |g, buf| {
                let off = pieces[g.start].offset;
                buf.copy_from_slice(&data[off..off + buf.len()]);
                Ok(())
            })
            .unwrap();
            for p in &pieces {
                let r: Vec<Range<u64>> = p
                    .start
                    .iter()
                    .zip(&p.shape)
                    .map(|(&s, &n)| s..s + n)
                    .collect();
                let back = host_bytes(&a.read_subset(&r, &HOST_PROTO).unwrap());
                assert!(
                    back[..] == data[p.offset..p.offset + p.len],
                    "cap {cap}: chunk {r:?}"
                );
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn staged_errors_stop_the_pipeline() {
        let a = ZarrArray::open(fixture("v3_float32_none.zarr")).unwrap();
        let pieces = staging::slabs(&[0, 0, 0], &[6, 5, 4], &a.meta.chunk_shape, 4, 16);
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let e = a
            .stage_reads(&VecLanes, &pieces, 16, |_, _| {
                if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 2 {
                    Err(Error::invalid("copy failed"))
                } else {
                    Ok(())
                }
            })
            .unwrap_err();
        assert!(e.to_string().contains("copy failed"));
        assert!(calls.load(std::sync::atomic::Ordering::SeqCst) <= 3);
    }

    #[test]
    fn runs_merge_adjacent_slices_of_one_allocation() {
        let s = |device, allocation, address, len| Span {
            device,
            allocation,
            address,
            len,
        };
        let spans = [
            s(0, 1000, 1000, 16),
            s(0, 1000, 1016, 8), // follows: same run
            s(0, 1000, 1040, 8), // gap: new run
            s(0, 2000, 1048, 8), // adjacent address, other allocation: new run
            s(1, 2000, 1056, 8), // other device: new run
            s(1, 2000, 1064, 0), // empty, adjacent: joins
            s(1, 2000, 1064, 4), // joins
        ];
        assert_eq!(runs(&spans), vec![0..2, 2..3, 3..4, 4..7]);
        assert!(runs(&[]).is_empty());
    }

    const HOST_PROTO: BufferPrototype = BufferPrototype::Host;
}
