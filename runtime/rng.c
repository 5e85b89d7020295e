/* rng.c: the runtime's seeded random numbers: xoshiro256** seeded by splitmix64, jumps
 * ahead by any number of draws (so threads can each start at their part of one
 * stream), and uniform, normal and bounded integer draws from it. Every draw is a
 * fixed function of the seed and the position: runs repeat bit for bit. */
#include <math.h>
#include <pthread.h>
#include <string.h>
#include "rt.h"

static uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* splitmix64 expands one 64-bit seed into the 256-bit state (the seeding its
 * authors recommend); it is a bijection of its counter, so the state is never all
 * zero. */
void rt_rng_seed(rt_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) {
        x += 0x9E3779B97F4A7C15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        r->s[i] = z ^ (z >> 31);
    }
}

/* xoshiro256** 1.0 (Blackman and Vigna). */
uint64_t rt_rng_u64(rt_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

/* ---- jumping ahead ----------------------------------------------------------- *
 * A step of xoshiro256 is a linear map T of the state over GF(2). With p(x) its
 * characteristic polynomial (degree 256), T^n = (x^n mod p)(T) by Cayley-Hamilton, so
 * the state n steps on is sum c_i T^i s, c the coefficients of x^n mod p: 256 steps
 * and XORs whatever n is (the published jump() is this with n = 2^128). That lets
 * threads start their part of one stream where it begins (rt_rng_jump), so a
 * parallel fill gives the sequential fill's bits. Polynomials of degree < 256 are
 * four words, bit i of word i / 64 the coefficient of x^i. */

typedef struct { uint64_t w[4]; } poly256;

/* p(x) without its x^256 term, found once by Berlekamp-Massey over a bit of the state:
 * the minimal polynomial of that sequence is T's (a full-period generator's
 * characteristic polynomial is primitive, so no bit sequence has a smaller one). */
static poly256 rng_charpoly;
static pthread_once_t rng_charpoly_once = PTHREAD_ONCE_INIT;

static void find_charpoly(void)
{
    enum { N = 512 };   /* 2 x the degree: enough terms to pin down the polynomial */
    unsigned char s[N], c[N + 1] = {1}, b[N + 1] = {1}, t[N + 1];
    rt_rng r;
    rt_rng_seed(&r, 1);
    for (int i = 0; i < N; i++) {
        s[i] = (unsigned char)(r.s[0] & 1);
        rt_rng_u64(&r);
    }
    /* Berlekamp-Massey over GF(2): c(x) = 1 + c_1 x + ... + c_L x^L is the shortest
     * connection polynomial: s[i] = sum_{j=1..L} c_j s[i - j] for i >= L */
    int L = 0, m = 1;
    for (int i = 0; i < N; i++) {
        int d = s[i];
        for (int j = 1; j <= L; j++)
            d ^= c[j] & s[i - j];
        if (!d) {
            m++;
            continue;
        }
        memcpy(t, c, sizeof t);
        for (int j = 0; j + m <= N; j++)
            c[j + m] ^= b[j];
        if (2 * L <= i) {
            L = i + 1 - L;
            memcpy(b, t, sizeof b);
            m = 1;
        } else
            m++;
    }
    if (L != 256)
        rt_die("xoshiro256's characteristic polynomial has degree %d, not 256", L);
    /* the characteristic polynomial is c's reciprocal: x^256 + sum_j c_j x^(256 - j) */
    for (int j = 1; j <= 256; j++)
        if (c[j])
            rng_charpoly.w[(256 - j) / 64] |= 1ull << ((256 - j) % 64);
}

/* a * x mod p */
static poly256 poly_mulx(poly256 a, const poly256 *p)
{
    uint64_t top = a.w[3] >> 63;
    for (int i = 3; i > 0; i--)
        a.w[i] = a.w[i] << 1 | a.w[i - 1] >> 63;
    a.w[0] <<= 1;
    if (top)
        for (int i = 0; i < 4; i++)
            a.w[i] ^= p->w[i];
    return a;
}

/* a * b mod p (Horner over b's coefficients, highest first) */
static poly256 poly_mulmod(poly256 a, poly256 b, const poly256 *p)
{
    poly256 r = {{0}};
    for (int i = 255; i >= 0; i--) {
        r = poly_mulx(r, p);
        if (b.w[i / 64] >> (i % 64) & 1)
            for (int k = 0; k < 4; k++)
                r.w[k] ^= a.w[k];
    }
    return r;
}

void rt_rng_jump(rt_rng *r, uint64_t n)
{
    pthread_once(&rng_charpoly_once, find_charpoly);
    const poly256 *p = &rng_charpoly;
    poly256 e = {{1}}, x = {{2}};   /* e = x^n mod p by squaring; x = x^(2^k) */
    for (; n; n >>= 1) {
        if (n & 1)
            e = poly_mulmod(e, x, p);
        x = poly_mulmod(x, x, p);
    }
    rt_rng_apply_poly(r, e.w);
}

void rt_rng_jump_pow2(rt_rng *r, int k)
{
    if (k < 0 || k > 255)
        rt_die("rt_rng_jump_pow2: k %d out of [0, 255]", k);
    pthread_once(&rng_charpoly_once, find_charpoly);
    poly256 x = {{2}};
    while (k--)
        x = poly_mulmod(x, x, &rng_charpoly);
    rt_rng_apply_poly(r, x.w);
}

void rt_rng_apply_poly(rt_rng *r, const uint64_t c[4])
{
    uint64_t acc[4] = {0};
    for (int i = 0; i < 256; i++) {
        if (c[i / 64] >> (i % 64) & 1)
            for (int k = 0; k < 4; k++)
                acc[k] ^= r->s[k];
        rt_rng_u64(r);
    }
    memcpy(r->s, acc, sizeof acc);
}

/* The top 53 bits: every double in [0, 1) on the 2^-53 grid, equally likely. */
double rt_rng_uniform(rt_rng *r) { return (double)(rt_rng_u64(r) >> 11) * 0x1.0p-53; }

/* Box-Muller with two fresh uniforms per call (no cached second value, so the
 * stream position is a simple function of the number of calls). 1 - u lies in
 * (0, 1], so the log is finite. */
double rt_rng_normal(rt_rng *r)
{
    double u1 = 1.0 - rt_rng_uniform(r);
    double u2 = rt_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Uniform in [0, n), n >= 1, without modulo bias: values below 2^64 mod n are
 * rejected so that every residue has the same number of preimages. */
uint64_t rt_rng_below(rt_rng *r, uint64_t n)
{
    uint64_t threshold = (0 - n) % n;
    for (;;) {
        uint64_t x = rt_rng_u64(r);
        if (x >= threshold)
            return x % n;
    }
}
