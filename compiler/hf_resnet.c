/* hf_resnet.c: `trainc import hf` of Hugging Face's ResNetForImageClassification
 * (microsoft/resnet-18 to -152: config.json, preprocessor_config.json where there is
 * one, the weights) as a model spec of trainc's layers and its weights, the batchnorms'
 * running statistics among them: the stem (a 7x7 conv2d of stride 2, a batchnorm, relu,
 * a 3x3 max pool of stride 2 padded by 1), each stage's residual layers (basic: two 3x3
 * convs; bottleneck: 1x1, 3x3, 1x1 at a quarter of the width; each conv followed by a
 * batchnorm, a projection shortcut where the channels or the stride change, relu after
 * the sum), the average over the last feature map and the classifier. The image's side
 * is --image-size (224: transformers' ResNet takes any). One table (resnet_walk) pairs
 * each of trainc's tensors with the transformers tensor it is. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cmd.h"
#include "hf.h"
#include "ops/op.h"

typedef struct Res {
    HfImage img;
    int64_t E;                 /* embedding_size: the stem's channels */
    int n;                     /* stages */
    int64_t *width, *depth;    /* hidden_sizes, depths */
    int bottleneck;            /* layer_type "bottleneck", else "basic" */
    int down_first;            /* downsample_in_first_stage: stage 0's first layer strides 2 */
    int down_in_1x1;           /* downsample_in_bottleneck: a bottleneck strides in its 1x1 */
} Res;

/* What a tensor is: a parameter (fp32), a batchnorm's running statistic (fp32 state) or
 * its count of batches (an int64 state) */
enum { RES_PARAM, RES_STATE, RES_COUNT };
typedef void (*res_visit)(void *ctx, char *ours, char *theirs, int rank, const int64_t *shape,
                          int kind);

/* trainc's conv2d OURS (weight [out, in, k, k]) and batchnorm NORM, transformers'
 * THEIRS.convolution and THEIRS.normalization */
static void conv_norm(res_visit fn, void *ctx, const char *ours, const char *norm,
                      const char *theirs, int64_t out, int64_t in, int64_t k)
{
    fn(ctx, xasprintf("%s.weight", ours), xasprintf("%s.convolution.weight", theirs), 4,
       (int64_t[]){out, in, k, k}, RES_PARAM);
    static const char *const what[] = {"weight", "bias", "running_mean", "running_var",
                                       "num_batches_tracked"};
    for (int k = 0; k < 5; k++)
        fn(ctx, xasprintf("%s.%s", norm, what[k]), xasprintf("%s.normalization.%s", theirs, what[k]),
           k < 4, &out, k < 2 ? RES_PARAM : k < 4 ? RES_STATE : RES_COUNT);
}

/* The stride of stage s's first layer */
static int64_t stage_stride(const Res *r, int s) { return s || r->down_first ? 2 : 1; }

/* Layer j of stage s, from IN channels: its body's convs, then its shortcut's */
static void res_layer(const Res *r, int s, int64_t j, int64_t in, res_visit fn, void *ctx)
{
    int64_t out = r->width[s], mid = r->bottleneck ? out / 4 : out;
    int64_t st = j ? 1 : stage_stride(r, s);
    char *ours = xasprintf("stage%d_%lld", s, (long long)j);
    char *th = xasprintf("resnet.encoder.stages.%d.layers.%lld", s, (long long)j);
    int64_t ks[3] = {1, 3, 1}, ins[3] = {in, mid, mid}, outs[3] = {mid, mid, out};
    if (!r->bottleneck) {
        ks[0] = ks[1] = 3;
        ins[1] = mid;
        outs[1] = out;
    }
    for (int c = 0; c < (r->bottleneck ? 3 : 2); c++)
        conv_norm(fn, ctx, xasprintf("%s.conv%d", ours, c + 1), xasprintf("%s.norm%d", ours, c + 1),
                  xasprintf("%s.layer.%d", th, c), outs[c], ins[c], ks[c]);
    if (in != out || st != 1)
        conv_norm(fn, ctx, xasprintf("%s.shortcut.conv", ours), xasprintf("%s.shortcut.norm", ours),
                  xasprintf("%s.shortcut", th), out, in, 1);
}

