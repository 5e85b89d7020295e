/* hf_dinov2.c: Hugging Face's Dinov2ForImageClassification and
 * Dinov2WithRegistersForImageClassification both ways (its input and classes through
 * hf_image.c). `trainc import hf` of a DINOv2 folder as a model spec of
 * trainc's vision transformer layers: conv2d patches, tokens, cls_token, pos_embedding,
 * register_tokens (with registers), a repeat of pre-norm blocks whose two branches end in layer_scale (the MLP a gelu's,
 * or with use_swiglu_ffn a SwiGLU: linear 2H, glu, linear), layernorm, cls_mean (the
 * class token beside the mean of the patches') and the linear head; its position table
 * interpolated to --image-size as transformers interpolates it at every forward
 * (bicubic: to the size, 4.45 on; or by DINOv2's scale factor, (G + 0.1) / G0, before);
 * and its weights. `trainc export hf` of a spec of that layout back to config.json (its
 * image_size the spec's, so transformers interpolates nothing), preprocessor_config.json
 * and model.safetensors. One table (dino_walk, of hf_join.c's joins) pairs each of
 * trainc's tensors with the transformers tensor it is, for both. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cmd.h"
#include "hf.h"
#include "ops/op.h"

/* What the model's shapes and layers depend on, and the names of trainc's layers
 * (import: its own; export: the spec's) */
typedef struct Dino {
    HfImage img;                       /* channels, side, classes, pixels, names */
    int64_t P, D, L, H, FF;            /* patch, width, blocks, heads, the MLP's hidden width */
    int64_t G0;                        /* import: the checkpoint's grid of positions a side */
    int offset;                        /* import: interpolated by (G + 0.1) / G0, not to G */
    double eps, ls;                    /* layer_norm_eps; layerscale_value */
    double dp;                         /* drop_path_rate: each branch's drop_path */
    int gelu_tanh, qkv_bias, swiglu;
    double ratio;                      /* export: the mlp_ratio that gives FF back */
    const char *prefix;                /* the model's tensors' ("dinov2.", "" for Dinov2Model's) */
    int base, fresh_head;              /* import: Dinov2Model's; a head drawn anew */
    int regs;                          /* DINOv2 with registers (transformers 4.48 on) */
    int64_t R;                         /* its num_register_tokens */
    double std;                        /* initializer_range */
    char *patch, *cls, *pos, *registers, *norm, *head, *block;   /* block: "blocks.%lld." */
    char *norm1, *attn, *ls1, *norm2, *fc1, *fc2, *ls2;
} Dino;

static int64_t grid(const Dino *v) { return v->img.S / v->P; }

/* Block b's tensors */
static void dino_block(const Dino *v, int64_t b, hf_join_fn fn, void *ctx)
{
    char *ours = xasprintf(v->block, (long long)b),
         *th = xasprintf("%sencoder.layer.%lld.", v->prefix, (long long)b);
    int64_t D = v->D;
    hf_join_layernorm(fn, ctx, xasprintf("%s%s", ours, v->norm1), xasprintf("%snorm1", th), D);
    const char *w[3], *bs[3], *qkv[3] = {"query", "key", "value"};
    for (int k = 0; k < 3; k++) {
        w[k] = xasprintf("%sattention.attention.%s.weight", th, qkv[k]);
        bs[k] = xasprintf("%sattention.attention.%s.bias", th, qkv[k]);
    }
    hf_join(fn, ctx, xasprintf("%s%s.qkv.weight", ours, v->attn), 2, (int64_t[]){3 * D, D}, 3, w,
            2, (int64_t[]){D, D});
    if (v->qkv_bias)
        hf_join(fn, ctx, xasprintf("%s%s.qkv.bias", ours, v->attn), 1, (int64_t[]){3 * D}, 3, bs,
                1, &D);
    hf_join_linear(fn, ctx, xasprintf("%s%s.proj", ours, v->attn),
                   xasprintf("%sattention.output.dense", th), D, D);
    hf_join_same(fn, ctx, xasprintf("%s%s.weight", ours, v->ls1),
                 xasprintf("%slayer_scale1.lambda1", th), 1, &D);
    hf_join_layernorm(fn, ctx, xasprintf("%s%s", ours, v->norm2), xasprintf("%snorm2", th), D);
    hf_join_linear(fn, ctx, xasprintf("%s%s", ours, v->fc1),
                   xasprintf("%smlp.%s", th, v->swiglu ? "weights_in" : "fc1"),
                   (1 + v->swiglu) * v->FF, D);
    hf_join_linear(fn, ctx, xasprintf("%s%s", ours, v->fc2),
                   xasprintf("%smlp.%s", th, v->swiglu ? "weights_out" : "fc2"), D, v->FF);
    hf_join_same(fn, ctx, xasprintf("%s%s.weight", ours, v->ls2),
                 xasprintf("%slayer_scale2.lambda1", th), 1, &D);
}

