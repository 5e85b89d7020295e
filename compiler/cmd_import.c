/* cmd_import.c: trainc import hf DIR -o OUT [--seq-len T] [--adapter ADIR]: a Hugging
 * Face model folder (config.json and its safetensors) as OUT/model.json (a model spec),
 * OUT/train.json (training defaults to edit) and OUT/init.safetensors (the weights under
 * trainc's names, fp32; with --adapter, PEFT's LoRA adapters merged in: hf_adapter.c).
 * GPT2LMHeadModel and GPTBigCode (StarCoder), and LlamaForCausalLM with its kin Mistral,
 * Phi-3, Qwen2, Qwen3, Gemma, Gemma 2, Gemma 3 (the text models, and the text model of
 * the multimodal checkpoints), SmolLM3, Granite, StarCoder2, StableLM, Nemotron, GPT-NeoX
 * (Pythia), Phi (1, 1.5, 2), Falcon, OLMo, Cohere and GPT-J; ViTForImageClassification
 * (hf_vit.c); a config key or tensor the
 * spec cannot express exits 1 naming it, before anything is written. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cmd.h"
#include "hf.h"

/* The MLP's kind: gated (Llama's glu), a gelu between two linears (GPT-2's, StarCoder2's)
 * or a squared relu between two linears (Nemotron's relu2) */
enum { MLP_GLU, MLP_GELU, MLP_RELU2, MLP_RELU, MLP_MOE /* a mixture of glu experts */ };

/* What the spec needs of a config, GPT-2 and Llama alike. */
typedef struct Arch {
    const char *type;          /* config's model_type: gpt2, llama, mistral, phi3, qwen2, qwen3,
                                  gemma, gemma2, gemma3_text, smollm3, granite, starcoder2,
                                  stablelm, nemotron, gpt_neox, phi, falcon, olmo, cohere,
                                  gptj, the mixtures (mixtral, olmoe, granitemoe, qwen2_moe,
                                  qwen3_moe), ... (families[]) */
    int gpt2;                  /* GPT-2's layout (learned positions, Conv1D) */
    int layernorm;             /* layernorms (GPT-2, the layernorm families), else rmsnorms */
    int mlp;                   /* MLP_* */
    int block;                 /* BLOCK_* */
    int ln_params;             /* LN_*, the layernorms' */
    int head_bias;             /* the head has a bias (Phi's, GPT-J's) */
    double logit_scale;        /* Cohere: the logits times it (a scale layer after the head),
                                  or 0: none */
    const HfFamily *family;    /* its tensors' table */
    HfDims d;
    double eps;
    const char *act;           /* MLP_GELU: gelu's approximate ("tanh", "none"); MLP_GLU:
                                  glu's act */
    double theta;
    cJSON *scaling;            /* llama3 rope scaling, or NULL */
    int64_t window;            /* SPEC's window, 0 for none */
    double embed_scale;        /* Gemma's sqrt(hidden_size) (Granite's embedding_multiplier),
                                  or 0: no scale layer */
    double residual_scale;     /* Granite: each branch's output times residual_multiplier
                                  (a scale layer closing it), or 0: none */
    double logits_div;         /* Granite: the logits divided by logits_scaling (a scale
                                  layer after the head), or 0: none */
    double att_scale;          /* the attention's scale (Gemma 2 and 3's
                                  query_pre_attn_scalar^-1/2), or 0: 1 / sqrt(head width) */
    double att_softcap;        /* Gemma 2: the scores' soft-cap, or 0: none */
    double final_cap;          /* Gemma 2: the logits' soft-cap, or 0: none */
    int post_norms;            /* Gemma 2 and 3: a norm after each branch too (OLMo 2: */
    int no_pre_norms;          /* and none before it) */
    int64_t global_every;      /* Gemma 2 and 3: every N-th layer global (no window), or 0 */
    int global_nope;           /* Cohere 2: the global layers have no rope either */
    int64_t local_every;       /* GPT-Neo: every N-th layer windowed (the others not), or 0 */
    int64_t local_window;      /* and their window */
    double global_theta;       /* Gemma 3: its rope theta (Gemma 2: 0, the layers' own) */
    cJSON *global_scaling;     /* and its rope scaling (the 4B and larger), or NULL */
    int multimodal;            /* Gemma 3's text model in an image-text checkpoint */
    int64_t nope_every;        /* SmolLM3: every N-th layer without rope, or 0 */
    int64_t top_k;             /* MLP_MOE: each token's experts (d.E the experts) */
    int norm_topk;             /* and their weights renormalized to sum 1 */
    double aux_loss;           /* and the load-balancing loss's coefficient, or 0 */
    int shared_gate;           /* and its shared expert (d.SFF wide) gated (Qwen2-MoE's) */
    int seq_cls;               /* a sequence classifier (...ForSequenceClassification, or
                                  --labels): the last token's row through `score` (d.score) */
    int tok_cls;               /* a token classifier (...ForTokenClassification, or --task
                                  token --labels): every token's row through its head
                                  (d.score_name, with a bias) */
    int fresh_score;           /* and its score drawn anew (normal(0, std)): --labels */
    int reward;                /* a reward model: one score, read at each of a pair's texts'
                                  last token (last_token's segments 2) */
    int dpo;                   /* --task dpo|simpo|orpo: the language model over a pair of
                                  texts a row, a preference loss */
    int pref;                  /* which (PREF_*): dpo against the reference's
                                  log-probabilities, simpo or orpo (no reference) */
    double std;                /* initializer_range */
    HfImage cls;               /* its classes */
} Arch;

/* One output tensor: its sources (rows concatenated, in order), or one transposed. */
typedef struct Recipe {
    const HfTensor **src;
    int n, transpose;
    float offset;              /* added to each element (Gemma's norms: 1 + weight) */
    const HfMap *reorder;      /* its rows reordered (hf_reorder), or NULL */
    int64_t skip;              /* the source's first elements left out (OPT's positions) */
    int slot;                  /* its layer's HF_* slot */
    double fresh;              /* no source: drawn normal(0, fresh) (a new score) */
} Recipe;

typedef struct Imp {
    const char *dir;
    HfCfg cfg;
    HfCfg text;                /* a multimodal checkpoint's text_config */
    HfWeights w;
    HfOut out;
    Recipe *r;
    const char *labels;        /* --labels: a sequence classifier's new classes, or NULL */
    const char *task;          /* --task: "reward" over a decoder, or NULL */
    double fresh_score;        /* and its score's std, drawn anew (0: read) */
    const char *const *names;  /* trainc's layer names by slot (gpt2_names, ...) */
    const char *rep;           /* the repeat's name */
    const HfFamily *family;
    const HfDims *d;
    int block;                 /* Arch.block: where the attention's layers are named */
    HfAdapter *adapter;        /* --adapter's, merged into the weights, or NULL */
} Imp;

/* config keys that change nothing trainc computes: ids, dtypes, dropouts, the cache,
 * other heads and tasks, generation's settings, transformers' output switches (all of
 * PretrainedConfig's keys but three, which decoder_only checks), GPT-2's relics of
 * OpenAI GPT (n_special, predict_special_tokens: its modeling code reads neither), the
 * attention implementation's flag transformers 4.46 to 4.48 save. A
 * config written whole (to_dict, older transformers) holds them all. */
const char *const hf_pretrained_keys[] = {
    "_name_or_path", "transformers_version", "torch_dtype", "bos_token_id", "eos_token_id",
    "pad_token_id", "sep_token_id", "decoder_start_token_id", "initializer_range", "use_cache",
    "attention_dropout", "residual_dropout", "embedding_dropout", "pretraining_tp", "attn_pdrop",
    "embd_pdrop", "resid_pdrop", "summary_type", "summary_use_proj", "summary_activation",
    "summary_proj_to_labels", "summary_first_dropout", "task_specific_params", "n_ctx", "output_past",
    "reorder_and_upcast_attn", "tokenizer_class", "max_window_layers", "id2label", "label2id",
    "num_labels", "_num_labels", "finetuning_task", "problem_type", "prefix",
    "return_dict", "output_hidden_states", "output_attentions", "torchscript", "use_bfloat16",
    "tf_legacy_loss", "chunk_size_feed_forward", "gradient_checkpointing", "is_decoder",
    "tie_encoder_decoder", "cross_attention_hidden_size", "n_special", "predict_special_tokens",
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
    "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
    "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
    "suppress_tokens", "begin_suppress_tokens", "cache_implementation", "hidden_dropout",
    "classifier_dropout", "_attn_implementation_autoset", NULL};

/* ---- config ------------------------------------------------------------------- */

const char *hf_gelu_approximate(HfCfg *c, const char *key, const char *dflt)
{
    const char *act = hf_cfg_str(c, key, dflt);
    if (!strcmp(act, "gelu_new") || !strcmp(act, "gelu_pytorch_tanh"))
        return "tanh";
    if (!strcmp(act, "gelu"))
        return "none";
    hf_cfg_error(c, key, "\"%s\": trainc's gelu is exact (gelu) or the tanh approximation "
                 "(gelu_new, gelu_pytorch_tanh)", act);
}

static void gpt2_config(HfCfg *c, Arch *a);

/* GPTBigCode (StarCoder, SantaCoder, WizardCoder-15B): GPT-2's config and layers with one
 * key/value head (multi_query; the other layout interleaves each head's q, k and v rows,
 * refused); its softmax-in-fp32 switches change no fp32 result. */
static void bigcode_config(HfCfg *c, Arch *a)
{
    gpt2_config(c, a);
    if (!hf_cfg_bool(c, "multi_query", 1))
        hf_cfg_error(c, "multi_query", "false: GPTBigCode then interleaves each head's q, k "
                     "and v rows; trainc imports the multi-query models (StarCoder, SantaCoder)");
    a->d.KV = 1;
    hf_cfg_get(c, "attention_softmax_in_fp32");
    hf_cfg_get(c, "scale_attention_softmax_in_fp32");
}

/* A config key and its config class's default */
typedef struct SizeKey {
    const char *key;
    int64_t dflt;
} SizeKey;

/* GPT-2's layout, learned positions and layernorms (GPT-2's, OPT's, GPT-Neo's), with its
 * sizes under the family's keys: vocabulary, width, layers, heads (one key/value head
 * each), positions; tied unless tie_word_embeddings is false */
static void positions_layout(HfCfg *c, Arch *a, const SizeKey k[5])
{
    a->gpt2 = 1;
    a->layernorm = 1;
    a->d.V = hf_cfg_int(c, k[0].key, k[0].dflt);
    a->d.D = hf_cfg_int(c, k[1].key, k[1].dflt);
    a->d.L = hf_cfg_int(c, k[2].key, k[2].dflt);
    a->d.H = hf_cfg_int(c, k[3].key, k[3].dflt);
    a->d.KV = a->d.H;
    a->d.max_pos = hf_cfg_int(c, k[4].key, k[4].dflt);
    a->d.tie = hf_cfg_bool(c, "tie_word_embeddings", 1);
}

static void gpt2_config(HfCfg *c, Arch *a)
{
    static const SizeKey k[5] = {{"vocab_size", 50257}, {"n_embd", 768}, {"n_layer", 12},
                                 {"n_head", 12}, {"n_positions", 1024}};
    positions_layout(c, a, k);
    a->d.FF = hf_cfg_get(c, "n_inner") ? hf_cfg_int(c, "n_inner", -1) : 4 * a->d.D;
    a->eps = hf_cfg_num(c, "layer_norm_epsilon", 1e-5);
    a->d.bias = HF_BIAS_ALL;
    a->d.mlp_bias = 1;
    a->mlp = MLP_GELU;
    a->act = hf_gelu_approximate(c, "activation_function", "gelu_new");
    if (!hf_cfg_bool(c, "scale_attn_weights", 1))
        hf_cfg_error(c, "scale_attn_weights", "false: trainc's attention scales by 1/sqrt(hd)");
    if (hf_cfg_bool(c, "scale_attn_by_inverse_layer_idx", 0))
        hf_cfg_error(c, "scale_attn_by_inverse_layer_idx", "true: trainc's attention scales "
                     "every layer alike");
}

/* OPT (OPT-125m to 66b): GPT-2's layout (learned positions, layernorms) with a relu MLP
 * (ffn_dim), q, k, v and out_proj apart, biases where enable_bias is (true where absent),
 * the layernorms' eps torch's 1e-5; its learned positions start two rows in (the rows
 * before are dropped: hf_opt's pos_pad). OPT-350m's layout is refused: its norms after
 * the residual sums (do_layer_norm_before false) and its embeddings projected
 * (word_embed_proj_dim). layerdrop, a training-time skip of whole layers, is not done. */
static void opt_config(HfCfg *c, Arch *a)
{
    static const SizeKey k[5] = {{"vocab_size", 50272}, {"hidden_size", 768},
                                 {"num_hidden_layers", 12}, {"num_attention_heads", 12},
                                 {"max_position_embeddings", 2048}};
    positions_layout(c, a, k);
    a->d.FF = hf_cfg_int(c, "ffn_dim", 3072);
    a->eps = 1e-5;
    int bias = hf_cfg_bool(c, "enable_bias", 1);
    a->d.bias = bias ? HF_BIAS_ALL : HF_BIAS_NONE;
    a->d.mlp_bias = bias;
    a->mlp = MLP_RELU;
    if (strcmp(hf_cfg_str(c, "activation_function", "relu"), "relu"))
        hf_cfg_error(c, "activation_function", "\"%s\": trainc imports OPT's relu MLP",
                     hf_cfg_str(c, "activation_function", "relu"));
    if (!hf_cfg_bool(c, "do_layer_norm_before", 1))
        hf_cfg_error(c, "do_layer_norm_before", "false: OPT-350m's norms come after the residual "
                     "sums; trainc imports the pre-norm OPTs");
    if (hf_cfg_bool(c, "_remove_final_layer_norm", 0))
        hf_cfg_error(c, "_remove_final_layer_norm", "true: trainc's OPT has its final layernorm");
    if (hf_cfg_int(c, "word_embed_proj_dim", a->d.D) != a->d.D)
        hf_cfg_error(c, "word_embed_proj_dim", "%lld: OPT-350m projects its embeddings in and "
                     "out; trainc imports OPTs whose embedding is hidden_size wide",
                     (long long)hf_cfg_int(c, "word_embed_proj_dim", a->d.D));
    if (!hf_cfg_bool(c, "layer_norm_elementwise_affine", 1))
        hf_cfg_error(c, "layer_norm_elementwise_affine", "false: trainc's OPT layernorms have "
                     "weights and biases");
    static const char *const ignored[] = {"layerdrop", "init_std", "dropout"};
    for (int k = 0; k < 3; k++)
        hf_cfg_get(c, ignored[k]);
}

/* One more of GPT-Neo's layer kinds (KIND, from KEY's list; NULL: not a string)
 * appended to kinds[*n] (1: local), at most L of them */
static void neo_kind(HfCfg *c, const char *key, const char *kind, int64_t L, int **kinds,
                     int64_t *n)
{
    if (*n == L || !kind || (strcmp(kind, "global") && strcmp(kind, "local")))
        hf_cfg_error(c, key, "num_layers (%lld) kinds expected, each \"global\" or \"local\"",
                     (long long)L);
    *kinds = realloc(*kinds, (size_t)(*n + 1) * sizeof **kinds);
    if (!*kinds)
        die("out of memory");
    (*kinds)[(*n)++] = !strcmp(kind, "local");
}

/* GPT-Neo's L layer kinds (1: local): attention_layers ("global", "local"), what its
 * modeling code reads and transformers saves, or attention_types expanded
 * ([[["global", "local"], 12]]: the pattern, repeated; GPTNeoConfig's where absent) */
