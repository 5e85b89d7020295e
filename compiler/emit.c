/* emit.c: between the last pass and the emitters, and after them. The names the reader
 * sees (tidy_names) and the kernels printed once (find_twins, comparing
 * both emitters' text of each fused loop) are settled before emit_c and emit_cuda print
 * (emit_prepare); the files they printed are then written all or none (emit_write). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ir.h"

/* A CUDA kernel's text without its comments and line breaks, each of its tensors' names
 * (alone, or ending a register's name: r_x) written as its parameter position: two loops
 * with the same text here are the same kernel over other pointers. */
static char *gpu_shape_text(const Graph *g, Instr *in)
{
    Buf k = {0}, o = {0};
    cuda_kernel(&k, g, in, "K");
    Tensor *t[64];
    char w[64];
    int n = kernel_tensors(in, t, w, 64);
    const char *s = strstr(k.s, " */\n");
    s = s ? s + 4 : k.s;
    while (*s) {
        int hit = -1;
        if (ident_char(*s) && (s == k.s || !ident_char(s[-1]) || s[-1] == '_'))
            for (int q = 0; q < n && hit < 0; q++) {
                size_t len = strlen(t[q]->name);
                if (!strncmp(s, t[q]->name, len) && !ident_char(s[len]))
                    hit = q;
            }
        if (hit >= 0) {
            buf_printf(&o, "$%d", hit);
            s += strlen(t[hit]->name);
        } else {
            char c[2] = {*s++, 0};
            buf_puts(&o, c);
        }
    }
    free(k.s);
    /* without comments, whitespace runs as one space: names of another length break the
     * lines elsewhere (linear_h_10_fc vs linear_h_1_fc), a comment may stand on a line of
     * its own or after code, and the same code is the same */
    Buf c = {0};
    int space = 0;   /* a run of spaces, line breaks and comments, written as one space */
    for (const char *q = o.s ? o.s : ""; *q;) {
        if (q[0] == '/' && q[1] == '*') {
            const char *e = strstr(q + 2, "*/");
            q = e ? e + 2 : q + strlen(q);
            space = 1;
        } else if (*q == ' ' || *q == '\n') {
            q++;
            space = 1;
        } else {
            if (space)
                buf_puts(&c, " ");
            space = 0;
            char ch[2] = {*q++, 0};
            buf_puts(&c, ch);
        }
    }
    free(o.s);
    return c.s ? c.s : xstrdup("");
}

/* Kernels printed once. On the GPU a training loop whose kernel, names aside, is an
 * earlier one's (the same ops in each block of a repeat) launches that one with its
 * own pointers (Instr.same_gpu). A validation kernel that reads as a training kernel
 * does (the same fused ops; on the CPU over the same tensors at the same arena offsets
 * too) is not printed twice: validation launches the training one (same_cpu,
 * same_gpu); on the GPU, else an earlier validation kernel that reads as it does
 * (same_gpu_ev). */
static void find_twins(Program *p, Program *ev)
{
    int n = 0;
    for (int i = 0; i < p->n_ins; i++)
        n += !p->ins[i]->dead && p->ins[i]->kind == I_EW;
    Buf *cpu = calloc(n ? n : 1, sizeof *cpu);
    char **gpu = calloc(n ? n : 1, sizeof *gpu);
    Instr **tk = calloc(n ? n : 1, sizeof *tk);
    if (!cpu || !gpu || !tk)
        die("out of memory");
    n = 0;
    for (int i = 0; i < p->n_ins; i++)
        if (!p->ins[i]->dead && p->ins[i]->kind == I_EW) {
            Instr *in = tk[n] = p->ins[i];
            in->same_cpu = in->same_gpu = NULL;
            emit_kernel(&cpu[n], in, "K");
            gpu[n] = gpu_shape_text(p->g, in);
            for (int k = 0; k < n && !in->same_gpu; k++)
                if (!tk[k]->same_gpu && !strcmp(gpu[n], gpu[k]))
                    in->same_gpu = tk[k];
            n++;
        }
    char **ev_gpu = calloc(ev->n_ins ? ev->n_ins : 1, sizeof *ev_gpu);
    Instr **ev_ins = calloc(ev->n_ins ? ev->n_ins : 1, sizeof *ev_ins);
    int n_ev = 0;
    if (!ev_gpu || !ev_ins)
        die("out of memory");
    for (int i = 0; i < ev->n_ins; i++) {
        Instr *in = ev->ins[i];
        in->same_cpu = in->same_gpu = NULL;
        in->same_gpu_ev = 0;
        if (in->dead || in->kind != I_EW)
            continue;
        Buf c = {0};
        emit_kernel(&c, in, "K");
        char *g = gpu_shape_text(ev->g, in);
        for (int k = 0; k < n && !(in->same_cpu && in->same_gpu); k++) {
            if (!in->same_cpu && !strcmp(c.s, cpu[k].s))
                in->same_cpu = tk[k];
            if (!in->same_gpu && !strcmp(g, gpu[k]))
                in->same_gpu = tk[k]->same_gpu ? tk[k]->same_gpu : tk[k];
        }
        free(c.s);
        /* else an earlier validation kernel's, names aside (each block's residual add) */
        for (int k = 0; k < n_ev && !in->same_gpu; k++)
            if (!strcmp(g, ev_gpu[k])) {
                in->same_gpu = ev_ins[k];
                in->same_gpu_ev = 1;
            }
        if (in->same_gpu)
            free(g);
        else {
            ev_gpu[n_ev] = g;
            ev_ins[n_ev++] = in;
        }
    }
    for (int k = 0; k < n; k++) {
        free(cpu[k].s);
        free(gpu[k]);
    }
    for (int k = 0; k < n_ev; k++)
        free(ev_gpu[k]);
    free(cpu);
    free(gpu);
    free(tk);
    free(ev_gpu);
    free(ev_ins);
}

