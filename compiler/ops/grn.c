/* grn.c: grn, ConvNeXt V2's global response normalization over [T, C] (the tokens of an
 * image, channels last): each channel's L2 norm over the sample's T rows, G_c, over
 * their mean plus 1e-6, N_c = G_c / (mean G + 1e-6), and y = weight (x N) + bias + x.
 * G and its mean saved for the backward pass (fp32 in any precision). Graph, backward
 * rule and lowering (runtime calls: rt_grn_fwd, rt_grn_bwd). */
#include "op.h"

static int grn_params(const Layer *l, const char **out)
{
    (void)l;
    out[0] = "weight";
    out[1] = "bias";
    return 2;
}

/* [T, C] kept; G [C + 1] a sample saved; W, b [C] (zeros: the identity at init) */
static void build_grn(GraphCtx *c, const LayerArgs *a)
{
    const Layer *l = a->l;
    Tensor *x = a->x;
    if (x->rank != 2)
        layer_error(c, l, "grn needs a [positions, channels] input (tokens, channels last), "
                    "got %s", shape_str(x->rank, x->shape));
    int64_t C = x->shape[1], gs = C + 1;
    Tensor *y = act_tensor(c, l->path, layer_ident("grn", a->pfx), 2, x->shape);
    Tensor *g = act_tensor(c, l->path, layer_ident("grn_norms", a->pfx), 1, &gs);
    y->origin = g->origin = a->at;
    y->what = "grn output";
    g->what = "grn: each channel's L2 norm, then their mean + 1e-6, saved for backward";
    g->keep32 = 1;
    Node *nd = layer_node(c, a, N_GRN, x, y);
    nd->tmp[0] = g;
    nd->w = add_param(c->g, a->pfx, "weight", 1, &C, RT_INIT_CONST, 0.0, l->path);
    nd->b = add_param(c->g, a->pfx, "bias", 1, &C, RT_INIT_CONST, 0.0, l->path);
    add_flops(c, nd, l->path, 6.0 * x->numel, 8.0 * x->numel, 0);
    c->cur = y;
}

static void lower_grn(Program *p, Node *nd)
{
    Tensor *x = nd->in[0], *y = nd->out, *g = nd->tmp[0];
    Instr *a = instr_add(p, I_CALL, nd->origin, 0);
    a->what = xstrdup("grn: x (1 + weight N) + bias, N each channel's norm over the mean's");
    if (p->eval)
        g->what = "grn norms (validation: written, not read)";
    SET_CALL(a, CALL_GRN_FWD, arg_t(x), arg_t(nd->w->t), arg_t(nd->b->t), arg_t(y), arg_t(g),
             arg_rows(1), arg_int(x->shape[0]), arg_int(x->shape[1]));
    instr_reads(a, x);
    instr_reads(a, nd->w->t);
    instr_reads(a, nd->b->t);
    instr_writes(a, y);
    instr_writes(a, g);
}

/* in[0] = dy, in[1] = x; out = dx (NULL: not wanted) */
static void lower_grn_bwd(Program *p, Node *nd)
{
    Tensor *dy = nd->in[0], *x = nd->in[1], *g = nd->tmp[0];
    Tensor *dx = dx_or_unused(p->g, nd, x, nd->out);
    Instr *a = instr_add(p, I_CALL, nd->origin, 1);
    a->what = xstrdup("grn backward");
    SET_CALL(a, CALL_GRN_BWD, arg_t(x), arg_t(nd->w->t), arg_t(g), arg_t(dy), arg_t(dx),
             arg_t(nd->w->g), arg_t(nd->b->g), arg_rows(1), arg_int(x->shape[0]),
             arg_int(x->shape[1]));
    instr_reads(a, x);
    instr_reads(a, nd->w->t);
    instr_reads(a, g);
    instr_reads(a, dy);
    instr_writes(a, dx);
    instr_writes(a, nd->w->g);
    instr_writes(a, nd->b->g);
}

const OpDef op_grn = {.build = build_grn, .params = grn_params};
const NodeDef node_grn = {"grn", GRAD_NODE, N_GRN_BWD, lower_grn};
const NodeDef node_grn_bwd = {"grn_bwd", GRAD_NONE, 0, lower_grn_bwd};
