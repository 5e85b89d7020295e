/* hf_modernbert.c: Hugging Face's ModernBERT both ways: ModernBertForMaskedLM,
 * ModernBertForSequenceClassification and ModernBertForTokenClassification. `trainc
 * import hf` of such a folder (config.json, the weights; with --labels, a classifier over
 * a masked LM's encoder and prediction head) writes a model spec of trainc's layers over
 * padded rows (the model's positions, the padding a sequence apart, as the BERT family's
 * imports) and its weights: the word embedding and its layernorm, pre-norm blocks whose
 * attention sees its sequence whole (layer 0 without the norm before its attention), every
 * N-th layer global (its rope's theta global_rope_theta) and the others local (a window on
 * both sides: SPEC's window W = local_attention / 2 + 1, the local theta), a gated MLP
 * (glu), the final norm, then the prediction head (linear, activation, layernorm) and the
 * decoder tied to the word embedding (a masked LM), or the classifier (on the first
 * token or the mean over the text's tokens, classifier_pooling's "cls" and "mean"; or on
 * every token). `trainc export hf` writes a spec of that layout back as
 * config.json and model.safetensors. One table (mb_walk) serves both. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cmd.h"
#include "hf.h"
#include "ops/op.h"

/* What the encoder's output becomes: a class for the text (the first token through the
 * head), one for each token, the masked tokens' ids */
enum { MB_SEQ, MB_TOKEN, MB_MLM, MB__TASKS };
static const char *const mb_task_names[] = {"sequence", "token", "mlm"};
static const char *const mb_arch[] = {"ModernBertForSequenceClassification",
                                      "ModernBertForTokenClassification",
                                      "ModernBertForMaskedLM"};

/* The model's sizes and switches, and the names of trainc's layers (import: mb_names;
 * export: the spec's own) */
typedef struct Mb {
    HfImage cls;               /* the classes (K, their names) */
    int64_t V, D, L, H, FF, T;
    int64_t every;             /* global_attn_every_n_layers */
    int64_t W;                 /* the local layers' window (SPEC's); 0: every layer global */
    double eps, theta_global, theta_local, std;
    int norm_bias, attn_bias, mlp_bias, head_bias, decoder_bias;
    int act;                   /* the MLP's glu: RT_GLU_GELU or RT_GLU_GELU_TANH */
    int head_tanh;             /* the prediction head's gelu: the tanh form */
    int task;                  /* MB_* */
    int mean;                  /* a sequence classifier's pooling: the mean over the text's
                                  tokens (token_mean's first_sequence), else the first token */
    int fresh_cls;             /* import: the classifier drawn anew (--labels) */
    int fresh_head;            /* import: the prediction head too (a ModernBertModel's) */
    const char *prefix;        /* the encoder's tensors' ("model.", or "" for a bare model's) */
    HfLayout h;
    char *embed, *embed_norm, *attn0, *mlp_norm0, *mlp_in0, *mlp_out0, *block;
    char *attn_norm, *attn, *mlp_norm, *mlp_in, *mlp_out, *final_norm;
    char *head_dense, *head_norm, *head;
} Mb;

/* ---- the table of tensors ---------------------------------------------------------- */

/* a layernorm of D, its bias where the config has (norm_bias) */
static void mb_norm(const Mb *b, hf_join_fn fn, void *ctx, const char *ours, const char *theirs)
{
    hf_join_layernorm_bias(fn, ctx, ours, theirs, b->D, b->norm_bias);
}

/* Layer i's tensors (OURS: trainc's prefix of its layers; the attention's and the MLP's
 * names, layer 0's without the norm before its attention) */
static void mb_layer(const Mb *b, int64_t i, hf_join_fn fn, void *ctx)
{
    char *th = xasprintf("%slayers.%lld.", b->prefix, (long long)i);
    char *ours = i ? xasprintf(b->block, (long long)(i - 1)) : "";
    int64_t D = b->D;
    if (i)
        mb_norm(b, fn, ctx, xasprintf("%s%s", ours, b->attn_norm), xasprintf("%sattn_norm", th));
    const char *attn = i ? b->attn : b->attn0;
    hf_join_linear_bias(fn, ctx, xasprintf("%s%s.qkv", ours, attn), xasprintf("%sattn.Wqkv", th),
                        3 * D, D, b->attn_bias);
    hf_join_linear_bias(fn, ctx, xasprintf("%s%s.proj", ours, attn), xasprintf("%sattn.Wo", th),
                        D, D, b->attn_bias);
    mb_norm(b, fn, ctx, xasprintf("%s%s", ours, i ? b->mlp_norm : b->mlp_norm0),
            xasprintf("%smlp_norm", th));
    hf_join_linear_bias(fn, ctx, xasprintf("%s%s", ours, i ? b->mlp_in : b->mlp_in0),
                        xasprintf("%smlp.Wi", th), 2 * b->FF, D, b->mlp_bias);
    hf_join_linear_bias(fn, ctx, xasprintf("%s%s", ours, i ? b->mlp_out : b->mlp_out0),
                        xasprintf("%smlp.Wo", th), D, b->FF, b->mlp_bias);
}

