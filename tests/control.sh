#!/usr/bin/env bash
# Training control end to end: the stop reasons (epochs, max_steps, max_time,
# early_stopping, diverged), exit codes, checkpoint rotation, a second signal, a train
# record's loss over its batches (log_every with steps of different batch counts), the
# end record's loss of the steps after the last record.
set -eu
cd "$(dirname "$0")/.."
. tests/wait_for.sh
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=$(pwd)/build/tests/control
rm -rf "$d"; mkdir -p "$d"
"$TRAINC" build specs/mlp_fashion.json -o "$d/t"
q=(--quiet --threads 1)
reason() { $PY -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])][-1]; assert r['event']=='end', r; print(r['reason'], r['step'])" "$1/metrics.jsonl"; }

# max_steps and checkpoint.keep
"$d/t" --out "$d/steps" "${q[@]}" --set max_steps=50 --set checkpoint.every_steps=10 --set checkpoint.keep=3
[ "$(reason "$d/steps")" = "max_steps 50" ]
[ "$(ls "$d/steps/checkpoints" | tr '\n' ' ')" = "step_00000030 step_00000040 step_00000050 " ]
# checkpoint.every_epochs (Lightning's every_n_epochs): after epochs 2 and 4 of 4 limited to
# 7 steps, beside every_steps' 20 (and the end's)
"$d/t" --out "$d/ep" "${q[@]}" --set epochs=4 --set limit_train_batches=7 \
    --set checkpoint.every_epochs=2 --set checkpoint.every_steps=20 --set checkpoint.keep=10
[ "$(ls "$d/ep/checkpoints" | tr '\n' ' ')" = "step_00000014 step_00000020 step_00000028 " ]
echo "ok   checkpoint.every_epochs 2: checkpoints at steps 14 (epoch 2's end), 20 (every_steps) and 28 (epoch 4's and the run's end)"
echo "ok   max_steps, checkpoint.keep"
# epochs before max_steps: the end says so, and how to train to max_steps (the 10000
# test rows in batches of 512: an epoch is 19 steps)
"$d/t" --out "$d/ep" --quiet --threads 1 --set data.val=null --set max_steps=40 --set epochs=1 --set batch_size=512 \
    --set data.train.x="$(pwd)/data/fashion/test_x.npy" --set data.train.y="$(pwd)/data/fashion/test_y.npy" 2>"$d/ep.err"
grep -q "note: epochs 1 came before max_steps: --set epochs=null trains to max_steps" "$d/ep.err" ||
    { echo "FAIL: no note that epochs came before max_steps"; cat "$d/ep.err"; exit 1; }
echo "ok   epochs before max_steps: said, with --set epochs=null"

# max_time
"$d/t" --out "$d/time" "${q[@]}" --set max_time=00:00:00:01 --set epochs=100 --set data.val=null
[ "$(reason "$d/time" | cut -d' ' -f1)" = "max_time" ]
# loss.svg without validation data: the training loss's line
grep -q '<polyline [^>]*points="[0-9]' "$d/time/loss.svg" || { echo "FAIL: no training loss in loss.svg"; exit 1; }
echo "ok   max_time, loss.svg without validation"

# early stopping: the step where it stops follows Lightning's rule applied to the
# recorded validation values
"$d/t" --out "$d/es" "${q[@]}" --set epochs=50 --set validate.every_steps=20 --set validate.batches=5 \
    --set early_stopping.patience=2 --set early_stopping.min_delta=0.02
$PY - "$d/es/metrics.jsonl" <<'PY'
import json, sys, math
import numpy as np   # Lightning's comparisons are on float32 tensors
recs = [json.loads(l) for l in open(sys.argv[1])]
end = recs[-1]
assert end["reason"] == "early_stopping", end
best, wait, stop = np.float32(math.inf), 0, None
for r in recs:
    if "val_loss" not in r: continue
    v = np.float32(r["val_loss"])
    if v + np.float32(0.02) < best: best, wait = v, 0
    else:
        wait += 1
        if wait >= 2: stop = r["step"]; break
