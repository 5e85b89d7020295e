/* agree.c: rank agreement. With several ranks, before rank 0 writes anything, every
 * rank checks that it runs what rank 0 runs (model, training config, weights, mode,
 * data sizes, starting point, validation); one that differs says how, and the job ends
 * with exit 1 instead of training apart or waiting forever in a collective. */
#include <stdlib.h>
#include <string.h>
#include "run.h"

/* Ranks started with another training config than rank 0's (another --set): rank 0's
 * config lines (lines[n], "" where not compared) go to every rank, and each that differs
 * names its first keys that do, with both values ("another training config" alone sent
 * the user comparing command lines by eye). Every rank calls it. */
static void config_differs(const Run *r, char **lines, int n, int differs)
{
    int64_t len = 0;
    if (r->rank == 0)
        for (int i = 0; i < n; i++)
            len += (int64_t)strlen(lines[i]) + 1;
    rt_broadcast(&len, sizeof len, 0);
    char *text = rt_xmalloc((size_t)len + 1);
    if (r->rank == 0) {
        char *p = text;
        for (int i = 0; i < n; i++)
            p += sprintf(p, "%s\n", lines[i]);
    }
    rt_broadcast(text, len, 0);
    text[len] = 0;
    char said[1024] = "";
    int shown = 0;
    for (int i = 0; differs && i < n; i++) {
        const char *eq = strchr(lines[i], '=');
        if (!eq)
            continue;
        size_t kl = (size_t)(eq - lines[i]) + 1;   /* "KEY=" */
        const char *there = NULL;
        for (const char *l = text; *l; l = strchr(l, '\n') + 1)
            if (!strncmp(l, lines[i], kl)) {
                there = l + kl;
                break;
            }
        size_t tl = there ? strcspn(there, "\n") : 0;
        if (there && tl == strlen(eq + 1) && !strncmp(there, eq + 1, tl))
            continue;
        size_t u = strlen(said);
        if (shown < 3)        /* the first three, then how many more */
            snprintf(said + u, sizeof said - u, "%s%.*s: %s here, %.*s on rank 0", shown ? "; " : "",
                     (int)kl - 1, lines[i], eq + 1, there ? (int)tl : 8, there ? there : "(absent)");
        shown++;
    }
    if (differs)
        fprintf(stderr, "trainc: error: rank %d of %d: another training config than rank 0's: "
                "%s%s%.0d%s\n", r->rank, r->world,
                said[0] ? said : "(a key rank 0 has and this rank not)",
                shown > 3 ? "; and " : "", shown > 3 ? shown - 3 : 0, shown > 3 ? " more" : "");
    rt_xfree(text);
}

/* --resume on some ranks only: said before any rank reads a checkpoint, whose checks
 * (another rank count, other data) only rank 0 reports, as every rank that resumes finds
 * them alike: a rank resumed alone exited 1 without a word. Every rank calls it. */
void rt_agree_on_resume(const Run *r)
{
    int64_t v[1] = {r->o.resume != NULL};   /* rank 0's */
    rt_broadcast(v, sizeof v, 0);
    double n = r->o.resume != NULL;
    rt_allreduce_sum_f64(&n, 1);
    if (n == 0 || n == r->world)
        return;
    if (r->rank == 0)
        rt_input_error("%g of the %d ranks run from another starting point (--resume: another "
                       "checkpoint, or none) than rank 0; start every rank with the same "
                       "--resume DIR, or none", v[0] ? r->world - n : n, r->world);
    if ((r->o.resume != NULL) != v[0])
        fprintf(stderr, "trainc: error: rank %d of %d: %s%s here, %s on rank 0\n", r->rank,
                r->world, r->o.resume ? "--resume " : "no --resume",
                r->o.resume ? r->o.resume : "", v[0] ? "--resume" : "none");
    exit(RT_EXIT_INPUT);
}

/* Ranks that start elsewhere than rank 0 (one resumed and another not, or another
 * checkpoint: the same --resume DIR whose newest checkpoint is damaged, or missing, on
 * some ranks' disks only, each taking its newest intact one): each such rank says where
 * it starts and where rank 0 does (the warnings of damaged checkpoints are rank 0's
 * alone). Every rank calls it. */
