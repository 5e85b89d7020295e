/* attention.c: multi-head self-attention over [T, d]: a qkv projection (a linear node,
 * ops/linear.c), the attention core and an output projection. The core's graph,
 * backward rule and lowering are here (runtime calls; each query's log-sum-exp is kept
 * so the backward pass recomputes the probabilities instead of storing them). */
#include <math.h>
#include "op.h"

static int attention_params(const Layer *l, const char **out)
{
    out[0] = "qkv.weight";
    out[1] = "qkv.bias";
    out[2] = "proj.weight";
    out[3] = "proj.bias";
    return 4;
}

/* [T, d] -> [T, d], heads dividing d: x -> qkv [T, 3d] (linear) -> the core [T, d]
 * -> the output projection [T, d] (linear) */
static void build_attention(GraphCtx *c, const LayerArgs *a)
{
    Graph *g = c->g;
    const Layer *l = a->l;
    Tensor *x = a->x;
    Init init = a->init;
    const char *at = a->at;
    const char *pfx = a->pfx;
    if (x->rank != 2)
        layer_error(c, l, "attention needs a [T, d] input, got %s", shape_str(x->rank, x->shape));
    int64_t T = x->shape[0], d = x->shape[1];
    if (d % l->heads)
        layer_error(c, l, "heads %lld does not divide the model width %lld", (long long)l->heads,
                    (long long)d);
    gemm_dim(g, l->path, "attention", "qkv width (3 times the model width)", 3 * d);
    gemm_dim(g, l->path, "attention", "sequence length", T);
    /* qkv projection, the attention core, the output projection */
    int64_t s3[2] = {T, 3 * d}, s1[2] = {T, d};
    char *qp = xasprintf("%s.qkv", pfx), *pp = xasprintf("%s.proj", pfx);
    Tensor *qkv = act_tensor(c, l->path, layer_ident("qkv", pfx), 2, s3);
    qkv->origin = at;
    qkv->what = "q, k, v side by side";
    Node *n1 = layer_node(c, a, N_LINEAR, x, qkv);
    int64_t w1[2] = {3 * d, d}, w2[2] = {d, d};
    double bound = 1.0 / sqrt((double)d);
    int wi = init.kind == INIT_DEFAULT ? RT_INIT_UNIFORM : RT_INIT_NORMAL;
    int bi = init.kind == INIT_DEFAULT ? RT_INIT_UNIFORM : RT_INIT_CONST;
    double ba = init.kind == INIT_DEFAULT ? bound : 0.0;
    n1->w = add_param(g, qp, "weight", 2, w1, wi, init.kind == INIT_DEFAULT ? bound : init_std(c, init, 0), l->path);
    n1->b = add_param(g, qp, "bias", 1, &w1[0], bi, ba, l->path);
    Tensor *att = act_tensor(c, l->path, layer_ident("lse", pfx), 2, (int64_t[]){l->heads, T});
    att->origin = at;
    att->keep32 = 1;
    att->what = "each query's log-sum-exp, saved for backward";
    Tensor *y = act_tensor(c, l->path, layer_ident("attn_y", pfx), 2, s1);
    y->origin = at;
    y->what = "attention heads' outputs";
    Node *n2 = layer_node(c, a, N_ATTENTION, qkv, y);
    n2->tmp[0] = att;
    n2->conv[0] = T;
    n2->conv[1] = d;
    n2->conv[2] = l->heads;
    n2->conv[3] = l->causal;
    Tensor *o = act_tensor(c, l->path, layer_ident("attn_out", pfx), 2, s1);
    o->origin = at;
    o->what = "attention output projection";
    Node *n3 = layer_node(c, a, N_LINEAR, y, o);
    n3->w = add_param(g, pp, "weight", 2, w2, wi,
                      init.kind == INIT_DEFAULT ? bound : init_std(c, init, c->resid_out), l->path);
    n3->b = add_param(g, pp, "bias", 1, &w2[0], bi, ba, l->path);
    double proj = 2.0 * T * d * 3 * d + 2.0 * T * d * d;
    double core = 4.0 * T * T * d / (l->causal ? 2 : 1);
    add_flops(c, l->path, proj + core, 2 * (proj + core));
    c->cur = o;
}

/* The attention core, each query's log-sum-exp kept for the backward pass. */
static void lower_attention(Program *p, Node *nd)
{
    Tensor *x = nd->in[0], *y = nd->out;
    Instr *a = instr_add(p, I_CALL, nd->origin, 0);
    a->flops = 4 * nd->conv[0] * nd->conv[0] * nd->conv[1];
    a->what = xstrdup(p->eval ? "attention: softmax(q k^T / sqrt(hd)) v per head"
                              : "attention: softmax(q k^T / sqrt(hd)) v per head, log-sum-exp kept");
    if (p->eval)
        nd->tmp[0]->what = "each query's log-sum-exp (validation: written, not read)";
    SET_CALL(a, CALL_ATTENTION_FWD, arg_t(x), arg_t(nd->tmp[0]), arg_t(y), arg_rows(1),
             arg_int(nd->conv[0]), arg_int(nd->conv[1]), arg_int(nd->conv[2]),
             arg_int((int)nd->conv[3]));
    instr_reads(a, x);
    instr_writes(a, nd->tmp[0]);
    instr_writes(a, y);
}

/* Attention's backward pass. */
static void lower_attention_bwd(Program *p, Node *nd)
{
    Tensor *dy = nd->in[0], *x = nd->in[1], *y = nd->out;
    Instr *a = instr_add(p, I_CALL, nd->origin, 1);
    a->what = xstrdup("attention backward: d(qkv), probabilities recomputed from the log-sum-exp");
    SET_CALL(a, CALL_ATTENTION_BWD, arg_t(x), arg_t(nd->tmp[0]), arg_t(nd->fwd->out), arg_t(dy),
             arg_t(y), arg_rows(1), arg_int(nd->conv[0]), arg_int(nd->conv[1]),
             arg_int(nd->conv[2]), arg_int((int)nd->conv[3]));
    instr_reads(a, x);
    instr_reads(a, nd->tmp[0]);
    instr_reads(a, nd->fwd->out);
    instr_reads(a, dy);
    instr_writes(a, y);
}

const OpDef op_attention = {.build = build_attention, .params = attention_params};
const NodeDef node_attention = {"attention", GRAD_NODE, N_ATTENTION_BWD, lower_attention};
const NodeDef node_attention_bwd = {"attention_bwd", GRAD_NONE, 0, lower_attention_bwd};
