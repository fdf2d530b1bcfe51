// The CPU emulator's executor: runs a grid one block at a time, each CUDA thread a fiber
// (ucontext) switched only at barriers. Deterministic; a barrier that not every live
// thread reaches is reported as a deadlock (the launch fails).

#include "emu.h"

#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

namespace emu {

dim3 g_threadIdx, g_blockIdx, g_blockDim, g_gridDim;

namespace {

std::map<std::string, Kernel>& registry()
{
    static std::map<std::string, Kernel> r;
    return r;
}

enum State { READY, AT_BARRIER, AT_BALLOT, DONE };

struct Fiber {
    ucontext_t ctx;
    State state;
    int pred;
    unsigned result;
    char* stack;
    void* fake_stack;
};

const size_t STACK = 256 * 1024;
std::mutex g_launch;
ucontext_t g_main;
std::vector<Fiber> g_fibers;
int g_cur;
const Kernel* g_kernel;
void** g_params;
const void* g_main_bottom;
size_t g_main_size;

void set_thread_index(int i)
{
    g_threadIdx.x = i % g_blockDim.x;
    g_threadIdx.y = (i / g_blockDim.x) % g_blockDim.y;
    g_threadIdx.z = i / (g_blockDim.x * g_blockDim.y);
}

// Fiber side of a switch back to the scheduler.
void to_main(bool dying)
{
    Fiber& f = g_fibers[g_cur];
#if EMU_ASAN
    __sanitizer_start_switch_fiber(dying ? nullptr : &f.fake_stack, g_main_bottom, g_main_size);
#endif
    swapcontext(&f.ctx, &g_main);
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(g_fibers[g_cur].fake_stack, &g_main_bottom, &g_main_size);
#endif
    (void)dying;
}

void fiber_entry()
{
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &g_main_bottom, &g_main_size);
#endif
    g_kernel->run(g_params);
    g_fibers[g_cur].state = DONE;
    to_main(true);
}

void yield(State s, int pred)
{
    Fiber& f = g_fibers[g_cur];
    f.state = s;
    f.pred = pred;
    to_main(false);
}

// Scheduler side: runs fiber i until it blocks or finishes.
void run_fiber(int i)
{
    g_cur = i;
    set_thread_index(i);
    Fiber& f = g_fibers[i];
#if EMU_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f.stack, STACK);
#endif
    swapcontext(&g_main, &f.ctx);
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

bool run_block(int n)
{
    if ((int)g_fibers.size() < n) {
        size_t old = g_fibers.size();
        g_fibers.resize(n);
        for (size_t i = old; i < (size_t)n; ++i) g_fibers[i].stack = (char*)std::malloc(STACK);
    }
    for (int i = 0; i < n; ++i) {
        Fiber& f = g_fibers[i];
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack;
        f.ctx.uc_stack.ss_size = STACK;
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, fiber_entry, 0);
        f.state = READY;
        f.fake_stack = nullptr;
    }
    for (;;) {
        for (int i = 0; i < n; ++i)
            if (g_fibers[i].state == READY) run_fiber(i);
        int done = 0, barrier = 0, ballot = 0, any = 0;
        for (int i = 0; i < n; ++i) {
            switch (g_fibers[i].state) {
            case DONE: ++done; break;
            case AT_BARRIER: ++barrier; any |= g_fibers[i].pred != 0; break;
            case AT_BALLOT: ++ballot; break;
            default: break;
            }
        }
        if (done == n) return true;
        bool released = false;
        // Warps whose live lanes all wait in __ballot_sync.
        for (int w = 0; w * 32 < n; ++w) {
            int lo = w * 32, hi = std::min(n, lo + 32);
            bool all = true, some = false;
            unsigned bits = 0;
            for (int i = lo; i < hi; ++i) {
                State s = g_fibers[i].state;
                if (s == AT_BALLOT) {
                    some = true;
                    if (g_fibers[i].pred) bits |= 1u << (i - lo);
                } else if (s != DONE) {
                    all = false;
                }
            }
            if (all && some) {
                for (int i = lo; i < hi; ++i)
                    if (g_fibers[i].state == AT_BALLOT) {
                        g_fibers[i].result = bits;
                        g_fibers[i].state = READY;
                    }
                released = true;
            }
        }
        if (released) continue;
        // A block barrier that every live thread reached.
        if (barrier > 0 && ballot == 0 && barrier + done == n) {
            for (int i = 0; i < n; ++i)
                if (g_fibers[i].state == AT_BARRIER) {
                    g_fibers[i].result = any;
                    g_fibers[i].state = READY;
                }
            continue;
        }
        std::fprintf(stderr, "emulator: deadlock in %s block (%u,%u,%u): %d done, %d at a barrier, %d at a ballot\n",
                     g_kernel->name, g_blockIdx.x, g_blockIdx.y, g_blockIdx.z, done, barrier, ballot);
        return false;
    }
}

}  // namespace

Registrar::Registrar(const char* name, void (*run)(void**)) { registry()[name] = Kernel{name, run}; }

const Kernel* find_kernel(const char* name)
{
    auto it = registry().find(name);
    return it == registry().end() ? nullptr : &it->second;
}

int multiprocessors()
{
    const char* s = std::getenv("DEVBUF_EMU_SMS");
    int n = s ? std::atoi(s) : 2;
    return n > 0 ? n : 2;
}

bool launch(const Kernel* k, dim3 grid, dim3 block, void** params)
{
    std::lock_guard<std::mutex> lock(g_launch);
    static const bool trace = std::getenv("DEVBUF_EMU_TRACE") != nullptr;
    if (trace)
        std::fprintf(stderr, "emulator: launch %s grid %u block %u\n", k->name, grid.x * grid.y * grid.z,
                     block.x * block.y * block.z);
    g_kernel = k;
    g_params = params;
    g_gridDim = grid;
    g_blockDim = block;
    const int n = (int)(block.x * block.y * block.z);
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                g_blockIdx = dim3{x, y, z};
                if (!run_block(n)) return false;
            }
    return true;
}

void barrier() { yield(AT_BARRIER, 0); }

int barrier_or(int pred)
{
    yield(AT_BARRIER, pred != 0);
    return (int)g_fibers[g_cur].result;
}

unsigned warp_ballot(int pred)
{
    yield(AT_BALLOT, pred != 0);
    return g_fibers[g_cur].result;
}

}  // namespace emu
