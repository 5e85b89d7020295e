"""The tables of bench/gpu_resnet.sh's results: usage resnet_table.py resnet.jsonl

Prints bench/RESULTS.md's rows: the time to the target accuracy (wall clock from
launch to exit, each side's runs: the median when there are several), with trainc's
ratio to each PyTorch side (a side stopped before the target gives a lower bound,
"> Nx"); then samples/s per model, batch and precision in the columns of the device
tables (model | batch | precision | trainc | PyTorch eager | torch.compile | llm.c | vs
eager | vs compile | memory | date, commit), PyTorch eager's column with its whole-step
CUDA graph where the runs had one (said beside the figure): each side's median over its runs with the
range beside it, the ratios of the medians, trainc's arena + parameters against
PyTorch eager's peak less the data sets it holds on the device (trainc's are apart from
its arena too). Then every error and skipped run.
"""
import json, statistics, sys

SIDES = ("trainc", "eager", "compile")


def side(r):
    """The column of a record: PyTorch eager with or without its whole-step CUDA graph
    in one (the impl, eager+graph or eager, is printed beside the figure)."""
    return "eager" if r.get("impl") == "eager+graph" else r.get("impl")


def graph_mark(runs):
    kinds = {r.get("impl") for r in runs}
    return " (CUDA graph)" if kinds == {"eager+graph"} else " (some with a CUDA graph)" if "eager+graph" in kinds else ""


def fmt_range(v, unit=""):
    med = statistics.median(v)
    s = f"{med:,.0f}{unit}"
    return s + (f" ({min(v):,.0f}-{max(v):,.0f}, {len(v)} runs)" if len(v) > 1 else "")


def tta_rows(rows, meta):
    runs = {k: [r for r in rows if r.get("kind") == "tta" and side(r) == k and "error" not in r] for k in SIDES}
    if not any(runs.values()):
        return
    target = meta.get("target", 0.94)
    print(f"\nTime to {100 * target:.1f}% test accuracy, wall clock from launch to exit (compilation included)")
    for k in SIDES:
        for r in runs[k]:
            acc = r.get("val_acc")
            state = "reached" if r.get("reached") else "NOT reached"
            end = "" if k == "trainc" or r.get("reached") else f" (stopped: {r.get('stopped') or 'epochs done'})"
            print(f"  {r.get('impl'):11s} {state} in {r['wall_s']:.1f} s, {r.get('steps')} steps, last val_acc "
                  + (f"{100 * acc:.2f}%" if acc is not None else "none") + end
                  + (f" [{r['graph_note']}]" if r.get("graph_note") else ""))
            if r.get("curve"):
                print("              by epoch:", ", ".join(f"{c[0]}: {100 * c[2]:.2f}%" + (f" at {c[3]:.0f} s" if c[3] else "")
                                                      for c in r["curve"]))
    t = [r["wall_s"] for r in runs["trainc"] if r.get("reached")]
    tm = statistics.median(t) if t else None

    def cell(k):
        v = runs[k]
        if not v:
            return "not run", ""
        reached = [r["wall_s"] for r in v if r.get("reached")]
        if reached:
            m = statistics.median(reached)
            return f"{m:.1f} s{graph_mark(v)}", (f"{m / tm:.2f}x" if tm else "")
        m = max(r["wall_s"] for r in v)
        best = max((r.get("val_acc") or 0) for r in v)
        return f"not reached in {m:.0f} s ({100 * best:.2f}%){graph_mark(v)}", (f"> {m / tm:.2f}x" if tm else "")
    spec = runs["trainc"][0] if runs["trainc"] else next(r for k in SIDES for r in runs[k])
    tc, _ = cell("trainc")
    (e, ve), (c, vc) = cell("eager"), cell("compile")
    print(f"| {spec.get('model', 'resnet_fashion')} to {100 * target:.1f}% | {spec.get('batch', '?')} | "
          f"{spec.get('precision', 'fp32')} | {tc} | {e} | {c} | | {ve} | {vc} | | "
          f"{meta.get('date', '?')}, {meta.get('commit', '?')} |")


