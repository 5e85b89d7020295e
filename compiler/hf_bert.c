/* hf_bert.c: Hugging Face's text classifiers of the BERT family both ways:
 * BertForSequenceClassification, RobertaForSequenceClassification,
 * DistilBertForSequenceClassification and ElectraForSequenceClassification, their
 * ForTokenClassification and ForQuestionAnswering and their masked language models,
 * ForMaskedLM (one table of names, families[]). `trainc import hf` of such a folder
 * (config.json, the weights; with --labels, any of the family's models and a new head;
 * --task, another kind) writes a model spec of trainc's layers over padded rows (the
 * model's positions: the padding a sequence apart, which no text token sees, as
 * transformers' attention_mask does) and its weights: word, token type and position
 * embeddings, a layernorm (ELECTRA's narrower embeddings then a linear to the blocks'
 * width), post-norm blocks whose attention sees the whole of its sequence, then the first
 * token through a pooler and a linear head, a linear head on every token (a question
 * answerer's of 2, then span), or the masked LM's transform and its head tied to the word
 * embedding. `trainc export hf` writes a spec of that layout back as config.json and
 * model.safetensors. One table of hf_join.c's joins (bert_walk) serves both; hf_join.c
 * also exports and matches, shared with ViT. */
#include <stdlib.h>
#include <string.h>
#include "cmd.h"
#include "hf.h"
#include "ops/op.h"

/* A family's names: its own; in transformers model_type, its sequence classifier, its
 * models' stem ("Bert": BertModel, BertForMaskedLM), the encoder's tensors' prefix, a
 * block's after it (a format of its index) and its tensors' under that, the pooler's (a
 * format of the prefix) and the head's; the pooler's activation; vocab_size's default.
 * Its token classifier is stem + "ForTokenClassification", its head "classifier". Its
 * masked LM's: the transform's linear and layernorm, the head's bias, the head's tied
 * weight and bias (a prefix, left out: transformers ties them at load), the transform's
 * activation (NULL: the encoder's) */
typedef struct Family {
    const char *name, *type, *arch, *stem, *prefix, *block;
    const char *q, *k, *v, *proj, *norm1, *fc1, *fc2, *norm2;
    const char *pooler, *head, *act;
    int64_t vocab;
    const char *mlm_dense, *mlm_norm, *mlm_bias, *mlm_decoder, *mlm_act;
} Family;

enum { BERT, ROBERTA, DISTIL, ELECTRA };
static const Family families[] = {
    [BERT] = {"BERT", "bert", "BertForSequenceClassification", "Bert", "bert.",
              "encoder.layer.%lld.", "attention.self.query", "attention.self.key",
              "attention.self.value", "attention.output.dense", "attention.output.LayerNorm",
              "intermediate.dense", "output.dense", "output.LayerNorm", "%spooler.dense",
              "classifier", "tanh", 30522, "cls.predictions.transform.dense",
              "cls.predictions.transform.LayerNorm", "cls.predictions.bias",
              "cls.predictions.decoder.", NULL},
    [ROBERTA] = {"RoBERTa", "roberta", "RobertaForSequenceClassification", "Roberta", "roberta.",
                 "encoder.layer.%lld.", "attention.self.query", "attention.self.key",
                 "attention.self.value", "attention.output.dense", "attention.output.LayerNorm",
                 "intermediate.dense", "output.dense", "output.LayerNorm", "classifier.dense",
                 "classifier.out_proj", "tanh", 50265, "lm_head.dense", "lm_head.layer_norm",
                 "lm_head.bias", "lm_head.decoder.", "gelu"},
    [DISTIL] = {"DistilBERT", "distilbert", "DistilBertForSequenceClassification", "DistilBert",
                "distilbert.", "transformer.layer.%lld.", "attention.q_lin", "attention.k_lin",
                "attention.v_lin", "attention.out_lin", "sa_layer_norm", "ffn.lin1", "ffn.lin2",
                "output_layer_norm", "pre_classifier", "classifier", "relu", 30522,
                "vocab_transform", "vocab_layer_norm", "vocab_projector.bias",
                "vocab_projector.weight", NULL},
    [ELECTRA] = {"ELECTRA", "electra", "ElectraForSequenceClassification", "Electra", "electra.",
                 "encoder.layer.%lld.", "attention.self.query", "attention.self.key",
                 "attention.self.value", "attention.output.dense", "attention.output.LayerNorm",
                 "intermediate.dense", "output.dense", "output.LayerNorm", "classifier.dense",
                 "classifier.out_proj", "gelu", 30522, "generator_predictions.dense",
                 "generator_predictions.LayerNorm", "generator_lm_head.bias", "generator_lm_head.",
                 "gelu"}};

/* RoBERTa's kin: its layers and tensor names under another name, model_type, models'
 * stem and vocab_size default. They import as RoBERTa (fam ROBERTA, these names); an
 * export of those layers is RoBERTa's, which computes the same. */
static const struct {
    const char *name, *type, *stem;
    int64_t vocab;
} roberta_kin[] = {{"XLM-RoBERTa", "xlm-roberta", "XLMRoberta", 250002},
                   {"CamemBERT", "camembert", "Camembert", 32005}};

/* The family of model_type TYPE (BERT's where none other's), its index in *fam */
static const Family *family_of(const char *type, int *fam)
{
    static Family kin[sizeof roberta_kin / sizeof *roberta_kin];
    for (size_t k = 0; k < sizeof kin / sizeof *kin; k++)
        if (!strcmp(type, roberta_kin[k].type)) {
            kin[k] = families[ROBERTA];
            kin[k].name = roberta_kin[k].name, kin[k].type = roberta_kin[k].type;
            kin[k].stem = roberta_kin[k].stem, kin[k].vocab = roberta_kin[k].vocab;
            kin[k].arch = xasprintf("%sForSequenceClassification", roberta_kin[k].stem);
            *fam = ROBERTA;
            return &kin[k];
        }
    *fam = !strcmp(type, "roberta") ? ROBERTA : !strcmp(type, "distilbert") ? DISTIL
         : !strcmp(type, "electra") ? ELECTRA : BERT;
    return &families[*fam];
}

