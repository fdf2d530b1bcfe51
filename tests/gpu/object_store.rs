//! zarr arrays in an S3-compatible server (`s3s-fs` on 127.0.0.1, feature
//! `object_store`) onto the GPU: device reads through the read engine's fetch stage equal
//! host reads for every read path (plain and sharded arrays, CPU and automatic
//! decoders, small staging slots; GPU decoding with chunks decoded on the host inside
//! GPU claims), and device arrays written to the server read back bit for bit. Without `s3s-fs` (the bundle carries it when it was built beside one)
//! the tests print SKIPPED.

use devbuf::ElementType;
use devbuf::zarr::object_store::UrlStore;
use devbuf::zarr::{ArraySpec, Compressor, Decoder, ReadOptions, ZarrArray};
use devbuf::zarr::{BufferPrototype, ByteBuffer, Dtype, Endianness, Scalar, Store};

use crate::common::*;
use crate::zarrs::zarrs_common::{TempDir, files_under};
use crate::zarrs::{bytes_of, check_reads, host_nd, nvcomp_missing, random_elements};

#[path = "../common/servers.rs"]
mod servers;

const DEV: BufferPrototype = BufferPrototype::Device(0);
const HOST: BufferPrototype = BufferPrototype::Host;

gpu_test! {
    fn object_store_device_reads_equal_host_reads() {
        let test = "object_store_device_reads_equal_host_reads";
        let Some(server) = servers::S3Server::start(test) else { return };
        let opts = server.options();
        let mut rng = rng(test);
        let cases = [
            ("plain", ElementType::UInt16, [300u64, 200], ArraySpec::new(&[300, 200], &[64, 50], Dtype::UINT16).with_compressor(Compressor::Zstd { level: 1 })),
            ("sharded", ElementType::Float32, [256, 256], ArraySpec::new(&[256, 256], &[128, 128], Dtype::FLOAT32).with_subchunks(&[32, 32]).with_compressor(Compressor::Gzip { level: 1 })),
            ("none", ElementType::Float64, [100, 90], ArraySpec::new(&[100, 90], &[30, 40], Dtype::FLOAT64)),
        ];
        for (name, element, shape, spec) in cases {
            let url = server.url(name);
            let a = ZarrArray::create(devbuf::zarr::Location::Url(url.to_string(), opts.clone()), &spec).unwrap();
            let n = (shape[0] * shape[1]) as usize;
            let model = random_elements(&mut rng, element, n);
            a.write_subset(&[0, 0], &host_nd(model.clone(), &shape, element)).unwrap();
            let mut a = ZarrArray::open(devbuf::zarr::Location::Url(url.to_string(), opts.clone())).unwrap();
            assert!(bytes_of(&a.read(..).to(&HOST).unwrap()) == model, "{name}: host read");
            for (decoder, threads, slot) in [(Decoder::Cpu, 3, 4096), (Decoder::Auto, 5, 64 << 10)] {
                a.set_read_options(ReadOptions { decoder, threads: Some(threads), slot_bytes: slot, ..ReadOptions::default() }).unwrap();
                check_reads(&a, &mut rng, &format!("{name} {decoder:?}"));
                assert!(bytes_of(&a.read(..).to(&DEV).unwrap()) == model, "{name} {decoder:?}: device read");
            }
        }
    }

    fn object_store_writes_from_device_round_trip() {
        let test = "object_store_writes_from_device_round_trip";
        let Some(server) = servers::S3Server::start(test) else { return };
        let opts = server.options();
        let mut rng = rng(test);
        for (k, spec) in [
            ArraySpec::new(&[97, 61], &[16, 16], Dtype::INT32).with_compressor(Compressor::Zstd { level: 3 }),
            ArraySpec::new(&[97, 61], &[32, 32], Dtype::INT32).with_subchunks(&[8, 8]).with_compressor(Compressor::Blosc { level: 5 }),
        ].into_iter().enumerate() {
            let url = server.url(&format!("w{k}"));
            let a = ZarrArray::create(devbuf::zarr::Location::Url(url.to_string(), opts.clone()), &spec).unwrap();
            let model = random_elements(&mut rng, ElementType::Int32, 97 * 61);
            let v = host_nd(model.clone(), &[97, 61], ElementType::Int32).to_prototype(&DEV).unwrap();
            a.write_subset(&[0, 0], &v).unwrap();
            let back = ZarrArray::open(devbuf::zarr::Location::Url(url.to_string(), opts.clone())).unwrap();
            assert!(bytes_of(&back.read(..).to(&HOST).unwrap()) == model, "w{k}: host read back");
            assert!(bytes_of(&back.read(..).to(&DEV).unwrap()) == model, "w{k}: device read back");
        }
    }

    /// GPU decoding through the fetch stage (which hands each chunk's bytes out once):
    /// zstd frames with a content checksum, which nvCOMP is not given, are decoded on the
    /// host from the bytes the GPU worker's reader already took (taking them again would
    /// wait for ever); with missing chunks, a non-zero fill value and a big-endian
    /// array, every read path on `Gpu` and `Both` equals the host read of the same files.
    fn object_store_gpu_decode_takes_each_chunk_once() {
        let test = "object_store_gpu_decode_takes_each_chunk_once";
        if nvcomp_missing(test) {
            return;
        }
        let Some(server) = servers::S3Server::start(test) else { return };
        let opts = server.options();
        let mut rng = rng(test);
        use std::io::Write;
        // Written on the local filesystem first, some chunks re-encoded or removed there,
        // then every file uploaded.
        let dir = TempDir::new("gpu-remote-once");
        let local = dir.0.join("a");
        let shape = [120u64, 100];
        let spec = ArraySpec::new(&shape, &[16, 20], Dtype::new(ElementType::Int32, Endianness::Big))
            .with_compressor(Compressor::Zstd { level: 1 })
            .with_fill_value(Scalar::Int32(-123_456));
        let a = ZarrArray::create(&local, &spec).unwrap();
        a.write_subset(&[0, 0], &host_nd(random_elements(&mut rng, ElementType::Int32, 120 * 100), &shape, ElementType::Int32)).unwrap();
        // 8 x 5 chunks: two missing, three zstd frames with a content checksum.
        for (i, idx) in [[0u64, 0], [1, 1], [3, 4], [7, 2], [5, 0]].iter().enumerate() {
            let f = local.join("c").join(idx[0].to_string()).join(idx[1].to_string());
            if i % 2 == 0 && i < 4 {
                std::fs::remove_file(&f).unwrap();
                continue;
            }
            let raw = zstd::decode_all(&std::fs::read(&f).unwrap()[..]).unwrap();
            let mut enc = zstd::Encoder::new(Vec::new(), 1).unwrap();
            enc.include_checksum(true).unwrap();
            enc.set_pledged_src_size(Some(raw.len() as u64)).unwrap();
            enc.write_all(&raw).unwrap();
            std::fs::write(&f, enc.finish().unwrap()).unwrap();
        }
        let store = UrlStore::open(&server.url("once"), &opts).unwrap();
        for (rel, path) in files_under(&local) {
            store.set(&rel, &ByteBuffer::from(std::fs::read(path).unwrap())).unwrap();
        }
        let host = bytes_of(&ZarrArray::open(&local).unwrap().read(..).to(&HOST).unwrap());
        let mut a = ZarrArray::open(devbuf::zarr::Location::Url(server.url("once").to_string(), opts.clone())).unwrap();
        for (decoder, threads, gpu_workers) in [(Decoder::Gpu, 2, None), (Decoder::Gpu, 10, None), (Decoder::Both, 4, Some(1))] {
            let what = format!("{decoder:?} {threads} threads");
            a.set_read_options(ReadOptions { decoder, threads: Some(threads), gpu_workers, slot_bytes: 16 << 10, ..ReadOptions::default() }).unwrap();
            let mut r = devbuf::zarr::ReadReport::default();
            let dev = a.read(..).report(&mut r).to(&DEV).unwrap();
            assert!(bytes_of(&dev) == host, "{what}: device read");
            assert!(r.gpu_chunks > 0, "{what}: {r}");
            if decoder == Decoder::Gpu {
                assert_eq!((r.cpu_chunks, r.missing_chunks, r.gpu_chunks), (3, 2, 35), "{what}: {r}");
            }
            check_reads(&a, &mut rng, &what);
        }
    }
}
