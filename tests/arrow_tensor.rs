//! NDBuffer ⇄ Arrow on the host: every element type and byte order, every shape class
//! (0-d, zero-length axes, 1-d, n-d) and layout (C, F, transposed, strided, offset,
//! misaligned), flat / tensor / rows forms, zero-copy by address, round trips, the
//! `arrow.fixed_shape_tensor` permutation checked index by index against the spec's
//! definition, metadata interoperability with arrow-rs, and errors.
//!
//! Values are compared as bytes (NaN payloads and signed zeros must match), against an
//! oracle computed without the code under test: the NDBuffer's own C-order bytes and
//! Arrow's own buffers read through arrow-rs.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, BooleanArray, FixedSizeListArray, Float16Array, Float32Array, Int32Array,
    StringArray, UInt8Array,
};
use arrow_data::ArrayData;
use arrow_schema::extension::{
    EXTENSION_TYPE_METADATA_KEY, EXTENSION_TYPE_NAME_KEY, ExtensionType, FixedShapeTensor,
};
use arrow_schema::{DataType as ArrowType, Field};
use devbuf::ElementType;
use devbuf::arrow::{AnyArray, FIXED_SHAPE_TENSOR, TensorArray, TensorType};
use devbuf::memory::Memory;
use devbuf::zarr::{AxisSel, BufferPrototype, Dtype, Endianness, NDBuffer, Order};
use rand::Rng;

#[path = "common/arrays.rs"]
mod arrays;
#[path = "common/random.rs"]
mod random;
use arrays::{KINDS, Kind, c_bytes, dtypes, make, random_values};
use random::seeded;

// ------------------------------------------------------------------------------ helpers

/// The host storage of a tensor array made from host memory.
fn host(t: &TensorArray) -> &FixedSizeListArray {
    t.storage()
        .as_host()
        .expect("a host NDBuffer gives host storage")
        .as_fixed_size_list()
}

/// A tensor column read back: the tensor type from its field, the storage from the array.
fn from_column(field: &Field, array: impl Into<AnyArray>) -> devbuf::Result<TensorArray> {
    TensorArray::try_new(TensorType::from_field(field)?, array)
}

/// The bytes of an Arrow array's elements (from its offset, `len` of them) read through
/// arrow-rs alone; returns the bytes and the width of one element.
fn arrow_bytes(data: &ArrayData) -> (Vec<u8>, usize) {
    match data.data_type() {
        ArrowType::Boolean => {
            let a = BooleanArray::from(data.clone());
            (a.values().iter().map(u8::from).collect(), 1)
        }
        ArrowType::FixedSizeList(_, k) => {
            let k = *k as usize;
            let (child, w) = arrow_bytes(&data.child_data()[0]);
            let w = w * k;
            (
                child[data.offset() * w..(data.offset() + data.len()) * w].to_vec(),
                w,
            )
        }
        dt => {
            let w = dt.primitive_width().unwrap();
            let b = &data.buffers()[0];
            (
                b.as_slice()[data.offset() * w..(data.offset() + data.len()) * w].to_vec(),
                w,
            )
        }
    }
}

/// The address of the innermost values buffer.
fn values_ptr(data: &ArrayData) -> u64 {
    match data.data_type() {
        ArrowType::FixedSizeList(_, _) => values_ptr(&data.child_data()[0]),
        _ => data.buffers()[0].as_ptr() as u64,
    }
}

/// The address of element `[0, .., 0]` of `nd`.
fn first_ptr(nd: &NDBuffer) -> u64 {
    let l = nd.as_ndarray_like();
    l.memory.address() + l.offset as u64
}

fn c_index(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |a, (&i, &n)| a * n + i)
}

