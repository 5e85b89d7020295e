/* flatten.c: flatten, a view of its input as one axis: no instructions, and its
 * gradient is the output's gradient seen with the input's shape (autodiff.c's
 * GRAD_VIEW). */
#include "op.h"

/* any shape -> [numel]: a view of the same storage */
static void build_flatten(GraphCtx *c, const LayerArgs *a)
{
    Tensor *x = a->x;
    const char *at = a->at;
    const char *pfx = a->pfx;
    int64_t n = x->numel;
    Tensor *y = graph_tensor(c->g, T_ACT, layer_ident("flatten", pfx), 1, &n);   /* a view */
    y->alias = x->alias ? x->alias : x;
    y->origin = at;
    y->what = "flatten (a view)";
    layer_node(c, a, N_FLATTEN, x, y);
    c->cur = y;
}

const OpDef op_flatten = {.build = build_flatten};
const NodeDef node_flatten = {"flatten", GRAD_VIEW, 0, NULL};
