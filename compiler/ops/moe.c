/* moe.c: the mixture-of-experts layer (Mixtral's sparse MLP): a router (a linear of E
 * outputs, no bias) scores each token, the softmax's top_k experts take it, each
 * expert a gated MLP (an up weight of 2h rows, gate then up as glu's linear, glu, a
 * down weight of h columns), and the token's output is their outputs weighted by the
 * chosen probabilities (renormalized to sum 1 with norm_topk). Three nodes:
 *
 *   N_MOE_DISPATCH  x [T, d] -> h [T k, 2h]: routing, each token's copies gathered by
 *                   expert, each group times its expert's up weight
 *   N_GLU           h -> a [T k, h] (ops/glu.c)
 *   N_MOE_COMBINE   a -> y [T, d]: each group times its expert's down weight, the copies
 *                   summed into their tokens by the gate weights
 *
 * The routing (MoeRoute, ir.h) is saved for backward; the gate weights' gradient
 * reaches the router through it (the combine's backward writes dgate, the dispatch's,
 * which runs after, reads it). Every buffer has a fixed size (a batch's T k copies), so
 * the memory plan stays static; only the split among experts changes from step to step.
 *
 * The layers with an aux_loss share one load-balancing loss (MoeAux, ir.h: transformers'
 * Mixtral's, over all of them at once), which N_MOE_AUX computes after the loss.
 *
 * A shared expert (shared: its width S) is a plain gated MLP every token goes through:
 * a linear node of 2S rows (with shared_gate 2S + 1: the last its gate's, Qwen2-MoE's),
 * glu (ops/glu.c's gated variant with shared_gate), a linear node down, and an add node
 * summing its output with the routed experts'. */
#include <math.h>
#include <stdlib.h>
#include "op.h"

static int moe_params(const Layer *l, const char **out)
{
    out[0] = "router.weight";
    out[1] = "experts.up.weight";
    out[2] = "experts.down.weight";
    if (!l->shared)
        return 3;
    out[3] = "shared.up.weight";
    out[4] = "shared.down.weight";
    return 5;
}

/* A routing tensor of the layer: per sample, rows x cols floats, kept fp32 */
static Tensor *route_tensor(GraphCtx *c, const LayerArgs *a, const char *name, int64_t rows,
                            int64_t cols, const char *what)
{
    int64_t shape[2] = {rows, cols};
    Tensor *t = act_tensor(c, a->l->path, layer_ident(name, a->pfx), 2, shape);
    t->keep32 = 1;
    t->origin = a->at;
    t->what = what;
    return t;
}

static MoeRoute *build_route(GraphCtx *c, const LayerArgs *a, int64_t tokens)
{
    const Layer *l = a->l;
    MoeRoute *r = xcalloc(1, sizeof *r);
    r->experts = l->experts;
    r->top_k = l->top_k;
    r->hidden = l->hidden;
    r->norm_topk = l->norm_topk;
    int64_t E = l->experts, k = l->top_k;
    r->probs = route_tensor(c, a, "moe_probs", tokens, E, "the router's softmax");
    r->gate = route_tensor(c, a, "moe_gate", tokens, k, "the chosen experts' gate weights");
    r->idx = route_tensor(c, a, "moe_idx", tokens, 2 * k,
                          "the chosen experts, then their copies' rows (integers)");
    r->offs = route_tensor(c, a, "moe_offs", 1, E + 1,
                           "each expert's first row of the batch's copies (first sample's)");
    r->dgate = route_tensor(c, a, "moe_dgate", tokens, k, "the gate weights' gradient");
    r->aux_layer = -1;
    return r;
}

/* A layer with an aux_loss joins the graph's load-balancing loss: its row of the stats
 * (the tensors made with the first such layer, the stats' rows counted as they come).
 * transformers computes one loss over all the layers, so they share E, k and the
 * coefficient. */
