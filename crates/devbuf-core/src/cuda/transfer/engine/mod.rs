//! The transfer engine of one context: staging lanes, worker threads, the page-locked
//! staging pool, a pool of streams for direct copies, and the strategies (direct,
//! staged, registered, batched).
//!
//! # Lanes
//!
//! A *lane* is a thread with its *resources* ([`LaneResources`]): a stream, two events and two page-locked staging
//! buffers (plus, for packed chunks, two device scratch buffers). Host->device, the lane
//! copies a chunk of the caller's memory into one buffer with the CPU while the other
//! buffer's DMA runs; device->host, it copies one buffer out while the DMA fills the
//! other. Lanes claim chunks from a shared counter, so fast lanes take more.
//!
//! A transfer is a `Job` (job.rs). The calling thread always works as one lane; up to
//! `lanes - 1` worker threads (started on first use, kept parked) join it.
//!
//! # Why the caller's memory is safe
//!
//! The job holds raw pointers into the caller's slices. The caller does not return
//! before every lane that joined the job has left it (`JobGuard` closes the job and
//! waits, also while unwinding), and a lane leaves only after its stream is synchronised
//! (no DMA of its own is pending). Lanes that had not joined when the job closed see it
//! closed and never touch it. Only the CPU reads or writes the caller's memory on this
//! path; the DMA engines only see staging buffers, which belong to the pool.
//!
//! # Files
//!
//! `lane_resources.rs` (a lane's resources), `job.rs` (a transfer and its guards),
//! `registrations.rs` (host memory registered in place), `worker.rs` (the lane workers),
//! this file (the engine: configuration, routing, strategies, the queue).

use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock};
use std::thread::JoinHandle;

use super::plan::{self, Chunk, Dir, PackParams, PieceSpec, TransferPlan};
use super::staging::{PoolItem, StagingPool};
use super::{DirectMode, PageableMode, ScatterMode, TransferConfig};
use crate::cuda::context::Context;
use crate::cuda::driver::transfer::{self as dt, HostMemoryKind};
use crate::cuda::driver::{self, CUcontext, CUdeviceptr, CUevent, CUfunction, CUstream};
use crate::cuda::kernels::{self, Segment as TableEntry};
use crate::error::{Error, Result};

mod job;
mod lane_resources;
mod registrations;
#[cfg(test)]
mod tests;
mod worker;

use super::lane::lease_held_here;
use job::{ActiveGuard, Job, JobGuard, LaneResourcesGuard, LaneState};
pub(crate) use lane_resources::LaneResources;
use registrations::REGISTRATIONS;
use worker::{wait_for_stream_work, worker};

/// A raw driver handle or host pointer that may cross threads.
#[derive(Debug, Clone, Copy)]
pub(super) struct Raw<T>(pub(super) T);
// Safety: driver handles (contexts, streams, events, functions) may be used from any
// thread; the driver API is thread-safe. Host pointers in a `Job` are only dereferenced
// under the job's protocol (see the module docs), never after the caller returned.
unsafe impl<T> Send for Raw<T> {}
// Safety: see `Send`; the wrapped values are plain handles and addresses.
unsafe impl<T> Sync for Raw<T> {}

// ---------------------------------------------------------------------------
// Engine
// ---------------------------------------------------------------------------

/// Transfer counters.
#[derive(Default)]
pub(crate) struct Counters {
    pub direct: AtomicU64,
    pub staged: AtomicU64,
    pub registered: AtomicU64,
    pub batched: AtomicU64,
    pub batched_pieces: AtomicU64,
    pub kernel_chunks: AtomicU64,
    pub memcpy_batch_chunks: AtomicU64,
    pub staged_bytes: AtomicU64,
}

struct Queue {
    jobs: VecDeque<Arc<Job>>,
    shutdown: bool,
}

pub(crate) struct Shared {
    ctx: Raw<CUcontext>,
    config: RwLock<TransferConfig>,
    pub(crate) pool: StagingPool<LaneResources>,
    streams: Mutex<Vec<Raw<CUstream>>>,
    queue: Mutex<Queue>,
    queue_cv: Condvar,
    pub(crate) scratch_bytes: Arc<AtomicUsize>,
    pub(crate) counters: Counters,
}

