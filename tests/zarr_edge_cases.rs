//! zarr-python's own edge cases for NDBuffer, on the host: all_equal with NaN, -0.0
//! and None; as_scalar on 0-d and (1,) shapes; empty honouring order; big-endian round
//! trips; errors that say what was wrong.

use devbuf::ElementType;
use devbuf::zarr::{BufferPrototype, Dtype, Endianness, NDBuffer, Order, Scalar, Slice};
use half::f16;
use num_complex::Complex32;

const P: BufferPrototype = BufferPrototype::Host;

fn full(shape: &[usize], dtype: Dtype, v: Scalar) -> NDBuffer {
    NDBuffer::create(&P, shape, dtype, Order::C, Some(v)).unwrap()
}

#[test]
fn all_equal_none_is_false() {
    let nd = full(&[2, 2], Dtype::INT32, Scalar::from(0i32));
    assert!(!nd.all_equal(None, true).unwrap());
    let empty = full(&[0], Dtype::INT32, Scalar::from(0i32));
    assert!(!empty.all_equal(None, true).unwrap());
    assert!(empty.all_equal(Some(Scalar::from(5i32)), false).unwrap());
}

#[test]
fn all_equal_signed_zero_is_bitwise() {
    for t in [
        ElementType::Float16,
        ElementType::Float32,
        ElementType::Float64,
    ] {
        for endian in [Endianness::Little, Endianness::Big] {
            let dt = Dtype::new(t, endian);
            let neg = full(&[3], dt, Scalar::from(-0.0f64));
            let pos = full(&[3], dt, Scalar::from(0.0f64));
            assert!(
                !neg.all_equal(Some(Scalar::from(0.0f64)), true).unwrap(),
                "{dt}"
            );
            assert!(
                !neg.all_equal(Some(Scalar::from(0.0f32)), true).unwrap(),
                "{dt}"
            );
            assert!(
                neg.all_equal(Some(Scalar::from(-0.0f32)), true).unwrap(),
                "{dt}"
            );
            assert!(
                pos.all_equal(Some(Scalar::from(0.0f64)), false).unwrap(),
                "{dt}"
            );
            assert!(
                !pos.all_equal(Some(Scalar::from(-0.0f64)), false).unwrap(),
                "{dt}"
            );
            // A non-float zero compares by value: -0.0 == 0.
            assert!(
                neg.all_equal(Some(Scalar::from(0i64)), true).unwrap(),
                "{dt}"
            );
            assert!(
                neg.all_equal(Some(Scalar::from(false)), true).unwrap(),
                "{dt}"
            );
        }
    }
    // A float zero against integer data: converted, then bit for bit.
    let ints = full(&[4], Dtype::UINT16, Scalar::from(0u16));
    assert!(ints.all_equal(Some(Scalar::from(-0.0f64)), true).unwrap());
    let c = full(
        &[2],
        Dtype::COMPLEX64,
        Scalar::from(Complex32::new(-0.0, 0.0)),
    );
    assert!(!c.all_equal(Some(Scalar::from(0.0f32)), true).unwrap());
    assert!(c.all_equal(Some(Scalar::from(-0.0f32)), true).unwrap());
}

#[test]
fn all_equal_nan_rules() {
    for t in [
        ElementType::Float16,
        ElementType::Float32,
        ElementType::Float64,
        ElementType::Complex64,
        ElementType::Complex128,
    ] {
        let dt = Dtype::new(t, Endianness::Big);
        let nan = full(&[2, 3], dt, Scalar::from(f64::NAN));
        assert!(
            nan.all_equal(Some(Scalar::from(f64::NAN)), true).unwrap(),
            "{dt}"
        );
        assert!(
            nan.all_equal(Some(Scalar::from(f32::NAN)), true).unwrap(),
            "{dt}"
        );
        assert!(
            !nan.all_equal(Some(Scalar::from(f64::NAN)), false).unwrap(),
            "{dt}"
        );
        assert!(
            !nan.all_equal(Some(Scalar::from(1.0f64)), true).unwrap(),
            "{dt}"
        );
    }
    // Integers are never NaN.
    let ints = full(&[2], Dtype::INT8, Scalar::from(0i8));
    assert!(!ints.all_equal(Some(Scalar::from(f64::NAN)), true).unwrap());
    // Complex: a NaN in either part makes the number NaN (numpy's isnan mask).
    let c = full(
        &[2],
        Dtype::COMPLEX64,
        Scalar::from(Complex32::new(1.0, f32::NAN)),
    );
    assert!(
        c.all_equal(Some(Scalar::from(Complex32::new(f32::NAN, 7.0))), true)
            .unwrap()
    );
    assert!(
        !c.all_equal(Some(Scalar::from(Complex32::new(f32::NAN, 7.0))), false)
            .unwrap()
    );
}

