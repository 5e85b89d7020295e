/* memplan.c: the static memory plan.
 *
 * Every activation, activation gradient and scratch buffer gets a fixed offset in
 * one arena. Sizes are per batch row, so the plan holds for any batch size: the
 * byte offset of a buffer is Bmax * offset. Live ranges are instruction intervals
 * (a buffer written in the forward pass and read in the backward pass lives across
 * both); buffers are placed biggest first, each into the smallest gap among the
 * already placed buffers whose lives overlap its own (best fit); unless that reaches the
 * lower bound, again in two other orders, the smallest arena kept (place_best). Parameters,
 * their gradients and optimizer state are in their own region, not here.
 *
 * With bf16-mixed the plan is the GPU's: activations take 2 bytes an element, the
 * saved statistics 4. The CPU, which computes in fp32, runs the same plan at twice
 * the offsets (rt_exec.arena_scale), so one host.c serves both. */
#include <stdlib.h>
#include <string.h>
#include "ir.h"

#define ALIGN 16


static int in_arena(const Tensor *t)
{
    return (t->kind == T_ACT || t->kind == T_TEMP) && !t->alias && t->materialized;
}

static void touch(Tensor *t, int i)
{
    t = tensor_base(t);
    if (t->first < 0 || i < t->first)
        t->first = i;
    if (i > t->last)
        t->last = i;
}

static int by_size(const void *a, const void *b)
{
    const Tensor *x = *(Tensor *const *)a, *y = *(Tensor *const *)b;
    if (x->row_bytes != y->row_bytes)
        return x->row_bytes > y->row_bytes ? -1 : 1;
    return x->id - y->id;
}

