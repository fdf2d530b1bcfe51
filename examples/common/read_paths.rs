//! Other ways to bring a store's stored bytes toward the device, timed on the store's
//! own files beside the GPU workers' readers (a buffered `pread` of each file by every
//! core into page-locked memory, then a copy to the device). Issue 28 names them as
//! worth measuring for the device path's read stage:
//!
//! - `O_DIRECT`: each file read past the page cache straight into page-locked memory
//!   (each at a 4 KiB-aligned place, its length rounded up to 4 KiB as direct reads
//!   need). With the page cache warm this reads the disk again.
//! - io_uring: each thread keeps several buffered reads in flight on a ring of its own
//!   (one `io_uring_enter` for many files instead of a `pread` each).
//! - cuFile (GPUDirect Storage, `libcufile` loaded at run time): `cuFileRead` of each
//!   file straight into device memory, its file opened buffered or with `O_DIRECT`.
//!   Where the machine has no GPUDirect Storage (no `nvidia-fs` driver), cuFile's
//!   compatibility mode reads through bounce buffers of its own.
//!
//! Each path's bytes are checked once against the buffered reads before it is timed.
//!
//! Included with `#[path = "common/read_paths.rs"] mod read_paths;`.

use std::ffi::{c_int, c_void};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The alignment direct reads need of places, lengths and file offsets.
pub const DIRECT_ALIGN: usize = 4096;

/// Runs `each(thread, file index)` over every file with `threads` threads, each taking
/// the next file when done with one; the first error ends the run.
fn for_each_file(
    n: usize,
    threads: usize,
    each: &(dyn Fn(usize) -> std::io::Result<()> + Sync),
) -> std::io::Result<()> {
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads.max(1))
            .map(|_| {
                s.spawn(|| -> std::io::Result<()> {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            return Ok(());
                        }
                        each(i)?;
                    }
                })
            })
            .collect();
        hs.into_iter().try_for_each(|h| {
            h.join()
                .map_err(|_| std::io::Error::other("a reader thread panicked"))?
        })
    })
}

/// A raw base pointer that threads writing disjoint ranges below it may share.
#[derive(Clone, Copy)]
struct Base(*mut u8);
// Safety: every user writes only its own file's range (disjoint, from the offsets).
unsafe impl Send for Base {}
// Safety: as above.
unsafe impl Sync for Base {}

impl Base {
    /// The pointer `offset` bytes past the base (a method, so that closures capture the
    /// whole `Base`, not its raw pointer field).
    fn at(self, offset: usize) -> *mut u8 {
        self.0.wrapping_add(offset)
    }
}

/// Reads each file with `O_DIRECT` into `dst` at its place from
/// `staging::offsets_aligned(files, DIRECT_ALIGN)`
/// (`dst`'s start 4 KiB-aligned, as page-locked allocations are), `threads` at once.
pub fn direct(
    dst: &mut [u8],
    files: &[(PathBuf, usize)],
    offsets: &[usize],
    threads: usize,
) -> std::io::Result<()> {
    if !(dst.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN) {
        return Err(std::io::Error::other(
            "the buffer for direct reads does not start 4 KiB-aligned",
        ));
    }
    let (base, cap) = (Base(dst.as_mut_ptr()), dst.len());
    for_each_file(files.len(), threads, &|i| {
        let (path, len) = &files[i];
        let room = len.next_multiple_of(DIRECT_ALIGN);
        if offsets[i] + room > cap {
            return Err(std::io::Error::other("direct read past the buffer's end"));
        }
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)?;
        // Safety: this file's range of `dst`, disjoint from every other file's.
        let place = unsafe { std::slice::from_raw_parts_mut(base.at(offsets[i]), room) };
        let mut got = 0usize;
        while got < *len {
            // Whole aligned blocks from an aligned file offset; the file's end ends it.
            let n = f.read_at(&mut place[got..], got as u64)?;
            if n == 0 {
                return Err(std::io::Error::other(format!(
                    "{}: ended after {got} of {len} bytes",
                    path.display()
                )));
            }
            got += n;
        }
        Ok(())
    })
}

