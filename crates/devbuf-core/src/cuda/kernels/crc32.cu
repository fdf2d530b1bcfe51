// devbuf device kernels: the CRC-32 of gzip (ISO-HDLC: reflected polynomial 0xEDB88320,
// initial value and final XOR 0xFFFFFFFF) of many device ranges at once, where they lie.
//
// nvCOMP's deflate decoder does not check a gzip member's CRC-32; the batch decoder runs
// this kernel on what nvCOMP decoded, in stream order, and compares on the host.
//
// Regenerate the PTX with scripts/build-kernels.sh after editing this file; a host test
// fails when the PTX was built from another version of this source.
//
// The math (the host mirror in crc32.rs implements the same steps and is tested against
// a bitwise CRC-32): a CRC without initial value or final XOR ("raw") is linear, so the
// raw CRC of a range is the XOR of each slice's raw CRC multiplied by x^(8 d) modulo the
// polynomial, d being the bytes after the slice; and the CRC-32 of n bytes M is
// raw(M) ^ CRC-32(n zero bytes), where CRC-32(n zeros) = 0xFFFFFFFF x^(8 n) ^ 0xFFFFFFFF.
// Polynomials are kept reflected: bit 31 holds the coefficient of x^0.
//
// Grid: blockIdx.y picks range `first + blockIdx.y`; blockIdx.x picks 16 KiB of it
// (BLOCK_BYTES: 256 threads of 64 bytes each). Each thread takes the raw CRC of its
// 64-byte slice (four bytes per step through slicing-by-4 tables in shared memory, byte
// by byte where the slice is not 4-byte aligned), shifts it to the end of the block's
// part of the range, the block XORs its threads' values (in shared memory: no warp
// shuffles, so the CPU emulator of scripts/emu runs it too), shifts the sum to the end of
// the range and XORs it into the range's result (atomically: one word per range, zero
// before the launch). Block 0 of a range also adds the zero-bytes term.

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

#define POLY 0xEDB88320u
#define THREADS 256
#define SLICE 64
#define BLOCK_BYTES (THREADS * SLICE)

// x^(8 * 2^j) modulo the polynomial, j = 0..31 (the sequence repeats with period 32:
// x^(2^32) = x modulo it).
__constant__ u32 X8_POW2[32] = {
    0x00800000u, 0x00008000u, 0xedb88320u, 0xb1e6b092u, 0xa06a2517u, 0xed627daeu,
    0x88d14467u, 0xd7bbfe6au, 0xec447f11u, 0x8e7ea170u, 0x6427800eu, 0x4d47bae0u,
    0x09fe548fu, 0x83852d0fu, 0x30362f1au, 0x7b5a9cc3u, 0x31fec169u, 0x9fec022au,
    0x6c8dedc4u, 0x15d6874du, 0x5fde7a4eu, 0xbad90e37u, 0x2e4e5eefu, 0x4eaba214u,
    0xa8a472c0u, 0x429a969eu, 0x148d302au, 0xc40ba6d0u, 0xc4e22c3cu, 0x40000000u,
    0x20000000u, 0x08000000u};

// a * b modulo the polynomial (both reflected).
__device__ __forceinline__ u32 mul_mod(u32 a, u32 b)
{
    u32 p = 0;
#pragma unroll
    for (int i = 0; i < 32; i++) {
        p ^= b & (0u - (a >> 31));
        a <<= 1;
        b = (b >> 1) ^ (POLY & (0u - (b & 1u)));
    }
    return p;
}

// c * x^(8 n): the raw CRC `c` carried over `n` further zero bytes.
__device__ __forceinline__ u32 shift_bytes(u32 c, u64 n, const u32* pow2)
{
    for (u32 j = 0; n != 0; n >>= 1, j = (j + 1) & 31) {
        if (n & 1) c = mul_mod(pow2[j], c);
    }
    return c;
}

// ptrs[i], sizes[i], caps[i]: range i starts at ptrs[i] and holds min(sizes[i], caps[i])
// bytes (sizes[i] == u64 max: none). crcs[i] must be zero before the launch and holds
// the range's CRC-32 after it. The grid's x dimension must cover the longest range.
extern "C" __global__ void __launch_bounds__(THREADS)
devbuf_crc32_ranges(const u64* __restrict__ ptrs, const u64* __restrict__ sizes,
                    const u64* __restrict__ caps, u32* __restrict__ crcs, u64 first)
{
    __shared__ u32 t0[256], t1[256], t2[256], t3[256];
    __shared__ u32 pow2[32];
    __shared__ u32 sums[THREADS];
    const u32 t = threadIdx.x;
    const u64 i = first + blockIdx.y;
    u64 len = sizes[i];
    if (len == ~0ull) len = 0;
    if (len > caps[i]) len = caps[i];
    const u64 start = (u64)blockIdx.x * BLOCK_BYTES;
    // Block 0 always runs: it adds the zero-bytes term (also for an empty range).
    if (start >= len && blockIdx.x != 0) return;

    u32 c = t;
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (POLY & (0u - (c & 1u)));
    t0[t] = c;
    if (t < 32) pow2[t] = X8_POW2[t];
    __syncthreads();
    c = (c >> 8) ^ t0[c & 0xff];
    t1[t] = c;
    c = (c >> 8) ^ t0[c & 0xff];
    t2[t] = c;
    c = (c >> 8) ^ t0[c & 0xff];
    t3[t] = c;
    __syncthreads();

    const u64 end = start + BLOCK_BYTES < len ? start + BLOCK_BYTES : len;
    const u64 lo = start + (u64)t * SLICE;
    u32 v = 0;
    if (lo < end) {
        const u64 hi = lo + SLICE < end ? lo + SLICE : end;
        const u8* p = (const u8*)ptrs[i] + lo;
        const u64 n = hi - lo;
        u32 r = 0;
        if ((((u64)p) & 3) == 0 && n == SLICE) {
            const u32* w = (const u32*)p;
#pragma unroll
            for (int k = 0; k < SLICE / 4; k++) {
                r ^= w[k];
                r = t3[r & 0xff] ^ t2[(r >> 8) & 0xff] ^ t1[(r >> 16) & 0xff] ^ t0[r >> 24];
            }
        } else {
            for (u64 k = 0; k < n; k++) r = (r >> 8) ^ t0[(r ^ p[k]) & 0xff];
        }
        v = shift_bytes(r, end - hi, pow2);
    }
    // The block's sum, halving the threads that add each step.
    sums[t] = v;
    __syncthreads();
    for (u32 o = THREADS / 2; o > 0; o >>= 1) {
        if (t < o) sums[t] ^= sums[t + o];
        __syncthreads();
    }
    if (t == 0) {
        u32 s = shift_bytes(sums[0], len - end, pow2);
        if (blockIdx.x == 0) s ^= shift_bytes(0xFFFFFFFFu, len, pow2) ^ 0xFFFFFFFFu;
        atomicXor(crcs + i, s);
    }
}
