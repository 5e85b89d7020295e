"""Decoders as token classifiers (named entities, parts of speech on a GPT-2, a Pythia or a
Llama): trainc import hf and export hf of GPT2ForTokenClassification,
GPTNeoXForTokenClassification and a Llama's token classifier against transformers, and
`trainc data tags` with a GPT-2-style tokenizer.

HF_PYTHON (transformers 4.40.2 over Debian's torch) runs this; without transformers it
exits 77 (a skip). A byte-level BPE tokenizer with GPT-2's pattern trained here over
Debian's license texts (no hub); random-weight models made here with save_pretrained,
tiny, fp32, CPU, one thread, every tensor moved off transformers' init. transformers pads
a token classifier's rows on the right; a causal model's text never sees the padding, so
trainc's rows (the padding a sequence of its own) compute the text's tokens as
transformers does.

- `data tags` for the GPT-2 import: every row is transformers' GPT2TokenizerFast(words,
  is_split_into_words=True) with add_prefix_space (its padding id 0), y each word's tag
  on its first piece;
- imported, trainc's `--eval` loss equals transformers' cross entropy over the tagged
  tokens within 1e-5 (GPT-2 with learned positions, GPT-NeoX with a partial rope and
  parallel branches, Phi with its branches off one norm); `--predict` gives GPT-2's
  logits within 1e-5 on the text;
- import then export gives back every tensor bit for bit; 8 AdamW steps (warm-up, linear
  decay, weight decay, clipping) within 1e-4 of torch's AdamW on transformers' GPT-2;
  trained 5 steps and exported, from_pretrained computes trainc's --eval loss within
  1e-5, with the tags' names;
- `--task token --labels` over a LlamaForCausalLM (grouped-query attention, untied): a new
  `score` (transformers 4.41 on names Llama's token classifier's head so) drawn with std
  initializer_range and a zero bias; `data tags` with a Llama 3 style tokenizer
  (PreTrainedTokenizerFast: each word a text of its own, no space) and with Llama 2's
  SentencePiece-style BPE (LlamaTokenizerFast: "▁" before each word, byte fallback) gives
  transformers' rows; transformers' LlamaModel with the new head computes trainc's loss
  on the Llama 3 rows (4.40 has no LlamaForTokenClassification); the export is
  LlamaForTokenClassification's tensors, which import reads back bit for bit; a Qwen2's
  (q, k and v biased, tied embedding) the same way, before and after its export;
- refused with exit 1: --task token over a family transformers has no token classifier
  of (OPT), --task token over a language model without --labels, --task reward over a
  token classifier, export of a token classifier's head without a bias.
"""
import json
import os
import shutil
import sys

import numpy as np
import torch
import torch.nn.functional as F

try:
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import (GPT2Config, GPT2ForTokenClassification, GPT2TokenizerFast,
                              GPTNeoXConfig, GPTNeoXForTokenClassification, LlamaConfig,
                              LlamaForCausalLM, LlamaModel, LlamaTokenizerFast, PhiConfig,
                              PhiForTokenClassification, PreTrainedTokenizerFast, Qwen2Config,
                              Qwen2ForCausalLM, Qwen2Model)
    from safetensors.torch import load_file
