/* conv_transpose2d.c: the transposed 2-D convolution over [C, H, W] (nn.ConvTranspose2d,
 * groups 1): its graph and shapes, its backward rule and its lowering. It is conv2d's
 * data gradient, so it lowers to conv2d's pieces run the other way round:
 *   forward   x to GEMM layout, cols = W^T x (one GEMM), col2im, the bias;
 *   backward  im2col of dy, dx = W cols (conv2d's forward GEMM), dW += x cols^T,
 *             the bias gradient a row sum of dy.
 * Node.conv holds the geometry of that conv2d (the one whose input gradient this is):
 * its input is this layer's output [out, OH, OW], its output this layer's input. */
#include <math.h>
#include <string.h>
#include "op.h"


/* The output's side: (n - 1) stride - 2 padding + kernel + output_padding, or an error
 * when that is not positive. */
static int64_t out_side(GraphCtx *c, const Layer *l, int64_t n)
{
    int64_t o = (n - 1) * l->stride + l->kernel + l->output_padding - 2 * l->padding;
    if (o < 1)
        layer_error(c, l, "padding %lld leaves no output (side (%lld - 1) * %lld + %lld + %lld "
                    "- 2 * %lld = %lld)", (long long)l->padding, (long long)n,
                    (long long)l->stride, (long long)l->kernel, (long long)l->output_padding,
                    (long long)l->padding, (long long)o);
    return o;
}

/* [C, H, W] -> [out, OH, OW], OH = (H - 1) stride - 2 padding + kernel + output_padding;
 * W [C, out, k, k], b [out]; PyTorch's default init: uniform +-1/sqrt(out k k) for both
 * (nn.ConvTranspose2d's fan_in is weight.size(1) k k) */
static void build_conv_t2d(GraphCtx *c, const LayerArgs *a)
{
    Graph *g = c->g;
    const Layer *l = a->l;
    Tensor *x = a->x;
    Init init = a->init;
    if (x->rank != 3)
        layer_error(c, l, "conv_transpose2d needs a [channels, height, width] input, got %s",
                    shape_str(x->rank, x->shape));
    if (l->output_padding >= l->stride)
        layer_error(c, l, "output_padding %lld must be smaller than stride %lld (as in "
                    "nn.ConvTranspose2d)", (long long)l->output_padding, (long long)l->stride);
    int64_t C = x->shape[0], H = x->shape[1], W = x->shape[2], k = l->kernel, Co = l->out;
    int64_t OH = out_side(c, l, H), OW = out_side(c, l, W);
    int64_t OKK, HW;   /* the GEMM [out*k*k, C] x [C, B*H*W] (lower_conv_t2d) */
    if (__builtin_mul_overflow(Co, k * k, &OKK))
        OKK = INT64_MAX;
    if (__builtin_mul_overflow(H, W, &HW))
        HW = INT64_MAX;
    gemm_dim(g, l->path, "conv_transpose2d", "out*k*k (output channels times kernel area)", OKK);
    gemm_dim(g, l->path, "conv_transpose2d", "H*W (input positions)", HW);
    count_act(c, l->path, 2, (int64_t[]){OKK, HW});   /* col2im's columns */
    int64_t shp[3] = {Co, OH, OW};
    Tensor *y = act_tensor(c, l->path, layer_ident("convt", a->pfx), 3, shp);
    y->origin = a->at;
    y->what = "conv_transpose2d output";
    Node *nd = layer_node(c, a, N_CONV_T2D, x, y);
    int64_t cv[8] = {Co, OH, OW, k, l->stride, l->padding, H, W};
    memcpy(nd->conv, cv, sizeof cv);
    int64_t ws[4] = {C, Co, k, k};
    double bound = 1.0 / sqrt((double)OKK);
    int def = init.kind == INIT_DEFAULT;
    double wa = def ? bound : init.kind == INIT_GPT2 ? 0.02 : init.std;
    nd->w = add_param(g, a->pfx, "weight", 4, ws, def ? RT_INIT_UNIFORM : RT_INIT_NORMAL, wa,
                      l->path);
    if (l->bias)
        nd->b = add_param(g, a->pfx, "bias", 1, &ws[1], def ? RT_INIT_UNIFORM : RT_INIT_CONST,
                          def ? bound : 0.0, l->path);
    double macs = (double)C * OKK * HW;
    add_flops(c, nd, l->path, 2 * macs, 2 * macs, 2 * macs);
    c->cur = y;
}

/* t [B, rows, HW] -> [rows, B*HW] into a new GEMM operand */
static Tensor *to_gemm(Program *p, Node *nd, Tensor *t, const char *name, const char *what,
                       const char *instr_what)
{
    int64_t rows = t->shape[0], HW = t->shape[1] * t->shape[2];
    Tensor *g = gemm_temp(p->g, name, rows, HW, nd->origin, what);
    INSTR_EW(p, nd, instr_what, g, EW_COPY, x_arg(0), opd_at(t, ix_to_gemm(HW, rows)));
    return g;
}

