//! Checks of zarr array metadata before anything computes with it.
//!
//! A metadata document is input like any other: its shapes can be zero, astronomically
//! large, or of thousands of axes, and `zarrs` computes with them as they are (an
//! overflowing product panics in a debug build and wraps silently in a release build,
//! where reads then return the wrong bytes). Every array devbuf opens is checked here
//! first: the products of extents and element size fit 64 bits, chunks are non-empty
//! and at most [`MAX_CHUNK_BYTES`], the rank is at most [`MAX_RANK`], and the inner
//! chunks of a shard divide it. Each error names the document, the field, its value and
//! the valid range.
//!
//! Two entry points: [`check_document`] checks a parsed document (what
//! [`ZarrMetadata`](super::ZarrMetadata) does with the metadata `zarrs` parsed), and
//! [`preflight`] reads the metadata document of a node through the storage and checks
//! it before `zarrs` parses it (malformed JSON, unsupported data types and impossible
//! shapes are then reported as such, with devbuf's messages).

use serde_json::Value;
use zarrs::storage::{ReadableStorageTraits, StoreKey};

use devbuf_core::__private::fmt_axes;
use devbuf_core::ElementType;
use devbuf_core::error::{Error, Result};
use devbuf_core::zarr::Dtype;

/// The most axes an array may have (numpy's limit, `NPY_MAXDIMS`, is 64 too).
pub const MAX_RANK: usize = 64;

/// The most bytes one chunk (or shard) may hold when decoded: 1 TiB. Stored chunks are
/// decoded whole, so a stored chunk must fit in memory (its buffer is allocated
/// fallibly); a chunk that is not stored costs no memory of its size (the read engine
/// writes the fill value only where a read places it). Real zarr chunks are kilobytes
/// to a few hundred megabytes. Each chunk extent is thereby at most `MAX_CHUNK_BYTES` too, and
/// so is a shard's index (16 bytes per inner chunk).
pub const MAX_CHUNK_BYTES: u64 = 1 << 40;

/// The largest metadata document (`zarr.json` or `.zarray`) devbuf reads to check it
/// before `zarrs` parses it: 16 MiB.
pub const MAX_METADATA_BYTES: u64 = 16 << 20;

/// Sharding codecs nested in each other beyond this depth are refused.
pub const MAX_SHARDING_DEPTH: usize = 4;

/// The most a shard's bytes times its number of inner chunks may be: 2^56. `zarrs`
/// bounds the encoded size of a shard by that product (its inner codecs' bound for the
/// whole shard, once per inner chunk), which must not overflow 64 bits, codec overheads
/// included. Nested sharding multiplies by the inner chunks of each level, counted over
/// the whole shard. (A 1 GiB shard of 4 KiB inner chunks is 2^48.)
pub const MAX_SHARD_PRODUCT: u64 = 1 << 56;

/// The most codecs one codec list (an array's, a shard's inner or index codecs, zarr
/// v2's filters) may hold. Real arrays use one to four; `zarrs` sums size bounds along
/// the list, which overflows for hundreds of compressors.
pub const MAX_CODECS: usize = 16;

/// The element types devbuf reads, for messages.
pub(crate) const SUPPORTED_TYPES: &str = "bool, int8..int64, uint8..uint64, float16, float32, \
                                          float64, complex64, complex128, numpy.datetime64 and \
                                          numpy.timedelta64 (as int64)";

/// The codecs devbuf refuses by name (zarr v2 ids; zarr v3 names are these or
/// `numcodecs.` and these), with why. Others that zarrs does not know are refused when
/// zarrs opens the array (also as unsupported, naming the codec).
const REFUSED_CODECS: &[(&str, &str)] = &[
    ("lzma", "zarrs has no LZMA codec"),
    ("delta", "zarrs has no numcodecs Delta filter"),
    ("quantize", "zarrs has no numcodecs Quantize filter"),
    ("astype", "zarrs has no numcodecs AsType filter"),
    ("categorize", "zarrs has no numcodecs Categorize filter"),
    (
        "crc32",
        "zarrs has no numcodecs CRC32 checksum (crc32c is read)",
    ),
    (
        "jenkins_lookup3",
        "zarrs has no numcodecs JenkinsLookup3 checksum",
    ),
    ("vlen-utf8", "variable-length strings are not read"),
    ("vlen-bytes", "variable-length bytes are not read"),
    ("vlen-array", "variable-length arrays are not read"),
    ("pickle", "object arrays are not read"),
    ("json2", "object arrays are not read"),
    ("msgpack2", "object arrays are not read"),
    #[cfg(not(feature = "zfp"))]
    (
        "zfpy",
        "devbuf-zarr was built without its `zfp` feature (zfp's C library: CMake and libclang)",
    ),
    #[cfg(not(feature = "zfp"))]
    (
        "zfp",
        "devbuf-zarr was built without its `zfp` feature (zfp's C library: CMake and libclang)",
    ),
];

