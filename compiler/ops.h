/* ops.h: the list of spec ops, the one place a spec op is declared.
 *
 * X(KIND, "spec name", "keys beside op/name/input/init", "the keys required", class)
 *
 * The parser reads the names and keys (spec.c's table-driven key checks); everything
 * else about an op is its file under ops/, reached through ops/op.h's op_defs (the
 * graph and shape rule) and node_defs (backward rule, lowering), which
 * ops/registry.c fills and checks for holes. */
#ifndef OPS_H
#define OPS_H

enum { OPC_PARAM, OPC_ELEMENTWISE, OPC_VIEW, OPC_POOL, OPC_NORM, OPC_CONTAINER, OPC_SEQ };

#define OP_LIST(X)                                                                    \
    X(OP_LINEAR, "linear", "out bias tie", "out", OPC_PARAM)                          \
    X(OP_CONV2D, "conv2d", "out kernel stride padding bias groups", "out kernel", OPC_PARAM) \
    X(OP_MAXPOOL2D, "maxpool2d", "kernel stride padding", "kernel", OPC_POOL)         \
    X(OP_AVGPOOL2D, "avgpool2d", "kernel stride", "kernel", OPC_POOL)                 \
    X(OP_FLATTEN, "flatten", "", "", OPC_VIEW)                                        \
    X(OP_RELU, "relu", "", "", OPC_ELEMENTWISE)                                       \
    X(OP_GELU, "gelu", "approximate", "", OPC_ELEMENTWISE)                            \
    X(OP_SILU, "silu", "", "", OPC_ELEMENTWISE)                                       \
    X(OP_TANH, "tanh", "", "", OPC_ELEMENTWISE)                                       \
    X(OP_SIGMOID, "sigmoid", "", "", OPC_ELEMENTWISE)                                 \
    X(OP_SQUARED_RELU, "squared_relu", "", "", OPC_ELEMENTWISE)                       \
    X(OP_GLU, "glu", "act", "", OPC_ELEMENTWISE)                                      \
    X(OP_DROPOUT, "dropout", "p", "", OPC_ELEMENTWISE)                                \
    X(OP_LAYERNORM, "layernorm", "eps bias affine", "", OPC_NORM)                     \
    X(OP_RMSNORM, "rmsnorm", "eps", "", OPC_NORM)                                     \
    X(OP_EMBEDDING, "embedding", "vocab dim", "vocab dim", OPC_PARAM)                 \
    X(OP_POS_EMBEDDING, "pos_embedding", "max_len", "max_len", OPC_PARAM)             \
    X(OP_ATTENTION, "attention", "heads causal kv_heads head_dim bias rope qk_norm eps window scale softcap interleave", \
      "heads", OPC_SEQ)                                                               \
    X(OP_BATCHNORM, "batchnorm", "eps momentum affine sync", "", OPC_NORM)             \
    X(OP_RESIDUAL, "residual", "body shortcut drop_path", "body", OPC_CONTAINER)      \
    X(OP_REPEAT, "repeat", "body count", "body count", OPC_CONTAINER)                \
    X(OP_CONV_TRANSPOSE2D, "conv_transpose2d", "out kernel stride padding output_padding bias", \
      "out kernel", OPC_PARAM)                                                        \
    X(OP_LEAKY_RELU, "leaky_relu", "negative_slope", "", OPC_ELEMENTWISE)            \
    X(OP_SCALE, "scale", "by", "by", OPC_ELEMENTWISE)                                 \
    X(OP_MOE, "moe", "experts top_k hidden act norm_topk aux_loss shared shared_gate", "experts top_k hidden", OPC_PARAM) \
    X(OP_TOKENS, "tokens", "", "", OPC_VIEW)                                          \
    X(OP_TOKEN_MEAN, "token_mean", "skip first_sequence", "", OPC_POOL)               \
    X(OP_CLS_TOKEN, "cls_token", "", "", OPC_PARAM)                                   \
    X(OP_FIRST_TOKEN, "first_token", "", "", OPC_POOL)                                \
    X(OP_LAST_TOKEN, "last_token", "segments", "", OPC_POOL)                          \
    X(OP_SPAN, "span", "", "", OPC_VIEW)                                             \
    X(OP_UNTOKENS, "untokens", "height", "height", OPC_VIEW)                         \
    X(OP_LAYER_SCALE, "layer_scale", "init_value", "", OPC_PARAM)                   \
    X(OP_CLS_MEAN, "cls_mean", "", "", OPC_POOL)                                      \
    X(OP_GRN, "grn", "", "", OPC_NORM)                                                \
    X(OP_QUICK_GELU, "quick_gelu", "", "", OPC_ELEMENTWISE)                           \
    X(OP_REGISTER_TOKENS, "register_tokens", "count", "count", OPC_PARAM)

enum {
#define X(kind, name, keys, required, cls) kind,
    OP_LIST(X)
#undef X
    OP__COUNT
};

typedef struct OpInfo {
    const char *name;
    const char *keys;   /* space-separated */
    const char *required;   /* the keys a layer must give (linear: out unless tied) */
    int cls;
} OpInfo;

extern const OpInfo op_info[OP__COUNT];

/* Losses (the "loss" object), not layers. */
enum { LOSS_CROSS_ENTROPY, LOSS_MSE, LOSS_GAN_BCE, LOSS_GAN_HINGE /* a GAN's ($.model.gan.loss) */,
       LOSS_DPO /* direct preference optimization over pairs of texts in a row */ };

/* LOSS_DPO's kinds ("op" dpo, simpo, ipo, orpo, kto, cpo): dpo, ipo and kto read a
 * reference model's log-probabilities, simpo, orpo and cpo have none */
enum { PREF_DPO, PREF_SIMPO, PREF_IPO, PREF_ORPO, PREF_KTO, PREF_CPO, PREF__COUNT };
extern const char *const pref_names[];   /* by PREF_*: "dpo", "simpo", ..., "cpo" */
#define PREF_HAS_REFERENCE(k) ((k) == PREF_DPO || (k) == PREF_IPO || (k) == PREF_KTO)
/* dpo's loss_type (TRL's DPOConfig.loss_type, those a pair's own numbers give): the
 * sigmoid (DPO's), robust, hinge, nca_pair, sppo_hard, apo_zero, apo_down */
enum { DPO_SIGMOID, DPO_ROBUST, DPO_HINGE, DPO_NCA_PAIR, DPO_SPPO_HARD, DPO_APO_ZERO,
       DPO_APO_DOWN, DPO__COUNT };
extern const char *const dpo_type_names[];   /* by DPO_*: "sigmoid", ..., "apo_down" */

#endif
