/* emit_c.c: Program -> C sources, the C emitter (the driver calls it after
 * emit_prepare, beside emit_cuda.c).
 *
 *   model.h        the plan: where every buffer lives, the kernels' prototypes
 *   host.c         forward(), backward(), the parameter and input tables, the
 *                  training-spec defaults and main(): backend-neutral host code
 *   kernels_cpu.c  the fused elementwise loops, run over the runtime's thread pool
 *   plan.json      the memory plan as data
 *
 * Everything is printed into memory (Emitted); emit.c writes the files only when all
 * succeeded. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "ir.h"


/* g16: the graph where the pointer may hold 16-bit values on a GPU (host.c), NULL where
 * it never does (kernels_cpu.c) */
static void declare(Buf *b, Tensor *t, int writable, const Graph *g16)
{
    /* the shape beside each pointer (and the rows' stride where it is not the shape's) */
    char *shape = tensor_shape_text(t);
    if (t->ld && t->ld != t->shape[t->rank - 1]) {
        char *s2 = xasprintf("%s, rows %lld apart", shape, (long long)t->ld);
        free(shape);
        shape = s2;
    }
    if (g16 && tensor_half(g16, t)) {   /* float * is the CPU's view of the buffer */
        char *s2 = xasprintf("%s, %s on a GPU", shape, half_name(g16));
        free(shape);
        shape = s2;
    }
    switch (t->kind) {
    case T_INPUT:
        buf_printf(b, "    const %s *%s = (const %s *)e->in[%d]; /* %s */\n", c_type(t->dtype),
                   t->name, c_type(t->dtype), t->input_index, shape);
        break;
    case T_PARAM:
    case T_PGRAD: {
        /* a padded vocabulary's zero rows follow the head's weight (ops/loss.c) */
        char *pad = t->param->pad_rows ? xasprintf(", then %lld zero rows",
                                                   (long long)t->param->pad_rows)
                                       : xstrdup("");
        if (t->kind == T_PARAM)
            buf_printf(b, "    const float *%s = e->params + %lld; /* %s%s */\n", t->name,
                       (long long)t->param->offset, shape, pad);
        else if (t->param->frozen && t->param->sink_offset < 0)
            die("%s: the frozen %s's gradient has no place", t->name, t->param->name);
        else if (t->param->frozen)   /* written beside what is wanted, never read */
            buf_printf(b, "    float *%s = e->sink + %lld; /* %s%s; frozen: never read */\n",
                       t->name, (long long)t->param->sink_offset, shape, pad);
        else
            buf_printf(b, "    float *%s = e->grads + %lld; /* %s%s */\n", t->name,
                       (long long)t->param->offset, shape, pad);
        free(pad);
        break;
    }
    case T_STATE:   /* an int64 count is passed as its float slots; the runtime knows.
                       Never const: validation reads what training updates, one call */
        buf_printf(b, "    float *%s = e->state + %lld; /* %s%s */\n", t->name,
                   (long long)t->param->offset, shape, t->param->i64 ? ", int64" : "");
        break;
    case T_ACT:
    case T_TEMP:
        if (!tensor_base(t)->has_offset)
            die("tensor %s has no place in the arena", t->name);
        buf_printf(b, "    %sfloat *%s = ACT(%lld); /* %s */\n", writable ? "" : "const ", t->name,
                   (long long)tensor_base(t)->offset, shape);
        break;
    default:
        unreachable();
    }
    free(shape);
}

/* The run every operand read at an index of its own shares (ix_run), or 0: then the
 * loop can go over [lo, hi) a run at a time, those operands at pointers. */
static int64_t kernel_run(const Instr *in)
{
    int64_t run = 0;
    for (int k = 0; k < in->n_ops; k++)
        for (int j = 0; j < in->ops[k].n_arg; j++) {
            const Operand *o = &in->ops[k].arg[j];
            if (!o->t || !ix_moved(o->ix))
                continue;
            int run_const;
            int64_t r = ix_run(o->ix, &run_const);
            if (r <= 0 || (run && r != run))
                return 0;
            run = r;
        }
    return run;
}

/* Op k's operand j as the loop reads it (expr_print's callback). With runs, an operand
 * read at an index of its own is at pointer rk_j, element j (or 0 where the index stays
 * the same over the run). */
typedef struct OpAt {
    const EwOp *op;
    int k, runs;
} OpAt;

static void put_operand(Buf *b, int j, void *ctx)
{
    const OpAt *at = ctx;
    const Operand *o = &at->op->arg[j];
    int run_const;
    ix_run(o->ix, &run_const);
    if (!o->t)
        buf_printf(b, "v%d", o->val);
    else if (at->runs && ix_moved(o->ix))
        buf_printf(b, "r%d_%d[%s]", at->k, j, run_const ? "0" : "j");
    else {
        buf_printf(b, "%s[", o->t->name);
        index_print(b, o->ix, 0);
        buf_puts(b, "]");
    }
}

/* The loop's body: the ops, each value stored where a later kernel reads it. */
static void emit_ops(Buf *b, const Instr *in, int runs, const char *ind)
{
    for (int k = 0; k < in->n_ops; k++) {
        const EwOp *op = &in->ops[k];
        Buf line = {0};   /* the statement, then printed with its comment */
        buf_printf(&line, "float v%d = ", k);
        OpAt at = {op, k, runs};
        expr_print(&line, op->expr, 0, put_operand, &at);
        buf_puts(&line, ";");
        buf_commented(b, ind, line.s, op->what);
        free(line.s);
        for (int w = 0; w < in->n_writes; w++)
            if (in->writes[w] == op->out)
                buf_printf(b, "%s%s[i] = v%d;\n", ind, op->out->name, k);
    }
}

