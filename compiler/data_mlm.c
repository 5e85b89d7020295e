/* data_mlm.c: `trainc data mlm FILE DIR --tokenizer TOK.json --model MODEL.json [--val
 * FILE | --val-frac F] [--mask-prob P] [--copies K | --dynamic] [--seed S] [--group]`:
 * text for a masked language model (an imported BertForMaskedLM, RobertaForMaskedLM or
 * DistilBertForMaskedLM), one example a non-blank line (Hugging Face's run_mlm.py with
 * --line_by_line), as padded rows with their masks drawn once (static masking, as BERT's
 * own data was made; --copies draws K masks of each training line). With --dynamic the
 * training rows are left unmasked, y each text token's id, for the trainer's loader.mask
 * to draw masks every epoch (RoBERTa's dynamic masking); the val rows are masked once
 * still, so every validation scores the same predictions. With --group the
 * rows are run_mlm.py's without --line_by_line (group_texts): each line's ids with its
 * special tokens, concatenated over each 1000 lines (its map's batches), cut into rows
 * of T, the rest of each batch dropped; types 0, pos 0 .. T-1, no padding:
 *   DIR/train_x.npy     [N, T] i32  the ids of tokenizer(line, truncation=True,
 *                                   max_length=T, padding="max_length"), each token the
 *                                   tokenizer does not mark special chosen with
 *                                   probability P (0.15), and of those 80% replaced by the
 *                                   mask token, 10% by a token drawn uniformly from the
 *                                   vocabulary, 10% kept (transformers'
 *                                   DataCollatorForLanguageModeling)
 *   DIR/train_types.npy [N, T] i32  0, where the model has a "types" input
 *   DIR/train_pos.npy   [N, T] i32  0 .. L-1 over the L ids, then 0 .. T-L-1 over the padding
 *   DIR/train_y.npy     [N, T] i32  a chosen token's id, -100 elsewhere
 * and DIR/val_*.npy (one mask a line) from --val's file or the last F of FILE's lines
 * (0.1; none with 0). Every draw comes from --seed (1337): the same files each time. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "cmd.h"
#include "hf.h"
#include "../runtime/tokenizer.h"

static const char mlm_usage[] =
    "usage: trainc data mlm FILE DIR --tokenizer TOK.json --model MODEL.json "
    "[--val FILE | --val-frac F] [--mask-prob P] [--copies K | --dynamic] [--seed S] [--group]";

enum { IGNORE = -100 };   /* transformers' label of a token no prediction is asked of */

typedef struct {
    const char *file, *dir, *tok, *model, *val;
    double val_frac, prob;
    int64_t copies;
    uint64_t seed;
    int group;                 /* --group: run_mlm.py's group_texts */
    int dynamic;               /* --dynamic: training rows unmasked (loader.mask masks) */
} MlmArgs;

static void parse_args(int argc, char **argv, MlmArgs *a)
{
    *a = (MlmArgs){.val_frac = 0.1, .prob = 0.15, .copies = 1, .seed = 1337};
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i];
        const char **opt = !strcmp(s, "--tokenizer") ? &a->tok : !strcmp(s, "--model") ? &a->model
                         : !strcmp(s, "--val") ? &a->val : NULL;
        if (opt)
            *opt = opt_value(argc, argv, &i, s);
        else if (!strcmp(s, "--val-frac"))
            a->val_frac = data_val_frac("mlm", opt_value(argc, argv, &i, s));
        else if (!strcmp(s, "--mask-prob"))
            a->prob = data_number_arg("mlm", s, opt_value(argc, argv, &i, s), 0.001, 1);
        else if (!strcmp(s, "--copies"))
            a->copies = data_count_arg("mlm", s, opt_value(argc, argv, &i, s), 1, 100);
        else if (!strcmp(s, "--group"))
            a->group = 1;
        else if (!strcmp(s, "--dynamic"))
            a->dynamic = 1;
        else if (!strcmp(s, "--seed"))
            a->seed = (uint64_t)data_count_arg("mlm", s, opt_value(argc, argv, &i, s), 0,
                                                INT64_C(9007199254740992));
        else
            data_positional("mlm", mlm_usage, s, &a->file, &a->dir);
    }
    if (!a->file || !a->dir || !a->tok || !a->model)
        error_input("data mlm: missing %s\n%s", !a->file ? "the input file" : !a->dir
                    ? "the output folder" : !a->tok ? "--tokenizer TOK.json (the model's "
                    "tokenizer)" : "--model MODEL.json (its rows' length and vocabulary)",
                    mlm_usage);
    if (a->dynamic && a->copies > 1)
        error_input("data mlm: --copies draws masks into the files, --dynamic leaves them to "
                    "the trainer (every epoch its own): one or the other");
}