/* What the model computes from the encoder's output: a class for the text (the first
 * token through the pooler), one for each token, the masked tokens' ids, or an answer's
 * span (the start and end logits over the tokens) */
enum { TASK_SEQ, TASK_TOKEN, TASK_MLM, TASK_QA, TASK__COUNT };
static const char *const task_names[] = {"sequence", "token", "mlm", "qa"};
static const char *const task_arch[] = {"ForSequenceClassification", "ForTokenClassification",
                                        "ForMaskedLM", "ForQuestionAnswering"};

/* What the model's shapes and layers depend on, and the names of trainc's layers
 * (import: default_names; export: the spec's own) */
typedef struct Bert {
    const Family *f;                   /* BERT's, RoBERTa's (its position offset) or DistilBERT's */
    int fam;                           /* which: BERT, ROBERTA (and its kin), DISTIL */
    HfImage cls;                       /* the classes (K, their names) */
    int64_t V, D, L, H, FF, TV, P, T;  /* vocabulary, width, blocks, heads, MLP width, token
                                          types (DistilBERT: 0, none), positions (trainc's),
                                          sequence */
    int64_t E;                         /* the embeddings' width (ELECTRA's embedding_size; a
                                          linear, embeddings_project, to D after them where
                                          it is not D), else D */
    int64_t skip;                      /* the position rows before trainc's (RoBERTa's
                                          pad_token_id + 1), else 0 */
    double eps;
    int gelu_tanh;
    int mlm_tanh;                      /* the masked LM's transform: gelu's tanh form */
    const char *prefix;                /* the encoder's tensors' ("bert.", "roberta.", or ""
                                          for a bare model's) */
    int task;                          /* TASK_SEQ, TASK_TOKEN, TASK_MLM or TASK_QA */
    int base;                          /* import: a checkpoint without this classifier */
    int fresh_pooler, fresh_head;      /* import: drawn anew (normal(0, std), bias 0) */
    double std;                        /* initializer_range */
    HfLayout h;                        /* export: what the spec's layers are matched to */
    char *embed, *types, *pos, *embed_norm, *pooler, *head, *block;   /* block: "blocks.%lld." */
    char *project;                     /* ELECTRA's embeddings_project, where E is not D */
    char *attn, *norm1, *fc1, *fc2, *norm2;
    char *mlm_dense, *mlm_norm;        /* the masked LM's transform */
} Bert;

static const char *arch_of(const Bert *b)
{
    return xasprintf("%s%s", b->f->stem, task_arch[b->task]);
}

/* transformers' name of the classifier's last linear */
static const char *head_of(const Bert *b)
{
    return b->task == TASK_TOKEN ? "classifier" : b->task == TASK_QA ? "qa_outputs" : b->f->head;
}

/* Block i's tensors: q, k and v stacked as trainc's qkv */
static void bert_block(const Bert *b, int64_t i, hf_join_fn fn, void *ctx)
{
    char *ours = xasprintf(b->block, (long long)i);
    const Family *f = b->f;
    char *th = xasprintf("%s%s", b->prefix, xasprintf(f->block, (long long)i));
    int64_t D = b->D;
    const char *w[3], *bs[3], *qkv[3] = {f->q, f->k, f->v};
    for (int k = 0; k < 3; k++) {
        w[k] = xasprintf("%s%s.weight", th, qkv[k]);
        bs[k] = xasprintf("%s%s.bias", th, qkv[k]);
    }
    hf_join(fn, ctx, xasprintf("%s%s.qkv.weight", ours, b->attn), 2, (int64_t[]){3 * D, D}, 3, w,
            2, (int64_t[]){D, D});
    hf_join(fn, ctx, xasprintf("%s%s.qkv.bias", ours, b->attn), 1, (int64_t[]){3 * D}, 3, bs, 1,
            &D);
    hf_join_linear(fn, ctx, xasprintf("%s%s.proj", ours, b->attn), xasprintf("%s%s", th, f->proj),
                   D, D);
    hf_join_layernorm(fn, ctx, xasprintf("%s%s", ours, b->norm1), xasprintf("%s%s", th, f->norm1),
                      D);
    hf_join_linear(fn, ctx, xasprintf("%s%s", ours, b->fc1), xasprintf("%s%s", th, f->fc1), b->FF,
                   D);
    hf_join_linear(fn, ctx, xasprintf("%s%s", ours, b->fc2), xasprintf("%s%s", th, f->fc2), D,
                   b->FF);
    hf_join_layernorm(fn, ctx, xasprintf("%s%s", ours, b->norm2), xasprintf("%s%s", th, f->norm2),
                      D);
}

/* transformers' name of the pooler (BERT's; RoBERTa's classifier.dense, DistilBERT's
 * pre_classifier) */
static const char *pooler_of(const Bert *b) { return xasprintf(b->f->pooler, b->prefix); }

/* a linear OUT x IN: transformers' tensors THEIRS, or drawn anew (FRESH) */
static void linear_or_fresh(const Bert *b, hf_join_fn fn, void *ctx, const char *ours,
                            const char *theirs, int64_t out, int64_t in, int fresh)
{
    if (fresh)
        hf_join_fresh_linear(fn, ctx, ours, out, in, b->std);
    else
        hf_join_linear(fn, ctx, ours, theirs, out, in);
}

