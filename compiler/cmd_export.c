/* cmd_export.c: trainc export hf SPEC... --weights FILE -o DIR [--tokenizer FILE]: a
 * model in one of the layouts `trainc import hf` writes, whose layers pick the family
 * (docs/commands.md's table): GPT-2's (learned positions; one key/value head GPTBigCode,
 * a relu MLP OPT, the output projection's bias alone GPT-Neo);
 * Llama's (rmsnorms: a window Mistral, qk_norm Qwen3, biases on q, k and v alone Qwen2,
 * layers without rope SmolLM3, longrope Phi-3, the embedding scaled by sqrt(d) Gemma,
 * with a norm after each branch Gemma 3, or Gemma 2 without qk_norm, with the norms
 * after the branches alone OLMo 2, a partial rope GLM, other scale layers Granite); the
 * layernorm families' (by the MLP and the block's form: StarCoder2, StableLM, Nemotron,
 * GPT-NeoX, Falcon, Phi, GPT-J, Cohere, Cohere 2 with windows, OLMo); a vision
 * transformer's as ViTForImageClassification (hf_vit.c); as
 * DIR/config.json and DIR/model.safetensors that transformers' from_pretrained loads;
 * with --tokenizer, config.json's bos_token_id and eos_token_id (the generation
 * config's) come from the tokenizer's special tokens. A layer such a model has no place
 * for exits 1 naming it, before anything is written. The layers are spec_load's (its
 * defaults, its input the embedding reads), never the file read again. The tensors
 * come from the family's table (hf_arch.c), the one import walks. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cmd.h"
#include "hf.h"
#include "ops/op.h"
#include "../runtime/tokenizer.h"

typedef struct Ex {
    const char *file;          /* the model spec, for errors */
    HfWeights w;               /* the trainc weights */
    int64_t lora_rank;         /* train.lora's rank, its adapters merged; 0: no lora */
    double lora_scale;         /* and its factor (rt_lora_scale) */
    int adapter;               /* --adapter: the adapters alone, as PEFT's files */
    HfOut out;
    const HfTensor **src;      /* per output tensor: its trainc tensor */
    int64_t *row0;             /* the first of its rows taken (a slice of qkv, gate_up) */
    int *tr;                   /* 1: transposed (GPT-2's Conv1D) */
    float *offset;             /* subtracted from each element (Gemma's norms: 1 + weight) */
    const HfMap **reorder;     /* its parameter's rows reordered (hf_reorder), or NULL */
    int64_t *lead;             /* zeros written before it (OPT's positions' two rows) */
    /* what the layers say */
    int gpt2, gemma;
    int layernorm;             /* the norms are layernorms (GPT-2, the layernorm families) */
    int mlp;                   /* the MLP's activation layer: OP_GELU, OP_GLU, OP_SQUARED_RELU;
                                  OP_MOE: a mixture of experts */
    int64_t top_k;             /* OP_MOE: each token's experts (d.E the experts) */
    int norm_topk;             /* and their weights renormalized */
    double aux_loss;           /* and the load-balancing loss's coefficient, or 0 */
    int block;                 /* BLOCK_* */
    int head_bias;             /* the head has a bias (Phi's, GPT-J's) */
    int ln_params;             /* LN_*: the layernorms' parameters, alike in all */
    double logit_mult;         /* the scale layer after the head (Cohere's logit_scale), or 0 */
    int post_norms;            /* a norm after each branch as well (Gemma 3), else 0 */
    int post_only;             /* the norms after the branches alone (OLMo 2) */
    HfDims d;
    int64_t T, window;
    double att_scale;          /* the attention's scale, or 0: 1 / sqrt(head width) */
    double att_softcap;        /* the attention's soft-cap (Gemma 2), or 0 */
    double embed_mult;         /* the embedding's scale layer (Gemma's sqrt(d)), or 0 */
    double residual_mult;      /* Granite: the scale closing each branch, or 0 */
    double logits_div;         /* Granite: 1 / the scale after the head, or 0 */
    double final_cap;          /* the logits' soft-cap after the head (Gemma 2), or 0 */
    int64_t global_every;      /* Gemma 2 and 3: every N-th layer without the window, or 0 */
    const Rope *global_scaled; /* and their rope, where it has a scaling (the 4B and larger) */
    int64_t nope_every;        /* SmolLM3: every N-th layer without rope, or 0 */
    int global_nope;           /* Cohere 2: its global layers without rope too */
    int *neo_local;            /* GPT-Neo: [L] each layer windowed (its "local" layers) */
    double eps, theta;
    double global_theta;       /* the global layers' rope theta, or 0: the layers' own */
    const char *act;           /* gpt2: activation_function; llama: hidden_act */
    const Layer *scaled;       /* the attention with Llama 3's rope scaling, or NULL */
    const LongRope *longrope;  /* the attention's longrope scaling (Phi-3), or NULL */
    char *names[HF_N_SLOTS];   /* the layers' names, a block's after "<rep><i>." */
    char *rep;                 /* the repeat's prefix ("h." or "") */
    int64_t bos, eos;          /* the tokenizer's, or -1 (none given, or none found) */
    int64_t pad;               /* and its padding id (a sequence classifier's), or -1 */
    HfImage cls;               /* a classifier's classes (d.score of them) */
} Ex;

static const char *op(const Layer *l) { return op_info[l->op].name; }

/* Layer i of a list of n, or NULL past its end. */
static const Layer *at(Layer *const *ls, int n, int i) { return i < n ? ls[i] : NULL; }


/* Exits 1 naming PATH (L's own, or where a layer is missing when L is NULL). */
_Noreturn static void refuse(const Ex *e, const char *path, const Layer *l, const char *why)
{
    error_at(e->file, l ? l->path : path, "%s%s%s%s", l ? "op '" : "", l ? op(l) : "",
             l ? "': " : "", why);
}

static void same_eps(Ex *e, const Layer *l)
{
    if (e->eps == 0)
        e->eps = l->eps;
    else if (l->eps != e->eps)
        refuse(e, NULL, l, xasprintf("eps %g where an earlier norm has %g: config.json holds "
                                     "one", l->eps, e->eps));
}

/* OPT: GPT-2's layers (learned positions) with a relu MLP */
static int opt(const Ex *e) { return e->gpt2 && e->mlp == OP_RELU; }

/* GPT-Neo: GPT-2's layers with the output projection's bias alone */
static int neo(const Ex *e) { return e->gpt2 && e->d.bias == HF_BIAS_PROJ; }

/* GPTBigCode (StarCoder, SantaCoder): GPT-2's layers with one key/value head */
static int bigcode(const Ex *e)
{
    return e->gpt2 && e->d.KV == 1 && e->d.H > 1 && !opt(e) && !neo(e);
}

/* The layernorm families without learned positions (Llama's attention), by the MLP's
 * activation OP and the block's form: with a gelu, Phi (off one norm, the head biased),
 * Falcon (off one norm, or in parallel without biases), GPT-NeoX (in parallel, or one
 * after the other with a partial rope) and StarCoder2 (the rest); StableLM a glu,
 * Nemotron a squared relu */
static int ln_family(const Ex *e, int op)
{
    return e->layernorm && !e->gpt2 && e->mlp == op && e->ln_params == LN_FULL;
}

/* OLMo: Llama's layers, its layernorms without weight or bias; Cohere: a layernorm with a
 * weight alone before the attention and the gated MLP in parallel */
static int olmo(const Ex *e)
{
    return e->layernorm && e->ln_params == LN_BARE && e->mlp == OP_GLU &&
           e->block == BLOCK_SEQUENTIAL;
}
static int cohere(const Ex *e)
{
    return e->layernorm && e->ln_params == LN_WEIGHT && e->mlp == OP_GLU &&
           e->block == BLOCK_SHARED_NORM;
}

/* Cohere 2: Cohere's layers with windows, its global layers (every N-th) without window
 * and rope */
static int cohere2(const Ex *e) { return cohere(e) && e->window; }

/* A layernorm's LN_* */
static int ln_kind(const Layer *l) { return !l->affine ? LN_BARE : !l->bias ? LN_WEIGHT : LN_FULL; }
static int phi(const Ex *e)
{
    return ln_family(e, OP_GELU) && e->block == BLOCK_SHARED_NORM && e->head_bias &&
           e->d.bias != HF_BIAS_NONE;
}
static int gptj(const Ex *e)
{
    return ln_family(e, OP_GELU) && e->block == BLOCK_SHARED_NORM && e->head_bias &&
           e->d.bias == HF_BIAS_NONE;
}
static int falcon(const Ex *e)
{
    return ln_family(e, OP_GELU) && ((e->block == BLOCK_SHARED_NORM && !e->head_bias) ||
                                     (e->block == BLOCK_PARALLEL && !e->d.mlp_bias));
}
static int neox(const Ex *e)
{
    return ln_family(e, OP_GELU) && !falcon(e) && !phi(e) && !gptj(e) &&
           (e->block == BLOCK_PARALLEL || e->d.rope_dims);
}
static int starcoder2(const Ex *e)
{
    return ln_family(e, OP_GELU) && !neox(e) && !falcon(e) && !phi(e) && !gptj(e);
}
static int stablelm(const Ex *e) { return ln_family(e, OP_GLU); }
static int nemotron(const Ex *e) { return ln_family(e, OP_SQUARED_RELU); }

/* One norm layer: a layernorm for GPT-2 and the layernorm families (as the first norm
 * says), alike in its parameters; an rmsnorm for Llama's. */
static char *norm(Ex *e, const Layer *l, int idx, const char *prefix)
{
    if (l->op != (e->layernorm ? OP_LAYERNORM : OP_RMSNORM))
        refuse(e, NULL, l, e->gpt2 ? "GPT-2 has a layernorm here"
                           : e->layernorm ? "the first norm a layernorm (a layernorm family's): "
                                            "a layernorm here"
                                          : "Llama has an rmsnorm here");
    if (e->layernorm && ln_kind(l) != e->ln_params)
        refuse(e, NULL, l, "the layernorms alike: each with a weight and a bias, with a weight "
                           "alone (Cohere's) or with neither (OLMo's)");
    same_eps(e, l);
    return hf_layer_name(l, idx, prefix);
}

/* What an interleave says: Gemma 2 and 3's global layers (window null; in Gemma 3 a
 * rope of their own, scaled or not) or SmolLM3's layers without rope (rope null alone);
 * no other. */
static void interleave(Ex *e, const Layer *l)
{
    const Interleave *il = &l->il;
    if (!il->every)
        return;
    if (il->set_window && !il->window && (!il->set_rope || il->rope.theta > 0)) {
        e->global_every = il->every;
        e->global_theta = il->set_rope ? il->rope.theta : 0;
        e->global_scaled = il->set_rope && il->rope.factor ? &il->rope : NULL;
    } else if (!il->set_window && il->set_rope && !(il->rope.theta > 0)) {
        e->nope_every = il->every;
    } else if (il->set_window && !il->window && il->set_rope && !(il->rope.theta > 0)) {
        e->global_every = il->every;   /* Cohere 2's global layers */
        e->global_nope = 1;
    } else
        refuse(e, NULL, l, "interleave: Gemma 2 and 3's (window null, and in Gemma 3 a rope of "
                           "its own), SmolLM3's (rope null alone) or Cohere 2's (window and rope "
                           "null) only");
}

/* OLMo 2: Llama's layers with a norm after each branch and none before it, qk_norm over
 * all heads */
static int olmo2(const Ex *e) { return e->post_only; }

/* The mixtures of experts: Qwen2-MoE's (a shared expert beside: moe()'s check), OLMoE's
 * (Llama's layers, qk_norm over all heads, the experts' weights renormalized or not),
 * Qwen3-MoE's (Qwen3's layers: qk_norm per head), Granite-MoE's (Granite's factors),
 * else Mixtral's (Mistral's layers, renormalized) */
static int granite(const Ex *e);
static int qwen2_moe(const Ex *e) { return e->mlp == OP_MOE && e->d.SFF; }
static int routed(const Ex *e) { return e->mlp == OP_MOE && !e->d.SFF; }
static int olmoe(const Ex *e) { return routed(e) && e->d.qk_norm == QK_NORM_ALL_HEADS; }
static int qwen3_moe(const Ex *e) { return routed(e) && e->d.qk_norm == QK_NORM_HEAD; }
/* Granite-MoE: Mixtral's layers with Granite's factors */
static int granitemoe(const Ex *e) { return routed(e) && !e->d.qk_norm && granite(e); }
static int mixtral(const Ex *e) { return routed(e) && !e->d.qk_norm && !granite(e); }

/* GLM: Llama's layers with a partial rope (no longrope: that is Phi-4-mini's) */
static int glm(const Ex *e)
{
    return !e->gpt2 && !e->layernorm && e->d.rope_dims && !e->longrope;
}

/* Gemma 2: Gemma's layers with a norm after each branch (Gemma 3's) and no qk_norm */
static int gemma2(const Ex *e) { return e->gemma && e->post_norms && !e->d.qk_norm; }

/* Granite: Llama's layers with a factor of its own (a scale after the embedding other
 * than Gemma's sqrt(d), closing the branches or after the head; the attention's scale) */
static int granite(const Ex *e)
{
    return !e->gemma && !e->layernorm &&
           (e->embed_mult || e->residual_mult || e->logits_div ||
            (e->att_scale > 0 &&
             (float)e->att_scale != (float)(1.0 / sqrt((double)hf_head_dim(&e->d)))));
}

/* Gemma 2 and 3's query_pre_attn_scalar: the scores are scaled by its -1/2 power (the head
 * width, or what the attention's scale says: an integer where it is one to 1e-9) */
static double query_pre_attn_scalar(const Ex *e)
{
    double hd = (double)hf_head_dim(&e->d);
    if (!(e->att_scale > 0) || (float)e->att_scale == (float)(1.0 / sqrt(hd)))
        return hd;
    double q = 1.0 / (e->att_scale * e->att_scale);
    return fabs(q - round(q)) <= 1e-9 * q ? round(q) : q;
}