/* A ModernBertModel's new prediction head as transformers' _init_weights draws it: the
 * dense weight within 2 std of normal(0, initializer_range / sqrt(2 layers)) (its "out"
 * std), its bias zero, the norm's weight ones and bias zero */
static void mb_fresh_head(const Mb *b, hf_join_fn fn, void *ctx)
{
    int64_t D = b->D;
    hf_join_fresh(fn, ctx, xasprintf("%s.weight", b->head_dense), 2, (int64_t[]){D, D},
                  HF_FRESH_TRUNC, b->std / sqrt(2.0 * (double)b->L));
    if (b->head_bias)
        hf_join_fresh(fn, ctx, xasprintf("%s.bias", b->head_dense), 1, &D, HF_FRESH_NORMAL, 0);
    hf_join_fresh(fn, ctx, xasprintf("%s.weight", b->head_norm), 1, &D, HF_FRESH_ONES, 1);
    if (b->norm_bias)
        hf_join_fresh(fn, ctx, xasprintf("%s.bias", b->head_norm), 1, &D, HF_FRESH_NORMAL, 0);
}

/* Every tensor, in trainc's order (the decoder's weight is the word embedding's) */
static void mb_walk(const Mb *b, hf_join_fn fn, void *ctx)
{
    hf_join_same(fn, ctx, xasprintf("%s.weight", b->embed),
                 xasprintf("%sembeddings.tok_embeddings.weight", b->prefix), 2,
                 (int64_t[]){b->V, b->D});
    mb_norm(b, fn, ctx, b->embed_norm, xasprintf("%sembeddings.norm", b->prefix));
    for (int64_t i = 0; i < b->L; i++)
        mb_layer(b, i, fn, ctx);
    mb_norm(b, fn, ctx, b->final_norm, xasprintf("%sfinal_norm", b->prefix));
    if (b->fresh_head)
        mb_fresh_head(b, fn, ctx);
    else {
        hf_join_linear_bias(fn, ctx, b->head_dense, "head.dense", b->D, b->D, b->head_bias);
        mb_norm(b, fn, ctx, b->head_norm, "head.norm");
    }
    if (b->task == MB_MLM) {
        if (b->decoder_bias)
            hf_join_same(fn, ctx, xasprintf("%s.bias", b->head), "decoder.bias", 1, &b->V);
    } else if (b->fresh_cls) {   /* (transformers' final_out std, hidden_size^-1/2) */
        double std = 1 / sqrt((double)b->D);
        hf_join_fresh(fn, ctx, xasprintf("%s.weight", b->head), 2, (int64_t[]){b->cls.K, b->D},
                      HF_FRESH_TRUNC, std);
        hf_join_fresh(fn, ctx, xasprintf("%s.bias", b->head), 1, &b->cls.K, HF_FRESH_NORMAL, 0);
    } else
        hf_join_linear(fn, ctx, b->head, "classifier", b->cls.K, b->D);
}

/* The names import writes */
static void mb_names(Mb *b)
{
    b->embed = "embed", b->embed_norm = "embed_norm", b->block = "blocks.%lld.";
    b->attn0 = "attn0", b->mlp_norm0 = "mlp_norm0", b->mlp_in0 = "mlp_in0";
    b->mlp_out0 = "mlp_out0";
    b->attn_norm = "attn_norm", b->attn = "attn", b->mlp_norm = "mlp_norm", b->mlp_in = "mlp_in";
    b->mlp_out = "mlp_out", b->final_norm = "final_norm", b->head_dense = "head_dense";
    b->head_norm = "head_norm", b->head = b->task == MB_MLM ? "decoder" : "classifier";
}

/* ---- import -------------------------------------------------------------------- */

/* config keys that change nothing trainc computes: the dropouts, the token ids the
 * tokenizer holds, flash attention's and torch.compile's switches, the initializer's
 * cutoff, the sparse prediction of the masked tokens' logits alone (the same loss) */
static const char *const mb_ignored[] = {
    "attention_dropout", "embedding_dropout", "mlp_dropout", "classifier_dropout",
    "cls_token_id", "sep_token_id", "deterministic_flash_attn", "reference_compile",
    "repad_logits_with_grad", "initializer_cutoff_factor", "sparse_prediction",
    "sparse_pred_ignore_index", "_attn_implementation_autoset",
    /* (keys the published configs carry that transformers' ModernBERT never reads) */
    "layer_norm_eps", "position_embedding_type", NULL};

/* Does config.json name ARCH (and no other)? */
static int mb_arch_is(HfCfg *c, const char *arch)
{
    const cJSON *ar = hf_cfg_get(c, "architectures");
    return cJSON_GetArraySize(ar) == 1 && cJSON_IsString(ar->child) &&
           !strcmp(ar->child->valuestring, arch);
}

/* The task: TASK (--task), else the checkpoint's (a masked LM's without --labels, else a
 * classifier of the kind it is, a sequence classifier from a masked LM) */
