/* hf_join.c: one table, both ways, for the Hugging Face architectures whose tensors map
 * to trainc's one for one or by stacking (hf_vit.c, hf_bert.c): each of trainc's
 * tensors with the transformers tensors it is made of (HfJoin). Import plans the table
 * against a checkpoint's tensors (their names and shapes checked) and writes trainc's,
 * drawing anew what the checkpoint lacks (a new head); export plans it against trainc's
 * weights and writes transformers', matching the spec's layers to the architecture's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cmd.h"
#include "hf.h"
#include "ops/op.h"

void hf_join(hf_join_fn fn, void *ctx, char *ours, int rank, const int64_t *shape, int n,
             const char *const *theirs, int their_rank, const int64_t *their_shape)
{
    HfJoin j = {.ours = ours, .rank = rank, .n = n, .their_rank = their_rank};
    memcpy(j.shape, shape, (size_t)rank * sizeof *shape);
    memcpy(j.their_shape, their_shape, (size_t)their_rank * sizeof *shape);
    for (int k = 0; k < n; k++)
        j.theirs[k] = xstrdup(theirs[k]);
    fn(ctx, &j);
    for (int k = 0; k < n; k++)
        free(j.theirs[k]);
    free(ours);
}

void hf_join_same(hf_join_fn fn, void *ctx, char *ours, const char *theirs, int rank,
                  const int64_t *shape)
{
    hf_join(fn, ctx, ours, rank, shape, 1, &theirs, rank, shape);
}

void hf_join_fresh(hf_join_fn fn, void *ctx, char *ours, int rank, const int64_t *shape,
                   int fresh, double scale)
{
    HfJoin j = {.ours = ours, .rank = rank, .fresh = fresh, .scale = scale};
    memcpy(j.shape, shape, (size_t)rank * sizeof *shape);
    fn(ctx, &j);
    free(ours);
}

void hf_join_fresh_linear(hf_join_fn fn, void *ctx, const char *ours, int64_t out, int64_t in,
                          double std)
{
    int kind = std < 0 ? HF_FRESH_UNIFORM : HF_FRESH_NORMAL;
    double bound = 1 / sqrt((double)in);
    hf_join_fresh(fn, ctx, xasprintf("%s.weight", ours), 2, (int64_t[]){out, in}, kind,
                  std < 0 ? bound : std);
    hf_join_fresh(fn, ctx, xasprintf("%s.bias", ours), 1, &out, kind, std < 0 ? bound : 0);
}

void hf_join_resampled(hf_join_fn fn, void *ctx, char *ours, int rank, const int64_t *shape,
                       const char *theirs, int their_rank, const int64_t *their_shape,
                       void (*resample)(const float *, const int64_t *, float *, const int64_t *))
{
    HfJoin j = {.ours = ours, .rank = rank, .n = 1, .theirs = {xstrdup(theirs)},
                .their_rank = their_rank, .resample = resample};
    memcpy(j.shape, shape, (size_t)rank * sizeof *shape);
    memcpy(j.their_shape, their_shape, (size_t)their_rank * sizeof *shape);
    fn(ctx, &j);
    free(j.theirs[0]);
    free(ours);
}

void hf_join_rows(hf_join_fn fn, void *ctx, char *ours, const char *theirs, int64_t rows,
                  int64_t cols, int64_t skip)
{
    HfJoin j = {.ours = ours, .rank = 2, .shape = {rows, cols}, .n = 1, .theirs = {xstrdup(theirs)},
                .their_rank = 2, .their_shape = {rows + skip, cols}, .skip = skip};
    fn(ctx, &j);
    free(j.theirs[0]);
    free(ours);
}

void hf_join_linear_bias(hf_join_fn fn, void *ctx, const char *ours, const char *theirs,
                         int64_t out, int64_t in, int bias)
{
    hf_join_same(fn, ctx, xasprintf("%s.weight", ours), xasprintf("%s.weight", theirs), 2,
                 (int64_t[]){out, in});
    if (bias)
        hf_join_same(fn, ctx, xasprintf("%s.bias", ours), xasprintf("%s.bias", theirs), 1, &out);
}

void hf_join_linear(hf_join_fn fn, void *ctx, const char *ours, const char *theirs, int64_t out,
                    int64_t in)
{
    hf_join_linear_bias(fn, ctx, ours, theirs, out, in, 1);
}

void hf_join_layernorm_bias(hf_join_fn fn, void *ctx, const char *ours, const char *theirs,
                            int64_t D, int bias)
{
    hf_join_same(fn, ctx, xasprintf("%s.weight", ours), xasprintf("%s.weight", theirs), 1, &D);
    if (bias)
        hf_join_same(fn, ctx, xasprintf("%s.bias", ours), xasprintf("%s.bias", theirs), 1, &D);
}

void hf_join_layernorm(hf_join_fn fn, void *ctx, const char *ours, const char *theirs, int64_t D)
{
    hf_join_layernorm_bias(fn, ctx, ours, theirs, D, 1);
}

/* ---- import -------------------------------------------------------------------- */

