//! zarr stores in object storage (`devbuf::zarr::object_store`, `ZarrArray::open` of a URL)
//! against real servers on 127.0.0.1: an S3-compatible server (`s3s-fs`) and a plain
//! HTTP server with byte ranges and faults (`scripts/http_store_server.py`).
//!
//! Run with `cargo test --features zarr,object_store,flight`. Without `s3s-fs` the S3 tests
//! print `SKIPPED` (CI installs it and sets `DEVBUF_REQUIRE_SERVERS=1`, which turns a
//! missing server into a failure).
#![cfg(feature = "object_store")]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use devbuf::zarr::object_store::{ObjectStoreOptions, UrlStore};
use devbuf::zarr::{ArraySpec, Compressor, ZarrArray};
use devbuf::zarr::{BufferPrototype, ByteBuffer, ByteRequest, Dtype, NDBuffer, Scalar, Store};
use devbuf::{Error, ErrorKind};
use rand::Rng;

#[path = "common/random.rs"]
mod random;
#[path = "common/servers.rs"]
mod servers;
#[path = "common/zarrs.rs"]
mod zarrs_common;

use servers::{HttpServer, S3Server, SECRET_KEY};

const HOST: BufferPrototype = BufferPrototype::Host;

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/zarr")
}

/// The fixture directories of the manifest.
fn fixtures() -> Vec<String> {
    let text = std::fs::read_to_string(fixtures_dir().join("manifest.json")).unwrap();
    let m: serde_json::Value = serde_json::from_str(&text).unwrap();
    m["fixtures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect()
}

fn bytes_of(nd: &NDBuffer) -> Vec<u8> {
    nd.to_buffer().unwrap().to_host().unwrap().to_vec()
}

/// A sentinel request: its line in the server's output comes after every earlier
/// request's (see `S3Server::gets`).
fn sentinel(store: &UrlStore) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let key = format!("sentinel-{}", N.fetch_add(1, Ordering::SeqCst));
    assert!(store.get(&key, &HOST, None).unwrap().is_none());
    key
}

#[test]
fn fixtures_upload_and_read_bit_exactly_over_s3() {
    let Some(server) = S3Server::start("fixtures") else {
        return;
    };
    let opts = server.options();
    let store = UrlStore::open(&server.url("fixtures"), &opts).unwrap();
    let names = fixtures();
    assert_eq!(names.len(), 71, "fixture count changed: update this test");
    for name in &names {
        for (rel, path) in zarrs_common::files_under(&fixtures_dir().join(name)) {
            let v = std::fs::read(path).unwrap();
            store
                .set(&format!("{name}/{rel}"), &ByteBuffer::from(v))
                .unwrap();
        }
    }
    let mut rng = random::rng("fixtures_over_s3");
    for name in &names {
        let remote = ZarrArray::open(devbuf::zarr::Location::Url(
            server.url(&format!("fixtures/{name}")).to_string(),
            opts.clone(),
        ))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let local = ZarrArray::open(fixtures_dir().join(name)).unwrap();
        assert_eq!(remote.metadata().shape, local.metadata().shape, "{name}");
        assert_eq!(remote.dtype(), local.dtype(), "{name}");
        let (r, l) = (
            remote.read(..).to(&HOST).unwrap(),
            local.read(..).to(&HOST).unwrap(),
        );
        assert_eq!(bytes_of(&r), bytes_of(&l), "{name}: read_all");
        // A random box, read both ways.
        let shape = &local.metadata().shape;
        let start: Vec<u64> = shape.iter().map(|&n| rng.random_range(0..n)).collect();
        let ext: Vec<u64> = shape
            .iter()
            .zip(&start)
            .map(|(&n, &s)| rng.random_range(1..=n - s))
            .collect();
        let ranges: Vec<std::ops::Range<u64>> =
            start.iter().zip(&ext).map(|(&s, &e)| s..s + e).collect();
        let (r, l) = (
            remote.read(&ranges).to(&HOST).unwrap(),
            local.read(&ranges).to(&HOST).unwrap(),
        );
        assert_eq!(
            bytes_of(&r),
            bytes_of(&l),
            "{name}: box {start:?} + {ext:?}"
        );
    }
}

