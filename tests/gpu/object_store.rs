//! zarr arrays in an S3-compatible server (`s3s-fs` on 127.0.0.1, feature
//! `object_store`) onto the GPU: device reads through the read engine's fetch stage equal
//! host reads for every read path (plain and sharded arrays, CPU and automatic
//! decoders, small staging slots), and device arrays written to the server read back
//! bit for bit. Without `s3s-fs` (the bundle carries it when it was built beside one)
//! the tests print SKIPPED.

use devbuf::zarr::zarrs::{ArraySpec, Compressor, Decoder, ReadOptions, ZarrArray};
use devbuf::zarr::{BufferPrototype, DataType, ElementType};

use crate::common::*;
use crate::zarrs::{bytes_of, check_reads, host_nd, random_elements};

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
            ("plain", ElementType::UInt16, [300u64, 200], ArraySpec::new(&[300, 200], &[64, 50], DataType::UINT16).with_compressor(Compressor::Zstd { level: 1 })),
            ("sharded", ElementType::Float32, [256, 256], ArraySpec::new(&[256, 256], &[128, 128], DataType::FLOAT32).with_subchunks(&[32, 32]).with_compressor(Compressor::Gzip { level: 1 })),
            ("none", ElementType::Float64, [100, 90], ArraySpec::new(&[100, 90], &[30, 40], DataType::FLOAT64)),
        ];
        for (name, element, shape, spec) in cases {
            let url = server.url(name);
            let a = ZarrArray::create_url(&url, &spec, &opts).unwrap();
            let n = (shape[0] * shape[1]) as usize;
            let model = random_elements(&mut rng, element, n);
            a.write_subset(&[0, 0], &host_nd(model.clone(), &shape, element)).unwrap();
            let mut a = ZarrArray::open_url(&url, &opts).unwrap();
            assert!(bytes_of(&a.read_all(&HOST).unwrap()) == model, "{name}: host read");
            for (decoder, threads, slot) in [(Decoder::Cpu, 3, 4096), (Decoder::Auto, 5, 64 << 10)] {
                a.set_read_options(ReadOptions { decoder, threads: Some(threads), slot_bytes: slot, ..ReadOptions::default() }).unwrap();
                check_reads(&a, &mut rng, &format!("{name} {decoder:?}"));
                assert!(bytes_of(&a.read_all(&DEV).unwrap()) == model, "{name} {decoder:?}: device read");
            }
        }
    }

    fn object_store_writes_from_device_round_trip() {
        let test = "object_store_writes_from_device_round_trip";
        let Some(server) = servers::S3Server::start(test) else { return };
        let opts = server.options();
        let mut rng = rng(test);
        for (k, spec) in [
            ArraySpec::new(&[97, 61], &[16, 16], DataType::INT32).with_compressor(Compressor::Zstd { level: 3 }),
            ArraySpec::new(&[97, 61], &[32, 32], DataType::INT32).with_subchunks(&[8, 8]).with_compressor(Compressor::Blosc { level: 5 }),
        ].into_iter().enumerate() {
            let url = server.url(&format!("w{k}"));
            let a = ZarrArray::create_url(&url, &spec, &opts).unwrap();
            let model = random_elements(&mut rng, ElementType::Int32, 97 * 61);
            let v = host_nd(model.clone(), &[97, 61], ElementType::Int32).to_prototype(&DEV).unwrap();
            a.write_subset(&[0, 0], &v).unwrap();
            let back = ZarrArray::open_url(&url, &opts).unwrap();
            assert!(bytes_of(&back.read_all(&HOST).unwrap()) == model, "w{k}: host read back");
            assert!(bytes_of(&back.read_all(&DEV).unwrap()) == model, "w{k}: device read back");
        }
    }
}
