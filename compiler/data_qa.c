/* data_qa.c: `trainc data qa FILE.jsonl DIR --tokenizer TOK.json --model MODEL.json
 * [--val FILE.jsonl | --val-frac F | --unlabeled] [--stride S]`: an extractive question
 * answerer's examples, one JSON object a line in SQuAD's form as Hugging Face datasets
 * writes it ({"question": ..., "context": ..., "answers": {"text": [...], "answer_start":
 * [...]}}), as the padded rows an imported BertForQuestionAnswering (or RoBERTa's,
 * DistilBERT's) trains on, as transformers' run_qa.py prepares them: tokenizer(question
 * with its leading white space stripped, context, truncation="only_second", max_length=T,
 * stride=S, return_overflowing_tokens=True, padding="max_length"), a context too long for
 * one row cut into windows that overlap by S tokens, each a row:
 *   DIR/train_x.npy       [N, T] i32     the ids ([CLS] question [SEP] context [SEP], ...)
 *   DIR/train_types.npy   [N, T] i32     their type ids, where the model has a "types" input
 *   DIR/train_pos.npy     [N, T] i32     0 .. L-1 over the L ids, then 0 .. T-L-1
 *   DIR/train_y.npy       [N, 2] i32     the first and last token of the example's first
 *                                        answer, both 0 (the row's first token) where the
 *                                        answer is not wholly in the row's window or there is
 *                                        none
 *   DIR/train_example.npy [N] i32        the row's example: its index among the file's (the
 *                                        last F's from where they start in it)
 *   DIR/train_offsets.npy [N, T, 2] i32  each context token's characters [start, end) in
 *                                        the context, -1 elsewhere (to read an answer back)
 * and DIR/val_*.npy from --val's file, or the last F of FILE's examples (0.1; none with
 * 0); --unlabeled: DIR/test_*.npy without y, for --predict. The token offsets are
 * tokenizers' offsets_mapping (rt_tok_encode_offsets): WordPiece, byte-level BPE and Unigram.
 * With --answers, a trainer's predictions over those rows read back as text
 * (data_qa_answers.c). */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "cmd.h"
#include "hf.h"
#include "../runtime/tokenizer.h"

static const char qa_usage[] =
    "usage: trainc data qa FILE.jsonl DIR --tokenizer TOK.json --model MODEL.json "
    "[--val FILE.jsonl | --val-frac F | --unlabeled] [--stride S]\n"
    "       trainc data qa FILE.jsonl DIR --answers PRED.npy [--part test|val|train] "
    "[--n-best N] [--max-answer L] [--version-2 [--null-threshold D]]";
static const char qa_form[] =
    "{\"question\": ..., \"context\": ..., \"answers\": {\"text\": [...], \"answer_start\": [...]}}";

typedef struct {
    const char *file, *dir, *tok, *model, *val;
    double val_frac;
    int64_t stride;
    int unlabeled;
    DataQaAnswers ans;             /* --answers: the predictions of DIR's PART rows */
} QaArgs;

static void parse_args(int argc, char **argv, QaArgs *a)
{
    *a = (QaArgs){.val_frac = 0.1, .stride = 128,
                  .ans = {.part = "test", .n_best = 20, .max_answer = 30}};
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i];
        const char **opt = !strcmp(s, "--tokenizer") ? &a->tok : !strcmp(s, "--model") ? &a->model
                         : !strcmp(s, "--val") ? &a->val : !strcmp(s, "--answers") ? &a->ans.pred
                         : !strcmp(s, "--part") ? &a->ans.part : NULL;
        if (opt)
            *opt = opt_value(argc, argv, &i, s);
        else if (!strcmp(s, "--val-frac"))
            a->val_frac = data_val_frac("qa", opt_value(argc, argv, &i, s));
        else if (!strcmp(s, "--stride"))
            a->stride = data_count_arg("qa", s, opt_value(argc, argv, &i, s), 0, 1 << 20);
        else if (!strcmp(s, "--n-best"))
            a->ans.n_best = data_count_arg("qa", s, opt_value(argc, argv, &i, s), 1, 1 << 16);
        else if (!strcmp(s, "--max-answer"))
            a->ans.max_answer = data_count_arg("qa", s, opt_value(argc, argv, &i, s), 1, 1 << 20);
        else if (!strcmp(s, "--version-2"))
            a->ans.v2 = 1;
        else if (!strcmp(s, "--null-threshold"))
            a->ans.threshold = data_number_arg("qa", s, opt_value(argc, argv, &i, s), -1e30, 1e30);
        else if (!strcmp(s, "--unlabeled"))
            a->unlabeled = 1;
        else
            data_positional("qa", qa_usage, s, &a->file, &a->dir);
    }
    if (a->unlabeled && a->val)
        error_input("data qa: --unlabeled writes the rows a model predicts on, one set: no --val");
    const char *part = a->ans.part;
    if (strcmp(part, "test") && strcmp(part, "val") && strcmp(part, "train"))
        error_input("data qa: --part %s: test, val or train (the rows --answers' predictions are "
                    "of)", part);
    if (a->ans.pred && (!a->file || !a->dir))
        error_input("data qa: missing %s\n%s", !a->file ? "the input file (the one the rows' "
                    "examples index)" : "the rows' folder", qa_usage);
    a->ans.file = a->file, a->ans.dir = a->dir;
    if (!a->ans.pred && (!a->file || !a->dir || !a->tok || !a->model))
        error_input("data qa: missing %s\n%s", !a->file ? "the input file" : !a->dir
                    ? "the output folder" : !a->tok ? "--tokenizer TOK.json (the model's "
                    "tokenizer)" : "--model MODEL.json (its rows' length)", qa_usage);
}

