// A CPU stand-in for libcuda.so: the subset of the CUDA driver API that devbuf calls,
// with "device" memory in host memory (unified addressing: a device pointer is a host
// pointer), every stream synchronous, and kernels run by the emulator (emu.cpp) from
// devbuf's own .cu sources compiled as C++.
//
// It checks logic, not hardware: no timing, no coalescing, no memory model. Built with
// AddressSanitizer (scripts/emu/run.sh) it also catches kernel accesses outside their
// allocations (allocations are rounded up to 256 bytes like cuMemAlloc's).

#include <cuda.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "emu.h"

namespace {

struct Alloc {
    size_t size;
    bool host;
    /// Memory of the caller's registered with cuMemHostRegister: not ours to free.
    bool registered = false;
};

std::mutex g_mem_mutex;
std::map<uintptr_t, Alloc> g_allocs;

void* alloc_rounded(size_t n)
{
    const size_t rounded = (n + 255) / 256 * 256;
    void* p = std::aligned_alloc(256, rounded);
    if (p) std::memset(p, 0xcd, rounded);  // like uninitialised device memory: not zero
    return p;
}

// The allocation containing p, if any.
bool find_alloc(uintptr_t p, uintptr_t* start, Alloc* a)
{
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    auto it = g_allocs.upper_bound(p);
    if (it == g_allocs.begin()) return false;
    --it;
    if (p >= it->first + it->second.size) return false;
    *start = it->first;
    *a = it->second;
    return true;
}

thread_local CUcontext t_current = nullptr;
const CUcontext PRIMARY = (CUcontext)0x1000;
uintptr_t g_next_handle = 0x2000;
std::mutex g_handle_mutex;

uintptr_t new_handle()
{
    std::lock_guard<std::mutex> lock(g_handle_mutex);
    return g_next_handle += 16;
}

std::mutex g_event_mutex;
std::map<CUevent, double> g_event_times;

double now_ms()
{
    using namespace std::chrono;
    return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace

extern "C" {

CUresult cuInit(unsigned int) { return CUDA_SUCCESS; }
CUresult cuDriverGetVersion(int* v)
{
    *v = 13000;
    return CUDA_SUCCESS;
}
CUresult cuGetErrorName(CUresult e, const char** s)
{
    switch (e) {
    case CUDA_SUCCESS: *s = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; break;
    case CUDA_ERROR_NOT_READY: *s = "CUDA_ERROR_NOT_READY"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *s = "CUDA_ERROR_NOT_SUPPORTED"; break;
    case CUDA_ERROR_LAUNCH_FAILED: *s = "CUDA_ERROR_LAUNCH_FAILED"; break;
    default: *s = "CUDA_ERROR_UNKNOWN"; break;
    }
    return CUDA_SUCCESS;
}
CUresult cuGetErrorString(CUresult e, const char** s)
{
    cuGetErrorName(e, s);
    return CUDA_SUCCESS;
}

// Devices ------------------------------------------------------------------------------

CUresult cuDeviceGetCount(int* n)
{
    *n = 1;
    return CUDA_SUCCESS;
}
CUresult cuDeviceGet(CUdevice* d, int ordinal)
{
    if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
    *d = 0;
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetName(char* name, int len, CUdevice)
{
    std::snprintf(name, len, "devbuf CPU emulator");
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice)
{
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = emu::multiprocessors(); break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: *v = 2; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: *v = 1; break;
    default: *v = 0; break;
    }
    return CUDA_SUCCESS;
}
CUresult cuDeviceTotalMem_v2(size_t* b, CUdevice)
{
    *b = (size_t)16 << 30;
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetUuid_v2(CUuuid* u, CUdevice)
{
    for (int i = 0; i < 16; ++i) u->bytes[i] = (char)(0x40 + i);
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetPCIBusId(char* s, int len, CUdevice)
{
    std::snprintf(s, len, "0000:00:00.0");
    return CUDA_SUCCESS;
}
CUresult cuDeviceCanAccessPeer(int* v, CUdevice, CUdevice)
{
    *v = 0;
    return CUDA_SUCCESS;
}

// Contexts -----------------------------------------------------------------------------

CUresult cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice)
{
    *c = PRIMARY;
    return CUDA_SUCCESS;
}
CUresult cuCtxCreate_v4(CUcontext* c, CUctxCreateParams*, unsigned int, CUdevice)
{
    *c = (CUcontext)new_handle();
    t_current = *c;
    return CUDA_SUCCESS;
}
CUresult cuCtxDestroy_v2(CUcontext) { return CUDA_SUCCESS; }
CUresult cuCtxSetCurrent(CUcontext c)
{
    t_current = c;
    return CUDA_SUCCESS;
}
CUresult cuCtxGetCurrent(CUcontext* c)
{
    *c = t_current;
    return CUDA_SUCCESS;
}
CUresult cuCtxPopCurrent_v2(CUcontext* c)
{
    if (c) *c = t_current;
    t_current = nullptr;
    return CUDA_SUCCESS;
}
CUresult cuCtxSynchronize() { return CUDA_SUCCESS; }
CUresult cuCtxEnablePeerAccess(CUcontext, unsigned int) { return CUDA_SUCCESS; }

// Memory -------------------------------------------------------------------------------

CUresult cuMemGetInfo_v2(size_t* free_b, size_t* total)
{
    *free_b = (size_t)3 << 30;  // small: tests that need more skip themselves
    *total = (size_t)16 << 30;
    return CUDA_SUCCESS;
}

static CUresult alloc_common(void** out, size_t n, bool host)
{
    if (n == 0) return CUDA_ERROR_INVALID_VALUE;
    if (n > ((size_t)4 << 30)) return CUDA_ERROR_OUT_OF_MEMORY;
    void* p = alloc_rounded(n);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    g_allocs[(uintptr_t)p] = Alloc{n, host};
    *out = p;
    return CUDA_SUCCESS;
}
static CUresult free_common(uintptr_t p)
{
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    auto it = g_allocs.find(p);
    if (it == g_allocs.end()) return CUDA_ERROR_INVALID_VALUE;
    if (it->second.registered) return CUDA_ERROR_INVALID_VALUE;
    g_allocs.erase(it);
    std::free((void*)p);
    return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr* d, size_t n)
{
    void* p = nullptr;
    CUresult r = alloc_common(&p, n, false);
    if (r == CUDA_SUCCESS) *d = (CUdeviceptr)p;
    return r;
}
CUresult cuMemFree_v2(CUdeviceptr d) { return free_common((uintptr_t)d); }
CUresult cuMemHostAlloc(void** p, size_t n, unsigned int) { return alloc_common(p, n, true); }
CUresult cuMemFreeHost(void* p) { return free_common((uintptr_t)p); }
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* d, void* p, unsigned int)
{
    *d = (CUdeviceptr)p;
    return CUDA_SUCCESS;
}

// Every byte of [p, p + n) lies in one allocation.
static bool valid_range(uintptr_t p, size_t n)
{
    uintptr_t start;
    Alloc a;
    if (!find_alloc(p, &start, &a)) return false;
    return p + n <= start + a.size;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void* h, size_t n)
{
    if (!valid_range(d, n)) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy((void*)d, h, n);
    return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoH_v2(void* h, CUdeviceptr d, size_t n)
{
    if (!valid_range(d, n)) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(h, (const void*)d, n);
    return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n)
{
    if (!valid_range(d, n) || !valid_range(s, n)) return CUDA_ERROR_INVALID_VALUE;
    std::memmove((void*)d, (const void*)s, n);
    return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream)
{
    return cuMemcpyDtoD_v2(d, s, n);
}
CUresult cuMemcpyPeer(CUdeviceptr d, CUcontext, CUdeviceptr s, CUcontext, size_t n)
{
    return cuMemcpyDtoD_v2(d, s, n);
}
CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n)
{
    if (!valid_range(d, n)) return CUDA_ERROR_INVALID_VALUE;
    std::memset((void*)d, v, n);
    return CUDA_SUCCESS;
}

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr p)
{
    uintptr_t start;
    Alloc a;
    if (!find_alloc((uintptr_t)p, &start, &a)) return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned*)data = a.host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int*)data = 0; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr*)data = start; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t*)data = a.size; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

