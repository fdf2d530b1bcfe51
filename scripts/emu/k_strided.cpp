// Registers the kernels of strided.cu with the CPU emulator.
#include "../../crates/devbuf-core/src/cuda/kernels/strided.cu"
#include "emu.h"
EMU_KERNEL_STRUCT(devbuf_strided_runs, RunsParams)
#define EMU_W(w)                                                          \
    EMU_KERNEL_STRUCT(devbuf_strided_general_##w##_32, GeneralParams)     \
    EMU_KERNEL_STRUCT(devbuf_strided_general_##w##_64, GeneralParams)     \
    EMU_KERNEL_STRUCT(devbuf_strided_transpose_##w, TransposeParams)
EMU_W(1)
EMU_W(2)
EMU_W(4)
EMU_W(8)
EMU_W(16)
