#!/usr/bin/env bash
# DDP over MPI on the CPU: 2 ranks with batch B each match 1 rank with batch 2B step by
# step (shuffle off: DistributedSampler's rank r takes samples r, r+2, ..., so the two
# ranks' batches together are the one rank's batch), for the MLP and gpt_char (also
# with parameters frozen, under DDP, ZeRO-1 and ZeRO-2;
# with attention's Llama-family options, under DDP, ZeRO-1 and ZeRO-2; the MLP trained
# by optimizer muon; a chunked
# untied language-model head under the three; the loss's ignore_index; and an MLP with
# dropout, shuffled: each rank draws the one rank's masks of its rows), with one
# gradient bucket and with many (overlapped with backward); only rank 0 writes.
# Validation on 3 ranks sees each row once (the 1-rank numbers); ranks that do not
# agree (bad input on one, another --set) exit 1 before anything is written.
set -eu
cd "$(dirname "$0")/.."
. tests/wait_for.sh
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
MPIRUN=(mpirun --oversubscribe --allow-run-as-root -np 2)
# containers often forbid the cross-process reads Open MPI's shared memory uses
export OMPI_MCA_btl_vader_single_copy_mechanism=none
d=$(pwd)/build/tests/ddp
rm -rf "$d"; mkdir -p "$d"
compare() {   # compare ONE TWO: per-step losses within 1e-5 relative
    $PY - "$1/metrics.jsonl" "$2/metrics.jsonl" <<'PY'
import json, sys
def losses(p): return [json.loads(l)["loss"] for l in open(p) if '"loss"' in l and '"event"' not in l]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
start = [json.loads(l) for l in open(sys.argv[2]) if '"start"' in l][0]
assert start["ranks"] == 2, start
assert len(a) == len(b) > 0, (len(a), len(b))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"{len(a)} steps, worst relative difference {worst:.1e}")
assert worst <= 1e-5, worst
PY
}
for spec in mlp_fashion gpt_char; do
    "$TRAINC" build specs/$spec.json -o "$d/$spec" 2>/dev/null
    B=16; [ $spec = gpt_char ] && B=4
    S=(--set loader.shuffle=false --set max_steps=12 --set log_every=1 --set data.val=null --threads 1 --quiet)
    "$d/$spec" --out "$d/$spec.1" "${S[@]}" --set batch_size=$((2 * B))
    "${MPIRUN[@]}" "$d/$spec" --out "$d/$spec.2" "${S[@]}" --set batch_size=$B
    "${MPIRUN[@]}" "$d/$spec" --out "$d/$spec.2b" "${S[@]}" --set batch_size=$B --set distributed.bucket_mb=0.05
    compare "$d/$spec.1" "$d/$spec.2"
    cmp "$d/$spec.2/model.safetensors" "$d/$spec.2b/model.safetensors"
    echo "ok   $spec: 2 ranks x $B = 1 rank x $((2 * B)); 1 bucket = many buckets"
done

# optimizer.type muon: each rank orthogonalizes the summed gradient's matrices, whole
M=("${S[@]}" --set optimizer.type=muon --set optimizer.lr=0.02)
"$d/mlp_fashion" --out "$d/muon.1" "${M[@]}" --set batch_size=32
"${MPIRUN[@]}" "$d/mlp_fashion" --out "$d/muon.2" "${M[@]}" --set batch_size=16
compare "$d/muon.1" "$d/muon.2"
echo "ok   mlp_fashion, optimizer muon: 2 ranks x 16 = 1 rank x 32"

# train.freeze: gpt_char's embeddings, first block and a layernorm weight frozen (laid out
# after the trained parameters: no gradient, no optimizer state, not summed; the
# layernorm's dgamma, written beside its dx, goes to a sink nothing reads)
"$TRAINC" build specs/gpt_char.json --set 'freeze=wte.weight,wpe.weight,h.0.*,h.1.ln_2.weight' \
    -o "$d/gpt_freeze" 2>/dev/null
