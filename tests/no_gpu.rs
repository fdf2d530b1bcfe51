//! Behaviour that holds on every machine, with or without a GPU: discovery never panics,
//! and without CUDA every entry point answers `Error::CudaUnavailable` saying why.

use devbuf::Error;
use devbuf::cuda::{self, Context};

#[test]
fn discovery_never_panics_and_agrees() {
    let n = cuda::device_count();
    assert_eq!(cuda::is_available(), n > 0);
    assert_eq!(cuda::unavailable_reason().is_none(), n > 0);
}

#[test]
fn without_cuda_every_entry_point_says_why() {
    if cuda::is_available() {
        println!("skipped: this machine has a GPU");
        return;
    }
    let reason = cuda::unavailable_reason().expect("a reason");
    assert!(!reason.is_empty());
    for e in [
        Context::new(0).unwrap_err(),
        Context::new(7).unwrap_err(),
        Context::new_dedicated(0).unwrap_err(),
    ] {
        assert_eq!(e.kind(), devbuf::ErrorKind::CudaUnavailable, "{e}");
        assert!(e.to_string().starts_with("CUDA is unavailable: "), "{e}");
        assert!(matches!(e, Error::CudaUnavailable { .. }));
    }
    // The driver-version query fails the same way unless a driver without devices exists.
    if let Err(e) = cuda::driver_version() {
        assert_eq!(e.kind(), devbuf::ErrorKind::CudaUnavailable);
    }
}

#[test]
fn discovery_is_safe_from_many_threads() {
    let handles: Vec<_> = (0..8)
        .map(|_| std::thread::spawn(|| (cuda::is_available(), cuda::device_count())))
        .collect();
    let first = (cuda::is_available(), cuda::device_count());
    for h in handles {
        assert_eq!(h.join().unwrap(), first);
    }
}
