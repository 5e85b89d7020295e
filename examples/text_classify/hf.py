"""The Hugging Face side of examples/text_classify/run.sh, both ends of the path.

    hf.py make DIR          a model folder as the hub would give one: a byte-level BPE
                            tokenizer of RoBERTa's kind trained over Debian's license
                            texts (DIR/tokenizer.json) and a small random
                            RobertaForMaskedLM over its vocabulary (roberta-base's kind:
                            an encoder and a masked-LM head, no classifier)
    hf.py data OUT          the task: which license two lines of text come from, over
                            LICENSES' lines in /usr/share/common-licenses, as
                            OUT/train.jsonl and OUT/val.jsonl ({"text": two lines,
                            "label": the license's name}; every fifth pair of each file in
                            val)
    hf.py check DIR VAL ACC [PRED]
                            loads the exported DIR (model and tokenizer) in transformers,
                            classifies VAL's texts from the raw text, checks its accuracy
                            equals trainc's ACC (a fraction) within one example, and prints
                            three predictions; with PRED (trainc's --predict output,
                            predictions.npy, over the same texts) checks that trainc's
                            classes are transformers' for all but at most one example
    hf.py unlabeled VAL OUT VAL's texts without their labels, as OUT (JSON lines)
    hf.py tags OUT          the second task, a tag for each word of LICENSES' lines: B-ORG
                            and I-ORG over runs of ORG's names ("Free Software
                            Foundation"), NUM for a word with a digit, O for the others,
                            as OUT/tags_train.jsonl and OUT/tags_val.jsonl ({"tokens":
                            words, "ner_tags": tags}; every fifth line in val)
    hf.py check_tags DIR VAL PRED WORDS
                            loads the exported token classifier DIR in transformers, tags
                            VAL's words (each word's first piece), and checks that
                            trainc's --predict output PRED (with data tags' WORDS, each
                            token's word) gives the same tag for all but 1% of them
    hf.py squad OUT         the third task, questions about LICENSES' lines in SQuAD's form:
                            "Which organization is named?" (the first run of ORG's names)
                            and "Which number is given?" (the first word with a digit), each
                            line asked what it has an answer to, as OUT/qa_train.jsonl and
                            OUT/qa_val.jsonl (every fifth question in val)
    hf.py check_qa DIR VAL ANSWERS
                            loads the exported question answerer DIR in transformers'
                            question-answering pipeline, answers VAL's questions from the raw
                            text, and checks that trainc's data qa --answers file ANSWERS
                            gives the same answer for all but at most one

Runs with a python that has transformers (HF_PYTHON); exits 77 without it.
"""
import json
import os
import sys

try:
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import (PreTrainedTokenizerFast, RobertaConfig, RobertaForMaskedLM,
                              RobertaForSequenceClassification)
except ImportError as e:
    print("skip: %s (make deps makes .venv/hf with transformers; HF_PYTHON names its python)" % e)
    sys.exit(77)

SRC = "/usr/share/common-licenses"
LICENSES = ["Apache-2.0", "Artistic", "GPL-3", "LGPL-3", "MPL-2.0"]
torch.set_num_threads(1)
transformers.logging.set_verbosity_error()


def lines(name):
    """the license's lines of text (at least 20 characters)"""
    return [l.strip() for l in open(os.path.join(SRC, name), encoding="utf-8", errors="replace")
            if len(l.strip()) >= 20]


def make(d):
    os.makedirs(d, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([l for n in LICENSES for l in lines(n)], trainers.BpeTrainer(
        vocab_size=2000, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tok.save(os.path.join(d, "tokenizer.json"))
    torch.manual_seed(0)
    cfg = RobertaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=128, max_position_embeddings=66,
                        type_vocab_size=1, pad_token_id=1)
    RobertaForMaskedLM(cfg).save_pretrained(d, safe_serialization=True)


def data(out):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "train.jsonl"), "w") as tr, \
         open(os.path.join(out, "val.jsonl"), "w") as va:
        for name in LICENSES:
            ls = lines(name)
            for i in range(0, len(ls) - 1, 2):   # two lines an example
                text = ls[i] + " " + ls[i + 1]
                (va if i // 2 % 5 == 4 else tr).write(json.dumps({"text": text, "label": name}) + "\n")


ORG = {"GNU", "Free", "Software", "Foundation", "Apache", "Mozilla", "Perl", "FSF", "Artistic"}


def word_tags(words):
    """B-ORG/I-ORG over each run of ORG's names, NUM for a word with a digit, else O"""
    tags = []
    for i, w in enumerate(words):
        if w.strip(".,;:()\"'") in ORG:
            tags.append("I-ORG" if tags and tags[-1] in ("B-ORG", "I-ORG") else "B-ORG")
        else:
            tags.append("NUM" if any(c.isdigit() for c in w) else "O")
    return tags


def tags(out):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tags_train.jsonl"), "w") as tr, \
         open(os.path.join(out, "tags_val.jsonl"), "w") as va:
        for name in LICENSES:
            for i, l in enumerate(lines(name)):
                w = l.split()
                (va if i % 5 == 4 else tr).write(json.dumps({"tokens": w,
                                                             "ner_tags": word_tags(w)}) + "\n")


def check_tags(d, val, pred, words):
    import numpy as np
    from transformers import RobertaForTokenClassification, RobertaTokenizerFast
    tok = RobertaTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"),
                               add_prefix_space=True)
    model = RobertaForTokenClassification.from_pretrained(d).eval()
    ex = [json.loads(l) for l in open(val)]
    ours, wid = np.load(pred).argmax(-1), np.load(words)
    n = differ = right = 0
    with torch.no_grad():
        for r, e in enumerate(ex):
            enc = tok(e["tokens"], is_split_into_words=True, truncation=True, max_length=64,
                      return_tensors="pt")
            got = model(**enc).logits[0].argmax(-1).tolist()
            seen = set()
            for k, w in enumerate(enc.word_ids()):
                if w is None or w in seen:
                    continue
                seen.add(w)
                mine = ours[r][list(wid[r]).index(w)]
                n += 1
                differ += mine != got[k]
                right += model.config.id2label[got[k]] == e["ner_tags"][w]
    print("transformers: %d words tagged, %.4f of them right; trainc --predict another tag for "
          "%d" % (n, right / n, differ))
    if differ > n // 100:
        print("FAIL: trainc's tags are not transformers'")
        sys.exit(1)


