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
use super::location::Location;
use super::metadata::ZarrMetadata;
use super::read::plan::checked_bytes;
use super::read::{self, ReadBox, ReadOptions, ReadReport, ZarrSource};
use super::spec::ArraySpec;
use super::storage::StoreAdapter;
use devbuf_core::error::{Error, Result};
use devbuf_core::memory::Memory;
use devbuf_core::zarr::{BufferPrototype, Dtype, Endianness, NDBuffer, Order, Scalar};

/// A zarr array (format 2 or 3) opened with the [`zarrs`] crate, read into and
/// written from [`NDBuffer`]s of any [`BufferPrototype`].
///
/// * **Reads** ([`read`](Self::read) a selection, [`read_chunks`](Self::read_chunks)
///   whole chunks; each a request run `to` new memory of a [`BufferPrototype`], `into`
///   memory you hold, or `spread` over devices, blocking or async) return
///   native-endian, C-contiguous arrays whatever the stored byte order and order
///   (numpy's values, as zarr-python returns them); missing chunks read as the fill
///   value. Every read goes through the read engine (`docs/zarr.md`, "The read
///   engine"): one worker per core fetches and decodes each chunk it touches exactly
///   once (on the CPU, or batched through nvCOMP on the GPU), and places it into host
///   memory or — through page-locked slots of the context's transfer pool — onto the
///   device, where the placement runs as device copies. [`ReadOptions`] tunes it, and
///   a [`ReadReport`] says what ran.
/// * **Writes** ([`write_chunks`](Self::write_chunks),
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
/// use devbuf_core::zarr::{BufferPrototype, Dtype, Order};
/// let a = ZarrArray::open("../../tests/fixtures/zarr/v2_float32_F.zarr")?;
/// assert_eq!(a.metadata().shape, vec![10, 7]);
/// assert_eq!(a.dtype(), Dtype::FLOAT32);
/// // BufferPrototype::Device(0) on a machine with a GPU.
/// let chunk = a.read_chunks(&[[2u64, 2]]).to(&BufferPrototype::Host)?.remove(0); // clipped at the edge
/// assert_eq!(chunk.shape(), &[2, 1]);
/// let whole = a.read(..).to(&BufferPrototype::Host)?;
/// assert!(whole.is_contiguous(Order::C));
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

    /// Opens the zarr array (v3 `zarr.json` or v2 `.zarray`) at `location`: a directory,
    /// an object-store URL, a devbuf [`Store`](devbuf_core::zarr::Store) or `zarrs` storage (see [`Location`]).
    ///
    /// Errors when nothing is there ([`Error::NotFound`]), the metadata is damaged, or
    /// the array uses a data type, chunk grid or codec devbuf or `zarrs` does not
    /// support ([`Error::Unsupported`], naming it).
    ///
    /// A URL (`s3://bucket/path`, `gs://bucket/path`, `az://container/path`,
    /// `http(s)://host/path` read-only, `file:///path`) takes credentials and endpoints
    /// from the environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
    /// `AWS_ENDPOINT_URL`, ...) and from [`Location::Url`]'s options, which also set the
    /// request concurrency, the read-ahead bound, timeouts and retries. Reads fetch
    /// every chunk they need with many requests in flight, ahead of the decoders; a
    /// shard the read needs all of is fetched whole (one GET), otherwise its index is
    /// read once and only the inner chunks the selection needs are fetched, with byte
    /// ranges (neighbours coalesced). Any failed request is an error naming the key and
    /// the URL (after the retries the options allow). Errors never show credentials.
    ///
    /// ```
    /// use devbuf_zarr::ZarrArray;
    /// let a = ZarrArray::open("../../tests/fixtures/zarr/v3_uint8_sharded.zarr")?;
    /// assert_eq!(a.metadata().subchunk_shape, Some(vec![4, 4]));
    /// assert!(ZarrArray::open("../../tests/fixtures/zarr/no_such.zarr").is_err());
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn open(location: impl Into<Location>) -> Result<ZarrArray> {
        match location.into() {
            Location::Path(path) => Self::open_dir(&path),
            #[cfg(feature = "object_store")]
            Location::Url(url, options) => {
                let store = Arc::new(crate::object_store::UrlStore::open(&url, &options)?);
                Self::open_url_store(store)
            }
            #[cfg(feature = "object_store")]
            Location::UrlStore(store) => Self::open_url_store(store),
            Location::Store(store, path) => {
                let (node, location) = node_path(&path)?;
                Self::open_storage(Arc::new(StoreAdapter::new(store)), &node, location)
            }
            Location::Zarrs(storage, node) => {
                let (node, location) = zarrs_node(&node)?;
                Self::open_storage(storage, &node, location)
            }
            Location::ZarrsReadOnly(storage, node) => {
                let (node, location) = zarrs_node(&node)?;
                let storage = Arc::new(crate::location::ReadOnlyStorage(storage));
                Self::open_storage(storage, &node, location)
            }
        }
    }

    /// Opens the array in the directory `path`.
    fn open_dir(path: &Path) -> Result<ZarrArray> {
        let location = path.display().to_string();
        match std::fs::metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                #[cfg(not(feature = "object_store"))]
                if crate::location::has_scheme(&location) {
                    return Err(Error::unsupported(format!(
                        "cannot open {location}: URLs need devbuf's feature `object_store`"
                    )));
                }
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

    /// Creates a zarr v3 array described by `spec` at `location` (a directory, created
    /// if missing; an object-store URL; a devbuf [`Store`](devbuf_core::zarr::Store); `zarrs` storage: see
    /// [`Location`]) and writes its metadata. Errors when an array already exists
    /// there, or the store is read-only (`http(s)://`).
    ///
    /// ```
    /// use devbuf_zarr::{ArraySpec, Compressor, ZarrArray};
    /// use devbuf_core::zarr::{BufferPrototype, Dtype, Scalar};
    /// let dir = std::env::temp_dir().join(format!("devbuf-doc-create-{}", std::process::id()));
    /// let spec = ArraySpec::new(&[6, 4], &[3, 2], Dtype::UINT16)
    ///     .with_fill_value(Scalar::from(9u16))
    ///     .with_compressor(Compressor::Gzip { level: 5 });
    /// let a = ZarrArray::create(&dir, &spec)?;
    /// assert!(a.read(..).to(&BufferPrototype::Host)?.all_equal(Some(Scalar::from(9u16)), true)?);
    /// assert!(ZarrArray::create(&dir, &spec).is_err()); // already there
    /// std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn create(location: impl Into<Location>, spec: &ArraySpec) -> Result<ZarrArray> {
        match location.into() {
            Location::Path(path) => Self::create_dir(&path, spec),
            #[cfg(feature = "object_store")]
            Location::Url(url, options) => {
                let store = Arc::new(crate::object_store::UrlStore::open(&url, &options)?);
                Self::create_url_store(store, spec)
            }
            #[cfg(feature = "object_store")]
            Location::UrlStore(store) => Self::create_url_store(store, spec),
            Location::Store(store, path) => {
                let (node, location) = node_path(&path)?;
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
            Location::Zarrs(storage, node) => {
                let (node, location) = zarrs_node(&node)?;
                let prefix = node.trim_start_matches('/');
                for meta in ["zarr.json", ".zarray"] {
                    let key = if prefix.is_empty() {
                        meta.to_string()
                    } else {
                        format!("{prefix}/{meta}")
                    };
                    let key = StoreKey::new(key).map_err(|e| {
                        Error::invalid(format!("invalid array path {location}: {e}"))
                    })?;
                    let there = storage.size_key(&key).map_err(|e| {
                        crate::storage::storage_error("reading a zarr store", &location, e)
                    })?;
                    if there.is_some() {
                        return Err(Error::invalid(format!(
                            "a zarr array already exists at {location}"
                        )));
                    }
                }
                Self::create_storage(storage, &node, location, spec)
            }
            Location::ZarrsReadOnly(_, node) => Err(Error::ReadOnly(format!(
                "cannot create an array at {node}: Location::ZarrsReadOnly storage only reads"
            ))),
        }
    }

    /// Creates an array in the directory `path` (created if missing).
    fn create_dir(path: &Path, spec: &ArraySpec) -> Result<ZarrArray> {
        let location = path.display().to_string();
        #[cfg(not(feature = "object_store"))]
        if crate::location::has_scheme(&location) && !path.exists() {
            return Err(Error::unsupported(format!(
                "cannot create {location}: URLs need devbuf's feature `object_store`"
            )));
        }
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

    /// Reads whole chunks (each clipped to the array's bounds) into one allocation of
    /// `prototype`'s memory: [`read_chunks`](Self::read_chunks)' engine.
    pub(crate) fn read_chunk_list<I: AsRef<[u64]>>(
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

    /// Reads the box `ranges` (`start..end` per axis, within the shape) into new memory
    /// of `prototype` as one C-contiguous array: [`read`](Self::read)'s engine.
    pub(crate) fn read_box(
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

    /// How reads run: decoder, worker threads, staging slot size.
    pub fn read_options(&self) -> &ReadOptions {
        &self.read_options
    }

    /// Sets how reads run (see [`ReadOptions`]); options out of their documented ranges
    /// are an error naming the field and the range, and leave the options as they were.
    ///
    /// ```
    /// use devbuf_zarr::{GpuTuning, ReadOptions, ZarrArray};
    /// use devbuf_core::zarr::BufferPrototype;
    /// let mut a = ZarrArray::open("../../tests/fixtures/zarr/v3_float32.zarr")?;
    /// let bad = ReadOptions { gpu: GpuTuning { spread: Some(0), ..GpuTuning::default() }, ..ReadOptions::default() };
    /// let e = a.set_read_options(bad).unwrap_err();
    /// assert!(e.to_string().contains("gpu.spread is 0; valid: 1 to 64"));
    /// a.set_read_options(ReadOptions { threads: Some(1), ..ReadOptions::default() })?;
    /// let mut report = devbuf_zarr::ReadReport::default();
    /// a.read(..).report(&mut report).to(&BufferPrototype::Host)?;
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
            devbuf_core::__private::swap_width(self.meta.stored_dtype.element()),
            fill,
            &self.direct,
        )
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
        super::request::check_box(ranges, &self.meta.shape, &self.location)?;
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

/// The node path and location text of an array at `node` of `zarrs` storage.
fn zarrs_node(node: &str) -> Result<(String, String)> {
    let (node, _) = node_path(node)?;
    let location = format!("zarrs:{node}");
    Ok((node, location))
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