/* torch's cubic convolution weights (A -0.75) of the fraction t, in float as its kernel
 * computes them */
static void cubic_weights(float t, float w[4])
{
    const float A = -0.75f;
    float x1 = t, x2 = 1.0f - t, x0 = (float)(x1 + 1.0), x3 = (float)(x2 + 1.0);
    w[0] = ((A * x0 - 5 * A) * x0 + 8 * A) * x0 - 4 * A;
    w[1] = ((A + 2) * x1 - (A + 3)) * x1 * x1 + 1;
    w[2] = ((A + 2) * x2 - (A + 3)) * x2 * x2 + 1;
    w[3] = ((A * x3 - 5 * A) * x3 + 8 * A) * x3 - 4 * A;
}

/* Output place i's four input places (clamped to 0 .. in - 1) and weights: torch's
 * interpolate(mode="bicubic", align_corners=False), whose source place is (i + 0.5) s -
 * 0.5, s in / out (size=, transformers 4.45 on) or, OFFSET, 1 / scale_factor with
 * scale_factor (out + 0.1) / in (DINOv2's code, transformers before 4.45) */
static void cubic_taps(int64_t in, int64_t out, int offset, int64_t i, int64_t at[4], float w[4])
{
    float scale = offset ? (float)(1.0 / (((double)out + 0.1) / (double)in)) : (float)in / (float)out;
    float real = (float)(scale * ((double)i + 0.5) - 0.5);
    int64_t first = (int64_t)floorf(real);
    cubic_weights(real - (float)first, w);
    for (int k = 0; k < 4; k++) {
        int64_t j = first - 1 + k;
        at[k] = j < 0 ? 0 : j >= in ? in - 1 : j;
    }
}

/* import: the position table [1, 1 + G0 G0, D] as trainc's [1 + G G, D]: the class
 * token's row, then the G0 x G0 grid interpolated to G x G (cubic_taps), channel by
 * channel (each output the rows' weighted sum of the columns' weighted sums, in float) */
static void pos_resample(const float *theirs, const int64_t *their_shape, float *ours,
                         const int64_t *shape, int offset)
{
    int64_t D = shape[1], G0 = (int64_t)llround(sqrt((double)(their_shape[1] - 1))),
            G = (int64_t)llround(sqrt((double)(shape[0] - 1)));
    memcpy(ours, theirs, (size_t)D * sizeof *ours);
    const float *src = theirs + D;
    for (int64_t y = 0; y < G; y++) {
        int64_t ry[4], rx[4];
        float wy[4], wx[4];
        cubic_taps(G0, G, offset, y, ry, wy);
        for (int64_t x = 0; x < G; x++) {
            cubic_taps(G0, G, offset, x, rx, wx);
            float *o = ours + (1 + y * G + x) * D;
            for (int64_t c = 0; c < D; c++) {
                float acc = 0;
                for (int j = 0; j < 4; j++) {
                    float row = 0;
                    for (int k = 0; k < 4; k++) {
                        float t = src[(ry[j] * G0 + rx[k]) * D + c] * wx[k];
                        row = k ? row + t : t;
                    }
                    acc = j ? acc + row * wy[j] : row * wy[j];
                }
                o[c] = acc;
            }
        }
    }
}

/* torch's antialiased bicubic filter (interpolate(..., antialias=True): Keys' A -0.5) */
static float aa_cubic(float x)
{
    const float A = -0.5f;
    x = fabsf(x);
    if (x < 1.0f)
        return ((A + 2) * x - (A + 3)) * x * x + 1;
    if (x < 2.0f)
        return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    return 0.0f;
}

