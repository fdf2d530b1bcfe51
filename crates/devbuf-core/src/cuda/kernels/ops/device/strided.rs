//! Strided copy on the device: the layout plan (`ops::layout`) run as contiguous runs,
//! tiled transposes or the general n-d kernel.

use super::*;

#[allow(clippy::too_many_arguments)]
pub(in crate::cuda::kernels::ops) fn strided_copy(
    stream: Option<&Stream>,
    src: &DeviceBuffer,
    src_offset: usize,
    src_strides: &[isize],
    dst: &DeviceBuffer,
    dst_offset: usize,
    dst_strides: &[isize],
    shape: &[usize],
    elem_size: usize,
) -> Result<()> {
    let Some(mut plan) = layout::plan(
        src.len(),
        src_offset,
        src_strides,
        dst.len(),
        dst_offset,
        dst_strides,
        shape,
        elem_size,
    )?
    else {
        check_writable(dst, "strided_copy")?;
        return Ok(());
    };
    check_writable(dst, "strided_copy")?;
    let on = On { stream };
    let ctx = dst.context();
    on.check(ctx, "strided_copy")?;

    // The source's extent, in this context and not overlapping the destination's.
    let mut must_wait = false;
    let mut src_addr = src.address();
    let mut src_tmp = None;
    let (lo, hi) = (plan.src_lo, plan.src_hi);
    if !src.context().same_as(ctx) {
        let piece = src.slice(lo as usize, (hi - lo) as usize)?;
        let tmp = in_context(ctx, &piece)?;
        if let Some(t) = tmp {
            plan.rebase_src(0);
            src_addr = t.address();
            src_tmp = Some(t);
            must_wait = true;
        }
    } else if ranges_overlap(
        src_addr + lo,
        hi - lo,
        dst.address() + plan.dst_lo,
        plan.dst_hi - plan.dst_lo,
    ) {
        let tmp = ctx.allocate((hi - lo) as usize)?;
        copy_d2d(ctx, on, tmp.address(), src_addr + lo, (hi - lo) as usize)?;
        plan.rebase_src(0);
        src_addr = tmp.address();
        src_tmp = Some(tmp);
        must_wait = true;
    }
    let dst_addr = dst.address();

    // Accesses of `unit` bytes must be aligned: shrink the unit until they are.
    let mut bits = (src_addr + plan.src_base) | (dst_addr + plan.dst_base);
    for a in plan.axes() {
        bits |= a.s.unsigned_abs() | a.d.unsigned_abs();
    }
    let mut unit = plan.unit;
    while unit > 1 && !bits.is_multiple_of(unit as u64) {
        unit /= 2;
    }
    plan.split_unit(unit);

    // Safety (all launches below): the parameter structs mirror the kernels'; every
    // address the kernels form is `base + Σ i_k * stride_k` for an index within `shape`,
    // which lies within the validated extents of `src` (or its staged copy) and `dst`.
    // The run kernel also reads whole aligned 16-byte vectors of the source: up to 15
    // bytes before a run (in the same aligned vector as its first byte, so within the
    // allocation, whose start is at least 16-byte aligned; the values are discarded),
    // never past a run's end (the last vector's bytes are read one by one there).
    run_plan(ctx, on, &plan, src_addr, dst_addr)?;
    drop(src_tmp);
    on.finish(ctx, must_wait)
}

