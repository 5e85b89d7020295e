/* hf_adapter.c: `trainc import hf DIR --adapter ADIR`: PEFT's LoRA adapter files
 * (ADIR/adapter_config.json, ADIR/adapter_model.safetensors) merged into the model's
 * weights as PEFT's merge_and_unload merges them: each adapted weight W gets
 * scale B A (transposed for GPT-2's Conv1D weights, stored [in, out], and for an
 * embedding's lora_embedding_A [r, rows] and lora_embedding_B [d, r]), with scale
 * lora_alpha / r (use_rslora: lora_alpha / sqrt(r)), r each adapter's rank (its A's
 * rows, so rank_pattern needs nothing more), summed in double and rounded once. An
 * embedding's or head's weight the file holds whole (base_layer.weight: PEFT saves
 * them beside adapters on those layers) and a module's tensors saved whole
 * (modules_to_save) replace the model's first. What such a merge cannot give (DoRA,
 * trained biases, other adapter types, alpha_pattern, a resized vocabulary) exits 1
 * naming it, before anything is written. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "hf.h"

/* adapter_config.json's keys that change nothing a merge computes: bookkeeping, the
 * adapters' initialization and dropout, and which modules were adapted (the tensors say) */
static const char *const harmless_keys[] = {
    "task_type", "base_model_name_or_path", "revision", "inference_mode", "auto_mapping",
    "init_lora_weights", "lora_dropout", "target_modules", "exclude_modules",
    "layers_to_transform", "layers_pattern", "rank_pattern", "loftq_config", "megatron_core",
    "eva_config", "corda_config", "runtime_config", "qalora_group_size", "peft_version",
    "fan_in_fan_out", NULL};

/* A value that leaves a feature off: absent, null, false, an empty list or object. */
static int off(const cJSON *v)
{
    return !v || cJSON_IsNull(v) || cJSON_IsFalse(v) || (cJSON_IsArray(v) && !cJSON_GetArraySize(v)) ||
           (cJSON_IsObject(v) && !v->child);
}

/* A key whose value must be off for a merge to be PEFT's. */
static void must_be_off(HfCfg *c, const char *key, const char *why)
{
    if (!off(hf_cfg_get(c, key)))
        hf_cfg_error(c, key, "trainc merges plain LoRA adapters: %s", why);
}