/* Every tensor, in trainc's order */
static void resnet_walk(const Res *r, res_visit fn, void *ctx)
{
    conv_norm(fn, ctx, "embedder", "embedder_norm", "resnet.embedder.embedder", r->E, r->img.C, 7);
    int64_t in = r->E;
    for (int s = 0; s < r->n; s++)
        for (int64_t j = 0; j < r->depth[s]; j++) {
            res_layer(r, s, j, in, fn, ctx);
            in = r->width[s];
        }
    fn(ctx, xstrdup("classifier.weight"), xstrdup("classifier.1.weight"), 2,
       (int64_t[]){r->img.K, in}, RES_PARAM);
    fn(ctx, xstrdup("classifier.bias"), xstrdup("classifier.1.bias"), 1, &r->img.K, RES_PARAM);
}

/* ---- config ------------------------------------------------------------------- */

/* A config key's list of positive integers (n of them; n 0: any, set) */
static int64_t *int_list(HfCfg *c, const char *key, int *n)
{
    const cJSON *a = hf_cfg_get(c, key);
    if (!cJSON_IsArray(a) || !cJSON_GetArraySize(a) || (*n && cJSON_GetArraySize(a) != *n))
        hf_cfg_error(c, key, "a list of %s positive integers expected", *n ? "as many" : "some");
    *n = cJSON_GetArraySize(a);
    int64_t *v = xcalloc((size_t)*n, sizeof *v);
    int k = 0;
    for (const cJSON *e = a->child; e; e = e->next, k++) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 1 || e->valuedouble > 1 << 20 ||
            e->valuedouble != (double)(int64_t)e->valuedouble)
            hf_cfg_error(c, key, "a list of positive integers expected");
        v[k] = (int64_t)e->valuedouble;
    }
    return v;
}

/* ResNetConfig's keys of a backbone's outputs, which the classifier does not read */
static const char *const backbone_keys[] = {"stage_names", "out_features", "out_indices", NULL};

static void resnet_config(HfCfg *c, Res *r)
{
    const cJSON *ar = hf_cfg_get(c, "architectures");
    for (const cJSON *e = ar ? ar->child : NULL; e; e = e->next)
        if (!cJSON_IsString(e) || strcmp(e->valuestring, "ResNetForImageClassification"))
            hf_cfg_error(c, "architectures", "%s: trainc imports a ResNet with its classifier "
                         "(ResNetForImageClassification)", cJSON_IsString(e) ? e->valuestring : "an entry");
    r->img.C = hf_cfg_int(c, "num_channels", 3);
    r->E = hf_cfg_int(c, "embedding_size", 64);
    r->n = 0;
    r->width = int_list(c, "hidden_sizes", &r->n);
    r->depth = int_list(c, "depths", &r->n);
    const char *type = hf_cfg_str(c, "layer_type", "bottleneck");
    if (strcmp(type, "bottleneck") && strcmp(type, "basic"))
        hf_cfg_error(c, "layer_type", "\"%s\": basic or bottleneck expected", type);
    r->bottleneck = !strcmp(type, "bottleneck");
    for (int s = 0; r->bottleneck && s < r->n; s++)
        if (r->width[s] % 4)
            hf_cfg_error(c, "hidden_sizes", "%lld: a bottleneck's width is a quarter of its "
                         "stage's, which 4 must divide", (long long)r->width[s]);
    const char *act = hf_cfg_str(c, "hidden_act", "relu");
    if (strcmp(act, "relu"))
        hf_cfg_error(c, "hidden_act", "\"%s\": trainc imports a ResNet of relu", act);
    r->down_first = hf_cfg_bool(c, "downsample_in_first_stage", 0);
    r->down_in_1x1 = hf_cfg_bool(c, "downsample_in_bottleneck", 0);
    hf_image_labels(c, &r->img);
    for (int k = 0; backbone_keys[k]; k++)
        hf_cfg_get(c, backbone_keys[k]);
    const char *rest = hf_cfg_rest(c, hf_pretrained_keys);
    if (rest)
        hf_cfg_error(c, rest, "a key trainc does not know for resnet: it cannot tell whether the "
                     "model computes what trainc would");
}

/* ---- the spec ------------------------------------------------------------------- */

static cJSON *conv(cJSON *list, const char *name, int64_t out, int64_t k, int64_t stride)
{
    cJSON *l = hf_layer(list, "conv2d", name);
    cJSON_AddNumberToObject(l, "out", (double)out);
    cJSON_AddNumberToObject(l, "kernel", (double)k);
    if (stride != 1)
        cJSON_AddNumberToObject(l, "stride", (double)stride);
    if (k / 2)
        cJSON_AddNumberToObject(l, "padding", (double)(k / 2));
    cJSON_AddFalseToObject(l, "bias");
    return l;
}