#[test]
fn all_equal_promotes_like_numpy() {
    // float32 data against a float64 value: compared as float64, so 0.1f32 != 0.1.
    let a = full(&[3], Dtype::FLOAT32, Scalar::from(0.1f32));
    assert!(!a.all_equal(Some(Scalar::from(0.1f64)), true).unwrap());
    assert!(a.all_equal(Some(Scalar::from(0.1f32)), true).unwrap());
    assert!(
        a.all_equal(Some(Scalar::from(0.1f32 as f64)), true)
            .unwrap()
    );
    // int data against a fractional float: never equal; against an integral one: equal.
    let i = full(&[3], Dtype::INT16, Scalar::from(3i16));
    assert!(!i.all_equal(Some(Scalar::from(3.5f64)), true).unwrap());
    assert!(i.all_equal(Some(Scalar::from(3.0f32)), true).unwrap());
    // uint8 data against -1: not equal (no wrap-around in the comparison).
    let u = full(&[3], Dtype::UINT8, Scalar::from(255u8));
    assert!(!u.all_equal(Some(Scalar::from(-1i8)), true).unwrap());
    assert!(u.all_equal(Some(Scalar::from(255i64)), true).unwrap());
    // int64 against float64 compares in float64 (numpy's promotion loses precision).
    let big = full(&[2], Dtype::INT64, Scalar::from((1i64 << 53) + 1));
    assert!(
        big.all_equal(Some(Scalar::from((1u64 << 53) as f64)), true)
            .unwrap()
    );
    assert!(!big.all_equal(Some(Scalar::from(1i64 << 53)), true).unwrap());
    // bool data.
    let t = full(&[2], Dtype::BOOL, Scalar::from(true));
    assert!(t.all_equal(Some(Scalar::from(1u8)), true).unwrap());
    assert!(!t.all_equal(Some(Scalar::from(2u8)), true).unwrap());
    // float16 data against a float16 value and a float32 one.
    let h = full(
        &[4],
        Dtype::new(ElementType::Float16, Endianness::Big),
        Scalar::from(f16::from_f32(0.1)),
    );
    assert!(
        h.all_equal(Some(Scalar::from(f16::from_f32(0.1))), true)
            .unwrap()
    );
    assert!(!h.all_equal(Some(Scalar::from(0.1f32)), true).unwrap());
}

#[test]
fn as_scalar_on_0d_and_1_shapes() {
    let zero_d = full(&[], Dtype::INT64, Scalar::from(42i64));
    assert_eq!(zero_d.ndim(), 0);
    assert_eq!(zero_d.as_scalar().unwrap(), Scalar::Int64(42));
    assert!(zero_d.shape().is_empty()); // 0-d: Python says "len() of unsized object"
    let one = full(
        &[1],
        Dtype::new(ElementType::Float32, Endianness::Big),
        Scalar::from(2.5f32),
    );
    assert_eq!(one.as_scalar().unwrap(), Scalar::Float32(2.5));
    let one_one = full(&[1, 1], Dtype::COMPLEX128, Scalar::from(1.5f64));
    assert_eq!(
        one_one.as_scalar().unwrap(),
        Scalar::Complex128(num_complex::Complex64::new(1.5, 0.0))
    );
    let two = NDBuffer::create(&P, &[1, 2], Dtype::INT64, Order::C, None).unwrap();
    let e = two.as_scalar().unwrap_err().to_string();
    assert!(
        e.contains("Buffer does not contain a single scalar value"),
        "{e}"
    );
    // A single element picked out of a bigger array.
    let a = NDBuffer::from_ndarray(ndarray::arr2(&[[1u32, 2], [3, 4]]));
    assert_eq!(
        a.get(&[1.into(), 0.into()]).unwrap().as_scalar().unwrap(),
        Scalar::UInt32(3)
    );
    assert_eq!(
        a.get(&[Slice::new(Some(-1), Some(2), 1).into(), (1..2).into()])
            .unwrap()
            .as_scalar()
            .unwrap(),
        Scalar::UInt32(4)
    );
}