/// Reads each file (buffered) into `dst` at its place from `offsets` through io_uring:
/// `threads` threads, each with a ring of its own keeping up to `depth` reads in flight.
pub fn uring(
    dst: &mut [u8],
    files: &[(PathBuf, usize)],
    offsets: &[usize],
    threads: usize,
    depth: usize,
) -> std::io::Result<()> {
    use io_uring::{IoUring, opcode, types};
    let (base, cap) = (Base(dst.as_mut_ptr()), dst.len());
    let next = AtomicUsize::new(0);
    let depth = depth.clamp(1, 256);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads.max(1))
            .map(|_| {
                let next = &next;
                s.spawn(move || -> std::io::Result<()> {
                    let mut ring = IoUring::new(depth as u32)?;
                    // Per slot: the open file, its index, bytes read so far.
                    let mut slots: Vec<Option<(File, usize, usize)>> =
                        (0..depth).map(|_| None).collect();
                    let mut in_flight = 0usize;
                    let queue =
                        |ring: &mut IoUring, slot: usize, f: &File, i: usize, done: usize| {
                            let (_, len) = &files[i];
                            let at = offsets[i] + done;
                            let entry = opcode::Read::new(
                                types::Fd(f.as_raw_fd()),
                                // Safety (of the pointer's use by the kernel): this file's range
                                // of `dst`, disjoint from every other file's, alive until the
                                // scope ends, after every completion was reaped.
                                base.at(at),
                                (len - done) as u32,
                            )
                            .offset(done as u64)
                            .build()
                            .user_data(slot as u64);
                            // Safety: the entry's buffer and file stay valid until its
                            // completion is reaped (the slot holds the file).
                            unsafe { ring.submission().push(&entry) }.map_err(|_| {
                                std::io::Error::other("io_uring submission queue full")
                            })
                        };
                    loop {
                        // Fill the free slots with the next files.
                        for (slot, held) in slots.iter_mut().enumerate() {
                            if held.is_some() {
                                continue;
                            }
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            if i >= files.len() {
                                break;
                            }
                            if offsets[i] + files[i].1 > cap || files[i].1 > u32::MAX as usize {
                                return Err(std::io::Error::other("read past the buffer's end"));
                            }
                            let f = File::open(&files[i].0)?;
                            queue(&mut ring, slot, &f, i, 0)?;
                            *held = Some((f, i, 0));
                            in_flight += 1;
                        }
                        if in_flight == 0 {
                            return Ok(());
                        }
                        ring.submit_and_wait(1)?;
                        let done: Vec<(u64, i32)> = ring
                            .completion()
                            .map(|c| (c.user_data(), c.result()))
                            .collect();
                        for (slot, res) in done {
                            let slot = slot as usize;
                            let Some((f, i, got)) = slots[slot].take() else {
                                return Err(std::io::Error::other(
                                    "io_uring: an unknown completion",
                                ));
                            };
                            in_flight -= 1;
                            if res < 0 {
                                return Err(std::io::Error::from_raw_os_error(-res));
                            }
                            if res == 0 {
                                return Err(std::io::Error::other(format!(
                                    "{}: ended after {got} of {} bytes",
                                    files[i].0.display(),
                                    files[i].1
                                )));
                            }
                            let got = got + res as usize;
                            if got < files[i].1 {
                                // A short read: queue the rest.
                                queue(&mut ring, slot, &f, i, got)?;
                                slots[slot] = Some((f, i, got));
                                in_flight += 1;
                            }
                        }
                    }
                })
            })
            .collect();
        hs.into_iter().try_for_each(|h| {
            h.join()
                .map_err(|_| std::io::Error::other("an io_uring thread panicked"))?
        })
    })
}

/// `CUfileError_t`: cuFile's status and, for CUDA failures, the driver's.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct CuFileError {
    err: c_int,
    cu_err: c_int,
}

/// `CUfileDescr_t` for a file descriptor (`CU_FILE_HANDLE_TYPE_OPAQUE_FD`).
#[repr(C)]
struct CuFileDescr {
    kind: c_int,
    fd: FdUnion,
    fs_ops: *const c_void,
}

#[repr(C)]
union FdUnion {
    fd: c_int,
    handle: *mut c_void,
}

type DriverOpen = unsafe extern "C" fn() -> CuFileError;
type HandleRegister = unsafe extern "C" fn(*mut *mut c_void, *mut CuFileDescr) -> CuFileError;
type HandleDeregister = unsafe extern "C" fn(*mut c_void);
type Read = unsafe extern "C" fn(*mut c_void, *mut c_void, usize, i64, i64) -> isize;

/// cuFile, loaded from `libcufile.so.0` (the `nvidia-cufile` package's library on
/// `LD_LIBRARY_PATH`) with its driver opened.
pub struct CuFile {
    _lib: libloading::Library,
    register: HandleRegister,
    deregister: HandleDeregister,
    read: Read,
}

