/* fp8_lt_check.c: the fake GPU's FP8 through its own libraries (tests/fake_fp8.sh runs
 * it with LD_LIBRARY_PATH at tests/fake_gpu's build):
 *   --cc                 prints the compute capability the fake device reports
 *                        (TRAINC_FAKE_CC), exit 1 when cuInit refuses;
 *   --compile ARCH KERNEL.cu OUT   the fake NVRTC's image of KERNEL.cu for ARCH, into OUT;
 *   --load OUT           loads it: exit 0, or 3 when the driver says
 *                        CUDA_ERROR_NO_BINARY_FOR_GPU (an architecture the device does
 *                        not run);
 *   KERNEL.cu            fp8_kernel.cu compiled by the fake NVRTC for sm_89 (its
 *                        #include <cuda_fp8.h> the emulator's), run by the fake driver (of
 *                        8.9: TRAINC_FAKE_CC) on special and random floats: its codes are
 *                        __nv_cvt_float_to_fp8's;
 *                        then the fake cuBLASLt's FP8 GEMMs (TN, E4M3 x E4M3 and E4M3 x
 *                        E5M2, A and B scales, alpha, out-of-place C with beta 1, the bias
 *                        epilogue) against a double reference: D in fp32, bf16 and fp16,
 *                        and an FP8 D with its scale and amax; and the refusals: NN and
 *                        TT, E5M2 x E5M2, m, n, k and ld not multiples of 16, a matrix 8
 *                        bytes off, an epilogue other than BIAS, an fp32 bias, amax or D's
 *                        scale beside a bf16 D, an E5M2 D from E4M3 inputs, scale pointers
 *                        on a bf16 GEMM.
 *   --probe DIV          the runtime's FP8 GEMMs (GPT-2 124M's QKV layer at 16 x 1024,
 *                        every dimension / DIV) and variants of their settings, a line
 *                        each: whether the heuristic and the call take it, D checked;
 *                        on a real GPU it says what its cuBLASLt takes (exit 1 only
 *                        where a GEMM it ran gave a wrong D).
 * Prints "ok   ..." per part; exits 1 at the first that fails. */
#include <cublasLt.h>
#include <cuda.h>
#include <dlfcn.h>
#include <math.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../gpu/emu/cuda_fp8.h"
#include "rt_half.h"

#define DRV(X)                                                                                 \
    X(cuInit) X(cuDeviceGet) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) \
    X(cuMemAlloc) X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuStreamSynchronize) X(cuModuleLoadData)  \
    X(cuModuleGetFunction) X(cuLaunchKernel)
#define DECL(f) static __typeof__(&f) p_##f;
DRV(DECL)

static void die(const char *what, long code)
{
    printf("FAIL %s (%ld)\n", what, code);
    exit(1);
}
#define CU(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) die(#call, (long)r_); } while (0)
#define LT(call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) die(#call, (long)s_); } while (0)

static void load_driver(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h)
        die("dlopen libcuda.so.1", 0);
    CUresult (*gp)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
        (CUresult (*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))dlsym(h, "cuGetProcAddress_v2");
    if (!gp)
        die("cuGetProcAddress_v2", 0);
#define GET(f) if (gp(#f, (void **)&p_##f, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, NULL) != CUDA_SUCCESS) die(#f, 0);
    DRV(GET)
}

static CUdeviceptr dev(size_t n)
{
    CUdeviceptr p;
    CU(p_cuMemAlloc(&p, n));
    return p;
}

/* ---- the kernel: fake NVRTC, emulator, driver ---------------------------------------- */

