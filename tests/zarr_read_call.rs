//! The one read call and the one open: `ZarrArray::read(selection)` / `read_chunks` run
//! `to` new memory, `into` the caller's memory (boxes and stepped selections), with a
//! report or without, blocking and async; `ZarrArray::open` / `create` on every kind of
//! `Location`, `zarrs` storage the caller built included. Every result is compared with
//! another path's bytes.
#![cfg(feature = "zarr")]

use std::sync::Arc;

use devbuf::zarr::{
    ArraySpec, AxisSel, BufferPrototype, Dtype, Location, MemoryStore, NDBuffer, ReadReport, Slice,
    Store, ZarrArray,
};

const HOST: BufferPrototype = BufferPrototype::Host;

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/zarr")
        .join(name)
}

fn bytes_of(nd: &NDBuffer) -> Vec<u8> {
    nd.to_buffer()
        .unwrap()
        .into_memory()
        .to_host()
        .unwrap()
        .to_vec()
}

#[test]
fn selections_of_every_kind_agree() {
    let a = ZarrArray::open(fixture("v3_float64.zarr")).unwrap(); // 10 x 7
    let all = a.read(..).to(&HOST).unwrap();
    assert_eq!(all.shape(), &[10, 7]);
    let v = all.to_ndarray::<f64>().unwrap();
    // A box, given as an array, a slice, a Vec and a reference to a Vec.
    let want: Vec<f64> = (2..5)
        .flat_map(|i| (1..3).map(move |j| (i, j)))
        .map(|(i, j)| v[[i, j]])
        .collect();
    let ranges = vec![2..5u64, 1..3];
    for nd in [
        a.read([2..5, 1..3]).to(&HOST).unwrap(),
        a.read(&ranges[..]).to(&HOST).unwrap(),
        a.read(&ranges).to(&HOST).unwrap(),
        a.read(ranges.clone()).to(&HOST).unwrap(),
        a.read([AxisSel::from(2..5), AxisSel::from(1..3)])
            .to(&HOST)
            .unwrap(),
    ] {
        assert_eq!(nd.shape(), &[3, 2]);
        assert_eq!(
            nd.to_ndarray::<f64>()
                .unwrap()
                .iter()
                .copied()
                .collect::<Vec<_>>(),
            want
        );
    }
    // A stepped selection with a dropped axis.
    let col = a
        .read([AxisSel::from(Slice::new(None, None, 3)), AxisSel::Index(-1)])
        .to(&HOST)
        .unwrap();
    let got: Vec<f64> = col.to_ndarray::<f64>().unwrap().iter().copied().collect();
    assert_eq!(got, vec![v[[0, 6]], v[[3, 6]], v[[6, 6]], v[[9, 6]]]);
    // A box past the array is an error naming the axis.
    let e = a.read([0..11, 0..7]).to(&HOST).unwrap_err().to_string();
    assert!(e.contains("axis 0") && e.contains("size 10"), "{e}");
}

