/* emit_cuda.c: the fused elementwise kernels of a Program as CUDA, for NVRTC.
 *
 * The same IR the C emitter prints (emit_c.c), one __global__ function per fused
 * loop: each thread takes elements of the index space by a grid-stride loop and
 * evaluates the same expressions, reading the same tensors at the same indices; the
 * device helpers (templates/cuda/prelude.cuh) are the twins of trainc_rt.h's. Tensors
 * arrive as pointers (the host adds the plan's offsets); `B`, `train`, `rng_key` (and
 * `rng_part` where dropout draws) are arguments where the C code reads them from
 * rt_exec. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ir.h"

/* What an op's operands read, for expr_print's callback: the kernel's tensors t[0 .. n),
 * those with vec[q] in lanes of registers in the vector loop (lanes). */
typedef struct Reads {
    const Graph *g;
    const EwOp *op;
    Tensor **t;
    const int *vec;
    int n, lanes;
    int uses_i;              /* set where an operand was read at (an index of) i */
} Reads;

static void put_operand(Buf *b, int j, void *ctx)
{
    Reads *r = ctx;
    const Operand *o = &r->op->arg[j];
    int v = 0;
    for (int q = 0; q < r->n && r->lanes && o->t; q++)
        v |= r->t[q] == o->t && r->vec[q];
    r->uses_i |= o->t && !v;
    if (v)
        buf_printf(b, "r_%s.v[l]", o->t->name);
    else if (o->t && tensor_half(r->g, o->t)) {   /* act_t: converted by rt_ld */
        int moved = ix_moved(o->ix);
        buf_printf(b, "rt_ld(%s + %s", o->t->name, moved ? "(" : "");
        index_print(b, o->ix, 1);
        buf_puts(b, moved ? "))" : ")");
    } else if (o->t) {
        buf_printf(b, "%s[", o->t->name);
        index_print(b, o->ix, 1);
        buf_puts(b, "]");
    } else
        buf_printf(b, "v%d", o->val);
}

/* The fused ops of one element i. In the vector loop (`lanes`), the tensors read or
 * written at i are lane l of the rt_vec registers r_NAME / w_NAME. Returns whether the
 * ops read i itself (an operand at an index of i, dropout's counter). */
static int emit_body(Buf *b, const Graph *g, Instr *in, Tensor **t, const int *vec, int n,
                     const char *ind, int lanes)
{
    int uses_i = 0;
    for (int k = 0; k < in->n_ops; k++) {
        EwOp *op = &in->ops[k];
        Buf line = {0};
        Reads r = {g, op, t, vec, n, lanes, 0};
        buf_printf(&line, "float v%d = ", k);
        expr_print(&line, op->expr, 1, put_operand, &r);
        buf_puts(&line, ";");
        uses_i |= r.uses_i || expr_reads_i(op->expr);
        buf_commented(b, ind, line.s, op->what);
        free(line.s);
        for (int q = 0; q < in->n_writes; q++)
            if (in->writes[q] == op->out) {
                if (lanes)
                    buf_printf(b, "%sw_%s.v[l] = v%d;\n", ind, op->out->name, k);
                else if (tensor_half(g, op->out))
                    buf_printf(b, "%srt_st(%s + i, v%d);\n", ind, op->out->name, k);
                else
                    buf_printf(b, "%s%s[i] = v%d;\n", ind, op->out->name, k);
                if (in->fp8_fold && op->out == in->fp8_fold_t)   /* fp8-mixed: as stored */
                    buf_printf(b, "%samax_m = fmaxf(amax_m, rt_fp8_stored_abs(v%d));\n", ind, k);
            }
    }
    return uses_i;
}

/* The kernel's comment under its heading: its tensors' shapes, lines under 90 wide. */
static void kernel_shapes(Buf *b, Tensor **t, int n)
{
    buf_puts(b, "\n *    ");
    for (int q = 0, col = 6; q < n; q++) {
        char *sh = tensor_shape_text(t[q]);
        int w = (int)(strlen(t[q]->name) + strlen(sh)) + 3;
        if (q && col + w > 90) {
            buf_puts(b, "\n *    ");
            col = 6;
        }
        buf_printf(b, " %s %s%s", t[q]->name, sh, q + 1 < n ? "," : "");
        col += w;
        free(sh);
    }
    buf_puts(b, " */\n");
}

/* Whether instruction in reads tensor t through one of its operations. */
static int ops_read(const Instr *in, const Tensor *t)
{
    for (int k = 0; k < in->n_ops; k++)
        for (int j = 0; j < in->ops[k].n_arg; j++)
            if (in->ops[k].arg[j].t == t)
                return 1;
    return 0;
}

/* The kernel's signature: its tensors (w: written), then the launch's scalars. */
static void kernel_signature(Buf *b, const Graph *g, Instr *in, const char *name, Tensor **t,
                             const char *w, int n)
{
    Buf sig = {0};
    buf_printf(&sig, "extern \"C\" __global__ void %s(", name);
    for (int q = 0; q < n; q++) {
        /* pointers to the same storage (an in-place update, or a loop the memory
         * plan runs over its dead input) must not be __restrict__ */
        Tensor *bq = tensor_base(t[q]);
        int both = w[q] && ops_read(in, t[q]);
        for (int o = 0; o < n; o++)
            if (o != q && tensor_base(t[o]) == bq)
                both = 1;
        buf_printf(&sig, "%s%s%s *%s%s", q ? ", " : "", w[q] ? "" : "const ",
                   tensor_half(g, t[q]) ? "act_t" : c_type(t[q]->dtype), both ? "" : "__restrict__ ",
                   t[q]->name);
    }
    /* dropout's rank part (rt_drop_index) only where a mask is drawn: the launch always
     * passes it, a kernel without one leaves it out (the arguments past its own are not
     * read), so the kernels of models without dropout stay as they were */
    int part = 0;
    for (int k = 0; k < in->n_ops; k++)
        part |= in->ops[k].tag == EW_DROPOUT;
    if (in->fp8_fold)   /* fp8-mixed: the slot its written operand's maximum goes to */
        buf_puts(&sig, n ? ", unsigned *amax_slot" : "unsigned *amax_slot");
    buf_printf(&sig, "%sint64_t B, int64_t n, uint64_t rng_key, int train%s)",
               n || in->fp8_fold ? ", " : "", part ? ", uint64_t rng_part" : "");
    buf_wrapped(b, "", sig.s);
    buf_puts(b, "{\n");
    free(sig.s);
}

