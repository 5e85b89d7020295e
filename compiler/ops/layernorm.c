/* layernorm.c: layer normalization over the last axis, its mean and 1/std saved for
 * the backward pass (fp32 in any precision): graph, backward rule and lowering (runtime
 * calls; fusion.c's layernorm_bwd_sums may fold a gradient sum into the backward call).
 * A weight and a bias by default; `bias` false: the weight alone (Cohere's); `affine`
 * false: neither (OLMo's). */
#include "op.h"

static int layernorm_params(const Layer *l, const char **out)
{
    int n = 0;
    if (l->affine)
        out[n++] = "weight";
    if (l->affine && l->bias)
        out[n++] = "bias";
    return n;
}

/* A parameter's tensor, or its gradient, or NULL where the layer has none */
static Arg param_arg(const Param *p, int grad) { return arg_opt(p ? (grad ? p->g : p->t) : NULL); }

/* [..., d] kept; mean and 1/std [rows] saved; W, b [d] */
static void build_layernorm(GraphCtx *c, const LayerArgs *a)
{
    Graph *g = c->g;
    const Layer *l = a->l;
    Tensor *x = a->x;
    const char *at = a->at;
    const char *pfx = a->pfx;
    if (x->rank < 1)
        layer_error(c, l, "layernorm needs an input with at least one axis, got a scalar");
    int64_t d = x->shape[x->rank - 1];
    Tensor *y = act_tensor(c, l->path, layer_ident("layernorm", pfx), x->rank, x->shape);
    y->origin = at;
    y->what = "layernorm output";
    int64_t rows = x->numel / d;
    Tensor *mean = act_tensor(c, l->path, layer_ident("ln_mean", pfx), 1, &rows);
    Tensor *rstd = act_tensor(c, l->path, layer_ident("ln_rstd", pfx), 1, &rows);
    mean->keep32 = rstd->keep32 = 1;
    mean->origin = rstd->origin = at;
    mean->what = "layernorm mean, saved for backward";
    rstd->what = "layernorm 1/std, saved for backward";
    Node *nd = layer_node(c, a, N_LAYERNORM, x, y);
    nd->p = l->eps;
    nd->tmp[0] = mean;
    nd->tmp[1] = rstd;
    if (l->affine)
        nd->w = add_param(g, pfx, "weight", 1, &d, RT_INIT_CONST, 1.0, l->path);
    if (l->affine && l->bias)
        nd->b = add_param(g, pfx, "bias", 1, &d, RT_INIT_CONST, 0.0, l->path);
    add_flops(c, nd, l->path, 8.0 * x->numel, 16.0 * x->numel, 0);
    c->cur = y;
}

/* Layer normalization, its mean and 1/std saved for the backward pass. */
static void lower_layernorm(Program *p, Node *nd)
{
    Tensor *x = nd->in[0], *y = nd->out;
    int64_t d = x->shape[x->rank - 1];
    Instr *a = instr_add(p, I_CALL, nd->origin, 0);
    a->what = xstrdup("layernorm");
    if (p->eval) {   /* the call writes them; validation has no backward to read them */
        nd->tmp[0]->what = "layernorm mean (validation: written, not read)";
        nd->tmp[1]->what = "layernorm 1/std (validation: written, not read)";
    }
    SET_CALL(a, CALL_LAYERNORM_FWD, arg_t(x), param_arg(nd->w, 0), param_arg(nd->b, 0), arg_t(y),
             arg_t(nd->tmp[0]), arg_t(nd->tmp[1]), arg_rows(x->numel / d), arg_int(d),
             arg_float(nd->p));
    instr_reads(a, x);
    if (nd->w)
        instr_reads(a, nd->w->t);
    if (nd->b)
        instr_reads(a, nd->b->t);
    instr_writes(a, y);
    instr_writes(a, nd->tmp[0]);
    instr_writes(a, nd->tmp[1]);
}

/* Layer normalization's backward pass. */
static void lower_layernorm_bwd(Program *p, Node *nd)
{
    Graph *g = p->g;
    Tensor *dy = nd->in[0], *x = nd->in[1], *y = nd->out;
    int64_t d = x->shape[x->rank - 1];
    Tensor *dx = y;
    dx = dx_or_unused(g, nd, x, dx);
    Instr *a = instr_add(p, I_CALL, nd->origin, 1);
    a->what = xstrdup("layernorm backward");
    /* NULL: no addend (fusion.c's layernorm_bwd_sums may fold a gradient sum in) */
    SET_CALL(a, CALL_LAYERNORM_BWD, arg_t(x), param_arg(nd->w, 0), arg_t(nd->tmp[0]),
             arg_t(nd->tmp[1]), arg_t(dy), arg_null(), arg_t(dx), param_arg(nd->w, 1),
             param_arg(nd->b, 1), arg_rows(x->numel / d), arg_int(d));
    instr_reads(a, x);
    if (nd->w)
        instr_reads(a, nd->w->t);
    instr_reads(a, nd->tmp[0]);
    instr_reads(a, nd->tmp[1]);
    instr_reads(a, dy);
    instr_writes(a, dx);
    if (nd->w)
        instr_writes(a, nd->w->g);
    if (nd->b)
        instr_writes(a, nd->b->g);
}

const OpDef op_layernorm = {.build = build_layernorm, .params = layernorm_params};
const NodeDef node_layernorm = {"layernorm", GRAD_NODE, N_LAYERNORM_BWD, lower_layernorm};
const NodeDef node_layernorm_bwd = {"layernorm_bwd", GRAD_NONE, 0, lower_layernorm_bwd};
