/* attention.c: multi-head self-attention over [T, d]: a qkv projection (a linear node,
 * ops/linear.c), the attention core and an output projection. The core's graph,
 * backward rule and lowering are here (runtime calls; each query's log-sum-exp is kept
 * so the backward pass recomputes the probabilities instead of storing them).
 * GPT-2's attention lowers to rt_attention_fwd/_bwd; with the Llama-family options
 * (kv_heads, rope, qk_norm, window, scale, softcap) or the model's positions (packed
 * rows: the core node's in[1]) to rt_attention_ext_fwd/_bwd, which apply qk_norm
 * and rope inside the core (qk_norm's weights are the core node's w and b). qk_norm
 * "all_heads" (OLMo 2's) is a node of its own before the core (ops/qk_norm.c). */
#include <math.h>
#include "op.h"

/* Key/value heads: kv_heads, or heads when not given (multi-head attention). */
static int64_t kv_heads(const Layer *l) { return l->kv_heads ? l->kv_heads : l->heads; }

/* Does the layer take the options call (rt_attention_ext_*) rather than GPT-2's? (All
 * its layers do when interleave sets some apart.) */
static int uses_options(const Layer *l)
{
    return kv_heads(l) != l->heads || l->rope.theta > 0 || l->qk_norm == QK_NORM_HEAD || l->window ||
           l->att_scale > 0 || l->att_softcap > 0 || l->il.every;
}

static int attention_params(const Layer *l, const char **out)
{
    int n = 0;
    out[n++] = "qkv.weight";
    if (l->bias && !l->bias_proj)
        out[n++] = "qkv.bias";
    if (l->qk_norm) {
        out[n++] = "q_norm.weight";
        out[n++] = "k_norm.weight";
    }
    out[n++] = "proj.weight";
    if (l->bias && !l->bias_qkv)
        out[n++] = "proj.bias";
    return n;
}

/* The core's FLOPs a sample (forward): 4 hd H per (query, visible key) pair, the causal
 * triangle counted as T^2 / 2; a causal window of w < T keys leaves T w - w^2 / 2 pairs,
 * a window on both sides T^2 - (T - w)(T - w + 1), the pairs w or more apart taken away
 * (the blocks the kernels skip are not counted). */
static double core_flops(const Layer *l, int64_t window, int64_t T, int64_t d)
{
    if (!window || window >= T)
        return 4.0 * T * T * d / (l->causal ? 2 : 1);
    double w = (double)window, t = (double)T;
    return 4.0 * d * (l->causal ? t * w - w * w / 2 : t * t - (t - w) * (t - w + 1));
}

/* Is this one of the layers "interleave" sets apart (every - 1, 2 every - 1, ... of the
 * innermost repeat's iterations)? */
static int interleaved(GraphCtx *c, const Layer *l)
{
    if (!l->il.every)
        return 0;
    if (!c->iter)
        layer_error(c, l, "\"interleave\" picks layers of a repeat by their index: this "
                    "attention is in no repeat");
    return (c->inner_iter + 1) % l->il.every == 0;
}

/* The window and rope of a core node (conv[7]: one interleave sets apart). */
static int64_t node_window(const Node *nd)
{
    const Layer *l = nd->layer;
    return nd->conv[7] && l->il.set_window ? l->il.window : l->window;
}

static const Rope *node_rope(const Node *nd)
{
    const Layer *l = nd->layer;
    return nd->conv[7] && l->il.set_rope ? &l->il.rope : &l->rope;
}

/* qk_norm's weights [hd], ones: the first goes to the core node's w, the second to its b */
static void add_qk_norm(GraphCtx *c, const LayerArgs *a, Node *core, int64_t hd)
{
    char *qn = xasprintf("%s.q_norm", a->pfx), *kn = xasprintf("%s.k_norm", a->pfx);
    core->w = add_param(c->g, qn, "weight", 1, &hd, RT_INIT_CONST, 1.0, a->l->path);
    core->b = add_param(c->g, kn, "weight", 1, &hd, RT_INIT_CONST, 1.0, a->l->path);
}

/* A rope's dims (even, at most the head width HD) and longrope's factors (one per pair
 * of dimensions rotated). */
static void check_rope(GraphCtx *c, const Layer *l, const Rope *r, int64_t hd)
{
    if (r->dims && (r->dims % 2 || r->dims > hd))
        layer_error(c, l, "rope's dims %lld: an even number of dimensions up to the head "
                    "width %lld", (long long)r->dims, (long long)hd);
    int64_t rd = r->dims ? r->dims : hd;
    if (r->lr && r->lr->n != rd / 2)
        layer_error(c, l, "rope's longrope factors: %d each, where the heads %lld wide "
                    "rotate %lld pairs of dimensions", r->lr->n, (long long)hd,
                    (long long)(rd / 2));
}

