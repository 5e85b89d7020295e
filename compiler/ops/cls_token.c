/* cls_token.c: cls_token, [T, d] -> [T + 1, d]: a learned row (the class token) before
 * the tokens, as a vision transformer's (HF ViT's embeddings.cls_token, timm's
 * cls_token): graph, backward rule (the tokens' gradient is dy's last T rows, the
 * row's the sum of dy's first rows over the batch) and lowering (one elementwise loop
 * that takes the row or the token before, by a select on the element's place). */
#include "op.h"

static int cls_token_params(const Layer *l, const char **out)
{
    out[0] = "weight";
    return 1;
}

/* [T, d] -> [T + 1, d]; W [d] (normal, std 0.02 by default: HF ViT's initializer_range) */
static void build_cls_token(GraphCtx *c, const LayerArgs *a)
{
    const Layer *l = a->l;
    Tensor *x = a->x;
    if (x->rank != 2)
        layer_error(c, l, "cls_token needs a [tokens, dim] input, got %s", shape_str(x->rank, x->shape));
    int64_t d = x->shape[1], shp[2] = {x->shape[0] + 1, d};
    Tensor *y = act_tensor(c, l->path, layer_ident("cls_token", a->pfx), 2, shp);
    y->origin = a->at;
    y->what = "the class token, then the tokens";
    Node *nd = layer_node(c, a, N_CLS_TOKEN, x, y);
    nd->w = add_param(c->g, a->pfx, "weight", 1, &d, RT_INIT_NORMAL,
                      a->init.kind == INIT_DEFAULT ? 0.02 : init_std(c, a->init, 0), l->path);
    c->cur = y;
}

/* y [B, T + 1, d]: W where the row is a sample's first, else x's row before */
static void lower_cls_token(Program *p, Node *nd)
{
    Tensor *x = nd->in[0], *y = nd->out;
    int64_t d = x->shape[1];
    INSTR_EW(p, nd, "cls_token: the class token, then the tokens", y, EW_OTHER,
             x_select(x_head(y->numel, d), x_arg(0), x_arg(1)), opd_at(nd->w->t, ix_mod(d)),
             opd_at(x, ix_slice(y->numel, x->numel, -d)));
}

/* in[0] = dy [B, T + 1, d]; out = dx [B, T, d] (NULL: not wanted) */
static void lower_cls_token_bwd(Program *p, Node *nd)
{
    Tensor *dy = nd->in[0], *dx = nd->out;
    int64_t d = dy->shape[1];
    if (dx)
        INSTR_EW(p, nd, "cls_token backward: the tokens' rows of dy", dx, EW_COPY, x_arg(0),
                 opd_at(dy, ix_slice(dx->numel, dy->numel, d)));
    Tensor *first = lower_temp(p->g, xasprintf("%s_first", nd->w->g->name), d, nd->origin,
                               "dy's first row of each sample [B, d]");
    INSTR_EW(p, nd, "cls_token backward: dy's first rows", first, EW_COPY, x_arg(0),
             opd_at(dy, ix_slice(d, dy->numel, 0)));
    Instr *a = instr_add(p, I_CALL, nd->origin, 1);
    a->what = xstrdup("cls_token backward: dW += sum over the batch of dy's first rows");
    SET_CALL(a, CALL_COLSUM_ADD, arg_t(first), arg_t(nd->w->g), arg_rows(1), arg_int(d));
    instr_reads(a, first);
    instr_writes(a, nd->w->g);
}

const OpDef op_cls_token = {.build = build_cls_token, .params = cls_token_params};
const NodeDef node_cls_token = {"cls_token", GRAD_NODE, N_CLS_TOKEN_BWD, lower_cls_token};
const NodeDef node_cls_token_bwd = {"cls_token_bwd", GRAD_NONE, 0, lower_cls_token_bwd};
