//! Large chunk files decoded straight from a mapping of the page cache, instead of a
//! copy of them in the worker's buffer.
//!
//! A host read's decoders read each stored chunk once. Reading a file first copies it
//! from the page cache into the worker's buffer: with every core decoding, that copy
//! (a 2.8 MiB zstd file for each 4 MiB chunk) takes memory bandwidth the decoders
//! need, and it leaves the caches before the decoder reads it. Mapped (`mmap`, pages
//! mapped as the decoder first reads them), the decoder reads the page cache itself.
//! Measured on H100 machines' 16 cores (2026-11-27, `bench_zarrs`, 512 MiB zstd-1
//! float32 stores that tensorstore wrote, page cache warm, GB/s):
//!
//! - `--host-stages`, 16 threads: 4 MiB chunks (2.8 MiB files) read and decoded at
//!   11.83, mapped and decoded at 12.92 (decoding the frames already in memory: 12.24);
//!   1 MiB chunks (0.7 MiB files) no faster mapped (12.28 against 12.40): there,
//!   mapping and unmapping cost as much as the copy.
//! - Host reads of the 4 MiB store, five interleaved rounds: 8.49 -> 10.25 (median;
//!   `Decoder::Cpu` onto the device 9.94 -> 10.66); four rounds on another machine with
//!   every page mapped up front (`MAP_POPULATE`, no faster there): 10.2 -> 10.9.
//! - On the 2-core CI machine (a VM whose page faults cost more) the same host read is
//!   3% slower (2.78 -> 2.70; 6% with every page mapped up front).
//!
//! Files of [`MAP_MIN_BYTES`] or more are mapped; uncompressed chunks are read straight
//! into their places (no copy to save) and are not.
//!
//! A mapped file that shrinks while it is read (another process truncates or rewrites
//! it in place) raises `SIGBUS` on the pages past its new end, which would end the
//! process. While a worker reads its mapping, a `SIGBUS` handler (installed once, the
//! handler before it kept and called for every fault outside a mapping being read)
//! maps zero pages over the rest of that mapping and marks the read: its decode then
//! ends in an error naming the file, never in data taken as read. (A page the device
//! fails to deliver raises the same signal and ends the same way.) Writes through devbuf
//! replace a chunk file (a new file renamed over it), so they never shrink a file being
//! read.

use std::cell::Cell;
use std::ffi::c_void;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::OnceLock;

/// Stored bytes from which a chunk file (or a shard's inner chunk) is mapped rather
/// than read into the worker's buffer (see the module's measurements).
pub(crate) const MAP_MIN_BYTES: usize = 2 << 20;

thread_local! {
    /// The mapping this thread is reading: `[start, end)` (page-rounded), `(0, 0)` when none.
    static GUARD: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
    /// Whether a page of that mapping faulted past its file's end.
    static SHRUNK: Cell<bool> = const { Cell::new(false) };
}

/// The `SIGBUS` action in place before ours, and the page size.
struct Installed {
    prev: libc::sigaction,
    page: usize,
}

static INSTALLED: OnceLock<Option<Installed>> = OnceLock::new();

/// Installs the handler once; `None` when it could not be installed (then files are not
/// mapped).
fn installed() -> Option<&'static Installed> {
    INSTALLED
        .get_or_init(|| {
            // Safety: sysconf has no preconditions.
            let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
            if !page.is_power_of_two() {
                return None;
            }
            // Safety: zeroed `sigaction`s are valid; the new action's handler has the
            // `SA_SIGINFO` signature; `prev` receives the old action.
            unsafe {
                let mut new: libc::sigaction = std::mem::zeroed();
                let mut prev: libc::sigaction = std::mem::zeroed();
                new.sa_sigaction = on_sigbus as *const () as usize;
                new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut new.sa_mask);
                if libc::sigaction(libc::SIGBUS, &new, &mut prev) != 0 {
                    return None;
                }
                Some(Installed { prev, page })
            }
        })
        .as_ref()
}

