/* ckpt.c: checkpoints that a crash at any instant cannot corrupt, and exact resume.
 *
 * OUT/checkpoints/step_NNNNNNNN/ holds
 *   model.safetensors       the weights
 *   PART.safetensors        the optimizer state a part a file: AdamW's exp_avg (names
 *                           "exp_avg.<param>") and exp_avg_sq, or SGD's momentum_buffer
 *                           (none for plain SGD); and train.ema's average, ema
 *   state.json              the loop state (rt_loop_state), the spec hash, the
 *                           effective training config as key=value lines, and each
 *                           file's size and XXH64 ("files"; rt_ckpt_verify checks them
 *                           before a resume takes the checkpoint), and last its own XXH64
 *                           ("state_xxh64", seal_state)
 *   best.safetensors        a second name of OUT/best.safetensors, when one exists
 * Under ZeRO every rank holds one shard of the optimizer state: the shards are gathered
 * to rank 0 a chunk at a time (every rank takes part in the gathers) and written as
 * the same full files, so a checkpoint reads the same whatever the strategy, and on
 * resume each rank reads only its own range of them.
 * Everything is written into checkpoints/.tmp_step_NNNNNNNN/, each file fsynced, the
 * folder fsynced and renamed to its final name, and checkpoints/ fsynced: a folder
 * named step_* is complete by construction. The data order, the dropout masks and the
 * learning rate are pure functions of (seed, epoch, step), so the loop state plus the
 * weights and optimizer state is all an exact continuation needs. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "rt_dist.h"
#include "rt_loop.h"

/* A model whose parameters are the optimizer state: same names with a prefix, same
 * shapes, laid out like the parameter region (offsets shifted by `base`). */
typedef struct StateModel {
    rt_model m;
    rt_param *p;
    char **names;
} StateModel;

static void state_model(StateModel *s, const rt_model *m, const char *prefix)
{
    s->m = *m;
    s->m.n_params = m->n_trainable;   /* (train.freeze's parameters have none) */
    s->m.param_floats = m->trainable_floats;
    s->p = rt_xmalloc((size_t)(m->n_trainable ? m->n_trainable : 1) * sizeof *s->p);
    s->names = rt_xmalloc((size_t)(m->n_trainable ? m->n_trainable : 1) * sizeof *s->names);
    for (int i = 0; i < m->n_trainable; i++) {
        s->p[i] = m->params[i];
        size_t n = strlen(prefix) + strlen(m->params[i].name) + 2;
        s->names[i] = rt_xmalloc(n);
        snprintf(s->names[i], n, "%s.%s", prefix, m->params[i].name);
        s->p[i].name = s->names[i];
    }
    s->m.params = s->p;
    s->m.n_state = 0;   /* optimizer state: the parameters' shapes alone */
}

static void state_model_free(StateModel *s)
{
    for (int i = 0; i < s->m.n_params; i++)
        rt_xfree(s->names[i]);
    rt_xfree(s->names);
    rt_xfree(s->p);
}

/* Optimizer state: [exp_avg | exp_avg_sq] for AdamW, [momentum] for SGD. A GAN's two
 * optimizers share the parts (rt_optim_state_parts: the larger one's), each over its
 * network's range: AdamW's names when either is AdamW. */
static int optimizer_parts(const rt_train_config *c, const char **names)
{
    if (c->opt == RT_OPT_ADAMW || c->opt == RT_OPT_MUON ||   /* (muon: a matrix's momentum
                                                               in exp_avg, its exp_avg_sq 0) */
        (c->has_opt_d && c->d_opt == RT_OPT_ADAMW)) {
        names[0] = "exp_avg";
        names[1] = "exp_avg_sq";
        return 2;
    }
    if (c->momentum > 0 || (c->has_opt_d && c->d_momentum > 0)) {
        names[0] = "momentum_buffer";
        return 1;
    }
    return 0;
}

/* The state's parts, each a file of the checkpoint: the optimizer's, then ema's (or
 * swa's) average: MAX_PARTS at most */
#define MAX_PARTS 3
static int opt_parts(const rt_train_config *c, const char **names)
{
    int n = optimizer_parts(c, names);
    if (c->has_ema)
        names[n++] = "ema";
    else if (c->has_swa)
        names[n++] = "swa";
    return n;
}

static int fsync_path(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void rt_rm_rf(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* Doubles survive JSON exactly: %.17g, and the non-finite ones as strings. */
static cJSON *num(double v)
{
    if (isnan(v))
        return cJSON_CreateString("nan");
    if (isinf(v))
        return cJSON_CreateString(v > 0 ? "inf" : "-inf");
    char b[64];
    snprintf(b, sizeof b, "%.17g", v);
    return cJSON_CreateRaw(b);
}

static double get_num(const cJSON *o, const char *k, const char *file)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (cJSON_IsNumber(v))
        return v->valuedouble;
    if (cJSON_IsString(v)) {
        if (!strcmp(v->valuestring, "nan"))
            return NAN;
        if (!strcmp(v->valuestring, "inf"))
            return INFINITY;
        if (!strcmp(v->valuestring, "-inf"))
            return -INFINITY;
    }
    rt_input_error("%s: missing or bad field '%s' (a damaged checkpoint?)", file, k);
}

static int64_t get_int(const cJSON *o, const char *k, const char *file)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsString(v))
        rt_input_error("%s: missing or bad field '%s' (a damaged checkpoint?)", file, k);
    char *end;
    errno = 0;
    long long x = strtoll(v->valuestring, &end, 10);
    if (errno || *end)
        rt_input_error("%s: bad integer in field '%s'", file, k);
    return x;
}

static void put_int(cJSON *o, const char *k, int64_t v)
{
    char b[32];
    snprintf(b, sizeof b, "%lld", (long long)v);
    cJSON_AddItemToObject(o, k, cJSON_CreateString(b)); /* strings: int64 exactly */
}

#define LOOP_INTS(X)                                                                    \
    X(step) X(epoch) X(batch) X(log_n) X(log_samples) X(since_val_n) X(last_val_step)   \
    X(es_wait) X(metrics_bytes) X(best_step) X(updates) X(scale_growth) X(skipped)
#define LOOP_REALS(X)                                                                   \
    X(elapsed) X(log_loss) X(since_val_loss) X(last_val_loss) X(last_val_acc) X(best_val) \
    X(best_mon) X(es_best) X(last_loss) X(loss_scale)

