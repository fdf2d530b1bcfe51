// Registers the kernels of equal.cu with the CPU emulator.
#include "../../crates/devbuf-core/src/cuda/kernels/equal.cu"
#include "emu.h"
EMU_KERNEL_STRUCT(devbuf_equal_pattern, EqualParams)
EMU_KERNEL_STRUCT(devbuf_equal_pred, PredParams)
