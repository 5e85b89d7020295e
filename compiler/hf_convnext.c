/* hf_convnext.c: Hugging Face's ConvNextForImageClassification and
 * ConvNextV2ForImageClassification both ways (their input and classes through
 * hf_image.c). `trainc import hf` of a ConvNeXt folder as a model spec:
 * the patchify stem (conv2d, kernel = stride = patch_size) and its channels-first
 * layernorm (tokens, layernorm, untokens), each later stage's downsampling (the same
 * layernorm, a conv2d of kernel 2, stride 2), each stage's blocks as a repeat of one
 * residual (a depthwise 7x7 conv2d, tokens, layernorm, linear 4C, gelu, linear C,
 * layer_scale, untokens; ConvNeXt V2's: grn after the gelu, no layer_scale), then tokens,
 * token_mean, layernorm and the linear head; and its weights. `trainc export hf` of a spec of that layout back to config.json,
 * preprocessor_config.json and model.safetensors. One table (cnx_walk, of hf_join.c's
 * joins) pairs each of trainc's tensors with the transformers tensor it is, for both. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cmd.h"
#include "hf.h"
#include "ops/op.h"

enum { CNX_MAX_STAGES = 16 };

/* What the model's shapes and layers depend on, and the names of trainc's layers
 * (import: its own; export: the spec's) */
typedef struct Cnx {
    HfImage img;                       /* channels, side, classes, pixels, names */
    int n;                             /* stages */
    int64_t *width, *depth;            /* each stage's channels and blocks */
    int64_t P;                         /* patch_size: the stem's kernel and stride */
    double eps;                        /* layer_norm_eps: the pooled features' layernorm */
    double ls;                         /* layer_scale_init_value; 0: no layer_scale */
    double dp;                         /* drop_path_rate: the last block's (0 the first's) */
    int v2;                            /* ConvNeXt V2's: grn, no layer_scale */
    int gelu_tanh;
    const char *prefix;                /* the model's tensors' ("convnext." or
                                          "convnextv2.", or "" for the bare model's) */
    int base, fresh_head;              /* import: ConvNextModel's; a head drawn anew */
    double std;                        /* initializer_range */
    /* trainc's names: the top layers', each stage's, and a block's layers' after the
     * block prefix (blocks[s]: "stageS.%lld.") */
    char *stem, *stem_norm, *norm, *head;
    char *down_norm[CNX_MAX_STAGES], *down[CNX_MAX_STAGES], *blocks[CNX_MAX_STAGES];
    const Layer *blocks_rep[CNX_MAX_STAGES];   /* export: each stage's repeat */
    char *dwconv, *bnorm, *fc1, *grn, *fc2, *scale;
} Cnx;

/* The version's names: its classifier's architecture, its bare model's, its model_type */
static const char *cls_arch(const Cnx *v)
{
    return v->v2 ? "ConvNextV2ForImageClassification" : "ConvNextForImageClassification";
}
static const char *base_arch(const Cnx *v) { return v->v2 ? "ConvNextV2Model" : "ConvNextModel"; }
static const char *model_type(const Cnx *v) { return v->v2 ? "convnextv2" : "convnext"; }

