//! all-equal on the device: the comparison plan for a value and mode, the reduction
//! scratch pool, and the launch.

use super::*;

/// How a device all_equal is answered.
pub(super) enum EqualPlan {
    /// Every byte, masked, equals the repeating pattern.
    Pattern { pattern: Vec<u8>, mask: Vec<u8> },
    /// Every element satisfies a predicate (mode of `devbuf_equal_pred`).
    Pred { mode: u32, elem: usize },
    /// The answer without looking (a NaN value without `equal_nan`).
    Known(bool),
}

pub(super) const PRED_NONZERO_BYTES: u32 = 0;

/// Sign-bit mask of one float component of `size` bytes (little-endian).
pub(super) fn no_sign(size: usize) -> Vec<u8> {
    let mut m = vec![0xff; size];
    m[size - 1] = 0x7f;
    m
}

/// +0.0 or -0.0.
pub(super) fn is_zero(x: f64) -> bool {
    x == 0.0
}

pub(super) fn equal_plan(kind: ElementType, value: &[u8], mode: EqualMode) -> EqualPlan {
    let ones = || vec![0xff; value.len()];
    let equal_nan = match mode {
        EqualMode::Bitwise => {
            return EqualPlan::Pattern {
                pattern: value.to_vec(),
                mask: ones(),
            };
        }
        EqualMode::Numeric { equal_nan } => equal_nan,
    };
    let nan_mode = match kind {
        ElementType::Float16 => 1,
        ElementType::Float32 => 2,
        ElementType::Float64 => 3,
        ElementType::Complex64 => 4,
        ElementType::Complex128 => 5,
        _ => 0,
    };
    match decode(kind, value) {
        Val::I(v) if kind == ElementType::Bool => {
            if v == 0 {
                EqualPlan::Pattern {
                    pattern: vec![0],
                    mask: vec![0xff],
                }
            } else {
                EqualPlan::Pred {
                    mode: PRED_NONZERO_BYTES,
                    elem: 1,
                }
            }
        }
        Val::F(v) if v.is_nan() => {
            if equal_nan {
                EqualPlan::Pred {
                    mode: nan_mode,
                    elem: kind.size(),
                }
            } else {
                EqualPlan::Known(false)
            }
        }
        Val::F(v) if is_zero(v) => EqualPlan::Pattern {
            pattern: vec![0; kind.size()],
            mask: no_sign(kind.size()),
        },
        Val::C(re, im) if re.is_nan() || im.is_nan() => {
            if equal_nan {
                EqualPlan::Pred {
                    mode: nan_mode,
                    elem: kind.size(),
                }
            } else {
                EqualPlan::Known(false)
            }
        }
        Val::C(re, im) => {
            // Per component: zero of either sign by masking the sign off, otherwise the
            // exact bits (a non-zero, non-NaN float has one encoding).
            let c = kind.swap_width();
            let mut pattern = value.to_vec();
            let mut mask = ones();
            for (k, part) in [re, im].into_iter().enumerate() {
                if is_zero(part) {
                    pattern[k * c..(k + 1) * c].fill(0);
                    mask[k * c..(k + 1) * c].copy_from_slice(&no_sign(c));
                }
            }
            EqualPlan::Pattern { pattern, mask }
        }
        // Integers; non-zero floats.
        _ => EqualPlan::Pattern {
            pattern: value.to_vec(),
            mask: ones(),
        },
    }
}

/// A scratch of `ctx`'s pool, returned on success (dropped with the context otherwise).
pub(super) fn take_scratch(ctx: &Context) -> Result<Scratch> {
    let cache = &ctx.inner.kernels;
    if let Some(s) = cache.take_scratch() {
        return Ok(s);
    }
    ctx.bind()?;
    let device = driver::mem_alloc(8)?;
    let host = match driver::mem_host_alloc(4) {
        Ok(h) => h,
        Err(e) => {
            // Safety: allocated just above, not shared.
            let _ = unsafe { driver::mem_free(device) };
            return Err(e);
        }
    };
    let host_device = match driver::host_get_device_pointer(host) {
        Ok(d) => d,
        Err(e) => {
            // Safety: both allocated just above, not shared.
            unsafe {
                let _ = driver::mem_free(device);
                let _ = driver::mem_free_host(host);
            }
            return Err(e);
        }
    };
    let s = Scratch {
        device,
        epoch: 0,
        host: host.cast(),
        host_device,
    };
    // Registered first, so both allocations are freed with the context from now on.
    cache.register_scratch(s);
    driver::memset_d8(device, 0, 8)?;
    driver::stream_synchronize(std::ptr::null_mut())?;
    Ok(s)
}