/* What the rows are written with (data_cls_write's ctx) */
typedef struct {
    const MlmArgs *a;
    const ClsModel *cm;
    rt_tokenizer *t;
    int32_t mask, pad;         /* the mask token's id, the padding's */
    int64_t vocab;             /* ids a replacement is drawn from: [0, vocab) */
    unsigned char *special;    /* [vocab] 1: a token tokenizer.json marks special */
    rt_rng rng;
    int64_t tokens, chosen, cut, dropped;   /* (dropped: --group's ids past a batch's rows) */
    int64_t drawn;             /* tokens of the rows masked here (not --dynamic's) */
    int32_t *x, *y;            /* [T]: a row as masked (put_row) */
} MlmJob;

/* Text ids as a row (the special tokens around them, the padding after): ids, types, pos */
static void text_row(MlmJob *j, const rt_ids *a, int32_t *row[3])
{
    rt_ids ids = {0}, types = {0};
    rt_tok_template(j->t, a, NULL, &ids, &types);
    for (int64_t i = 0; i < j->cm->T; i++) {
        int in = i < ids.n;
        row[0][i] = in ? (int32_t)ids.v[i] : j->pad;
        row[1][i] = in ? (int32_t)types.v[i] : 0;
        row[2][i] = (int32_t)(in ? i : i - ids.n);
    }
    rt_ids_free(&ids);
    rt_ids_free(&types);
}

/* The ids of a row before its padding (where pos restarts at 0) */
static int64_t ids_of(const MlmJob *j, const int32_t *pos)
{
    int64_t L = 1;
    while (L < j->cm->T && pos[L] != 0)
        L++;
    return L;
}

/* --dynamic's training row: y each token of text's id (not special, not padding), else
 * -100; x as it is */
static void target_row(MlmJob *j, const int32_t *x, int32_t *y, const int32_t *pos)
{
    int64_t L = ids_of(j, pos);
    for (int64_t i = 0; i < j->cm->T; i++)
        y[i] = i < L && !j->special[x[i]] ? x[i] : IGNORE;
}

/* The row's masks over x (its ids): each token of text (not special, not padding) chosen
 * with probability prob; y its id where chosen, else -100; x then the mask (80%), a
 * random id (10%) or itself */
static void mask_row(MlmJob *j, int32_t *x, int32_t *y, const int32_t *pos)
{
    int64_t T = j->cm->T, L = ids_of(j, pos);
    for (int64_t i = 0; i < T; i++) {
        int text = i < L && !j->special[x[i]];
        if (!text || rt_rng_uniform(&j->rng) >= j->a->prob) {
            y[i] = IGNORE;
            continue;
        }
        y[i] = x[i];
        j->chosen++;
        double r = rt_rng_uniform(&j->rng);
        if (r < 0.8)
            x[i] = j->mask;
        else if (r < 0.9)
            x[i] = (int32_t)(rt_rng_u64(&j->rng) % (uint64_t)j->vocab);
    }
}

/* The row (its ids x, types and pos in row[]) into `rows`' files: a training row
 * --copies times masked, or once unmasked (--dynamic), a val row once masked (its ids
 * and targets as written in j->x, j->y) */
