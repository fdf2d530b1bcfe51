// devbuf device kernels: fill a range with a repeating element pattern of 1..16 bytes.
//
// Regenerate the PTX with scripts/build-kernels.sh after editing this file; a host test
// fails when the PTX was built from another version of this source.
//
// The range [first, first + n) is seen as 16-byte aligned vectors counted from
// `base = first & ~15`. The host precomputes the content of those vectors: vector k holds
// table[k % period] (period 1 when the pattern width divides 16, otherwise the number of
// vectors after which the pattern lines up with a vector boundary again). Whole vectors
// are written with 16-byte stores in a grid-stride loop; the (at most two) partial
// vectors at the ends are written byte by byte.
//
// The parameter struct is mirrored by `FillParams` in src/cuda/kernels/ops/device.rs.

#include <stddef.h>

// Field offsets, asserted with the same numbers by `kernel_params!` in ops/device.rs.
#define FIELD_AT(T, f, off) static_assert(offsetof(T, f) == off, #T "." #f " must be at byte " #off)

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

struct FillParams {
    u64 base;        // 16-byte aligned address of vector 0
    u64 nvec;        // vectors from base that hold bytes of the range (>= 1)
    u32 start;       // offset of the first byte in vector 0 (0..15)
    u32 end;         // one past the offset of the last byte in vector nvec-1 (1..16)
    u32 period;      // vector k holds table[k % period] (1..16)
    u32 reserved;
    u32 table[64];   // 16 vectors of 16 bytes
};
static_assert(sizeof(FillParams) == 288, "FillParams layout is shared with Rust");
FIELD_AT(FillParams, nvec, 8);
FIELD_AT(FillParams, start, 16);
FIELD_AT(FillParams, end, 20);
FIELD_AT(FillParams, period, 24);
FIELD_AT(FillParams, table, 32);

// Writes bytes [lo, hi) of vector k from the pattern table in shared memory.
__device__ __forceinline__ void fill_partial(const FillParams& p, const u8* tab, u64 k,
                                             u32 lo, u32 hi)
{
    u8* v = (u8*)(p.base + k * 16);
    const u8* row = tab + (k % p.period) * 16;
    for (u32 j = lo; j < hi; ++j) v[j] = row[j];
}

template <bool SINGLE>
__device__ __forceinline__ void fill_body(const FillParams& p)
{
    __shared__ uint4 s_tab[16];
    const u32 tid = threadIdx.x;
    if (tid < 64) ((u32*)s_tab)[tid] = p.table[tid];
    __syncthreads();

    const u64 gtid = (u64)blockIdx.x * blockDim.x + tid;
    const u64 stride = (u64)gridDim.x * blockDim.x;

    const bool head_partial = p.start != 0 || (p.nvec == 1 && p.end != 16);
    const bool tail_partial = p.nvec > 1 && p.end != 16;
    const u64 k_begin = head_partial ? 1 : 0;
    const u64 k_end = tail_partial ? p.nvec - 1 : p.nvec;

    if (gtid == 0) {
        if (head_partial) fill_partial(p, (const u8*)s_tab, 0, p.start, p.nvec == 1 ? p.end : 16);
        if (tail_partial) fill_partial(p, (const u8*)s_tab, p.nvec - 1, 0, p.end);
    }

    uint4* v = (uint4*)p.base;
    u64 k = k_begin + gtid;
    if (SINGLE) {
        const uint4 val = s_tab[0];
        for (; k + 3 * stride < k_end; k += 4 * stride) {
            v[k] = val;
            v[k + stride] = val;
            v[k + 2 * stride] = val;
            v[k + 3 * stride] = val;
        }
        for (; k < k_end; k += stride) v[k] = val;
    } else {
        const u32 period = p.period;
        const u32 step = (u32)(stride % period);
        u32 phase = (u32)(k % period);
        for (; k < k_end; k += stride) {
            v[k] = s_tab[phase];
            phase += step;
            if (phase >= period) phase -= period;
        }
    }
}

// Pattern width divides 16: every whole vector is the same.
extern "C" __global__ void __launch_bounds__(256) devbuf_fill_single(const FillParams p)
{
    fill_body<true>(p);
}

// Any other width: whole vectors cycle through `period` table entries.
extern "C" __global__ void __launch_bounds__(256) devbuf_fill_periodic(const FillParams p)
{
    fill_body<false>(p);
}
