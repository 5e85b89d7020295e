/* bench_attn.c: the attention kernels alone (runtime/cuda_ops.c's rt_cu_attention_fwd and
 * _bwd, whichever kernels the runtime picks for the GPU it finds), timed with CUDA events:
 * TFLOP/s forward and backward at T 1024, 2048 and 4096, head dims 64 and 128, causal
 * and full, in bf16 (--fp16: fp16), as FlashAttention's benchmarks count them. One JSON
 * line a shape on stdout; bench/gpu_attention.sh runs it beside PyTorch's SDPA
 * (bench/gpu_attention_torch.py) on the same device.
 *
 * Shapes: d = 2048 (32 heads of 64, 16 of 128), B = 16384 / T (16k tokens a call).
 * FLOPs: forward 4 B H T^2 hd (two products of 2 B H T^2 hd), halved when causal;
 * backward 2.5 times the forward (five products instead of two). The same formula is
 * used for PyTorch, so the ratio is one of times.
 *
 * Then the Llama-family attention (rt_cu_attention_ext_fwd and _bwd: grouped-query heads,
 * rope) at four models' shapes, causal, 16k tokens a call: llama3_1b's (T 2048, 32 heads
 * on 8 key/value heads of 64, rope theta 500000 with llama3 scaling), llama_124m's (T
 * 1024, 12 heads on 4, theta 10000), a global layer of Gemma 3 1B's (T 2048, 4 heads
 * on one, 256 wide, theta 1000000) and one of Gemma 2 2B's (T 2048, 8 heads on 4, 256
 * wide, the scores soft-capped at 50: the CAP kernels); "shape" names them. Their FLOPs
 * are counted as above (the rope and qk_norm pass of the sm_90a kernels and the cap's
 * tanh are in the time, not the count).
 *
 * Usage: build/tests/gpu/bench_attn [--fp16] [--tiny] [--iters N] [TEMPLATE_DIR]
 * --tiny: T 64, B 2, one iteration, for a dry run on tests/fake_gpu (the numbers
 * mean nothing there). Without a GPU it exits 2 with the runtime's message. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rt_cuda.h"
#include "rt_half.h"

static int fp16, tiny, iters = 20;
static rt_exec *G;

/* the Llama-family shapes (causal) */
static const struct gqa_shape {
    const char *name;
    int T, H, KV, hd;
    float theta, factor, low, high;
    int orig;    /* llama3 scaling's original_max_position_embeddings (factor 0: none) */
    float cap;   /* the scores' soft-cap (Gemma 2's; the CAP kernels), or 0 */
} gqa[] = {
    {"llama3_1b", 2048, 32, 8, 64, 500000.0f, 32.0f, 1.0f, 4.0f, 8192, 0.0f},
    {"llama_124m", 1024, 12, 4, 64, 10000.0f, 0.0f, 1.0f, 1.0f, 0, 0.0f},
    {"gemma3_1b", 2048, 4, 1, 256, 1000000.0f, 0.0f, 1.0f, 1.0f, 0, 0.0f},
    {"gemma2_2b", 2048, 8, 4, 256, 10000.0f, 0.0f, 1.0f, 1.0f, 0, 50.0f},
};
#define N_GQA (int)(sizeof gqa / sizeof gqa[0])

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (!s)
        rt_die("bench_attn: out of memory");
    if (fread(s, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "bench_attn: cannot read %s\n", path);
        exit(1);
    }
    s[n] = 0;
    fclose(f);
    return s;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The kernels as trainc writes a 16-bit model's kernels_cuda.cu: the precision's define,
 * prelude.cuh and common.cuh, every other template in name order (as check_ops.c reads
 * them), then one forward and one backward instance per (T, hd, causal) benchmarked. */