static int by_offset(const void *a, const void *b)
{
    const Tensor *x = *(Tensor *const *)a, *y = *(Tensor *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x->id - y->id;
}

/* the most bytes times instructions (a buffer's size times its life) first */
static int by_area(const void *a, const void *b)
{
    const Tensor *x = *(Tensor *const *)a, *y = *(Tensor *const *)b;
    int64_t ax = x->row_bytes * (x->last - x->first + 1), ay = y->row_bytes * (y->last - y->first + 1);
    if (ax != ay)
        return ax > ay ? -1 : 1;
    return x->id - y->id;
}

/* longest lived first, then biggest */
static int by_life(const void *a, const void *b)
{
    const Tensor *x = *(Tensor *const *)a, *y = *(Tensor *const *)b;
    if (x->last - x->first != y->last - y->first)
        return x->last - x->first > y->last - y->first ? -1 : 1;
    return by_size(a, b);
}

/* Places ts[0, n) in that order, each into the smallest gap among the buffers placed
 * before it whose lives overlap its own (best fit): the arena's bytes a row */
static int64_t place(Tensor **ts, int n, Tensor **placed)
{
    int64_t arena = 0;
    for (int i = 0; i < n; i++) {
        Tensor *t = ts[i];
        int m = 0;
        for (int j = 0; j < i; j++)
            if (ts[j]->first <= t->last && t->first <= ts[j]->last)
                placed[m++] = ts[j];
        qsort(placed, (size_t)m, sizeof *placed, by_offset);
        int64_t best = -1, best_gap = INT64_MAX, at = 0;
        for (int j = 0; j <= m; j++) {
            int64_t end = j < m ? placed[j]->offset : INT64_MAX;
            int64_t gap = end - at;
            if (gap >= t->row_bytes && (best < 0 || gap < best_gap)) {
                best = at;
                best_gap = gap;
            }
            if (j < m && placed[j]->offset + placed[j]->row_bytes > at)
                at = placed[j]->offset + placed[j]->row_bytes;
        }
        t->offset = best;
        t->has_offset = 1;
        if (t->offset + t->row_bytes > arena)
            arena = t->offset + t->row_bytes;
    }
    return arena;
}

/* The smallest of the plans placed biggest first, biggest and longest lived first, and
 * longest lived first (the first of them where they tie), the buffers left at its
 * offsets: its arena. A plan that reaches lb, the lower bound, ends the search (most
 * do, the first way). */
static int64_t place_best(Tensor **ts, int n, int64_t lb)
{
    static int (*const orders[])(const void *, const void *) = {by_size, by_area, by_life};
    Tensor **placed = xcalloc((size_t)n + 1, sizeof *placed);
    int64_t *kept = xcalloc((size_t)n + 1, sizeof *kept);   /* the best's offsets, by buffer */
    Tensor **who = xcalloc((size_t)n + 1, sizeof *who);
    int64_t best = INT64_MAX;
    for (int k = 0; k < 3 && best > lb; k++) {
        qsort(ts, (size_t)n, sizeof *ts, orders[k]);
        int64_t a = place(ts, n, placed);
        if (a < best) {
            best = a;
            for (int i = 0; i < n; i++) {
                who[i] = ts[i];
                kept[i] = ts[i]->offset;
            }
        }
    }
    for (int i = 0; i < n; i++)
        who[i]->offset = kept[i];
    free(placed);
    free(kept);
    free(who);
    return best;
}

static void liveness(Program *p)
{
    Graph *g = p->g;
    for (int i = 0; i < g->n_tensors; i++) {
        g->tensors[i]->first = -1;
        g->tensors[i]->last = -1;
    }
    for (int i = 0; i < p->n_ins; i++) {
        Instr *in = p->ins[i];
        if (in->dead)
            continue;
        for (int k = 0; k < in->n_reads; k++)
            touch(in->reads[k], i);
        for (int k = 0; k < in->n_writes; k++)
            touch(in->writes[k], i);
    }
    /* a GAN's samples and a model's prediction (its validation program's output:
     * --sample and --predict read them after the pass) live to the end, nothing written
     * over them; a chunked head has no logits whole */
    if (p->eval && !g->head && p->n_ins > 0)
        touch(g->pred, p->n_ins - 1);
    if (p->eval && g->logps && p->n_ins > 0)   /* (dpo's, for --reference) */
        touch(g->logps, p->n_ins - 1);
}

/* Can fused loop `in` store w over storage r? Only if it reads r at its own index alone,
 * and in no op after the one whose value w holds: the emitters store each op's value as
 * soon as it is computed, so a later op would read the element already overwritten (a
 * conv_transpose2d's dx turned to [B, C, HW] and stored, then a leaky_relu backward
 * reading its input x: x's storage cannot take that dx). A runtime call: yes (its
 * Instr.inplace read is one it takes in place). */
static int can_write_over(const Instr *in, const Tensor *r, const Tensor *w)
{
    if (in->kind != I_EW)
        return 1;
    int kw = -1;
    for (int k = 0; k < in->n_ops && kw < 0; k++)
        if (in->ops[k].out == w)
            kw = k;
    if (kw < 0)
        return 0;
    for (int k = 0; k < in->n_ops; k++)
        for (int j = 0; j < in->ops[k].n_arg; j++) {
            const Operand *o = &in->ops[k].arg[j];
            if (o->t && tensor_base(o->t) == r && (ix_moved(o->ix) || k > kw))
                return 0;
        }
    return 1;
}

/* In place: a fused elementwise loop whose output is born there and whose input of
 * the same size dies there writes over that input (element i is read before it is
 * written: no op after the output's own reads the input); so does a runtime call over
 * the one read it names (Instr.inplace: a layernorm or rmsnorm backward's addend). The
 * output becomes a view of the input's storage. */
static void in_place(Program *p)
{
    Graph *g = p->g;
    for (int i = 0; i < p->n_ins; i++) {
        Instr *in = p->ins[i];
        if (in->dead || (in->kind != I_EW && !in->inplace))
            continue;
        for (int k = 0; k < in->n_writes; k++) {
            Tensor *w = in->writes[k];
            if (w->kind != T_ACT || w->alias || w->first != i)
                continue;
            for (int q = 0; q < in->n_reads; q++) {
                Tensor *r = tensor_base(in->reads[q]);
                if (in->kind != I_EW && r != tensor_base(in->inplace))
                    continue;
                if (r == w || r->kind != T_ACT || r->last != i || tensor_stored(r) != tensor_stored(w) ||
                    tensor_half(g, r) != tensor_half(g, w) || !can_write_over(in, r, w))
                    continue;
                w->alias = r;
                for (int t = 0; t < g->n_tensors; t++)
                    if (g->tensors[t]->alias == w)
                        g->tensors[t]->alias = r;
                r->last = w->last;     /* r's storage now lives on as w */
                break;
            }
        }
    }
}

void memplan(Program *p)
{
    Graph *g = p->g;
    liveness(p);
    in_place(p);
    liveness(p);
    Tensor **ts = xcalloc((size_t)g->n_tensors, sizeof *ts);
    int n = 0;
    int64_t noreuse = 0;
    for (int i = 0; i < g->n_tensors; i++) {
        Tensor *t = g->tensors[i];
        if (!in_arena(t) || t->first < 0)
            continue;
        t->row_bytes = (tensor_stored(t) * (tensor_half(g, t) ? 2 : 4) + ALIGN - 1) / ALIGN * ALIGN;
        noreuse += t->row_bytes;
        ts[n++] = t;
    }
    /* the lower bound: the most bytes live at any one instruction */
    int64_t lb = 0;
    for (int i = 0; i < p->n_ins; i++) {
        int64_t live = 0;
        for (int j = 0; j < n; j++)
            if (ts[j]->first <= i && i <= ts[j]->last)
                live += ts[j]->row_bytes;
        if (live > lb)
            lb = live;
    }
    int64_t arena = place_best(ts, n, lb);
    p->arena_row_bytes = arena;
    p->noreuse_row_bytes = noreuse;
    p->lower_bound_row_bytes = lb;
    free(ts);
}
