/* embedding.c: rows of a [vocab, dim] weight picked by a model input's integer ids
 * (never a float conversion of it): graph, backward rule (the weight's gradient only:
 * ids have none) and lowering (runtime calls; dW[id] += dy). A named embedding's weight
 * can be a linear layer's ("tie", ops/linear.c). */
#include <string.h>
#include "op.h"

static int embedding_params(const Layer *l, const char **out)
{
    out[0] = "weight";
    return 1;
}

/* ids [...] -> [..., dim]; W [vocab, dim] */
static void build_embedding(GraphCtx *c, const LayerArgs *a)
{
    Graph *g = c->g;
    const Layer *l = a->l;
    Tensor *x = a->x;
    Init init = a->init;
    const char *at = a->at;
    const char *pfx = a->pfx;
    /* reads the raw integer ids of a model input, never a float conversion */
    Tensor *ids = x;
    if (l->input || (x && x->kind != T_INPUT)) {
        int k = l->input ? find_model_input(c->s, l->input) : -1;
        if (k < 0)
            layer_error(c, l, "embedding needs \"input\": the name of an integer model input");
        ids = g->inputs[k];
    }
    if (!ids || ids->kind != T_INPUT || ids->dtype == RT_F32)
        layer_error(c, l, "embedding needs an integer model input of token ids (u8, u16 or i32)");
    if (ids->rank + 1 > RT_MAX_RANK)
        layer_error(c, l, "embedding adds an axis to its ids %s: at most %d axes in all, so ids "
                    "of at most %d", shape_str(ids->rank, ids->shape), RT_MAX_RANK,
                    RT_MAX_RANK - 1);
    c->as_ids[ids->input_index] = 1;
    read_as_i32(ids);
    int64_t *v = &g->input_vocab[ids->input_index];
    if (*v == 0 || l->vocab < *v)
        *v = l->vocab;
    int64_t shp[RT_MAX_RANK];
    memcpy(shp, ids->shape, sizeof shp);
    shp[ids->rank] = l->dim;
    Tensor *y = act_tensor(c, l->path, layer_ident("embedding", pfx), ids->rank + 1, shp);
    y->origin = at;
    y->what = "embedding rows";
    Node *nd = layer_node(c, a, N_EMBEDDING, ids, y);
    int64_t ws[2] = {l->vocab, l->dim};
    nd->w = add_param(g, pfx, "weight", 2, ws, RT_INIT_NORMAL,
                      init.kind == INIT_DEFAULT ? 1.0 : init_std(c, init, 0), l->path);
    if (l->name && c->n_emb < 64) {
        c->emb_name[c->n_emb] = l->name;
        c->emb_param[c->n_emb++] = nd->w;
    }
    c->cur = y;
}

static void lower_embedding(Program *p, Node *nd)
{
    Tensor *x = nd->in[0], *y = nd->out;
    int64_t V = nd->w->shape[0], dim = nd->w->shape[1];
    Instr *a = instr_add(p, I_CALL, nd->origin, 0);
    a->what = xstrdup("embedding: rows of the weight picked by the ids");
    SET_CALL(a, CALL_EMBEDDING_FWD, arg_t(x), arg_t(nd->w->t), arg_t(y), arg_rows(x->numel),
             arg_int(V), arg_int(dim));
    instr_reads(a, x);
    instr_reads(a, nd->w->t);
    instr_writes(a, y);
}

/* in[0] = dy, in[1] = the ids */
static void lower_embedding_bwd(Program *p, Node *nd)
{
    Tensor *dy = nd->in[0], *ids = nd->in[1];
    Instr *a = instr_add(p, I_CALL, nd->origin, 1);
    a->what = xstrdup("embedding backward: dW[id] += dy");
    SET_CALL(a, CALL_EMBEDDING_BWD, arg_t(ids), arg_t(dy), arg_t(nd->w->g),
             arg_rows(ids->numel), arg_int(nd->w->shape[0]), arg_int(nd->w->shape[1]));
    instr_reads(a, ids);
    instr_reads(a, dy);
    instr_writes(a, nd->w->g);
}

const OpDef op_embedding = {.build = build_embedding, .params = embedding_params,
                             .reads_ids = 1};
const NodeDef node_embedding = {"embedding", GRAD_PARAMS, N_EMBEDDING_BWD, lower_embedding};
const NodeDef node_embedding_bwd = {"embedding_bwd", GRAD_NONE, 0, lower_embedding_bwd};