static char *kernel_source(const char *dir, const int *Ts, int nT)
{
    DIR *dd = opendir(dir);
    if (!dd) {
        perror(dir);
        exit(1);
    }
    char *names[64] = {"prelude.cuh", "common.cuh"};
    int n = 2;
    struct dirent *de;
    while ((de = readdir(dd))) {
        size_t l = strlen(de->d_name);
        if (l > 4 && !strcmp(de->d_name + l - 4, ".cuh") && strcmp(de->d_name, "prelude.cuh") &&
            strcmp(de->d_name, "common.cuh") && n < 64)
            names[n++] = strdup(de->d_name);
    }
    closedir(dd);
    qsort(names + 2, (size_t)n - 2, sizeof *names, by_name);
    size_t cap = 1 << 22, len = 0;
    char *src = malloc(cap);
    if (!src)
        rt_die("bench_attn: out of memory");
    len += (size_t)snprintf(src, cap, "#define %s 1\n", fp16 ? "RT_ACT_F16" : "RT_ACT_BF16");
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        char *part = slurp(path);
        size_t pn = strlen(part);
        while (len + pn + 4096 > cap)
            cap *= 2, src = realloc(src, cap);
        if (!src)
            rt_die("bench_attn: out of memory");
        memcpy(src + len, part, pn + 1);
        len += pn;
        free(part);
        if (i >= 2)
            free(names[i]);
    }
    for (int t = 0; t < nT; t++)
        for (int hd = 64; hd <= 128; hd *= 2)
            for (int c = 0; c < 2; c++)
                len += (size_t)snprintf(src + len, cap - len,
                                        "\nRT_ATTENTION_FWD(%d, %d, %d)\nRT_ATTENTION_BWD(%d, %d, %d)\n",
                                        Ts[t], hd, c, Ts[t], hd, c);
    for (int k = 0; k < N_GQA; k++) {
        int T = tiny ? 64 : gqa[k].T, seen = 0;
        const char *c = gqa[k].cap > 0.0f ? "CAP_" : "";
        for (int j = 0; j < k; j++)   /* one instance a (length, head width, cap or not) */
            seen |= (tiny ? 64 : gqa[j].T) == T && gqa[j].hd == gqa[k].hd &&
                    (gqa[j].cap > 0.0f) == (gqa[k].cap > 0.0f);
        if (!seen)
            len += (size_t)snprintf(src + len, cap - len,
                                    "\nRT_ATTENTION_EXT_%sFWD(%d, %d, 1)"
                                    "\nRT_ATTENTION_EXT_%sBWD(%d, %d, 1)\n",
                                    c, T, gqa[k].hd, c, T, gqa[k].hd);
    }
    return src;
}

/* n 16-bit values uniform in [-a, a) at p (device), from a fixed seed */
static void fill(rt_dptr p, int64_t n, float a, uint64_t seed)
{
    uint16_t *h = rt_xmalloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        float u = (float)(seed >> 40) / (float)(1ull << 24) * 2.0f - 1.0f;
        h[i] = fp16 ? rt_float_to_f16(a * u) : rt_float_to_bf16(a * u);
    }
    rt_cu_upload(p, h, (size_t)n * 2);
    rt_xfree(h);
}

/* ms per call of the forward (bwd 0) or the backward (bwd 1), over `iters` calls after 3 */
static double time_calls(int bwd, const float *qkv, float *lse, float *y, const float *dy, float *dqkv,
                         int64_t B, int64_t T, int64_t d, int64_t H, int causal)
{
    for (int i = 0; i < 3 + iters; i++) {
        if (i == 3)
            rt_cu_prof_event(G, 0);
        if (bwd)
            rt_cu_attention_bwd(G, qkv, lse, y, dy, dqkv, B, T, d, H, causal);
        else
            rt_cu_attention_fwd(G, qkv, lse, y, B, T, d, H, causal);
    }
    float ms[1];
    rt_cu_prof_elapsed(G, 1, ms);
    return ms[0] / iters;
}

