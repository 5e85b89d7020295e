#define _GNU_SOURCE
/* cuda_blas.c: rt_gemm on the GPU through cuBLASLt.
 *
 * cuBLASLt is column-major; a row-major C[M,N] = op(A) op(B) is the column-major
 * C^T[N,M] = op(B)^T op(A)^T, so B goes first and the roles of M and N swap. A model
 * has a handful of GEMM shapes: each gets its descriptors and the heuristic's best
 * algorithm once (the first step) and reuses them. Compute is fp32 with fp32
 * accumulation (CUBLAS_COMPUTE_32F: no TF32), so fp32 training tracks the CPU. With
 * bf16-mixed (fp16-mixed), A and B are bf16 (fp16): activations and the parameters'
 * 16-bit copy, on the tensor cores; C is 16-bit for an activation and fp32 for a
 * parameter gradient; the accumulation stays fp32 (rt_cu_operand tells the storage
 * from the address). With fp8-mixed the linear layers' GEMMs take FP8 operands (the
 * last section).
 *
 * Loaded with dlopen (dl.c) for the reason nvrtc.c gives. */
#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>
#include "rt_cuda.h"

#define LT_FNS(X)                                                                              \
    X(cublasLtCreate) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescSetAttribute)            \
    X(cublasLtMatmulDescDestroy) X(cublasLtMatmulPreferenceDestroy)                            \
    X(cublasLtMatrixLayoutCreate) X(cublasLtMatmulPreferenceCreate)                            \
    X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic)                  \
    X(cublasLtMatmul) X(cublasLtGetStatusString) X(cublasLtMatrixLayoutSetAttribute)        \
    X(cublasLtGetVersion) X(cublasLtMatmulAlgoConfigGetAttribute)
#define DECLARE(fn) static __typeof__(fn) *p_##fn;
LT_FNS(DECLARE)

static cublasLtHandle_t lt;

static void lt_check(cublasStatus_t s, const char *what)
{
    if (s != CUBLAS_STATUS_SUCCESS)
        rt_fail("cuBLASLt: %s failed: %s", what,
                p_cublasLtGetStatusString ? p_cublasLtGetStatusString(s) : "error");
}
#define LT(call) lt_check((call), #call)

int rt_cu_blas_symbols(char *why, size_t n)
{
    static const char *const names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so", NULL};
    static const char *const syms[] = {LT_FNS(RT_DL_NAME)};
    void **const fns[] = {LT_FNS(RT_DL_SLOT)};
    return rt_dl_load("cuBLASLt", names, syms, fns, (int)(sizeof fns / sizeof *fns), why, n);
}

static void lt_load(void)
{
    char why[512];
    if (rt_cu_blas_symbols(why, sizeof why) != 0)
        rt_fail("%s\n  hint: install the CUDA toolkit's cuBLAS, or ship the trainer with trainc "
                "build --bundle DIR", why);
    LT(p_cublasLtCreate(&lt));
}

/* VAR=VAL in the environment (a switch: "0" turns a path off, "1" a diagnostic on),
 * read once into *cache (-1: not read yet) */
static int env_is(const char *var, const char *val, int *cache)
{
    if (*cache < 0) {
        const char *v = getenv(var);
        *cache = v && !strcmp(v, val);
    }
    return *cache;
}

typedef struct Plan {
    int ta, tb;
    int epi;                   /* an epilogue: RT_EPI_* or EPI_GELU_AUX (GELU keeping the
                                  pre-activation) for rt_cu_gemm_bias, EPI_BGRADB for
                                  rt_cu_gemm_dbias, EPI_DGELU for rt_cu_gemm_dgelu; -1 without */
    int fallback;              /* cuBLASLt refused the epilogue: GEMM, then rt_bias_act */
    int bias16;                /* the bias in D's 16-bit type (the parameter's 16-bit copy):
                                  cuBLASLt refused an fp32 one beside a 16-bit D */
    int ab16, c16;             /* A and B, C: RT_CU_F32, RT_CU_BF16 or RT_CU_F16 */
    int a8;                    /* an FP8 plan (fp8_gemm): our A's type, FP8_E4M3 or FP8_E5M2
                                  (B is E4M3); 0: A and B of type ab16 */
    int64_t M, N, K, lda, ldb, ldc;
    int64_t slices, sa, sb;    /* a K-sliced plan (ksplit_gemm): `slices` products of K
                                  each, A and B sa and sb elements on from one to the next,
                                  C fp32 partials M x N apart; 0: a plain GEMM */
    int accumulate;            /* beta != 0 */
    unsigned align[7];         /* the pointers' alignment (bytes, at most 256) in cuBLASLt's
                                  order: its A (our B), its B (our A), C, D; then the bias
                                  (or bias gradient), the auxiliary matrix and the bias's
                                  16-bit copy (256: none) */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
} Plan;

#define MAX_PLANS 1024
static Plan plans[MAX_PLANS];
static int n_plans;

/* cuBLASLt's data type of each storage kind, indexed by RT_CU_* */
static const cudaDataType_t lt_types[] = {CUDA_R_32F, CUDA_R_16BF, CUDA_R_16F};
/* and of an FP8 plan's A, indexed by Plan.a8 */
enum { FP8_E4M3 = 1, FP8_E5M2 = 2 };
static const cudaDataType_t fp8_types[] = {CUDA_R_32F, CUDA_R_8F_E4M3, CUDA_R_8F_E5M2};

#define EPI_GELU_AUX 3
#define EPI_BGRADB 4
#define EPI_DGELU 5

/* Plan p takes its fallback from now on; once per run: which epilogue cuBLASLt would
 * not take, and that a kernel does it. */
static void epilogue_refused(Plan *p, const char *when)
{
    p->fallback = 1;
    static int said;
    if (said++)
        return;
    static const char *const names[] = {"BIAS", "RELU_BIAS", "GELU_BIAS", "GELU_AUX_BIAS",
                                        "BGRADB", "DGELU"};
    fprintf(stderr, "trainc: note: cuBLASLt refused the %s epilogue of a %lld x %lld x %lld GEMM "
            "(%s); a separate kernel does the epilogue's arithmetic (same results, one more pass)\n",
            names[p->epi], (long long)p->M, (long long)p->N, (long long)p->K, when);
}

/* The alignment of a pointer, in bytes, up to 256. cuBLASLt's heuristic assumes 256
 * unless told less, and an algorithm it picks on that promise may refuse (or fault on)
 * a pointer less aligned: the arena's buffers are only 16-byte aligned, the parameters'
 * as their sizes fall. So each plan says what its pointers have (PyTorch does the
 * same); a call site's pointers are fixed, so it finds its plan again every step (call
 * sites of one shape whose pointers differ in alignment get a plan each). */
static unsigned align_of(const void *p)
{
    unsigned a = 256;
    while (a > 1 && (uintptr_t)p % a)
        a /= 2;
    return a;
}

/* The plan's descriptor: the operations and, with an epilogue, its attributes, the
 * bias of type bt and the bias and auxiliary pointers, set before the heuristic runs
 * (it reads them for their alignment, cublasLt.h says). 0, or -1 where cuBLASLt refused
 * an attribute (the descriptor destroyed). */
