//! zarr buffer layer on the GPU: every operation on device memory against the same
//! operation on host memory (exact, byte for byte), zero-copy claims by address, the
//! device memory store.

use devbuf::ElementType;
use devbuf::cuda::DeviceBuffer;
use devbuf::zarr::{
    AxisSel, BufferPrototype, ByteBuffer, ByteRequest, DeviceMemoryStore, Dtype, Endianness,
    MemoryStore, NDBuffer, Order, Scalar, Slice, Store,
};
use rand::Rng;
use rand::rngs::SmallRng;

use crate::arrays::stored_c_bytes;
use crate::common::*;

const HOST: BufferPrototype = BufferPrototype::Host;
const DEV: BufferPrototype = BufferPrototype::Device(0);

fn random_scalar(rng: &mut SmallRng, t: ElementType) -> Scalar {
    if t == ElementType::Bool {
        return Scalar::Bool(rng.random());
    }
    let special = [0.0, -0.0, f64::NAN, f64::INFINITY, -1.5, 1.0, 300.0];
    if rng.random_ratio(1, 4) {
        return Scalar::Float64(special[below(rng, special.len())]).cast(t);
    }
    let b = random_bytes(rng, t.size());
    Scalar::from_le_bytes(t, &b).unwrap()
}

fn random_dtype(rng: &mut SmallRng) -> Dtype {
    let t = ElementType::ALL[below(rng, ElementType::ALL.len())];
    Dtype::new(
        t,
        if rng.random() {
            Endianness::Big
        } else {
            Endianness::Little
        },
    )
}

fn random_shape(rng: &mut SmallRng) -> Vec<usize> {
    let nd = below(rng, 5);
    (0..nd).map(|_| below(rng, 6)).collect()
}

/// A host array of random values (sometimes constant) of `dtype`.
fn random_host(rng: &mut SmallRng, shape: &[usize], dtype: Dtype, order: Order) -> NDBuffer {
    let n: usize = shape.iter().product();
    let constant = rng.random_ratio(1, 3);
    let first = random_scalar(rng, dtype.element());
    let mut bytes = Vec::with_capacity(n * dtype.element().size());
    for _ in 0..n {
        let v = if constant {
            first
        } else {
            random_scalar(rng, dtype.element())
        };
        bytes.extend(v.to_bytes_as(dtype));
    }
    NDBuffer::from_memory(bytes, shape, dtype, order).unwrap()
}

fn random_selection(rng: &mut SmallRng, shape: &[usize]) -> Vec<AxisSel> {
    let k = below(rng, shape.len() + 1);
    shape[..k]
        .iter()
        .map(|&len| match below(rng, 4) {
            0 if len > 0 => AxisSel::Index(
                below(rng, len) as isize - if rng.random() { len as isize } else { 0 },
            ),
            1 => {
                let a = below(rng, len + 1);
                let b = a + below(rng, len - a + 1);
                AxisSel::Range {
                    start: a,
                    end: b,
                    step: 1 + below(rng, 3),
                }
            }
            2 => {
                let r = |rng: &mut SmallRng| -> Option<isize> {
                    if rng.random_ratio(1, 4) {
                        None
                    } else {
                        Some(below(rng, 2 * len + 5) as isize - len as isize - 2)
                    }
                };
                AxisSel::Slice(Slice::new(r(rng), r(rng), 1 + below(rng, 3) as isize))
            }
            _ => AxisSel::Full,
        })
        .collect()
}

/// Exact equality of two arrays' values (shape, dtype, bytes). With `nan_any`, NaNs of
/// a float or complex type compare equal whatever their payload (a cast may produce
/// the canonical NaN on one side).
fn assert_same(dev: &NDBuffer, host: &NDBuffer, nan_any: bool, what: &str) {
    assert!(
        dev.prototype().is_device(),
        "{what}: expected device memory"
    );
    assert!(host.prototype().is_host(), "{what}: expected host memory");
    assert_eq!(dev.shape(), host.shape(), "{what}: shape");
    assert_eq!(dev.dtype(), host.dtype(), "{what}: dtype");
    let (d, h) = (stored_c_bytes(dev), stored_c_bytes(host));
    if d == h {
        return;
    }
    let t = host.dtype();
    if nan_any && matches!(t.element().kind(), 'f' | 'c') {
        let w = devbuf::__test::swap_width(t.element());
        let is_nan = |b: &[u8]| -> bool {
            let mut b = b.to_vec();
            if t.byteorder() == Endianness::Big {
                b.reverse();
            }
            match w {
                2 => half::f16::from_le_bytes([b[0], b[1]]).is_nan(),
                4 => f32::from_le_bytes(b.try_into().unwrap()).is_nan(),
                _ => f64::from_le_bytes(b.try_into().unwrap()).is_nan(),
            }
        };
        let ok = d
            .chunks(w)
            .zip(h.chunks(w))
            .all(|(x, y)| x == y || (is_nan(x) && is_nan(y)));
        if ok {
            return;
        }
    }
    panic!(
        "{what}: device and host differ for {t} {:?}\ndevice {d:02x?}\n  host {h:02x?}",
        host.shape()
    );
}

