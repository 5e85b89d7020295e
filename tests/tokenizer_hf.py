"""`trainc data text --tokenizer` against Hugging Face `tokenizers`, id for id.

Trains small byte-level BPE tokenizers here with `tokenizers` (no hub): GPT-2's
pre-tokenizer (ByteLevel with its regex), Llama 3's and Qwen2's (Split(Regex) then
ByteLevel; Llama 3's with ignore_merges and a BOS template), GPT-4o's and Tekken's
(Split(Regex) then ByteLevel: words cut where lower-case letters follow upper-case
ones), StarCoder's (Digits with individual_digits, then ByteLevel with its regex) and
Digits of whole runs, each with added special tokens, over Debian's license texts. Then tokenizes the license texts and a text of
multi-byte UTF-8, emoji, digit runs, contractions (upper-case too), whitespace runs,
tabs and newlines, a text of long words and a random one (and 90,000 random words for
the GPT-2-style one: more than the word cache holds), with trainc, whole and in tiny parts (TRAINC_TEXT_CHUNK), from the
file as `tokenizers` writes it and with its merges rewritten as [a, b] pairs, and
compares the shard's ids with Tokenizer.from_file(F).encode(text).ids. The same for
SentencePiece-style BPEs (sp_cases), for added tokens with lstrip and rstrip
(strip_cases) and for GPT-NeoX's (neox_case: NFC, added tokens of spaces matched in the
normalized text). Also: a vocabulary over 65536 gives uint32
shards; unsupported parts are refused by name.

Run with the venv's python (HF_PYTHON): exits 77 (skipped) without `tokenizers`.
usage: HF_PYTHON tests/tokenizer_hf.py [OUTDIR]
"""
import glob
import json
import os
import random
import shutil
import struct
import subprocess
import sys

try:
    from tokenizers import (Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                            processors, trainers)
except ImportError:
    print("skip: the `tokenizers` package is not installed (make deps makes .venv/hf)")
    sys.exit(77)

TRAINC = os.environ.get("TRAINC", "build/trainc")
OUT = sys.argv[1] if len(sys.argv) > 1 else "build/tests/tokenizer_hf"

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# GPT-4o's (o200k) and Mistral's Tekken: upper-case letters, then lower-case ones
CASED = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+%s|"
         r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*%s|"
         r"\p{N}%s| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