impl CuFile {
    /// Loads cuFile and opens its driver; `Err` says why not.
    pub fn open() -> Result<CuFile, String> {
        // Safety: loading NVIDIA's library runs its initialisers, nothing else.
        let lib = ["libcufile.so.0", "libcufile.so"]
            .iter()
            .find_map(|n| unsafe { libloading::Library::new(n) }.ok())
            .ok_or("libcufile.so.0 is not on the library path")?;
        // Safety: the symbols' C signatures are cufile.h's, as declared above.
        let (open, register, deregister, read) = unsafe {
            let sym = |n: &[u8]| lib.get::<*const c_void>(n).map(|s| *s);
            let f = |n: &[u8]| sym(n).map_err(|e| format!("libcufile: {e}"));
            (
                std::mem::transmute::<*const c_void, DriverOpen>(f(b"cuFileDriverOpen\0")?),
                std::mem::transmute::<*const c_void, HandleRegister>(f(b"cuFileHandleRegister\0")?),
                std::mem::transmute::<*const c_void, HandleDeregister>(f(
                    b"cuFileHandleDeregister\0",
                )?),
                std::mem::transmute::<*const c_void, Read>(f(b"cuFileRead\0")?),
            )
        };
        // Safety: no arguments; cuFile initialises its driver state.
        let e = unsafe { open() };
        if e.err != 0 {
            return Err(format!(
                "cuFileDriverOpen failed (cuFile error {}, CUDA error {})",
                e.err, e.cu_err
            ));
        }
        Ok(CuFile {
            _lib: lib,
            register,
            deregister,
            read,
        })
    }

    /// Reads each file with `cuFileRead` into device memory at `base + offsets[i]`,
    /// `threads` threads with `ctx` (a raw `CUcontext`) current; `direct`: files opened
    /// with `O_DIRECT` (what GPUDirect Storage reads), else buffered.
    pub fn read(
        &self,
        ctx: *mut c_void,
        base: u64,
        files: &[(PathBuf, usize)],
        offsets: &[usize],
        threads: usize,
        direct: bool,
    ) -> std::io::Result<()> {
        let ctx = Base(ctx.cast());
        for_each_file(files.len(), threads, &|i| {
            // Safety: `ctx` is a live context that the caller holds.
            let r = unsafe { cudarc::driver::sys::cuCtxSetCurrent(ctx.at(0).cast()) };
            if r != cudarc::driver::sys::CUresult::CUDA_SUCCESS {
                return Err(std::io::Error::other(format!("cuCtxSetCurrent: {r:?}")));
            }
            let (path, len) = &files[i];
            let mut open = std::fs::OpenOptions::new();
            open.read(true);
            if direct {
                open.custom_flags(libc::O_DIRECT);
            }
            let f = open.open(path)?;
            let mut descr = CuFileDescr {
                kind: 1, // CU_FILE_HANDLE_TYPE_OPAQUE_FD
                fd: FdUnion { fd: f.as_raw_fd() },
                fs_ops: std::ptr::null(),
            };
            let mut handle = std::ptr::null_mut();
            // Safety: `descr` names an open file for the call's duration.
            let e = unsafe { (self.register)(&mut handle, &mut descr) };
            if e.err != 0 {
                return Err(std::io::Error::other(format!(
                    "cuFileHandleRegister: cuFile error {}, CUDA error {} (cuFile's log, \
                     cufile.log in the working directory, says why)",
                    e.err, e.cu_err
                )));
            }
            // Safety: `base + offsets[i]` .. `+ len` lies in the caller's device buffer
            // (its place for this file); the handle is live until deregistered below.
            let n = unsafe { (self.read)(handle, base as *mut c_void, *len, 0, offsets[i] as i64) };
            // Safety: the handle registered above, used no more.
            unsafe { (self.deregister)(handle) };
            if n != *len as isize {
                return Err(std::io::Error::other(format!(
                    "cuFileRead of {}: {n} of {len} bytes (negative: an error)",
                    path.display()
                )));
            }
            Ok(())
        })
    }
}

/// Whether the machine has the GPUDirect Storage kernel driver (`nvidia-fs`): without it
/// cuFile reads in its compatibility mode.
pub fn has_nvidia_fs() -> bool {
    std::path::Path::new("/proc/driver/nvidia-fs").exists()
}

/// Whether `got` holds each of `files` at `got_offsets` as `want` does at
/// `want_offsets`; `Err` names the first file that differs.
pub fn same_files(
    files: &[(PathBuf, usize)],
    want: &[u8],
    want_offsets: &[usize],
    got: &[u8],
    got_offsets: &[usize],
) -> Result<(), String> {
    for (i, (path, len)) in files.iter().enumerate() {
        let a = want.get(want_offsets[i]..want_offsets[i] + len);
        let b = got.get(got_offsets[i]..got_offsets[i] + len);
        if a.is_none() || a != b {
            return Err(format!("{} read differently", path.display()));
        }
    }
    Ok(())
}