// Like cuPointerGetAttribute for several attributes, but a pointer the driver does not
// know is no error: its attributes read as zero (as the driver documents).
CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute* attrs, void** data,
                                CUdeviceptr p)
{
    uintptr_t start;
    Alloc a;
    const bool known = find_alloc((uintptr_t)p, &start, &a);
    for (unsigned i = 0; i < n; ++i) {
        switch (attrs[i]) {
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
            *(unsigned*)data[i] = !known ? 0u : a.host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
            break;
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int*)data[i] = known ? 0 : -2; break;
        case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr*)data[i] = known ? start : 0; break;
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t*)data[i] = known ? a.size : 0; break;
        case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext*)data[i] = known ? PRIMARY : nullptr; break;
        case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr*)data[i] = known ? p : 0; break;
        case CU_POINTER_ATTRIBUTE_HOST_POINTER: *(void**)data[i] = known && a.host ? (void*)p : nullptr; break;
        case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned*)data[i] = 0; break;
        case CU_POINTER_ATTRIBUTE_MAPPED: *(unsigned*)data[i] = known ? 1u : 0u; break;
        default: return CUDA_ERROR_INVALID_VALUE;
        }
    }
    return CUDA_SUCCESS;
}

// The caller's host memory, registered: known to the pointer queries, never freed here.
CUresult cuMemHostRegister(void* p, size_t n, unsigned int)
{
    if (p == nullptr || n == 0) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    if (g_allocs.count((uintptr_t)p)) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    g_allocs[(uintptr_t)p] = Alloc{n, true, true};
    return CUDA_SUCCESS;
}
CUresult cuMemHostUnregister(void* p)
{
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end() || !it->second.registered) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    g_allocs.erase(it);
    return CUDA_SUCCESS;
}

