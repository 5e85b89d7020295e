/* layer_scale.c: layer_scale, x [..., d] times a learned weight [d] over the last axis
 * (ConvNeXt's layer_scale_parameter, CaiT's and DINOv2's LayerScale), the weight
 * initialized to the layer's init_value. Graph, backward rule (dx = dy w; dw the sum
 * over every row of dy x) and lowering (elementwise products, fused with their
 * neighbours, and one column sum). */
#include "op.h"

static int layer_scale_params(const Layer *l, const char **out)
{
    (void)l;
    out[0] = "weight";
    return 1;
}

/* [..., d] kept; W [d] */
static void build_layer_scale(GraphCtx *c, const LayerArgs *a)
{
    const Layer *l = a->l;
    Tensor *x = a->x;
    if (x->rank < 1)
        layer_error(c, l, "layer_scale needs an input with at least one axis, got a scalar");
    int64_t d = x->shape[x->rank - 1];
    Tensor *y = act_tensor(c, l->path, layer_ident("layer_scale", a->pfx), x->rank, x->shape);
    y->origin = a->at;
    y->what = "x times the layer's weight";
    Node *nd = layer_node(c, a, N_LAYER_SCALE, x, y);
    nd->w = add_param(c->g, a->pfx, "weight", 1, &d, RT_INIT_CONST, l->init_value, l->path);
    add_flops(c, nd, l->path, (double)x->numel, (double)x->numel, 2.0 * x->numel);
    c->cur = y;
}

/* y = x * W[i % d] */
static void lower_layer_scale(Program *p, Node *nd)
{
    Tensor *x = nd->in[0];
    int64_t d = x->shape[x->rank - 1];
    INSTR_EW(p, nd, "layer_scale: x * weight", nd->out, EW_OTHER, x_mul(x_arg(0), x_arg(1)),
             opd(x), opd_at(nd->w->t, ix_mod(d)));
}

/* in[0] = dy, in[1] = x; out = dx (NULL: not wanted). dW += sum over the rows of dy x */
static void lower_layer_scale_bwd(Program *p, Node *nd)
{
    Tensor *dy = nd->in[0], *x = nd->in[1], *dx = nd->out;
    int64_t d = x->shape[x->rank - 1];
    if (dx)
        INSTR_EW(p, nd, "layer_scale backward: dx = dy * weight", dx, EW_OTHER,
                 x_mul(x_arg(0), x_arg(1)), opd(dy), opd_at(nd->w->t, ix_mod(d)));
    Tensor *prod = lower_temp(p->g, xasprintf("%s_dyx", nd->w->g->name), x->numel, nd->origin,
                              "dy * x, summed into the layer_scale weight's gradient");
    INSTR_EW(p, nd, "layer_scale backward: dy * x", prod, EW_OTHER, x_mul(x_arg(0), x_arg(1)),
             opd(dy), opd(x));
    Instr *a = instr_add(p, I_CALL, nd->origin, 1);
    a->what = xstrdup("layer_scale backward: dW += sum over the rows of dy * x");
    SET_CALL(a, CALL_COLSUM_ADD, arg_t(prod), arg_t(nd->w->g), arg_rows(x->numel / d),
             arg_int(d));
    instr_reads(a, prod);
    instr_writes(a, nd->w->g);
}

const OpDef op_layer_scale = {.build = build_layer_scale, .params = layer_scale_params};
const NodeDef node_layer_scale = {"layer_scale", GRAD_NODE, N_LAYER_SCALE_BWD, lower_layer_scale};
const NodeDef node_layer_scale_bwd = {"layer_scale_bwd", GRAD_NONE, 0, lower_layer_scale_bwd};
