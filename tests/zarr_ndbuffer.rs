//! Differential property tests of the host NDBuffer against an `ndarray` oracle:
//! random shapes (0-d, zero-length axes), element types, byte orders, memory orders
//! and selections.
//!
//! The oracle holds `Scalar`s in an `ndarray::ArrayD` and does every n-d operation with
//! ndarray's own indexing; element values are compared by their bytes, so NaN payloads
//! and signed zeros must match exactly.

use devbuf::zarr::{
    AxisSel, BufferPrototype, DataType, ElementType, Endianness, NDBuffer, Order, Scalar, Slice,
};
use ndarray::{ArrayD, Axis, IxDyn};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

type Oracle = ArrayD<Scalar>;

fn random_scalar(rng: &mut SmallRng, t: ElementType) -> Scalar {
    if t == ElementType::Bool {
        return Scalar::Bool(rng.random());
    }
    let special = [0.0, -0.0, f64::NAN, f64::INFINITY, -1.5, 1.0];
    if (t.is_float() || t.is_complex()) && rng.random_ratio(1, 4) {
        let v = special[rng.random_range(0..special.len())];
        return Scalar::Float64(v).cast(t);
    }
    let mut b = vec![0u8; t.size()];
    rng.fill(&mut b[..]);
    Scalar::from_le_bytes(t, &b).unwrap()
}