static int write_text(const char *path, const char *text)
{
    char tmp[RT_PATH_MAX + 256];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return -1;
    size_t n = strlen(text), off = 0;
    while (off < n) {
        ssize_t w = write(fd, text + off, n - off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0)
        return -1;
    return rename(tmp, path);
}

/* state.json's own hash: its last field, "state_xxh64", the XXH64 of every byte before
 * the field (STATE_MARK on). The other files' hashes are in it, but its own loop state
 * was checked only for what a run can reach, and a flipped bit within that (a batch
 * "40" read as "41", one bit apart) resumed without a word, not exactly; or, out of
 * it, refused the resume where an older intact checkpoint could go on. A state.json
 * without the field (written before it, or edited by hand and the field removed) is
 * taken as it is. */
static const char STATE_MARK[] = ",\n\t\"state_xxh64\":\t\"";

/* cJSON_Print's text ("{ ... \n}") with the field added before its closing brace. */
static char *seal_state(const char *text)
{
    size_t n = strlen(text);
    if (n < 2 || strcmp(text + n - 2, "\n}"))
        rt_die("state.json's text does not end its object with \"\\n}\"");
    n -= 2;
    size_t cap = n + sizeof STATE_MARK + 16 + 8;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    snprintf(out, cap, "%.*s%s%016llx\"\n}", (int)n, text, STATE_MARK,
             (unsigned long long)rt_xxh64(text, n, 0));
    return out;
}

/* 0 when text (len bytes, NUL-terminated) has no state_xxh64 or its bytes match it. */
static int state_sealed_ok(const char *text, size_t len)
{
    const char *at = NULL;
    for (const char *p = text; (p = strstr(p, STATE_MARK)); p++)
        at = p;
    if (!at)
        return 0;
    const char *hex = at + sizeof STATE_MARK - 1;
    char *end;
    unsigned long long want = strtoull(hex, &end, 16);
    if (end != hex + 16 || (strcmp(end, "\"\n}") && strcmp(end, "\"\n}\n")) ||
        strlen(text) != len)
        return -1;
    return rt_xxh64(text, (size_t)(at - text), 0) == want ? 0 : -1;
}

/* By step number: names are zero-padded to 8 digits, and a run past 10^8 steps has
 * wider ones ("step_100000000" is after "step_99999999", not before); the text breaks
 * ties (and orders names that are not numbers) */
static int cmp_step(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    long long i = strtoll(x + 5, NULL, 10), j = strtoll(y + 5, NULL, 10);
    return i < j ? -1 : i > j ? 1 : strcmp(x, y);
}

/* The names step_* in dir, oldest first. */
static int list_ckpts(const char *dir, char ***out)
{
    DIR *d = opendir(dir);
    *out = NULL;
    if (!d)
        return 0;
    int n = 0, cap = 0;
    char **v = NULL;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, "step_", 5))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            v = realloc(v, (size_t)cap * sizeof *v);
            if (!v)
                rt_fail("out of memory");
        }
        v[n++] = strdup(de->d_name);
    }
    closedir(d);
    if (n)
        qsort(v, (size_t)n, sizeof *v, cmp_step);
    *out = v;
    return n;
}

/* Removes the .tmp_step_* and .old_step_* folders in dir (checkpoints cut short by a
 * crash, a full disk or a second signal; GPT-2's are 1.5 GB each) but `keep`. */
static void clean_stale(const char *dir, const char *keep)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    char f[RT_PATH_MAX + 300];
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, ".tmp_step_", 10) && strncmp(de->d_name, ".old_step_", 10))
            continue;
        snprintf(f, sizeof f, "%s/%s", dir, de->d_name);
        if (!keep || strcmp(f, keep))
            rt_rm_rf(f);
    }
    closedir(d);
}

/* Floats gathered to rank 0 per collective when writing a sharded state part. */
#define GATHER_CHUNK ((int64_t)1 << 20)

/* One sharded state part (this rank's floats [lo, hi) of the region in `mine`; the
 * shards are rt_dist_shard's) gathered to rank 0 in chunks of the flat region and
 * streamed into w in the file's order (rank 0; NULL elsewhere, or after an error
 * there: the gathers go on regardless, so no rank is left waiting in one). At most
 * GATHER_CHUNK floats are ever held for it, whatever the model's size. */
static void gather_part(rt_st_out *w, const rt_model *m, const float *mine, int64_t lo)
{
    int world = rt_dist_world(), rank = rt_dist_rank();
    int64_t P = m->param_floats;
    int64_t *shard = rt_xmalloc(sizeof(int64_t) * (size_t)world);
    int64_t *counts = rt_xmalloc(sizeof(int64_t) * (size_t)world);
    rt_dist_shard_counts(P, world, shard);
    float *buf = rank == 0 ? rt_xmalloc(sizeof(float) * (size_t)GATHER_CHUNK) : NULL;
    for (int i = 1; i < m->n_params; i++)   /* the file's order is the region's */
        if (m->params[i].offset < m->params[i - 1].offset + m->params[i - 1].numel)
            rt_die("parameter %s is not laid out after %s", m->params[i].name, m->params[i - 1].name);
    int pi = 0;
    for (int64_t c0 = 0; c0 < P; c0 += GATHER_CHUNK) {
        int64_t c1 = c0 + GATHER_CHUNK < P ? c0 + GATHER_CHUNK : P, start = 0;
        for (int r = 0; r < world; r++) {   /* each rank's part of [c0, c1) */
            int64_t a = c0 > start ? c0 : start, b = c1 < start + shard[r] ? c1 : start + shard[r];
            counts[r] = b > a ? b - a : 0;
            start += shard[r];
        }
        int64_t x = c0 > lo ? c0 : lo;
        rt_gather_f32(counts[rank] ? mine + (x - lo) : mine, buf, counts, 0);
        for (; rank == 0 && pi < m->n_params; pi++) {   /* the tensors' parts in [c0, c1) */
            const rt_param *p = &m->params[pi];
            int64_t a = p->offset > c0 ? p->offset : c0;
            int64_t b = p->offset + p->numel < c1 ? p->offset + p->numel : c1;
            if (b > a && w)
                rt_st_put(w, buf + (a - c0), b - a);
            if (p->offset + p->numel > c1)
                break;          /* the rest of this tensor is in the next chunk */
        }
    }
    rt_xfree(buf);
    rt_xfree(counts);
    rt_xfree(shard);
}

