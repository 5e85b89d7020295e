/* data_qa_answers.c: `trainc data qa FILE.jsonl DIR --answers PRED.npy [--part P]
 * [--n-best N] [--max-answer L] [--version-2 [--null-threshold D]]`: a question answerer's
 * predictions read back as text. PRED.npy is a trainer's --predict of DIR's P rows (test,
 * or val, or train: the start and end logits [N, 2, T]); DIR/P_example.npy and
 * DIR/P_offsets.npy (what `trainc data qa` wrote with them) say each row's example, a line
 * of FILE, and its context tokens' characters. Each example's answer is as transformers'
 * run_qa.py post-processing (postprocess_qa_predictions) picks it: over every row of the
 * example, the N highest start and N highest end logits (20), each pair whose tokens are
 * both the context's, end not before start, at most L tokens long (30), scored by the sum
 * of the two logits (in float), the best pair's characters of the context ("empty" where
 * no pair qualifies). --version-2 (its version_2_with_negative, SQuAD 2.0): the null
 * answer "" (the lowest over the rows of their first token's two logits) among them, and
 * "" where its score less the best non-empty answer's logits is over D (0). Writes
 * DIR/P_answers.jsonl ({"id": ..., "answer": ..., "score": ...} for each example with rows,
 * in FILE's order; id the line's "id", else its index) and, where they hold answers, prints
 * SQuAD's exact match and F1 (the best over each example's answers, after SQuAD's
 * normalization: lower case, no ASCII punctuation, no articles a, an, the, white space
 * collapsed; SQuAD 2.0's with --version-2). */
#define _GNU_SOURCE
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cmd.h"
#include "../runtime/rt.h"
#include "../runtime/wordpiece.h"

/* A candidate answer: the context's characters [a, b), its score and its two logits */
typedef struct {
    int64_t a, b;
    float score, sl, el;
    int kind;                  /* SPAN, NUL (the null answer, "": SQuAD v2's), EMPTY (run_qa.py's
                                  stand-in, "empty") */
} Cand;
enum { SPAN, NUL, EMPTY };

/* One example's candidates, the best first (at most n_best, and the null answer after
 * them), its rows and its null answer (the lowest over its rows) */
typedef struct {
    Cand *c;
    int n;
    int64_t rows;
    Cand null;
} Example;

/* The k largest of v[0, n) (k <= n), their indices into top, largest first (numpy's
 * argsort descending: equal values in no promised order) */
static void top_k(const float *v, int64_t n, int64_t k, int64_t *top)
{
    for (int64_t i = 0; i < k; i++)
        top[i] = -1;
    for (int64_t j = 0; j < n; j++) {
        int64_t at = k;
        while (at > 0 && (top[at - 1] < 0 || v[j] > v[top[at - 1]]))
            at--;
        if (at == k)
            continue;
        memmove(top + at + 1, top + at, (size_t)(k - at - 1) * sizeof *top);
        top[at] = j;
    }
}

/* x among e's candidates, kept best first and after those of its score (Python's stable
 * sort of them all), at most cap of them */
static void cand_add(Example *e, int cap, Cand x)
{
    int at = e->n;
    while (at > 0 && e->c[at - 1].score < x.score)
        at--;
    if (at >= cap)
        return;
    if (e->n == cap)
        e->n--;
    memmove(e->c + at + 1, e->c + at, (size_t)(e->n - at) * sizeof *e->c);
    e->c[at] = x;
    e->n++;
}

/* Row r's candidate pairs into its example's (run_qa.py's loops: start indices outside,
 * end inside), and its null answer where it is the lowest so far */