/// Why devbuf refuses the codec named `name` (v2 id or v3 name), if it does.
pub(crate) fn refused_codec(name: &str) -> Option<&'static str> {
    let bare = name
        .strip_prefix("numcodecs.")
        .or_else(|| name.strip_prefix("zarrs."))
        .unwrap_or(name);
    REFUSED_CODECS
        .iter()
        .find(|(n, _)| *n == bare)
        .map(|(_, why)| *why)
}

/// Where a document came from, for messages.
struct Doc<'a> {
    location: &'a str,
    file: &'static str,
}

impl Doc<'_> {
    fn malformed(&self, field: &str, what: impl std::fmt::Display) -> Error {
        Error::Malformed(format!(
            "zarr array at {}: {} field {field} {what}",
            self.location, self.file
        ))
    }

    fn unsupported(&self, field: &str, what: impl std::fmt::Display) -> Error {
        Error::unsupported(format!(
            "zarr array at {}: {} field {field} {what}",
            self.location, self.file
        ))
    }
}

/// A JSON value as a short text for messages.
fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() <= 60 {
        s
    } else {
        let head: String = s.chars().take(57).collect();
        format!("{head}...")
    }
}

/// Checks a zarr v3 (`zarr.json`, `format` 3) or v2 (`.zarray`, `format` 2) array
/// metadata document.
pub(crate) fn check_document(doc: &Value, format: u8, location: &str) -> Result<()> {
    match format {
        3 => check_v3(
            doc,
            &Doc {
                location,
                file: "zarr.json",
            },
        ),
        _ => check_v2(
            doc,
            &Doc {
                location,
                file: ".zarray",
            },
        ),
    }
}

/// Reads the metadata document of the array at `node` (`"/"` or `"/group/array"`)
/// through `storage` and checks it ([`check_document`]) before `zarrs` parses it:
/// `zarr.json` if present, else `.zarray`. `Ok(())` when there is neither (opening
/// then reports the missing array).
///
/// Errors: [`Error::Malformed`] for a document that is not JSON or describes an
/// impossible array (naming the field); [`Error::Unsupported`] for an array devbuf
/// does not read (codec, data type, chunk grid, rank or chunk size beyond the bounds of
/// this module); [`Error::InvalidArgument`] for a group; the storage's error by its
/// kind ([`Error::Io`], [`Error::PermissionDenied`], ...) when reading fails (e.g. the
/// document is not a regular file).
// Called by `ZarrArray::open_storage` before `Array::open`.
pub(crate) fn preflight(
    storage: &dyn ReadableStorageTraits,
    node: &str,
    location: &str,
) -> Result<()> {
    let prefix = node.trim_matches('/');
    for (file, format) in [("zarr.json", 3u8), (".zarray", 2u8)] {
        let key = if prefix.is_empty() {
            file.to_string()
        } else {
            format!("{prefix}/{file}")
        };
        let key = StoreKey::new(key.clone()).map_err(|e| {
            Error::invalid(format!(
                "zarr array at {location}: bad store key {key:?}: {e}"
            ))
        })?;
        let io = |e: zarrs::storage::StorageError| {
            crate::storage::storage_error("reading zarr metadata", format!("{location}: {file}"), e)
        };
        let Some(size) = storage.size_key(&key).map_err(io)? else {
            continue;
        };
        if size > MAX_METADATA_BYTES {
            return Err(Error::invalid(format!(
                "zarr array at {location}: {file} is {size} bytes (valid: at most \
                 {MAX_METADATA_BYTES} bytes of metadata)"
            )));
        }
        let Some(bytes) = storage.get(&key).map_err(io)? else {
            continue;
        };
        let doc: Value = serde_json::from_slice(&bytes).map_err(|e| {
            Error::Malformed(format!(
                "zarr array at {location}: {file} is not valid JSON: {e}"
            ))
        })?;
        return check_document(&doc, format, location);
    }
    Ok(())
}

