//! The Arrow C Device Data Interface on the host (every machine): round trips of every
//! type, zero-copy by address, arrow-rs's own C Data Interface as an independent
//! oracle, release exactly once (counted), moved-out children, malformed producers,
//! streams with errors, and a C compiler's view of the ABI.
//!
//! The release counters are process-wide, so every test here takes one lock.

#[path = "common/c_device_corpus.rs"]
mod corpus;
#[path = "common/c_device_raw.rs"]
mod raw_abi;

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_array::ffi::{FFI_ArrowArray, from_ffi, to_ffi};
use arrow_array::{Array, ArrayRef, Int32Array, RecordBatch, StringArray, make_array};
use arrow_schema::{DataType, Field, Schema};
use corpus::{counts, serial};
use devbuf::Error;
use devbuf::arrow::c_device::*;
use devbuf::arrow::{AnyArray, Batch};

fn data_ptrs(a: &dyn Array) -> Vec<usize> {
    a.to_data()
        .buffers()
        .iter()
        .filter(|b| !b.is_empty())
        .map(|b| b.as_ptr() as usize)
        .collect()
}

#[test]
fn round_trip_every_type_zero_copy_and_released_once() {
    let _g = serial();
    let mut n = 0;
    for (name, a) in corpus::all()
        .into_iter()
        .chain(corpus::views().into_iter().map(|(n, a)| (n.to_string(), a)))
    {
        let nodes = corpus::node_count(&a.to_data());
        let c = counts();
        let (mut c_array, c_schema) = export_array(a.as_ref(), ExportDevice::Cpu).expect(&name);
        assert_eq!(c_array.device_type(), ARROW_DEVICE_CPU, "{name}");
        assert_eq!(c_array.device_id(), -1, "{name}");
        assert!(c_array.sync_event().is_null(), "{name}");
        assert_eq!(reserved(&c_array), [0; 3], "{name}");
        assert_eq!(c_array.array().length(), a.len() as i64, "{name}");
        assert_eq!(
            c.live_since(),
            nodes as i64,
            "{name}: one live export per node"
        );
        let back = import_array(&mut c_array, &c_schema, None)
            .expect(&name)
            .into_host()
            .expect(&name);
        assert!(
            c_array.array().is_released(),
            "{name}: the import moves the structure out"
        );
        assert_eq!(back.as_ref(), a.as_ref(), "{name}: values");
        assert_eq!(back.data_type(), a.data_type(), "{name}");
        // Zero-copy: the imported top-level buffers are the original memory.
        let (orig, imported) = (data_ptrs(a.as_ref()), data_ptrs(back.as_ref()));
        assert_eq!(orig, imported, "{name}: buffer addresses");
        if !a.is_empty() && *a.data_type() != DataType::Null {
            assert_eq!(
                c.released_since(),
                0,
                "{name}: nothing released while in use"
            );
        }
        drop(back);
        assert_eq!(
            c.released_since(),
            nodes,
            "{name}: each exported structure released exactly once"
        );
        assert_eq!(c.live_since(), 0, "{name}");
        n += 1;
    }
    assert!(n > 80, "corpus too small: {n}");
}

#[test]
fn arrow_rs_importer_reads_devbuf_exports() {
    // An independent C Data Interface consumer (arrow-rs's) agrees with devbuf's
    // layout of every type.
    let _g = serial();
    for (name, a) in corpus::all()
        .into_iter()
        .chain(corpus::views().into_iter().map(|(n, a)| (n.to_string(), a)))
    {
        let c = counts();
        let (mut c_array, c_schema) = export_array(a.as_ref(), ExportDevice::Cpu).expect(&name);
        let ffi: FFI_ArrowArray = c_array.take_array().into();
        // Safety: a valid CPU array exported by devbuf, with its schema.
        let data = unsafe { from_ffi(ffi, &c_schema) }.expect(&name);
        let back = make_array(data);
        assert_eq!(back.as_ref(), a.as_ref(), "{name}");
        drop(back);
        assert_eq!(c.live_since(), 0, "{name}");
        assert_eq!(
            c.released_since(),
            corpus::node_count(&a.to_data()),
            "{name}"
        );
    }
}

#[test]
fn devbuf_imports_arrow_rs_exports() {
    let _g = serial();
    for (name, a) in corpus::all()
        .into_iter()
        .chain(corpus::views().into_iter().map(|(n, a)| (n.to_string(), a)))
    {
        let (ffi_array, ffi_schema) = to_ffi(&a.to_data()).expect(&name);
        // Safety: arrow-rs exported a valid CPU array.
        let mut d = unsafe {
            ArrowDeviceArray::new(ffi_array.into(), -1, ARROW_DEVICE_CPU, std::ptr::null_mut())
        };
        let back = import_array(&mut d, &ffi_schema, None)
            .expect(&name)
            .into_host()
            .expect(&name);
        assert_eq!(back.as_ref(), a.as_ref(), "{name}");
        assert_eq!(data_ptrs(back.as_ref()), data_ptrs(a.as_ref()), "{name}");
    }
}

#[test]
fn import_array_dispatches_on_device_type() {
    let _g = serial();
    let a = Int32Array::from(vec![1, 2, 3]);
    let (mut c_array, c_schema) = export_array(&a, ExportDevice::Cpu).unwrap();
    match import_array(&mut c_array, &c_schema, None).unwrap() {
        AnyArray::Host(b) => assert_eq!(b.as_ref(), &a as &dyn Array),
        AnyArray::Device(_) => panic!("a CPU array imported as a device array"),
    }
}

#[test]
fn dropping_an_export_releases_it_once() {
    let _g = serial();
    for (name, a) in corpus::others() {
        let c = counts();
        let exported = export_array(a.as_ref(), ExportDevice::Cpu).unwrap();
        drop(exported);
        assert_eq!(
            c.released_since(),
            corpus::node_count(&a.to_data()),
            "{name}"
        );
        assert_eq!(c.live_since(), 0, "{name}");
    }
}

/// Memory whose owner panics when dropped (an arrow-rs custom allocation).
struct PanickingOwner(Vec<u32>);

impl Drop for PanickingOwner {
    fn drop(&mut self) {
        panic!("the owner of an exported buffer panics in its destructor");
    }
}