/* The fp32 (and act_t) tensors read or written at i go through vector accesses
 * (rt_vec, common.cuh) when all of them are 16-byte aligned: 4 elements a thread, 8
 * when one of them is stored in 16 bits, so that each access moves 16 bytes (two for
 * the floats). The rest (broadcast operands like a bias, raw inputs) is read element
 * by element. Sets vec[q] for those tensors; returns the lanes, 0 for none. */
static int vector_operands(const Graph *g, const Instr *in, Tensor **t, int n, int *vec)
{
    int nvec = 0, lanes = 4;
    for (int q = 0; q < n; q++) {
        if (t[q]->dtype != RT_F32)
            continue;
        int at_i = 1;
        for (int k = 0; k < in->n_ops; k++)
            for (int j = 0; j < in->ops[k].n_arg; j++)
                if (in->ops[k].arg[j].t == t[q] && ix_moved(in->ops[k].arg[j].ix))
                    at_i = 0;
        vec[q] = at_i;
        nvec += at_i;
        if (at_i && tensor_half(g, t[q]))
            lanes = 8;
    }
    return nvec ? lanes : 0;
}

/* The vector loop over the first n & ~(lanes - 1) elements, where every vec[] tensor
 * is 16-byte aligned. */
static void vector_loop(Buf *b, const Graph *g, Instr *in, Tensor **t, const char *w, const int *vec,
                        int n, int lanes)
{
    Buf cond = {0};
    buf_puts(&cond, "if (rt_aligned16(");
    for (int q = 0, c = 0; q < n; q++)
        if (vec[q])
            buf_printf(&cond, "%s%s", c++ ? ", " : "", t[q]->name);
    buf_puts(&cond, ")) {");
    buf_wrapped(b, "    ", cond.s);
    free(cond.s);
    buf_printf(b, "        done = n & ~(int64_t)%d;\n"
                  "        for (int64_t q = first; q < n / %d; q += stride) {\n", lanes - 1, lanes);
    for (int q = 0; q < n; q++) {
        if (!vec[q])
            continue;
        if (!w[q] || ops_read(in, t[q]))
            buf_printf(b, "            const rt_vec<%d> r_%s = rt_ldv<%d>(%s + %d * q);\n", lanes,
                       t[q]->name, lanes, t[q]->name, lanes);
        if (w[q])
            buf_printf(b, "            rt_vec<%d> w_%s;\n", lanes, t[q]->name);
    }
    Buf lane = {0};
    int uses_i = emit_body(&lane, g, in, t, vec, n, "                ", 1);
    buf_printf(b, "#pragma unroll\n            for (int l = 0; l < %d; l++) {\n", lanes);
    if (uses_i)   /* a broadcast operand, or dropout's counter */
        buf_printf(b, "                const int64_t i = %d * q + l;\n", lanes);
    buf_puts(b, lane.s);
    free(lane.s);
    buf_puts(b, "            }\n");
    for (int q = 0; q < n; q++)
        if (vec[q] && w[q])
            buf_printf(b, "            rt_stv(%s + %d * q, w_%s);\n", t[q]->name, lanes, t[q]->name);
    buf_puts(b, "        }\n    }\n");
}

void cuda_kernel(Buf *b, const Graph *g, Instr *in, const char *name)
{
    Tensor *t[64];
    char w[64];
    int n = kernel_tensors(in, t, w, 64);
    kernel_head(b, name, in);
    kernel_shapes(b, t, n);
    kernel_signature(b, g, in, name, t, w, n);
    int vec[64] = {0};
    int lanes = vector_operands(g, in, t, n, vec);
    buf_puts(b, "    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
                "    const int64_t stride = (int64_t)gridDim.x * blockDim.x;\n"
                "    int64_t done = 0;\n");
    if (in->fp8_fold)
        buf_printf(b, "    float amax_m = 0.0f; /* fp8-mixed: %s's maximum as stored */\n",
                   in->fp8_fold_t->name);
    if (lanes)
        vector_loop(b, g, in, t, w, vec, n, lanes);
    buf_puts(b, "    for (int64_t i = done + first; i < n; i += stride) {\n");
    emit_body(b, g, in, t, vec, n, "        ", 0);
    buf_puts(b, "    }\n");
    if (in->fp8_fold)   /* (every thread gets here: the block's maximum, then the slot's) */
        buf_puts(b, "    rt_fp8_amax_out(amax_m, amax_slot);\n");
    buf_puts(b, "}\n\n");
}

/* ---- the template instances a program needs ----------------------------------------- */

/* Integer argument k of a call whose template takes it as a compile-time constant. */
static long long num(const Instr *in, int k)
{
    if (in->args[k].kind != ARG_INT)
        die("call %s: argument %d is not a constant", call_name(in->call), k + 1);
    return (long long)in->args[k].i;
}

/* A template instance: the call kind it serves and its constants (templates/cuda/). */
typedef struct {
    int call;            /* CALL_*; -1: none */
    long long a, b, c;   /* rows (layernorm, rmsnorm, embedding); classes, row stride
                            (cross entropy); T, head width, causal (attention) */
    long long g;         /* attention with kv_heads: query heads a key/value head */
    double cap;          /* attention's soft-cap (its own kernels: RT_ATTENTION_EXT_CAP_*), or 0 */
    int pk;              /* attention over packed rows (positions: RT_ATTENTION_EXT_PK_*) */
} Instance;