assert stop == end["step"], (stop, end)
print("early stop at step", stop)
PY
# loss.svg with validation: the training line and a marker a validation
nv=$(grep -c '"val_loss"' "$d/es/metrics.jsonl")
[ "$(grep -o '<circle cx="[0-9.]*" cy="[0-9.]*" r="3"/>' "$d/es/loss.svg" | wc -l)" -eq "$nv" ] ||
    { echo "FAIL: loss.svg does not mark the $nv validations"; exit 1; }
echo "ok   early_stopping, loss.svg with its validations"

# divergence_threshold crossed by a finite value: Lightning's stop, not a divergence
# (SPEC.md's exit 3 is for non-finite values): reason early_stopping, exit 0, the final
# weights written
set +e
"$d/t" --out "$d/dthr" "${q[@]}" --set max_steps=60 --set validate.every_steps=20 --set validate.batches=2 \
    --set early_stopping.divergence_threshold=0.01 2>"$d/dthr.err"
rc=$?
set -e
[ $rc -eq 0 ] || { echo "FAIL divergence_threshold: exit $rc"; cat "$d/dthr.err"; exit 1; }
[ "$(reason "$d/dthr")" = "early_stopping 20" ] || { echo "FAIL divergence_threshold: $(reason "$d/dthr")"; exit 1; }
grep -q "divergence_threshold 0.01" "$d/dthr.err" || { echo "FAIL divergence_threshold: no reason given"; cat "$d/dthr.err"; exit 1; }
[ -s "$d/dthr/model.safetensors" ]
echo "ok   divergence_threshold: early_stopping, exit 0"

# a run early stopping ended, resumed: nothing trained (a stop by patience and one by a
# threshold alike), its final weights kept, the note said
for run in es dthr; do
    cp "$d/$run/model.safetensors" "$d/$run.final"
    "$d/t" --resume "$d/$run" --quiet 2>"$d/$run.again"
    grep -q "note: early stopping ended this run at step" "$d/$run.again" &&
        [ "$(tail -n 1 "$d/$run/metrics.jsonl" | grep -o '"reason":"[a-z_]*"')" = '"reason":"early_stopping"' ] &&
        cmp -s "$d/$run.final" "$d/$run/model.safetensors" ||
        { echo "FAIL: $run resumed after early stopping:"; cat "$d/$run.again"; tail -n 3 "$d/$run/metrics.jsonl"; exit 1; }
done
echo "ok   resumed after early stopping (patience, a threshold): nothing trained, the weights kept"

# divergence: exit 3, reason diverged, the message says where and what to try, the last
# good checkpoint stays
set +e
"$d/t" --out "$d/div" "${q[@]}" --set optimizer.type=sgd --set optimizer.lr=1e6 --set grad_clip=null \
    --set schedule.type=constant --set checkpoint.every_steps=1 --set data.val=null 2>"$d/div.err"
rc=$?
set -e
[ $rc -eq 3 ] || { echo "FAIL diverged: exit $rc"; cat "$d/div.err"; exit 1; }
grep -q "lower optimizer.lr" "$d/div.err"
[ "$(reason "$d/div" | cut -d' ' -f1)" = "diverged" ]
# the message counts steps as the end record does (the step whose loss is not finite is
# not counted), and a NaN is "nan", not "-nan"
n=$(reason "$d/div" | cut -d' ' -f2)
grep -Eq "diverged: the training loss is (nan|inf|-inf) after step $n \(" "$d/div.err" ||
    { echo "FAIL diverged: the message does not name step $n (the end record's):"; cat "$d/div.err"; exit 1; }
ls "$d/div/checkpoints/" | grep -q step_
[ ! -e "$d/div/model.safetensors" ]
echo "ok   diverged: exit 3, message, last good checkpoint kept"

