"""GPT-2 token shards of real English text, made offline, for bench/gpu_fp8.sh.

The device machine has no network and no GPT-2 vocabulary, so the text and the
tokenizer are made here: Debian's own prose (every package's copyright file and its
gzipped changelogs and READMEs under /usr/share/doc, read in sorted order until MB
megabytes), a GPT-2-style byte-level BPE of 50257 ids (GPT-2's pre-tokenizer and
<|endoftext|>, trained by tests/tokenizer_hf.py's `trained` with Hugging Face
`tokenizers`), and the shards written by `trainc data text --tokenizer` (llm.c's
format: uint16 ids, 256-int header), the last 5% as validation.

usage: HF_PYTHON bench/text_shards.py [DIR [MB]]    (default data/gpt2text, 32 MB)
writes DIR/train_000000.bin, DIR/val_000000.bin, DIR/tokenizer.json, DIR/source.json
"""
import glob, gzip, json, os, subprocess, sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import tokenizer_hf as th  # noqa: E402

TRAINC = os.environ.get("TRAINC", "build/trainc")


def debian_text(limit):
    """Debian's copyright files, then its gzipped docs, up to limit bytes, each
    paragraph once (the same licence is in hundreds of copyright files: kept, the
    text would be mostly repeats, and memorized)."""
    parts, size, used, seen = [], 0, 0, set()
    files = sorted(glob.glob("/usr/share/doc/*/copyright")) + sorted(glob.glob("/usr/share/doc/*/*.gz"))
    for f in files:
        if os.path.islink(f) or not os.path.isfile(f):
            continue
        try:
            raw = gzip.open(f).read() if f.endswith(".gz") else open(f, "rb").read()
        except (OSError, EOFError):
            continue
        t = raw.decode("utf-8", errors="replace")
        keep = []
        for para in t.split("\n\n"):
            h = hash(para.strip())
            if h not in seen:
                seen.add(h)
                keep.append(para)
        t = "\n\n".join(keep)
        parts.append(t + "\n<|endoftext|>\n")
        size += len(t)
        used += 1
        if size >= limit:
            break
    return "".join(parts), used


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "data/gpt2text"
    mb = float(sys.argv[2]) if len(sys.argv) > 2 else 32
    os.makedirs(out, exist_ok=True)
    text, nfiles = debian_text(int(mb * 1e6))
    txt = os.path.join(out, "debian.txt")
    with open(txt, "w", encoding="utf-8") as f:
        f.write(text)
    # at most 50257 ids (GPT-2's table); fewer where the text has fewer pairs to merge
    tok = th.trained("gpt2", [text[i:i + 4096] for i in range(0, len(text), 4096)], 50257)
    tj = os.path.join(out, "tokenizer.json")
    tok.save(tj)
    subprocess.run([TRAINC, "data", "text", txt, out, "--tokenizer", tj, "--val-frac", "0.05",
                    "--shard-tokens", "100000000"], check=True)
    os.remove(txt)
    n = {os.path.basename(p): (os.path.getsize(p) - 1024) // 2 for p in glob.glob(os.path.join(out, "*_0*.bin"))}
    src = {"text": "/usr/share/doc: */copyright then */*.gz, sorted, each paragraph once", "files": nfiles,
           "bytes": len(text.encode()), "vocab": tok.get_vocab_size(), "tokens": n}
    json.dump(src, open(os.path.join(out, "source.json"), "w"))
    print(json.dumps(src))


if __name__ == "__main__":
    main()
