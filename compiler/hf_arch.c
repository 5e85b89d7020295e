/* hf_arch.c: the Hugging Face families' tensor tables, which `trainc import hf` and
 * `trainc export hf` both walk (hf.h): for each of trainc's parameters, the layer it
 * belongs to, its suffix, and the transformers tensors it is made of (one, the row
 * blocks of a concatenation, or one transposed), with their shapes. */
#include <stdlib.h>
#include <string.h>
#include "hf.h"

/* GPT-2: Conv1D weights are stored [in, out], trainc's linear weights [out, in]. */
static const HfMap gpt2_map[] = {
    {0, HF_EMBED, "weight", HF_ALWAYS, 0, {"wte.weight"}, {HF_V}, HF_D},
    {0, HF_POS, "weight", HF_ALWAYS, 0, {"wpe.weight"}, {HF_POSN}, HF_D},
    {1, HF_NORM1, "weight", HF_ALWAYS, 0, {"ln_1.weight"}, {HF_D}, 0},
    {1, HF_NORM1, "bias", HF_ALWAYS, 0, {"ln_1.bias"}, {HF_D}, 0},
    {1, HF_ATTN, "qkv.weight", HF_ALWAYS, 1, {"attn.c_attn.weight"}, {HF_D}, HF_3D},
    {1, HF_ATTN, "qkv.bias", HF_ALWAYS, 0, {"attn.c_attn.bias"}, {HF_3D}, 0},
    {1, HF_ATTN, "proj.weight", HF_ALWAYS, 1, {"attn.c_proj.weight"}, {HF_D}, HF_D},
    {1, HF_ATTN, "proj.bias", HF_ALWAYS, 0, {"attn.c_proj.bias"}, {HF_D}, 0},
    {1, HF_NORM2, "weight", HF_ALWAYS, 0, {"ln_2.weight"}, {HF_D}, 0},
    {1, HF_NORM2, "bias", HF_ALWAYS, 0, {"ln_2.bias"}, {HF_D}, 0},
    {1, HF_UP, "weight", HF_ALWAYS, 1, {"mlp.c_fc.weight"}, {HF_D}, HF_FF},
    {1, HF_UP, "bias", HF_ALWAYS, 0, {"mlp.c_fc.bias"}, {HF_FF}, 0},
    {1, HF_DOWN, "weight", HF_ALWAYS, 1, {"mlp.c_proj.weight"}, {HF_FF}, HF_D},
    {1, HF_DOWN, "bias", HF_ALWAYS, 0, {"mlp.c_proj.bias"}, {HF_D}, 0},
    {0, HF_FINAL, "weight", HF_ALWAYS, 0, {"ln_f.weight"}, {HF_D}, 0},
    {0, HF_FINAL, "bias", HF_ALWAYS, 0, {"ln_f.bias"}, {HF_D}, 0},
    {0, HF_HEAD, "weight", HF_IF_UNTIED, 0, {"lm_head.weight"}, {HF_V}, HF_D},
    {0, 0, NULL, 0, 0, {NULL}, {0}, 0}};

/* The rows Llama's kin share: qkv = q_proj, k_proj, v_proj; gate_up = gate_proj, up_proj. */
#define EMBED_ROW {0, HF_EMBED, "weight", HF_ALWAYS, 0, {"embed_tokens.weight"}, {HF_V}, HF_D}
#define INPUT_NORM_ROW \
    {1, HF_NORM1, "weight", HF_ALWAYS, 0, {"input_layernorm.weight"}, {HF_D}, 0}
#define QKV_ROWS                                                                            \
    {1, HF_ATTN, "qkv.weight", HF_ALWAYS, 0,                                                \
     {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"},     \
     {HF_QD, HF_KD, HF_KD}, HF_D},                                                          \
    {1, HF_ATTN, "qkv.bias", HF_IF_BIAS, 0,                                                 \
     {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"},           \
     {HF_QD, HF_KD, HF_KD}, 0}
#define O_ROWS                                                                              \
    {1, HF_ATTN, "proj.weight", HF_ALWAYS, 0, {"self_attn.o_proj.weight"}, {HF_D}, HF_QD},  \
    {1, HF_ATTN, "proj.bias", HF_IF_O_BIAS, 0, {"self_attn.o_proj.bias"}, {HF_D}, 0}
#define QK_NORM_ROWS                                                                        \
    {1, HF_ATTN, "q_norm.weight", HF_IF_QK_NORM, 0, {"self_attn.q_norm.weight"}, {HF_HD}, 0}, \
    {1, HF_ATTN, "k_norm.weight", HF_IF_QK_NORM, 0, {"self_attn.k_norm.weight"}, {HF_HD}, 0}
#define MLP_ROWS                                                                            \
    {1, HF_UP, "weight", HF_ALWAYS, 0, {"mlp.gate_proj.weight", "mlp.up_proj.weight"},      \
     {HF_FF, HF_FF}, HF_D},                                                                 \
    {1, HF_DOWN, "weight", HF_ALWAYS, 0, {"mlp.down_proj.weight"}, {HF_D}, HF_FF}
#define HEAD_ROWS                                                                           \
    {0, HF_FINAL, "weight", HF_ALWAYS, 0, {"norm.weight"}, {HF_D}, 0},                      \
    {0, HF_HEAD, "weight", HF_IF_UNTIED, 0, {"lm_head.weight"}, {HF_V}, HF_D},              \
    {0, 0, NULL, 0, 0, {NULL}, {0}, 0}

