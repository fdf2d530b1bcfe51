//! The transfer engine: host<->device copies at page-locked speed from ordinary memory,
//! many small pieces in few DMA transfers, and stream-ordered asynchronous copies.
//!
//! Every context has one engine, created on first use. [`DeviceBuffer::copy_from_host`]
//! and [`DeviceBuffer::copy_to_host`] go through it; so do [`copy_many_from_host`],
//! [`copy_many_to_host`] and the `*_async` copies. `docs/transfer.md` explains the
//! design and the measurements behind the defaults.
//!
//! | caller's memory | size | path |
//! |---|---|---|
//! | page-locked ([`HostBuffer`](crate::cuda::HostBuffer) or registered) | any | one driver copy (DMA straight from / into it) |
//! | ordinary | below [`TransferConfig::staging_min_bytes`] | one driver copy |
//! | ordinary | from `staging_min_bytes` on | staging lanes: CPU copies into page-locked buffers overlapped with DMA, on several threads and streams |
//! | ordinary, opt-in | from [`TransferConfig::register_min_bytes`] on | register the pages with the driver, one DMA, unregister |
//!
//! The engine's configuration ([`Context::set_transfer_config`]) and its counters
//! ([`Context::transfer_stats`]) are per context.
//!
//! [`DeviceBuffer::copy_from_host`]: crate::cuda::DeviceBuffer::copy_from_host
//! [`DeviceBuffer::copy_to_host`]: crate::cuda::DeviceBuffer::copy_to_host_into

mod engine;
mod lane;
mod pending;
mod plan;
mod staging;

use std::sync::atomic::Ordering;

pub(crate) use engine::EngineCell;
pub use lane::as_lease_holder;
pub use lane::{SlotUploads, UploadLane};
pub use pending::{HostSink, HostSource, Pending, ScopedPending, TransferScope, scope};

use self::engine::{Engine, TransferGrant};
use self::plan::{Dir, PieceSpec};
use super::buffer::DeviceBuffer;
use super::context::Context;
use super::driver::transfer::HostMemoryKind;
use crate::error::{Error, Result};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// How a copy that needs no staging is issued.
///
/// ```no_run
/// use devbuf_core::cuda::{Context, DirectMode, TransferConfig};
/// let ctx = Context::new(0)?;
/// ctx.set_transfer_config(TransferConfig { direct: DirectMode::Sync, ..ctx.transfer_config() })?;
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DirectMode {
    /// The driver's synchronous call (`cuMemcpyHtoD`, `cuMemcpyDtoH`) on the legacy
    /// default stream. Host->device from ordinary memory it may return before the DMA
    /// finished (the driver's staging holds the data; later work on the legacy stream
    /// and devbuf's streams is ordered after it).
    Sync,
    /// An asynchronous call on a stream devbuf keeps for the purpose, then a
    /// synchronisation of that stream: complete on return. Measured about twice as fast
    /// as `Sync` for 4 KiB copies on an H200.
    #[default]
    Stream,
}

/// How copies of ordinary (pageable) host memory are done.
///
/// ```no_run
/// use devbuf_core::cuda::{Context, PageableMode, TransferConfig};
/// let ctx = Context::new(0)?;
/// // Register large ordinary buffers instead of staging them, from 256 MiB on:
/// ctx.set_transfer_config(TransferConfig {
///     register_min_bytes: Some(256 << 20),
///     pageable: PageableMode::Auto,
///     ..ctx.transfer_config()
/// })?;
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PageableMode {
    /// By size: the driver below [`TransferConfig::staging_min_bytes`], staging lanes
    /// above, registration from [`TransferConfig::register_min_bytes`] if set.
    #[default]
    Auto,
    /// Always the driver's own copy (what devbuf did before the engine; for comparison).
    Driver,
    /// Always the staging lanes (for measurements).
    Staged,
    /// Always registration with `cuMemHostRegister` (for measurements).
    Registered,
}