/* The combinations of attention options the families have; any other is refused. */
static void attention_family(Ex *e, const Layer *l)
{
    if (e->gemma && !e->post_norms && query_pre_attn_scalar(e) != (double)hf_head_dim(&e->d))
        refuse(e, NULL, l, "scale other than 1 / sqrt(head width): Gemma has none (Gemma 2 "
                           "and 3 and Granite have one)");
    if (e->att_softcap > 0 && !gemma2(e))
        refuse(e, NULL, l, "softcap: only Gemma 2 (a norm after each branch, no qk_norm) "
                           "soft-caps its scores");
    if (gemma2(e) && (!e->window || e->global_every != 2 || e->global_theta || e->scaled))
        refuse(e, NULL, l, "Gemma 2 (a norm after each branch, no qk_norm) has a window, "
                           "\"interleave\": {\"every\": 2, \"window\": null} and one rope "
                           "without scaling");
    if (!e->gemma && !starcoder2(e) && !neo(e) && e->window && (e->d.bias || e->d.qk_norm))
        refuse(e, NULL, l, "a window with bias or qk_norm: Mistral has neither (nor Qwen3, "
                           "which windows only some layers)");
    if (e->d.qk_norm && e->d.bias == HF_BIAS_QKV)
        refuse(e, NULL, l, "bias \"qkv\" with qk_norm: Qwen3's attention_bias is on q, k, v "
                           "and o or none");
    if (e->global_every && !(e->gemma && e->post_norms) && !cohere2(e))
        refuse(e, NULL, l, "global layers: only Gemma 3 (the embedding scaled by sqrt(d), a "
                           "norm after each branch) has them here");
    if (e->nope_every && (e->gemma || e->window || e->d.qk_norm || e->scaled))
        refuse(e, NULL, l, "layers without rope: SmolLM3 has them, without a window, qk_norm "
                           "or rope scaling");
    if (e->gemma && e->post_norms && e->d.qk_norm && !e->window)
        refuse(e, NULL, l, "Gemma 3 (the norms after each branch, qk_norm) has a window");
    if (e->gemma && !e->post_norms && (e->window || e->d.qk_norm))
        refuse(e, NULL, l, "window and qk_norm have no place in Gemma (with them and a norm "
                           "after each branch it would be Gemma 3)");
    if (e->gemma && (e->d.bias == HF_BIAS_QKV || e->scaled))
        refuse(e, NULL, l, "bias \"qkv\" and rope scaling have no place in Gemma (the "
                           "embedding's scale by sqrt(d) makes the model Gemma)");
    if ((e->d.qk_norm == QK_NORM_ALL_HEADS) != (olmo2(e) || olmoe(e)))
        refuse(e, NULL, l, olmo2(e) ? "OLMo 2 (a norm after each branch, none before it) has "
                                      "qk_norm \"all_heads\""
                                    : "qk_norm \"all_heads\": only OLMo 2 (a norm after each "
                                      "branch, none before it) and OLMoE (a mixture of experts) "
                                      "have it");
    if (e->mlp == OP_MOE && ((e->att_scale && !granitemoe(e)) || e->att_softcap ||
                             l->il.every || e->d.rope_dims || l->rope.lr ||
                             (e->d.HD && !qwen3_moe(e))))
        refuse(e, NULL, l, "scale (but Granite-MoE's), softcap, interleave, a partial rope and "
                           "longrope have no place in a mixture of experts' layers (Mixtral, "
                           "OLMoE, Granite-MoE, Qwen2-MoE and Qwen3-MoE), nor head_dim but in "
                           "Qwen3-MoE");
    if (qwen3_moe(e) && (e->window || e->d.bias == HF_BIAS_QKV))
        refuse(e, NULL, l, "window and bias \"qkv\" have no place in Qwen3-MoE (a mixture of "
                           "experts, qk_norm per head)");
    if (mixtral(e) && (e->d.bias || l->rope.factor))
        refuse(e, NULL, l, "bias and rope scaling have no place in Mixtral (a mixture of "
                           "experts, the top_k weights renormalized)");
    if (qwen2_moe(e) && (e->window || e->d.bias != HF_BIAS_QKV || l->rope.factor))
        refuse(e, NULL, l, "Qwen2-MoE (a mixture of experts and a shared expert) has bias "
                           "\"qkv\", no window and no rope scaling");
    if (olmoe(e) && (e->window || e->d.bias == HF_BIAS_QKV))
        refuse(e, NULL, l, "window and bias \"qkv\" have no place in OLMoE (a mixture of "
                           "experts, qk_norm \"all_heads\")");
    if (olmo2(e) && (e->window || e->d.HD || e->att_scale || e->att_softcap || l->il.every ||
                     e->d.rope_dims || e->d.bias == HF_BIAS_QKV || l->rope.lr))
        refuse(e, NULL, l, "window, head_dim, scale, softcap, interleave, a partial rope, "
                           "longrope and bias \"qkv\" have no place in OLMo 2");
    if (glm(e) && (e->d.bias == HF_BIAS_ALL || e->d.qk_norm || e->window || e->d.HD ||
                   e->att_scale || e->att_softcap || l->il.every || l->rope.factor))
        refuse(e, NULL, l, "a partial rope on rmsnorms is GLM's, which has no bias on o "
                           "(\"bias\": \"qkv\" or false), qk_norm, window, head_dim, scale, "
                           "softcap, interleave or rope scaling");
}

/* GPT-Neo's windows: each layer's, from the window and the interleave, into
 * e->neo_local; one width for all (window_size) */
static void neo_windows(Ex *e, const Layer *l)
{
    const Interleave *il = &l->il;
    if (il->every && (il->set_rope || !il->set_window))
        refuse(e, NULL, l, "GPT-Neo's interleave sets a window (its local layers) or none (its "
                           "global ones), nothing else");
    free(e->neo_local);
    e->neo_local = xcalloc((size_t)e->d.L, sizeof *e->neo_local);
    int64_t w = 0;
    for (int64_t i = 0; i < e->d.L; i++) {
        int64_t wi = il->every && (i + 1) % il->every == 0 ? il->window : l->window;
        if (wi && w && wi != w)
            refuse(e, NULL, l, "GPT-Neo's local layers share one window (window_size)");
        w = wi ? wi : w;
        e->neo_local[i] = wi != 0;
    }
    e->window = w;
}

/* The attention with learned positions: GPT-2's (every bias), GPTBigCode's (one
 * key/value head), OPT's (every bias or none) or GPT-Neo's (the output projection's bias
 * alone, scores not scaled, windows on its local layers) */
static void gpt2_attention(Ex *e, const Layer *l, int rope)
{
    if (rope || e->d.qk_norm || e->d.HD || e->att_softcap || e->d.bias == HF_BIAS_QKV)
        refuse(e, NULL, l, "rope, qk_norm, head_dim, softcap and bias \"qkv\" have no place "
                           "with learned positions (GPT-2, OPT, GPT-Neo)");
    if (neo(e)) {
        if ((float)e->att_scale != 1.0f || e->d.KV != e->d.H)
            refuse(e, NULL, l, "GPT-Neo (the output projection's bias alone) has scale 1 (its "
                               "scores are not scaled) and no kv_heads");
        neo_windows(e, l);
        return;
    }
    if (e->window || l->il.every || e->att_scale)
        refuse(e, NULL, l, "window, interleave and scale have no place in GPT-2 and OPT "
                           "(GPT-Neo's attention has bias \"proj\" and scale 1)");
    if (e->d.KV != e->d.H && (e->d.KV != 1 || opt(e)))
        refuse(e, NULL, l, "kv_heads: only GPTBigCode (GPT-2's layers) has one key/value head");
    if (e->d.bias == HF_BIAS_NONE && !opt(e))
        refuse(e, NULL, l, "bias false: only OPT (a relu MLP) has no biases; GPT-2's attention "
                           "has every one");
}

/* Falcon's attention: a whole-head rope, linear scaling or none, biased as its MLP is */
static void falcon_attention(Ex *e, const Layer *l, int others)
{
    if (others || e->d.rope_dims || e->d.bias == HF_BIAS_QKV || e->d.HD ||
        (l->rope.factor && !l->rope.linear))
        refuse(e, NULL, l, "bias \"qkv\", qk_norm, window, head_dim, scale, softcap, "
                           "interleave, a partial rope and rope scaling other than linear have "
                           "no place in Falcon (layernorms, a gelu MLP, the branches in parallel)");
    if ((e->d.bias == HF_BIAS_ALL) != e->d.mlp_bias)
        refuse(e, NULL, l, "Falcon's attention is biased where its MLP is (`bias`)");
}

/* The attention of the layernorm families without learned positions but StarCoder2
 * (a partial rope theirs alone, and Phi-3's with longrope) */
static void layernorm_family_attention(Ex *e, const Layer *l)
{
    if ((e->d.rope_dims || l->il.rope.dims) && e->layernorm && !stablelm(e) && !nemotron(e) &&
        !neox(e) && !phi(e) && !gptj(e))
        refuse(e, NULL, l, "rope dims (a partial rope): of the layernorm families only "
                           "StableLM, Nemotron, GPT-NeoX, Phi and GPT-J (a gated, a squared "
                           "relu or a gelu MLP) rotate part of each head");
    int c2 = cohere2(e);   /* its windows and interleave are its own */
    int others = e->d.qk_norm || (e->window && !c2) || e->att_scale || e->att_softcap ||
                 (l->il.every && !c2) || l->rope.lr;
    if (falcon(e))
        falcon_attention(e, l, others);
    if ((olmo(e) || cohere(e)) && (others || e->d.rope_dims || e->d.bias == HF_BIAS_QKV ||
                                   (e->d.HD && !c2) ||
                                   (l->rope.factor && (cohere(e) || !l->rope.linear))))
        refuse(e, NULL, l, "bias \"qkv\", qk_norm, window, head_dim, scale, softcap, interleave, "
                           "a partial rope and rope scaling (OLMo's linear apart) have no place "
                           "in OLMo and Cohere (layernorms without bias, a gated MLP; Cohere 2 "
                           "with a window and its global layers' interleave)");
    if (c2 && l->il.every && (!l->il.set_window || l->il.window || !l->il.set_rope ||
                              l->il.rope.theta > 0))
        refuse(e, NULL, l, "Cohere 2's interleave sets its global layers apart: window null and "
                           "rope null");
    if (gptj(e) && (others || e->d.KV != e->d.H || e->d.HD || l->rope.factor ||
                    l->rope.theta != 10000))
        refuse(e, NULL, l, "kv_heads, qk_norm, window, head_dim, scale, softcap, interleave, "
                           "rope scaling and a theta other than 10000 have no place in GPT-J "
                           "(layernorms, the branches in parallel off one, the head biased)");
    if (phi(e) && (others || e->d.bias != HF_BIAS_ALL || e->d.HD ||
                   (l->rope.factor && !l->rope.linear)))
        refuse(e, NULL, l, "bias other than true, qk_norm, window, head_dim, scale, softcap, "
                           "interleave and rope scaling other than linear have no place in Phi "
                           "(layernorms, the branches in parallel off one, the head biased)");
    if (neox(e) && (others || e->d.KV != e->d.H || e->d.bias == HF_BIAS_QKV || e->d.HD ||
                    (l->rope.factor && !l->rope.linear)))
        refuse(e, NULL, l, "kv_heads, bias \"qkv\", qk_norm, window, head_dim, scale, softcap, "
                           "interleave and rope scaling other than linear have no place in "
                           "GPT-NeoX (layernorms, a gelu MLP, a partial rope or the branches in "
                           "parallel)");
    if (stablelm(e) && (others || e->d.bias == HF_BIAS_ALL || e->d.HD ||
                        (l->rope.factor && !l->rope.linear)))
        refuse(e, NULL, l, "bias true (StableLM's o has none), qk_norm, window, head_dim, "
                           "scale, softcap, interleave and rope scaling other than linear have "
                           "no place in StableLM (layernorms, a gated MLP)");
    if (nemotron(e) && (others || e->d.bias == HF_BIAS_QKV || l->rope.factor))
        refuse(e, NULL, l, "bias \"qkv\", qk_norm, window, scale, softcap, interleave and rope "
                           "scaling have no place in Nemotron (layernorms, a squared relu MLP)");
}

static void attention(Ex *e, const Layer *l)
{
    if (l->op != OP_ATTENTION)
        refuse(e, NULL, l, "an attention layer expected here");
    if (!l->causal)
        refuse(e, NULL, l, "causal false: a causal language model's attention is causal");
    e->d.H = l->heads;
    e->d.KV = l->kv_heads ? l->kv_heads : l->heads;
    e->d.HD = l->head_dim && l->head_dim * l->heads != e->d.D ? l->head_dim : 0;
    e->d.bias = !l->bias ? HF_BIAS_NONE : l->bias_qkv ? HF_BIAS_QKV
              : l->bias_proj ? HF_BIAS_PROJ : HF_BIAS_ALL;
    e->d.qk_norm = l->qk_norm;
    if (l->qk_norm == QK_NORM_ALL_HEADS && (olmo2(e) || olmoe(e)))   /* rms_norm_eps */
        same_eps(e, l);
    e->window = l->window;
    e->att_scale = l->att_scale;
    e->att_softcap = l->att_softcap;
    e->d.rope_dims = l->rope.dims < hf_head_dim(&e->d) ? l->rope.dims : 0;
    int rope = l->rope.theta > 0;
    if (e->gpt2)
        gpt2_attention(e, l, rope);
    if (!e->gpt2 && !rope)
        refuse(e, NULL, l, "no rope: a Llama-shaped model takes its positions from rope");
    if (starcoder2(e) && (e->d.bias == HF_BIAS_QKV || e->d.qk_norm || e->d.HD || e->att_scale ||
                          e->att_softcap || l->il.every || l->rope.factor))
        refuse(e, NULL, l, "bias \"qkv\", qk_norm, head_dim, scale, softcap, interleave and "
                           "rope scaling have no place in StarCoder2 (layernorms without "
                           "learned positions, a gelu MLP)");
    layernorm_family_attention(e, l);
    e->theta = l->rope.theta;
    e->scaled = l->rope.factor ? l : NULL;
    e->longrope = l->rope.lr;
    if (e->longrope && (e->d.bias || e->d.qk_norm || e->d.HD || e->att_scale ||
                        e->att_softcap || l->il.every))
        refuse(e, NULL, l, "longrope comes with Phi-3's attention alone: no bias, qk_norm, "
                           "head_dim, scale, softcap or interleave");
    if (!neo(e))   /* GPT-Neo's: its local layers (neo_windows) */
        interleave(e, l);
    attention_family(e, l);
}

