// devbuf device kernels: all_equal reductions ("does every element equal this value?").
//
// Regenerate the PTX with scripts/build-kernels.sh after editing this file; a host test
// fails when the PTX was built from another version of this source.
//
// Two kernels:
// * devbuf_equal_pattern: every element, masked, equals a value of 1, 2, 4, 8 or 16
//   bytes (so every 16-byte vector equals one precomputed vector). This covers
//   bitwise comparison, integer and bool (canonical) comparison, and numeric float
//   comparison against any non-NaN value: a non-zero float equals a value exactly when
//   its bits do, and +-0 is handled by masking off the sign bits.
// * devbuf_equal_pred: every element satisfies a predicate (is NaN, for `equal_nan`
//   with a NaN value; every byte non-zero, for `true` of a bool).
//
// Reduction: each thread accumulates a "differs" bit over 16-byte loads (four in flight
// per iteration), leaves the loop as soon as it or any other block found a difference
// (a flag word in device memory, polled every 16 iterations), and each block adds one
// ticket to a counter; the last block writes the answer (1 = all equal, 0 = not) to
// `result` (mapped page-locked host memory) and resets the counter to zero. The flag
// holds the launch's `epoch` (a number the host changes for every launch with these
// scratch words) when a difference was seen, so it never needs resetting and no write
// of an earlier launch can be taken for this one's.
//
// The parameter structs are mirrored in src/cuda/kernels/ops/device.rs.

#include <stddef.h>

// Field offsets, asserted with the same numbers by `kernel_params!` in ops/device.rs.
#define FIELD_AT(T, f, off) static_assert(offsetof(T, f) == off, #T "." #f " must be at byte " #off)

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

struct EqualParams {
    u64 base;        // 16-byte aligned address of vector 0
    u64 nvec;        // vectors from base that hold bytes of the range (>= 1)
    u32 start;       // offset of the first byte in vector 0 (0..15)
    u32 end;         // one past the offset of the last byte in vector nvec-1 (1..16)
    u32 period;      // always 1 (element sizes divide 16): every vector is table[0]
    u32 epoch;       // this launch's mark (non-zero, differs from the previous launch's)
    u64 scratch;     // device address of { u32 differ; u32 blocks_done }, blocks_done 0
    u64 result;      // device address of a u32 that receives 1 (all equal) or 0
    u32 table[64];   // expected vector (table[0..4]; the rest unused)
    u32 mask[64];    // bits that take part in the comparison (mask[0..4])
};
static_assert(sizeof(EqualParams) == 560, "EqualParams layout is shared with Rust");
FIELD_AT(EqualParams, nvec, 8);
FIELD_AT(EqualParams, start, 16);
FIELD_AT(EqualParams, end, 20);
FIELD_AT(EqualParams, period, 24);
FIELD_AT(EqualParams, epoch, 28);
FIELD_AT(EqualParams, scratch, 32);
FIELD_AT(EqualParams, result, 40);
FIELD_AT(EqualParams, table, 48);
FIELD_AT(EqualParams, mask, 304);

struct PredParams {
    u64 first;       // address of the first element (aligned to the element size)
    u64 nbytes;      // a multiple of the element size
    u32 mode;        // see PredMode below
    u32 elem;        // element size in bytes (1, 2, 4, 8, 8, 16 for the modes in order)
    u64 scratch;
    u64 result;
    u32 epoch;
    u32 reserved;
};
static_assert(sizeof(PredParams) == 48, "PredParams layout is shared with Rust");
FIELD_AT(PredParams, nbytes, 8);
FIELD_AT(PredParams, mode, 16);
FIELD_AT(PredParams, elem, 20);
FIELD_AT(PredParams, scratch, 24);
FIELD_AT(PredParams, result, 32);
FIELD_AT(PredParams, epoch, 40);

enum PredMode : u32 {
    PRED_NONZERO_BYTES = 0,  // bool: every byte non-zero
    PRED_NAN_F16 = 1,
    PRED_NAN_F32 = 2,
    PRED_NAN_F64 = 3,
    PRED_NAN_C64 = 4,        // complex64: real or imaginary part NaN
    PRED_NAN_C128 = 5,
};

