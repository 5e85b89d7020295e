/* test_fusion.c: fuse() on hand-built programs, for the guards no shipped or random
 * model reaches. Two elementwise loops that fusion must keep apart:
 *
 *   y[i] = x[i + 1]      (a: reads x at another index)
 *   x[i] = y[i] + 1      (b: reads a's value at i, but overwrites x)
 *
 * One loop would write x[i] before a later i reads it as x[i + 1]. And the case it
 * must fuse, so that the test is not passed by a fusion that never happens:
 *
 *   y[i] = x[i] * 2;  z[i] = y[i] + 1   (one loop)
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

/* a reads x at i + 1; b overwrites x: must stay two loops */
static void overwrite_read_elsewhere(void)
{
    Graph *g;
    Program *p = program(&g);
    int64_t n = 8;
    Tensor *x = graph_tensor(g, T_ACT, "x", 1, &n);
    Tensor *y = graph_tensor(g, T_ACT, "y", 1, &n);
    Node *nd = node();
    instr_ew(p, nd, "shift", y, EW_COPY, "$0", 1, x, "i + 1 < e->B * 8 ? i + 1 : i");
    instr_ew(p, nd, "overwrite", x, EW_OTHER, "$0 + 1.0f", 1, y, NULL);
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
    instr_ew(p, nd, "double", y, EW_OTHER, "$0 * 2.0f", 1, x, NULL);
    instr_ew(p, nd, "add one", z, EW_OTHER, "$0 + 1.0f", 1, y, NULL);
    p->n_forward = p->n_ins;
    fuse(p);
    expect(live_loops(p) == 1, "an elementwise chain is one loop");
}

int main(void)
{
    chain();
    overwrite_read_elsewhere();
    printf("%d failed\n", failures);
    return failures != 0;
}
