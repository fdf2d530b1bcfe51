// Registers the kernels of byteswap.cu with the CPU emulator.
#include "../../crates/devbuf-core/src/cuda/kernels/byteswap.cu"
#include "emu.h"
EMU_KERNEL(devbuf_byteswap2, devbuf_byteswap2(*(u8**)a[0], *(u64*)a[1]))
EMU_KERNEL(devbuf_byteswap4, devbuf_byteswap4(*(u8**)a[0], *(u64*)a[1]))
EMU_KERNEL(devbuf_byteswap8, devbuf_byteswap8(*(u8**)a[0], *(u64*)a[1]))