/* The template instance a call needs (call -1 for none). */
static Instance instance_of(const Instr *in)
{
    Instance x = {.call = in->call};
    switch (in->call) {
    case CALL_LAYERNORM_FWD: x.a = num(in, 7); break;
    case CALL_LAYERNORM_BWD: x.a = num(in, 10); break;
    case CALL_RMSNORM_FWD: x.a = num(in, 5); break;
    case CALL_RMSNORM_BWD: x.a = num(in, 8); break;
    case CALL_CROSS_ENTROPY: x.a = num(in, 4); x.b = num(in, 5); break;
    case CALL_CROSS_ENTROPY_LS: x.a = num(in, 4); x.b = num(in, 5); break;
    case CALL_DPO: x.a = num(in, 7); x.b = num(in, 8); break;   /* C, ld */
    case CALL_HEAD_CE:   /* a chunked head: the loss kernel it calls */
        x.call = in->args[12].f > 0 ? CALL_CROSS_ENTROPY_LS : CALL_CROSS_ENTROPY;
        x.a = num(in, 10), x.b = num(in, 11);
        break;
    /* T, the head width (d / H), causal */
    case CALL_ATTENTION_FWD:
        x.a = num(in, 4), x.b = num(in, 5) / num(in, 6), x.c = num(in, 7);
        break;
    case CALL_ATTENTION_BWD:
        x.a = num(in, 6), x.b = num(in, 7) / num(in, 8), x.c = num(in, 9);
        break;
    case CALL_EMBEDDING_FWD:
    case CALL_EMBEDDING_BWD: x.a = num(in, 5); break;
    /* after its 5 tensors: B, T, d, H, KV, causal; then the cap, last the positions */
    case CALL_ATTENTION_EXT_FWD:
        x.a = num(in, 6), x.b = num(in, 7) / num(in, 8), x.c = num(in, 10);
        x.g = num(in, 8) / num(in, 9), x.cap = in->args[in->n_args - 2].f;
        x.pk = in->args[in->n_args - 1].kind != ARG_NULL;
        break;
    case CALL_ATTENTION_EXT_BWD:   /* after its 9 tensors */
        x.a = num(in, 10), x.b = num(in, 11) / num(in, 12), x.c = num(in, 14);
        x.g = num(in, 12) / num(in, 13), x.cap = in->args[in->n_args - 2].f;
        x.pk = in->args[in->n_args - 1].kind != ARG_NULL;
        break;
    default: x.call = -1;
    }
    return x;
}

/* The query rows of attention.cuh's backward tile for heads hd wide (16 rt_att_br(hd);
 * heads wider than 128 take the tensor-core kernels alone, 64 rows a tile):
 * attention_ext_*'s tile holds rows of each head of a group, so a group takes at most
 * that many query heads. */
static int64_t att_tile_rows(int64_t hd) { return hd > 128 ? 64 : 16 * (hd > 64 ? 1 : 2); }

/* the widest head attention.cuh has kernels for: 128, or 256 (a multiple of 16) on the
 * tensor cores, which take the Llama-family options' calls (ext) in 16-bit activations */
static int att_width_fits(const Program *p, int64_t hd, int ext)
{
    return hd <= 128 || (ext && p->g->act16 && hd <= 256 && hd % 16 == 0);
}

/* One line per distinct instance, e.g. "RT_LAYERNORM_FWD(128)": the kernels whose
 * shapes are compile-time constants (templates/cuda/), into line[160] ("" for none).
 * attention.cuh's kernels take heads up to 128 wide, 256 on the tensor cores
 * (att_width_fits); a wider head gets a comment instead, and the runtime says so if the
 * model runs on a GPU. */
static void instance_line(Program *p, const Instance *x, char *line)
{
    int fwd = x->call == CALL_LAYERNORM_FWD || x->call == CALL_EMBEDDING_FWD ||
              x->call == CALL_ATTENTION_FWD || x->call == CALL_ATTENTION_EXT_FWD ||
              x->call == CALL_RMSNORM_FWD;
    static const char *const exts[2][2] = {{"EXT_", "EXT_PK_"}, {"EXT_CAP_", "EXT_CAP_PK_"}};
    const char *ext = x->call == CALL_ATTENTION_EXT_FWD || x->call == CALL_ATTENTION_EXT_BWD
                          ? exts[x->cap > 0][x->pk] : "";
    const char *fb = fwd ? "FWD" : "BWD";
    line[0] = 0;
    switch (x->call) {
    case CALL_LAYERNORM_FWD:
    case CALL_LAYERNORM_BWD: snprintf(line, 160, "RT_LAYERNORM_%s(%lld)", fb, x->a); return;
    case CALL_RMSNORM_FWD:
    case CALL_RMSNORM_BWD: snprintf(line, 160, "RT_RMSNORM_%s(%lld)", fb, x->a); return;
    case CALL_EMBEDDING_FWD:
    case CALL_EMBEDDING_BWD: snprintf(line, 160, "RT_EMBEDDING_%s(%lld)", fb, x->a); return;
    case CALL_CROSS_ENTROPY:
        snprintf(line, 160, "RT_CROSS_ENTROPY(%lld, %lld)", x->a, x->b);
        return;
    case CALL_CROSS_ENTROPY_LS:
        snprintf(line, 160, "RT_CROSS_ENTROPY_LS(%lld, %lld)", x->a, x->b);
        return;
    case CALL_DPO: snprintf(line, 160, "RT_DPO_ROWS(%lld, %lld)", x->a, x->b); return;
    case CALL_ATTENTION_FWD:
    case CALL_ATTENTION_BWD:
    case CALL_ATTENTION_EXT_FWD:
    case CALL_ATTENTION_EXT_BWD:
        if (!att_width_fits(p, x->b, ext[0] != 0)) {
            snprintf(line, 160, "/* RT_ATTENTION_%s%s: no kernel for heads %lld wide */", ext, fb,
                     x->b);
            p->cuda_unsupported = xasprintf(
                "attention heads %lld wide: the GPU kernels take up to 128, or 256 (a multiple "
                "of 16) with bf16-mixed or fp16-mixed and rope, kv_heads, qk_norm or a window",
                x->b);
        } else if (x->g > att_tile_rows(x->b)) {
            snprintf(line, 160, "/* RT_ATTENTION_%s%s: no kernel for %lld query heads a key/value "
                                "head */", ext, fb, x->g);
            p->cuda_unsupported = xasprintf("attention with %lld query heads a key/value head "
                                            "(heads %lld wide): the GPU kernels take up to %d",
                                            x->g, x->b, (int)att_tile_rows(x->b));
        } else
            snprintf(line, 160, "RT_ATTENTION_%s%s(%lld, %lld, %lld)", ext, fb, x->a, x->b, x->c);
        return;
    }
}