static void bench_shape(rt_dptr base, int64_t T, int64_t hd, int causal)
{
    const int64_t d = 2048, H = d / hd, B = (tiny ? 128 : 16384) / T;
    const int64_t nq = B * T * 3 * d, ny = B * T * d;
    rt_dptr q = base, yv = q + (rt_dptr)nq * 2, g = yv + (rt_dptr)ny * 2, dq = g + (rt_dptr)ny * 2;
    rt_dptr l = dq + (rt_dptr)nq * 2;
    fill(q, nq, 1.0f, 1 + (uint64_t)T), fill(g, ny, 1.0f, 2 + (uint64_t)T);
    float *qkv = (float *)(uintptr_t)q, *y = (float *)(uintptr_t)yv, *dy = (float *)(uintptr_t)g;
    float *dqkv = (float *)(uintptr_t)dq, *lse = (float *)(uintptr_t)l;
    double fwd_ms = time_calls(0, qkv, lse, y, dy, dqkv, B, T, d, H, causal);
    double bwd_ms = time_calls(1, qkv, lse, y, dy, dqkv, B, T, d, H, causal);
    double flop = 4.0 * (double)B * (double)H * (double)T * (double)T * (double)hd * (causal ? 0.5 : 1.0);
    printf("{\"impl\":\"trainc\",\"kernels\":\"%s\",\"dtype\":\"%s\",\"B\":%lld,\"T\":%lld,\"H\":%lld,"
           "\"hd\":%lld,\"causal\":%s,\"fwd_ms\":%.4f,\"bwd_ms\":%.4f,\"fwd_tflops\":%.2f,"
           "\"bwd_tflops\":%.2f,\"device\":\"%s\",\"arch\":\"%s\",\"iters\":%d}\n",
           rt_cu_kernels_from(G), fp16 ? "fp16" : "bf16", (long long)B, (long long)T, (long long)H,
           (long long)hd, causal ? "true" : "false", fwd_ms, bwd_ms, flop / fwd_ms * 1e-9,
           2.5 * flop / bwd_ms * 1e-9, rt_cu_name(G), rt_cu_arch(G), iters);
    fflush(stdout);
}

/* ms per call of the Llama-family forward (bwd 0) or backward (bwd 1), as time_calls */
static double time_ext(int bwd, const struct gqa_shape *g, int64_t T, const float *qkv, float *lse,
                       float *y, const float *dy, float *dqkv, int64_t B)
{
    const int64_t d = (int64_t)g->H * g->hd;
    const float scale = (float)(1.0 / sqrt((double)g->hd));
    for (int i = 0; i < 3 + iters; i++) {
        if (i == 3)
            rt_cu_prof_event(G, 0);
        if (bwd)
            rt_cu_attention_ext_bwd(G, qkv, NULL, NULL, lse, y, dy, dqkv, NULL, NULL, B, T, d,
                                    g->H, g->KV, 1, 0, g->theta, g->factor, g->low, g->high,
                                    g->orig, NULL, scale, g->cap, NULL);
        else
            rt_cu_attention_ext_fwd(G, qkv, NULL, NULL, lse, y, B, T, d, g->H, g->KV, 1, 0,
                                    g->theta, g->factor, g->low, g->high, g->orig, NULL,
                                    scale, g->cap, NULL);
    }
    float ms[1];
    rt_cu_prof_elapsed(G, 1, ms);
    return ms[0] / iters;
}

