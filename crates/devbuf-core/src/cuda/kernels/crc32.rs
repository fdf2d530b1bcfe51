//! gzip's CRC-32 of many device ranges at once (`crc32.cu`), for
//! [`DecompressBatch::expect_crc32`](crate::cuda::nvcomp::DecompressBatch::expect_crc32):
//! nvCOMP's deflate decoder does not check a gzip member's CRC-32, so the batch runs
//! this kernel on what nvCOMP decoded and compares the sums on the host.
//!
//! The kernel splits each range into 64-byte slices, takes each slice's CRC without
//! initial value or final XOR, and combines them by carrying each over the bytes after
//! it (a multiplication modulo the polynomial); the tests below run the same steps on
//! the host against a bitwise CRC-32.

use std::ffi::c_void;

use super::{PtxModule, function};
use crate::cuda::Context;
use crate::cuda::driver::{self, CUdeviceptr};
use crate::error::{Error, Result};

/// CRC-32 of device ranges (`crc32.cu`).
pub(crate) static CRC32: PtxModule = PtxModule {
    name: "crc32",
    ptx: concat!(include_str!("ptx/crc32.ptx"), "\0"),
};

/// Bytes of a range one block of the kernel covers (`BLOCK_BYTES` in `crc32.cu`).
const BLOCK_BYTES: u64 = 256 * 64;

/// Threads per block (`THREADS` in `crc32.cu`).
const THREADS: u32 = 256;

/// Ranges one launch covers at most (the grid's y dimension).
const MAX_RANGES_PER_LAUNCH: u64 = 65_535;

/// Device tables of [`launch_crc32_ranges`]: `n` entries each.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Crc32Tables {
    /// Start address of each range (`u64`).
    pub ptrs: CUdeviceptr,
    /// Bytes of each range as reported (`u64`; `u64::MAX`: none, an empty range).
    pub sizes: CUdeviceptr,
    /// Bytes of each range at most (`u64`): a reported size above is cut to it.
    pub caps: CUdeviceptr,
    /// Each range's CRC-32 (`u32`): zero before the launch.
    pub crcs: CUdeviceptr,
    /// Ranges.
    pub n: u64,
}

/// Queues the CRC-32 of `t.n` ranges on `stream`; `longest`: bytes of the longest
/// range at most (every capacity's maximum), which sizes the grid.
///
/// # Safety
/// The tables must be device memory of the current context holding `t.n` entries each,
/// every range must be readable device memory for its capacity, the result words must
/// be zero, and all must stay valid until the kernel completes on `stream`.
pub(crate) unsafe fn launch_crc32_ranges(
    ctx: &Context,
    t: &Crc32Tables,
    longest: u64,
    stream: driver::CUstream,
) -> Result<()> {
    if t.n == 0 {
        return Ok(());
    }
    let f = function(ctx, &CRC32, c"devbuf_crc32_ranges")?;
    let blocks = u32::try_from(longest.div_ceil(BLOCK_BYTES).max(1)).map_err(|_| {
        Error::invalid(format!(
            "CRC-32 of device ranges: a range of {longest} bytes is longer than one launch \
             covers ({} bytes at most)",
            u64::from(u32::MAX) * BLOCK_BYTES
        ))
    })?;
    let mut first = 0u64;
    while first < t.n {
        let count = (t.n - first).min(MAX_RANGES_PER_LAUNCH) as u32;
        let (mut pp, mut ps, mut pc, mut pr, mut pf) = (t.ptrs, t.sizes, t.caps, t.crcs, first);
        let mut params: [*mut c_void; 5] = [
            (&mut pp as *mut CUdeviceptr).cast(),
            (&mut ps as *mut CUdeviceptr).cast(),
            (&mut pc as *mut CUdeviceptr).cast(),
            (&mut pr as *mut CUdeviceptr).cast(),
            (&mut pf as *mut u64).cast(),
        ];
        ctx.bind()?;
        // Safety: the parameters match `devbuf_crc32_ranges(const u64*, const u64*,
        // const u64*, u32*, u64)`; the caller guarantees the tables and ranges; the grid
        // covers ranges `first..first + count` of them, each over `longest` bytes.
        unsafe {
            driver::launch_kernel(
                f,
                (blocks, count, 1),
                (THREADS, 1, 1),
                0,
                stream,
                &mut params,
            )?
        };
        first += u64::from(count);
    }
    Ok(())
}

