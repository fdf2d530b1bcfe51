//! Lane workers: the worker threads, and one lane's work on a job (claim a chunk, copy
//! it through a staging buffer with the CPU while the other buffer's DMA runs).

use super::*;

/// Blocks (sleeping, not spinning) until the work queued on `stream` so far has
/// completed. The current context must be the stream's.
pub(super) fn wait_for_stream_work(stream: CUstream) -> Result<()> {
    let e = driver::event_create_flags(driver::EVENT_BLOCKING_SYNC | driver::EVENT_DISABLE_TIMING)?;
    let r = driver::event_record(e, stream).and_then(|_| driver::event_synchronize(e));
    // Safety: created above; the synchronisation (or its failure) leaves no use of it.
    let _ = unsafe { driver::event_destroy(e) };
    r
}

pub(super) fn worker(shared: Arc<Shared>) {
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
    pub(in crate::cuda::transfer) fn lease_kit(
        &self,
        chunk: usize,
        wait: bool,
    ) -> Result<Option<LaneResources>> {
        let mut alloc = || LaneResources::new(self.ctx.0, chunk, self.scratch_bytes.clone());
        if wait {
            self.pool.acquire(chunk, 2 * chunk, &mut alloc, &|| false)
        } else {
            self.pool.try_acquire(chunk, 2 * chunk, &mut alloc)
        }
    }

    /// Gives a leased kit back: reused when `idle` (no DMA of it can be pending),
    /// abandoned (leaked) otherwise.
    pub(in crate::cuda::transfer) fn return_kit(&self, kit: LaneResources, idle: bool) {
        if idle {
            self.pool.release(kit);
        } else {
            self.pool.abandon(kit);
        }
    }

    /// Works on `job` as one lane. The caller's lane (`blocking`) waits for a kit when
    /// the pool is at its limit; a worker's lane gives up instead.
    pub(super) fn lane(&self, job: &Job, blocking: bool) {
        if !job.enter() {
            return;
        }
        let _active = ActiveGuard(job);
        if job.exhausted() {
            return;
        }
        let chunk = job.kit_chunk;
        let mut alloc = || LaneResources::new(self.ctx.0, chunk, self.scratch_bytes.clone());
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
        let mut guard = LaneResourcesGuard {
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

    pub(super) fn lane_htod(&self, job: &Job, kit: &mut LaneResources) -> Result<()> {
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
    pub(super) fn move_packed(
        &self,
        job: &Job,
        kit: &mut LaneResources,
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

    pub(super) fn lane_dtoh(&self, job: &Job, kit: &mut LaneResources) -> Result<()> {
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
    pub(super) fn enqueue_dtoh(
        &self,
        job: &Job,
        kit: &mut LaneResources,
        ci: usize,
        slot: usize,
    ) -> Result<()> {
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
