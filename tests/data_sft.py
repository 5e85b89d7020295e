"""`trainc data sft` against Hugging Face `tokenizers` and TRL's masking, row for row.

A Llama-3-style tokenizer trained here (tests/tokenizer_hf.py's, with its BOS template)
and a JSONL file of prompt-completion examples (multi-byte UTF-8, an empty prompt, a
completion cut by the sequence length, one left out wholly, a blank line, an added
token in the text): the .npy arrays equal those built from Tokenizer.encode(prompt +
completion).ids, the prompt's the first len(encode(prompt).ids) of them, --eos's id
after each completion and as padding, the targets -100 where the id predicted is the
prompt's or padding; the last third of the examples in val. --pack: the rows a
reference packs (whole examples in order, as many a row as fit in T + 1 ids, one row
filled exactly, train and val apart), the same targets in fewer rows. Then bad input
exits 1 naming the line (not JSON, a missing key, a number for a string), nothing written; and a
model with the loss's ignore_index trains 3 steps on the arrays.

--chat llama3, chatml, gemma, phi3, mistral, llama2 and zephyr: conversations (a system
message but for Gemma's and Mistral's, two turns, multi-byte UTF-8, white space to trim,
one without an answer; for Phi-3 an empty system message) against transformers'
apply_chat_template with Llama 3 Instruct's, ChatML's, Gemma 2's, Phi-3.5-mini's,
Mistral 7B Instruct v0.2's, Llama 2 Chat's and Zephyr's (TinyLlama Chat's) templates
(the last three over a SentencePiece-style tokenizer as theirs are, where an assistant's
reply right after "[/INST]" encodes otherwise alone than in the text, and a text's start
takes a U+2581):
the ids its text encodes to, and a target kept exactly where its token lies in an
assistant's content or end token (by `tokenizers`' offsets). The trainer's --chat
FORMAT: a user's prompt as the template writes it with the generation prompt, and the
sample's end at its end token (Llama 2's: its </s>, the model writing the space before
it). Gemma's, Mistral's and Llama 2's templates refuse roles out of turn; Mistral's and
Llama 2's roles other than user and assistant (Llama 2's a system message but first),
Zephyr's roles other than system, user and assistant.

Run with the venv's python (HF_PYTHON): exits 77 (skipped) without `tokenizers`.
"""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_hf as th   # noqa: E402  (exits 77 without tokenizers)
import numpy as np          # noqa: E402

TRAINC = os.environ.get("TRAINC", "build/trainc")
OUT = "build/tests/data_sft"
T, EOS = 24, "<|end_of_text|>"
EXAMPLES = [
    ("What is the GPL?", " A copyleft license."),
    ("", " no prompt at all"),
    ("Übersetze: naïve café ☕ 🎉", " déjà vu, 42 times"),
    ("Say it twice:", " copyright copyright " * 8),            # cut at T + 1 ids
    ("x" * 200, " never seen"),                                # its completion past T: left out
    ("Second half", " " + "z" * 300),                          # in val, cut
    ("Q: 1 + 1 =", " 2<|end_of_text|>"),                       # an added token in the text
    ("Tabs\tand\nnewlines", "\n\n  spaced   out"),
    ("Last one?", " yes"),
]


def row(ids, learned, pad):
    """(x, y) of one row: ids padded to T, y the next ids, -100 where not learned"""
    x = [ids[i] if i < len(ids) else pad for i in range(T)]
    y = [ids[i + 1] if i + 1 < len(ids) and learned[i + 1] else -100 for i in range(T)]
    return x, y


def pack(examples, positions=None):
    """--pack's rows: the examples (ids, learned) in order, each cut at T + 1 ids, as many
    a row as fit in T + 1 ids; each row's positions [T] (each id's in its example, the
    padding's going on from the last) appended to `positions`"""
    rows, ids, learned, pos = [], [], [], []
    for e_ids, e_learned in examples + [([], [])]:
        e_ids, e_learned = e_ids[:T + 1], e_learned[:T + 1]
        if ids and (not e_ids or len(ids) + len(e_ids) > T + 1):
            rows.append((ids, learned))
            pos += range(pos[-1] + 1, pos[-1] + 1 + T - len(pos))
            if positions is not None:
                positions.append(pos[:T])
            ids, learned, pos = [], [], []
        ids, learned, pos = ids + e_ids, learned + e_learned, pos + list(range(len(e_ids)))
    return rows