/* Llama, Mistral, Qwen2, Qwen3, Gemma */
static const HfMap llama_map[] = {
    EMBED_ROW, INPUT_NORM_ROW, QKV_ROWS, O_ROWS, QK_NORM_ROWS,
    {1, HF_NORM2, "weight", HF_ALWAYS, 0, {"post_attention_layernorm.weight"}, {HF_D}, 0},
    MLP_ROWS, HEAD_ROWS};

/* Phi-3: Llama's layers with q, k, v in one qkv_proj and gate, up in one gate_up_proj,
 * in trainc's order already. */
static const HfMap phi3_map[] = {
    EMBED_ROW, INPUT_NORM_ROW,
    {1, HF_ATTN, "qkv.weight", HF_ALWAYS, 0, {"self_attn.qkv_proj.weight"}, {HF_QKV}, HF_D},
    {1, HF_ATTN, "proj.weight", HF_ALWAYS, 0, {"self_attn.o_proj.weight"}, {HF_D}, HF_QD},
    {1, HF_NORM2, "weight", HF_ALWAYS, 0, {"post_attention_layernorm.weight"}, {HF_D}, 0},
    {1, HF_UP, "weight", HF_ALWAYS, 0, {"mlp.gate_up_proj.weight"}, {HF_2FF}, HF_D},
    {1, HF_DOWN, "weight", HF_ALWAYS, 0, {"mlp.down_proj.weight"}, {HF_D}, HF_FF},
    HEAD_ROWS};

/* GLM (GLM-4): Llama's tensors, the MLP's gate and up fused as Phi-3's (gate_up_proj) */
static const HfMap glm_map[] = {
    EMBED_ROW, INPUT_NORM_ROW, QKV_ROWS, O_ROWS,
    {1, HF_NORM2, "weight", HF_ALWAYS, 0, {"post_attention_layernorm.weight"}, {HF_D}, 0},
    {1, HF_UP, "weight", HF_ALWAYS, 0, {"mlp.gate_up_proj.weight"}, {HF_2FF}, HF_D},
    {1, HF_DOWN, "weight", HF_ALWAYS, 0, {"mlp.down_proj.weight"}, {HF_D}, HF_FF},
    HEAD_ROWS};

/* The layernorm families' rows: a block's norm (BLOCK 1) or the final one, with biases;
 * an MLP of one linear up and one down (UP, DOWN: their names), biased where the MLP is */
#define LN_ROWS_IN(BLOCK, SLOT, NAME)                                                       \
    {BLOCK, SLOT, "weight", HF_ALWAYS, 0, {NAME ".weight"}, {HF_D}, 0},                     \
    {BLOCK, SLOT, "bias", HF_ALWAYS, 0, {NAME ".bias"}, {HF_D}, 0}
#define LN_ROWS(SLOT, NAME) LN_ROWS_IN(1, SLOT, NAME)
#define UP_DOWN_ROWS(UP, DOWN)                                                              \
    {1, HF_UP, "weight", HF_ALWAYS, 0, {UP ".weight"}, {HF_FF}, HF_D},                      \
    {1, HF_UP, "bias", HF_IF_MLP_BIAS, 0, {UP ".bias"}, {HF_FF}, 0},                        \
    {1, HF_DOWN, "weight", HF_ALWAYS, 0, {DOWN ".weight"}, {HF_D}, HF_FF},                  \
    {1, HF_DOWN, "bias", HF_IF_MLP_BIAS, 0, {DOWN ".bias"}, {HF_D}, 0}
#define LN_HEAD_ROWS                                                                        \
    LN_ROWS_IN(0, HF_FINAL, "norm"),                                                        \
    {0, HF_HEAD, "weight", HF_IF_UNTIED, 0, {"lm_head.weight"}, {HF_V}, HF_D},              \
    {0, 0, NULL, 0, 0, {NULL}, {0}, 0}

/* StarCoder2: layernorms, Llama's attention, a gelu MLP c_fc, c_proj; the linears'
 * biases where use_bias is true */
static const HfMap starcoder2_map[] = {
    EMBED_ROW, LN_ROWS(HF_NORM1, "input_layernorm"), QKV_ROWS, O_ROWS,
    LN_ROWS(HF_NORM2, "post_attention_layernorm"), UP_DOWN_ROWS("mlp.c_fc", "mlp.c_proj"),
    LN_HEAD_ROWS};

/* StableLM: layernorms, Llama's attention (q, k and v biased where use_qkv_bias is) and
 * gated MLP */
static const HfMap stablelm_map[] = {
    EMBED_ROW, LN_ROWS(HF_NORM1, "input_layernorm"), QKV_ROWS, O_ROWS,
    LN_ROWS(HF_NORM2, "post_attention_layernorm"), MLP_ROWS, LN_HEAD_ROWS};

/* Nemotron: layernorms (by 1 + weight), Llama's attention, an MLP up_proj, down_proj
 * (a squared relu between), biased where mlp_bias is */
static const HfMap nemotron_map[] = {
    EMBED_ROW, LN_ROWS(HF_NORM1, "input_layernorm"), QKV_ROWS, O_ROWS,
    LN_ROWS(HF_NORM2, "post_attention_layernorm"), UP_DOWN_ROWS("mlp.up_proj", "mlp.down_proj"),
    LN_HEAD_ROWS};

/* GPTBigCode (StarCoder, SantaCoder): GPT-2's layers as nn.Linear ([out, in], trainc's
 * layout) and one key/value head (multi_query): c_attn's rows q, k, v as trainc's qkv */
