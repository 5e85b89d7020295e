/* data_images.c: `trainc data images SRC DIR --model MODEL.json [--processor FILE] [--val
 * SRC2 | --val-frac F | --unlabeled]`: a folder of images in a subfolder a class (Hugging
 * Face's imagefolder, torchvision's ImageFolder) as the u8 arrays an image classifier's
 * import reads, DIR/{train,val}_x.npy [N, C, S, S] and DIR/{train,val}_y.npy [N] i32.
 * Each PNG or JPEG is read and converted to the model's channels as Pillow does
 * (image_read.c), then resized and cropped as the image processor of
 * preprocessor_config.json (--processor, or the one beside MODEL.json that import hf
 * keeps: hf_image_proc.c) does, or where there is none resized to the model's side as
 * a ViTImageProcessor does (bilinear). The class is the subfolder's name among the model's labels (or a
 * number below its classes); --val-frac takes the last F of each class's files (by
 * name) for validation. --unlabeled: SRC's images alone, DIR/test_x.npy and
 * DIR/test_files.txt (the order, for --predict's rows). Everything is read and checked
 * before a file is renamed into place (data_stage). */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include "cmd.h"
#include "hf.h"

static const char images_usage[] =
    "usage: trainc data images SRC DIR --model MODEL.json [--processor FILE] [--val SRC | "
    "--val-frac F | --unlabeled]";

typedef struct ImgArgs {
    const char *src, *dir, *model, *val, *processor;
    double val_frac;
    int unlabeled;
} ImgArgs;

/* What the model reads: images [C, S, S] of u8, K classes and their names (or NULL); the
 * image processor whose geometry makes them (proc_file NULL: none, a resize to S x S) */
typedef struct ImgModel {
    int64_t C, S, K;
    char **labels;
    const char *proc_file;
    HfImageProc proc;
} ImgModel;

/* One image to write: its file and class */
typedef struct ImgFile {
    char *path;
    int32_t y;
} ImgFile;

typedef struct ImgList {
    ImgFile *f;
    int64_t n, cap, skipped;
} ImgList;

static void parse_args(int argc, char **argv, ImgArgs *a)
{
    *a = (ImgArgs){.val_frac = 0.1};
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "--model"))
            a->model = opt_value(argc, argv, &i, s);
        else if (!strcmp(s, "--val"))
            a->val = opt_value(argc, argv, &i, s);
        else if (!strcmp(s, "--processor"))
            a->processor = opt_value(argc, argv, &i, s);
        else if (!strcmp(s, "--val-frac"))
            a->val_frac = data_val_frac("images", opt_value(argc, argv, &i, s));
        else if (!strcmp(s, "--unlabeled"))
            a->unlabeled = 1;
        else
            data_positional("images", images_usage, s, &a->src, &a->dir);
    }
    if (a->unlabeled && a->val)
        error_input("data images: --unlabeled writes the images a model predicts on, one set: "
                    "no --val");
    if (!a->src || !a->dir || !a->model)
        error_input("data images: missing %s\n%s", !a->src ? "the image folder" : !a->dir
                    ? "the output folder" : "--model MODEL.json (its images' shape and classes)",
                    images_usage);
}

/* MODEL.json's input x (u8 [C, S, S], C 1 or 3) and target y (its classes) */
static ImgModel read_model(const char *file)
{
    size_t n;
    char *text = spec_read_file(file, &n);
    cJSON *root = cJSON_Parse(text);
    const cJSON *in = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "model"), "inputs");
    const cJSON *x = cJSON_GetObjectItem(in, "x"), *y = cJSON_GetObjectItem(in, "y");
    const cJSON *shape = cJSON_GetObjectItem(x, "shape"), *dt = cJSON_GetObjectItem(x, "dtype");
    ImgModel m = {0};
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) != 3 || !cJSON_IsString(dt) ||
        strcmp(dt->valuestring, "u8"))
        error_at(file, "$.model.inputs.x", "data images writes u8 images [C, S, S]: an image "
                 "classifier's import (vit, deit, dinov2, clip, siglip, resnet, convnext) has such an input x");
    m.C = (int64_t)cJSON_GetArrayItem(shape, 0)->valuedouble;
    m.S = (int64_t)cJSON_GetArrayItem(shape, 1)->valuedouble;
    if ((m.C != 1 && m.C != 3) || m.S != (int64_t)cJSON_GetArrayItem(shape, 2)->valuedouble)
        error_at(file, "$.model.inputs.x.shape", "images of 1 or 3 channels, square, expected");
    const cJSON *k = cJSON_GetObjectItem(y, "classes"), *names = cJSON_GetObjectItem(y, "labels");
    if (!cJSON_IsNumber(k) || k->valuedouble < 2)
        error_at(file, "$.model.inputs.y", "a target y with its classes expected");
    m.K = (int64_t)k->valuedouble;
    if (cJSON_IsArray(names)) {
        m.labels = xcalloc((size_t)m.K, sizeof *m.labels);
        for (int64_t c = 0; c < m.K; c++)
            m.labels[c] = xstrdup(cJSON_GetArrayItem(names, (int)c)->valuestring);
    }
    cJSON_Delete(root);
    free(text);
    return m;
}