#[test]
fn a_panicking_destructor_does_not_unwind_out_of_the_release_callback() {
    // Regression: the release callback (`extern "C"`) dropped the exported buffers
    // without catching panics, so a foreign owner's panicking destructor aborted the
    // process instead of the release completing.
    let _g = serial();
    let owner = Arc::new(PanickingOwner(vec![1, 2, 3]));
    let ptr = std::ptr::NonNull::new(owner.0.as_ptr() as *mut u8).unwrap();
    // Safety: `owner` keeps the 12 bytes alive, and they are not mutated.
    let buffer = unsafe { arrow_buffer::Buffer::from_custom_allocation(ptr, 12, owner) };
    let a = Int32Array::new(arrow_buffer::ScalarBuffer::new(buffer, 0, 3), None);
    let c = counts();
    let (c_array, _schema) = export_array(&a, ExportDevice::Cpu).unwrap();
    drop(a); // the export holds the last reference to the owner
    drop(c_array); // calls the release callback; an unwind out of it would abort
    assert_eq!(c.released_since(), 1);
    assert_eq!(c.live_since(), 0);
}

#[test]
fn importing_twice_or_a_released_array_is_an_error() {
    let _g = serial();
    let a = StringArray::from(vec!["x", "yy"]);
    let (mut c_array, c_schema) = export_array(&a, ExportDevice::Cpu).unwrap();
    let c = counts();
    let first = import_array(&mut c_array, &c_schema, None)
        .unwrap()
        .into_host()
        .unwrap();
    for _ in 0..2 {
        let e = import_array(&mut c_array, &c_schema, None).unwrap_err();
        assert!(e.to_string().contains("released"), "{e}");
    }
    assert_eq!(c.released_since(), 0, "failed imports released nothing");
    drop(first);
    assert_eq!(c.released_since(), 1);
    // The same for a stream.
    let mut c_stream = export_stream(
        batches().0,
        Vec::<devbuf::Result<Batch>>::new(),
        ExportDevice::Cpu,
    );
    drop(import_stream(&mut c_stream, None).unwrap());
    let e = import_stream(&mut c_stream, None).unwrap_err();
    assert!(e.to_string().contains("released"), "{e}");

    let mut empty = ArrowDeviceArray::default();
    let e = import_array(&mut empty, &c_schema, None)
        .and_then(AnyArray::into_host)
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(e.to_string().contains("released"), "{e}");
}

#[test]
fn released_or_malformed_schemas_are_errors() {
    let _g = serial();
    let a = Int32Array::from(vec![1]);
    let (mut c_array, _schema) = export_array(&a, ExportDevice::Cpu).unwrap();
    let e = import_array(&mut c_array, &FFI_ArrowSchema::empty(), None)
        .and_then(AnyArray::into_host)
        .unwrap_err();
    assert!(e.to_string().contains("released"), "{e}");
    // A format arrow-rs does not know.
    let bad = FFI_ArrowSchema::try_new("Q!", vec![], None).unwrap();
    let e = import_array(&mut c_array, &bad, None)
        .and_then(AnyArray::into_host)
        .unwrap_err();
    assert!(matches!(e, Error::Arrow { .. }), "{e}");
    // A negative fixed-size binary width (arrow-rs's layout() would panic on it).
    let neg = FFI_ArrowSchema::try_new("w:-3", vec![], None).unwrap();
    let e = import_array(&mut c_array, &neg, None)
        .and_then(AnyArray::into_host)
        .unwrap_err();
    assert!(e.to_string().contains("negative"), "{e}");
    // Schema errors leave the array untouched: it still imports.
    assert!(!c_array.array().is_released());
    let ok = import_array(
        &mut c_array,
        &FFI_ArrowSchema::try_from(&Field::new("", DataType::Int32, true)).unwrap(),
        None,
    )
    .unwrap()
    .into_host()
    .unwrap();
    assert_eq!(ok.as_ref(), &a as &dyn Array);
}

#[test]
fn moved_out_child_is_released_independently() {
    let _g = serial();
    let (_, structs) = corpus::others()
        .into_iter()
        .find(|(n, _)| *n == "struct")
        .unwrap();
    let DataType::Struct(fields) = structs.data_type().clone() else {
        unreachable!()
    };
    let c = counts();
    let (mut c_array, _schema) = export_array(structs.as_ref(), ExportDevice::Cpu).unwrap();
    let mut parent = c_array.take_array();
    let child = parent.take_child(1).expect("child 1");
    assert!(
        parent.child(1).unwrap().is_released(),
        "the slot is marked released"
    );
    assert!(
        parent.take_child(1).is_none(),
        "a moved child cannot be moved twice"
    );
    drop(parent); // releases the parent and children 0 and 2
    assert_eq!(c.released_since(), 3);
    // The moved child's memory is still alive and correct.
    // Safety: a CPU child array exported by devbuf.
    let mut d = unsafe { ArrowDeviceArray::new(child, -1, ARROW_DEVICE_CPU, std::ptr::null_mut()) };
    let schema =
        FFI_ArrowSchema::try_from(&Field::new("", fields[1].data_type().clone(), true)).unwrap();
    let back = import_array(&mut d, &schema, None)
        .unwrap()
        .into_host()
        .unwrap();
    let s = structs
        .as_any()
        .downcast_ref::<arrow_array::StructArray>()
        .unwrap();
    assert_eq!(back.as_ref(), s.column(1).as_ref());
    assert_eq!(c.released_since(), 3);
    drop(back);
    assert_eq!(
        c.released_since(),
        4,
        "the moved child released by its own callback"
    );
    assert_eq!(c.live_since(), 0);
}

#[test]
fn importing_a_parent_whose_child_was_moved_out_is_an_error() {
    let _g = serial();
    let (_, structs) = corpus::others()
        .into_iter()
        .find(|(n, _)| *n == "struct")
        .unwrap();
    let c = counts();
    let (mut c_array, c_schema) = export_array(structs.as_ref(), ExportDevice::Cpu).unwrap();
    let mut parent = c_array.take_array();
    let child = parent.take_child(0).unwrap();
    // Safety: a CPU array exported by devbuf.
    let mut d =
        unsafe { ArrowDeviceArray::new(parent, -1, ARROW_DEVICE_CPU, std::ptr::null_mut()) };
    let e = import_array(&mut d, &c_schema, None)
        .and_then(AnyArray::into_host)
        .unwrap_err();
    assert!(e.to_string().contains("children[0]"), "{e}");
    assert!(e.to_string().contains("released"), "{e}");
    drop(child);
    assert_eq!(c.released_since(), 4);
    assert_eq!(c.live_since(), 0);
}