/// Copies a normalised plan (addresses of the two buffers' first bytes).
pub(super) fn run_plan(
    ctx: &Context,
    on: On<'_>,
    plan: &StridedCopyPlan,
    src_addr: u64,
    dst_addr: u64,
) -> Result<()> {
    let unit = plan.unit as i64;
    let src = src_addr + plan.src_base;
    let dst = dst_addr + plan.dst_base;
    let axes = plan.axes();
    if axes.len() > MAX_DIMS {
        return Err(Error::invalid(format!(
            "strided_copy: the layout needs {} axes after splitting elements into aligned units; at most {MAX_DIMS} are supported",
            axes.len()
        )));
    }
    if plan.is_contiguous() {
        let bytes = plan.count() as usize * plan.unit;
        return copy_d2d(ctx, on, dst, src, bytes);
    }
    let last = axes[axes.len() - 1];

    // Runs: innermost axis contiguous on both sides.
    if last.s == unit && last.d == unit && last.n * unit as u64 >= MIN_RUN_BYTES {
        let outer = &axes[..axes.len() - 1];
        let run_bytes = last.n * unit as u64;
        let segs = (run_bytes / 16).div_ceil(RUN_SEG_VECS).max(1);
        let nruns: u64 = outer.iter().map(|a| a.n).product();
        let mut p = RunsParams {
            src,
            dst,
            run_bytes,
            nruns,
            segs_per_run: segs,
            ndim: outer.len() as u32,
            reserved: 0,
            shape: [0; MAX_DIMS - 1],
            sstride: [0; MAX_DIMS - 1],
            dstride: [0; MAX_DIMS - 1],
        };
        fill_axes(outer, &mut p.shape, &mut p.sstride, &mut p.dstride);
        // Segments are counted in 32 bits: at least 512 bytes each, 2^32 of them would
        // be 2 TiB; anything larger goes to the general kernel below.
        let warps = nruns * segs;
        if warps <= u32::MAX as u64 {
            // Safety: see strided_copy.
            return unsafe {
                launch_struct(
                    ctx,
                    on,
                    &STRIDED,
                    c"devbuf_strided_runs",
                    warps.div_ceil(BLOCK as u64 / 32),
                    &mut p,
                )
            };
        }
    }

    // Transpose: the destination's contiguous axis is not the source's.
    if last.d == unit && last.s.unsigned_abs() != unit as u64 && last.n >= MIN_TRANSPOSE {
        let b = axes[..axes.len() - 1]
            .iter()
            .position(|a| a.s.unsigned_abs() == unit as u64 && a.n >= MIN_TRANSPOSE);
        if let Some(b) = b {
            let ab = axes[b];
            let batch: Vec<Axis> = axes[..axes.len() - 1]
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != b)
                .map(|(_, a)| *a)
                .collect();
            let tiles_a = last.n.div_ceil(TILE);
            let tiles_b = ab.n.div_ceil(TILE);
            let nbatch: u64 = batch.iter().map(|a| a.n).product();
            let mut p = TransposeParams {
                src,
                dst,
                na: last.n,
                nb: ab.n,
                sa: last.s,
                sb: ab.s,
                da: last.d,
                db: ab.d,
                tiles_a,
                tiles_b,
                ntiles: tiles_a * tiles_b * nbatch,
                ndim: batch.len() as u32,
                reserved: 0,
                shape: [0; MAX_DIMS - 2],
                sstride: [0; MAX_DIMS - 2],
                dstride: [0; MAX_DIMS - 2],
            };
            fill_axes(&batch, &mut p.shape, &mut p.sstride, &mut p.dstride);
            let name = match plan.unit {
                1 => c"devbuf_strided_transpose_1",
                2 => c"devbuf_strided_transpose_2",
                4 => c"devbuf_strided_transpose_4",
                8 => c"devbuf_strided_transpose_8",
                _ => c"devbuf_strided_transpose_16",
            };
            let ntiles = p.ntiles;
            // Safety: see strided_copy.
            return unsafe { launch_struct(ctx, on, &STRIDED, name, ntiles, &mut p) };
        }
    }

    // General.
    let count = plan.count();
    let mut p = GeneralParams {
        src,
        dst,
        count,
        ndim: axes.len() as u32,
        reserved: 0,
        shape: [0; MAX_DIMS],
        sstride: [0; MAX_DIMS],
        dstride: [0; MAX_DIMS],
    };
    fill_axes(axes, &mut p.shape, &mut p.sstride, &mut p.dstride);
    let small = count < (1u64 << 31);
    let name = match (plan.unit, small) {
        (1, true) => c"devbuf_strided_general_1_32",
        (1, false) => c"devbuf_strided_general_1_64",
        (2, true) => c"devbuf_strided_general_2_32",
        (2, false) => c"devbuf_strided_general_2_64",
        (4, true) => c"devbuf_strided_general_4_32",
        (4, false) => c"devbuf_strided_general_4_64",
        (8, true) => c"devbuf_strided_general_8_32",
        (8, false) => c"devbuf_strided_general_8_64",
        (_, true) => c"devbuf_strided_general_16_32",
        (_, false) => c"devbuf_strided_general_16_64",
    };
    // Safety: see strided_copy.
    unsafe {
        launch_struct(
            ctx,
            on,
            &STRIDED,
            name,
            blocks_for(count.div_ceil(4)),
            &mut p,
        )
    }
}

pub(super) fn fill_axes(axes: &[Axis], shape: &mut [u64], s: &mut [i64], d: &mut [i64]) {
    for (i, a) in axes.iter().enumerate() {
        shape[i] = a.n;
        s[i] = a.s;
        d[i] = a.d;
    }
}
