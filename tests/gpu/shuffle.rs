//! `ops::unshuffle` (blosc's and HDF5's byte shuffle undone on the device) against a
//! host oracle: type sizes with and without the vector kernel (2, 4, 8, 16 with it; 3
//! and 5 through the strided copy), block lengths that are and are not multiples of
//! 16, misaligned offsets and strides (the strided copy again), groups and blocks with
//! gaps between them (the gap bytes must stay as they were), on the legacy stream and
//! on a stream; refusals before any device work.

use devbuf::__test::ops::{self, ShuffledBlocks};
use devbuf::Error;
use devbuf::cuda::{DeviceBuffer, Stream};
use rand::Rng;

use crate::common::*;

/// What `unshuffle` must leave in a destination that held `dst` before.
fn oracle(src: &[u8], dst: &[u8], b: &ShuffledBlocks) -> Vec<u8> {
    let mut want = dst.to_vec();
    for g in 0..b.groups {
        for k in 0..b.blocks {
            let base = b.offset + g * b.ustride + k * b.bstride;
            for i in 0..b.n {
                for j in 0..b.typesize {
                    want[base + i * b.typesize + j] = src[base + j * b.n + i];
                }
            }
        }
    }
    want
}

gpu_test! {
    fn unshuffle_matches_a_host_oracle() {
        let c = ctx();
        let mut r = rng("unshuffle_matches_a_host_oracle");
        let stream = Stream::new(&c).unwrap();
        let mut cases = 0;
        for typesize in [2usize, 3, 4, 5, 8, 16] {
            // (elements per block, offset, groups, blocks, extra bytes between blocks)
            for (n, offset, groups, blocks, gap) in [
                (16usize, 0usize, 1usize, 1usize, 0usize),
                (4096, 0, 3, 5, 0),
                (4096, 0, 2, 3, 16),
                (1000, 0, 2, 3, 0),
                (64, 4, 2, 2, 0),
                (4112, 16, 1, 7, 3),
                (65536, 0, 4, 4, 0),
            ] {
                let block = n * typesize;
                let bstride = block + gap;
                let ustride = (blocks * bstride + 32).next_multiple_of(16);
                let len = offset + (groups - 1) * ustride + (blocks - 1) * bstride + block + 13;
                let b = ShuffledBlocks { offset, groups, ustride, blocks, bstride, n, typesize };
                let src = random_bytes(&mut r, len);
                let before = random_bytes(&mut r, len);
                let (sd, dd) = (DeviceBuffer::from_slice(&c, &src).unwrap(), DeviceBuffer::from_slice(&c, &before).unwrap());
                let on_stream = r.random_bool(0.5);
                ops::unshuffle(&sd, &dd, &b, on_stream.then_some(&stream)).unwrap();
                stream.synchronize().unwrap();
                assert!(dd.to_vec::<u8>().unwrap() == oracle(&src, &before, &b), "{b:?} on a stream: {on_stream}");
                cases += 1;
            }
        }
        assert_eq!(cases, 42);
        // Nothing to do.
        let d = c.allocate(64).unwrap();
        ops::unshuffle(&d, &c.allocate(64).unwrap(), &ShuffledBlocks { offset: 0, groups: 0, ustride: 0, blocks: 1, bstride: 0, n: 4, typesize: 4 }, None).unwrap();
        // Refusals: past the end of either buffer, overlapping buffers, read-only, overflow.
        let one = ShuffledBlocks { offset: 0, groups: 1, ustride: 0, blocks: 1, bstride: 0, n: 16, typesize: 4 };
        let e = ops::unshuffle(&c.allocate(63).unwrap(), &d, &one, None).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)) && e.to_string().contains("past the source"), "{e}");
        let e = ops::unshuffle(&d, &c.allocate(32).unwrap(), &one, None).unwrap_err();
        assert!(e.to_string().contains("past the destination"), "{e}");
        let big = c.allocate(256).unwrap();
        let e = ops::unshuffle(&big.slice(0, 128).unwrap(), &big.slice(64, 128).unwrap(), &one, None).unwrap_err();
        assert!(e.to_string().contains("overlap"), "{e}");
        let e = ops::unshuffle(&d, &c.allocate(64).unwrap().read_only(), &one, None).unwrap_err();
        assert!(matches!(e, Error::ReadOnly(_)), "{e}");
        let e = ops::unshuffle(&c.allocate(256).unwrap(), &c.allocate(256).unwrap(), &ShuffledBlocks { blocks: 3, bstride: 32, ..one }, None).unwrap_err();
        assert!(e.to_string().contains("overlap"), "{e}");
        let e = ops::unshuffle(&c.allocate(256).unwrap(), &c.allocate(256).unwrap(), &ShuffledBlocks { groups: 2, ustride: 0, ..one }, None).unwrap_err();
        assert!(e.to_string().contains("overlap"), "{e}");
        let huge = ShuffledBlocks { groups: usize::MAX, ustride: usize::MAX, ..one };
        let e = ops::unshuffle(&d, &c.allocate(64).unwrap(), &huge, None).unwrap_err();
        assert!(e.to_string().contains("overflow"), "{e}");
    }
}
