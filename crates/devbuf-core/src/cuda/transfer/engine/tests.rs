//! Unit tests of the engine: plans, claiming, kits and jobs without a GPU.

use super::job::*;
use super::registrations::Registrations;
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