#[test]
fn url_store_keys_ranges_listing_and_deletes() {
    let Some(server) = S3Server::start("basics") else {
        return;
    };
    let store = UrlStore::open(&server.url("p/q"), &server.options()).unwrap();
    let mut rng = random::rng("url_store_basics");
    let v = random::random_bytes(&mut rng, 100_000);
    store.set("a/b/c", &ByteBuffer::from(v.clone())).unwrap();
    store.set("a/d", &ByteBuffer::from(&b"xy"[..])).unwrap();
    store.set("e", &ByteBuffer::from(&b""[..])).unwrap();
    let get = |k: &str, r: Option<ByteRequest>| {
        store
            .get(k, &HOST, r)
            .unwrap()
            .map(|b| b.to_host().unwrap().to_vec())
    };
    assert_eq!(get("a/b/c", None).unwrap(), v);
    assert_eq!(
        get(
            "a/b/c",
            Some(ByteRequest::Range {
                start: 10,
                end: 5000
            })
        )
        .unwrap(),
        &v[10..5000]
    );
    assert_eq!(
        get("a/b/c", Some(ByteRequest::Offset(99_990))).unwrap(),
        &v[99_990..]
    );
    assert_eq!(
        get("a/b/c", Some(ByteRequest::Suffix(7))).unwrap(),
        &v[v.len() - 7..]
    );
    assert_eq!(get("e", None).unwrap(), b"");
    assert!(get("nope", None).is_none());
    let past = store.get(
        "a/b/c",
        &HOST,
        Some(ByteRequest::Range {
            start: 99_000,
            end: 100_001,
        }),
    );
    assert!(past.is_err(), "a range past the end is an error: {past:?}");
    assert_eq!(store.getsize("a/b/c").unwrap(), Some(100_000));
    assert_eq!(store.getsize("nope").unwrap(), None);
    assert_eq!(store.list().unwrap(), vec!["a/b/c", "a/d", "e"]);
    assert_eq!(store.list_prefix("a/").unwrap(), vec!["a/b/c", "a/d"]);
    assert_eq!(store.list_dir("").unwrap(), vec!["a", "e"]);
    assert_eq!(store.list_dir("a").unwrap(), vec!["b", "d"]);
    store.delete("a/d").unwrap();
    store.delete("a/d").unwrap(); // deleting a missing key is not an error
    assert_eq!(store.list().unwrap(), vec!["a/b/c", "e"]);
    // The prefix isolates keys.
    let other = UrlStore::open(&server.url("p"), &server.options()).unwrap();
    assert_eq!(other.list().unwrap(), vec!["q/a/b/c", "q/e"]);
    assert_eq!(store.url(), format!("s3://{}/p/q", servers::BUCKET));
}

/// A random u16 array of `shape` written through `a`; returns its bytes (C order).
fn fill_random(a: &ZarrArray, shape: &[u64], seed: &str) -> Vec<u8> {
    let mut rng = random::rng(seed);
    let n: u64 = shape.iter().product();
    let vals: Vec<u16> = (0..n).map(|_| rng.random()).collect();
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let nd = NDBuffer::from_ndarray(ndarray::ArrayD::from_shape_vec(dims, vals).unwrap());
    a.write_subset(&vec![0; shape.len()], &nd).unwrap();
    bytes_of(&nd)
}

