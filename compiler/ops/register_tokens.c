/* register_tokens.c: register_tokens, [T, d] -> [T + R, d]: R learned rows (registers)
 * after the first token, as DINOv2 with registers puts them after its class token
 * (HF's embeddings.register_tokens, after the positions are added): graph, backward
 * rule (the tokens' gradient is dy without the register rows, the registers' the sum
 * of their rows of dy over the batch) and lowering (one elementwise loop that takes the
 * first token, a register or the token R rows before, by a select on the element's
 * place). */
#include "op.h"

static int register_tokens_params(const Layer *l, const char **out)
{
    out[0] = "weight";
    return 1;
}

/* [T, d] -> [T + R, d]; W [R, d] (normal, std 0.02 by default, as cls_token's) */
static void build_register_tokens(GraphCtx *c, const LayerArgs *a)
{
    const Layer *l = a->l;
    Tensor *x = a->x;
    if (x->rank != 2)
        layer_error(c, l, "register_tokens needs a [tokens, dim] input, got %s",
                    shape_str(x->rank, x->shape));
    if (l->count <= 0)
        layer_error(c, l, "register_tokens needs count: how many registers");
    int64_t d = x->shape[1], R = l->count, shp[2] = {x->shape[0] + R, d}, wshp[2] = {R, d};
    Tensor *y = act_tensor(c, l->path, layer_ident("registers", a->pfx), 2, shp);
    y->origin = a->at;
    y->what = "the first token, the registers, then the other tokens";
    Node *nd = layer_node(c, a, N_REGISTER_TOKENS, x, y);
    nd->w = add_param(c->g, a->pfx, "weight", 2, wshp, RT_INIT_NORMAL,
                      a->init.kind == INIT_DEFAULT ? 0.02 : init_std(c, a->init, 0), l->path);
    c->cur = y;
}

/* y [B, T + R, d]: x's first row, then W's R rows, then x's rows from the second (read
 * R rows back; W at the element's place less one row, no sample stride) */
static void lower_register_tokens(Program *p, Node *nd)
{
    Tensor *x = nd->in[0], *y = nd->out;
    int64_t d = x->shape[1], R = nd->w->t->shape[0];
    INSTR_EW(p, nd, "register_tokens: the first token, the registers, then the tokens", y,
             EW_OTHER,
             x_select(x_head(y->numel, d), x_arg(0),
                      x_select(x_head(y->numel, (R + 1) * d), x_arg(1), x_arg(2))),
             opd_at(x, ix_slice(y->numel, x->numel, 0)),
             opd_at(nd->w->t, ix_slice(y->numel, 0, -d)),
             opd_at(x, ix_slice(y->numel, x->numel, -R * d)));
}

/* in[0] = dy [B, T + R, d]; out = dx [B, T, d] (NULL: not wanted) */
static void lower_register_tokens_bwd(Program *p, Node *nd)
{
    Tensor *dy = nd->in[0], *dx = nd->out;
    int64_t d = dy->shape[1], R = nd->w->t->shape[0];
    if (dx)
        INSTR_EW(p, nd, "register_tokens backward: the tokens' rows of dy", dx, EW_OTHER,
                 x_select(x_head(dx->numel, d), x_arg(0), x_arg(1)),
                 opd_at(dy, ix_slice(dx->numel, dy->numel, 0)),
                 opd_at(dy, ix_slice(dx->numel, dy->numel, R * d)));
    Tensor *regs = lower_temp(p->g, xasprintf("%s_rows", nd->w->g->name), R * d, nd->origin,
                              "dy's register rows of each sample [B, R d]");
    INSTR_EW(p, nd, "register_tokens backward: dy's register rows", regs, EW_COPY, x_arg(0),
             opd_at(dy, ix_slice(R * d, dy->numel, d)));
    Instr *a = instr_add(p, I_CALL, nd->origin, 1);
    a->what = xstrdup("register_tokens backward: dW += sum over the batch of dy's register rows");
    SET_CALL(a, CALL_COLSUM_ADD, arg_t(regs), arg_t(nd->w->g), arg_rows(1), arg_int(R * d));
    instr_reads(a, regs);
    instr_writes(a, nd->w->g);
}

const OpDef op_register_tokens = {.build = build_register_tokens, .params = register_tokens_params};
const NodeDef node_register_tokens = {"register_tokens", GRAD_NODE, N_REGISTER_TOKENS_BWD,
                                      lower_register_tokens};
const NodeDef node_register_tokens_bwd = {"register_tokens_bwd", GRAD_NONE, 0,
                                          lower_register_tokens_bwd};
