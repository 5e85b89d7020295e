"""BERT's WordPiece tokenizer (runtime/wordpiece.c) against Hugging Face `tokenizers`.

HF_PYTHON (tokenizers, with transformers 4.40.2) runs this; without it it exits 77 (a
skip). BertWordPieceTokenizer's trained here over Debian's license texts (no hub):
uncased (lowercase, accents stripped: bert-base-uncased's normalizer), cased (neither:
bert-base-cased's), and accents stripped without lowercase; with bert-base-uncased's
TemplateProcessing ([CLS] A [SEP], pairs [CLS] A [SEP] B [SEP], B's type 1), the cased
one with BertProcessing. For each:

- every test string (accents as one character and as combining marks, Turkish İ, Greek
  capitals, ß, CJK ideographs (spaced apart) beside kana and Hangul (decomposed when
  accents are stripped), Arabic, Thai and Devanagari marks, emoji, control and format
  characters, tabs and newlines, ASCII and Unicode punctuation, a word past
  max_input_chars_per_word, words no piece starts, the special tokens in the text) and 300
  license lines: `trainc data classify`'s row is `Tokenizer.encode(text).ids`, id for id,
  and a pair's `encode(a, b)`'s ids and type ids;
- `trainc data text --tokenizer` over the license texts (streamed in parts) gives
  `encode(whole file).ids`;
- a WordPiece tokenizer with a BPE pre-tokenizer, and BertNormalizer over BPE, exit 1
  naming them.
"""
import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np

try:
    from tokenizers import BertWordPieceTokenizer, Tokenizer, processors
except ImportError:
    print("skip wordpiece_hf: tokenizers is not importable from %s (make deps)" % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_hf import ROOT, TRAINC, check, failed, trainc  # noqa: E402

OUT = os.path.join(ROOT, "build", "tests", "wordpiece_hf")
T = 400

STRINGS = [
    "Hello, World! It's a test.",
    "naïve café résumé Ångström Œuvre",
    "nai\u0308ve cafe\u0301 (combining marks)",
    "İstanbul ΣΟΦΙΑ ΟΔΥΣΣΕΥΣ straße ǅ ﬁnancial",
    "日本語のテキスト 中文字符 한국어 𠀀𪜀",
    "مَرْحَبًا بالعالم שָׁלוֹם",
    "สวัสดีครับ नमस्ते दुनिया",
    "emoji 😀👍🏽 and ✓ ★ marks",
    "tabs\tand\nnewlines\r\n and  spaces\u00a0nbsp\u2003em",
    "control \x07 bell \u200b zero width \ufeff BOM \u00ad soft hyphen",
    "Mr. O'Neil's $5.00 (approx.) – “quotes” «guillemets» — dash… ¿qué? ¡sí!",
    "a[CLS]b [SEP] [MASK]x [PAD]",
    "supercalifragilisticexpialidocious" * 4,
    "zzzzqqqq xylophonic qqqzzz",
    "3.14159 2,000,000 1/2 50% #hashtag @user foo_bar a+b=c",
    "",
]


def license_text():
    files = sorted(f for f in glob.glob("/usr/share/common-licenses/**", recursive=True)
                   if os.path.isfile(f) and not os.path.islink(f))
    return "".join(open(f, encoding="utf-8", errors="replace").read() for f in files)


def trained(name, corpus, template, **norm):
    """bert-base-uncased's post-processor (TemplateProcessing), or BertProcessing"""
    tok = BertWordPieceTokenizer(**norm)
    tok.train_from_iterator(corpus + STRINGS, vocab_size=3000, show_progress=False)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)]) if template else \
        processors.BertProcessing(("[SEP]", sep), ("[CLS]", cls))
    path = os.path.join(OUT, name + ".json")
    tok.save(path)
    return path, Tokenizer.from_file(path)


def model_spec(d):
    """the classifier's inputs data classify reads: rows of T, 2 classes, positions"""
    spec = {"trainc": 1, "model": {"inputs": {"x": {"shape": [T], "dtype": "i32"},
                                              "types": {"shape": [T], "dtype": "i32"},
                                              "pos": {"shape": [T], "dtype": "i32"},
                                              "y": {"shape": [], "dtype": "i32", "classes": 2}},
                                   "positions": "pos"}}
    json.dump(spec, open(d + "/model.json", "w"))
    return d + "/model.json"


