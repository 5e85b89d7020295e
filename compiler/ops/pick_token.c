/* pick_token.c: first_token and last_token, [T, d] -> [d]: one token's row. first_token
 * reads the first (a vision transformer's class token read by its head: HF
 * ViTForImageClassification's sequence_output[:, 0, :], timm's global_pool "token");
 * last_token the last (a decoder's sequence classifier over rows padded on the left: HF
 * LlamaForSequenceClassification's pooled_logits at each text's last token), or with
 * `segments` K > 1, [T, d] -> [K, d], the last row of each of K equal runs (a reward
 * model's pair of texts in one row). Graph, backward rule (dy in those rows, zeros in the
 * others) and lowering (one elementwise copy of a slice). */
#include "op.h"

static void build_pick(GraphCtx *c, const LayerArgs *a, const char *op, int kind,
                       const char *what)
{
    const Layer *l = a->l;
    Tensor *x = a->x;
    if (x->rank != 2)
        layer_error(c, l, "%s needs a [tokens, dim] input, got %s", op,
                    shape_str(x->rank, x->shape));
    int64_t K = kind == N_LAST_TOKEN ? l->segments : 1, shape[2] = {K, x->shape[1]};
    if (x->shape[0] % K)
        layer_error(c, l, "segments %lld must divide the input's %lld tokens (equal runs)",
                    (long long)K, (long long)x->shape[0]);
    Tensor *y = act_tensor(c, l->path, layer_ident(op, a->pfx), K > 1 ? 2 : 1,
                           shape + (K > 1 ? 0 : 1));
    y->origin = a->at;
    y->what = what;
    layer_node(c, a, kind, x, y);
    c->cur = y;
}

static void build_first_token(GraphCtx *c, const LayerArgs *a)
{
    build_pick(c, a, "first_token", N_FIRST_TOKEN, "the first token's row");
}

static void build_last_token(GraphCtx *c, const LayerArgs *a)
{
    build_pick(c, a, "last_token", N_LAST_TOKEN,
               a->l->segments > 1 ? "each segment's last row" : "the last token's row");
}

/* y [B, d] = x [B, T, d]'s first rows */
static void lower_first_token(Program *p, Node *nd)
{
    Tensor *x = nd->in[0], *y = nd->out;
    INSTR_EW(p, nd, "first_token: the first row", y, EW_COPY, x_arg(0),
             opd_at(x, ix_slice(y->numel, x->numel, 0)));
}

/* y [B, K, d] = x [B, K, S, d]'s last rows (x [B, K S, d] as K runs of S) */
static void lower_last_token(Program *p, Node *nd)
{
    Tensor *x = nd->in[0], *y = nd->out;
    int64_t d = x->shape[1], S = x->shape[0] / (y->numel / d);
    INSTR_EW(p, nd, S == x->shape[0] ? "last_token: the last row" : "last_token: each segment's "
             "last row", y, EW_COPY, x_arg(0), opd_at(x, ix_slice(d, S * d, (S - 1) * d)));
}

/* in[0] = dy [B, d]; out = dx [B, T, d]: dy in each sample's first row, 0 below */
static void lower_first_token_bwd(Program *p, Node *nd)
{
    Tensor *dy = nd->in[0], *dx = nd->out;
    int64_t d = dy->numel, T = dx->shape[0];
    INSTR_EW(p, nd, "first_token backward: dy in the first row, 0 in the others", dx, EW_OTHER,
             x_select(x_head(dx->numel, d), x_arg(0), x_const(0)), opd_at(dy, ix_spread(d, T)));
}

/* in[0] = dy [B, K, d]; out = dx [B, K, S, d]: dy in each run's last row, 0 above */
static void lower_last_token_bwd(Program *p, Node *nd)
{
    Tensor *dy = nd->in[0], *dx = nd->out;
    int64_t d = dx->shape[1], S = dx->shape[0] / (dy->numel / d);
    INSTR_EW(p, nd, S == dx->shape[0] ? "last_token backward: dy in the last row, 0 in the "
             "others" : "last_token backward: dy in each segment's last row, 0 in the others",
             dx, EW_OTHER, x_select(x_head(S * d, (S - 1) * d), x_const(0), x_arg(0)),
             opd_at(dy, ix_spread(d, S)));
}

const OpDef op_first_token = {.build = build_first_token};
const OpDef op_last_token = {.build = build_last_token};
const NodeDef node_first_token = {"first_token", GRAD_NODE, N_FIRST_TOKEN_BWD, lower_first_token};
const NodeDef node_first_token_bwd = {"first_token_bwd", GRAD_NONE, 0, lower_first_token_bwd};
const NodeDef node_last_token = {"last_token", GRAD_NODE, N_LAST_TOKEN_BWD, lower_last_token};
const NodeDef node_last_token_bwd = {"last_token_bwd", GRAD_NONE, 0, lower_last_token_bwd};
