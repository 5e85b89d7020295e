/* loss.c: the loss ("loss" in the spec: cross_entropy over the last axis's classes,
 * label-smoothed or not, mse, or a preference loss, dpo and its kin, over a pair of texts
 * a row), after the last layer:
 * its graph and shapes (a large vocabulary's logits padded for the GEMMs) and its
 * lowering (one runtime call that in training also writes d(loss)/d(prediction), where
 * the backward pass starts). */
#include <stdlib.h>
#include <string.h>
#include "op.h"

/* cross_entropy's target: the class labels [...] of the logits [..., C], read as i32. */
static Tensor *class_target(GraphCtx *c, int k, Tensor *pred, const char *path)
{
    const Spec *s = c->s;
    const InputSpec *tin = &s->inputs[k];
    if (pred->rank < 1)
        error_at(s->model_file, path, "cross_entropy needs logits with a class axis, got a scalar");
    int64_t C = pred->shape[pred->rank - 1];
    if (tin->rank != pred->rank - 1 || memcmp(tin->shape, pred->shape, sizeof(int64_t) * (size_t)tin->rank))
        error_at(s->model_file, path,
                 "target '%s' has shape %s but the logits %s need %s", tin->name,
                 shape_str(tin->rank, tin->shape), shape_str(pred->rank, pred->shape),
                 shape_str(pred->rank - 1, pred->shape));
    if (tin->dtype == RT_F32)
        error_at(s->model_file, path, "cross_entropy needs an integer target, '%s' is %s",
                 tin->name, rt_dtype_name(tin->dtype));
    if (tin->classes && tin->classes != C)
        error_at(s->model_file, path,
                 "the logits have %lld classes but $.model.inputs.%s.classes is %lld",
                 (long long)C, tin->name, (long long)tin->classes);
    Tensor *target = c->g->inputs[k];
    read_as_i32(target);
    c->g->input_classes[k] = C;
    add_flops(c, NULL, path, 4.0 * pred->numel, 0, 0);
    return target;
}

/* mse's target: the prediction's shape, as fp32. */
static Tensor *float_target(GraphCtx *c, int k, Tensor *pred, const char *path)
{
    const Spec *s = c->s;
    const InputSpec *tin = &s->inputs[k];
    if (tin->rank != pred->rank || memcmp(tin->shape, pred->shape, sizeof(int64_t) * (size_t)tin->rank))
        error_at(s->model_file, path, "target '%s' has shape %s but the prediction has shape %s",
                 tin->name, shape_str(tin->rank, tin->shape), shape_str(pred->rank, pred->shape));
    c->as_float[k] = 1;
    Tensor *t;
    if (!c->g->act16)
        t = input_f32(c, k);
    else if (tin->dtype == RT_F32 && !tin->has_scale && !tin->has_shift)
        t = c->g->inputs[k];
    else {
        /* the loss reads an fp32 target: its own conversion (the raw input when it is
         * fp32 already), not the layers' bf16 one */
        t = convert_input(c, k, xasprintf("%s_target", tin->name), "the target as f32");
        t->keep32 = 1;
    }
    add_flops(c, NULL, path, 3.0 * pred->numel, 0, 0);
    return t;
}

/* A vocabulary's logits straight from a linear layer without bias (a language
 * model's head) are stored with rows a multiple of 64 elements apart (GPT-2: 50257
 * logits, rows 50304 apart), and the head's weight is followed by as many zero rows
 * in the parameter region, as llm.c pads its vocabulary: the head's three GEMMs
 * then run over the padded vocabulary (an odd one keeps cuBLASLt on its old
 * align-1 kernels: on an H200, 41% of GPT-2's step). The padded logits come out 0,
 * the loss writes 0 into their gradient's padding, so the zero rows get a zero
 * gradient and stay zero; the parameter keeps its true shape everywhere else
 * (files, counts, the embedding). TRAINC_PAD_LOGITS=0 (for tests and benchmarks)
 * keeps the rows contiguous and the GEMMs over the true vocabulary: the same
 * numbers up to float rounding (tests/vocab_pad.sh). */
