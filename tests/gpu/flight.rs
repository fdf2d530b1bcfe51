//! Arrow Flight into device memory (feature `flight`): a server on 127.0.0.1 serves
//! zarr arrays of random data; reads and chunk batches received into device 0 land in
//! device memory and equal the source bit for bit (the host read of the same array);
//! device record batches are served (one PCIe copy into page-locked memory) and
//! uploaded from the device, and come back equal.

use std::sync::Arc;

use arrow_array::{Float64Array, Int32Array, RecordBatch};
use devbuf::ElementType;
use devbuf::arrow::ChunkBatch;
use devbuf::flight::{Batch, Client};
use devbuf::zarr::{AxisSel, BufferPrototype, Dtype, Endianness, Scalar, Slice};
use devbuf::zarr::{Compressor, ZarrArray};
use rand::Rng;

use crate::common::*;

#[path = "../common/flight.rs"]
mod flight_common;
use crate::zarrs::zarrs_common::TempDir;
use flight_common::{bytes_of, opts, random_array, serve};

const HOST: BufferPrototype = BufferPrototype::Host;
const DEV: BufferPrototype = BufferPrototype::Device(0);

/// Random arrays of several element types (a quarter of their chunks missing) under a
/// temporary root: (path, array, shape).
fn arrays(dir: &TempDir, rng: &mut rand::rngs::SmallRng) -> Vec<(String, ZarrArray, Vec<u64>)> {
    let dtypes = [
        Dtype::FLOAT32,
        Dtype::new(ElementType::Float64, Endianness::Big),
        Dtype::INT16,
        Dtype::new(ElementType::Bool, Endianness::Little),
        Dtype::new(ElementType::Complex64, Endianness::Little),
        Dtype::UINT8,
    ];
    dtypes
        .iter()
        .enumerate()
        .map(|(k, &dtype)| {
            let shape: Vec<u64> = vec![rng.random_range(40..90), rng.random_range(30..70)];
            let chunks = vec![rng.random_range(5..17), rng.random_range(5..17)];
            let n = (shape[0] * shape[1]) as usize;
            let values = crate::arrays::random_values(rng, n, Dtype::from(dtype.element()));
            let fill = match dtype.element() {
                ElementType::Bool => Scalar::Bool(true),
                ElementType::Complex64 => Scalar::from(0i32),
                _ => Scalar::from(rng.random_range(-9i32..9)),
            };
            let name = format!("a{k}.zarr");
            let seed: u64 = rng.random();
            let a = random_array(
                &dir.join(&name),
                &shape,
                &chunks,
                dtype,
                fill,
                if k % 2 == 0 {
                    Compressor::Zstd { level: 1 }
                } else {
                    Compressor::None
                },
                values,
                move |idx| idx.iter().fold(seed, |h, &i| h.wrapping_mul(31) ^ i) % 4 == 0,
            );
            (name, a, shape)
        })
        .collect()
}