void emit_kernel(Buf *b, Instr *in, const char *name)
{
    Uses u = {0};
    kernel_uses(&u, in);
    kernel_head(b, name, in);
    if (in->same_gpu && strcmp(name, "K"))
        buf_printf(b, "\n *     (on a GPU this loop runs %s%d's kernel, the same code, on its own tensors)",
                   twin_prefix(in->same_gpu_pass), in->same_gpu->id);
    buf_puts(b, " */\n");
    buf_printf(b, "RT_KERNEL void %s(rt_exec *e, int64_t lo, int64_t hi)\n{\n", name);
    for (int i = 0; i < u.n; i++)
        declare(b, u.t[i], u.w[i], NULL);
    int64_t run = kernel_run(in);
    const EwOp *o0 = &in->ops[0];
    if (in->n_ops == 1 && o0->tag == EW_ACT && o0->act == ACT_GELU_TANH && o0->arg[0].t &&
        !ix_moved(o0->arg[0].ix) && o0->arg[0].t->kind != T_INPUT && in->n_writes == 1 &&
        in->writes[0] == o0->out) {
        /* only a GELU of a stored tensor: the runtime's vectorized rows, same bits */
        buf_printf(b, "    rt_gelu_tanh_rows(%s + lo, %s + lo, hi - lo); /* %s */\n}\n\n",
                   o0->out->name, o0->arg[0].t->name, o0->what ? o0->what : "gelu (tanh)");
    } else if (!run) {
        buf_puts(b, "    for (int64_t i = lo; i < hi; i++) {\n");
        emit_ops(b, in, 0, "        ");
        buf_puts(b, "    }\n}\n\n");
    } else {
        /* a run of i at a time, so the permuted reads are contiguous and vectorize */
        buf_printf(b, "    for (int64_t i0 = lo; i0 < hi;) {\n"
                      "        /* i in [i0, i0 + n): the rest of a run of %lld */\n"
                      "        int64_t i = i0, n = %lld - i0 %% %lld;\n"
                      "        if (n > hi - i0)\n"
                      "            n = hi - i0;\n",
                   (long long)run, (long long)run, (long long)run);
        for (int k = 0; k < in->n_ops; k++)
            for (int j = 0; j < in->ops[k].n_arg; j++) {
                const Operand *o = &in->ops[k].arg[j];
                if (o->t && ix_moved(o->ix)) {
                    buf_printf(b, "        const %s *r%d_%d = %s + (",
                               o->t->kind == T_INPUT ? c_type(o->t->dtype) : "float", k, j,
                               o->t->name);
                    index_print(b, o->ix, 0);
                    buf_puts(b, ");\n");
                }
            }
        buf_puts(b, "        for (int64_t j = 0; j < n; j++, i++) {\n");
        emit_ops(b, in, 1, "            ");
        buf_puts(b, "        }\n        i0 += n;\n    }\n}\n\n");
    }
    free(u.t);
    free(u.w);
}

/* The names a launch of `in` gives: its CUDA kernel's and its C function's. */
static void kernel_names(const Program *p, const Instr *in, char cpu[32], char gpu[32])
{
    if (in->same_cpu)
        snprintf(cpu, 32, "k%d", in->same_cpu->id);
    else
        snprintf(cpu, 32, "%s%d", p->kprefix, in->id);
    if (in->same_gpu)
        snprintf(gpu, 32, "%s%d", twin_prefix(in->same_gpu_pass), in->same_gpu->id);
    else
        snprintf(gpu, 32, "%s%d", p->kprefix, in->id);
}

/* What a pass's instructions read and write (its local declarations). */
static Uses pass_uses(const Program *p, int from, int to)
{
    Uses u = {0};
    for (int i = from; i < to; i++) {
        Instr *in = p->ins[i];
        if (in->dead)
            continue;
        if (in->kind == I_EW) {
            kernel_uses(&u, in);
            continue;
        }
        for (int k = 0; k < in->n_reads; k++)
            uses_add(&u, in->reads[k], 0);
        for (int k = 0; k < in->n_writes; k++)
            uses_add(&u, in->writes[k], 1);
    }
    return u;
}

/* The line above an instruction: training's name themselves for --profile (RT_AT: the
 * index of plan.json's list and what the comment would say); evaluation's are comments,
 * a shared kernel's naming the training kernel whose code it runs. */
static void instr_label(Buf *b, const Program *p, const Instr *in, int i)
{
    char *c;
    if (p->eval && (in->same_cpu || in->same_gpu))
        c = in->same_cpu || in->same_gpu_pass == TWIN_TRAIN
                ? xasprintf("%s: %s (%straining's k%d, the same code)", in->origin, in->what,
                            in->same_cpu ? "" : "on the GPU, ",
                            (in->same_cpu ? in->same_cpu : in->same_gpu)->id)
                : xasprintf("%s: %s (on the GPU, %s%d's code on these tensors)", in->origin,
                            in->what, twin_prefix(in->same_gpu_pass), in->same_gpu->id);
    else
        c = xasprintf("%s: %s", in->origin, in->what);
    if (p->eval) {
        buf_comment(b, "    ", c);
    } else {
        Buf at = {0};
        buf_printf(&at, "RT_AT(%d, ", i);
        c_string(&at, c);
        buf_puts(&at, ");");
        buf_wrapped(b, "    ", at.s);
        free(at.s);
    }
    free(c);
}

/* A fused elementwise loop's launch: rt_launch with its GPU and CPU kernels. */
static void ew_launch(Buf *b, Program *p, Instr *in)
{
    Uses k = {0};
    kernel_uses(&k, in);
    char gpu[32], cpu[32];
    kernel_names(p, in, cpu, gpu);
    if (!p->eval && in->same_gpu)
        buf_printf(b, "    /* on a GPU: %s's code, on these tensors */\n", gpu);
    Buf call = {0};
    /* rows of one per sample (an MLP's) read as the batch size itself */
    char *n = in->n == 1 ? xstrdup("e->B") : xasprintf("e->B * %lld", (long long)in->n);
    buf_printf(&call, "rt_launch(e, \"%s\", %s, %s, %d, (void *[]){", gpu, cpu, n,
               k.n + !!in->fp8_fold);
    free(n);
    for (int j = 0; j < k.n; j++)
        buf_printf(&call, "%s&%s", j ? ", " : "", k.t[j]->name);
    if (in->fp8_fold)   /* fp8-mixed: the slot it folds a maximum into (GPU only) */
        buf_printf(&call, "%s&(unsigned *){rt_fp8_amax_slot(e, %d)}", k.n ? ", " : "",
                   in->fp8_fold - 1);
    buf_puts(&call, "});");
    buf_wrapped(b, "    ", call.s);
    free(call.s);
    free(k.t);
    free(k.w);
}

