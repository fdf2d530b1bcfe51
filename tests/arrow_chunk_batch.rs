//! `ChunkBatch` on the host: every element type and byte order, chunks in every layout
//! (C, F, strided views, edge chunks given trimmed or full), padding with the fill
//! value, 0-d and empty grids, reading batches back (also after Arrow IPC and from
//! batches built by hand), one allocation for all columns, zero-copy chunk views, and
//! errors.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, UInt64Array};
use arrow_schema::{DataType as ArrowType, Field, Schema};
use devbuf::ElementType;
use devbuf::arrow::{
    Batch, CHUNK_COLUMN, CHUNK_GRID_METADATA_KEY, ChunkBatch, ChunkGrid, TensorType,
};
use devbuf::zarr::{AxisSel, BufferPrototype, Dtype, Endianness, NDBuffer, Order, Scalar};
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

#[path = "common/arrays.rs"]
mod arrays;
#[path = "common/random.rs"]
mod random;
use arrays::{Kind, c_bytes, dtypes, make};

const HOST: BufferPrototype = BufferPrototype::Host;

fn region(grid: &ChunkGrid, coords: &[u64]) -> Vec<AxisSel> {
    let extent = grid.chunk_extent(coords).unwrap();
    coords
        .iter()
        .zip(grid.chunk_shape())
        .zip(&extent)
        .map(|((&c, &s), &e)| {
            let a = c as usize * s;
            AxisSel::from(a..a + e)
        })
        .collect()
}

/// The chunk as zarr stores it: the chunk shape, the array's values, fill elsewhere.
fn padded_oracle(grid: &ChunkGrid, array: &NDBuffer, coords: &[u64]) -> NDBuffer {
    let native = Dtype::from(grid.dtype().element());
    let mut out = NDBuffer::create(
        &HOST,
        grid.chunk_shape(),
        native,
        Order::C,
        grid.fill_value(),
    )
    .unwrap();
    let extent = grid.chunk_extent(coords).unwrap();
    let sel: Vec<AxisSel> = extent.iter().map(|&e| AxisSel::from(0..e)).collect();
    out.set(&sel, &array.get(&region(grid, coords)).unwrap())
        .unwrap();
    out
}

fn all_coords(grid: &ChunkGrid) -> Vec<Vec<u64>> {
    let g = grid.grid_shape();
    let n: usize = g.iter().product();
    let mut out = Vec::new();
    let mut idx = vec![0u64; g.len()];
    for _ in 0..n {
        out.push(idx.clone());
        for k in (0..g.len()).rev() {
            idx[k] += 1;
            if idx[k] < g[k] as u64 {
                break;
            }
            idx[k] = 0;
        }
    }
    out
}

/// Checks a batch against the array it was cut from.
fn check_batch(batch: &ChunkBatch, grid: &ChunkGrid, array: &NDBuffer, coords: &[Vec<u64>]) {
    assert_eq!(batch.len(), coords.len());
    assert_eq!(batch.chunk_shape(), grid.chunk_shape());
    assert_eq!(batch.array_shape(), Some(grid.array_shape()));
    for (i, c) in coords.iter().enumerate() {
        assert_eq!(batch.coords(i), Some(&c[..]));
        let want = array.get(&region(grid, c)).unwrap();
        let got = batch.chunk(i).unwrap();
        assert_eq!(got.shape(), want.shape(), "chunk {c:?}");
        assert_eq!(c_bytes(&got), c_bytes(&want), "chunk {c:?}");
        let padded = batch.tensors().tensor(i).unwrap();
        assert_eq!(padded.shape(), grid.chunk_shape());
        assert_eq!(
            c_bytes(&padded),
            c_bytes(&padded_oracle(grid, array, c)),
            "padded chunk {c:?}"
        );
    }
    let rb = batch.batch().to_host().unwrap();
    assert_eq!(rb.num_rows(), coords.len());
    assert_eq!(rb.num_columns(), grid.chunk_shape().len() + 1);
    for d in 0..grid.chunk_shape().len() {
        let col = rb
            .column_by_name(&format!("coord_{d}"))
            .unwrap()
            .as_any()
            .downcast_ref::<UInt64Array>()
            .unwrap()
            .clone();
        let want: Vec<u64> = coords.iter().map(|c| c[d]).collect();
        assert_eq!(col.values().to_vec(), want);
    }
    let field = rb.schema().field_with_name(CHUNK_COLUMN).unwrap().clone();
    let t = TensorType::from_field(&field).unwrap();
    assert_eq!(t.shape(), grid.chunk_shape());
    assert_eq!(t.permutation(), None);
}

