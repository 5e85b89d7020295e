#define _GNU_SOURCE
/* fake_cuda.c: libcuda.so.1 for tests/fake_gpu.sh, a GPU that is the CPU.
 *
 * Only the entry points runtime/device_cuda.c takes through cuGetProcAddress exist
 * (by base name, with the ABI of cuda.h for CUDA_VERSION 13000: the prototypes below
 * are checked against the header); anything else is "not found", and every argument
 * the fake cannot honour gets an error code, never a guess.
 *
 *   device     one, "trainc fake GPU (CPU emulation)", compute capability 9.0, 4 SMs
 *              (TRAINC_FAKE_GPU_SMS to change: grids follow it, results must not);
 *              compute capability 9.0 unless TRAINC_FAKE_CC="MAJOR.MINOR" says another
 *              (8.0: an A100, without FP8; 8.9: an L4, with it; TRAINC_FAKE_GPU_CC=75,
 *              major x 10 + minor, is the older spelling of 7.5);
 *              TRAINC_FAKE_GPU_COUNT=N shows N such devices, of which a process may
 *              use one (ranks of one node each take their own, as with NCCL),
 *              16 GiB (TRAINC_FAKE_GPU_MEM_MB to change), checked by cuMemAlloc;
 *              TRAINC_FAKE_GPU_OOM_BYTES=N: a cuMemAlloc of exactly N bytes is out of
 *              memory (so that a test reaches what one allocation's failure does)
 *   memory     device pointer = host address. Each allocation is its own mapping with
 *              an inaccessible page right after its end (an overrun faults), filled with
 *              0xff bytes (NaN as floats) as a GPU's memory is not zeroed. Copies and
 *              memsets must hit device memory on the device side and not on the host
 *              side; kernel pointer arguments must be NULL or device memory.
 *              The virtual memory calls (cuMemAddressReserve, cuMemCreate, cuMemMap,
 *              cuMemSetAccess, cuMemUnmap; granularity 2 MB, TRAINC_FAKE_GPU_GRAN_KB to
 *              change) map memfds into an inaccessible range: see their section.
 *   context    the primary context, current per thread (cuCtxSetCurrent), as on a GPU:
 *              a call from a thread without it fails with CUDA_ERROR_INVALID_CONTEXT
 *   streams    queues, run in one of three legal orders (TRAINC_FAKE_GPU_SCHEDULE),
 *              queried with cuStreamQuery (runs what can run; CUDA_ERROR_NOT_READY when
 *              a collective of the fake NCCL waits for the other ranks):
 *                lazy   (default) as late as the API allows: a stream runs when the
 *                       host waits for it (cuStreamSynchronize, cuEventSynchronize,
 *                       cuMemFree, a synchronous copy on the legacy stream for the
 *                       blocking streams), and another stream's queued wait pulls in
 *                       the work it waits for; a result the host reads too early is
 *                       stale
 *                eager  kernels, memsets and GEMMs at once (with what precedes them in
 *                       their stream), copies as late as allowed: a kernel that does
 *                       not wait for its input's copy reads stale data, a host buffer
 *                       reused before its copy ran is copied with the new contents
 *                sync   every operation at once
 *              Copies follow CUDA's rules: from pageable host memory the data is taken
 *              at the call (staging), from page-locked memory when the copy runs; to
 *              pageable memory the copy waits for its stream; a device-to-device copy
 *              reads and writes when it runs.
 *   modules    the fake NVRTC's images (FAKE_CUBIN_MAGIC + a shared object, loaded
 *              with dlopen from a memfd), where a real cubin of their architecture
 *              would run: sm_XY on compute capability X.Z with Z >= Y, sm_XYa on X.Y
 *              only, else CUDA_ERROR_NO_BINARY_FOR_GPU; a real cubin is refused with
 *              CUDA_ERROR_NO_BINARY_FOR_GPU and PTX with CUDA_ERROR_JIT_COMPILER_NOT_FOUND,
 *              so a trainer falls back to the (fake) NVRTC or its kernel cache
 *   launches   arguments copied at the call (as the driver does), the kernel run later
 *              by tests/gpu/emu/ (one fiber per thread, blocks in order); blockDim.z
 *              must be 1 and blocks whole warps (the emulator's limits); dynamic shared
 *              memory up to the kernel's cuFuncSetAttribute limit (48 KiB by default,
 *              227 KiB at most)
 *   tensor maps cuTensorMapEncodeTiled keeps its arguments in the map for the
 *              emulator's TMA copies (tests/gpu/emu/emu_tmap.h)
 *   graphs     stream capture (cuStreamBeginCapture, relaxed mode only) records the
 *              launches, memsets and cuBLASLt calls queued on the stream instead of
 *              queueing them; anything else on a capturing stream (copies, events, waits,
 *              a host wait on it, NCCL) is refused and invalidates the capture, as the
 *              driver's rules say. cuGraphInstantiateWithFlags + cuGraphLaunch queue the
 *              recorded operations as one, run in their order.
 *              Once a capture is invalidated, work queued into it fails with
 *              CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and its end says so.
 *              TRAINC_FAKE_GPU_GRAPH=refuse: cuStreamBeginCapture says not supported;
 *              =invalidate: every capture is invalidated as it begins (every launch,
 *              memset and cuBLASLt call in it fails)
 *
 * TRAINC_FAKE_GPU_TRACE=1 prints allocations, module loads, launches, kernel runs and
 * the host's waits (cuStreamSynchronize, cuEventSynchronize; streams numbered 1, 2, ...
 * as created),
 * TRAINC_FAKE_GPU_PROFILE=1 the time spent in each kernel at exit; a refused call always
 * says why on stderr. */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "fake_gpu.h"
#include "../gpu/emu/emu_tmap.h"

#define EXPORT __attribute__((visibility("default")))

static pthread_mutex_t lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static int initialized, trace, profile;
static int graph_mode;   /* TRAINC_FAKE_GPU_GRAPH: 0, 1 refuse, 2 invalidate */
enum { LAZY, EAGER, SYNC };
static int schedule = LAZY;
static const char *const schedule_names[] = {"lazy", "eager", "sync"};
static void prof_print(void);

static CUresult refuse(CUresult r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fake GPU: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return r;
}