static void start_differs(const Run *r, const rt_loop_state *s, int differs)
{
    int64_t root[2] = {r->o.resume != NULL, s->step};
    rt_broadcast(root, sizeof root, 0);
    if (!differs)
        return;
    char ck[RT_PATH_MAX + 64] = "";
    if (r->o.resume && rt_ckpt_resume_point(r->o.resume, ck, sizeof ck) != 0)
        ck[0] = 0;
    char here[RT_PATH_MAX + 128];
    if (r->o.resume)
        snprintf(here, sizeof here, "its checkpoint %s (step %lld)", ck, (long long)s->step);
    else
        snprintf(here, sizeof here, "step %lld (no --resume)", (long long)s->step);
    fprintf(stderr, "trainc: error: rank %d of %d: starts from %s, rank 0 from %s %lld%s\n",
            r->rank, r->world, here, root[0] ? "a checkpoint at step" : "step", (long long)root[1],
            !root[0] ? " (no --resume)"
            : r->o.resume ? " (is a newer checkpoint damaged or missing where one of them reads "
                            "it?)" : "");
}

/* Several ranks, before rank 0 writes anything: every rank has passed its checks of
 * the options, data and weights (one that found bad input has exited 1, and mpirun
 * ends the job while rank 0 waits here), and they run the same thing: the model, the
 * training config (but for paths and loader threads, which may differ from node to
 * node) and the starting weights. Ranks started with other --set, --init or --resume
 * options would otherwise train apart without a word, or hang in a collective. */
void rt_agree_on_run(Run *r, const rt_loop_state *s)
{
    enum { N = 7 };
    uint64_t mine[N], root[N];
    mine[0] = rt_xxh64(r->m->model_hash, strlen(r->m->model_hash), 0);
    int n;
    char **lines = rt_config_dump(&r->c, &n);
    mine[1] = 0;              /* each line's hash seeds the next's */
    static const char *const local[] = {"data.", "out_dir=", "loader.workers=",
                                        "loader.prefetch=", NULL};
    for (int i = 0; i < n; i++) {
        int skip = 0;
        for (int k = 0; local[k]; k++)
            skip |= !strncmp(lines[i], local[k], strlen(local[k]));
        if (!skip)
            mine[1] = rt_xxh64(lines[i], strlen(lines[i]) + 1, mine[1]);
        else
            lines[i][0] = 0;  /* (not compared: left out of config_differs too) */
    }
    mine[2] = rt_xxh64(r->params, sizeof(float) * (size_t)r->m->param_floats, 0);
    /* the mode (--eval, --lr-find and its options): every rank takes part in the same
     * collectives, or the ones that differ wait for the others until the watchdog */
    const double mode[] = {(double)r->o.eval, (double)r->o.lr_find, (double)r->o.lr_find_steps,
                           r->o.lr_find_lo, r->o.lr_find_hi};
    mine[3] = rt_xxh64(mode, sizeof mode, 0);
    /* each rank's share of the training data (its files may differ; their sizes may
     * not): as many batches an epoch, each a step's collectives (validation's shares
     * may differ by a batch: one sum at its end) */
    mine[4] = rt_xxh64(&r->batches_per_epoch, sizeof r->batches_per_epoch, 0);
    /* where the run starts: a rank resumed and another not (or from another checkpoint)
     * would train at other steps, schedules and data positions */
    const int64_t at[] = {r->o.resume != NULL, s->step, s->epoch, s->batch, s->updates};
    mine[5] = rt_xxh64(at, sizeof at, 0);
    /* validation or none: the ranks that validate wait in its sum for the others (its
     * files may differ, and their sizes: each rank validates its share) */
    const int val = r->has_val;
    mine[6] = rt_xxh64(&val, sizeof val, 0);
    memcpy(root, mine, sizeof root);
    rt_broadcast(root, sizeof root, 0);
    double differ[N];
    for (int k = 0; k < N; k++)
        differ[k] = root[k] != mine[k];
    rt_allreduce_sum_f64(differ, N);
    if (differ[1] > 0)        /* which keys: every rank takes part, those that differ say */
        config_differs(r, lines, n, mine[1] != root[1]);
    for (int i = 0; i < n; i++)
        free(lines[i]);
    free(lines);
    static const char *const what[N] = {
        "another model", "another training config", "from other weights",
        "in another mode (--eval, --lr-find and its options)",
        "on training data of another size (batches an epoch)",
        "from another starting point (--resume: another checkpoint, or none)",
        "with other validation data (some where it has none, or none where it has some)"};
    if (differ[5] > 0)        /* which step each starts from: every rank takes part */
        start_differs(r, s, mine[5] != root[5]);
    for (int k = 0; k < N; k++) {
        /* (other starting points load other weights: the cause is said, not that) */
        if (differ[k] == 0 || (k == 2 && differ[5] > 0))
            continue;
        if (r->rank == 0)
            rt_input_error("%g of the %d ranks run %s than rank 0; start every rank with the "
                           "same trainer, options (--set, --init, --resume, --eval, --lr-find) "
                           "and data sizes, with validation data on all or none", differ[k],
                           r->world, what[k]);
        exit(RT_EXIT_INPUT);
    }
}
