#define _GNU_SOURCE
/* prof.c: --profile, where a training step's time goes, instruction by instruction.
 *
 * The generated forward() and backward() start each instruction with RT_AT(index,
 * label) (index: its place in plan.json's list). While a pass is profiled, e->prof is
 * this timer: on the CPU, where every runtime call returns when its work is done, an
 * instruction's time is the clock from its RT_AT to the next one (or the end of the
 * pass); on a GPU, an event is recorded on the compute stream at each RT_AT and at
 * the end, and after the pass the host waits for the last one and reads the times
 * between them, the GPU's time for each instruction (the wait makes a profiled step a
 * little slower than an unprofiled one: the next pass is not queued while this one
 * runs). The first two steps of a process are not profiled (first launches, caches).
 * The gradients' norm and the optimizer's update are timed the same way, as a third
 * part of the step with one mark of its own (index n, past the plan's instructions);
 * what is left of the step's wall time is the data, the host and the waits.
 * Everything is allocated before the loop (the events by rt_cu_prof_setup). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "rt_cuda.h"
#include "rt_loop.h"

struct rt_prof {
    int cap;                   /* indices 0 .. cap - 2: the model's instructions; cap - 1:
                                  the optimizer (rt_prof_optimizer_begin) */
    double *ms;                /* per index: milliseconds over the profiled steps */
    int64_t *calls;
    const char **label;
    signed char *pass;         /* 0 forward, 1 backward, 2 optimizer, -1 never seen */
    int cur_pass, gpu;
    int open;                  /* the instruction being timed (CPU), -1 none */
    double t_open;
    int n_ev;                  /* GPU: this pass's events so far; their instructions */
    int *ev_index;
    float *ev_ms;              /* GPU: the times between them, read after the pass */
    int64_t steps;
    double step_ms;            /* wall time of the profiled steps */
};

rt_prof *rt_prof_new(int gpu, int n)
{
    rt_prof *p = calloc(1, sizeof *p);
    if (!p)
        rt_fail("out of memory");
    p->gpu = gpu;
    p->open = -1;
    p->cap = (n > 0 ? n : 0) + 1;
    p->ms = rt_xmalloc((size_t)p->cap * sizeof *p->ms);
    p->calls = rt_xmalloc((size_t)p->cap * sizeof *p->calls);
    p->label = rt_xmalloc((size_t)p->cap * sizeof *p->label);
    p->pass = rt_xmalloc((size_t)p->cap);
    memset(p->pass, -1, (size_t)p->cap);
    p->ev_index = rt_xmalloc((size_t)p->cap * sizeof *p->ev_index);
    p->ev_ms = rt_xmalloc((size_t)p->cap * sizeof *p->ev_ms);
    return p;
}

void rt_prof_pass_begin(rt_exec *e, rt_prof *p, int pass)
{
    p->cur_pass = pass;
    p->open = -1;
    p->n_ev = 0;
    e->prof = p;
}

static const char *const opt_label = "step: the gradients' norm and the optimizer's update";
static const char *const pass_name[3] = {"forward", "backward", "optimizer"};

void rt_prof_at(rt_exec *e, int index, const char *label)
{
    rt_prof *p = e->prof;
    if (index < 0 || index >= p->cap - (p->cur_pass != 2))
        rt_die("rt_prof_at: index %d outside the model's %d instructions", index, p->cap - 1);
    p->label[index] = label;
    p->pass[index] = (signed char)p->cur_pass;
    p->calls[index]++;
    if (p->gpu) {   /* a pass marks each of its instructions once at most */
        if (p->n_ev >= p->cap)
            rt_die("rt_prof_at: more marks in a pass than instructions");
        p->ev_index[p->n_ev] = index;
        rt_cu_prof_event(e, p->n_ev++);
        return;
    }
    double t = rt_now();
    if (p->open >= 0)
        p->ms[p->open] += 1e3 * (t - p->t_open);
    p->open = index;
    p->t_open = t;
}

void rt_prof_optimizer_begin(rt_exec *e, rt_prof *p)
{
    rt_prof_pass_begin(e, p, 2);
    rt_prof_at(e, p->cap - 1, opt_label);
}

void rt_prof_pass_end(rt_exec *e)
{
    rt_prof *p = e->prof;
    e->prof = NULL;
    if (p->gpu && p->n_ev) {
        rt_cu_prof_elapsed(e, p->n_ev, p->ev_ms);   /* the end's event, then the wait */
        for (int k = 0; k < p->n_ev; k++)
            p->ms[p->ev_index[k]] += p->ev_ms[k];
    } else if (!p->gpu && p->open >= 0) {
        p->ms[p->open] += 1e3 * (rt_now() - p->t_open);
        p->open = -1;
    }
}

