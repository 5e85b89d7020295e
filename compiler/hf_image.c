/* hf_image.c: what Hugging Face's image classifiers share on the way in and out
 * (hf_vision.c): the image processor's rescale and normalization as the input's scale
 * and shift (by channel where they differ) and back, and the classes' names (id2label)
 * as the target's labels and back. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cmd.h"
#include "hf.h"
#include "ops/op.h"

/* A preprocessor key's numbers, one a channel (a number: the same for each) into x[C];
 * dflt for each where the key is left out */
static void channel_values(HfCfg *p, const char *key, double dflt, int64_t C, double *x)
{
    const cJSON *a = hf_cfg_get(p, key);
    for (int64_t k = 0; k < C; k++)
        x[k] = a && cJSON_IsNumber(a) ? a->valuedouble : dflt;
    if (!a || cJSON_IsNumber(a))
        return;
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != C)
        hf_cfg_error(p, key, "a number or a list of %lld (num_channels) expected", (long long)C);
    int k = 0;
    for (const cJSON *e = a->child; e; e = e->next, k++) {
        if (!cJSON_IsNumber(e))
            hf_cfg_error(p, key, "a number or a list of %lld (num_channels) expected", (long long)C);
        x[k] = e->valuedouble;
    }
}

/* A config key's list of positive integers (n of them; n 0: any, set) */
int64_t *hf_cfg_int_list(HfCfg *c, const char *key, int *n)
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

int hf_image_pixels(const char *dir, HfImage *im)
{
    char *path = xasprintf("%s/preprocessor_config.json", dir);
    double rescale = 1 / 255.0, *mean = xcalloc((size_t)im->C, sizeof *mean),
           *std = xcalloc((size_t)im->C, sizeof *std);
    int have = access(path, F_OK) == 0, normalize = 1;
    for (int64_t k = 0; k < im->C; k++)
        mean[k] = std[k] = 0.5;
    if (have) {
        HfCfg p;
        hf_cfg_load(&p, path);
        rescale = hf_cfg_bool(&p, "do_rescale", 1) ? hf_cfg_num(&p, "rescale_factor", 1 / 255.0) : 1;
        channel_values(&p, "image_mean", 0.5, im->C, mean);
        channel_values(&p, "image_std", 0.5, im->C, std);
        normalize = hf_cfg_bool(&p, "do_normalize", 1);
        for (int64_t k = 0; k < im->C; k++)
            if (normalize && std[k] <= 0)
                hf_cfg_error(&p, "image_std", "must be positive");
    }
    im->u8 = 1;
    im->ch_scale = xcalloc((size_t)im->C, sizeof *im->ch_scale);
    im->ch_shift = xcalloc((size_t)im->C, sizeof *im->ch_shift);
    int same = 1;
    for (int64_t k = 0; k < im->C; k++) {
        im->ch_scale[k] = normalize ? rescale / std[k] : rescale;
        im->ch_shift[k] = normalize ? -mean[k] / std[k] : 0;
        same &= im->ch_scale[k] == im->ch_scale[0] && im->ch_shift[k] == im->ch_shift[0];
    }
    im->scale = im->ch_scale[0];
    im->shift = im->ch_shift[0];
    if (same)
        im->ch_scale = im->ch_shift = NULL;
    free(mean);
    free(std);
    return have;
}

/* id2label's names, unless every one is transformers' own LABEL_k (then NULL) */
static char **config_names(HfCfg *c, const cJSON *labels, int64_t K)
{
    char **names = xcalloc((size_t)K, sizeof *names);
    int own = 0;
    for (const cJSON *e = labels->child; e; e = e->next) {
        char *end;
        long k = strtol(e->string, &end, 10);
        if (*end || k < 0 || k >= K || names[k] || !cJSON_IsString(e))
            hf_cfg_error(c, "id2label", "the ids 0 to %lld, each once, with a name expected",
                         (long long)K - 1);
        names[k] = e->valuestring;
        own |= strcmp(e->valuestring, xasprintf("LABEL_%ld", k)) != 0;
    }
    return own ? names : NULL;
}

