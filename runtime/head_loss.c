/* head_loss.c: a language model's head and its cross entropy, a chunk of rows at a
 * time (rt_head_cross_entropy, trainc_rt.h), so that a training step holds chunk rows
 * of the [B, T, vocab] logits rather than all of them. Made of the GEMM and loss calls
 * the unchunked step makes, so it runs wherever they do (the CPU, a GPU). */
#include "rt.h"
#include "rt_cuda.h"

void rt_head_cross_entropy(rt_exec *e, const float *x, const float *w, const int32_t *target,
                           float *dx, float *dw, float *z, int64_t rows, int64_t chunk,
                           int64_t d, int64_t wrows, int64_t C, int64_t ld, float ls)
{
    if (chunk <= 0)
        rt_die("rt_head_cross_entropy: chunks of %lld rows", (long long)chunk);
    rt_ce_count(e, target, rows);   /* (ignore_index: the mean is over all the rows') */
    for (int64_t r = 0; r < rows; r += chunk) {
        int64_t n = rows - r < chunk ? rows - r : chunk;
        const float *xr = rt_act_adv(e, x, r * d);
        float *dz = dw || dx ? z : NULL;   /* (training: a frozen head's dw is NULL) */
        rt_gemm(e, 0, 1, n, wrows, d, 1.0f, xr, d, w, d, 0.0f, z, ld);
        if (ls > 0.0f)
            rt_cross_entropy_ls(e, z, target + r, dz, n, C, ld, ls);
        else
            rt_cross_entropy(e, z, target + r, dz, n, C, ld);
        if (!dz)
            continue;
        if (dx)
            rt_gemm(e, 0, 0, n, d, wrows, 1.0f, z, ld, w, d, 0.0f, rt_act_adv(e, dx, r * d), d);
        if (dw)
            rt_gemm(e, 1, 0, wrows, d, n, 1.0f, z, ld, xr, d, 1.0f, dw, d);
    }
    rt_ce_done(e);
}
