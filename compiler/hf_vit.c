/* hf_vit.c: Hugging Face's ViTForImageClassification and DeiTForImageClassification both
 * ways (their input and classes through hf_image.c; DeiT: a ViT with a second learned
 * token, the distillation token, after the class token, which the blocks attend to and
 * the classifier does not read). `trainc import hf` of a ViT folder (config.json,
 * preprocessor_config.json where there is one, the weights) as a model spec of trainc's
 * vision transformer layers (conv2d patches, tokens, cls_token, pos_embedding, pre-norm
 * blocks with attention over all tokens, layernorm, first_token, a linear head:
 * specs/vit_fashion.json's layout and names) and its weights; `trainc export hf` of a
 * spec of that layout back to config.json, preprocessor_config.json and
 * model.safetensors. One table (vit_walk, of hf_join.c's joins) pairs each of trainc's
 * tensors with the transformers tensors it is made of, for both. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cmd.h"
#include "hf.h"
#include "ops/op.h"

/* What the model's shapes and layers depend on, and the names of trainc's layers
 * (import: specs/vit_fashion.json's; export: the spec's own) */
typedef struct Vit {
    HfImage img;                       /* channels, side, classes, pixels, names */
    int deit;                          /* DeiT's: the distillation token */
    int64_t P, D;                      /* patch, width */
    HfVitBlocks b;                     /* the blocks' sizes and layer names */
    const char *prefix;                /* the encoder's tensors' ("vit.", or "" for ViTModel's) */
    int base, fresh_head;              /* import: ViTModel's; a head drawn anew (--labels) */
    double std;                        /* initializer_range */
    /* trainc's names: the top layers', and a block's layers' after the block prefix */
    char *patch, *cls, *dist, *pos, *norm, *head;
} Vit;

/* Block b's tensors */
static void vit_block(const Vit *v, int64_t b, hf_join_fn fn, void *ctx)
{
    char *ours = xasprintf(v->b.block, (long long)b),
         *th = xasprintf("%sencoder.layer.%lld.", v->prefix, (long long)b);
    int64_t D = v->D;
    hf_join_layernorm(fn, ctx, xasprintf("%s%s", ours, v->b.norm1),
                      xasprintf("%slayernorm_before", th), D);
    const char *w[3], *bs[3];
    const char *qkv[3] = {"query", "key", "value"};
    for (int k = 0; k < 3; k++) {
        w[k] = xasprintf("%sattention.attention.%s.weight", th, qkv[k]);
        bs[k] = xasprintf("%sattention.attention.%s.bias", th, qkv[k]);
    }
    hf_join(fn, ctx, xasprintf("%s%s.qkv.weight", ours, v->b.attn), 2, (int64_t[]){3 * D, D}, 3, w, 2,
            (int64_t[]){D, D});
    if (v->b.qkv_bias)
        hf_join(fn, ctx, xasprintf("%s%s.qkv.bias", ours, v->b.attn), 1, (int64_t[]){3 * D}, 3, bs, 1,
                &D);
    hf_join_linear(fn, ctx, xasprintf("%s%s.proj", ours, v->b.attn),
                   xasprintf("%sattention.output.dense", th), D, D);
    hf_join_layernorm(fn, ctx, xasprintf("%s%s", ours, v->b.norm2),
                      xasprintf("%slayernorm_after", th), D);
    hf_join_linear(fn, ctx, xasprintf("%s%s", ours, v->b.fc1), xasprintf("%sintermediate.dense", th),
                   v->b.FF, D);
    hf_join_linear(fn, ctx, xasprintf("%s%s", ours, v->b.fc2), xasprintf("%soutput.dense", th), D,
                   v->b.FF);
}

