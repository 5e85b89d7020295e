/* batchnorm.c: batch normalization per channel (axis 0 of the per-sample shape) over the
 * batch and the remaining axes, PyTorch's BatchNorm1d/2d: graph, backward rule and
 * lowering. Training normalizes with the micro-batch's statistics and updates the
 * running ones (state tensors, saved with the weights); evaluation (e->train 0)
 * normalizes with the running ones. The runtime call works out the statistics and each
 * channel's scale and shift; the normalization y = x scale + shift is an elementwise
 * op, which fusion merges with the activation (and whatever elementwise) after it. The
 * per-channel values ([C] for the whole batch: mean, 1/std, scale, shift) live in
 * per-row buffers of C floats, fp32, of which the first C hold them. */
#include "op.h"

static int batchnorm_params(const Layer *l, const char **out)
{
    int n = 0;
    if (l->affine) {
        out[n++] = "weight";
        out[n++] = "bias";
    }
    out[n++] = "running_mean";
    out[n++] = "running_var";
    out[n++] = "num_batches_tracked";
    return n;
}

/* x [C, ...] -> y of its shape; W, b, running mean and var [C]; the count [] (i64) */
static void build_batchnorm(GraphCtx *c, const LayerArgs *a)
{
    Graph *g = c->g;
    const Layer *l = a->l;
    Tensor *x = a->x;
    const char *pfx = a->pfx;
    if (x->rank < 1)
        layer_error(c, l, "batchnorm needs an input with a channel axis ([C], [C, L] or "
                    "[C, H, W]), got a scalar");
    if (tensor_base(x)->layout)
        die("batchnorm's input %s is stored in a GEMM layout", x->name);
    int64_t C = x->shape[0];
    Tensor *y = act_tensor(c, l->path, layer_ident("batchnorm", pfx), x->rank, x->shape);
    y->origin = a->at;
    y->what = "batchnorm output";
    Tensor *mean = act_tensor(c, l->path, layer_ident("bn_mean", pfx), 1, &C);
    Tensor *rstd = act_tensor(c, l->path, layer_ident("bn_rstd", pfx), 1, &C);
    mean->keep32 = rstd->keep32 = 1;
    mean->origin = rstd->origin = a->at;
    mean->what = "batchnorm's batch mean [C] (first C floats), saved for backward";
    rstd->what = "batchnorm's batch 1/std [C] (first C floats), saved for backward";
    Tensor *scale = act_tensor(c, l->path, layer_ident("bn_scale", pfx), 1, &C);
    Tensor *shift = act_tensor(c, l->path, layer_ident("bn_shift", pfx), 1, &C);
    scale->keep32 = shift->keep32 = 1;
    scale->origin = shift->origin = a->at;
    scale->what = "batchnorm's scale rstd * w [C] (first C floats)";
    shift->what = "batchnorm's shift b - mean * rstd * w [C] (first C floats)";
    Node *nd = layer_node(c, a, N_BATCHNORM, x, y);
    nd->p = l->eps;
    nd->scale = l->momentum;
    nd->conv[0] = C;
    nd->conv[1] = x->numel / C;
    nd->conv[2] = l->sync;
    nd->tmp[0] = mean;
    nd->tmp[1] = rstd;
    nd->out2 = scale;
    nd->tmp2 = shift;
    if (l->affine) {
        nd->w = add_param(g, pfx, "weight", 1, &C, RT_INIT_CONST, 1.0, l->path);
        nd->b = add_param(g, pfx, "bias", 1, &C, RT_INIT_CONST, 0.0, l->path);
    }
    nd->state[0] = add_state(g, pfx, "running_mean", 1, &C, 0.0, 0, l->path);
    nd->state[1] = add_state(g, pfx, "running_var", 1, &C, 1.0, 0, l->path);
    nd->state[2] = add_state(g, pfx, "num_batches_tracked", 0, NULL, 0.0, 1, l->path);
    add_flops(c, nd, l->path, 6.0 * x->numel, 10.0 * x->numel, 0);
    c->cur = y;
}

/* Training: the batch's statistics, saved, and the running ones updated; validation:
 * the running ones (the same call: it reads e->train). Then y = x scale + shift. */