/* What an instance's constants are (the templates' parameter names, said), or "". */
static char *instance_doc(const Instance *x)
{
    switch (x->call) {
    case CALL_LAYERNORM_FWD:
    case CALL_LAYERNORM_BWD:
    case CALL_RMSNORM_FWD:
    case CALL_RMSNORM_BWD:
    case CALL_EMBEDDING_FWD:
    case CALL_EMBEDDING_BWD: return xasprintf("rows of %lld", x->a);
    case CALL_CROSS_ENTROPY:
    case CALL_CROSS_ENTROPY_LS:
    case CALL_DPO:
        return x->a == x->b ? xasprintf("%lld classes", x->a)
                            : xasprintf("%lld classes, rows %lld apart", x->a, x->b);
    case CALL_ATTENTION_FWD:
    case CALL_ATTENTION_BWD:
    case CALL_ATTENTION_EXT_FWD:
    case CALL_ATTENTION_EXT_BWD:
        if (x->b > 128 || x->g > att_tile_rows(x->b))
            return xstrdup("");
        return xasprintf("T %lld, heads %lld wide, %s%s%s", x->a, x->b,
                         x->c ? "causal" : "not causal", x->cap > 0 ? ", scores soft-capped" : "",
                         x->pk ? ", packed rows" : "");
    }
    return xstrdup("");
}

/* One line per template instance: what its constants are, where it is first called and
 * how many calls of the training step share it. */
static void instance(Program *p, Buf *b, Buf *seen, const Instr *in)
{
    char line[160], other[160];
    Instance x = instance_of(in);
    instance_line(p, &x, line);
    if (!*line)
        return;
    char key[168];
    snprintf(key, sizeof key, "|%s|", line);
    if (seen->s && strstr(seen->s, key))
        return;
    buf_puts(seen, key);
    int calls = 0;
    for (int i = 0; i < p->n_ins; i++)
        if (!p->ins[i]->dead && p->ins[i]->kind == I_CALL) {
            Instance y = instance_of(p->ins[i]);
            instance_line(p, &y, other);
            calls += !strcmp(line, other);
        }
    char *doc = instance_doc(&x);
    char *c = calls > 1 ? xasprintf("%s%sfirst %s; %d calls a training step", doc,
                                    *doc ? "; " : "", in->origin, calls)
                        : xasprintf("%s%s%s", doc, *doc ? "; " : "", in->origin);
    free(doc);
    buf_comment(b, "", c);   /* above it, always: the list reads the same way down */
    buf_printf(b, "%s\n", line);
    free(c);
}

/* The bytes a batch row of the transformed copy of q and k that the Hopper kernels read
 * where qk_norm or rope is on (cuda_ops.c's att90x_*: 16-bit activations, heads 64 or
 * 128 wide): T x (H + KV) x hd 16-bit values; 0 where they cannot be taken. t0: the
 * call's first integer (B), after its tensors. */
static int64_t ext_prep90_row_bytes(const Program *p, const Instr *in, int t0)
{
    int64_t T = num(in, t0 + 1), H = num(in, t0 + 3), KV = num(in, t0 + 4), hd = num(in, t0 + 2) / H;
    int qk_norm = in->args[1].kind != ARG_NULL || in->args[2].kind != ARG_NULL;
    if (!p->g->act16 || (hd != 64 && hd != 128) || (!qk_norm && in->args[t0 + 7].f <= 0.0))
        return 0;
    return 2 * T * (H + KV) * hd;
}

/* rt_cu_attention_ext_bwd's scratch a batch row (runtime/cuda_ops.c's att_ext_bwd_grids):
 * D [H, T] floats and, with qk_norm, hd doubles for each block of its two kernels, whose
 * tiles (attention.cuh) are 16 rt_att_br(hd) queries (the query side: that many rows
 * of the H / KV heads of a group) and as many keys; on sm_90a (att90x_carve) the
 * transformed copy of q and k, with qk_norm hd doubles for each block (H, then KV, of
 * ceil(T / 128) tiles), then D */
static int64_t ext_scratch_row_bytes(const Program *p, const Instr *in)
{
    int64_t T = num(in, 10), H = num(in, 12), KV = num(in, 13), hd = num(in, 11) / H;
    int64_t rows = att_tile_rows(hd), np = rows / (H / KV);
    if (np < 1)   /* the runtime refuses such a group: nothing to plan */
        np = 1;
    int64_t gq = (T + np - 1) / np, gk = (T + rows - 1) / rows;
    int qk_norm = in->args[1].kind != ARG_NULL;
    int64_t sm80 = 4 * H * T + (qk_norm ? 8 * hd * KV * (gq + gk) : 0);
    int64_t qk = ext_prep90_row_bytes(p, in, 9), tiles90 = (T + 127) / 128;
    int64_t sm90 = qk + 4 * H * T + (qk && qk_norm ? 8 * hd * (H + KV) * tiles90 : 0);
    return sm80 > sm90 ? sm80 : sm90;
}

