/* call.c: the runtime calls of the IR. One table gives each call kind (CALL_*) its
 * runtime function and the classes of its arguments; the printer of a call's C
 * statement and the description of an instruction that names a tensor. Passes build
 * and read calls through the kinds and typed arguments (ir.h), never their text. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ir.h"

/* Argument classes, one letter each: t a tensor (or NULL, or a tensor only while
 * training), n a count (an integer, or one per batch row), f a float, v constant floats
 * (or NULL), a an RT_EPI_*, g an RT_GLU_* (an integer, printed by its name).
 * cheap: selective recomputation replays the call (recompute.c) rather than keep
 * what it writes. */
static const struct {
    const char *name, *args;
    int cheap;
} calls[N_CALLS] = {
    [CALL_GEMM] = {"rt_gemm", "nnnnnftntnftn"},
    [CALL_GEMM_BIAS] = {"rt_gemm_bias", "nnnnnftntntnttat"},
    [CALL_GEMM_DGELU] = {"rt_gemm_dgelu", "nnnnnftntntnt"},
    [CALL_GEMM_DBIAS] = {"rt_gemm_dbias", "nnnnnftntnftntn"},
    [CALL_IM2COL] = {"rt_im2col", "ttnnnnnnnnn"},
    [CALL_COL2IM] = {"rt_col2im", "ttnnnnnnnnn"},
    [CALL_MAXPOOL_FWD] = {"rt_maxpool2d_fwd", "ttnnnnnnn"},
    [CALL_AVGPOOL_FWD] = {"rt_avgpool2d_fwd", "ttnnnnnnn"},
    [CALL_MAXPOOL_BWD] = {"rt_maxpool2d_bwd", "tttnnnnnnn"},
    [CALL_AVGPOOL_BWD] = {"rt_avgpool2d_bwd", "ttnnnnnnn"},
    [CALL_LAYERNORM_FWD] = {"rt_layernorm_fwd", "ttttttnnf", .cheap = 1},
    [CALL_LAYERNORM_BWD] = {"rt_layernorm_bwd", "tttttttttnn"},
    [CALL_RMSNORM_FWD] = {"rt_rmsnorm_fwd", "ttttnnf", .cheap = 1},
    [CALL_RMSNORM_BWD] = {"rt_rmsnorm_bwd", "tttttttnn"},
    [CALL_QK_NORM_FWD] = {"rt_qk_norm_fwd", "tttttnnnnf", .cheap = 1},
    [CALL_QK_NORM_BWD] = {"rt_qk_norm_bwd", "ttttttttnnnn"},
    [CALL_GLU_FWD] = {"rt_glu_fwd", "ttnng", .cheap = 1},
    [CALL_GLU_BWD] = {"rt_glu_bwd", "tttnng"},
    [CALL_GLU_GATED_FWD] = {"rt_glu_gated_fwd", "ttnng", .cheap = 1},
    [CALL_GLU_GATED_BWD] = {"rt_glu_gated_bwd", "tttnng"},
    [CALL_CROSS_ENTROPY] = {"rt_cross_entropy", "tttnnn"},
    [CALL_MSE] = {"rt_mse", "tttn"},
    [CALL_EMBEDDING_FWD] = {"rt_embedding_fwd", "tttnnn"},
    [CALL_EMBEDDING_BWD] = {"rt_embedding_bwd", "tttnnn"},
    [CALL_ATTENTION_FWD] = {"rt_attention_fwd", "tttnnnnn"},
    [CALL_ATTENTION_BWD] = {"rt_attention_bwd", "tttttnnnnn"},
    [CALL_ATTENTION_EXT_FWD] = {"rt_attention_ext_fwd", "tttttnnnnnnnffffnvfft"},
    [CALL_ATTENTION_EXT_BWD] = {"rt_attention_ext_bwd", "tttttttttnnnnnnnffffnvfft"},
    [CALL_COLSUM_ADD] = {"rt_colsum_add", "ttnn"},
    [CALL_ROWSUM_ADD] = {"rt_rowsum_add", "ttnn"},
    [CALL_GRAD_BEGIN] = {"rt_grad_begin", "nn"},
    [CALL_GRAD_READY] = {"rt_grad_ready", "nn"},
    [CALL_BATCHNORM_FWD] = {"rt_batchnorm_fwd", "ttttttttttnnnffn", .cheap = 1},
    [CALL_BATCHNORM_BWD] = {"rt_batchnorm_bwd", "ttttttttnnnn"},
    [CALL_CROSS_ENTROPY_LS] = {"rt_cross_entropy_ls", "tttnnnf"},
    [CALL_GCONV_FWD] = {"rt_gconv_fwd", "ttttnnnnnnnnnnn"},
    [CALL_GCONV_BWD_DATA] = {"rt_gconv_bwd_data", "tttnnnnnnnnnnn"},
    [CALL_GCONV_BWD_WEIGHT] = {"rt_gconv_bwd_weight", "ttttnnnnnnnnnnn"},
    [CALL_GAN_LOSS] = {"rt_gan_loss", "ttnn"},
    [CALL_CONV_FWD] = {"rt_conv_fwd", "ttttnnnnnnnnnn"},
    [CALL_CONV_BWD_WEIGHT] = {"rt_conv_bwd_weight", "ttttnnnnnnnnnn"},
    [CALL_CONV_BWD_DATA] = {"rt_conv_bwd_data", "ttttnnnnnnnnnn"},
    [CALL_HEAD_CE] = {"rt_head_cross_entropy", "ttttttnnnnnnf"},
    [CALL_MOE_DISPATCH_FWD] = {"rt_moe_dispatch_fwd", "ttttttttttnnnnnnn"},
    [CALL_MOE_DISPATCH_BWD] = {"rt_moe_dispatch_bwd", "tttttttttttttttnnnnnn"},
    [CALL_MOE_COMBINE_FWD] = {"rt_moe_combine_fwd", "tttttttnnnnn"},
    [CALL_MOE_COMBINE_BWD] = {"rt_moe_combine_bwd", "ttttttttttnnnnn"},
    [CALL_MOE_AUX] = {"rt_moe_aux", "ttnnnf"},
    [CALL_ATTENTION_DECODE] = {"rt_attention_decode", "ttttnnnnnnnnffffnvff"},
    [CALL_POS_ROW_ADD] = {"rt_pos_row_add", "tttnn"},
    [CALL_DPO] = {"rt_dpo", "tttttnnnnfffnttfff"},
    [CALL_GRN_FWD] = {"rt_grn_fwd", "tttttnnn"},
    [CALL_GRN_BWD] = {"rt_grn_bwd", "tttttttnnn"},
};