S=(--set loader.shuffle=false --set max_steps=12 --set log_every=1 --set data.val=null --threads 1 --quiet)
"$d/gpt_freeze" --out "$d/gpt_freeze.1" "${S[@]}" --set batch_size=8
"${MPIRUN[@]}" "$d/gpt_freeze" --out "$d/gpt_freeze.2" "${S[@]}" --set batch_size=4
"${MPIRUN[@]}" "$d/gpt_freeze" --out "$d/gpt_freeze.2b" "${S[@]}" --set batch_size=4 --set distributed.bucket_mb=0.05
for z in 1 2; do
    "${MPIRUN[@]}" "$d/gpt_freeze" --out "$d/gpt_freeze.z$z" "${S[@]}" --set batch_size=4 --set distributed.strategy=zero$z
    "${MPIRUN[@]}" "$d/gpt_freeze" --out "$d/gpt_freeze.z${z}b" "${S[@]}" --set batch_size=4 \
        --set distributed.strategy=zero$z --set distributed.bucket_mb=0.05
done
compare "$d/gpt_freeze.1" "$d/gpt_freeze.2"
for run in 2b z1 z1b z2 z2b; do
    cmp "$d/gpt_freeze.2/model.safetensors" "$d/gpt_freeze.$run/model.safetensors"
done
echo "ok   gpt_char with train.freeze: 2 ranks x 4 = 1 rank x 8; 1 bucket = many buckets; zero1 and zero2 = ddp bit for bit"
# the frozen 247552 floats (wte, wpe, h.0: 247424; h.1.ln_2.weight: 128) have no gradient
# and no optimizer state, and are summed by no strategy; `trainc plan --ranks 2` says the
# same bytes and what each rank sends (ZeRO gathers the trained parameters alone)
F=(--set 'freeze=wte.weight,wpe.weight,h.0.*,h.1.ln_2.weight')
"$TRAINC" plan specs/gpt_char.json --ranks 2 --json "${F[@]}" > "$d/gpt_freeze.plan.json"
"$PY" - "$d" <<'PY'
import json, sys
d = sys.argv[1]
def start(run):
    return next(json.loads(l) for l in open(f"{d}/gpt_freeze.{run}/metrics.jsonl") if '"start"' in l)
plan = json.load(open(f"{d}/gpt_freeze.plan.json"))["ranks"]
P = start("2")["param_bytes"]
T = P - 4 * 247552
for run in ("2", "2b", "z1", "z1b", "z2", "z2b"):
    s = start(run)
    assert s["reduced_bytes"] == T, s
    assert s["optimizer_bytes"] == (2 * T if run[0] == "2" else T), s   # AdamW; a shard of 2
    assert s["grad_bytes"] == (T / 2 if run.startswith("z2") else T), s
# N = 2: ddp's ring all-reduce sends 2 (N - 1) / N of the bytes summed; ZeRO's
# reduce-scatter (N - 1) / N of them and its all-gather (N - 1) / N of the trained
# parameters
assert plan["ddp"]["sent_bytes_per_step"] == T, plan["ddp"]
for z in ("zero1", "zero2"):
    assert plan[z]["sent_bytes_per_step"] == T, plan[z]
    assert plan[z]["optimizer_bytes"] == T and plan[z]["param_bytes"] == P, plan[z]
assert plan["ddp"]["grad_bytes"] == T and plan["ddp"]["optimizer_bytes"] == 2 * T, plan["ddp"]
print(f"ok   the frozen parameters: no gradient, optimizer state or sums ({T} bytes summed a step "
      f"of {P}, AdamW's state {2 * T}) under ddp, zero1 and zero2, as trainc plan --ranks 2 says")
PY

# train.lora (freeze's layout: the adapters alone trained): 2 ranks x 4 = 1 rank x 8, zero1
# and zero2 = ddp bit for bit (dropout masks on each rank's rows), the adapters' gradients
# alone summed
"$TRAINC" build specs/gpt_char.json --set lora.rank=4 --set lora.dropout=0.1 -o "$d/gpt_lora" 2>/dev/null
"$d/gpt_lora" --out "$d/gpt_lora.1" "${S[@]}" --set batch_size=8
for z in "" 1 2; do
    "${MPIRUN[@]}" "$d/gpt_lora" --out "$d/gpt_lora.2$z" "${S[@]}" --set batch_size=4 \
        ${z:+--set distributed.strategy=zero$z}
