/* pos_embedding.c: x + learned position rows over [T, dim] (T at most max_len): graph,
 * backward rule (dx is dy itself; the weight's gradient sums dy over the batch) and
 * lowering (one elementwise add, fused later; in the decode program a call that adds
 * the row of the position it computes). With the model's positions (packed rows) each
 * token's position's row instead: an embedding of the positions, then an add. */
#include "op.h"

static int pos_embedding_params(const Layer *l, const char **out)
{
    out[0] = "weight";
    return 1;
}

/* The layer's weight W [max_len, dim] on node nd */
static void add_weight(GraphCtx *c, const LayerArgs *a, Node *nd)
{
    int64_t ws[2] = {a->l->max_len, a->x->shape[1]};
    nd->w = add_param(c->g, a->pfx, "weight", 2, ws, RT_INIT_NORMAL,
                      a->init.kind == INIT_DEFAULT ? 1.0 : init_std(c, a->init, 0), a->l->path);
}

/* Packed rows: P[t] = W[pos[t]] (an embedding node whose ids are the positions: the
 * loader has checked each is 0 or one more than the place before's, so below T), then
 * y = x + P; W's gradient is the embedding's, dW[pos[t]] += dy[t]. */
static void build_packed_rows(GraphCtx *c, const LayerArgs *a)
{
    const Layer *l = a->l;
    Tensor *x = a->x;
    Tensor *rows = act_tensor(c, l->path, layer_ident("pos_rows", a->pfx), 2, x->shape);
    Tensor *y = act_tensor(c, l->path, layer_ident("pos_embedding", a->pfx), 2, x->shape);
    rows->origin = y->origin = a->at;
    rows->what = "each token's position's row (the model's positions)";
    y->what = "x + each token's position's row";
    add_weight(c, a, layer_node(c, a, N_EMBEDDING, c->positions, rows));
    Node *nd = layer_node(c, a, N_ADD, x, y);
    nd->in[nd->n_in++] = rows;
    add_flops(c, nd, l->path, (double)x->numel, 0, 0);
    c->positions_read++;
    c->cur = y;
}

/* [T, dim] kept (T <= max_len); W [max_len, dim] */
static void build_pos_embedding(GraphCtx *c, const LayerArgs *a)
{
    const Layer *l = a->l;
    Tensor *x = a->x;
    const char *at = a->at;
    const char *pfx = a->pfx;
    if (x->rank != 2)
        layer_error(c, l, "pos_embedding needs a [T, dim] input, got %s", shape_str(x->rank, x->shape));
    if (x->shape[0] > l->max_len)
        layer_error(c, l, "the sequence has %lld positions but max_len is %lld", (long long)x->shape[0],
                    (long long)l->max_len);
    if (c->positions) {
        build_packed_rows(c, a);
        return;
    }
    Tensor *y = act_tensor(c, l->path, layer_ident("pos_embedding", pfx), 2, x->shape);
    y->origin = at;
    y->what = "x + position rows";
    Node *nd = layer_node(c, a, N_POS_EMBEDDING, x, y);
    add_weight(c, a, nd);
    add_flops(c, nd, l->path, (double)x->numel, 0, 0);
    c->cur = y;
}

static void lower_pos_embedding(Program *p, Node *nd)
{
    Tensor *x = nd->in[0];
    if (p->decode) {   /* one position a row (decode.c): its place's row */
        Instr *a = instr_add(p, I_CALL, nd->origin, 0);
        a->what = xstrdup("pos_embedding: + each row's position's row (e->place)");
        SET_CALL(a, CALL_POS_ROW_ADD, arg_t(x), arg_t(nd->w->t), arg_t(nd->out), arg_rows(1),
                 arg_int(x->numel));
        instr_reads(a, x);
        instr_reads(a, nd->w->t);
        instr_writes(a, nd->out);
        return;
    }
    /* the position rows: one row of x's size, repeated over the batch */
    INSTR_EW(p, nd, "pos_embedding: + position rows", nd->out, EW_ADD, x_add(x_arg(0), x_arg(1)),
             opd(x), opd_at(nd->w->t, ix_mod(x->numel)));
}

/* in[0] = dy */
static void lower_pos_embedding_bwd(Program *p, Node *nd)
{
    Tensor *dy = nd->in[0];
    Instr *a = instr_add(p, I_CALL, nd->origin, 1);
    a->what = xstrdup("pos_embedding backward: dW[t] += sum over the batch of dy[t]");
    SET_CALL(a, CALL_COLSUM_ADD, arg_t(dy), arg_t(nd->w->g), arg_rows(1), arg_int(dy->numel));
    instr_reads(a, dy);
    instr_writes(a, nd->w->g);
}

const OpDef op_pos_embedding = {.build = build_pos_embedding,
                                 .params = pos_embedding_params};
const NodeDef node_pos_embedding = {"pos_embedding", GRAD_PASS_PARAMS, N_POS_EMBEDDING_BWD,
                                    lower_pos_embedding};
const NodeDef node_pos_embedding_bwd = {"pos_embedding_bwd", GRAD_NONE, 0,
                                        lower_pos_embedding_bwd};
