/* hf_io.c: the pieces `trainc import hf` and `trainc export hf` share (hf.h): a
 * Hugging Face folder's safetensors tensors (one file or a sharded index) read as
 * fp32, a weights file written from planned tensors, config.json's keys checked off
 * as they are read, and JSON printed in the example specs' layout. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cmd.h"
#include "hf.h"

/* ---- reading safetensors ---------------------------------------------------- */

char *hf_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        error_input("%s: cannot read: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *s = xcalloc(cap, 1);
    size_t r;
    while ((r = fread(s + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (n + 1 == cap) {
            s = realloc(s, cap *= 2);
            if (!s)
                die("out of memory reading %s", path);
        }
    }
    fclose(f);
    s[n] = 0;
    if (len)
        *len = n;
    return s;
}

/* A JSON file parsed (NULL when it is not JSON); its text freed. */
static cJSON *parse_file(const char *path)
{
    char *text = hf_slurp(path, NULL);
    cJSON *root = cJSON_Parse(text);
    free(text);
    return root;
}

static void read_exact(int fd, void *buf, size_t n, uint64_t at, const char *path)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(at + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            error_input("%s: cannot read: %s", path, r < 0 ? strerror(errno) : "the file is short");
        got += (size_t)r;
    }
}

/* One tensor entry of a header: dtype, shape, offsets checked against the file. */
static void add_entry(HfWeights *w, int file, const cJSON *e, uint64_t data0, uint64_t size)
{
    const char *path = w->paths[file];
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > 4 ||
        !cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
        error_input("%s: tensor '%s': not a safetensors entry (dtype, shape, data_offsets)", path,
                    e->string);
    if (hf_find(w, e->string))
        error_input("%s: tensor '%s' is stored twice", path, e->string);
    w->t = realloc(w->t, (size_t)(w->n + 1) * sizeof *w->t);
    if (!w->t)
        die("out of memory");
    HfTensor *t = &w->t[w->n++];
    memset(t, 0, sizeof *t);
    t->name = xstrdup(e->string);
    t->file = file;
    snprintf(t->dtype, sizeof t->dtype, "%s", dt->valuestring);
    t->rank = cJSON_GetArraySize(sh);
    t->numel = 1;
    /* every number checked before use: the sizes then cannot overflow (2^40 elements of
     * at most 8 bytes, offsets within the file) */
    for (int d = 0; d < t->rank; d++) {
        const cJSON *v = cJSON_GetArrayItem(sh, d);
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 0x1p40) ||
            v->valuedouble != floor(v->valuedouble) || (double)t->numel * v->valuedouble > 0x1p40)
            error_input("%s: tensor '%s': shape[%d] is not a size", path, t->name, d);
        t->shape[d] = (int64_t)v->valuedouble;
        t->numel *= t->shape[d];
    }
    for (int k = 0; k < 2; k++) {
        const cJSON *v = cJSON_GetArrayItem(off, k);
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= (double)size))
            error_input("%s: tensor '%s': data_offsets[%d] is not an offset in the file", path,
                        t->name, k);
    }
    uint64_t a = (uint64_t)cJSON_GetArrayItem(off, 0)->valuedouble;
    uint64_t b = (uint64_t)cJSON_GetArrayItem(off, 1)->valuedouble;
    float probe;
    /* I64: a batchnorm's num_batches_tracked (hf_resnet.c reads it; hf_read refuses it) */
    int esize = strcmp(t->dtype, "I64") ? rt_st_to_f32(&probe, (unsigned char[8]){0}, 0, t->dtype) : 8;
    if (esize < 0)
        error_input("%s: tensor '%s' is stored as %s: trainc reads F32, F16, BF16 and F64", path,
                    t->name, t->dtype);
    if (b < a || b - a != (uint64_t)t->numel * (uint64_t)esize || data0 + b > size)
        error_input("%s: tensor '%s': its data_offsets [%llu, %llu) do not fit its shape and the "
                    "file", path, t->name, (unsigned long long)a, (unsigned long long)b);
    t->at = data0 + a;
    t->bytes = b - a;
}

