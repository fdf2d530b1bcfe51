//! When a GPU worker takes another claim: the split of a read between the CPU workers
//! and the GPU workers, who claim from one counter.
//!
//! A claim on the GPU finishes after a latency that hardly depends on how much else
//! runs (nvCOMP decodes each chunk with one thread block: a 4 MiB zstd chunk takes
//! about 15 ms on an H100, however many run beside it), plus the time to read its
//! stored bytes. Near the end of a read that latency is longer than the CPU workers
//! need for everything left, and a claim the GPU takes then only delays the read. So
//! a GPU worker takes a claim only while its estimated latency (measured on this
//! read's earlier claims with device events, or a prior from the chunk size before
//! the first one completes) is below the time the CPU workers would need for all the
//! units not yet claimed, at their rate measured on this read (a prior per core
//! before that).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::codec::Compression;

/// Whether GPU workers consult the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Schedule {
    /// Take claims while there are any (`Decoder::Gpu`).
    Always,
    /// Each worker's first claim unconditionally, then the model (`Decoder::Both`:
    /// both were asked for).
    AfterFirst,
    /// The model from the first claim on (`Decoder::Auto`).
    Model,
}

/// The model's shared state for one read.
pub(crate) struct GpuModel {
    schedule: Schedule,
    start: Instant,
    cell_bytes: usize,
    cpu_workers: usize,
    /// Prior decoded bytes per second of one CPU worker.
    core_rate: f64,
    /// Prior latency of one GPU claim, microseconds.
    prior_us: u64,
    /// Measured latency of this read's GPU claims (moving average; 0: none yet).
    latency_us: AtomicU64,
    /// The read has no more units than the device decodes at once ([`GpuModel::one_wave`]).
    wave: bool,
    /// In a one-wave read, the model advised a GPU claim once: every later claim is
    /// advised too.
    committed: std::sync::atomic::AtomicBool,
}

/// Prior decode rate of one core (decoded bytes per second): zstd-1 float32 on the
/// H100 machine's cores; deflate (libdeflate) 1.6x the 0.1 GB/s per core that the
/// earlier streaming inflater reached there (the ratio measured on this machine's
/// cores: docs/performance.md, "gzip").
fn core_rate(c: Compression) -> f64 {
    match c {
        Compression::Gzip | Compression::Zlib => 0.16e9,
        // LZ4 blocks decode several times faster than zstd frames on a core.
        Compression::Lz4 => 2.0e9,
        _ => 0.7e9,
    }
}

/// Prior nvCOMP rate of one chunk (decoded bytes per second; one thread block
/// decodes it): 4 MiB zstd chunks take about 15 ms on the H100; deflate is far
/// slower per chunk (`bench_zarrs`' gzip-1 float32 stores with `Decoder::Gpu`, every
/// chunk in flight at once: 0.73 GB/s for 128 chunks of 4 MiB, 0.19 for 32 of 16 MiB,
/// so one chunk decodes at about 6 MB/s).
///
/// numcodecs' LZ4 blocks: 51-57 MB/s per chunk on the H100 (`Decoder::Gpu` with every
/// chunk in flight: 6.6 GB/s for 128 chunks of 4 MiB, 1.8 for 32 of 16 MiB), while 16
/// cores decode them at 30-38 GB/s, so the GPU never pays at these sizes; the prior
/// is a little below the measurement, which makes `Both` decline its forced claim of
/// a 4 MiB chunk (about 0.1 s, [`FORCED_MAX_S`]).
fn chunk_rate(c: Compression) -> f64 {
    match c {
        Compression::Gzip | Compression::Zlib => 0.008e9,
        Compression::Lz4 => 0.04e9,
        _ => 0.3e9,
    }
}

/// A claim `Decoder::Both` forces on a GPU worker may be expected to take this long
/// even when the CPU workers would finish sooner: small reads still use both, and so
/// do 16 MiB zstd chunks (about 60 ms for one on the GPU, as long as the CPU workers
/// take for all 32 of a 512 MiB array), but not 4 MiB gzip chunks.
const FORCED_MAX_S: f64 = 0.1;

/// Prior rate of one reader thread moving stored bytes from the page cache into a
/// page-locked slot (bytes per second).
const READER_RATE: f64 = 1.5e9;

