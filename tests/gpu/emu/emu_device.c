/* emu_device.c: the device layer of rt_cuda.h that cuda_ops.c and check_ops.c use,
 * on the CPU: device memory is host memory and launches go to emu_launch
 * (emu_kernels.cc). For tests/gpu_emu.sh only. */
#include <stdlib.h>
#include <string.h>
#include "rt_cuda.h"
#include "emu_tmap.h"

int emu_launch(const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
               unsigned smem, void **args);

static rt_cu_stat stats;
static void *scratch;
static size_t scratch_bytes;

void rt_cu_launch(rt_exec *e, const char *name, unsigned gx, unsigned gy, unsigned gz,
                  unsigned bx, unsigned by, unsigned smem, void **args)
{
    (void)e;
    if (emu_launch(name, gx, gy, gz, bx, by, smem, args))
        rt_fail("CUDA: no kernel %s in the module", name);
}

rt_dptr rt_cu_scratch(rt_exec *e, size_t bytes)
{
    (void)e;
    if (bytes > scratch_bytes)
        rt_fail("CUDA: a kernel needs %zu bytes of scratch, %zu were reserved", bytes,
                scratch_bytes);
    return (rt_dptr)(uintptr_t)scratch;
}

rt_dptr rt_cu_stats(rt_exec *e) { (void)e; return (rt_dptr)(uintptr_t)&stats; }
int rt_cu_sm_count(rt_exec *e) { (void)e; return 2; }
void rt_cu_sync(rt_exec *e) { (void)e; }
rt_dptr rt_cu_param_copy(rt_exec *e) { (void)e; return 0; }   /* no bf16 parameter copy here */
/* the activations the kernels were compiled for (emu_kernels.cc) */
int emu_act16(void);
int rt_cu_act16(rt_exec *e) { (void)e; return emu_act16(); }

rt_dptr rt_cu_alloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);   /* 16-byte aligned, pages zeroed lazily */
    if (!p)
        rt_fail("emu: out of memory");
    return (rt_dptr)(uintptr_t)p;
}

rt_dptr rt_cu_alloc_fixed(rt_exec *e, size_t bytes)
{
    (void)e;
    return rt_cu_alloc(bytes);
}

void rt_cu_upload(rt_dptr dst, const void *src, size_t bytes)
{
    memcpy((void *)(uintptr_t)dst, src, bytes);
}

void rt_cu_download(void *dst, rt_dptr src, size_t bytes)
{
    memcpy(dst, (const void *)(uintptr_t)src, bytes);
}

/* a copy of its own each call (the device's keeps one per content) */
rt_dptr rt_cu_const(rt_exec *e, const void *data, size_t bytes)
{
    rt_dptr p = rt_cu_alloc_fixed(e, bytes);
    rt_cu_upload(p, data, bytes);
    return p;
}

/* cuda_ops.c registers its calls with the device layer; check_ops calls them directly
 * here, so the emulator keeps none */
void rt_cu_zero(rt_exec *e, rt_dptr p, int64_t floats)
{
    (void)e;
    memset((void *)(uintptr_t)p, 0, (size_t)floats * 4);
}

void rt_cu_register(const rt_gpu_calls *part) { (void)part; }

rt_exec *rt_cu_test_open(const char *source, size_t bytes)
{
    (void)source;
    rt_exec *e = rt_xmalloc(sizeof *e);
    e->dev = &stats;   /* any non-NULL: "on a GPU" */
    scratch = (void *)(uintptr_t)rt_cu_alloc(bytes);
    scratch_bytes = bytes;
    return e;
}

void rt_cu_begin_pass(rt_exec *e, int pass)
{
    (void)pass;
    memset(&stats, 0, sizeof stats);
    e->loss_sum = 0;
    e->correct = 0;
    e->terms = 0;
    e->margin_sum = 0;
}

void rt_cu_end_pass(rt_exec *e)
{
    e->loss_sum += stats.loss_sum;
    e->correct += (int64_t)stats.correct;
    e->terms += (int64_t)stats.terms;   /* (ignore_index's count, as device_cuda.c's) */
    e->margin_sum += stats.margin_sum;
}

/* the kernels are built for sm_90a here too (tests/gpu_emu.sh defines its macro) */
int rt_cu_sm90a(rt_exec *e) { (void)e; return 1; }

int rt_cu_tmap16(void *map, const void *base, int f16, const uint64_t dim[3],
                 const uint64_t stride[2], const uint32_t box[3])
{
    const uint32_t es[3] = {1, 1, 1};
    return emu_tmap_encode(map, f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3,
                           base, dim, stride, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                           CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) ? -1 : 0;
}

/* one process, no communicator: check_ops never asks batchnorm for SyncBatchNorm's sums */
void rt_nccl_allreduce_f64(rt_exec *e, double *p, int64_t n)
{
    (void)e, (void)p, (void)n;
    rt_die("emu_device: no NCCL here (SyncBatchNorm needs several ranks)");
}