/* fp8-mixed: a marked GEMM's FP8 copies of its operands, the bytes a batch row (an
 * operand with a dimension of rows per sample; the weight's part is not per row:
 * cuda_fp8_weight_bytes). A backward GEMM's A, dy, twice: a pair of them
 * (cuda_fp8_pair_first) keeps dy in both layouts. */
static int64_t fp8_row_bytes(const Instr *in)
{
    const Arg *M = &in->args[2], *N = &in->args[3], *K = &in->args[4];
    int64_t r = 0;
    if (M->kind == ARG_ROWS || K->kind == ARG_ROWS)   /* A: M x K */
        r += (in->args[1].i ? 1 : 2) * M->i * K->i;
    if (N->kind == ARG_ROWS || K->kind == ARG_ROWS)   /* B: N x K */
        r += N->i * K->i;
    return r;
}

int64_t cuda_fp8_weight_bytes(const Program *p)
{
    int64_t most = 0;
    for (int i = 0; i < p->n_ins; i++) {
        const Instr *in = p->ins[i];
        if (in->dead || in->kind != I_GEMM || !in->fp8)
            continue;
        const Arg *M = &in->args[2], *N = &in->args[3], *K = &in->args[4];
        if (M->kind != ARG_ROWS && K->kind != ARG_ROWS && M->i * K->i > most)
            most = M->i * K->i;
        if (N->kind != ARG_ROWS && K->kind != ARG_ROWS && N->i * K->i > most)
            most = N->i * K->i;
    }
    return most;
}

/* A marked GEMM of a linear layer's backward: A is dy, op(B) untransposed */
static int fp8_bwd(const Instr *in)
{
    return !in->dead && in->kind == I_GEMM && in->fp8 && in->args[1].kind == ARG_INT &&
           in->args[1].i == 0 && in->args[6].kind == ARG_TENSOR;
}

int cuda_fp8_pair_first(const Program *p, int i, int to)
{
    const Instr *a = p->ins[i];
    if (!fp8_bwd(a))
        return 0;
    for (int j = i + 1; j < to; j++) {
        const Instr *b = p->ins[j];
        if (b->dead)
            continue;
        if (fp8_bwd(b))
            return b->args[6].t == a->args[6].t;
        /* the hooks take no scratch and write no activation gradient */
        if (b->kind != I_CALL || (b->call != CALL_GRAD_BEGIN && b->call != CALL_GRAD_READY))
            return 0;
    }
    return 0;
}

/* The two dimensions of a GEMM operand as stored, as arguments (rows of a batch row:
 * ARG_ROWS), and its row stride: whether the call reads tensor t whole, rows packed
 * (t's elements a batch row are the product, exactly one dimension per batch row) */
static int reads_whole(const Arg *r, const Arg *c, const Arg *ld, const Tensor *t)
{
    if ((r->kind == ARG_ROWS) == (c->kind == ARG_ROWS) || r->kind == ARG_TENSOR ||
        c->kind == ARG_TENSOR)
        return 0;
    return r->i * c->i == t->numel && ld->kind == c->kind && ld->i == c->i;
}

/* A tensor whose maximum a writer may fold: an activation or gradient, 16-bit in the
 * arena (an FP8 operand), laid out [B, ...] with packed rows */
static int foldable(const Graph *g, Tensor *t)
{
    return t && tensor_half(g, t) && !t->layout && !t->ld;
}

/* The last writer before p->ins[i] of t's storage (NULL: none in p) */
static Instr *last_writer(const Program *p, int i, Tensor *t)
{
    Tensor *base = tensor_base(t);
    for (int j = i - 1; j >= 0; j--) {
        Instr *w = p->ins[j];
        if (w->dead)
            continue;
        for (int k = 0; k < w->n_writes; k++)
            if (tensor_base(w->writes[k]) == base)
                return w;
    }
    return NULL;
}

/* The output a marked GEMM writes whole through our epilogue kernel (rt_bias_act with
 * an activation, rt_dgelu; cuda_blas.c folds it after cuBLASLt where that kernel does
 * not run): its tensor, or NULL */
static Tensor *epilogue_output(const Instr *w)
{
    if (w->kind != I_GEMM || !w->fp8 || w->args[0].kind != ARG_INT || w->args[0].i)
        return NULL;
    const Arg *D = w->call == CALL_GEMM_BIAS && w->args[14].i != RT_EPI_NONE ? &w->args[15]
                   : w->call == CALL_GEMM_DGELU                            ? &w->args[10]
                                                                           : NULL;
    if (!D || D->kind != ARG_TENSOR)
        return NULL;
    return reads_whole(&w->args[2], &w->args[3], &w->args[11], D->t) ? D->t : NULL;
}

/* The output a norm's or the GLU's call writes whole (its kernels' fp8-mixed instances
 * fold its maximum: layernorm.cuh, glu.cuh), y forward or dx backward, or attention's
 * forward y (attention.cuh): its tensor, or NULL */
