//! A `ChunkBatch` and C Device Data Interface exports on device 1.

use super::*;
use crate::c_device::{addrs_of_device as addrs, c_addrs};

// Arrow on device 1.

/// Whether `b` lies inside `outer` (zero-copy check by address).
fn within(b: &DeviceBuffer, outer: &DeviceBuffer) -> bool {
    b.is_empty()
        || (b.address() >= outer.address()
            && b.address() + b.len() as u64 <= outer.address() + outer.len() as u64)
}

gpu_test! {
    /// A ChunkBatch built on device 1 (from chunks on the host and on device 0) is one
    /// device-1 allocation; its C Device Data Interface export says device 1 and points
    /// at exactly those device-1 buffers (addresses compared, and the driver asked);
    /// a consumer on device 1 imports it (zero-copy, waiting on its own stream) and reads
    /// the host batch's values; the same through a C device stream; released once.
    fn chunk_batch_and_c_device_export_on_device_1() {
        let Some(d1) = second_ctx("chunk_batch_and_c_device_export_on_device_1") else { return };
        let _g = serial();
        let mut r = rng("chunk_batch_and_c_device_export_on_device_1");
        let grid = ChunkGrid::new(&[10, 7], &[4, 3], Dtype::from(ElementType::Float32)).unwrap();
        let mut chunks = Vec::new();
        for i in 0..3u64 {
            for j in 0..3u64 {
                let ext = grid.chunk_extent(&[i, j]).unwrap();
                let vals: Vec<f32> = (0..ext.iter().product::<usize>()).map(|_| r.random::<f32>() * 100.0 - 50.0).collect();
                let nd = NDBuffer::from_ndarray(ndarray::ArrayD::from_shape_vec(ext.clone(), vals).unwrap());
                // Every other chunk comes from device 0: moved to device 1 by the build.
                let nd = if (i + j) % 2 == 1 { nd.to_prototype(&BufferPrototype::Device(0)).unwrap() } else { nd };
                chunks.push((vec![i, j], nd));
            }
        }
        let host = ChunkBatch::from_chunks(&grid, chunks.iter().map(|(c, n)| (c.as_slice(), n)), &BufferPrototype::Host).unwrap();
        let dev = ChunkBatch::from_chunks(&grid, chunks.iter().map(|(c, n)| (c.as_slice(), n)), &BufferPrototype::Device(1)).unwrap();
        assert!(dev.prototype().is_device());
        let host_rb = host.batch().as_host().unwrap().clone();
        let d = dev.batch().as_device().unwrap();
        let message = d.message();
        assert_eq!(message.context().ordinal(), 1);
        assert_eq!(device_of_pointer(message.address()), 1);
        for col in d.columns() {
            for b in col.all_buffers() {
                assert_eq!(b.context().ordinal(), 1);
                assert!(within(b, message), "{:?}: not inside the batch's device-1 allocation", col.data_type());
            }
        }
        for k in 0..host.len() {
            assert_eq!(dev.coords(k), host.coords(k));
            let c = dev.chunk(k).unwrap();
            assert_eq!(c.as_ndarray_like().memory.prototype(), BufferPrototype::Device(1), "chunk {k}");
            assert_eq!(c.to_ndarray::<f32>().unwrap(), host.chunk(k).unwrap().to_ndarray::<f32>().unwrap(), "chunk {k}");
        }
        for (i, col) in d.columns().iter().enumerate() {
            assert_eq!(col.to_host().unwrap().as_ref(), host_rb.column(i).as_ref(), "column {i}");
        }

        // Export as one struct array, import on a device-1 consumer stream.
        let s = DeviceArray::try_from(d.clone()).unwrap();
        let want = StructArray::from(host_rb.clone());
        let nodes = crate::corpus::node_count(&want.to_data());
        let k = counts();
        let (mut c_array, c_schema) = export_array(&s, SyncEvent::DefaultStream).unwrap();
        assert_eq!(c_array.device_type(), ARROW_DEVICE_CUDA);
        assert_eq!(c_array.device_id(), 1);
        assert!(!c_array.sync_event().is_null(), "an event to wait on");
        let exported = {
            let mut v = Vec::new();
            c_addrs(c_array.array(), &mut v);
            v
        };
        assert_eq!(exported, addrs(&s, false), "the exported pointers are the device-1 buffers");
        assert!(!exported.is_empty());
        for &a in &exported {
            assert_eq!(device_of_pointer(a), 1, "{a:#x}");
            assert!(a >= message.address() && a < message.address() + message.len() as u64, "{a:#x}");
        }
        assert_eq!(k.live_since(), nodes as i64);
        let consumer = Stream::new(&d1).unwrap();
        let imported = import_array(&mut c_array, &c_schema, Some(&consumer)).unwrap().into_device().unwrap();
        assert!(c_array.array().is_released());
        assert_eq!(addrs(&imported, true), addrs(&s, true), "imported zero-copy");
        assert!(imported.all_buffers().iter().all(|b| b.context().ordinal() == 1 && !b.is_owned()));
        consumer.synchronize().unwrap();
        assert_eq!(imported.len(), host.len());
        for (i, child) in imported.children().iter().enumerate() {
            assert_eq!(child.to_host().unwrap().as_ref(), want.column(i).as_ref(), "column {i}");
        }
        // The consumer copies the chunk column's values on device 1 and reads them.
        let values = imported.children()[2].children()[0].buffers()[0].clone();
        let copy = d1.allocate(values.len()).unwrap();
        copy.copy_from_device_on(0, &values, &consumer).unwrap();
        consumer.synchronize().unwrap();
        let host_values: Vec<u8> = want
            .column(2)
            .as_fixed_size_list()
            .values()
            .as_primitive::<Float32Type>()
            .values()
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let got = copy.to_vec::<u8>().unwrap();
        assert!(got.len() >= host_values.len(), "{} value bytes on device 1, {} expected", got.len(), host_values.len());
        assert_bytes(&got[..host_values.len()], &host_values, "chunk values copied on device 1");
        // The import's buffers (and the clone of one) keep the export alive.
        drop(imported);
        assert_eq!(k.released_since(), 0, "a clone of an imported buffer keeps the export");
        drop((values, copy));
        assert_eq!(k.released_since(), nodes, "released exactly once");
        assert_eq!(k.live_since(), 0);

        // The same batch through a C device stream.
        let k = counts();
        let mut stream = export_stream(d.schema(), vec![Ok(d.clone())], SyncEvent::DefaultStream);
        let arrays: Vec<DeviceArray> = import_stream(&mut stream, Some(&consumer))
            .unwrap()
            .map(|b| DeviceArray::try_from(b?.as_device().expect("a CUDA stream carries device batches").clone()))
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(arrays.len(), 1);
        assert_eq!(addrs(&arrays[0], true), addrs(&s, true));
        assert!(arrays[0].all_buffers().iter().all(|b| b.context().ordinal() == 1));
        consumer.synchronize().unwrap();
        for (i, child) in arrays[0].children().iter().enumerate() {
            assert_eq!(child.to_host().unwrap().as_ref(), want.column(i).as_ref(), "stream column {i}");
        }
        drop(arrays);
        drop(stream);
        assert_eq!(k.live_since(), 0);
    }
}