const char *call_name(int call)
{
    return call >= 0 && call < N_CALLS && calls[call].name ? calls[call].name : "(no such call)";
}

int call_cheap(int call)
{
    return call >= 0 && call < N_CALLS && calls[call].cheap;
}

static int fits(const Arg *a, char cls)
{
    switch (cls) {
    case 't':
        return (a->kind == ARG_TENSOR || a->kind == ARG_TRAIN) ? a->t != NULL
                                                               : a->kind == ARG_NULL;
    case 'n': return a->kind == ARG_INT || a->kind == ARG_ROWS;
    case 'f': return a->kind == ARG_FLOAT;
    case 'v': return a->kind == ARG_FLOATS || a->kind == ARG_NULL;
    case 'a': return a->kind == ARG_EPI && a->i >= RT_EPI_NONE && a->i <= RT_EPI_GELU_TANH;
    case 'g': return a->kind == ARG_INT && a->i >= RT_GLU_SILU && a->i <= RT_GLU_RELU;
    }
    return 0;
}

const char *call_check(const Instr *in)
{
    if (in->call < 0 || in->call >= N_CALLS || !calls[in->call].name)
        return "no such call";
    const char *cls = calls[in->call].args;
    if (in->n_args != (int)strlen(cls))
        return "the wrong number of arguments";
    for (int k = 0; k < in->n_args; k++)
        if (!fits(&in->args[k], cls[k]))
            return "an argument of the wrong kind";
    return NULL;
}