int hf_image_arch(HfCfg *c, const char *labels, const char *cls, const char *base,
                  const char *family)
{
    int is_base = 0;
    const cJSON *ar = hf_cfg_get(c, "architectures");
    for (const cJSON *e = ar ? ar->child : NULL; e; e = e->next) {
        const char *a = cJSON_IsString(e) ? e->valuestring : "";
        is_base |= !strcmp(a, base);
        if (!strcmp(a, base) && !labels)
            hf_cfg_error(c, "architectures", "%s: no classifier; --labels names the classes (or "
                         "gives their count) of a new one", base);
        if (strcmp(a, base) && strcmp(a, cls))
            hf_cfg_error(c, "architectures", "%s: trainc imports a %s with its classifier (%s, "
                         "or %s with --labels)", *a ? a : "an entry", family, cls, base);
    }
    return is_base;
}

void hf_image_write_import(const HfJoinImport *im, const char *spec, const char *train,
                           const char *out)
{
    if (rt_mkdir_p(out) != 0)
        cannot_write("import", out);
    hf_join_write_import(im, xasprintf("%s/init.safetensors", out));
    hf_write_text("import", xasprintf("%s/model.json", out), spec);
    hf_write_text("import", xasprintf("%s/train.json", out), train);
}

void hf_image_write_export(const HfJoinExport *e, const HfImage *im, cJSON *config,
                           const char *type, const char *weights, const char *model_file,
                           const char *out)
{
    char *cfg = hf_json_text(config), *pre = hf_json_text(hf_image_export_processor(im, model_file));
    if (rt_mkdir_p(out) != 0)
        cannot_write("export", out);
    hf_join_write_export(e, xasprintf("%s/model.safetensors", out));
    hf_write_text("export", xasprintf("%s/config.json", out), cfg);
    hf_write_text("export", xasprintf("%s/preprocessor_config.json", out), pre);
    printf("trainc: export: %s -> %s/config.json (%s), %s/preprocessor_config.json, "
           "%s/model.safetensors (%d tensors)\n", weights, out, type, out, out, e->out.n);
}

void hf_image_labels(HfCfg *c, HfImage *im)
{
    const cJSON *labels = hf_cfg_get(c, "id2label");
    im->K = labels ? cJSON_GetArraySize(labels) : 2;   /* PretrainedConfig's default */
    if (labels)
        im->labels = config_names(c, labels, im->K);
    if (im->K < 2)
        hf_cfg_error(c, "id2label", "%lld label: a single output is transformers' regression, "
                     "which trainc's cross entropy is not", (long long)im->K);
    const char *pt = hf_cfg_str(c, "problem_type", "single_label_classification");
    if (strcmp(pt, "single_label_classification"))
        hf_cfg_error(c, "problem_type", "\"%s\": trainc's loss is single-label cross entropy", pt);
    hf_cfg_get(c, "label2id");
    hf_cfg_get(c, "num_labels");
}

void hf_labels_unread(HfCfg *c)
{
    static const char *const keys[] = {"id2label", "label2id", "num_labels", "problem_type"};
    for (int k = 0; k < 4; k++)
        hf_cfg_get(c, keys[k]);
}

void hf_cfg_classifier(HfCfg *c)
{
    hf_cfg_pretrained(c);
    hf_cfg_get(c, "tie_word_embeddings");   /* (no language model head to tie) */
}

void hf_labels_arg(HfCfg *c, const char *arg, HfImage *im)
{
    hf_cfg_get(c, "id2label");
    hf_cfg_get(c, "label2id");
    hf_cfg_get(c, "num_labels");
    hf_cfg_get(c, "problem_type");
    char *end;
    long k = strtol(arg, &end, 10);
    if (!*end && end != arg) {
        if (k < 2 || k > 1 << 20)
            error_input("import: --labels %s: 2 classes or more (at most 2^20) expected", arg);
        im->K = k, im->labels = NULL;
        return;
    }
    im->K = 1;
    for (const char *p = arg; *p; p++)
        im->K += *p == ',';
    im->labels = xcalloc((size_t)im->K, sizeof *im->labels);
    char *copy = xstrdup(arg), *save = NULL;
    int64_t n = 0;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
        im->labels[n++] = t;
    for (int64_t a = 0; a < n; a++)
        for (int64_t b = a + 1; b < n; b++)
            if (!strcmp(im->labels[a], im->labels[b]))
                error_input("import: --labels: '%s' named twice", im->labels[a]);
    if (n != im->K || n < 2)
        error_input("import: --labels %s: a count of classes, or 2 names or more with a comma "
                    "between each two (none empty)", arg);
}

