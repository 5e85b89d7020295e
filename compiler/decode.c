/* decode.c: the decode program, which --sample runs (on the CPU or a GPU) to generate
 * from a language model with a key/value cache. Its graph is the spec's with the token
 * input and target one position long: every layer then computes one position a batch
 * row, and each row is taken as a position of a sequence, its place (a prompt's
 * positions, several prompts', or each sequence's one new token): attention writes their
 * keys and values into their sequences' caches and reads those before each row
 * (rt_attention_decode), a pos_embedding adds each row's position (rt_pos_row_add), and there is no loss: the logits are what it leaves. The window's
 * forward pass costs T positions a token, this program one.
 *
 * Only a model whose every layer works position by position, apart from causal
 * attention, has one (decode_spec): a token input [T], a cross-entropy target [T], and
 * layers among those below. Its parameters lie where validation's do
 * (decode_share_layout). */
#include <string.h>
#include "ir.h"

/* Does each layer of the list work on one position at a time (or, for attention,
 * causally over those before it), reading no input but the tokens x? The first that
 * does not, else NULL. */
static const Layer *not_positional(Layer **ls, int n, const char *x)
{
    for (int i = 0; i < n; i++) {
        const Layer *l = ls[i];
        if (l->input && strcmp(l->input, x))
            return l;
        switch (l->op) {
        case OP_LINEAR: case OP_RELU: case OP_GELU: case OP_SILU: case OP_TANH:
        case OP_SIGMOID: case OP_QUICK_GELU: case OP_SQUARED_RELU: case OP_GLU: case OP_DROPOUT:
        case OP_LAYERNORM: case OP_RMSNORM: case OP_EMBEDDING: case OP_POS_EMBEDDING:
        case OP_LEAKY_RELU: case OP_SCALE: case OP_MOE:
            break;
        case OP_ATTENTION:
            if (!l->causal)
                return l;
            break;
        case OP_RESIDUAL: case OP_REPEAT: {
            const Layer *b = not_positional(l->body, l->n_body, x);
            if (!b)
                b = not_positional(l->shortcut, l->n_shortcut, x);
            if (b)
                return b;
            break;
        }
        default:
            return l;
        }
    }
    return NULL;
}

/* The spec's copy for the decode program, or NULL where the model has none. A third
 * input, the positions of packed rows, is left out: each of its rows is one sequence. */
Spec *decode_spec(const Spec *s)
{
    int positions = s->n_inputs == 3 && s->positions && !strcmp(s->inputs[2].name, s->positions);
    if (s->gan || s->loss != LOSS_CROSS_ENTROPY || (s->n_inputs != 2 && !positions))
        return NULL;
    const InputSpec *x = &s->inputs[0], *y = &s->inputs[1];
    int tgt = !strcmp(y->name, s->loss_target);
    if (!tgt || x->rank != 1 || y->rank != 1 || x->dtype == RT_F32 || x->shape[0] != y->shape[0] ||
        x->shape[0] < 2 || not_positional(s->layers, s->n_layers, x->name))
        return NULL;
    Spec *d = xcalloc(1, sizeof *d);
    *d = *s;
    d->decode_T = x->shape[0];
    d->n_inputs = 2;
    d->positions = NULL;
    d->inputs[0].shape[0] = 1;
    d->inputs[1].shape[0] = 1;
    return d;
}

/* The decode graph's parameters at the offsets (and padding) validation's graph gave
 * them: the two are built from one spec, but a chunked head, which only the window has,
 * may lay a frozen head elsewhere. */
void decode_share_layout(Graph *d, const Graph *ev)
{
    if (d->n_params != ev->n_params)
        die("internal: the decode graph has %d parameters, validation's %d", d->n_params,
            ev->n_params);
    take_param_places(d, ev, 0, "the decode graph's");
}