#[test]
fn empty_honours_order() {
    for shape in [&[1usize, 2][..], &[1, 2, 3], &[4, 3]] {
        for dt in [Dtype::INT32, Dtype::FLOAT64] {
            let c = NDBuffer::empty(&P, shape, dt, Order::C).unwrap();
            assert!(c.is_contiguous(Order::C));
            assert_eq!(c.shape(), shape);
            assert_eq!(c.dtype(), dt);
            let f = NDBuffer::empty(&P, shape, dt, Order::F).unwrap();
            assert!(f.is_contiguous(Order::F));
            if shape.iter().filter(|&&n| n > 1).count() > 1 {
                assert!(!f.is_contiguous(Order::C));
                assert!(!c.is_contiguous(Order::F));
            }
        }
    }
}

#[test]
fn big_endian_round_trips() {
    let values = [1.5f64, -2.25, f64::INFINITY, 1e-300];
    let a = ndarray::arr1(&values).into_dyn();
    let nd = NDBuffer::from_ndarray(a.clone());
    let big = nd
        .astype(Dtype::new(ElementType::Float64, Endianness::Big))
        .unwrap();
    assert_eq!(big.dtype().byteorder(), Endianness::Big);
    let raw = big.to_buffer().unwrap().to_host().unwrap();
    assert_eq!(&raw[..8], &1.5f64.to_be_bytes());
    assert_eq!(big.to_ndarray::<f64>().unwrap(), a);
    let back = big
        .astype(Dtype::new(ElementType::Float64, Endianness::Little))
        .unwrap();
    assert_eq!(
        back.to_buffer().unwrap().to_host().unwrap()[..8],
        1.5f64.to_le_bytes()
    );
    // Big-endian data converted to another type and byte order, and indexed.
    let i = big
        .astype(Dtype::new(ElementType::Int16, Endianness::Big))
        .unwrap();
    assert_eq!(
        i.get(&[1.into()]).unwrap().as_scalar().unwrap(),
        Scalar::Int16(-2)
    );
    assert_eq!(
        i.to_buffer().unwrap().to_host().unwrap()[..2],
        1i16.to_be_bytes()
    );
    // Complex numbers swap each part.
    let c = NDBuffer::from_memory(
        [1.0f32.to_be_bytes(), 2.0f32.to_be_bytes()].concat(),
        &[],
        Dtype::new(ElementType::Complex64, Endianness::Big),
        Order::C,
    )
    .unwrap();
    assert_eq!(
        c.as_scalar().unwrap(),
        Scalar::Complex64(Complex32::new(1.0, 2.0))
    );
    assert_eq!(c.to_string(), "<NDBuffer shape=() dtype=>c8 host [(1+2j)]>");
    // as_array_view refuses big-endian data, to_ndarray converts it.
    assert!(big.as_array_view::<f64>().is_err());
    assert!(nd.as_array_view::<f64>().is_ok());
}

