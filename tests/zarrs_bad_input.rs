//! Bad zarr input of issue 11 (items 1-3): metadata whose shapes overflow, odd files in
//! a store directory, and the kinds and lengths of the errors. Each case is an error
//! that names what was wrong, never a panic (caught or not), a hang or wrong data; run
//! in release mode too (`cargo test --release --features zarr --test zarrs_bad_input`),
//! where an overflow wraps instead of panicking.

#![cfg(feature = "zarr")]

#[path = "common/zarrs.rs"]
mod zarrs_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use devbuf::zarr::{ArraySpec, MAX_CHUNK_BYTES, MAX_RANK, ZarrArray};
use devbuf::zarr::{
    AxisSel, BufferPrototype, ByteBuffer, Dtype, MemoryStore, NDBuffer, Scalar, Slice, Store,
};
use devbuf::{Error, ErrorKind};
use zarrs_common::TempDir;

/// Panics anywhere in the process since the hook was installed (a panic that `zarrs`
/// raised and devbuf caught counts: devbuf must not depend on catching them).
static PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_panics() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            prev(info)
        }));
    });
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn v3(shape: &str, chunks: &str, dtype: &str) -> String {
    format!(
        r#"{{"zarr_format":3,"node_type":"array","shape":{shape},"data_type":"{dtype}",
        "chunk_grid":{{"name":"regular","configuration":{{"chunk_shape":{chunks}}}}},
        "chunk_key_encoding":{{"name":"default","configuration":{{"separator":"/"}}}},
        "fill_value":0,"codecs":[{{"name":"bytes","configuration":{{"endian":"little"}}}}]}}"#
    )
}

fn v2(shape: &str, chunks: &str, dtype: &str) -> String {
    format!(
        r#"{{"zarr_format":2,"shape":{shape},"chunks":{chunks},"dtype":"{dtype}",
        "compressor":null,"fill_value":0,"order":"C","filters":null}}"#
    )
}

fn store_with(key: &str, doc: &str) -> Arc<MemoryStore> {
    let s = Arc::new(MemoryStore::new());
    s.set(key, &ByteBuffer::from(doc.as_bytes().to_vec()))
        .unwrap();
    s
}

/// Opens, and when that works reads chunk 0 and everything: returns the first error.
fn open_and_read(store: Arc<MemoryStore>) -> Result<(), Error> {
    let a = ZarrArray::open((store, ""))?;
    let zero = vec![0; a.metadata().shape.len()];
    a.read_chunks(&[&zero])
        .to(&BufferPrototype::Host)
        .map(|mut v| v.remove(0))?;
    a.read(..).to(&BufferPrototype::Host)?;
    Ok(())
}

#[test]
fn overflowing_chunk_shapes_are_refused_at_open() {
    let _g = count_panics();
    let before = PANICS.load(Ordering::SeqCst);
    let cases = [
        // The issue's examples: the chunk's bytes overflow 64 bits.
        (
            v3(
                "[4,4,4]",
                "[4611686018427387904,4611686018427387904,4]",
                "float32",
            ),
            "zarr.json",
            "chunk_grid.configuration.chunk_shape",
        ),
        (
            v3("[4,4,4]", "[18446744073709551615,2,4]", "float32"),
            "zarr.json",
            "chunk_grid.configuration.chunk_shape",
        ),
        (
            v3("[8]", "[4611686018427387904]", "float64"),
            "zarr.json",
            "chunk_grid.configuration.chunk_shape",
        ),
        // The array's bytes overflow.
        (
            v3(
                "[18446744073709551615,18446744073709551615]",
                "[1,1]",
                "float32",
            ),
            "zarr.json",
            "field shape",
        ),
        (
            v2(
                "[4,4,4]",
                "[4611686018427387904,4611686018427387904,4]",
                "<f4",
            ),
            ".zarray",
            "field chunks",
        ),
        (
            v2("[18446744073709551615,3]", "[1,1]", "<i8"),
            ".zarray",
            "field shape",
        ),
    ];
    for (doc, key, field) in cases {
        let e = open_and_read(store_with(key, &doc)).unwrap_err();
        assert!(matches!(e, Error::Malformed(_)), "{doc}: {e}");
        let m = e.to_string();
        assert!(m.contains(field) && m.contains("2^64"), "{doc}: {m}");
        assert!(!m.contains("panicked"), "{m}");
    }
    assert_eq!(
        PANICS.load(Ordering::SeqCst),
        before,
        "a panic was raised (and caught)"
    );
}