def rows(name, path, texts, pairs):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    with open(d + "/in.jsonl", "w") as f:
        for i, t in enumerate(texts):
            e = {"text": t, "label": 0}
            if pairs:
                e["b"] = pairs[i]
            f.write(json.dumps(e, ensure_ascii=False) + "\n")
    opts = ["--pair", "b"] if pairs else []
    trainc("data", "classify", d + "/in.jsonl", d + "/out", "--tokenizer", path, "--model",
           model_spec(d), "--val-frac", 0, *opts)
    return np.load(d + "/out/train_x.npy"), np.load(d + "/out/train_types.npy"), \
        np.load(d + "/out/train_pos.npy")


def ids_of(x, pos):
    """each row's ids: those before the padding's positions start again"""
    out = []
    for r, p in zip(x, pos):
        n = next((i for i in range(1, T) if p[i] == 0), T)
        out.append(list(r[:n]))
    return out


def case(name, corpus, lines, template, **norm):
    path, tok = trained(name, corpus, template, **norm)
    texts = STRINGS + lines
    x, _, pos = rows(name, path, texts, None)
    ours = ids_of(x, pos)
    bad = [(t, o, tok.encode(t).ids) for t, o in zip(texts, ours) if o != tok.encode(t).ids]
    for t, o, w in bad[:3]:
        print("  %r:\n    trainc       %s\n    tokenizers   %s" % (t[:60], o[:20], w[:20]))
    check(not bad, "%s: %d texts, every id tokenizers' (%d differ)" % (name, len(texts), len(bad)))
    a, b = STRINGS[:-1], list(reversed(STRINGS[:-1]))
    x, types, pos = rows(name + "_pairs", path, a, b)
    ours = ids_of(x, pos)
    want = [tok.encode(p, q) for p, q in zip(a, b)]
    ok = all(o == w.ids and list(ty[:len(o)]) == w.type_ids for o, ty, w in zip(ours, types, want))
    check(ok, "%s: %d pairs, their ids and type ids tokenizers'" % (name, len(a)))
    return path, tok


def text_case(path, tok, text):
    d = os.path.join(OUT, "text")
    os.makedirs(d, exist_ok=True)
    with open(d + "/in.txt", "w") as f:
        f.write(text)
    trainc("data", "text", d + "/in.txt", d + "/shards", "--tokenizer", path, "--val-frac", 0)
    raw = open(glob.glob(d + "/shards/train_*.bin")[0], "rb").read()
    ours = list(np.frombuffer(raw[1024:], dtype=np.uint16))
    want = tok.encode(text).ids
    check(ours == want, "data text over %d bytes of license text: %d ids, tokenizers' %d%s" %
          (len(text), len(ours), len(want), "" if ours == want else " (differ)"))


def bad_cases(path):
    j = json.load(open(path))
    for what, edit, text in (
            ("WordPiece with a ByteLevel pre-tokenizer",
             {"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                "use_regex": True}},
             "pre_tokenizer ByteLevel with a WordPiece model is not supported"),
            ("WordPiece without its unk token", {"model": dict(j["model"], unk_token="[NONE]")},
             "model.unk_token: WordPiece needs one in its vocabulary")):
        p = os.path.join(OUT, "bad.json")
        json.dump(dict(j, **edit), open(p, "w"))
        r = subprocess.run([TRAINC, "data", "text", p, OUT + "/bad_out", "--tokenizer", p],
                           capture_output=True, text=True)
        check(r.returncode == 1 and text in r.stderr, "refused: %s (%s)" % (what, r.stderr.strip()))


shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
text = license_text()
corpus = text.splitlines()
lines = [l for l in corpus if l.strip()][::40][:300]
path, tok = case("uncased", corpus, lines, True, lowercase=True)
case("cased", corpus, lines, False, lowercase=False, strip_accents=False)
case("stripped", corpus, lines, True, lowercase=False, strip_accents=True)
text_case(path, tok, text[:200000])
bad_cases(path)
print("wordpiece_hf: %s" % ("FAILED" if failed else "ok"))
sys.exit(1 if failed else 0)