/* KERNEL.cu compiled for arch by the (fake) NVRTC: the image, its size in *size */
static char *compile(const char *path, const char *arch, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die(path, 0);
    static char src[1 << 16];
    src[fread(src, 1, sizeof src - 1, f)] = 0;
    fclose(f);
    nvrtcProgram prog;
    if (nvrtcCreateProgram(&prog, src, "fp8_kernel.cu", 0, NULL, NULL) != NVRTC_SUCCESS)
        die("nvrtcCreateProgram", 0);
    char opt[64];
    snprintf(opt, sizeof opt, "--gpu-architecture=%s", arch);
    const char *opts[] = {opt, "--std=c++17", "-default-device"};
    nvrtcResult r = nvrtcCompileProgram(prog, 3, opts);
    if (r != NVRTC_SUCCESS) {
        size_t n = 0;
        nvrtcGetProgramLogSize(prog, &n);
        char *log = calloc(n + 1, 1);
        nvrtcGetProgramLog(prog, log);
        printf("%s\n", log);
        die("nvrtcCompileProgram(fp8_kernel.cu)", r);
    }
    nvrtcGetCUBINSize(prog, size);
    char *cubin = malloc(*size);
    nvrtcGetCUBIN(prog, cubin);
    nvrtcDestroyProgram(&prog);
    return cubin;
}

