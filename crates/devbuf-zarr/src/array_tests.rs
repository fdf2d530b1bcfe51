//! Unit tests of `array.rs`: the read engine against zarrs' own subset decoding.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;

use super::super::fixtures::path as fixture;

fn host_bytes(nd: &NDBuffer) -> Vec<u8> {
    nd.to_buffer().unwrap().to_host().unwrap().to_vec()
}

fn random_ranges(rng: &mut SmallRng, shape: &[u64]) -> Vec<Range<u64>> {
    shape
        .iter()
        .map(|&n| {
            let s = rng.random_range(0..=n);
            s..rng.random_range(s..=n)
        })
        .collect()
}

/// The read engine (every thread count, every kind of box, whole chunks, repeated
/// chunks) gives exactly what zarrs' own subset decoding gives, on every fixture.
#[test]
fn engine_reads_equal_zarrs_reads() {
    let mut rng = SmallRng::seed_from_u64(11);
    let mut checked = 0;
    for name in super::super::fixtures::names() {
        let Ok(mut a) = ZarrArray::open(fixture(&name)) else {
            continue;
        };
        let elem = a.elem();
        for threads in [1usize, 3] {
            a.set_read_options(ReadOptions {
                threads: Some(threads),
                ..ReadOptions::default()
            })
            .unwrap();
            let mut boxes: Vec<Vec<Range<u64>>> =
                vec![a.metadata().shape.iter().map(|&n| 0..n).collect()];
            for _ in 0..6 {
                boxes.push(random_ranges(&mut rng, &a.metadata().shape));
            }
            for ranges in boxes {
                let (start, shape) = a.check_ranges(&ranges).unwrap();
                let mut want = vec![0x55u8; checked_bytes(&shape, elem).unwrap()];
                a.decode_into(&start, &shape, &mut want).unwrap();
                let got = host_bytes(&a.read(&ranges).to(&HOST_PROTO).unwrap());
                assert!(got == want, "{name} threads {threads} box {ranges:?}");
                checked += 1;
            }
            // Whole chunks, one of them twice.
            let grid = a.metadata().grid_shape.clone();
            let n: u64 = grid.iter().product::<u64>().min(50);
            let mut indices: Vec<Vec<u64>> = (0..n)
                .map(|mut lin| {
                    let mut idx = vec![0u64; grid.len()];
                    for ax in (0..grid.len()).rev() {
                        idx[ax] = lin % grid[ax];
                        lin /= grid[ax];
                    }
                    idx
                })
                .collect();
            if let Some(first) = indices.first().cloned() {
                indices.push(first);
            }
            let chunks = a.read_chunks(&indices).to(&HOST_PROTO).unwrap();
            for (idx, c) in indices.iter().zip(&chunks) {
                let (start, shape) = a.chunk_box(idx).unwrap();
                let mut want = vec![0u8; checked_bytes(&shape, elem).unwrap()];
                a.decode_into(&start, &shape, &mut want).unwrap();
                assert!(host_bytes(c) == want, "{name} chunk {idx:?}");
            }
        }
    }
    assert!(checked > 100, "only {checked} boxes checked");
}

const HOST_PROTO: BufferPrototype = BufferPrototype::Host;