/* Every tensor, in trainc's order */
static void bert_walk(const Bert *b, hf_join_fn fn, void *ctx)
{
    const char *m = b->prefix;
    int64_t D = b->D, E = b->E;
    hf_join_same(fn, ctx, xasprintf("%s.weight", b->embed),
                 xasprintf("%sembeddings.word_embeddings.weight", m), 2, (int64_t[]){b->V, E});
    if (b->TV)
        hf_join_same(fn, ctx, xasprintf("%s.weight", b->types),
                     xasprintf("%sembeddings.token_type_embeddings.weight", m), 2,
                     (int64_t[]){b->TV, E});
    hf_join_rows(fn, ctx, xasprintf("%s.weight", b->pos),
                 xasprintf("%sembeddings.position_embeddings.weight", m), b->P, E, b->skip);
    hf_join_layernorm(fn, ctx, b->embed_norm, xasprintf("%sembeddings.LayerNorm", m), E);
    if (E != D)
        hf_join_linear(fn, ctx, b->project, xasprintf("%sembeddings_project", m), D, E);
    for (int64_t i = 0; i < b->L; i++)
        bert_block(b, i, fn, ctx);
    if (b->task == TASK_MLM) {   /* (the head's weight is the word embedding's) */
        hf_join_linear(fn, ctx, b->mlm_dense, b->f->mlm_dense, E, D);
        hf_join_layernorm(fn, ctx, b->mlm_norm, b->f->mlm_norm, E);
        hf_join_same(fn, ctx, xasprintf("%s.bias", b->head), b->f->mlm_bias, 1, &b->V);
        return;
    }
    if (b->task == TASK_SEQ)
        linear_or_fresh(b, fn, ctx, b->pooler, pooler_of(b), D, D, b->fresh_pooler);
    linear_or_fresh(b, fn, ctx, b->head, head_of(b), b->cls.K, D, b->fresh_head);
}

/* The names import writes */
static void default_names(Bert *b)
{
    b->embed = "embed", b->types = "token_types", b->pos = "pos", b->embed_norm = "embed_norm";
    b->pooler = "pooler", b->head = "head", b->block = "blocks.%lld.";
    b->mlm_dense = "mlm_dense", b->mlm_norm = "mlm_norm", b->project = "embed_project";
    b->attn = "attn", b->norm1 = "norm1", b->fc1 = "fc1", b->fc2 = "fc2", b->norm2 = "norm2";
}

/* ---- import -------------------------------------------------------------------- */

/* config keys that change nothing trainc computes: the dropouts (every import leaves
 * them out; DistilBERT's names too) */
static const char *const bert_ignored[] = {"hidden_dropout_prob", "attention_probs_dropout_prob",
                                           "dropout", "attention_dropout", "seq_classif_dropout",
                                           "qa_dropout", "summary_last_dropout", NULL};

/* The family's models whose encoder import takes (their own heads left out) */
static const char *const bases[] = {"Model", "ForMaskedLM", "ForPreTraining",
                                    "ForNextSentencePrediction", "ForSequenceClassification",
                                    "ForTokenClassification", "ForQuestionAnswering",
                                    "ForMultipleChoice", NULL};

/* Does config.json name the family's model STEM + SUFFIX (and no other)? */
static int arch_is(HfCfg *c, const Bert *b, const char *suffix)
{
    const cJSON *ar = hf_cfg_get(c, "architectures");
    return cJSON_GetArraySize(ar) == 1 && cJSON_IsString(ar->child) &&
           !strcmp(ar->child->valuestring, xasprintf("%s%s", b->f->stem, suffix));
}

/* The task: TASK (import's --task), else the checkpoint's: a token classifier's, a masked
 * LM's (ForMaskedLM, ForPreTraining) without --labels (LABELS), else a sequence
 * classifier */
static void bert_task(HfCfg *c, Bert *b, const char *task, const char *labels)
{
    b->task = -1;
    for (int k = 0; task && k < TASK__COUNT; k++)
        if (!strcmp(task, task_names[k]))
            b->task = k;
    if (task && b->task < 0)
        error_input("import: --task %s: sequence (a class for each text), token (a class for "
                    "each token), mlm (a masked language model) or qa (an answer's span in the "
                    "text)", task);
    if ((b->task == TASK_MLM || b->task == TASK_QA) && labels)
        error_input("import: --labels with --task %s: %s", task, b->task == TASK_MLM
                    ? "a masked language model's classes are its vocabulary"
                    : "a question answerer's classes are the row's places");
    if (!task)
        b->task = arch_is(c, b, "ForTokenClassification") ? TASK_TOKEN
                  : arch_is(c, b, "ForQuestionAnswering") && !labels ? TASK_QA
                  : !labels && (arch_is(c, b, "ForMaskedLM") || arch_is(c, b, "ForPreTraining"))
                      ? TASK_MLM : TASK_SEQ;
}

/* A masked LM's checkpoint: one with the head (ForMaskedLM, BERT's ForPreTraining), tied
 * to the word embedding as transformers ties it */
static void mlm_arch(HfCfg *c, const Bert *b)
{
    if (!arch_is(c, b, "ForMaskedLM") && !(b->fam == BERT && arch_is(c, b, "ForPreTraining")))
        hf_cfg_error(c, "architectures", "no masked language model's head to read (%s%s%s): "
                     "trainc imports a masked LM from %sForMaskedLM%s", b->f->mlm_dense,
                     b->fam == BERT ? ", " : "", b->fam == BERT ? b->f->mlm_bias : "",
                     b->f->stem, b->fam == BERT ? " or BertForPreTraining" : "");
    if (!hf_cfg_bool(c, "tie_word_embeddings", 1))
        hf_cfg_error(c, "tie_word_embeddings", "false: trainc's masked LM head is the word "
                     "embedding's weight, tied");
}

/* The architecture config.json names: the task's classifier, or with --labels (LABELS;
 * a question answerer's needs none) one of the family's other models (b->base), whose
 * classifier is new */
static void bert_arch(HfCfg *c, Bert *b, const char *labels)
{
    const char *fam = b->f->stem;
    const cJSON *ar = hf_cfg_get(c, "architectures");
    for (const cJSON *e = ar ? ar->child : NULL; e; e = e->next) {
        const char *a = cJSON_IsString(e) ? e->valuestring : "";
        int known = 0;
        for (int k = 0; bases[k] && !known; k++)
            known = !strcmp(a, xasprintf("%s%s", fam, bases[k])) && strcmp(a, arch_of(b));
        b->base |= known;
        if (known && !labels && b->task != TASK_QA)
            hf_cfg_error(c, "architectures", "%s: no %s classifier; --labels names the classes "
                         "(or gives their count) of a new one (--task qa: a new question "
                         "answerer)", a, task_names[b->task]);
        if (!known && strcmp(a, arch_of(b)))
            hf_cfg_error(c, "architectures", "%s: trainc imports a %s's encoder with a sequence "
                         "or token classifier, its masked LM or a question answerer (%s, "
                         "%sForTokenClassification, %sForMaskedLM, %sForQuestionAnswering; "
                         "%sModel and the like with --labels or --task qa)", *a ? a : "an entry",
                         b->f->name, b->f->arch, fam, fam, fam, fam);
    }
}