static void tr(const char *fmt, ...)
{
    if (!trace)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fake GPU: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

/* ---- the device and its context ---------------------------------------------------- */

#define DEV_NAME "trainc fake GPU (CPU emulation)"
static int sms = 4, n_devices = 1, ctx_dev = -1;
static int cc = 90;   /* compute capability x 10 (TRAINC_FAKE_CC=7.5: a Turing GPU) */   /* ctx_dev: the primary context's */
static size_t total_mem = (size_t)16 << 30, used_mem;
static size_t oom_bytes;   /* TRAINC_FAKE_GPU_OOM_BYTES (0: none) */
static size_t gran = (size_t)2 << 20;   /* cuMemGetAllocationGranularity */
static size_t page_size(void);

struct CUctx_st {
    int refs;
};
static struct CUctx_st primary;
static __thread CUcontext current;

/* the calls that need an initialized driver and a current context */
#define NEED_CTX(fn)                                                                           \
    do {                                                                                       \
        if (!initialized)                                                                      \
            return refuse(CUDA_ERROR_NOT_INITIALIZED, "%s before cuInit", fn);                 \
        if (current != &primary || primary.refs <= 0)                                          \
            return refuse(CUDA_ERROR_INVALID_CONTEXT, "%s: no current context on this thread", \
                          fn);                                                                 \
    } while (0)

CUresult cuInit(unsigned int flags)
{
    if (flags != 0)
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuInit(%u): flags must be 0", flags);
    const char *s = getenv("TRAINC_FAKE_GPU_TRACE");
    trace = s && *s && strcmp(s, "0") != 0;
    s = getenv("TRAINC_FAKE_GPU_SCHEDULE");
    if (s && *s) {
        int k = 0;
        while (k < 3 && strcmp(s, schedule_names[k]) != 0)
            k++;
        if (k == 3)
            return refuse(CUDA_ERROR_INVALID_VALUE, "TRAINC_FAKE_GPU_SCHEDULE=%s: lazy, eager or sync", s);
        schedule = k;
    }
    s = getenv("TRAINC_FAKE_GPU_GRAPH");
    graph_mode = !s ? 0 : strcmp(s, "refuse") == 0 ? 1 : strcmp(s, "invalidate") == 0 ? 2 : 0;
    s = getenv("TRAINC_FAKE_GPU_PROFILE");
    profile = s && *s && strcmp(s, "0") != 0;
    static int at;
    if (profile && !at++)
        atexit(prof_print);
    s = getenv("TRAINC_FAKE_GPU_MEM_MB");
    if (s && *s)
        total_mem = (size_t)strtoull(s, NULL, 10) << 20;
    s = getenv("TRAINC_FAKE_GPU_OOM_BYTES");
    oom_bytes = s && *s ? (size_t)strtoull(s, NULL, 10) : 0;
    s = getenv("TRAINC_FAKE_GPU_SMS");
    if (s && *s && atoi(s) > 0)
        sms = atoi(s);
    s = getenv("TRAINC_FAKE_GPU_GRAN_KB");
    if (s && *s && atoi(s) > 0)
        gran = (size_t)atoi(s) << 10;
    if (gran % page_size() != 0)
        return refuse(CUDA_ERROR_INVALID_VALUE, "TRAINC_FAKE_GPU_GRAN_KB: not a multiple of the page size");
    s = getenv("TRAINC_FAKE_GPU_COUNT");
    if (s && *s && atoi(s) > 0)
        n_devices = atoi(s);
    s = getenv("TRAINC_FAKE_GPU_CC");
    if (s && *s && atoi(s) >= 10)
        cc = atoi(s);
    s = getenv("TRAINC_FAKE_CC");
    if (s && *s) {
        int major = 0, minor = 0, end = 0;
        if (sscanf(s, "%d.%d%n", &major, &minor, &end) != 2 || s[end] || major < 1 || major > 99 ||
            minor < 0 || minor > 9)
            return refuse(CUDA_ERROR_INVALID_VALUE, "TRAINC_FAKE_CC=%s: MAJOR.MINOR, as 8.9", s);
        cc = major * 10 + minor;
    }
    initialized = 1;
    tr("cuInit: %s, %zu MiB, %s streams", DEV_NAME, total_mem >> 20,
       schedule_names[schedule]);
    return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *v)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    /* TRAINC_FAKE_GPU_DRIVER=12080: a driver for an older CUDA (its version only) */
    const char *s = getenv("TRAINC_FAKE_GPU_DRIVER");
    *v = s ? atoi(s) : CUDA_VERSION;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *n)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    *n = n_devices;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= n_devices)
        return refuse(CUDA_ERROR_INVALID_DEVICE, "cuDeviceGet(%d): there %s %d device%s", ordinal,
                      n_devices == 1 ? "is" : "are", n_devices, n_devices == 1 ? "" : "s");
    *d = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    if (d < 0 || d >= n_devices)
        return CUDA_ERROR_INVALID_DEVICE;
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = sms; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = cc / 10; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = cc % 10; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *v = 1; break;
    default:
        return refuse(CUDA_ERROR_NOT_SUPPORTED, "cuDeviceGetAttribute: attribute %d not emulated", (int)a);
    }
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (d < 0 || d >= n_devices)
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", DEV_NAME);
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(size_t *bytes, CUdevice d)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (d < 0 || d >= n_devices)
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = total_mem;
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    if (d < 0 || d >= n_devices)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    if (primary.refs > 0 && ctx_dev != d) {
        pthread_mutex_unlock(&lock);
        return refuse(CUDA_ERROR_NOT_SUPPORTED, "cuDevicePrimaryCtxRetain(%d): this fake gives a "
                      "process one device (it holds %d)", d, ctx_dev);
    }
    ctx_dev = d;
    primary.refs++;
    pthread_mutex_unlock(&lock);
    *c = &primary;
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice d)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (d < 0 || d >= n_devices)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    int ok = primary.refs > 0;
    if (ok)
        primary.refs--;
    pthread_mutex_unlock(&lock);
    return ok ? CUDA_SUCCESS : refuse(CUDA_ERROR_INVALID_CONTEXT, "cuDevicePrimaryCtxRelease: not retained");
}

CUresult cuCtxSetCurrent(CUcontext c)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (c && (c != &primary || primary.refs <= 0))
        return refuse(CUDA_ERROR_INVALID_CONTEXT, "cuCtxSetCurrent: not a live context");
    current = c;
    return CUDA_SUCCESS;
}

/* ---- memory ---------------------------------------------------------------------------- */

typedef struct Block {
    uintptr_t p;
    size_t n;                  /* as asked */
    void *map;                 /* device: the mapping (guard page included); host: NULL */
    size_t map_len;
    int kind;                  /* DEVICE, PINNED (cuMemAllocHost), REGISTERED, RESERVED
                                  (cuMemAddressReserve: device addresses, mapped or not) */
    struct Block *next;
} Block;
enum { DEVICE, PINNED, REGISTERED, RESERVED };
#define IS_DEV(b) ((b)->kind == DEVICE || (b)->kind == RESERVED)
static Block *blocks;

/* [p, p + n) inside one device allocation (n may be 0: p inside or at the end) */
static int dev_range(uintptr_t p, size_t n)
{
    for (Block *b = blocks; b; b = b->next)
        if (IS_DEV(b) && p >= b->p && p <= b->p + b->n && n <= b->p + b->n - p)
            return 1;
    return 0;
}

static int host_overlaps_device(uintptr_t p, size_t n)
{
    for (Block *b = blocks; b; b = b->next)
        if (IS_DEV(b) && p < b->p + b->n && b->p < p + n)
            return 1;
    return 0;
}

static int page_locked(uintptr_t p, size_t n)
{
    for (Block *b = blocks; b; b = b->next)
        if ((b->kind == PINNED || b->kind == REGISTERED) && p >= b->p && p + n <= b->p + b->n)
            return 1;
    return 0;
}

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

static void drain_all(void);

CUresult cuMemAlloc(CUdeviceptr *dp, size_t n)
{
    NEED_CTX("cuMemAlloc");
    if (!dp || n == 0)
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuMemAlloc: %zu bytes", n);
    pthread_mutex_lock(&lock);
    if (n > total_mem - used_mem || n == oom_bytes) {
        pthread_mutex_unlock(&lock);
        return refuse(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc: %zu bytes, %zu of %zu free%s", n,
                      total_mem - used_mem, total_mem,
                      n == oom_bytes ? " (TRAINC_FAKE_GPU_OOM_BYTES)" : "");
    }
    size_t pg = page_size(), len = (n + 255) & ~(size_t)255;
    size_t map_len = ((len + pg - 1) & ~(pg - 1)) + pg;
    void *m = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        pthread_mutex_unlock(&lock);
        return refuse(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc: mmap of %zu bytes failed", map_len);
    }
    mprotect((char *)m + map_len - pg, pg, PROT_NONE);
    Block *b = calloc(1, sizeof *b);
    b->map = m;
    b->map_len = map_len;
    b->p = (uintptr_t)m + map_len - pg - len;   /* 256-aligned; the guard right after */
    b->n = n;
    b->kind = DEVICE;
    b->next = blocks;
    blocks = b;
    used_mem += n;
    memset((void *)b->p, 0xff, n);
    *dp = (CUdeviceptr)b->p;
    pthread_mutex_unlock(&lock);
    tr("cuMemAlloc: %zu bytes at %#lx", n, (unsigned long)b->p);
    return CUDA_SUCCESS;
}