static void kernel_part(const char *path)
{
    size_t n = 0;
    char *cubin = compile(path, "sm_89", &n);
    CUmodule mod;
    CUfunction fn;
    CU(p_cuModuleLoadData(&mod, cubin));
    CU(p_cuModuleGetFunction(&fn, mod, "fp8_convert"));
    enum { N = 4096 };
    static float x[N], back[N];
    static unsigned char out[4][N];
    const float special[] = {0.0f, -0.0f, 448.0f, 464.0f, 464.5f, 57344.0f, 61440.0f, 1e9f, -1e9f,
                             INFINITY, -INFINITY, NAN, 0x1p-9f, 0x1p-10f, 0x1p-16f, 0x1p-17f, 3.0f, 0.1f};
    unsigned seed = 1;
    for (int i = 0; i < N; i++) {
        seed = seed * 1103515245u + 12345u;
        x[i] = i < (int)(sizeof special / sizeof *special) ? special[i]
                                                           : ldexpf((float)(seed >> 8) / 16777216.0f - 0.5f, (int)(seed % 40) - 20);
    }
    CUdeviceptr dx = dev(sizeof x), dback = dev(sizeof back), dout[4];
    for (int q = 0; q < 4; q++)
        dout[q] = dev(N);
    CU(p_cuMemcpyHtoD(dx, x, sizeof x));
    int nn = N;
    void *args[] = {&dx, &dout[0], &dout[1], &dout[2], &dout[3], &dback, &nn};
    CU(p_cuLaunchKernel(fn, N / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
    CU(p_cuStreamSynchronize(NULL));
    for (int q = 0; q < 4; q++)
        CU(p_cuMemcpyDtoH(out[q], dout[q], N));
    CU(p_cuMemcpyDtoH(back, dback, sizeof back));
    for (int i = 0; i < N; i++) {
        unsigned char want[4] = {__nv_cvt_float_to_fp8(x[i], __NV_SATFINITE, __NV_E4M3),
                                 __nv_cvt_float_to_fp8(x[i], __NV_SATFINITE, __NV_E5M2),
                                 __nv_cvt_float_to_fp8(x[i], __NV_NOSAT, __NV_E4M3),
                                 __nv_cvt_float_to_fp8(x[i], __NV_NOSAT, __NV_E5M2)};
        float wb = emu_fp8_to_float(want[0], __NV_E4M3);
        for (int q = 0; q < 4; q++)
            if (out[q][i] != want[q])
                die("the kernel's fp8 code differs from __nv_cvt_float_to_fp8's", i);
        if (memcmp(&wb, &back[i], sizeof wb) != 0)
            die("the kernel's widened E4M3 differs", i);
    }
    if (out[0][2] != 0x7E || out[0][9] != 0x7E || out[2][9] != 0x7F || out[1][9] != 0x7B || out[3][9] != 0x7C)
        die("448, inf: E4M3 0x7E (SATFINITE) / 0x7F (NOSAT), E5M2 0x7B / 0x7C", 0);
    printf("ok   a kernel including <cuda_fp8.h>: fake NVRTC sm_89, emulated, %d conversions as the host's\n", N);
}

/* ---- GEMMs ---------------------------------------------------------------------------- */

typedef struct Gemm {
    cudaDataType_t ta, tb, tc, td, bias_type;   /* bias_type: with bias */
    int m, n, k, lda, ldb, ldc, ldd;
    cublasOperation_t opa, opb;
    cublasLtEpilogue_t epi;                       /* 0: DEFAULT unless bias_type */
    int scales, dscale, amax, off;                /* scale pointers set; D_SCALE; AMAX_D; A this many bytes off */
    float alpha, beta;
    int bias;                                     /* a bias of bias_type (BIAS unless epi) */
    int slow;                                     /* with scales: FAST_ACCUM left unset */
    int packed;                                   /* the scales 4 bytes apart (else 64) */
    int ws, align;                                /* a 32 MiB workspace; the preferences' minimum
                                                     alignments set (256, as the runtime's
                                                     pointers have) */
} Gemm;

static cublasLtHandle_t lt;
static size_t tsize(cudaDataType_t t)
{
    return t == CUDA_R_32F ? 4 : t == CUDA_R_16BF || t == CUDA_R_16F ? 2 : 1;
}
static double decode(const void *p, size_t i, cudaDataType_t t)
{
    switch (t) {
    case CUDA_R_32F: return ((const float *)p)[i];
    case CUDA_R_16BF: return rt_bf16_to_float(((const uint16_t *)p)[i]);
    case CUDA_R_16F: return rt_f16_to_float(((const uint16_t *)p)[i]);
    case CUDA_R_8F_E4M3: return emu_fp8_to_float(((const unsigned char *)p)[i], __NV_E4M3);
    default: return emu_fp8_to_float(((const unsigned char *)p)[i], __NV_E5M2);
    }
}
/* a random value of type t, of moderate size, stored at p[i] */
static void fill(void *p, size_t i, cudaDataType_t t, unsigned *seed)
{
    *seed = *seed * 1103515245u + 12345u;
    float v = ((float)(*seed >> 8) / 16777216.0f - 0.5f) * 8.0f;
    switch (t) {
    case CUDA_R_32F: ((float *)p)[i] = v; break;
    case CUDA_R_16BF: ((uint16_t *)p)[i] = rt_float_to_bf16(v); break;
    case CUDA_R_16F: ((uint16_t *)p)[i] = rt_float_to_f16(v); break;
    default: ((unsigned char *)p)[i] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, t == CUDA_R_8F_E4M3 ? __NV_E4M3 : __NV_E5M2);
    }
}

/* The floats of the scales' block (256 bytes) holding A's, B's and D's scale and amax:
 * 64 bytes apart (as the runtime's, from 2026-12-04), or 4 with packed */
static int sc_at(const Gemm *g, int which) { return g->packed ? which : 16 * which; }

/* The descriptor's attributes beyond the operations: scales (pointers into the block at
 * dsc), the epilogue and its bias */
static void desc_attrs(cublasLtMatmulDesc_t desc, const Gemm *g, CUdeviceptr dsc, CUdeviceptr dbias)
{
    void *pa = (void *)(uintptr_t)(dsc + 4 * (CUdeviceptr)sc_at(g, 0)),
         *pb = (void *)(uintptr_t)(dsc + 4 * (CUdeviceptr)sc_at(g, 1)),
         *pd = (void *)(uintptr_t)(dsc + 4 * (CUdeviceptr)sc_at(g, 2)),
         *pamax = (void *)(uintptr_t)(dsc + 4 * (CUdeviceptr)sc_at(g, 3)), *pbias = (void *)(uintptr_t)dbias;
    if (g->scales) {
        LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &pa, sizeof pa));
        LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &pb, sizeof pb));
        int8_t fast = 1;
        if (!g->slow)
            LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
    }
    if (g->dscale)
        LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &pd, sizeof pd));
    if (g->amax)
        LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &pamax, sizeof pamax));
    cublasLtEpilogue_t epi = g->epi ? g->epi : g->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (g->bias) {
        LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &pbias, sizeof pbias));
        LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &g->bias_type, sizeof g->bias_type));
    }
}

/* The preference: with ws, a workspace of that many bytes; with align, every operand's
 * minimum alignment 256 bytes, as the runtime says of its pointers */