fn object<'v>(doc: &'v Value, d: &Doc) -> Result<&'v serde_json::Map<String, Value>> {
    doc.as_object().ok_or_else(|| {
        Error::Malformed(format!(
            "zarr array at {}: {} is {}, not a JSON object",
            d.location,
            d.file,
            short(doc)
        ))
    })
}

fn check_v3(doc: &Value, d: &Doc) -> Result<()> {
    let obj = object(doc, d)?;
    match obj.get("zarr_format") {
        Some(v) if v.as_u64() == Some(3) => {}
        Some(v) => {
            return Err(d.malformed("zarr_format", format_args!("is {}, expected 3", short(v))));
        }
        None => return Err(d.malformed("zarr_format", "is missing (expected 3)")),
    }
    match obj.get("node_type").and_then(Value::as_str) {
        Some("array") => {}
        Some("group") => {
            return Err(Error::invalid(format!(
                "no zarr array at {}: {} describes a group",
                d.location, d.file
            )));
        }
        _ => {
            return Err(d.malformed(
                "node_type",
                format_args!(
                    "is {}, expected \"array\"",
                    obj.get("node_type").map_or("missing".into(), short)
                ),
            ));
        }
    }
    let shape = extents(obj.get("shape"), "shape", d)?;
    check_rank(&shape, "shape", d)?;
    let element = v3_element(obj.get("data_type"), d)?;
    let grid = obj
        .get("chunk_grid")
        .ok_or_else(|| d.malformed("chunk_grid", "is missing"))?;
    let grid_name = match grid {
        Value::String(s) => s.as_str(),
        Value::Object(o) => o.get("name").and_then(Value::as_str).unwrap_or(""),
        _ => "",
    };
    if grid_name != "regular" {
        return Err(d.unsupported(
            "chunk_grid.name",
            format_args!(
                "is {}: not supported (devbuf reads regular chunk grids)",
                short(grid.get("name").unwrap_or(grid))
            ),
        ));
    }
    let field = "chunk_grid.configuration.chunk_shape";
    let chunk = extents(
        grid.get("configuration").and_then(|c| c.get("chunk_shape")),
        field,
        d,
    )?;
    check_layout(&shape, &chunk, field, element.size() as u64, d)?;
    if let Some(codecs) = obj.get("codecs") {
        check_codec_names(codecs, "codecs", d)?;
        // (The chunk's bytes fit MAX_CHUNK_BYTES: checked above.)
        let bytes = nonzero_bytes(&chunk, element.size() as u64).unwrap_or(u64::MAX);
        check_codecs(
            codecs,
            &chunk,
            &chunk,
            bytes,
            element.size() as u64,
            "codecs",
            0,
            d,
        )?;
    }
    Ok(())
}

fn check_v2(doc: &Value, d: &Doc) -> Result<()> {
    let obj = object(doc, d)?;
    match obj.get("zarr_format") {
        Some(v) if v.as_u64() == Some(2) => {}
        Some(v) => {
            return Err(d.malformed("zarr_format", format_args!("is {}, expected 2", short(v))));
        }
        None => return Err(d.malformed("zarr_format", "is missing (expected 2)")),
    }
    let shape = extents(obj.get("shape"), "shape", d)?;
    check_rank(&shape, "shape", d)?;
    if shape.is_empty() && obj.get("order").and_then(Value::as_str) == Some("F") {
        // zarrs 0.23 builds the transpose of an F-order array with `unwrap_unchecked`,
        // which is undefined behaviour for zero axes (its permutation is empty).
        return Err(d.unsupported(
            "order",
            "\"F\" of an array of zero axes: not supported (zarrs cannot open it; \
             write order \"C\", which a 0-d array is too)",
        ));
    }
    let size = match obj.get("dtype") {
        // numpy datetime64 / timedelta64: 8-byte counts of the unit.
        Some(Value::String(s)) if crate::time_v2::parse(s).is_some() => 8,
        Some(Value::String(s)) => s
            .parse::<Dtype>()
            .map_err(|_| {
                let object = s.trim_start_matches(['<', '>', '=', '|']) == "O";
                // numpy objects are stored through an object codec (the first filter):
                // name it (vlen-utf8: variable-length strings).
                let codec = obj
                    .get("filters")
                    .and_then(Value::as_array)
                    .and_then(|f| f.first())
                    .and_then(|f| f.get("id"))
                    .and_then(Value::as_str);
                let why = match (object, codec) {
                    (true, Some(c)) => format!(
                        "numpy objects encoded with the codec {} are not read: {}; ",
                        short(&Value::String(c.to_string())),
                        refused_codec(c).unwrap_or("an unsupported codec")
                    ),
                    (true, None) => "numpy objects are not read; ".to_string(),
                    (false, _) => String::new(),
                };
                d.unsupported(
                    "dtype",
                    format_args!(
                        "{} is an unsupported data type ({why}devbuf reads {SUPPORTED_TYPES})",
                        short(&Value::String(s.clone())),
                    ),
                )
            })?
            .element()
            .size(),
        Some(v @ Value::Array(_)) => {
            return Err(d.unsupported(
                "dtype",
                format_args!(
                    "{} is an unsupported data type (structured data types are not read; \
                     devbuf reads {SUPPORTED_TYPES})",
                    short(v)
                ),
            ));
        }
        Some(v) => {
            return Err(d.malformed(
                "dtype",
                format_args!(
                    "is {}, expected a numpy type string such as \"<f4\"",
                    short(v)
                ),
            ));
        }
        None => return Err(d.malformed("dtype", "is missing")),
    };
    let chunk = extents(obj.get("chunks"), "chunks", d)?;
    check_layout(&shape, &chunk, "chunks", size as u64, d)?;
    if let Some(Value::Array(filters)) = obj.get("filters") {
        if filters.len() > MAX_CODECS {
            return Err(d.unsupported(
                "filters",
                format_args!(
                    "has {} filters: not supported (valid: at most MAX_CODECS = {MAX_CODECS})",
                    filters.len()
                ),
            ));
        }
        for (i, f) in filters.iter().enumerate() {
            check_codec_name(f, "id", &format!("filters[{i}]"), d)?;
        }
    }
    if let Some(c) = obj.get("compressor") {
        check_codec_name(c, "id", "compressor", d)?;
    }
    Ok(())
}

