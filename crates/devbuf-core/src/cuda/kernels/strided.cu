// devbuf device kernels: n-dimensional strided copies (get/set of strided selections,
// transposes of any permutation, C <-> F reorder).
//
// Regenerate the PTX with scripts/build-kernels.sh after editing this file; a host test
// fails when the PTX was built from another version of this source.
//
// The host (src/cuda/kernels/ops/layout.rs) validates the ranges, drops axes of length
// 1, makes destination strides positive, orders axes by destination stride (innermost
// last) and merges axes that are contiguous on both sides, then picks one of:
//
// * devbuf_strided_runs: the innermost axis is contiguous on both sides (runs of >= 512
//   bytes). One warp copies a segment of up to 2 KiB of one run: 16-byte aligned
//   destination stores; source vectors loaded aligned and shifted into place when the
//   two sides are misaligned relative to each other (funnel shifts), so every access is
//   a 16-byte access whatever the offsets.
// * devbuf_strided_transpose_<w>: the destination-contiguous axis `a` and the
//   source-contiguous axis `b` differ (a transpose of those two axes, batched over the
//   others). 32x32 tiles through padded shared memory: coalesced reads along b,
//   coalesced writes along a, no bank conflicts for 4-, 8- and 16-byte elements.
// * devbuf_strided_general_<w>_<32|64>: anything else. One element per thread per step
//   (grid-stride, four in flight), its multi-index decoded from the flat index (32-bit
//   arithmetic when the element count allows), consecutive threads writing consecutive
//   destination elements.
//
// Shapes and strides travel by value in the parameter structs (up to 32 axes; no
// allocation per call). Strides are in bytes and may be negative for sources.
// The parameter structs are mirrored in src/cuda/kernels/ops/device.rs.

#include <stddef.h>

// Field offsets, asserted with the same numbers by `kernel_params!` in ops/device.rs.
#define FIELD_AT(T, f, off) static_assert(offsetof(T, f) == off, #T "." #f " must be at byte " #off)

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

#define MAX_DIMS 32

// ---------------------------------------------------------------------------------------
// General

struct GeneralParams {
    u64 src;                 // address of element (0, ..., 0)
    u64 dst;
    u64 count;               // number of elements (product of shape)
    u32 ndim;                // 1..=32
    u32 reserved;
    u64 shape[MAX_DIMS];     // outermost first
    i64 sstride[MAX_DIMS];   // bytes
    i64 dstride[MAX_DIMS];
};
static_assert(sizeof(GeneralParams) == 32 + 3 * 8 * MAX_DIMS, "GeneralParams layout is shared with Rust");
FIELD_AT(GeneralParams, dst, 8);
FIELD_AT(GeneralParams, count, 16);
FIELD_AT(GeneralParams, ndim, 24);
FIELD_AT(GeneralParams, shape, 32);
FIELD_AT(GeneralParams, sstride, 288);
FIELD_AT(GeneralParams, dstride, 544);

template <typename I>
__device__ __forceinline__ void decode_general(const GeneralParams& p, I flat, i64& so, i64& dof)
{
    so = 0;
    dof = 0;
    for (int d = (int)p.ndim - 1; d > 0; --d) {
        const I n = (I)p.shape[d];
        const I q = flat / n;
        const I i = flat - q * n;
        so += (i64)i * p.sstride[d];
        dof += (i64)i * p.dstride[d];
        flat = q;
    }
    so += (i64)flat * p.sstride[0];
    dof += (i64)flat * p.dstride[0];
}

template <typename T, typename I>
__device__ __forceinline__ void general_body(const GeneralParams& p)
{
    const I gtid = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x;
    const I stride = (I)gridDim.x * (I)blockDim.x;
    const I count = (I)p.count;
    const u8* src = (const u8*)p.src;
    u8* dst = (u8*)p.dst;
    I e = gtid;
    // Four elements in flight per thread; the bounds keep e + 3 * stride from overflowing.
    for (; e < count && count - e > 3 * stride; e += 4 * stride) {
        i64 s0, d0, s1, d1, s2, d2, s3, d3;
        decode_general<I>(p, e, s0, d0);
        decode_general<I>(p, e + stride, s1, d1);
        decode_general<I>(p, e + 2 * stride, s2, d2);
        decode_general<I>(p, e + 3 * stride, s3, d3);
        const T v0 = __ldg((const T*)(src + s0));
        const T v1 = __ldg((const T*)(src + s1));
        const T v2 = __ldg((const T*)(src + s2));
        const T v3 = __ldg((const T*)(src + s3));
        *(T*)(dst + d0) = v0;
        *(T*)(dst + d1) = v1;
        *(T*)(dst + d2) = v2;
        *(T*)(dst + d3) = v3;
    }
    for (; e < count; e += stride) {
        i64 s0, d0;
        decode_general<I>(p, e, s0, d0);
        *(T*)(dst + d0) = __ldg((const T*)(src + s0));
    }
}

