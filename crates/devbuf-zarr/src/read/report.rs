//! What one read did: [`ReadReport`].

/// What one read did: which decoder ran, on how many chunks, with how many workers.
///
/// ```
/// use devbuf_zarr::ZarrArray;
/// use devbuf_core::zarr::BufferPrototype;
/// let a = ZarrArray::open("../../tests/fixtures/zarr/v2_int16_zstd.zarr")?;
/// let mut report = devbuf_zarr::ReadReport::default();
/// let _ = a.read(..).report(&mut report).to(&BufferPrototype::Host)?;
/// assert_eq!(report.decoder, "cpu");
/// assert!(report.cpu_chunks > 0);
/// println!("{report}");
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadReport {
    /// `"cpu"`, `"gpu"` (nvCOMP decoded every chunk) or `"cpu+gpu"`.
    pub decoder: &'static str,
    /// Why the GPU did not decode (for a read that could have used it), else empty.
    pub gpu_note: String,
    /// For [`Decoder::Auto`](super::Decoder::Auto) on a large device read nvCOMP could
    /// decode: which decoder it ran and why (the rates measured in this process, or
    /// that it measured one not run yet); else empty.
    pub auto: String,
    /// The codecs as the engine saw them (`"zstd"`, `"sharded zstd"`, or
    /// `"zarrs (<why>)"` when zarrs' codecs decoded the chunks).
    pub codecs: String,
    /// Chunks (inner chunks of shards) decoded by the CPU workers.
    pub cpu_chunks: u64,
    /// Chunks decoded by nvCOMP.
    pub gpu_chunks: u64,
    /// Workers that fed nvCOMP.
    pub gpu_workers: usize,
    /// Microseconds the GPU workers spent reading stored bytes (summed over workers).
    pub gpu_read_us: u64,
    /// Microseconds of device time of the GPU workers' claims: upload, nvCOMP call,
    /// placement (summed over claims, which overlap each other and the reading).
    pub gpu_decode_us: u64,
    /// Microseconds the GPU workers waited for the device (a claim in flight to finish
    /// before its device buffers are reused, and at the end; summed over workers).
    pub gpu_wait_us: u64,
    /// Microseconds the GPU workers spent queueing claims on the device (the host side
    /// of the nvCOMP calls and launches, a flight's first allocations; summed).
    pub gpu_queue_us: u64,
    /// When the first GPU claim was queued, microseconds from the start of decoding
    /// (0: none was).
    pub gpu_first_us: u64,
    /// When the GPU workers' last read of stored bytes ended (microseconds from the
    /// start of decoding).
    pub gpu_read_end_us: u64,
    /// When the GPU workers' last claim finished on the device (microseconds from the
    /// start of decoding).
    pub gpu_end_us: u64,
    /// Microseconds the whole read took (planning, allocation and decoding).
    pub elapsed_us: u64,
    /// Of those, chunks not stored (read as the fill value).
    pub missing_chunks: u64,
    /// Decoded bytes (whole chunks, before selection).
    pub decoded_bytes: u64,
    /// Worker threads that took part.
    pub workers: usize,
    /// Where the result went: `"host"` or `"device N"`.
    pub target: String,
}

impl std::fmt::Display for ReadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "decoder {} ({} codecs) -> {}: {} chunks on {} CPU workers, {} chunks on {} GPU \
             workers ({} missing), {} decoded bytes",
            self.decoder,
            self.codecs,
            self.target,
            self.cpu_chunks,
            self.workers,
            self.gpu_chunks,
            self.gpu_workers,
            self.missing_chunks,
            self.decoded_bytes
        )?;
        if self.gpu_workers > 0 {
            write!(
                f,
                "; GPU workers read for {:.1} ms, queued for {:.1} ms, their claims took {:.1} ms \
                 on the device, they waited {:.1} ms for it",
                self.gpu_read_us as f64 / 1e3,
                self.gpu_queue_us as f64 / 1e3,
                self.gpu_decode_us as f64 / 1e3,
                self.gpu_wait_us as f64 / 1e3
            )?;
            write!(
                f,
                "; first claim queued at {:.1} ms, last read at {:.1} ms, device done at {:.1} \
                 ms",
                self.gpu_first_us as f64 / 1e3,
                self.gpu_read_end_us as f64 / 1e3,
                self.gpu_end_us as f64 / 1e3
            )?;
        }
        if self.elapsed_us > 0 {
            write!(f, "; read in {:.1} ms", self.elapsed_us as f64 / 1e3)?;
        }
        if !self.gpu_note.is_empty() {
            write!(f, "; GPU not used: {}", self.gpu_note)?;
        }
        if !self.auto.is_empty() {
            write!(f, "; {}", self.auto)?;
        }
        Ok(())
    }
}

/// The read span's last fields and its closing `info` event: chunks, bytes, time and
/// rate (nothing when no subscriber takes them).
pub(crate) fn trace_done(span: &tracing::Span, r: &ReadReport, selection_bytes: usize) {
    span.record("ran", r.decoder);
    span.record("target", r.target.as_str());
    tracing::info!(
        decoder = r.decoder,
        cpu_chunks = r.cpu_chunks,
        gpu_chunks = r.gpu_chunks,
        missing_chunks = r.missing_chunks,
        decoded_bytes = r.decoded_bytes,
        selection_bytes,
        workers = r.workers,
        elapsed_us = r.elapsed_us,
        gb_per_s = selection_bytes as f64 / r.elapsed_us.max(1) as f64 / 1e3,
        "read done"
    );
}