/* The checkpoint's tensor NAME with shape RANK, SHAPE, marked used; exit 1 without it */
static const HfTensor *their_tensor(HfJoinImport *im, const char *name, int rank,
                                    const int64_t *shape)
{
    HfTensor *f = hf_find(&im->w, name);
    if (!f)
        error_input("%s: no tensor '%s' in the weights (config.json's model needs it)",
                    im->dir, name);
    int ok = f->rank == rank;
    for (int d = 0; ok && d < f->rank; d++)
        ok = f->shape[d] == shape[d];
    if (!ok)
        error_input("%s: tensor '%s' has not the shape config.json's model needs (%s)", im->dir,
                    name, shape_str(rank, shape));
    f->used = 1;
    return f;
}

void hf_join_plan_import(void *ctx, const HfJoin *j)
{
    HfJoinImport *im = ctx;
    size_t n = (size_t)im->out.n + 1;
    im->src = realloc(im->src, n * 3 * sizeof *im->src);
    im->skip = realloc(im->skip, n * sizeof *im->skip);
    im->fresh = realloc(im->fresh, n * sizeof *im->fresh);
    im->scale = realloc(im->scale, n * sizeof *im->scale);
    im->resample = realloc(im->resample, n * sizeof *im->resample);
    if (!im->src || !im->skip || !im->fresh || !im->scale || !im->resample)
        die("out of memory");
    im->resample[im->out.n] = j->resample;
    im->fresh[im->out.n] = j->fresh;
    im->scale[im->out.n] = j->scale;
    im->n_fresh += j->fresh != HF_FRESH_NONE;
    for (int k = 0; k < 3; k++)
        im->src[im->out.n * 3 + k] =
            k < j->n ? their_tensor(im, j->theirs[k], j->their_rank, j->their_shape) : NULL;
    im->skip[im->out.n] = j->skip * (j->their_rank > 1 ? j->their_shape[1] : 1);
    hf_out_add(&im->out, j->ours, j->rank, j->shape);
}

/* one element of KIND at SCALE */
static double fresh_draw(int kind, double scale, rt_rng *rng)
{
    if (kind == HF_FRESH_ONES)
        return 1;
    double z = kind == HF_FRESH_UNIFORM ? 2 * rt_rng_uniform(rng) - 1 : rt_rng_normal(rng);
    while (kind == HF_FRESH_TRUNC && fabs(z) > 2)
        z = rt_rng_normal(rng);
    return scale * z;
}

/* P's elements drawn: normal(0, SCALE) (zeros at 0), that normal within 2 SCALE, uniform
 * in [-SCALE, SCALE), or ones */
void hf_fresh_put(rt_st_out *o, const rt_param *p, int kind, double scale, rt_rng *rng)
{
    float *x = xcalloc((size_t)p->numel, sizeof *x);
    for (int64_t e = 0; scale > 0 && e < p->numel; e++)
        x[e] = (float)fresh_draw(kind, scale, rng);
    rt_st_put(o, x, p->numel);
    free(x);
}

void hf_join_write_import(const HfJoinImport *im, const char *path)
{
    rt_st_out *o = hf_out_open(&im->out, path);
    if (!o)
        cannot_write("import", path);
    rt_rng rng;
    rt_rng_seed(&rng, HF_FRESH_SEED);
    for (int i = 0; i < im->out.n; i++) {
        if (im->fresh[i] != HF_FRESH_NONE)
            hf_fresh_put(o, &im->out.p[i], im->fresh[i], im->scale[i], &rng);
        for (int k = 0; k < 3 && im->src[i * 3 + k]; k++) {
            const HfTensor *t = im->src[i * 3 + k];
            float *x = hf_read(&im->w, t);
            if (im->resample[i]) {
                const rt_param *p = &im->out.p[i];
                float *y = xcalloc((size_t)p->numel, sizeof *y);
                im->resample[i](x, t->shape, y, p->shape);
                rt_st_put(o, y, p->numel);
                free(y);
            } else
                rt_st_put(o, x + im->skip[i], t->numel - im->skip[i]);
            free(x);
        }
    }
    if (rt_st_close(o) != 0)
        cannot_write("import", path);
}