#define AA_TAPS 64   /* (a side shrunk at most 15 times) */

/* Output place i's input places [*first, *first + n) and their weights, normalized:
 * torch's antialiased interpolation (the filter widened by in / out when shrinking), in
 * its float and double steps */
static int aa_taps(int64_t in, int64_t out, int64_t i, int64_t *first, float w[AA_TAPS])
{
    float scale = (float)in / (float)out;
    float support = (float)(scale >= 1.0f ? 2.0 * scale : 2.0);
    float center = (float)(scale * ((double)i + 0.5));
    float inv = scale >= 1.0f ? 1.0f / scale : 1.0f;
    int64_t lo = (int64_t)((double)(center - support) + 0.5),
            hi = (int64_t)((double)(center + support) + 0.5);
    lo = lo < 0 ? 0 : lo;
    hi = hi > in ? in : hi;
    int n = (int)(hi - lo);
    if (n > AA_TAPS)
        error_input("import: a position table shrunk from %lld to %lld a side (at most 15 times)",
                    (long long)in, (long long)out);
    float total = 0;
    for (int j = 0; j < n; j++) {
        w[j] = aa_cubic((float)((double)((float)(j + lo) - center) + 0.5) * inv);
        total += w[j];
    }
    for (int j = 0; j < n && total != 0; j++)
        w[j] /= total;
    *first = lo;
    return n;
}

/* One axis of an antialiased interpolation: src [outer, in, inner] to dst [outer, out,
 * inner], each output the taps' products added in order */
static void aa_axis(const float *src, float *dst, int64_t outer, int64_t in, int64_t out,
                    int64_t inner)
{
    float w[AA_TAPS];
    int64_t at;
    for (int64_t i = 0; i < out; i++) {
        int n = aa_taps(in, out, i, &at, w);
        for (int64_t o = 0; o < outer; o++)
            for (int64_t c = 0; c < inner; c++) {
                const float *s = src + (o * in + at) * inner + c;
                float t = w[0] * s[0];
                for (int k = 1; k < n; k++)
                    t = t + w[k] * s[k * inner];
                dst[(o * out + i) * inner + c] = t;
            }
    }
}

/* import (DINOv2 with registers): the table's G0 x G0 grid to G x G as
 * interpolate(mode="bicubic", antialias=True) makes it: along the rows (x) first, into
 * [G0, G, D], then along the columns */
static void pos_antialiased(const float *theirs, const int64_t *their_shape, float *ours,
                            const int64_t *shape)
{
    int64_t D = shape[1], G0 = (int64_t)llround(sqrt((double)(their_shape[1] - 1))),
            G = (int64_t)llround(sqrt((double)(shape[0] - 1)));
    memcpy(ours, theirs, (size_t)D * sizeof *ours);
    float *mid = xcalloc((size_t)(G0 * G * D), sizeof *mid);
    aa_axis(theirs + D, mid, G0, G0, G, D);
    aa_axis(mid, ours + D, 1, G0, G, G * D);
    free(mid);
}

static void pos_to_size(const float *theirs, const int64_t *their_shape, float *ours,
                        const int64_t *shape)
{
    pos_resample(theirs, their_shape, ours, shape, 0);
}
static void pos_by_offset(const float *theirs, const int64_t *their_shape, float *ours,
                          const int64_t *shape)
{
    pos_resample(theirs, their_shape, ours, shape, 1);
}

