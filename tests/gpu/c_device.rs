//! The Arrow C Device Data Interface on the GPU: CUDA export → import of every type
//! zero-copy (device addresses compared) with the host array as the oracle, the
//! `sync_event` contract (device-side waits proven with a gated stream), release
//! exactly once (counted), bad device ids and pointers, CUDA_HOST exports of
//! page-locked arrays, device streams of batches.
//!
//! The release counters are process-wide: every test here takes one lock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::corpus::{counts, serial};
use arrow_array::{Array, ArrayRef, Int32Array, RecordBatch, StringArray, StructArray};
use arrow_schema::{DataType, Field, Schema};
use devbuf::__test::{StreamGate, copy_on_stream};
use devbuf::Error;
use devbuf::arrow::c_device::*;
use devbuf::arrow::{AnyArray, Batch, DeviceArray, DeviceRecordBatch};
use devbuf::cuda::{self, Context, DeviceBuffer, Stream};

use rand::Rng;

use crate::common::*;
use crate::corpus;

/// The non-null buffer addresses of a C structure tree (buffers, children, dictionary).
pub(crate) fn c_addrs(a: &ArrowArray, out: &mut Vec<u64>) {
    for i in 0..a.n_buffers() as usize {
        let p = a.buffer(i).expect("buffer") as u64;
        if p != 0 {
            out.push(p);
        }
    }
    for i in 0..a.n_children() as usize {
        c_addrs(a.child(i).expect("child"), out);
    }
    if let Some(d) = a.dictionary() {
        c_addrs(d, out);
    }
}

/// The device addresses of an array tree, in C buffer order. `validity_if_nulls`: list
/// the validity bitmap only when there are nulls (the importer drops a bitmap that a
/// producer sends with `null_count` 0).
fn dev_addrs(d: &DeviceArray, validity_if_nulls: bool, out: &mut Vec<u64>) {
    if let Some(v) = d.validity()
        && (!validity_if_nulls || d.null_count() > 0)
        && v.address() != 0
    {
        out.push(v.address());
    }
    out.extend(d.buffers().iter().map(|b| b.address()).filter(|&a| a != 0));
    for c in d.children() {
        dev_addrs(c, validity_if_nulls, out);
    }
    if let Some(x) = d.dictionary() {
        dev_addrs(x, validity_if_nulls, out);
    }
}

pub(crate) fn addrs_of_device(d: &DeviceArray, validity_if_nulls: bool) -> Vec<u64> {
    let mut v = Vec::new();
    dev_addrs(d, validity_if_nulls, &mut v);
    v
}

fn addrs_of_c(a: &ArrowArray) -> Vec<u64> {
    let mut v = Vec::new();
    c_addrs(a, &mut v);
    v
}

fn sync_event_handle(a: &ArrowDeviceArray) -> *mut std::ffi::c_void {
    assert!(!a.sync_event().is_null());
    // Safety: devbuf's CUDA exports point `sync_event` at a live CUevent handle.
    unsafe { *(a.sync_event() as *const *mut std::ffi::c_void) }
}

/// The raw C layout, to tamper with fields a producer could get wrong.
#[repr(C)]
struct RawDeviceArray {
    length: i64,
    null_count: i64,
    offset: i64,
    n_buffers: i64,
    n_children: i64,
    buffers: *mut *const std::ffi::c_void,
    children: *mut std::ffi::c_void,
    dictionary: *mut std::ffi::c_void,
    release: *mut std::ffi::c_void,
    private_data: *mut std::ffi::c_void,
    device_id: i64,
    device_type: i32,
    sync_event: *mut std::ffi::c_void,
    reserved: [i64; 3],
}

fn raw_mut(a: &mut ArrowDeviceArray) -> &mut RawDeviceArray {
    // Safety: same C layout; the tests only change plain integer fields.
    unsafe { &mut *(a as *mut ArrowDeviceArray).cast::<RawDeviceArray>() }
}