static cublasLtMatmulPreference_t preference(const Gemm *g)
{
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = g->ws ? 32u << 20 : 0;
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    static const cublasLtMatmulPreferenceAttributes_t al[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    uint32_t v = 256;
    for (int q = 0; g->align && q < 4; q++)
        LT(cublasLtMatmulPreferenceSetAttribute(pref, al[q], &v, sizeof v));
    return pref;
}

/* D (n columns of m, ldd apart) against the double reference, at every entry or, past
 * 4096 of them, at 4096 spread by a hash: 1 when right, 0 (said) when not */
static int check_d(const Gemm *g, const void *A, const void *B, const void *C, const void *bias,
                   const void *D, const float *sc, const char *what)
{
    double s = (double)g->alpha * (g->scales ? (double)0.37f * (double)1.9f : 1.0), amax = 0;
    int fp8d = g->td == CUDA_R_8F_E4M3 || g->td == CUDA_R_8F_E5M2;
    size_t all = (size_t)g->m * (size_t)g->n, count = all > 4096 ? 4096 : all;
    for (size_t e = 0; e < count; e++) {
        size_t at = count == all ? e : (e * 2654435761u + 12345u) % all;
        int r = (int)(at % (size_t)g->m), c = (int)(at / (size_t)g->m);
        double sum = 0, mag = 0;   /* op(A) row r . op(B) column c, exact in double */
        for (int q = 0; q < g->k; q++) {
            size_t ia = g->opa == CUBLAS_OP_T ? (size_t)r * (size_t)g->lda + (size_t)q
                                              : (size_t)q * (size_t)g->lda + (size_t)r;
            size_t ib = g->opb == CUBLAS_OP_N ? (size_t)c * (size_t)g->ldb + (size_t)q
                                              : (size_t)q * (size_t)g->ldb + (size_t)c;
            double p = decode(A, ia, g->ta) * decode(B, ib, g->tb);
            sum += p;
            mag += fabs(p);
        }
        double v = s * sum + g->beta * decode(C, (size_t)c * (size_t)g->ldc + (size_t)r, g->tc) +
                   (g->bias ? decode(bias, (size_t)r, g->bias_type) : 0.0);
        double tol = 1e-5 * (fabs(s) * mag + 1.0);   /* fp32 sums */
        amax = fmax(amax, fabs(v));
        double out = decode(D, (size_t)c * (size_t)g->ldd + (size_t)r, g->td);
        int bad;
        if (fp8d) {   /* D's code: within one of the reference's, times D's scale */
            __nv_fp8_interpretation_t f = g->td == CUDA_R_8F_E4M3 ? __NV_E4M3 : __NV_E5M2;
            double sd = g->dscale ? 0.75 : 1.0;
            int want = __nv_cvt_double_to_fp8(v * sd, __NV_SATFINITE, f);
            int have = ((const unsigned char *)D)[(size_t)c * (size_t)g->ldd + (size_t)r];
            int wi = want & 0x80 ? -(want & 0x7F) : want, hi = have & 0x80 ? -(have & 0x7F) : have;
            bad = abs(wi - hi) > 1 ||
                  (abs(wi - hi) == 1 && fabs(v * sd - out) > fabs(v * sd - decode(&want, 0, g->td)) + tol);
        } else {
            double rel = g->td == CUDA_R_32F ? 0 : g->td == CUDA_R_16BF ? 0x1p-8 : 0x1p-11;
            bad = fabs(out - v) > tol + rel * fabs(v);
        }
        if (bad) {
            printf("FAIL %s: D[%d, %d] is %g, the reference %g\n", what, r, c, out, v);
            return 0;
        }
    }
    float got = sc[sc_at(g, 3)];
    if (g->amax && count == all && fabs(got - amax) > 1e-5 * amax) {
        printf("FAIL %s: amax of D %g, the reference %g\n", what, (double)got, amax);
        return 0;
    }
    return 1;
}

/* Sets up g: the heuristic's status (into *heur when not NULL), and when it found an
 * algorithm, the call's; with check, D against the double reference (wrong: exit 1, or
 * with check 2 status -1, said) */
static cublasStatus_t gemm_st(const Gemm *g, int check, const char *what, cublasStatus_t *heur)
{
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc, ld;
    LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &g->opa, sizeof g->opa));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &g->opb, sizeof g->opb));
    int ar = g->opa == CUBLAS_OP_T ? g->k : g->m, ac = g->opa == CUBLAS_OP_T ? g->m : g->k;
    int br = g->opb == CUBLAS_OP_N ? g->k : g->n, bc = g->opb == CUBLAS_OP_N ? g->n : g->k;
    LT(cublasLtMatrixLayoutCreate(&la, g->ta, (uint64_t)ar, (uint64_t)ac, g->lda));
    LT(cublasLtMatrixLayoutCreate(&lb, g->tb, (uint64_t)br, (uint64_t)bc, g->ldb));
    LT(cublasLtMatrixLayoutCreate(&lc, g->tc, (uint64_t)g->m, (uint64_t)g->n, g->ldc));
    LT(cublasLtMatrixLayoutCreate(&ld, g->td, (uint64_t)g->m, (uint64_t)g->n, g->ldd));
    size_t na = (size_t)g->lda * (size_t)ac, nb = (size_t)g->ldb * (size_t)bc;
    size_t nc = (size_t)g->ldc * (size_t)g->n, nd = (size_t)g->ldd * (size_t)g->n;
    void *A = calloc(na, tsize(g->ta)), *B = calloc(nb, tsize(g->tb)), *C = calloc(nc, tsize(g->tc));
    void *bias = calloc((size_t)g->m, 4), *D = calloc(nd, tsize(g->td));
    unsigned seed = 7;
    for (size_t i = 0; i < na; i++)
        fill(A, i, g->ta, &seed);
    for (size_t i = 0; i < nb; i++)
        fill(B, i, g->tb, &seed);
    for (size_t i = 0; i < nc; i++)
        fill(C, i, g->tc, &seed);
    for (int i = 0; i < g->m && g->bias; i++)
        fill(bias, (size_t)i, g->bias_type, &seed);
    float sc[64] = {0};   /* A, B, D's scales 0.37, 1.9, 0.75; amax (written) */
    sc[sc_at(g, 0)] = 0.37f, sc[sc_at(g, 1)] = 1.9f, sc[sc_at(g, 2)] = 0.75f, sc[sc_at(g, 3)] = -1.0f;
    CUdeviceptr dA = dev(na * tsize(g->ta) + 16), dB = dev(nb * tsize(g->tb)), dC = dev(nc * tsize(g->tc));
    CUdeviceptr dD = dev(nd * tsize(g->td)), dbias = dev((size_t)g->m * 4), dsc = dev(sizeof sc);
    CUdeviceptr dws = g->ws ? dev(32u << 20) : 0;
    dA += (CUdeviceptr)g->off;
    CU(p_cuMemcpyHtoD(dA, A, na * tsize(g->ta)));
    CU(p_cuMemcpyHtoD(dB, B, nb * tsize(g->tb)));
    CU(p_cuMemcpyHtoD(dC, C, nc * tsize(g->tc)));
    CU(p_cuMemcpyHtoD(dbias, bias, (size_t)g->m * 4));
    CU(p_cuMemcpyHtoD(dsc, sc, sizeof sc));
    desc_attrs(desc, g, dsc, dbias);
    cublasLtMatmulPreference_t pref = preference(g);
    cublasLtMatmulHeuristicResult_t res;
    int got = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, ld, pref, 1, &res, &got);
    if (st == CUBLAS_STATUS_SUCCESS && (got < 1 || res.state != CUBLAS_STATUS_SUCCESS))
        st = CUBLAS_STATUS_NOT_SUPPORTED;
    if (heur)
        *heur = st;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmul(lt, desc, &g->alpha, (void *)(uintptr_t)dA, la, (void *)(uintptr_t)dB, lb, &g->beta,
                            (void *)(uintptr_t)dC, lc, (void *)(uintptr_t)dD, ld, &res.algo,
                            (void *)(uintptr_t)dws, g->ws ? 32u << 20 : 0, NULL);
    if (st == CUBLAS_STATUS_SUCCESS && check) {
        CU(p_cuStreamSynchronize(NULL));
        CU(p_cuMemcpyDtoH(D, dD, nd * tsize(g->td)));
        CU(p_cuMemcpyDtoH(sc, dsc, sizeof sc));
        if (!check_d(g, A, B, C, bias, D, sc, what)) {
            if (check == 1)
                exit(1);
            st = (cublasStatus_t)-1;
        } else if (check == 1)
            printf("ok   %s\n", what);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatmulDescDestroy(desc);
    free(A), free(B), free(C), free(D), free(bias);
    return st;
}