#[test]
fn every_dtype_every_chunk_layout() {
    let mut rng = SmallRng::seed_from_u64(11);
    for dtype in dtypes() {
        let array = make(&mut rng, &[5, 7], dtype, Kind::C);
        let fill = Scalar::from_le_bytes(dtype.element(), &{
            let mut b = vec![0u8; dtype.element().size()];
            rng.fill_bytes(&mut b);
            if dtype.element() == ElementType::Bool {
                b[0] &= 1;
            }
            b
        })
        .unwrap();
        let grid = ChunkGrid::new(&[5, 7], &[2, 3], dtype)
            .unwrap()
            .with_fill_value(fill);
        let coords = all_coords(&grid);
        assert_eq!(coords.len(), 9);
        // Chunks in every layout: views of the array (strided for a 2-d region), C and
        // F copies, and edge chunks given either trimmed or full-size (padded by hand).
        let chunks: Vec<(Vec<u64>, NDBuffer)> = coords
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let view = array.get(&region(&grid, c)).unwrap();
                let nd = match i % 4 {
                    0 => view,
                    1 => view.copy_order(Order::F).unwrap(),
                    2 => view.copy_order(Order::C).unwrap(),
                    _ => {
                        let p = padded_oracle(&grid, &array, c);
                        if dtype.byteorder() == Endianness::NATIVE {
                            p
                        } else {
                            p.astype(dtype).unwrap()
                        }
                    }
                };
                (c.clone(), nd)
            })
            .collect();
        let batch = ChunkBatch::from_chunks(&grid, chunks, &HOST).unwrap();
        assert!(!batch.prototype().is_device());
        assert_eq!(batch.tensors().tensor_type().element(), dtype.element());
        check_batch(&batch, &grid, &array, &coords);
        // Read back from its record batch (zero-copy) and from Arrow IPC bytes.
        let rb = batch.batch().as_host().unwrap().clone();
        let back = ChunkBatch::try_from(Batch::Host(rb.clone())).unwrap();
        check_batch(&back, &grid, &array, &coords);
        let bytes = serialize_to_vec(&rb).unwrap();
        let read = read_host(&arrow_buffer::Buffer::from_vec(bytes), rb.schema()).unwrap();
        check_batch(
            &ChunkBatch::try_from(Batch::Host(read)).unwrap(),
            &grid,
            &array,
            &coords,
        );
        let all = batch.tensors().rows(0, batch.len()).unwrap();
        assert_eq!(all.shape(), &[9, 2, 3]);
    }
}

#[test]
fn one_allocation_and_zero_copy_chunks() {
    let mut rng = SmallRng::seed_from_u64(12);
    let array = make(&mut rng, &[8, 8, 8], Dtype::FLOAT64, Kind::C);
    let grid = ChunkGrid::new(&[8, 8, 8], &[4, 4, 4], Dtype::FLOAT64).unwrap();
    let coords = all_coords(&grid);
    let chunks = coords
        .iter()
        .map(|c| (c.clone(), array.get(&region(&grid, c)).unwrap()));
    let batch = ChunkBatch::from_chunks(&grid, chunks, &HOST).unwrap();
    let rb = batch.batch().as_host().unwrap();
    let ptr = |a: &ArrayRef| -> usize {
        let d = a.to_data();
        let leaf = if d.child_data().is_empty() {
            d
        } else {
            d.child_data()[0].clone()
        };
        leaf.buffers()[0].as_ptr() as usize
    };
    let base = ptr(rb.column(0));
    assert_eq!(base % 64, 0);
    assert_eq!(
        ptr(rb.column(1)) - base,
        64,
        "coordinates: 8 rows x 8 bytes, 64-aligned"
    );
    assert_eq!(ptr(rb.column(2)) - base, 128);
    assert_eq!(
        ptr(rb.column(3)) - base,
        192,
        "chunk data after the coordinates"
    );
    for i in 0..batch.len() {
        let c = batch.chunk(i).unwrap();
        let l = c.as_ndarray_like();
        assert_eq!(
            l.memory.address() as usize + l.offset,
            base + 192 + i * 64 * 8,
            "chunk {i} is a view of the batch"
        );
    }
    check_batch(&batch, &grid, &array, &coords);
}

