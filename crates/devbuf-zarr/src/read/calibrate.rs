//! What [`Decoder::Auto`](super::Decoder::Auto) runs on a device read that nvCOMP
//! could decode: the fastest of `Cpu`, `Gpu` and `Both` as measured in this process on
//! this device, for this codec chain, chunk size and read size.
//!
//! No fixed prior decides: the first large reads of a kind each run one decoder not
//! measured yet (`Gpu`, then `Cpu`, then `Both` where neither of the two dominates, see
//! [`BOTH_TRIAL`]; an explicit `Both` read counts too), and every later read runs the
//! fastest measured, refining
//! its rate with the read's own timing; every [`REPROBE_EVERY`]th read (every
//! [`REPROBE_FAR`]th where it is far behind) runs the runner-up again, so a rate that
//! changed (a busier machine, a warmer page cache) is noticed. Explicit `Cpu`, `Gpu`
//! and `Both` reads of the kind are recorded too. Reads below [`MIN_CALIBRATED_BYTES`]
//! keep the per-claim cost model (one read of each decoder would cost more than it
//! can gain there).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use super::Decoder;

/// Reads smaller than this (decoded bytes) are not calibrated: they run the cost
/// model of [`Decoder::Auto`] (CPU workers, and GPU workers where a claim pays).
pub(crate) const MIN_CALIBRATED_BYTES: usize = 64 << 20;

/// Every this many calibrated reads of one kind, the runner-up runs once more (when
/// within [`CLOSE`] of the fastest).
pub(crate) const REPROBE_EVERY: u64 = 8;

/// Every this many, a runner-up further behind.
pub(crate) const REPROBE_FAR: u64 = 64;

/// A runner-up within this factor of the fastest is re-measured every
/// [`REPROBE_EVERY`] reads.
pub(crate) const CLOSE: f64 = 1.5;

/// `Both` splits the chunks between the devices' decoders, so it can beat the better of
/// `Gpu` and `Cpu` only by about the other's share: `Auto` tries it once the slower of
/// the two reaches this fraction of the faster one's rate (measured on the H100 machine,
/// 1 MiB gzip-1 chunks: `Gpu` 2.72 GB/s, `Cpu` 3.29, `Both` 4.69; where one is 3x the
/// other, `Both` gained nothing). Not half: on the 512x512 zstd-3 uint16 image `Cpu`
/// reads at 0.40-0.41 of `Gpu` (H100 7.99 / 19.43 GB/s, H200 7.04 / 17.79) and `Both`
/// at 1.15 of it (H100, session 41: `Both` 19.4-21.0 against `Gpu` 17.5-17.9), which
/// `Auto` never tried with a threshold of a half.
pub(crate) const BOTH_TRIAL: f64 = 0.35;

/// A read that allocated its staging was measured at least this many times slower than
/// warm (page-locked memory costs about a millisecond per megabyte): a cold rate this
/// far below the fastest is not measured again.
pub(crate) const COLD_PENALTY_MAX: f64 = 4.0;

/// The kind of read a rate belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Kind {
    /// Device ordinals: one for a read onto one device, each device of a spread read.
    pub devices: Vec<usize>,
    /// How a spread read lays the selection over its devices (`""` for one device).
    pub spread: &'static str,
    /// The codec chain as the engine describes it (`"zstd"`, `"sharded zstd"`, ...).
    pub codecs: String,
    /// log2 of the decoded bytes of one chunk (inner chunk).
    pub chunk_log2: u32,
    /// log4 of the read's decoded bytes (reads within a factor 4 share rates).
    pub read_log4: u32,
    /// Worker threads of the read (of each device's part for a spread read).
    pub threads: usize,
}

impl Kind {
    pub(crate) fn new(
        device: usize,
        codecs: String,
        chunk_bytes: usize,
        read_bytes: usize,
        threads: usize,
    ) -> Kind {
        Kind {
            devices: vec![device],
            spread: "",
            codecs,
            chunk_log2: usize::BITS - chunk_bytes.max(1).leading_zeros(),
            read_log4: (usize::BITS - read_bytes.max(1).leading_zeros()) / 2,
            threads,
        }
    }

    /// A read spread over `devices` (`spread`: its layout), measured as a whole: its
    /// parts share the host's cores and page cache, so a part's rate depends on what
    /// the others run, and every part runs the same decoder.
    pub(crate) fn spread(
        devices: Vec<usize>,
        spread: &'static str,
        codecs: String,
        chunk_bytes: usize,
        read_bytes: usize,
        threads: usize,
    ) -> Kind {
        Kind {
            devices,
            spread,
            ..Kind::new(0, codecs, chunk_bytes, read_bytes, threads)
        }
    }
}