#define GENERAL(w, T)                                                                      \
    extern "C" __global__ void __launch_bounds__(256)                                      \
        devbuf_strided_general_##w##_32(const GeneralParams p) { general_body<T, u32>(p); } \
    extern "C" __global__ void __launch_bounds__(256)                                      \
        devbuf_strided_general_##w##_64(const GeneralParams p) { general_body<T, u64>(p); }
GENERAL(1, u8)
GENERAL(2, u16)
GENERAL(4, u32)
GENERAL(8, uint2)
GENERAL(16, uint4)

// ---------------------------------------------------------------------------------------
// Runs

#define RUN_THREADS 32          // one warp per segment
#define RUN_UNROLL 4
#define RUN_SEG_VECS (RUN_THREADS * RUN_UNROLL)   // 16-byte vectors per segment (2 KiB)

struct RunsParams {
    u64 src;                 // address of the first byte of run (0, ..., 0)
    u64 dst;
    u64 run_bytes;           // bytes per run (>= 1)
    u64 nruns;               // product of the outer shape
    u64 segs_per_run;        // max(1, ceil((run_bytes / 16) / RUN_SEG_VECS))
    u32 ndim;                // outer axes, 0..=31
    u32 reserved;
    u64 shape[MAX_DIMS - 1];
    i64 sstride[MAX_DIMS - 1];
    i64 dstride[MAX_DIMS - 1];
};
static_assert(sizeof(RunsParams) == 48 + 3 * 8 * (MAX_DIMS - 1), "RunsParams layout is shared with Rust");
FIELD_AT(RunsParams, dst, 8);
FIELD_AT(RunsParams, run_bytes, 16);
FIELD_AT(RunsParams, nruns, 24);
FIELD_AT(RunsParams, segs_per_run, 32);
FIELD_AT(RunsParams, ndim, 40);
FIELD_AT(RunsParams, shape, 48);
FIELD_AT(RunsParams, sstride, 296);
FIELD_AT(RunsParams, dstride, 544);

// 16 bytes starting 4 * Q + r / 8 bytes into the 32 bytes a:b (r = 0, 8, 16 or 24).
template <int Q>
__device__ __forceinline__ uint4 shift_words(uint4 a, uint4 b, u32 r)
{
    const u32 w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    return make_uint4(__funnelshift_r(w[Q], w[Q + 1], r), __funnelshift_r(w[Q + 1], w[Q + 2], r),
                      __funnelshift_r(w[Q + 2], w[Q + 3], r), __funnelshift_r(w[Q + 3], w[Q + 4], r));
}

// The first `m` bytes (m < 16) of the aligned vector at `p`, read one byte at a time;
// the other bytes are zero. Used where the whole vector may reach past the allocation.
__device__ __forceinline__ uint4 load_prefix(const uint4* p, u32 m)
{
    const u8* b = (const u8*)p;
    u64 lo = 0, hi = 0;   // no indexed array: it would live in local memory
    for (u32 k = 0; k < m; ++k) {
        const u64 v = __ldg(b + k);
        if (k < 8) lo |= v << (8 * k);
        else hi |= v << (8 * (k - 8));
    }
    return make_uint4((u32)lo, (u32)(lo >> 32), (u32)hi, (u32)(hi >> 32));
}