static void lower_batchnorm(Program *p, Node *nd)
{
    Tensor *x = nd->in[0], *y = nd->out, *scale = nd->out2, *shift = nd->tmp2;
    Tensor *rm = nd->state[0]->t, *rv = nd->state[1]->t, *nb = nd->state[2]->t;
    Tensor *mean = p->eval ? NULL : nd->tmp[0], *rstd = p->eval ? NULL : nd->tmp[1];
    int64_t C = nd->conv[0], HW = nd->conv[1];
    Instr *a = instr_add(p, I_CALL, nd->origin, 0);
    a->what = xstrdup(p->eval ? "batchnorm: scale and shift from the running statistics"
                              : "batchnorm: the batch's statistics, scale and shift");
    SET_CALL(a, CALL_BATCHNORM_FWD, arg_t(x), arg_opt(nd->w ? nd->w->t : NULL),
             arg_opt(nd->b ? nd->b->t : NULL), arg_t(scale), arg_t(shift), arg_opt(mean),
             arg_opt(rstd), arg_t(rm), arg_t(rv), arg_t(nb), arg_rows(1), arg_int(C),
             arg_int(HW), arg_float(nd->p), arg_float(nd->scale), arg_int(nd->conv[2]));
    instr_reads(a, x);
    if (nd->w) {
        instr_reads(a, nd->w->t);
        instr_reads(a, nd->b->t);
    }
    instr_writes(a, scale);
    instr_writes(a, shift);
    if (!p->eval) {
        instr_writes(a, mean);
        instr_writes(a, rstd);
        instr_writes(a, rm);   /* updated in place (a replay gets NULL: recompute.c) */
        instr_writes(a, rv);
        instr_writes(a, nb);
    } else {
        instr_reads(a, rm);
        instr_reads(a, rv);
        instr_reads(a, nb);
    }
    /* channel c of [B, C, HW] is element i / HW % C (i % C for [C]) */
    Index ch = HW == 1 ? ix_mod(C) : ix_div_mod(HW, C);
    INSTR_EW(p, nd, "batchnorm: y = x * scale + shift", y, EW_OTHER,
             x_add(x_mul(x_arg(0), x_arg(1)), x_arg(2)), opd(x), opd_at(scale, ch),
             opd_at(shift, ch));
}

/* The input gradient and dW, db from the two per-channel sums of dy and dy * xhat. */
static void lower_batchnorm_bwd(Program *p, Node *nd)
{
    Graph *g = p->g;
    Tensor *dy = nd->in[0], *x = nd->in[1], *dx = nd->out;
    dx = dx_or_unused(g, nd, x, dx);
    Instr *a = instr_add(p, I_CALL, nd->origin, 1);
    a->what = xstrdup("batchnorm backward");
    SET_CALL(a, CALL_BATCHNORM_BWD, arg_t(x), arg_opt(nd->w ? nd->w->t : NULL),
             arg_t(nd->tmp[0]), arg_t(nd->tmp[1]), arg_t(dy), arg_t(dx),
             arg_opt(nd->w ? nd->w->g : NULL), arg_opt(nd->b ? nd->b->g : NULL), arg_rows(1),
             arg_int(nd->fwd->conv[0]), arg_int(nd->fwd->conv[1]), arg_int(nd->fwd->conv[2]));
    instr_reads(a, x);
    if (nd->w)
        instr_reads(a, nd->w->t);
    instr_reads(a, nd->tmp[0]);
    instr_reads(a, nd->tmp[1]);
    instr_reads(a, dy);
    instr_writes(a, dx);
    if (nd->w) {
        instr_writes(a, nd->w->g);
        instr_writes(a, nd->b->g);
    }
}

const OpDef op_batchnorm = {.build = build_batchnorm, .params = batchnorm_params};
const NodeDef node_batchnorm = {"batchnorm", GRAD_NODE, N_BATCHNORM_BWD, lower_batchnorm};
const NodeDef node_batchnorm_bwd = {"batchnorm_bwd", GRAD_NONE, 0, lower_batchnorm_bwd};