static int is_image(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && (!strcasecmp(dot, ".png") || !strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

/* DIR's entries but the hidden ones, sorted by name (bytes); their count */
static int entries(const char *dir, struct dirent ***out)
{
    int n = scandir(dir, out, NULL, by_name);
    if (n < 0)
        error_input("data images: %s: cannot read the folder: %s", dir, strerror(errno));
    int k = 0;
    for (int i = 0; i < n; i++)
        if ((*out)[i]->d_name[0] != '.')
            (*out)[k++] = (*out)[i];
    return k;
}

static int is_dir(const char *path)
{
    DIR *d = opendir(path);
    if (d)
        closedir(d);
    return d != NULL;
}

static void add_file(ImgList *l, char *path, int32_t y)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->f = realloc(l->f, (size_t)l->cap * sizeof *l->f);
    }
    l->f[l->n++] = (ImgFile){path, y};
}

/* The images directly in DIR (sorted by name), of class y; other files counted */
static void class_files(const char *dir, int32_t y, ImgList *l)
{
    struct dirent **e;
    int n = entries(dir, &e);
    for (int i = 0; i < n; i++) {
        char *p = xasprintf("%s/%s", dir, e[i]->d_name);
        if (is_image(e[i]->d_name) && !is_dir(p))
            add_file(l, p, y);
        else
            l->skipped++;
    }
}

/* A class subfolder's class: its name among the model's labels, else a number below K */
static int32_t folder_class(const ImgModel *m, const char *src, const char *name)
{
    for (int64_t c = 0; m->labels && c < m->K; c++)
        if (!strcmp(m->labels[c], name))
            return (int32_t)c;
    char *end;
    long c = strtol(name, &end, 10);
    if (!m->labels && !*end && end != name && c >= 0 && c < m->K)
        return (int32_t)c;
    error_input("data images: %s/%s: a folder of no class the model has (%s)", src, name,
                m->labels ? "its labels name them" : xasprintf("the classes are 0 to %lld",
                                                               (long long)m->K - 1));
}

/* SRC's class folders' images, class by class in the model's order; each class's last
 * frac of files (by name) into val when it is not NULL */
static void labeled_files(const ImgModel *m, const char *src, double frac, ImgList *tr,
                          ImgList *va)
{
    struct dirent **e;
    int n = entries(src, &e);
    ImgList *by = xcalloc((size_t)m->K, sizeof *by);
    for (int i = 0; i < n; i++) {
        char *p = xasprintf("%s/%s", src, e[i]->d_name);
        if (!is_dir(p)) {
            if (is_image(e[i]->d_name))
                error_input("data images: %s: an image outside a class folder (SRC holds a "
                            "folder a class: SRC/CLASS/IMAGE)", p);
            tr->skipped++;
            continue;
        }
        int32_t y = folder_class(m, src, e[i]->d_name);
        class_files(p, y, &by[y]);
        tr->skipped += by[y].skipped, by[y].skipped = 0;
    }
    for (int64_t c = 0; c < m->K; c++) {
        int64_t nv = va ? (int64_t)(frac * (double)by[c].n) : 0;
        for (int64_t i = 0; i < by[c].n; i++)
            add_file(i < by[c].n - nv ? tr : va, by[c].f[i].path, (int32_t)c);
    }
    if (!tr->n)
        error_input("data images: %s: no PNG or JPEG image in a class folder", src);
}

/* The images of L to DIR/NAME_x.npy [N, C, S, S] and their classes to DIR/NAME_y.npy
 * (labeled), or the files' names, one a line, to DIR/NAME_files.txt */