static cublasStatus_t gemm(const Gemm *g, int check, const char *what)
{
    return gemm_st(g, check, what, NULL);
}

static void refused(Gemm g, const char *what)
{
    cublasStatus_t st = gemm(&g, 0, what);
    if (st != CUBLAS_STATUS_NOT_SUPPORTED)
        die(what, (long)st);
    printf("ok   refused: %s\n", what);
}

/* ---- --probe: what the cuBLASLt at hand takes ----------------------------------------- */

static const char *st_name(cublasStatus_t st)
{
    return (int)st == -1 ? "WRONG RESULT" : st == CUBLAS_STATUS_SUCCESS ? "ok"
           : st == CUBLAS_STATUS_NOT_SUPPORTED ? "NOT_SUPPORTED" : st == CUBLAS_STATUS_INVALID_VALUE ? "INVALID_VALUE"
           : st == CUBLAS_STATUS_ARCH_MISMATCH ? "ARCH_MISMATCH" : "another status";
}

/* x / div, at least 16 and a multiple of 16 */
static int shrink(int x, int div)
{
    int v = x / div / 16 * 16;
    return v < 16 ? 16 : v;
}

/* The runtime's FP8 GEMMs of GPT-2 124M's QKV layer at B 16 x T 1024 (cuda_blas.c, in
 * cuBLASLt's column-major terms: its A our B, its m our N), each dimension divided by
 * div, and variants of each setting: one line a case, "probe NAME: heuristic S, call S"
 * (S ok or the status), D checked against the double reference at 4096 entries. Real
 * GPUs say here which FP8 settings their cuBLASLt takes (tests/gpu/measure.sh's fp8
 * part, with CUBLASLT_LOG_LEVEL's log beside it); the fake's refusals are its rules'. */
