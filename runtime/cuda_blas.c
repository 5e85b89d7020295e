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
 * from the address).
 *
 * Loaded with dlopen for the reason nvrtc.c gives. */
#include <dlfcn.h>
#include <cublasLt.h>
#include <string.h>
#include "rt_cuda.h"

#define LT_FNS(X)                                                                              \
    X(cublasLtCreate) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescSetAttribute)            \
    X(cublasLtMatrixLayoutCreate) X(cublasLtMatmulPreferenceCreate)                            \
    X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic)                  \
    X(cublasLtMatmul) X(cublasLtGetStatusString)
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

static void lt_load(void)
{
    static const char *const names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h)
        rt_fail("cuBLASLt (libcublasLt.so.13) cannot be loaded: %s\n  hint: install the CUDA "
                "toolkit's cuBLAS, or ship the trainer with trainc build --bundle DIR", dlerror());
#define RESOLVE(fn)                                                                            \
    if (!(p_##fn = (__typeof__(fn) *)dlsym(h, #fn)))                                           \
        rt_fail("cuBLASLt lacks %s (too old?)", #fn);
    LT_FNS(RESOLVE)
    LT(p_cublasLtCreate(&lt));
}

typedef struct Plan {
    int ta, tb;
    int ab16, c16;             /* A and B, C: RT_CU_F32, RT_CU_BF16 or RT_CU_F16 */
    int64_t M, N, K, lda, ldb, ldc;
    int accumulate;            /* beta != 0 */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
} Plan;

#define MAX_PLANS 256
static Plan plans[MAX_PLANS];
static int n_plans;

static Plan *plan_for(rt_exec *e, int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t lda,
                      int64_t ldb, int64_t ldc, int accumulate, int ab16, int c16)
{
    for (int i = 0; i < n_plans; i++) {
        Plan *p = &plans[i];
        if (p->ta == ta && p->tb == tb && p->M == M && p->N == N && p->K == K && p->lda == lda &&
            p->ldb == ldb && p->ldc == ldc && p->accumulate == accumulate && p->ab16 == ab16 &&
            p->c16 == c16)
            return p;
    }
    if (n_plans == MAX_PLANS)
        rt_die("more than %d GEMM shapes", MAX_PLANS);
    if (!lt)
        lt_load();
    Plan *p = &plans[n_plans];
    *p = (Plan){.ta = ta, .tb = tb, .ab16 = ab16, .c16 = c16, .M = M, .N = N, .K = K,
                .lda = lda, .ldb = ldb, .ldc = ldc, .accumulate = accumulate};
    static const cudaDataType_t types[] = {CUDA_R_32F, CUDA_R_16BF, CUDA_R_16F};   /* RT_CU_* */
    cudaDataType_t tab = types[ab16], tc = types[c16];
    /* column-major: first operand is B (op = trans_b), second is A (op = trans_a) */
    cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT(p_cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT(p_cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT(p_cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    LT(p_cublasLtMatrixLayoutCreate(&p->a, tab, (uint64_t)(tb ? K : N), (uint64_t)(tb ? N : K), ldb));
    LT(p_cublasLtMatrixLayoutCreate(&p->b, tab, (uint64_t)(ta ? M : K), (uint64_t)(ta ? K : M), lda));
    LT(p_cublasLtMatrixLayoutCreate(&p->c, tc, (uint64_t)N, (uint64_t)M, ldc));
    size_t ws = 0;
    rt_cu_workspace(e, &ws);
    cublasLtMatmulPreference_t pref;
    LT(p_cublasLtMatmulPreferenceCreate(&pref));
    LT(p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                              sizeof ws));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    LT(p_cublasLtMatmulAlgoGetHeuristic(lt, p->desc, p->a, p->b, p->c, p->c, pref, 1, &res, &found));
    if (found < 1)
        rt_fail("cuBLASLt has no algorithm for a %lld x %lld x %lld GEMM", (long long)M,
                (long long)N, (long long)K);
    p->algo = res.algo;
    n_plans++;
    return p;
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
    Plan *p = plan_for(e, trans_a, trans_b, M, N, K, lda, ldb, ldc, beta != 0.0f, ta16, c16);
    size_t ws = 0;
    rt_dptr w = rt_cu_workspace(e, &ws);
    LT(p_cublasLtMatmul(lt, p->desc, &alpha, b, p->a, a, p->b, &beta, C, p->c, C, p->c, &p->algo,
                        (void *)(uintptr_t)w, ws, (cudaStream_t)rt_cu_stream(e)));
}