/* One example: the question's ids, the context's ids and their offsets (bytes, two an id),
 * the answer's bytes [sb, eb) in the context (sb -1: none), and each context byte's
 * character (chars[b]: the characters before byte b) */
typedef struct {
    rt_ids q, c, offs;
    int64_t sb, eb;
    int64_t *chars;
} QaExample;

/* Line ln's string at KEY, checked against the tokenizer's NFC normalizer */
static const char *line_text(rt_tokenizer *t, const cJSON *o, const char *key, const char *file,
                             int64_t ln)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v))
        data_line_error(file, ln, v ? "'%s' must be a string" : "missing key '%s'", key);
    uint32_t cp;
    size_t n = strlen(v->valuestring);
    if (rt_tok_unnormalized(t, v->valuestring, n, &cp) < n)
        data_line_error(file, ln, "U+%04X in '%s', which the tokenizer's NFC normalizer may "
                        "change (normalize the file first)", cp, key);
    return v->valuestring;
}

/* The first answer's bytes in the context: answer_start (characters) and its text's length
 * in characters, as run_qa.py takes them; none where the lists are empty */
static void line_answer(const cJSON *o, const char *file, int64_t ln, const char *c, int64_t n,
                        QaExample *e)
{
    const cJSON *ans = cJSON_GetObjectItemCaseSensitive(o, "answers");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(ans, "text");
    const cJSON *start = cJSON_GetObjectItemCaseSensitive(ans, "answer_start");
    if (!cJSON_IsArray(text) || !cJSON_IsArray(start))
        data_line_error(file, ln, "'answers' must be {\"text\": [...], \"answer_start\": [...]}");
    e->sb = -1;
    if (cJSON_GetArraySize(start) == 0)
        return;
    const cJSON *s0 = start->child, *t0 = text->child;
    if (!cJSON_IsNumber(s0) || s0->valuedouble != (double)(int64_t)s0->valuedouble ||
        s0->valuedouble < 0 || !cJSON_IsString(t0))
        data_line_error(file, ln, "the first answer must be a string and its answer_start a "
                        "character's index");
    int64_t k = (int64_t)s0->valuedouble, len = 0;
    for (const unsigned char *p = (const unsigned char *)t0->valuestring; *p; p++)
        len += (*p & 0xC0) != 0x80;
    e->sb = data_char_byte(c, n, k);
    e->eb = data_char_byte(c, n, k + len);
    if (e->sb < 0 || e->eb < 0)
        data_line_error(file, ln, "the answer's characters [%" PRId64 ", %" PRId64 ") are past "
                        "the context's %" PRId64, k, k + len, e->chars[n]);
}

/* Line ln as an example: the question (its leading white space stripped, as run_qa.py's
 * lstrip), the context with its offsets, the answer */
