//! A read's progress and cancellation on the host: reports through a callback or a
//! watch channel never go down and end at exactly the read's totals (chunks of the
//! selection, their decoded bytes); a read cancelled from its own progress callback
//! ends with a `Cancelled` error and no result; a panicking callback does not lose the
//! read.
#![cfg(feature = "zarr")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use devbuf::ErrorKind;
use devbuf::zarr::{
    ArraySpec, Cancel, Progress, ProgressSink, ReadOptions, WriteOptions, ZarrArray,
};
use devbuf::zarr::{BufferPrototype, Compressor, Dtype, NDBuffer};

#[path = "common/zarrs.rs"]
mod zarrs_common;
use zarrs_common::TempDir;

const HOST: BufferPrototype = BufferPrototype::Host;
/// 64 x 48 int32 in 16 x 16 chunks: 4 x 3 chunks of 1 KiB.
const CHUNK_BYTES: u64 = 16 * 16 * 4;

/// The array, with every chunk stored unless `partial` (then only the first chunk row).
fn make(dir: &TempDir, name: &str, partial: bool) -> ZarrArray {
    let a = ZarrArray::create(
        dir.join(name),
        &ArraySpec::new(&[64, 48], &[16, 16], Dtype::INT32)
            .with_compressor(Compressor::Zstd { level: 1 }),
    )
    .unwrap();
    let rows = if partial { 16 } else { 64 };
    let v: Vec<i32> = (0..rows * 48).collect();
    let v = ndarray::Array2::from_shape_vec((rows as usize, 48), v).unwrap();
    a.write_subset(&[0, 0], &NDBuffer::from_ndarray(v)).unwrap();
    a
}

/// A sink that records every report, after each chunk.
fn recorder() -> (ProgressSink, Arc<Mutex<Vec<Progress>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let sink = ProgressSink::new(move |p| log.lock().unwrap().push(*p)).every(Duration::ZERO);
    (sink, seen)
}

fn with(a: &mut ZarrArray, f: impl FnOnce(&mut ReadOptions)) {
    let mut o = ReadOptions {
        threads: Some(3),
        ..ReadOptions::default()
    };
    f(&mut o);
    a.set_read_options(o).unwrap();
}

/// Reports never go down, the first has nothing done, the last is exactly the totals.
fn check_series(seen: &[Progress], chunks: u64) {
    assert!(seen.len() >= 2, "{seen:?}");
    let (first, last) = (seen[0], *seen.last().unwrap());
    assert_eq!((first.chunks_done, first.bytes_done), (0, 0));
    for w in seen.windows(2) {
        assert!(w[1].chunks_done >= w[0].chunks_done, "{seen:?}");
        assert!(w[1].bytes_done >= w[0].bytes_done, "{seen:?}");
        assert!(w[1].elapsed >= w[0].elapsed, "{seen:?}");
    }
    for p in seen {
        assert_eq!(
            (p.chunks_total, p.bytes_total),
            (chunks, chunks * CHUNK_BYTES)
        );
    }
    assert_eq!(
        (last.chunks_done, last.bytes_done),
        (chunks, chunks * CHUNK_BYTES)
    );
    assert!(last.is_done() && last.fraction() == 1.0);
    // Exactly one report has everything done: the last.
    assert_eq!(seen.iter().filter(|p| p.is_done()).count(), 1, "{seen:?}");
}

#[test]
fn a_callback_sees_progress_up_to_the_totals() {
    let dir = TempDir::new("progress_callback");
    let mut a = make(&dir, "a.zarr", false);
    let (sink, seen) = recorder();
    with(&mut a, |o| o.progress = Some(sink));
    let mut report = devbuf::zarr::ReadReport::default();
    let _ = a.read(..).report(&mut report).to(&HOST).unwrap();
    check_series(&seen.lock().unwrap(), 12);
    assert_eq!(report.decoded_bytes, 12 * CHUNK_BYTES);

    // A subset: rows 10..40 and columns 5..40 touch 3 x 3 chunks.
    seen.lock().unwrap().clear();
    let v = a.read(&[10..40, 5..40]).to(&HOST).unwrap();
    assert_eq!(v.shape(), &[30, 35]);
    check_series(&seen.lock().unwrap(), 9);

    // Into the caller's memory.
    seen.lock().unwrap().clear();
    let mut out = vec![0u8; 64 * 48 * 4];
    a.read(..).into(&mut out).unwrap();
    check_series(&seen.lock().unwrap(), 12);
}