/* Every tensor, in trainc's order */
static void vit_walk(const Vit *v, hf_join_fn fn, void *ctx)
{
    int64_t D = v->D, N = (v->img.S / v->P) * (v->img.S / v->P) + 1 + v->deit;
    int64_t conv[4] = {D, v->img.C, v->P, v->P};
    const char *m = v->prefix;
    hf_join_same(fn, ctx, xasprintf("%s.weight", v->patch),
                 xasprintf("%sembeddings.patch_embeddings.projection.weight", m), 4, conv);
    hf_join_same(fn, ctx, xasprintf("%s.bias", v->patch),
                 xasprintf("%sembeddings.patch_embeddings.projection.bias", m), 1, &D);
    const char *cls = xasprintf("%sembeddings.cls_token", m),
               *dist = xasprintf("%sembeddings.distillation_token", m),
               *pos = xasprintf("%sembeddings.position_embeddings", m);
    if (v->deit)   /* (its layer first: the class token goes before it) */
        hf_join(fn, ctx, xasprintf("%s.weight", v->dist), 1, &D, 1, &dist, 3, (int64_t[]){1, 1, D});
    hf_join(fn, ctx, xasprintf("%s.weight", v->cls), 1, &D, 1, &cls, 3, (int64_t[]){1, 1, D});
    hf_join(fn, ctx, xasprintf("%s.weight", v->pos), 2, (int64_t[]){N, D}, 1, &pos, 3,
            (int64_t[]){1, N, D});
    for (int64_t b = 0; b < v->b.L; b++)
        vit_block(v, b, fn, ctx);
    hf_join_layernorm(fn, ctx, v->norm, xasprintf("%slayernorm", m), D);
    if (v->fresh_head)   /* (as ViT's _init_weights: a truncated normal that never truncates) */
        hf_join_fresh_linear(fn, ctx, v->head, v->img.K, D, v->std);
    else
        hf_join_linear(fn, ctx, v->head, "classifier", v->img.K, D);
}

/* specs/vit_fashion.json's names, which import writes */
static void default_names(Vit *v)
{
    v->patch = "patch", v->cls = "cls", v->dist = "dist", v->pos = "pos", v->norm = "norm",
    v->head = "head";
    v->b.block = "blocks.%lld.";
    v->b.norm1 = "norm1", v->b.attn = "attn", v->b.norm2 = "norm2", v->b.fc1 = "fc1", v->b.fc2 = "fc2";
}

/* ---- import -------------------------------------------------------------------- */

/* ViT's config keys that change nothing trainc computes: the dropouts (every import
 * leaves them out), masked image modeling's encoder_stride */
static const char *const vit_ignored[] = {"hidden_dropout_prob", "attention_probs_dropout_prob",
                                          "encoder_stride", NULL};

/* DeiTForImageClassificationWithTeacher (its two heads' logits averaged): its encoder
 * alone, under --labels' new classifier; 1 where config.json names it */
static int deit_teacher(HfCfg *c, const char *labels)
{
    const cJSON *ar = hf_cfg_get(c, "architectures");
    const cJSON *a = cJSON_IsArray(ar) && cJSON_GetArraySize(ar) == 1 ? ar->child : NULL;
    if (!cJSON_IsString(a) || strcmp(a->valuestring, "DeiTForImageClassificationWithTeacher"))
        return 0;
    if (!labels)
        hf_cfg_error(c, "architectures", "DeiTForImageClassificationWithTeacher: its logits are "
                     "the mean of two heads (the class token's and the distillation token's), "
                     "which trainc's classifier is not; --labels imports its encoder with a "
                     "new classifier, as DeiTForImageClassification loads it");
    return 1;
}

/* config.json as v's sizes; exits 1 naming a key trainc cannot express */
static void vit_config(HfCfg *c, Vit *v, const char *labels)
{
    v->base = v->deit && deit_teacher(c, labels)
                  ? 1 : v->deit ? hf_image_arch(c, labels, "DeiTForImageClassification",
                                                "DeiTModel", "DeiT")
                                : hf_image_arch(c, labels, "ViTForImageClassification",
                                                "ViTModel", "ViT");
    hf_cfg_classifier(c);
    v->std = hf_cfg_num(c, "initializer_range", 0.02);
    v->D = hf_cfg_int(c, "hidden_size", 768);
    v->b.L = hf_cfg_int(c, "num_hidden_layers", 12);
    v->b.H = hf_cfg_int(c, "num_attention_heads", 12);
    v->b.FF = hf_cfg_int(c, "intermediate_size", 3072);
    v->img.S = hf_cfg_int(c, "image_size", 224);
    v->P = hf_cfg_int(c, "patch_size", 16);
    v->img.C = hf_cfg_int(c, "num_channels", 3);
    v->b.eps = hf_cfg_num(c, "layer_norm_eps", 1e-12);
    v->b.qkv_bias = hf_cfg_bool(c, "qkv_bias", 1);
    v->b.gelu_tanh = !strcmp(hf_gelu_approximate(c, "hidden_act", "gelu"), "tanh");
    if (v->D % v->b.H)
        hf_cfg_error(c, "num_attention_heads", "%lld does not divide hidden_size %lld",
                     (long long)v->b.H, (long long)v->D);
    if (v->img.S % v->P)
        hf_cfg_error(c, "patch_size", "%lld does not divide image_size %lld (trainc's patches "
                     "cover the image)", (long long)v->P, (long long)v->img.S);
    if (labels)
        hf_labels_arg(c, labels, &v->img);
    else
        hf_image_labels(c, &v->img);
    for (int k = 0; vit_ignored[k]; k++)
        hf_cfg_get(c, vit_ignored[k]);   /* read, and nothing to do */
    const char *rest = hf_cfg_rest(c, hf_pretrained_keys);
    if (rest)
        hf_cfg_error(c, rest, "a key trainc does not know for %s: it cannot tell whether the "
                     "model computes what trainc would", v->deit ? "deit" : "vit");
}