except ImportError:
    print("skip decoder_token_hf: transformers is not importable from %s (make deps makes a "
          "venv with it)" % sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_hf import ROOT, check, eval_loss, failed, refused, rel, saved, trainc  # noqa: E402
from text_hf import (exported_back, license_lines, parity_steps, predictions,  # noqa: E402
                     specs, trained_export)
from tokenizer_hf import sp_trained, trained as bpe_trained  # noqa: E402

OUT = os.path.join(ROOT, "build", "tests", "decoder_token_hf")
T, N = 24, 96
TAGS = ["O", "B-PER", "I-PER", "B-ORG"]
LABELS = dict(id2label=dict(enumerate(TAGS)), label2id={t: k for k, t in enumerate(TAGS)})
torch.set_num_threads(1)
torch.manual_seed(0)
transformers.logging.set_verbosity_error()


def gpt2_tokenizer(path, corpus):
    """GPT-2's kind: byte-level BPE, ByteLevel's post-processor, <|endoftext|> (id 0, the
    padding); transformers' tokenizer of it with add_prefix_space, as words ask"""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(path)
    hf = GPT2TokenizerFast(tokenizer_file=path, add_prefix_space=True,
                           pad_token="<|endoftext|>")
    return hf, tok.get_vocab_size()


def examples(lines, rng, n):
    """n lines of words with a tag each (names in two lines of three, else numbers); every
    fourth with hard words; some longer than the rows"""
    out = []
    for i in range(n):
        words = list(lines[int(rng.integers(len(lines)))])[:int(rng.integers(1, 24))]
        if i % 4 == 0:
            words[int(rng.integers(len(words) + 1)):0] = ["U.S.", "naïve", "日本語", "x-y"]
        tags = [int(t) for t in rng.integers(0, len(TAGS), size=len(words))]
        out.append({"tokens": words, "ner_tags": [TAGS[t] if i % 3 else t for t in tags]})
    return out


def aligned(hf, exs):
    """transformers' rows of the words: ids, attention mask, word ids, labels"""
    enc = hf([e["tokens"] for e in exs], is_split_into_words=True, truncation=True, max_length=T,
             padding="max_length")
    labels, words = [], []
    for r, e in enumerate(exs):
        tags = [TAGS.index(t) if isinstance(t, str) else t for t in e["ner_tags"]]
        row, prev = [], None
        for w in enc.word_ids(r):
            row.append(-100 if w is None or w == prev else tags[w])
            prev = w
        labels.append(row)
        words.append([-1 if w is None else w for w in enc.word_ids(r)])
    return (np.array(enc["input_ids"]), np.array(enc["attention_mask"]), np.array(words),
            np.array(labels))


def tagged(name, hf, tok, exs, imp):
    """data tags over the examples (the last quarter for validation), its rows checked
    against transformers' (HF, TOK's tokenizer); (ids, mask, labels) of the train and val
    rows"""
    with open(imp + "/tags.jsonl", "w") as f:
        for e in exs:
            f.write(json.dumps(e, ensure_ascii=False) + "\n")
    r = trainc("data", "tags", imp + "/tags.jsonl", imp + "/data", "--tokenizer", tok,
               "--model", imp + "/model.json", "--val-frac", 0.25)
    print("  " + r.stdout.strip())
    n_tr = N - N // 4
    out = []
    for part, part_exs in (("train", exs[:n_tr]), ("val", exs[n_tr:])):
        ids, mask, words, labels = aligned(hf, part_exs)
        got = {k: np.load("%s/data/%s_%s.npy" % (imp, part, k)) for k in ("x", "pos", "y",
                                                                          "words")}
        lens = mask.sum(1)
        pos = np.array([list(range(k)) + list(range(T - k)) for k in lens])
        check(np.array_equal(got["x"], ids) and np.array_equal(got["pos"], pos) and
              np.array_equal(got["y"], labels) and np.array_equal(got["words"], words),
              "%s: data tags' %s rows (%d, %d full) are %s's input_ids, positions, word_ids "
              "and first-piece labels" % (name, part, len(part_exs), int((lens == T).sum()),
                                          type(hf).__name__))
        out.append((ids, mask, labels))
    return out


def save_rows(imp, rows):
    """rows (ids, mask, labels) as IMP/data's train and val x, pos and y"""
    os.makedirs(imp + "/data", exist_ok=True)
    ids, mask, labels = rows
    pos = np.array([list(range(k)) + list(range(T - k)) for k in mask.sum(1)])
    for part in ("train", "val"):
        for key, a in (("x", ids), ("pos", pos), ("y", labels)):
            np.save("%s/data/%s_%s.npy" % (imp, part, key), a.astype(np.int32))


def logits_of(m, rows):
    ids, mask = (torch.from_numpy(a).long() for a in rows[:2])
    return m(input_ids=ids, attention_mask=mask).logits


def hf_loss(logits, labels):
    return float(F.cross_entropy(logits.double().flatten(0, 1),
                                 torch.from_numpy(labels).long().flatten(), ignore_index=-100))


def hf_eval(m, rows):
    with torch.no_grad():
        return hf_loss(logits_of(m.eval(), rows), rows[2])


def imported(name, cls, cfg, rows=None, hf=None, tok=None, exs=None):
    """CLS(cfg) saved, imported and checked: its rows (data tags' where given), --eval
    against transformers, import then export bit for bit; (model, folder, train and val
    rows)"""
    d = os.path.join(OUT, name)
    m = saved(cls, cfg, d + "/src", 0.3)
    imp = d + "/import"
    trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T)
    spec = json.load(open(imp + "/model.json"))["model"]
    last = spec["layers"][-1]
    check(spec["inputs"]["y"]["shape"] == [T] and spec["inputs"]["y"].get("labels") == TAGS and
          spec["loss"].get("ignore_index") == -100 and last["op"] == "linear" and
          last["name"] == "classifier" and last["out"] == len(TAGS) and "bias" not in last,
          "%s: import writes y [%d] with the tags' names, the head `classifier` (a bias), the "
          "loss's ignore_index -100" % (name, T))
    tr, va = tagged(name, hf, tok, exs, imp) if exs else (rows, rows)
    if not exs:
        save_rows(imp, rows)
    specs(imp, ["x", "pos", "y"])
    ours, theirs = (eval_loss(imp + "/model.json", imp + "/eval.json", imp + "/init.safetensors",
                              d + "/eval0"), hf_eval(m, va))
    check(rel(ours, theirs) <= 1e-5, "%s: imported, trainc --eval %.7f, transformers %.7f over "
          "the %d tagged tokens (%.1e)" % (name, ours, theirs, int((va[2] != -100).sum()),
                                           rel(ours, theirs)))
    a, b = exported_back(imp, d)
    a = {k: v for k, v in a.items() if not k.endswith((".attn.bias", ".attn.masked_bias",
                                                       "rotary_emb.inv_freq", ".masked_bias"))}
    same = set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    check(same, "%s: import then export gives back the folder's %d tensors bit for bit%s" %
          (name, len(a), "" if same else " (%s)" % sorted(set(a) ^ set(b))[:4]))
    return m, d, tr, va


