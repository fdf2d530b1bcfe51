//! Robustness of the host zarr layer: random sequences of NDBuffer, ByteBuffer and store
//! operations with extreme arguments (huge and negative indices, steps and strides,
//! empty and broadcast views, every data type and byte order) are errors or results,
//! never panics. Deterministic (seeded) and fast.

use std::panic::{AssertUnwindSafe, catch_unwind};

use devbuf::ElementType;
use devbuf::zarr::{
    AxisSel, BufferPrototype, ByteBuffer, ByteRequest, Dtype, Endianness, MemoryStore, NDBuffer,
    Order, Scalar, Slice, Store,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Mostly small values, sometimes the extremes.
fn size(rng: &mut SmallRng) -> usize {
    const EXTREME: [usize; 12] = [
        7,
        8,
        63,
        1 << 31,
        1 << 32,
        1 << 62,
        isize::MAX as usize,
        usize::MAX / 2 + 1,
        usize::MAX - 1,
        usize::MAX,
        16,
        64,
    ];
    if rng.random_ratio(3, 4) {
        rng.random_range(0..6)
    } else {
        EXTREME[rng.random_range(0..EXTREME.len())]
    }
}

fn signed(rng: &mut SmallRng) -> isize {
    const EXTREME: [isize; 8] = [
        isize::MAX,
        isize::MIN,
        isize::MIN + 1,
        1 << 40,
        -(1 << 40),
        7,
        -7,
        -1,
    ];
    if rng.random_ratio(3, 4) {
        rng.random_range(-6i64..7) as isize
    } else {
        EXTREME[rng.random_range(0..EXTREME.len())]
    }
}

fn selector(rng: &mut SmallRng) -> AxisSel {
    match rng.random_range(0..4) {
        0 => AxisSel::Index(signed(rng)),
        1 => AxisSel::Range {
            start: size(rng),
            end: size(rng),
            step: size(rng),
        },
        2 => AxisSel::Slice(Slice::new(
            rng.random_bool(0.7).then(|| signed(rng)),
            rng.random_bool(0.7).then(|| signed(rng)),
            signed(rng),
        )),
        _ => AxisSel::Full,
    }
}

fn selection(rng: &mut SmallRng) -> Vec<AxisSel> {
    (0..rng.random_range(0..4)).map(|_| selector(rng)).collect()
}

fn dtype(rng: &mut SmallRng) -> Dtype {
    let t = ElementType::ALL[rng.random_range(0..ElementType::ALL.len())];
    if rng.random_bool(0.5) {
        Dtype::new(t, Endianness::Big)
    } else {
        Dtype::new(t, Endianness::Little)
    }
}

fn scalar(rng: &mut SmallRng) -> Scalar {
    let t = ElementType::ALL[rng.random_range(0..ElementType::ALL.len())];
    let mut b = vec![0u8; t.size()];
    rng.fill(&mut b[..]);
    Scalar::from_le_bytes(t, &b).unwrap()
}

/// One random operation on `a`; `Some` is a new array to carry on with.
fn step(rng: &mut SmallRng, a: &NDBuffer) -> Option<NDBuffer> {
    match rng.random_range(0..15) {
        0 => a.get(&selection(rng)).ok(),
        1 => {
            let s: Vec<isize> = (0..rng.random_range(0..4)).map(|_| signed(rng)).collect();
            a.reshape(&s).ok()
        }
        2 => {
            let s: Vec<usize> = (0..rng.random_range(0..4)).map(|_| size(rng)).collect();
            a.transpose(Some(&s)).ok()
        }
        3 => {
            let s: Vec<usize> = (0..rng.random_range(0..3)).map(|_| size(rng)).collect();
            a.squeeze(&s).ok()
        }
        4 => a.astype(dtype(rng)).ok(),
        5 => {
            let mut b = a.clone();
            b.set_scalar(&selection(rng), scalar(rng)).ok().map(|_| b)
        }
        6 => {
            let mut b = a.clone();
            let v = a.get(&[selector(rng)]).unwrap_or_else(|_| a.clone());
            b.set(&selection(rng), &v).ok().map(|_| b)
        }
        7 => {
            let _ = a.all_equal(Some(scalar(rng)), rng.random_bool(0.5));
            None
        }
        8 => {
            let _ = (
                a.as_scalar(),
                a.to_string(),
                a.to_buffer(),
                a.shape().first(),
            );
            None
        }
        9 => a.copy_order(Order::F).ok(),
        10 => {
            // A view of the same memory with arbitrary strides and offset (small
            // shapes: a huge broadcast view is legal, but walking it takes forever).
            let m = a.as_ndarray_like().memory.clone();
            let shape: Vec<usize> = (0..rng.random_range(0..4)).map(|_| size(rng) % 7).collect();
            let extra = rng.random_range(0..2);
            let strides: Vec<usize> = (0..shape.len() + extra).map(|_| size(rng)).collect();
            NDBuffer::from_parts(m, dtype(rng), &shape, &strides, size(rng)).ok()
        }
        11 => {
            let b = a.to_buffer().ok()?;
            let shape: Vec<usize> = (0..rng.random_range(0..4)).map(|_| size(rng)).collect();
            NDBuffer::from_memory(b.into_memory(), &shape, dtype(rng), Order::C).ok()
        }
        12 => {
            let _ = (
                a.as_array_view::<u8>().map(|v| v.len()),
                a.as_array_view::<f32>().map(|v| v.len()),
                a.to_ndarray::<i64>(),
            );
            None
        }
        13 => {
            let mut b = a.clone();
            b.set_scalar(&[], scalar(rng)).ok().map(|_| b)
        }
        _ => {
            // Broadcast views of tiny or of astronomically many elements (2^61 and more:
            // no machine has the address space for a copy): every operation either
            // works or says the result is too large, and none walks the elements
            // needlessly.
            let shape: Vec<usize> = (0..rng.random_range(1..4))
                .map(|_| [1usize, 2, 3, 1 << 61, 1 << 62][rng.random_range(0..5)])
                .collect();
            let v =
                NDBuffer::from_parts(vec![0u8; 16], dtype(rng), &shape, &vec![0; shape.len()], 0)
                    .ok()?;
            let _ = (v.to_string(), v.as_array_view::<u8>().map(|v| v.len()));
            let _ = (
                v.astype(Dtype::COMPLEX128),
                v.to_buffer(),
                v.copy_order(Order::C),
            );
            let _ = v.all_equal(Some(scalar(rng)), true);
            let _ = (v.reshape(&[-1]), v.get(&[selector(rng)]));
            None
        }
    }
}

#[test]
fn ndbuffer_operations_never_panic() {
    let mut rng = SmallRng::seed_from_u64(0x5eed);
    for it in 0..3000 {
        let shape: Vec<usize> = (0..rng.random_range(0..4))
            .map(|_| rng.random_range(0..5))
            .collect();
        let order = if rng.random_bool(0.5) {
            Order::C
        } else {
            Order::F
        };
        let fill = Some(scalar(&mut rng));
        let mut a =
            NDBuffer::create(&BufferPrototype::Host, &shape, dtype(&mut rng), order, fill).unwrap();
        for k in 0..6 {
            let before = format!("{:?}", a);
            match catch_unwind(AssertUnwindSafe(|| step(&mut rng, &a))) {
                Ok(Some(b)) if rng.random_bool(0.7) => a = b,
                Ok(_) => {}
                Err(_) => panic!("iteration {it}, step {k} panicked on {before}"),
            }
        }
    }
}

#[test]
fn buffer_store_and_dtype_parsing_never_panic() {
    let mut rng = SmallRng::seed_from_u64(9);
    let store = MemoryStore::new();
    let texts = [
        "",
        ">",
        "<f",
        "f4x",
        "é",
        "|?",
        ">c16",
        "c32",
        "u+2",
        "=b1",
        "i٣",
        "<\u{1F600}4",
        "f0",
        "i-1",
        "u99999999999999999999",
    ];
    for it in 0..3000 {
        let len = rng.random_range(0..10u8);
        let mut b = ByteBuffer::from((0..len).collect::<Vec<u8>>());
        let r = catch_unwind(AssertUnwindSafe(|| {
            let _ = b.get(selector(&mut rng));
            let v = ByteBuffer::from(vec![1u8; rng.random_range(0..5)]);
            let _ = b.set(selector(&mut rng), &v);
            let key = format!("a/k{}", it % 7);
            store.set(&key, &b).unwrap();
            let req = match rng.random_range(0..3) {
                0 => ByteRequest::Range {
                    start: size(&mut rng) as u64,
                    end: size(&mut rng) as u64,
                },
                1 => ByteRequest::Offset(size(&mut rng) as u64),
                _ => ByteRequest::Suffix(size(&mut rng) as u64),
            };
            let _ = store.get(&key, &BufferPrototype::Host, Some(req));
            let _ = store.list_dir(["", "/", "a", "a/k1/", "//"][rng.random_range(0..5)]);
            let _ = texts[rng.random_range(0..texts.len())].parse::<Dtype>();
        }));
        assert!(r.is_ok(), "iteration {it} panicked");
    }
}
