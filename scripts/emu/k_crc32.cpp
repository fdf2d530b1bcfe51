// Registers the kernel of crc32.cu with the CPU emulator.
#include "../../crates/devbuf-core/src/cuda/kernels/crc32.cu"
#include "emu.h"
EMU_KERNEL(devbuf_crc32_ranges, devbuf_crc32_ranges(*(const u64**)a[0], *(const u64**)a[1], *(const u64**)a[2], *(u32**)a[3], *(u64*)a[4]))
