/* hf_image_proc.c: a Hugging Face image processor's geometry, read from its
 * preprocessor_config.json: how it resizes and crops an image before its rescale and
 * normalization (those are the model's input scale and shift: hf_image.c). Four kinds,
 * as transformers 4.40 computes them:
 *   - ViTImageProcessor, SiglipImageProcessor: resize to size's height x width;
 *   - DeiTImageProcessor, BeitImageProcessor: that, then do_center_crop to crop_size;
 *   - ConvNextImageProcessor: size's shortest_edge E; below 384 the shorter side resized
 *     to int(E / crop_pct) (the aspect kept), then cropped to E x E; from 384 on, E x E;
 *   - CLIPImageProcessor, BitImageProcessor: the shorter side resized to shortest_edge
 *     (or height x width), then do_center_crop to crop_size;
 * each with its own defaults where the file leaves a key out, with Pillow's filter
 * `resample` (all but NEAREST: image_read.c's image_resize). The old spelling
 * (feature_extractor_type XFeatureExtractor; a size or crop_size of one number) reads as
 * transformers reads it. `trainc data images` does it to each file, `import hf` keeps the
 * checkpoint's beside the model (fitted to --image-size), `export hf` writes it back. */
#include <math.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include "cmd.h"
#include "hf.h"

static const struct {
    const char *name;
    int kind, resample, crop;   /* the class's defaults */
    int64_t h, w, edge, crop_side;
} proc_types[] = {
    {"ViTImageProcessor", HF_PROC_VIT, IMAGE_BILINEAR, 0, 224, 224, 0, 0},
    {"SiglipImageProcessor", HF_PROC_VIT, IMAGE_BICUBIC, 0, 224, 224, 0, 0},
    {"DeiTImageProcessor", HF_PROC_DEIT, IMAGE_BICUBIC, 1, 256, 256, 0, 224},
    {"BeitImageProcessor", HF_PROC_DEIT, IMAGE_BICUBIC, 1, 256, 256, 0, 224},
    {"ConvNextImageProcessor", HF_PROC_CONVNEXT, IMAGE_BILINEAR, 0, 0, 0, 384, 0},
    {"CLIPImageProcessor", HF_PROC_CLIP, IMAGE_BICUBIC, 1, 0, 0, 224, 224},
    {"BitImageProcessor", HF_PROC_CLIP, IMAGE_BICUBIC, 1, 0, 0, 224, 224},
};
enum { N_TYPES = sizeof proc_types / sizeof proc_types[0] };

static const char *type_list(void)
{
    char *s = "";
    for (int i = 0; i < N_TYPES; i++)
        s = xasprintf("%s%s%s", s, i ? ", " : "", proc_types[i].name);
    return s;
}

/* The class's name: image_processor_type, or feature_extractor_type's XFeatureExtractor as
 * XImageProcessor; its row of proc_types, or -1 (*why says) */
static int proc_type(const cJSON *root, const char **why)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "image_processor_type");
    const char *name = cJSON_IsString(t) ? t->valuestring : NULL;
    const cJSON *fe = cJSON_GetObjectItemCaseSensitive(root, "feature_extractor_type");
    const char *suffix = cJSON_IsString(fe) ? strstr(fe->valuestring, "FeatureExtractor") : NULL;
    if (!name && suffix && !suffix[16])
        name = xasprintf("%.*sImageProcessor", (int)(suffix - fe->valuestring), fe->valuestring);
    for (int i = 0; name && i < N_TYPES; i++)
        if (!strcmp(name, proc_types[i].name))
            return i;
    *why = name ? xasprintf("$.image_processor_type: %s: trainc resizes and crops as %s do", name,
                            type_list())
                : "$.image_processor_type: missing (the processor's class)";
    return -1;
}

static int side_ok(const cJSON *v)
{
    return cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= 1 << 16 &&
           v->valuedouble == (double)(int64_t)v->valuedouble;
}

/* KEY's size (size or crop_size) into *h, *w or *edge as get_size_dict reads it (one
 * number: a square where SQUARE, else a shortest edge; a list: height, width); NULL, or
 * why not (EDGE NULL: the kind takes height and width only) */