/* A branch's last layer past N_MAIN: a norm after it (Gemma 2 and 3's) or a scale
 * (Granite's residual_multiplier), alike in both branches; a norm's name in
 * e->names[SLOT]. */
static void branch_end(Ex *e, const Layer *r, int n_main, int slot, const char *prefix)
{
    const Layer *x = r->n_body > n_main ? r->body[n_main] : NULL;
    if (r->n_body > n_main + 1 || (x && (e->layernorm || (x->op == OP_SCALE && e->gemma))))
        refuse(e, NULL, r->body[n_main], slot == HF_POST1
               ? "the attention branch holds a norm, the attention and (Gemma 2 and 3) a norm "
                 "or (Granite) a scale"
               : "the MLP branch ends with its linear back, (Gemma 2 and 3) a norm or "
                 "(Granite) a scale after it");
    int normed = x && x->op != OP_SCALE;
    double mult = x && x->op == OP_SCALE ? x->by : 0;
    if (normed && !e->gemma && !olmo2(e))
        refuse(e, NULL, x, "a norm closing a branch: only Gemma 2 and 3 (the embedding scaled "
                           "by sqrt(d)) and OLMo 2 (no norm before it) have one");
    if (!normed && olmo2(e))
        refuse(e, xasprintf("%s.body", r->path), NULL, "OLMo 2's branches (no norm before "
               "them) end with a norm");
    if (slot == HF_POST1) {
        e->post_norms = normed;
        e->residual_mult = mult;
    } else if (normed != e->post_norms || (float)mult != (float)e->residual_mult)
        refuse(e, xasprintf("%s.body", r->path), NULL, "the branches end alike: with a norm "
               "(Gemma 2 and 3), a scale by one factor (Granite) or their last layer");
    if (normed)
        e->names[slot] = norm(e, x, n_main, prefix);
}

/* The MLP's linears' biases: both or neither; GPT-2's have them, StarCoder2's where its
 * attention has them (use_bias), Nemotron's either way (mlp_bias), the others' none. */
static void mlp_bias(Ex *e, const Layer *up, const Layer *down)
{
    if (up->bias != down->bias)
        refuse(e, NULL, down, "the MLP's two linears have biases or neither has");
    e->d.mlp_bias = up->bias;
    int want = opt(e)                                  ? e->d.bias == HF_BIAS_ALL
             : e->gpt2 || neox(e) || phi(e) || gptj(e) ? 1
             : starcoder2(e)                 ? e->d.bias == HF_BIAS_ALL
             : nemotron(e) || falcon(e)      ? up->bias
                                             : 0;
    if (up->bias != want)
        refuse(e, NULL, up, opt(e) ? "OPT's MLP linears have biases where its attention has "
                                     "them (enable_bias)"
                            : e->gpt2 || neox(e) || phi(e) || gptj(e)
                                ? "GPT-2's, GPT-NeoX's, Phi's and GPT-J's MLP linears have biases"
                            : starcoder2(e) ? "StarCoder2's MLP linears have biases where its "
                                              "attention has them (use_bias)"
                                            : "Llama's and StableLM's MLP linears have no bias");
}

/* A mixture of experts: Mixtral's (its weights renormalized) or OLMoE's (not) */
static void moe(Ex *e, const Layer *l, int first, const char *prefix)
{
    if (e->gpt2 || e->layernorm || e->post_only || e->block != BLOCK_SEQUENTIAL)
        refuse(e, NULL, l, "a mixture of experts comes with rmsnorms before the branches, one "
                           "after the other (Mixtral's, OLMoE's, Granite-MoE's and Qwen's "
                           "layers)");
    if (l->shared && (!l->shared_gate || e->d.qk_norm))
        refuse(e, NULL, l, "a shared expert comes with Qwen2-MoE's layers alone: gated "
                           "(shared_gate true), the attention without qk_norm");
    if (granitemoe(e) && !l->norm_topk)
        refuse(e, NULL, l, "Granite-MoE renormalizes its experts' weights (a softmax over the "
                           "chosen logits): norm_topk true");
    if (mixtral(e) && !l->norm_topk)
        refuse(e, NULL, l, "Mixtral renormalizes its experts' weights: norm_topk true (OLMoE, "
                           "whose attention has qk_norm \"all_heads\", may not)");
    e->d.FF = l->hidden;
    const char *a = glu_act_names[l->glu_act];
    e->act = !strcmp(a, "gelu_tanh") ? "gelu_pytorch_tanh" : a;
    e->names[HF_UP] = hf_layer_name(l, first, prefix);
}

/* The MLP branch R after its norm: fc, gelu, proj (GPT-2, StarCoder2), fc, squared_relu,
 * proj (Nemotron), gate_up, glu, down (Llama, StableLM) or a moe (Mixtral, OLMoE); the
 * layers it takes. */
static int mlp(Ex *e, const Layer *r, int first, const char *prefix)
{
    if (r->n_body > first && r->body[first]->op == OP_MOE) {
        moe(e, r->body[first], first, prefix);
        return 1;
    }
    if (r->n_body < first + 3)
        refuse(e, xasprintf("%s.body", r->path), NULL, first ? "the MLP branch holds a norm, a "
               "linear, the activation and a linear (and, in Gemma 3, a norm)"
               : "the MLP holds a linear, the activation and a linear");
    const Layer *up = r->body[first], *act = r->body[first + 1], *down = r->body[first + 2];
    if (up->op != OP_LINEAR || up->tie)
        refuse(e, NULL, up, "a linear expected here");
    if (down->op != OP_LINEAR || down->tie || down->out != e->d.D)
        refuse(e, NULL, down, "a linear back to the model width expected here");
    mlp_bias(e, up, down);
    e->d.FF = up->out;
    if (act->op == OP_GELU && e->layernorm) {
        e->act = !act->gelu_tanh                ? "gelu"
                 : e->gpt2 && !bigcode(e) ? "gelu_new" : "gelu_pytorch_tanh";
    } else if (act->op == OP_RELU && opt(e)) {
        e->act = "relu";
    } else if (act->op == OP_SQUARED_RELU && nemotron(e)) {
        e->act = "relu2";
    } else if (act->op == OP_GLU && !e->gpt2) {
        const char *a = glu_act_names[act->glu_act];
        e->act = !strcmp(a, "gelu_tanh") ? "gelu_pytorch_tanh" : a;
        e->d.FF = up->out / 2;
    } else
        refuse(e, NULL, act, e->gpt2 ? "GPT-2's MLP activation is gelu (OPT's relu)"
                             : e->layernorm ? "with layernorms the MLP's activation is gelu "
                                              "(StarCoder2), glu (StableLM) or squared_relu "
                                              "(Nemotron)"
                                            : "Llama's MLP activation is a glu");
    e->names[HF_UP] = hf_layer_name(up, first, prefix);
    e->names[HF_DOWN] = hf_layer_name(down, first + 2, prefix);
    return 3;
}

/* The block's form (BLOCK_*) in REP's body: GPT-NeoX's parallel block, one residual (the
 * MLP branch) whose shortcut is the attention's residual alone; the shared norm's, one
 * residual of the norm and a residual (the MLP) whose shortcut is the attention alone;
 * else the two branches one after the other. *first: where the MLP's first linear is in
 * the list *mlp holds (NULL where the form has none). */
static int block_form(const Layer *rep, const Layer **mlp, int *first)
{
    const Layer *r = rep->n_body == 1 && rep->body[0]->op == OP_RESIDUAL ? rep->body[0] : NULL;
    const Layer *in = r && !r->n_shortcut && r->n_body == 2 ? r->body[1] : NULL;
    *first = 1;
    if (r && r->n_shortcut == 1 && r->shortcut[0]->op == OP_RESIDUAL) {
        *mlp = r;
        return BLOCK_PARALLEL;
    }
    if (in && in->op == OP_RESIDUAL && in->n_shortcut == 1 && in->shortcut[0]->op == OP_ATTENTION) {
        *mlp = in;
        *first = 0;
        return BLOCK_SHARED_NORM;
    }
    *mlp = rep->n_body > 1 ? rep->body[1] : NULL;
    return BLOCK_SEQUENTIAL;
}

/* The shared norm's block: [norm, residual [MLP] with the attention as its shortcut] */
static void shared_norm_block(Ex *e, const Layer *r)
{
    const Layer *in = r->body[1], *att = in->shortcut[0];
    char *p = r->name ? xasprintf("%s.", r->name) : xstrdup("");
    char *pi = in->name ? xasprintf("%s%s.", p, in->name) : xstrdup(p);
    e->names[HF_NORM1] = norm(e, r->body[0], 0, p);
    attention(e, att);
    e->names[HF_ATTN] = hf_layer_name(att, 0, xasprintf("%sshortcut.", pi));
    if (in->n_body != 3)
        refuse(e, xasprintf("%s.body", in->path), NULL, "the MLP holds a linear, the "
               "activation and a linear");
    mlp(e, in, 0, pi);
}

/* Residual branch R: [norm, attention] (k 0) or [norm, MLP] (k 1), its layers named
 * under PREFIX and R's name; a shortcut only where SHORTCUT (the parallel block's) */
static void branch(Ex *e, const Layer *r, int k, const char *prefix, int shortcut)
{
    if (r->op != OP_RESIDUAL || r->n_shortcut != shortcut)
        refuse(e, NULL, r, shortcut ? "a residual branch with the attention's as its shortcut "
                                      "expected here"
                                    : "a residual branch without shortcut expected here");
    char *p = r->name ? xasprintf("%s%s.", prefix, r->name) : xstrdup(prefix);
    int pre = !e->post_only;   /* OLMo 2's branches start with the attention, the MLP */
    if (r->n_body < 2)
        refuse(e, xasprintf("%s.body", r->path), NULL, pre ? "a branch starts with a norm"
                                                           : "a branch ends with a norm");
    if (pre)
        e->names[k ? HF_NORM2 : HF_NORM1] = norm(e, r->body[0], 0, p);
    if (k == 0) {
        branch_end(e, r, pre + 1, HF_POST1, p);   /* first: the attention's checks ask */
        attention(e, r->body[pre]);
        e->names[HF_ATTN] = hf_layer_name(r->body[pre], pre, p);
    } else {
        int n = mlp(e, r, pre, p);
        branch_end(e, r, pre + n, HF_POST2, p);
    }
}

/* The repeat's body: a residual [norm, attention], then a residual [norm, MLP]; or
 * GPT-NeoX's parallel block, x + attn(ln1(x)) + mlp(ln2(x)): a residual [norm, MLP]
 * whose shortcut is a residual [norm, attention]. */
static void blocks(Ex *e, const Layer *rep)
{
    e->d.L = rep->count;
    e->rep = rep->name ? xasprintf("%s.", rep->name) : xstrdup("");
    if (e->block == BLOCK_SHARED_NORM) {
        shared_norm_block(e, rep->body[0]);
        return;
    }
    if (e->block == BLOCK_PARALLEL) {
        const Layer *r = rep->body[0];
        char *outer = r->name ? xasprintf("%s.", r->name) : xstrdup("");
        branch(e, r->shortcut[0], 0, xasprintf("%sshortcut.", outer), 0);
        branch(e, r, 1, "", 1);
        return;
    }
    if (rep->n_body != 2)
        refuse(e, NULL, rep, "a block holds two residual branches (attention, MLP), or GPT-NeoX's "
                             "parallel block, nothing else");
    for (int k = 0; k < 2; k++)
        branch(e, rep->body[k], k, "", 0);
}

/* 1 / X in the fewest digits whose inverse is X again (the config's divisor for a scale
 * layer's factor, which the import takes back as 1 / divisor) */
static double inverse(double x)
{
    char s[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(s, sizeof s, "%.*g", prec, 1.0 / x);
        if (1.0 / strtod(s, NULL) == x)
            return strtod(s, NULL);
    }
    return 1.0 / x;
}

/* The n layers after the head: none, Gemma 2's soft-cap of the logits (scale by
 * 1 / cap, tanh, scale by cap) or Granite's logits_scaling (scale by its inverse). */
static void after_head(Ex *e, Layer *const *ls, int n)
{
    if (n == 3 && ls[0]->op == OP_SCALE && ls[1]->op == OP_TANH && ls[2]->op == OP_SCALE &&
        ls[2]->by > 0 && (float)ls[0]->by == (float)(1.0 / ls[2]->by))
        e->final_cap = ls[2]->by;
    else if (n == 1 && ls[0]->op == OP_SCALE && ls[0]->by > 0)
        e->logits_div = inverse(ls[0]->by), e->logit_mult = ls[0]->by;
    else if (n)
        refuse(e, NULL, ls[0], "after the blocks come the final norm and the head, then only "
                               "Gemma 2's soft-cap of the logits (scale by 1 / cap, tanh, scale by "
                               "cap) or Granite's scale");
    if (e->final_cap && !gemma2(e))
        refuse(e, NULL, ls[0], "a soft-cap of the logits: only Gemma 2 (a norm after each "
                               "branch, no qk_norm) has one");
    if (e->logits_div && e->gemma)
        refuse(e, NULL, ls[0], "a scale after the head: Gemma has none (Granite has one)");
}

/* Granite has Llama's attention and nothing else of the other families' */
static void granite_only(Ex *e)
{
    if (granite(e) && (e->window || e->d.qk_norm || e->d.bias == HF_BIAS_QKV || e->nope_every ||
                       e->att_softcap || e->post_norms || e->global_every))
        refuse(e, "$.model.layers", NULL, "Granite's factors (the scales after the embedding, "
               "closing the branches or after the head; the attention's scale) come with "
               "Llama's layers alone: no window, qk_norm, bias \"qkv\", interleave, softcap or "
               "norm closing a branch");
}