static void join_aux(GraphCtx *c, const LayerArgs *a, MoeRoute *r, int64_t tokens)
{
    const Layer *l = a->l;
    Graph *g = c->g;
    if (g->gan)
        layer_error(c, l, "aux_loss: a GAN's networks take no load-balancing loss");
    MoeAux *x = g->moe_aux;
    if (!x) {
        x = g->moe_aux = xcalloc(1, sizeof *x);
        x->coef = l->aux_loss;
        x->experts = l->experts;
        x->top_k = l->top_k;
        x->tokens = tokens;
        int64_t one[2] = {1, 2 * l->experts}, e[2] = {1, l->experts};
        x->stats = act_tensor(c, l->path, "moe_aux_stats", 2, one);
        x->stats->what = "the moe layers' expert counts and summed probabilities (a row each)";
        x->agrad = act_tensor(c, l->path, "moe_aux_grad", 2, e);
        x->agrad->what = "the load-balancing loss's gradient by a token's expert probability";
        x->stats->keep32 = x->agrad->keep32 = 1;
        x->stats->origin = x->agrad->origin = a->at;
    } else if (x->coef != l->aux_loss || x->experts != l->experts || x->top_k != l->top_k ||
               x->tokens != tokens) {
        layer_error(c, l, "aux_loss: the moe layers with a load-balancing loss share one "
                    "(transformers' over all of them): the same aux_loss, experts, top_k and "
                    "tokens a sample as the first (%g, %lld, %lld, %lld)", x->coef,
                    (long long)x->experts, (long long)x->top_k, (long long)x->tokens);
    }
    r->aux_layer = (int)x->layers++;
    x->stats->shape[0] = x->layers;
    x->stats->numel = x->layers * 2 * x->experts;
}

/* One of the layer's weights ([out, in], or [E, out, in]: each expert's), initialized
 * as a linear's (the default: uniform in 1 / sqrt(in)) */
static Param *moe_weight(GraphCtx *c, const LayerArgs *a, const char *what, int rank,
                         const int64_t *shape, int resid_out)
{
    int def = a->init.kind == INIT_DEFAULT;
    double in = (double)shape[rank - 1];
    return add_param(c->g, a->pfx, what, rank, shape, def ? RT_INIT_UNIFORM : RT_INIT_NORMAL,
                     def ? 1.0 / sqrt(in) : init_std(c, a->init, resid_out), a->l->path);
}

/* The shared expert on x [..., d]: a linear of 2S rows (gate, up; with shared_gate one
 * more, the gate's), glu (gated), a linear down; returns its output [..., d] */
static Tensor *build_shared(GraphCtx *c, const LayerArgs *a, Tensor *x, int64_t d,
                            int64_t tokens)
{
    const Layer *l = a->l;
    int64_t S = l->shared, up = 2 * S + l->shared_gate;
    gemm_dim(c->g, l->path, "moe", "shared expert's width", up);
    int64_t us[RT_MAX_RANK];
    for (int k = 0; k < x->rank; k++)
        us[k] = x->shape[k];
    us[x->rank - 1] = up;
    Tensor *u = act_tensor(c, l->path, layer_ident("shared_up", a->pfx), x->rank, us);
    u->origin = a->at;
    u->what = l->shared_gate ? "the shared expert's gate and up rows, then its gate's logit"
                             : "the shared expert's gate and up rows";
    Node *un = layer_node(c, a, N_LINEAR, x, u);
    un->w = moe_weight(c, a, "shared.up.weight", 2, (int64_t[]){up, d}, 0);

    LayerArgs ga = *a;
    ga.x = u;
    Tensor *g;
    if (l->shared_gate) {
        g = build_gated_glu(c, &ga, u);
    } else {
        op_defs[OP_GLU]->build(c, &ga);
        g = c->cur;
    }
    Tensor *s = act_tensor(c, l->path, layer_ident("shared", a->pfx), x->rank, x->shape);
    s->origin = a->at;
    s->what = "the shared expert's output";
    Node *dn = layer_node(c, a, N_LINEAR, g, s);
    dn->w = moe_weight(c, a, "shared.down.weight", 2, (int64_t[]){d, S}, c->resid_out);
    add_flops(c, un, l->path, 2.0 * tokens * d * up, 2.0 * tokens * d * up, 2.0 * tokens * d * up);
    add_flops(c, dn, l->path, 2.0 * tokens * d * S, 2.0 * tokens * d * S, 2.0 * tokens * d * S);
    return s;
}

