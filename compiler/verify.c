/* verify.c: the verifier that runs after every pass, and --dump-after=PASS.
 *
 * The pipeline (pipeline.c) calls passed(p, PASS) after each pass over a program (the
 * passes and their names: ir.h's PASS_LIST). That checks what every later pass and both
 * emitters rely on, and dies naming the pass that broke it (an internal error: no input
 * can cause one):
 *
 *   - every live instruction is well formed (a kind; a call whose arguments the call
 *     table takes, its tensor arguments exactly its reads and writes; or a loop of ops
 *     whose register operands name earlier ops of the same loop and that writes
 *     something: a loop whose values nobody reads is work thrown away; tensors for its
 *     reads and writes), the forward pass holds no backward instruction, and the validation
 *     program neither a backward one nor a write to a parameter or its gradient;
 *   - an activation or scratch buffer is read only after a live instruction has
 *     written it, or by the instruction that writes it (scratch, accumulation);
 *   - once the gradient hooks are in: each parameter whose gradient the step writes
 *     (in the backward pass, or a chunked head's loss call in the forward) has an
 *     rt_grad_begin covering it before its first write and one rt_grad_ready of
 *     exactly its range after its last, and nothing writes it after;
 *   - once memory is planned: every buffer an instruction touches has an offset, lives
 *     over that instruction, lies inside the arena at a 16-byte boundary, and no two
 *     buffers whose lives overlap share a byte.
 *
 * With --dump-after=PASS (any command that compiles) the graph or program after PASS is
 * printed to stderr: nodes (graph, autodiff) or instructions with what they read and
 * write (and, after memplan, each buffer's offset and live range). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "ops/op.h"

/* the pipeline's passes, in order (ir.h: PASS_LIST) */
static const char *const pass_names[] = {
#define X(name, fn, programs) name,
    PASS_LIST(X)
#undef X
    NULL,
};

static const char *dump_after;   /* NULL: no dump */
static int dump_paused;          /* dump_pause */

int dump_pause(int on)
{
    int was = dump_paused;
    dump_paused = on;
    return was;
}

int dump_wanted(void)
{
    return dump_after != NULL && !dump_paused;
}