/* What tells the families apart, read from the repeat REP before its layers are: the
 * norms' kind and parameters (its first branch's first layer), the block's form, the
 * MLP's activation and biases, and HEAD_BIAS (the head's; a CLASSIFIER's has no language
 * model's head: there a partial rope stands for it). */
static void read_ahead(Ex *e, const Layer *rep, int head_bias, int classifier)
{
    const Layer *b = rep->n_body ? rep->body[0] : NULL;
    const Layer *first_norm = b && b->n_body ? b->body[0] : NULL;
    /* OLMo 2's first branch starts with the attention: its norm closes it */
    e->post_only = !e->gpt2 && first_norm && first_norm->op == OP_ATTENTION;
    if (e->post_only)
        first_norm = b->n_body > 1 ? b->body[1] : NULL;
    e->layernorm = e->gpt2 || (first_norm && first_norm->op == OP_LAYERNORM);
    e->ln_params = e->layernorm && first_norm ? ln_kind(first_norm) : LN_FULL;
    const Layer *m = NULL;
    int first = 1;
    e->block = block_form(rep, &m, &first);
    if (e->post_only)   /* no norm before the MLP */
        first = 0;
    if (e->gpt2 && e->block != BLOCK_SEQUENTIAL)
        refuse(e, NULL, rep, "GPT-2's blocks (learned positions) run the attention, then the MLP");
    e->mlp = m && m->n_body > first + 1 ? m->body[first + 1]->op : -1;
    if (m && m->n_body > first && m->body[first]->op == OP_MOE) {
        const Layer *x = m->body[first];
        e->mlp = OP_MOE;
        e->d.E = x->experts;
        e->top_k = x->top_k;
        e->norm_topk = x->norm_topk;
        e->aux_loss = x->aux_loss;
        e->d.SFF = x->shared;
    }
    e->d.mlp_bias = m && m->n_body > first && m->body[first]->bias;
    e->head_bias = head_bias;
    if (e->block == BLOCK_SHARED_NORM) {   /* Phi's attention is biased, GPT-J's not */
        const Layer *att = rep->body[0]->body[1]->shortcut[0];
        e->d.bias = !att->bias ? HF_BIAS_NONE : att->bias_qkv ? HF_BIAS_QKV
                  : att->bias_proj ? HF_BIAS_PROJ : HF_BIAS_ALL;
        /* a classifier has no language model's head, whose bias tells Phi and GPT-J from
         * Falcon: their partial rope does (Falcon's turns whole heads) */
        if (classifier)
            e->head_bias = att->rope.dims || att->il.rope.dims;
    }
    if (e->block != BLOCK_SEQUENTIAL && !neox(e) && !falcon(e) && !phi(e) && !gptj(e) &&
        !cohere(e))
        refuse(e, NULL, rep, "the branches in parallel: only GPT-NeoX, Falcon, Phi (layernorms, a "
                             "gelu MLP) and Cohere (layernorms without bias, a gated MLP) have "
                             "them");
    if (e->ln_params != LN_FULL && !olmo(e) && !cohere(e))
        refuse(e, NULL, first_norm, "a layernorm without bias: Cohere's (the branches in "
                                    "parallel off it, a gated MLP); without weight and bias: "
                                    "OLMo's (Llama's layers)");
    e->d.rope_pairs_adjacent = cohere(e) || gptj(e);
}

/* What the families allow of the model as a whole, once its layers are read */
static void whole_model(Ex *e)
{
    granite_only(e);
    if (e->longrope && (e->layernorm || e->gemma || e->embed_mult || e->residual_mult ||
                        e->logits_div || e->final_cap))
        refuse(e, "$.model.layers", NULL, "longrope comes with Phi-3's layers alone: rmsnorms, "
               "no scale layer or soft-cap");
    int after = e->embed_mult || (e->logits_div && !cohere(e)) || e->final_cap;
    if (e->layernorm && !e->gpt2 && after)
        refuse(e, "$.model.layers", NULL, "the layernorm families without learned positions "
               "have no scale after the embedding nor anything after the head but Cohere's "
               "logit_scale");
    if (glm(e) && (e->embed_mult || e->residual_mult || e->logits_div || e->final_cap ||
                   e->post_norms))
        refuse(e, "$.model.layers", NULL, "a partial rope on rmsnorms is GLM's, which has no "
               "scale layer, soft-cap or norm closing a branch");
    e->d.rope_pairs_adjacent |= glm(e);   /* GLM's rotated pairs: (2i, 2i + 1) */
    if (olmo2(e) && (e->layernorm || e->embed_mult || e->logits_div || e->final_cap))
        refuse(e, "$.model.layers", NULL, "OLMo 2 (a norm after each branch, none before it) "
               "has rmsnorms and no scale layer or soft-cap");
    if (e->mlp == OP_MOE && (((e->embed_mult || e->residual_mult || e->logits_div) &&
                              !granitemoe(e)) || e->final_cap || e->post_norms ||
                             e->nope_every || e->global_every))
        refuse(e, "$.model.layers", NULL, "a mixture of experts comes with Mixtral's, OLMoE's, "
               "Qwen's and Granite's layers alone: no soft-cap, norm closing a branch or layers "
               "without window or rope, and scale layers only as Granite-MoE's factors (no "
               "qk_norm or shared expert)");
    if (!e->gpt2 && e->d.qk_norm == QK_NORM_HEAD && e->eps != 1e-6)
        refuse(e, "$.model.layers", NULL, "qk_norm (Qwen3) with rmsnorm eps other than 1e-6: "
                                          "Qwen3's config holds one eps for all its norms");
}

/* A sequence classifier's head after LAST (last_token), layers ls[0, n) (the spec's from
 * K on): the score, a linear without bias; or a reward model's (LAST's segments 2: a pair
 * of texts a row): a score of one output, then a flatten, the two texts' rewards the
 * logits of which one is chosen */
static void seq_head(Ex *e, const Spec *s, const Layer *last, Layer *const *ls, int n, int k)
{
    int reward = last->segments == 2;
    if (last->segments > 2)
        refuse(e, NULL, last, "last_token with segments 1 (a sequence classifier) or 2 (a reward "
                              "model over a pair of texts)");
    if (n < 1 || ls[0]->op != OP_LINEAR || ls[0]->bias || ls[0]->tie || n > 1 + reward ||
        (reward && (ls[0]->out != 1 || n < 2 || ls[1]->op != OP_FLATTEN)))
        refuse(e, xasprintf("$.model.layers[%d]", k), n ? ls[n > 1 && !reward ? 1 : 0] : NULL,
               reward ? "a reward model's score, a linear of one output without bias, then a "
                        "flatten and nothing after it"
                      : "a sequence classifier's score, a linear without bias, and nothing after "
                        "it");
    e->d.score = e->cls.K = ls[0]->out;
    e->names[HF_HEAD] = hf_layer_name(ls[0], k, "");
    if (!reward)
        hf_image_labels_from_spec(s, &e->cls);
}

static const char *const *family(const Ex *e);

/* Whether L, after the final norm, is a token classifier's head: a linear of other than
 * the vocabulary's outputs */
static int token_head(const Ex *e, const Layer *l)
{
    return l && l->op == OP_LINEAR && !l->tie && l->out != e->d.V;
}

/* A token classifier's head L (layer k), the last layer: transformers' classifier (or
 * score) with a bias, a class for each token; its name there is the family's
 * (classify_tokens) */
static void token_cls(Ex *e, const Spec *s, const Layer *l, int k, int n)
{
    if (k + 1 < n)
        refuse(e, NULL, s->layers[k + 1], "after a token classifier's head (a linear of other "
                                          "than the vocabulary's outputs) comes nothing");
    if (!l->bias)
        refuse(e, NULL, l, "a token classifier's head has a bias (transformers' has)");
    e->d.score = e->cls.K = l->out;
    e->d.score_bias = 1;
    e->names[HF_HEAD] = hf_layer_name(l, k, "");
    hf_image_labels_from_spec(s, &e->cls);
}

/* The family's token classifier's head name, or exit 1 where transformers has none */
static void classify_tokens(Ex *e)
{
    const char *const *fam = family(e);
    e->d.score_name = hf_token_head(fam[0]);
    if (!e->d.score_name)
        error_at(e->file, "$.model.layers", "a token classifier of %s, which transformers has "
                 "none of", fam[0]);
}

/* The model's layers: embedding, [pos_embedding], repeat, norm, head linear[, Gemma 2's
 * soft-cap], or norm, last_token and a score (a sequence classifier), or norm and a
 * token classifier's head. */
static void match(Ex *e, const Spec *s)
{
    Layer *const *ls = s->layers;
    int n = s->n_layers, i = 0;
    const Layer *l = ls[0];
    if (l->op != OP_EMBEDDING)
        refuse(e, NULL, l, "a language model starts with its token embedding");
    e->d.V = l->vocab;
    e->d.D = l->dim;
    e->names[HF_EMBED] = hf_layer_name(l, 0, "");
    l = at(ls, n, ++i);
    if (l && l->op == OP_SCALE) {   /* Gemma's sqrt(d), or Granite's embedding_multiplier */
        e->embed_mult = l->by;
        e->gemma = (float)l->by == (float)sqrt((double)e->d.D);
        if (!(l->by > 0))
            refuse(e, NULL, l, "a scale by a number > 0 (Granite's embedding_multiplier) or by "
                               "sqrt(d) (Gemma's) expected");
        l = at(ls, n, ++i);
    }
    e->gpt2 = !e->embed_mult && l && l->op == OP_POS_EMBEDDING;
    if (e->gpt2) {
        e->d.max_pos = l->max_len;
        e->names[HF_POS] = hf_layer_name(l, i, "");
        l = at(ls, n, ++i);
    }
    if (!l || l->op != OP_REPEAT)
        refuse(e, xasprintf("$.model.layers[%d]", i), l, "the blocks are a repeat here");
    const Layer *head = i + 2 < n ? ls[i + 2] : NULL;
    int tokens = token_head(e, head);
    read_ahead(e, l, head && head->op == OP_LINEAR && head->bias && !tokens,
               tokens || (head && head->op == OP_LAST_TOKEN));
    blocks(e, l);
    if (i + 3 > n)
        refuse(e, "$.model.layers", NULL, "after the blocks come the final norm and the head");
    e->names[HF_FINAL] = norm(e, ls[i + 1], i + 1, "");
    l = ls[i + 2];
    if (tokens) {
        token_cls(e, s, l, i + 2, n);
        whole_model(e);
        classify_tokens(e);
        e->T = s->inputs[ls[0]->input ? find_model_input(s, ls[0]->input) : 0].shape[0];
        return;
    }
    if (l->op == OP_LAST_TOKEN) {   /* a sequence classifier */
        seq_head(e, s, l, ls + i + 3, n - i - 3, i + 3);
        whole_model(e);
        e->T = s->inputs[ls[0]->input ? find_model_input(s, ls[0]->input) : 0].shape[0] /
               l->segments;
        return;
    }
    if (l->op != OP_LINEAR || (l->bias && !phi(e) && !gptj(e)))
        refuse(e, NULL, l, "the head is a linear without bias (Phi's and GPT-J's have one)");
    e->d.tie = l->tie != NULL;
    if (e->d.tie && strcmp(l->tie, ls[0]->name ? ls[0]->name : ""))
        refuse(e, NULL, l, "a head tied to another layer than the token embedding");
    e->names[HF_HEAD] = hf_layer_name(l, i + 2, "");
    after_head(e, ls + i + 3, n - i - 3);
    whole_model(e);
    /* T: the length of the input the embedding reads (the first unless it names one) */
    e->T = s->inputs[ls[0]->input ? find_model_input(s, ls[0]->input) : 0].shape[0] /
           (s->loss == LOSS_DPO ? 2 : 1);   /* (dpo's rows: a pair of texts) */
}

/* ---- the weights ----------------------------------------------------------------- */

static const HfFamily *family_tables(const Ex *e)
{
    if (falcon(e))
        return e->block == BLOCK_SHARED_NORM ? &hf_falcon : &hf_falcon_new;
    return opt(e) ? &hf_opt : neo(e) ? &hf_neo : bigcode(e) ? &hf_bigcode
         : e->gpt2 ? &hf_gpt2 : phi(e) ? &hf_phi
         : olmo(e) ? &hf_olmo : cohere(e) ? &hf_cohere : gptj(e) ? &hf_gptj
         : mixtral(e) ? &hf_mixtral : olmoe(e) ? &hf_olmoe : qwen3_moe(e) ? &hf_qwen3_moe
         : qwen2_moe(e) ? &hf_qwen2_moe : granitemoe(e) ? &hf_granitemoe
         : stablelm(e) ? &hf_stablelm
         : nemotron(e) ? &hf_nemotron : neox(e) ? &hf_neox : e->layernorm ? &hf_starcoder2
         : e->longrope ? &hf_phi3 : olmo2(e) ? &hf_olmo2 : glm(e) ? &hf_glm
         : e->gemma && e->post_norms ? &hf_gemma3
         : e->gemma ? &hf_gemma : &hf_llama;
}

/* HF tensor THEIRS: rows [row0, row0 + rows) of our OURS (shape [d0, d1], d1 0 for a
 * vector), or with tr all of it transposed; with E, shaped [E, rows / E, d1] (an
 * expert's after another's, HF_STACKED). */
