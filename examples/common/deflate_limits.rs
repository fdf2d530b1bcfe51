//! What bounds a device read of a gzip store: nvCOMP's deflate decoder on the store's
//! own streams, already on the device (all in one call, one chunk alone, one chunk per
//! multiprocessor), and the best split of the chunks between that decoder and the
//! CPU workers at their measured rate. nvCOMP decodes each chunk with one thread block,
//! so every chunk the GPU takes finishes no sooner than one chunk's latency: a split
//! pays only while the CPU workers need longer than that for the rest.
//! `bench_zarrs` prints it after the table for gzip stores of whole chunk files.
//!
//! Included with `#[path = "common/deflate_limits.rs"] mod deflate_limits;`.

use std::ops::Range;
use std::path::PathBuf;

use devbuf::cuda::Context;
use devbuf::cuda::nvcomp::GpuCodec;

use crate::stats::gbs;

/// The raw deflate stream of a gzip member (RFC 1952): the bytes after its header
/// (optional extra field, name, comment and header CRC skipped) and before its 8-byte
/// trailer; `None` for anything that is not a gzip member.
pub fn deflate_stream(member: &[u8]) -> Option<Range<usize>> {
    if member.len() < 18 || member[..3] != [0x1f, 0x8b, 8] {
        return None;
    }
    let flags = member[3];
    let mut at = 10usize;
    if flags & 4 != 0 {
        let n = u16::from_le_bytes([*member.get(at)?, *member.get(at + 1)?]) as usize;
        at += 2 + n;
    }
    for bit in [8u8, 16] {
        if flags & bit != 0 {
            at += member.get(at..)?.iter().position(|&b| b == 0)? + 1;
        }
    }
    if flags & 2 != 0 {
        at += 2;
    }
    let end = member.len() - 8;
    (at <= end).then_some(at..end)
}

/// Measures and describes the bound (one line): `files` are the store's gzip chunk
/// files, each `chunk_bytes` decoded; `cpu_rate` the CPU decoder's device read of the
/// store in the same run (GB/s). `Ok(None)` when nvCOMP cannot decode them.
pub fn describe(
    ctx: &Context,
    files: &[(PathBuf, usize)],
    chunk_bytes: usize,
    cpu_rate: f64,
) -> devbuf::Result<Option<String>> {
    let err = |e: std::io::Error| devbuf::Error::InvalidArgument(e.to_string());
    let mut packed = Vec::new();
    let mut inputs = Vec::with_capacity(files.len());
    for (path, _) in files {
        let member = std::fs::read(path).map_err(err)?;
        let Some(r) = deflate_stream(&member) else {
            return Ok(None);
        };
        let at = packed.len();
        packed.extend_from_slice(&member[r.clone()]);
        inputs.push(at..at + r.len());
        packed.resize(packed.len().next_multiple_of(256), 0);
    }
    let n = files.len();
    let decoded = n * chunk_bytes;
    let src = ctx.allocate(packed.len().max(1))?;
    src.copy_from_host(0, &packed)?;
    let Ok(c) =
        crate::nvcomp_calls::time_calls(ctx, GpuCodec::Deflate, &src, &inputs, chunk_bytes, 3)
    else {
        return Ok(None);
    };
    let (all, one, per_sm, sms) = (c.all, c.one, c.per_sm, c.sms);
    // The best split with the GPU's time for k chunks interpolated between the three
    // calls measured (1, one per multiprocessor, all), and the CPU decoding the rest at
    // its measured rate: the read cannot end before the later of the two.
    let gpu_s = |k: usize| -> f64 {
        match k {
            0 => 0.0,
            k if k <= sms => one + (per_sm - one) * (k - 1) as f64 / (sms - 1).max(1) as f64,
            k => per_sm + (all - per_sm) * (k - sms) as f64 / (n - sms).max(1) as f64,
        }
    };
    let cpu_s = |k: usize| ((n - k) * chunk_bytes) as f64 / (cpu_rate.max(0.0) * 1e9).max(1.0);
    let (best_k, best_s) = (0..=n)
        .map(|k| (k, gpu_s(k).max(cpu_s(k))))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((0, cpu_s(0)));
    Ok(Some(format!(
        "nvCOMP's deflate decoder on its {n} streams already on the device: all in one \
         call {:.2} GB/s ({:.1} ms), one chunk alone {:.1} ms, {sms} chunks (one per \
         multiprocessor) {:.1} ms; with the CPU decoder's {cpu_rate:.2} GB/s for the rest, \
         the best split ({best_k} chunks to the GPU) ends at {:.1} ms: {:.2} GB/s at \
         most, reading the files not counted",
        gbs(decoded as f64, all),
        all * 1e3,
        one * 1e3,
        per_sm * 1e3,
        best_s * 1e3,
        gbs(decoded as f64, best_s)
    )))
}
