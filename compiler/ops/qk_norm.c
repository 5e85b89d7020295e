/* qk_norm.c: attention's qk_norm "all_heads" (OLMo 2's): in each row of qkv, one
 * RMSNorm over all of q's heads ([heads hd], weight q_norm.weight) and one over all of
 * k's ([kv_heads hd], k_norm.weight), v copied, before the core (which applies rope).
 * The node attention.c builds between the qkv projection and the core, its backward
 * rule and its lowering to one runtime call each way. */
#include "op.h"

/* qkv [T, wq] -> [T, wq]; 1/rms [T, 2] saved (q's, then k's); dq = heads hd,
 * dk = kv_heads hd. Returns the normalized qkv. */
Tensor *build_qk_norm_all(GraphCtx *c, const LayerArgs *a, Tensor *qkv, int64_t dq, int64_t dk)
{
    const Layer *l = a->l;
    Tensor *y = act_tensor(c, l->path, layer_ident("qkv_normed", a->pfx), qkv->rank, qkv->shape);
    y->origin = a->at;
    y->what = "q and k through qk_norm, v as it was";
    int64_t rows = qkv->numel / qkv->shape[qkv->rank - 1], two[2] = {rows, 2};
    Tensor *rstd = act_tensor(c, l->path, layer_ident("qk_rstd", a->pfx), 2, two);
    rstd->keep32 = 1;
    rstd->origin = a->at;
    rstd->what = "qk_norm's 1/rms of q and of k, saved for backward";
    Node *nd = layer_node(c, a, N_QK_NORM, qkv, y);
    nd->p = l->eps;
    nd->tmp[0] = rstd;
    nd->conv[0] = dq;
    nd->conv[1] = dk;
    char *qn = xasprintf("%s.q_norm", a->pfx), *kn = xasprintf("%s.k_norm", a->pfx);
    nd->w = add_param(c->g, qn, "weight", 1, &dq, RT_INIT_CONST, 1.0, l->path);
    nd->b = add_param(c->g, kn, "weight", 1, &dk, RT_INIT_CONST, 1.0, l->path);
    /* as rmsnorm's over the q and k columns */
    add_flops(c, nd, l->path, 4.0 * rows * (dq + dk), 8.0 * rows * (dq + dk), 0);
    return y;
}

/* x's rows and its width */
static int64_t rows_of(const Tensor *x, int64_t *w)
{
    *w = x->shape[x->rank - 1];
    return x->numel / *w;
}

static void lower_qk_norm(Program *p, Node *nd)
{
    Tensor *x = nd->in[0], *y = nd->out;
    int64_t w, rows = rows_of(x, &w), dq = nd->conv[0], dk = nd->conv[1];
    Instr *a = instr_add(p, I_CALL, nd->origin, 0);
    a->what = xstrdup("qk_norm over all heads");
    if (p->eval)   /* the call writes it; validation has no backward to read it */
        nd->tmp[0]->what = "qk_norm's 1/rms (validation: written, not read)";
    SET_CALL(a, CALL_QK_NORM_FWD, arg_t(x), arg_t(nd->w->t), arg_t(nd->b->t), arg_t(y),
             arg_t(nd->tmp[0]), arg_rows(rows), arg_int(dq), arg_int(dk),
             arg_int(w - dq - dk), arg_float(nd->p));
    instr_reads(a, x);
    instr_reads(a, nd->w->t);
    instr_reads(a, nd->b->t);
    instr_writes(a, y);
    instr_writes(a, nd->tmp[0]);
}

/* in[0] = dy, in[1] = x */
static void lower_qk_norm_bwd(Program *p, Node *nd)
{
    Tensor *dy = nd->in[0], *x = nd->in[1], *dx = dx_or_unused(p->g, nd, x, nd->out);
    int64_t w, rows = rows_of(x, &w), dq = nd->conv[0], dk = nd->conv[1];
    Instr *a = instr_add(p, I_CALL, nd->origin, 1);
    a->what = xstrdup("qk_norm over all heads backward");
    SET_CALL(a, CALL_QK_NORM_BWD, arg_t(x), arg_t(nd->w->t), arg_t(nd->b->t),
             arg_t(nd->tmp[0]), arg_t(dy), arg_t(dx), arg_t(nd->w->g), arg_t(nd->b->g),
             arg_rows(rows), arg_int(dq), arg_int(dk), arg_int(w - dq - dk));
    instr_reads(a, x);
    instr_reads(a, nd->w->t);
    instr_reads(a, nd->b->t);
    instr_reads(a, nd->tmp[0]);
    instr_reads(a, dy);
    instr_writes(a, dx);
    instr_writes(a, nd->w->g);
    instr_writes(a, nd->b->g);
}

const NodeDef node_qk_norm = {"qk_norm", GRAD_NODE, N_QK_NORM_BWD, lower_qk_norm};
const NodeDef node_qk_norm_bwd = {"qk_norm_bwd", GRAD_NONE, 0, lower_qk_norm_bwd};
