/* test_losses.c: the CPU losses of runtime/losses.c against their definitions, at the
 * places the trainer-level tests do not reach:
 *   - rt_cross_entropy into a dlogits buffer of its own, rows ld > C apart (a padded
 *     vocabulary), the buffer filled with NaN first: the C gradients are
 *     (softmax - onehot) * grad_scale (1e-6), the ld - C padding is 0 (the head's
 *     backward GEMMs read it; where dlogits is the logits written over, the padding
 *     is already 0, so no model showed a missing zeroing);
 *   - its loss (log-sum-exp - z[target], summed in double) and its correct count
 *     with exact ties: the first maximum wins, as torch.argmax (zero logits: only the
 *     rows labelled 0 are right; the parity tests leave ties out);
 *   - rt_mse: the sum of squares over every element (odd n) and the gradient
 *     2 (y - t) * grad_scale.
 * With 1 and 3 threads. Prints "ok NAME" or "FAIL NAME ..."; exits 1 on a failure.
 *
 * Built by tests/run_all.sh (unit/build_losses), which lists its sources. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rt.h"

static int failures;

static void check(int ok, const char *name, const char *what, const char *why)
{
    printf("%s %s, %s%s%s\n", ok ? "ok" : "FAIL", name, what, ok ? "" : ": ", ok ? "" : why);
    failures += !ok;
}

static float frand(unsigned *s)   /* [-2, 2) */
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 16384.0f - 2.0f;
}

static rt_exec exec_on(rt_pool *pool, float gs)
{
    rt_exec e;
    memset(&e, 0, sizeof e);
    e.rt = pool;
    e.grad_scale = gs;
    return e;
}

/* rows x C logits, ld apart; ties: all logits 0 */
static void test_cross_entropy(rt_pool *pool, int64_t rows, int64_t C, int64_t ld, int ties)
{
    char name[96];
    snprintf(name, sizeof name, "cross_entropy rows %lld C %lld ld %lld%s t=%d", (long long)rows,
             (long long)C, (long long)ld, ties ? " (all ties)" : "", rt_pool_threads(pool));
    unsigned s = 7u + (unsigned)(rows * 31 + C);
    float *z = malloc((size_t)(rows * ld) * sizeof *z), *g = malloc((size_t)(rows * ld) * sizeof *g);
    int32_t *tg = malloc((size_t)rows * sizeof *tg);
    for (int64_t i = 0; i < rows * ld; i++) {
        z[i] = ties ? 0.0f : frand(&s);
        g[i] = NAN;
    }
    int64_t want_correct = 0;
    for (int64_t r = 0; r < rows; r++) {
        tg[r] = (int32_t)((r * 7 + 3) % C);
        if (ties)
            tg[r] = r % 3 == 0 ? 0 : tg[r];
    }
    const float gs = 1.0f / (float)rows;
    rt_exec e = exec_on(pool, gs);
    rt_cross_entropy(&e, z, tg, g, rows, C, ld);
    double loss = 0, worst = 0;
    int pad_ok = 1;
    for (int64_t r = 0; r < rows; r++) {
        const float *zr = z + r * ld;
        double m = zr[0], se = 0;
        int64_t am = 0;
        for (int64_t j = 1; j < C; j++)
            if (zr[j] > m)
                m = zr[j], am = j;
        for (int64_t j = 0; j < C; j++)
            se += exp((double)zr[j] - m);
        loss += m + log(se) - zr[tg[r]];
        want_correct += am == tg[r];
        for (int64_t j = 0; j < C; j++) {
            double want = (exp((double)zr[j] - m) / se - (j == tg[r])) * gs;
            double err = fabs(g[r * ld + j] - want);
            if (!(err <= worst))   /* NaN too */
                worst = isnan(err) ? INFINITY : err;
        }
        for (int64_t j = C; j < ld; j++)
            pad_ok &= g[r * ld + j] == 0.0f;
    }
    char why[160];
    snprintf(why, sizeof why, "gradient off by %.3g (tol 1e-6)", worst);
    check(worst <= 1e-6, name, "gradient", why);
    snprintf(why, sizeof why, "the padding of the gradient is not 0");
    check(pad_ok, name, "padding 0", why);
    snprintf(why, sizeof why, "loss %.9g, want %.9g; %lld terms", e.loss_sum, loss, (long long)e.terms);
    check(fabs(e.loss_sum - loss) <= 1e-5 * fabs(loss) && e.terms == rows, name, "loss", why);
    snprintf(why, sizeof why, "%lld correct, want %lld (the first maximum wins)", (long long)e.correct,
             (long long)want_correct);
    check(e.correct == want_correct, name, "correct", why);
    free(z);
    free(g);
    free(tg);
}

static void test_mse(rt_pool *pool, int64_t n)
{
    char name[64];
    snprintf(name, sizeof name, "mse n %lld t=%d", (long long)n, rt_pool_threads(pool));
    unsigned s = 11u + (unsigned)n;
    float *y = malloc((size_t)n * sizeof *y), *t = malloc((size_t)n * sizeof *t),
          *dy = malloc((size_t)n * sizeof *dy);
    for (int64_t i = 0; i < n; i++) {
        y[i] = frand(&s);
        t[i] = frand(&s);
        dy[i] = NAN;
    }
    const float gs = 0.25f;
    rt_exec e = exec_on(pool, gs);
    rt_mse(&e, y, t, dy, n);
    double loss = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)y[i] - t[i];
        loss += d * d;
        double err = fabs(dy[i] - 2 * d * gs);
        if (!(err <= worst))
            worst = isnan(err) ? INFINITY : err;
    }
    char why[160];
    snprintf(why, sizeof why, "loss %.9g, want %.9g; %lld terms; gradient off by %.3g", e.loss_sum, loss,
             (long long)e.terms, worst);
    check(fabs(e.loss_sum - loss) <= 1e-6 * loss && e.terms == n && worst <= 1e-6, name, "loss and gradient", why);
    free(y);
    free(t);
    free(dy);
}

int main(void)
{
    rt_blas_setup();
    rt_pool *pools[2] = {rt_pool_new(1), rt_pool_new(3)};
    for (int p = 0; p < 2; p++) {
        test_cross_entropy(pools[p], 37, 10, 10, 0);
        test_cross_entropy(pools[p], 37, 10, 16, 0);      /* padded rows */
        test_cross_entropy(pools[p], 5, 1030, 1088, 0);   /* trainc's padded vocabulary */
        test_cross_entropy(pools[p], 30, 7, 8, 1);
        test_mse(pools[p], 1);
        test_mse(pools[p], 4099);
        test_mse(pools[p], 9001);
    }
    printf("%s\n", failures ? "test_losses: FAIL" : "test_losses: ok");
    return failures ? 1 : 0;
}