/// The `SIGBUS` handler: a fault inside the mapping this thread is reading gets zero
/// pages from the faulting page to the mapping's end (the access then reads zeros) and
/// marks the read; any other fault goes to the action before ours.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // Safety: the kernel passes a valid `siginfo_t` to an `SA_SIGINFO` handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    // The thread-local was written by this thread before its mapping was read, so
    // reading it here allocates nothing.
    let (start, end) = GUARD.try_with(Cell::get).unwrap_or((0, 0));
    if let Some(inst) = INSTALLED.get().and_then(Option::as_ref)
        && start <= addr
        && addr < end
    {
        let page = addr & !(inst.page - 1);
        // Safety: replaces pages of this thread's own mapping (`[page, end)` lies in it)
        // with anonymous zero pages; `mmap` is a system call, safe in a handler.
        let r = unsafe {
            libc::mmap(
                page as *mut c_void,
                end - page,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if r != libc::MAP_FAILED {
            let _ = SHRUNK.try_with(|s| s.set(true));
            return;
        }
    }
    chain(sig, info, ctx);
}

/// Hands a fault that is not ours to the action before ours: its handler, or (for the
/// default action or none) the default restored, so that the access faults again and
/// the process ends as it would have without us.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let prev = INSTALLED.get().and_then(Option::as_ref).map(|i| &i.prev);
    match prev {
        Some(p) if p.sa_sigaction != libc::SIG_DFL && p.sa_sigaction != libc::SIG_IGN => {
            if p.sa_flags & libc::SA_SIGINFO != 0 {
                // Safety: the previous handler was installed with this signature.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
                    unsafe { std::mem::transmute(p.sa_sigaction) };
                f(sig, info, ctx);
            } else {
                // Safety: the previous handler was installed with this signature.
                let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(p.sa_sigaction) };
                f(sig);
            }
        }
        _ => {
            // Safety: a zeroed action is `SIG_DFL` with an empty mask.
            unsafe {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigemptyset(&mut dfl.sa_mask);
                libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
            }
        }
    }
}

/// `len` bytes at `offset` of a file, mapped read-only.
pub(crate) struct Mapped {
    /// The mapping's start (page-aligned) and length (a multiple of the page size).
    at: *mut c_void,
    map_len: usize,
    /// The bytes asked for: from `skip` into the mapping, `len` of them.
    skip: usize,
    len: usize,
}

/// A mapped read during which the file shrank: the bytes read are not the file's.
#[derive(Debug)]
pub(crate) struct Shrunk;

