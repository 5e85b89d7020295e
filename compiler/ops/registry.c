/* registry.c: the op tables, filled from the op files: op_defs by spec op (ops.h's
 * OP_LIST order), node_defs by node kind (ir.h's N_* order). A new op adds its
 * definitions here; ops_check() (graph_build) fails loudly on a hole. */
#include "op.h"

extern const OpDef op_linear, op_conv2d, op_maxpool2d, op_avgpool2d, op_flatten, op_relu,
    op_gelu, op_silu, op_tanh, op_sigmoid, op_quick_gelu, op_dropout, op_layernorm, op_embedding,
    op_pos_embedding, op_attention, op_residual, op_repeat, op_squared_relu, op_glu, op_rmsnorm;
extern const OpDef op_batchnorm;
extern const OpDef op_conv_transpose2d, op_leaky_relu, op_scale, op_moe;
extern const OpDef op_tokens, op_token_mean, op_cls_token, op_first_token, op_last_token;
extern const OpDef op_span, op_untokens, op_layer_scale, op_grn, op_cls_mean, op_register_tokens;

const OpDef *const op_defs[OP__COUNT] = {
    [OP_LINEAR] = &op_linear,
    [OP_CONV2D] = &op_conv2d,
    [OP_MAXPOOL2D] = &op_maxpool2d,
    [OP_AVGPOOL2D] = &op_avgpool2d,
    [OP_FLATTEN] = &op_flatten,
    [OP_RELU] = &op_relu,
    [OP_GELU] = &op_gelu,
    [OP_SILU] = &op_silu,
    [OP_TANH] = &op_tanh,
    [OP_SIGMOID] = &op_sigmoid,
    [OP_QUICK_GELU] = &op_quick_gelu,
    [OP_SQUARED_RELU] = &op_squared_relu,
    [OP_GLU] = &op_glu,
    [OP_DROPOUT] = &op_dropout,
    [OP_LAYERNORM] = &op_layernorm,
    [OP_RMSNORM] = &op_rmsnorm,
    [OP_EMBEDDING] = &op_embedding,
    [OP_POS_EMBEDDING] = &op_pos_embedding,
    [OP_ATTENTION] = &op_attention,
    [OP_BATCHNORM] = &op_batchnorm,
    [OP_RESIDUAL] = &op_residual,
    [OP_REPEAT] = &op_repeat,
    [OP_CONV_TRANSPOSE2D] = &op_conv_transpose2d,
    [OP_LEAKY_RELU] = &op_leaky_relu,
    [OP_SCALE] = &op_scale,
    [OP_MOE] = &op_moe,
    [OP_TOKENS] = &op_tokens,
    [OP_TOKEN_MEAN] = &op_token_mean,
    [OP_CLS_TOKEN] = &op_cls_token,
    [OP_FIRST_TOKEN] = &op_first_token,
    [OP_LAST_TOKEN] = &op_last_token,
    [OP_SPAN] = &op_span,
    [OP_UNTOKENS] = &op_untokens,
    [OP_LAYER_SCALE] = &op_layer_scale,
    [OP_CLS_MEAN] = &op_cls_mean,
    [OP_GRN] = &op_grn,
    [OP_REGISTER_TOKENS] = &op_register_tokens,
};

extern const NodeDef node_convert, node_linear, node_conv2d, node_maxpool, node_avgpool,
    node_flatten, node_act, node_dropout, node_layernorm, node_loss, node_embedding,
    node_pos_embedding, node_attention, node_add, node_linear_bwd, node_conv2d_bwd,
    node_maxpool_bwd, node_avgpool_bwd, node_act_bwd, node_dropout_bwd, node_layernorm_bwd,
    node_embedding_bwd, node_pos_embedding_bwd, node_attention_bwd, node_rmsnorm,
    node_rmsnorm_bwd, node_glu, node_glu_bwd;
extern const NodeDef node_batchnorm, node_batchnorm_bwd;
extern const NodeDef node_conv_t2d, node_conv_t2d_bwd;
extern const NodeDef node_qk_norm, node_qk_norm_bwd;
extern const NodeDef node_moe_dispatch, node_moe_dispatch_bwd, node_moe_combine,
    node_moe_combine_bwd, node_moe_aux;
extern const NodeDef node_tokens, node_tokens_bwd, node_token_mean, node_token_mean_bwd;
extern const NodeDef node_cls_token, node_cls_token_bwd, node_first_token, node_first_token_bwd;
extern const NodeDef node_last_token, node_last_token_bwd;
extern const NodeDef node_span, node_span_bwd;
extern const NodeDef node_untokens, node_untokens_bwd, node_layer_scale, node_layer_scale_bwd;
extern const NodeDef node_cls_mean, node_cls_mean_bwd;
extern const NodeDef node_grn, node_grn_bwd;
extern const NodeDef node_register_tokens, node_register_tokens_bwd;
extern const NodeDef node_pad, node_pad_bwd;