gpu_test! {
    /// Every type: DeviceArray → ArrowDeviceArray (CUDA) → DeviceArray, zero-copy at
    /// both steps, values equal to the host array, each structure released once.
    fn cuda_round_trip_every_type_zero_copy() {
        let _g = serial();
        let c = ctx();
        let consumer = Stream::new(&c).unwrap();
        let mut n = 0;
        for (name, a) in corpus::all() {
            let d = DeviceArray::from_host(a.as_ref(), &c).expect(&name);
            let nodes = corpus::node_count(&a.to_data());
            let allocated = c.bytes_allocated();
            let k = counts();
            let (mut c_array, c_schema) = export_array(&d, SyncEvent::DefaultStream).expect(&name);
            assert_eq!(c_array.device_type(), ARROW_DEVICE_CUDA, "{name}");
            assert_eq!(c_array.device_id(), 0, "{name}");
            assert_eq!(reserved(&c_array), [0; 3], "{name}");
            if !d.all_buffers().is_empty() {
                assert!(!sync_event_handle(&c_array).is_null(), "{name}: a CUevent");
            }
            assert_eq!(addrs_of_c(c_array.array()), addrs_of_device(&d, false), "{name}: exported pointers are the device buffers");
            assert_eq!(k.live_since(), nodes as i64, "{name}");
            let imported = import_array(&mut c_array, &c_schema, Some(&consumer)).expect(&name).into_device().expect(&name);
            assert!(c_array.array().is_released(), "{name}");
            assert_eq!(addrs_of_device(&imported, true), addrs_of_device(&d, true), "{name}: imported buffers are the same device memory");
            assert!(imported.all_buffers().iter().all(|b| !b.is_owned()), "{name}: views of the producer's memory");
            assert_eq!(c.bytes_allocated(), allocated, "{name}: no device allocation");
            assert_eq!(imported.data_type(), a.data_type(), "{name}");
            assert_eq!((imported.len(), imported.null_count(), imported.offset()), (d.len(), d.null_count(), d.offset()), "{name}");
            consumer.synchronize().unwrap();
            let back = imported.to_host().expect(&name);
            assert_eq!(back.as_ref(), a.as_ref(), "{name}: values");
            if !imported.all_buffers().iter().all(|b| b.is_empty()) {
                assert_eq!(k.released_since(), 0, "{name}: alive while imported buffers are");
            }
            drop(imported);
            assert_eq!(k.released_since(), nodes, "{name}: released exactly once");
            assert_eq!(k.live_since(), 0, "{name}");
            // The producer's array is untouched and still correct.
            assert_eq!(d.to_host().unwrap().as_ref(), a.as_ref(), "{name}");
            n += 1;
        }
        assert!(n > 80, "{n}");
    }

    /// Arrays with offsets (not normalised by a copy) keep them across the interface.
    fn cuda_offsets_survive() {
        let _g = serial();
        let c = ctx();
        let vals: Vec<i32> = (0..40).map(|i| i * 3 - 7).collect();
        let values = DeviceBuffer::from_slice(&c, &vals).unwrap();
        // Validity: every 4th element null, over all 40.
        let mut bits = vec![0u8; 5];
        for i in 0..40 {
            if i % 4 != 1 {
                bits[i / 8] |= 1 << (i % 8);
            }
        }
        let validity = DeviceBuffer::from_slice(&c, &bits).unwrap();
        let (off, len) = (5usize, 23usize);
        let nulls = (off..off + len).filter(|i| i % 4 == 1).count();
        let d = DeviceArray::try_new(DataType::Int32, len, nulls, off, Some(validity), vec![values], vec![], None).unwrap();
        let (mut c_array, schema) = export_array(&d, SyncEvent::DefaultStream).unwrap();
        assert_eq!((c_array.array().offset(), c_array.array().null_count()), (off as i64, nulls as i64));
        let imported = import_array(&mut c_array, &schema, None).unwrap().into_device().unwrap();
        assert_eq!(imported.offset(), off);
        let want: Int32Array = (off..off + len).map(|i| (i % 4 != 1).then_some(vals[i])).collect();
        assert_eq!(imported.to_host().unwrap().as_ref(), &want as &dyn Array);

        // Utf8 at an offset: the importer reads offsets[offset + len] from the device.
        let words = StringArray::from((0..30).map(|i| "x".repeat(i % 5)).collect::<Vec<_>>());
        let data = words.to_data();
        let offsets = DeviceBuffer::from_slice(&c, data.buffers()[0].as_slice()).unwrap();
        let bytes = DeviceBuffer::from_slice(&c, data.buffers()[1].as_slice()).unwrap();
        let d = DeviceArray::try_new(DataType::Utf8, 11, 0, 7, None, vec![offsets, bytes], vec![], None).unwrap();
        let (mut c_array, schema) = export_array(&d, SyncEvent::DefaultStream).unwrap();
        let imported = import_array(&mut c_array, &schema, None).unwrap().into_device().unwrap();
        assert_eq!(imported.offset(), 7);
        let want = words.slice(7, 11);
        assert_eq!(imported.to_host().unwrap().as_ref(), &want as &dyn Array);
        let total: usize = (0..18).map(|i| i % 5).sum();
        assert_eq!(imported.buffers()[1].len(), total, "values sized by the last offset");
    }

}

