/* hf_clip.c: Hugging Face's CLIPForImageClassification and SiglipForImageClassification
 * both ways (their input and classes through hf_image.c): a vision tower with a
 * classifier over the mean of its tokens. `trainc import hf` of a folder
 * (...ForImageClassification, or a CLIPModel's or SiglipModel's vision tower under
 * --labels' new classifier) as a model spec:
 *   - CLIP: conv2d patches without bias, tokens, cls_token (its class_embedding),
 *     pos_embedding, layernorm (its pre_layrnorm), a repeat of pre-norm blocks
 *     (attention; linear, quick_gelu, linear), token_mean with skip 1 (the patch tokens'
 *     mean: transformers' mean(x[:, 1:])) and the linear head; post_layernorm, which
 *     that head does not read, is left out;
 *   - SigLIP: conv2d patches, tokens, pos_embedding, the blocks (the tanh gelu),
 *     layernorm (its post_layernorm), token_mean over every token (transformers 4.45 on;
 *     4.40 left the first out) and the head; the attention-pooling head, which the
 *     classifier does not read, left out.
 * `trainc export hf` of a spec of either layout back to config.json (vision_config says
 * the tower), preprocessor_config.json and model.safetensors. One table (clip_walk, of
 * hf_join.c's joins) pairs each of trainc's tensors with the transformers tensors it is
 * made of, for both. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cmd.h"
#include "hf.h"
#include "ops/op.h"

/* What the model's shapes and layers depend on, and the names of trainc's layers
 * (import: its own; export: the spec's) */
typedef struct Clip {
    HfImage img;                       /* channels, side, classes, pixels, names */
    int sig;                           /* SigLIP's tower (else CLIP's) */
    int64_t P, D;                      /* patch, width */
    HfVitBlocks b;                     /* the blocks' sizes and layer names */
    int base, fresh_head;              /* import: CLIPModel's tower; a head drawn anew */
    char *patch, *cls, *pos, *pre, *post, *head;
} Clip;

static const char *const M = "vision_model.";

/* The family's names: its classifier's architecture, the model with both towers, its
 * model_type */
static const char *cls_arch(const Clip *v)
{
    return v->sig ? "SiglipForImageClassification" : "CLIPForImageClassification";
}
static const char *base_arch(const Clip *v) { return v->sig ? "SiglipModel" : "CLIPModel"; }
static const char *model_type(const Clip *v) { return v->sig ? "siglip" : "clip"; }

/* Block b's tensors */
static void clip_block(const Clip *v, int64_t b, hf_join_fn fn, void *ctx)
{
    char *ours = xasprintf(v->b.block, (long long)b),
         *th = xasprintf("%sencoder.layers.%lld.", M, (long long)b);
    int64_t D = v->D;
    hf_join_layernorm(fn, ctx, xasprintf("%s%s", ours, v->b.norm1), xasprintf("%slayer_norm1", th), D);
    const char *w[3], *bs[3], *qkv[3] = {"q", "k", "v"};
    for (int k = 0; k < 3; k++) {
        w[k] = xasprintf("%sself_attn.%s_proj.weight", th, qkv[k]);
        bs[k] = xasprintf("%sself_attn.%s_proj.bias", th, qkv[k]);
    }
    hf_join(fn, ctx, xasprintf("%s%s.qkv.weight", ours, v->b.attn), 2, (int64_t[]){3 * D, D}, 3, w,
            2, (int64_t[]){D, D});
    hf_join(fn, ctx, xasprintf("%s%s.qkv.bias", ours, v->b.attn), 1, (int64_t[]){3 * D}, 3, bs, 1,
            &D);
    hf_join_linear(fn, ctx, xasprintf("%s%s.proj", ours, v->b.attn),
                   xasprintf("%sself_attn.out_proj", th), D, D);
    hf_join_layernorm(fn, ctx, xasprintf("%s%s", ours, v->b.norm2), xasprintf("%slayer_norm2", th), D);
    hf_join_linear(fn, ctx, xasprintf("%s%s", ours, v->b.fc1), xasprintf("%smlp.fc1", th), v->b.FF, D);
    hf_join_linear(fn, ctx, xasprintf("%s%s", ours, v->b.fc2), xasprintf("%smlp.fc2", th), D, v->b.FF);
}