impl GpuModel {
    /// The model for a read of units of `cell_bytes` with `cpu_workers` CPU workers,
    /// GPU claims of `claim_units` units read by `readers` threads each; `wave`: all
    /// the read's units fit in one wave of the device (see [`one_wave`](Self::one_wave)).
    pub(crate) fn new(
        schedule: Schedule,
        compression: Compression,
        cell_bytes: usize,
        claim_units: usize,
        cpu_workers: usize,
        readers: usize,
        wave: bool,
    ) -> GpuModel {
        let claim = (claim_units * cell_bytes) as f64;
        let read_s = claim / 1.4 / (readers.max(1) as f64 * READER_RATE);
        let decode_s = 2e-3 + cell_bytes as f64 / chunk_rate(compression);
        GpuModel {
            schedule,
            start: Instant::now(),
            cell_bytes,
            cpu_workers,
            core_rate: core_rate(compression),
            prior_us: ((read_s + decode_s) * 1e6) as u64,
            latency_us: AtomicU64::new(0),
            wave,
            committed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether a read of `units` units fits in one wave of a device of
    /// `multiprocessors`: nvCOMP decodes each chunk with one thread block, so a call of
    /// that many chunks or fewer lasts about as long as a call of one (an H100, 4 MiB
    /// zstd-1 chunks: one alone 12.6 ms, 128 in one call 16.9). In such a read the
    /// chunks the CPU workers take save the device no time, while their cores slow the
    /// device's readers (`Both` on 128 chunks of 4 MiB: the GPU took 80, the CPU
    /// workers 48, and the device still finished after a `Gpu` read of all 128, 0.85 of
    /// its rate; session 41). So once the model advises one GPU claim in such a read,
    /// it advises the rest.
    pub(crate) fn one_wave(units: usize, multiprocessors: usize) -> bool {
        units <= multiprocessors
    }

    /// The latency a GPU claim is expected to take now, microseconds.
    pub(crate) fn expected_us(&self) -> u64 {
        match self.latency_us.load(Ordering::Relaxed) {
            0 => self.prior_us,
            m => m,
        }
    }

    /// Records the measured latency of one GPU claim (claim to placed).
    pub(crate) fn observe(&self, us: u64) {
        let us = us.max(1);
        let _ = self
            .latency_us
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |m| {
                Some(if m == 0 { us } else { (m + us) / 2 })
            });
    }

    /// Whether a GPU worker should take another claim, with `remaining` units not yet
    /// claimed (this claim's among them) and `cpu_done` units decoded by the CPU
    /// workers so far; `first`: the worker has taken none yet.
    pub(crate) fn should_claim(&self, first: bool, remaining: usize, cpu_done: u64) -> bool {
        let consult = match self.schedule {
            Schedule::Always => false,
            Schedule::AfterFirst => !first,
            Schedule::Model => true,
        };
        !consult || self.advises(remaining, cpu_done)
    }

    /// What the model says of another GPU claim, whatever the schedule: whether its
    /// expected latency is below the time the CPU workers would need for the
    /// `remaining` units (`cpu_done`: units they decoded so far).
    pub(crate) fn advises(&self, remaining: usize, cpu_done: u64) -> bool {
        if self.cpu_workers == 0 || self.committed.load(Ordering::Relaxed) {
            return true;
        }
        let pays = (self.expected_us() as f64) * 1e-6 <= self.cpu_seconds(remaining, cpu_done);
        if pays && self.wave {
            self.committed.store(true, Ordering::Relaxed);
        }
        pays
    }

    /// Whether `Decoder::Both` should still give a GPU worker the first claim the model
    /// would not take (one batch): only when its expected latency is below the CPU
    /// workers' time for the `remaining` units or [`FORCED_MAX_S`], whichever is
    /// longer. A longer one would keep the whole read waiting for it (a 4 MiB gzip
    /// chunk takes nvCOMP most of a second, the CPU workers a quarter of that for 128).
    pub(crate) fn forced_claim_pays(&self, remaining: usize, cpu_done: u64) -> bool {
        let limit = match self.cpu_workers {
            0 => f64::INFINITY,
            _ => self.cpu_seconds(remaining, cpu_done).max(FORCED_MAX_S),
        };
        (self.expected_us() as f64) * 1e-6 <= limit
    }

    /// The CPU workers' time for `remaining` units, at their rate measured on this
    /// read once each finished a unit or two (`cpu_done` so far), a prior before.
    fn cpu_seconds(&self, remaining: usize, cpu_done: u64) -> f64 {
        let elapsed = self.start.elapsed().as_secs_f64();
        let prior = self.cpu_workers as f64 * self.core_rate;
        // Measured once every CPU worker has finished a unit or two.
        let measured = cpu_done as f64 * self.cell_bytes as f64 / elapsed.max(1e-6);
        let rate = if cpu_done as usize >= self.cpu_workers && elapsed > 2e-3 {
            measured
        } else {
            prior
        };
        remaining as f64 * self.cell_bytes as f64 / rate.max(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_chunks_stay_on_the_cpu_small_ones_go_to_the_gpu() {
        let mib = 1usize << 20;
        // 512 MiB of 16 MiB zstd chunks, 14 CPU workers: one chunk takes the GPU
        // longer than the CPU workers need for all of them.
        let m = GpuModel::new(
            Schedule::Model,
            Compression::Zstd,
            16 * mib,
            3,
            14,
            4,
            false,
        );
        assert!(!m.should_claim(true, 32, 0));
        // 4 MiB chunks: the GPU helps at the start, not for the last few.
        let m = GpuModel::new(
            Schedule::Model,
            Compression::Zstd,
            4 * mib,
            11,
            14,
            4,
            false,
        );
        assert!(m.should_claim(true, 128, 0));
        assert!(!m.should_claim(false, 8, 0));
        // Both: the first claim whatever the model says; Gpu: always.
        let m = GpuModel::new(
            Schedule::AfterFirst,
            Compression::Zstd,
            16 * mib,
            3,
            14,
            4,
            false,
        );
        assert!(m.should_claim(true, 1, 0));
        // ... though the model would not take it (the worker then claims one batch,
        // its latency being well under a second).
        assert!(!m.advises(32, 0));
        assert!(m.forced_claim_pays(32, 0));
        // A 4 MiB gzip chunk would keep the read waiting far longer than the CPU
        // workers need for all 128: not even the forced claim.
        let g = GpuModel::new(
            Schedule::AfterFirst,
            Compression::Gzip,
            4 * mib,
            11,
            14,
            4,
            false,
        );
        assert!(!g.advises(128, 0));
        assert!(!g.forced_claim_pays(128, 0));
        // 256 KiB gzip chunks go to the GPU (measured: 7.7 GB/s there, 2 on 16 cores).
        let g = GpuModel::new(
            Schedule::Model,
            Compression::Gzip,
            256 << 10,
            256,
            14,
            4,
            false,
        );
        assert!(g.advises(2048, 0));
        // numcodecs' LZ4: 4 and 16 MiB chunks are not worth one GPU claim (16 cores
        // decode them at 30-38 GB/s).
        for mib_each in [4, 16] {
            let l = GpuModel::new(
                Schedule::AfterFirst,
                Compression::Lz4,
                mib_each * mib,
                1,
                14,
                4,
                false,
            );
            assert!(!l.forced_claim_pays(512 / mib_each, 0), "{mib_each} MiB");
        }
        // A small read: the forced claim is taken (tests of both decoders use small
        // arrays).
        let small = GpuModel::new(
            Schedule::AfterFirst,
            Compression::Zstd,
            64 << 10,
            1,
            14,
            4,
            false,
        );
        assert!(small.forced_claim_pays(4, 0));
        assert!(!m.should_claim(false, 1, 0));
        let m = GpuModel::new(
            Schedule::Always,
            Compression::Zstd,
            16 * mib,
            3,
            14,
            4,
            false,
        );
        assert!(m.should_claim(false, 1, 0));
        // No CPU workers: the GPU takes everything.
        let m = GpuModel::new(Schedule::Model, Compression::Zstd, 16 * mib, 3, 0, 4, false);
        assert!(m.should_claim(false, 1, 0));
    }

    #[test]
    fn in_a_one_wave_read_the_gpu_takes_the_rest_once_it_took_a_claim() {
        let mib = 1usize << 20;
        assert!(GpuModel::one_wave(128, 132));
        assert!(!GpuModel::one_wave(512, 132));
        // 128 chunks of 4 MiB, 14 CPU workers: the first claim pays (the CPU workers
        // would need longer for all 128), and near the end the model still advises
        // claims, where without the wave it leaves the rest to the CPU workers.
        let wave = GpuModel::new(Schedule::Model, Compression::Zstd, 4 * mib, 16, 14, 6, true);
        let plain = GpuModel::new(
            Schedule::Model,
            Compression::Zstd,
            4 * mib,
            16,
            14,
            6,
            false,
        );
        assert!(wave.should_claim(true, 128, 0));
        assert!(plain.should_claim(true, 128, 0));
        assert!(wave.should_claim(false, 8, 0));
        assert!(!plain.should_claim(false, 8, 0));
        // A first claim that does not pay commits nothing: 16 MiB chunks stay on the CPU.
        let big = GpuModel::new(Schedule::Model, Compression::Zstd, 16 * mib, 3, 14, 6, true);
        assert!(!big.should_claim(true, 32, 0));
        assert!(!big.should_claim(false, 8, 0));
    }

    #[test]
    fn measured_latency_replaces_the_prior() {
        let m = GpuModel::new(
            Schedule::Model,
            Compression::Zstd,
            1 << 20,
            40,
            14,
            4,
            false,
        );
        let prior = m.expected_us();
        m.observe(prior * 4);
        assert_eq!(m.expected_us(), prior * 4);
        m.observe(prior * 2);
        assert_eq!(m.expected_us(), prior * 3);
    }
}
