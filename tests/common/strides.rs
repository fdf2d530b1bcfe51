//! Stride helpers shared by the host and GPU kernel tests (tests/kernels_host.rs,
//! tests/gpu/kernels.rs).

#![allow(dead_code)]

/// Byte strides of a contiguous array of `shape` (C order, or F order when `fortran`);
/// zero-length axes count as length 1.
pub fn contiguous_strides(shape: &[usize], elem: usize, fortran: bool) -> Vec<isize> {
    let mut strides = vec![0isize; shape.len()];
    let mut s = elem as isize;
    let order: Vec<usize> = if fortran {
        (0..shape.len()).collect()
    } else {
        (0..shape.len()).rev().collect()
    };
    for k in order {
        strides[k] = s;
        s *= shape[k].max(1) as isize;
    }
    strides
}