done
compare "$d/gpt_lora.1" "$d/gpt_lora.2"
cmp "$d/gpt_lora.2/model.safetensors" "$d/gpt_lora.21/model.safetensors"
cmp "$d/gpt_lora.2/model.safetensors" "$d/gpt_lora.22/model.safetensors"
"$PY" - "$d" <<'PY'
import json, sys
sys.path.insert(0, "tests")
import st_check
d = sys.argv[1]
w = st_check.load(f"{d}/gpt_lora.2/model.safetensors")
T = 4 * sum((a.size + 15) // 16 * 16 for n, a in w.items() if ".lora_" in n)
for run in ("2", "21", "22"):
    s = next(json.loads(l) for l in open(f"{d}/gpt_lora.{run}/metrics.jsonl") if '"start"' in l)
    assert s["reduced_bytes"] == T, (run, s, T)
print(f"ok   gpt_char with lora: 2 ranks x 4 = 1 rank x 8, zero1 and zero2 = ddp bit for bit; "
      f"{T} bytes summed a step (the adapters') of {s['param_bytes']}")
PY

# the loss's ignore_index (masked prompts): each rank's mean is over its own targets, and
# the ranks' means are averaged, as PyTorch's DDP does; with as many targets counted in
# every training sample 2 ranks x 4 = 1 rank x 8, and --eval's validation (its terms
# summed over the ranks) gives the 1-rank numbers with prompts of any length
$PY - "$d/sft" <<'PY'
import json, os, sys
import numpy as np
sys.path.insert(0, "tests")
import ignore_parity as ip, llama_torch as lt
d = sys.argv[1]
x, y = lt.token_windows(ip.T, 112)
y[:96, :10] = ip.IGNORE      # training: 10 of each window's 32 targets masked
tr = dict(lt.train_spec(12, 4), validate={"every_steps": 12})
tr["data"] = {"train": ip.npy_data(d, x[:96], y[:96]),
              "val": ip.npy_data(d, x[96:], ip.mask_prompts(y[96:], np.random.default_rng(1)), "val")}
json.dump({"trainc": 1, "model": ip.model_for(256), "train": tr}, open(d + "/spec.json", "w"))
PY
"$TRAINC" build "$d/sft/spec.json" -o "$d/sft_t" 2>/dev/null
S=(--set log_every=1 --threads 1 --quiet)
"$d/sft_t" --out "$d/sft.1" "${S[@]}" --set batch_size=8
"${MPIRUN[@]}" "$d/sft_t" --out "$d/sft.2" "${S[@]}" --set batch_size=4
compare "$d/sft.1" "$d/sft.2"
"$d/sft_t" --eval --init "$d/sft.1/model.safetensors" --quiet > "$d/sft.eval1"
"${MPIRUN[@]}" "$d/sft_t" --eval --init "$d/sft.1/model.safetensors" --quiet > "$d/sft.eval2"
$PY - "$d/sft.eval1" "$d/sft.eval2" <<'PY'
import json, sys
a, b = (json.loads(open(f).read().splitlines()[0]) for f in sys.argv[1:3])
assert a["terms"] == b["terms"] and abs(a["val_loss"] - b["val_loss"]) <= 1e-6 * a["val_loss"], (a, b)
print(f"ok   ignore_index: 2 ranks x 4 = 1 rank x 8 (as many targets a sample); --eval on 2 ranks: "
      f"{b['val_loss']:.7f} over {b['terms']} targets, 1 rank's")
PY

# attention's Llama-family options (qk_norm's weights: gradients from the attention's
# own backward call): DDP, ZeRO-1 and ZeRO-2 on 2 ranks x 4 = 1 rank x 8
$PY - "$d/gpt_opts.json" "$PWD/data/text" <<'PY'
import json, sys
spec = json.load(open("specs/gpt_char.json"))
spec["model"]["name"] = "gpt_opts"
spec["model"]["layers"][2]["count"] = 2
spec["model"]["layers"][2]["body"][0]["body"][1].update({"kv_heads": 2, "bias": False, "qk_norm": True, "window": 40,
    "rope": {"theta": 10000, "scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4,
                                         "original_max_position_embeddings": 64}}})