static int plan_desc(Plan *p, cudaDataType_t bt, const void *bias, const void *aux)
{
    cudaDataType_t tc = lt_types[p->c16];
    /* column-major: first operand is B (op = trans_b), second is A (op = trans_a) */
    cublasOperation_t opa = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT(p_cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT(p_cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT(p_cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    if (p->epi < 0)
        return 0;
    /* the bias runs along D's rows in column-major terms: our columns j < N. GELU's
     * auxiliary output (the pre-activation) has C's type and leading dimension, and so
     * has DGELU's auxiliary input. BGRADB's bias gradient (from cuBLASLt's second
     * operand, our A, summed over K) has C's type: fp32, a parameter gradient. */
    int epi = p->epi;
    cublasLtEpilogue_t ep = epi == RT_EPI_RELU        ? CUBLASLT_EPILOGUE_RELU_BIAS
                            : epi == RT_EPI_GELU_TANH ? CUBLASLT_EPILOGUE_GELU_BIAS
                            : epi == EPI_GELU_AUX     ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                            : epi == EPI_BGRADB       ? CUBLASLT_EPILOGUE_BGRADB
                            : epi == EPI_DGELU        ? CUBLASLT_EPILOGUE_DGELU
                                                      : CUBLASLT_EPILOGUE_BIAS;
    int64_t aux_ld = p->ldc;
    int ok = p_cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep,
                                              sizeof ep) == CUBLAS_STATUS_SUCCESS;
    if (ok && epi != EPI_DGELU)
        ok = p_cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                              sizeof bt) == CUBLAS_STATUS_SUCCESS &&
             p_cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                              sizeof bias) == CUBLAS_STATUS_SUCCESS;
    if (ok && (epi == EPI_GELU_AUX || epi == EPI_DGELU))
        ok = p_cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                              &aux_ld, sizeof aux_ld) == CUBLAS_STATUS_SUCCESS &&
             p_cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE,
                                              &tc, sizeof tc) == CUBLAS_STATUS_SUCCESS &&
             p_cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                              &aux, sizeof aux) == CUBLAS_STATUS_SUCCESS;
    if (!ok) {
        p_cublasLtMatmulDescDestroy(p->desc);
        p->desc = NULL;
        return -1;
    }
    return 0;
}

/* A descriptor cuBLASLt would not plan with (st from the heuristic) destroyed: why */
static const char *drop_desc(Plan *p, cublasStatus_t st)
{
    p_cublasLtMatmulDescDestroy(p->desc);
    p->desc = NULL;
    return st == CUBLAS_STATUS_SUCCESS ? "no algorithm" : p_cublasLtGetStatusString(st);
}

/* TRAINC_GEMM_PLANS=1: a line for each plan made, what cuBLASLt's heuristic chose (its
 * algorithm, tile and stages as cublasLt.h's enums number them, its split of K, the
 * waves of the GPU it estimates): whether a GEMM fills the GPU is then read from a run */
static int plans_said(void)
{
    static int on = -1;
    return env_is("TRAINC_GEMM_PLANS", "1", &on);
}

static uint32_t algo_config(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t at)
{
    uint32_t v = 0;   /* (each a 32-bit integer) */
    size_t w = 0;
    if (p_cublasLtMatmulAlgoConfigGetAttribute(a, at, &v, sizeof v, &w) != CUBLAS_STATUS_SUCCESS)
        return UINT32_MAX;
    return v;
}

