/* linear.c: the linear layer, y = x W^T (+ b) over the last axis, W maybe an
 * embedding's weight ("tie"): its graph and shapes, its backward rule (a backward node
 * writing dx, dW and db) and its lowering (GEMMs; the bias in a loop after the GEMM,
 * which fusion moves into the GEMM's epilogue). Attention's projections are linear
 * nodes too (ops/attention.c). */
#include <math.h>
#include <string.h>
#include "op.h"

static int linear_params(const Layer *l, const char **out)
{
    int n = 0;
    if (!l->tie)
        out[n++] = "weight";
    if (l->bias)
        out[n++] = "bias";
    return n;
}

/* [..., in] -> [..., out] (tied: out is the embedding's vocab); W [out, in], b [out] */
static void build_linear(GraphCtx *c, const LayerArgs *a)
{
    Graph *g = c->g;
    const Layer *l = a->l;
    Tensor *x = a->x;
    Init init = a->init;
    const char *at = a->at;
    const char *pfx = a->pfx;
    if (x->rank < 1)
        layer_error(c, l, "linear needs an input with at least one axis, got a scalar");
    int64_t in = x->shape[x->rank - 1];
    Param *tied = NULL;
    if (l->tie) {
        for (int i = 0; i < c->n_emb; i++)
            if (!strcmp(c->emb_name[i], l->tie))
                tied = c->emb_param[i];
        if (!tied)
            layer_error(c, l, "tie: the embedding '%s' must come before this layer", l->tie);
        if (tied->shape[1] != in)
            layer_error(c, l, "tie: the embedding '%s' has dim %lld but this layer's input has %lld features",
                        l->tie, (long long)tied->shape[1], (long long)in);
    }
    int64_t out = tied ? tied->shape[0] : l->out;
    gemm_dim(g, l->path, "linear", "input width (features in)", in);
    gemm_dim(g, l->path, "linear", "rows a sample (the input's elements / its width)",
             x->numel / in);
    int64_t shp[RT_MAX_RANK];
    memcpy(shp, x->shape, sizeof shp);
    shp[x->rank - 1] = out;
    Tensor *y = act_tensor(c, l->path, layer_ident("linear", pfx), x->rank, shp);
    y->origin = at;
    y->what = "linear output";
    Node *nd = layer_node(c, a, N_LINEAR, x, y);
    int64_t ws[2] = {out, in};
    double bound = 1.0 / sqrt((double)in);
    double std = init_std(c, init, c->resid_out);
    int wi = init.kind == INIT_DEFAULT ? RT_INIT_UNIFORM : RT_INIT_NORMAL;
    double wa = init.kind == INIT_DEFAULT ? bound : std;
    nd->w = tied ? tied : add_param(g, pfx, "weight", 2, ws, wi, wa, l->path);
    /* (Muon's: a hidden layer's matrix, one block; set once: a shared one may be split) */
    if (!tied && l != spec_head(c->s) && !nd->w->muon[0])
        nd->w->muon[0] = out;
    if (l->bias)
        nd->b = add_param(g, pfx, "bias", 1, &ws[0],
                          init.kind == INIT_DEFAULT ? RT_INIT_UNIFORM : RT_INIT_CONST,
                          init.kind == INIT_DEFAULT ? bound : 0.0, l->path);
    int64_t rows = x->numel / in;
    add_flops(c, nd, l->path, 2.0 * rows * in * out, 2.0 * rows * in * out, 2.0 * rows * in * out);
    c->cur = lora_adapt(c, a, nd);
}

/* Whether a linear layer's GEMMs run over its weight's zero rows too (ir.h's gemm_rows) */
static int pads(const Param *w, int64_t out, const Tensor *y) { return gemm_rows(w, out, y) != out; }

/* A linear layer's description, saying when W is another layer's weight ("tie"): its
 * name (P_wte_weight in the call) alone would not tell the reader why. */
static char *tied_note(char *what, const Node *nd, int dw)
{
    if (!nd->layer || !nd->layer->tie)
        return what;
    return xasprintf("%s; W is %s (tied%s)", what, nd->w->name,
                     dw ? ": the embedding's backward adds to the same gradient" : "");
}

/* fp8-mixed: whether the GEMMs of the linear layer fwd run in FP8 on a GPU that has it
 * (Instr.fp8). All but the classifier: the layer whose output the loss reads, or a
 * head tied to an embedding or run over a padded vocabulary. Its logits feed the
 * softmax directly, and torchtitan's float8 training leaves its output layer in bf16
 * too (the forward and backward GEMMs of one layer always agree). Never in the decode
 * program, which runs on the CPU alone. */
static int fp8_gemm(const Program *p, const Node *fwd)
{
    const Graph *g = p->g;
    if (!g->fp8 || p->decode || fwd->out == g->pred || (fwd->layer && fwd->layer->tie) || fwd->w->lora == 1)
        return 0;   /* (train.lora's adapters: GEMMs too thin for FP8's casts to pay) */
    return !pads(fwd->w, fwd->out->shape[fwd->out->rank - 1], fwd->out);
}

