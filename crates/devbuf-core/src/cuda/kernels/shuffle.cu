// devbuf device kernels: undo blosc's byte shuffle.
//
// Regenerate the PTX with scripts/build-kernels.sh after editing this file; a host test
// fails when the PTX was built from another version of this source.
//
// blosc stores a block of n elements of T bytes as T planes of n bytes: byte j of
// element i at j * n + i. These kernels put the bytes back in element order. Each
// thread takes 16 elements at a time: it loads one 16-byte vector from each of the T
// planes (threads next to each other load vectors next to each other: coalesced),
// regroups the 16 * T bytes in registers (the byte positions are compile-time
// constants: byte permutes, no local memory) and stores them as T vectors (coalesced
// too). One kernel per T in {2, 4, 8, 16}; other type sizes use the strided copy.
//
// Blocks come in groups: group u, block b starts at byte u * ustride + b * bstride of
// both the source and the destination. The host checks what the kernels assume: n a
// multiple of 16, both base addresses and both strides multiples of 16, every block
// inside its buffer.
//
// The parameter struct is mirrored in src/cuda/kernels/ops/device/shuffle.rs.

#include <stddef.h>

#define FIELD_AT(T, f, off) static_assert(offsetof(T, f) == off, #T "." #f " must be at byte " #off)

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

struct UnshuffleParams {
    u64 src;      // shuffled bytes of group 0, block 0 (16-byte aligned)
    u64 dst;      // where its elements go (16-byte aligned)
    u64 groups;   // groups of blocks
    u64 ustride;  // bytes from one group to the next (both sides)
    u64 blocks;   // blocks per group
    u64 bstride;  // bytes from one block to the next (both sides)
    u64 n;        // elements per block (a multiple of 16)
};
static_assert(sizeof(UnshuffleParams) == 56, "UnshuffleParams layout is shared with Rust");
FIELD_AT(UnshuffleParams, dst, 8);
FIELD_AT(UnshuffleParams, groups, 16);
FIELD_AT(UnshuffleParams, ustride, 24);
FIELD_AT(UnshuffleParams, blocks, 32);
FIELD_AT(UnshuffleParams, bstride, 40);
FIELD_AT(UnshuffleParams, n, 48);

__device__ __forceinline__ u32 word_of(const uint4& v, int k)
{
    return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}

// 16 elements of T bytes: plane j's 16 bytes at src + j * n, the elements to dst.
template <int T>
__device__ __forceinline__ void unshuffle16(const u8* __restrict__ src, u64 n, u8* __restrict__ dst)
{
    uint4 in[T];
#pragma unroll
    for (int j = 0; j < T; j++) in[j] = *(const uint4*)(src + (u64)j * n);
#pragma unroll
    for (int k = 0; k < T; k++) {
        u32 w[4];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            u32 x = 0;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                // Output byte b is byte j of element e, which is byte e of plane j.
                const int b = 16 * k + 4 * q + c;
                const int e = b / T, j = b % T;
                const u32 byte = (word_of(in[j], e / 4) >> (8 * (e % 4))) & 0xffu;
                x |= byte << (8 * c);
            }
            w[q] = x;
        }
        ((uint4*)dst)[k] = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

template <int T>
__device__ __forceinline__ void unshuffle(const UnshuffleParams& p)
{
    const u64 per_block = p.n / 16;
    const u64 per_group = p.blocks * per_block;
    const u64 total = p.groups * per_group;
    const u64 step = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        const u64 u = i / per_group;
        const u64 r = i - u * per_group;
        const u64 b = r / per_block;
        const u64 g = r - b * per_block;
        const u64 at = u * p.ustride + b * p.bstride;
        unshuffle16<T>((const u8*)(p.src + at) + 16 * g, p.n, (u8*)(p.dst + at) + 16 * T * g);
    }
}

#define UNSHUFFLE(T)                                                                          \
    extern "C" __global__ void __launch_bounds__(256) devbuf_unshuffle_##T(const UnshuffleParams p) \
    {                                                                                         \
        unshuffle<T>(p);                                                                      \
    }

UNSHUFFLE(2)
UNSHUFFLE(4)
UNSHUFFLE(8)
UNSHUFFLE(16)