/* Every tensor, in trainc's order */
static void clip_walk(const Clip *v, hf_join_fn fn, void *ctx)
{
    int64_t D = v->D, N = (v->img.S / v->P) * (v->img.S / v->P) + !v->sig;
    int64_t conv[4] = {D, v->img.C, v->P, v->P};
    hf_join_same(fn, ctx, xasprintf("%s.weight", v->patch),
                 xasprintf("%sembeddings.patch_embedding.weight", M), 4, conv);
    if (v->sig)
        hf_join_same(fn, ctx, xasprintf("%s.bias", v->patch),
                     xasprintf("%sembeddings.patch_embedding.bias", M), 1, &D);
    else
        hf_join_same(fn, ctx, xasprintf("%s.weight", v->cls),
                     xasprintf("%sembeddings.class_embedding", M), 1, &D);
    hf_join_same(fn, ctx, xasprintf("%s.weight", v->pos),
                 xasprintf("%sembeddings.position_embedding.weight", M), 2, (int64_t[]){N, D});
    if (!v->sig)
        hf_join_layernorm(fn, ctx, v->pre, xasprintf("%spre_layrnorm", M), D);
    for (int64_t b = 0; b < v->b.L; b++)
        clip_block(v, b, fn, ctx);
    if (v->sig)
        hf_join_layernorm(fn, ctx, v->post, xasprintf("%spost_layernorm", M), D);
    if (v->fresh_head) {   /* (torch's nn.Linear's weight, CLIP's _init_weights' zero bias) */
        hf_join_fresh(fn, ctx, xasprintf("%s.weight", v->head), 2, (int64_t[]){v->img.K, D},
                      HF_FRESH_UNIFORM, 1 / sqrt((double)D));
        hf_join_fresh(fn, ctx, xasprintf("%s.bias", v->head), 1, &v->img.K, HF_FRESH_NORMAL, 0);
    } else
        hf_join_linear(fn, ctx, v->head, "classifier", v->img.K, D);
}

static void default_names(Clip *v)
{
    v->patch = "patch", v->cls = "cls", v->pos = "pos", v->pre = "pre_norm", v->post = "norm",
    v->head = "head";
    v->b.block = "blocks.%lld.";
    v->b.norm1 = "norm1", v->b.attn = "attn", v->b.norm2 = "norm2", v->b.fc1 = "fc1", v->b.fc2 = "fc2";
}

/* ---- import -------------------------------------------------------------------- */

/* vision_config's keys that change nothing trainc computes (the dropouts, the init,
 * CLIPModel's projection, SigLIP's pooling head; its model_type clip_vision_model) */
static const char *const tower_ignored[] = {"dropout", "attention_dropout", "initializer_range",
                                            "initializer_factor", "projection_dim", "model_type",
                                            "vision_use_head", NULL};

/* the MLP's activation: quick_gelu (CLIP's default), gelu, or gelu_new and
 * gelu_pytorch_tanh (SigLIP's default) */
static void tower_act(HfCfg *t, Clip *v)
{
    const cJSON *a = hf_cfg_get(t, "hidden_act");
    if (!v->sig && (!a || (cJSON_IsString(a) && !strcmp(a->valuestring, "quick_gelu")))) {
        v->b.act = OP_QUICK_GELU;
        return;
    }
    v->b.act = OP_GELU;
    v->b.gelu_tanh = !strcmp(hf_gelu_approximate(t, "hidden_act", v->sig ? "gelu_pytorch_tanh"
                                                                       : "quick_gelu"), "tanh");
}

