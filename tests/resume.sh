#!/usr/bin/env bash
# Exact resume: a run stopped by SIGTERM at a random step and resumed with --resume
# gives the same train/validation records (losses, steps) and a bit-identical
# model.safetensors as the same run uninterrupted. threads=1; shuffle on; dropout;
# once with accumulate 2, once with parameters frozen (train.freeze), once trained by
# optimizer muon. Also: the
# interrupted run exits 130 with an end record "interrupted", model.safetensors is the
# final checkpoint's weights file (a hard link), and a resume with a changed optimizer
# is refused (exit 1). A bare --resume DIR
# keeps the run's --set options; where the spec was edited since, the spec wins.
# SIGKILL too (kill_case): the run and its first resume killed at random, checkpoints
# every 2 steps, then resumed to the end: the same records and weights.
set -eu
cd "$(dirname "$0")/.."
. tests/wait_for.sh
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=$(pwd)/build/tests/resume
rm -rf "$d"; mkdir -p "$d"
$PY - "$d" <<'PY'
import json, sys
d = sys.argv[1]
spec = json.load(open("specs/mlp_fashion.json"))
m = spec["model"]
m["name"] = "mlp_dropout"
m["layers"] = [{"op": "flatten"}, {"op": "linear", "out": 128}, {"op": "relu"}, {"op": "dropout", "p": 0.2},
               {"op": "linear", "out": 64}, {"op": "gelu"}, {"op": "dropout", "p": 0.1}, {"op": "linear", "out": 10}]
json.dump(spec, open(f"{d}/mlp_dropout.json", "w"), indent=1)
PY
# the spec's data paths are relative to its folder: point them at data/fashion
sed -i 's|\.\./data/fashion|../../../data/fashion|g' "$d/mlp_dropout.json"
"$TRAINC" build "$d/mlp_dropout.json" -o "$d/trainer"

compare() {  # compare RUN_A RUN_B
    $PY - "$1/metrics.jsonl" "$2/metrics.jsonl" <<'PY'
import json, sys
def recs(p):
    out = []
    for l in open(p):
        r = json.loads(l)
        if "event" in r: continue
        out.append({k: r[k] for k in ("step", "epoch", "loss", "lr", "grad_norm", "val_loss", "val_acc") if k in r})
    return out
a, b = recs(sys.argv[1]), recs(sys.argv[2])
assert a == b, next(((x, y) for x, y in zip(a, b) if x != y), (len(a), len(b)))
starts = [json.loads(l) for l in open(sys.argv[2]) if '"start"' in l]
assert len(starts) == 2 and "resumed_from" in starts[1], starts
print(f"identical: {len(a)} records; resumed from step {starts[1]['resumed_from']}")
PY
    cmp "$1/model.safetensors" "$2/model.safetensors"
    cmp "$1/best.safetensors" "$2/best.safetensors"
}

run_case() {  # run_case NAME SETS... (TRAINER: another trainer than $d/trainer)
    local name=$1 trainer=${TRAINER:-$d/trainer}; shift
    local sets=(--threads 1 --quiet --set max_steps=400 --set log_every=1 --set validate.every_steps=100
                --set validate.batches=20 --set checkpoint.every_steps=30 --set checkpoint.keep=2 "$@")
    "$trainer" --out "$d/$name.ref" "${sets[@]}"
    "$trainer" --out "$d/$name.cut" "${sets[@]}" &
    local pid=$! k=$((RANDOM % ${CUT_MAX:-100} + 10))
    local n=0
    while [ "$n" -lt $k ]; do
        sleep 0.005
        n=$(grep -c '"loss"' "$d/$name.cut/metrics.jsonl" 2>/dev/null) || true
        n=${n:-0}
        kill -0 $pid 2>/dev/null || break
    done
    kill -TERM $pid
    local rc=0; wait $pid || rc=$?
    [ $rc -eq 130 ] || { echo "FAIL $name: interrupted run exited $rc, expected 130"; exit 1; }
    tail -n 1 "$d/$name.cut/metrics.jsonl" | grep -q '"reason":"interrupted"' || { echo "FAIL $name: no interrupted end record"; exit 1; }
    if [ -n "${BARE:-}" ]; then   # the run's --set options come back from the checkpoint
        "$trainer" --resume "$d/$name.cut" --threads 1 --quiet
    else
        "$trainer" --resume "$d/$name.cut" "${sets[@]}"
    fi
    compare "$d/$name.ref" "$d/$name.cut"
    echo "ok   $name (SIGTERM after ~$k steps)"
}