/* Stage s's block b's tensors */
static void cnx_block(const Cnx *v, int s, int64_t b, hf_join_fn fn, void *ctx)
{
    char *ours = xasprintf(v->blocks[s], (long long)b),
         *th = xasprintf("%sencoder.stages.%d.layers.%lld.", v->prefix, s, (long long)b);
    int64_t W = v->width[s], dw[4] = {W, 1, 7, 7};
    hf_join_same(fn, ctx, xasprintf("%s%s.weight", ours, v->dwconv),
                 xasprintf("%sdwconv.weight", th), 4, dw);
    hf_join_same(fn, ctx, xasprintf("%s%s.bias", ours, v->dwconv),
                 xasprintf("%sdwconv.bias", th), 1, &W);
    hf_join_layernorm(fn, ctx, xasprintf("%s%s", ours, v->bnorm), xasprintf("%slayernorm", th), W);
    hf_join_linear(fn, ctx, xasprintf("%s%s", ours, v->fc1), xasprintf("%spwconv1", th), 4 * W, W);
    if (v->v2) {   /* their [1, 1, 1, 4W] */
        int64_t H = 4 * W, shp[4] = {1, 1, 1, H};
        const char *gw = xasprintf("%sgrn.weight", th), *gb = xasprintf("%sgrn.bias", th);
        hf_join(fn, ctx, xasprintf("%s%s.weight", ours, v->grn), 1, &H, 1, &gw, 4, shp);
        hf_join(fn, ctx, xasprintf("%s%s.bias", ours, v->grn), 1, &H, 1, &gb, 4, shp);
    }
    hf_join_linear(fn, ctx, xasprintf("%s%s", ours, v->fc2), xasprintf("%spwconv2", th), W, 4 * W);
    if (v->ls)
        hf_join_same(fn, ctx, xasprintf("%s%s.weight", ours, v->scale),
                     xasprintf("%slayer_scale_parameter", th), 1, &W);
}

/* Every tensor, in trainc's order */
static void cnx_walk(const Cnx *v, hf_join_fn fn, void *ctx)
{
    const char *m = v->prefix;
    int64_t W0 = v->width[0], stem[4] = {W0, v->img.C, v->P, v->P};
    hf_join_same(fn, ctx, xasprintf("%s.weight", v->stem),
                 xasprintf("%sembeddings.patch_embeddings.weight", m), 4, stem);
    hf_join_same(fn, ctx, xasprintf("%s.bias", v->stem),
                 xasprintf("%sembeddings.patch_embeddings.bias", m), 1, &W0);
    hf_join_layernorm(fn, ctx, v->stem_norm, xasprintf("%sembeddings.layernorm", m), W0);
    for (int s = 0; s < v->n; s++) {
        if (s) {
            int64_t W = v->width[s], in = v->width[s - 1], k[4] = {W, in, 2, 2};
            char *th = xasprintf("%sencoder.stages.%d.downsampling_layer.", m, s);
            hf_join_layernorm(fn, ctx, v->down_norm[s], xasprintf("%s0", th), in);
            hf_join_same(fn, ctx, xasprintf("%s.weight", v->down[s]), xasprintf("%s1.weight", th),
                         4, k);
            hf_join_same(fn, ctx, xasprintf("%s.bias", v->down[s]), xasprintf("%s1.bias", th), 1, &W);
        }
        for (int64_t b = 0; b < v->depth[s]; b++)
            cnx_block(v, s, b, fn, ctx);
    }
    int64_t D = v->width[v->n - 1];
    hf_join_layernorm(fn, ctx, v->norm, xasprintf("%slayernorm", m), D);
    if (v->fresh_head)   /* (as ConvNeXt's _init_weights) */
        hf_join_fresh_linear(fn, ctx, v->head, v->img.K, D, v->std);
    else
        hf_join_linear(fn, ctx, v->head, "classifier", v->img.K, D);
}

/* import's names */
static void default_names(Cnx *v)
{
    v->stem = "stem", v->stem_norm = "stem_norm", v->norm = "norm", v->head = "head";
    for (int s = 0; s < v->n; s++) {
        v->down_norm[s] = xasprintf("stage%d_norm", s);
        v->down[s] = xasprintf("stage%d_down", s);
        v->blocks[s] = xasprintf("stage%d.%%lld.", s);
    }
    v->dwconv = "dwconv", v->bnorm = "norm", v->fc1 = "fc1", v->grn = "grn", v->fc2 = "fc2";
    v->scale = "scale";
}

/* The side of the map after the stem (patches) and after each downsampling (kernel 2,
 * stride 2) */
