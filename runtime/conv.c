/* conv.c: conv2d with groups 1 as three calls in the GEMM path's layouts (the forward
 * product, the weight gradient, the input gradient), each of which runs as im2col
 * (col2im) and a GEMM, or on a GPU as one direct or implicit-GEMM kernel where that
 * pays (templates/cuda/conv.cuh's rt_conv_*; runtime/cuda_ops.c says by shape which).
 * The kernels around them (the epilogue that reorders yt and adds the bias, the
 * transposition into dyt) are the compiler's. The column buffers stay in the plan: the
 * GPU's kernels that need none leave them unused.
 *
 * On the CPU a batch is cut into tasks of whole images whose columns (about
 * CONV_TASK_BYTES) stay in the core's L2 cache between im2col and the GEMM that reads
 * them (or the GEMM and col2im); a task writes its columns into its own block of the
 * column buffer, and the pool's threads take tasks. The cut depends on the shapes
 * alone, never on the thread count: the weight gradient sums the tasks' products in
 * CONV_GROUPS partials (groups of consecutive tasks, in order) and then the partials in
 * order, so any number of threads gives the same bits. Batches of fewer than
 * CONV_MIN_TASKS tasks (large images) run as one im2col and one GEMM split over the
 * pool, as does a weight gradient whose partials would pass CONV_PART_BYTES. */
#include <cblas.h>
#include "rt.h"

#define CONV_TASK_BYTES (384 << 10)
#define CONV_MIN_TASKS 4
#define CONV_GROUPS 32
#define CONV_PART_BYTES (16 << 20)

typedef struct {
    const float *x, *w, *dyt;   /* what the call reads (fwd: x, w; dw: x, dyt; dx: w, dyt) */
    float *col, *out, *part;    /* the columns; yt, dx or the dW partials */
    int64_t B, C, H, W, k, s, pad, OH, OW, Cout;
    int64_t per, tasks, groups; /* images a task, tasks, partial groups (dW) */
} conv_job;

static conv_job conv_cut(const float *x, const float *w, const float *dyt, float *col,
                         float *out, int64_t B, int64_t C, int64_t H, int64_t W, int64_t k,
                         int64_t s, int64_t pad, int64_t OH, int64_t OW, int64_t Cout)
{
    conv_job j = {x, w, dyt, col, out, NULL, B, C, H, W, k, s, pad, OH, OW, Cout, 1, B, 0};
    int64_t img = C * k * k * OH * OW * (int64_t)sizeof(float);
    j.per = img >= CONV_TASK_BYTES ? 1 : CONV_TASK_BYTES / img;
    if (j.per > B)
        j.per = B;
    j.tasks = (B + j.per - 1) / j.per;
    return j;
}

/* Task t's images [*b0, *b0 + *nb) and its n = nb*OH*OW columns, at col + C*k*k * b0*OH*OW
 * ([C*k*k, n]) */
static float *conv_task(const conv_job *j, int64_t t, int64_t *b0, int64_t *nb, int64_t *n)
{
    *b0 = t * j->per;
    *nb = *b0 + j->per < j->B ? j->per : j->B - *b0;
    *n = *nb * j->OH * j->OW;
    return j->col + j->C * j->k * j->k * *b0 * j->OH * j->OW;
}

static void im2col_task_images(const conv_job *j, float *col, int64_t b0, int64_t nb)
{
    rt_im2col_serial(j->x + b0 * j->C * j->H * j->W, col, nb, j->C, j->H, j->W, j->k, j->s,
                     j->pad, j->OH, j->OW);
}

/* yt[:, the tasks' columns] = w [Cout, ckk] x columns [ckk, n] */
static void fwd_tasks(void *ctx, int64_t lo, int64_t hi)
{
    const conv_job *j = ctx;
    int64_t ckk = j->C * j->k * j->k, ohw = j->OH * j->OW, b0, nb, n;
    for (int64_t t = lo; t < hi; t++) {
        float *col = conv_task(j, t, &b0, &nb, &n);
        im2col_task_images(j, col, b0, nb);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)j->Cout, (int)n, (int)ckk,
                    1.0f, j->w, (int)ckk, col, (int)n, 0.0f, j->out + b0 * ohw,
                    (int)(j->B * ohw));
    }
}

/* partial g = the sum over its tasks, in order, of dyt [Cout, n] x columns^T [n, ckk] */
static void dw_groups(void *ctx, int64_t lo, int64_t hi)
{
    const conv_job *j = ctx;
    int64_t ckk = j->C * j->k * j->k, ohw = j->OH * j->OW, b0, nb, n;
    for (int64_t g = lo; g < hi; g++) {
        float *part = j->part + g * j->Cout * ckk;
        int64_t t0 = g * j->tasks / j->groups, t1 = (g + 1) * j->tasks / j->groups;
        for (int64_t t = t0; t < t1; t++) {
            float *col = conv_task(j, t, &b0, &nb, &n);
            im2col_task_images(j, col, b0, nb);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)j->Cout, (int)ckk, (int)n,
                        1.0f, j->dyt + b0 * ohw, (int)(j->B * ohw), col, (int)n,
                        t == t0 ? 0.0f : 1.0f, part, (int)ckk);
        }
    }
}

/* dW[i] += the partials' i-th values, added in group order */
static void dw_sum(void *ctx, int64_t lo, int64_t hi)
{
    const conv_job *j = ctx;
    int64_t n = j->Cout * j->C * j->k * j->k;
    for (int64_t i = lo; i < hi; i++) {
        float v = j->part[i];
        for (int64_t g = 1; g < j->groups; g++)
            v += j->part[g * n + i];
        j->out[i] += v;
    }
}