#[test]
fn reads_into_the_callers_memory_take_boxes_and_stepped_selections() {
    let a = ZarrArray::open(fixture("v2_int16_zstd.zarr")).unwrap(); // 6 x 5 x 4 int16
    // A box: decoded straight into `out`; the report says so.
    let mut out = vec![0xA5u8; 4 * 5 * 2 * 2];
    let mut r = ReadReport::default();
    a.read([1..5, 0..5, 1..3])
        .report(&mut r)
        .into(&mut out)
        .unwrap();
    assert_eq!(r.target, "host (the caller's memory)");
    assert_eq!(
        out,
        bytes_of(&a.read([1..5, 0..5, 1..3]).to(&HOST).unwrap())
    );
    // A stepped selection: every byte of `out` is the strided view's.
    let sel = [
        AxisSel::Range {
            start: 0,
            end: 6,
            step: 2,
        },
        AxisSel::Full,
        AxisSel::Index(3),
    ];
    let want = bytes_of(
        &a.read(sel)
            .to(&HOST)
            .unwrap()
            .copy_order(devbuf::zarr::Order::C)
            .unwrap(),
    );
    assert_eq!(want.len(), 3 * 5 * 2);
    let mut out = vec![0x5Au8; want.len()];
    let mut r = ReadReport::default();
    a.read(sel).report(&mut r).into(&mut out).unwrap();
    assert_eq!(out, want);
    assert!(r.cpu_chunks > 0, "{r}");
    // The wrong size is an error naming both sizes.
    let mut short = vec![0u8; want.len() - 2];
    let e = a.read(sel).into(&mut short).unwrap_err().to_string();
    assert!(
        e.contains(&format!("holds {} bytes", want.len() - 2))
            && e.contains(&format!("exactly {}", want.len())),
        "{e}"
    );
    // The size is checked before anything is read: the report stays empty.
    let mut unread = ReadReport::default();
    assert!(a.read(sel).report(&mut unread).into(&mut short).is_err());
    assert_eq!((unread.cpu_chunks, unread.gpu_chunks), (0, 0), "{unread}");
    // Integer indices only: the box's bytes, read straight into `out`.
    let sel = [AxisSel::Index(2), AxisSel::Full, AxisSel::Index(-1)];
    let want = bytes_of(&a.read(sel).to(&HOST).unwrap());
    let mut out = vec![0xA5u8; want.len()];
    a.read(sel).into(&mut out).unwrap();
    assert_eq!(out, want);
    let mut short = vec![0u8; want.len() + 2];
    assert!(a.read(sel).into(&mut short).is_err());
}

#[test]
fn reports_are_filled_only_by_a_read_that_ran() {
    let a = ZarrArray::open(fixture("v3_int16.zarr")).unwrap(); // chunk (1, 1) missing
    let mut r = ReadReport::default();
    let chunks = a
        .read_chunks(&[[0u64, 0], [1, 1]])
        .report(&mut r)
        .to(&HOST)
        .unwrap();
    assert_eq!((chunks.len(), r.missing_chunks), (2, 1));
    let edge: Vec<usize> = a
        .chunk_ranges(&[1, 1])
        .unwrap()
        .iter()
        .map(|r| (r.end - r.start) as usize)
        .collect();
    assert_eq!(chunks[1].shape(), &edge[..]);
    // A failed read leaves the report as it was.
    let mut untouched = ReadReport::default();
    assert!(
        a.read_chunks(&[[9u64, 9]])
            .report(&mut untouched)
            .to(&HOST)
            .is_err()
    );
    assert_eq!(untouched, ReadReport::default());
}

#[test]
fn a_spread_read_takes_a_box_only() {
    let a = ZarrArray::open(fixture("v3_float64.zarr")).unwrap();
    let e = a
        .read([AxisSel::from(Slice::new(None, None, 2))])
        .spread(&[], devbuf::zarr::Spread::Replicate)
        .unwrap_err()
        .to_string();
    assert!(e.contains("takes a box"), "{e}");
}

