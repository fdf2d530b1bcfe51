//! The async API of zarr arrays and object stores (`open_async`, `to_async`, `read_chunks(..).stream(..)`) on a
//! current-thread and a multi-thread tokio runtime: the same values as the blocking
//! calls, object-store requests on the caller's runtime (devbuf's own I/O runtime is
//! never started in this binary), and the blocking forms refused on a current-thread
//! runtime with a pointer to the async ones.
//!
//! Run with `cargo test --features zarr,object_store --test zarr_async`. Without
//! `s3s-fs` the S3 tests print `SKIPPED`.
#![cfg(feature = "object_store")]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use devbuf::zarr::object_store::UrlStore;
use devbuf::zarr::{AsyncStore, BufferPrototype, NDBuffer, Store, ZarrArray};
use futures::StreamExt;

#[path = "common/servers.rs"]
mod servers;

use servers::S3Server;

const HOST: BufferPrototype = BufferPrototype::Host;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/zarr")
        .join(name)
}

fn bytes_of(nd: &NDBuffer) -> Vec<u8> {
    nd.to_buffer().unwrap().to_host().unwrap().to_vec()
}

/// Threads of this process named `name` (Linux: `/proc/self/task/*/comm`).
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|c| c.trim() == name)
                .count()
        })
        .unwrap_or(0)
}

/// Every chunk index of `a`, in C order.
fn all_chunks(a: &ZarrArray) -> Vec<Vec<u64>> {
    let grid = a.metadata().grid_shape.clone();
    let mut out = vec![vec![]];
    for g in grid {
        out = out
            .into_iter()
            .flat_map(|p| {
                (0..g).map(move |i| {
                    let mut q = p.clone();
                    q.push(i);
                    q
                })
            })
            .collect();
    }
    out
}

/// Async reads of a fixture equal the blocking reads, however they are asked for.
async fn disk_reads_match(name: &str) {
    let path = fixture(name);
    let a = ZarrArray::open_async(&path).await.unwrap();
    let blocking = ZarrArray::open(&path).unwrap();
    let all = a.read(..).to_async(&HOST).await.unwrap();
    assert_eq!(
        bytes_of(&all),
        bytes_of(&blocking.read(..).to(&HOST).unwrap())
    );
    let box_: Vec<_> = a.shape().iter().map(|&n| n / 3..n).collect();
    let mut report = devbuf::zarr::ReadReport::default();
    let s = a
        .read(&box_)
        .report(&mut report)
        .to_async(&HOST)
        .await
        .unwrap();
    assert_eq!(
        bytes_of(&s),
        bytes_of(&blocking.read(&box_).to(&HOST).unwrap())
    );
    assert!(report.cpu_chunks > 0);
    let chunks = all_chunks(&a);
    let read = a.read_chunks(&chunks).to_async(&HOST).await.unwrap();
    let mut stream = a.read_chunks(&chunks.clone()).stream(&HOST, 3);
    let mut n = 0;
    while let Some(c) = stream.next().await {
        let (indices, values) = c.unwrap();
        assert_eq!(indices, chunks[n]);
        assert_eq!(bytes_of(&values), bytes_of(&read[n]));
        n += 1;
    }
    assert_eq!(n, chunks.len());
    // Bad input is an error, not a panic or a hang.
    // One range for a two-dimensional array.
    let one_axis: Vec<std::ops::Range<u64>> = vec![std::ops::Range { start: 0, end: 1 }];
    assert!(a.read(&one_axis).to_async(&HOST).await.is_err());
    assert!(
        a.read_chunks(&[&[999, 999]])
            .to_async(&HOST)
            .await
            .map(|mut v| v.remove(0))
            .is_err()
    );
    let mut bad = a.read_chunks(&[vec![999, 0]]).stream(&HOST, 1);
    assert!(bad.next().await.unwrap().is_err());
    assert!(bad.next().await.is_none());
}