static void mb_task(HfCfg *c, Mb *b, const char *task, const char *labels)
{
    b->task = -1;
    for (int k = 0; task && k < MB__TASKS; k++)
        if (!strcmp(task, mb_task_names[k]))
            b->task = k;
    if (task && b->task < 0)
        error_input("import: --task %s: a ModernBERT is imported as sequence (a class for each "
                    "text), token (a class for each token) or mlm (a masked language model)", task);
    if (b->task == MB_MLM && labels)
        error_input("import: --labels with --task mlm: a masked language model's classes are its "
                    "vocabulary");
    if (!task)
        b->task = mb_arch_is(c, mb_arch[MB_TOKEN]) ? MB_TOKEN
                  : mb_arch_is(c, mb_arch[MB_MLM]) && !labels ? MB_MLM : MB_SEQ;
    int same = mb_arch_is(c, mb_arch[b->task]);
    b->fresh_cls = b->task != MB_MLM && (!same || labels);
    b->fresh_head = mb_arch_is(c, "ModernBertModel");
    if (!same && !b->fresh_head && !mb_arch_is(c, mb_arch[MB_MLM]) &&
        !mb_arch_is(c, mb_arch[MB_SEQ]) && !mb_arch_is(c, mb_arch[MB_TOKEN]))
        hf_cfg_error(c, "architectures", "trainc imports ModernBertForMaskedLM, "
                     "ModernBertForSequenceClassification and ModernBertForTokenClassification, "
                     "and a ModernBertModel with --labels (its prediction head drawn anew)");
    if (b->fresh_head && b->task == MB_MLM)
        hf_cfg_error(c, "architectures", "ModernBertModel: no prediction head and decoder bias "
                     "to read for a masked LM (import ModernBertForMaskedLM)");
    if (b->fresh_cls && !labels)
        hf_cfg_error(c, "architectures", "%s: no %s classifier; --labels names the classes (or "
                     "gives their count) of a new one",
                     hf_cfg_get(c, "architectures")->child->valuestring, mb_task_names[b->task]);
}

/* The activations: the MLP's (hidden_activation) and the head's (classifier_activation),
 * gelu exact or in its tanh form */
static void mb_acts(HfCfg *c, Mb *b)
{
    b->act = !strcmp(hf_gelu_approximate(c, "hidden_activation", "gelu"), "tanh")
                 ? RT_GLU_GELU_TANH : RT_GLU_GELU;
    b->head_tanh = !strcmp(hf_gelu_approximate(c, "classifier_activation", "gelu"), "tanh");
}

/* The layers' kinds: every N-th global (layer 0 among them), the others local with a
 * window of local_attention / 2 positions on either side */
static void mb_layers(HfCfg *c, Mb *b)
{
    b->every = hf_cfg_int(c, "global_attn_every_n_layers", 3);
    int64_t la = hf_cfg_int(c, "local_attention", 128);
    if (b->every < 1)
        hf_cfg_error(c, "global_attn_every_n_layers", "%lld: 1 or more", (long long)b->every);
    if (la < 0)
        hf_cfg_error(c, "local_attention", "%lld: 0 or more", (long long)la);
    b->W = b->every > 1 ? la / 2 + 1 : 0;
    b->theta_global = hf_cfg_num(c, "global_rope_theta", 160000);
    /* (left out: ModernBertConfig's 10000; null: the global theta, as transformers reads it) */
    int null_local = cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(c->root, "local_rope_theta"));
    b->theta_local = null_local ? b->theta_global : hf_cfg_num(c, "local_rope_theta", 10000);
    hf_cfg_get(c, "local_rope_theta");
    if (!(b->theta_global > 0) || !(b->theta_local > 0))
        hf_cfg_error(c, b->theta_global > 0 ? "local_rope_theta" : "global_rope_theta",
                     "a theta above 0");
}

/* transformers 5's rope_parameters: {"full_attention": {"rope_type": "default",
 * "rope_theta": T}, "sliding_attention": {...}}, the global and local thetas */
static void mb_rope_parameters(HfCfg *c, Mb *b)
{
    const cJSON *rp = hf_cfg_get(c, "rope_parameters");
    static const char *const kinds[2] = {"full_attention", "sliding_attention"};
    for (int k = 0; rp && k < 2; k++) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(rp, kinds[k]);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "rope_type");
        const cJSON *th = cJSON_GetObjectItemCaseSensitive(e, "rope_theta");
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "default") || !cJSON_IsNumber(th) ||
            !(th->valuedouble > 0) || cJSON_GetArraySize(e) != 2)
            hf_cfg_error(c, "rope_parameters", "%s: {\"rope_type\": \"default\", \"rope_theta\": "
                         "T > 0} expected (trainc's ModernBERT rope is unscaled)", kinds[k]);
        *(k ? &b->theta_local : &b->theta_global) = th->valuedouble;
    }
}

/* transformers 5's layer_types, where given: layer i "full_attention" where i is a
 * multiple of global_attn_every_n_layers, else "sliding_attention" (the pattern trainc's
 * layout holds), or exit 1 naming the layer */
static void mb_layer_types(HfCfg *c, const Mb *b)
{
    const cJSON *lt = hf_cfg_get(c, "layer_types"), *e;
    if (!lt)
        return;
    if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != b->L)
        hf_cfg_error(c, "layer_types", "a list of num_hidden_layers (%lld) entries expected",
                     (long long)b->L);
    int64_t i = 0;
    cJSON_ArrayForEach(e, lt) {
        const char *want = i % b->every == 0 ? "full_attention" : "sliding_attention";
        if (!cJSON_IsString(e) || strcmp(e->valuestring, want))
            hf_cfg_error(c, "layer_types", "entry %lld: \"%s\" expected (one layer in %lld "
                         "global from layer 0, global_attn_every_n_layers)", (long long)i, want,
                         (long long)b->every);
        i++;
    }
}

