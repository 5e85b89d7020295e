#define _GNU_SOURCE
/* fake_cublaslt.c: libcublasLt.so.13 for tests/fake_gpu.sh: the functions
 * runtime/cuda_blas.c uses (its LT_FNS), prototypes checked against cublasLt.h.
 *
 * Descriptors keep what was set (operations, layouts, workspace limit, the epilogues
 * runtime/cuda_blas.c uses: BIAS, RELU_BIAS, GELU_BIAS, GELU_AUX_BIAS with a bias in fp32 or
 * D's type (TRAINC_FAKE_LT_BIAS=as-d: D's type only, cuBLASLt's documented default),
 * DGELU, and BGRADB into an fp32 bias gradient (C and D fp32); GELU and its derivative
 * as templates/cuda/prelude.cuh computes them on the GPU (libm's tanhf, which the
 * emulated kernels use too), the bias gradient summed in double, in k order, then
 * rounded; an auxiliary matrix's ld a multiple of 8, as cuBLASLt documents); anything the fake does not emulate (another compute or
 * data type, another epilogue, a layout attribute but a strided batch's count and
 * offset (batches in place, without an epilogue or with BGRADB and its
 * BIAS_BATCH_STRIDE), device pointer mode) is
 * CUBLAS_STATUS_NOT_SUPPORTED. The heuristic and cublasLtMatmul
 * check the shapes as cuBLASLt defines them (op(A) m x k, op(B) k x n, C and D m x n,
 * column-major, ld >= rows) and that every matrix and the workspace lie in device
 * memory. cublasLtMatmul is queued on its stream through the fake driver
 * (fake_gpu.h's hooks) and runs cblas_sgemm there: column-major fp32, alpha and beta
 * read at the call (host pointer mode). In place (D = C, one layout) any beta, sgemm's
 * own C = alpha A B + beta C. Out of place (D != C: the residual epilogue of
 * runtime/cuda_blas.c; C and D of one type and shape, each with its ld, not
 * overlapping) beta 0 or 1 only: D = alpha A B, then D + C, then the epilogue, the
 * order of rt_gemm_bias in runtime/kernels.c; another beta is refused, as the rounding
 * of beta * C against the product on a real GPU is not the fake's to guess. bf16 and
 * fp16 matrices (CUDA_R_16BF, CUDA_R_16F: A and B of one type, and C with them or in
 * fp32, the combinations cuBLASLt takes with fp32 compute) are widened to fp32 for the
 * sgemm and D narrowed back as the GPU's kernels round (runtime/rt_half.h): fp32
 * accumulation, as on the GPU (the order of the sums differs).
 *
 * FP8 (A and B CUDA_R_8F_E4M3 or CUDA_R_8F_E5M2, not both E5M2; fp8_refusal has the
 * rules): D = scale_D (alpha scale_A scale_B op(A) op(B) + beta C + bias), A_, B_ and
 * D_SCALE_POINTER device floats read when the GEMM runs (NULL: 1). The codes widen
 * exactly (tests/gpu/emu/cuda_fp8.h) and the products are summed by sgemm in fp32,
 * its alpha alpha scale_A scale_B; FAST_ACCUM is accepted and changes nothing (on
 * Hopper it skips the periodic promotion of the tensor cores' narrower sums). C and D
 * bf16, fp16 or fp32 (a bf16 bias beside fp32), or C 16-bit and D E4M3 (E5M2 when an
 * input is): AMAX_D_POINTER gets max |D| before D's scale, and D is narrowed with
 * saturation to the largest finite value. Only the "TN" layout (A transposed, B not),
 * m, n, k multiples of 16, leading dimensions and matrices 16-byte aligned, epilogues
 * DEFAULT and BIAS, no strided batch: anything else has no algorithm
 * (CUBLAS_STATUS_NOT_SUPPORTED), where a runtime falls back to 16-bit GEMMs. */
#include <cblas.h>
#include <cublasLt.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fake_gpu.h"
/* FP8 as the emulated kernels have it: the emulator's cuda_fp8.h, the toolkit's bit for
 * bit (its C part: the conversions and emu_fp8_to_float) */
#include "../gpu/emu/cuda_fp8.h"
#include "rt_half.h"
#include "trainc_rt.h"

/* GELU (tanh) and its derivative as the GPU's kernels compute them (prelude.cuh): the
 * fallback kernels, emulated, must give the epilogue's bits */
static float gpu_gelu_tanh(float x)
{
    float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}
static float gpu_gelu_tanh_bwd(float x, float dy)
{
    float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
    float t = tanhf(u);
    float du = 0.79788456080286536f * (1.0f + 3.0f * 0.044715f * x * x);
    return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
}

static fake_enqueue_host_fn enqueue_host;
static fake_is_dev_range_fn is_dev_range;

static cublasStatus_t refuse(cublasStatus_t s, const char *what)
{
    fprintf(stderr, "fake cuBLASLt: %s\n", what);
    return s;
}

struct cublasLtContext {
    int magic;
};
static struct cublasLtContext the_handle = {0x1a5};

