/* blas.c: OpenBLAS's set-up: one thread (the pool splits big GEMMs itself) and kernels
 * that match the CPU.
 *
 * OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels by the CPU's model
 * number when the library loads. A model newer than the library is not in its table,
 * and it falls back to a core without AVX: Debian 12's 0.3.21 runs "Prescott" (SSE3)
 * kernels on Intel's Emerald Rapids (family 6, model 207), 5 to 8 times slower than its
 * AVX-512 ones there. Where OpenBLAS took such a core but the CPU has AVX2 and FMA,
 * rt_blas_setup chooses again by the CPU's features, as OpenBLAS does when
 * OPENBLAS_CORETYPE names a core: SkylakeX with AVX-512 (F, BW, VL, DQ), else Haswell.
 * It uses OpenBLAS's own exported re-initialisation (gotoblas_dynamic_quit, then
 * gotoblas_dynamic_init, which reads OPENBLAS_CORETYPE), before any BLAS call. A user's
 * OPENBLAS_CORETYPE is left alone; an OpenBLAS without DYNAMIC_ARCH has no choice to
 * make. rt_blas_core says what runs (the trainer's and trainc's --version print it). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rt.h"

/* Not in every cblas.h (netlib's lacks them); OpenBLAS always exports them. */
extern void openblas_set_num_threads(int num_threads);
extern char *openblas_get_corename(void);
/* OpenBLAS with DYNAMIC_ARCH only */
extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));
extern char gotoblas_SKYLAKEX[] __attribute__((weak));
extern char gotoblas_HASWELL[] __attribute__((weak));

static char chosen_from[32];   /* the core OpenBLAS had taken, when rt_blas_setup chose again */

/* OpenBLAS's x86-64 cores without AVX2 (its corename strings) */
static int core_without_avx2(const char *name)
{
    static const char *old[] = {"Unknown", "Katmai",    "Coppermine", "Northwood", "Prescott",
                                "Banias",  "Atom",      "Core2",      "Penryn",    "Dunnington",
                                "Nehalem", "Athlon",    "Opteron",    "Opteron(SSE3)",
                                "Barcelona", "Nano",    "Sandybridge", "Bobcat",   "Bulldozer",
                                "Piledriver", "Steamroller"};
    for (size_t i = 0; i < sizeof old / sizeof *old; i++)
        if (!strcasecmp(name, old[i]))
            return 1;
    return 0;
}

/* the core this CPU's features allow, NULL when none better or not in this OpenBLAS */
static const char *core_for_cpu(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        gotoblas_SKYLAKEX)
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && gotoblas_HASWELL)
        return "Haswell";
#endif
    return NULL;
}

static void choose_core(void)
{
    if (getenv("OPENBLAS_CORETYPE") || !gotoblas_dynamic_init || !gotoblas_dynamic_quit)
        return;
    const char *now = openblas_get_corename();
    const char *want = core_for_cpu();
    if (!now || !want || !core_without_avx2(now))
        return;
    snprintf(chosen_from, sizeof chosen_from, "%s", now);
    setenv("OPENBLAS_CORETYPE", want, 1);   /* read by gotoblas_dynamic_init */
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    unsetenv("OPENBLAS_CORETYPE");   /* (not passed on to processes started from here) */
}

/* Before the first BLAS call: OpenBLAS's kernels and its single thread. */
void rt_blas_setup(void)
{
    static int done;
    if (!done) {
        done = 1;
        choose_core();
    }
    openblas_set_num_threads(1);
}

/* "SkylakeX" or, where rt_blas_setup chose it, "SkylakeX (OpenBLAS took Prescott)" */
const char *rt_blas_core(void)
{
    static char s[96];
    const char *now = openblas_get_corename();
    if (chosen_from[0])
        snprintf(s, sizeof s, "%s (OpenBLAS took %s)", now ? now : "?", chosen_from);
    else
        snprintf(s, sizeof s, "%s", now ? now : "?");
    return s;
}