fn random_oracle(rng: &mut SmallRng, t: ElementType, shape: &[usize]) -> Oracle {
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
fn build(o: &Oracle, dtype: DataType, order: Order) -> NDBuffer {
    let mut bytes = Vec::new();
    let push = |s: &Scalar, bytes: &mut Vec<u8>| bytes.extend(s.to_bytes_as(dtype));
    match order {
        Order::C => o.iter().for_each(|s| push(s, &mut bytes)),
        Order::F => o.t().iter().for_each(|s| push(s, &mut bytes)),
    }
    let nd = NDBuffer::from_memory(bytes, o.shape(), dtype, order).unwrap();
    match order {
        Order::C => assert!(nd.is_c_contiguous()),
        Order::F => assert!(nd.is_f_contiguous()),
    }
    nd
}

/// The NDBuffer's values as an oracle array (through `to_ndarray`).
fn values(nd: &NDBuffer) -> Oracle {
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

fn same(a: &Oracle, b: &Oracle) -> bool {
    a.shape() == b.shape()
        && a.iter().zip(b.iter()).all(|(x, y)| {
            x.to_le_bytes() == y.to_le_bytes() && x.element_type() == y.element_type()
        })
}

fn assert_same(got: &Oracle, want: &Oracle, what: &str) {
    assert!(same(got, want), "{what}:\n got {got:?}\nwant {want:?}");
}

/// An independent model of numpy's slice on an axis of `len`: the selected indices.
fn slice_indices(s: &Slice, len: usize) -> Vec<usize> {
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
fn random_selection(
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
            sel.push(AxisSel::range_step(a..b, step));
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
fn oracle_get(o: &Oracle, model: &[Result<usize, Vec<usize>>]) -> Oracle {
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
fn oracle_set(o: &mut Oracle, model: &[Result<usize, Vec<usize>>], value: &Oracle) {
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

fn case() -> impl Strategy<Value = (usize, bool, Vec<usize>, bool, u64)> {
    (
        0..ElementType::ALL.len(),
        any::<bool>(),
        proptest::collection::vec(0usize..5, 0..=4),
        any::<bool>(),
        any::<u64>(),
    )
}

fn setup(
    (t, big, shape, f, seed): (usize, bool, Vec<usize>, bool, u64),
) -> (SmallRng, DataType, Order, Vec<usize>) {
    let el = ElementType::ALL[t];
    let endian = if big {
        Endianness::Big
    } else {
        Endianness::Little
    };
    let order = if f { Order::F } else { Order::C };
    (
        SmallRng::seed_from_u64(seed),
        DataType::new(el, endian),
        order,
        shape,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn round_trip_and_views(c in case()) {
        let (mut rng, dtype, order, shape) = setup(c);
        let o = random_oracle(&mut rng, dtype.element(), &shape);
        let nd = build(&o, dtype, order);
        assert_same(&values(&nd), &o, "round trip");
        // copy (C order), copy_order(F), transposes, reshape(-1).
        let c = nd.copy().unwrap();
        assert!(c.is_c_contiguous());
        assert_same(&values(&c), &o, "copy");
        assert!(nd.copy_order(Order::F).unwrap().is_f_contiguous());
        let mut perm: Vec<usize> = (0..shape.len()).collect();
        for i in (1..perm.len()).rev() {
            perm.swap(i, rng.random_range(0..=i));
        }
        let t = nd.transpose(Some(&perm)).unwrap();
        assert_eq!(t.as_ndarray_like().memory.address(), nd.as_ndarray_like().memory.address());
        assert_same(&values(&t), &o.clone().permuted_axes(perm.clone()), "transpose");
        assert_same(&values(&nd.transpose(None).unwrap()), &o.t().to_owned(), "transpose(None)");
        let flat = nd.reshape(&[-1]).unwrap();
        let want = ArrayD::from_shape_vec(IxDyn(&[o.len()]), o.iter().copied().collect()).unwrap();
        assert_same(&values(&flat), &want, "reshape(-1)");
        let flat_t = t.reshape(&[-1]).unwrap();
        let ot = o.clone().permuted_axes(perm.clone());
        let want = ArrayD::from_shape_vec(IxDyn(&[ot.len()]), ot.iter().copied().collect()).unwrap();
        assert_same(&values(&flat_t), &want, "transpose then reshape(-1)");
        // to_buffer is the C-order bytes.
        let bytes = t.to_buffer().unwrap().to_bytes().unwrap();
        let want: Vec<u8> = ot.iter().flat_map(|s| s.to_bytes_as(dtype)).collect();
        prop_assert_eq!(bytes, want);
        // len() and size
        prop_assert_eq!(nd.size(), o.len());
        prop_assert_eq!(nd.len().ok(), shape.first().copied());
    }

    #[test]
    fn get_matches_numpy_selection(c in case()) {
        let (mut rng, dtype, order, shape) = setup(c);
        let o = random_oracle(&mut rng, dtype.element(), &shape);
        let nd = build(&o, dtype, order);
        for _ in 0..4 {
            let (sel, model) = random_selection(&mut rng, &shape);
            let got = nd.get(&sel).unwrap();
            let want = oracle_get(&o, &model);
            assert_same(&values(&got), &want, &format!("get {sel:?}"));
            // Selections of selections, and the view shares memory.
            if got.size() > 0 {
                assert_eq!(got.as_ndarray_like().memory.address(), nd.as_ndarray_like().memory.address());
            }
            let (sel2, model2) = random_selection(&mut rng, got.shape());
            let got2 = got.get(&sel2).unwrap();
            assert_same(&values(&got2), &oracle_get(&want, &model2), "get of get");
            // as_scalar when one element is left.
            if got.size() == 1 {
                let s = got.as_scalar().unwrap();
                prop_assert_eq!(s.to_le_bytes(), want.iter().next().unwrap().to_le_bytes());
            } else {
                prop_assert!(got.as_scalar().is_err());
            }
        }
    }

    #[test]
    fn set_matches_numpy_assignment(c in case(), dst_big in any::<bool>(), vt in 0..ElementType::ALL.len()) {
        let (mut rng, dtype, order, shape) = setup(c);
        let mut o = random_oracle(&mut rng, dtype.element(), &shape);
        let mut nd = build(&o, dtype, order);
        let keep = nd.clone();
        let keep_values = values(&keep);
        for _ in 0..3 {
            let (sel, model) = random_selection(&mut rng, &shape);
            let sel_shape: Vec<usize> = model.iter().filter_map(|m| m.as_ref().err().map(|v| v.len())).collect();
            if rng.random() {
                // A scalar of any type, converted as numpy's unsafe cast does.
                let v = random_scalar(&mut rng, ElementType::ALL[vt]);
                nd.set_scalar(&sel, v).unwrap();
                let full = ArrayD::from_elem(IxDyn(&sel_shape), v.cast(dtype.element()));
                oracle_set(&mut o, &model, &full);
            } else {
                // An array value of another type and byte order, broadcast from a
                // shape with some axes of length 1 (or fewer axes).
                let vel = ElementType::ALL[vt];
                let drop = rng.random_range(0..=sel_shape.len());
                let vshape: Vec<usize> = sel_shape[drop..].iter().map(|&n| if rng.random_ratio(1, 3) { 1 } else { n }).collect();
                let vo = random_oracle(&mut rng, vel, &vshape);
                let vdtype = DataType::new(vel, if dst_big { Endianness::Big } else { Endianness::Little });
                let vorder = if rng.random() { Order::C } else { Order::F };
                let value = build(&vo, vdtype, vorder);
                nd.set(&sel, &value).unwrap();
                let b = vo.broadcast(IxDyn(&sel_shape)).unwrap().mapv(|s| s.cast(dtype.element()));
                oracle_set(&mut o, &model, &b);
            }
            assert_same(&values(&nd), &o, &format!("after set {sel:?}"));
        }
        // Copy-on-write: the clone taken before the writes did not change.
        assert_same(&values(&keep), &keep_values, "clone after writes");
        // Broadcast errors name both shapes.
        if shape.len() == 1 && shape[0] > 1 {
            let wrong = build(&random_oracle(&mut rng, dtype.element(), &[shape[0] + 1]), dtype, Order::C);
            let e = nd.set(&[], &wrong).unwrap_err().to_string();
            prop_assert!(e.contains("could not broadcast"), "{}", e);
        }
    }

    #[test]
    fn astype_matches_elementwise_cast(c in case(), to in 0..ElementType::ALL.len(), to_big in any::<bool>()) {
        let (mut rng, dtype, order, shape) = setup(c);
        let o = random_oracle(&mut rng, dtype.element(), &shape);
        let nd = build(&o, dtype, order);
        let target = DataType::new(ElementType::ALL[to], if to_big { Endianness::Big } else { Endianness::Little });
        // On the array and on a transposed, sliced view of it.
        let (sel, model) = random_selection(&mut rng, &shape);
        for (src, so) in [(nd.clone(), o.clone()), (nd.transpose(None).unwrap().get(&[]).unwrap(), o.t().to_owned()), (nd.get(&sel).unwrap(), oracle_get(&o, &model))] {
            let got = src.astype(target).unwrap();
            prop_assert_eq!(got.dtype(), target);
            assert_same(&values(&got), &so.mapv(|s| s.cast(target.element())), "astype");
            // Order K: a contiguous source keeps its memory order.
            if src.is_f_contiguous() && !src.is_c_contiguous() {
                prop_assert!(got.is_f_contiguous());
            }
        }
    }

    #[test]
    fn fill_squeeze_and_create(c in case()) {
        let (mut rng, dtype, order, shape) = setup(c);
        let v = random_scalar(&mut rng, dtype.element());
        let p = BufferPrototype::Host;
        let nd = NDBuffer::create(&p, &shape, dtype, order, Some(v)).unwrap();
        let want = ArrayD::from_elem(IxDyn(&shape), v);
        assert_same(&values(&nd), &want, "create");
        let z = NDBuffer::create(&p, &shape, dtype, order, None).unwrap();
        let zero = Scalar::Bool(false).cast(dtype.element());
        assert_same(&values(&z), &ArrayD::from_elem(IxDyn(&shape), zero), "create zeros");
        let e = NDBuffer::empty(&p, &shape, dtype, order).unwrap();
        match order {
            Order::C => prop_assert!(e.is_c_contiguous()),
            Order::F => prop_assert!(e.is_f_contiguous()),
        }
        let mut f = build(&random_oracle(&mut rng, dtype.element(), &shape), dtype, order);
        f.fill(v).unwrap();
        assert_same(&values(&f), &want, "fill");
        // squeeze the axes of length 1.
        let ones: Vec<usize> = (0..shape.len()).filter(|&a| shape[a] == 1).collect();
        let sq = f.squeeze(&ones).unwrap();
        let sq_shape: Vec<usize> = shape.iter().copied().filter(|&n| n != 1).collect();
        prop_assert_eq!(sq.shape(), &sq_shape[..]);
        if let Some(a) = (0..shape.len()).find(|&a| shape[a] != 1) {
            prop_assert!(f.squeeze(&[a]).is_err());
        }
    }

    #[test]
    fn all_equal_matches_the_numpy_definition(c in case(), other_t in 0..ElementType::ALL.len(), equal_nan in any::<bool>()) {
        let (mut rng, dtype, order, shape) = setup(c);
        let ot = ElementType::ALL[other_t];
        // Constant arrays (the interesting case) built from a value that is sometimes
        // the comparison value converted.
        let specials = [f64::NAN, 0.0, -0.0, 1.0, -1.0, 2.5, 65504.0, 1e300];
        let other = if rng.random_ratio(1, 2) {
            Scalar::Float64(specials[rng.random_range(0..specials.len())]).cast(ot)
        } else {
            random_scalar(&mut rng, ot)
        };
        let fillv = if rng.random() { other.cast(dtype.element()) } else { random_scalar(&mut rng, dtype.element()) };
        let mut o = ArrayD::from_elem(IxDyn(&shape), fillv);
        if o.len() > 1 && rng.random_ratio(1, 3) {
            let n = o.len();
            let k = rng.random_range(0..n);
            *o.iter_mut().nth(k).unwrap() = random_scalar(&mut rng, dtype.element());
        }
        let nd = build(&o, dtype, order);
        let got = nd.all_equal(Some(other), equal_nan).unwrap();
        prop_assert_eq!(got, model_all_equal(&o, other, equal_nan), "{:?} vs {:?}", o, other);
        prop_assert!(!nd.all_equal(None, equal_nan).unwrap());
        // The same on a strided view.
        let (sel, model) = random_selection(&mut rng, &shape);
        let view = nd.get(&sel).unwrap();
        let vo = oracle_get(&o, &model);
        prop_assert_eq!(view.all_equal(Some(other), equal_nan).unwrap(), model_all_equal(&vo, other, equal_nan));
    }
}

/// zarr's `all_equal`, written from its definition: float zero → bitwise in the data's
/// type; otherwise numpy's array_equal in the promoted type.
fn model_all_equal(o: &Oracle, other: Scalar, equal_nan: bool) -> bool {
    let Some(first) = o.iter().next() else {
        return true;
    };
    let data = first.element_type();
    if other.is_float_zero() {
        let z = other.cast(data).to_le_bytes();
        return o.iter().all(|x| x.to_le_bytes() == z);
    }
    let p = devbuf::zarr::promote_types(data, other.element_type());
    let parts = |s: Scalar| -> (f64, f64, Option<i128>) {
        match s.cast(p) {
            Scalar::Bool(b) => (b as u8 as f64, 0.0, Some(b as i128)),
            Scalar::Int8(v) => (v as f64, 0.0, Some(v as i128)),
            Scalar::Int16(v) => (v as f64, 0.0, Some(v as i128)),
            Scalar::Int32(v) => (v as f64, 0.0, Some(v as i128)),
            Scalar::Int64(v) => (v as f64, 0.0, Some(v as i128)),
            Scalar::UInt8(v) => (v as f64, 0.0, Some(v as i128)),
            Scalar::UInt16(v) => (v as f64, 0.0, Some(v as i128)),
            Scalar::UInt32(v) => (v as f64, 0.0, Some(v as i128)),
            Scalar::UInt64(v) => (v as f64, 0.0, Some(v as i128)),
            Scalar::Float16(v) => (v.to_f64(), 0.0, None),
            Scalar::Float32(v) => (v as f64, 0.0, None),
            Scalar::Float64(v) => (v, 0.0, None),
            Scalar::Complex64(v) => (v.re as f64, v.im as f64, None),
            Scalar::Complex128(v) => (v.re, v.im, None),
        }
    };
    let v = parts(other);
    o.iter().all(|&x| {
        let x = parts(x);
        if let (Some(a), Some(b)) = (x.2, v.2) {
            return a == b;
        }
        let xn = x.0.is_nan() || x.1.is_nan();
        let vn = v.0.is_nan() || v.1.is_nan();
        if equal_nan && (xn || vn) {
            xn && vn
        } else {
            x.0 == v.0 && x.1 == v.1
        }
    })
}