// These hold a stream with a blocked host function: they run alone (see common.rs).
gpu_test_exclusive! {
    /// The consumer's stream waits for the producer's event on the device: the import
    /// returns while the producer's stream is still blocked, the consumer's work does
    /// not run until the producer's does, and then it sees the produced values.
    fn sync_event_is_waited_on_the_consumer_stream() {
        let _g = serial();
        let c = ctx();
        let mut r = rng("sync_event_is_waited_on_the_consumer_stream");
        let n = (1 << 20) + 3;
        let vals: Vec<i32> = (0..n).map(|_| r.random()).collect();
        let src = DeviceBuffer::from_slice(&c, &vals).unwrap();
        let dst = c.allocate(n * 4).unwrap();
        dst.fill(0).unwrap();
        let producer = Stream::new(&c).unwrap();
        let consumer = Stream::new(&c).unwrap();
        let gate = Arc::new(StreamGate::block(&producer).unwrap());
        copy_on_stream(&producer, &dst, &src).unwrap();
        let d = DeviceArray::try_new(DataType::Int32, n, 0, 0, None, vec![dst.clone()], vec![], None).unwrap();
        let (mut c_array, schema) = export_array(&d, SyncEvent::Stream(&producer)).unwrap();
        assert!(!sync_event_handle(&c_array).is_null());
        // A watchdog opens the gate late if the import blocks (then the test fails).
        let opened_by_watchdog = Arc::new(AtomicBool::new(false));
        let (g2, flag) = (gate.clone(), opened_by_watchdog.clone());
        let watchdog = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(5));
            flag.store(true, Ordering::SeqCst);
            g2.open();
        });
        let imported = import_array(&mut c_array, &schema, Some(&consumer)).unwrap().into_device().unwrap();
        assert!(
            !opened_by_watchdog.load(Ordering::SeqCst),
            "the import blocked the host until the watchdog opened the gate"
        );
        let out = c.allocate(n * 4).unwrap();
        out.fill(0).unwrap();
        copy_on_stream(&consumer, &out, &imported.buffers()[0]).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(!consumer.is_complete().unwrap(), "the consumer's copy must wait for the producer's event");
        assert!(!opened_by_watchdog.load(Ordering::SeqCst));
        gate.open();
        consumer.synchronize().unwrap();
        assert_eq!(out.to_vec::<i32>().unwrap(), vals, "the consumer sees the produced values");
        drop(imported);
        producer.synchronize().unwrap();
        drop(watchdog);
    }

    /// Default import: the legacy default stream waits, so devbuf's synchronous copies
    /// (to_host) see the produced values even though the producer ran late.
    fn sync_event_is_waited_on_the_legacy_stream() {
        let _g = serial();
        let c = ctx();
        let vals: Vec<i64> = (0..100_003).map(|i| i * 31 - 5).collect();
        let src = DeviceBuffer::from_slice(&c, &vals).unwrap();
        let dst = c.allocate(vals.len() * 8).unwrap();
        dst.fill(0).unwrap();
        let producer = Stream::new(&c).unwrap();
        let gate = Arc::new(StreamGate::block(&producer).unwrap());
        copy_on_stream(&producer, &dst, &src).unwrap();
        let d = DeviceArray::try_new(DataType::Int64, vals.len(), 0, 0, None, vec![dst], vec![], None).unwrap();
        let (mut c_array, schema) = export_array(&d, SyncEvent::Stream(&producer)).unwrap();
        let imported = import_array(&mut c_array, &schema, None).unwrap().into_device().unwrap();
        let opened = Arc::new(AtomicBool::new(false));
        let (g2, flag) = (gate.clone(), opened.clone());
        let opener = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            flag.store(true, Ordering::SeqCst);
            g2.open();
        });
        let back = imported.to_host().unwrap();
        // Causal, not timed: the copy could only finish after the gate opened.
        assert!(opened.load(Ordering::SeqCst), "to_host did not wait for the producer");
        let back = back.as_any().downcast_ref::<arrow_array::Int64Array>().unwrap();
        assert_eq!(back.values().as_ref(), &vals[..]);
        opener.join().unwrap();
    }

    /// String imports read the last offset from the device: that read is ordered after
    /// the producer's event (it waits), and the sizes come out right.
    fn utf8_last_offset_is_read_after_the_event() {
        let _g = serial();
        let c = ctx();
        let words = StringArray::from((0..5000).map(|i| format!("w{}", i * 7)).collect::<Vec<_>>());
        let data = words.to_data();
        let (o, v) = (data.buffers()[0].as_slice(), data.buffers()[1].as_slice());
        let (o_src, v_src) = (DeviceBuffer::from_slice(&c, o).unwrap(), DeviceBuffer::from_slice(&c, v).unwrap());
        let (o_dst, v_dst) = (c.allocate(o.len()).unwrap(), c.allocate(v.len()).unwrap());
        o_dst.fill(0).unwrap();
        v_dst.fill(0).unwrap();
        let producer = Stream::new(&c).unwrap();
        let consumer = Stream::new(&c).unwrap();
        let gate = Arc::new(StreamGate::block(&producer).unwrap());
        copy_on_stream(&producer, &o_dst, &o_src).unwrap();
        copy_on_stream(&producer, &v_dst, &v_src).unwrap();
        let d = DeviceArray::try_new(DataType::Utf8, 5000, 0, 0, None, vec![o_dst, v_dst], vec![], None).unwrap();
        let (mut c_array, schema) = export_array(&d, SyncEvent::Stream(&producer)).unwrap();
        let opened = Arc::new(AtomicBool::new(false));
        let (g2, flag) = (gate.clone(), opened.clone());
        let opener = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            flag.store(true, Ordering::SeqCst);
            g2.open();
        });
        let imported = import_array(&mut c_array, &schema, Some(&consumer)).unwrap().into_device().unwrap();
        // Causal, not timed: the offset read could only finish after the gate opened.
        assert!(opened.load(Ordering::SeqCst), "the offset read did not wait for the producer");
        assert_eq!(imported.buffers()[1].len(), v.len(), "values sized by the real last offset");
        consumer.synchronize().unwrap();
        assert_eq!(imported.to_host().unwrap().as_ref(), &words as &dyn Array);
        opener.join().unwrap();
    }

}

