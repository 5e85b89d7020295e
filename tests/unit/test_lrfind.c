/* The learning-rate range test's suggestion (runtime/lrfind.c) on made-up loss curves:
 * a dip gives the rate where the smoothed loss falls fastest; too few points, or a
 * loss that only rises past the 10 skipped steps, give none, each with its reason. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "rt_loop.h"

static int failed;

static void run(const char *name, int64_t steps, double (*loss)(int64_t), int want_lr,
                const char *why)
{
    rt_lrfind f;
    rt_lrfind_init(&f, 1e-6, 1, steps);
    for (int64_t i = 0; i < steps; i++)
        if (rt_lrfind_add(&f, rt_lrfind_lr(&f, i), loss(i)))
            break;
    double lr = rt_lrfind_suggest(&f);
    const char *got = isfinite(lr) ? "" : rt_lrfind_no_suggestion(&f);
    int ok = want_lr ? isfinite(lr) : !isfinite(lr) && strstr(got, why) != NULL;
    printf("%s %s: %lld points, suggestion %g%s%s\n", ok ? "ok  " : "FAIL", name, (long long)f.n,
           lr, *got ? ", " : "", got);
    failed += !ok;
    rt_lrfind_free(&f);
}

static double dip(int64_t i) { return 2.0 - 1.5 * exp(-pow((double)(i - 40) / 15.0, 2)); }
static double rising(int64_t i) { return 1.0 + 0.01 * (double)i; }

int main(void)
{
    run("a dip", 80, dip, 1, NULL);
    run("8 steps", 8, dip, 0, "too few steps");
    run("a loss that only rises", 40, rising, 0, "least at the start of the range");
    printf("lrfind: %d failed\n", failed);
    return failed != 0;
}