fn empty_or_mismatched_chunks() -> [(&'static str, String); 3] {
    [
        ("zarr.json", v3("[4,4]", "[2,0]", "uint8")),
        ("zarr.json", v3("[4,4]", "[2]", "uint8")),
        (".zarray", v2("[4,4]", "[0,2]", "|u1")),
    ]
}

#[test]
fn chunk_and_rank_bounds_are_documented_in_the_errors() {
    let _g = count_panics();
    // 8 TiB chunks fit 64 bits but not MAX_CHUNK_BYTES.
    let e = open_and_read(store_with(
        "zarr.json",
        &v3("[4,4]", "[1048576,1048576]", "float64"),
    ))
    .unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains(&MAX_CHUNK_BYTES.to_string()), "{e}");
    // Zero extents and wrong ranks: malformed (zarrs refuses some of these itself
    // before devbuf sees them; `malformed_metadata_is_malformed_input` checks the
    // field names once devbuf checks the document first).
    // (The v2 one reports an I/O error until then.)
    for (key, doc) in empty_or_mismatched_chunks() {
        assert!(open_and_read(store_with(key, &doc)).is_err(), "{doc}");
    }
    // 10,000 axes: a short error naming the bound, not a 60 KB message.
    let ones = format!("[{}]", vec!["1"; 10_000].join(","));
    let e = open_and_read(store_with("zarr.json", &v3(&ones, &ones, "uint8"))).unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("10000 axes") && m.contains(&format!("MAX_RANK = {MAX_RANK}")),
        "{m}"
    );
    assert!(m.len() < 300, "{} bytes: {m}", m.len());
    // At the bound: opens and reads.
    let rank = format!("[{}]", vec!["1"; MAX_RANK].join(","));
    open_and_read(store_with("zarr.json", &v3(&rank, &rank, "uint8"))).unwrap();
}

#[test]
fn arrays_made_by_create_are_checked_too() {
    let _g = count_panics();
    let before = PANICS.load(Ordering::SeqCst);
    let spec = ArraySpec::new(&[4, 4], &[1 << 62, 1 << 62], Dtype::FLOAT32);
    let e = ZarrArray::create((Arc::new(MemoryStore::new()), "a"), &spec).unwrap_err();
    assert!(e.to_string().contains("2^64"), "{e}");
    assert_eq!(
        PANICS.load(Ordering::SeqCst),
        before,
        "a panic was raised (and caught)"
    );
}

/// A directory array of 2 x 2 chunks of uint16 (`c/i/j` files), chunk (0, 0) written.
fn dir_array(tag: &str) -> (TempDir, ZarrArray) {
    let d = TempDir::new(tag);
    let a = ZarrArray::create(&d.0, &ArraySpec::new(&[4, 4], &[2, 2], Dtype::UINT16)).unwrap();
    a.write_chunks(
        &[&[0, 0]],
        std::slice::from_ref(&NDBuffer::from_ndarray(
            ndarray::arr2(&[[1u16, 2], [3, 4]]).into_dyn(),
        )),
    )
    .unwrap();
    assert!(d.join("c/0/0").is_file());
    (d, a)
}

fn mkfifo(p: &std::path::Path) {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // Safety: a NUL-terminated path and a mode.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// `f` on another thread; fails the test if it takes more than 20 s (a hang).
fn no_hang<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{what} hung"))
}