def expected(tok, n_val, packed=False, pairs=EXAMPLES):
    eos = tok.token_to_id(EOS)
    examples, cut = [], 0
    for p, c in pairs:
        ids = tok.encode(p + c).ids + [eos]
        n_prompt = len(tok.encode(p).ids)
        cut += len(ids) > T + 1
        examples.append((ids, [i >= n_prompt for i in range(len(ids))]))
    kept = [any(e[1][1:T + 1]) for e in examples]   # a target learned within T + 1 ids
    n = len(examples)

    def part(lo, hi):
        es = [e for e, k in zip(examples[lo:hi], kept[lo:hi]) if k]
        pos = []
        rows = [row(i, l, eos) for i, l in (pack(es, pos) if packed else es)]
        x, y = np.array([r[0] for r in rows], np.int32), np.array([r[1] for r in rows], np.int32)
        return (x, y, np.array(pos, np.int32)) if packed else (x, y)
    return part(0, n - n_val), part(n - n_val, n), cut, sum(not k for k in kept)


def pack_pairs(tok):
    """--pack's examples: short ones, several to a row of T + 1 ids; a long one (cut, a
    row alone), then two that fill the next row's T + 1 ids exactly; the last three (val)
    short, so that the train's last row has room for them (they go to a row of their own)"""
    size = lambda p, c: len(tok.encode(p + c).ids) + 1   # (+ --eos)
    a = ("Fill:", " ab ab")
    fill = next(("Up:", " " + "cd " * k) for k in range(30) if size(a[0], a[1]) + size("Up:", " " + "cd " * k) == T + 1)
    return ([("Q%d:" % i, " %s" % ("ab " * (i % 4))) for i in range(8)] + [EXAMPLES[3], a, fill] +
            [("Q:", " z"), ("1 + 1 =", " 2"), ("Und?", " ja"), ("Q:", " y")])


CHATS = [
    [{"role": "system", "content": "You answer briefly."},
     {"role": "user", "content": "What is the GPL?"},
     {"role": "assistant", "content": " A copyleft license. "}],
    [{"role": "user", "content": "Übersetze: café ☕"}, {"role": "assistant", "content": "déjà vu"},
     {"role": "user", "content": "Again?\n"}, {"role": "assistant", "content": "Yes,\n twice 🎉"}],
    [{"role": "user", "content": "no answer here"}],
    [{"role": "user", "content": "Count:"}, {"role": "assistant", "content": "1 2 3 4 5 6 7 8 9"}],
]
TEMPLATES = {   # (begin, head, mid, end, after, trim, the assistant's role), and the Jinja its model ships
    "llama3": (("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>", "", True, "assistant"),
               "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
               "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim "
               "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
               "{{ content }}{% endfor %}{% if add_generation_prompt %}"
               "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"),
    "chatml": (("", "<|im_start|>", "\n", "<|im_end|>", "\n", False, "assistant"),
               "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
               "+ '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
               "{{ '<|im_start|>assistant\n' }}{% endif %}"),
    # Gemma 2's (gemma-2-2b-it), which Gemma 3's writes alike without a system message
    "gemma": (("<bos>", "<start_of_turn>", "\n", "<end_of_turn>", "\n", True, "model"),
              "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
              "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != "
              "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
              "user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}"
              "{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
              "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
              "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"),
    # Phi-3.5-mini-instruct's (and Phi-4-mini's): an empty system message left out, other
    # roles too, eos_token last without the generation prompt
    "phi3": (("", "<|", "|>\n", "<|end|>", "\n", False, "assistant"),
             "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}"
             "{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}"
             "{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}"
             "{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}"
             "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"),
    # Mistral 7B Instruct v0.2's (and Mixtral 8x7B Instruct's): no role written (INST)
    "mistral": (("<s>", "", "", "</s>", "", False, "assistant"),
                "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
                "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
                "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
                "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
                "{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and "
                "assistant roles are supported!') }}{% endif %}{% endfor %}"),
    # Llama 2 Chat's (Llama-2-7b-chat-hf's tokenizer_config.json): bos_token before each
    # user message, the system message inside the first one, the reply's own space
    "llama2": (("", "", "", " </s>", "", True, "assistant"),
               "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
               "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
               "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
               "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation "
               "roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
               "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + "
               "system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}"
               "{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
               "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
               "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"),
    # Zephyr's (TinyLlama-1.1B-Chat-v1.0's, zephyr-7b-beta's), its lines as the file has
    # them (transformers renders with trim_blocks and lstrip_blocks); its role tags text
    "zephyr": (("", "<|", "|>\n", "</s>", "\n", False, "assistant"),
               "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + "
               "message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + "
               "message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n"
               "{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n"
               "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}"),
}
# the [INST] form: a user's message's open and close, and an assistant's open (learned), no role
INST = {"mistral": ("[INST] ", " [/INST]", ""), "llama2": ("<s>[INST] ", " [/INST]", " ")}
SYS_IN_USER = {"llama2": ("<<SYS>>\n", "\n<</SYS>>\n\n")}   # a system message inside the first user's
STOP = {"llama2": "</s>"}   # the token a reply ends at, where the end is more than it
NO_SYSTEM = ("gemma", "mistral")               # the templates that refuse a system message
SENTENCEPIECE = ("mistral", "llama2", "zephyr")   # tested over tokenizer_hf's sp_trained
TAIL = {"phi3": "<|endoftext|>"}   # what a format writes after a whole conversation
OTHER = {"phi3": "<|user|>", "mistral": "<s>", "llama2": "<s>", "zephyr": "<s>"}   # a token of the format's other than its end (--stop's test)
TC = 96   # the conversations' rows: the longest cut, none past it but the one without an answer
SPECIALS = ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>",
            "<bos>", "<start_of_turn>", "<end_of_turn>", "<|system|>", "<|user|>", "<|assistant|>",
            "<|end|>", "<|endoftext|>"]