/* Every tensor, in trainc's order */
static void dino_walk(const Dino *v, hf_join_fn fn, void *ctx)
{
    int64_t D = v->D, N = grid(v) * grid(v) + 1, N0 = v->G0 * v->G0 + 1;
    int64_t conv[4] = {D, v->img.C, v->P, v->P};
    const char *m = v->prefix;
    hf_join_same(fn, ctx, xasprintf("%s.weight", v->patch),
                 xasprintf("%sembeddings.patch_embeddings.projection.weight", m), 4, conv);
    hf_join_same(fn, ctx, xasprintf("%s.bias", v->patch),
                 xasprintf("%sembeddings.patch_embeddings.projection.bias", m), 1, &D);
    const char *cls = xasprintf("%sembeddings.cls_token", m),
               *pos = xasprintf("%sembeddings.position_embeddings", m);
    hf_join(fn, ctx, xasprintf("%s.weight", v->cls), 1, &D, 1, &cls, 3, (int64_t[]){1, 1, D});
    if (N0 == N)
        hf_join(fn, ctx, xasprintf("%s.weight", v->pos), 2, (int64_t[]){N, D}, 1, &pos, 3,
                (int64_t[]){1, N, D});
    else
        hf_join_resampled(fn, ctx, xasprintf("%s.weight", v->pos), 2, (int64_t[]){N, D}, pos, 3,
                          (int64_t[]){1, N0, D}, v->regs ? pos_antialiased
                          : v->offset ? pos_by_offset : pos_to_size);
    if (v->regs) {
        const char *r = xasprintf("%sembeddings.register_tokens", m);
        hf_join(fn, ctx, xasprintf("%s.weight", v->registers), 2, (int64_t[]){v->R, D}, 1, &r, 3,
                (int64_t[]){1, v->R, D});
    }
    for (int64_t b = 0; b < v->L; b++)
        dino_block(v, b, fn, ctx);
    hf_join_layernorm(fn, ctx, v->norm, xasprintf("%slayernorm", m), D);
    if (v->fresh_head)   /* (as Dinov2's _init_weights: a truncated normal, bias zero) */
        hf_join_fresh_linear(fn, ctx, v->head, v->img.K, 2 * D, v->std);
    else
        hf_join_linear(fn, ctx, v->head, "classifier", v->img.K, 2 * D);
}

/* import's names */
static void default_names(Dino *v)
{
    v->patch = "patch", v->cls = "cls", v->pos = "pos", v->registers = "registers";
    v->norm = "norm", v->head = "head";
    v->block = "blocks.%lld.";
    v->norm1 = "norm1", v->attn = "attn", v->ls1 = "scale1", v->norm2 = "norm2", v->fc1 = "fc1",
    v->fc2 = "fc2", v->ls2 = "scale2";
}

/* ---- import -------------------------------------------------------------------- */

static const char *dino_class(const Dino *v)
{
    return v->regs ? "Dinov2WithRegistersForImageClassification" : "Dinov2ForImageClassification";
}

/* Keys that change nothing trainc computes: the dropouts, and the backbone's outputs
 * (AutoBackbone's stages), which a classifier does not read */
static const char *const dino_ignored[] = {"hidden_dropout_prob", "attention_probs_dropout_prob",
                                           "out_features", "out_indices", "stage_names",
                                           "apply_layernorm", "reshape_hidden_states", NULL};

/* the MLP's hidden width of mlp_ratio R: int(D R), SwiGLU's two thirds of it rounded up
 * to 8 */
static int64_t width_of(const Dino *v, double r)
{
    int64_t h = (int64_t)((double)v->D * r);
    return v->swiglu ? ((int64_t)((double)h * 2 / 3) + 7) / 8 * 8 : h;
}

static int64_t mlp_width(HfCfg *c, const Dino *v)
{
    double r = hf_cfg_num(c, "mlp_ratio", 4);
    if (!(r > 0) || r * (double)v->D > 1 << 24)
        hf_cfg_error(c, "mlp_ratio", "a positive number expected");
    return width_of(v, r);
}

static void dino_sizes(HfCfg *c, Dino *v, int64_t S)
{
    v->D = hf_cfg_int(c, "hidden_size", 768);
    v->L = hf_cfg_int(c, "num_hidden_layers", 12);
    v->H = hf_cfg_int(c, "num_attention_heads", 12);
    v->P = hf_cfg_int(c, "patch_size", 16);
    v->img.C = hf_cfg_int(c, "num_channels", 3);
    int64_t S0 = hf_cfg_int(c, "image_size", 224);
    v->G0 = S0 / v->P;
    v->img.S = S ? S : S0;
    if (v->D % v->H)
        hf_cfg_error(c, "num_attention_heads", "%lld does not divide hidden_size %lld",
                     (long long)v->H, (long long)v->D);
    if (S0 % v->P)
        hf_cfg_error(c, "patch_size", "%lld does not divide image_size %lld (trainc's patches "
                     "cover the image)", (long long)v->P, (long long)S0);
    if (v->img.S % v->P)
        error_input("import: --image-size %lld: not a multiple of patch_size %lld",
                    (long long)v->img.S, (long long)v->P);
}