def predicted(m, d, va):
    """--predict over the val rows: transformers' logits on the text"""
    ours = predictions(d + "/import", d + "/predict")
    with torch.no_grad():
        theirs = logits_of(m.eval(), va).numpy()
    text = va[1].astype(bool)
    worst = float(np.abs(ours[text] - theirs[text]).max() / np.abs(theirs[text]).max())
    check(ours.shape == theirs.shape and worst <= 1e-5, "gpt2: --predict's logits [%s] on the "
          "%d tokens of text within %.1e of transformers'" % (", ".join(map(str, ours.shape)),
                                                              int(text.sum()), worst))


def trained(name, cls, d, tr, va):
    """8 AdamW steps against torch's on transformers' model; 5 steps exported and loaded"""
    imp = d + "/import"
    batches = [[a[b:b + 16] for a in tr] for b in range(0, len(tr[0]) - 15, 16)]
    parity_steps(name, imp, d, cls.from_pretrained(d + "/src"), batches,
                 lambda m, b: F.cross_entropy(logits_of(m, b).flatten(0, 1),
                                              torch.from_numpy(b[2]).long().flatten(),
                                              ignore_index=-100))
    ours = trained_export(imp, d)
    back = cls.from_pretrained(d + "/hf")
    theirs = hf_eval(back, va)
    check(rel(ours, theirs) <= 1e-5 and back.config.id2label == LABELS["id2label"] and
          back.config.architectures == [cls.__name__],
          "%s: trained, exported as %s, from_pretrained's loss %.7f, trainc --eval %.7f (%.1e), "
          "the tags' names kept" % (name, back.config.architectures, theirs, ours,
                                    rel(ours, theirs)))