gpu_test! {
    fn zarr_buffer_zero_copy_by_address() {
        let c = ctx();
        let mut rng = rng("zarr_buffer_zero_copy_by_address");
        let data = random_bytes(&mut rng, 4096);
        let d = DeviceBuffer::from_slice(&c, &data).unwrap();
        let b = ByteBuffer::from(d.clone());
        assert!(b.prototype().is_device());
        assert_eq!(b.as_memory().address(), d.address());
        assert_eq!(b.prototype(), DEV);
        // from_buffer to the prototype it has: zero-copy; to the host: one copy.
        let same = b.to_prototype(&DEV).unwrap();
        assert_eq!(same.as_memory().address(), d.address());
        let host = b.to_prototype(&HOST).unwrap();
        assert!(host.prototype().is_host());
        assert_eq!(host.to_host().unwrap().to_vec(), data);
        // Slices are views of the device memory.
        let s = b.get(100..300).unwrap();
        assert_eq!(s.as_memory().address(), d.address() + 100);
        assert_eq!(s.to_host().unwrap().to_vec(), &data[100..300]);
        // Page-locked host memory becomes a host ByteBuffer without a copy.
        let mut h = c.allocate_host(64).unwrap();
        h.copy_from_slice(&data[..64]);
        let hp = h.as_ptr() as u64;
        let hb = ByteBuffer::from(h);
        assert_eq!(hb.as_memory().address(), hp);
        // An NDBuffer over device memory, and its views.
        let nd = NDBuffer::from_memory(d.clone(), &[16, 64], Dtype::INT32, Order::C).unwrap();
        assert_eq!(nd.as_ndarray_like().memory.address(), d.address());
        let v = nd.get(&[3.into(), (8..).into()]).unwrap();
        assert_eq!(v.as_ndarray_like().offset, 3 * 256 + 32);
        assert_eq!(nd.transpose(None).unwrap().as_ndarray_like().memory.address(), d.address());
        assert_eq!(nd.to_prototype(&DEV).unwrap().as_ndarray_like().memory.address(), d.address());
        // to_buffer of a C-contiguous device array is a view.
        assert_eq!(nd.to_buffer().unwrap().as_memory().address(), d.address());
        // create_zero_length on the device.
        let z = ByteBuffer::default().to_prototype(&DEV).unwrap();
        assert!(z.prototype().is_device() && z.is_empty());
    }

    fn zarr_buffer_device_ops_match_host() {
        let mut rng = rng("zarr_buffer_device_ops_match_host");
        for _ in 0..50 {
            let n = below(&mut rng, 300);
            let data = random_bytes(&mut rng, n);
            let hb = ByteBuffer::from(data.clone());
            let db = ByteBuffer::from(data.clone()).to_prototype(&DEV).unwrap();
            assert!(db.prototype().is_device());
            assert_eq!(db, hb);
            assert!(db.equals(&hb).unwrap() && hb.equals(&db).unwrap());
            let a = below(&mut rng, n + 1);
            let e = a + below(&mut rng, n - a + 1);
            assert_eq!(db.get(a..e).unwrap().to_host().unwrap().to_vec(), &data[a..e]);
            let s = Slice::new(Some(a as isize - n as isize), None, 1);
            assert_eq!(db.get(s).unwrap().to_host().unwrap().to_vec(), hb.get(s).unwrap().to_host().unwrap().to_vec());
            // set from host and from device values; copy-on-write keeps `keep` intact.
            let keep = db.clone();
            let mut d2 = db.clone();
            let mut h2 = hb.clone();
            let v = random_bytes(&mut rng, e - a);
            let vd = ByteBuffer::from(v.clone()).to_prototype(&DEV).unwrap();
            if rng.random() {
                d2.set(a..e, &ByteBuffer::from(v.clone())).unwrap();
            } else {
                d2.set(a..e, &vd).unwrap();
            }
            h2.set(a..e, &vd).unwrap();
            assert_eq!(d2.to_host().unwrap().to_vec(), h2.to_host().unwrap().to_vec());
            assert_eq!(keep.to_host().unwrap().to_vec(), data);
            // combine (concat in this buffer's memory) mixes memories, in one allocation.
            let parts = [hb.clone(), vd.clone(), ByteBuffer::from(v.clone())];
            let dc = ByteBuffer::concat(&db.prototype(), std::iter::once(&db).chain(parts.iter())).unwrap();
            let hc = ByteBuffer::concat(&hb.prototype(), std::iter::once(&hb).chain(parts.iter())).unwrap();
            assert!(dc.prototype().is_device() && hc.prototype().is_host());
            assert_eq!(dc.to_host().unwrap().to_vec(), hc.to_host().unwrap().to_vec());
            assert_eq!(ByteBuffer::concat(&DEV, parts.iter()).unwrap().to_host().unwrap().to_vec(), ByteBuffer::concat(&HOST, parts.iter()).unwrap().to_host().unwrap().to_vec());
        }
        // A device buffer only this handle sees is written in place.
        let mut own = ByteBuffer::from(vec![0u8; 8]).to_prototype(&DEV).unwrap();
        let addr = own.as_memory().address();
        own.set(2..4, &ByteBuffer::from(vec![1u8, 2])).unwrap();
        assert_eq!(own.as_memory().address(), addr);
        assert_eq!(own.to_host().unwrap().to_vec(), [0, 0, 1, 2, 0, 0, 0, 0]);
    }

    fn zarr_ndbuffer_device_matches_host() {
        let mut rng = rng("zarr_ndbuffer_device_matches_host");
        for round in 0..300 {
            let dtype = random_dtype(&mut rng);
            let shape = random_shape(&mut rng);
            let order = if rng.random() { Order::C } else { Order::F };
            let h = random_host(&mut rng, &shape, dtype, order);
            let d = h.to_prototype(&DEV).unwrap();
            let what = |op: &str| format!("round {round} {op} on {dtype} {shape:?} {order:?}");
            assert_same(&d, &h, false, &what("upload"));
            assert_eq!(d.is_contiguous(Order::C), h.is_contiguous(Order::C));
            assert_eq!(d.to_prototype(&HOST).unwrap().to_buffer().unwrap().to_host().unwrap().to_vec(), stored_c_bytes(&h));

            // Views: selections, transposes, reshapes, copies.
            let sel = random_selection(&mut rng, &shape);
            let (dv, hv) = (d.get(&sel).unwrap(), h.get(&sel).unwrap());
            assert_same(&dv, &hv, false, &what(&format!("get {sel:?}")));
            let mut perm: Vec<usize> = (0..shape.len()).collect();
            for i in (1..perm.len()).rev() {
                perm.swap(i, below(&mut rng, i + 1));
            }
            let (dt, ht) = (dv.transpose(None).unwrap(), hv.transpose(None).unwrap());
            assert_same(&dt, &ht, false, &what("transpose"));
            assert_same(&d.transpose(Some(&perm)).unwrap().copy_order(Order::C).unwrap(), &h.transpose(Some(&perm)).unwrap().copy_order(Order::C).unwrap(), false, &what("transpose+copy"));
            assert_same(&dt.copy_order(Order::F).unwrap(), &ht.copy_order(Order::F).unwrap(), false, &what("copy F"));
            assert_same(&dt.reshape(&[-1]).unwrap(), &ht.reshape(&[-1]).unwrap(), false, &what("reshape"));
            match (dv.as_scalar(), hv.as_scalar()) {
                (Ok(a), Ok(b)) => assert_eq!(a.to_le_bytes(), b.to_le_bytes(), "{}", what("as_scalar")),
                (Err(_), Err(_)) => {}
                (a, b) => panic!("{}: {a:?} vs {b:?}", what("as_scalar")),
            }

            // astype to every kind of target, on the array and on a strided view.
            let to = random_dtype(&mut rng);
            assert_same(&d.astype(to).unwrap(), &h.astype(to).unwrap(), true, &what(&format!("astype {to}")));
            assert_same(&dt.astype(to).unwrap(), &ht.astype(to).unwrap(), true, &what(&format!("view astype {to}")));

            // all_equal against values of every type, NaN modes.
            for _ in 0..3 {
                let ot = ElementType::ALL[below(&mut rng, ElementType::ALL.len())];
                let other = if rng.random() {
                    h.get(&[]).unwrap().reshape(&[-1]).unwrap().get(&[AxisSel::Slice(Slice::new(Some(0), Some(1), 1))]).unwrap()
                        .as_scalar().map(|s| s.cast(ot)).unwrap_or(Scalar::Bool(false))
                } else {
                    random_scalar(&mut rng, ot)
                };
                let en = rng.random();
                assert_eq!(d.all_equal(Some(other), en).unwrap(), h.all_equal(Some(other), en).unwrap(), "{} {other:?} {en}", what("all_equal"));
                assert_eq!(dt.all_equal(Some(other), en).unwrap(), ht.all_equal(Some(other), en).unwrap(), "{} view {other:?}", what("all_equal"));
            }

            // Writes: scalars and arrays from both memories, through selections.
            let (mut dw, mut hw) = (d.clone(), h.clone());
            for _ in 0..3 {
                let sel = random_selection(&mut rng, &shape);
                let target = h.get(&sel).unwrap();
                if rng.random() {
                    let vt = ElementType::ALL[below(&mut rng, 14)];
                    let v = random_scalar(&mut rng, vt);
                    dw.set_scalar(&sel, v).unwrap();
                    hw.set_scalar(&sel, v).unwrap();
                } else {
                    let vt = random_dtype(&mut rng);
                    let vshape: Vec<usize> = target.shape().iter().map(|&n| if rng.random_ratio(1, 3) { 1 } else { n }).collect();
                    let vh = random_host(&mut rng, &vshape, vt, Order::C);
                    let vd = vh.to_prototype(&DEV).unwrap();
                    let v = if rng.random() { &vh } else { &vd }; // host values go to the device
                    dw.set(&sel, v).unwrap();
                    hw.set(&sel, &vh).unwrap();
                }
                assert_same(&dw, &hw, true, &what(&format!("set {sel:?}")));
            }
            // Copy-on-write: the originals did not change.
            assert_same(&d, &h, false, &what("originals after writes"));
            let v = random_scalar(&mut rng, dtype.element());
            dw.set_scalar(&[], v).unwrap();
            hw.set_scalar(&[], v).unwrap();
            assert_same(&dw, &hw, false, &what("fill"));
        }
    }

    fn zarr_ndbuffer_create_empty_and_edge_cases_on_device() {
        let mut rng = rng("zarr_ndbuffer_create_empty_and_edge_cases_on_device");
        for _ in 0..50 {
            let dtype = random_dtype(&mut rng);
            let shape = random_shape(&mut rng);
            let order = if rng.random() { Order::C } else { Order::F };
            let v = random_scalar(&mut rng, dtype.element());
            let d = NDBuffer::create(&DEV, &shape, dtype, order, Some(v)).unwrap();
            let h = NDBuffer::create(&HOST, &shape, dtype, order, Some(v)).unwrap();
            assert_same(&d, &h, false, "create");
            assert_eq!(d.is_contiguous(Order::F), h.is_contiguous(Order::F));
            let z = NDBuffer::create(&DEV, &shape, dtype, order, None).unwrap();
            assert_same(&z, &NDBuffer::create(&HOST, &shape, dtype, order, None).unwrap(), false, "create zeros");
            let e = NDBuffer::empty(&DEV, &shape, dtype, order).unwrap();
            assert!(e.prototype().is_device());
            match order {
                Order::C => assert!(e.is_contiguous(Order::C)),
                Order::F => assert!(e.is_contiguous(Order::F)),
            }
        }
        // zarr-python's cases, on the device.
        let neg = NDBuffer::create(&DEV, &[5], Dtype::new(ElementType::Float32, Endianness::Big), Order::C, Some(Scalar::from(-0.0f32))).unwrap();
        assert!(!neg.all_equal(Some(Scalar::from(0.0f64)), true).unwrap());
        assert!(neg.all_equal(Some(Scalar::from(-0.0f64)), true).unwrap());
        assert!(neg.all_equal(Some(Scalar::from(0i32)), true).unwrap());
        assert!(!neg.all_equal(None, true).unwrap());
        let nan = NDBuffer::create(&DEV, &[2, 2], Dtype::COMPLEX128, Order::F, Some(Scalar::from(f64::NAN))).unwrap();
        assert!(nan.all_equal(Some(Scalar::from(f32::NAN)), true).unwrap());
        assert!(!nan.all_equal(Some(Scalar::from(f32::NAN)), false).unwrap());
        let s = NDBuffer::create(&DEV, &[], Dtype::INT64, Order::C, Some(Scalar::from(7i64))).unwrap();
        assert_eq!(s.as_scalar().unwrap(), Scalar::Int64(7));
        let one = NDBuffer::create(&DEV, &[1], Dtype::new(ElementType::UInt16, Endianness::Big), Order::C, Some(Scalar::from(513u16))).unwrap();
        assert_eq!(one.as_scalar().unwrap(), Scalar::UInt16(513));
        let e = NDBuffer::create(&DEV, &[1, 2], Dtype::INT64, Order::C, None).unwrap().as_scalar().unwrap_err();
        assert!(e.to_string().contains("Buffer does not contain a single scalar value"));
        // Big-endian round trip through the device.
        let a = ndarray::Array2::from_shape_fn((3, 5), |(i, j)| i as f64 * 1.5 - j as f64).into_dyn();
        let d = NDBuffer::from_ndarray(a.clone()).to_prototype(&DEV).unwrap().astype(Dtype::new(ElementType::Float64, Endianness::Big)).unwrap();
        assert_eq!(d.to_ndarray::<f64>().unwrap(), a);
        assert_eq!(&stored_c_bytes(&d)[..8], &0.0f64.to_be_bytes());
    }

    fn zarr_ndbuffer_device_copy_on_write_and_in_place() {
        let c = ctx();
        let mut own = NDBuffer::create(&DEV, &[64, 64], Dtype::FLOAT32, Order::C, None).unwrap();
        let addr = own.as_ndarray_like().memory.address();
        own.set_scalar(&[], Scalar::from(1.0f32)).unwrap();
        own.set_scalar(&[Slice::new(None, None, 2).into(), (1..63).into()], Scalar::from(2.0f32)).unwrap();
        assert_eq!(own.as_ndarray_like().memory.address(), addr, "an exclusive buffer is written in place");
        // A buffer over someone's DeviceBuffer copies on the first write.
        let d = DeviceBuffer::from_slice(&c, &[0u32; 16]).unwrap();
        let mut nd = NDBuffer::from_memory(d.clone(), &[16], Dtype::UINT32, Order::C).unwrap();
        nd.set_scalar(&[], Scalar::from(5u32)).unwrap();
        assert_ne!(nd.as_ndarray_like().memory.address(), d.address());
        assert_eq!(d.to_vec::<u32>().unwrap(), vec![0u32; 16]);
        assert!(nd.all_equal(Some(Scalar::from(5u32)), true).unwrap());
        // Read-only device memory is never written.
        let ro = DeviceBuffer::from_slice(&c, &[1u8; 4]).unwrap().read_only();
        let mut nd = NDBuffer::from_memory(ro.clone(), &[4], Dtype::UINT8, Order::C).unwrap();
        nd.set_scalar(&[0.into()], Scalar::from(9u8)).unwrap();
        assert_eq!(ro.to_vec::<u8>().unwrap(), vec![1u8; 4]);
    }

    fn zarr_all_equal_on_large_arrays() {
        // Large enough for a multi-block reduction; one differing element anywhere.
        let mut rng = rng("zarr_all_equal_on_large_arrays");
        let n = 8 << 20;
        let mut d = NDBuffer::create(&DEV, &[n], Dtype::FLOAT32, Order::C, Some(Scalar::from(1.5f32))).unwrap();
        assert!(d.all_equal(Some(Scalar::from(1.5f32)), false).unwrap());
        let k = below(&mut rng, n);
        d.set_scalar(&[k.into()], Scalar::from(1.25f32)).unwrap();
        assert!(!d.all_equal(Some(Scalar::from(1.5f32)), false).unwrap(), "element {k}");
        let mut z = NDBuffer::create(&DEV, &[n / 4, 4], Dtype::FLOAT64, Order::F, Some(Scalar::from(0.0f64))).unwrap();
        assert!(z.all_equal(Some(Scalar::from(0.0f64)), true).unwrap());
        z.set_scalar(&[below(&mut rng, n / 4).into(), below(&mut rng, 4).into()], Scalar::from(-0.0f64)).unwrap();
        assert!(!z.all_equal(Some(Scalar::from(0.0f64)), true).unwrap());
        assert!(z.all_equal(Some(Scalar::from(0i64)), true).unwrap());
    }

    fn zarr_device_memory_store() {
        let c = ctx();
        let store = DeviceMemoryStore::new(&c);
        let mut rng = rng("zarr_device_memory_store");
        let data = random_bytes(&mut rng, 1000);
        store.set("a/c/0", &ByteBuffer::from(data.clone())).unwrap();
        let d = DeviceBuffer::from_slice(&c, &data).unwrap();
        store.set("a/c/1", &ByteBuffer::from(d.clone())).unwrap();
        // The store copied the caller's device memory: changing it afterwards is invisible.
        d.copy_from_host(0, &[0u8; 10]).unwrap();
        for key in ["a/c/0", "a/c/1"] {
            let on_dev = store.get(key, &DEV, None).unwrap().unwrap();
            assert!(on_dev.prototype().is_device());
            assert_eq!(on_dev.to_host().unwrap().to_vec(), data);
            // get for the store's own device is zero-copy: two gets share the address.
            let again = store.get(key, &DEV, None).unwrap().unwrap();
            assert_eq!(again.as_memory().address(), on_dev.as_memory().address());
            let on_host = store.get(key, &HOST, None).unwrap().unwrap();
            assert!(on_host.prototype().is_host());
            assert_eq!(on_host.to_host().unwrap().to_vec(), data);
        }
        let part = store.get("a/c/0", &DEV, Some(ByteRequest::Range { start: 10, end: 20 })).unwrap().unwrap();
        assert_eq!(part.to_host().unwrap().to_vec(), &data[10..20]);
        let whole = store.get("a/c/0", &DEV, None).unwrap().unwrap();
        assert_eq!(part.as_memory().address(), whole.as_memory().address() + 10);
        assert_eq!(store.get("a/c/0", &HOST, Some(ByteRequest::Suffix(5))).unwrap().unwrap().to_host().unwrap().to_vec(), &data[995..]);
        assert!(store.get("a/c/0", &DEV, Some(ByteRequest::Offset(1001))).is_err());
        assert!(store.get("missing", &DEV, None).unwrap().is_none());
        // Writing to what get returned does not change the store (copy-on-write).
        let mut got = store.get("a/c/0", &DEV, None).unwrap().unwrap();
        got.set(0..3, &ByteBuffer::from(vec![1u8, 2, 3])).unwrap();
        assert_eq!(store.get("a/c/0", &HOST, None).unwrap().unwrap().to_host().unwrap().to_vec(), data);
        assert_eq!(store.list_dir("a").unwrap(), ["c"]);
        assert_eq!(store.list_prefix("a/c/").unwrap().len(), 2);
        store.delete("a/c/1").unwrap();
        assert!(!store.exists("a/c/1").unwrap());
        // The host store returns device memory when asked, one upload.
        let host_store = MemoryStore::new();
        host_store.set("k", &store.get("a/c/0", &DEV, None).unwrap().unwrap()).unwrap();
        let back = host_store.get("k", &DEV, None).unwrap().unwrap();
        assert!(back.prototype().is_device());
        assert_eq!(back.to_host().unwrap().to_vec(), data);
        // A device store's values live on the device (zarr's GpuMemoryStore.from_dict).
        let s2 = DeviceMemoryStore::new(&c);
        s2.set("x", &ByteBuffer::from(vec![7u8; 3])).unwrap();
        assert!(s2.get("x", &DEV, None).unwrap().unwrap().prototype().is_device());
        assert!(s2.with_read_only(true).set("y", &ByteBuffer::from(vec![1u8])).is_err());
    }

    fn zarr_default_prototype_switch_reaches_the_device() {
        let prev = devbuf::zarr::set_default_buffer_prototype(DEV); // enable_gpu
        let p = devbuf::zarr::default_buffer_prototype();
        let nd = NDBuffer::create(&p, &[4], Dtype::INT16, Order::C, Some(Scalar::from(3i16)));
        devbuf::zarr::set_default_buffer_prototype(prev);
        let nd = nd.unwrap();
        assert!(nd.prototype().is_device());
        assert!(nd.all_equal(Some(Scalar::from(3i16)), true).unwrap());
    }
}