/// How the packed pieces of a batched copy reach their destinations on the device.
///
/// ```no_run
/// use devbuf_core::cuda::{Context, ScatterMode, TransferConfig};
/// let ctx = Context::new(0)?;
/// // Errors on drivers older than CUDA 12.8:
/// let _ = ctx.set_transfer_config(TransferConfig { scatter: ScatterMode::MemcpyBatch, ..ctx.transfer_config() });
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScatterMode {
    /// One DMA of the packed buffer into device scratch memory, then devbuf's
    /// `devbuf_copy_segments` kernel copies each piece to its place (device->host: the
    /// kernel gathers, then one DMA).
    #[default]
    Kernel,
    /// One `cuMemcpyBatchAsync` call per packed buffer, one entry per piece (needs a
    /// driver for CUDA 12.8 or newer).
    MemcpyBatch,
}

/// Tuning of a context's transfer engine. See `docs/transfer.md` for the measurements
/// behind the defaults.
///
/// ```no_run
/// use devbuf_core::cuda::{Context, TransferConfig};
/// let ctx = Context::new(0)?;
/// ctx.set_transfer_config(TransferConfig { lanes: 8, ..TransferConfig::default() })?;
/// assert_eq!(ctx.transfer_config().lanes, 8);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferConfig {
    /// Staging lanes per transfer (each a thread, a stream and two page-locked
    /// buffers); the calling thread is one of them. Default: the number of CPUs, at most
    /// 16. `1..=256`.
    pub lanes: usize,
    /// Size of one page-locked staging buffer (each lane has two). Default 4 MiB
    /// (measured: 16 MiB was slower). `64 KiB..=1 GiB`.
    pub chunk_bytes: usize,
    /// Smallest piece a single staged copy is cut into when it is too small to give
    /// every lane two full buffers. Default 256 KiB. `4 KiB..=chunk_bytes`.
    pub min_chunk_bytes: usize,
    /// Copies of ordinary memory at least this long go through the staging lanes;
    /// shorter ones through one driver call. Default 4 MiB (the crossover measured on
    /// an H200, see `docs/transfer.md`).
    pub staging_min_bytes: usize,
    /// Copies of ordinary memory at least this long register the caller's pages with
    /// `cuMemHostRegister` instead of staging (`None`: never). Default `None`:
    /// registering 1 GiB took 44 ms on the H200, longer than staging it.
    pub register_min_bytes: Option<usize>,
    /// Most page-locked staging memory the engine holds (idle and in use). Default
    /// 512 MiB (the zarr read engine stages through the same pool: 16 CPU decode workers x
    /// 2 x 4 MiB plus two GPU decode workers x 2 x 65 MiB). At least `2 * chunk_bytes`.
    pub max_pinned_bytes: usize,
    /// How copies without staging are issued.
    pub direct: DirectMode,
    /// How ordinary memory is copied.
    pub pageable: PageableMode,
    /// How batched pieces are scattered on the device.
    pub scatter: ScatterMode,
}

impl Default for TransferConfig {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(4);
        TransferConfig {
            lanes: cpus.clamp(1, 16),
            chunk_bytes: 4 * MIB,
            min_chunk_bytes: 256 * KIB,
            staging_min_bytes: 4 * MIB,
            register_min_bytes: None,
            max_pinned_bytes: 512 * MIB,
            direct: DirectMode::default(),
            pageable: PageableMode::default(),
            scatter: ScatterMode::default(),
        }
    }
}

impl TransferConfig {
    /// Checks the bounds documented on each field ([`Context::set_transfer_config`]
    /// calls it).
    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::invalid(format!("TransferConfig: {m}")));
        if !(1..=256).contains(&self.lanes) {
            return bad(format!("lanes must be 1..=256, got {}", self.lanes));
        }
        if !(64 * KIB..=1024 * MIB).contains(&self.chunk_bytes) {
            return bad(format!(
                "chunk_bytes must be 65536..=1073741824, got {}",
                self.chunk_bytes
            ));
        }
        if self.min_chunk_bytes < 4 * KIB || self.min_chunk_bytes > self.chunk_bytes {
            return bad(format!(
                "min_chunk_bytes must be 4096..=chunk_bytes ({}), got {}",
                self.chunk_bytes, self.min_chunk_bytes
            ));
        }
        if self.max_pinned_bytes < 2 * self.chunk_bytes {
            return bad(format!(
                "max_pinned_bytes ({}) must hold at least one lane's two buffers (2 * chunk_bytes = {})",
                self.max_pinned_bytes,
                2 * self.chunk_bytes
            ));
        }
        if self.register_min_bytes == Some(0) {
            return bad("register_min_bytes must be positive (use None to disable)".into());
        }
        Ok(())
    }
}