static CUresult free_block(uintptr_t p, int kind, const char *fn)
{
    pthread_mutex_lock(&lock);
    Block **pp = &blocks;
    while (*pp && !((*pp)->kind == kind && (*pp)->p == p))
        pp = &(*pp)->next;
    if (!*pp) {
        pthread_mutex_unlock(&lock);
        return refuse(kind == REGISTERED ? CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED : CUDA_ERROR_INVALID_VALUE,
                      "%s(%#lx): not the start of one", fn, (unsigned long)p);
    }
    drain_all();               /* these calls synchronize the device */
    Block *b = *pp;
    *pp = b->next;
    if (kind == DEVICE) {
        used_mem -= b->n;
        munmap(b->map, b->map_len);
    } else if (kind == PINNED) {
        free((void *)b->p);
    }
    free(b);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuMemFree(CUdeviceptr p)
{
    NEED_CTX("cuMemFree");
    return free_block((uintptr_t)p, DEVICE, "cuMemFree");
}

CUresult cuMemGetInfo(size_t *free_b, size_t *total)
{
    NEED_CTX("cuMemGetInfo");
    if (!free_b || !total)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    *free_b = total_mem - used_mem;
    *total = total_mem;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuMemAllocHost(void **pp, size_t n)
{
    NEED_CTX("cuMemAllocHost");
    if (!pp || n == 0)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = NULL;
    if (posix_memalign(&p, 4096, n) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(p, 0xff, n);
    pthread_mutex_lock(&lock);
    Block *b = calloc(1, sizeof *b);
    *b = (Block){.p = (uintptr_t)p, .n = n, .kind = PINNED, .next = blocks};
    blocks = b;
    pthread_mutex_unlock(&lock);
    *pp = p;
    return CUDA_SUCCESS;
}

CUresult cuMemHostRegister(void *p, size_t n, unsigned int flags)
{
    NEED_CTX("cuMemHostRegister");
    if (!p || n == 0)
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuMemHostRegister(%p, %zu)", p, n);
    if (flags != 0)
        return refuse(CUDA_ERROR_NOT_SUPPORTED, "cuMemHostRegister: flags %#x not emulated", flags);
    uintptr_t a = (uintptr_t)p;
    pthread_mutex_lock(&lock);
    if (host_overlaps_device(a, n)) {
        pthread_mutex_unlock(&lock);
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuMemHostRegister: %p is device memory", p);
    }
    for (Block *b = blocks; b; b = b->next)
        if ((b->kind == REGISTERED || b->kind == PINNED) && a < b->p + b->n && b->p < a + n) {
            pthread_mutex_unlock(&lock);
            return refuse(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
                          "cuMemHostRegister(%p, %zu): overlaps page-locked [%#lx, +%zu)", p, n,
                          (unsigned long)b->p, b->n);
        }
    Block *b = calloc(1, sizeof *b);
    *b = (Block){.p = a, .n = n, .kind = REGISTERED, .next = blocks};
    blocks = b;
    pthread_mutex_unlock(&lock);
    tr("cuMemHostRegister: %p, %zu bytes", p, n);
    return CUDA_SUCCESS;
}

CUresult cuMemHostUnregister(void *p)
{
    NEED_CTX("cuMemHostUnregister");
    return free_block((uintptr_t)p, REGISTERED, "cuMemHostUnregister");
}

/* ---- virtual memory management (zero2's gradient region) ---------------------------------
 *
 * cuMemAddressReserve: an inaccessible mapping (a device address range, a kernel may be
 * handed any address in it); cuMemCreate: a memfd of the granularity's multiple, filled
 * with 0xff bytes (and counted in the device's memory); cuMemMap maps it there,
 * inaccessible until cuMemSetAccess; cuMemUnmap makes the range inaccessible again at
 * once, without waiting for queued work: a kernel that runs later and touches it
 * faults, as it would on a GPU (an illegal address). The granularity is 2 MB, as on
 * current GPUs (TRAINC_FAKE_GPU_GRAN_KB to change). */
typedef struct Phys {
    int fd;
    size_t n;
} Phys;
typedef struct Mapping {
    uintptr_t p;
    size_t n;
    Phys *ph;
    struct Mapping *next;
} Mapping;
static Mapping *mappings;

static CUresult check_prop(const CUmemAllocationProp *prop, const char *fn)
{
    if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id != ctx_dev ||
        prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE)
        return refuse(CUDA_ERROR_INVALID_VALUE, "%s: only pinned device memory of the context's "
                      "device, without export handles, is emulated", fn);
    return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option)
{
    NEED_CTX("cuMemGetAllocationGranularity");
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_prop(prop, "cuMemGetAllocationGranularity");
    if (r != CUDA_SUCCESS)
        return r;
    *g = gran;
    return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags)
{
    NEED_CTX("cuMemAddressReserve");
    if (!ptr || size == 0 || size % gran != 0 || (alignment != 0 && alignment != gran) ||
        addr != 0 || flags != 0)
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuMemAddressReserve(%zu, %zu, %#llx, %#llx): a "
                      "multiple of the granularity %zu, anywhere, no flags", size, alignment,
                      (unsigned long long)addr, flags, gran);
    /* room to align the start to the granularity, and a guard after the end */
    size_t len = size + gran + page_size();
    void *m = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return refuse(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAddressReserve: %zu bytes", size);
    pthread_mutex_lock(&lock);
    Block *b = calloc(1, sizeof *b);
    b->map = m;
    b->map_len = len;
    b->p = ((uintptr_t)m + gran - 1) / gran * gran;
    b->n = size;
    b->kind = RESERVED;
    b->next = blocks;
    blocks = b;
    *ptr = (CUdeviceptr)b->p;
    pthread_mutex_unlock(&lock);
    tr("cuMemAddressReserve: %zu bytes at %#lx", size, (unsigned long)b->p);
    return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags)
{
    NEED_CTX("cuMemCreate");
    CUresult r = check_prop(prop, "cuMemCreate");
    if (r != CUDA_SUCCESS)
        return r;
    if (!h || size == 0 || size % gran != 0 || flags != 0)
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuMemCreate(%zu): a multiple of the granularity "
                      "%zu, no flags", size, gran);
    pthread_mutex_lock(&lock);
    if (size > total_mem - used_mem) {
        pthread_mutex_unlock(&lock);
        return refuse(CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate: %zu bytes, %zu of %zu free", size,
                      total_mem - used_mem, total_mem);
    }
    int fd = memfd_create("trainc-fake-gpu-chunk", MFD_CLOEXEC);
    void *m = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, (off_t)size) == 0)
        m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        if (fd >= 0)
            close(fd);
        pthread_mutex_unlock(&lock);
        return refuse(CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate: a memfd of %zu bytes failed", size);
    }
    memset(m, 0xff, size);    /* not zeroed, as on a GPU */
    munmap(m, size);
    Phys *ph = calloc(1, sizeof *ph);
    ph->fd = fd;
    ph->n = size;
    used_mem += size;
    *h = (CUmemGenericAllocationHandle)(uintptr_t)ph;
    pthread_mutex_unlock(&lock);
    tr("cuMemCreate: %zu bytes", size);
    return CUDA_SUCCESS;
}

static Block *reservation_of(uintptr_t p, size_t n)
{
    for (Block *b = blocks; b; b = b->next)
        if (b->kind == RESERVED && p >= b->p && p + n <= b->p + b->n)
            return b;
    return NULL;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                  unsigned long long flags)
{
    NEED_CTX("cuMemMap");
    Phys *ph = (Phys *)(uintptr_t)h;
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_SUCCESS;
    if (!ph || offset != 0 || flags != 0 || size != ph->n || ptr % gran != 0 ||
        !reservation_of((uintptr_t)ptr, size))
        r = refuse(CUDA_ERROR_INVALID_VALUE, "cuMemMap(%#lx, %zu): a whole allocation at offset "
                   "0, aligned, inside a reservation", (unsigned long)ptr, size);
    for (Mapping *m = mappings; r == CUDA_SUCCESS && m; m = m->next)
        if (m->p < ptr + size && ptr < m->p + m->n)
            r = refuse(CUDA_ERROR_INVALID_VALUE, "cuMemMap(%#lx, %zu): overlaps a mapping",
                       (unsigned long)ptr, size);
    if (r == CUDA_SUCCESS &&
        mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, ph->fd, 0) == MAP_FAILED)
        r = refuse(CUDA_ERROR_OUT_OF_MEMORY, "cuMemMap: mmap failed");
    if (r == CUDA_SUCCESS) {
        Mapping *m = calloc(1, sizeof *m);
        *m = (Mapping){.p = (uintptr_t)ptr, .n = size, .ph = ph, .next = mappings};
        mappings = m;
    }
    pthread_mutex_unlock(&lock);
    if (r == CUDA_SUCCESS)
        tr("cuMemMap: %zu bytes at %#lx", size, (unsigned long)ptr);
    return r;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    NEED_CTX("cuMemSetAccess");
    if (!desc || count != 1 || desc->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        desc->location.id != ctx_dev || desc->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuMemSetAccess: read-write for the context's "
                      "device only is emulated");
    pthread_mutex_lock(&lock);
    size_t covered = 0;        /* the range must be mapped throughout */
    for (Mapping *m = mappings; m; m = m->next)
        if (m->p >= ptr && m->p + m->n <= ptr + size)
            covered += m->n;
    CUresult r = CUDA_SUCCESS;
    if (size == 0 || covered != size)
        r = refuse(CUDA_ERROR_INVALID_VALUE, "cuMemSetAccess(%#lx, %zu): not mapped throughout",
                   (unsigned long)ptr, size);
    else
        mprotect((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE);
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    NEED_CTX("cuMemUnmap");
    pthread_mutex_lock(&lock);
    Mapping **pp = &mappings;
    while (*pp && !((*pp)->p == ptr && (*pp)->n == size))
        pp = &(*pp)->next;
    if (!*pp) {
        pthread_mutex_unlock(&lock);
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuMemUnmap(%#lx, %zu): not the whole range of a "
                      "mapping", (unsigned long)ptr, size);
    }
    Mapping *m = *pp;
    *pp = m->next;
    free(m);
    mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
         -1, 0);
    pthread_mutex_unlock(&lock);
    tr("cuMemUnmap: %zu bytes at %#lx", size, (unsigned long)ptr);
    return CUDA_SUCCESS;
}

