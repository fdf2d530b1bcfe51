// Registers the kernels of shuffle.cu with the CPU emulator.
#include "../../crates/devbuf-core/src/cuda/kernels/shuffle.cu"
#include "emu.h"
EMU_KERNEL_STRUCT(devbuf_unshuffle_2, UnshuffleParams)
EMU_KERNEL_STRUCT(devbuf_unshuffle_4, UnshuffleParams)
EMU_KERNEL_STRUCT(devbuf_unshuffle_8, UnshuffleParams)
EMU_KERNEL_STRUCT(devbuf_unshuffle_16, UnshuffleParams)