void hf_weights_file(HfWeights *w, const char *path)
{
    int file = w->n_paths++;
    w->paths = realloc(w->paths, (size_t)w->n_paths * sizeof *w->paths);
    w->fds = realloc(w->fds, (size_t)w->n_paths * sizeof *w->fds);
    if (!w->paths || !w->fds)
        die("out of memory");
    w->paths[file] = xstrdup(path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        error_input("%s: cannot read: %s", path, strerror(errno));
    w->fds[file] = fd;   /* kept: hf_read reads each tensor from it */
    unsigned char len8[8];
    if ((uint64_t)st.st_size < 8)
        error_input("%s: not a safetensors file", path);
    read_exact(fd, len8, 8, 0, path);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n |= (uint64_t)len8[i] << (8 * i);
    if (n < 2 || n > (uint64_t)st.st_size - 8 || n > 100u << 20)
        error_input("%s: not a safetensors file (header length %llu)", path, (unsigned long long)n);
    char *h = xcalloc(n + 1, 1);
    read_exact(fd, h, n, 8, path);
    cJSON *root = cJSON_Parse(h);
    if (!cJSON_IsObject(root))
        error_input("%s: not a safetensors file (the header is not a JSON object)", path);
    for (const cJSON *e = root->child; e; e = e->next)
        if (strcmp(e->string, "__metadata__"))
            add_entry(w, file, e, 8 + n, (uint64_t)st.st_size);
    cJSON_Delete(root);
    free(h);
}

void hf_weights_dir(HfWeights *w, const char *dir)
{
    char *one = xasprintf("%s/model.safetensors", dir);
    char *index = xasprintf("%s/model.safetensors.index.json", dir);
    if (access(one, F_OK) == 0) {
        hf_weights_file(w, one);
        return;
    }
    if (access(index, F_OK) != 0) {
        char *bin = xasprintf("%s/pytorch_model.bin", dir);
        error_input("%s: no model.safetensors or model.safetensors.index.json%s", dir,
                    access(bin, F_OK) == 0 ? " (pytorch_model.bin is a pickle, which trainc does "
                                             "not read: save the model with safe_serialization)"
                                           : "");
    }
    cJSON *root = parse_file(index);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(map))
        error_input("%s: no \"weight_map\" object", index);
    /* each shard once, in the order the map first names it */
    const char **files = xcalloc((size_t)cJSON_GetArraySize(map) + 1, sizeof *files);
    int nf = 0;
    for (const cJSON *e = map->child; e; e = e->next) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/'))
            error_input("%s: weight_map[\"%s\"]: a file name in the folder expected", index,
                        e->string);
        int k = 0;
        while (k < nf && strcmp(files[k], e->valuestring))
            k++;
        if (k == nf)
            files[nf++] = e->valuestring;
    }
    for (int k = 0; k < nf; k++)
        hf_weights_file(w, xasprintf("%s/%s", dir, files[k]));
    for (const cJSON *e = map->child; e; e = e->next) {
        HfTensor *t = hf_find(w, e->string);
        if (!t || strcmp(strrchr(w->paths[t->file], '/') + 1, e->valuestring))
            error_input("%s: weight_map puts '%s' in %s, which does not hold it", index, e->string,
                        e->valuestring);
    }
}

HfTensor *hf_find(HfWeights *w, const char *name)
{
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->t[i].name, name))
            return &w->t[i];
    return NULL;
}

float *hf_read(const HfWeights *w, const HfTensor *t)
{
    const char *path = w->paths[t->file];
    unsigned char *raw = malloc(t->bytes ? t->bytes : 1);
    float *x = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *x);
    if (!raw || !x)
        die("out of memory reading %s from %s", t->name, path);
    if (!strcmp(t->dtype, "I64"))
        error_input("%s: tensor '%s' is stored as I64 (a count), not as the floats of a weight",
                    path, t->name);
    read_exact(w->fds[t->file], raw, t->bytes, t->at, path);
    rt_st_to_f32(x, raw, t->numel, t->dtype);
    free(raw);
    return x;
}