/* ---- streams, events and the operations queued on them ----------------------------------- */

typedef struct Module Module;
typedef struct Op {
    enum { OP_COPY, OP_SET8, OP_SET16, OP_SET32, OP_LAUNCH, OP_HOST, OP_POLL, OP_WAIT, OP_GRAPH } kind;
    void *dst;
    const void *src;
    void *owned;               /* a staged copy of pageable memory, freed after */
    size_t n;
    unsigned val;
    /* launch */
    Module *mod;
    int k;
    unsigned g[3], b[2], smem;
    void *args[64];
    char *argbuf;
    /* host function (the fake cuBLASLt), or one polled until it returns 1 (the fake
     * NCCL's collectives, which wait for the other ranks) */
    void (*fn)(void *);
    int (*poll)(void *);
    void *arg;
    /* wait */
    struct CUstream_st *on;
    uint64_t seq;
    /* a graph's launch: its operations, run in order */
    struct CUgraph_st *graph;
    struct Op *next;
} Op;

/* A captured graph: its operations (freed with the last reference: the graph, its
 * instantiations, their queued launches) */
struct CUgraph_st {
    Op *head, *tail;
    int n, refs, id;
};
struct CUgraphExec_st {
    struct CUgraph_st *g;
};
static int graphs_made;

struct CUstream_st {
    unsigned flags;            /* CU_STREAM_NON_BLOCKING or 0 (blocking) */
    int live;
    int id;                    /* 1, 2, ... in the order of creation (the trace's names) */
    Op *head, *tail;
    uint64_t enq, done;        /* operations queued and run so far */
    struct CUgraph_st *cap;    /* capturing into this graph (cuStreamBeginCapture) */
    int cap_bad;               /* the capture was invalidated */
    struct CUstream_st *next;
};
static struct CUstream_st legacy = {.live = 1};
static struct CUstream_st *streams;
static int streams_made;

struct CUevent_st {
    struct CUstream_st *s; /* NULL: never recorded */
    uint64_t seq;
    int timing;            /* created without CU_EVENT_DISABLE_TIMING: a record queues a
                              stamp of the host clock (the fake GPU's time) */
    double t;
};

static CUresult stream_of(CUstream h, struct CUstream_st **s, const char *fn)
{
    if (h == NULL || h == CU_STREAM_LEGACY) {
        *s = &legacy;
        return CUDA_SUCCESS;
    }
    if (h == CU_STREAM_PER_THREAD)
        return refuse(CUDA_ERROR_NOT_SUPPORTED, "%s: the per-thread default stream is not emulated", fn);
    for (struct CUstream_st *t = streams; t; t = t->next)
        if (t == h && t->live) {
            *s = t;
            return CUDA_SUCCESS;
        }
    return refuse(CUDA_ERROR_INVALID_HANDLE, "%s: %p is not a stream", fn, (void *)h);
}

struct Module {
    void *so;
    fake_kernels_fn count;
    fake_kernel_name_fn name;
    fake_pack_fn pack;
    fake_launch_fn launch;
};

static int run_until(struct CUstream_st *s, uint64_t seq, int block);

/* TRAINC_FAKE_GPU_PROFILE=1: seconds and launches per kernel, printed at exit */
static struct {
    const char *name;
    double s;
    long n;
} prof[256];
static int n_prof;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void prof_add(const char *name, double s)
{
    int i = 0;
    while (i < n_prof && strcmp(prof[i].name, name) != 0)
        i++;
    if (i == n_prof) {
        if (n_prof == 256)
            return;
        prof[n_prof++].name = strdup(name);
    }
    prof[i].s += s;
    prof[i].n++;
}

static void prof_print(void)
{
    double all = 0;
    for (int i = 0; i < n_prof; i++)
        all += prof[i].s;
    fprintf(stderr, "fake GPU: %.2f s in kernels\n", all);
    for (int i = 0; i < n_prof; i++)
        fprintf(stderr, "  %-32s %6ld launches %8.3f s\n", prof[i].name, prof[i].n, prof[i].s);
}

/* Runs o; 0 when it cannot complete yet (a poll, or a wait on one) and block is 0: o
 * then stays at its stream's head. With block, a poll is retried until it completes,
 * as a GPU's stream waits for a collective. */