# white space Jinja's trim (Python's str.strip()) takes beyond ASCII's: U+3000, U+00A0,
# U+2003, U+001C, U+2028, U+205F (for the templates that trim)
TRIMMED = [{"role": "user", "content": "\u3000\xa0wide spaces\u2003"},
           {"role": "assistant", "content": "\x1c\u2028an answer\xa0\u205f"}]


# an empty system message, which Phi-3.5's template leaves out
EMPTY_SYSTEM = [{"role": "system", "content": ""}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello."}]


def chats(fmt):
    """the conversations a format takes: Gemma's template has no system message"""
    cs = [c[1:] if fmt in NO_SYSTEM and c[0]["role"] == "system" else c for c in CHATS]
    if fmt == "phi3":
        cs = cs + [EMPTY_SYSTEM]
    return cs + [TRIMMED] if TEMPLATES[fmt][0][5] else cs


def stop(fmt):
    """the token a reply ends at"""
    return STOP.get(fmt, TEMPLATES[fmt][0][3])


def hf_tokenizer(tok, fmt):
    from transformers import PreTrainedTokenizerFast
    begin = TEMPLATES[fmt][0][0]
    eos = "<|endoftext|>" if fmt == "phi3" else "</s>" if fmt in SENTENCEPIECE else "<|eot_id|>"
    bos = "<s>" if fmt in SENTENCEPIECE else begin or "<|begin_of_text|>"
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos)


def open_close(fmt, role):
    """what the template writes before a role's content and after it"""
    (begin, head, mid, end, after, trim, assistant), _ = TEMPLATES[fmt]
    if fmt in INST:
        return (INST[fmt][0], INST[fmt][1]) if role == "user" else (INST[fmt][2], end)
    return head + (assistant if role == "assistant" else role) + mid, end


def chat_ids(tok, fmt, msgs, learn_from=0):
    """A conversation's ids by transformers' template, and whether each is learned (an
    assistant's message from message learn_from on: tokenizers' offsets)."""
    (begin, head, mid, end, after, trim, assistant), jinja = TEMPLATES[fmt]
    hf = hf_tokenizer(tok, fmt)
    text = hf.apply_chat_template(msgs, chat_template=jinja, tokenize=False)
    parts, spans, at, system = [begin], [], len(begin), None
    for i, m in enumerate(msgs):
        if fmt == "phi3" and m["role"] == "system" and not m["content"]:
            continue
        if fmt in SYS_IN_USER and m["role"] == "system":
            system = m["content"]
            continue
        c = m["content"]
        if system is not None and m["role"] == "user":
            c, system = SYS_IN_USER[fmt][0] + system + SYS_IN_USER[fmt][1] + c, None
        c = c.strip() if trim else c
        h, close = open_close(fmt, m["role"])
        if m["role"] == "assistant" and i >= learn_from:   # (the [INST] form's open learned too)
            spans.append((at if fmt in INST else at + len(h), at + len(h) + len(c) + len(close)))
        parts += [h, c, close, after]
        at += len(h) + len(c) + len(close) + len(after)
    parts.append(TAIL.get(fmt, ""))
    assert "".join(parts) == text, (fmt, "".join(parts), text)
    enc = tok.encode(text, add_special_tokens=False)
    assert enc.ids == hf.apply_chat_template(msgs, chat_template=jinja, tokenize=True)
    return enc.ids, [any(a <= o[0] < b for a, b in spans) for o in enc.offsets]


def chat_row(tok, fmt, msgs):
    """A conversation's row by transformers' template and tokenizers' offsets (None: no
    target kept)."""
    ids, keep = chat_ids(tok, fmt, msgs)
    pad = tok.token_to_id(stop(fmt))
    x = [ids[i] if i < len(ids) else pad for i in range(TC)]
    y = [ids[i + 1] if i + 1 < len(ids) and keep[i + 1] else -100 for i in range(TC)]
    return (x, y) if any(v != -100 for v in y) else None