static const HfMap bigcode_map[] = {
    {0, HF_EMBED, "weight", HF_ALWAYS, 0, {"wte.weight"}, {HF_V}, HF_D},
    {0, HF_POS, "weight", HF_ALWAYS, 0, {"wpe.weight"}, {HF_POSN}, HF_D},
    LN_ROWS(HF_NORM1, "ln_1"),
    {1, HF_ATTN, "qkv.weight", HF_ALWAYS, 0, {"attn.c_attn.weight"}, {HF_QKV}, HF_D},
    {1, HF_ATTN, "qkv.bias", HF_ALWAYS, 0, {"attn.c_attn.bias"}, {HF_QKV}, 0},
    {1, HF_ATTN, "proj.weight", HF_ALWAYS, 0, {"attn.c_proj.weight"}, {HF_D}, HF_D},
    {1, HF_ATTN, "proj.bias", HF_ALWAYS, 0, {"attn.c_proj.bias"}, {HF_D}, 0},
    LN_ROWS(HF_NORM2, "ln_2"),
    {1, HF_UP, "weight", HF_ALWAYS, 0, {"mlp.c_fc.weight"}, {HF_FF}, HF_D},
    {1, HF_UP, "bias", HF_ALWAYS, 0, {"mlp.c_fc.bias"}, {HF_FF}, 0},
    {1, HF_DOWN, "weight", HF_ALWAYS, 0, {"mlp.c_proj.weight"}, {HF_D}, HF_FF},
    {1, HF_DOWN, "bias", HF_ALWAYS, 0, {"mlp.c_proj.bias"}, {HF_D}, 0},
    {0, HF_FINAL, "weight", HF_ALWAYS, 0, {"ln_f.weight"}, {HF_D}, 0},
    {0, HF_FINAL, "bias", HF_ALWAYS, 0, {"ln_f.bias"}, {HF_D}, 0},
    {0, HF_HEAD, "weight", HF_IF_UNTIED, 0, {"lm_head.weight"}, {HF_V}, HF_D},
    {0, 0, NULL, 0, 0, {NULL}, {0}, 0}};

/* OPT: GPT-2's layers with q, k, v and out_proj apart (nn.Linear, not Conv1D), the MLP
 * fc1, fc2, biased where enable_bias is; its positions hold two rows before position
 * 0's (pos_pad) */
static const HfMap opt_map[] = {
    {0, HF_EMBED, "weight", HF_ALWAYS, 0, {"embed_tokens.weight"}, {HF_V}, HF_D},
    {0, HF_POS, "weight", HF_ALWAYS, 0, {"embed_positions.weight"}, {HF_POSN}, HF_D},
    LN_ROWS(HF_NORM1, "self_attn_layer_norm"), QKV_ROWS,
    {1, HF_ATTN, "proj.weight", HF_ALWAYS, 0, {"self_attn.out_proj.weight"}, {HF_D}, HF_QD},
    {1, HF_ATTN, "proj.bias", HF_IF_O_BIAS, 0, {"self_attn.out_proj.bias"}, {HF_D}, 0},
    LN_ROWS(HF_NORM2, "final_layer_norm"), UP_DOWN_ROWS("fc1", "fc2"),
    LN_ROWS_IN(0, HF_FINAL, "final_layer_norm"),
    {0, HF_HEAD, "weight", HF_IF_UNTIED, 0, {"lm_head.weight"}, {HF_V}, HF_D},
    {0, 0, NULL, 0, 0, {NULL}, {0}, 0}};

/* GPT-Neo: GPT-2's layers with q, k, v and out_proj apart, out_proj's bias alone, the
 * MLP's linears nn.Linear (not Conv1D) */
static const HfMap neo_map[] = {
    {0, HF_EMBED, "weight", HF_ALWAYS, 0, {"wte.weight"}, {HF_V}, HF_D},
    {0, HF_POS, "weight", HF_ALWAYS, 0, {"wpe.weight"}, {HF_POSN}, HF_D},
    LN_ROWS(HF_NORM1, "ln_1"),
    {1, HF_ATTN, "qkv.weight", HF_ALWAYS, 0,
     {"attn.attention.q_proj.weight", "attn.attention.k_proj.weight",
      "attn.attention.v_proj.weight"}, {HF_QD, HF_KD, HF_KD}, HF_D},
    {1, HF_ATTN, "proj.weight", HF_ALWAYS, 0, {"attn.attention.out_proj.weight"}, {HF_D}, HF_QD},
    {1, HF_ATTN, "proj.bias", HF_IF_O_BIAS, 0, {"attn.attention.out_proj.bias"}, {HF_D}, 0},
    LN_ROWS(HF_NORM2, "ln_2"), UP_DOWN_ROWS("mlp.c_fc", "mlp.c_proj"), LN_ROWS_IN(0, HF_FINAL, "ln_f"),
    {0, HF_HEAD, "weight", HF_IF_UNTIED, 0, {"lm_head.weight"}, {HF_V}, HF_D},
    {0, 0, NULL, 0, 0, {NULL}, {0}, 0}};

/* GPT-NeoX (Pythia): layernorms, one query_key_value whose rows hold each head's q, k and
 * v together (qkv_by_head), dense; biased where attention_bias is; an MLP
 * dense_h_to_4h, dense_4h_to_h, always biased; the head embed_out */
