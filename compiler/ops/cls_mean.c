/* cls_mean.c: cls_mean, [T, d] -> [2 d]: the first token's row, then the mean over the
 * others (DINOv2's classifier input, HF's Dinov2ForImageClassification:
 * torch.cat([x[:, 0], x[:, 1:].mean(dim=1)], dim=1)): graph, backward rule (the first
 * row gets dy's first half, each other token dy's second half / (T - 1)) and lowering:
 * token_mean's sum over the tokens after the first (lower_token_sum), times the float
 * nearest 1/(T - 1), beside the first row by a select on the element's place. */
#include "op.h"

static void build_cls_mean(GraphCtx *c, const LayerArgs *a)
{
    const Layer *l = a->l;
    Tensor *x = a->x;
    if (x->rank != 2 || x->shape[0] < 2)
        layer_error(c, l, "cls_mean needs a [tokens, dim] input of 2 tokens or more, got %s",
                    shape_str(x->rank, x->shape));
    int64_t d2 = 2 * x->shape[1];
    Tensor *y = act_tensor(c, l->path, layer_ident("cls_mean", a->pfx), 1, &d2);
    y->origin = a->at;
    y->what = "the first token, then the mean over the others";
    Node *nd = layer_node(c, a, N_CLS_MEAN, x, y);
    add_flops(c, nd, l->path, (double)x->numel, (double)x->numel, 0);
    c->cur = y;
}

/* s = the sum over the tokens after the first (token_mean.c's lower_token_sum);
 * y = [x's first row, s * (1/(T - 1))] */
static void lower_cls_mean(Program *p, Node *nd)
{
    Tensor *x = nd->in[0], *y = nd->out;
    int64_t R = x->shape[0] - 1, d = x->shape[1];
    Tensor *s = lower_token_sum(p, nd, x, 1, y->name, "cls_mean");
    INSTR_EW(p, nd, "cls_mean: the first token, then the sums over T - 1", y, EW_OTHER,
             x_select(x_head(y->numel, d), x_arg(0), x_mul(x_arg(1), x_const(1.0 / (double)R))),
             opd_at(x, ix_slice(2 * d, (R + 1) * d, 0)), opd_at(s, ix_slice(2 * d, d, -d)));
}

/* in[0] = dy [B, 2 d]; out = dx [B, T, d]: dy's first half on the first row, its second
 * half / (T - 1) on every other (both halves copied out, each read spread over the rows) */
static void lower_cls_mean_bwd(Program *p, Node *nd)
{
    Tensor *dy = nd->in[0], *dx = nd->out;
    int64_t T = dx->shape[0], d = dx->shape[1];
    Tensor *df = lower_temp(p->g, xasprintf("%s_first", dx->name), d, nd->origin,
                            "dy's first half, the first row's gradient [B, d]");
    Tensor *dm = lower_temp(p->g, xasprintf("%s_mean", dx->name), d, nd->origin,
                            "dy's second half, the mean's gradient [B, d]");
    INSTR_EW(p, nd, "cls_mean backward: dy's first half", df, EW_COPY, x_arg(0),
             opd_at(dy, ix_slice(d, 2 * d, 0)));
    INSTR_EW(p, nd, "cls_mean backward: dy's second half", dm, EW_COPY, x_arg(0),
             opd_at(dy, ix_slice(d, 2 * d, d)));
    INSTR_EW(p, nd, "cls_mean backward: the first half on the first row, the second / (T - 1) "
             "on the others", dx, EW_OTHER,
             x_select(x_head(dx->numel, d), x_arg(0), x_mul(x_arg(1), x_const(1.0 / (double)(T - 1)))),
             opd_at(df, ix_spread(d, T)), opd_at(dm, ix_spread(d, T)));
}

const OpDef op_cls_mean = {.build = build_cls_mean};
const NodeDef node_cls_mean = {"cls_mean", GRAD_NODE, N_CLS_MEAN_BWD, lower_cls_mean};
const NodeDef node_cls_mean_bwd = {"cls_mean_bwd", GRAD_NONE, 0, lower_cls_mean_bwd};