# a finite loss whose gradients are not (one sample 3e22 times the others: the MSE,
# summed in double, is 6e39; its gradient overflows float): diverged at that step,
# before its update, so the last checkpoint (one a step) keeps finite weights
"$TRAINC" build bench/wide_mlp.json -o "$d/wide" 2>/dev/null
$PY - "$d" <<'PY'
import numpy as np, sys
r = np.random.default_rng(0)
x = r.random((256, 32), dtype=np.float32); x[140] = 3e22   # in the third batch of 64
np.save(sys.argv[1] + "/wide_x.npy", x); np.save(sys.argv[1] + "/wide_y.npy", r.random((256, 16), dtype=np.float32))
PY
W=(--set "data.train.x=$d/wide_x.npy" --set "data.train.y=$d/wide_y.npy" --set batch_size=64 --set loader.shuffle=false
   --set max_steps=4 --set log_every=1 --set grad_clip=null --set checkpoint.every_steps=1 "${q[@]}")
set +e
"$d/wide" --out "$d/gnorm" "${W[@]}" 2>"$d/gnorm.err"
rc=$?
set -e
[ $rc -eq 3 ] && [ "$(reason "$d/gnorm")" = "diverged 2" ] && grep -q "the gradient norm is inf after step 2 (" "$d/gnorm.err" &&
    [ "$(ls "$d/gnorm/checkpoints" | tr '\n' ' ')" = "step_00000001 step_00000002 " ] ||
    { echo "FAIL gradient norm: exit $rc"; cat "$d/gnorm.err"; ls "$d/gnorm/checkpoints"; exit 1; }
$PY - "$d/gnorm/checkpoints/step_00000002/model.safetensors" <<'PY'
import json, struct, sys, numpy as np
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]
w = np.frombuffer(b[8 + n:], dtype=np.float32)
assert np.isfinite(w).all(), "the last checkpoint holds %d weights that are not finite" % (~np.isfinite(w)).sum()
PY
echo "ok   a finite loss with gradients that are not: diverged at that step, the last checkpoint's weights finite"

# a train record's loss is the mean over the batches since the previous record (SPEC.md
# section 4), not the mean of its steps' means: with accumulate 3 and 8 batches an epoch
# the steps take 3, 3, 2 batches, so a record over a 2-batch and a 3-batch step weighs
# them 2:3. The per-step losses of the same run with log_every 1 give the reference.
$PY - "$d" <<'PY'
import numpy as np, sys, json
d = sys.argv[1]
rng = np.random.default_rng(5)
np.save(f"{d}/lx.npy", rng.standard_normal((40, 6)).astype(np.float32))
np.save(f"{d}/ly.npy", rng.integers(0, 3, 40).astype(np.int32))
json.dump({"trainc": 1, "model": {"name": "lg", "inputs": {"x": {"shape": [6], "dtype": "f32"},
           "y": {"shape": [], "dtype": "i32", "classes": 3}},
           "layers": [{"op": "linear", "out": 8}, {"op": "tanh"}, {"op": "linear", "out": 3}],
           "loss": {"op": "cross_entropy", "target": "y"}},
           "train": {"data": {"train": {"x": "lx.npy", "y": "ly.npy"}}, "batch_size": 5, "accumulate": 3,
                     "epochs": 3, "optimizer": {"type": "adamw", "lr": 0.05}, "loader": {"shuffle": False}}},
          open(f"{d}/lg.json", "w"))
PY
"$TRAINC" run "$d/lg.json" --out "$d/lg1" "${q[@]}" --set log_every=1 2>/dev/null
"$TRAINC" run "$d/lg.json" --out "$d/lg2" "${q[@]}" --set log_every=2 2>/dev/null
$PY - "$d/lg1/metrics.jsonl" "$d/lg2/metrics.jsonl" <<'PY'
import json, sys
one, two = ([json.loads(l) for l in open(f) if '"loss"' in l and '"event"' not in l] for f in sys.argv[1:])
k = {r["step"]: [3, 3, 2][(r["step"] - 1) % 3] for r in one}   # batches of each step
assert len(one) == 9 and [r["step"] for r in two] == [2, 4, 6, 8], (len(one), two)
for r in two:
    s = [r["step"] - 1, r["step"]]
    loss = {q["step"]: q["loss"] for q in one}
    want = sum(k[i] * loss[i] for i in s) / sum(k[i] for i in s)
    steps_mean = sum(loss[i] for i in s) / 2
    assert abs(r["loss"] - want) <= 1e-7 * want, (r, want)
    if k[s[0]] != k[s[1]]:   # the mean of the steps' means would be another number
        assert abs(steps_mean - want) > 1e-5 * want, (steps_mean, want)
