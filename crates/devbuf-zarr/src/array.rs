//! [`ZarrArray`]: a zarr v2/v3 array opened with `zarrs`, read into and written from
//! [`NDBuffer`]s on the host or a device.

use crate::storage::DynStorage;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use ::zarrs::array::codec::BytesCodec;
use ::zarrs::array::{
    Array, ArrayBuilder, ArrayError, ArrayMetadataOptions, ArraySubset, FillValue,
};
use ::zarrs::metadata::Endianness as ZEndianness;
use ::zarrs::storage::{ReadableStorageTraits, StoreKey};

use super::guard;
use super::metadata::ZarrMetadata;
use super::read::plan::checked_bytes;
use super::read::{self, ReadBox, ReadOptions, ReadReport, ZarrSource};
use super::spec::ArraySpec;
use super::storage::StoreAdapter;
use devbuf_core::__private::index::{BoundingBox, bounding_box};
use devbuf_core::error::{Error, Result};
use devbuf_core::memory::Memory;
use devbuf_core::zarr::{
    AxisSel, BufferPrototype, Dtype, Endianness, NDBuffer, Order, Scalar, Store,
};

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
/// use devbuf_zarr::ZarrArray;
/// use devbuf_core::zarr::{BufferPrototype, Dtype};
/// let a = ZarrArray::open("../../tests/fixtures/zarr/v2_float32_F.zarr")?;
/// assert_eq!(a.metadata().shape, vec![10, 7]);
/// assert_eq!(a.dtype(), Dtype::FLOAT32);
/// // BufferPrototype::Device(0) on a machine with a GPU.
/// let chunk = a.read_chunk(&[2, 2], &BufferPrototype::Host)?; // clipped at the edge
/// assert_eq!(chunk.shape(), &[2, 1]);
/// let whole = a.read_all(&BufferPrototype::Host)?;
/// assert!(whole.is_c_contiguous());
/// let v = whole.to_ndarray::<f32>()?;
/// assert_eq!(v[[9, 6]], chunk.to_ndarray::<f32>()?[[1, 0]]);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub struct ZarrArray {
    pub(super) array: Array<DynStorage>,
    pub(super) meta: ZarrMetadata,
    pub(super) location: String,
    pub(super) read_options: ReadOptions,
    pub(super) write_options: super::WriteOptions,
    /// Where the read engine reaches stored bytes directly (a directory's files, an
    /// object store's concurrent requests).
    pub(super) direct: read::Direct,
}

impl std::fmt::Debug for ZarrArray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZarrArray")
            .field("location", &self.location)
            .field("metadata", &self.meta)
            .field("read_options", &self.read_options)
            .field("write_options", &self.write_options)
            .finish()
    }
}

fn to_usize(v: u64, what: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| Error::invalid(format!("{what} {v} does not fit in usize")))
}

fn shape_usize(shape: &[u64]) -> Result<Vec<usize>> {
    shape.iter().map(|&s| to_usize(s, "extent")).collect()
}

impl ZarrArray {
    // ------------------------------------------------------------------ opening