static void lower_conv_t2d(Program *p, Node *nd)
{
    Graph *g = p->g;
    Tensor *x = nd->in[0], *y = nd->out;
    int64_t C = x->shape[0], Co = nd->conv[0], k = nd->conv[3], HW = nd->conv[6] * nd->conv[7];
    int64_t OKK = Co * k * k;
    Tensor *xt = to_gemm(p, nd, x, xasprintf("gemm_in_%s", y->name),
                         "input in GEMM layout [in, B*H*W]",
                         "conv_transpose2d: [B, in, HW] -> [in, B, HW]");
    Tensor *col = gemm_temp(g, xasprintf("col_%s", y->name), OKK, HW, nd->origin,
                            "columns [out*k*k, B*H*W]");
    Instr *b = instr_add(p, I_GEMM, nd->origin, 0);
    b->flops = 2 * C * OKK * HW;   /* what recomputation would replay */
    b->what = xstrdup("conv_transpose2d: cols = W^T x");
    SET_CALL(b, CALL_GEMM, arg_int(1), arg_int(0), arg_int(OKK), arg_rows(HW), arg_int(C),
             arg_float(1), arg_t(nd->w->t), arg_int(OKK), arg_t(xt), arg_rows(HW), arg_float(0),
             arg_t(col), arg_rows(HW));
    instr_reads(b, nd->w->t);
    instr_reads(b, xt);
    instr_writes(b, col);
    if (!nd->b) {
        conv_call(p, nd, CALL_COL2IM, col, y, 0, "conv_transpose2d: col2im");
        return;
    }
    Tensor *raw = lower_temp(g, xasprintf("raw_%s", y->name), y->numel, nd->origin,
                             "col2im output before the bias [B, out, OH*OW]");
    conv_call(p, nd, CALL_COL2IM, col, raw, 0, "conv_transpose2d: col2im");
    INSTR_EW(p, nd, "conv_transpose2d: bias", y, EW_ADD, x_add(x_arg(0), x_arg(1)), opd(raw),
             opd_at(nd->b->t, ix_div_mod(nd->conv[1] * nd->conv[2], Co)));
}

/* in[0] = dy [B, out, OH, OW], in[1] = x [B, in, H, W]; out = dx */
static void lower_conv_t2d_bwd(Program *p, Node *nd)
{
    Graph *g = p->g;
    Tensor *dy = nd->in[0], *x = nd->in[1], *dx = nd->out;
    int64_t C = x->shape[0], Co = nd->conv[0], k = nd->conv[3], HW = nd->conv[6] * nd->conv[7];
    int64_t OKK = Co * k * k;
    const char *y = nd->fwd->out->name;
    if (nd->b) {
        Tensor *dyt = to_gemm(p, nd, dy, xasprintf("d_gemm_%s", y),
                              "gradient in GEMM layout [out, B*OH*OW]",
                              "conv_transpose2d backward: [B, out, OHW] -> [out, B, OHW]");
        Instr *r = instr_add(p, I_CALL, nd->origin, 1);
        r->what = xstrdup("conv_transpose2d backward: bias gradient");
        SET_CALL(r, CALL_ROWSUM_ADD, arg_t(dyt), arg_t(nd->b->g), arg_int(Co),
                 arg_rows(nd->conv[1] * nd->conv[2]));
        instr_reads(r, dyt);
        instr_writes(r, nd->b->g);
    }
    Tensor *col = gemm_temp(g, xasprintf("col_%s_d", y), OKK, HW, nd->origin,
                            "im2col of the gradient [out*k*k, B*H*W]");
    conv_call(p, nd, CALL_IM2COL, dy, col, 1, "conv_transpose2d backward: im2col of dy");
    Tensor *xt = to_gemm(p, nd, x, xasprintf("gemm_in_%s_again", y),
                         "input in GEMM layout, recomputed [in, B*H*W]",
                         "conv_transpose2d backward: [B, in, HW] -> [in, B, HW] again");
    Instr *b = instr_add(p, I_GEMM, nd->origin, 1);
    b->what = xstrdup("conv_transpose2d backward: dW += x cols^T");
    SET_CALL(b, CALL_GEMM, arg_int(0), arg_int(1), arg_int(C), arg_int(OKK), arg_rows(HW),
             arg_float(1), arg_t(xt), arg_rows(HW), arg_t(col), arg_rows(HW), arg_float(1),
             arg_t(nd->w->g), arg_int(OKK));
    instr_reads(b, xt);
    instr_reads(b, col);
    instr_writes(b, nd->w->g);
    if (!dx)
        return;
    Tensor *dxt = gemm_temp(g, xasprintf("d_gemm_in_%s", y), C, HW, nd->origin,
                            "input gradient in GEMM layout [in, B*H*W]");
    Instr *c = instr_add(p, I_GEMM, nd->origin, 1);
    c->what = xstrdup("conv_transpose2d backward: dx = W cols");
    SET_CALL(c, CALL_GEMM, arg_int(0), arg_int(0), arg_int(C), arg_rows(HW), arg_int(OKK),
             arg_float(1), arg_t(nd->w->t), arg_int(OKK), arg_t(col), arg_rows(HW), arg_float(0),
             arg_t(dxt), arg_rows(HW));
    instr_reads(c, nd->w->t);
    instr_reads(c, col);
    instr_writes(c, dxt);
    INSTR_EW(p, nd, "conv_transpose2d backward: [in, B, HW] -> [B, in, HW]", dx, EW_COPY,
             x_arg(0), opd_at(dxt, ix_from_gemm(HW, C)));
}

const OpDef op_conv_transpose2d = {.build = build_conv_t2d, .params = conv_params};
const NodeDef node_conv_t2d = {"conv_transpose2d", GRAD_NODE, N_CONV_T2D_BWD, lower_conv_t2d};
const NodeDef node_conv_t2d_bwd = {"conv_transpose2d_bwd", GRAD_NONE, 0, lower_conv_t2d_bwd};
