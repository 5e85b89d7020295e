/* lower.c: nodes -> Program. Each node becomes elementwise ops (I_EW, one op each,
 * fused later), GEMMs (I_GEMM) or runtime calls (I_CALL). Every instruction lists
 * the tensors it reads and writes: that is all fusion and memplan look at. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "ir.h"

static char *flit(double v) { return float_literal(v); }

static Instr *add(Program *p, int kind, const char *origin, int backward)
{
    Instr *in = xcalloc(1, sizeof *in);
    in->kind = kind;
    in->origin = origin;
    in->backward = backward;
    in->block = p->cur_block;
    if (p->n_ins == p->cap_ins) {
        p->cap_ins = p->cap_ins ? 2 * p->cap_ins : 64;
        p->ins = realloc(p->ins, (size_t)p->cap_ins * sizeof *p->ins);
        if (!p->ins)
            die("out of memory");
    }
    p->ins[p->n_ins++] = in;
    return in;
}

static void reads(Instr *in, Tensor *t)
{
    if (!t)
        return;
    in->reads = realloc(in->reads, (size_t)(in->n_reads + 1) * sizeof *in->reads);
    in->reads[in->n_reads++] = t;
}

static void writes(Instr *in, Tensor *t)
{
    if (!t)
        return;
    in->writes = realloc(in->writes, (size_t)(in->n_writes + 1) * sizeof *in->writes);
    in->writes[in->n_writes++] = t;
}

/* Whether a linear layer's GEMMs run over its weight's zero rows too (a padded
 * vocabulary: Param.pad_rows, graph.c): where y's rows (the logits, or their gradient)
 * have room for them. Another linear tied to the same weight, whose output is not the
 * padded logits, runs over the true rows. */
static int pads(const Param *w, int64_t out, const Tensor *y)
{
    return w->pad_rows && tensor_ld(y) >= out + w->pad_rows;
}

/* The rows of a linear layer's weight its GEMMs run over (pads()). */
static int64_t padded_rows(const Param *w, int64_t out, const Tensor *y)
{
    return pads(w, out, y) ? out + w->pad_rows : out;
}

/* One elementwise op over n = e->B * numel elements: out = expr($0, $1, $2), an EW_* op
 * (EW_ACT, EW_ACT_BWD: the node's activation). */
static Instr *ew(Program *p, Node *nd, const char *what, Tensor *out, int tag, const char *expr,
                 int nargs, ...)
{
    Instr *in = add(p, I_EW, nd->origin, nd->backward);
    in->what = xstrdup(what);
    in->n = out->numel;
    EwOp *op = xcalloc(1, sizeof *op);
    op->tag = tag;
    op->act = tag == EW_ACT || tag == EW_ACT_BWD ? nd->act : 0;
    op->expr = xstrdup(expr);
    op->out = out;
    op->origin = nd->origin;
    op->what = in->what;
    va_list ap;
    va_start(ap, nargs);
    for (int k = 0; k < nargs; k++) {
        op->arg[k].t = va_arg(ap, Tensor *);
        const char *ix = va_arg(ap, const char *);
        op->arg[k].index = ix ? xstrdup(ix) : NULL;
        reads(in, op->arg[k].t);
    }
    va_end(ap);
    op->n_arg = nargs;
    in->ops = op;
    in->n_ops = 1;
    writes(in, out);
    return in;
}

static const char *act_fwd_expr(int act)
{
    switch (act) {
    case ACT_RELU: return "$0 < 0.0f ? 0.0f : $0";   /* NaN stays NaN, as torch.relu */
    case ACT_GELU: return "rt_gelu($0)";
    case ACT_GELU_TANH: return "rt_gelu_tanh($0)";
    case ACT_SILU: return "rt_silu($0)";
    case ACT_TANH: return "rt_tanhf($0)";
    case ACT_SIGMOID: return "rt_sigmoidf($0)";
    }
    unreachable();
}

/* Backward of an activation: $0 = dy, $1 = what the rule needs (x or y). Rules that
 * can use the output do, so the pre-activation (often a GEMM output) need not live. */
static const char *act_bwd_expr(int act, int *uses_output)
{
    *uses_output = act == ACT_RELU || act == ACT_TANH || act == ACT_SIGMOID;
    switch (act) {
    case ACT_RELU: return "$1 <= 0.0f ? 0.0f : $0";  /* torch's threshold_backward */
    case ACT_GELU: return "rt_gelu_bwd($1, $0)";
    case ACT_GELU_TANH: return "rt_gelu_tanh_bwd($1, $0)";
    case ACT_SILU: return "rt_silu_bwd($1, $0)";
    case ACT_TANH: return "$0 * (1.0f - $1 * $1)";
    case ACT_SIGMOID: return "$0 * $1 * (1.0f - $1)";
    }
    unreachable();
}