def chat_expected(tok, fmt):
    """Each conversation's row (chat_row)."""
    return [chat_row(tok, fmt, msgs) for msgs in chats(fmt)]


def chat_case(tok, tj, fmt):
    f = os.path.join(OUT, "chat_%s.jsonl" % fmt)
    with open(f, "w") as out:
        for msgs in chats(fmt):
            out.write(json.dumps({"messages": msgs}) + "\n")
    d = os.path.join(OUT, "chat_" + fmt)
    run(f, d, "--tokenizer", tj, "--seq-len", str(TC), "--val-frac", "0", "--chat", fmt)
    want = [r for r in chat_expected(tok, fmt) if r]
    gx, gy = np.load(d + "/train_x.npy"), np.load(d + "/train_y.npy")
    assert gx.tolist() == [r[0] for r in want] and gy.tolist() == [r[1] for r in want], (
        fmt, gx.tolist(), gy.tolist(), want)
    assert len(want) == len(chats(fmt)) - 1, len(want)
    print("ok   data sft --chat %s: %d of %d conversations (one without an answer left out) equal "
          "transformers' template, the assistants' tokens alone learned (%d targets)"
          % (fmt, len(want), len(chats(fmt)), int((gy != -100).sum())))


def pairs_chat_case(tok, tj, fmt):
    """data pairs --chat FMT for a dpo model: each conversation that ends in an answer
    against the same with another answer, half of them with the prompt apart (TRL's
    explicit form); each half the template's ids padded on the left (by the tokenizer's
    padding id, 0), y the final answer's next ids alone (an earlier assistant message is
    the prompt's)"""
    TP = TC
    lines, want_x, want_y = [], [], []
    for k, msgs in enumerate(chats(fmt)):
        if msgs[-1]["role"] != "assistant":
            continue
        other = msgs[:-1] + [{"role": "assistant", "content": "Another answer, %d." % k}]
        lines.append({"prompt": msgs[:-1], "chosen": msgs[-1:], "rejected": other[-1:]} if k % 2
                     else {"chosen": msgs, "rejected": other})
        halves = [chat_ids(tok, fmt, m, len(m) - 1) for m in (msgs, other)]
        if max(len(ids) for ids, _ in halves) > TP:
            continue
        xs, ys = [], []
        for ids, keep in halves:
            P = TP - len(ids)
            xs += [0] * P + ids
            ys += [-100] * P + [ids[i + 1] if i + 1 < len(ids) and keep[i + 1] else -100
                                for i in range(len(ids))]
        want_x.append(xs)
        want_y.append(ys)
    f = os.path.join(OUT, "pairs_%s.jsonl" % fmt)
    with open(f, "w") as out:
        out.writelines(json.dumps(l) + "\n" for l in lines)
    model = os.path.join(OUT, "dpo_model.json")
    with open(model, "w") as out:
        json.dump({"model": {"inputs": {"x": {"shape": [2 * TP], "dtype": "i32"},
                                        "pos": {"shape": [2 * TP], "dtype": "i32"},
                                        "y": {"shape": [2 * TP], "dtype": "i32", "classes": 1000},
                                        "ref": {"shape": [2], "dtype": "f32"}},
                             "positions": "pos", "layers": [],
                             "loss": {"op": "dpo", "target": "y", "reference": "ref"}}}, out)
    d = os.path.join(OUT, "pairs_" + fmt)
    subprocess.run([TRAINC, "data", "pairs", f, d, "--tokenizer", tj, "--model", model, "--chat",
                    fmt, "--val-frac", "0"], check=True, capture_output=True)
    gx, gy = np.load(d + "/train_x.npy"), np.load(d + "/train_y.npy")
    assert gx.tolist() == want_x and gy.tolist() == want_y, (fmt, gx.tolist(), want_x)
    print("ok   data pairs --chat %s: %d pairs (the prompt apart and not) equal transformers' "
          "template padded on the left, the final answer alone learned (%d targets)"
          % (fmt, len(want_x), int((gy != -100).sum())))