/* The routed experts' output y plus the shared expert's on x */
static Tensor *add_shared(GraphCtx *c, const LayerArgs *a, Tensor *x, Tensor *y, int64_t d,
                          int64_t tokens)
{
    const Layer *l = a->l;
    Tensor *s = build_shared(c, a, x, d, tokens);
    Tensor *sum = act_tensor(c, l->path, layer_ident("moe", a->pfx), x->rank, x->shape);
    sum->origin = a->at;
    sum->what = "moe output: the routed experts' plus the shared expert's";
    Node *nd = layer_node(c, a, N_ADD, y, sum);
    nd->in[nd->n_in++] = s;
    add_flops(c, nd, l->path, (double)y->numel, 0, 0);
    return sum;
}

/* x [..., d] -> y [..., d]; the glu between the two nodes is glu's own; with a shared
 * expert, y its output plus the routed experts' (an add node) */
static void build_moe(GraphCtx *c, const LayerArgs *a)
{
    const Layer *l = a->l;
    Tensor *x = a->x;
    if (x->rank < 1)
        layer_error(c, l, "moe needs an input with at least one axis, got a scalar");
    int64_t d = x->shape[x->rank - 1], tokens = x->numel / d;
    int64_t E = l->experts, k = l->top_k, hid = l->hidden;
    gemm_dim(c->g, l->path, "moe", "input width", d);
    gemm_dim(c->g, l->path, "moe", "hidden width", 2 * hid);
    gemm_dim(c->g, l->path, "moe", "tokens a sample times top_k", tokens * k);
    MoeRoute *r = build_route(c, a, tokens);
    if (l->aux_loss > 0)
        join_aux(c, a, r, tokens);

    int64_t hs[2] = {tokens * k, 2 * hid};
    Tensor *h = act_tensor(c, l->path, layer_ident("moe_up", a->pfx), 2, hs);
    h->origin = a->at;
    h->what = "each token's copies, grouped by expert, times the expert's up weight";
    Node *dn = layer_node(c, a, N_MOE_DISPATCH, x, h);
    dn->moe = r;
    dn->w = moe_weight(c, a, "router.weight", 2, (int64_t[]){E, d}, 0);
    dn->b = moe_weight(c, a, "experts.up.weight", 3, (int64_t[]){E, 2 * hid, d}, 0);

    LayerArgs ga = *a;
    ga.x = h;
    op_defs[OP_GLU]->build(c, &ga);
    Tensor *act = c->cur;

    Tensor *y = act_tensor(c, l->path, layer_ident(l->shared ? "moe_routed" : "moe", a->pfx),
                           x->rank, x->shape);
    y->origin = a->at;
    y->what = l->shared ? "the routed experts' output" : "moe output";
    Node *cn = layer_node(c, a, N_MOE_COMBINE, act, y);
    cn->moe = r;
    cn->w = moe_weight(c, a, "experts.down.weight", 3, (int64_t[]){E, d, hid}, c->resid_out);

    /* the router's GEMM and softmax and the experts' up GEMM over T k rows; their down
     * GEMM and the weighted sum (each backward: the input's gradient and the weights') */
    double router = 2.0 * tokens * d * E, up = 2.0 * tokens * k * d * 2 * hid;
    double down = 2.0 * tokens * k * d * hid, sum = 2.0 * tokens * k * d;
    add_flops(c, dn, l->path, router + up, router + up, router + up);
    add_flops(c, cn, l->path, down + sum, down + sum, down + sum);
    c->cur = l->shared ? add_shared(c, a, x, y, d, tokens) : y;
}

/* The runtime arguments every moe call ends with: tokens, d, E, k */
#define MOE_DIMS(r, tokens, d) arg_rows(tokens), arg_int(d), arg_int((r)->experts), \
    arg_int((r)->top_k)