static void plan_note(const Plan *p, const cublasLtMatmulHeuristicResult_t *r)
{
    static const char *const types[] = {"fp32", "bf16", "fp16"}, *const f8[] = {"", "e4m3", "e5m2"};
    static const char *const epis[] = {"bias", "relu+bias", "gelu+bias", "gelu+aux+bias",
                                       "bgradb", "dgelu"};
    const cublasLtMatmulAlgo_t *a = &r->algo;
    fprintf(stderr, "trainc: gemm plan %lld x %lld x %lld%s%s%s, %s%s -> %s%s%s: algo %d, tile %u, "
            "stages %u, split K %d (reduction %u), waves %.2f, workspace %zu\n",
            (long long)p->M, (long long)p->N, (long long)p->K, p->ta ? " A^T" : "",
            p->tb ? " B^T" : "", p->slices ? " (K slices)" : "",
            p->a8 ? f8[p->a8] : types[p->ab16], p->a8 ? " x e4m3" : "", types[p->c16],
            p->epi >= 0 ? ", " : "", p->epi >= 0 ? epis[p->epi] : "",
            (int)algo_config(a, CUBLASLT_ALGO_CONFIG_ID), algo_config(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
            algo_config(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
            (int)algo_config(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
            algo_config(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME), (double)r->wavesCount,
            r->workspaceSize);
}

/* The heuristic's best algorithm for p's descriptor and layouts: 0, or -1 with the
 * status in *st (an epilogue or shape it does not take; no algorithm: SUCCESS). */
static int plan_algo(rt_exec *e, Plan *p, cublasStatus_t *st)
{
    size_t ws = 0;
    rt_cu_workspace(e, &ws);
    cublasLtMatmulPreference_t pref;
    LT(p_cublasLtMatmulPreferenceCreate(&pref));
    LT(p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                              sizeof ws));
    static const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int q = 0; q < 4; q++) {
        uint32_t v = p->align[q];
        LT(p_cublasLtMatmulPreferenceSetAttribute(pref, align_attr[q], &v, sizeof v));
    }
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    *st = p_cublasLtMatmulAlgoGetHeuristic(lt, p->desc, p->a, p->b, p->c, p->c, pref, 1, &res,
                                           &found);
    p_cublasLtMatmulPreferenceDestroy(pref);
    /* a result's fields hold only where its own state says success */
    if (*st != CUBLAS_STATUS_SUCCESS || found < 1 || res.state != CUBLAS_STATUS_SUCCESS)
        return -1;
    p->algo = res.algo;
    if (plans_said())
        plan_note(p, &res);
    return 0;
}

/* A new plan from init (its shape, types and alignment set): its three layouts made,
 * C's of type c16 with rows ldc apart; the descriptor and algorithm are the caller's */
static Plan *plan_new(const Plan *init)
{
    if (n_plans == MAX_PLANS)
        rt_die("more than %d GEMM shapes", MAX_PLANS);
    if (!lt)
        lt_load();
    Plan *p = &plans[n_plans++];
    *p = *init;
    uint64_t M = (uint64_t)p->M, N = (uint64_t)p->N, K = (uint64_t)p->K;
    cudaDataType_t ta = p->a8 ? fp8_types[p->a8] : lt_types[p->ab16];
    cudaDataType_t tb = p->a8 ? CUDA_R_8F_E4M3 : lt_types[p->ab16];
    LT(p_cublasLtMatrixLayoutCreate(&p->a, tb, p->tb ? K : N, p->tb ? N : K, p->ldb));
    LT(p_cublasLtMatrixLayoutCreate(&p->b, ta, p->ta ? M : K, p->ta ? K : M, p->lda));
    LT(p_cublasLtMatrixLayoutCreate(&p->c, lt_types[p->c16], N, M, p->ldc));
    return p;
}

/* With epi >= 0 (an epilogue) a plan cuBLASLt refuses is marked `fallback` instead of
 * ending the run. a, b, C and D are the call's pointers (C the one read with beta, D the
 * one written), bias and aux the epilogue's (NULL where it has none), for their
 * alignment. A bias epilogue beside a 16-bit D first asks for the fp32 bias (the master
 * weights: the CPU's arithmetic), then, refused, for the bias in D's type, cuBLASLt's
 * documented default (the parameter's 16-bit copy: PyTorch's autocast rounds its bias
 * so too). */
static Plan *plan_for(rt_exec *e, int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t lda,
                      int64_t ldb, int64_t ldc, int accumulate, int ab16, int c16, int epi,
                      const void *a, const void *b, const void *C, const void *D,
                      const void *bias, const void *aux)
{
    /* the bias's 16-bit copy, for the second try (a forward bias beside a 16-bit D) */
    const void *bias16 = bias;
    int second = bias && c16 != RT_CU_F32 && epi != EPI_BGRADB && epi != EPI_DGELU &&
                 rt_cu_operand(e, &bias16) == c16 && bias16 != bias;
    unsigned al[7] = {align_of(b), align_of(a), align_of(C), align_of(D), align_of(bias),
                      align_of(aux), align_of(second ? bias16 : NULL)};
    for (int i = 0; i < n_plans; i++) {
        Plan *p = &plans[i];
        if (!p->slices && !p->a8 && p->ta == ta && p->tb == tb && p->M == M && p->N == N &&
            p->K == K && p->lda == lda && p->ldb == ldb && p->ldc == ldc &&
            p->accumulate == accumulate && p->ab16 == ab16 && p->c16 == c16 && p->epi == epi &&
            !memcmp(p->align, al, sizeof al))
            return p;
    }
    Plan init = {.ta = ta, .tb = tb, .epi = epi, .ab16 = ab16, .c16 = c16, .M = M, .N = N, .K = K,
                 .lda = lda, .ldb = ldb, .ldc = ldc, .accumulate = accumulate};
    memcpy(init.align, al, sizeof al);
    Plan *p = plan_new(&init);
    cudaDataType_t tc = lt_types[c16];
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (epi < 0) {
        plan_desc(p, CUDA_R_32F, NULL, NULL);
        if (plan_algo(e, p, &st) != 0) {
            lt_check(st, "cublasLtMatmulAlgoGetHeuristic");
            rt_fail("cuBLASLt has no algorithm for a %lld x %lld x %lld GEMM", (long long)M,
                    (long long)N, (long long)K);
        }
        return p;
    }
    const char *why = "descriptor";
    for (int t = 0; t < 1 + second; t++) {
        if (plan_desc(p, t ? tc : CUDA_R_32F, t ? bias16 : bias, aux) != 0)
            continue;
        if (plan_algo(e, p, &st) == 0) {
            p->bias16 = t;
            static int said;
            if (t && !said++)
                fprintf(stderr, "trainc: note: cuBLASLt takes the bias of a %lld x %lld x %lld GEMM's "
                        "epilogue in the output's 16-bit type only: the bias is the parameter's "
                        "16-bit copy there (as PyTorch's autocast rounds it)\n", (long long)M,
                        (long long)N, (long long)K);
            return p;
        }
        why = drop_desc(p, st);
    }
    epilogue_refused(p, why);
    return p;
}

/* D = alpha op(A) op(B) + beta C (then the plan's epilogue) with plan p, on the compute
 * stream (A and B as rt_cu_operand gave them; the row-major to column-major swap of
 * plan_for). C is D (in place) or another matrix of D's type and layout (a residual:
 * out of place, which an algorithm may refuse at the call). */
static cublasStatus_t matmul(rt_exec *e, const Plan *p, float alpha, const void *a,
                             const void *b, float beta, const void *C, void *D)
{
    size_t ws = 0;
    rt_dptr w = rt_cu_workspace(e, &ws);
    cublasStatus_t st = p_cublasLtMatmul(lt, p->desc, &alpha, b, p->a, a, p->b, &beta, C, p->c, D,
                                         p->c, &p->algo, (void *)(uintptr_t)w, ws,
                                         (cudaStream_t)rt_cu_stream(e));
    /* capturing a graph: a failure is the capture's (the pass runs again without one),
     * not a refusal of the plan */
    if (st != CUBLAS_STATUS_SUCCESS && rt_cu_capture_failed(e, 1))
        return CUBLAS_STATUS_SUCCESS;
    return st;
}

/* ---- K-sliced GEMMs: a small fp32 result summed over many rows ---------------------------
 *
 * A weight gradient reduces the batch: dW [M, N] = dy^T x sums K = batch (x positions)
 * products. Where M x N is a few tiles and K is long (a 64-wide MLP at batch 65536: 64
 * x 64 over 65536 rows) a GEMM has a handful of output tiles for the whole GPU, and
 * whether cuBLASLt's pick splits K across the SMs is the heuristic's choice (its
 * bias-gradient epilogue may keep it from doing so). Here the split is ours: K is cut
 * into slices of ks rows, one strided-batched cuBLASLt call computes every slice's
 * product into fp32 partials in scratch (the rows left over, fewer than ks, one more
 * call into the last partial), then epilogue.cuh's rt_ksplit_sum adds the partials in
 * slice order into C (beta C + the sum). Any GEMM into fp32 of such a shape is split
 * (weight gradients, in practice). The slices depend on the shape only, so the final
 * sum's order does too: the same bits every step (each slice's product is the
 * algorithm cuBLASLt picks on the GPU at hand). TRAINC_GEMM_KSPLIT=0 leaves every GEMM
 * to cuBLASLt whole. */

#define KSPLIT_BYTES (8u << 20)   /* the partials' scratch, at most */

static int epilogue_call(rt_exec *e, Plan *p, const void *bias, const void *aux, float alpha,
                         const void *a, const void *b, float beta, const void *C, void *D);

static int64_t ksplit_runs[2];   /* GEMMs run in slices so far: all, with BGRADB */

int64_t rt_cu_ksplit_runs(int bgradb) { return ksplit_runs[bgradb != 0]; }

static int ksplit_off(void)
{
    static int off = -1;
    return env_is("TRAINC_GEMM_KSPLIT", "0", &off);
}

/* Partials' elements apart: M x N rounded up to 64 floats, so that each partial is as
 * aligned as the first (256 bytes in scratch), the alignment the heuristic is told (and
 * M for the bias gradients' partials) */
static int64_t part_stride(int64_t M, int64_t N) { return (M * N + 63) / 64 * 64; }

/* The slices of a GEMM into C (fp32) of M x N over K: the number of whole slices of
 * *ks rows (*ks a multiple of 8, so each slice's operands start 16-byte aligned), the
 * rest of K after them in one more partial; 0: no split. Split where the result is at
 * most 8 tiles of 128 x 128 and K at least 8192: about 256 blocks in all (two an SM on
 * a GPU of 128), each slice 512 rows or more, the partials within KSPLIT_BYTES. The
 * shape alone decides, not the GPU: a run resumed on another GPU sums in the same
 * order (the column sums' partials are chosen so too, cuda_ops.c). */
static int64_t ksplit_slices(int64_t M, int64_t N, int64_t K, int64_t *ks)
{
    int64_t tiles = ((M + 127) / 128) * ((N + 127) / 128);
    if (ksplit_off() || K < 8192 || tiles > 8)
        return 0;
    int64_t s = 256 / tiles;
    int64_t cap = (int64_t)KSPLIT_BYTES / ((part_stride(M, N) + part_stride(M, 1)) * 4) - 1;
    if (s > K / 512)
        s = K / 512;
    if (s > cap)
        s = cap;
    if (s < 4)
        return 0;
    *ks = ((K + s - 1) / s + 7) / 8 * 8;
    return K / *ks;
}

/* cuBLASLt would not take a strided batch for plan p: the plan runs its GEMMs whole from
 * now on (said once a run) */
static void ksplit_refused(Plan *p, const char *why)
{
    static int said;
    p->fallback = 1;
    if (!said++)
        fprintf(stderr, "trainc: note: cuBLASLt refused a %lld x %lld GEMM cut into %lld slices "
                "of %lld rows (%s); such GEMMs run whole\n", (long long)p->M, (long long)p->N,
                (long long)p->slices, (long long)p->K, why);
}

/* The plan of `slices` products of ks rows each, operands sa and sb elements apart,
 * into fp32 partials of M x N (rows N apart, part_stride apart): no epilogue, beta 0. */
static Plan *plan_sliced(rt_exec *e, int ta, int tb, int64_t M, int64_t N, int64_t ks,
                         int64_t lda, int64_t ldb, int64_t slices, int64_t sa, int64_t sb,
                         int ab16, const void *a, const void *b, const void *part,
                         const void *bpart)
{
    /* each slice's operands as aligned as the first's, and as the step between slices */
    size_t elt = ab16 == RT_CU_F32 ? 4 : 2;
    unsigned sal = align_of((const void *)(uintptr_t)(sa * elt));
    unsigned sbl = align_of((const void *)(uintptr_t)(sb * elt));
    unsigned al[7] = {align_of(b) < sbl ? align_of(b) : sbl, align_of(a) < sal ? align_of(a) : sal,
                      align_of(part), align_of(part), align_of(bpart), 256, 256};
    int epi = bpart ? EPI_BGRADB : -1;
    for (int i = 0; i < n_plans; i++) {
        Plan *p = &plans[i];
        if (p->slices == slices && p->sa == sa && p->sb == sb && p->ta == ta && p->tb == tb &&
            p->M == M && p->N == N && p->K == ks && p->lda == lda && p->ldb == ldb &&
            p->ab16 == ab16 && p->epi == epi && !memcmp(p->align, al, sizeof al))
            return p;
    }
    Plan init = {.ta = ta, .tb = tb, .epi = epi, .ab16 = ab16, .c16 = RT_CU_F32, .M = M, .N = N,
                 .K = ks, .lda = lda, .ldb = ldb, .ldc = N, .slices = slices, .sa = sa, .sb = sb};
    memcpy(init.align, al, sizeof al);
    Plan *p = plan_new(&init);
    int32_t count = (int32_t)slices;
    int64_t stride[3] = {sb, sa, part_stride(M, N)};
    cublasLtMatrixLayout_t lay[3] = {p->a, p->b, p->c};
    for (int q = 0; q < 3; q++) {
        LT(p_cublasLtMatrixLayoutSetAttribute(lay[q], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                              sizeof count));
        LT(p_cublasLtMatrixLayoutSetAttribute(lay[q], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                              &stride[q], sizeof stride[q]));
    }
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (!bpart) {
        plan_desc(p, CUDA_R_32F, NULL, NULL);
        if (plan_algo(e, p, &st) != 0)
            ksplit_refused(p, st == CUBLAS_STATUS_SUCCESS ? "no algorithm"
                                                          : p_cublasLtGetStatusString(st));
        return p;
    }
    /* BGRADB: each slice's sum of dy into its own M floats, part_stride(M, 1) apart */
    int64_t bstride = part_stride(M, 1);
    const char *why = "descriptor";
    if (plan_desc(p, CUDA_R_32F, bpart, NULL) == 0) {
        if (p_cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bstride,
                                             sizeof bstride) == CUBLAS_STATUS_SUCCESS &&
            plan_algo(e, p, &st) == 0)
            return p;
        why = drop_desc(p, st);
    }
    epilogue_refused(p, why);
    return p;
}

