/* tokens.c: tokens, [C, H, W] (or [C, L]) -> [H W, C]: each position becomes a token of
 * its C channels (a vision transformer's patch embedding after its strided conv2d, as
 * timm's PatchEmbed's x.flatten(2).transpose(1, 2)): graph, backward rule (the gradient
 * transposed back) and lowering (one elementwise copy whose operand is read transposed,
 * fused with what follows). */
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

const OpDef op_tokens = {.build = build_tokens};
const NodeDef node_tokens = {"tokens", GRAD_NODE, N_TOKENS_BWD, lower_tokens};
const NodeDef node_tokens_bwd = {"tokens_bwd", GRAD_NONE, 0, lower_tokens_bwd};
