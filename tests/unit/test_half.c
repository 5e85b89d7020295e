/* test_half.c: runtime/rt_half.h's conversions (the host twins of templates/cuda/
 * common.cuh's, the same bit operations) against an independent reference:
 *   - fp16: the x86 F16C instructions (vcvtps2ph with round-to-nearest-even, vcvtph2ps)
 *     on every 2^16 half and on every float whose bits are a multiple of 7 (613 million:
 *     every exponent, both signs, subnormals, the overflow edge at 65520, NaNs), and on
 *     the edges around each rounding boundary;
 *   - bf16: exact widening of all 2^16 values, and narrowing checked against its
 *     definition (the nearest bf16 in value, ties to an even last bit) on the same floats.
 * Without F16C (not x86) the fp16 half of the test is skipped and says so. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "../../runtime/rt_half.h"
#if defined(__x86_64__)
#include <immintrin.h>
#define HAVE_F16C 1
__attribute__((target("f16c"))) static uint16_t ref_f16(float f)
{
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
__attribute__((target("f16c"))) static float ref_f16_to_float(uint16_t h) { return _cvtsh_ss(h); }
#endif

static int fails;
#define CHECK(c, ...)                                                                          \
    do {                                                                                       \
        if (!(c) && fails++ < 10) {                                                            \
            printf("FAIL: ");                                                                  \
            printf(__VA_ARGS__);                                                               \
            printf("\n");                                                                      \
        }                                                                                      \
    } while (0)

static int same_f16(uint16_t a, uint16_t b)   /* NaNs: any NaN matches any NaN */
{
    int an = (a & 0x7c00) == 0x7c00 && (a & 0x3ff), bn = (b & 0x7c00) == 0x7c00 && (b & 0x3ff);
    return an || bn ? an && bn : a == b;
}

/* the nearest bf16 to f by value (ties: the even last bit), by brute force over the two
 * candidates around f: IEEE round to nearest even */
static uint16_t bf16_by_definition(float f)
{
    uint32_t u = rt_half_bits(f);
    if (isnan(f))
        return 0x7fc0;
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);   /* same sign: |lo| <= |f| */
    if ((u & 0xffff) == 0)
        return lo;
    /* past the largest finite bf16, infinity stands at 2^128 (IEEE rounding overflows
     * there: from max + half a unit, ties to even, which is infinity) */
    double vh = (hi & 0x7f80) == 0x7f80 ? ((hi & 0x8000) ? -0x1p128 : 0x1p128) : rt_bf16_to_float(hi);
    double dl = fabs((double)f - rt_bf16_to_float(lo)), dh = fabs((double)f - vh);
    if (dl != dh)
        return dl < dh ? lo : hi;
    return (lo & 1) ? hi : lo;
}

int main(void)
{
    long n16 = 0, n32 = 0;
    for (uint32_t h = 0; h < 65536; h++) {   /* widening: exact, and back again */
        float fb = rt_bf16_to_float((uint16_t)h);
        CHECK(rt_half_bits(fb) == h << 16, "bf16 %#x widened to %#x", h, rt_half_bits(fb));
        CHECK(isnan(fb) || rt_float_to_bf16(fb) == h, "bf16 %#x round trip", h);
#if HAVE_F16C
        float fh = rt_f16_to_float((uint16_t)h), rh = ref_f16_to_float((uint16_t)h);
        CHECK(isnan(fh) ? isnan(rh) : rt_half_bits(fh) == rt_half_bits(rh),
              "fp16 %#x widened to %g, F16C %g", h, fh, rh);
        CHECK(same_f16(rt_float_to_f16(fh), (uint16_t)h), "fp16 %#x round trip", h);
        n16++;
#endif
    }
    for (uint64_t b = 0; b < (1ull << 32); b += 7) {
        float f = rt_half_float((uint32_t)b);
        uint16_t got = rt_float_to_bf16(f), want = bf16_by_definition(f);
        CHECK(isnan(f) ? (got & 0x7f80) == 0x7f80 && (got & 0x7f) : got == want,
              "bf16 of %a (%#x): %#x, by definition %#x", f, (unsigned)b, got, want);
#if HAVE_F16C
        uint16_t g16 = rt_float_to_f16(f), r16 = ref_f16(f);
        CHECK(same_f16(g16, r16), "fp16 of %a (%#x): %#x, F16C %#x", f, (unsigned)b, g16, r16);
#endif
        n32++;
    }
#if HAVE_F16C
    /* each rounding boundary exactly: the float halfway between two neighbouring halves,
     * and its two float neighbours */
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double mid = ((double)rt_f16_to_float((uint16_t)h) + rt_f16_to_float((uint16_t)(h + 1))) / 2;
        float m = (float)mid;
        float probes[3] = {nextafterf(m, 0.0f), m, nextafterf(m, INFINITY)};
        for (int k = 0; k < 3; k++)
            for (int s = 0; s < 2; s++) {
                float f = s ? -probes[k] : probes[k];
                CHECK(same_f16(rt_float_to_f16(f), ref_f16(f)), "fp16 of %a: %#x, F16C %#x", f,
                      rt_float_to_f16(f), ref_f16(f));
            }
    }
    printf("ok   fp16: %ld halves widened and round-tripped, %ld floats narrowed, every rounding "
           "boundary: as F16C\n", n16, n32);
#else
    printf("skip fp16: no F16C reference on this machine\n");
#endif
    printf("ok   bf16: 65536 values widened exactly, %ld floats narrowed to the nearest (ties even)\n",
           n32);
    return fails ? 1 : 0;
}