CUT_MAX=350 run_case shuffle_dropout
# optimizer muon: its matrices' momentum in the checkpoint's state, the rest AdamW's
CUT_MAX=100 run_case muon --set max_steps=150 --set optimizer.type=muon --set optimizer.lr=0.02
# train.freeze: the first layer and a bias frozen (no state of theirs moves)
"$TRAINC" build "$d/mlp_dropout.json" --set 'freeze=1.*,4.bias' -o "$d/trainer_freeze"
TRAINER=$d/trainer_freeze CUT_MAX=200 run_case freeze
# the frozen tensors are laid out last, yet every initial value is the unfrozen model's
# (one step at learning rate 0 keeps them: each tensor of the two files equal)
for t in trainer trainer_freeze; do
    "$d/$t" --out "$d/init.$t" --quiet --threads 1 --set max_steps=1 --set optimizer.lr=0 --set data.val=null
done
$PY - "$d" <<'PY'
import sys
sys.path.insert(0, "tests")
import numpy as np, st_check
d = sys.argv[1]
a, b = (st_check.load(f"{d}/init.{t}/model.safetensors") for t in ("trainer", "trainer_freeze"))
assert list(a) != list(b) and sorted(a) == sorted(b), (list(a), list(b))
for n in a:
    assert np.array_equal(a[n], b[n]), n
print(f"ok   freeze: the same initial values as without it ({len(a)} tensors; file order {list(b)})")
PY
# a checkpoint of a frozen model written before its optimizer files left the frozen
# tensors out (2026-12-02: state.json without "optimizer_state") is refused, said
ck=$(ls -d "$d/freeze.cut/checkpoints"/step_* | tail -1)
cp -r "$d/freeze.cut" "$d/freeze.old"
$PY - "$d/freeze.old/checkpoints/$(basename "$ck")/state.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
del j["optimizer_state"], j["state_xxh64"]
json.dump(j, open(sys.argv[1], "w"), indent="\t")
PY
rc=0; "$d/trainer_freeze" --resume "$d/freeze.old" --quiet --threads 1 2>"$d/freeze.old.err" || rc=$?
[ $rc -eq 1 ] && grep -q "written by a trainc before 2026-12-02.*--init" "$d/freeze.old.err" ||
    { echo "FAIL an old frozen checkpoint: exit $rc"; cat "$d/freeze.old.err"; exit 1; }
echo "ok   a frozen model's checkpoint from before 2026-12-02 refused: $(head -c 120 "$d/freeze.old.err")..."
# batch 512: 117 batches an epoch, so the run crosses epochs (a new shuffle each,
# validation at each epoch's end) and the cut may land anywhere
# resumed with --resume DIR alone: max_steps, batch_size, accumulate, ... as the run had
BARE=1 run_case accumulate2_epochs --set accumulate=2 --set batch_size=512

