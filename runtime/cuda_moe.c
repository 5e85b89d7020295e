/* cuda_moe.c: the mixture-of-experts layer's calls on a GPU (rt_cu_moe_*, the twins of
 * moe.c's CPU calls): each launches templates/cuda/moe.cuh's kernels, whose header
 * comments say what they compute. The group sizes stay on the device: the groups'
 * GEMMs read the offsets there, so a step issues the same launches whatever the
 * routing (and can be one CUDA graph). */
#include <stdint.h>
#include "rt_cuda.h"

/* Blocks of a grid-stride loop over n tokens, a block a token at a time (as glu's rows) */
static unsigned token_blocks(rt_exec *e, int64_t n) { return rt_cu_grid_for(e, n * 256); }

/* offs and the copies' rows from the copies' experts (idx's first k of each token) */
static void groups(rt_exec *e, float *idx, float *offs, int64_t n, int64_t E, int64_t k)
{
    rt_dptr cnt = rt_cu_scratch(e, (size_t)E * sizeof(int));
    void *a1[] = {&idx, &cnt, &n, &k};
    rt_cu_launch(e, "rt_moe_count", gdim(E, GX, "moe count"), 1, 1, 256, 1, 0, a1);
    void *a2[] = {&idx, &offs, &cnt, &n, &E, &k};
    rt_cu_launch(e, "rt_moe_rows", gdim(E, GX, "moe rows"), 1, 1, 256, 1, 0, a2);
}

static void gather(rt_exec *e, const float *x, const float *idx, float *xg, int64_t n, int64_t d,
                   int64_t k)
{
    void *a[] = {&x, &idx, &xg, &n, &d, &k};
    rt_cu_launch(e, "rt_moe_gather", token_blocks(e, n), 1, 1, 256, 1, 0, a);
}

/* C = A op(W_g) over the groups' rows (kernel rt_moe_gemm_nt or _nn): with 16-bit
 * activations on the tensor cores, a block a group's 64 rows by 128 columns (the row
 * tiles cut at the groups' edges: at most cdiv(R, 64) + E); in fp32 a block 64 x 64 */
static void gemm_rows(rt_exec *e, const char *kernel, const float *A, const float *w, float *C,
                      const float *offs, int64_t R, int64_t N, int64_t K, int64_t E)
{
    void *a[] = {&A, &w, &C, &offs, &R, &N, &K, &E};
    int tc = rt_cu_act16(e) != 0;
    rt_cu_launch(e, kernel, gdim(tc ? cdiv(R, 64) + E : cdiv(R, 64), GX, "moe GEMM rows"),
                 gdim(cdiv(N, tc ? 128 : 64), GYZ, "moe GEMM columns"), 1, tc ? 128 : 256, 1, 0, a);
}

/* C_g += A_g^T B_g over the groups (rt_moe_gemm_tn: with 16-bit activations on the
 * tensor cores, a block 64 x 128); f32a: A fp32, one group of all R rows (the router's,
 * rt_moe_gemm_tn_f32a, SIMT 64 x 64) */
static void gemm_wgrad(rt_exec *e, int f32a, const float *A, const float *B, float *C,
                       const float *offs, int64_t R, int64_t M, int64_t N, int64_t groups)
{
    void *a[] = {&A, &B, &C, &offs, &R, &M, &N};
    int tc = rt_cu_act16(e) != 0 && !f32a;
    const char *kernel = f32a ? "rt_moe_gemm_tn_f32a" : "rt_moe_gemm_tn";
    rt_cu_launch(e, kernel, gdim(cdiv(N, tc ? 128 : 64), GX, "moe weight GEMM columns"),
                 gdim(cdiv(M, 64), GYZ, "moe weight GEMM rows"), gdim(groups, GYZ, "moe experts"),
                 tc ? 128 : 256, 1, 0, a);
}

void rt_cu_moe_dispatch_fwd(rt_exec *e, const float *x, const float *wr, const float *wup,
                            float *probs, float *gate, float *idx, float *offs, float *xg,
                            float *h, float *stats, int64_t n, int64_t d, int64_t E, int64_t k,
                            int64_t h2, int64_t norm, int64_t row)
{
    int nm = (int)norm;
    void *lg[] = {&x, &wr, &probs, &n, &d, &E};
    rt_cu_launch(e, "rt_moe_logits", gdim(cdiv(n, 64), GX, "moe router rows"),
                 gdim(cdiv(E, 64), GYZ, "moe router experts"), 1, 256, 1, 0, lg);
    void *a[] = {&probs, &gate, &idx, &n, &E, &k, &nm};
    rt_cu_launch(e, "rt_moe_route", gdim(cdiv(n, 128), GX, "moe route"), 1, 1, 128, 1, 0, a);
    groups(e, idx, offs, n, E, k);
    if (stats) {
        float *r = stats + row * 2 * E;
        void *s[] = {&probs, &offs, &r, &n, &E};
        rt_cu_launch(e, "rt_moe_stats", gdim(E, GX, "moe stats"), 1, 1, 256, 1, 0, s);
    }
    gather(e, x, idx, xg, n, d, k);
    gemm_rows(e, "rt_moe_gemm_nt", xg, wup, h, offs, n * k, h2, d, E);
}