#[test]
fn sharded_reads_fetch_whole_shards_or_each_index_once_and_coalesced_ranges() {
    let Some(server) = S3Server::start("sharded") else {
        return;
    };
    let opts = server.options();
    let probe = UrlStore::open(&server.url(""), &opts).unwrap();
    let shape = [64u64, 96];
    let spec = ArraySpec::new(&shape, &[32, 48], Dtype::UINT16)
        .with_subchunks(&[8, 12])
        .with_compressor(Compressor::Zstd { level: 1 });
    let a = ZarrArray::create(
        devbuf::zarr::Location::Url(server.url("sh").to_string(), opts.clone()),
        &spec,
    )
    .unwrap();
    let all = fill_random(&a, &shape, "sharded_reads");
    let before = server.gets(&sentinel(&probe));

    let r = ZarrArray::open(devbuf::zarr::Location::Url(
        server.url("sh").to_string(),
        opts.clone(),
    ))
    .unwrap();
    assert_eq!(bytes_of(&r.read(..).to(&HOST).unwrap()), all);
    let after = server.gets(&sentinel(&probe));
    let shard_keys: Vec<String> = (0..2)
        .flat_map(|i| (0..2).map(move |j| format!("sh/c/{i}/{j}")))
        .collect();
    for k in &shard_keys {
        let n = after.get(k).copied().unwrap_or(0) - before.get(k).copied().unwrap_or(0);
        assert_eq!(
            n, 1,
            "{k}: every inner chunk needed: one GET of the whole shard, got {n}"
        );
    }

    // One inner chunk of shard [1, 0]: its index and one range; no other shard read.
    // (A box over parts of every shard reads each index once and coalesced ranges.)
    let part = r.read(&[40..48, 12..24]).to(&HOST).unwrap();
    assert_eq!(
        bytes_of(&part),
        zarrs_common::sub_box(&all, &shape, 2, &[40, 12], &[8, 12])
    );
    let last = server.gets(&sentinel(&probe));
    for k in &shard_keys {
        let n = last.get(k).copied().unwrap_or(0) - after.get(k).copied().unwrap_or(0);
        let want = if k == "sh/c/1/0" { 2 } else { 0 };
        assert_eq!(n, want, "{k}: {n} GETs for one inner chunk of sh/c/1/0");
    }

    // A box over part of every shard: each index once, then one coalesced range each.
    let part = r.read(&[20..44, 30..70]).to(&HOST).unwrap();
    assert_eq!(
        bytes_of(&part),
        zarrs_common::sub_box(&all, &shape, 2, &[20, 30], &[24, 40])
    );
    let boxed = server.gets(&sentinel(&probe));
    for k in &shard_keys {
        let n = boxed.get(k).copied().unwrap_or(0) - last.get(k).copied().unwrap_or(0);
        assert_eq!(
            n, 2,
            "{k}: {n} GETs for part of the shard (index + one range)"
        );
    }
}

#[test]
fn each_chunk_is_fetched_once_and_missing_chunks_read_as_fill() {
    let Some(server) = S3Server::start("chunks") else {
        return;
    };
    let mut opts = server.options();
    opts.concurrency = 3;
    let probe = UrlStore::open(&server.url(""), &opts).unwrap();
    let shape = [40u64, 30];
    let spec = ArraySpec::new(&shape, &[8, 10], Dtype::UINT16)
        .with_fill_value(Scalar::from(7u16))
        .with_compressor(Compressor::Gzip { level: 1 });
    let a = ZarrArray::create(
        devbuf::zarr::Location::Url(server.url("ch").to_string(), opts.clone()),
        &spec,
    )
    .unwrap();
    let mut all = fill_random(&a, &shape, "chunks_once");
    // Chunk [2, 1] goes missing: it reads as the fill value.
    probe.delete("ch/c/2/1").unwrap();
    let fill: Vec<u8> = std::iter::repeat_n(7u16.to_ne_bytes(), 80)
        .flatten()
        .collect();
    zarrs_common::put_box(&mut all, &shape, 2, &[16, 10], &[8, 10], &fill);
    let before = probe_gets(&server, &probe);
    let got = ZarrArray::open(devbuf::zarr::Location::Url(
        server.url("ch").to_string(),
        opts.clone(),
    ))
    .unwrap()
    .read(..)
    .to(&HOST)
    .unwrap();
    assert_eq!(bytes_of(&got), all);
    let after = probe_gets(&server, &probe);
    for i in 0..5 {
        for j in 0..3 {
            let k = format!("ch/c/{i}/{j}");
            let n = after.get(&k).copied().unwrap_or(0) - before.get(&k).copied().unwrap_or(0);
            assert_eq!(n, 1, "{k} fetched {n} times");
        }
    }
}

#[test]
fn reads_larger_than_the_read_ahead_stream_through_it() {
    let Some(server) = S3Server::start("stream") else {
        return;
    };
    let mut opts = server.options();
    opts.concurrency = 4;
    opts.read_ahead_bytes = 1 << 20; // the least allowed: 8 of these chunks
    let shape = [2048u64, 1024];
    for (name, spec) in [
        ("plain", ArraySpec::new(&shape, &[64, 1024], Dtype::UINT16)),
        (
            "sharded",
            ArraySpec::new(&shape, &[256, 1024], Dtype::UINT16)
                .with_subchunks(&[64, 256])
                .with_compressor(Compressor::Zstd { level: 1 }),
        ),
    ] {
        let a = ZarrArray::create(
            devbuf::zarr::Location::Url(server.url(name).to_string(), opts.clone()),
            &spec,
        )
        .unwrap();
        let all = fill_random(&a, &shape, name);
        let r = ZarrArray::open(devbuf::zarr::Location::Url(
            server.url(name).to_string(),
            opts.clone(),
        ))
        .unwrap();
        assert_eq!(bytes_of(&r.read(..).to(&HOST).unwrap()), all, "{name}");
        let part = r.read(&[100..1900, 300..1000]).to(&HOST).unwrap();
        assert_eq!(
            bytes_of(&part),
            zarrs_common::sub_box(&all, &shape, 2, &[100, 300], &[1800, 700]),
            "{name}: box"
        );
    }
}