#[test]
fn bool_and_complex_chunks() {
    let mut rng = SmallRng::seed_from_u64(13);
    for (dtype, fill) in [
        (Dtype::BOOL, Scalar::Bool(true)),
        (
            Dtype::new(ElementType::Complex128, Endianness::Big),
            Scalar::Complex128(num_complex::Complex64::new(f64::NAN, -0.0)),
        ),
    ] {
        // Chunks of 3 x 3 booleans: rows do not start at byte boundaries.
        let array = make(&mut rng, &[7, 8], dtype, Kind::C);
        let grid = ChunkGrid::new(&[7, 8], &[3, 3], dtype)
            .unwrap()
            .with_fill_value(fill);
        let coords = all_coords(&grid);
        let chunks: Vec<_> = coords
            .iter()
            .rev()
            .map(|c| (c.clone(), array.get(&region(&grid, c)).unwrap()))
            .collect();
        let order: Vec<Vec<u64>> = coords.iter().rev().cloned().collect();
        let batch = ChunkBatch::from_chunks(&grid, chunks, &HOST).unwrap();
        check_batch(&batch, &grid, &array, &order);
        check_batch(
            &ChunkBatch::try_from(batch.batch().clone()).unwrap(),
            &grid,
            &array,
            &order,
        );
    }
}

#[test]
fn zero_d_and_empty_grids() {
    // A 0-d array has one chunk, at coordinates [].
    let grid = ChunkGrid::new(&[], &[], Dtype::INT16).unwrap();
    assert_eq!(grid.grid_shape(), Vec::<usize>::new());
    let nd = NDBuffer::from_ndarray(ndarray::arr0(-7i16));
    let batch = ChunkBatch::from_chunks(&grid, [(Vec::<u64>::new(), &nd)], &HOST).unwrap();
    assert_eq!(batch.len(), 1);
    assert_eq!(batch.batch().as_host().unwrap().num_columns(), 1);
    assert_eq!(
        batch.chunk(0).unwrap().as_scalar().unwrap(),
        Scalar::Int16(-7)
    );
    let back = ChunkBatch::try_from(batch.batch().clone()).unwrap();
    assert_eq!(back.coords(0), Some(&[][..]));
    // No chunks.
    let grid = ChunkGrid::new(&[4, 4], &[2, 2], Dtype::FLOAT32).unwrap();
    let empty = ChunkBatch::from_chunks(&grid, Vec::<(Vec<u64>, NDBuffer)>::new(), &HOST).unwrap();
    assert!(empty.is_empty());
    assert_eq!(empty.batch().as_host().unwrap().num_rows(), 0);
    assert_eq!(
        empty.tensors().rows(0, empty.len()).unwrap().shape(),
        &[0, 2, 2]
    );
    assert!(empty.chunk(0).is_err());
    let back = ChunkBatch::try_from(empty.batch().clone()).unwrap();
    assert!(back.is_empty());
    // A zero-length axis: the grid has no chunks, so any chunk is outside it.
    let grid = ChunkGrid::new(&[0, 4], &[2, 2], Dtype::UINT8).unwrap();
    assert_eq!(grid.grid_shape(), vec![0, 2]);
    let nd = NDBuffer::create(&HOST, &[2, 2], Dtype::UINT8, Order::C, None).unwrap();
    assert!(ChunkBatch::from_chunks(&grid, [(vec![0u64, 0], &nd)], &HOST).is_err());
    let none = ChunkBatch::from_chunks(&grid, Vec::<(Vec<u64>, NDBuffer)>::new(), &HOST).unwrap();
    assert_eq!(none.len(), 0);
}