/* ---- writing ------------------------------------------------------------------ */

void hf_out_add(HfOut *o, const char *name, int rank, const int64_t *shape)
{
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 64;
        o->p = realloc(o->p, (size_t)o->cap * sizeof *o->p);
        if (!o->p)
            die("out of memory");
    }
    rt_param *p = &o->p[o->n++];
    memset(p, 0, sizeof *p);
    p->name = xstrdup(name);
    p->rank = rank;
    p->numel = 1;
    for (int d = 0; d < rank; d++) {
        p->shape[d] = shape[d];
        p->numel *= shape[d];
    }
}

rt_st_out *hf_out_open(const HfOut *o, const char *path)
{
    rt_model m = {0};
    m.n_params = o->n;
    m.params = o->p;
    return rt_st_open(path, &m);
}

/* ---- config.json -------------------------------------------------------------- */

void hf_cfg_load(HfCfg *c, const char *path)
{
    memset(c, 0, sizeof *c);
    c->file = path;
    if (access(path, F_OK) != 0)
        error_input("%s: no such file (a Hugging Face model folder holds config.json)", path);
    c->root = parse_file(path);
    if (!cJSON_IsObject(c->root))
        error_input("%s: not a JSON object", path);
    c->at = "";
    c->seen = xcalloc((size_t)cJSON_GetArraySize(c->root) + 1, sizeof *c->seen);
}

void hf_cfg_sub(HfCfg *sub, HfCfg *c, const char *key)
{
    const cJSON *v = hf_cfg_get(c, key);
    if (!cJSON_IsObject(v))
        hf_cfg_error(c, key, "an object expected");
    memset(sub, 0, sizeof *sub);
    sub->file = c->file;
    sub->at = xasprintf("%s%s.", c->at, key);
    sub->root = (cJSON *)v;
    sub->seen = xcalloc((size_t)cJSON_GetArraySize(v) + 1, sizeof *sub->seen);
}

void hf_cfg_default(HfCfg *c, const char *key, double v)
{
    if (cJSON_GetObjectItemCaseSensitive(c->root, key))
        return;
    cJSON_AddNumberToObject(c->root, key, v);
    c->seen = realloc(c->seen, (size_t)(cJSON_GetArraySize(c->root) + 1) * sizeof *c->seen);
    if (!c->seen)
        die("out of memory");
}

void hf_cfg_error(const HfCfg *c, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    error_at(c->file, xasprintf("$.%s%s", c->at, key), "%s", msg);
}

const cJSON *hf_cfg_get(HfCfg *c, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->root, key);
    if (!v)
        return NULL;
    int k = 0;
    while (k < c->n_seen && strcmp(c->seen[k], key))
        k++;
    if (k == c->n_seen)
        c->seen[c->n_seen++] = v->string;
    return cJSON_IsNull(v) ? NULL : v;
}

int64_t hf_cfg_int(HfCfg *c, const char *key, int64_t dflt)
{
    const cJSON *v = hf_cfg_get(c, key);
    if (!v && dflt < 0)
        hf_cfg_error(c, key, "missing (trainc needs it)");
    if (!v)
        return dflt;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 ||
        v->valuedouble > 0x1p40)
        hf_cfg_error(c, key, "a positive integer (at most 2^40) expected");
    return (int64_t)v->valuedouble;
}

double hf_cfg_num(HfCfg *c, const char *key, double dflt)
{
    const cJSON *v = hf_cfg_get(c, key);
    if (v && !cJSON_IsNumber(v))
        hf_cfg_error(c, key, "a number expected");
    return v ? v->valuedouble : dflt;
}

int hf_cfg_bool(HfCfg *c, const char *key, int dflt)
{
    const cJSON *v = hf_cfg_get(c, key);
    if (v && !cJSON_IsBool(v))
        hf_cfg_error(c, key, "true or false expected");
    return v ? cJSON_IsTrue(v) : dflt;
}