void hf_image_inputs_y(cJSON *in, const HfImage *im)
{
    cJSON *y = cJSON_AddObjectToObject(in, "y");
    cJSON_AddItemToObject(y, "shape", cJSON_CreateArray());
    cJSON_AddStringToObject(y, "dtype", "i32");
    cJSON_AddNumberToObject(y, "classes", (double)im->K);
    if (im->labels)
        cJSON_AddItemToObject(y, "labels", cJSON_CreateStringArray((const char *const *)im->labels,
                                                                   (int)im->K));
}

void hf_image_inputs(cJSON *model, const HfImage *im)
{
    cJSON *in = cJSON_AddObjectToObject(model, "inputs");
    cJSON *x = cJSON_AddObjectToObject(in, "x");
    cJSON_AddItemToObject(x, "shape", cJSON_CreateIntArray((int[]){(int)im->C, (int)im->S, (int)im->S}, 3));
    cJSON_AddStringToObject(x, "dtype", "u8");
    if (im->ch_scale) {   /* by channel */
        cJSON_AddItemToObject(x, "scale", cJSON_CreateDoubleArray(im->ch_scale, (int)im->C));
        cJSON_AddItemToObject(x, "shift", cJSON_CreateDoubleArray(im->ch_shift, (int)im->C));
    } else {
        cJSON_AddNumberToObject(x, "scale", im->scale);
        if (im->shift != 0)
            cJSON_AddNumberToObject(x, "shift", im->shift);
    }
    hf_image_inputs_y(in, im);
}

void hf_image_loss(cJSON *model)
{
    cJSON *loss = cJSON_AddObjectToObject(model, "loss");
    cJSON_AddStringToObject(loss, "op", "cross_entropy");
    cJSON_AddStringToObject(loss, "target", "y");
}

char *hf_image_train(const char *optimizer, int clip)
{
    return xasprintf(
        "{\n"
        "  \"trainc\": 1,\n"
        "  \"train\": {\n"
        "    \"data\": {\n"
        "      \"train\": {\"x\": \"data/train_x.npy\", \"y\": \"data/train_y.npy\"},\n"
        "      \"val\": {\"x\": \"data/val_x.npy\", \"y\": \"data/val_y.npy\"}\n"
        "    },\n"
        "    \"batch_size\": 64,\n"
        "    \"epochs\": 3,\n"
        "    \"optimizer\": %s,\n"
        "    \"schedule\": {\"type\": \"cosine\", \"warmup_steps\": 50, \"final_lr_frac\": 0.0},\n"
        "%s"
        "    \"precision\": \"bf16-mixed\",\n"
        "    \"validate\": {\"every_epochs\": 1},\n"
        "    \"seed\": 1337,\n"
        "    \"log_every\": 10\n"
        "  }\n"
        "}\n", optimizer, clip ? "    \"grad_clip\": 1.0,\n" : "");
}

void hf_image_from_spec(const Spec *s, const Layer *first, const char *arch, HfImage *im)
{
    const InputSpec *x = &s->inputs[0];
    for (int k = 0; first->input && k < s->n_inputs; k++)
        if (!strcmp(s->inputs[k].name, first->input))
            x = &s->inputs[k];
    if (x->rank != 3 || x->shape[1] != x->shape[2])
        error_at(s->model_file, x->path, "%s reads square images [C, S, S]", arch);
    if (x->dtype != RT_U8 && x->dtype != RT_F32)
        error_at(s->model_file, x->path, "pixels are u8 or f32 for export hf's image processor");
    im->C = x->shape[0], im->S = x->shape[1];
    im->u8 = x->dtype == RT_U8;
    im->scale = x->has_scale ? x->scale : 1;
    im->shift = x->has_shift ? x->shift : 0;
    im->ch_scale = x->ch_scale;
    im->ch_shift = x->ch_shift;
}