# SIGKILL (no handler, no checkpoint of its own) at a random moment, checkpoints every
# 2 steps (keep 1: a kill often lands in a checkpoint's write or its pruning), and the
# resume itself killed once at random too: resumed again, the records and the weights
# are the uninterrupted run's, every line of metrics.jsonl whole JSON, nothing left in
# checkpoints/ but step_* folders. (A kill before the first checkpoint leaves nothing to
# resume: exit 1, said; the case starts over.)
kill_case() {  # kill_case NAME SETS...
    local name=$1; shift
    local sets=(--threads 1 --quiet --set max_steps=120 --set log_every=1 --set validate.every_steps=40
                --set validate.batches=5 --set checkpoint.every_steps=2 --set checkpoint.keep=1 "$@")
    [ -d "$d/$name.ref" ] || "$d/trainer" --out "$d/$name.ref" "${sets[@]}"
    rm -rf "$d/$name.cut"
    local first=1 rc=1 tries=0 k
    while [ $rc -ne 0 ] && [ $tries -lt 8 ]; do
        tries=$((tries + 1))
        if [ $first = 1 ]; then "$d/trainer" --out "$d/$name.cut" "${sets[@]}" & else
            "$d/trainer" --resume "$d/$name.cut" "${sets[@]}" 2>"$d/$name.err" & fi
        local pid=$!
        if [ $tries -le 2 ]; then   # the run, then its first resume: killed
            k=$((RANDOM % 100 + 3)); local n=0 w=0
            while [ "$n" -lt $k ] && [ $w -lt 3000 ] && kill -0 $pid 2>/dev/null; do
                sleep 0.002; w=$((w + 1))
                n=$(grep -c '"loss"' "$d/$name.cut/metrics.jsonl" 2>/dev/null) || true; n=${n:-0}
            done
            kill -KILL $pid 2>/dev/null
        fi
        rc=0; wait $pid || rc=$?
        if [ $first = 0 ] && [ $rc -eq 1 ] && grep -q "no complete checkpoint" "$d/$name.err"; then
            rm -rf "$d/$name.cut"; first=1; continue
        fi
        first=0
    done
    [ $rc -eq 0 ] || { echo "FAIL $name: the resumes did not finish (exit $rc)"; cat "$d/$name.err"; exit 1; }
    $PY - "$d/$name.ref/metrics.jsonl" "$d/$name.cut/metrics.jsonl" <<'PY'
import json, sys
def recs(p):
    rs = [json.loads(l) for l in open(p)]   # every line whole JSON
    return [{k: r[k] for k in ("step", "epoch", "loss", "lr", "grad_norm", "val_loss", "val_acc") if k in r}
            for r in rs if "event" not in r]
a, b = recs(sys.argv[1]), recs(sys.argv[2])
assert a == b, next(((x, y) for x, y in zip(a, b) if x != y), (len(a), len(b)))
PY
    cmp "$d/$name.ref/model.safetensors" "$d/$name.cut/model.safetensors"
    cmp "$d/$name.ref/best.safetensors" "$d/$name.cut/best.safetensors"
    [ -z "$(ls -A "$d/$name.cut/checkpoints" | grep -v '^step_')" ] ||
        { echo "FAIL $name: left in checkpoints/: $(ls -A "$d/$name.cut/checkpoints")"; exit 1; }
    echo "ok   $name (SIGKILL after ~$k steps, the resume killed too, $tries runs)"
}
for i in 1 2 3; do kill_case sigkill_dropout; done
kill_case sigkill_accumulate2 --set accumulate=2 --set batch_size=256

# a run that stopped at max_steps (with one more validation after its last checkpoint)
# and is resumed to go further reads as the longer run (a constant schedule: a cosine
# one's length is max_steps): the same records (not that
# validation's), the same best.safetensors
ext=(--threads 1 --quiet --set log_every=1 --set validate.every_steps=50 --set validate.batches=5
     --set checkpoint.every_steps=1000 --set schedule.type=constant)
"$d/trainer" --out "$d/ext.ref" "${ext[@]}" --set max_steps=150
"$d/trainer" --out "$d/ext.cut" "${ext[@]}" --set max_steps=70
grep -q '"step":70,"epoch":0,"val_loss"' "$d/ext.cut/metrics.jsonl" ||
    { echo "FAIL ext: no validation at the max_steps stop"; exit 1; }
"$d/trainer" --resume "$d/ext.cut" --quiet --threads 1 --set max_steps=150
compare "$d/ext.ref" "$d/ext.cut"
echo "ok   max_steps 70, then resumed to 150: the 150-step run's records and best weights"
# --resume A --out B: B reads as the one run (A's records up to the checkpoint, then
# the rest), best.safetensors too; A is left as it was
"$d/trainer" --out "$d/ext.a" "${ext[@]}" --set max_steps=70
before=$(md5sum < "$d/ext.a/metrics.jsonl")
"$d/trainer" --resume "$d/ext.a" --out "$d/ext.b" --quiet --threads 1 --set max_steps=150
compare "$d/ext.ref" "$d/ext.b"
[ "$(md5sum < "$d/ext.a/metrics.jsonl")" = "$before" ] || { echo "FAIL: --out B changed A's records"; exit 1; }
grep -q '<circle' "$d/ext.b/loss.svg" || { echo "FAIL: B's loss.svg without A's validations"; exit 1; }
echo "ok   --resume A --out B: B's records are the 150-step run's, A untouched"

