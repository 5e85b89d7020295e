"""The text and tokenizer of bench/gpu_hf.sh, made here for the pack (the device has no
hub): DIR/text.txt, Debian's prose (bench/text_shards.py's debian_text, MB megabytes),
and DIR/tokenizer.json, a Llama-3-style byte-level BPE of VOCAB ids trained on it with
Hugging Face `tokenizers` (tests/tokenizer_hf.py's `trained`: Llama 3's split pattern,
<|begin_of_text|> prepended to every encode). The model's vocabulary stays Llama-3.2-1B's
128256 rows; the tokenizer's ids are the first VOCAB of them.

usage: HF_PYTHON bench/hf_data.py DIR [MB [VOCAB]]      (defaults 8 and 32768)
"""
import json, os, sys

sys.path.insert(0, os.path.dirname(__file__))
from text_shards import debian_text, th  # noqa: E402


def main():
    out = sys.argv[1]
    mb = float(sys.argv[2]) if len(sys.argv) > 2 else 8
    vocab = int(sys.argv[3]) if len(sys.argv) > 3 else 32768
    os.makedirs(out, exist_ok=True)
    text, nfiles = debian_text(int(mb * 1e6))
    with open(os.path.join(out, "text.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    tok = th.trained("llama3", [text[i:i + 4096] for i in range(0, len(text), 4096)], vocab)
    tok.save(os.path.join(out, "tokenizer.json"))
    print(json.dumps({"text": "/usr/share/doc prose", "files": nfiles, "bytes": len(text.encode()),
                      "vocab": tok.get_vocab_size()}))


if __name__ == "__main__":
    main()
