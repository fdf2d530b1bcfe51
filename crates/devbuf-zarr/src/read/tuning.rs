//! How the GPU workers of a device read are sized: claims in flight, claim sizes and
//! the ramp of a worker's first claims ([`Tuning`], from the read's
//! [`GpuTuning`](super::GpuTuning)), and the units a full claim takes
//! ([`units_per_claim`]). The workers themselves: [`gpu`](super::gpu).

/// Claims in flight over all GPU workers of a read (by default): each has a stream,
/// and a device has 8 hardware queues unless `CUDA_DEVICE_MAX_CONNECTIONS` says
/// otherwise; streams beyond them share one, and work queued on one waits behind the
/// other's (measured: 4 workers with 8 claims in flight each read at half the rate of 3
/// each). The CPU workers' lanes share 4 more streams (`pipeline`).
pub(crate) const GPU_CLAIMS_IN_FLIGHT: usize = 6;

/// Claims in flight over all GPU workers of a `Decoder::Gpu` read (by default): there
/// are no CPU workers' lanes then, and more chunks in flight hide nvCOMP's latency.
pub(crate) const GPU_ONLY_CLAIMS_IN_FLIGHT: usize = 8;

/// Reader threads per GPU worker in a read with both decoders (by default).
pub(crate) const GPU_READERS: usize = 6;

/// How the GPU workers of a read are sized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tuning {
    /// Decoded bytes per nvCOMP call at most.
    pub claim_bytes: usize,
    /// Claims in flight per worker.
    pub depth: usize,
    /// Claims in flight over all workers of a read (each on a stream of its own: see
    /// `UploadLane::new_on` on the device's few hardware queues).
    pub flights: usize,
    /// Reader threads per worker (`None`: [`GPU_READERS`], or with `Decoder::Gpu`
    /// every thread but the workers' own).
    pub readers: Option<usize>,
    /// Claims per flight over a read at least (claims are smaller when the read is).
    pub spread: usize,
    /// A worker's first claims are `2^-ramp`, `2^-(ramp-1)`, ... of the full size, so
    /// the device starts sooner.
    pub ramp: u32,
    /// Whether GPU workers consult the model before a claim.
    pub model: bool,
}

impl Tuning {
    /// The options' values, with the defaults for the decoder where they are `None`
    /// (`options` was validated). `device_first` (`Decoder::Gpu`, where nothing but
    /// nvCOMP decodes, and `Decoder::Both`, whose CPU workers start once the GPU
    /// workers stop claiming) keeps more and smaller claims in flight: nvCOMP's latency
    /// per chunk is long, so the device should get chunks as early and as many at once
    /// as it can (measured on the H100, three interleaved runs each: 1 MiB chunks
    /// 17.0-17.7 GB/s against 14.8-15.2 with the other settings, 4 MiB 15.3-15.9
    /// against 13.9-14.1). The other settings are for `Decoder::Auto`'s model schedule,
    /// where CPU workers decode from the start and need the cores more than the device
    /// needs an early start.
    ///
    /// No ramp by default: smaller first claims start the device a millisecond or two
    /// sooner, but a worker then needs more claims than it has flights, and its readers
    /// wait for nvCOMP calls to finish before they read the rest (H200, session 40,
    /// three interleaved rounds, `Gpu` / `Both` in GB/s, a ramp of 2 against none: u16
    /// 512x512 zstd-3 15.4-15.6 / 15.7-16.3 against 17.2-19.3 / 19.7-19.8; 1 MiB
    /// zstd-1 16.0-16.3 / 16.2-18.0 against 17.1-18.5 / 18.3-19.0; 1 MiB gzip `Gpu`
    /// 2.7 against 4.6; the other stores within the rounds' spread).
    pub(crate) fn resolve(options: &super::GpuTuning, device_first: bool) -> Tuning {
        let pick = |v: Option<usize>, both: usize, gpu: usize| {
            v.unwrap_or(if device_first { gpu } else { both })
        };
        Tuning {
            claim_bytes: options.claim_bytes,
            depth: pick(options.claims_per_worker, 3, 4),
            flights: pick(
                options.claims_in_flight,
                GPU_CLAIMS_IN_FLIGHT,
                GPU_ONLY_CLAIMS_IN_FLIGHT,
            ),
            readers: options.readers,
            spread: pick(options.spread, 2, 1),
            ramp: options.ramp.unwrap_or(0),
            model: options.cost_model,
        }
    }

    /// Batches the `k`th claim of a worker takes when a full claim takes `full`
    /// (rounded up, so that a round of claims covers what [`units_per_claim`] sized it
    /// for).
    pub(crate) fn claim_batches(&self, k: usize, full: usize) -> usize {
        let shift = (self.ramp as usize).saturating_sub(k).min(16);
        full.div_ceil(1 << shift).max(1)
    }

    /// Reader threads per worker.
    pub(crate) fn readers(&self) -> usize {
        self.readers.unwrap_or(GPU_READERS)
    }
}