/* config.json's sizes and switches; T the sequence (0: 128, at most the positions) */
static void mb_config(HfCfg *c, Mb *b, int64_t T)
{
    if (hf_cfg_get(c, "rope_scaling"))
        hf_cfg_error(c, "rope_scaling", "ModernBERT's rope is unscaled in trainc");
    b->V = hf_cfg_int(c, "vocab_size", 50368);
    b->D = hf_cfg_int(c, "hidden_size", 768);
    b->FF = hf_cfg_int(c, "intermediate_size", 1152);
    b->L = hf_cfg_int(c, "num_hidden_layers", 22);
    b->H = hf_cfg_int(c, "num_attention_heads", 12);
    int64_t P = hf_cfg_int(c, "max_position_embeddings", 8192);
    b->eps = hf_cfg_num(c, "norm_eps", 1e-5);
    b->norm_bias = hf_cfg_bool(c, "norm_bias", 0);
    b->attn_bias = hf_cfg_bool(c, "attention_bias", 0);
    b->mlp_bias = hf_cfg_bool(c, "mlp_bias", 0);
    b->head_bias = hf_cfg_bool(c, "classifier_bias", 0);
    b->decoder_bias = hf_cfg_bool(c, "decoder_bias", 1);
    b->std = hf_cfg_num(c, "initializer_range", 0.02);
    mb_acts(c, b);
    mb_layers(c, b);
    mb_rope_parameters(c, b);
    mb_layer_types(c, b);
    if (b->H < 1 || b->D % b->H)
        hf_cfg_error(c, "num_attention_heads", "%lld does not divide hidden_size %lld",
                     (long long)b->H, (long long)b->D);
    if ((b->D / b->H) % 2)
        hf_cfg_error(c, "num_attention_heads", "heads %lld wide: rope needs an even width",
                     (long long)(b->D / b->H));
    if (b->L < 1)
        hf_cfg_error(c, "num_hidden_layers", "%lld: 1 or more", (long long)b->L);
    b->T = T ? T : 128 < P ? 128 : P;
    if (b->T > P)
        error_input("import: --seq-len %lld is over the model's %lld positions", (long long)b->T,
                    (long long)P);
    const char *pool = hf_cfg_str(c, "classifier_pooling", "cls");
    if (strcmp(pool, "cls") && strcmp(pool, "mean"))
        hf_cfg_error(c, "classifier_pooling", "\"%s\": \"cls\" (the first token) or \"mean\" "
                     "(the mean over the text's tokens)", pool);
    b->mean = !strcmp(pool, "mean");
}

/* the classes: a masked LM's are the vocabulary's ids; --labels (LABELS) or config.json's */
static void mb_classes(HfCfg *c, Mb *b, const char *labels)
{
    if (b->task == MB_MLM && !hf_cfg_bool(c, "tie_word_embeddings", 1))
        hf_cfg_error(c, "tie_word_embeddings", "false: trainc's masked LM decoder is the word "
                     "embedding's weight, tied");
    hf_cfg_classifier(c);
    if (b->task == MB_MLM)
        hf_labels_unread(c), b->cls = (HfImage){.K = b->V};
    else {
        if (labels)
            hf_labels_arg(c, labels, &b->cls);
        else
            hf_image_labels(c, &b->cls);
    }
    for (int k = 0; mb_ignored[k]; k++)
        hf_cfg_get(c, mb_ignored[k]);   /* read, and nothing to do */
    const char *rest = hf_cfg_rest(c, hf_pretrained_keys);
    if (rest)
        hf_cfg_error(c, rest, "a key trainc does not know for modernbert: it cannot tell whether "
                     "the model computes what trainc would");
}

static void mb_layernorm(cJSON *ls, const Mb *b, const char *name)
{
    cJSON *n = hf_layer_n(ls, "layernorm", name, "eps", b->eps);
    if (!b->norm_bias)
        cJSON_AddFalseToObject(n, "bias");
}

static void mb_rope(cJSON *l, const char *key, double theta)
{
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(l, key), "theta", theta);
}

/* the attention of a layer (GLOBAL: layer 0's, or with an interleave the repeat's local
 * one with every N-th global) */
static void mb_attention_spec(cJSON *ls, const Mb *b, const char *name, int global)
{
    cJSON *a = hf_layer_n(ls, "attention", name, "heads", (double)b->H);
    cJSON_AddFalseToObject(a, "causal");
    if (!b->attn_bias)
        cJSON_AddFalseToObject(a, "bias");
    mb_rope(a, "rope", global || !b->W ? b->theta_global : b->theta_local);
    if (global || !b->W)
        return;
    cJSON_AddNumberToObject(a, "window", (double)b->W);
    cJSON *il = cJSON_AddObjectToObject(a, "interleave");
    cJSON_AddNumberToObject(il, "every", (double)b->every);
    cJSON_AddNullToObject(il, "window");
    mb_rope(il, "rope", b->theta_global);
}