static void write_part(const ImgModel *m, const ImgList *l, const char *dir, const char *name,
                       int labeled)
{
    char *xp = xstrdup(data_stage(xasprintf("%s/%s_x.npy", dir, name)));
    FILE *f = fopen(xp, "wb");
    if (!f)
        error_input("%s: cannot create: %s", xp, strerror(errno));
    char h[128];
    memset(h, ' ', sizeof h);
    memcpy(h, "\x93NUMPY\x01\x00", 8);
    h[8] = (char)(sizeof h - 10), h[9] = 0;
    int hn = snprintf(h + 10, sizeof h - 10, "{'descr': '|u1', 'fortran_order': False, 'shape': "
                      "(%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "), }", l->n, m->C, m->S,
                      m->S);
    h[10 + hn] = ' ', h[sizeof h - 1] = '\n';
    size_t plane = (size_t)(m->S * m->S), bytes = plane * (size_t)m->C;
    unsigned char *chw = xcalloc(bytes, 1);
    int ok = fwrite(h, 1, sizeof h, f) == sizeof h;
    DataRows y = {0};
    FILE *names = NULL;
    if (labeled)
        data_rows_open(&y, dir, name, 1, (const char *[]){"y"}, (int64_t[]){0});
    else if (!(names = fopen(data_stage(xasprintf("%s/%s_files.txt", dir, name)), "w")))
        error_input("%s/%s_files.txt: cannot create: %s", dir, name, strerror(errno));
    for (int64_t i = 0; i < l->n; i++) {
        ImageU8 im;
        const char *why = image_read(l->f[i].path, &im);
        if (why)
            error_input("data images: %s: %s", l->f[i].path, why);
        image_convert(&im, (int)m->C);
        if (m->proc_file && (why = hf_image_proc_apply(&m->proc, &im)))
            error_input("data images: %s: %s (%s)", l->f[i].path, why, m->proc_file);
        else if (!m->proc_file)
            image_resize(&im, (int)m->S, (int)m->S, IMAGE_BILINEAR);
        for (size_t p = 0; p < plane; p++)   /* [S, S, C] -> [C, S, S] */
            for (int64_t c = 0; c < m->C; c++)
                chw[(size_t)c * plane + p] = im.px[p * (size_t)m->C + (size_t)c];
        free(im.px);
        ok &= fwrite(chw, 1, bytes, f) == bytes;
        if (labeled)
            data_rows_put(&y, (const int32_t *const[]){&l->f[i].y});
        else
            ok &= fprintf(names, "%s\n", l->f[i].path) > 0;
    }
    if (!ok || fflush(f) != 0 || fsync(fileno(f)) != 0 || fclose(f) != 0 ||
        (names && fclose(names) != 0))
        error_input("%s: cannot write: %s", xp, strerror(errno));
    if (labeled)
        data_rows_close(&y);
    free(chw);
}

/* DIR, made where it is not; one made here is removed at exit unless it holds the
 * committed arrays (an image that cannot be read leaves nothing behind; data_stage's
 * .part files, registered later, go first) */
static const char *made_dir;
static void remove_made_dir(void)
{
    if (made_dir)
        rmdir(made_dir);   /* (fails, as it should, once it holds the arrays) */
}
static void make_out_dir(const char *dir)
{
    if (access(dir, F_OK) != 0) {
        made_dir = dir;
        atexit(remove_made_dir);
    }
    if (rt_mkdir_p(dir) != 0)
        cannot_write("data images", dir);
}

int data_images(int argc, char **argv)
{
    ImgArgs a;
    parse_args(argc, argv, &a);
    ImgModel m = read_model(a.model);
    m.proc_file = hf_image_proc_load(a.processor, a.model, m.S, &m.proc);
    ImgList tr = {0}, va = {0};
    if (a.unlabeled) {
        class_files(a.src, 0, &tr);
        if (!tr.n)
            error_input("data images: %s: no PNG or JPEG image in the folder", a.src);
    } else if (a.val) {
        labeled_files(&m, a.src, 0, &tr, NULL);
        ImgList vs = {0};
        labeled_files(&m, a.val, 0, &vs, NULL);
        va = vs;
    } else
        labeled_files(&m, a.src, a.val_frac, &tr, a.val_frac > 0 ? &va : NULL);
    make_out_dir(a.dir);
    write_part(&m, &tr, a.dir, a.unlabeled ? "test" : "train", !a.unlabeled);
    if (va.n)
        write_part(&m, &va, a.dir, "val", 1);
    data_commit();
    printf("trainc: data images: %s%s -> %s: %" PRId64 " %s%s images [%" PRId64 ", %" PRId64
           ", %" PRId64 "]%s%s%s\n", a.src, a.val ? xasprintf(" and %s", a.val) : "", a.dir, tr.n,
           a.unlabeled ? "test" : "train", va.n ? xasprintf(" + %" PRId64 " val", va.n) : "",
           m.C, m.S, m.S, m.proc_file ? xasprintf(" (%s: %s)", m.proc_file,
           hf_image_proc_says(&m.proc)) : "", a.unlabeled ? xasprintf(" (their files in order: %s/test_files.txt; "
           "--predict %s/test_x.npy)", a.dir, a.dir) : "",
           tr.skipped + va.skipped ? xasprintf("; %" PRId64 " other files left out (not .png, "
           ".jpg or .jpeg)", tr.skipped + va.skipped) : "");
    return 0;
}