def packed(tok, tj):
    """--pack against the same examples one a row: the rows as the reference packs them,
    fewer of them, the same targets learned, and their positions"""
    f = os.path.join(OUT, "packed.jsonl")
    pairs = pack_pairs(tok)
    with open(f, "w") as out:
        for p, c in pairs:
            out.write(json.dumps({"prompt": p, "completion": c}) + "\n")
    args = ["--tokenizer", tj, "--seq-len", str(T), "--val-frac", "0.2", "--eos", EOS]
    run(f, os.path.join(OUT, "unpacked"), *args)
    p = run(f, os.path.join(OUT, "packed"), *args, "--pack")
    print(p.stdout.strip())
    rows, targets = {}, {}
    for how in ("unpacked", "packed"):
        want = expected(tok, 3, how == "packed", pairs)
        for arrays, part in zip(want[:2], ("train", "val")):
            for a, name in zip(arrays, (part + "_x", part + "_y", part + "_pos")):
                got = np.load(os.path.join(OUT, how, name + ".npy"))
                assert got.shape == a.shape and np.array_equal(got, a), (how, name, got.shape, a.shape)
        assert os.path.exists(os.path.join(OUT, how, "train_pos.npy")) == (how == "packed")
        rows[how] = len(want[0][0]) + len(want[1][0])
        targets[how] = int((want[0][1] != -100).sum() + (want[1][1] != -100).sum())
    assert rows["packed"] < rows["unpacked"] and targets["packed"] == targets["unpacked"], (rows, targets)
    print("ok   data sft --pack: %d examples in %d rows (%d one a row), whole, in order, as many "
          "a row as fit in T + 1 ids; the same %d targets; each id's position in its example "
          "(pos.npy)" % (len(pairs), rows["packed"], rows["unpacked"], targets["packed"]))