/* A linear layer: the GEMM, and the bias in a loop after it (fusion moves it into
 * the GEMM's epilogue where it can). */
static void lower_linear(Program *p, Node *nd)
{
    if (p->g->head == nd)
        return;   /* the loss call runs it (ops/loss.c) */
    Tensor *x = nd->in[0], *y = nd->out;
    int64_t in = x->shape[x->rank - 1], out = y->shape[y->rank - 1], rows = x->numel / in;
    Instr *a = instr_add(p, I_GEMM, nd->origin, 0);
    a->flops = 2 * rows * in * out;
    a->what = pads(nd->w, out, y)
                  ? xasprintf("linear: y = x W^T over W's %lld zero rows too (the padded "
                              "vocabulary: y's padding comes out 0)",
                              (long long)nd->w->pad_rows)
                  : xasprintf("linear: y = x W^T%s",
                              nd->b ? " (+ b in the loop after it, the linear epilogue)" : "");
    a->what = tied_note(a->what, nd, 0);
    SET_CALL(a, CALL_GEMM, arg_int(0), arg_int(1), arg_rows(rows),
             arg_int(gemm_rows(nd->w, out, y)), arg_int(in), arg_float(1), arg_t(x),
             arg_int(in), arg_t(nd->w->t), arg_int(in), arg_float(0), arg_t(y),
             arg_int(tensor_ld(y)));
    a->fp8 = fp8_gemm(p, nd);
    instr_reads(a, x);
    instr_reads(a, nd->w->t);
    instr_writes(a, y);
    if (nd->b) {
        /* epilogue, in place over the GEMM output; fusion pulls the activation in */
        INSTR_EW(p, nd, "linear epilogue: + bias", y, EW_ADD, x_add(x_arg(0), x_arg(1)), opd(y),
                 opd_at(nd->b->t, ix_mod(out)));
    }
}

/* A linear layer's backward pass: dx, dW and db. */
static void lower_linear_bwd(Program *p, Node *nd)
{
    if (p->g->head && nd->fwd == p->g->head)
        return;   /* the loss call wrote dx and dW (ops/loss.c) */
    Tensor *dy = nd->in[0], *x = nd->in[1], *y = nd->out;
    int64_t in = x->shape[x->rank - 1], out = dy->shape[dy->rank - 1], rows = x->numel / in;
    if (y) {
        Instr *a = instr_add(p, I_GEMM, nd->origin, 1);
        a->what = xstrdup(pads(nd->w, out, dy) ? "linear backward: dx = dy W (over the padded "
                                            "vocabulary: dy's padding is 0)"
                                          : "linear backward: dx = dy W");
        a->what = tied_note(a->what, nd, 0);
        SET_CALL(a, CALL_GEMM, arg_int(0), arg_int(0), arg_rows(rows), arg_int(in),
                 arg_int(gemm_rows(nd->w, out, dy)), arg_float(1), arg_t(dy),
                 arg_int(tensor_ld(dy)), arg_t(nd->w->t), arg_int(in), arg_float(0), arg_t(y),
                 arg_int(in));
        a->fp8 = fp8_gemm(p, nd->fwd);
        instr_reads(a, dy);
        instr_reads(a, nd->w->t);
        instr_writes(a, y);
    }
    Instr *b = instr_add(p, I_GEMM, nd->origin, 1);
    b->what = xstrdup(pads(nd->w, out, dy) ? "linear backward: dW += dy^T x (the zero rows' "
                                        "gradient: 0, from dy's zero padding)"
                                      : "linear backward: dW += dy^T x");
    b->what = tied_note(b->what, nd, 1);
    SET_CALL(b, CALL_GEMM, arg_int(1), arg_int(0), arg_int(gemm_rows(nd->w, out, dy)),
             arg_int(in), arg_rows(rows), arg_float(1), arg_t(dy), arg_int(tensor_ld(dy)),
             arg_t(x), arg_int(in), arg_float(1), arg_t(nd->w->g), arg_int(in));
    b->fp8 = fp8_gemm(p, nd->fwd);
    instr_reads(b, dy);
    instr_reads(b, x);
    instr_writes(b, nd->w->g);
    if (nd->b) {
        Instr *c = instr_add(p, I_CALL, nd->origin, 1);
        c->what = xstrdup("linear backward: db += column sums of dy");
        SET_CALL(c, CALL_COLSUM_ADD, arg_t(dy), arg_t(nd->b->g), arg_rows(rows), arg_int(out));
        instr_reads(c, dy);
        instr_writes(c, nd->b->g);
    }
}

const OpDef op_linear = {.build = build_linear, .params = linear_params};
const NodeDef node_linear = {"linear", GRAD_NODE, N_LINEAR_BWD, lower_linear};
const NodeDef node_linear_bwd = {"linear_bwd", GRAD_NONE, 0, lower_linear_bwd};