static int *neo_kinds(HfCfg *c, int64_t L)
{
    const cJSON *types = hf_cfg_get(c, "attention_types");
    const cJSON *list = hf_cfg_get(c, "attention_layers");
    const char *key = list ? "attention_layers" : "attention_types";
    int *kinds = NULL;
    int64_t n = 0;
    const cJSON *t, *k;
    for (t = list ? NULL : types ? types->child : NULL; t; t = t->next) {
        const cJSON *pat = cJSON_GetArrayItem(t, 0), *rep = cJSON_GetArrayItem(t, 1);
        if (!cJSON_IsArray(pat) || !cJSON_IsNumber(rep) || !(rep->valuedouble >= 0) ||
            rep->valuedouble > (double)L)
            hf_cfg_error(c, key, "a list of [[kinds...], count] expected");
        for (int64_t r = 0; r < (int64_t)rep->valuedouble; r++)
            cJSON_ArrayForEach(k, pat)
                neo_kind(c, key, cJSON_GetStringValue(k), L, &kinds, &n);
    }
    cJSON_ArrayForEach(k, list)
        neo_kind(c, key, cJSON_GetStringValue(k), L, &kinds, &n);
    for (int r = 0; !types && !list && r < 24; r++)   /* GPTNeoConfig's default */
        neo_kind(c, key, r % 2 ? "local" : "global", L, &kinds, &n);
    if (n != L)
        hf_cfg_error(c, key, "%lld layer kinds for num_layers %lld", (long long)n, (long long)L);
    return kinds;
}

/* Does kind k (is_local) fall on every n-th layer alone, n the first such layer's place? */
static int64_t kind_every(const int *is_local, int64_t L, int k)
{
    int64_t n = 0;
    for (int64_t i = 0; i < L && !n; i++)
        if (is_local[i] == k)
            n = i + 1;
    for (int64_t i = 0; n && i < L; i++)
        if ((is_local[i] == k) != ((i + 1) % n == 0))
            return 0;
    return n;
}

/* GPT-Neo (125M, 1.3B, 2.7B): GPT-2's layout with q, k and v without biases (the
 * attention's "bias": "proj"), scores not scaled ("scale": 1), the local layers windowed
 * (window_size: a query sees that many positions, itself included, as SPEC's window);
 * the local layers every N-th (an interleave), all, or none of them; or the global ones
 * every N-th among local ones (the window, and an interleave without it). */
static void neo_config(HfCfg *c, Arch *a)
{
    static const SizeKey k[5] = {{"vocab_size", 50257}, {"hidden_size", 2048},
                                 {"num_layers", 24}, {"num_heads", 16},
                                 {"max_position_embeddings", 2048}};
    positions_layout(c, a, k);
    a->d.FF = hf_cfg_get(c, "intermediate_size") ? hf_cfg_int(c, "intermediate_size", -1)
                                                 : 4 * a->d.D;
    a->eps = hf_cfg_num(c, "layer_norm_epsilon", 1e-5);
    a->d.bias = HF_BIAS_PROJ;
    a->d.mlp_bias = 1;
    a->mlp = MLP_GELU;
    a->act = hf_gelu_approximate(c, "activation_function", "gelu_new");
    a->att_scale = 1.0;
    int64_t w = hf_cfg_int(c, "window_size", 256);
    int *local = neo_kinds(c, a->d.L);
    int64_t every_local = kind_every(local, a->d.L, 1), every_global = kind_every(local, a->d.L, 0);
    free(local);
    if (every_global == 1)   /* all global: no window */
        ;
    else if (every_local == 1)   /* all local */
        a->window = w;
    else if (every_local) {
        a->local_every = every_local;
        a->local_window = w;
    } else if (every_global) {
        a->window = w;
        a->global_every = every_global;
    } else
        hf_cfg_error(c, hf_cfg_get(c, "attention_layers") ? "attention_layers" : "attention_types",
                     "local layers in no pattern trainc's interleave (every N-th layer) writes");
    static const char *const ignored[] = {"resid_dropout", "embed_dropout"};
    for (int k = 0; k < 2; k++)
        hf_cfg_get(c, ignored[k]);
}

void hf_cfg_pretrained(HfCfg *c)
{
    if (hf_cfg_bool(c, "is_encoder_decoder", 0))
        hf_cfg_error(c, "is_encoder_decoder", "true: an encoder-decoder, which trainc does not "
                     "import");
    if (hf_cfg_bool(c, "add_cross_attention", 0))
        hf_cfg_error(c, "add_cross_attention", "true: trainc has no cross-attention");
    const cJSON *p = hf_cfg_get(c, "pruned_heads");
    if (p && !(cJSON_IsObject(p) && !p->child))
        hf_cfg_error(c, "pruned_heads", "not empty: trainc's layers all have the same heads");
}

/* yarn's original context: rope_scaling's original_max_position_embeddings, or the
 * config's max_position_embeddings, which transformers 4.48 computes with (later ones
 * with the former): where both are given they must agree. */
static double yarn_original(HfCfg *c, const cJSON *s)
{
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(s, "original_max_position_embeddings");
    const cJSON *m = hf_cfg_get(c, "max_position_embeddings");
    if (o && !cJSON_IsNumber(o))
        hf_cfg_error(c, "rope_scaling.original_max_position_embeddings", "a number expected");
    if (!o && !m)
        hf_cfg_error(c, "rope_scaling", "yarn needs original_max_position_embeddings (or the "
                     "config's max_position_embeddings)");
    if (o && m && o->valuedouble != (double)hf_cfg_int(c, "max_position_embeddings", -1))
        hf_cfg_error(c, "rope_scaling.original_max_position_embeddings", "%g where "
                     "max_position_embeddings is %lld: transformers' releases compute yarn "
                     "with either", o->valuedouble,
                     (long long)hf_cfg_int(c, "max_position_embeddings", -1));
    return o ? o->valuedouble : (double)hf_cfg_int(c, "max_position_embeddings", -1);
}

/* rope_scaling: null, or llama3's, linear's or yarn's (SPEC's "scaling": the keys each
 * takes, the required ones first); any other type is refused. */
static cJSON *rope_scaling(HfCfg *c)
{
    static const struct {
        const char *type;
        const char *keys[7];
        int required;
    } kinds[] = {
        {"llama3", {"factor", "low_freq_factor", "high_freq_factor",
                    "original_max_position_embeddings", NULL}, 4},
        {"linear", {"factor", NULL}, 1},
        {"yarn", {"factor", "beta_fast", "beta_slow", "attention_factor",
                  "original_max_position_embeddings", NULL}, 1},
    };
    const cJSON *s = hf_cfg_get(c, "rope_scaling");
    if (!s)
        return NULL;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "rope_type");
    if (!t)
        t = cJSON_GetObjectItemCaseSensitive(s, "type");
    int k = 0;
    while (k < 3 && !(cJSON_IsString(t) && !strcmp(t->valuestring, kinds[k].type)))
        k++;
    if (k == 3)
        hf_cfg_error(c, "rope_scaling", "type %s%s%s: trainc's rope takes llama3, linear and "
                     "yarn scaling only", cJSON_IsString(t) ? "\"" : "",
                     cJSON_IsString(t) ? t->valuestring : "missing", cJSON_IsString(t) ? "\"" : "");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "rope_type", kinds[k].type);
    for (int i = 0; kinds[k].keys[i]; i++) {
        const char *key = kinds[k].keys[i];
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
        if (k == 2 && !strcmp(key, "original_max_position_embeddings"))
            cJSON_AddNumberToObject(o, key, yarn_original(c, s));
        else if (cJSON_IsNumber(v))
            cJSON_AddNumberToObject(o, key, v->valuedouble);
        else if ((v && !cJSON_IsNull(v)) || i < kinds[k].required)
            hf_cfg_error(c, xasprintf("rope_scaling.%s", key), "a number expected");
    }
    for (const cJSON *e = s->child; e; e = e->next) {
        int known = !strcmp(e->string, "rope_type") || !strcmp(e->string, "type");
        for (int i = 0; kinds[k].keys[i]; i++)
            known |= !strcmp(e->string, kinds[k].keys[i]);
        if (!known)
            hf_cfg_error(c, xasprintf("rope_scaling.%s", e->string), "not a key of %s scaling",
                         kinds[k].type);
    }
    return o;
}

/* The heads' widths: kv heads dividing heads; head_dim (transformers 4.45 and later
 * read it for Llama and Mistral; Gemma's is 256 when absent), else hidden_size /
 * num_attention_heads; even for rope. */
static void head_dims(HfCfg *c, Arch *a, int64_t dflt)
{
    if (a->d.H % a->d.KV)
        hf_cfg_error(c, "num_key_value_heads", "%lld over %lld heads: trainc needs kv heads to "
                     "divide heads", (long long)a->d.KV, (long long)a->d.H);
    int64_t hd = hf_cfg_get(c, "head_dim") ? hf_cfg_int(c, "head_dim", -1) : dflt;
    if (!hd && a->d.D % a->d.H)
        hf_cfg_error(c, "num_attention_heads", "%lld heads do not divide hidden_size %lld "
                     "(and there is no head_dim)", (long long)a->d.H, (long long)a->d.D);
    a->d.HD = hd && hd * a->d.H != a->d.D ? hd : 0;
    if (hf_head_dim(&a->d) % 2)
        hf_cfg_error(c, hd ? "head_dim" : "num_attention_heads", "heads %lld wide: rope rotates "
                     "pairs of a head's dimensions", (long long)hf_head_dim(&a->d));
}

/* A list of the rd / 2 numbers > 0 at rope_scaling.KEY (one per pair of the rotated
 * dimensions), as a JSON array. */
static cJSON *longrope_list(HfCfg *c, const cJSON *s, const char *key, int64_t rd)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    char *at = xasprintf("rope_scaling.%s", key);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != rd / 2)
        hf_cfg_error(c, at, "a list of %lld numbers expected (one per pair of the rotated "
                     "dimensions)", (long long)(rd / 2));
    cJSON *out = cJSON_CreateArray();
    const cJSON *x;
    cJSON_ArrayForEach(x, v) {
        if (!cJSON_IsNumber(x) || !(x->valuedouble > 0))
            hf_cfg_error(c, at, "numbers > 0 expected");
        cJSON_AddItemToArray(out, cJSON_CreateNumber(x->valuedouble));
    }
    free(at);
    return out;
}

/* Phi-3's rope_scaling: null, or longrope's ("su" as transformers 4.40 wrote it): the
 * short and long factors, the context's factor max_position_embeddings over
 * original_max_position_embeddings, attention_factor where given (SPEC's longrope) */
static cJSON *phi3_scaling(HfCfg *c, const Arch *a)
{
    int64_t orig = hf_cfg_int(c, "original_max_position_embeddings", 4096);
    const cJSON *s = hf_cfg_get(c, "rope_scaling");
    if (!s)
        return NULL;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "rope_type");
    t = t ? t : cJSON_GetObjectItemCaseSensitive(s, "type");
    if (!cJSON_IsString(t) || (strcmp(t->valuestring, "longrope") && strcmp(t->valuestring, "su")))
        hf_cfg_error(c, "rope_scaling", "type %s: Phi-3's rope scaling in trainc is longrope (su)",
                     cJSON_IsString(t) ? t->valuestring : "missing");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "rope_type", "longrope");
    int64_t rd = a->d.rope_dims ? a->d.rope_dims : hf_head_dim(&a->d);   /* rotated */
    cJSON_AddItemToObject(o, "short_factor", longrope_list(c, s, "short_factor", rd));
    cJSON_AddItemToObject(o, "long_factor", longrope_list(c, s, "long_factor", rd));
    cJSON_AddNumberToObject(o, "factor", (double)a->d.max_pos / (double)orig);
    cJSON_AddNumberToObject(o, "original_max_position_embeddings", (double)orig);
    for (const cJSON *e = s->child; e; e = e->next) {
        if (!strcmp(e->string, "attention_factor")) {
            if (!cJSON_IsNumber(e) || !(e->valuedouble > 0))
                hf_cfg_error(c, "rope_scaling.attention_factor", "a number > 0 expected");
            cJSON_AddNumberToObject(o, "attention_factor", e->valuedouble);
        } else if (strcmp(e->string, "type") && strcmp(e->string, "rope_type") &&
                   strcmp(e->string, "short_factor") && strcmp(e->string, "long_factor"))
            hf_cfg_error(c, xasprintf("rope_scaling.%s", e->string), "not a key of longrope "
                         "scaling");
    }
    return o;
}

/* A partial rope's dims from the share of each head at KEY (partial_rotary_factor,
 * GPT-NeoX's rotary_pct; DFLT where absent), as transformers counts them: int(head width
 * * share), which must be even and at least 2 (0: the whole head) */
static void rope_dims(HfCfg *c, Arch *a, const char *key, double dflt)
{
    int64_t hd = hf_head_dim(&a->d);
    double f = hf_cfg_num(c, key, dflt);
    int64_t rd = f > 0 && f <= 1 ? (int64_t)((double)hd * f) : 0;
    if (rd < 2 || rd % 2)
        hf_cfg_error(c, key, "%g of heads %lld wide: trainc's rope rotates pairs of "
                     "dimensions, an even number of at least 2", f, (long long)hd);
    a->d.rope_dims = rd < hd ? rd : 0;
}

/* rope_scaling where FAMILY's modeling code (transformers 4.40) takes linear scaling
 * alone of trainc's kinds: rope_scaling(), llama3 refused */
static cJSON *linear_scaling(HfCfg *c, const char *family)
{
    cJSON *s = rope_scaling(c);
    const cJSON *t = s ? cJSON_GetObjectItemCaseSensitive(s, "rope_type") : NULL;
    if (t && strcmp(t->valuestring, "linear"))
        hf_cfg_error(c, "rope_scaling", "type %s: %s's rope scaling in trainc is linear",
                     t->valuestring, family);
    return s;
}

/* OLMo (1): Llama's layers with layernorms without weight or bias (eps 1e-5, which the
 * config does not hold); rope_scaling linear or none. Its clip_qkv is refused. */
static void olmo_config(HfCfg *c, Arch *a)
{
    a->layernorm = 1;
    a->ln_params = LN_BARE;
    a->eps = 1e-5;
    a->scaling = linear_scaling(c, "OLMo");
    if (hf_cfg_get(c, "clip_qkv"))
        hf_cfg_error(c, "clip_qkv", "%g: trainc's attention does not clamp q, k and v",
                     hf_cfg_num(c, "clip_qkv", 0));
}

/* Cohere (Command R, Aya): the attention and the gated MLP in parallel off one layernorm
 * with a weight and no bias (layer_norm_eps), a rope over whole heads whose pairs are
 * adjacent dimensions (their rows reordered), the logits times logit_scale, tied unless
 * tie_word_embeddings is false. Its q and k layernorms (use_qk_norm) are refused, and a
 * rope_scaling (transformers 4.40 ignores it, 4.45 applies it). */
static void cohere_config(HfCfg *c, Arch *a)
{
    a->layernorm = 1;
    a->ln_params = LN_WEIGHT;
    a->block = BLOCK_SHARED_NORM;
    a->eps = hf_cfg_num(c, "layer_norm_eps", 1e-5);
    a->d.rope_pairs_adjacent = 1;
    a->logit_scale = hf_cfg_num(c, "logit_scale", 0.0625);
    if (!(a->logit_scale > 0))
        hf_cfg_error(c, "logit_scale", "%g: a number > 0 expected", a->logit_scale);
    if (hf_cfg_bool(c, "use_qk_norm", 0))
        hf_cfg_error(c, "use_qk_norm", "true: Cohere's q and k layernorms have weights per "
                     "head; trainc's qk_norm is an RMSNorm the heads share");
    if (hf_cfg_get(c, "rope_scaling"))
        hf_cfg_error(c, "rope_scaling", "transformers' releases read it differently for Cohere "
                     "(4.40 ignores it)");
    if (!strcmp(a->type, "cohere") && a->d.HD)   /* Cohere 2's is its own */
        hf_cfg_error(c, "head_dim", "%lld over %lld heads of hidden_size %lld: transformers' "
                     "releases read it apart for Cohere (4.40 ignores it, 4.48 reads it)",
                     (long long)a->d.HD, (long long)a->d.H, (long long)a->d.D);
}

/* KEY's value V again at ALIAS where the config gives both (transformers 4.45 on write
 * GPT-NeoX's rope as rope_theta and partial_rotary_factor too, and read those) */
static void alias(HfCfg *c, const char *key, const char *alias, double v)
{
    if (hf_cfg_get(c, alias) && hf_cfg_num(c, alias, v) != v)
        hf_cfg_error(c, alias, "%g where %s is %g: trainc cannot tell which the model uses",
                     hf_cfg_num(c, alias, v), key, v);
}

