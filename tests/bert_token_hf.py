"""Token classifiers (named entities): trainc import hf and export hf of
BertForTokenClassification, RobertaForTokenClassification and
DistilBertForTokenClassification against transformers, and `trainc data tags` against
transformers' tokenizer(words, is_split_into_words=True).

HF_PYTHON (transformers 4.40.2 over Debian's torch) runs this; without transformers it
exits 77 (a skip). Tokenizers trained here over Debian's license texts (no hub): BERT's
WordPiece (lower case, accents stripped) and RoBERTa's byte-level BPE. Random-weight models
made here with save_pretrained, tiny, fp32, CPU, one thread, every tensor moved off
transformers' init. The examples are lines of those texts split into words, with
punctuation, accents, CJK and an added token among them, some too long for the rows, each
word tagged (by name or number) with one of 5 classes:

- `data tags`: every row of x is transformers' input_ids (RoBERTa's tokenizer made with
  add_prefix_space=True, as transformers asks for words), pos 0 .. L-1 over
  attention_mask's ones then 0 again, types token_type_ids, words word_ids() (-1 for
  None), y each word's tag on its first piece and -100 elsewhere (run_ner's
  label_all_tokens false); --all-pieces the tag on every piece; --unlabeled the rows
  alone;
- imported, trainc's `--eval` validation loss equals transformers' cross entropy over the
  tagged tokens of the same rows within 1e-5; `--predict` gives its logits within 1e-5
  on every token of the text (the padding's own outputs differ and nothing reads them);
- import then export gives back every tensor bit for bit;
- 8 AdamW steps (warm-up, linear decay, clipping) give every step's loss within 1e-4 of
  torch's AdamW on transformers' model;
- trained 5 steps and exported, transformers' from_pretrained computes trainc's --eval
  loss (within 1e-5), with the tags' names;
- `--task token --labels` over the family's other models (BertForMaskedLM, a RoBERTa
  sequence classifier, a bare DistilBertModel): the encoder as transformers' token
  classifier loads it, the new head drawn with std initializer_range, the loss equal;
- refused with exit 1, naming the key, the line or the option: a sequence classifier's
  checkpoint with --task token and no --labels, --task of another kind, --task mlm with
  a GPT-2, data tags for a sequence classifier and data classify for a token classifier, a
  line with more tags than words, a tag the model does not name, words that are not a
  list, a tokenizer with Digits before ByteLevel (StarCoder's).
"""
import glob
import json
import os
import shutil
import sys

import numpy as np
import torch
import torch.nn.functional as F

try:
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import (BertConfig, BertForTokenClassification, DistilBertConfig,
                              DistilBertForTokenClassification, RobertaConfig,
                              RobertaForTokenClassification)
    from safetensors.torch import load_file