/// One decoder's measured rate for one kind of read.
#[derive(Clone, Copy, Debug)]
struct Sample {
    /// Decoded bytes per second.
    rate: f64,
    /// Every read behind it allocated page-locked staging (a cost later reads do not
    /// pay): the rate may be far below the decoder's.
    cold: bool,
    /// Reads behind it.
    reads: u32,
}

/// Measured rates of each decoder for one kind (`None`: not run).
#[derive(Clone, Debug, Default)]
struct Rates {
    cpu: Option<Sample>,
    gpu: Option<Sample>,
    both: Option<Sample>,
    /// Reads `Auto` chose a decoder for so far.
    reads: u64,
}

impl Rates {
    fn get(&mut self, d: Decoder) -> &mut Option<Sample> {
        match d {
            Decoder::Cpu => &mut self.cpu,
            Decoder::Gpu => &mut self.gpu,
            _ => &mut self.both,
        }
    }

    /// Measured decoders, fastest first.
    fn ranked(&self) -> Vec<(Decoder, f64)> {
        let mut v: Vec<(Decoder, f64)> = [
            (Decoder::Gpu, self.gpu),
            (Decoder::Cpu, self.cpu),
            (Decoder::Both, self.both),
        ]
        .into_iter()
        .filter_map(|(d, r)| r.map(|r| (d, r.rate)))
        .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        v
    }
}

fn table() -> &'static Mutex<HashMap<Kind, Rates>> {
    static TABLE: OnceLock<Mutex<HashMap<Kind, Rates>>> = OnceLock::new();
    TABLE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The decoder `Auto` runs for a read of `kind`, and why (for the read report).
pub(crate) fn choose(kind: &Kind) -> (Decoder, String) {
    let mut t = table().lock().unwrap_or_else(|p| p.into_inner());
    let r = t.entry(kind.clone()).or_default();
    r.reads += 1;
    // `Gpu` and `Cpu`, then `Both` where neither dominates (or once an explicit `Both`
    // read measured it). The two share the host's cores, so a split pays only where
    // neither decoder leaves the other little to add, and its trial read costs where it
    // loses (on a 64-core machine an earlier `Both` ran at 3-13 GB/s where `Gpu` and
    // `Cpu` ran at 15-31).
    let mut trial = vec![Decoder::Gpu, Decoder::Cpu];
    // A rate measured only on a read that set up its staging may be up to
    // COLD_PENALTY_MAX times below the decoder's (a fresh process's first `Cpu` read of
    // the u16 image: 3.65 GB/s cold, 7.99 warm, where `Gpu` read 18.2 and `Both` 20).
    let warm_bound = |s: Sample| match s.cold {
        true => s.rate * COLD_PENALTY_MAX,
        false => s.rate,
    };
    let close = match (r.gpu, r.cpu) {
        (Some(g), Some(c)) => {
            let (g, c) = (warm_bound(g), warm_bound(c));
            g.min(c) >= BOTH_TRIAL * g.max(c)
        }
        _ => false,
    };
    if r.both.is_some() || close {
        trial.push(Decoder::Both);
    }
    // In order, each decoder not run yet, or measured only on a read that set up its
    // staging (once more, at once: the next read of the same decoder reuses that
    // staging, while another decoder's read in between would cut the page-locked pool
    // for its own slots and leave this one cold again), unless even 4x faster it
    // would lose.
    let best_other = |r: &Rates, d: Decoder| {
        r.ranked()
            .into_iter()
            .filter(|&(o, _)| o != d)
            .map(|(_, g)| g)
            .fold(0.0, f64::max)
    };
    for &d in &trial {
        let sample = *r.get(d);
        match sample {
            None => {
                return (
                    d,
                    format!(
                        "Auto measures {}: not run yet on reads like this one",
                        name(d)
                    ),
                );
            }
            Some(s) if s.cold && s.reads < 2 && s.rate * COLD_PENALTY_MAX >= best_other(r, d) => {
                return (
                    d,
                    format!(
                        "Auto measures {} again: its only read here allocated page-locked \
                         staging ({:.1} GB/s)",
                        name(d),
                        s.rate / 1e9
                    ),
                );
            }
            Some(_) => {}
        }
    }
    let ranked = r.ranked();
    let best = ranked[0].1;
    let rates = ranked
        .iter()
        .map(|(d, g)| format!("{} {:.1}", name(*d), g / 1e9))
        .collect::<Vec<_>>()
        .join(", ");
    // The runner-up again every REPROBE_EVERY reads where it is close, every
    // REPROBE_FAR reads where it is far behind (a changed machine is still noticed,
    // at a small cost).
    let reprobe = match ranked.get(1) {
        Some(&(_, second)) if best <= CLOSE * second => r.reads.is_multiple_of(REPROBE_EVERY),
        Some(_) => r.reads.is_multiple_of(REPROBE_FAR),
        None => false,
    };
    let pick = if reprobe { ranked[1].0 } else { ranked[0].0 };
    let why = if pick == ranked[0].0 {
        format!(
            "Auto chose {}, the fastest measured here (GB/s: {rates})",
            name(pick)
        )
    } else {
        format!(
            "Auto measures {} again, the runner-up (GB/s: {rates})",
            name(pick)
        )
    };
    (pick, why)
}