/* C = alpha op(A) op(B) + beta C over K cut into n slices of ks rows (ksplit_slices);
 * a and b as rt_cu_operand gave them, of storage ab16; C fp32. With db (a weight
 * gradient's GEMM, op(A) = dy^T: rt_cu_gemm_dbias) the slices' GEMMs also sum dy over
 * their rows (BGRADB) into partials of the bias gradient, which rt_ksplit_sum adds into
 * db (stores with db_store). 1, or 0 with nothing done where cuBLASLt refused the slices
 * or their epilogue (the caller runs the GEMM another way). */
static int ksplit_gemm(rt_exec *e, int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t n,
                       int64_t ks, float alpha, const void *a, int64_t lda, const void *b,
                       int64_t ldb, float beta, float *C, int64_t ldc, int ab16, float *db,
                       int db_store)
{
    size_t elt = ab16 == RT_CU_F32 ? 4 : 2;
    /* a slice's first row of A (op(A) = A^T: A's rows; else its columns), and of B */
    int64_t sa = ta ? ks * lda : ks, sb = tb ? ks : ks * ldb, rest = K - n * ks;
    int64_t parts = n + (rest > 0), ps = part_stride(M, N), bs = part_stride(M, 1);
    rt_dptr part = rt_cu_scratch(e, (size_t)(parts * (ps + bs)) * sizeof(float));
    rt_dptr bpart = db ? part + (rt_dptr)((size_t)(parts * ps) * sizeof(float)) : 0;
    const void *pp = (const void *)(uintptr_t)part, *bp = (const void *)(uintptr_t)bpart;
    Plan *p = plan_sliced(e, ta, tb, M, N, ks, lda, ldb, n, sa, sb, ab16, a, b, pp, bp);
    if (p->fallback)
        return 0;
    /* K's rest first: where it is refused, nothing is written yet */
    if (rest > 0) {
        const char *ra = (const char *)a + (size_t)(n * sa) * elt;
        const char *rb = (const char *)b + (size_t)(n * sb) * elt;
        float *last = (float *)(uintptr_t)(part + (rt_dptr)((size_t)(n * ps) * sizeof(float)));
        rt_dptr lbias = bpart + (rt_dptr)((size_t)(n * bs) * sizeof(float));
        const void *lb = db ? (const void *)(uintptr_t)lbias : NULL;
        Plan *q = plan_for(e, ta, tb, M, N, rest, lda, ldb, N, 0, ab16, RT_CU_F32,
                           db ? EPI_BGRADB : -1, ra, rb, last, last, lb, NULL);
        if (!db)
            lt_check(matmul(e, q, alpha, ra, rb, 0.0f, last, last), "cublasLtMatmul (K's rest)");
        else if (q->fallback || !epilogue_call(e, q, lb, NULL, alpha, ra, rb, 0.0f, last, last))
            return 0;
    }
    if (db) {
        if (!epilogue_call(e, p, bp, NULL, alpha, a, b, 0.0f, pp, (void *)pp))
            return 0;
    } else {
        cublasStatus_t st = matmul(e, p, alpha, a, b, 0.0f, pp, (void *)pp);
        if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE ||
            st == CUBLAS_STATUS_ARCH_MISMATCH) {
            ksplit_refused(p, p_cublasLtGetStatusString(st));
            return 0;
        }
        lt_check(st, "cublasLtMatmul (K slices)");
    }
    rt_dptr c = (rt_dptr)(uintptr_t)C, d = (rt_dptr)(uintptr_t)db;
    void *args[] = {&part, &c, &parts, &ps, &M, &N, &ldc, &beta, &bpart, &d, &bs, &db_store};
    int64_t sums = M * N + (db ? M : 0);
    rt_cu_launch(e, "rt_ksplit_sum", (unsigned)((sums + 31) / 32), 1, 1, 32, 8, 0, args);
    ksplit_runs[0]++;
    ksplit_runs[1] += db != NULL;
    return 1;
}

void rt_cu_gemm(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                float beta, float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0)
        return;
    const void *a = A, *b = B, *c = C;
    int ta16 = rt_cu_operand(e, &a), tb16 = rt_cu_operand(e, &b), c16 = rt_cu_operand(e, &c);
    if (c != (const void *)C)
        rt_die("GEMM output in the parameter region");
    if (ta16 != tb16)
        rt_die("GEMM with operands of two types (A %d, B %d)", ta16, tb16);
    if (K <= 0) {              /* an empty sum: C = beta C */
        if (beta == 0.0f) {
            if (c16)
                rt_cu_zero16(e, (rt_dptr)(uintptr_t)C, M * ldc);
            else
                rt_cu_zero(e, (rt_dptr)(uintptr_t)C, M * ldc);
        } else if (beta != 1.0f)
            rt_die("GEMM with K = 0 and beta %g", beta);
        return;
    }
    int64_t ks, n = c16 == RT_CU_F32 ? ksplit_slices(M, N, K, &ks) : 0;
    if (n > 0 && ksplit_gemm(e, trans_a, trans_b, M, N, K, n, ks, alpha, a, lda, b, ldb, beta, C,
                             ldc, ta16, NULL, 0))
        return;
    Plan *p = plan_for(e, trans_a, trans_b, M, N, K, lda, ldb, ldc, beta != 0.0f, ta16, c16, -1, a,
                       b, C, C, NULL, NULL);
    lt_check(matmul(e, p, alpha, a, b, beta, C, C), "cublasLtMatmul");
}

/* TRAINC_GEMM_EPILOGUE=0: every epilogue as a kernel of its own (the fallbacks) */
static int epilogues_off(void)
{
    static int off = -1;
    return env_is("TRAINC_GEMM_EPILOGUE", "0", &off);
}

/* One call with plan p's epilogue, its bias (or bias gradient; its 16-bit copy where
 * the plan says so) and auxiliary pointers set first where not NULL: 1 when cuBLASLt
 * took it; 0 when it refused (the plan takes the fallback from now on, said once); a
 * failure of another kind (the device's) ends the run. */