# the training data changed since the checkpoint (fewer rows; the same rows, other
# contents): the resume would not continue that run; exit 1, --init named, nothing
# written. The same data in another file is the same data.
$PY - "$d" <<'PY'
import numpy as np, sys
d = sys.argv[1]
x, y = np.load("data/fashion/train_x.npy"), np.load("data/fashion/train_y.npy")
np.save(f"{d}/tx.npy", x); np.save(f"{d}/ty.npy", y)
np.save(f"{d}/tx_half.npy", x[:30000]); np.save(f"{d}/ty_half.npy", y[:30000])
x2 = x.copy(); x2[0] = 255 - x2[0]
np.save(f"{d}/tx_other.npy", x2)
PY
own=(--set data.train.x="$d/tx.npy" --set data.train.y="$d/ty.npy")
"$d/trainer" --out "$d/dchg" "${ext[@]}" "${own[@]}" --set max_steps=40 --set checkpoint.every_steps=20
before=$(cd "$d/dchg" && find . -type f | sort | xargs md5sum)
for v in half other; do
    cp "$d/tx_$v.npy" "$d/tx.npy"; [ $v = half ] && cp "$d/ty_half.npy" "$d/ty.npy"
    [ $v = other ] && $PY -c "import numpy as np; np.save('$d/ty.npy', np.load('data/fashion/train_y.npy'))"
    rc=0; "$d/trainer" --resume "$d/dchg" --quiet --threads 1 --set max_steps=80 2>"$d/dchg.$v.err" || rc=$?
    want="60000 training samples then, 30000 now"; [ $v = other ] && want="the same 60000 training samples, other contents"
    [ $rc -eq 1 ] && grep -q "the data (training or validation) is not the data of .*step_00000040 ($want)" "$d/dchg.$v.err" &&
        grep -q "hint: .* --init .*step_00000040/model.safetensors" "$d/dchg.$v.err" &&
        [ "$(cd "$d/dchg" && find . -type f | sort | xargs md5sum)" = "$before" ] ||
        { echo "FAIL: resumed over changed data ($v): exit $rc"; cat "$d/dchg.$v.err"; exit 1; }
done
# asked for (TRAINC_RESUME_OTHER_DATA=1): goes on over the other data, said
TRAINC_RESUME_OTHER_DATA=1 "$d/trainer" --resume "$d/dchg" --out "$d/dchg.other" --quiet --threads 1 \
    --set max_steps=50 2>"$d/dchg.other.err" && grep -q "warning: the data (training or validation) is not the data" \
    "$d/dchg.other.err" && tail -n 1 "$d/dchg.other/metrics.jsonl" | grep -q '"step":50' ||
    { echo "FAIL: TRAINC_RESUME_OTHER_DATA=1"; cat "$d/dchg.other.err"; exit 1; }
cp data/fashion/train_x.npy "$d/tx.npy"; cp data/fashion/train_y.npy "$d/ty.npy"
"$d/trainer" --resume "$d/dchg" --quiet --threads 1 --set max_steps=60 2>/dev/null
# the same data moved to other files (the paths differ): resumed, bit for bit
"$d/trainer" --out "$d/dmov" "${ext[@]}" "${own[@]}" --set max_steps=60 --set checkpoint.every_steps=20
"$d/trainer" --out "$d/dmov.ref" "${ext[@]}" "${own[@]}" --set max_steps=80 --set checkpoint.every_steps=20 2>/dev/null
mkdir -p "$d/moved"; mv "$d/tx.npy" "$d/ty.npy" "$d/moved/"
"$d/trainer" --resume "$d/dmov" --quiet --threads 1 --set max_steps=80 \
    --set data.train.x="$d/moved/tx.npy" --set data.train.y="$d/moved/ty.npy" 2>"$d/dmov.err" ||
    { echo "FAIL: the same data in other files: not resumed"; cat "$d/dmov.err"; exit 1; }