static Tensor *norm_output(const Instr *w)
{
    int o = -1, r = -1;   /* the output's argument, the rows' (d after them) */
    switch (w->kind == I_CALL ? w->call : -1) {
    case CALL_LAYERNORM_FWD: o = 3, r = 6; break;
    case CALL_RMSNORM_FWD: o = 2, r = 4; break;
    case CALL_LAYERNORM_BWD: o = 6, r = 9; break;
    case CALL_RMSNORM_BWD: o = 5, r = 7; break;
    case CALL_GLU_FWD: o = 1, r = 2; break;   /* y [rows, h] */
    case CALL_GLU_BWD: o = 2, r = 3; break;   /* dx [rows, 2h]: h after the rows */
    case CALL_ATTENTION_FWD: o = 2, r = 4; break;       /* y [B, T, d]: B, T, d after it */
    case CALL_ATTENTION_EXT_FWD: o = 4, r = 6; break;   /* qkv, qn, kn, lse, y, B, T, d */
    case CALL_ATTENTION_BWD: o = 4, r = 6; break;       /* dqkv [B, T, 3d]: B, T, d, H */
    case CALL_ATTENTION_EXT_BWD: o = 6, r = 10; break;  /* dqkv [B, T, (H + 2 KV) d / H] */
    default: return NULL;
    }
    const Arg *y = &w->args[o], *rows = &w->args[r], *d = &w->args[r + 1];
    if (w->call == CALL_ATTENTION_FWD || w->call == CALL_ATTENTION_EXT_FWD ||
        w->call == CALL_ATTENTION_BWD || w->call == CALL_ATTENTION_EXT_BWD) {   /* T, d: per row */
        if (y->kind != ARG_TENSOR || rows->kind != ARG_INT || d->kind != ARG_INT)
            return NULL;
        int64_t per = d->i;   /* a row's values: y's d; dqkv's q, k and v heads */
        if (w->call == CALL_ATTENTION_BWD)
            per = 3 * d->i;
        if (w->call == CALL_ATTENTION_EXT_BWD)
            per = d->i / w->args[r + 2].i * (w->args[r + 2].i + 2 * w->args[r + 3].i);
        return rows->i * per == tensor_base(y->t)->numel ? y->t : NULL;
    }
    if (y->kind != ARG_TENSOR || rows->kind != ARG_ROWS || d->kind != ARG_INT)
        return NULL;
    int64_t per = w->kind == I_CALL && w->call == CALL_GLU_BWD ? 2 * d->i : d->i;
    return rows->i * per == tensor_base(y->t)->numel ? y->t : NULL;
}

/* The slot (+ 1) of operand t of the marked GEMM p->ins[i], given to its writer where it
 * folds one: *next numbers a new one */
static int operand_slot(Program *p, int i, Tensor *t, int *next)
{
    if (!foldable(p->g, t))
        return 0;
    Instr *w = last_writer(p, i, t);
    if (!w)
        return 0;
    if (w->kind == I_EW) {
        if (w->fp8_fold)   /* (one tensor a kernel) */
            return tensor_base(w->fp8_fold_t) == tensor_base(t) ? w->fp8_fold : 0;
        for (int k = 0; k < w->n_ops; k++)
            for (int q = 0; q < w->n_writes; q++)
                if (w->writes[q] == w->ops[k].out && tensor_base(w->writes[q]) == tensor_base(t) &&
                    w->n == tensor_base(t)->numel && foldable(p->g, w->writes[q])) {
                    w->fp8_fold_t = w->writes[q];
                    return w->fp8_fold = ++*next;
                }
        return 0;
    }
    Tensor *out = w->kind == I_GEMM ? epilogue_output(w) : norm_output(w);
    if (out && tensor_base(out) == tensor_base(t))
        return w->fp8_out ? w->fp8_out : (w->fp8_out = ++*next);
    /* any other writer keeps the cast's pass over t: a GEMM whose output cuBLASLt writes
     * with no kernel of ours after it (no activation: its BIAS epilogue), a call not
     * listed above */
    return 0;
}

/* One program's slots from first: found GEMM by GEMM, then renumbered in the order of
 * their writers (so that a pass's are a range) */
static int program_slots(Program *p, int first)
{
    int next = 0;
    for (int i = 0; i < p->n_ins; i++) {
        Instr *in = p->ins[i];
        in->fp8_fold = in->fp8_a = in->fp8_b = in->fp8_out = 0;
        in->fp8_fold_t = NULL;
    }
    for (int i = 0; i < p->n_ins; i++) {
        Instr *in = p->ins[i];
        if (in->dead || in->kind != I_GEMM || !in->fp8 || in->args[0].kind != ARG_INT ||
            in->args[1].kind != ARG_INT)
            continue;
        int ta = (int)in->args[0].i, tb = (int)in->args[1].i;
        Tensor *A = in->args[6].kind == ARG_TENSOR ? in->args[6].t : NULL;
        Tensor *B = in->args[8].kind == ARG_TENSOR ? in->args[8].t : NULL;
        const Arg *M = &in->args[2], *N = &in->args[3], *K = &in->args[4];
        if (A && reads_whole(ta ? K : M, ta ? M : K, &in->args[7], A))
            in->fp8_a = operand_slot(p, i, A, &next);
        if (B && reads_whole(tb ? N : K, tb ? K : N, &in->args[9], B))
            in->fp8_b = operand_slot(p, i, B, &next);
    }
    int *renum = xcalloc((size_t)next + 1, sizeof *renum), n = 0;
    for (int i = 0; i < p->n_ins; i++) {
        Instr *in = p->ins[i];
        int own = in->fp8_fold ? in->fp8_fold : in->fp8_out;
        if (own && !renum[own])
            renum[own] = first + ++n;
    }
    for (int i = 0; i < p->n_ins; i++) {
        Instr *in = p->ins[i];
        in->fp8_fold = renum[in->fp8_fold];
        in->fp8_out = renum[in->fp8_out];
        in->fp8_a = renum[in->fp8_a];
        in->fp8_b = renum[in->fp8_b];
    }
    free(renum);
    p->fp8_first = first;
    p->fp8_slots = n;
    return n;
}

void cuda_fp8_slots(Program *p, Program *ev)
{
    if (!p->g->fp8)
        return;
    int n = program_slots(p, 0);
    p->fp8_all_slots = n + program_slots(ev, n);
}

