//! The cast kernels (numpy `astype`): one kernel per pair of element types, and their
//! launch.

use super::*;

pub(super) const fn cstr(b: &'static [u8]) -> &'static CStr {
    match CStr::from_bytes_with_nul(b) {
        Ok(c) => c,
        Err(_) => panic!("kernel names end with one NUL"),
    }
}

macro_rules! cast_row {
    ($s:literal) => {
        [
            cstr(concat!("devbuf_cast_", $s, "_bool\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_i8\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_i16\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_i32\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_i64\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_u8\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_u16\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_u32\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_u64\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_f16\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_f32\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_f64\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_c64\0").as_bytes()),
            cstr(concat!("devbuf_cast_", $s, "_c128\0").as_bytes()),
        ]
    };
}

/// `CAST_NAMES[src as usize][dst as usize]`.
pub(super) static CAST_NAMES: [[&CStr; 14]; 14] = [
    cast_row!("bool"),
    cast_row!("i8"),
    cast_row!("i16"),
    cast_row!("i32"),
    cast_row!("i64"),
    cast_row!("u8"),
    cast_row!("u16"),
    cast_row!("u32"),
    cast_row!("u64"),
    cast_row!("f16"),
    cast_row!("f32"),
    cast_row!("f64"),
    cast_row!("c64"),
    cast_row!("c128"),
];

/// Name of the kernel casting `s` to `d`.
pub(super) fn cast_kernel(s: ElementType, d: ElementType) -> &'static CStr {
    CAST_NAMES[s as usize][d as usize]
}

pub(in crate::cuda::kernels::ops) fn cast(
    stream: Option<&Stream>,
    src: &DeviceBuffer,
    src_kind: ElementType,
    dst: &DeviceBuffer,
    dst_kind: ElementType,
) -> Result<()> {
    crate::cuda::kernels::ops::check_cast(src.len(), src_kind, dst.len(), dst_kind)?;
    check_writable(dst, "cast")?;
    let n = src.len() / src_kind.size();
    if n == 0 {
        return Ok(());
    }
    let on = On { stream };
    let ctx = dst.context();
    on.check(ctx, "cast")?;
    let staged = in_context(ctx, src)?;
    let mut must_wait = staged.is_some();
    let src = staged.as_ref().unwrap_or(src);

    if src_kind == dst_kind {
        if src.address() != dst.address() {
            if ranges_overlap(
                src.address(),
                src.len() as u64,
                dst.address(),
                dst.len() as u64,
            ) {
                let tmp = ctx.allocate(src.len())?;
                copy_d2d(ctx, on, tmp.address(), src.address(), src.len())?;
                copy_d2d(ctx, on, dst.address(), tmp.address(), src.len())?;
                return on.finish(ctx, true);
            }
            copy_d2d(ctx, on, dst.address(), src.address(), src.len())?;
        }
        return on.finish(ctx, must_wait);
    }

    // The kernels need component-aligned, non-overlapping operands: otherwise go
    // through aligned temporaries (fresh allocations are 256-byte aligned).
    let mut src_tmp = None;
    if src.address() % src_kind.swap_width() as u64 != 0
        || ranges_overlap(
            src.address(),
            src.len() as u64,
            dst.address(),
            dst.len() as u64,
        )
    {
        let tmp = ctx.allocate(src.len())?;
        copy_d2d(ctx, on, tmp.address(), src.address(), src.len())?;
        src_tmp = Some(tmp);
        must_wait = true;
    }
    let src_addr = src_tmp.as_ref().map_or(src.address(), |t| t.address());
    let dst_tmp = if !dst.address().is_multiple_of(dst_kind.swap_width() as u64) {
        must_wait = true;
        Some(ctx.allocate(dst.len())?)
    } else {
        None
    };
    let dst_addr = dst_tmp.as_ref().map_or(dst.address(), |t| t.address());

    let mut ps = src_addr;
    let mut pd = dst_addr;
    let mut pn = n as u64;
    let mut params: [*mut c_void; 3] = [
        (&mut ps as *mut u64).cast(),
        (&mut pd as *mut u64).cast(),
        (&mut pn as *mut u64).cast(),
    ];
    let chunk = 16 / src_kind.size().min(dst_kind.size()) as u64;
    // Safety: the parameters match `devbuf_cast_<s>_<d>(const u8*, u8*, u64)`; the
    // source holds `n` elements of `src_kind` and the destination `n` of `dst_kind`
    // (checked), both aligned to their components and not overlapping (staged above).
    unsafe {
        launch(
            ctx,
            on,
            &CAST,
            cast_kernel(src_kind, dst_kind),
            blocks_for((n as u64).div_ceil(chunk * 2)),
            &mut params,
        )?
    };
    if dst_tmp.is_some() {
        copy_d2d(ctx, on, dst.address(), dst_addr, dst.len())?;
    }
    on.finish(ctx, must_wait)
}