def llama_head(lines, exs):
    """--task token --labels over a LlamaForCausalLM: a new score; data tags' rows with a
    Llama 3 style tokenizer (and a Llama 2 style one's); LlamaModel with the score computes
    trainc's loss; the export is LlamaForTokenClassification's, read back"""
    d = os.path.join(OUT, "llama")
    os.makedirs(d)
    corpus = [" ".join(l) for l in lines]
    tok = d + "/llama3.json"
    bpe_trained("llama3", corpus, 400).save(tok)
    hf = PreTrainedTokenizerFast(tokenizer_file=tok, pad_token="<|begin_of_text|>")
    sp = d + "/llama2.json"
    json.dump(sp_trained(corpus, 400), open(sp, "w"))
    sp_hf = LlamaTokenizerFast(tokenizer_file=sp, pad_token="<unk>", padding_side="right")
    vocab = max(len(hf), len(sp_hf))
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=48,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=64, tie_word_embeddings=False,
                      initializer_range=0.05)
    saved(LlamaForCausalLM, cfg, d + "/src", 0.3)
    imp = d + "/import"
    trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T, "--task", "token",
           "--labels", ",".join(TAGS))
    tagged("llama (Llama 2's SentencePiece-style BPE)", sp_hf, sp, exs, imp)
    train_rows, rows = tagged("llama (a Llama 3 pre-tokenizer)", hf, tok, exs, imp)
    specs(imp, ["x", "pos", "y"])
    ours = load_file(imp + "/init.safetensors")
    body = LlamaModel.from_pretrained(d + "/src").eval()

    def loss_with(body, w, b):
        with torch.no_grad():
            ids, mask = (torch.from_numpy(a).long() for a in rows[:2])
            h = body(input_ids=ids, attention_mask=mask).last_hidden_state
            return hf_loss(F.linear(h, w, b), rows[2])
    theirs = loss_with(body, ours["score.weight"], ours["score.bias"])
    loss = eval_loss(imp + "/model.json", imp + "/eval.json", imp + "/init.safetensors",
                     d + "/eval0")
    std = float(ours["score.weight"].std())
    check(rel(loss, theirs) <= 1e-5 and abs(std / 0.05 - 1) < 0.25 and
          not ours["score.bias"].any() and not any(k.startswith("lm_head") for k in ours),
          "llama: LlamaForCausalLM with --task token --labels: a new score [%d, 32] (std %.4f, "
          "bias zeros), no LM head; trainc --eval %.7f, LlamaModel and that score %.7f (%.1e)"
          % (len(TAGS), std, loss, theirs, rel(loss, theirs)))
    ours = trained_export(imp, d)
    config = json.load(open(d + "/hf/config.json"))
    exported = load_file(d + "/hf/model.safetensors")
    body = LlamaModel.from_pretrained(d + "/hf").eval()
    theirs = loss_with(body, exported["score.weight"], exported["score.bias"])
    names = sorted(k for k in exported if not k.startswith("model."))
    check(config["architectures"] == ["LlamaForTokenClassification"] and
          config["id2label"] == {str(k): v for k, v in enumerate(TAGS)} and
          names == ["score.bias", "score.weight"] and rel(ours, theirs) <= 1e-5,
          "llama: trained, exported as %s (%s beside model.*), LlamaModel from the folder with "
          "its score: %.7f, trainc --eval %.7f (%.1e)" % (config["architectures"], names, theirs,
                                                          ours, rel(ours, theirs)))
    trainc("import", "hf", d + "/hf", "-o", d + "/again", "--seq-len", T)
    a, b = load_file(d + "/run5/model.safetensors"), load_file(d + "/again/init.safetensors")
    check(set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a),
          "llama: the exported LlamaForTokenClassification imports back bit for bit (%d "
          "tensors)" % len(a))
    return train_rows, vocab


