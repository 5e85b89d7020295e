/* fp8_emu_check.cc: the emulator's cuda_fp8.h (tests/gpu/emu), which the emulated
 * kernels and the fake cuBLASLt take FP8 from, against what the formats define:
 *   - the value of known codes (zero, the smallest subnormal, the largest normal, 448,
 *     57344, E5M2's infinity, each NaN);
 *   - narrowing against an independent oracle: the nearest of the 256 decoded values,
 *     ties to the even code, past the largest finite value's half-way point saturated
 *     (SATFINITE) or NaN / infinity (NOSAT), at every midpoint between codes and one
 *     float ulp either side, at every code, and at random floats;
 *   - the structs: one byte, constructors from float, double and int, x2 and x4
 *     packing;
 *   - built with -DFP8_TOOLKIT (tests/fake_fp8.sh does where the CUDA toolkit's
 *     cuda_fp8.h compiles for the host): every conversion bit for bit against NVIDIA's
 *     header (fp8_toolkit.cc) over 2^20 float patterns (sign, exponent, 11 mantissa
 *     bits) times 6 low-bit endings, random doubles and double NaNs, and all 256
 *     widenings (a NaN's bits the device code's, 0x7FFFE000).
 * Prints "ok   ..." per part; exits 1 at the first part that fails. */
#include "emu.h"
#include <cuda_fp8.h>   /* the emulator's, already included by emu.h: a no-op */
#undef int64_t
#undef uint64_t
#include <cstdarg>
#include <random>
#include <vector>

#ifdef FP8_TOOLKIT
extern "C" unsigned char tk_float_to_fp8(float x, int satfinite, int e5m2);
extern "C" unsigned char tk_double_to_fp8(double x, int satfinite, int e5m2);
extern "C" float tk_fp8_to_float(unsigned char v, int e5m2);
extern "C" unsigned char tk_ctor(float x, int e5m2);
extern "C" unsigned tk_x4(float a, float b, float c, float d);
extern "C" unsigned tk_x2_e5m2(float a, float b);
#endif