void rt_cu_moe_combine_fwd(rt_exec *e, const float *act, const float *wdown, const float *gate,
                           const float *idx, const float *offs, float *o, float *y, int64_t n,
                           int64_t d, int64_t E, int64_t k, int64_t hid)
{
    gemm_rows(e, "rt_moe_gemm_nt", act, wdown, o, offs, n * k, d, hid, E);
    void *a[] = {&o, &idx, &gate, &y, &n, &d, &k};
    rt_cu_launch(e, "rt_moe_sum", token_blocks(e, n), 1, 1, 256, 1, 0, a);
}

void rt_cu_moe_combine_bwd(rt_exec *e, const float *act, const float *wdown, const float *gate,
                           const float *idx, const float *offs, const float *dy, float *g,
                           float *da, float *dgate, float *dwdown, int64_t n, int64_t d,
                           int64_t E, int64_t k, int64_t hid)
{
    gather(e, dy, idx, g, n, d, k);
    gemm_rows(e, "rt_moe_gemm_nn", g, wdown, da, offs, n * k, hid, d, E);
    void *a[] = {&act, &gate, &idx, &da, &g, &dgate, &n, &d, &hid, &k};
    rt_cu_launch(e, "rt_moe_gate_grad", token_blocks(e, n), 1, 1, 256, 1, 0, a);
    if (dwdown)   /* NULL: a frozen layer's */
        gemm_wgrad(e, 0, g, act, dwdown, offs, n * k, d, hid, E);
}

void rt_cu_moe_dispatch_bwd(rt_exec *e, const float *x, const float *wr, const float *wup,
                            const float *probs, const float *gate, const float *idx,
                            const float *offs, const float *dgate, const float *agrad,
                            const float *dh, float *xg, float *dl, float *dx, float *dwr,
                            float *dwup, int64_t n, int64_t d, int64_t E, int64_t k, int64_t h2,
                            int64_t norm)
{
    gather(e, x, idx, xg, n, d, k);
    if (dwup)
        gemm_wgrad(e, 0, dh, xg, dwup, offs, n * k, h2, d, E);
    gemm_rows(e, "rt_moe_gemm_nn", dh, wup, xg, offs, n * k, d, h2, E);   /* dxg in xg */
    int nm = (int)norm;
    void *rg[] = {&probs, &gate, &idx, &dgate, &agrad, &dl, &n, &E, &k, &nm};
    rt_cu_launch(e, "rt_moe_router_grads", gdim(cdiv(n, 128), GX, "moe router gradients"), 1, 1,
                 128, 1, 0, rg);
    void *a[] = {&xg, &wr, &idx, &dl, &dx, &n, &d, &E, &k};
    rt_cu_launch(e, "rt_moe_token_grad", gdim(cdiv(n, 64), GX, "moe token rows"),
                 gdim(cdiv(d, 64), GYZ, "moe token columns"), 1, 256, 1, 0, a);
    const float *none = NULL;
    if (dwr)
        gemm_wgrad(e, 1, dl, x, dwr, none, n, E, d, 1);
}

void rt_cu_moe_aux(rt_exec *e, const float *stats, float *agrad, int64_t L, int64_t n, int64_t E,
                   float coef)
{
    /* the pass's terms and gradient scale, known on the host (a graph replays them with
     * the pass it was captured for: its key holds both); under ignore_index the terms
     * are the device's count (moe.cuh adds them), the weight the loss's rows */
    double w = (double)e->grad_scale * (double)(e->ce_has_ignore ? e->loss_rows : e->terms);
    double terms = (double)e->terms;
    rt_dptr st = rt_cu_stats(e);
    void *a[] = {&stats, &agrad, &L, &n, &E, &coef, &w, &terms, &st};
    rt_cu_launch(e, "rt_moe_aux", 1, 1, 1, 32, 1, 0, a);
}
