// devbuf device kernels: byte <-> bit conversions of boolean data (Arrow's bit-packed
// booleans: bit i of the bitmap is bit (i % 8) of byte i / 8, least significant first).
//
// Regenerate the PTX with scripts/build-kernels.sh after editing this file; a host test
// fails when the PTX was built from another version of this source.
//
// Memory-bound, grid-stride loops. Packing: each warp turns 32 consecutive bytes into one
// 32-bit word with one ballot (lane i's byte becomes bit i, which on a little-endian
// device is exactly Arrow's bit order); reads and writes are coalesced. Unpacking: each
// thread writes one byte, reads hit the same cached bitmap words.

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

// dst[w] = the 32 booleans src[32w .. 32w+32) (a non-zero byte is true), for every
// w < ceil(n / 32); bits past n are zero. dst must hold ceil(n / 32) words. The block
// size must be a multiple of 32 (every lane of a warp runs the same iterations).
extern "C" __global__ void devbuf_pack_bits(const u8* __restrict__ src,
                                            u64 n,
                                            u32* __restrict__ dst)
{
    const u64 lane = threadIdx.x & 31;
    const u64 warp = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    const u64 words = (n + 31) / 32;
    for (u64 w = warp; w < words; w += warps) {
        const u64 i = w * 32 + lane;
        const bool bit = i < n && src[i] != 0;
        const u32 word = __ballot_sync(0xffffffffu, bit);
        if (lane == 0) {
            dst[w] = word;
        }
    }
}

// dst[i] = bit (bit_offset + i) of the bitmap src, as a byte 0 or 1, for i < n.
extern "C" __global__ void devbuf_unpack_bits(const u8* __restrict__ src,
                                              u64 bit_offset,
                                              u64 n,
                                              u8* __restrict__ dst)
{
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = tid; i < n; i += stride) {
        const u64 j = bit_offset + i;
        dst[i] = (__ldg(src + (j >> 3)) >> (j & 7)) & 1;
    }
}