def qwen2_head(rows, vocab):
    """--task token --labels over a Qwen2ForCausalLM (q, k and v biased, the embedding
    tied): Qwen2Model with the new score computes trainc's loss, before and after an
    export as Qwen2ForTokenClassification"""
    d = os.path.join(OUT, "qwen2")
    saved(Qwen2ForCausalLM, Qwen2Config(
        vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        tie_word_embeddings=True, initializer_range=0.05), d + "/src", 0.3)
    imp = d + "/import"
    trainc("import", "hf", d + "/src", "-o", imp, "--seq-len", T, "--task", "token",
           "--labels", ",".join(TAGS))
    save_rows(imp, rows)
    specs(imp, ["x", "pos", "y"])

    def loss_with(folder, weights):
        body = Qwen2Model.from_pretrained(folder).eval()
        with torch.no_grad():
            ids, mask = (torch.from_numpy(a).long() for a in rows[:2])
            h = body(input_ids=ids, attention_mask=mask).last_hidden_state
            return hf_loss(F.linear(h, weights["score.weight"], weights["score.bias"]), rows[2])
    before = rel(eval_loss(imp + "/model.json", imp + "/eval.json", imp + "/init.safetensors",
                           d + "/eval0"), loss_with(d + "/src", load_file(imp + "/init.safetensors")))
    ours = trained_export(imp, d)
    config = json.load(open(d + "/hf/config.json"))
    after = rel(ours, loss_with(d + "/hf", load_file(d + "/hf/model.safetensors")))
    check(before <= 1e-5 and after <= 1e-5 and
          config["architectures"] == ["Qwen2ForTokenClassification"],
          "qwen2: Qwen2ForCausalLM with --task token --labels: trainc --eval within %.1e of "
          "Qwen2Model and the new score; trained, exported as %s, within %.1e"
          % (before, config["architectures"], after))


def bad_cases(gpt2_imp):
    d = os.path.join(OUT, "bad")
    os.makedirs(d)
    opt = d + "/opt_src"
    saved(transformers.OPTForCausalLM, transformers.OPTConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, ffn_dim=24, num_attention_heads=2,
        max_position_embeddings=T, word_embed_proj_dim=16), opt, 0.1)
    refused("--task token over an OPT", ["import", "hf", opt, "-o", d + "/o1", "--task", "token",
                                         "--labels", "3"],
            "--task token: transformers has no token classifier for opt", d + "/o1")
    gpt = d + "/gpt2_src"
    saved(transformers.GPT2LMHeadModel, GPT2Config(vocab_size=50, n_embd=16, n_layer=1,
                                                   n_head=2, n_positions=T), gpt, 0.1)
    refused("--task token over a language model, no --labels",
            ["import", "hf", gpt, "-o", d + "/o2", "--task", "token"],
            "--task token over a language model: --labels names the new classifier's classes",
            d + "/o2")
    refused("--task reward over a token classifier",
            ["import", "hf", os.path.join(OUT, "gpt2", "src"), "-o", d + "/o3", "--task",
             "reward"], "--task reward: this is a token classifier (--task token)", d + "/o3")
    spec = json.load(open(gpt2_imp + "/model.json"))
    spec["model"]["layers"][-1]["bias"] = False
    json.dump(spec, open(d + "/nobias.json", "w"))
    refused("export of a token classifier's head without a bias",
            ["export", "hf", d + "/nobias.json", gpt2_imp + "/eval.json", "--weights",
             gpt2_imp + "/init.safetensors", "-o", d + "/o4"],
            "a token classifier's head has a bias", d + "/o4")


shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
rng = np.random.default_rng(5)
lines = license_lines()
tok_path = os.path.join(OUT, "gpt2_tokenizer.json")
hf_tok, vocab = gpt2_tokenizer(tok_path, [" ".join(l) for l in lines])
exs = examples(lines, rng, N)
m, d, tr, va = imported("gpt2", GPT2ForTokenClassification,
                        GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=4, n_positions=T,
                                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                   summary_first_dropout=0.0, classifier_dropout=0.0, **LABELS),
                        hf=hf_tok, tok=tok_path, exs=exs)
predicted(m, d, va)
trained("gpt2", GPT2ForTokenClassification, d, tr, va)
imported("gpt_neox", GPTNeoXForTokenClassification,
         GPTNeoXConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=48, max_position_embeddings=64,
                       rotary_pct=0.5, hidden_dropout=0.0, attention_dropout=0.0,
                       classifier_dropout=0.0, **LABELS), rows=va)
imported("phi", PhiForTokenClassification,
         PhiConfig(vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                   num_attention_heads=4, max_position_embeddings=64, resid_pdrop=0.0,
                   embd_pdrop=0.0, attention_dropout=0.0, classifier_dropout=0.0, **LABELS),
         rows=va)
qwen2_head(*llama_head(lines, exs))
bad_cases(os.path.join(OUT, "gpt2", "import"))
print("decoder_token_hf: %s (transformers %s)" % ("FAILED" if failed else "ok",
                                                  transformers.__version__))
sys.exit(1 if failed else 0)