static int epilogue_call(rt_exec *e, Plan *p, const void *bias, const void *aux, float alpha,
                         const void *a, const void *b, float beta, const void *C, void *D)
{
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (bias && p->bias16 && (rt_cu_operand(e, &bias) != p->c16))
        return 0;             /* no 16-bit copy of this bias: the fallback, for this call */
    if (bias)
        st = p_cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                              sizeof bias);
    if (st == CUBLAS_STATUS_SUCCESS && aux)
        st = p_cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                              &aux, sizeof aux);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = matmul(e, p, alpha, a, b, beta, C, D);
    if (st == CUBLAS_STATUS_SUCCESS)
        return 1;
    if (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE &&
        st != CUBLAS_STATUS_ARCH_MISMATCH)
        lt_check(st, "cublasLtMatmul");
    epilogue_refused(p, p_cublasLtGetStatusString(st));
    return 0;
}

/* ---- fp8-mixed's maxima, beside the epilogues that fold them (the last section) ---- */

/* The slots the current FP8 call reads its operands' maxima from and folds its output's
 * into (rt_fp8_amax_use's, taken as it starts; -1: none), dropped as it ends. */
static struct {
    int a, b, out;
} amax_cur = {-1, -1, -1};
static int amax_folded;   /* an epilogue kernel folded amax_cur.out */

static rt_dptr slot_at(rt_exec *e, int k) { return (rt_dptr)(uintptr_t)rt_cu_fp8_amax_slot(e, k); }

static void amax_begin(void) { rt_cu_fp8_take_use(&amax_cur.a, &amax_cur.b, &amax_cur.out); }

static void amax_end(void)
{
    amax_cur.a = amax_cur.b = amax_cur.out = -1;
    amax_folded = 0;
}

/* The slot the epilogue kernels (rt_bias_act, rt_dgelu) fold their output's maximum
 * into: the FP8 call's (0: none; fp8-mixed's instances only declare the argument) */
static rt_dptr epilogue_slot(rt_exec *e)
{
    if (amax_cur.out < 0)
        return 0;
    amax_folded = 1;
    return slot_at(e, amax_cur.out);
}

/* epilogue.cuh's rt_bias_act over the product in out (C or Y): + R + bias, then act */
static void bias_act(rt_exec *e, float *out, const float *R, float *C, float *Y,
                     const float *bias, int64_t M, int64_t N, int64_t ldc, int act)
{
    rt_dptr o = (rt_dptr)(uintptr_t)out, dc = (rt_dptr)(uintptr_t)C, bb = (rt_dptr)(uintptr_t)bias;
    rt_dptr y = act != RT_EPI_NONE ? (rt_dptr)(uintptr_t)Y : 0, dr = (rt_dptr)(uintptr_t)R;
    rt_dptr slot = epilogue_slot(e);
    void *args[] = {&o, &dr, &dc, &y, &bb, &M, &N, &ldc, &act, &slot};
    rt_cu_launch(e, "rt_bias_act", rt_cu_grid_for(e, M * N), 1, 1, 256, 1, 0, args);
}

/* rt_gemm_bias on the GPU: one cuBLASLt call with a bias epilogue (BIAS, RELU_BIAS,
 * GELU_BIAS, or GELU_AUX_BIAS when the pre-activation C is wanted too: its auxiliary
 * output). cuBLASLt's GELU is the tanh form, as the spec's gelu "tanh". A residual R is
 * cuBLASLt's C matrix with beta 1, out of place (D = alpha A B + R, then the bias and
 * the activation: rt_gemm_bias's order); with 16-bit activations R and D are both
 * 16-bit (one layout). Where cuBLASLt refuses (ReLU with the pre-activation wanted too,
 * a shape, alignment or out-of-place result it does not take, an older library) or
 * TRAINC_GEMM_EPILOGUE=0: the GEMM, then epilogue.cuh's rt_bias_act, which adds R and
 * the bias in the same order (from the product as stored: with 16-bit activations
 * rounded once more than in the epilogue). */
void rt_cu_gemm_bias(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                     float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                     float *C, int64_t ldc, const float *bias, const float *R, int act, float *Y)
{
    int off = epilogues_off();
    if (M <= 0 || N <= 0)
        return;
    float *D = act == RT_EPI_NONE ? C : Y;
    float *out = C ? C : Y;   /* the fallback's product */
    if (!D)
        rt_die("rt_gemm_bias: no output for the epilogue");
    const void *c = D, *r = R;
    int c16 = rt_cu_operand(e, &c);
    /* both paths read a residual as D's type and layout (rt_bias_act's act_t) */
    if (R && (rt_cu_operand(e, &r) != c16 || r != (const void *)R))
        rt_die("rt_gemm_bias: the residual is not an activation stored like the output");
    size_t span = (size_t)((M - 1) * ldc + N) * (c16 ? 2 : 4);
    if (R && (rt_overlap(R, out, span) || rt_overlap(R, D, span)))
        rt_die("rt_gemm_bias: the residual overlaps the output");
    int epi_ok = !off && K > 0 && !(act == RT_EPI_RELU && C);
    if (epi_ok) {
        const void *a = A, *b = B;
        int ta16 = rt_cu_operand(e, &a), tb16 = rt_cu_operand(e, &b);
        int epi = act == RT_EPI_GELU_TANH && C ? EPI_GELU_AUX : act;
        Plan *p = ta16 == tb16 && c == (const void *)D
                      ? plan_for(e, trans_a, trans_b, M, N, K, lda, ldb, ldc, R != NULL, ta16, c16, epi,
                                 a, b, R ? (const void *)R : D, D, bias,
                                 epi == EPI_GELU_AUX ? (const void *)C : NULL)
                      : NULL;
        if (p && !p->fallback &&
            epilogue_call(e, p, bias, epi == EPI_GELU_AUX ? C : NULL, alpha, a, b, R ? 1.0f : 0.0f,
                          R ? (const void *)R : D, D))
            return;
    }
    rt_cu_gemm(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 0.0f, out, ldc);
    bias_act(e, out, R, C, Y, bias, M, N, ldc, act);
}

/* rt_gemm_dbias on the GPU: the weight gradient's GEMM (C fp32, accumulated with beta)
 * with the BGRADB epilogue, which sums dy (our A, cuBLASLt's second operand) over K
 * into the bias gradient as it reads it for the product. The epilogue stores, while
 * rt_gemm_dbias adds: the sum goes straight into db when db is known to be zero (the
 * call is its first writer, `fresh`, in a pass that starts from zeroed gradients,
 * e->grads_zero), else into scratch, then epilogue.cuh's rt_add_into adds it (a
 * second micro-batch of `accumulate`). A GEMM K-sliced (ksplit_gemm) takes BGRADB
 * slice by slice. Where cuBLASLt refuses, or with TRAINC_GEMM_EPILOGUE=0: the GEMM
 * (K-sliced or whole), then rt_cu_colsum_add. */
