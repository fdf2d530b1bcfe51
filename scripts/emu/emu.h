// The kernel registry and launcher of the CPU emulator (see emu.cpp).
#pragma once

#include "shim.h"

namespace emu {

struct Kernel {
    const char* name;
    void (*run)(void** params);
};

// Registers a kernel at load time (one static Registrar per kernel).
struct Registrar {
    Registrar(const char* name, void (*run)(void**));
};

const Kernel* find_kernel(const char* name);

// Runs every block of the grid, one after another; false when a block deadlocked.
bool launch(const Kernel* k, dim3 grid, dim3 block, void** params);

// The multiprocessor count the emulated device reports (DEVBUF_EMU_SMS, default 2).
int multiprocessors();

}  // namespace emu

// EMU_KERNEL(name, body): registers `name`, whose parameters are unpacked by `body`
// from `void** a` (one pointer per parameter).
#define EMU_KERNEL(name, body) \
    static emu::Registrar emu_reg_##name(#name, [](void** a) { body; });
#define EMU_KERNEL_STRUCT(name, P) EMU_KERNEL(name, name(*(const P*)a[0]))
