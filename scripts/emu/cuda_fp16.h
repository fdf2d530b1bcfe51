// The few cuda_fp16.h intrinsics devbuf's kernels use, for the CPU emulator, built on
// GCC's _Float16 (libgcc's soft-float conversions, correctly rounded to nearest even):
// an implementation independent of devbuf's own host conversions.
#pragma once

struct __half {
    unsigned short x;
};

inline __half __ushort_as_half(unsigned short x) { return __half{x}; }
inline unsigned short __half_as_ushort(__half h) { return h.x; }

inline __half emu_from_f16(_Float16 f)
{
    __half h;
    __builtin_memcpy(&h.x, &f, 2);
    return h;
}
inline _Float16 emu_to_f16(__half h)
{
    _Float16 f;
    __builtin_memcpy(&f, &h.x, 2);
    return f;
}

inline float __half2float(__half h) { return (float)emu_to_f16(h); }
inline __half __double2half(double x) { return emu_from_f16((_Float16)x); }
inline __half __ll2half_rn(long long x) { return emu_from_f16((_Float16)x); }
inline __half __ull2half_rn(unsigned long long x) { return emu_from_f16((_Float16)x); }