#[test]
fn bad_chunks_are_errors() {
    let grid = ChunkGrid::new(&[5, 5], &[2, 2], Dtype::INT32).unwrap();
    let ok = NDBuffer::create(&HOST, &[2, 2], Dtype::INT32, Order::C, None).unwrap();
    let edge = NDBuffer::create(&HOST, &[1, 2], Dtype::INT32, Order::C, None).unwrap();
    let one = |c: Vec<u64>, nd: &NDBuffer| ChunkBatch::from_chunks(&grid, [(c, nd)], &HOST);
    assert!(one(vec![2, 0], &edge).is_ok());
    assert!(one(vec![2, 0], &ok).is_ok(), "a full-size edge chunk");
    let e = one(vec![0, 0], &edge).unwrap_err().to_string();
    assert!(e.contains("[1, 2]") && e.contains("[2, 2]"), "{e}");
    let e = one(vec![3, 0], &ok).unwrap_err().to_string();
    assert!(e.contains("outside the chunk grid"), "{e}");
    assert!(one(vec![0], &ok).is_err());
    assert!(one(vec![0, 0, 0], &ok).is_err());
    let f = NDBuffer::create(&HOST, &[2, 2], Dtype::FLOAT32, Order::C, None).unwrap();
    let e = one(vec![0, 0], &f).unwrap_err().to_string();
    assert!(e.contains("float32"), "{e}");
    assert!(ChunkGrid::new(&[5, 5], &[2, 0], Dtype::INT32).is_err());
    assert!(ChunkGrid::new(&[5], &[2, 2], Dtype::INT32).is_err());
    // A device prototype on a machine without a GPU is an error, not a panic.
    if !devbuf::cuda::is_available() {
        let e = ChunkBatch::from_chunks(&grid, [(vec![0u64, 0], &ok)], &BufferPrototype::Device(0))
            .unwrap_err();
        assert_eq!(e.kind(), devbuf::ErrorKind::CudaUnavailable, "{e}");
    }
}

fn hand_made(fields: Vec<Field>, columns: Vec<ArrayRef>, md: Option<&str>) -> RecordBatch {
    let mut schema = Schema::new(fields);
    if let Some(md) = md {
        schema = schema.with_metadata(HashMap::from([(
            CHUNK_GRID_METADATA_KEY.to_string(),
            md.to_string(),
        )]));
    }
    RecordBatch::try_new(Arc::new(schema), columns).unwrap()
}