static const char *act_name(int act)
{
    static const char *n[] = {"relu", "gelu", "gelu (tanh)", "silu", "tanh", "sigmoid"};
    return n[act];
}

static Tensor *temp(Graph *g, const char *name, int64_t per_row, const char *origin,
                    const char *what)
{
    Tensor *t = graph_tensor(g, T_TEMP, name, 1, &per_row);
    t->origin = origin;
    t->what = what;
    return t;
}

/* a conv2d GEMM operand: `rows` rows of B * `cols` (per_row = rows * cols) */
static Tensor *gemm_temp(Graph *g, const char *name, int64_t rows, int64_t cols,
                         const char *origin, const char *what)
{
    Tensor *t = temp(g, name, rows * cols, origin, what);
    t->layout = xasprintf("[%lld, B*%lld]", (long long)rows, (long long)cols);
    return t;
}

static void lower_conv_fwd(Program *p, Node *nd)
{
    Graph *g = p->g;
    int64_t C = nd->conv[0], H = nd->conv[1], W = nd->conv[2], k = nd->conv[3], s = nd->conv[4],
            pad = nd->conv[5], OH = nd->conv[6], OW = nd->conv[7];
    int64_t Cout = nd->out->shape[0], CKK = C * k * k, HW = OH * OW;
    Tensor *x = nd->in[0], *y = nd->out;
    Tensor *col = gemm_temp(g, xasprintf("col_%s", y->name), CKK, HW, nd->origin,
                            "im2col columns [C*k*k, B*OH*OW]");
    Tensor *yt = gemm_temp(g, xasprintf("gemm_%s", y->name), Cout, HW, nd->origin,
                           "GEMM output [out, B*OH*OW]");
    Instr *a = add(p, I_CALL, nd->origin, 0);
    a->what = xstrdup("conv2d: im2col");
    SET_CALL(a, CALL_IM2COL, arg_t(x), arg_t(col), arg_rows(1), arg_int(C), arg_int(H), arg_int(W),
             arg_int(k), arg_int(s), arg_int(pad), arg_int(OH), arg_int(OW));
    reads(a, x);
    writes(a, col);
    Instr *b = add(p, I_GEMM, nd->origin, 0);
    b->flops = 2 * Cout * CKK * HW;
    b->what = xstrdup("conv2d: weight x columns");
    SET_CALL(b, CALL_GEMM, arg_int(0), arg_int(0), arg_int(Cout), arg_rows(HW), arg_int(CKK),
             arg_float(1), arg_t(nd->w->t), arg_int(CKK), arg_t(col), arg_rows(HW), arg_float(0),
             arg_t(yt), arg_rows(HW));
    reads(b, nd->w->t);
    reads(b, col);
    writes(b, yt);
    /* epilogue: [out, B, HW] -> [B, out, HW], plus bias */
    char *perm = xasprintf("(i / %lld %% %lld) * (e->B * %lld) + i / %lld * %lld + i %% %lld",
                           (long long)HW, (long long)Cout, (long long)HW, (long long)(Cout * HW),
                           (long long)HW, (long long)HW);
    Instr *ep;
    if (nd->b) {
        char *bix = xasprintf("i / %lld %% %lld", (long long)HW, (long long)Cout);
        ep = ew(p, nd, "conv2d epilogue: bias, [out, B, HW] -> [B, out, HW]", y, EW_ADD,
                "$0 + $1", 2, yt, perm, nd->b->t, bix);
        ep->ops[0].arg[1].run = HW;      /* the bias: one value a row of HW */
        ep->ops[0].arg[1].run_const = 1;
    } else {
        ep = ew(p, nd, "conv2d epilogue: [out, B, HW] -> [B, out, HW]", y, EW_COPY, "$0", 1, yt,
                perm);
    }
    ep->ops[0].arg[0].run = HW;          /* rows of HW move whole */
}