static void pad_logits(GraphCtx *c, Tensor *pred, Tensor *dpred)
{
    Graph *g = c->g;
    const char *pad = getenv("TRAINC_PAD_LOGITS");
    if ((c->s->loss != LOSS_CROSS_ENTROPY && c->s->loss != LOSS_DPO) || pred->alias ||
        g->n_nodes == 0 || (pad && !strcmp(pad, "0")))
        return;
    int64_t C = pred->shape[pred->rank - 1];
    const Node *last = g->nodes[g->n_nodes - 1];
    if (C < 1024 || C % 64 == 0 || last->kind != N_LINEAR || last->out != pred || last->b ||
        last->w->rank != 2 || last->w->shape[0] != C)
        return;
    pred->ld = dpred->ld = (C + 63) / 64 * 64;
    pred->what = xasprintf("%s (rows %lld apart: aligned for the GEMMs)",
                           pred->what ? pred->what : "logits", (long long)pred->ld);
    last->w->pad_rows = pred->ld - C;   /* (graph.c lays the region out after the loss:
                                          the zero rows are in param_span) */
}

/* A language model's head and its cross entropy: one call a chunk of rows at a time
 * (rt_head_cross_entropy: the chunk's logits by a GEMM, the loss, and in training their
 * gradient in place, dx = d(logits) W and dW += d(logits)^T x), so neither training
 * nor validation holds the [B, T, vocab] logits: a chunk of them, B x head_chunk rows
 * (--sample computes the one row it draws from: mode_sample.c). Where the head is a
 * linear layer without bias over at least 1024 classes and a sample has rows enough:
 * TRAINC_HEAD_CHUNKS (default 4) chunks of each sample's rows; 1 or 0 keeps the logits
 * whole (the head's GEMMs and the loss apart). The shape alone decides, so every
 * recompute policy runs the same sums. */
static void chunk_head(GraphCtx *c, Tensor *pred)
{
    Graph *g = c->g;
    const char *v = getenv("TRAINC_HEAD_CHUNKS");
    int64_t n = v && *v ? strtoll(v, NULL, 10) : 4;
    int64_t C = pred->shape[pred->rank - 1], rows = pred->numel / C;
    if (c->s->loss != LOSS_CROSS_ENTROPY || n < 2 || pred->alias || g->n_nodes == 0 ||
        C < 1024 || rows < n)
        return;
    Node *last = g->nodes[g->n_nodes - 1];
    if (last->kind != N_LINEAR || last->out != pred || last->b || last->w->rank != 2)
        return;
    g->head = last;
    g->head_chunk = (rows + n - 1) / n;
}

const char *const pref_names[PREF__COUNT] = {"dpo", "simpo", "ipo", "orpo", "kto", "cpo"};
const char *const dpo_type_names[DPO__COUNT + 1] = {"sigmoid", "robust", "hinge", "nca_pair",
                                                    "sppo_hard", "apo_zero", "apo_down", NULL};

/* The runtime's kind of a PREF_* loss and dpo's loss_type (RT_PREF_*: simpo is dpo's
 * sigmoid without a reference) */
static int pref_runtime_kind(int pref, int dpo_type)
{
    static const int types[DPO__COUNT] = {RT_PREF_SIGMOID, RT_PREF_ROBUST, RT_PREF_HINGE,
                                          RT_PREF_NCA_PAIR, RT_PREF_SPPO_HARD, RT_PREF_APO_ZERO,
                                          RT_PREF_APO_DOWN};
    return pref == PREF_IPO ? RT_PREF_IPO : pref == PREF_ORPO ? RT_PREF_ORPO
         : pref == PREF_KTO ? RT_PREF_KTO : pref == PREF_CPO ? RT_PREF_CPO
         : pref == PREF_DPO ? types[dpo_type] : RT_PREF_SIGMOID;
}

/* dpo's (and the other preference losses') pair: the logits [2T, C] checked (the chosen
 * text's rows, then the rejected one's), the per-sample log-probabilities [2] (g->logps)
 * the loss writes; the reference input (spec.c checked it: f32 [2]) as fp32, or NULL for
 * simpo and orpo (none) */
static Tensor *dpo_reference(GraphCtx *c, Tensor *pred, const char *path)
{
    Graph *g = c->g;
    if (pred->rank != 2 || pred->shape[0] % 2)
        error_at(c->s->model_file, path, "%s reads logits [2T, classes], a pair of texts a "
                 "row (the chosen one's T rows, then the rejected one's), got %s",
                 pref_names[c->s->pref],
                 shape_str(pred->rank, pred->shape));
    Tensor *ref = NULL;
    if (PREF_HAS_REFERENCE(c->s->pref)) {
        int k = find_model_input(c->s, c->s->reference);
        c->as_float[k] = 1;
        ref = g->act16 ? g->inputs[k] : input_f32(c, k);
    }
    int64_t two = 2;
    g->logps = act_tensor(c, path, "dpo_logps", 1, &two);
    g->logps->origin = path;
    g->logps->what = "each pair's summed log-probabilities of its answers, written by the loss";
    g->logps->keep32 = 1;
    add_flops(c, NULL, path, 4.0 * pred->numel, 0, 0);
    return ref;
}