static const HfMap neox_map[] = {
    {0, HF_EMBED, "weight", HF_ALWAYS, 0, {"embed_in.weight"}, {HF_V}, HF_D},
    LN_ROWS(HF_NORM1, "input_layernorm"),
    {1, HF_ATTN, "qkv.weight", HF_ALWAYS, 0, {"attention.query_key_value.weight"}, {HF_QKV}, HF_D},
    {1, HF_ATTN, "qkv.bias", HF_IF_BIAS, 0, {"attention.query_key_value.bias"}, {HF_QKV}, 0},
    {1, HF_ATTN, "proj.weight", HF_ALWAYS, 0, {"attention.dense.weight"}, {HF_D}, HF_QD},
    {1, HF_ATTN, "proj.bias", HF_IF_O_BIAS, 0, {"attention.dense.bias"}, {HF_D}, 0},
    LN_ROWS(HF_NORM2, "post_attention_layernorm"),
    UP_DOWN_ROWS("mlp.dense_h_to_4h", "mlp.dense_4h_to_h"),
    LN_ROWS_IN(0, HF_FINAL, "final_layer_norm"),
    {0, HF_HEAD, "weight", HF_IF_UNTIED, 0, {"embed_out.weight"}, {HF_V}, HF_D},
    {0, 0, NULL, 0, 0, {NULL}, {0}, 0}};

/* Phi (Phi-1, 1.5 and 2): one layernorm feeding both branches, q, k, v and dense, fc1
 * and fc2, all biased; the head biased too */
static const HfMap phi_map[] = {
    EMBED_ROW, LN_ROWS(HF_NORM1, "input_layernorm"), QKV_ROWS,
    {1, HF_ATTN, "proj.weight", HF_ALWAYS, 0, {"self_attn.dense.weight"}, {HF_D}, HF_QD},
    {1, HF_ATTN, "proj.bias", HF_IF_O_BIAS, 0, {"self_attn.dense.bias"}, {HF_D}, 0},
    UP_DOWN_ROWS("mlp.fc1", "mlp.fc2"),
    LN_ROWS_IN(0, HF_FINAL, "final_layernorm"),
    {0, HF_HEAD, "weight", HF_IF_UNTIED, 0, {"lm_head.weight"}, {HF_V}, HF_D},
    {0, HF_HEAD, "bias", HF_ALWAYS, 0, {"lm_head.bias"}, {HF_V}, 0},
    {0, 0, NULL, 0, 0, {NULL}, {0}, 0}};

/* Falcon: one query_key_value (each key/value head's rows after its query heads':
 * qkv_by_head), dense, an MLP dense_h_to_4h, dense_4h_to_h, all biased where `bias` is;
 * its norms as the block's form has them (the arguments): one before both branches (Falcon 7B),
 * one before each in parallel (ln_attn, ln_mlp: Falcon 40B and 180B), or one before
 * each one after the other */
#define FALCON_ROWS(...)                                                                     \
    {0, HF_EMBED, "weight", HF_ALWAYS, 0, {"word_embeddings.weight"}, {HF_V}, HF_D}, __VA_ARGS__, \
    {1, HF_ATTN, "qkv.weight", HF_ALWAYS, 0, {"self_attention.query_key_value.weight"},     \
     {HF_QKV}, HF_D},                                                                       \
    {1, HF_ATTN, "qkv.bias", HF_IF_BIAS, 0, {"self_attention.query_key_value.bias"},        \
     {HF_QKV}, 0},                                                                          \
    {1, HF_ATTN, "proj.weight", HF_ALWAYS, 0, {"self_attention.dense.weight"}, {HF_D}, HF_QD}, \
    {1, HF_ATTN, "proj.bias", HF_IF_O_BIAS, 0, {"self_attention.dense.bias"}, {HF_D}, 0},    \
    UP_DOWN_ROWS("mlp.dense_h_to_4h", "mlp.dense_4h_to_h"), LN_ROWS_IN(0, HF_FINAL, "ln_f"), \
    {0, HF_HEAD, "weight", HF_IF_UNTIED, 0, {"lm_head.weight"}, {HF_V}, HF_D},              \
    {0, 0, NULL, 0, 0, {NULL}, {0}, 0}
static const HfMap falcon_map[] = {FALCON_ROWS(LN_ROWS(HF_NORM1, "input_layernorm"))};
static const HfMap falcon_seq_map[] = {FALCON_ROWS(
    LN_ROWS(HF_NORM1, "input_layernorm"), LN_ROWS(HF_NORM2, "post_attention_layernorm"))};
static const HfMap falcon_new_map[] = {
    FALCON_ROWS(LN_ROWS(HF_NORM1, "ln_attn"), LN_ROWS(HF_NORM2, "ln_mlp"))};

/* GPT-J: one layernorm ln_1 feeding both branches, q, k, v and out_proj without
 * biases, an MLP fc_in, fc_out with them, the head biased */
static const HfMap gptj_map[] = {
    {0, HF_EMBED, "weight", HF_ALWAYS, 0, {"wte.weight"}, {HF_V}, HF_D}, LN_ROWS(HF_NORM1, "ln_1"),
    {1, HF_ATTN, "qkv.weight", HF_ALWAYS, 0,
     {"attn.q_proj.weight", "attn.k_proj.weight", "attn.v_proj.weight"}, {HF_QD, HF_KD, HF_KD},
     HF_D},
    {1, HF_ATTN, "proj.weight", HF_ALWAYS, 0, {"attn.out_proj.weight"}, {HF_D}, HF_QD},
    UP_DOWN_ROWS("mlp.fc_in", "mlp.fc_out"), LN_ROWS_IN(0, HF_FINAL, "ln_f"),
    {0, HF_HEAD, "weight", HF_IF_UNTIED, 0, {"lm_head.weight"}, {HF_V}, HF_D},
    {0, HF_HEAD, "bias", HF_ALWAYS, 0, {"lm_head.bias"}, {HF_V}, 0},
    {0, 0, NULL, 0, 0, {NULL}, {0}, 0}};