static int failures;
static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    if (failures++ < 10) {
        va_list ap;
        va_start(ap, fmt);
        fputs("FAIL ", stdout);
        vprintf(fmt, ap);
        fputs("\n", stdout);
        va_end(ap);
    }
}
static void part(const char *what)
{
    if (failures) {
        printf("FAIL %s (%d mismatches)\n", what, failures);
        exit(1);
    }
    printf("ok   %s\n", what);
}
static unsigned bits(float f)
{
    unsigned u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static const __nv_fp8_interpretation_t FMT[2] = {__NV_E4M3, __NV_E5M2};
static const char *const NAME[2] = {"E4M3", "E5M2"};

static void known_values()
{
    struct {
        int e5m2;
        unsigned code;
        double value;   /* NAN: a NaN */
    } const t[] = {
        {0, 0x00, 0.0}, {0, 0x80, -0.0}, {0, 0x01, 0x1p-9}, {0, 0x07, 7 * 0x1p-9},
        {0, 0x08, 0x1p-6}, {0, 0x38, 1.0}, {0, 0x3C, 1.5}, {0, 0x7E, 448.0}, {0, 0xFE, -448.0},
        {0, 0x77, 240.0}, {0, 0x7F, NAN}, {0, 0xFF, NAN},
        {1, 0x00, 0.0}, {1, 0x80, -0.0}, {1, 0x01, 0x1p-16}, {1, 0x03, 3 * 0x1p-16},
        {1, 0x04, 0x1p-14}, {1, 0x3C, 1.0}, {1, 0x3E, 1.5}, {1, 0x7B, 57344.0}, {1, 0xFB, -57344.0},
        {1, 0x7C, INFINITY}, {1, 0xFC, -INFINITY}, {1, 0x7D, NAN}, {1, 0x7E, NAN}, {1, 0xFF, NAN},
    };
    for (const auto &k : t) {
        float v = emu_fp8_to_float((__nv_fp8_storage_t)k.code, FMT[k.e5m2]);
        bool ok = std::isnan(k.value) ? std::isnan(v) : (double)v == k.value && std::signbit(v) == std::signbit(k.value);
        if (!ok)
            fail("%s 0x%02X widens to %a, not %a", NAME[k.e5m2], k.code, (double)v, k.value);
    }
    /* every positive finite code above the last: the table is monotonic */
    for (int f = 0; f < 2; f++)
        for (unsigned c = 1; c <= (f ? 0x7Bu : 0x7Eu); c++)
            if (!(emu_fp8_to_float((__nv_fp8_storage_t)c, FMT[f]) > emu_fp8_to_float((__nv_fp8_storage_t)(c - 1), FMT[f])))
                fail("%s 0x%02X is not above 0x%02X", NAME[f], c, c - 1);
    part("fp8 known codes (0, subnormals, 448, 57344, inf, NaN) and a monotonic table");
}

/* The oracle: |x|'s nearest among codes 0..max and a virtual code max + 1 (480 in E4M3,
 * 2^16 in E5M2: where the next value would be), ties to the even code; max + 1 is an
 * overflow. Independent of cuda_fp8.h's arithmetic: a search over widened codes. */
static unsigned oracle(float x, bool satfinite, int f)
{
    const unsigned maxc = f ? 0x7Bu : 0x7Eu;
    const unsigned sign = std::signbit(x) ? 0x80u : 0u;
    if (std::isnan(x))
        return 0x7Fu;   /* the canonical NaN, positive, in both formats */
    double a = std::fabs((double)x);
    unsigned code;
    if (std::isinf(x)) {
        code = maxc + 1;
    } else {
        unsigned lo = 0, hi = maxc + 1;   /* value(lo) <= a < value(hi), or a >= value(max + 1) */
        auto val = [&](unsigned c) { return c > maxc ? (f ? 65536.0 : 480.0) : (double)emu_fp8_to_float((__nv_fp8_storage_t)c, FMT[f]); };
        if (a >= val(maxc + 1)) {
            code = maxc + 1;
        } else {
            while (hi - lo > 1) {
                unsigned mid = (lo + hi) / 2;
                (val(mid) <= a ? lo : hi) = mid;
            }
            double dl = a - val(lo), dh = val(hi) - a;
            code = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
        }
    }
    if (code > maxc)
        code = satfinite ? maxc : f ? 0x7Cu : 0x7Fu;
    return code | sign;
}

static void narrowing()
{
    std::vector<float> xs = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 448.0f, 464.0f, 480.0f, 57344.0f,
                             61440.0f, 65536.0f, 1e30f, -1e30f, 0x1p-10f, 0x1p-17f, 0x1p-149f, 3.4e38f};
    for (int f = 0; f < 2; f++)
        for (unsigned c = 0; c <= (f ? 0x7Bu : 0x7Eu); c++) {
            float v = emu_fp8_to_float((__nv_fp8_storage_t)c, FMT[f]);
            float next = c < (f ? 0x7Bu : 0x7Eu) ? emu_fp8_to_float((__nv_fp8_storage_t)(c + 1), FMT[f]) : (f ? 65536.0f : 480.0f);
            float mid = (v + next) / 2;   /* exact: a few bits */
            for (float y : {v, mid})
                for (float z : {y, nextafterf(y, -INFINITY), nextafterf(y, INFINITY)})
                    xs.push_back(z), xs.push_back(-z);
        }
    std::mt19937 rng(12345);
    for (int i = 0; i < 1000000; i++) {
        unsigned u = rng();
        float r;
        memcpy(&r, &u, sizeof r);
        xs.push_back(r);
        xs.push_back(ldexpf((float)(rng() % 2000001) / 1000000.0f - 1.0f, (int)(rng() % 40) - 22));
    }
    for (float x : xs)
        for (int f = 0; f < 2; f++)
            for (int s = 0; s < 2; s++) {
                unsigned got = __nv_cvt_float_to_fp8(x, s ? __NV_SATFINITE : __NV_NOSAT, FMT[f]);
                unsigned want = oracle(x, s, f);
                if (got != want)
                    fail("%s %s %a (0x%08X): 0x%02X, the nearest is 0x%02X", NAME[f], s ? "SATFINITE" : "NOSAT",
                         (double)x, bits(x), got, want);
            }
    printf("     %zu floats each way\n", xs.size());
    part("fp8 narrowing against the nearest-value oracle (ties to even, saturation, NaN, inf)");
}

static void structs()
{
    static_assert(sizeof(__nv_fp8_e4m3) == 1 && sizeof(__nv_fp8_e5m2) == 1 && sizeof(__nv_fp8x4_e4m3) == 4, "sizes");
    __nv_fp8_e4m3 a(300.0f), b(1e9f), c(-0.003f), d(3), e(0.1);
    __nv_fp8_e5m2 g(1e9f), h(-70000.0);
    if (a.__x != 0x79 || float(a) != 288.0f)   /* 300: between 288 and 320, nearer 288 */
        fail("__nv_fp8_e4m3(300.0f) is 0x%02X = %g, not 0x79 = 288", a.__x, (double)float(a));
    if (b.__x != 0x7E || c.__x != 0x82 || d.__x != 0x44 || float(d) != 3.0f)
        fail("__nv_fp8_e4m3: 1e9 0x%02X (0x7E), -0.003 0x%02X (0x82), 3 0x%02X (0x44)", b.__x, c.__x, d.__x);
    if (e.__x != __nv_cvt_double_to_fp8(0.1, __NV_SATFINITE, __NV_E4M3) || (double)e != (double)float(e))
        fail("__nv_fp8_e4m3(0.1): 0x%02X", e.__x);
    if (g.__x != 0x7B || h.__x != 0xFB || float(g) != 57344.0f)
        fail("__nv_fp8_e5m2: 1e9 0x%02X (0x7B), -70000 0x%02X (0xFB)", g.__x, h.__x);
    __nv_fp8x4_e4m3 q(float4{1.0f, -2.0f, 448.0f, 0.0f});
    float4 back = float4(q);
    if (q.__x != 0x007EC038u || back.x != 1.0f || back.y != -2.0f || back.z != 448.0f || back.w != 0.0f)
        fail("__nv_fp8x4_e4m3{1, -2, 448, 0}: 0x%08X (0x007EC038)", q.__x);
    if (__nv_cvt_float2_to_fp8x2(make_float2(1.0f, -2.0f), __NV_SATFINITE, __NV_E4M3) != 0xC038u)
        fail("__nv_cvt_float2_to_fp8x2{1, -2}: x in the low byte");
    __nv_fp8x2_e5m2 p(make_float2(-1e9f, 1.5f));
    float2 pb = float2(p);
    if (sizeof p != 2 || p.__x != 0x3EFBu || pb.x != -57344.0f || pb.y != 1.5f)
        fail("__nv_fp8x2_e5m2{-1e9, 1.5}: 0x%04X (0x3EFB)", p.__x);
    part("fp8 structs: one byte, constructors (float, double, int: SATFINITE), x2 and x4 packing");
}