/* the MLP's residual: layernorm, linear to 2 FF, glu, linear back */
static void mb_mlp_spec(cJSON *ls, const Mb *b, const char *norm, const char *in, const char *out)
{
    cJSON *r = cJSON_AddArrayToObject(hf_layer(ls, "residual", NULL), "body");
    mb_layernorm(r, b, norm);
    cJSON *l = hf_layer_n(r, "linear", in, "out", (double)(2 * b->FF));
    if (!b->mlp_bias)
        cJSON_AddFalseToObject(l, "bias");
    cJSON_AddStringToObject(hf_layer(r, "glu", NULL), "act", glu_act_names[b->act]);
    l = hf_layer_n(r, "linear", out, "out", (double)b->D);
    if (!b->mlp_bias)
        cJSON_AddFalseToObject(l, "bias");
}

/* the prediction head (linear, gelu, layernorm) and the decoder or the classifier */
static void mb_head_spec(cJSON *ls, const Mb *b)
{
    if (b->task == MB_SEQ && b->mean)   /* (the text's tokens: the row's first sequence) */
        cJSON_AddTrueToObject(hf_layer(ls, "token_mean", NULL), "first_sequence");
    else if (b->task == MB_SEQ)
        hf_layer(ls, "first_token", NULL);
    cJSON *l = hf_layer_n(ls, "linear", b->head_dense, "out", (double)b->D);
    if (!b->head_bias)
        cJSON_AddFalseToObject(l, "bias");
    cJSON *g = hf_layer(ls, "gelu", NULL);
    if (b->head_tanh)
        cJSON_AddStringToObject(g, "approximate", "tanh");
    mb_layernorm(ls, b, b->head_norm);
    if (b->task != MB_MLM) {
        hf_layer_n(ls, "linear", b->head, "out", (double)b->cls.K);
        return;
    }
    l = hf_layer(ls, "linear", b->head);
    cJSON_AddStringToObject(l, "tie", b->embed);
    if (!b->decoder_bias)
        cJSON_AddFalseToObject(l, "bias");
}

static void mb_inputs(cJSON *m, const Mb *b)
{
    cJSON *in = cJSON_AddObjectToObject(m, "inputs");
    for (int k = 0; k < 2; k++) {
        cJSON *x = cJSON_AddObjectToObject(in, k ? "pos" : "x");
        cJSON_AddItemToObject(x, "shape", cJSON_CreateIntArray((int[]){(int)b->T}, 1));
        cJSON_AddStringToObject(x, "dtype", "i32");
    }
    hf_image_inputs_y(in, &b->cls);
    if (b->task != MB_SEQ)
        cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItem(in, "y"), "shape",
                                               cJSON_CreateIntArray((int[]){(int)b->T}, 1));
    cJSON_AddStringToObject(m, "positions", "pos");
}

static cJSON *mb_spec(const Mb *b, const char *name)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "trainc", 1);
    cJSON *m = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(m, "name", name);
    mb_inputs(m, b);
    cJSON *ls = cJSON_AddArrayToObject(m, "layers");
    cJSON *e = hf_layer_n(ls, "embedding", b->embed, "vocab", (double)b->V);
    cJSON_AddNumberToObject(e, "dim", (double)b->D);
    cJSON_AddStringToObject(e, "input", "x");
    mb_layernorm(ls, b, b->embed_norm);
    /* layer 0: global, no norm before its attention */
    cJSON *r0 = cJSON_AddArrayToObject(hf_layer(ls, "residual", NULL), "body");
    mb_attention_spec(r0, b, b->attn0, 1);
    mb_mlp_spec(ls, b, b->mlp_norm0, b->mlp_in0, b->mlp_out0);
    if (b->L > 1) {
        cJSON *body = cJSON_AddArrayToObject(hf_layer_n(ls, "repeat", "blocks", "count",
                                                        (double)(b->L - 1)), "body");
        cJSON *r = cJSON_AddArrayToObject(hf_layer(body, "residual", NULL), "body");
        mb_layernorm(r, b, b->attn_norm);
        mb_attention_spec(r, b, b->attn, 0);
        mb_mlp_spec(body, b, b->mlp_norm, b->mlp_in, b->mlp_out);
    }
    mb_layernorm(ls, b, b->final_norm);
    mb_head_spec(ls, b);
    hf_image_loss(m);
    if (b->task != MB_SEQ)   /* (transformers' labels of the tokens no class is asked of) */
        cJSON_AddNumberToObject(cJSON_GetObjectItem(m, "loss"), "ignore_index", -100);
    return root;
}