/* OLMo: Llama's layers, its layernorms without weights (no tensors) */
static const HfMap olmo_map[] = {
    EMBED_ROW, QKV_ROWS, O_ROWS, MLP_ROWS,
    {0, HF_HEAD, "weight", HF_IF_UNTIED, 0, {"lm_head.weight"}, {HF_V}, HF_D},
    {0, 0, NULL, 0, 0, {NULL}, {0}, 0}};

/* Cohere (Command R): one layernorm (a weight, no bias) feeding both branches, Llama's
 * attention and gated MLP */
static const HfMap cohere_map[] = {
    EMBED_ROW, INPUT_NORM_ROW, QKV_ROWS, O_ROWS, MLP_ROWS, HEAD_ROWS};

/* Gemma 3: a norm before and after each branch (its post_attention_layernorm is the
 * attention's output norm, not the MLP's input norm as Llama's). */
static const HfMap gemma3_map[] = {
    EMBED_ROW, INPUT_NORM_ROW, QKV_ROWS, O_ROWS, QK_NORM_ROWS,
    {1, HF_POST1, "weight", HF_ALWAYS, 0, {"post_attention_layernorm.weight"}, {HF_D}, 0},
    {1, HF_NORM2, "weight", HF_ALWAYS, 0, {"pre_feedforward_layernorm.weight"}, {HF_D}, 0},
    MLP_ROWS,
    {1, HF_POST2, "weight", HF_ALWAYS, 0, {"post_feedforward_layernorm.weight"}, {HF_D}, 0},
    HEAD_ROWS};

/* OLMo 2: Llama's tensors but the norms: one after each branch (post_attention_layernorm,
 * post_feedforward_layernorm) and none before it; q_norm and k_norm over all heads */
static const HfMap olmo2_map[] = {
    EMBED_ROW, QKV_ROWS, O_ROWS,
    {1, HF_ATTN, "q_norm.weight", HF_ALWAYS, 0, {"self_attn.q_norm.weight"}, {HF_QD}, 0},
    {1, HF_ATTN, "k_norm.weight", HF_ALWAYS, 0, {"self_attn.k_norm.weight"}, {HF_KD}, 0},
    {1, HF_POST1, "weight", HF_ALWAYS, 0, {"post_attention_layernorm.weight"}, {HF_D}, 0},
    MLP_ROWS,
    {1, HF_POST2, "weight", HF_ALWAYS, 0, {"post_feedforward_layernorm.weight"}, {HF_D}, 0},
    HEAD_ROWS};

/* Mixtral: Mistral's layers, the MLP a mixture of experts (w1 the gate, w3 the up, w2
 * the down projection) */
#define MOE_ROWS(base, gate, up, down)                                                      \
    {1, HF_UP, "router.weight", HF_ALWAYS, 0, {base "gate.weight"}, {HF_E}, HF_D},         \
    {1, HF_UP, "experts.up.weight", HF_ALWAYS, HF_PER_EXPERT,                               \
     {base "experts.%lld." gate ".weight", base "experts.%lld." up ".weight"},              \
     {HF_FF, HF_FF}, HF_D},                                                                 \
    {1, HF_UP, "experts.down.weight", HF_ALWAYS, HF_PER_EXPERT,                             \
     {base "experts.%lld." down ".weight"}, {HF_D}, HF_FF}
static const HfMap mixtral_map[] = {
    EMBED_ROW, INPUT_NORM_ROW, QKV_ROWS, O_ROWS,
    {1, HF_NORM2, "weight", HF_ALWAYS, 0, {"post_attention_layernorm.weight"}, {HF_D}, 0},
    MOE_ROWS("block_sparse_moe.", "w1", "w3", "w2"), HEAD_ROWS};

/* OLMoE: Llama's layers with OLMo 2's q and k norms (over all heads), the MLP a mixture
 * of experts with Llama's projection names */
static const HfMap olmoe_map[] = {
    EMBED_ROW, INPUT_NORM_ROW, QKV_ROWS, O_ROWS,
    {1, HF_ATTN, "q_norm.weight", HF_ALWAYS, 0, {"self_attn.q_norm.weight"}, {HF_QD}, 0},
    {1, HF_ATTN, "k_norm.weight", HF_ALWAYS, 0, {"self_attn.k_norm.weight"}, {HF_KD}, 0},
    {1, HF_NORM2, "weight", HF_ALWAYS, 0, {"post_attention_layernorm.weight"}, {HF_D}, 0},
    MOE_ROWS("mlp.", "gate_proj", "up_proj", "down_proj"), HEAD_ROWS};

/* Qwen3-MoE: Qwen3's layers (q and k norms per head), the MLP OLMoE's mixture */
static const HfMap qwen3_moe_map[] = {
    EMBED_ROW, INPUT_NORM_ROW, QKV_ROWS, O_ROWS, QK_NORM_ROWS,
    {1, HF_NORM2, "weight", HF_ALWAYS, 0, {"post_attention_layernorm.weight"}, {HF_D}, 0},
    MOE_ROWS("mlp.", "gate_proj", "up_proj", "down_proj"), HEAD_ROWS};

/* Qwen2-MoE: Qwen2's layers (q, k and v biased), the MLP OLMoE's mixture and a shared
 * expert beside it: gate_proj, up_proj and shared_expert_gate (its sigmoid's one row)
 * as trainc's shared.up, down_proj as shared.down */
