//! Host behaviour of zarr::ByteBuffer, the prototypes and MemoryStore (zarr-python's own
//! cases from tests/test_buffer.py and the store test suite).

use bytes::Bytes;
use devbuf::Error;
use devbuf::memory::Memory;
use devbuf::zarr::{
    AxisSel, BufferPrototype, ByteBuffer, ByteRequest, MemoryStore, Slice, Store,
    default_buffer_prototype, set_default_buffer_prototype,
};

#[test]
fn zero_copy_constructors_share_memory() {
    let v = vec![1u8, 2, 3, 4];
    let ptr = v.as_ptr() as u64;
    let b = ByteBuffer::from(v);
    assert_eq!(b.as_memory().address(), ptr);

    let bytes = Bytes::from(vec![9u8; 16]);
    let b = ByteBuffer::from(bytes.clone());
    assert_eq!(b.as_memory().address(), bytes.as_ptr() as u64);
    assert_eq!(b.to_host().unwrap().as_ptr(), bytes.as_ptr()); // as_numpy_array: no copy

    let arrow = arrow_buffer::Buffer::from_vec(vec![5u32, 6, 7]);
    let b = ByteBuffer::from(arrow.clone());
    assert_eq!(b.as_memory().address(), arrow.as_ptr() as u64);
    assert_eq!(b.len(), 12);

    // from_buffer to the prototype it already has: zero-copy.
    let same = b.to_prototype(&BufferPrototype::Host).unwrap();
    assert_eq!(same.as_memory().address(), b.as_memory().address());
    // Slices are views.
    let s = b.get(4..8).unwrap();
    assert_eq!(s.as_memory().address(), b.as_memory().address() + 4);
    // to_bytes (to_host().to_vec()) always copies.
    let copied = b.to_host().unwrap().to_vec();
    assert_ne!(copied.as_ptr() as u64, b.as_memory().address());
}

#[test]
fn slicing_rules() {
    let b = ByteBuffer::from(&b"0123456789"[..]);
    assert_eq!(b.get(2..5).unwrap().to_host().unwrap().to_vec(), b"234");
    assert_eq!(b.get(..).unwrap().len(), 10);
    assert_eq!(b.get(7..).unwrap().to_host().unwrap().to_vec(), b"789");
    assert_eq!(
        b.get(Slice::new(Some(-3), Some(100), 1))
            .unwrap()
            .to_host()
            .unwrap()
            .to_vec(),
        b"789"
    );
    assert_eq!(
        b.get(Slice::new(Some(1), Some(3), 1))
            .unwrap()
            .to_host()
            .unwrap()
            .to_vec(),
        b"12"
    );
    let e = b
        .get(AxisSel::Range {
            start: 0,
            end: 4,
            step: 2,
        })
        .unwrap_err()
        .to_string();
    assert!(e.contains("slice must be contiguous"), "{e}");
    assert!(b.get(Slice::new(None, None, 3)).is_err());
    let e = b.get(3).unwrap_err().to_string();
    assert!(e.contains("contiguous slices"), "{e}");
    let e = b.get(5..11).unwrap_err().to_string();
    assert!(e.contains("out of bounds") && e.contains("size 10"), "{e}");
}