/* kto's label: whether each row's completion is desirable, [] read as i32 (2 classes: the
 * data is checked to hold 0 and 1), or NULL for the other losses */
static Tensor *kto_label(GraphCtx *c)
{
    const Spec *s = c->s;
    if (!s->kto_label)
        return NULL;
    int k = find_model_input(s, s->kto_label);
    Tensor *t = c->g->inputs[k];
    read_as_i32(t);
    c->g->input_classes[k] = 2;
    return t;
}

/* orpo's sft target: the chosen text's next ids [T] (T half the logits' rows) read as i32,
 * or NULL where the spec names none */
static Tensor *sft_target(GraphCtx *c, Tensor *pred, const char *path)
{
    const Spec *s = c->s;
    if (!s->sft_target)
        return NULL;
    int k = find_model_input(s, s->sft_target);
    const InputSpec *in = &s->inputs[k];
    int64_t C = pred->shape[1], T = pred->shape[0] / 2;
    if (in->shape[0] != T)
        error_at(s->model_file, path, "sft_target '%s' has shape %s but the chosen text's rows "
                 "are [%lld] (half the logits' %s)", in->name, shape_str(in->rank, in->shape),
                 (long long)T, shape_str(pred->rank, pred->shape));
    if (in->classes && in->classes != C)
        error_at(s->model_file, path, "the logits have %lld classes but $.model.inputs.%s.classes "
                 "is %lld", (long long)C, in->name, (long long)in->classes);
    Tensor *t = c->g->inputs[k];
    read_as_i32(t);
    c->g->input_classes[k] = C;
    return t;
}

/* A preference loss's other inputs (the reference's log-probabilities, orpo's sft target,
 * kto's label; NULL where it has none) and constants into the graph, for lower_dpo */
static void pref_graph(GraphCtx *c, Tensor *pred, const char *path)
{
    const Spec *s = c->s;
    Graph *g = c->g;
    g->pref_ref = dpo_reference(c, pred, path);
    g->pref_sft = sft_target(c, pred, path);
    g->pref_label = kto_label(c);
    g->pref = s->pref;
    g->dpo_type = s->dpo_type;
    g->simpo_gamma = s->pref == PREF_SIMPO ? s->simpo_gamma : 0;
    g->dpo_smoothing = s->label_smoothing;
    g->kto_weights[0] = s->kto_weights[0], g->kto_weights[1] = s->kto_weights[1];
    g->sft_weight = s->pref == PREF_ORPO ? 1.0
                  : s->pref == PREF_DPO  ? s->rpo_alpha
                                         : s->cpo_alpha;   /* (simpo's, cpo's; else 0) */
}

/* The loss node after the last layer (c->cur, the prediction), and the tensor of
 * d(loss)/d(prediction) it writes, where the backward pass starts. */
void build_loss(GraphCtx *c)
{
    const Spec *s = c->s;
    Graph *g = c->g;
    const char *path = "$.model.loss";
    int k = find_model_input(s, s->loss_target);
    if (k < 0)
        error_at(s->model_file, path, "target '%s' is not a model input", s->loss_target);
    Tensor *pred = c->cur;
    Tensor *target = s->loss == LOSS_MSE ? float_target(c, k, pred, path)
                                         : class_target(c, k, pred, path);
    if (s->loss == LOSS_DPO)
        pref_graph(c, pred, path);
    Tensor *dpred = act_tensor(c, path, xasprintf("d_%s", pred->name), pred->rank,
                               pred->shape);
    dpred->origin = path;
    dpred->what = "d(loss)/d(prediction), written by the loss";
    pad_logits(c, pred, dpred);
    chunk_head(c, pred);
    Node *nd = graph_node(g, N_LOSS, path);
    nd->loss = s->loss;
    nd->p = s->loss == LOSS_DPO ? s->dpo_beta : s->label_smoothing;
    nd->in[nd->n_in++] = pred;
    nd->in[nd->n_in++] = target;
    Tensor *more[] = {g->pref_ref, g->pref_sft, g->pref_label};   /* (NULL but for dpo's kin) */
    for (int i = 0; i < 3; i++)
        if (more[i])
            nd->in[nd->n_in++] = more[i];
    nd->out2 = dpred;
    g->pred = pred;
    g->dpred = dpred;
    if (g->moe_aux)
        build_moe_aux(c);
}