// Copies `nloc` (<= RUN_SEG_VECS) 16-byte vectors to aligned `vd` from `va + m` bytes,
// where `va` is aligned and m = 4 * Q + r / 8 > 0. Vector j of the destination is made of
// aligned source vectors j and j + 1. Vector j + 1 is only needed for its first m bytes,
// which belong to the run; when `safe_last` is set, the last vector's j + 1 may reach past
// the end of the source allocation, so only those m bytes are read.
template <int Q>
__device__ __forceinline__ void copy_shifted(uint4* vd, const uint4* va, u32 nloc, u32 lane, u32 r,
                                             bool safe_last)
{
    // The vectors whose both source loads stay inside the run.
    const u32 nfull = safe_last ? nloc - 1 : nloc;
    uint4 x[RUN_UNROLL], y[RUN_UNROLL];
#pragma unroll
    for (int u = 0; u < RUN_UNROLL; ++u) {
        const u32 j = lane + u * RUN_THREADS;
        if (j < nfull) {
            x[u] = __ldg(va + j);
            y[u] = __ldg(va + j + 1);
        }
    }
#pragma unroll
    for (int u = 0; u < RUN_UNROLL; ++u) {
        const u32 j = lane + u * RUN_THREADS;
        if (j < nfull) vd[j] = shift_words<Q>(x[u], y[u], r);
    }
    if (safe_last && lane == (nfull & (RUN_THREADS - 1))) {
        const u32 m = 4 * Q + r / 8;
        vd[nfull] = shift_words<Q>(__ldg(va + nfull), load_prefix(va + nfull + 1, m), r);
    }
}

// I: the type segments and runs are counted in (32-bit division is much cheaper in
// registers than 64-bit).
template <typename I>
__device__ __forceinline__ void runs_body(const RunsParams& p)
{
    const u32 lane = threadIdx.x & (RUN_THREADS - 1);
    const u64 warp = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / RUN_THREADS;
    const u64 nwarps = ((u64)gridDim.x * blockDim.x) / RUN_THREADS;
    const u64 nseg = p.nruns * p.segs_per_run;
    const u64 R = p.run_bytes;

    for (u64 t = warp; t < nseg; t += nwarps) {
        I r = (I)t / (I)p.segs_per_run;
        const u64 s = (I)t - r * (I)p.segs_per_run;
        i64 so = 0, dof = 0;
        for (int d = (int)p.ndim - 1; d >= 0; --d) {
            const I n = (I)p.shape[d];
            const I q = r / n;
            const I i = r - q * n;
            so += (i64)i * p.sstride[d];
            dof += (i64)i * p.dstride[d];
            r = q;
        }
        const u8* src = (const u8*)(p.src + so);
        u8* dst = (u8*)(p.dst + dof);

        // Destination-aligned split: head bytes, whole 16-byte vectors, tail bytes.
        u64 head = (16 - ((u64)dst & 15)) & 15;
        if (head > R) head = R;
        const u64 nvec = (R - head) / 16;
        const u64 tail = head + nvec * 16;
        if (s == 0) {
            if (lane < head) dst[lane] = src[lane];
            if (lane < R - tail) dst[tail + lane] = src[tail + lane];
        }

        // This segment's vectors: [s * RUN_SEG_VECS, s * RUN_SEG_VECS + nloc).
        const u64 first = s * RUN_SEG_VECS;
        if (first >= nvec) continue;
        const u32 nloc = (u32)min((u64)RUN_SEG_VECS, nvec - first);
        uint4* vd = (uint4*)(dst + head) + first;
        const u8* sv = src + head + first * 16;
        const u32 m = (u32)((u64)sv & 15);
        const uint4* va = (const uint4*)(sv - m);   // aligned source vectors
        if (m == 0) {
            uint4 x[RUN_UNROLL];
#pragma unroll
            for (int u = 0; u < RUN_UNROLL; ++u) {
                const u32 j = lane + u * RUN_THREADS;
                if (j < nloc) x[u] = __ldg(va + j);
            }
#pragma unroll
            for (int u = 0; u < RUN_UNROLL; ++u) {
                const u32 j = lane + u * RUN_THREADS;
                if (j < nloc) vd[j] = x[u];
            }
        } else {
            const u32 r = (m & 3) * 8;
            // The aligned vector after the run's last whole vector holds m needed bytes
            // and 16 - m more; those reach past the run when the tail is shorter, and the
            // run may end its allocation: read only the needed bytes there.
            const bool safe_last = first + nloc == nvec && (u64)(16 - m) > R - tail;
            switch (m >> 2) {
            case 0: copy_shifted<0>(vd, va, nloc, lane, r, safe_last); break;
            case 1: copy_shifted<1>(vd, va, nloc, lane, r, safe_last); break;
            case 2: copy_shifted<2>(vd, va, nloc, lane, r, safe_last); break;
            default: copy_shifted<3>(vd, va, nloc, lane, r, safe_last); break;
            }
        }
    }
}

// Segments are counted in 32 bits (the host checks nruns * segs_per_run < 2^32).
extern "C" __global__ void __launch_bounds__(256, 3) devbuf_strided_runs(const RunsParams p)
{
    runs_body<u32>(p);
}