/* An attention layer's widths: the head's hd (head_dim, or d / heads), the core's
 * dc = heads hd (d without head_dim), qkv's wq = (heads + 2 kv_heads) hd. */
typedef struct AttDims {
    int64_t T, d, KV, hd, dc, wq;
} AttDims;

static AttDims att_dims(GraphCtx *c, const Layer *l, const Tensor *x)
{
    if (x->rank != 2)
        layer_error(c, l, "attention needs a [T, d] input, got %s", shape_str(x->rank, x->shape));
    AttDims a = {.T = x->shape[0], .d = x->shape[1], .KV = kv_heads(l)};
    if (!l->head_dim && a.d % l->heads)
        layer_error(c, l, "heads %lld does not divide the model width %lld (or give head_dim)",
                    (long long)l->heads, (long long)a.d);
    a.hd = l->head_dim ? l->head_dim : a.d / l->heads;
    if ((l->rope.theta > 0 || l->il.rope.theta > 0) && a.hd % 2)
        layer_error(c, l, "rope rotates pairs of a head's dimensions: the head width %lld "
                    "(%s) must be even", (long long)a.hd, l->head_dim ? "head_dim" : "d / heads");
    for (const Rope *r = &l->rope; r; r = r == &l->rope ? &l->il.rope : NULL)
        check_rope(c, l, r, a.hd);
    a.dc = l->heads * a.hd;   /* at most 2^62: no overflow before the check */
    gemm_dim(c->g, l->path, "attention", "heads' width (heads times head_dim)", a.dc);
    a.wq = (l->heads + 2 * a.KV) * a.hd;
    gemm_dim(c->g, l->path, "attention",
             a.KV == l->heads && !l->head_dim ? "qkv width (3 times the model width)"
                                              : "qkv width ((heads + 2 kv_heads) head widths)",
             a.wq);
    gemm_dim(c->g, l->path, "attention", "sequence length", a.T);
    return a;
}

/* The model's positions (packed rows), where it has them, as the core node's in[1]: the
 * mask cut at the sequences' seams (a causal one at each token's sequence start; without
 * it, each token sees its own sequence whole), rope by each token's position. */
static void read_positions(GraphCtx *c, const Layer *l, Node *core, int64_t T)
{
    if (!c->positions)
        return;
    if (c->positions->shape[0] != T)
        layer_error(c, l, "the positions input '%s' holds %lld places, this attention's "
                    "sequence %lld", c->s->positions, (long long)c->positions->shape[0],
                    (long long)T);
    core->in[core->n_in++] = c->positions;
    c->positions_read++;
}

/* [T, d] -> [T, d], kv_heads dividing heads: x -> qkv [T, wq] (linear) -> the core
 * [T, dc] -> the output projection [T, d] (linear). */