spec["train"]["data"] = {"train": {"tokens": sys.argv[2] + "/train_*.bin"}}
json.dump(spec, open(sys.argv[1], "w"))
PY
"$TRAINC" build "$d/gpt_opts.json" -o "$d/gpt_opts" 2>/dev/null
S=(--set loader.shuffle=false --set max_steps=8 --set log_every=1 --set data.val=null --threads 1 --quiet)
"$d/gpt_opts" --out "$d/opts.1" "${S[@]}" --set batch_size=8
for st in ddp zero1 zero2; do
    "${MPIRUN[@]}" "$d/gpt_opts" --out "$d/opts.$st" "${S[@]}" --set batch_size=4 --set distributed.strategy=$st
    echo "ok   gpt_char with attention's options, $st: 2 ranks x 4 = 1 rank x 8: $(compare "$d/opts.1" "$d/opts.$st")"
done

# a chunked language-model head (ops/loss.c: its weight's gradient written by the loss
# call in the forward pass, declared ready there), untied, over 1030 classes: DDP,
# ZeRO-1 and ZeRO-2 with small buckets and accumulate 2, 2 ranks x 4 = 1 rank x 8
$PY - "$d/untied.json" "$PWD/data/text" <<'PY'
import json, sys
spec = json.load(open("tests/vocab/tiny_vocab.json"))
spec["model"]["name"] = "tiny_untied"
spec["model"]["layers"][-1] = {"op": "linear", "name": "lm_head", "out": 1030, "bias": False}
spec["train"]["data"] = {"train": {"tokens": sys.argv[2] + "/train_*.bin"}}
json.dump(spec, open(sys.argv[1], "w"))
PY
"$TRAINC" build "$d/untied.json" -o "$d/untied" 2>/dev/null
S=(--set loader.shuffle=false --set max_steps=8 --set log_every=1 --set data.val=null --set accumulate=2
   --threads 1 --quiet)
"$d/untied" --out "$d/untied.1" "${S[@]}" --set batch_size=8
for st in ddp zero1 zero2; do
    "${MPIRUN[@]}" "$d/untied" --out "$d/untied.$st" "${S[@]}" --set batch_size=4 --set distributed.strategy=$st \
        --set distributed.bucket_mb=0.01
    echo "ok   a chunked untied head, $st, accumulate 2: 2 ranks x 4 = 1 rank x 8: $(compare "$d/untied.1" "$d/untied.$st")"
done

# dropout: rank r draws the masks of rows r, r + 2, ... of the one rank's batch of 2B
# (shuffled, accumulate 2), so 2 x B = 1 x 2B holds with dropout too (every rank drew
# the same masks for its own rows: 2e-3 apart from the first step)
$PY - "$d/mlp_dropout.json" "$PWD/data/fashion" <<'PY'
import json, sys
spec = json.load(open("specs/mlp_fashion.json"))
spec["model"]["name"] = "mlp_dropout"
spec["model"]["layers"].insert(3, {"op": "dropout", "p": 0.3})
spec["train"]["data"] = {"train": {"x": sys.argv[2] + "/train_x.npy", "y": sys.argv[2] + "/train_y.npy"}}
json.dump(spec, open(sys.argv[1], "w"))
PY
"$TRAINC" build "$d/mlp_dropout.json" -o "$d/mlp_dropout" 2>/dev/null
S=(--set max_steps=10 --set log_every=1 --set accumulate=2 --threads 1 --quiet)
"$d/mlp_dropout" --out "$d/drop.1" "${S[@]}" --set batch_size=32 2>/dev/null
"${MPIRUN[@]}" "$d/mlp_dropout" --out "$d/drop.2" "${S[@]}" --set batch_size=16 2>/dev/null
echo "ok   MLP with dropout: 2 ranks x 16 = 1 rank x 32: $(compare "$d/drop.1" "$d/drop.2")"

