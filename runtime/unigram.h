/* unigram.h: the Unigram model of a SentencePiece-made tokenizer.json (XLM-RoBERTa's,
 * T5's; unigram.c) and its Precompiled normalizer (precompiled.c), for tokenizer.c,
 * which reads the file, matches the added tokens and cuts the words (Metaspace). */
#ifndef RT_UNIGRAM_H
#define RT_UNIGRAM_H
#include <stddef.h>
#include <stdint.h>
#include "tokenizer.h"

/* The Unigram model: the id of a vocabulary piece, or -1 (LOOKUP over CTX); each id's
 * score (log-probability); unk's id and score (the lowest score less 10, as tokenizers
 * gives a character no piece covers); the longest piece in bytes */
typedef struct {
    int64_t (*lookup)(void *ctx, const char *s, size_t n);
    void *ctx;
    const double *score;
    int64_t unk;
    double unk_score;
    size_t max_len;
} rt_unigram;

/* Appends the ids of the word s[0, n): the pieces of the highest total score (Viterbi
 * over the lattice of every piece that starts at each character; a later start wins no
 * tie), runs of characters no piece covers fused into one unk, as tokenizers 0.19's
 * Unigram::encode_optimized; with lens, each id's length in bytes too */
void rt_ug_encode(const rt_unigram *u, const unsigned char *s, size_t n, rt_ids *out,
                  rt_ids *lens);

/* SentencePiece's precompiled_charsmap: a double-array trie over UTF-8 strings whose
 * values index NUL-ended replacements */
typedef struct {
    uint32_t *trie;
    size_t trie_n;
    char *repl;
    size_t repl_n;
} rt_precompiled;

/* Reads the base64 text of precompiled_charsmap; -1 (with the reason in err) when it is
 * not one */
int rt_pc_load(rt_precompiled *p, const char *b64, char *err, size_t errlen);
void rt_pc_free(rt_precompiled *p);
/* s[0, n) normalized into *out (grown as needed; its length in *out_n), as tokenizers
 * 0.19's Precompiled: each extended grapheme cluster shorter than 6 bytes whose leading
 * bytes the trie knows (the shortest such prefix) is replaced whole, else each character
 * the trie knows is replaced */
void rt_pc_normalize(const rt_precompiled *p, const unsigned char *s, size_t n, char **out,
                     size_t *cap, size_t *out_n);
/* A character of a normalized text and how it came from the one before, as tokenizers'
 * NormalizedString::transform takes it: change 0, it replaces the next character; 1, it is
 * new; -k, it replaces the next character and k more are removed */
typedef struct {
    uint32_t c;
    int32_t change;
} rt_change;
/* rt_pc_normalize's text as such changes into *out (grown; their count in *out_n), as
 * tokenizers 0.19's Precompiled writes them: a replacement's characters 0, the last ones
 * 1 where it is longer than what it replaces, the last one -k where it is k shorter (an
 * empty one: the character before it, if any, takes the -k) */
void rt_pc_changes(const rt_precompiled *p, const unsigned char *s, size_t n, rt_change **out,
                   size_t *cap, size_t *out_n);

/* A normalized text with tokenizers' alignments (align.c): each byte's [a, b) in the
 * original text, that of the character it came from */
typedef struct {
    uint32_t a, b;
} rt_span;
typedef struct {
    unsigned char *s;
    rt_span *al;
    size_t n, cap;
} rt_altext;
/* x := s[0, n) as it is, its bytes at base + their place (each a whole character's span) */
void rt_at_set(rt_altext *x, const unsigned char *s, size_t n, size_t base);
/* n bytes s appended to x, each aligned to al */
void rt_at_put(rt_altext *x, const unsigned char *s, size_t n, rt_span al);
/* x := x[from, to) */
void rt_at_slice(rt_altext *x, size_t from, size_t to);
/* x rewritten by the changes d[0, nd) after its first `removed` characters are dropped:
 * NormalizedString::transform_range over the whole text (a new character takes the
 * alignment of the byte before it, (0, 0) at the start; a replacing one, that of the
 * character it replaces) */
void rt_at_transform(rt_altext *x, const rt_change *d, size_t nd, size_t removed);
void rt_at_free(rt_altext *x);

/* The end of the extended grapheme cluster that starts at s[i] (i < n; UAX #29 with
 * Unicode 15.1's rules) */
size_t rt_grapheme_end(const unsigned char *s, size_t i, size_t n);

#endif