def speed_rows(rows, meta):
    keys = []
    for r in rows:
        if r.get("kind") == "speed" and r.get("samples_per_s"):
            k = (r["model"], r["batch"], r["precision"])
            if k not in keys:
                keys.append(k)
    if not keys:
        return
    print(f"\nsamples/s: median of the runs (range), WARM {meta.get('warm')} + STEPS {meta.get('steps')} steps a run")
    print("| model | batch | precision | trainc | PyTorch eager | torch.compile | llm.c | vs eager | vs compile | "
          "memory, trainc vs PyTorch | date, commit |")
    print("| --- | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | --- | --- |")
    for model, batch, prec in keys:
        runs = {k: [r for r in rows if r.get("kind") == "speed" and side(r) == k and r.get("model") == model
                    and r.get("batch") == batch and r.get("precision") == prec and r.get("samples_per_s")]
                for k in SIDES}
        med = {k: statistics.median(r["samples_per_s"] for r in v) for k, v in runs.items() if v}
        cells = [fmt_range([r["samples_per_s"] for r in runs[k]]) + graph_mark(runs[k]) if runs[k] else "not run"
                 for k in SIDES]
        ratio = lambda k: f"{med['trainc'] / med[k]:.2f}x" if "trainc" in med and k in med else ""
        ours = max((r.get("arena_params_bytes") or 0 for r in runs["trainc"]), default=0)
        # both without the data sets they hold on the device
        theirs = max(((r.get("peak_bytes") or 0) - (r.get("data_bytes") or 0) for r in runs["eager"]), default=0)
        mem = f"{ours / 1e6:.1f} MB vs {theirs / 1e6:.1f} MB" if ours and theirs else ""
        print(f"| {model} | {batch} | {prec} | {cells[0]} | {cells[1]} | {cells[2]} | | {ratio('eager')} | "
              f"{ratio('compile')} | {mem} | {meta.get('date', '?')}, {meta.get('commit', '?')} |")
    for r in rows:   # trainc with another setting (speed_ab) against its default runs
        if r.get("kind") == "speed_ab" and r.get("samples_per_s"):
            base = [x["samples_per_s"] for x in rows if x.get("kind") == "speed" and side(x) == "trainc"
                    and x.get("trainer") == r.get("trainer") and x.get("batch") == r.get("batch")
                    and x.get("samples_per_s")]
            vs = f", {r['samples_per_s'] / statistics.median(base):.2f}x the default's median" if base else ""
            print(f"A/B: {r['trainer']} at {r['batch']} with {r.get('env')}: {r['samples_per_s']:,.1f} samples/s{vs}")
    first = [r for r in rows if r.get("kind") == "speed" and r.get("first_step_s") is not None]
    if first:
        print("PyTorch's first step (launch to its end, compilation included), the slowest run of each:")
        seen = {}
        for r in first:
            k = (r["impl"], r["model"], r["batch"], r["precision"])   # eager+graph apart
            seen[k] = max(seen.get(k, 0), r["first_step_s"])
        for (impl, model, batch, prec), s in seen.items():
            print(f"  {impl:11s} {model} {batch} {prec}: {s:.1f} s")


def main(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    meta = next((r for r in rows if r.get("kind") == "meta"), {})
    print(f"device: {meta.get('device', '?')}; commit {meta.get('commit', '?')}, {meta.get('date', '?')}; "
          f"torch.compile mode {meta.get('torch_mode', '?')}" + ("; SMOKE (CPU, tiny: no figure)" if meta.get("smoke") else ""))
    tta_rows(rows, meta)
    speed_rows(rows, meta)
    for r in rows:
        if "error" in r or r.get("kind") == "skip" or r.get("exit"):
            print("note:", json.dumps(r))
    notes = {}
    for r in rows:
        if r.get("graph_note"):
            notes.setdefault(r["graph_note"], []).append(f"{r.get('kind')} {r.get('model')} {r.get('batch')}")
    for note, where in notes.items():
        print(f"note: eager without its CUDA graph in {len(where)} runs ({', '.join(sorted(set(where)))}): {note}")


if __name__ == "__main__":
    main(sys.argv[1])