/// Records what a read of `kind` with decoder `d` achieved: `bytes` decoded bytes in
/// `secs` seconds; `cold`: the read allocated page-locked staging.
///
/// Warm reads average with earlier warm reads and replace cold ones; a cold read after
/// a warm one counts only if it was faster (it measured the allocation more than the
/// decoder); two cold reads keep the faster.
pub(crate) fn record(kind: &Kind, d: Decoder, bytes: u64, secs: f64, cold: bool) {
    if secs <= 0.0 || bytes == 0 {
        return;
    }
    let rate = bytes as f64 / secs;
    let mut t = table().lock().unwrap_or_else(|p| p.into_inner());
    let slot = t.entry(kind.clone()).or_default().get(d);
    *slot = Some(match *slot {
        None => Sample {
            rate,
            cold,
            reads: 1,
        },
        Some(old) => match (old.cold, cold) {
            (true, false) => Sample {
                rate,
                cold,
                reads: old.reads + 1,
            },
            // A cold reprobe says little of a decoder measured warm, unless it was
            // faster even so.
            (false, true) if rate <= old.rate => old,
            (false, true) => Sample {
                rate,
                cold: false,
                reads: old.reads + 1,
            },
            (true, true) => Sample {
                rate: old.rate.max(rate),
                cold,
                reads: old.reads + 1,
            },
            (false, false) if old.rate == 0.0 => Sample {
                rate,
                cold,
                reads: old.reads + 1,
            },
            (false, false) => Sample {
                rate: (old.rate + rate) / 2.0,
                cold,
                reads: old.reads + 1,
            },
        },
    });
}

/// Records that a read of `kind` with decoder `d` failed: the decoder ranks last (a
/// rate of zero) until a read with it succeeds again.
pub(crate) fn record_failure(kind: &Kind, d: Decoder) {
    let mut t = table().lock().unwrap_or_else(|p| p.into_inner());
    let slot = t.entry(kind.clone()).or_default().get(d);
    let reads = slot.map_or(0, |s| s.reads) + 1;
    *slot = Some(Sample {
        rate: 0.0,
        cold: false,
        reads,
    });
}