/* The optimizer state's parts into tmp (part.sharded: gathered from every rank, which
 * takes part even after a failure here); *failed and *err as rt_ckpt_save keeps them. */
static void write_states(const char *tmp, const rt_model *m, const char *const *parts, int np,
                         const float *state, rt_state_part part, int *failed, int *err)
{
    char f[RT_PATH_MAX + 160];
    for (int k = 0; k < np; k++) {
        StateModel sm;
        state_model(&sm, m, parts[k]);
        snprintf(f, sizeof f, "%s/%s.safetensors", tmp, parts[k]);
        if (!part.sharded) {
            if (!*failed && rt_safetensors_write(f, &sm.m, state + (size_t)k * (size_t)sm.m.param_floats, NULL) != 0) {
                *failed = 1;
                *err = errno;
            }
        } else {
            rt_st_out *w = *failed ? NULL : rt_st_open(f, &sm.m);
            if (!*failed && !w) {
                *failed = 1;
                *err = errno;
            }
            gather_part(w, &sm.m, state + (size_t)k * (size_t)(part.hi - part.lo), part.lo);
            if (w && rt_st_close(w) != 0) {
                *failed = 1;
                *err = errno;
            }
        }
        state_model_free(&sm);
    }
}

/* each file's size and XXH64 (what `xxhsum -H1` prints), checked before a resume
 * (rt_ckpt_verify): a file changed on the disk since is found, not trained on */
static cJSON *hash_files(const char *tmp, const char *const *parts, int np, int *failed, int *err)
{
    char f[RT_PATH_MAX + 160];
    cJSON *files = cJSON_CreateObject();
    char fnames[2 + MAX_PARTS][64];   /* (model, best, the parts) */
    int nf = 0;
    snprintf(fnames[nf++], sizeof fnames[0], "model.safetensors");
    snprintf(f, sizeof f, "%s/best.safetensors", tmp);
    if (access(f, F_OK) == 0)
        snprintf(fnames[nf++], sizeof fnames[0], "best.safetensors");
    for (int k = 0; k < np; k++)
        snprintf(fnames[nf++], sizeof fnames[0], "%s.safetensors", parts[k]);
    for (int i = 0; !*failed && i < nf; i++) {
        uint64_t h;
        int64_t bytes;
        snprintf(f, sizeof f, "%s/%.63s", tmp, fnames[i]);
        if (rt_file_xxh64(f, &h, &bytes) != 0) {
            *failed = 1;
            *err = errno;
            break;
        }
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
        cJSON *e = cJSON_CreateObject();
        put_int(e, "bytes", bytes);
        cJSON_AddItemToObject(e, "xxh64", cJSON_CreateString(hex));
        cJSON_AddItemToObject(files, fnames[i], e);
    }
    return files;
}

/* state.json's contents (before its seal): the model, the loop's state, the two
 * configs, the files' hashes (taken over) */
static cJSON *state_json(const rt_model *m, const rt_loop_state *s, char *const *lines,
                         int nlines, char *const *spec_lines, int n_spec, cJSON *files)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddItemToObject(j, "trainc_checkpoint", cJSON_CreateNumber(1));
    cJSON_AddItemToObject(j, "model", cJSON_CreateString(m->name));
    cJSON_AddItemToObject(j, "model_hash", cJSON_CreateString(m->model_hash));
    cJSON_AddItemToObject(j, "ranks", cJSON_CreateNumber(rt_dist_world()));
    if (m->n_trainable < m->n_params)   /* (a trainc before 2026-12-02 kept frozen state) */
        cJSON_AddItemToObject(j, "optimizer_state", cJSON_CreateString("trained parameters"));
    cJSON *ls = cJSON_CreateObject();
#define X(f) put_int(ls, #f, s->f);
    LOOP_INTS(X)
#undef X
    put_int(ls, "es_stopped", s->es_stopped);
    if (s->es_pending)   /* (only then: other checkpoints read as before it existed) */
        put_int(ls, "es_pending", s->es_pending);
    put_int(ls, "data_rows", s->data_rows);
    char fp[24];
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)s->data_fp);
    cJSON_AddItemToObject(ls, "data_fingerprint", cJSON_CreateString(fp));
#define X(f) cJSON_AddItemToObject(ls, #f, num(s->f));
    LOOP_REALS(X)
#undef X
    if (m->gan) {   /* (only a GAN's: other checkpoints read as before they existed) */
        cJSON_AddItemToObject(ls, "log_g_loss", num(s->log_g_loss));
        cJSON_AddItemToObject(ls, "loss_scale_d", num(s->loss_scale_d));
        put_int(ls, "scale_growth_d", s->scale_growth_d);
        put_int(ls, "skipped_d", s->skipped_d);
    }
    cJSON_AddItemToObject(j, "loop", ls);
    cJSON *tl = cJSON_CreateArray();
    for (int i = 0; i < nlines; i++)
        cJSON_AddItemToArray(tl, cJSON_CreateString(lines[i]));
    cJSON_AddItemToObject(j, "train", tl);
    cJSON *sl = cJSON_CreateArray();
    for (int i = 0; i < n_spec; i++)
        cJSON_AddItemToArray(sl, cJSON_CreateString(spec_lines[i]));
    cJSON_AddItemToObject(j, "spec_train", sl);
    cJSON_AddItemToObject(j, "files", files);
    return j;
}

/* A checkpoint of the same step from an earlier life (a resume of a finished run)
 * trades places with the new one in one rename (RENAME_EXCHANGE), then is removed
 * under the temporary name: a crash at any instant leaves a complete folder of that
 * step. Where the file system cannot exchange, the old one goes aside by one rename
 * before the new one takes its name by another: a complete folder of that step or
 * none, never a half-removed one that --resume would take for the newest. 0 or -1. */