/* Phi's own keys (Phi-1, Phi-1.5, Phi-2; Llama's for the sizes): one layernorm feeding
 * the attention and the MLP in parallel, a partial rope (partial_rotary_factor, 0.5
 * where absent; linear scaling or none), every linear biased, the head too, a gelu MLP
 * fc1, fc2. Its q and k layernorms are refused. */
static void phi_config(HfCfg *c, Arch *a)
{
    a->d.bias = HF_BIAS_ALL;
    a->d.mlp_bias = a->head_bias = 1;
    a->layernorm = 1;
    a->mlp = MLP_GELU;
    a->block = BLOCK_SHARED_NORM;
    a->eps = hf_cfg_num(c, "layer_norm_eps", 1e-5);
    a->act = hf_gelu_approximate(c, "hidden_act", "gelu_new");
    a->scaling = linear_scaling(c, "Phi");
    if (hf_cfg_bool(c, "qk_layernorm", 0))
        hf_cfg_error(c, "qk_layernorm", "true: Phi's q and k layernorms (weights and biases) are "
                     "not trainc's qk_norm (an RMSNorm)");
    rope_dims(c, a, "partial_rotary_factor", 0.5);
}

/* GPT-J: GPT-2's config keys; one layernorm feeding the attention and the MLP in
 * parallel, a partial rope (rotary_dim, all of each head where null; theta 10000) whose
 * pairs are adjacent dimensions, q, k and v without biases, a gelu MLP (n_inner, 4
 * n_embd where absent) with them, the head biased; GPTJConfig's defaults where keys are
 * left out. */
static void gptj_config(HfCfg *c, Arch *a)
{
    a->d.V = hf_cfg_int(c, "vocab_size", 50400);
    a->d.D = hf_cfg_int(c, "n_embd", 4096);
    a->d.L = hf_cfg_int(c, "n_layer", 28);
    a->d.H = a->d.KV = hf_cfg_int(c, "n_head", 16);
    a->d.FF = hf_cfg_get(c, "n_inner") ? hf_cfg_int(c, "n_inner", -1) : 4 * a->d.D;
    a->d.max_pos = hf_cfg_int(c, "n_positions", 2048);
    a->d.mlp_bias = a->head_bias = 1;
    a->d.tie = hf_cfg_bool(c, "tie_word_embeddings", 0);
    a->d.rope_pairs_adjacent = 1;
    a->layernorm = 1;
    a->mlp = MLP_GELU;
    a->block = BLOCK_SHARED_NORM;
    a->eps = hf_cfg_num(c, "layer_norm_epsilon", 1e-5);
    a->act = hf_gelu_approximate(c, "activation_function", "gelu_new");
    a->theta = 10000;
    head_dims(c, a, 0);
    int64_t hd = hf_head_dim(&a->d);
    int64_t rd = hf_cfg_get(c, "rotary_dim") ? hf_cfg_int(c, "rotary_dim", -1) : hd;
    if (rd > hd || rd % 2)
        hf_cfg_error(c, "rotary_dim", "%lld of heads %lld wide: trainc's rope rotates an even "
                     "number of a head's dimensions", (long long)rd, (long long)hd);
    a->d.rope_dims = rd < hd ? rd : 0;
}

/* Falcon's block: with parallel_attn the attention and the MLP in parallel, off one
 * layernorm (the old architecture; the new one with num_ln_in_parallel_attn 1, as
 * transformers 4.44 on read it: Falcon 2) or one each (the new architecture's ln_attn
 * and ln_mlp: Falcon 40B and 180B), else one after the other (the new architecture
 * then refused: transformers 4.40 reads it as parallel, 4.44 on as sequential) */
static int falcon_block(HfCfg *c, int new)
{
    int par = hf_cfg_bool(c, "parallel_attn", 1);
    int64_t lns = hf_cfg_get(c, "num_ln_in_parallel_attn")
                      ? hf_cfg_int(c, "num_ln_in_parallel_attn", -1) : new ? 2 : 1;
    if (new && !par)
        hf_cfg_error(c, "parallel_attn", "false with new_decoder_architecture: transformers' "
                     "releases read it differently");
    if (lns != 1 && lns != 2)
        hf_cfg_error(c, "num_ln_in_parallel_attn", "%lld: 1 or 2 expected", (long long)lns);
    return !par ? BLOCK_SEQUENTIAL : new && lns == 2 ? BLOCK_PARALLEL : BLOCK_SHARED_NORM;
}

/* Falcon: one query_key_value (each key/value head's rows after its query heads': one
 * key/value head with multi_query, Falcon 7B's; else one per head, or with
 * new_decoder_architecture num_kv_heads), a rope over whole heads (rope_theta; linear
 * scaling or none), biases where `bias` is, a gelu MLP (ffn_hidden_size, 4 hidden_size
 * where absent), the block falcon_block says; the head tied unless tie_word_embeddings
 * is false; FalconConfig's defaults where keys are left out. ALiBi is refused. */
static void falcon_config(HfCfg *c, Arch *a)
{
    a->d.V = hf_cfg_int(c, "vocab_size", 65024);
    a->d.D = hf_cfg_int(c, "hidden_size", 4544);
    a->d.L = hf_cfg_int(c, "num_hidden_layers", 32);
    a->d.H = hf_cfg_int(c, "num_attention_heads", 71);
    int new = hf_cfg_bool(c, "new_decoder_architecture", 0);
    int64_t kv = hf_cfg_int(c, "num_kv_heads", a->d.H);   /* read by the new architecture */
    int mq = hf_cfg_bool(c, "multi_query", 1);           /* ignored by the new architecture */
    a->d.KV = new ? kv : mq ? 1 : a->d.H;
    a->d.FF = hf_cfg_int(c, "ffn_hidden_size", 4 * a->d.D);
    a->d.max_pos = hf_cfg_int(c, "max_position_embeddings", 2048);
    a->d.bias = hf_cfg_bool(c, "bias", 0) ? HF_BIAS_ALL : HF_BIAS_NONE;
    a->d.mlp_bias = a->d.bias == HF_BIAS_ALL;
    a->d.tie = hf_cfg_bool(c, "tie_word_embeddings", 1);
    a->layernorm = 1;
    a->mlp = MLP_GELU;
    a->block = falcon_block(c, new);
    a->eps = hf_cfg_num(c, "layer_norm_epsilon", 1e-5);
    a->act = hf_gelu_approximate(c, "activation", "gelu");
    a->theta = hf_cfg_num(c, "rope_theta", 10000);
    a->scaling = linear_scaling(c, "Falcon");
    if (hf_cfg_bool(c, "alibi", 0))
        hf_cfg_error(c, "alibi", "true: trainc's attention takes its positions from rope");
    if (hf_cfg_bool(c, "apply_residual_connection_post_layernorm", 0))
        hf_cfg_error(c, "apply_residual_connection_post_layernorm", "true: trainc's residuals "
                     "add the block's input, not its norm's output");
    head_dims(c, a, 0);
}

/* GPT-NeoX (Pythia, GPT-NeoX-20B): layernorms, a partial rope (rotary_pct, 0.25 where
 * absent; rotary_emb_base its theta; linear scaling or none), attention biased where
 * attention_bias is, a gelu MLP with biases, the attention and the MLP in parallel
 * (use_parallel_residual, true where absent: x + attn(ln1(x)) + mlp(ln2(x))) or one
 * after the other; GPTNeoXConfig's defaults where keys are left out. */
static void neox_config(HfCfg *c, Arch *a)
{
    a->d.V = hf_cfg_int(c, "vocab_size", 50432);
    a->d.D = hf_cfg_int(c, "hidden_size", 6144);
    a->d.L = hf_cfg_int(c, "num_hidden_layers", 44);
    a->d.H = a->d.KV = hf_cfg_int(c, "num_attention_heads", 64);
    a->d.FF = hf_cfg_int(c, "intermediate_size", 24576);
    a->d.max_pos = hf_cfg_int(c, "max_position_embeddings", 2048);
    a->d.bias = hf_cfg_bool(c, "attention_bias", 1) ? HF_BIAS_ALL : HF_BIAS_NONE;
    a->d.mlp_bias = 1;
    a->d.tie = hf_cfg_bool(c, "tie_word_embeddings", 0);
    a->layernorm = 1;
    a->mlp = MLP_GELU;
    a->eps = hf_cfg_num(c, "layer_norm_eps", 1e-5);
    a->act = hf_gelu_approximate(c, "hidden_act", "gelu");
    a->theta = hf_cfg_num(c, "rotary_emb_base", 10000);
    alias(c, "rotary_emb_base", "rope_theta", a->theta);
    alias(c, "rotary_pct", "partial_rotary_factor", hf_cfg_num(c, "rotary_pct", 0.25));
    a->block = hf_cfg_bool(c, "use_parallel_residual", 1) ? BLOCK_PARALLEL : BLOCK_SEQUENTIAL;
    a->scaling = linear_scaling(c, "GPT-NeoX");
    head_dims(c, a, 0);
    rope_dims(c, a, "rotary_pct", 0.25);
}

/* Phi-3's own keys: a rope over whole heads or (Phi-4-mini) part of each
 * (partial_rotary_factor), scaled as longrope (Phi-3's 128k models, Phi-4-mini: the
 * factor lists one number per rotated pair) or not; its modeling code has no attention
 * biases whatever attention_bias says. */
static void phi3_config(HfCfg *c, Arch *a)
{
    hf_cfg_get(c, "attention_bias");
    rope_dims(c, a, "partial_rotary_factor", 1.0);
    a->scaling = phi3_scaling(c, a);
}

/* StableLM (StableLM 2, StableLM-3B-4e1t, StableLM Zephyr): layernorms (layer_norm_eps),
 * Llama's attention with q, k and v biased where use_qkv_bias is, a partial rope
 * (partial_rotary_factor, 0.25 where absent) with linear scaling or none, the gated MLP.
 * Its per-head qk layernorms and the parallel residual are refused. */
static void stablelm_config(HfCfg *c, Arch *a)
{
    a->layernorm = 1;
    a->eps = hf_cfg_num(c, "layer_norm_eps", 1e-5);
    a->d.bias = hf_cfg_bool(c, "use_qkv_bias", 0) ? HF_BIAS_QKV : HF_BIAS_NONE;
    if (hf_cfg_bool(c, "qk_layernorm", 0))
        hf_cfg_error(c, "qk_layernorm", "true: StableLM's q and k layernorms have weights per "
                     "head; trainc's qk_norm is an RMSNorm the heads share");
    if (hf_cfg_bool(c, "use_parallel_residual", 0))
        hf_cfg_error(c, "use_parallel_residual", "true: its one layernorm feeds both branches; "
                     "trainc imports GPT-NeoX's parallel blocks, whose branches have a norm each");
    if (a->d.HD)
        hf_cfg_error(c, "head_dim", "StableLM's heads are hidden_size / num_attention_heads wide");
    a->scaling = linear_scaling(c, "StableLM");
    rope_dims(c, a, "partial_rotary_factor", 0.25);
}

/* Nemotron (Minitron, Nemotron-Mini): layernorms by 1 + weight (norm_eps; hf_nemotron),
 * Llama's attention (attention_bias on q, k, v and o), a partial rope
 * (partial_rotary_factor, 0.5 where absent), an MLP up_proj, relu2 (a squared relu),
 * down_proj, biased where mlp_bias is. Its modeling code reads no rope_scaling: one
 * given is refused. */
static void nemotron_config(HfCfg *c, Arch *a)
{
    a->layernorm = 1;
    a->mlp = MLP_RELU2;
    a->eps = hf_cfg_num(c, "norm_eps", 1e-5);
    a->d.mlp_bias = hf_cfg_bool(c, "mlp_bias", 0);
    const char *act = hf_cfg_str(c, "hidden_act", "relu2");
    if (strcmp(act, "relu2"))
        hf_cfg_error(c, "hidden_act", "\"%s\": Nemotron's MLP in trainc is relu2 (squared_relu)",
                     act);
    if (hf_cfg_get(c, "rope_scaling"))
        hf_cfg_error(c, "rope_scaling", "Nemotron's modeling code does not read it: trainc "
                     "would not know what the model computes");
    rope_dims(c, a, "partial_rotary_factor", 0.5);
}

/* A Granite multiplier KEY (GraniteConfig's default 1): a number > 0 in float's range */
static double multiplier(HfCfg *c, const char *key)
{
    double m = hf_cfg_num(c, key, 1.0);
    if (!(m >= FLT_MIN && m <= FLT_MAX))
        hf_cfg_error(c, key, "%g: a number > 0 expected", m);
    return m;
}

/* Granite: Llama's layers with four factors, each a layer where it is not 1: the
 * embedding times embedding_multiplier, the scores times attention_multiplier (the
 * attention's scale; 1, not 1 / sqrt(head width), when absent), each branch's output
 * times residual_multiplier, the logits divided by logits_scaling. */
static void granite_config(HfCfg *c, Arch *a)
{
    double em = multiplier(c, "embedding_multiplier"), am = multiplier(c, "attention_multiplier");
    double rm = multiplier(c, "residual_multiplier"), ls = multiplier(c, "logits_scaling");
    a->embed_scale = em != 1 ? em : 0;
    a->residual_scale = rm != 1 ? rm : 0;
    a->logits_div = ls != 1 ? ls : 0;
    if ((float)am != (float)(1.0 / sqrt((double)hf_head_dim(&a->d))))
        a->att_scale = am;
}

/* Gemma's own keys: the MLP's activation is hidden_activation, or gelu_pytorch_tanh
 * when that is absent or null (transformers 4.40 on then ignore hidden_act, warning);
 * Gemma's modeling code reads no rope_scaling, so one given is refused rather than
 * dropped (Gemma 3's global layers take it: gemma3_config). The embedding is scaled by
 * sqrt(hidden_size) (the norms' 1 + weight: hf_gemma). */
static const char *gemma_config(HfCfg *c, Arch *a, int gemma3)
{
    if (!gemma3 && hf_cfg_get(c, "rope_scaling"))
        hf_cfg_error(c, "rope_scaling", "Gemma's modeling code does not read it: trainc "
                     "would not know what the model computes");
    a->embed_scale = sqrt((double)a->d.D);
    hf_cfg_get(c, "hidden_act");
    return hf_cfg_get(c, "hidden_activation") ? "hidden_activation" : NULL;
}

/* rope_parameters (transformers 5), or one of its entries by layer type, at KEY:
 * {"rope_type": "default", "rope_theta": T}, whose T it returns, or where `linear` is
 * given, {"rope_type": "linear", "factor": F, "rope_theta": T} too, F as SPEC's linear
 * scaling in *linear (else NULL); any other rope is refused. */
static double default_rope(HfCfg *c, const cJSON *p, const char *key, cJSON **linear)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "rope_type");
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(p, "rope_theta");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(p, "factor");
    int lin = linear && cJSON_IsString(t) && !strcmp(t->valuestring, "linear") &&
              cJSON_IsNumber(f) && f->valuedouble >= 1 && cJSON_GetArraySize(p) == 3;
    if (!lin && (!cJSON_IsString(t) || strcmp(t->valuestring, "default") ||
                 cJSON_GetArraySize(p) != 2))
        hf_cfg_error(c, key, "{\"rope_type\": \"default\", \"rope_theta\": T}%s expected: "
                     "trainc's rope has no scaling of this kind here",
                     linear ? " or linear's with a factor of at least 1" : "");
    if (!cJSON_IsNumber(th))
        hf_cfg_error(c, key, "rope_theta: a number expected");
    if (linear)
        *linear = NULL;
    if (lin) {
        *linear = cJSON_CreateObject();
        cJSON_AddStringToObject(*linear, "rope_type", "linear");
        cJSON_AddNumberToObject(*linear, "factor", f->valuedouble);
    }
    return th->valuedouble;
}

/* A per-layer list KEY of L entries, each SPECIAL or OTHER (JSON strings or numbers, as
 * cJSON prints them): the N whose every N-th entry ((i + 1) % N == 0) is SPECIAL and the
 * rest OTHER (past L when none is); a list no N describes is refused. */