/// Refuses a codec devbuf does not read ([`refused_codec`]), naming it: `codec` is a
/// v3 codec (a name, or an object with a `name`) or a v2 one (an object with an `id`),
/// whose name is under `key`.
fn check_codec_name(codec: &Value, key: &str, field: &str, d: &Doc) -> Result<()> {
    let name = match codec {
        Value::String(s) => s.as_str(),
        Value::Object(o) => o.get(key).and_then(Value::as_str).unwrap_or(""),
        _ => "",
    };
    match refused_codec(name) {
        Some(why) => Err(d.unsupported(
            field,
            format_args!(
                "names the codec {}: an unsupported codec ({why}; docs/zarr.md lists the \
                 codecs devbuf reads)",
                short(&Value::String(name.to_string()))
            ),
        )),
        None => Ok(()),
    }
}

/// [`check_codec_name`] for every codec of a v3 codec list, and of the codec lists of
/// `sharding_indexed` codecs in it (to [`MAX_SHARDING_DEPTH`]).
fn check_codec_names(codecs: &Value, field: &str, d: &Doc) -> Result<()> {
    fn walk(codecs: &Value, field: &str, depth: usize, d: &Doc) -> Result<()> {
        let Some(list) = codecs.as_array() else {
            return Ok(()); // (check_codecs says what is wrong with it)
        };
        for (i, codec) in list.iter().enumerate().take(MAX_CODECS + 1) {
            let here = format!("{field}[{i}]");
            check_codec_name(codec, "name", &here, d)?;
            if depth < MAX_SHARDING_DEPTH
                && let Some(cfg) = codec.get("configuration")
                && codec.get("name").and_then(Value::as_str) == Some("sharding_indexed")
            {
                for key in ["codecs", "index_codecs"] {
                    if let Some(inner) = cfg.get(key) {
                        walk(inner, &format!("{here}.configuration.{key}"), depth + 1, d)?;
                    }
                }
            }
        }
        Ok(())
    }
    walk(codecs, field, 0, d)
}

/// The element type of a v3 `data_type` (a name, or an object with a `name`).
fn v3_element(v: Option<&Value>, d: &Doc) -> Result<ElementType> {
    let v = v.ok_or_else(|| d.malformed("data_type", "is missing"))?;
    let name = match v {
        Value::String(s) => Some(s.as_str()),
        Value::Object(o) => o.get("name").and_then(Value::as_str),
        _ => None,
    }
    .ok_or_else(|| {
        d.malformed(
            "data_type",
            format_args!(
                "is {}, expected a data type name such as \"float32\"",
                short(v)
            ),
        )
    })?;
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
        .ok_or_else(|| {
            d.unsupported(
                "data_type",
                format_args!(
                    "{} is an unsupported data type ({}devbuf reads {SUPPORTED_TYPES})",
                    short(&Value::String(name.to_string())),
                    match name {
                        "string" => "variable-length strings are not read; ",
                        "bytes" | "variable_length_bytes" => "variable-length bytes are not read; ",
                        "structured" => "structured data types are not read; ",
                        _ => "",
                    }
                ),
            )
        })
}

