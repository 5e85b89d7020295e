#define _GNU_SOURCE
/* device_cuda.c: the CUDA device layer.
 *
 * The driver is loaded with dlopen and its entry points fetched with cuGetProcAddress
 * for the API version of the headers we compile against, so that:
 *   - a trainer started where there is no driver or no GPU says so and exits 2
 *     ("no CUDA device found" and a hint) instead of failing in the dynamic loader;
 *   - nothing here links against libcuda, and the same librt.a serves CPU trainers.
 *
 * The module of generated kernels comes from, in order: the cubin embedded for the
 * GPU's architecture; the on-disk cache of an earlier NVRTC compile; NVRTC now (the
 * embedded source, for this exact GPU; stored in the cache); the embedded PTX, which
 * the driver compiles. Each failure is kept and printed if all fail.
 *
 * Memory: one allocation holds parameters, gradients and optimizer state, one the
 * arena (sized by the static plan for training and validation), one the small fixed
 * buffers (two slots of inputs, the loss stats, scratch, the GEMM workspace). All of
 * it is allocated before the first step; nothing is allocated in the loop, but for zero2's
 * gradient chunks, during the first step only (the section "zero2's gradient region"). */
#include <dlfcn.h>
#include <link.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "rt_cuda.h"
#include "rt_half.h"
#include "rt_dist.h"

#define CU_FNS(X)                                                                              \
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
#define DECLARE(fn) static __typeof__(fn) *p_##fn;
CU_FNS(DECLARE)

/* A training pass (forward + backward) or a validation pass (evaluate) captured as a
 * CUDA graph, for the inputs of one slot, one pass of a step, one batch size and one
 * loss scale: what the pass's host code decides from them (pointers, shapes, first
 * writers) is in the graph. */
struct pass_graph {
    int used;                  /* this entry's key was seen */
    int train, slot, pass, grads_zero;
    int64_t B;
    float grad_scale;
    CUgraphExec exec;          /* NULL: the key ran once without a graph (not yet captured) */
    int64_t terms;             /* e->terms after the pass (the loss calls count on the host) */
    uint64_t last;             /* graph_clock at its last use */
};

static int drv_loaded;         /* 1 loaded, -1 failed */
static char drv_why[512];

static const char *cu_err(CUresult r)
{
    const char *name = NULL;
    if (p_cuGetErrorName)
        p_cuGetErrorName(r, &name);
    return name ? name : "CUDA error";
}

/* Every driver call goes through CU(): a failure names the call and exits 2. */
#define CU(call) cu_check((call), #call, __FILE__, __LINE__)
static void cu_check(CUresult r, const char *what, const char *file, int line)
{
    if (r == CUDA_SUCCESS)
        return;
    const char *s = NULL;
    if (p_cuGetErrorString)
        p_cuGetErrorString(r, &s);
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        rt_fail("out of GPU memory in %s (%s:%d); try a smaller batch_size, recompute "
                "\"selective\" or \"full\", or a memory_budget_mb", what, file, line);
    rt_fail("CUDA: %s failed: %s (%s) at %s:%d", what, cu_err(r), s ? s : "", file, line);
}

typedef CUresult (*get_proc_v2)(const char *, void **, int, cuuint64_t,
                                CUdriverProcAddressQueryResult *);
typedef CUresult (*get_proc_v1)(const char *, void **, int, cuuint64_t);

/* Why cuGetProcAddress did not give fn (r its answer), into drv_why. The CUDA toolkit's
 * stub libcuda (lib64/stubs/, for linking only) answers every call with
 * CUDA_ERROR_STUB_LIBRARY: found first on the library path, it hides the real driver. */
static void resolve_failed(void *h, const char *fn, CUresult r)
{
    struct link_map *lm = NULL;
    const char *path = dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name
                           ? lm->l_name : "libcuda.so.1";
    if (r == CUDA_ERROR_STUB_LIBRARY) {
        snprintf(drv_why, sizeof drv_why, "the libcuda.so.1 found first, %s, is the CUDA "
                 "toolkit's stub (CUDA_ERROR_STUB_LIBRARY), not the NVIDIA driver's; put the "
                 "driver's libcuda.so.1 first on the library path (the stubs folder out of "
                 "LD_LIBRARY_PATH)", path);
        return;
    }
    const char *name = NULL;
    CUresult (*get_name)(CUresult, const char **) =
        (CUresult(*)(CUresult, const char **))dlsym(h, "cuGetErrorName");
    if (r != CUDA_SUCCESS && (!get_name || get_name(r, &name) != CUDA_SUCCESS))
        name = NULL;
    if (r != CUDA_SUCCESS)
        snprintf(drv_why, sizeof drv_why, "the NVIDIA driver (%s) gives no %s: %s (CUresult "
                 "%d)", path, fn, name ? name : "an unknown error", (int)r);
    else
        snprintf(drv_why, sizeof drv_why, "the NVIDIA driver (%s) lacks %s (too old?)", path, fn);
}

