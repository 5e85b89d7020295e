/* fusion.c: elementwise chains -> one loop each.
 *
 * Two elementwise instructions next to each other in the program, over the same
 * index space, where the second reads what the first computes at the same index,
 * become one loop: the value passes in a register. This is also how a bias and an
 * activation land in a GEMM's epilogue: lower.c emits the bias as an in-place
 * elementwise op right after the GEMM, and the activation that follows fuses into
 * it. A fused value is written to memory only when an instruction outside its
 * loop reads it later (materialization), so most of them never take arena space. */
#include <stdlib.h>
#include <string.h>
#include "ir.h"

/* The op of A (latest first) whose output is t, or -1. */
static int producer(const Instr *a, const Tensor *t)
{
    for (int k = a->n_ops - 1; k >= 0; k--)
        if (a->ops[k].out == t)
            return k;
    return -1;
}

static int can_fuse(const Instr *a, const Instr *b)
{
    if (a->kind != I_EW || b->kind != I_EW || a->backward != b->backward || strcmp(a->n, b->n))
        return 0;
    int linked = 0;
    for (int k = 0; k < b->n_ops; k++)
        for (int j = 0; j < b->ops[k].n_arg; j++) {
            const Operand *o = &b->ops[k].arg[j];
            if (!o->t || producer(a, o->t) < 0)
                continue;
            if (o->index)
                return 0;   /* reads a neighbour's element: needs the whole loop done */
            linked = 1;
        }
    /* b must not overwrite what a reads at another index */
    for (int k = 0; k < a->n_ops; k++)
        for (int j = 0; j < a->ops[k].n_arg; j++) {
            const Operand *o = &a->ops[k].arg[j];
            if (o->t && o->index && producer(b, o->t) >= 0)
                return 0;
        }
    return linked;
}

static void merge(Instr *a, Instr *b)
{
    int base = a->n_ops;
    a->ops = realloc(a->ops, (size_t)(a->n_ops + b->n_ops) * sizeof *a->ops);
    if (!a->ops)
        die("out of memory");
    for (int k = 0; k < b->n_ops; k++) {
        EwOp op = b->ops[k];
        for (int j = 0; j < op.n_arg; j++) {
            Operand *o = &op.arg[j];
            if (!o->t)
                o->val += base;          /* already a value of b's loop */
            else {
                int pk = producer(a, o->t);
                if (pk >= 0) {
                    o->t = NULL;
                    o->val = pk;
                }
            }
        }
        a->ops[a->n_ops++] = op;
    }
    char *w = xasprintf("%s + %s", a->what, b->what);
    a->what = w;
    if (strcmp(a->origin, b->origin))
        a->origin = xasprintf("%s + %s", a->origin, b->origin);
    b->dead = 1;
}

/* The storage a tensor lives in. */

void fuse(Program *p)
{
    for (int i = 0; i < p->n_ins; i++) {
        Instr *a = p->ins[i];
        if (a->dead || a->kind != I_EW)
            continue;
        for (int j = i + 1; j < p->n_ins; j++) {
            if (j == p->n_forward)
                break;
            Instr *b = p->ins[j];
            if (b->dead)
                continue;
            if (!can_fuse(a, b))
                break;
            merge(a, b);
        }
    }
    /* reads of a fused loop: its tensor operands only */
    for (int i = 0; i < p->n_ins; i++) {
        Instr *a = p->ins[i];
        if (a->dead || a->kind != I_EW)
            continue;
        a->n_reads = 0;
        a->n_writes = 0;
        for (int k = 0; k < a->n_ops; k++) {
            for (int j = 0; j < a->ops[k].n_arg; j++)
                if (a->ops[k].arg[j].t) {
                    a->reads = realloc(a->reads, (size_t)(a->n_reads + 1) * sizeof *a->reads);
                    a->reads[a->n_reads++] = a->ops[k].arg[j].t;
                }
        }
    }
    /* materialize: a value is stored when a later instruction reads its storage */
    for (int i = 0; i < p->n_ins; i++) {
        Instr *a = p->ins[i];
        if (a->dead)
            continue;
        if (a->kind != I_EW) {
            for (int k = 0; k < a->n_writes; k++)
                a->writes[k]->materialized = tensor_base(a->writes[k])->materialized = 1;
            continue;
        }
        a->id = p->n_kernels++;
        for (int k = 0; k < a->n_ops; k++) {
            Tensor *t = a->ops[k].out;
            if (producer(a, t) != k)
                continue;            /* a later op of this loop overwrites it */
            int needed = t->kind == T_PGRAD;
            for (int j = i + 1; j < p->n_ins && !needed; j++) {
                Instr *b = p->ins[j];
                if (b->dead)
                    continue;
                for (int r = 0; r < b->n_reads; r++)
                    if (tensor_base(b->reads[r]) == tensor_base(t))
                        needed = 1;
            }
            if (needed) {
                t->materialized = tensor_base(t)->materialized = 1;
                a->writes = realloc(a->writes, (size_t)(a->n_writes + 1) * sizeof *a->writes);
                a->writes[a->n_writes++] = t;
            }
        }
    }
}