static int64_t stage_side(const Cnx *v, int s)
{
    int64_t h = v->img.S / v->P;
    for (int k = 1; k <= s; k++)
        h = (h - 2) / 2 + 1;
    return h;
}

/* ---- import -------------------------------------------------------------------- */

/* ConvNextConfig's keys of a backbone's outputs, which the classifier does not read */
static const char *const backbone_keys[] = {"stage_names", "out_features", "out_indices", NULL};

/* The stages' count, widths and depths; the image side (S from --image-size, else the
 * config's image_size) large enough for every stage */
static void cnx_stages(HfCfg *c, Cnx *v, int64_t S)
{
    int64_t n = hf_cfg_int(c, "num_stages", 4);
    v->n = 0;
    v->width = hf_cfg_int_list(c, "hidden_sizes", &v->n);
    v->depth = hf_cfg_int_list(c, "depths", &v->n);
    if (n != v->n)
        hf_cfg_error(c, "num_stages", "%lld where hidden_sizes and depths list %d stages",
                     (long long)n, v->n);
    if (v->n > CNX_MAX_STAGES)
        hf_cfg_error(c, "num_stages", "%d: trainc imports at most %d", v->n, CNX_MAX_STAGES);
    v->img.C = hf_cfg_int(c, "num_channels", 3);
    v->P = hf_cfg_int(c, "patch_size", 4);
    int64_t side = hf_cfg_int(c, "image_size", 224);
    v->img.S = S ? S : side;
    if (v->img.S / v->P < 1 << (v->n - 1))
        error_input("import: %lldx%lld images are too small for %d stages of patches of %lld "
                    "(%lld or more a side)%s", (long long)v->img.S, (long long)v->img.S, v->n,
                    (long long)v->P, (long long)v->P << (v->n - 1),
                    S ? "" : " (config.json's image_size; --image-size sets another)");
}

static void cnx_config(HfCfg *c, Cnx *v, const char *labels, int64_t S)
{
    v->base = hf_image_arch(c, labels, cls_arch(v), base_arch(v), v->v2 ? "ConvNeXt V2" : "ConvNeXt");
    hf_cfg_classifier(c);
    v->std = hf_cfg_num(c, "initializer_range", 0.02);
    cnx_stages(c, v, S);
    v->eps = hf_cfg_num(c, "layer_norm_eps", 1e-12);
    v->ls = v->v2 ? 0 : hf_cfg_num(c, "layer_scale_init_value", 1e-6);   /* (V2: none) */
    if (v->ls < 0)
        hf_cfg_error(c, "layer_scale_init_value", "%g: 0 (no layer scale) or more expected", v->ls);
    v->dp = hf_cfg_num(c, "drop_path_rate", 0);
    if (!(v->dp >= 0 && v->dp < 1))
        hf_cfg_error(c, "drop_path_rate", "%g: a probability in [0, 1) expected", v->dp);
    v->gelu_tanh = !strcmp(hf_gelu_approximate(c, "hidden_act", "gelu"), "tanh");
    if (labels)
        hf_labels_arg(c, labels, &v->img);
    else
        hf_image_labels(c, &v->img);
    for (int k = 0; backbone_keys[k]; k++)
        hf_cfg_get(c, backbone_keys[k]);
    const char *rest = hf_cfg_rest(c, hf_pretrained_keys);
    if (rest)
        hf_cfg_error(c, rest, "a key trainc does not know for %s: it cannot tell whether the "
                     "model computes what trainc would", model_type(v));
}

/* ConvNeXt's channels-first layernorm as three layers into LS: tokens, layernorm NAME
 * (eps 1e-6, as ConvNextLayerNorm's), untokens of height H */
static void channels_norm(cJSON *ls, const char *name, int64_t h)
{
    hf_layer(ls, "tokens", NULL);
    cJSON_AddNumberToObject(hf_layer(ls, "layernorm", name), "eps", 1e-6);
    cJSON_AddNumberToObject(hf_layer(ls, "untokens", NULL), "height", (double)h);
}

