#define _GNU_SOURCE
/* resume.c: --resume. The run's config goes on; the checkpoint is loaded and checked to
 * continue this run exactly (the same data, a position its step puts it at, records
 * that end where it was taken); in the output folder the records after it are cut (or
 * copied, --out elsewhere) and the best weights restored; a run resumed at a limit
 * says how to go further. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "run.h"

/* --resume DIR: the run goes on with the config it had, --set options included, so
 * that `--resume DIR` alone continues the same command; where the spec was edited
 * since, the spec's new values win (rt_config_merge). The checkpoint's check of the
 * fields that change the numbers follows when it is loaded. */
void rt_resume_config(const rt_model *m, const char *dir, rt_train_config *c)
{
    char ck[RT_PATH_MAX + 64], **then, **run;
    int n_then, n_run, n_now, n;
    if (rt_ckpt_resume_point(dir, ck, sizeof ck) != 0 ||
        rt_ckpt_configs(ck, &then, &n_then, &run, &n_run) != 0)
        return;                /* none (said later), or one that kept no spec config */
    char **now = rt_spec_lines(m, &n_now);
    char **lines = rt_config_merge(then, n_then, run, n_run, now, n_now, &n);
    rt_config_defaults(c);
    rt_set_lines(c, (const char *const *)lines, n, ck);
    rt_free_lines(then, n_then);
    rt_free_lines(run, n_run);
    rt_free_lines(now, n_now);
    rt_free_lines(lines, n);
}

/* --resume: best.safetensors as it was at the checkpoint (the checkpoint's second
 * name of it); none when no validation had run by then. A checkpoint written before
 * it kept the best weights leaves the file as it is. */
static void restore_best(Run *r, const rt_loop_state *s)
{
    char ck[RT_PATH_MAX + 64], src[RT_PATH_MAX + 96], dst[RT_PATH_MAX + 64];
    if (rt_ckpt_resume_point(r->o.resume, ck, sizeof ck) != 0 || rt_ckpt_best_damaged())
        return;               /* (a damaged copy: OUT's best.safetensors stays as it is) */
    rt_join_path(src, sizeof src, ck, "best.safetensors");
    rt_join_path(dst, sizeof dst, r->out, "best.safetensors");
    if (access(src, F_OK) == 0) {
        if (rt_link_or_copy(src, dst) != 0)
            rt_fail("cannot write %s: %s%s", dst, strerror(errno), rt_full_hint(errno));
    } else if (s->best_step < 0 && unlink(dst) != 0 && errno != ENOENT)
        rt_fail("cannot remove %s: %s", dst, strerror(errno));
}

/* --resume A --out B: A's TensorBoard events files linked (or copied) into B, as its
 * records are (the resumed session's own file drops their points past the checkpoint) */
static void link_events(const char *from, const char *to)
{
    DIR *dp = opendir(from);
    if (!dp)
        return;
    for (struct dirent *e; (e = readdir(dp));) {
        if (strncmp(e->d_name, RT_TB_PREFIX, strlen(RT_TB_PREFIX)) != 0)
            continue;
        char src[RT_PATH_MAX + 300], dst[RT_PATH_MAX + 300];
        rt_join_path(src, sizeof src, from, e->d_name);
        rt_join_path(dst, sizeof dst, to, e->d_name);
        if (access(dst, F_OK) != 0 && rt_link_or_copy(src, dst) != 0)
            rt_fail("cannot copy %s to %s: %s", src, dst, strerror(errno));
    }
    closedir(dp);
}

/* --resume A --out B: B's metrics.jsonl starts with A's records up to the checkpoint
 * (what a resume in A keeps), so B reads as the one run, loss.svg with its history.
 * A's records past that length are not B's; a file of A's shorter than it (records
 * removed by hand) is taken whole, to its last full line. */