int hf_modernbert_import(HfCfg *cfg, const char *dir, const char *out, const char *name,
                         int64_t T, const char *labels, const char *task)
{
    Mb b = {0};
    mb_task(cfg, &b, task, labels);
    mb_config(cfg, &b, T);
    mb_classes(cfg, &b, labels);
    mb_names(&b);
    HfJoinImport im = {.dir = dir};
    hf_weights_dir(&im.w, dir);
    b.prefix = hf_find(&im.w, "model.embeddings.tok_embeddings.weight") ? "model." : "";
    mb_walk(&b, hf_join_plan_import, &im);
    /* (the masked LM's decoder weight, which transformers ties at load; a classifier
     * checkpoint's classifier where a new one is drawn) */
    int left = hf_join_leave_out(&im.w, "decoder.", 0) +
               (b.fresh_cls ? hf_join_leave_out(&im.w, "classifier.", 0) : 0);
    hf_join_all_used(&im.w, dir, mb_arch[b.task]);
    char *text = hf_json_text(mb_spec(&b, name));
    if (rt_mkdir_p(out) != 0)
        cannot_write("import", out);
    hf_join_write_import(&im, xasprintf("%s/init.safetensors", out));
    hf_write_text("import", xasprintf("%s/model.json", out), text);
    hf_write_text("import", xasprintf("%s/train.json", out),
                  hf_text_train(0, NULL, 32, 3, 5e-5, 0.01));
    static const char *const what[] = {"a class for each text", "a class for each token",
                                       "a masked language model"};
    printf("trainc: import: %s (modernbert, %lld layers, one in %lld global, %d tensors, rows "
           "of %lld tokens, %s%s) -> %s/model.json, %s/train.json, %s/init.safetensors\n", dir,
           (long long)b.L, (long long)b.every, im.out.n, (long long)b.T, what[b.task],
           b.fresh_cls ? xasprintf("; a new %sclassifier of %lld classes: %d tensors drawn "
                                   "anew as transformers draws them (seed %d), %d of the "
                                   "checkpoint's left out", b.fresh_head ? "prediction head and "
                                   : "", (long long)b.cls.K, im.n_fresh, HF_FRESH_SEED, left) : "",
           out, out, out);
    return 0;
}

/* ---- export -------------------------------------------------------------------- */

static const char mb_layers_text[] =
    "embedding, layernorm, residual [attention] (layer 0), residual [layernorm, linear, glu, "
    "linear], a repeat of [residual [layernorm, attention], residual [layernorm, linear, glu, "
    "linear]] (the other layers), layernorm, then linear, gelu, layernorm and a linear tied to "
    "the embedding (a masked LM), the same with first_token or token_mean (first_sequence) "
    "before and an untied linear (a sequence classifier), or without either (a token "
    "classifier); no biases but the "
    "decoder's and the classifier's, or every linear's of a kind (config.json's switches); "
    "the attentions not causal, with rope, every N-th global among windowed ones";

/* Is the spec a ModernBERT: an embedding, a layernorm, then a residual whose attention has
 * rope and no causal mask? */
int hf_modernbert_spec(const Spec *s)
{
    if (s->n_layers < 4 || s->layers[0]->op != OP_EMBEDDING || s->layers[1]->op != OP_LAYERNORM)
        return 0;
    const Layer *r = s->layers[2];
    return r->op == OP_RESIDUAL && r->n_body == 1 && r->body[0]->op == OP_ATTENTION &&
           !r->body[0]->causal && r->body[0]->rope.theta > 0;
}

/* a layernorm: its bias as the first one's (the config has one norm_bias), eps too */
static void mb_match_norm(const Spec *s, Mb *b, const Layer *l, const char *at, int first)
{
    hf_want(s, &b->h, l, at, OP_LAYERNORM);
    if (!l->affine)
        hf_refuse(s, &b->h, l, "a layernorm without its weight");
    if (!first && (l->bias != b->norm_bias || l->eps != b->eps))
        hf_refuse(s, &b->h, l, "a layernorm's bias or eps other than the first's (the config has "
                  "one norm_bias and one norm_eps)");
    b->norm_bias = l->bias, b->eps = l->eps;
}

/* a linear of OUT outputs (0: any) whose bias is *BIAS (-1: not yet known; set) */
static int64_t mb_match_linear(const Spec *s, Mb *b, const Layer *l, const char *at, int64_t out,
                               int *bias)
{
    hf_want(s, &b->h, l, at, OP_LINEAR);
    if (l->tie)
        hf_refuse(s, &b->h, l, "a tied linear");
    if (out && l->out != out)
        hf_refuse(s, &b->h, l, xasprintf("%lld outputs where %lld belong", (long long)l->out,
                                         (long long)out));
    if (*bias >= 0 && l->bias != *bias)
        hf_refuse(s, &b->h, l, "a bias where its kind's other linears have none, or none where "
                  "they have one (the config has one switch a kind)");
    *bias = l->bias;
    return l->out;
}

/* an attention: its heads, bias, rope; GLOBAL: layer 0's (no window); else the repeat's
 * (a window and an interleave of global layers, or neither) */
