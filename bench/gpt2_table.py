"""The table of bench/gpu_gpt2_b16.sh's results: usage gpt2_table.py gpt2_bB.jsonl...

For each batch label and each implementation (trainc's trainer and settings, PyTorch's
compile mode, llm.c's build): the median tokens/s over its runs, the spread (lowest and
highest, and (highest - lowest) / median), MFU by llm.c's count over the datasheet's 989
TFLOP/s and over the bf16 matrix rate measured in the same run, the ratios of trainc's
median to the fastest torch.compile row's and to llm.c with cuDNN; then compile times
(the cold one, from the 2-step "prewarm" run before the rounds, then each timed run's
from the cache), the wall time from launch to the end of step 1, and memory (trainc's
allocated bytes, PyTorch's max_memory_reserved and max_memory_allocated; the device's
used memory less the context where both sides recorded it). Rows that were skipped or
failed are listed as notes.
"""
import json, statistics, sys

DATASHEET = 989e12   # H100/H200 SXM dense bf16, what llm.c's MFU divides by
# 6 N + 6 L C T: N = GPT-2 124M's parameters (vocabulary 50257) less the position
# table's 1024 x 768, L = 12, C = 768, T = 1024 (llm.c's count; `trainc check`'s 798.6M)
FLOPS_PER_TOKEN = 6 * (124439808 - 1024 * 768) + 6 * 12 * 768 * 1024


def key(r):
    if r["impl"].startswith("trainc"):
        return r["impl"] + " " + r.get("trainer", "") + (" " + r["env"] if r.get("env") else "")
    if r["impl"].startswith("torch"):   # ("data": null: one batch drawn on the GPU)
        return (r["impl"] + ("" if r.get("pad", "slice") == "slice" else " pad=" + r["pad"]) +
                (" one batch" if "data" in r and not r["data"] else ""))
    return r["impl"] + (" -r %s" % r["recompute"] if r.get("recompute") not in (None, 0) else "")


def gib(b):
    return "%.2f GiB" % (b / 2 ** 30) if b else "?"


def table(rows, label, rate):
    runs, cold = {}, {}
    for r in rows:
        if r.get("label") != label or "impl" not in r:
            continue
        if r.get("round") == "prewarm":   # 2 steps: its compile time only
            if r.get("compile_s") is not None:
                cold[key(r)] = r["compile_s"]
        elif r.get("tokens_per_s"):
            runs.setdefault(key(r), []).append(r)
    if not runs:
        return
    med = {k: statistics.median(x["tokens_per_s"] for x in v) for k, v in runs.items()}
    comp = max((med[k] for k in med if k.startswith("torch+compile") and "pad=" not in k and
                "one batch" not in k), default=None)
    llmc = max((med[k] for k in med if k.startswith("llm.c") and "(cuDNN)" in k), default=None)
    batch = next(iter(runs.values()))[0].get("batch")
    print("\nGPT-2 124M, batch %s x 1024, bf16: median of each row's runs" % batch)
    for k, v in runs.items():
        t = [x["tokens_per_s"] for x in v]
        m = med[k]
        vs = []
        if k.startswith("trainc") and comp:
            vs.append("%.2fx torch.compile" % (m / comp))
        if k.startswith("trainc") and llmc:
            vs.append("%.2fx llm.c cuDNN" % (m / llmc))
        print("  %-52s %9.0f tok/s (%d runs, %.0f-%.0f, spread %.1f%%)  MFU %5.1f%% (989) %s  %s" % (
            k, m, len(t), min(t), max(t), 100 * (max(t) - min(t)) / m, 100 * m * FLOPS_PER_TOKEN / DATASHEET,
            "%5.1f%% (measured)" % (100 * m * FLOPS_PER_TOKEN / rate) if rate else "", ", ".join(vs)))
    for k, v in runs.items():
        c = [x.get("compile_s") for x in v if x.get("compile_s") is not None]
        f = [x.get("first_step_wall_s") for x in v if x.get("first_step_wall_s") is not None]
        mem = []
        x = v[0]
        if x.get("device_bytes"):
            mem.append("allocated " + gib(x["device_bytes"]))
        if x.get("reserved_bytes"):
            mem.append("reserved " + gib(x["reserved_bytes"]) + ", allocated " + gib(x.get("peak_bytes")))
        if x.get("used_bytes") and x.get("context_bytes") is not None:
            mem.append("used less context " + gib(x["used_bytes"] - x["context_bytes"]))
        if k in cold:
            c = [cold[k]] + c
        if c or f or mem:
            print("  %-52s %s%s%s" % (k, "compile %s s (cold, then cached)  " % " / ".join("%.1f" % y for y in c) if c else "",
                                      "launch to step 1 %s s  " % " / ".join("%.1f" % y for y in f) if f else "",
                                      "; ".join(mem)))
    for r in rows:
        if r.get("label") == label and "startup_to_step1_s" in r:
            print("  %-52s launch to the end of step 1 %.2f s" % (key(r), r["startup_to_step1_s"]))


def main(paths):
    rows = []
    for p in paths:
        rows += [json.loads(l) for l in open(p) if l.strip().startswith("{")]
    rate = next((r["flops_per_s"] for r in rows if "flops_per_s" in r), None)
    print("bf16 matrix rate measured: %s; MFU by llm.c's count, %.1f MFLOPs a token" % (
        "%.0f TFLOP/s" % (rate / 1e12) if rate else "?", FLOPS_PER_TOKEN / 1e6))
    labels = []
    for r in rows:
        if r.get("label") and r["label"] not in labels:
            labels.append(r["label"])
    for label in labels:
        table(rows, label, rate)
    for r in rows:
        if "error" in r or "skipped" in r or r.get("oom"):
            print("note:", json.dumps(r))


if __name__ == "__main__":
    main(sys.argv[1:])