static void line_example(rt_tokenizer *t, const cJSON *o, const QaArgs *a, const char *file,
                         int64_t ln, QaExample *e)
{
    const char *q = line_text(t, o, "question", file, ln), *c = line_text(t, o, "context", file, ln);
    size_t qn = strlen(q), skip = 0, cn = strlen(c);
    rt_utf8_strip(q, qn, &skip);
    e->q.n = e->c.n = e->offs.n = 0;
    rt_tok_encode_text(t, q + skip, qn - skip, &e->q);
    if (rt_tok_encode_offsets(t, c, cn, &e->c, &e->offs) != 0)
        data_line_error(file, ln, "the context's ids do not spell it (a byte no entry of the "
                        "tokenizer names, or an added token's stripped white space): its "
                        "offsets are unknown");
    free(e->chars);
    e->chars = xcalloc(cn + 1, sizeof *e->chars);
    e->chars[0] = 0;
    for (size_t b = 0; b < cn; b++)
        e->chars[b + 1] = e->chars[b] + ((c[b] & 0xC0) != 0x80);
    if (!a->unlabeled)
        line_answer(o, file, ln, c, (int64_t)cn, e);
}

/* The answer's first and last row token as run_qa.py finds them over the context's tokens
 * [b0, b1] of the row (offs: theirs), 0 and 0 where it is not wholly inside; its loops
 * kept to the context (run_qa.py's start loop runs on over [SEP] and the padding, whose
 * offsets are 0, when the answer starts in the window's last token: "an edge case") */
static void answer_tokens(const QaExample *e, const uint32_t *offs, int64_t b0, int64_t b1,
                          int32_t *y)
{
    y[0] = y[1] = 0;
    if (e->sb < 0 || b1 < b0 || !(offs[0] <= e->sb && offs[2 * (b1 - b0) + 1] >= e->eb))
        return;   /* (no answer, an empty context, or the answer not all in the window) */
    int64_t s = b0, t = b1;
    while (s <= b1 && offs[2 * (s - b0)] <= e->sb)
        s++;
    while (t >= b0 && offs[2 * (t - b0) + 1] >= e->eb)
        t--;
    y[0] = (int32_t)(s - 1), y[1] = (int32_t)(t + 1);
}

typedef struct {
    int64_t rows, tokens, none, windows;
} QaCounts;

/* What the rows are written with (data_cls_write's ctx) */
typedef struct {
    const QaArgs *a;
    const ClsModel *cm;
    rt_tokenizer *t;
    QaCounts c;
} QaJob;

/* Where the second text's ids start in the pair template after a first of QN ids */
static int64_t second_at(rt_tokenizer *t, const rt_ids *q)
{
    rt_ids b = {0}, ids = {0}, types = {0};
    rt_ids_push(&b, UINT32_MAX);
    rt_tok_template(t, q, &b, &ids, &types);
    int64_t at = 0;
    while (ids.v[at] != UINT32_MAX)
        at++;
    rt_ids_free(&b), rt_ids_free(&ids), rt_ids_free(&types);
    return at;
}

/* The context's window [w0, w1) after the question as a row: x, types, pos, y [2],
 * offsets [T, 2] (characters) */
static void window_row(QaJob *j, const QaExample *e, int64_t w0, int64_t w1, int64_t b0,
                       int32_t pad, int32_t *row[5])
{
    int64_t T = j->cm->T;
    rt_ids win = {e->c.v + w0, w1 - w0, w1 - w0}, ids = {0}, types = {0};
    rt_tok_template(j->t, &e->q, &win, &ids, &types);
    data_cls_place(&ids, &types, T, pad, 0, row[0], row[1], row[2]);
    if (!j->a->unlabeled)
        answer_tokens(e, e->offs.v + 2 * w0, b0, b0 + (w1 - w0) - 1, row[3]);
    for (int64_t i = 0; i < T; i++) {   /* (each context token's offsets, in characters) */
        int in = i >= b0 && i < b0 + (w1 - w0);
        const uint32_t *o = in ? e->offs.v + 2 * (w0 + i - b0) : NULL;
        row[4][2 * i] = in ? (int32_t)e->chars[o[0]] : -1;
        row[4][2 * i + 1] = in ? (int32_t)e->chars[o[1]] : -1;
    }
    j->c.tokens += ids.n;
    j->c.none += !j->a->unlabeled && row[3][0] == 0;
    rt_ids_free(&ids), rt_ids_free(&types);
}