/* What BERT's encoder does that trainc's layers do not: exit 1 naming the key */
static void bert_refusals(HfCfg *c)
{
    const char *pe = hf_cfg_str(c, "position_embedding_type", "absolute");
    if (strcmp(pe, "absolute"))
        hf_cfg_error(c, "position_embedding_type", "\"%s\": trainc's positions are learned rows "
                     "(\"absolute\")", pe);
    if (hf_cfg_bool(c, "is_decoder", 0))
        hf_cfg_error(c, "is_decoder", "true: a causal decoder; trainc imports the encoder");
    if (hf_cfg_bool(c, "add_cross_attention", 0))
        hf_cfg_error(c, "add_cross_attention",
                     "true: cross attention is not among trainc's layers");
}

/* BERT's, RoBERTa's and ELECTRA's sizes (ElectraConfig's defaults: ELECTRA-small's
 * discriminator) */
static void bert_sizes(HfCfg *c, Bert *b)
{
    bert_refusals(c);
    int el = b->fam == ELECTRA;
    b->D = hf_cfg_int(c, "hidden_size", el ? 256 : 768);
    b->E = el ? hf_cfg_int(c, "embedding_size", 128) : b->D;
    b->L = hf_cfg_int(c, "num_hidden_layers", 12);
    b->H = hf_cfg_int(c, "num_attention_heads", el ? 4 : 12);
    b->FF = hf_cfg_int(c, "intermediate_size", el ? 1024 : 3072);
    b->TV = hf_cfg_int(c, "type_vocab_size", 2);
    b->eps = hf_cfg_num(c, "layer_norm_eps", 1e-12);
    b->gelu_tanh = !strcmp(hf_gelu_approximate(c, "hidden_act", "gelu"), "tanh");
}

/* DistilBERT's sizes (its own key names; no token types; its layernorms' eps 1e-12, as
 * its modeling code fixes it) */
static void distil_sizes(HfCfg *c, Bert *b)
{
    if (hf_cfg_bool(c, "sinusoidal_pos_embds", 0))
        hf_cfg_error(c, "sinusoidal_pos_embds", "true: fixed sinusoidal positions, which trainc "
                     "would train as learned rows");
    hf_cfg_get(c, "tie_weights_");   /* (the masked-LM head's, left out) */
    b->D = hf_cfg_int(c, "dim", 768);
    b->L = hf_cfg_int(c, "n_layers", 6);
    b->H = hf_cfg_int(c, "n_heads", 12);
    b->FF = hf_cfg_int(c, "hidden_dim", 3072);
    b->TV = 0, b->eps = 1e-12, b->E = b->D;
    b->gelu_tanh = !strcmp(hf_gelu_approximate(c, "activation", "gelu"), "tanh");
}

/* A question answerer's outputs: num_labels 2 (transformers' qa_outputs is that wide) */
static void qa_labels(HfCfg *c, Bert *b)
{
    const cJSON *id = hf_cfg_get(c, "id2label");
    if (id && cJSON_GetArraySize(id) != 2)
        hf_cfg_error(c, "id2label", "%d labels: a question answerer's qa_outputs has 2 outputs "
                     "(the start's and the end's logit)", cJSON_GetArraySize(id));
    hf_labels_unread(c);
    b->cls = (HfImage){.K = 2};
}

/* config.json as b's sizes; T the sequence (0: 128, a question answerer's 384, at most the
 * positions there are); LABELS: import's --labels (NULL: config.json's classes) */
static void bert_config(HfCfg *c, Bert *b, int64_t T, const char *labels, const char *task)
{
    bert_task(c, b, task, labels);
    if (b->task == TASK_MLM)
        mlm_arch(c, b);
    else
        bert_arch(c, b, labels);
    hf_cfg_classifier(c);
    if (b->fam == DISTIL)
        distil_sizes(c, b);
    else
        bert_sizes(c, b);
    b->V = hf_cfg_int(c, "vocab_size", b->f->vocab);
    /* (BERT's pad_token_id, 0, changes nothing here: hf_pretrained_keys) */
    int64_t pad = b->fam == ROBERTA ? hf_cfg_int(c, "pad_token_id", 1) : 0,
            all = hf_cfg_int(c, "max_position_embeddings", 512);
    b->skip = b->fam == ROBERTA ? pad + 1 : 0;   /* RoBERTa's positions count from pad + 1 */
    b->P = all - b->skip;
    if (b->D % b->H)
        hf_cfg_error(c, "num_attention_heads", "%lld does not divide hidden_size %lld",
                     (long long)b->H, (long long)b->D);
    if (b->P < 1)
        hf_cfg_error(c, "max_position_embeddings", "%lld: no position past pad_token_id %lld's "
                     "rows", (long long)all, (long long)pad);
    int64_t dflt = b->task == TASK_QA ? 384 : 128;   /* (run_qa.py's max_seq_length; run_glue.py's) */
    b->T = T ? T : dflt < b->P ? dflt : b->P;
    if (b->T > b->P)
        error_input("import: --seq-len %lld is over the model's %lld positions", (long long)b->T,
                    (long long)b->P);
    b->std = hf_cfg_num(c, "initializer_range", 0.02);
    b->mlm_tanh = b->f->mlm_act ? 0 : b->gelu_tanh;   /* (RoBERTa's lm_head: gelu, exact) */
    if (b->task == TASK_MLM)   /* (the classes are the vocabulary's ids) */
        hf_labels_unread(c), b->cls = (HfImage){.K = b->V};
    else if (b->task == TASK_QA)   /* (qa_outputs: the start's and the end's logit) */
        qa_labels(c, b);
    else if (labels)
        hf_labels_arg(c, labels, &b->cls);
    else
        hf_image_labels(c, &b->cls);
    for (int k = 0; bert_ignored[k]; k++)
        hf_cfg_get(c, bert_ignored[k]);   /* read, and nothing to do */
    const char *rest = hf_cfg_rest(c, hf_pretrained_keys);
    if (rest)
        hf_cfg_error(c, rest, "a key trainc does not know for %s: it cannot tell whether the "
                     "model computes what trainc would", b->f->type);
}