/// An array of extents (non-negative integers below 2^64), at most [`MAX_RANK`] long
/// (checked before the whole array is converted).
fn extents(v: Option<&Value>, field: &str, d: &Doc) -> Result<Vec<u64>> {
    let v = v.ok_or_else(|| d.malformed(field, "is missing"))?;
    let arr = v.as_array().ok_or_else(|| {
        d.malformed(
            field,
            format_args!("is {}, expected an array of integers in 0..2^64", short(v)),
        )
    })?;
    if arr.len() > MAX_RANK {
        return Err(d.unsupported(
            field,
            format_args!(
                "has {} axes: not supported (valid: at most MAX_RANK = {MAX_RANK} axes)",
                arr.len()
            ),
        ));
    }
    arr.iter()
        .enumerate()
        .map(|(i, e)| {
            e.as_u64().ok_or_else(|| {
                d.malformed(
                    field,
                    format_args!("axis {i} is {}, expected an integer in 0..2^64", short(e)),
                )
            })
        })
        .collect()
}

fn check_rank(shape: &[u64], field: &str, d: &Doc) -> Result<()> {
    if shape.len() > MAX_RANK {
        return Err(d.unsupported(
            field,
            format_args!(
                "has {} axes: not supported (valid: at most MAX_RANK = {MAX_RANK} axes)",
                shape.len()
            ),
        ));
    }
    Ok(())
}

/// The product of the non-zero `extents` times `elem`, if it fits 64 bits (and
/// `usize`). With the zero extents left out, every partial product (in any order) fits
/// too.
fn nonzero_bytes(extents: &[u64], elem: u64) -> Option<u64> {
    extents
        .iter()
        .filter(|&&e| e != 0)
        .try_fold(elem, |acc, &e| acc.checked_mul(e))
        .filter(|&n| usize::try_from(n).is_ok())
}

/// Checks a shape and its chunk shape (the array's, or a shard's and its inner chunks).
fn check_layout(shape: &[u64], chunk: &[u64], chunk_field: &str, elem: u64, d: &Doc) -> Result<()> {
    if nonzero_bytes(shape, elem).is_none() {
        return Err(d.malformed(
            "shape",
            format_args!(
                "{} with {elem}-byte elements describes 2^64 bytes or more (valid: the \
                 product of the non-zero extents times the element size below 2^64)",
                fmt_axes(shape)
            ),
        ));
    }
    check_chunk(chunk, shape.len(), chunk_field, elem, d)
}

/// Checks a chunk shape of `rank` axes: non-zero extents, at most
/// [`MAX_CHUNK_BYTES`] of `elem`-byte elements.
fn check_chunk(chunk: &[u64], rank: usize, field: &str, elem: u64, d: &Doc) -> Result<()> {
    if chunk.len() != rank {
        return Err(d.malformed(
            field,
            format_args!(
                "{} has {} axes, the array has {rank} (valid: one extent per axis)",
                fmt_axes(chunk),
                chunk.len()
            ),
        ));
    }
    if let Some(axis) = chunk.iter().position(|&c| c == 0) {
        return Err(d.malformed(
            field,
            format_args!(
                "{}: axis {axis} is 0 (valid: every chunk extent at least 1)",
                fmt_axes(chunk)
            ),
        ));
    }
    let limit = MAX_CHUNK_BYTES.min(isize::MAX as u64);
    match nonzero_bytes(chunk, elem) {
        None => Err(d.malformed(
            field,
            format_args!(
                "{} with {elem}-byte elements makes chunks of 2^64 bytes or more (valid: at \
                 most {limit} bytes per chunk, MAX_CHUNK_BYTES)",
                fmt_axes(chunk)
            ),
        )),
        Some(n) if n > limit => Err(d.unsupported(
            field,
            format_args!(
                "{} with {elem}-byte elements makes chunks of {n} bytes: not supported \
                 (valid: at most {limit} bytes per chunk, MAX_CHUNK_BYTES)",
                fmt_axes(chunk)
            ),
        )),
        Some(_) => Ok(()),
    }
}