void hf_join_all_used(const HfWeights *w, const char *dir, const char *arch)
{
    for (int i = 0; i < w->n; i++)
        if (!w->t[i].used)
            error_input("%s: tensor '%s' (in %s) has no place in the %s config.json describes",
                        dir, w->t[i].name, w->paths[w->t[i].file], arch);
}

int hf_join_leave_out(HfWeights *w, const char *prefix, int outside)
{
    int n = 0;
    for (int i = 0; i < w->n; i++) {
        int under = strncmp(w->t[i].name, prefix, strlen(prefix)) == 0;
        if (!w->t[i].used && under != outside)
            w->t[i].used = 1, n++;
    }
    return n;
}

/* ---- export -------------------------------------------------------------------- */

/* one more output tensor: ours (NULL: e->fill's value) from element AT, SKIP zeros first */
static void export_add(HfJoinExport *e, const HfTensor *t, int64_t at, int64_t skip,
                       const char *theirs, int rank, const int64_t *shape)
{
    e->src = realloc(e->src, (size_t)(e->out.n + 1) * sizeof *e->src);
    e->at = realloc(e->at, (size_t)(e->out.n + 1) * sizeof *e->at);
    e->skip = realloc(e->skip, (size_t)(e->out.n + 1) * sizeof *e->skip);
    if (!e->src || !e->at || !e->skip)
        die("out of memory");
    e->src[e->out.n] = t;
    e->at[e->out.n] = at;
    e->skip[e->out.n] = skip;
    hf_out_add(&e->out, theirs, rank, shape);
}

void hf_join_plan_export(void *ctx, const HfJoin *j)
{
    HfJoinExport *e = ctx;
    HfTensor *t = hf_find(&e->w, j->ours);
    if (!t)
        error_input("%s: no tensor '%s' (the spec's model has it)", e->w.paths[0], j->ours);
    int ok = t->rank == j->rank;
    for (int d = 0; ok && d < t->rank; d++)
        ok = t->shape[d] == j->shape[d];
    if (!ok)
        error_input("%s: tensor '%s' has not the spec's shape %s", e->w.paths[0], j->ours,
                    shape_str(j->rank, j->shape));
    t->used = 1;
    int64_t each = t->numel / j->n;
    for (int k = 0; k < j->n; k++)
        export_add(e, t, k * each, j->skip * (j->their_rank > 1 ? j->their_shape[1] : 1),
                   j->theirs[k], j->their_rank, j->their_shape);
}

void hf_join_export_filled(HfJoinExport *e, const char *theirs, int rank, const int64_t *shape,
                           float value)
{
    export_add(e, NULL, 0, 0, theirs, rank, shape);
    e->fill = realloc(e->fill, (size_t)e->out.n * sizeof *e->fill);
    if (!e->fill)
        die("out of memory");
    e->fill[e->out.n - 1] = value;
}

void hf_join_export_open(HfJoinExport *e, const Spec *s, const char *weights)
{
    hf_weights_file(&e->w, weights);
    if (s->train.has_lora)
        e->lora_rank = s->train.lora_rank, e->lora_scale = rt_lora_scale(&s->train);
}

void hf_join_export_adapters(HfJoinExport *e)
{
    HfWeights *w = &e->w;
    for (int i = 0; e->lora_rank && i < w->n; i++) {
        HfTensor *t = &w->t[i];
        if (!t->used || hf_lora_part(t->name))
            continue;
        HfTensor *a = hf_lora_adapter(w, t, "lora_A", e->lora_rank),
                 *b = hf_lora_adapter(w, t, "lora_B", e->lora_rank);
        if (!a != !b)
            error_input("%s: '%s' has a LoRA adapter's %s and not its %s", w->paths[0], t->name,
                        a ? "lora_A" : "lora_B", a ? "lora_B" : "lora_A");
        if (a)
            a->used = b->used = 1;
    }
    for (int i = 0; i < w->n; i++)
        if (!w->t[i].used && hf_lora_part(w->t[i].name))
            error_input("%s: tensor '%s' is a LoRA adapter %s", w->paths[0], w->t[i].name,
                        e->lora_rank ? "of no weight the export writes" : "and the spec has no "
                        "train.lora: give export the spec the run trained with (its adapters "
                        "are merged into their weights)");
}

