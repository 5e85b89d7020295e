/* lrfind.c: the learning-rate range test (`--lr-find`), as PyTorch Lightning's
 * Tuner.lr_find runs it: optimizer steps at learning rates growing exponentially from
 * lo to hi, the loss smoothed by an exponential average (beta 0.98, bias-corrected),
 * stopped once the smoothed loss exceeds 4 times its best (or is not finite), and the
 * suggestion the rate where the smoothed loss falls fastest (the least of its
 * differences by step, central inside, one-sided at the ends: numpy.gradient), the
 * first 10 points and the last one left out, and (unlike Lightning) those after the
 * smoothed loss's least value. mode_lrfind.c runs the steps; this file keeps
 * the curve and writes it (lr_find.jsonl, lr_find.svg by metrics.c). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "rt_loop.h"

#define LRF_BETA 0.98
#define LRF_STOP 4.0          /* early_stop_threshold */
#define LRF_SKIP_BEGIN 10
#define LRF_SKIP_END 1

void rt_lrfind_init(rt_lrfind *f, double lo, double hi, int64_t steps)
{
    memset(f, 0, sizeof *f);
    f->lo = lo;
    f->hi = hi;
    f->steps = steps;
    f->best = INFINITY;
    f->lr = rt_xmalloc((size_t)steps * sizeof *f->lr);
    f->loss = rt_xmalloc((size_t)steps * sizeof *f->loss);
    f->smooth = rt_xmalloc((size_t)steps * sizeof *f->smooth);
}

void rt_lrfind_free(rt_lrfind *f)
{
    free(f->lr);
    free(f->loss);
    free(f->smooth);
}

double rt_lrfind_lr(const rt_lrfind *f, int64_t step)
{
    if (f->steps < 2)
        return f->lo;
    return f->lo * pow(f->hi / f->lo, (double)step / (double)(f->steps - 1));
}

int rt_lrfind_add(rt_lrfind *f, double lr, double loss)
{
    if (f->n >= f->steps)
        return 1;
    f->avg = LRF_BETA * f->avg + (1 - LRF_BETA) * loss;
    double sm = f->avg / (1 - pow(LRF_BETA, (double)(f->n + 1)));
    f->lr[f->n] = lr;
    f->loss[f->n] = loss;
    f->smooth[f->n] = sm;
    f->n++;
    if (!isfinite(sm) || (f->n > 1 && sm > LRF_STOP * f->best)) {
        f->diverged = 1;
        return 1;
    }
    if (sm < f->best)
        f->best = sm;
    return f->n >= f->steps;
}

double rt_lrfind_suggest(const rt_lrfind *f)
{
    /* the finite smoothed losses of points [10, n - 1), in order (Lightning drops the
     * others before it differentiates), up to the least of them: past it the loss
     * rises, and a noisy tail there (a step down on the way up) can fall faster than
     * the descent the test is for, which Lightning then suggests */
    int64_t end = f->n - LRF_SKIP_END, low = -1;
    for (int64_t i = LRF_SKIP_BEGIN; i < end; i++)
        if (isfinite(f->smooth[i]) && (low < 0 || f->smooth[i] < f->smooth[low]))
            low = i;
    if (low >= 0)
        end = low + 1;
    int64_t m = 0, *at = rt_xmalloc((size_t)(f->n > 0 ? f->n : 1) * sizeof *at);
    for (int64_t i = LRF_SKIP_BEGIN; i < end; i++)
        if (isfinite(f->smooth[i]))
            at[m++] = i;
    double lr = NAN, least = INFINITY;
    for (int64_t j = 0; m >= 2 && j < m; j++) {
        const double *y = f->smooth;
        double g = j == 0 ? y[at[1]] - y[at[0]]
                   : j == m - 1 ? y[at[j]] - y[at[j - 1]] : (y[at[j + 1]] - y[at[j - 1]]) / 2;
        if (g < least) {   /* the first of equal ones, as argmin */
            least = g;
            lr = f->lr[at[j]];
        }
    }
    free(at);
    return lr;
}

/* Why rt_lrfind_suggest found none: too few steps past the skipped ones, or a smoothed
 * loss that was least at the first step it looks at (it only rose from there). */
const char *rt_lrfind_no_suggestion(const rt_lrfind *f)
{
    int64_t end = f->n - LRF_SKIP_END, finite = 0;
    for (int64_t i = LRF_SKIP_BEGIN; i < end; i++)
        finite += isfinite(f->smooth[i]) != 0;
    return finite < 2 ? "too few steps with a finite loss past the first 10; more "
                        "--lr-find-steps, or a --lr-find-range whose rates train"
                      : "the smoothed loss was least at the start of the range (it only rose "
                        "from there); a --lr-find-range with lower rates";
}

/* lr_find.jsonl: a line a step, then the result; written whole (temporary name,
 * renamed), like the other outputs. Returns 0, or -1 with errno set. */
int rt_lrfind_write(const rt_lrfind *f, const char *dir, double suggested, int interrupted)
{
    char path[RT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/lr_find.jsonl", dir);
    FILE *o = rt_tmp_open(path);
    if (!o)
        return -1;
    char a[32], b[32], c[32];
    for (int64_t i = 0; i < f->n; i++)
        fprintf(o, "{\"step\":%lld,\"lr\":%s,\"loss\":%s,\"smoothed\":%s}\n", (long long)i + 1,
                rt_json_num(a, f->lr[i]), rt_json_num(b, f->loss[i]), rt_json_num(c, f->smooth[i]));
    fprintf(o, "{\"event\":\"lr_find\",\"steps\":%lld,\"stopped\":\"%s\",\"min_lr\":%s,\"max_lr\":%s,"
               "\"suggested_lr\":%s}\n",
            (long long)f->n, interrupted ? "interrupted" : f->diverged ? "loss_diverged" : "steps",
            rt_json_num(a, f->lo), rt_json_num(b, f->hi), rt_json_num(c, suggested));
    if (rt_tmp_commit(o, path) != 0)
        return -1;
    rt_plot_lr_find(dir, f->lr, f->smooth, f->n, suggested);
    return 0;
}