/* Encodes FILE's examples: the rows of the first n_train into tr, the rest into va */
static void encode_file(void *ctx, const char *file, int64_t n_train, DataRows *tr, DataRows *va)
{
    QaJob *j = ctx;
    const ClsModel *cm = j->cm;
    int64_t T = cm->T, room0 = T - rt_tok_added(j->t, 1);
    DataLines in;
    data_lines_open(&in, file, qa_form);
    int32_t pad = (int32_t)(rt_tok_pad_id(j->t) >= 0 ? rt_tok_pad_id(j->t) : 0);
    int32_t *row[5], example = 0;
    for (int k = 0; k < 5; k++)
        row[k] = xcalloc((size_t)(2 * T), sizeof(int32_t));
    QaExample e = {0};
    for (cJSON *o; (o = data_lines_next(&in)); example++) {
        line_example(j->t, o, j->a, file, in.ln, &e);
        cJSON_Delete(o);
        int64_t m = room0 - e.q.n, b0 = second_at(j->t, &e.q), C = e.c.n;
        if (m < 1)
            data_line_error(file, in.ln, "the question's %" PRId64 " tokens leave no room for the "
                            "context in rows of %" PRId64, e.q.n, T);
        if (C > m && j->a->stride >= m)
            data_line_error(file, in.ln, "--stride %" PRId64 " is not below the %" PRId64
                            " context tokens a row holds after this question: no window would "
                            "move on", j->a->stride, m);
        for (int64_t w0 = 0;; w0 += m - j->a->stride) {
            int64_t w1 = w0 + m < C ? w0 + m : C;
            window_row(j, &e, w0, w1, b0, pad, row);
            const int32_t *put[6] = {row[0]};
            int k = 1;
            if (cm->types)
                put[k++] = row[1];
            put[k++] = row[2];
            if (!j->a->unlabeled)
                put[k++] = row[3];
            put[k++] = &example;
            put[k] = row[4];
            data_rows_put(example < n_train ? tr : va, put);
            j->c.rows++, j->c.windows += w0 > 0;
            if (w1 == C)
                break;
        }
    }
    data_lines_close(&in);
    for (int r = 0; r < 5; r++)
        free(row[r]);
    rt_ids_free(&e.q), rt_ids_free(&e.c), rt_ids_free(&e.offs);
    free(e.chars);
}

/* DIR/NAME_{x,types,pos,y,example,offsets}.npy (types where the model reads them; y unless
 * unlabeled) */
static void rows_open(void *ctx, DataRows *o, const char *name)
{
    const QaJob *j = ctx;
    const char *const keys[3] = {"y", "example", "offsets"};
    int u = j->a->unlabeled;
    int64_t T = j->cm->T;
    data_cls_rows(o, j->a->dir, j->cm, name, 3 - u, keys + u, (int64_t[]){2, 0, 2 * T} + u);
}

/* The tokenizer, whose offsets trainc must compute */
static rt_tokenizer *load_tokenizer(const QaArgs *a, const ClsModel *cm)
{
    rt_tokenizer *t = data_cls_tokenizer("qa", a->tok, cm, 1);
    rt_ids ids = {0}, offs = {0};
    if (rt_tok_encode_offsets(t, "a", 1, &ids, &offs) != 0)
        error_input("data qa: %s: a SentencePiece-style BPE tokenizer (Llama 2's, Mistral's), "
                    "whose offsets trainc does not compute (a WordPiece's, a byte-level BPE's or "
                    "a Unigram's: BERT's, RoBERTa's, XLM-R's)", a->tok);
    rt_ids_free(&ids), rt_ids_free(&offs);
    return t;
}

int data_qa(int argc, char **argv)
{
    QaArgs a;
    parse_args(argc, argv, &a);
    if (a.ans.pred)
        return data_qa_answers(&a.ans);
    ClsModel cm = data_cls_model(a.model, CLS_QA);
    rt_tokenizer *t = load_tokenizer(&a, &cm);
    ClsSplit sp = data_cls_split(a.file, a.val, a.val_frac, a.unlabeled, a.dir, qa_form);
    DataRows tr = {0}, va = {0};
    QaJob j = {&a, &cm, t, {0}};
    data_cls_write(&(ClsWrite){rows_open, encode_file, &j}, a.file, a.val, a.unlabeled, &sp, &tr,
                   &va);
    data_commit();
    const QaCounts c = j.c;
    printf("%s%s: %" PRId64 " examples -> %" PRId64 " %s rows of %" PRId64 " (%" PRId64
           " tokens; %" PRId64 " rows past a context's first window%s)\n",
           a.file, a.val ? xasprintf(" and %s", a.val) : "", sp.n + sp.n_valfile, c.rows,
           a.unlabeled ? "test" : xasprintf("(%" PRId64 " train + %" PRId64 " val)", tr.rows,
                                            va.rows),
           cm.T, c.tokens, c.windows, a.unlabeled ? "" : xasprintf("; %" PRId64 " with no answer "
                                                                   "in them: y 0 0", c.none));
    rt_tok_free(t);
    return 0;
}
