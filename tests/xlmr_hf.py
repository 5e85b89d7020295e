"""XLM-RoBERTa: a SentencePiece Unigram tokenizer.json (its Precompiled normalizer) in C
against `tokenizers`, and trainc import hf and export hf of
XLMRobertaForSequenceClassification against transformers.

HF_PYTHON (transformers 4.40.2 over Debian's torch, with sentencepiece: make deps) runs
this; without them it exits 77 (a skip). No hub: a Unigram model trained here by
sentencepiece (nmt_nfkc, its default normalization) over Debian's license texts and
lines of many scripts, converted by transformers' XLMRobertaTokenizerFast into the
tokenizer.json XLM-R's checkpoints ship (Precompiled, Strip, Replace of space runs,
Metaspace, <s> A </s>, <mask> with lstrip); a tiny random-weight model saved here.

- `data text --tokenizer`: the ids of Tokenizer.from_file(F).encode(text).ids for a text
  of the license files and hard cases many times over (full-width letters, ligatures,
  combining accents after letters the charsmap rewrites, CRLF, controls, zero-width and
  soft hyphens, Hangul jamo, emoji sequences and flags, Devanagari conjuncts, ideographic
  spaces, runs of spaces, tabs and newlines, <mask> in the text, white space at its end),
  whole and read in parts of 64 and 999 bytes (cut after newlines); and with the charsmap
  of a SentencePiece model trained with a rule file (keys of two characters: e and a
  combining acute, CRLF); and by a vocabulary made here whose paths tie in score (the
  first piece offered at each end kept, as tokenizers keeps it);
- `data classify` rows: transformers' tokenizer(texts, truncation, padding) ids;
- imported, the model's `--eval` loss equals transformers' over those rows within 1e-5;
  8 AdamW steps within 1e-4 of torch's;
- trained 5 steps and exported (as RoBERTa: the same layers), transformers'
  from_pretrained of the folder computes trainc's --eval loss within 1e-5, and its
  AutoTokenizer (the tokenizer.json given to export) the same ids;
- XLMRobertaForTokenClassification: `data tags` rows are transformers'
  tokenizer(words, is_split_into_words=True) (each word a text of its own), and the
  import's `--eval` loss transformers' within 1e-5;
- XLMRobertaForMaskedLM: `data mlm` finds <mask> and the special tokens, and the import's
  `--eval` loss is transformers' over the rows within 1e-5;
- CamemBERT (CamembertTokenizerFast's file of the same SentencePiece model, its unused
  ids first; CamembertForSequenceClassification): data text's ids, data classify's rows
  and the import's `--eval` loss as above;
- refused, naming the key: a Unigram model with byte_fallback, a normalizer step trainc
  does not know.
"""
import base64
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch

try:
    import sentencepiece as spm
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (AutoModelForSequenceClassification, AutoTokenizer,
                              CamembertConfig, CamembertForSequenceClassification,
                              CamembertTokenizerFast, XLMRobertaConfig, XLMRobertaForMaskedLM,
                              XLMRobertaForSequenceClassification,
                              XLMRobertaForTokenClassification, XLMRobertaTokenizerFast)