/* columns [ckk, n] = w^T [ckk, Cout] x dyt [Cout, n]; dx of the tasks' images = col2im */
static void dx_tasks(void *ctx, int64_t lo, int64_t hi)
{
    const conv_job *j = ctx;
    int64_t ckk = j->C * j->k * j->k, ohw = j->OH * j->OW, b0, nb, n;
    for (int64_t t = lo; t < hi; t++) {
        float *col = conv_task(j, t, &b0, &nb, &n);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)ckk, (int)n, (int)j->Cout,
                    1.0f, j->w, (int)ckk, j->dyt + b0 * ohw, (int)(j->B * ohw), 0.0f, col,
                    (int)n);
        rt_col2im_serial(col, j->out + b0 * j->C * j->H * j->W, nb, j->C, j->H, j->W, j->k,
                         j->s, j->pad, j->OH, j->OW);
    }
}

/* whether the tasks run: enough of them, and their strides in the int range cblas takes
 * (the whole-batch path checks its own) */
static int conv_tasks_run(const conv_job *j)
{
    return j->tasks >= CONV_MIN_TASKS && j->B * j->OH * j->OW <= INT32_MAX &&
           j->C * j->k * j->k <= INT32_MAX && j->Cout <= INT32_MAX;
}

void rt_conv_fwd(rt_exec *e, const float *x, const float *w, float *col, float *yt, int64_t B,
                 int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad, int64_t OH,
                 int64_t OW, int64_t Cout)
{
    if (e->dev && RT_GPU(e)->conv_direct_fwd(e, x, w, yt, B, C, H, W, k, s, pad, OH, OW, Cout))
        return;
    if (rt_conv_direct_fwd(e, x, w, yt, B, C, H, W, k, s, pad, OH, OW, Cout))
        return;   /* the CPU's direct path (conv_direct.c) */
    conv_job j = conv_cut(x, w, NULL, col, yt, B, C, H, W, k, s, pad, OH, OW, Cout);
    if (!e->dev && conv_tasks_run(&j)) {
        rt_pool_run(e->rt, j.tasks, 1, fwd_tasks, &j);
        return;
    }
    int64_t ckk = C * k * k, n = B * OH * OW;
    rt_im2col(e, x, col, B, C, H, W, k, s, pad, OH, OW);
    rt_gemm(e, 0, 0, Cout, n, ckk, 1.0f, w, ckk, col, n, 0.0f, yt, n);
}

void rt_conv_bwd_weight(rt_exec *e, const float *x, const float *dyt, float *col, float *dw,
                        int64_t B, int64_t C, int64_t H, int64_t W, int64_t k, int64_t s,
                        int64_t pad, int64_t OH, int64_t OW, int64_t Cout)
{
    if (!dw)
        return;   /* a frozen layer's (the compiler emits none; NULL means not wanted) */
    if (e->dev && RT_GPU(e)->conv_direct_dw(e, x, dyt, dw, B, C, H, W, k, s, pad, OH, OW, Cout))
        return;
    if (rt_conv_direct_dw(e, x, dyt, dw, B, C, H, W, k, s, pad, OH, OW, Cout))
        return;
    conv_job j = conv_cut(x, NULL, dyt, col, dw, B, C, H, W, k, s, pad, OH, OW, Cout);
    int64_t wn = Cout * C * k * k;
    j.groups = j.tasks < CONV_GROUPS ? j.tasks : CONV_GROUPS;
    if (!e->dev && e->rt && conv_tasks_run(&j) &&
        j.groups * wn * (int64_t)sizeof(float) <= CONV_PART_BYTES) {
        j.part = (float *)rt_pool_scratch(e->rt, (size_t)(j.groups * wn + 1) / 2);
        rt_pool_run(e->rt, j.groups, 1, dw_groups, &j);
        rt_pool_run(e->rt, wn, rt_grain_for(j.groups), dw_sum, &j);
        return;
    }
    int64_t ckk = C * k * k, n = B * OH * OW;
    rt_im2col(e, x, col, B, C, H, W, k, s, pad, OH, OW);
    rt_gemm(e, 0, 1, Cout, ckk, n, 1.0f, dyt, n, col, n, 1.0f, dw, ckk);
}

void rt_conv_bwd_data(rt_exec *e, const float *w, const float *dyt, float *dcol, float *dx,
                      int64_t B, int64_t C, int64_t H, int64_t W, int64_t k, int64_t s,
                      int64_t pad, int64_t OH, int64_t OW, int64_t Cout)
{
    if (e->dev && RT_GPU(e)->conv_igemm_dx(e, w, dyt, dx, B, C, H, W, k, s, pad, OH, OW, Cout))
        return;
    if (rt_conv_direct_dx(e, w, dyt, dx, B, C, H, W, k, s, pad, OH, OW, Cout))
        return;
    conv_job j = conv_cut(NULL, w, dyt, dcol, dx, B, C, H, W, k, s, pad, OH, OW, Cout);
    if (!e->dev && conv_tasks_run(&j)) {
        rt_pool_run(e->rt, j.tasks, 1, dx_tasks, &j);
        return;
    }
    int64_t ckk = C * k * k, n = B * OH * OW;
    rt_gemm(e, 1, 0, ckk, n, Cout, 1.0f, w, ckk, dyt, n, 0.0f, dcol, n);
    rt_col2im(e, dcol, dx, B, C, H, W, k, s, pad, OH, OW);
}