mv "$d/moved/tx.npy" "$d/moved/ty.npy" "$d/"
cmp "$d/dmov.ref/model.safetensors" "$d/dmov/model.safetensors" || { echo "FAIL: moved data: other weights"; exit 1; }
echo "ok   resumed over changed data (fewer rows; other contents): exit 1, --init named, nothing written (TRAINC_RESUME_OTHER_DATA=1: on, said); the same data resumes, from other paths too"

# resumed again at the same max_steps: nothing to train, and the note says which limit
# and what takes the run further
"$d/trainer" --resume "$d/ext.cut" --quiet --threads 1 2>"$d/ext.again.err"
grep -q "note: this run is at max_steps 150: nothing to train. To go further: --set max_steps=N" \
    "$d/ext.again.err" || { echo "FAIL: a resume at its max_steps said:"; cat "$d/ext.again.err"; exit 1; }
echo "ok   resumed at its max_steps: nothing trained, the limit and --set max_steps=N named"

# a damaged checkpoint (a byte changed on the disk after it was written) is found by the
# sizes and XXH64 hashes its state.json records (`xxhsum -H1` prints the same), and
# --resume goes on from the newest intact one, bit for bit; the damaged one is set
# aside as damaged_step_N. With no intact checkpoint left: exit 1, nothing written.
"$d/trainer" --out "$d/dmg.ref" "${ext[@]}" --set max_steps=90 --set checkpoint.every_steps=30
"$d/trainer" --out "$d/dmg.cut" "${ext[@]}" --set max_steps=60 --set checkpoint.every_steps=30
ck=$d/dmg.ref/checkpoints/step_00000090
for f in model.safetensors exp_avg.safetensors exp_avg_sq.safetensors; do
    want=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['files'][sys.argv[2]]['xxh64'])" "$ck/state.json" $f)
    [ "$(xxhsum -H1 "$ck/$f" 2>/dev/null | cut -d' ' -f1)" = "$want" ] ||
        { echo "FAIL $f: state.json's xxh64 $want is not xxhsum's"; xxhsum -H1 "$ck/$f"; exit 1; }
done
$PY - "$d/dmg.cut/checkpoints/step_00000060/exp_avg.safetensors" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:      # one bit of the last float, in place
    f.seek(-1, 2); b = f.read(1); f.seek(-1, 2); f.write(bytes([b[0] ^ 0x10]))
PY
"$d/trainer" --resume "$d/dmg.cut" --out "$d/dmg.cut/" --quiet --threads 1 --set max_steps=90 2>"$d/dmg.err"
grep -q "step_00000060 is damaged: exp_avg.safetensors: its bytes changed after the checkpoint was written" "$d/dmg.err" &&
    grep -q "taking step_00000030 instead" "$d/dmg.err" && [ -d "$d/dmg.cut/checkpoints/damaged_step_00000060" ] ||
    { echo "FAIL damaged checkpoint: no warning, or not set aside"; cat "$d/dmg.err"; ls "$d/dmg.cut/checkpoints"; exit 1; }
compare "$d/dmg.ref" "$d/dmg.cut"
[ "$(ls "$d/dmg.cut/checkpoints" | tr '\n' ' ')" = "damaged_step_00000060 step_00000060 step_00000090 " ] ||
    { echo "FAIL damaged checkpoint: checkpoints/ holds"; ls "$d/dmg.cut/checkpoints"; exit 1; }
echo "ok   a damaged newest checkpoint: resumed from the one before it, bit for bit; set aside"
"$d/trainer" --out "$d/dmg1" "${ext[@]}" --set max_steps=30 --set checkpoint.every_steps=30
truncate -s -4 "$d/dmg1/checkpoints/step_00000030/model.safetensors"
before=$(cd "$d/dmg1" && find . -type f | sort | xargs md5sum)
rc=0; "$d/trainer" --resume "$d/dmg1" --quiet --threads 1 --set max_steps=60 2>"$d/dmg1.err" || rc=$?
[ $rc -eq 1 ] && grep -q "no intact checkpoint to resume from (step_00000030: model.safetensors: [0-9]* bytes, but [0-9]* when the checkpoint was written (cut short)" "$d/dmg1.err" &&
    [ "$(cd "$d/dmg1" && find . -type f | sort | xargs md5sum)" = "$before" ] ||
    { echo "FAIL no intact checkpoint: exit $rc"; cat "$d/dmg1.err"; exit 1; }