/* config.json as v's sizes (S: --image-size, 0 for image_size); exits 1 naming a key
 * trainc cannot express */
static void dino_config(HfCfg *c, Dino *v, const char *labels, int64_t S)
{
    v->base = hf_image_arch(c, labels, dino_class(v), v->regs ? "Dinov2WithRegistersModel"
                            : "Dinov2Model", v->regs ? "DINOv2 with registers" : "DINOv2");
    hf_cfg_classifier(c);
    if (v->regs) {
        v->R = hf_cfg_int(c, "num_register_tokens", 4);
        if (v->R < 1)
            hf_cfg_error(c, "num_register_tokens", "%lld: 1 or more (or model_type dinov2)",
                         (long long)v->R);
    }
    v->std = hf_cfg_num(c, "initializer_range", 0.02);
    dino_sizes(c, v, S);
    v->eps = hf_cfg_num(c, "layer_norm_eps", 1e-6);
    v->ls = hf_cfg_num(c, "layerscale_value", 1.0);
    v->qkv_bias = hf_cfg_bool(c, "qkv_bias", 1);
    v->swiglu = hf_cfg_bool(c, "use_swiglu_ffn", 0);
    v->FF = mlp_width(c, v);
    const char *act = v->swiglu ? (hf_cfg_get(c, "hidden_act"), "none")   /* (SwiGLU's silu) */
                                : hf_gelu_approximate(c, "hidden_act", "gelu");
    v->gelu_tanh = !strcmp(act, "tanh");
    v->dp = hf_cfg_num(c, "drop_path_rate", 0);
    if (!(v->dp >= 0 && v->dp < 1))
        hf_cfg_error(c, "drop_path_rate", "%g: a probability in [0, 1) expected", v->dp);
    if (labels)
        hf_labels_arg(c, labels, &v->img);
    else
        hf_image_labels(c, &v->img);
    for (int k = 0; dino_ignored[k]; k++)
        hf_cfg_get(c, dino_ignored[k]);   /* read, and nothing to do */
    const char *rest = hf_cfg_rest(c, hf_pretrained_keys);
    if (rest)
        hf_cfg_error(c, rest, "a key trainc does not know for dinov2: it cannot tell whether "
                     "the model computes what trainc would");
}

/* the blocks: a repeat of [residual [layernorm, attention, layer_scale], residual
 * [layernorm, the MLP, layer_scale]] */
static void dino_blocks(const Dino *v, cJSON *ls)
{
    cJSON *rep = hf_layer(ls, "repeat", "blocks");
    cJSON_AddNumberToObject(rep, "count", (double)v->L);
    cJSON *body = cJSON_AddArrayToObject(rep, "body");
    cJSON *a = hf_prenorm_branch(body, v->norm1, v->eps);
    cJSON *att = hf_layer(a, "attention", v->attn);
    cJSON_AddNumberToObject(att, "heads", (double)v->H);
    cJSON_AddFalseToObject(att, "causal");
    if (!v->qkv_bias)
        cJSON_AddStringToObject(att, "bias", "proj");
    cJSON_AddNumberToObject(hf_layer(a, "layer_scale", v->ls1), "init_value", v->ls);
    cJSON *mlp = hf_prenorm_branch(body, v->norm2, v->eps);
    cJSON_AddNumberToObject(hf_layer(mlp, "linear", v->fc1), "out", (double)((1 + v->swiglu) * v->FF));
    if (v->swiglu)
        hf_layer(mlp, "glu", NULL);
    else if (v->gelu_tanh)
        cJSON_AddStringToObject(hf_layer(mlp, "gelu", NULL), "approximate", "tanh");
    else
        hf_layer(mlp, "gelu", NULL);
    cJSON_AddNumberToObject(hf_layer(mlp, "linear", v->fc2), "out", (double)v->D);
    cJSON_AddNumberToObject(hf_layer(mlp, "layer_scale", v->ls2), "init_value", v->ls);
    for (int k = 0; v->dp > 0 && k < 2; k++)   /* (each branch's residual) */
        cJSON_AddNumberToObject(cJSON_GetArrayItem(body, k), "drop_path", v->dp);
}

