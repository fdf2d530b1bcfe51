//! One read spread over the machine's devices (`ZarrArray::read(..).spread(..)`): partitioned
//! and replicated reads give exactly the bytes of host reads, each part on its own
//! device and cut at chunk boundaries; a failure on one device fails the read and
//! frees every device's memory. On one GPU the reads run over that device alone (a
//! spread over one device is the whole box there); the two-device assertions need two.

use std::ops::Range;

use devbuf::ElementType;
use devbuf::cuda::{Context, device_count};
use devbuf::zarr::{
    ArraySpec, BufferPrototype, Compressor, Decoder, Dtype, ReadOptions, Spread, SpreadRead,
    ZarrArray,
};

use crate::common::*;
use crate::zarrs::zarrs_common::TempDir;
use crate::zarrs::{bytes_of, host_nd, nvcomp_missing, random_elements};

const HOST: BufferPrototype = BufferPrototype::Host;

/// Every device of the machine (at most four).
fn devices() -> Vec<Context> {
    (0..device_count().min(4))
        .map(|i| Context::new(i).unwrap())
        .collect()
}

/// Arrays made for the spread tests: (name, array, decode chunk shape).
fn arrays(dir: &TempDir, rng: &mut rand::rngs::SmallRng) -> Vec<(String, ZarrArray, Vec<u64>)> {
    let specs = [
        (
            "f32-zstd-crc",
            ArraySpec::new(&[300, 70], &[32, 16], Dtype::FLOAT32)
                .with_compressor(Compressor::Zstd { level: 1 })
                .with_crc32c(),
            vec![32u64, 16],
        ),
        (
            "i16-sharded-zstd-crc",
            ArraySpec::new(&[200, 64], &[64, 64], Dtype::INT16)
                .with_compressor(Compressor::Zstd { level: 3 })
                .with_crc32c()
                .with_subchunks(&[16, 16]),
            vec![16, 16],
        ),
        (
            "u8-raw",
            ArraySpec::new(&[97, 33], &[10, 7], Dtype::UINT8),
            vec![10, 7],
        ),
    ];
    specs
        .into_iter()
        .map(|(name, spec, cell)| {
            let a = ZarrArray::create(dir.join(name), &spec).unwrap();
            let shape = a.shape().to_vec();
            let n = shape.iter().product::<u64>() as usize;
            let element = spec_element(name);
            a.write_subset(
                &[0, 0],
                &host_nd(random_elements(rng, element, n), &shape, element),
            )
            .unwrap();
            (name.to_string(), a, cell)
        })
        .collect()
}

fn spec_element(name: &str) -> ElementType {
    match &name[..3] {
        "f32" => ElementType::Float32,
        "i16" => ElementType::Int16,
        _ => ElementType::UInt8,
    }
}

/// The parts tile `sel` along `axis` in order, each on its device, each equal to a
/// host read of its box.
fn check_partition(
    a: &ZarrArray,
    sel: &[Range<u64>],
    axis: usize,
    cell: u64,
    devs: &[Context],
    r: &SpreadRead,
    what: &str,
) {
    assert_eq!(r.parts.len(), devs.len(), "{what}");
    let mut at = sel[axis].start;
    for (p, ctx) in r.parts.iter().zip(devs) {
        assert_eq!(p.device, ctx.ordinal(), "{what}");
        assert_eq!(
            p.array.prototype(),
            BufferPrototype::Device(ctx.ordinal()),
            "{what}: part on its device"
        );
        assert_eq!(p.decoded, p.ranges, "{what}");
        for (k, (got, want)) in p.ranges.iter().zip(sel).enumerate() {
            if k != axis {
                assert_eq!(got, want, "{what}: axis {k} whole");
            }
        }
        assert_eq!(p.ranges[axis].start, at, "{what}: parts in order");
        at = p.ranges[axis].end;
        let want = a.read(&p.ranges).to(&HOST).unwrap();
        assert_eq!(p.array.shape(), want.shape(), "{what}");
        assert!(
            bytes_of(&p.array) == bytes_of(&want),
            "{what}: device {} bytes differ from the host read of {:?}",
            p.device,
            p.ranges
        );
    }
    assert_eq!(at, sel[axis].end, "{what}: the parts cover the selection");
    // Enough chunks along the axis: every cut on a chunk boundary.
    let len = sel[axis].end - sel[axis].start;
    if len / cell > devs.len() as u64 {
        for p in &r.parts[1..] {
            assert_eq!(
                p.ranges[axis].start % cell,
                0,
                "{what}: cut inside a chunk: {r}"
            );
        }
    }
}