#[test]
fn chunks_not_stored_count_as_done() {
    let dir = TempDir::new("progress_missing");
    let mut a = make(&dir, "a.zarr", true);
    let (sink, seen) = recorder();
    with(&mut a, |o| o.progress = Some(sink));
    let mut report = devbuf::zarr::ReadReport::default();
    let _ = a.read(..).report(&mut report).to(&HOST).unwrap();
    assert_eq!(report.missing_chunks, 9);
    check_series(&seen.lock().unwrap(), 12);
}

#[test]
fn a_watch_channel_ends_at_the_totals() {
    let dir = TempDir::new("progress_watch");
    let mut a = make(&dir, "a.zarr", false);
    let (tx, mut rx) = tokio::sync::watch::channel(Progress::default());
    with(&mut a, |o| o.progress = Some(tx.into()));
    a.read(..).to(&HOST).unwrap();
    assert!(rx.has_changed().unwrap());
    let p = *rx.borrow_and_update();
    assert_eq!((p.chunks_done, p.chunks_total), (12, 12));
    assert_eq!(
        (p.bytes_done, p.bytes_total),
        (12 * CHUNK_BYTES, 12 * CHUNK_BYTES)
    );
}

#[test]
fn cancelling_from_the_callback_ends_the_read_with_cancelled() {
    let dir = TempDir::new("progress_cancel");
    let mut a = make(&dir, "a.zarr", false);
    let cancel = Cancel::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (log, c) = (seen.clone(), cancel.clone());
    // One worker: it checks the token before each chunk, so the read stops right after
    // the report of the second chunk.
    let sink = ProgressSink::new(move |p: &Progress| {
        log.lock().unwrap().push(*p);
        if p.chunks_done >= 2 {
            c.cancel();
        }
    })
    .every(Duration::ZERO);
    let mut o = ReadOptions {
        threads: Some(1),
        progress: Some(sink),
        cancel: Some(cancel.clone()),
        ..ReadOptions::default()
    };
    a.set_read_options(o.clone()).unwrap();
    let e = a.read(..).to(&HOST).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Cancelled, "{e}");
    assert!(
        e.to_string()
            .contains("cancelled after decoding 2 of its 12 chunks"),
        "{e}"
    );
    assert!(cancel.is_cancelled());
    let last = *seen.lock().unwrap().last().unwrap();
    assert_eq!(last.chunks_done, 2, "no report after the cancel");

    // The token stays cancelled: the next read with it fails before it starts.
    let e = a.read(&[0..1, 0..1]).to(&HOST).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Cancelled, "{e}");
    assert!(e.to_string().contains("before it started"), "{e}");

    // A fresh token reads again.
    o.cancel = Some(Cancel::new());
    a.set_read_options(o).unwrap();
    assert_eq!(a.read(..).to(&HOST).unwrap().shape(), &[64, 48]);
}

#[test]
fn a_panicking_callback_does_not_lose_the_read() {
    let dir = TempDir::new("progress_panic");
    let mut a = make(&dir, "a.zarr", false);
    let expect = a.read(..).to(&HOST).unwrap();
    let calls = Arc::new(Mutex::new(0));
    let c = calls.clone();
    let sink = ProgressSink::new(move |_| {
        *c.lock().unwrap() += 1;
        panic!("a broken progress bar");
    })
    .every(Duration::ZERO);
    with(&mut a, |o| o.progress = Some(sink));
    let got = a.read(..).to(&HOST).unwrap();
    assert_eq!(
        got.to_ndarray::<i32>().unwrap(),
        expect.to_ndarray::<i32>().unwrap()
    );
    assert_eq!(
        *calls.lock().unwrap(),
        1,
        "not called again after its panic"
    );
}

#[test]
fn options_with_a_sink_stay_clone_debug_and_eq() {
    let (sink, _) = recorder();
    let o = ReadOptions {
        progress: Some(sink),
        cancel: Some(Cancel::new()),
        ..ReadOptions::default()
    };
    let copy = o.clone();
    assert_eq!(o, copy, "clones share the callback and the token");
    assert_ne!(
        o,
        ReadOptions {
            cancel: Some(Cancel::new()),
            ..copy
        }
    );
    let text = format!("{o:?}");
    assert!(
        text.contains("ProgressSink") && text.contains("cancelled: false"),
        "{text}"
    );
}

