//! Random test data shared by the host and GPU tests: a reproducible RNG whose seed is
//! printed (and can be replayed with `DEVBUF_TEST_SEED`), random bytes, random indices.

#![allow(dead_code)]

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

/// A reproducible RNG; the seed is printed so failures can be replayed
/// (`DEVBUF_TEST_SEED=<seed>`).
pub fn rng(test: &str) -> SmallRng {
    let seed = std::env::var("DEVBUF_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().next_u64());
    println!("{test}: seed {seed}");
    SmallRng::seed_from_u64(seed)
}

/// An RNG with a fixed seed (tests whose data must be the same on every run).
pub fn seeded(seed: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed)
}

/// `n` random bytes, guaranteed not all zero when `n > 0`.
pub fn random_bytes(rng: &mut SmallRng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill_bytes(&mut v);
    if n > 0 && v.iter().all(|&b| b == 0) {
        v[0] = 1;
    }
    v
}

/// A random value in `0..n`.
pub fn below(rng: &mut SmallRng, n: usize) -> usize {
    rng.random_range(0..n)
}