const char *hf_cfg_str(HfCfg *c, const char *key, const char *dflt)
{
    const cJSON *v = hf_cfg_get(c, key);
    if (v && !cJSON_IsString(v))
        hf_cfg_error(c, key, "a string expected");
    return v ? v->valuestring : dflt;
}

const char *hf_cfg_rest(const HfCfg *c, const char *const *ignored)
{
    for (const cJSON *e = c->root->child; e; e = e->next) {
        int known = 0;
        for (int k = 0; k < c->n_seen && !known; k++)
            known = !strcmp(c->seen[k], e->string);
        for (int k = 0; ignored[k] && !known; k++)
            known = !strcmp(ignored[k], e->string);
        if (!known)
            return e->string;
    }
    return NULL;
}

/* ---- JSON out ------------------------------------------------------------------ */

/* X in the fewest digits that read back the same double, into s[40]. */
static void shortest(char *s, double x)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(s, 40, "%.*g", prec, x);
        if (strtod(s, NULL) == x)
            break;
    }
}

cJSON *hf_float(double x)
{
    char s[44];
    shortest(s, x);
    if (!strpbrk(s, ".e"))
        strcat(s, ".0");
    return cJSON_CreateRaw(s);
}

static void print_number(FILE *f, double x)
{
    char s[40];
    if (x == floor(x) && fabs(x) < 1e15) {
        fprintf(f, "%.0f", x);
        return;
    }
    shortest(s, x);
    fputs(s, f);
}

static void print_value(FILE *f, const cJSON *v, int depth, int indent, int open);

static void print_string(FILE *f, const char *s)
{
    cJSON *tmp = cJSON_CreateString(s);
    char *q = cJSON_PrintUnformatted(tmp);
    fputs(q, f);
    free(q);
    cJSON_Delete(tmp);
}

/* open: this container puts an element a line. */
static void print_container(FILE *f, const cJSON *v, int depth, int indent, int open)
{
    int obj = cJSON_IsObject(v);
    fputc(obj ? '{' : '[', f);
    for (const cJSON *e = v->child; e; e = e->next) {
        if (open)
            fprintf(f, "\n%*s", indent + 2, "");
        if (obj) {
            print_string(f, e->string);
            fputs(": ", f);
        }
        int child_open = (cJSON_IsObject(e) && obj &&
                          (depth < 1 || !strcmp(e->string, "inputs"))) ||
                         (cJSON_IsArray(e) && obj &&
                          (!strcmp(e->string, "layers") || !strcmp(e->string, "body")));
        print_value(f, e, depth + 1, open ? indent + 2 : indent, child_open);
        if (e->next)
            fputs(open ? "," : ", ", f);
    }
    if (open)
        fprintf(f, "\n%*s", indent, "");
    fputc(obj ? '}' : ']', f);
}

static void print_value(FILE *f, const cJSON *v, int depth, int indent, int open)
{
    if (cJSON_IsObject(v) || cJSON_IsArray(v))
        print_container(f, v, depth, indent, open);
    else if (cJSON_IsNumber(v))
        print_number(f, v->valuedouble);
    else if (cJSON_IsString(v))
        print_string(f, v->valuestring);
    else if (cJSON_IsRaw(v))
        fputs(v->valuestring, f);
    else
        fputs(cJSON_IsTrue(v) ? "true" : cJSON_IsFalse(v) ? "false" : "null", f);
}

void hf_print_json(FILE *f, const cJSON *v)
{
    print_value(f, v, 0, 0, 1);
    fputc('\n', f);
}

char *hf_json_text(const cJSON *v)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        die("out of memory");
    hf_print_json(f, v);
    fclose(f);
    return text;
}

cJSON *hf_layer(cJSON *list, const char *op, const char *name)
{
    cJSON *l = cJSON_CreateObject();
    cJSON_AddStringToObject(l, "op", op);
    if (name)
        cJSON_AddStringToObject(l, "name", name);
    cJSON_AddItemToArray(list, l);
    return l;
}

cJSON *hf_layer_n(cJSON *list, const char *op, const char *name, const char *key, double v)
{
    cJSON *l = hf_layer(list, op, name);
    cJSON_AddNumberToObject(l, key, v);
    return l;
}

