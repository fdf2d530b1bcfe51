//! The transfer engine of one context: staging lanes, worker threads, the page-locked
//! staging pool, a pool of streams for direct copies, and the strategies (direct,
//! staged, registered, batched).
//!
//! # Lanes
//!
//! A *lane* is a thread with a *kit*: a stream, two events and two page-locked staging
//! buffers (plus, for packed chunks, two device scratch buffers). Host->device, the lane
//! copies a chunk of the caller's memory into one buffer with the CPU while the other
//! buffer's DMA runs; device->host, it copies one buffer out while the DMA fills the
//! other. Lanes claim chunks from a shared counter, so fast lanes take more.
//!
//! A transfer is a [`Job`]. The calling thread always works as one lane; up to
//! `lanes - 1` worker threads (started on first use, kept parked) join it.
//!
//! # Why the caller's memory is safe
//!
//! The job holds raw pointers into the caller's slices. The caller does not return
//! before every lane that joined the job has left it ([`JobGuard`] closes the job and
//! waits, also while unwinding), and a lane leaves only after its stream is synchronised
//! (no DMA of its own is pending). Lanes that had not joined when the job closed see it
//! closed and never touch it. Only the CPU reads or writes the caller's memory on this
//! path; the DMA engines only see staging buffers, which belong to the pool.

use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock};
use std::thread::JoinHandle;

use super::plan::{self, Chunk, Dir, PackParams, PieceSpec, Plan};
use super::staging::{PoolItem, StagingPool};
use super::{DirectMode, PageableMode, ScatterMode, TransferConfig};
use crate::cuda::context::Context;
use crate::cuda::driver::transfer::{self as dt, HostMemoryKind};
use crate::cuda::driver::{self, CUcontext, CUdeviceptr, CUevent, CUfunction, CUstream};
use crate::cuda::kernels::{self, Segment as TableEntry};
use crate::error::{Error, Result};

/// A raw driver handle or host pointer that may cross threads.
#[derive(Debug, Clone, Copy)]
struct Raw<T>(T);
// Safety: driver handles (contexts, streams, events, functions) may be used from any
// thread; the driver API is thread-safe. Host pointers in a `Job` are only dereferenced
// under the job's protocol (see the module docs), never after the caller returned.
unsafe impl<T> Send for Raw<T> {}
// Safety: see `Send`; the wrapped values are plain handles and addresses.
unsafe impl<T> Sync for Raw<T> {}

// ---------------------------------------------------------------------------
// Kits
// ---------------------------------------------------------------------------

/// One lane's resources: a stream, two events, two page-locked staging buffers and
/// (lazily) two device scratch buffers, all of `chunk` bytes.
pub(crate) struct Kit {
    ctx: CUcontext,
    stream: CUstream,
    events: [CUevent; 2],
    host: [*mut u8; 2],
    scratch: [CUdeviceptr; 2],
    chunk: usize,
    scratch_bytes: Arc<AtomicUsize>,
}

// Safety: the kit exclusively owns its driver objects and memory; they may be used and
// freed from any thread.
unsafe impl Send for Kit {}

impl PoolItem for Kit {
    fn bytes(&self) -> usize {
        2 * self.chunk
    }
    fn chunk_bytes(&self) -> usize {
        self.chunk
    }
}

impl Kit {
    fn new(ctx: CUcontext, chunk: usize, scratch_bytes: Arc<AtomicUsize>) -> Result<Kit> {
        driver::ctx_set_current(ctx)?;
        let mut k = Kit {
            ctx,
            stream: std::ptr::null_mut(),
            events: [std::ptr::null_mut(); 2],
            host: [std::ptr::null_mut(); 2],
            scratch: [0; 2],
            chunk,
            scratch_bytes,
        };
        // On any error `k` drops and frees what was made so far.
        // A blocking stream: ordered after earlier work on the legacy default stream
        // (kernels devbuf launched there), like the synchronous copies it replaces.
        k.stream = driver::stream_create(false)?;
        for i in 0..2 {
            k.events[i] = driver::event_create(false)?;
            k.host[i] = driver::mem_host_alloc(chunk).map_err(|e| {
                if driver::is_oom(&e) {
                    Error::invalid(format!(
                        "could not allocate a {chunk}-byte page-locked staging buffer ({e}); \
                         lower TransferConfig::chunk_bytes or max_pinned_bytes"
                    ))
                } else {
                    e
                }
            })?;
            // Safety: `host[i]` was just allocated with `chunk` bytes and nothing else
            // refers to it. Zeroed once so that lent buffers are always initialised
            // (see `transfer::lane`, which hands them out as `&mut [u8]`).
            unsafe { std::ptr::write_bytes(k.host[i], 0, chunk) };
        }
        Ok(k)
    }