/// What a context's transfer engine holds and has done ([`Context::transfer_stats`]).
///
/// ```no_run
/// let ctx = devbuf_core::cuda::Context::new(0)?;
/// let s = ctx.transfer_stats();
/// println!("page-locked staging: {} bytes now, {} at most, bound {}",
///          s.pinned_bytes, s.pinned_high_water_bytes, s.pinned_limit_bytes);
/// # Ok::<(), devbuf_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TransferStats {
    /// Page-locked staging memory the pool holds now (idle and in use).
    pub pinned_bytes: usize,
    /// Of which lanes use now.
    pub pinned_in_use_bytes: usize,
    /// The most page-locked staging memory the pool ever held.
    pub pinned_high_water_bytes: usize,
    /// The most that was ever in use at once.
    pub pinned_in_use_high_water_bytes: usize,
    /// The pool's bound ([`TransferConfig::max_pinned_bytes`]).
    pub pinned_limit_bytes: usize,
    /// Device scratch memory of the staging kits (used by batched copies).
    pub device_scratch_bytes: usize,
    /// Staging kits (two buffers each) allocated so far.
    pub staging_allocations: u64,
    /// Times a lane reused an idle kit.
    pub staging_reuses: u64,
    /// Times a caller waited because the pool was at its bound.
    pub staging_waits: u64,
    /// Kits given up because their stream failed (leaked on purpose).
    pub staging_abandoned: u64,
    /// Worker threads started.
    pub worker_threads: usize,
    /// Copies done by one driver call.
    pub direct_copies: u64,
    /// Single copies done through the staging lanes.
    pub staged_copies: u64,
    /// Copies done by registering the caller's memory.
    pub registered_copies: u64,
    /// Calls of [`copy_many_from_host`] / [`copy_many_to_host`] that went through the
    /// staging lanes.
    pub batched_copies: u64,
    /// Pieces in those calls.
    pub batched_pieces: u64,
    /// Packed buffers scattered or gathered by the kernel.
    pub kernel_chunks: u64,
    /// Packed buffers moved with `cuMemcpyBatchAsync`.
    pub memcpy_batch_chunks: u64,
    /// Bytes moved through staging (single and batched).
    pub staged_bytes: u64,
}

pub(crate) fn engine(ctx: &Context) -> &Engine {
    ctx.inner.transfer.get(ctx)
}

impl Context {
    /// The transfer engine's configuration.
    ///
    /// ```no_run
    /// let ctx = devbuf_core::cuda::Context::new(0)?;
    /// println!("{:?}", ctx.transfer_config());
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn transfer_config(&self) -> TransferConfig {
        engine(self).config()
    }

    /// Replaces the transfer engine's configuration (checked first: an invalid one is
    /// an error and changes nothing). Transfers already running finish with the old one,
    /// except that one still waiting for a staging kit that no longer fits a lowered
    /// [`TransferConfig::max_pinned_bytes`] fails with an error naming both sizes
    /// (rather than wait for memory the bound will never allow). Lowering
    /// `max_pinned_bytes` frees idle staging memory now.
    ///
    /// Errors: an invalid configuration, or [`ScatterMode::MemcpyBatch`] on a driver
    /// without `cuMemcpyBatchAsync`.
    ///
    /// ```no_run
    /// use devbuf_core::cuda::{Context, PageableMode, TransferConfig};
    /// let ctx = Context::new(0)?;
    /// // Compare with the driver's own handling of ordinary memory:
    /// ctx.set_transfer_config(TransferConfig { pageable: PageableMode::Driver, ..ctx.transfer_config() })?;
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn set_transfer_config(&self, config: TransferConfig) -> Result<()> {
        config.validate()?;
        if config.scatter == ScatterMode::MemcpyBatch
            && !super::driver::transfer::memcpy_batch_available()
        {
            return Err(Error::unavailable(
                "ScatterMode::MemcpyBatch needs cuMemcpyBatchAsync (a driver for CUDA 12.8 or newer)",
            ));
        }
        engine(self).set_config(config);
        Ok(())
    }