static void tower_config(HfCfg *c, Clip *v)
{
    HfCfg t;
    hf_cfg_sub(&t, c, "vision_config");
    v->D = hf_cfg_int(&t, "hidden_size", 768);
    v->b.FF = hf_cfg_int(&t, "intermediate_size", 3072);
    v->b.L = hf_cfg_int(&t, "num_hidden_layers", 12);
    v->b.H = hf_cfg_int(&t, "num_attention_heads", 12);
    v->img.C = hf_cfg_int(&t, "num_channels", 3);
    v->img.S = hf_cfg_int(&t, "image_size", 224);
    v->P = hf_cfg_int(&t, "patch_size", v->sig ? 16 : 32);
    v->b.eps = hf_cfg_num(&t, "layer_norm_eps", v->sig ? 1e-6 : 1e-5);
    v->b.qkv_bias = 1;   /* (q, k and v always have theirs) */
    tower_act(&t, v);
    if (v->D % v->b.H)
        hf_cfg_error(&t, "num_attention_heads", "%lld does not divide hidden_size %lld",
                     (long long)v->b.H, (long long)v->D);
    if (v->img.S % v->P)
        hf_cfg_error(&t, "patch_size", "%lld does not divide image_size %lld (trainc's patches "
                     "cover the image)", (long long)v->P, (long long)v->img.S);
    for (int k = 0; tower_ignored[k]; k++)
        hf_cfg_get(&t, tower_ignored[k]);
    const char *rest = hf_cfg_rest(&t, hf_pretrained_keys);
    if (rest)
        hf_cfg_error(&t, rest, "a key trainc does not know for %s's vision_config: it cannot "
                     "tell whether the model computes what trainc would", model_type(v));
}

/* config.json (a CLIPConfig) as v's sizes; exits 1 naming a key trainc cannot express */
static void clip_config(HfCfg *c, Clip *v, const char *labels)
{
    v->base = hf_image_arch(c, labels, cls_arch(v), base_arch(v), v->sig ? "SigLIP" : "CLIP");
    hf_cfg_classifier(c);
    tower_config(c, v);
    if (labels)
        hf_labels_arg(c, labels, &v->img);
    else
        hf_image_labels(c, &v->img);
    /* the text tower and CLIPModel's keys: read, and nothing to do */
    const char *other[] = {"text_config", "projection_dim", "logit_scale_init_value",
                           "initializer_factor", "text_config_dict", "vision_config_dict", NULL};
    for (int k = 0; other[k]; k++)
        hf_cfg_get(c, other[k]);
    const char *rest = hf_cfg_rest(c, hf_pretrained_keys);
    if (rest)
        hf_cfg_error(c, rest, "a key trainc does not know for %s: it cannot tell whether the "
                     "model computes what trainc would", model_type(v));
}

static cJSON *clip_spec(const Clip *v, const char *name)
{
    cJSON *ls, *root = hf_vit_spec_stem(&v->img, name, v->patch, v->D, v->P,
                                        (const char *[]){v->cls}, !v->sig, v->pos, &ls);
    if (!v->sig) {
        cJSON_AddFalseToObject(cJSON_GetArrayItem(ls, 0), "bias");
        cJSON_AddNumberToObject(hf_layer(ls, "layernorm", v->pre), "eps", v->b.eps);
    }
    hf_vit_blocks_spec(ls, &v->b, v->D);
    if (v->sig)
        cJSON_AddNumberToObject(hf_layer(ls, "layernorm", v->post), "eps", v->b.eps);
    cJSON *pool = hf_layer(ls, "token_mean", NULL);
    if (!v->sig)
        cJSON_AddNumberToObject(pool, "skip", 1);
    cJSON_AddNumberToObject(hf_layer(ls, "linear", v->head), "out", (double)v->img.K);
    hf_image_loss(cJSON_GetObjectItem(root, "model"));
    return root;
}

