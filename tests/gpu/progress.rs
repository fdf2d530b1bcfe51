//! A device read's progress and cancellation (feature `zarr`): CPU workers and nvCOMP
//! workers report progress that never goes down and ends at exactly the read's totals;
//! a device read cancelled from its progress callback ends with `Cancelled` and the
//! next read succeeds; a read spread over the devices reports the sum of its parts.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use devbuf::ElementType;
use devbuf::ErrorKind;
use devbuf::cuda::{Context, device_count};
use devbuf::zarr::{ArraySpec, BufferPrototype, Compressor, Decoder, Dtype, Encoder, WriteOptions};
use devbuf::zarr::{Cancel, Progress, ProgressSink, ReadOptions, Spread, ZarrArray};

use crate::common::*;
use crate::zarrs::zarrs_common::TempDir;
use crate::zarrs::{bytes_of, host_nd, nvcomp_missing, random_elements};

const DEV: BufferPrototype = BufferPrototype::Device(0);
const HOST: BufferPrototype = BufferPrototype::Host;

/// 512 x 256 float32 in 32 x 64 zstd chunks with crc32c (64 chunks of 8 KiB).
fn make(dir: &TempDir, rng: &mut rand::rngs::SmallRng) -> ZarrArray {
    let spec = ArraySpec::new(&[512, 256], &[32, 64], Dtype::FLOAT32)
        .with_compressor(Compressor::Zstd { level: 1 })
        .with_crc32c();
    let a = ZarrArray::create(dir.join("progress.zarr"), &spec).unwrap();
    let v = random_elements(rng, ElementType::Float32, 512 * 256);
    a.write_subset(&[0, 0], &host_nd(v, &[512, 256], ElementType::Float32))
        .unwrap();
    a
}

fn recorder() -> (ProgressSink, Arc<Mutex<Vec<Progress>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let sink = ProgressSink::new(move |p| log.lock().unwrap().push(*p)).every(Duration::ZERO);
    (sink, seen)
}

/// Never down; the last report is exactly `chunks` chunks of `chunk_bytes`, and the only
/// one with everything done.
fn check_series(seen: &[Progress], chunks: u64, chunk_bytes: u64, what: &str) {
    assert!(seen.len() >= 2, "{what}: {seen:?}");
    for w in seen.windows(2) {
        assert!(w[1].chunks_done >= w[0].chunks_done, "{what}: {seen:?}");
        assert!(w[1].bytes_done >= w[0].bytes_done, "{what}: {seen:?}");
    }
    let last = seen.last().unwrap();
    assert_eq!(
        (last.chunks_done, last.chunks_total),
        (chunks, chunks),
        "{what}"
    );
    assert_eq!(
        (last.bytes_done, last.bytes_total),
        (chunks * chunk_bytes, chunks * chunk_bytes),
        "{what}"
    );
    assert_eq!(
        seen.iter().filter(|p| p.is_done()).count(),
        1,
        "{what}: {seen:?}"
    );
}