static void add(Ex *e, const char *theirs, const char *ours, int64_t d0, int64_t d1, int64_t row0,
                int64_t rows, int tr, int64_t E)
{
    HfTensor *t = hf_find(&e->w, ours);
    if (!t)
        error_input("%s: no tensor '%s' (the spec's model has it)", e->w.paths[0], ours);
    int experts = t->rank == 3;   /* [E, rows, cols]: the experts' rows one after another */
    int64_t t0 = experts ? t->shape[0] * t->shape[1] : t->shape[0];
    if (t->rank - experts != (d1 ? 2 : 1) || t0 != d0 || (d1 && t->shape[t->rank - 1] != d1))
        error_input("%s: tensor '%s' does not have the shape the spec gives it ([%lld%s%.0lld])",
                    e->w.paths[0], ours, (long long)d0, d1 ? ", " : "", (long long)d1);
    t->used = 1;
    int k = e->out.n;
    e->src = realloc(e->src, (size_t)(k + 1) * sizeof *e->src);
    e->row0 = realloc(e->row0, (size_t)(k + 1) * sizeof *e->row0);
    e->tr = realloc(e->tr, (size_t)(k + 1) * sizeof *e->tr);
    e->offset = realloc(e->offset, (size_t)(k + 1) * sizeof *e->offset);
    e->reorder = realloc(e->reorder, (size_t)(k + 1) * sizeof *e->reorder);
    e->lead = realloc(e->lead, (size_t)(k + 1) * sizeof *e->lead);
    if (!e->src || !e->row0 || !e->tr || !e->offset || !e->reorder || !e->lead)
        die("out of memory");
    e->src[k] = t;
    e->row0[k] = row0;
    e->tr[k] = tr;
    e->offset[k] = 0;
    e->reorder[k] = NULL;
    e->lead[k] = 0;
    int64_t shape[3] = {tr ? d1 : rows, tr ? d0 : d1};
    if (E) {
        shape[0] = E, shape[1] = rows / E, shape[2] = d1;
        hf_out_add(&e->out, theirs, 3, shape);
        return;
    }
    hf_out_add(&e->out, theirs, d1 ? 2 : 1, shape);
}

/* hf_walk's visit: the transformers tensors of one of our parameters. */
static void place(void *ctx, const HfMap *m, int64_t block, int n, const HfPart *parts)
{
    Ex *e = ctx;
    char *ours = block < 0 ? xasprintf("%s.%s", e->names[m->slot], m->ours)
                           : xasprintf("%s%lld.%s.%s", e->rep, (long long)block,
                                       e->names[m->slot], m->ours);
    int64_t d0 = 0, d1 = parts[0].rank > 1 ? parts[0].shape[1] : 0, row0 = 0;
    for (int k = 0; k < n; k++)
        d0 += parts[k].shape[0];
    if (m->form == HF_TRANSPOSED) {   /* ours [out, in], theirs [in, out] */
        d0 = parts[0].shape[1];
        d1 = parts[0].shape[0];
    }
    int64_t E = m->form == HF_STACKED ? parts[0].shape[0] : 0;
    if (E) {   /* theirs [E, rows, cols]: ours whole */
        d0 = E * parts[0].shape[1];
        d1 = parts[0].shape[2];
        add(e, parts[0].name, ours, d0, d1, 0, d0, 0, E);
        return;
    }
    int64_t pad = m->slot == HF_POS ? family_tables(e)->pos_pad : 0;   /* OPT's */
    if (pad) {
        add(e, parts[0].name, ours, d0 - pad, d1, 0, parts[0].shape[0], 0, 0);
        e->lead[e->out.n - 1] = pad * d1;
        return;
    }
    for (int k = 0; k < n; k++) {
        add(e, parts[k].name, ours, d0, d1, row0, parts[k].shape[0], m->form == HF_TRANSPOSED, 0);
        e->reorder[e->out.n - 1] = hf_reordered(family_tables(e), &e->d, m) ? m : NULL;
        row0 += parts[k].shape[0];
    }
    e->offset[e->out.n - 1] = hf_offset(family_tables(e), m);   /* a norm: one part */
}

/* The adapter `part` of weight t, checked against the spec's rank (hf_lora_adapter) */
static HfTensor *adapter(Ex *e, const HfTensor *t, const char *part)
{
    return hf_lora_adapter(&e->w, t, part, e->lora_rank);
}

/* Weight t (x, [out, in]) with its train.lora adapter merged (hf_lora_merge) */
static void merge_lora(const Ex *e, const HfTensor *t, float *x)
{
    if (!e->adapter)
        hf_lora_merge((HfWeights *)&e->w, t, x, e->lora_rank, e->lora_scale);
}

static void plan_tensors(Ex *e)
{
    const HfFamily *f = family_tables(e);
    hf_walk(f, f->prefix, &e->d, place, e);
    for (int i = 0; i < e->w.n; i++) {
        HfTensor *t = &e->w.t[i];
        if (t->used && e->lora_rank && !hf_lora_part(t->name)) {   /* its adapters go with it */
            HfTensor *a = adapter(e, t, "lora_A"), *b = adapter(e, t, "lora_B");
            if (!a != !b)
                error_input("%s: '%s' has a LoRA adapter's %s and not its %s", e->w.paths[0],
                            t->name, a ? "lora_A" : "lora_B", a ? "lora_B" : "lora_A");
            if (a)
                a->used = b->used = 1;
        }
    }
    for (int i = 0; i < e->w.n; i++)
        if (!e->w.t[i].used && hf_lora_part(e->w.t[i].name) && !e->lora_rank)
            error_input("%s: tensor '%s' is a LoRA adapter and the spec has no train.lora: give "
                        "export the spec the run trained with (its adapters are merged into "
                        "their weights)", e->w.paths[0], e->w.t[i].name);
        else if (!e->w.t[i].used)
            error_input("%s: tensor '%s' is no parameter of the spec's model", e->w.paths[0],
                        e->w.t[i].name);
}

static void write_tensors(const Ex *e, const char *path)
{
    rt_st_out *o = hf_out_open(&e->out, path);
    if (!o)
        cannot_write("export", path);
    const HfTensor *held = NULL;   /* x's tensor, read once for all its parts (an
                                      expert's after another's), unless reordered */
    float *x = NULL;
    for (int k = 0; k < e->out.n; k++) {
        const HfTensor *t = e->src[k];
        if (t != held || e->reorder[k]) {
            free(x);
            x = hf_read(&e->w, t);
            merge_lora(e, t, x);
            held = e->reorder[k] ? NULL : t;
        }
        const rt_param *p = &e->out.p[k];
        if (e->tr[k]) {   /* ours [d0, d1] -> theirs [d1, d0] */
            float *y = malloc((size_t)t->numel * sizeof *y);
            if (!y)
                die("out of memory");
            hf_transpose(y, x, t->shape[0], t->shape[1]);
            rt_st_put(o, y, p->numel);
            free(y);
        } else {
            int64_t cols = t->rank > 1 ? t->shape[t->rank - 1] : 1;
            if (e->reorder[k])   /* the whole parameter, then the part */
                hf_reorder(family_tables(e), &e->d, e->reorder[k], x, cols, 1);
            float *rows = x + e->row0[k] * cols;
            int64_t n = p->numel - e->lead[k];
            for (int64_t i = 0; e->offset[k] != 0 && i < n; i++)
                rows[i] -= e->offset[k];
            if (e->lead[k]) {   /* OPT's positions: zero rows first */
                float *zeros = xcalloc((size_t)e->lead[k], sizeof *zeros);
                rt_st_put(o, zeros, e->lead[k]);
                free(zeros);
            }
            rt_st_put(o, rows, n);
        }
    }
    free(x);
    if (rt_st_close(o) != 0)
        cannot_write("export", path);
}

/* ---- export --adapter: PEFT's adapter files ------------------------------------------ */

/* Output tensor k's module ("model.layers.0.self_attn.q_proj"), when its trainc weight
 * has an adapter; else NULL */
static char *adapted_module(Ex *e, int k)
{
    const HfTensor *t = e->src[k];
    const char *theirs = e->out.p[k].name;
    size_t n = strlen(theirs);
    if (t->rank != 2 || e->lead[k] || e->out.p[k].rank != 2 || n < 8 ||
        strcmp(theirs + n - 7, ".weight") || !adapter(e, t, "lora_A"))
        return NULL;
    return xasprintf("%.*s", (int)(n - 7), theirs);
}

/* export --adapter's tensors: for each transformers weight made from an adapted one
 * (output tensor k[i]), PEFT's lora_A (A whole: a fused weight's parts share it) and
 * lora_B (the rows of B that make that weight, in transformers' order); mods, the
 * modules (a JSON array) */
typedef struct AdapterPlan {
    HfOut o;
    int *k, n;
    cJSON *mods;
} AdapterPlan;

static void plan_adapters(Ex *e, AdapterPlan *p)
{
    int64_t r = e->lora_rank;
    p->k = xcalloc((size_t)e->out.n + 1, sizeof *p->k);
    p->mods = cJSON_CreateArray();
    for (int k = 0; k < e->out.n; k++) {
        char *mod = adapted_module(e, k);
        if (!mod)
            continue;
        int64_t rows = e->tr[k] ? e->src[k]->shape[0] : e->out.p[k].shape[0];
        hf_out_add(&p->o, xasprintf("base_model.model.%s.lora_A.weight", mod), 2,
                   (int64_t[]){r, e->src[k]->shape[1]});
        hf_out_add(&p->o, xasprintf("base_model.model.%s.lora_B.weight", mod), 2,
                   (int64_t[]){rows, r});
        cJSON_AddItemToArray(p->mods, cJSON_CreateString(mod));
        p->k[p->n++] = k;
        free(mod);
    }
}

/* DIR/adapter_model.safetensors, as plan_adapters planned it */
static void write_adapter_tensors(Ex *e, const AdapterPlan *p, const char *path)
{
    int64_t r = e->lora_rank;
    rt_st_out *w = hf_out_open(&p->o, path);
    if (!w)
        cannot_write("export", path);
    for (int i = 0; i < p->n; i++) {
        int k = p->k[i];
        const HfTensor *t = e->src[k];
        float *a = hf_read(&e->w, adapter(e, t, "lora_A")), *b = hf_read(&e->w, adapter(e, t, "lora_B"));
        if (e->reorder[k])   /* B's rows as the weight's (q and k by transformers' rope pairs) */
            hf_reorder(family_tables(e), &e->d, e->reorder[k], b, r, 1);
        int64_t rows = e->tr[k] ? t->shape[0] : e->out.p[k].shape[0];
        rt_st_put(w, a, r * t->shape[1]);
        rt_st_put(w, b + (e->tr[k] ? 0 : e->row0[k]) * r, rows * r);
        free(a);
        free(b);
    }
    if (rt_st_close(w) != 0)
        cannot_write("export", path);
}

/* DIR/adapter_config.json: PEFT's LoraConfig for the modules written */
static char *adapter_config(const Ex *e, cJSON *mods, const rt_train_config *t)
{
    int tr = 0;
    for (int k = 0; k < e->out.n; k++)
        tr |= e->tr[k];
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "peft_type", "LORA");
    cJSON_AddStringToObject(c, "task_type", "CAUSAL_LM");
    cJSON_AddNumberToObject(c, "r", (double)t->lora_rank);
    cJSON_AddNumberToObject(c, "lora_alpha", t->lora_alpha);
    cJSON_AddNumberToObject(c, "lora_dropout", t->lora_dropout);
    cJSON_AddBoolToObject(c, "use_rslora", t->lora_rslora);
    cJSON_AddItemToObject(c, "target_modules", mods);
    cJSON_AddBoolToObject(c, "fan_in_fan_out", tr);   /* GPT-2's Conv1D weights */
    cJSON_AddStringToObject(c, "bias", "none");
    cJSON_AddNullToObject(c, "base_model_name_or_path");
    cJSON_AddBoolToObject(c, "inference_mode", 1);
    char *text = hf_json_text(c);
    cJSON_Delete(c);
    return text;
}

/* export --adapter's checks: a lora run's weights, nothing of the model's own trained */
static void check_adapter_export(const Spec *s)
{
    if (!s->train.has_lora)
        error_at(s->train_file, "$.train.lora", "export --adapter writes a lora run's adapters: "
                 "give the spec the run trained with (this one has no lora)");
    if (s->train.lora_train[0])
        error_at(s->train_file, "$.train.lora.train", "export --adapter writes the adapters "
                 "alone, and lora.train trained the model's own tensors too: export the merged "
                 "model (without --adapter)");
}

/* ---- config.json and the command ---------------------------------------------------- */

/* A rope's scaling as transformers' rope_scaling: llama3's as 4.43 and later read it,
 * linear's as 4.40 does too (type and a float factor alone). */
static cJSON *rope_scaling(const Rope *rope)
{
    cJSON *r = cJSON_CreateObject();
    if (rope->yarn) {
        const Yarn *y = rope->yarn;
        cJSON_AddStringToObject(r, "rope_type", "yarn");
        cJSON_AddItemToObject(r, "factor", hf_float(y->factor));   /* orig: max_position_embeddings */
        cJSON_AddItemToObject(r, "beta_fast", hf_float(y->beta_fast));
        cJSON_AddItemToObject(r, "beta_slow", hf_float(y->beta_slow));
        if (y->has_attn)
            cJSON_AddItemToObject(r, "attention_factor", hf_float(y->attn));
        return r;
    }
    if (rope->linear) {
        cJSON_AddStringToObject(r, "type", "linear");
        cJSON_AddItemToObject(r, "factor", hf_float(rope->factor));
        return r;
    }
    cJSON_AddStringToObject(r, "rope_type", "llama3");
    cJSON_AddItemToObject(r, "factor", hf_float(rope->factor));
    cJSON_AddItemToObject(r, "low_freq_factor", hf_float(rope->low));
    cJSON_AddItemToObject(r, "high_freq_factor", hf_float(rope->high));
    cJSON_AddNumberToObject(r, "original_max_position_embeddings", rope->orig);
    return r;
}

