/* test_attention_scratch.c: the CPU attention's scratch grows with T, not T^2.
 *
 * The memory plan does not count it (docs/memory.md), so it must stay small at
 * Llama-length sequences (T = 2048 to 8192): the largest block runtime/attention.c
 * allocates in a forward and a backward is measured by wrapping malloc at link time,
 * at T = 512 and T = 2048, causal and not, and must be under 512 T bytes (4 MiB at
 * T = 8192; blocks of up to 64 rows) and grow no faster than T.
 *
 * Built (with or without the sanitizers) by tests/run_all.sh
 * (unit/build_attention_scratch), which lists its sources.
 * Prints "ok NAME" or "FAIL NAME ..." per check; exits 1 if any check failed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rt.h"

/* ---- malloc, watched while `watching` ------------------------------------------ */

void *__real_malloc(size_t n);
static _Atomic size_t largest;
static _Atomic int watching;

void *__wrap_malloc(size_t n)
{
    if (watching) {
        size_t was = largest;
        while (n > was && !__atomic_compare_exchange_n(&largest, &was, n, 0, __ATOMIC_SEQ_CST,
                                                       __ATOMIC_SEQ_CST))
            ;
    }
    return __real_malloc(n);
}

/* ---- the check ------------------------------------------------------------------ */

static float *fill(int64_t n)
{
    float *p = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        p[i] = (float)((i * 37 % 101) - 50) / 64.0f;
    return p;
}

/* The largest block malloc'd by one forward and one backward at (B, T, d, H) = (1, T,
 * 16, 2) on 2 threads. */
static size_t scratch_bytes(rt_pool *pool, int64_t T, int causal)
{
    int64_t d = 16, H = 2;
    float *qkv = fill(T * 3 * d), *dy = fill(T * d), *y = fill(T * d), *lse = fill(H * T),
          *dqkv = fill(T * 3 * d);
    rt_exec e;
    memset(&e, 0, sizeof e);
    e.rt = pool;
    e.grad_scale = 1;
    largest = 0;
    watching = 1;
    rt_attention_fwd(&e, qkv, lse, y, 1, T, d, H, causal);
    rt_attention_bwd(&e, qkv, lse, y, dy, dqkv, 1, T, d, H, causal);
    watching = 0;
    free(qkv), free(dy), free(y), free(lse), free(dqkv);
    return largest;
}

int main(void)
{
    int failures = 0;
    rt_blas_setup();
    rt_pool *pool = rt_pool_new(2);
    for (int causal = 0; causal < 2; causal++) {
        size_t small = scratch_bytes(pool, 512, causal), big = scratch_bytes(pool, 2048, causal);
        size_t bound = (size_t)512 * 2048;
        const char *name = causal ? "causal" : "not causal";
        if (big > bound || big > 4 * small + 4096) {
            printf("FAIL %s: the largest scratch is %zu bytes at T = 512, %zu at T = 2048 "
                   "(at most %zu, and 4 times T = 512's)\n", name, small, big, bound);
            failures++;
        } else {
            printf("ok %s: the largest scratch is %zu bytes at T = 512, %zu at T = 2048\n",
                   name, small, big);
        }
    }
    rt_pool_free(pool);
    return failures != 0;
}