echo "ok   no intact checkpoint: exit 1 naming the file, nothing written"
# a damaged best.safetensors (one file with OUT's and the checkpoints' since the best
# step) costs the best weights only: the resume takes the newest checkpoint all the same
"$d/trainer" --out "$d/dmgb" "${ext[@]}" --set max_steps=60 --set checkpoint.every_steps=30
$PY - "$d/dmgb/checkpoints/step_00000060/best.safetensors" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(-1, 2); b = f.read(1); f.seek(-1, 2); f.write(bytes([b[0] ^ 0x10]))
PY
"$d/trainer" --resume "$d/dmgb" --quiet --threads 1 --set max_steps=90 2>"$d/dmgb.err"
grep -q "step_00000060/best.safetensors is damaged: the best weights are not restored" "$d/dmgb.err" &&
    grep -q "from step 60" "$d/dmgb.err" && ! grep -q "taking step" "$d/dmgb.err" ||
    { echo "FAIL damaged best.safetensors:"; cat "$d/dmgb.err"; exit 1; }
echo "ok   a damaged best.safetensors: the newest checkpoint taken all the same, the loss said"

# checkpoints sort by step as numbers: past 10^8 steps the names are wider than 8 digits,
# and step_100000000 is newer than step_99999999 (empty folders here: damaged, set
# aside newest first, and the resume goes on from the real one)
mkdir "$d/dmgb/checkpoints/step_99999999" "$d/dmgb/checkpoints/step_100000000"
"$d/trainer" --resume "$d/dmgb" --quiet --threads 1 --set max_steps=95 2>"$d/wide.err"
[ "$(grep -o "step_[0-9]* is damaged" "$d/wide.err" | tr '\n' ' ')" = \
  "step_100000000 is damaged step_99999999 is damaged " ] && grep -q "taking step_00000090 instead" "$d/wide.err" ||
    { echo "FAIL: checkpoints past 10^8 steps out of order:"; cat "$d/wide.err"; exit 1; }
echo "ok   step_100000000 is newer than step_99999999 (by number, not by text)"

# checkpoints turned off in a resumed run: the checkpoint a signal writes removes none of
# the run's earlier ones (they were kept by the run's own keep)
"$d/trainer" --out "$d/cknull" "${ext[@]}" --set max_steps=40 --set checkpoint.every_steps=10 --set checkpoint.keep=3
"$d/trainer" --resume "$d/cknull" --quiet --threads 1 --set checkpoint=null --set max_steps=1000000 2>/dev/null &
pid=$!
sleep 1; kill -TERM $pid
rc=0; wait $pid || rc=$?
[ $rc -eq 130 ] && [ "$(ls "$d/cknull/checkpoints" | head -3 | tr '\n' ' ')" = "step_00000020 step_00000030 step_00000040 " ] &&
    [ "$(ls "$d/cknull/checkpoints" | wc -l)" -eq 4 ] ||
    { echo "FAIL: checkpoint=null, then a signal: exit $rc, left"; ls "$d/cknull/checkpoints"; exit 1; }
echo "ok   checkpoint=null on resume: the signal's checkpoint removes none of the earlier ones"

# the final weights and the final checkpoint's are one file (a hard link), in a resumed
# run too: model.safetensors was bit-identical to the uninterrupted run's above
for r in shuffle_dropout.ref shuffle_dropout.cut; do
    w=$d/$r/model.safetensors c=$d/$r/checkpoints/step_00000400/model.safetensors
    [ "$(stat -c %i "$w")" = "$(stat -c %i "$c")" ] && [ "$(stat -c %h "$w")" = 2 ] ||
        { echo "FAIL $r: model.safetensors is not the final checkpoint's weights file"; ls -li "$w" "$c"; exit 1; }
done
echo "ok   model.safetensors and the final checkpoint's weights: one file on disk"

