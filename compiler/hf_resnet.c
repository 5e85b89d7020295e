/* hf_resnet.c: Hugging Face's ResNetForImageClassification both ways: `trainc import hf`
 * (microsoft/resnet-18 to -152: config.json, preprocessor_config.json where there is
 * one, the weights) as a model spec of trainc's layers and its weights, the batchnorms'
 * running statistics among them: the stem (a 7x7 conv2d of stride 2, a batchnorm, relu,
 * a 3x3 max pool of stride 2 padded by 1), each stage's residual layers (basic: two 3x3
 * convs; bottleneck: 1x1, 3x3, 1x1 at a quarter of the width; each conv followed by a
 * batchnorm, a projection shortcut where the channels or the stride change, relu after
 * the sum), the average over the last feature map and the classifier. The image's side
 * is --image-size (224: transformers' ResNet takes any). `trainc export hf` finds that
 * layout in a spec (its stages where a residual strides or widens) and writes it back.
 * One table (resnet_walk) pairs each of trainc's tensors with the transformers tensor it
 * is, for both. */
#include <math.h>
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
    const char *prefix;        /* the tensors' ("resnet.", or "" for ResNetModel's) */
    int base, fresh_head;      /* import: ResNetModel's; the classifier drawn anew (--labels) */
    /* trainc's names (import: its own; export: the spec's): the stem's conv and norm, the
     * classifier, and each residual layer's, stage by stage */
    char *stem, *stem_norm, *head;
    struct ResNames {
        char *conv[3], *norm[3], *sc_conv, *sc_norm;
    } *names;
} Res;

/* What a tensor is: a parameter (fp32), a batchnorm's running statistic (fp32 state) or
 * its count of batches (an int64 state); a parameter none of theirs makes, drawn anew
 * (import: a new classifier, as torch's nn.Linear draws it) */
enum { RES_PARAM, RES_STATE, RES_COUNT, RES_FRESH };
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

/* Layer j of stage s (the i-th of the model), from IN channels: its body's convs, then
 * its shortcut's */
static void res_layer(const Res *r, int s, int64_t j, int64_t i, int64_t in, res_visit fn,
                      void *ctx)
{
    int64_t out = r->width[s], mid = r->bottleneck ? out / 4 : out;
    int64_t st = j ? 1 : stage_stride(r, s);
    const struct ResNames *nm = &r->names[i];
    char *th = xasprintf("%sencoder.stages.%d.layers.%lld", r->prefix, s, (long long)j);
    int64_t ks[3] = {1, 3, 1}, ins[3] = {in, mid, mid}, outs[3] = {mid, mid, out};
    if (!r->bottleneck) {
        ks[0] = ks[1] = 3;
        ins[1] = mid;
        outs[1] = out;
    }
    for (int c = 0; c < (r->bottleneck ? 3 : 2); c++)
        conv_norm(fn, ctx, nm->conv[c], nm->norm[c], xasprintf("%s.layer.%d", th, c), outs[c],
                  ins[c], ks[c]);
    if (in != out || st != 1)
        conv_norm(fn, ctx, nm->sc_conv, nm->sc_norm, xasprintf("%s.shortcut", th), out, in, 1);
}

/* Every tensor, in trainc's order */
static void resnet_walk(const Res *r, res_visit fn, void *ctx)
{
    conv_norm(fn, ctx, r->stem, r->stem_norm, xasprintf("%sembedder.embedder", r->prefix), r->E,
              r->img.C, 7);
    int64_t in = r->E, i = 0;
    for (int s = 0; s < r->n; s++)
        for (int64_t j = 0; j < r->depth[s]; j++, i++) {
            res_layer(r, s, j, i, in, fn, ctx);
            in = r->width[s];
        }
    int head = r->fresh_head ? RES_FRESH : RES_PARAM;
    fn(ctx, xasprintf("%s.weight", r->head), xstrdup("classifier.1.weight"), 2,
       (int64_t[]){r->img.K, in}, head);
    fn(ctx, xasprintf("%s.bias", r->head), xstrdup("classifier.1.bias"), 1, &r->img.K, head);
}

/* import's names: stage S's layer J the residual "stageS_J" (body conv1, norm1, ...;
 * shortcut conv, norm), the stem "embedder" and "embedder_norm", "classifier" */