/* Block k of n's stochastic depth: transformers' linspace(0, drop_path_rate, n)[k] */
static double block_rate(const Cnx *v, int64_t k)
{
    int64_t n = 0;
    for (int s = 0; s < v->n; s++)
        n += v->depth[s];
    return n > 1 ? v->dp * (double)k / (double)(n - 1) : 0;
}

/* Stage s's first block's number among all */
static int64_t first_block(const Cnx *v, int s)
{
    int64_t k = 0;
    for (int t = 0; t < s; t++)
        k += v->depth[t];
    return k;
}

/* Stage s's blocks as a repeat into LS (the residual's drop_path rising as ConvNeXt's) */
static void spec_blocks(const Cnx *v, cJSON *ls, int s)
{
    int64_t W = v->width[s];
    cJSON *rep = hf_layer(ls, "repeat", xasprintf("stage%d", s));
    cJSON_AddNumberToObject(rep, "count", (double)v->depth[s]);
    cJSON *body = cJSON_AddArrayToObject(rep, "body");
    cJSON *r = hf_layer(body, "residual", NULL);
    int64_t k = first_block(v, s);
    if (v->dp > 0) {
        cJSON *dp = cJSON_AddArrayToObject(r, "drop_path");
        cJSON_AddItemToArray(dp, hf_float(block_rate(v, k)));
        cJSON_AddItemToArray(dp, hf_float(block_rate(v, k + v->depth[s] - 1)));
    }
    cJSON *b = cJSON_AddArrayToObject(r, "body");
    cJSON *dw = hf_layer(b, "conv2d", v->dwconv);
    cJSON_AddNumberToObject(dw, "out", (double)W);
    cJSON_AddNumberToObject(dw, "kernel", 7);
    cJSON_AddNumberToObject(dw, "padding", 3);
    cJSON_AddNumberToObject(dw, "groups", (double)W);
    hf_layer(b, "tokens", NULL);
    cJSON_AddNumberToObject(hf_layer(b, "layernorm", v->bnorm), "eps", 1e-6);
    cJSON_AddNumberToObject(hf_layer(b, "linear", v->fc1), "out", (double)(4 * W));
    cJSON *g = hf_layer(b, "gelu", NULL);
    if (v->gelu_tanh)
        cJSON_AddStringToObject(g, "approximate", "tanh");
    if (v->v2)
        hf_layer(b, "grn", v->grn);
    cJSON_AddNumberToObject(hf_layer(b, "linear", v->fc2), "out", (double)W);
    if (v->ls)
        cJSON_AddNumberToObject(hf_layer(b, "layer_scale", v->scale), "init_value", v->ls);
    cJSON_AddNumberToObject(hf_layer(b, "untokens", NULL), "height", (double)stage_side(v, s));
}

static cJSON *cnx_spec(const Cnx *v, const char *name)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "trainc", 1);
    cJSON *m = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(m, "name", name);
    hf_image_inputs(m, &v->img);
    cJSON *ls = cJSON_AddArrayToObject(m, "layers");
    cJSON *p = hf_layer(ls, "conv2d", v->stem);
    cJSON_AddNumberToObject(p, "out", (double)v->width[0]);
    cJSON_AddNumberToObject(p, "kernel", (double)v->P);
    cJSON_AddNumberToObject(p, "stride", (double)v->P);
    channels_norm(ls, v->stem_norm, stage_side(v, 0));
    for (int s = 0; s < v->n; s++) {
        if (s) {
            channels_norm(ls, v->down_norm[s], stage_side(v, s - 1));
            cJSON *d = hf_layer(ls, "conv2d", v->down[s]);
            cJSON_AddNumberToObject(d, "out", (double)v->width[s]);
            cJSON_AddNumberToObject(d, "kernel", 2);
            cJSON_AddNumberToObject(d, "stride", 2);
        }
        spec_blocks(v, ls, s);
    }
    /* transformers' last_hidden_state.mean([-2, -1]), then its layernorm */
    hf_layer(ls, "tokens", NULL);
    hf_layer(ls, "token_mean", NULL);
    cJSON_AddNumberToObject(hf_layer(ls, "layernorm", v->norm), "eps", v->eps);
    cJSON_AddNumberToObject(hf_layer(ls, "linear", v->head), "out", (double)v->img.K);
    hf_image_loss(m);
    return root;
}

