// devbuf device kernels: elementwise casts between the 14 scalar kinds (numpy `astype`
// with casting='unsafe').
//
// Regenerate the PTX with scripts/build-kernels.sh after editing this file; a host test
// fails when the PTX was built from another version of this source. The host
// implementation (src/cuda/kernels/ops/host.rs) follows exactly the same rules; the GPU
// tests compare the two on every pair of kinds.
//
// Semantics (little-endian native values):
// * bool source: a non-zero byte is 1, zero is 0. bool destination: x != 0 (NaN is true;
//   a complex value is true when either part is non-zero).
// * int -> int: two's-complement wrap (C casts). int -> float: round to nearest even,
//   directly from the 64-bit integer (no double rounding).
// * float -> float: round to nearest even, directly (f64 -> f16 in one step);
//   overflow gives +-inf; NaN stays NaN (payload not preserved).
// * float -> int: truncation toward zero for values in range; NaN, +-inf and values out
//   of range give what x86-64's truncating conversions give (what numpy's C casts
//   compile to there): to i64 the "integer indefinite" value i64::MIN; to i8/i16/i32/u8/
//   u16 the 32-bit conversion (i32::MIN when out of the i32 range) wrapped to the width;
//   to u32 the 64-bit conversion wrapped; to u64 values >= 2^63 convert as x - 2^63
//   with the top bit set (so >= 2^64 and +inf give 0) and everything else through the
//   signed 64-bit conversion (so NaN and -inf give 2^63, -1.0 gives u64::MAX).
// * complex -> real: the real part (then as above). real -> complex: imaginary part +0.
//
// Every value is decoded into one of four exact intermediate forms (signed 64-bit,
// unsigned 64-bit, double, pair of doubles: every source value is representable
// exactly) and encoded from there, so each conversion rounds once.
//
// Layout: when source and destination both start 16-byte aligned, each thread converts
// chunks of E = 16 / min(source size, destination size) elements, so that both sides
// move whole 16-byte vectors, with several chunks in flight per iteration; the
// remainder, and ranges that are not 16-byte aligned (but aligned to their components),
// go element by element (still coalesced).

#include <cuda_fp16.h>

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

enum Kind {
    K_BOOL = 0, K_I8, K_I16, K_I32, K_I64, K_U8, K_U16, K_U32, K_U64,
    K_F16, K_F32, K_F64, K_C64, K_C128
};

template <int K> struct KindInfo;
#define KIND_INFO(k, size, align) \
    template <> struct KindInfo<k> { static constexpr int SIZE = size; static constexpr int ALIGN = align; };
KIND_INFO(K_BOOL, 1, 1)
KIND_INFO(K_I8, 1, 1)
KIND_INFO(K_I16, 2, 2)
KIND_INFO(K_I32, 4, 4)
KIND_INFO(K_I64, 8, 8)
KIND_INFO(K_U8, 1, 1)
KIND_INFO(K_U16, 2, 2)
KIND_INFO(K_U32, 4, 4)
KIND_INFO(K_U64, 8, 8)
KIND_INFO(K_F16, 2, 2)
KIND_INFO(K_F32, 4, 4)
KIND_INFO(K_F64, 8, 8)
KIND_INFO(K_C64, 8, 4)
KIND_INFO(K_C128, 16, 8)

// Up to 16 bytes of one element, little-endian words.
struct Bits { u32 w[4]; };

// Exact intermediate values.
struct VI { i64 v; };
struct VU { u64 v; };
struct VF { double v; };
struct VC { double re, im; };

// binary16 conversions: cuda_fp16.h's intrinsics are single PTX cvt instructions
// (cvt.f32.f16, cvt.rn.f16.f64, cvt.rn.f16.s64, cvt.rn.f16.u64), each rounding once.
__device__ __forceinline__ double h2d(u32 h)
{
    return (double)__half2float(__ushort_as_half((unsigned short)h));
}
__device__ __forceinline__ u32 d2h(double x) { return __half_as_ushort(__double2half(x)); }
__device__ __forceinline__ u32 s2h(i64 x) { return __half_as_ushort(__ll2half_rn(x)); }
__device__ __forceinline__ u32 u2h(u64 x) { return __half_as_ushort(__ull2half_rn(x)); }