/* The family the layers make: model_type and architecture. */
static const char *const *family(const Ex *e)
{
    enum { GPT2, QWEN3, MISTRAL, QWEN2, LLAMA, GEMMA, GEMMA2, GEMMA3, SMOLLM3, GRANITE,
           STARCODER2, PHI3, BIGCODE, STABLELM, NEMOTRON, NEOX, PHI, FALCON, OLMO, COHERE, GPTJ,
           OLMO2, GLM, OPT, NEO, COHERE2, MIXTRAL, OLMOE, QWEN3_MOE, QWEN2_MOE, GRANITEMOE };
    static const char *const f[][2] = {
        [GPT2] = {"gpt2", "GPT2LMHeadModel"},         [QWEN3] = {"qwen3", "Qwen3ForCausalLM"},
        [MISTRAL] = {"mistral", "MistralForCausalLM"}, [QWEN2] = {"qwen2", "Qwen2ForCausalLM"},
        [LLAMA] = {"llama", "LlamaForCausalLM"},       [GEMMA] = {"gemma", "GemmaForCausalLM"},
        [GEMMA2] = {"gemma2", "Gemma2ForCausalLM"},     [GEMMA3] = {"gemma3_text", "Gemma3ForCausalLM"},
        [SMOLLM3] = {"smollm3", "SmolLM3ForCausalLM"}, [GRANITE] = {"granite", "GraniteForCausalLM"},
        [STARCODER2] = {"starcoder2", "Starcoder2ForCausalLM"},
        [PHI3] = {"phi3", "Phi3ForCausalLM"},
        [BIGCODE] = {"gpt_bigcode", "GPTBigCodeForCausalLM"},
        [STABLELM] = {"stablelm", "StableLmForCausalLM"},
        [NEMOTRON] = {"nemotron", "NemotronForCausalLM"},
        [NEOX] = {"gpt_neox", "GPTNeoXForCausalLM"}, [PHI] = {"phi", "PhiForCausalLM"},
        [FALCON] = {"falcon", "FalconForCausalLM"}, [OLMO] = {"olmo", "OlmoForCausalLM"},
        [COHERE] = {"cohere", "CohereForCausalLM"}, [GPTJ] = {"gptj", "GPTJForCausalLM"},
        [OLMO2] = {"olmo2", "Olmo2ForCausalLM"}, [GLM] = {"glm", "GlmForCausalLM"},
        [OPT] = {"opt", "OPTForCausalLM"}, [NEO] = {"gpt_neo", "GPTNeoForCausalLM"},
        [COHERE2] = {"cohere2", "Cohere2ForCausalLM"},
        [MIXTRAL] = {"mixtral", "MixtralForCausalLM"}, [OLMOE] = {"olmoe", "OlmoeForCausalLM"},
        [QWEN3_MOE] = {"qwen3_moe", "Qwen3MoeForCausalLM"},
        [QWEN2_MOE] = {"qwen2_moe", "Qwen2MoeForCausalLM"},
        [GRANITEMOE] = {"granitemoe", "GraniteMoeForCausalLM"}};
    int k = opt(e) ? OPT : neo(e) ? NEO : bigcode(e) ? BIGCODE : e->gpt2 ? GPT2
          : stablelm(e) ? STABLELM : nemotron(e) ? NEMOTRON
          : neox(e) ? NEOX : phi(e) ? PHI : falcon(e) ? FALCON : olmo(e) ? OLMO
          : cohere2(e) ? COHERE2 : cohere(e) ? COHERE : gptj(e) ? GPTJ
          : e->layernorm ? STARCODER2 : mixtral(e) ? MIXTRAL : olmoe(e) ? OLMOE
          : qwen3_moe(e) ? QWEN3_MOE : qwen2_moe(e) ? QWEN2_MOE : granitemoe(e) ? GRANITEMOE
          : e->longrope ? PHI3 : olmo2(e) ? OLMO2 : glm(e) ? GLM
          : gemma2(e) ? GEMMA2 : e->gemma && e->post_norms ? GEMMA3 : e->gemma ? GEMMA
          : granite(e) ? GRANITE : e->nope_every ? SMOLLM3 : e->d.qk_norm ? QWEN3
          : e->window ? MISTRAL : e->d.bias == HF_BIAS_QKV ? QWEN2 : LLAMA;
    return f[k];
}

/* The sizes under GPT-2's names (GPT-J's too), N_POSITIONS the context, its norms' eps,
 * the MLP's activation ACT */
static void gpt2_sizes(cJSON *c, const Ex *e, int64_t n_positions, const char *act)
{
    cJSON_AddNumberToObject(c, "n_embd", (double)e->d.D);
    cJSON_AddNumberToObject(c, "n_layer", (double)e->d.L);
    cJSON_AddNumberToObject(c, "n_head", (double)e->d.H);
    cJSON_AddNumberToObject(c, "n_positions", (double)n_positions);
    cJSON_AddNumberToObject(c, "n_inner", (double)e->d.FF);
    cJSON_AddNumberToObject(c, "layer_norm_epsilon", e->eps);
    cJSON_AddStringToObject(c, "activation_function", act);
}

static void gpt2_keys(cJSON *c, const Ex *e)
{
    gpt2_sizes(c, e, e->d.max_pos, e->act);
    /* trainc's spec has no dropout layer here: none in transformers either */
    cJSON_AddNumberToObject(c, "attn_pdrop", 0);
    cJSON_AddNumberToObject(c, "embd_pdrop", 0);
    cJSON_AddNumberToObject(c, "resid_pdrop", 0);
    if (bigcode(e))
        cJSON_AddTrueToObject(c, "multi_query");
}

/* The sizes, the MLP's width under key FF and the key/value heads under KV (NULL: none,
 * GPT-NeoX's) */
static void sizes(cJSON *c, const Ex *e, const char *ff, const char *kv)
{
    cJSON_AddNumberToObject(c, "hidden_size", (double)e->d.D);
    cJSON_AddNumberToObject(c, ff, (double)e->d.FF);
    cJSON_AddNumberToObject(c, "num_hidden_layers", (double)e->d.L);
    cJSON_AddNumberToObject(c, "num_attention_heads", (double)e->d.H);
    if (kv)
        cJSON_AddNumberToObject(c, kv, (double)e->d.KV);
    cJSON_AddNumberToObject(c, "max_position_embeddings", (double)e->T);
}

/* The sizes in the Llama family's keys (StarCoder2's, StableLM's, Nemotron's, Phi's too) */
static void llama_sizes(cJSON *c, const Ex *e)
{
    sizes(c, e, "intermediate_size", "num_key_value_heads");
}

/* StarCoder2's keys beside the sizes: its norms' eps, the MLP's gelu, rope, the biases
 * (use_bias) and the window (a query sees sliding_window positions, itself included, in
 * transformers 4.50 on; 4.42 to 4.49's eager attention ignores it, 4.40's sees one more) */
static void starcoder2_keys(cJSON *c, const Ex *e)
{
    cJSON_AddNumberToObject(c, "norm_epsilon", e->eps);
    cJSON_AddStringToObject(c, "hidden_act", e->act);
    cJSON_AddNumberToObject(c, "rope_theta", e->theta);
    cJSON_AddBoolToObject(c, "use_bias", e->d.bias == HF_BIAS_ALL);
    if (e->window)
        cJSON_AddNumberToObject(c, "sliding_window", (double)e->window);
    else
        cJSON_AddNullToObject(c, "sliding_window");
}

/* The partial rope's share of a head: dims / hd, nudged up where transformers'
 * int(hd * factor) would come out one short of dims */
static double rotary_factor(const Ex *e)
{
    int64_t hd = hf_head_dim(&e->d), rd = e->d.rope_dims ? e->d.rope_dims : hd;
    double f = (double)rd / (double)hd;
    while ((int64_t)((double)hd * f) < rd)
        f = nextafter(f, 2.0);
    return f;
}

/* Phi's keys beside the sizes (StableLM's too): its norms' eps, the MLP's activation, the
 * rope (its share of each head, linear scaling), no q and k layernorms */
static void phi_keys(cJSON *c, const Ex *e)
{
    cJSON_AddNumberToObject(c, "layer_norm_eps", e->eps);
    cJSON_AddStringToObject(c, "hidden_act", e->act);
    cJSON_AddNumberToObject(c, "rope_theta", e->theta);
    cJSON_AddItemToObject(c, "partial_rotary_factor", hf_float(rotary_factor(e)));
    if (e->scaled)
        cJSON_AddItemToObject(c, "rope_scaling", rope_scaling(&e->scaled->rope));
    cJSON_AddFalseToObject(c, "qk_layernorm");
}

/* StableLM's keys beside the sizes: its norms' eps, the gate's activation, the rope (its
 * share of each head, linear scaling), the biases on q, k and v (use_qkv_bias), neither
 * per-head qk layernorms nor the parallel residual */
static void stablelm_keys(cJSON *c, const Ex *e)
{
    phi_keys(c, e);
    cJSON_AddBoolToObject(c, "use_qkv_bias", e->d.bias == HF_BIAS_QKV);
    cJSON_AddFalseToObject(c, "use_parallel_residual");
}

/* Nemotron's keys beside the sizes: its norms' eps, relu2, the rope (its share of each
 * head), head_dim, the biases (attention_bias on q, k, v and o; mlp_bias) */
static void nemotron_keys(cJSON *c, const Ex *e)
{
    cJSON_AddNumberToObject(c, "norm_eps", e->eps);
    cJSON_AddStringToObject(c, "hidden_act", "relu2");
    cJSON_AddNumberToObject(c, "rope_theta", e->theta);
    cJSON_AddItemToObject(c, "partial_rotary_factor", hf_float(rotary_factor(e)));
    cJSON_AddNumberToObject(c, "head_dim", (double)hf_head_dim(&e->d));
    cJSON_AddBoolToObject(c, "attention_bias", e->d.bias == HF_BIAS_ALL);
    cJSON_AddBoolToObject(c, "mlp_bias", e->d.mlp_bias);
}

/* GPT-NeoX's keys: the sizes (one key/value head per head), its norms' eps, the gelu,
 * the rope (rotary_pct its share of each head, rotary_emb_base, linear scaling), the
 * blocks' form, attention_bias (the MLP's linears are always biased) */
static void neox_keys(cJSON *c, const Ex *e)
{
    sizes(c, e, "intermediate_size", NULL);
    cJSON_AddNumberToObject(c, "layer_norm_eps", e->eps);
    cJSON_AddStringToObject(c, "hidden_act", e->act);
    cJSON_AddItemToObject(c, "rotary_pct", hf_float(rotary_factor(e)));
    cJSON_AddNumberToObject(c, "rotary_emb_base", e->theta);
    if (e->scaled)
        cJSON_AddItemToObject(c, "rope_scaling", rope_scaling(&e->scaled->rope));
    cJSON_AddBoolToObject(c, "use_parallel_residual", e->block == BLOCK_PARALLEL);
    cJSON_AddBoolToObject(c, "attention_bias", e->d.bias == HF_BIAS_ALL);
}

/* Falcon's keys: the sizes, its norms' eps, the gelu, the rope, `bias`, the block's
 * form: off one norm the old architecture (multi_query for one key/value head, else one
 * per head) or, with key/value head groups, the new one with num_ln_in_parallel_attn 1
 * (transformers 4.44 on); a norm per branch the new one */
static void falcon_keys(cJSON *c, const Ex *e)
{
    int groups = e->d.KV != 1 && e->d.KV != e->d.H;
    int new = e->block == BLOCK_PARALLEL || groups;
    sizes(c, e, "ffn_hidden_size", "num_kv_heads");
    cJSON_AddNumberToObject(c, "layer_norm_epsilon", e->eps);
    cJSON_AddStringToObject(c, "activation", e->act);
    cJSON_AddNumberToObject(c, "rope_theta", e->theta);
    if (e->scaled)
        cJSON_AddItemToObject(c, "rope_scaling", rope_scaling(&e->scaled->rope));
    cJSON_AddBoolToObject(c, "bias", e->d.bias == HF_BIAS_ALL);
    cJSON_AddFalseToObject(c, "alibi");
    cJSON_AddBoolToObject(c, "new_decoder_architecture", new);
    cJSON_AddBoolToObject(c, "multi_query", !new && e->d.KV == 1);
    cJSON_AddTrueToObject(c, "parallel_attn");
    if (new)
        cJSON_AddNumberToObject(c, "num_ln_in_parallel_attn", e->block == BLOCK_PARALLEL ? 2 : 1);
}

/* OPT's keys: the sizes (ffn_dim), the relu, enable_bias; the pre-norm layout with
 * the embedding hidden_size wide; no dropout or layerdrop (its layernorms' eps is
 * torch's 1e-5 and in no key) */
static void opt_keys(cJSON *c, const Ex *e)
{
    if (e->eps != 1e-5)
        refuse(e, "$.model.layers", NULL, xasprintf("layernorm eps %g: OPT's are 1e-5", e->eps));
    if (e->ln_params != LN_FULL)
        refuse(e, "$.model.layers", NULL, "OPT's layernorms have weights and biases");
    sizes(c, e, "ffn_dim", NULL);
    cJSON_ReplaceItemInObjectCaseSensitive(c, "max_position_embeddings",
                                           cJSON_CreateNumber((double)e->d.max_pos));
    cJSON_AddStringToObject(c, "activation_function", "relu");
    cJSON_AddBoolToObject(c, "enable_bias", e->d.bias == HF_BIAS_ALL);
    cJSON_AddTrueToObject(c, "do_layer_norm_before");
    cJSON_AddNumberToObject(c, "word_embed_proj_dim", (double)e->d.D);
    cJSON_AddTrueToObject(c, "layer_norm_elementwise_affine");
    cJSON_AddNumberToObject(c, "dropout", 0);
    cJSON_AddNumberToObject(c, "attention_dropout", 0);
    cJSON_AddNumberToObject(c, "layerdrop", 0);
}

/* GPT-Neo's keys: the sizes, its norms' eps, the gelu, the layers' kinds (the list, and
 * as attention_types one pattern of all of them) and the local ones' window; no
 * dropout */