static int load_driver(void)
{
    if (drv_loaded)
        return drv_loaded > 0 ? 0 : -1;
    drv_loaded = -1;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(drv_why, sizeof drv_why, "the NVIDIA driver is not installed (%s)",
                 dlerror());
        return -1;
    }
    get_proc_v2 gp2 = (get_proc_v2)dlsym(h, "cuGetProcAddress_v2");
    get_proc_v1 gp1 = (get_proc_v1)dlsym(h, "cuGetProcAddress");
    if (!gp2 && !gp1) {
        snprintf(drv_why, sizeof drv_why, "the NVIDIA driver is too old (no cuGetProcAddress)");
        return -1;
    }
    /* the functions are asked for at this toolkit's version, which a driver older than
     * it refuses one by one: say so by the version */
    CUresult (*drv_version)(int *) = (CUresult(*)(int *))dlsym(h, "cuDriverGetVersion");
    int v = 0;
    if (drv_version && drv_version(&v) == CUDA_SUCCESS && v > 0 && v < CUDA_VERSION) {
        snprintf(drv_why, sizeof drv_why, "the NVIDIA driver supports CUDA %d.%d, and this "
                 "trainer needs CUDA %d.%d or newer (update the driver)", v / 1000, v % 1000 / 10,
                 CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
        return -1;
    }
    int ok = 1;
#define RESOLVE(fn)                                                                            \
    if (ok) {                                                                                  \
        void *f = NULL;                                                                        \
        CUdriverProcAddressQueryResult st;                                                     \
        CUresult r = gp2 ? gp2(#fn, &f, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &st)        \
                         : gp1(#fn, &f, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT);            \
        if (r != CUDA_SUCCESS || !f) {                                                         \
            resolve_failed(h, #fn, r);                                                         \
            ok = 0;                                                                            \
        }                                                                                      \
        p_##fn = (__typeof__(fn) *)f;                                                          \
    }
    CU_FNS(RESOLVE)
    if (!ok)
        return -1;
    drv_loaded = 1;
    return 0;
}

int rt_cu_probe(char *why, size_t n, int *count)
{
    *count = 0;
    if (load_driver() != 0) {
        snprintf(why, n, "%s", drv_why);
        return -1;
    }
    CUresult r = p_cuInit(0);
    if (r != CUDA_SUCCESS) {
        snprintf(why, n, "cuInit: %s", cu_err(r));
        return -1;
    }
    if ((r = p_cuDeviceGetCount(count)) != CUDA_SUCCESS || *count == 0) {
        snprintf(why, n, "the driver sees no GPU (%s)", r == CUDA_SUCCESS ? "0 devices" : cu_err(r));
        return -1;
    }
    /* a GPU older than the kernels (sm_80): none the trainer can use */
    for (int i = 0; i < *count; i++) {
        CUdevice dev;
        int major = 0, minor = 0;
        char name[256] = "?";
        if (p_cuDeviceGet(&dev, i) != CUDA_SUCCESS ||
            p_cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) != CUDA_SUCCESS ||
            p_cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) != CUDA_SUCCESS)
            continue;   /* the device's opening will say */
        if (major * 10 + minor < RT_CU_MIN_SM) {
            p_cuDeviceGetName(name, sizeof name, dev);
            snprintf(why, n, "GPU %d (%s) has compute capability %d.%d, and trainc's kernels need "
                     "%d.%d or newer (A100, A10, L4, RTX 30xx, H100 and later)%s", i, name, major,
                     minor, RT_CU_MIN_SM / 10, RT_CU_MIN_SM % 10,
                     *count > 1 ? "; CUDA_VISIBLE_DEVICES can leave it out" : "");
            *count = 0;
            return -1;
        }
    }
    return 0;
}

_Noreturn void rt_cu_no_device(const char *why)
{
    fprintf(stderr, "trainc: error: no CUDA device found: %s.\n"
                    "  hint: run on a machine with an NVIDIA GPU and driver, or train on the CPU "
                    "(--device cpu; a trainer built with --device cuda only has to be rebuilt "
                    "with --device both or cpu)\n", why);
    exit(RT_EXIT_RUNTIME);
}

/* ---- the device state ------------------------------------------------------------- */

#define FN_SLOTS 1024          /* kernel lookup: open addressing, names of the module */

/* zero2's gradient region, backed on demand (its section, below) */
#define GR_INFLIGHT 2

struct grads {
    rt_dptr base;                       /* the reserved range */
    size_t gran;                        /* bytes a chunk */
    int n;                              /* chunks in the range */
    int keep_lo, keep_hi;               /* chunks [keep_lo, keep_hi) hold the shard */
    CUmemGenericAllocationHandle *at;   /* [n]: the chunk mapped at each place, 0 none */
    CUmemGenericAllocationHandle *spare;/* [n]: created and not mapped */
    int n_spare, created, mapped, peak;
    int released;                       /* chunks from here up (but the shard's) are done
                                           with in this backward pass */
    CUevent ev[GR_INFLIGHT + 1];        /* outstanding reductions, a ring */
    int64_t from[GR_INFLIGHT + 1];      /* their buckets' first floats */
    int head, count;
    CUmemAllocationProp prop;
    CUmemAccessDesc access;
};

typedef struct rt_cu {
    const rt_gpu_calls *calls; /* first: RT_GPU(e) in the CPU calls reads it */
    CUdevice dev;
    CUcontext ctx;
    CUstream compute, copy, comm;  /* kernels; input copies; NCCL (nccl.c) */
    CUevent fork_ev, join_ev;      /* compute -> comm, comm -> compute */
    CUmodule mod;
    int sm_count, cc_major, cc_minor;
    char name[256], arch[16];
    char mod_arch[16];         /* what the loaded module was compiled for ("sm_90a"; "ptx") */
    const char *kernels_from;  /* "cubin", "cache", "nvrtc", "ptx" */
    int quiet;                 /* not rank 0: no notes */
    struct {
        const char *name;
        CUfunction f;
    } fn[FN_SLOTS];
    /* memory */
    rt_dptr pool;              /* params, grads, optimizer state */
    rt_dptr arena;
    rt_dptr fixed;             /* inputs, stats, scratch, workspace */
    size_t pool_bytes, arena_bytes, fixed_bytes;
    rt_dptr in[RT_CU_SLOTS][RT_MAX_INPUTS];
    size_t in_bytes[RT_MAX_INPUTS];
    rt_dptr idx[RT_CU_SLOTS];  /* a batch's sample indices (int32), for a dataset on the GPU */
    int slot_set[RT_CU_SLOTS]; /* what slot s holds: -1 its inputs, else indices into set */
    int64_t slot_epoch[RT_CU_SLOTS]; /* the epoch of the batch whose indices it holds */
    int aug, aug_hflip;        /* loader.augment on the training set's images */
    int64_t aug_pad;
    uint64_t aug_seed;
    int aug_rrc;               /* random_resized_crop in the crop's place */
    rt_rrc rrc;
    int aug_jitter;            /* color_jitter after them */
    rt_jitter jitter;
    int mask, mask_in, mask_tgt; /* loader.mask on the training set's rows: on, its inputs */
    rt_mask_rule mask_rule;
    rt_dptr data[2][RT_MAX_INPUTS]; /* loader.on_gpu: each input of set 0 (train), 1 (val) */
    size_t data_bytes;         /* allocated for them */
    CUevent in_done[RT_CU_SLOTS];
    /* slot_free[s]: recorded on the compute stream when it has queued the last work
     * that reads slot s; an upload into s waits for it on the copy stream, so the host
     * need not wait for a pass before copying the batch after next */
    CUevent slot_free[RT_CU_SLOTS];
    int using;                 /* the slot the compute stream reads now (-1: none yet) */
    int last;                  /* the slot of the last upload */
    rt_dptr stats;             /* n_stats rt_cu_stat: one per pass of a step */
    int n_stats, stat_cur;     /* how many; the pass loss kernels add into now */
    /* rt_cu_step_queue's copies: RT_CU_RING places, used in turn, so that the host may
     * read a step's numbers after later steps were queued */
    rt_cu_stat *stats_host;    /* pinned, n_stats a place */
    double *f64_host;          /* pinned, after stats_host: the doubles, RT_CU_F64 a place */
    int ring;                  /* the place of the last rt_cu_step_queue */
    int ring_passes[RT_CU_RING]; /* the passes copied into each place */
    CUevent step_ev;           /* the last rt_cu_step_queue's copies are done */
    CUevent ordered_ev[RT_CU_ORDERED]; /* rt_cu_upload_ordered's copies, by buffer */
    rt_dptr scratch;
    size_t scratch_bytes;
    rt_dptr workspace;
    size_t workspace_bytes;
    rt_dptr state;
    rt_dptr pcopy;             /* mixed precision: the parameters in 16 bits (in the pool) */
    rt_dptr lstate;            /* the layers' state (rt_exec.state; in the pool) */
    size_t lstate_bytes;
    int act16;                 /* rt_model.act16: the arena's activations are bf16 or fp16 */
    size_t param_bytes;        /* fp32 parameters (the region e->params points to) */
    rt_dptr params;            /* that region: the pool's start, or a reservation of its own
                                  backed up to f32_bytes (frozen weights in 16 bits alone) */
    size_t f32_bytes;          /* the fp32 parameters held: rt_model.gpu_fp32_floats' */
    size_t params_apart;       /* the bytes backing them apart from the pool, or 0 */
    int watch_comm;            /* NCCL in use: poll the compute stream (cu_wait) */
    size_t context_bytes;      /* the device's used memory once the module was loaded */
    struct grads *gr;          /* zero2: the gradient region backed on demand; else NULL */
    CUevent *prof_ev;          /* --profile: timing events (rt_cu_prof_setup) */
    int n_prof_ev;
    /* passes as CUDA graphs (the section "graphs of training passes") */
    struct pass_graph *graphs; /* n_graphs: two for each pass of a step (the input slots
                                  alternate, so an odd accumulate meets both), four for
                                  validation and spares for loss scales (least recently
                                  used is replaced) */
    int n_graphs;
    int graphs_on;             /* rt_cu_graphs_enable, and none has failed */
    int capturing;             /* the graph being captured (n_graphs: the caller's own,
                                  rt_cu_capture_begin), or -1 */
    CUresult capture_err;      /* a call that failed while capturing */
    uint64_t graph_clock;      /* uses so far (least recently used is replaced) */
    struct cu_const *consts;   /* rt_cu_const's uploads */
    int n_consts;
} rt_cu;

/* One of rt_cu_const's blobs: its bytes on the host (a copy) and on the device. */
struct cu_const {
    void *host;
    size_t bytes;
    rt_dptr dev;
};

static rt_cu *dev_of(rt_exec *e)
{
    if (!e->dev)
        rt_die("a CUDA call on an exec without a device");
    return e->dev;
}

static int try_load(rt_cu *d, const void *image, const char *from, char *why, size_t n)
{
    CUresult r = p_cuModuleLoadData(&d->mod, image);
    if (r == CUDA_SUCCESS) {
        d->kernels_from = from;
        return 0;
    }
    size_t len = strlen(why);
    snprintf(why + len, n - len, "\n    %s: cuModuleLoadData: %s", from, cu_err(r));
    return -1;
}

/* A cubin built for `built` runs on a GPU of architecture `dev` ("sm_90"): the same, or
 * its architecture-specific variant ("sm_90a", for that one architecture only). */
static int cubin_fits(const char *built, const char *dev)
{
    size_t n = strlen(dev);
    return !strncmp(built, dev, n) && (built[n] == 0 || (built[n] == 'a' && built[n + 1] == 0));
}

/* What NVRTC compiles the kernels for on this GPU: its architecture, or on compute
 * capability 9.0 the architecture-specific sm_90a, whose wgmma and setmaxnreg
 * templates/cuda/sm90.cuh's kernels need (a cubin for it runs on 9.0 only, which is
 * this GPU). */
static const char *nvrtc_arch(const rt_cu *d)
{
    return d->cc_major == 9 && d->cc_minor == 0 ? "sm_90a" : d->arch;
}

static void load_module(rt_cu *d, const rt_cuda_image *img)
{
    char why[2048] = "";
    /* the architecture-specific cubin (sm_90a: the Hopper kernels) before the plain one */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < img->n_cubins; i++) {
            const char *a = img->cubins[i].arch;
            if (cubin_fits(a, d->arch) && (a[strlen(a) - 1] == 'a') == !pass &&
                try_load(d, img->cubins[i].image, "cubin", why, sizeof why) == 0) {
                snprintf(d->mod_arch, sizeof d->mod_arch, "%s", a);
                return;
            }
        }
    const char *arch = nvrtc_arch(d);
    snprintf(d->mod_arch, sizeof d->mod_arch, "%s", arch);
    if (img->source) {
        void *image = NULL;
        size_t size = 0;
        if (rt_kcache_get(img->source, arch, &image, &size) == 0) {
            int ok = try_load(d, image, "cache", why, sizeof why) == 0;
            free(image);
            if (ok)
                return;
        }
        char *log = NULL;
        double t = rt_now();
        if (rt_nvrtc_compile(img->source, "kernels_cuda.cu", arch, rt_cpus_usable(), &image,
                             &size, &log) == 0) {
            if (try_load(d, image, "nvrtc", why, sizeof why) == 0) {
                rt_kcache_put(img->source, arch, image, size);
                if (!d->quiet)
                    fprintf(stderr, "trainc: compiled the kernels for %s with NVRTC in %.2f s (cached)\n",
                            arch, rt_now() - t);
                free(image);
                free(log);
                return;
            }
            free(image);
        } else {
            size_t len = strlen(why);
            snprintf(why + len, sizeof why - len, "\n    NVRTC for %s: %.1500s", arch,
                     log ? log : "failed");
        }
        free(log);
    }
    snprintf(d->mod_arch, sizeof d->mod_arch, "ptx");
    if (img->ptx && try_load(d, img->ptx, "ptx", why, sizeof why) == 0)
        return;
    rt_fail("CUDA: no kernels for this GPU (%s, %s):%s\n  hint: rebuild with trainc build "
            "--arch %s, or install NVRTC next to the trainer (trainc build --bundle)",
            d->name, d->arch, *why ? why : " none embedded", d->arch);
}

static CUfunction lookup(rt_cu *d, const char *name)
{
    unsigned h = (unsigned)(rt_fnv1a(name, strlen(name)) % FN_SLOTS);
    for (unsigned k = 0; k < FN_SLOTS; k++) {
        unsigned i = (h + k) % FN_SLOTS;
        if (!d->fn[i].name) {
            CUfunction f;
            CUresult r = p_cuModuleGetFunction(&f, d->mod, name);
            if (r != CUDA_SUCCESS)
                rt_die("kernel %s is not in the module (%s): the emitter and the runtime disagree",
                       name, cu_err(r));
            d->fn[i].name = strdup(name);
            d->fn[i].f = f;
            return f;
        }
        if (strcmp(d->fn[i].name, name) == 0)
            return d->fn[i].f;
    }
    rt_die("more than %d kernels", FN_SLOTS);
}

/* The GPU's twins of the CPU calls (rt.h's rt_gpu_calls): the ops files register
 * theirs (rt_cu_ops_register, rt_cu_blas_register call rt_cu_register); this layer
 * adds its own elementwise launch and knows no op. */
static rt_gpu_calls calls = {.launch_ew = rt_cu_launch_ew};

void rt_cu_register(const rt_gpu_calls *part)
{
    enum { N = sizeof calls / sizeof(void (*)(void)) };
    void (**to)(void) = (void (**)(void))&calls;
    void (*const *from)(void) = (void (*const *)(void))part;
    for (int i = 0; i < N; i++)
        if (from[i])
            to[i] = from[i];
}

/* every entry registered: an ops file left out fails here, at the device's opening,
 * not at its first call */
