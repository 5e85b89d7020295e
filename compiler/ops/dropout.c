/* dropout.c: dropout with probability p in training, the identity in evaluation; and a
 * residual's drop_path (stochastic depth: a whole sample's body dropped with probability
 * p, the others' scaled by 1 / (1 - p); timm's DropPath, HF's Dinov2DropPath). The mask
 * is never stored: a counter-based hash of the layer's key (its spec path, and in a
 * repeat its iteration) and the element's index (drop_path: its sample's first
 * element's) gives it, forward and backward. */
#include "op.h"

static uint64_t fnv_on(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}
static uint64_t fnv(const char *s) { return fnv_on(1469598103934665603ull, s); }

/* any shape, kept */
static void build_dropout(GraphCtx *c, const LayerArgs *a)
{
    Graph *g = c->g;
    const Layer *l = a->l;
    Tensor *x = a->x;
    const char *at = a->at;
    const char *pfx = a->pfx;
    Tensor *y = act_tensor(c, l->path, layer_ident("dropout", pfx), x->rank, x->shape);
    y->origin = at;
    y->what = "dropout";
    Node *nd = layer_node(c, a, N_DROPOUT, x, y);
    nd->p = l->p;
    /* the mask's key: the layer's spec path, and in a repeat its iteration too
     * (the iterations share the path; one key would give them the same masks) */
    nd->key = c->iter ? fnv_on(fnv_on(fnv(l->path), "#"), c->iter) : fnv(l->path);
    g->has_dropout = 1;
    c->cur = y;
}

Tensor *build_drop_path(GraphCtx *c, const LayerArgs *a, Tensor *b, double p)
{
    const Layer *l = a->l;
    Tensor *y = act_tensor(c, l->path, layer_ident("drop_path", a->pfx), b->rank, b->shape);
    y->origin = a->at;
    y->what = "the body, dropped a whole sample at a time (drop_path)";
    Node *nd = layer_node(c, a, N_DROPOUT, b, y);
    nd->p = p;
    nd->conv[0] = 1;   /* one draw a sample */
    uint64_t k = fnv_on(fnv(l->path), "drop_path");   /* (apart from a dropout in the body) */
    nd->key = c->iter ? fnv_on(fnv_on(k, "#"), c->iter) : k;
    c->g->has_dropout = 1;
    return y;
}

/* Operand 0 through the mask: 0 where element i's draw (the layer's key, i's place in
 * a row of n; drop_path: its row's) falls below p, else scaled by 1 / (1 - p). */
static const Expr *masked(const Node *nd, int64_t n)
{
    const Expr *x = x_arg(0);
    const Expr *u = nd->conv[0] ? x_uniform_row(nd->key, n) : x_uniform(nd->key, n);
    return x_select(x_lt(u, x_const(nd->p)), x_const(0), x_mul(x, x_const(1.0 / (1.0 - nd->p))));
}

/* the identity in evaluation */
static void lower_dropout(Program *p, Node *nd)
{
    Tensor *x = nd->in[0];
    const Expr *e = x_select(x_train(), masked(nd, x->numel), x_arg(0));
    INSTR_EW(p, nd, nd->conv[0] ? "drop_path (a sample's mask from a counter-based hash, never "
             "stored)" : "dropout (mask from a counter-based hash, never stored)", nd->out,
             EW_DROPOUT, e, opd(x));
}

/* in[0] = dy */
static void lower_dropout_bwd(Program *p, Node *nd)
{
    INSTR_EW(p, nd, nd->conv[0] ? "drop_path backward (the same mask, regenerated)"
             : "dropout backward (the same mask, regenerated)", nd->out, EW_DROPOUT,
             masked(nd, nd->in[0]->numel), opd(nd->in[0]));
}

const OpDef op_dropout = {.build = build_dropout};
const NodeDef node_dropout = {"dropout", GRAD_NODE, N_DROPOUT_BWD, lower_dropout};
const NodeDef node_dropout_bwd = {"dropout_bwd", GRAD_NONE, 0, lower_dropout_bwd};