/* A runtime call, after fp8-mixed's lines for its maxima where it has them. */
static void runtime_call(Buf *b, Program *p, Instr *in, int i, int to)
{
    if (cuda_fp8_pair_first(p, i, to)) {
        char *pair = xasprintf("rt_fp8_dy_pair(e, %s);", in->args[6].t->name);
        buf_wrapped(b, "    ", pair);
        free(pair);
    }
    if (in->fp8_a || in->fp8_b || in->fp8_out) {   /* fp8-mixed: the maxima's slots */
        char *use = xasprintf("rt_fp8_amax_use(e, %d, %d, %d);", in->fp8_a - 1, in->fp8_b - 1,
                              in->fp8_out - 1);
        buf_wrapped(b, "    ", use);
        free(use);
    }
    char *call = call_text(in);
    buf_wrapped(b, "    ", call);
    free(call);
}

static void emit_pass(Buf *b, Program *p, int from, int to, const char *sig, const char *doc,
                      const char *prologue)
{
    Uses u = pass_uses(p, from, to);
    buf_printf(b, "/* %s */\n%s\n{\n%s", doc, sig, prologue);
    for (int i = 0; i < u.n; i++)
        declare(b, u.t[i], u.w[i], p->g);
    if (u.n)
        buf_puts(b, "\n");
    int s0, ns;   /* fp8-mixed: the slots this pass's kernels fold maxima into start at 0 */
    cuda_fp8_slot_range(p, from, to, &s0, &ns);
    if (ns)
        buf_printf(b, "    rt_fp8_amax_reset(e, %d, %d); /* fp8-mixed's amax slots */\n", s0, ns);
    for (int i = from; i < to; i++) {
        Instr *in = p->ins[i];
        if (in->dead)
            continue;
        instr_label(b, p, in, i);
        if (in->kind == I_EW)
            ew_launch(b, p, in);
        else
            runtime_call(b, p, in, i, to);
    }
    buf_puts(b, "}\n\n");
    free(u.t);
    free(u.w);
}

static void emit_header(Buf *b, Program *p, const char *file)
{
    const Spec *s = p->g->spec;
    buf_printf(b, "/* %s: generated by trainc %s from the spec \"%s\"; do not edit.\n", file,
               TRAINC_VERSION, s->name);
}

/* One row of the plan table: the columns (offset .. shape, printed by fmt) then `what`;
 * a row that would pass 100 columns gives `what` a line of its own, under the name. */
