//! An `ndarray` oracle of the host NDBuffer (tests/zarr_ndbuffer.rs,
//! tests/fuzz_ndbuffer.rs): element values as `Scalar`s in an `ndarray::ArrayD`, every
//! n-d operation done with ndarray's own indexing, values compared by their bytes (NaN
//! payloads and signed zeros must match exactly), and an independent model of numpy's
//! selections.

#![allow(dead_code)]

use devbuf::ElementType;
use devbuf::zarr::{AxisSel, Dtype, Endianness, NDBuffer, Order, Scalar, Slice};
use ndarray::{ArrayD, Axis, IxDyn};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// An oracle array: the element values as `Scalar`s.
pub type Oracle = ArrayD<Scalar>;

pub fn random_scalar(rng: &mut SmallRng, t: ElementType) -> Scalar {
    if t == ElementType::Bool {
        return Scalar::Bool(rng.random());
    }
    let special = [0.0, -0.0, f64::NAN, f64::INFINITY, -1.5, 1.0];
    if matches!(t.kind(), 'f' | 'c') && rng.random_ratio(1, 4) {
        let v = special[rng.random_range(0..special.len())];
        return Scalar::Float64(v).cast(t);
    }
    let mut b = vec![0u8; t.size()];
    rng.fill(&mut b[..]);
    Scalar::from_le_bytes(t, &b).unwrap()
}

pub fn random_oracle(rng: &mut SmallRng, t: ElementType, shape: &[usize]) -> Oracle {
    let n: usize = shape.iter().product();
    let constant = rng.random_ratio(1, 3);
    let first = random_scalar(rng, t);
    let v: Vec<Scalar> = (0..n)
        .map(|_| {
            if constant {
                first
            } else {
                random_scalar(rng, t)
            }
        })
        .collect();
    ArrayD::from_shape_vec(IxDyn(shape), v).unwrap()
}

/// Builds an NDBuffer holding `o` as `dtype` in `order`, from raw bytes (so the byte
/// order of the memory is exercised).
pub fn build(o: &Oracle, dtype: Dtype, order: Order) -> NDBuffer {
    let mut bytes = Vec::new();
    let push = |s: &Scalar, bytes: &mut Vec<u8>| bytes.extend(s.to_bytes_as(dtype));
    match order {
        Order::C => o.iter().for_each(|s| push(s, &mut bytes)),
        Order::F => o.t().iter().for_each(|s| push(s, &mut bytes)),
    }
    let nd = NDBuffer::from_memory(bytes, o.shape(), dtype, order).unwrap();
    match order {
        Order::C => assert!(nd.is_contiguous(Order::C)),
        Order::F => assert!(nd.is_contiguous(Order::F)),
    }
    nd
}

/// The NDBuffer's values as an oracle array (through `to_ndarray`).
pub fn values(nd: &NDBuffer) -> Oracle {
    macro_rules! conv {
        ($t:ty) => {
            nd.to_ndarray::<$t>()
                .unwrap()
                .mapv(|v| devbuf::zarr::Element::to_scalar(v))
        };
    }
    use ElementType as E;
    let a = match nd.dtype().element() {
        E::Bool => conv!(bool),
        E::Int8 => conv!(i8),
        E::Int16 => conv!(i16),
        E::Int32 => conv!(i32),
        E::Int64 => conv!(i64),
        E::UInt8 => conv!(u8),
        E::UInt16 => conv!(u16),
        E::UInt32 => conv!(u32),
        E::UInt64 => conv!(u64),
        E::Float16 => conv!(half::f16),
        E::Float32 => conv!(f32),
        E::Float64 => conv!(f64),
        E::Complex64 => conv!(num_complex::Complex32),
        E::Complex128 => conv!(num_complex::Complex64),
    };
    assert_eq!(a.shape(), nd.shape());
    a
}

pub fn same(a: &Oracle, b: &Oracle) -> bool {
    a.shape() == b.shape()
        && a.iter().zip(b.iter()).all(|(x, y)| {
            x.to_le_bytes() == y.to_le_bytes() && x.element_type() == y.element_type()
        })
}

pub fn assert_same(got: &Oracle, want: &Oracle, what: &str) {
    assert!(same(got, want), "{what}:\n got {got:?}\nwant {want:?}");
}