Tensor *build_gan_loss(GraphCtx *c, Tensor *logits, int term)
{
    const char *path = "$.model.gan.loss";
    Tensor *d = act_tensor(c, path, xasprintf("d_%s", logits->name), logits->rank, logits->shape);
    d->origin = path;
    d->what = "d(loss term)/d(logits), written by the loss";
    Node *nd = graph_node(c->g, N_LOSS, path);
    nd->loss = c->s->loss;
    nd->act = term;
    nd->in[nd->n_in++] = logits;
    nd->out2 = d;
    add_flops(c, nd, path, 4.0 * logits->numel, 0, 0);
    return d;
}

/* A GAN's loss term: its mean over the batch into the pass's loss, d(logits). */
static void lower_gan_loss(Program *p, Node *nd)
{
    static const char *const what[] = {
        [RT_GAN_BCE_REAL] = "bce against real (1): loss term and d(logits)",
        [RT_GAN_BCE_FAKE] = "bce against fake (0): loss term and d(logits)",
        [RT_GAN_HINGE_REAL] = "hinge, real: mean relu(1 - D(x)) and d(logits)",
        [RT_GAN_HINGE_FAKE] = "hinge, fake: mean relu(1 + D(G(z))) and d(logits)",
        [RT_GAN_HINGE_GEN] = "hinge, generator: -mean D(G(z)) and d(logits)",
    };
    Tensor *z = nd->in[0];
    Instr *a = instr_add(p, I_CALL, nd->origin, 0);
    a->what = xstrdup(what[nd->act]);
    SET_CALL(a, CALL_GAN_LOSS, arg_t(z), arg_train(nd->out2), arg_rows(z->numel),
             arg_int(nd->act));
    instr_reads(a, z);
    instr_writes(a, nd->out2);
}

/* The head and loss as one call (chunk_head): x and W the head's, dx what its backward
 * node would write (training's program), the chunk's logits scratch with the logits'
 * row stride. */
static void lower_head_loss(Program *p, Node *nd)
{
    Graph *g = p->g;
    Node *h = g->head, *hb = NULL;
    for (int i = g->n_forward; i < g->n_nodes; i++)
        if (g->nodes[i]->kind == N_LINEAR_BWD && g->nodes[i]->fwd == h)
            hb = g->nodes[i];
    Tensor *pred = nd->in[0], *t = nd->in[1], *x = h->in[0], *dx = hb ? hb->out : NULL;
    int64_t C = pred->shape[pred->rank - 1], d = x->shape[x->rank - 1], rows = x->numel / d;
    int64_t ld = tensor_ld(pred), wrows = gemm_rows(h->w, C, pred);
    int64_t shape[2] = {g->head_chunk, C};
    Tensor *z = graph_tensor(g, T_TEMP, xasprintf("%s_chunk", pred->name), 2, shape);
    z->ld = ld;
    z->origin = pred->origin;
    z->what = xasprintf("%lld rows of each sample's logits, then their gradient",
                        (long long)g->head_chunk);
    g->head_z = z;
    Instr *a = instr_add(p, I_CALL, nd->origin, 0);
    int want_dx = !p->eval && dx, want_dw = !p->eval && !h->w->frozen;   /* (train.freeze) */
    a->flops = (2 + 2 * want_dx + 2 * want_dw) * rows * d * wrows;
    const char *tie = h->layer && h->layer->tie ? "; W is " : "";
    a->what = xasprintf("the head and cross entropy, %lld rows of each sample at a time: "
                        "logits = x W^T, loss and accuracy%s%s%s%s%s", (long long)g->head_chunk,
                        p->eval ? " (no gradient in validation)"
                                : want_dx || want_dw ? "; in training d(logits) in place" : "",
                        want_dx ? ", dx = d(logits) W" : "", want_dw ? ", dW += d(logits)^T x" : "",
                        tie, *tie ? h->w->name : "");
    Arg adx = want_dx ? arg_train(dx) : arg_null();
    Arg adw = want_dw ? arg_train(h->w->g) : arg_null();
    SET_CALL(a, CALL_HEAD_CE, arg_t(x), arg_t(h->w->t), arg_t(t), adx, adw, arg_t(z),
             arg_rows(rows), arg_rows(g->head_chunk), arg_int(d), arg_int(wrows), arg_int(C),
             arg_int(ld), arg_float(nd->p));
    instr_reads(a, x);
    instr_reads(a, h->w->t);
    instr_reads(a, t);
    instr_writes(a, z);
    if (want_dx)
        instr_writes(a, dx);
    if (want_dw)
        instr_writes(a, h->w->g);
}

