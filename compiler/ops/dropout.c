/* dropout.c: dropout with probability p in training, the identity in evaluation. The
 * mask is never stored: a counter-based hash of the layer's key (its spec path, and in a
 * repeat its iteration) and the element's index gives it, forward and backward. */
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

static void lower_dropout(Program *p, Node *nd)
{
    Tensor *x = nd->in[0];
    char *e = xasprintf("e->train ? (rt_uniform(e->rng_key ^ 0x%016llxull, rt_drop_index((uint64_t)i, "
                        "%lld, e->rng_part)) < %s ? 0.0f : $0 * %s) : $0",
                        (unsigned long long)nd->key, (long long)x->numel, float_literal(nd->p),
                        float_literal(1.0 / (1.0 - nd->p)));
    INSTR_EW(p, nd, "dropout (mask from a counter-based hash, never stored)", nd->out, EW_DROPOUT,
             e, opd(x));
}

/* in[0] = dy */
static void lower_dropout_bwd(Program *p, Node *nd)
{
    char *e = xasprintf("rt_uniform(e->rng_key ^ 0x%016llxull, rt_drop_index((uint64_t)i, %lld, "
                        "e->rng_part)) < %s ? 0.0f : $0 * %s",
                        (unsigned long long)nd->key, (long long)nd->in[0]->numel,
                        float_literal(nd->p), float_literal(1.0 / (1.0 - nd->p)));
    INSTR_EW(p, nd, "dropout backward (the same mask, regenerated)", nd->out, EW_DROPOUT, e,
             opd(nd->in[0]));
}

const OpDef op_dropout = {.build = build_dropout};
const NodeDef node_dropout = {"dropout", GRAD_NODE, N_DROPOUT_BWD, lower_dropout};
const NodeDef node_dropout_bwd = {"dropout_bwd", GRAD_NONE, 0, lower_dropout_bwd};
