/* first_token.c: first_token, [T, d] -> [d]: the first token's row (a vision
 * transformer's class token read by its head: HF ViTForImageClassification's
 * sequence_output[:, 0, :], timm's global_pool "token"): graph, backward rule (dy in
 * the first row, zeros in the others) and lowering (one elementwise copy of a slice). */
#include "op.h"

static void build_first_token(GraphCtx *c, const LayerArgs *a)
{
    const Layer *l = a->l;
    Tensor *x = a->x;
    if (x->rank != 2)
        layer_error(c, l, "first_token needs a [tokens, dim] input, got %s", shape_str(x->rank, x->shape));
    int64_t d = x->shape[1];
    Tensor *y = act_tensor(c, l->path, layer_ident("first_token", a->pfx), 1, &d);
    y->origin = a->at;
    y->what = "the first token's row";
    layer_node(c, a, N_FIRST_TOKEN, x, y);
    c->cur = y;
}

/* y [B, d] = x [B, T, d]'s first rows */
static void lower_first_token(Program *p, Node *nd)
{
    Tensor *x = nd->in[0], *y = nd->out;
    INSTR_EW(p, nd, "first_token: the first row", y, EW_COPY, x_arg(0),
             opd_at(x, ix_slice(y->numel, x->numel, 0)));
}

/* in[0] = dy [B, d]; out = dx [B, T, d]: dy in each sample's first row, 0 below */
static void lower_first_token_bwd(Program *p, Node *nd)
{
    Tensor *dy = nd->in[0], *dx = nd->out;
    int64_t d = dy->numel, T = dx->shape[0];
    INSTR_EW(p, nd, "first_token backward: dy in the first row, 0 in the others", dx, EW_OTHER,
             x_select(x_head(dx->numel, d), x_arg(0), x_const(0)), opd_at(dy, ix_spread(d, T)));
}

const OpDef op_first_token = {.build = build_first_token};
const NodeDef node_first_token = {"first_token", GRAD_NODE, N_FIRST_TOKEN_BWD, lower_first_token};
const NodeDef node_first_token_bwd = {"first_token_bwd", GRAD_NONE, 0, lower_first_token_bwd};
