/* conv2d.c: 2-D convolution over [C, H, W]: its graph and shapes, its backward rule and
 * its lowering. Groups 1: rt_conv_fwd (yt [out, B*OH*OW] = W im2col(x)), an epilogue
 * that reorders [out, B, HW] to [B, out, HW] and adds the bias; backward: dy reordered
 * into dyt, the bias gradient, rt_conv_bwd_weight (dW += dyt im2col(x)^T) and
 * rt_conv_bwd_data (dx = col2im(W^T dyt)). Those three run on the CPU as im2col
 * (col2im) and a GEMM over the batch's columns and on a GPU, for the shapes where it
 * pays, as direct or implicit-GEMM kernels (runtime/conv.c). With groups > 1 (grouped
 * and depthwise convolution) the runtime's direct loops instead (rt_gconv_*,
 * runtime/conv_grouped.c): one call forward, two backward. */
#include <math.h>
#include <string.h>
#include "op.h"

int conv_params(const Layer *l, const char **out)
{
    int n = 0;
    out[n++] = "weight";
    if (l->bias)
        out[n++] = "bias";
    return n;
}

/* groups must divide both channel counts, as nn.Conv2d requires */
static void check_groups(GraphCtx *c, const Layer *l, int64_t C)
{
    if (C % l->groups)
        layer_error(c, l, "groups %lld does not divide the %lld input channels",
                    (long long)l->groups, (long long)C);
    if (l->out % l->groups)
        layer_error(c, l, "groups %lld does not divide out %lld", (long long)l->groups,
                    (long long)l->out);
}

/* [C, H, W] -> [out, OH, OW], OH = (H + 2 padding - kernel) / stride + 1 (OW alike);
 * W [out, C / groups, k, k], b [out] */
static void build_conv2d(GraphCtx *c, const LayerArgs *a)
{
    Graph *g = c->g;
    const Layer *l = a->l;
    Tensor *x = a->x;
    Init init = a->init;
    const char *at = a->at;
    const char *pfx = a->pfx;
    if (x->rank != 3)
        layer_error(c, l, "conv2d needs a [channels, height, width] input, got %s",
                    shape_str(x->rank, x->shape));
    int64_t C = x->shape[0], H = x->shape[1], W = x->shape[2];
    int64_t k = l->kernel, s = l->stride, p = l->padding;
    if (H + 2 * p < k || W + 2 * p < k)
        layer_error(c, l, "kernel %lld is larger than the padded input %lldx%lld",
                    (long long)k, (long long)(H + 2 * p), (long long)(W + 2 * p));
    int64_t OH = (H + 2 * p - k) / s + 1, OW = (W + 2 * p - k) / s + 1;
    check_groups(c, l, C);
    /* the GEMM [out, C*k*k] x [C*k*k, B*OH*OW] over im2col's columns (lower_conv_fwd);
     * grouped: C / groups input channels an output, no columns */
    int64_t CKK, HW;
    if (__builtin_mul_overflow(C / l->groups, k * k, &CKK))
        CKK = INT64_MAX;
    if (__builtin_mul_overflow(OH, OW, &HW))
        HW = INT64_MAX;
    if (l->groups == 1) {
        gemm_dim(g, l->path, "conv2d", "C*k*k (input channels times kernel area)", CKK);
        gemm_dim(g, l->path, "conv2d", "OH*OW (output positions)", HW);
        count_act(c, l->path, 2, (int64_t[]){CKK, HW});   /* im2col's columns */
    }
    int64_t shp[3] = {l->out, OH, OW};
    Tensor *y = act_tensor(c, l->path, layer_ident("conv", pfx), 3, shp);
    y->origin = at;
    y->what = "conv2d output";
    Node *nd = layer_node(c, a, N_CONV2D, x, y);
    int64_t cv[8] = {C, H, W, k, s, p, OH, OW};
    memcpy(nd->conv, cv, sizeof cv);
    int64_t ws[4] = {l->out, C / l->groups, k, k};
    double bound = 1.0 / sqrt((double)CKK);
    int wi = init.kind == INIT_DEFAULT ? RT_INIT_UNIFORM : RT_INIT_NORMAL;
    double wa = init.kind == INIT_DEFAULT ? bound : init.kind == INIT_GPT2 ? 0.02 : init.std;
    nd->w = add_param(g, pfx, "weight", 4, ws, wi, wa, l->path);
    if (l->bias)
        nd->b = add_param(g, pfx, "bias", 1, &ws[0],
                          init.kind == INIT_DEFAULT ? RT_INIT_UNIFORM : RT_INIT_CONST,
                          init.kind == INIT_DEFAULT ? bound : 0.0, l->path);
    double macs = (double)l->out * CKK * HW;
    add_flops(c, nd, l->path, 2 * macs, 2 * macs, 2 * macs);
    c->cur = y;
}