static void check_calls(void)
{
    enum { N = sizeof calls / sizeof(void (*)(void)) };
    void (*const *at)(void) = (void (*const *)(void))&calls;
    for (int i = 0; i < N; i++)
        if (!at[i])
            rt_die("GPU call %d of rt_gpu_calls is not registered (the ops files "
                   "register before the device opens)", i);
}

/* fp8-mixed needs FP8 tensor cores: refused (exit 1) on an older GPU, before its
 * kernels are compiled */
static void need_fp8(const rt_cu *d)
{
    if (d->cc_major * 10 + d->cc_minor < 89)
        rt_input_error("precision fp8-mixed: the GPU is %s, compute capability %d.%d, without "
                       "FP8 tensor cores (8.9 or newer: L4, L40, RTX 40xx, H100 and later)\n  hint: "
                       "build the trainer with --set precision=bf16-mixed, or train on the CPU "
                       "with --device cpu (fp32)", d->name, d->cc_major, d->cc_minor);
}

/* The GPU of local_rank opened, its context, streams and events made and the kernels
 * of img loaded; fp8: the trainer is fp8-mixed's (need_fp8) */
static rt_cu *cu_open(const rt_cuda_image *img, int local_rank, int quiet, int fp8)
{
    char why[512];
    int count = 0;
    if (rt_cu_probe(why, sizeof why, &count) != 0)
        rt_cu_no_device(why);
    /* NCCL takes one GPU per rank (a communicator refuses two ranks on one device) */
    if (rt_dist_world() > 1 && rt_dist_local_world() > count)
        rt_fail("%d ranks on this node but %d GPU%s: with --device cuda each rank needs a GPU "
                "of its own\n  hint: start at most %d rank%s per node (mpirun -np %d, or "
                "--map-by ppr:%d:node), or train on the CPU with --device cpu",
                rt_dist_local_world(), count, count == 1 ? "" : "s", count, count == 1 ? "" : "s",
                count, count);
    check_calls();
    rt_cu *d = rt_xmalloc(sizeof *d);
    d->calls = &calls;
    d->quiet = quiet;
    CU(p_cuDeviceGet(&d->dev, local_rank));
    CU(p_cuDeviceGetName(d->name, sizeof d->name, d->dev));
    CU(p_cuDeviceGetAttribute(&d->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->dev));
    CU(p_cuDeviceGetAttribute(&d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev));
    CU(p_cuDeviceGetAttribute(&d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev));
    snprintf(d->arch, sizeof d->arch, "sm_%d%d", d->cc_major, d->cc_minor);
    if (d->cc_major * 10 + d->cc_minor < RT_CU_MIN_SM)
        rt_fail("CUDA: the GPU is %s, compute capability %d.%d; trainc's kernels need %d.%d or "
                "newer (A100, A10, L4, RTX 30xx, H100 and later)\n  hint: --device cpu trains on "
                "the CPU", d->name, d->cc_major, d->cc_minor, RT_CU_MIN_SM / 10, RT_CU_MIN_SM % 10);
    if (fp8)
        need_fp8(d);
    /* the primary context: the one cuBLASLt (through the CUDA runtime) also uses */
    CU(p_cuDevicePrimaryCtxRetain(&d->ctx, d->dev));
    CU(p_cuCtxSetCurrent(d->ctx));
    CU(p_cuStreamCreate(&d->compute, CU_STREAM_NON_BLOCKING));
    CU(p_cuStreamCreate(&d->copy, CU_STREAM_NON_BLOCKING));
    CU(p_cuStreamCreate(&d->comm, CU_STREAM_NON_BLOCKING));
    CU(p_cuEventCreate(&d->fork_ev, CU_EVENT_DISABLE_TIMING));
    CU(p_cuEventCreate(&d->join_ev, CU_EVENT_DISABLE_TIMING));
    for (int s = 0; s < RT_CU_SLOTS; s++) {
        CU(p_cuEventCreate(&d->in_done[s], CU_EVENT_DISABLE_TIMING));
        CU(p_cuEventCreate(&d->slot_free[s], CU_EVENT_DISABLE_TIMING));
    }
    d->using = -1;
    d->capturing = -1;
    CU(p_cuEventCreate(&d->step_ev, CU_EVENT_DISABLE_TIMING));
    for (int k = 0; k < RT_CU_ORDERED; k++)
        CU(p_cuEventCreate(&d->ordered_ev[k], CU_EVENT_DISABLE_TIMING));
    load_module(d, img);
    size_t fr = 0, tot = 0;
    CU(p_cuMemGetInfo(&fr, &tot));
    d->context_bytes = tot - fr;
    return d;
}

/* ---- the calls rt_cuda.h promises ----------------------------------------------------- */

void rt_cu_launch(rt_exec *e, const char *name, unsigned gx, unsigned gy, unsigned gz,
                  unsigned bx, unsigned by, unsigned smem, void **args)
{
    rt_cu *d = dev_of(e);
    CUfunction f = lookup(d, name);
    /* a kernel's static and dynamic shared memory together past 48 KiB need the opt-in
     * (attention.cuh's wide backward: about 40 KiB static, 33 KiB dynamic) */
    if (smem > 0)
        CU(p_cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem));
    CUresult r = p_cuLaunchKernel(f, gx, gy, gz, bx, by, 1, smem, d->compute, args, NULL);
    if (r != CUDA_SUCCESS && d->capturing >= 0) {   /* the pass runs again without a graph */
        d->capture_err = r;
        return;
    }
    if (r != CUDA_SUCCESS)
        rt_fail("CUDA: launching %s (grid %u,%u,%u block %u,%u, %u bytes shared) failed: %s", name,
                gx, gy, gz, bx, by, smem, cu_err(r));
}

void rt_cu_launch_ew(rt_exec *e, const char *name, int64_t n, int nargs, void **args)
{
    rt_cu *d = dev_of(e);
    if (n <= 0)
        return;
    void *all[64 + 5];
    if (nargs > 64)
        rt_die("kernel %s has %d tensors", name, nargs);
    memcpy(all, args, sizeof(void *) * (size_t)nargs);
    all[nargs] = &e->B;
    all[nargs + 1] = &n;
    all[nargs + 2] = &e->rng_key;
    all[nargs + 3] = &e->train;
    all[nargs + 4] = &e->rng_part;   /* (a kernel without dropout does not declare it) */
    /* grid-stride loops, four or eight elements a thread where aligned (emit_cuda.c): enough
     * blocks to fill every SM several times over */
    int64_t blocks = ((n + 3) / 4 + 255) / 256, cap = (int64_t)d->sm_count * 16;
    rt_cu_launch(e, name, (unsigned)(blocks < cap ? blocks : cap), 1, 1, 256, 1, 0, all);
}

rt_dptr rt_cu_scratch(rt_exec *e, size_t bytes)
{
    rt_cu *d = dev_of(e);
    if (bytes > d->scratch_bytes)
        rt_fail("CUDA: a kernel needs %zu bytes of scratch, %zu were reserved (a sizing bug in "
                "trainc: please report it with the spec)", bytes, d->scratch_bytes);
    return d->scratch;
}

rt_dptr rt_cu_stats(rt_exec *e)
{
    rt_cu *d = dev_of(e);
    return d->stats + (rt_dptr)((size_t)d->stat_cur * sizeof(rt_cu_stat));
}

int rt_cu_sm_count(rt_exec *e) { return dev_of(e)->sm_count; }
/* The host waits for stream s. With NCCL (several GPUs) it polls instead: a reduction
 * whose peer died never completes, so between polls nccl.c checks NCCL's asynchronous
 * error and the time waited (nccl.c's header says why). Polls back off from a yield to
 * 100 us sleeps, so a step's end is seen within about 0.1 ms. */
/* The pinned host memory the device's statistics are copied into: RT_CU_RING places of
 * each pass's rt_cu_stat, then the places' doubles. */
static void pin_stats(rt_cu *d)
{
    CU(p_cuMemAllocHost((void **)&d->stats_host,
                        RT_CU_RING * ((size_t)d->n_stats * sizeof(rt_cu_stat) +
                                      RT_CU_F64 * sizeof(double))));
    d->f64_host = (double *)(d->stats_host + (size_t)RT_CU_RING * (size_t)d->n_stats);
}

/* One round of a polled wait begun at t0 (the k-th): with NCCL, its error and timeout
 * watched; then a yield, or after the first thousand rounds a 100 us sleep. */
