//! Shared helpers of the GPU tests.

#![allow(dead_code)]

pub use crate::random::{below, random_bytes, rng};
use devbuf::cuda::Context;

/// Declares GPU tests: each runs with `--features cuda-tests` and is ignored otherwise.
/// They run in parallel with each other (they share [`shared`]).
macro_rules! gpu_test {
    ($($(#[$m:meta])* fn $name:ident() $body:block)*) => {
        $(
            $(#[$m])*
            #[test]
            #[cfg_attr(
                not(feature = "cuda-tests"),
                ignore = "GPU test: run with --features cuda-tests on a machine with a GPU"
            )]
            fn $name() {
                let _shared = crate::common::shared();
                $body
            }
        )*
    };
}

/// Declares GPU tests that must run alone ([`exclusive`]): tests that hold a stream with
/// a blocked host function (`StreamGate`). While such a stream is held, device-wide
/// synchronising calls of other tests (`cuMemFree`, `cuModuleLoadData`, ...) wait for it,
/// possibly while holding a lock the holder needs to let the stream go.
macro_rules! gpu_test_exclusive {
    ($($(#[$m:meta])* fn $name:ident() $body:block)*) => {
        $(
            $(#[$m])*
            #[test]
            #[cfg_attr(
                not(feature = "cuda-tests"),
                ignore = "GPU test: run with --features cuda-tests on a machine with a GPU"
            )]
            fn $name() {
                let _alone = crate::common::exclusive();
                $body
            }
        )*
    };
}

static RUN_LOCK: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Held by every ordinary GPU test.
pub fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    RUN_LOCK.read().unwrap_or_else(|p| p.into_inner())
}

/// Held by tests that must run alone.
pub fn exclusive() -> std::sync::RwLockWriteGuard<'static, ()> {
    RUN_LOCK.write().unwrap_or_else(|p| p.into_inner())
}

/// The primary context of device 0.
pub fn ctx() -> Context {
    Context::new(0).expect("GPU tests need a CUDA device")
}

/// The primary context of device 1, or `None` (printing why) on a one-GPU machine.
pub fn second_ctx(test: &str) -> Option<Context> {
    let n = devbuf::cuda::device_count();
    if n < 2 {
        println!("SKIPPED {test}: needs 2 GPUs, this machine has {n}");
        eprintln!("SKIPPED {test}: needs 2 GPUs, this machine has {n}");
        None
    } else {
        Some(Context::new(1).expect("device 1"))
    }
}

/// `full`, or `small` when `DEVBUF_TEST_SMALL` is set (to anything but `0`): the slow
/// kernel tests use it so that they finish under compute-sanitizer's racecheck,
/// synccheck and initcheck, which check every access (`run.sh sanitizer` sets it).
pub fn test_size(full: usize, small: usize) -> usize {
    if small_sizes() { small } else { full }
}

/// Whether `DEVBUF_TEST_SMALL` asks for small sizes ([`test_size`]).
pub fn small_sizes() -> bool {
    std::env::var("DEVBUF_TEST_SMALL").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Fast deterministic pseudo-random bytes for large buffers (xorshift64*; never all
/// zero), where `random_bytes` would be slow.
pub fn fast_random(n: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; n];
    let mut x = seed | 1;
    for chunk in v.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
    v
}

/// A batch serialized as Arrow IPC into device memory of `c`'s device
/// (`serialize_record_batch` to `BufferPrototype::Device`): host batches cross PCIe
/// once, device batches are copied device to device.
pub fn to_device_message(
    b: impl Into<devbuf::arrow::Batch>,
    c: &Context,
) -> devbuf::Result<devbuf::cuda::DeviceBuffer> {
    // A host batch goes into `c` itself (a dedicated context too), a device batch is
    // serialized in its own context.
    let b = b.into();
    if let devbuf::arrow::Batch::Host(rb) = &b {
        return devbuf::arrow::serialize_record_batch_on(rb, c);
    }
    let proto = devbuf::zarr::BufferPrototype::Device(c.ordinal());
    match devbuf::arrow::serialize_record_batch(&b, &proto)? {
        devbuf::memory::Memory::Device(d) => Ok(d),
        devbuf::memory::Memory::Host(_) => unreachable!("serialized for a device"),
    }
}

/// `read_record_batch` of a message in device memory, as the device batch it always is.
pub fn read_device(
    message: &devbuf::cuda::DeviceBuffer,
    schema: arrow_schema::SchemaRef,
) -> devbuf::Result<devbuf::arrow::DeviceRecordBatch> {
    let m = devbuf::memory::Memory::Device(message.clone());
    match devbuf::arrow::read_record_batch(&m, schema)? {
        devbuf::arrow::Batch::Device(d) => Ok(d),
        devbuf::arrow::Batch::Host(_) => unreachable!("device memory reads to a device batch"),
    }
}