/* One runtime call im2col or col2im with the node's geometry (nd->conv: conv2d's C, H,
 * W, k, stride, pad, OH, OW; conv_transpose2d's out, OH, OW, k, stride, pad, H, W): im2col
 * gives col [C*k*k, B*OH*OW], the patches of x, a window a column. */
void conv_call(Program *p, Node *nd, int kind, Tensor *src, Tensor *dst, int backward,
               const char *what)
{
    const int64_t *v = nd->conv;
    Instr *a = instr_add(p, I_CALL, nd->origin, backward);
    a->what = xstrdup(what);
    SET_CALL(a, kind, arg_t(src), arg_t(dst), arg_rows(1), arg_int(v[0]), arg_int(v[1]),
             arg_int(v[2]), arg_int(v[3]), arg_int(v[4]), arg_int(v[5]), arg_int(v[6]),
             arg_int(v[7]));
    instr_reads(a, src);
    instr_writes(a, dst);
}

/* The geometry arguments every rt_gconv_* call ends with: B, C, H, W, k, stride, pad, OH,
 * OW (nd->conv), out, groups. */
#define GCONV_GEOM(nd, cout)                                                                 \
    arg_rows(1), arg_int((nd)->conv[0]), arg_int((nd)->conv[1]), arg_int((nd)->conv[2]),     \
        arg_int((nd)->conv[3]), arg_int((nd)->conv[4]), arg_int((nd)->conv[5]),              \
        arg_int((nd)->conv[6]), arg_int((nd)->conv[7]), arg_int(cout),                       \
        arg_int((nd)->layer->groups)

/* groups > 1: y = the direct grouped convolution of x, bias included */
static void lower_gconv_fwd(Program *p, Node *nd)
{
    Instr *a = instr_add(p, I_CALL, nd->origin, 0);
    a->what = xstrdup(nd->layer->groups == nd->conv[0] ? "conv2d: depthwise, direct"
                                                       : "conv2d: grouped, direct");
    SET_CALL(a, CALL_GCONV_FWD, arg_t(nd->in[0]), arg_t(nd->w->t), arg_opt(nd->b ? nd->b->t : NULL),
             arg_t(nd->out), GCONV_GEOM(nd, nd->out->shape[0]));
    instr_reads(a, nd->in[0]);
    instr_reads(a, nd->w->t);
    if (nd->b)
        instr_reads(a, nd->b->t);
    instr_writes(a, nd->out);
}

/* groups > 1: dW (and db) += from x and dy; dx = the transposed grouped convolution */
static void lower_gconv_bwd(Program *p, Node *nd)
{
    Tensor *dy = nd->in[0], *x = nd->in[1], *dx = nd->out;
    Instr *a = instr_add(p, I_CALL, nd->origin, 1);
    a->what = xstrdup(nd->b ? "conv2d backward: weight and bias gradients, direct"
                            : "conv2d backward: weight gradient, direct");
    SET_CALL(a, CALL_GCONV_BWD_WEIGHT, arg_t(x), arg_t(dy), arg_t(nd->w->g),
             arg_opt(nd->b ? nd->b->g : NULL), GCONV_GEOM(nd, dy->shape[0]));
    instr_reads(a, x);
    instr_reads(a, dy);
    instr_writes(a, nd->w->g);
    if (nd->b)
        instr_writes(a, nd->b->g);
    if (!dx)
        return;
    Instr *d = instr_add(p, I_CALL, nd->origin, 1);
    d->what = xstrdup("conv2d backward: input gradient, direct");
    SET_CALL(d, CALL_GCONV_BWD_DATA, arg_t(dy), arg_t(nd->w->t), arg_t(dx),
             GCONV_GEOM(nd, dy->shape[0]));
    instr_reads(d, dy);
    instr_reads(d, nd->w->t);
    instr_writes(d, dx);
}

/* One rt_conv_* call (groups 1; runtime/conv.c): tensors a, b read, c (the columns,
 * scratch) and d written, then the node's geometry and the output channels; `flops`
 * per sample for the profile (the GEMM's, which it is or replaces) */
static Instr *conv_gemm_call(Program *p, Node *nd, int kind, Tensor *a, Tensor *b, Tensor *c,
                             Tensor *d, int64_t cout, int64_t flops, int backward,
                             const char *what)
{
    const int64_t *v = nd->conv;
    Instr *in = instr_add(p, I_CALL, nd->origin, backward);
    in->what = xstrdup(what);
    in->flops = flops;
    SET_CALL(in, kind, arg_t(a), arg_t(b), arg_t(c), arg_t(d), arg_rows(1), arg_int(v[0]),
             arg_int(v[1]), arg_int(v[2]), arg_int(v[3]), arg_int(v[4]), arg_int(v[5]),
             arg_int(v[6]), arg_int(v[7]), arg_int(cout));
    instr_reads(in, a);
    instr_reads(in, b);
    instr_writes(in, c);
    instr_writes(in, d);
    return in;
}