char *hf_layer_name(const Layer *l, int idx, const char *prefix)
{
    return l->name ? xasprintf("%s%s", prefix, l->name) : xasprintf("%s%d", prefix, idx);
}

void hf_write_text(const char *cmd, const char *path, const char *text)
{
    FILE *f = rt_tmp_open(path);
    if (!f)
        cannot_write(cmd, path);
    fputs(text, f);
    if (rt_tmp_commit(f, path) != 0)
        cannot_write(cmd, path);
}

int hf_copy_file(const char *cmd, const char *src, const char *dst)
{
    FILE *in = fopen(src, "rb");
    if (!in)
        error_input("%s: %s: %s", cmd, src, strerror(errno));
    FILE *out = rt_tmp_open(dst);
    if (!out)
        cannot_write(cmd, dst);
    char buf[1 << 16];
    size_t r;
    while ((r = fread(buf, 1, sizeof buf, in)) > 0)
        fwrite(buf, 1, r, out);
    fclose(in);
    if (rt_tmp_commit(out, dst) != 0)
        cannot_write(cmd, dst);
    return 0;
}

/* src [d0, d1] -> dst [d1, d0] (GPT-2's Conv1D weights, either way) */
void hf_transpose(float *dst, const float *src, int64_t d0, int64_t d1)
{
    for (int64_t u = 0; u < d0; u++)
        for (int64_t v = 0; v < d1; v++)
            dst[v * d0 + u] = src[u * d1 + v];
}

/* ---- train.lora's adapters -------------------------------------------------------- */

const char *hf_lora_part(const char *name)
{
    const char *a = strstr(name, ".lora_A.weight"), *b = strstr(name, ".lora_B.weight");
    const char *at = a ? a : b;
    return at && strlen(at) == strlen(".lora_A.weight") ? at : NULL;
}

HfTensor *hf_lora_adapter(HfWeights *w, const HfTensor *t, const char *part, int64_t rank)
{
    size_t n = strlen(t->name);
    if (t->rank != 2 || n < 8 || strcmp(t->name + n - 7, ".weight"))
        return NULL;   /* (a bias, a norm, the experts: never adapted) */
    char *name = xasprintf("%.*s.%s.weight", (int)(n - strlen(".weight")), t->name, part);
    HfTensor *a = hf_find(w, name);
    int64_t want[2] = {part[5] == 'A' ? rank : t->shape[0], part[5] == 'A' ? t->shape[1] : rank};
    if (a && (a->rank != 2 || a->shape[0] != want[0] || a->shape[1] != want[1]))
        error_input("%s: tensor '%s' is not [%lld, %lld], the adapter train.lora's rank %lld "
                    "gives '%s'", w->paths[0], name, (long long)want[0], (long long)want[1],
                    (long long)rank, t->name);
    free(name);
    return a;
}

void hf_lora_merge(HfWeights *w, const HfTensor *t, float *x, int64_t rank, double scale)
{
    if (!rank || t->rank != 2 || hf_lora_part(t->name))
        return;
    HfTensor *ta = hf_lora_adapter(w, t, "lora_A", rank), *tb = hf_lora_adapter(w, t, "lora_B", rank);
    if (!ta || !tb)
        return;
    float *a = hf_read(w, ta), *b = hf_read(w, tb);
    int64_t out = t->shape[0], in = t->shape[1];
    double *row = xcalloc((size_t)in, sizeof *row);   /* (B A)'s row o, over A's rows */
    for (int64_t o = 0; o < out; o++) {
        memset(row, 0, (size_t)in * sizeof *row);
        for (int64_t k = 0; k < rank; k++)
            for (int64_t i = 0; i < in; i++)
                row[i] += (double)b[o * rank + k] * a[k * in + i];
        for (int64_t i = 0; i < in; i++)
            x[o * in + i] = (float)((double)x[o * in + i] + row[i] * scale);
    }
    free(row);
    free(a);
    free(b);
}