#[test]
fn odd_files_in_a_store_are_errors_naming_the_path() {
    let _g = count_panics();
    let (d, _) = dir_array("odd-files");
    let chunk = d.join("c/0/0");
    // A FIFO (opening it blocked forever), a link to /dev/zero, a directory.
    type Make = fn(&std::path::Path);
    let makes: [(&str, Make); 3] = [
        ("a FIFO", |p| mkfifo(p)),
        ("a character device (a symbolic link to /dev/zero)", |p| {
            std::os::unix::fs::symlink("/dev/zero", p).unwrap()
        }),
        ("a directory", |p| std::fs::create_dir(p).unwrap()),
    ];
    for (what, make) in makes {
        let _ = std::fs::remove_file(&chunk);
        let _ = std::fs::remove_dir(&chunk);
        make(&chunk);
        let dir = d.0.clone();
        let (one, all) = no_hang(what, move || {
            let a = ZarrArray::open(&dir).unwrap();
            (
                a.read_chunks(&[&[0, 0]])
                    .to(&BufferPrototype::Host)
                    .map(|mut v| v.remove(0))
                    .map(|_| ()),
                a.read(..).to(&BufferPrototype::Host).map(|_| ()),
            )
        });
        for r in [one, all] {
            let m = r.unwrap_err().to_string();
            assert!(m.contains(&chunk.display().to_string()), "{what}: {m}");
            assert!(m.contains(what) && m.contains("not a regular file"), "{m}");
        }
    }
    // A symbolic link to a regular file is read.
    let _ = std::fs::remove_dir(&chunk);
    let (d2, _) = dir_array("odd-files-target");
    std::os::unix::fs::symlink(d2.join("c/0/0"), &chunk).unwrap();
    let a = ZarrArray::open(&d.0).unwrap();
    let v = a
        .read_chunks(&[&[0, 0]])
        .to(&BufferPrototype::Host)
        .map(|mut v| v.remove(0))
        .unwrap()
        .to_ndarray::<u16>()
        .unwrap();
    assert_eq!(v.as_slice().unwrap(), &[1, 2, 3, 4]);
    // Writing through a link to /dev/zero would lose the data: refused.
    let c1 = d.join("c/1/1");
    std::fs::create_dir_all(c1.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &c1).unwrap();
    let e = a
        .write_chunks(
            &[&[1, 1]],
            std::slice::from_ref(&NDBuffer::from_ndarray(
                ndarray::arr2(&[[5u16, 6], [7, 8]]).into_dyn(),
            )),
        )
        .unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
}

#[test]
fn metadata_that_is_not_a_regular_file_is_an_error_naming_it() {
    let _g = count_panics();
    for (what, make) in [
        (
            "a directory",
            (|p: &std::path::Path| std::fs::create_dir(p).unwrap()) as fn(&std::path::Path),
        ),
        ("a FIFO", |p| mkfifo(p)),
        ("a character device", |p| {
            std::os::unix::fs::symlink("/dev/zero", p).unwrap()
        }),
    ] {
        let d = TempDir::new("odd-meta");
        let meta = d.join("zarr.json");
        make(&meta);
        let dir = d.0.clone();
        let e = no_hang(what, move || ZarrArray::open(&dir).unwrap_err());
        let m = e.to_string();
        assert!(
            m.contains(&meta.display().to_string()) && m.contains(what),
            "{m}"
        );
        assert!(!m.contains("Could not determine file size"), "{m}");
    }
}

#[test]
fn error_messages_do_not_repeat_their_prefix() {
    let a = NDBuffer::from_ndarray(ndarray::arr1(&[1i32, 2, 3]).into_dyn());
    let e = a
        .get(&[AxisSel::Slice(Slice::new(None, None, 0))])
        .unwrap_err();
    let m = e.to_string();
    assert!(matches!(e, Error::InvalidArgument(_)), "{m}");
    assert_eq!(m.matches("invalid argument").count(), 1, "{m}");
    assert!(
        m.starts_with("invalid argument: axis 0: slice step must be positive"),
        "{m}"
    );
}