# signals: SIGTERM to mpirun reaches every rank; they stop at the same step, rank 0
# writes the checkpoint, and a 2-rank --resume is bit-identical to the run left alone
t="$d/mlp_fashion"
S=(--set max_steps=2500 --set log_every=1 --set validate.every_steps=100 --set validate.batches=5
   --set checkpoint.every_steps=50 --set batch_size=32 --threads 1 --quiet)
"${MPIRUN[@]}" "$t" --out "$d/sig.ref" "${S[@]}" 2>/dev/null
"${MPIRUN[@]}" "$t" --out "$d/sig.cut" "${S[@]}" 2>/dev/null &
pid=$!
wait_for $pid "300 steps of sig.cut" logged "$d/sig.cut/metrics.jsonl" 300
kill -TERM $pid
wait $pid || true
tail -n 1 "$d/sig.cut/metrics.jsonl" | grep -q '"reason":"interrupted"' || { echo "FAIL: no interrupted record"; exit 1; }
"${MPIRUN[@]}" "$t" --resume "$d/sig.cut" "${S[@]}" 2>"$d/sig.resume.log"
cmp "$d/sig.ref/model.safetensors" "$d/sig.cut/model.safetensors"
# every rank reads the checkpoint; one says so (each rank printed the line)
[ "$(grep -c "^trainc: resuming" "$d/sig.resume.log")" -eq 1 ] ||
    { echo "FAIL: the resume's message, not once:"; cat "$d/sig.resume.log"; exit 1; }
echo "ok   2 ranks: SIGTERM at step $(grep -o '"resumed_from":[0-9]*' "$d/sig.cut/metrics.jsonl"), resumed bit-identical, said once"

# early stopping decided on agreed validation numbers: both ranks stop together
"${MPIRUN[@]}" "$t" --out "$d/es" --set epochs=20 --set validate.every_steps=20 --set validate.batches=4 \
    --set early_stopping.patience=1 --set early_stopping.min_delta=0.05 --set batch_size=32 --threads 1 --quiet 2>/dev/null
tail -n 1 "$d/es/metrics.jsonl" | grep -q '"reason":"early_stopping"'
echo "ok   2 ranks: early stopping agreed ($(tail -n 1 "$d/es/metrics.jsonl" | grep -o '"step":[0-9]*'))"

# validation sees each row once whatever the rank count: 3 ranks on the 10,000 test rows
# (one more on rank 0) give the 1-rank numbers over the same 10,000 terms (DistributedSampler's
# padding counted a row twice)
"$t" --out "$d/ev.w" --set max_steps=5 --set data.val=null --threads 1 --quiet 2>/dev/null
"$t" --init "$d/ev.w/model.safetensors" --eval --set batch_size=48 --threads 1 >"$d/ev1.json" 2>/dev/null
mpirun --oversubscribe --allow-run-as-root -np 3 "$t" --init "$d/ev.w/model.safetensors" --eval \
    --set batch_size=16 --threads 1 >"$d/ev3.json" 2>/dev/null
$PY - "$d/ev1.json" "$d/ev3.json" <<'PY'
import json, sys
a, b = (json.loads(open(p).read().splitlines()[0]) for p in sys.argv[1:])
assert a["terms"] == b["terms"] == 10000, (a, b)
assert abs(a["val_loss"] - b["val_loss"]) <= 1e-6 * a["val_loss"] and a["val_acc"] == b["val_acc"], (a, b)
PY
echo "ok   3 ranks' validation = 1 rank's: 10000 terms each"