static int run_op(Op *o, int block)
{
    switch (o->kind) {
    case OP_COPY: memcpy(o->dst, o->src, o->n); break;
    case OP_SET8: memset(o->dst, (int)o->val, o->n); break;
    case OP_SET16:
        for (size_t i = 0; i < o->n; i++) {
            unsigned short v = (unsigned short)o->val;
            memcpy((char *)o->dst + 2 * i, &v, 2);
        }
        break;
    case OP_SET32:
        for (size_t i = 0; i < o->n; i++)
            memcpy((char *)o->dst + 4 * i, &o->val, 4);
        break;
    case OP_LAUNCH: {
        const char *name = o->mod->name(o->k);
        tr("run %s grid %u,%u,%u block %u,%u", name, o->g[0], o->g[1], o->g[2], o->b[0], o->b[1]);
        double t = profile ? now() : 0;
        if (o->mod->launch(name, o->g[0], o->g[1], o->g[2], o->b[0], o->b[1], o->smem, o->args) != 0) {
            fprintf(stderr, "fake GPU: kernel %s vanished from its module\n", name);
            abort();
        }
        if (profile)
            prof_add(name, now() - t);
        break;
    }
    case OP_HOST: o->fn(o->arg); break;
    case OP_POLL:
        while (!o->poll(o->arg)) {
            if (!block)
                return 0;
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
        break;
    case OP_WAIT:
        if (!run_until(o->on, o->seq, block))
            return 0;
        break;
    case OP_GRAPH:
        tr("run graph %d (%d operations)", o->graph->id, o->graph->n);
        for (Op *g = o->graph->head; g; g = g->next)
            run_op(g, 1);
        break;
    }
    return 1;
}

static void free_op(Op *o);
static void graph_unref(struct CUgraph_st *g)
{
    if (--g->refs > 0)
        return;
    for (Op *o = g->head, *next; o; o = next) {
        next = o->next;
        free_op(o);
    }
    free(g);
}

static void free_op(Op *o)
{
    if (o->kind == OP_GRAPH)
        graph_unref(o->graph);
    free(o->owned);
    free(o->argbuf);
    free(o);
}

/* Runs s's operations up to number seq; 0 when one of them cannot complete yet (only
 * without block). */
static int run_until(struct CUstream_st *s, uint64_t seq, int block)
{
    while (s->done < seq) {
        Op *o = s->head;
        if (!run_op(o, block))
            return 0;
        s->head = o->next;
        if (!s->head)
            s->tail = NULL;
        s->done++;
        free_op(o);
    }
    return 1;
}

static void drain(struct CUstream_st *s) { run_until(s, s->enq, 1); }

static void drain_all(void)
{
    drain(&legacy);
    for (struct CUstream_st *t = streams; t; t = t->next)
        drain(t);
}

static void push(struct CUstream_st *s, Op *o)
{
    o->next = NULL;
    if (s->tail)
        s->tail->next = o;
    else
        s->head = o;
    s->tail = o;
    s->enq++;
}

/* Queue o on s. The legacy stream waits for the blocking streams and they for it. */
static void enqueue(struct CUstream_st *s, Op *o)
{
    if (s->cap) {              /* recorded, not run (capture_check let it in) */
        o->next = NULL;
        if (s->cap->tail)
            s->cap->tail->next = o;
        else
            s->cap->head = o;
        s->cap->tail = o;
        s->cap->n++;
        return;
    }
    if (s == &legacy) {
        for (struct CUstream_st *t = streams; t; t = t->next)
            if (t->live && !(t->flags & CU_STREAM_NON_BLOCKING) && t->enq > t->done) {
                Op *w = calloc(1, sizeof *w);
                *w = (Op){.kind = OP_WAIT, .on = t, .seq = t->enq};
                push(s, w);
            }
    } else if (!(s->flags & CU_STREAM_NON_BLOCKING) && legacy.enq > legacy.done) {
        Op *w = calloc(1, sizeof *w);
        *w = (Op){.kind = OP_WAIT, .on = &legacy, .seq = legacy.enq};
        push(s, w);
    }
    push(s, o);
    if (schedule == SYNC || (schedule == EAGER && o->kind != OP_COPY && o->kind != OP_WAIT))
        drain(s);
}

/* An operation a capture does not take, on stream s: refused, and the capture is
 * invalidated (its end says so), as the driver does. */
static CUresult capture_check(struct CUstream_st *s, const char *fn)
{
    if (!s->cap)
        return CUDA_SUCCESS;
    s->cap_bad = 1;
    return refuse(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "%s on stream %d while it is captured into a graph",
                  fn, s->id);
}

/* Work queued on a stream whose capture was invalidated fails, as the driver's does. */
static CUresult capture_valid(struct CUstream_st *s)
{
    return s->cap && s->cap_bad ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
}

/* What a host wait on s covers: s, and for the legacy stream the blocking streams. */
static void host_wait(struct CUstream_st *s)
{
    if (s == &legacy)
        for (struct CUstream_st *t = streams; t; t = t->next)
            if (!(t->flags & CU_STREAM_NON_BLOCKING))
                drain(t);
    drain(s);
}

CUresult cuStreamCreate(CUstream *ph, unsigned int flags)
{
    NEED_CTX("cuStreamCreate");
    if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuStreamCreate: flags %#x", flags);
    struct CUstream_st *s = calloc(1, sizeof *s);
    s->flags = flags;
    s->live = 1;
    pthread_mutex_lock(&lock);
    s->next = streams;
    s->id = ++streams_made;
    streams = s;
    pthread_mutex_unlock(&lock);
    *ph = s;
    return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream h)
{
    NEED_CTX("cuStreamSynchronize");
    pthread_mutex_lock(&lock);
    struct CUstream_st *s;
    CUresult r = stream_of(h, &s, "cuStreamSynchronize");
    if (r == CUDA_SUCCESS)
        r = capture_check(s, "cuStreamSynchronize");
    if (r == CUDA_SUCCESS) {
        tr("host waits for stream %d (cuStreamSynchronize)", s->id);
        host_wait(s);
    }
    pthread_mutex_unlock(&lock);
    return r;
}

/* Runs what can run now; CUDA_ERROR_NOT_READY while an operation waits (a collective). */
CUresult cuStreamQuery(CUstream h)
{
    NEED_CTX("cuStreamQuery");
    pthread_mutex_lock(&lock);
    struct CUstream_st *s;
    CUresult r = stream_of(h, &s, "cuStreamQuery");
    if (r == CUDA_SUCCESS)
        r = capture_check(s, "cuStreamQuery");
    if (r == CUDA_SUCCESS && s == &legacy)
        r = refuse(CUDA_ERROR_NOT_SUPPORTED, "cuStreamQuery: the legacy stream is not emulated");
    if (r == CUDA_SUCCESS && !run_until(s, s->enq, 0))
        r = CUDA_ERROR_NOT_READY;
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuEventCreate(CUevent *pe, unsigned int flags)
{
    NEED_CTX("cuEventCreate");
    if (!pe || (flags & ~(unsigned)(CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC)))
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuEventCreate: flags %#x", flags);
    *pe = calloc(1, sizeof **pe);
    (*pe)->timing = !(flags & CU_EVENT_DISABLE_TIMING);
    return CUDA_SUCCESS;
}

static void stamp(void *ev) { ((struct CUevent_st *)ev)->t = now(); }

CUresult cuEventRecord(CUevent e, CUstream h)
{
    NEED_CTX("cuEventRecord");
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    struct CUstream_st *s;
    CUresult r = stream_of(h, &s, "cuEventRecord");
    if (r == CUDA_SUCCESS)
        r = capture_check(s, "cuEventRecord");
    if (r == CUDA_SUCCESS && e->timing) {
        Op *o = calloc(1, sizeof *o);
        *o = (Op){.kind = OP_HOST, .fn = stamp, .arg = e};
        enqueue(s, o);
    }
    if (r == CUDA_SUCCESS) {
        e->s = s;
        e->seq = s->enq;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuEventSynchronize(CUevent e)
{
    NEED_CTX("cuEventSynchronize");
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    if (e->s) {
        tr("host waits for stream %d (cuEventSynchronize)", e->s->id);
        run_until(e->s, e->seq, 1);
    }
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

/* Runs what can run up to the event; CUDA_ERROR_NOT_READY if that is not all of it. */
CUresult cuEventQuery(CUevent e)
{
    NEED_CTX("cuEventQuery");
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_SUCCESS;
    if (e->s && !run_until(e->s, e->seq, 0))
        r = CUDA_ERROR_NOT_READY;
    pthread_mutex_unlock(&lock);
    return r;
}

/* Both events recorded and passed (else CUDA_ERROR_NOT_READY, as the driver says), both
 * with timing: the host clock between their stamps, in milliseconds. */
CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
    NEED_CTX("cuEventElapsedTime");
    if (!ms || !a || !b)
        return CUDA_ERROR_INVALID_VALUE;
    if (!a->timing || !b->timing)
        return refuse(CUDA_ERROR_INVALID_HANDLE, "cuEventElapsedTime: an event without timing");
    if (!a->s || !b->s)
        return refuse(CUDA_ERROR_INVALID_HANDLE, "cuEventElapsedTime: an event never recorded");
    pthread_mutex_lock(&lock);
    int ready = a->s->done >= a->seq && b->s->done >= b->seq;
    pthread_mutex_unlock(&lock);
    if (!ready)
        return CUDA_ERROR_NOT_READY;
    *ms = (float)(1e3 * (b->t - a->t));
    return CUDA_SUCCESS;
}

CUresult cuStreamWaitEvent(CUstream h, CUevent e, unsigned int flags)
{
    NEED_CTX("cuStreamWaitEvent");
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    if (flags != 0)
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuStreamWaitEvent: flags %#x", flags);
    pthread_mutex_lock(&lock);
    struct CUstream_st *s;
    CUresult r = stream_of(h, &s, "cuStreamWaitEvent");
    if (r == CUDA_SUCCESS)
        r = capture_check(s, "cuStreamWaitEvent");
    if (r == CUDA_SUCCESS && e->s && e->s != s) {   /* never recorded: nothing to wait for */
        Op *o = calloc(1, sizeof *o);
        *o = (Op){.kind = OP_WAIT, .on = e->s, .seq = e->seq};
        enqueue(s, o);
    }
    pthread_mutex_unlock(&lock);
    return r;
}

/* ---- copies and memsets ----------------------------------------------------------------- */

static CUresult check_copy(const char *fn, uintptr_t dev, uintptr_t host, size_t n)
{
    if (!dev_range(dev, n))
        return refuse(CUDA_ERROR_INVALID_VALUE, "%s: device range [%#lx, +%zu) is not in one device allocation",
                      fn, (unsigned long)dev, n);
    if (n && !host)
        return refuse(CUDA_ERROR_INVALID_VALUE, "%s: NULL host pointer", fn);
    if (host_overlaps_device(host, n))
        return refuse(CUDA_ERROR_INVALID_VALUE, "%s: host range [%#lx, +%zu) is device memory",
                      fn, (unsigned long)host, n);
    return CUDA_SUCCESS;
}

/* host -> device on stream s (async: the call returns before the copy runs) */
static CUresult htod(const char *fn, CUdeviceptr dst, const void *src, size_t n, CUstream h, int async)
{
    NEED_CTX(fn);
    pthread_mutex_lock(&lock);
    struct CUstream_st *s;
    CUresult r = async ? stream_of(h, &s, fn) : (s = &legacy, CUDA_SUCCESS);
    if (r == CUDA_SUCCESS)
        r = capture_check(s, fn);
    if (r == CUDA_SUCCESS)
        r = check_copy(fn, (uintptr_t)dst, (uintptr_t)src, n);
    if (r == CUDA_SUCCESS && n) {
        Op *o = calloc(1, sizeof *o);
        *o = (Op){.kind = OP_COPY, .dst = (void *)(uintptr_t)dst, .src = src, .n = n};
        if (!async)
            host_wait(&legacy); /* "a stream sync is performed before the copy is initiated" */
        if (!page_locked((uintptr_t)src, n)) {
            /* pageable: staged now, the host buffer is free when the call returns, the
             * DMA to the device may still be pending (even for the synchronous call) */
            o->owned = malloc(n);
            memcpy(o->owned, src, n);
            o->src = o->owned;
            enqueue(s, o);
        } else if (async) {
            enqueue(s, o);     /* page-locked: read when the copy runs */
        } else {
            enqueue(s, o);     /* page-locked and synchronous: done on return */
            drain(s);
        }
    }
    pthread_mutex_unlock(&lock);
    return r;
}

static CUresult dtoh(const char *fn, void *dst, CUdeviceptr src, size_t n, CUstream h, int async)
{
    NEED_CTX(fn);
    pthread_mutex_lock(&lock);
    struct CUstream_st *s;
    CUresult r = async ? stream_of(h, &s, fn) : (s = &legacy, CUDA_SUCCESS);
    if (r == CUDA_SUCCESS)
        r = capture_check(s, fn);
    if (r == CUDA_SUCCESS)
        r = check_copy(fn, (uintptr_t)src, (uintptr_t)dst, n);
    if (r == CUDA_SUCCESS && n) {
        Op *o = calloc(1, sizeof *o);
        *o = (Op){.kind = OP_COPY, .dst = dst, .src = (const void *)(uintptr_t)src, .n = n};
        enqueue(s, o);
        /* to pageable memory (or synchronous): the call returns once the copy is done */
        if (!async || !page_locked((uintptr_t)dst, n))
            host_wait(s);
    }
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n)
{
    return htod("cuMemcpyHtoD", dst, src, n, NULL, 0);
}
CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream h)
{
    return htod("cuMemcpyHtoDAsync", dst, src, n, h, 1);
}
CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n)
{
    return dtoh("cuMemcpyDtoH", dst, src, n, NULL, 0);
}
CUresult cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream h)
{
    return dtoh("cuMemcpyDtoHAsync", dst, src, n, h, 1);
}

/* device -> device on stream h, read and written when the copy runs; the ranges in
 * device allocations and apart */
CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h)
{
    const char *fn = "cuMemcpyDtoDAsync";
    NEED_CTX(fn);
    pthread_mutex_lock(&lock);
    struct CUstream_st *s;
    CUresult r = stream_of(h, &s, fn);
    if (r == CUDA_SUCCESS && (!dev_range(dst, n) || !dev_range(src, n)))
        r = refuse(CUDA_ERROR_INVALID_VALUE, "%s: [%#lx, +%zu) or [%#lx, +%zu) is not in one "
                   "device allocation", fn, (unsigned long)dst, n, (unsigned long)src, n);
    if (r == CUDA_SUCCESS && n && dst < src + n && src < dst + n)
        r = refuse(CUDA_ERROR_INVALID_VALUE, "%s: the ranges overlap", fn);
    if (r == CUDA_SUCCESS)
        r = capture_check(s, fn);
    if (r == CUDA_SUCCESS && n) {
        Op *o = calloc(1, sizeof *o);
        *o = (Op){.kind = OP_COPY, .dst = (void *)(uintptr_t)dst, .src = (const void *)(uintptr_t)src,
                  .n = n};
        enqueue(s, o);
    }
    pthread_mutex_unlock(&lock);
    return r;
}