static cJSON *vit_spec(const Vit *v, const char *name)
{
    const char *tokens[2] = {v->deit ? v->dist : v->cls, v->cls};
    cJSON *ls, *root = hf_vit_spec_stem(&v->img, name, v->patch, v->D, v->P, tokens, 1 + v->deit,
                                        v->pos, &ls);
    cJSON *m = cJSON_GetObjectItem(root, "model");
    hf_vit_blocks_spec(ls, &v->b, v->D);
    cJSON_AddNumberToObject(hf_layer(ls, "layernorm", v->norm), "eps", v->b.eps);
    hf_layer(ls, "first_token", NULL);
    cJSON_AddNumberToObject(hf_layer(ls, "linear", v->head), "out", (double)v->img.K);
    hf_image_loss(m);
    return root;
}


/* The checkpoint's form: its encoder's prefix (ViTModel's tensors have none), the table
 * planned against it, and with a new head the old one's and ViTModel's pooler left out
 * (returns how many) */
static int vit_plan(Vit *v, HfJoinImport *im, int new_labels)
{
    const char *m = v->deit ? "deit." : "vit.";
    v->prefix = hf_find(&im->w, xasprintf("%sembeddings.cls_token", m)) ? m : "";
    v->fresh_head = v->base || new_labels;
    vit_walk(v, hf_join_plan_import, im);
    int left = 0;
    if (v->fresh_head) {   /* (a teacher's two heads among them) */
        const char *heads[] = {"classifier.", "cls_classifier.", "distillation_classifier.",
                               xasprintf("%spooler.", v->prefix)};
        for (int k = 0; k < 4; k++)
            left += hf_join_leave_out(&im->w, heads[k], 0);
    }
    hf_join_all_used(&im->w, im->dir, v->deit ? "DeiTForImageClassification"
                                              : "ViTForImageClassification");
    return left;
}

int hf_vit_import(HfCfg *cfg, const char *dir, const char *out, const char *name,
                  const char *labels, int deit)
{
    Vit v = {.deit = deit};
    default_names(&v);
    vit_config(cfg, &v, labels);
    int pre = hf_image_pixels(dir, &v.img);
    HfJoinImport im = {.dir = dir};
    hf_weights_dir(&im.w, dir);
    int left = vit_plan(&v, &im, labels != NULL);
    char *text = hf_json_text(vit_spec(&v, name));
    hf_image_write_import(&im, text, hf_image_train("{\"type\": \"adamw\", \"lr\": 5e-5, "
                                                    "\"weight_decay\": 0.0}", 1), out);
    printf("trainc: import: %s (%s, %lld layers, %d tensors; the pixels scaled and shifted%s "
           "as %s%s) -> %s/model.json, %s/train.json, %s/init.safetensors\n", dir,
           deit ? "deit" : "vit", (long long)v.b.L,
           im.out.n, v.img.ch_scale ? " by channel" : "", pre ? "preprocessor_config.json says"
           : "ViTImageProcessor's defaults say (the folder has no preprocessor_config.json)",
           v.fresh_head ? hf_image_new_head_said(&v.img, im.n_fresh, v.std, left) : "",
           out, out, out);
    hf_image_keep_processor(dir, &v.img, out);
    return 0;
}

/* ---- export -------------------------------------------------------------------- */

int hf_vit_spec(const Spec *s)
{
    for (int i = 0; i < s->n_layers; i++)
        if (s->layers[i]->op == OP_TOKENS || s->layers[i]->op == OP_CLS_TOKEN)
            return 1;
    return 0;
}