gpu_test! {
    fn spread_partitioned_reads_equal_host() {
        let devs = devices();
        let dir = TempDir::new("spread-part");
        let mut rng = rng("spread_partitioned_reads_equal_host");
        let gpu = !nvcomp_missing("spread_partitioned_reads_equal_host (nvCOMP decoder part)");
        for (name, mut a, cell) in arrays(&dir, &mut rng) {
            let shape = a.shape().to_vec();
            let whole: Vec<Range<u64>> = shape.iter().map(|&n| 0..n).collect();
            let inner = vec![7..shape[0] - 3, 3..shape[1] - 2];
            let mut decoders = vec![Decoder::Auto, Decoder::Cpu];
            if gpu && name != "u8-raw" {
                decoders.push(Decoder::Gpu);
            }
            for decoder in decoders {
                a.set_read_options(ReadOptions { decoder, ..ReadOptions::default() }).unwrap();
                for (axis, &cell) in cell.iter().enumerate() {
                    for sel in [&whole, &inner] {
                        let what = format!("{name} {decoder:?} axis {axis} {sel:?} on {} devices", devs.len());
                        let r = a.read(sel).spread(&devs, Spread::Partition { axis }).unwrap();
                        check_partition(&a, sel, axis, cell, &devs, &r, &what);
                        if decoder == Decoder::Gpu {
                            assert!(r.parts.iter().all(|p| p.report.cpu_chunks == 0), "{what}: {r}");
                        }
                    }
                }
            }
            // Fewer rows than devices: the last parts are empty, the others one row.
            let r = a.read(&[5..6, 0..shape[1]]).spread(&devs, Spread::Partition { axis: 0 }).unwrap();
            check_partition(&a, &[5..6, 0..shape[1]], 0, cell[0], &devs, &r, &format!("{name}: one row"));
        }
    }

    fn spread_replicated_reads_equal_host() {
        let devs = devices();
        let dir = TempDir::new("spread-repl");
        let mut rng = rng("spread_replicated_reads_equal_host");
        for (name, a, _) in arrays(&dir, &mut rng) {
            let shape = a.shape().to_vec();
            for sel in [shape.iter().map(|&n| 0..n).collect::<Vec<_>>(), vec![11..shape[0] - 1, 2..shape[1]]] {
                let what = format!("{name} {sel:?} on {} devices", devs.len());
                let want = a.read(&sel).to(&HOST).unwrap();
                let r = a.read(&sel).spread(&devs, Spread::Replicate).unwrap();
                assert_eq!(r.parts.len(), devs.len(), "{what}");
                let mut at = sel[0].start;
                let mut decoded_chunks = 0;
                for (p, ctx) in r.parts.iter().zip(&devs) {
                    assert_eq!(p.device, ctx.ordinal(), "{what}");
                    assert_eq!(p.array.prototype(), BufferPrototype::Device(ctx.ordinal()), "{what}");
                    assert_eq!(p.ranges, sel, "{what}: every device holds the whole selection");
                    assert!(bytes_of(&p.array) == bytes_of(&want), "{what}: device {} differs from the host read", p.device);
                    assert_eq!(p.decoded[0].start, at, "{what}: slabs in order");
                    at = p.decoded[0].end;
                    let slab = (p.decoded[0].end - p.decoded[0].start) * (sel[1].end - sel[1].start) * want.dtype().element().size() as u64;
                    assert_eq!(p.copied_out_bytes, slab * (devs.len() as u64 - 1), "{what}: device {} sends its slab to each other device", p.device);
                    decoded_chunks += p.report.cpu_chunks + p.report.gpu_chunks;
                }
                assert_eq!(at, sel[0].end, "{what}: the slabs cover the selection");
                // Each chunk decoded once over all devices: as many as one host read.
                let mut one = devbuf::zarr::ReadReport::default();
                let _ = a.read(&sel).report(&mut one).to(&HOST).unwrap();
                assert_eq!(decoded_chunks, one.cpu_chunks, "{what}: {r}");
                println!("{what}: {r}");
            }
        }
    }

    fn spread_argument_errors_name_the_problem() {
        let d0 = ctx();
        let dir = TempDir::new("spread-args");
        let mut rng = rng("spread_argument_errors_name_the_problem");
        let (_, a, _) = arrays(&dir, &mut rng).remove(2);
        let whole = vec![0..97, 0..33];
        let e = a.read(&whole).spread(&[], Spread::Replicate).unwrap_err().to_string();
        assert!(e.contains("at least one device"), "{e}");
        let e = a.read(&whole).spread(&[d0.clone(), d0.clone()], Spread::Replicate).unwrap_err().to_string();
        assert!(e.contains("device 0 is listed twice"), "{e}");
        let e = a.read(&whole).spread(std::slice::from_ref(&d0), Spread::Partition { axis: 2 }).unwrap_err().to_string();
        assert!(e.contains("axis 2 is out of range") && e.contains("valid: 0 to 1"), "{e}");
        let e = a.read(&[0..98, 0..33]).spread(std::slice::from_ref(&d0), Spread::Replicate).unwrap_err().to_string();
        assert!(e.contains("out of bounds"), "{e}");
    }
}

