//! How long nvCOMP takes to decode a store's chunks already on the device: all of them
//! in one call, one alone, and one per multiprocessor. `bench_zarrs`' per-store limits
//! time them for zstd stores and for gzip ones (`deflate_limits`).
//!
//! Included with `#[path = "common/nvcomp_calls.rs"] mod nvcomp_calls;`.

use std::ops::Range;

use devbuf::cuda::nvcomp::{DecompressBatch, GpuCodec};
use devbuf::cuda::{Context, DeviceBuffer, Stream};

use crate::stats::time_median;

/// Seconds of the three calls (median of the runs asked for, after a warm-up each).
pub struct Calls {
    /// Every chunk in one call.
    pub all: f64,
    /// The first chunk alone.
    pub one: f64,
    /// As many chunks as the device has multiprocessors ([`Calls::sms`]).
    pub per_sm: f64,
    /// The chunks of `per_sm`: the device's multiprocessors, at most all chunks.
    pub sms: usize,
}

/// Times `codec`'s decode of the streams at `inputs` of `src` (each `chunk_bytes`
/// decoded) on `ctx`'s device, `repeat` runs of each call; an error when nvCOMP does
/// not decode them.
pub fn time_calls(
    ctx: &Context,
    codec: GpuCodec,
    src: &DeviceBuffer,
    inputs: &[Range<usize>],
    chunk_bytes: usize,
    repeat: usize,
) -> devbuf::Result<Calls> {
    let n = inputs.len();
    let outputs: Vec<_> = (0..n)
        .map(|i| i * chunk_bytes..(i + 1) * chunk_bytes)
        .collect();
    let dst = ctx.allocate((n * chunk_bytes).max(1))?;
    let stream = Stream::new(ctx)?;
    let mut batch = DecompressBatch::new(ctx, None)?;
    let mut call = |k: usize| -> devbuf::Result<f64> {
        time_median(repeat, || {
            batch
                .decompress(&stream, codec, src, &inputs[..k], &dst, &outputs[..k])
                .map(drop)
        })
    };
    let all = call(n)?;
    let one = call(1)?;
    let sms = (ctx.properties().multiprocessor_count as usize).clamp(1, n.max(1));
    let per_sm = call(sms)?;
    Ok(Calls {
        all,
        one,
        per_sm,
        sms,
    })
}
