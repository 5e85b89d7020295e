#!/usr/bin/env bash
# --lr-find, the learning-rate range test (runtime/lrfind.c): the rates, the smoothing,
# the stop rule and the suggestion recomputed in Python from what lr_find.jsonl says;
# its steps are training steps (the first two losses are a constant-lr run's, bit for
# bit); nothing but lr_find.jsonl and lr_find.svg is written; `trainc run` gives the
# same curve; bad options are refused with exit 1 and nothing written.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=$(pwd)/build/tests/lr_find
rm -rf "$d"; mkdir -p "$d"
"$TRAINC" build specs/mlp_fashion.json -o "$d/t"
q=(--quiet --threads 1)

# check DIR STEPS LO HI: lr_find.jsonl against the rules; prints the suggestion
check() {
    $PY - "$@" <<'PY'
import json, math, os, sys, xml.dom.minidom
import numpy as np
d, steps, lo, hi = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
assert sorted(os.listdir(d)) == ["lr_find.jsonl", "lr_find.svg"], os.listdir(d)
recs = [json.loads(l) for l in open(os.path.join(d, "lr_find.jsonl"))]
end, pts = recs[-1], recs[:-1]
assert end["event"] == "lr_find" and end["steps"] == len(pts), end
assert end["min_lr"] == lo and end["max_lr"] == hi, end
n = len(pts)
for i, p in enumerate(pts):   # exponential rates, lo to hi over `steps`
    want = lo * (hi / lo) ** (i / (steps - 1))
    assert p["step"] == i + 1 and abs(p["lr"] - want) <= 1e-8 * want, (p, want)
avg, best = 0.0, math.inf
for i, p in enumerate(pts):   # Lightning's smoothing; stop past 4x the best
    avg = 0.98 * avg + 0.02 * p["loss"]
    sm = avg / (1 - 0.98 ** (i + 1))
    assert abs(sm - p["smoothed"]) <= 1e-6 * abs(sm), (i, sm, p)
    if i > 0 and (not math.isfinite(sm) or sm > 4 * best):
        assert i == n - 1 and end["stopped"] == "loss_diverged", (i, n, end)
        break
    best = min(best, sm)
else:
    assert n == steps and end["stopped"] == "steps", (n, end)
# the suggestion: steepest descent of the smoothed loss over points 10 .. n-2, up to
# their least value (finite ones)
idx = [i for i in range(10, n - 1) if math.isfinite(pts[i]["smoothed"])]
if idx:
    low = min(idx, key=lambda i: (pts[i]["smoothed"], i))
    idx = [i for i in idx if i <= low]
want = None
if len(idx) >= 2:
    g = np.gradient(np.array([pts[i]["smoothed"] for i in idx]))
    want = pts[idx[int(np.argmin(g))]]["lr"]
assert end["suggested_lr"] == want, (end["suggested_lr"], want)
svg = xml.dom.minidom.parse(os.path.join(d, "lr_find.svg"))
line = svg.getElementsByTagName("polyline")[0].getAttribute("points").split()
assert len(line) == sum(math.isfinite(p["smoothed"]) for p in pts), len(line)
print(want, end["stopped"], n)
PY
}

# the default range on the MLP with AdamW: the loss blows up before 1, the suggestion
# lies between 1e-4 and 1e-1
"$d/t" --lr-find --out "$d/adamw" "${q[@]}" 2>"$d/adamw.log"
r=$(check "$d/adamw" 100 1e-08 1)
read -r lr stop n <<<"$r"
$PY -c "import sys; sys.exit(0 if 1e-4 < $lr < 0.1 else 1)"
[ "$stop" = loss_diverged ]
grep -q "suggested learning rate .*--set optimizer.lr=" "$d/adamw.log"
echo "ok   --lr-find (AdamW): $n steps, stopped at the blow-up, suggested lr $lr"

# its steps are training steps: the first two losses are those of a run at a constant
# lr of 1e-8 (the first rate; the second differs by 1.2x, which changes step 2's
# update, not its loss), bit for bit as printed
"$d/t" --out "$d/const" "${q[@]}" --set max_steps=2 --set log_every=1 --set optimizer.lr=1e-8 \
    --set schedule.type=constant --set schedule.warmup_steps=0 \
    --set data.val=null
$PY - "$d/const/metrics.jsonl" "$d/adamw/lr_find.jsonl" <<'PY'
import sys
num = lambda l: l.split('"loss":')[1].split(",")[0]
a = [num(l) for l in open(sys.argv[1]) if '"loss"' in l and '"event"' not in l]
b = [num(l) for l in open(sys.argv[2]) if '"loss"' in l][:2]
assert a == b, (a, b)
PY
echo "ok   --lr-find's first two losses are a constant-lr run's"

# a narrower range and fewer steps, SGD with momentum; the JIT gives the same curve
R=(--lr-find --lr-find-steps 30 --lr-find-range 1e-4,0.05 --set optimizer.type=sgd --set optimizer.momentum=0.9)
"$d/t" "${R[@]}" --out "$d/sgd" "${q[@]}" 2>/dev/null
r=$(check "$d/sgd" 30 0.0001 0.05)
"$TRAINC" run specs/mlp_fashion.json "${R[@]}" --out "$d/sgd_jit" "${q[@]}" 2>/dev/null
cmp "$d/sgd/lr_find.jsonl" "$d/sgd_jit/lr_find.jsonl"
echo "ok   --lr-find-steps 30 --lr-find-range 1e-4,0.05 (SGD): $r; trainc run: the same bytes"

# too few steps for a suggestion (10 are skipped at the start): null, and said so
"$d/t" --lr-find --lr-find-steps 8 --out "$d/few" "${q[@]}" 2>"$d/few.log"
r=$(check "$d/few" 8 1e-08 1)
[ "$r" = "None steps 8" ] && grep -q "no suggestion (8 steps): too few steps with a finite loss past the first 10" "$d/few.log"
echo "ok   --lr-find-steps 8: no suggestion (null), and the log says why"
# (a loss that only rises past the skipped steps, the other reason for none: the unit
# test tests/unit/test_lrfind.c, on made-up curves)

# bad options: exit 1, nothing written
bad() {   # bad MESSAGE OPTIONS...
    local msg=$1; shift
    set +e; "$d/t" --out "$d/bad" "${q[@]}" "$@" 2>"$d/bad.log"; local rc=$?; set -e
    if [ $rc -ne 1 ] || ! grep -qF -- "$msg" "$d/bad.log" || [ -e "$d/bad" ]; then
        echo "FAIL $*: exit $rc, $(cat "$d/bad.log")"; exit 1
    fi
}
bad "--lr-find-steps: expected an integer from 2 to 100000, got '1'" --lr-find --lr-find-steps 1
bad "--lr-find-range: expected LO,HI with 0 < LO < HI, got '1,0.1'" --lr-find --lr-find-range 1,0.1
bad "--lr-find-range: expected LO,HI" --lr-find --lr-find-range 0.1
bad "--lr-find-steps is an option of --lr-find; add --lr-find" --lr-find-steps 20
bad "--lr-find runs on its own: not with --resume" --lr-find --resume "$d/adamw"
bad "did you mean '--lr-find'?" --lr-finder
echo "ok   bad --lr-find options: exit 1, nothing written"
