/* wordpiece.h: BERT's tokenizer as Hugging Face's tokenizer.json writes it (wordpiece.c):
 * the BertNormalizer, the BertPreTokenizer's words and the WordPiece model's greedy
 * longest-match pieces, for tokenizer.c, which reads the file and matches the added
 * tokens; and the text helpers the two share (tokenizer.c's). */
#ifndef RT_WORDPIECE_H
#define RT_WORDPIECE_H
#include <stddef.h>
#include <stdint.h>
#include "tokenizer.h"

/* The code point at s[i] (i < n) and its length in *len (1, and 0xFFFFFFFF, for a byte
 * that starts no valid UTF-8 sequence) */
uint32_t rt_utf8_at(const unsigned char *s, size_t i, size_t n, size_t *len);
/* Unicode's White_Space (Oniguruma's \s, Rust's char::is_whitespace) */
int rt_uni_space(uint32_t c);
/* c's lower case, one code point by itself as Rust's char::to_lowercase (Python's
 * str.lower but for the final sigma): the first, and a second in *second (else 0) */
uint32_t rt_uni_tolower(uint32_t c, uint32_t *second);
/* c as UTF-8 at w (4 bytes of room); its length */
size_t rt_put_utf8(uint32_t c, char *w);
/* Is c in the sorted, disjoint, inclusive ranges r[0, n)? (unicode.c's tables) */
int rt_uni_in(uint32_t c, const uint32_t (*r)[2], int n);

/* BertNormalizer's switches (strip_accents null follows lowercase) */
typedef struct {
    int clean_text, chinese, strip_accents, lowercase;
} rt_bert_norm;

/* The WordPiece model: the id of a vocabulary entry, or -1 (LOOKUP over CTX); unk's id;
 * the prefix of a word's later pieces ("##"); the longest word in characters it splits
 * (longer ones are unk) */
typedef struct {
    int64_t (*lookup)(void *ctx, const char *s, size_t n);
    void *ctx;
    int64_t unk;
    char prefix[32];
    size_t prefix_len;
    int64_t max_chars;
} rt_wordpiece;

/* Appends the ids of s[0, n): normalized as NORM says (NULL: not at all), cut into words
 * at white space and around each punctuation character, each word's pieces; with OFFS
 * (else NULL), two values an id: the first byte of s it stands for and one past its last
 * (tokenizers' offsets, in bytes: a piece's characters' before normalization; an unk's,
 * its whole word's) */
void rt_wp_encode(const rt_bert_norm *norm, const rt_wordpiece *wp, const unsigned char *s,
                  size_t n, rt_ids *out, rt_ids *offs);

#endif