void cuda_fp8_slot_range(const Program *p, int from, int to, int *first, int *n)
{
    int lo = 0, hi = 0;
    for (int i = from; i < to; i++) {
        const Instr *in = p->ins[i];
        int own = in->dead ? 0 : in->fp8_fold ? in->fp8_fold : in->fp8_out;
        if (own && (!lo || own < lo))
            lo = own;
        if (own > hi)
            hi = own;
    }
    *first = lo ? lo - 1 : 0;
    *n = lo ? hi - lo + 1 : 0;
}

int64_t cuda_scratch_row_bytes(const Program *p)
{
    int64_t most = 0;
    for (int i = 0; i < p->n_ins; i++) {
        const Instr *in = p->ins[i];
        if (!in->dead && in->kind == I_GEMM && in->fp8 && fp8_row_bytes(in) > most)
            most = fp8_row_bytes(in);
        if (in->dead || in->kind != I_CALL)
            continue;
        int64_t need = 0;
        if (in->call == CALL_ATTENTION_BWD)   /* T x H floats: D = rowsum(dy * y) */
            need = 4 * num(in, 6) * num(in, 8);
        else if (in->call == CALL_ATTENTION_EXT_BWD)
            need = ext_scratch_row_bytes(p, in);
        else if (in->call == CALL_ATTENTION_EXT_FWD)
            need = ext_prep90_row_bytes(p, in, 5);
        else if (in->call == CALL_DPO)   /* rt_cu_dpo's: 2 doubles and an int a row, 4
                                            doubles and 2 floats a pair, 2 doubles */
            need = 20 * num(in, 6) + 56;
        if (need > most)
            most = need;
    }
    return most;
}

extern const char *const tmpl_cuda_files[], *const tmpl_cuda_names[];

/* The templates that hold one kind of layer's kernels, and the host calls that launch
 * them: a model without such a call leaves its template out (NVRTC compiles less on a
 * cold start, a reader reads less). The others (reductions, the loss, the optimizer,
 * the epilogues' fallbacks, the batch gather) serve every model; fp8.cuh serves
 * fp8-mixed's. */
static const struct {
    const char *file;
    int calls[8];   /* CALL_*, ended by 0 (CALL_GEMM: never one of these) */
} tmpl_uses[] = {
    {"attention.cuh", {CALL_ATTENTION_FWD, CALL_ATTENTION_BWD, CALL_ATTENTION_EXT_FWD,
                       CALL_ATTENTION_EXT_BWD, CALL_ATTENTION_DECODE}},
    {"batchnorm.cuh", {CALL_BATCHNORM_FWD, CALL_BATCHNORM_BWD}},
    {"conv.cuh", {CALL_IM2COL, CALL_COL2IM, CALL_MAXPOOL_FWD, CALL_MAXPOOL_BWD, CALL_AVGPOOL_FWD,
                  CALL_AVGPOOL_BWD, CALL_GCONV_FWD, CALL_CONV_FWD}},
    {"decode.cuh", {CALL_ATTENTION_DECODE}},
    {"embedding.cuh", {CALL_EMBEDDING_FWD, CALL_EMBEDDING_BWD, CALL_POS_ROW_ADD}},
    {"grn.cuh", {CALL_GRN_FWD, CALL_GRN_BWD}},
    {"glu.cuh", {CALL_GLU_FWD, CALL_GLU_BWD, CALL_GLU_GATED_FWD, CALL_GLU_GATED_BWD}},
    {"moe.cuh", {CALL_MOE_DISPATCH_FWD, CALL_MOE_DISPATCH_BWD, CALL_MOE_COMBINE_FWD,
                 CALL_MOE_COMBINE_BWD}},
    {"layernorm.cuh", {CALL_LAYERNORM_FWD, CALL_LAYERNORM_BWD, CALL_RMSNORM_FWD, CALL_RMSNORM_BWD,
                       CALL_QK_NORM_FWD, CALL_QK_NORM_BWD}},
    /* the Hopper primitives: only attention's sm_90a kernels use them */
    {"sm90.cuh", {CALL_ATTENTION_FWD, CALL_ATTENTION_BWD, CALL_ATTENTION_EXT_FWD,
                  CALL_ATTENTION_EXT_BWD}},
    {"sm90_attention.cuh", {CALL_ATTENTION_FWD, CALL_ATTENTION_BWD, CALL_ATTENTION_EXT_FWD,
                            CALL_ATTENTION_EXT_BWD}},
    {"sm90_attention_bwd.cuh", {CALL_ATTENTION_BWD, CALL_ATTENTION_EXT_BWD}},
};

static int program_calls(const Program *p, int call)
{
    for (int i = 0; p && i < p->n_ins; i++)
        if (!p->ins[i]->dead && p->ins[i]->kind == I_CALL && p->ins[i]->call == call)
            return 1;
    return 0;
}

/* Does a program of the three (training's, validation's, the decode program's or NULL)
 * call one of the template's kernels? */
static int tmpl_needed(const char *file, const Program *p, const Program *ev, const Program *dec)
{
    if (!strcmp(file, "fp8.cuh"))   /* the FP8 GEMMs' casts: fp8-mixed only */
        return p->g->fp8;
    for (size_t i = 0; i < sizeof tmpl_uses / sizeof *tmpl_uses; i++) {
        if (strcmp(file, tmpl_uses[i].file))
            continue;
        for (int k = 0; k < 8 && tmpl_uses[i].calls[k]; k++)
            if (program_calls(p, tmpl_uses[i].calls[k]) ||
                program_calls(ev, tmpl_uses[i].calls[k]) ||
                program_calls(dec, tmpl_uses[i].calls[k]))
                return 1;
        return 0;
    }
    return 1;
}

/* The file's head: what it is, its precision's defines and the templates it needs
 * (inlined: k 0, the text trainc compiles; #included: k 1, the file it writes). */