static void build_attention(GraphCtx *c, const LayerArgs *a)
{
    Graph *g = c->g;
    const Layer *l = a->l;
    Tensor *x = a->x;
    Init init = a->init;
    const char *at = a->at;
    const char *pfx = a->pfx;
    AttDims m = att_dims(c, l, x);
    int64_t T = m.T, d = m.d, KV = m.KV, hd = m.hd, dc = m.dc, wq = m.wq;
    /* qkv projection, the attention core, the output projection */
    int64_t s3[2] = {T, wq}, s1[2] = {T, d}, sc[2] = {T, dc};
    char *qp = xasprintf("%s.qkv", pfx), *pp = xasprintf("%s.proj", pfx);
    Tensor *qkv = act_tensor(c, l->path, layer_ident("qkv", pfx), 2, s3);
    qkv->origin = at;
    qkv->what = "q, k, v side by side";
    Node *n1 = layer_node(c, a, N_LINEAR, x, qkv);
    int64_t w1[2] = {wq, d}, w2[2] = {d, dc};
    double bound = 1.0 / sqrt((double)d), bound2 = 1.0 / sqrt((double)dc);   /* 1/sqrt(fan_in) */
    int wi = init.kind == INIT_DEFAULT ? RT_INIT_UNIFORM : RT_INIT_NORMAL;
    int bi = init.kind == INIT_DEFAULT ? RT_INIT_UNIFORM : RT_INIT_CONST;
    double ba = init.kind == INIT_DEFAULT ? bound : 0.0;
    n1->w = add_param(g, qp, "weight", 2, w1, wi, init.kind == INIT_DEFAULT ? bound : init_std(c, init, 0), l->path);
    memcpy(n1->w->muon, (int64_t[]){dc, KV * hd, KV * hd}, 3 * sizeof(int64_t));   /* (Muon's) */
    if (l->bias && !l->bias_proj)
        n1->b = add_param(g, qp, "bias", 1, &w1[0], bi, ba, l->path);
    qkv = lora_adapt(c, a, n1);
    Tensor *att = act_tensor(c, l->path, layer_ident("lse", pfx), 2, (int64_t[]){l->heads, T});
    att->origin = at;
    att->keep32 = 1;
    att->what = "each query's log-sum-exp, saved for backward";
    Tensor *y = act_tensor(c, l->path, layer_ident("attn_y", pfx), 2, sc);
    y->origin = at;
    y->what = "attention heads' outputs";
    if (l->qk_norm == QK_NORM_ALL_HEADS)   /* OLMo 2's: a node of its own before the core */
        qkv = build_qk_norm_all(c, a, qkv, dc, KV * hd);
    Node *n2 = layer_node(c, a, N_ATTENTION, qkv, y);
    read_positions(c, l, n2, T);
    n2->tmp[0] = att;
    n2->conv[0] = c->g->decode_T ? c->g->decode_T : T;   /* (decode: the cache's positions) */
    n2->conv[1] = dc;   /* the core's width: the kernels' d, hd = d / H */
    n2->conv[2] = l->heads;
    n2->conv[3] = l->causal;
    n2->conv[4] = KV;
    n2->conv[7] = interleaved(c, l);
    n2->conv[5] = node_window(n2);
    n2->conv[6] = uses_options(l) || n2->n_in > 1;
    if (l->qk_norm == QK_NORM_HEAD)
        add_qk_norm(c, a, n2, hd);
    Tensor *o = act_tensor(c, l->path, layer_ident("attn_out", pfx), 2, s1);
    o->origin = at;
    o->what = "attention output projection";
    Node *n3 = layer_node(c, a, N_LINEAR, y, o);
    n3->w = add_param(g, pp, "weight", 2, w2, wi,
                      init.kind == INIT_DEFAULT ? bound2 : init_std(c, init, c->resid_out), l->path);
    n3->w->muon[0] = d;
    if (l->bias && !l->bias_qkv)
        n3->b = add_param(g, pp, "bias", 1, &w2[0], bi, init.kind == INIT_DEFAULT ? bound2 : 0.0,
                          l->path);
    o = lora_adapt(c, a, n3);
    /* the projections' GEMMs (each backward: the input's gradient and the weight's), the
     * scores and their product with V (backward: twice those, for dq, dk and dv) */
    double qkv_gemm = 2.0 * T * d * wq, out_gemm = 2.0 * T * d * dc;
    double core = core_flops(l, n2->conv[5], T, dc);
    add_flops(c, n1, l->path, qkv_gemm, qkv_gemm, qkv_gemm);
    add_flops(c, n2, l->path, core, 2 * core, 0);
    add_flops(c, n3, l->path, out_gemm, out_gemm, out_gemm);
    c->cur = o;
}

/* The scores' factor: the layer's scale, or 1 / sqrt(hd) (in float, as the kernels had
 * it) */
static double node_scale(const Node *nd)
{
    int64_t hd = nd->conv[1] / nd->conv[2];
    return nd->layer->att_scale > 0 ? nd->layer->att_scale : (float)(1.0 / sqrt((double)hd));
}

/* Pair j's frequency under yarn (transformers' _compute_yarn_parameters, in float32 as
 * it computes them, the bounds in double): p = theta^(2j/rd); a ramp over the pairs
 * from low (the pair that turns beta_fast times in orig positions) to high (beta_slow
 * times) blends 1/p, kept below low, into 1/(factor p), taken past high. */
static float yarn_freq(const Yarn *y, float p, int64_t j, int64_t rd, double theta)
{
    double d = (double)rd, lb = 2.0 * log(theta);
    double lo = floor(d * log(y->orig / (y->beta_fast * 2.0 * M_PI)) / lb);
    double hi = ceil(d * log(y->orig / (y->beta_slow * 2.0 * M_PI)) / lb);
    lo = lo > 0 ? lo : 0;
    hi = hi < d - 1 ? hi : d - 1;
    if (lo == hi)
        hi += 0.001;   /* as transformers keeps the ramp finite */
    float ramp = ((float)j - (float)lo) / (float)(hi - lo);
    ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
    float extra = 1.0f - ramp;   /* the share of the unscaled frequency */
    float ext = 1.0f / p, inter = 1.0f / ((float)y->factor * p);
    return inter * (1.0f - extra) + ext * extra;
}

