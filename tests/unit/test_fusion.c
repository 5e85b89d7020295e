/* test_fusion.c: fuse() on hand-built programs, for the guards no shipped or random
 * model reaches. Two elementwise loops that fusion must keep apart:
 *
 *   y[i] = x[P(i)]       (a: reads x at another index, conv2d's layout change P)
 *   x[i] = y[i] + 1      (b: reads a's value at i, but overwrites x)
 *
 * One loop would write x[i] before a later i reads it as x[P(i)]. And the case it
 * must fuse, so that the test is not passed by a fusion that never happens:
 *
 *   y[i] = x[i] * 2;  z[i] = y[i] + 1   (one loop)
 *
 * A loop whose values the next one reads at one index P runs inside it (remap_index):
 * indices compare by their fields, so two P built apart are one index, and a P and a Q
 * that differ in a field keep the loops apart:
 *
 *   y[i] = x[i] * 2;  z[i] = y[P(i)] + y[P(i)]   (one loop, x read at P(i))
 *   y[i] = x[i] * 2;  z[i] = y[P(i)] + y[Q(i)]   (two loops)
 *
 * Build: see tests/run_all.sh (unit/build_fusion). */
#include <stdio.h>
#include <stdlib.h>
#include "ir.h"
#include "ops/op.h"

static int failures;

static void expect(int ok, const char *what)
{
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    failures += !ok;
}

static int live_loops(const Program *p)
{
    int n = 0;
    for (int i = 0; i < p->n_ins; i++)
        n += !p->ins[i]->dead && p->ins[i]->kind == I_EW;
    return n;
}

static Program *program(Graph **gout)
{
    Graph *g = xcalloc(1, sizeof *g);
    Program *p = xcalloc(1, sizeof *p);
    p->g = g;
    p->kprefix = "k";
    *gout = g;
    return p;
}

static Node *node(void)
{
    Node *nd = xcalloc(1, sizeof *nd);
    nd->origin = "$.model.layers[0]";
    return nd;
}

/* a reads x at P(i); b overwrites x: must stay two loops */
static void overwrite_read_elsewhere(void)
{
    Graph *g;
    Program *p = program(&g);
    int64_t n = 8;
    Tensor *x = graph_tensor(g, T_ACT, "x", 1, &n);
    Tensor *y = graph_tensor(g, T_ACT, "y", 1, &n);
    Node *nd = node();
    INSTR_EW(p, nd, "permute", y, EW_COPY, x_arg(0), opd_at(x, ix_to_gemm(2, 4)));
    INSTR_EW(p, nd, "overwrite", x, EW_OTHER, x_add(x_arg(0), x_const(1)), opd(y));
    p->n_forward = p->n_ins;
    fuse(p);
    expect(live_loops(p) == 2, "a loop that overwrites what the one before reads at another index is not fused");
}

/* y = 2x; z = y + 1: one loop */
static void chain(void)
{
    Graph *g;
    Program *p = program(&g);
    int64_t n = 8;
    Tensor *x = graph_tensor(g, T_ACT, "x", 1, &n);
    Tensor *y = graph_tensor(g, T_ACT, "y", 1, &n);
    Tensor *z = graph_tensor(g, T_ACT, "z", 1, &n);
    Node *nd = node();
    INSTR_EW(p, nd, "double", y, EW_OTHER, x_mul(x_arg(0), x_const(2)), opd(x));
    INSTR_EW(p, nd, "add one", z, EW_OTHER, x_add(x_arg(0), x_const(1)), opd(y));
    p->n_forward = p->n_ins;
    fuse(p);
    expect(live_loops(p) == 1, "an elementwise chain is one loop");
}

/* y = 2x; z = y[p] + y[q]: one loop that reads x at p when p and q are the same index,
 * else two */
static void permuted(Index pi, Index qi, int same, const char *what)
{
    Graph *g;
    Program *p = program(&g);
    int64_t n = 8;
    Tensor *x = graph_tensor(g, T_ACT, "x", 1, &n);
    Tensor *y = graph_tensor(g, T_ACT, "y", 1, &n);
    Tensor *z = graph_tensor(g, T_ACT, "z", 1, &n);
    Node *nd = node();
    INSTR_EW(p, nd, "double", y, EW_OTHER, x_mul(x_arg(0), x_const(2)), opd(x));
    INSTR_EW(p, nd, "permuted sum", z, EW_ADD, x_add(x_arg(0), x_arg(1)), opd_at(y, pi),
             opd_at(y, qi));
    p->n_forward = p->n_ins;
    fuse(p);
    const Instr *last = p->ins[1];
    int ok = same ? live_loops(p) == 1 && last->n_ops == 2 && last->ops[0].arg[0].t == x &&
                        index_same(last->ops[0].arg[0].ix, pi) && !last->ops[1].arg[0].t &&
                        !last->ops[1].arg[1].t
                  : live_loops(p) == 2;
    expect(ok, what);
}

int main(void)
{
    chain();
    overwrite_read_elsewhere();
    permuted(ix_to_gemm(2, 4), ix_to_gemm(2, 4), 1,
             "a loop read at one permuted index, built twice, runs inside the next one");
    permuted(ix_to_gemm(2, 4), ix_to_gemm(4, 2), 0,
             "a loop read at two different permuted indices is not fused");
    permuted(ix_to_gemm(2, 4), ix_from_gemm(2, 4), 0,
             "nor at two kinds of permutation with the same sizes");
    printf("%d failed\n", failures);
    return failures != 0;
}