// Every stream is synchronous: the asynchronous copies are the synchronous ones.
CUresult cuMemcpyHtoDAsync(CUdeviceptr d, const void* h, size_t n, CUstream)
{
    return cuMemcpyHtoD_v2(d, h, n);
}
CUresult cuMemcpyDtoHAsync(void* h, CUdeviceptr d, size_t n, CUstream)
{
    return cuMemcpyDtoH_v2(h, d, n);
}
CUresult cuMemcpyPeerAsync(CUdeviceptr d, CUcontext, CUdeviceptr s, CUcontext, size_t n, CUstream)
{
    return cuMemcpyDtoD_v2(d, s, n);
}
CUresult cuLaunchHostFunc(CUstream, CUhostFn fn, void* user)
{
    fn(user);
    return CUDA_SUCCESS;
}

// Stream-ordered pools: plain allocations (streams are synchronous).
CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps*)
{
    *pool = (CUmemoryPool)new_handle();
    return CUDA_SUCCESS;
}
CUresult cuMemPoolDestroy(CUmemoryPool) { return CUDA_SUCCESS; }
CUresult cuMemPoolSetAttribute(CUmemoryPool, CUmemPool_attribute, void*) { return CUDA_SUCCESS; }
CUresult cuMemPoolGetAttribute(CUmemoryPool, CUmemPool_attribute attr, void* value)
{
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: *(int*)value = 0; break;
    default: *(cuuint64_t*)value = 0; break;
    }
    return CUDA_SUCCESS;
}
CUresult cuMemPoolTrimTo(CUmemoryPool, size_t) { return CUDA_SUCCESS; }
CUresult cuMemAllocFromPoolAsync(CUdeviceptr* d, size_t n, CUmemoryPool, CUstream)
{
    return cuMemAlloc_v2(d, n);
}
CUresult cuMemFreeAsync(CUdeviceptr d, CUstream) { return cuMemFree_v2(d); }

// No second process can map this emulation's memory.
CUresult cuIpcGetMemHandle(CUipcMemHandle*, CUdeviceptr) { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult cuIpcOpenMemHandle(CUdeviceptr*, CUipcMemHandle, unsigned int) { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult cuIpcCloseMemHandle(CUdeviceptr) { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult cuIpcGetEventHandle(CUipcEventHandle*, CUevent) { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult cuIpcOpenEventHandle(CUevent*, CUipcEventHandle) { return CUDA_ERROR_NOT_SUPPORTED; }

// Modules and launches -----------------------------------------------------------------

CUresult cuModuleLoadData(CUmodule* m, const void*)
{
    *m = (CUmodule)new_handle();
    return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule) { return CUDA_SUCCESS; }
CUresult cuModuleGetFunction(CUfunction* f, CUmodule, const char* name)
{
    const emu::Kernel* k = emu::find_kernel(name);
    if (!k) {
        std::fprintf(stderr, "emulator: no kernel named %s\n", name);
        return CUDA_ERROR_NOT_FOUND;
    }
    *f = (CUfunction)k;
    return CUDA_SUCCESS;
}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* n, CUfunction, int, size_t)
{
    *n = 2;
    return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned, CUstream, void** params, void** extra)
{
    if (extra != nullptr || gx == 0 || bx == 0 || bx * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
    if (!emu::launch((const emu::Kernel*)f, dim3{gx, gy, gz}, dim3{bx, by, bz}, params))
        return CUDA_ERROR_LAUNCH_FAILED;
    return CUDA_SUCCESS;
}

// Streams and events -------------------------------------------------------------------

CUresult cuStreamCreate(CUstream* s, unsigned int)
{
    *s = (CUstream)new_handle();
    return CUDA_SUCCESS;
}
CUresult cuStreamDestroy_v2(CUstream) { return CUDA_SUCCESS; }
CUresult cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }
CUresult cuStreamQuery(CUstream) { return CUDA_SUCCESS; }
CUresult cuStreamWaitEvent(CUstream, CUevent, unsigned int) { return CUDA_SUCCESS; }
CUresult cuEventCreate(CUevent* e, unsigned int)
{
    *e = (CUevent)new_handle();
    return CUDA_SUCCESS;
}
CUresult cuEventRecord(CUevent e, CUstream)
{
    std::lock_guard<std::mutex> lock(g_event_mutex);
    g_event_times[e] = now_ms();
    return CUDA_SUCCESS;
}
CUresult cuEventQuery(CUevent) { return CUDA_SUCCESS; }
CUresult cuEventSynchronize(CUevent) { return CUDA_SUCCESS; }
CUresult cuEventDestroy_v2(CUevent e)
{
    std::lock_guard<std::mutex> lock(g_event_mutex);
    g_event_times.erase(e);
    return CUDA_SUCCESS;
}
CUresult cuEventElapsedTime_v2(float* ms, CUevent a, CUevent b)
{
    std::lock_guard<std::mutex> lock(g_event_mutex);
    auto ia = g_event_times.find(a), ib = g_event_times.find(b);
    if (ia == g_event_times.end() || ib == g_event_times.end()) return CUDA_ERROR_INVALID_HANDLE;
    *ms = (float)(ib->second - ia->second);
    return CUDA_SUCCESS;
}

}  // extern "C"