except ImportError:
    print("skip bert_token_hf: transformers is not importable from %s (make deps makes a venv "
          "with it)" % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_hf import ROOT, check, eval_loss, failed, refused, rel, saved, trainc  # noqa: E402
from text_hf import (byte_level, exported_back, license_lines, parity_steps,  # noqa: E402
                     predictions, specs, trained_export, wordpiece)

OUT = os.path.join(ROOT, "build", "tests", "bert_token_hf")
T, N = 24, 128
TAGS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG"]
torch.set_num_threads(1)
torch.manual_seed(0)
transformers.logging.set_verbosity_error()


def examples(lines, rng, n, extra):
    """n lines of words with a tag each (names in two lines of three, else numbers); every
    fourth has EXTRA's hard words; some are longer than the rows"""
    out = []
    for i in range(n):
        words = list(lines[int(rng.integers(len(lines)))])[:int(rng.integers(1, 30))]
        if i % 4 == 0:
            words[int(rng.integers(len(words) + 1)):0] = extra
        tags = [int(t) for t in rng.integers(0, len(TAGS), size=len(words))]
        out.append({"tokens": words, "ner_tags": [TAGS[t] if i % 3 else t for t in tags]})
    return out


def write(path, exs):
    with open(path, "w") as f:
        for e in exs:
            f.write(json.dumps(e, ensure_ascii=False) + "\n")


def aligned(hf, exs, all_pieces=False):
    """transformers' rows of the words: ids, attention mask, type ids, word ids, labels"""
    enc = hf([e["tokens"] for e in exs], is_split_into_words=True, truncation=True, max_length=T,
             padding="max_length", return_token_type_ids=True)
    labels, words = [], []
    for r, e in enumerate(exs):
        tags = [TAGS.index(t) if isinstance(t, str) else t for t in e["ner_tags"]]
        row, prev = [], None
        wid = enc.word_ids(r)
        for w in wid:
            row.append(-100 if w is None else tags[w] if w != prev or all_pieces else -100)
            prev = w
        labels.append(row)
        words.append([-1 if w is None else w for w in wid])
    return (np.array(enc["input_ids"]), np.array(enc["attention_mask"]),
            np.array(enc["token_type_ids"]), np.array(words), np.array(labels))


def compare_rows(name, d, part, hf, exs, typed, all_pieces=False, labeled=True):
    ids, mask, types, words, labels = aligned(hf, exs, all_pieces)
    got = {k: np.load("%s/%s_%s.npy" % (d, part, k)) for k in ("x", "pos", "words")}
    lens = mask.sum(1)
    want_pos = np.array([list(range(k)) + list(range(T - k)) for k in lens])
    ok = (np.array_equal(got["x"], ids) and np.array_equal(got["pos"], want_pos) and
          np.array_equal(got["words"], words))
    if typed:
        ok &= np.array_equal(np.load("%s/%s_types.npy" % (d, part)), types)
    if labeled:
        ok &= np.array_equal(np.load("%s/%s_y.npy" % (d, part)), labels)
    else:
        ok &= not os.path.exists("%s/%s_y.npy" % (d, part))
    check(ok, "%s: data tags' %s rows (%d, %d full) are transformers' input_ids, positions, %s"
          "word_ids and %s" % (name, part, len(exs), int((lens == T).sum()),
                               "token_type_ids, " if typed else "",
                               ("labels (%s)" % ("every piece" if all_pieces else "first pieces"))
                               if labeled else "no y (--unlabeled)"))
    return ids, mask, types, labels


def inputs_of(d):
    return [k for k in json.load(open(d + "/model.json"))["model"]["inputs"]]


def logits_of(m, rows):
    ids, mask, types = (torch.from_numpy(a).long() for a in rows[:3])
    extra = {} if m.config.model_type == "distilbert" else {"token_type_ids": types}
    return m(input_ids=ids, attention_mask=mask, **extra).logits


def hf_loss(m, rows):
    """cross entropy over every tagged token of the rows (--eval's: their sum over their
    count)"""
    m.eval()
    with torch.no_grad():
        lg = logits_of(m, rows)
        y = torch.from_numpy(rows[3]).long()
        return float(F.cross_entropy(lg.double().flatten(0, 1), y.flatten(), ignore_index=-100))


def hf_batches(rows, B=16):
    """the training rows in order, as train8.json reads them"""
    return [[a[b:b + B] for a in rows] for b in range(0, len(rows[0]) - B + 1, B)]


def token_loss(m, b):
    return F.cross_entropy(logits_of(m, b).flatten(0, 1), torch.from_numpy(b[3]).long().flatten(),
                           ignore_index=-100)


def tagged(name, tok, hf, exs, imp, typed):
    """data tags over the examples (the last quarter for validation); the rows checked"""
    write(imp + "/tags.jsonl", exs)
    r = trainc("data", "tags", imp + "/tags.jsonl", imp + "/data", "--tokenizer", tok,
               "--model", imp + "/model.json", "--val-frac", 0.25)
    print("  " + r.stdout.strip())
    n_tr = N - N // 4
    tr = compare_rows(name, imp + "/data", "train", hf, exs[:n_tr], typed)
    va = compare_rows(name, imp + "/data", "val", hf, exs[n_tr:], typed)
    return tr, va


def case(name, cls, cfg, tok, hf, exs):
    d = os.path.join(OUT, name)
    m = saved(cls, cfg, d + "/src", 0.3)
    imp = d + "/import"
    trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T)
    spec = json.load(open(imp + "/model.json"))["model"]
    check(spec["inputs"]["y"]["shape"] == [T] and spec["loss"].get("ignore_index") == -100 and
          spec["inputs"]["y"].get("labels") == TAGS,
          "%s: import writes y [%d] with the tags' names, the loss's ignore_index -100" % (name, T))
    typed = "types" in inputs_of(imp)
    tr, va = tagged(name, tok, hf, exs, imp, typed)
    specs(imp, inputs_of(imp))
    ours, theirs = (eval_loss(imp + "/model.json", imp + "/eval.json", imp + "/init.safetensors",
                              d + "/eval0"), hf_loss(m, va))
    check(rel(ours, theirs) <= 1e-5, "%s: imported, trainc --eval %.7f, transformers %.7f over "
          "the %d tagged tokens (%.1e)" % (name, ours, theirs, int((va[3] != -100).sum()),
                                           rel(ours, theirs)))
    predicted(name, m, imp, va)
    a, b = exported_back(imp, d)
    skip = 2 if name == "roberta" else 0   # (RoBERTa's rows before position 0's)
    rows0 = "roberta.embeddings.position_embeddings.weight"
    if skip:
        a[rows0], b[rows0] = a[rows0][skip:], b[rows0][skip:]
    same = set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    check(same, "%s: import then export gives back the folder's %d tensors bit for bit" %
          (name, len(a)))
    parity_steps(name, imp, d, cls.from_pretrained(d + "/src"), hf_batches(tr), token_loss)
    ours = trained_export(imp, d)
    back = cls.from_pretrained(d + "/hf")
    theirs = hf_loss(back, va)
    check(rel(ours, theirs) <= 1e-5 and back.config.id2label == m.config.id2label and
          back.config.architectures == [cls.__name__],
          "%s: trained, exported as %s, from_pretrained's loss %.7f, trainc --eval %.7f (%.1e), "
          "the tags' names kept" % (name, back.config.architectures, theirs, ours, rel(ours, theirs)))