static int probe(int div)
{
    int version = (int)cublasLtGetVersion(), rt = (int)cublasLtGetCudartVersion(), major = 0, minor = 0;
    CU(p_cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
    CU(p_cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0));
    printf("probe cuBLASLt %d (CUDA runtime %d), compute capability %d.%d, dimensions / %d\n", version, rt,
           major, minor, div);
    int T = shrink(16384, div), C = shrink(768, div), Q = shrink(2304, div);
    /* the forward y = x W^T: m Q, n T, k C; E4M3 both; bf16 out; the runtime's settings */
    const Gemm fwd = {.ta = CUDA_R_8F_E4M3, .tb = CUDA_R_8F_E4M3, .tc = CUDA_R_16BF, .td = CUDA_R_16BF,
                      .m = Q, .n = T, .k = C, .lda = C, .ldb = C, .ldc = Q, .ldd = Q,
                      .opa = CUBLAS_OP_T, .opb = CUBLAS_OP_N, .scales = 1, .alpha = 1.0f,
                      .slow = 1, .ws = 1, .align = 1};
    /* dx = dy W: m C, n T, k Q; W^T's copy E4M3, dy E5M2 */
    const Gemm dx = {.ta = CUDA_R_8F_E4M3, .tb = CUDA_R_8F_E5M2, .tc = CUDA_R_16BF, .td = CUDA_R_16BF,
                     .m = C, .n = T, .k = Q, .lda = Q, .ldb = Q, .ldc = C, .ldd = C,
                     .opa = CUBLAS_OP_T, .opb = CUBLAS_OP_N, .scales = 1, .alpha = 1.0f,
                     .slow = 1, .ws = 1, .align = 1};
    /* dW += dy^T x: m C, n Q, k T; x^T's copy E4M3, dy^T's E5M2; fp32, beta 1 */
    const Gemm dw = {.ta = CUDA_R_8F_E4M3, .tb = CUDA_R_8F_E5M2, .tc = CUDA_R_32F, .td = CUDA_R_32F,
                     .m = C, .n = Q, .k = T, .lda = T, .ldb = T, .ldc = C, .ldd = C,
                     .opa = CUBLAS_OP_T, .opb = CUBLAS_OP_N, .scales = 1, .alpha = 1.0f, .beta = 1.0f,
                     .slow = 1, .ws = 1, .align = 1};
    struct { const char *name; Gemm g; } cases[20];
    int n = 0;
#define CASE(nm, base, ...) do { cases[n].name = nm; cases[n].g = base; { Gemm *g = &cases[n].g; (void)g; __VA_ARGS__; } n++; } while (0)
    CASE("fwd (the runtime's: scales, no FAST_ACCUM, workspace, alignments)", fwd, );
    CASE("fwd with FAST_ACCUM", fwd, g->slow = 0);
    CASE("fwd without the alignment preferences", fwd, g->align = 0);
    CASE("fwd without a workspace", fwd, g->ws = 0);
    CASE("fwd without scales", fwd, g->scales = 0);
    CASE("fwd with the scales 4 bytes apart (the runtime's before 2026-12-04)", fwd, g->packed = 1);
    CASE("fwd + BIAS, bf16 bias", fwd, g->bias = 1, g->bias_type = CUDA_R_16BF);
    CASE("fwd + BIAS, fp32 bias", fwd, g->bias = 1, g->bias_type = CUDA_R_32F);
    CASE("fwd + C (beta 1)", fwd, g->beta = 1.0f);
    CASE("fwd -> E4M3 D, D's scale, amax (CUDALibrarySamples' LtFp8Matmul)", fwd, g->td = CUDA_R_8F_E4M3,
         g->dscale = 1, g->amax = 1);
    CASE("fwd in bf16 (no FP8, no scales)", fwd, g->ta = g->tb = CUDA_R_16BF, g->scales = 0,
         g->lda = g->ldb = C);
    CASE("dx (E4M3 x E5M2 -> bf16)", dx, );
    CASE("dx with FAST_ACCUM", dx, g->slow = 0);
    CASE("dW (E4M3 x E5M2 -> fp32, beta 1)", dw, );
    CASE("dW with FAST_ACCUM", dw, g->slow = 0);
#undef CASE
    int wrong = 0;
    for (int i = 0; i < n; i++) {
        cublasStatus_t heur = CUBLAS_STATUS_SUCCESS;
        cublasStatus_t st = gemm_st(&cases[i].g, 2, cases[i].name, &heur);
        printf("probe %s [%d x %d x %d]: heuristic %s, call %s\n", cases[i].name, cases[i].g.m, cases[i].g.n,
               cases[i].g.k, st_name(heur), heur == CUBLAS_STATUS_SUCCESS ? st_name(st) : "not made");
        fflush(stdout);
        wrong += (int)st == -1;
    }
    return wrong ? 1 : 0;
}