static cJSON *dino_spec(const Dino *v, const char *name)
{
    cJSON *ls, *root = hf_vit_spec_stem(&v->img, name, v->patch, v->D, v->P,
                                        (const char *[]){v->cls}, 1, v->pos, &ls);
    cJSON *m = cJSON_GetObjectItem(root, "model");
    if (v->regs)
        cJSON_AddNumberToObject(hf_layer(ls, "register_tokens", v->registers), "count", (double)v->R);
    dino_blocks(v, ls);
    cJSON_AddNumberToObject(hf_layer(ls, "layernorm", v->norm), "eps", v->eps);
    hf_layer(ls, "cls_mean", NULL);
    cJSON_AddNumberToObject(hf_layer(ls, "linear", v->head), "out", (double)v->img.K);
    hf_image_loss(m);
    return root;
}

int hf_dinov2_import(HfCfg *cfg, const char *dir, const char *out, const char *name, int64_t S,
                     int offset, const char *labels, int registers)
{
    Dino v = {.offset = offset, .regs = registers};
    default_names(&v);
    dino_config(cfg, &v, labels, S);
    if (registers && offset)
        error_input("import: --interpolate offset: a DINOv2 with registers interpolates its "
                    "position table to the size (antialiased), as transformers 4.48 does");
    int pre = hf_image_pixels(dir, &v.img);
    HfJoinImport im = {.dir = dir};
    hf_weights_dir(&im.w, dir);
    const char *model = registers ? "dinov2_with_registers." : "dinov2.";
    v.prefix = hf_find(&im.w, xasprintf("%sembeddings.cls_token", model)) ? model : "";
    v.fresh_head = v.base || labels;
    dino_walk(&v, hf_join_plan_import, &im);
    int left = v.fresh_head ? hf_join_leave_out(&im.w, "classifier.", 0) : 0;
    int masks = hf_join_leave_out(&im.w, xasprintf("%sembeddings.mask_token", v.prefix), 0);
    hf_join_all_used(&im.w, dir, dino_class(&v));
    char *text = hf_json_text(dino_spec(&v, name));
    hf_image_write_import(&im, text, hf_image_train("{\"type\": \"adamw\", \"lr\": 5e-5, "
                                                    "\"weight_decay\": 0.05}", 1), out);
    printf("trainc: import: %s (dinov2%s, %lld layers%s, %d tensors%s; %lldx%lld images%s; the "
           "pixels scaled and shifted%s as %s%s) -> %s/model.json, %s/train.json, "
           "%s/init.safetensors\n", dir, v.regs ? xasprintf(" with %lld registers", (long long)v.R)
           : "", (long long)v.L, v.swiglu ? ", SwiGLU" : "", im.out.n,
           masks ? ", the mask token left out" : "", (long long)v.img.S, (long long)v.img.S,
           grid(&v) != v.G0 ? xasprintf(", the position table interpolated from %lldx%lld to "
                                        "%lldx%lld%s", (long long)v.G0, (long long)v.G0,
                                        (long long)grid(&v), (long long)grid(&v), offset
                                        ? " by DINOv2's scale factor" : v.regs
                                        ? " antialiased" : "") : "",
           v.img.ch_scale ? " by channel" : "", pre ? "preprocessor_config.json says"
           : "ViTImageProcessor's defaults, 1/255, 0.5, 0.5, say (the folder has no "
             "preprocessor_config.json)",
           v.fresh_head ? hf_image_new_head_said(&v.img, im.n_fresh, v.std, left) : "",
           out, out, out);
    hf_image_keep_processor(dir, &v.img, out);
    return 0;
}

/* ---- export -------------------------------------------------------------------- */

int hf_dinov2_spec(const Spec *s)
{
    for (int i = 0; i < s->n_layers; i++)
        if (s->layers[i]->op == OP_CLS_MEAN)
            return 1;
    return 0;
}

static const HfLayout dino_layout = {
    "Dinov2ForImageClassification",
    "conv2d (kernel = stride, no padding), tokens, cls_token, pos_embedding, register_tokens "
    "(Dinov2WithRegistersForImageClassification's, or none), a repeat of "
    "[residual [layernorm, attention, layer_scale], residual [layernorm, linear, gelu (or "
    "glu), linear, layer_scale]], layernorm, cls_mean, linear"};