    /// The transfer engine's pool usage and counters.
    ///
    /// ```no_run
    /// use devbuf_core::cuda::Context;
    /// let ctx = Context::new(0)?;
    /// let d = ctx.allocate(64 << 20)?;
    /// d.copy_from_host(0, &vec![7u8; 64 << 20])?; // ordinary memory: staged
    /// let s = ctx.transfer_stats();
    /// assert!(s.staged_copies >= 1);
    /// assert!(s.pinned_bytes <= s.pinned_limit_bytes);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn transfer_stats(&self) -> TransferStats {
        let Some(e) = self.inner.transfer.get_if_started() else {
            return TransferStats {
                pinned_limit_bytes: TransferConfig::default().max_pinned_bytes,
                ..TransferStats::default()
            };
        };
        let p = e.shared.pool.snapshot();
        let c = &e.shared.counters;
        let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        TransferStats {
            pinned_bytes: p.held,
            pinned_in_use_bytes: p.in_use,
            pinned_high_water_bytes: p.high_water,
            pinned_in_use_high_water_bytes: p.in_use_high_water,
            pinned_limit_bytes: p.limit,
            device_scratch_bytes: e.shared.scratch_bytes.load(Ordering::SeqCst),
            staging_allocations: p.allocations,
            staging_reuses: p.reuses,
            staging_waits: p.waits,
            staging_abandoned: p.abandoned,
            worker_threads: e.worker_count(),
            direct_copies: ld(&c.direct),
            staged_copies: ld(&c.staged),
            registered_copies: ld(&c.registered),
            batched_copies: ld(&c.batched),
            batched_pieces: ld(&c.batched_pieces),
            kernel_chunks: ld(&c.kernel_chunks),
            memcpy_batch_chunks: ld(&c.memcpy_batch_chunks),
            staged_bytes: ld(&c.staged_bytes),
        }
    }

    /// Frees the idle page-locked staging memory (and its device scratch memory) of
    /// the transfer engine. Returns the page-locked bytes freed. Later transfers
    /// allocate again.
    ///
    /// ```no_run
    /// let ctx = devbuf_core::cuda::Context::new(0)?;
    /// ctx.trim_transfer_pool();
    /// assert_eq!(ctx.transfer_stats().pinned_in_use_bytes, 0);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn trim_transfer_pool(&self) -> usize {
        match self.inner.transfer.get_if_started() {
            Some(e) => e.shared.pool.trim(),
            None => 0,
        }
    }

    /// Starts the transfer engine's worker threads and allocates one staging kit per
    /// lane now, so that the first large copy does not pay for them (allocating
    /// page-locked memory is slow).
    ///
    /// ```no_run
    /// let ctx = devbuf_core::cuda::Context::new(0)?;
    /// ctx.warm_up_transfers()?;
    /// assert!(ctx.transfer_stats().pinned_bytes > 0);
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn warm_up_transfers(&self) -> Result<()> {
        self.bind()?;
        engine(self).warm_up()
    }
}

/// Host->device copy of `src` to device address `dev` of `ctx`, complete on return.
/// The caller has validated the device range.
pub(crate) fn htod(ctx: &Context, dev: u64, src: &[u8]) -> Result<()> {
    // Safety: `src` is borrowed for the whole call and only read; the call is
    // synchronous (`on: None`), so nothing uses it after we return.
    unsafe {
        engine(ctx).copy(
            ctx,
            TransferGrant {
                dir: Dir::HtoD,
                host: src.as_ptr() as *mut u8,
                len: src.len(),
                dev,
                on: None,
                known: None,
            },
        )
    }
}