#[test]
fn reshape_squeeze_transpose_errors() {
    let nd = NDBuffer::create(&P, &[2, 3], Dtype::UINT8, Order::F, None).unwrap();
    assert_eq!(nd.reshape(&[3, -1]).unwrap().shape(), &[3, 2]);
    assert_eq!(nd.reshape(&[-1]).unwrap().shape(), &[6]);
    let e = nd.reshape(&[4, -1]).unwrap_err().to_string();
    assert!(
        e.contains("cannot reshape array of size 6 into shape [4, -1]"),
        "{e}"
    );
    assert!(nd.reshape(&[-1, -1]).is_err());
    assert!(nd.reshape(&[7]).is_err());
    assert!(nd.reshape(&[-2, 3]).is_err());
    let e = nd.transpose(Some(&[0, 0])).unwrap_err().to_string();
    assert!(e.contains("not a permutation"), "{e}");
    assert!(nd.transpose(Some(&[1])).is_err());
    let e = nd.squeeze(&[0]).unwrap_err().to_string();
    assert!(e.contains("length 2, not 1"), "{e}");
    assert!(nd.squeeze(&[5]).is_err());
    let e = nd.get(&[2.into()]).unwrap_err().to_string();
    assert!(
        e.contains("index 2 is out of bounds for axis 0 with size 2"),
        "{e}"
    );
    let e = nd
        .get(&[0.into(), 0.into(), 0.into()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("too many indices"), "{e}");
    assert!(nd.get(&[Slice::new(None, None, 0).into()]).is_err());
    let e = NDBuffer::from_memory(vec![0u8; 5], &[2], Dtype::INT32, Order::C)
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot hold shape [2]"), "{e}");
    assert!(NDBuffer::from_parts(vec![0u8; 8], Dtype::INT32, &[2], &[8], 0).is_err());
    assert!(
        NDBuffer::from_ndarray(ndarray::arr1(&[1.5f32]))
            .to_ndarray::<f64>()
            .is_err()
    );
}

#[test]
fn from_ndarray_is_zero_copy_for_any_layout() {
    let a = ndarray::Array2::from_shape_fn((3, 4), |(i, j)| (i * 10 + j) as i32);
    let ptr = a.as_ptr() as u64;
    let f = a.clone().reversed_axes(); // F-order array
    let fptr = f.as_ptr() as u64;
    let a_values = a.clone();
    let nd = NDBuffer::from_ndarray(a);
    assert_eq!(nd.as_ndarray_like().memory.address(), ptr);
    let view = nd.as_array_view::<i32>().unwrap();
    assert_eq!(view.as_ptr() as u64, ptr);
    assert_eq!(view, a_values.view().into_dyn());
    let want = f.clone();
    let ndf = NDBuffer::from_ndarray(f);
    assert_eq!(ndf.as_ndarray_like().memory.address(), fptr);
    assert!(ndf.is_contiguous(Order::F));
    let back = ndf.to_ndarray::<i32>().unwrap();
    assert_eq!(back, want.into_dyn());
    assert!(back.t().is_standard_layout(), "to_ndarray keeps F order");
    // Negative strides are copied into standard layout.
    let mut r = a_values.clone();
    r.invert_axis(ndarray::Axis(1));
    let ndr = NDBuffer::from_ndarray(r.clone());
    assert_eq!(ndr.to_ndarray::<i32>().unwrap(), r.into_dyn());
}

#[test]
fn writes_to_views_and_clones_do_not_leak() {
    let mut a = NDBuffer::from_ndarray(ndarray::Array1::from_vec(vec![0u8; 6]));
    let snapshot = a.clone();
    let mut view = a.get(&[(2..4).into()]).unwrap();
    view.set_scalar(&[], Scalar::from(9u8)).unwrap();
    assert_eq!(
        view.to_ndarray::<u8>()
            .unwrap()
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        [9, 9]
    );
    assert_eq!(
        a.to_ndarray::<u8>()
            .unwrap()
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        [0; 6]
    );
    a.set_scalar(&[Slice::new(None, None, 2).into()], Scalar::from(1u8))
        .unwrap();
    assert_eq!(
        a.to_ndarray::<u8>()
            .unwrap()
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        [1, 0, 1, 0, 1, 0]
    );
    assert_eq!(
        snapshot
            .to_ndarray::<u8>()
            .unwrap()
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        [0; 6]
    );
    // Setting from a view of itself (overlapping memory) reads the old values.
    let src = a.get(&[(0..3).into()]).unwrap();
    a.set(&[(3..6).into()], &src).unwrap();
    assert_eq!(
        a.to_ndarray::<u8>()
            .unwrap()
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        [1, 0, 1, 1, 0, 1]
    );
    // A buffer nobody else sees is written in place.
    let mut own = NDBuffer::create(&P, &[4], Dtype::INT32, Order::C, None).unwrap();
    let addr = own.as_ndarray_like().memory.address();
    own.set_scalar(&[], Scalar::from(3i32)).unwrap();
    own.set_scalar(&[0.into()], Scalar::from(1.9f64)).unwrap();
    assert_eq!(own.as_ndarray_like().memory.address(), addr);
    assert_eq!(
        own.to_ndarray::<i32>()
            .unwrap()
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        [1, 3, 3, 3]
    );
}

/// Steps far larger than the axis select its first element (numpy), and must not
/// overflow the byte stride (`stride * step`): that was an arithmetic-overflow panic.
#[test]
fn huge_steps_select_one_element() {
    use devbuf::zarr::AxisSel;
    let a = ndarray::Array::from_shape_vec((3, 4), (0..12).map(|v| v as i64).collect()).unwrap();
    let nd = NDBuffer::from_ndarray(a);
    for (s0, s1) in [
        (
            AxisSel::Range {
                start: 1,
                end: 3,
                step: usize::MAX,
            },
            AxisSel::Range {
                start: 1,
                end: 4,
                step: usize::MAX,
            },
        ),
        (
            Slice::new(Some(1), None, isize::MAX).into(),
            Slice::new(Some(1), None, isize::MAX).into(),
        ),
        (
            AxisSel::Range {
                start: 1,
                end: 3,
                step: usize::MAX / 2 + 1,
            },
            AxisSel::Range {
                start: 1,
                end: 4,
                step: 1 << 61,
            },
        ),
    ] {
        let sel = [s0, s1];
        let v = nd.get(&sel).unwrap();
        assert_eq!(v.shape(), &[1, 1]);
        assert_eq!(v.as_scalar().unwrap(), Scalar::Int64(5));
        assert_eq!(
            v.copy_order(Order::C).unwrap().as_scalar().unwrap(),
            Scalar::Int64(5)
        );
        assert_eq!(
            v.to_ndarray::<i64>().unwrap().into_raw_vec_and_offset().0,
            vec![5]
        );
        assert!(v.all_equal(Some(Scalar::Int64(5)), false).unwrap());
        let at = |n: &NDBuffer| n.get(&[1.into(), 1.into()]).unwrap().as_scalar().unwrap();
        let mut w = nd.clone();
        w.set_scalar(&sel, Scalar::Int64(-1)).unwrap();
        assert_eq!(at(&w), Scalar::Int64(-1));
        let mut u = nd.clone();
        u.set(&sel, &w.get(&[1.into(), 1.into()]).unwrap()).unwrap();
        assert_eq!(at(&u), Scalar::Int64(-1));
        assert_eq!(at(&nd), Scalar::Int64(5));
    }
}

/// Sizes that no allocator can satisfy are errors that name the size, not a
/// capacity-overflow panic or an abort.
#[test]
fn impossible_host_allocations_are_errors() {
    for shape in [
        vec![1usize << 62],
        vec![isize::MAX as usize + 1],
        vec![1 << 40, 1 << 21],
    ] {
        let e = NDBuffer::create(&P, &shape, Dtype::UINT8, Order::C, None).unwrap_err();
        assert!(e.to_string().contains("bytes"), "{e}");
        assert!(NDBuffer::empty(&P, &shape, Dtype::UINT8, Order::F).is_err());
        assert!(
            NDBuffer::create(&P, &shape, Dtype::UINT8, Order::C, Some(Scalar::from(3u8))).is_err()
        );
    }
}

/// `a..=b` whose end would be `usize::MAX` (the "to the end" marker of
/// `AxisSel::Range`) is still a range past the end: an error, not the whole axis.
#[test]
fn inclusive_ranges_near_usize_max_are_out_of_bounds() {
    use devbuf::zarr::AxisSel;
    let nd = NDBuffer::create(&P, &[4], Dtype::UINT8, Order::C, None).unwrap();
    for sel in [
        AxisSel::from(0..=usize::MAX - 1),
        AxisSel::from(0..=usize::MAX),
        AxisSel::from(..=usize::MAX - 1),
        AxisSel::from(..=usize::MAX),
    ] {
        let e = nd.get(&[sel]).unwrap_err().to_string();
        assert!(
            e.contains("out of bounds for axis 0 with size 4"),
            "{sel:?}: {e}"
        );
    }
    assert_eq!(nd.get(&[(1..=3).into()]).unwrap().shape(), &[3]);
    assert_eq!(nd.get(&[(..=3).into()]).unwrap().shape(), &[4]);
    assert_eq!(nd.get(&[(2..).into()]).unwrap().shape(), &[2]);
}

/// `from_parts` accepts any stride for an axis of length 1 and for an empty view
/// (numpy does too): such strides are never stepped along, and must not overflow
/// offsets or reach the copy loops (they did: arithmetic-overflow panics).
#[test]
fn unused_strides_may_be_anything() {
    use devbuf::zarr::AxisSel;
    let bytes: Vec<u8> = (0u8..12).collect();
    // Three rows of one u32, a row stride of 4 and a column stride beyond isize.
    for unused in [isize::MAX as usize, usize::MAX, 7] {
        let nd =
            NDBuffer::from_parts(bytes.clone(), Dtype::UINT32, &[3, 1], &[4, unused], 0).unwrap();
        let want: Vec<u32> = (0..3)
            .map(|i| u32::from_le_bytes([4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3]))
            .collect();
        assert_eq!(
            nd.copy_order(Order::C)
                .unwrap()
                .to_ndarray::<u32>()
                .unwrap()
                .into_raw_vec_and_offset()
                .0,
            want
        );
        assert_eq!(
            nd.to_ndarray::<u32>()
                .unwrap()
                .iter()
                .copied()
                .collect::<Vec<_>>(),
            want
        );
        assert_eq!(
            nd.astype(Dtype::INT64)
                .unwrap()
                .get(&[2.into(), 0.into()])
                .unwrap()
                .as_scalar()
                .unwrap(),
            Scalar::Int64(want[2] as i64)
        );
        let mut w = nd.clone();
        w.set(
            &[AxisSel::Full],
            &nd.transpose(None).unwrap().transpose(None).unwrap(),
        )
        .unwrap();
        w.set_scalar(&[1.into()], Scalar::from(9u32)).unwrap();
        assert_eq!(
            w.get(&[1.into(), 0.into()]).unwrap().as_scalar().unwrap(),
            Scalar::UInt32(9)
        );
        // A zero-copy view: the unused stride is not handed to ndarray (it would be
        // negative there: undefined behaviour in release builds, a panic in debug).
        let v = nd.as_array_view::<u32>().unwrap();
        assert_eq!(v.iter().copied().collect::<Vec<_>>(), want);
        assert!(nd.all_equal(Some(Scalar::from(0u32)), false).is_ok());
        assert!(
            nd.to_string()
                .starts_with("<NDBuffer shape=(3, 1) dtype=uint32")
        );
    }
    // An empty view with huge strides: selections and copies stay empty.
    let e = NDBuffer::from_parts(bytes, Dtype::UINT32, &[5, 0], &[usize::MAX - 1, 4], 7).unwrap();
    for sel in [
        vec![AxisSel::Index(3)],
        vec![AxisSel::Range {
            start: 1,
            end: 5,
            step: 2,
        }],
        vec![],
    ] {
        let v = e.get(&sel).unwrap();
        assert_eq!(v.size(), 0);
        assert_eq!(v.copy_order(Order::C).unwrap().size(), 0);
        assert!(v.to_ndarray::<u32>().unwrap().is_empty());
    }
    let mut m = e.clone();
    m.set(
        &[AxisSel::Index(4)],
        &NDBuffer::from_ndarray(ndarray::Array1::<u32>::zeros(0)),
    )
    .unwrap();
    m.set_scalar(&[], Scalar::from(1u32)).unwrap();
}

/// NDBuffers hold at most `isize::MAX` bytes (what Rust allocations, slices and
/// ndarray views allow), so views of broadcast memory that claim more are refused,
/// and a cast to a wider type that would need more is an error, not an overflow.
#[test]
fn views_are_limited_to_isize_max_bytes() {
    let m = vec![0u8; 16];
    let e = NDBuffer::from_parts(m.clone(), Dtype::UINT8, &[1 << 63], &[0], 0).unwrap_err();
    assert!(
        e.to_string().contains("more bytes than fit in memory"),
        "{e}"
    );
    assert!(NDBuffer::from_parts(m.clone(), Dtype::UINT16, &[1 << 62], &[0], 0).is_err());
    let big = NDBuffer::from_parts(m, Dtype::UINT8, &[1 << 62], &[0], 0).unwrap();
    assert!(big.astype(Dtype::COMPLEX128).is_err()); // 2^66 bytes
    assert!(big.astype(Dtype::INT16).is_err()); // 2^63 bytes
    // Printing shows the first values without walking 2^62 elements.
    assert_eq!(
        big.to_string(),
        format!(
            "<NDBuffer shape=({},) dtype=uint8 host [{}, ...]>",
            1u64 << 62,
            ["0"; 16].join(", ")
        )
    );
    let b = NDBuffer::from_parts(vec![1u8], Dtype::BOOL, &[1 << 40, 1 << 20], &[0, 0], 0).unwrap();
    assert!(b.to_string().ends_with("[True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, True, ...]>"));
}