static void row_pairs(const DataQaAnswers *a, const float *start, const float *end,
                      const int32_t *offs, int64_t T, int64_t *ts, int64_t *te, Example *ex)
{
    Cand null = {0, 0, start[0] + end[0], start[0], end[0], NUL};
    if (ex->rows++ == 0 || ex->null.score > null.score)
        ex->null = null;
    int64_t k = a->n_best < T ? a->n_best : T;
    top_k(start, T, k, ts);
    top_k(end, T, k, te);
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < k; j++) {
            int64_t s = ts[i], e = te[j];
            if (offs[2 * s] < 0 || offs[2 * e] < 0 || e < s || e - s + 1 > a->max_answer)
                continue;
            cand_add(ex, (int)a->n_best, (Cand){offs[2 * s], offs[2 * e + 1], start[s] + end[e],
                                               start[s], end[e], SPAN});
        }
}

/* ---- SQuAD's metric ------------------------------------------------------------ */

/* s normalized as SQuAD's evaluate script does (lower case, ASCII punctuation out), as its
 * words (at White_Space) without the articles, joined by single spaces */
static char *normalized(const char *s)
{
    size_t n = strlen(s), m = 0;
    const unsigned char *u = (const unsigned char *)s;
    char *t = xcalloc(8 * n + 2, 1), *out = xcalloc(8 * n + 2, 1);
    for (size_t i = 0, len; i < n; i += len) {
        uint32_t c = rt_utf8_at(u, i, n, &len), second;
        if (c < 0x80 && ispunct((int)c))
            continue;
        if (rt_uni_space(c)) {
            t[m++] = ' ';
            continue;
        }
        if (c == 0xFFFFFFFFu) {   /* (a byte that starts no character: as it is) */
            t[m++] = (char)u[i];
            continue;
        }
        m += rt_put_utf8(rt_uni_tolower(c, &second), t + m);
        if (second)
            m += rt_put_utf8(second, t + m);
    }
    size_t o = 0;
    for (char *save = NULL, *w = strtok_r(t, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        if (!strcmp(w, "a") || !strcmp(w, "an") || !strcmp(w, "the"))
            continue;
        o += (size_t)sprintf(out + o, "%s%s", o ? " " : "", w);
    }
    free(t);
    return out;
}

/* The F1 of two normalized texts' words (their multisets' overlap); with V2, SQuAD v2's
 * rule where either has none: 1 when both have none, else 0 */
static double word_f1(const char *pred, const char *gold, int v2)
{
    if (v2 && (!*pred || !*gold))
        return !*pred && !*gold;
    char *p = xstrdup(pred), *g = xstrdup(gold), *sp = NULL, *sg = NULL;
    char *pw[1024], *gw[1024];
    int np = 0, ng = 0, common = 0;
    for (char *w = strtok_r(p, " ", &sp); w && np < 1024; w = strtok_r(NULL, " ", &sp))
        pw[np++] = w;
    for (char *w = strtok_r(g, " ", &sg); w && ng < 1024; w = strtok_r(NULL, " ", &sg))
        gw[ng++] = w;
    for (int i = 0; i < np; i++)
        for (int j = 0; j < ng; j++)
            if (gw[j] && !strcmp(pw[i], gw[j])) {
                common++, gw[j] = NULL;
                break;
            }
    free(p), free(g);
    if (common == 0)
        return 0;
    double prec = (double)common / np, rec = (double)common / ng;
    return 2 * prec * rec / (prec + rec);
}

/* The example's exact match and F1 against its answers' texts, the best over them (SQuAD
 * v2's: no answers is one answer, ""); 0 where it has none to score against (v1) */
static int score_answer(const cJSON *o, const char *answer, int v2, double *em, double *f1)
{
    const cJSON *texts = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(o, "answers"), "text"), *t;
    char *p = normalized(answer);
    int any = 0;
    cJSON_ArrayForEach(t, texts) {
        if (!cJSON_IsString(t))
            continue;
        char *g = normalized(t->valuestring);
        *em = fmax(*em, !strcmp(p, g));
        *f1 = fmax(*f1, word_f1(p, g, v2));
        any = 1;
        free(g);
    }
    if (!any && v2)
        *em = *f1 = !*p, any = 1;
    free(p);
    return any;
}