print("records", [(r["step"], r["loss"]) for r in two])
# step 9 comes after the last multiple of log_every 2: the end record carries its loss
# (its own 2 batches' mean); a run ending on a record's step has no loss in its end
end1, end2 = (json.loads(open(f).readlines()[-1]) for f in sys.argv[1:])
assert end2["event"] == "end" and end2["step"] == 9 and end2["steps_since_record"] == 1, end2
assert abs(end2["loss"] - loss[9]) <= 1e-7 * loss[9], (end2, loss[9])
assert "loss" not in end1 and "steps_since_record" not in end1, end1
PY
echo "ok   log_every: a record's loss is the mean over its batches (steps of 3 and 2 batches)"
echo "ok   the end record: the loss of the steps after the last record"

# accumulate with a short last batch (drop_last false): the update is that of one batch
# of the step's samples (SPEC.md section 3), each micro-batch's mean loss weighed by its
# rows. 1000 rows in batches of 64 with accumulate 4 make steps of 256, 256, 256 and
# 64+64+64+40 = 232 samples: the same steps as batch_size 256 with accumulate 1 (same
# shuffle), so the weights agree to rounding (weighing the 40 rows as a full 64 would
# move them by far more).
$PY - "$d" <<'PY'
import numpy as np, sys, json
d = sys.argv[1]
rng = np.random.default_rng(9)
np.save(f"{d}/ax.npy", rng.standard_normal((1000, 6)).astype(np.float32))
np.save(f"{d}/ay.npy", rng.integers(0, 3, 1000).astype(np.int32))
json.dump({"trainc": 1, "model": {"name": "acc", "inputs": {"x": {"shape": [6], "dtype": "f32"},
           "y": {"shape": [], "dtype": "i32", "classes": 3}},
           "layers": [{"op": "linear", "out": 8}, {"op": "tanh"}, {"op": "linear", "out": 3}],
           "loss": {"op": "cross_entropy", "target": "y"}},
           "train": {"data": {"train": {"x": "ax.npy", "y": "ay.npy"}}, "batch_size": 64, "accumulate": 4,
                     "epochs": 3, "grad_clip": None, "schedule": {"type": "constant"},
                     "optimizer": {"type": "sgd", "lr": 0.5},
                     "loader": {"drop_last": False}}},
          open(f"{d}/acc.json", "w"))
PY
"$TRAINC" run "$d/acc.json" --out "$d/acc4" "${q[@]}" 2>/dev/null
"$TRAINC" run "$d/acc.json" --out "$d/acc1" "${q[@]}" --set batch_size=256 --set accumulate=1 2>/dev/null
$PY - "$d/acc4" "$d/acc1" <<'PY'
import sys
sys.path.insert(0, "tests")
import numpy as np, st_check
a, b = (st_check.load(f"{o}/model.safetensors") for o in sys.argv[1:])
worst = max(float(np.max(np.abs(a[k] - b[k])) / np.max(np.abs(b[k]))) for k in b)
assert worst < 1e-5, f"accumulate 4 x 64 and one batch of 256 differ by {worst:.3g} (relative)"
print(f"largest difference {worst:.2g} of the largest weight")
PY
echo "ok   accumulate with a short last batch: the same update as one batch of the step's samples"

# a second signal exits at once, leaving the last complete checkpoint intact (awaited as
# any checkpoint: at 5 ms a step the one of step 5 is gone, kept checkpoints rotating,
# before a poll on a busy machine sees it)
"$d/t" --out "$d/sig2" "${q[@]}" --set epochs=50 --set checkpoint.every_steps=5 --set data.val=null &
pid=$!
wait_for $pid "sig2's first checkpoint" sh -c "ls '$d/sig2/checkpoints' 2>/dev/null | grep -q '^step_'"
kill -TERM $pid; kill -TERM $pid
rc=0; wait $pid || rc=$?
[ $rc -eq 130 ] || { echo "FAIL second signal: exit $rc"; exit 1; }
last=$(ls "$d/sig2/checkpoints" | grep '^step_' | tail -1)
$PY tests/st_check.py "$d/sig2/checkpoints/$last/model.safetensors" >/dev/null
echo "ok   second signal: exit 130, $last intact"