static void default_names(Res *r)
{
    r->stem = "embedder", r->stem_norm = "embedder_norm", r->head = "classifier";
    int64_t total = 0;
    for (int s = 0; s < r->n; s++)
        total += r->depth[s];
    r->names = xcalloc((size_t)total, sizeof *r->names);
    for (int s = 0, i = 0; s < r->n; s++)
        for (int64_t j = 0; j < r->depth[s]; j++, i++) {
            char *p = xasprintf("stage%d_%lld", s, (long long)j);
            for (int c = 0; c < 3; c++) {
                r->names[i].conv[c] = xasprintf("%s.conv%d", p, c + 1);
                r->names[i].norm[c] = xasprintf("%s.norm%d", p, c + 1);
            }
            r->names[i].sc_conv = xasprintf("%s.shortcut.conv", p);
            r->names[i].sc_norm = xasprintf("%s.shortcut.norm", p);
        }
}

/* ---- config ------------------------------------------------------------------- */

/* ResNetConfig's keys of a backbone's outputs, which the classifier does not read */
static const char *const backbone_keys[] = {"stage_names", "out_features", "out_indices", NULL};

static void resnet_config(HfCfg *c, Res *r, const char *labels)
{
    r->base = hf_image_arch(c, labels, "ResNetForImageClassification", "ResNetModel", "ResNet");
    hf_cfg_classifier(c);
    r->img.C = hf_cfg_int(c, "num_channels", 3);
    r->E = hf_cfg_int(c, "embedding_size", 64);
    r->n = 0;
    r->width = hf_cfg_int_list(c, "hidden_sizes", &r->n);
    r->depth = hf_cfg_int_list(c, "depths", &r->n);
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
    if (labels)
        hf_labels_arg(c, labels, &r->img);
    else
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

/* A weights file being planned (import: trainc's tensors from transformers'; export:
 * transformers' from trainc's): the file read, the tensors written in order (the
 * parameters, then the state or buffers) and each one's source */
typedef struct ResImp {
    const char *dir;           /* what was read, for errors */
    HfWeights w;
    rt_param *p;
    const HfTensor **src;      /* NULL: drawn anew, uniform within fresh_bound */
    int n, n_params, cap;
    double fresh_bound;        /* 1 / sqrt(the new classifier's inputs) */
} ResImp;

/* NAME (rank, shape, kind) to be written from SRC: the parameters first, a state tensor
 * after them all */
static void add_tensor(ResImp *im, char *name, int rank, const int64_t *shape, int kind,
                       const HfTensor *src)
{
    if (im->n == im->cap) {
        im->cap = im->cap ? 2 * im->cap : 64;
        im->p = realloc(im->p, (size_t)im->cap * sizeof *im->p);
        im->src = realloc(im->src, (size_t)im->cap * sizeof *im->src);
        if (!im->p || !im->src)
            die("out of memory");
    }
    int at = kind == RES_PARAM ? im->n_params++ : im->n;
    memmove(im->p + at + 1, im->p + at, (size_t)(im->n - at) * sizeof *im->p);
    memmove(im->src + at + 1, im->src + at, (size_t)(im->n - at) * sizeof *im->src);
    rt_param *p = &im->p[at];
    memset(p, 0, sizeof *p);
    p->name = name;
    p->rank = rank;
    p->numel = 1;
    for (int d = 0; d < rank; d++)
        p->numel *= (p->shape[d] = shape[d]);
    p->dtype = kind == RES_COUNT ? RT_I64 : kind == RES_STATE ? RT_F32 : 0;
    im->src[at] = src;
    im->n++;
}

/* resnet_walk's visit: the checkpoint's tensor THEIRS taken for trainc's OURS */
static void plan(void *ctx, char *ours, char *theirs, int rank, const int64_t *shape, int kind)
{
    ResImp *im = ctx;
    if (kind == RES_FRESH) {   /* (the weight [K, in] comes first) */
        if (rank == 2)
            im->fresh_bound = 1 / sqrt((double)shape[1]);
        add_tensor(im, ours, rank, shape, RES_PARAM, NULL);
        free(theirs);
        return;
    }
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
    add_tensor(im, ours, rank, shape, kind, t);
    free(theirs);
}

/* An I64 count's value, as the state holds it: the int64 in two floats' bytes */
static void read_count(const ResImp *im, const HfTensor *t, float two[2])
{
    unsigned char le[8];
    if (pread(im->w.fds[t->file], le, 8, (off_t)t->at) != 8)
        error_input("%s: cannot read tensor '%s'", im->w.paths[t->file], t->name);
    uint64_t v = 0;   /* (any bits: the count's value as the file holds it) */
    for (int b = 7; b >= 0; b--)
        v = v << 8 | le[b];
    memcpy(two, &v, 8);
}

/* The tensors planned, written to PATH (for CMD's errors): the parameters, then the
 * state (running statistics; each count's int64) */
static void write_tensors(const ResImp *im, const char *path, const char *cmd)
{
    rt_rng rng;
    rt_rng_seed(&rng, HF_FRESH_SEED);
    rt_model m = {0};
    m.n_params = im->n_params;
    m.params = im->p;
    m.n_state = im->n - im->n_params;
    m.state = im->p + im->n_params;
    rt_st_out *o = rt_st_open(path, &m);
    if (!o)
        cannot_write(cmd, path);
    for (int i = 0; i < im->n; i++) {
        if (im->p[i].dtype == RT_I64) {   /* rt_st_put writes the two floats' bytes */
            float two[2];
            read_count(im, im->src[i], two);
            rt_st_put(o, two, 2);
            continue;
        }
        float *x = im->src[i] ? hf_read(&im->w, im->src[i])
                              : xcalloc((size_t)im->p[i].numel, sizeof *x);
        for (int64_t e = 0; !im->src[i] && e < im->p[i].numel; e++)   /* torch's nn.Linear */
            x[e] = (float)(im->fresh_bound * (2 * rt_rng_uniform(&rng) - 1));
        rt_st_put(o, x, im->p[i].numel);
        free(x);
    }
    if (rt_st_close(o) != 0)
        cannot_write(cmd, path);
}

int hf_resnet_import(HfCfg *cfg, const char *dir, const char *out, const char *name, int64_t S,
                     const char *labels)
{
    Res r = {0};
    r.img.S = S ? S : 224;
    resnet_config(cfg, &r, labels);
    default_names(&r);
    int pre = hf_image_pixels(dir, &r.img);
    ResImp im = {.dir = dir};
    hf_weights_dir(&im.w, dir);
    r.prefix = hf_find(&im.w, "resnet.embedder.embedder.convolution.weight") ? "resnet." : "";
    r.fresh_head = r.base || labels;
    resnet_walk(&r, plan, &im);
    int left = r.fresh_head ? hf_join_leave_out(&im.w, "classifier.", 0) : 0;
    hf_join_all_used(&im.w, dir, "ResNetForImageClassification");
    char *text = hf_json_text(resnet_spec(&r, name));
    if (rt_mkdir_p(out) != 0)
        cannot_write("import", out);
    write_tensors(&im, xasprintf("%s/init.safetensors", out), "import");
    hf_write_text("import", xasprintf("%s/model.json", out), text);
    hf_write_text("import", xasprintf("%s/train.json", out),
                  hf_image_train("{\"type\": \"sgd\", \"lr\": 0.01, \"momentum\": 0.9, "
                                 "\"nesterov\": true, \"weight_decay\": 1e-4}", 0));
    printf("trainc: import: %s (resnet, %d stages, %d tensors; %lldx%lld images, the pixels "
           "scaled and shifted%s as %s%s) -> %s/model.json, %s/train.json, %s/init.safetensors\n",
           dir, r.n, im.n, (long long)r.img.S, (long long)r.img.S, r.img.ch_scale ? " by channel" : "",
           pre ? "preprocessor_config.json says"
               : "ViTImageProcessor's defaults say (the folder has no preprocessor_config.json)",
           r.fresh_head ? xasprintf("; a new classifier of %lld classes: 2 tensors drawn anew "
                                    "(uniform within 1/sqrt(%lld), seed %d), %d of the "
                                    "checkpoint's other tensors left out", (long long)r.img.K,
                                    (long long)r.width[r.n - 1], HF_FRESH_SEED, left) : "",
           out, out, out);
    hf_image_keep_processor(dir, &r.img, out);
    return 0;
}

/* ---- export --------------------------------------------------------------------- */

int hf_resnet_spec(const Spec *s)
{
    for (int i = 0; i < s->n_layers; i++)
        if (s->layers[i]->op == OP_RESIDUAL && s->layers[i]->n_body &&
            s->layers[i]->body[0]->op == OP_CONV2D)
            return 1;
    return 0;
}

static const char res_layout[] =
    "conv2d (7, stride 2, padding 3, no bias), batchnorm, relu, maxpool2d (3, stride 2, "
    "padding 1), residuals each followed by relu (basic: conv2d 3x3, batchnorm, relu, conv2d "
    "3x3, batchnorm; bottleneck: 1x1, 3x3, 1x1 at a quarter of the width; a shortcut of a 1x1 "
    "conv2d and a batchnorm where the channels or the stride change), avgpool2d over the last "
    "map, flatten, linear";

_Noreturn static void refuse(const Spec *s, const Layer *l, const char *at, const char *what)
{
    error_at(s->model_file, l ? l->path : at, "%s where export hf's ResNetForImageClassification "
             "has its layers: %s", what, res_layout);
}

static const Layer *want(const Spec *s, const Layer *l, const char *at, int op)
{
    if (!l || l->op != op)
        refuse(s, l, at, xasprintf("%s, not %s,", l ? op_info[l->op].name : "nothing",
                                   op_info[op].name));
    return l;
}

/* a conv2d of kernel k without bias (its stride returned), padding k / 2 */
static int64_t res_conv(const Spec *s, const Layer *l, const char *at, int64_t k)
{
    want(s, l, at, OP_CONV2D);
    if (l->kernel != k || l->padding != k / 2 || l->groups != 1 || l->bias)
        refuse(s, l, at, xasprintf("a conv2d other than %lldx%lld, padding %lld, no bias,",
                                   (long long)k, (long long)k, (long long)(k / 2)));
    return l->stride ? l->stride : 1;
}

/* a batchnorm as transformers' BatchNorm2d has it (eps 1e-5, momentum 0.1, affine) */
static void res_norm(const Spec *s, const Layer *l, const char *at)
{
    want(s, l, at, OP_BATCHNORM);
    if (l->eps != 1e-5 || l->momentum != 0.1 || !l->affine)
        refuse(s, l, at, "a batchnorm other than eps 1e-5, momentum 0.1, affine,");
}

/* One residual layer: its kind (1 bottleneck), out channels, stride, where a bottleneck
 * strides (1: its 1x1), and its names, into *nm */
typedef struct ResSeen {
    int bottleneck, in_1x1, shortcut;
    int64_t out, stride;
} ResSeen;

static ResSeen res_residual(const Spec *s, const Layer *l, int idx, struct ResNames *nm)
{
    ResSeen v = {0};
    char *p = l->name ? xasprintf("%s.", hf_layer_name(l, idx, "")) : "";
    Layer **b = l->body;
    v.bottleneck = l->n_body == 8;
    if (l->n_body != 5 && l->n_body != 8)
        refuse(s, l, l->path, "a residual of other than 5 or 8 layers");
    int convs = v.bottleneck ? 3 : 2;
    for (int c = 0; c < convs; c++) {
        int64_t k = v.bottleneck && c != 1 ? 1 : 3;
        int64_t st = res_conv(s, b[3 * c], l->path, k);
        res_norm(s, b[3 * c + 1], l->path);
        if (c + 1 < convs)
            want(s, b[3 * c + 2], l->path, OP_RELU);
        if (st != 1) {
            if (v.stride || c == convs - 1)
                refuse(s, b[3 * c], l->path, "a stride in another conv2d");
            v.stride = st;
            v.in_1x1 = c == 0;
        }
        nm->conv[c] = hf_layer_name(b[3 * c], 3 * c, p);
        nm->norm[c] = hf_layer_name(b[3 * c + 1], 3 * c + 1, p);
    }
    if (!v.stride)
        v.stride = 1;
    v.out = b[3 * (convs - 1)]->out;
    if (v.bottleneck && (b[0]->out != v.out / 4 || b[3]->out != v.out / 4 || v.out % 4))
        refuse(s, l, l->path, "a bottleneck other than a quarter of its width");
    v.shortcut = l->n_shortcut > 0;
    if (v.shortcut) {
        if (l->n_shortcut != 2 || res_conv(s, l->shortcut[0], l->path, 1) != v.stride)
            refuse(s, l, l->path, "a shortcut other than a 1x1 conv2d of the layer's stride and a "
                   "batchnorm");
        res_norm(s, l->shortcut[1], l->path);
        char *sc = xasprintf("%sshortcut.", p);
        nm->sc_conv = hf_layer_name(l->shortcut[0], 0, sc);
        nm->sc_norm = hf_layer_name(l->shortcut[1], 1, sc);
    }
    return v;
}

/* The residuals from layers[k], each followed by relu, into stages (a new one where the
 * stride is 2 or the width changes); returns the index after them */
static int res_stages(const Spec *s, int k, Res *r)
{
    r->width = xcalloc((size_t)s->n_layers, sizeof *r->width);
    r->depth = xcalloc((size_t)s->n_layers, sizeof *r->depth);
    r->names = xcalloc((size_t)s->n_layers, sizeof *r->names);
    int64_t in = r->E, i = 0;
    int strided = 0;
    r->n = 0;
    for (; k < s->n_layers && s->layers[k]->op == OP_RESIDUAL; k += 2, i++) {
        const Layer *l = s->layers[k];
        ResSeen v = res_residual(s, l, k, &r->names[i]);
        want(s, k + 1 < s->n_layers ? s->layers[k + 1] : NULL, l->path, OP_RELU);
        if (i == 0)
            r->bottleneck = v.bottleneck, r->down_first = v.stride == 2;
        if (v.bottleneck != r->bottleneck)
            refuse(s, l, l->path, "basic and bottleneck layers mixed");
        if (v.stride == 2 && v.bottleneck) {   /* all in the 1x1, or all in the 3x3 */
            if (strided++ && v.in_1x1 != r->down_in_1x1)
                refuse(s, l, l->path, "bottlenecks striding in different convs");
            r->down_in_1x1 = v.in_1x1;
        }
        int fresh = i == 0 || v.stride != 1 || v.out != r->width[r->n - 1];
        if (fresh && i && v.stride != 2)
            refuse(s, l, l->path, "a stage after the first that does not stride 2");
        if (v.stride > 2 || v.shortcut != (in != v.out || v.stride != 1))
            refuse(s, l, l->path, "a shortcut where the channels and stride stay (or none where "
                   "they change)");
        if (fresh)
            r->width[r->n++] = v.out;
        r->depth[r->n - 1]++;
        in = v.out;
    }
    if (!i)
        refuse(s, k < s->n_layers ? s->layers[k] : NULL, "$.model.layers", "no residual layer");
    return k;
}

static void res_match(const Spec *s, Res *r)
{
    r->prefix = "resnet.";
    const char *at = "$.model.layers";
    Layer **ls = s->layers;
    int n = s->n_layers;
    const Layer *c = want(s, n > 0 ? ls[0] : NULL, at, OP_CONV2D);
    if (res_conv(s, c, at, 7) != 2)
        refuse(s, c, at, "a stem of another stride than 2");
    r->E = c->out;
    hf_image_from_spec(s, c, "ResNetForImageClassification", &r->img);
    res_norm(s, n > 1 ? ls[1] : NULL, at);
    want(s, n > 2 ? ls[2] : NULL, at, OP_RELU);
    const Layer *mp = want(s, n > 3 ? ls[3] : NULL, at, OP_MAXPOOL2D);
    if (mp->kernel != 3 || mp->stride != 2 || mp->padding != 1)
        refuse(s, mp, at, "a max pool other than 3, stride 2, padding 1,");
    r->stem = hf_layer_name(ls[0], 0, ""), r->stem_norm = hf_layer_name(ls[1], 1, "");
    int k = res_stages(s, 4, r);
    int64_t h = side(side(r->img.S, 7, 2, 3), 3, 2, 1);
    for (int st = 0; st < r->n; st++)
        h = side(h, 1, st || r->down_first ? 2 : 1, 0);
    const Layer *ap = want(s, k < n ? ls[k] : NULL, at, OP_AVGPOOL2D);
    if (ap->kernel != h || (ap->stride && ap->stride != h))
        refuse(s, ap, at, xasprintf("an average pool other than over the whole %lldx%lld map,",
                                    (long long)h, (long long)h));
    want(s, k + 1 < n ? ls[k + 1] : NULL, at, OP_FLATTEN);
    const Layer *fc = want(s, k + 2 < n ? ls[k + 2] : NULL, at, OP_LINEAR);
    if (!fc->bias || fc->tie)
        refuse(s, fc, at, "a classifier without bias");
    if (k + 3 < n)
        refuse(s, ls[k + 3], at, "a layer after the classifier");
    if (s->loss != RT_LOSS_CROSS_ENTROPY)
        error_at(s->model_file, "$.model.loss", "ResNetForImageClassification's loss is cross entropy");
    r->img.K = fc->out;
    r->head = hf_layer_name(fc, k + 2, "");
    hf_image_labels_from_spec(s, &r->img);
}

/* resnet_walk's visit: trainc's tensor OURS, written as THEIRS */
static void plan_export(void *ctx, char *ours, char *theirs, int rank, const int64_t *shape,
                        int kind)
{
    ResImp *e = ctx;
    HfTensor *t = hf_find(&e->w, ours);
    int ok = t && t->rank == rank && (kind == RES_COUNT) == !strcmp(t->dtype, "I64");
    for (int d = 0; ok && d < rank; d++)
        ok = t->shape[d] == shape[d];
    if (!t)
        error_input("%s: no tensor '%s' (the spec's model has it)", e->w.paths[0], ours);
    if (!ok)
        error_input("%s: tensor '%s' is %s %s; the spec's model has %s %s", e->w.paths[0], ours,
                    t->dtype, shape_str(t->rank, t->shape), kind == RES_COUNT ? "I64" : "F32",
                    shape_str(rank, shape));
    t->used = 1;
    add_tensor(e, theirs, rank, shape, kind, t);
    free(ours);
}

static cJSON *resnet_hf_config(const Res *r)
{
    cJSON *c = cJSON_CreateObject();
    cJSON *ar = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(ar, cJSON_CreateString("ResNetForImageClassification"));
    cJSON_AddStringToObject(c, "model_type", "resnet");
    cJSON_AddNumberToObject(c, "num_channels", (double)r->img.C);
    cJSON_AddNumberToObject(c, "embedding_size", (double)r->E);
    cJSON *w = cJSON_AddArrayToObject(c, "hidden_sizes"), *d = cJSON_AddArrayToObject(c, "depths");
    for (int s = 0; s < r->n; s++) {
        cJSON_AddItemToArray(w, cJSON_CreateNumber((double)r->width[s]));
        cJSON_AddItemToArray(d, cJSON_CreateNumber((double)r->depth[s]));
    }
    cJSON_AddStringToObject(c, "layer_type", r->bottleneck ? "bottleneck" : "basic");
    cJSON_AddStringToObject(c, "hidden_act", "relu");
    cJSON_AddBoolToObject(c, "downsample_in_first_stage", r->down_first);
    cJSON_AddBoolToObject(c, "downsample_in_bottleneck", r->down_in_1x1);
    hf_image_config_labels(c, &r->img);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    return c;
}

int hf_resnet_export(const Spec *s, const char *weights, const char *out)
{
    Res r = {0};
    res_match(s, &r);
    ResImp e = {.dir = weights};
    hf_weights_file(&e.w, weights);
    resnet_walk(&r, plan_export, &e);
    char *config = hf_json_text(resnet_hf_config(&r));
    char *pre = hf_json_text(hf_image_export_processor(&r.img, s->model_file));
    if (rt_mkdir_p(out) != 0)
        cannot_write("export", out);
    write_tensors(&e, xasprintf("%s/model.safetensors", out), "export");
    hf_write_text("export", xasprintf("%s/config.json", out), config);
    hf_write_text("export", xasprintf("%s/preprocessor_config.json", out), pre);
    printf("trainc: export: %s -> %s/config.json (resnet, %d stages), %s/preprocessor_config.json, "
           "%s/model.safetensors (%d tensors)\n", weights, out, r.n, out, out, e.n);
    return 0;
}