typedef struct Desc {
    cublasOperation_t op[2];   /* TRANSA, TRANSB */
    cublasLtEpilogue_t epi;    /* DEFAULT, BIAS, RELU_BIAS, GELU_BIAS, GELU_AUX_BIAS, DGELU, BGRADB */
    const void *bias;          /* one per row of D; BGRADB: its output (fp32), one per column */
    int bias_type;             /* BIAS_DATA_TYPE as Layout.half; -1: not set (D's type, as
                                  cuBLASLt documents) */
    void *aux;                 /* GELU_AUX_BIAS (out), DGELU (in): the pre-activation, D's type */
    int64_t aux_ld;
    int64_t bias_stride;       /* BIAS_BATCH_STRIDE: a strided batch's bias vectors apart */
    const float *scale[3];     /* A_, B_, D_SCALE_POINTER: device floats, read when the GEMM
                                  runs; NULL: 1 */
    float *amax_d;             /* AMAX_D_POINTER: a device float, or NULL */
    int fast;                  /* FAST_ACCUM */
} Desc;
typedef struct Layout {
    uint64_t rows, cols;
    int64_t ld;
    int half;                  /* 1: CUDA_R_16BF, 2: CUDA_R_16F, 0: CUDA_R_32F or FP8 */
    int fp8;                   /* 1: CUDA_R_8F_E4M3, 2: CUDA_R_8F_E5M2, 0: not FP8 */
    int32_t batch;             /* BATCH_COUNT: 1 unless set */
    int64_t stride;            /* STRIDED_BATCH_OFFSET, elements: 0 unless set */
} Layout;
typedef struct Pref {
    uint64_t max_ws;
    uint32_t align[4];         /* MIN_ALIGNMENT_{A,B,C,D}_BYTES; 0: cuBLASLt's default, 256 */
} Pref;

/* bytes an element */
static size_t esize(const Layout *l) { return l->fp8 ? 1 : l->half ? 2 : 4; }

/* The pointer alignment an algorithm may assume: what the preference promised (256
 * bytes unless told less, as cuBLASLt documents). The heuristic records it in the
 * algorithm and cublasLtMatmul refuses a pointer less aligned, so a caller that
 * promises too much fails here rather than only on some real GPU's kernels. */
static uint32_t pref_align(const Pref *p, int k) { return p->align[k] ? p->align[k] : 256; }

/* A pointer's alignment up to 256 bytes (NULL: 256) */
static uint32_t ptr_align(const void *p)
{
    uint32_t a = 256;
    while (a > 1 && (uintptr_t)p % a)
        a /= 2;
    return a;
}

/* the fake's "algorithm": a tag and the problem it was chosen for */
#define ALGO_TAG 0x74726e63u

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    if (!h)
        return CUBLAS_STATUS_INVALID_VALUE;
    /* the fake driver is already loaded by the runtime; a real one has no hooks */
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (drv) {
        enqueue_host = (fake_enqueue_host_fn)dlsym(drv, "trainc_fake_enqueue_host");
        is_dev_range = (fake_is_dev_range_fn)dlsym(drv, "trainc_fake_is_dev_range");
    }
    if (!enqueue_host || !is_dev_range)
        return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "the fake driver (libcuda.so.1 of tests/fake_gpu) is not loaded");
    *h = &the_handle;
    return CUBLAS_STATUS_SUCCESS;
}

/* the versions of the toolkit whose rules the fake follows: cuBLASLt 13.0.0, CUDA 13.0 */
size_t cublasLtGetVersion(void) { return 130000; }
size_t cublasLtGetCudartVersion(void) { return 13000; }