void hf_join_write_export(const HfJoinExport *e, const char *path)
{
    rt_st_out *o = hf_out_open(&e->out, path);
    if (!o)
        cannot_write("export", path);
    const HfTensor *have = NULL;   /* (the parts of one tensor, q k v of qkv, read it once) */
    float *x = NULL;
    for (int i = 0; i < e->out.n; i++) {
        if (!e->src[i]) {   /* one value (hf_join_export_filled) */
            float *z = xcalloc((size_t)e->out.p[i].numel, sizeof *z);
            for (int64_t k = 0; k < e->out.p[i].numel; k++)
                z[k] = e->fill[i];
            rt_st_put(o, z, e->out.p[i].numel);
            free(z);
            continue;
        }
        if (e->src[i] != have) {
            free(x);
            x = hf_read(&e->w, have = e->src[i]);
            hf_lora_merge((HfWeights *)&e->w, have, x, e->lora_rank, e->lora_scale);
        }
        int64_t n = e->out.p[i].numel - e->skip[i];
        if (e->skip[i]) {   /* the rows transformers holds before trainc's: zeros */
            float *z = xcalloc((size_t)e->skip[i], sizeof *z);
            rt_st_put(o, z, e->skip[i]);
            free(z);
        }
        rt_st_put(o, x + e->at[i], n);
    }
    free(x);
    if (rt_st_close(o) != 0)
        cannot_write("export", path);
}

void hf_join_text_export(const HfJoinExport *e, cJSON *config, const char *type,
                         const char *weights, const char *tok, const char *out)
{
    char *text = hf_json_text(config);
    if (rt_mkdir_p(out) != 0)
        cannot_write("export", out);
    hf_join_write_export(e, xasprintf("%s/model.safetensors", out));
    hf_write_text("export", xasprintf("%s/config.json", out), text);
    if (tok)
        hf_copy_file("export", tok, xasprintf("%s/tokenizer.json", out));
    printf("trainc: export: %s -> %s/config.json (%s), %s/model.safetensors (%d tensors)%s\n",
           weights, out, type, out, e->out.n, tok ? xasprintf(", %s/tokenizer.json", out) : "");
}

/* ---- export: a spec's layers matched to the architecture's ---------------------- */

const Layer *hf_want(const Spec *s, const HfLayout *h, const Layer *l, const char *at, int op)
{
    if (!l || l->op != op)
        error_at(s->model_file, l ? l->path : at, "%s where export hf's %s has %s (its layers: "
                 "%s)", l ? op_info[l->op].name : "nothing", h->arch, op_info[op].name, h->layers);
    return l;
}

void hf_refuse(const Spec *s, const HfLayout *h, const Layer *l, const char *what)
{
    error_at(s->model_file, l->path, "%s: %s has no place for it", what, h->arch);
}

void hf_match_norm(const Spec *s, const HfLayout *h, const Layer *l, const char *at, double *eps)
{
    hf_want(s, h, l, at, OP_LAYERNORM);
    if (!l->affine || !l->bias)
        hf_refuse(s, h, l, "a layernorm without its weight or bias");
    if (*eps && l->eps != *eps)
        hf_refuse(s, h, l, "a layernorm's eps other than the first's (the config has one "
                  "layer_norm_eps)");
    *eps = l->eps;
}

int64_t hf_match_linear(const Spec *s, const HfLayout *h, const Layer *l, const char *at,
                        int64_t out)
{
    hf_want(s, h, l, at, OP_LINEAR);
    if (!l->bias || l->tie)
        hf_refuse(s, h, l, l->tie ? "a tied linear" : "a linear without bias");
    if (out && l->out != out)
        hf_refuse(s, h, l, xasprintf("%lld outputs where the model is %lld wide",
                                     (long long)l->out, (long long)out));
    return l->out;
}

void hf_match_attention(const Spec *s, const HfLayout *h, const Layer *l, const char *at)
{
    hf_want(s, h, l, at, OP_ATTENTION);
    if (l->causal)
        hf_refuse(s, h, l, "a causal mask");
    if ((l->kv_heads && l->kv_heads != l->heads) || l->head_dim || l->window || l->rope.theta ||
        l->qk_norm || l->att_scale || l->att_softcap || l->il.every)
        hf_refuse(s, h, l, "an attention option (kv_heads, head_dim, window, rope, qk_norm, "
                  "scale, softcap, interleave)");
}

char *hf_match_residual(const Spec *s, const HfLayout *h, const Layer *l, const char *at, int n)
{
    hf_want(s, h, l, at, OP_RESIDUAL);
    if (l->n_shortcut || l->n_body != n)
        hf_refuse(s, h, l, xasprintf("a residual of other than %d layers (or with a shortcut)", n));
    return l->name ? xasprintf("%s.", l->name) : xstrdup("");
}