# a second signal before any checkpoint was complete says the run cannot be resumed
# (SIGINT and SIGTERM pending together while it is stopped: handled back to back)
"$d/t" --out "$d/sig3" "${q[@]}" --set epochs=50 --set checkpoint.every_steps=1000000 --set data.val=null 2>"$d/sig3.err" &
pid=$!
wait_for $pid "sig3's first step" logged "$d/sig3/metrics.jsonl" 1
kill -STOP $pid; kill -INT $pid; kill -TERM $pid; kill -CONT $pid
rc=0; wait $pid || rc=$?
[ $rc -eq 130 ] && grep -q "no checkpoint was complete yet: this run cannot be resumed" "$d/sig3.err" ||
    { echo "FAIL second signal before a checkpoint: exit $rc"; cat "$d/sig3.err"; exit 1; }
echo "ok   second signal before any checkpoint: exit 130, says it cannot be resumed"

# --eval: no training; the weights validated once, one JSON line on stdout, nothing
# written. From model.safetensors (--init) and from a checkpoint (--resume), it prints
# the run's own last validation numbers bit for bit; without data.val it is refused.
"$d/t" --out "$d/ev" "${q[@]}" --set max_steps=30 --set checkpoint.every_steps=30
before=$(cd "$d/ev" && find . -type f | sort | xargs md5sum)
"$d/t" "${q[@]}" --init "$d/ev/model.safetensors" --eval --out "$d/ev_none" >"$d/ev.init" 2>"$d/ev.err"
"$d/t" "${q[@]}" --resume "$d/ev" --eval >"$d/ev.resume" 2>>"$d/ev.err"
# (the training data need not be there: a checkpoint's weights, evaluated elsewhere)
"$d/t" "${q[@]}" --resume "$d/ev" --eval --set data.train.x="$d/absent_x.npy" \
    --set data.train.y="$d/absent_y.npy" >"$d/ev.notrain" 2>>"$d/ev.err"
[ ! -e "$d/ev_none" ] && [ "$(cd "$d/ev" && find . -type f | sort | xargs md5sum)" = "$before" ] ||
    { echo "FAIL --eval wrote files"; exit 1; }
$PY - "$d/ev/metrics.jsonl" "$d/ev.init" "$d/ev.resume" "$d/ev.notrain" <<'PY'
import json, sys
val = [json.loads(l) for l in open(sys.argv[1]) if '"val_loss"' in l][-1]
for f in sys.argv[2:]:
    lines = open(f).read().splitlines()
    assert len(lines) == 1, lines
    e = json.loads(lines[0])
    assert e["event"] == "eval" and e["val_loss"] == val["val_loss"] and e["val_acc"] == val["val_acc"], (e, val)
    assert e["terms"] == 10000, e
PY
rc=0; "$d/t" "${q[@]}" --eval --set data.val=null >/dev/null 2>"$d/ev.err2" || rc=$?
[ $rc -eq 1 ] && grep -q "eval needs validation data" "$d/ev.err2" || { echo "FAIL --eval without data.val: exit $rc"; exit 1; }
echo "ok   --eval: the run's last validation numbers from --init and --resume (its training data there or not), nothing written; no data.val: exit 1"