#[test]
fn batches_from_elsewhere() {
    // A batch built by hand: F-order 2 x 3 chunks (a permuted tensor column), the
    // tensor column first, coordinate columns under other names, no grid metadata.
    let chunks = NDBuffer::from_memory(
        (0u8..24).collect::<Vec<_>>(),
        &[4, 2, 3],
        Dtype::UINT8,
        Order::C,
    )
    .unwrap();
    let per_chunk_f = chunks.transpose(Some(&[0, 2, 1])).unwrap(); // rows of [3, 2] chunks...
    let t = per_chunk_f.clone().into_tensor_rows().unwrap();
    assert_eq!(t.tensor_type().logical_shape(), vec![3, 2]);
    assert!(t.tensor_type().permutation().is_some());
    let x = Arc::new(UInt64Array::from(vec![0u64, 1, 0, 1])) as ArrayRef;
    let y = Arc::new(UInt64Array::from(vec![0u64, 0, 1, 1])) as ArrayRef;
    let rb = hand_made(
        vec![
            t.tensor_type().field("data", false).unwrap(),
            Field::new("y", ArrowType::UInt64, false),
            Field::new("x", ArrowType::UInt64, false),
        ],
        vec![t.storage().as_host().unwrap().clone(), y.clone(), x.clone()],
        None,
    );
    let b = ChunkBatch::try_from(Batch::Host(rb)).unwrap();
    assert_eq!(b.chunk_shape(), &[3, 2]);
    assert_eq!(b.array_shape(), None);
    assert_eq!(b.coords(2), Some(&[1u64, 0][..]));
    for i in 0..4 {
        assert_eq!(
            c_bytes(&b.chunk(i).unwrap()),
            c_bytes(&per_chunk_f.get(&[i.into()]).unwrap())
        );
    }
    let tf = t.tensor_type().field("data", false).unwrap();
    let storage = t.storage().as_host().unwrap().clone();
    let u64f = |n: &str| Field::new(n, ArrowType::UInt64, false);
    // Errors: no tensor column, two, a coordinate column of another type, too few.
    let cases: Vec<(RecordBatch, &str)> = vec![
        (
            hand_made(vec![u64f("x")], vec![x.clone()], None),
            "exactly one",
        ),
        (
            hand_made(
                vec![tf.clone(), tf.clone().with_name("b"), u64f("x"), u64f("y")],
                vec![storage.clone(), storage.clone(), x.clone(), y.clone()],
                None,
            ),
            "exactly one",
        ),
        (
            hand_made(
                vec![
                    tf.clone(),
                    Field::new("x", ArrowType::Int64, false),
                    u64f("y"),
                ],
                vec![
                    storage.clone(),
                    Arc::new(arrow_array::Int64Array::from(vec![0i64; 4])),
                    y.clone(),
                ],
                None,
            ),
            "Int64",
        ),
        (
            hand_made(
                vec![tf.clone(), u64f("x")],
                vec![storage.clone(), x.clone()],
                None,
            ),
            "coordinate columns",
        ),
        (
            hand_made(
                vec![tf.clone(), u64f("x"), u64f("y")],
                vec![storage.clone(), x.clone(), y.clone()],
                Some(r#"{"array_shape":[3,2],"chunk_shape":[3,2]}"#),
            ),
            "outside the chunk grid",
        ),
        (
            hand_made(
                vec![tf.clone(), u64f("x"), u64f("y")],
                vec![storage.clone(), x.clone(), y.clone()],
                Some(r#"{"array_shape":[6,4],"chunk_shape":[2,3]}"#),
            ),
            "does not match",
        ),
        (
            hand_made(
                vec![tf.clone(), u64f("x"), u64f("y")],
                vec![storage.clone(), x.clone(), y.clone()],
                Some("{"),
            ),
            CHUNK_GRID_METADATA_KEY,
        ),
        (
            hand_made(
                vec![
                    tf.clone(),
                    Field::new("x", ArrowType::UInt64, true),
                    u64f("y"),
                ],
                vec![
                    storage.clone(),
                    Arc::new(UInt64Array::from(vec![Some(0u64), None, Some(0), Some(1)])),
                    y.clone(),
                ],
                None,
            ),
            "null",
        ),
    ];
    for (rb, want) in cases {
        let e = ChunkBatch::try_from(Batch::Host(rb))
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{want}: {e}");
    }
    // With grid metadata, edge chunks are cut back.
    let rb = hand_made(
        vec![tf, u64f("x"), u64f("y")],
        vec![storage, x, y],
        Some(r#"{"array_shape":[5,3],"chunk_shape":[3,2]}"#),
    );
    let b = ChunkBatch::try_from(Batch::Host(rb)).unwrap();
    assert_eq!(b.chunk(3).unwrap().shape(), &[2, 1]);
    assert_eq!(b.tensors().tensor(3).unwrap().shape(), &[3, 2]);
    let got: Vec<_> = b.iter().map(|r| r.unwrap().1.shape().to_vec()).collect();
    assert_eq!(got, vec![vec![3, 2], vec![2, 2], vec![3, 1], vec![2, 1]]);
}

#[test]
fn random_grids() {
    let mut rng = SmallRng::seed_from_u64(14);
    for _ in 0..60 {
        let ndim = rng.random_range(0..4);
        let shape: Vec<usize> = (0..ndim).map(|_| rng.random_range(0..7)).collect();
        let chunk: Vec<usize> = (0..ndim).map(|_| rng.random_range(1..4)).collect();
        let dtypes = dtypes();
        let dtype = dtypes[rng.random_range(0..dtypes.len())];
        let array = make(&mut rng, &shape, dtype, Kind::C);
        let grid = ChunkGrid::new(&shape, &chunk, dtype).unwrap();
        let coords: Vec<Vec<u64>> = all_coords(&grid)
            .into_iter()
            .filter(|_| rng.random_ratio(2, 3))
            .collect();
        let chunks: Vec<_> = coords
            .iter()
            .map(|c| (c.clone(), array.get(&region(&grid, c)).unwrap()))
            .collect();
        let batch = ChunkBatch::from_chunks(&grid, chunks, &HOST).unwrap();
        check_batch(&batch, &grid, &array, &coords);
    }
}

#[path = "common/ipc_messages.rs"]
mod ipc_messages;
use ipc_messages::{read_host, serialize_to_vec};
