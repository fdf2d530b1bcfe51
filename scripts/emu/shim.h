// CUDA device-code shims for compiling devbuf's kernel sources (src/cuda/kernels/*.cu)
// as ordinary C++ for the CPU emulator (scripts/emu). Force-included before each .cu.
//
// A kernel runs one block at a time; each CUDA thread of the block is a fiber
// (ucontext) of one OS thread, switched only at barriers (__syncthreads,
// __syncthreads_or, __ballot_sync), so the emulation is deterministic. __shared__
// variables are statics (blocks never run concurrently).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __grid_constant__
#define __constant__

struct dim3 {
    unsigned x, y, z;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }

namespace emu {
extern dim3 g_threadIdx, g_blockIdx, g_blockDim, g_gridDim;
void barrier();                 // __syncthreads
int barrier_or(int pred);       // __syncthreads_or
unsigned warp_ballot(int pred); // __ballot_sync (full warps only)
}  // namespace emu

#define threadIdx (emu::g_threadIdx)
#define blockIdx (emu::g_blockIdx)
#define blockDim (emu::g_blockDim)
#define gridDim (emu::g_gridDim)

inline void __syncthreads() { emu::barrier(); }
inline int __syncthreads_or(int pred) { return emu::barrier_or(pred); }
inline unsigned __ballot_sync(unsigned /*mask*/, int pred) { return emu::warp_ballot(pred); }
inline void __threadfence() {}
inline void __threadfence_system() {}

template <class T>
inline T __ldg(const T* p) { return *p; }

inline unsigned atomicAdd(unsigned* p, unsigned v)
{
    unsigned old = *p;
    *p = old + v;
    return old;
}

inline unsigned atomicXor(unsigned* p, unsigned v)
{
    unsigned old = *p;
    *p = old ^ v;
    return old;
}

// Byte i of the result is byte (s >> 4i) & 7 of the 8 bytes y:x (sign mode not used).
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s)
{
    const uint64_t v = ((uint64_t)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; ++i) {
        const unsigned sel = (s >> (4 * i)) & 7;
        r |= (unsigned)((v >> (8 * sel)) & 0xff) << (8 * i);
    }
    return r;
}

inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift)
{
    return (unsigned)((((uint64_t)hi << 32) | lo) >> (shift & 31));
}

inline float __int_as_float(int x)
{
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}
inline int __float_as_int(float f)
{
    int x;
    std::memcpy(&x, &f, 4);
    return x;
}
inline double __hiloint2double(int hi, int lo)
{
    const uint64_t b = ((uint64_t)(unsigned)hi << 32) | (unsigned)lo;
    double d;
    std::memcpy(&d, &b, 8);
    return d;
}
inline long long __double_as_longlong(double d)
{
    long long x;
    std::memcpy(&x, &d, 8);
    return x;
}

template <class T>
inline T min(T a, T b) { return a < b ? a : b; }
template <class T>
inline T max(T a, T b) { return a > b ? a : b; }