#[test]
fn accessors_refuse_indices_out_of_range() {
    // Regression: indices above i64::MAX were cast to negative i64 and passed the
    // bounds check, reading before the pointer arrays (undefined behaviour in safe code).
    let _g = serial();
    let (_, structs) = corpus::others()
        .into_iter()
        .find(|(n, _)| *n == "struct")
        .unwrap();
    let (c_array, _schema) = export_array(structs.as_ref(), ExportDevice::Cpu).unwrap();
    let a = c_array.array();
    assert!(a.n_buffers() > 0 && a.n_children() > 0);
    for i in [
        a.n_buffers() as usize,
        i64::MAX as usize + 1,
        usize::MAX - 5,
        usize::MAX,
    ] {
        assert!(a.buffer(i).is_none(), "buffer({i})");
    }
    for i in [a.n_children() as usize, i64::MAX as usize + 1, usize::MAX] {
        assert!(a.child(i).is_none(), "child({i})");
    }
    let mut parent = { c_array }.take_array();
    assert!(parent.take_child(usize::MAX).is_none());
    assert!(parent.take_child(i64::MAX as usize + 1).is_none());
    // A foreign structure with negative counts: nothing is read.
    let mut r = raw(1, 0, 0, vec![None, Some(i32_bytes(&[7]))], vec![], None);
    r.n_buffers = -1;
    r.n_children = -1;
    let mut a = into_device(r, ARROW_DEVICE_CPU, -1).take_array();
    assert!(a.buffer(0).is_none() && a.buffer(usize::MAX).is_none());
    assert!(a.child(0).is_none() && a.take_child(usize::MAX).is_none());
}

// ---------------------------------------------------------------------------
// A foreign producer written against the raw C layout, to feed malformed structures.
// ---------------------------------------------------------------------------

use raw_abi::{RawArray, RawDeviceArray};

static PRODUCER_RELEASES: AtomicUsize = AtomicUsize::new(0);

/// What a raw array owns.
struct Owned {
    _data: Vec<Vec<u64>>,
    buffers: Vec<*const c_void>,
    children: Vec<*mut RawArray>,
    dictionary: *mut RawArray,
}

unsafe extern "C" fn raw_release(a: *mut RawArray) {
    // Safety: called by devbuf on a structure made by `raw` below.
    let a = unsafe { &mut *a };
    let owned = unsafe { Box::from_raw(a.private_data.cast::<Owned>()) };
    for &c in owned.children.iter().chain([owned.dictionary].iter()) {
        if !c.is_null() {
            // Safety: boxed by `raw`; released if the consumer did not move it out.
            let mut c = unsafe { Box::from_raw(c) };
            if let Some(r) = c.release {
                unsafe { r(&mut *c) };
            }
        }
    }
    a.release = None;
    a.private_data = std::ptr::null_mut();
    PRODUCER_RELEASES.fetch_add(1, Ordering::SeqCst);
}

unsafe extern "C" fn raw_child_release(a: *mut RawArray) {
    // Safety: as above (the private data of a child).
    let a = unsafe { &mut *a };
    let owned = unsafe { Box::from_raw(a.private_data.cast::<Owned>()) };
    for &c in owned.children.iter() {
        let mut c = unsafe { Box::from_raw(c) };
        if let Some(r) = c.release {
            unsafe { r(&mut *c) };
        }
    }
    a.release = None;
}

/// A producer's structure: `buffers` are `None` (null) or bytes; `n_buffers` defaults
/// to their number.
fn raw(
    length: i64,
    null_count: i64,
    offset: i64,
    buffers: Vec<Option<Vec<u8>>>,
    children: Vec<Option<RawArray>>,
    dictionary: Option<RawArray>,
) -> RawArray {
    let data: Vec<Vec<u64>> = buffers
        .iter()
        .map(|b| {
            let b = b.clone().unwrap_or_default();
            let mut v = vec![0u64; b.len().div_ceil(8)];
            // Safety: `v` has room for `b.len()` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(b.as_ptr(), v.as_mut_ptr().cast::<u8>(), b.len())
            };
            v
        })
        .collect();
    let mut ptrs: Vec<*const c_void> = buffers
        .iter()
        .zip(&data)
        .map(|(b, d)| match b {
            Some(_) => d.as_ptr().cast::<c_void>(),
            None => std::ptr::null(),
        })
        .collect();
    let mut kids: Vec<*mut RawArray> = children
        .into_iter()
        .map(|c| match c {
            Some(mut c) => {
                c.release = Some(raw_child_release);
                Box::into_raw(Box::new(c))
            }
            None => std::ptr::null_mut(),
        })
        .collect();
    let dictionary = match dictionary {
        Some(mut d) => {
            d.release = Some(raw_child_release);
            Box::into_raw(Box::new(d))
        }
        None => std::ptr::null_mut(),
    };
    let n_buffers = ptrs.len() as i64;
    let n_children = kids.len() as i64;
    let buffers_ptr = if ptrs.is_empty() {
        std::ptr::null_mut()
    } else {
        ptrs.as_mut_ptr()
    };
    let children_ptr = if kids.is_empty() {
        std::ptr::null_mut()
    } else {
        kids.as_mut_ptr()
    };
    let owned = Box::new(Owned {
        _data: data,
        buffers: ptrs,
        children: kids,
        dictionary,
    });
    // The vectors' heap memory does not move when they move into the box.
    let _ = &owned.buffers;
    RawArray {
        length,
        null_count,
        offset,
        n_buffers,
        n_children,
        buffers: buffers_ptr,
        children: children_ptr,
        dictionary,
        release: Some(raw_release),
        private_data: Box::into_raw(owned).cast(),
    }
}

fn into_device(a: RawArray, device_type: i32, device_id: i64) -> ArrowDeviceArray {
    let mut d = RawDeviceArray {
        array: a,
        device_id,
        device_type,
        sync_event: std::ptr::null_mut(),
        reserved: [0; 3],
    };
    // Safety: `RawDeviceArray` has the C layout; the structure is valid as far as its
    // pointers go (the fields under test may contradict the data type).
    unsafe { ArrowDeviceArray::from_raw((&mut d as *mut RawDeviceArray).cast()) }
}

fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn schema(dt: DataType) -> FFI_ArrowSchema {
    FFI_ArrowSchema::try_from(&Field::new("", dt, true)).unwrap()
}