static int64_t list_period(HfCfg *c, const char *key, int64_t L, const char *special,
                           const char *other)
{
    const cJSON *list = hf_cfg_get(c, key);
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) != L)
        hf_cfg_error(c, key, "a list of num_hidden_layers (%lld) entries expected", (long long)L);
    int64_t i = 0, n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, list) {
        char *v = cJSON_PrintUnformatted(e);
        int is = !strcmp(v, special);
        if (!is && strcmp(v, other))
            hf_cfg_error(c, key, "entry %lld: %s or %s expected, got %s", (long long)i, special,
                         other, v);
        if (is && !n)
            n = i + 1;
        free(v);
        i++;
    }
    n = n ? n : L + 1;
    i = 0;
    cJSON_ArrayForEach(e, list) {
        char *v = cJSON_PrintUnformatted(e);
        if (!strcmp(v, special) != ((i + 1) % n == 0))
            hf_cfg_error(c, key, "layer %lld breaks the pattern of one %s in %lld: trainc's "
                         "interleave sets apart every N-th layer", (long long)i, special,
                         (long long)n);
        free(v);
        i++;
    }
    return n;
}

/* Which of Gemma 3's layers are global: layer_types (transformers 4.53 on), else every
 * sliding_window_pattern-th, as N. */
static int64_t layer_pattern(HfCfg *c, int64_t L)
{
    const char *key = hf_cfg_get(c, "_sliding_window_pattern") ? "_sliding_window_pattern"
                                                                 : "sliding_window_pattern";
    int64_t n = hf_cfg_int(c, key, 6);
    if (!hf_cfg_get(c, "layer_types"))
        return n;
    return list_period(c, "layer_types", L, "\"full_attention\"", "\"sliding_attention\"");
}

/* SmolLM3: Llama's layers, every no_rope_layer_interval-th (or as no_rope_layers, 0 for
 * no rope, lists them) without rope; its tied default, rope_parameters (transformers 5)
 * read; windows (use_sliding_window) refused. */
static void smollm3_config(HfCfg *c, Arch *a)
{
    a->nope_every = hf_cfg_int(c, "no_rope_layer_interval", 4);
    if (hf_cfg_get(c, "no_rope_layers"))
        a->nope_every = list_period(c, "no_rope_layers", a->d.L, "0", "1");
    if (hf_cfg_bool(c, "use_sliding_window", 0))
        hf_cfg_error(c, "use_sliding_window", "true: SmolLM3 then windows only its layers "
                     "without rope; trainc's window is every layer's");
    hf_cfg_get(c, "sliding_window");
    if (hf_cfg_get(c, "layer_types"))
        list_period(c, "layer_types", a->d.L, "\"sliding_attention\"", "\"full_attention\"");
    const cJSON *rp = hf_cfg_get(c, "rope_parameters");
    if (rp)
        a->theta = default_rope(c, rp, "rope_parameters", NULL);
}

/* Gemma 2 and 3's query_pre_attn_scalar: the scores are scaled by its -1/2 power, the
 * attention's scale where that is not the head width's */
static void query_scalar(HfCfg *c, Arch *a, double dflt)
{
    int64_t hd = hf_head_dim(&a->d);
    double qs = hf_cfg_num(c, "query_pre_attn_scalar", dflt);
    if (!(qs > 0) || 1.0 / sqrt(qs) < FLT_MIN || 1.0 / sqrt(qs) > FLT_MAX)
        hf_cfg_error(c, "query_pre_attn_scalar", "%g: expected a number > 0 (the scores are "
                     "scaled by its -1/2 power)", qs);
    if (qs != (double)hd)
        a->att_scale = 1.0 / sqrt(qs);
}

/* A soft-cap key of Gemma 2's: absent, the class's default; null, none (0); else a
 * number > 0 in float's range. */
static double softcap_key(HfCfg *c, const char *key, double dflt)
{
    if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(c->root, key))) {
        hf_cfg_get(c, key);   /* read: null, no cap */
        return 0;
    }
    double cap = hf_cfg_num(c, key, dflt);
    if (!(cap >= FLT_MIN && cap <= FLT_MAX))
        hf_cfg_error(c, key, "%g: a soft-cap > 0 (or null: none) expected", cap);
    return cap;
}

/* Cohere 2 (Command R7B, Command A; transformers 4.48 on): Cohere's layers with every
 * sliding_window_pattern-th layer global, without a window and without rope, the
 * others windowed (sliding_window: a query sees that many positions, itself included,
 * as SPEC's window): the attention's window and "interleave": {"every": N, "window":
 * null, "rope": null}. */
static void cohere2_config(HfCfg *c, Arch *a)
{
    cohere_config(c, a);
    a->window = hf_cfg_int(c, "sliding_window", 4096);
    a->global_every = hf_cfg_int(c, "sliding_window_pattern", 4);
    a->global_nope = 1;
    if (hf_cfg_get(c, "layer_types")) {   /* transformers 4.53 on; 4.48 reads the pattern */
        int64_t n = list_period(c, "layer_types", a->d.L, "\"full_attention\"",
                                "\"sliding_attention\"");
        if (n != a->global_every && (n <= a->d.L || a->global_every <= a->d.L))
            hf_cfg_error(c, "layer_types", "a global layer every %lld where "
                         "sliding_window_pattern says every %lld: transformers' releases would "
                         "read them apart", (long long)n, (long long)a->global_every);
    }
    hf_cfg_get(c, "cache_implementation");
}

/* Gemma 2: Gemma's layers with a norm after each branch as well (no qk_norm), the even
 * layers windowed and the odd ones global (or as layer_types lists them), one rope; the
 * scores scaled by query_pre_attn_scalar^-1/2 and soft-capped at attn_logit_softcapping,
 * the logits at final_logit_softcapping (Gemma2Config's defaults: 4096, 256, 50, 30). */
static void gemma2_config(HfCfg *c, Arch *a)
{
    a->post_norms = 1;
    a->window = hf_cfg_int(c, "sliding_window", 4096);
    a->global_every = 2;
    if (hf_cfg_get(c, "layer_types"))
        a->global_every = list_period(c, "layer_types", a->d.L, "\"full_attention\"",
                                      "\"sliding_attention\"");
    query_scalar(c, a, 256);
    a->att_softcap = softcap_key(c, "attn_logit_softcapping", 50.0);
    a->final_cap = softcap_key(c, "final_logit_softcapping", 30.0);
}

/* Gemma 3's text model: Gemma's, with a norm after each branch as well, qk_norm (by
 * 1 + weight), and windowed (local) layers interleaved with global ones, each kind
 * with its rope theta, the global ones' scaled by rope_scaling (the 4B and larger:
 * linear, factor 8); the scores scaled by query_pre_attn_scalar^-1/2 (the head width's,
 * but the 27B's 168 over heads 128 wide: the attention's scale). Soft-capping and
 * bidirectional attention are refused. */
static void gemma3_config(HfCfg *c, Arch *a)
{
    a->post_norms = 1;
    a->d.qk_norm = 1;
    a->window = hf_cfg_int(c, "sliding_window", 4096);
    a->global_every = layer_pattern(c, a->d.L);
    a->global_theta = hf_cfg_num(c, "rope_theta", 1e6);
    a->global_scaling = rope_scaling(c);
    a->theta = hf_cfg_num(c, "rope_local_base_freq", 1e4);
    const cJSON *rp = hf_cfg_get(c, "rope_parameters");
    if (rp) {
        a->theta = default_rope(c, cJSON_GetObjectItemCaseSensitive(rp, "sliding_attention"),
                                "rope_parameters.sliding_attention", NULL);
        a->global_theta = default_rope(c, cJSON_GetObjectItemCaseSensitive(rp, "full_attention"),
                                       "rope_parameters.full_attention", &a->global_scaling);
    }
    query_scalar(c, a, 256);
    static const char *const caps[] = {"final_logit_softcapping", "attn_logit_softcapping"};
    for (int k = 0; k < 2; k++)
        if (hf_cfg_get(c, caps[k]))
            hf_cfg_error(c, caps[k], "trainc does not soft-cap (Gemma 3's checkpoints have null)");
    if (hf_cfg_bool(c, "use_bidirectional_attention", 0))
        hf_cfg_error(c, "use_bidirectional_attention", "true: trainc's language models are "
                     "causal");
}

/* StarCoder2: Llama's attention (rope, kv heads; biases on q, k, v and o where use_bias
 * is true; a window as Mistral's) in GPT-2's blocks: layernorms (norm_epsilon), a gelu
 * MLP (c_fc, c_proj) with biases where use_bias is. Its modeling code in transformers
 * 4.40 reads no rope_scaling: one given is refused. */
static void starcoder2_config(HfCfg *c, Arch *a)
{
    a->layernorm = 1;
    a->mlp = MLP_GELU;
    a->eps = hf_cfg_num(c, "norm_epsilon", 1e-5);
    a->d.bias = hf_cfg_bool(c, "use_bias", 1) ? HF_BIAS_ALL : HF_BIAS_NONE;
    a->d.mlp_bias = a->d.bias == HF_BIAS_ALL;
    a->act = hf_gelu_approximate(c, "hidden_act", "gelu_pytorch_tanh");
    if (hf_cfg_get(c, "rope_scaling"))
        hf_cfg_error(c, "rope_scaling", "StarCoder2's modeling code does not read it: trainc "
                     "would not know what the model computes");
    if (hf_cfg_get(c, "sliding_window"))   /* as Mistral's (llama_config) */
        a->window = hf_cfg_int(c, "sliding_window", -1);
    if (a->d.HD)
        hf_cfg_error(c, "head_dim", "StarCoder2's heads are hidden_size / num_attention_heads "
                     "wide");
}

/* The MLP's glu act from config key KEY (NULL: gelu_pytorch_tanh, Gemma's default). */
static const char *glu_act(HfCfg *c, const char *key)
{
    const char *act = key ? hf_cfg_str(c, key, "silu") : "gelu_pytorch_tanh";
    const char *a = !strcmp(act, "silu") ? "silu" : !strcmp(act, "gelu") ? "gelu"
                  : !strcmp(act, "gelu_pytorch_tanh") || !strcmp(act, "gelu_new") ? "gelu_tanh"
                  : !strcmp(act, "relu") ? "relu" : !strcmp(act, "sigmoid") ? "sigmoid" : NULL;
    if (!a)
        hf_cfg_error(c, key, "\"%s\": trainc's glu takes silu, gelu, gelu_pytorch_tanh, relu "
                     "or sigmoid", act);
    return a;
}

/* Gemma3TextConfig's defaults for the sizes: a multimodal checkpoint's text_config
 * lists only what differs from them (transformers fills in the rest) */
static void gemma3_text_defaults(HfCfg *c)
{
    static const struct {
        const char *key;
        double v;
    } d[] = {{"vocab_size", 262208}, {"hidden_size", 2304}, {"intermediate_size", 9216},
             {"num_hidden_layers", 26}, {"num_attention_heads", 8}, {"num_key_value_heads", 4}};
    for (size_t k = 0; k < sizeof d / sizeof *d; k++)
        hf_cfg_default(c, d[k].key, d[k].v);
}

/* OLMo 2: Llama's layers with a norm after each branch and none before it, q_norm and
 * k_norm over all of q's and k's heads (the attention's qk_norm "all_heads"), all with
 * rms_norm_eps (Olmo2Config's default 1e-5) */
static void olmo2_config(HfCfg *c, Arch *a)
{
    a->eps = hf_cfg_num(c, "rms_norm_eps", 1e-5);
    a->post_norms = a->no_pre_norms = 1;
    a->d.qk_norm = HF_QK_NORM_ALL_HEADS;
    if (a->d.HD)   /* 4.47's Olmo2Attention reads none; later ones read it */
        hf_cfg_error(c, "head_dim", "%lld: OLMo 2's heads are hidden_size / num_attention_heads "
                     "wide (transformers 4.47 reads no head_dim)", (long long)a->d.HD);
}

/* GLM (GLM-4-9B, transformers 4.46 on): Llama's layers with q, k and v biased where
 * attention_bias is (true where absent: the attention's "bias": "qkv"), the MLP's gate
 * and up fused, a partial rope (partial_rotary_factor, 0.5 where absent) whose pairs are
 * adjacent dimensions (their rows reordered, as GPT-J's), GlmConfig's defaults (head_dim
 * 128, rms_norm_eps 1.5625e-7). transformers 4.47's o_proj takes hidden_size inputs:
 * heads times head_dim must be hidden_size. Its rope takes no scaling. */
static void glm_config(HfCfg *c, Arch *a)
{
    a->eps = hf_cfg_num(c, "rms_norm_eps", 1.5625e-7);
    a->d.bias = hf_cfg_bool(c, "attention_bias", 1) ? HF_BIAS_QKV : HF_BIAS_NONE;
    if (a->d.HD)
        hf_cfg_error(c, "head_dim", "%lld over %lld heads: GLM's o_proj takes hidden_size %lld "
                     "inputs (transformers 4.47)", (long long)a->d.HD, (long long)a->d.H,
                     (long long)a->d.D);
    rope_dims(c, a, "partial_rotary_factor", 0.5);
    a->d.rope_pairs_adjacent = 1;
    if (hf_cfg_get(c, "rope_scaling"))
        hf_cfg_error(c, "rope_scaling", "GLM's rope takes no scaling (transformers 4.47)");
}

/* The router's keys of a mixture of experts: transformers' load-balancing loss, added
 * where output_router_logits is true (router_aux_loss_coef times it: the moe layers'
 * aux_loss, AUX_DFLT where the key is absent); router jitter, which trainc has not */
static void router_keys(HfCfg *c, Arch *a, const char *experts, int64_t dflt_e, int64_t dflt_k,
                        double aux_dflt)
{
    a->mlp = MLP_MOE;
    a->d.E = hf_cfg_int(c, experts, dflt_e);
    a->top_k = hf_cfg_int(c, "num_experts_per_tok", dflt_k);
    if (a->top_k < 1 || a->top_k > a->d.E || a->top_k > RT_MOE_MAX_K)
        hf_cfg_error(c, "num_experts_per_tok", "%lld: trainc takes 1 to %d experts a token, "
                     "at most %s (%lld)", (long long)a->top_k, RT_MOE_MAX_K, experts,
                     (long long)a->d.E);
    double coef = hf_cfg_num(c, "router_aux_loss_coef", aux_dflt);
    a->aux_loss = hf_cfg_bool(c, "output_router_logits", 0) ? coef : 0;
    if (!(coef >= 0 && coef <= FLT_MAX))
        hf_cfg_error(c, "router_aux_loss_coef", "%g: a number >= 0 expected", coef);
    if (hf_cfg_num(c, "router_jitter_noise", 0) != 0)
        hf_cfg_error(c, "router_jitter_noise", "trainc's router has no jitter");
}

/* Mixtral: Mistral's layers, its MLP a mixture of num_local_experts glu experts, each
 * token's num_experts_per_tok of them, their weights renormalized; MixtralConfig's
 * defaults (rms_norm_eps 1e-5) */
static void mixtral_config(HfCfg *c, Arch *a)
{
    a->eps = hf_cfg_num(c, "rms_norm_eps", 1e-5);
    router_keys(c, a, "num_local_experts", 8, 2, 0.001);
    a->norm_topk = 1;
}

/* OLMoE: Llama's layers with OLMo 2's q and k norms (over all heads), its MLP a mixture
 * of num_experts glu experts whose weights are the router's probabilities as they are
 * (norm_topk_prob false, OlmoeConfig's default); rms_norm_eps 1e-5 where absent */
static void olmoe_config(HfCfg *c, Arch *a)
{
    a->eps = hf_cfg_num(c, "rms_norm_eps", 1e-5);
    a->d.qk_norm = HF_QK_NORM_ALL_HEADS;
    router_keys(c, a, "num_experts", 64, 8, 0.01);
    a->norm_topk = hf_cfg_bool(c, "norm_topk_prob", 0);
    if (hf_cfg_get(c, "clip_qkv"))
        hf_cfg_error(c, "clip_qkv", "trainc does not clip q, k and v");
}

/* Granite-MoE (transformers 4.45 on): Granite's layers and factors, the MLP a mixture of
 * num_local_experts glu experts intermediate_size wide, each token's num_experts_per_tok,
 * their weights the softmax of the chosen logits (the renormalized top k) */
