// devbuf device kernels: in-place byte swap of 2-, 4- and 8-byte elements.
//
// Regenerate the PTX with scripts/build-kernels.sh after editing this file; a host test
// fails when the PTX was built from another version of this source.
//
// When the first element is aligned to its width, whole 16-byte vectors are loaded,
// swapped with byte permutes and stored (four per thread per iteration); the elements
// before the first and after the last whole vector are swapped one by one. When the
// elements are not aligned to their width, each thread swaps whole elements byte by byte.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ u32 bswap32(u32 x) { return __byte_perm(x, 0, 0x0123); }
__device__ __forceinline__ u32 bswap16x2(u32 x) { return __byte_perm(x, 0, 0x2301); }

template <u32 W>
__device__ __forceinline__ uint4 swap_vec(uint4 a)
{
    if (W == 2) return make_uint4(bswap16x2(a.x), bswap16x2(a.y), bswap16x2(a.z), bswap16x2(a.w));
    if (W == 4) return make_uint4(bswap32(a.x), bswap32(a.y), bswap32(a.z), bswap32(a.w));
    return make_uint4(bswap32(a.y), bswap32(a.x), bswap32(a.w), bswap32(a.z));  // W == 8
}

template <u32 W>
__device__ __forceinline__ void swap_elem_aligned(u8* e)
{
    if (W == 2) {
        u16* p = (u16*)e;
        *p = (u16)__byte_perm(*p, 0, 0x0001);
    } else if (W == 4) {
        u32* p = (u32*)e;
        *p = bswap32(*p);
    } else {
        uint2* p = (uint2*)e;
        const uint2 v = *p;
        *p = make_uint2(bswap32(v.y), bswap32(v.x));
    }
}

template <u32 W>
__device__ __forceinline__ void byteswap_body(u8* first, u64 nbytes)
{
    const u64 gtid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 stride = (u64)gridDim.x * blockDim.x;

    if (((u64)first & (W - 1)) != 0) {
        // Misaligned elements: one element per thread, byte by byte.
        const u64 n = nbytes / W;
        for (u64 i = gtid; i < n; i += stride) {
            u8* e = first + i * W;
            u8 t[W];
#pragma unroll
            for (u32 j = 0; j < W; ++j) t[j] = e[j];
#pragma unroll
            for (u32 j = 0; j < W; ++j) e[j] = t[W - 1 - j];
        }
        return;
    }

    u64 head = (16 - ((u64)first & 15)) & 15;
    if (head > nbytes) head = nbytes;
    const u64 nvec = (nbytes - head) / 16;
    const u64 tail = head + nvec * 16;
    if (gtid < head / W) swap_elem_aligned<W>(first + gtid * W);
    if (gtid < (nbytes - tail) / W) swap_elem_aligned<W>(first + tail + gtid * W);

    uint4* v = (uint4*)(first + head);
    u64 k = gtid;
    for (; k + 3 * stride < nvec; k += 4 * stride) {
        const uint4 a = v[k];
        const uint4 b = v[k + stride];
        const uint4 c = v[k + 2 * stride];
        const uint4 d = v[k + 3 * stride];
        v[k] = swap_vec<W>(a);
        v[k + stride] = swap_vec<W>(b);
        v[k + 2 * stride] = swap_vec<W>(c);
        v[k + 3 * stride] = swap_vec<W>(d);
    }
    for (; k < nvec; k += stride) v[k] = swap_vec<W>(v[k]);
}

// `nbytes` is a multiple of the width.
extern "C" __global__ void __launch_bounds__(256, 8) devbuf_byteswap2(u8* first, u64 nbytes)
{
    byteswap_body<2>(first, nbytes);
}
extern "C" __global__ void __launch_bounds__(256, 8) devbuf_byteswap4(u8* first, u64 nbytes)
{
    byteswap_body<4>(first, nbytes);
}
extern "C" __global__ void __launch_bounds__(256, 8) devbuf_byteswap8(u8* first, u64 nbytes)
{
    byteswap_body<8>(first, nbytes);
}