/// Imports a malformed structure: an error containing `needle`, and the producer's
/// release called exactly once.
fn expect_error(a: ArrowDeviceArray, dt: DataType, needle: &str) -> Error {
    let before = PRODUCER_RELEASES.load(Ordering::SeqCst);
    let mut a = a;
    let e = import_array(&mut a, &schema(dt.clone()), None)
        .and_then(AnyArray::into_host)
        .unwrap_err();
    assert!(
        e.to_string().contains(needle),
        "{dt}: expected '{needle}' in: {e}"
    );
    assert!(a.array().is_released(), "taken by the import");
    assert_eq!(
        PRODUCER_RELEASES.load(Ordering::SeqCst) - before,
        1,
        "{dt}: released exactly once on error ({e})"
    );
    e
}

#[test]
fn malformed_producers_are_errors_and_released_once() {
    let _g = serial();
    let vals = || Some(i32_bytes(&[1, 2, 3, 4]));
    let cpu = |a| into_device(a, ARROW_DEVICE_CPU, -1);
    expect_error(
        cpu(raw(-1, 0, 0, vec![None, vals()], vec![], None)),
        DataType::Int32,
        "negative length -1",
    );
    expect_error(
        cpu(raw(2, 0, -3, vec![None, vals()], vec![], None)),
        DataType::Int32,
        "negative offset -3",
    );
    expect_error(
        cpu(raw(2, -2, 0, vec![None, vals()], vec![], None)),
        DataType::Int32,
        "negative null_count -2",
    );
    expect_error(
        cpu(raw(2, 0, 0, vec![None, vals(), vals()], vec![], None)),
        DataType::Int32,
        "has 2 buffers, n_buffers is 3",
    );
    expect_error(
        cpu(raw(2, 0, 0, vec![vals()], vec![], None)),
        DataType::Int32,
        "has 2 buffers, n_buffers is 1",
    );
    expect_error(
        cpu(raw(3, 0, 0, vec![None, None], vec![], None)),
        DataType::Int32,
        "buffer 1 of a Int32 array is null but must hold 12 bytes",
    );
    expect_error(
        cpu(raw(3, 1, 0, vec![None, vals()], vec![], None)),
        DataType::Int32,
        "null_count is 1 but the validity bitmap is null",
    );
    expect_error(
        cpu(raw(
            3,
            0,
            0,
            vec![None, vals()],
            vec![Some(raw(0, 0, 0, vec![], vec![], None))],
            None,
        )),
        DataType::Int32,
        "has 0 children, n_children is 1",
    );
    let st = DataType::Struct(vec![Field::new("a", DataType::Int32, true)].into());
    expect_error(
        cpu(raw(1, 0, 0, vec![None], vec![None], None)),
        st.clone(),
        "children[0]: is a null pointer",
    );
    expect_error(
        cpu(raw(
            1,
            0,
            0,
            vec![None],
            vec![Some(raw(-5, 0, 0, vec![None, vals()], vec![], None))],
            None,
        )),
        st,
        "array.children[0]: negative length -5",
    );
    let dict = DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::Utf8));
    expect_error(
        cpu(raw(1, 0, 0, vec![None, Some(vec![0])], vec![], None)),
        dict,
        "without dictionary",
    );
    expect_error(
        cpu(raw(
            1,
            0,
            0,
            vec![None, vals()],
            vec![],
            Some(raw(0, 0, 0, vec![None], vec![], None)),
        )),
        DataType::Int32,
        "must not have a dictionary",
    );
    // Invalid values are caught by arrow-rs's full validation, not read as UB.
    let e = expect_error(
        cpu(raw(
            2,
            0,
            0,
            vec![None, Some(i32_bytes(&[0, 5, 2])), Some(b"hello".to_vec())],
            vec![],
            None,
        )),
        DataType::Utf8,
        "offset",
    );
    assert!(matches!(e, Error::Malformed(_)), "{e}");
    let e = expect_error(
        cpu(raw(
            1,
            0,
            0,
            vec![None, Some(i32_bytes(&[0, 2])), Some(vec![0xff, 0xfe])],
            vec![],
            None,
        )),
        DataType::Utf8,
        "UTF",
    );
    assert!(matches!(e, Error::Malformed(_)), "{e}");
    expect_error(
        cpu(raw(
            1,
            0,
            0,
            vec![None, Some(i32_bytes(&[0, -4])), None],
            vec![],
            None,
        )),
        DataType::Utf8,
        "negative last offset -4",
    );
    // A CUDA array whose buffers are host memory: on a machine without a GPU the driver
    // is unavailable; with one, the pointers are not device memory. Either way an
    // error, and released once.
    let before = PRODUCER_RELEASES.load(Ordering::SeqCst);
    let mut cuda = into_device(
        raw(4, 0, 0, vec![None, vals()], vec![], None),
        ARROW_DEVICE_CUDA,
        0,
    );
    let e = import_array(&mut cuda, &schema(DataType::Int32), None)
        .and_then(AnyArray::into_device)
        .unwrap_err();
    if devbuf::cuda::is_available() {
        assert!(e.to_string().contains("not device memory"), "{e}");
    } else {
        assert_eq!(e.kind(), devbuf::ErrorKind::CudaUnavailable, "{e}");
    }
    assert_eq!(PRODUCER_RELEASES.load(Ordering::SeqCst) - before, 1);
    // A negative device id.
    let mut cuda = into_device(
        raw(4, 0, 0, vec![None, vals()], vec![], None),
        ARROW_DEVICE_CUDA,
        -2,
    );
    let e = import_array(&mut cuda, &schema(DataType::Int32), None)
        .and_then(AnyArray::into_device)
        .unwrap_err();
    assert!(e.to_string().contains("device_id -2"), "{e}");
    assert_eq!(PRODUCER_RELEASES.load(Ordering::SeqCst) - before, 2);
}

