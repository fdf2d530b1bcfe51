//! NDBuffer test data shared by the host and GPU tests: every data type, random values,
//! one logical array in several memory layouts (`Kind`, `KINDS`, `make`), and the oracle
//! bytes of an array (`c_bytes`). Uses `random.rs` (declared next to it as `random`).

#![allow(dead_code)]

use devbuf::ElementType;
use devbuf::zarr::{AxisSel, Dtype, Endianness, NDBuffer, Order, Slice};
use rand::rngs::SmallRng;

use super::random::random_bytes;

/// Every element type, little-endian and (where it differs) big-endian.
pub fn dtypes() -> Vec<Dtype> {
    let mut v = Vec::new();
    for e in ElementType::ALL {
        v.push(Dtype::new(e, Endianness::Little));
        if e.size() > 1 {
            v.push(Dtype::new(e, Endianness::Big));
        }
    }
    v
}

/// Random stored bytes for `n` elements of `dtype` (booleans 0 or 1).
pub fn random_values(rng: &mut SmallRng, n: usize, dtype: Dtype) -> Vec<u8> {
    let mut v = random_bytes(rng, n * dtype.element().size());
    if dtype.element() == ElementType::Bool {
        v.iter_mut().for_each(|b| *b &= 1);
    }
    v
}

/// The values of `nd` in C order, native byte order, as bytes (the oracle; one copy to
/// the host for device arrays).
pub fn c_bytes(nd: &NDBuffer) -> Vec<u8> {
    nd.astype(Dtype::from(nd.dtype().element()))
        .unwrap()
        .to_buffer()
        .unwrap()
        .to_host()
        .unwrap()
        .to_vec()
}

/// Layouts of one logical array: how it sits in memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    C,
    F,
    /// A C array of the reversed-then-rotated shape, transposed back: dense, neither C
    /// nor F for 3 or more axes.
    Transposed,
    /// Every other element of a larger array along each axis: not dense.
    Strided,
    /// A C array with its first row cut off: dense, at an offset.
    Offset,
}

/// Every layout.
pub const KINDS: [Kind; 5] = [
    Kind::C,
    Kind::F,
    Kind::Transposed,
    Kind::Strided,
    Kind::Offset,
];

/// The shape of the array that `kind`'s view of `shape` is cut from.
pub fn base_shape(shape: &[usize], kind: Kind) -> Vec<usize> {
    match kind {
        Kind::Strided => shape.iter().map(|&d| 2 * d).collect(),
        Kind::Offset if !shape.is_empty() => {
            let mut s = shape.to_vec();
            s[0] += 1;
            s
        }
        Kind::Transposed if shape.len() >= 2 => {
            // axes (1, 2, .., 0) of a C array of shape [s[k-1], s[0], .., s[k-2]]
            let nd = shape.len();
            let mut s = vec![shape[nd - 1]];
            s.extend(&shape[..nd - 1]);
            s
        }
        _ => shape.to_vec(),
    }
}

/// The memory order of the base array of `kind`.
pub fn base_order(kind: Kind) -> Order {
    if kind == Kind::F { Order::F } else { Order::C }
}

/// `kind`'s view of shape `shape` into `base` (an array of `base_shape(shape, kind)`).
pub fn view(base: NDBuffer, shape: &[usize], kind: Kind) -> NDBuffer {
    match kind {
        Kind::C | Kind::F => base,
        Kind::Strided => {
            let sel: Vec<AxisSel> = shape
                .iter()
                .map(|_| Slice::new(None, None, 2).into())
                .collect();
            base.get(&sel).unwrap()
        }
        Kind::Offset if !shape.is_empty() => {
            let n0 = base.shape()[0];
            base.get(&[AxisSel::from(1..n0)]).unwrap()
        }
        Kind::Transposed if shape.len() >= 2 => {
            let axes: Vec<usize> = (1..shape.len()).chain([0]).collect();
            base.transpose(Some(&axes)).unwrap()
        }
        _ => base,
    }
}

/// A host array of `shape` and `dtype` with random values, laid out as `kind` says.
pub fn make(rng: &mut SmallRng, shape: &[usize], dtype: Dtype, kind: Kind) -> NDBuffer {
    let base = base_shape(shape, kind);
    let n: usize = base.iter().product();
    let nd = NDBuffer::from_memory(random_values(rng, n, dtype), &base, dtype, base_order(kind))
        .unwrap();
    view(nd, shape, kind)
}

/// The stored bytes of `nd` in C order, in its own byte order (one copy to the host for
/// device arrays).
pub fn stored_c_bytes(nd: &NDBuffer) -> Vec<u8> {
    nd.to_buffer().unwrap().to_host().unwrap().to_vec()
}