static void file_head(Buf *o, int k, Program *p, Program *ev, Program *dec)
{
    buf_printf(o, "/* kernels_cuda.cu: generated by trainc %s from the spec \"%s\"; do not edit.\n"
                  " *\n * The model's kernels for NVRTC: the templates of templates/cuda/ (the\n"
                  " * runtime's GPU calls: GEMMs aside, every call of host.c lands in one of\n"
                  " * them; those of layers this model lacks left out), their instances for\n"
                  " * this model's shapes, then the fused elementwise kernels, the twins of\n"
                  " * kernels_cpu.c.%s */\n\n",
               TRAINC_VERSION, p->g->spec->name,
               k ? "\n *\n * trainc compiles it with the templates inlined. To compile it yourself, give\n"
                   " * NVRTC or nvcc trainc's templates/cuda/ as an include path (installed in\n"
                   " * PREFIX/lib/trainc/templates/cuda)." : "");
    if (p->g->act16)
        buf_printf(o, "/* %s-mixed: activations and their gradients are stored as %s (act_t,\n"
                      " * common.cuh); parameters, their gradients, optimizer state and the saved\n"
                      " * statistics stay fp32, and all arithmetic is fp32. */\n"
                      "#define RT_ACT_%s 1\n\n", half_name(p->g), half_name(p->g),
                   p->g->act16 == RT_PREC_BF16 ? "BF16" : "F16");
    if (p->g->fp8)   /* the producers' instances that fold the FP8 casts' maxima */
        buf_puts(o, "/* fp8-mixed: the kernels that produce a linear GEMM's operands fold its\n"
                    " * absolute maximum as they write it (templates/cuda/fp8.cuh). */\n"
                    "#define RT_FP8 1\n\n");
    /* TRAINC_CE_REGS=0 (for benchmarks): the cross-entropy's three passes over each
     * row, without loss.cuh's register-resident path (the kernel as it was) */
    const char *ce = getenv("TRAINC_CE_REGS");
    if (p->g->act16 && ce && !strcmp(ce, "0"))
        buf_puts(o, "#define RT_CE_THREE_PASSES 1\n\n");
    for (int i = 0; tmpl_cuda_files[i]; i++)
        if (tmpl_needed(tmpl_cuda_names[i], p, ev, dec)) {
            if (k)
                buf_printf(o, "#include \"%s\"\n", tmpl_cuda_names[i]);
            else
                buf_printf(o, "/* ==== templates/cuda/%s ==== */\n%s\n", tmpl_cuda_names[i],
                           tmpl_cuda_files[i]);
        }
    if (k)
        buf_puts(o, "\n");
}

/* Training's fused kernel `in`, its comment naming the other loops that launch it. */
static void train_kernel(Buf *b, Program *p, int i)
{
    Instr *in = p->ins[i];
    Buf also = {0};
    int n_also = 0;
    for (int j = i + 1; j < p->n_ins; j++)
        if (!p->ins[j]->dead && p->ins[j]->kind == I_EW && p->ins[j]->same_gpu == in) {
            buf_printf(&also, "%sk%d", !n_also ? "" : ", ", p->ins[j]->id);
            n_also++;
        }
    char name[32];
    snprintf(name, sizeof name, "k%d", in->id);
    Buf k = {0};
    cuda_kernel(&k, p->g, in, name);
    /* its comment names the first loop's layer and tensors; the others, after them */
    const char *end = strstr(k.s, " */\n");
    if (n_also && end) {
        char *text = xasprintf("also launched for loop%s %s, the same code on their own "
                               "tensors", n_also > 1 ? "s" : "", also.s);
        buf_printf(b, "%.*s\n *    ", (int)(end - k.s), k.s);
        buf_words(b, 6, " *    ", text, 3);
        buf_puts(b, end);
        free(text);
    } else {
        buf_puts(b, k.s);
    }
    free(k.s);
    free(also.s);
}

/* The instances p's calls need that `seen` lacks, a line each. */
static void instances(Buf *b, Program *owner, const Program *p, Buf *seen)
{
    for (int i = 0; p && i < p->n_ins; i++)
        if (!p->ins[i]->dead && p->ins[i]->kind == I_CALL)
            instance(owner, b, seen, p->ins[i]);
}

/* p's own fused kernels (those no earlier kernel repeats), named by its prefix, the
 * heading (or NULL) before the first. */
static void own_kernels(Buf *b, const Program *p, const char *heading)
{
    char name[32];
    for (int i = 0; p && i < p->n_ins; i++)
        if (!p->ins[i]->dead && p->ins[i]->kind == I_EW && !p->ins[i]->same_gpu) {
            if (heading)
                buf_puts(b, heading);
            heading = NULL;
            snprintf(name, sizeof name, "%s%d", p->kprefix, p->ins[i]->id);
            cuda_kernel(b, p->g, p->ins[i], name);
        }
}

void emit_cuda(Program *p, Program *ev, Program *dec, Buf *b, Buf *file)
{
    /* the two texts differ only in the templates: inlined in b, #included in file */
    file_head(b, 0, p, ev, dec);
    file_head(file, 1, p, ev, dec);
    size_t at = b->len;
    buf_puts(b, "/* ==== instances for this model's shapes ==== */\n");
    Buf seen = {0};
    instances(b, p, p, &seen);
    instances(b, p, ev, &seen);
    instances(b, p, dec, &seen);
    free(seen.s);
    buf_puts(b, "\n/* ==== the fused elementwise kernels ==== */\n\n");
    for (int i = 0; i < p->n_ins; i++)
        if (!p->ins[i]->dead && p->ins[i]->kind == I_EW && !p->ins[i]->same_gpu)
            train_kernel(b, p, i);
    /* validation's own and the decode program's, those no earlier kernel repeats */
    own_kernels(b, ev, NULL);
    own_kernels(b, dec, "/* ---- the decode program's (--sample's key/value cache) ---- */\n\n");
    buf_puts(file, b->s + at);
}