gpu_test! {
    /// Releases: once per structure whether imported or dropped; moved-out children on
    /// their own; the event and buffers stay valid until then.
    fn cuda_release_exactly_once() {
        let _g = serial();
        let c = ctx();
        let (_, structs) = corpus::others().into_iter().find(|(n, _)| *n == "struct").unwrap();
        let d = DeviceArray::from_host(structs.as_ref(), &c).unwrap();
        let k = counts();
        drop(export_array(&d, SyncEvent::DefaultStream).unwrap());
        assert_eq!(k.released_since(), 4);
        let (mut c_array, _) = export_array(&d, SyncEvent::DefaultStream).unwrap();
        let mut parent = c_array.take_array();
        let child = parent.take_child(1).unwrap();
        drop(parent);
        assert_eq!(k.released_since(), 7);
        // Import the moved child as a CUDA array of its own (no event: the parent's is
        // gone; devbuf's legacy-stream work is ordered anyway).
        // Safety: a child of a CUDA export: device memory of device 0.
        let mut raw = unsafe { ArrowDeviceArray::new(child, 0, ARROW_DEVICE_CUDA, std::ptr::null_mut()) };
        let imported = import_array(&mut raw, &FFI_ArrowSchema::try_from(&Field::new("", DataType::Utf8, true)).unwrap(), None).unwrap().into_device().unwrap();
        let s = structs.as_any().downcast_ref::<StructArray>().unwrap();
        assert_eq!(imported.to_host().unwrap().as_ref(), s.column(1).as_ref());
        assert_eq!(imported.buffers()[0].address(), d.children()[1].buffers()[0].address());
        drop(imported);
        assert_eq!(k.released_since(), 8);
        assert_eq!(k.live_since(), 0);
    }

    /// Import twice, a device id that does not exist, pointers too small or of the
    /// wrong kind: errors, and the producer released exactly once.
    fn cuda_import_errors() {
        let _g = serial();
        let c = ctx();
        let d = DeviceArray::from_host(&Int32Array::from((0..64).collect::<Vec<i32>>()), &c).unwrap();
        let schema = FFI_ArrowSchema::try_from(&Field::new("", DataType::Int32, true)).unwrap();

        let k = counts();
        let (mut a, _) = export_array(&d, SyncEvent::DefaultStream).unwrap();
        let first = import_array(&mut a, &schema, None).unwrap().into_device().unwrap();
        let e = import_array(&mut a, &schema, None).and_then(AnyArray::into_device).unwrap_err();
        assert!(e.to_string().contains("released"), "{e}");
        drop(first);
        assert_eq!(k.released_since(), 1);

        let count = cuda::device_count();
        let (mut a, _) = export_array(&d, SyncEvent::DefaultStream).unwrap();
        // The same array under a device id that does not exist.
        let event = a.sync_event();
        // Safety: the buffers and the event are the exported array's own, unchanged.
        let mut a = unsafe { ArrowDeviceArray::new(a.take_array(), count as i64, ARROW_DEVICE_CUDA, event) };
        let e = import_array(&mut a, &schema, None).and_then(AnyArray::into_device).unwrap_err();
        assert!(e.to_string().contains(&format!("device ordinal {count} does not exist")), "{e}");
        assert_eq!(k.released_since(), 2, "released on error");

        // A length the buffers cannot hold: the driver's range check refuses it.
        let (mut a, _) = export_array(&d, SyncEvent::DefaultStream).unwrap();
        raw_mut(&mut a).length = 1 << 40;
        let e = import_array(&mut a, &schema, None).and_then(AnyArray::into_device).unwrap_err();
        assert!(e.to_string().contains("out of bounds"), "{e}");
        assert_eq!(k.released_since(), 3);

        // Host memory claimed as CUDA memory.
        let host = Int32Array::from(vec![1, 2, 3]);
        let (mut a, _) = export_array(&host, ExportDevice::Cpu).unwrap();
        raw_mut(&mut a).device_type = ARROW_DEVICE_CUDA;
        raw_mut(&mut a).device_id = 0;
        let e = import_array(&mut a, &schema, None).and_then(AnyArray::into_device).unwrap_err();
        assert!(e.to_string().contains("not device memory"), "{e}");
        assert_eq!(k.released_since(), 4);

        // A device array offered to a host-only consumer: it reads the device type and
        // leaves the structure untouched; `import_array` takes it as a device array,
        // which `into_host` refuses.
        let (mut a, _) = export_array(&d, SyncEvent::DefaultStream).unwrap();
        assert_eq!(a.device_type(), ARROW_DEVICE_CUDA);
        assert!(!a.array().is_released());
        let e = import_array(&mut a, &schema, None).unwrap().into_host().unwrap_err();
        assert!(e.to_string().contains("device memory"), "{e}");
        drop(a);
        assert_eq!(k.released_since(), 5);
        assert_eq!(k.live_since(), 0);

        // View types are refused for CUDA, naming the type.
        for (name, v) in corpus::views() {
            let dv = DeviceArray::from_host(v.as_ref(), &c).unwrap();
            let e = export_array(&dv, SyncEvent::DefaultStream).unwrap_err();
            assert!(e.to_string().contains(&v.data_type().to_string()), "{name}: {e}");
        }
        // A view type on CUDA is a type devbuf does not export there: Unsupported.
        assert!(matches!(
            export_array(DeviceArray::from_host(&corpus::views()[0].1, &c).unwrap(), SyncEvent::None).map_err(|e| e.kind()),
            Err(devbuf::ErrorKind::Unsupported)
        ));
    }

    /// CUDA_HOST: arrays in page-locked memory (as DeviceArray::to_host makes them)
    /// export with device type 3, zero-copy, and import back; ordinary memory is
    /// refused.
    fn cuda_host_export_of_page_locked_arrays() {
        let _g = serial();
        let c = ctx();
        for (name, a) in corpus::all() {
            let pinned = DeviceArray::from_host(a.as_ref(), &c).unwrap().to_host().unwrap();
            let k = counts();
            let (mut c_array, schema) = export_array(pinned.as_ref(), ExportDevice::CudaHost { context: &c, sync: SyncEvent::None }).expect(&name);
            assert_eq!(c_array.device_type(), ARROW_DEVICE_CUDA_HOST, "{name}");
            assert_eq!(c_array.device_id(), 0, "{name}");
            assert!(c_array.sync_event().is_null(), "{name}");
            let back = import_array(&mut c_array, &schema, None).expect(&name).into_host().expect(&name);
            assert_eq!(back.as_ref(), a.as_ref(), "{name}");
            let ptrs = |x: &ArrayRef| x.to_data().buffers().iter().filter(|b| !b.is_empty()).map(|b| b.as_ptr() as usize).collect::<Vec<_>>();
            assert_eq!(ptrs(&back), ptrs(&pinned), "{name}: zero-copy");
            drop(back);
            assert_eq!(k.live_since(), 0, "{name}");
        }
        // With an event on the legacy stream: the host import waits on it.
        let pinned = DeviceArray::from_host(&Int32Array::from(vec![7, 8, 9]), &c).unwrap().to_host().unwrap();
        let (mut c_array, schema) = export_array(pinned.as_ref(), ExportDevice::CudaHost { context: &c, sync: SyncEvent::DefaultStream }).unwrap();
        assert!(!sync_event_handle(&c_array).is_null());
        let back = import_array(&mut c_array, &schema, None).unwrap();
        let AnyArray::Host(back) = back else { panic!("CUDA_HOST imports to the host") };
        assert_eq!(back.as_ref(), pinned.as_ref());
        // Ordinary memory is not CUDA_HOST.
        let plain = Int32Array::from(vec![1, 2, 3]);
        let e = export_array(&plain, ExportDevice::CudaHost { context: &c, sync: SyncEvent::None }).unwrap_err();
        assert!(e.to_string().contains("not page-locked"), "{e}");
        let h = c.allocate_host(64).unwrap();
        assert!(c.is_page_locked(h.as_ptr(), h.len()).unwrap());
        assert!(!c.is_page_locked(plain.values().as_ptr().cast(), 12).unwrap());
    }

    /// A device stream of batches: zero-copy, values equal to the host batches, an
    /// error mid-stream reported with the producer's message, everything released.
    fn cuda_stream_of_batches() {
        let _g = serial();
        let c = ctx();
        let (schema, parts) = batches();
        let on_device: Vec<DeviceRecordBatch> = parts
            .iter()
            .map(|b| DeviceRecordBatch::try_from(DeviceArray::from_host(&StructArray::from(b.clone()), &c).unwrap()).unwrap())
            .collect();
        let as_struct = |b: devbuf::Result<Batch>| DeviceArray::try_from(b?.as_device().expect("a CUDA stream carries device batches").clone());
        let consumer = Stream::new(&c).unwrap();
        let k = counts();
        let mut stream = export_stream(schema.clone(), on_device.clone().into_iter().map(Ok), SyncEvent::DefaultStream);
        assert_eq!(stream.device_type(), ARROW_DEVICE_CUDA);
        let reader = import_stream(&mut stream, Some(&consumer)).unwrap();
        assert!(stream.is_released());
        assert_eq!(reader.schema(), schema);
        let got: Vec<DeviceArray> = reader.map(as_struct).collect::<Result<_, _>>().unwrap();
        assert_eq!(got.len(), parts.len());
        consumer.synchronize().unwrap();
        for ((g, d), b) in got.iter().zip(&on_device).zip(&parts) {
            assert_eq!(addrs_of_device(g, true), addrs_of_device(&DeviceArray::try_from(d.clone()).unwrap(), true));
            let host = g.to_host().unwrap();
            assert_eq!(host.as_ref(), &StructArray::from(b.clone()) as &dyn Array);
        }
        drop(got);
        assert_eq!(k.live_since(), 0);

        // An error in the middle, and a batch that is not a struct.
        let items: Vec<devbuf::Result<DeviceRecordBatch>> = vec![
            Ok(on_device[0].clone()),
            Err(Error::InvalidArgument("device batch 1 failed to decode".into())),
            Ok(on_device[2].clone()),
        ];
        let mut stream = export_stream(schema.clone(), items, SyncEvent::DefaultStream);
        let mut reader = import_stream(&mut stream, None).unwrap();
        assert!(reader.next().unwrap().is_ok());
        let e = reader.next().unwrap().unwrap_err();
        assert!(e.to_string().contains("device batch 1 failed to decode"), "{e}");
        assert!(reader.next().is_none());
        drop(reader);
        let not_struct = DeviceArray::from_host(&Int32Array::from(vec![1]), &c).unwrap();
        let mut stream = export_stream(schema.clone(), vec![DeviceRecordBatch::try_from(not_struct)], SyncEvent::DefaultStream);
        let e = import_stream(&mut stream, None).unwrap().next().unwrap().unwrap_err();
        assert!(e.to_string().contains("a batch is a struct array"), "{e}");
        assert_eq!(k.live_since(), 0);

        // Batches read from Arrow IPC in device memory, through DeviceArray::try_from.
        let full = crate::batches::mixed_batch(61, 300);
        let message = to_device_message(full.clone(), &c).unwrap();
        let dev_batch = read_device(&message, full.schema()).unwrap();
        let s = DeviceArray::try_from(dev_batch.clone()).unwrap();
        let mut stream = export_stream(full.schema(), vec![Ok(dev_batch.clone())], SyncEvent::DefaultStream);
        let got: Vec<DeviceArray> = import_stream(&mut stream, None).unwrap().map(as_struct).collect::<Result<_, _>>().unwrap();
        assert_eq!(addrs_of_device(&got[0], true), addrs_of_device(&s, true));
        assert_eq!(got[0].to_host().unwrap().as_ref(), &StructArray::from(full) as &dyn Array);
    }

    /// Buffers from two contexts of one device (primary and dedicated): the default
    /// event orders both legacy streams. Buffers on two devices: refused.
    fn cuda_contexts_and_devices() {
        let _g = serial();
        let c = ctx();
        let Ok(dedicated) = Context::new_dedicated(0) else {
            println!("SKIPPED cuda_contexts_and_devices: dedicated contexts need cuCtxCreate_v4");
            return;
        };
        // (Int32 children: importing them reads nothing from the device, so the primary
        // context never touches the dedicated context's memory.)
        let a = DeviceArray::from_host(&Int32Array::from(vec![1, 2, 3]), &c).unwrap();
        let b = DeviceArray::from_host(&Int32Array::from(vec![4, 5, 6]), &dedicated).unwrap();
        let fields = vec![Field::new("a", DataType::Int32, true), Field::new("b", DataType::Int32, true)];
        let s = DeviceArray::try_new(DataType::Struct(fields.clone().into()), 3, 0, 0, None, vec![], vec![a, b], None).unwrap();
        let (mut c_array, schema) = export_array(&s, SyncEvent::DefaultStream).unwrap();
        assert!(!sync_event_handle(&c_array).is_null());
        let imported = import_array(&mut c_array, &schema, None).unwrap().into_device().unwrap();
        assert_eq!(addrs_of_device(&imported, true), addrs_of_device(&s, true));
        // (Values of the dedicated context's child are not read through the primary
        // context here: that is a question of cross-context access, not of this
        // interface.)
        assert_eq!(
            imported.children()[0].to_host().unwrap().as_ref(),
            &Int32Array::from(vec![1, 2, 3]) as &dyn Array
        );
        drop(dedicated);
        if let Some(c1) = second_ctx("cuda_contexts_and_devices (two devices)") {
            let a = DeviceArray::from_host(&Int32Array::from(vec![1, 2, 3]), &c).unwrap();
            let b = DeviceArray::from_host(&StringArray::from(vec!["x", "yy", "zzz"]), &c1).unwrap();
            let two = vec![Field::new("a", DataType::Int32, true), Field::new("b", DataType::Utf8, true)];
            let s = DeviceArray::try_new(DataType::Struct(two.into()), 3, 0, 0, None, vec![], vec![a, b.clone()], None).unwrap();
            let e = export_array(&s, SyncEvent::DefaultStream).unwrap_err();
            assert!(e.to_string().contains("devices 0 and 1"), "{e}");
            let (mut c_array, schema) = export_array(&b, SyncEvent::DefaultStream).unwrap();
            assert_eq!(c_array.device_id(), 1);
            let imported = import_array(&mut c_array, &schema, None).unwrap().into_device().unwrap();
            assert_eq!(imported.buffers()[0].context().ordinal(), 1);
            assert_eq!(imported.to_host().unwrap().as_ref(), &StringArray::from(vec!["x", "yy", "zzz"]) as &dyn Array);
        }
    }
}

fn batches() -> (Arc<Schema>, Vec<RecordBatch>) {
    let mut fields = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    for (name, a) in corpus::others() {
        if a.len() == 29 {
            fields.push(Field::new(name, a.data_type().clone(), true));
            columns.push(a);
        }
    }
    let schema = Arc::new(Schema::new(fields));
    let full = RecordBatch::try_new(schema.clone(), columns).unwrap();
    (
        schema,
        vec![full.slice(0, 10), full.slice(10, 0), full.slice(10, 19)],
    )
}

/// The three reserved words of a device array (zero when produced by devbuf), read at the
/// offset `layout_table` gives.
fn reserved(a: &ArrowDeviceArray) -> [i64; 3] {
    let (_, _, fields) = layout_table()
        .into_iter()
        .find(|(n, _, _)| *n == "ArrowDeviceArray")
        .unwrap();
    let (_, off) = fields.into_iter().find(|(f, _)| *f == "reserved").unwrap();
    // Safety: `off` is the offset of the `[i64; 3]` field inside the live structure.
    unsafe {
        std::ptr::read_unaligned(
            (a as *const ArrowDeviceArray)
                .cast::<u8>()
                .add(off)
                .cast::<[i64; 3]>(),
        )
    }
}