int hf_convnext_import(HfCfg *cfg, const char *dir, const char *out, const char *name, int64_t S,
                       const char *labels, int v2)
{
    Cnx v = {.v2 = v2};
    cnx_config(cfg, &v, labels, S);
    default_names(&v);
    int pre = hf_image_pixels(dir, &v.img);
    HfJoinImport im = {.dir = dir};
    hf_weights_dir(&im.w, dir);
    char *pfx = xasprintf("%s.", model_type(&v));
    v.prefix = hf_find(&im.w, xasprintf("%sembeddings.patch_embeddings.weight", pfx)) ? pfx : "";
    v.fresh_head = v.base || labels;
    cnx_walk(&v, hf_join_plan_import, &im);
    int left = v.fresh_head ? hf_join_leave_out(&im.w, "classifier.", 0) : 0;
    hf_join_all_used(&im.w, dir, cls_arch(&v));
    char *text = hf_json_text(cnx_spec(&v, name));
    hf_image_write_import(&im, text, hf_image_train("{\"type\": \"adamw\", \"lr\": 1e-4, "
                                                    "\"weight_decay\": 0.05}", 0), out);
    printf("trainc: import: %s (%s, %d stages, %d tensors; %lldx%lld images, the pixels "
           "scaled and shifted%s as %s%s) -> %s/model.json, %s/train.json, %s/init.safetensors\n",
           dir, model_type(&v), v.n, im.out.n, (long long)v.img.S, (long long)v.img.S,
           v.img.ch_scale ? " by channel" : "", pre ? "preprocessor_config.json says"
           : "ConvNextImageProcessor's defaults say (the folder has no preprocessor_config.json)",
           v.fresh_head ? hf_image_new_head_said(&v.img, im.n_fresh, v.std, left) : "",
           out, out, out);
    hf_image_keep_processor(dir, &v.img, out);
    return 0;
}

/* ---- export -------------------------------------------------------------------- */

/* Whether the spec has an untokens layer (a ConvNeXt's channels-first layers) */
int hf_convnext_spec(const Spec *s)
{
    for (int i = 0; i < s->n_layers; i++)
        if (s->layers[i]->op == OP_UNTOKENS)
            return 1;
    return 0;
}

static const HfLayout cnx_layout = {
    "ConvNextForImageClassification (or V2's)",
    "conv2d (kernel = stride, no padding), tokens, layernorm, untokens; for each stage after "
    "the first tokens, layernorm, untokens, conv2d (kernel 2, stride 2); each stage a repeat "
    "of residual [conv2d (7x7, padding 3, depthwise), tokens, layernorm, linear (4 C), gelu, "
    "linear (C), layer_scale, untokens] (ConvNeXt V2's: grn after the gelu, no layer_scale); "
    "then tokens, token_mean, layernorm, linear"};

/* The spec's layers, read in order: at the top level, or in a block's body */
typedef struct Walk {
    const Spec *s;
    Layer **ls;
    int n, k;
    const char *at;
} Walk;

/* The next layer, which must be op OP */
static const Layer *next(Walk *w, int op)
{
    const Layer *l = w->k < w->n ? w->ls[w->k] : NULL;
    hf_want(w->s, &cnx_layout, l, w->at, op);
    w->k++;
    return l;
}

/* a layernorm of ConvNextLayerNorm's eps 1e-6 with weight and bias */
static const Layer *norm6(Walk *w)
{
    double eps = 1e-6;
    const Layer *l = w->k < w->n ? w->ls[w->k] : NULL;
    hf_match_norm(w->s, &cnx_layout, l, w->at, &eps);
    w->k++;
    return l;
}