static int put_in_place(const char *dir, const char *tmp, const char *fin, int64_t step)
{
    char old[RT_PATH_MAX + 64];
    snprintf(old, sizeof old, "%s/.old_step_%08lld", dir, (long long)step);
    rt_rm_rf(old);
    int exchanged = 0;
    if (access(fin, F_OK) == 0) {
        exchanged = renameat2(AT_FDCWD, tmp, AT_FDCWD, fin, RENAME_EXCHANGE) == 0;
        if (!exchanged && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
            return -1;
        if (exchanged ? fsync_path(dir) != 0 : rename(fin, old) != 0 || fsync_path(dir) != 0)
            return -1;
    }
    if (exchanged)
        rt_rm_rf(tmp);   /* the earlier life's */
    else if (rename(tmp, fin) != 0 || fsync_path(dir) != 0)
        return -1;
    rt_rm_rf(old);
    return 0;
}

/* keep the newest checkpoint.keep, never the one just written (fin) */
static void keep_newest(const rt_train_config *c, const char *dir, const char *fin)
{
    char f[RT_PATH_MAX + 160];
    char **names;
    int n = list_ckpts(dir, &names);
    /* (with checkpoints off, the checkpoint of a signal removes none: the earlier ones
     * are a run's from before, with its own keep) */
    int64_t keep = c->ckpt_keep > 0 ? c->ckpt_keep : 1;
    for (int i = 0; i < n; i++) {
        snprintf(f, sizeof f, "%s/%s", dir, names[i]);
        if (c->has_checkpoint && i < n - keep && strcmp(f, fin))
            rt_rm_rf(f);
        free(names[i]);
    }
    free(names);
}

int rt_ckpt_save(const char *out, const rt_model *m, const rt_train_config *c,
                 const rt_loop_state *s, const float *params, const float *layer_state,
                 const float *state, rt_state_part part, char *const *lines, int nlines,
                 char *const *spec_lines, int n_spec)
{
    char dir[RT_PATH_MAX + 32], tmp[RT_PATH_MAX + 64], fin[RT_PATH_MAX + 64], f[RT_PATH_MAX + 160];
    const char *parts[MAX_PARTS];
    int np = opt_parts(c, parts);
    int root = rt_dist_rank() == 0;
    if (!root) {                       /* ZeRO: only this rank's shards, to rank 0 */
        for (int k = 0; part.sharded && k < np; k++) {
            StateModel sm;
            state_model(&sm, m, parts[k]);
            gather_part(NULL, &sm.m, state + (size_t)k * (size_t)(part.hi - part.lo), part.lo);
            state_model_free(&sm);
        }
        return 0;
    }
    int failed = 0, err = 0;
    snprintf(dir, sizeof dir, "%s/checkpoints", out);
    snprintf(tmp, sizeof tmp, "%s/.tmp_step_%08lld", dir, (long long)s->step);
    snprintf(fin, sizeof fin, "%s/step_%08lld", dir, (long long)s->step);
    /* not -p: never a new OUT; a new checkpoints/ is fsynced into OUT before a
     * checkpoint goes into it */
    if (mkdir(dir, 0777) == 0)
        failed = fsync_path(out) != 0;
    else if (errno != EEXIST)
        failed = 1;
    if (!failed) {
        rt_rm_rf(tmp);
        failed = mkdir(tmp, 0777) != 0;
    }
    snprintf(f, sizeof f, "%s/model.safetensors", tmp);
    if (!failed)
        failed = rt_safetensors_write(f, m, params, layer_state) != 0;
    /* the best weights so far (a second name of OUT/best.safetensors): a resume puts
     * them back, whatever a later validation of this run wrote there (a run that
     * stops at epochs, max_steps or max_time between validations validates once more
     * after its last checkpoint) */
    char best[RT_PATH_MAX + 32];
    snprintf(best, sizeof best, "%s/best.safetensors", out);
    if (!failed && s->best_step >= 0 && access(best, F_OK) == 0) {
        snprintf(f, sizeof f, "%s/best.safetensors", tmp);
        failed = rt_link_or_copy(best, f) != 0;
    }
    /* checkpoint.keep_best's files, second names of them (not hashed: each says what it
     * is in its metadata; a resume puts them back, those a later validation displaced
     * from OUT/best included) */
    snprintf(best, sizeof best, "%s/best", out);
    snprintf(f, sizeof f, "%s/best", tmp);
    if (!failed)
        failed = rt_keep_best_link(best, f) != 0;
    if (failed)
        err = errno;
    write_states(tmp, m, parts, np, state, part, &failed, &err);
    cJSON *files = hash_files(tmp, parts, np, &failed, &err);
    if (failed) {              /* no half-written folder left behind (a full disk) */
        cJSON_Delete(files);
        rt_rm_rf(tmp);
        errno = err;
        return -1;
    }
    cJSON *j = state_json(m, s, lines, nlines, spec_lines, n_spec, files);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    char *sealed = text ? seal_state(text) : NULL;
    snprintf(f, sizeof f, "%s/state.json", tmp);
    int rc = sealed ? write_text(f, sealed) : -1;
    free(sealed);
    free(text);
    if (rc != 0 || fsync_path(tmp) != 0) {
        err = errno;
        rt_rm_rf(tmp);
        errno = err;
        return -1;
    }
    if (put_in_place(dir, tmp, fin, s->step) != 0)
        return -1;
    /* the temporary folders of checkpoints a crash or a second signal cut short */
    clean_stale(dir, tmp);
    keep_newest(c, dir, fin);
    return 0;
}

/* Fields a resumed run may change: they decide when to stop, validate, log or save,
 * where and with how much memory to compute, never what is computed (recomputation
 * gives the same bits: a run that ran out of memory may go on with recompute full);
 * and where the data files are (moved, or each rank's own): that they hold the same
 * data is the loop's check, by the fingerprint state.json records (resume.c,
 * check_same_data). Early stopping may change but for what it monitors
 * (rt_ckpt_load compares best_monitor's then and now). */
static int may_differ(const char *key)
{
    if (!strncmp(key, "data.train.", 11) || !strncmp(key, "data.val.", 9) ||
        !strcmp(key, "data.val") || !strncmp(key, "validate.", 9) ||
        !strncmp(key, "early_stopping", 14))
        return 1;
    static const char *const ok[] = {"epochs", "max_steps", "max_time", "min_epochs",
                                      "min_steps", "log_every", "out_dir", "limit_val_batches",
                                      "checkpoint", "checkpoint.every_steps", "checkpoint.keep",
                                      "checkpoint.every_epochs", "checkpoint.keep_best",
                                      "loader.workers", "loader.prefetch", "loader.on_gpu", "device",
                                      "distributed.bucket_mb", "distributed.strategy",
                                      "distributed.ranks", "recompute", "memory_budget_mb",
                                      "ema.validate", NULL};
    for (int i = 0; ok[i]; i++)
        if (!strcmp(key, ok[i]))
            return 1;
    return 0;
}

static const char *line_value(char *const *lines, int n, const char *key, size_t klen)
{
    for (int i = 0; i < n; i++)
        if (!strncmp(lines[i], key, klen) && lines[i][klen] == '=')
            return lines[i] + klen + 1;
    return NULL;
}

/* line_value in a checkpoint's "train" array */
static const char *array_value(const cJSON *tl, const char *key)
{
    size_t kl = strlen(key);
    const cJSON *it;
    cJSON_ArrayForEach(it, tl) if (cJSON_IsString(it) && !strncmp(it->valuestring, key, kl) &&
                                   it->valuestring[kl] == '=') return it->valuestring + kl + 1;
    return NULL;
}

/* What best.safetensors and the early-stopping state are kept in the terms of: early
 * stopping's monitor and mode, or val_loss and min without it (train.c's best_mode). */
static void best_monitor(const char *on, const char *mon, const char *mode, char *out, size_t n)
{
    int es = on && !strcmp(on, "true");
    snprintf(out, n, "%s, %s", es && mon ? mon : "val_loss", es && mode ? mode : "min");
}

/* The loop state a checkpoint can hold: each counter within what a run can reach (a
 * damaged or hand-edited state.json would otherwise start the loader at a negative
 * batch, divide by AdamW's bias correction at updates -1, or truncate metrics.jsonl
 * to a negative length), and the step the one in the folder's name. */
static void bad_loop(const char *file, const char *k, int64_t v, const char *want)
{
    rt_input_error("%s: field '%s' is %lld, expected %s (a damaged checkpoint?)", file, k,
                   (long long)v, want);
}

static void check_loop(const rt_loop_state *s, const char *ck, const char *file)
{
    const char *base = strrchr(ck, '/');
    base = base ? base + 1 : ck;
    long long named;
    if (sscanf(base, "step_%lld", &named) != 1 || named != s->step) {
        char want[64];
        snprintf(want, sizeof want, "the step in the folder's name (%s)", base);
        bad_loop(file, "step", s->step, want);
    }
    if (s->step < 0)
        bad_loop(file, "step", s->step, ">= 0");
    if (s->epoch < 0 || s->epoch > s->step)
        bad_loop(file, "epoch", s->epoch, "from 0 to the step (an epoch holds a step at least)");
    if (s->batch < 0)
        bad_loop(file, "batch", s->batch, ">= 0");
    if (s->updates < 0 || s->updates > s->step)
        bad_loop(file, "updates", s->updates, "from 0 to the step");
    if (s->skipped != s->step - s->updates)   /* a step updates, or fp16-mixed skips it */
        bad_loop(file, "skipped", s->skipped, "the step less the updates");
    if (s->last_val_step < -1 || s->last_val_step > s->step)
        bad_loop(file, "last_val_step", s->last_val_step, "from -1 (none) to the step");
    if (s->best_step < -1 || s->best_step > s->step)
        bad_loop(file, "best_step", s->best_step, "from -1 (none) to the step");
    if (s->es_stopped != 0 && s->es_stopped != 1)
        bad_loop(file, "es_stopped", s->es_stopped, "0 or 1");
    if (s->es_pending != 0 && s->es_pending != 1)
        bad_loop(file, "es_pending", s->es_pending, "0 or 1");
    const struct { const char *k; int64_t v; } nonneg[] = {
        {"log_n", s->log_n}, {"log_samples", s->log_samples}, {"since_val_n", s->since_val_n},
        {"es_wait", s->es_wait}, {"metrics_bytes", s->metrics_bytes}, {"scale_growth", s->scale_growth},
        {"scale_growth_d", s->scale_growth_d}, {"skipped_d", s->skipped_d}};
    for (size_t i = 0; i < sizeof nonneg / sizeof *nonneg; i++)
        if (nonneg[i].v < 0)
            bad_loop(file, nonneg[i].k, nonneg[i].v, ">= 0");
    if (!(s->elapsed >= 0) || isinf(s->elapsed))
        rt_input_error("%s: field 'elapsed' is %g, expected a finite number of seconds >= 0 (a "
                       "damaged checkpoint?)", file, s->elapsed);
    if (!(s->loss_scale > 0) || isinf(s->loss_scale))
        rt_input_error("%s: field 'loss_scale' is %g, expected a finite number > 0 (a damaged "
                       "checkpoint?)", file, s->loss_scale);
    if (!(s->loss_scale_d > 0) || isinf(s->loss_scale_d))
        rt_input_error("%s: field 'loss_scale_d' is %g, expected a finite number > 0 (a damaged "
                       "checkpoint?)", file, s->loss_scale_d);
}

/* CK/state.json parsed, its path in f; NULL with the reason in why when it cannot be
 * read or is not a JSON object. */
static cJSON *parse_state(const char *ck, char *f, size_t flen, char *why, size_t wn)
{
    snprintf(f, flen, "%s/state.json", ck);
    FILE *fp = fopen(f, "rb");
    if (!fp) {
        snprintf(why, wn, "%s: cannot open: %s", f, strerror(errno));
        return NULL;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = (len + 4096 + 1) * 2;
            text = realloc(text, cap);
            if (!text)
                rt_fail("out of memory");
        }
        size_t r = fread(text + len, 1, 4096, fp);
        len += r;
        if (r < 4096)
            break;
    }
    fclose(fp);
    text[len] = 0;
    if (state_sealed_ok(text, len) != 0) {
        free(text);
        snprintf(why, wn, "%s: its bytes changed after the checkpoint was written (its "
                 "state_xxh64 does not match them)", f);
        return NULL;
    }
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        snprintf(why, wn, "%s: not a trainc checkpoint state (bad JSON)", f);
        return NULL;
    }
    return j;
}