int main(int argc, char **argv)
{
    load_driver();
    CUresult r = p_cuInit(0);
    if (argc == 5 && !strcmp(argv[1], "--compile")) {
        size_t n = 0;
        char *cubin = compile(argv[3], argv[2], &n);
        FILE *f = fopen(argv[4], "wb");
        if (!f || fwrite(cubin, 1, n, f) != n || fclose(f) != 0)
            die(argv[4], 0);
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "--load")) {
        static char img[1 << 24];
        FILE *f = fopen(argv[2], "rb");
        if (!f || fread(img, 1, sizeof img, f) == 0)
            die(argv[2], 0);
        fclose(f);
        CUcontext ctx;
        CUdevice dv;
        CUmodule mod;
        CU(p_cuDeviceGet(&dv, 0));
        CU(p_cuDevicePrimaryCtxRetain(&ctx, dv));
        CU(p_cuCtxSetCurrent(ctx));
        r = p_cuModuleLoadData(&mod, img);
        return r == CUDA_SUCCESS ? 0 : r == CUDA_ERROR_NO_BINARY_FOR_GPU ? 3 : 1;
    }
    if (argc > 1 && !strcmp(argv[1], "--cc")) {
        if (r != CUDA_SUCCESS)
            return 1;
        int major = 0, minor = 0;
        CU(p_cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
        CU(p_cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0));
        printf("%d.%d\n", major, minor);
        return 0;
    }
    if (r == CUDA_SUCCESS && argc == 3 && !strcmp(argv[1], "--probe")) {
        CUcontext ctx;
        CUdevice dv;
        CU(p_cuDeviceGet(&dv, 0));
        CU(p_cuDevicePrimaryCtxRetain(&ctx, dv));
        CU(p_cuCtxSetCurrent(ctx));
        LT(cublasLtCreate(&lt));
        return probe(atoi(argv[2]) > 0 ? atoi(argv[2]) : 1);
    }
    if (r != CUDA_SUCCESS || argc != 2)
        die("usage: fp8_lt_check --cc | --probe DIV | KERNEL.cu (and cuInit)", (long)r);
    CUcontext ctx;
    CUdevice d;
    CU(p_cuDeviceGet(&d, 0));
    CU(p_cuDevicePrimaryCtxRetain(&ctx, d));
    CU(p_cuCtxSetCurrent(ctx));
    kernel_part(argv[1]);
    LT(cublasLtCreate(&lt));
    const Gemm base = {CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, CUDA_R_16BF, 0, 32, 48, 64, 64, 64, 32, 32,
                       CUBLAS_OP_T, CUBLAS_OP_N, 0, 1, 0, 0, 0, 1.0f, 0.0f, 0, 0, 0, 0, 0};
    Gemm g = base;
    gemm(&g, 1, "E4M3 x E4M3 -> bf16, A and B scales");
    g = base, g.td = g.tc = CUDA_R_32F, g.alpha = 0.5f, g.bias = 1, g.bias_type = CUDA_R_16BF;
    gemm(&g, 1, "E4M3 x E4M3 -> fp32, alpha 0.5, bf16 bias");
    g = base, g.tb = CUDA_R_8F_E5M2, g.td = g.tc = CUDA_R_16F, g.bias = 1, g.bias_type = CUDA_R_16F, g.beta = 1.0f, g.ldd = 48;
    gemm(&g, 1, "E4M3 x E5M2 -> fp16, + C (beta 1, out of place, ld 48), fp16 bias");
    g = base, g.td = CUDA_R_8F_E4M3, g.dscale = 1, g.amax = 1, g.bias = 1, g.bias_type = CUDA_R_16BF;
    gemm(&g, 1, "E4M3 x E4M3 -> E4M3 D, D's scale, amax, bf16 bias");
    g = base, g.ta = CUDA_R_8F_E5M2, g.td = CUDA_R_8F_E5M2, g.amax = 1, g.scales = 0;
    gemm(&g, 1, "E5M2 x E4M3 -> E5M2 D, amax, no scales");
    g = base, g.opa = CUBLAS_OP_N, g.lda = 32;
    refused(g, "FP8 NN");
    g = base, g.opb = CUBLAS_OP_T, g.ldb = 48;
    refused(g, "FP8 TT");
    g = base, g.ta = g.tb = CUDA_R_8F_E5M2;
    refused(g, "E5M2 x E5M2");
    g = base, g.m = 24, g.ldc = g.ldd = 24;
    refused(g, "m 24, not a multiple of 16");
    g = base, g.k = 40, g.lda = g.ldb = 48;
    refused(g, "k 40, not a multiple of 16");
    g = base, g.lda = 72;
    refused(g, "A's ld 72 bytes");
    g = base, g.off = 8;
    refused(g, "A 8 bytes off 16-byte alignment");
    g = base, g.epi = CUBLASLT_EPILOGUE_GELU_BIAS, g.bias = 1, g.bias_type = CUDA_R_16BF;
    refused(g, "FP8 with GELU_BIAS");
    g = base, g.bias = 1, g.bias_type = CUDA_R_32F;
    refused(g, "FP8 with an fp32 bias");
    g = base, g.amax = 1;
    refused(g, "AMAX_D beside a bf16 D");
    g = base, g.dscale = 1;
    refused(g, "D_SCALE beside a bf16 D");
    g = base, g.td = CUDA_R_8F_E5M2;
    refused(g, "an E5M2 D from E4M3 x E4M3");
    g = base, g.ta = g.tb = CUDA_R_16BF, g.opa = CUBLAS_OP_N, g.lda = 32;
    refused(g, "scale pointers on a bf16 GEMM");
    g = base, g.ta = g.tb = CUDA_R_16BF, g.opa = CUBLAS_OP_N, g.lda = 32, g.scales = 0;
    gemm(&g, 1, "bf16 NN without scales still runs");
    return 0;
}
