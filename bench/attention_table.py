"""The table of bench/gpu_attention.sh's results: usage attention_table.py attention.jsonl

For each shape (T, head dim, causal; the Llama-family rows by their model's name: grouped-
query heads and rope) and each implementation (trainc's kernels as the
runtime picks them, trainc with TRAINC_ATT_SM90=0, each PyTorch SDPA backend): the median
TFLOP/s over the rounds, forward and backward, and the spread of the forward's; then the
ratio of each trainc row's median to the fastest PyTorch backend's, forward and backward. Rows
that were skipped or failed are listed as notes.
"""
import json, statistics, sys


def impl(r):
    if r["impl"] == "trainc":
        return "trainc" + (" " + r["env"] if r.get("env") else "")
    return "torch " + r["backend"]


def main(path):
    runs, notes = {}, []
    for line in open(path):
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if "skipped" in r or "error" in r:
            notes.append(r)
            continue
        shape = (r.get("shape", ""), r["T"], r["hd"], r["causal"])
        runs.setdefault(shape, {}).setdefault(impl(r), []).append(r)
    print("%-32s %-26s %9s %9s %8s" % ("shape", "implementation", "fwd TF/s", "bwd TF/s", "spread"))
    for shape in sorted(runs):
        med = {}
        for name, rs in sorted(runs[shape].items()):
            f = statistics.median(x["fwd_tflops"] for x in rs)
            b = statistics.median(x["bwd_tflops"] for x in rs)
            spread = (max(x["fwd_tflops"] for x in rs) - min(x["fwd_tflops"] for x in rs)) / f if f else 0
            med[name] = (f, b)
            label = "%sT%d hd%d %s" % (shape[0] + " " if shape[0] else "", shape[1], shape[2],
                                        "causal" if shape[3] else "full")
            print("%-32s %-26s %9.1f %9.1f %7.1f%% (%d runs)" % (label, name, f, b, 100 * spread, len(rs)))
        torch = [v for k, v in med.items() if k.startswith("torch")]
        if not torch:
            continue
        bf, bb = max(t[0] for t in torch), max(t[1] for t in torch)
        for name in (k for k in med if k.startswith("trainc")):
            print("%-32s %-26s %8.2fx %8.2fx" % ("", name + " / best torch", med[name][0] / bf if bf else 0,
                                                 med[name][1] / bb if bb else 0))
    for r in notes:
        print("note:", json.dumps(r))


if __name__ == "__main__":
    main(sys.argv[1])