static void read_adapter_config(HfAdapter *a, const char *path)
{
    HfCfg c;
    hf_cfg_load(&c, path);
    const char *type = hf_cfg_str(&c, "peft_type", NULL);
    if (!type || strcmp(type, "LORA"))
        hf_cfg_error(&c, "peft_type", "\"LORA\" expected (%s adapters are not merged)",
                     type ? type : "untyped");
    const char *bias = hf_cfg_str(&c, "bias", "none");
    if (strcmp(bias, "none"))
        hf_cfg_error(&c, "bias", "\"none\" expected: trained biases (\"%s\") are not merged", bias);
    must_be_off(&c, "use_dora", "DoRA's magnitude vectors are not merged");
    hf_cfg_get(&c, "modules_to_save");   /* (their tensors replace the model's) */
    must_be_off(&c, "alpha_pattern", "an alpha per module is not read");
    must_be_off(&c, "layer_replication", "replicated layers are not expressed");
    must_be_off(&c, "megatron_config", "Megatron's parallel layers are not read");
    must_be_off(&c, "lora_bias", "lora_B's biases are not merged");
    must_be_off(&c, "trainable_token_indices", "trained token rows are not merged");
    must_be_off(&c, "target_parameters", "adapters on parameters are not merged");
    must_be_off(&c, "use_qalora", "QALoRA's pooled inputs are not merged");
    must_be_off(&c, "alora_invocation_tokens", "activated LoRA's invocation is not expressed");
    a->alpha = hf_cfg_num(&c, "lora_alpha", 8);
    a->rslora = hf_cfg_bool(&c, "use_rslora", 0);
    hf_cfg_int(&c, "r", 8);
    /* a key of a later PEFT may stand there off (null, false, empty: a feature not
     * used); set, trainc cannot tell what it changes */
    for (const char *rest; (rest = hf_cfg_rest(&c, harmless_keys));) {
        if (!off(cJSON_GetObjectItemCaseSensitive(c.root, rest)))
            hf_cfg_error(&c, rest, "a LoraConfig key trainc does not know, set: it cannot tell "
                         "what it changes");
        hf_cfg_get(&c, rest);   /* off: checked */
    }
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

/* The kinds of adapter tensor: a module's A or B (Linear, Conv1D), an embedding's, an
 * embedding's or head's weight saved whole (PEFT's save_embedding_layers, for adapters
 * on them) and a module's weight or bias saved whole (modules_to_save): the last two
 * replace the model's tensor */
enum { LORA_A, LORA_B, EMBED_A, EMBED_B, WHOLE, SAVED, N_KINDS };
static const char *const kinds[SAVED] = {".lora_A.weight", ".lora_B.weight", ".lora_embedding_A",
                                         ".lora_embedding_B", ".base_layer.weight"};

/* NAME's kind (N_KINDS: none) and the model's tensor it belongs to, less any
 * "transformer." the original GPT-2 files leave out (into `of`, malloc'd) */
static int kind_of(const char *name, char **of)
{
    *of = NULL;
    if (strncmp(name, "base_model.model.", 17))
        return N_KINDS;
    int k = 0;
    while (k < SAVED && !ends_with(name, kinds[k]))
        k++;
    if (k == SAVED && !ends_with(name, ".weight") && !ends_with(name, ".bias"))
        return N_KINDS;
    char *mod = xstrdup(name + 17);
    if (k < SAVED) {   /* MODULE.weight */
        mod[strlen(mod) - strlen(kinds[k])] = 0;
        *of = xasprintf("%s.weight", mod);
        free(mod);
    } else
        *of = mod;
    return k;
}

/* The model's tensor NAME, or for the original GPT-2 files NAME less "transformer." */
static HfTensor *base_of(HfWeights *w, const char *name)
{
    HfTensor *t = hf_find(w, name);
    if (!t && !strncmp(name, "transformer.", 12))
        t = hf_find(w, name + 12);
    return t;
}

static void add_pair(HfAdapter *a, HfTensor *base, const HfTensor *A, const HfTensor *B, int kind)
{
    a->pairs = realloc(a->pairs, (size_t)(a->n + 1) * sizeof *a->pairs);
    if (!a->pairs)
        die("out of memory");
    a->pairs[a->n++] = (HfAdapterPair){.base = base, .A = A, .B = B, .embed = kind == EMBED_A,
                                       .whole = kind >= WHOLE};
}

/* Each adapter on BASE checked against its shape, as the import lays it out: a
 * Linear's weight [out, in] with A [r, in] and B [out, r]; TRANSPOSED (GPT-2's Conv1D)
 * [in, out]; an embedding's [rows, d] with lora_embedding_A [r, rows] and _B [d, r]; a
 * tensor saved whole: BASE's shape. */
int hf_adapter_fit(HfAdapter *a, const HfTensor *base, int transposed)
{
    int n = 0;
    for (int p = 0; p < a->n; p++) {
        HfAdapterPair *q = &a->pairs[p];
        if (q->base != base)
            continue;
        const HfTensor *A = q->A, *B = q->B;
        const char *file = a->w.paths[A->file];
        if (q->whole) {
            int same = A->rank == base->rank;
            for (int d = 0; same && d < A->rank; d++)
                same = A->shape[d] == base->shape[d];
            if (!same)
                error_input("%s: %s is not shaped as %s (a resized vocabulary is not merged)",
                            file, A->name, base->name);
            n++;
            continue;
        }
        if (A->rank != 2 || B->rank != 2 || A->shape[0] != B->shape[1] || A->shape[0] < 1)
            error_input("%s: %s and %s are not a rank-r pair ([r, in] and [out, r])", file,
                        A->name, B->name);
        int64_t in = A->shape[1], out = B->shape[0];
        q->transposed = q->embed || transposed;
        int64_t rows = q->transposed ? in : out, cols = q->transposed ? out : in;
        if (base->rank != 2 || base->shape[0] != rows || base->shape[1] != cols)
            error_input("%s: %s [%lld, %lld] and %s [%lld, %lld] do not fit %s (%d dimensions: "
                        "[%lld, %lld] expected)", file, A->name, (long long)A->shape[0],
                        (long long)A->shape[1], B->name, (long long)B->shape[0],
                        (long long)B->shape[1], base->name, base->rank, (long long)rows,
                        (long long)cols);
        n++;
    }
    return n;
}

void hf_adapter_load(HfAdapter *a, const char *dir)
{
    memset(a, 0, sizeof *a);
    a->dir = dir;
    char *cfg = xasprintf("%s/adapter_config.json", dir);
    char *st = xasprintf("%s/adapter_model.safetensors", dir);
    if (access(cfg, F_OK) != 0)
        error_input("import --adapter %s: no adapter_config.json there (PEFT's save_pretrained "
                    "writes it beside adapter_model.safetensors)", dir);
    if (access(st, F_OK) != 0)
        error_input("import --adapter %s: no adapter_model.safetensors there%s", dir,
                    access(xasprintf("%s/adapter_model.bin", dir), F_OK) == 0
                        ? " (adapter_model.bin is a pickle, which trainc does not read: save "
                          "with safe_serialization=True)" : "");
    read_adapter_config(a, cfg);
    hf_weights_file(&a->w, st);
}

/* Each adapter tensor paired and matched to the base weight it adapts (in W, the model's
 * tensors; each must be one the import writes), before anything is written. */
void hf_adapter_plan(HfAdapter *a, HfWeights *w)
{
    const char *file = a->w.paths[0];
    for (int i = 0; i < a->w.n; i++) {
        const HfTensor *t = &a->w.t[i];
        char *of;
        int k = kind_of(t->name, &of);
        if (k == N_KINDS)
            error_input("%s: tensor '%s' is not a LoRA adapter's (base_model.model.MODULE.lora_A"
                        ".weight, lora_B, lora_embedding_A or _B) nor a module's saved whole",
                        file, t->name);
        if (k == LORA_B || k == EMBED_B)
            continue;   /* found from its A */
        HfTensor *B = NULL;
        if (k < WHOLE) {
            size_t n = strlen(t->name) - strlen(kinds[k]);
            if (!(B = hf_find(&a->w, xasprintf("%.*s%s", (int)n, t->name, kinds[k + 1]))))
                error_input("%s: %s has no %s beside it", file, t->name, kinds[k + 1] + 1);
        }
        HfTensor *base = base_of(w, of);
        if (!base || !base->used)
            error_input("%s: %s adapts '%s', %s", file, t->name, of,
                        base ? "a tensor the import does not write (a tied head's?)"
                             : "which the model has not");
        add_pair(a, base, t, B, k);
        free(of);
    }
    for (int i = 0; i < a->w.n; i++) {   /* a B without its A */
        const HfTensor *t = &a->w.t[i];
        int paired = 0;
        for (int p = 0; p < a->n && !paired; p++)
            paired = a->pairs[p].A == t || a->pairs[p].B == t;
        if (!paired)
            error_input("%s: %s has no lora_A (or lora_embedding_A) beside it", file, t->name);
    }
}

/* X (BASE's elements, as the checkpoint lays them out) plus each adapter on it:
 * delta[o][i] = scale sum_k B[o][k] A[k][i], at [o][i], or at [i][o] where transposed */
void hf_adapter_merge(const HfAdapter *a, const HfTensor *base, float *x)
{
    for (int p = 0; p < a->n; p++)   /* a weight saved whole first: it replaces the model's */
        if (a->pairs[p].base == base && a->pairs[p].whole) {
            float *w = hf_read(&a->w, a->pairs[p].A);
            memcpy(x, w, (size_t)base->numel * sizeof *x);
            free(w);
        }
    for (int p = 0; p < a->n; p++) {
        const HfAdapterPair *q = &a->pairs[p];
        if (q->base != base || q->whole)
            continue;
        int64_t r = q->A->shape[0], in = q->A->shape[1], out = q->B->shape[0];
        double scale = a->rslora ? a->alpha / sqrt((double)r) : a->alpha / (double)r;
        float *A = hf_read(&a->w, q->A), *B = hf_read(&a->w, q->B);
        double *row = malloc((size_t)in * sizeof *row);   /* (B A)[o], summed over k in order */
        if (!row)
            die("out of memory merging %s", q->A->name);
        for (int64_t o = 0; o < out; o++) {
            memset(row, 0, (size_t)in * sizeof *row);
            for (int64_t k = 0; k < r; k++) {
                double b = B[o * r + k];
                const float *ak = A + k * in;
                for (int64_t i = 0; i < in; i++)
                    row[i] += b * ak[i];
            }
            for (int64_t i = 0; i < in; i++) {
                float *dst = q->transposed ? &x[i * out + o] : &x[o * in + i];
                *dst = (float)((double)*dst + scale * row[i]);
            }
        }
        free(row);
        free(A);
        free(B);
    }
}