void hf_image_labels_from_spec(const Spec *s, HfImage *im)
{
    for (int k = 0; k < s->n_inputs; k++)
        if (!strcmp(s->inputs[k].name, s->loss_target) && s->inputs[k].classes == im->K)
            im->labels = s->inputs[k].labels;
}

void hf_image_config_labels(cJSON *c, const HfImage *im)
{
    cJSON *id = cJSON_AddObjectToObject(c, "id2label"), *lab = cJSON_AddObjectToObject(c, "label2id");
    for (int64_t k = 0; k < im->K; k++) {
        char key[32], own[32];
        snprintf(key, sizeof key, "%lld", (long long)k);
        snprintf(own, sizeof own, "LABEL_%lld", (long long)k);
        const char *name = im->labels ? im->labels[k] : own;
        cJSON_AddStringToObject(id, key, name);
        cJSON_AddNumberToObject(lab, name, (double)k);
    }
}

cJSON *hf_image_processor(const HfImage *im, const HfImageProc *geo)
{
    double rescale = im->u8 ? 1 / 255.0 : 1;
    HfImageProc vit = {.type = "ViTImageProcessor", .kind = HF_PROC_VIT, .resize = 1,
                       .h = im->S, .w = im->S, .resample = IMAGE_BILINEAR};
    cJSON *c = cJSON_CreateObject();
    hf_image_proc_json(geo ? geo : &vit, c);
    cJSON_AddBoolToObject(c, "do_rescale", im->u8);
    cJSON_AddItemToObject(c, "rescale_factor", hf_float(1 / 255.0));
    cJSON_AddTrueToObject(c, "do_normalize");
    cJSON *m = cJSON_AddArrayToObject(c, "image_mean"), *sd = cJSON_AddArrayToObject(c, "image_std");
    for (int64_t k = 0; k < im->C; k++) {
        double scale = im->ch_scale ? im->ch_scale[k] : im->scale;
        double std = rescale / scale, mean = -(im->ch_shift ? im->ch_shift[k] : im->shift) * std;
        cJSON_AddItemToArray(m, hf_float(mean));
        cJSON_AddItemToArray(sd, hf_float(std));
    }
    return c;
}

void hf_image_keep_processor(const char *dir, const HfImage *im, const char *out)
{
    char *path = xasprintf("%s/preprocessor_config.json", dir);
    if (access(path, F_OK) != 0)
        return;   /* (then data images and export: a ViTImageProcessor's resize to S x S) */
    HfImageProc p;
    const char *why = hf_image_proc_read(path, &p);
    if (!why && !hf_image_proc_fit(&p, im->S))
        why = xasprintf("%s makes images of the files' own proportions", p.type);
    if (why) {
        printf("trainc: import: %s: its resize and crop are not repeated (%s): data images "
               "resizes whole images to %lldx%lld (bilinear)\n", path, why, (long long)im->S,
               (long long)im->S);
        return;
    }
    hf_write_text("import", xasprintf("%s/preprocessor_config.json", out),
                  hf_json_text(hf_image_processor(im, &p)));
    printf("trainc: import: %s's images: %s -> %s/preprocessor_config.json (data images and "
           "export hf read it)\n", dir, hf_image_proc_says(&p), out);
}

cJSON *hf_image_export_processor(const HfImage *im, const char *model_file)
{
    HfImageProc p;
    return hf_image_processor(im, hf_image_proc_load(NULL, model_file, im->S, &p) ? &p : NULL);
}