static void granitemoe_config(HfCfg *c, Arch *a)
{
    granite_config(c, a);
    router_keys(c, a, "num_local_experts", 8, 2, 0.001);
    a->norm_topk = 1;
}

/* Qwen's mixtures: every MLP a mixture of num_experts glu experts moe_intermediate_size
 * wide (dflt_ff where absent), each token's num_experts_per_tok, renormalized where
 * norm_topk_prob is; intermediate_size is the dense MLPs', which trainc's layout has
 * none of (mlp_only_layers, decoder_sparse_step > 1: refused) */
static void qwen_moe_keys(HfCfg *c, Arch *a, const char *name, int64_t dflt_e, int64_t dflt_k,
                          int64_t dflt_ff)
{
    router_keys(c, a, "num_experts", dflt_e, dflt_k, 0.001);
    a->norm_topk = hf_cfg_bool(c, "norm_topk_prob", 0);
    a->d.FF = hf_cfg_int(c, "moe_intermediate_size", dflt_ff);
    if (hf_cfg_int(c, "decoder_sparse_step", 1) != 1)
        hf_cfg_error(c, "decoder_sparse_step", "other than 1: %s then has dense MLPs between "
                     "its mixtures, and trainc's blocks are alike", name);
    const cJSON *dense = hf_cfg_get(c, "mlp_only_layers");
    if (dense && (!cJSON_IsArray(dense) || cJSON_GetArraySize(dense)))
        hf_cfg_error(c, "mlp_only_layers", "not empty: %s then has dense MLPs among its "
                     "mixtures, and trainc's blocks are alike", name);
}

/* Qwen3-MoE (transformers 4.51 on): Qwen3's layers (q and k norms per head, head_dim),
 * Qwen's mixture (Qwen3MoeConfig's defaults where absent) */
static void qwen3_moe_config(HfCfg *c, Arch *a)
{
    a->d.qk_norm = 1;
    qwen_moe_keys(c, a, "Qwen3-MoE", 128, 8, 768);
}

/* Qwen2-MoE (Qwen1.5-MoE, Qwen2-57B-A14B): Qwen2's layers (q, k and v biased), Qwen's
 * mixture and beside it a shared expert shared_expert_intermediate_size wide, its
 * output times the sigmoid of shared_expert_gate (Qwen2MoeConfig's defaults where
 * absent) */
static void qwen2_moe_config(HfCfg *c, Arch *a)
{
    qwen_moe_keys(c, a, "Qwen2-MoE", 60, 4, 1408);
    a->d.SFF = hf_cfg_int(c, "shared_expert_intermediate_size", 5632);
    a->shared_gate = 1;
    if (a->d.SFF < 1)
        hf_cfg_error(c, "shared_expert_intermediate_size", "%lld: a width >= 1 expected",
                     (long long)a->d.SFF);
}

/* What reads a Llama kin's config apart from Llama's: the config class's defaults for
 * keys a config.json may leave out; OWN_* set: the family reads (or has none of) its
 * norms' eps, its rope scaling, its biases itself, in place of rms_norm_eps,
 * rope_scaling and attention_bias; its hook, run after the shared keys. */
enum { OWN_EPS = 1, OWN_SCALING = 2, OWN_BIAS = 4 };
typedef struct Kin {
    const char *type;
    int64_t max_pos;
    double theta;
    int tie;
    int64_t head_dim;          /* 0: hidden_size / num_attention_heads */
    int own;                   /* OWN_* */
    void (*config)(HfCfg *c, Arch *a);
} Kin;

static const Kin *kin_of(const char *type)
{
    static const Kin k[] = {
        {"gemma", 8192, 1e4, 1, 256, OWN_SCALING, NULL},
        {"gemma2", 8192, 1e4, 1, 256, OWN_SCALING, gemma2_config},
        {"gemma3_text", 131072, 1e6, 1, 256, OWN_SCALING, gemma3_config},
        {"smollm3", 32768, 2e6, 1, 0, 0, smollm3_config},
        {"granite", 2048, 1e4, 0, 0, 0, granite_config},
        {"granitemoe", 2048, 1e4, 0, 0, 0, granitemoe_config},
        {"phi3", 4096, 1e4, 0, 0, OWN_SCALING | OWN_BIAS, phi3_config},
        {"starcoder2", 4096, 1e4, 1, 0, OWN_EPS | OWN_SCALING | OWN_BIAS, starcoder2_config},
        {"stablelm", 4096, 1e4, 0, 0, OWN_EPS | OWN_SCALING | OWN_BIAS, stablelm_config},
        {"nemotron", 4096, 1e4, 0, 0, OWN_EPS | OWN_SCALING, nemotron_config},
        {"olmo", 2048, 1e4, 0, 0, OWN_EPS | OWN_SCALING, olmo_config},
        {"olmo2", 2048, 1e4, 0, 0, 0, olmo2_config},
        {"mixtral", 131072, 1e6, 0, 0, OWN_EPS, mixtral_config},
        {"olmoe", 4096, 1e4, 0, 0, OWN_EPS, olmoe_config},
        {"qwen3_moe", 32768, 1e4, 0, 0, 0, qwen3_moe_config},
        {"qwen2_moe", 32768, 1e4, 0, 0, OWN_BIAS, qwen2_moe_config},
        {"glm", 131072, 1e4, 0, 128, OWN_SCALING | OWN_BIAS, glm_config},
        {"cohere", 8192, 1e4, 1, 0, OWN_EPS | OWN_SCALING, cohere_config},
        {"cohere2", 8192, 1e4, 1, 0, OWN_EPS | OWN_SCALING, cohere2_config},
        {"phi", 2048, 1e4, 0, 0, OWN_EPS | OWN_SCALING | OWN_BIAS, phi_config},
        {"qwen2", 2048, 1e4, 0, 0, OWN_BIAS, NULL},   /* q, k and v biased, o not */
        {NULL, 2048, 1e4, 0, 0, 0, NULL}};
    int n = 0;
    while (k[n].type && strcmp(k[n].type, type))
        n++;
    return &k[n];
}

/* The sizes every Llama kin's config holds under Llama's keys */
static void llama_sizes(HfCfg *c, Arch *a, const Kin *k)
{
    a->d.V = hf_cfg_int(c, "vocab_size", -1);
    a->d.D = hf_cfg_int(c, "hidden_size", -1);
    a->d.L = hf_cfg_int(c, "num_hidden_layers", -1);
    a->d.H = hf_cfg_int(c, "num_attention_heads", -1);
    a->d.KV = hf_cfg_int(c, "num_key_value_heads", a->d.H);
    a->d.FF = hf_cfg_int(c, "intermediate_size", -1);
    a->d.max_pos = hf_cfg_int(c, "max_position_embeddings", k->max_pos);
    a->d.tie = hf_cfg_bool(c, "tie_word_embeddings", k->tie);
}

/* Keys that count for some of Llama's kin alone: Mistral's and Phi-3's window (a query
 * sees sliding_window positions, itself included, as SPEC's window counts: transformers
 * 4.42 on; 4.40 and 4.41 let it see that many before itself, one more; tests/hf_io.py),
 * the qk norms' eps, Qwen's use_sliding_window */
static void llama_window_keys(HfCfg *c, Arch *a)
{
    int qwen2 = !strcmp(a->type, "qwen2") || !strcmp(a->type, "qwen2_moe");
    int gemma3 = !strcmp(a->type, "gemma3_text");
    int qwen3 = !strcmp(a->type, "qwen3") || !strcmp(a->type, "qwen3_moe");
    int mistral = !strcmp(a->type, "mistral") || !strcmp(a->type, "mixtral");
    if (mistral && a->d.bias)
        hf_cfg_error(c, "attention_bias", "true: transformers' %s has no attention biases",
                     a->type[2] == 'x' ? "Mixtral" : "Mistral");
    if ((mistral || !strcmp(a->type, "phi3")) && hf_cfg_get(c, "sliding_window"))
        a->window = hf_cfg_int(c, "sliding_window", -1);
    if (a->d.qk_norm == 1 && a->eps != 1e-6)
        hf_cfg_error(c, "rms_norm_eps", "%g: %s's q_norm and k_norm use it, trainc's qk_norm "
                     "uses 1e-6", a->eps, gemma3 ? "Gemma 3" : "Qwen3");
    if ((qwen3 || qwen2) && hf_cfg_bool(c, "use_sliding_window", 0))
        hf_cfg_error(c, "use_sliding_window", "true: %s then windows only the layers from "
                     "max_window_layers on; trainc's window is every layer's",
                     qwen2 ? "Qwen2" : "Qwen3");
    if (qwen3 || qwen2)   /* Qwen writes it: only use_sliding_window uses it */
        hf_cfg_get(c, "sliding_window");
}

static void llama_config(HfCfg *c, Arch *a)
{
    const Kin *k = kin_of(a->type);
    int gemma3 = !strcmp(a->type, "gemma3_text");
    int gemma = gemma3 || !strcmp(a->type, "gemma2") || !strcmp(a->type, "gemma");
    if (gemma3)
        gemma3_text_defaults(c);
    llama_sizes(c, a, k);
    a->eps = k->own & OWN_EPS ? 0 : hf_cfg_num(c, "rms_norm_eps", 1e-6);
    a->theta = hf_cfg_num(c, "rope_theta", k->theta);
    const char *act_key = gemma ? gemma_config(c, a, gemma3) : "hidden_act";
    a->scaling = k->own & OWN_SCALING ? NULL : rope_scaling(c);
    a->d.bias = !strcmp(a->type, "qwen2") || !strcmp(a->type, "qwen2_moe") ? HF_BIAS_QKV
              : !(k->own & OWN_BIAS) && hf_cfg_bool(c, "attention_bias", 0) ? HF_BIAS_ALL
                                                                         : HF_BIAS_NONE;
    a->d.qk_norm = !strcmp(a->type, "qwen3");
    head_dims(c, a, k->head_dim);
    if (k->config)
        k->config(c, a);
    if (strcmp(a->type, "nemotron") && hf_cfg_bool(c, "mlp_bias", 0))
        hf_cfg_error(c, "mlp_bias", "true: trainc's Llama MLP has no biases");
    if (a->mlp == MLP_GLU || a->mlp == MLP_MOE)
        a->act = glu_act(c, act_key);
    llama_window_keys(c, a);
}

/* Gemma 3's multimodal checkpoints (model_type gemma3: the 4B, 12B and 27B): the text
 * model's config is text_config (a Gemma3TextConfig, which the published files give
 * only where it differs from the class's defaults: gemma3_text_defaults); the vision
 * tower's keys are read past, as its tensors are (extra): trainc imports the text model
 * alone. Its head is tied. Returns the config to read on. */
static HfCfg *text_config(Imp *im, Arch *a)
{
    static const char *const vision[] = {"vision_config", "mm_tokens_per_image",
                                         "boi_token_index", "eoi_token_index", "image_token_index",
                                         "boi_token_id", "eoi_token_id", "image_token_id"};
    HfCfg *c = &im->cfg, *t = &im->text;
    for (size_t k = 0; k < sizeof vision / sizeof *vision; k++)
        hf_cfg_get(c, vision[k]);
    hf_cfg_sub(t, c, "text_config");
    for (HfCfg *x = c; x; x = x == c ? t : NULL)   /* either may say it */
        if (!hf_cfg_bool(x, "tie_word_embeddings", 1))
            hf_cfg_error(x, "tie_word_embeddings", "false: Gemma 3's multimodal checkpoints "
                         "tie their head to the embedding");
    const char *rest = hf_cfg_rest(c, hf_pretrained_keys);
    if (rest)
        hf_cfg_error(c, rest, "a key trainc does not know for gemma3: it cannot tell whether "
                     "the model computes what trainc would");
    const char *type = hf_cfg_str(t, "model_type", "gemma3_text");
    if (strcmp(type, "gemma3_text"))
        hf_cfg_error(t, "model_type", "\"%s\": Gemma 3's text model is gemma3_text", type);
    hf_cfg_pretrained(t);
    a->type = "gemma3_text";
    a->multimodal = 1;
    return t;
}

/* The families import reads: model_type, the architectures transformers names for it
 * (with a language model's head, bare), how its config reads (Gemma 3's image-text
 * checkpoints: its text_config, as gemma3_text), its tensors' table (NULL: Falcon's,
 * which its block's form picks) */
typedef struct Family {
    const char *type, *arch, *bare;
    void (*config)(HfCfg *c, Arch *a);
    const HfFamily *tensors;
} Family;

static const Family families[] = {
    {"gpt2", "GPT2LMHeadModel", "GPT2Model", gpt2_config, &hf_gpt2},
    {"gpt_bigcode", "GPTBigCodeForCausalLM", "GPTBigCodeModel", bigcode_config, &hf_bigcode},
    {"llama", "LlamaForCausalLM", "LlamaModel", llama_config, &hf_llama},
    {"mistral", "MistralForCausalLM", "MistralModel", llama_config, &hf_llama},
    {"mixtral", "MixtralForCausalLM", "MixtralModel", llama_config, &hf_mixtral},
    {"phi3", "Phi3ForCausalLM", "Phi3Model", llama_config, &hf_phi3},
    {"qwen2", "Qwen2ForCausalLM", "Qwen2Model", llama_config, &hf_llama},
    {"qwen3", "Qwen3ForCausalLM", "Qwen3Model", llama_config, &hf_llama},
    {"gemma", "GemmaForCausalLM", "GemmaModel", llama_config, &hf_gemma},
    {"gemma2", "Gemma2ForCausalLM", "Gemma2Model", llama_config, &hf_gemma3},
    {"gemma3_text", "Gemma3ForCausalLM", "Gemma3TextModel", llama_config, &hf_gemma3},
    {"gemma3", "Gemma3ForConditionalGeneration", "Gemma3Model", llama_config, &hf_gemma3},
    {"smollm3", "SmolLM3ForCausalLM", "SmolLM3Model", llama_config, &hf_llama},
    {"granite", "GraniteForCausalLM", "GraniteModel", llama_config, &hf_llama},
    {"granitemoe", "GraniteMoeForCausalLM", "GraniteMoeModel", llama_config, &hf_granitemoe},
    {"starcoder2", "Starcoder2ForCausalLM", "Starcoder2Model", llama_config, &hf_starcoder2},
    {"stablelm", "StableLmForCausalLM", "StableLmModel", llama_config, &hf_stablelm},
    {"nemotron", "NemotronForCausalLM", "NemotronModel", llama_config, &hf_nemotron},
    {"olmo", "OlmoForCausalLM", "OlmoModel", llama_config, &hf_olmo},
    {"olmo2", "Olmo2ForCausalLM", "Olmo2Model", llama_config, &hf_olmo2},
    {"olmoe", "OlmoeForCausalLM", "OlmoeModel", llama_config, &hf_olmoe},
    {"qwen3_moe", "Qwen3MoeForCausalLM", "Qwen3MoeModel", llama_config, &hf_qwen3_moe},
    {"qwen2_moe", "Qwen2MoeForCausalLM", "Qwen2MoeModel", llama_config, &hf_qwen2_moe},
    {"glm", "GlmForCausalLM", "GlmModel", llama_config, &hf_glm},
    {"opt", "OPTForCausalLM", "OPTModel", opt_config, &hf_opt},
    {"gpt_neo", "GPTNeoForCausalLM", "GPTNeoModel", neo_config, &hf_neo},
    {"cohere", "CohereForCausalLM", "CohereModel", llama_config, &hf_cohere},
    {"cohere2", "Cohere2ForCausalLM", "Cohere2Model", llama_config, &hf_cohere},
    {"phi", "PhiForCausalLM", "PhiModel", llama_config, &hf_phi},
    {"gpt_neox", "GPTNeoXForCausalLM", "GPTNeoXModel", neox_config, &hf_neox},
    {"gptj", "GPTJForCausalLM", "GPTJModel", gptj_config, &hf_gptj},
    {"falcon", "FalconForCausalLM", "FalconModel", falcon_config, NULL}};
enum { N_FAMILIES = sizeof families / sizeof *families };