/* tokens, layernorm (its name, with the prefix), untokens of height H */
static char *match_channels_norm(Walk *w, int64_t h, const char *prefix)
{
    next(w, OP_TOKENS);
    int idx = w->k;
    char *name = hf_layer_name(norm6(w), idx, prefix);
    const Layer *u = next(w, OP_UNTOKENS);
    if (u->height != h)
        hf_refuse(w->s, &cnx_layout, u, "an untokens of another height than the map's");
    return name;
}

/* a conv2d of OUT channels, kernel K, stride S, padding P, groups G (0: any), a bias */
static const Layer *match_conv(Walk *w, int64_t out, int64_t k, int64_t s, int64_t p, int64_t g)
{
    const Layer *c = next(w, OP_CONV2D);
    if ((out && c->out != out) || c->kernel != k || c->stride != s || c->padding != p ||
        c->groups != (g ? g : 1) || !c->bias)
        hf_refuse(w->s, &cnx_layout, c, xasprintf("a conv2d other than ConvNeXt's (%lld "
                  "channels, kernel %lld, stride %lld, padding %lld, groups %lld, a bias)",
                  (long long)(out ? out : c->out), (long long)k, (long long)s, (long long)p,
                  (long long)(g ? g : 1)));
    return c;
}

/* A block's layer_scale (V1's, one init_value for all; *ls -1 before the first block,
 * then that value or 0: none) */
static void match_scale(Walk *b, const Layer *r, double *ls)
{
    const Layer *l = b->k < b->n && b->ls[b->k]->op == OP_LAYER_SCALE ? b->ls[b->k++] : NULL;
    if (l && *ls >= 0 && l->init_value != *ls)
        hf_refuse(b->s, &cnx_layout, l, "a layer_scale's init_value other than the first's (the "
                  "config has one layer_scale_init_value)");
    if (l && l->init_value <= 0)
        hf_refuse(b->s, &cnx_layout, l, "a layer_scale's init_value of 0 or less "
                  "(layer_scale_init_value 0 means none)");
    if (!l && *ls > 0)
        hf_refuse(b->s, &cnx_layout, r, "a block without layer_scale where the first had one");
    *ls = l ? l->init_value : 0;
}

/* Block r's layers in order (V1's, or V2's with grn: the first block says which); its
 * names into v */
static void match_block(const Spec *s, const Layer *r, Cnx *v, int si, double *ls)
{
    int64_t W = v->width[si];
    hf_want(s, &cnx_layout, r, r->path, OP_RESIDUAL);
    if (r->n_shortcut)
        hf_refuse(s, &cnx_layout, r, "a residual with a shortcut");
    char *a = r->name ? xasprintf("%s.", r->name) : "";
    Walk b = {s, r->body, r->n_body, 0, xasprintf("%s.body", r->path)};
    v->dwconv = hf_layer_name(match_conv(&b, W, 7, 1, 3, W), 0, a);
    next(&b, OP_TOKENS);
    v->bnorm = hf_layer_name(norm6(&b), 2, a);
    hf_match_linear(s, &cnx_layout, b.k < b.n ? b.ls[b.k] : NULL, b.at, 4 * W);
    v->fc1 = hf_layer_name(b.ls[b.k++], 3, a);
    const Layer *g = next(&b, OP_GELU);
    if (si && g->gelu_tanh != v->gelu_tanh)
        hf_refuse(s, &cnx_layout, g, "a gelu other than the first block's (the config has one "
                  "hidden_act)");
    v->gelu_tanh = g->gelu_tanh;
    int grn = b.k < b.n && b.ls[b.k]->op == OP_GRN;
    if (si && grn != v->v2)
        hf_refuse(s, &cnx_layout, b.ls[b.k], grn ? "a grn where the first block had none"
                                                 : "a block without grn where the first had one");
    v->v2 = grn;
    if (grn)
        v->grn = hf_layer_name(b.ls[b.k], b.k, a), b.k++;
    hf_match_linear(s, &cnx_layout, b.k < b.n ? b.ls[b.k] : NULL, b.at, W);
    v->fc2 = hf_layer_name(b.ls[b.k], b.k, a), b.k++;
    int at = b.k;
    match_scale(&b, r, ls);
    if (*ls && v->v2)
        hf_refuse(s, &cnx_layout, b.ls[at], "a layer_scale with grn (ConvNeXt V2 has none)");
    v->scale = *ls ? hf_layer_name(b.ls[at], at, a) : NULL;
    const Layer *u = next(&b, OP_UNTOKENS);
    if (u->height != stage_side(v, si))
        hf_refuse(s, &cnx_layout, u, "an untokens of another height than the map's");
    if (b.k < b.n)
        hf_refuse(s, &cnx_layout, b.ls[b.k], "a layer after the block's untokens");
}

