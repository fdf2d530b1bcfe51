// Registers the kernels of fill.cu with the CPU emulator.
#include "../../crates/devbuf-core/src/cuda/kernels/fill.cu"
#include "emu.h"
EMU_KERNEL_STRUCT(devbuf_fill_single, FillParams)
EMU_KERNEL_STRUCT(devbuf_fill_periodic, FillParams)