/// A write's progress: reports never go down, end at exactly the chunks the write
/// touches (and their decoded bytes); the values written read back.
#[test]
fn writes_report_every_chunk_they_store() {
    let dir = TempDir::new("progress-write");
    let mut a = make(&dir, "w.zarr", true);
    let (sink, seen) = recorder();
    a.set_write_options(WriteOptions {
        progress: Some(sink),
        ..WriteOptions::default()
    });
    // Rows 8..40 of all 48 columns: chunk rows 0, 1 and 2, three chunks each.
    let v: Vec<i32> = (0..32 * 48).map(|i| -i).collect();
    let v = ndarray::Array2::from_shape_vec((32, 48), v).unwrap();
    a.write_subset(&[8, 0], &NDBuffer::from_ndarray(v.clone()))
        .unwrap();
    let seen = seen.lock().unwrap().clone();
    let last = *seen.last().expect("reports");
    assert_eq!((last.chunks_done, last.chunks_total), (9, 9), "{seen:?}");
    assert_eq!(last.bytes_total, 9 * CHUNK_BYTES);
    assert!(
        seen.windows(2)
            .all(|w| w[0].chunks_done <= w[1].chunks_done),
        "{seen:?}"
    );
    assert_eq!(seen[0].chunks_done, 0, "the first report: nothing done yet");
    let back = a
        .read([8..40, 0..48])
        .to(&HOST)
        .unwrap()
        .to_ndarray::<i32>()
        .unwrap();
    assert_eq!(back, v.into_dyn());
    // write_chunks: one report per chunk given.
    let (sink, seen) = recorder();
    a.set_write_options(WriteOptions {
        progress: Some(sink),
        ..WriteOptions::default()
    });
    let one = NDBuffer::from_ndarray(ndarray::Array2::<i32>::from_elem((16, 16), 5));
    a.write_chunks(&[[3u64, 0], [3, 1]], &[one.clone(), one])
        .unwrap();
    let last = *seen.lock().unwrap().last().unwrap();
    assert_eq!((last.chunks_done, last.chunks_total), (2, 2));
}

/// A cancelled write stores nothing more and ends with `Cancelled`; without a cancel
/// the same write succeeds.
#[test]
fn a_cancelled_write_stops_and_says_so() {
    let dir = TempDir::new("progress-write-cancel");
    let mut a = make(&dir, "c.zarr", true);
    let cancel = Cancel::new();
    cancel.cancel();
    a.set_write_options(WriteOptions {
        cancel: Some(cancel),
        ..WriteOptions::default()
    });
    let v = NDBuffer::from_ndarray(ndarray::Array2::<i32>::from_elem((48, 48), 9));
    let e = a.write_subset(&[16, 0], &v).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Cancelled, "{e}");
    for i in 1..4u64 {
        assert!(
            !a.chunk_is_stored(&[i, 0]).unwrap(),
            "chunk row {i} was stored"
        );
    }
    assert!(e.to_string().contains("before it started"), "{e}");
    // Cancelled from the progress callback: its first report (nothing done yet) comes
    // before any chunk is stored, so the stores that follow are refused, none written.
    // (Cancelling after the first stored chunk would race with the parallel encoders.)
    let cancel = Cancel::new();
    let c2 = cancel.clone();
    let reports = Arc::new(Mutex::new(Vec::new()));
    let log = reports.clone();
    a.set_write_options(WriteOptions {
        progress: Some(
            ProgressSink::new(move |p: &Progress| {
                log.lock().unwrap().push(*p);
                c2.cancel();
            })
            .every(Duration::ZERO),
        ),
        cancel: Some(cancel),
        ..WriteOptions::default()
    });
    let e = a.write_subset(&[16, 0], &v).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Cancelled, "{e}");
    assert!(e.to_string().contains("cancelled"), "{e}");
    assert_eq!(reports.lock().unwrap()[0].chunks_done, 0);
    for i in 1..4u64 {
        assert!(
            !a.chunk_is_stored(&[i, 0]).unwrap(),
            "chunk row {i} was stored"
        );
    }
    a.set_write_options(WriteOptions::default());
    a.write_subset(&[16, 0], &v).unwrap();
    assert!((1..4u64).all(|i| a.chunk_is_stored(&[i, 0]).unwrap()));
}
