/* activation.c: the elementwise activations relu, gelu (exact or tanh), silu, tanh,
 * sigmoid, squared_relu, leaky_relu and quick_gelu (CLIP's), and scale (a constant factor), one node kind
 * (Node.act says which): graph, backward rule and lowering (one elementwise op each way,
 * fused later; the backward reads the output where its rule can, so the pre-activation
 * need not live, and scale's reads neither). */
#include "op.h"

/* any shape, kept */
static void build_activation(GraphCtx *c, const LayerArgs *a)
{
    const Layer *l = a->l;
    Tensor *x = a->x;
    const char *at = a->at;
    const char *pfx = a->pfx;
    static const char *nm[] = {"relu", "gelu", "gelu", "silu", "tanh", "sigmoid", "squared_relu",
                               "leaky_relu", "scale", "quick_gelu"};
    int act = l->op == OP_RELU ? ACT_RELU
              : l->op == OP_GELU ? (l->gelu_tanh ? ACT_GELU_TANH : ACT_GELU)
              : l->op == OP_SILU ? ACT_SILU
              : l->op == OP_TANH ? ACT_TANH
              : l->op == OP_SQUARED_RELU ? ACT_SQUARED_RELU
              : l->op == OP_LEAKY_RELU ? ACT_LEAKY_RELU
              : l->op == OP_SCALE ? ACT_SCALE
              : l->op == OP_QUICK_GELU ? ACT_QUICK_GELU
                                 : ACT_SIGMOID;
    Tensor *y = act_tensor(c, l->path, layer_ident(nm[act], pfx), x->rank, x->shape);
    y->origin = at;
    y->what = nm[act];
    Node *nd = layer_node(c, a, N_ACT, x, y);
    nd->act = act;
    nd->p = act == ACT_SCALE ? l->by : l->negative_slope;
    add_flops(c, nd, l->path, (double)x->numel, 2.0 * x->numel, 0);
    c->cur = y;
}

/* An activation of x = operand 0 (p: leaky_relu's negative_slope, scale's factor). */
static const Expr *act_fwd_expr(int act, double p)
{
    const Expr *x = x_arg(0), *zero = x_const(0);
    switch (act) {
    case ACT_RELU: return x_relu(x);
    case ACT_GELU: return x_fn(FN_GELU, x, NULL);
    case ACT_GELU_TANH: return x_fn(FN_GELU_TANH, x, NULL);
    case ACT_SILU: return x_fn(FN_SILU, x, NULL);
    case ACT_TANH: return x_fn(FN_TANH, x, NULL);
    case ACT_SIGMOID: return x_fn(FN_SIGMOID, x, NULL);
    case ACT_SQUARED_RELU: return x_select(x_lt(x, zero), zero, x_mul(x, x));   /* relu(x)^2 */
    /* torch's leaky_relu: x > 0 ? x : x * slope (the slope as a float) */
    case ACT_LEAKY_RELU: return x_select(x_lt(zero, x), x, x_mul(x, x_const(p)));
    case ACT_SCALE: return x_mul(x, x_const(p));   /* the factor as a float, as torch's */
    /* HF's QuickGELUActivation: x * torch.sigmoid(1.702 * x), the factor a float */
    case ACT_QUICK_GELU: return x_mul(x, x_fn(FN_SIGMOID, x_mul(x, x_const(1.702)), NULL));
    }
    unreachable();
}

/* What an activation's backward reads beside dy. */
enum { READS_X, READS_Y, READS_NONE };

/* Backward of an activation: operand 0 = dy, 1 = what the rule reads (x or y). Rules
 * that can use the output do, so the pre-activation (often a GEMM output) need not
 * live. */
static const Expr *act_bwd_expr(int act, double p, int *reads)
{
    *reads = act == ACT_SCALE ? READS_NONE
           : act == ACT_RELU || act == ACT_TANH || act == ACT_SIGMOID ? READS_Y : READS_X;
    const Expr *dy = x_arg(0), *v = x_arg(1), *zero = x_const(0), *one = x_const(1);
    switch (act) {
    case ACT_RELU: return x_select(x_le(v, zero), zero, dy);   /* torch's threshold_backward */
    case ACT_GELU: return x_fn(FN_GELU_BWD, v, dy);
    case ACT_GELU_TANH: return x_fn(FN_GELU_TANH_BWD, v, dy);
    case ACT_SILU: return x_fn(FN_SILU_BWD, v, dy);
    case ACT_TANH: return x_mul(dy, x_sub(one, x_mul(v, v)));  /* dy (1 - y^2) */
    case ACT_SIGMOID: return x_mul(x_mul(dy, v), x_sub(one, v));   /* dy y (1 - y) */
    /* torch's relu(x).pow(2): dy * (2 relu(x)), then threshold_backward at x */
    case ACT_SQUARED_RELU: return x_select(x_le(v, zero), zero, x_mul(dy, x_mul(x_const(2), v)));
    /* torch's leaky_relu_backward reads the input: x > 0 ? dy : dy * slope */
    case ACT_LEAKY_RELU: return x_select(x_lt(zero, v), dy, x_mul(dy, x_const(p)));
    case ACT_SCALE: return x_mul(dy, x_const(p));
    /* with s = sigmoid(1.702 x): dy (s + x 1.702 s (1 - s)), as autograd's chain */
    case ACT_QUICK_GELU: {
        const Expr *s = x_fn(FN_SIGMOID, x_mul(v, x_const(1.702)), NULL);
        return x_mul(dy, x_add(s, x_mul(x_mul(v, s), x_mul(x_const(1.702), x_sub(one, s)))));
    }
    }
    unreachable();
}

static const char *act_name(int act)
{
    static const char *n[] = {"relu", "gelu", "gelu (tanh)", "silu", "tanh", "sigmoid",
                              "squared relu", "leaky relu", "scale", "quick gelu"};
    return n[act];
}

static void lower_act(Program *p, Node *nd)
{
    INSTR_EW(p, nd, act_name(nd->act), nd->out, EW_ACT, act_fwd_expr(nd->act, nd->p), opd(nd->in[0]));
}

/* in[0] = dy, in[1] = x, in[2] = y */
static void lower_act_bwd(Program *p, Node *nd)
{
    int reads;
    const Expr *e = act_bwd_expr(nd->act, nd->p, &reads);
    char *what = xasprintf("%s backward", act_name(nd->act));
    if (reads == READS_NONE)
        INSTR_EW(p, nd, what, nd->out, EW_ACT_BWD, e, opd(nd->in[0]));
    else
        INSTR_EW(p, nd, what, nd->out, EW_ACT_BWD, e, opd(nd->in[0]),
                 opd(reads == READS_Y ? nd->in[2] : nd->in[1]));
}

const OpDef op_relu = {.build = build_activation};
const OpDef op_gelu = {.build = build_activation};
const OpDef op_silu = {.build = build_activation};
const OpDef op_tanh = {.build = build_activation};
const OpDef op_sigmoid = {.build = build_activation};
const OpDef op_squared_relu = {.build = build_activation};
const OpDef op_leaky_relu = {.build = build_activation};
const OpDef op_scale = {.build = build_activation};
const OpDef op_quick_gelu = {.build = build_activation};
const NodeDef node_act = {"act", GRAD_NODE, N_ACT_BWD, lower_act};
const NodeDef node_act_bwd = {"act_bwd", GRAD_NONE, 0, lower_act_bwd};