gpu_test_exclusive! {
    /// A damaged chunk in the last device's part: the read fails with that chunk's
    /// error (not a cancellation), and every device's memory and staging are back at
    /// their baseline.
    fn spread_failure_on_one_device_fails_the_read_and_frees_every_device() {
        let devs = devices();
        let dir = TempDir::new("spread-bad");
        let path = dir.join("bad");
        let shape = [256u64, 64];
        let a = ZarrArray::create(&path, &ArraySpec::new(&shape, &[16, 64], Dtype::INT32).with_compressor(Compressor::Zstd { level: 1 })).unwrap();
        let mut rng = rng("spread_failure_on_one_device_fails_the_read_and_frees_every_device");
        a.write_subset(&[0, 0], &host_nd(random_elements(&mut rng, ElementType::Int32, 256 * 64), &shape, ElementType::Int32)).unwrap();
        let whole = vec![0..256, 0..64];
        for spread in [Spread::Partition { axis: 0 }, Spread::Replicate] {
            drop(a.read(&whole).spread(&devs, spread).unwrap()); // warm: pools, kernels
        }
        for c in &devs {
            c.synchronize().unwrap();
        }
        let before: Vec<(usize, usize)> = devs.iter().map(|c| (c.bytes_allocated(), c.transfer_stats().pinned_in_use_bytes)).collect();
        let chunk = path.join("c").join("15").join("0");
        let original = std::fs::read(&chunk).unwrap();
        std::fs::write(&chunk, &original[..original.len() / 2]).unwrap();
        for spread in [Spread::Partition { axis: 0 }, Spread::Replicate] {
            let e = a.read(&whole).spread(&devs, spread).unwrap_err().to_string();
            assert!(e.contains("c/15/0"), "{spread:?}: the damaged chunk's error, not another device's stop: {e}");
            for (c, b) in devs.iter().zip(&before) {
                c.synchronize().unwrap();
                assert_eq!((c.bytes_allocated(), c.transfer_stats().pinned_in_use_bytes), *b, "{spread:?}: device {} back to its baseline", c.ordinal());
            }
        }
        std::fs::write(&chunk, &original).unwrap();
        assert!(a.read(&whole).spread(&devs, Spread::Replicate).is_ok());
    }
}

gpu_test! {
    /// Parts follow the order of the devices given: device 1 first holds the first
    /// rows, and each part's memory is its device's.
    fn spread_over_two_devices_in_either_order() {
        let Some(d1) = second_ctx("spread_over_two_devices_in_either_order") else { return };
        let d0 = ctx();
        let dir = TempDir::new("spread-two");
        let mut rng = rng("spread_over_two_devices_in_either_order");
        let (_, a, _) = arrays(&dir, &mut rng).remove(0);
        let whole = vec![0..300, 0..70];
        for devs in [[d1.clone(), d0.clone()], [d0.clone(), d1.clone()]] {
            let r = a.read(&whole).spread(&devs, Spread::Partition { axis: 0 }).unwrap();
            check_partition(&a, &whole, 0, 32, &devs, &r, "two devices");
            assert_eq!(r.parts[0].ranges[0], 0..160, "{r}");
            let r = a.read(&whole).spread(&devs, Spread::Replicate).unwrap();
            let want = a.read(..).to(&HOST).unwrap();
            for (p, c) in r.parts.iter().zip(&devs) {
                assert_eq!(p.array.prototype(), BufferPrototype::Device(c.ordinal()));
                assert!(bytes_of(&p.array) == bytes_of(&want), "device {}", c.ordinal());
            }
        }
    }
}