__device__ __forceinline__ double bits_f64(u32 lo, u32 hi) { return __hiloint2double((int)hi, (int)lo); }
__device__ __forceinline__ u64 word64(const Bits& b) { return ((u64)b.w[1] << 32) | b.w[0]; }

template <int K>
__device__ __forceinline__ auto decode(const Bits& b)
{
    if constexpr (K == K_BOOL) return VI{(b.w[0] & 0xffu) != 0 ? 1 : 0};
    else if constexpr (K == K_I8) return VI{(i64)(signed char)(b.w[0] & 0xffu)};
    else if constexpr (K == K_I16) return VI{(i64)(short)(b.w[0] & 0xffffu)};
    else if constexpr (K == K_I32) return VI{(i64)(int)b.w[0]};
    else if constexpr (K == K_I64) return VI{(i64)word64(b)};
    else if constexpr (K == K_U8) return VU{(u64)(b.w[0] & 0xffu)};
    else if constexpr (K == K_U16) return VU{(u64)(b.w[0] & 0xffffu)};
    else if constexpr (K == K_U32) return VU{(u64)b.w[0]};
    else if constexpr (K == K_U64) return VU{word64(b)};
    else if constexpr (K == K_F16) return VF{h2d(b.w[0] & 0xffffu)};
    else if constexpr (K == K_F32) return VF{(double)__int_as_float((int)b.w[0])};
    else if constexpr (K == K_F64) return VF{bits_f64(b.w[0], b.w[1])};
    else if constexpr (K == K_C64)
        return VC{(double)__int_as_float((int)b.w[0]), (double)__int_as_float((int)b.w[1])};
    else return VC{bits_f64(b.w[0], b.w[1]), bits_f64(b.w[2], b.w[3])};
}

// x86-64 cvttsd2si semantics: out of range or NaN -> the "integer indefinite" value.
__device__ __forceinline__ i64 x86_i64(double x)
{
    return (x >= -9223372036854775808.0 && x < 9223372036854775808.0) ? (i64)x
                                                                        : (i64)0x8000000000000000ull;
}
__device__ __forceinline__ int x86_i32(double x)
{
    return (x > -2147483649.0 && x < 2147483648.0) ? (int)x : (int)0x80000000u;
}

// Float -> integer kind, as the low bits of a 64-bit word.
template <int DK>
__device__ __forceinline__ u64 float_to_int(double x)
{
    if constexpr (DK == K_I64) return (u64)x86_i64(x);
    else if constexpr (DK == K_U32) return (u64)x86_i64(x);
    else if constexpr (DK == K_U64)
        return x >= 9223372036854775808.0
                   ? ((u64)x86_i64(x - 9223372036854775808.0) ^ 0x8000000000000000ull)
                   : (u64)x86_i64(x);
    else return (u64)(i64)x86_i32(x);  // i8, i16, i32, u8, u16
}

__device__ __forceinline__ Bits bits1(u64 lo)
{
    Bits b;
    b.w[0] = (u32)lo;
    b.w[1] = (u32)(lo >> 32);
    b.w[2] = 0;
    b.w[3] = 0;
    return b;
}
__device__ __forceinline__ Bits bits2(u64 lo, u64 hi)
{
    Bits b;
    b.w[0] = (u32)lo;
    b.w[1] = (u32)(lo >> 32);
    b.w[2] = (u32)hi;
    b.w[3] = (u32)(hi >> 32);
    return b;
}
__device__ __forceinline__ u64 f32_bits(float f) { return (u64)(u32)__float_as_int(f); }
__device__ __forceinline__ u64 f64_bits(double d) { return (u64)__double_as_longlong(d); }

template <int DK> __device__ __forceinline__ bool is_int_kind()
{
    return DK >= K_I8 && DK <= K_U64;
}

template <int DK>
__device__ __forceinline__ Bits encode(VI x)
{
    if constexpr (DK == K_BOOL) return bits1(x.v != 0);
    else if constexpr (DK >= K_I8 && DK <= K_U64) return bits1((u64)x.v);
    else if constexpr (DK == K_F16) return bits1(s2h(x.v));
    else if constexpr (DK == K_F32) return bits1(f32_bits((float)x.v));
    else if constexpr (DK == K_F64) return bits1(f64_bits((double)x.v));
    else if constexpr (DK == K_C64) return bits1(f32_bits((float)x.v));
    else return bits2(f64_bits((double)x.v), 0);
}