gpu_test! {
    fn zarrs_device_reads_report_progress_to_the_totals() {
        let test = "zarrs_device_reads_report_progress_to_the_totals";
        let mut rng = rng(test);
        let dir = TempDir::new("progress_device");
        let mut a = make(&dir, &mut rng);
        let want = bytes_of(&a.read(..).to(&HOST).unwrap());
        let mut decoders = vec![Decoder::Cpu];
        if !nvcomp_missing(test) {
            decoders.extend([Decoder::Both, Decoder::Gpu]);
        }
        for decoder in decoders {
            let (sink, seen) = recorder();
            a.set_read_options(ReadOptions {
                decoder,
                threads: Some(4),
                slot_bytes: 32 << 10,
                progress: Some(sink),
                ..ReadOptions::default()
            })
            .unwrap();
            let mut report = devbuf::zarr::ReadReport::default();
            let got = a.read(..).report(&mut report).to(&DEV).unwrap();
            assert!(bytes_of(&got) == want, "{decoder:?}: device bytes differ");
            assert_eq!(report.cpu_chunks + report.gpu_chunks, 64, "{decoder:?}: {report}");
            check_series(&seen.lock().unwrap(), 64, 32 * 64 * 4, &format!("{decoder:?}"));
        }
    }

    fn zarrs_device_writes_report_progress_and_stop_when_cancelled() {
        let test = "zarrs_device_writes_report_progress_and_stop_when_cancelled";
        let mut rng = rng(test);
        let dir = TempDir::new("progress_write_device");
        let mut a = make(&dir, &mut rng);
        let v = random_elements(&mut rng, ElementType::Float32, 512 * 256);
        let dev = host_nd(v.clone(), &[512, 256], ElementType::Float32).to_prototype(&DEV).unwrap();
        let mut encoders = vec![Encoder::Cpu];
        if !nvcomp_missing(test) {
            encoders.push(Encoder::Gpu);
        }
        for encoder in encoders {
            let (sink, seen) = recorder();
            a.set_write_options(WriteOptions { encoder, progress: Some(sink), ..WriteOptions::default() });
            a.write_subset(&[0, 0], &dev).unwrap();
            check_series(&seen.lock().unwrap(), 64, 32 * 64 * 4, &format!("{encoder:?}"));
            assert!(bytes_of(&a.read(..).to(&HOST).unwrap()) == v, "{encoder:?}: written values");
            // Cancelled before it starts: nothing stored, `Cancelled`.
            let cancel = Cancel::new();
            cancel.cancel();
            a.set_write_options(WriteOptions { encoder, cancel: Some(cancel), ..WriteOptions::default() });
            let e = a.write_subset(&[0, 0], &dev).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Cancelled, "{encoder:?}: {e}");
        }
    }

    fn zarrs_device_read_cancelled_from_its_callback() {
        let mut rng = rng("zarrs_device_read_cancelled_from_its_callback");
        let dir = TempDir::new("progress_cancel_device");
        let mut a = make(&dir, &mut rng);
        let cancel = Cancel::new();
        let c = cancel.clone();
        let sink = ProgressSink::new(move |p: &Progress| {
            if p.chunks_done >= 1 {
                c.cancel();
            }
        })
        .every(Duration::ZERO);
        // One worker, one chunk per slot: it stops at its next claim.
        a.set_read_options(ReadOptions {
            decoder: Decoder::Cpu,
            threads: Some(1),
            slot_bytes: 8 << 10,
            progress: Some(sink),
            cancel: Some(cancel),
            ..ReadOptions::default()
        })
        .unwrap();
        let e = a.read(..).to(&DEV).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Cancelled, "{e}");
        assert!(e.to_string().contains("after decoding 1 of its 64 chunks"), "{e}");
        a.set_read_options(ReadOptions::default()).unwrap();
        let want = bytes_of(&a.read(..).to(&HOST).unwrap());
        assert!(bytes_of(&a.read(..).to(&DEV).unwrap()) == want);
    }

    fn zarrs_spread_reads_report_the_sum_of_their_parts() {
        let mut rng = rng("zarrs_spread_reads_report_the_sum_of_their_parts");
        let dir = TempDir::new("progress_spread");
        let mut a = make(&dir, &mut rng);
        let devices: Vec<Context> = (0..device_count().min(4)).map(|i| Context::new(i).unwrap()).collect();
        for spread in [Spread::Partition { axis: 0 }, Spread::Replicate] {
            let (sink, seen) = recorder();
            a.set_read_options(ReadOptions { progress: Some(sink), ..ReadOptions::default() }).unwrap();
            let r = a.read(&[0..512, 0..256]).spread(&devices, spread).unwrap();
            let chunks: u64 = r.parts.iter().map(|p| p.report.cpu_chunks + p.report.gpu_chunks).sum();
            assert_eq!(chunks, 64, "{spread:?}: every chunk read once over the devices");
            check_series(&seen.lock().unwrap(), 64, 32 * 64 * 4, &format!("{spread:?}"));
        }
    }
}