/// The transfer engine of one context.
pub(crate) struct Engine {
    pub(crate) shared: Arc<Shared>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

/// Where a [`Context`] keeps its engine: created on first use, shut down (worker threads
/// joined, staging memory freed) before the context is destroyed.
#[derive(Default)]
pub(crate) struct EngineCell(OnceLock<Engine>);

impl EngineCell {
    pub(crate) fn get(&self, ctx: &Context) -> &Engine {
        self.0.get_or_init(|| Engine::new(ctx.inner.raw))
    }

    pub(crate) fn get_if_started(&self) -> Option<&Engine> {
        self.0.get()
    }

    /// Stops the workers and frees every staging kit and stream. Called by the
    /// context's drop, while the context is still alive.
    pub(crate) fn shutdown(&self) {
        if let Some(e) = self.0.get() {
            e.shutdown();
        }
    }
}

/// What a transfer may use of the caller's memory and streams.
pub(crate) struct TransferGrant {
    pub dir: Dir,
    pub host: *mut u8,
    pub len: usize,
    pub dev: CUdeviceptr,
    /// The stream the copy is ordered on (`None`: synchronous, complete on return).
    pub on: Option<CUstream>,
    /// What the caller knows of the host memory (skips the driver query).
    pub known: Option<HostMemoryKind>,
}

/// The path a single copy takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// One driver call (page-locked memory, small copies, or the driver forced).
    Direct,
    /// Through the staging lanes.
    Staged,
    /// Register the caller's pages, one DMA, unregister.
    Registered,
}

/// Whether the route of an `n`-byte copy depends on the kind of host memory (so the
/// driver must be asked).
pub(crate) fn needs_probe(cfg: &TransferConfig, n: usize) -> bool {
    match cfg.pageable {
        PageableMode::Auto => {
            n >= cfg.staging_min_bytes || cfg.register_min_bytes.is_some_and(|m| n >= m)
        }
        PageableMode::Driver => false,
        PageableMode::Staged | PageableMode::Registered => true,
    }
}

/// The route of an `n`-byte copy of host memory of `kind` (`Pageable` when not probed).
pub(crate) fn route(cfg: &TransferConfig, n: usize, kind: HostMemoryKind) -> Route {
    if kind != HostMemoryKind::Pageable {
        return Route::Direct;
    }
    match cfg.pageable {
        PageableMode::Driver => Route::Direct,
        PageableMode::Staged => Route::Staged,
        PageableMode::Registered => Route::Registered,
        PageableMode::Auto => {
            if cfg.register_min_bytes.is_some_and(|m| n >= m) {
                Route::Registered
            } else if n >= cfg.staging_min_bytes {
                Route::Staged
            } else {
                Route::Direct
            }
        }
    }
}

const PAGE: usize = 4096;