void rt_cu_gemm_dbias(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float beta, float *C, int64_t ldc, float *db, int fresh)
{
    if (!trans_a || lda != M)
        rt_die("rt_gemm_dbias: dy must be A, transposed, rows M apart");
    if (M <= 0)
        return;
    const void *a = A, *b = B, *c = C;
    int ta16 = rt_cu_operand(e, &a), tb16 = rt_cu_operand(e, &b), c16 = rt_cu_operand(e, &c);
    int64_t ks, n = ksplit_slices(M, N, K, &ks);
    int epi_ok = !epilogues_off() && N > 0 && K > 0 && ta16 == tb16 && c16 == RT_CU_F32 &&
                 c == (const void *)C;
    /* K-sliced, each slice's GEMM summing its rows of dy too (rt_ksplit_sum adds the
     * partials into db) */
    if (epi_ok && n > 0 &&
        ksplit_gemm(e, trans_a, trans_b, M, N, K, n, ks, alpha, a, lda, b, ldb, beta, C, ldc, ta16,
                    db, fresh && e->grads_zero))
        return;
    /* a shape K-sliced whose epilogue cuBLASLt refused takes the bias gradient from
     * rt_cu_colsum_add (below) on every step, as where the slices were refused too */
    if (epi_ok && n == 0) {
        int direct = fresh && e->grads_zero;
        rt_dptr sum = direct ? (rt_dptr)(uintptr_t)db : rt_cu_scratch(e, (size_t)M * sizeof(float));
        Plan *p = plan_for(e, trans_a, trans_b, M, N, K, lda, ldb, ldc, beta != 0.0f, ta16, c16,
                           EPI_BGRADB, a, b, C, C, (const void *)(uintptr_t)sum, NULL);
        if (!p->fallback && epilogue_call(e, p, (const void *)(uintptr_t)sum, NULL, alpha, a, b,
                                          beta, C, C)) {
            if (!direct) {
                void *args[] = {&sum, &db, &M};
                rt_cu_launch(e, "rt_add_into", rt_cu_grid_for(e, M), 1, 1, 256, 1, 0, args);
            }
            return;
        }
    }
    rt_cu_gemm(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    rt_cu_colsum_add(e, A, db, K, M);
}

/* epilogue.cuh's rt_dgelu: D = GELU (tanh)'s backward at pre, times D, in place */
static void dgelu(rt_exec *e, float *D, const float *pre, int64_t M, int64_t N, int64_t ldd)
{
    rt_dptr d = (rt_dptr)(uintptr_t)D, x0 = (rt_dptr)(uintptr_t)pre;
    rt_dptr slot = epilogue_slot(e);
    void *args[] = {&d, &x0, &M, &N, &ldd, &slot};
    rt_cu_launch(e, "rt_dgelu", rt_cu_grid_for(e, M * N), 1, 1, 256, 1, 0, args);
}

/* rt_gemm_dgelu on the GPU: the data gradient's GEMM with the DGELU epilogue (GELU
 * tanh's derivative at pre, cuBLASLt's auxiliary input in D's type and layout, times
 * the product, rounded once into D). Where cuBLASLt refuses, or with
 * TRAINC_GEMM_EPILOGUE=0: the GEMM into D, then epilogue.cuh's rt_dgelu in place (from
 * the product as stored: with 16-bit activations rounded once more). */
void rt_cu_gemm_dgelu(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float *D, int64_t ldd, const float *pre)
{
    if (M <= 0 || N <= 0)
        return;
    const void *a = A, *b = B, *c = D, *x = pre;
    int ta16 = rt_cu_operand(e, &a), tb16 = rt_cu_operand(e, &b), c16 = rt_cu_operand(e, &c);
    if (rt_cu_operand(e, &x) != c16 || x != (const void *)pre || c != (const void *)D)
        rt_die("rt_gemm_dgelu: the pre-activation is not an activation stored like the output");
    if (rt_overlap(pre, D, (size_t)((M - 1) * ldd + N) * (c16 ? 2 : 4)))
        rt_die("rt_gemm_dgelu: the pre-activation overlaps the output");
    if (!epilogues_off() && K > 0 && ta16 == tb16) {
        Plan *p = plan_for(e, trans_a, trans_b, M, N, K, lda, ldb, ldd, 0, ta16, c16, EPI_DGELU, a, b,
                           D, D, NULL, pre);
        if (!p->fallback && epilogue_call(e, p, NULL, pre, alpha, a, b, 0.0f, D, D))
            return;
    }
    rt_cu_gemm(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 0.0f, D, ldd);
    dgelu(e, D, pre, M, N, ldd);
}

/* ---- fp8-mixed: the linear layers' GEMMs in FP8 ---------------------------------------
 *
 * rt_gemm_fp8 and its variants (trainc_rt.h) cast both 16-bit operands to FP8 in scratch
 * (fp8.cuh through rt_cu_fp8_cast: per-tensor scales from the absolute maximum, all on
 * the device), then run one cuBLASLt FP8 GEMM. cuBLASLt takes FP8 as "TN" only, in its
 * column-major terms: its A (our B) transposed and its B (our A) not; in row-major terms
 * both operands K-contiguous, A as [M, K] and B as [N, K]. The forward pass x W^T is so
 * already; the backward's dx = dy W and dW = dy^T x take the transposed copies the cast
 * writes. Types: E4M3 for weights and activations, E5M2 for the gradient dy, which is
 * our A in both backward GEMMs (op(B) untransposed tells them from the forward): never
 * E5M2 x E5M2. C and D are bf16 for an activation, fp32 for a weight gradient; compute
 * fp32, without fast accumulation unless cuBLASLt takes a shape only with it (or
 * TRAINC_FP8_FAST_ACCUM=1 asks for it); the A and B scale pointers are the casts' 1 / s. A
 * forward product without an activation takes the BIAS epilogue (a residual as C, as
 * the bf16 path does); the GELU, its backward and the bias gradient are the fallback
 * kernels' (epilogue.cuh, rt_cu_colsum_add): whether cuBLASLt combines those epilogues
 * with FP8 varies by version and GPU, so they are not asked for. Not K-sliced.
 *
 * A shape FP8 does not take (a dimension not a multiple of 16, an operand not bf16) or
 * that cuBLASLt refuses (no algorithm, a descriptor or a call refused) runs the bf16
 * GEMM instead, said once for each kind of reason.
 *
 * Scratch: [the scales, 256 bytes: our A's max and 1 / s, our B's (FP8_SCALE_A, _B)]
 * [the partial maxima, RT_CU_FP8_PART_BYTES][A in FP8][B in FP8]; the scale pointers
 * never move, so a plan's descriptor keeps them. The compiler sizes scratch for the
 * largest operands (emit_cuda.c's cuda_scratch_row_bytes, device_cuda.c's scratch_need).
 *
 * A linear layer's two backward GEMMs, dx = dy W and dW = dy^T x, read the same dy, as
 * our A, in E5M2, untransposed and transposed. The compiler marks such a pair where only
 * gradient hooks run between them (rt_fp8_dy_pair before the first): the first to run
 * casts dy once into both layouts (rt_cu_fp8_cast_both), which the second reads with the
 * scale the first left. Scratch then: [scales][partials][dy in FP8][dy^T in FP8][B]; the
 * second GEMM's cast of its B leaves our A's scale and both copies alone. dW's bias
 * gradient (rt_cu_colsum_add, its partials at scratch's start) runs before the casts
 * when dW is the pair's first, so it cannot land between them. Where the first falls
 * back to bf16 after the cast (whose kernels may take scratch), the second casts again.
 *
 * The maxima: an operand's cast reads the partial maxima its producer folded where it
 * has them (fp8.cuh): a whole weight's from the optimizer (rt_cu_fp8_weight_part), an
 * activation's or gradient's from the slot the generated code names (rt_fp8_amax_use,
 * just before the call); only the others take rt_fp8_amax's pass. A call that writes
 * its output through rt_bias_act folds the output's maximum there when asked; where
 * cuBLASLt writes that output instead (FP8 refused, or its own epilogue), a pass right
 * after the GEMM folds it (rt_cu_fp8_fold), so the slot holds it either way. */
#define FP8_PARTS 256
#define FP8_DATA (FP8_PARTS + RT_CU_FP8_PART_BYTES)
/* where in the scales' 256 bytes the casts leave our A's and our B's maximum and 1 / s:
 * each 1 / s, a scale pointer of the GEMM's, on 64 bytes (the pointers cuBLASLt's own
 * samples and PyTorch pass are allocations of their own, 256-byte aligned) */
#define FP8_SCALE_A 60    /* our A's 1 / s at 64: cuBLASLt's B_SCALE_POINTER */
#define FP8_SCALE_B 124   /* our B's 1 / s at 128: cuBLASLt's A_SCALE_POINTER */

static size_t up256(size_t n) { return (n + 255) & ~(size_t)255; }

/* The marked pair (rt_fp8_dy_pair): dy, the pair's GEMMs still to run (2, 1, or 0 with
 * no pair), and whether dy's two FP8 copies and scale are in scratch. One device a
 * process, as the plans are. */
static struct {
    const void *dy;
    int left, cast;
} pair;

/* Where the partial maxima of operand x (our A or B: its fp32 address as called, n
 * elements read, packed: its rows not further apart) are: the slot named (1 partial), a
 * whole weight's chunks, or none (0: the cast takes a pass, its partials in scratch at
 * fallback) */
static int operand_part(rt_exec *e, int slot, const void *x, int64_t n, int packed,
                        rt_dptr fallback, rt_dptr *part)
{
    /* TRAINC_FP8_AMAX_PASS=1 (tests): every operand's maximum from a pass, as before
     * the producers folded them; the same bits either way */
    static int pass = -1;
    int np = 0;
    *part = fallback;
    if (env_is("TRAINC_FP8_AMAX_PASS", "1", &pass))
        return 0;
    if (slot >= 0) {
        *part = slot_at(e, slot);
        return 1;
    }
    if (packed && rt_cu_fp8_weight_part(e, x, n, part, &np))
        return np;
    *part = fallback;
    return 0;
}

/* The output's maximum into slot amax_cur.out where no kernel folded it (cuBLASLt wrote
 * the output): a pass over D [M, N] rows ldc apart */
static void fold_output(rt_exec *e, const float *D, int64_t M, int64_t N, int64_t ldc)
{
    if (amax_cur.out >= 0 && !amax_folded && D)
        rt_cu_fp8_fold(e, (rt_dptr)(uintptr_t)D, M, N, ldc, slot_at(e, amax_cur.out));
}

static void fp8_dy_pair(rt_exec *e, const float *dy)
{
    (void)e;
    if (pair.left)
        rt_die("fp8-mixed: a pair of backward GEMMs marked to share dy's cast did not both run");
    pair.dy = dy;
    pair.left = 2;
    pair.cast = 0;
}

/* The pair's role of a GEMM of A (op(B) untransposed, as the backward's are): 2 for the
 * first of the marked pair, 1 for the second, 0 for a GEMM of no pair */
static int pair_take(const float *A, int tb)
{
    if (!pair.left)
        return 0;
    if ((const void *)A != pair.dy || tb)
        rt_die("fp8-mixed: a GEMM between a marked pair of backward GEMMs, or not of dy");
    return pair.left--;
}

/* once per kind of reason (0 the shape, 1 cuBLASLt, 2 cuBLASLt's BIAS epilogue): a
 * linear GEMM left to bf16, or its bias to a kernel of its own */
static void fp8_refused(int kind, int64_t M, int64_t N, int64_t K, const char *why)
{
    static int said[3];
    if (said[kind]++)
        return;
    fprintf(stderr, "trainc: note: fp8-mixed: %s %lld x %lld x %lld linear GEMM %s: %s (cuBLASLt "
            "%zu; CUBLASLT_LOG_LEVEL=1 has it say why; not said again for other shapes)\n",
            kind == 2 ? "the bias of a" : "a", (long long)M, (long long)N, (long long)K,
            kind == 2 ? "is added by a kernel of its own: cuBLASLt refused the BIAS epilogue with "
            "FP8" : "runs in bf16", why, p_cublasLtGetVersion());
}

/* TRAINC_FP8_FAST_ACCUM=1: every FP8 GEMM with cuBLASLt's FAST_ACCUM (on Hopper the
 * tensor cores' narrower partial sums are not promoted to fp32 along K: faster, less
 * exact over a long K); unset, only where cuBLASLt takes an FP8 GEMM no other way */
static int fp8_fast_first(void)
{
    static int on = -1;
    return env_is("TRAINC_FP8_FAST_ACCUM", "1", &on);
}

/* p's descriptor for FP8 (t: the bias's 16-bit copy, of type c16), with the scale
 * pointers sa and sb and, with fast, FAST_ACCUM; then the heuristic's algorithm: 0, or
 * -1 with why set (the descriptor dropped) */
static int fp8_desc_algo(rt_exec *e, Plan *p, int t, int c16, const void *bias,
                         const void *bias16, const void *sa, const void *sb, int fast,
                         const char **why)
{
    if (plan_desc(p, t ? lt_types[c16] : CUDA_R_32F, t ? bias16 : bias, NULL) != 0)
        return -1;
    int8_t f = 1;
    if (p_cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa,
                                         sizeof sa) != CUBLAS_STATUS_SUCCESS ||
        p_cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb,
                                         sizeof sb) != CUBLAS_STATUS_SUCCESS ||
        (fast && p_cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &f,
                                                  sizeof f) != CUBLAS_STATUS_SUCCESS)) {
        drop_desc(p, CUBLAS_STATUS_NOT_SUPPORTED);
        return -1;
    }
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (plan_algo(e, p, &st) == 0)
        return 0;
    *why = drop_desc(p, st);
    return -1;
}