static void lower_conv_bwd(Program *p, Node *nd)
{
    Graph *g = p->g;
    int64_t C = nd->conv[0], H = nd->conv[1], W = nd->conv[2], k = nd->conv[3], s = nd->conv[4],
            pad = nd->conv[5], OH = nd->conv[6], OW = nd->conv[7];
    Tensor *dy = nd->in[0], *x = nd->in[1], *dx = nd->out;
    int64_t Cout = dy->shape[0], CKK = C * k * k, HW = OH * OW;
    /* named after the forward pass's buffers (col_conv_3, gemm_conv_3) they mirror */
    const char *y = nd->fwd->out->name;
    Tensor *dyt = gemm_temp(g, xasprintf("d_gemm_%s", y), Cout, HW, nd->origin,
                            "gradient in GEMM layout [out, B*OH*OW]");
    Tensor *col = gemm_temp(g, xasprintf("col_%s_again", y), CKK, HW, nd->origin,
                            "im2col columns, recomputed [C*k*k, B*OH*OW]");
    /* [B, out, HW] -> [out, B, HW]: element j of dyt reads dy[b, co, q] */
    char *perm = xasprintf("i %% (e->B * %lld) / %lld * %lld + i / (e->B * %lld) * %lld + i %% %lld",
                           (long long)HW, (long long)HW, (long long)(Cout * HW), (long long)HW,
                           (long long)HW, (long long)HW);
    Instr *tr = ew(p, nd, "conv2d backward: [B, out, HW] -> [out, B, HW]", dyt, EW_COPY, "$0", 1,
                   dy, perm);
    tr->ops[0].arg[0].run = HW;          /* rows of HW move whole */
    if (nd->b) {
        Instr *r = add(p, I_CALL, nd->origin, 1);
        r->what = xstrdup("conv2d backward: bias gradient");
        SET_CALL(r, CALL_ROWSUM_ADD, arg_t(dyt), arg_t(nd->b->g), arg_int(Cout), arg_rows(HW));
        reads(r, dyt);
        writes(r, nd->b->g);
    }
    Instr *a = add(p, I_CALL, nd->origin, 1);
    a->what = xstrdup("conv2d backward: im2col again (cheaper than keeping it)");
    SET_CALL(a, CALL_IM2COL, arg_t(x), arg_t(col), arg_rows(1), arg_int(C), arg_int(H), arg_int(W),
             arg_int(k), arg_int(s), arg_int(pad), arg_int(OH), arg_int(OW));
    reads(a, x);
    writes(a, col);
    Instr *b = add(p, I_GEMM, nd->origin, 1);
    b->what = xstrdup("conv2d backward: dW += dY col^T");
    SET_CALL(b, CALL_GEMM, arg_int(0), arg_int(1), arg_int(Cout), arg_int(CKK), arg_rows(HW),
             arg_float(1), arg_t(dyt), arg_rows(HW), arg_t(col), arg_rows(HW), arg_float(1),
             arg_t(nd->w->g), arg_int(CKK));
    reads(b, dyt);
    reads(b, col);
    writes(b, nd->w->g);
    if (!dx)
        return;
    Tensor *dcol = gemm_temp(g, xasprintf("d_col_%s", y), CKK, HW, nd->origin,
                             "column gradients [C*k*k, B*OH*OW]");
    Instr *c = add(p, I_GEMM, nd->origin, 1);
    c->what = xstrdup("conv2d backward: dcol = W^T dY");
    SET_CALL(c, CALL_GEMM, arg_int(1), arg_int(0), arg_int(CKK), arg_rows(HW), arg_int(Cout),
             arg_float(1), arg_t(nd->w->t), arg_int(CKK), arg_t(dyt), arg_rows(HW), arg_float(0),
             arg_t(dcol), arg_rows(HW));
    reads(c, nd->w->t);
    reads(c, dyt);
    writes(c, dcol);
    Instr *d = add(p, I_CALL, nd->origin, 1);
    d->what = xstrdup("conv2d backward: col2im");
    SET_CALL(d, CALL_COL2IM, arg_t(dcol), arg_t(dx), arg_rows(1), arg_int(C), arg_int(H),
             arg_int(W), arg_int(k), arg_int(s), arg_int(pad), arg_int(OH), arg_int(OW));
    reads(d, dcol);
    writes(d, dx);
}

/* A linear layer's description, saying when W is another layer's weight ("tie"): its
 * name (P_wte_weight in the call) alone would not tell the reader why. */
static char *tied_note(char *what, const Node *nd, int dw)
{
    if (!nd->layer || !nd->layer->tie)
        return what;
    return xasprintf("%s; W is %s (tied%s)", what, nd->w->name,
                     dw ? ": the embedding's backward adds to the same gradient" : "");
}

