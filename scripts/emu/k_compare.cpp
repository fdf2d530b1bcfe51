// Registers the kernels of compare.cu with the CPU emulator.
#include "../../crates/devbuf-core/src/cuda/kernels/compare.cu"
#include "emu.h"
EMU_KERNEL(devbuf_bytes_equal, devbuf_bytes_equal(*(const u8**)a[0], *(const u8**)a[1], *(u64*)a[2], *(u32**)a[3]))