#ifdef FP8_TOOLKIT
static void toolkit()
{
    static const unsigned ends[] = {0x000, 0x001, 0x7FF, 0x800, 0x801, 0xFFF};
    long n = 0;
    for (unsigned top = 0; top < (1u << 20); top++)
        for (unsigned e : ends) {
            unsigned u = top << 12 | e;
            float x;
            memcpy(&x, &u, sizeof x);
            for (int f = 0; f < 2; f++) {
                for (int s = 0; s < 2; s++) {
                    unsigned got = __nv_cvt_float_to_fp8(x, s ? __NV_SATFINITE : __NV_NOSAT, FMT[f]);
                    unsigned want = tk_float_to_fp8(x, s, f);
                    if (got != want)
                        fail("%s %s float 0x%08X: 0x%02X, the toolkit's 0x%02X", NAME[f], s ? "SATFINITE" : "NOSAT", u, got, want);
                    n++;
                }
                unsigned got = f ? __nv_fp8_e5m2(x).__x : __nv_fp8_e4m3(x).__x;
                if (got != tk_ctor(x, f))
                    fail("%s constructor from 0x%08X: 0x%02X, the toolkit's 0x%02X", NAME[f], u, got, tk_ctor(x, f));
            }
        }
    std::mt19937_64 rng(777);
    for (int i = 0; i < 1000000; i++) {
        unsigned long long u = rng();
        if (i % 2)   /* exponents where the formats live: 2^-30 .. 2^20 */
            u = (u & 0x800FFFFFFFFFFFFFull) | (unsigned long long)(1023 - 30 + (int)(rng() % 51)) << 52;
        if (i % 1000 == 0)   /* NaNs of both signs and any payload */
            u |= 0x7FF0000000000001ull;
        double x;
        memcpy(&x, &u, sizeof x);
        for (int f = 0; f < 2; f++)
            for (int s = 0; s < 2; s++) {
                unsigned got = __nv_cvt_double_to_fp8(x, s ? __NV_SATFINITE : __NV_NOSAT, FMT[f]);
                unsigned want = tk_double_to_fp8(x, s, f);
                if (got != want)
                    fail("%s %s double 0x%016llX: 0x%02X, the toolkit's 0x%02X", NAME[f], s ? "SATFINITE" : "NOSAT", u, got, want);
                n++;
            }
    }
    for (int f = 0; f < 2; f++)
        for (unsigned c = 0; c < 256; c++) {
            /* a NaN: the header's host code makes it 0x7FFFFFFF, its device code (cvt.f32.f16
             * of fp16's 0x7FFF) 0x7FFFE000, the emulator's */
            float tk = tk_fp8_to_float((unsigned char)c, f);
            unsigned got = bits(emu_fp8_to_float((__nv_fp8_storage_t)c, FMT[f])), want = bits(tk);
            if (std::isnan(tk) ? got != 0x7FFFE000u : got != want)
                fail("%s 0x%02X widens to 0x%08X, the toolkit's 0x%08X", NAME[f], c, got, want);
        }
    if (__nv_fp8x4_e4m3(float4{1.0f, -2.0f, 448.0f, 3e-3f}).__x != tk_x4(1.0f, -2.0f, 448.0f, 3e-3f) ||
        __nv_fp8x2_e5m2(make_float2(-1e9f, 0.3f)).__x != tk_x2_e5m2(-1e9f, 0.3f))
        fail("__nv_fp8x4_e4m3's or __nv_fp8x2_e5m2's packing differs from the toolkit's");
    printf("     %ld narrowings, 512 widenings\n", n);
    part("fp8 bit for bit against the CUDA toolkit's cuda_fp8.h");
}
#endif

int main()
{
    known_values();
    narrowing();
    structs();
#ifdef FP8_TOOLKIT
    toolkit();
#else
    printf("skip fp8 against the CUDA toolkit's cuda_fp8.h (built without it)\n");
#endif
    return 0;
}