// The cases below need two changes in `ZarrArray::open` / `open_storage` (array.rs,
// being rewritten): call `validate::preflight` before `Array::open`, and tell a missing
// path from one that is not a directory.

#[test]
fn malformed_metadata_is_malformed_input() {
    let e = open_and_read(store_with("zarr.json", "{not json")).unwrap_err();
    assert!(matches!(e, Error::Malformed(_)), "{e}");
    assert!(e.to_string().contains("zarr.json is not valid JSON"), "{e}");
    for (key, doc) in [
        ("zarr.json", v3("[4]", "[2]", "string")),
        (".zarray", v2("[4]", "[2]", "<U10")),
        (".zarray", v2("[4]", "[2]", "|O")),
    ] {
        let e = open_and_read(store_with(key, &doc)).unwrap_err();
        // Well formed, but a data type devbuf does not read: unsupported, not malformed.
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert!(e.to_string().contains("unsupported data type"), "{e}");
        assert!(!e.to_string().contains("fill value"), "{e}");
    }
    for ((_, doc), want) in empty_or_mismatched_chunks().iter().zip([
        "chunk_grid.configuration.chunk_shape [2, 0]: axis 1 is 0",
        "chunk_grid.configuration.chunk_shape [2] has 1 axes, the array has 2",
        ".zarray field chunks [0, 2]: axis 0 is 0",
    ]) {
        let key = if doc.contains("\"zarr_format\":2") {
            ".zarray"
        } else {
            "zarr.json"
        };
        let e = open_and_read(store_with(key, doc)).unwrap_err();
        assert!(matches!(e, Error::Malformed(_)), "{doc}: {e}");
        assert!(e.to_string().contains(want), "{doc}: {e}");
    }
}

#[test]
fn a_missing_path_says_so() {
    let e = ZarrArray::open("/nonexistent/devbuf/x.zarr").unwrap_err();
    assert!(e.to_string().contains("does not exist"), "{e}");
    assert!(e.to_string().starts_with("not found: "), "{e}");
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let io = std::error::Error::source(&e)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .expect("the io::Error is the source");
    assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
    // A directory without array metadata: not found either.
    let dir = TempDir::new("no-metadata");
    let e = ZarrArray::open(&dir.0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
}

#[test]
fn a_zero_axis_f_order_v2_array_is_refused_before_zarrs_parses_it() {
    let doc = r#"{"zarr_format":2,"shape":[],"chunks":[],"dtype":"<f4","compressor":null,
                  "fill_value":0,"order":"F","filters":null}"#;
    let e = open_and_read(store_with(".zarray", doc)).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("zero axes"), "{e}");
}

/// This process's peak resident memory so far, bytes (`getrusage`).
fn peak_rss() -> u64 {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // Safety: `getrusage` writes a `rusage` into the pointer it is given.
    assert_eq!(
        unsafe { libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr()) },
        0
    );
    // Safety: initialised (zeroed, then written by `getrusage`).
    let kib = unsafe { u.assume_init() }.ru_maxrss;
    u64::try_from(kib).unwrap() * 1024
}