static const char *read_size(const cJSON *root, const char *key, int square, int64_t *h,
                             int64_t *w, int64_t *edge)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v))
        return NULL;   /* the class's default */
    const cJSON *a = NULL, *b = NULL, *e = NULL;
    if (cJSON_IsNumber(v))
        (square ? (a = b = v) : (e = v));
    else if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2)
        a = cJSON_GetArrayItem(v, 0), b = cJSON_GetArrayItem(v, 1);
    else if (cJSON_IsObject(v) && cJSON_GetArraySize(v) == 2)
        a = cJSON_GetObjectItemCaseSensitive(v, "height"), b = cJSON_GetObjectItemCaseSensitive(v, "width");
    else if (cJSON_IsObject(v) && cJSON_GetArraySize(v) == 1)
        e = cJSON_GetObjectItemCaseSensitive(v, "shortest_edge");
    if (e && edge && side_ok(e)) {
        *edge = (int64_t)e->valuedouble;
        if (h)
            *h = *w = 0;
        return NULL;
    }
    if (a && b && side_ok(a) && side_ok(b) && (h || w)) {
        *h = (int64_t)a->valuedouble, *w = (int64_t)b->valuedouble;
        if (edge)
            *edge = 0;
        return NULL;
    }
    return xasprintf("$.%s: %s expected", key, !edge ? "{\"height\": H, \"width\": W}" :
                     !h ? "{\"shortest_edge\": E}" : "{\"height\": H, \"width\": W} or "
                     "{\"shortest_edge\": E}");
}

static int flag(const cJSON *root, const char *key, int dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static const char *read_geometry(const cJSON *root, int i, HfImageProc *p)
{
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "resample");
    p->resample = proc_types[i].resample;
    if (rs && !cJSON_IsNull(rs)) {
        if (!cJSON_IsNumber(rs) || rs->valuedouble < 1 || rs->valuedouble > 5 ||
            rs->valuedouble != (int)rs->valuedouble)
            return "$.resample: one of Pillow's filters 1 to 5 expected (LANCZOS, BILINEAR, "
                   "BICUBIC, BOX, HAMMING; NEAREST is not repeated)";
        p->resample = (int)rs->valuedouble;
    }
    p->resize = flag(root, "do_resize", 1);
    const char *why = read_size(root, "size", p->kind == HF_PROC_VIT || p->kind == HF_PROC_DEIT,
                                p->kind == HF_PROC_CONVNEXT ? NULL : &p->h,
                                p->kind == HF_PROC_CONVNEXT ? NULL : &p->w,
                                p->kind == HF_PROC_VIT || p->kind == HF_PROC_DEIT ? NULL : &p->edge);
    if (why)
        return why;
    if (p->kind == HF_PROC_CONVNEXT) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "crop_pct");
        if (c && !cJSON_IsNull(c) && (!cJSON_IsNumber(c) || !(c->valuedouble > 0) || c->valuedouble > 1))
            return "$.crop_pct: a number in (0, 1] expected";
        if (c && cJSON_IsNumber(c))
            p->crop_pct = c->valuedouble;
    }
    if (p->kind == HF_PROC_DEIT || p->kind == HF_PROC_CLIP) {
        p->crop = flag(root, "do_center_crop", 1);
        return read_size(root, "crop_size", 1, &p->crop_h, &p->crop_w, NULL);
    }
    return NULL;
}

const char *hf_image_proc_parse(const cJSON *root, HfImageProc *p)
{
    const char *why = NULL;
    int i = proc_type(root, &why);
    if (i < 0)
        return why;
    *p = (HfImageProc){.type = proc_types[i].name, .kind = proc_types[i].kind,
                       .h = proc_types[i].h, .w = proc_types[i].w, .edge = proc_types[i].edge,
                       .crop_h = proc_types[i].crop_side, .crop_w = proc_types[i].crop_side,
                       .crop_pct = 224.0 / 256};
    return read_geometry(root, i, p);
}

const char *hf_image_proc_read(const char *path, HfImageProc *p)
{
    size_t n;
    char *text = spec_read_file(path, &n);
    cJSON *root = cJSON_ParseWithLength(text, n);
    free(text);
    if (!cJSON_IsObject(root))
        return "not a JSON object";
    const char *why = hf_image_proc_parse(root, p);
    cJSON_Delete(root);
    return why;
}

int hf_image_proc_side(const HfImageProc *p, int64_t *h, int64_t *w)
{
    if (p->resize && p->kind == HF_PROC_CONVNEXT) {
        *h = *w = p->edge;
        return 1;
    }
    if (p->crop) {
        *h = p->crop_h, *w = p->crop_w;
        return 1;
    }
    *h = p->h, *w = p->w;
    return p->resize && !p->edge;
}

/* get_resize_output_image_size(image, EDGE, default_to_square=False): the shorter side
 * EDGE, the longer int(EDGE * long / short); NULL, or why not (a side past 65536) */
static const char *resize_short(ImageU8 *im, double edge, int filter)
{
    double sh = im->w <= im->h ? im->w : im->h, lg = im->w <= im->h ? im->h : im->w;
    double other = edge <= 65536 ? (double)((int64_t)edge * (int64_t)lg) / sh : edge;
    if (!(edge <= 65536 && other <= 65536))
        return xasprintf("its %ux%u pixels resized to a shorter side of %.0f make a side past "
                         "65536", im->w, im->h, edge);
    if (im->w <= im->h)
        image_resize(im, (int)edge, (int)other, filter);
    else
        image_resize(im, (int)other, (int)edge, filter);
    return NULL;
}