# a changed optimizer is refused, with the field named, and nothing is written
set +e
"$d/trainer" --resume "$d/shuffle_dropout.cut" --quiet --set optimizer.lr=0.1 2>"$d/refuse.err"
rc=$?
set -e
[ $rc -eq 1 ] && grep -q "optimizer.lr" "$d/refuse.err" || { echo "FAIL refuse: rc=$rc"; cat "$d/refuse.err"; exit 1; }
echo "ok   refuse a different training spec"

# a field the checkpoint lacks (one written before the field was recorded, its seal
# removed as a hand edit would) is a difference too, named as absent there
rm -rf "$d/absent"; cp -r "$d/shuffle_dropout.cut" "$d/absent"
python3 - "$d/absent/checkpoints/step_00000400/state.json" <<'EOF_PY'
import json, sys
j = json.load(open(sys.argv[1]))
j['train'] = [l for l in j['train'] if not l.startswith('optimizer.eps=')]
del j['state_xxh64']
json.dump(j, open(sys.argv[1], 'w'), indent=1)
EOF_PY
set +e
"$d/trainer" --resume "$d/absent" --quiet 2>"$d/absent.err"
rc=$?
set -e
[ $rc -eq 1 ] && grep -q "optimizer.eps: checkpoint (absent), now 1e-08" "$d/absent.err" ||
    { echo "FAIL refuse absent: rc=$rc"; cat "$d/absent.err"; exit 1; }
echo "ok   refuse a checkpoint without a field the training spec has"

# --resume DIR alone under an edited spec (trainc run): the run's --set options hold
# (optimizer.lr, max_steps), the spec's edit (log_every 50 -> 5) takes effect
cp "$d/mlp_dropout.json" "$d/edit.json"
"$TRAINC" run "$d/edit.json" --out "$d/edit" --threads 1 --quiet --set optimizer.lr=5e-4 \
    --set max_steps=40 --set checkpoint.every_steps=20 --set schedule.type=constant \
    --set schedule.warmup_steps=0 --set data.val=null 2>/dev/null
rm -rf "$d/edit/checkpoints/step_00000040"
sed -i 's/"log_every": 50/"log_every": 5/' "$d/edit.json"
"$TRAINC" run "$d/edit.json" --resume "$d/edit" --threads 1 --quiet 2>/dev/null
$PY - "$d/edit/metrics.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
after = [r["step"] for r in recs if "loss" in r and "event" not in r and r["step"] > 20]
assert after == [25, 30, 35, 40], after
assert all(r["lr"] == 5e-4 for r in recs if "lr" in r), [r["lr"] for r in recs if "lr" in r]
assert recs[-1]["reason"] == "max_steps" and recs[-1]["step"] == 40, recs[-1]
PY
echo "ok   a bare --resume keeps the run's --set options, an edited spec wins"

# a run killed outright before its first checkpoint cannot be resumed: exit 1, saying
# no checkpoint was written and giving the command that starts it over into the same
# folder; that command moves the killed run's records aside and runs
"$d/trainer" --out "$d/nockpt" --threads 1 --quiet --set max_steps=1000000 --set log_every=1 \
    --set data.val=null --set checkpoint.every_steps=1000000 &
pid=$!
wait_for $pid "nockpt's second step" grep -qs '"step":2,' "$d/nockpt/metrics.jsonl"
kill -KILL $pid; wait $pid || true
set +e
"$d/trainer" --resume "$d/nockpt" --threads 1 --quiet 2>"$d/nockpt.err"
rc=$?
set -e
again="$d/trainer --out $d/nockpt starts the run over"
[ $rc -eq 1 ] && grep -q "no complete checkpoint was written" "$d/nockpt.err" && grep -qF "$again" "$d/nockpt.err" &&
    [ ! -e "$d/nockpt.1" ] || { echo "FAIL nockpt: rc=$rc"; cat "$d/nockpt.err"; exit 1; }
"$d/trainer" --out "$d/nockpt" --threads 1 --quiet --set max_steps=3 --set data.val=null 2>/dev/null
grep -q '"step":2,' "$d/nockpt.1/metrics.jsonl" && grep -q '"reason":"max_steps","step":3' "$d/nockpt/metrics.jsonl" ||
    { echo "FAIL nockpt: the run started over did not move the records aside"; exit 1; }
echo "ok   --resume before the first checkpoint: exit 1, no checkpoint, the command to start over"