/// Device->host copy from device address `dev` of `ctx` into `dst`, complete on return.
/// `page_locked`: the caller knows `dst` is page-locked (skips the driver query).
pub(crate) fn dtoh(ctx: &Context, dst: &mut [u8], dev: u64, page_locked: bool) -> Result<()> {
    // Safety: `dst` is borrowed mutably for the whole call; the call is synchronous, so
    // every write to it has completed when we return.
    unsafe {
        engine(ctx).copy(
            ctx,
            TransferGrant {
                dir: Dir::DtoH,
                host: dst.as_mut_ptr(),
                len: dst.len(),
                dev,
                on: None,
                known: page_locked.then_some(HostMemoryKind::PageLocked),
            },
        )
    }
}

/// Checks every piece of a batched copy; returns the context they share and the
/// planner's view of the pieces (`None` when no piece has bytes).
fn validate_pieces<'a>(
    what: &'static str,
    count: usize,
    piece: impl Fn(usize) -> (usize, &'a DeviceBuffer, usize),
    writes_device: bool,
) -> Result<Option<(Context, Vec<PieceSpec>)>> {
    let mut first: Option<(usize, Context)> = None;
    let mut specs = Vec::with_capacity(count);
    for i in 0..count {
        let (len, buf, offset) = piece(i);
        let end = offset.checked_add(len);
        if end.is_none_or(|e| e > buf.len()) {
            return Err(Error::invalid(format!(
                "{what}: piece {i} (of {count}) out of bounds: offset {offset} + length {len} = {} \
                 exceeds the device buffer's size {} (valid: offset + length <= {})",
                end.map_or_else(|| "overflow".to_string(), |e| e.to_string()),
                buf.len(),
                buf.len()
            )));
        }
        if writes_device && !buf.is_mutable() {
            return Err(Error::ReadOnly(format!(
                "{what}: piece {i} (of {count}) targets a read-only device buffer of {} bytes",
                buf.len()
            )));
        }
        specs.push(PieceSpec {
            len,
            // In range: `offset + len <= buf.len()` was checked above.
            dev: buf.address() + offset as u64,
        });
        if len == 0 {
            continue;
        }
        match &first {
            None => first = Some((i, buf.context().clone())),
            Some((j, ctx)) if !ctx.same_as(buf.context()) => {
                return Err(Error::invalid(format!(
                    "{what}: piece {i} (of {count}) is on device {} in another context than piece {j} \
                     (device {}); all pieces of one call must share a context",
                    buf.context().ordinal(),
                    ctx.ordinal()
                )));
            }
            Some(_) => {}
        }
    }
    Ok(first.map(|(_, ctx)| (ctx, specs)))
}

/// Copies many host pieces into device buffers in few DMA transfers: each
/// `(src, dst, offset)` copies all of `src` into `dst` at `offset`.
///
/// The pieces are packed into page-locked staging buffers by several threads, each
/// buffer goes to the device in one DMA, and a kernel scatters the pieces to their
/// places ([`ScatterMode`]). Every range is validated before anything is copied; an
/// error names the piece. Zero-length pieces are allowed. All pieces with bytes must
/// belong to one context. Overlapping destination ranges end up with the bytes of one
/// of the overlapping pieces, unspecified which. Complete on return.
///
/// ```no_run
/// use devbuf_core::cuda::{self, Context};
/// let ctx = Context::new(0)?;
/// let chunks: Vec<Vec<u8>> = (0..1000).map(|i| vec![i as u8; 64 << 10]).collect();
/// let dev = ctx.allocate(1000 * (64 << 10))?;
/// let pieces: Vec<(&[u8], &cuda::DeviceBuffer, usize)> =
///     chunks.iter().enumerate().map(|(i, c)| (&c[..], &dev, i * (64 << 10))).collect();
/// cuda::copy_many_from_host(&pieces)?;
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub fn copy_many_from_host(pieces: &[(&[u8], &DeviceBuffer, usize)]) -> Result<()> {
    let Some((ctx, specs)) = validate_pieces(
        "copy_many_from_host",
        pieces.len(),
        |i| (pieces[i].0.len(), pieces[i].1, pieces[i].2),
        true,
    )?
    else {
        return Ok(());
    };
    let hosts: Vec<*mut u8> = pieces.iter().map(|p| p.0.as_ptr() as *mut u8).collect();
    // Safety: every source slice is borrowed (read-only) for the whole call, which is
    // synchronous; every device range was validated above and lies in `ctx`.
    unsafe { engine(&ctx).copy_many(&ctx, Dir::HtoD, hosts, specs) }
}