static void mb_match_attention(const Spec *s, Mb *b, const Layer *l, const char *at, int global)
{
    hf_want(s, &b->h, l, at, OP_ATTENTION);
    if (l->causal || (l->kv_heads && l->kv_heads != l->heads) || l->head_dim || l->qk_norm ||
        l->att_scale || l->att_softcap || l->bias_qkv || l->bias_proj || !l->rope.theta ||
        l->rope.factor || l->rope.lr || l->rope.yarn || l->rope.dims || l->rope.linear)
        hf_refuse(s, &b->h, l, "an attention other than ModernBERT's (not causal, rope without "
                  "scaling, no kv_heads, head_dim, qk_norm, scale, softcap, biases on both or "
                  "neither)");
    if (global) {
        if (l->window || l->il.every)
            hf_refuse(s, &b->h, l, "a window or an interleave in layer 0 (global in ModernBERT)");
        b->H = l->heads, b->attn_bias = l->bias, b->theta_global = l->rope.theta;
        return;
    }
    const Interleave *il = &l->il;
    int windowed = l->window && il->every >= 2 && il->set_window && !il->window && il->set_rope &&
                   il->rope.theta == b->theta_global && !il->rope.factor && !il->rope.lr &&
                   !il->rope.yarn && !il->rope.dims;
    if (l->heads != b->H || l->bias != b->attn_bias ||
        (!windowed && (l->window || il->every || l->rope.theta != b->theta_global)))
        hf_refuse(s, &b->h, l, "an attention unlike layer 0's, or windowed without an interleave "
                  "of global layers ({\"every\": N, \"window\": null, \"rope\": layer 0's})");
    b->every = windowed ? il->every : 1;
    b->W = windowed ? l->window : 0;
    b->theta_local = l->rope.theta;
}

/* an MLP residual at L: layernorm, linear 2 FF, glu (gelu), linear D */
static void mb_match_mlp(const Spec *s, Mb *b, const Layer *l, const char *at, char **norm,
                         char **in, char **out, int first)
{
    char *p = hf_match_residual(s, &b->h, l, at, 4);
    Layer **m = l->body;
    mb_match_norm(s, b, m[0], at, 0);
    int64_t ff2 = mb_match_linear(s, b, m[1], at, first ? 0 : 2 * b->FF, &b->mlp_bias);
    hf_want(s, &b->h, m[2], at, OP_GLU);
    if (m[2]->glu_act != RT_GLU_GELU && m[2]->glu_act != RT_GLU_GELU_TANH)
        hf_refuse(s, &b->h, m[2], "a glu of another act than gelu (ModernBERT's GeGLU)");
    if (!first && m[2]->glu_act != b->act)
        hf_refuse(s, &b->h, m[2], "a glu act other than layer 0's (the config has one)");
    b->act = m[2]->glu_act, b->FF = ff2 / 2;
    mb_match_linear(s, b, m[3], at, b->D, &b->mlp_bias);
    *norm = hf_layer_name(m[0], 0, p), *in = hf_layer_name(m[1], 1, p);
    *out = hf_layer_name(m[3], 3, p);
}

/* the repeat at REP of the other layers */
static void mb_match_blocks(const Spec *s, Mb *b, const Layer *rep, const char *at)
{
    hf_want(s, &b->h, rep, at, OP_REPEAT);
    if (rep->n_body != 2)
        hf_refuse(s, &b->h, rep, "a repeat of other than a layer's two residuals");
    b->L = 1 + rep->count;
    b->block = rep->name ? xasprintf("%s.%%lld.", rep->name) : "%lld.";
    char *a = hf_match_residual(s, &b->h, rep->body[0], rep->path, 2);
    mb_match_norm(s, b, rep->body[0]->body[0], rep->path, 0);
    mb_match_attention(s, b, rep->body[0]->body[1], rep->path, 0);
    b->attn_norm = hf_layer_name(rep->body[0]->body[0], 0, a);
    b->attn = hf_layer_name(rep->body[0]->body[1], 1, a);
    mb_match_mlp(s, b, rep->body[1], rep->path, &b->mlp_norm, &b->mlp_in, &b->mlp_out, 0);
}

/* the head from ls[k] on: [first_token or token_mean over the first sequence,] linear,
 * gelu, layernorm, the decoder or the classifier; how many layers */
static int mb_match_head(const Spec *s, Mb *b, const Layer *const *ls, int k)
{
    const char *at = "$.model.layers";
    b->mean = ls[k] && ls[k]->op == OP_TOKEN_MEAN;
    if (b->mean && !ls[k]->first_seq)
        hf_refuse(s, &b->h, ls[k], "a token_mean over every token (ModernBERT's mean pooling is "
                  "over the text's: \"first_sequence\": true)");
    int first = b->mean || (ls[k] && ls[k]->op == OP_FIRST_TOKEN);
    k += first;
    b->head_bias = -1;
    mb_match_linear(s, b, ls[k], at, b->D, &b->head_bias);
    hf_want(s, &b->h, ls[k + 1], at, OP_GELU);
    b->head_tanh = ls[k + 1]->gelu_tanh;
    mb_match_norm(s, b, ls[k + 2], at, 0);
    const Layer *h = hf_want(s, &b->h, ls[k + 3], at, OP_LINEAR);
    b->head_dense = hf_layer_name(ls[k], k, ""), b->head_norm = hf_layer_name(ls[k + 2], k + 2, "");
    b->head = hf_layer_name(h, k + 3, "");
    if (h->tie) {
        if (first || strcmp(h->tie, b->embed))
            hf_refuse(s, &b->h, h, "a tied linear other than a masked LM's decoder (the word "
                      "embedding's weight, no pooling before the head)");
        b->task = MB_MLM, b->decoder_bias = h->bias, b->cls.K = b->V;
    } else {
        if (!h->bias)
            hf_refuse(s, &b->h, h, "a classifier without bias");
        b->task = first ? MB_SEQ : MB_TOKEN, b->cls.K = h->out;
    }
    return first + 4;
}