fn name(d: Decoder) -> &'static str {
    match d {
        Decoder::Cpu => "cpu",
        Decoder::Gpu => "gpu",
        Decoder::Both => "both",
        Decoder::Auto => "auto",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(device: usize) -> Kind {
        Kind::new(device, "zstd (test)".into(), 1 << 20, 512 << 20, 16)
    }

    fn secs(rate: f64) -> f64 {
        (1u64 << 30) as f64 / rate
    }

    #[test]
    fn measures_each_decoder_then_runs_the_fastest_and_reprobes_the_runner_up() {
        let k = kind(90);
        let mut seen = Vec::new();
        for _ in 0..2 {
            let (d, why) = choose(&k);
            assert!(why.contains("not run yet"), "{why}");
            seen.push(d);
            let rate = if d == Decoder::Gpu { 25e9 } else { 8e9 };
            record(&k, d, 1 << 30, secs(rate), false);
        }
        // Gpu and Cpu; Both is not tried where the slower is below BOTH_TRIAL of the
        // faster (0.32 here), unless an explicit Both read measured it.
        assert_eq!(seen, [Decoder::Gpu, Decoder::Cpu]);
        let mut picks = Vec::new();
        for _ in 2..(2 * REPROBE_EVERY) {
            let (d, why) = choose(&k);
            assert!(why.contains("GB/s: gpu 25.0, cpu 8.0"), "{why}");
            picks.push(d);
        }
        // Read 64 re-measures the runner-up (far behind); the others run the fastest.
        assert_eq!(picks.iter().filter(|&&d| d == Decoder::Cpu).count(), 0);
        assert!(
            picks
                .iter()
                .all(|&d| d == Decoder::Gpu || d == Decoder::Cpu)
        );
        // An explicit Both read of the kind counts: 30 GB/s wins from then on.
        record(&k, Decoder::Both, 1 << 30, secs(30e9), false);
        let (d, why) = choose(&k);
        assert_eq!(d, Decoder::Both, "{why}");
    }

    #[test]
    fn both_is_tried_where_neither_decoder_dominates() {
        let k = kind(96);
        // gzip on the H100 machine: Gpu 2.72 GB/s, Cpu 3.29, Both 4.69.
        for (d, rate) in [(Decoder::Gpu, 2.72e9), (Decoder::Cpu, 3.29e9)] {
            assert_eq!(choose(&k).0, d);
            record(&k, d, 1 << 30, secs(rate), false);
        }
        let (d, why) = choose(&k);
        assert_eq!(d, Decoder::Both, "{why}");
        assert!(why.contains("not run yet"), "{why}");
        record(&k, Decoder::Both, 1 << 30, secs(4.69e9), false);
        let (d, why) = choose(&k);
        assert_eq!(d, Decoder::Both, "{why}");
        assert!(why.contains("the fastest measured"), "{why}");
    }

    #[test]
    fn a_far_runner_up_is_not_split_with_nor_often_reprobed() {
        let k = kind(93);
        assert_eq!(choose(&k).0, Decoder::Gpu);
        record(&k, Decoder::Gpu, 1 << 30, secs(10e9), false);
        assert_eq!(choose(&k).0, Decoder::Cpu);
        record(&k, Decoder::Cpu, 1 << 30, secs(33e9), false);
        // Cpu 3.3x ahead: Gpu runs once in REPROBE_FAR reads, Both never.
        let picks: Vec<Decoder> = (2..=REPROBE_FAR).map(|_| choose(&k).0).collect();
        assert!(!picks.contains(&Decoder::Both));
        assert_eq!(picks.iter().filter(|&&d| d == Decoder::Gpu).count(), 1);
    }

    #[test]
    fn a_slower_measurement_moves_the_choice() {
        let k = kind(91);
        for (d, rate) in [(Decoder::Gpu, 20e9), (Decoder::Cpu, 6e9)] {
            assert_eq!(choose(&k).0, d);
            record(&k, d, 1 << 30, secs(rate), false);
        }
        // Cpu at 0.3 of Gpu: below BOTH_TRIAL, so Gpu runs and Both is not tried.
        assert_eq!(choose(&k).0, Decoder::Gpu);
        // The GPU got slower (another process took it): twice (5.75 GB/s on average
        // now), and the two are close enough for Both to be tried; then the CPU wins.
        record(&k, Decoder::Gpu, 1 << 30, secs(1e9), false);
        record(&k, Decoder::Gpu, 1 << 30, secs(1e9), false);
        assert_eq!(choose(&k).0, Decoder::Both);
        record(&k, Decoder::Both, 1 << 30, secs(5e9), false);
        assert_eq!(choose(&k).0, Decoder::Cpu);
    }

    #[test]
    fn a_read_that_allocated_staging_is_measured_again_warm() {
        let k = kind(92);
        // Gpu's first read set up its staging: 4 GB/s. It runs again at once (before
        // Cpu's read could cut the pool for its own slots): 20 GB/s, warm.
        assert_eq!(choose(&k).0, Decoder::Gpu);
        record(&k, Decoder::Gpu, 1 << 30, secs(4e9), true);
        let (d, why) = choose(&k);
        assert_eq!(d, Decoder::Gpu);
        assert!(why.contains("allocated page-locked"), "{why}");
        record(&k, Decoder::Gpu, 1 << 30, secs(20e9), false);
        assert_eq!(choose(&k).0, Decoder::Cpu);
        record(&k, Decoder::Cpu, 1 << 30, secs(6e9), false);
        let (d, why) = choose(&k);
        assert_eq!(d, Decoder::Gpu);
        assert!(why.contains("gpu 20.0, cpu 6.0"), "{why}");
        // A later cold read does not drag the warm rate down.
        record(&k, Decoder::Gpu, 1 << 30, secs(2e9), true);
        assert!(choose(&k).1.contains("gpu 20.0"));
        // A cold rate far below the fastest is not measured again.
        let k = kind(94);
        choose(&k);
        record(&k, Decoder::Cpu, 1 << 30, secs(30e9), false);
        choose(&k);
        record(&k, Decoder::Gpu, 1 << 30, secs(2e9), true);
        assert_eq!(choose(&k).0, Decoder::Cpu);
    }

    #[test]
    fn a_cold_rate_does_not_rule_out_both() {
        let k = kind(97);
        // A fresh process on the u16 image: Gpu cold, again warm; Cpu's only read set
        // up its staging (3.65 GB/s, too far behind to be measured again), but warm it
        // could be close enough to Gpu for a split to pay: Both is tried.
        assert_eq!(choose(&k).0, Decoder::Gpu);
        record(&k, Decoder::Gpu, 1 << 30, secs(3e9), true);
        assert_eq!(choose(&k).0, Decoder::Gpu);
        record(&k, Decoder::Gpu, 1 << 30, secs(18.15e9), false);
        assert_eq!(choose(&k).0, Decoder::Cpu);
        record(&k, Decoder::Cpu, 1 << 30, secs(3.65e9), true);
        let (d, why) = choose(&k);
        assert_eq!(d, Decoder::Both, "{why}");
        record(&k, Decoder::Both, 1 << 30, secs(20e9), false);
        assert_eq!(choose(&k).0, Decoder::Both);
        // Warm and far behind, it does rule Both out.
        let k = kind(98);
        choose(&k);
        record(&k, Decoder::Gpu, 1 << 30, secs(18e9), false);
        choose(&k);
        record(&k, Decoder::Cpu, 1 << 30, secs(3.65e9), false);
        assert_eq!(choose(&k).0, Decoder::Gpu);
    }

    #[test]
    fn a_decoder_that_failed_ranks_last_until_it_succeeds() {
        let k = kind(95);
        assert_eq!(choose(&k).0, Decoder::Gpu);
        record_failure(&k, Decoder::Gpu);
        assert_eq!(choose(&k).0, Decoder::Cpu);
        record(&k, Decoder::Cpu, 1 << 30, secs(6e9), false);
        // Cpu from now on; Gpu only as the far runner-up, every REPROBE_FAR reads.
        let picks: Vec<Decoder> = (0..REPROBE_FAR).map(|_| choose(&k).0).collect();
        assert_eq!(picks.iter().filter(|&&d| d == Decoder::Gpu).count(), 1);
        // It succeeded that time at 20 GB/s: that rate replaces the zero.
        record(&k, Decoder::Gpu, 1 << 30, secs(20e9), false);
        assert!(choose(&k).1.contains("gpu 20.0"));
    }

    #[test]
    fn a_spread_read_is_its_own_kind() {
        let one = Kind::new(0, "zstd".into(), 1 << 20, 512 << 20, 16);
        let two = Kind::spread(
            vec![0, 1],
            "partition",
            "zstd".into(),
            1 << 20,
            512 << 20,
            16,
        );
        assert_ne!(one, two);
        assert_ne!(
            two,
            Kind::spread(
                vec![0, 1],
                "replicate",
                "zstd".into(),
                1 << 20,
                512 << 20,
                16
            )
        );
        assert_ne!(
            two,
            Kind::spread(
                vec![1, 0],
                "partition",
                "zstd".into(),
                1 << 20,
                512 << 20,
                16
            )
        );
    }

    #[test]
    fn kinds_are_separate_per_device_chunk_and_read_size() {
        let a = Kind::new(0, "zstd".into(), 1 << 20, 512 << 20, 16);
        assert_eq!(
            a,
            Kind::new(0, "zstd".into(), (1 << 20) + 1000, 600 << 20, 16)
        );
        assert_ne!(a, Kind::new(1, "zstd".into(), 1 << 20, 512 << 20, 16));
        assert_ne!(a, Kind::new(0, "zstd".into(), 4 << 20, 512 << 20, 16));
        assert_ne!(a, Kind::new(0, "zstd".into(), 1 << 20, 4 << 30, 16));
        assert_ne!(a, Kind::new(0, "zstd".into(), 1 << 20, 512 << 20, 8));
    }
}