const char *hf_image_proc_apply(const HfImageProc *p, struct ImageU8 *im)
{
    const char *why = NULL;
    if (p->resize && p->kind == HF_PROC_CONVNEXT) {
        if (p->edge < 384) {
            why = resize_short(im, floor((double)p->edge / p->crop_pct), p->resample);
            if (!why)
                image_center_crop(im, (int)p->edge, (int)p->edge);
        } else
            image_resize(im, (int)p->edge, (int)p->edge, p->resample);
        return why;
    }
    if (p->resize && p->edge)
        why = resize_short(im, (double)p->edge, p->resample);
    else if (p->resize)
        image_resize(im, (int)p->w, (int)p->h, p->resample);
    if (p->crop && !why)
        image_center_crop(im, (int)p->crop_w, (int)p->crop_h);
    return why;
}

/* N scaled by S / FROM, rounded */
static int64_t scaled(int64_t n, int64_t S, int64_t from)
{
    return (int64_t)llround((double)n * (double)S / (double)from);
}

int hf_image_proc_fit(HfImageProc *p, int64_t S)
{
    int64_t h, w;
    if (!hf_image_proc_side(p, &h, &w) || h != w)
        return 0;
    if (h == S)
        return 1;
    if (p->kind == HF_PROC_CONVNEXT)
        p->edge = S;
    else if (p->crop) {   /* the resize scaled as the crop is */
        if (p->edge)
            p->edge = scaled(p->edge, S, p->crop_h);
        else
            p->h = scaled(p->h, S, p->crop_h), p->w = scaled(p->w, S, p->crop_w);
        p->crop_h = p->crop_w = S;
    } else
        p->h = p->w = S;
    return 1;
}

void hf_image_proc_json(const HfImageProc *p, cJSON *c)
{
    cJSON_AddStringToObject(c, "image_processor_type", p->type);
    cJSON_AddBoolToObject(c, "do_resize", p->resize);
    cJSON *size = cJSON_AddObjectToObject(c, "size");
    if (p->edge)
        cJSON_AddNumberToObject(size, "shortest_edge", (double)p->edge);
    else {
        cJSON_AddNumberToObject(size, "height", (double)p->h);
        cJSON_AddNumberToObject(size, "width", (double)p->w);
    }
    cJSON_AddNumberToObject(c, "resample", p->resample);
    if (p->kind == HF_PROC_CONVNEXT)
        cJSON_AddNumberToObject(c, "crop_pct", p->crop_pct);
    if (p->kind == HF_PROC_DEIT || p->kind == HF_PROC_CLIP) {
        cJSON_AddBoolToObject(c, "do_center_crop", p->crop);
        cJSON *cs = cJSON_AddObjectToObject(c, "crop_size");
        cJSON_AddNumberToObject(cs, "height", (double)p->crop_h);
        cJSON_AddNumberToObject(cs, "width", (double)p->crop_w);
    }
}

const char *hf_image_proc_says(const HfImageProc *p)
{
    static const char *filters[] = {"", "lanczos", "bilinear", "bicubic", "box", "hamming"};
    const char *f = filters[p->resample];
    if (!p->resize)
        return xasprintf("cropped to %lldx%lld", (long long)p->crop_w, (long long)p->crop_h);
    if (p->kind == HF_PROC_CONVNEXT)
        return p->edge < 384 ? xasprintf("the shorter side to %lld (%s), cropped to %lldx%lld",
                                         (long long)(int64_t)((double)p->edge / p->crop_pct), f,
                                         (long long)p->edge, (long long)p->edge)
                             : xasprintf("resized to %lldx%lld (%s)", (long long)p->edge,
                                         (long long)p->edge, f);
    const char *rs = p->edge ? xasprintf("the shorter side to %lld (%s)", (long long)p->edge, f)
                             : xasprintf("resized to %lldx%lld (%s)", (long long)p->w, (long long)p->h, f);
    return p->crop ? xasprintf("%s, cropped to %lldx%lld", rs, (long long)p->crop_w,
                               (long long)p->crop_h) : rs;
}

const char *hf_image_proc_load(const char *file, const char *model, int64_t S, HfImageProc *p)
{
    if (!file) {
        const char *slash = strrchr(model, '/');
        file = xasprintf("%.*spreprocessor_config.json", slash ? (int)(slash - model) + 1 : 0, model);
        if (access(file, F_OK) != 0)
            return NULL;
    }
    const char *why = hf_image_proc_read(file, p);
    if (why)
        error_input("%s: %s", file, why);
    int64_t h, w;
    if (!hf_image_proc_side(p, &h, &w))
        error_input("%s: %s makes images of the files' own proportions (no crop to a "
                    "fixed size): the model takes %lldx%lld", file, p->type, (long long)S,
                    (long long)S);
    if (h != S || w != S)
        error_input("%s: it makes %lldx%lld images; the model (%s) takes %lldx%lld", file,
                    (long long)w, (long long)h, model, (long long)S, (long long)S);
    return file;
}
