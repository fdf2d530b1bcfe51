//! NDBuffer ⇄ Arrow on the GPU: every device conversion against the host conversion of
//! the same random data (exact, byte for byte), zero-copy claims by address and by the
//! context's allocation counter, the bit-packing kernels at awkward sizes and bit
//! offsets, and `ChunkBatch` on the device against the host.

use arrow_array::{Array, BooleanArray};
use arrow_data::ArrayData;
use arrow_schema::DataType as ArrowType;
use devbuf::ElementType;
use devbuf::arrow::{Batch, ChunkBatch, ChunkGrid, DeviceArray, TensorArray, TensorType};
use devbuf::cuda::{Context, DeviceBuffer};
use devbuf::zarr::{AxisSel, BufferPrototype, Dtype, Endianness, NDBuffer, Order, Scalar};
use rand::Rng;
use rand::rngs::SmallRng;

use crate::arrays::{KINDS, Kind, base_order, base_shape, c_bytes, dtypes, random_values, view};
use crate::common::*;

const HOST: BufferPrototype = BufferPrototype::Host;
const DEV: BufferPrototype = BufferPrototype::Device(0);

/// The elements of a host Arrow array as bytes, read through arrow-rs alone.
fn arrow_bytes(data: &ArrayData) -> Vec<u8> {
    fn go(data: &ArrayData) -> (Vec<u8>, usize) {
        match data.data_type() {
            ArrowType::Boolean => (
                BooleanArray::from(data.clone())
                    .values()
                    .iter()
                    .map(u8::from)
                    .collect(),
                1,
            ),
            ArrowType::FixedSizeList(_, k) => {
                let (child, w) = go(&data.child_data()[0]);
                let w = w * *k as usize;
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
    go(data).0
}

/// The device address of the innermost values buffer of a device array.
fn dev_values(a: &DeviceArray) -> &DeviceBuffer {
    match a.children().first() {
        Some(c) => dev_values(c),
        None => &a.buffers()[0],
    }
}

/// The device storage of a tensor array made from device memory.
fn dev(t: &TensorArray) -> &DeviceArray {
    t.storage()
        .as_device()
        .expect("a device NDBuffer gives device storage")
}

/// The address of element `[0, .., 0]`.
fn first_addr(nd: &NDBuffer) -> u64 {
    let l = nd.as_ndarray_like();
    l.memory.address() + l.offset as u64
}

const SHAPES: &[&[usize]] = &[
    &[],
    &[0],
    &[1],
    &[33],
    &[3, 0, 2],
    &[5, 7],
    &[2, 3, 4],
    &[3, 1, 4, 5],
];

/// The same array (same values, same layout) in host and in device memory; the device
/// one's views are views of device memory.
fn pair(
    c: &Context,
    rng: &mut SmallRng,
    shape: &[usize],
    dtype: Dtype,
    kind: Kind,
) -> (NDBuffer, NDBuffer) {
    let base = base_shape(shape, kind);
    let n: usize = base.iter().product();
    let bytes = random_values(rng, n, dtype);
    let order = base_order(kind);
    let h = NDBuffer::from_memory(bytes.clone(), &base, dtype, order).unwrap();
    let d = NDBuffer::from_memory(
        DeviceBuffer::from_slice(c, &bytes).unwrap(),
        &base,
        dtype,
        order,
    )
    .unwrap();
    let (h, d) = (view(h, shape, kind), view(d, shape, kind));
    assert_eq!(h.shape(), shape);
    assert_eq!(h.strides(), d.strides());
    (h, d)
}

fn aligned(nd: &NDBuffer) -> bool {
    let a = match nd.dtype().element() {
        ElementType::Complex64 => 4,
        ElementType::Complex128 => 8,
        e => e.size() as u64,
    };
    first_addr(nd).is_multiple_of(a)
}

fn check_tensors(h: &TensorArray, d: &TensorArray, what: &str) {
    assert!(
        d.prototype().is_device() && !h.prototype().is_device(),
        "{what}: where the storage lives"
    );
    assert_eq!(d.tensor_type(), h.tensor_type(), "{what}: tensor type");
    assert_eq!(d.len(), h.len(), "{what}: length");
    let back = d.to_host().unwrap();
    assert!(!back.prototype().is_device(), "{what}");
    assert_eq!(
        arrow_bytes(&back.storage().as_host().unwrap().to_data()),
        arrow_bytes(&h.storage().as_host().unwrap().to_data()),
        "{what}: storage"
    );
    for i in 0..h.len() {
        let (ht, dt) = (h.tensor(i).unwrap(), d.tensor(i).unwrap());
        assert!(dt.prototype().is_device(), "{what}");
        assert_eq!(dt.shape(), ht.shape(), "{what}: tensor {i}");
        assert_eq!(c_bytes(&dt), c_bytes(&ht), "{what}: tensor {i}");
        if h.tensor_type().element() != ElementType::Bool && dt.size() > 0 {
            let list: usize = h.tensor_type().shape().iter().product();
            let es = h.tensor_type().element().size();
            assert_eq!(
                first_addr(&dt),
                dev_values(dev(d)).address() + (i * list * es) as u64,
                "{what}: tensor {i} is a view of the storage"
            );
        }
    }
}

gpu_test! {
    fn tensor_device_flat_equals_host() {
        // A context of its own, so that its allocation counter sees only this test.
        let c = Context::new_dedicated(0).unwrap();
        let mut rng = rng("tensor_device_flat_equals_host");
        let mut zero_copies = 0;
        for dtype in dtypes() {
            for &shape in SHAPES {
                for kind in KINDS {
                    let (h, d) = pair(&c, &mut rng, shape, dtype, kind);
                    let what = format!("{dtype} {shape:?} {kind:?}");
                    let ha = h.clone().into_arrow().unwrap().into_host().unwrap();
                    let before = c.bytes_allocated();
                    let da = d.clone().into_arrow().unwrap().into_device().unwrap();
                    assert_eq!(da.data_type(), ha.data_type(), "{what}");
                    assert_eq!(da.len(), ha.len(), "{what}");
                    assert_eq!(arrow_bytes(&da.to_host().unwrap().to_data()), arrow_bytes(&ha.to_data()), "{what}");
                    let zero_copy = d.is_contiguous(Order::C)
                        && dtype.byteorder() == Endianness::NATIVE
                        && dtype.element() != ElementType::Bool
                        && aligned(&d)
                        && d.size() > 0;
                    if zero_copy {
                        assert_eq!(dev_values(&da).address(), first_addr(&d), "{what}: zero-copy");
                        assert_eq!(c.bytes_allocated(), before, "{what}: nothing allocated");
                        zero_copies += 1;
                    }
                    // Back to a device NDBuffer: a view of the array's buffer.
                    let back = NDBuffer::from_arrow(&da).unwrap();
                    assert!(back.prototype().is_device());
                    assert_eq!(c_bytes(&back), c_bytes(&h), "{what}");
                    if dtype.element() != ElementType::Bool && d.size() > 0 {
                        assert_eq!(first_addr(&back), dev_values(&da).address(), "{what}");
                    }
                    // The host array moved to the device reads back the same.
                    let moved = DeviceArray::from_host(ha.as_ref(), &c).unwrap();
                    assert_eq!(c_bytes(&NDBuffer::from_arrow(&moved).unwrap()), c_bytes(&h), "{what}");
                }
            }
        }
        assert!(zero_copies > 40, "{zero_copies}");
    }

    fn tensor_device_tensors_equal_host() {
        let c = Context::new_dedicated(0).unwrap();
        let mut rng = rng("tensor_device_tensors_equal_host");
        for dtype in dtypes() {
            for &shape in SHAPES {
                for kind in KINDS {
                    let (h, d) = pair(&c, &mut rng, shape, dtype, kind);
                    let what = format!("{dtype} {shape:?} {kind:?}");
                    let before = c.bytes_allocated();
                    let dt = d.clone().into_tensor().unwrap();
                    let dense = kind != Kind::Strided;
                    if dense && dtype.byteorder() == Endianness::NATIVE && dtype.element() != ElementType::Bool && d.size() > 0 && aligned(&d) {
                        assert_eq!(dev_values(dev(&dt)).address(), first_addr(&d), "{what}: zero-copy");
                        assert_eq!(c.bytes_allocated(), before, "{what}: nothing allocated");
                    }
                    check_tensors(&h.clone().into_tensor().unwrap(), &dt, &format!("{what} tensor"));
                    if !shape.is_empty() {
                        let dr = d.clone().into_tensor_rows().unwrap();
                        check_tensors(&h.clone().into_tensor_rows().unwrap(), &dr, &format!("{what} rows"));
                        assert_eq!(c_bytes(&dr.rows(0, dr.len()).unwrap()), c_bytes(&h), "{what}");
                    }
                    // Through the field: a device tensor column read back.
                    let again = TensorArray::try_new(TensorType::from_field(&dt.tensor_type().field("x", false).unwrap()).unwrap(), dev(&dt)).unwrap();
                    assert_eq!(c_bytes(&again.tensor(0).unwrap()), c_bytes(&h), "{what}");
                }
            }
        }
    }

    fn tensor_zero_copy_large() {
        // 64 MiB of float32 in 64 rows: every form is a view (nothing is allocated).
        let c = Context::new_dedicated(0).unwrap();
        let shape = [64usize, 512, 512];
        let buf = c.allocate(64 * 512 * 512 * 4).unwrap();
        let mut nd = NDBuffer::from_memory(buf, &shape, Dtype::FLOAT32, Order::C).unwrap();
        nd.set_scalar(&[], Scalar::from(1.5f32)).unwrap();
        let base = first_addr(&nd);
        let before = c.bytes_allocated();
        let flat = nd.clone().into_arrow().unwrap().into_device().unwrap();
        let rows = nd.clone().into_tensor_rows().unwrap();
        let f = nd.transpose(None).unwrap().into_tensor().unwrap();
        assert_eq!(c.bytes_allocated(), before);
        assert_eq!(dev_values(&flat).address(), base);
        assert_eq!(dev_values(dev(&rows)).address(), base);
        assert_eq!(dev_values(dev(&f)).address(), base);
        assert_eq!(f.tensor_type().shape(), &shape);
        assert_eq!(f.tensor_type().permutation(), Some(&[2, 1, 0][..]));
        assert_eq!(first_addr(&rows.tensor(63).unwrap()), base + 63 * 512 * 512 * 4);
        let t = f.tensor(0).unwrap();
        assert_eq!(t.shape(), &[512, 512, 64]);
        assert_eq!(first_addr(&t), base);
        let back = NDBuffer::from_arrow(&flat).unwrap();
        assert_eq!(first_addr(&back), base);
        assert_eq!(c.bytes_allocated(), before);
        assert!(t.all_equal(Some(Scalar::from(1.5f32)), false).unwrap());
    }

    fn tensor_bit_kernels_at_awkward_sizes() {
        let c = ctx();
        let mut rng = rng("tensor_bit_kernels_at_awkward_sizes");
        for n in [0usize, 1, 7, 8, 9, 31, 32, 33, 63, 64, 65, 255, 1000, 4097, (1 << 20) + 3] {
            let bytes: Vec<u8> = (0..n).map(|_| if rng.random_ratio(1, 3) { rng.random_range(1..=255) } else { 0 }).collect();
            let h = NDBuffer::from_memory(bytes.clone(), &[n], Dtype::BOOL, Order::C).unwrap();
            let d = NDBuffer::from_memory(DeviceBuffer::from_slice(&c, &bytes).unwrap(), &[n], Dtype::BOOL, Order::C).unwrap();
            let da = d.clone().into_arrow().unwrap().into_device().unwrap();
            let ha = h.clone().into_arrow().unwrap().into_host().unwrap();
            // The packed bitmap itself (bits past n are zero on the device).
            let dbits = da.buffers()[0].to_vec::<u8>().unwrap();
            assert_eq!(dbits.len(), n.div_ceil(8), "n = {n}");
            let want: Vec<u8> = (0..n.div_ceil(8))
                .map(|k| (0..8).filter(|&j| k * 8 + j < n && bytes[k * 8 + j] != 0).fold(0u8, |b, j| b | 1 << j))
                .collect();
            assert_eq!(dbits, want, "n = {n}: packed bits");
            assert_eq!(arrow_bytes(&da.to_host().unwrap().to_data()), arrow_bytes(&ha.to_data()), "n = {n}");
            // Unpacking at every bit offset 0..17.
            for off in 0..17usize.min(n + 1) {
                let len = n - off;
                let arr = DeviceArray::try_new(ArrowType::Boolean, len, 0, off, None, vec![da.buffers()[0].clone()], vec![], None).unwrap();
                let back = NDBuffer::from_arrow(&arr).unwrap();
                let want: Vec<u8> = bytes[off..].iter().map(|&b| u8::from(b != 0)).collect();
                assert_eq!(c_bytes(&back), want, "n = {n}, offset {off}");
            }
        }
    }

    fn tensor_device_misaligned_is_copied() {
        let c = ctx();
        let data: Vec<u8> = (0u8..65).collect();
        let buf = DeviceBuffer::from_slice(&c, &data).unwrap();
        let nd = NDBuffer::from_memory(buf.slice(1, 64).unwrap(), &[8], Dtype::INT64, Order::C).unwrap();
        let a = nd.clone().into_arrow().unwrap().into_device().unwrap();
        assert_eq!(a.buffers()[0].address() % 8, 0);
        assert_ne!(a.buffers()[0].address(), first_addr(&nd));
        assert_eq!(a.buffers()[0].to_vec::<u8>().unwrap(), &data[1..]);
        let h = NDBuffer::from_memory(data[1..].to_vec(), &[8], Dtype::INT64, Order::C).unwrap();
        check_tensors(&h.clone().into_tensor().unwrap(), &nd.clone().into_tensor().unwrap(), "misaligned");
    }

    fn tensor_chunk_batch_device_equals_host() {
        let c = ctx();
        let mut rng = rng("tensor_chunk_batch_device_equals_host");
        for dtype in dtypes() {
            let shape = [9usize, 7, 5];
            let chunk = [4usize, 3, 5];
            let (h, d) = pair(&c, &mut rng, &shape, dtype, Kind::C);
            let fill = Scalar::from_le_bytes(dtype.element(), &random_values(&mut rng, 1, Dtype::from(dtype.element()))).unwrap();
            let grid = ChunkGrid::new(&shape, &chunk, dtype).unwrap().with_fill_value(fill);
            let g = grid.grid_shape();
            let mut coords = Vec::new();
            for i in 0..g[0] as u64 {
                for j in 0..g[1] as u64 {
                    if rng.random_ratio(4, 5) {
                        coords.push(vec![i, j, 0]);
                    }
                }
            }
            let region = |cc: &[u64]| -> Vec<AxisSel> {
                let e = grid.chunk_extent(cc).unwrap();
                cc.iter().zip(&chunk).zip(&e).map(|((&x, &s), &n)| AxisSel::from(x as usize * s..x as usize * s + n)).collect()
            };
            // Device chunks in several layouts (views, F copies, C copies), one given on
            // the host (moved to the device by from_chunks).
            let dchunks: Vec<(Vec<u64>, NDBuffer)> = coords.iter().enumerate().map(|(k, cc)| {
                let v = d.get(&region(cc)).unwrap();
                let v = match k % 4 {
                    0 => v,
                    1 => v.copy_order(Order::F).unwrap(),
                    2 => v.copy_order(Order::C).unwrap(),
                    _ => h.get(&region(cc)).unwrap(),
                };
                (cc.clone(), v)
            }).collect();
            let hchunks: Vec<(Vec<u64>, NDBuffer)> = coords.iter().map(|cc| (cc.clone(), h.get(&region(cc)).unwrap())).collect();
            let db = ChunkBatch::from_chunks(&grid, dchunks, &DEV).unwrap();
            let hb = ChunkBatch::from_chunks(&grid, hchunks, &HOST).unwrap();
            assert!(db.prototype().is_device() && !hb.prototype().is_device());
            let what = format!("{dtype}");
            let drb = db.batch().as_device().unwrap();
            assert_eq!(drb.schema(), hb.batch().as_host().unwrap().schema(), "{what}");
            // One device allocation holds every column.
            let msg = drb.message();
            for col in drb.columns() {
                for b in col.all_buffers() {
                    assert!(b.address() >= msg.address() && b.address() + b.len() as u64 <= msg.address() + msg.len() as u64, "{what}: column outside the batch allocation");
                }
            }
            // Device batch copied to the host equals the host batch.
            let back = db.batch().to_host().unwrap();
            let hrb = hb.batch().as_host().unwrap();
            for (i, (x, y)) in back.columns().iter().zip(hrb.columns()).enumerate() {
                assert_eq!(arrow_bytes(&x.to_data()), arrow_bytes(&y.to_data()), "{what}: column {i}");
            }
            for i in 0..hb.len() {
                assert_eq!(db.coords(i), hb.coords(i));
                let (dc, hc) = (db.chunk(i).unwrap(), hb.chunk(i).unwrap());
                assert!(dc.prototype().is_device());
                assert_eq!(dc.shape(), hc.shape());
                assert_eq!(c_bytes(&dc), c_bytes(&hc), "{what}: chunk {i}");
                assert_eq!(c_bytes(&dc), c_bytes(&h.get(&region(hb.coords(i).unwrap())).unwrap()), "{what}: chunk {i} vs the array");
                assert_eq!(c_bytes(&db.tensors().tensor(i).unwrap()), c_bytes(&hb.tensors().tensor(i).unwrap()), "{what}: padded chunk {i}");
                if dtype.element() != ElementType::Bool {
                    let a = first_addr(&dc);
                    assert!(a >= msg.address() && a < msg.address() + msg.len() as u64, "{what}: chunk {i} is a view of the batch");
                }
            }
            // A device record batch read back as chunks.
            let again = ChunkBatch::try_from(Batch::Device(drb.clone())).unwrap();
            assert_eq!(again.len(), hb.len());
            for i in 0..hb.len() {
                assert_eq!(c_bytes(&again.chunk(i).unwrap()), c_bytes(&hb.chunk(i).unwrap()), "{what}: chunk {i}");
            }
            // Through Arrow IPC in device memory.
            let schema = hrb.schema();
            let msg = to_device_message((hrb).clone(), &c).unwrap();
            let read = read_device(&msg, schema).unwrap();
            let via_ipc = ChunkBatch::try_from(Batch::Device(read)).unwrap();
            for i in 0..hb.len() {
                assert_eq!(c_bytes(&via_ipc.chunk(i).unwrap()), c_bytes(&hb.chunk(i).unwrap()), "{what}: IPC chunk {i}");
            }
        }
    }

    fn tensor_chunk_batch_moves_chunks_between_memories() {
        // Chunks in a dedicated context of device 0 (not the prototype's primary
        // context), for a device batch and for a host batch.
        let c = Context::new_dedicated(0).unwrap();
        let mut rng = rng("tensor_chunk_batch_moves_chunks_between_memories");
        let (h, d) = pair(&c, &mut rng, &[6, 6], Dtype::new(ElementType::Float32, Endianness::Big), Kind::F);
        let grid = ChunkGrid::new(&[6, 6], &[4, 4], Dtype::FLOAT32).unwrap();
        let coords = [vec![0u64, 0], vec![0, 1], vec![1, 0], vec![1, 1]];
        let chunks = |x: &NDBuffer| -> Vec<(Vec<u64>, NDBuffer)> {
            coords.iter().map(|cc| {
                let sel: Vec<AxisSel> = cc.iter().map(|&k| AxisSel::from(k as usize * 4..(k as usize * 4 + 4).min(6))).collect();
                (cc.clone(), x.get(&sel).unwrap())
            }).collect()
        };
        let want = ChunkBatch::from_chunks(&grid, chunks(&h), &HOST).unwrap();
        for (b, device) in [
            (ChunkBatch::from_chunks(&grid, chunks(&d), &DEV).unwrap(), true),
            (ChunkBatch::from_chunks(&grid, chunks(&d), &HOST).unwrap(), false),
        ] {
            assert_eq!(b.prototype().is_device(), device);
            for i in 0..4 {
                assert_eq!(c_bytes(&b.tensors().tensor(i).unwrap()), c_bytes(&want.tensors().tensor(i).unwrap()), "chunk {i}");
                assert_eq!(b.chunk(i).unwrap().shape(), want.chunk(i).unwrap().shape());
            }
        }
    }

    fn tensor_chunk_batch_device_zero_d_and_empty() {
        let grid = ChunkGrid::new(&[], &[], Dtype::FLOAT64).unwrap();
        let nd = NDBuffer::create(&DEV, &[], Dtype::FLOAT64, Order::C, Some(Scalar::from(2.5f64))).unwrap();
        let b = ChunkBatch::from_chunks(&grid, [(Vec::<u64>::new(), &nd)], &DEV).unwrap();
        assert_eq!(b.chunk(0).unwrap().as_scalar().unwrap(), Scalar::Float64(2.5));
        assert_eq!(b.batch().to_host().unwrap().num_columns(), 1);
        let grid = ChunkGrid::new(&[4, 4], &[2, 2], Dtype::BOOL).unwrap();
        let e = ChunkBatch::from_chunks(&grid, Vec::<(Vec<u64>, NDBuffer)>::new(), &DEV).unwrap();
        assert!(e.prototype().is_device() && e.is_empty());
        assert_eq!(e.batch().to_host().unwrap().num_rows(), 0);
        // No rows of huge cells: an overflow error, not a panic (host and device).
        for proto in [&HOST, &DEV] {
            let nd = NDBuffer::create(proto, &[0, 1 << 40, 1 << 40], Dtype::INT32, Order::C, None).unwrap();
            let e = nd.clone().into_tensor_rows().unwrap_err();
            assert!(e.to_string().contains("overflows"), "{e}");
        }
    }
}