/* A linear layer: the GEMM, and the bias in a loop after it (fusion moves it into
 * the GEMM's epilogue where it can). */
static void lower_linear(Program *p, Node *nd)
{
    Tensor *x = nd->in[0], *y = nd->out;
    int64_t in = x->shape[x->rank - 1], out = y->shape[y->rank - 1], rows = x->numel / in;
    Instr *a = add(p, I_GEMM, nd->origin, 0);
    a->flops = 2 * rows * in * out;
    a->what = pads(nd->w, out, y)
                  ? xasprintf("linear: y = x W^T over W's %lld zero rows too (the padded "
                              "vocabulary: y's padding comes out 0)",
                              (long long)nd->w->pad_rows)
                  : xasprintf("linear: y = x W^T%s",
                              nd->b ? " (+ b in the loop after it, the linear epilogue)" : "");
    a->what = tied_note(a->what, nd, 0);
    SET_CALL(a, CALL_GEMM, arg_int(0), arg_int(1), arg_rows(rows),
             arg_int(padded_rows(nd->w, out, y)), arg_int(in), arg_float(1), arg_t(x),
             arg_int(in), arg_t(nd->w->t), arg_int(in), arg_float(0), arg_t(y),
             arg_int(tensor_ld(y)));
    reads(a, x);
    reads(a, nd->w->t);
    writes(a, y);
    if (nd->b) {
        /* epilogue, in place over the GEMM output; fusion pulls the activation in */
        char *bix = xasprintf("i %% %lld", (long long)out);
        Instr *e = ew(p, nd, "linear epilogue: + bias", y, EW_ADD, "$0 + $1", 2, y, NULL,
                      nd->b->t, bix);
        e->ops[0].arg[1].period = out;
    }
}

/* Max or average pooling. */
static void lower_pool(Program *p, Node *nd)
{
    Tensor *x = nd->in[0], *y = nd->out;
    Instr *a = add(p, I_CALL, nd->origin, 0);
    int mx = nd->kind == N_MAXPOOL;
    a->what = xstrdup(mx ? "maxpool2d" : "avgpool2d");
    SET_CALL(a, mx ? CALL_MAXPOOL_FWD : CALL_AVGPOOL_FWD, arg_t(x), arg_t(y),
             arg_rows(nd->conv[0]), arg_int(nd->conv[1]), arg_int(nd->conv[2]),
             arg_int(nd->conv[3]), arg_int(nd->conv[4]), arg_int(nd->conv[6]),
             arg_int(nd->conv[7]));
    reads(a, x);
    writes(a, y);
}

/* Layer normalization, its mean and 1/std saved for the backward pass. */
static void lower_layernorm(Program *p, Node *nd)
{
    Tensor *x = nd->in[0], *y = nd->out;
    int64_t d = x->shape[x->rank - 1];
    Instr *a = add(p, I_CALL, nd->origin, 0);
    a->what = xstrdup("layernorm");
    if (p->eval) {   /* the call writes them; validation has no backward to read them */
        nd->tmp[0]->what = "layernorm mean (validation: written, not read)";
        nd->tmp[1]->what = "layernorm 1/std (validation: written, not read)";
    }
    SET_CALL(a, CALL_LAYERNORM_FWD, arg_t(x), arg_t(nd->w->t), arg_t(nd->b->t), arg_t(y),
             arg_t(nd->tmp[0]), arg_t(nd->tmp[1]), arg_rows(x->numel / d), arg_int(d),
             arg_float(nd->p));
    reads(a, x);
    reads(a, nd->w->t);
    reads(a, nd->b->t);
    writes(a, y);
    writes(a, nd->tmp[0]);
    writes(a, nd->tmp[1]);
}

