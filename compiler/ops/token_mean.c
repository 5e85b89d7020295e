/* token_mean.c: token_mean, [T, d] -> [d]: the mean over the tokens (a vision
 * transformer's global average pooling, timm's global_pool "avg": x.mean(dim=1)), or
 * with "skip": S over the tokens after the first S (CLIP's classifier: x[:, 1:].mean(1)),
 * or with "first_sequence" over the row's first sequence by the model's positions (the
 * text of a padded row: transformers' mean pooling under the attention mask, (x *
 * mask).sum(1) / mask.sum(1), ModernBERT's classifier_pooling "mean"): graph, backward
 * rule (each token it reads gets dy / its count, the others 0) and lowering: the tokens
 * read transposed to [d, T - S] (times their 0 or 1), each row summed in double (the
 * runtime's row sums, as conv2d's bias gradient, into fp32 storage in every precision),
 * times the float nearest 1/(T - S) or over the first sequence's count. */
#include "op.h"

static void build_token_mean(GraphCtx *c, const LayerArgs *a)
{
    const Layer *l = a->l;
    Tensor *x = a->x;
    if (x->rank != 2)
        layer_error(c, l, "token_mean needs a [tokens, dim] input, got %s", shape_str(x->rank, x->shape));
    if (l->skip >= x->shape[0])
        layer_error(c, l, "skip %lld leaves none of the %lld tokens", (long long)l->skip,
                    (long long)x->shape[0]);
    if (l->first_seq && l->skip)
        layer_error(c, l, "first_sequence and skip: the mean is over the row's first sequence "
                    "or over the tokens after the first skip, not both");
    if (l->first_seq && !c->positions)
        layer_error(c, l, "first_sequence needs the model's positions (\"positions\": an input "
                    "[T] of each token's place in its sequence; the padding a sequence of its "
                    "own)");
    if (l->first_seq && c->positions->shape[0] != x->shape[0])
        layer_error(c, l, "the positions input '%s' holds %lld places, this token_mean's input "
                    "%lld tokens", c->s->positions, (long long)c->positions->shape[0],
                    (long long)x->shape[0]);
    int64_t d = x->shape[1];
    Tensor *y = act_tensor(c, l->path, layer_ident("token_mean", a->pfx), 1, &d);
    y->origin = a->at;
    y->what = l->first_seq ? "the mean over the first sequence's tokens"
                           : "the mean over the tokens";
    Node *nd = layer_node(c, a, N_TOKEN_MEAN, x, y);
    nd->conv[0] = l->skip;
    if (l->first_seq) {   /* (the positions: the node's in[1]) */
        nd->in[nd->n_in++] = c->positions;
        c->positions_read++;
    }
    add_flops(c, nd, l->path, (double)x->numel, (double)x->numel, 0);
    c->cur = y;
}

/* s [d] = each row of xt [d, R] summed (in double, into fp32 storage) */
static Tensor *lower_rows_sum(Program *p, Node *nd, Tensor *xt, int64_t d, int64_t R,
                              const char *name, const char *op)
{
    Tensor *s = lower_temp(p->g, xasprintf("%s_sum", name), d, nd->origin,
                           "each row's sum over the tokens [B, rows]");
    s->keep32 = 1;   /* the row sums are written as floats (as a bias gradient's) */
    instr_ew(p, nd, xasprintf("%s: the sums start at 0", op), s, EW_OTHER, x_const(0), NULL, 0);
    Instr *r = instr_add(p, I_CALL, nd->origin, 0);
    r->what = xasprintf("%s: each channel's sum over the tokens", op);
    SET_CALL(r, CALL_ROWSUM_ADD, arg_t(xt), arg_t(s), arg_rows(d), arg_int(R));
    instr_reads(r, xt);
    instr_reads(r, s);
    instr_writes(r, s);
    return s;
}

Tensor *lower_token_sum(Program *p, Node *nd, Tensor *x, int64_t S, const char *name,
                        const char *op)
{
    Tensor *from = x;
    int64_t R = x->shape[0] - S, d = x->shape[1];
    if (S) {
        from = lower_temp(p->g, xasprintf("%s_rest", name), R * d, nd->origin,
                          "the tokens after the skipped [B, T - S, d]");
        INSTR_EW(p, nd, xasprintf("%s: the tokens after the skipped", op), from, EW_COPY,
                 x_arg(0), opd_at(x, ix_slice(R * d, x->numel, S * d)));
    }
    Tensor *xt = lower_temp(p->g, xasprintf("%s_t", name), R * d, nd->origin,
                            "the tokens transposed [B, d, T]");
    INSTR_EW(p, nd, xasprintf("%s: [T, d] -> [d, T]", op), xt, EW_COPY, x_arg(0),
             opd_at(from, ix_transpose(d, R)));
    return lower_rows_sum(p, nd, xt, d, R, name, op);
}