/* The family of model_type TYPE, or exit 1 naming the ones there are */
static const Family *family_of(HfCfg *c, const char *type)
{
    for (int k = 0; k < N_FAMILIES; k++)
        if (!strcmp(families[k].type, type))
            return &families[k];
    char list[512] = "", *at = list;
    for (int k = 0; k < N_FAMILIES; k++)
        at += snprintf(at, sizeof list - (size_t)(at - list), "%s%s", k ? k + 1 < N_FAMILIES
                       ? ", " : " and " : "", families[k].type);
    hf_cfg_error(c, "model_type", "\"%s\": trainc imports %s (docs/commands.md says which "
                 "configs of each)", type, list);
}

/* architectures: the family's language model (or bare model), or its sequence classifier
 * (a->seq_cls) or token classifier (a->tok_cls) */
static void read_arch(HfCfg *c, const Family *f, Arch *a)
{
    const char *seq = hf_seq_arch(f->type, f->arch), *tok = hf_token_arch(f->type, f->arch);
    const cJSON *ar = hf_cfg_get(c, "architectures");
    for (const cJSON *e = ar ? ar->child : NULL; e; e = e->next) {
        int is_seq = cJSON_IsString(e) && seq && !strcmp(e->valuestring, seq);
        int is_tok = cJSON_IsString(e) && tok && !strcmp(e->valuestring, tok);
        a->seq_cls |= is_seq;
        a->tok_cls |= is_tok;
        if (!is_seq && !is_tok && (!cJSON_IsString(e) || (strcmp(e->valuestring, f->arch) &&
                                                          strcmp(e->valuestring, f->bare))))
            hf_cfg_error(c, "architectures", "%s%s: trainc imports %s (a language model's "
                         "head)%s%s%s%s", cJSON_IsString(e) ? e->valuestring : "a non-string",
                         cJSON_IsString(e) ? "" : " entry", f->arch, seq ? ", " : "",
                         seq ? seq : "", tok ? " or " : "", tok ? tok : "");
    }
    if (a->seq_cls && a->tok_cls)
        hf_cfg_error(c, "architectures", "a sequence classifier and a token classifier: "
                     "one head at a time");
}

/* The outputs of a sequence classifier's score in its config: num_labels, or id2label's
 * count (PretrainedConfig's default 2) */
static int64_t config_outputs(HfCfg *c)
{
    const cJSON *id = hf_cfg_get(c, "id2label"), *n = hf_cfg_get(c, "num_labels");
    return cJSON_IsObject(id) ? cJSON_GetArraySize(id) : cJSON_IsNumber(n) ? (int64_t)n->valuedouble
                                                                          : 2;
}

/* --task's preference loss (PREF_*), or -1: ipo is not a task (edit a dpo model's op) */
static int pref_task(const char *task)
{
    return !strcmp(task, "dpo") ? PREF_DPO : !strcmp(task, "simpo") ? PREF_SIMPO
         : !strcmp(task, "orpo") ? PREF_ORPO : !strcmp(task, "kto") ? PREF_KTO
         : !strcmp(task, "cpo") ? PREF_CPO : -1;
}

/* A reward model: --task reward over the family's language model (a new score of one
 * output) or its sequence classifier of one output, which imports as one without it
 * (TRL's RewardTrainer saves them so). Its rows hold a pair of texts (data pairs). */
static void reward_model(HfCfg *c, const Family *f, Arch *a, const char *labels, const char *task)
{
    int pref = task ? pref_task(task) : -1;
    if (task && strcmp(task, "reward") && pref < 0)
        error_input("import: --task %s: a %s takes --task reward (a reward model), dpo, simpo, "
                    "orpo, kto or cpo (preference optimization of the language model)", task,
                    f->type);
    if (task && strcmp(task, "reward")) {
        if (a->seq_cls || labels)
            error_input("import: --task %s trains a language model: %s", task, labels
                        ? "no --labels" : "this is a sequence classifier (import its language "
                        "model)");
        a->dpo = 1;
        a->pref = pref;
        return;
    }
    int one = a->seq_cls && config_outputs(c) == 1;
    if (!task && !one)
        return;
    if (labels)
        error_input("import: --labels with a reward model (one score for each text)");
    if (!hf_seq_arch(f->type, f->arch))
        error_input("import: --task reward: transformers has no sequence classifier for %s",
                    f->type);
    if (a->seq_cls && !one)
        error_input("import: --task reward: this %s has %lld outputs; a reward model's score "
                    "has one", hf_seq_arch(f->type, f->arch), (long long)config_outputs(c));
    hf_labels_unread(c);
    a->fresh_score = !a->seq_cls;
    a->seq_cls = a->reward = 1;
    a->cls = (HfImage){.K = 1};
}

/* A classifier's classes: --labels' (its head drawn anew), else its config's id2label */
static void read_classes(HfCfg *c, Arch *a, const char *labels)
{
    a->fresh_score = labels != NULL;
    if (labels)
        hf_labels_arg(c, labels, &a->cls);
    else
        hf_image_labels(c, &a->cls);
    a->d.score = a->cls.K;
}

/* A token classifier's classes: --labels (a new head over any of the family's models, with
 * --task token), or its config's id2label */
static void token_classes(HfCfg *c, const Family *f, Arch *a, const char *labels)
{
    if (!hf_token_arch(f->type, f->arch))
        error_input("import: --task token: transformers has no token classifier for %s", f->type);
    if (!a->tok_cls && !labels)
        error_input("import: --task token over a %s: --labels names the new classifier's "
                    "classes", a->seq_cls ? "sequence classifier" : "language model");
    if (a->multimodal)
        error_input("import: a token classifier of an image-text checkpoint's text model");
    a->tok_cls = 1;
    a->seq_cls = 0;
    read_classes(c, a, labels);
    a->d.score_bias = 1;
    a->d.score_name = hf_token_head(f->type);
}

/* A sequence classifier's classes: --labels (a new score over any of the family's models),
 * or its config's id2label; or a reward model's one score */
static void seq_classes(HfCfg *c, const Family *f, Arch *a, const char *labels, const char *task)
{
    a->std = hf_cfg_num(c, "initializer_range", 0.02);
    if (a->tok_cls && task && strcmp(task, "token"))
        error_input("import: --task %s: this is a token classifier (--task token)", task);
    if (a->tok_cls || (task && !strcmp(task, "token"))) {
        token_classes(c, f, a, labels);
        return;
    }
    reward_model(c, f, a, labels, task);
    if (labels && !hf_seq_arch(f->type, f->arch))
        error_input("import: --labels: transformers has no sequence classifier for %s", f->type);
    a->seq_cls |= labels != NULL;
    if (!a->seq_cls)
        return;
    if (a->multimodal)
        error_input("import: a sequence classifier of an image-text checkpoint's text model");
    if (!a->reward)
        read_classes(c, a, labels);
    a->d.score = a->cls.K;
}

/* model_type and architectures: which of the families, or exit 1 naming it. */
static void read_config(Imp *im, Arch *a)
{
    HfCfg *c = &im->cfg;
    a->type = hf_cfg_str(c, "model_type", NULL);
    if (!a->type)
        hf_cfg_error(c, "model_type", "missing");
    const Family *f = family_of(c, a->type);
    read_arch(c, f, a);
    hf_cfg_pretrained(c);
    if (!strcmp(a->type, "gemma3"))
        c = text_config(im, a);
    f->config(c, a);
    seq_classes(c, f, a, im->labels, im->task);
    a->family = f->tensors                      ? f->tensors
              : a->block == BLOCK_SHARED_NORM ? &hf_falcon
              : a->block == BLOCK_PARALLEL    ? &hf_falcon_new
                                              : &hf_falcon_seq;
    const char *rest = hf_cfg_rest(c, hf_pretrained_keys);
    if (rest)
        hf_cfg_error(c, rest, "a key trainc does not know for %s: it cannot tell whether the "
                     "model computes what trainc would", a->type);
}

/* trainc's names of the slots' layers, in the model spec and the weights */
static const char *const gpt2_names[HF_N_SLOTS] = {"wte", "wpe", "ln_1", "attn", "ln_2", "fc",
                                                   "proj", "ln_f", "lm_head"};
static const char *const llama_names[HF_N_SLOTS] = {"embed", NULL, "attn_norm", "attn",
                                                    "mlp_norm", "gate_up", "down", "norm",
                                                    "lm_head", "attn_post_norm",
                                                    "mlp_post_norm"};
static const char *const starcoder2_names[HF_N_SLOTS] = {"embed", NULL, "attn_norm", "attn",
                                                         "mlp_norm", "fc", "proj", "norm",
                                                         "lm_head"};

static const char *const moe_names[HF_N_SLOTS] = {"embed", NULL, "attn_norm", "attn",
                                                  "mlp_norm", "moe", NULL, "norm", "lm_head"};
static const char *const shared_norm_names[HF_N_SLOTS] = {"embed", NULL, "block_norm", "attn",
                                                          NULL, "fc", "proj", "norm", "lm_head"};
static const char *const shared_glu_names[HF_N_SLOTS] = {"embed", NULL, "block_norm", "attn",
                                                         NULL, "gate_up", "down", "norm",
                                                         "lm_head"};

static const char *const *slot_names(const Arch *a)
{
    if (a->block == BLOCK_SHARED_NORM)
        return a->mlp == MLP_GLU ? shared_glu_names : shared_norm_names;
    if (a->mlp == MLP_MOE)
        return moe_names;
    return a->gpt2 ? gpt2_names : a->mlp == MLP_GLU ? llama_names : starcoder2_names;
}

/* ---- the spec ------------------------------------------------------------------ */

static cJSON *norm(cJSON *list, const Arch *a, const char *name)
{
    cJSON *l = hf_layer(list, a->layernorm ? "layernorm" : "rmsnorm", name);
    cJSON_AddNumberToObject(l, "eps", a->eps);
    if (a->ln_params == LN_WEIGHT)
        cJSON_AddFalseToObject(l, "bias");
    if (a->ln_params == LN_BARE)
        cJSON_AddFalseToObject(l, "affine");
    return l;
}

static void attention(cJSON *list, const Arch *a)
{
    cJSON *l = hf_layer(list, "attention", llama_names[HF_ATTN]);
    cJSON_AddNumberToObject(l, "heads", (double)a->d.H);
    if (a->d.KV != a->d.H)
        cJSON_AddNumberToObject(l, "kv_heads", (double)a->d.KV);
    if (a->d.HD)
        cJSON_AddNumberToObject(l, "head_dim", (double)a->d.HD);
    if (a->d.bias == HF_BIAS_NONE)
        cJSON_AddFalseToObject(l, "bias");
    if (a->d.bias == HF_BIAS_QKV)
        cJSON_AddStringToObject(l, "bias", "qkv");
    if (a->d.bias == HF_BIAS_PROJ)
        cJSON_AddStringToObject(l, "bias", "proj");
    if (!a->gpt2) {
        cJSON *r = cJSON_AddObjectToObject(l, "rope");
        cJSON_AddNumberToObject(r, "theta", a->theta);
        if (a->scaling)
            cJSON_AddItemToObject(r, "scaling", cJSON_Duplicate(a->scaling, 1));
        if (a->d.rope_dims)
            cJSON_AddNumberToObject(r, "dims", (double)a->d.rope_dims);
    }
    if (a->d.qk_norm == HF_QK_NORM_ALL_HEADS) {
        cJSON_AddStringToObject(l, "qk_norm", "all_heads");
        cJSON_AddNumberToObject(l, "eps", a->eps);
    } else if (a->d.qk_norm)
        cJSON_AddTrueToObject(l, "qk_norm");
    if (a->window)
        cJSON_AddNumberToObject(l, "window", (double)a->window);
    if (a->att_scale)
        cJSON_AddNumberToObject(l, "scale", a->att_scale);
    if (a->att_softcap)
        cJSON_AddNumberToObject(l, "softcap", a->att_softcap);
    if (a->global_every && a->global_every <= a->d.L) {
        cJSON *g = cJSON_AddObjectToObject(l, "interleave");
        cJSON_AddNumberToObject(g, "every", (double)a->global_every);
        cJSON_AddNullToObject(g, "window");
        if (a->global_nope)   /* Cohere 2's */
            cJSON_AddNullToObject(g, "rope");
        if (a->global_theta) {   /* Gemma 3's global rope (Gemma 2's layers share one) */
            cJSON *r = cJSON_AddObjectToObject(g, "rope");
            cJSON_AddNumberToObject(r, "theta", a->global_theta);
            if (a->global_scaling)
                cJSON_AddItemToObject(r, "scaling", cJSON_Duplicate(a->global_scaling, 1));
        }
    }
    if (a->local_every) {   /* GPT-Neo's local layers among global ones */
        cJSON *g = cJSON_AddObjectToObject(l, "interleave");
        cJSON_AddNumberToObject(g, "every", (double)a->local_every);
        cJSON_AddNumberToObject(g, "window", (double)a->local_window);
    }
    if (a->nope_every && a->nope_every <= a->d.L) {
        cJSON *g = cJSON_AddObjectToObject(l, "interleave");
        cJSON_AddNumberToObject(g, "every", (double)a->nope_every);
        cJSON_AddNullToObject(g, "rope");
    }
}

/* The MLP branch's layers after its norm: linear, gelu, linear (GPT-2's, StarCoder2's),
 * linear, squared_relu, linear (Nemotron's) or linear, glu, linear; biased where the
 * MLP is. */
static void moe(cJSON *list, const Arch *a)
{
    cJSON *l = hf_layer(list, "moe", slot_names(a)[HF_UP]);
    cJSON_AddNumberToObject(l, "experts", (double)a->d.E);
    cJSON_AddNumberToObject(l, "top_k", (double)a->top_k);
    cJSON_AddNumberToObject(l, "hidden", (double)a->d.FF);
    if (strcmp(a->act, "silu"))
        cJSON_AddStringToObject(l, "act", a->act);
    if (!a->norm_topk)
        cJSON_AddFalseToObject(l, "norm_topk");
    if (a->aux_loss > 0)
        cJSON_AddNumberToObject(l, "aux_loss", a->aux_loss);
    if (a->d.SFF)
        cJSON_AddNumberToObject(l, "shared", (double)a->d.SFF);
    if (a->shared_gate)
        cJSON_AddTrueToObject(l, "shared_gate");
}

static void mlp(cJSON *list, const Arch *a)
{
    if (a->mlp == MLP_MOE) {
        moe(list, a);
        return;
    }
    const char *const *N = slot_names(a);
    cJSON *up = hf_layer(list, "linear", N[HF_UP]);
    cJSON_AddNumberToObject(up, "out", (double)(a->mlp == MLP_GLU ? 2 * a->d.FF : a->d.FF));
    if (a->mlp == MLP_GELU)
        cJSON_AddStringToObject(hf_layer(list, "gelu", NULL), "approximate", a->act);
    else if (a->mlp == MLP_RELU2)
        hf_layer(list, "squared_relu", NULL);
    else if (a->mlp == MLP_RELU)
        hf_layer(list, "relu", NULL);
    else
        cJSON_AddStringToObject(hf_layer(list, "glu", NULL), "act", a->act);
    cJSON *down = hf_layer(list, "linear", N[HF_DOWN]);
    cJSON_AddNumberToObject(down, "out", (double)a->d.D);
    if (!a->d.mlp_bias) {
        cJSON_AddFalseToObject(up, "bias");
        cJSON_AddFalseToObject(down, "bias");
    }
}

/* What closes a branch: Gemma 2 and 3's norm (named NAME), Granite's residual
 * multiplier, or nothing */
static void branch_end(cJSON *list, const Arch *a, const char *name)
{
    if (a->post_norms)
        norm(list, a, name);
    if (a->residual_scale)
        cJSON_AddNumberToObject(hf_layer(list, "scale", NULL), "by", a->residual_scale);
}

/* A block's residual branches: the attention's, then the MLP's. */
static void sequential_block(cJSON *body, const Arch *a)
{
    const char *const *N = slot_names(a);
    cJSON *b1 = cJSON_AddArrayToObject(hf_layer(body, "residual", NULL), "body");
    if (!a->no_pre_norms)
        norm(b1, a, N[HF_NORM1]);
    attention(b1, a);
    branch_end(b1, a, N[HF_POST1]);
    cJSON *b2 = cJSON_AddArrayToObject(hf_layer(body, "residual", NULL), "body");
    if (!a->no_pre_norms)
        norm(b2, a, N[HF_NORM2]);
    mlp(b2, a);
    branch_end(b2, a, N[HF_POST2]);
}

