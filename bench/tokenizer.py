"""trainc's BPE against Hugging Face `tokenizers`, single-threaded, on one file.

Builds a text of about MB megabytes (Debian's license texts, concatenated as often as
it takes), trains a GPT-2-style, a Llama-3-style and a Llama-2-style (SentencePiece
BPE, byte_fallback) tokenizer on the license texts (tests/tokenizer_hf.py's), and takes
the Llama 2 one's vocabulary in Gemma's spelling (Replace(" ", "▁") alone, nothing
prepended, no pre-tokenizer: the whole text one piece for `tokenizers`), then for
each: the wall time of
`trainc data text TEXT DIR --tokenizer T --val-frac 0` (reading, tokenizing and
writing the shard) against `Tokenizer.from_file(T).encode(text)` on the text already
in memory, and against encode_batch of its lines (other ids, what `tokenizers` does
fastest; RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false), best of REPS; prints MB/s
of input text, and checks that trainc's ids equal encode(text)'s.

usage: bench/tokenizer.sh [MB [REPS]]   (runs this under HF_PYTHON)
"""
import json
import os
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from tokenizers import Tokenizer  # noqa: E402
import tokenizer_hf as th  # noqa: E402

OUT = "build/bench_tokenizer"
TRAINC = os.environ.get("TRAINC", "build/trainc")


def best(fn, reps):
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        r = fn()
        t.append(time.perf_counter() - t0)
    return min(t), r


def main():
    mb = float(sys.argv[1]) if len(sys.argv) > 1 else 20
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    os.makedirs(OUT, exist_ok=True)
    th.OUT = OUT
    lic = th.license_text()
    text = lic * max(1, int(mb * 1e6 / len(lic.encode("utf-8")) + 0.999))
    path = os.path.join(OUT, "text.txt")
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    size = os.path.getsize(path)
    print("text: %s, %.1f MB (the license texts x %d)" % (path, size / 1e6, len(text) // len(lic)))
    lines = text.splitlines(keepends=True)
    for kind, vocab in (("gpt2", 5000), ("llama3", 5000), ("sp_llama2", 5000), ("sp_gemma", 5000)):
        tj = os.path.join(OUT, kind + ".json")
        if kind.startswith("sp_"):   # as Llama 2's: a newline is <0x0A>, words as SentencePiece's
            flat = [c.replace("\n", " ") for c in lic.split("\n\n")]
            sp = th.sp_trained(flat, vocab, words=True)
            with open(tj, "w", encoding="utf-8") as f:
                json.dump(th.sp_variants(sp)[kind] if kind != "sp_llama2" else sp, f,
                          ensure_ascii=False)
        else:
            th.trained(kind, lic.split("\n\n"), vocab).save(tj)
        tok = Tokenizer.from_file(tj)
        t_tc, (got, _) = best(lambda: th.trainc_ids(tj, path, kind), reps)
        t_hf, enc = best(lambda: tok.encode(text), reps)
        same = got == enc.ids
        del enc
        t_lines, _ = best(lambda: tok.encode_batch(lines), reps)
        print("%-7s vocab %d: %d ids, %s; trainc %.1f MB/s (%.2f s); tokenizers encode(text) "
              "%.1f MB/s (%.2f s), encode_batch(lines) %.1f MB/s (%.2f s): trainc %.1fx and %.1fx"
              % (kind, vocab, len(got), "equal" if same else "DIFFER", size / 1e6 / t_tc, t_tc,
                 size / 1e6 / t_hf, t_hf, size / 1e6 / t_lines, t_lines, t_hf / t_tc,
                 t_lines / t_tc))
        if not same:
            sys.exit(1)


main()