static void copy_history(const char *from, const char *to, int64_t bytes)
{
    char src[RT_PATH_MAX + 32], dst[RT_PATH_MAX + 32], tmp[RT_PATH_MAX + 40];
    rt_join_path(src, sizeof src, from, "metrics.jsonl");
    rt_join_path(dst, sizeof dst, to, "metrics.jsonl");
    snprintf(tmp, sizeof tmp, "%s.tmp", dst);
    int64_t size;
    int in = rt_open_regular(src, &size);
    if (in < 0)
        return;   /* none (or not a file): B starts its own */
    FILE *f = fdopen(in, "rb"), *o = fopen(tmp, "wb");
    if (!f || !o)
        rt_fail("cannot write %s: %s", tmp, strerror(errno));
    int64_t left = bytes < size ? bytes : size, whole = 0, done = 0;
    char buf[1 << 16];
    while (left > 0) {
        size_t n = fread(buf, 1, left < (int64_t)sizeof buf ? (size_t)left : sizeof buf, f);
        if (n == 0)
            break;
        if (fwrite(buf, 1, n, o) != n)
            break;
        for (size_t i = 0; i < n; i++)
            if (buf[i] == '\n')
                whole = done + (int64_t)i + 1;
        done += (int64_t)n;
        left -= (int64_t)n;
    }
    fclose(f);
    if (fflush(o) != 0 || ferror(o) || ftruncate(fileno(o), whole) != 0 || fsync(fileno(o)) != 0 ||
        fclose(o) != 0 || rename(tmp, dst) != 0) {
        int e = errno;
        unlink(tmp);
        rt_fail("cannot write %s: %s%s", dst, strerror(e), rt_full_hint(e));
    }
}

/* A resumed checkpoint's place in its epoch must be where its step puts it:
 * steps_per_epoch steps an epoch of `accumulate` batches each, the epoch's last step
 * taking the rest; at an epoch's end either (epoch + 1, batch 0) or (epoch, all its
 * batches). A damaged or hand-edited state.json would otherwise start the loader
 * elsewhere, and the run would silently differ from the one it continues. */
static void check_position(const Run *r, const rt_loop_state *s, const char *ck, int other_data)
{
    int64_t e = s->step / r->steps_per_epoch, k = s->step % r->steps_per_epoch;
    int ok = k ? s->epoch == e && s->batch == k * r->c.accumulate
               : (s->epoch == e && s->batch == 0) ||
                     (s->step > 0 && s->epoch == e - 1 && s->batch == r->batches_per_epoch);
    if (!ok)
        rt_input_error("%s/state.json: epoch %lld, batch %lld is not where step %lld puts a run "
                       "of %lld batches an epoch, %lld a step (%s)", ck,
                       (long long)s->epoch, (long long)s->batch, (long long)s->step,
                       (long long)r->batches_per_epoch, (long long)r->c.accumulate,
                       other_data ? "the data has another size: this run cannot go on over it"
                                  : "a damaged checkpoint?");
}

/* The data's fingerprint (rt_dataset_fingerprint: the training data's, then the
 * validation data's or none); with several ranks, every rank's (each reads its own
 * files) in rank order, in one value. Every rank calls it. */
uint64_t rt_data_fingerprint(const Run *r)
{
    uint64_t fp = rt_dataset_fingerprint(&r->train);
    uint64_t val = r->has_val ? rt_dataset_fingerprint(&r->val) : 0;
    fp = rt_xxh64(&val, sizeof val, fp);
    fp += !fp;
    if (r->world == 1)
        return fp;
    double *v = calloc((size_t)r->world * 3, sizeof *v);   /* each exact in a double */
    if (!v)
        rt_fail("out of memory");
    v[3 * r->rank] = (double)r->train.rows;
    v[3 * r->rank + 1] = (double)(fp >> 32);
    v[3 * r->rank + 2] = (double)(fp & 0xffffffffu);
    rt_allreduce_sum_f64(v, 3 * (int64_t)r->world);
    uint64_t h = 0;
    for (int i = 0; i < 3 * r->world; i++) {
        uint64_t x = (uint64_t)v[i];
        h = rt_xxh64(&x, sizeof x, h);
    }
    free(v);
    return h ? h : 1;
}

/* The data a resume goes on with is the checkpoint's: the order of samples, the epochs
 * and the position in them follow from the training data (and early stopping and the
 * best weights from the validation data), so other data would not continue the run but
 * start another (from its weights: --init). Its files may have moved (the paths may
 * differ); checkpoints from before the data was recorded (data_fp 0) are not checked.
 * With several ranks every rank's data counts, and every rank finds it so. */