#[test]
fn producer_null_count_minus_one_is_counted() {
    let _g = serial();
    // [1, null, 3, null, 5] at offset 1 of a 6-element buffer: bits 1..6 of 0b101011.
    let a = raw(
        5,
        -1,
        1,
        vec![
            Some(vec![0b0101_0111]),
            Some(i32_bytes(&[9, 1, 2, 3, 4, 5])),
        ],
        vec![],
        None,
    );
    let mut d = into_device(a, ARROW_DEVICE_CPU, -1);
    let back = import_array(&mut d, &schema(DataType::Int32), None)
        .unwrap()
        .into_host()
        .unwrap();
    let want = Int32Array::from(vec![Some(1), Some(2), None, Some(4), None]);
    assert_eq!(back.as_ref(), &want as &dyn Array);
    assert_eq!(back.null_count(), 2);
    // An empty string array may have a null offsets buffer.
    let before = PRODUCER_RELEASES.load(Ordering::SeqCst);
    let mut d = into_device(
        raw(0, 0, 0, vec![None, None, None], vec![], None),
        ARROW_DEVICE_CPU,
        -1,
    );
    let back = import_array(&mut d, &schema(DataType::Utf8), None)
        .unwrap()
        .into_host()
        .unwrap();
    assert_eq!(back.len(), 0);
    drop(back);
    assert_eq!(PRODUCER_RELEASES.load(Ordering::SeqCst) - before, 1);
}

#[test]
fn unsupported_device_types_leave_the_structure_untouched() {
    let _g = serial();
    let a = Int32Array::from(vec![1, 2]);
    for t in [
        ARROW_DEVICE_ROCM,
        ARROW_DEVICE_OPENCL,
        ARROW_DEVICE_CUDA_MANAGED,
        0,
        99,
    ] {
        let c = counts();
        let (mut c_array, c_schema) = export_array(&a, ExportDevice::Cpu).unwrap();
        // Safety: only the device type changes; nothing reads the buffers.
        unsafe {
            (*(&mut c_array as *mut ArrowDeviceArray).cast::<RawDeviceArray>()).device_type = t;
        }
        for e in [
            import_array(&mut c_array, &c_schema, None).unwrap_err(),
            import_array(&mut c_array, &c_schema, None).unwrap_err(),
        ] {
            let msg = e.to_string();
            assert!(msg.contains("unsupported device type"), "{msg}");
            assert!(msg.contains(&format!("({t})")), "{msg}");
            assert!(msg.contains(name_of(t)), "{msg}");
        }
        assert!(!c_array.array().is_released(), "left untouched");
        assert_eq!(c.released_since(), 0);
        drop(c_array);
        assert_eq!(c.released_since(), 1, "the owner's drop releases it");
    }
    // A CPU array offered to a consumer that takes device memory only: it reads the
    // device type and leaves the structure untouched; `import_array` takes it as a
    // host array, which `into_device` refuses.
    let (mut c_array, c_schema) = export_array(&a, ExportDevice::Cpu).unwrap();
    assert_eq!(c_array.device_type(), ARROW_DEVICE_CPU);
    assert!(!c_array.array().is_released());
    let e = import_array(&mut c_array, &c_schema, None)
        .unwrap()
        .into_device()
        .unwrap_err();
    assert!(e.to_string().contains("host memory"), "{e}");
}

#[test]
fn view_types_are_refused_for_cuda_naming_the_type() {
    let _g = serial();
    for (name, a) in corpus::views() {
        let (mut c_array, c_schema) = export_array(a.as_ref(), ExportDevice::Cpu).unwrap();
        // Safety: only the device type changes; the import refuses before reading.
        unsafe {
            (*(&mut c_array as *mut ArrowDeviceArray).cast::<RawDeviceArray>()).device_type =
                ARROW_DEVICE_CUDA;
        }
        let e = import_array(&mut c_array, &c_schema, None)
            .and_then(AnyArray::into_device)
            .unwrap_err();
        assert!(
            e.to_string().contains(&a.data_type().to_string()),
            "{name}: {e}"
        );
        assert!(!c_array.array().is_released(), "{name}");
    }
}

// ---------------------------------------------------------------------------
// Streams
// ---------------------------------------------------------------------------

fn batches() -> (Arc<Schema>, Vec<RecordBatch>) {
    let mut fields = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    for (name, a) in corpus::others() {
        if a.len() == 29 && name != "null" {
            fields.push(Field::new(name, a.data_type().clone(), true));
            columns.push(a);
        }
    }
    let schema = Arc::new(
        Schema::new(fields).with_metadata(std::collections::HashMap::from([(
            "k".to_string(),
            "v".to_string(),
        )])),
    );
    let full = RecordBatch::try_new(schema.clone(), columns).unwrap();
    let parts = vec![full.slice(0, 10), full.slice(10, 0), full.slice(10, 19)];
    (schema, parts)
}

/// Batches from an iterator that panics at `panic_at` (and, when `panic_on_drop`, in
/// its destructor).
struct PanickingBatches {
    batches: std::vec::IntoIter<RecordBatch>,
    next: usize,
    panic_at: usize,
    panic_on_drop: bool,
}

impl Iterator for PanickingBatches {
    type Item = devbuf::Result<RecordBatch>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next += 1;
        if self.next - 1 == self.panic_at {
            panic!("the batch source panics");
        }
        self.batches.next().map(Ok)
    }
}

impl Drop for PanickingBatches {
    fn drop(&mut self) {
        if self.panic_on_drop {
            panic!("the batch source panics when dropped");
        }
    }
}

#[test]
fn a_panicking_batch_source_is_an_eio_error_not_an_unwind_into_c() {
    let _g = serial();
    let (schema, parts) = batches();
    for panic_on_drop in [false, true] {
        let c = counts();
        let source = PanickingBatches {
            batches: parts.clone().into_iter(),
            next: 0,
            panic_at: 1,
            panic_on_drop,
        };
        let mut stream = export_stream(schema.clone(), source, ExportDevice::Cpu);
        let mut reader = import_stream(&mut stream, None).unwrap();
        assert_eq!(reader.next().unwrap().unwrap().as_host(), Some(&parts[0]));
        let e = reader.next().unwrap().unwrap_err().to_string();
        assert!(e.contains("panicked") && e.contains("EIO"), "{e}");
        assert!(reader.next().is_none(), "the first error ends the stream");
        drop(reader); // releases the stream, dropping the source
        assert_eq!(c.live_since(), 0, "panic_on_drop {panic_on_drop}");
    }
}