def predicted(name, m, imp, va):
    """--predict over the val rows (as test_*.npy): transformers' logits on the text"""
    ours = predictions(imp, imp + "/predict")
    with torch.no_grad():
        theirs = logits_of(m.eval(), va).numpy()
    text = va[1].astype(bool)
    worst = float(np.abs(ours[text] - theirs[text]).max() / np.abs(theirs[text]).max())
    check(ours.shape == theirs.shape and worst <= 1e-5, "%s: --predict's logits [%s] on the %d "
          "tokens of text within %.1e of transformers'" % (name, ", ".join(map(str, ours.shape)),
                                                           int(text.sum()), worst))


def new_head(name, base, cls, cfg, labels, rng, src_rows):
    """a checkpoint of another of the family's models imported with --task token --labels:
    transformers' token classifier from that folder, its new head replaced by trainc's
    draw, computes trainc's --eval loss"""
    d = os.path.join(OUT, name)
    saved(base, cfg, d + "/src", 0.3)
    imp = d + "/import"
    trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T, "--task", "token",
           "--labels", labels)
    K = json.load(open(imp + "/model.json"))["model"]["inputs"]["y"]["classes"]
    os.makedirs(imp + "/data")
    keys = inputs_of(imp)
    rows = list(src_rows)
    rows[3] = np.where(rows[3] == -100, -100, rng.integers(0, K, size=rows[3].shape))
    lens = rows[1].sum(1)
    arrays = {"x": rows[0], "types": rows[2], "y": rows[3],
              "pos": np.array([list(range(k)) + list(range(T - k)) for k in lens])}
    for part in ("train", "val"):
        for key in keys:
            np.save("%s/data/%s_%s.npy" % (imp, part, key), arrays[key].astype(np.int32))
    specs(imp, keys)
    ours = load_file(imp + "/init.safetensors")
    hf = cls.from_pretrained(d + "/src", num_labels=K, ignore_mismatched_sizes=True)
    with torch.no_grad():
        hf.classifier.weight.copy_(ours["head.weight"])
        hf.classifier.bias.copy_(ours["head.bias"])
    std = float(ours["head.weight"].std())
    loss = eval_loss(imp + "/model.json", imp + "/eval.json", imp + "/init.safetensors",
                     d + "/eval0")
    theirs = hf_loss(hf, rows)
    check(rel(loss, theirs) <= 1e-5 and abs(std / cfg.initializer_range - 1) < 0.25 and
          not ours["head.bias"].any() and "pooler.weight" not in ours,
          "%s: %s with --task token --labels %s: a new head [%d, %d] (std %.4f), no pooler; "
          "trainc --eval %.7f, transformers %.7f (%.1e)" %
          (name, base.__name__, labels, K, cfg.hidden_size if hasattr(cfg, "hidden_size")
           else cfg.dim, std, loss, theirs, rel(loss, theirs)))