template <int DK>
__device__ __forceinline__ Bits encode(VU x)
{
    if constexpr (DK == K_BOOL) return bits1(x.v != 0);
    else if constexpr (DK >= K_I8 && DK <= K_U64) return bits1(x.v);
    else if constexpr (DK == K_F16) return bits1(u2h(x.v));
    else if constexpr (DK == K_F32) return bits1(f32_bits((float)x.v));
    else if constexpr (DK == K_F64) return bits1(f64_bits((double)x.v));
    else if constexpr (DK == K_C64) return bits1(f32_bits((float)x.v));
    else return bits2(f64_bits((double)x.v), 0);
}

template <int DK>
__device__ __forceinline__ Bits encode(VF x)
{
    if constexpr (DK == K_BOOL) return bits1(x.v != 0.0);
    else if constexpr (DK >= K_I8 && DK <= K_U64) return bits1(float_to_int<DK>(x.v));
    else if constexpr (DK == K_F16) return bits1(d2h(x.v));
    else if constexpr (DK == K_F32) return bits1(f32_bits((float)x.v));
    else if constexpr (DK == K_F64) return bits1(f64_bits(x.v));
    else if constexpr (DK == K_C64) return bits1(f32_bits((float)x.v));
    else return bits2(f64_bits(x.v), 0);
}

template <int DK>
__device__ __forceinline__ Bits encode(VC x)
{
    if constexpr (DK == K_BOOL) return bits1(x.re != 0.0 || x.im != 0.0);
    else if constexpr (DK >= K_I8 && DK <= K_U64) return bits1(float_to_int<DK>(x.re));
    else if constexpr (DK == K_F16) return bits1(d2h(x.re));
    else if constexpr (DK == K_F32) return bits1(f32_bits((float)x.re));
    else if constexpr (DK == K_F64) return bits1(f64_bits(x.re));
    else if constexpr (DK == K_C64)
        return bits1(f32_bits((float)x.re) | (f32_bits((float)x.im) << 32));
    else return bits2(f64_bits(x.re), f64_bits(x.im));
}

template <int SK, int DK>
__device__ __forceinline__ Bits convert(const Bits& b)
{
    return encode<DK>(decode<SK>(b));
}

// Element i of size S from a register array of words.
template <int S, int N>
__device__ __forceinline__ Bits extract(const u32 (&w)[N], int i)
{
    Bits b;
    b.w[1] = b.w[2] = b.w[3] = 0;
    if constexpr (S == 1) b.w[0] = (w[i >> 2] >> ((i & 3) * 8)) & 0xffu;
    else if constexpr (S == 2) b.w[0] = (w[i >> 1] >> ((i & 1) * 16)) & 0xffffu;
    else if constexpr (S == 4) b.w[0] = w[i];
    else if constexpr (S == 8) {
        b.w[0] = w[2 * i];
        b.w[1] = w[2 * i + 1];
    } else {
        b.w[0] = w[4 * i];
        b.w[1] = w[4 * i + 1];
        b.w[2] = w[4 * i + 2];
        b.w[3] = w[4 * i + 3];
    }
    return b;
}

template <int S, int N>
__device__ __forceinline__ void insert(u32 (&w)[N], int i, const Bits& b)
{
    if constexpr (S == 1) w[i >> 2] |= (b.w[0] & 0xffu) << ((i & 3) * 8);
    else if constexpr (S == 2) w[i >> 1] |= (b.w[0] & 0xffffu) << ((i & 1) * 16);
    else if constexpr (S == 4) w[i] = b.w[0];
    else if constexpr (S == 8) {
        w[2 * i] = b.w[0];
        w[2 * i + 1] = b.w[1];
    } else {
        w[4 * i] = b.w[0];
        w[4 * i + 1] = b.w[1];
        w[4 * i + 2] = b.w[2];
        w[4 * i + 3] = b.w[3];
    }
}