/* The side of the feature map a conv or pool (k, stride, padding) makes of one of side h */
static int64_t side(int64_t h, int64_t k, int64_t s, int64_t p) { return (h + 2 * p - k) / s + 1; }

/* Stage s's layer j as a residual (then relu) into ls; h: the side before it, after */
static void spec_layer(const Res *r, cJSON *ls, int s, int64_t j, int64_t in, int64_t *h)
{
    int64_t out = r->width[s], mid = r->bottleneck ? out / 4 : out;
    int64_t st = j ? 1 : stage_stride(r, s);
    cJSON *res = hf_layer(ls, "residual", xasprintf("stage%d_%lld", s, (long long)j));
    cJSON *b = cJSON_AddArrayToObject(res, "body");
    if (r->bottleneck) {
        conv(b, "conv1", mid, 1, r->down_in_1x1 ? st : 1);
        hf_layer(b, "batchnorm", "norm1");
        hf_layer(b, "relu", NULL);
        conv(b, "conv2", mid, 3, r->down_in_1x1 ? 1 : st);
        hf_layer(b, "batchnorm", "norm2");
        hf_layer(b, "relu", NULL);
        conv(b, "conv3", out, 1, 1);
        hf_layer(b, "batchnorm", "norm3");
    } else {
        conv(b, "conv1", out, 3, st);
        hf_layer(b, "batchnorm", "norm1");
        hf_layer(b, "relu", NULL);
        conv(b, "conv2", out, 3, 1);
        hf_layer(b, "batchnorm", "norm2");
    }
    if (in != out || st != 1) {
        cJSON *sc = cJSON_AddArrayToObject(res, "shortcut");
        conv(sc, "conv", out, 1, st);
        hf_layer(sc, "batchnorm", "norm");
    }
    hf_layer(ls, "relu", NULL);
    *h = side(*h, 1, st, 0);
}

static cJSON *resnet_spec(const Res *r, const char *name)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "trainc", 1);
    cJSON *m = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(m, "name", name);
    hf_image_inputs(m, &r->img);
    cJSON *ls = cJSON_AddArrayToObject(m, "layers");
    conv(ls, "embedder", r->E, 7, 2);
    hf_layer(ls, "batchnorm", "embedder_norm");
    hf_layer(ls, "relu", NULL);
    cJSON *pool = hf_layer(ls, "maxpool2d", NULL);
    cJSON_AddNumberToObject(pool, "kernel", 3);
    cJSON_AddNumberToObject(pool, "stride", 2);
    cJSON_AddNumberToObject(pool, "padding", 1);
    int64_t h = side(side(r->img.S, 7, 2, 3), 3, 2, 1), in = r->E;   /* >= 1 for S >= 1 */
    for (int s = 0; s < r->n; s++)
        for (int64_t j = 0; j < r->depth[s]; j++) {
            spec_layer(r, ls, s, j, in, &h);
            in = r->width[s];
        }
    /* transformers' AdaptiveAvgPool2d((1, 1)): the mean over the last map */
    cJSON_AddNumberToObject(hf_layer(ls, "avgpool2d", NULL), "kernel", (double)h);
    hf_layer(ls, "flatten", NULL);
    cJSON_AddNumberToObject(hf_layer(ls, "linear", "classifier"), "out", (double)r->img.K);
    hf_image_loss(m);
    return root;
}


/* ---- the weights ---------------------------------------------------------------- */

typedef struct ResImp {
    const char *dir;
    HfWeights w;
    rt_param *p;               /* trainc's tensors: the parameters, then the state */
    const HfTensor **src;
    int n, n_params, cap;
} ResImp;