/* The names the reader sees. graph_tensor suffixes a repeated name with the tensor's
 * id (d_residual_attn_out_h_3_attn_179: the sum of a residual input's two gradient
 * contributions; linear_h_3_fc_re_230: a replay), which says nothing to a reader and
 * is often not needed: the other tensor of that name was fused away. Here each tensor
 * the program still touches gets the name it asked for where no other such tensor has
 * it, else that name numbered in the order of first use (x_re, x_re2, x_re3; d_x,
 * d_x_2); the calls and descriptions reference the tensors, so they follow. Runs after
 * every pass and before anything is printed: the descriptions that name a tensor
 * (Instr.what_t) are then written out whole. */
static void tidy_names(Program *p)
{
    Graph *g = p->g;
    int nt = g->n_tensors;
    int *order = xcalloc((size_t)nt + 1, sizeof *order);   /* touched tensors, first use first */
    char *seen = xcalloc((size_t)nt + 1, 1);
    int n = 0;
#define TOUCH(t_)                                                                          \
    do {                                                                                   \
        Tensor *t1_ = (t_);                                                                \
        for (int a_ = 0; a_ < 2 && t1_; a_++, t1_ = t1_->alias)                            \
            if (t1_->id < nt && !seen[t1_->id]++)                                          \
                order[n++] = t1_->id;                                                      \
    } while (0)
    for (int i = 0; i < p->n_ins; i++) {
        Instr *in = p->ins[i];
        if (in->dead)
            continue;
        for (int k = 0; k < in->n_reads; k++)
            TOUCH(in->reads[k]);
        for (int k = 0; k < in->n_writes; k++)
            TOUCH(in->writes[k]);
        for (int k = 0; k < in->n_ops; k++) {
            TOUCH(in->ops[k].out);
            for (int j = 0; j < in->ops[k].n_arg; j++)
                TOUCH(in->ops[k].arg[j].t);
        }
    }
#undef TOUCH
    for (int q = 0; q < n; q++) {
        Tensor *t = g->tensors[order[q]];
        if (!strcmp(t->name, t->want))
            continue;
        char *name = xstrdup(t->want);
        /* numbered: x_re2 after x_re, d_x_2 after d_x */
        size_t wl = strlen(t->want);
        int glue = !(wl > 3 && !strcmp(t->want + wl - 3, "_re"));
        for (int k = 2;; k++) {
            int taken = 0;
            for (int r = 0; r < n && !taken; r++)
                taken = r != q && !strcmp(g->tensors[order[r]]->name, name);
            if (!taken)
                break;
            free(name);
            name = xasprintf("%s%s%d", t->want, glue ? "_" : "", k);
        }
        t->name = name;
    }
    for (int i = 0; i < p->n_ins; i++) {
        Instr *in = p->ins[i];
        if (in->what_t) {
            in->what = instr_what(in);
            in->what_t = NULL;
            in->what_rest = NULL;
        }
    }
    free(order);
    free(seen);
}

/* What both emitters read, settled once: the names, the loop sizes, the twin kernels
 * (the decode program's are its own: on the CPU, at its own offsets). */
void emit_prepare(Program *p, Program *ev, Program *dec)
{
    tidy_names(p);
    tidy_names(ev);
    if (dec)
        tidy_names(dec);
    cuda_fp8_slots(p, ev);   /* (before the twins: a kernel that folds a maximum differs) */
    find_twins(p, ev);
}

/* DIR/NAME.tmp with b's bytes; on a failure nothing of it is left. */
static int write_tmp(const char *dir, const char *name, const Buf *b)
{
    char *tmp = xasprintf("%s/%s.tmp", dir, name);
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(b->s, 1, b->len, f) == b->len;
    if (f && fclose(f) != 0)
        ok = 0;
    int err = errno;
    if (!ok)
        unlink(tmp);
    free(tmp);
    errno = err;
    return ok ? 0 : -1;
}

/* The five files, all or none: each is written as NAME.tmp, then all are renamed (a
 * full disk leaves the folder as it was, not half of a new emit beside an old one). */
int emit_write(const Emitted *out, const char *dir)
{
    if (rt_mkdir_p(dir) != 0)
        return -1;
    const char *names[5] = {"model.h", "host.c", "kernels_cpu.c", "kernels_cuda.cu", "plan.json"};
    const Buf *bufs[5] = {&out->model_h, &out->host_c, &out->kernels_c, &out->kernels_cu_file,
                          &out->plan_json};
    int n = 0;
    while (n < 5 && write_tmp(dir, names[n], bufs[n]) == 0)
        n++;
    int rc = n == 5 ? 0 : -1, err = errno;
    for (int i = 0; i < n; i++) {
        char *tmp = xasprintf("%s/%s.tmp", dir, names[i]), *path = xasprintf("%s/%s", dir, names[i]);
        if (rc != 0 || rename(tmp, path) != 0) {
            if (rc == 0)
                err = errno;
            rc = -1;
            unlink(tmp);
        }
        free(tmp);
        free(path);
    }
    errno = err;
    return rc;
}