# before rank 0 writes anything the ranks agree: one rank with a bad --init (it exits 1)
# or another --set leaves no output folder, and the job exits 1
one=(mpirun --oversubscribe --allow-run-as-root -np 1)
# (--lr-find, --eval and a training set of another size too: each such rank would wait
# in collectives the others never make)
small="--set data.train.x=$PWD/data/fashion/test_x.npy --set data.train.y=$PWD/data/fashion/test_y.npy"
for case in "--init /nonexistent.safetensors|nonexistent" "--set optimizer.lr=0.1|run another training config than rank 0" \
            "--lr-find|run in another mode" "--eval|run in another mode" \
            "$small|run on training data of another size" \
            "--set data.val=null|run with other validation data"; do
    opts=${case%%|*}; msg=${case#*|}
    rc=0
    "${one[@]}" "$t" --out "$d/agree" --set max_steps=5 --threads 1 --quiet : -np 1 "$t" --out "$d/agree" \
        --set max_steps=5 --threads 1 --quiet $opts >"$d/agree.log" 2>&1 || rc=$?
    [ $rc -eq 1 ] && [ ! -e "$d/agree" ] && grep -q -- "$msg" "$d/agree.log" ||
        { echo "FAIL: one rank with $opts: rc=$rc"; cat "$d/agree.log"; exit 1; }
    # the rank that differs names the key, both values (it named none)
    [ "$opts" != "--set optimizer.lr=0.1" ] ||
        grep -q "rank 1 of 2: another training config than rank 0's: optimizer.lr: 0.1 here, 0.002 on rank 0$" \
            "$d/agree.log" || { echo "FAIL: the differing key not named"; cat "$d/agree.log"; exit 1; }
done
# one rank resumed, the other started from the same weights (--init; the same config
# otherwise): they would train from other steps, schedules and data positions
rc=0
"${one[@]}" "$t" --out "$d/agree" "${S[@]}" --init "$d/sig.cut/model.safetensors" : -np 1 "$t" --out "$d/agree" --resume "$d/sig.cut" "${S[@]}" \
    >"$d/agree.log" 2>&1 || rc=$?
[ $rc -eq 1 ] && [ ! -e "$d/agree" ] && grep -q -- "run from another starting point" "$d/agree.log" ||
    { echo "FAIL: one rank with --resume: rc=$rc"; cat "$d/agree.log"; exit 1; }
# rank 1 alone resumes, a checkpoint of another rank count (a refusal rank 0 says for all
# that resume): before, rank 1 exited 1 without a word; now the ranks say it first
rc=0
S2=(--set max_steps=2500 --set data.val=null --threads 1 --quiet)
"${one[@]}" "$t" --out "$d/agree" "${S2[@]}" : -np 1 "$t" --out "$d/agree" --resume "$d/ev.w" "${S2[@]}" \
    >"$d/agree.log" 2>&1 || rc=$?
[ $rc -eq 1 ] && [ ! -e "$d/agree" ] && grep -q -- "run from another starting point" "$d/agree.log" &&
    grep -q -- "rank 1 of 2: --resume $d/ev.w here, none on rank 0" "$d/agree.log" ||
    { echo "FAIL: rank 1 alone with --resume: rc=$rc"; cat "$d/agree.log"; exit 1; }
# the same --resume, its newest checkpoint damaged on rank 1's disk only (a copy here):
# rank 1 takes an older one, and says where each starts (rank 0 warns of its own only)
cp -r "$d/sig.cut" "$d/sig.dmg"
newest=$(ls -d "$d/sig.dmg/checkpoints/step_"* | tail -n 1)
printf X | dd of="$newest/model.safetensors" bs=1 seek=1000 conv=notrunc 2>/dev/null
rc=0
"${one[@]}" "$t" --out "$d/agree" --resume "$d/sig.cut" "${S[@]}" : -np 1 "$t" --out "$d/agree" \
    --resume "$d/sig.dmg" "${S[@]}" >"$d/agree.log" 2>&1 || rc=$?
[ $rc -eq 1 ] && [ ! -e "$d/agree" ] && grep -q -- "run from another starting point" "$d/agree.log" &&
    grep -q -- "rank 1 of 2: starts from its checkpoint $d/sig.dmg/checkpoints/step_" "$d/agree.log" ||
    { echo "FAIL: a damaged checkpoint on rank 1 only: rc=$rc"; cat "$d/agree.log"; exit 1; }
echo "ok   2 ranks: one with a bad --init, another --set, --lr-find, --eval, data size, --resume (alone, or its newest checkpoint damaged there) or no validation: exit 1, each named, nothing written"

# rank 0's work alone (here --sample after training, as its checkpoints and best
# weights) is not a collective the others' watchdog times: a sample longer than
# TRAINC_DIST_TIMEOUT ends the job normally, the whole sample printed
rc=0
TRAINC_DIST_TIMEOUT=1 "${MPIRUN[@]}" -x TRAINC_DIST_TIMEOUT "$d/gpt_char" --out "$d/solo" --set max_steps=2 \
    --set batch_size=2 --set data.val=null --set checkpoint.every_steps=1 --threads 1 --quiet --sample 800 \
    >"$d/solo.txt" 2>"$d/solo.log" || rc=$?
[ $rc -eq 0 ] && [ "$(head -c 800 "$d/solo.txt" | wc -c)" -eq 800 ] ||
    { echo "FAIL: 2 ranks, rank 0 sampling past TRAINC_DIST_TIMEOUT: rc=$rc"; tail -5 "$d/solo.log"; exit 1; }
# without checkpoints rank 0 writes the final weights itself (not a link): the same
# waits on every rank, the job ends at once
rc=0
TRAINC_DIST_TIMEOUT=2 timeout 60 "${MPIRUN[@]}" -x TRAINC_DIST_TIMEOUT "$t" --out "$d/solo2" --set max_steps=3 \
    --set data.val=null --set checkpoint=null --threads 1 --quiet 2>"$d/solo2.log" || rc=$?
[ $rc -eq 0 ] && [ -s "$d/solo2/model.safetensors" ] ||
    { echo "FAIL: 2 ranks without checkpoints: rc=$rc"; tail -5 "$d/solo2.log"; exit 1; }
echo "ok   2 ranks: rank 0's sample (past TRAINC_DIST_TIMEOUT), checkpoints and final weights are not timed as collectives"
# nor rank 0 setting OUT up at the start (made, fsynced, locked; records cut or copied,
# best weights restored on --resume): strace holds its lock 2 s past the others' 1 s
# watchdog (rank 1 ended the job, exit 2, in the first step's collectives)
if command -v strace >/dev/null; then
    rc=0
    TRAINC_DIST_TIMEOUT=1 timeout 60 mpirun --oversubscribe --allow-run-as-root -x TRAINC_DIST_TIMEOUT \
        -np 1 strace -f -o /dev/null -e trace=flock -e inject=flock:delay_exit=2000000 "$t" --out "$d/solo3" \
        --set max_steps=3 --set data.val=null --threads 1 --quiet : \
        -np 1 "$t" --out "$d/solo3" --set max_steps=3 --set data.val=null --threads 1 --quiet \
        2>"$d/solo3.log" || rc=$?
    [ $rc -eq 0 ] && [ -s "$d/solo3/model.safetensors" ] ||
        { echo "FAIL: 2 ranks, rank 0's start past TRAINC_DIST_TIMEOUT: rc=$rc"; tail -5 "$d/solo3.log"; exit 1; }
    echo "ok   2 ranks: rank 0 setting OUT up (2 s, strace) is not timed as a collective (TRAINC_DIST_TIMEOUT=1)"
else
    echo "skip rank 0's slow start: no strace"
fi

# a rank that dies ends the job (mpirun stops the others) well within 60 s
"${MPIRUN[@]}" "$t" --out "$d/kill" --set epochs=100 --set data.val=null --set batch_size=32 --threads 1 --quiet \
    >"$d/kill.log" 2>&1 &
pid=$!
two_ranks() { [ "$(pgrep -f "^$t --out $d/kill" | wc -l)" -ge 2 ]; }
wait_for $pid "the 2 ranks of kill" two_ranks
sleep 0.5
victim=$(pgrep -f "^$t --out $d/kill" | tail -n 1)
kill -9 "$victim"
start=$SECONDS
rc=0
wait $pid || rc=$?
[ $rc -ne 0 ] && [ $((SECONDS - start)) -lt 60 ] || { echo "FAIL: job after a killed rank: rc=$rc, $((SECONDS - start)) s"; exit 1; }
echo "ok   2 ranks: a killed rank ends the job in $((SECONDS - start)) s (exit $rc)"