O200K = CASED % ((r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",) * 2 + ("{1,3}",))
TEKKEN = CASED % ("", "", "")
SPLIT = {"llama3": LLAMA3, "qwen2": QWEN2, "o200k": O200K, "tekken": TEKKEN}

# the hard cases, each a few times over, so that several parts of a small chunk meet them
HARD = (
    "Hello World! It's IT'S they're THEY'RE we've WE'VE I'm I'M you'll YOU'LL he'd HE'D "
    "'s 't 'sound 'Sound 'LLama 'VEry 'Dare 'ſound ''s ’s l'ſ'Ll IT'Sound x'ſound WE'VEry "
    "O'Neil don'T I'Mean she'Dare\n"
    "digits 1 12 123 1234 12345 1234567890 3.14159 1,000,000 ²³ ½ Ⅻ ٣٤٥ ４５\n"
    "naïve café résumé e\u0301 Ünïcödé ß ẞ Ω ω Привет мир Γειά σου עברית العربية हिन्दी\n"
    "日本語のテキスト 中文文本 한국어 텍스트 ｆｕｌｌ ｗｉｄｔｈ\n"
    "emoji 🙂👍🏽 👨‍👩‍👧 🇫🇷 ❤️ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \U0001F600\U0001F600\n"
    "\ttab\t\ttabs\t \t mixed\n"
    "   leading spaces, trailing spaces   \n"
    "many     spaces    between  words\n\n\n\n"
    "crlf line\r\nand\r\n\r\nmore\r\r\n old mac\rline\r x\r\x0bwords\n"
    "spaces:\u2000en\u2005four\u200ahair\u205fmath\u1680ogham\u0085nel\x0bvt\x0cff\u200bzw "
    "runs \u200a\u2009 of\u200a\u200a!? them\u3000 \u00a0\n\u2028 end\u200a\n"
    "nbsp\u00a0here\u00a0\u00a0twice, ideographic\u3000space, line\u2028separator\u2029para\n"
    "punctuation!!! ...??? (parens) [brackets] {braces} <angles> \"quotes\" #hash @at $5.00 "
    "100% a&b a|b a\\b ~!@#$%^&*()_+-=\n"
    "special <|endoftext|> tokens<|begin_of_text|>inline<|end_of_text|>\n"
    "code: if (x == 1) { return y->z[2]; }  // comment\n"
    "HelloWorld camelCase XMLHttpRequest ABCdef iPhone ǅungla ʰmod Ǆ ÀÉÎõü ΑΒΓδε ДЖзи 日本Ab\n"
    "a/b ./\n/path/to .\n/x x.\n\n// it's ABC'S Don't WE'LL\n"
    "\x00\x01\x7f control \x1b[0m\n"
    "  \n \n\t\n  x\n"
)
TEXT = HARD * 3 + "end   "
# for Qwen2's NFC normalizer, which trainc applies only where it changes nothing: no
# combining marks (a decomposed é, Devanagari's virama), no U+2000 (NFC: U+2002)
# long words: BPE over a heap from 48 symbols on; words past the cache's 64 bytes
LONG = ("=" * 5000 + " " * 3000 + "a" * 4000 + "ab" * 3000 + "\n" + "-" * 777 + "\n" + "0" * 100 +
        "".join("abcdefghijklmnop"[(i * 7919) % 13] for i in range(20000)) + " " +
        " ".join(["thethethe" * 30] * 10) + "\n\n" + "é" * 300 + "🙂" * 100)
# random text from the characters the patterns treat apart (all NFC-stable)
PALETTE = ["a", "B", "z", "é", "ß", "ſ", "Ω", "日", "1", "²", "٣", "'", "’", " ", "  ", "\t", "\n",
           "\r", "\r\n", "\u00a0", "\u3000", "\u200a", "!", "?", ".", "-", "(", "🙂", "s", "t",
           "re", "ve", "ll", "d", "m", "S", "T", "RE", "LL", "D", "M", "<|endoftext|>", "\x00",
           "/", "ǅ", "ʰ", "Ab", "aB"]
_rng = random.Random(5)
RANDOM = "".join(_rng.choice(PALETTE) for _ in range(20000))
TEXT_NFC = TEXT.replace("e\u0301", "\u00e9").replace("हिन्दी", "Hindi").replace("\u2000", "\u2002")
# added tokens that take the white space beside them (content, lstrip, rstrip): Phi-3's
# chat tokens rstrip, RoBERTa's <mask> lstrip; in chat-like text with runs of white space
STRIPS = [("<|user|>", False, True), ("<|assistant|>", False, True), ("<|end|>", False, True),
          ("<mask>", True, False), ("<both>", True, True)]
STRIP_TEXT = ("<|user|>\nhello there<|end|>\n<|assistant|>\n\n  sure thing <|end|>  \n\u3000 x <mask> "
              "y\n\n<mask>z <both> \n w\na  \n<mask>\n<|assistant|>\u2028\u00a0q\n<|end|>\n<|end|>x\n"
              "\n <mask><mask> <both><both>\nx\n  <mask>\n<mask>") * 7


def license_text():
    files = sorted(f for f in glob.glob("/usr/share/common-licenses/**", recursive=True)
                   if os.path.isfile(f) and not os.path.islink(f))   # find -type f, as the Makefile
    return "".join(open(f, encoding="utf-8", errors="replace").read() for f in files)


def trained(kind, corpus, vocab):
    """A tokenizer of the given kind trained over corpus (a list of strings)."""
    specials = (["<|begin_of_text|>", "<|end_of_text|>"] if kind in ("llama3", "qwen2")
                else ["<|endoftext|>"])
    tok = Tokenizer(models.BPE(ignore_merges=(kind == "llama3")))
    if kind == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    elif kind in ("starcoder", "digit_runs"):   # StarCoder's: Digits, then GPT-2's regex
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=(kind == "starcoder")),
            pre_tokenizers.ByteLevel(add_prefix_space=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(SPLIT[kind]), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    if kind == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    if kind == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=True)
    return tok


SP_SPECIALS = ["<unk>", "<s>", "</s>"]


def sp_trained(corpus, vocab, words=False):
    """A SentencePiece-style BPE as Llama 2's tokenizer.json has it, trained over corpus:
    the normalizer Prepend("▁") and Replace(" ", "▁"), no pre-tokenizer, byte_fallback
    with the 256 <0xXX> tokens in the vocabulary (ids 3-258, not added tokens), unk
    fused, a BOS template, Llama 2's decoder. words: trained on words cut before each
    run of "▁" as SentencePiece cuts them (no token then holds another character and a
    "▁", as in Llama 2's vocabulary, but "▁▁" and "▁▁x" are tokens); else on whole
    texts (tokens such as "e▁")."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                           normalizers.Replace(" ", "\u2581")])
    if words:   # a run of "▁" and the characters after it, as SentencePiece keeps "▁▁▁x"
        tok.pre_tokenizer = pre_tokenizers.Split(Regex("\u2581*[^\u2581]+|\u2581+"), "isolated")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    specials = SP_SPECIALS + ["<0x%02X>" % b for b in range(256)]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials,
                                                        show_progress=False))
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    j = json.loads(tok.to_str())
    j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] in SP_SPECIALS]
    j["pre_tokenizer"] = None
    return j


def sp_variants(base):
    """Llama 2's file, and the other spellings of SentencePiece-style BPE over the same
    vocabulary: Metaspace (no normalizer) with prepend_scheme first, always with split,
    never; Gemma's normalizer (Replace(" ", "▁") alone: nothing prepended), also with a
    Split on " " (which finds none); and without
    byte_fallback (unknown characters one fused unk)."""
    def meta(scheme, split):
        j = json.loads(json.dumps(base))
        j["normalizer"] = None
        j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581",
                              "prepend_scheme": scheme, "split": split}
        return j
    unk = json.loads(json.dumps(base))
    unk["model"]["byte_fallback"] = False
    gemma = json.loads(json.dumps(base))
    gemma["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
    # transformers' later Gemma files: a Split on " ", which finds none after the normalizer
    gemma_split = json.loads(json.dumps(gemma))
    gemma_split["pre_tokenizer"] = {"type": "Split", "pattern": {"String": " "},
                                    "behavior": "MergedWithPrevious", "invert": False}
    return {"sp_llama2": base, "sp_first": meta("first", False),
            "sp_always_split": meta("always", True), "sp_never": meta("never", False),
            "sp_gemma": gemma, "sp_gemma_split": gemma_split, "sp_unk": unk}


def shard_ids(path):
    with open(path, "rb") as f:
        data = f.read()
    magic, version, n = struct.unpack("<3i", data[:12])
    width = {(20240520, 1): 2, (20240801, 7): 4}[(magic, version)]
    body = data[1024:]
    assert len(body) == n * width, (path, len(body), n, width)
    return list(struct.unpack("<%d%s" % (n, "H" if width == 2 else "I"), body)), width


def trainc_ids(tok_json, text_file, name, chunk=None):
    out = os.path.join(OUT, "shards_" + name)
    env = dict(os.environ)
    if chunk:
        env["TRAINC_TEXT_CHUNK"] = str(chunk)
    r = subprocess.run([TRAINC, "data", "text", text_file, out, "--tokenizer", tok_json,
                        "--val-frac", "0"], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("FAIL: %s: trainc data text exited %d: %s" % (name, r.returncode, r.stderr))
    return shard_ids(os.path.join(out, "train_000000.bin"))


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def compare(tok, tok_json, text, text_file, name, chunk=None, want_width=2):
    want = tok.encode(text).ids
    got, width = trainc_ids(tok_json, text_file, name, chunk)
    if got != want or width != want_width:
        i = first_diff(got, want)
        sys.exit("FAIL: %s: %d ids (uint%d), tokenizers %d (uint%d expected); first difference "
                 "at %d: trainc %s, tokenizers %s (tokens %s)" %
                 (name, len(got), 8 * width, len(want), 8 * want_width, i, got[i:i + 5],
                  want[i:i + 5], [tok.id_to_token(x) for x in want[i:i + 5]]))
    print("ok   %-34s %7d ids%s" % (name, len(want), " (parts of %d bytes)" % chunk if chunk else ""))


def pair_merges(src, dst):
    """The same tokenizer with its merges as [a, b] pairs (tokenizers 0.20's form)."""
    with open(src, encoding="utf-8") as f:
        j = json.load(f)
    j["model"]["merges"] = [m.split(" ") for m in j["model"]["merges"]]
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)


def words_tokenizer(src, texts, dst):
    """src with every word its pre-tokenizer cuts from texts in the vocabulary, whole."""
    pre = Tokenizer.from_file(src).pre_tokenizer
    with open(src, encoding="utf-8") as f:
        j = json.load(f)
    vocab = j["model"]["vocab"]
    j["model"]["ignore_merges"] = True
    j["model"]["merges"] = []   # a word not whole in the vocabulary: its bytes
    for text in texts:
        for word, _ in pre.pre_tokenize_str(text):
            if word not in vocab:
                vocab[word] = len(vocab)
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)