    /// Opens the zarr array (v3 `zarr.json` or v2 `.zarray`) in the directory `path`.
    ///
    /// Errors when the directory does not exist, holds no array metadata, or the array
    /// uses a data type, chunk grid or codec devbuf or `zarrs` does not support.
    ///
    /// ```
    /// use devbuf_zarr::ZarrArray;
    /// let a = ZarrArray::open("../../tests/fixtures/zarr/v3_uint8_sharded.zarr")?;
    /// assert_eq!(a.metadata().subchunk_shape, Some(vec![4, 4]));
    /// assert!(ZarrArray::open("../../tests/fixtures/zarr/no_such.zarr").is_err());
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<ZarrArray> {
        let path = path.as_ref();
        let location = path.display().to_string();
        match std::fs::metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::not_found(format!(
                    "no zarr array at {location}: the path does not exist"
                ))
                .with_source(e));
            }
            Err(e) => {
                return Err(Error::from_io(
                    "opening a zarr array",
                    format!("{location}: {e}"),
                    e,
                ));
            }
            Ok(m) if !m.is_dir() => {
                return Err(Error::invalid(format!(
                    "no zarr array at {location}: not a directory"
                )));
            }
            Ok(_) => {}
        }
        let storage: Arc<DynStorage> = super::fs_store::checked_filesystem_store(path)?;
        let mut a = Self::open_storage(storage, "/", location)?;
        a.direct = read::Direct::Dir(path.to_path_buf());
        Ok(a)
    }

    /// Opens the zarr array at `path` (`""` for the root, else `"group/array"`) of a
    /// devbuf [`Store`], through [`StoreAdapter`].
    ///
    /// ```
    /// use std::sync::Arc;
    /// use devbuf_zarr::{ArraySpec, ZarrArray};
    /// use devbuf_core::zarr::{BufferPrototype, Dtype, MemoryStore, NDBuffer};
    /// let store = Arc::new(MemoryStore::new());
    /// let a = ZarrArray::create_in_store(store.clone(), "g/a", &ArraySpec::new(&[4], &[2], Dtype::INT32))?;
    /// a.write_subset(&[1], &NDBuffer::from_ndarray(ndarray::arr1(&[7i32, 8])))?;
    /// let b = ZarrArray::open_store(store, "g/a")?;
    /// let v = b.read_all(&BufferPrototype::Host)?.to_ndarray::<i32>()?;
    /// assert_eq!(v.as_slice().unwrap(), &[0, 7, 8, 0]);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn open_store(store: Arc<dyn Store>, path: &str) -> Result<ZarrArray> {
        let (node, location) = node_path(path)?;
        Self::open_storage(Arc::new(StoreAdapter::new(store)), &node, location)
    }

    pub(super) fn open_storage(
        storage: Arc<DynStorage>,
        node: &str,
        location: String,
    ) -> Result<ZarrArray> {
        // The document is checked before zarrs parses it (zarrs trusts some fields).
        super::validate::preflight(storage.as_ref(), node, &location)?;
        let array = guard(&format!("opening {location}"), || {
            Array::open(storage, node).map_err(|e| match e {
                ::zarrs::array::ArrayCreateError::MissingMetadata => Error::not_found(format!(
                    "no zarr array at {location}: neither zarr.json (v3) nor .zarray (v2) found"
                )),
                ::zarrs::array::ArrayCreateError::StorageError(s) => {
                    crate::storage::storage_error("opening a zarr array", &location, s)
                }
                // A codec or data type zarrs does not know (its error names it).
                ::zarrs::array::ArrayCreateError::CodecsCreateError(
                    ::zarrs::plugin::PluginCreateError::Unsupported(u),
                ) => Error::unsupported(format!(
                    "zarr array at {location}: unsupported codec: {u} (docs/zarr.md lists \
                     the codecs devbuf reads)"
                )),
                ::zarrs::array::ArrayCreateError::UnsupportedZarrV2Array(why) => {
                    Error::unsupported(format!(
                        "zarr array at {location}: unsupported zarr v2 array: {why} (docs/zarr.md \
                         lists the codecs devbuf reads)"
                    ))
                }
                ::zarrs::array::ArrayCreateError::DataTypeCreateError(
                    ::zarrs::plugin::PluginCreateError::Unsupported(u),
                ) => Error::unsupported(format!(
                    "zarr array at {location}: unsupported data type: {u}"
                )),
                e => Error::Malformed(format!("cannot open the zarr array at {location}: {e}")),
            })
        })?;
        Self::from_array(array, location)
    }

    fn from_array(array: Array<DynStorage>, location: String) -> Result<ZarrArray> {
        let meta = ZarrMetadata::from_array(&array, &location)?;
        Ok(ZarrArray {
            array,
            meta,
            location,
            read_options: ReadOptions::default(),
            write_options: super::WriteOptions::default(),
            direct: read::Direct::Store,
        })
    }

    /// Creates a zarr v3 array described by `spec` in the directory `path` (created if
    /// missing) and writes its metadata. Errors when an array already exists there.
    ///
    /// ```
    /// use devbuf_zarr::{ArraySpec, Compressor, ZarrArray};
    /// use devbuf_core::zarr::{BufferPrototype, Dtype, Scalar};
    /// let dir = std::env::temp_dir().join(format!("devbuf-doc-create-{}", std::process::id()));
    /// let spec = ArraySpec::new(&[6, 4], &[3, 2], Dtype::UINT16)
    ///     .with_fill_value(Scalar::from(9u16))
    ///     .with_compressor(Compressor::Gzip { level: 5 });
    /// let a = ZarrArray::create(&dir, &spec)?;
    /// assert!(a.read_all(&BufferPrototype::Host)?.all_equal(Some(Scalar::from(9u16)), true)?);
    /// assert!(ZarrArray::create(&dir, &spec).is_err()); // already there
    /// std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn create(path: impl AsRef<Path>, spec: &ArraySpec) -> Result<ZarrArray> {
        let path = path.as_ref();
        let location = path.display().to_string();
        if path.join("zarr.json").exists() || path.join(".zarray").exists() {
            return Err(Error::invalid(format!(
                "a zarr array already exists at {location}"
            )));
        }
        std::fs::create_dir_all(path).map_err(|e| {
            Error::from_io(
                "creating a zarr array directory",
                format!("{location}: {e}"),
                e,
            )
        })?;
        let storage: Arc<DynStorage> = super::fs_store::checked_filesystem_store(path)?;
        let mut a = Self::create_storage(storage, "/", location, spec)?;
        a.direct = read::Direct::Dir(path.to_path_buf());
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

    pub(super) fn create_storage(
        storage: Arc<DynStorage>,
        node: &str,
        location: String,
        spec: &ArraySpec,
    ) -> Result<ZarrArray> {
        spec.validate()?;
        let element = spec.dtype.element();
        let fill = spec
            .fill_value
            .unwrap_or(Scalar::UInt8(0))
            .to_bytes_as(Dtype::from(element));
        let endian = (spec.dtype.element().size() > 1).then(|| match spec.dtype.byteorder() {
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
                .map_err(|e| {
                    crate::storage::storage_error("writing zarr metadata", &location, e)
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
    pub fn dtype(&self) -> Dtype {
        self.meta.dtype()
    }

    /// Where the array is: its directory, or `store:<path>` for a devbuf store.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The box of chunk `indices` clipped to the array: `start..end` per axis.
    ///
    /// ```
    /// use devbuf_zarr::ZarrArray;
    /// let a = ZarrArray::open("../../tests/fixtures/zarr/v3_float32.zarr")?; // 10 x 7 in 4 x 3
    /// assert_eq!(a.chunk_ranges(&[2, 1])?, vec![8..10, 3..6]);
    /// assert!(a.chunk_ranges(&[3, 0]).is_err());
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn chunk_ranges(&self, indices: &[u64]) -> Result<Vec<Range<u64>>> {
        let (start, shape) = self.chunk_box(indices)?;
        Ok(start.iter().zip(&shape).map(|(&s, &n)| s..s + n).collect())
    }

    /// Whether chunk `indices` is stored (a missing chunk reads as the fill value).
    pub fn chunk_is_stored(&self, indices: &[u64]) -> Result<bool> {
        self.check_chunk(indices)?;
        let key: StoreKey = self.array.chunk_key(indices);
        let size = self.array.storage().size_key(&key).map_err(|e| {
            crate::storage::storage_error("reading a zarr store", &self.location, e)
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
    /// The chunks land in **one** allocation (host or device); the returned arrays are
    /// consecutive zero-copy slices of it (so writing into one of them first copies that
    /// chunk: copy-on-write). A chunk listed twice is decoded once.
    ///
    /// ```
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_core::zarr::{BufferPrototype, Scalar};
    /// let a = ZarrArray::open("../../tests/fixtures/zarr/v3_int16.zarr")?; // chunk (1, 1) missing
    /// let chunks = a.read_chunks(&[[0u64, 0], [1, 1]], &BufferPrototype::Host)?;
    /// assert_eq!(chunks[0].shape(), &[4, 3]);
    /// assert!(chunks[1].all_equal(Some(Scalar::from(-7i16)), true)?); // the fill value
    /// # Ok::<(), devbuf_core::Error>(())
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
            requests.push(ReadBox {
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
    /// The read engine decodes every chunk the box touches once, on one worker per core
    /// (and nvCOMP where [`ReadOptions::decoder`] says so), and places its part of the
    /// box: on the host straight into the result, on a device from page-locked staging
    /// slots by device copies.
    ///
    /// ```
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_core::zarr::BufferPrototype;
    /// let a = ZarrArray::open("../../tests/fixtures/zarr/v2_int16_zstd.zarr")?; // 6 x 5 x 4
    /// let s = a.read_subset(&[1..5, 0..5, 2..3], &BufferPrototype::Host)?;
    /// assert_eq!(s.shape(), &[4, 5, 1]);
    /// assert!(a.read_subset(&[0..7, 0..5, 0..4], &BufferPrototype::Host).is_err());
    /// # Ok::<(), devbuf_core::Error>(())
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
        let request = ReadBox {
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

    /// Sets how reads run (see [`ReadOptions`]); options out of their documented ranges
    /// are an error naming the field and the range ([`ReadOptions::validate`]).
    ///
    /// ```
    /// use devbuf_zarr::{ReadOptions, ZarrArray};
    /// use devbuf_core::zarr::BufferPrototype;
    /// let mut a = ZarrArray::open("../../tests/fixtures/zarr/v3_float32.zarr")?;
    /// a.set_read_options(ReadOptions { threads: Some(1), ..ReadOptions::default() })?;
    /// let (_, report) = a.read_all_with_report(&BufferPrototype::Host)?;
    /// assert_eq!(report.workers, 1);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn set_read_options(&mut self, options: ReadOptions) -> Result<()> {
        options.validate()?;
        self.read_options = options;
        Ok(())
    }

    /// Runs the read engine over `requests` into `prototype`'s memory.
    fn run_read(
        &self,
        requests: &[ReadBox],
        total: usize,
        prototype: &BufferPrototype,
    ) -> Result<(Memory, ReadReport)> {
        let ctx = prototype.context()?;
        match self.run_read_to(requests, total, read::Dest::New(ctx.as_ref()))? {
            (Some(mem), report) => Ok((mem, report)),
            (None, _) => Err(Error::invalid(
                "read engine: no result memory for a new read",
            )),
        }
    }

    /// Runs the read engine over `requests` into `dest`.
    pub(super) fn run_read_to(
        &self,
        requests: &[ReadBox],
        total: usize,
        dest: read::Dest<'_>,
    ) -> Result<(Option<Memory>, ReadReport)> {
        read::read(
            &self.source()?,
            requests,
            total,
            dest,
            &self.read_options,
            // An async read's dropped future stops it (see `crate::aio`).
            crate::aio::scope::current_stop(),
        )
    }

    /// The read engine's view of this array.
    pub(crate) fn source(&self) -> Result<ZarrSource<'_>> {
        let fill = self.meta.fill_value.to_bytes_as(self.dtype());
        ZarrSource::new(
            &self.array,
            &self.location,
            &self.meta.chunk_shape,
            self.elem(),
            self.meta.stored_dtype.element().swap_width(),
            fill,
            &self.direct,
        )
    }

    /// Reads a numpy-style selection (integers, ranges, [`Slice`](devbuf_core::zarr::Slice)s
    /// with positive steps, full axes; fewer selectors than axes select the rest whole)
    /// into `prototype`'s memory. Integer axes are dropped, as in numpy.
    ///
    /// The bounding box of the selection ([`bounding_box`]) is read (see
    /// [`read_subset`](Self::read_subset)) and a stepped selection is returned as a
    /// zero-copy strided view of it.
    ///
    /// ```
    /// use devbuf_zarr::ZarrArray;
    /// use devbuf_core::zarr::{AxisSel, BufferPrototype, Slice};
    /// let a = ZarrArray::open("../../tests/fixtures/zarr/v3_float64.zarr")?; // 10 x 7
    /// let v = a.read(&[Slice::every(3).into(), AxisSel::Index(-1)], &BufferPrototype::Host)?;
    /// assert_eq!(v.shape(), &[4]); // rows 0, 3, 6, 9 of the last column
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn read(&self, selection: &[AxisSel], prototype: &BufferPrototype) -> Result<NDBuffer> {
        let shape = shape_usize(&self.meta.shape)?;
        let BoundingBox { ranges, view } = bounding_box(selection, &shape)?;
        let boxed = self.read_subset(&ranges, prototype)?;
        match view {
            Some(rel) => boxed.get(&rel),
            None => Ok(boxed),
        }
    }

    /// Reads the whole array into `prototype`'s memory.
    pub fn read_all(&self, prototype: &BufferPrototype) -> Result<NDBuffer> {
        let ranges: Vec<Range<u64>> = self.meta.shape.iter().map(|&s| 0..s).collect();
        self.read_subset(&ranges, prototype)
    }

    // ------------------------------------------------------------------ internals

    pub(super) fn elem(&self) -> usize {
        self.meta.stored_dtype.element().size()
    }

    pub(super) fn check_chunk(&self, indices: &[u64]) -> Result<()> {
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
    pub(super) fn chunk_box(&self, indices: &[u64]) -> Result<(Vec<u64>, Vec<u64>)> {
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

    pub(super) fn check_ranges(&self, ranges: &[Range<u64>]) -> Result<(Vec<u64>, Vec<u64>)> {
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
    pub(super) fn wrap(&self, mem: Memory, shape: &[u64]) -> Result<NDBuffer> {
        NDBuffer::from_memory(mem, &shape_usize(shape)?, self.dtype(), Order::C)
    }

    pub(super) fn array_err(&self, what: &str, e: ArrayError) -> Error {
        match e {
            ArrayError::StorageError(s) => crate::storage::storage_error(
                "zarr store access",
                format_args!("{what} {}", self.location),
                s,
            ),
            ArrayError::CodecError(c) => Error::Malformed(format!("{what} {}: {c}", self.location)),
            e => Error::invalid(format!("{what} {}: {e}", self.location)),
        }
    }

    /// Runs `f` on the array subset `start`/`shape` inside [`guard`]; `f` gets the
    /// subset and the text that opens its error messages (`"<verb> [a..b, ...] of"`).
    pub(super) fn on_subset(
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
                    &::zarrs::array::CodecOptions::default(),
                )
                .map_err(|e| self.array_err(what, e))
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

/// zarrs' node path and devbuf's description of `path` in a store.
pub(super) fn node_path(path: &str) -> Result<(String, String)> {
    let p = path.trim_matches('/');
    if p.split('/').any(|c| c == "." || c == "..") || p.contains("//") {
        return Err(Error::invalid(format!(
            "invalid array path {path:?} (use names separated by '/', without '.' or '..')"
        )));
    }
    Ok((format!("/{p}"), format!("store:/{p}")))
}

#[cfg(test)]
#[path = "array_tests.rs"]
mod tests;
