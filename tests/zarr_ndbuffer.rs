//! Differential property tests of the host NDBuffer against an `ndarray` oracle:
//! random shapes (0-d, zero-length axes), element types, byte orders, memory orders
//! and selections.
//!
//! The oracle holds `Scalar`s in an `ndarray::ArrayD` and does every n-d operation with
//! ndarray's own indexing; element values are compared by their bytes, so NaN payloads
//! and signed zeros must match exactly.

#[path = "common/ndbuffer_oracle.rs"]
mod oracle;

use devbuf::ElementType;
use devbuf::zarr::{BufferPrototype, Dtype, Endianness, NDBuffer, Order, Scalar};
use ndarray::{ArrayD, IxDyn};
use oracle::*;
use proptest::prelude::*;
use rand::Rng;

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn round_trip_and_views(c in case()) {
        let (mut rng, dtype, order, shape) = setup(c);
        let o = random_oracle(&mut rng, dtype.element(), &shape);
        let nd = build(&o, dtype, order);
        assert_same(&values(&nd), &o, "round trip");
        // copy (C order), copy_order(F), transposes, reshape(-1).
        let c = nd.copy_order(Order::C).unwrap();
        assert!(c.is_contiguous(Order::C));
        assert_same(&values(&c), &o, "copy");
        assert!(nd.copy_order(Order::F).unwrap().is_contiguous(Order::F));
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
        let bytes = t.to_buffer().unwrap().to_host().unwrap();
        let want: Vec<u8> = ot.iter().flat_map(|s| s.to_bytes_as(dtype)).collect();
        prop_assert_eq!(bytes, want);
        // len() (shape()[0]) and size
        prop_assert_eq!(nd.size(), o.len());
        prop_assert_eq!(nd.shape().first().copied(), shape.first().copied());
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
                let vdtype = Dtype::new(vel, if dst_big { Endianness::Big } else { Endianness::Little });
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
        let target = Dtype::new(ElementType::ALL[to], if to_big { Endianness::Big } else { Endianness::Little });
        // On the array and on a transposed, sliced view of it.
        let (sel, model) = random_selection(&mut rng, &shape);
        for (src, so) in [(nd.clone(), o.clone()), (nd.transpose(None).unwrap().get(&[]).unwrap(), o.t().to_owned()), (nd.get(&sel).unwrap(), oracle_get(&o, &model))] {
            let got = src.astype(target).unwrap();
            prop_assert_eq!(got.dtype(), target);
            assert_same(&values(&got), &so.mapv(|s| s.cast(target.element())), "astype");
            // Order K: a contiguous source keeps its memory order.
            if src.is_contiguous(Order::F) && !src.is_contiguous(Order::C) {
                prop_assert!(got.is_contiguous(Order::F));
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
            Order::C => prop_assert!(e.is_contiguous(Order::C)),
            Order::F => prop_assert!(e.is_contiguous(Order::F)),
        }
        let mut f = build(&random_oracle(&mut rng, dtype.element(), &shape), dtype, order);
        f.set_scalar(&[], v).unwrap();
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
    let float_zero = match other {
        Scalar::Float16(v) => v.to_f32() == 0.0,
        Scalar::Float32(v) => v == 0.0,
        Scalar::Float64(v) => v == 0.0,
        _ => false,
    };
    if float_zero {
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