static void check_same_data(const Run *r, const rt_loop_state *s, const char *ck, uint64_t fp)
{
    if (!s->data_fp || (s->data_fp == fp && (r->world > 1 || s->data_rows == r->train.rows)))
        return;
    char what[160];
    if (r->world > 1)
        snprintf(what, sizeof what, "on one rank or more");
    else if (s->data_rows != r->train.rows)
        snprintf(what, sizeof what, "%lld training samples then, %lld now", (long long)s->data_rows,
                 (long long)r->train.rows);
    else
        snprintf(what, sizeof what, "the same %lld training samples, other contents",
                 (long long)s->data_rows);
    const char *other = getenv("TRAINC_RESUME_OTHER_DATA");
    if (other && !strcmp(other, "1")) {   /* asked for: the run goes on, not exactly */
        if (r->rank == 0)
            fprintf(stderr, "trainc: warning: the data (training or validation) is not the data "
                    "of %s (%s): going on from its weights, optimizer state and step as "
                    "TRAINC_RESUME_OTHER_DATA=1 asks; the batches from here are not those the "
                    "run would have had\n", ck, what);
        return;
    }
    if (r->rank == 0)
        rt_input_error("--resume: the data (training or validation) is not the data of %s (%s): a "
                       "resume "
                       "continues that run exactly, and its order of batches follows its "
                       "data\n  hint: to go on training these weights on this data, start a "
                       "new run with --init %s/model.safetensors (the weights alone), or resume "
                       "with TRAINC_RESUME_OTHER_DATA=1 in the environment (the optimizer state "
                       "and the step too, knowingly not exact)", ck, what, ck);
    exit(RT_EXIT_INPUT);
}

/* metrics.jsonl is cut back to the checkpoint's length at resume: that length must end
 * a record (a newline before it), else the cut would leave half a line. A file shorter
 * than it (records removed by hand since) is appended to as it is, and said so. */
