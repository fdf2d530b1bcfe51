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
//!
//! The seed is printed (flushed, to stdout and stderr, past the test harness's output
//! capture) before the first input, so that a process that dies leaves it in the log.
//! Each harness process caps its own address space ([`cap_memory`]: `DEVBUF_FUZZ_MEM_GB`,
//! default 8 GiB, `RLIMIT_AS`), in `cargo test` as in the CI's fuzz step: an input that
//! makes devbuf allocate without bound fails that harness (a fallible allocation is an
//! error; an infallible one aborts, and the abort names the harnesses running, their
//! seeds and the input) instead of pushing the machine out of memory. An input after
//! which the process's peak resident memory grew by [`RSS_REPORT_STEP`] or more is
//! printed with the peak.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
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
    // The cap first, then the seed, before any input: a run that dies (out of memory, a
    // signal) leaves the seed in the log and can be replayed.
    let cap = cap_memory();
    let cap_text = match cap {
        Ok(Some(bytes)) => format!("address space capped at {:.1} GiB", gib(bytes)),
        Ok(None) => "no memory cap (DEVBUF_FUZZ_MEM_GB=0)".to_string(),
        Err(e) => format!("no memory cap ({e})"),
    };
    say(&format!(
        "fuzz {name}: seed {seed} (replay with DEVBUF_FUZZ_SEED={seed}); {cap_text}\n"
    ));
    let running = Running::start(name, seed, &cap_text);
    let trace = std::env::var_os("DEVBUF_FUZZ_TRACE").is_some();
    let t0 = Instant::now();
    let mut n = 0u64;
    let mut reported_rss = peak_rss();
    loop {
        let tree = match strategy.new_tree(&mut runner) {
            Ok(t) => t,
            Err(e) => panic!("fuzz {name}: the strategy gave up: {e}"),
        };
        running.at(n);
        let shown = tree.current();
        if trace {
            eprintln!("fuzz {name}: input {n}: {shown:?}");
        }
        let result = runner.run_one(tree, |v| match check(v) {
            Ok(what) => {
                tally.add(what);
                Ok(())
            }
            Err(msg) => Err(TestCaseError::fail(msg)),
        });
        let rss = peak_rss();
        if rss >= reported_rss.saturating_add(RSS_REPORT_STEP) {
            reported_rss = rss;
            let input: String = format!("{shown:?}").chars().take(2000).collect();
            say(&format!(
                "fuzz {name}: input {n} raised the peak resident memory to {:.2} GiB \
                 (seed {seed}): {input}\n",
                gib(rss)
            ));
        }
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
    drop(running);
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "fuzz {name}: {n} inputs in {secs:.1} s (seed {seed}; peak resident {:.2} GiB){}{}",
        gib(peak_rss()),
        if tally.text().is_empty() { "" } else { ": " },
        tally.text()
    );
    Report { inputs: n, tally }
}

/// Writes `text` to stdout and stderr, flushed, through the handles rather than
/// `print!` (which the test harness captures: a killed process would lose it).
fn say(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    drop(out);
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// The default of `DEVBUF_FUZZ_MEM_GB`: the address space of a fuzz harness process, in
/// GiB.
pub const DEFAULT_MEM_GIB: f64 = 8.0;

/// Growth of the peak resident memory after which the input is printed.
pub const RSS_REPORT_STEP: u64 = 1 << 30;

/// The process's peak resident memory so far, bytes (`getrusage`).
pub fn peak_rss() -> u64 {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // Safety: `getrusage` writes a `rusage` into the pointer it is given.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr()) } != 0 {
        return 0;
    }
    // Safety: initialised (zeroed, then written by `getrusage`).
    let kib = unsafe { u.assume_init() }.ru_maxrss;
    u64::try_from(kib).unwrap_or(0).saturating_mul(1024)
}