    /// Page-locked buffer `slot` (0 or 1): its address; `chunk_bytes()` long, initialised.
    pub(super) fn host_ptr(&self, slot: usize) -> *mut u8 {
        self.host[slot & 1]
    }

    /// Completion event `slot` (0 or 1).
    pub(super) fn event(&self, slot: usize) -> CUevent {
        self.events[slot & 1]
    }

    /// The context the kit belongs to.
    pub(super) fn context(&self) -> CUcontext {
        self.ctx
    }

    /// Device scratch buffer `slot`, allocated on first use (packed chunks only).
    fn scratch(&mut self, slot: usize) -> Result<CUdeviceptr> {
        if self.scratch[slot] == 0 {
            self.scratch[slot] = driver::mem_alloc(self.chunk)?;
            self.scratch_bytes.fetch_add(self.chunk, Ordering::SeqCst);
        }
        Ok(self.scratch[slot])
    }
}

impl Drop for Kit {
    fn drop(&mut self) {
        if driver::ctx_set_current(self.ctx).is_err() {
            return; // cannot free without the context; leak rather than misuse
        }
        if !self.stream.is_null() {
            let _ = driver::stream_synchronize(self.stream);
            // Safety: the stream belongs to this kit and is not used after this.
            let _ = unsafe { driver::stream_destroy(self.stream) };
        }
        for e in self.events {
            if !e.is_null() {
                // Safety: the event belongs to this kit and is not used after this.
                let _ = unsafe { driver::event_destroy(e) };
            }
        }
        for h in self.host {
            if !h.is_null() {
                // Safety: from cuMemHostAlloc; the stream was synchronised above, so no
                // DMA uses it, and the kit is its only owner.
                let _ = unsafe { driver::mem_free_host(h) };
            }
        }
        for s in self.scratch {
            if s != 0 {
                // Safety: from cuMemAlloc; no work uses it any more (stream synchronised).
                let _ = unsafe { driver::mem_free(s) };
                self.scratch_bytes.fetch_sub(self.chunk, Ordering::SeqCst);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Jobs
// ---------------------------------------------------------------------------

#[derive(Default)]
struct LaneState {
    closed: bool,
    active: usize,
}

/// One staged transfer, shared by the lanes that work on it.
pub(crate) struct Job {
    dir: Dir,
    /// Host address of each piece (valid for its `PieceSpec::len` bytes).
    host: Vec<Raw<*mut u8>>,
    pieces: Vec<PieceSpec>,
    plan: Plan,
    params: PackParams,
    scatter: ScatterMode,
    kernel: Option<Raw<CUfunction>>,
    blocks: u32,
    /// Device ordinal (location hints of batch copies).
    ordinal: usize,
    /// Staging buffer size of the kits this job uses.
    kit_chunk: usize,
    next: AtomicUsize,
    failed: AtomicBool,
    error: Mutex<Option<Error>>,
    lanes: Mutex<LaneState>,
    lanes_cv: Condvar,
}

impl Job {
    fn claim(&self) -> Option<usize> {
        if self.failed.load(Ordering::SeqCst) {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::SeqCst);
        (i < self.plan.chunks.len()).then_some(i)
    }

    fn exhausted(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
            || self.next.load(Ordering::SeqCst) >= self.plan.chunks.len()
    }

    fn fail(&self, e: Error) {
        self.failed.store(true, Ordering::SeqCst);
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(e);
        }
    }

    /// Joins as a lane unless the job is closed.
    fn enter(&self) -> bool {
        let mut s = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        if s.closed {
            return false;
        }
        s.active += 1;
        true
    }

    fn leave(&self) {
        let mut s = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        s.active -= 1;
        if s.active == 0 {
            self.lanes_cv.notify_all();
        }
    }

    /// Closes the job to new lanes and waits until every lane that joined has left.
    fn close_and_wait(&self) {
        let mut s = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        s.closed = true;
        while s.active > 0 {
            s = self.lanes_cv.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Host pointer of `piece` plus `off`.
    ///
    /// # Safety
    /// `off` must be within the piece (the plan guarantees it for its ranges).
    unsafe fn host_at(&self, piece: usize, off: usize) -> *mut u8 {
        // Safety: guaranteed by the caller; the piece's range is valid (job invariant).
        unsafe { self.host[piece].0.add(off) }
    }

    /// The CPU's part of chunk `ci`: host->device it gathers the chunk's host bytes
    /// into the staging buffer `stage` (a direct chunk at offset 0, packed segments at
    /// their offsets in the data region); device->host it scatters them from `stage`
    /// back to the host pieces.
    ///
    /// # Safety
    /// `stage` must be a staging buffer of `self.kit_chunk` bytes that no DMA uses now
    /// (device->host: whose DMA for this chunk has completed), and chunk `ci` must be
    /// claimed by the calling lane (each host byte belongs to one chunk, so no other
    /// lane touches the same host bytes).
    unsafe fn stage_copy(&self, ci: usize, stage: *mut u8, dir: Dir) {
        let one = |piece: usize, piece_off: usize, stage_off: usize, len: usize| {
            // Safety: the plan keeps `piece_off + len` within the piece, whose host range
            // is valid for the job's life (readable host->device; writable and touched by
            // no one else device->host), and `stage_off + len` within the staging buffer
            // (planned for `chunk_bytes == kit_chunk`); host and staging memory are
            // distinct allocations.
            unsafe {
                let host = self.host_at(piece, piece_off);
                let staged = stage.add(stage_off);
                match dir {
                    Dir::HtoD => std::ptr::copy_nonoverlapping(host, staged, len),
                    Dir::DtoH => std::ptr::copy_nonoverlapping(staged, host, len),
                }
            }
        };
        match &self.plan.chunks[ci] {
            Chunk::Direct {
                piece,
                piece_off,
                len,
            } => one(*piece, *piece_off, 0, *len),
            Chunk::Packed { segs, .. } => {
                for s in &self.plan.segs[segs.clone()] {
                    one(
                        s.piece,
                        s.piece_off,
                        self.params.data_offset + s.stage_off,
                        s.len,
                    );
                }
            }
        }
    }
}

/// Leaves the job when dropped (also while unwinding).
struct ActiveGuard<'a>(&'a Job);
impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// Closes the job and waits for its lanes when dropped (also while unwinding), so the
/// caller's memory outlives every access to it.
struct JobGuard<'a>(&'a Job);
impl Drop for JobGuard<'_> {
    fn drop(&mut self) {
        self.0.close_and_wait();
    }
}

/// Holds a kit while a lane runs; on drop the kit's stream is synchronised and the kit
/// goes back to the pool, or is abandoned (leaked) when the stream cannot be confirmed
/// idle.
struct KitGuard<'a> {
    pool: &'a StagingPool<Kit>,
    kit: Option<Kit>,
}
impl Drop for KitGuard<'_> {
    fn drop(&mut self) {
        if let Some(k) = self.kit.take() {
            if driver::ctx_set_current(k.ctx).is_ok()
                && driver::stream_synchronize(k.stream).is_ok()
            {
                self.pool.release(k);
            } else {
                self.pool.abandon(k);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Registrations
// ---------------------------------------------------------------------------

/// Host ranges of the copies that have pages registered (`cuMemHostRegister`) by the
/// engine right now, in the whole process (registrations are portable: every context
/// sees them).
///
/// While a range is registered the driver reports its pages as page-locked, so another
/// thread's copy of the same memory (two uploads of one shared `&[u8]`) would take the
/// direct route: a DMA straight from pages that the registering copy unregisters when
/// it is done — possibly while that DMA still runs. So a copy that would go direct but
/// overlaps a live entry is staged instead (the CPU reads the memory, right for any
/// memory), and two registered copies never overlap (the second one stages). An entry
/// is the registering copy's whole byte range (its partial end pages, which the driver
/// copies directly, included); it is made before registering and removed after
/// unregistering, so every moment the driver sees pages pinned by the engine is
/// covered. (What remains is a copy that checked just before another thread claimed
/// *and* registered an overlapping range — registering takes milliseconds — and whose
/// DMA then outlasted that other copy's whole DMA.)
#[derive(Default)]
pub(crate) struct Registrations {
    live: AtomicUsize,
    ranges: Mutex<Vec<(usize, usize)>>,
}

impl Registrations {
    pub(crate) const fn new() -> Registrations {
        Registrations {
            live: AtomicUsize::new(0),
            ranges: Mutex::new(Vec::new()),
        }
    }

    /// Records `a..b` as registered, unless it overlaps a live registration.
    pub(crate) fn claim(&self, a: usize, b: usize) -> bool {
        let mut r = self.ranges.lock().unwrap_or_else(|p| p.into_inner());
        if r.iter().any(|&(x, y)| x < b && a < y) {
            return false;
        }
        r.push((a, b));
        self.live.fetch_add(1, Ordering::SeqCst);
        true
    }

    /// Forgets `a..b` (after it was unregistered).
    pub(crate) fn release(&self, a: usize, b: usize) {
        let mut r = self.ranges.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = r.iter().position(|&x| x == (a, b)) {
            r.swap_remove(i);
            self.live.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Whether `a..b` overlaps a live registration (one atomic load when none is live).
    pub(crate) fn overlaps(&self, a: usize, b: usize) -> bool {
        if self.live.load(Ordering::SeqCst) == 0 {
            return false;
        }
        let r = self.ranges.lock().unwrap_or_else(|p| p.into_inner());
        r.iter().any(|&(x, y)| x < b && a < y)
    }
}

static REGISTRATIONS: Registrations = Registrations::new();

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
    pub(crate) pool: StagingPool<Kit>,
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
pub(crate) struct Request {
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
        let mut alloc = || Kit::new(shared.ctx.0, cfg.chunk_bytes, shared.scratch_bytes.clone());
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
    unsafe fn direct(&self, r: &Request, cfg: &TransferConfig) -> Result<()> {
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
    pub(crate) unsafe fn copy(&self, ctx: &Context, r: Request) -> Result<()> {
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
        r: &Request,
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
    unsafe fn registered(&self, r: &Request, cfg: &TransferConfig) -> Result<bool> {
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

    fn staged_single(&self, ctx: &Context, r: &Request, cfg: &TransferConfig) -> Result<()> {
        let lanes = cfg.lanes.max(1);
        let chunk = plan::chunk_size_for(r.len, lanes, cfg.min_chunk_bytes, cfg.chunk_bytes);
        let plan = plan::plan_single(r.len, chunk);
        self.shared.counters.staged.fetch_add(1, Ordering::Relaxed);
        let pieces = vec![PieceSpec {
            len: r.len,
            dev: r.dev,
        }];
        self.run(
            ctx,
            r.dir,
            vec![Raw(r.host)],
            pieces,
            plan,
            PackParams::for_kernel(cfg.chunk_bytes),
            cfg,
            r.on,
            None,
        )
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
        let c = &self.shared.counters;
        c.batched.fetch_add(1, Ordering::Relaxed);
        c.batched_pieces
            .fetch_add(pieces.len() as u64, Ordering::Relaxed);
        let mut cfg2 = cfg.clone();
        cfg2.scatter = scatter;
        let hosts = hosts.into_iter().map(Raw).collect();
        self.run(ctx, dir, hosts, pieces, plan, params, &cfg2, None, kernel)
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
            let r = Request {
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

    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        ctx: &Context,
        dir: Dir,
        hosts: Vec<Raw<*mut u8>>,
        pieces: Vec<PieceSpec>,
        plan: Plan,
        params: PackParams,
        cfg: &TransferConfig,
        on: Option<CUstream>,
        kernel: Option<Raw<CUfunction>>,
    ) -> Result<()> {
        if plan.chunks.is_empty() {
            return Ok(());
        }
        self.shared
            .counters
            .staged_bytes
            .fetch_add(plan.total_bytes as u64, Ordering::Relaxed);
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
            self.shared.lane(&job, true);
            // `_guard` closes the job and waits for the helpers here.
        }
        ctx.bind()?;
        let err = job.error.lock().unwrap_or_else(|p| p.into_inner()).take();
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Blocks (sleeping, not spinning) until the work queued on `stream` so far has
/// completed. The current context must be the stream's.
fn wait_for_stream_work(stream: CUstream) -> Result<()> {
    let e = driver::event_create_flags(driver::EVENT_BLOCKING_SYNC | driver::EVENT_DISABLE_TIMING)?;
    let r = driver::event_record(e, stream).and_then(|_| driver::event_synchronize(e));
    // Safety: created above; the synchronisation (or its failure) leaves no use of it.
    let _ = unsafe { driver::event_destroy(e) };
    r
}

fn worker(shared: Arc<Shared>) {
    loop {
        let job = {
            let mut q = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if q.shutdown {
                    return;
                }
                if let Some(j) = q.jobs.pop_front() {
                    break j;
                }
                q = shared.queue_cv.wait(q).unwrap_or_else(|p| p.into_inner());
            }
        };
        if driver::ctx_set_current(shared.ctx.0).is_ok() {
            shared.lane(&job, false);
        }
    }
}

impl Shared {
    /// A kit of `chunk`-byte buffers out of the pool, for a pipeline outside the engine
    /// (`transfer::lane`): waits for a release while the pool is at its bound when
    /// `wait`, else `Ok(None)`.
    pub(super) fn lease_kit(&self, chunk: usize, wait: bool) -> Result<Option<Kit>> {
        let mut alloc = || Kit::new(self.ctx.0, chunk, self.scratch_bytes.clone());
        if wait {
            self.pool.acquire(chunk, 2 * chunk, &mut alloc, &|| false)
        } else {
            self.pool.try_acquire(chunk, 2 * chunk, &mut alloc)
        }
    }

    /// Gives a leased kit back: reused when `idle` (no DMA of it can be pending),
    /// abandoned (leaked) otherwise.
    pub(super) fn return_kit(&self, kit: Kit, idle: bool) {
        if idle {
            self.pool.release(kit);
        } else {
            self.pool.abandon(kit);
        }
    }

    /// Works on `job` as one lane. The caller's lane (`blocking`) waits for a kit when
    /// the pool is at its limit; a worker's lane gives up instead.
    fn lane(&self, job: &Job, blocking: bool) {
        if !job.enter() {
            return;
        }
        let _active = ActiveGuard(job);
        if job.exhausted() {
            return;
        }
        let chunk = job.kit_chunk;
        let mut alloc = || Kit::new(self.ctx.0, chunk, self.scratch_bytes.clone());
        let got = if blocking {
            self.pool
                .acquire(chunk, 2 * chunk, &mut alloc, &|| job.exhausted())
        } else {
            self.pool.try_acquire(chunk, 2 * chunk, &mut alloc)
        };
        let kit = match got {
            Ok(Some(k)) => k,
            Ok(None) => return,
            Err(e) => {
                if blocking {
                    job.fail(e);
                }
                return;
            }
        };
        let mut guard = KitGuard {
            pool: &self.pool,
            kit: Some(kit),
        };
        let Some(kit) = guard.kit.as_mut() else {
            return;
        };
        let r = match job.dir {
            Dir::HtoD => self.lane_htod(job, kit),
            Dir::DtoH => self.lane_dtoh(job, kit),
        }
        .and_then(|_| driver::stream_synchronize(kit.stream));
        if let Err(e) = r {
            job.fail(e);
        }
        // `guard` synchronises the stream again (cheap) and returns or abandons the kit;
        // then `_active` leaves the job.
    }

    fn lane_htod(&self, job: &Job, kit: &mut Kit) -> Result<()> {
        let mut slot = 0;
        let mut used = [false; 2];
        while let Some(ci) = job.claim() {
            if used[slot] {
                driver::event_synchronize(kit.events[slot])?;
            }
            let stage = kit.host[slot];
            // Safety: the staging buffer holds `kit.chunk` bytes and no DMA reads it now
            // (its event was synchronised); chunk `ci` is ours.
            unsafe { job.stage_copy(ci, stage, Dir::HtoD) };
            match &job.plan.chunks[ci] {
                Chunk::Direct {
                    piece,
                    piece_off,
                    len,
                } => {
                    // Safety: the staging buffer now holds the chunk's `len <= kit.chunk`
                    // bytes, and is not written again before the slot's event (recorded
                    // after this DMA) completes; the device range was validated.
                    unsafe {
                        dt::memcpy_htod_async(
                            job.pieces[*piece].dev + *piece_off as u64,
                            stage,
                            *len,
                            kit.stream,
                        )?;
                    }
                }
                Chunk::Packed {
                    segs,
                    tiles,
                    data_len,
                } => {
                    let segs = &job.plan.segs[segs.clone()];
                    self.move_packed(job, kit, slot, segs, *tiles, *data_len, Dir::HtoD)?;
                }
            }
            driver::event_record(kit.events[slot], kit.stream)?;
            used[slot] = true;
            slot ^= 1;
        }
        Ok(())
    }

    /// Moves packed chunk `segs` between slot `slot`'s staging buffer and the pieces'
    /// device ranges, queued on the kit's stream. Host->device the staging buffer
    /// holds the packed data, which goes up and is scattered to the pieces;
    /// device->host the pieces are gathered and come down into its data area. No DMA
    /// or CPU copy uses the slot's buffers when this is called.
    #[allow(clippy::too_many_arguments)]
    fn move_packed(
        &self,
        job: &Job,
        kit: &mut Kit,
        slot: usize,
        segs: &[plan::Seg],
        tiles: usize,
        data_len: usize,
        dir: Dir,
    ) -> Result<()> {
        let p = &job.params;
        let stage = kit.host[slot];
        match job.scatter {
            ScatterMode::Kernel => {
                let kernel = job
                    .kernel
                    .ok_or_else(|| Error::invalid("scatter kernel not loaded"))?;
                let scratch = kit.scratch(slot)?;
                let table_off = p.data_offset - tiles * plan::TABLE_ENTRY_BYTES;
                // Safety: the table area `table_off..data_offset` lies in the staging
                // buffer, is 8-byte aligned (page-aligned buffer, offsets multiples of
                // 8) and no DMA uses the buffer now. `MaybeUninit`: the page-locked
                // memory may never have been written.
                let table = unsafe {
                    std::slice::from_raw_parts_mut(
                        stage.add(table_off).cast::<MaybeUninit<TableEntry>>(),
                        tiles,
                    )
                };
                let n = plan::fill_table(segs, &job.pieces, p, scratch, dir, table);
                self.counters.kernel_chunks.fetch_add(1, Ordering::Relaxed);
                // Host->device the data area goes up with the table; device->host only
                // the table does.
                let up = match dir {
                    Dir::HtoD => p.data_offset - table_off + data_len,
                    Dir::DtoH => p.data_offset - table_off,
                };
                // Safety: `table_off..table_off + up` (table, and host->device the data,
                // `<= chunk` bytes) of the staging buffer goes to the same offsets of the
                // scratch buffer (also `chunk` bytes); the kernel copies each segment
                // between the scratch data area and its device range (validated by the
                // caller of `copy_many`); device->host the data area then comes back
                // into the staging buffer's data area, disjoint from the table area the
                // first DMA reads (which precedes it in stream order anyway). The CPU
                // touches the staging buffer again only after the slot's event.
                unsafe {
                    dt::memcpy_htod_async(
                        scratch + table_off as u64,
                        stage.add(table_off),
                        up,
                        kit.stream,
                    )?;
                    kernels::launch_copy_segments(
                        kernel.0,
                        scratch + table_off as u64,
                        n as u32,
                        job.blocks,
                        kit.stream,
                    )?;
                    if dir == Dir::DtoH {
                        dt::memcpy_dtoh_async(
                            stage.add(p.data_offset),
                            scratch + p.data_offset as u64,
                            data_len,
                            kit.stream,
                        )?;
                    }
                }
                Ok(())
            }
            ScatterMode::MemcpyBatch => {
                let mut dsts = Vec::with_capacity(segs.len());
                let mut srcs = Vec::with_capacity(segs.len());
                let mut sizes = Vec::with_capacity(segs.len());
                for s in segs {
                    let dev = job.pieces[s.piece].dev + s.piece_off as u64;
                    // Page-locked host memory: its host address is its unified address.
                    let host = stage as u64 + (p.data_offset + s.stage_off) as u64;
                    let (dst, src) = match dir {
                        Dir::HtoD => (dev, host),
                        Dir::DtoH => (host, dev),
                    };
                    dsts.push(dst);
                    srcs.push(src);
                    sizes.push(s.len);
                }
                self.counters
                    .memcpy_batch_chunks
                    .fetch_add(1, Ordering::Relaxed);
                // Safety: the host side of every entry lies in the page-locked staging
                // buffer, the device side in a validated device range; the CPU touches
                // the buffer again only after the slot's event (recorded after this
                // call) completes.
                unsafe {
                    dt::memcpy_batch_async(
                        &mut dsts,
                        &mut srcs,
                        &mut sizes,
                        dir == Dir::HtoD,
                        job.ordinal,
                        kit.stream,
                    )
                }
            }
        }
    }

    fn lane_dtoh(&self, job: &Job, kit: &mut Kit) -> Result<()> {
        let mut inflight: [Option<usize>; 2] = [None, None];
        for (slot, entry) in inflight.iter_mut().enumerate() {
            match job.claim() {
                Some(ci) => {
                    self.enqueue_dtoh(job, kit, ci, slot)?;
                    *entry = Some(ci);
                }
                None => break,
            }
        }
        let mut slot = 0;
        while inflight.iter().any(Option::is_some) {
            let Some(ci) = inflight[slot] else {
                slot ^= 1;
                continue;
            };
            driver::event_synchronize(kit.events[slot])?;
            // Safety: the chunk's DMA into the staging buffer has completed (event) and
            // no other DMA uses the buffer until the next one is queued below; chunk
            // `ci` is ours.
            unsafe { job.stage_copy(ci, kit.host[slot], Dir::DtoH) };
            inflight[slot] = None;
            if let Some(next) = job.claim() {
                self.enqueue_dtoh(job, kit, next, slot)?;
                inflight[slot] = Some(next);
            }
            slot ^= 1;
        }
        Ok(())
    }

    /// Queues the device->host DMA (and, packed, the gather before it) of chunk `ci`
    /// into staging buffer `slot`, then records the slot's event.
    fn enqueue_dtoh(&self, job: &Job, kit: &mut Kit, ci: usize, slot: usize) -> Result<()> {
        let stage = kit.host[slot];
        match &job.plan.chunks[ci] {
            Chunk::Direct {
                piece,
                piece_off,
                len,
            } => {
                // Safety: the staging buffer holds `kit.chunk >= len` bytes and is not
                // read by the CPU until the slot's event completes.
                unsafe {
                    dt::memcpy_dtoh_async(
                        stage,
                        job.pieces[*piece].dev + *piece_off as u64,
                        *len,
                        kit.stream,
                    )?
                };
            }
            Chunk::Packed {
                segs,
                tiles,
                data_len,
            } => {
                let segs = &job.plan.segs[segs.clone()];
                self.move_packed(job, kit, slot, segs, *tiles, *data_len, Dir::DtoH)?;
            }
        }
        driver::event_record(kit.events[slot], kit.stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    fn job_with_chunks(n: usize) -> Job {
        let plan = plan::plan_single(n * 4096, 4096);
        Job {
            dir: Dir::HtoD,
            host: vec![Raw(std::ptr::null_mut())],
            pieces: vec![PieceSpec {
                len: n * 4096,
                dev: 0,
            }],
            plan,
            params: PackParams::for_kernel(4096),
            scatter: ScatterMode::Kernel,
            kernel: None,
            blocks: 1,
            ordinal: 0,
            kit_chunk: 4096,
            next: AtomicUsize::new(0),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            lanes: Mutex::new(LaneState::default()),
            lanes_cv: Condvar::new(),
        }
    }

    /// The protocol that keeps the caller's memory alive: every chunk is claimed once,
    /// the caller's close waits for every lane that entered, and no lane enters after.
    #[test]
    fn lanes_claim_each_chunk_once_and_close_waits_for_them() {
        for round in 0..20 {
            let job = Arc::new(job_with_chunks(500));
            let claimed: Arc<Vec<AtomicUsize>> =
                Arc::new((0..500).map(|_| AtomicUsize::new(0)).collect());
            let inside = Arc::new(AtomicUsize::new(0));
            let threads: Vec<_> = (0..8)
                .map(|t| {
                    let job = job.clone();
                    let claimed = claimed.clone();
                    let inside = inside.clone();
                    std::thread::spawn(move || {
                        // Late helpers (some start after the work is done) must not enter.
                        if t % 3 == 2 {
                            std::thread::sleep(std::time::Duration::from_millis(round % 3));
                        }
                        if !job.enter() {
                            return;
                        }
                        let _g = ActiveGuard(&job);
                        inside.fetch_add(1, Ordering::SeqCst);
                        while let Some(i) = job.claim() {
                            claimed[i].fetch_add(1, Ordering::SeqCst);
                            std::thread::yield_now();
                        }
                        inside.fetch_sub(1, Ordering::SeqCst);
                    })
                })
                .collect();
            // The caller works as a lane too, then closes and waits.
            {
                let _guard = JobGuard(&job);
                assert!(job.enter());
                let _g = ActiveGuard(&job);
                while let Some(i) = job.claim() {
                    claimed[i].fetch_add(1, Ordering::SeqCst);
                }
            }
            assert_eq!(
                inside.load(Ordering::SeqCst),
                0,
                "a lane was still working after close"
            );
            assert!(!job.enter(), "no lane enters a closed job");
            assert!(claimed.iter().all(|c| c.load(Ordering::SeqCst) == 1));
            for t in threads {
                t.join().unwrap();
            }
        }
    }

    #[test]
    fn a_failed_job_stops_claiming_and_keeps_the_first_error() {
        let job = job_with_chunks(10);
        assert_eq!(job.claim(), Some(0));
        job.fail(Error::invalid("first"));
        job.fail(Error::invalid("second"));
        assert_eq!(job.claim(), None);
        assert!(job.exhausted());
        let e = job.error.lock().unwrap().take().unwrap();
        assert!(e.to_string().contains("first"));
    }

    #[test]
    fn registrations_never_overlap_and_are_seen_by_other_copies() {
        let r = Registrations::new();
        assert!(!r.overlaps(0, usize::MAX), "nothing live");
        assert!(r.claim(4096, 3 * 4096));
        // A second registration of any overlapping page is refused (it stages).
        assert!(!r.claim(0, 4096 + 1));
        assert!(!r.claim(2 * 4096, 4 * 4096));
        assert!(r.claim(3 * 4096, 4 * 4096), "adjacent pages are fine");
        // A copy overlapping a live registration is seen (it stages).
        assert!(r.overlaps(3 * 4096 - 1, 3 * 4096));
        assert!(r.overlaps(0, 10 * 4096));
        assert!(!r.overlaps(0, 4096), "ends where the registration starts");
        assert!(!r.overlaps(4 * 4096, 5 * 4096));
        r.release(4096, 3 * 4096);
        assert!(!r.overlaps(4096, 3 * 4096));
        assert!(r.claim(0, 3 * 4096), "free again after release");
        r.release(0, 3 * 4096);
        r.release(3 * 4096, 4 * 4096);
        r.release(3 * 4096, 4 * 4096); // unknown range: ignored
        assert_eq!(r.live.load(Ordering::SeqCst), 0);
        assert!(!r.overlaps(0, usize::MAX));
    }

    #[test]
    fn routes_follow_the_configuration() {
        let cfg = TransferConfig::default();
        let small = cfg.staging_min_bytes - 1;
        let big = cfg.staging_min_bytes;
        assert!(!needs_probe(&cfg, small));
        assert!(needs_probe(&cfg, big));
        assert_eq!(route(&cfg, small, HostMemoryKind::Pageable), Route::Direct);
        assert_eq!(route(&cfg, big, HostMemoryKind::Pageable), Route::Staged);
        assert_eq!(route(&cfg, big, HostMemoryKind::PageLocked), Route::Direct);
        assert_eq!(route(&cfg, big, HostMemoryKind::OtherCuda), Route::Direct);

        let reg = TransferConfig {
            register_min_bytes: Some(256 * MIB),
            ..TransferConfig::default()
        };
        assert!(needs_probe(&reg, 256 * MIB));
        assert_eq!(
            route(&reg, 256 * MIB, HostMemoryKind::Pageable),
            Route::Registered
        );
        assert_eq!(
            route(&reg, 255 * MIB, HostMemoryKind::Pageable),
            Route::Staged
        );
        assert_eq!(
            route(&reg, 256 * MIB, HostMemoryKind::PageLocked),
            Route::Direct
        );

        for (mode, want) in [
            (PageableMode::Driver, Route::Direct),
            (PageableMode::Staged, Route::Staged),
            (PageableMode::Registered, Route::Registered),
        ] {
            let c = TransferConfig {
                pageable: mode,
                ..TransferConfig::default()
            };
            assert_eq!(route(&c, 1, HostMemoryKind::Pageable), want, "{mode:?}");
            assert_eq!(route(&c, 1, HostMemoryKind::PageLocked), Route::Direct);
            assert_eq!(needs_probe(&c, 1), mode != PageableMode::Driver);
        }
    }
}