impl Mapped {
    /// Maps `len` (> 0) bytes at `offset` of `file`; `Err` when they cannot be mapped
    /// here (the caller reads them instead).
    pub(crate) fn new(file: &File, offset: u64, len: usize) -> std::io::Result<Mapped> {
        let unavailable = |what: &str| std::io::Error::other(what.to_string());
        let inst = installed().ok_or_else(|| unavailable("no SIGBUS handler"))?;
        if len == 0 {
            return Err(unavailable("nothing to map"));
        }
        let skip = (offset % inst.page as u64) as usize;
        let start = offset - skip as u64;
        let map_len = skip
            .checked_add(len)
            .and_then(|n| n.checked_next_multiple_of(inst.page))
            .ok_or_else(|| unavailable("too long to map"))?;
        let start = libc::off_t::try_from(start).map_err(|_| unavailable("offset too large"))?;
        // Safety: a new read-only private mapping of an open file; nothing else is
        // placed at the address the kernel picks.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                start,
            )
        };
        if at == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapped {
            at,
            map_len,
            skip,
            len,
        })
    }

    /// Runs `f` on the mapped bytes, guarded: `Err(Shrunk)` (whatever `f` returned) when
    /// the file shrank during the call, the pages past its end read as zeros.
    pub(crate) fn read<T>(&self, f: impl FnOnce(&[u8]) -> T) -> Result<T, Shrunk> {
        /// Clears the thread's guard when the read ends, by return or unwind (a stale
        /// guard could mend a fault in whatever is mapped there later).
        struct Unguard;
        impl Drop for Unguard {
            fn drop(&mut self) {
                GUARD.with(|g| g.set((0, 0)));
            }
        }
        let start = self.at as usize;
        SHRUNK.with(|s| s.set(false));
        GUARD.with(|g| g.set((start, start + self.map_len)));
        let unguard = Unguard;
        // Safety: `skip + len` bytes lie inside the mapping, which lives as long as
        // `self`; pages that fault are replaced (zeros) rather than left unmapped.
        let bytes =
            unsafe { std::slice::from_raw_parts(self.at.cast::<u8>().add(self.skip), self.len) };
        let out = f(bytes);
        drop(unguard);
        if SHRUNK.with(Cell::get) {
            SHRUNK.with(|s| s.set(false));
            return Err(Shrunk);
        }
        Ok(out)
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // Safety: the mapping made in `new` (or the zero pages put over part of it),
        // no slice of it outlives `read`.
        unsafe { libc::munmap(self.at, self.map_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    /// A file holding `bytes` in a directory of its own, removed on drop.
    struct Temp(std::path::PathBuf);

    impl Drop for Temp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn file_of(tag: &str, bytes: &[u8]) -> (Temp, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("devbuf-mapped-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c");
        std::fs::File::create(&path)
            .unwrap()
            .write_all(bytes)
            .unwrap();
        (Temp(dir), path)
    }

    /// Another writer truncating the file at `path` in place to `len` bytes.
    fn truncate(path: &std::path::Path, len: u64) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .unwrap()
            .set_len(len)
            .unwrap();
    }

    fn noise(n: usize) -> Vec<u8> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn mapped_bytes_are_the_files_at_any_offset() {
        let data = noise(3 << 20);
        let (_d, path) = file_of("offsets", &data);
        let f = File::open(&path).unwrap();
        for (offset, len) in [
            (0usize, data.len()),
            (12_345, 1 << 20),
            (4096, 4096),
            (data.len() - 1, 1),
        ] {
            let m = Mapped::new(&f, offset as u64, len).unwrap();
            let got = m.read(|b| b.to_vec()).unwrap();
            assert_eq!(
                got,
                &data[offset..offset + len],
                "offset {offset}, {len} bytes"
            );
        }
    }

    #[test]
    fn a_file_that_shrinks_while_mapped_is_an_error_not_a_crash() {
        let data = noise(3 << 20);
        let (_d, path) = file_of("shrinks", &data);
        let f = File::open(&path).unwrap();
        let m = Mapped::new(&f, 100, data.len() - 100).unwrap();
        // Another writer truncates the file in place before any page was read.
        truncate(&path, 4096);
        let r = m.read(|b| b.iter().map(|&x| u64::from(x)).sum::<u64>());
        assert!(matches!(r, Err(Shrunk)), "{r:?}");
        drop(m);
        // The thread reads files again afterwards, mapped and not.
        let (_d2, path2) = file_of("after", &data);
        let f2 = File::open(&path2).unwrap();
        let m2 = Mapped::new(&f2, 0, data.len()).unwrap();
        assert!(m2.read(|b| b == &data[..]).unwrap());
        let mut head = [0u8; 16];
        f2.read_exact_at(&mut head, 0).unwrap();
        assert_eq!(head, data[..16]);
    }

    #[test]
    fn a_read_before_the_file_shrinks_is_ok_and_the_next_is_an_error() {
        let data = noise(1 << 20);
        let (_d, path) = file_of("between", &data);
        let f = File::open(&path).unwrap();
        let m = Mapped::new(&f, 0, data.len()).unwrap();
        assert_eq!(m.read(|b| b.to_vec()).unwrap(), data);
        truncate(&path, 0);
        let r = m.read(|b| b[b.len() - 1]);
        assert!(matches!(r, Err(Shrunk)), "{r:?}");
    }

    #[test]
    fn a_read_that_unwinds_leaves_no_guard_behind() {
        let data = noise(1 << 16);
        let (_d, path) = file_of("unwinds", &data);
        let f = File::open(&path).unwrap();
        let m = Mapped::new(&f, 0, data.len()).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            m.read(|b| {
                assert_ne!(GUARD.with(Cell::get), (0, 0), "guarded inside the read");
                if b.len() == data.len() {
                    panic!("a decoder that panics");
                }
            })
        }));
        assert!(r.is_err());
        assert_eq!(GUARD.with(Cell::get), (0, 0));
    }

    /// Set in the child process of
    /// [`a_fault_outside_a_guarded_read_still_ends_the_process`].
    const FAULT_CHILD: &str = "DEVBUF_MAPPED_FAULT_CHILD";

    #[test]
    #[ignore = "the child process of a_fault_outside_a_guarded_read_still_ends_the_process"]
    fn fault_child() {
        if std::env::var_os(FAULT_CHILD).is_none() {
            return;
        }
        let data = noise(1 << 20);
        let (_d, path) = file_of("child", &data);
        let f = File::open(&path).unwrap();
        let m = Mapped::new(&f, 0, data.len()).unwrap(); // the handler is in place
        truncate(&path, 0);
        // Touched outside `read`: not a fault the handler may mend.
        // Safety: inside the mapping (which faults: the file is empty now).
        let b = unsafe { std::ptr::read_volatile(m.at.cast::<u8>().add(8192)) };
        println!("read {b} past the end of an empty file");
    }

    #[test]
    fn a_fault_outside_a_guarded_read_still_ends_the_process() {
        use std::os::unix::process::ExitStatusExt;
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "read::mapped::tests::fault_child", "--ignored"])
            .args(["--nocapture", "--test-threads=1"])
            .env(FAULT_CHILD, "1")
            .output()
            .unwrap();
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGBUS),
            "the child should die of SIGBUS: {out:?}"
        );
    }
}