/// An independent model of numpy's slice on an axis of `len`: the selected indices.
pub fn slice_indices(s: &Slice, len: usize) -> Vec<usize> {
    let n = len as i64;
    let norm = |v: isize| {
        let v = v as i64;
        (if v < 0 { v + n } else { v }).clamp(0, n)
    };
    let start = s.start.map(norm).unwrap_or(0);
    let stop = s.stop.map(norm).unwrap_or(n);
    (0..n)
        .filter(|&i| i >= start && i < stop && (i - start) % s.step as i64 == 0)
        .map(|i| i as usize)
        .collect()
}

/// A random selection and, per axis, `Ok(index)` (axis dropped) or `Err(indices)`.
pub fn random_selection(
    rng: &mut SmallRng,
    shape: &[usize],
) -> (Vec<AxisSel>, Vec<Result<usize, Vec<usize>>>) {
    let k = rng.random_range(0..=shape.len());
    let mut sel = Vec::new();
    let mut model = Vec::new();
    for (ax, &len) in shape.iter().enumerate() {
        if ax >= k {
            model.push(Err((0..len).collect()));
            continue;
        }
        let choice = rng.random_range(0..4);
        if choice == 0 && len > 0 {
            let i = rng.random_range(0..len) as isize;
            let i = if rng.random() { i - len as isize } else { i };
            sel.push(AxisSel::Index(i));
            model.push(Ok(((i + len as isize) % len as isize) as usize));
        } else if choice == 1 {
            let a = rng.random_range(0..=len);
            let b = rng.random_range(a..=len);
            let step = rng.random_range(1..4);
            sel.push(AxisSel::Range {
                start: a,
                end: b,
                step,
            });
            model.push(Err((a..b).step_by(step).collect()));
        } else if choice == 2 {
            let r = |rng: &mut SmallRng| -> Option<isize> {
                if rng.random_ratio(1, 4) {
                    None
                } else {
                    Some(rng.random_range(-(len as i64) - 2..=len as i64 + 2) as isize)
                }
            };
            let s = Slice::new(r(rng), r(rng), rng.random_range(1i64..4) as isize);
            sel.push(AxisSel::Slice(s));
            model.push(Err(slice_indices(&s, len)));
        } else {
            sel.push(AxisSel::Full);
            model.push(Err((0..len).collect()));
        }
    }
    (sel, model)
}

/// The oracle's selection: a copy with the selected elements.
pub fn oracle_get(o: &Oracle, model: &[Result<usize, Vec<usize>>]) -> Oracle {
    let mut a = o.clone();
    // Go backwards so that dropping axes does not renumber the ones still to do.
    for (ax, m) in model.iter().enumerate().rev() {
        a = match m {
            Ok(i) => a.index_axis(Axis(ax), *i).to_owned(),
            Err(idx) => a.select(Axis(ax), idx),
        };
    }
    a
}

/// The oracle's assignment of `value` (already broadcast to the selection) into `o`.
pub fn oracle_set(o: &mut Oracle, model: &[Result<usize, Vec<usize>>], value: &Oracle) {
    let sel_shape: Vec<usize> = model
        .iter()
        .filter_map(|m| m.as_ref().err().map(|v| v.len()))
        .collect();
    assert_eq!(value.shape(), &sel_shape[..]);
    for (pos, v) in value.indexed_iter() {
        let mut full = Vec::new();
        let mut k = 0;
        for m in model {
            match m {
                Ok(i) => full.push(*i),
                Err(idx) => {
                    full.push(idx[pos[k]]);
                    k += 1;
                }
            }
        }
        o[IxDyn(&full)] = *v;
    }
}

pub fn case() -> impl Strategy<Value = (usize, bool, Vec<usize>, bool, u64)> {
    (
        0..ElementType::ALL.len(),
        any::<bool>(),
        proptest::collection::vec(0usize..5, 0..=4),
        any::<bool>(),
        any::<u64>(),
    )
}

pub fn setup(
    (t, big, shape, f, seed): (usize, bool, Vec<usize>, bool, u64),
) -> (SmallRng, Dtype, Order, Vec<usize>) {
    let el = ElementType::ALL[t];
    let endian = if big {
        Endianness::Big
    } else {
        Endianness::Little
    };
    let order = if f { Order::F } else { Order::C };
    (
        SmallRng::seed_from_u64(seed),
        Dtype::new(el, endian),
        order,
        shape,
    )
}