gpu_test! {
    fn flight_reads_land_in_device_memory_bit_for_bit() {
        let mut rng = rng("flight_reads_land_in_device_memory_bit_for_bit");
        let dir = TempDir::new("gpu-flight");
        let made = arrays(&dir, &mut rng);
        let server = serve(&dir.0, |c| {
            c.endpoints = 3;
            c.batch_bytes = 4096;
        });
        let client = Client::connect(&server.uri(), &opts()).unwrap();
        let ctx = ctx();
        for (name, local, shape) in &made {
            let want = local.read(..).to(&HOST).unwrap();
            let got = client.read(name, .., &DEV).unwrap();
            assert!(got.prototype().is_device(), "{name}");
            let mem = got.as_ndarray_like().memory;
            let d = mem.as_device().expect("device memory");
            assert_eq!(d.context().ordinal(), ctx.ordinal());
            assert_eq!(got.shape(), want.shape(), "{name}");
            assert!(bytes_of(&got) == bytes_of(&want), "{name}: device bytes differ");
            for _ in 0..6 {
                let sel: Vec<AxisSel> = shape
                    .iter()
                    .map(|&n| {
                        let a = rng.random_range(0..n as usize);
                        match rng.random_range(0..3) {
                            0 => AxisSel::from(a..rng.random_range(a + 1..=n as usize)),
                            1 => Slice::new(Some(a as isize), None, rng.random_range(1..4i64) as isize).into(),
                            _ => AxisSel::Index(a as isize),
                        }
                    })
                    .collect();
                let want = local.read(&sel).to(&HOST).unwrap();
                let got = client.read(name, &sel, &DEV).unwrap();
                assert!(got.prototype().is_device());
                assert_eq!(got.shape(), want.shape(), "{name} {sel:?}");
                assert!(bytes_of(&got) == bytes_of(&want), "{name} {sel:?}: bytes differ");
            }
        }
    }

    fn flight_chunk_batches_are_received_into_device_memory() {
        let mut rng = rng("flight_chunk_batches_are_received_into_device_memory");
        let dir = TempDir::new("gpu-flight-chunks");
        let made = arrays(&dir, &mut rng);
        let server = serve(&dir.0, |c| {
            c.endpoints = 4;
            c.batch_bytes = 2000;
        });
        let client = Client::connect(&server.uri(), &opts()).unwrap();
        for (name, _, _) in &made {
            let host = client.read_chunks(name, None, &HOST).unwrap();
            let dev = client.read_chunks(name, None, &DEV).unwrap();
            assert_eq!(host.len(), dev.len(), "{name}");
            for (h, d) in host.iter().zip(&dev) {
                assert!(d.prototype().is_device() && !h.prototype().is_device(), "{name}");
                let drb = d.batch().as_device().unwrap();
                for col in drb.columns() {
                    for b in col.all_buffers() {
                        assert_eq!(b.context().ordinal(), 0);
                    }
                }
                assert_eq!(h.len(), d.len());
                // The client takes the coordinates from the received message on the
                // host; the device columns hold the same.
                let from_device = ChunkBatch::try_from(Batch::Device(drb.clone())).unwrap();
                for i in 0..h.len() {
                    assert_eq!(h.coords(i), d.coords(i), "{name}");
                    assert_eq!(from_device.coords(i), d.coords(i), "{name}");
                    let (hp, dp) = (h.tensors().tensor(i).unwrap(), d.tensors().tensor(i).unwrap());
                    assert!(dp.prototype().is_device());
                    assert!(bytes_of(&hp) == bytes_of(&dp), "{name} chunk {i}: bytes differ");
                }
            }
        }
    }

    fn flight_device_batches_are_served_and_uploaded() {
        let mut rng = rng("flight_device_batches_are_served_and_uploaded");
        let ctx = ctx();
        let dir = TempDir::new("gpu-flight-batches");
        let server = serve(&dir.0, |c| c.endpoints = 2);
        let client = Client::connect(&server.uri(), &opts()).unwrap();
        let n = 10_000;
        let host = RecordBatch::try_from_iter([
            ("i", Arc::new(Int32Array::from((0..n).map(|_| rng.random::<i32>()).collect::<Vec<_>>())) as _),
            ("f", Arc::new(Float64Array::from((0..n).map(|_| rng.random::<f64>()).collect::<Vec<_>>())) as _),
        ])
        .unwrap();
        let on_dev = read_device(&to_device_message(host.clone(), &ctx).unwrap(), host.schema()).unwrap();
        // Served from device memory: to the host and to a device.
        server.register("dev", [on_dev.clone(), on_dev.clone()]).unwrap();
        let got = client.read_batches("dev", &HOST).unwrap();
        assert_eq!(got.len(), 2);
        for b in &got {
            assert_eq!(b.to_host().unwrap(), host);
        }
        let got = client.read_batches("dev", &DEV).unwrap();
        for b in &got {
            assert!(b.prototype().is_device());
            assert_eq!(b.to_host().unwrap(), host);
        }
        // Uploaded from device memory; dictionary columns through the host.
        client.put("up", [on_dev]).unwrap();
        assert_eq!(client.read_batches("up", &HOST).unwrap()[0].to_host().unwrap(), host);
        let mixed = crate::batches::mixed_batch(rng.random(), 300);
        let mixed_dev = read_device(&to_device_message(mixed.clone(), &ctx).unwrap(), mixed.schema()).unwrap();
        client.put("mixed", [Batch::Device(mixed_dev)]).unwrap();
        let back = client.read_batches("mixed", &DEV).unwrap();
        assert!(back[0].prototype().is_device());
        assert_eq!(back[0].to_host().unwrap(), mixed);
    }
}