static void reads(Instr *in, Tensor **ts, int n)
{
    for (int i = 0; i < n; i++)
        instr_reads(in, ts[i]);
}

static void writes(Instr *in, Tensor **ts, int n)
{
    for (int i = 0; i < n; i++)
        instr_writes(in, ts[i]);
}

/* the tokens of a sample, and the width d, of the layer's input x */
static int64_t tokens_of(const Tensor *x, int64_t *d)
{
    *d = x->shape[x->rank - 1];
    return x->numel / *d;
}

static void lower_dispatch(Program *p, Node *nd)
{
    const MoeRoute *r = nd->moe;
    Tensor *x = nd->in[0], *h = nd->out;
    int64_t d, tokens = tokens_of(x, &d), k = r->top_k;
    Tensor *xg = lower_temp(p->g, xasprintf("%s_xg", h->name), tokens * k * d, nd->origin,
                            "the tokens' copies, grouped by expert");
    Instr *a = instr_add(p, I_CALL, nd->origin, 0);
    a->what = xasprintf("moe: route to %lld of %lld experts, gather, up GEMMs",
                        (long long)k, (long long)r->experts);
    Tensor *stats = r->aux_layer >= 0 ? p->g->moe_aux->stats : NULL;
    SET_CALL(a, CALL_MOE_DISPATCH_FWD, arg_t(x), arg_t(nd->w->t), arg_t(nd->b->t),
             arg_t(r->probs), arg_t(r->gate), arg_t(r->idx), arg_t(r->offs), arg_t(xg),
             arg_t(h), arg_opt(stats), MOE_DIMS(r, tokens, d),
             arg_int(2 * r->hidden), arg_int(r->norm_topk), arg_int(r->aux_layer));
    reads(a, (Tensor *[]){x, nd->w->t, nd->b->t}, 3);
    writes(a, (Tensor *[]){r->probs, r->gate, r->idx, r->offs, xg, h}, 6);
    if (stats)
        instr_writes(a, stats);
}

/* in[0] = dh, in[1] = x */
static void lower_dispatch_bwd(Program *p, Node *nd)
{
    const MoeRoute *r = nd->fwd->moe;
    Tensor *dh = nd->in[0], *x = nd->in[1], *dx = dx_or_unused(p->g, nd, x, nd->out);
    int64_t d, tokens = tokens_of(x, &d), k = r->top_k;
    Tensor *xg = lower_temp(p->g, xasprintf("%s_xg", dh->name), tokens * k * d, nd->origin,
                            "the tokens' copies grouped by expert, then their gradient");
    Tensor *dl = lower_temp(p->g, xasprintf("%s_dlogits", dh->name), tokens * r->experts,
                            nd->origin, "the router logits' gradient");
    dl->keep32 = 1;
    Instr *a = instr_add(p, I_CALL, nd->origin, 1);
    a->what = xstrdup("moe backward: up GEMMs, scatter, router");
    Tensor *agrad = r->aux_layer >= 0 ? p->g->moe_aux->agrad : NULL;
    SET_CALL(a, CALL_MOE_DISPATCH_BWD, arg_t(x), arg_t(nd->w->t), arg_t(nd->b->t),
             arg_t(r->probs), arg_t(r->gate), arg_t(r->idx), arg_t(r->offs), arg_t(r->dgate),
             arg_opt(agrad), arg_t(dh), arg_t(xg), arg_t(dl), arg_t(dx),
             arg_t(nd->w->g), arg_t(nd->b->g), MOE_DIMS(r, tokens, d), arg_int(2 * r->hidden),
             arg_int(r->norm_topk));
    reads(a, (Tensor *[]){x, nd->w->t, nd->b->t, r->probs, r->gate, r->idx, r->offs,
                          r->dgate, dh}, 9);
    if (agrad)
        instr_reads(a, agrad);
    writes(a, (Tensor *[]){xg, dl, dx, nd->w->g, nd->b->g}, 5);
}