except ImportError:
    print("skip xlmr_hf: transformers or sentencepiece is not importable from %s (make deps "
          "makes a venv with them)" % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_hf import ROOT, check, eval_loss, failed, refused, rel, saved, trainc  # noqa: E402
import run_log  # noqa: E402
from text_hf import license_lines, sentencepiece_unigram, train_like_specs  # noqa: E402
from tokenizer_hf import shard_ids  # noqa: E402

OUT = os.path.join(ROOT, "build", "tests", "xlmr_hf")
TRAINC = os.environ.get("TRAINC", os.path.join(ROOT, "build", "trainc"))
T = 32
torch.set_num_threads(1)
torch.manual_seed(0)
transformers.logging.set_verbosity_error()

SCRIPTS = ["naïve café résumé Ünïcödé ß Ω Привет мир Γειά σου עברית العربية",
           "हिन्दी क्षत्रिय क़िला 日本語のテキスト 中文文本 한국어 텍스트 ｆｕｌｌ ｗｉｄｔｈ",
           "ﬁne ﬂow ① ⑩ ℡ ™ ½ Ⅻ ㍿ ｈｅｌｌｏ　ｗｏｒｌｄ ｶﾞｷﾞ 👍🏽 🇫🇷"]
HARD = ("e\u0301 ﬁ\u0301 Ａ\u0308 ｶ\u3099 \r\n line\r\nCRLF \x01 \x7f \u00ad soft\u00adhyphen "
        "\u200b zero\u200bwidth \u1100\u1161\u11a8 \u1100\u1161 한\u11a8 "
        "👨\u200d👩\u200d👧 🇫🇷🇩🇪 🏳\ufe0f\u200d🌈 👍🏽 क्षत्रिय \u0958\u094d\u0937 "
        "ﬀ ㍿ ｈｅｌｌｏ　ｗｏｒｌｄ 　 \u3000 ¨ ´ \u2028 sep \u2029 para \u0085 nel \t\t tabs"
        "    spaces   end  <mask>  x <mask>y\n\n\n")


def tokenizer(lines):
    """sentencepiece's Unigram over LINES, as XLMRobertaTokenizerFast writes it"""
    return sentencepiece_unigram(os.path.join(OUT, "tok"), lines)


RULES = [("FF46", "66"), ("FB01", "66 69"), ("A", "20"), ("9", "20"), ("65 301", "E9"),
         ("D A", "20"), ("FF41", "61"), ("3000", "20")]


def ruled(tok):
    """TOK with the charsmap of a SentencePiece model trained with RULES (a normalization
    rule file: keys of two characters, a ligature, CRLF as one space) in its place"""
    d = os.path.join(OUT, "rules")
    os.makedirs(d)
    with open(d + "/rules.tsv", "w") as f:
        f.writelines("%s\t%s\n" % r for r in RULES)
    spm.SentencePieceTrainer.train(input=os.path.join(OUT, "tok", "corpus.txt"),
                                   model_prefix=d + "/spm", vocab_size=300, model_type="unigram",
                                   normalization_rule_tsv=d + "/rules.tsv", minloglevel=2)
    from transformers.convert_slow_tokenizer import import_protobuf   # (its proto, loaded)
    m = import_protobuf().ModelProto()
    m.ParseFromString(open(d + "/spm.model", "rb").read())
    j = json.load(open(tok))
    j["normalizer"]["normalizers"][0]["precompiled_charsmap"] = base64.b64encode(
        m.normalizer_spec.precompiled_charsmap).decode()
    json.dump(j, open(d + "/tokenizer.json", "w"), ensure_ascii=False)
    return d + "/tokenizer.json"


def text_case(tok, corpus):
    text = (HARD + "\n".join(SCRIPTS) + "\n") * 3 + "\n".join(corpus) + " end \t  "
    path = os.path.join(OUT, "text.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    ids_agree(tok, path, text, ", Precompiled", (None, 64, 999))
    ids_agree(ruled(tok), path, text, ", Precompiled, a charsmap of rules", (None,))


def ties_case():
    """a vocabulary whose paths tie (a + b and ab score the same): tokenizers keeps the
    first piece offered at each end (the longest from the leftmost start), and so must
    data text"""
    vocab = [("<unk>", 0.0), ("\u2581", -1.0), ("a", -1.0), ("b", -1.0), ("ab", -2.0),
             ("\u2581a", -2.0), ("\u2581ab", -3.0), ("ba", -2.0), ("c", -1.5), ("bc", -2.5),
             ("abc", -3.5)]
    t = Tokenizer(models.Unigram(vocab, unk_id=0))
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    tok, path = os.path.join(OUT, "ties.json"), os.path.join(OUT, "ties.txt")
    t.save(tok)
    text = "ab aab bab abc babc abab cab bcab aabcc\n" * 3
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    ids_agree(tok, path, text, ", paths that tie", (None,))


def ids_agree(tok, path, text, what, chunks):
    """data text of PATH (TEXT) by TOK, whole and in parts of CHUNKS bytes, against
    tokenizers' encode of the whole"""
    want = Tokenizer.from_file(tok).encode(text).ids
    for chunk in chunks:   # (the whole, and parts cut after newlines)
        env = dict(os.environ, **({"TRAINC_TEXT_CHUNK": str(chunk)} if chunk else {}))
        out = "%s/shards_%s_%d" % (OUT, chunk, len(what))
        r = subprocess.run([TRAINC, "data", "text", path, out, "--tokenizer", tok, "--val-frac",
                            "0"], env=env, capture_output=True, text=True)
        got = shard_ids(out + "/train_000000.bin")[0] if r.returncode == 0 else []
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b),
                     min(len(got), len(want)))
        check(got == want, "data text --tokenizer (Unigram%s)%s: %d ids, tokenizers' "
              "encode of the whole text%s" % (what, " in parts of %d bytes" % chunk if chunk else "",
                                              len(want), "" if got == want else
                                              " (first differs at %d)" % first))