#[tokio::test(flavor = "current_thread")]
async fn async_reads_equal_blocking_ones() {
    let a = ZarrArray::open_async(fixture("v3_float32_sharded.zarr"))
        .await
        .unwrap();
    let mut r = ReadReport::default();
    let whole = a.read(..).report(&mut r).to_async(&HOST).await.unwrap();
    assert_eq!(bytes_of(&whole), bytes_of(&a.read(..).to(&HOST).unwrap()));
    assert_eq!(r.decoder, "cpu");
    let chunks = a.read_chunks(&[[0u64, 0]]).to_async(&HOST).await.unwrap();
    assert_eq!(
        bytes_of(&chunks[0]),
        bytes_of(&a.read_chunks(&[[0u64, 0]]).to(&HOST).unwrap()[0])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_reads_into_owned_memory_hand_it_back_filled() {
    let a = ZarrArray::open_async(fixture("v2_int16_zstd.zarr"))
        .await
        .unwrap(); // 6 x 5 x 4
    let mut frame = vec![0xA5u8; 5 * 4 * 2];
    for i in 0..6u64 {
        let mut r = ReadReport::default();
        frame = a
            .read([i..i + 1, 0..5, 0..4])
            .report(&mut r)
            .into_async(frame)
            .await
            .unwrap();
        let want = bytes_of(&a.read([i..i + 1, 0..5, 0..4]).to(&HOST).unwrap());
        assert_eq!(frame, want, "row {i}");
        assert_eq!(r.target, "host (the caller's memory)");
    }
    // The wrong size: an error, and the memory is gone with the read.
    let e = a.read(..).into_async(vec![0u8; 3]).await.unwrap_err();
    assert!(e.to_string().contains("holds 3 bytes"), "{e}");
}

#[test]
fn locations_of_every_kind_open_the_same_array() {
    let path = fixture("v3_float32_sharded.zarr");
    let want = bytes_of(&ZarrArray::open(&path).unwrap().read(..).to(&HOST).unwrap());
    // A string path, a Path and a PathBuf.
    for a in [
        ZarrArray::open(path.to_str().unwrap()).unwrap(),
        ZarrArray::open(path.as_path()).unwrap(),
        ZarrArray::open(Location::Path(path.clone())).unwrap(),
    ] {
        assert_eq!(bytes_of(&a.read(..).to(&HOST).unwrap()), want);
    }
    // zarrs storage the caller built: a FilesystemStore of the parent directory.
    let parent = path.parent().unwrap();
    let fs = Arc::new(devbuf::zarr::zarrs::filesystem::FilesystemStore::new(parent).unwrap());
    let a = ZarrArray::open(Location::Zarrs(fs, "/v3_float32_sharded.zarr".into())).unwrap();
    assert_eq!(bytes_of(&a.read(..).to(&HOST).unwrap()), want);
    assert!(a.location().starts_with("zarrs:"), "{}", a.location());
    // A missing array in zarrs storage is NotFound, not a panic.
    let mem = Arc::new(devbuf::zarr::zarrs::storage::store::MemoryStore::new());
    let e = ZarrArray::open(Location::Zarrs(mem.clone(), "/nothing".into())).unwrap_err();
    assert_eq!(e.kind(), devbuf::ErrorKind::NotFound, "{e}");
    // Created through zarrs storage, written, read back; creating twice is refused.
    let spec = ArraySpec::new(&[6], &[4], Dtype::INT32);
    let b = ZarrArray::create(Location::Zarrs(mem.clone(), "/g/b".into()), &spec).unwrap();
    let v = NDBuffer::from_ndarray(ndarray::arr1(&[1i32, 2, 3, 4, 5, 6]));
    b.write_subset(&[0], &v).unwrap();
    let back = ZarrArray::open(Location::Zarrs(mem.clone(), "/g/b".into())).unwrap();
    let got = back
        .read(..)
        .to(&HOST)
        .unwrap()
        .to_ndarray::<i32>()
        .unwrap();
    assert_eq!(got.as_slice().unwrap(), &[1, 2, 3, 4, 5, 6]);
    let e = ZarrArray::create(Location::Zarrs(mem.clone(), "/g/b".into()), &spec).unwrap_err();
    assert!(e.to_string().contains("already exists"), "{e}");
    // zarrs storage that only reads: the same values; writes and creation are ReadOnly.
    let ro = ZarrArray::open(Location::ZarrsReadOnly(mem.clone(), "/g/b".into())).unwrap();
    let got = ro.read(..).to(&HOST).unwrap().to_ndarray::<i32>().unwrap();
    assert_eq!(got.as_slice().unwrap(), &[1, 2, 3, 4, 5, 6]);
    let e = ro.write_subset(&[0], &v).unwrap_err();
    assert_eq!(e.kind(), devbuf::ErrorKind::ReadOnly, "{e}");
    let e = ZarrArray::create(Location::ZarrsReadOnly(mem, "/g/c".into()), &spec).unwrap_err();
    assert_eq!(e.kind(), devbuf::ErrorKind::ReadOnly, "{e}");
    // A devbuf store with a path.
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    ZarrArray::create((store.clone(), "x/y"), &spec).unwrap();
    assert_eq!(ZarrArray::open((store, "x/y")).unwrap().shape(), &[6]);
    // A directory name with a URL's look is a path only through Location::Path.
    let e = ZarrArray::open(Location::Path("no-such://dir".into())).unwrap_err();
    assert_eq!(e.kind(), devbuf::ErrorKind::NotFound, "{e}");
}