/* first_sequence's weights m [B, T] (1 on the row's first sequence: where a token's
 * position, operand 0, is its place; the padding's start again below theirs) and their
 * count n [B] (fp32 storage: exact), from the positions POS */
static void lower_first_seq(Program *p, Node *nd, Tensor *pos, int64_t T, const char *name,
                            Tensor **m, Tensor **n)
{
    *m = lower_temp(p->g, xasprintf("%s_in", name), T, nd->origin,
                    "1 on the row's first sequence, else 0 [B, T]");
    INSTR_EW(p, nd, "token_mean: 1 on the first sequence (position = place), else 0", *m,
             EW_OTHER, x_select(x_le(x_place(T), x_cast(x_arg(0))), x_const(1), x_const(0)),
             opd(pos));
    *n = lower_rows_sum(p, nd, *m, 1, T, xasprintf("%s_count", name), "token_mean");
}

/* with first_sequence: y = the sum over the tokens of m x, over n */
static void lower_token_mean_first(Program *p, Node *nd)
{
    Tensor *x = nd->in[0], *y = nd->out, *m, *n;
    int64_t T = x->shape[0], d = x->shape[1];
    lower_first_seq(p, nd, nd->in[1], T, y->name, &m, &n);
    Tensor *xt = lower_temp(p->g, xasprintf("%s_t", y->name), T * d, nd->origin,
                            "the first sequence's tokens transposed, 0 elsewhere [B, d, T]");
    INSTR_EW(p, nd, "token_mean: [T, d] -> [d, T], times 1 or 0", xt, EW_OTHER,
             x_mul(x_arg(0), x_arg(1)), opd_at(x, ix_transpose(d, T)), opd_at(m, ix_spread(T, d)));
    Tensor *s = lower_rows_sum(p, nd, xt, d, T, y->name, "token_mean");
    INSTR_EW(p, nd, "token_mean: the sums over the first sequence's count", y, EW_OTHER,
             x_div(x_arg(0), x_arg(1)), opd(s), opd_at(n, ix_spread(1, d)));
}

/* y = the sum over the R = T - S tokens read (lower_token_sum) times 1/R */
static void lower_token_mean(Program *p, Node *nd)
{
    if (nd->n_in > 1) {
        lower_token_mean_first(p, nd);
        return;
    }
    Tensor *x = nd->in[0], *y = nd->out;
    int64_t S = nd->conv[0], R = x->shape[0] - S;
    Tensor *s = lower_token_sum(p, nd, x, S, y->name, "token_mean");
    INSTR_EW(p, nd, "token_mean: the sums over T", y, EW_OTHER,
             x_mul(x_arg(0), x_const(1.0 / (double)R)), opd(s));
}

/* with first_sequence: dx [B, T, d] = dy / n on the first sequence's tokens, 0 on the
 * others (m and n made again from the positions, the forward's in[1]) */
static void lower_token_mean_first_bwd(Program *p, Node *nd)
{
    Tensor *dy = nd->in[0], *dx = nd->out, *m, *n;
    int64_t T = dx->shape[0], d = dx->shape[1];
    lower_first_seq(p, nd, nd->fwd->in[1], T, xasprintf("%s_bwd", nd->fwd->out->name), &m, &n);
    INSTR_EW(p, nd, "token_mean backward: dy / n on the first sequence's tokens, 0 on the "
             "others", dx, EW_OTHER,
             x_select(x_lt(x_const(0.5), x_arg(2)), x_div(x_arg(0), x_arg(1)), x_const(0)),
             opd_at(dy, ix_spread(d, T)), opd_at(n, ix_spread(1, T * d)), opd_at(m, ix_div(d)));
}

/* in[0] = dy [B, d]; out = dx [B, T, d] = dy / R on every token read, 0 on the S skipped */
static void lower_token_mean_bwd(Program *p, Node *nd)
{
    if (nd->fwd->n_in > 1) {
        lower_token_mean_first_bwd(p, nd);
        return;
    }
    Tensor *dy = nd->in[0], *dx = nd->out;
    int64_t T = dx->shape[0], d = dx->shape[1], S = nd->fwd->conv[0];
    const Expr *part = x_mul(x_arg(0), x_const(1.0 / (double)(T - S)));
    INSTR_EW(p, nd, S ? "token_mean backward: 0 on the skipped tokens, dy / (T - S) on the "
             "others" : "token_mean backward: dy / T on every token", dx, EW_OTHER,
             S ? x_select(x_head(dx->numel, S * d), x_const(0), part) : part,
             opd_at(dy, ix_spread(d, T)));
}

const OpDef op_token_mean = {.build = build_token_mean};
const NodeDef node_token_mean = {"token_mean", GRAD_NODE, N_TOKEN_MEAN_BWD, lower_token_mean};
const NodeDef node_token_mean_bwd = {"token_mean_bwd", GRAD_NONE, 0, lower_token_mean_bwd};