static const HfMap qwen2_moe_map[] = {
    EMBED_ROW, INPUT_NORM_ROW, QKV_ROWS, O_ROWS,
    {1, HF_NORM2, "weight", HF_ALWAYS, 0, {"post_attention_layernorm.weight"}, {HF_D}, 0},
    MOE_ROWS("mlp.", "gate_proj", "up_proj", "down_proj"),
    {1, HF_UP, "shared.up.weight", HF_ALWAYS, 0,
     {"mlp.shared_expert.gate_proj.weight", "mlp.shared_expert.up_proj.weight",
      "mlp.shared_expert_gate.weight"}, {HF_SFF, HF_SFF, HF_ONE}, HF_D},
    {1, HF_UP, "shared.down.weight", HF_ALWAYS, 0, {"mlp.shared_expert.down_proj.weight"},
     {HF_D}, HF_SFF},
    HEAD_ROWS};

/* Granite-MoE: Granite's layers (its four factors are layers of the spec), the MLP a
 * mixture whose experts' weights are stacked already: input_linear [E, 2h, d] (gate
 * rows, then up rows, as trainc's), output_linear [E, d, h], the router's router.layer */
static const HfMap granitemoe_map[] = {
    EMBED_ROW, INPUT_NORM_ROW, QKV_ROWS, O_ROWS,
    {1, HF_NORM2, "weight", HF_ALWAYS, 0, {"post_attention_layernorm.weight"}, {HF_D}, 0},
    {1, HF_UP, "router.weight", HF_ALWAYS, 0, {"block_sparse_moe.router.layer.weight"}, {HF_E},
     HF_D},
    {1, HF_UP, "experts.up.weight", HF_ALWAYS, HF_STACKED, {"block_sparse_moe.input_linear.weight"},
     {HF_2FF}, HF_D},
    {1, HF_UP, "experts.down.weight", HF_ALWAYS, HF_STACKED,
     {"block_sparse_moe.output_linear.weight"}, {HF_D}, HF_FF},
    HEAD_ROWS};

const HfFamily hf_granitemoe = {"model.", "layers.%lld.", granitemoe_map, 0.0f, 0, 0};
const HfFamily hf_qwen2_moe = {"model.", "layers.%lld.", qwen2_moe_map, 0.0f, 0, 0};
const HfFamily hf_qwen3_moe = {"model.", "layers.%lld.", qwen3_moe_map, 0.0f, 0, 0};
const HfFamily hf_mixtral = {"model.", "layers.%lld.", mixtral_map, 0.0f, 0, 0};
const HfFamily hf_olmoe = {"model.", "layers.%lld.", olmoe_map, 0.0f, 0, 0};
const HfFamily hf_gpt2 = {"transformer.", "h.%lld.", gpt2_map, 0.0f, 0, 0};
const HfFamily hf_bigcode = {"transformer.", "h.%lld.", bigcode_map, 0.0f, 0, 0};
const HfFamily hf_llama = {"model.", "layers.%lld.", llama_map, 0.0f, 0, 0};
const HfFamily hf_phi3 = {"model.", "layers.%lld.", phi3_map, 0.0f, 0, 0};
const HfFamily hf_starcoder2 = {"model.", "layers.%lld.", starcoder2_map, 0.0f, 0, 0};
const HfFamily hf_stablelm = {"model.", "layers.%lld.", stablelm_map, 0.0f, 0, 0};
const HfFamily hf_nemotron = {"model.", "layers.%lld.", nemotron_map, 1.0f, 0, 0};
const HfFamily hf_neox = {"gpt_neox.", "layers.%lld.", neox_map, 0.0f, 1, 0};
const HfFamily hf_phi = {"model.", "layers.%lld.", phi_map, 0.0f, 0, 0};
const HfFamily hf_falcon = {"transformer.", "h.%lld.", falcon_map, 0.0f, 1, 0};
const HfFamily hf_falcon_seq = {"transformer.", "h.%lld.", falcon_seq_map, 0.0f, 1, 0};
const HfFamily hf_falcon_new = {"transformer.", "h.%lld.", falcon_new_map, 0.0f, 1, 0};
const HfFamily hf_olmo = {"model.", "layers.%lld.", olmo_map, 0.0f, 0, 0};
const HfFamily hf_olmo2 = {"model.", "layers.%lld.", olmo2_map, 0.0f, 0, 0};
const HfFamily hf_glm = {"model.", "layers.%lld.", glm_map, 0.0f, 0, 0};
const HfFamily hf_opt = {"model.decoder.", "layers.%lld.", opt_map, 0.0f, 0, 2};
const HfFamily hf_neo = {"transformer.", "h.%lld.", neo_map, 0.0f, 0, 0};
const HfFamily hf_gptj = {"transformer.", "h.%lld.", gptj_map, 0.0f, 0, 0};
const HfFamily hf_cohere = {"model.", "layers.%lld.", cohere_map, 0.0f, 0, 0};
/* Gemma: Llama's tensors; its RMSNorms scale by 1 + weight */
const HfFamily hf_gemma = {"model.", "layers.%lld.", llama_map, 1.0f, 0, 0};
const HfFamily hf_gemma3 = {"model.", "layers.%lld.", gemma3_map, 1.0f, 0, 0};

float hf_offset(const HfFamily *f, const HfMap *m)
{
    int norm = m->slot == HF_NORM1 || m->slot == HF_NORM2 || m->slot == HF_FINAL ||
               m->slot == HF_POST1 || m->slot == HF_POST2;
    int qk = m->slot == HF_ATTN && strstr(m->ours, "_norm.weight");
    return (norm && !strcmp(m->ours, "weight")) || qk ? f->norm_offset : 0.0f;
}