/* The rope's table where its frequencies are not theta^(-2j/hd) (NULL then): [hd/2]
 * inverse frequencies, a partial rope's theta^(-2j/dims) for j < dims/2 and 0 past them
 * (those pairs keep their values), divided by longrope's factors (the long ones past the
 * original context at the node's T, else the short ones), in float32 as transformers
 * computes them; or yarn's (yarn_freq); then [hd/2] amplitudes, cos and sin times them:
 * longrope's and yarn's attention factor on the rotated pairs
 * (Phi3LongRoPEScaledRotaryEmbedding's, _compute_yarn_parameters'), else 1. */
static Arg rope_freqs(const Node *nd)
{
    const Rope *r = node_rope(nd);
    int64_t hd = nd->conv[1] / nd->conv[2], rd = r->dims ? r->dims : hd;
    if (!r->lr && !r->yarn && rd == hd)
        return arg_null();
    const double *f = !r->lr ? NULL : (double)nd->conv[0] > r->lr->orig ? r->lr->long_f
                                                                        : r->lr->short_f;
    float attn = r->lr ? (float)r->lr->attn : r->yarn ? (float)r->yarn->attn : 1.0f;
    double *t = xcalloc((size_t)hd, sizeof *t), *amp = t + hd / 2;
    for (int64_t j = 0; j < hd / 2; j++) {
        float p = powf((float)r->theta, (float)(2 * j) / (float)rd);
        t[j] = j >= rd / 2 ? 0.0f : r->yarn ? yarn_freq(r->yarn, p, j, rd, r->theta)
                                            : 1.0f / (f ? (float)f[j] * p : p);
        amp[j] = j < rd / 2 ? attn : 1.0f;
    }
    return arg_floats(t, hd);
}

/* The options call's arguments after the tensors: B, T, d, H, KV, causal, window, rope's
 * theta, factor, low and high frequency factors, original context length, inverse
 * frequencies (the rope interleave sets on the layers it sets apart), the scores' factor
 * and soft-cap. */
static int options_args(const Node *nd, Arg *a)
{
    const Rope *r = node_rope(nd);
    int n = 0;
    a[n++] = arg_rows(1);
    a[n++] = arg_int(nd->conv[0]);   /* T */
    a[n++] = arg_int(nd->conv[1]);   /* d */
    a[n++] = arg_int(nd->conv[2]);   /* H */
    a[n++] = arg_int(nd->conv[4]);   /* KV */
    a[n++] = arg_int(nd->conv[3]);   /* causal */
    a[n++] = arg_int(nd->conv[5]);   /* window */
    a[n++] = arg_float(r->theta);
    a[n++] = arg_float(r->yarn ? 0.0 : r->factor);   /* yarn's: in the table */
    a[n++] = arg_float(r->low);
    a[n++] = arg_float(r->high);
    a[n++] = arg_int((int64_t)r->orig);
    a[n++] = rope_freqs(nd);
    a[n++] = arg_float(node_scale(nd));
    a[n++] = arg_float(nd->layer->att_softcap);
    return n;
}

/* The options call: its tensors, then options_args, then the positions (fwd: the forward
 * node; NULL: none), which it reads. */
static void set_options_call(Instr *a, int call, const Node *nd, Tensor **t, int nt,
                             const Node *fwd)
{
    Arg args[CALL_MAX_ARGS];
    for (int k = 0; k < nt; k++)
        args[k] = arg_opt(t[k]);
    int n = nt + options_args(nd, args + nt);
    Tensor *pos = fwd->n_in > 1 ? fwd->in[1] : NULL;
    args[n++] = arg_opt(pos);
    call_set(a, call, args, n);
    if (pos)
        instr_reads(a, pos);
}

/* The decode program's core (decode.c): rows that are positions of sequences (their
 * places, e->place), their keys and values first written into their sequences' caches
 * (the layer's part of each: K, then V, each [KV, T, hd], at the offset below), then each
 * row's queries against its cache's positions up to its own. */