def sample_chat(tok, tj, fmt, d):
    """The trainer's --chat FORMAT: the prompt's ids are apply_chat_template's for one user
    message with the generation prompt; the sample ends at the template's end token (a
    model whose head's bias makes that token the most likely at every position: nothing
    printed; with --stop naming another token, the end token printed over and over)."""
    (begin, head, mid, end, after, trim, assistant), jinja = TEMPLATES[fmt]
    hf = hf_tokenizer(tok, fmt)
    V = max(tok.get_vocab_size(), int(np.load(d + "/train_x.npy").max()) + 1)
    spec = {"trainc": 1,
            "model": {"name": "chat_tiny",
                      "inputs": {"x": {"shape": [T], "dtype": "i32"},
                                 "y": {"shape": [T], "dtype": "i32", "classes": V}},
                      "layers": [{"op": "embedding", "name": "emb", "vocab": V, "dim": 16, "input": "x"},
                                 {"op": "attention", "name": "att", "heads": 2}, {"op": "rmsnorm"},
                                 {"op": "linear", "name": "head", "out": V}],
                      "loss": {"op": "cross_entropy", "target": "y", "ignore_index": -100}},
            "train": {"data": {"train": {"x": os.path.abspath(d + "/train_x.npy"),
                                         "y": os.path.abspath(d + "/train_y.npy")}},
                      "batch_size": 2, "max_steps": 1}}
    sp, run_dir = os.path.join(OUT, "chat_tiny.json"), os.path.join(OUT, "chat_run")
    json.dump(spec, open(sp, "w"))
    subprocess.run([TRAINC, "run", sp, "--out", run_dir, "--quiet"], check=True, capture_output=True)
    import st_check
    w = {k: v.copy() for k, v in st_check.load(os.path.join(run_dir, "model.safetensors")).items()}
    eid = tok.token_to_id(stop(fmt))
    w["head.weight"][:] = 0
    w["head.bias"][:] = 0
    w["head.bias"][eid] = 10
    init = os.path.join(OUT, "chat_init.safetensors")
    st_check.save(init, w)
    user = "  Translate: naïve café ☕\n"
    base = [TRAINC, "run", sp, "--eval", "--init", init, "--tokenizer", tj, "--sample", "5",
            "--chat", fmt, "--prompt", user]
    p = subprocess.run(base, capture_output=True, text=True)
    m = re.search(r"^prompt: (\d+) tokens:(.*)$", p.stderr, re.M)
    want = hf.apply_chat_template([{"role": "user", "content": user}], chat_template=jinja,
                                  add_generation_prompt=True, tokenize=True)
    got = [int(v) for v in m.group(2).split()] if m else None
    assert p.returncode == 0 and got == want, (fmt, p.returncode, got, want, p.stderr[-500:])
    assert p.stdout == "\n", (fmt, p.stdout)   # ended at once, at the end token
    q = subprocess.run(base + ["--stop", OTHER.get(fmt, head)], capture_output=True, text=True)
    assert q.returncode == 0 and q.stdout == stop(fmt) * 5 + "\n", (fmt, q.returncode, q.stdout, q.stderr[-500:])
    # a conversation from stdin, a turn a line: the turns' ids are the template's for the
    # whole conversation (each reply, empty here, closed by the end token; where the end is
    # more than the token a reply ends at, the model writes the rest: the turns are then
    # the template's for each user message after that token)
    turns = ["first question", "  second, longer one \u3000"]
    conv = subprocess.run(base[:-2], input="\n".join(turns) + "\n", capture_output=True, text=True)
    got = [int(v) for m in re.finditer(r"^turn: \d+ tokens:(.*)$", conv.stderr, re.M) for v in m.group(1).split()]
    msgs = [{"role": "user", "content": turns[0]}, {"role": "assistant", "content": ""},
            {"role": "user", "content": turns[1]}]

    def conversation(ms):
        if fmt not in STOP:
            return hf.apply_chat_template(ms, chat_template=jinja, add_generation_prompt=True, tokenize=True)
        return (hf.apply_chat_template(ms[:-2], chat_template=jinja, add_generation_prompt=True, tokenize=True)
                + [eid] + hf.apply_chat_template(ms[-1:], chat_template=jinja, add_generation_prompt=True,
                                                 tokenize=True))
    want2 = conversation(msgs)
    assert conv.returncode == 0 and got == want2 and conv.stdout == "\n\n", (
        fmt, conv.returncode, got, want2, conv.stdout, conv.stderr[-500:])
    # --system: the system message's turn first (its content trimmed where the template
    # trims), in the prompt and in a conversation's first turn; Gemma's template refuses one
    sysm = " You answer briefly.\u3000"
    s = subprocess.run(base + ["--system", sysm], capture_output=True, text=True)
    sconv = subprocess.run(base[:-2] + ["--system", sysm], input="\n".join(turns) + "\n", capture_output=True,
                           text=True)
    if fmt in NO_SYSTEM:
        for r in (s, sconv):
            assert r.returncode == 1 and "--system: --chat %s has no system message" % fmt in r.stderr, r.stderr
    else:
        m = re.search(r"^prompt: (\d+) tokens:(.*)$", s.stderr, re.M)
        got = [int(v) for v in m.group(2).split()] if m else None
        sm = [{"role": "system", "content": sysm}]
        want_s = hf.apply_chat_template(sm + [{"role": "user", "content": user}], chat_template=jinja, add_generation_prompt=True, tokenize=True)
        assert s.returncode == 0 and got == want_s, (fmt, s.returncode, got, want_s, s.stderr[-500:])
        got = [int(v) for m in re.finditer(r"^turn: \d+ tokens:(.*)$", sconv.stderr, re.M) for v in m.group(1).split()]
        want_c = conversation(sm + msgs)
        assert sconv.returncode == 0 and got == want_c, (fmt, sconv.returncode, got, want_c, sconv.stderr[-500:])
        # an empty system message, which Phi-3.5's template leaves out and the others write
        e = subprocess.run(base + ["--system", ""], capture_output=True, text=True)
        m = re.search(r"^prompt: (\d+) tokens:(.*)$", e.stderr, re.M)
        got = [int(v) for v in m.group(2).split()] if m else None
        want_e = hf.apply_chat_template([{"role": "system", "content": ""}, {"role": "user", "content": user}],
                                        chat_template=jinja, add_generation_prompt=True, tokenize=True)
        assert e.returncode == 0 and got == want_e, (fmt, e.returncode, got, want_e, e.stderr[-500:])
    nochat = [x for i, x in enumerate(base) if x != "--chat" and base[i - 1] != "--chat"]
    r = subprocess.run(nochat + ["--system", sysm], capture_output=True, text=True)
    assert r.returncode == 1 and "--system is a chat template's system message: it needs --chat" in r.stderr, r.stderr
    r = subprocess.run(base[:-2] + ["--num-samples", "2"], input="x\n", capture_output=True, text=True)
    assert r.returncode == 1 and "--num-samples: a conversation (--chat without --prompt)" in r.stderr, r.stderr
    no_tok = [x for i, x in enumerate(base) if x != "--tokenizer" and base[i - 1] != "--tokenizer"]
    r = subprocess.run(no_tok, capture_output=True, text=True)
    assert r.returncode == 1 and "--chat writes text in a chat template: it needs --tokenizer" in r.stderr, r.stderr
    print("ok   --chat %s: the prompt's %d ids are apply_chat_template's (add_generation_prompt); "
          "the sample ends at %s unless --stop names another; two turns from stdin are the "
          "conversation's %d ids; --system %s" % (fmt, len(want), stop(fmt), len(want2),
                                                  "refused" if fmt in NO_SYSTEM else "the system turn's ids first"))


def apart(sp):
    """What --chat mistral exercises: a reply right after "[/INST]" encodes otherwise
    alone (its first piece then takes a "▁") than where the template writes it."""
    head = "[INST] Count: [/INST]"
    reply = [m["content"] for c in chats("mistral") for m in c if m["role"] == "assistant"]
    split = [r for r in reply if sp.encode(head + r, add_special_tokens=False).ids
             != sp.encode(head, add_special_tokens=False).ids + sp.encode(r, add_special_tokens=False).ids]
    assert split, reply
    print("ok   --chat mistral: %d of its %d replies encode otherwise alone than after [/INST] "
          "(the learned ids are those each adds to the text before it)" % (len(split), len(reply)))