/// Units per full GPU claim for a read of `units` units of `cell_bytes` with `workers`
/// GPU workers: at most `claim_bytes` of decoded bytes, and small enough that every
/// worker's flights take `spread` claims (a small read still overlaps its stages).
///
/// A worker's first claims are smaller ([`Tuning::ramp`]): full claims are sized so
/// that its first round of claims, ramp included, still covers its share. Sized as if
/// every claim were full, the ramp left a quarter or more of the read to claims that
/// wait for a flight's nvCOMP call to finish, and the readers stood still meanwhile
/// (H200, session 40: the u16 image's last read at 16.4-18.0 ms with a ramp of 2,
/// 9.7-10.7 without; see [`Tuning::resolve`]).
pub(crate) fn units_per_claim(
    cell_bytes: usize,
    units: usize,
    workers: usize,
    t: &Tuning,
) -> usize {
    let most = (t.claim_bytes / cell_bytes.max(1)).clamp(1, 4096);
    let depth = t.depth.clamp(1, (t.flights / workers.max(1)).max(1));
    // Full claims a worker's first `depth` claims make, in 2^-ramp steps.
    let steps = 1usize << t.ramp.min(8);
    let full_steps: usize = (0..depth)
        .map(|k| steps >> (t.ramp as usize).saturating_sub(k).min(8))
        .sum();
    let claims_steps = t.spread.max(1) * workers.max(1) * full_steps;
    units
        .saturating_mul(steps)
        .div_ceil(claims_steps.max(1))
        .clamp(1, most)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Claims of 64 MiB at most, 3 per worker, 2 per flight, `ramp`.
    fn tuning(ramp: u32) -> Tuning {
        Tuning {
            claim_bytes: 64 << 20,
            depth: 3,
            flights: 8,
            readers: None,
            spread: 2,
            ramp,
            model: true,
        }
    }

    #[test]
    fn claims_are_bounded_and_small_reads_still_use_every_flight() {
        let t = tuning(0);
        // 512 MiB of 1 MiB chunks, 2 workers: about 43 chunks a claim.
        assert_eq!(units_per_claim(1 << 20, 512, 2, &t), 43);
        // 16 MiB chunks: at most 4 (64 MiB) a claim.
        assert_eq!(units_per_claim(16 << 20, 32, 1, &t), 4);
        // A small read: one or two units a claim.
        assert_eq!(units_per_claim(4096, 10, 2, &t), 1);
        assert_eq!(units_per_claim(usize::MAX, 10, 2, &t), 1);
        // One claim per flight: 512 / 6 chunks.
        let one = Tuning {
            spread: 1,
            claim_bytes: 128 << 20,
            ..t
        };
        assert_eq!(units_per_claim(1 << 20, 512, 2, &one), 86);
    }

    #[test]
    fn with_a_ramp_the_first_round_of_claims_covers_each_workers_share() {
        // 1024 units, 2 workers of 4 flights (8 in all), one claim per flight, ramp 2:
        // a worker's claims are 1/4, 1/2, 1 and 1 of the full size (2.75 full claims),
        // so full claims are 1024 / (2 * 2.75) = 186.2 -> 187 units.
        let t = Tuning {
            depth: 4,
            flights: 8,
            spread: 1,
            claim_bytes: 1 << 30,
            ..tuning(2)
        };
        let full = units_per_claim(1 << 19, 1024, 2, &t);
        assert_eq!(full, 187);
        let round: usize = (0..4).map(|k| t.claim_batches(k, full)).sum();
        assert!(
            2 * round >= 1024,
            "two workers' first rounds cover the read: {round}"
        );
        // Without a ramp: one full claim per flight.
        assert_eq!(
            units_per_claim(1 << 19, 1024, 2, &Tuning { ramp: 0, ..t }),
            128
        );
        // Fewer flights than the workers' depth: the flights bound the round.
        let few = Tuning { flights: 4, ..t };
        // depth 2 each: 1/4 + 1/2 of a full claim -> 1024 / (2 * 0.75).
        let full = units_per_claim(1 << 19, 1024, 2, &few);
        assert_eq!(full, 683);
        let round: usize = (0..2).map(|k| few.claim_batches(k, full)).sum();
        assert!(2 * round >= 1024, "{round}");
        // The claim size bound still holds.
        let small = Tuning {
            claim_bytes: 64 << 20,
            ..t
        };
        assert_eq!(units_per_claim(1 << 19, 1024, 2, &small), 128);
    }

    #[test]
    fn a_ramp_starts_small_and_doubles() {
        let t = tuning(2);
        let sizes: Vec<usize> = (0..4).map(|k| t.claim_batches(k, 10)).collect();
        assert_eq!(sizes, [3, 5, 10, 10]);
        assert_eq!(t.claim_batches(0, 1), 1);
        assert_eq!(Tuning { ramp: 0, ..t }.claim_batches(0, 10), 10);
    }
}