/* a block's layer_scale: every one starting at one init_value (the config's
 * layerscale_value; *ls 0 before the first) */
static void match_scale(const Spec *s, const Layer *l, const char *at, double *ls)
{
    hf_want(s, &dino_layout, l, at, OP_LAYER_SCALE);
    if (*ls && l->init_value != *ls)
        hf_refuse(s, &dino_layout, l, "a layer_scale's init_value other than the first's (the "
                  "config has one layerscale_value)");
    *ls = l->init_value;
}

static void match_attention_branch(const Spec *s, const Layer *rep, Dino *v)
{
    char *a = hf_match_residual(s, &dino_layout, rep->body[0], rep->path, 3);
    Layer **ab = rep->body[0]->body;
    hf_match_norm(s, &dino_layout, ab[0], rep->path, &v->eps);
    hf_match_vit_attention(s, &dino_layout, ab[1], rep->path, &v->H, &v->qkv_bias);
    match_scale(s, ab[2], rep->path, &v->ls);
    v->norm1 = hf_layer_name(ab[0], 0, a), v->attn = hf_layer_name(ab[1], 1, a),
    v->ls1 = hf_layer_name(ab[2], 2, a);
}

static void match_mlp_branch(const Spec *s, const Layer *rep, Dino *v)
{
    char *m = hf_match_residual(s, &dino_layout, rep->body[1], rep->path, 5);
    Layer **mb = rep->body[1]->body;
    hf_match_norm(s, &dino_layout, mb[0], rep->path, &v->eps);
    int64_t h = hf_match_linear(s, &dino_layout, mb[1], rep->path, 0);
    v->swiglu = mb[2] && mb[2]->op == OP_GLU;
    if (v->swiglu && (mb[2]->glu_act != RT_GLU_SILU || h % 2))
        hf_refuse(s, &dino_layout, mb[2], "a glu other than silu's over an even width (SwiGLU)");
    if (!v->swiglu) {
        hf_want(s, &dino_layout, mb[2], rep->path, OP_GELU);
        v->gelu_tanh = mb[2]->gelu_tanh;
    }
    v->FF = v->swiglu ? h / 2 : h;
    v->ratio = (double)(v->swiglu ? v->FF * 3 / 2 : v->FF) / (double)v->D;
    if (width_of(v, v->ratio) != v->FF)   /* (float's rounding: the next ratio up) */
        v->ratio = nextafter(v->ratio, INFINITY);
    if (width_of(v, v->ratio) != v->FF)
        hf_refuse(s, &dino_layout, mb[1], "an MLP width no mlp_ratio gives (SwiGLU's: a "
                  "multiple of 8 and of 2)");
    hf_match_linear(s, &dino_layout, mb[3], rep->path, v->D);
    match_scale(s, mb[4], rep->path, &v->ls);
    v->norm2 = hf_layer_name(mb[0], 0, m), v->fc1 = hf_layer_name(mb[1], 1, m),
    v->fc2 = hf_layer_name(mb[3], 3, m), v->ls2 = hf_layer_name(mb[4], 4, m);
}

static void dino_match_blocks(const Spec *s, const Layer *rep, Dino *v)
{
    hf_want(s, &dino_layout, rep, "$.model.layers", OP_REPEAT);
    if (rep->n_body != 2)
        hf_refuse(s, &dino_layout, rep, "a repeat of other than two residuals");
    v->dp = rep->body[0]->drop_path;
    if (rep->body[1]->drop_path != v->dp)   /* (the config has one drop_path_rate) */
        hf_refuse(s, &dino_layout, rep->body[1], "a drop_path other than the attention "
                  "branch's");
    v->L = rep->count;
    v->block = rep->name ? xasprintf("%s.%%lld.", rep->name) : "%lld.";
    match_attention_branch(s, rep, v);
    match_mlp_branch(s, rep, v);
}