/* GPT-NeoX's parallel block, x + attn(ln1(x)) + mlp(ln2(x)): a residual of the MLP
 * branch whose shortcut is the attention's residual, (x + attn(ln1(x))) + mlp(ln2(x)). */
static void parallel_block(cJSON *body, const Arch *a)
{
    const char *const *N = slot_names(a);
    cJSON *r = hf_layer(body, "residual", NULL);
    cJSON *b2 = cJSON_AddArrayToObject(r, "body");
    norm(b2, a, N[HF_NORM2]);
    mlp(b2, a);
    cJSON *sc = cJSON_AddArrayToObject(r, "shortcut");
    cJSON *b1 = cJSON_AddArrayToObject(hf_layer(sc, "residual", NULL), "body");
    norm(b1, a, N[HF_NORM1]);
    attention(b1, a);
}

/* Phi's and Falcon 7B's block, x + attn(ln(x)) + mlp(ln(x)): a residual of the norm and
 * a residual of the MLP whose shortcut is the attention, x + (attn(h) + mlp(h)). */
static void shared_norm_block(cJSON *body, const Arch *a)
{
    const char *const *N = slot_names(a);
    cJSON *b = cJSON_AddArrayToObject(hf_layer(body, "residual", NULL), "body");
    norm(b, a, N[HF_NORM1]);
    cJSON *r = hf_layer(b, "residual", NULL);
    mlp(cJSON_AddArrayToObject(r, "body"), a);
    attention(cJSON_AddArrayToObject(r, "shortcut"), a);
}

/* dpo's inputs beside x [2T]: y [2T] each answer token's id where it is predicted (-100
 * elsewhere), pos [2T], ref [2] (the reference model's log-probabilities; simpo and orpo
 * have none); orpo's t [T], the chosen text's next ids over prompt and answer (TRL's
 * supervised term); kto's label [], 1 where the row's completion is desirable (its second
 * text the KL one: another line's completion) */
static void dpo_inputs(cJSON *m, cJSON *in, const Arch *a, int T2)
{
    cJSON *y = cJSON_AddObjectToObject(in, "y");
    cJSON_AddItemToObject(y, "shape", cJSON_CreateIntArray(&T2, 1));
    cJSON_AddStringToObject(y, "dtype", "i32");
    cJSON_AddNumberToObject(y, "classes", (double)a->d.V);
    cJSON *p = cJSON_AddObjectToObject(in, "pos");
    cJSON_AddItemToObject(p, "shape", cJSON_CreateIntArray(&T2, 1));
    cJSON_AddStringToObject(p, "dtype", "i32");
    if (PREF_HAS_REFERENCE(a->pref)) {
        cJSON *r = cJSON_AddObjectToObject(in, "ref");
        cJSON_AddItemToObject(r, "shape", cJSON_CreateIntArray((int[]){2}, 1));
        cJSON_AddStringToObject(r, "dtype", "f32");
    }
    if (a->pref == PREF_KTO) {
        cJSON *l = cJSON_AddObjectToObject(in, "label");
        cJSON_AddItemToObject(l, "shape", cJSON_CreateArray());
        cJSON_AddStringToObject(l, "dtype", "i32");
        cJSON_AddNumberToObject(l, "classes", 2);
    }
    if (a->pref == PREF_ORPO) {
        int T = T2 / 2;
        cJSON *t = cJSON_AddObjectToObject(in, "t");
        cJSON_AddItemToObject(t, "shape", cJSON_CreateIntArray(&T, 1));
        cJSON_AddStringToObject(t, "dtype", "i32");
        cJSON_AddNumberToObject(t, "classes", (double)a->d.V);
    }
    cJSON_AddStringToObject(m, "positions", "pos");
}

/* A token classifier's pos [T] (the padding after the text a sequence apart) and y [T]
 * each token's class (-100: none asked) */
static void token_inputs(cJSON *m, cJSON *in, const Arch *a, int T)
{
    cJSON *p = cJSON_AddObjectToObject(in, "pos");
    cJSON_AddItemToObject(p, "shape", cJSON_CreateIntArray(&T, 1));
    cJSON_AddStringToObject(p, "dtype", "i32");
    hf_image_inputs_y(in, &a->cls);
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItem(in, "y"), "shape",
                                           cJSON_CreateIntArray(&T, 1));
    cJSON_AddStringToObject(m, "positions", "pos");
}

/* The inputs: x [T] the ids, y [T] the next ids (a sequence classifier's: y [] its class,
 * and pos [T] the positions that keep the padding before the text apart; a reward model's
 * x and pos [2T], a pair of texts, y which of them is the chosen one; dpo_inputs) */
static void lm_inputs(cJSON *m, const Arch *a, int64_t T)
{
    cJSON *in = cJSON_AddObjectToObject(m, "inputs");
    cJSON *x = cJSON_AddObjectToObject(in, "x");
    int row = (int)(a->reward || a->dpo ? 2 * T : T);
    cJSON_AddItemToObject(x, "shape", cJSON_CreateIntArray(&row, 1));
    cJSON_AddStringToObject(x, "dtype", "i32");
    if (a->tok_cls) {
        token_inputs(m, in, a, row);
        return;
    }
    if (a->seq_cls) {
        cJSON *p = cJSON_AddObjectToObject(in, "pos");
        cJSON_AddItemToObject(p, "shape", cJSON_CreateIntArray(&row, 1));
        cJSON_AddStringToObject(p, "dtype", "i32");
        hf_image_inputs_y(in, a->reward ? &(HfImage){.K = 2, .labels = (char *[]){"first",
                                                                            "second"}}
                                        : &a->cls);
        cJSON_AddStringToObject(m, "positions", "pos");
        return;
    }
    if (a->dpo) {
        dpo_inputs(m, in, a, row);
        return;
    }
    cJSON *y = cJSON_AddObjectToObject(in, "y");
    cJSON_AddItemToObject(y, "shape", cJSON_CreateIntArray((int[]){(int)T}, 1));
    cJSON_AddStringToObject(y, "dtype", "i32");
    cJSON_AddNumberToObject(y, "classes", (double)a->d.V);
}

/* A sequence classifier's head: the last token's row (the rows padded on the left) through
 * `score` (no bias), cross entropy over the classes */
static void seq_head(cJSON *m, cJSON *ls, const Arch *a)
{
    cJSON *last = hf_layer(ls, "last_token", NULL);
    if (a->reward)   /* (each text's reward, the two as the logits of which is chosen) */
        cJSON_AddNumberToObject(last, "segments", 2);
    cJSON *score = hf_layer(ls, "linear", "score");
    cJSON_AddNumberToObject(score, "out", (double)a->cls.K);
    cJSON_AddFalseToObject(score, "bias");
    if (a->reward)
        hf_layer(ls, "flatten", NULL);
    hf_image_loss(m);
}

/* The model spec: GPT-2's layout under GPT-2's names (specs/gpt2_124m.json), Llama's
 * under specs/llama_char.json's. */
static cJSON *model_spec(const Arch *a, const char *name, int64_t T)
{
    const char *const *N = slot_names(a);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "trainc", 1);
    cJSON *m = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(m, "name", name);
    lm_inputs(m, a, T);
    cJSON *ls = cJSON_AddArrayToObject(m, "layers");
    cJSON *e = hf_layer(ls, "embedding", N[HF_EMBED]);
    cJSON_AddNumberToObject(e, "vocab", (double)a->d.V);
    cJSON_AddNumberToObject(e, "dim", (double)a->d.D);
    cJSON_AddStringToObject(e, "input", "x");
    if (a->embed_scale)
        cJSON_AddNumberToObject(hf_layer(ls, "scale", NULL), "by", a->embed_scale);
    if (a->gpt2)
        cJSON_AddNumberToObject(hf_layer(ls, "pos_embedding", N[HF_POS]), "max_len", (double)a->d.max_pos);
    cJSON *rep = hf_layer(ls, "repeat", a->gpt2 ? "h" : "layers");
    cJSON_AddNumberToObject(rep, "count", (double)a->d.L);
    cJSON *body = cJSON_AddArrayToObject(rep, "body");
    if (a->block == BLOCK_PARALLEL)
        parallel_block(body, a);
    else if (a->block == BLOCK_SHARED_NORM)
        shared_norm_block(body, a);
    else
        sequential_block(body, a);
    norm(ls, a, N[HF_FINAL]);
    if (a->seq_cls) {
        seq_head(m, ls, a);
        return root;
    }
    if (a->tok_cls) {   /* (a class for each token: transformers' labels -100 ask none) */
        cJSON_AddNumberToObject(hf_layer(ls, "linear", a->d.score_name), "out", (double)a->cls.K);
        hf_image_loss(m);
        cJSON_AddNumberToObject(cJSON_GetObjectItem(m, "loss"), "ignore_index", -100);
        return root;
    }
    cJSON *head = hf_layer(ls, "linear", N[HF_HEAD]);
    if (a->d.tie)
        cJSON_AddStringToObject(head, "tie", N[HF_EMBED]);
    else
        cJSON_AddNumberToObject(head, "out", (double)a->d.V);
    if (!a->head_bias)
        cJSON_AddFalseToObject(head, "bias");
    if (a->logits_div)   /* Granite's logits: / logits_scaling */
        cJSON_AddNumberToObject(hf_layer(ls, "scale", NULL), "by", 1.0 / a->logits_div);
    if (a->logit_scale)   /* Cohere's: * logit_scale */
        cJSON_AddNumberToObject(hf_layer(ls, "scale", NULL), "by", a->logit_scale);
    if (a->final_cap) {   /* Gemma 2's logits: / cap, tanh, * cap */
        cJSON_AddNumberToObject(hf_layer(ls, "scale", NULL), "by", 1.0 / a->final_cap);
        hf_layer(ls, "tanh", NULL);
        cJSON_AddNumberToObject(hf_layer(ls, "scale", NULL), "by", a->final_cap);
    }
    if (a->dpo) {   /* (TRL's DPO and ORPO betas; the SimPO paper's beta and gamma) */
        cJSON *loss = cJSON_AddObjectToObject(m, "loss");
        cJSON_AddStringToObject(loss, "op", pref_names[a->pref]);
        cJSON_AddStringToObject(loss, "target", "y");
        if (PREF_HAS_REFERENCE(a->pref))
            cJSON_AddStringToObject(loss, "reference", "ref");
        cJSON_AddNumberToObject(loss, "beta", a->pref == PREF_SIMPO ? 2.0 : 0.1);
        if (a->pref == PREF_SIMPO)
            cJSON_AddNumberToObject(loss, "gamma", 1.0);
        if (a->pref == PREF_ORPO)
            cJSON_AddStringToObject(loss, "sft_target", "t");
        if (a->pref == PREF_KTO)
            cJSON_AddStringToObject(loss, "label", "label");
        if (a->pref == PREF_CPO)   /* (TRL's CPOConfig's) */
            cJSON_AddNumberToObject(loss, "cpo_alpha", 1.0);
        return root;
    }
    cJSON *loss = cJSON_AddObjectToObject(m, "loss");
    cJSON_AddStringToObject(loss, "op", "cross_entropy");
    cJSON_AddStringToObject(loss, "target", "y");
    /* transformers' causal LM loss ignores -100 (its CrossEntropyLoss default): so does
     * the import's, and `trainc data sft`'s masked prompts train as they are */
    cJSON_AddNumberToObject(loss, "ignore_index", -100);
    return root;
}

/* train.json: a fine-tuning start the user edits (data paths relative to OUT). */
static const char train_defaults[] =
    "{\n"
    "  \"trainc\": 1,\n"
    "  \"train\": {\n"
    "    \"data\": {\n"
    "      \"train\": {\"tokens\": \"data/train_*.bin\"},\n"
    "      \"val\": {\"tokens\": \"data/val_*.bin\"}\n"
    "    },\n"
    "    \"batch_size\": 8,\n"
    "    \"max_steps\": 1000,\n"
    "    \"optimizer\": {\"type\": \"adamw\", \"lr\": 3e-5, \"betas\": [0.9, 0.95], "
    "\"eps\": 1e-8, \"weight_decay\": 0.0},\n"
    "    \"schedule\": {\"type\": \"cosine\", \"warmup_steps\": 50, \"final_lr_frac\": 0.1},\n"
    "    \"grad_clip\": 1.0,\n"
    "    \"precision\": \"bf16-mixed\",\n"
    "    \"validate\": {\"every_steps\": 100, \"batches\": 20},\n"
    "    \"checkpoint\": {\"every_steps\": 500, \"keep\": 2},\n"
    "    \"seed\": 1337,\n"
    "    \"log_every\": 10\n"
    "  }\n"
    "}\n";

/* ---- the weights ---------------------------------------------------------------- */