// ---------------------------------------------------------------------------------------
// Transpose

#define TILE 32
#define TILE_ROWS 8   // blockDim = TILE x TILE_ROWS = 256 threads

struct TransposeParams {
    u64 src;                 // address of element (0, ..., 0)
    u64 dst;
    u64 na;                  // length of axis a (destination-contiguous)
    u64 nb;                  // length of axis b (source-contiguous)
    i64 sa, sb;              // source strides of a and b (bytes)
    i64 da, db;              // destination strides of a and b
    u64 tiles_a;             // ceil(na / TILE)
    u64 tiles_b;
    u64 ntiles;              // tiles_a * tiles_b * product of the batch shape
    u32 ndim;                // batch axes, 0..=30
    u32 reserved;
    u64 shape[MAX_DIMS - 2];
    i64 sstride[MAX_DIMS - 2];
    i64 dstride[MAX_DIMS - 2];
};
static_assert(sizeof(TransposeParams) == 96 + 3 * 8 * (MAX_DIMS - 2), "TransposeParams layout is shared with Rust");
FIELD_AT(TransposeParams, dst, 8);
FIELD_AT(TransposeParams, na, 16);
FIELD_AT(TransposeParams, nb, 24);
FIELD_AT(TransposeParams, sa, 32);
FIELD_AT(TransposeParams, sb, 40);
FIELD_AT(TransposeParams, da, 48);
FIELD_AT(TransposeParams, db, 56);
FIELD_AT(TransposeParams, tiles_a, 64);
FIELD_AT(TransposeParams, tiles_b, 72);
FIELD_AT(TransposeParams, ntiles, 80);
FIELD_AT(TransposeParams, ndim, 88);
FIELD_AT(TransposeParams, shape, 96);
FIELD_AT(TransposeParams, sstride, 336);
FIELD_AT(TransposeParams, dstride, 576);

template <typename T>
__device__ __forceinline__ void transpose_body(const TransposeParams& p)
{
    __shared__ T tile[TILE][TILE + 1];
    const u32 tx = threadIdx.x & (TILE - 1);
    const u32 ty = threadIdx.x / TILE;
    const u8* src0 = (const u8*)p.src;
    u8* dst0 = (u8*)p.dst;

    for (u64 t = blockIdx.x; t < p.ntiles; t += gridDim.x) {
        u64 rest = t / p.tiles_a;
        const u64 ta = t - rest * p.tiles_a;
        u64 batch = rest / p.tiles_b;
        const u64 tb = rest - batch * p.tiles_b;
        i64 so = 0, dof = 0;
        for (int d = (int)p.ndim - 1; d >= 0; --d) {
            const u64 n = p.shape[d];
            const u64 q = batch / n;
            const u64 i = batch - q * n;
            so += (i64)i * p.sstride[d];
            dof += (i64)i * p.dstride[d];
            batch = q;
        }
        const u64 a0 = ta * TILE;
        const u64 b0 = tb * TILE;
        const u8* src = src0 + so;
        u8* dst = dst0 + dof;

        // Read along b (source-contiguous): lanes take consecutive b.
        {
            const u64 b = b0 + tx;
#pragma unroll
            for (u32 i = 0; i < TILE; i += TILE_ROWS) {
                const u64 a = a0 + ty + i;
                if (a < p.na && b < p.nb)
                    tile[ty + i][tx] = __ldg((const T*)(src + (i64)a * p.sa + (i64)b * p.sb));
            }
        }
        __syncthreads();
        // Write along a (destination-contiguous): lanes take consecutive a.
        {
            const u64 a = a0 + tx;
#pragma unroll
            for (u32 i = 0; i < TILE; i += TILE_ROWS) {
                const u64 b = b0 + ty + i;
                if (a < p.na && b < p.nb)
                    *(T*)(dst + (i64)a * p.da + (i64)b * p.db) = tile[tx][ty + i];
            }
        }
        __syncthreads();
    }
}

#define TRANSPOSE(w, T)                                                 \
    extern "C" __global__ void __launch_bounds__(256, 8)                \
        devbuf_strided_transpose_##w(const TransposeParams p) { transpose_body<T>(p); }
TRANSPOSE(1, u8)
TRANSPOSE(2, u16)
TRANSPOSE(4, u32)
TRANSPOSE(8, uint2)
TRANSPOSE(16, uint4)