def first_span(words, want):
    """the characters of the first run of words WANT accepts in the words' line (joined by
    single spaces), or None"""
    at, span = 0, None
    for w in words:
        if want(w):
            core = w.strip(".,;:()\"'")
            a = at + w.index(core) if core else at
            span = (span[0] if span else a, a + len(core))
        elif span:
            break
        at += len(w) + 1
    return span


QUESTIONS = {"Which organization is named?": lambda w: w.strip(".,;:()\"'") in ORG,
             "Which number is given?": lambda w: any(c.isdigit() for c in w)}


def squad(out):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "qa_train.jsonl"), "w") as tr, \
         open(os.path.join(out, "qa_val.jsonl"), "w") as va:
        k = 0
        for name in LICENSES:
            for l in lines(name):
                w = l.split()
                context = " ".join(w)
                for q, want in QUESTIONS.items():
                    span = first_span(w, want)
                    if not span:
                        continue
                    e = {"id": str(k), "question": q, "context": context,
                         "answers": {"text": [context[span[0]:span[1]]], "answer_start": [span[0]]}}
                    (va if k % 5 == 4 else tr).write(json.dumps(e) + "\n")
                    k += 1


def check_qa(d, val, answers):
    from transformers import pipeline
    qa = pipeline("question-answering", model=d, tokenizer=d)
    ex = [json.loads(l) for l in open(val)]
    ours = {a["id"]: a["answer"] for a in map(json.loads, open(answers))}
    differ, shown = 0, []
    for e in ex:
        got = qa(question=e["question"], context=e["context"], max_answer_len=30,
                 align_to_words=False)["answer"]
        differ += got != ours[e["id"]]
        if len(shown) < 3:
            shown.append("%r in %r -> %r (%r)" % (e["question"], e["context"][:40], got,
                                                  e["answers"]["text"][0]))
    print("transformers' question-answering pipeline: %d questions, %d answered otherwise than "
          "trainc's data qa --answers" % (len(ex), differ))
    for s in shown:
        print("  " + s)
    if differ > 1:
        print("FAIL: transformers' answers are not trainc's")
        sys.exit(1)


def unlabeled(val, out):
    with open(out, "w") as f:
        for l in open(val):
            f.write(json.dumps({"text": json.loads(l)["text"]}) + "\n")


def check(d, val, acc, pred=None):
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"),
                                  pad_token="<pad>")
    model = RobertaForSequenceClassification.from_pretrained(d).eval()
    ex = [json.loads(l) for l in open(val)]
    right, shown, mine = 0, [], []
    with torch.no_grad():
        for b in range(0, len(ex), 64):
            batch = ex[b:b + 64]
            enc = tok([e["text"] for e in batch], truncation=True, max_length=64,
                      padding="max_length", return_tensors="pt")
            got = model(**enc).logits.argmax(-1).tolist()
            mine += got
            for e, p in zip(batch, got):
                name = model.config.id2label[p]
                right += name == e["label"]
                if len(shown) < 3:
                    shown.append("%r -> %s (%s)" % (e["text"][:50], name, e["label"]))
    theirs = right / len(ex)
    print("transformers: accuracy %.4f over %d lines; trainc's %.4f" % (theirs, len(ex), acc))
    for s in shown:
        print("  " + s)
    if abs(theirs - acc) > 1.0 / len(ex) + 1e-9:
        print("FAIL: transformers' accuracy is not trainc's")
        sys.exit(1)
    if pred:
        import numpy as np
        ours = np.load(pred).argmax(-1).tolist()
        differ = sum(a != b for a, b in zip(ours, mine))
        print("trainc --predict: %d rows, %d of them another class than transformers'" %
              (len(ours), differ))
        if len(ours) != len(mine) or differ > 1:
            print("FAIL: trainc's predictions are not transformers'")
            sys.exit(1)


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "make" and len(sys.argv) == 3:
        make(sys.argv[2])
    elif cmd == "data" and len(sys.argv) == 3:
        data(sys.argv[2])
    elif cmd == "check" and len(sys.argv) in (5, 6):
        check(sys.argv[2], sys.argv[3], float(sys.argv[4]), *sys.argv[5:])
    elif cmd == "unlabeled" and len(sys.argv) == 4:
        unlabeled(sys.argv[2], sys.argv[3])
    elif cmd == "tags" and len(sys.argv) == 3:
        tags(sys.argv[2])
    elif cmd == "check_tags" and len(sys.argv) == 6:
        check_tags(*sys.argv[2:])
    elif cmd == "squad" and len(sys.argv) == 3:
        squad(sys.argv[2])
    elif cmd == "check_qa" and len(sys.argv) == 5:
        check_qa(*sys.argv[2:])
    else:
        sys.exit(__doc__)
