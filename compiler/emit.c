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

/* The GPU kernels printed so far: each one's text (gpu_shape_text), its loop and the
 * pass it belongs to (TWIN_*). */
typedef struct {
    char **text;
    Instr **ins;
    int *pass;
    int n;
} Printed;

static Printed printed_new(int cap)
{
    cap = cap ? cap : 1;
    Printed k = {calloc(cap, sizeof(char *)), calloc(cap, sizeof(Instr *)),
                 calloc(cap, sizeof(int)), 0};
    if (!k.text || !k.ins || !k.pass)
        die("out of memory");
    return k;
}

/* in's GPU twin among the printed kernels (its pass into in->same_gpu_pass), else in
 * itself added to them as `pass`'s. */
static void printed_twin(Printed *k, const Graph *g, Instr *in, int pass)
{
    char *text = gpu_shape_text(g, in);
    for (int j = 0; j < k->n; j++)
        if (!strcmp(text, k->text[j])) {
            in->same_gpu = k->ins[j];
            in->same_gpu_pass = k->pass[j];
            free(text);
            return;
        }
    k->text[k->n] = text;
    k->ins[k->n] = in;
    k->pass[k->n++] = pass;
}

static void printed_free(Printed *k)
{
    for (int j = 0; j < k->n; j++)
        free(k->text[j]);
    free(k->text);
    free(k->ins);
    free(k->pass);
}

const char *twin_prefix(int pass)
{
    return pass == TWIN_DECODE ? "kd" : pass == TWIN_EVAL ? "ke" : "k";
}

/* Kernels printed once. On the GPU a loop whose kernel, names aside, is one printed
 * before (the same ops in each block of a repeat; validation's and the decode program's
 * loops that read as training's) launches that one with its own pointers (Instr.same_gpu,
 * same_gpu_pass: training's, validation's or the decode program's kernel). On the CPU a
 * validation kernel that reads as a training kernel does (over the same tensors at the
 * same arena offsets too) launches the training one (same_cpu); the decode program's,
 * at its own offsets, are its own there. */
static void find_twins(Program *p, Program *ev, Program *dec)
{
    int n = p->n_ins + ev->n_ins + (dec ? dec->n_ins : 0);
    Printed gpu = printed_new(n);
    Buf *cpu = calloc(p->n_ins ? p->n_ins : 1, sizeof *cpu);   /* training's C text */
    if (!cpu)
        die("out of memory");
    for (int i = 0; i < p->n_ins; i++) {
        Instr *in = p->ins[i];
        in->same_cpu = in->same_gpu = NULL;
        in->same_gpu_pass = TWIN_TRAIN;
        if (!in->dead && in->kind == I_EW) {
            emit_kernel(&cpu[i], in, "K");
            printed_twin(&gpu, p->g, in, TWIN_TRAIN);
        }
    }
    for (int i = 0; i < ev->n_ins; i++) {
        Instr *in = ev->ins[i];
        in->same_cpu = in->same_gpu = NULL;
        in->same_gpu_pass = TWIN_TRAIN;
        if (in->dead || in->kind != I_EW)
            continue;
        Buf c = {0};
        emit_kernel(&c, in, "K");
        for (int k = 0; k < p->n_ins && !in->same_cpu; k++)
            if (cpu[k].s && !strcmp(c.s, cpu[k].s))
                in->same_cpu = p->ins[k];
        free(c.s);
        printed_twin(&gpu, ev->g, in, TWIN_EVAL);
    }
    for (int i = 0; dec && i < dec->n_ins; i++) {
        Instr *in = dec->ins[i];
        in->same_cpu = in->same_gpu = NULL;
        in->same_gpu_pass = TWIN_TRAIN;
        if (!in->dead && in->kind == I_EW)
            printed_twin(&gpu, dec->g, in, TWIN_DECODE);
    }
    for (int i = 0; i < p->n_ins; i++)
        free(cpu[i].s);
    free(cpu);
    printed_free(&gpu);
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

/* What both emitters read, settled once: the names, the loop sizes, the twin kernels. */
void emit_prepare(Program *p, Program *ev, Program *dec)
{
    tidy_names(p);
    tidy_names(ev);
    if (dec)
        tidy_names(dec);
    cuda_fp8_slots(p, ev);   /* (before the twins: a kernel that folds a maximum differs) */
    find_twins(p, ev, dec);
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