static void put_row(MlmJob *j, int32_t *row[3], int train, DataRows *rows, int64_t ids)
{
    const int32_t *put[4] = {j->x, row[1], row[2], j->y};
    if (!j->cm->types)
        put[1] = row[2], put[2] = j->y;
    int64_t copies = train ? j->a->copies : 1;
    for (int64_t c = 0; c < copies; c++) {
        memcpy(j->x, row[0], (size_t)j->cm->T * sizeof *j->x);
        if (train && j->a->dynamic) {
            target_row(j, j->x, j->y, row[2]);
        } else {
            mask_row(j, j->x, j->y, row[2]);
            j->drawn += ids;
        }
        j->tokens += ids;
        data_rows_put(rows, put);
    }
}

/* --group: a batch of lines' ids (with their special tokens) cut into rows of T, the
 * rest dropped (group_texts); the batch emptied */
typedef struct {
    rt_ids ids;
    int64_t lines;
} Group;

static void group_flush(MlmJob *j, Group *g, int train, DataRows *rows)
{
    int64_t T = j->cm->T;
    int32_t *row[3];
    for (int r = 0; r < 3; r++)
        row[r] = xcalloc((size_t)T, sizeof(int32_t));
    for (int64_t at = 0; at + T <= g->ids.n; at += T) {
        for (int64_t i = 0; i < T; i++)
            row[0][i] = (int32_t)g->ids.v[at + i], row[2][i] = (int32_t)i;
        put_row(j, row, train, rows, T);
    }
    j->dropped += g->ids.n % T;
    g->ids.n = 0;
    g->lines = 0;
    for (int r = 0; r < 3; r++)
        free(row[r]);
}

enum { GROUP_LINES = 1000 };   /* run_mlm.py's map batches (datasets' default) */

/* Encodes FILE's non-blank lines: the first n_train into tr's rows, the rest into va's
 * (put_row); with --group, grouped (group_flush) */
static void encode_file(void *ctx, const char *file, int64_t n_train, DataRows *tr, DataRows *va)
{
    MlmJob *j = ctx;
    FILE *f = fopen(file, "r");
    if (!f)
        error_input("%s: cannot open: %s", file, strerror(errno));
    int64_t T = j->cm->T, m = T - rt_tok_added(j->t, 0), k = 0;
    int32_t *row[3];
    for (int r = 0; r < 3; r++)
        row[r] = xcalloc((size_t)T, sizeof(int32_t));
    Group g[2] = {{{0}, 0}, {{0}, 0}};   /* (--group: train's, val's) */
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    rt_ids a = {0}, types = {0};
    while ((len = getline(&line, &cap, f)) >= 0) {
        if (!line[strspn(line, " \t\r\n")])
            continue;
        len -= len > 0 && line[len - 1] == '\n';
        a.n = 0;
        rt_tok_encode_text(j->t, line, (size_t)len, &a);
        int train = k++ < n_train;
        if (j->a->group) {
            Group *gg = &g[!train];
            types.n = 0;
            rt_tok_template(j->t, &a, NULL, &gg->ids, &types);   /* (appended) */
            if (++gg->lines == GROUP_LINES)
                group_flush(j, gg, train, train ? tr : va);
            continue;
        }
        j->cut += a.n > m;
        a.n = a.n > m ? m : a.n;
        text_row(j, &a, row);
        put_row(j, row, train, train ? tr : va, a.n + rt_tok_added(j->t, 0));
    }
    if (ferror(f))
        error_input("%s: cannot read: %s", file, strerror(errno));
    fclose(f);
    group_flush(j, &g[0], 1, tr);
    group_flush(j, &g[1], 0, va);
    free(line);
    for (int r = 0; r < 3; r++)
        free(row[r]);
    rt_ids_free(&a), rt_ids_free(&types), rt_ids_free(&g[0].ids), rt_ids_free(&g[1].ids);
}