/* The spec's layers as a DINOv2, or exit 1 naming the first that is not */
static void dino_match(const Spec *s, Dino *v)
{
    const Layer *ls[8] = {0};
    const char *at = "$.model.layers";
    hf_match_vit_stem(s, &dino_layout, 1, 1, &v->img, &v->D, &v->P);
    v->G0 = grid(v);
    v->regs = s->n_layers > 4 && s->layers[4]->op == OP_REGISTER_TOKENS;
    v->prefix = v->regs ? "dinov2_with_registers." : "dinov2.";
    for (int k = 0; k < 8 && k + (k >= 4) * v->regs < s->n_layers; k++)
        ls[k] = s->layers[k + (k >= 4) * v->regs];   /* (ls: the layers but the registers) */
    if (v->regs) {
        v->R = s->layers[4]->count;
        v->registers = hf_layer_name(s->layers[4], 4, "");
    }
    dino_match_blocks(s, ls[4], v);
    hf_match_norm(s, &dino_layout, ls[5], at, &v->eps);
    hf_want(s, &dino_layout, ls[6], at, OP_CLS_MEAN);
    v->img.K = hf_match_linear(s, &dino_layout, ls[7], at, 0);
    hf_image_labels_from_spec(s, &v->img);
    if (s->n_layers > 8 + v->regs)
        hf_refuse(s, &dino_layout, s->layers[8 + v->regs], "a layer after the classifier");
    if (s->loss != RT_LOSS_CROSS_ENTROPY)
        error_at(s->model_file, "$.model.loss", "%s's loss is cross entropy", dino_class(v));
    v->patch = hf_layer_name(ls[0], 0, ""), v->cls = hf_layer_name(ls[2], 2, ""),
    v->pos = hf_layer_name(ls[3], 3, "");
    v->norm = hf_layer_name(ls[5], 5 + v->regs, ""), v->head = hf_layer_name(ls[7], 7 + v->regs, "");
}

static cJSON *dino_hf_config(const Dino *v)
{
    cJSON *c = cJSON_CreateObject();
    cJSON *ar = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(ar, cJSON_CreateString(dino_class(v)));
    cJSON_AddStringToObject(c, "model_type", v->regs ? "dinov2_with_registers" : "dinov2");
    if (v->regs)
        cJSON_AddNumberToObject(c, "num_register_tokens", (double)v->R);
    cJSON_AddNumberToObject(c, "hidden_size", (double)v->D);
    cJSON_AddNumberToObject(c, "num_hidden_layers", (double)v->L);
    cJSON_AddNumberToObject(c, "num_attention_heads", (double)v->H);
    cJSON_AddItemToObject(c, "mlp_ratio", hf_float(v->ratio));
    cJSON_AddStringToObject(c, "hidden_act", v->gelu_tanh ? "gelu_pytorch_tanh" : "gelu");
    cJSON_AddBoolToObject(c, "use_swiglu_ffn", v->swiglu);
    cJSON_AddItemToObject(c, "hidden_dropout_prob", hf_float(0));
    cJSON_AddItemToObject(c, "attention_probs_dropout_prob", hf_float(0));
    cJSON_AddItemToObject(c, "drop_path_rate", hf_float(v->dp));
    cJSON_AddItemToObject(c, "initializer_range", hf_float(0.02));
    cJSON_AddItemToObject(c, "layer_norm_eps", hf_float(v->eps));
    cJSON_AddItemToObject(c, "layerscale_value", hf_float(v->ls));
    cJSON_AddNumberToObject(c, "image_size", (double)v->img.S);
    cJSON_AddNumberToObject(c, "patch_size", (double)v->P);
    cJSON_AddNumberToObject(c, "num_channels", (double)v->img.C);
    cJSON_AddBoolToObject(c, "qkv_bias", v->qkv_bias);
    hf_image_config_labels(c, &v->img);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    return c;
}

int hf_dinov2_export(const Spec *s, const char *weights, const char *out)
{
    Dino v = {0};
    dino_match(s, &v);
    HfJoinExport e = {0};
    hf_join_export_open(&e, s, weights);
    dino_walk(&v, hf_join_plan_export, &e);
    hf_join_export_filled(&e, xasprintf("%sembeddings.mask_token", v.prefix), 2,
                          (int64_t[]){1, v.D}, 0);
    hf_join_export_adapters(&e);
    hf_image_write_export(&e, &v.img, dino_hf_config(&v), v.regs ? "dinov2_with_registers"
                          : "dinov2", weights, s->model_file, out);
    return 0;
}
