//! A time-bounded fuzz driver on proptest's strategies, runnable on stable Rust (the
//! `tests/fuzz_*.rs` harnesses).
//!
//! [`fuzz`] generates inputs from a strategy and checks each until `DEVBUF_FUZZ_SECS`
//! seconds (default 3: CI stays fast; set 60 or 600 to search longer) have passed, then
//! prints `fuzz <name>: <n> inputs in <s> s (seed <seed>)`. A check that fails or panics
//! is shrunk to a small failing input by proptest and fails the test with that input
//! and the seed; `DEVBUF_FUZZ_SEED=<seed>` replays a run (the same inputs, in the same
//! order, as far as the time allows), and `DEVBUF_FUZZ_TRACE=1` prints each input
//! before it is tried (to find the one a process died of).
//!
//! Checks return [`Outcome`]s so that a harness can tally what happened (e.g. how many
//! inputs were refused and how many read) and print it with the count.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};

/// Seconds each harness runs (`DEVBUF_FUZZ_SECS`, default 3).
pub fn fuzz_secs() -> f64 {
    std::env::var("DEVBUF_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .unwrap_or(3.0)
}

/// Whether `DEVBUF_FUZZ_STRICT` is set: findings that are tallied rather than failed by
/// default (e.g. a dependency's panic that devbuf caught) fail the harness.
pub fn strict() -> bool {
    std::env::var("DEVBUF_FUZZ_STRICT").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The seed of this run: `DEVBUF_FUZZ_SEED`, else from the clock.
fn seed() -> u64 {
    std::env::var("DEVBUF_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            t ^ (u64::from(std::process::id()) << 32)
        })
}

/// What a check saw, for the tally (`"refused"`, `"read"`, ...).
pub type Outcome = &'static str;

/// Tallies of outcomes, printed with the input count.
#[derive(Default)]
pub struct Tally(Mutex<BTreeMap<String, u64>>);

impl Tally {
    pub fn add(&self, what: &str) {
        *self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(what.to_string())
            .or_default() += 1;
    }

    pub fn get(&self, what: &str) -> u64 {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(what)
            .copied()
            .unwrap_or(0)
    }

    fn text(&self) -> String {
        let m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The result of one harness: inputs tried and the tally.
pub struct Report {
    pub inputs: u64,
    pub tally: Tally,
}

/// Runs `check` on inputs of `strategy` for [`fuzz_secs`] seconds (at least one input).
/// `check` returns an outcome to tally, or an error message (a failure). Panics in
/// `check` are failures too. Prints and returns the number of inputs.
pub fn fuzz<S>(
    name: &str,
    strategy: S,
    check: impl Fn(S::Value) -> Result<Outcome, String>,
) -> Report
where
    S: Strategy,
    S::Value: Debug,
{
    let seed = seed();
    let mut bytes = [0u8; 32];
    let mut x = seed;
    for chunk in bytes.chunks_mut(8) {
        // splitmix64
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        chunk.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    let config = Config {
        failure_persistence: None,
        max_shrink_time: 60_000,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
    let tally = Tally::default();
    let limit = Duration::from_secs_f64(fuzz_secs());
    // Printed first, so that a run that dies (out of memory, a signal) can be replayed.
    eprintln!("fuzz {name}: seed {seed} (DEVBUF_FUZZ_SEED)");
    let trace = std::env::var_os("DEVBUF_FUZZ_TRACE").is_some();
    let t0 = Instant::now();
    let mut n = 0u64;
    loop {
        let tree = match strategy.new_tree(&mut runner) {
            Ok(t) => t,
            Err(e) => panic!("fuzz {name}: the strategy gave up: {e}"),
        };
        if trace {
            eprintln!("fuzz {name}: input {n}: {:?}", tree.current());
        }
        let result = runner.run_one(tree, |v| match check(v) {
            Ok(what) => {
                tally.add(what);
                Ok(())
            }
            Err(msg) => Err(TestCaseError::fail(msg)),
        });
        n += 1;
        match result {
            Ok(_) => {}
            Err(TestError::Fail(why, input)) => panic!(
                "fuzz {name}: input {n} failed (seed {seed}; replay with DEVBUF_FUZZ_SEED={seed}): \
                 {why}\nminimal failing input: {input:#?}"
            ),
            Err(TestError::Abort(why)) => panic!("fuzz {name}: aborted (seed {seed}): {why}"),
        }
        if t0.elapsed() >= limit {
            break;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "fuzz {name}: {n} inputs in {secs:.1} s (seed {seed}){}{}",
        if tally.text().is_empty() { "" } else { ": " },
        tally.text()
    );
    Report { inputs: n, tally }
}

/// Extreme and ordinary 64-bit values for overwriting length and offset fields.
pub const EXTREME_U64: [u64; 14] = [
    0,
    1,
    2,
    7,
    8,
    63,
    64,
    65,
    1 << 31,
    1 << 32,
    i64::MAX as u64,
    1 << 63,
    u64::MAX - 1,
    u64::MAX,
];

/// How to damage a byte string.
#[derive(Clone, Debug)]
pub enum Damage {
    /// Flip bit `bit` of the byte at `pos` (modulo the length).
    Flip { pos: usize, bit: u8 },
    /// Set the byte at `pos` to `value`.
    Set { pos: usize, value: u8 },
    /// Write an extreme value into the aligned 8-byte word at `pos`.
    Word64 { pos: usize, value: u64 },
    /// Write a small (possibly negative) value into the aligned 4-byte word at `pos`.
    Word32 { pos: usize, value: i32 },
    /// Keep the first `len` bytes (modulo the length + 1).
    Truncate { len: usize },
    /// Append bytes.
    Extend { bytes: Vec<u8> },
    /// Copy `len` bytes from `from` to `to` (within the string).
    Splice { from: usize, to: usize, len: usize },
}

/// One damage to a byte string.
pub fn damage() -> impl Strategy<Value = Damage> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (any::<usize>(), 0u8..8).prop_map(|(pos, bit)| Damage::Flip { pos, bit }),
        3 => (any::<usize>(), any::<u8>()).prop_map(|(pos, value)| Damage::Set { pos, value }),
        2 => (any::<usize>(), proptest::sample::select(&EXTREME_U64[..]))
            .prop_map(|(pos, value)| Damage::Word64 { pos, value }),
        2 => (any::<usize>(), -5i32..40).prop_map(|(pos, value)| Damage::Word32 { pos, value }),
        1 => any::<usize>().prop_map(|len| Damage::Truncate { len }),
        1 => proptest::collection::vec(any::<u8>(), 1..32).prop_map(|bytes| Damage::Extend { bytes }),
        1 => (any::<usize>(), any::<usize>(), 1usize..64)
            .prop_map(|(from, to, len)| Damage::Splice { from, to, len }),
    ]
}

/// Applies `d` to `b`.
pub fn apply(b: &mut Vec<u8>, d: &Damage) {
    let n = b.len();
    match *d {
        Damage::Flip { pos, bit } if n > 0 => b[pos % n] ^= 1 << bit,
        Damage::Set { pos, value } if n > 0 => b[pos % n] = value,
        Damage::Word64 { pos, value } if n >= 8 => {
            let q = ((pos % n) & !7).min(n - 8);
            b[q..q + 8].copy_from_slice(&value.to_le_bytes());
        }
        Damage::Word32 { pos, value } if n >= 4 => {
            let q = ((pos % n) & !3).min(n - 4);
            b[q..q + 4].copy_from_slice(&value.to_le_bytes());
        }
        Damage::Truncate { len } => b.truncate(len % (n + 1)),
        Damage::Extend { ref bytes } => b.extend_from_slice(bytes),
        Damage::Splice { from, to, len } if n > 0 => {
            let len = len.min(n);
            let (from, to) = (from % (n - len + 1), to % (n - len + 1));
            b.copy_within(from..from + len, to);
        }
        _ => {}
    }
}

/// Up to `max` damages.
pub fn damages(max: usize) -> impl Strategy<Value = Vec<Damage>> {
    proptest::collection::vec(damage(), 1..=max)
}