static void lower_attention_decode(Program *p, Node *nd)
{
    Graph *g = p->g;
    Tensor *x = nd->in[0], *y = nd->out;
    int64_t T = nd->conv[0], hd = nd->conv[1] / nd->conv[2];
    Instr *a = instr_add(p, I_CALL, nd->origin, 0);
    a->flops = 4 * T * nd->conv[1];
    a->what = xasprintf("attention, position by position: keys and values into the cache (%lld "
                        "floats from %lld), queries against the positions up to their own",
                        (long long)(2 * nd->conv[4] * T * hd), (long long)g->kv_floats);
    Arg args[CALL_MAX_ARGS];
    int n = 0;
    args[n++] = arg_t(x);
    args[n++] = nd->w ? arg_t(nd->w->t) : arg_null();
    args[n++] = nd->b ? arg_t(nd->b->t) : arg_null();
    args[n++] = arg_t(y);
    args[n++] = arg_int(g->kv_floats);
    n += options_args(nd, args + n);
    call_set(a, CALL_ATTENTION_DECODE, args, n);
    g->kv_floats += 2 * nd->conv[4] * T * hd;
    if (nd->w) {
        instr_reads(a, nd->w->t);
        instr_reads(a, nd->b->t);
    }
    instr_reads(a, x);
    instr_writes(a, y);
}

/* The attention core, each query's log-sum-exp kept for the backward pass. */
static void lower_attention(Program *p, Node *nd)
{
    if (p->decode) {
        lower_attention_decode(p, nd);
        return;
    }
    Tensor *x = nd->in[0], *y = nd->out;
    Instr *a = instr_add(p, I_CALL, nd->origin, 0);
    int64_t T = nd->conv[0], w = nd->conv[5] && nd->conv[5] < T ? nd->conv[5] : T;
    a->flops = 4 * T * w * nd->conv[1];
    char s[40] = "q k^T / sqrt(hd)", cs[80];
    if (nd->layer->att_scale > 0)
        snprintf(s, sizeof s, "q k^T * %.6g", node_scale(nd));
    if (nd->layer->att_softcap > 0)
        snprintf(cs, sizeof cs, "%g tanh(%s / %g)", nd->layer->att_softcap, s,
                 nd->layer->att_softcap);
    a->what = xasprintf("attention: softmax(%s) v per head%s",
                        nd->layer->att_softcap > 0 ? cs : s, p->eval ? "" : ", log-sum-exp kept");
    if (p->eval)
        nd->tmp[0]->what = "each query's log-sum-exp (validation: written, not read)";
    if (nd->conv[6]) {
        Tensor *t[5] = {x, nd->w ? nd->w->t : NULL, nd->b ? nd->b->t : NULL, nd->tmp[0], y};
        set_options_call(a, CALL_ATTENTION_EXT_FWD, nd, t, 5, nd);
        if (nd->w) {
            instr_reads(a, nd->w->t);
            instr_reads(a, nd->b->t);
        }
    } else
        SET_CALL(a, CALL_ATTENTION_FWD, arg_t(x), arg_t(nd->tmp[0]), arg_t(y), arg_rows(1),
                 arg_int(nd->conv[0]), arg_int(nd->conv[1]), arg_int(nd->conv[2]),
                 arg_int((int)nd->conv[3]));
    instr_reads(a, x);
    instr_writes(a, nd->tmp[0]);
    instr_writes(a, y);
}

/* Attention's backward pass (with qk_norm, its weights' gradients too). */
static void lower_attention_bwd(Program *p, Node *nd)
{
    Tensor *dy = nd->in[0], *x = nd->in[1], *y = nd->out;
    Instr *a = instr_add(p, I_CALL, nd->origin, 1);
    a->what = xstrdup("attention backward: d(qkv), probabilities recomputed from the log-sum-exp");
    if (nd->conv[6]) {
        Tensor *t[9] = {x,  nd->w ? nd->w->t : NULL, nd->b ? nd->b->t : NULL, nd->tmp[0],
                        nd->fwd->out, dy, y, nd->w ? nd->w->g : NULL, nd->b ? nd->b->g : NULL};
        set_options_call(a, CALL_ATTENTION_EXT_BWD, nd, t, 9, nd->fwd);
        if (nd->w) {
            instr_reads(a, nd->w->t);
            instr_reads(a, nd->b->t);
            instr_writes(a, nd->w->g);
            instr_writes(a, nd->b->g);
        }
    } else
        SET_CALL(a, CALL_ATTENTION_BWD, arg_t(x), arg_t(nd->tmp[0]), arg_t(nd->fwd->out),
                 arg_t(dy), arg_t(y), arg_rows(1), arg_int(nd->conv[0]), arg_int(nd->conv[1]),
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