#[test]
fn host_stream_round_trip_and_release() {
    let _g = serial();
    let (schema, parts) = batches();
    let c = counts();
    let mut stream = export_stream(
        schema.clone(),
        parts.clone().into_iter().map(Ok),
        ExportDevice::Cpu,
    );
    assert_eq!(stream.device_type(), ARROW_DEVICE_CPU);
    assert_eq!(c.live_since(), 1);
    let reader = import_stream(&mut stream, None).unwrap();
    assert!(stream.is_released());
    assert_eq!(reader.schema(), schema, "schema incl. metadata");
    let got: Vec<RecordBatch> = reader
        .map(|b| {
            b.map(|b| {
                b.as_host()
                    .cloned()
                    .expect("a CPU stream carries host batches")
            })
        })
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(got, parts);
    let per_batch: u64 = parts
        .iter()
        .map(|b| corpus::node_count(&arrow_array::StructArray::from(b.clone()).to_data()))
        .sum();
    assert!(
        c.released_since() < 1 + per_batch,
        "batches in use are alive"
    );
    drop(got);
    assert_eq!(
        c.released_since(),
        1 + per_batch,
        "the stream and every batch, once"
    );
    assert_eq!(c.live_since(), 0);
    // A second import of the same (moved-out) stream.
    let e = import_stream(&mut stream, None).unwrap_err();
    assert!(e.to_string().contains("released"), "{e}");
}

#[test]
fn host_stream_error_mid_stream() {
    let _g = serial();
    let (schema, parts) = batches();
    let items: Vec<devbuf::Result<RecordBatch>> = vec![
        Ok(parts[0].clone()),
        Err(Error::InvalidArgument(
            "disk on fire while reading batch 1".into(),
        )),
        Ok(parts[2].clone()),
    ];
    let c = counts();
    let mut stream = export_stream(schema.clone(), items, ExportDevice::Cpu);
    let mut reader = import_stream(&mut stream, None).unwrap();
    assert_eq!(reader.next().unwrap().unwrap().as_host(), Some(&parts[0]));
    let e = reader.next().unwrap().unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("disk on fire while reading batch 1"), "{msg}");
    assert!(msg.contains("EINVAL"), "{msg}");
    assert!(
        reader.next().is_none(),
        "the first error ends the iteration"
    );
    drop(reader);
    assert_eq!(c.live_since(), 0);

    // A batch that does not match the schema.
    let other =
        RecordBatch::try_from_iter(vec![("x", Arc::new(Int32Array::from(vec![1])) as ArrayRef)])
            .unwrap();
    let mut stream = export_stream(schema, vec![Ok(other)], ExportDevice::Cpu);
    let e = import_stream(&mut stream, None)
        .unwrap()
        .next()
        .unwrap()
        .unwrap_err();
    assert!(e.to_string().contains("batch 0 has 1 columns"), "{e}");
}

#[test]
fn host_stream_reader_is_a_record_batch_reader() {
    let _g = serial();
    let (schema, parts) = batches();
    let c = counts();
    // As arrow-rs's reader trait object, with ArrowError items.
    let mut stream = export_stream(
        schema.clone(),
        parts.clone().into_iter().map(Ok),
        ExportDevice::Cpu,
    );
    let reader: Box<dyn arrow_array::RecordBatchReader> =
        Box::new(import_stream(&mut stream, None).unwrap().into_host_reader());
    assert_eq!(reader.schema(), schema);
    let got: Vec<RecordBatch> = reader
        .collect::<Result<_, arrow_schema::ArrowError>>()
        .unwrap();
    assert_eq!(got, parts);
    drop(got);
    // The reader's ArrowError wraps devbuf's error, which Error::from gives back.
    let items = vec![Ok(parts[0].clone()), Err(Error::invalid("bad batch"))];
    let mut stream = export_stream(schema, items, ExportDevice::Cpu);
    let mut reader = import_stream(&mut stream, None).unwrap().into_host_reader();
    assert_eq!(reader.next().unwrap().unwrap(), parts[0]);
    let e = Error::from(reader.next().unwrap().unwrap_err());
    assert!(e.to_string().contains("bad batch"), "{e}");
    assert!(reader.next().is_none());
    drop(reader);
    assert_eq!(c.live_since(), 0);
}

#[test]
fn host_stream_raw_callbacks() {
    let _g = serial();
    let (schema, parts) = batches();
    let mut stream = export_stream(schema, vec![Ok(parts[0].clone())], ExportDevice::Cpu);
    // Safety: calling the callbacks of a live stream as a C consumer would.
    unsafe {
        let p = (&mut stream as *mut ArrowDeviceArrayStream).cast::<RawStream>();
        let get_next = (*p).get_next.unwrap();
        let get_schema = (*p).get_schema.unwrap();
        let get_last_error = (*p).get_last_error.unwrap();
        assert_eq!(get_schema(p, std::ptr::null_mut()), libc::EINVAL);
        let msg = CStr::from_ptr(get_last_error(p))
            .to_string_lossy()
            .into_owned();
        assert!(msg.contains("null"), "{msg}");
        let mut out = std::mem::MaybeUninit::<ArrowDeviceArray>::uninit();
        assert_eq!(get_next(p, out.as_mut_ptr()), 0);
        let first = out.assume_init();
        assert!(!first.array().is_released());
        assert_eq!(first.array().length(), 10);
        for _ in 0..3 {
            let mut out = std::mem::MaybeUninit::<ArrowDeviceArray>::uninit();
            assert_eq!(get_next(p, out.as_mut_ptr()), 0);
            assert!(
                out.assume_init().array().is_released(),
                "end of stream, repeatedly"
            );
        }
        drop(first);
    }
}

#[repr(C)]
struct RawStream {
    device_type: i32,
    get_schema: Option<unsafe extern "C" fn(*mut RawStream, *mut FFI_ArrowSchema) -> c_int>,
    get_next: Option<unsafe extern "C" fn(*mut RawStream, *mut ArrowDeviceArray) -> c_int>,
    get_last_error: Option<unsafe extern "C" fn(*mut RawStream) -> *const c_char>,
    release: Option<unsafe extern "C" fn(*mut RawStream)>,
    private_data: *mut c_void,
}

#[test]
fn stream_import_refuses_other_device_types_untouched() {
    let _g = serial();
    let (schema, parts) = batches();
    let mut stream = export_stream(schema, parts.into_iter().map(Ok), ExportDevice::Cpu);
    // A consumer that takes CUDA streams only reads the device type and leaves a CPU
    // stream untouched.
    assert_eq!(stream.device_type(), ARROW_DEVICE_CPU);
    // Safety: only the device type changes; nothing is read through it.
    unsafe {
        (*(&mut stream as *mut ArrowDeviceArrayStream).cast::<RawStream>()).device_type =
            ARROW_DEVICE_ROCM;
    }
    let e = import_stream(&mut stream, None).unwrap_err();
    assert!(
        e.to_string().contains("unsupported device type ROCM (10)"),
        "{e}"
    );
    assert!(!stream.is_released(), "left untouched");
}