/* dpo over each row's pair: the two answers' log-probabilities (their rows' targets not
 * ignored; simpo's, ipo's and orpo's their means) into logps, the loss and the ranking into the pass,
 * d(logits) in training */
static void lower_dpo(Program *p, Node *nd)
{
    Tensor *pred = nd->in[0], *t = nd->in[1];
    Tensor *ref = p->g->pref_ref, *sft = p->g->pref_sft, *label = p->g->pref_label;
    Tensor *logps = p->g->logps;
    int64_t C = pred->shape[1];
    const char *op = pref_names[p->g->pref];
    Instr *a = instr_add(p, I_CALL, nd->origin, 0);
    a->what = xasprintf(p->eval ? "%s: each answer's log-probability, the loss and the pairs "
                                  "ranked right (no gradient in validation)"
                                : "%s: each answer's log-probability, the loss, the pairs ranked "
                                  "right and d(logits)", op);
    SET_CALL(a, CALL_DPO, arg_t(pred), arg_t(t), arg_opt(ref),
             p->eval ? arg_null() : arg_train(nd->out2), arg_t(logps), arg_rows(1),
             arg_int(pred->shape[0]), arg_int(C), arg_int(tensor_ld(pred)), arg_float(nd->p),
             arg_float(p->g->simpo_gamma), arg_float(p->g->dpo_smoothing),
             arg_int(pref_runtime_kind(p->g->pref, p->g->dpo_type)), arg_opt(sft), arg_opt(label),
             arg_float(p->g->kto_weights[0]), arg_float(p->g->kto_weights[1]),
             arg_float(p->g->sft_weight));
    instr_reads(a, pred);
    instr_reads(a, t);
    for (int i = 2; i < nd->n_in; i++)
        instr_reads(a, nd->in[i]);
    instr_writes(a, logps);
    if (!p->eval) {
        instr_writes(a, nd->out2);
        a->inplace = pred;   /* (as cross entropy's: each logit read before it is written) */
    }
}

/* The loss, and in training the gradient of the prediction. */
static void lower_loss(Program *p, Node *nd)
{
    if (nd->loss == LOSS_GAN_BCE || nd->loss == LOSS_GAN_HINGE) {
        lower_gan_loss(p, nd);
        return;
    }
    if (nd->loss == LOSS_DPO) {
        lower_dpo(p, nd);
        return;
    }
    if (p->g->head) {
        lower_head_loss(p, nd);
        return;
    }
    Tensor *pred = nd->in[0], *t = nd->in[1];
    Instr *a = instr_add(p, I_CALL, nd->origin, 0);
    if (nd->loss == LOSS_CROSS_ENTROPY) {
        int64_t C = pred->shape[pred->rank - 1];
        a->what = xstrdup(p->eval ? "cross entropy: loss and accuracy (no gradient in validation)"
                                  : "cross entropy: loss, accuracy and d(logits) in one pass");
        /* no gradient in validation's program; in training's, only while e->train.
         * Label smoothing has its own call (validation's loss smoothed too, as
         * F.cross_entropy's), so a model without it runs the kernel it always did. */
        Arg d = p->eval ? arg_null() : arg_train(nd->out2);
        if (nd->p > 0)
            SET_CALL(a, CALL_CROSS_ENTROPY_LS, arg_t(pred), arg_t(t), d,
                     arg_rows(pred->numel / C), arg_int(C), arg_int(tensor_ld(pred)),
                     arg_float(nd->p));
        else
            SET_CALL(a, CALL_CROSS_ENTROPY, arg_t(pred), arg_t(t), d,
                     arg_rows(pred->numel / C), arg_int(C), arg_int(tensor_ld(pred)));
    } else {
        a->what = xstrdup(p->eval ? "mean squared error (no gradient in validation)"
                                  : "mean squared error and d(prediction)");
        SET_CALL(a, CALL_MSE, arg_t(pred), arg_t(t), p->eval ? arg_null() : arg_train(nd->out2),
                 arg_rows(pred->numel));
    }
    instr_reads(a, pred);
    instr_reads(a, t);
    if (!p->eval) {
        instr_writes(a, nd->out2);
        /* the logits' gradient may take the logits' storage (rt_cross_entropy writes
         * each logit after reading it, z[target] first), so the two [B, T, vocab]
         * buffers of a language model are one: memplan decides */
        if (nd->loss == LOSS_CROSS_ENTROPY)
            a->inplace = pred;
    }
}

const NodeDef node_loss = {"loss", GRAD_NONE, 0, lower_loss};