/// gzip's CRC-32 of each of `ranges` of `buf`, computed by the device kernel on the
/// buffer's context, in order (for tests: the batch decoder runs the same kernel on its
/// own tables). Each range must lie inside `buf`; empty ranges give 0.
#[cfg(feature = "test-support")]
pub fn device_crc32(
    buf: &crate::cuda::DeviceBuffer,
    ranges: &[std::ops::Range<usize>],
) -> Result<Vec<u32>> {
    if let Some(r) = ranges.iter().find(|r| r.start > r.end || r.end > buf.len()) {
        return Err(Error::invalid(format!(
            "device_crc32: range {r:?} is not inside the buffer's {} bytes",
            buf.len()
        )));
    }
    let n = ranges.len();
    if n == 0 {
        return Ok(Vec::new());
    }
    let ctx = buf.context();
    // ptrs, sizes, caps (u64 each), then the results (u32, zero).
    let mut t: Vec<u64> = Vec::with_capacity(3 * n + n.div_ceil(2));
    t.extend(ranges.iter().map(|r| buf.address() + r.start as u64));
    t.extend(ranges.iter().map(|r| r.len() as u64));
    t.extend(ranges.iter().map(|r| r.len() as u64));
    t.resize(3 * n + n.div_ceil(2), 0);
    let dev = crate::cuda::DeviceBuffer::from_slice(ctx, &t)?;
    let at = |k: usize| dev.address() + (8 * k * n) as u64;
    let tables = Crc32Tables {
        ptrs: at(0),
        sizes: at(1),
        caps: at(2),
        crcs: at(3),
        n: n as u64,
    };
    let longest = ranges.iter().map(|r| r.len()).max().unwrap_or(0) as u64;
    // Safety: the tables were uploaded (synchronously) into `dev`, with the results
    // zero; every range lies inside `buf` (checked above); both stay allocated until the
    // context's work is done (synchronised below).
    unsafe { launch_crc32_ranges(ctx, &tables, longest, std::ptr::null_mut())? };
    ctx.synchronize()?;
    let mut out = vec![0u8; 4 * n];
    dev.copy_to_host(24 * n, &mut out)?;
    Ok(out
        .chunks_exact(4)
        .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

#[cfg(test)]
mod tests {
    //! The kernel's math on the host: the same slices, shifts and sums.

    const POLY: u32 = 0xEDB8_8320;

    /// `X8_POW2` of `crc32.cu`: x^(8 * 2^j) modulo the polynomial, j = 0..31.
    const X8_POW2: [u32; 32] = [
        0x0080_0000,
        0x0000_8000,
        0xedb8_8320,
        0xb1e6_b092,
        0xa06a_2517,
        0xed62_7dae,
        0x88d1_4467,
        0xd7bb_fe6a,
        0xec44_7f11,
        0x8e7e_a170,
        0x6427_800e,
        0x4d47_bae0,
        0x09fe_548f,
        0x8385_2d0f,
        0x3036_2f1a,
        0x7b5a_9cc3,
        0x31fe_c169,
        0x9fec_022a,
        0x6c8d_edc4,
        0x15d6_874d,
        0x5fde_7a4e,
        0xbad9_0e37,
        0x2e4e_5eef,
        0x4eab_a214,
        0xa8a4_72c0,
        0x429a_969e,
        0x148d_302a,
        0xc40b_a6d0,
        0xc4e2_2c3c,
        0x4000_0000,
        0x2000_0000,
        0x0800_0000,
    ];

    fn mul_mod(mut a: u32, mut b: u32) -> u32 {
        let mut p = 0;
        for _ in 0..32 {
            p ^= b & 0u32.wrapping_sub(a >> 31);
            a <<= 1;
            b = (b >> 1) ^ (POLY & 0u32.wrapping_sub(b & 1));
        }
        p
    }

    fn shift_bytes(mut c: u32, mut n: u64) -> u32 {
        let mut j = 0;
        while n != 0 {
            if n & 1 == 1 {
                c = mul_mod(X8_POW2[j], c);
            }
            n >>= 1;
            j = (j + 1) & 31;
        }
        c
    }

    /// CRC-32 bit by bit: the oracle.
    fn bitwise(data: &[u8]) -> u32 {
        let mut c = 0xFFFF_FFFFu32;
        for &b in data {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = (c >> 1) ^ (POLY & 0u32.wrapping_sub(c & 1));
            }
        }
        !c
    }

    /// The kernel's steps: slicing-by-4 tables, 64-byte slices in 16 KiB blocks, each
    /// slice carried to its block's end, each block to the range's end, the zero term.
    fn like_the_kernel(data: &[u8]) -> u32 {
        let mut t = [[0u32; 256]; 4];
        for (b, e) in t[0].iter_mut().enumerate() {
            let mut c = b as u32;
            for _ in 0..8 {
                c = (c >> 1) ^ (POLY & 0u32.wrapping_sub(c & 1));
            }
            *e = c;
        }
        for k in 1..4 {
            for b in 0..256 {
                let c = t[k - 1][b];
                t[k][b] = (c >> 8) ^ t[0][(c & 0xff) as usize];
            }
        }
        let len = data.len() as u64;
        let mut total = shift_bytes(0xFFFF_FFFF, len) ^ 0xFFFF_FFFF;
        for start in (0..len.max(1)).step_by(super::BLOCK_BYTES as usize) {
            let end = (start + super::BLOCK_BYTES).min(len);
            let mut block = 0u32;
            for lo in (start..end).step_by(64) {
                let hi = (lo + 64).min(end);
                let slice = &data[lo as usize..hi as usize];
                let mut r = 0u32;
                if slice.len() == 64 {
                    for w in slice.chunks_exact(4) {
                        r ^= u32::from_le_bytes(w.try_into().unwrap());
                        r = t[3][(r & 0xff) as usize]
                            ^ t[2][((r >> 8) & 0xff) as usize]
                            ^ t[1][((r >> 16) & 0xff) as usize]
                            ^ t[0][(r >> 24) as usize];
                    }
                } else {
                    for &b in slice {
                        r = (r >> 8) ^ t[0][((r ^ u32::from(b)) & 0xff) as usize];
                    }
                }
                block ^= shift_bytes(r, end - hi);
            }
            total ^= shift_bytes(block, len - end);
        }
        total
    }

    #[test]
    fn the_powers_are_those_of_x8() {
        let mut p = 1u32 << 23; // x^8
        for (j, &v) in X8_POW2.iter().enumerate() {
            assert_eq!(v, p, "x^(8 * 2^{j})");
            p = mul_mod(p, p);
        }
        // Period 32: x^(8 * 2^32) is x^8 again.
        assert_eq!(p, X8_POW2[0]);
    }

    #[test]
    fn slices_and_shifts_give_gzips_crc32() {
        // Known values: "123456789" is the CRC catalogue's check string.
        assert_eq!(bitwise(b"123456789"), 0xCBF4_3926);
        assert_eq!(like_the_kernel(b"123456789"), 0xCBF4_3926);
        assert_eq!(like_the_kernel(b""), 0);
        // Random bytes over every edge of a slice and a block.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let data: Vec<u8> = (0..70_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        for n in [
            1, 3, 4, 63, 64, 65, 127, 16_383, 16_384, 16_385, 32_768, 50_001, 70_000,
        ] {
            assert_eq!(
                like_the_kernel(&data[..n]),
                bitwise(&data[..n]),
                "{n} bytes"
            );
        }
        // Zeros: the term the kernel adds for them alone.
        assert_eq!(like_the_kernel(&[0; 20_000]), bitwise(&[0; 20_000]));
    }
}