static void neo_keys(cJSON *c, const Ex *e)
{
    cJSON_AddNumberToObject(c, "hidden_size", (double)e->d.D);
    cJSON_AddNumberToObject(c, "num_layers", (double)e->d.L);
    cJSON_AddNumberToObject(c, "num_heads", (double)e->d.H);
    cJSON_AddNumberToObject(c, "intermediate_size", (double)e->d.FF);
    cJSON_AddNumberToObject(c, "max_position_embeddings", (double)e->d.max_pos);
    cJSON_AddNumberToObject(c, "window_size", (double)(e->window ? e->window : 256));
    cJSON *kinds = cJSON_CreateArray();
    for (int64_t i = 0; i < e->d.L; i++)
        cJSON_AddItemToArray(kinds, cJSON_CreateString(e->neo_local[i] ? "local" : "global"));
    cJSON *types = cJSON_AddArrayToObject(c, "attention_types"), *t = cJSON_CreateArray();
    cJSON_AddItemToArray(t, cJSON_Duplicate(kinds, 1));
    cJSON_AddItemToArray(t, cJSON_CreateNumber(1));
    cJSON_AddItemToArray(types, t);
    cJSON_AddItemToObject(c, "attention_layers", kinds);
    cJSON_AddStringToObject(c, "activation_function", e->act);
    cJSON_AddNumberToObject(c, "layer_norm_epsilon", e->eps);
    cJSON_AddNumberToObject(c, "embed_dropout", 0);
    cJSON_AddNumberToObject(c, "resid_dropout", 0);
    cJSON_AddNumberToObject(c, "attention_dropout", 0);
}

/* GPT-J's keys (GPT-2's names): the sizes, its norms' eps, the gelu, rotary_dim */
static void gptj_keys(cJSON *c, const Ex *e)
{
    int64_t hd = hf_head_dim(&e->d);
    gpt2_sizes(c, e, e->T, !strcmp(e->act, "gelu") ? "gelu" : "gelu_new");
    cJSON_AddNumberToObject(c, "rotary_dim", (double)(e->d.rope_dims ? e->d.rope_dims : hd));
}

/* OLMo's keys beside the sizes: the gate's activation, the rope (linear scaling), the
 * attention's biases; no clip_qkv (its layernorms' eps is 1e-5 and in no key) */
static void olmo_keys(cJSON *c, const Ex *e)
{
    if (e->eps != 1e-5)
        refuse(e, "$.model.layers", NULL, xasprintf("layernorm eps %g: OLMo's are 1e-5", e->eps));
    cJSON_AddStringToObject(c, "hidden_act", e->act);
    cJSON_AddNumberToObject(c, "rope_theta", e->theta);
    if (e->scaled)
        cJSON_AddItemToObject(c, "rope_scaling", rope_scaling(&e->scaled->rope));
    cJSON_AddBoolToObject(c, "attention_bias", e->d.bias == HF_BIAS_ALL);
    cJSON_AddNullToObject(c, "clip_qkv");
}

/* The window and the global layers among windowed ones (Gemma 3's, Cohere 2's):
 * sliding_window, every N-th layer global as sliding_window_pattern and layer_types (N
 * past the layers: none) */
static void window_keys(cJSON *c, const Ex *e)
{
    int64_t every = e->global_every ? e->global_every : e->d.L + 1;
    cJSON_AddNumberToObject(c, "sliding_window", (double)e->window);
    cJSON_AddNumberToObject(c, "sliding_window_pattern", (double)every);
    cJSON *types = cJSON_AddArrayToObject(c, "layer_types");
    for (int64_t i = 0; i < e->d.L; i++)
        cJSON_AddItemToArray(types, cJSON_CreateString((i + 1) % every ? "sliding_attention"
                                                                        : "full_attention"));
}

/* Cohere 2's head_dim and windows: sliding_window (a query sees that many positions,
 * itself included: SPEC's window), every N-th layer global (sliding_window_pattern for
 * transformers 4.48, layer_types for later ones; N past the layers: none) */
static void cohere2_keys(cJSON *c, const Ex *e)
{
    cJSON_AddNumberToObject(c, "head_dim", (double)hf_head_dim(&e->d));
    window_keys(c, e);
}

/* Cohere's keys beside the sizes: its norms' eps, the gate's activation, the rope, the
 * attention's biases, logit_scale (the scale after the head, or 1); no qk norms */
static void cohere_keys(cJSON *c, const Ex *e)
{
    cJSON_AddNumberToObject(c, "layer_norm_eps", e->eps);
    cJSON_AddStringToObject(c, "hidden_act", e->act);
    cJSON_AddNumberToObject(c, "rope_theta", e->theta);
    cJSON_AddBoolToObject(c, "attention_bias", e->d.bias == HF_BIAS_ALL);
    cJSON_AddNumberToObject(c, "logit_scale", e->logit_mult ? e->logit_mult : 1.0);
    if (cohere2(e))
        cohere2_keys(c, e);
    else
        cJSON_AddFalseToObject(c, "use_qk_norm");
}

/* Phi-3's keys beside the sizes: its longrope (both factor lists, as transformers 4.45
 * validates it: type, short_factor, long_factor; attention_factor where it is not the
 * default), the original context and the extended one (max_position_embeddings: their
 * ratio is longrope's factor), the window; no padding id (Phi3Config's 32000 would be
 * past a smaller vocabulary). */
static void phi3_keys(const Ex *e, cJSON *c)
{
    const LongRope *lr = e->longrope;
    double ext = lr->factor * lr->orig;
    if (!(fabs(ext - round(ext)) <= 1e-9 * ext) || ext < 1)
        refuse(e, "$.model.layers", NULL, xasprintf("longrope's factor %g times its original "
               "context %g is not a whole context (Phi-3's max_position_embeddings)", lr->factor,
               lr->orig));
    cJSON_ReplaceItemInObjectCaseSensitive(c, "max_position_embeddings",
                                           cJSON_CreateNumber(round(ext)));
    cJSON_AddNumberToObject(c, "original_max_position_embeddings", lr->orig);
    cJSON_AddNumberToObject(c, "rope_theta", e->theta);
    cJSON_AddStringToObject(c, "hidden_act", e->act);
    if (e->d.rope_dims)   /* Phi-4-mini's (transformers 4.49 on) */
        cJSON_AddItemToObject(c, "partial_rotary_factor", hf_float(rotary_factor(e)));
    cJSON *r = cJSON_AddObjectToObject(c, "rope_scaling");
    cJSON_AddStringToObject(r, "type", "longrope");
    cJSON_AddItemToObject(r, "short_factor", cJSON_CreateDoubleArray(lr->short_f, lr->n));
    cJSON_AddItemToObject(r, "long_factor", cJSON_CreateDoubleArray(lr->long_f, lr->n));
    if (lr->has_attn && (float)lr->attn != (float)longrope_default_attn(lr->factor, lr->orig))
        cJSON_AddNumberToObject(r, "attention_factor", lr->attn);
    if (e->window)
        cJSON_AddNumberToObject(c, "sliding_window", (double)e->window);
    else
        cJSON_AddNullToObject(c, "sliding_window");
    cJSON_AddNullToObject(c, "pad_token_id");
}

/* OLMo 2's keys beside the sizes and rms_norm_eps (its q and k norms' too): the gate's
 * activation, the rope (llama3 or linear scaling), the attention's biases */
static void olmo2_keys(cJSON *c, const Ex *e)
{
    cJSON_AddStringToObject(c, "hidden_act", e->act);
    cJSON_AddNumberToObject(c, "rope_theta", e->theta);
    if (e->scaled)
        cJSON_AddItemToObject(c, "rope_scaling", rope_scaling(&e->scaled->rope));
    cJSON_AddBoolToObject(c, "attention_bias", e->d.bias == HF_BIAS_ALL);
}

/* GLM's keys beside the sizes and rms_norm_eps: head_dim, the gate's activation, the
 * rope (its share of each head), the biases on q, k and v (attention_bias); no padding
 * id (GlmConfig's 151329 would be past a smaller vocabulary) */
static void glm_keys(cJSON *c, const Ex *e)
{
    cJSON_AddNumberToObject(c, "head_dim", (double)hf_head_dim(&e->d));
    cJSON_AddStringToObject(c, "hidden_act", e->act);
    cJSON_AddNumberToObject(c, "rope_theta", e->theta);
    cJSON_AddItemToObject(c, "partial_rotary_factor", hf_float(rotary_factor(e)));
    cJSON_AddBoolToObject(c, "attention_bias", e->d.bias == HF_BIAS_QKV);
    cJSON_AddNullToObject(c, "pad_token_id");
}

/* The mixtures' keys beside the sizes and rms_norm_eps: the experts, the gate's
 * activation, the rope, the load-balancing loss (output_router_logits and its
 * coefficient, where the layers have an aux_loss); Mixtral's window (null: none); the
 * others' biases, rope scaling and (but Granite-MoE, always) whether the experts'
 * weights are renormalized; Qwen's experts' width and every MLP a mixture; Qwen3-MoE's
 * head_dim; Qwen2-MoE's shared expert's width (Granite-MoE's factors: granite_keys) */
static void moe_keys(cJSON *c, const Ex *e)
{
    cJSON_AddNumberToObject(c, mixtral(e) || granitemoe(e) ? "num_local_experts" : "num_experts",
                            (double)e->d.E);
    cJSON_AddNumberToObject(c, "num_experts_per_tok", (double)e->top_k);
    cJSON_AddStringToObject(c, "hidden_act", e->act);
    cJSON_AddNumberToObject(c, "rope_theta", e->theta);
    cJSON_AddBoolToObject(c, "output_router_logits", e->aux_loss > 0);
    if (e->aux_loss > 0)
        cJSON_AddNumberToObject(c, "router_aux_loss_coef", e->aux_loss);
    if (mixtral(e)) {
        if (e->window)
            cJSON_AddNumberToObject(c, "sliding_window", (double)e->window);
        else
            cJSON_AddNullToObject(c, "sliding_window");
        return;
    }
    if (!granitemoe(e))   /* (Granite-MoE's always renormalized) */
        cJSON_AddBoolToObject(c, "norm_topk_prob", e->norm_topk);
    if (qwen3_moe(e) || qwen2_moe(e)) {
        cJSON_AddNumberToObject(c, "moe_intermediate_size", (double)e->d.FF);
        cJSON_AddNumberToObject(c, "decoder_sparse_step", 1);
        cJSON_AddArrayToObject(c, "mlp_only_layers");
        cJSON_AddFalseToObject(c, "use_sliding_window");
    }
    if (qwen3_moe(e))
        cJSON_AddNumberToObject(c, "head_dim", (double)hf_head_dim(&e->d));
    if (qwen2_moe(e)) {   /* (its attention's biases are q, k and v's: no key) */
        cJSON_AddNumberToObject(c, "shared_expert_intermediate_size", (double)e->d.SFF);
        return;
    }
    cJSON_AddBoolToObject(c, "attention_bias", e->d.bias == HF_BIAS_ALL);
    if (e->scaled)
        cJSON_AddItemToObject(c, "rope_scaling", rope_scaling(&e->scaled->rope));
}

/* Llama's, Mistral's, Qwen's and Gemma's keys beside the sizes. */
static void llama_keys(cJSON *c, const Ex *e)
{
    cJSON_AddNumberToObject(c, "rope_theta", e->theta);
    cJSON_AddStringToObject(c, "hidden_act", e->act);
    if (e->gemma)   /* the one Gemma reads; hidden_act only for older transformers */
        cJSON_AddStringToObject(c, "hidden_activation", e->act);
    if (e->scaled)
        cJSON_AddItemToObject(c, "rope_scaling", rope_scaling(&e->scaled->rope));
    if (!e->window && e->d.bias != HF_BIAS_QKV)   /* Qwen2's biases are fixed */
        cJSON_AddBoolToObject(c, "attention_bias", e->d.bias == HF_BIAS_ALL);
    if (e->window)   /* transformers 4.42 on: a query sees that many, itself included */
        cJSON_AddNumberToObject(c, "sliding_window", (double)e->window);
    /* Llama and Mistral: read by transformers 4.45 on; Gemma's is 256 when absent */
    if (e->d.qk_norm || e->d.HD || e->gemma)
        cJSON_AddNumberToObject(c, "head_dim", (double)hf_head_dim(&e->d));
    if (e->d.qk_norm || e->d.bias == HF_BIAS_QKV)
        cJSON_AddFalseToObject(c, "use_sliding_window");
}

/* Gemma 3's keys beside the sizes: the local layers' rope and window (a query sees
 * sliding_window positions, itself included: SPEC's window), every N-th layer global
 * (sliding_window_pattern for transformers 4.50, layer_types for 4.53 on), their rope
 * scaling (rope_scaling: the global layers'). */
static void gemma3_keys(cJSON *c, const Ex *e)
{
    int64_t hd = hf_head_dim(&e->d);
    cJSON_AddNumberToObject(c, "head_dim", (double)hd);
    cJSON_AddNumberToObject(c, "query_pre_attn_scalar", query_pre_attn_scalar(e));
    cJSON_AddStringToObject(c, "hidden_activation", e->act);
    cJSON_AddBoolToObject(c, "attention_bias", e->d.bias == HF_BIAS_ALL);
    cJSON_AddNumberToObject(c, "rope_theta", e->global_theta ? e->global_theta : e->theta);
    cJSON_AddNumberToObject(c, "rope_local_base_freq", e->theta);
    if (e->global_scaled)
        cJSON_AddItemToObject(c, "rope_scaling", rope_scaling(e->global_scaled));
    else
        cJSON_AddNullToObject(c, "rope_scaling");
    window_keys(c, e);
    cJSON_AddNullToObject(c, "final_logit_softcapping");
    cJSON_AddNullToObject(c, "attn_logit_softcapping");
}

/* Gemma 2's keys beside the sizes: Gemma 3's windows in their fixed pattern (the even
 * layers windowed), one rope, the soft-caps (null: none). */