static void plan_row(Buf *b, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void plan_row(Buf *b, const char *what, const char *fmt, ...)
{
    char left[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(left, sizeof left, fmt, ap);
    va_end(ap);
    if (strlen(left) + 2 + strlen(what) <= 100)
        buf_printf(b, "%s  %s\n", left, what);
    else
        buf_printf(b, "%s\n *%35s%s\n", left, "", what);
}

static void emit_plan_comment(Buf *b, Program *p, const char *title)
{
    Graph *g = p->g;
    buf_printf(b, " *\n * %s\n * One arena of Bmax * %lld bytes (without reuse: Bmax * %lld; the most live at\n"
                  " * once: Bmax * %lld). A buffer's byte offset is Bmax * its offset below, so any\n"
                  " * batch size fits the same plan. live: the first and last instruction using it\n"
                  " * %s.%s\n *\n",
               title, (long long)p->arena_row_bytes, (long long)p->noreuse_row_bytes,
               (long long)p->lower_bound_row_bytes,
               p->eval ? "(evaluate()'s calls counted from 0, those fusion merged too)"
                       : "(the numbers of host.c's RT_AT and plan.json)",
               !g->act16 ? "" : g->act16 == RT_PREC_BF16
               ? "\n * bf16-mixed: the GPU's plan, activations in bf16 (2 bytes), the saved\n"
                 " * statistics marked (fp32) in fp32; the CPU runs it at twice the offsets."
               : "\n * fp16-mixed: the GPU's plan, activations in fp16 (2 bytes), the saved\n"
                 " * statistics marked (fp32) in fp32; the CPU runs it at twice the offsets.");
    buf_puts(b, " *   offset      bytes/row  live     buffer                      shape\n");
    for (int i = 0; i < g->n_tensors; i++) {
        Tensor *t = g->tensors[i];
        if (!t->has_offset)
            continue;
        char what[512];
        snprintf(what, sizeof what, "%s%s", t->what ? t->what : "",
                 g->act16 && !tensor_half(g, t) ? " (fp32)" : "");
        plan_row(b, what, " *   %-10lld  %-9lld  %3d-%-3d  %-26s  %s", (long long)t->offset,
                 (long long)t->row_bytes, t->first, t->last, t->name, tensor_shape_text(t));
    }
    for (int i = 0; i < g->n_tensors; i++) {
        Tensor *t = g->tensors[i];
        if ((t->kind == T_ACT || t->kind == T_TEMP) && !t->has_offset && !t->alias && t->first >= 0)
            buf_printf(b, " *   (register)  %-9s  %7s  %-26s  %s  fused, never stored\n", "-", "",
                       t->name, shape_of(t, 1));
    }
    for (int i = 0; i < g->n_tensors; i++) {
        Tensor *t = g->tensors[i];
        if (t->kind == T_ACT && t->alias && t->materialized && t->alias->has_offset &&
            t->numel == t->alias->numel && t->rank == t->alias->rank &&
            !memcmp(t->shape, t->alias->shape, sizeof(int64_t) * (size_t)t->rank)) {
            char what[512];
            snprintf(what, sizeof what, "written over %s", t->alias->name);
            plan_row(b, what, " *   (in place)  %-9s  %7s  %-26s  %s", "-", "", t->name, shape_of(t, 1));
        }
    }
    /* views (flatten): another shape over a buffer's memory, nothing copied */
    for (int i = 0; i < g->n_tensors; i++) {
        Tensor *t = g->tensors[i];
        if ((t->kind == T_ACT || t->kind == T_TEMP) && t->alias && t->alias->has_offset &&
            (t->rank != t->alias->rank ||
             memcmp(t->shape, t->alias->shape, sizeof(int64_t) * (size_t)t->rank))) {
            char what[512];
            snprintf(what, sizeof what, "%s's memory", t->alias->name);
            plan_row(b, what, " *   (view)      %-9s  %7s  %-26s  %s", "-", "", t->name, shape_of(t, 1));
        }
    }
}

/* Is in a fused loop that p prints as a kernel of its own (kernels_cpu.c: not one that
 * launches a training kernel, same_cpu)? */
static int own_kernel(const Instr *in)
{
    return !in->dead && in->kind == I_EW && !in->same_cpu;
}

/* model.h's declarations of p's own kernels (named by its kprefix). */
static void declare_kernels(Buf *b, const Program *p)
{
    for (int i = 0; p && i < p->n_ins; i++)
        if (own_kernel(p->ins[i]))
            buf_printf(b, "void %s%d(rt_exec *e, int64_t lo, int64_t hi);\n", p->kprefix,
                       p->ins[i]->id);
}

static void emit_model_h(Program *p, Program *ev, Program *dec, Buf *b)
{
    emit_header(b, p, "model.h");
    emit_plan_comment(b, p, "The memory plan for training (forward and backward): activations, their\n"
                            " * gradients and scratch buffers.");
    emit_plan_comment(b, ev, "The plan for validation (forward only, no gradients), in the same memory.");
    buf_puts(b, " */\n#ifndef TRAINC_MODEL_H\n#define TRAINC_MODEL_H\n\n#include \"trainc_rt.h\"\n\n");
    if (p->g->act16)
        buf_printf(b, "/* the arena at a per-row offset: %s-mixed, so the plan is the GPU's (%s\n"
                    " * activations); the CPU computes in fp32 at twice the offsets (arena_scale 2) */\n"
                    "#define ACT(off) ((float *)(e->arena + e->Bmax * (int64_t)(off) * e->arena_scale))\n\n", half_name(p->g), half_name(p->g));
    else
        buf_puts(b, "/* the arena at a per-row offset */\n"
                    "#define ACT(off) ((float *)(e->arena + e->Bmax * (int64_t)(off)))\n\n");
    declare_kernels(b, p);
    declare_kernels(b, ev);
    declare_kernels(b, dec);
    buf_puts(b, "\n#endif\n");
}

/* The layers' state (batchnorm's running statistics): the params table's columns,
 * offsets into e->state, the int64 counts' dtype RT_I64. Only models that have any. */
static void emit_state_table(Buf *b, const Graph *g)
{
    buf_puts(b, "};\n\n/* state: name, rank, shape, numel, offset (floats into e->state), init,\n"
                " * init_a (the constant), dtype (RT_F32, or RT_I64 in two floats) */\n"
                "static const rt_param state[] = {\n");
    for (int i = 0; i < g->n_state; i++) {
        const Param *pa = g->state[i];
        buf_puts(b, "    {");
        c_string(b, pa->name);
        buf_printf(b, ", %d, {", pa->rank);
        for (int k = 0; k < pa->rank; k++)
            buf_printf(b, "%s%lld", k ? ", " : "", (long long)pa->shape[k]);
        if (!pa->rank)
            buf_puts(b, "0");   /* a scalar (the count): no empty initializer in C11 */
        char *lit = float_literal(pa->init_a);
        buf_printf(b, "}, %lld, %lld, RT_INIT_CONST, %s, %s},\n", (long long)pa->numel,
                   (long long)pa->offset, lit, pa->i64 ? "RT_I64" : "RT_F32");
        free(lit);
    }
}

/* Instructions [*from, *to) of a GAN's phase ph (contiguous: lower.c). */
static void phase_range(const Program *p, int ph, int *from, int *to)
{
    int i = 0;
    while (i < p->n_ins && p->ins[i]->phase < ph)
        i++;
    *from = i;
    while (i < p->n_ins && p->ins[i]->phase == ph)
        i++;
    *to = i;
}

/* A GAN's step as four functions (compiler/gan.c): the runtime updates D between the
 * second and the third on the step's last micro-batch, G after the fourth. */
static void emit_gan_passes(Buf *b, Program *p)
{
    static const struct {
        const char *sig, *doc, *prologue;
    } f[PH__COUNT] = {
        {"static void forward(rt_exec *e, int train)",
         "The discriminator's forward passes: G(z) (kept for the generator's turn), D(x) and\n"
         " * its loss term against real, D(G(z)) and its term against fake, each term's\n"
         " * d(loss)/d(logits). RT_AT(i, ...) names instruction i of plan.json's list.",
         "    e->train = train; /* read by dropout and the loss */\n"},
        {"static void backward(rt_exec *e)",
         "The discriminator's gradients from both terms (G(z) detached: none reaches G).", ""},
        {"static void forward_g(rt_exec *e)",
         "The generator's turn, after the discriminator's update: D(G(z)) again and the\n"
         " * generator's loss term.", ""},
        {"static void backward_g(rt_exec *e)",
         "The generator's gradients, back through the discriminator (whose own gradients\n"
         " * are not computed) and the generator's forward pass kept since forward().", ""},
    };
    for (int ph = 0; ph < PH__COUNT; ph++) {
        int from, to;
        phase_range(p, ph, &from, &to);
        emit_pass(b, p, from, to, f[ph].sig, f[ph].doc, f[ph].prologue);
    }
}

/* A chunked head's model fields (ops/loss.c): --sample computes the logits of the row
 * it draws from, x's row times W^T, into row 0 of validation's chunk scratch, which
 * pred_offset names. */
static void emit_head_model(Buf *b, const Graph *ev, const Tensor *pred)
{
    const Node *h = ev->head;
    const Tensor *x = tensor_base(h->in[0]);
    int64_t C = pred->shape[pred->rank - 1], ld = tensor_ld(pred), wrows = gemm_rows(h->w, C, pred);
    buf_printf(b, "    .pred_offset = %lld,\n    .pred_numel = %lld,\n    .pred_ld = %lld,\n",
               (long long)ev->head_z->offset, (long long)pred->numel, (long long)ld);
    buf_printf(b, "    .head_x_offset = %lld,\n    .head_w_offset = %lld,\n    .head_d = %lld,\n"
                  "    .head_wrows = %lld,\n",
               (long long)x->offset, (long long)h->w->offset, (long long)x->shape[x->rank - 1],
               (long long)wrows);
}

/* rt_model's GAN fields (trainc_rt.h). */
static void emit_gan_model(Buf *b, const Graph *g)
{
    const Spec *s = g->spec;
    int64_t z = 1;
    for (int k = 0; k < s->latent_rank; k++)
        z *= s->latent_shape[k];
    buf_printf(b, "    .gan = 1,\n    .gan_gen_floats = %lld,\n    .gan_latent_input = %d,\n"
                  "    .gan_latent_numel = %lld,\n    .gan_forward_g = forward_g,\n"
                  "    .gan_backward_g = backward_g,\n",
               (long long)g->gen_floats, s->latent_input, (long long)z);
}

/* host.c's heading comment: what the file holds and how to read it. */
static void emit_host_heading(Program *p, const Program *dec, Buf *b)
{
    Graph *g = p->g;
    int64_t nparams = 0;
    for (int i = 0; i < g->n_params; i++)
        nparams += g->params[i]->numel;
    emit_header(b, p, "host.c");
    buf_printf(b, " *\n * %d layers, %lld parameters, %lld FLOPs per sample (forward + backward).\n"
                  " * The runtime (trainc_rt.h) owns data, the loop, the optimizer and files; this\n"
                  " * file only says what to compute, in order:\n"
                  " *\n"
                  " *   forward()   the layers in the spec's order, then the loss\n"
                  " *   backward()  their gradients, in reverse; the optimizer step that follows is\n"
                  " *               the runtime's, over the params table below\n"
                  " *   evaluate()  validation's forward pass\n%s"
                  " *\n"
                  " * Each call is preceded by RT_AT(i, \"PATH: WHAT\") (a comment in evaluate): i is\n"
                  " * its index in plan.json's instructions, PATH the JSON path in the spec of the\n"
                  " * layer or layers it computes, with \" #k\" for iteration k of a repeat (\" #k.j\"\n"
                  " * nested). Names: P_x and G_x are parameter x and its gradient (floats into\n"
                  " * e->params and e->grads), d_y is the gradient of y, and a name ending in _re\n"
                  " * (_re2, ...) a value recomputed in the backward pass; ACT(off) is the arena at\n"
                  " * the offset model.h's table gives. rt_gemm(e, trans_a, trans_b, M, N, K, alpha,\n"
                  " * A, lda, B, ldb, beta, C, ldc) is C = alpha op(A) op(B) + beta C, row-major; its\n"
                  " * variants add epilogues (trainc_rt.h).%s%s */\n",
               g->n_layers_total, (long long)nparams, (long long)(g->flops_fwd + g->flops_bwd),
               dec ? " *   decode()    --sample's forward pass: positions of one sequence\n"
                     " *               as rows, with a key/value cache (no loss: the logits)\n"
                   : "",
               !g->act16 ? ""
               : g->act16 == RT_PREC_BF16
               ? "\n *\n * bf16-mixed: on a GPU the buffers marked bf16 beside their pointers hold bf16\n"
                 " * values; float * is the CPU's type, which runs the same plan in fp32 at twice\n"
                 " * the offsets (model.h's ACT)."
               : "\n *\n * fp16-mixed: on a GPU the buffers marked fp16 beside their pointers hold fp16\n"
                 " * values; float * is the CPU's type, which runs the same plan in fp32 at twice\n"
                 " * the offsets (model.h's ACT).",
               !g->fp8 ? ""
               : "\n *\n * fp8-mixed: bf16-mixed's plan; the rt_gemm*_fp8 calls are the linear layers'\n"
                 " * GEMMs (the classifier's aside), their operands cast to FP8 on a GPU that has\n"
                 " * FP8 tensor cores; elsewhere the same calls without _fp8.");
}

/* forward(), backward(), evaluate() (a GAN's passes: gan.c's order) and decode(). */
static void emit_host_passes(Program *p, Program *ev, Program *dec, Buf *b)
{
    Graph *g = p->g;
    if (g->gan)
        emit_gan_passes(b, p);
    else {
        emit_pass(b, p, 0, p->n_forward, "static void forward(rt_exec *e, int train)",
                  "The forward pass: the loss, and in training d(loss)/d(prediction). RT_AT(i, ...)\n"
                  " * names instruction i of plan.json's list (for --profile and errors); the numbers\n"
                  " * skip the instructions that fusion merged into others.",
                  "    e->train = train; /* read by dropout and the loss */\n");
        emit_pass(b, p, p->n_forward, p->n_ins, "static void backward(rt_exec *e)",
                  "The backward pass: activation gradients written, parameter gradients accumulated.", "");
    }
    emit_pass(b, ev, 0, ev->n_ins, "static void evaluate(rt_exec *e)",
              g->gan ? "The generator alone in evaluation mode, from z to samples: what --sample runs."
                     : "Validation: the forward pass alone, with its own smaller plan (no gradient buffers).",
              "    e->train = 0;\n");
    if (dec)
        emit_pass(b, dec, 0, dec->n_ins, "static void decode(rt_exec *e)",
                  "Generation's forward pass (--sample): row b is the token e->in[0][b]\n"
                  " * at its place e->place[b] (a sequence and a position); keys and values are\n"
                  " * appended to the sequence's cache in e->kv, attention reads the positions\n"
                  " * before; the logits are left in the arena. Its own plan, in the same memory.",
                  "    e->train = 0;\n");
}

/* The tables rt_model points at: parameters (and state), inputs, the training spec's
 * defaults. */
static void emit_host_tables(Program *p, Buf *b)
{
    Graph *g = p->g;
    const Spec *s = g->spec;
    buf_puts(b, "/* name, rank, shape, numel, offset (floats into the parameter region), init,\n"
                " * init_a (the uniform bound, the normal std or the constant) */\n"
                "static const rt_param params[] = {\n");
    for (int i = 0; i < g->n_params; i++) {
        Param *pa = g->params[i];
        buf_puts(b, "    {");
        c_string(b, pa->name);
        buf_printf(b, ", %d, {", pa->rank);
        for (int k = 0; k < pa->rank; k++)
            buf_printf(b, "%s%lld", k ? ", " : "", (long long)pa->shape[k]);
        static const char *init[] = {"RT_INIT_UNIFORM", "RT_INIT_NORMAL", "RT_INIT_CONST"};
        char lit[64];
        snprintf(lit, sizeof lit, "%.9g", (double)(float)pa->init_a);
        if (!strpbrk(lit, ".eEn"))
            strcat(lit, ".0");
        buf_printf(b, "}, %lld, %lld, %s, %sf%s%s", (long long)pa->numel,
                   (long long)pa->offset, init[pa->init], lit, pa->frozen ? ", .frozen = 1" : "",
                   pa->lora == 1 ? ", .lora = 1" : "");
        for (int k = 0; k < RT_MUON_BLOCKS && pa->muon[k]; k++)   /* (optimizer type muon's) */
            buf_printf(b, "%s%lld", k ? ", " : ", .muon = {", (long long)pa->muon[k]);
        buf_puts(b, pa->muon[0] ? "}},\n" : "},\n");
    }
    if (!g->n_params)
        buf_puts(b, "    {0},\n");
    if (g->n_trainable < g->n_params) {   /* frozen ones last: the draws in model order */
        buf_puts(b, "};\n\n/* the parameters in the model's order (the initial values' draws) */\n"
                    "static const int init_order[] = {");
        for (int j = 0; j < g->n_params; j++)
            for (int i = 0; i < g->n_params; i++)
                if (g->params[i]->model_index == j)
                    buf_printf(b, "%s%d", j ? ", " : "", i);
    }
    if (g->n_state)
        emit_state_table(b, g);
    buf_puts(b, "};\n\n/* name, dtype in the files, rank, shape, numel, classes (labels checked against\n"
                " * them), vocab (embedding ids checked against it), widen (u8/u16 read as i32) */\n"
                "static const rt_input inputs[] = {\n");
    for (int i = 0; i < s->n_inputs; i++) {
        const InputSpec *in = &s->inputs[i];
        static const char *dt[] = {"RT_U8", "RT_U16", "RT_I32", "RT_F32"};
        buf_puts(b, "    {");
        c_string(b, in->name);
        buf_printf(b, ", %s, %d, {", dt[in->dtype], in->rank);
        int64_t n = 1;
        for (int k = 0; k < in->rank; k++) {
            buf_printf(b, "%s%lld", k ? ", " : "", (long long)in->shape[k]);
            n *= in->shape[k];
        }
        /* a cross_entropy target's labels are checked against the logits' width, given
         * as classes or not */
        int64_t classes = g->input_classes[i] ? g->input_classes[i] : in->classes;
        buf_printf(b, "}, %lld, %lld, %lld, %d", (long long)n, (long long)classes,
                   (long long)g->input_vocab[i], g->inputs[i]->dtype != in->dtype);
        int ignores = s->has_ignore && (!strcmp(in->name, s->loss_target) ||
                                        (s->sft_target && !strcmp(in->name, s->sft_target)));
        if (ignores)   /* (ignore_index: the loss's targets) */
            buf_printf(b, ", 1, %d /* ignore_index */", (int)s->ignore_index);
        if (s->positions && !strcmp(in->name, s->positions))
            buf_puts(b, ", .positions = 1");
        buf_puts(b, "},\n");
    }
    buf_puts(b, "};\n\n/* the training spec, as --set would write it; options given at run time win */\n");
    buf_puts(b, "static const char *const train_defaults[] = {\n");
    for (int i = 0; i < s->n_train_lines; i++) {
        buf_puts(b, "    ");
        c_string(b, s->train_lines[i]);
        buf_puts(b, ",\n");
    }
    buf_puts(b, "};\n\n");
}

/* What --predict reads: validation's prediction (pred, kept to the end of its pass),
 * its storage, its shape per sample, and the loss's target input (not read). */
static void emit_predict_model(Buf *b, const Spec *s, Tensor *pred, int act16)
{
    Tensor *pt = tensor_base(pred);
    buf_printf(b, "    .eval_pred_offset = %lld,\n    .eval_pred_ld = %lld,\n",
               (long long)pt->offset, (long long)tensor_ld(pred));
    if (act16 && !pt->keep32)
        buf_puts(b, "    .eval_pred16 = 1,\n");
    buf_printf(b, "    .pred_rank = %d,\n    .pred_shape = {", pred->rank);
    for (int i = 0; i < pred->rank; i++)
        buf_printf(b, "%s%lld", i ? ", " : "", (long long)pred->shape[i]);
    int target = -1;
    for (int k = 0; k < s->n_inputs; k++)
        if (!strcmp(s->inputs[k].name, s->loss_target))
            target = k;
    buf_printf(b, "},\n    .target_input = %d,\n", target);
}

/* rt_model's decode fields: the program, its logits, its cache's floats. */
static void emit_decode_model(Buf *b, const Program *dec)
{
    Tensor *pred = dec->g->pred, *pt = tensor_base(pred);
    buf_printf(b, "    .decode = decode,\n    .decode_pred_offset = %lld,\n"
                  "    .decode_pred_ld = %lld,\n    .kv_floats = %lld,\n",
               (long long)pt->offset, (long long)tensor_ld(pred), (long long)dec->g->kv_floats);
}

/* trainc_model, the rt_model the runtime trains (trainc_rt.h). */
static void emit_host_model(Program *p, Program *ev, const Program *dec, Buf *b)
{
    Graph *g = p->g;
    const Spec *s = g->spec;
    /* a GAN's: the samples --sample reads, from validation's program (G alone); a
     * chunked head's input, also from validation's */
    int pred_eval = g->gan || g->head;
    Tensor *pred = pred_eval ? ev->g->pred : g->pred;
    int64_t terms = g->gan || s->loss == LOSS_DPO ? 1 : pred->numel;   /* (dpo: a pair) */
    if (s->loss == LOSS_CROSS_ENTROPY)
        terms /= pred->shape[pred->rank - 1];
    buf_puts(b, "const rt_model trainc_model = {\n    .abi = RT_ABI_VERSION,\n    .name = ");
    c_string(b, s->name);
    buf_printf(b, ",\n    .spec_hash = \"%s\",\n    .model_hash = \"%s\",\n    .data_dir = TRAINC_DATA_DIR,\n",
               s->hash, s->model_hash);
    buf_puts(b, "    .spec_file = ");
    c_string(b, path_canonical(s->train_file));
    buf_puts(b, ",\n");
    buf_printf(b, "    .n_params = %d,\n    .params = params,\n    .param_floats = %lld,\n",
               g->n_params, (long long)g->param_floats);
    buf_printf(b, "    .n_trainable = %d,\n    .trainable_floats = %lld,\n", g->n_trainable,
               (long long)g->trainable_floats);
    if (g->n_trainable < g->n_params)
        buf_puts(b, "    .init_order = init_order,\n");
    if (g->sink_floats)
        buf_printf(b, "    .sink_floats = %lld,\n", (long long)g->sink_floats);
    if (g->gpu_fp32_floats < g->param_floats)   /* (frozen weights in 16 bits alone) */
        buf_printf(b, "    .gpu_fp32_floats = %lld,\n", (long long)g->gpu_fp32_floats);
    if (g->n_state)
        buf_printf(b, "    .n_state = %d,\n    .state = state,\n    .state_floats = %lld,\n",
                   g->n_state, (long long)g->state_floats);
    buf_printf(b, "    .n_inputs = %d,\n    .inputs = inputs,\n", s->n_inputs);
    buf_printf(b, "    .arena_row_bytes = %lld,\n    .noreuse_row_bytes = %lld,\n",
               (long long)p->arena_row_bytes, (long long)p->noreuse_row_bytes);
    buf_printf(b, "    .eval_arena_row_bytes = %lld,\n", (long long)ev->arena_row_bytes);
    buf_printf(b, "    .flops_per_sample = %lld,\n", (long long)(g->flops_fwd + g->flops_bwd));
    buf_printf(b, "    .n_instructions = %d,\n", p->n_ins);
    buf_printf(b, "    .loss = %s,\n    .loss_terms = %lld,\n    .has_dropout = %d,\n",
               s->loss == LOSS_CROSS_ENTROPY ? "RT_LOSS_CROSS_ENTROPY"
               : s->loss == LOSS_MSE         ? "RT_LOSS_MSE"
               : s->loss == LOSS_GAN_BCE     ? "RT_LOSS_GAN_BCE"
               : s->loss == LOSS_DPO         ? "RT_LOSS_DPO"
                                             : "RT_LOSS_GAN_HINGE",
               (long long)terms, g->has_dropout);
    if (s->has_ignore)
        buf_printf(b, "    .ce_has_ignore = 1,\n    .ce_ignore_index = %d,\n", (int)s->ignore_index);
    if (s->loss == LOSS_DPO) {   /* (--reference's; simpo and orpo have none: -1) */
        int ref = -1;
        for (int k = 0; s->reference && k < s->n_inputs; k++)
            if (!strcmp(s->inputs[k].name, s->reference))
                ref = k;
        buf_printf(b, "    .reference_input = %d,\n    .eval_logps_offset = %lld,\n", ref,
                   (long long)tensor_base(ev->g->logps)->offset);
    }
    if (g->head)
        emit_head_model(b, ev->g, pred);
    else {
        Tensor *pt = tensor_base(pred);
        buf_printf(b, "    .pred_offset = %lld,\n    .pred_numel = %lld,\n    .pred_ld = %lld,\n",
                   (long long)pt->offset, (long long)pred->numel, (long long)tensor_ld(pred));
    }
    if (pred_eval)
        buf_puts(b, "    .pred_eval = 1,\n");
    if (!g->gan && !g->head)
        emit_predict_model(b, s, ev->g->pred, g->act16);
    if (g->gan)
        emit_gan_model(b, g);
    if (dec)
        emit_decode_model(b, dec);
    buf_printf(b, "    .gpu_scratch_row_bytes = %lld,\n", (long long)p->gpu_scratch_row_bytes);
    if (g->act16)
        buf_printf(b, "    .act16 = %s,\n", g->act16 == RT_PREC_BF16 ? "RT_PREC_BF16" : "RT_PREC_FP16");
    if (g->fp8)
        buf_printf(b, "    .fp8 = 1,\n    .fp8_weight_bytes = %lld,\n    .fp8_amax_slots = %d,\n",
                   (long long)cuda_fp8_weight_bytes(p), p->fp8_all_slots);
    buf_printf(b, "    .train_defaults = train_defaults,\n    .n_train_defaults = %d,\n",
               s->n_train_lines);
    buf_puts(b, "    .forward = forward,\n    .backward = backward,\n    .evaluate = evaluate,\n"
                "    .devices = TRAINC_DEVICES,\n    .cuda = TRAINC_CUDA_IMAGE,\n};\n\n");
}

static void emit_host_c(Program *p, Program *ev, Program *dec, Buf *b)
{
    emit_host_heading(p, dec, b);
    buf_puts(b, "#include \"model.h\"\n\n");
    buf_puts(b, "#ifndef TRAINC_DATA_DIR\n");
    buf_printf(b, "#define TRAINC_DATA_DIR ");
    c_string(b, p->g->spec->data_dir);
    buf_puts(b, " /* trainc build and trainc run pass the absolute folder */\n#endif\n");
    buf_puts(b, "#ifndef TRAINC_DEVICES /* trainc build --device cuda|both and trainc run set these */\n"
                "#define TRAINC_DEVICES RT_HAS_CPU\n#define TRAINC_CUDA_IMAGE NULL\n#endif\n\n");

    emit_host_passes(p, ev, dec, b);
    emit_host_tables(p, b);
    emit_host_model(p, ev, dec, b);
    buf_puts(b, "#ifndef TRAINC_JIT\nint main(int argc, char **argv) { return rt_main(&trainc_model, argc, argv); }\n#endif\n");
}

/* p's own kernels (named by its kprefix) into b, after heading where p has any (NULL:
 * none), and their names into names. */
static void emit_kernel_list(Buf *b, Buf *names, Program *p, const char *heading)
{
    int own = 0;
    for (int i = 0; p && i < p->n_ins; i++)
        own += own_kernel(p->ins[i]);
    if (own && heading)
        buf_puts(b, heading);
    char name[32];
    for (int i = 0; p && i < p->n_ins; i++)
        if (own_kernel(p->ins[i])) {
            snprintf(name, sizeof name, "%s%d", p->kprefix, p->ins[i]->id);
            emit_kernel(b, p->ins[i], name);
            buf_printf(names, "%s\n", name);
        }
}

/* kernels_cpu.c into b, and its kernels' names into names, one a line: training's,
 * validation's own, the decode program's */
static void emit_kernels_c(Program *p, Program *ev, Program *dec, Buf *b, Buf *names)
{
    emit_header(b, p, "kernels_cpu.c");
    buf_puts(b, " *\n * The fused elementwise kernels for the CPU. Each runs over [lo, hi) of its index\n"
                " * space; rt_parallel_for splits the space over the thread pool. Values pass\n"
                " * between fused ops in registers (v0, v1, ...); only what a later kernel reads\n"
                " * is stored. */\n#include \"model.h\"\n\n");
    emit_kernel_list(b, names, p, NULL);
    emit_kernel_list(b, names, ev, "/* ---- validation's own (forward only; it launches the training kernels it\n"
                                   " * would repeat word for word) ---- */\n\n");
    emit_kernel_list(b, names, dec, "/* ---- the decode program's (one position a row: --sample's "
                                    "key/value cache) ---- */\n\n");
}

void emit_plan_json(Program *p, Buf *b)
{
    Graph *g = p->g;
    const Spec *s = g->spec;
    int64_t B = s->train.batch_size;
    /* what the trainer allocates: each tensor's floats padded to 16 (its start record's
     * param_bytes) */
    int64_t pbytes = g->param_floats * 4;
    int64_t gbytes = g->trainable_floats * 4;   /* (freeze's and lora's frozen: none) */
    int adam = s->train.opt != RT_OPT_SGD;   /* (muon's state: its AdamW's) */
    int64_t opt = adam ? 2 * gbytes : (s->train.momentum > 0 ? gbytes : 0);
    buf_printf(b, "{\n  \"model\": \"%s\",\n  \"batch_size\": %lld,\n", s->name, (long long)B);
    /* arena_bytes: as allocated, training's plan or validation's if that is larger */
    buf_printf(b, "  \"arena_row_bytes\": %lld,\n  \"arena_bytes\": %lld,\n",
               (long long)p->arena_row_bytes, (long long)(B * p->alloc_row_bytes));
    buf_printf(b, "  \"eval_arena_bytes\": %lld,\n", (long long)(B * p->eval_row_bytes));
    buf_printf(b, "  \"noreuse_bytes\": %lld,\n  \"lower_bound_bytes\": %lld,\n",
               (long long)(B * p->noreuse_row_bytes), (long long)(B * p->lower_bound_row_bytes));
    buf_printf(b, "  \"param_bytes\": %lld,\n  \"grad_bytes\": %lld,\n  \"optimizer_bytes\": %lld,\n",
               (long long)pbytes, (long long)gbytes, (long long)opt);
    if (g->n_state)   /* batchnorm's running statistics (a start record's state_bytes) */
        buf_printf(b, "  \"state_bytes\": %lld,\n", (long long)(g->state_floats * 4));
    /* bf16-mixed: the plan is the GPU's; the CPU's arena is twice arena_bytes */
    buf_printf(b, "  \"activations\": \"%s\",\n  \"param_copy_bytes\": %lld,\n",
               g->act16 ? half_name(g) : "fp32", (long long)(g->act16 ? pbytes / 2 : 0));
    /* the fp32 weights a GPU holds: in mixed precision not the frozen ones GEMMs alone read */
    buf_printf(b, "  \"gpu_fp32_param_bytes\": %lld,\n",
               (long long)(g->act16 ? g->gpu_fp32_floats * 4 : pbytes));
    /* the GPU's fixed allocations, and the sum that memory_budget_mb counts */
    buf_printf(b, "  \"workspace_bytes\": %lld,\n  \"total_bytes\": %lld,\n",
               (long long)p->workspace_bytes,
               (long long)p->total_bytes);
    static const char *pol[] = {"none", "selective", "full", "auto"};
    buf_printf(b, "  \"recompute\": \"%s\",\n  \"recompute_full_blocks\": %d,\n"
               "  \"recompute_blocks\": %d,\n  \"blocks\": %d,\n"
               "  \"recompute_flops\": %lld,\n", pol[p->policy], p->full_blocks, p->sel_blocks, p->n_blocks,
               (long long)(B * p->recompute_flops));
    /* recompute_flops counts GEMMs and attention (as FLOPs/sample does): the replays of
     * elementwise and norm work are counted here instead, with the bytes they write */
    buf_printf(b, "  \"recompute_instructions\": %d,\n  \"recompute_elementwise_instructions\": %d,\n"
               "  \"recompute_written_bytes\": %lld,\n", p->n_replayed, p->n_replayed_light,
               (long long)(B * p->replay_row_bytes));
    buf_puts(b, "  \"buffers\": [\n");
    int first = 1;
    for (int i = 0; i < g->n_tensors; i++) {
        Tensor *t = g->tensors[i];
        if (!t->has_offset)
            continue;
        buf_printf(b, "%s    {\"name\": \"%s\", \"shape\": \"%s\", \"row_bytes\": %lld, \"offset\": %lld, "
                      "\"bytes\": %lld, \"byte_offset\": %lld, \"live\": [%d, %d], \"dtype\": \"%s\"",
                   first ? "" : ",\n", t->name, shape_of(t, 1), (long long)t->row_bytes,
                   (long long)t->offset, (long long)(B * t->row_bytes), (long long)(B * t->offset),
                   t->first, t->last, tensor_half(g, t) ? half_name(g) : "fp32");
        if (t->ld)   /* the last axis's rows this many elements apart (padded logits) */
            buf_printf(b, ", \"row_stride\": %lld", (long long)t->ld);
        buf_puts(b, "}");
        first = 0;
    }
    buf_puts(b, "\n  ],\n  \"instructions\": [\n");
    first = 1;
    for (int i = 0; i < p->n_ins; i++) {
        Instr *in = p->ins[i];
        if (in->dead)
            continue;
        buf_printf(b, "%s    {\"index\": %d, \"pass\": \"%s\", \"kind\": \"%s\", \"what\": \"%s\", \"from\": \"%s\"}",
                   first ? "" : ",\n", i, in->backward ? "backward" : "forward",
                   in->kind == I_EW ? "kernel" : in->kind == I_GEMM ? "gemm" : "call", in->what,
                   in->origin);
        first = 0;
    }
    buf_puts(b, "\n  ]\n}\n");
}

void emit_c(Program *p, Program *ev, Program *dec, Emitted *out)
{
    emit_model_h(p, ev, dec, &out->model_h);
    emit_host_c(p, ev, dec, &out->host_c);
    emit_kernels_c(p, ev, dec, &out->kernels_c, &out->cpu_kernel_names);
    emit_plan_json(p, &out->plan_json);
}