/* CK/state.json parsed (exit 1 when it cannot be read or is not JSON); its path in f. */
static cJSON *read_state(const char *ck, char *f, size_t flen)
{
    char why[RT_PATH_MAX + 256];
    cJSON *j = parse_state(ck, f, flen, why, sizeof why);
    if (!j)
        rt_input_error("%s", why);
    return j;
}

int rt_ckpt_verify(const char *ck, char *why, size_t wn, int *best_bad)
{
    char f[RT_PATH_MAX + 64];
    if (best_bad)
        *best_bad = 0;
    cJSON *j = parse_state(ck, f, sizeof f, why, wn);
    if (!j)
        return -1;
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(j, "files");
    int rc = 0, has_model = 0;
    if (!files) {              /* written before checkpoints kept their files' hashes */
        snprintf(f, sizeof f, "%s/model.safetensors", ck);
        if (access(f, R_OK) != 0) {
            snprintf(why, wn, "model.safetensors: %s", strerror(errno));
            rc = -1;
        }
        cJSON_Delete(j);
        return rc;
    }
    if (!cJSON_IsObject(files)) {
        snprintf(why, wn, "state.json: bad field 'files'");
        cJSON_Delete(j);
        return -1;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, files) {
        const char *name = e->string;
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "bytes");
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(e, "xxh64");
        char *end = NULL;
        long long want_bytes = cJSON_IsString(b) ? strtoll(b->valuestring, &end, 10) : -1;
        unsigned long long want = 0;
        int hex_ok = cJSON_IsString(x) && strlen(x->valuestring) == 16 &&
                     strspn(x->valuestring, "0123456789abcdef") == 16 &&
                     sscanf(x->valuestring, "%llx", &want) == 1;
        /* a plain name in the folder: never a path elsewhere */
        if (!name || !*name || name[0] == '.' || strchr(name, '/') || !cJSON_IsObject(e) ||
            want_bytes < 0 || !end || *end || !hex_ok) {
            snprintf(why, wn, "state.json: bad entry in 'files'%s%.64s%s", name ? " (" : "",
                     name ? name : "", name ? ")" : "");
            rc = -1;
            break;
        }
        has_model |= !strcmp(name, "model.safetensors");
        snprintf(f, sizeof f, "%s/%s", ck, name);
        uint64_t h;
        int64_t bytes;
        /* best.safetensors is a second name of OUT/best.safetensors and of the checkpoints
         * since its last improvement: damaged, it costs the best weights (not restored),
         * not the checkpoint */
        if (!strcmp(name, "best.safetensors") && best_bad) {
            if (rt_file_xxh64(f, &h, &bytes) != 0 || bytes != want_bytes || h != want)
                *best_bad = 1;
            continue;
        }
        if (rt_file_xxh64(f, &h, &bytes) != 0) {
            snprintf(why, wn, "%s: %s", name,
                     errno == EINVAL ? "not a regular file" : strerror(errno));
            rc = -1;
            break;
        }
        if (bytes != want_bytes) {
            snprintf(why, wn, "%s: %lld bytes, but %lld when the checkpoint was written (%s)", name,
                     (long long)bytes, want_bytes, bytes < want_bytes ? "cut short" : "grown");
            rc = -1;
            break;
        }
        if (h != want) {
            snprintf(why, wn, "%s: its bytes changed after the checkpoint was written (XXH64 "
                     "%016llx, recorded %016llx)", name, (unsigned long long)h, want);
            rc = -1;
            break;
        }
    }
    if (rc == 0 && !has_model) {
        snprintf(why, wn, "state.json: 'files' does not list model.safetensors");
        rc = -1;
    }
    cJSON_Delete(j);
    return rc;
}