/* resnet_walk's visit: the checkpoint's tensor THEIRS taken for trainc's OURS */
static void plan(void *ctx, char *ours, char *theirs, int rank, const int64_t *shape, int kind)
{
    ResImp *im = ctx;
    HfTensor *t = hf_find(&im->w, theirs);
    if (!t)
        error_input("%s: no tensor '%s' in the weights (config.json's model needs it)", im->dir,
                    theirs);
    int ok = t->rank == rank && (kind == RES_COUNT) == !strcmp(t->dtype, "I64");
    for (int d = 0; ok && d < rank; d++)
        ok = t->shape[d] == shape[d];
    if (!ok)
        error_input("%s: tensor '%s' is %s %s, config.json's model needs %s %s", im->dir, theirs,
                    t->dtype, shape_str(t->rank, t->shape), kind == RES_COUNT ? "I64" : "a float",
                    shape_str(rank, shape));
    t->used = 1;
    if (im->n == im->cap) {
        im->cap = im->cap ? 2 * im->cap : 64;
        im->p = realloc(im->p, (size_t)im->cap * sizeof *im->p);
        im->src = realloc(im->src, (size_t)im->cap * sizeof *im->src);
        if (!im->p || !im->src)
            die("out of memory");
    }
    /* the parameters first: a state tensor waits at the end, a parameter goes before it */
    int at = kind == RES_PARAM ? im->n_params++ : im->n;
    memmove(im->p + at + 1, im->p + at, (size_t)(im->n - at) * sizeof *im->p);
    memmove(im->src + at + 1, im->src + at, (size_t)(im->n - at) * sizeof *im->src);
    rt_param *p = &im->p[at];
    memset(p, 0, sizeof *p);
    p->name = ours;
    p->rank = rank;
    p->numel = 1;
    for (int d = 0; d < rank; d++)
        p->numel *= (p->shape[d] = shape[d]);
    p->dtype = kind == RES_COUNT ? RT_I64 : kind == RES_STATE ? RT_F32 : 0;
    im->src[at] = t;
    im->n++;
    free(theirs);
}

/* An I64 count's value, as the state holds it: the int64 in two floats' bytes */
static void read_count(const ResImp *im, const HfTensor *t, float two[2])
{
    unsigned char le[8];
    if (pread(im->w.fds[t->file], le, 8, (off_t)t->at) != 8)
        error_input("%s: cannot read tensor '%s'", im->w.paths[t->file], t->name);
    int64_t v = 0;
    for (int b = 7; b >= 0; b--)
        v = v << 8 | le[b];
    memcpy(two, &v, 8);
}

static void write_import(const ResImp *im, const char *path)
{
    rt_model m = {0};
    m.n_params = im->n_params;
    m.params = im->p;
    m.n_state = im->n - im->n_params;
    m.state = im->p + im->n_params;
    rt_st_out *o = rt_st_open(path, &m);
    if (!o)
        cannot_write("import", path);
    for (int i = 0; i < im->n; i++) {
        if (im->p[i].dtype == RT_I64) {   /* rt_st_put writes the two floats' bytes */
            float two[2];
            read_count(im, im->src[i], two);
            rt_st_put(o, two, 2);
            continue;
        }
        float *x = hf_read(&im->w, im->src[i]);
        rt_st_put(o, x, im->p[i].numel);
        free(x);
    }
    if (rt_st_close(o) != 0)
        cannot_write("import", path);
}

int hf_resnet_import(HfCfg *cfg, const char *dir, const char *out, const char *name, int64_t S)
{
    Res r = {0};
    r.img.S = S ? S : 224;
    resnet_config(cfg, &r);
    int pre = hf_image_pixels(dir, &r.img);
    ResImp im = {.dir = dir};
    hf_weights_dir(&im.w, dir);
    resnet_walk(&r, plan, &im);
    for (int i = 0; i < im.w.n; i++)
        if (!im.w.t[i].used)
            error_input("%s: tensor '%s' (in %s) has no place in the ResNetForImageClassification "
                        "config.json describes", dir, im.w.t[i].name, im.w.paths[im.w.t[i].file]);
    char *text = hf_json_text(resnet_spec(&r, name));
    if (rt_mkdir_p(out) != 0)
        cannot_write("import", out);
    write_import(&im, xasprintf("%s/init.safetensors", out));
    hf_write_text("import", xasprintf("%s/model.json", out), text);
    hf_write_text("import", xasprintf("%s/train.json", out),
                  hf_image_train("{\"type\": \"sgd\", \"lr\": 0.01, \"momentum\": 0.9, "
                                 "\"nesterov\": true, \"weight_decay\": 1e-4}", 0));
    printf("trainc: import: %s (resnet, %d stages, %d tensors; %lldx%lld images, the pixels "
           "scaled and shifted%s as %s) -> %s/model.json, %s/train.json, %s/init.safetensors\n",
           dir, r.n, im.n, (long long)r.img.S, (long long)r.img.S, r.img.ch_scale ? " by channel" : "",
           pre ? "preprocessor_config.json says"
               : "ViTImageProcessor's defaults say (the folder has no preprocessor_config.json)",
           out, out, out);
    return 0;
}
