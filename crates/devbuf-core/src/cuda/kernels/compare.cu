// devbuf device kernels: byte-wise comparison of two device ranges.
//
// Regenerate the PTX with scripts/build-kernels.sh after editing this file; a host test
// fails when the PTX was built from another version of this source.
//
// Memory-bound: 16-byte loads when both ranges share their alignment modulo 16,
// coalesced grid-stride loops, one flag write per warp that saw a difference.

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

// Sets *differ to 1 when a[0..n) != b[0..n). *differ must be 0 before the launch.
extern "C" __global__ void devbuf_bytes_equal(const u8* __restrict__ a,
                                              const u8* __restrict__ b,
                                              u64 n,
                                              u32* __restrict__ differ)
{
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    bool diff = false;

    u64 head = n;   // bytes compared one at a time before the vector part
    u64 nvec = 0;   // 16-byte vectors
    if ((((u64)a ^ (u64)b) & 15) == 0) {
        head = (16 - ((u64)a & 15)) & 15;
        if (head > n) head = n;
        nvec = (n - head) / 16;
    }
    const u64 tail_start = head + nvec * 16;

    if (nvec > 0) {
        const uint4* va = (const uint4*)(a + head);
        const uint4* vb = (const uint4*)(b + head);
        for (u64 i = tid; i < nvec; i += stride) {
            uint4 x = __ldg(va + i);
            uint4 y = __ldg(vb + i);
            diff |= (x.x != y.x) | (x.y != y.y) | (x.z != y.z) | (x.w != y.w);
        }
        for (u64 i = tid; i < head; i += stride) diff |= a[i] != b[i];
        for (u64 i = tail_start + tid; i < n; i += stride) diff |= a[i] != b[i];
    } else {
        // Mismatched alignment: each thread compares 4 bytes per step, still coalesced.
        const u64 nquad = n / 4;
        for (u64 q = tid; q < nquad; q += stride) {
            const u64 i = q * 4;
            diff |= (a[i] != b[i]) | (a[i + 1] != b[i + 1]) | (a[i + 2] != b[i + 2]) | (a[i + 3] != b[i + 3]);
        }
        for (u64 i = nquad * 4 + tid; i < n; i += stride) diff |= a[i] != b[i];
    }

    const unsigned any = __ballot_sync(0xffffffffu, diff);
    if (any != 0 && (threadIdx.x & 31) == 0) {
        *differ = 1;
    }
}