/* The choice of rt_ckpt_resume_point, made once a process (it reads every file). */
static struct {
    int done, rc;
    char out[RT_PATH_MAX], path[RT_PATH_MAX + 64];
    char **damaged;            /* names of the newer, damaged checkpoints */
    int n_damaged;
    int best_bad;              /* the chosen one's best.safetensors is damaged */
} g_pick;

int rt_ckpt_resume_point(const char *out, char *path, size_t n)
{
    if (g_pick.done && !strcmp(g_pick.out, out)) {
        snprintf(path, n, "%s", g_pick.path);
        return g_pick.rc;
    }
    for (int i = 0; i < g_pick.n_damaged; i++)
        free(g_pick.damaged[i]);
    rt_xfree(g_pick.damaged);
    g_pick.damaged = NULL;
    g_pick.n_damaged = 0;
    char dir[RT_PATH_MAX + 32], ck[RT_PATH_MAX + 64], why[RT_PATH_MAX + 512];
    char first_why[RT_PATH_MAX + 512] = "";
    snprintf(dir, sizeof dir, "%s/checkpoints", out);
    char **names;
    int k = list_ckpts(dir, &names), picked = -1;
    g_pick.best_bad = 0;
    for (int i = k - 1; i >= 0 && picked < 0; i--) {
        snprintf(ck, sizeof ck, "%s/%s", dir, names[i]);
        if (rt_ckpt_verify(ck, why, sizeof why, &g_pick.best_bad) == 0) {
            picked = i;
            break;
        }
        if (!first_why[0])
            snprintf(first_why, sizeof first_why, "%.255s: %.1200s", names[i], why);
        if (rt_dist_rank() == 0)
            fprintf(stderr, "trainc: warning: %s is damaged: %s\n", ck, why);
        g_pick.damaged = realloc(g_pick.damaged, (size_t)(g_pick.n_damaged + 1) * sizeof *g_pick.damaged);
        if (!g_pick.damaged)
            rt_fail("out of memory");
        g_pick.damaged[g_pick.n_damaged++] = strdup(names[i]);
    }
    if (k > 0 && picked < 0)
        rt_input_error("%s: no intact checkpoint to resume from (%s)\n  hint: a "
                       "checkpoint's files are checked against the sizes and XXH64 hashes its "
                       "state.json recorded; restore them from a copy, or start the run again "
                       "without --resume", dir, first_why);
    if (picked >= 0 && g_pick.best_bad && rt_dist_rank() == 0)
        fprintf(stderr, "trainc: warning: %s/%s/best.safetensors is damaged: the best weights are "
                "not restored from it\n", dir, names[picked]);
    if (picked >= 0 && g_pick.n_damaged && rt_dist_rank() == 0)
        fprintf(stderr, "trainc: warning: taking %s instead, the newest intact checkpoint\n",
                names[picked]);
    g_pick.done = 1;
    g_pick.rc = picked >= 0 ? 0 : -1;
    snprintf(g_pick.out, sizeof g_pick.out, "%s", out);
    snprintf(g_pick.path, sizeof g_pick.path, "%s/%s", dir, picked >= 0 ? names[picked] : "");
    for (int i = 0; i < k; i++)
        free(names[i]);
    free(names);
    snprintf(path, n, "%s", g_pick.path);
    return g_pick.rc;
}

int rt_ckpt_best_damaged(void) { return g_pick.done && g_pick.best_bad; }