// One element from memory aligned to its kind's alignment.
template <int K>
__device__ __forceinline__ Bits load_elem(const u8* p)
{
    constexpr int S = KindInfo<K>::SIZE;
    if constexpr (S == 1) return bits1(*p);
    else if constexpr (S == 2) return bits1(*(const u16*)p);
    else if constexpr (S == 4) return bits1(*(const u32*)p);
    else if constexpr (K == K_C64) {
        const u32* q = (const u32*)p;
        return bits1((u64)q[0] | ((u64)q[1] << 32));
    } else if constexpr (S == 8) return bits1(*(const u64*)p);
    else {
        const u64* q = (const u64*)p;
        return bits2(q[0], q[1]);
    }
}

template <int K>
__device__ __forceinline__ void store_elem(u8* p, const Bits& b)
{
    constexpr int S = KindInfo<K>::SIZE;
    if constexpr (S == 1) *p = (u8)b.w[0];
    else if constexpr (S == 2) *(u16*)p = (u16)b.w[0];
    else if constexpr (S == 4) *(u32*)p = b.w[0];
    else if constexpr (K == K_C64) {
        u32* q = (u32*)p;
        q[0] = b.w[0];
        q[1] = b.w[1];
    } else if constexpr (S == 8) *(u64*)p = word64(b);
    else {
        u64* q = (u64*)p;
        q[0] = word64(b);
        q[1] = ((u64)b.w[3] << 32) | b.w[2];
    }
}

// Loads the first B (1, 2, 4, 8 or 16) bytes at `p` (aligned to B) into words.
template <int B>
__device__ __forceinline__ void load_words(const u8* p, u32 (&w)[4])
{
    w[0] = w[1] = w[2] = w[3] = 0;
    if constexpr (B == 1) w[0] = __ldg(p);
    else if constexpr (B == 2) w[0] = __ldg((const unsigned short*)p);
    else if constexpr (B == 4) w[0] = __ldg((const u32*)p);
    else if constexpr (B == 8) {
        const uint2 x = __ldg((const uint2*)p);
        w[0] = x.x;
        w[1] = x.y;
    } else {
        const uint4 x = __ldg((const uint4*)p);
        w[0] = x.x;
        w[1] = x.y;
        w[2] = x.z;
        w[3] = x.w;
    }
}

// Widening casts (destination elements larger than source ones): each chunk is one
// 16-byte store and a 16 * SS / DS-byte load, so both the loads and the stores of a warp
// cover one contiguous range (every sector fully used), and four chunks per thread keep
// enough loads in flight. Returns the number of elements done.
template <int SK, int DK>
__device__ __forceinline__ u64 cast_widening(const u8* __restrict__ src, u8* __restrict__ dst, u64 n,
                                             u64 gtid, u64 stride)
{
    constexpr int SS = KindInfo<SK>::SIZE;
    constexpr int DS = KindInfo<DK>::SIZE;
    constexpr int E = 16 / DS;          // elements per chunk
    constexpr int LB = E * SS;          // bytes loaded per chunk (< 16)
    constexpr int U = 4;
    const u64 nchunk = n / E;
    uint4* vd = (uint4*)dst;
    for (u64 c = gtid; c < nchunk; c += U * stride) {
        u32 in[U][4];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const u64 cu = c + u * stride;
            if (cu < nchunk) load_words<LB>(src + cu * LB, in[u]);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const u64 cu = c + u * stride;
            if (cu < nchunk) {
                u32 out[4] = {0, 0, 0, 0};
#pragma unroll
                for (int i = 0; i < E; ++i) insert<DS>(out, i, convert<SK, DK>(extract<SS>(in[u], i)));
                vd[cu] = make_uint4(out[0], out[1], out[2], out[3]);
            }
        }
    }
    return nchunk * E;
}