/* The loss, and in training the gradient of the prediction. */
static void lower_loss(Program *p, Node *nd)
{
    Tensor *pred = nd->in[0], *t = nd->in[1];
    Instr *a = add(p, I_CALL, nd->origin, 0);
    if (nd->loss == LOSS_CROSS_ENTROPY) {
        int64_t C = pred->shape[pred->rank - 1];
        a->what = xstrdup(p->eval ? "cross entropy: loss and accuracy (no gradient in validation)"
                                  : "cross entropy: loss, accuracy and d(logits) in one pass");
        /* no gradient in validation's program; in training's, only while e->train */
        SET_CALL(a, CALL_CROSS_ENTROPY, arg_t(pred), arg_t(t),
                 p->eval ? arg_null() : arg_train(nd->out2), arg_rows(pred->numel / C),
                 arg_int(C), arg_int(tensor_ld(pred)));
    } else {
        a->what = xstrdup(p->eval ? "mean squared error (no gradient in validation)"
                                  : "mean squared error and d(prediction)");
        SET_CALL(a, CALL_MSE, arg_t(pred), arg_t(t), p->eval ? arg_null() : arg_train(nd->out2),
                 arg_rows(pred->numel));
    }
    reads(a, pred);
    reads(a, t);
    if (!p->eval) {
        writes(a, nd->out2);
        /* the logits' gradient may take the logits' storage (rt_cross_entropy writes
         * each logit after reading it, z[target] first), so the two [B, T, vocab]
         * buffers of a language model are one: memplan decides */
        if (nd->loss == LOSS_CROSS_ENTROPY)
            a->inplace = pred;
    }
}

/* The attention core, each query's log-sum-exp kept for the backward pass. */
static void lower_attention(Program *p, Node *nd)
{
    Tensor *x = nd->in[0], *y = nd->out;
    Instr *a = add(p, I_CALL, nd->origin, 0);
    a->flops = 4 * nd->conv[0] * nd->conv[0] * nd->conv[1];
    a->what = xstrdup(p->eval ? "attention: softmax(q k^T / sqrt(hd)) v per head"
                              : "attention: softmax(q k^T / sqrt(hd)) v per head, log-sum-exp kept");
    if (p->eval)
        nd->tmp[0]->what = "each query's log-sum-exp (validation: written, not read)";
    SET_CALL(a, CALL_ATTENTION_FWD, arg_t(x), arg_t(nd->tmp[0]), arg_t(y), arg_rows(1),
             arg_int(nd->conv[0]), arg_int(nd->conv[1]), arg_int(nd->conv[2]),
             arg_int((int)nd->conv[3]));
    reads(a, x);
    writes(a, nd->tmp[0]);
    writes(a, y);
}

/* Attention's backward pass. */
static void lower_attention_bwd(Program *p, Node *nd)
{
    Tensor *dy = nd->in[0], *x = nd->in[1], *y = nd->out;
    Instr *a = add(p, I_CALL, nd->origin, 1);
    a->what = xstrdup("attention backward: d(qkv), probabilities recomputed from the log-sum-exp");
    SET_CALL(a, CALL_ATTENTION_BWD, arg_t(x), arg_t(nd->tmp[0]), arg_t(nd->fwd->out), arg_t(dy),
             arg_t(y), arg_rows(1), arg_int(nd->conv[0]), arg_int(nd->conv[1]),
             arg_int(nd->conv[2]), arg_int((int)nd->conv[3]));
    reads(a, x);
    reads(a, nd->tmp[0]);
    reads(a, nd->fwd->out);
    reads(a, dy);
    writes(a, y);
}

/* A linear layer's backward pass: dx, dW and db. */
static void lower_linear_bwd(Program *p, Node *nd)
{
    Tensor *dy = nd->in[0], *x = nd->in[1], *y = nd->out;
    int64_t in = x->shape[x->rank - 1], out = dy->shape[dy->rank - 1], rows = x->numel / in;
    if (y) {
        Instr *a = add(p, I_GEMM, nd->origin, 1);
        a->what = xstrdup(pads(nd->w, out, dy) ? "linear backward: dx = dy W (over the padded "
                                            "vocabulary: dy's padding is 0)"
                                          : "linear backward: dx = dy W");
        a->what = tied_note(a->what, nd, 0);
        SET_CALL(a, CALL_GEMM, arg_int(0), arg_int(0), arg_rows(rows), arg_int(in),
                 arg_int(padded_rows(nd->w, out, dy)), arg_float(1), arg_t(dy),
                 arg_int(tensor_ld(dy)), arg_t(nd->w->t), arg_int(in), arg_float(0), arg_t(y),
                 arg_int(in));
        reads(a, dy);
        reads(a, nd->w->t);
        writes(a, y);
    }
    Instr *b = add(p, I_GEMM, nd->origin, 1);
    b->what = xstrdup(pads(nd->w, out, dy) ? "linear backward: dW += dy^T x (the zero rows' "
                                        "gradient: 0, from dy's zero padding)"
                                      : "linear backward: dW += dy^T x");
    b->what = tied_note(b->what, nd, 1);
    SET_CALL(b, CALL_GEMM, arg_int(1), arg_int(0), arg_int(padded_rows(nd->w, out, dy)),
             arg_int(in), arg_rows(rows), arg_float(1), arg_t(dy), arg_int(tensor_ld(dy)),
             arg_t(x), arg_int(in), arg_float(1), arg_t(nd->w->g), arg_int(in));
    reads(b, dy);
    reads(b, x);
    writes(b, nd->w->g);
    if (nd->b) {
        Instr *c = add(p, I_CALL, nd->origin, 1);
        c->what = xstrdup("linear backward: db += column sums of dy");
        SET_CALL(c, CALL_COLSUM_ADD, arg_t(dy), arg_t(nd->b->g), arg_rows(rows), arg_int(out));
        reads(c, dy);
        writes(c, nd->b->g);
    }
}

