/* tokenizer.h: the tokenizer of a Hugging Face tokenizer.json (BPE, WordPiece, Unigram), shared
 * by `trainc data text --tokenizer` and a trainer's --tokenizer (tokenizer.c).
 *
 * What it reads: model BPE (vocab, merges as "a b" strings or [a, b] pairs,
 * ignore_merges, unk_token, fuse_unk), added_tokens (matched in the text before
 * pre-tokenization, leftmost-longest, special ones too), a TemplateProcessing,
 * RobertaProcessing or BertProcessing post-processor (a BOS before the text; a
 * classifier's specials around one text or a pair), and either
 * - byte-level BPE: the pre-tokenizer as GPT-2 (ByteLevel with its regex), Llama 3,
 *   Qwen2, GPT-4o and Tekken (Sequence[Split(Regex), ByteLevel]) and StarCoder
 *   (Sequence[Digits, ByteLevel]) write it, and an NFC normalizer on text it leaves as
 *   it is; or
 * - SentencePiece-style BPE (Llama 2, Mistral): the normalizer Sequence[Prepend("▁"),
 *   Replace(" ", "▁")] with no pre-tokenizer, or a Metaspace pre-tokenizer ("▁", any
 *   prepend_scheme, split or not) with no normalizer; byte_fallback; added tokens
 *   unnormalized.
 * - WordPiece (BERT's): the BertNormalizer (or none) and the BertPreTokenizer
 *   (wordpiece.c); added tokens unnormalized.
 * - Unigram (XLM-RoBERTa's, as transformers converts SentencePiece's models): vocab of
 *   [piece, score], unk_id; a normalizer of Precompiled (precompiled.c), Strip and
 *   Replace(Regex " {2,}", "▁") steps; a Metaspace pre-tokenizer (unigram.c); added
 *   tokens normalized or not. Its text is cut after newlines the charsmap writes as
 *   spaces, where a Strip follows (XLM-R's); else it is read whole.
 * Anything else (another normalizer, pattern or model type) is
 * refused at load, named. Encoding gives the ids of `tokenizers`'
 * Tokenizer.encode(text).ids. */
#ifndef RT_TOKENIZER_H
#define RT_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>

typedef struct rt_tokenizer rt_tokenizer;

/* A growing array of token ids. */
typedef struct rt_ids {
    uint32_t *v;
    int64_t n, cap;
} rt_ids;

/* Loads FILE; NULL with a message in err (naming what is not supported) on failure. */
rt_tokenizer *rt_tok_load(const char *path, char *err, size_t errlen);
void rt_tok_free(rt_tokenizer *t);

/* The number of ids: the largest id in the vocabulary or the added tokens, plus one. */
int64_t rt_tok_vocab(const rt_tokenizer *t);

/* Appends the ids of text[0, n) without the post-processor's tokens: what a part of a
 * longer text contributes when cut where rt_tok_safe_cut says. */
void rt_tok_encode_part(rt_tokenizer *t, const char *text, size_t n, rt_ids *out);

/* Appends the ids of a whole text without the post-processor's tokens (as
 * apply_chat_template(tokenize=True) encodes what its template writes): a part that
 * starts a text (a SentencePiece-style tokenizer's U+2581 prepended). */
void rt_tok_encode_text(rt_tokenizer *t, const char *text, size_t n, rt_ids *out);

/* Appends the ids of one word of a text given as words, as transformers'
 * tokenizer(words, is_split_into_words=True) encodes it: each word apart (its added
 * tokens matched within it), a byte-level BPE's with GPT-2's pattern with a space before
 * each span between added tokens that does not start with one (ByteLevel's
 * add_prefix_space, which GPT-2's and RoBERTa's tokenizers ask for with words), any other
 * (WordPiece, Unigram, SentencePiece-style BPE, Llama 3's and Qwen2's patterns) as a text
 * of its own. Returns -1 (and encodes nothing) for Digits before ByteLevel (StarCoder's,
 * where add_prefix_space would put a space before each digit's piece). */
int rt_tok_encode_word(rt_tokenizer *t, const char *word, size_t n, rt_ids *out);
/* Words without the space before them whatever the pattern (BARE 1): transformers' plain
 * PreTrainedTokenizerFast (ModernBERT's) encodes pre-tokenized words as tokenizer.json's
 * ByteLevel says, add_prefix_space false; 0 (the default): as rt_tok_encode_word says. */
void rt_tok_words_bare(rt_tokenizer *t, int bare);