def rows_case(hf, tok, imp, lines):
    """data classify's rows against transformers' tokenizer call"""
    exs = [{"text": l, "label": ["neg", "neu", "pos"][i % 3]} for i, l in enumerate(lines)]
    for part, chunk in (("train", exs[:96]), ("val", exs[96:128])):
        with open("%s/%s.jsonl" % (imp, part), "w", encoding="utf-8") as f:
            f.writelines(json.dumps(e, ensure_ascii=False) + "\n" for e in chunk)
    trainc("data", "classify", imp + "/train.jsonl", imp + "/data", "--tokenizer",
           tok, "--model", imp + "/model.json", "--val",
           imp + "/val.jsonl")
    ok = True
    for part, chunk in (("train", exs[:96]), ("val", exs[96:128])):
        want = hf([e["text"] for e in chunk], truncation=True, max_length=T, padding="max_length")
        ok &= np.array_equal(np.load("%s/data/%s_x.npy" % (imp, part)), np.array(want["input_ids"]))
    check(ok, "data classify: every row's x is transformers' tokenizer(text, truncation=True, "
          "max_length=%d, padding=\"max_length\")" % T)
    return exs


def hf_rows(imp, part):
    x, y = (np.load("%s/data/%s_%s.npy" % (imp, part, k)) for k in ("x", "y"))
    return torch.from_numpy(x).long(), torch.from_numpy((x != 1).astype(np.int64)), \
        torch.from_numpy(y).long()


def hf_loss(m, rows):
    x, mask, y = rows
    return m(input_ids=x, attention_mask=mask, labels=y).loss


def hf_eval(m, rows):
    m.eval()
    with torch.no_grad():
        return float(hf_loss(m, rows))


def specs(imp):
    keys = [k for k in ("x", "types", "pos", "y") if os.path.exists("%s/data/train_%s.npy" % (imp, k))]
    base = {"data": {p: {k: "data/%s_%s.npy" % (p, k) for k in keys} for p in ("train", "val")},
            "batch_size": 16, "precision": "fp32", "loader": {"shuffle": False}, "seed": 1}
    opt = {"type": "adamw", "lr": 1e-3, "weight_decay": 0.01}
    json.dump({"trainc": 1, "train": dict(base, batch_size=32, epochs=1)}, open(imp + "/eval.json", "w"))
    json.dump({"trainc": 1, "train": dict(base, max_steps=8, log_every=1, optimizer=opt,
                                          grad_clip=0.5, schedule={"type": "linear",
                                                                   "warmup_steps": 3,
                                                                   "final_lr_frac": 0.1})},
              open(imp + "/train8.json", "w"))


def config(vocab):
    return XLMRobertaConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2,
                            num_attention_heads=4, intermediate_size=48, hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0, max_position_embeddings=T + 2,
                            type_vocab_size=1, pad_token_id=1, num_labels=3,
                            id2label={0: "neg", 1: "neu", 2: "pos"},
                            label2id={"neg": 0, "neu": 1, "pos": 2})