# Defaults that follow other fields (Lightning's), on a tiny model: epochs left out
# ends no run that max_steps or max_time ends (1 where neither is set);
# validate.every_epochs left out is off once validate.every_steps is set; a run that
# ends between validations ends with one, its record in the last step's epoch.
$PY - "$d" <<'PY'
import json, os, sys
import numpy as np
d = sys.argv[1] + "/tiny"; os.makedirs(d, exist_ok=True)
r = np.random.default_rng(0)
np.save(d + "/x.npy", r.standard_normal((40, 4)).astype(np.float32))
np.save(d + "/y.npy", r.integers(0, 3, 40).astype(np.int32))
np.save(d + "/vx.npy", r.standard_normal((12, 4)).astype(np.float32))
np.save(d + "/vy.npy", r.integers(0, 3, 12).astype(np.int32))
spec = {"trainc": 1, "model": {"name": "tiny", "inputs": {"x": {"shape": [4], "dtype": "f32"},
        "y": {"shape": [], "dtype": "i32", "classes": 3}}, "layers": [{"op": "linear", "out": 3}],
        "loss": {"op": "cross_entropy", "target": "y"}},
        "train": {"data": {"train": {"x": "x.npy", "y": "y.npy"}, "val": {"x": "vx.npy", "y": "vy.npy"}},
                  "batch_size": 4, "optimizer": {"type": "sgd", "lr": 0.1},
                  "loader": {"shuffle": False, "workers": 0}, "log_every": 1}}
json.dump(spec, open(d + "/t.json", "w"))
PY
tiny() { local out=$1; shift; rm -rf "$d/tiny/$out"; "$TRAINC" run "$d/tiny/t.json" --out "$d/tiny/$out" "${q[@]}" "$@"; }
vals() { $PY -c "import json,sys; print(' '.join('%d/%d' % (r['step'], r['epoch']) for r in map(json.loads, open(sys.argv[1])) if 'val_loss' in r))" "$1/metrics.jsonl"; }
tiny e1 2>/dev/null                                  # 10 steps an epoch
[ "$(reason "$d/tiny/e1")" = "epochs 10" ] || { echo "FAIL epochs left out, no other limit: $(reason "$d/tiny/e1")"; exit 1; }
tiny e2 --set max_steps=25 2>/dev/null
[ "$(reason "$d/tiny/e2")" = "max_steps 25" ] && [ "$(vals "$d/tiny/e2")" = "10/0 20/1 25/2" ] ||
    { echo "FAIL epochs left out with max_steps: $(reason "$d/tiny/e2"), validations $(vals "$d/tiny/e2")"; exit 1; }
tiny e3 --set max_time=00:00:00:01 --set data.val=null 2>/dev/null
[ "$(reason "$d/tiny/e3" | cut -d' ' -f1)" = "max_time" ] || { echo "FAIL epochs left out with max_time: $(reason "$d/tiny/e3")"; exit 1; }
tiny e4 --set max_steps=25 --set epochs=1 2>"$d/tiny/e4.err"
[ "$(reason "$d/tiny/e4")" = "epochs 10" ] && grep -q "note: epochs 1 came before max_steps" "$d/tiny/e4.err" ||
    { echo "FAIL epochs given with max_steps"; exit 1; }
echo "ok   epochs left out: 1 alone, no limit with max_steps or max_time (Lightning's)"
tiny v1 --set epochs=2 --set validate.every_steps=3 2>/dev/null
[ "$(vals "$d/tiny/v1")" = "3/0 6/0 9/0 12/1 15/1 18/1 20/1" ] || { echo "FAIL every_steps alone: $(vals "$d/tiny/v1")"; exit 1; }
tiny v2 --set epochs=2 --set validate.every_steps=3 --set validate.every_epochs=1 2>/dev/null
[ "$(vals "$d/tiny/v2")" = "3/0 6/0 9/0 10/0 12/1 15/1 18/1 20/1" ] || { echo "FAIL every_steps and every_epochs: $(vals "$d/tiny/v2")"; exit 1; }
tiny v3 --set max_steps=10 --set validate.every_epochs=2 2>/dev/null
[ "$(vals "$d/tiny/v3")" = "10/0" ] || { echo "FAIL closing validation's epoch: $(vals "$d/tiny/v3")"; exit 1; }
tiny v4 --set epochs=3 --set validate.every_epochs=2 2>/dev/null
[ "$(vals "$d/tiny/v4")" = "20/1 30/2" ] || { echo "FAIL closing validation after epochs: $(vals "$d/tiny/v4")"; exit 1; }
echo "ok   validate.every_epochs left out: off with every_steps; a closing validation, in its step's epoch"
# early stopping on the training loss with validation data but no validation
# scheduled: checked at each epoch's end, as without validation data
tiny l1 --set epochs=30 --set early_stopping.monitor=loss --set early_stopping.stopping_threshold=1.2 \
    --set validate.every_epochs=null 2>/dev/null