static void check_metrics_cut(const char *out, int64_t bytes, const char *ck)
{
    char p[RT_PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/metrics.jsonl", out);
    rt_metrics_file_check(p);   /* before the resume changes anything */
    FILE *f = fopen(p, "rb");
    if (!f)
        return;   /* none: a new one */
    struct stat st;
    int ok = fstat(fileno(f), &st) == 0;
    if (ok && st.st_size < bytes) {
        fprintf(stderr, "trainc: warning: %s has %lld bytes, fewer than the %lld it had at the "
                "checkpoint (records removed since?): appending to it from its last whole record\n", p,
                (long long)st.st_size, (long long)bytes);
    } else if (ok && bytes > 0) {
        ok = fseeko(f, (off_t)(bytes - 1), SEEK_SET) == 0 && fgetc(f) == '\n';
        if (!ok) {
            fclose(f);
            rt_input_error("%s/state.json: metrics_bytes %lld does not end a record of %s (a "
                           "damaged checkpoint?)", ck, (long long)bytes, p);
        }
    }
    fclose(f);
}

/* A resumed run whose limits are reached trains nothing: the limit, and the option
 * that takes it further (raising max_steps alone does not pass an epochs the spec or
 * --set gave; a left-out epochs is no limit once max_steps is set). */
void rt_resumed_at_limit(const rt_train_config *c, const rt_loop_state *s, int end)
{
    if (end == END_EPOCHS)
        fprintf(stderr, "trainc: note: this run has done its epochs (%lld): nothing to train. To "
                "go further: --set epochs=N (more than %lld), or %s --set max_steps=N\n",
                (long long)rt_epochs(c), (long long)rt_epochs(c),
                c->epochs == RT_UNSET ? "(its epochs left out: no limit then)" : "--set epochs=null");
    else if (end == END_EARLY)
        fprintf(stderr, "trainc: note: early stopping ended this run at step %lld: nothing to "
                "train (its best weights are best.safetensors). To go further: --set "
                "early_stopping.patience=N (more than %lld), other thresholds, or --set "
                "early_stopping=null\n", (long long)s->step, (long long)c->es_patience);
    else if (end == END_MAX_STEPS)
        fprintf(stderr, "trainc: note: this run is at max_steps %lld: nothing to train. To go "
                "further: --set max_steps=N (more than %lld)\n", (long long)c->max_steps,
                (long long)c->max_steps);
    else
        fprintf(stderr, "trainc: note: this run has spent its max_time (%g s of %g): nothing to "
                "train. To go further: --set max_time=SECONDS (more), or null\n", s->elapsed,
                c->max_time);
}

/* --resume DIR where no checkpoint was ever completed (damaged ones are
 * rt_ckpt_resume_point's error): a run killed outright (SIGKILL, the OOM killer, a
 * preemption without grace) before its first checkpoint, or one with "checkpoint":
 * null. There is nothing to go on from: the run starts over, and a new run into DIR
 * moves its records aside (outdir.c), so the same folder serves. */
static _Noreturn void no_checkpoint(const char *prog, const char *dir)
{
    if (access(dir, F_OK) != 0)
        rt_input_error("--resume %s: %s", dir, strerror(errno));
    char base[RT_PATH_MAX];
    snprintf(base, sizeof base, "%s", dir);
    for (size_t n = strlen(base); n > 1 && base[n - 1] == '/'; n--)
        base[n - 1] = 0;
    rt_input_error("--resume %s: no complete checkpoint was written in %s/checkpoints (the "
                   "run ended before its first one, or \"checkpoint\" is null): there is "
                   "nothing to resume from\n  hint: %s --out %s starts the run over, into the "
                   "same folder (its earlier records are moved aside to %s.1, or the next "
                   "free number), with the options it was started with", dir, base, prog,
                   base, base);
}

/* --resume DIR: the checkpoint it continues from, into r's parameters and state and s
 * (every rank reads it), checked to continue this run (its data, its position); the
 * metrics it keeps, when the run goes on in its folder. */
void rt_resume_load(Run *r, rt_loop_state *s, uint64_t data_fp)
{
    char ck[RT_PATH_MAX + 64];
    if (rt_ckpt_resume_point(r->o.resume, ck, sizeof ck) != 0)
        no_checkpoint(r->prog, r->o.resume);
    int n;
    char **lines = rt_config_dump(&r->c, &n);
    rt_ckpt_load(ck, r->m, &r->c, s, r->params, r->layer_state, r->state, rt_zero_part(), lines, n);
    rt_free_lines(lines, n);
    r->resumed_from = s->step;
    rt_have_ckpt = rt_same_folder(r->out, r->o.resume);   /* the one resumed from */
    if (!r->o.eval) {   /* (--eval reads its weights alone: no training data there) */
        check_same_data(r, s, ck, data_fp);
        check_position(r, s, ck, s->data_fp && s->data_fp != data_fp);
    }
    if (!r->o.eval && r->rank == 0 && rt_same_folder(r->out, r->o.resume))
        check_metrics_cut(r->out, s->metrics_bytes, ck);
    if (r->rank == 0)     /* (every rank reads it: one says so) */
        fprintf(stderr, "trainc: %s %s from step %lld (epoch %lld)\n",
                r->o.eval ? "evaluating" : "resuming", ck, (long long)s->step,
                (long long)s->epoch);
}

void rt_resume_into_out(Run *r, const rt_loop_state *s)
{
    /* records after the checkpoint (a crash) are dropped: the file reads as one run;
     * only under the folder's lock (a refused second trainer must not cut the
     * records of the run that holds it) */
    char mp[RT_PATH_MAX + 32];
    snprintf(mp, sizeof mp, "%s/metrics.jsonl", r->out);
    if (rt_same_folder(r->out, r->o.resume) &&
        rt_file_size(r->out, "metrics.jsonl") > s->metrics_bytes &&
        truncate(mp, s->metrics_bytes) != 0)
        rt_fail("cannot truncate %s: %s", mp, strerror(errno));
    if (!rt_same_folder(r->out, r->o.resume)) {
        copy_history(r->o.resume, r->out, s->metrics_bytes);
        link_events(r->o.resume, r->out);
    }
    restore_best(r, s);
    char ck[RT_PATH_MAX + 64];
    if (rt_ckpt_resume_point(r->o.resume, ck, sizeof ck) == 0)
        rt_keep_best_resume(r, ck);
    if (rt_same_folder(r->out, r->o.resume))
        rt_ckpt_set_aside_damaged();
}