/* An integer input [T] (with its classes where K > 0) */
static void seq_input(cJSON *in, const char *name, int64_t T)
{
    cJSON *x = cJSON_AddObjectToObject(in, name);
    cJSON_AddItemToObject(x, "shape", cJSON_CreateIntArray((int[]){(int)T}, 1));
    cJSON_AddStringToObject(x, "dtype", "i32");
}

/* x (token ids), types (token type ids; DistilBERT has none), pos (each token's place in its
 * sequence: the text from 0, the padding from 0 again) and y (the class; a token
 * classifier's [T], one for each token; a question answerer's [2], the answer's first and
 * last token) */
static void bert_inputs(cJSON *m, const Bert *b)
{
    cJSON *in = cJSON_AddObjectToObject(m, "inputs");
    seq_input(in, "x", b->T);
    if (b->TV)
        seq_input(in, "types", b->T);
    seq_input(in, "pos", b->T);
    if (b->task == TASK_QA) {   /* (the answer's first and last token: places of the row) */
        seq_input(in, "y", 2);
        cJSON_AddNumberToObject(cJSON_GetObjectItem(in, "y"), "classes", (double)b->T);
    } else
        hf_image_inputs_y(in, &b->cls);
    if (b->task == TASK_TOKEN || b->task == TASK_MLM)
        cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItem(in, "y"), "shape",
                                               cJSON_CreateIntArray((int[]){(int)b->T}, 1));
    cJSON_AddStringToObject(m, "positions", "pos");
}

/* a post-norm block: residual [attention], layernorm, residual [linear, gelu, linear],
 * layernorm */
static void bert_block_spec(cJSON *body, const Bert *b)
{
    cJSON *r = cJSON_AddArrayToObject(hf_layer(body, "residual", NULL), "body");
    cJSON *att = hf_layer_n(r, "attention", b->attn, "heads", (double)b->H);
    cJSON_AddFalseToObject(att, "causal");
    hf_layer_n(body, "layernorm", b->norm1, "eps", b->eps);
    cJSON *mlp = cJSON_AddArrayToObject(hf_layer(body, "residual", NULL), "body");
    hf_layer_n(mlp, "linear", b->fc1, "out", (double)b->FF);
    cJSON *g = hf_layer(mlp, "gelu", NULL);
    if (b->gelu_tanh)
        cJSON_AddStringToObject(g, "approximate", "tanh");
    hf_layer_n(mlp, "linear", b->fc2, "out", (double)b->D);
    hf_layer_n(body, "layernorm", b->norm2, "eps", b->eps);
}

/* The masked LM's head: linear, gelu, layernorm, then the
 * word embedding's weight with a bias of its own */
static void mlm_head_spec(cJSON *ls, const Bert *b)
{
    hf_layer_n(ls, "linear", b->mlm_dense, "out", (double)b->E);
    cJSON *g = hf_layer(ls, "gelu", NULL);
    if (b->mlm_tanh)
        cJSON_AddStringToObject(g, "approximate", "tanh");
    hf_layer_n(ls, "layernorm", b->mlm_norm, "eps", b->eps);
    cJSON *h = hf_layer(ls, "linear", b->head);
    cJSON_AddStringToObject(h, "tie", b->embed);
}

static cJSON *bert_spec(const Bert *b, const char *name)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "trainc", 1);
    cJSON *m = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(m, "name", name);
    bert_inputs(m, b);
    cJSON *ls = cJSON_AddArrayToObject(m, "layers");
    cJSON *e = hf_layer_n(ls, "embedding", b->embed, "vocab", (double)b->V);
    cJSON_AddNumberToObject(e, "dim", (double)b->E);
    cJSON_AddStringToObject(e, "input", "x");
    if (b->TV) {   /* the token types' rows added */
        cJSON *tb = cJSON_AddArrayToObject(hf_layer(ls, "residual", NULL), "body");
        cJSON *t = hf_layer_n(tb, "embedding", b->types, "vocab", (double)b->TV);
        cJSON_AddNumberToObject(t, "dim", (double)b->E);
        cJSON_AddStringToObject(t, "input", "types");
    }
    hf_layer_n(ls, "pos_embedding", b->pos, "max_len", (double)b->P);
    hf_layer_n(ls, "layernorm", b->embed_norm, "eps", b->eps);
    if (b->E != b->D)   /* (ELECTRA's embeddings_project) */
        hf_layer_n(ls, "linear", b->project, "out", (double)b->D);
    cJSON *rep = hf_layer_n(ls, "repeat", "blocks", "count", (double)b->L);
    bert_block_spec(cJSON_AddArrayToObject(rep, "body"), b);
    if (b->task == TASK_SEQ) {
        hf_layer(ls, "first_token", NULL);
        hf_layer_n(ls, "linear", b->pooler, "out", (double)b->D);
        hf_layer(ls, b->f->act, NULL);
    }
    if (b->task == TASK_MLM)
        mlm_head_spec(ls, b);
    else
        hf_layer_n(ls, "linear", b->head, "out", (double)b->cls.K);
    if (b->task == TASK_QA)   /* (the start and end logits, the padding out of reach) */
        hf_layer(ls, "span", NULL);
    hf_image_loss(m);
    if (b->task == TASK_TOKEN || b->task == TASK_MLM)   /* (transformers' labels of the tokens
                                                           no class is asked of) */
        cJSON_AddNumberToObject(cJSON_GetObjectItem(m, "loss"), "ignore_index", -100);
    return root;
}

/* The checkpoint's form: its encoder's prefix (a bare model's tensors have none), whether
 * the pooler and the head are drawn anew (a new classifier; BERT's pooler where the
 * checkpoint lacks it, as BertForMaskedLM's), then the table planned against it and the
 * other heads' tensors left out; returns how many */