def refused(tok_json, edit, want, name):
    with open(tok_json, encoding="utf-8") as f:
        j = json.load(f)
    edit(j)
    bad = os.path.join(OUT, "bad_" + name + ".json")
    with open(bad, "w", encoding="utf-8") as f:
        json.dump(j, f)
    r = subprocess.run([TRAINC, "data", "text", os.path.join(OUT, "hard.txt"),
                        os.path.join(OUT, "shards_bad"), "--tokenizer", bad],
                       capture_output=True, text=True)
    if r.returncode != 1 or want not in r.stderr:
        sys.exit("FAIL: refusal %s: exit %d, stderr %r (wanted exit 1 naming %r)" %
                 (name, r.returncode, r.stderr, want))
    print("ok   refused: %s" % r.stderr.strip())


def sp_cases(lic, files):
    """SentencePiece-style BPE: each variant over the texts (with <s> and </s> inline, where
    the prepended U+2581 differs), whole and in parts; trained without newlines, so that a
    newline is <0x0A> and the parts are cut after it, and with them (a newline in the
    vocabulary and its merges: no cut, one part); trained on words as SentencePiece
    cuts them (trainc then cuts each part into words at each run of "▁")."""
    # without U+0000: a vocabulary entry of it reads as an empty string (refused); Llama 2's
    # vocabulary has none (<0x00>)
    tail = "\n<s>at start</s> after\n</s>x <s> y\n  two lead\n\u2581meta lead <s>\u2581\n"
    sp_files = {"licenses": lic, "hard": TEXT.replace("\x00", "") + tail, "long": LONG,
                "random": RANDOM.replace("\x00", "") + tail}
    for k, v in sp_files.items():
        with open(os.path.join(OUT, "sp_" + k + ".txt"), "w", encoding="utf-8", newline="") as f:
            f.write(v)
    corpus = lic.split("\n\n") + [HARD.replace("\x00", "")]
    flat = sp_trained([c.replace("\n", " ") for c in corpus], 1200)
    with_nl = sp_trained(corpus, 1200)
    cases = sp_variants(flat)
    cases["sp_newlines"] = with_nl
    cases["sp_words"] = sp_trained([c.replace("\n", " ") for c in corpus], 1200, words=True)
    for kind, j in cases.items():
        tj = os.path.join(OUT, kind + ".json")
        with open(tj, "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False)
        tok = Tokenizer.from_file(tj)
        for name, text in sp_files.items():
            tf = os.path.join(OUT, "sp_" + name + ".txt")
            compare(tok, tj, text, tf, "%s/%s" % (kind, name))
            compare(tok, tj, text, tf, "%s/%s" % (kind, name), chunk=61 if name == "licenses" else 3)


def strip_cases():
    """Added tokens with lstrip and rstrip: a SentencePiece-style BPE with Phi-3's
    normalizer (every piece after an added token gets its U+2581) and Llama 3's with
    them unnormalized and normalized, over STRIP_TEXT whole and in parts."""
    tf = os.path.join(OUT, "strip.txt")
    with open(tf, "w", encoding="utf-8", newline="") as f:
        f.write(STRIP_TEXT)
    for kind, normalized in (("sp_llama2", (False,)), ("llama3", (False, True))):
        with open(os.path.join(OUT, kind + ".json"), encoding="utf-8") as f:
            j = json.load(f)
        for k, (content, lstrip, rstrip) in enumerate(STRIPS):
            j["added_tokens"].append({"id": 5000 + k, "content": content, "single_word": False,
                                      "lstrip": lstrip, "rstrip": rstrip, "special": True,
                                      "normalized": normalized[k % len(normalized)]})
        tj = os.path.join(OUT, kind + "_strip.json")
        with open(tj, "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False)
        tok = Tokenizer.from_file(tj)
        for chunk in (None, 3, 5, 17):
            compare(tok, tj, STRIP_TEXT, tf, kind + "/lstrip and rstrip", chunk=chunk)


def neox_case():
    """GPT-NeoX's tokenizer (Pythia, OLMo): GPT-2's pre-tokenizer after an NFC normalizer,
    with added tokens for runs of 2 to 24 spaces that match the normalized text, over the
    NFC text whole and in parts."""
    with open(os.path.join(OUT, "gpt2.json"), encoding="utf-8") as f:
        j = json.load(f)
    j["normalizer"] = {"type": "NFC"}
    first = max(j["model"]["vocab"].values()) + 1
    for k, n in enumerate(range(24, 1, -1)):
        j["added_tokens"].append({"id": first + k, "content": " " * n, "single_word": False,
                                  "lstrip": False, "rstrip": False, "normalized": True,
                                  "special": False})
    tj = os.path.join(OUT, "neox.json")
    with open(tj, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    tok = Tokenizer.from_file(tj)
    for chunk in (None, 3):
        compare(tok, tj, TEXT_NFC, os.path.join(OUT, "hard_nfc.txt"), "neox/hard_nfc", chunk=chunk)


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    lic = license_text()
    files = {"licenses": lic, "hard": TEXT, "hard_nfc": TEXT_NFC, "long": LONG, "random": RANDOM}
    for k, v in files.items():
        with open(os.path.join(OUT, k + ".txt"), "w", encoding="utf-8", newline="") as f:
            f.write(v)
    corpus = lic.split("\n\n") + [HARD]
    for kind, vocab in (("gpt2", 2000), ("llama3", 3000), ("qwen2", 1500), ("starcoder", 1500),
                        ("digit_runs", 1000), ("o200k", 2500), ("tekken", 2000)):
        tok = trained(kind, corpus, vocab)
        tj = os.path.join(OUT, kind + ".json")
        tok.save(tj)
        tok = Tokenizer.from_file(tj)
        pj = os.path.join(OUT, kind + "_pairs.json")
        pair_merges(tj, pj)
        for name, text in files.items():
            if name == ("hard" if kind == "qwen2" else "hard_nfc"):
                continue   # Qwen2's NFC: the NFC text; the others: the text with marks
            tf = os.path.join(OUT, name + ".txt")
            compare(tok, tj, text, tf, "%s/%s" % (kind, name))
            compare(tok, pj, text, tf, "%s/%s (pair merges)" % (kind, name))
            compare(tok, tj, text, tf, "%s/%s" % (kind, name), chunk=61 if name == "licenses" else 3)
    # every word whole: each word `tokenizers`' pre-tokenizer cuts from the texts added
    # to the vocabulary, with ignore_merges and no merges, so that a word is one id and
    # a word cut elsewhere than tokenizers cuts it shows as its bytes (with trained
    # merges the pieces of two cuts often coincide)
    for kind in ("gpt2", "llama3", "qwen2", "starcoder", "digit_runs", "o200k", "tekken"):
        tj = os.path.join(OUT, kind + "_words.json")
        names = ("licenses", "hard_nfc" if kind == "qwen2" else "hard", "long", "random")
        words_tokenizer(os.path.join(OUT, kind + ".json"), [files[n] for n in names], tj)
        tok = Tokenizer.from_file(tj)
        for name in names:
            compare(tok, tj, files[name], os.path.join(OUT, name + ".txt"),
                    "%s/%s (words whole, %d ids)" % (kind, name, tok.get_vocab_size()))
    # more distinct words than the word cache holds (2^16): it grows from 1024 slots and
    # starts over, the ids unchanged
    wr = random.Random(11)
    many = " ".join("".join(wr.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(wr.randint(3, 9)))
                    for _ in range(90000))
    mf = os.path.join(OUT, "many_words.txt")
    with open(mf, "w", encoding="utf-8") as f:
        f.write(many)
    compare(Tokenizer.from_file(os.path.join(OUT, "gpt2.json")), os.path.join(OUT, "gpt2.json"), many,
            mf, "gpt2/many_words (90,000 words: the cache grown, then started over)")
    sp_cases(lic, files)
    strip_cases()
    neox_case()
    # validation: the last tenth of the ids; shards of at most 10000 ids
    tj = os.path.join(OUT, "gpt2.json")
    want = Tokenizer.from_file(tj).encode(lic).ids
    out = os.path.join(OUT, "shards_split")
    subprocess.run([TRAINC, "data", "text", os.path.join(OUT, "licenses.txt"), out, "--tokenizer",
                    tj, "--val-frac", "0.1", "--shard-tokens", "10000"], check=True,
                   capture_output=True)
    parts = {k: [shard_ids(f)[0] for f in sorted(glob.glob(os.path.join(out, k + "_*.bin")))]
             for k in ("train", "val")}
    n_val = len(want) // 10
    got = [x for k in ("train", "val") for p in parts[k] for x in p]
    if (got != want or sum(map(len, parts["val"])) != n_val or
            any(len(p) > 10000 for k in parts for p in parts[k])):
        sys.exit("FAIL: --val-frac 0.1 --shard-tokens 10000: shards of %s ids, %d wanted, "
                 "the last %d for validation" % ({k: list(map(len, v)) for k, v in parts.items()},
                                                 len(want), n_val))
    print("ok   gpt2/licenses, --val-frac 0.1 --shard-tokens 10000: %d + %d shards" %
          (len(parts["train"]), len(parts["val"])))
    # a vocabulary over 65536: uint32 shards
    tj = os.path.join(OUT, "llama3.json")
    with open(tj, encoding="utf-8") as f:
        j = json.load(f)
    j["model"]["vocab"]["<|big|>"] = 70000   # a vocabulary entry with a high id, as GPT-2's
    j["added_tokens"].append({"id": 70000, "content": "<|big|>", "single_word": False,
                              "lstrip": False, "rstrip": False, "normalized": False,
                              "special": True})
    big = os.path.join(OUT, "llama3_big.json")
    with open(big, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    text = TEXT + "<|big|> and <|big|>"
    tf = os.path.join(OUT, "big.txt")
    with open(tf, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    compare(Tokenizer.from_file(big), big, text, tf, "llama3/big vocabulary", want_width=4)
    # what is not supported is refused, named
    refused(tj, lambda j: j.__setitem__("normalizer", {"type": "NFKC"}), "'NFKC'", "nfkc")
    refused(tj, lambda j: j.__setitem__("normalizer", {"type": "NFC"}), "U+0301", "nfc_marks")
    refused(tj, lambda j: j["pre_tokenizer"]["pretokenizers"][0]["pattern"].__setitem__("Regex", r"\w+"),
            r"'\w+'", "pattern")
    refused(tj, lambda j: j["model"].__setitem__("type", "WordLevel"), "'WordLevel'", "model")
    refused(tj, lambda j: j.__setitem__("pre_tokenizer", {"type": "Whitespace"}), "'Whitespace'",
            "pre_tokenizer")
    refused(tj, lambda j: j["added_tokens"][0].__setitem__("single_word", True), "single_word",
            "single_word")
    print("tokenizer_hf: all ids equal")


if __name__ == "__main__":
    main()