void set_dump_after(const char *pass)
{
    for (int i = 0; pass_names[i]; i++)
        if (!strcmp(pass, pass_names[i])) {
            dump_after = pass_names[i];
            return;
        }
    char list[512] = "";
    for (int i = 0; pass_names[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                 pass_names[i]);
    error_input("--dump-after %s: no such pass (the passes, in order: %s)", pass, list);
}

static int pass_index(const char *pass)
{
    for (int i = 0; pass_names[i]; i++)
        if (!strcmp(pass, pass_names[i]))
            return i;
    die("verifier: unknown pass '%s'", pass);
}

/* ---- printing ---------------------------------------------------------------- */

static void put_shape(FILE *f, const Tensor *t)
{
    int rows = t->kind == T_INPUT || t->kind == T_ACT || t->kind == T_TEMP;
    fputc('[', f);
    if (rows)
        fputs(t->rank ? "B, " : "B", f);
    for (int d = 0; d < t->rank; d++)
        fprintf(f, "%s%" PRId64, d ? ", " : "", t->shape[d]);
    fputc(']', f);
}

static void put_tensor(FILE *f, Tensor *t, int planned)
{
    fputs(t->name, f);
    Tensor *b = tensor_base(t);
    if (planned && (b->kind == T_ACT || b->kind == T_TEMP) && b->has_offset)
        fprintf(f, " @%" PRId64 " %d..%d", b->offset, b->first, b->last);
    if (b != t)
        fprintf(f, " (in %s)", b->name);
}

/* One line "LABEL a, b @off first..last, ..." (nothing when n is 0). */
static void put_tensors(FILE *f, const char *label, Tensor **ts, int n, int planned)
{
    if (!n)
        return;
    fprintf(f, "         %s ", label);
    for (int k = 0; k < n; k++) {
        fputs(k ? ", " : "", f);
        put_tensor(f, ts[k], planned);
    }
    fputc('\n', f);
}

/* Operand j of an op (expr_print's callback): a tensor read at its index, an earlier op
 * of the loop by its v number. */
static void put_operand(Buf *b, int j, void *ctx)
{
    const Operand *o = &((const EwOp *)ctx)->arg[j];
    if (!o->t)
        buf_printf(b, "v%d", o->val);
    else {
        buf_printf(b, "%s[", o->t->name);
        index_print(b, o->ix, 0);
        buf_puts(b, "]");
    }
}

/* A fused loop's op k as the C emitter writes it: "v2 = v1 > 0 ? v0 : 0  (relu)". */
static void put_op(FILE *f, const EwOp *op, int k, int64_t n)
{
    Buf e = {0};
    expr_print(&e, op->expr, 0, put_operand, (void *)op);
    fprintf(f, "         %s v%d = %s", k ? "   " : "for", k, e.s);
    free(e.s);
    fprintf(f, "  (%s)", op->what ? op->what : "");
    if (!k)
        fprintf(f, ", i < e->B * %" PRId64, n);
    fputc('\n', f);
}

static void dump_graph(const Graph *g, const char *pass)
{
    FILE *f = stderr;
    fprintf(f, "== after %s: %d nodes (%d forward), %d parameters, %" PRId64 " floats\n", pass,
            g->n_nodes, g->n_forward, g->n_params, g->param_floats);
    for (int i = 0; i < g->n_nodes; i++) {
        const Node *n = g->nodes[i];
        fprintf(f, "%5d  %s  %-17s %s\n", i, n->backward ? "bwd" : "fwd", node_defs[n->kind]->name,
                n->origin ? n->origin : "");
        fputs("         ", f);
        for (int k = 0; k < n->n_in; k++)
            fprintf(f, "%s%s", k ? ", " : "", n->in[k] ? n->in[k]->name : "-");
        if (n->w)
            fprintf(f, "%s%s", n->n_in ? ", " : "", n->w->name);
        if (n->b)
            fprintf(f, ", %s", n->b->name);
        if (n->out) {
            fprintf(f, " -> %s ", n->out->name);
            put_shape(f, n->out);
        }
        if (n->out2)
            fprintf(f, ", %s", n->out2->name);
        fputc('\n', f);
    }
}

static void dump_program(const Program *p, const char *pass, int planned)
{
    FILE *f = stderr;
    int live = 0;
    for (int i = 0; i < p->n_ins; i++)
        live += !p->ins[i]->dead;
    fprintf(f, "== after %s: the %s program of %s: %d instructions (%d in the forward pass)",
            pass, p->decode ? "decode" : p->eval ? "validation" : "training", p->g->spec->name,
            live, p->n_forward);
    if (!p->eval)
        fprintf(f, ", recompute %s", p->policy == RT_RECOMPUTE_NONE ? "none"
                                     : p->policy == RT_RECOMPUTE_SELECTIVE ? "selective" : "full");
    if (planned)
        fprintf(f, ", arena %" PRId64 " bytes a row (@offset first..last)", p->arena_row_bytes);
    fputc('\n', f);
    for (int i = 0; i < p->n_ins; i++) {
        const Instr *in = p->ins[i];
        if (in->dead)
            continue;
        const char *kind = in->kind == I_EW ? "loop" : in->kind == I_GEMM ? "gemm" : "call";
        char *what = instr_what(in);
        fprintf(f, "%5d  %s  %s  %s  (%s)\n", i, in->recompute ? "rec" : in->backward ? "bwd" : "fwd",
                kind, what, in->origin ? in->origin : "");
        free(what);
        put_tensors(f, "reads ", in->reads, in->n_reads, planned);
        put_tensors(f, "writes", in->writes, in->n_writes, planned);
        if (in->kind != I_EW && !in->n_reads && !in->n_writes) {
            char *call = call_text(in);
            fprintf(f, "         %s\n", call);
            free(call);
        }
        for (int k = 0; in->kind == I_EW && k < in->n_ops; k++)
            put_op(f, &in->ops[k], k, in->n);
    }
}

/* ---- the checks ---------------------------------------------------------------- */

static const char *cur_pass;
static const Program *cur_prog;

static _Noreturn void broken(const Instr *in, int i, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static _Noreturn void broken(const Instr *in, int i, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    die("verifier, after %s (%s program of %s): instruction %d (%s, %s): %s", cur_pass,
        cur_prog->decode ? "decode" : cur_prog->eval ? "validation" : "training",
        cur_prog->g->spec->name, i,
        in && in->what ? instr_what(in) : "-", in && in->origin ? in->origin : "-", msg);
}

static int in_arena(const Tensor *t) { return t->kind == T_ACT || t->kind == T_TEMP; }

static int writes_base(const Instr *in, const Tensor *b)
{
    for (int k = 0; k < in->n_writes; k++)
        if (tensor_base(in->writes[k]) == b)
            return 1;
    return 0;
}

static int listed(Tensor *const *ts, int n, const Tensor *t)
{
    for (int k = 0; k < n; k++)
        if (ts[k] == t)
            return 1;
    return 0;
}

/* A call's tensor arguments are what it reads and writes, as memplan and recompute see
 * them, and nothing else. */
static void check_call(const Instr *in, int i)
{
    const char *bad = call_check(in);
    if (bad)
        broken(in, i, "%s: %s", call_name(in->call), bad);
    Tensor *args[CALL_MAX_ARGS];
    int n = 0;
    for (int k = 0; k < in->n_args; k++)
        if (in->args[k].kind == ARG_TENSOR || in->args[k].kind == ARG_TRAIN) {
            Tensor *t = in->args[k].t;
            if (!listed(in->reads, in->n_reads, t) && !listed(in->writes, in->n_writes, t))
                broken(in, i, "%s's argument %d, %s, is neither read nor written",
                       call_name(in->call), k + 1, t->name);
            args[n++] = t;
        }
    for (int k = 0; k < in->n_reads; k++)
        if (!listed(args, n, in->reads[k]))
            broken(in, i, "%s reads %s, not one of its arguments", call_name(in->call),
                   in->reads[k]->name);
    for (int k = 0; k < in->n_writes; k++)
        if (!listed(args, n, in->writes[k]))
            broken(in, i, "%s writes %s, not one of its arguments", call_name(in->call),
                   in->writes[k]->name);
}

static void check_form(const Program *p)
{
    for (int i = 0; i < p->n_ins; i++) {
        const Instr *in = p->ins[i];
        if (!in)
            broken(NULL, i, "missing");
        if (in->dead)
            continue;
        if (in->kind != I_EW && in->kind != I_CALL && in->kind != I_GEMM)
            broken(in, i, "kind %d", in->kind);
        if (i < p->n_forward && in->backward)
            broken(in, i, "a backward instruction in the forward pass (%d instructions)", p->n_forward);
        if (in->kind == I_EW) {
            if (in->n_ops <= 0 || in->n <= 0)
                broken(in, i, "a loop without ops or a count");
            if (in->n_writes == 0)
                broken(in, i, "a loop that writes nothing");
            for (int k = 0; k < in->n_ops; k++)
                for (int j = 0; j < in->ops[k].n_arg; j++)
                    if (!in->ops[k].arg[j].t && (in->ops[k].arg[j].val < 0 || in->ops[k].arg[j].val >= k))
                        broken(in, i, "op %d's operand %d names op %d of the loop", k, j,
                               in->ops[k].arg[j].val);
        } else {
            check_call(in, i);
        }
        for (int k = 0; k < in->n_reads; k++)
            if (!in->reads[k])
                broken(in, i, "read %d is no tensor", k);
        for (int k = 0; k < in->n_writes; k++) {
            if (!in->writes[k])
                broken(in, i, "write %d is no tensor", k);
            if (p->eval && (in->writes[k]->kind == T_PGRAD || in->writes[k]->kind == T_PARAM))
                broken(in, i, "the validation program writes %s", in->writes[k]->name);
        }
        if (p->eval && in->backward)
            broken(in, i, "a backward instruction in the validation program");
    }
}

static void check_def_use(const Program *p)
{
    Graph *g = p->g;
    char *written = xcalloc((size_t)g->n_tensors + 1, 1);
    for (int i = 0; i < p->n_ins; i++) {
        const Instr *in = p->ins[i];
        if (in->dead)
            continue;
        for (int k = 0; k < in->n_reads; k++) {
            Tensor *b = tensor_base(in->reads[k]);
            if (in_arena(b) && !written[b->id] && !writes_base(in, b))
                broken(in, i, "reads %s before any instruction writes it", in->reads[k]->name);
        }
        for (int k = 0; k < in->n_writes; k++)
            written[tensor_base(in->writes[k])->id] = 1;
    }
    free(written);
}

/* train.freeze's parameters after the trained ones (graph.c): the gradient region
 * [0, trainable_floats) holds every trained one and no frozen one */
static void check_trainable(const Graph *g)
{
    for (int k = 0; k < g->n_params; k++) {
        const Param *pa = g->params[k];
        int below = pa->offset + param_extent(pa) <= g->trainable_floats;
        if ((k < g->n_trainable) != !pa->frozen || (!pa->frozen) != below)
            broken(NULL, -1, "parameter %s (%s, at %" PRId64 ") is not where the trained ones "
                   "end (%d of them, %" PRId64 " floats)", pa->name, pa->frozen ? "frozen" : "trained",
                   pa->offset, g->n_trainable, g->trainable_floats);
    }
}

/* A frozen parameter's gradient written anyway (beside what is wanted) goes to the
 * sink and has no hooks: nothing reduces or reads it */
static void check_frozen_writes(const Program *p, const Param *pa)
{
    for (int i = 0; i < p->n_ins; i++) {
        const Instr *in = p->ins[i];
        int64_t off, n;
        if (in->dead)
            continue;
        if ((grad_hook(in, CALL_GRAD_BEGIN, &off, &n) || grad_hook(in, CALL_GRAD_READY, &off, &n)) &&
            off < pa->offset + param_extent(pa) && pa->offset < off + n)
            broken(in, i, "a gradient hook over the frozen %s", pa->name);
        for (int w = 0; w < in->n_writes; w++)
            if (in->writes[w]->kind == T_PGRAD && in->writes[w]->param == pa && pa->sink_offset < 0)
                broken(in, i, "writes the frozen %s's gradient, which has no place", pa->name);
    }
}

/* A frozen weight a GPU in mixed precision holds in its 16-bit copy alone (graph.c's
 * copy16_only, laid out from gpu_fp32_floats) is read by GEMMs alone, which map its
 * address to the copy: any other reader would read fp32 values that are not there */
static void check_copy16_only(const Program *p, const Param *pa)
{
    if (pa->offset < p->g->gpu_fp32_floats)
        broken(NULL, -1, "%s is held in 16 bits alone but lies below gpu_fp32_floats", pa->name);
    for (int i = 0; i < p->n_ins; i++) {
        const Instr *in = p->ins[i];
        if (in->dead || in->kind == I_GEMM)
            continue;
        for (int r = 0; r < in->n_reads; r++)
            if (in->reads[r]->param == pa)
                broken(in, i, "reads %s, which a GPU in mixed precision holds in 16 bits alone "
                       "(only a GEMM may)", pa->name);
    }
}

static void check_hooks(const Program *p)
{
    Graph *g = p->g;
    check_trainable(g);
    for (int k = 0; k < g->n_params; k++) {
        const Param *pa = g->params[k];
        int first = -1, last = -1, begun = -1, ready = -1;
        if (pa->copy16_only)
            check_copy16_only(p, pa);
        if (pa->frozen) {
            check_frozen_writes(p, pa);
            continue;
        }
        for (int i = 0; i < p->n_ins; i++) {
            const Instr *in = p->ins[i];
            int64_t off, n;
            if (in->dead)
                continue;
            if (grad_hook(in, CALL_GRAD_BEGIN, &off, &n) && off <= pa->offset &&
                pa->offset + param_extent(pa) <= off + n) {
                if (begun >= 0)
                    broken(in, i, "a second rt_grad_begin for %s (the first: %d)", pa->name, begun);
                begun = i;
            }
            if (grad_hook(in, CALL_GRAD_READY, &off, &n) && off == pa->offset) {
                if (ready >= 0 || n != param_extent(pa))
                    broken(in, i, "rt_grad_ready for %s: a second one, or not its %" PRId64 " floats",
                           pa->name, param_extent(pa));
                ready = i;
            }
            for (int w = 0; w < in->n_writes; w++)
                if (in->writes[w]->kind == T_PGRAD && in->writes[w]->param == pa) {
                    if (first < 0)
                        first = i;
                    last = i;
                    if (begun < 0 || ready >= 0)
                        broken(in, i, "writes %s's gradient %s", pa->name,
                               begun < 0 ? "before its rt_grad_begin" : "after its rt_grad_ready");
                }
        }
        if (first >= 0 && ready < 0)
            broken(NULL, last, "%s's gradient is written and never declared ready", pa->name);
        if (first < 0 && (begun >= 0 || ready >= 0))
            broken(NULL, begun >= 0 ? begun : ready, "hooks for %s, whose gradient is never written",
                   pa->name);
    }
}

static int by_offset(const void *a, const void *b)
{
    const Tensor *x = *(Tensor *const *)a, *y = *(Tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static void check_plan(const Program *p)
{
    Graph *g = p->g;
    for (int i = 0; i < p->n_ins; i++) {
        const Instr *in = p->ins[i];
        if (in->dead)
            continue;
        for (int k = 0; k < in->n_reads + in->n_writes; k++) {
            Tensor *t = k < in->n_reads ? in->reads[k] : in->writes[k - in->n_reads];
            Tensor *b = tensor_base(t);
            if (!in_arena(b))
                continue;
            if (!b->has_offset)
                broken(in, i, "%s has no place in the arena", t->name);
            if (i < b->first || i > b->last)
                broken(in, i, "touches %s outside its life %d..%d", t->name, b->first, b->last);
        }
    }
    Tensor **ts = xcalloc((size_t)g->n_tensors + 1, sizeof *ts);
    int n = 0;
    for (int i = 0; i < g->n_tensors; i++) {
        Tensor *t = g->tensors[i];
        if (!in_arena(t) || t->alias || !t->has_offset || t->first < 0)
            continue;
        if (t->offset < 0 || t->offset % 16 || t->offset + t->row_bytes > p->arena_row_bytes)
            broken(NULL, t->first, "%s at %" PRId64 " (%" PRId64 " bytes a row): outside the arena's "
                   "%" PRId64 " or unaligned", t->name, t->offset, t->row_bytes, p->arena_row_bytes);
        ts[n++] = t;
    }
    /* by offset: a buffer can only share bytes with those that start before its end */
    qsort(ts, (size_t)n, sizeof *ts, by_offset);
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n && ts[b]->offset < ts[a]->offset + ts[a]->row_bytes; b++)
            if (ts[a]->first <= ts[b]->last && ts[b]->first <= ts[a]->last)
                broken(NULL, ts[b]->first, "%s (%d..%d) and %s (%d..%d) share arena bytes at %" PRId64,
                       ts[a]->name, ts[a]->first, ts[a]->last, ts[b]->name, ts[b]->first,
                       ts[b]->last, ts[b]->offset);
    free(ts);
}

void passed_graph(const Graph *g, const char *pass)
{
    pass_index(pass);
    if (!dump_paused && dump_after && !strcmp(dump_after, pass))
        dump_graph(g, pass);
}

void passed(const Program *p, const char *pass)
{
    int at = pass_index(pass);
    cur_pass = pass;
    cur_prog = p;
    check_form(p);
    check_def_use(p);
    if (at >= pass_index("grad-hooks") && !p->eval)
        check_hooks(p);
    if (at >= pass_index("memplan"))
        check_plan(p);
    if (!dump_paused && dump_after && !strcmp(dump_after, pass))
        dump_program(p, pass, at >= pass_index("memplan"));
}
