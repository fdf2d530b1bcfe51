//! Host reads whose result is 64 MiB or more, which the read engine places with
//! non-temporal stores (`devbuf_core::__private::stream_copy`, see
//! `crates/devbuf-zarr/src/read/pipeline.rs`) and, read again, into a recycled result
//! whose pages it does not touch first: bit-exact against the values written, for
//! chunks decoded whole into the scratch (1 MiB zstd and gzip chunks) and chunks
//! streamed in pieces (4 MiB zstd), with clipped edge chunks, a missing chunk (the
//! fill value), a box that starts inside the chunks, and reads into the caller's
//! memory.
#![cfg(feature = "zarr")]

use devbuf::zarr::{ArraySpec, BufferPrototype, Compressor, Dtype, NDBuffer, ZarrArray};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

#[path = "common/zarrs.rs"]
mod zarrs_common;
use zarrs_common::{TempDir, sub_box};

const HOST: BufferPrototype = BufferPrototype::Host;
/// 4100 x 4100 float32: 67.2 MB, just over the engine's 64 MiB threshold.
const SIDE: u64 = 4100;

fn bytes_of(nd: &NDBuffer) -> Vec<u8> {
    nd.to_buffer().unwrap().to_host().unwrap().to_vec()
}

#[test]
fn results_of_64_mib_and_more_read_bit_exactly() {
    let mut rng = SmallRng::seed_from_u64(0x64_4d1b);
    let dir = TempDir::new("large-host");
    let shape = [SIDE, SIDE];
    let n = (SIDE * SIDE) as usize;
    let v: Vec<f32> = (0..n)
        .map(|i| (i % 1013) as f32 * 0.5 + (rng.random::<u8>() as f32) / 32.0)
        .collect();
    let nd = NDBuffer::from_ndarray(
        ndarray::Array2::from_shape_vec((SIDE as usize, SIDE as usize), v).unwrap(),
    );
    for (k, (chunk, comp)) in [
        (512u64, Compressor::Zstd { level: 1 }),
        (512, Compressor::Gzip { level: 1 }),
        (1024, Compressor::Zstd { level: 1 }),
    ]
    .into_iter()
    .enumerate()
    {
        let what = format!("{chunk}x{chunk} {comp:?}");
        let spec = ArraySpec::new(&shape, &[chunk, chunk], Dtype::FLOAT32).with_compressor(comp);
        let a = ZarrArray::create(dir.join(&format!("a{k}")), &spec).unwrap();
        a.write_subset(&[0, 0], &nd).unwrap();
        let mut all = bytes_of(&nd);
        // Chunk [1, 2] not stored: the fill value (0) in its place.
        zarrs_common::unstore_chunk(&a, &[1, 2], &mut all);
        assert!(all.len() >= 64 << 20);
        // Twice: the second read takes the first one's mapping back from the pool.
        for round in 0..2 {
            let got = a.read(..).to(&HOST).unwrap();
            assert!(bytes_of(&got) == all, "{what}: whole array, read {round}");
        }
        // Into the caller's memory, full of noise.
        let mut into: Vec<u8> = (0..all.len()).map(|_| rng.random()).collect();
        a.read(..).into(&mut into).unwrap();
        assert!(into == all, "{what}: into the caller's memory");
        // A box starting inside the first chunks, still over 64 MiB.
        let (b0, b1) = (3u64, 2u64);
        let want = sub_box(&all, &shape, 4, &[b0, b1], &[SIDE - b0, SIDE - b1]);
        assert!(want.len() >= 64 << 20);
        let got = a.read(&[b0..SIDE, b1..SIDE]).to(&HOST).unwrap();
        assert!(bytes_of(&got) == want, "{what}: box from [{b0}, {b1}]");
    }
}
