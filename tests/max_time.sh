#!/usr/bin/env bash
# max_time stops a run on the clock, early: a run of 2000 epochs (20000 steps, about
# 20 s here) with max_time 0.5 s (the seconds form) ends with reason max_time after
# at least 0.5 s of training and long before its epochs, with the checkpoint at that
# step; with "00:00:00:01" (Lightning's DD:HH:MM:SS) after at least 1 s. A resume
# counts the time already spent: --resume with max_time 1.5 trains on to at least
# 1.5 s in all (its end record's time_s) and more steps; a resume whose time is spent
# trains not one step more. Each run must end within 20 s of wall clock.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=$(pwd)/build/tests/max_time
rm -rf "$d"; mkdir -p "$d"
$PY - "$d" <<'PY'
import json, sys
import numpy as np
d = sys.argv[1]
r = np.random.default_rng(0)
np.save(d + "/x.npy", r.standard_normal((640, 256)).astype(np.float32))
np.save(d + "/y.npy", r.integers(0, 10, 640).astype(np.int32))
spec = {"trainc": 1, "model": {"name": "max_time", "inputs": {"x": {"shape": [256], "dtype": "f32"},
        "y": {"shape": [], "dtype": "i32", "classes": 10}},
        "layers": [{"op": "linear", "out": 256}, {"op": "relu"}, {"op": "linear", "out": 10}],
        "loss": {"op": "cross_entropy", "target": "y"}},
        "train": {"data": {"train": {"x": "x.npy", "y": "y.npy"}}, "batch_size": 64, "epochs": 2000,
                  "optimizer": {"type": "sgd", "lr": 0.01}, "log_every": 1000000,
                  "loader": {"shuffle": False, "workers": 0}, "checkpoint": {"every_steps": 1000000}}}
json.dump(spec, open(d + "/spec.json", "w"))
PY
"$TRAINC" build "$d/spec.json" -o "$d/t" 2>/dev/null

# run OUT MAX_TIME [OPTIONS...]: trains, and fails if the wall clock passes 20 s
run() {
    local out=$1 mt=$2; shift 2
    local t0=$SECONDS
    timeout 60 "$d/t" --out "$out" --quiet --threads 1 --set max_time="$mt" "$@" >/dev/null 2>>"$d/stderr"
    [ $((SECONDS - t0)) -le 20 ] || { echo "FAIL max_time $mt: the run took $((SECONDS - t0)) s"; exit 1; }
}
# check OUT MAX_TIME [MIN_STEP]: the end's reason, time and step, and the checkpoint
# there; prints the end step
check() {
    $PY - "$@" <<'PY'
import json, os, sys
out, mt = sys.argv[1], float(sys.argv[2])
least = int(sys.argv[3]) if len(sys.argv) > 3 else 1
recs = [json.loads(l) for l in open(out + "/metrics.jsonl")]
end = recs[-1]
assert end.get("event") == "end" and end["reason"] == "max_time", end
assert end["time_s"] >= mt, f"stopped after {end['time_s']} s, before max_time {mt}"
assert least <= end["step"] < 20000, f"ended at step {end['step']} (the epochs end at 20000)"
assert os.path.isdir(f"{out}/checkpoints/step_{end['step']:08d}"), os.listdir(out + "/checkpoints")
print(end["step"])
PY
}
run "$d/half" 0.5
s1=$(check "$d/half" 0.5)
run "$d/dhms" 00:00:00:01
check "$d/dhms" 1 >/dev/null
echo "ok   max_time 0.5 and 00:00:00:01: stopped on the clock at step $s1 of 20000, a checkpoint there"
cp -r "$d/half" "$d/half2"
run "$d/half" 1.5 --resume "$d/half"
s2=$(check "$d/half" 1.5 $((s1 + 1)))
echo "ok   --resume with max_time 1.5: on from step $s1 to $s2, 1.5 s in all"
run "$d/half2" 0.5 --resume "$d/half2"
grep -q "this run has spent its max_time" "$d/stderr" &&
    [ "$(check "$d/half2" 0.5)" = "$s1" ] || { echo "FAIL a resume whose max_time is spent trained on"; exit 1; }
echo "ok   --resume with its max_time spent: not one step more"