/* Appends the ids of a whole text (as rt_tok_encode_text) and, for each, two values to
 * offs: the first byte of the text it stands for and one past its last, as tokenizers'
 * offsets_mapping gives them in characters (a byte-level token that holds a piece of a
 * character takes the whole character; spaces trimmed as the post-processor's
 * trim_offsets says; a WordPiece token's characters before normalization, an unk its
 * word's; a Unigram token's from the alignments its normalizer and Metaspace leave, as
 * tokenizers' NormalizedString keeps them: align.c). -1 (and the ids and offsets
 * half-written) for a SentencePiece-style BPE tokenizer, whose offsets trainc does not
 * compute, or a byte-level text whose ids do not spell it (a byte no entry names; an added
 * token's stripped white space). */
int rt_tok_encode_offsets(rt_tokenizer *t, const char *text, size_t n, rt_ids *out, rt_ids *offs);

/* The post-processor's ids before (prefix) and after (suffix) a whole text; prefix
 * also marks a text's start (a SentencePiece-style tokenizer prepends its U+2581 at
 * the start of a text, not of a part that continues one). */
void rt_tok_prefix(rt_tokenizer *t, rt_ids *out);
void rt_tok_suffix(const rt_tokenizer *t, rt_ids *out);

/* The post-processor as a classifier's rows take it: whether it has a template for a pair
 * of texts; how many special ids it adds to one text (pair 0) or a pair (1); and the
 * ids and type ids of text A's ids (and B's: NULL for one text) with them
 * (Tokenizer.encode(a, b).ids and .type_ids; without a post-processor A then B, B's
 * type 1). RobertaProcessing's type ids are all 0, as transformers gives RoBERTa's
 * model none. */
int rt_tok_has_pair(const rt_tokenizer *t);
int64_t rt_tok_added(const rt_tokenizer *t, int pair);
void rt_tok_template(const rt_tokenizer *t, const rt_ids *a, const rt_ids *b, rt_ids *ids,
                     rt_ids *types);

/* Whether id is an added token the file marks special ([CLS], <mask>, ...): one a masked
 * LM's data never masks. */
int rt_tok_special(const rt_tokenizer *t, uint32_t id);

/* The padding id: tokenizer.json's padding.pad_id, else the id of an added "<pad>" or
 * "[PAD]", else -1. */
int64_t rt_tok_pad_id(const rt_tokenizer *t);

/* Prefix, part, suffix: Tokenizer.encode(text).ids. */
void rt_tok_encode(rt_tokenizer *t, const char *text, size_t n, rt_ids *out);

/* The largest p in (0, n), p >= from, at which text[0, p) and text[p, n) encode to the
 * ids of text[0, n) whatever follows text[n] (a newline between two printable ASCII
 * characters, where every supported pattern splits; SentencePiece-style, a newline
 * whose symbol is in no merge; either not next to white space an added token's lstrip
 * or rstrip takes), or 0 when there is none. */
size_t rt_tok_safe_cut(const rt_tokenizer *t, const char *text, size_t n, size_t from);

/* With an NFC normalizer (Qwen2's): the offset of the first character in text[0, n)
 * whose presence may make NFC change the text (its code point in *cp), or n when
 * there is none, so that the text is its own NFC and encodes as it is. trainc does not
 * implement NFC's changes: a caller refuses a text where this is below n. Without a
 * normalizer: n. */
size_t rt_tok_unnormalized(const rt_tokenizer *t, const char *text, size_t n, uint32_t *cp);

/* The bytes id stands for: the byte-level map undone (SentencePiece-style: U+2581 as a
 * space, <0xXX> as its byte), an added token's content as written; NULL for an id that
 * names no token. */
const char *rt_tok_piece(const rt_tokenizer *t, uint32_t id, size_t *len);

/* The id text encodes to (a part: no post-processor) when it is one token (an added
 * token's content, "<|eot_id|>"), else -1; *n: how many ids it is. */
int64_t rt_tok_one_id(rt_tokenizer *t, const char *text, int64_t *n);

/* s[0, n) without its leading and trailing white space as Python's str.strip() (Jinja's
 * trim) takes it: Unicode's White_Space and U+001C-U+001F. Returns the length left and
 * its start in *start. */
size_t rt_utf8_strip(const char *s, size_t n, size_t *start);

void rt_ids_push(rt_ids *a, uint32_t id);
void rt_ids_free(rt_ids *a);

#endif
