/* tokens.c: tokens, [C, H, W] (or [C, L]) -> [H W, C]: each position becomes a token of
 * its C channels (a vision transformer's patch embedding after its strided conv2d, as
 * timm's PatchEmbed's x.flatten(2).transpose(1, 2)), and its inverse untokens, [H W, C]
 * -> [C, H, W] (ConvNeXt's permute back to channels first after its channels-last
 * layers). Graph, backward rules (the gradient transposed back) and lowering (one
 * elementwise copy whose operand is read transposed, fused with what follows). */
#include "op.h"

/* [C, H, W] or [C, L] -> [HW, C] */
static void build_tokens(GraphCtx *c, const LayerArgs *a)
{
    const Layer *l = a->l;
    Tensor *x = a->x;
    if (x->rank != 2 && x->rank != 3)
        layer_error(c, l, "tokens needs a [channels, height, width] or [channels, length] input, got %s",
                    shape_str(x->rank, x->shape));
    int64_t C = x->shape[0], HW = x->numel / C;
    int64_t shp[2] = {HW, C};
    Tensor *y = act_tensor(c, l->path, layer_ident("tokens", a->pfx), 2, shp);
    y->origin = a->at;
    y->what = "tokens [positions, channels]";
    layer_node(c, a, N_TOKENS, x, y);
    c->cur = y;
}

/* y [B, HW, C] reads x [B, C, HW] transposed */
static void lower_tokens(Program *p, Node *nd)
{
    Tensor *y = nd->out;
    INSTR_EW(p, nd, "tokens: [C, HW] -> [HW, C]", y, EW_COPY, x_arg(0),
             opd_at(nd->in[0], ix_transpose(y->shape[0], y->shape[1])));
}

/* in[0] = dy [B, HW, C]; out = dx [B, C, HW] */
static void lower_tokens_bwd(Program *p, Node *nd)
{
    Tensor *dy = nd->in[0];
    INSTR_EW(p, nd, "tokens backward: [HW, C] -> [C, HW]", nd->out, EW_COPY, x_arg(0),
             opd_at(dy, ix_transpose(dy->shape[1], dy->shape[0])));
}

/* [H W, C] -> [C, H, W], H the layer's height */
static void build_untokens(GraphCtx *c, const LayerArgs *a)
{
    const Layer *l = a->l;
    Tensor *x = a->x;
    if (x->rank != 2)
        layer_error(c, l, "untokens needs a [positions, channels] input, got %s",
                    shape_str(x->rank, x->shape));
    int64_t T = x->shape[0], C = x->shape[1];
    if (T % l->height)
        layer_error(c, l, "height %lld does not divide the input's %lld positions (rows of "
                    "equal width)", (long long)l->height, (long long)T);
    int64_t shp[3] = {C, l->height, T / l->height};
    Tensor *y = act_tensor(c, l->path, layer_ident("untokens", a->pfx), 3, shp);
    y->origin = a->at;
    y->what = "channels first [channels, height, width]";
    layer_node(c, a, N_UNTOKENS, x, y);
    c->cur = y;
}

/* y [B, C, HW] reads x [B, HW, C] transposed */
static void lower_untokens(Program *p, Node *nd)
{
    Tensor *x = nd->in[0];
    INSTR_EW(p, nd, "untokens: [HW, C] -> [C, HW]", nd->out, EW_COPY, x_arg(0),
             opd_at(x, ix_transpose(x->shape[1], x->shape[0])));
}

/* in[0] = dy [B, C, HW]; out = dx [B, HW, C] */
static void lower_untokens_bwd(Program *p, Node *nd)
{
    Tensor *dx = nd->out;
    INSTR_EW(p, nd, "untokens backward: [C, HW] -> [HW, C]", dx, EW_COPY, x_arg(0),
             opd_at(nd->in[0], ix_transpose(dx->shape[0], dx->shape[1])));
}

const OpDef op_tokens = {.build = build_tokens};
const OpDef op_untokens = {.build = build_untokens};
const NodeDef node_tokens = {"tokens", GRAD_NODE, N_TOKENS_BWD, lower_tokens};
const NodeDef node_tokens_bwd = {"tokens_bwd", GRAD_NONE, 0, lower_tokens_bwd};
const NodeDef node_untokens = {"untokens", GRAD_NODE, N_UNTOKENS_BWD, lower_untokens};
const NodeDef node_untokens_bwd = {"untokens_bwd", GRAD_NONE, 0, lower_untokens_bwd};