static const HfLayout vit_layout = {
    "ViTForImageClassification",
    "conv2d (kernel = stride, no padding), tokens, cls_token, pos_embedding, a repeat of "
    "[residual [layernorm, attention], residual [layernorm, linear, gelu, linear]], "
    "layernorm, first_token, linear (DeiTForImageClassification: a second cls_token, the "
    "distillation token, before the class token's)"};

/* The spec's layers as a ViT (a DeiT where a second cls_token follows the first), or exit
 * 1 naming the first that is not */
static void vit_match(const Spec *s, Vit *v)
{
    const Layer *ls[9] = {0};
    for (int k = 0; k < 9 && k < s->n_layers; k++)
        ls[k] = s->layers[k];
    const char *at = "$.model.layers";
    v->deit = ls[3] && ls[3]->op == OP_CLS_TOKEN;
    v->prefix = v->deit ? "deit." : "vit.";
    const char *arch = v->deit ? "DeiTForImageClassification" : "ViTForImageClassification";
    HfLayout layout = {arch, vit_layout.layers};
    hf_match_vit_stem(s, &layout, 1 + v->deit, 1, &v->img, &v->D, &v->P);
    const Layer **rest = ls + 3 + v->deit;   /* pos_embedding onwards */
    hf_match_vit_blocks(s, &layout, rest[1], v->D, (const int[]){OP_GELU, 0}, &v->b);
    hf_match_norm(s, &layout, rest[2], at, &v->b.eps);
    hf_want(s, &layout, rest[3], at, OP_FIRST_TOKEN);
    v->img.K = hf_match_linear(s, &layout, rest[4], at, 0);
    hf_image_labels_from_spec(s, &v->img);
    if (s->n_layers > 8 + v->deit)
        hf_refuse(s, &layout, s->layers[8 + v->deit], "a layer after the classifier");
    if (s->loss != RT_LOSS_CROSS_ENTROPY)
        error_at(s->model_file, "$.model.loss", "%s's loss is cross entropy", arch);
    int o = v->deit;
    v->patch = hf_layer_name(ls[0], 0, "");
    if (v->deit)
        v->dist = hf_layer_name(ls[2], 2, "");
    v->cls = hf_layer_name(ls[2 + o], 2 + o, ""), v->pos = hf_layer_name(rest[0], 3 + o, "");
    v->norm = hf_layer_name(rest[2], 5 + o, ""), v->head = hf_layer_name(rest[4], 7 + o, "");
}

static cJSON *vit_hf_config(const Vit *v)
{
    cJSON *c = cJSON_CreateObject();
    cJSON *ar = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(ar, cJSON_CreateString(v->deit ? "DeiTForImageClassification"
                                                        : "ViTForImageClassification"));
    cJSON_AddStringToObject(c, "model_type", v->deit ? "deit" : "vit");
    cJSON_AddNumberToObject(c, "hidden_size", (double)v->D);
    cJSON_AddNumberToObject(c, "num_hidden_layers", (double)v->b.L);
    cJSON_AddNumberToObject(c, "num_attention_heads", (double)v->b.H);
    cJSON_AddNumberToObject(c, "intermediate_size", (double)v->b.FF);
    cJSON_AddStringToObject(c, "hidden_act", v->b.gelu_tanh ? "gelu_pytorch_tanh" : "gelu");
    cJSON_AddItemToObject(c, "hidden_dropout_prob", hf_float(0));
    cJSON_AddItemToObject(c, "attention_probs_dropout_prob", hf_float(0));
    cJSON_AddItemToObject(c, "initializer_range", hf_float(0.02));
    cJSON_AddItemToObject(c, "layer_norm_eps", hf_float(v->b.eps));
    cJSON_AddNumberToObject(c, "image_size", (double)v->img.S);
    cJSON_AddNumberToObject(c, "patch_size", (double)v->P);
    cJSON_AddNumberToObject(c, "num_channels", (double)v->img.C);
    cJSON_AddBoolToObject(c, "qkv_bias", v->b.qkv_bias);
    cJSON_AddNumberToObject(c, "encoder_stride", (double)v->P);
    hf_image_config_labels(c, &v->img);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    return c;
}

int hf_vit_export(const Spec *s, const char *weights, const char *out)
{
    Vit v = {0};
    vit_match(s, &v);
    HfJoinExport e = {0};
    hf_join_export_open(&e, s, weights);
    vit_walk(&v, hf_join_plan_export, &e);
    hf_join_export_adapters(&e);
    hf_image_write_export(&e, &v.img, vit_hf_config(&v), v.deit ? "deit" : "vit", weights,
                          s->model_file, out);
    return 0;
}