int64_t hf_head_dim(const HfDims *d) { return d->HD ? d->HD : d->D / d->H; }

static int is_qkv(const HfMap *m)
{
    return m->slot == HF_ATTN && (!strcmp(m->ours, "qkv.weight") || !strcmp(m->ours, "qkv.bias"));
}

/* The rows of M's parameter that hold q and k heads where transformers pairs a head's
 * dimensions otherwise (a partial rope, adjacent pairs): qkv's first (H + KV) hd, a qk
 * norm's hd; else 0 */
static int64_t rope_rows(const HfDims *d, const HfMap *m)
{
    int64_t hd = hf_head_dim(d);
    int partial = d->rope_dims && d->rope_dims < hd;
    if (!partial && !d->rope_pairs_adjacent)
        return 0;
    if (is_qkv(m))
        return (d->H + d->KV) * hd;
    return m->slot == HF_ATTN && strstr(m->ours, "_norm.weight") ? hd : 0;
}

int hf_reordered(const HfFamily *f, const HfDims *d, const HfMap *m)
{
    return rope_rows(d, m) > 0 || (f->qkv_by_head && is_qkv(m));
}

/* Where trainc's dimension J of a head (pairs J, J + hd/2 rotated for J < rd/2) is in
 * transformers' (its first rd dimensions rotated, the hd - rd after them kept): the
 * rotated pairs are (i, i + rd/2) there, or with ADJACENT (Cohere's, GPT-J's) (2i, 2i +
 * 1); in trainc each rotated half is followed by half of the kept ones. */
static int64_t hf_dim_of(int64_t j, int64_t hd, int64_t rd, int adjacent)
{
    int64_t h = hd / 2, r = rd / 2, k = (hd - rd) / 2;
    if (j < r)
        return adjacent ? 2 * j : j;
    if (j < h)
        return rd + (j - r);
    if (j < h + r)
        return adjacent ? 2 * (j - h) + 1 : r + (j - h);
    return rd + k + (j - h - r);
}

/* Where trainc's row R is in transformers' order */
typedef int64_t (*RowAt)(int64_t r, const HfDims *d);

/* a q or k head's row under a partial rope or adjacent pairs (hf_dim_of) */
static int64_t rope_row_at(int64_t r, const HfDims *d)
{
    int64_t hd = hf_head_dim(d);
    int64_t rd = d->rope_dims ? d->rope_dims : hd;
    return r / hd * hd + hf_dim_of(r % hd, hd, rd, d->rope_pairs_adjacent);
}

/* qkv's row (q heads, then k heads, then v heads) where each key/value head's rows
 * follow its group's G = H / KV query heads' (GPT-NeoX's and Falcon's q, k, v per head;
 * Falcon 40B's per group; Falcon 7B's one group, trainc's order) */
static int64_t grouped_row_at(int64_t r, const HfDims *d)
{
    int64_t hd = hf_head_dim(d), G = d->H / d->KV, head = r / hd, at = r % hd;
    int64_t g = head < d->H ? head / G : (head - d->H) % d->KV;
    int64_t in = head < d->H ? head % G : head < d->H + d->KV ? G : G + 1;
    return (g * (G + 2) + in) * hd + at;
}

/* Rows [0, n) of x [.., cols] moved between the orders AT relates */
static void move_rows(float *x, int64_t n, int64_t cols, int to_hf, RowAt at, const HfDims *d)
{
    size_t row = (size_t)cols * sizeof(float);
    float *t = malloc((size_t)n * row);
    if (!t)
        die("out of memory");
    memcpy(t, x, (size_t)n * row);
    for (int64_t r = 0; r < n; r++) {
        int64_t i = at(r, d);
        memcpy((char *)x + (size_t)(to_hf ? i : r) * row, (char *)t + (size_t)(to_hf ? r : i) * row,
               row);
    }
    free(t);
}

void hf_reorder(const HfFamily *f, const HfDims *d, const HfMap *m, float *x, int64_t cols,
                int to_hf)
{
    int grouped = f->qkv_by_head && is_qkv(m);
    int64_t n = (d->H + 2 * d->KV) * hf_head_dim(d);
    if (grouped && !to_hf)
        move_rows(x, n, cols, 0, grouped_row_at, d);
    if (rope_rows(d, m))
        move_rows(x, rope_rows(d, m), cols, to_hf, rope_row_at, d);
    if (grouped && to_hf)
        move_rows(x, n, cols, 1, grouped_row_at, d);
}

static int64_t dim(const HfDims *d, int code)
{
    int64_t hd = hf_head_dim(d);
    switch (code) {
    case HF_D: return d->D;
    case HF_QD: return d->H * hd;
    case HF_KD: return d->KV * hd;
    case HF_QKV: return (d->H + 2 * d->KV) * hd;
    case HF_FF: return d->FF;
    case HF_2FF: return 2 * d->FF;
    case HF_V: return d->V;
    case HF_HD: return hd;
    case HF_POSN: return d->max_pos;
    case HF_3D: return 3 * d->D;
    case HF_E: return d->E;
    case HF_SFF: return d->SFF;
    case HF_ONE: return 1;
    }
    return 0;
}

static int wanted(const HfDims *d, int cond)
{
    return cond == HF_ALWAYS ||
           (cond == HF_IF_BIAS && (d->bias == HF_BIAS_ALL || d->bias == HF_BIAS_QKV)) ||
           (cond == HF_IF_O_BIAS && (d->bias == HF_BIAS_ALL || d->bias == HF_BIAS_PROJ)) ||
           (cond == HF_IF_MLP_BIAS && d->mlp_bias) ||
           (cond == HF_IF_QK_NORM && d->qk_norm) ||
           (cond == HF_IF_UNTIED && (!d->tie || d->score));
}