int hf_clip_import(HfCfg *cfg, const char *dir, const char *out, const char *name,
                   const char *labels, int siglip)
{
    Clip v = {.sig = siglip};
    default_names(&v);
    clip_config(cfg, &v, labels);
    int pre = hf_image_pixels(dir, &v.img);
    HfJoinImport im = {.dir = dir};
    hf_weights_dir(&im.w, dir);
    v.fresh_head = v.base || labels;
    clip_walk(&v, hf_join_plan_import, &im);
    int left = hf_join_leave_out(&im.w, xasprintf("%s%s.", M, v.sig ? "head" : "post_layernorm"), 0);
    if (v.fresh_head)
        left += hf_join_leave_out(&im.w, "classifier.", 0);
    if (v.base)   /* the text tower, CLIPModel's projections, the logit scale (and bias) */
        left += hf_join_leave_out(&im.w, M, 1);
    hf_join_all_used(&im.w, dir, v.base ? base_arch(&v) : cls_arch(&v));
    char *text = hf_json_text(clip_spec(&v, name));
    hf_image_write_import(&im, text, hf_image_train("{\"type\": \"adamw\", \"lr\": 1e-5, "
                                                    "\"weight_decay\": 0.1}", 1), out);
    printf("trainc: import: %s (%s, %lld layers, %d tensors, %d of the checkpoint's left out: "
           "%s%s; the pixels scaled and shifted%s as %s%s) -> %s/model.json, "
           "%s/train.json, %s/init.safetensors\n", dir, model_type(&v), (long long)v.b.L, im.out.n,
           left, v.sig ? "the pooling head" : "post_layernorm",
           v.base ? ", the text tower and the projections" : v.fresh_head ? ", the classifier"
           : "", v.img.ch_scale ? " by channel" : "", pre ? "preprocessor_config.json says"
           : "ViTImageProcessor's defaults, 1/255, 0.5, 0.5, say (the folder has no "
             "preprocessor_config.json)",
           v.fresh_head ? xasprintf("; a new classifier of %lld classes: 2 tensors drawn anew "
                                    "(uniform within 1/sqrt(%lld), the bias zero; seed %d)",
                                    (long long)v.img.K, (long long)v.D, HF_FRESH_SEED) : "",
           out, out, out);
    hf_image_keep_processor(dir, &v.img, out);
    return 0;
}

/* ---- export -------------------------------------------------------------------- */

int hf_clip_spec(const Spec *s)
{
    int cls = 0;
    for (int i = 0; i < s->n_layers; i++) {
        const Layer *l = s->layers[i];
        if (l->op == OP_TOKEN_MEAN && l->skip)
            return 1;
        cls |= l->op == OP_CLS_TOKEN;
        if (l->op == OP_TOKEN_MEAN && !cls && i > 1 && s->layers[i - 1]->op == OP_LAYERNORM)
            return 2;   /* SigLIP's: no class token, a norm before the mean */
    }
    return 0;
}

static const HfLayout clip_layout = {
    "CLIPForImageClassification",
    "conv2d (kernel = stride, no padding, no bias), tokens, cls_token, pos_embedding, "
    "layernorm, a repeat of [residual [layernorm, attention], residual [layernorm, linear, "
    "quick_gelu (or gelu), linear]], token_mean (skip 1), linear"};
static const HfLayout siglip_layout = {
    "SiglipForImageClassification",
    "conv2d (kernel = stride, no padding), tokens, pos_embedding, a repeat of [residual "
    "[layernorm, attention], residual [layernorm, linear, gelu, linear]], layernorm, "
    "token_mean, linear"};

/* The spec's layers as CLIP's (SIG: SigLIP's) tower and head, or exit 1 naming the first
 * that is not */