static int bert_plan(Bert *b, HfJoinImport *im, int new_labels)
{
    const char *fam = b->f->prefix;
    b->prefix = hf_find(&im->w, xasprintf("%sembeddings.word_embeddings.weight", fam)) ? fam : "";
    b->fresh_head = b->task != TASK_MLM && (b->base || new_labels);
    b->fresh_pooler = b->fam == BERT ? !hf_find(&im->w, xasprintf("%s.weight", pooler_of(b)))
                                     : b->base;   /* (the classifier's own elsewhere) */
    bert_walk(b, hf_join_plan_import, im);
    /* (RobertaModel's pooler, which the classifier never reads; any pooler of a checkpoint
     * imported as a token classifier or a masked LM; the masked LM's tied weights, which
     * transformers ties at load, and BertForPreTraining's next-sentence head) */
    int left = b->fam == ROBERTA || b->task != TASK_SEQ
                   ? hf_join_leave_out(&im->w, xasprintf("%spooler.", b->prefix), 0) : 0;
    if (b->task == TASK_MLM)
        left += hf_join_leave_out(&im->w, b->f->mlm_decoder, 0) +
                hf_join_leave_out(&im->w, "cls.seq_relationship.", 0);
    if (b->fresh_head && *b->prefix)
        left += hf_join_leave_out(&im->w, b->prefix, 1);
    hf_join_all_used(&im->w, im->dir, arch_of(b));
    return left;
}

int hf_bert_import(HfCfg *cfg, const char *dir, const char *out, const char *name, int64_t T,
                   const char *labels, const char *task)
{
    const char *type = hf_cfg_str(cfg, "model_type", "");
    Bert b = {0};
    b.f = family_of(type, &b.fam);
    default_names(&b);
    bert_config(cfg, &b, T, labels, task);
    HfJoinImport im = {.dir = dir};
    hf_weights_dir(&im.w, dir);
    int left = bert_plan(&b, &im, labels != NULL);
    char *text = hf_json_text(bert_spec(&b, name));
    if (rt_mkdir_p(out) != 0)
        cannot_write("import", out);
    hf_join_write_import(&im, xasprintf("%s/init.safetensors", out));
    hf_write_text("import", xasprintf("%s/model.json", out), text);
    /* (transformers Trainer's AdamW; weight decay 0.01, as run_glue's examples set it; a
     * question answerer's batches, epochs and rate as run_qa.py's README trains BERT on SQuAD) */
    int qa = b.task == TASK_QA;
    hf_write_text("import", xasprintf("%s/train.json", out),
                  hf_text_train(b.TV > 0, NULL, qa ? 12 : 32, qa ? 2 : 3, qa ? 3e-5 : 2e-5, 0.01));
    static const char *const what[] = {"a class for each text", "a class for each token",
                                       "a masked language model", "an answer's span"};
    printf("trainc: import: %s (%s, %lld layers, %d tensors, rows of %lld tokens, %s%s) -> "
           "%s/model.json, %s/train.json, %s/init.safetensors\n", dir,
           b.f->type, (long long)b.L, im.out.n, (long long)b.T, what[b.task],
           b.fresh_head ? xasprintf("; a new %s: %d tensors drawn anew (normal, std %g, seed "
                                    "%d), %d of the checkpoint's other heads left out",
                                    b.task == TASK_QA ? "question answerer's head"
                                    : xasprintf("classifier of %lld classes", (long long)b.cls.K),
                                    im.n_fresh, b.std, HF_FRESH_SEED, left) : "",
           out, out, out);
    return 0;
}

/* ---- export -------------------------------------------------------------------- */

/* Is L a repeat of post-norm blocks whose attention sees the whole sequence (an
 * encoder's, not GPT-2's pre-norm causal blocks)? */
static int encoder_blocks(const Layer *l)
{
    if (l->op != OP_REPEAT || l->n_body != 4 || l->body[0]->op != OP_RESIDUAL ||
        l->body[1]->op != OP_LAYERNORM)
        return 0;
    const Layer *r = l->body[0];
    return r->n_body == 1 && r->body[0]->op == OP_ATTENTION && !r->body[0]->causal;
}

int hf_bert_spec(const Spec *s)
{
    if (s->n_layers < 1 || s->layers[0]->op != OP_EMBEDDING)
        return 0;
    for (int i = 0; i < s->n_layers; i++)
        if (s->layers[i]->op == OP_FIRST_TOKEN || encoder_blocks(s->layers[i]))
            return 1;
    return 0;
}

static const char bert_layers[] =
    "embedding, residual [embedding] (the token types; none for DistilBERT), pos_embedding, "
    "layernorm (an ELECTRA whose embeddings are narrower: then a linear), a repeat of "
    "[residual [attention], layernorm, residual [linear, gelu, linear], layernorm], then "
    "first_token, linear, tanh (DistilBERT: relu; ELECTRA: gelu), linear (a sequence "
    "classifier), a linear alone (a token classifier), a linear of 2 and span (a question "
    "answerer), or linear, gelu, layernorm and a linear tied to the embedding (a masked LM)";

static void bert_attention(const Spec *s, const Layer *l, const char *at, Bert *b)
{
    hf_match_attention(s, &b->h, l, at);
    if (!l->bias || l->bias_qkv || l->bias_proj)
        hf_refuse(s, &b->h, l, "an attention without both its biases");
    b->H = l->heads;
}

