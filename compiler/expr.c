/* expr.c: the elementwise expression's builders (ir.h: Expr), which the op files under
 * ops/ compose into each op's value, and the one question a pass asks of a built tree
 * (expr_reads_i). The text comes from kernel.c's expr_print, for the emitters only. */
#include "ir.h"

static Expr *node(int kind, const Expr *a, const Expr *b, const Expr *c)
{
    Expr *x = xcalloc(1, sizeof *x);
    x->kind = kind;
    x->a[0] = a;
    x->a[1] = b;
    x->a[2] = c;
    return x;
}

const Expr *x_arg(int k)
{
    Expr *x = node(X_ARG, NULL, NULL, NULL);
    x->arg = k;
    return x;
}

const Expr *x_const(double f)
{
    Expr *x = node(X_CONST, NULL, NULL, NULL);
    x->f = f;
    return x;
}

const Expr *x_cast(const Expr *a) { return node(X_CAST, a, NULL, NULL); }
const Expr *x_add(const Expr *a, const Expr *b) { return node(X_ADD, a, b, NULL); }
const Expr *x_sub(const Expr *a, const Expr *b) { return node(X_SUB, a, b, NULL); }
const Expr *x_mul(const Expr *a, const Expr *b) { return node(X_MUL, a, b, NULL); }
const Expr *x_div(const Expr *a, const Expr *b) { return node(X_DIV, a, b, NULL); }
const Expr *x_lt(const Expr *a, const Expr *b) { return node(X_LT, a, b, NULL); }
const Expr *x_le(const Expr *a, const Expr *b) { return node(X_LE, a, b, NULL); }
const Expr *x_select(const Expr *c, const Expr *t, const Expr *f) { return node(X_SELECT, c, t, f); }
const Expr *x_train(void) { return node(X_TRAIN, NULL, NULL, NULL); }

const Expr *x_relu(const Expr *v)
{
    const Expr *zero = x_const(0);
    return x_select(x_lt(v, zero), zero, v);
}

const Expr *x_fn(int fn, const Expr *a, const Expr *b)
{
    Expr *x = node(X_FN, a, b, NULL);
    x->fn = fn;
    return x;
}

const Expr *x_uniform(uint64_t key, int64_t n)
{
    Expr *x = node(X_UNIFORM, NULL, NULL, NULL);
    x->key = key;
    x->n = n;
    return x;
}

const Expr *x_uniform_row(uint64_t key, int64_t n)
{
    Expr *x = node(X_UNIFORM, NULL, NULL, NULL);
    x->key = key;
    x->n = n;
    x->m = 1;
    return x;
}

const Expr *x_head(int64_t n, int64_t m)
{
    Expr *x = node(X_HEAD, NULL, NULL, NULL);
    x->n = n;
    x->m = m;
    return x;
}

const Expr *x_pick(const double *list, int64_t n, int64_t m)
{
    int same = 1;
    for (int64_t k = 1; k < m; k++)
        same &= (float)list[k] == (float)list[0];
    if (same)
        return x_const(list[0]);
    Expr *x = node(X_PICK, NULL, NULL, NULL);
    x->list = list;
    x->n = n;
    x->m = m;
    return x;
}

const Expr *x_inside(int64_t rows, int64_t cols, int64_t pad)
{
    Expr *x = node(X_INSIDE, NULL, NULL, NULL);
    x->n = rows;
    x->m = cols;
    x->pad = pad;
    return x;
}

const Expr *x_place(int64_t n)
{
    Expr *x = node(X_PLACE, NULL, NULL, NULL);
    x->n = n;
    return x;
}

int expr_reads_i(const Expr *x)
{
    if (!x)
        return 0;
    if (x->kind == X_UNIFORM || x->kind == X_HEAD || x->kind == X_PICK || x->kind == X_INSIDE ||
        x->kind == X_PLACE)
        return 1;
    return expr_reads_i(x->a[0]) || expr_reads_i(x->a[1]) || expr_reads_i(x->a[2]);
}