__device__ __forceinline__ bool vec_differs(uint4 a, uint4 e, uint4 m)
{
    return (((a.x ^ e.x) & m.x) | ((a.y ^ e.y) & m.y) | ((a.z ^ e.z) & m.z) | ((a.w ^ e.w) & m.w)) != 0;
}

// Block-level end of a reduction: publishes this block's verdict and lets the last
// block write the answer and reset the counter. Every thread of the block calls it.
__device__ __forceinline__ void finish(bool diff, u64 scratch, u64 result, u32 epoch)
{
    __shared__ int s_last;
    volatile u32* differ = (volatile u32*)scratch;
    u32* done = (u32*)scratch + 1;
    const int any = __syncthreads_or(diff ? 1 : 0);
    if (threadIdx.x == 0) {
        if (any) *differ = epoch;
        __threadfence();
        const u32 ticket = atomicAdd(done, 1u);
        s_last = ticket == gridDim.x - 1;
    }
    __syncthreads();
    if (s_last && threadIdx.x == 0) {
        __threadfence();
        const bool d = *differ == epoch;
        *(volatile u32*)result = d ? 0u : 1u;
        *(volatile u32*)done = 0;
        __threadfence_system();
    }
}

__device__ __forceinline__ bool someone_differs(u64 scratch, u32 epoch)
{
    return *(volatile const u32*)scratch == epoch;
}

// Compares bytes [lo, hi) of vector k with the expected vector in shared memory.
__device__ __forceinline__ bool partial_differs(const EqualParams& p, const u8* tab,
                                                const u8* msk, u64 k, u32 lo, u32 hi)
{
    const u8* v = (const u8*)(p.base + k * 16);
    bool d = false;
    for (u32 j = lo; j < hi; ++j) d |= ((v[j] ^ tab[j]) & msk[j]) != 0;
    return d;
}

extern "C" __global__ void __launch_bounds__(256) devbuf_equal_pattern(const EqualParams p)
{
    __shared__ uint4 s_tab[16];
    __shared__ uint4 s_msk[16];
    const u32 tid = threadIdx.x;
    if (tid < 64) {
        ((u32*)s_tab)[tid] = p.table[tid];
        ((u32*)s_msk)[tid] = p.mask[tid];
    }
    __syncthreads();

    const u64 gtid = (u64)blockIdx.x * blockDim.x + tid;
    const u64 stride = (u64)gridDim.x * blockDim.x;

    const bool head_partial = p.start != 0 || (p.nvec == 1 && p.end != 16);
    const bool tail_partial = p.nvec > 1 && p.end != 16;
    const u64 k_begin = head_partial ? 1 : 0;
    const u64 k_end = tail_partial ? p.nvec - 1 : p.nvec;

    bool diff = false;
    if (gtid == 0) {
        if (head_partial)
            diff |= partial_differs(p, (const u8*)s_tab, (const u8*)s_msk, 0, p.start,
                                    p.nvec == 1 ? p.end : 16);
        if (tail_partial)
            diff |= partial_differs(p, (const u8*)s_tab, (const u8*)s_msk, p.nvec - 1, 0, p.end);
    }

    const uint4* v = (const uint4*)p.base;
    const uint4 e = s_tab[0];
    const uint4 m = s_msk[0];
    u64 k = k_begin + gtid;
    u32 iter = 0;
    bool stop = diff || someone_differs(p.scratch, p.epoch);
    for (; !stop && k + 3 * stride < k_end; k += 4 * stride) {
        const uint4 a = __ldg(v + k);
        const uint4 b = __ldg(v + k + stride);
        const uint4 c = __ldg(v + k + 2 * stride);
        const uint4 d = __ldg(v + k + 3 * stride);
        diff |= vec_differs(a, e, m) | vec_differs(b, e, m) | vec_differs(c, e, m) |
                vec_differs(d, e, m);
        stop = diff || ((++iter & 15) == 0 && someone_differs(p.scratch, p.epoch));
    }
    for (; !stop && k < k_end; k += stride) {
        diff |= vec_differs(__ldg(v + k), e, m);
        stop = diff;
    }
    if (diff) *(volatile u32*)p.scratch = p.epoch;  // early exit for the other blocks
    finish(diff, p.scratch, p.result, p.epoch);
}

// ---------------------------------------------------------------------------------------
// Predicates