impl Engine {
    fn new(ctx: CUcontext) -> Engine {
        let config = TransferConfig::default();
        Engine {
            shared: Arc::new(Shared {
                ctx: Raw(ctx),
                pool: StagingPool::new(config.max_pinned_bytes),
                config: RwLock::new(config),
                streams: Mutex::new(Vec::new()),
                queue: Mutex::new(Queue {
                    jobs: VecDeque::new(),
                    shutdown: false,
                }),
                queue_cv: Condvar::new(),
                scratch_bytes: Arc::new(AtomicUsize::new(0)),
                counters: Counters::default(),
            }),
            workers: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn config(&self) -> TransferConfig {
        self.shared
            .config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn set_config(&self, cfg: TransferConfig) {
        self.shared.pool.set_limit(cfg.max_pinned_bytes);
        *self
            .shared
            .config
            .write()
            .unwrap_or_else(|p| p.into_inner()) = cfg;
    }

    pub(crate) fn worker_count(&self) -> usize {
        self.workers.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn shutdown(&self) {
        {
            let mut q = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            q.shutdown = true;
            q.jobs.clear();
        }
        self.shared.queue_cv.notify_all();
        let handles: Vec<JoinHandle<()>> = self
            .workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        for h in handles {
            let _ = h.join();
        }
        drop(self.shared.pool.drain());
        let streams: Vec<Raw<CUstream>> = self
            .shared
            .streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        if !streams.is_empty() && driver::ctx_set_current(self.shared.ctx.0).is_ok() {
            for s in streams {
                // Safety: pooled streams are idle (synchronised before being returned)
                // and owned by the engine.
                let _ = unsafe { driver::stream_destroy(s.0) };
            }
        }
    }

    /// Starts worker threads until there are `want` (at most `lanes - 1`).
    fn ensure_workers(&self, want: usize) -> usize {
        let mut w = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        while w.len() < want {
            let shared = self.shared.clone();
            let name = format!("devbuf-transfer-{}", w.len());
            match std::thread::Builder::new()
                .name(name)
                .stack_size(256 * 1024)
                .spawn(move || worker(shared))
            {
                Ok(h) => w.push(h),
                Err(_) => break, // fewer helpers; the caller's lane still does the work
            }
        }
        w.len()
    }

    /// Allocates staging kits and starts the worker threads now, so that the first
    /// transfer does not pay for them.
    pub(crate) fn warm_up(&self) -> Result<()> {
        let cfg = self.config();
        self.ensure_workers(cfg.lanes.saturating_sub(1));
        let shared = &self.shared;
        let mut alloc =
            || LaneResources::new(shared.ctx.0, cfg.chunk_bytes, shared.scratch_bytes.clone());
        // On an allocation error the kits made so far go back to the pool first (they
        // used to be dropped while the pool still counted them as held and in use).
        shared
            .pool
            .prefill(cfg.lanes, cfg.chunk_bytes, 2 * cfg.chunk_bytes, &mut alloc)
            .map(|_| ())
    }

    // -- direct copies ------------------------------------------------------

    fn take_stream(&self) -> Result<CUstream> {
        if let Some(s) = self
            .shared
            .streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
        {
            return Ok(s.0);
        }
        driver::stream_create(false)
    }

    fn give_stream(&self, s: CUstream, healthy: bool) {
        if healthy {
            self.shared
                .streams
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(Raw(s));
        }
        // An unhealthy stream is leaked: work on it could not be confirmed finished.
    }

    /// Queues one driver copy on `stream`.
    ///
    /// # Safety
    /// `host..host+n` must be valid (readable host->device, writable device->host) until
    /// the copy completes on `stream`; `dev..dev+n` device memory of the current context.
    unsafe fn enqueue_direct(
        dir: Dir,
        host: *mut u8,
        n: usize,
        dev: CUdeviceptr,
        stream: CUstream,
    ) -> Result<()> {
        // Safety: guaranteed by the caller.
        unsafe {
            match dir {
                Dir::HtoD => dt::memcpy_htod_async(dev, host, n, stream),
                Dir::DtoH => dt::memcpy_dtoh_async(host, dev, n, stream),
            }
        }
    }

    /// One driver copy. With `on`, queued on that stream (the caller keeps the host
    /// memory alive until it completes); without, complete on return
    /// ([`DirectMode::Stream`]) or as the driver's synchronous copy leaves it
    /// ([`DirectMode::Sync`]).
    ///
    /// # Safety
    /// As [`Engine::enqueue_direct`].
    unsafe fn direct(&self, r: &TransferGrant, cfg: &TransferConfig) -> Result<()> {
        self.shared.counters.direct.fetch_add(1, Ordering::Relaxed);
        if let Some(s) = r.on {
            // Safety: guaranteed by the caller.
            return unsafe { Self::enqueue_direct(r.dir, r.host, r.len, r.dev, s) };
        }
        match cfg.direct {
            DirectMode::Sync => {
                // Safety: guaranteed by the caller; the call returns when the host
                // memory is no longer needed.
                unsafe {
                    match r.dir {
                        Dir::HtoD => driver::memcpy_htod(r.dev, r.host, r.len),
                        Dir::DtoH => driver::memcpy_dtoh(r.host, r.dev, r.len),
                    }
                }
            }
            DirectMode::Stream => {
                let s = self.take_stream()?;
                // Safety: guaranteed by the caller; we synchronise before returning.
                let queued = unsafe { Self::enqueue_direct(r.dir, r.host, r.len, r.dev, s) };
                let synced = driver::stream_synchronize(s);
                self.give_stream(s, synced.is_ok());
                queued.and(synced)
            }
        }
    }

    // -- the entry point for single copies -------------------------------------

    /// Copies one contiguous range by the route the configuration picks.
    ///
    /// # Safety
    /// `r.host..r.host+r.len` must be valid for the direction (readable host->device,
    /// writable and not otherwise accessed device->host) until the call returns, and —
    /// when `r.on` is given and the copy may still be pending on it — until it completes
    /// on that stream. `r.dev..+len` must be device memory of `ctx`.
    pub(crate) unsafe fn copy(&self, ctx: &Context, r: TransferGrant) -> Result<()> {
        if r.len == 0 {
            return Ok(());
        }
        let cfg = self.config();
        ctx.bind()?;
        let kind = match r.known {
            Some(k) => k,
            // A failed query only costs speed: staging is right for any memory.
            None if needs_probe(&cfg, r.len) => {
                dt::host_memory_kind(r.host, r.len).unwrap_or(HostMemoryKind::Pageable)
            }
            None => HostMemoryKind::Pageable,
        };
        match route(&cfg, r.len, kind) {
            // Safety (all arms): guaranteed by the caller.
            Route::Direct => unsafe { self.direct_unless_registered(ctx, &r, &cfg) },
            Route::Staged => self.staged_single(ctx, &r, &cfg),
            Route::Registered => match unsafe { self.registered(&r, &cfg) } {
                Ok(true) => Ok(()),
                Ok(false) => self.staged_single(ctx, &r, &cfg),
                Err(e) => Err(e),
            },
        }
    }

    /// [`Engine::direct`], unless the host range overlaps pages another copy has
    /// registered for the moment ([`Registrations`]): then staged.
    ///
    /// # Safety
    /// As [`Engine::copy`].
    unsafe fn direct_unless_registered(
        &self,
        ctx: &Context,
        r: &TransferGrant,
        cfg: &TransferConfig,
    ) -> Result<()> {
        let start = r.host as usize;
        if REGISTRATIONS.overlaps(start, start.saturating_add(r.len)) {
            return self.staged_single(ctx, r, cfg);
        }
        // Safety: guaranteed by the caller.
        unsafe { self.direct(r, cfg) }
    }

    /// Registers the caller's whole pages, copies them with one DMA (the partial pages
    /// at either end go through the driver's own path) and unregisters. `Ok(false)`
    /// when registration is refused (the caller stages instead).
    ///
    /// # Safety
    /// As [`Engine::copy`].
    unsafe fn registered(&self, r: &TransferGrant, cfg: &TransferConfig) -> Result<bool> {
        let start = r.host as usize;
        let end = start + r.len;
        let a = start.div_ceil(PAGE) * PAGE;
        let b = end / PAGE * PAGE;
        if b <= a {
            return Ok(false);
        }
        let reg = a as *mut u8;
        // Claims the caller's whole byte range, not only the pages registered: the
        // partial pages at either end are copied by the driver directly, and must not
        // lie in pages another copy has registered (and will unregister). Any overlap
        // with a live registration: stage instead (see `Registrations`).
        if !REGISTRATIONS.claim(start, end) {
            return Ok(false);
        }
        // Safety: `a..b` lies within the caller's range, which stays mapped for the
        // whole call; it is unregistered before we return (guard below).
        if unsafe { dt::mem_host_register(reg, b - a) }.is_err() {
            REGISTRATIONS.release(start, end);
            return Ok(false);
        }
        /// Unregisters the pages at `reg`, then releases the claim `claimed`.
        struct Unregister {
            reg: *mut u8,
            claimed: (usize, usize),
        }
        impl Drop for Unregister {
            fn drop(&mut self) {
                // Safety: registered above; the copies using it were synchronised (or
                // the stream failed, after which no DMA runs in this context).
                let _ = unsafe { dt::mem_host_unregister(self.reg) };
                REGISTRATIONS.release(self.claimed.0, self.claimed.1);
            }
        }
        let _unregister = Unregister {
            reg,
            claimed: (start, end),
        };
        self.shared
            .counters
            .registered
            .fetch_add(1, Ordering::Relaxed);
        let s = match r.on {
            Some(s) => s,
            None => self.take_stream()?,
        };
        let head = a - start;
        let tail = end - b;
        // Safety: the three ranges partition the caller's range; each is valid for the
        // direction; we synchronise the stream before unregistering and returning.
        let queued = unsafe {
            Self::enqueue_direct(r.dir, r.host, head, r.dev, s)
                .and_then(|_| {
                    Self::enqueue_direct(r.dir, r.host.add(head), b - a, r.dev + head as u64, s)
                })
                .and_then(|_| {
                    Self::enqueue_direct(
                        r.dir,
                        r.host.add(head + (b - a)),
                        tail,
                        r.dev + (head + b - a) as u64,
                        s,
                    )
                })
        };
        let synced = driver::stream_synchronize(s);
        if r.on.is_none() {
            self.give_stream(s, synced.is_ok());
        }
        let _ = cfg;
        queued.and(synced).map(|_| true)
    }

    // -- staged copies ------------------------------------------------------------

    /// Copies one range through the staging lanes; through the driver instead when this
    /// thread holds an upload lane's kit and the pool has no kit for it now (see
    /// [`Engine::run`]).
    ///
    /// Reached only from the routes of [`Engine::copy`], whose caller guarantees the
    /// request's ranges (see its safety section).
    fn staged_single(&self, ctx: &Context, r: &TransferGrant, cfg: &TransferConfig) -> Result<()> {
        let lanes = cfg.lanes.max(1);
        let chunk = plan::chunk_size_for(r.len, lanes, cfg.min_chunk_bytes, cfg.chunk_bytes);
        let plan = plan::plan_single(r.len, chunk);
        let pieces = vec![PieceSpec {
            len: r.len,
            dev: r.dev,
        }];
        // Host pages another copy registered must not be copied by the driver directly
        // (see `direct_unless_registered`): then the lanes wait for a kit in any case.
        let start = r.host as usize;
        let may_wait =
            !lease_held_here() || REGISTRATIONS.overlaps(start, start.saturating_add(r.len));
        let staged = self.run(
            ctx,
            r.dir,
            vec![Raw(r.host)],
            pieces,
            plan,
            PackParams::for_kernel(cfg.chunk_bytes),
            cfg,
            r.on,
            None,
            may_wait,
        );
        if !matches!(staged, Ok(false)) {
            self.shared.counters.staged.fetch_add(1, Ordering::Relaxed);
            return staged.map(|_| ());
        }
        ctx.bind()?;
        // Safety: `staged_single` is reached only from `Engine::copy` (directly or through
        // `direct_unless_registered` / `piecewise`), whose caller guarantees that
        // `r.host..+len` is valid for the direction until the copy completes and that
        // `r.dev..+len` is device memory of `ctx`; nothing was copied by the lanes.
        unsafe { self.direct(r, cfg) }
    }

    /// Copies many pieces through staging, packed. `hosts[i]` is valid for
    /// `pieces[i].len` bytes in the direction of `dir` until the call returns.
    ///
    /// # Safety
    /// As stated; device ranges must be device memory of `ctx`; device->host the host
    /// ranges must not overlap each other.
    pub(crate) unsafe fn copy_many(
        &self,
        ctx: &Context,
        dir: Dir,
        hosts: Vec<*mut u8>,
        pieces: Vec<PieceSpec>,
    ) -> Result<()> {
        let cfg = self.config();
        ctx.bind()?;
        let mut scatter = cfg.scatter;
        let mut kernel = None;
        if scatter == ScatterMode::Kernel {
            match kernels::copy_segments_function(ctx) {
                Ok(f) => kernel = Some(Raw(f)),
                // The kernels need a CUDA 13 driver; older drivers with the batch call
                // (12.8+) use it instead, others copy piece by piece.
                Err(_) if dt::memcpy_batch_available() => scatter = ScatterMode::MemcpyBatch,
                Err(_) => {
                    // Safety: guaranteed by the caller.
                    return unsafe { self.piecewise(ctx, dir, &hosts, &pieces, &cfg) };
                }
            }
        }
        let params = match scatter {
            ScatterMode::Kernel => PackParams::for_kernel(cfg.chunk_bytes),
            ScatterMode::MemcpyBatch => PackParams::for_batch_memcpy(cfg.chunk_bytes),
        };
        let plan = plan::plan_batch(&pieces, &params);
        let mut cfg2 = cfg.clone();
        cfg2.scatter = scatter;
        let raws = hosts.iter().map(|&h| Raw(h)).collect();
        let may_wait = !lease_held_here();
        let staged = self.run(
            ctx,
            dir,
            raws,
            pieces.clone(),
            plan,
            params,
            &cfg2,
            None,
            kernel,
            may_wait,
        );
        if !matches!(staged, Ok(false)) {
            let c = &self.shared.counters;
            c.batched.fetch_add(1, Ordering::Relaxed);
            c.batched_pieces
                .fetch_add(pieces.len() as u64, Ordering::Relaxed);
            return staged.map(|_| ());
        }
        // No kit without waiting on a thread that holds an upload lane: piece by piece.
        // Safety: guaranteed by the caller.
        unsafe { self.piecewise(ctx, dir, &hosts, &pieces, &cfg) }
    }

    /// The fallback of [`copy_many`](Self::copy_many) without kernels or batch copies.
    ///
    /// # Safety
    /// As [`Engine::copy_many`].
    unsafe fn piecewise(
        &self,
        ctx: &Context,
        dir: Dir,
        hosts: &[*mut u8],
        pieces: &[PieceSpec],
        cfg: &TransferConfig,
    ) -> Result<()> {
        for (h, p) in hosts.iter().zip(pieces) {
            let r = TransferGrant {
                dir,
                host: *h,
                len: p.len,
                dev: p.dev,
                on: None,
                known: None,
            };
            ctx.bind()?;
            // Safety: guaranteed by the caller.
            unsafe { self.direct_unless_registered(ctx, &r, cfg)? };
        }
        Ok(())
    }

    /// Runs a staged job on the calling thread's lane and the workers that join it.
    /// The calling thread's lane waits for a kit when the pool is at its bound if
    /// `may_wait`; callers pass `false` on a thread that holds an upload lane's kit
    /// (`lease_held_here`): such a thread must not wait for the pool, because the kits it
    /// would wait for may be held by threads waiting the same way.
    ///
    /// `Ok(true)`: done. `Ok(false)`: nothing was copied (no lane got a kit without
    /// waiting); the caller copies through the driver instead.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        ctx: &Context,
        dir: Dir,
        hosts: Vec<Raw<*mut u8>>,
        pieces: Vec<PieceSpec>,
        plan: TransferPlan,
        params: PackParams,
        cfg: &TransferConfig,
        on: Option<CUstream>,
        kernel: Option<Raw<CUfunction>>,
        may_wait: bool,
    ) -> Result<bool> {
        if plan.chunks.is_empty() {
            return Ok(true);
        }
        let total_bytes = plan.total_bytes as u64;
        // Ordered after the work queued on `on` so far: the caller waits for it on the
        // host before any lane starts. A blocking-sync event sleeps; lanes waiting on the
        // device instead would spin in their event synchronisations (up to `lanes`
        // threads at 100% CPU) for as long as that earlier work runs.
        if let Some(s) = on {
            wait_for_stream_work(s)?;
        }
        let sms = ctx.properties().multiprocessor_count.max(1);
        let want = cfg.lanes.max(1).min(plan.chunks.len());
        let job = Arc::new(Job {
            dir,
            host: hosts,
            pieces,
            plan,
            params,
            scatter: cfg.scatter,
            kernel,
            blocks: sms.saturating_mul(4),
            ordinal: ctx.ordinal(),
            kit_chunk: cfg.chunk_bytes,
            next: AtomicUsize::new(0),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            lanes: Mutex::new(LaneState::default()),
            lanes_cv: Condvar::new(),
        });
        {
            let _guard = JobGuard(&job);
            let helpers = self.ensure_workers(want - 1).min(want - 1);
            if helpers > 0 {
                let mut q = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
                for _ in 0..helpers {
                    q.jobs.push_back(job.clone());
                }
                drop(q);
                for _ in 0..helpers {
                    self.shared.queue_cv.notify_one();
                }
            }
            self.shared.lane(&job, may_wait);
            // `_guard` closes the job and waits for the helpers here.
        }
        // A lane that got a kit claims chunks until none is left (or the job failed), so
        // no claim at all means that no lane got one — possible only when the caller's
        // lane did not wait: nothing was copied.
        let ran = may_wait || job.next.load(Ordering::SeqCst) > 0;
        if ran {
            self.shared
                .counters
                .staged_bytes
                .fetch_add(total_bytes, Ordering::Relaxed);
        }
        ctx.bind()?;
        let err = job.error.lock().unwrap_or_else(|p| p.into_inner()).take();
        match err {
            Some(e) => Err(e),
            None => Ok(ran),
        }
    }
}
