/* muon.c: optimizer.type muon on the CPU: torch.optim.Muon's update of the hidden layers'
 * weight matrices (rt_param.muon: each block of rows a matrix of its own, as attention's
 * q, k and v and a gated MLP's two halves are in Hugging Face's models), and
 * torch.optim.AdamW's, with optimizer.adamw's keys, of every other parameter (the
 * embeddings, the head, norms, biases). docs/spec.md, "Muon". Arithmetic in fp32 as
 * PyTorch's on fp32 tensors (the Newton-Schulz iteration too: torch runs it in bf16 on
 * a GPU), the GEMMs rt_gemm's over the thread pool (cut by shape alone: the same bits
 * for any thread count). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "rt_loop.h"

/* torch.optim.Muon's quintic Newton-Schulz coefficients (rt_loop.h's RT_MUON_NS_*) */
static const float NS_A = RT_MUON_NS_A, NS_B = RT_MUON_NS_B, NS_C = RT_MUON_NS_C;

int rt_muon_takes(const rt_train_config *c, const rt_param *p)
{
    return c && c->opt == RT_OPT_MUON && p->muon[0] > 0 && !p->frozen;
}

rt_train_config rt_muon_adamw(const rt_train_config *c, double lr, double *aw_lr)
{
    rt_train_config a = *c;
    *aw_lr = c->aw_lr * (lr / c->lr);   /* (the schedule's factor; muon's lr is above 0) */
    a.opt = RT_OPT_ADAMW;
    a.lr = c->aw_lr;
    a.beta1 = c->aw_beta1;
    a.beta2 = c->aw_beta2;
    a.eps = c->aw_eps;
    a.weight_decay = c->aw_weight_decay;
    a.momentum = 0;
    a.nesterov = 0;
    return a;
}

/* torch's lerp: self + w (end - self), or for w >= 0.5 end - (end - self)(1 - w) */
static inline float lerp(float self, float end, float w)
{
    return w < 0.5f ? self + w * (end - self) : end - (end - self) * (1.0f - w);
}

/* The momentum buffer and the update of n elements: buf = lerp(buf, g, 1 - momentum),
 * u = nesterov ? lerp(g, buf, momentum) : buf (g read times gs) */
static void momentum(const rt_train_config *c, const float *g, float gs, float *buf, float *u,
                     int64_t n)
{
    float w = (float)(1.0 - c->momentum), mom = (float)c->momentum;
    for (int64_t k = 0; k < n; k++) {
        float gk = g[k] * gs;
        buf[k] = lerp(buf[k], gk, w);
        u[k] = c->nesterov ? lerp(gk, buf[k], mom) : buf[k];
    }
}

/* X [m, n] (m <= n) orthogonalized in place: X / max(|X|_F, eps), then ns_steps of
 * A = X X^T, B = b A + c A A, X = a X + B X (e: the pool's, for rt_gemm). Scratch:
 * 2 m m + m n floats. */
static void newton_schulz(rt_exec *e, float *X, int64_t m, int64_t n, int64_t steps, float eps,
                          float *work)
{
    double ss = 0;
    for (int64_t k = 0; k < m * n; k++)
        ss += (double)X[k] * (double)X[k];
    float norm = (float)sqrt(ss);
    float inv = norm > eps ? norm : eps;
    for (int64_t k = 0; k < m * n; k++)
        X[k] /= inv;
    float *A = work, *B = work + m * m, *Y = B + m * m;
    for (int64_t s = 0; s < steps; s++) {
        rt_gemm(e, 0, 1, m, m, n, 1.0f, X, n, X, n, 0.0f, A, m);
        memcpy(B, A, (size_t)(m * m) * sizeof *B);
        rt_gemm(e, 0, 0, m, m, m, NS_C, A, m, A, m, NS_B, B, m);
        memcpy(Y, X, (size_t)(m * n) * sizeof *Y);
        rt_gemm(e, 0, 0, m, n, m, 1.0f, B, m, X, n, NS_A, Y, n);
        memcpy(X, Y, (size_t)(m * n) * sizeof *X);
    }
}