def model_case(tok, hf, vocab, lines):
    d = os.path.join(OUT, "cls")
    cfg = config(vocab)
    m = saved(XLMRobertaForSequenceClassification, cfg, d + "/src", 0.3)
    imp = d + "/import"
    r = trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T)
    check("xlm-roberta" in r.stdout, "XLMRobertaForSequenceClassification imports (%s)"
          % r.stdout.strip().splitlines()[-1][:100])
    rows_case(hf, tok, imp, lines)
    specs(imp)
    va = hf_rows(imp, "val")
    ours, theirs = eval_loss(imp + "/model.json", imp + "/eval.json", imp + "/init.safetensors",
                             d + "/eval0"), hf_eval(m, va)
    check(rel(ours, theirs) <= 1e-5, "imported, trainc --eval %.7f, transformers' %.7f (%.1e)"
          % (ours, theirs, rel(ours, theirs)))
    trainc("run", imp + "/model.json", imp + "/train8.json", "--init", imp + "/init.safetensors",
           "--threads", 1, "--quiet", "--out", d + "/run8")
    ours8 = run_log.losses(d + "/run8")
    tr = hf_rows(imp, "train")
    batches = [[a[b:b + 16] for a in tr] for b in range(0, 96, 16)]
    theirs8 = train_like_specs(XLMRobertaForSequenceClassification.from_pretrained(d + "/src"),
                               batches, hf_loss)
    worst = max(rel(a, b) for a, b in zip(ours8, theirs8))
    check(len(ours8) == 8 and worst <= 1e-4, "8 AdamW steps, every loss within %.1e of torch's "
          "on transformers' XLM-R (first %.6f, last %.6f)" % (worst, ours8[0], ours8[-1]))
    trainc("export", "hf", imp + "/model.json", imp + "/eval.json", "--weights",
           d + "/run8/model.safetensors", "--tokenizer", tok, "-o", d + "/hf")
    back = AutoModelForSequenceClassification.from_pretrained(d + "/hf")
    ours = eval_loss(imp + "/model.json", imp + "/eval.json", d + "/run8/model.safetensors",
                     d + "/eval8")
    theirs = hf_eval(back, va)
    again = AutoTokenizer.from_pretrained(d + "/hf")
    same = again(lines[:20])["input_ids"] == hf(lines[:20])["input_ids"]
    check(rel(ours, theirs) <= 1e-5 and same, "trained, exported (%s), from_pretrained's loss "
          "%.7f, trainc --eval %.7f (%.1e); its AutoTokenizer gives the same ids"
          % (back.config.architectures[0], theirs, ours, rel(ours, theirs)))


def val_losses(m, d):
    """trainc's --eval of D/import's weights on its val rows, and transformers' M there"""
    xs, ys = (np.load(d + "/import/data/val_%s.npy" % k) for k in ("x", "y"))
    with torch.no_grad():
        theirs = float(m.eval()(input_ids=torch.from_numpy(xs).long(),
                                attention_mask=torch.from_numpy((xs != 1).astype(np.int64)),
                                labels=torch.from_numpy(ys).long()).loss)
    return eval_loss(d + "/import/model.json", d + "/import/eval.json",
                     d + "/import/init.safetensors", d + "/eval0"), theirs


def token_case(tok, hf, vocab, lines):
    """a token classifier: data tags' rows (each word a text of its own) and the loss"""
    d = os.path.join(OUT, "tags")
    m = saved(XLMRobertaForTokenClassification, config(vocab), d + "/src", 0.3)
    trainc("import", "hf", d + "/src", "-o", d + "/import", "--seq-len", T)
    words = [l.split()[:20] for l in lines[:48]]
    with open(d + "/tags.jsonl", "w", encoding="utf-8") as f:
        for i, w in enumerate(words):
            f.write(json.dumps({"tokens": w, "ner_tags": [(i + k) % 3 for k in range(len(w))]},
                               ensure_ascii=False) + "\n")
    trainc("data", "tags", d + "/tags.jsonl", d + "/import/data", "--tokenizer", tok, "--model",
           d + "/import/model.json", "--val-frac", 0.25)
    want = hf(words[36:], is_split_into_words=True, truncation=True, max_length=T,
              padding="max_length")
    x = np.load(d + "/import/data/val_x.npy")
    specs(d + "/import")
    ours, theirs = val_losses(m, d)
    check(np.array_equal(x, np.array(want["input_ids"])) and rel(ours, theirs) <= 1e-5,
          "XLMRobertaForTokenClassification: data tags' rows are transformers' tokenizer(words, "
          "is_split_into_words=True); --eval %.7f, transformers' %.7f (%.1e)"
          % (ours, theirs, rel(ours, theirs)))