/* the repeat of post-norm blocks at REP */
static void bert_blocks(const Spec *s, const Layer *rep, const char *at, Bert *b)
{
    hf_want(s, &b->h, rep, at, OP_REPEAT);
    if (rep->n_body != 4)
        hf_refuse(s, &b->h, rep, "a repeat of other than a post-norm block's four layers");
    b->L = rep->count;
    b->block = rep->name ? xasprintf("%s.%%lld.", rep->name) : "%lld.";
    Layer **ls = rep->body;
    char *a = hf_match_residual(s, &b->h, ls[0], rep->path, 1);
    bert_attention(s, ls[0]->body[0], rep->path, b);
    b->attn = hf_layer_name(ls[0]->body[0], 0, a);
    hf_match_norm(s, &b->h, ls[1], rep->path, &b->eps);
    char *m = hf_match_residual(s, &b->h, ls[2], rep->path, 3);
    Layer **mb = ls[2]->body;
    b->FF = hf_match_linear(s, &b->h, mb[0], rep->path, 0);
    hf_want(s, &b->h, mb[1], rep->path, OP_GELU);
    b->gelu_tanh = mb[1]->gelu_tanh;
    hf_match_linear(s, &b->h, mb[2], rep->path, b->D);
    hf_match_norm(s, &b->h, ls[3], rep->path, &b->eps);
    b->norm1 = hf_layer_name(ls[1], 1, ""), b->norm2 = hf_layer_name(ls[3], 3, "");
    b->fc1 = hf_layer_name(mb[0], 0, m), b->fc2 = hf_layer_name(mb[2], 2, m);
}

/* The family the layers make: no token types DistilBERT, one type RoBERTa, else BERT;
 * ELECTRA where its embeddings_project or its classifier head's gelu says so */
static void bert_family(Bert *b, int fam)
{
    b->fam = fam, b->f = &families[fam];
    b->h.arch = arch_of(b);
    b->prefix = b->f->prefix;
    b->skip = fam == ROBERTA ? 2 : 0;
}

/* the embeddings from ls[*k] on: words, the token types' residual (BERT, RoBERTa),
 * positions, their layernorm, and a linear to the blocks' width where they are narrower
 * (ELECTRA's embeddings_project); *k past them */
static void bert_embeddings(const Spec *s, const Layer *const *ls, int *k, Bert *b)
{
    const char *at = "$.model.layers";
    const Layer *e = hf_want(s, &b->h, ls[0], at, OP_EMBEDDING);
    b->V = e->vocab, b->E = b->D = e->dim, *k = 1;
    const Layer *r = ls[1] && ls[1]->op == OP_RESIDUAL ? ls[1] : NULL;
    if (r && (r->n_shortcut || r->n_body != 1 || r->body[0]->op != OP_EMBEDDING))
        hf_refuse(s, &b->h, r, "a residual other than the token types' embedding alone");
    b->TV = r ? r->body[0]->vocab : 0;
    bert_family(b, !r ? DISTIL : b->TV == 1 ? ROBERTA : BERT);   /* (BERT's have 2 types) */
    if (r)
        b->types = hf_layer_name(r->body[0], 0, r->name ? xasprintf("%s.", r->name) : ""), (*k)++;
    const Layer *p = hf_want(s, &b->h, ls[*k], at, OP_POS_EMBEDDING);
    b->P = p->max_len;
    b->pos = hf_layer_name(p, *k, ""), (*k)++;
    hf_match_norm(s, &b->h, ls[*k], at, &b->eps);
    if (b->fam == DISTIL && b->eps != 1e-12)
        hf_refuse(s, &b->h, ls[*k], "a layernorm's eps other than DistilBERT's 1e-12");
    b->embed = hf_layer_name(ls[0], 0, ""), b->embed_norm = hf_layer_name(ls[*k], *k, ""), (*k)++;
    if (ls[*k] && ls[*k]->op == OP_LINEAR) {   /* (ELECTRA's embeddings_project) */
        if (b->fam == DISTIL)
            hf_refuse(s, &b->h, ls[*k], "a linear after the embeddings without token types "
                      "(ELECTRA's have them)");
        bert_family(b, ELECTRA);
        b->D = hf_match_linear(s, &b->h, ls[*k], at, 0);
        b->project = hf_layer_name(ls[*k], *k, ""), (*k)++;
    }
}

/* The masked LM's head from ls[k] on: linear, gelu, layernorm, a linear tied to the word
 * embedding with a bias; 4 layers */
static int mlm_head(const Spec *s, const Layer *const *ls, int k, Bert *b)
{
    const char *at = "$.model.layers";
    b->task = TASK_MLM;
    hf_match_linear(s, &b->h, ls[k], at, b->E);
    hf_want(s, &b->h, ls[k + 1], at, OP_GELU);
    b->mlm_tanh = ls[k + 1]->gelu_tanh;
    if (b->f->mlm_act ? b->mlm_tanh : b->mlm_tanh != b->gelu_tanh)
        hf_refuse(s, &b->h, ls[k + 1], b->f->mlm_act ? "gelu's tanh form (RoBERTa's lm_head and "
                  "ELECTRA's generator are exact)" : "another gelu than the blocks' (the config "
                  "has one hidden_act)");
    hf_match_norm(s, &b->h, ls[k + 2], at, &b->eps);
    const Layer *h = hf_want(s, &b->h, ls[k + 3], at, OP_LINEAR);
    if (!h->tie || strcmp(h->tie, b->embed) || !h->bias)
        hf_refuse(s, &b->h, h, "a head other than the word embedding's weight, tied, and a bias");
    b->cls.K = b->V;
    b->mlm_dense = hf_layer_name(ls[k], k, ""), b->mlm_norm = hf_layer_name(ls[k + 2], k + 2, "");
    b->head = hf_layer_name(h, k + 3, "");
    return 4;
}

/* The head from ls[k] on: the first token, the pooler, its activation and the linear (a
 * sequence classifier), the linear alone (a token classifier), a linear of 2 and span (a
 * question answerer), or a masked LM's; how many layers */
