"""The table of bench/gpu_dcgan.sh's results: usage dcgan_table.py dcgan.jsonl

For each batch and precision: each implementation's median samples/s over its runs,
their spread (min..max) and count, the ratio to torch.compile (its fastest row: any
compile mode, or compiled inside a CUDA graph where that ran), to the fastest PyTorch
row (whichever it is) and to eager, whether trainc makes the goal of twice
torch.compile's samples/s; PyTorch's compile time apart (warm_s: from the
process's start to the end of the warm-up). Then bench/RESULTS.md's rows (one a batch
and precision, the run record's date, device and commit) and the notes: rows skipped
or failed, and why.
"""
import json, statistics, sys

TORCH_COLS = [("eager", "PyTorch eager"), ("compile", "torch.compile"), ("graph", "eager, CUDA graph"),
              ("compile+graph", "compile, CUDA graph"), ("lightning", "Lightning")]


def fmt(x):
    return "{:,.0f}".format(x)


def groups(rows):
    """{(batch, precision): {impl: [records with samples_per_s]}} in the order met."""
    out = {}
    for r in rows:
        if r.get("samples_per_s") and "batch" in r:
            out.setdefault((r["batch"], r["precision"]), {}).setdefault(r["impl"], []).append(r)
    return out


def medians(runs):
    return {k: statistics.median(x["samples_per_s"] for x in v) for k, v in runs.items()}


def best_compile(med, p, graphs=True):
    """(samples/s, impl) of the fastest torch.compile row of precision p (compile in
    any mode; with graphs, compile+graph too), or (None, None)."""
    rows = [(v, k) for k, v in med.items() if k.startswith("torch+compile") and k.endswith("+" + p)
            and (graphs or not k.startswith("torch+compile+graph"))]
    return max(rows) if rows else (None, None)


def print_group(b, p, runs):
    med = medians(runs)
    comp, comp_k = best_compile(med, p)
    eager = med.get(f"torch+eager+{p}")
    best = max(((v, k) for k, v in med.items() if k.startswith("torch")), default=None)
    print(f"\ndcgan_fashion, batch {b}, {p}: median samples/s (min..max, runs)")
    for k, v in runs.items():
        s = [x["samples_per_s"] for x in v]
        ratios = []
        if comp and k != comp_k:
            ratios.append("%.2fx torch.compile (%s)" % (med[k] / comp, comp_k))
        if best and not k.startswith("torch"):
            ratios.append("%.2fx the fastest PyTorch (%s)" % (med[k] / best[0], best[1]))
        if eager and k != f"torch+eager+{p}":
            ratios.append("%.2fx eager" % (med[k] / eager))
        extra = ""
        if k.startswith("torch"):
            extra = "  warm-up %.1f s" % statistics.median(x.get("warm_s", 0) for x in v)
            if any(x.get("fullgraph") is False for x in v):
                extra += ", graph breaks"
        print("  %-34s %12s (%s..%s, %d)  %s%s" % (k, fmt(med[k]), fmt(min(s)), fmt(max(s)), len(s),
                                                  "  ".join(ratios), extra))
    t = med.get(f"trainc+{p}")
    if t and comp:   # the goal: at least twice torch.compile's samples/s
        print("  goal, 2x torch.compile: %s (%.2fx)" % ("met" if t >= 2 * comp else "NOT met", t / comp))


def results_rows(g, run):
    """bench/RESULTS.md's rows: trainc against every PyTorch row, the ratios to
    torch.compile and to the fastest PyTorch row."""
    print("\n| model | batch | precision | trainc | " + " | ".join(c for _, c in TORCH_COLS) +
          " | vs torch.compile | vs fastest PyTorch | date, commit |")
    print("| --- | ---: | --- |" + " ---: |" * (1 + len(TORCH_COLS)) + " ---: | ---: | --- |")
    for (b, p), runs in g.items():
        med = medians(runs)
        t = med.get(f"trainc+{p}")
        comp = best_compile(med, p)[0]
        best = max((v for k, v in med.items() if k.startswith("torch")), default=None)
        cells = []
        for m, _ in TORCH_COLS:
            if m == "compile":   # the fastest mode's, named when not max-autotune
                v, k = best_compile(med, p, graphs=False)
                mode = k[len("torch+compile:"):-len(p) - 1] if k and k.startswith("torch+compile:") else ""
                cells.append(fmt(v) + (f" ({mode})" if mode else "") if v else "")
            else:
                cells.append(fmt(med[f"torch+{m}+{p}"]) if f"torch+{m}+{p}" in med else "")
        print("| dcgan_fashion | %d | %s | %s | %s | %s | %s | %s, %s |" % (
            b, "bf16-mixed" if p == "bf16" else p, fmt(t) if t else "", " | ".join(cells),
            "%.2fx" % (t / comp) if t and comp else "", "%.2fx" % (t / best) if t and best else "",
            run.get("date", "?"), run.get("commit", "?")))


def main(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    run = next((r for r in rows if r.get("event") == "run"), {})
    print("device: %s; torch %s; commit %s; %s" % (run.get("device", "?"), next(
        (r["torch"] for r in rows if "torch" in r), "?"), run.get("commit", "?"), run.get("settings", "")))
    g = groups(rows)
    for (b, p), runs in g.items():
        print_group(b, p, runs)
    if g:
        results_rows(g, run)
    seen = set()
    for r in rows:
        why = r.get("skipped") or r.get("error")
        if why and (r.get("impl"), why) not in seen:
            seen.add((r.get("impl"), why))
            print("note: %s, batch %s: %s %s" % (r.get("impl"), r.get("batch"),
                                                "skipped:" if "skipped" in r else "error:", why))


if __name__ == "__main__":
    main(sys.argv[1])