/* Pooling's backward pass. */
static void lower_pool_bwd(Program *p, Node *nd)
{
    Tensor *dy = nd->in[0], *x = nd->in[1], *y = nd->out;
    int mx = nd->kind == N_MAXPOOL_BWD;
    Instr *a = add(p, I_CALL, nd->origin, 1);
    a->what = xstrdup(mx ? "maxpool2d backward (argmax found again from x)" : "avgpool2d backward");
    Arg shape[7] = {arg_rows(nd->conv[0]), arg_int(nd->conv[1]), arg_int(nd->conv[2]),
                    arg_int(nd->conv[3]), arg_int(nd->conv[4]), arg_int(nd->conv[6]),
                    arg_int(nd->conv[7])};
    if (mx)
        SET_CALL(a, CALL_MAXPOOL_BWD, arg_t(x), arg_t(dy), arg_t(y), shape[0], shape[1],
                 shape[2], shape[3], shape[4], shape[5], shape[6]);
    else
        SET_CALL(a, CALL_AVGPOOL_BWD, arg_t(dy), arg_t(y), shape[0], shape[1], shape[2],
                 shape[3], shape[4], shape[5], shape[6]);
    if (mx)
        reads(a, x);
    reads(a, dy);
    writes(a, y);
}

/* Layer normalization's backward pass. */
static void lower_layernorm_bwd(Program *p, Node *nd)
{
    Graph *g = p->g;
    Tensor *dy = nd->in[0], *x = nd->in[1], *y = nd->out;
    int64_t d = x->shape[x->rank - 1];
    Tensor *dx = y;
    if (!dx)
        dx = temp(g, xasprintf("d_%s_unused", x->name), x->numel, nd->origin,
                  "input gradient nobody reads");
    Instr *a = add(p, I_CALL, nd->origin, 1);
    a->what = xstrdup("layernorm backward");
    /* NULL: no addend (fusion.c's layernorm_bwd_sums may fold a gradient sum in) */
    SET_CALL(a, CALL_LAYERNORM_BWD, arg_t(x), arg_t(nd->w->t), arg_t(nd->tmp[0]),
             arg_t(nd->tmp[1]), arg_t(dy), arg_null(), arg_t(dx), arg_t(nd->w->g),
             arg_t(nd->b->g), arg_rows(x->numel / d), arg_int(d));
    reads(a, x);
    reads(a, nd->w->t);
    reads(a, nd->tmp[0]);
    reads(a, nd->tmp[1]);
    reads(a, dy);
    writes(a, dx);
    writes(a, nd->w->g);
    writes(a, nd->b->g);
}

/* One node's instructions, appended to the program (the heavier kinds in their own
 * functions above). */