pub(in crate::cuda::kernels::ops) fn all_equal(
    stream: Option<&Stream>,
    buf: &DeviceBuffer,
    kind: ElementType,
    value: &[u8],
    mode: EqualMode,
) -> Result<bool> {
    crate::cuda::kernels::ops::check_equal(buf.len(), kind, value)?;
    if buf.is_empty() {
        return Ok(true);
    }
    let on = On { stream };
    let ctx = buf.context();
    on.check(ctx, "all_equal")?;
    let plan = equal_plan(kind, value, mode);
    if let EqualPlan::Known(answer) = plan {
        return Ok(answer);
    }
    let mut scratch = take_scratch(ctx)?;
    // A new mark for this launch, never 0 (the flag's initial value). When the marks
    // wrap around, clear the flag so that a mark from 2^32 launches ago cannot match.
    if scratch.epoch == u32::MAX {
        ctx.bind()?;
        driver::memset_d8(scratch.device, 0, 4)?;
        driver::stream_synchronize(std::ptr::null_mut())?;
        scratch.epoch = 0;
    }
    scratch.epoch += 1;
    // Safety: the scratch's result word is page-locked host memory owned by the pool and
    // used by this thread only until it is returned.
    unsafe { std::ptr::write_volatile(scratch.host, u32::MAX) };
    let mut staged = None;
    match plan {
        EqualPlan::Pattern { pattern, mask } => {
            let t = tables(buf.address(), buf.len(), &pattern, &mask);
            let mut p = EqualParams {
                base: t.base,
                nvec: t.nvec,
                start: t.start,
                end: t.end,
                period: t.period,
                epoch: scratch.epoch,
                scratch: scratch.device,
                result: scratch.host_device,
                table: t.table,
                mask: t.mask,
            };
            // Element sizes divide 16, so every whole vector is the same (period 1).
            debug_assert_eq!(t.period, 1);
            // Safety: `EqualParams` mirrors the kernel's parameter; it reads only the
            // buffer's bytes (whole vectors within it, partial ones byte by byte) and
            // writes the scratch's device words and its mapped result word, both owned
            // by this call until the scratch is returned.
            unsafe {
                launch_struct(
                    ctx,
                    on,
                    &EQUAL,
                    c"devbuf_equal_pattern",
                    blocks_for(t.nvec / 4),
                    &mut p,
                )?
            };
        }
        EqualPlan::Pred { mode, elem } => {
            let mut first = buf.address();
            if !first.is_multiple_of(elem as u64) {
                let tmp = ctx.allocate(buf.len())?;
                copy_d2d(ctx, on, tmp.address(), first, buf.len())?;
                first = tmp.address();
                staged = Some(tmp);
            }
            let mut p = PredParams {
                first,
                nbytes: buf.len() as u64,
                mode,
                elem: elem as u32,
                scratch: scratch.device,
                result: scratch.host_device,
                epoch: scratch.epoch,
                reserved: 0,
            };
            // Safety: `PredParams` mirrors the kernel's parameter; `first` is aligned to
            // the element size and holds `nbytes` bytes, a whole number of elements,
            // read exactly (vectors in between, elements one by one at both ends); the
            // kernel writes the scratch words as above.
            unsafe {
                launch_struct(
                    ctx,
                    on,
                    &EQUAL,
                    c"devbuf_equal_pred",
                    blocks_for(buf.len() as u64 / 64),
                    &mut p,
                )?
            };
        }
        EqualPlan::Known(_) => unreachable!("answered above"),
    }
    on.finish(ctx, true)?;
    drop(staged);
    // Safety: as above; the kernel has completed (stream synchronised), so its write to
    // the mapped word is visible.
    let r = unsafe { std::ptr::read_volatile(scratch.host) };
    match r {
        0 | 1 => {
            ctx.inner.kernels.put_scratch(scratch);
            Ok(r == 1)
        }
        other => Err(Error::invalid(format!(
            "all_equal: the reduction kernel reported {other:#x} instead of 0 or 1"
        ))),
    }
}
