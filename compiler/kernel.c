/* kernel.c: what the C and the CUDA emitter print alike about a fused kernel: its
 * tensors in parameter order (kernel_uses, kernel_tensors: rt_launch's argument list
 * too), its heading comment (kernel_head), an op's expression and an operand's index as
 * text (expr_print, index_print) and a tensor's shape for comments. */
#include <stdlib.h>
#include "ir.h"

char *shape_of(const Tensor *t, int batch)
{
    Buf b = {0};
    buf_puts(&b, batch ? "[B" : "[");
    for (int i = 0; i < t->rank; i++)
        buf_printf(&b, "%s%lld", (batch || i) ? ", " : "", (long long)t->shape[i]);
    buf_puts(&b, "]");
    return b.s;
}

char *tensor_shape_text(const Tensor *t)
{
    if (tensor_base((Tensor *)t)->layout)
        return xstrdup(tensor_base((Tensor *)t)->layout);
    return shape_of(t, t->kind != T_PARAM && t->kind != T_PGRAD && t->kind != T_STATE);
}

void uses_add(Uses *u, Tensor *t, int w)
{
    for (int i = 0; i < u->n; i++)
        if (u->t[i] == t) {
            u->w[i] |= (char)w;
            return;
        }
    u->t = realloc(u->t, (size_t)(u->n + 1) * sizeof *u->t);
    u->w = realloc(u->w, (size_t)(u->n + 1));
    u->t[u->n] = t;
    u->w[u->n++] = (char)w;
}

/* A fused kernel's tensors: operands in first-use order, then outputs not read. This
 * is the parameter order of its CUDA twin and so of rt_launch's argument list. */
void kernel_uses(Uses *u, const Instr *in)
{
    for (int k = 0; k < in->n_ops; k++)
        for (int j = 0; j < in->ops[k].n_arg; j++)
            if (in->ops[k].arg[j].t)
                uses_add(u, in->ops[k].arg[j].t, 0);
    for (int k = 0; k < in->n_writes; k++)
        uses_add(u, in->writes[k], 1);
}

void index_print(Buf *b, Index ix, int cuda)
{
    const char *B = cuda ? "B" : "e->B";
    long long a = (long long)ix.a, n = (long long)ix.b;
    switch (ix.kind) {
    case IX_SELF: buf_puts(b, "i"); return;
    case IX_MOD: buf_printf(b, "i %% %lld", a); return;
    case IX_DIV_MOD: buf_printf(b, "i / %lld %% %lld", a, n); return;
    case IX_DIV: buf_printf(b, "i / %lld", a); return;
    /* [B, n, a] from [n, B, a]: (o) * (B a) + (b) * a + q */
    case IX_FROM_GEMM:
        buf_printf(b, "(i / %lld %% %lld) * (%s * %lld) + i / %lld * %lld + i %% %lld", a, n, B, a,
                   n * a, a, a);
        return;
    /* [n, B, a] from [B, n, a]: (b) * (n a) + (o) * a + q */
    case IX_TO_GEMM:
        buf_printf(b, "i %% (%s * %lld) / %lld * %lld + i / (%s * %lld) * %lld + i %% %lld", B,
                   a, a, n * a, B, a, a, a);
        return;
    /* [B, a, n] from [B, n, a]: (s) * (a n) + (c) * a + r, i = (s a + r) n + c */
    case IX_TRANSPOSE:
        buf_printf(b, "i / %lld * %lld + i %% %lld * %lld + i / %lld %% %lld", a * n, a * n, n, a,
                   n, a);
        return;
    /* [B, n, a] from [B, a]: (s) * a + i % a */
    case IX_SPREAD: buf_printf(b, "i / %lld * %lld + i %% %lld", a * n, a, a); return;
    /* [B, P, n, a] from [B, P, n - 2c, a - 2c]: (q) * (n - 2c)(a - 2c) + (row - c) * (a - 2c)
     * + column - c */
    case IX_UNPAD:
        buf_printf(b, "i / %lld * %lld + (i %% %lld / %lld - %lld) * %lld + i %% %lld - %lld", a * n,
                   (a - 2 * ix.c) * (n - 2 * ix.c), a * n, a, (long long)ix.c, a - 2 * ix.c, a,
                   (long long)ix.c);
        return;
    /* [B, P, n, a] from [B, P, n + 2c, a + 2c]: (q) * (n + 2c)(a + 2c) + (row + c) * (a + 2c)
     * + column + c */
    case IX_PAD_IN:
        buf_printf(b, "i / %lld * %lld + (i %% %lld / %lld + %lld) * %lld + i %% %lld + %lld", a * n,
                   (a + 2 * ix.c) * (n + 2 * ix.c), a * n, a, (long long)ix.c, a + 2 * ix.c, a,
                   (long long)ix.c);
        return;
    /* [B, a] from [B, n]: (s) * n + c + i % a */
    case IX_SLICE:
        if (n == 0)   /* (no sample stride: a parameter's rows) */
            buf_printf(b, "i %% %lld %c %lld", a, ix.c < 0 ? '-' : '+',
                       (long long)(ix.c < 0 ? -ix.c : ix.c));
        else
            buf_printf(b, "i / %lld * %lld %c %lld + i %% %lld", a, n, ix.c < 0 ? '-' : '+',
                       (long long)(ix.c < 0 ? -ix.c : ix.c), a);
        return;
    }
    unreachable();
}