/* The blocks' drop_path as transformers' linspace(0, drop_path_rate, blocks): the last
 * block's rate the config's, every other's as the linspace puts it (within 1e-6) */
static void match_drop_paths(Walk *w, Cnx *v)
{
    const Layer *last = v->blocks_rep[v->n - 1]->body[0];
    int64_t n = first_block(v, v->n - 1) + v->depth[v->n - 1];
    v->dp = last->drop_path_ramp || n == 1 ? last->drop_path_end : last->drop_path;
    for (int s = 0; s < v->n; s++) {
        const Layer *r = v->blocks_rep[s]->body[0];
        int64_t k = first_block(v, s), e = k + v->depth[s] - 1;
        double first = r->drop_path, end = r->drop_path_ramp ? r->drop_path_end : r->drop_path;
        if (fabs(first - block_rate(v, k)) > 1e-6 || fabs(end - block_rate(v, e)) > 1e-6)
            hf_refuse(w->s, &cnx_layout, r, "a drop_path other than ConvNeXt's, from 0 at the "
                      "first block rising evenly to drop_path_rate at the last");
    }
}

/* Stage s's repeat of blocks */
static void match_blocks(Walk *w, Cnx *v, int s, double *ls)
{
    const Layer *rep = next(w, OP_REPEAT);
    if (rep->n_body != 1)
        hf_refuse(w->s, &cnx_layout, rep, "a repeat of other than one residual");
    v->depth[s] = rep->count;
    v->blocks_rep[s] = rep;
    v->blocks[s] = rep->name ? xasprintf("%s.%%lld.", rep->name) : "%lld.";
    match_block(w->s, rep->body[0], v, s, ls);
}

/* Every stage after the stem; the widths from the convs */
static void match_stages(Walk *w, Cnx *v)
{
    double ls = -1;
    for (int s = 0; w->k < w->n && (!s || (w->ls[w->k]->op == OP_TOKENS && w->k + 3 < w->n &&
                                      w->ls[w->k + 3]->op == OP_CONV2D)); s++) {
        if (s == CNX_MAX_STAGES)
            hf_refuse(w->s, &cnx_layout, w->ls[w->k], "a stage past the 16th");
        if (s) {
            v->down_norm[s] = match_channels_norm(w, stage_side(v, s - 1), "");
            int idx = w->k;
            const Layer *c = match_conv(w, 0, 2, 2, 0, 1);
            v->width[s] = c->out;
            v->down[s] = hf_layer_name(c, idx, "");
        }
        match_blocks(w, v, s, &ls);
        v->n = s + 1;
    }
    v->ls = ls;
    match_drop_paths(w, v);
}