fn probe_gets(server: &S3Server, probe: &UrlStore) -> std::collections::BTreeMap<String, usize> {
    server.gets(&sentinel(probe))
}

#[test]
fn wrong_credentials_are_refused_and_never_shown() {
    let Some(server) = S3Server::start("creds") else {
        return;
    };
    let spec = ArraySpec::new(&[4], &[2], Dtype::INT32);
    ZarrArray::create(
        devbuf::zarr::Location::Url(server.url("c").to_string(), server.options()),
        &spec,
    )
    .unwrap();
    let wrong_secret = "wrong-secret-value-1234";
    let mut bad = server.options();
    bad.config.retain(|(k, _)| k != "aws_secret_access_key");
    bad.config
        .push(("aws_secret_access_key".into(), wrong_secret.into()));
    bad.max_retries = 0;
    assert!(!format!("{bad:?}").contains(wrong_secret));
    let e = ZarrArray::open(devbuf::zarr::Location::Url(
        server.url("c").to_string(),
        bad.clone(),
    ))
    .unwrap_err();
    let msg = e.to_string();
    // HTTP 403: permission denied, with the client's error as source.
    assert!(matches!(e, Error::PermissionDenied { .. }), "{e:?}");
    assert_eq!(e.kind(), ErrorKind::PermissionDenied);
    let source = std::error::Error::source(&e).expect("the client's error");
    let debug = format!("{e:?} {source}");
    assert!(
        !debug.contains(wrong_secret) && !debug.contains(SECRET_KEY),
        "{debug}"
    );
    assert!(msg.contains("s3://bkt/c"), "names the URL: {msg}");
    assert!(msg.contains("refused"), "says it was refused: {msg}");
    assert!(
        !msg.contains(wrong_secret) && !msg.contains(SECRET_KEY),
        "{msg}"
    );
    assert!(!msg.contains(servers::ACCESS_KEY), "{msg}");
    // An unknown configuration key is named.
    let e = UrlStore::open(&server.url("c"), &{
        let mut o = ObjectStoreOptions::default();
        o.config.push(("aws_no_such_key".into(), "1".into()));
        o
    })
    .unwrap_err();
    assert!(e.to_string().contains("aws_no_such_key"), "{e}");
}

/// An `object_store` client that stops the server when its `n`th GET starts.
#[derive(Debug)]
struct StopServerAt {
    inner: Arc<dyn object_store::ObjectStore>,
    n: usize,
    seen: AtomicUsize,
    server: Arc<Mutex<std::process::Child>>,
}

impl std::fmt::Display for StopServerAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StopServerAt({})", self.inner)
    }
}

