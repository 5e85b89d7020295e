#!/usr/bin/env bash
# DDP across GPUs, without GPUs: two ranks under mpirun, each on its own fake GPU
# (TRAINC_FAKE_GPU_COUNT=2; tests/fake_gpu/), their gradients summed by the fake NCCL
# (tests/fake_gpu/fake_nccl.c: shared memory, polled on the communication stream). The
# runtime's NCCL path runs unmodified: MPI bootstraps the communicator, finished buckets
# go to ncclAllReduce on the communication stream during backward, the compute stream
# joins it, the host polls the stream and watches NCCL's asynchronous error.
#   - mlp_fashion and gpt_char: 2 GPUs x batch B match 1 GPU x 2B step by step within
#     1e-5 relative (shuffle off), one bucket and many buckets bit-identical;
#   - zero1 (each GPU keeps and updates its shard of the optimizer state): the same
#     losses, ddp's weights bit for bit, half the optimizer bytes; in bf16-mixed too
#     (the 16-bit parameter copy follows the gathered weights); and with train.freeze,
#     as zero2 (the frozen parameters, laid out last, neither summed nor sharded);
#   - zero2 (the gradient region backed on demand with the driver's virtual memory calls,
#     chunks of 64 KB here): ddp's losses and weights bit for bit, for both specs, in
#     bf16-mixed, with accumulate 3, and under the eager and sync schedules; less
#     gradient memory mapped at once than the whole region (the fake unmaps at once, so
#     a chunk handed back before its reduction ran would fault);
#   - SIGTERM to one rank (ddp, zero1, zero2): both ranks stop at one step and exit 130,
#     rank 0 writes the checkpoint, and a 2-rank --resume gives the uninterrupted run's
#     records and weights, bit for bit;
#   - two ranks on a node with one GPU: exit 2 naming the problem (NCCL would refuse it);
#   - a rank killed: the other sees NCCL's asynchronous error (a peer is gone) and exits 2
#     within seconds; a rank stopped (SIGSTOP): the other's wait for NCCL ends at
#     TRAINC_DIST_TIMEOUT with exit 2. Either way ncclCommAbort first, never a hang;
#   - bench/gpu_ddp.sh, the scaling benchmark, runs end to end.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=$PWD/build/tests/fake_ddp
lib=
. tests/fake_gpu/env.sh   # fbuild: the ranks start without compiling
for spec in mlp_fashion gpt_char; do
    fbuild specs/$spec.json -o "$d/$spec" 2>"$d/$spec.build.log"
done
fbuild specs/mlp_fashion.json --set precision=bf16-mixed -o "$d/mlp_fashion.bf16" 2>"$d/mlp_fashion.bf16.build.log"
# containers often forbid the cross-process reads Open MPI's shared memory uses
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TRAINC_FAKE_GPU_COUNT=2
# zero2's chunks: small, so that these small models span many (a GPU's are 2 MB)
export TRAINC_FAKE_GPU_GRAN_KB=64
MPIRUN=(mpirun --oversubscribe --allow-run-as-root -np 2 -x LD_LIBRARY_PATH -x TRAINC_FAKE_GPU_COUNT
        -x TRAINC_CACHE_DIR -x OMPI_MCA_btl_vader_single_copy_mechanism -x TRAINC_FAKE_GPU_GRAN_KB)
# each rank's exit status on its own line ("rank R exit S"), as mpirun reports one only
RANKED=(sh -c '"$0" "$@"; echo "rank $OMPI_COMM_WORLD_RANK exit $?"')