void call_set(Instr *in, int call, const Arg *args, int n)
{
    if (n > CALL_MAX_ARGS)
        die("internal: %d arguments for call %d", n, call);
    in->call = call;
    in->n_args = n;
    memcpy(in->args, args, (size_t)n * sizeof *args);
    const char *bad = call_check(in);
    if (bad)
        die("internal: %s: %s", call_name(call), bad);
}

int grad_hook(const Instr *in, int call, int64_t *off, int64_t *n)
{
    if (in->kind != I_CALL || in->call != call)
        return 0;
    *off = in->args[0].i;
    *n = in->args[1].i;
    return 1;
}

void call_rename(Instr *in, const Tensor *from, Tensor *to)
{
    for (int k = 0; k < in->n_args; k++)
        if ((in->args[k].kind == ARG_TENSOR || in->args[k].kind == ARG_TRAIN) &&
            in->args[k].t == from)
            in->args[k].t = to;
}

void call_drop(Instr *in, const Tensor *t)
{
    for (int k = 0; k < in->n_args; k++)
        if ((in->args[k].kind == ARG_TENSOR || in->args[k].kind == ARG_TRAIN) &&
            in->args[k].t == t)
            in->args[k] = arg_null();
}

char *float_literal(double v)
{
    char s[64];
    if (isinf((float)v))   /* the runtimes' rt_inf() (trainc_rt.h, common.cuh) */
        return xstrdup(v < 0 ? "-rt_inf()" : "rt_inf()");
    snprintf(s, sizeof s, "%.9g", (double)(float)v);
    if (!strpbrk(s, ".eEn"))
        strcat(s, ".0");
    return xasprintf("%sf", s);
}

static void put_arg(Buf *b, const Arg *a)
{
    static const char *const epi[] = {"RT_EPI_NONE", "RT_EPI_RELU", "RT_EPI_GELU_TANH"};
    switch (a->kind) {
    case ARG_TENSOR: buf_puts(b, a->t->name); return;
    case ARG_INT: buf_printf(b, "%lld", (long long)a->i); return;
    /* rows of one per sample (an MLP's GEMMs, its loss) read as the batch size itself */
    case ARG_ROWS:
        if (a->i == 1)
            buf_puts(b, "e->B");
        else
            buf_printf(b, "e->B * %lld", (long long)a->i);
        return;
    case ARG_FLOAT: {
        char *f = float_literal(a->f);
        buf_puts(b, f);
        free(f);
        return;
    }
    case ARG_NULL: buf_puts(b, "NULL"); return;
    case ARG_TRAIN: buf_printf(b, "e->train ? %s : NULL", a->t->name); return;
    case ARG_EPI: buf_puts(b, epi[a->i]); return;
    case ARG_FLOATS:   /* a compound literal: it lives while the call runs */
        buf_puts(b, "(const float[]){");
        for (int64_t k = 0; k < a->i; k++) {
            char *f = float_literal(a->fs[k]);
            buf_printf(b, "%s%s", k ? ", " : "", f);
            free(f);
        }
        buf_puts(b, "}");
        return;
    }
    unreachable();
}

char *call_text(const Instr *in)
{
    Buf b = {0};
    buf_printf(&b, "%s%s(e", calls[in->call].name, in->fp8 ? "_fp8" : "");
    static const char *const glu[] = {"RT_GLU_SILU", "RT_GLU_GELU", "RT_GLU_GELU_TANH",
                                       "RT_GLU_SIGMOID", "RT_GLU_RELU"};
    for (int k = 0; k < in->n_args; k++) {
        buf_puts(&b, ", ");
        if (calls[in->call].args[k] == 'g')
            buf_puts(&b, glu[in->args[k].i]);
        else
            put_arg(&b, &in->args[k]);
    }
    buf_puts(&b, ");");
    return b.s;
}

char *instr_what(const Instr *in)
{
    if (!in->what_t)
        return xstrdup(in->what ? in->what : "");
    return xasprintf("%s%s%s", in->what ? in->what : "", in->what_t->name,
                     in->what_rest ? in->what_rest : "");
}