/// Caps this process's address space (`RLIMIT_AS`) at `DEVBUF_FUZZ_MEM_GB` GiB (default
/// [`DEFAULT_MEM_GIB`]; `0` for no cap) unless it is capped lower already (`ulimit -v`),
/// and returns the cap in force. The cap is of the whole process (every test of the
/// binary; each `tests/fuzz_*.rs` is its own) and stays until it exits.
///
/// Address space, not resident memory (which cannot be capped): what a process maps
/// counts whether it is touched or not, e.g. glibc reserves 64 MiB of address space per
/// malloc arena (up to 8 per core), so the arenas are limited to 8 here, whatever the
/// machine's cores. A CUDA context reserves far more than any cap: the harnesses run
/// no device code.
pub fn cap_memory() -> Result<Option<u64>, String> {
    let gb = match std::env::var("DEVBUF_FUZZ_MEM_GB") {
        Ok(v) => v
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|g| g.is_finite() && *g >= 0.0)
            .ok_or_else(|| {
                format!("DEVBUF_FUZZ_MEM_GB={v:?}: expected a number of GiB, 0 for no cap")
            })?,
        Err(_) => DEFAULT_MEM_GIB,
    };
    if gb == 0.0 {
        return Ok(None);
    }
    let want = (gb * (1u64 << 30) as f64) as libc::rlim_t;
    #[cfg(target_env = "gnu")]
    // Safety: `mallopt` only sets a parameter of glibc's allocator.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 8);
    }
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // Safety: `getrlimit` writes the limit into `r`.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut r) } != 0 {
        return Err(format!("getrlimit: {}", std::io::Error::last_os_error()));
    }
    if r.rlim_cur != libc::RLIM_INFINITY && r.rlim_cur <= want {
        return Ok(Some(r.rlim_cur));
    }
    let cur = if r.rlim_max == libc::RLIM_INFINITY {
        want
    } else {
        want.min(r.rlim_max)
    };
    let new = libc::rlimit {
        rlim_cur: cur,
        rlim_max: r.rlim_max,
    };
    // Safety: `setrlimit` reads the limit from `new`.
    if unsafe { libc::setrlimit(libc::RLIMIT_AS, &new) } != 0 {
        return Err(format!("setrlimit: {}", std::io::Error::last_os_error()));
    }
    Ok(Some(cur))
}

/// The harnesses running in this process, for a message when it aborts (an infallible
/// allocation that the cap refused aborts the process; the test harness cannot report
/// that): what to print, and the input each is at.
const SLOTS: usize = 8;

struct Abort {
    /// `fuzz <name>: the process aborted at input `
    head: &'static [u8],
    /// ` (seed ..., replay with ...; the memory cap)\n`
    tail: &'static [u8],
}

static RUNNING: [AtomicPtr<Abort>; SLOTS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; SLOTS];
static AT_INPUT: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

/// A harness's place in [`RUNNING`] while it runs.
struct Running(Option<usize>);

impl Running {
    fn start(name: &str, seed: u64, cap: &str) -> Running {
        static HANDLER: std::sync::Once = std::sync::Once::new();
        HANDLER.call_once(|| {
            // Safety: installs a handler that only reads atomics and static bytes and
            // calls `write`, `signal` and `raise` (async-signal-safe).
            unsafe {
                libc::signal(
                    libc::SIGABRT,
                    on_abort as extern "C" fn(libc::c_int) as libc::sighandler_t,
                );
            }
        });
        let msg: &'static Abort = Box::leak(Box::new(Abort {
            head: Box::leak(
                format!("fuzz {name}: the process aborted at input ")
                    .into_bytes()
                    .into_boxed_slice(),
            ),
            tail: Box::leak(
                format!(
                    " (seed {seed}; replay with DEVBUF_FUZZ_SEED={seed}, DEVBUF_FUZZ_TRACE=1 \
                     prints each input; {cap}, DEVBUF_FUZZ_MEM_GB)\n"
                )
                .into_bytes()
                .into_boxed_slice(),
            ),
        }));
        let p = msg as *const Abort as *mut Abort;
        let slot = (0..SLOTS).find(|&i| {
            RUNNING[i]
                .compare_exchange(std::ptr::null_mut(), p, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        });
        Running(slot)
    }

    fn at(&self, n: u64) {
        if let Some(i) = self.0 {
            AT_INPUT[i].store(n, Ordering::Relaxed);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            RUNNING[i].store(std::ptr::null_mut(), Ordering::SeqCst);
        }
    }
}

extern "C" fn on_abort(sig: libc::c_int) {
    let write = |b: &[u8]| {
        // Safety: writes `b` to standard error.
        unsafe { libc::write(2, b.as_ptr().cast(), b.len()) };
    };
    for (slot, at) in RUNNING.iter().zip(&AT_INPUT) {
        let p = slot.load(Ordering::SeqCst);
        if p.is_null() {
            continue;
        }
        // Safety: slots hold leaked (never freed) messages.
        let m = unsafe { &*p };
        write(m.head);
        let mut digits = [0u8; 20];
        let mut k = digits.len();
        let mut v = at.load(Ordering::Relaxed);
        loop {
            k -= 1;
            digits[k] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        write(&digits[k..]);
        write(m.tail);
    }
    // Safety: back to the default action, then the signal again: the process aborts
    // as it would have.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
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