#[async_trait::async_trait]
impl object_store::ObjectStore for StopServerAt {
    async fn put_opts(
        &self,
        location: &object_store::path::Path,
        payload: object_store::PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &object_store::path::Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &object_store::path::Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        if self.seen.fetch_add(1, Ordering::SeqCst) + 1 == self.n {
            servers::kill(&self.server);
        }
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<
            'static,
            object_store::Result<object_store::path::Path>,
        >,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> object_store::Result<object_store::ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &object_store::path::Path,
        to: &object_store::path::Path,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

#[test]
fn a_server_that_dies_mid_read_is_an_error_not_a_partial_result() {
    let Some(server) = S3Server::start("killed") else {
        return;
    };
    let mut opts = server.options();
    opts.concurrency = 2;
    opts.max_retries = 1;
    opts.request_timeout = Duration::from_secs(5);
    let shape = [64u64, 64];
    let spec = ArraySpec::new(&shape, &[8, 8], Dtype::UINT16)
        .with_compressor(Compressor::Zstd { level: 1 });
    let a = ZarrArray::create(
        devbuf::zarr::Location::Url(server.url("k").to_string(), opts.clone()),
        &spec,
    )
    .unwrap();
    fill_random(&a, &shape, "killed");
    let real = UrlStore::open(&server.url("k"), &opts).unwrap();
    // 2 GETs open the array (metadata), then 64 chunks: stop the server at the 10th.
    let stopping = StopServerAt {
        inner: real.object_store().clone(),
        n: 10,
        seen: AtomicUsize::new(0),
        server: server.killer(),
    };
    let store =
        UrlStore::from_object_store(Arc::new(stopping), real.prefix(), real.url(), &opts).unwrap();
    let a = ZarrArray::open(Arc::new(store)).unwrap();
    let e = a.read(..).to(&HOST).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    assert!(
        msg.contains("s3://bkt/k") && msg.contains("c/"),
        "names key and URL: {msg}"
    );
}

#[test]
fn an_http_server_serves_stores_read_only() {
    let server = HttpServer::start(&fixtures_dir(), &[]);
    for name in [
        "v3_float32_sharded.zarr",
        "v2_float32_blosc.zarr",
        "v3_uint8_sharded.zarr",
    ] {
        let remote = ZarrArray::open(devbuf::zarr::Location::Url(
            server.url(name).to_string(),
            ObjectStoreOptions::default(),
        ))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let local = ZarrArray::open(fixtures_dir().join(name)).unwrap();
        assert_eq!(
            bytes_of(&remote.read(..).to(&HOST).unwrap()),
            bytes_of(&local.read(..).to(&HOST).unwrap()),
            "{name}"
        );
        let origin = vec![0u64; local.metadata().shape.len()];
        let value = local
            .read_chunks(&[&origin])
            .to(&HOST)
            .map(|mut v| v.remove(0))
            .unwrap();
        let e = remote
            .write_chunks(&[&origin], std::slice::from_ref(&value))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("read-only") || e.contains("read only"),
            "{name}: {e}"
        );
    }
    let e = ZarrArray::create(
        devbuf::zarr::Location::Url(
            server.url("new.zarr").to_string(),
            ObjectStoreOptions::default(),
        ),
        &ArraySpec::new(&[4], &[2], Dtype::INT32),
    )
    .unwrap_err();
    assert!(matches!(e, Error::ReadOnly(_)), "{e:?}");
}

#[test]
fn http_failures_retry_when_transient_and_name_the_key_otherwise() {
    let server = HttpServer::start(
        &fixtures_dir(),
        &[
            "/v2_float32_zstd.zarr/0.1.0=status:503:2",
            "/v2_int16_zstd.zarr/1.0.0=status:500",
            "/v2_float32_gzip.zarr/1.2.0=truncate",
            "/v2_int16_gzip.zarr/0.2.0=stall",
            "/v2_float32_none.zarr/1.1.0=status:403",
        ],
    );
    let opts = options(|o| o.max_retries = 3);
    // Two 503s, then the chunk: the retries hide them.
    let a = ZarrArray::open(devbuf::zarr::Location::Url(
        server.url("v2_float32_zstd.zarr").to_string(),
        opts.clone(),
    ))
    .unwrap();
    let local = ZarrArray::open(fixtures_dir().join("v2_float32_zstd.zarr")).unwrap();
    assert_eq!(
        bytes_of(&a.read(..).to(&HOST).unwrap()),
        bytes_of(&local.read(..).to(&HOST).unwrap())
    );
    assert_eq!(server.stats()["/v2_float32_zstd.zarr/0.1.0"], 3);

    let check = |name: &str, key: &str, opts: &ObjectStoreOptions, what: &[&str]| {
        let a = ZarrArray::open(devbuf::zarr::Location::Url(
            server.url(name).to_string(),
            opts.clone(),
        ))
        .unwrap();
        let e = a.read(..).to(&HOST).unwrap_err();
        let msg = e.to_string();
        let want = if what.contains(&"403") {
            ErrorKind::PermissionDenied
        } else if what.contains(&"timed out") {
            ErrorKind::Timeout
        } else {
            ErrorKind::Io
        };
        assert_eq!(e.kind(), want, "{name}: {e:?}");
        if !what.is_empty() {
            assert!(
                std::error::Error::source(&e).is_some(),
                "{name}: the client's error is kept: {e:?}"
            );
        }
        assert!(
            msg.contains(key) && msg.contains(&server.url(name)),
            "{name}: {msg}"
        );
        for w in what {
            assert!(msg.to_lowercase().contains(w), "{name}: {w:?} in {msg}");
        }
    };
    // A 500 that stays: an error after 1 + 2 attempts.
    check(
        "v2_int16_zstd.zarr",
        "1.0.0",
        &options(|o| o.max_retries = 2),
        &["500"],
    );
    assert_eq!(server.stats()["/v2_int16_zstd.zarr/1.0.0"], 3);
    check(
        "v2_float32_gzip.zarr",
        "1.2.0",
        &options(|o| o.max_retries = 0),
        &[],
    );
    check("v2_float32_none.zarr", "1.1.0", &opts, &["refused", "403"]);
    let t = std::time::Instant::now();
    check(
        "v2_int16_gzip.zarr",
        "0.2.0",
        &options(|o| {
            o.max_retries = 0;
            o.request_timeout = Duration::from_secs(1);
        }),
        &["timed out"],
    );
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "the timeout bounds the read"
    );
    // No array at the URL (every GET answers 404): not found.
    let e = ZarrArray::open(devbuf::zarr::Location::Url(
        server.url("no_such.zarr").to_string(),
        opts.clone(),
    ))
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e:?}");
    assert!(e.to_string().contains("no_such.zarr"), "{e}");
}