static CUresult memset_async(const char *fn, CUdeviceptr dst, unsigned val, size_t n, int width,
                             CUstream h)
{
    NEED_CTX(fn);
    if (dst & (unsigned)(width - 1))
        return refuse(CUDA_ERROR_INVALID_VALUE, "%s: %#lx is not %d-byte aligned", fn,
                      (unsigned long)dst, width);
    pthread_mutex_lock(&lock);
    struct CUstream_st *s;
    CUresult r = stream_of(h, &s, fn);
    if (r == CUDA_SUCCESS)
        r = capture_valid(s);
    if (r == CUDA_SUCCESS && !dev_range((uintptr_t)dst, n * (size_t)width))
        r = refuse(CUDA_ERROR_INVALID_VALUE, "%s: [%#lx, +%zu bytes) is not in one device allocation",
                   fn, (unsigned long)dst, n * (size_t)width);
    if (r == CUDA_SUCCESS && n) {
        Op *o = calloc(1, sizeof *o);
        *o = (Op){.kind = width == 1 ? OP_SET8 : width == 2 ? OP_SET16 : OP_SET32,
                  .dst = (void *)(uintptr_t)dst, .n = n,
                  .val = width == 1 ? (val & 0xff) : width == 2 ? (val & 0xffff) : val};
        enqueue(s, o);
    }
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream h)
{
    return memset_async("cuMemsetD8Async", dst, v, n, 1, h);
}
CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short v, size_t n, CUstream h)
{
    return memset_async("cuMemsetD16Async", dst, v, n, 2, h);
}
CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, CUstream h)
{
    return memset_async("cuMemsetD32Async", dst, v, n, 4, h);
}

/* ---- modules and launches ------------------------------------------------------------ */

struct CUmod_st {
    Module m;
};
struct CUfunc_st {
    Module *mod;
    int k;
    int max_dyn_smem;
};

/* A cubin for `arch` ("sm_89", "sm_90a", "sm_100f") runs on this device: the same major
 * version and a minor one no higher; the architecture-specific sm_XYa on X.Y only */
static int arch_runs(const char *arch)
{
    int n = 0, end = 0;
    if (sscanf(arch, "sm_%d%n", &n, &end) != 1)
        return 0;
    if (arch[end] == 'a')
        return n == cc;
    return n / 10 == cc / 10 && n % 10 <= cc % 10;
}

