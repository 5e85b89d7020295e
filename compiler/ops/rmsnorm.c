/* rmsnorm.c: RMS normalization over the last axis (torch.nn.RMSNorm, HF LlamaRMSNorm),
 * its 1/rms saved for the backward pass (fp32 in any precision): graph, backward rule
 * and lowering (runtime calls; fusion.c's layernorm_bwd_sums may fold a gradient sum,
 * a residual's, into the backward call as it does layernorm's). */
#include "op.h"

static int rmsnorm_params(const Layer *l, const char **out)
{
    out[0] = "weight";
    return 1;
}

/* [..., d] kept; 1/rms [rows] saved; W [d] */
static void build_rmsnorm(GraphCtx *c, const LayerArgs *a)
{
    Graph *g = c->g;
    const Layer *l = a->l;
    Tensor *x = a->x;
    const char *pfx = a->pfx;
    if (x->rank < 1)
        layer_error(c, l, "rmsnorm needs an input with at least one axis, got a scalar");
    int64_t d = x->shape[x->rank - 1];
    Tensor *y = act_tensor(c, l->path, layer_ident("rmsnorm", pfx), x->rank, x->shape);
    y->origin = a->at;
    y->what = "rmsnorm output";
    int64_t rows = x->numel / d;
    Tensor *rstd = act_tensor(c, l->path, layer_ident("rms_rstd", pfx), 1, &rows);
    rstd->keep32 = 1;
    rstd->origin = a->at;
    rstd->what = "rmsnorm 1/rms, saved for backward";
    Node *nd = layer_node(c, a, N_RMSNORM, x, y);
    nd->p = l->eps;
    nd->tmp[0] = rstd;
    nd->w = add_param(g, pfx, "weight", 1, &d, RT_INIT_CONST, 1.0, l->path);
    /* forward: square, sum, scale, weight; backward: dy w, its dot with xh, dx, dw */
    add_flops(c, nd, l->path, 4.0 * x->numel, 8.0 * x->numel, 0);
    c->cur = y;
}

static void lower_rmsnorm(Program *p, Node *nd)
{
    Tensor *x = nd->in[0], *y = nd->out;
    int64_t d = x->shape[x->rank - 1];
    Instr *a = instr_add(p, I_CALL, nd->origin, 0);
    a->what = xstrdup("rmsnorm");
    if (p->eval)   /* the call writes it; validation has no backward to read it */
        nd->tmp[0]->what = "rmsnorm 1/rms (validation: written, not read)";
    SET_CALL(a, CALL_RMSNORM_FWD, arg_t(x), arg_t(nd->w->t), arg_t(y), arg_t(nd->tmp[0]),
             arg_rows(x->numel / d), arg_int(d), arg_float(nd->p));
    instr_reads(a, x);
    instr_reads(a, nd->w->t);
    instr_writes(a, y);
    instr_writes(a, nd->tmp[0]);
}

static void lower_rmsnorm_bwd(Program *p, Node *nd)
{
    Graph *g = p->g;
    Tensor *dy = nd->in[0], *x = nd->in[1], *dx = nd->out;
    int64_t d = x->shape[x->rank - 1];
    dx = dx_or_unused(g, nd, x, dx);
    Instr *a = instr_add(p, I_CALL, nd->origin, 1);
    a->what = xstrdup("rmsnorm backward");
    /* NULL: no addend (fusion.c's layernorm_bwd_sums may fold a gradient sum in); dx is
     * written first (that pass reads writes[0] as dx) */
    SET_CALL(a, CALL_RMSNORM_BWD, arg_t(x), arg_t(nd->w->t), arg_t(nd->tmp[0]), arg_t(dy),
             arg_null(), arg_t(dx), arg_t(nd->w->g), arg_rows(x->numel / d), arg_int(d));
    instr_reads(a, x);
    instr_reads(a, nd->w->t);
    instr_reads(a, nd->tmp[0]);
    instr_reads(a, dy);
    instr_writes(a, dx);
    instr_writes(a, nd->w->g);
}

const OpDef op_rmsnorm = {.build = build_rmsnorm, .params = rmsnorm_params};
const NodeDef node_rmsnorm = {"rmsnorm", GRAD_NODE, N_RMSNORM_BWD, lower_rmsnorm};
const NodeDef node_rmsnorm_bwd = {"rmsnorm_bwd", GRAD_NONE, 0, lower_rmsnorm_bwd};