char *hf_text_train(int types, const char *extra, int batch, int epochs, double lr, double wd)
{
    const char *tt = types ? " \"types\": \"data/train_types.npy\"," : "";
    const char *tv = types ? " \"types\": \"data/val_types.npy\"," : "";
    const char *et = "", *ev = "";
    for (char *names = extra ? xstrdup(extra) : NULL, *k = names ? strtok(names, " ") : NULL; k;
         k = strtok(NULL, " ")) {
        et = xasprintf("%s, \"%s\": \"data/train_%s.npy\"", et, k, k);
        ev = xasprintf("%s, \"%s\": \"data/val_%s.npy\"", ev, k, k);
    }
    return xasprintf(
    "{\n"
    "  \"trainc\": 1,\n"
    "  \"train\": {\n"
    "    \"data\": {\n"
    "      \"train\": {\"x\": \"data/train_x.npy\",%s\n"
    "                \"pos\": \"data/train_pos.npy\", \"y\": \"data/train_y.npy\"%s},\n"
    "      \"val\": {\"x\": \"data/val_x.npy\",%s\n"
    "              \"pos\": \"data/val_pos.npy\", \"y\": \"data/val_y.npy\"%s}\n"
    "    },\n"
    "    \"batch_size\": %d,\n"
    "    \"epochs\": %d,\n"
    "    \"optimizer\": {\"type\": \"adamw\", \"lr\": %g, \"weight_decay\": %g},\n"
    "    \"schedule\": {\"type\": \"linear\", \"warmup_steps\": 0, \"final_lr_frac\": 0.0},\n"
    "    \"grad_clip\": 1.0,\n"
    "    \"precision\": \"bf16-mixed\",\n"
    "    \"validate\": {\"every_epochs\": 1},\n"
    "    \"seed\": 1337,\n"
    "    \"log_every\": 10\n"
    "  }\n"
    "}\n", tt, et, tv, ev, batch, epochs, lr, wd);
}

const char *hf_image_new_head_said(const HfImage *im, int n_fresh, double std, int left)
{
    return xasprintf("; a new classifier of %lld classes: %d tensors drawn anew (normal, std "
                     "%g, seed %d), %d of the checkpoint's other tensors left out",
                     (long long)im->K, n_fresh, std, HF_FRESH_SEED, left);
}

void hf_match_vit_stem(const Spec *s, const HfLayout *h, int n_tokens, int bias, HfImage *img,
                       int64_t *D, int64_t *P)
{
    const char *at = "$.model.layers";
    const Layer *c = hf_want(s, h, s->n_layers ? s->layers[0] : NULL, at, OP_CONV2D);
    if (c->stride != c->kernel || c->padding || c->groups != 1 || !c->bias != !bias)
        hf_refuse(s, h, c, bias ? "a conv2d other than patches (stride = kernel, no padding, "
                  "groups 1, a bias)" : "a conv2d other than patches (stride = kernel, no "
                  "padding, groups 1, no bias)");
    *D = c->out, *P = c->kernel;
    hf_image_from_spec(s, c, h->arch, img);
    for (int k = 1; k < 3 + n_tokens; k++)
        hf_want(s, h, k < s->n_layers ? s->layers[k] : NULL, at,
                k == 1 ? OP_TOKENS : k < 2 + n_tokens ? OP_CLS_TOKEN : OP_POS_EMBEDDING);
    const Layer *pos = s->layers[2 + n_tokens];
    if (s->positions || pos->max_len != (img->S / *P) * (img->S / *P) + n_tokens)
        hf_refuse(s, h, pos, n_tokens > 1 ? "positions other than one a token and the learned "
                  "tokens'" : "positions other than one a token and the class token's");
}

void hf_match_vit_attention(const Spec *s, const HfLayout *h, const Layer *l, const char *at,
                            int64_t *heads, int *qkv_bias)
{
    hf_match_attention(s, h, l, at);
    if (!l->bias || l->bias_qkv)
        hf_refuse(s, h, l, "an attention without proj.bias");
    *heads = l->heads;
    *qkv_bias = !l->bias_proj;
}

cJSON *hf_prenorm_branch(cJSON *body, const char *norm, double eps)
{
    cJSON *r = hf_layer(body, "residual", NULL);
    cJSON *b = cJSON_AddArrayToObject(r, "body");
    cJSON_AddNumberToObject(hf_layer(b, "layernorm", norm), "eps", eps);
    return b;
}