static int bert_head(const Spec *s, const Layer *const *ls, int k, Bert *b)
{
    const char *at = "$.model.layers";
    if (ls[k] && ls[k]->op == OP_LINEAR && ls[k + 1] && ls[k + 1]->op == OP_SPAN) {
        b->task = TASK_QA;
        if (hf_match_linear(s, &b->h, ls[k], at, 0) != 2)
            hf_refuse(s, &b->h, ls[k], "a question answerer's linear of other than 2 outputs");
        b->cls.K = 2;
        b->head = hf_layer_name(ls[k], k, "");
        return 2;
    }
    if (ls[k] && ls[k]->op == OP_LINEAR && !ls[k]->tie && ls[k + 1])
        return mlm_head(s, ls, k, b);
    if (ls[k] && ls[k]->op == OP_LINEAR) {
        b->task = TASK_TOKEN;
        b->cls.K = hf_match_linear(s, &b->h, ls[k], at, 0);
        b->head = hf_layer_name(ls[k], k, "");
        return 1;
    }
    hf_want(s, &b->h, ls[k], at, OP_FIRST_TOKEN);
    hf_match_linear(s, &b->h, ls[k + 1], at, b->D);
    if (b->fam == BERT && ls[k + 2] && ls[k + 2]->op == OP_GELU)   /* (ELECTRA's head) */
        bert_family(b, ELECTRA);
    hf_want(s, &b->h, ls[k + 2], at, b->fam == DISTIL ? OP_RELU : b->fam == ELECTRA ? OP_GELU
                                                                                   : OP_TANH);
    if (b->fam == ELECTRA && ls[k + 2]->gelu_tanh)
        hf_refuse(s, &b->h, ls[k + 2], "gelu's tanh form (ELECTRA's classifier head is exact)");
    b->cls.K = hf_match_linear(s, &b->h, ls[k + 3], at, 0);
    b->pooler = hf_layer_name(ls[k + 1], k + 1, ""), b->head = hf_layer_name(ls[k + 3], k + 3, "");
    return 4;
}

/* The spec's layers as a BERT, RoBERTa or DistilBERT classifier, or exit 1 naming the
 * first that is not */
static void bert_match(const Spec *s, Bert *b)
{
    b->h = (HfLayout){"BertForSequenceClassification, BertForTokenClassification, "
                      "BertForMaskedLM or BertForQuestionAnswering (or RoBERTa's, DistilBERT's, "
                      "ELECTRA's)", bert_layers};
    const Layer *ls[12] = {0};
    for (int k = 0; k < 12 && k < s->n_layers; k++)
        ls[k] = s->layers[k];
    int k;
    bert_embeddings(s, ls, &k, b);
    bert_blocks(s, ls[k], "$.model.layers", b);
    int n = k + 1 + bert_head(s, ls, k + 1, b);
    if (b->task != TASK_MLM && b->task != TASK_QA)
        hf_image_labels_from_spec(s, &b->cls);
    if (s->n_layers > n)
        hf_refuse(s, &b->h, s->layers[n], "a layer after the classifier");
    if (s->loss != RT_LOSS_CROSS_ENTROPY)
        error_at(s->model_file, "$.model.loss", "%s's loss is cross entropy", arch_of(b));
}

/* DistilBertConfig's keys */
static void distil_config(cJSON *c, const Bert *b)
{
    cJSON_AddNumberToObject(c, "dim", (double)b->D);
    cJSON_AddNumberToObject(c, "n_layers", (double)b->L);
    cJSON_AddNumberToObject(c, "n_heads", (double)b->H);
    cJSON_AddNumberToObject(c, "hidden_dim", (double)b->FF);
    cJSON_AddStringToObject(c, "activation", b->gelu_tanh ? "gelu_pytorch_tanh" : "gelu");
    cJSON_AddItemToObject(c, "dropout", hf_float(0));
    cJSON_AddItemToObject(c, "attention_dropout", hf_float(0));
    cJSON_AddItemToObject(c, "seq_classif_dropout", hf_float(0));
    cJSON_AddFalseToObject(c, "sinusoidal_pos_embds");
    cJSON_AddNumberToObject(c, "pad_token_id", 0);
}

/* BertConfig's and RobertaConfig's keys */
static void bert_keys(cJSON *c, const Bert *b)
{
    cJSON_AddNumberToObject(c, "hidden_size", (double)b->D);
    if (b->fam == ELECTRA)
        cJSON_AddNumberToObject(c, "embedding_size", (double)b->E);
    cJSON_AddNumberToObject(c, "num_hidden_layers", (double)b->L);
    cJSON_AddNumberToObject(c, "num_attention_heads", (double)b->H);
    cJSON_AddNumberToObject(c, "intermediate_size", (double)b->FF);
    cJSON_AddStringToObject(c, "hidden_act", b->gelu_tanh ? "gelu_pytorch_tanh" : "gelu");
    cJSON_AddItemToObject(c, "hidden_dropout_prob", hf_float(0));
    cJSON_AddItemToObject(c, "attention_probs_dropout_prob", hf_float(0));
    cJSON_AddNumberToObject(c, "type_vocab_size", (double)b->TV);
    cJSON_AddItemToObject(c, "layer_norm_eps", hf_float(b->eps));
    cJSON_AddNumberToObject(c, "pad_token_id", b->fam == ROBERTA ? 1 : 0);
    if (b->fam == ROBERTA) {
        cJSON_AddNumberToObject(c, "bos_token_id", 0);
        cJSON_AddNumberToObject(c, "eos_token_id", 2);
    }
    cJSON_AddStringToObject(c, "position_embedding_type", "absolute");
}

static cJSON *bert_hf_config(const Bert *b)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToObject(c, "architectures",
                          cJSON_CreateStringArray((const char *[]){arch_of(b)}, 1));
    cJSON_AddStringToObject(c, "model_type", b->f->type);
    cJSON_AddNumberToObject(c, "vocab_size", (double)b->V);
    cJSON_AddNumberToObject(c, "max_position_embeddings", (double)(b->P + b->skip));
    if (b->fam == DISTIL)
        distil_config(c, b);
    else
        bert_keys(c, b);
    cJSON_AddItemToObject(c, "initializer_range", hf_float(0.02));
    if (b->task != TASK_MLM)
        hf_image_config_labels(c, &b->cls);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    return c;
}

int hf_bert_export(const Spec *s, const char *weights, const char *out, const char *tok)
{
    Bert b = {0};
    bert_match(s, &b);
    HfJoinExport e = {0};
    hf_join_export_open(&e, s, weights);
    bert_walk(&b, hf_join_plan_export, &e);
    hf_join_export_adapters(&e);
    hf_join_text_export(&e, bert_hf_config(&b), b.f->type, weights, tok, out);
    return 0;
}
