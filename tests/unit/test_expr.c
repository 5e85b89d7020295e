/* test_expr.c: the elementwise IR's text (compiler/kernel.c: expr_print, index_print)
 * on expressions and indices built by hand, as C and as CUDA. The shipped and random
 * models print the shapes their ops build (generated/ and tests/golden.sh hold those
 * bytes); here are the parentheses an op yet to come may need (a select under a
 * product, a difference on the right of a difference), each index kind, and dropout's
 * draw in both spellings.
 *
 * Build: see tests/run_all.sh (unit/build_expr). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ir.h"

static int failures;

/* operand k prints as a, b or c */
static void put_name(Buf *b, int k, void *ctx)
{
    (void)ctx;
    buf_printf(b, "%c", 'a' + k);
}

static void expect_text(const Expr *x, int cuda, const char *want)
{
    Buf b = {0};
    expr_print(&b, x, cuda, put_name, NULL);
    int ok = !strcmp(b.s, want);
    printf("%s %s%s", ok ? "ok  " : "FAIL", want, ok ? "\n" : "");
    if (!ok)
        printf("  (printed %s)\n", b.s);
    failures += !ok;
    free(b.s);
}

static void expect_index(Index ix, int cuda, const char *want)
{
    Buf b = {0};
    index_print(&b, ix, cuda);
    int ok = !strcmp(b.s, want);
    printf("%s %s%s", ok ? "ok  " : "FAIL", want, ok ? "\n" : "");
    if (!ok)
        printf("  (printed %s)\n", b.s);
    failures += !ok;
    free(b.s);
}

int main(void)
{
    const Expr *a = x_arg(0), *b = x_arg(1), *c = x_arg(2), *zero = x_const(0);
    const Expr *relu = x_relu(a);
    /* C's order kept: left to right, parentheses only where the tree differs */
    expect_text(x_sub(x_sub(a, b), c), 0, "a - b - c");
    expect_text(x_sub(a, x_sub(b, c)), 0, "a - (b - c)");
    expect_text(x_mul(x_add(a, b), c), 0, "(a + b) * c");
    expect_text(x_add(a, x_mul(b, c)), 0, "a + b * c");
    expect_text(x_mul(x_mul(a, b), x_sub(x_const(1), b)), 0, "a * b * (1.0f - b)");
    expect_text(relu, 0, "a < 0.0f ? 0.0f : a");
    /* relu(x)^2 and its backward 2 relu(x) dy: a select under a product */
    expect_text(x_mul(relu, relu), 0, "(a < 0.0f ? 0.0f : a) * (a < 0.0f ? 0.0f : a)");
    expect_text(x_mul(x_mul(x_const(2), x_select(x_le(b, zero), zero, b)), a), 0,
                "2.0f * (b <= 0.0f ? 0.0f : b) * a");
    expect_text(x_select(x_le(a, b), x_select(x_lt(b, c), a, b), c), 0,
                "a <= b ? (b < c ? a : b) : c");
    expect_text(x_add(x_mul(x_cast(a), x_const(1.0 / 255)), x_const(-0.5)), 0,
                "(float)a * 0.00392156886f + -0.5f");
    expect_text(x_fn(FN_GELU_TANH_BWD, b, x_add(a, c)), 0, "rt_gelu_tanh_bwd(b, a + c)");
    expect_text(x_fn(FN_SIGMOID, x_mul(a, b), NULL), 1, "rt_sigmoidf(a * b)");
    /* dropout: rt_exec's fields in C, the kernel's arguments in CUDA */
    const Expr *drop = x_select(x_train(),
                                x_select(x_lt(x_uniform(0x1234, 8), x_const(0.25)), zero,
                                         x_mul(a, x_const(1 / 0.75))),
                                a);
    expect_text(drop, 0, "e->train ? (rt_uniform(e->rng_key ^ 0x0000000000001234ull, "
                         "rt_drop_index((uint64_t)i, 8, e->rng_part)) < 0.25f ? 0.0f : "
                         "a * 1.33333337f) : a");
    expect_text(drop, 1, "train ? (rt_uniform(rng_key ^ 0x0000000000001234ull, "
                         "rt_drop_index((uint64_t)i, 8, rng_part)) < 0.25f ? 0.0f : "
                         "a * 1.33333337f) : a");
    int reads_i = expr_reads_i(drop) && !expr_reads_i(x_mul(relu, relu));
    printf("%s expr_reads_i: dropout's draw reads i, relu^2 does not\n", reads_i ? "ok  " : "FAIL");
    failures += !reads_i;
    /* indices */
    expect_index(ix_self(), 0, "i");
    expect_index(ix_mod(384), 0, "i % 384");
    expect_index(ix_div_mod(784, 16), 1, "i / 784 % 16");
    expect_index(ix_from_gemm(784, 16), 0,
                 "(i / 784 % 16) * (e->B * 784) + i / 12544 * 784 + i % 784");
    expect_index(ix_to_gemm(784, 16), 1,
                 "i % (B * 784) / 784 * 12544 + i / (B * 784) * 784 + i % 784");
    printf("%d failed\n", failures);
    return failures != 0;
}
