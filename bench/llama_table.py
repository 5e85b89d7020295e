"""The table of bench/gpu_llama.sh's results: usage llama_table.py llama.jsonl

For each label (a model at a batch): each implementation's median tokens/s over its
runs, MFU over the measured bf16 rate and over the datasheet's 989 TFLOP/s, the ratio
to torch.compile, peak memory and its ratio to PyTorch's smaller peak; then the memory goal.
"""
import json, statistics, sys

DATASHEET = 989e12
# vocab, d, layers, heads, kv heads, ffn, T, tied (specs/llama_124m.json, llama3_1b.json)
SHAPES = {"llama_124m": (50257, 768, 12, 12, 4, 2048, 1024, False),
          "llama3_1b": (128256, 2048, 16, 32, 8, 8192, 2048, True)}


def flops_per_token(shape):
    V, d, L, H, KV, F, T, tied = shape
    hd = d // H
    block = d * (H + 2 * KV) * hd + d * d + 3 * d * F + 2 * d
    n = L * block + d + V * d   # the head (or the tied table as the head); not the lookup
    return 6 * n + 6 * L * d * T


def main(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    rate = next((r["flops_per_s"] for r in rows if "flops_per_s" in r), None)
    print("bf16 matrix rate: %s" % ("%.0f TFLOP/s" % (rate / 1e12) if rate else "?"))
    labels = []
    for r in rows:
        if "label" in r and r["label"] not in labels:
            labels.append(r["label"])
    for label in labels:
        shape = SHAPES["llama_124m" if label.startswith("llama_124m") else "llama3_1b"]
        fpt = flops_per_token(shape)
        runs = {}
        for r in rows:
            if r.get("label") == label and r.get("tokens_per_s"):
                key = r["impl"] + (" " + r["trainer"] if "trainer" in r else "")
                runs.setdefault(key, []).append(r)
        med = {k: statistics.median(x["tokens_per_s"] for x in v) for k, v in runs.items()}
        mem = {k: max((x.get("device_bytes") or x.get("peak_bytes") or 0) for x in v) for k, v in runs.items()}
        comp = next((med[k] for k in med if k.startswith("torch+compile")), None)
        # memory against PyTorch's smaller peak of the two (eager or compiled)
        torch_mem = min((mem[k] for k in mem if k.startswith("torch") and mem[k]), default=None)
        print("\n%s (batch %s), median of %s runs" % (label, next(iter(runs.values()))[0]["batch"] if runs else "?",
                                                    "/".join(str(len(v)) for v in runs.values())))
        for k in runs:
            t = med[k]
            print("  %-34s %9.0f tok/s  MFU %5.1f%% (measured) %5.1f%% (989)  %s  mem %.1f GiB%s" % (
                k, t, 100 * t * fpt / rate if rate else float("nan"), 100 * t * fpt / DATASHEET,
                "%.2fx torch.compile" % (t / comp) if comp else "", mem[k] / 2 ** 30,
                " (%.2fx PyTorch's)" % (mem[k] / torch_mem) if torch_mem and not k.startswith("torch") else ""))
    none = [r["tokens_per_s"] for r in rows if r.get("label") == "goal_none_at_torch_batch" and r.get("tokens_per_s")]
    auto = [r["tokens_per_s"] for r in rows if r.get("label") == "goal_auto_at_twice" and r.get("tokens_per_s")]
    if none and auto:
        print("\nmemory goal: auto at twice PyTorch's batch runs at %.3fx none's tokens/s at PyTorch's batch" %
              (statistics.median(auto) / statistics.median(none)))
    for r in rows:
        if "error" in r or r.get("oom") or "goal" in r:
            print("note:", json.dumps(r))


if __name__ == "__main__":
    main(sys.argv[1])
