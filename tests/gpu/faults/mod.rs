//! Faults and load on the GPU (issue 11, items 5-7):
//!
//! * `ipc`: across processes, a producer that exits while a consumer holds its device
//!   memory and event handles, a consumer that dies holding them, handles opened twice
//!   and closed in either order;
//! * `memory`: device memory exhausted (at once and step by step), page-locked memory
//!   the OS refuses;
//! * `pool`: the page-locked staging pool at its bound (a transfer far larger than it, a
//!   thread that holds the only kit, zarr writes whose lanes fill it, a zarr read whose
//!   chunks do not fit it);
//! * `load`: 16 threads mixing every kind of work for a few seconds.
//!
//! Each case gives an error or valid data, never a crash or a hang, and every counter
//! devbuf keeps is back where it was afterwards ([`Held`]). Counting is exact only in a
//! context no other test uses: tests count on a dedicated context
//! (`Context::new_dedicated`), or run alone (`gpu_test_exclusive!`) when they must use
//! the primary context (the zarr engine and `BufferPrototype::Device` allocate there) or
//! fill the device. Waits are ordered causally (a child's report, a channel, a child's
//! exit) and every wait has a deadline.
//!
//! Run only these: `gpu-tests faults::` (`cargo test --features cuda-tests --test gpu
//! faults::`).

use devbuf::cuda::{Context, TransferConfig};

pub mod ipc;
pub mod load;
pub mod memory;
pub mod pool;

/// What a context holds by devbuf's own counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// Device memory of live buffers ([`Context::bytes_allocated`]; pooled buffers too).
    pub device_bytes: usize,
    /// Page-locked `HostBuffer`s ([`Context::host_bytes_allocated`]).
    pub host_bytes: usize,
    /// Staging kits lent out now (`TransferStats::pinned_in_use_bytes`).
    pub pinned_in_use: usize,
    /// Staging kits given up on because their stream failed
    /// (`TransferStats::staging_abandoned`: leaked on purpose, so it must not move).
    pub abandoned: u64,
    /// Memory of live buffers of the stream-ordered pool, as the driver reports it
    /// (`DevicePoolStats::used_bytes`).
    pub pool_used: u64,
}

/// The counters of `c` once its queued work (stream-ordered frees included) is done.
pub fn held(c: &Context) -> Held {
    c.synchronize().expect("synchronize before counting");
    let t = c.transfer_stats();
    Held {
        device_bytes: c.bytes_allocated(),
        host_bytes: c.host_bytes_allocated(),
        pinned_in_use: t.pinned_in_use_bytes,
        abandoned: t.staging_abandoned,
        pool_used: c.device_pool_stats().expect("device pool stats").used_bytes,
    }
}

/// Nothing held by a context that allocated nothing yet (or freed everything).
pub const NOTHING: Held = Held {
    device_bytes: 0,
    host_bytes: 0,
    pinned_in_use: 0,
    abandoned: 0,
    pool_used: 0,
};

/// Restores a context's transfer configuration when dropped (also when the test fails),
/// for the tests that must change the primary context's (all of them zarr tests).
#[cfg_attr(not(feature = "zarr"), allow(dead_code))]
pub struct RestoreConfig {
    ctx: Context,
    config: TransferConfig,
}

#[cfg_attr(not(feature = "zarr"), allow(dead_code))]
impl RestoreConfig {
    /// Remembers `ctx`'s configuration now.
    pub fn of(ctx: &Context) -> RestoreConfig {
        RestoreConfig {
            ctx: ctx.clone(),
            config: ctx.transfer_config(),
        }
    }
}

impl Drop for RestoreConfig {
    fn drop(&mut self) {
        let _ = self.ctx.set_transfer_config(self.config.clone());
    }
}

/// `"ok:<what>"` for a result that holds `what`, `"err:<message>"` for an error: how a
/// child reports an outcome that may legitimately be either.
pub fn outcome<T>(r: devbuf::Result<T>, what: impl FnOnce(T) -> String) -> String {
    match r {
        Ok(v) => format!("ok:{}", what(v)),
        Err(e) => format!("err:{}", e.to_string().replace('\n', " ")),
    }
}

/// `"equal"` when `got` is `want`, else `"differ"`.
pub fn same(got: &[u8], want: &[u8]) -> String {
    if got == want {
        "equal".into()
    } else {
        "differ".into()
    }
}