/* A token classifier's bias (its name and shape the head's: visit) */
static const HfMap score_bias = {0, HF_HEAD, "bias", HF_ALWAYS, HF_ROWS, {"bias"}, {HF_D}, 0};

/* One entry for one block (-1 outside the blocks): the transformers names in full, an
 * expert's after another's. */
static void visit(const HfFamily *f, const char *prefix, const HfDims *d, const HfMap *m,
                  int64_t block, hf_visit fn, void *ctx)
{
    int per = 0;
    while (per < 3 && m->theirs[per])
        per++;
    if (m->slot == HF_HEAD && d->score && !m->cols && m != &score_bias)
        return;   /* (a sequence classifier's score has no bias: Phi's head's left out) */
    int each = m->form == HF_PER_EXPERT;
    int64_t experts = each ? d->E : 1;
    HfPart *parts = xcalloc((size_t)(experts * per), sizeof *parts);
    char *at = block >= 0 ? xasprintf(f->block, (long long)block) : xstrdup("");
    int n = 0;
    for (int64_t x = 0; x < experts; x++)
        for (int k = 0; k < per; k++, n++) {
            char *theirs = each ? xasprintf(m->theirs[k], (long long)x) : xstrdup(m->theirs[k]);
            /* the head sits beside the model's prefix, not under it */
            parts[n].name = xasprintf("%s%s%s", m->slot == HF_HEAD ? "" : prefix, at, theirs);
            free(theirs);
            parts[n].rank = m->cols ? 2 : 1;
            parts[n].shape[0] = dim(d, m->rows[k]) + (m->slot == HF_POS ? f->pos_pad : 0);
            parts[n].shape[1] = dim(d, m->cols);
            if (m->slot == HF_HEAD && d->score) {   /* transformers' ...For*Classification */
                free(parts[n].name);
                parts[n].name = xasprintf("%s.%s", d->score_name ? d->score_name : "score",
                                          m->ours);
                parts[n].shape[0] = d->score;
            }
            if (m->form == HF_STACKED) {   /* [E, rows, cols] */
                parts[n].rank = 3;
                parts[n].shape[2] = parts[n].shape[1];
                parts[n].shape[1] = parts[n].shape[0];
                parts[n].shape[0] = d->E;
            }
        }
    free(at);
    fn(ctx, m, block, n, parts);
    for (int k = 0; k < n; k++)
        free(parts[k].name);
    free(parts);
}

void hf_walk(const HfFamily *f, const char *prefix, const HfDims *d, hf_visit fn, void *ctx)
{
    for (const HfMap *m = f->map; m->ours;) {
        if (!m->block) {
            if (wanted(d, m->cond))
                visit(f, prefix, d, m, -1, fn, ctx);
            m++;
            continue;
        }
        const HfMap *first = m;   /* a run of block entries, block by block */
        for (int64_t i = 0; i < d->L; i++)
            for (m = first; m->ours && m->block; m++)
                if (wanted(d, m->cond))
                    visit(f, prefix, d, m, i, fn, ctx);
    }
    if (d->score && d->score_bias)
        visit(f, prefix, d, &score_bias, -1, fn, ctx);
}

/* The families whose sequence classifier transformers has (its score over the last
 * token's row, the model's tensors under the language model's prefix) */
static const char *const seq_families[] = {
    "gpt2", "gpt_neo", "gptj", "gpt_neox", "opt", "llama", "mistral", "mixtral", "qwen2",
    "qwen2_moe", "qwen3", "qwen3_moe", "phi", "phi3", "gemma", "gemma2", "stablelm",
    "starcoder2", "falcon", "nemotron", "glm", NULL};

/* LM_ARCH's stem (LlamaForCausalLM, GPT2LMHeadModel: Llama, GPT2) + TASK */
static const char *task_arch(const char *lm_arch, const char *task)
{
    size_t n = strlen(lm_arch), cut = 0;
    if (n >= 11 && (!strcmp(lm_arch + n - 11, "ForCausalLM") ||
                    !strcmp(lm_arch + n - 11, "LMHeadModel")))
        cut = 11;
    return xasprintf("%.*s%s", (int)(n - cut), lm_arch, task);
}

static int listed(const char *const *list, const char *type)
{
    for (int k = 0; list[k]; k++)
        if (!strcmp(type, list[k]))
            return 1;
    return 0;
}

const char *hf_seq_arch(const char *type, const char *lm_arch)
{
    return listed(seq_families, type) ? task_arch(lm_arch, "ForSequenceClassification") : NULL;
}

/* The families whose token classifier transformers has: its head `classifier` (the ones
 * transformers 4.40 has), or `score` (Llama's and those after it, 4.41 on) */
static const char *const token_classifier_families[] = {
    "gpt2", "gpt_neo", "gpt_neox", "falcon", "phi", "gpt_bigcode", NULL};
static const char *const token_score_families[] = {
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma",
    "gemma2", "phi3", "stablelm", "starcoder2", "nemotron", "glm", NULL};

const char *hf_token_head(const char *type)
{
    return listed(token_classifier_families, type) ? "classifier"
         : listed(token_score_families, type)      ? "score"
                                                   : NULL;
}

const char *hf_token_arch(const char *type, const char *lm_arch)
{
    return hf_token_head(type) ? task_arch(lm_arch, "ForTokenClassification") : NULL;
}