static void bench_gqa(rt_dptr base, const struct gqa_shape *g)
{
    const int64_t T = tiny ? 64 : g->T, hd = g->hd, H = g->H, KV = g->KV, B = (tiny ? 128 : 16384) / T;
    const int64_t nq = B * T * (H + 2 * KV) * hd, ny = B * T * H * hd;
    rt_dptr q = base, yv = q + (rt_dptr)nq * 2, gr = yv + (rt_dptr)ny * 2, dq = gr + (rt_dptr)ny * 2;
    rt_dptr l = dq + (rt_dptr)nq * 2;
    fill(q, nq, 1.0f, 11 + (uint64_t)T), fill(gr, ny, 1.0f, 12 + (uint64_t)T);
    float *qkv = (float *)(uintptr_t)q, *y = (float *)(uintptr_t)yv, *dy = (float *)(uintptr_t)gr;
    float *dqkv = (float *)(uintptr_t)dq, *lse = (float *)(uintptr_t)l;
    double fwd_ms = time_ext(0, g, T, qkv, lse, y, dy, dqkv, B);
    double bwd_ms = time_ext(1, g, T, qkv, lse, y, dy, dqkv, B);
    double flop = 4.0 * (double)B * (double)H * (double)T * (double)T * (double)hd * 0.5;
    printf("{\"impl\":\"trainc\",\"kernels\":\"%s\",\"shape\":\"%s\",\"dtype\":\"%s\",\"B\":%lld,"
           "\"T\":%lld,\"H\":%lld,\"KV\":%lld,\"hd\":%lld,\"causal\":true,\"rope_theta\":%g,"
           "\"softcap\":%g,\"fwd_ms\":%.4f,\"bwd_ms\":%.4f,\"fwd_tflops\":%.2f,\"bwd_tflops\":%.2f,"
           "\"device\":\"%s\",\"arch\":\"%s\",\"iters\":%d}\n",
           rt_cu_kernels_from(G), g->name, fp16 ? "fp16" : "bf16", (long long)B, (long long)T,
           (long long)H, (long long)KV, (long long)hd, (double)g->theta, (double)g->cap, fwd_ms,
           bwd_ms,
           flop / fwd_ms * 1e-9, 2.5 * flop / bwd_ms * 1e-9, rt_cu_name(G), rt_cu_arch(G), iters);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int a = 1;
    for (; a < argc && !strncmp(argv[a], "--", 2); a++) {
        if (!strcmp(argv[a], "--fp16"))
            fp16 = 1;
        else if (!strcmp(argv[a], "--tiny"))
            tiny = 1, iters = 1;
        else if (!strcmp(argv[a], "--iters") && a + 1 < argc)
            iters = atoi(argv[++a]);
        else {
            fprintf(stderr, "bench_attn: unknown option %s\n", argv[a]);
            return 2;
        }
    }
    if (iters < 1) {
        fprintf(stderr, "bench_attn: --iters must be at least 1\n");
        return 2;
    }
    const int big[] = {1024, 2048, 4096}, small[] = {64};
    const int *Ts = tiny ? small : big, nT = tiny ? 1 : 3;
    char *src = kernel_source(a < argc ? argv[a] : "templates/cuda", Ts, nT);
    rt_cu_ops_register();
    rt_cu_blas_register();
    G = rt_cu_test_open(src, 256u << 20);   /* exits 2 without a GPU; the prep pass's scratch */
    /* one arena for every shape: qkv and dqkv (3 d a token), y and dy (d), lse (fp32) */
    const int64_t tokens = tiny ? 128 : 16384, d = 2048;
    size_t bytes = (size_t)tokens * d * 2 * 8 + (size_t)tokens * 32 * 4 + (1u << 20);
    rt_dptr base = rt_cu_alloc(bytes);
    rt_cu_test_arena(G, base, bytes, fp16 ? RT_PREC_FP16 : RT_PREC_BF16);
    rt_cu_prof_setup(G, 2);   /* the start, and the end rt_cu_prof_elapsed records */
    for (int t = 0; t < nT; t++)
        for (int hd = 64; hd <= 128; hd *= 2)
            for (int c = 1; c >= 0; c--)
                bench_shape(base, Ts[t], hd, c);
    for (int k = 0; k < N_GQA; k++)
        bench_gqa(base, &gqa[k]);
    free(src);
    return 0;
}