/// Issue 28, part 5: the input class that pushed a CI run out of memory (24 GB resident
/// in `fuzz_zarr_metadata`). A chunk shape far past the array's (the fuzzer's edit: a
/// fixture made 1-d, shape `[6]`, its chunk extent set to 2^31; here 24 GiB chunks of
/// `[2^31, 3]` float32 for a `[10, 7]` array) with chunks that are not stored: reading
/// the array filled a whole chunk of the fill value per worker (4 GiB for that input,
/// 6.3 GB for a read of 280 bytes of `[2^28, 3]` chunks), zarrs-decoded chains twice.
/// Now a chunk that is not stored costs memory of the read, not of the chunk, on every
/// host read path (the engine's chains from a store or a directory, streamed or not,
/// and chains zarrs decodes); a stored one is an error naming its size.
#[test]
fn chunks_far_past_the_array_cost_memory_of_the_read_not_of_the_chunk() {
    const BYTES: &str = r#"{"name":"bytes","configuration":{"endian":"little"}}"#;
    let doc = |shape: &str, chunks: &str, dtype: &str, fill: &str, codecs: &str| {
        format!(
            r#"{{"zarr_format":3,"node_type":"array","shape":{shape},"data_type":"{dtype}",
            "chunk_grid":{{"name":"regular","configuration":{{"chunk_shape":{chunks}}}}},
            "chunk_key_encoding":{{"name":"default","configuration":{{"separator":"/"}}}},
            "fill_value":{fill},"codecs":[{BYTES}{codecs}]}}"#
        )
    };
    let chains = [
        ("bytes", String::new()),
        (
            "gzip",
            r#",{"name":"gzip","configuration":{"level":5}}"#.to_string(),
        ),
        // Not a chain the engine decodes (two crc32c): zarrs decodes it.
        (
            "zarrs",
            r#",{"name":"crc32c"},{"name":"crc32c"}"#.to_string(),
        ),
    ];
    let limit = 512 << 20;
    for (name, codecs) in &chains {
        let docs = [
            (
                doc("[10,7]", "[2147483648,3]", "float32", "1.5", codecs),
                Scalar::from(1.5f32),
            ),
            // The fuzz input (v3_int16_gzip, Rank(1), chunk extent 2^31).
            (
                doc("[6]", "[2147483648]", "int16", "0", codecs),
                Scalar::from(0i16),
            ),
        ];
        for (d, fill) in &docs {
            let dir = TempDir::new("far-chunks");
            std::fs::write(dir.join("zarr.json"), d).unwrap();
            let arrays = [
                (
                    "store",
                    ZarrArray::open((store_with("zarr.json", d), "")).unwrap(),
                ),
                ("directory", ZarrArray::open(&dir.0).unwrap()),
            ];
            for (kind, a) in &arrays {
                let before = peak_rss();
                let all = a.read(..).to(&BufferPrototype::Host).unwrap();
                let shape: Vec<usize> = a.metadata().shape.iter().map(|&n| n as usize).collect();
                assert_eq!(all.shape(), shape.as_slice());
                assert!(all.all_equal(Some(*fill), true).unwrap(), "{name} {kind}");
                let last: Vec<u64> = a.metadata().grid_shape.iter().map(|&g| g - 1).collect();
                let c = a
                    .read_chunks(&[&last])
                    .to(&BufferPrototype::Host)
                    .map(|mut v| v.remove(0))
                    .unwrap();
                assert!(c.all_equal(Some(*fill), true).unwrap(), "{name} {kind}");
                let grew = peak_rss().saturating_sub(before);
                assert!(
                    grew < limit,
                    "{name} chain, {kind}: reading {shape:?} of chunks {:?} raised the peak \
                     resident memory by {grew} bytes",
                    a.metadata().chunk_shape
                );
            }
            // A stored chunk of that shape must decode to its whole size: an error
            // naming the chunk (or the allocation refused), with modest memory too.
            let key = if d.contains("[6]") { "c/0" } else { "c/0/0" };
            std::fs::create_dir_all(dir.join(key).parent().unwrap()).unwrap();
            std::fs::write(dir.join(key), vec![7u8; 100]).unwrap();
            let before = peak_rss();
            let e = ZarrArray::open(&dir.0)
                .unwrap()
                .read(..)
                .to(&BufferPrototype::Host)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(key) || e.contains("cannot allocate"),
                "{name}: {e}"
            );
            assert!(peak_rss().saturating_sub(before) < limit, "{name}: {e}");
        }
    }
}