cJSON *hf_vit_spec_stem(const HfImage *im, const char *name, const char *patch, int64_t D,
                        int64_t P, const char *const *tokens, int n, const char *pos,
                        cJSON **layers)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "trainc", 1);
    cJSON *m = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(m, "name", name);
    hf_image_inputs(m, im);
    cJSON *ls = cJSON_AddArrayToObject(m, "layers");
    cJSON *p = hf_layer(ls, "conv2d", patch);
    cJSON_AddNumberToObject(p, "out", (double)D);
    cJSON_AddNumberToObject(p, "kernel", (double)P);
    cJSON_AddNumberToObject(p, "stride", (double)P);
    hf_layer(ls, "tokens", NULL);
    for (int k = 0; k < n; k++)
        hf_layer(ls, "cls_token", tokens[k]);
    cJSON_AddNumberToObject(hf_layer(ls, "pos_embedding", pos), "max_len",
                            (double)((im->S / P) * (im->S / P) + n));
    *layers = ls;
    return root;
}

void hf_vit_blocks_spec(cJSON *ls, const HfVitBlocks *b, int64_t D)
{
    cJSON *rep = hf_layer(ls, "repeat", "blocks");
    cJSON_AddNumberToObject(rep, "count", (double)b->L);
    cJSON *body = cJSON_AddArrayToObject(rep, "body");
    cJSON *att = hf_layer(hf_prenorm_branch(body, b->norm1, b->eps), "attention", b->attn);
    cJSON_AddNumberToObject(att, "heads", (double)b->H);
    cJSON_AddFalseToObject(att, "causal");
    if (!b->qkv_bias)
        cJSON_AddStringToObject(att, "bias", "proj");
    cJSON *mlp = hf_prenorm_branch(body, b->norm2, b->eps);
    cJSON_AddNumberToObject(hf_layer(mlp, "linear", b->fc1), "out", (double)b->FF);
    cJSON *a = hf_layer(mlp, b->act == OP_QUICK_GELU ? "quick_gelu" : "gelu", NULL);
    if (b->gelu_tanh)
        cJSON_AddStringToObject(a, "approximate", "tanh");
    cJSON_AddNumberToObject(hf_layer(mlp, "linear", b->fc2), "out", (double)D);
}

void hf_match_vit_blocks(const Spec *s, const HfLayout *h, const Layer *rep, int64_t D,
                         const int *acts, HfVitBlocks *b)
{
    hf_want(s, h, rep, "$.model.layers", OP_REPEAT);
    if (rep->n_body != 2)
        hf_refuse(s, h, rep, "a repeat of other than two residuals");
    b->L = rep->count;
    b->block = rep->name ? xasprintf("%s.%%lld.", rep->name) : "%lld.";
    char *a = hf_match_residual(s, h, rep->body[0], rep->path, 2), *m;
    Layer **ab = rep->body[0]->body;
    hf_match_norm(s, h, ab[0], rep->path, &b->eps);
    hf_match_vit_attention(s, h, ab[1], rep->path, &b->H, &b->qkv_bias);
    b->norm1 = hf_layer_name(ab[0], 0, a), b->attn = hf_layer_name(ab[1], 1, a);
    m = hf_match_residual(s, h, rep->body[1], rep->path, 4);
    Layer **mb = rep->body[1]->body;
    hf_match_norm(s, h, mb[0], rep->path, &b->eps);
    b->FF = hf_match_linear(s, h, mb[1], rep->path, 0);
    b->act = acts[0];
    for (int k = 1; acts[k] && !(mb[2] && mb[2]->op == b->act); k++)
        b->act = acts[k];
    hf_want(s, h, mb[2], rep->path, b->act);
    b->gelu_tanh = b->act == OP_GELU && mb[2]->gelu_tanh;
    hf_match_linear(s, h, mb[3], rep->path, D);
    b->norm2 = hf_layer_name(mb[0], 0, m), b->fc1 = hf_layer_name(mb[1], 1, m),
    b->fc2 = hf_layer_name(mb[3], 3, m);
}