static void lower_node(Program *p, Node *nd)
{
    Tensor *x = nd->n_in ? nd->in[0] : NULL, *y = nd->out;
    switch (nd->kind) {
    case N_CONVERT: {
        char *e;
        if (nd->shift != 0.0)
            e = xasprintf("(float)$0 * %s + %s", flit(nd->scale), flit(nd->shift));
        else if (nd->scale != 1.0)
            e = xasprintf("(float)$0 * %s", flit(nd->scale));
        else
            e = xstrdup("(float)$0");
        ew(p, nd, "input to f32", y, EW_OTHER, e, 1, x, NULL);
        return;
    }
    case N_LINEAR:
        lower_linear(p, nd);
        return;
    case N_CONV2D:
        lower_conv_fwd(p, nd);
        return;
    case N_MAXPOOL:
    case N_AVGPOOL:
        lower_pool(p, nd);
        return;
    case N_FLATTEN:
        return;                     /* a view: y shares x's storage */
    case N_ACT:
        ew(p, nd, act_name(nd->act), y, EW_ACT, act_fwd_expr(nd->act), 1, x, NULL);
        return;
    case N_DROPOUT: {
        char *e = xasprintf("e->train ? (rt_uniform(e->rng_key ^ 0x%016llxull, rt_drop_index((uint64_t)i, "
                            "%lld, e->rng_part)) < %s ? 0.0f : $0 * %s) : $0",
                            (unsigned long long)nd->key, (long long)x->numel, flit(nd->p),
                            flit(1.0 / (1.0 - nd->p)));
        ew(p, nd, "dropout (mask from a counter-based hash, never stored)", y, EW_DROPOUT, e, 1,
           x, NULL);
        return;
    }
    case N_LAYERNORM:
        lower_layernorm(p, nd);
        return;
    case N_LOSS:
        lower_loss(p, nd);
        return;
    case N_EMBEDDING: {
        int64_t V = nd->w->shape[0], dim = nd->w->shape[1];
        Instr *a = add(p, I_CALL, nd->origin, 0);
        a->what = xstrdup("embedding: rows of the weight picked by the ids");
        SET_CALL(a, CALL_EMBEDDING_FWD, arg_t(x), arg_t(nd->w->t), arg_t(y), arg_rows(x->numel),
                 arg_int(V), arg_int(dim));
        reads(a, x);
        reads(a, nd->w->t);
        writes(a, y);
        return;
    }
    case N_POS_EMBEDDING: {
        char *ix = xasprintf("i %% %lld", (long long)x->numel);
        Instr *e = ew(p, nd, "pos_embedding: + position rows", y, EW_ADD, "$0 + $1", 2, x, NULL,
                      nd->w->t, ix);
        e->ops[0].arg[1].period = x->numel;
        return;
    }
    case N_ATTENTION:
        lower_attention(p, nd);
        return;
    case N_ADD:
        ew(p, nd, nd->backward ? "sum of gradient contributions" : "residual: x + body(x)", y,
           EW_ADD, "$0 + $1", 2, nd->in[0], NULL, nd->in[1], NULL);
        return;
    case N_EMBEDDING_BWD: {
        Tensor *dy = nd->in[0], *ids = nd->in[1];
        Instr *a = add(p, I_CALL, nd->origin, 1);
        a->what = xstrdup("embedding backward: dW[id] += dy");
        SET_CALL(a, CALL_EMBEDDING_BWD, arg_t(ids), arg_t(dy), arg_t(nd->w->g),
                 arg_rows(ids->numel), arg_int(nd->w->shape[0]), arg_int(nd->w->shape[1]));
        reads(a, ids);
        reads(a, dy);
        writes(a, nd->w->g);
        return;
    }
    case N_POS_EMBEDDING_BWD: {
        Tensor *dy = nd->in[0];
        Instr *a = add(p, I_CALL, nd->origin, 1);
        a->what = xstrdup("pos_embedding backward: dW[t] += sum over the batch of dy[t]");
        SET_CALL(a, CALL_COLSUM_ADD, arg_t(dy), arg_t(nd->w->g), arg_rows(1), arg_int(dy->numel));
        reads(a, dy);
        writes(a, nd->w->g);
        return;
    }
    case N_ATTENTION_BWD:
        lower_attention_bwd(p, nd);
        return;
    case N_LINEAR_BWD:
        lower_linear_bwd(p, nd);
        return;
    case N_CONV2D_BWD:
        lower_conv_bwd(p, nd);
        return;
    case N_MAXPOOL_BWD:
    case N_AVGPOOL_BWD:
        lower_pool_bwd(p, nd);
        return;
    case N_ACT_BWD: {
        int uses_out;
        const char *e = act_bwd_expr(nd->act, &uses_out);
        char *what = xasprintf("%s backward", act_name(nd->act));
        ew(p, nd, what, y, EW_ACT_BWD, e, 2, nd->in[0], NULL, uses_out ? nd->in[2] : nd->in[1],
           NULL);
        return;
    }
    case N_DROPOUT_BWD: {
        char *e = xasprintf("rt_uniform(e->rng_key ^ 0x%016llxull, rt_drop_index((uint64_t)i, %lld, "
                            "e->rng_part)) < %s ? 0.0f : $0 * %s",
                            (unsigned long long)nd->key, (long long)nd->in[0]->numel, flit(nd->p),
                            flit(1.0 / (1.0 - nd->p)));
        ew(p, nd, "dropout backward (the same mask, regenerated)", y, EW_DROPOUT, e, 1, nd->in[0],
           NULL);
        return;
    }
    case N_LAYERNORM_BWD:
        lower_layernorm_bwd(p, nd);
        return;
    }
    unreachable();
}