. tests/wait_for.sh
# rank1_of RUN N PID: once N step records of run RUN (mpirun's PID) are logged, rank1
# is its rank 1's pid
rank1_of() {
    local p
    wait_for "$3" "$2 steps of $1" logged "$d/$1/metrics.jsonl" "$2"
    rank1=""
    for p in $(pgrep -f "^$t --out $d/$1"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && rank1=$p
    done
    [ -n "$rank1" ] || { echo "FAIL: rank 1 of $1 not found"; exit 1; }
}

compare() {   # compare ONE TWO [LIMIT]: per-step losses within 1e-5 relative; TWO ran on 2
              # GPUs (zero2: at most LIMIT of the gradient region mapped at once)
    "$PY" - "$1/metrics.jsonl" "$2/metrics.jsonl" "${3:-1}" <<'PY'
import json, sys
limit = float(sys.argv[3])
def recs(p): return [json.loads(l) for l in open(p)]
def losses(rs): return [r["loss"] for r in rs if "loss" in r and "event" not in r]
a, b = recs(sys.argv[1]), recs(sys.argv[2])
sa = [r for r in a if r.get("event") == "start"][0]
sb = [r for r in b if r.get("event") == "start"][0]
assert sa["device"] == sb["device"] == "cuda" and sa["ranks"] == 1 and sb["ranks"] == 2, (sa, sb)
assert sb["strategy"] in ("ddp", "zero1", "zero2"), sb
if sb["strategy"] == "zero2":   # rank 0 keeps its shard of the gradients: half, rounded up
    assert sb["grad_bytes"] == (sa["grad_bytes"] // 4 + 1) // 2 * 4, (sb, sa)
    mem = [r for r in b if r.get("event") == "device_memory"][0]
    whole = -(-sa["grad_bytes"] // mem["grad_chunk_bytes"]) * mem["grad_chunk_bytes"]
    assert mem["grad_peak_bytes"] <= limit * whole, (mem, whole)
    print(f"gradient memory mapped at most {mem['grad_peak_bytes']} of {whole} bytes; ", end="")
else:   # (train.freeze's parameters have none)
    assert sb["grad_bytes"] == sa["grad_bytes"] <= sa["param_bytes"], (sb, sa)
if sb["strategy"] != "ddp":   # rank 0's shard of the state: half, rounded up
    half = (sa["optimizer_bytes"] // 8 + 1) // 2 * 8
    assert sb["optimizer_bytes"] == half, (sb["optimizer_bytes"], sa["optimizer_bytes"])
    assert sa["device_pool_bytes"] - sb["device_pool_bytes"] >= sa["optimizer_bytes"] - half - 512, (sa, sb)
la, lb = losses(a), losses(b)
assert len(la) == len(lb) > 0, (len(la), len(lb))
worst = max(abs(x - y) / abs(x) for x, y in zip(la, lb))
print(f"{len(la)} steps, worst relative difference {worst:.1e}")
assert worst <= 1e-5, worst
PY
}

for spec in mlp_fashion gpt_char; do
    t=$d/$spec
    B=16; [ $spec = gpt_char ] && B=2
    S=(--device cuda --set max_steps=12 --set log_every=1 --set loader.shuffle=false
       --set data.val=null --threads 1 --quiet)
    "$t" "${S[@]}" --out "$t.1" --set batch_size=$((2 * B)) 2>"$t.1.log"
    "${MPIRUN[@]}" "$t" "${S[@]}" --out "$t.2" --set batch_size=$B 2>"$t.2.log"
    "${MPIRUN[@]}" "$t" "${S[@]}" --out "$t.2b" --set batch_size=$B --set distributed.bucket_mb=0.05 2>"$t.2b.log"
    r=$(compare "$t.1" "$t.2")
    cmp "$t.2/model.safetensors" "$t.2b/model.safetensors"
    echo "ok   $spec: 2 GPUs x $B = 1 GPU x $((2 * B)) ($r); 1 bucket = many buckets, bit for bit"
    # zero1: each GPU keeps and updates half the optimizer state; the shards' gradients
    # reduced to their owners, the parameters broadcast from them after the update
    "${MPIRUN[@]}" "$t" "${S[@]}" --out "$t.z1" --set batch_size=$B --set distributed.bucket_mb=0.05 \
        --set distributed.strategy=zero1 2>"$t.z1.log"
    r=$(compare "$t.1" "$t.z1")
    cmp "$t.2/model.safetensors" "$t.z1/model.safetensors"
    echo "ok   $spec: zero1 on 2 GPUs: ($r), half the optimizer state, the weights of ddp bit for bit"
    # zero2: the gradients outside the shard backed only while their buckets are computed
    # or reduced. gpt_char's 30-odd buckets keep it well under the whole region even when
    # no reduction has passed before the host must wait (at most 2 outstanding); the MLP
    # has 3 buckets, its first weight 75% of the model, so whether a chunk goes back
    # before the last is mapped depends on the other rank's timing: at most the whole
    limit=1; [ $spec = gpt_char ] && limit=0.8
    "${MPIRUN[@]}" "$t" "${S[@]}" --out "$t.z2" --set batch_size=$B --set distributed.bucket_mb=0.05 \
        --set distributed.strategy=zero2 2>"$t.z2.log"
    r=$(compare "$t.1" "$t.z2" $limit)
    cmp "$t.2/model.safetensors" "$t.z2/model.safetensors"
    # trainc plan's worst case for rank 0 (its backward pass's hooks replayed) bounds it
    "$TRAINC" plan specs/$spec.json --ranks 2 --chunk-kb 64 --set distributed.bucket_mb=0.05 >"$t.z2.plan"
    want=$(awk '/^  GPU, 64 KB chunks/ {print $5}' "$t.z2.plan")
    got=$(grep -o '"grad_peak_bytes":[0-9]*' "$t.z2/metrics.jsonl" | cut -d: -f2)
    [ -n "$want" ] && [ "$got" -le "$want" ] || { echo "FAIL: $spec zero2 mapped $got bytes, plan says at most '$want'"; exit 1; }
    echo "ok   $spec: zero2 on 2 GPUs: ($r), at most $want by trainc plan; half the gradients kept, the weights of ddp bit for bit"
done
# zero2 under the other legal schedules of the fake GPU's streams, and with accumulate 3
# (the chunks the earlier micro-batches mapped stay mapped and are not zeroed again)
t=$d/mlp_fashion
S=(--device cuda --set max_steps=12 --set log_every=1 --set loader.shuffle=false
   --set data.val=null --threads 1 --quiet --set batch_size=16 --set distributed.bucket_mb=0.05)
for sch in eager sync; do
    TRAINC_FAKE_GPU_SCHEDULE=$sch "${MPIRUN[@]}" -x TRAINC_FAKE_GPU_SCHEDULE "$t" "${S[@]}" --out "$t.z2.$sch" \
        --set distributed.strategy=zero2 2>"$t.z2.$sch.log"
    cmp "$t.2/model.safetensors" "$t.z2.$sch/model.safetensors"
done
for strategy in ddp zero2; do
    "${MPIRUN[@]}" "$t" "${S[@]}" --out "$t.acc.$strategy" --set accumulate=3 \
        --set distributed.strategy=$strategy 2>"$t.acc.$strategy.log"
done
cmp "$t.acc.ddp/model.safetensors" "$t.acc.zero2/model.safetensors"
echo "ok   mlp_fashion: zero2 = ddp bit for bit under the eager and sync schedules, and with accumulate 3"

# bf16-mixed: the parameters' 16-bit copy (the GEMMs' operand) follows the gathered
# weights under zero1 (a stale copy of the other rank's shard would change the losses)
t=$d/mlp_fashion.bf16
S=(--device cuda --set max_steps=12 --set log_every=1 --set loader.shuffle=false
   --set data.val=null --threads 1 --quiet --set batch_size=16)
"${MPIRUN[@]}" "$t" "${S[@]}" --out "$t.2" 2>"$t.2.log"
"${MPIRUN[@]}" "$t" "${S[@]}" --out "$t.z1" --set distributed.strategy=zero1 2>"$t.z1.log"
"${MPIRUN[@]}" "$t" "${S[@]}" --out "$t.z2" --set distributed.strategy=zero2 2>"$t.z2.log"
for z in z1 z2; do
    cmp "$t.2/model.safetensors" "$t.$z/model.safetensors"
    [ "$(grep -o '"loss":[^,]*' "$t.2/metrics.jsonl")" = "$(grep -o '"loss":[^,]*' "$t.$z/metrics.jsonl")" ]
done
echo "ok   mlp_fashion bf16-mixed: zero1 and zero2 on 2 GPUs give ddp's losses and weights, bit for bit"
# trainc plan --ranks 2 in bf16-mixed prints the bytes these trainers keep: fp32
# parameters, gradients and optimizer state (start records), the 16-bit copy besides
"$TRAINC" plan specs/mlp_fashion.json --ranks 2 --set precision=bf16-mixed >"$t.plan"
for z in 2 z1 z2; do
    st=ddp; [ $z = z1 ] && st=zero1; [ $z = z2 ] && st=zero2
    rec=$(head -1 "$t.$z/metrics.jsonl")
    f() { echo "$rec" | grep -o "\"$1\":[0-9]*" | cut -d: -f2; }
    grep -Eq "^  $st +$(f param_bytes) +$(f grad_bytes) +$(f optimizer_bytes) " "$t.plan" ||
        { echo "FAIL: bf16-mixed $st: the start record's bytes are not trainc plan's:"; echo "$rec"; cat "$t.plan"; exit 1; }
done
grep -q "16-bit copy, $(($(f param_bytes) / 2)) bytes" "$t.plan" ||
    { echo "FAIL: bf16-mixed plan --ranks 2 does not name the 16-bit copy"; cat "$t.plan"; exit 1; }
echo "ok   mlp_fashion bf16-mixed: trainc plan --ranks 2 = the start records' bytes under ddp, zero1, zero2"

# train.freeze (gpt_char's embeddings, first block, a layernorm weight and the second
# block's fc weight, laid out after the trained parameters): no gradient, optimizer
# state, sum or shard of theirs (the layernorm's dgamma, written beside its dx, goes to
# a sink): 2 GPUs x 2 = 1 GPU x 4, zero1 and zero2 (small and large buckets) = ddp bit
# for bit
t=$d/gpt_freeze
F='freeze=wte.weight,wpe.weight,h.0.*,h.1.ln_2.weight,h.1.fc.weight'
fbuild specs/gpt_char.json --set "$F" -o "$t" 2>"$t.build.log"
S=(--device cuda --set max_steps=8 --set log_every=1 --set loader.shuffle=false
   --set data.val=null --threads 1 --quiet --set distributed.bucket_mb=0.05)
"$t" "${S[@]}" --out "$t.1" --set batch_size=4 2>"$t.1.log"
"${MPIRUN[@]}" "$t" "${S[@]}" --out "$t.2" --set batch_size=2 2>"$t.2.log"
for z in 1 2; do
    "${MPIRUN[@]}" "$t" "${S[@]}" --out "$t.z$z" --set batch_size=2 --set distributed.strategy=zero$z 2>"$t.z$z.log"
done
"${MPIRUN[@]}" "$t" "${S[@]}" --out "$t.z2b" --set batch_size=2 --set distributed.strategy=zero2 \
    --set distributed.bucket_mb=0.5 2>"$t.z2b.log"
r=$(compare "$t.1" "$t.2")
for z in z1 z2 z2b; do
    cmp "$t.2/model.safetensors" "$t.$z/model.safetensors"
done
echo "ok   gpt_char with train.freeze: 2 GPUs x 2 = 1 GPU x 4 ($r); zero1 and zero2 = ddp bit for bit"
# NCCL's sums (ddp's all-reduce, ZeRO's reductions to the shards' owners) leave out the
# frozen parameters (wte, wpe, h.0: 247424 floats; h.1.fc: 65536; h.1.ln_2: 128), and so
# do the gradient and optimizer bytes; trainc plan's worst case bounds zero2's mapped
# chunks
for b in 0.05 0.5; do
    "$TRAINC" plan specs/gpt_char.json --set "$F" --ranks 2 --chunk-kb 64 --set distributed.bucket_mb=$b >"$t.plan.$b"
done
"$PY" - "$t" <<'PY'
import json, sys
t = sys.argv[1]
def start(run):
    return next(json.loads(l) for l in open(f"{t}.{run}/metrics.jsonl") if '"start"' in l)
def peak(plan):
    return int(next(l.split()[4] for l in open(f"{t}.plan.{plan}") if l.startswith("  GPU, 64 KB chunks")))
P = start("2")["param_bytes"]
T = P - 4 * (247424 + 65536 + 128)
for run in ("2", "z1", "z2", "z2b"):
    s = start(run)
    assert s["reduced_bytes"] == T and s["grad_bytes"] == (T / 2 if run[:2] == "z2" else T), s
    assert s["optimizer_bytes"] == (2 * T if run == "2" else T), s
for run, plan in (("z2", "0.05"), ("z2b", "0.5")):
    got = [json.loads(l) for l in open(f"{t}.{run}/metrics.jsonl") if '"grad_peak_bytes"' in l][-1]["grad_peak_bytes"]
    assert 0 < got <= peak(plan) < P, (run, got, peak(plan), P)
print(f"ok   gpt_char with train.freeze: NCCL sums {T} bytes a step of {P}, the gradients and AdamW's "
      f"state as many (zero: half); zero2's chunks within trainc plan's worst case")
PY

# signals: SIGTERM to rank 1 alone; both ranks stop at one step and exit 130, rank 0
# writes the checkpoint; a 2-rank --resume is bit-identical to the run left alone. 60
# steps, the signal after the 20th (a checkpoint and a validation on each side of it;
# the signal lands within a few steps, so the run cannot end first)
t=$d/mlp_fashion
for strategy in ddp zero1 zero2; do
S=(--device cuda --set max_steps=60 --set log_every=1 --set validate.every_steps=10
   --set validate.batches=2 --set checkpoint.every_steps=10 --set batch_size=16 --threads 1 --quiet
   --set distributed.strategy=$strategy)
rm -rf "$d/sig.ref" "$d/sig.cut"
"${MPIRUN[@]}" "$t" --out "$d/sig.ref" "${S[@]}" 2>"$d/sig.ref.log"
"${MPIRUN[@]}" "${RANKED[@]}" "$t" --out "$d/sig.cut" "${S[@]}" >"$d/sig.log" 2>&1 &
pid=$!
rank1_of sig.cut 20 $pid
kill -TERM "$rank1"
wait $pid || true
tail -n 1 "$d/sig.cut/metrics.jsonl" | grep -q '"reason":"interrupted"' &&
    grep -q "rank 0 exit 130" "$d/sig.log" && grep -q "rank 1 exit 130" "$d/sig.log" ||
    { echo "FAIL: after SIGTERM:"; tail -n 5 "$d/sig.log"; tail -n 1 "$d/sig.cut/metrics.jsonl"; exit 1; }
"${MPIRUN[@]}" "$t" --resume "$d/sig.cut" "${S[@]}" 2>"$d/sig.resume.log"
"$PY" - "$d/sig.ref" "$d/sig.cut" <<'PY'
import json, sys
def recs(run):
    strip = ("time_s", "samples_per_s", "tokens_per_s")
    return [{k: v for k, v in json.loads(l).items() if k not in strip}
            for l in open(run + "/metrics.jsonl") if '"event"' not in l]
a, b = recs(sys.argv[1]), recs(sys.argv[2])
assert a == b, "the resumed run's records differ"
PY
cmp "$d/sig.ref/model.safetensors" "$d/sig.cut/model.safetensors"
echo "ok   2 GPUs, $strategy: SIGTERM at step $(grep -o '"resumed_from":[0-9]*' "$d/sig.cut/metrics.jsonl" | cut -d: -f2), both exit 130, resumed bit-identical"
done

# two ranks, one GPU: each rank needs its own
set +e
TRAINC_FAKE_GPU_COUNT=1 "${MPIRUN[@]}" "${RANKED[@]}" "$t" --out "$d/one" "${S[@]}" >"$d/one.log" 2>&1
set -e
grep -q "rank 0 exit 2" "$d/one.log" && grep -q "2 ranks on this node but 1 GPU" "$d/one.log" && [ ! -e "$d/one" ] ||
    { echo "FAIL: two ranks on one GPU:"; tail -n 5 "$d/one.log"; exit 1; }
echo "ok   2 ranks on 1 GPU: exit 2: $(grep -o '2 ranks on this node[^:]*' "$d/one.log" | head -n 1)"

# a rank that dies or hangs: mpirun told to let the job go on (--enable-recovery), so
# only the survivor ends it. start_victim NAME: starts a long run; rank1 is its rank 1
# once 2 records are logged (100 steps: every step's gradients through NCCL)
start_victim() {
    TRAINC_DIST_TIMEOUT=5 timeout 120 "${MPIRUN[@]}" -x TRAINC_DIST_TIMEOUT --enable-recovery "${RANKED[@]}" \
        "$t" --out "$d/$1" --device cuda --set epochs=100 --set data.val=null --set batch_size=16 \
        --threads 1 --quiet >"$d/$1.log" 2>&1 &
    job=$!
    rank1_of "$1" 2 $job
}
start_victim kill
kill -9 "$rank1"
SECONDS=0
wait $job || true
grep -q "rank 0 exit 2" "$d/kill.log" && [ $SECONDS -le 30 ] ||
    { echo "FAIL: after a killed rank ($SECONDS s):"; tail -n 20 "$d/kill.log"; exit 1; }
echo "ok   2 GPUs: rank 1 killed, rank 0 exits 2 in $SECONDS s: $(grep -o 'rank 0 of 2: [^(]*' "$d/kill.log" | head -n 1)"

export TRAINC_DIST_TIMEOUT=5
start_victim stop
kill -STOP "$rank1"
SECONDS=0
wait $job || true
kill -9 "$rank1" 2>/dev/null || true
grep -q "rank 0 exit 2" "$d/stop.log" && grep -q "has not completed after 5 s" "$d/stop.log" && [ $SECONDS -le 30 ] ||
    { echo "FAIL: after a stopped rank ($SECONDS s):"; tail -n 20 "$d/stop.log"; exit 1; }
echo "ok   2 GPUs: rank 1 stopped, rank 0 exits 2 in $SECONDS s: $(grep -o 'rank 0 of 2: [^(]*' "$d/stop.log" | head -n 1)"

# bench/gpu_ddp.sh (the scaling benchmark for a multi-GPU machine) runs end to end on
# the fake GPUs: a row per strategy and GPU count, with a rate (meaningless here)
OUT=$d/bench GPUS=2 STEPS=8 STRATEGIES="ddp zero1 zero2" TRAINER=$t bash bench/gpu_ddp.sh \
    --set batch_size=16 --threads 1 >"$d/bench.log" 2>&1
"$PY" - "$d/bench/ddp_scaling.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [(r["strategy"], r["gpus"]) for r in rows] == [(s, n) for s in ("ddp", "zero1", "zero2") for n in (1, 2)], rows
assert all(r["rc"] == 0 and r["rate"] > 0 for r in rows), rows
assert rows[3]["optimizer_bytes"] < rows[1]["optimizer_bytes"], rows
assert rows[5]["grad_bytes"] < rows[1]["grad_bytes"] and rows[5]["grad_peak_bytes"] > 0, rows   # zero2
PY
echo "ok   bench/gpu_ddp.sh on 2 fake GPUs: 6 runs, scaling table printed"