/// Copies many device ranges into host pieces in few DMA transfers: each
/// `(dst, src, offset)` fills all of `dst` from `src` starting at `offset`.
///
/// The device->host twin of [`copy_many_from_host`]: a kernel gathers the ranges into
/// device scratch memory, one DMA per staging buffer brings them to page-locked memory,
/// and several threads copy them out. Complete (every byte written) on return.
///
/// ```no_run
/// use devbuf_core::cuda::{self, Context};
/// let ctx = Context::new(0)?;
/// let dev = ctx.allocate(100 * 4096)?;
/// dev.fill(0)?;
/// let mut chunks = vec![vec![1u8; 4096]; 100];
/// let mut pieces: Vec<(&mut [u8], &cuda::DeviceBuffer, usize)> =
///     chunks.iter_mut().enumerate().map(|(i, c)| (&mut c[..], &dev, i * 4096)).collect();
/// cuda::copy_many_to_host(&mut pieces)?;
/// assert!(chunks.iter().all(|c| c.iter().all(|&b| b == 0)));
/// # Ok::<(), devbuf_core::Error>(())
/// ```
pub fn copy_many_to_host(pieces: &mut [(&mut [u8], &DeviceBuffer, usize)]) -> Result<()> {
    let Some((ctx, specs)) = validate_pieces(
        "copy_many_to_host",
        pieces.len(),
        |i| (pieces[i].0.len(), pieces[i].1, pieces[i].2),
        false,
    )?
    else {
        return Ok(());
    };
    let hosts: Vec<*mut u8> = pieces.iter_mut().map(|p| p.0.as_mut_ptr()).collect();
    // Safety: every destination slice is borrowed mutably for the whole call (so the
    // slices do not overlap and nobody else touches them), which is synchronous; every
    // device range was validated above and lies in `ctx`.
    unsafe { engine(&ctx).copy_many(&ctx, Dir::DtoH, hosts, specs) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_is_valid_and_bounded() {
        let c = TransferConfig::default();
        c.validate().unwrap();
        assert!((1..=16).contains(&c.lanes));
        assert_eq!(c.chunk_bytes, 4 * MIB);
        assert!(c.register_min_bytes.is_none());
    }

    #[test]
    fn invalid_configs_name_the_field() {
        let d = TransferConfig::default;
        for (cfg, field) in [
            (TransferConfig { lanes: 0, ..d() }, "lanes"),
            (TransferConfig { lanes: 1000, ..d() }, "lanes"),
            (
                TransferConfig {
                    chunk_bytes: 1000,
                    ..d()
                },
                "chunk_bytes",
            ),
            (
                TransferConfig {
                    min_chunk_bytes: 8 * MIB,
                    ..d()
                },
                "min_chunk_bytes",
            ),
            (
                TransferConfig {
                    max_pinned_bytes: 4 * MIB,
                    ..d()
                },
                "max_pinned_bytes",
            ),
            (
                TransferConfig {
                    register_min_bytes: Some(0),
                    ..d()
                },
                "register_min_bytes",
            ),
        ] {
            let e = cfg.validate().unwrap_err().to_string();
            assert!(e.contains(field), "{e}");
        }
    }
}