const char *cublasLtGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "unknown error";
    }
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                        cudaDataType_t scale)
{
    if (!d)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulDescCreate: only fp32 compute and scale");
    Desc *x = calloc(1, sizeof *x);
    x->op[0] = x->op[1] = CUBLAS_OP_N;
    x->epi = CUBLASLT_EPILOGUE_DEFAULT;
    x->bias_type = -1;
    *d = (cublasLtMatmulDesc_t)x;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                              const void *buf, size_t size)
{
    Desc *x = (Desc *)d;
    if (!x || !buf)
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
        cublasLtEpilogue_t ep;
        if (size != sizeof ep)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute: size of an epilogue");
        memcpy(&ep, buf, sizeof ep);
        if (ep != CUBLASLT_EPILOGUE_DEFAULT && ep != CUBLASLT_EPILOGUE_BIAS &&
            ep != CUBLASLT_EPILOGUE_RELU_BIAS && ep != CUBLASLT_EPILOGUE_GELU_BIAS &&
            ep != CUBLASLT_EPILOGUE_GELU_AUX_BIAS && ep != CUBLASLT_EPILOGUE_DGELU &&
            ep != CUBLASLT_EPILOGUE_BGRADB)
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulDescSetAttribute: that epilogue");
        x->epi = ep;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: {
        cudaDataType_t t;
        if (size != sizeof t)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute: size of a data type");
        memcpy(&t, buf, sizeof t);
        if (t != CUDA_R_32F && t != CUDA_R_16BF && t != CUDA_R_16F)
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulDescSetAttribute: a bias of fp32, bf16 or fp16 only");
        x->bias_type = t == CUDA_R_32F ? 0 : t == CUDA_R_16BF ? 1 : 2;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
        return size == sizeof(cudaDataType_t) ? CUBLAS_STATUS_SUCCESS
                                              : refuse(CUBLAS_STATUS_INVALID_VALUE, "aux data type size");
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
        if (size != sizeof(void *))
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute: size of a pointer");
        if (a == CUBLASLT_MATMUL_DESC_BIAS_POINTER)
            memcpy(&x->bias, buf, sizeof x->bias);
        else
            memcpy(&x->aux, buf, sizeof x->aux);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
        if (size != sizeof(int64_t))
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute: size of the bias batch stride");
        memcpy(&x->bias_stride, buf, sizeof x->bias_stride);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
        if (size != sizeof(int64_t))
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute: size of the aux ld");
        memcpy(&x->aux_ld, buf, sizeof x->aux_ld);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
    case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER:
        if (size != sizeof(void *))
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute: size of a pointer");
        memcpy(&x->scale[a == CUBLASLT_MATMUL_DESC_A_SCALE_POINTER   ? 0
                         : a == CUBLASLT_MATMUL_DESC_B_SCALE_POINTER ? 1
                                                                     : 2],
               buf, sizeof(void *));
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER:
        if (size != sizeof(void *))
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute: size of a pointer");
        memcpy(&x->amax_d, buf, sizeof x->amax_d);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM: {   /* the fake's sums are fp32 either way */
        int8_t v;
        if (size != sizeof v)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute: FAST_ACCUM is an int8_t");
        memcpy(&v, buf, sizeof v);
        if (v != 0 && v != 1)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute: FAST_ACCUM 0 or 1");
        x->fast = v;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
        break;
    default:
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulDescSetAttribute: that attribute");
    }
    if (size != sizeof(cublasOperation_t))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute: size of a cublasOperation_t");
    cublasOperation_t op;
    memcpy(&op, buf, sizeof op);
    if (op != CUBLAS_OP_N && op != CUBLAS_OP_T)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulDescSetAttribute: op N or T");
    x->op[a == CUBLASLT_MATMUL_DESC_TRANSB] = op;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld)
{
    if (!l)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (type != CUDA_R_32F && type != CUDA_R_16BF && type != CUDA_R_16F && type != CUDA_R_8F_E4M3 &&
        type != CUDA_R_8F_E5M2)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatrixLayoutCreate: only fp32, bf16, fp16, E4M3 and E5M2");
    if (rows == 0 || cols == 0 || ld < (int64_t)rows || rows > 0x7fffffff || cols > 0x7fffffff)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutCreate: rows, cols, ld (column-major: ld >= rows)");
    Layout *x = calloc(1, sizeof *x);
    *x = (Layout){rows, cols, ld, type == CUDA_R_16BF ? 1 : type == CUDA_R_16F ? 2 : 0,
                  type == CUDA_R_8F_E4M3 ? 1 : type == CUDA_R_8F_E5M2 ? 2 : 0, 1, 0};
    *l = (cublasLtMatrixLayout_t)x;
    return CUBLAS_STATUS_SUCCESS;
}

/* BATCH_COUNT (int32_t, >= 1) and STRIDED_BATCH_OFFSET (int64_t, >= 0) only */
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                cublasLtMatrixLayoutAttribute_t a,
                                                const void *buf, size_t size)
{
    Layout *x = (Layout *)l;
    if (!x || !buf)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (a == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT) {
        int32_t v;
        if (size != sizeof v)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutSetAttribute: BATCH_COUNT is an int32_t");
        memcpy(&v, buf, sizeof v);
        if (v < 1)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutSetAttribute: BATCH_COUNT < 1");
        x->batch = v;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (a == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET) {
        int64_t v;
        if (size != sizeof v)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutSetAttribute: STRIDED_BATCH_OFFSET is an int64_t");
        memcpy(&v, buf, sizeof v);
        if (v < 0)
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatrixLayoutSetAttribute: a negative batch stride");
        x->stride = v;
        return CUBLAS_STATUS_SUCCESS;
    }
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatrixLayoutSetAttribute: only BATCH_COUNT and STRIDED_BATCH_OFFSET");
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    if (!p)
        return CUBLAS_STATUS_INVALID_VALUE;
    *p = (cublasLtMatmulPreference_t)calloc(1, sizeof(Pref));
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a,
                                                    const void *buf, size_t size)
{
    if (!p || !buf)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (a == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES || a == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES ||
        a == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES || a == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES) {
        uint32_t v;
        if (size != sizeof v)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceSetAttribute: an alignment is a uint32_t");
        memcpy(&v, buf, sizeof v);
        if (!v || (v & (v - 1)))
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceSetAttribute: an alignment is a power of 2");
        int k = a == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES   ? 0
                : a == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES ? 1
                : a == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES ? 2
                                                                  : 3;
        ((Pref *)p)->align[k] = v;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (a != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulPreferenceSetAttribute: only MAX_WORKSPACE_BYTES and MIN_ALIGNMENT_*");
    if (size != sizeof(uint64_t))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceSetAttribute: a uint64_t");
    memcpy(&((Pref *)p)->max_ws, buf, sizeof(uint64_t));
    return CUBLAS_STATUS_SUCCESS;
}

/* m, n, k of the problem, or -1 when the shapes disagree */
static int shape(const Desc *d, const Layout *a, const Layout *b, const Layout *c, const Layout *dd,
                 uint64_t *m, uint64_t *n, uint64_t *k)
{
    if (!d || !a || !b || !c || !dd)
        return -1;
    *m = d->op[0] == CUBLAS_OP_N ? a->rows : a->cols;
    *k = d->op[0] == CUBLAS_OP_N ? a->cols : a->rows;
    uint64_t kb = d->op[1] == CUBLAS_OP_N ? b->rows : b->cols;
    *n = d->op[1] == CUBLAS_OP_N ? b->cols : b->rows;
    if (kb != *k || c->rows != *m || c->cols != *n || dd->rows != *m || dd->cols != *n)
        return -1;
    /* a strided batch: one count for all four; D's matrices must not overlap */
    if (a->batch != dd->batch || b->batch != dd->batch || c->batch != dd->batch ||
        (dd->batch > 1 && dd->stride < (int64_t)((dd->cols - 1) * (uint64_t)dd->ld + dd->rows)))
        return -1;
    /* the types: A and B alike; C in fp32 or as A and B; D as C (FP8: fp8_refusal) */
    if (!a->fp8 && !b->fp8 && !c->fp8 && !dd->fp8 &&
        (a->half != b->half || (c->half && c->half != a->half) || c->half != dd->half))
        return -1;
    return 0;
}

/* FP8 GEMMs (A or B CUDA_R_8F_*), as cuBLASLt 13 documents them for sm_89 and later:
 * A and B E4M3 or E5M2 but not both E5M2; D bf16, fp16 or fp32 with C of its type, or
 * (C bf16 or fp16) E4M3, or E5M2 when A or B is; fp32 compute and scale. The kernels'
 * own limits, for which the heuristic finds no algorithm: A transposed and B not (the
 * "TN" layout, both k-major), m, n and k multiples of 16, every ld 16 bytes apart and
 * every matrix 16-byte aligned; no strided batch here. Epilogues DEFAULT and BIAS; the
 * bias bf16 beside an fp32 D, else D's type, C's beside an FP8 D. D_SCALE_POINTER and
 * AMAX_D_POINTER with an FP8 D only: cuBLASLt does not compute amax for another output
 * of FP8 inputs (its maintainers' word, pytorch/pytorch#122821), so the fake refuses
 * both rather than let a runtime rely on them. TRAINC_FAKE_FP8_FAST_ONLY=1: FP8 only
 * with FAST_ACCUM, as a library might offer (the runtime then asks with it). NULL: a
 * supported FP8 problem. */
static const char *fp8_refusal(const Desc *x, const Layout *a, const Layout *b, const Layout *c,
                               const Layout *d, uint64_t m, uint64_t n, uint64_t k)
{
    if (!a->fp8 || !b->fp8)
        return "FP8 needs both A and B in FP8";
    if (a->fp8 == 2 && b->fp8 == 2)
        return "E5M2 x E5M2: no FP8 kernel takes both operands in E5M2";
    if (c->fp8)
        return "C in FP8 is not emulated";
    if (d->fp8 ? !c->half : c->half != d->half)
        return "FP8 inputs: C and D of one type (bf16, fp16, fp32), or C 16-bit and D FP8";
    if (d->fp8 == 2 && a->fp8 != 2 && b->fp8 != 2)
        return "an E5M2 D needs an E5M2 input";
    if (x->op[0] != CUBLAS_OP_T || x->op[1] != CUBLAS_OP_N)
        return "FP8 needs A transposed and B not (TN)";
    if (m % 16 || n % 16 || k % 16)
        return "FP8: m, n and k must be multiples of 16";
    if ((uint64_t)a->ld % 16 || (uint64_t)b->ld % 16 || (uint64_t)c->ld * esize(c) % 16 ||
        (uint64_t)d->ld * esize(d) % 16)
        return "FP8: every leading dimension must be a multiple of 16 bytes";
    if (d->batch > 1)
        return "a strided batch of FP8 GEMMs is not emulated";
    if (x->epi != CUBLASLT_EPILOGUE_DEFAULT && x->epi != CUBLASLT_EPILOGUE_BIAS)
        return "FP8: epilogues DEFAULT and BIAS only";
    if (!d->fp8 && (x->scale[2] || x->amax_d))
        return "FP8: D_SCALE_POINTER and AMAX_D_POINTER need an FP8 D";
    const char *fast_only = getenv("TRAINC_FAKE_FP8_FAST_ONLY");
    if (!x->fast && fast_only && !strcmp(fast_only, "1"))
        return "FP8 without FAST_ACCUM (TRAINC_FAKE_FP8_FAST_ONLY=1: a library with fast kernels only)";
    return NULL;
}

/* an FP8 GEMM's bias type (Layout.half's code): bf16 beside an fp32 D, C's beside an FP8
 * D, else D's; BIAS_DATA_TYPE must say the same */
static int fp8_bias_type(const Layout *c, const Layout *d)
{
    return d->fp8 ? c->half : d->half ? d->half : 1;
}

/* Why the heuristic finds no algorithm for a GEMM of consistent shapes (NULL: it finds
 * one): the types, epilogues and alignments the fake emulates, and the test switches */
static const char *heuristic_refusal(const Desc *x, const Layout *A, const Layout *B, const Layout *C,
                                     const Layout *D, const Pref *pref, uint64_t m, uint64_t n, uint64_t k)
{
    if (A->fp8 || B->fp8 || C->fp8 || D->fp8) {
        const char *why = fp8_refusal(x, A, B, C, D, m, n, k);
        int bt = fp8_bias_type(C, D);
        if (!why && x->epi == CUBLASLT_EPILOGUE_BIAS && x->bias_type >= 0 && x->bias_type != bt)
            why = bt == 1 ? "FP8: the bias must be bf16 here" : "FP8: the bias must be fp16 here";
        for (int q = 0; q < 4 && !why; q++)
            if (pref_align(pref, q) < 16)
                why = "FP8: the matrices must be 16-byte aligned (MIN_ALIGNMENT_*_BYTES < 16)";
        return why;
    }
    if (x->scale[0] || x->scale[1] || x->scale[2] || x->amax_d)
        return "cublasLtMatmulAlgoGetHeuristic: scale and amax pointers with FP8 matrices only";
    if (x->epi == CUBLASLT_EPILOGUE_BGRADB && D->half)
        return "cublasLtMatmulAlgoGetHeuristic: the fake's BGRADB is fp32 only";
    if ((x->epi == CUBLASLT_EPILOGUE_DGELU || x->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) &&
        (x->aux_ld % 8 || x->aux_ld < (int64_t)m))
        return "cublasLtMatmulAlgoGetHeuristic: the aux ld is not a multiple of 8 >= m";
    /* the bias: as D (cuBLASLt's documented default), or fp32; BGRADB's is C's type (fp32
     * here). TRAINC_FAKE_LT_BIAS=as-d refuses an fp32 bias beside a 16-bit D, the case
     * cublasLt.h does not list (its exceptions are the int8 and fp8 kernels), so that the
     * runtime's second try, the bias in D's type, is exercised */
    int bt = x->bias_type < 0 ? D->half : x->bias_type;
    if (x->epi == CUBLASLT_EPILOGUE_BGRADB && bt != 0)
        return "cublasLtMatmulAlgoGetHeuristic: BGRADB's bias gradient is C's type, fp32";
    if (x->epi != CUBLASLT_EPILOGUE_BGRADB && x->epi != CUBLASLT_EPILOGUE_DEFAULT &&
        x->epi != CUBLASLT_EPILOGUE_DGELU && bt != 0 && bt != D->half)
        return "cublasLtMatmulAlgoGetHeuristic: a 16-bit bias of another type than D";
    const char *only = getenv("TRAINC_FAKE_LT_BIAS");
    if (only && !strcmp(only, "as-d") && x->epi != CUBLASLT_EPILOGUE_BGRADB && bt == 0 && D->half)
        return "cublasLtMatmulAlgoGetHeuristic: an fp32 bias beside a 16-bit D (TRAINC_FAKE_LT_BIAS=as-d)";
    /* TRAINC_FAKE_LT_BATCH=refuse: no algorithm for a strided batch, so that the
     * runtime's whole-GEMM fallback of its K slices is exercised */
    const char *batch = getenv("TRAINC_FAKE_LT_BATCH");
    if (batch && !strcmp(batch, "refuse") && D->batch > 1)
        return "cublasLtMatmulAlgoGetHeuristic: a strided batch (TRAINC_FAKE_LT_BATCH=refuse)";
    return NULL;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                              cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int *returned)
{
    uint64_t m, n, k;
    if (h != &the_handle || !pref || requested < 1 || !results || !returned)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (shape((Desc *)desc, (Layout *)A, (Layout *)B, (Layout *)C, (Layout *)D, &m, &n, &k) != 0)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulAlgoGetHeuristic: the layouts do not make a GEMM");
    const Desc *x = (Desc *)desc;
    const char *why = heuristic_refusal(x, (Layout *)A, (Layout *)B, (Layout *)C, (Layout *)D,
                                        (const Pref *)pref, m, n, k);
    if (why)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, why);
    memset(&results[0], 0, sizeof results[0]);
    results[0].algo.data[0] = ALGO_TAG;
    results[0].algo.data[1] = m | (n << 32);
    results[0].algo.data[2] = k;
    /* the bias and aux pointers' alignment as the descriptor held them: the heuristic
     * reads them for that (cublasLt.h), so an algorithm may assume it */
    results[0].algo.data[3] = ptr_align(x->bias) | ((uint64_t)ptr_align(x->aux) << 16);
    for (int q = 0; q < 4; q++)
        results[0].algo.data[4 + q] = pref_align((const Pref *)pref, q);
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

typedef struct Job {
    CBLAS_TRANSPOSE ta, tb;
    int m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const void *A, *B;
    void *C;                   /* D: the output (in place: also the C read with beta) */
    int ab16, c16;             /* A and B, C and D: Layout.half */
    size_t na, nb, nc;         /* elements each matrix spans (nc: D's) */
    const void *Cin;           /* out of place: C, read after the product (beta 1); else NULL */
    int ldcin;
    size_t ncin;
    cublasLtEpilogue_t epi;    /* and its operands, as set when the call was queued */
    const void *bias;
    int bias_type;             /* Layout.half's code */
    void *aux;
    int64_t aux_ld;
    int cin16;                 /* out of place: C's Layout.half (as D's but beside an FP8 D) */
    int a8, b8, d8;            /* A, B, D: Layout.fp8 */
    const float *scale[3];     /* FP8: A_, B_, D_SCALE_POINTER, read when the job runs */
    float *amax_d;
} Job;

/* one matrix's elements (of a batch: the first) */
static size_t elems(const Layout *l) { return (l->cols - 1) * (uint64_t)l->ld + l->rows; }
/* the elements a batch spans */
static size_t elems_all(const Layout *l) { return (size_t)(l->batch - 1) * (size_t)l->stride + elems(l); }
static size_t span(const Layout *l) { return elems_all(l) * esize(l); }

static float *widen(const void *p, size_t n, int half)
{
    float *f = malloc(n * sizeof *f);
    const uint16_t *h = p;
    for (size_t i = 0; i < n; i++)
        f[i] = half == 1 ? rt_bf16_to_float(h[i]) : rt_f16_to_float(h[i]);
    return f;
}

static float *widen8(const void *p, size_t n, int fp8)
{
    float *f = malloc(n * sizeof *f);
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        f[i] = emu_fp8_to_float(b[i], fp8 == 1 ? __NV_E4M3 : __NV_E5M2);
    return f;
}

/* an FP8 D: the m x n result (column-major, ld apart) before D's scale gives amax_d (a
 * NaN among them gives NaN: the fake's choice), then times the scale, narrowed as
 * cvt.rn.satfinite does (nearest even, saturated to the largest finite value) */
static void narrow8(const Job *j, const float *f)
{
    float amax = 0.0f, sd = j->scale[2] ? *j->scale[2] : 1.0f;
    unsigned char *d = j->C;
    for (int c = 0; c < j->n; c++)
        for (int r = 0; r < j->m; r++) {
            size_t at = (size_t)c * (size_t)j->ldc + (size_t)r;
            float v = f[at];
            amax = isnan(v) || isnan(amax) ? NAN : fmaxf(amax, fabsf(v));
            d[at] = __nv_cvt_float_to_fp8(v * sd, __NV_SATFINITE, j->d8 == 1 ? __NV_E4M3 : __NV_E5M2);
        }
    if (j->amax_d)
        *j->amax_d = amax;
}

static void narrow(void *p, const float *f, size_t n, int half)
{
    uint16_t *h = p;
    for (size_t i = 0; i < n; i++)
        h[i] = half == 1 ? rt_float_to_bf16(f[i]) : rt_float_to_f16(f[i]);
}

static void run_job(void *arg)
{
    Job *j = arg;
    float *A = j->a8 ? widen8(j->A, j->na, j->a8) : j->ab16 ? widen(j->A, j->na, j->ab16) : (float *)j->A;
    float *B = j->b8 ? widen8(j->B, j->nb, j->b8) : j->ab16 ? widen(j->B, j->nb, j->ab16) : (float *)j->B;
    float *C = j->d8 ? calloc(j->nc, sizeof *C) : j->c16 ? widen(j->C, j->nc, j->c16) : j->C;
    /* FP8: the scales of A and B applied to the fp32 sums, with alpha, as cuBLASLt does */
    float alpha = j->alpha;
    if (j->a8)
        alpha = alpha * (j->scale[0] ? *j->scale[0] : 1.0f) * (j->scale[1] ? *j->scale[1] : 1.0f);
    cblas_sgemm(CblasColMajor, j->ta, j->tb, j->m, j->n, j->k, alpha, A, j->lda, B, j->ldb,
                j->Cin ? 0.0f : j->beta, C, j->ldc);
    if (j->Cin && j->beta != 0.0f) {   /* out of place, beta 1: the product, then + C */
        const float *Ci = j->cin16 ? widen(j->Cin, j->ncin, j->cin16) : j->Cin;
        for (int c = 0; c < j->n; c++)
            for (int r = 0; r < j->m; r++)
                C[(size_t)c * (size_t)j->ldc + (size_t)r] += Ci[(size_t)c * (size_t)j->ldcin + (size_t)r];
        if (j->cin16)
            free((void *)Ci);
    }
    if (j->epi == CUBLASLT_EPILOGUE_DGELU) {   /* D = gelu'(aux) x the product */
        for (int c = 0; c < j->n; c++)
            for (int r = 0; r < j->m; r++) {
                size_t at = (size_t)c * (size_t)j->aux_ld + (size_t)r;
                const uint16_t *h = j->aux;
                float x = j->c16 == 1 ? rt_bf16_to_float(h[at])
                          : j->c16 == 2 ? rt_f16_to_float(h[at]) : ((const float *)j->aux)[at];
                float *v = &C[(size_t)c * (size_t)j->ldc + (size_t)r];
                *v = gpu_gelu_tanh_bwd(x, *v);
            }
    } else if (j->epi == CUBLASLT_EPILOGUE_BGRADB) {   /* op(B) summed over k, per column */
        for (int c = 0; c < j->n; c++) {
            double sum = 0.0;
            for (int kk = 0; kk < j->k; kk++)
                sum += B[j->tb == CblasNoTrans ? (size_t)c * (size_t)j->ldb + (size_t)kk
                                               : (size_t)kk * (size_t)j->ldb + (size_t)c];
            ((float *)j->bias)[c] = (float)sum;
        }
    } else if (j->epi != CUBLASLT_EPILOGUE_DEFAULT) {  /* column-major: the bias along D's rows */
        const float *bias = j->bias_type ? widen(j->bias, (size_t)j->m, j->bias_type) : j->bias;
        for (int c = 0; c < j->n; c++)
            for (int r = 0; r < j->m; r++) {
                float v = C[(size_t)c * (size_t)j->ldc + (size_t)r] + bias[r];
                if (j->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
                    size_t at = (size_t)c * (size_t)j->aux_ld + (size_t)r;
                    if (j->c16 == 1)
                        ((uint16_t *)j->aux)[at] = rt_float_to_bf16(v);
                    else if (j->c16 == 2)
                        ((uint16_t *)j->aux)[at] = rt_float_to_f16(v);
                    else
                        ((float *)j->aux)[at] = v;
                    v = gpu_gelu_tanh(v);
                } else if (j->epi == CUBLASLT_EPILOGUE_GELU_BIAS) {
                    v = gpu_gelu_tanh(v);
                } else if (j->epi == CUBLASLT_EPILOGUE_RELU_BIAS) {
                    v = v > 0.0f ? v : 0.0f;
                }
                C[(size_t)c * (size_t)j->ldc + (size_t)r] = v;
            }
        if (j->bias_type)
            free((void *)bias);
    }
    if (j->d8) {
        narrow8(j, C);
        free(C);
    } else if (j->c16) {
        narrow(j->C, C, j->nc, j->c16);
        free(C);
    }
    if (j->ab16 || j->a8) {
        free(A);
        free(B);
    }
    /* j is the driver's (freed with its operation: a graph replays it) */
}

/* cublasLtMatmul's own checks of an FP8 GEMM (the heuristic's, for a call without an
 * algorithm, and the pointers): CUBLAS_STATUS_SUCCESS when it may run. Scale and amax
 * pointers without FP8 matrices are an invalid value, as cublasLt.h says. */
static cublasStatus_t fp8_call_refusal(const Desc *x, const Layout *a, const Layout *b, const Layout *c,
                                       const Layout *d, const void *A, const void *B, const void *C,
                                       const void *D, uint64_t m, uint64_t n, uint64_t k)
{
    if (!a->fp8 && !b->fp8 && !c->fp8 && !d->fp8)
        return x->scale[0] || x->scale[1] || x->scale[2] || x->amax_d
                   ? refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: scale or amax pointers without FP8 matrices")
                   : CUBLAS_STATUS_SUCCESS;
    const char *why = fp8_refusal(x, a, b, c, d, m, n, k);
    if (!why && x->epi == CUBLASLT_EPILOGUE_BIAS && x->bias_type >= 0 && x->bias_type != fp8_bias_type(c, d))
        why = "FP8: the bias type";
    if (!why && (ptr_align(A) < 16 || ptr_align(B) < 16 || ptr_align(C) < 16 || ptr_align(D) < 16))
        why = "FP8: every matrix must be 16-byte aligned";
    if (why) {
        fprintf(stderr, "fake cuBLASLt: cublasLtMatmul: %s\n", why);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (C == D && c->half != d->half)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: FP8 in place (D = C): C and D differ in type");
    for (int q = 0; q < 3; q++)
        if (x->scale[q] && !is_dev_range(x->scale[q], sizeof(float)))
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: a scale pointer is not device memory");
    if (x->amax_d && !is_dev_range(x->amax_d, sizeof(float)))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: AMAX_D_POINTER is not device memory");
    return CUBLAS_STATUS_SUCCESS;
}

/* The fake's one algorithm, as the real library would describe it: ID 0, tile and
 * stages undefined, K whole (1 split, no reduction), no swizzling or custom option; the
 * 16-bit attributes (inner shape, cluster) 0 too. Checked as cublasLt.h documents it. */
cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t *algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr,
                                                    void *buf, size_t size, size_t *written)
{
    if (!algo || algo->data[0] != ALGO_TAG)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulAlgoConfigGetAttribute: not an algorithm of the heuristic's");
    size_t need = attr == CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID || attr == CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID ? 2 : 4;
    if ((int)attr < 0 || attr > CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulAlgoConfigGetAttribute: no such attribute");
    if (size == 0) {
        if (!written)
            return CUBLAS_STATUS_INVALID_VALUE;
        *written = need;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (!buf || size != need)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulAlgoConfigGetAttribute: a buffer not of the attribute's size");
    uint32_t v = attr == CUBLASLT_ALGO_CONFIG_SPLITK_NUM ? 1 : 0;
    memcpy(buf, &v, need);   /* (little-endian: a 16-bit one's value is the low bytes) */
    if (written)
        *written = need;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Ad, const void *B,
                              cublasLtMatrixLayout_t Bd, const void *beta, const void *C,
                              cublasLtMatrixLayout_t Cd, void *D, cublasLtMatrixLayout_t Dd,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes,
                              cudaStream_t stream)
{
    uint64_t m, n, k;
    const Layout *a = (Layout *)Ad, *b = (Layout *)Bd, *c = (Layout *)Cd, *d = (Layout *)Dd;
    if (h != &the_handle || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (shape((Desc *)desc, a, b, c, d, &m, &n, &k) != 0)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: the layouts do not make a GEMM");
    if (algo && (algo->data[0] != ALGO_TAG || algo->data[1] != (m | (n << 32)) || algo->data[2] != k))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: the algorithm was chosen for another problem");
    cublasStatus_t st = fp8_call_refusal((Desc *)desc, a, b, c, d, A, B, C, D, m, n, k);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    float fbeta = *(const float *)beta;
    if (C == D && c->ld != d->ld)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: in place (D = C) with two layouts");
    if (C != D && fbeta != 0.0f && fbeta != 1.0f)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul: out of place (D != C) with beta other than 0 or 1");
    if (C != D && fbeta != 0.0f &&
        ((uintptr_t)C < (uintptr_t)D + span(d) && (uintptr_t)D < (uintptr_t)C + span(c)))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: C and D overlap without being one matrix");
    if (!is_dev_range(A, span(a)) || !is_dev_range(B, span(b)) || !is_dev_range(D, span(d)) ||
        (fbeta != 0.0f && !is_dev_range(C, span(c))))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: a matrix is not (all) in device memory");
    if (algo) {
        const void *ptr[4] = {A, B, C, D};
        /* a strided batch's later matrices too: the step between them */
        const Layout *lay[4] = {a, b, c, d};
        for (int q = 0; q < 4; q++)
            if (lay[q]->batch > 1 &&
                (size_t)lay[q]->stride * esize(lay[q]) % algo->data[4 + q]) {
                fprintf(stderr, "fake cuBLASLt: cublasLtMatmul: matrix %c's batch stride of %lld "
                        "elements breaks the %llu-byte alignment the preference promised\n", "ABCD"[q],
                        (long long)lay[q]->stride, (unsigned long long)algo->data[4 + q]);
                return CUBLAS_STATUS_NOT_SUPPORTED;
            }
        for (int q = 0; q < 4; q++)
            if ((uintptr_t)ptr[q] % algo->data[4 + q]) {
                fprintf(stderr, "fake cuBLASLt: cublasLtMatmul: matrix %c at %p is not %llu-byte aligned, "
                        "as the preference promised the heuristic\n", "ABCD"[q], ptr[q],
                        (unsigned long long)algo->data[4 + q]);
                return CUBLAS_STATUS_NOT_SUPPORTED;
            }
    }
    if (ws_bytes && !is_dev_range(ws, ws_bytes))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: the workspace is not device memory");
    Job *j = malloc(sizeof *j);
    const Desc *x = (Desc *)desc;
    *j = (Job){x->op[0] == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
               x->op[1] == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
               (int)m, (int)n, (int)k, (int)a->ld, (int)b->ld, (int)d->ld,
               *(const float *)alpha, fbeta, A, B, D, a->half, d->half,
               elems(a), elems(b), elems(d), C != D ? C : NULL, (int)c->ld, elems(c),
               x->epi, x->bias, a->fp8 ? fp8_bias_type(c, d) : x->bias_type < 0 ? d->half : x->bias_type,
               x->aux, x->aux_ld, c->half, a->fp8, b->fp8, d->fp8, {x->scale[0], x->scale[1], x->scale[2]},
               x->amax_d};
    int has_bias = j->epi != CUBLASLT_EPILOGUE_DEFAULT && j->epi != CUBLASLT_EPILOGUE_DGELU;
    int has_aux = j->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || j->epi == CUBLASLT_EPILOGUE_DGELU;
    size_t bias_n = j->epi == CUBLASLT_EPILOGUE_BGRADB ? n : m;
    if (algo && ((has_bias && ptr_align(j->bias) < (algo->data[3] & 0xffff)) ||
                 (has_aux && ptr_align(j->aux) < (algo->data[3] >> 16)))) {
        fprintf(stderr, "fake cuBLASLt: cublasLtMatmul: the %s pointer %p is less aligned than the "
                "one the heuristic saw\n", has_bias && ptr_align(j->bias) < (algo->data[3] & 0xffff) ? "bias" : "aux",
                has_bias && ptr_align(j->bias) < (algo->data[3] & 0xffff) ? j->bias : j->aux);
        free(j);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if ((has_bias && (!j->bias || !is_dev_range(j->bias, bias_n * (j->bias_type ? 2 : 4)))) ||
        (has_aux && (!j->aux || j->aux_ld < (int64_t)m ||
                     !is_dev_range(j->aux, ((n - 1) * (size_t)j->aux_ld + m) * (d->half ? 2 : 4))))) {
        free(j);
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: the bias or aux pointer is not (all) in device memory");
    }
    if (d->batch > 1 && ((j->epi != CUBLASLT_EPILOGUE_DEFAULT && j->epi != CUBLASLT_EPILOGUE_BGRADB) ||
                         C != D)) {
        free(j);
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul: the fake batches in place, without an epilogue or with BGRADB, only");
    }
    /* a batch's BGRADB: each matrix's bias gradient bias_stride floats on, not overlapping
     * the last, all in device memory and as aligned as the heuristic was told */
    if (d->batch > 1 && j->epi == CUBLASLT_EPILOGUE_BGRADB &&
        (x->bias_stride < (int64_t)n ||
         !is_dev_range(j->bias, ((size_t)(d->batch - 1) * (size_t)x->bias_stride + n) * 4) ||
         (size_t)x->bias_stride * 4 % (algo ? (algo->data[3] & 0xffff) : 256))) {
        free(j);
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: a batch's bias gradients (BIAS_BATCH_STRIDE) overlap, leave device memory or break the promised alignment");
    }
    /* a strided batch: one job a matrix, each at its offsets, in order on the stream */
    for (int32_t q = 0; q < d->batch; q++) {
        Job *jq = j;
        if (q + 1 < d->batch) {
            jq = malloc(sizeof *jq);
            *jq = *j;
        }
        jq->A = (const char *)A + (size_t)q * (size_t)a->stride * esize(a);
        jq->B = (const char *)B + (size_t)q * (size_t)b->stride * esize(b);
        jq->C = (char *)D + (size_t)q * (size_t)d->stride * esize(d);
        if (j->epi == CUBLASLT_EPILOGUE_BGRADB)
            jq->bias = (const float *)j->bias + (size_t)q * (size_t)x->bias_stride;
        if (enqueue_host((void *)stream, run_job, jq) != 0) {
            free(jq);
            if (jq != j)
                free(j);
            return refuse(CUBLAS_STATUS_EXECUTION_FAILED, "cublasLtMatmul: the driver refused the stream");
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}