void rt_prof_step(rt_prof *p, double seconds)
{
    p->steps++;
    p->step_ms += 1e3 * seconds;
}

static int by_ms(const void *a, const void *b, void *ctx)
{
    const double *ms = ctx;
    int i = *(const int *)a, j = *(const int *)b;
    return ms[j] > ms[i] ? 1 : ms[j] < ms[i] ? -1 : i - j;
}

/* what a label says was done: the text after "where: " (spec paths hold no ": ") */
static const char *what_of(const char *label)
{
    const char *c = strstr(label, ": ");
    return c ? c + 2 : label;
}

/* Instructions of one kind: the same pass and the same what, wherever in the model (the
 * 12 attention backwards of GPT-2's blocks are one kind). kind[i] is the first index
 * of i's kind; kms[k] and kn[k] (at that first index) its time and instruction count. */
static void group_kinds(const rt_prof *p, const int *order, int m, int *kind, double *kms, int *kn)
{
    for (int a = 0; a < m; a++) {
        int i = order[a];
        kind[i] = i;
        for (int b = 0; b < a; b++) {
            int j = order[b];
            if (kind[j] == j && p->pass[j] == p->pass[i] && !strcmp(what_of(p->label[j]), what_of(p->label[i]))) {
                kind[i] = j;
                break;
            }
        }
        if (kind[i] == i)
            kms[i] = 0, kn[i] = 0;
        kms[kind[i]] += p->ms[i];
        kn[kind[i]]++;
    }
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const char *c = s; *c; c++)
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else
            fputc(*c, f);
    fputc('"', f);
}

/* What rt_prof_report adds up: the passes' and the step's times a step, the
 * instructions seen (order), and their kinds (korder, each kind's first instruction;
 * kms and kn by that index: the kind's time and its instructions). */
typedef struct report {
    rt_prof *p;
    double n, step, rest, pass_ms[3];
    int m, *order;
    int nk, *korder, *kind, *kn;
    double *kms;
} report;

static void report_gather(report *r, rt_prof *p)
{
    r->p = p;
    r->n = (double)p->steps;
    const size_t cap = (size_t)p->cap;   /* >= 1 (rt_prof_new) */
    r->order = rt_xmalloc(cap * sizeof *r->order);
    for (int i = 0; i < p->cap; i++)
        if (p->pass[i] >= 0) {
            r->pass_ms[p->pass[i]] += p->ms[i] / r->n;
            r->order[r->m++] = i;
        }
    r->step = p->step_ms / r->n;
    r->rest = r->step - r->pass_ms[0] - r->pass_ms[1] - r->pass_ms[2];
    r->kind = rt_xmalloc(cap * sizeof *r->kind);
    r->kn = rt_xmalloc(cap * sizeof *r->kn);
    r->kms = rt_xmalloc(cap * sizeof *r->kms);
    group_kinds(p, r->order, r->m, r->kind, r->kms, r->kn);
    r->korder = rt_xmalloc(cap * sizeof *r->korder);
    for (int k = 0; k < r->m; k++)
        if (r->kind[r->order[k]] == r->order[k])
            r->korder[r->nk++] = r->order[k];
}

/* profile.json: every instruction in plan.json's order, then the kinds, in order of
 * first appearance, their instructions summed. -1 when it cannot be written. */
