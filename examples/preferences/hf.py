"""The Hugging Face side of examples/preferences/run.sh, both ends of the path.

    hf.py make DIR          a model folder as the hub would give one: a byte-level BPE
                            tokenizer (Qwen's kind: <|endoftext|> its padding) trained over
                            Debian's license texts (DIR/tokenizer.json) and a small random
                            Qwen2ForCausalLM over its vocabulary (the language model a
                            reward model starts from)
    hf.py data OUT          the preferences: a prompt, then a line of the GPL or LGPL
                            (chosen) against a line of the Apache, Artistic or Mozilla
                            license (rejected; two for each chosen one), as OUT/train.jsonl
                            and OUT/val.jsonl (TRL's {"prompt", "chosen", "rejected"}; every
                            fifth chosen line's pairs in val)
    hf.py check DIR VAL ACC PRED T
                            loads the exported DIR (model and tokenizer) in transformers,
                            scores VAL's texts from the raw text (the pairs whose texts fit
                            in T tokens, as data pairs keeps), checks that the share of
                            pairs it ranks right is trainc's ACC within one pair, and that
                            trainc's --predict output PRED (each pair's two rewards) is
                            transformers' rewards within 1e-4; prints three pairs
    hf.py check_dpo DIR REF VAL ACC T
                            loads the dpo-trained export DIR and the reference model REF
                            (the folder it started from), computes from VAL's raw text
                            each answer's log-probability (tokenizer(prompt + answer) and
                            <|endoftext|>, the tokens past tokenizer(prompt)) in both, and
                            checks that the share of pairs whose chosen answer gained more
                            over the reference than the rejected one is trainc's ACC
                            within one pair (the pairs that fit in T tokens)

Runs with a python that has transformers (HF_PYTHON); exits 77 without it.
"""
import json
import os
import sys

try:
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM,
                              Qwen2ForSequenceClassification)
except ImportError as e:
    print("skip: %s (make deps makes .venv/hf with transformers; HF_PYTHON names its python)" % e)
    sys.exit(77)

SRC = "/usr/share/common-licenses"
CHOSEN, REJECTED = ["GPL-3", "LGPL-3"], ["Apache-2.0", "Artistic", "MPL-2.0"]
PROMPT = "Write a line of a license: "
torch.set_num_threads(1)
transformers.logging.set_verbosity_error()


def lines(name):
    """the license's lines of text of 20 characters or more, each cut to 45"""
    return [l.strip()[:45] for l in open(os.path.join(SRC, name), encoding="utf-8",
                                          errors="replace") if len(l.strip()) >= 20]