/// The child side of `credentials_and_endpoint_come_from_the_environment`: opens the
/// array with default options only (run by that test with the `AWS_*` variables set).
#[test]
#[ignore = "run by credentials_and_endpoint_come_from_the_environment in a child process"]
fn env_child() {
    let url = std::env::var("DEVBUF_TEST_URL").expect("DEVBUF_TEST_URL");
    let a = ZarrArray::open(devbuf::zarr::Location::Url(
        url.to_string(),
        ObjectStoreOptions::default(),
    ))
    .unwrap();
    let v = a.read(..).to(&HOST).unwrap().to_ndarray::<i32>().unwrap();
    assert_eq!(v.as_slice().unwrap(), &[0, 7, 8, 0]);
    println!("env_child read {:?}", v.as_slice().unwrap());
}

#[test]
fn credentials_and_endpoint_come_from_the_environment() {
    let Some(server) = S3Server::start("env") else {
        return;
    };
    let a = ZarrArray::create(
        devbuf::zarr::Location::Url(server.url("e").to_string(), server.options()),
        &ArraySpec::new(&[4], &[2], Dtype::INT32),
    )
    .unwrap();
    a.write_subset(&[1], &NDBuffer::from_ndarray(ndarray::arr1(&[7i32, 8])))
        .unwrap();
    let run = |secret: &str| {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "env_child", "--nocapture"])
            .env("DEVBUF_TEST_URL", server.url("e"))
            .env("AWS_ENDPOINT_URL", server.endpoint())
            .env("AWS_ALLOW_HTTP", "true")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", servers::ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", secret)
            .output()
            .unwrap()
    };
    let ok = run(SECRET_KEY);
    let out = String::from_utf8_lossy(&ok.stdout);
    assert!(
        ok.status.success() && out.contains("env_child read [0, 7, 8, 0]"),
        "{out}"
    );
    // A wrong secret in the environment is refused, and never printed.
    let bad = run("wrong-env-secret-5678");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&bad.stdout),
        String::from_utf8_lossy(&bad.stderr)
    );
    assert!(!bad.status.success(), "{text}");
    assert!(text.contains("refused"), "{text}");
    assert!(!text.contains("wrong-env-secret-5678"), "{text}");
}

#[test]
fn bad_urls_and_options_are_errors() {
    for url in ["nonsense", "ftp://host/x", "s3://"] {
        let e = UrlStore::open(url, &ObjectStoreOptions::default());
        assert!(e.is_err(), "{url}: {e:?}");
    }
    let e = UrlStore::open("file:///tmp", &options(|o| o.concurrency = 0)).unwrap_err();
    assert!(e.to_string().contains("concurrency"), "{e}");
}

/// Default options changed by `f`.
fn options(f: impl FnOnce(&mut ObjectStoreOptions)) -> ObjectStoreOptions {
    let mut o = ObjectStoreOptions::default();
    f(&mut o);
    o
}