void rt_ckpt_set_aside_damaged(void)
{
    if (!g_pick.done)
        return;
    const char *out = g_pick.out;
    for (int i = 0; i < g_pick.n_damaged; i++) {
        char from[RT_PATH_MAX + 96], to[RT_PATH_MAX + 128];
        snprintf(from, sizeof from, "%s/checkpoints/%s", out, g_pick.damaged[i]);
        snprintf(to, sizeof to, "%s/checkpoints/damaged_%s", out, g_pick.damaged[i]);
        for (int v = 2; access(to, F_OK) == 0 && v < 1000; v++)
            snprintf(to, sizeof to, "%s/checkpoints/damaged_%s.%d", out, g_pick.damaged[i], v);
        if (rename(from, to) == 0)
            fprintf(stderr, "trainc: set the damaged %s aside as %s (remove it when it is no "
                    "longer wanted)\n", g_pick.damaged[i], to);
        else   /* left there, it would stay the newest: a later resume would meet it again */
            rt_fail("cannot set the damaged checkpoint %s aside (rename to %s: %s)\n  hint: move "
                    "or remove it, then resume again", from, to, strerror(errno));
    }
}

/* A JSON array of strings as a malloc'd array of malloc'd strings. */
static char **string_list(const cJSON *a, const char *f, const char *name, int *n)
{
    if (!cJSON_IsArray(a))
        rt_input_error("%s: bad field '%s'", f, name);
    char **out = calloc((size_t)cJSON_GetArraySize(a) + 1, sizeof *out);
    if (!out)
        rt_fail("out of memory");
    const cJSON *it;
    *n = 0;
    cJSON_ArrayForEach(it, a) {
        if (!cJSON_IsString(it) || !strchr(it->valuestring, '='))
            rt_input_error("%s: bad field '%s'", f, name);
        if (!(out[(*n)++] = strdup(it->valuestring)))
            rt_fail("out of memory");
    }
    return out;
}

int rt_ckpt_configs(const char *ck, char ***spec, int *n_spec, char ***run, int *n_run)
{
    char f[RT_PATH_MAX + 64];
    cJSON *j = read_state(ck, f, sizeof f);
    const cJSON *sl = cJSON_GetObjectItemCaseSensitive(j, "spec_train");
    if (!sl) {                /* written before the spec's own config was kept */
        cJSON_Delete(j);
        return -1;
    }
    *spec = string_list(sl, f, "spec_train", n_spec);
    *run = string_list(cJSON_GetObjectItemCaseSensitive(j, "train"), f, "train", n_run);
    cJSON_Delete(j);
    return 0;
}

/* The checkpoint's origin: its format, the model that wrote it, the number of ranks. */
static void check_origin(const cJSON *j, const char *ck, const char *f, const rt_model *m)
{
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(j, "trainc_checkpoint");
    if (!cJSON_IsNumber(ver) || ver->valuedouble != 1)
        rt_input_error("%s: %s; this trainer reads checkpoints of format 1", f,
                       cJSON_IsNumber(ver) ? "a checkpoint of another format (trainc_checkpoint "
                                             "is not 1)"
                                           : "missing field 'trainc_checkpoint' (the format)");
    const cJSON *mh = cJSON_GetObjectItemCaseSensitive(j, "model_hash");
    if (!cJSON_IsString(mh))
        rt_input_error("%s: missing field 'model_hash'", f);
    if (strcmp(mh->valuestring, m->model_hash)) {
        const cJSON *mn = cJSON_GetObjectItemCaseSensitive(j, "model");
        rt_input_error("%s: this checkpoint was made by a different model (%s, model hash %s; this "
                       "trainer's model %s has hash %s): layers, shapes or inputs differ",
                       ck, cJSON_IsString(mn) ? mn->valuestring : "?", mh->valuestring, m->name,
                       m->model_hash);
    }
    /* a checkpoint of a partly frozen model from a trainc before 2026-12-02 kept the
     * frozen parameters' optimizer state (zeros); this trainer's files leave them out */
    if (m->n_trainable < m->n_params &&
        !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "optimizer_state")))
        rt_input_error("%s: this checkpoint was written by a trainc before 2026-12-02, whose "
                       "optimizer files hold the frozen parameters' state too; this trainer's "
                       "leave them out, so it cannot resume it. Resume it with the trainer that "
                       "wrote it, or start a new run from its weights (--init %s/model.safetensors)",
                       ck, ck);
    /* batch_size and the data order are per rank: the rank count is part of the run */
    const cJSON *nr = cJSON_GetObjectItemCaseSensitive(j, "ranks");
    if (cJSON_IsNumber(nr) && !(nr->valuedouble >= 1 && nr->valuedouble <= 1e6 &&
                                nr->valuedouble == floor(nr->valuedouble)))
        rt_input_error("%s: ranks %g is not a number of ranks (a damaged checkpoint?)", f,
                       nr->valuedouble);
    if (cJSON_IsNumber(nr) && nr->valuedouble != (double)rt_dist_world()) {
        if (rt_dist_rank() == 0)   /* (every rank finds it: one says so) */
            rt_input_error("%s: this checkpoint was written by a run on %g rank%s and this one "
                           "has %d; batch_size and the order of the data are per rank, so resume "
                           "it with the same number of ranks (%s%g)", ck, nr->valuedouble,
                           nr->valuedouble == 1 ? "" : "s", rt_dist_world(),
                           nr->valuedouble == 1 ? "without mpirun, or mpirun -np " : "mpirun -np ",
                           nr->valuedouble);
        exit(RT_EXIT_INPUT);
    }
}

/* One training config line that differs, added to the list of them. */
static void add_diff(char *diffs, size_t n, int *nd, const char *key, const char *then,
                     const char *now)
{
    size_t used = strlen(diffs);
    snprintf(diffs + used, n - used, "\n  %s: checkpoint %s, now %s", key, then ? then : "(absent)",
             now ? now : "(absent)");
    (*nd)++;
}

/* The training config's lines then (tl, the checkpoint's) and now: every field that
 * changes the numbers must match. Whether an early_stopping line differs. */