static Program *lower_prog(Graph *g, int eval)
{
    Program *p = xcalloc(1, sizeof *p);
    p->g = g;
    p->eval = eval;
    p->kprefix = eval ? "ke" : "k";
    for (int i = 0; i < g->n_nodes; i++) {
        if (i == g->n_forward)
            p->n_forward = p->n_ins;
        p->cur_block = g->nodes[i]->block;
        lower_node(p, g->nodes[i]);
    }
    if (g->n_forward == g->n_nodes)
        p->n_forward = p->n_ins;
    return p;
}

Program *lower(Graph *g) { return lower_prog(g, 0); }
Program *lower_eval(Graph *g) { return lower_prog(g, 1); }

/* Before the first backward instruction that writes a parameter's gradient, tell the
 * runtime it is about to be written (rt_grad_begin: zero2 on GPUs backs that part of
 * the gradient region with memory only from here on; elsewhere it returns at once;
 * parameters first written by one instruction and adjacent in the region are one
 * call), and after the last one that the gradient is final (rt_grad_ready:
 * data-parallel training starts reducing it while the rest of the backward pass
 * runs; a world of one returns at once). */
static Instr *hook(const char *origin, char *what, int call, int64_t off, int64_t n)
{
    Instr *h = xcalloc(1, sizeof *h);
    h->kind = I_CALL;
    h->backward = 1;
    h->block = -1;
    h->origin = origin;
    h->what = what;
    SET_CALL(h, call, arg_int(off), arg_int(n));
    return h;
}

void add_grad_hooks(Program *p)
{
    Graph *g = p->g;
    int *first = xcalloc((size_t)g->n_params + 1, sizeof *first);
    int *last = xcalloc((size_t)g->n_params + 1, sizeof *last);
    for (int k = 0; k < g->n_params; k++)
        first[k] = last[k] = -1;
    for (int i = p->n_forward; i < p->n_ins; i++) {
        Instr *in = p->ins[i];
        if (in->dead)
            continue;
        for (int w = 0; w < in->n_writes; w++)
            if (in->writes[w]->kind == T_PGRAD)
                for (int k = 0; k < g->n_params; k++)
                    if (g->params[k] == in->writes[w]->param) {
                        if (first[k] < 0)
                            first[k] = i;
                        last[k] = i;
                    }
    }
    Instr **ins = xcalloc((size_t)(p->n_ins + 2 * g->n_params) + 1, sizeof *ins);
    int n = 0;
    for (int i = 0; i < p->n_ins; i++) {
        /* the parameters first written here, as runs adjacent in the region (parameters
         * are laid out in order) */
        for (int k = 0; k < g->n_params; k++) {
            if (first[k] != i || (k > 0 && first[k - 1] == i &&
                                  g->params[k - 1]->offset + param_extent(g->params[k - 1]) ==
                                      g->params[k]->offset))
                continue;
            int j = k;
            while (j + 1 < g->n_params && first[j + 1] == i &&
                   g->params[j]->offset + param_extent(g->params[j]) == g->params[j + 1]->offset)
                j++;
            Param *a = g->params[k], *b = g->params[j];
            char *what = j == k ? xasprintf("%s's gradient is written from here on", a->name)
                         : j == k + 1 ? xasprintf("the gradients of %s and %s are written from here on",
                                                  a->name, b->name)
                                      : xasprintf("the gradients of %s to %s are written from here on",
                                                  a->name, b->name);
            ins[n++] = hook(p->ins[i]->origin, what, CALL_GRAD_BEGIN, a->offset,
                                 b->offset + param_extent(b) - a->offset);
        }
        ins[n++] = p->ins[i];
        for (int k = 0; k < g->n_params; k++) {
            if (last[k] != i)
                continue;
            Param *pa = g->params[k];
            ins[n++] = hook(p->ins[i]->origin, xasprintf("%s's gradient is final", pa->name),
                                 CALL_GRAD_READY, pa->offset, param_extent(pa));
        }
    }
    free(p->ins);
    p->ins = ins;
    p->n_ins = n;
    p->cap_ins = n;
    free(first);
    free(last);
}