static void gemma2_keys(cJSON *c, const Ex *e)
{
    cJSON_AddNumberToObject(c, "head_dim", (double)hf_head_dim(&e->d));
    cJSON_AddNumberToObject(c, "query_pre_attn_scalar", query_pre_attn_scalar(e));
    cJSON_AddStringToObject(c, "hidden_activation", e->act);
    cJSON_AddStringToObject(c, "hidden_act", e->act);
    cJSON_AddBoolToObject(c, "attention_bias", e->d.bias == HF_BIAS_ALL);
    cJSON_AddNumberToObject(c, "rope_theta", e->theta);
    cJSON_AddNumberToObject(c, "sliding_window", (double)e->window);
    cJSON *caps[2] = {e->att_softcap > 0 ? hf_float(e->att_softcap) : cJSON_CreateNull(),
                      e->final_cap > 0 ? hf_float(e->final_cap) : cJSON_CreateNull()};
    cJSON_AddItemToObject(c, "attn_logit_softcapping", caps[0]);
    cJSON_AddItemToObject(c, "final_logit_softcapping", caps[1]);
    cJSON_AddStringToObject(c, "cache_implementation", "hybrid");
}

/* Granite's four factors beside Llama's keys (each 1 where the spec has no layer for it;
 * the attention's, 1 / sqrt(head width) where the attention has no scale) */
static void granite_keys(cJSON *c, const Ex *e)
{
    double am = e->att_scale > 0 ? e->att_scale : 1.0 / sqrt((double)hf_head_dim(&e->d));
    cJSON_AddNumberToObject(c, "attention_multiplier", am);
    cJSON_AddNumberToObject(c, "embedding_multiplier", e->embed_mult ? e->embed_mult : 1.0);
    cJSON_AddNumberToObject(c, "residual_multiplier", e->residual_mult ? e->residual_mult : 1.0);
    cJSON_AddNumberToObject(c, "logits_scaling", e->logits_div ? e->logits_div : 1.0);
    if (e->mlp != OP_MOE)   /* (Granite-MoE's config has no such key) */
        cJSON_AddFalseToObject(c, "mlp_bias");
}

/* SmolLM3's layers without rope: every N-th (no_rope_layer_interval, and the list of
 * no_rope_layers: 0 for those, 1 for the others); no window. */
static void smollm3_keys(cJSON *c, const Ex *e)
{
    cJSON_AddNumberToObject(c, "no_rope_layer_interval", (double)e->nope_every);
    cJSON *rope = cJSON_AddArrayToObject(c, "no_rope_layers");
    for (int64_t i = 0; i < e->d.L; i++)
        cJSON_AddItemToArray(rope, cJSON_CreateNumber((i + 1) % e->nope_every != 0));
    cJSON_AddFalseToObject(c, "use_sliding_window");
}

static cJSON *config(const Ex *e)
{
    cJSON *c = cJSON_CreateObject();
    const char *const *fam = family(e);
    const char *arch = e->d.score_bias ? hf_token_arch(fam[0], fam[1])
                     : e->d.score      ? hf_seq_arch(fam[0], fam[1])
                                       : fam[1];
    if (!arch)
        error_at(e->file, "$.model.layers", "a sequence classifier of %s, which transformers "
                 "has none of", fam[0]);
    cJSON_AddItemToObject(c, "architectures", cJSON_CreateStringArray(&arch, 1));
    if (e->d.score) {
        hf_image_config_labels(c, &e->cls);
        if (e->pad >= 0 && !e->d.score_bias)   /* (how transformers finds each text's last token) */
            cJSON_AddNumberToObject(c, "pad_token_id", (double)e->pad);
    }
    cJSON_AddStringToObject(c, "model_type", fam[0]);
    cJSON_AddNumberToObject(c, "vocab_size", (double)e->d.V);
    if (e->bos >= 0)
        cJSON_AddNumberToObject(c, "bos_token_id", (double)e->bos);
    if (e->eos >= 0)
        cJSON_AddNumberToObject(c, "eos_token_id", (double)e->eos);
    if (opt(e)) {
        opt_keys(c, e);
    } else if (neo(e)) {
        neo_keys(c, e);
    } else if (e->gpt2) {
        gpt2_keys(c, e);
    } else if (neox(e)) {
        neox_keys(c, e);
    } else if (falcon(e)) {
        falcon_keys(c, e);
    } else if (gptj(e)) {
        gptj_keys(c, e);
    } else if (e->layernorm) {
        llama_sizes(c, e);
        if (olmo(e))
            olmo_keys(c, e);
        else if (cohere(e))
            cohere_keys(c, e);
        else if (stablelm(e))
            stablelm_keys(c, e);
        else if (phi(e))
            phi_keys(c, e);
        else if (nemotron(e))
            nemotron_keys(c, e);
        else
            starcoder2_keys(c, e);
    } else {
        llama_sizes(c, e);
        cJSON_AddNumberToObject(c, "rms_norm_eps", e->eps);
        if (e->longrope)
            phi3_keys(e, c);
        else if (olmo2(e))
            olmo2_keys(c, e);
        else if (e->mlp == OP_MOE)
            moe_keys(c, e);
        else if (glm(e))
            glm_keys(c, e);
        else if (gemma2(e))
            gemma2_keys(c, e);
        else if (e->gemma && e->post_norms)
            gemma3_keys(c, e);
        else
            llama_keys(c, e);
        if (e->nope_every)
            smollm3_keys(c, e);
        if (granite(e))
            granite_keys(c, e);
    }
    const Rope *sc = e->scaled ? &e->scaled->rope : e->global_scaled;
    if (sc && sc->yarn)   /* transformers 4.48 computes yarn with max_position_embeddings */
        cJSON_ReplaceItemInObjectCaseSensitive(c, "max_position_embeddings",
                                               cJSON_CreateNumber(sc->yarn->orig));
    cJSON_AddBoolToObject(c, "tie_word_embeddings", e->d.tie);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    return c;
}

/* The id of the first of NAMES (NULL-terminated) that tokenizer.json's ADDED list
 * holds as a special token, or -1. */
static int64_t special_id(const cJSON *added, const char *const *names)
{
    for (; *names; names++) {
        const cJSON *t;
        cJSON_ArrayForEach(t, added) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(t, "id");
            const cJSON *content = cJSON_GetObjectItemCaseSensitive(t, "content");
            if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "special")) &&
                cJSON_IsNumber(id) && cJSON_IsString(content) &&
                !strcmp(content->valuestring, *names))
                return (int64_t)id->valuedouble;
        }
    }
    return -1;
}

/* bos_token_id and eos_token_id from tokenizer file TOK's special tokens, by the names
 * the families' tokenizer_config.json give them: Llama 3's <|begin_of_text|> and
 * <|end_of_text|>, Llama 2's and Mistral's <s> and </s>, Gemma's <bos> and <eos>, GPT-2's
 * (and Qwen's base models') <|endoftext|> for both. An id the model cannot produce
 * means another model's tokenizer: exit 1. */
static void token_ids(Ex *e, const char *tok)
{
    static const char *const bos[] = {"<|begin_of_text|>", "<s>", "<bos>", "<|endoftext|>", NULL};
    static const char *const eos[] = {"<|end_of_text|>", "</s>", "<eos>", "<|endoftext|>", NULL};
    e->bos = e->eos = e->pad = -1;
    if (!tok)
        return;
    char *text = hf_slurp(tok, NULL);
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    e->bos = special_id(added, bos);
    e->eos = special_id(added, eos);
    if (e->d.score) {   /* (a sequence classifier's pad_token_id) */
        char err[512];
        rt_tokenizer *t = rt_tok_load(tok, err, sizeof err);
        e->pad = t && rt_tok_pad_id(t) >= 0 ? rt_tok_pad_id(t) : e->eos;
        if (t)
            rt_tok_free(t);
    }
    int64_t past = e->bos >= e->d.V ? e->bos : e->eos >= e->d.V ? e->eos : -1;
    if (past >= 0)
        error_input("export: --tokenizer %s: special token id %lld is past the model's "
                    "vocabulary (%lld): the tokenizer of another model", tok, (long long)past,
                    (long long)e->d.V);
    cJSON_Delete(root);
}

/* export --adapter: DIR/adapter_model.safetensors and DIR/adapter_config.json */
static int export_adapter(Ex *e, const Spec *s, const char *out)
{
    AdapterPlan p = {0};
    plan_adapters(e, &p);
    if (!p.n)
        error_input("%s: no LoRA adapter (lora_A, lora_B) of a weight export writes: the "
                    "weights of a run without lora?", e->w.paths[0]);
    if (rt_mkdir_p(out) != 0)
        cannot_write("export", out);
    write_adapter_tensors(e, &p, xasprintf("%s/adapter_model.safetensors", out));
    hf_write_text("export", xasprintf("%s/adapter_config.json", out),
                  adapter_config(e, p.mods, &s->train));
    printf("trainc: export: %s -> %s/adapter_config.json (PEFT's LoRA for %s), "
           "%s/adapter_model.safetensors (%d modules)\n", e->w.paths[0], out, family(e)[0], out, p.n);
    return 0;
}

/* An image classifier's export (hf_convnext.c, hf_dinov2.c, hf_clip.c, hf_vit.c,
 * hf_resnet.c: the first whose layout the spec's layers have), or -1 for another model.
 * Images take no tokenizer and no adapters written apart (a lora run's are merged;
 * ConvNeXt and ResNet have none) */
static int export_image(const Spec *s, const char *weights, const char *out, const char *tok,
                        int adapter)
{
    int convnext = hf_convnext_spec(s), dinov2 = !convnext && hf_dinov2_spec(s),
        clip = !convnext && !dinov2 ? hf_clip_spec(s) : 0,
        vit = !convnext && !dinov2 && !clip && hf_vit_spec(s),
        resnet = !convnext && !dinov2 && !clip && !vit && hf_resnet_spec(s);
    if (!convnext && !dinov2 && !clip && !vit && !resnet)
        return -1;
    const char *what = convnext ? "a ConvNeXt" : dinov2 ? "a DINOv2" : clip ? "a CLIP or SigLIP"
                       : vit ? "a vision transformer" : "a ResNet";
    int no_lora = convnext || resnet;
    if (tok || adapter || (no_lora && s->train.has_lora))
        error_input("export: %s with %s (an image classifier: no tokenizer; %s)",
                    tok ? "--tokenizer" : adapter ? "--adapter" : "lora", what, no_lora
                    ? "no adapters" : "train.lora's adapters are merged, not written apart");
    return convnext ? hf_convnext_export(s, weights, out)
           : dinov2 ? hf_dinov2_export(s, weights, out)
           : clip ? hf_clip_export(s, clip == 2, weights, out)
           : vit ? hf_vit_export(s, weights, out) : hf_resnet_export(s, weights, out);
}

int cmd_export(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "hf"))
        error_input("export: usage: trainc export hf SPEC... --weights FILE -o DIR "
                    "[--tokenizer FILE] [--adapter] [--set K=V]");
    int n = spec_args(argc, argv, 2, "export");
    const char *weights = NULL, *out = NULL, *tok = NULL;
    int adapter = 0, n_sets = 0;
    char **sets = xcalloc((size_t)argc, sizeof *sets);
    for (int i = 2 + n; i < argc; i++) {
        if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--out"))
            out = opt_value(argc, argv, &i, argv[i]);
        else if (!strcmp(argv[i], "--weights"))
            weights = opt_value(argc, argv, &i, "--weights");
        else if (!strcmp(argv[i], "--tokenizer"))
            tok = opt_value(argc, argv, &i, "--tokenizer");
        else if (!strcmp(argv[i], "--adapter"))
            adapter = 1;
        else if (!strcmp(argv[i], "--set"))   /* (the run's lora, as trainc run took it) */
            sets[n_sets++] = (char *)opt_value(argc, argv, &i, "--set");
        else
            unknown_arg("export", argv[i]);
    }
    if (!weights || !out)
        error_input("export: usage: trainc export hf SPEC... --weights FILE -o DIR "
                    "[--tokenizer FILE] [--adapter] [--set K=V]");
    if (tok && access(tok, R_OK) != 0)
        error_input("export: --tokenizer %s: %s", tok, strerror(errno));
    Spec *s = spec_load(n, argv + 2);   /* every error a spec can have, as check's */
    for (int i = 0; i < n_sets; i++)
        spec_set(s, sets[i]);
    if (n_sets)
        spec_sets_done(s);
    Ex e = {.file = s->model_file, .adapter = adapter};
    if (adapter)
        check_adapter_export(s);
    if (s->train.has_lora) {
        e.lora_rank = s->train.lora_rank;
        e.lora_scale = rt_lora_scale(&s->train);
    }
    if (s->gan)
        error_at(s->model_file, "$.model.gan", "a GAN has no Hugging Face architecture to "
                 "export to; export hf takes a language model's spec");
    if (hf_modernbert_spec(s)) {   /* a ModernBERT (hf_modernbert.c; before the image models:
                                      its mean pooling is a token_mean) */
        if (adapter)
            error_input("export: --adapter with a text classifier (train.lora's adapters are "
                        "merged into its weights, not written as PEFT's files)");
        return hf_modernbert_export(s, weights, out, tok);
    }
    int image = export_image(s, weights, out, tok, adapter);
    if (image >= 0)
        return image;
    if (hf_bert_spec(s)) {   /* a text classifier or masked LM of BERT's family (hf_bert.c) */
        if (adapter)
            error_input("export: --adapter with a text classifier (train.lora's adapters are "
                        "merged into its weights, not written as PEFT's files)");
        return hf_bert_export(s, weights, out, tok);
    }
    match(&e, s);
    token_ids(&e, tok);
    hf_weights_file(&e.w, weights);
    plan_tensors(&e);
    if (adapter)
        return export_adapter(&e, s, out);
    char *text = hf_json_text(config(&e));
    if (rt_mkdir_p(out) != 0)
        cannot_write("export", out);
    write_tensors(&e, xasprintf("%s/model.safetensors", out));
    hf_write_text("export", xasprintf("%s/config.json", out), text);
    if (tok && hf_copy_file("export", tok, xasprintf("%s/tokenizer.json", out)) != 0)
        cannot_write("export", xasprintf("%s/tokenizer.json", out));
    printf("trainc: export: %s -> %s/config.json (%s), %s/model.safetensors (%d tensors)\n",
           weights, out, family(&e)[0], out, e.out.n);
    return 0;
}
