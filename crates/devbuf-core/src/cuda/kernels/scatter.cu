// devbuf device kernels: copy a table of (dst, src, len) segments within device memory.
//
// The transfer engine packs many small host pieces into one staging buffer, moves it to
// the device in one DMA and then scatters the pieces to their destinations with this
// kernel (and, device->host, gathers pieces into one buffer before one DMA).
//
// Regenerate the PTX with scripts/build-kernels.sh after editing this file; a host test
// fails when the PTX was built from another version of this source.
//
// One block per segment (grid-stride over segments); within a segment the block's
// threads copy 16 bytes each per step, coalesced, when destination and source share
// their alignment modulo 16 (the engine's planner places every piece so that they do),
// else 4 or 1 bytes per step. Segments may not overlap each other.

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

struct Segment {
    u64 dst;
    u64 src;
    u64 len;
};

extern "C" __global__ void devbuf_copy_segments(const Segment* __restrict__ segs, u32 count)
{
    for (u32 s = blockIdx.x; s < count; s += gridDim.x) {
        const Segment g = segs[s];
        u8* __restrict__ d = (u8*)g.dst;
        const u8* __restrict__ src = (const u8*)g.src;
        const u64 len = g.len;
        const u64 t = threadIdx.x;
        const u64 step = blockDim.x;
        if (((g.dst ^ g.src) & 15) == 0) {
            u64 head = (16 - (g.dst & 15)) & 15;
            if (head > len) head = len;
            const u64 nvec = (len - head) / 16;
            for (u64 i = t; i < head; i += step) d[i] = src[i];
            uint4* vd = (uint4*)(d + head);
            const uint4* vs = (const uint4*)(src + head);
            u64 i = t;
            // Two vectors in flight per thread per step; streaming (evict-first) global
            // accesses: the data is touched once.
            for (; i + step < nvec; i += 2 * step) {
                const uint4 a = __ldcs(vs + i);
                const uint4 b = __ldcs(vs + i + step);
                __stcs(vd + i, a);
                __stcs(vd + i + step, b);
            }
            for (; i < nvec; i += step) __stcs(vd + i, __ldcs(vs + i));
            for (u64 j = head + nvec * 16 + t; j < len; j += step) d[j] = src[j];
        } else if (((g.dst ^ g.src) & 3) == 0) {
            u64 head = (4 - (g.dst & 3)) & 3;
            if (head > len) head = len;
            const u64 nw = (len - head) / 4;
            for (u64 i = t; i < head; i += step) d[i] = src[i];
            u32* wd = (u32*)(d + head);
            const u32* ws = (const u32*)(src + head);
            for (u64 i = t; i < nw; i += step) wd[i] = ws[i];
            for (u64 j = head + nw * 4 + t; j < len; j += step) d[j] = src[j];
        } else {
            for (u64 i = t; i < len; i += step) d[i] = src[i];
        }
    }
}