/* DIR/NAME_{x,types,pos,y}.npy (types where the model reads them) */
static void rows_open(void *ctx, DataRows *o, const char *name)
{
    const MlmJob *j = ctx;
    data_cls_rows(o, j->a->dir, j->cm, name, 1, (const char *[]){"y"}, (int64_t[]){j->cm->T});
}

/* The tokenizer and its mask token (an added "[MASK]" or "<mask>"), its ids within the
 * model's vocabulary */
static rt_tokenizer *load_tokenizer(MlmJob *j)
{
    rt_tokenizer *t = data_cls_tokenizer("mlm", j->a->tok, j->cm, 0);
    int64_t n, id = rt_tok_one_id(t, "[MASK]", &n);
    if (id < 0)
        id = rt_tok_one_id(t, "<mask>", &n);
    if (id < 0)
        error_input("data mlm: %s has no mask token ([MASK] or <mask>)", j->a->tok);
    j->mask = (int32_t)id;
    j->pad = (int32_t)(rt_tok_pad_id(t) >= 0 ? rt_tok_pad_id(t) : 0);
    j->vocab = rt_tok_vocab(t);
    if (j->vocab > j->cm->K)
        error_input("data mlm: %s has %" PRId64 " ids, over the model's vocabulary of %" PRId64,
                    j->a->tok, j->vocab, j->cm->K);
    j->special = xcalloc((size_t)j->vocab, 1);
    for (int64_t id = 0; id < j->vocab; id++)
        j->special[id] = (unsigned char)rt_tok_special(t, (uint32_t)id);
    return t;
}

/* --dynamic: the training spec's loader.mask that draws the masks as these were drawn */
static void print_loader_mask(const MlmJob *j)
{
    char prob[64] = "", vocab[64] = "";
    if (j->a->prob != 0.15)
        snprintf(prob, sizeof prob, ", \"prob\": %.15g", j->a->prob);
    if (j->vocab != j->cm->K)
        snprintf(vocab, sizeof vocab, ", \"vocab\": %" PRId64, j->vocab);
    printf("train with \"loader\": {\"mask\": {\"token\": %d%s%s}}: the training rows' "
           "masks drawn every epoch\n", j->mask, prob, vocab);
}

int data_mlm(int argc, char **argv)
{
    MlmArgs a;
    parse_args(argc, argv, &a);
    ClsModel cm = data_cls_model(a.model, CLS_MLM);
    MlmJob j = {.a = &a, .cm = &cm};
    j.t = load_tokenizer(&j);
    j.x = xcalloc((size_t)cm.T, sizeof *j.x);
    j.y = xcalloc((size_t)cm.T, sizeof *j.y);
    rt_rng_seed(&j.rng, a.seed);
    ClsSplit sp = data_cls_split(a.file, a.val, a.val_frac, 0, a.dir, "a line of text");
    DataRows tr = {0}, va = {0};
    data_cls_write(&(ClsWrite){rows_open, encode_file, &j}, a.file, a.val, 0, &sp, &tr, &va);
    data_commit();
    char *rest = a.group ? xasprintf("%" PRId64 " tokens past each 1000 lines' last row dropped",
                                     j.dropped)
                         : xasprintf("%" PRId64 " lines cut to fit", j.cut);
    printf("%s%s: %" PRId64 " lines -> %" PRId64 " train%s + %" PRId64 " val rows of %" PRId64
           " (%" PRId64 " tokens, %" PRId64 " of %" PRId64 " masked here chosen to predict: "
           "%.1f%%; %s), mask id %d\n",
           a.file, a.val ? xasprintf(" and %s", a.val) : "", sp.n + sp.n_valfile, tr.rows,
           a.dynamic ? " (unmasked)" : "", va.rows, cm.T, j.tokens, j.chosen, j.drawn,
           100.0 * (double)j.chosen / (double)(j.drawn ? j.drawn : 1), rest, j.mask);
    if (a.dynamic)
        print_loader_mask(&j);
    rt_tok_free(j.t);
    free(j.special), free(j.x), free(j.y);
    return 0;
}