/* The spec's layers as a ConvNeXt, or exit 1 naming the first that is not */
static void cnx_match(const Spec *s, Cnx *v)
{
    v->width = xcalloc(CNX_MAX_STAGES, sizeof *v->width);
    v->depth = xcalloc(CNX_MAX_STAGES, sizeof *v->depth);
    Walk w = {s, s->layers, s->n_layers, 0, "$.model.layers"};
    const Layer *c = next(&w, OP_CONV2D);
    if (c->stride != c->kernel || c->padding || c->groups != 1 || !c->bias)
        hf_refuse(s, &cnx_layout, c,
                  "a conv2d other than patches (stride = kernel, no padding, groups 1, a bias)");
    v->width[0] = c->out, v->P = c->kernel;
    hf_image_from_spec(s, c, "ConvNextForImageClassification", &v->img);   /* (V2's alike) */
    v->stem = hf_layer_name(c, 0, "");
    v->stem_norm = match_channels_norm(&w, stage_side(v, 0), "");
    match_stages(&w, v);
    v->prefix = v->v2 ? "convnextv2." : "convnext.";
    next(&w, OP_TOKENS);
    next(&w, OP_TOKEN_MEAN);
    int idx = w.k;
    v->eps = 0;
    hf_match_norm(s, &cnx_layout, w.k < w.n ? w.ls[w.k] : NULL, w.at, &v->eps);
    v->norm = hf_layer_name(w.ls[w.k++], idx, "");
    idx = w.k;
    v->img.K = hf_match_linear(s, &cnx_layout, w.k < w.n ? w.ls[w.k] : NULL, w.at, 0);
    v->head = hf_layer_name(w.ls[w.k++], idx, "");
    hf_image_labels_from_spec(s, &v->img);
    if (w.k < w.n)
        hf_refuse(s, &cnx_layout, w.ls[w.k], "a layer after the classifier");
    if (s->loss != RT_LOSS_CROSS_ENTROPY)
        error_at(s->model_file, "$.model.loss", "%s's loss is cross entropy", cls_arch(v));
}

static cJSON *cnx_hf_config(const Cnx *v)
{
    cJSON *c = cJSON_CreateObject();
    cJSON *ar = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(ar, cJSON_CreateString(cls_arch(v)));
    cJSON_AddStringToObject(c, "model_type", model_type(v));
    cJSON_AddNumberToObject(c, "num_channels", (double)v->img.C);
    cJSON_AddNumberToObject(c, "patch_size", (double)v->P);
    cJSON_AddNumberToObject(c, "num_stages", v->n);
    int w[CNX_MAX_STAGES], d[CNX_MAX_STAGES];
    for (int s = 0; s < v->n; s++)
        w[s] = (int)v->width[s], d[s] = (int)v->depth[s];
    cJSON_AddItemToObject(c, "hidden_sizes", cJSON_CreateIntArray(w, v->n));
    cJSON_AddItemToObject(c, "depths", cJSON_CreateIntArray(d, v->n));
    cJSON_AddStringToObject(c, "hidden_act", v->gelu_tanh ? "gelu_pytorch_tanh" : "gelu");
    cJSON_AddItemToObject(c, "initializer_range", hf_float(0.02));
    cJSON_AddItemToObject(c, "layer_norm_eps", hf_float(v->eps));
    if (!v->v2)
        cJSON_AddItemToObject(c, "layer_scale_init_value", hf_float(v->ls));
    cJSON_AddItemToObject(c, "drop_path_rate", hf_float(v->dp));
    cJSON_AddNumberToObject(c, "image_size", (double)v->img.S);
    hf_image_config_labels(c, &v->img);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    return c;
}

int hf_convnext_export(const Spec *s, const char *weights, const char *out)
{
    Cnx v = {0};
    cnx_match(s, &v);
    HfJoinExport e = {0};
    hf_join_export_open(&e, s, weights);
    cnx_walk(&v, hf_join_plan_export, &e);
    hf_join_export_adapters(&e);
    hf_image_write_export(&e, &v.img, cnx_hf_config(&v), model_type(&v), weights, s->model_file, out);
    return 0;
}