/* The FP8 plan of a shape (our A of type a8, K-contiguous operands rows K apart; with a
 * bias, the BIAS epilogue), for pointers a8p, b8p, C, D and bias (their alignment): NULL
 * where cuBLASLt refused it (said once; not asked again for the shape). Asked without
 * FAST_ACCUM first (unless TRAINC_FP8_FAST_ACCUM=1), then with it (said once). */
static Plan *fp8_plan(rt_exec *e, int64_t M, int64_t N, int64_t K, int a8, int c16, int64_t ldc,
                      int accumulate, rt_dptr scales, const void *a8p, const void *b8p,
                      const void *C, const void *D, const void *bias)
{
    int epi = bias ? RT_EPI_NONE : -1;
    const void *bias16 = bias;
    int second = bias && rt_cu_operand(e, &bias16) == c16 && bias16 != bias;
    unsigned al[7] = {align_of(b8p), align_of(a8p), align_of(C), align_of(D), align_of(bias), 256,
                      align_of(second ? bias16 : NULL)};
    for (int i = 0; i < n_plans; i++) {
        Plan *p = &plans[i];
        if (p->a8 == a8 && p->M == M && p->N == N && p->K == K && p->ldc == ldc &&
            p->c16 == c16 && p->accumulate == accumulate && p->epi == epi &&
            !memcmp(p->align, al, sizeof al))
            return p->fallback ? NULL : p;
    }
    Plan init = {.ta = 0, .tb = 1, .epi = epi, .ab16 = RT_CU_BF16, .c16 = c16, .a8 = a8, .M = M,
                 .N = N, .K = K, .lda = K, .ldb = K, .ldc = ldc, .accumulate = accumulate};
    memcpy(init.align, al, sizeof al);
    Plan *p = plan_new(&init);
    /* cuBLASLt's A is our B (its 1 / s after its maximum), its B our A */
    const void *sa = (const void *)(uintptr_t)(scales + FP8_SCALE_B + 4);
    const void *sb = (const void *)(uintptr_t)(scales + FP8_SCALE_A + 4);
    const char *why = "a descriptor attribute refused";
    for (int fast = fp8_fast_first(); fast <= 1; fast++)
        for (int t = 0; t < 1 + second; t++) {
            if (fp8_desc_algo(e, p, t, c16, bias, bias16, sa, sb, fast, &why) != 0)
                continue;
            p->bias16 = t;
            static int said;
            if (fast && !fp8_fast_first() && !said++)
                fprintf(stderr, "trainc: note: fp8-mixed: cuBLASLt takes the %lld x %lld x %lld "
                        "linear GEMM in FP8 only with fast accumulation (FAST_ACCUM: partial sums "
                        "not promoted to fp32 along K), so it runs so (and any other such shape)\n",
                        (long long)M, (long long)N, (long long)K);
            return p;
        }
    p->fallback = 1;
    fp8_refused(bias ? 2 : 1, M, N, K, why);
    return NULL;
}

/* C = alpha op(A) op(B) + beta Cin (Cin: C, or the residual R with the bias's epilogue,
 * beta 1) in FP8, the bias (not NULL) in the epilogue; with db_first, the column sums
 * of A (dy, transposed) added into it before the casts. 1 when done; 0 with nothing
 * written where FP8 does not take the shape or cuBLASLt refused it (the caller runs the
 * bf16 GEMM: the casts may have run, into scratch only); -1 where cuBLASLt refused it
 * after db_first took its sums (the caller runs the bf16 GEMM without them). */