/* C's precedence of what an Expr node prints as: a child binding more loosely than its
 * place allows is parenthesized. */
enum { P_SELECT = 1, P_COMPARE, P_ADD, P_MUL, P_CAST, P_PRIMARY };

static int expr_prec(const Expr *x)
{
    switch (x->kind) {
    case X_SELECT:
    case X_PICK: return P_SELECT;
    case X_LT:
    case X_LE:
    case X_HEAD: return P_COMPARE;
    case X_INSIDE: return P_PRIMARY;
    case X_PLACE: return P_CAST;
    case X_ADD:
    case X_SUB: return P_ADD;
    case X_MUL:
    case X_DIV: return P_MUL;
    case X_CAST: return P_CAST;
    default: return P_PRIMARY;
    }
}

typedef struct Printer {
    Buf *b;
    int cuda;
    void (*put)(Buf *b, int k, void *ctx);
    void *ctx;
} Printer;

/* x where a node of precedence `need` or tighter may stand without parentheses */
static void put_expr(const Printer *pr, const Expr *x, int need)
{
    static const char *const fn[] = {
        [FN_GELU] = "rt_gelu", [FN_GELU_TANH] = "rt_gelu_tanh", [FN_SILU] = "rt_silu",
        [FN_TANH] = "rt_tanhf", [FN_SIGMOID] = "rt_sigmoidf", [FN_GELU_BWD] = "rt_gelu_bwd",
        [FN_GELU_TANH_BWD] = "rt_gelu_tanh_bwd", [FN_SILU_BWD] = "rt_silu_bwd"};
    static const char *const op[] = {[X_ADD] = " + ", [X_SUB] = " - ", [X_MUL] = " * ",
                                     [X_DIV] = " / ", [X_LT] = " < ", [X_LE] = " <= "};
    Buf *b = pr->b;
    const char *e = pr->cuda ? "" : "e->";   /* the kernel's arguments, or rt_exec's */
    int prec = expr_prec(x), paren = prec < need;
    if (paren)
        buf_puts(b, "(");
    switch (x->kind) {
    case X_ARG: pr->put(b, x->arg, pr->ctx); break;
    case X_CONST: {
        char *f = float_literal(x->f);
        buf_puts(b, f);
        free(f);
        break;
    }
    case X_CAST:
        buf_puts(b, "(float)");
        put_expr(pr, x->a[0], P_CAST);
        break;
    case X_ADD:
    case X_SUB:
    case X_MUL:
    case X_DIV:
    case X_LT:
    case X_LE:   /* left to right: the right operand of the same precedence in parentheses */
        put_expr(pr, x->a[0], prec);
        buf_puts(b, op[x->kind]);
        put_expr(pr, x->a[1], prec + 1);
        break;
    case X_SELECT:   /* a select inside another in parentheses */
        put_expr(pr, x->a[0], P_COMPARE);
        buf_puts(b, " ? ");
        put_expr(pr, x->a[1], P_COMPARE);
        buf_puts(b, " : ");
        put_expr(pr, x->a[2], P_COMPARE);
        break;
    case X_FN:
        buf_printf(b, "%s(", fn[x->fn]);
        put_expr(pr, x->a[0], 0);
        if (x->a[1]) {
            buf_puts(b, ", ");
            put_expr(pr, x->a[1], 0);
        }
        buf_puts(b, ")");
        break;
    case X_TRAIN: buf_printf(b, "%strain", e); break;
    case X_UNIFORM:   /* (a row's draw: at its first element) */
        buf_printf(b, "rt_uniform(%srng_key ^ 0x%016llxull, "
                      "rt_drop_index((uint64_t)%s, %lld, %srng_part))",
                   e, (unsigned long long)x->key,
                   x->m ? xasprintf("(i / %lld * %lld)", (long long)x->n, (long long)x->n) : "i",
                   (long long)x->n, e);
        break;
    case X_HEAD: buf_printf(b, "i %% %lld < %lld", (long long)x->n, (long long)x->m); break;
    case X_PLACE: buf_printf(b, "(float)(i %% %lld)", (long long)x->n); break;
    case X_INSIDE: {   /* rt_inside(row - pad, column - pad, rows - 2 pad, columns - 2 pad) */
        long long r = x->n, c = x->m, p = x->pad;
        buf_printf(b, "rt_inside(i %% %lld / %lld - %lld, i %% %lld - %lld, %lld, %lld)", r * c, c, p, c,
                   p, r - 2 * p, c - 2 * p);
        break;
    }
    case X_PICK:   /* i / n % m == 0 ? list[0] : i / n % m == 1 ? list[1] : ... list[m - 1] */
        for (int64_t k = 0; k < x->m; k++) {
            char *f = float_literal(x->list[k]);
            if (k + 1 < x->m)
                buf_printf(b, "i / %lld %% %lld == %lld ? %s : ", (long long)x->n, (long long)x->m,
                           (long long)k, f);
            else
                buf_puts(b, f);
            free(f);
        }
        break;
    default: unreachable();
    }
    if (paren)
        buf_puts(b, ")");
}

void expr_print(Buf *b, const Expr *x, int cuda, void (*put)(Buf *b, int k, void *ctx), void *ctx)
{
    Printer pr = {b, cuda, put, ctx};
    put_expr(&pr, x, 0);
}

int kernel_tensors(const Instr *in, Tensor **t, char *w, int max)
{
    Uses u = {0};
    kernel_uses(&u, in);
    if (u.n > max)
        die("kernel %d touches %d tensors (at most %d)", in->id, u.n, max);
    for (int i = 0; i < u.n; i++) {
        t[i] = u.t[i];
        w[i] = u.w[i];
    }
    free(u.t);
    free(u.w);
    return u.n;
}

/* A fused kernel's comment up to its origin, "/" "* NAME: WHAT\n *     from ORIGIN", WHAT
 * filled within WRAP_COLS; the caller goes on with the comment. */
void kernel_head(Buf *b, const char *name, const Instr *in)
{
    char *head = xasprintf("%s: %s", name, in->what);
    buf_puts(b, "/*");
    buf_words(b, 2, " *    ", head, 0);
    free(head);
    buf_printf(b, "\n *     from %s", in->origin);
}