CUresult cuModuleLoadData(CUmodule *pm, const void *image)
{
    NEED_CTX("cuModuleLoadData");
    if (!pm || !image)
        return CUDA_ERROR_INVALID_VALUE;
    const unsigned char *p = image;
    if (memcmp(p, "\177ELF", 4) == 0) {   /* expected: the trainer goes on to NVRTC */
        tr("cuModuleLoadData: a real cubin (ELF): refused, this GPU runs the fake NVRTC's images");
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    }
    if (memcmp(p, FAKE_CUBIN_MAGIC, FAKE_CUBIN_MAGIC_LEN) != 0) {
        if (strstr((const char *)p, ".version") && strstr((const char *)p, ".target"))
            return refuse(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "cuModuleLoadData: PTX: there is no PTX JIT here");
        return refuse(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoadData: not an image");
    }
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n |= (uint64_t)p[FAKE_CUBIN_MAGIC_LEN + i] << (8 * i);
    int fd = memfd_create("trainc-fake-module", MFD_CLOEXEC);
    if (fd < 0)
        return refuse(CUDA_ERROR_OPERATING_SYSTEM, "cuModuleLoadData: memfd_create failed");
    const unsigned char *so = p + FAKE_CUBIN_MAGIC_LEN + 8;
    size_t put = 0;
    while (put < n) {
        ssize_t k = write(fd, so + put, (size_t)n - put);
        if (k <= 0)
            break;
        put += (size_t)k;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    void *h = put == n ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    close(fd);
    if (!h)
        return refuse(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoadData: %s", put == n ? dlerror() : "short write");
    struct CUmod_st *m = calloc(1, sizeof *m);
    m->m.so = h;
    m->m.count = (fake_kernels_fn)dlsym(h, "trainc_fake_kernels");
    m->m.name = (fake_kernel_name_fn)dlsym(h, "trainc_fake_kernel_name");
    m->m.pack = (fake_pack_fn)dlsym(h, "trainc_fake_pack");
    m->m.launch = (fake_launch_fn)dlsym(h, "emu_launch");
    if (!m->m.count || !m->m.name || !m->m.pack || !m->m.launch) {
        dlclose(h);
        free(m);
        return refuse(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoadData: not a fake NVRTC module");
    }
    fake_arch_fn arch_fn = (fake_arch_fn)dlsym(h, "trainc_fake_arch");
    char arch[32] = "";   /* none in modules cached before it was recorded */
    if (arch_fn)
        snprintf(arch, sizeof arch, "%s", arch_fn());
    if (*arch && !arch_runs(arch)) {
        dlclose(h);
        free(m);
        return refuse(CUDA_ERROR_NO_BINARY_FOR_GPU, "cuModuleLoadData: a module for %s does not run on "
                      "compute capability %d.%d", arch, cc / 10, cc % 10);
    }
    tr("cuModuleLoadData: %d kernels", m->m.count());
    *pm = m;
    return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *pf, CUmodule m, const char *name)
{
    NEED_CTX("cuModuleGetFunction");
    if (!pf || !m || !name)
        return CUDA_ERROR_INVALID_VALUE;
    int n = m->m.count();
    for (int k = 0; k < n; k++)
        if (strcmp(m->m.name(k), name) == 0) {
            struct CUfunc_st *f = calloc(1, sizeof *f);
            *f = (struct CUfunc_st){.mod = &m->m, .k = k, .max_dyn_smem = 48 * 1024};
            *pf = f;
            return CUDA_SUCCESS;
        }
    return refuse(CUDA_ERROR_NOT_FOUND, "cuModuleGetFunction: no kernel %s", name);
}

CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v)
{
    NEED_CTX("cuFuncSetAttribute");
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (a != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
        return refuse(CUDA_ERROR_NOT_SUPPORTED, "cuFuncSetAttribute: attribute %d not emulated", (int)a);
    if (v < 0 || v > 227 * 1024)
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuFuncSetAttribute: %d bytes of shared memory", v);
    f->max_dyn_smem = v;
    return CUDA_SUCCESS;
}

/* a kernel's pointer argument: in a device allocation, or just past its end (an empty
 * tensor at the end of a block) */
static int is_dev_ptr(const void *p) { return dev_range((uintptr_t)p, 0); }

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
                        CUstream h, void **params, void **extra)
{
    NEED_CTX("cuLaunchKernel");
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    const char *name = f->mod->name(f->k);
    if (extra)
        return refuse(CUDA_ERROR_NOT_SUPPORTED, "cuLaunchKernel(%s): `extra` is not emulated", name);
    if (!params)
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel(%s): no kernelParams", name);
    if (gx < 1 || gy < 1 || gz < 1 || gx > 0x7fffffffu || gy > 65535 || gz > 65535)
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel(%s): grid %u,%u,%u", name, gx, gy, gz);
    if (bx < 1 || by < 1 || bz < 1 || bx > 1024 || by > 1024 || bz > 64 ||
        (unsigned long)bx * by * bz > 1024)
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel(%s): block %u,%u,%u", name, bx, by, bz);
    if (bz != 1 || (bx * by) % 32)
        return refuse(CUDA_ERROR_NOT_SUPPORTED,
                      "cuLaunchKernel(%s): block %u,%u,%u: the emulator runs whole warps, z = 1",
                      name, bx, by, bz);
    if ((int)smem > f->max_dyn_smem)
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel(%s): %u bytes of dynamic shared memory",
                      name, smem);
    pthread_mutex_lock(&lock);
    struct CUstream_st *s;
    CUresult r = stream_of(h, &s, "cuLaunchKernel");
    if (r == CUDA_SUCCESS)
        r = capture_valid(s);
    if (r == CUDA_SUCCESS) {
        Op *o = calloc(1, sizeof *o);
        *o = (Op){.kind = OP_LAUNCH, .mod = f->mod, .k = f->k, .g = {gx, gy, gz}, .b = {bx, by},
                    .smem = smem};
        o->argbuf = aligned_alloc(128, 4096);   /* a CUtensorMap argument is 64-aligned */
        int bad = -1, n = f->mod->pack(f->k, params, o->argbuf, 4096, o->args, is_dev_ptr, &bad);
        if (n < 0) {
            r = n == -1 ? refuse(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel(%s): over 4096 bytes of arguments", name)
                        : refuse(CUDA_ERROR_ILLEGAL_ADDRESS,
                                 "cuLaunchKernel(%s): pointer argument %d is not device memory", name, bad);
            free(o->argbuf);
            free(o);
        } else {
            tr("launch %s grid %u,%u,%u block %u,%u, %d arguments", name, gx, gy, gz, bx, by, n);
            enqueue(s, o);
        }
    }
    pthread_mutex_unlock(&lock);
    return r;
}

/* ---- graphs: stream capture --------------------------------------------------------- */

CUresult cuStreamBeginCapture(CUstream h, CUstreamCaptureMode mode)
{
    NEED_CTX("cuStreamBeginCapture");
    if (graph_mode == 1)
        return refuse(CUDA_ERROR_NOT_SUPPORTED, "cuStreamBeginCapture: refused (TRAINC_FAKE_GPU_GRAPH=refuse)");
    if (mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return refuse(CUDA_ERROR_NOT_SUPPORTED, "cuStreamBeginCapture: mode %d: only the relaxed mode is emulated",
                      (int)mode);
    pthread_mutex_lock(&lock);
    struct CUstream_st *s;
    CUresult r = stream_of(h, &s, "cuStreamBeginCapture");
    if (r == CUDA_SUCCESS && (s == &legacy || s->cap))
        r = refuse(CUDA_ERROR_ILLEGAL_STATE, "cuStreamBeginCapture: %s",
                   s == &legacy ? "the legacy stream cannot be captured" : "the stream is being captured");
    if (r == CUDA_SUCCESS) {
        s->cap = calloc(1, sizeof *s->cap);
        s->cap->refs = 1;
        s->cap->id = ++graphs_made;
        s->cap_bad = graph_mode == 2;
        tr("stream %d: capture into graph %d begins", s->id, s->cap->id);
    }
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuStreamEndCapture(CUstream h, CUgraph *pg)
{
    NEED_CTX("cuStreamEndCapture");
    if (!pg)
        return CUDA_ERROR_INVALID_VALUE;
    *pg = NULL;
    pthread_mutex_lock(&lock);
    struct CUstream_st *s;
    CUresult r = stream_of(h, &s, "cuStreamEndCapture");
    if (r == CUDA_SUCCESS && !s->cap)
        r = refuse(CUDA_ERROR_ILLEGAL_STATE, "cuStreamEndCapture: stream %d is not being captured", s->id);
    if (r == CUDA_SUCCESS) {
        struct CUgraph_st *g = s->cap;
        s->cap = NULL;
        tr("stream %d: capture into graph %d ends, %d operations%s", s->id, g->id, g->n,
           s->cap_bad ? ", invalidated" : "");
        if (s->cap_bad) {
            graph_unref(g);
            r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        } else {
            *pg = g;
        }
        s->cap_bad = 0;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *pe, CUgraph g, unsigned long long flags)
{
    NEED_CTX("cuGraphInstantiateWithFlags");
    if (!pe || !g)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags)
        return refuse(CUDA_ERROR_NOT_SUPPORTED, "cuGraphInstantiateWithFlags: flags %#llx", flags);
    pthread_mutex_lock(&lock);
    *pe = calloc(1, sizeof **pe);
    (*pe)->g = g;
    g->refs++;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuGraphLaunch(CUgraphExec x, CUstream h)
{
    NEED_CTX("cuGraphLaunch");
    if (!x)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct CUstream_st *s;
    CUresult r = stream_of(h, &s, "cuGraphLaunch");
    if (r == CUDA_SUCCESS)
        r = capture_check(s, "cuGraphLaunch");
    if (r == CUDA_SUCCESS) {
        Op *o = calloc(1, sizeof *o);
        *o = (Op){.kind = OP_GRAPH, .graph = x->g};
        x->g->refs++;
        tr("launch graph %d (%d operations)", x->g->id, x->g->n);
        enqueue(s, o);
    }
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuGraphExecDestroy(CUgraphExec x)
{
    if (!x)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    graph_unref(x->g);   /* launches still queued keep their own reference */
    free(x);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph g)
{
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    graph_unref(g);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

/* ---- the fake cuBLASLt's hooks ---------------------------------------------------------- */

/* fn(arg) queued on the stream (or recorded into its capture); arg is the driver's,
 * freed with the operation (after it ran, or with the graph) */
EXPORT int trainc_fake_enqueue_host(void *stream, void (*fn)(void *), void *arg)
{
    if (!initialized || current != &primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    struct CUstream_st *s;
    CUresult r = stream_of(stream, &s, "cublasLtMatmul");
    if (r == CUDA_SUCCESS)
        r = capture_valid(s);
    if (r == CUDA_SUCCESS) {
        Op *o = calloc(1, sizeof *o);
        *o = (Op){.kind = OP_HOST, .fn = fn, .arg = arg, .owned = arg};
        enqueue(s, o);
    }
    pthread_mutex_unlock(&lock);
    return (int)r;
}

EXPORT int trainc_fake_enqueue_poll(void *stream, int (*poll)(void *), void *arg)
{
    if (!initialized || current != &primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    struct CUstream_st *s;
    CUresult r = stream_of(stream, &s, "ncclAllReduce");
    if (r == CUDA_SUCCESS)
        r = capture_check(s, "ncclAllReduce");
    if (r == CUDA_SUCCESS) {
        Op *o = calloc(1, sizeof *o);
        *o = (Op){.kind = OP_POLL, .poll = poll, .arg = arg};
        enqueue(s, o);
    }
    pthread_mutex_unlock(&lock);
    return (int)r;
}

/* The device of the current context (the fake NCCL's duplicate-GPU check), or -1. */
EXPORT int trainc_fake_device(void) { return current == &primary ? ctx_dev : -1; }

EXPORT int trainc_fake_is_dev_range(const void *p, size_t n)
{
    pthread_mutex_lock(&lock);
    int ok = dev_range((uintptr_t)p, n);
    pthread_mutex_unlock(&lock);
    return ok;
}

/* ---- errors ---------------------------------------------------------------------------- */

static const struct {
    CUresult r;
    const char *name, *text;
} errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "PTX JIT compiler library not found"},
    {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"},
};

CUresult cuGetErrorName(CUresult r, const char **s)
{
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].r == r) {
            *s = errors[i].name;
            return CUDA_SUCCESS;
        }
    *s = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult r, const char **s)
{
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].r == r) {
            *s = errors[i].text;
            return CUDA_SUCCESS;
        }
    *s = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

/* ---- tensor maps ------------------------------------------------------------------------ */

/* The map holds what it was given (tests/gpu/emu/emu_tmap.h), for the emulator's TMA
 * copies, after the driver's documented checks (emu_tmap_encode); the tensor, up to its
 * last element, must lie in one device allocation. */
CUresult cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
                                cuuint32_t tensorRank, void *globalAddress, const cuuint64_t *globalDim,
                                const cuuint64_t *globalStrides, const cuuint32_t *boxDim,
                                const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
                                CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                CUtensorMapFloatOOBfill oobFill)
{
    (void)l2Promotion;   /* a cache hint */
    const char *why = emu_tmap_encode(tensorMap, (int)tensorDataType, tensorRank, globalAddress,
                                      globalDim, globalStrides, boxDim, elementStrides,
                                      (int)interleave, (int)swizzle, (int)oobFill);
    if (why)
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuTensorMapEncodeTiled: %s", why);
    size_t extent = (size_t)globalDim[0] * emu_tmap_elem_bytes((int)tensorDataType);
    for (cuuint32_t i = 1; i < tensorRank; i++)
        extent += (size_t)(globalDim[i] - 1) * (size_t)globalStrides[i - 1];
    pthread_mutex_lock(&lock);
    int ok = dev_range((uintptr_t)globalAddress, extent);
    pthread_mutex_unlock(&lock);
    if (!ok)
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuTensorMapEncodeTiled: the tensor (%zu bytes from "
                      "%p) is not in device memory", extent, globalAddress);
    return CUDA_SUCCESS;
}

/* ---- cuGetProcAddress -------------------------------------------------------------------- */

/* base name -> the implementation with the ABI cuda.h gives that name for 13000 */
#define FNS(X)                                                                                 \
    X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetAttribute) \
    X(cuDeviceGetName) X(cuDeviceTotalMem) X(cuDevicePrimaryCtxRetain)                         \
    X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuStreamCreate) X(cuStreamSynchronize)   \
    X(cuEventCreate) X(cuEventRecord) X(cuEventSynchronize) X(cuStreamWaitEvent) X(cuMemAlloc) \
    X(cuMemFree) X(cuMemHostRegister) X(cuMemHostUnregister) X(cuMemAllocHost) X(cuMemcpyHtoD) \
    X(cuMemcpyDtoH) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemsetD8Async)               \
    X(cuMemsetD16Async) X(cuMemcpyDtoDAsync) X(cuMemsetD32Async) X(cuModuleLoadData)           \
    X(cuModuleGetFunction) X(cuLaunchKernel) X(cuGetErrorName) X(cuGetErrorString)             \
    X(cuMemGetInfo) X(cuFuncSetAttribute) X(cuStreamQuery) X(cuEventQuery)                     \
    X(cuMemAddressReserve) X(cuMemCreate) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess)          \
    X(cuMemGetAllocationGranularity) X(cuEventElapsedTime) X(cuStreamBeginCapture)             \
    X(cuStreamEndCapture) X(cuGraphInstantiateWithFlags) X(cuGraphLaunch)                      \
    X(cuGraphExecDestroy) X(cuGraphDestroy) X(cuTensorMapEncodeTiled)
#define ENTRY(fn) {#fn, (void *)fn},
static const struct {
    const char *name;
    void *fn;
} table[] = {FNS(ENTRY)};

CUresult cuGetProcAddress(const char *sym, void **pfn, int version, cuuint64_t flags,
                          CUdriverProcAddressQueryResult *status)
{
    if (!sym || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (flags != CU_GET_PROC_ADDRESS_DEFAULT)
        return refuse(CUDA_ERROR_NOT_SUPPORTED, "cuGetProcAddress(%s): flags %#llx not emulated", sym,
                      (unsigned long long)flags);
    if (version < 12000 || version > CUDA_VERSION) {
        if (status)
            *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
        return refuse(CUDA_ERROR_NOT_SUPPORTED, "cuGetProcAddress(%s): version %d: this fake has the ABI of %d",
                      sym, version, CUDA_VERSION);
    }
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(table[i].name, sym) == 0) {
            *pfn = table[i].fn;
            if (status)
                *status = CU_GET_PROC_ADDRESS_SUCCESS;
            return CUDA_SUCCESS;
        }
    return refuse(CUDA_ERROR_NOT_FOUND, "cuGetProcAddress(%s): not emulated", sym);
}

/* the version-1 entry point, under its own name (cuda.h maps the name to _v2) */
#undef cuGetProcAddress
EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int version, cuuint64_t flags);
EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int version, cuuint64_t flags)
{
    return cuGetProcAddress_v2(sym, pfn, version, flags, NULL);
}
