/* unigram.c: the Unigram model's pieces of a word, as tokenizers 0.19 finds them
 * (Unigram::encode_optimized): the best path through the lattice of every vocabulary
 * piece that starts at each character, by the sum of the pieces' scores, the unk token
 * for a character no single-character piece covers, and runs of unk fused into one. */
#include <stdlib.h>
#include "unigram.h"
#include "wordpiece.h"

/* The best path to each byte position: its score, where its last piece starts (-1: not
 * reached) and that piece's id */
typedef struct {
    double score;
    int64_t from;
    int64_t id;
} Node;

/* Offers the piece s[at, end) (id, score) to the path ending at end */
static void offer(Node *node, size_t at, size_t end, int64_t id, double score)
{
    double cand = score + node[at].score;
    if (node[end].from < 0 || cand > node[end].score)
        node[end] = (Node){cand, (int64_t)at, id};
}

void rt_ug_encode(const rt_unigram *u, const unsigned char *s, size_t n, rt_ids *out,
                  rt_ids *lens)
{
    if (n == 0)
        return;
    Node *node = malloc((n + 1) * sizeof *node);
    if (!node)
        abort();
    for (size_t i = 0; i <= n; i++)
        node[i] = (Node){0.0, -1, -1};
    node[0].from = 0;
    for (size_t at = 0, len; at < n; at += len) {
        rt_utf8_at(s, at, n, &len);
        int single = 0;   /* a piece of exactly this character */
        for (size_t end = at + 1; end <= n && end - at <= u->max_len; end++) {
            int64_t id = u->lookup(u->ctx, (const char *)s + at, end - at);
            if (id < 0)
                continue;
            offer(node, at, end, id, u->score[id]);
            single |= end - at == len;
        }
        if (!single)
            offer(node, at, at + len, u->unk, u->unk_score);
    }
    size_t m = 0;   /* the path, back from the end, then forward */
    int64_t *ids = malloc((n + 1) * sizeof *ids), *ends = malloc((n + 1) * sizeof *ends);
    for (int64_t e = (int64_t)n; e > 0 && node[e].from >= 0; e = node[e].from)
        ids[m] = node[e].id, ends[m++] = e;   /* (every character's end is reached) */
    int64_t from = 0;
    for (size_t k = m; k-- > 0;) {
        if (ids[k] == u->unk && k > 0 && ids[k - 1] == u->unk)
            continue;   /* fused with the unk after it */
        rt_ids_push(out, (uint32_t)ids[k]);
        if (lens)
            rt_ids_push(lens, (uint32_t)(ends[k] - from));
        from = ends[k];
    }
    free(ids);
    free(ends);
    free(node);
}
