//! What the benchmarks share: medians and quantiles of timings, timing a closure
//! (a warm-up run, then the median or the best of the measured runs) and rates.
//!
//! Included with `#[path = "common/stats.rs"] mod stats;`; each benchmark uses some of it.
#![allow(dead_code)]

use std::time::Instant;

/// The median of `v`: the middle value, or the mean of the middle two for an even
/// count; NaN for no values.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// The `q` quantile of `v` (0 to 1), nearest rank: sorts `v` and returns the value at
/// index `round((len - 1) * q)`; NaN for no values.
pub fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
    v[i.min(v.len() - 1)]
}

/// Seconds of `f`: one warm-up run, then the median of `repeat` timed runs.
pub fn time_median<E>(repeat: usize, mut f: impl FnMut() -> Result<(), E>) -> Result<f64, E> {
    f()?;
    let mut t = Vec::with_capacity(repeat);
    for _ in 0..repeat {
        let s = Instant::now();
        f()?;
        t.push(s.elapsed().as_secs_f64());
    }
    Ok(median(t))
}

/// The best seconds of `repeat` timed runs of `f` after one warm-up run, and the last
/// run's result.
pub fn time_best<T, E>(repeat: usize, mut f: impl FnMut() -> Result<T, E>) -> Result<(f64, T), E> {
    let mut out = f()?;
    let mut best = f64::INFINITY;
    for _ in 0..repeat {
        let t = Instant::now();
        out = f()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok((best, out))
}

/// GB/s (1 GB = 1e9 bytes) of `bytes` in `secs` seconds.
pub fn gbs(bytes: f64, secs: f64) -> f64 {
    bytes / secs / 1e9
}