const NodeDef *const node_defs[N__COUNT] = {
    [N_CONVERT] = &node_convert,
    [N_LINEAR] = &node_linear,
    [N_CONV2D] = &node_conv2d,
    [N_MAXPOOL] = &node_maxpool,
    [N_AVGPOOL] = &node_avgpool,
    [N_FLATTEN] = &node_flatten,
    [N_ACT] = &node_act,
    [N_DROPOUT] = &node_dropout,
    [N_LAYERNORM] = &node_layernorm,
    [N_RMSNORM] = &node_rmsnorm,
    [N_GLU] = &node_glu,
    [N_LOSS] = &node_loss,
    [N_EMBEDDING] = &node_embedding,
    [N_POS_EMBEDDING] = &node_pos_embedding,
    [N_ATTENTION] = &node_attention,
    [N_ADD] = &node_add,
    [N_BATCHNORM] = &node_batchnorm,
    [N_LINEAR_BWD] = &node_linear_bwd,
    [N_CONV2D_BWD] = &node_conv2d_bwd,
    [N_MAXPOOL_BWD] = &node_maxpool_bwd,
    [N_AVGPOOL_BWD] = &node_avgpool_bwd,
    [N_ACT_BWD] = &node_act_bwd,
    [N_DROPOUT_BWD] = &node_dropout_bwd,
    [N_LAYERNORM_BWD] = &node_layernorm_bwd,
    [N_RMSNORM_BWD] = &node_rmsnorm_bwd,
    [N_GLU_BWD] = &node_glu_bwd,
    [N_EMBEDDING_BWD] = &node_embedding_bwd,
    [N_POS_EMBEDDING_BWD] = &node_pos_embedding_bwd,
    [N_ATTENTION_BWD] = &node_attention_bwd,
    [N_BATCHNORM_BWD] = &node_batchnorm_bwd,
    [N_CONV_T2D] = &node_conv_t2d,
    [N_CONV_T2D_BWD] = &node_conv_t2d_bwd,
    [N_QK_NORM] = &node_qk_norm,
    [N_QK_NORM_BWD] = &node_qk_norm_bwd,
    [N_MOE_DISPATCH] = &node_moe_dispatch,
    [N_MOE_DISPATCH_BWD] = &node_moe_dispatch_bwd,
    [N_MOE_COMBINE] = &node_moe_combine,
    [N_MOE_COMBINE_BWD] = &node_moe_combine_bwd,
    [N_MOE_AUX] = &node_moe_aux,
    [N_TOKENS] = &node_tokens,
    [N_TOKENS_BWD] = &node_tokens_bwd,
    [N_TOKEN_MEAN] = &node_token_mean,
    [N_TOKEN_MEAN_BWD] = &node_token_mean_bwd,
    [N_CLS_TOKEN] = &node_cls_token,
    [N_CLS_TOKEN_BWD] = &node_cls_token_bwd,
    [N_FIRST_TOKEN] = &node_first_token,
    [N_FIRST_TOKEN_BWD] = &node_first_token_bwd,
    [N_LAST_TOKEN] = &node_last_token,
    [N_LAST_TOKEN_BWD] = &node_last_token_bwd,
    [N_SPAN] = &node_span,
    [N_SPAN_BWD] = &node_span_bwd,
    [N_UNTOKENS] = &node_untokens,
    [N_UNTOKENS_BWD] = &node_untokens_bwd,
    [N_LAYER_SCALE] = &node_layer_scale,
    [N_LAYER_SCALE_BWD] = &node_layer_scale_bwd,
    [N_CLS_MEAN] = &node_cls_mean,
    [N_CLS_MEAN_BWD] = &node_cls_mean_bwd,
    [N_GRN] = &node_grn,
    [N_GRN_BWD] = &node_grn_bwd,
    [N_REGISTER_TOKENS] = &node_register_tokens,
    [N_REGISTER_TOKENS_BWD] = &node_register_tokens_bwd,
    [N_PAD] = &node_pad,
    [N_PAD_BWD] = &node_pad_bwd,
};

/* Every spec op and node kind has its definition (a new kind in ops.h or ir.h that is
 * missing here fails at the first build, not at the first spec that uses it). */
void ops_check(void)
{
    for (int i = 0; i < OP__COUNT; i++)
        if (!op_defs[i] || !op_defs[i]->build)
            die("op '%s' has no definition in ops/registry.c", op_info[i].name);
    for (int i = 0; i < N__COUNT; i++)
        if (!node_defs[i] || !node_defs[i]->name)
            die("node kind %d has no definition in ops/registry.c", i);
}