static void clip_match(const Spec *s, int sig, Clip *v)
{
    const HfLayout *h = sig ? &siglip_layout : &clip_layout;
    const char *at = "$.model.layers";
    const Layer *ls[8] = {0};
    for (int k = 0; k < 8 && k < s->n_layers; k++)
        ls[k] = s->layers[k];
    v->sig = sig;
    hf_match_vit_stem(s, h, !sig, sig, &v->img, &v->D, &v->P);
    const Layer **rest = ls + (sig ? 3 : 5);   /* the blocks (CLIP's after its pre-norm) on */
    if (!sig)
        hf_match_norm(s, h, ls[4], at, &v->b.eps);
    hf_match_vit_blocks(s, h, rest[0], v->D, sig ? (const int[]){OP_GELU, 0}
                        : (const int[]){OP_QUICK_GELU, OP_GELU, 0}, &v->b);
    if (!v->b.qkv_bias)
        hf_refuse(s, h, rest[0]->body[0]->body[1], "an attention without q, k and v's biases");
    if (sig)
        hf_match_norm(s, h, rest[1], at, &v->b.eps);
    const Layer *pool = hf_want(s, h, rest[1 + sig], at, OP_TOKEN_MEAN);
    if (pool->skip != !sig)
        hf_refuse(s, h, pool, sig ? "a token_mean other than over every token" :
                  "a token_mean other than over the patch tokens (skip 1)");
    v->img.K = hf_match_linear(s, h, rest[2 + sig], at, 0);
    hf_image_labels_from_spec(s, &v->img);
    if (s->n_layers > 8 - sig)
        hf_refuse(s, h, s->layers[8 - sig], "a layer after the classifier");
    if (s->loss != RT_LOSS_CROSS_ENTROPY)
        error_at(s->model_file, "$.model.loss", "%s's loss is cross entropy", h->arch);
    v->patch = hf_layer_name(ls[0], 0, ""), v->pos = hf_layer_name(ls[2 + !sig], 2 + !sig, "");
    if (sig)
        v->post = hf_layer_name(rest[1], 4, "");
    else
        v->cls = hf_layer_name(ls[2], 2, ""), v->pre = hf_layer_name(ls[4], 4, "");
    v->head = hf_layer_name(rest[2 + sig], 7 - sig, "");
}

static cJSON *clip_hf_config(const Clip *v)
{
    cJSON *c = cJSON_CreateObject();
    cJSON *ar = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(ar, cJSON_CreateString(cls_arch(v)));
    cJSON_AddStringToObject(c, "model_type", model_type(v));
    cJSON *t = cJSON_AddObjectToObject(c, "vision_config");
    cJSON_AddNumberToObject(t, "hidden_size", (double)v->D);
    cJSON_AddNumberToObject(t, "intermediate_size", (double)v->b.FF);
    cJSON_AddNumberToObject(t, "num_hidden_layers", (double)v->b.L);
    cJSON_AddNumberToObject(t, "num_attention_heads", (double)v->b.H);
    cJSON_AddNumberToObject(t, "num_channels", (double)v->img.C);
    cJSON_AddNumberToObject(t, "image_size", (double)v->img.S);
    cJSON_AddNumberToObject(t, "patch_size", (double)v->P);
    cJSON_AddStringToObject(t, "hidden_act", v->b.act == OP_QUICK_GELU ? "quick_gelu"
                            : v->b.gelu_tanh ? "gelu_pytorch_tanh" : "gelu");
    cJSON_AddItemToObject(t, "layer_norm_eps", hf_float(v->b.eps));
    cJSON_AddItemToObject(t, "attention_dropout", hf_float(0));
    if (v->sig)   /* (no pooling head: the classifier reads the mean) */
        cJSON_AddFalseToObject(t, "vision_use_head");
    else
        cJSON_AddItemToObject(t, "dropout", hf_float(0));
    hf_image_config_labels(c, &v->img);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    return c;
}

int hf_clip_export(const Spec *s, int siglip, const char *weights, const char *out)
{
    Clip v = {0};
    clip_match(s, siglip, &v);
    HfJoinExport e = {0};
    hf_join_export_open(&e, s, weights);
    clip_walk(&v, hf_join_plan_export, &e);
    if (!v.sig) {   /* (CLIP's post_layernorm, which the classifier does not read: the identity) */
        hf_join_export_filled(&e, xasprintf("%spost_layernorm.weight", M), 1, &v.D, 1);
        hf_join_export_filled(&e, xasprintf("%spost_layernorm.bias", M), 1, &v.D, 0);
    }
    hf_join_export_adapters(&e);
    hf_image_write_export(&e, &v.img, clip_hf_config(&v), model_type(&v), weights, s->model_file,
                          out);
    return 0;
}