def make(d):
    os.makedirs(d, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([PROMPT] + [l for n in CHOSEN + REJECTED for l in lines(n)],
                            trainers.BpeTrainer(vocab_size=1500, special_tokens=["<|endoftext|>"],
                                                show_progress=False,
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(os.path.join(d, "tokenizer.json"))
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=128, tie_word_embeddings=True, eos_token_id=0)
    Qwen2ForCausalLM(cfg).save_pretrained(d, safe_serialization=True)


def data(out):
    os.makedirs(out, exist_ok=True)
    good = [l for n in CHOSEN for l in lines(n)]
    bad = [l for n in REJECTED for l in lines(n)]
    with open(os.path.join(out, "train.jsonl"), "w") as tr, \
         open(os.path.join(out, "val.jsonl"), "w") as va:
        for i, g in enumerate(good):   # each chosen line against two rejected ones
            for b in (bad[(7 * i) % len(bad)], bad[(7 * i + 3) % len(bad)]):
                (va if i % 5 == 4 else tr).write(json.dumps({"prompt": PROMPT, "chosen": g,
                                                             "rejected": b}) + "\n")


def check(d, val, acc, pred, T):
    import numpy as np
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"),
                                  pad_token="<|endoftext|>")
    model = Qwen2ForSequenceClassification.from_pretrained(d).eval()
    fits = lambda e: all(len(tok(e["prompt"] + e[k])["input_ids"]) <= T
                         for k in ("chosen", "rejected"))
    ex = [e for e in map(json.loads, open(val)) if fits(e)]
    theirs = []
    with torch.no_grad():
        for b in range(0, len(ex), 64):
            batch = ex[b:b + 64]
            texts = [e["prompt"] + e[k] for k in ("chosen", "rejected") for e in batch]
            enc = tok(texts, padding=True, return_tensors="pt", return_token_type_ids=False)
            r = model(**enc).logits[:, 0]
            theirs += r.view(2, -1).t().tolist()
    theirs = np.array(theirs)
    ours = np.load(pred)
    right = float((theirs[:, 0] > theirs[:, 1]).mean())
    worst = float(np.abs(ours - theirs).max() / np.abs(theirs).max())
    print("transformers: %d pairs, %.4f of them ranked right; trainc's %.4f; trainc --predict's "
          "rewards within %.1e of transformers'" % (len(ex), right, acc, worst))
    for e, (c, r) in list(zip(ex, theirs))[:3]:
        print("  %+.2f %r\n  %+.2f %r" % (c, e["chosen"][:50], r, e["rejected"][:50]))
    if abs(right - acc) > 1.0 / len(ex) + 1e-9 or ours.shape != theirs.shape or worst > 1e-4:
        print("FAIL: transformers' rewards are not trainc's")
        sys.exit(1)


def answer_logps(model, tok, ex, T, mean=False):
    """each pair's (chosen, rejected) answer log-probabilities: the answer and
    <|endoftext|> after the prompt, as data pairs writes them for dpo (MEAN: the mean over
    the answer's tokens, as orpo's)"""
    import torch.nn.functional as F
    out = []
    with torch.no_grad():
        for e in ex:
            lp = []
            for k in ("chosen", "rejected"):
                ids = tok(e["prompt"] + e[k])["input_ids"] + [tok.pad_token_id]
                np_ = len(tok(e["prompt"])["input_ids"])
                z = model(input_ids=torch.tensor([ids])).logits[0, :-1]
                logp = F.log_softmax(z, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
                a = logp[np_ - 1:]
                lp.append(float(a.mean() if mean else a.sum()))
            out.append(lp)
    return out


def check_dpo(d, ref, val, acc, T):
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"),
                                  pad_token="<|endoftext|>")
    fits = lambda e: all(len(tok(e["prompt"] + e[k])["input_ids"]) + 1 <= T
                         for k in ("chosen", "rejected"))
    ex = [e for e in map(json.loads, open(val)) if fits(e)]
    pol = answer_logps(Qwen2ForCausalLM.from_pretrained(d).eval(), tok, ex, T)
    ref_lp = answer_logps(Qwen2ForCausalLM.from_pretrained(ref).eval(), tok, ex, T)
    gains = [(p[0] - r[0]) - (p[1] - r[1]) for p, r in zip(pol, ref_lp)]
    right = sum(g > 0 for g in gains) / len(ex)
    print("transformers: %d pairs, %.4f of them with the chosen answer gaining more over the "
          "reference than the rejected one; trainc's %.4f" % (len(ex), right, acc))
    for e, p, r in list(zip(ex, pol, ref_lp))[:2]:
        print("  %r: chosen %+.2f -> %+.2f, rejected %+.2f -> %+.2f" %
              (e["chosen"][:30], r[0], p[0], r[1], p[1]))
    if abs(right - acc) > 1.0 / len(ex) + 1e-9:
        print("FAIL: transformers' ranking is not trainc's")
        sys.exit(1)


def check_orpo(d, val, acc, T):
    """the orpo export: the share of pairs whose chosen answer has the higher mean
    log-probability (odds ratio > 1) is trainc's"""
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"),
                                  pad_token="<|endoftext|>")
    fits = lambda e: all(len(tok(e["prompt"] + e[k])["input_ids"]) + 1 <= T
                         for k in ("chosen", "rejected"))
    ex = [e for e in map(json.loads, open(val)) if fits(e)]
    lp = answer_logps(Qwen2ForCausalLM.from_pretrained(d).eval(), tok, ex, T, mean=True)
    right = sum(c > r for c, r in lp) / len(ex)
    print("transformers: %d pairs, %.4f of them with the chosen answer the likelier per "
          "token; trainc's %.4f" % (len(ex), right, acc))
    if abs(right - acc) > 1.0 / len(ex) + 1e-9:
        print("FAIL: transformers' ranking is not trainc's")
        sys.exit(1)


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "make" and len(sys.argv) == 3:
        make(sys.argv[2])
    elif cmd == "data" and len(sys.argv) == 3:
        data(sys.argv[2])
    elif cmd == "check_dpo" and len(sys.argv) == 7:
        check_dpo(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]), int(sys.argv[6]))
    elif cmd == "check_orpo" and len(sys.argv) == 6:
        check_orpo(sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5]))
    elif cmd == "check" and len(sys.argv) == 7:
        check(sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5], int(sys.argv[6]))
    else:
        sys.exit(__doc__)