static void lower_conv_fwd(Program *p, Node *nd)
{
    Graph *g = p->g;
    if (nd->layer->groups > 1) {
        lower_gconv_fwd(p, nd);
        return;
    }
    int64_t C = nd->conv[0], k = nd->conv[3], OH = nd->conv[6], OW = nd->conv[7];
    int64_t Cout = nd->out->shape[0], CKK = C * k * k, HW = OH * OW;
    Tensor *x = nd->in[0], *y = nd->out;
    Tensor *col = gemm_temp(g, xasprintf("col_%s", y->name), CKK, HW, nd->origin,
                            "im2col columns [C*k*k, B*OH*OW]");
    Tensor *yt = gemm_temp(g, xasprintf("gemm_%s", y->name), Cout, HW, nd->origin,
                           "GEMM output [out, B*OH*OW]");
    conv_gemm_call(p, nd, CALL_CONV_FWD, x, nd->w->t, col, yt, Cout, 2 * Cout * CKK * HW, 0,
                   "conv2d: weight x columns (im2col and a GEMM, or direct)");
    /* epilogue: [out, B, HW] -> [B, out, HW] (rows of HW move whole), plus the bias (one
     * value a row of HW) */
    if (nd->b)
        INSTR_EW(p, nd, "conv2d epilogue: bias, [out, B, HW] -> [B, out, HW]", y, EW_ADD,
                 x_add(x_arg(0), x_arg(1)), opd_at(yt, ix_from_gemm(HW, Cout)),
                 opd_at(nd->b->t, ix_div_mod(HW, Cout)));
    else
        INSTR_EW(p, nd, "conv2d epilogue: [out, B, HW] -> [B, out, HW]", y, EW_COPY, x_arg(0),
                 opd_at(yt, ix_from_gemm(HW, Cout)));
}

static void lower_conv_bwd(Program *p, Node *nd)
{
    Graph *g = p->g;
    if (nd->layer->groups > 1) {
        lower_gconv_bwd(p, nd);
        return;
    }
    int64_t C = nd->conv[0], k = nd->conv[3], OH = nd->conv[6], OW = nd->conv[7];
    Tensor *dy = nd->in[0], *x = nd->in[1], *dx = nd->out;
    int64_t Cout = dy->shape[0], CKK = C * k * k, HW = OH * OW;
    /* named after the forward pass's buffers (col_conv_3, gemm_conv_3) they mirror */
    const char *y = nd->fwd->out->name;
    Tensor *dyt = gemm_temp(g, xasprintf("d_gemm_%s", y), Cout, HW, nd->origin,
                            "gradient in GEMM layout [out, B*OH*OW]");
    /* [B, out, HW] -> [out, B, HW]: element j of dyt reads dy[b, co, q] */
    INSTR_EW(p, nd, "conv2d backward: [B, out, HW] -> [out, B, HW]", dyt, EW_COPY, x_arg(0),
             opd_at(dy, ix_to_gemm(HW, Cout)));   /* rows of HW move whole */
    if (nd->b) {
        Instr *r = instr_add(p, I_CALL, nd->origin, 1);
        r->what = xstrdup("conv2d backward: bias gradient");
        SET_CALL(r, CALL_ROWSUM_ADD, arg_t(dyt), arg_t(nd->b->g), arg_int(Cout), arg_rows(HW));
        instr_reads(r, dyt);
        instr_writes(r, nd->b->g);
    }
    if (!nd->frozen) {   /* (a GAN's discriminator under G's loss: no dW, no columns for it) */
        Tensor *col = gemm_temp(g, xasprintf("col_%s_again", y), CKK, HW, nd->origin,
                                "im2col columns, recomputed [C*k*k, B*OH*OW]");
        conv_gemm_call(p, nd, CALL_CONV_BWD_WEIGHT, x, dyt, col, nd->w->g, Cout,
                       2 * Cout * CKK * HW, 1,
                       "conv2d backward: dW += dY col^T (im2col again and a GEMM, or direct)");
    }
    if (!dx)
        return;
    Tensor *dcol = gemm_temp(g, xasprintf("d_col_%s", y), CKK, HW, nd->origin,
                             "column gradients [C*k*k, B*OH*OW]");
    conv_gemm_call(p, nd, CALL_CONV_BWD_DATA, nd->w->t, dyt, dcol, dx, Cout, 2 * Cout * CKK * HW,
                   1, "conv2d backward: dx = col2im(W^T dY) (a GEMM and col2im, or implicit GEMM)");
}

const OpDef op_conv2d = {.build = build_conv2d, .params = conv_params};
const NodeDef node_conv2d = {"conv2d", GRAD_NODE, N_CONV2D_BWD, lower_conv_fwd};
const NodeDef node_conv2d_bwd = {"conv2d_bwd", GRAD_NONE, 0, lower_conv_bwd};