double rt_muon_block_lr(const rt_train_config *c, double lr, int64_t rows, int64_t cols)
{
    if (c->muon_adjust == RT_MUON_ADJUST_MATCH_RMS_ADAMW)
        return lr * 0.2 * sqrt((double)(rows > cols ? rows : cols));
    return lr * sqrt(fmax(1.0, (double)rows / (double)cols));
}

/* One block U [rows, cols] of the update orthogonalized (transposed first when it has
 * more rows than columns, as torch does) */
static void orthogonalize(rt_exec *e, const rt_train_config *c, float *U, int64_t rows,
                          int64_t cols)
{
    int tall = rows > cols;
    int64_t m = tall ? cols : rows, n = tall ? rows : cols;
    float *X = rt_xmalloc((size_t)(m * n) * sizeof *X);
    float *work = rt_xmalloc((size_t)(2 * m * m + m * n) * sizeof *work);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            X[tall ? j * n + i : i * n + j] = U[i * cols + j];
    newton_schulz(e, X, m, n, c->ns_steps > 0 ? c->ns_steps : 5, (float)c->eps, work);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            U[i * cols + j] = X[tall ? j * n + i : i * n + j];
    free(X);
    free(work);
}

/* Muon's step of parameter p (whole): g its gradient (times gs), buf its momentum */
static void muon_param(rt_exec *e, const rt_train_config *c, const rt_param *pp, float *p,
                       const float *g, float gs, float *buf, double lr)
{
    int64_t cols = pp->shape[1];
    float *u = rt_xmalloc((size_t)pp->numel * sizeof *u);
    momentum(c, g, gs, buf, u, pp->numel);
    float decay = (float)(1.0 - lr * c->weight_decay);
    for (int64_t k = 0; k < pp->numel; k++)
        p[k] *= decay;
    int64_t r0 = 0;
    for (int b = 0; b < RT_MUON_BLOCKS && pp->muon[b]; b++) {
        int64_t rows = pp->muon[b];
        float *U = u + r0 * cols;
        orthogonalize(e, c, U, rows, cols);
        float alpha = (float)rt_muon_block_lr(c, lr, rows, cols);
        for (int64_t k = 0; k < rows * cols; k++)
            p[r0 * cols + k] += -alpha * U[k];
        r0 += rows;
    }
    free(u);
}

void rt_muon_step(rt_pool *pool, const rt_train_config *c, const rt_model *m, int64_t lo,
                  int64_t hi, float *params, const float *grads, float *state, int64_t stride,
                  int64_t t, double lr, float gscale, int clip)
{
    double aw_lr;
    rt_train_config aw = rt_muon_adamw(c, lr, &aw_lr);
    rt_exec e = {.rt = pool};   /* (rt_gemm's pool; the CPU: no device) */
    for (int i = 0; i < m->n_params; i++) {
        const rt_param *pp = &m->params[i];
        int64_t k0 = lo > pp->offset ? lo - pp->offset : 0;
        int64_t k1 = hi < pp->offset + pp->numel ? hi - pp->offset : pp->numel;
        if (k1 <= k0)
            continue;
        if (!rt_muon_takes(c, pp)) {
            rt_optim_param(pool, &aw, pp, lo, k0, k1, params, grads, state, stride, t, aw_lr,
                           gscale, clip);
            continue;
        }
        if (k0 != 0 || k1 != pp->numel)
            rt_die("muon: the range [%lld, %lld) cuts matrix %s", (long long)lo, (long long)hi,
                   pp->name);
        int64_t at = pp->offset - lo;
        muon_param(&e, c, pp, params + pp->offset, grads + at, clip ? gscale : 1.0f, state + at,
                   lr);
    }
}