static int fp8_gemm(rt_exec *e, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                    const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                    float *C, int64_t ldc, const float *bias, const float *R, float *db_first)
{
    int paired = pair_take(A, tb);
    if (M <= 0 || N <= 0 || K <= 0)
        return 0;
    if (M % 16 || N % 16 || K % 16) {
        fp8_refused(0, M, N, K, "cuBLASLt's FP8 GEMMs take dimensions that are multiples of 16");
        return 0;
    }
    const void *a = A, *b = B, *c = C;
    if (rt_cu_operand(e, &a) != RT_CU_BF16 || rt_cu_operand(e, &b) != RT_CU_BF16) {
        fp8_refused(0, M, N, K, "an operand is not bf16");
        return 0;
    }
    int c16 = rt_cu_operand(e, &c);
    if (c != (const void *)C)
        rt_die("GEMM output in the parameter region");
    int a8 = tb ? FP8_E4M3 : FP8_E5M2;
    size_t ab = up256((size_t)(M * K)), bb = up256((size_t)(N * K));
    size_t a_all = paired ? 2 * ab : ab;   /* a pair's dy: row-major, then transposed */
    rt_dptr s = rt_cu_scratch(e, FP8_DATA + a_all + bb);
    rt_dptr a8p = s + FP8_DATA + (paired && ta ? ab : 0), b8p = s + FP8_DATA + a_all;
    const void *pa = (const void *)(uintptr_t)a8p, *pb = (const void *)(uintptr_t)b8p;
    const void *cin = bias && R ? (const void *)R : C;
    Plan *p = fp8_plan(e, M, N, K, a8, c16, ldc, beta != 0.0f || (bias && R), s, pa, pb, cin, C,
                       bias);
    if (!p)
        return 0;
    /* our A as [M, K] (stored [K, M] when transposed), our B as [N, K] */
    rt_dptr da = (rt_dptr)(uintptr_t)a, db = (rt_dptr)(uintptr_t)b;
    if (db_first)
        rt_cu_colsum_add(e, A, db_first, K, M);
    rt_dptr pa_max, pb_max;
    int na = operand_part(e, amax_cur.a, A, M * K, lda == (ta ? M : K), s + FP8_PARTS, &pa_max);
    if (!paired)
        rt_cu_fp8_cast(e, da, ta ? K : M, ta ? M : K, lda, a8 == FP8_E5M2, ta, a8p, pa_max, na,
                       s + FP8_SCALE_A);
    else if (!pair.cast)   /* dy stored [rows, cols] either way: both layouts */
        rt_cu_fp8_cast_both(e, da, ta ? K : M, ta ? M : K, lda, 1, s + FP8_DATA,
                            s + FP8_DATA + ab, pa_max, na, s + FP8_SCALE_A);
    pair.cast = paired == 2;   /* the second GEMM ends the pair */
    int nb = operand_part(e, amax_cur.b, B, N * K, ldb == (tb ? K : N), s + FP8_PARTS, &pb_max);
    rt_cu_fp8_cast(e, db, tb ? N : K, tb ? K : N, ldb, 0, !tb, b8p, pb_max, nb, s + FP8_SCALE_B);
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (bias) {
        const void *bp = bias;
        if (p->bias16)
            rt_cu_operand(e, &bp);
        st = p_cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp,
                                              sizeof bp);
    }
    if (st == CUBLAS_STATUS_SUCCESS)
        st = matmul(e, p, alpha, pa, pb, bias && R ? 1.0f : beta, cin, C);
    if (st == CUBLAS_STATUS_SUCCESS)
        return 1;
    if (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE &&
        st != CUBLAS_STATUS_ARCH_MISMATCH)
        lt_check(st, "cublasLtMatmul (FP8)");
    p->fallback = 1;
    pair.cast = 0;   /* the bf16 GEMM's kernels may take scratch */
    fp8_refused(bias ? 2 : 1, M, N, K, p_cublasLtGetStatusString(st));
    return db_first ? -1 : 0;
}

static void gemm_fp8(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                     float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                     float beta, float *C, int64_t ldc)
{
    amax_begin();
    if (!fp8_gemm(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL, NULL,
                  NULL))
        rt_cu_gemm(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    fold_output(e, C, M, N, ldc);
    amax_end();
}

/* rt_gemm_bias's FP8 form: without an activation, one FP8 GEMM with the BIAS epilogue
 * (a residual as C); else, or where that epilogue is refused, the FP8 product into C
 * (or Y), then rt_bias_act; where FP8 is refused, the bf16 call. */
static void gemm_bias_fp8(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                          float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                          float *C, int64_t ldc, const float *bias, const float *R, int act,
                          float *Y)
{
    float *out = C ? C : Y;
    amax_begin();
    if (act == RT_EPI_NONE && C && !epilogues_off() &&
        fp8_gemm(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc, bias, R,
                 NULL))
        ;
    else if (out && (!R || !rt_overlap(R, out, (size_t)((M - 1) * ldc + N) * 2)) &&
             fp8_gemm(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 0.0f, out, ldc, NULL,
                      NULL, NULL))
        bias_act(e, out, R, C, Y, bias, M, N, ldc, act);
    else
        rt_cu_gemm_bias(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, C, ldc, bias, R, act,
                        Y);
    fold_output(e, act == RT_EPI_NONE ? C : Y, M, N, ldc);
    amax_end();
}

/* rt_gemm_dbias's FP8 form: the FP8 GEMM, then the bias gradient from rt_cu_colsum_add */
static void gemm_dbias_fp8(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                           float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                           float beta, float *C, int64_t ldc, float *db, int fresh)
{
    if (!trans_a || lda != M)
        rt_die("rt_gemm_dbias: dy must be A, transposed, rows M apart");
    amax_begin();   /* (C is a weight gradient: no output slot) */
    /* the first of a marked pair: the bias gradient before the casts (above) */
    float *first = pair.left == 2 ? db : NULL;
    int done = fp8_gemm(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL,
                        NULL, first);
    if (done == 1 && !first)
        rt_cu_colsum_add(e, A, db, K, M);
    else if (done == 0)
        rt_cu_gemm_dbias(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, db,
                         fresh);
    else if (done == -1)   /* refused after the bias gradient was added */
        rt_cu_gemm(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    amax_end();
}

/* rt_gemm_dgelu's FP8 form: the FP8 GEMM into D, then rt_dgelu in place */
static void gemm_dgelu_fp8(rt_exec *e, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                           float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                           float *D, int64_t ldd, const float *pre)
{
    amax_begin();
    if (!pre || rt_overlap(pre, D, (size_t)((M - 1) * ldd + N) * 2)) {
        if (pair_take(A, trans_b))   /* a pair's GEMM in bf16: the next casts again */
            pair.cast = 0;
        rt_cu_gemm_dgelu(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, D, ldd, pre);
    } else if (fp8_gemm(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 0.0f, D, ldd, NULL,
                        NULL, NULL))
        dgelu(e, D, pre, M, N, ldd);
    else
        rt_cu_gemm_dgelu(e, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, D, ldd, pre);
    fold_output(e, D, M, N, ldd);
    amax_end();
}

/* The GEMMs as the GPU's twins of the CPU calls, handed to the device layer. */
void rt_cu_blas_register(void)
{
    static const rt_gpu_calls gemms = {
        .gemm = rt_cu_gemm,
        .gemm_bias = rt_cu_gemm_bias,
        .gemm_dbias = rt_cu_gemm_dbias,
        .gemm_dgelu = rt_cu_gemm_dgelu,
        .gemm_fp8 = gemm_fp8,
        .gemm_bias_fp8 = gemm_bias_fp8,
        .gemm_dbias_fp8 = gemm_dbias_fp8,
        .gemm_dgelu_fp8 = gemm_dgelu_fp8,
        .fp8_dy_pair = fp8_dy_pair,
        .fp8_amax_reset = rt_cu_fp8_amax_reset,
        .fp8_amax_slot = rt_cu_fp8_amax_slot,
        .fp8_amax_use = rt_cu_fp8_amax_use,
    };
    rt_cu_register(&gemms);
}
