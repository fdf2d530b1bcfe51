// Registers the kernels of cast.cu with the CPU emulator.
#include "../../crates/devbuf-core/src/cuda/kernels/cast.cu"
#include "emu.h"
#define EMU_CAST(s, d) EMU_KERNEL(devbuf_cast_##s##_##d, devbuf_cast_##s##_##d(*(const u8**)a[0], *(u8**)a[1], *(u64*)a[2]))
#define EMU_CAST_FROM(s) \
    EMU_CAST(s, bool) EMU_CAST(s, i8) EMU_CAST(s, i16) EMU_CAST(s, i32) EMU_CAST(s, i64) \
    EMU_CAST(s, u8) EMU_CAST(s, u16) EMU_CAST(s, u32) EMU_CAST(s, u64) EMU_CAST(s, f16) \
    EMU_CAST(s, f32) EMU_CAST(s, f64) EMU_CAST(s, c64) EMU_CAST(s, c128)
EMU_CAST_FROM(bool)
EMU_CAST_FROM(i8)
EMU_CAST_FROM(i16)
EMU_CAST_FROM(i32)
EMU_CAST_FROM(i64)
EMU_CAST_FROM(u8)
EMU_CAST_FROM(u16)
EMU_CAST_FROM(u32)
EMU_CAST_FROM(u64)
EMU_CAST_FROM(f16)
EMU_CAST_FROM(f32)
EMU_CAST_FROM(f64)
EMU_CAST_FROM(c64)
EMU_CAST_FROM(c128)