def refused(tj, fmt, what, msgs, want):
    """A file of a good conversation and then msgs: --chat fmt exits 1 naming line 2 with
    want, nothing written."""
    f, d = os.path.join(OUT, "refused.jsonl"), os.path.join(OUT, "refused")
    open(f, "w").write(json.dumps({"messages": CHATS[1]}) + "\n" + json.dumps({"messages": msgs}) + "\n")
    p = run(f, d, "--tokenizer", tj, "--seq-len", str(TC), "--val-frac", "0", "--chat", fmt, ok=False)
    assert p.returncode == 1 and "refused.jsonl:2: error: " + want in p.stderr, (what, p.stderr)
    assert not os.path.exists(d) or not os.listdir(d), os.listdir(d)
    print("ok   --chat %s and %s: exit 1 naming the line, nothing written" % (fmt, what))


def refusals(tok, tj, sj):
    """What the templates refuse: Gemma's and Mistral's a system message and roles out of
    turn, Mistral's roles other than user and assistant; Phi-3's roles it leaves out; and
    a reply whose first token would begin in ChatML's head (a newline joins its newlines)."""
    in_turn = "needs the roles in turn, as its template does: user, assistant, user, ... "
    refused(tj, "gemma", "a system message", CHATS[0], "--chat gemma has no system message")
    refused(tj, "gemma", "two user messages in a row",
            [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
            "--chat gemma " + in_turn + "(message 2 is 'user')")
    refused(tj, "phi3", "a 'tool' message (its template leaves it out)",
            [{"role": "user", "content": "2 + 2?"}, {"role": "tool", "content": "4"}],
            "--chat phi3 writes system, user and assistant messages alone")
    refused(tj, "chatml", "a reply whose newlines join the head's in one token",
            [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "\n\nHello"}],
            "a token across the edge of an assistant's message: not a text --chat chatml can mask")
    # the same reply past the row's T + 1 ids is cut, its edge not looked at
    f, d = os.path.join(OUT, "edge_cut.jsonl"), os.path.join(OUT, "edge_cut")
    open(f, "w").write(json.dumps({"messages": CHATS[1][:2] + [
        {"role": "user", "content": "copyright " * TC}, {"role": "assistant", "content": "\n\nHello"}]}) + "\n")
    run(f, d, "--tokenizer", tj, "--seq-len", str(TC), "--val-frac", "0", "--chat", "chatml")
    x, y = chat_row(tok, "chatml", json.load(open(f))["messages"])
    assert np.load(d + "/train_x.npy").tolist() == [x] and np.load(d + "/train_y.npy").tolist() == [y]
    print("ok   --chat chatml and that reply past the row's T + 1 ids: cut, not refused, the row "
          "transformers' template gives")
    refused(sj, "mistral", "a system message", CHATS[0], "--chat mistral has no system message")
    refused(sj, "mistral", "two user messages in a row",
            [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
            "--chat mistral " + in_turn + "(message 2 is 'user')")
    refused(sj, "mistral", "an assistant first", [{"role": "assistant", "content": "a"}],
            "--chat mistral " + in_turn + "(message 1 is 'assistant')")
    refused(sj, "mistral", "a tool message",
            [{"role": "user", "content": "2 + 2?"}, {"role": "tool", "content": "4"}],
            "--chat mistral writes user and assistant messages alone (its template refuses others) "
            "(message 2 is 'tool')")
    refused(sj, "llama2", "a system message not first", CHATS[1][:2] + CHATS[0][:1],
            "--chat llama2 takes a system message first alone (its template writes it into the "
            "first user message; message 3 is 'system')")
    refused(sj, "llama2", "two user messages after the system message", CHATS[0][:2] + CHATS[0][1:2],
            "--chat llama2 " + in_turn + "(message 3 is 'user')")
    refused(sj, "llama2", "a tool message (its template leaves it out)",
            [{"role": "user", "content": "2 + 2?"}, {"role": "tool", "content": "4"}],
            "--chat llama2 writes user and assistant messages alone")
    refused(sj, "zephyr", "a tool message (its template leaves it out)",
            [{"role": "user", "content": "2 + 2?"}, {"role": "tool", "content": "4"}],
            "--chat zephyr writes system, user and assistant messages alone")


def run(*args, ok=True):
    p = subprocess.run([TRAINC, "data", "sft", *args], capture_output=True, text=True)
    if (p.returncode == 0) != ok:
        sys.exit("FAIL trainc data sft %s: exit %d\n%s%s" % (" ".join(args), p.returncode,
                                                              p.stdout, p.stderr))
    return p


def bad_input(tj):
    cases = [("not JSON", '{"prompt": "a", "completion": ', ":1: error: not a JSON object"),
             ("a missing key", '{"prompt": "a"}', ":1: error: missing key 'completion'"),
             ("a number", '{"prompt": "a", "completion": 3}', ":1: error: 'completion' must be a string")]
    for what, line, want in cases:
        f, d = os.path.join(OUT, "bad.jsonl"), os.path.join(OUT, "bad")
        open(f, "w").write(line + "\n")
        p = run(f, d, "--tokenizer", tj, "--seq-len", str(T), "--val-frac", "0", ok=False)
        assert p.returncode == 1 and want in p.stderr, (what, p.returncode, p.stderr)
        assert not os.path.exists(d) or not os.listdir(d), (what, os.listdir(d))
        print("ok   %s: exit 1, %s" % (what, p.stderr.strip().splitlines()[0]))


def train(d, vocab):
    spec = {"trainc": 1,
            "model": {"name": "sft_tiny",
                      "inputs": {"x": {"shape": [T], "dtype": "i32"},
                                 "y": {"shape": [T], "dtype": "i32", "classes": vocab}},
                      "layers": [{"op": "embedding", "vocab": vocab, "dim": 16, "input": "x"},
                                 {"op": "attention", "heads": 2}, {"op": "rmsnorm"},
                                 {"op": "linear", "out": vocab, "bias": False}],
                      "loss": {"op": "cross_entropy", "target": "y", "ignore_index": -100}},
            "train": {"data": {"train": {"x": os.path.abspath(d + "/train_x.npy"),
                                         "y": os.path.abspath(d + "/train_y.npy")},
                               "val": {"x": os.path.abspath(d + "/val_x.npy"),
                                       "y": os.path.abspath(d + "/val_y.npy")}},
                      "batch_size": 2, "max_steps": 3, "log_every": 1}}
    sp = os.path.join(OUT, "spec.json")
    json.dump(spec, open(sp, "w"))
    subprocess.run([TRAINC, "run", sp, "--out", os.path.join(OUT, "run"), "--quiet"], check=True)
    recs = [json.loads(l) for l in open(os.path.join(OUT, "run", "metrics.jsonl"))]
    val = [r for r in recs if "val_loss" in r]
    assert len([r for r in recs if "loss" in r and "event" not in r]) == 3 and val, recs
    print("ok   3 steps on the arrays with ignore_index -100: val_loss %.4f" % val[-1]["val_loss"])


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    tok = th.trained("llama3", [th.license_text()], 600)
    tj = os.path.join(OUT, "tokenizer.json")
    tok.save(tj)
    f = os.path.join(OUT, "examples.jsonl")
    with open(f, "w") as out:
        for i, (p, c) in enumerate(EXAMPLES):
            out.write(json.dumps({"prompt": p, "completion": c}, ensure_ascii=i % 2 == 0) + "\n")
            if i == 3:
                out.write("\n")
    d = os.path.join(OUT, "data")
    p = run(f, d, "--tokenizer", tj, "--seq-len", str(T), "--val-frac", "0.34", "--eos", EOS)
    print(p.stdout.strip())
    (tx, ty), (vx, vy), cut, left = expected(tok, 3)
    for name, want in (("train_x", tx), ("train_y", ty), ("val_x", vx), ("val_y", vy)):
        got = np.load(os.path.join(d, name + ".npy"))
        assert got.dtype == np.int32 and got.shape == want.shape, (name, got.dtype, got.shape, want.shape)
        assert np.array_equal(got, want), (name, np.argwhere(got != want)[:5])
    assert left and "%d cut at %d tokens, %d left out" % (cut, T + 1, left) in p.stdout, p.stdout
    print("ok   data sft: %d train and %d val rows equal tokenizers' ids with TRL's masking (-100 on "
          "the prompts and the padding, %d targets learned)" % (len(tx), len(vx), int((ty != -100).sum())))
    packed(tok, tj)
    bad_input(tj)
    train(d, tok.get_vocab_size())
    tok.add_special_tokens(SPECIALS)
    tj = os.path.join(OUT, "tokenizer_chat.json")
    tok.save(tj)
    from tokenizers import Tokenizer
    sp = Tokenizer.from_str(json.dumps(th.sp_trained([th.license_text()], 600, words=True)))
    sj = os.path.join(OUT, "tokenizer_sp.json")
    sp.save(sj)
    toks = {fmt: (sp, sj) if fmt in SENTENCEPIECE else (tok, tj) for fmt in TEMPLATES}
    for fmt in TEMPLATES:
        chat_case(*toks[fmt], fmt)
        pairs_chat_case(*toks[fmt], fmt)
    apart(sp)
    for fmt in TEMPLATES:
        sample_chat(*toks[fmt], fmt, d)
    refusals(tok, tj, sj)
    print("data_sft: all checks passed")


if __name__ == "__main__":
    main()