#[tokio::test(flavor = "current_thread")]
async fn disk_reads_on_a_current_thread_runtime() {
    for name in [
        "v3_float32.zarr",
        "v2_int16_zstd.zarr",
        "v3_float32_sharded.zarr",
    ] {
        disk_reads_match(name).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_reads_on_a_multi_thread_runtime() {
    for name in [
        "v3_float32.zarr",
        "v2_int16_zstd.zarr",
        "v3_float32_sharded.zarr",
    ] {
        disk_reads_match(name).await;
    }
}

/// Uploads the fixture directory `name` to `store` under `to` with the async calls.
async fn upload(store: &UrlStore, name: &str, to: &str) {
    let root = fixture(name);
    let mut dirs = vec![root.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
                continue;
            }
            let rel = p
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let bytes = bytes::Bytes::from(std::fs::read(&p).unwrap());
            store
                .set_async(&format!("{to}/{rel}"), bytes)
                .await
                .unwrap();
        }
    }
}

/// Upload, open, read, write and read back over S3 with the async calls only.
async fn s3_roundtrip(server: &S3Server, tag: &str) {
    let mut opts = server.options();
    opts.concurrency = 4;
    let root = UrlStore::open(&server.url(""), &opts).unwrap();
    for name in [
        "v3_float32.zarr",
        "v2_int16_zstd.zarr",
        "v3_float32_sharded.zarr",
    ] {
        let to = format!("{tag}/{name}");
        upload(&root, name, &to).await;
        let a = ZarrArray::open_async(devbuf::zarr::Location::Url(
            server.url(&to).to_string(),
            opts.clone(),
        ))
        .await
        .unwrap();
        let local = ZarrArray::open(fixture(name)).unwrap();
        let got = a.read(..).to_async(&HOST).await.unwrap();
        assert_eq!(
            bytes_of(&got),
            bytes_of(&local.read(..).to(&HOST).unwrap()),
            "{name}"
        );
        let chunks = all_chunks(&a);
        let mut stream = a.read_chunks(&chunks.clone()).stream(&HOST, 2);
        let mut n = 0;
        while let Some(c) = stream.next().await {
            let (indices, values) = c.unwrap();
            let want = local
                .read_chunks(&[&indices])
                .to(&HOST)
                .map(|mut v| v.remove(0))
                .unwrap();
            assert_eq!(bytes_of(&values), bytes_of(&want));
            n += 1;
        }
        assert_eq!(n, chunks.len());
        // A write through the engine's encoders, PUT on this runtime; read back.
        let zeros = devbuf::zarr::NDBuffer::create(
            &HOST,
            &a.shape().iter().map(|&n| n as usize).collect::<Vec<_>>(),
            a.dtype(),
            devbuf::zarr::Order::C,
            None,
        )
        .unwrap();
        a.write_subset_async(&vec![0; a.shape().len()], zeros.clone())
            .await
            .unwrap();
        let back = a.read(..).to_async(&HOST).await.unwrap();
        assert_eq!(bytes_of(&back), bytes_of(&zeros), "{name}");
    }
    let keys = root.list_prefix_async(&format!("{tag}/")).await.unwrap();
    assert!(keys.iter().any(|k| k.ends_with("zarr.json")));
    // The blocking forms on this thread: refused on a current-thread runtime (they
    // would block it), naming the async form; nothing was started for them.
    if tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::CurrentThread
    {
        let e = root.list().unwrap_err().to_string();
        assert!(e.contains("async form"), "{e}");
    }
    assert_eq!(
        threads_named("devbuf-io"),
        0,
        "devbuf's own runtime started"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn s3_on_a_current_thread_runtime() {
    let Some(server) = S3Server::start("async-current") else {
        return;
    };
    s3_roundtrip(&server, "current").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_on_a_multi_thread_runtime() {
    let Some(server) = S3Server::start("async-multi") else {
        return;
    };
    s3_roundtrip(&server, "multi").await;
}

#[test]
fn async_calls_run_under_other_executors_too() {
    // No tokio runtime at all: object-store requests fall back to devbuf's runtime.
    let path = fixture("v3_float32.zarr");
    let a = futures::executor::block_on(ZarrArray::open_async(&path)).unwrap();
    let x = futures::executor::block_on(a.read(..).to_async(&HOST)).unwrap();
    assert_eq!(bytes_of(&x), bytes_of(&a.read(..).to(&HOST).unwrap()));
    let store: Arc<dyn Store> = Arc::new(devbuf::zarr::MemoryStore::new());
    assert!(futures::executor::block_on(ZarrArray::open_async((store, "/"))).is_err());
}
