/* pool.c: maxpool2d and avgpool2d over [C, H, W] (stride defaults to the kernel): the
 * graph and shapes, the backward rule and the lowering (runtime calls; maxpool's
 * backward finds the argmax again from x). maxpool2d's padding is a node of its own
 * (N_PAD: the input in planes bordered by -inf, one elementwise loop each way) before a
 * pool without padding: a border element is never the maximum, as PyTorch's window
 * never visits it. */
#include <math.h>
#include <string.h>
#include "op.h"

/* x [C, H, W] bordered by p rows and columns of -inf on each side */
static Tensor *build_pad(GraphCtx *c, const LayerArgs *a, Tensor *x, int64_t p)
{
    int64_t shp[3] = {x->shape[0], x->shape[1] + 2 * p, x->shape[2] + 2 * p};
    Tensor *y = act_tensor(c, a->l->path, layer_ident("maxpool_pad", a->pfx), 3, shp);
    y->origin = a->at;
    y->what = "maxpool2d's input bordered by -inf (its padding)";
    Node *nd = layer_node(c, a, N_PAD, x, y);
    nd->conv[5] = p;
    return y;
}

/* [C, H, W] -> [C, OH, OW], OH = (H + 2 padding - kernel) / stride + 1 (OW alike) */
static void build_pool(GraphCtx *c, const LayerArgs *a)
{
    const Layer *l = a->l;
    Tensor *x = a->x;
    const char *at = a->at;
    const char *pfx = a->pfx;
    if (x->rank != 3)
        layer_error(c, l, "%s needs a [channels, height, width] input, got %s", op_info[l->op].name,
                    shape_str(x->rank, x->shape));
    if (2 * l->padding > l->kernel)
        layer_error(c, l, "padding %lld is more than half the kernel %lld (PyTorch refuses it too: "
                    "a window would hold padding alone)", (long long)l->padding, (long long)l->kernel);
    if (l->padding)
        x = build_pad(c, a, x, l->padding);
    int64_t C = x->shape[0], H = x->shape[1], W = x->shape[2];
    int64_t k = l->kernel, s = l->stride ? l->stride : l->kernel;
    if (H < k || W < k)
        layer_error(c, l, "kernel %lld is larger than the input %lldx%lld", (long long)k,
                    (long long)H, (long long)W);
    int64_t OH = (H - k) / s + 1, OW = (W - k) / s + 1;
    int64_t shp[3] = {C, OH, OW};
    int mx = l->op == OP_MAXPOOL2D;
    Tensor *y = act_tensor(c, l->path, layer_ident(mx ? "maxpool" : "avgpool", pfx), 3, shp);
    y->origin = at;
    y->what = mx ? "maxpool2d output" : "avgpool2d output";
    Node *nd = layer_node(c, a, mx ? N_MAXPOOL : N_AVGPOOL, x, y);
    int64_t cv[8] = {C, H, W, k, s, 0, OH, OW};
    memcpy(nd->conv, cv, sizeof cv);
    add_flops(c, nd, l->path, (double)C * OH * OW * k * k, (double)C * OH * OW * k * k, 0);
    c->cur = y;
}

/* Max or average pooling. */
static void lower_pool(Program *p, Node *nd)
{
    Tensor *x = nd->in[0], *y = nd->out;
    Instr *a = instr_add(p, I_CALL, nd->origin, 0);
    int mx = nd->kind == N_MAXPOOL;
    a->what = xstrdup(mx ? "maxpool2d" : "avgpool2d");
    SET_CALL(a, mx ? CALL_MAXPOOL_FWD : CALL_AVGPOOL_FWD, arg_t(x), arg_t(y),
             arg_rows(nd->conv[0]), arg_int(nd->conv[1]), arg_int(nd->conv[2]),
             arg_int(nd->conv[3]), arg_int(nd->conv[4]), arg_int(nd->conv[6]),
             arg_int(nd->conv[7]));
    instr_reads(a, x);
    instr_writes(a, y);
}

/* Pooling's backward pass. */
static void lower_pool_bwd(Program *p, Node *nd)
{
    Tensor *dy = nd->in[0], *x = nd->in[1], *y = nd->out;
    int mx = nd->kind == N_MAXPOOL_BWD;
    Instr *a = instr_add(p, I_CALL, nd->origin, 1);
    a->what = xstrdup(mx ? "maxpool2d backward (argmax found again from x)" : "avgpool2d backward");
    Arg shape[7] = {arg_rows(nd->conv[0]), arg_int(nd->conv[1]), arg_int(nd->conv[2]),
                    arg_int(nd->conv[3]), arg_int(nd->conv[4]), arg_int(nd->conv[6]),
                    arg_int(nd->conv[7])};
    if (mx)
        SET_CALL(a, CALL_MAXPOOL_BWD, arg_t(x), arg_t(dy), arg_t(y), shape[0], shape[1],
                 shape[2], shape[3], shape[4], shape[5], shape[6]);
    else
        SET_CALL(a, CALL_AVGPOOL_BWD, arg_t(dy), arg_t(y), shape[0], shape[1], shape[2],
                 shape[3], shape[4], shape[5], shape[6]);
    if (mx)
        instr_reads(a, x);
    instr_reads(a, dy);
    instr_writes(a, y);
}

/* y [B, C, H + 2p, W + 2p] = x inside, -inf on the border */
static void lower_pad(Program *p, Node *nd)
{
    Tensor *x = nd->in[0], *y = nd->out;
    int64_t pad = nd->conv[5], R = y->shape[1], Cc = y->shape[2];
    INSTR_EW(p, nd, "maxpool2d's padding: -inf around each plane", y, EW_OTHER,
             x_select(x_inside(R, Cc, pad), x_arg(0), x_const(-INFINITY)),
             opd_at(x, ix_unpad(Cc, R, pad)));
}

/* in[0] = dy [B, C, H + 2p, W + 2p]; out = dx [B, C, H, W], dy's inside */
static void lower_pad_bwd(Program *p, Node *nd)
{
    Tensor *dy = nd->in[0], *dx = nd->out;
    int64_t pad = nd->conv[5];
    INSTR_EW(p, nd, "maxpool2d's padding backward: the inside of dy", dx, EW_COPY, x_arg(0),
             opd_at(dy, ix_pad_in(dx->shape[2], dx->shape[1], pad)));
}

const NodeDef node_pad = {"pad", GRAD_NODE, N_PAD_BWD, lower_pad};
const NodeDef node_pad_bwd = {"pad_bwd", GRAD_NONE, 0, lower_pad_bwd};
const OpDef op_maxpool2d = {.build = build_pool};
const OpDef op_avgpool2d = {.build = build_pool};
const NodeDef node_maxpool = {"maxpool", GRAD_NODE, N_MAXPOOL_BWD, lower_pool};
const NodeDef node_avgpool = {"avgpool", GRAD_NODE, N_AVGPOOL_BWD, lower_pool};
const NodeDef node_maxpool_bwd = {"maxpool_bwd", GRAD_NONE, 0, lower_pool_bwd};
const NodeDef node_avgpool_bwd = {"avgpool_bwd", GRAD_NONE, 0, lower_pool_bwd};