__device__ __forceinline__ bool nan16(u32 h) { return (h & 0x7fffu) > 0x7c00u; }
__device__ __forceinline__ bool nan32(u32 w) { return (w & 0x7fffffffu) > 0x7f800000u; }
__device__ __forceinline__ bool nan64(u32 lo, u32 hi)
{
    const u32 h = hi & 0x7fffffffu;
    return h > 0x7ff00000u || (h == 0x7ff00000u && lo != 0);
}
__device__ __forceinline__ bool no_zero_byte(u32 w)
{
    return ((w - 0x01010101u) & ~w & 0x80808080u) == 0;
}

// Whether every element in the 16 bytes satisfies the predicate.
__device__ __forceinline__ bool vec_holds(uint4 a, u32 mode)
{
    switch (mode) {
    case PRED_NONZERO_BYTES:
        return no_zero_byte(a.x) & no_zero_byte(a.y) & no_zero_byte(a.z) & no_zero_byte(a.w);
    case PRED_NAN_F16:
        return nan16(a.x) & nan16(a.x >> 16) & nan16(a.y) & nan16(a.y >> 16) & nan16(a.z) &
               nan16(a.z >> 16) & nan16(a.w) & nan16(a.w >> 16);
    case PRED_NAN_F32:
        return nan32(a.x) & nan32(a.y) & nan32(a.z) & nan32(a.w);
    case PRED_NAN_F64:
        return nan64(a.x, a.y) & nan64(a.z, a.w);
    case PRED_NAN_C64:
        return (nan32(a.x) | nan32(a.y)) & (nan32(a.z) | nan32(a.w));
    default:  // PRED_NAN_C128
        return nan64(a.x, a.y) | nan64(a.z, a.w);
    }
}

// Whether the element at `e` (aligned to its size) satisfies the predicate.
__device__ __forceinline__ bool elem_holds(const u8* e, u32 mode)
{
    switch (mode) {
    case PRED_NONZERO_BYTES:
        return *e != 0;
    case PRED_NAN_F16:
        return nan16(*(const u16*)e);
    case PRED_NAN_F32:
        return nan32(*(const u32*)e);
    case PRED_NAN_F64: {
        const uint2 w = *(const uint2*)e;
        return nan64(w.x, w.y);
    }
    case PRED_NAN_C64: {
        const uint2 w = *(const uint2*)e;
        return nan32(w.x) | nan32(w.y);
    }
    default: {
        const uint4 w = *(const uint4*)e;
        return nan64(w.x, w.y) | nan64(w.z, w.w);
    }
    }
}

extern "C" __global__ void __launch_bounds__(256, 8) devbuf_equal_pred(const PredParams p)
{
    const u64 gtid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    const u32 mode = p.mode;

    // Elements before the first 16-byte boundary and after the last whole vector.
    u64 head = (16 - (p.first & 15)) & 15;
    if (head > p.nbytes) head = p.nbytes;
    const u64 nvec = (p.nbytes - head) / 16;
    const u64 tail = head + nvec * 16;

    bool diff = false;
    if (gtid == 0) {
        const u8* b = (const u8*)p.first;
        for (u64 i = 0; i < head; i += p.elem) diff |= !elem_holds(b + i, mode);
        for (u64 i = tail; i < p.nbytes; i += p.elem) diff |= !elem_holds(b + i, mode);
    }

    const uint4* v = (const uint4*)(p.first + head);
    u64 k = gtid;
    u32 iter = 0;
    bool stop = diff || someone_differs(p.scratch, p.epoch);
    for (; !stop && k + 3 * stride < nvec; k += 4 * stride) {
        const uint4 a = __ldg(v + k);
        const uint4 b = __ldg(v + k + stride);
        const uint4 c = __ldg(v + k + 2 * stride);
        const uint4 d = __ldg(v + k + 3 * stride);
        diff |= !(vec_holds(a, mode) & vec_holds(b, mode) & vec_holds(c, mode) & vec_holds(d, mode));
        stop = diff || ((++iter & 15) == 0 && someone_differs(p.scratch, p.epoch));
    }
    for (; !stop && k < nvec; k += stride) {
        diff |= !vec_holds(__ldg(v + k), mode);
        stop = diff;
    }
    if (diff) *(volatile u32*)p.scratch = p.epoch;
    finish(diff, p.scratch, p.result, p.epoch);
}