[ "$(reason "$d/tiny/l1")" = "early_stopping 20" ] || { echo "FAIL monitor loss, validation off: $(reason "$d/tiny/l1")"; exit 1; }
echo "ok   early stopping on loss with validation data and no validation: at epochs' ends"
# a non-finite monitored value at the closing validation is a divergence (exit 3)
$PY -c "
import numpy as np, sys
v = np.load(sys.argv[1] + '/vx.npy'); v[3, 1] = np.inf; np.save(sys.argv[1] + '/vxn.npy', v)" "$d/tiny"
rc=0; tiny n1 --set max_steps=5 --set early_stopping.patience=2 --set data.val.x="$d/tiny/vxn.npy" 2>"$d/tiny/n1.err" || rc=$?
[ $rc -eq 3 ] && [ "$(reason "$d/tiny/n1")" = "diverged 5" ] && grep -q "monitored value is nan, not finite" "$d/tiny/n1.err" ||
    { echo "FAIL non-finite closing validation: exit $rc, $(reason "$d/tiny/n1")"; cat "$d/tiny/n1.err"; exit 1; }
echo "ok   a non-finite value at the closing validation: diverged, exit 3, 'nan'"
# early stopping's settings on resume: patience raised goes on from the counts kept,
# early_stopping=null goes on to the limits, the monitor may not change
es=(--set validate.every_steps=2 --set early_stopping.patience=3 --set early_stopping.min_delta=0.01
    --set optimizer.lr=0.3 --set max_steps=60)
tiny r1 "${es[@]}" 2>/dev/null
first=$(reason "$d/tiny/r1")
[ "${first%% *}" = early_stopping ] || { echo "FAIL resume setup: $first"; exit 1; }
cp -r "$d/tiny/r1" "$d/tiny/r2"
"$TRAINC" run "$d/tiny/t.json" --resume "$d/tiny/r1" "${q[@]}" --set early_stopping.patience=6 2>"$d/tiny/r1.err"
"$TRAINC" run "$d/tiny/t.json" --resume "$d/tiny/r2" "${q[@]}" --set early_stopping=null 2>/dev/null
tiny u1 "${es[@]}" --set early_stopping.patience=6 2>/dev/null
$PY - "$d/tiny/r1/metrics.jsonl" "$d/tiny/u1/metrics.jsonl" <<'PY'
import json, sys
def recs(f):   # the resumed run reads as the uninterrupted one with patience 6 (but times)
    return [{k: v for k, v in json.loads(l).items() if k not in ("time_s", "samples_per_s")}
            for l in open(f) if '"event"' not in l]
a, b = recs(sys.argv[1]), recs(sys.argv[2])
assert a == b, [(x, y) for x, y in zip(a, b) if x != y][:2]
PY
grep -q "its settings differ now, so training goes on" "$d/tiny/r1.err" &&
    [ "$(reason "$d/tiny/r2")" = "max_steps 60" ] || { echo "FAIL resume with early stopping changed"; exit 1; }
rc=0; "$TRAINC" run "$d/tiny/t.json" --resume "$d/tiny/r2" "${q[@]}" --set max_steps=70 \
    --set early_stopping.monitor=val_acc --set early_stopping.mode=max 2>"$d/tiny/r3.err" || rc=$?
[ $rc -eq 1 ] && grep -q "best.safetensors by val_loss, min; this resume would by val_acc, max" "$d/tiny/r3.err" ||
    { echo "FAIL resume with another monitor: exit $rc"; cat "$d/tiny/r3.err"; exit 1; }
echo "ok   resume: early stopping's patience raised (the uninterrupted run's records), turned off, monitor kept"