def modes(tok, hf, exs, imp):
    """--all-pieces and --unlabeled over the BERT import"""
    d = os.path.join(OUT, "modes")
    write(d + ".jsonl", exs[:40])
    trainc("data", "tags", d + ".jsonl", d + "/all", "--tokenizer", tok, "--model",
           imp + "/model.json", "--val-frac", 0, "--all-pieces")
    compare_rows("bert", d + "/all", "train", hf, exs[:40], True, all_pieces=True)
    trainc("data", "tags", d + ".jsonl", d + "/test", "--tokenizer", tok, "--model",
           imp + "/model.json", "--unlabeled")
    compare_rows("bert", d + "/test", "test", hf, exs[:40], True, labeled=False)


def bad_cases(tok, bert_imp, corpus):
    d = os.path.join(OUT, "bad")
    os.makedirs(d)
    src = os.path.join(OUT, "seq_src")
    saved(transformers.BertForSequenceClassification,
          BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=24, max_position_embeddings=T), src, 0.1)
    refused("a sequence classifier's checkpoint with --task token, no --labels",
            ["import", "hf", src, "-o", d + "/o1", "--task", "token"],
            "BertForSequenceClassification: no token classifier; --labels names the classes",
            d + "/o1")
    refused("--task words", ["import", "hf", src, "-o", d + "/o2", "--task", "words"],
            "--task words: sequence (a class for each text), token (a class for each token)",
            d + "/o2")
    gpt = os.path.join(OUT, "gpt2_src")
    saved(transformers.GPT2LMHeadModel, transformers.GPT2Config(
        vocab_size=50, n_embd=16, n_layer=1, n_head=2, n_positions=T), gpt, 0.1)
    refused("--task mlm with a GPT-2", ["import", "hf", gpt, "-o", d + "/o3", "--task", "mlm"],
            "--task mlm: --task is a text classifier's (bert, roberta, xlm-roberta, camembert", d + "/o3")
    trainc("import", "hf", gpt, "-o", d + "/lm")
    write(d + "/lm.jsonl", [{"tokens": ["a"], "ner_tags": [0]}])
    refused("data tags for a language model",
            ["data", "tags", d + "/lm.jsonl", d + "/o8", "--tokenizer", tok, "--model",
             d + "/lm/model.json"], "a language model: its rows are `trainc data text` or "
            "`trainc data sft`'s", d + "/o8/train_x.npy")
    trainc("import", "hf", src, "-o", d + "/seq")
    line = {"tokens": ["a", "b"], "ner_tags": [0, 1]}
    write(d + "/one.jsonl", [line] * 4)
    refused("data tags for a sequence classifier",
            ["data", "tags", d + "/one.jsonl", d + "/o4", "--tokenizer", tok, "--model",
             d + "/seq/model.json"], "a class for each text: its rows are `trainc data classify`'s",
            d + "/o4")
    write(d + "/text.jsonl", [{"text": "a b", "label": 0}] * 4)
    refused("data classify for a token classifier",
            ["data", "classify", d + "/text.jsonl", d + "/o5", "--tokenizer", tok, "--model",
             bert_imp + "/model.json"], "a class for each token: its rows are `trainc data tags`'s",
            d + "/o5")
    for what, bad, text in (
            ("more tags than words", {"tokens": ["a"], "ner_tags": [0, 1]}, "2 tags for 1 words"),
            ("a tag the model does not name", {"tokens": ["a", "b"], "ner_tags": ["O", "B-LOC"]},
             "'ner_tags[1]' is \"B-LOC\": the model's classes are its labels' names or 0 to 4"),
            ("words that are not a list", {"tokens": "a b", "ner_tags": [0, 1]},
             "'tokens' must be a list of words")):
        write(d + "/bad.jsonl", [line, line, bad, line])
        refused(what, ["data", "tags", d + "/bad.jsonl", d + "/o6", "--tokenizer", tok, "--model",
                       bert_imp + "/model.json", "--val-frac", 0], "bad.jsonl:3: error: " + text,
                d + "/o6/train_x.npy")
        check(not glob.glob(d + "/o6/*"), "%s: nothing left in the folder" % what)
    sc = Tokenizer(models.BPE())   # (StarCoder's pre-tokenizer)
    sc.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                pre_tokenizers.ByteLevel(add_prefix_space=False)])
    sc.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                                       special_tokens=["<pad>"]))
    sc.save(d + "/digits.json")
    refused("Digits before ByteLevel (StarCoder's)", ["data", "tags", d + "/one.jsonl", d + "/o7",
                                                    "--tokenizer", d + "/digits.json", "--model",
                                                    bert_imp + "/model.json"],
            "Digits before ByteLevel (StarCoder's pre-tokenizer)", d + "/o7")


shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
rng = np.random.default_rng(7)
lines = license_lines()
corpus = [" ".join(l) for l in lines]
wp_path, bl_path = os.path.join(OUT, "wordpiece.json"), os.path.join(OUT, "bytelevel.json")
wp_hf, wp_vocab = wordpiece(wp_path, corpus)
bl_hf, bl_vocab = byte_level(bl_path, corpus, True)
labels = dict(id2label=dict(enumerate(TAGS)), label2id={t: k for k, t in enumerate(TAGS)})
small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
             hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, initializer_range=0.05)
wp_exs = examples(lines, rng, N, ["U.S.", "naïve", "Café", "日本語", "(c)", "[MASK]"])
case("bert", BertForTokenClassification,
     BertConfig(vocab_size=wp_vocab, max_position_embeddings=40, **small, **labels),
     wp_path, wp_hf, wp_exs)
bl_exs = examples(lines, rng, N, ["U.S.", "naïve", "日本語", "ab<mask>cd", "<mask>", "x-y"])
case("roberta", RobertaForTokenClassification,
     RobertaConfig(vocab_size=bl_vocab, max_position_embeddings=T + 2, type_vocab_size=1,
                   pad_token_id=1, layer_norm_eps=1e-5, hidden_act="gelu_pytorch_tanh", **small,
                   **labels),
     bl_path, bl_hf, bl_exs)
case("distilbert", DistilBertForTokenClassification,
     DistilBertConfig(vocab_size=wp_vocab, dim=32, n_layers=2, n_heads=4, hidden_dim=48,
                      max_position_embeddings=40, dropout=0.0, attention_dropout=0.0, **labels),
     wp_path, wp_hf, wp_exs)
bert_imp = os.path.join(OUT, "bert", "import")
bert_va = aligned(wp_hf, wp_exs[N - N // 4:])
bert_rows = (bert_va[0], bert_va[1], bert_va[2], bert_va[4])
new_head("bert_mlm", transformers.BertForMaskedLM, BertForTokenClassification,
         BertConfig(vocab_size=wp_vocab, max_position_embeddings=40, **small), "3", rng, bert_rows)
bl_va = aligned(bl_hf, bl_exs[N - N // 4:])
new_head("roberta_seq", transformers.RobertaForSequenceClassification,
         RobertaForTokenClassification,
         RobertaConfig(vocab_size=bl_vocab, max_position_embeddings=T + 2, type_vocab_size=1,
                       pad_token_id=1, **small), "PER,ORG",
         rng, (bl_va[0], bl_va[1], bl_va[2], bl_va[4]))
new_head("distil_bare", transformers.DistilBertModel, DistilBertForTokenClassification,
         DistilBertConfig(vocab_size=wp_vocab, dim=32, n_layers=2, n_heads=4, hidden_dim=48,
                          max_position_embeddings=40, dropout=0.0, attention_dropout=0.0,
                          initializer_range=0.05), "4", rng, bert_rows)
modes(wp_path, wp_hf, wp_exs, bert_imp)
bad_cases(wp_path, bert_imp, corpus)
print("bert_token_hf: %s (transformers %s)" % ("FAILED" if failed else "ok",
                                               transformers.__version__))
sys.exit(1 if failed else 0)