def mlm_case(tok, vocab, lines):
    """a masked LM: data mlm's rows and the loss"""
    d = os.path.join(OUT, "mlm")
    m = saved(XLMRobertaForMaskedLM, config(vocab), d + "/src", 0.3)
    trainc("import", "hf", d + "/src", "-o", d + "/import", "--seq-len", T)
    with open(d + "/text.txt", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    r = trainc("data", "mlm", d + "/text.txt", d + "/import/data", "--tokenizer", tok, "--model",
               d + "/import/model.json", "--val-frac", 0.25)
    specs(d + "/import")
    xs, ys = (np.load(d + "/import/data/val_%s.npy" % k) for k in ("x", "y"))
    chosen = ys != -100
    ours, theirs = val_losses(m, d)
    mask = Tokenizer.from_file(tok).token_to_id("<mask>")
    check("mask id %d" % mask in r.stdout and (xs[chosen] == mask).mean() > 0.6 and
          not np.isin(ys[chosen], [0, 1, 2, 3]).any() and rel(ours, theirs) <= 1e-5,
          "XLMRobertaForMaskedLM: data mlm masks with <mask> (%d), never a special token; "
          "--eval %.7f, transformers' %.7f (%.1e)" % (mask, ours, theirs, rel(ours, theirs)))


def camembert_case(lines):
    """CamemBERT: its tokenizer (CamembertTokenizerFast of the same SentencePiece model) and
    a CamembertForSequenceClassification"""
    d = os.path.join(OUT, "camembert")
    hf = CamembertTokenizerFast(vocab_file=os.path.join(OUT, "tok", "spm.model"))
    hf.save_pretrained(d + "/tok")
    tok = d + "/tok/tokenizer.json"
    path = os.path.join(OUT, "text.txt")
    ids_agree(tok, path, open(path, encoding="utf-8").read(), ", Precompiled, CamemBERT's", (None,))
    cfg = CamembertConfig(**dict(config(len(hf)).to_dict(), model_type="camembert"))
    m = saved(CamembertForSequenceClassification, cfg, d + "/src", 0.3)
    imp = d + "/import"
    trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T)
    rows_case(hf, tok, imp, lines)
    specs(imp)
    ours, theirs = eval_loss(imp + "/model.json", imp + "/eval.json", imp + "/init.safetensors",
                             d + "/eval0"), hf_eval(m, hf_rows(imp, "val"))
    check(rel(ours, theirs) <= 1e-5, "CamembertForSequenceClassification imports: trainc --eval "
          "%.7f, transformers' %.7f (%.1e)" % (ours, theirs, rel(ours, theirs)))


def bad_cases(tok):
    d = os.path.join(OUT, "bad")
    os.makedirs(d)
    j = json.load(open(tok))
    with open(d + "/text.txt", "w") as f:
        f.write("hello\n")
    for name, edit, text in (
            ("byte_fallback", lambda j: j["model"].update(byte_fallback=True),
             "model.byte_fallback: true with a Unigram model is not supported"),
            ("a normalizer step", lambda j: j["normalizer"]["normalizers"].append({"type": "NFKD"}),
             "normalizer type 'NFKD' with a Unigram model is not supported")):
        k = json.loads(json.dumps(j))
        edit(k)
        path = "%s/%s.json" % (d, name.replace(" ", "_"))
        json.dump(k, open(path, "w"))
        refused("a Unigram tokenizer.json with %s" % name,
                ["data", "text", d + "/text.txt", d + "/o_" + name[:4], "--tokenizer", path], text,
                d + "/o_" + name[:4])


shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
corpus = [" ".join(w) for w in license_lines()]
rng = np.random.default_rng(5)
lines = [corpus[int(i)] for i in rng.integers(0, len(corpus), size=128)]
lines[::9] = [l + " " + SCRIPTS[i % 3] for i, l in enumerate(lines[::9])]
tok, hf = tokenizer(corpus + SCRIPTS * 20)
text_case(tok, corpus)
ties_case()
model_case(tok, hf, len(hf), lines)
token_case(tok, hf, len(hf), lines)
mlm_case(tok, len(hf), lines)
camembert_case(lines)
bad_cases(tok)
print("xlmr_hf: %s (transformers %s)" % ("FAILED" if failed else "ok", transformers.__version__))
sys.exit(1 if failed else 0)