static void poll_pause(rt_cu *d, double t0, long k)
{
    if (d->watch_comm)
        rt_nccl_watch(rt_now() - t0);
    if (k < 1000) {
        sched_yield();
    } else {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
}

static void cu_wait(rt_cu *d, CUstream s)
{
    if (!d->watch_comm) {
        CU(p_cuStreamSynchronize(s));
        return;
    }
    double t0 = rt_now();
    for (long k = 0;; k++) {
        CUresult r = p_cuStreamQuery(s);
        if (r == CUDA_SUCCESS)
            return;
        if (r != CUDA_ERROR_NOT_READY)
            CU(r);
        poll_pause(d, t0, k);
    }
}

void rt_cu_watch_comm(rt_exec *e) { dev_of(e)->watch_comm = 1; }
void rt_cu_sync(rt_exec *e) { cu_wait(dev_of(e), dev_of(e)->compute); }
void *rt_cu_stream(rt_exec *e) { return dev_of(e)->compute; }
void *rt_cu_comm_stream(rt_exec *e) { return dev_of(e)->comm; }

void rt_cu_fork_comm(rt_exec *e)
{
    rt_cu *d = dev_of(e);
    CU(p_cuEventRecord(d->fork_ev, d->compute));
    CU(p_cuStreamWaitEvent(d->comm, d->fork_ev, 0));
}

void rt_cu_join_comm(rt_exec *e)
{
    rt_cu *d = dev_of(e);
    CU(p_cuEventRecord(d->join_ev, d->comm));
    CU(p_cuStreamWaitEvent(d->compute, d->join_ev, 0));
}
rt_dptr rt_cu_workspace(rt_exec *e, size_t *bytes)
{
    *bytes = dev_of(e)->workspace_bytes;
    return dev_of(e)->workspace;
}

rt_dptr rt_cu_alloc(size_t bytes)
{
    rt_dptr p = 0;
    CU(p_cuMemAlloc(&p, bytes ? bytes : 1));
    CU(p_cuMemsetD8Async(p, 0, bytes ? bytes : 1, CU_STREAM_LEGACY));
    CU(p_cuStreamSynchronize(CU_STREAM_LEGACY));
    return p;
}

rt_dptr rt_cu_try_alloc(rt_exec *e, size_t bytes)
{
    rt_dptr p = 0;
    CUresult r = p_cuMemAlloc(&p, bytes ? bytes : 1);
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return 0;
    CU(r);
    dev_of(e)->fixed_bytes += bytes ? bytes : 1;
    return p;
}

rt_dptr rt_cu_alloc_fixed(rt_exec *e, size_t bytes)
{
    dev_of(e)->fixed_bytes += bytes ? bytes : 1;
    return rt_cu_alloc(bytes);
}

rt_dptr rt_cu_const(rt_exec *e, const void *data, size_t bytes)
{
    rt_cu *d = dev_of(e);
    for (int k = 0; k < d->n_consts; k++)
        if (d->consts[k].bytes == bytes && !memcmp(d->consts[k].host, data, bytes))
            return d->consts[k].dev;
    struct cu_const *c = realloc(d->consts, (size_t)(d->n_consts + 1) * sizeof *c);
    void *host = malloc(bytes ? bytes : 1);
    if (!c || !host)
        rt_fail("out of memory keeping %zu bytes of constants", bytes);
    d->consts = c;
    memcpy(host, data, bytes);
    rt_dptr dev = rt_cu_alloc_fixed(e, bytes);
    rt_cu_upload(dev, data, bytes);
    d->consts[d->n_consts++] = (struct cu_const){host, bytes, dev};
    return dev;
}

/* Synchronous for real: a copy from pageable memory may return before the DMA ends,
 * and the compute stream (non-blocking) does not wait for the legacy stream. */
void rt_cu_upload(rt_dptr dst, const void *src, size_t bytes)
{
    if (bytes)
        CU(p_cuMemcpyHtoD(dst, src, bytes));
    CU(p_cuStreamSynchronize(CU_STREAM_LEGACY));
}

/* Buffer k's copy (pinned host memory) queued on the compute stream: after the work
 * queued so far, before what is queued next; the host goes on at once. */
void rt_cu_upload_ordered(rt_exec *e, rt_dptr dst, const void *src, size_t bytes, int k)
{
    rt_cu *d = dev_of(e);
    if (k < 0 || k >= RT_CU_ORDERED)
        rt_die("rt_cu_upload_ordered: buffer %d", k);
    if (bytes)
        CU(p_cuMemcpyHtoDAsync(dst, src, bytes, d->compute));
    CU(p_cuEventRecord(d->ordered_ev[k], d->compute));
}

/* Waits until buffer k's last ordered copy is done (the host may write it again; an
 * event never recorded is no wait). */
void rt_cu_upload_ordered_wait(rt_exec *e, int k)
{
    rt_cu *d = dev_of(e);
    if (k < 0 || k >= RT_CU_ORDERED)
        rt_die("rt_cu_upload_ordered_wait: buffer %d", k);
    CU(p_cuEventSynchronize(d->ordered_ev[k]));
}

/* Queued on the compute stream, in order with the passes; the host goes on at once. */
void rt_cu_copy_dd(rt_exec *e, rt_dptr dst, rt_dptr src, size_t bytes)
{
    if (bytes)
        CU(p_cuMemcpyDtoDAsync(dst, src, bytes, dev_of(e)->compute));
}

void rt_cu_download(void *dst, rt_dptr src, size_t bytes)
{
    if (bytes)
        CU(p_cuMemcpyDtoH(dst, src, bytes));
}

/* ---- the trainer's use of the device (setup.c, step.c) ------------------------------ */

static size_t align_up(size_t n) { return (n + 255) & ~(size_t)255; }

/* a batch row of an input as the kernels read it (u8/u16 ids widened to i32) */
static size_t input_row_bytes(const rt_input *in)
{
    int dt = rt_batch_dtype(in);
    size_t el = dt == RT_U8 ? 1 : dt == RT_U16 ? 2 : 4;
    return (size_t)in->numel * el;
}

/* Scratch: the largest any op asks for: per-row values of a loss (two doubles a term),
 * per-block partials of reductions over a parameter (grad norm, layernorm's dw/db),
 * and a fixed part. Computed from the model, so no call in the loop can outgrow it. */
static size_t scratch_need(int64_t Bmax, int64_t loss_terms, int64_t param_floats,
                           int64_t scratch_row_bytes, int64_t scratch_fixed)
{
    size_t s = (size_t)Bmax * (size_t)(loss_terms > 0 ? loss_terms : 1) * 16;
    size_t p = (size_t)param_floats * 4 / 16;   /* generous for block partials */
    if (p > s)
        s = p;
    /* attention backward; fp8-mixed's FP8 copies: their rows', then the weight's */
    size_t a = (size_t)Bmax * (size_t)scratch_row_bytes + (size_t)scratch_fixed;
    if (a > s)
        s = a;
    return align_up(s) + (16u << 20);
}

#define CUBLASLT_WORKSPACE (32u << 20)

int64_t rt_fp8_scratch_fixed(int64_t weight_bytes)
{
    /* 256 for the scales, the partials, and each copy's alignment (a backward pair's
     * three: dy, dy^T and B) */
    return weight_bytes > 0 ? weight_bytes + 256 + 1024 + 3 * 256 : 0;
}

size_t rt_gpu_fixed_bytes(int64_t Bmax, int n_inputs, const int64_t *in_row_bytes, int passes,
                          int64_t loss_terms, int64_t param_floats, int64_t scratch_row_bytes,
                          int64_t scratch_fixed)
{
    size_t fixed = 0;
    for (int k = 0; k < n_inputs; k++)
        fixed += RT_CU_SLOTS * align_up((size_t)Bmax * (size_t)in_row_bytes[k]);
    fixed += RT_CU_SLOTS * align_up((size_t)Bmax * 4);   /* the index slots */
    fixed += align_up((size_t)(passes > 1 ? passes : 1) * sizeof(rt_cu_stat));
    return fixed + scratch_need(Bmax, loss_terms, param_floats, scratch_row_bytes, scratch_fixed) +
           CUBLASLT_WORKSPACE;
}

size_t rt_gpu_fixed_of(const rt_model *m, const rt_train_config *c, int64_t Bmax, int passes)
{
    int64_t rows[RT_MAX_INPUTS];
    for (int k = 0; k < m->n_inputs; k++)
        rows[k] = (int64_t)input_row_bytes(&m->inputs[k]);
    int64_t *numel = rt_xmalloc((size_t)(m->n_params ? m->n_params : 1) * sizeof *numel);
    for (int i = 0; i < m->n_params; i++)
        numel[i] = m->params[i].numel;
    size_t table = rt_opt_table_bytes(m->n_params, numel);
    int64_t fp8 = rt_fp8_scratch_fixed(m->fp8 ? m->fp8_weight_bytes : 0);
    rt_xfree(numel);
    return rt_gpu_fixed_bytes(Bmax, m->n_inputs, rows, passes, m->loss_terms, m->param_floats,
                              m->gpu_scratch_row_bytes, fp8) + table + rt_cu_muon_work_bytes(c, m);
}

static void gr_setup(rt_cu *d, int64_t P, int64_t lo, int64_t hi);
static int params_reserved(rt_cu *d, size_t bytes, size_t held);

void rt_cu_init(rt_exec *e, const rt_model *m, const rt_cuda_image *img, int64_t Bmax,
                int64_t arena_row_bytes, int64_t state_floats, int passes, int local_rank,
                int64_t glo, int64_t ghi)
{
    rt_cu *d = cu_open(img, local_rank, local_rank != 0, m->fp8);
    e->dev = d;
    d->n_stats = passes > 1 ? passes : 1;
    d->n_graphs = 2 * d->n_stats + 12;   /* (validation: 2 slots x 2 batch sizes) */
    d->graphs = calloc((size_t)d->n_graphs, sizeof *d->graphs);
    if (!d->graphs)
        rt_fail("out of memory");
    e->Bmax = Bmax;
    size_t pf = (size_t)m->param_floats * 4;
    d->act16 = m->act16;
    d->param_bytes = pf;
    /* mixed precision: the frozen weights only GEMMs read are held in the 16-bit copy
     * alone; the fp32 region keeps its addresses (rt_cu_operand maps them) in a
     * reservation of its own, backed as far as fp32 values are held */
    d->f32_bytes = d->act16 && m->gpu_fp32_floats ? (size_t)m->gpu_fp32_floats * 4 : pf;
    int apart = d->f32_bytes < pf && params_reserved(d, pf, d->f32_bytes);
    if (!apart)
        d->f32_bytes = pf;
    size_t in_pool = apart ? 0 : align_up(pf);
    size_t copy = d->act16 ? align_up((size_t)m->param_floats * 2) : 0;
    /* the gradients of the trained parameters alone (train.freeze's are laid out after
     * them); zero2's outside the pool, in a region backed on demand */
    int64_t tf = m->trainable_floats;
    int sharded = glo != 0 || ghi != tf;
    size_t gb = sharded ? 0 : align_up((size_t)tf * 4);
    d->lstate_bytes = (size_t)m->state_floats * 4;
    size_t sink = align_up((size_t)m->sink_floats * 4);   /* (frozen gradients, never read) */
    d->pool_bytes = in_pool + gb + align_up((size_t)state_floats * 4) +
                    align_up(d->lstate_bytes) + sink + copy;
    d->arena_bytes = align_up((size_t)(Bmax * arena_row_bytes));
    int64_t fp8 = rt_fp8_scratch_fixed(m->fp8 ? m->fp8_weight_bytes : 0);
    d->scratch_bytes = scratch_need(Bmax, m->loss_terms, m->param_floats,
                                    m->gpu_scratch_row_bytes, fp8);
    d->workspace_bytes = CUBLASLT_WORKSPACE;
    for (int k = 0; k < m->n_inputs; k++)
        d->in_bytes[k] = (size_t)Bmax * input_row_bytes(&m->inputs[k]);
    /* the layout below, in the order rt_gpu_fixed_bytes adds it up (the optimizer's
     * chunk table comes with rt_cu_optim_setup, for this rank's range) */
    int64_t rows[RT_MAX_INPUTS];
    for (int k = 0; k < m->n_inputs; k++)
        rows[k] = (int64_t)input_row_bytes(&m->inputs[k]);
    d->fixed_bytes = rt_gpu_fixed_bytes(Bmax, m->n_inputs, rows, d->n_stats, m->loss_terms,
                                        m->param_floats, m->gpu_scratch_row_bytes, fp8);
    d->pool = rt_cu_alloc(d->pool_bytes);
    d->arena = rt_cu_alloc(d->arena_bytes);
    d->fixed = rt_cu_alloc(d->fixed_bytes);
    rt_dptr p = d->fixed;
    for (int k = 0; k < m->n_inputs; k++)
        for (int s = 0; s < RT_CU_SLOTS; s++) {
            d->in[s][k] = p;
            p += align_up(d->in_bytes[k]);
        }
    for (int s = 0; s < RT_CU_SLOTS; s++) {
        d->idx[s] = p;
        d->slot_set[s] = -1;
        p += align_up((size_t)Bmax * 4);
    }
    d->stats = p;
    p += align_up((size_t)d->n_stats * sizeof(rt_cu_stat));
    d->scratch = p;
    p += d->scratch_bytes;
    d->workspace = p;
    pin_stats(d);
    e->arena = (char *)(uintptr_t)d->arena;
    if (!apart)
        d->params = d->pool;
    e->params = (float *)(uintptr_t)d->params;
    if (sharded) {
        gr_setup(d, tf, glo, ghi);
        e->grads = (float *)(uintptr_t)d->gr->base;
    } else {
        e->grads = (float *)(uintptr_t)(d->pool + in_pool);
    }
    d->state = d->pool + in_pool + gb;
    d->lstate = d->state + align_up((size_t)state_floats * 4);
    e->state = m->n_state ? (float *)(uintptr_t)d->lstate : NULL;
    d->pcopy = d->act16 ? d->pool + d->pool_bytes - copy : 0;
    if (sink) {
        e->sink = (float *)(uintptr_t)(d->pool + d->pool_bytes - copy - sink);
        rt_cu_zero(e, (rt_dptr)(uintptr_t)e->sink, m->sink_floats);
    }
    rt_cu_fp8_setup(e, m);   /* fp8-mixed's maxima (nothing otherwise) */
    CU(p_cuStreamSynchronize(0));
}

rt_dptr rt_cu_state(rt_exec *e) { return dev_of(e)->state; }
rt_dptr rt_cu_param_copy(rt_exec *e) { return dev_of(e)->pcopy; }
int rt_cu_act16(rt_exec *e) { return dev_of(e)->act16; }

int rt_cu_operand(rt_exec *e, const void **p)
{
    rt_cu *d = dev_of(e);
    rt_dptr a = (rt_dptr)(uintptr_t)*p;
    int half = d->act16 == RT_PREC_FP16 ? RT_CU_F16 : RT_CU_BF16;
    if (!d->act16)
        return RT_CU_F32;
    if (a >= d->params && a < d->params + d->param_bytes) {
        *p = (const void *)(uintptr_t)(d->pcopy + (a - d->params) / 2);
        return half;
    }
    if (a >= d->arena && a < d->arena + d->arena_bytes)
        return half;
    return RT_CU_F32;
}

size_t rt_cu_allocated(rt_exec *e, size_t *pool, size_t *arena, size_t *fixed)
{
    rt_cu *d = dev_of(e);
    *pool = d->pool_bytes;
    *arena = d->arena_bytes;
    *fixed = d->fixed_bytes;
    if (d->gr)   /* zero2's gradient chunks (the shard's, and those created since) */
        *pool += (size_t)d->gr->created * d->gr->gran;
    *pool += d->params_apart;   /* (the fp32 parameters, where reserved apart) */
    return *pool + d->arena_bytes + d->fixed_bytes + d->data_bytes;
}

const char *rt_cu_name(rt_exec *e) { return dev_of(e)->name; }
size_t rt_cu_context_bytes(rt_exec *e) { return dev_of(e)->context_bytes; }
const char *rt_cu_arch(rt_exec *e) { return dev_of(e)->arch; }
int rt_cu_sm90a(rt_exec *e) { return !strcmp(dev_of(e)->mod_arch, "sm_90a"); }

int rt_cu_tmap16(void *map, const void *base, int f16, const uint64_t dim[3],
                 const uint64_t stride[2], const uint32_t box[3])
{
    const cuuint32_t es[3] = {1, 1, 1};
    CUresult r = p_cuTensorMapEncodeTiled(
        (CUtensorMap *)map, f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3,
        (void *)base, dim, stride, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? 0 : -1;
}
const char *rt_cu_kernels_from(rt_exec *e) { return dev_of(e)->kernels_from; }

void rt_cu_mem_info(size_t *free_b, size_t *total)
{
    CU(p_cuMemGetInfo(free_b, total));
}

/* The frozen weights held in 16 bits alone ([f32_bytes, param_bytes) of the region):
 * their 16-bit copy made here, as rt_param_copy rounds (rt_half.h), and uploaded */
static void upload_copy16_only(rt_cu *d, const rt_model *m, const float *params)
{
    enum { CHUNK = 1 << 20 };
    int64_t lo = (int64_t)(d->f32_bytes / 4), n = m->param_floats - lo;
    if (n <= 0 || !d->pcopy)
        return;
    uint16_t *h = rt_xmalloc((size_t)(n < CHUNK ? n : CHUNK) * sizeof *h);
    for (int64_t at = 0; at < n; at += CHUNK) {
        int64_t k = n - at < CHUNK ? n - at : CHUNK;
        const float *x = params + lo + at;
        for (int64_t i = 0; i < k; i++)
            h[i] = d->act16 == RT_PREC_FP16 ? rt_float_to_f16(x[i]) : rt_float_to_bf16(x[i]);
        rt_cu_upload(d->pcopy + (size_t)(lo + at) * 2, h, (size_t)k * 2);
    }
    rt_xfree(h);
}

void rt_cu_put_params(rt_exec *e, const rt_model *m, const float *params,
                      const float *layer_state, const float *state, int64_t state_floats)
{
    rt_cu *d = dev_of(e);
    rt_cu_upload(d->params, params, d->f32_bytes);
    upload_copy16_only(d, m, params);
    if (layer_state && d->lstate_bytes)
        rt_cu_upload(d->lstate, layer_state, d->lstate_bytes);
    if (state && state_floats)
        rt_cu_upload(d->state, state, (size_t)state_floats * 4);
    rt_cu_copy_params16(e, m);
}

void rt_cu_copy_params16(rt_exec *e, const rt_model *m)
{
    rt_cu *d = dev_of(e);
    if (d->pcopy) {
        rt_dptr p = d->params;
        int64_t n = (int64_t)(d->f32_bytes / 4);   /* (the rest: upload_copy16_only's) */
        void *args[] = {&p, &d->pcopy, &n};
        rt_cu_launch(e, "rt_param_copy", rt_cu_grid_for(e, n), 1, 1, 256, 1, 0, args);
        if (m->fp8)   /* the FP8 casts' maxima of the weights: the optimizer's from now on */
            rt_cu_fp8_weights_amax(e, m, d->pcopy);
    }
}

void rt_cu_get_params(rt_exec *e, const rt_model *m, float *params, float *layer_state,
                      float *state, int64_t state_floats)
{
    rt_cu *d = dev_of(e);
    cu_wait(d, d->compute);
    /* (past f32_bytes: frozen weights, which the host's copy holds as they were) */
    rt_cu_download(params, d->params, d->f32_bytes);
    if (layer_state && d->lstate_bytes)
        rt_cu_download(layer_state, d->lstate, d->lstate_bytes);
    if (state && state_floats)
        rt_cu_download(state, d->state, (size_t)state_floats * 4);
}

void rt_cu_layer_state(rt_exec *e, float *host, int upload)
{
    rt_cu *d = dev_of(e);
    if (!d->lstate_bytes)
        return;
    if (upload) {
        rt_cu_upload(d->lstate, host, d->lstate_bytes);
        return;
    }
    cu_wait(d, d->compute);
    rt_cu_download(host, d->lstate, d->lstate_bytes);
}

/* Loader buffers are page-locked once, so copies from them are true DMA and run
 * asynchronously on the copy stream. */
void rt_cu_pin(void *p, size_t n, void *ctx)
{
    (void)ctx;
    if (n)
        CU(p_cuMemHostRegister(p, n, 0));
}

/* Before a copy into slot `slot`: the copy stream waits until the compute stream is
 * done with what it queued that reads the slot (the slot in use now: everything queued
 * so far; another: up to when it was left, see rt_cu_use_slot). An event never
 * recorded is no wait. */
static void slot_wait_free(rt_cu *d, int slot)
{
    if (slot == d->using)
        CU(p_cuEventRecord(d->slot_free[slot], d->compute));
    CU(p_cuStreamWaitEvent(d->copy, d->slot_free[slot], 0));
}

/* A batch's inputs into device slot `slot`, on the copy stream: the host goes on at
 * once. The compute stream waits for the copy when the slot is used. */
void rt_cu_upload_batch(rt_exec *e, const rt_model *m, const void *const *in, int64_t rows,
                        int slot)
{
    rt_cu *d = dev_of(e);
    slot_wait_free(d, slot);
    for (int k = 0; k < m->n_inputs; k++) {
        size_t n = (size_t)rows * input_row_bytes(&m->inputs[k]);
        CU(p_cuMemcpyHtoDAsync(d->in[slot][k], in[k], n, d->copy));
    }
    CU(p_cuEventRecord(d->in_done[slot], d->copy));
    d->last = slot;
    d->slot_set[slot] = -1;
}

/* ---- a dataset kept in GPU memory (loader.on_gpu) ---------------------------------- */

size_t rt_cu_data_bytes(const rt_model *m, int64_t rows)
{
    size_t n = 0;
    for (int k = 0; k < m->n_inputs; k++)
        n += align_up((size_t)rows * input_row_bytes(&m->inputs[k]));
    return n;
}

void rt_cu_data_put(rt_exec *e, const rt_model *m, const rt_dataset *ds, int set)
{
    rt_cu *d = dev_of(e);
    if (ds->tokens || set < 0 || set > 1)
        rt_die("rt_cu_data_put: token data or set %d", set);
    size_t all = rt_cu_data_bytes(m, ds->rows);
    rt_dptr p = rt_cu_alloc(all);
    d->data_bytes += all;
    /* in the batches' dtypes (rt_npy_gather narrows i64 and widens u8/u16 ids to i32), a
     * chunk of rows at a time */
    const int64_t chunk = 1 << 16;
    int64_t *seq = rt_xmalloc((size_t)chunk * sizeof *seq);
    size_t most = 0;
    for (int k = 0; k < m->n_inputs; k++)
        if (input_row_bytes(&m->inputs[k]) > most)
            most = input_row_bytes(&m->inputs[k]);
    unsigned char *buf = rt_xmalloc((size_t)chunk * most);
    for (int k = 0; k < m->n_inputs; k++) {
        size_t rb = input_row_bytes(&m->inputs[k]);
        d->data[set][k] = p;
        for (int64_t r0 = 0; r0 < ds->rows; r0 += chunk) {
            int64_t n = ds->rows - r0 < chunk ? ds->rows - r0 : chunk;
            for (int64_t i = 0; i < n; i++)
                seq[i] = r0 + i;
            rt_npy_gather(&ds->arr[k], seq, n, buf, rt_batch_dtype(&m->inputs[k]));
            rt_cu_upload(p + (rt_dptr)((size_t)r0 * rb), buf, (size_t)n * rb);
        }
        p += align_up((size_t)ds->rows * rb);
    }
    rt_xfree(buf);
    rt_xfree(seq);
}

size_t rt_cu_data_allocated(rt_exec *e) { return dev_of(e)->data_bytes; }

/* A batch given by its sample indices into dataset `set` (on the device): the indices
 * go into slot `slot` (copy stream); rt_cu_use_slot gathers the rows. */
void rt_cu_upload_index(rt_exec *e, const int32_t *idx, int64_t rows, int slot, int set)
{
    rt_cu *d = dev_of(e);
    if (!d->data[set][0])
        rt_die("rt_cu_upload_index: dataset %d is not on the GPU", set);
    slot_wait_free(d, slot);
    CU(p_cuMemcpyHtoDAsync(d->idx[slot], idx, (size_t)rows * 4, d->copy));
    CU(p_cuEventRecord(d->in_done[slot], d->copy));
    d->last = slot;
    d->slot_set[slot] = set;
}

void rt_cu_set_augment(rt_exec *e, int64_t pad, int hflip, uint64_t seed)
{
    rt_cu *d = dev_of(e);
    d->aug = 1;
    d->aug_pad = pad;
    d->aug_hflip = hflip;
    d->aug_seed = seed;
}

void rt_cu_set_mask(rt_exec *e, const rt_mask_rule *k, int in, int tgt)
{
    rt_cu *d = dev_of(e);
    d->mask = 1;
    d->mask_rule = *k;
    d->mask_in = in;
    d->mask_tgt = tgt;
}

void rt_cu_set_rrc(rt_exec *e, const rt_rrc *k)
{
    rt_cu *d = dev_of(e);
    d->aug_rrc = 1;
    d->rrc = *k;
}

void rt_cu_set_jitter(rt_exec *e, const rt_jitter *k)
{
    rt_cu *d = dev_of(e);
    d->aug_jitter = 1;
    d->jitter = *k;
}

void rt_cu_slot_epoch(rt_exec *e, int slot, int64_t epoch) { dev_of(e)->slot_epoch[slot] = epoch; }

/* Input k of training images gathered into slot `slot`, cropped (or resized-cropped) and
 * flipped on the way, then color-jittered in place (loader.augment) */
static void gather_augmented(rt_exec *e, rt_cu *d, const rt_input *in, int slot, int k,
                             int64_t rows, int64_t elem)
{
    const void *src = (const void *)(uintptr_t)d->data[0][k];
    const int32_t *idx = (const int32_t *)(uintptr_t)d->idx[slot];
    void *dst = (void *)(uintptr_t)d->in[slot][k];
    int64_t C = in->shape[0], H = in->shape[1], W = in->shape[2], ep = d->slot_epoch[slot];
    if (d->aug_rrc)   /* (u8 images) */
        rt_cu_gather_resized_crop(e, src, idx, dst, rows, C, H, W, &d->rrc, d->aug_hflip,
                                  d->aug_seed, ep);
    else
        rt_cu_gather_augment(e, src, idx, dst, rows, C, H, W, elem, d->aug_pad, d->aug_hflip,
                             d->aug_seed, ep);
    if (d->aug_jitter)   /* (u8 images of 1 or 3 channels) */
        rt_cu_color_jitter(e, dst, idx, rows, C, H, W, &d->jitter, d->aug_seed, ep);
}

/* The next kernels read slot `slot`: e->in points there, and the compute stream waits
 * for the slot's copy. */
void rt_cu_use_slot(rt_exec *e, const rt_model *m, int slot, int64_t rows)
{
    rt_cu *d = dev_of(e);
    if (d->using >= 0 && d->using != slot)   /* what is queued so far read the slot left */
        CU(p_cuEventRecord(d->slot_free[d->using], d->compute));
    d->using = slot;
    for (int k = 0; k < m->n_inputs; k++)
        e->in[k] = (const void *)(uintptr_t)d->in[slot][k];
    CU(p_cuStreamWaitEvent(d->compute, d->in_done[slot], 0));
    e->B = rows;
    int set = d->slot_set[slot];
    for (int k = 0; set >= 0 && k < m->n_inputs; k++) {   /* the rows, from the dataset */
        int64_t rb = (int64_t)input_row_bytes(&m->inputs[k]);
        const rt_input *in = &m->inputs[k];
        if (set == 0 && d->aug && in->rank == 3) {   /* training images: augmented */
            gather_augmented(e, d, in, slot, k, rows, rb / in->numel);
            continue;
        }
        void *args[] = {&d->data[set][k], &d->idx[slot], &d->in[slot][k], &rows, &rb};
        rt_cu_launch(e, "rt_gather_rows", rt_cu_grid_for(e, rows * rb / 16), 1, 1, 256, 1, 0, args);
    }
    if (set == 0 && d->mask)   /* a masked LM's training rows: masked as gathered */
        rt_cu_mask_tokens(e, (void *)(uintptr_t)d->in[slot][d->mask_in],
                          (void *)(uintptr_t)d->in[slot][d->mask_tgt],
                          (const int32_t *)(uintptr_t)d->idx[slot], rows,
                          m->inputs[d->mask_in].numel, &d->mask_rule, d->slot_epoch[slot]);
}

/* The host buffers of the last upload may be reused once this returns. */
void rt_cu_upload_done(rt_exec *e)
{
    rt_cu *d = dev_of(e);
    CU(p_cuEventSynchronize(d->in_done[d->last]));
}

void rt_cu_begin_pass(rt_exec *e, int pass)
{
    rt_cu *d = dev_of(e);
    if (pass < 0 || pass >= d->n_stats)
        rt_die("rt_cu_begin_pass: pass %d of a step, set up for %d", pass, d->n_stats);
    d->stat_cur = pass;
    CU(p_cuMemsetD8Async(rt_cu_stats(e), 0, sizeof(rt_cu_stat), d->compute));
    e->loss_sum = 0;
    e->correct = 0;
    e->terms = 0;
    e->margin_sum = 0;
}

/* The end of a step's last pass without waiting for it: the statistics of its passes
 * (0 to the current one) and the n doubles at f64 (the gradients' sum of squares, a
 * GAN's two; 0: none) are copied to the next place of the pinned host memory behind the
 * work queued so far, and an event marks the copies done. The host then may queue the
 * update, and rt_cu_step_wait waits for the copies only, while the GPU goes on with the
 * update. */
void rt_cu_step_queue(rt_exec *e, rt_dptr f64, int n)
{
    rt_cu *d = dev_of(e);
    if (n < 0 || n > RT_CU_F64)
        rt_die("rt_cu_step_queue: %d doubles", n);
    int at = d->ring = (d->ring + 1) % RT_CU_RING;
    d->ring_passes[at] = d->stat_cur + 1;
    CU(p_cuMemcpyDtoHAsync(d->stats_host + (size_t)at * (size_t)d->n_stats, d->stats,
                           (size_t)(d->stat_cur + 1) * sizeof(rt_cu_stat), d->compute));
    double *h = &d->f64_host[at * RT_CU_F64];
    for (int i = 0; i < RT_CU_F64; i++)
        h[i] = 0.0;
    if (f64 && n)
        CU(p_cuMemcpyDtoHAsync(h, f64, (size_t)n * sizeof(double), d->compute));
    CU(p_cuEventRecord(d->step_ev, d->compute));
}

int rt_cu_step_place(rt_exec *e) { return dev_of(e)->ring; }

const rt_cu_stat *rt_cu_place_stat(rt_exec *e, int at, int pass)
{
    rt_cu *d = dev_of(e);
    if (at < 0 || at >= RT_CU_RING || pass < 0 || pass >= d->ring_passes[at])
        rt_die("rt_cu_place_stat: place %d pass %d", at, pass);
    return &d->stats_host[(size_t)at * (size_t)d->n_stats + (size_t)pass];
}

double rt_cu_place_f64(rt_exec *e, int at, int i)
{
    if (at < 0 || at >= RT_CU_RING || i < 0 || i >= RT_CU_F64)
        rt_die("rt_cu_place_f64: place %d, double %d", at, i);
    return dev_of(e)->f64_host[at * RT_CU_F64 + i];
}

/* --profile (prof.c): n timing events, made before the loop; event k of a pass is
 * recorded on the compute stream at its k-th instruction */
void rt_cu_prof_setup(rt_exec *e, int n)
{
    rt_cu *d = dev_of(e);
    d->prof_ev = rt_xmalloc((size_t)n * sizeof *d->prof_ev);
    for (int i = 0; i < n; i++)
        CU(p_cuEventCreate(&d->prof_ev[i], CU_EVENT_DEFAULT));
    d->n_prof_ev = n;
}

void rt_cu_prof_event(rt_exec *e, int k)
{
    rt_cu *d = dev_of(e);
    if (k >= d->n_prof_ev)
        rt_die("rt_cu_prof_event: event %d of %d", k, d->n_prof_ev);
    CU(p_cuEventRecord(d->prof_ev[k], d->compute));
}

/* After a pass with n events: one more at its end, a wait for it, and ms[k] the time
 * from event k to event k + 1 */
void rt_cu_prof_elapsed(rt_exec *e, int n, float *ms)
{
    rt_cu *d = dev_of(e);
    rt_cu_prof_event(e, n);
    cu_wait(d, d->compute);
    for (int k = 0; k < n; k++)
        CU(p_cuEventElapsedTime(&ms[k], d->prof_ev[k], d->prof_ev[k + 1]));
}

/* Waits for the last rt_cu_step_queue's copies (the event follows all the work queued
 * before them, the earlier places' copies too), adds its last pass's statistics into e
 * and returns its double. */
double rt_cu_step_wait(rt_exec *e)
{
    rt_cu *d = dev_of(e);
    if (d->watch_comm)
        cu_wait(d, d->compute);   /* with NCCL: polled, the whole stream */
    else
        CU(p_cuEventSynchronize(d->step_ev));
    const rt_cu_stat *st = rt_cu_place_stat(e, d->ring, d->ring_passes[d->ring] - 1);
    e->loss_sum += st->loss_sum;
    e->correct += (int64_t)st->correct;
    e->terms += (int64_t)st->terms;   /* (0 but under ignore_index: the host counts them) */
    e->margin_sum += st->margin_sum;
    return d->f64_host[d->ring * RT_CU_F64];
}

const rt_cu_stat *rt_cu_pass_stat(rt_exec *e, int pass)
{
    return rt_cu_place_stat(e, dev_of(e)->ring, pass);
}

/* Waits for the pass and adds the device's loss sum and correct count into e. */
void rt_cu_end_pass(rt_exec *e)
{
    rt_cu_step_queue(e, 0, 0);
    rt_cu_step_wait(e);
}

/* A call on the compute stream inside a pass: while a graph is captured, a failure is
 * kept for rt_cu_graph_end (the pass then runs again without one), else it ends the run. */
static void pass_call(rt_cu *d, CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS && d->capturing >= 0)
        d->capture_err = r;
    else
        cu_check(r, what, __FILE__, __LINE__);
}

void rt_cu_zero(rt_exec *e, rt_dptr p, int64_t floats)
{
    rt_cu *d = dev_of(e);
    pass_call(d, p_cuMemsetD32Async(p, 0, (size_t)floats, d->compute), "cuMemsetD32Async");
}

void rt_cu_zero16(rt_exec *e, rt_dptr p, int64_t halves)
{
    rt_cu *d = dev_of(e);
    pass_call(d, p_cuMemsetD16Async(p, 0, (size_t)halves, d->compute), "cuMemsetD16Async");
}

int rt_cu_capture_failed(rt_exec *e, int status)
{
    rt_cu *d = dev_of(e);
    if (d->capturing < 0)
        return 0;
    if (status != 0 && d->capture_err == CUDA_SUCCESS)
        d->capture_err = CUDA_ERROR_UNKNOWN;
    return 1;
}

/* ---- graphs of training passes ----------------------------------------------------------
 *
 * A small model's pass is a few dozen short kernels, and at a small batch the host's
 * launches (cuLaunchKernel, cublasLtMatmul: microseconds each) take longer than the GPU
 * takes to run them. The loop (rt_main) brackets each training pass, and each
 * validation pass, with rt_cu_graph_begin/end: the first pass of a kind (key: training
 * or validation, the input slot, the pass of the step, whether gradients start at
 * zero, the batch size, the loss scale) runs as always, which also settles every
 * choice the host code makes once (cuBLASLt's plans and fallbacks, lazily loaded
 * kernels); the second is captured into a graph (stream
 * capture records the same calls with the same arguments instead of running them),
 * then launched; later ones launch the graph, one call. The GPU runs the same kernels
 * with the same arguments in the same order either way, so the numbers are the same
 * bits. What the pass leaves on the host (e->terms) is kept with the graph.
 *
 * A capture that fails (the driver refuses it or a call in it) runs the pass again
 * without a graph, and graphs stay off for the run, said once on stderr. Off by the
 * loop for dropout (its key changes every step), data parallelism, zero2 and --profile;
 * TRAINC_CUDA_GRAPH=0 turns them off. */

void rt_cu_graphs_enable(rt_exec *e, int on)
{
    rt_cu *d = dev_of(e);
    d->graphs_on = on && !d->gr && !d->watch_comm;
}

static void graphs_off(rt_cu *d, const char *what, CUresult r)
{
    d->graphs_on = 0;
    for (int i = 0; i < d->n_graphs; i++)
        if (d->graphs[i].exec) {
            p_cuGraphExecDestroy(d->graphs[i].exec);   /* (a launch still queued keeps it) */
            d->graphs[i].exec = NULL;
        }
    if (!d->quiet)
        fprintf(stderr, "trainc: note: CUDA graphs are off for this run: %s failed (%s); each "
                "pass is launched call by call, with the same results\n", what, cu_err(r));
}

int rt_cu_graph_begin(rt_exec *e)
{
    rt_cu *d = dev_of(e);
    if (!d->graphs_on || e->prof)
        return RT_CU_GRAPH_NONE;
    struct pass_graph *g = NULL, *lru = &d->graphs[0];
    for (int i = 0; i < d->n_graphs; i++) {
        struct pass_graph *q = &d->graphs[i];
        if (q->used && q->train == e->train && q->slot == d->using && q->pass == d->stat_cur &&
            q->grads_zero == e->grads_zero && q->B == e->B &&
            memcmp(&q->grad_scale, &e->grad_scale, sizeof q->grad_scale) == 0) {
            g = q;
            break;
        }
        if (!q->used || (lru->used && q->last < lru->last))
            lru = q;
    }
    d->graph_clock++;
    if (!g) {                  /* a new kind of pass: run it as usual, remember its key */
        if (lru->exec)
            CU(p_cuGraphExecDestroy(lru->exec));
        *lru = (struct pass_graph){.used = 1, .train = e->train, .slot = d->using,
                                   .pass = d->stat_cur,
                                   .grads_zero = e->grads_zero, .B = e->B,
                                   .grad_scale = e->grad_scale, .last = d->graph_clock};
        return RT_CU_GRAPH_NONE;
    }
    g->last = d->graph_clock;
    if (g->exec) {
        CU(p_cuGraphLaunch(g->exec, d->compute));
        e->terms += g->terms;
        return RT_CU_GRAPH_RAN;
    }
    CUresult r = p_cuStreamBeginCapture(d->compute, CU_STREAM_CAPTURE_MODE_RELAXED);
    if (r != CUDA_SUCCESS) {
        graphs_off(d, "cuStreamBeginCapture", r);
        return RT_CU_GRAPH_NONE;
    }
    d->capturing = (int)(g - d->graphs);
    d->capture_err = CUDA_SUCCESS;
    g->terms = e->terms;
    return RT_CU_GRAPH_CAPTURE;
}

int rt_cu_graph_end(rt_exec *e)
{
    rt_cu *d = dev_of(e);
    if (d->capturing < 0)
        rt_die("rt_cu_graph_end without a capture");
    struct pass_graph *g = &d->graphs[d->capturing];
    d->capturing = -1;
    CUgraph graph = NULL;
    CUresult r = p_cuStreamEndCapture(d->compute, &graph);
    const char *what = "cuStreamEndCapture";
    if (r == CUDA_SUCCESS && d->capture_err != CUDA_SUCCESS) {
        r = d->capture_err;
        what = "a call while capturing";
    }
    if (r == CUDA_SUCCESS) {
        r = p_cuGraphInstantiateWithFlags(&g->exec, graph, 0);
        what = "cuGraphInstantiate";
    }
    if (graph)
        CU(p_cuGraphDestroy(graph));
    if (r == CUDA_SUCCESS) {   /* the first launch also uploads the graph: it may fail */
        r = p_cuGraphLaunch(g->exec, d->compute);
        what = "cuGraphLaunch";
    }
    if (r != CUDA_SUCCESS) {
        e->terms = g->terms;   /* as before the pass, which runs again */
        graphs_off(d, what, r);
        return 0;
    }
    g->terms = e->terms - g->terms;
    return 1;
}

/* ---- a pass of the caller's own as a graph ---------------------------------------------
 * The decode program's one-token pass (mode_sample.c), which no key above describes: the
 * caller captures it once and launches the graph for each token after. While it is
 * captured, capturing holds n_graphs (no entry of graphs). */

int rt_cu_capture_begin(rt_exec *e)
{
    rt_cu *d = dev_of(e);
    if (d->capturing >= 0)
        rt_die("rt_cu_capture_begin while a graph is captured");
    if (p_cuStreamBeginCapture(d->compute, CU_STREAM_CAPTURE_MODE_RELAXED) != CUDA_SUCCESS)
        return 0;
    d->capturing = d->n_graphs;
    d->capture_err = CUDA_SUCCESS;
    return 1;
}

void *rt_cu_capture_end(rt_exec *e)
{
    rt_cu *d = dev_of(e);
    if (d->capturing != d->n_graphs)
        rt_die("rt_cu_capture_end without rt_cu_capture_begin");
    d->capturing = -1;
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    CUresult r = p_cuStreamEndCapture(d->compute, &graph);
    if (r == CUDA_SUCCESS)
        r = d->capture_err;
    if (r == CUDA_SUCCESS)
        r = p_cuGraphInstantiateWithFlags(&exec, graph, 0);
    if (graph)
        CU(p_cuGraphDestroy(graph));
    if (r == CUDA_SUCCESS)   /* (the first launch also uploads the graph: it may fail) */
        r = p_cuGraphLaunch(exec, d->compute);
    if (r != CUDA_SUCCESS && exec)
        p_cuGraphExecDestroy(exec);
    return r == CUDA_SUCCESS ? (void *)exec : NULL;
}

void rt_cu_graph_run(rt_exec *e, void *graph)
{
    CU(p_cuGraphLaunch((CUgraphExec)graph, dev_of(e)->compute));
}

void rt_cu_graph_free(void *graph)
{
    if (graph)
        CU(p_cuGraphExecDestroy((CUgraphExec)graph));
}

/* ---- zero2's gradient region ----------------------------------------------------------
 *
 * Under zero2 a rank keeps its shard of the gradients only, but the generated backward
 * pass accumulates every parameter's gradient at its fixed offset of a full-size region.
 * On the CPU that region is an anonymous mapping whose pages go back to the kernel
 * (zero.c); here it is an address range reserved with the driver's virtual memory
 * calls, backed by physical chunks (the allocation granularity: 2 MB on current GPUs)
 * only where and while needed:
 *   - the chunks holding the rank's shard are mapped for good;
 *   - rt_grad_begin (in the generated backward pass, before a parameter's first
 *     gradient write) maps the chunks under it that are not mapped and queues their
 *     zeroing on the compute stream, ahead of the write;
 *   - ddp.c sends buckets from the top of the region down; behind each one's reduction
 *     an event is recorded on the communication stream (rt_cu_grads_sent), and once it
 *     has passed, the chunks from that bucket's start up, but the shard's, are unmapped
 *     and their memory kept as spares for the next mapping. At most GR_INFLIGHT
 *     reductions are outstanding: the host waits for the oldest before it queues more
 *     (as zero.c bounds its reduce-scatters on the CPU), which bounds what is mapped;
 *   - a step starts with every chunk outside the shard unmapped (the previous step's
 *     reductions have passed: the host waited for its loss) and the shard's zeroed.
 * Physical chunks are created only when no spare is left and never freed: the first
 * step creates what a backward pass needs at most and later steps reuse them, so
 * nothing is allocated after the first step. With accumulate > 1 nothing is sent
 * before the last pass, so what the earlier passes mapped stays mapped (and is not
 * zeroed again). Where the backward pass is writing one big tensor (GPT-2's tied
 * embedding, from the head's GEMM to the embedding's backward), its chunks stay
 * mapped the whole time. */
static void gr_map(rt_cu *d, int c)
{
    struct grads *g = d->gr;
    CUmemGenericAllocationHandle h;
    if (g->n_spare > 0) {
        h = g->spare[--g->n_spare];
    } else {
        CUresult r = p_cuMemCreate(&h, g->gran, &g->prop, 0);
        if (r == CUDA_ERROR_OUT_OF_MEMORY)
            rt_fail("CUDA: out of device memory for zero2's gradient chunks (%d chunks of %zu bytes "
                    "mapped)\n  hint: lower batch_size or distributed.bucket_mb, or use "
                    "recompute", g->mapped, g->gran);
        CU(r);
        g->created++;
    }
    rt_dptr p = g->base + (size_t)c * g->gran;
    CU(p_cuMemMap(p, g->gran, 0, h, 0));
    CU(p_cuMemSetAccess(p, g->gran, &g->access, 1));
    g->at[c] = h;
    if (++g->mapped > g->peak)
        g->peak = g->mapped;
}

/* Chunk c's memory back to the spares; what used it has finished. */
static void gr_unmap(rt_cu *d, int c)
{
    struct grads *g = d->gr;
    CU(p_cuMemUnmap(g->base + (size_t)c * g->gran, g->gran));
    g->spare[g->n_spare++] = g->at[c];
    g->at[c] = 0;
    g->mapped--;
}

static int gr_kept(const struct grads *g, int c) { return c >= g->keep_lo && c < g->keep_hi; }

/* Pinned memory on this device: its properties into *prop, the chunk size returned. */
static size_t gr_granularity(rt_cu *d, CUmemAllocationProp *prop)
{
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = (int)d->dev;
    size_t gran = 0;
    CU(p_cuMemGetAllocationGranularity(&gran, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    return gran;
}

/* The parameters' fp32 region apart from the pool: `bytes` of addresses reserved, the
 * first `held` backed (the frozen weights after them live in the 16-bit copy alone: an
 * address there is only ever mapped to it by rt_cu_operand, never read). 0 where the
 * driver has no virtual memory management, or where `held` rounded up to its
 * granularity (2 MB) saves nothing: the region is then the pool's, whole. */
static int params_reserved(rt_cu *d, size_t bytes, size_t held)
{
    int vmm = 0;
    CU(p_cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, d->dev));
    if (!vmm)
        return 0;
    CUmemAllocationProp prop;
    size_t gran = gr_granularity(d, &prop);
    size_t all = (bytes + gran - 1) / gran * gran, back = (held + gran - 1) / gran * gran;
    if (back >= bytes)
        return 0;
    CU(p_cuMemAddressReserve(&d->params, all, 0, 0, 0));
    if (!back)
        return 1;
    CUmemGenericAllocationHandle h;
    CUresult r = p_cuMemCreate(&h, back, &prop, 0);
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        rt_fail("CUDA: out of device memory for the fp32 parameters (%zu bytes)", back);
    CU(r);
    CU(p_cuMemMap(d->params, back, 0, h, 0));
    CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CU(p_cuMemSetAccess(d->params, back, &access, 1));
    d->params_apart = back;
    return 1;
}

static void gr_setup(rt_cu *d, int64_t P, int64_t lo, int64_t hi)
{
    int vmm = 0;
    CU(p_cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, d->dev));
    if (!vmm)
        rt_fail("distributed.strategy zero2 on a GPU needs the driver's virtual memory "
                "management, which %s (or its driver) does not support\n  hint: use zero1 "
                "(the gradients whole, the optimizer state sharded)", d->name);
    struct grads *g = rt_xmalloc(sizeof *g);
    d->gr = g;
    g->gran = gr_granularity(d, &g->prop);
    g->access.location = g->prop.location;
    g->access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    size_t bytes = (size_t)(P > 0 ? P : 1) * 4;
    g->n = (int)((bytes + g->gran - 1) / g->gran);
    CU(p_cuMemAddressReserve(&g->base, (size_t)g->n * g->gran, 0, 0, 0));
    g->at = rt_xmalloc(sizeof *g->at * (size_t)g->n);
    g->spare = rt_xmalloc(sizeof *g->spare * (size_t)g->n);
    g->keep_lo = (int)((size_t)lo * 4 / g->gran);
    g->keep_hi = hi > lo ? (int)(((size_t)hi * 4 + g->gran - 1) / g->gran) : g->keep_lo;
    for (int c = g->keep_lo; c < g->keep_hi; c++)
        gr_map(d, c);
    for (int i = 0; i <= GR_INFLIGHT; i++)
        CU(p_cuEventCreate(&g->ev[i], CU_EVENT_DISABLE_TIMING));
    g->released = g->n;
}

/* The reductions of buckets from float `a` up have passed: their chunks but the shard's
 * are unmapped. */
static void gr_release_from(rt_cu *d, int64_t a)
{
    struct grads *g = d->gr;
    int c0 = (int)(((size_t)a * 4 + g->gran - 1) / g->gran);
    for (int c = c0; c < g->released; c++)
        if (g->at[c] && !gr_kept(g, c))
            gr_unmap(d, c);
    if (c0 < g->released)
        g->released = c0;
}

/* Releases after the outstanding reductions that have passed; first waits until at most
 * `most` are outstanding (with NCCL: polled, watching for a dead peer as cu_wait does). */
static void gr_poll(rt_cu *d, int most)
{
    struct grads *g = d->gr;
    double t0 = rt_now();
    long k = 0;
    while (g->count > 0) {
        CUresult r = p_cuEventQuery(g->ev[g->head]);
        if (r == CUDA_ERROR_NOT_READY) {
            if (g->count <= most)
                return;
            poll_pause(d, t0, k++);
            continue;
        }
        CU(r);
        gr_release_from(d, g->from[g->head]);
        g->head = (g->head + 1) % (GR_INFLIGHT + 1);
        g->count--;
    }
}

void rt_cu_grads_begin(rt_exec *e, int64_t off, int64_t n)
{
    rt_cu *d = dev_of(e);
    struct grads *g = d->gr;
    if (!g || n <= 0)
        return;
    gr_poll(d, GR_INFLIGHT);
    int c0 = (int)((size_t)off * 4 / g->gran);
    int c1 = (int)(((size_t)(off + n) * 4 + g->gran - 1) / g->gran);
    for (int c = c0; c < c1; c++) {
        if (g->at[c])
            continue;
        if (c >= g->released)
            rt_die("zero2: a gradient at float %lld is written after its bucket was reduced",
                   (long long)off);
        gr_map(d, c);
        CU(p_cuMemsetD32Async(g->base + (size_t)c * g->gran, 0, g->gran / 4, d->compute));
    }
}

void rt_cu_grads_sent(rt_exec *e, int64_t a)
{
    rt_cu *d = dev_of(e);
    struct grads *g = d->gr;
    if (!g)
        return;
    if (g->count > GR_INFLIGHT)
        gr_poll(d, GR_INFLIGHT);
    int i = (g->head + g->count) % (GR_INFLIGHT + 1);
    CU(p_cuEventRecord(g->ev[i], d->comm));
    g->from[i] = a;
    g->count++;
    gr_poll(d, GR_INFLIGHT);
}

void rt_cu_grads_clear(rt_exec *e, int64_t floats)
{
    rt_cu *d = dev_of(e);
    struct grads *g = d->gr;
    if (!g) {
        rt_cu_zero(e, (rt_dptr)(uintptr_t)e->grads, floats);
        return;
    }
    gr_poll(d, 0);
    for (int c = 0; c < g->n; c++)
        if (g->at[c] && !gr_kept(g, c))
            gr_unmap(d, c);
    g->released = g->n;
    if (g->keep_hi > g->keep_lo)
        CU(p_cuMemsetD32Async(g->base + (size_t)g->keep_lo * g->gran, 0,
                              (size_t)(g->keep_hi - g->keep_lo) * g->gran / 4, d->compute));
}

size_t rt_cu_grads_mapped(rt_exec *e, size_t *peak, size_t *chunk)
{
    struct grads *g = dev_of(e)->gr;
    if (peak)
        *peak = g ? (size_t)g->peak * g->gran : 0;
    if (chunk)
        *chunk = g ? g->gran : 0;
    return g ? (size_t)g->mapped * g->gran : 0;
}

/* ---- tests ---------------------------------------------------------------------------- */

rt_exec *rt_cu_test_open(const char *source, size_t scratch)
{
    rt_cuda_image img = {.source = source};
    rt_cu *d = cu_open(&img, 0, 0, 0);
    rt_exec *e = rt_xmalloc(sizeof *e);
    e->dev = d;
    d->scratch_bytes = scratch;
    d->scratch = rt_cu_alloc(scratch);
    d->n_stats = 1;
    d->stats = rt_cu_alloc(sizeof(rt_cu_stat));
    pin_stats(d);
    d->workspace_bytes = 32u << 20;
    d->workspace = rt_cu_alloc(d->workspace_bytes);
    CU(p_cuStreamSynchronize(0));
    return e;
}

size_t rt_cu_test_grads(rt_exec *e, int chunks)
{
    rt_cu *d = dev_of(e);
    CUmemAllocationProp prop;
    size_t gran = gr_granularity(d, &prop);
    int64_t q = (int64_t)(gran / 4);
    gr_setup(d, chunks * q, q / 2, q + q / 2);
    e->grads = (float *)(uintptr_t)d->gr->base;
    return gran;
}

void rt_cu_test_arena(rt_exec *e, rt_dptr base, size_t bytes, int prec)
{
    rt_cu *d = dev_of(e);
    d->act16 = prec;
    d->arena = base;
    d->arena_bytes = bytes;
}

void rt_cu_test_params(rt_exec *e, rt_dptr base, size_t bytes, rt_dptr copy)
{
    rt_cu *d = dev_of(e);
    d->pool = d->params = base;
    d->param_bytes = d->f32_bytes = bytes;
    d->pcopy = copy;
}