/* The checkpoint's tensor `p`, taken: it must be there with p's shape. */
static const HfTensor *take(Imp *im, const HfPart *p)
{
    HfTensor *t = hf_find(&im->w, p->name);
    if (!t)
        error_input("%s: no tensor '%s' in the weights (config.json's model needs it)", im->dir,
                    p->name);
    int same = t->rank == p->rank;
    for (int d = 0; same && d < p->rank; d++)
        same = t->shape[d] == p->shape[d];
    if (!same) {
        char have[96] = "", need[96] = "", *at = have, *nt = need;
        for (int d = 0; d < t->rank; d++)
            at += snprintf(at, 24, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        for (int d = 0; d < p->rank; d++)
            nt += snprintf(nt, 24, "%s%lld", d ? ", " : "", (long long)p->shape[d]);
        error_input("%s: tensor '%s' has shape [%s], config.json's model needs [%s]", im->dir,
                    p->name, have, need);
    }
    t->used = 1;
    return t;
}

/* hf_walk's visit: one output tensor planned from its parts. */
static void plan(void *ctx, const HfMap *m, int64_t block, int n, const HfPart *parts)
{
    Imp *im = ctx;
    const char *layer = m->slot == HF_HEAD && im->d->score
                        ? im->d->score_name ? im->d->score_name : "score" : im->names[m->slot];
    /* the attention (and in the parallel block its norm) are a shortcut's layers */
    int in_sc = m->slot == HF_ATTN || (m->slot == HF_NORM1 && im->block == BLOCK_PARALLEL);
    const char *sc = im->block != BLOCK_SEQUENTIAL && in_sc ? "shortcut." : "";
    char *ours = block < 0 ? xasprintf("%s.%s", layer, m->ours)
                           : xasprintf("%s.%lld.%s%s.%s", im->rep, (long long)block, sc, layer,
                                       m->ours);
    int64_t shape[3] = {0, parts[0].shape[1], parts[0].shape[2]};
    im->r = realloc(im->r, (size_t)(im->out.n + 1) * sizeof *im->r);
    if (!im->r)
        die("out of memory");
    Recipe *r = &im->r[im->out.n];
    memset(r, 0, sizeof *r);
    r->src = xcalloc((size_t)n, sizeof *r->src);
    int fresh = m->slot == HF_HEAD && im->fresh_score > 0;   /* (a new score: none to read) */
    for (int k = 0; k < n; k++) {
        r->src[k] = fresh ? NULL : take(im, &parts[k]);
        shape[0] += parts[k].shape[0];
    }
    r->n = fresh ? 0 : n;
    r->fresh = fresh && m->cols ? im->fresh_score : 0;   /* (a new bias: zeros) */
    r->slot = m->slot;
    if (m->slot == HF_POS) {   /* OPT's: the rows before position 0's dropped */
        r->skip = im->family->pos_pad * parts[0].shape[1];
        shape[0] -= im->family->pos_pad;
    }
    r->transpose = m->form == HF_TRANSPOSED;
    r->offset = hf_offset(im->family, m);
    r->reorder = hf_reordered(im->family, im->d, m) ? m : NULL;
    if (r->transpose) {
        shape[0] = parts[0].shape[1];
        shape[1] = parts[0].shape[0];
    }
    int each = m->form == HF_PER_EXPERT;
    if (each) {   /* [E, an expert's rows, cols] */
        int64_t E = im->d->E;
        shape[2] = shape[1];
        shape[1] = shape[0] / E;
        shape[0] = E;
    }
    hf_out_add(&im->out, ours, parts[0].rank + each, shape);
    free(ours);
}

static int ends(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

static int starts(const char *s, const char *head) { return !strncmp(s, head, strlen(head)); }

/* A multimodal Gemma 3's image side: its vision tower and projector (transformers 4.50's
 * names, then 4.52's) */
static int vision(const Arch *a, const char *name)
{
    return a->multimodal && (starts(name, "vision_tower.") || starts(name, "multi_modal_projector.") ||
                             starts(name, "model.vision_tower.") ||
                             starts(name, "model.multi_modal_projector."));
}

/* What the checkpoint may hold beside the parameters: the causal-mask buffers of older
 * GPT-2 and GPT-J files, rotary frequencies (recomputed from rope_theta, as transformers
 * does), a tied head saved anyway, a multimodal model's image side. */
static int extra(const Arch *a, const char *name)
{
    int masks = a->gpt2 || !strcmp(a->type, "gptj");   /* older files' causal-mask buffers */
    return (masks && (ends(name, ".attn.masked_bias") || ends(name, ".attn.bias"))) ||
           (!a->gpt2 && ends(name, ".self_attn.rotary_emb.inv_freq")) ||
           (a->d.tie && (!strcmp(name, "lm_head.weight") ||
                         (a->multimodal && !strcmp(name, "language_model.lm_head.weight")))) ||
           (a->fresh_score && (starts(name, "lm_head.") || !strcmp(name, "embed_out.weight") ||
                               starts(name, "score.") || starts(name, "classifier."))) ||
           vision(a, name);
}

/* The whole plan: the family's table walked, and nothing left over. */
static void plan_weights(Imp *im, const Arch *a)
{
    im->names = slot_names(a);
    im->fresh_score = a->fresh_score ? a->std : 0;
    im->rep = a->gpt2 ? "h" : "layers";
    im->family = a->family;
    im->d = &a->d;
    im->block = a->block;
    const HfFamily *f = a->family;
    /* the original GPT-2 files name their tensors without "transformer."; a multimodal
     * Gemma 3's text model sits under "language_model.model." (transformers 4.50) or
     * "model.language_model." (4.52 on) */
    const char *prefix = !strcmp(a->type, "gpt2") && !hf_find(&im->w, "transformer.wte.weight")
                         ? "" : f->prefix;
    if (a->multimodal)
        prefix = hf_find(&im->w, "language_model.model.embed_tokens.weight") ? "language_model.model."
                                                                             : "model.language_model.";
    hf_walk(f, prefix, &a->d, plan, im);
    for (int i = 0; i < im->w.n; i++)
        if (!im->w.t[i].used && !extra(a, im->w.t[i].name))
            error_input("%s: tensor '%s' (in %s) has no place in the %s model config.json "
                        "describes", im->dir, im->w.t[i].name, im->w.paths[im->w.t[i].file],
                        a->type);
}

/* --adapter's adapters matched to the weights planned and checked against each one's
 * layout; a tied embedding may not be adapted (merged, the head would change with it,
 * where PEFT's unmerged model keeps the head as it was). */
static void plan_adapter(Imp *im, const Arch *a)
{
    HfAdapter *ad = im->adapter;
    hf_adapter_plan(ad, &im->w);
    for (int i = 0; i < im->out.n; i++)
        for (int k = 0; k < im->r[i].n; k++) {
            const HfTensor *t = im->r[i].src[k];
            if (hf_adapter_fit(ad, t, im->r[i].transpose) && a->d.tie && im->r[i].slot == HF_EMBED)
                error_input("%s: an adapter on %s, the embedding, which the head is tied to: "
                            "merged, it would change the head too (PEFT's unmerged model keeps "
                            "it)", ad->w.paths[0], t->name);
        }
}

/* Each planned tensor read, assembled and appended. */
static void write_weights(const Imp *im, const char *path)
{
    rt_st_out *o = hf_out_open(&im->out, path);
    if (!o)
        cannot_write("import", path);
    rt_rng rng;   /* (a new score's draws) */
    rt_rng_seed(&rng, HF_FRESH_SEED);
    for (int i = 0; i < im->out.n; i++) {
        const Recipe *r = &im->r[i];
        const rt_param *p = &im->out.p[i];
        float *dst = calloc((size_t)p->numel, sizeof *dst);
        if (!dst)
            die("out of memory for %s", p->name);
        int64_t at = 0;
        for (int k = 0; k < r->n; k++) {
            float *x = hf_read(&im->w, r->src[k]);
            if (im->adapter)
                hf_adapter_merge(im->adapter, r->src[k], x);
            if (r->transpose)   /* src [d0, d1] -> dst [d1, d0] */
                hf_transpose(dst, x, r->src[k]->shape[0], r->src[k]->shape[1]);
            else
                memcpy(dst + at, x + r->skip, (size_t)(r->src[k]->numel - r->skip) * sizeof *x);
            at += r->src[k]->numel - r->skip;
            free(x);
        }
        for (int64_t i = 0; r->fresh > 0 && i < p->numel; i++)
            dst[i] = (float)(r->fresh * rt_rng_normal(&rng));
        for (int64_t i = 0; r->offset != 0 && i < p->numel; i++)
            dst[i] += r->offset;
        if (r->reorder)
            hf_reorder(im->family, im->d, r->reorder, dst, p->rank > 1 ? p->shape[1] : 1, 0);
        rt_st_put(o, dst, p->numel);
        free(dst);
    }
    if (rt_st_close(o) != 0)
        cannot_write("import", path);
}

/* ---- the command ----------------------------------------------------------------- */

/* OUT's last component as a model name: letters, digits and '_' kept, others '_'. */
static char *name_of(const char *out, const char *type)
{
    char *s = xstrdup(out);
    size_t n = strlen(s);
    while (n > 1 && s[n - 1] == '/')
        s[--n] = 0;
    char *base = strrchr(s, '/') ? strrchr(s, '/') + 1 : s;
    for (char *c = base; *c; c++)
        if (!(*c == '_' || (*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') ||
              (*c >= 'A' && *c <= 'Z')))
            *c = '_';
    return *base && strcmp(base, "_") && strcmp(base, "__") ? base : xstrdup(type);
}

/* import's options */
typedef struct ImportArgs {
    const char *dir, *out, *adapter, *labels, *task;
    int64_t T, S;                  /* --seq-len, --image-size (0: the defaults) */
    int offset;                    /* --interpolate offset (a DINOv2's positions) */
    const char *interp;            /* --interpolate's value as given (NULL: none) */
} ImportArgs;

static const char import_usage[] =
    "import: usage: trainc import hf DIR -o OUT [--seq-len T] [--adapter ADIR] "
    "[--image-size S [--interpolate size|offset]] [--labels N|NAME,NAME,...] "
    "[--task sequence|token|mlm|qa|reward|dpo|simpo|orpo|kto|cpo]";

/* ARG's value as an integer in [1, MAX], or exit 1 naming FLAG */
static int64_t count_arg(const char *flag, const char *v, int64_t max)
{
    char *end;
    int64_t n = strtoll(v, &end, 10);
    if (*end || end == v || n < 1 || n > max)
        error_input("import: %s %s: a positive integer expected", flag, v);
    return n;
}

static ImportArgs import_args(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "hf"))
        error_input("%s%s%s", import_usage, argc >= 2 ? " (the one format is hf, not " : "",
                    argc >= 2 ? "another)" : "");
    ImportArgs o = {0};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-o") || !strcmp(a, "--out"))
            o.out = opt_value(argc, argv, &i, a);
        else if (!strcmp(a, "--adapter"))
            o.adapter = opt_value(argc, argv, &i, a);
        else if (!strcmp(a, "--labels"))
            o.labels = opt_value(argc, argv, &i, a);
        else if (!strcmp(a, "--task"))
            o.task = opt_value(argc, argv, &i, a);
        else if (!strcmp(a, "--image-size"))
            o.S = count_arg(a, opt_value(argc, argv, &i, a), 1 << 16);
        else if (!strcmp(a, "--seq-len"))
            o.T = count_arg(a, opt_value(argc, argv, &i, a), 1 << 20);
        else if (!strcmp(a, "--interpolate")) {
            o.interp = opt_value(argc, argv, &i, a);
            if (strcmp(o.interp, "size") && strcmp(o.interp, "offset"))
                error_input("import: --interpolate %s: size (transformers 4.45 and later) or "
                            "offset (DINOv2's own code, transformers before 4.45) expected",
                            o.interp);
            o.offset = !strcmp(o.interp, "offset");
        }
        else if (a[0] == '-' || o.dir)
            unknown_arg("import", a);
        else
            o.dir = a;
    }
    if (!o.dir || !o.out)
        error_input("%s", import_usage);
    return o;
}

/* A classifier's import (model_type TYPE: hf_vit.c, hf_resnet.c, hf_bert.c), or -1 for
 * another model */
static int import_classifier(const ImportArgs *o, HfCfg *cfg, const char *type)
{
    int convnext = !strcmp(type, "convnext") || !strcmp(type, "convnextv2");
    int vit = !strcmp(type, "vit") || !strcmp(type, "deit");
    int dinov2 = !strcmp(type, "dinov2") || !strcmp(type, "dinov2_with_registers");
    int clip = !strcmp(type, "clip") || !strcmp(type, "siglip");
    int image = vit || dinov2 || clip || !strcmp(type, "resnet") || convnext;
    int text = !strcmp(type, "bert") || !strcmp(type, "roberta") || !strcmp(type, "distilbert") ||
               !strcmp(type, "xlm-roberta") || !strcmp(type, "camembert") ||
               !strcmp(type, "electra") || !strcmp(type, "modernbert");
    if (image && (o->T || o->adapter))
        error_input("import: %s with %s (an image model: no sequence, no adapters)",
                    o->T ? "--seq-len" : "--adapter", type);
    if (o->S && strcmp(type, "resnet") && !convnext && !dinov2)
        error_input("import: --image-size is for a resnet, a convnext or a dinov2 (its images' "
                    "side); %s", image
                    ? xasprintf("a %s's is config.json's image_size", type) : "this is no image model");
    if (o->interp && (!dinov2 || !o->S))
        error_input("import: --interpolate is how a dinov2's position table is interpolated to "
                    "--image-size; %s", dinov2 ? "give --image-size" : xasprintf("this is %s", type));
    if (text && o->adapter)
        error_input("import: --adapter with %s (a text classifier: no adapters there yet)", type);
    if (o->task && !text && (image || (strcmp(o->task, "reward") && strcmp(o->task, "token") &&
                                       pref_task(o->task) < 0)))
        error_input("import: --task %s: --task is a text classifier's (bert, roberta, "
                    "xlm-roberta, camembert, distilbert, electra: sequence, token, mlm or qa; "
                    "modernbert: sequence, token or mlm) or a language "
                    "model's (token, reward, dpo, simpo, orpo, kto, cpo); this is %s", o->task,
                    type);
    const char *name = name_of(o->out, type);
    if (vit)
        return hf_vit_import(cfg, o->dir, o->out, name, o->labels, !strcmp(type, "deit"));
    if (clip)
        return hf_clip_import(cfg, o->dir, o->out, name, o->labels, !strcmp(type, "siglip"));
    if (dinov2)
        return hf_dinov2_import(cfg, o->dir, o->out, name, o->S, o->offset, o->labels,
                                !strcmp(type, "dinov2_with_registers"));
    if (!strcmp(type, "resnet"))
        return hf_resnet_import(cfg, o->dir, o->out, name, o->S, o->labels);
    if (convnext)
        return hf_convnext_import(cfg, o->dir, o->out, name, o->S, o->labels,
                                  !strcmp(type, "convnextv2"));
    if (!strcmp(type, "modernbert"))
        return hf_modernbert_import(cfg, o->dir, o->out, name, o->T, o->labels, o->task);
    if (text)
        return hf_bert_import(cfg, o->dir, o->out, name, o->T, o->labels, o->task);
    return -1;
}

int cmd_import(int argc, char **argv)
{
    ImportArgs o = import_args(argc, argv);
    const char *dir = o.dir, *out = o.out, *adapter = o.adapter;
    int64_t T = o.T;
    Imp im = {.dir = dir, .labels = o.labels, .task = o.task};
    HfAdapter ad;
    Arch a = {0};
    hf_cfg_load(&im.cfg, xasprintf("%s/config.json", dir));
    int done = import_classifier(&o, &im.cfg, hf_cfg_str(&im.cfg, "model_type", ""));
    if (done >= 0)
        return done;
    read_config(&im, &a);
    int64_t per_row = a.reward || a.dpo ? 2 : 1;   /* (a pair of texts a row) */
    if (!T)
        T = a.d.max_pos / per_row < 1024 ? a.d.max_pos / per_row : 1024;
    if (a.gpt2 && per_row * T > a.d.max_pos)
        error_input("import: --seq-len %lld%s is over %s's %lld learned positions", (long long)T,
                    a.reward ? " (a reward model's rows hold two texts: 2T positions)" : "",
                    a.type, (long long)a.d.max_pos);
    hf_weights_dir(&im.w, dir);
    plan_weights(&im, &a);
    if (adapter) {
        hf_adapter_load(&ad, adapter);
        im.adapter = &ad;
        plan_adapter(&im, &a);
    }
    /* everything checked: now the files */
    char *text = hf_json_text(model_spec(&a, name_of(out, a.type), T));
    if (rt_mkdir_p(out) != 0)
        cannot_write("import", out);
    write_weights(&im, xasprintf("%s/init.safetensors", out));
    hf_write_text("import", xasprintf("%s/model.json", out), text);
    hf_write_text("import", xasprintf("%s/train.json", out),
                  a.seq_cls || a.tok_cls ? hf_text_train(0, NULL, 8, 2, 1e-5, 0.0)
                  : a.dpo   ? hf_text_train(0, a.pref == PREF_KTO ? "ref label"
                                                   : PREF_HAS_REFERENCE(a.pref) ? "ref"
                                                   : a.pref == PREF_ORPO ? "t" : NULL, 8, 1,
                                              1e-6, 0.0)
                            : train_defaults);   /* (TRL's DPOConfig's learning rate) */
    int skipped = 0, adapters = 0;
    for (int p = 0; adapter && p < ad.n; p++)
        adapters += !ad.pairs[p].whole;
    for (int i = 0; i < im.w.n; i++)
        skipped += vision(&a, im.w.t[i].name);
    printf("trainc: import: %s (%s, %lld layers, %d tensors%s%s%s) -> %s/model.json, "
           "%s/train.json, %s/init.safetensors\n", dir, a.type, (long long)a.d.L, im.out.n,
           a.dpo ? xasprintf("; for %s, rows of two texts of %lld tokens (data pairs%s)",
                             pref_names[a.pref], (long long)T,
                             PREF_HAS_REFERENCE(a.pref) ? ", then --reference" : "")
           : a.tok_cls
               ? xasprintf("; a token classifier of %lld classes%s", (long long)a.cls.K,
                           a.fresh_score ? xasprintf(", its %s drawn anew (normal, std %g, seed "
                                                     "%d; the bias zeros)", a.d.score_name,
                                                     a.std, HF_FRESH_SEED) : "")
           : !a.seq_cls ? "" : a.reward
               ? xasprintf("; a reward model, rows of two texts of %lld tokens (data pairs)%s",
                           (long long)T, a.fresh_score ? xasprintf(", its score drawn anew "
                           "(normal, std %g, seed %d)", a.std, HF_FRESH_SEED) : "")
               : a.fresh_score
               ? xasprintf("; a sequence classifier of %lld classes, its score drawn anew "
                           "(normal, std %g, seed %d)", (long long)a.cls.K, a.std, HF_FRESH_SEED)
               : xasprintf("; a sequence classifier of %lld classes", (long long)a.cls.K),
           a.multimodal ? xasprintf("; the image side's %d left out", skipped) : "",
           adapter ? xasprintf("; %d LoRA adapters of %s merged", adapters, adapter) : "", out, out,
           out);
    return 0;
}