static int check_train(const cJSON *tl, const char *ck, const char *f, char *const *lines,
                       int nlines)
{
    char diffs[1024] = "", key[256];
    int nd = 0, es_changed = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, tl) {
        const char *eq = cJSON_IsString(it) ? strchr(it->valuestring, '=') : NULL;
        if (!eq)
            rt_input_error("%s: bad %s 'train'", f, cJSON_IsString(it) ? "line in" : "field");
        size_t kl = (size_t)(eq - it->valuestring);
        snprintf(key, sizeof key, "%.*s", (int)kl, it->valuestring);
        const char *now = line_value(lines, nlines, key, kl);
        int differs = !now || strcmp(now, eq + 1);
        es_changed |= differs && !strncmp(key, "early_stopping", 14);
        if (differs && !may_differ(key))
            add_diff(diffs, sizeof diffs, &nd, key, eq + 1, now);
    }
    for (int i = 0; i < nlines; i++) {
        const char *eq = strchr(lines[i], '=');
        snprintf(key, sizeof key, "%.*s", (int)(eq - lines[i]), lines[i]);
        int found = array_value(tl, key) != NULL;
        es_changed |= !found && !strncmp(key, "early_stopping", 14);
        if (!found && !may_differ(key))
            add_diff(diffs, sizeof diffs, &nd, key, NULL, eq + 1);
    }
    if (nd)
        rt_input_error("%s: this checkpoint was made with a different training spec; %d field%s "
                       "differ%s (only stop conditions, validate.*, early stopping but for its "
                       "monitor and mode, logging, checkpointing, loader threads and on_gpu, "
                       "device, distributed.*, recomputation and the data files' paths may "
                       "change on resume):%s",
                       ck, nd, nd > 1 ? "s" : "", nd > 1 ? "" : "s", diffs);
    /* early stopping on or off, its patience, min_delta, thresholds, check_finite: yes;
     * what it monitors, no (the best value kept would be another quantity's) */
    char then_mon[64], now_mon[64];
    best_monitor(array_value(tl, "early_stopping"), array_value(tl, "early_stopping.monitor"),
                 array_value(tl, "early_stopping.mode"), then_mon, sizeof then_mon);
    best_monitor(line_value(lines, nlines, "early_stopping", 14),
                 line_value(lines, nlines, "early_stopping.monitor", 22),
                 line_value(lines, nlines, "early_stopping.mode", 19), now_mon, sizeof now_mon);
    if (strcmp(then_mon, now_mon))
        rt_input_error("%s: this run kept its best value and best.safetensors by %s; this resume "
                       "would by %s (early_stopping's monitor and mode, or val_loss and min "
                       "without early stopping): they cannot change on resume", ck, then_mon,
                       now_mon);
    return es_changed;
}

/* A field of the loop state that checkpoints written before it was recorded lack: dflt. */
static int64_t opt_int(const cJSON *ls, const char *k, const char *f, int64_t dflt)
{
    return cJSON_GetObjectItemCaseSensitive(ls, k) ? get_int(ls, k, f) : dflt;
}
static double opt_num(const cJSON *ls, const char *k, const char *f, double dflt)
{
    return cJSON_GetObjectItemCaseSensitive(ls, k) ? get_num(ls, k, f) : dflt;
}

/* The loop's counters and values (ls: the checkpoint's "loop"); es_changed: an
 * early_stopping setting differs now. */
static void read_loop(const cJSON *ls, const char *f, rt_loop_state *s, int es_changed)
{
    if (!cJSON_IsObject(ls))
        rt_input_error("%s: missing field 'loop'", f);
#define X(fld) s->fld = get_int(ls, #fld, f);
    LOOP_INTS(X)
#undef X
    /* (checkpoints written before it was recorded do not have it: not stopped) */
    s->es_stopped = opt_int(ls, "es_stopped", f, 0);
    s->es_pending = opt_int(ls, "es_pending", f, 0);
    if (s->es_pending && es_changed)
        s->es_pending = 0;   /* (as es_stopped below: the next check decides again) */
    if (s->es_stopped && es_changed) {
        /* stopped by settings this resume changes: the next check decides again, from
         * the counts kept (a raised patience goes on where the old one stopped) */
        s->es_stopped = 0;
        if (rt_dist_rank() == 0)
            fprintf(stderr, "trainc: note: early stopping ended this run at step %lld; its "
                    "settings differ now, so training goes on (the checks without an "
                    "improvement so far count)\n", (long long)s->step);
    }
    s->data_rows = opt_int(ls, "data_rows", f, 0);
    const cJSON *fp = cJSON_GetObjectItemCaseSensitive(ls, "data_fingerprint");
    s->data_fp = 0;
    if (fp) {
        char *end;
        if (!cJSON_IsString(fp) || strlen(fp->valuestring) != 16 ||
            (s->data_fp = strtoull(fp->valuestring, &end, 16), *end))
            rt_input_error("%s: bad field 'data_fingerprint' (a damaged checkpoint?)", f);
    }
#define X(fld) s->fld = get_num(ls, #fld, f);
    LOOP_REALS(X)
#undef X
    s->log_g_loss = opt_num(ls, "log_g_loss", f, 0);
    s->loss_scale_d = opt_num(ls, "loss_scale_d", f, s->loss_scale);
    s->scale_growth_d = opt_int(ls, "scale_growth_d", f, 0);
    s->skipped_d = opt_int(ls, "skipped_d", f, 0);
}

void rt_ckpt_load(const char *ck, const rt_model *m, const rt_train_config *c, rt_loop_state *s,
                  float *params, float *layer_state, float *state, rt_state_part part,
                  char *const *lines, int nlines)
{
    char f[RT_PATH_MAX + 64];
    cJSON *j = read_state(ck, f, sizeof f);
    check_origin(j, ck, f, m);
    const cJSON *tl = cJSON_GetObjectItemCaseSensitive(j, "train");
    if (!cJSON_IsArray(tl))
        rt_input_error("%s: missing field 'train'", f);
    int es_changed = check_train(tl, ck, f, lines, nlines);
    read_loop(cJSON_GetObjectItemCaseSensitive(j, "loop"), f, s, es_changed);
    cJSON_Delete(j);
    check_loop(s, ck, f);
    snprintf(f, sizeof f, "%s/model.safetensors", ck);
    rt_safetensors_read(f, m, params, layer_state);
    const char *parts[MAX_PARTS];
    int np = opt_parts(c, parts);
    for (int k = 0; k < np; k++) {
        StateModel sm;
        state_model(&sm, m, parts[k]);
        snprintf(f, sizeof f, "%s/%s.safetensors", ck, parts[k]);
        rt_safetensors_read_range(f, &sm.m, part.lo, part.hi,
                                  state + (size_t)k * (size_t)(part.hi - part.lo));
        state_model_free(&sm);
    }
}