/* ---- the command --------------------------------------------------------------- */

/* DIR/PART_KEY.npy, opened */
static void open_part(rt_npy *a, const DataQaAnswers *x, const char *key)
{
    rt_npy_open(a, xasprintf("%s/%s_%s.npy", x->dir, x->part, key));
}

/* The arrays' shapes against each other: example [N], offsets [N, T, 2] (as i32 rows of
 * 2T), predictions [N, 2, T] f32 */
static int64_t check_arrays(const DataQaAnswers *a, const rt_npy *ex, const rt_npy *of,
                            const rt_npy *pr)
{
    int64_t N = ex->rows, T = of->rank == 2 ? of->shape[1] / 2 : 0;
    if (ex->dtype != RT_I32 || ex->rank != 1 || of->dtype != RT_I32 || of->rank != 2 ||
        of->rows != N || T < 1)
        error_input("data qa: %s/%s_example.npy and _offsets.npy are not `trainc data qa`'s",
                    a->dir, a->part);
    if (pr->dtype != RT_F32 || pr->rank != 3 || pr->rows != N || pr->shape[1] != 2 ||
        pr->shape[2] != T)
        error_input("data qa: --answers %s: [%" PRId64 ", 2, %" PRId64 "] f32 expected (a "
                    "question answerer's --predict of the %s rows)", a->pred, N, T, a->part);
    return T;
}

/* Each example's candidates over its rows, by example (n of them) */
static Example *candidates(const DataQaAnswers *a, int64_t n)
{
    rt_npy ex, of, pr;
    open_part(&ex, a, "example");
    open_part(&of, a, "offsets");
    rt_npy_open(&pr, a->pred);
    int64_t T = check_arrays(a, &ex, &of, &pr);
    Example *exs = xcalloc((size_t)n, sizeof *exs);
    int64_t *ts = xcalloc((size_t)(2 * T), sizeof *ts);
    for (int64_t r = 0; r < ex.rows; r++) {
        int32_t e = ((const int32_t *)ex.data)[r];
        if (e < 0 || e >= n)
            error_input("data qa: %s/%s_example.npy: row %" PRId64 "'s example %d is not one of "
                        "%s's %" PRId64, a->dir, a->part, r, e, a->file, n);
        if (!exs[e].c)
            exs[e].c = xcalloc((size_t)a->n_best + 2, sizeof *exs[e].c);
        const float *p = (const float *)(pr.data + r * pr.row_bytes);
        row_pairs(a, p, p + T, (const int32_t *)(of.data + r * of.row_bytes), T, ts, ts + T,
                  &exs[e]);
    }
    free(ts);
    rt_npy_close(&ex), rt_npy_close(&of), rt_npy_close(&pr);
    return exs;
}

/* Candidate x's text in the context ctx (its characters, as bytes) */
static char *cand_text(const Cand *x, const char *ctx, const char *file, int64_t ln)
{
    if (x->kind != SPAN)
        return xstrdup(x->kind == EMPTY ? "empty" : "");
    int64_t len = (int64_t)strlen(ctx);
    int64_t sb = data_char_byte(ctx, len, x->a), eb = data_char_byte(ctx, len, x->b);
    if (sb < 0 || eb < sb)
        data_line_error(file, ln, "the rows' offsets [%" PRId64 ", %" PRId64 ") are not in this "
                        "context: the rows are another file's", x->a, x->b);
    return xasprintf("%.*s", (int)(eb - sb), ctx + sb);
}

/* The example's answer as run_qa.py's postprocess_qa_predictions gives it: the best
 * candidate ("empty" where none, or where the one there is says nothing); SQuAD v2's: the
 * null answer among them, then the best that says something unless the null's score beats
 * its logits by more than the threshold (*diff: by how much) */