static void lower_combine(Program *p, Node *nd)
{
    const MoeRoute *r = nd->moe;
    Tensor *act = nd->in[0], *y = nd->out;
    int64_t d, tokens = tokens_of(y, &d);
    Tensor *o = lower_temp(p->g, xasprintf("%s_o", y->name), tokens * r->top_k * d,
                           nd->origin, "the copies times their expert's down weight");
    Instr *a = instr_add(p, I_CALL, nd->origin, 0);
    a->what = xstrdup("moe: down GEMMs, the copies summed by their gate weights");
    SET_CALL(a, CALL_MOE_COMBINE_FWD, arg_t(act), arg_t(nd->w->t), arg_t(r->gate),
             arg_t(r->idx), arg_t(r->offs), arg_t(o), arg_t(y), MOE_DIMS(r, tokens, d),
             arg_int(r->hidden));
    reads(a, (Tensor *[]){act, nd->w->t, r->gate, r->idx, r->offs}, 5);
    writes(a, (Tensor *[]){o, y}, 2);
}

/* in[0] = dy, in[1] = a (the glu's output) */
static void lower_combine_bwd(Program *p, Node *nd)
{
    const MoeRoute *r = nd->fwd->moe;
    Tensor *dy = nd->in[0], *act = nd->in[1], *da = dx_or_unused(p->g, nd, act, nd->out);
    int64_t d, tokens = tokens_of(dy, &d);
    Tensor *gt = lower_temp(p->g, xasprintf("%s_g", dy->name), tokens * r->top_k * d,
                            nd->origin, "the output gradient's copies, grouped by expert");
    Instr *a = instr_add(p, I_CALL, nd->origin, 1);
    a->what = xstrdup("moe backward: down GEMMs, the gate weights' gradient");
    SET_CALL(a, CALL_MOE_COMBINE_BWD, arg_t(act), arg_t(nd->w->t), arg_t(r->gate),
             arg_t(r->idx), arg_t(r->offs), arg_t(dy), arg_t(gt), arg_t(da), arg_t(r->dgate),
             arg_t(nd->w->g), MOE_DIMS(r, tokens, d), arg_int(r->hidden));
    reads(a, (Tensor *[]){act, nd->w->t, r->gate, r->idx, r->offs, dy}, 6);
    writes(a, (Tensor *[]){gt, da, r->dgate, nd->w->g}, 4);
}

/* The load-balancing loss's node, after the loss (block -1: never replayed) */
void build_moe_aux(GraphCtx *c)
{
    Node *nd = graph_node(c->g, N_MOE_AUX, "$.model.loss");
    nd->in[nd->n_in++] = c->g->moe_aux->stats;
    nd->out = c->g->moe_aux->agrad;
}

static void lower_moe_aux(Program *p, Node *nd)
{
    const MoeAux *x = p->g->moe_aux;
    Instr *a = instr_add(p, I_CALL, nd->origin, 0);
    a->what = xasprintf("the load-balancing loss of %lld moe layers (times %g)",
                        (long long)x->layers, x->coef);
    SET_CALL(a, CALL_MOE_AUX, arg_t(x->stats), arg_t(x->agrad), arg_int(x->layers),
             arg_rows(x->tokens), arg_int(x->experts), arg_float(x->coef));
    instr_reads(a, x->stats);
    instr_writes(a, x->agrad);
}

const OpDef op_moe = {.build = build_moe, .params = moe_params};
const NodeDef node_moe_aux = {"moe_aux", GRAD_NONE, 0, lower_moe_aux};
const NodeDef node_moe_dispatch = {"moe_dispatch", GRAD_NODE, N_MOE_DISPATCH_BWD, lower_dispatch};
const NodeDef node_moe_dispatch_bwd = {"moe_dispatch_bwd", GRAD_NONE, 0, lower_dispatch_bwd};
const NodeDef node_moe_combine = {"moe_combine", GRAD_NODE, N_MOE_COMBINE_BWD, lower_combine};
const NodeDef node_moe_combine_bwd = {"moe_combine_bwd", GRAD_NONE, 0, lower_combine_bwd};