#[test]
fn stream_export_refuses_batches_on_the_other_side() {
    let _g = serial();
    let (schema, parts) = batches();
    // A host batch in a CUDA stream: an error from get_next, not a panic.
    let mut stream = export_stream(schema, parts.into_iter().map(Ok), SyncEvent::None);
    assert_eq!(stream.device_type(), ARROW_DEVICE_CUDA);
    // Safety: calling the callback of a live stream as a C consumer would.
    unsafe {
        let p = (&mut stream as *mut ArrowDeviceArrayStream).cast::<RawStream>();
        let mut out = std::mem::MaybeUninit::<ArrowDeviceArray>::uninit();
        assert_eq!((*p).get_next.unwrap()(p, out.as_mut_ptr()), libc::EINVAL);
        assert!(out.assume_init().array().is_released());
        let msg = CStr::from_ptr((*p).get_last_error.unwrap()(p))
            .to_string_lossy()
            .into_owned();
        assert!(msg.contains("batch 0 is in host memory"), "{msg}");
    }
}

// ---------------------------------------------------------------------------
// A C compiler's view: layouts, a C consumer, a C producer, a C stream consumer.
// ---------------------------------------------------------------------------

struct CLib {
    handle: *mut c_void,
}

impl CLib {
    fn build() -> CLib {
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/c/cdi_abi.c");
        let dir = std::env::temp_dir().join(format!("devbuf-cdi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let lib = dir.join("libcdi_abi.so");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
        let out = std::process::Command::new(&cc)
            .args([
                "-std=c11", "-Wall", "-Werror", "-O1", "-shared", "-fPIC", "-o",
            ])
            .arg(&lib)
            .arg(src)
            .output()
            .unwrap_or_else(|e| panic!("the C ABI test needs a C compiler ({cc}): {e}"));
        assert!(
            out.status.success(),
            "{cc} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = CString::new(lib.to_string_lossy().as_bytes()).unwrap();
        // Safety: loading a library we just built; its initialisers do nothing.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null(), "dlopen {}", lib.display());
        // The loaded library stays mapped; the file is no longer needed.
        let _ = std::fs::remove_dir_all(&dir);
        CLib { handle }
    }

    /// # Safety
    /// `T` must be the C function's exact signature.
    unsafe fn get<T: Copy>(&self, name: &str) -> T {
        let n = CString::new(name).unwrap();
        // Safety: valid handle and name.
        let p = unsafe { libc::dlsym(self.handle, n.as_ptr()) };
        assert!(!p.is_null(), "dlsym {name}");
        assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
        // Safety: guaranteed by the caller.
        unsafe { std::mem::transmute_copy(&p) }
    }
}

fn clib() -> &'static CLib {
    static LIB: std::sync::OnceLock<CLibSend> = std::sync::OnceLock::new();
    &LIB.get_or_init(|| CLibSend(CLib::build())).0
}

struct CLibSend(CLib);
// Safety: a dlopen handle may be used from any thread.
unsafe impl Send for CLibSend {}
// Safety: see `Send`.
unsafe impl Sync for CLibSend {}

#[test]
fn c_compiler_agrees_on_the_layout() {
    let _g = serial();
    // Safety: the signature of `cdi_layout` in tests/c/cdi_abi.c.
    let f: unsafe extern "C" fn(*mut i64, c_int) -> c_int = unsafe { clib().get("cdi_layout") };
    let mut v = [0i64; 64];
    let n = unsafe { f(v.as_mut_ptr(), 64) } as usize;
    let mut ours = Vec::new();
    for (_name, size, fields) in layout_table() {
        ours.push(size as i64);
        ours.extend(fields.iter().map(|(_, o)| *o as i64));
    }
    assert_eq!(&v[..n], &ours[..], "sizes and offsets: C vs Rust");
}

fn rust_describe(a: &ArrowArray) -> String {
    let mut s = format!(
        "(len={} nulls={} off={} nbuf={}",
        a.length(),
        a.null_count(),
        a.offset(),
        a.n_buffers()
    );
    for i in 0..a.n_buffers() as usize {
        s += if a.buffer(i).unwrap().is_null() {
            " null"
        } else {
            " buf"
        };
    }
    for i in 0..a.n_children() as usize {
        s += " ";
        s += &rust_describe(a.child(i).unwrap());
    }
    if let Some(d) = a.dictionary() {
        s += " dict=";
        s += &rust_describe(d);
    }
    s + ")"
}

#[test]
fn c_consumer_walks_and_releases_every_type() {
    let _g = serial();
    // Safety: the signature in tests/c/cdi_abi.c.
    let describe: unsafe extern "C" fn(*mut ArrowDeviceArray, *mut c_char, usize) -> c_int =
        unsafe { clib().get("cdi_describe_and_release") };
    for (name, a) in corpus::all() {
        let c = counts();
        let (mut c_array, _schema) = export_array(a.as_ref(), ExportDevice::Cpu).unwrap();
        let want = format!(
            "device_type=1 device_id=-1 sync=no reserved=0,0,0 {}",
            rust_describe(c_array.array())
        );
        let mut buf = vec![0 as c_char; 1 << 16];
        let r = unsafe { describe(&mut c_array, buf.as_mut_ptr(), buf.len()) };
        assert_eq!(r, 0, "{name}: release must mark the structure released");
        let got = unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        assert_eq!(got, want, "{name}");
        assert!(c_array.array().is_released());
        assert_eq!(
            c.released_since(),
            corpus::node_count(&a.to_data()),
            "{name}"
        );
        assert_eq!(c.live_since(), 0, "{name}");
    }
}

#[test]
fn c_consumer_reads_values_and_moves_children() {
    let _g = serial();
    // Safety: signatures in tests/c/cdi_abi.c.
    let sum: unsafe extern "C" fn(*mut ArrowDeviceArray) -> i64 =
        unsafe { clib().get("cdi_sum_int32_and_release") };
    let move_child: unsafe extern "C" fn(*mut ArrowDeviceArray, c_int, *mut ArrowArray) -> c_int =
        unsafe { clib().get("cdi_move_child_and_release_parent") };
    let a = Int32Array::from(
        (0..100)
            .map(|i| (i % 7 != 3).then_some(i * i - 50))
            .collect::<Vec<_>>(),
    );
    for (off, len) in [(0, 100), (3, 50), (13, 0), (99, 1)] {
        let s = a.slice(off, len);
        let want: i64 = s.iter().flatten().map(i64::from).sum();
        let (mut c_array, _) = export_array(&s, ExportDevice::Cpu).unwrap();
        assert_eq!(unsafe { sum(&mut c_array) }, want, "slice {off}+{len}");
        assert!(c_array.array().is_released());
    }
    let (_, structs) = corpus::others()
        .into_iter()
        .find(|(n, _)| *n == "struct")
        .unwrap();
    let c = counts();
    let (mut c_array, _) = export_array(structs.as_ref(), ExportDevice::Cpu).unwrap();
    let mut child = ArrowArray::default();
    assert_eq!(unsafe { move_child(&mut c_array, 1, &mut child) }, 0);
    assert_eq!(c.released_since(), 3, "parent and the two other children");
    // Safety: a CPU child exported by devbuf.
    let mut d = unsafe { ArrowDeviceArray::new(child, -1, ARROW_DEVICE_CPU, std::ptr::null_mut()) };
    let back = import_array(&mut d, &schema(DataType::Utf8), None)
        .unwrap()
        .into_host()
        .unwrap();
    let s = structs
        .as_any()
        .downcast_ref::<arrow_array::StructArray>()
        .unwrap();
    assert_eq!(back.as_ref(), s.column(1).as_ref());
    drop(back);
    assert_eq!(c.released_since(), 4);
}

#[test]
fn c_producer_is_released_exactly_once() {
    let _g = serial();
    // Safety: signatures in tests/c/cdi_abi.c.
    let make: unsafe extern "C" fn(*mut ArrowDeviceArray) = unsafe { clib().get("cdi_make_int32") };
    let calls: unsafe extern "C" fn() -> c_int = unsafe { clib().get("cdi_release_calls") };
    let before = unsafe { calls() };
    let mut out = std::mem::MaybeUninit::<ArrowDeviceArray>::uninit();
    unsafe { make(out.as_mut_ptr()) };
    // Safety: the C producer initialised a valid CPU array.
    let mut d = unsafe { out.assume_init() };
    let a = import_array(&mut d, &schema(DataType::Int32), None)
        .unwrap()
        .into_host()
        .unwrap();
    let b = a.slice(1, 3);
    assert_eq!(
        b.as_ref(),
        &Int32Array::from(vec![None, Some(3), Some(4)]) as &dyn Array
    );
    assert_eq!(unsafe { calls() } - before, 0);
    drop(a);
    assert_eq!(
        unsafe { calls() } - before,
        0,
        "a slice still holds the memory"
    );
    drop(b);
    assert_eq!(unsafe { calls() } - before, 1);
    // And dropped without import.
    let mut out = std::mem::MaybeUninit::<ArrowDeviceArray>::uninit();
    unsafe { make(out.as_mut_ptr()) };
    drop(unsafe { out.assume_init() });
    assert_eq!(unsafe { calls() } - before, 2);
}

#[test]
fn c_consumer_reads_a_stream() {
    let _g = serial();
    // Safety: the signature in tests/c/cdi_abi.c.
    let rows: unsafe extern "C" fn(
        *mut ArrowDeviceArrayStream,
        *mut c_char,
        usize,
        *mut c_char,
        usize,
    ) -> i64 = unsafe { clib().get("cdi_stream_rows") };
    let (schema, parts) = batches();
    let c = counts();
    let mut stream = export_stream(
        schema.clone(),
        parts.clone().into_iter().map(Ok),
        ExportDevice::Cpu,
    );
    let (mut fmt, mut err) = (vec![0 as c_char; 64], vec![0 as c_char; 512]);
    let n = unsafe { rows(&mut stream, fmt.as_mut_ptr(), 64, err.as_mut_ptr(), 512) };
    assert_eq!(n, 29);
    assert_eq!(
        unsafe { CStr::from_ptr(fmt.as_ptr()) }.to_str().unwrap(),
        "+s"
    );
    assert!(stream.is_released());
    assert_eq!(c.live_since(), 0, "stream and every batch released by C");

    let items = vec![
        Ok(parts[0].clone()),
        Err(Error::InvalidArgument("bad batch".into())),
    ];
    let mut stream = export_stream(schema, items, ExportDevice::Cpu);
    let n = unsafe { rows(&mut stream, fmt.as_mut_ptr(), 64, err.as_mut_ptr(), 512) };
    assert_eq!(n, -1);
    let msg = unsafe { CStr::from_ptr(err.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    assert_eq!(
        msg,
        format!("get_next {}: invalid argument: bad batch", libc::EINVAL)
    );
    assert!(stream.is_released());
    assert_eq!(c.live_since(), 0);
}

/// The three reserved words of a device array (zero when produced by devbuf).
fn reserved(a: &ArrowDeviceArray) -> [i64; 3] {
    // Safety: `ArrowDeviceArray` has the C layout that `RawDeviceArray` spells out
    // (tests/c checks it against a C compiler); a shared read of plain fields.
    unsafe { (*(a as *const ArrowDeviceArray).cast::<RawDeviceArray>()).reserved }
}

/// The specification's name of a device type, as devbuf's errors spell it.
fn name_of(t: ArrowDeviceType) -> &'static str {
    match t {
        ARROW_DEVICE_OPENCL => "OPENCL",
        ARROW_DEVICE_VULKAN => "VULKAN",
        ARROW_DEVICE_METAL => "METAL",
        ARROW_DEVICE_VPI => "VPI",
        ARROW_DEVICE_ROCM => "ROCM",
        ARROW_DEVICE_ROCM_HOST => "ROCM_HOST",
        ARROW_DEVICE_EXT_DEV => "EXT_DEV",
        ARROW_DEVICE_CUDA_MANAGED => "CUDA_MANAGED",
        ARROW_DEVICE_ONEAPI => "ONEAPI",
        ARROW_DEVICE_WEBGPU => "WEBGPU",
        ARROW_DEVICE_HEXAGON => "HEXAGON",
        ARROW_DEVICE_CPU => "CPU",
        ARROW_DEVICE_CUDA => "CUDA",
        ARROW_DEVICE_CUDA_HOST => "CUDA_HOST",
        _ => "unknown",
    }
}