static char *answer_of(const DataQaAnswers *a, Example *e, const char *ctx, const char *file,
                       int64_t ln, float *score, float *diff)
{
    if (a->v2) {   /* (appended, then sorted with the others; kept where that cuts it off) */
        cand_add(e, (int)a->n_best, e->null);
        int kept = 0;
        for (int i = 0; i < e->n; i++)
            kept |= e->c[i].kind == NUL;
        if (!kept)
            e->c[e->n++] = e->null;
    }
    char *first = e->n ? cand_text(&e->c[0], ctx, file, ln) : NULL;
    if (e->n == 0 || (e->n == 1 && !*first)) {
        memmove(e->c + 1, e->c, (size_t)e->n * sizeof *e->c);
        e->c[0] = (Cand){0, 0, 0, 0, 0, EMPTY};
        e->n++;
    }
    free(first);
    int i = 0;
    char *text = cand_text(&e->c[0], ctx, file, ln);
    while (a->v2 && !*text && i + 1 < e->n) {
        free(text);
        text = cand_text(&e->c[++i], ctx, file, ln);
    }
    *score = e->c[i].score;
    *diff = e->null.score - e->c[i].sl - e->c[i].el;
    if (a->v2 && *diff > (float)a->threshold)
        *text = 0;
    return text;
}

/* One line of the answers file */
static void put_answer(FILE *f, const cJSON *o, int64_t k, const char *answer, float score,
                       const float *diff)
{
    cJSON *j = cJSON_CreateObject();
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
    if (cJSON_IsString(id))
        cJSON_AddStringToObject(j, "id", id->valuestring);
    else
        cJSON_AddNumberToObject(j, "id", (double)k);
    cJSON_AddStringToObject(j, "answer", answer);
    cJSON_AddNumberToObject(j, "score", score);
    if (diff)
        cJSON_AddNumberToObject(j, "null_diff", *diff);
    char *s = cJSON_PrintUnformatted(j);
    fprintf(f, "%s\n", s);
    free(s);
    cJSON_Delete(j);
}

int data_qa_answers(const DataQaAnswers *a)
{
    static const char form[] = "{\"question\": ..., \"context\": ..., \"answers\": ...}";
    int64_t n = data_count_lines(a->file, form), k = 0, scored = 0, with_rows = 0, nulls = 0;
    Example *exs = candidates(a, n);
    const char *out = xasprintf("%s/%s_answers.jsonl", a->dir, a->part);
    FILE *f = fopen(data_stage(out), "w");
    if (!f)
        cannot_write("data qa", out);
    double em = 0, f1 = 0;
    DataLines in;
    data_lines_open(&in, a->file, form);
    for (cJSON *o; (o = data_lines_next(&in)); k++) {
        if (exs[k].rows) {   /* (else an example of another part) */
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "context");
            float score, diff;
            char *ans = answer_of(a, &exs[k], cJSON_IsString(c) ? c->valuestring : "", a->file,
                                  in.ln, &score, &diff);
            put_answer(f, o, k, ans, score, a->v2 ? &diff : NULL);
            double e1 = 0, f11 = 0;
            if (score_answer(o, ans, a->v2, &e1, &f11))
                em += e1, f1 += f11, scored++;
            with_rows++, nulls += !*ans;
            free(ans);
        }
        free(exs[k].c);
        cJSON_Delete(o);
    }
    data_lines_close(&in);
    if (fclose(f) != 0)
        cannot_write("data qa", out);
    data_commit();
    free(exs);
    printf("%s: %" PRId64 " examples with %s rows -> %s", a->file, with_rows, a->part, out);
    if (a->v2)
        printf(" (%" PRId64 " of them no answer)", nulls);
    if (scored)
        printf("; exact match %.2f, F1 %.2f over the %" PRId64 "%s (SQuAD%s's)",
               100 * em / (double)scored, 100 * f1 / (double)scored, scored,
               a->v2 ? "" : " with answers", a->v2 ? " v2" : "");
    printf("\n");
    return 0;
}