/// Checks the `sharding_indexed` codecs of a codec list applied to chunks of `chunk`
/// (recursively for sharding nested in the inner codecs).
///
/// `outer` is the outermost shard's shape and `product` the shard's bytes times the
/// inner chunks of the levels above ([`MAX_SHARD_PRODUCT`]).
#[allow(clippy::too_many_arguments)]
fn check_codecs(
    codecs: &Value,
    chunk: &[u64],
    outer: &[u64],
    product: u64,
    elem: u64,
    field: &str,
    depth: usize,
    d: &Doc,
) -> Result<()> {
    let list = codecs.as_array().ok_or_else(|| {
        d.malformed(
            field,
            format_args!("is {}, expected an array of codecs", short(codecs)),
        )
    })?;
    if list.len() > MAX_CODECS {
        return Err(d.unsupported(
            field,
            format_args!(
                "has {} codecs: not supported (valid: at most MAX_CODECS = {MAX_CODECS})",
                list.len()
            ),
        ));
    }
    for (i, codec) in list.iter().enumerate() {
        let name = match codec {
            Value::String(s) => s.as_str(),
            Value::Object(o) => o.get("name").and_then(Value::as_str).unwrap_or(""),
            _ => "",
        };
        if name != "sharding_indexed" {
            continue;
        }
        let here = format!("{field}[{i}]");
        if depth >= MAX_SHARDING_DEPTH {
            return Err(d.unsupported(
                &here,
                format_args!(
                    "nests sharding {} deep: not supported (valid: at most \
                     MAX_SHARDING_DEPTH = {MAX_SHARDING_DEPTH})",
                    depth + 1
                ),
            ));
        }
        let cfg = codec.get("configuration");
        let inner_field = format!("{here}.configuration.chunk_shape");
        let inner = extents(cfg.and_then(|c| c.get("chunk_shape")), &inner_field, d)?;
        check_chunk(&inner, chunk.len(), &inner_field, elem, d)?;
        if let Some(axis) = (0..chunk.len()).find(|&a| !chunk[a].is_multiple_of(inner[a])) {
            return Err(d.malformed(
                &inner_field,
                format_args!(
                    "{} does not divide the shard shape {}: axis {axis} is {} of {} (valid: \
                     each inner extent divides the shard's)",
                    fmt_axes(&inner),
                    fmt_axes(chunk),
                    inner[axis],
                    chunk[axis]
                ),
            ));
        }
        // 16 bytes of index per inner chunk.
        let per_shard: Vec<u64> = chunk.iter().zip(&inner).map(|(c, i)| c / i).collect();
        let index = nonzero_bytes(&per_shard, 16).filter(|&n| n <= MAX_CHUNK_BYTES);
        if index.is_none() {
            return Err(d.unsupported(
                &inner_field,
                format_args!(
                    "{} makes {} inner chunks per shard of {}: its index would exceed \
                     MAX_CHUNK_BYTES ({MAX_CHUNK_BYTES} bytes, 16 per inner chunk)",
                    fmt_axes(&inner),
                    fmt_axes(&per_shard),
                    fmt_axes(chunk)
                ),
            ));
        }
        // The inner chunks of this level, counted over the whole (outermost) shard.
        let over_outer: Vec<u64> = outer.iter().zip(&inner).map(|(o, i)| o / i).collect();
        let product = nonzero_bytes(&over_outer, product)
            .filter(|&p| p <= MAX_SHARD_PRODUCT)
            .ok_or_else(|| {
                d.unsupported(
                    &inner_field,
                    format_args!(
                        "{} makes {} inner chunks per shard of {}: the shard's bytes times \
                         its inner chunks exceed MAX_SHARD_PRODUCT = 2^56 (zarrs bounds a \
                         shard's encoded size by that product)",
                        fmt_axes(&inner),
                        fmt_axes(&over_outer),
                        fmt_axes(outer)
                    ),
                )
            })?;
        if let Some(index_codecs) = cfg.and_then(|c| c.get("index_codecs")) {
            // The index is a small fixed shape: only the list's length matters here.
            check_codecs(
                index_codecs,
                &[],
                &[],
                product,
                elem,
                &format!("{here}.configuration.index_codecs"),
                MAX_SHARDING_DEPTH,
                d,
            )?;
        }
        if let Some(inner_codecs) = cfg.and_then(|c| c.get("codecs")) {
            check_codecs(
                inner_codecs,
                &inner,
                outer,
                product,
                elem,
                &format!("{here}.configuration.codecs"),
                depth + 1,
                d,
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