#[test]
fn set_is_copy_on_write() {
    let original = Bytes::from(b"aaaaaa".to_vec());
    let mut b = ByteBuffer::from(original.clone());
    let view = b.get(0..3).unwrap();
    b.set(1..3, &ByteBuffer::from(&b"XY"[..])).unwrap();
    assert_eq!(b.to_host().unwrap().to_vec(), b"aXYaaa");
    assert_eq!(&original[..], b"aaaaaa"); // the caller's bytes are untouched
    assert_eq!(view.to_host().unwrap().to_vec(), b"aaa"); // and so is an earlier view
    // A buffer nobody else sees is written in place.
    let mut own = ByteBuffer::from(vec![0u8; 4]);
    let addr = own.as_memory().address();
    own.set(
        Slice::new(Some(-2), Some(4), 1),
        &ByteBuffer::from(vec![7u8, 8]),
    )
    .unwrap();
    assert_eq!(own.as_memory().address(), addr);
    assert_eq!(own.to_host().unwrap().to_vec(), [0, 0, 7, 8]);
    let e = own
        .set(0..2, &ByteBuffer::from(vec![1u8]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("could not broadcast"), "{e}");
}

#[test]
fn combine_and_equality() {
    let a = ByteBuffer::from(&b"ab"[..]);
    let b = ByteBuffer::from(&b""[..]);
    let c = ByteBuffer::from(&b"cde"[..]);
    let all = ByteBuffer::concat(&a.prototype(), [&a, &b, &c]).unwrap(); // combine
    assert_eq!(all.to_host().unwrap().to_vec(), b"abcde");
    assert_eq!(all, ByteBuffer::from(b"abcde".to_vec()));
    assert_ne!(all, a);
    let cat = ByteBuffer::concat(&BufferPrototype::Host, [&c, &a]).unwrap();
    assert_eq!(cat.to_host().unwrap().to_vec(), b"cdeab");
    let z = ByteBuffer::default()
        .to_prototype(&BufferPrototype::Host)
        .unwrap();
    assert!(z.is_empty() && z.prototype().is_host());
    assert_eq!(ByteBuffer::default(), z);
}

#[test]
fn prototypes_and_the_gpu_switch() {
    // The default is process-wide; this is the only test that changes it.
    let before = default_buffer_prototype();
    let prev = set_default_buffer_prototype(BufferPrototype::Device(0)); // enable_gpu
    assert_eq!(prev, before);
    assert_eq!(default_buffer_prototype(), BufferPrototype::Device(0));
    assert_eq!(
        set_default_buffer_prototype(BufferPrototype::Host), // disable_gpu
        BufferPrototype::Device(0)
    );
    assert_eq!(default_buffer_prototype(), BufferPrototype::Host);
    set_default_buffer_prototype(before);
    assert_eq!(BufferPrototype::Device(1).to_string(), "cuda:1");
    if !devbuf::cuda::is_available() {
        // Without CUDA a device prototype says so instead of failing later.
        let e = ByteBuffer::from(&b"x"[..])
            .to_prototype(&BufferPrototype::Device(0))
            .unwrap_err();
        assert_eq!(e.kind(), devbuf::ErrorKind::CudaUnavailable, "{e}");
        let e = devbuf::zarr::NDBuffer::create(
            &BufferPrototype::Device(0),
            &[2],
            devbuf::zarr::Dtype::INT8,
            Default::default(),
            None,
        )
        .unwrap_err();
        assert!(matches!(e, Error::CudaUnavailable { .. }), "{e}");
    }
}

fn b(s: &[u8]) -> ByteBuffer {
    ByteBuffer::from(s.to_vec())
}

#[test]
fn memory_store_get_set_ranges() {
    let store = MemoryStore::new();
    let p = BufferPrototype::Host;
    let data = b(b"\x01\x02\x03\x04");
    store.set("c/0", &data).unwrap();
    assert!(store.exists("c/0").unwrap());
    assert!(!store.exists("c/1").unwrap());
    assert_eq!(store.get("c/0", &p, None).unwrap().unwrap(), data);
    let get = |r| {
        store
            .get("c/0", &p, Some(r))
            .map(|o| o.map(|b| b.to_host().unwrap().to_vec()))
    };
    assert_eq!(
        get(ByteRequest::Range { start: 1, end: 4 })
            .unwrap()
            .unwrap(),
        [2, 3, 4]
    );
    assert_eq!(get(ByteRequest::Offset(1)).unwrap().unwrap(), [2, 3, 4]);
    assert_eq!(get(ByteRequest::Offset(4)).unwrap().unwrap(), [] as [u8; 0]);
    assert_eq!(get(ByteRequest::Suffix(1)).unwrap().unwrap(), [4]);
    assert_eq!(get(ByteRequest::Suffix(10)).unwrap().unwrap(), [1, 2, 3, 4]);
    // Bad byte ranges are errors naming the size; missing keys are None.
    let e = get(ByteRequest::Range { start: 10, end: 20 })
        .unwrap_err()
        .to_string();
    assert!(e.contains("exceeds the size 4"), "{e}");
    assert!(get(ByteRequest::Range { start: 3, end: 1 }).is_err());
    assert!(get(ByteRequest::Offset(5)).is_err());
    assert!(
        store
            .get("nope", &p, Some(ByteRequest::Offset(99)))
            .unwrap()
            .is_none()
    );
    // The stored value is a zero-copy view for the host prototype, and writing to
    // what get returned does not change the store.
    let mut got = store.get("c/0", &p, None).unwrap().unwrap();
    got.set(0..1, &b(b"\xff")).unwrap();
    assert_eq!(store.get("c/0", &p, None).unwrap().unwrap(), data);
    assert_eq!(store.getsize("c/0").unwrap(), Some(4));
    assert_eq!(store.getsize("x").unwrap(), None);
    store.delete("c/0").unwrap();
    store.delete("c/0").unwrap(); // deleting a missing key is fine
    assert!(store.get("c/0", &p, None).unwrap().is_none());
}

#[test]
fn memory_store_listing() {
    let store = MemoryStore::new();
    assert!(store.list().unwrap().is_empty());
    assert!(store.list_dir("").unwrap().is_empty());
    assert!(store.is_empty("").unwrap());
    for k in [
        "zarr.json",
        "a/zarr.json",
        "a/b/zarr.json",
        "a/b/c/zarr.json",
        "foo-bar/zarr.json",
    ] {
        store.set(k, &b(b"")).unwrap();
    }
    assert_eq!(store.list().unwrap().len(), 5);
    assert_eq!(
        store.list_prefix("a/").unwrap(),
        ["a/b/c/zarr.json", "a/b/zarr.json", "a/zarr.json"]
    );
    assert_eq!(store.list_prefix("a/b/").unwrap().len(), 2);
    assert_eq!(store.list_prefix("").unwrap().len(), 5);
    assert_eq!(store.list_dir("").unwrap(), ["a", "foo-bar", "zarr.json"]);
    assert_eq!(store.list_dir("a").unwrap(), ["b", "zarr.json"]);
    assert_eq!(store.list_dir("a/").unwrap(), ["b", "zarr.json"]);
    assert_eq!(store.list_dir("a/b/c").unwrap(), ["zarr.json"]);
    assert!(store.list_dir("zz").unwrap().is_empty());
    assert!(!store.is_empty("a").unwrap());
    assert!(store.is_empty("fo").unwrap());
    store.delete_dir("a").unwrap();
    assert_eq!(store.list().unwrap(), ["foo-bar/zarr.json", "zarr.json"]);
    store.set_if_not_exists("zarr.json", &b(b"new")).unwrap();
    assert!(
        store
            .get("zarr.json", &BufferPrototype::Host, None)
            .unwrap()
            .unwrap()
            .is_empty()
    );
    store.set_if_not_exists("k2", &b(b"new")).unwrap();
    assert_eq!(store.getsize("k2").unwrap(), Some(3));
    store.clear().unwrap();
    assert!(store.is_empty("").unwrap());
}

#[test]
fn read_only_store_refuses_writes_and_shares_values() {
    let store = MemoryStore::new();
    store.set("k", &b(b"v")).unwrap();
    let ro = store.with_read_only(true);
    assert!(ro.read_only() && !store.read_only());
    assert!(ro.exists("k").unwrap());
    assert!(matches!(
        ro.set("k", &b(b"w")).unwrap_err(),
        Error::ReadOnly(_)
    ));
    assert!(matches!(ro.delete("k").unwrap_err(), Error::ReadOnly(_)));
    assert!(ro.clear().is_err());
    store.set("k2", &b(b"w")).unwrap();
    assert!(ro.exists("k2").unwrap()); // same map
}

#[test]
fn store_is_thread_safe() {
    let store = MemoryStore::new();
    std::thread::scope(|s| {
        for t in 0..8 {
            let store = &store;
            s.spawn(move || {
                for i in 0..100 {
                    let key = format!("t{t}/c/{i}");
                    store
                        .set(&key, &ByteBuffer::from(vec![t as u8; i]))
                        .unwrap();
                    let got = store
                        .get(&key, &BufferPrototype::Host, None)
                        .unwrap()
                        .unwrap();
                    assert_eq!(got.len(), i);
                }
            });
        }
    });
    assert_eq!(store.list().unwrap().len(), 800);
    assert_eq!(store.list_dir("").unwrap().len(), 8);
    let m: &dyn Store = &store;
    assert!(m.exists("t3/c/99").unwrap());
    let _ = Memory::from(vec![0u8]);
}