/* The spec's layers as a ModernBERT, or exit 1 naming the first that is not */
static void mb_match(const Spec *s, Mb *b)
{
    b->h = (HfLayout){"ModernBertForMaskedLM, ModernBertForSequenceClassification or "
                      "ModernBertForTokenClassification", mb_layers_text};
    const Layer *ls[14] = {0};
    for (int k = 0; k < 14 && k < s->n_layers; k++)
        ls[k] = s->layers[k];
    const char *at = "$.model.layers";
    const Layer *e = hf_want(s, &b->h, ls[0], at, OP_EMBEDDING);
    b->V = e->vocab, b->D = e->dim, b->embed = hf_layer_name(e, 0, "");
    mb_match_norm(s, b, ls[1], at, 1);
    b->embed_norm = hf_layer_name(ls[1], 1, "");
    char *a = hf_match_residual(s, &b->h, ls[2], at, 1);
    mb_match_attention(s, b, ls[2]->body[0], at, 1);
    b->attn0 = hf_layer_name(ls[2]->body[0], 0, a);
    b->mlp_bias = -1;
    mb_match_mlp(s, b, ls[3], at, &b->mlp_norm0, &b->mlp_in0, &b->mlp_out0, 1);
    int k = 4;
    b->L = 1, b->every = 1, b->theta_local = b->theta_global;
    if (ls[k] && ls[k]->op == OP_REPEAT)
        mb_match_blocks(s, b, ls[k++], at);
    mb_match_norm(s, b, ls[k], at, 0);
    b->final_norm = hf_layer_name(ls[k], k, "");
    int n = k + 1 + mb_match_head(s, b, ls, k + 1);
    if (b->task != MB_MLM)
        hf_image_labels_from_spec(s, &b->cls);
    if (s->n_layers > n)
        hf_refuse(s, &b->h, s->layers[n], "a layer after the head");
    if (s->loss != RT_LOSS_CROSS_ENTROPY)
        error_at(s->model_file, "$.model.loss", "%s's loss is cross entropy", mb_arch[b->task]);
}

static cJSON *mb_hf_config(const Mb *b)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToObject(c, "architectures",
                          cJSON_CreateStringArray((const char *[]){mb_arch[b->task]}, 1));
    cJSON_AddStringToObject(c, "model_type", "modernbert");
    cJSON_AddNumberToObject(c, "vocab_size", (double)b->V);
    cJSON_AddNumberToObject(c, "hidden_size", (double)b->D);
    cJSON_AddNumberToObject(c, "intermediate_size", (double)b->FF);
    cJSON_AddNumberToObject(c, "num_hidden_layers", (double)b->L);
    cJSON_AddNumberToObject(c, "num_attention_heads", (double)b->H);
    const char *tanh = "gelu_pytorch_tanh";
    cJSON_AddStringToObject(c, "hidden_activation", b->act == RT_GLU_GELU ? "gelu" : tanh);
    cJSON_AddStringToObject(c, "classifier_activation", b->head_tanh ? tanh : "gelu");
    cJSON_AddNumberToObject(c, "global_attn_every_n_layers", (double)b->every);
    cJSON_AddNumberToObject(c, "local_attention", (double)(b->W ? 2 * (b->W - 1) : 128));
    cJSON_AddItemToObject(c, "global_rope_theta", hf_float(b->theta_global));
    cJSON_AddItemToObject(c, "local_rope_theta", hf_float(b->theta_local));
    cJSON_AddItemToObject(c, "norm_eps", hf_float(b->eps));
    cJSON_AddBoolToObject(c, "norm_bias", b->norm_bias);
    cJSON_AddBoolToObject(c, "attention_bias", b->attn_bias);
    cJSON_AddBoolToObject(c, "mlp_bias", b->mlp_bias);
    cJSON_AddBoolToObject(c, "classifier_bias", b->head_bias);
    cJSON_AddBoolToObject(c, "decoder_bias", b->task != MB_MLM || b->decoder_bias);
    cJSON_AddStringToObject(c, "classifier_pooling", b->mean ? "mean" : "cls");
    /* (the padding row's id: ModernBERT's where the vocabulary holds it; it only keeps
     * transformers' gradient off that row) */
    cJSON_AddNumberToObject(c, "pad_token_id", b->V > 50283 ? 50283 : 0);
    cJSON_AddItemToObject(c, "initializer_range", hf_float(0.02));
    if (b->task != MB_MLM)
        hf_image_config_labels(c, &b->cls);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    return c;
}

int hf_modernbert_export(const Spec *s, const char *weights, const char *out, const char *tok)
{
    Mb b = {0};
    mb_match(s, &b);
    b.prefix = "model.";
    HfJoinExport e = {0};
    hf_join_export_open(&e, s, weights);
    mb_walk(&b, hf_join_plan_export, &e);
    hf_join_export_adapters(&e);
    hf_join_text_export(&e, mb_hf_config(&b), "modernbert", weights, tok, out);
    return 0;
}