static int write_profile_json(const report *r, const char *dir)
{
    const rt_prof *p = r->p;
    char path[RT_PATH_MAX + 32], a[32], b[32];
    snprintf(path, sizeof path, "%s/profile.json", dir);
    FILE *f = rt_tmp_open(path);
    if (f) {
        fprintf(f, "{\"device\":\"%s\",\"steps\":%lld,\"step_ms\":%s,\"forward_ms\":%s,", p->gpu ? "cuda" : "cpu",
                (long long)p->steps, rt_json_num(a, r->step), rt_json_num(b, r->pass_ms[0]));
        fprintf(f, "\"backward_ms\":%s,\"optimizer_ms\":%s,", rt_json_num(a, r->pass_ms[1]),
                rt_json_num(b, r->pass_ms[2]));
        fprintf(f, "\"other_ms\":%s,\"instructions\":[\n", rt_json_num(a, r->rest));
        for (int k = 0; k < r->m; k++) {
            int i = r->order[k];
            if (i == p->cap - 1)
                fprintf(f, "{\"index\":null,");   /* not in plan.json's list */
            else
                fprintf(f, "{\"index\":%d,", i);
            fprintf(f, "\"pass\":\"%s\",\"ms\":%s,\"calls_per_step\":%s,\"label\":",
                    pass_name[p->pass[i]], rt_json_num(a, p->ms[i] / r->n),
                    rt_json_num(b, (double)p->calls[i] / r->n));
            json_str(f, p->label[i]);
            fprintf(f, "}%s\n", k + 1 < r->m ? "," : "");
        }
        fprintf(f, "],\"kinds\":[\n");
        for (int k = 0; k < r->nk; k++) {
            int i = r->korder[k];
            fprintf(f, "{\"pass\":\"%s\",\"instructions\":%d,\"ms\":%s,\"what\":",
                    pass_name[p->pass[i]], r->kn[i], rt_json_num(a, r->kms[i] / r->n));
            json_str(f, what_of(p->label[i]));
            fprintf(f, "}%s\n", k + 1 < r->nk ? "," : "");
        }
        fprintf(f, "]}\n");
    }
    return !f || rt_tmp_commit(f, path) != 0 ? -1 : 0;
}

/* The table on stderr: the totals, the 15 instructions that take the most, then (when
 * some kind has several instructions: a repeat's blocks) the 10 largest kinds. */
static void print_profile(report *r, const char *dir)
{
    const rt_prof *p = r->p;
    const double n = r->n, step = r->step;
    qsort_r(r->order, (size_t)r->m, sizeof *r->order, by_ms, p->ms);
    fprintf(stderr, "trainc: profile of %lld steps (%s time): %.3f ms a step = forward %.3f + "
                    "backward %.3f + optimizer %.3f + the rest %.3f (data, host%s)\n",
            (long long)p->steps, p->gpu ? "GPU" : "CPU", step, r->pass_ms[0], r->pass_ms[1],
            r->pass_ms[2], r->rest, p->gpu ? ", the GPU idle" : "");
    fprintf(stderr, "   ms/step   share  index  where: what\n");
    for (int k = 0; k < r->m && k < 15; k++) {
        int i = r->order[k];
        char idx[16];
        if (i == p->cap - 1)
            snprintf(idx, sizeof idx, "-");
        else
            snprintf(idx, sizeof idx, "%d", i);
        fprintf(stderr, "  %8.3f  %5.1f%%  %5s  %s%s\n", p->ms[i] / n,
                step > 0 ? 100.0 * p->ms[i] / n / step : 0.0, idx,
                p->pass[i] == 1 ? "(backward) " : "", p->label[i]);
    }
    if (r->m > 15)
        fprintf(stderr, "  (%d more in %s/profile.json)\n", r->m - 15, dir);
    if (r->nk == r->m)
        return;
    qsort_r(r->korder, (size_t)r->nk, sizeof *r->korder, by_ms, r->kms);
    fprintf(stderr, "   ms/step   share  count  what (the same work summed over the model)\n");
    for (int k = 0; k < r->nk && k < 10; k++) {
        int i = r->korder[k];
        fprintf(stderr, "  %8.3f  %5.1f%%  %5d  %s%s\n", r->kms[i] / n,
                step > 0 ? 100.0 * r->kms[i] / n / step : 0.0, r->kn[i],
                p->pass[i] == 1 ? "(backward) " : "", what_of(p->label[i]));
    }
    if (r->nk > 10)
        fprintf(stderr, "  (%d more kinds in %s/profile.json)\n", r->nk - 10, dir);
}

int rt_prof_report(rt_prof *p, const char *dir, int rank0)
{
    if (!p->steps) {
        if (rank0)
            fprintf(stderr, "trainc: profile: no step was profiled (a run's first 2 steps are "
                            "not: run 3 or more)\n");
        return 0;
    }
    report r = {0};
    report_gather(&r, p);
    int rc = 0;
    if (rank0) {
        rc = write_profile_json(&r, dir);
        print_profile(&r, dir);
    }
    free(r.kind);
    free(r.kn);
    free(r.kms);
    free(r.korder);
    free(r.order);
    return rc;
}

void rt_prof_free(rt_prof *p)
{
    if (!p)
        return;
    free(p->ms);
    free(p->calls);
    free(p->label);
    free(p->pass);
    free(p->ev_index);
    free(p->ev_ms);
    free(p);
}
