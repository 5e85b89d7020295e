/* span.c: span, [T, 2] -> [2, T]: an extractive question answerer's start and end
 * logits (transformers' qa_outputs(x).split(1, -1), each squeezed: row 0 the start's, row
 * 1 the end's), so that cross_entropy over the last axis against y [2] (the answer's
 * first and last token) is (start's loss + end's loss) / 2, as BertForQuestionAnswering
 * computes it. With the model's positions the places past the row's first sequence (the
 * padding: position below place) hold -1e30, out of every softmax, as no answer lies
 * there. Graph, backward rule (dy transposed back, zeros at the padding) and lowering
 * (one elementwise copy whose operands are read transposed). */
#include "op.h"

/* the padding's logit: exp(-1e30 - max) is 0 in float */
#define SPAN_MASKED (-1e30)

/* [T, 2] -> [2, T], the positions (where the model has them) the node's in[1] */
static void build_span(GraphCtx *c, const LayerArgs *a)
{
    const Layer *l = a->l;
    Tensor *x = a->x;
    if (x->rank != 2 || x->shape[1] != 2)
        layer_error(c, l, "span needs a [tokens, 2] input (a linear of out 2 on every token: "
                    "each token's start and end logits), got %s", shape_str(x->rank, x->shape));
    int64_t T = x->shape[0], shape[2] = {2, T};
    Tensor *y = act_tensor(c, l->path, layer_ident("span", a->pfx), 2, shape);
    y->origin = a->at;
    y->what = "the start and end logits [2, tokens]";
    Node *nd = layer_node(c, a, N_SPAN, x, y);
    if (c->positions) {
        if (c->positions->shape[0] != T)
            layer_error(c, l, "the positions input '%s' holds %lld places, this span's input "
                        "%lld tokens", c->s->positions, (long long)c->positions->shape[0],
                        (long long)T);
        if (c->s->label_smoothing > 0)
            layer_error(c, l, "span over padded rows with the loss's label_smoothing: the "
                        "padding's -1e30 logits would count in its sum over the places");
        nd->in[nd->n_in++] = c->positions;
        c->positions_read++;
    }
    c->cur = y;
}

/* whether place t of a row [2, T] lies past the first sequence: pos[t] < t (operand 1) */
static const Expr *span_padding(int64_t T)
{
    return x_lt(x_cast(x_arg(1)), x_place(T));
}

/* y [B, 2, T] reads x [B, T, 2] transposed; with positions, -1e30 at the padding */
static void lower_span(Program *p, Node *nd)
{
    Tensor *x = nd->in[0], *y = nd->out;
    int64_t T = y->shape[1];
    Operand xt = opd_at(x, ix_transpose(2, T));
    if (nd->n_in < 2) {
        INSTR_EW(p, nd, "span: [T, 2] -> [2, T]", y, EW_COPY, x_arg(0), xt);
        return;
    }
    INSTR_EW(p, nd, "span: [T, 2] -> [2, T], the padding at -1e30", y, EW_OTHER,
             x_select(span_padding(T), x_const(SPAN_MASKED), x_arg(0)), xt,
             opd_at(nd->in[1], ix_spread(T, 2)));
}

/* in[0] = dy [B, 2, T], in[2] = y (the forward's output); out = dx [B, T, 2]: dy
 * transposed back, 0 where the forward wrote the padding's -1e30 (below -1e29 whatever
 * the activations' precision: fp16 holds it as -inf) */
static void lower_span_bwd(Program *p, Node *nd)
{
    Tensor *dy = nd->in[0], *y = nd->in[2], *dx = nd->out;
    int64_t T = dx->shape[0];
    Index back = ix_transpose(T, 2);
    if (nd->fwd->n_in < 2) {
        INSTR_EW(p, nd, "span backward: [2, T] -> [T, 2]", dx, EW_COPY, x_arg(0),
                 opd_at(dy, back));
        return;
    }
    INSTR_EW(p, nd, "span backward: [2, T] -> [T, 2], 0 at the padding", dx, EW_OTHER,
             x_select(x_lt(x_arg(1), x_const(SPAN_MASKED / 10)), x_const(0), x_arg(0)),
             opd_at(dy, back), opd_at(y, back));
}

const OpDef op_span = {.build = build_span};
const NodeDef node_span = {"span", GRAD_NODE, N_SPAN_BWD, lower_span};
const NodeDef node_span_bwd = {"span_bwd", GRAD_NONE, 0, lower_span_bwd};