/// Every index of `shape` in C order.
fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..n {
        out.push(idx.clone());
        for k in (0..shape.len()).rev() {
            idx[k] += 1;
            if idx[k] < shape[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    out
}

/// Checks tensor storage against the spec's definition, element by element: tensor
/// `row` is stored row-major in the physical `shape`, and logical index `l` is the
/// physical index `p` with `p[permutation[i]] = l[i]`.
fn check_tensor_storage(t: &TensorArray, row: usize, logical: &NDBuffer) {
    let tt = t.tensor_type();
    assert_eq!(tt.logical_shape(), logical.shape());
    let perm: Vec<usize> = tt
        .permutation()
        .map(<[usize]>::to_vec)
        .unwrap_or_else(|| (0..tt.shape().len()).collect());
    let (stored, w) = arrow_bytes(&host(t).to_data());
    let list: usize = tt.shape().iter().product();
    let es = logical.dtype().element().size();
    assert_eq!(w, list * es);
    let want = c_bytes(logical);
    for l in indices(logical.shape()) {
        let mut p = vec![0usize; l.len()];
        for (i, &li) in l.iter().enumerate() {
            p[perm[i]] = li;
        }
        let at = row * list + c_index(&p, tt.shape());
        let li = c_index(&l, logical.shape());
        assert_eq!(
            &stored[at * es..(at + 1) * es],
            &want[li * es..(li + 1) * es],
            "tensor {row}, logical index {l:?} (physical {p:?})"
        );
    }
}

const SHAPES: &[&[usize]] = &[
    &[],
    &[0],
    &[7],
    &[3, 0, 2],
    &[3, 5],
    &[2, 3, 4],
    &[1, 4, 1],
    &[2, 3, 2, 3],
];

fn aligned(nd: &NDBuffer) -> bool {
    let a = match nd.dtype().element() {
        ElementType::Complex64 => 4,
        ElementType::Complex128 => 8,
        e => e.size() as u64,
    };
    first_ptr(nd).is_multiple_of(a)
}

// ------------------------------------------------------------------------------ flat

#[test]
fn flat_every_dtype_shape_and_layout() {
    let mut rng = seeded(1);
    let mut zero_copies = 0;
    for dtype in dtypes() {
        for &shape in SHAPES {
            for kind in KINDS {
                let nd = make(&mut rng, shape, dtype, kind);
                let ctx = format!("{dtype} {shape:?} {kind:?}");
                let a = nd.clone().into_arrow().unwrap().into_host().unwrap();
                assert_eq!(a.data_type(), &ArrowType::from(dtype.element()), "{ctx}");
                assert_eq!(a.len(), nd.size(), "{ctx}");
                assert_eq!(a.null_count(), 0, "{ctx}");
                let (bytes, w) = arrow_bytes(&a.to_data());
                assert_eq!(w, dtype.element().size(), "{ctx}");
                assert_eq!(bytes, c_bytes(&nd), "{ctx}");
                let zero_copy = nd.is_contiguous(Order::C)
                    && dtype.byteorder() == Endianness::NATIVE
                    && dtype.element() != ElementType::Bool
                    && aligned(&nd)
                    && nd.size() > 0;
                if zero_copy {
                    assert_eq!(values_ptr(&a.to_data()), first_ptr(&nd), "{ctx}: zero-copy");
                    zero_copies += 1;
                } else if nd.size() > 0 && dtype.element() != ElementType::Bool {
                    assert_ne!(values_ptr(&a.to_data()), first_ptr(&nd), "{ctx}: copied");
                }
                // And back, zero-copy from the Arrow buffer.
                let back = NDBuffer::from_arrow(a.as_ref()).unwrap();
                assert_eq!(back.shape(), &[nd.size()], "{ctx}");
                assert_eq!(back.dtype(), Dtype::from(dtype.element()), "{ctx}");
                assert_eq!(c_bytes(&back), c_bytes(&nd), "{ctx}");
                if dtype.element() != ElementType::Bool && nd.size() > 0 {
                    assert_eq!(
                        first_ptr(&back),
                        values_ptr(&a.to_data()),
                        "{ctx}: back zero-copy"
                    );
                }
            }
        }
    }
    assert!(zero_copies > 50, "{zero_copies}");
}

#[test]
fn flat_zero_copy_round_trip_keeps_the_address() {
    let a = ndarray::Array2::from_shape_fn((30, 7), |(i, j)| (i * 7 + j) as f32);
    let ptr = a.as_ptr() as u64;
    let nd = NDBuffer::from_ndarray(a);
    let arrow = nd.clone().into_arrow().unwrap().into_host().unwrap();
    let f = arrow.as_any().downcast_ref::<Float32Array>().unwrap();
    assert_eq!(f.values().as_ptr() as u64, ptr);
    assert_eq!(f.value(7 * 3 + 2), 23.0);
    let back = NDBuffer::from_arrow(f).unwrap().reshape(&[30, 7]).unwrap();
    assert_eq!(first_ptr(&back), ptr);
    assert_eq!(back.to_ndarray::<f32>().unwrap()[[3, 2]], 23.0);
    // Dropping the NDBuffer keeps the Arrow array alive, and the other way round.
    drop(nd);
    drop(back);
    assert_eq!(f.value(209), 209.0);
}

#[test]
fn typed_primitive_arrays() {
    use arrow_array::types::{Float16Type, Int32Type, UInt64Type};
    let nd = NDBuffer::from_ndarray(ndarray::arr1(&[
        half::f16::from_f32(1.5),
        half::f16::NEG_INFINITY,
    ]));
    // Typed arrays through arrow-rs's AsArray.
    let a = nd.into_arrow().unwrap().into_host().unwrap();
    let h = a.as_primitive::<Float16Type>();
    assert_eq!(
        h.values(),
        &[half::f16::from_f32(1.5), half::f16::NEG_INFINITY]
    );
    assert!(a.as_primitive_opt::<Int32Type>().is_none());
    let be = NDBuffer::from_memory(
        vec![0, 0, 0, 0, 0, 0, 1, 2],
        &[1],
        Dtype::new(ElementType::UInt64, Endianness::Big),
        Order::C,
    )
    .unwrap();
    assert_eq!(
        be.into_arrow()
            .unwrap()
            .into_host()
            .unwrap()
            .as_primitive::<UInt64Type>()
            .values(),
        &[0x0102]
    );
    // Float16 arrays come back as float16 NDBuffers.
    let back = NDBuffer::from_arrow(&Float16Array::from(vec![half::f16::ONE])).unwrap();
    assert_eq!(back.dtype(), Dtype::FLOAT16);
}

#[test]
fn misaligned_host_memory_is_copied_once() {
    // 4 int32 values at byte offset 1 of a buffer: Arrow needs 4-byte alignment.
    let raw: Vec<u8> = (0u8..17).collect();
    let bytes = bytes::Bytes::from(raw);
    let misaligned = bytes.slice(1..17);
    let nd = NDBuffer::from_memory(misaligned.clone(), &[4], Dtype::INT32, Order::C).unwrap();
    assert_ne!(first_ptr(&nd) % 4, 0, "the test needs misaligned memory");
    let a = nd.clone().into_arrow().unwrap().into_host().unwrap();
    let i = a.as_any().downcast_ref::<Int32Array>().unwrap();
    assert_eq!(i.values().as_ptr() as usize % 4, 0);
    assert_eq!(i.value(0), i32::from_ne_bytes([1, 2, 3, 4]));
    assert_eq!(i.value(3), i32::from_ne_bytes([13, 14, 15, 16]));
    // The tensor forms too.
    let t = nd.clone().into_tensor().unwrap();
    assert_eq!(c_bytes(&t.tensor(0).unwrap()), misaligned.to_vec());
    let c = NDBuffer::from_memory(bytes.slice(1..17), &[1], Dtype::COMPLEX128, Order::C).unwrap();
    let ca = c.clone().into_arrow().unwrap().into_host().unwrap();
    assert_eq!(arrow_bytes(&ca.to_data()).0, misaligned.to_vec());
}

// ------------------------------------------------------------------------------ tensors

#[test]
fn tensor_every_dtype_shape_and_layout() {
    let mut rng = seeded(2);
    for dtype in dtypes() {
        for &shape in SHAPES {
            for kind in KINDS {
                let nd = make(&mut rng, shape, dtype, kind);
                let ctx = format!("{dtype} {shape:?} {kind:?}");
                let t = nd.clone().into_tensor().unwrap();
                assert_eq!(t.len(), 1, "{ctx}");
                assert_eq!(t.tensor_type().element(), dtype.element(), "{ctx}");
                assert_eq!(t.tensor_type().logical_shape(), shape, "{ctx}");
                check_tensor_storage(&t, 0, &nd);
                let dense = matches!(kind, Kind::C | Kind::F | Kind::Transposed | Kind::Offset);
                if dense
                    && dtype.byteorder() == Endianness::NATIVE
                    && dtype.element() != ElementType::Bool
                    && nd.size() > 0
                    && aligned(&nd)
                {
                    assert_eq!(
                        values_ptr(&host(&t).to_data()),
                        first_ptr(&nd),
                        "{ctx}: zero-copy"
                    );
                }
                if kind == Kind::F
                    && nd.size() > 0
                    && nd.ndim() >= 2
                    && nd.shape().iter().filter(|&&d| d > 1).count() >= 2
                {
                    let rev: Vec<usize> = (0..nd.ndim()).rev().collect();
                    assert_eq!(t.tensor_type().permutation(), Some(&rev[..]), "{ctx}");
                }
                if matches!(kind, Kind::C | Kind::Strided | Kind::Offset) {
                    assert_eq!(t.tensor_type().permutation(), None, "{ctx}");
                }
                // Back: the logical array, zero-copy from the Arrow buffer.
                let back = t.tensor(0).unwrap();
                assert_eq!(back.shape(), shape, "{ctx}");
                assert_eq!(c_bytes(&back), c_bytes(&nd), "{ctx}");
                if dtype.element() != ElementType::Bool && nd.size() > 0 {
                    assert_eq!(first_ptr(&back), values_ptr(&host(&t).to_data()), "{ctx}");
                }
                if dense && dtype.element() != ElementType::Bool && nd.size() > 0 {
                    // Dense layouts survive: the view has the original element strides.
                    let es = dtype.element().size();
                    let s = |x: &NDBuffer| -> Vec<usize> {
                        x.shape()
                            .iter()
                            .zip(x.strides())
                            .map(|(&n, &st)| if n > 1 { st / es } else { 0 })
                            .collect()
                    };
                    assert_eq!(s(&back), s(&nd), "{ctx}: strides");
                }
                // Through a field and back.
                let field = t.tensor_type().field("x", false).unwrap();
                let t2 = from_column(&field, host(&t)).unwrap();
                assert_eq!(t2.tensor_type(), t.tensor_type(), "{ctx}");
                assert_eq!(
                    c_bytes(&t2.rows(0, t2.len()).unwrap().get(&[0.into()]).unwrap()),
                    c_bytes(&nd),
                    "{ctx}"
                );
            }
        }
    }
}

#[test]
fn rows_every_dtype_shape_and_layout() {
    let mut rng = seeded(3);
    for dtype in dtypes() {
        for &shape in SHAPES.iter().filter(|s| !s.is_empty()) {
            for kind in KINDS {
                let nd = make(&mut rng, shape, dtype, kind);
                let ctx = format!("{dtype} {shape:?} {kind:?}");
                let t = nd.clone().into_tensor_rows().unwrap();
                assert_eq!(t.len(), shape[0], "{ctx}");
                assert_eq!(t.tensor_type().logical_shape(), &shape[1..], "{ctx}");
                for r in 0..shape[0] {
                    let row = nd.get(&[r.into()]).unwrap();
                    check_tensor_storage(&t, r, &row);
                    assert_eq!(
                        c_bytes(&t.tensor(r).unwrap()),
                        c_bytes(&row),
                        "{ctx} row {r}"
                    );
                }
                assert_eq!(c_bytes(&t.rows(0, t.len()).unwrap()), c_bytes(&nd), "{ctx}");
                // Axis 0 outermost and dense: zero-copy.
                let outer = matches!(kind, Kind::C | Kind::Offset)
                    || (shape[0] == 1 && kind != Kind::Strided);
                if outer
                    && dtype.byteorder() == Endianness::NATIVE
                    && dtype.element() != ElementType::Bool
                    && nd.size() > 0
                    && aligned(&nd)
                {
                    assert_eq!(
                        values_ptr(&host(&t).to_data()),
                        first_ptr(&nd),
                        "{ctx}: zero-copy"
                    );
                }
            }
        }
    }
    let zero_d = NDBuffer::from_ndarray(ndarray::arr0(1u8));
    assert!(
        zero_d
            .clone()
            .into_tensor_rows()
            .unwrap_err()
            .to_string()
            .contains("0-dimensional")
    );
}

#[test]
fn f_order_is_reversed_physical_shape_with_permutation() {
    // numpy: a = np.arange(24).reshape(2, 3, 4); f = np.asfortranarray(a)
    let a = ndarray::Array::from_shape_vec((2, 3, 4), (0..24).collect::<Vec<i64>>()).unwrap();
    let f = a.t().as_standard_layout().into_owned().reversed_axes(); // F-order copy of a
    assert_eq!(f.strides(), &[1, 2, 6]);
    let ptr = f.as_ptr() as u64;
    let nd = NDBuffer::from_ndarray(f);
    assert!(nd.is_contiguous(Order::F));
    let t = nd.clone().into_tensor().unwrap();
    let tt = t.tensor_type();
    assert_eq!(tt.shape(), &[4, 3, 2]);
    assert_eq!(tt.permutation(), Some(&[2, 1, 0][..]));
    assert_eq!(tt.logical_shape(), vec![2, 3, 4]);
    assert_eq!(tt.metadata(), r#"{"shape":[4,3,2],"permutation":[2,1,0]}"#);
    assert_eq!(values_ptr(&host(&t).to_data()), ptr, "zero-copy");
    // Physical row-major storage is a.T: element [k][j][i] = a[i][j][k].
    let values = host(&t)
        .values()
        .as_any()
        .downcast_ref::<arrow_array::Int64Array>()
        .unwrap()
        .values()
        .to_vec();
    assert_eq!(&values[..6], &[0, 12, 4, 16, 8, 20]);
    let back = t.tensor(0).unwrap();
    assert_eq!(back.to_ndarray::<i64>().unwrap(), a.into_dyn());
}

#[test]
fn a_transposition_that_is_not_an_involution() {
    // Logical [2, 3, 4] stored with axis 2 outermost, then axis 0, then axis 1.
    let base = ndarray::Array::from_shape_vec((4, 2, 3), (0..24).collect::<Vec<u16>>()).unwrap();
    let view = base.view().permuted_axes([1, 2, 0]).to_owned(); // standard copy, only for values
    let nd = NDBuffer::from_ndarray(base.clone())
        .transpose(Some(&[1, 2, 0]))
        .unwrap();
    assert_eq!(nd.shape(), &[2, 3, 4]);
    assert!(!nd.is_contiguous(Order::C) && !nd.is_contiguous(Order::F));
    let t = nd.clone().into_tensor().unwrap();
    assert_eq!(t.tensor_type().shape(), &[4, 2, 3]);
    // logical i -> physical permutation[i]: logical 0 (len 2) is physical 1, logical 1
    // (len 3) physical 2, logical 2 (len 4) physical 0.
    assert_eq!(t.tensor_type().permutation(), Some(&[1, 2, 0][..]));
    assert_eq!(values_ptr(&host(&t).to_data()), first_ptr(&nd), "zero-copy");
    check_tensor_storage(&t, 0, &nd);
    assert_eq!(
        t.tensor(0).unwrap().to_ndarray::<u16>().unwrap(),
        view.into_dyn()
    );
}

#[test]
fn bool_is_bit_packed() {
    let mut rng = seeded(4);
    // 5 rows of 3 x 3: rows cross byte boundaries.
    let bytes = random_values(&mut rng, 45, Dtype::BOOL);
    let nd = NDBuffer::from_memory(bytes.clone(), &[5, 3, 3], Dtype::BOOL, Order::C).unwrap();
    let flat = nd.clone().into_arrow().unwrap().into_host().unwrap();
    let b = flat.as_any().downcast_ref::<BooleanArray>().unwrap();
    assert_eq!(b.values().iter().map(u8::from).collect::<Vec<_>>(), bytes);
    let rows = nd.clone().into_tensor_rows().unwrap();
    assert_eq!(host(&rows).value_type(), ArrowType::Boolean);
    for r in 0..5 {
        assert_eq!(c_bytes(&rows.tensor(r).unwrap()), bytes[r * 9..(r + 1) * 9]);
    }
    // Non-zero bytes are true; a sliced BooleanArray (bit offset 3) comes back right.
    let odd = NDBuffer::from_memory(vec![0u8, 7, 255, 0, 1], &[5], Dtype::BOOL, Order::C).unwrap();
    let ob = odd.clone().into_arrow().unwrap().into_host().unwrap();
    assert_eq!(
        ob.as_any()
            .downcast_ref::<BooleanArray>()
            .unwrap()
            .iter()
            .flatten()
            .collect::<Vec<_>>(),
        [false, true, true, false, true]
    );
    let long = BooleanArray::from((0..20).map(|i| i % 3 == 0).collect::<Vec<_>>());
    let back = NDBuffer::from_arrow(&long.slice(3, 11)).unwrap();
    assert_eq!(
        c_bytes(&back),
        (3..14).map(|i| u8::from(i % 3 == 0)).collect::<Vec<_>>()
    );
}

#[test]
fn complex_is_a_fixed_size_list_of_two_floats() {
    use num_complex::Complex32;
    let v = vec![
        Complex32::new(1.0, -2.0),
        Complex32::new(f32::NAN, 0.5),
        Complex32::new(-0.0, 3.0),
    ];
    let a = ndarray::Array::from_shape_vec((3, 1), v.clone()).unwrap();
    let ptr = a.as_ptr() as u64;
    let nd = NDBuffer::from_ndarray(a);
    let flat = nd.clone().into_arrow().unwrap().into_host().unwrap();
    let l = flat.as_any().downcast_ref::<FixedSizeListArray>().unwrap();
    assert_eq!(l.value_length(), 2);
    let floats = l.values().as_any().downcast_ref::<Float32Array>().unwrap();
    assert_eq!(floats.values().as_ptr() as u64, ptr, "zero-copy");
    assert_eq!(floats.value(0), 1.0);
    assert_eq!(floats.value(1), -2.0);
    assert!(floats.value(2).is_nan());
    // Sliced (offset 1) and back.
    let back = NDBuffer::from_arrow(&l.slice(1, 2)).unwrap();
    assert_eq!(back.dtype(), Dtype::COMPLEX64);
    assert_eq!(first_ptr(&back), ptr + 8);
    assert_eq!(
        back.get(&[1.into()]).unwrap().as_scalar().unwrap(),
        devbuf::zarr::Scalar::Complex64(v[2])
    );
    // A complex tensor is a list of complex lists.
    let t = nd.clone().into_tensor().unwrap();
    let ArrowType::FixedSizeList(item, 3) = host(&t).data_type() else {
        panic!("{}", host(&t).data_type())
    };
    assert_eq!(item.data_type(), &ArrowType::from(ElementType::Complex64));
    assert_eq!(c_bytes(&t.tensor(0).unwrap()), c_bytes(&nd));
}

#[test]
fn sliced_tensor_storage_is_read_at_its_offset() {
    let nd = NDBuffer::from_ndarray(
        ndarray::Array::from_shape_vec((6, 2, 2), (0..24).collect::<Vec<i32>>()).unwrap(),
    );
    let t = nd.clone().into_tensor_rows().unwrap();
    let field = t.tensor_type().field("t", false).unwrap();
    let sliced = host(&t).slice(2, 3);
    let s = from_column(&field, &sliced).unwrap();
    assert_eq!(s.len(), 3);
    assert_eq!(
        s.tensor(0)
            .unwrap()
            .to_ndarray::<i32>()
            .unwrap()
            .into_raw_vec_and_offset()
            .0,
        vec![8, 9, 10, 11]
    );
    assert_eq!(first_ptr(&s.tensor(2).unwrap()), first_ptr(&nd) + 16 * 4);
    assert!(s.tensor(3).is_err());
    assert!(s.rows(2, 2).is_err());
}

#[test]
fn big_endian_keeps_its_axis_order() {
    // An F-order big-endian array: byte-swapped once, still F order (permutation).
    let nd = NDBuffer::from_memory(
        (0u8..24).collect::<Vec<_>>(),
        &[2, 3],
        Dtype::new(ElementType::Int32, Endianness::Big),
        Order::F,
    )
    .unwrap();
    let t = nd.clone().into_tensor().unwrap();
    assert_eq!(t.tensor_type().permutation(), Some(&[1, 0][..]));
    check_tensor_storage(&t, 0, &nd);
    assert_eq!(t.tensor(0).unwrap().dtype(), Dtype::INT32);
}

// ------------------------------------------------------------------------------ errors

#[test]
fn unsupported_arrow_input_is_an_error_naming_the_type() {
    let e = NDBuffer::from_arrow(&StringArray::from(vec!["a"]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("Utf8"), "{e}");
    let e = NDBuffer::from_arrow(&Int32Array::from(vec![Some(1), None]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("null"), "{e}");
    let ints = FixedSizeListArray::try_new(
        Arc::new(Field::new("item", ArrowType::Int32, false)),
        2,
        Arc::new(Int32Array::from(vec![1, 2])),
        None,
    )
    .unwrap();
    let e = NDBuffer::from_arrow(&ints).unwrap_err().to_string();
    assert!(e.contains("FixedSizeList"), "{e}");
    // Complex with a null in its floats.
    let with_null = FixedSizeListArray::try_new(
        Arc::new(Field::new("item", ArrowType::Float32, true)),
        2,
        Arc::new(Float32Array::from(vec![Some(1.0), None])),
        None,
    )
    .unwrap();
    assert!(
        NDBuffer::from_arrow(&with_null)
            .unwrap_err()
            .to_string()
            .contains("null")
    );
    assert!(ElementType::try_from(&ArrowType::Date32).is_err());
    // A tensor column that is not a FixedSizeList, or of another size.
    let field = TensorType::new(ElementType::UInt8, &[2])
        .field("t", false)
        .unwrap();
    let e = from_column(&field, &UInt8Array::from(vec![1, 2]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("FixedSizeListArray"), "{e}");
}

#[test]
fn device_entry_points_refuse_host_memory_and_tensors_stay_where_they_are() {
    let nd = NDBuffer::from_ndarray(ndarray::arr1(&[1u8, 2]));
    let e = nd.clone().into_arrow().unwrap().into_device().unwrap_err();
    assert!(e.to_string().contains("host memory"), "{e}");
    // The tensor forms give their result where the data lives: here, on the host.
    for t in [
        nd.clone().into_tensor().unwrap(),
        nd.clone().into_tensor_rows().unwrap(),
    ] {
        assert!(t.prototype().is_host() && t.storage().as_host().is_some());
        assert!(t.storage().as_device().is_none());
        assert_eq!(
            t.to_host().unwrap().storage().as_host(),
            t.storage().as_host()
        );
    }
}

#[test]
fn tensor_list_size_must_fit_i32() {
    let t = TensorType::new(ElementType::UInt8, &[1 << 16, 1 << 16]);
    assert!(
        t.storage_type()
            .unwrap_err()
            .to_string()
            .contains("FixedSizeList")
    );
    assert!(
        TensorType::new(ElementType::UInt8, &[usize::MAX, 2])
            .storage_type()
            .is_err()
    );
}

#[test]
fn rows_of_an_empty_array_with_huge_cells_are_an_error_not_a_panic() {
    // Regression: the row size was an unchecked product (a panic in debug builds).
    let nd = NDBuffer::create(
        &BufferPrototype::Host,
        &[0, 1 << 40, 1 << 40],
        Dtype::INT32,
        Order::C,
        None,
    )
    .unwrap();
    let e = nd.clone().into_tensor_rows().unwrap_err();
    assert!(e.to_string().contains("overflows"), "{e}");
    // The whole array is one tensor of zero elements: fine.
    let t = nd.clone().into_tensor().unwrap();
    assert_eq!((t.len(), host(&t).value_length()), (1, 0));
}

// ------------------------------------------------------------------------------ metadata

fn tagged(storage: ArrowType, md: &str) -> Field {
    Field::new("t", storage, false).with_metadata(
        [
            (
                EXTENSION_TYPE_NAME_KEY.to_string(),
                FIXED_SHAPE_TENSOR.to_string(),
            ),
            (EXTENSION_TYPE_METADATA_KEY.to_string(), md.to_string()),
        ]
        .into_iter()
        .collect::<std::collections::HashMap<_, _>>(),
    )
}

#[test]
fn metadata_follows_the_spec_and_reads_arrow_rs() {
    let storage = TensorType::new(ElementType::Float32, &[4, 3, 2])
        .storage_type()
        .unwrap();
    // The spec's example keys, pyarrow / Arrow C++ spelling.
    let t = TensorType::from_field(&tagged(
        storage.clone(),
        r#"{"shape": [4, 3, 2], "permutation": [2, 0, 1], "dim_names": ["a", "b", "c"]}"#,
    ))
    .unwrap();
    assert_eq!(t.permutation(), Some(&[2, 0, 1][..]));
    assert_eq!(t.logical_shape(), vec![2, 4, 3]);
    assert_eq!(t.dim_names().unwrap(), ["a", "b", "c"]);
    assert_eq!(
        t.metadata(),
        r#"{"shape":[4,3,2],"permutation":[2,0,1],"dim_names":["a","b","c"]}"#
    );
    // arrow-rs 60 writes "permutations" and nulls: read both.
    let theirs =
        FixedShapeTensor::try_new(ArrowType::Float32, [4, 3, 2], None, Some(vec![2, 0, 1]))
            .unwrap();
    let md = theirs.serialize_metadata().unwrap();
    assert!(md.contains("permutations"), "{md}");
    let t = TensorType::from_field(&tagged(storage.clone(), &md)).unwrap();
    assert_eq!(t.permutation(), Some(&[2, 0, 1][..]));
    assert_eq!(t.logical_shape(), theirs.logical_shape());
    // arrow-rs 60 cannot read the spec's key (why devbuf writes its own metadata).
    assert!(
        FixedShapeTensor::deserialize_metadata(Some(r#"{"shape":[4,3,2],"permutation":[2,0,1]}"#))
            .is_err()
    );
    // Without a permutation, arrow-rs reads our field as its own extension type.
    let ours = TensorType::new(ElementType::Float32, &[4, 3, 2])
        .field("t", false)
        .unwrap();
    let as_theirs = ours.try_extension_type::<FixedShapeTensor>().unwrap();
    assert_eq!(as_theirs.shape(), &[4, 3, 2]);
    assert_eq!(as_theirs.value_type(), &ArrowType::Float32);
}

#[test]
fn bad_metadata_is_an_error() {
    let storage = TensorType::new(ElementType::Int8, &[2, 3])
        .storage_type()
        .unwrap();
    for md in [
        "",
        "[1]",
        "{}",
        r#"{"shape": 6}"#,
        r#"{"shape": [2, -3]}"#,
        r#"{"shape": [2, 3.5]}"#,
        r#"{"shape": [3, 3]}"#,
        r#"{"shape": [2, 3], "permutation": [0, 0]}"#,
        r#"{"shape": [2, 3], "permutation": [0]}"#,
        r#"{"shape": [2, 3], "permutation": [0, 1], "permutations": [1, 0]}"#,
        r#"{"shape": [2, 3], "dim_names": ["x"]}"#,
        r#"{"shape": [2, 3], "dim_names": [1, 2]}"#,
        r#"{"shape": [18446744073709551615, 2]}"#,
    ] {
        assert!(
            TensorType::from_field(&tagged(storage.clone(), md)).is_err(),
            "{md}"
        );
    }
    // Unknown keys are ignored, nulls are absent values.
    let t = TensorType::from_field(&tagged(
        storage.clone(),
        r#"{"shape":[2,3],"dim_names":null,"x":{"y":[1]}}"#,
    ))
    .unwrap();
    assert_eq!(t, TensorType::new(ElementType::Int8, &[2, 3]));
    // Not tagged, tagged as something else, wrong storage.
    assert!(TensorType::from_field(&Field::new("t", storage.clone(), false)).is_err());
    let other = tagged(storage, r#"{"shape":[2,3]}"#).with_metadata(
        [(
            EXTENSION_TYPE_NAME_KEY.to_string(),
            "arrow.json".to_string(),
        )]
        .into_iter()
        .collect::<std::collections::HashMap<_, _>>(),
    );
    assert!(TensorType::from_field(&other).is_err());
    assert!(TensorType::from_field(&tagged(ArrowType::Int8, r#"{"shape":[]}"#)).is_err());
}

#[test]
fn tensor_columns_survive_arrow_ipc() {
    let nd = NDBuffer::from_memory(
        (0u8..48).collect::<Vec<_>>(),
        &[2, 3, 4],
        Dtype::UINT16,
        Order::F,
    )
    .unwrap();
    let t = nd.clone().into_tensor().unwrap();
    let schema = Arc::new(arrow_schema::Schema::new(vec![
        t.tensor_type().field("x", false).unwrap(),
    ]));
    let batch = arrow_array::RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(host(&t).clone()) as ArrayRef],
    )
    .unwrap();
    let bytes = serialize_to_vec(&batch).unwrap();
    let read = read_host(&arrow_buffer::Buffer::from_vec(bytes), schema).unwrap();
    let back = from_column(read.schema().field(0), read.column(0).as_ref()).unwrap();
    assert_eq!(back.tensor_type(), t.tensor_type());
    assert_eq!(c_bytes(&back.tensor(0).unwrap()), c_bytes(&nd));
}

#[test]
fn memory_from_arrow_is_the_arrow_buffer() {
    let a = Int32Array::from(vec![5, 6, 7]);
    let nd = NDBuffer::from_arrow(&a).unwrap();
    let Memory::Host(b) = nd.as_ndarray_like().memory else {
        panic!()
    };
    assert_eq!(b.as_ptr(), a.values().as_ptr() as *const u8);
}

#[test]
fn random_round_trips() {
    // Random shapes and selections of random arrays: flat, tensor and rows forms agree
    // with the NDBuffer.
    let mut rng = seeded(5);
    for _ in 0..300 {
        let dtype = dtypes()[rng.random_range(0..dtypes().len())];
        let nd_: usize = rng.random_range(0..5);
        let shape: Vec<usize> = (0..nd_).map(|_| rng.random_range(0..5)).collect();
        let order = if rng.random() { Order::C } else { Order::F };
        let n: usize = shape.iter().product();
        let base =
            NDBuffer::from_memory(random_values(&mut rng, n, dtype), &shape, dtype, order).unwrap();
        let sel: Vec<AxisSel> = shape
            .iter()
            .map(|&len| {
                let a = rng.random_range(0..=len);
                let b = rng.random_range(a..=len);
                AxisSel::Range {
                    start: a,
                    end: b,
                    step: rng.random_range(1..3),
                }
            })
            .collect();
        let nd = base.get(&sel).unwrap();
        let want = c_bytes(&nd);
        assert_eq!(
            arrow_bytes(
                &nd.clone()
                    .into_arrow()
                    .unwrap()
                    .into_host()
                    .unwrap()
                    .to_data()
            )
            .0,
            want
        );
        let t = nd.clone().into_tensor().unwrap();
        check_tensor_storage(&t, 0, &nd);
        assert_eq!(c_bytes(&t.tensor(0).unwrap()), want);
        if nd.ndim() > 0 {
            let rows = nd.clone().into_tensor_rows().unwrap();
            assert_eq!(c_bytes(&rows.rows(0, rows.len()).unwrap()), want);
        }
    }
}

#[path = "common/ipc_messages.rs"]
mod ipc_messages;
use ipc_messages::{read_host, serialize_to_vec};