template <int SK, int DK>
__device__ __forceinline__ void cast_body(const u8* __restrict__ src, u8* __restrict__ dst, u64 n)
{
    constexpr int SS = KindInfo<SK>::SIZE;
    constexpr int DS = KindInfo<DK>::SIZE;
    constexpr int MINS = SS < DS ? SS : DS;
    constexpr int E = 16 / MINS;        // elements per chunk
    constexpr int NI = E * SS / 16;     // 16-byte loads per chunk
    constexpr int NO = E * DS / 16;     // 16-byte stores per chunk
    constexpr int NM = NI > NO ? NI : NO;
    constexpr int U = NM >= 4 ? 1 : 4 / NM;  // chunks per iteration (<= 64 bytes a side)

    const u64 gtid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 stride = (u64)gridDim.x * blockDim.x;

    u64 done = 0;
    if constexpr (DS > SS) {
        if ((((u64)src | (u64)dst) & 15) == 0) done = cast_widening<SK, DK>(src, dst, n, gtid, stride);
    } else if ((((u64)src | (u64)dst) & 15) == 0) {
        const u64 nchunk = n / E;
        const uint4* vs = (const uint4*)src;
        uint4* vd = (uint4*)dst;
        for (u64 c = gtid; c < nchunk; c += U * stride) {
            u32 in[U][4 * NI];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const u64 cu = c + u * stride;
#pragma unroll
                for (int q = 0; q < NI; ++q) {
                    const uint4 x = cu < nchunk ? __ldg(vs + cu * NI + q) : make_uint4(0, 0, 0, 0);
                    in[u][4 * q] = x.x;
                    in[u][4 * q + 1] = x.y;
                    in[u][4 * q + 2] = x.z;
                    in[u][4 * q + 3] = x.w;
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const u64 cu = c + u * stride;
                if (cu < nchunk) {
                    u32 out[4 * NO];
#pragma unroll
                    for (int q = 0; q < 4 * NO; ++q) out[q] = 0;
#pragma unroll
                    for (int i = 0; i < E; ++i)
                        insert<DS>(out, i, convert<SK, DK>(extract<SS>(in[u], i)));
#pragma unroll
                    for (int q = 0; q < NO; ++q)
                        vd[cu * NO + q] =
                            make_uint4(out[4 * q], out[4 * q + 1], out[4 * q + 2], out[4 * q + 3]);
                }
            }
        }
        done = nchunk * E;
    }
    // Element by element: the remainder, or everything when not 16-byte aligned.
    for (u64 i = done + gtid; i < n; i += stride)
        store_elem<DK>(dst + i * DS, convert<SK, DK>(load_elem<SK>(src + i * SS)));
}

// devbuf_cast_<src>_<dst>(const u8* src, u8* dst, u64 n): n elements; src and dst do not
// overlap; both are aligned to their kind's component alignment (KindInfo::ALIGN).
#define CAST(sn, sk, dn, dk)                                                              \
    extern "C" __global__ void __launch_bounds__(256)                                     \
        devbuf_cast_##sn##_##dn(const u8* __restrict__ src, u8* __restrict__ dst, u64 n) \
    {                                                                                     \
        cast_body<sk, dk>(src, dst, n);                                                   \
    }
#define CAST_FROM(sn, sk)            \
    CAST(sn, sk, bool, K_BOOL)       \
    CAST(sn, sk, i8, K_I8)           \
    CAST(sn, sk, i16, K_I16)         \
    CAST(sn, sk, i32, K_I32)         \
    CAST(sn, sk, i64, K_I64)         \
    CAST(sn, sk, u8, K_U8)           \
    CAST(sn, sk, u16, K_U16)         \
    CAST(sn, sk, u32, K_U32)         \
    CAST(sn, sk, u64, K_U64)         \
    CAST(sn, sk, f16, K_F16)         \
    CAST(sn, sk, f32, K_F32)         \
    CAST(sn, sk, f64, K_F64)         \
    CAST(sn, sk, c64, K_C64)         \
    CAST(sn, sk, c128, K_C128)

CAST_FROM(bool, K_BOOL)
CAST_FROM(i8, K_I8)
CAST_FROM(i16, K_I16)
CAST_FROM(i32, K_I32)
CAST_FROM(i64, K_I64)
CAST_FROM(u8, K_U8)
CAST_FROM(u16, K_U16)
CAST_FROM(u32, K_U32)
CAST_FROM(u64, K_U64)
CAST_FROM(f16, K_F16)
CAST_FROM(f32, K_F32)
CAST_FROM(f64, K_F64)
CAST_FROM(c64, K_C64)
CAST_FROM(c128, K_C128)
