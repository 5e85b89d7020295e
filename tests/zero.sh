#!/usr/bin/env bash
# ZeRO-1 and ZeRO-2 over MPI on the CPU, 2 ranks (runtime/zero.c):
#  - 2 ranks with batch B match 1 rank with batch 2B step by step (shuffle off) within
#    1e-5 relative loss, for ddp, zero1 and zero2, on the MLP and gpt_char (and zero2
#    with accumulate 2), and on a tiny Llama (rmsnorm, SwiGLU);
#  - the start record's per-rank bytes: zero1/zero2 optimizer state and zero2
#    gradients are half of ddp's, and `trainc plan --ranks 2` prints the same numbers
#    (and zero2's worst-case gradient peak per rank, between the shard and the whole;
#    `--json` the same figures as data);
#  - SIGTERM to one rank (rank 1) stops both at the same step with a checkpoint
#    holding both shards; --resume continues bit-identically to the run left alone
#    (also as zero1: the checkpoint is the same whatever the strategy); resuming on
#    another number of ranks is refused with exit 1;
#  - early stopping is decided on agreed numbers: both ranks stop and exit 0;
#  - a rank that dies makes the other leave with exit 2 and a message (watchdog).
set -eu
cd "$(dirname "$0")/.."
. tests/wait_for.sh
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
MPIRUN=(mpirun --oversubscribe --allow-run-as-root -np 2)
# containers often forbid the cross-process reads Open MPI's shared memory uses
export OMPI_MCA_btl_vader_single_copy_mechanism=none
d=$(pwd)/build/tests/zero
rm -rf "$d"; mkdir -p "$d"
# each rank's exit status on its own line ("rank R exit S"), as mpirun reports one only
RANKED=(sh -c '"$0" "$@"; echo "rank $OMPI_COMM_WORLD_RANK exit $?"')

compare() {   # compare ONE TWO: per-step losses within 1e-5 relative; prints the worst
    $PY - "$1/metrics.jsonl" "$2/metrics.jsonl" <<'PY'
import json, sys
def losses(p): return [json.loads(l)["loss"] for l in open(p) if '"loss"' in l and '"event"' not in l]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == len(b) > 0, (len(a), len(b))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"{len(a)} steps, worst relative difference {worst:.1e}", end="")
assert worst <= 1e-5, worst
PY
}
start_field() {   # start_field RUN FIELD
    $PY -c 'import json, sys; print([json.loads(l) for l in open(sys.argv[1]) if "\"start\"" in l][0][sys.argv[2]])' \
        "$1/metrics.jsonl" "$2"
}

for spec in mlp_fashion gpt_char; do
    t="$d/$spec"
    "$TRAINC" build specs/$spec.json -o "$t" 2>/dev/null
    B=16; [ $spec = gpt_char ] && B=4
    S=(--set loader.shuffle=false --set max_steps=12 --set log_every=1 --set data.val=null --threads 1 --quiet)
    "$t" --out "$d/$spec.1" "${S[@]}" --set batch_size=$((2 * B)) 2>/dev/null
    for st in ddp zero1 zero2; do
        # small buckets: many reduce-scatters in flight, zero2's bound on them in force
        "${MPIRUN[@]}" "$t" --out "$d/$spec.$st" "${S[@]}" --set batch_size=$B \
            --set distributed.strategy=$st --set distributed.bucket_mb=0.2 2>/dev/null
        [ "$(start_field "$d/$spec.$st" strategy)" = $st ] && [ "$(start_field "$d/$spec.$st" ranks)" = 2 ]
        # (a failure inside "$(...)" in an echo's words would not stop the script)
        r=$(compare "$d/$spec.1" "$d/$spec.$st")
        same=
        cmp -s "$d/$spec.ddp/model.safetensors" "$d/$spec.$st/model.safetensors" &&
            [ $st != ddp ] && same=' (weights bit-identical to ddp)'
        echo "ok   $spec $st: 2 ranks x $B = 1 rank x $((2 * B)): $r$same"
    done
    # per-rank bytes: optimizer state halved by zero1 and zero2, gradients by zero2
    ob=$(start_field "$d/$spec.ddp" optimizer_bytes); gb=$(start_field "$d/$spec.ddp" grad_bytes)
    pb=$(start_field "$d/$spec.ddp" param_bytes)
    [ "$(start_field "$d/$spec.zero1" optimizer_bytes)" -eq $((ob / 2)) ]
    [ "$(start_field "$d/$spec.zero2" optimizer_bytes)" -eq $((ob / 2)) ]
    [ "$(start_field "$d/$spec.zero1" grad_bytes)" -eq "$gb" ]
    [ "$(start_field "$d/$spec.zero2" grad_bytes)" -eq $((gb / 2)) ]
    "$TRAINC" plan specs/$spec.json --ranks 2 >"$d/$spec.plan"
    grep -Eq "^  ddp +$pb +$gb +$ob " "$d/$spec.plan"
    grep -Eq "^  zero1 +$pb +$gb +$((ob / 2)) " "$d/$spec.plan"
    grep -Eq "^  zero2 +$pb +$((gb / 2)) +$((ob / 2)) " "$d/$spec.plan"
    echo "ok   $spec: per rank, optimizer state ddp $ob, zero1/zero2 $((ob / 2)) bytes; gradients zero2 $((gb / 2)) of $gb (= trainc plan --ranks 2)"
    # zero2's worst-case gradient peak per rank: at least the shard, at most the whole region
    "$PY" - "$d/$spec.plan" $((gb / 2)) <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.startswith(("  CPU, 4 KB pages", "  GPU, 2048 KB chunks"))]
assert len(rows) == 2, rows
for r in rows:
    r0, r1, whole = (int(x) for x in r[-3:])
    assert int(sys.argv[2]) <= min(r0, r1) and max(r0, r1) <= whole, r
PY
    # the same as data: plan --json --ranks 2 is plan.json with "ranks" added
    "$TRAINC" plan specs/$spec.json --ranks 2 --json >"$d/$spec.plan.json"
    "$PY" - "$d/$spec.plan.json" "$d/$spec.plan" $pb $gb $ob <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); r = j["ranks"]; pb, gb, ob = (int(x) for x in sys.argv[3:6])
assert j["param_bytes"] == pb and r["n"] == 2, (j["param_bytes"], r["n"])
assert (r["ddp"]["param_bytes"], r["ddp"]["grad_bytes"], r["ddp"]["optimizer_bytes"]) == (pb, gb, ob), r["ddp"]
assert (r["zero2"]["grad_bytes"], r["zero2"]["optimizer_bytes"]) == (gb // 2, ob // 2), r["zero2"]
text = [l.split() for l in open(sys.argv[2]) if l.startswith(("  CPU, 4 KB pages", "  GPU, 2048 KB chunks"))]
for row, kind in zip(text, ("cpu", "gpu")):
    z = r["zero2_grad_peak"][kind]
    assert [int(x) for x in row[-3:]] == z["per_rank_bytes"] + [z["whole_region_bytes"]], (row, z)
PY
done
# a tiny Llama (rmsnorm weights, a SwiGLU MLP, no biases): its parameters register
# their gradient hooks as layernorm's do, so the strategies agree with one rank
$PY tests/llama_tiny.py "$d/llama_tiny.json"
t="$d/llama_tiny"
"$TRAINC" build "$d/llama_tiny.json" -o "$t" 2>/dev/null
S=(--set loader.shuffle=false --set max_steps=8 --set log_every=1 --set data.val=null --threads 1 --quiet)
"$t" --out "$d/llama.1" "${S[@]}" --set batch_size=8 2>/dev/null
for st in ddp zero1 zero2; do
    "${MPIRUN[@]}" "$t" --out "$d/llama.$st" "${S[@]}" --set batch_size=4 \
        --set distributed.strategy=$st --set distributed.bucket_mb=0.05 2>/dev/null
    r=$(compare "$d/llama.1" "$d/llama.$st")
    echo "ok   llama_tiny $st: 2 ranks x 4 = 1 rank x 8: $r"
done
# with a mixture of experts for its MLP: each rank routes its own tokens, the experts'
# gradients summed over the ranks as any parameter's
$PY tests/llama_tiny.py "$d/llama_moe.json" --moe
t="$d/llama_moe"
"$TRAINC" build "$d/llama_moe.json" -o "$t" 2>/dev/null
"$t" --out "$d/moe.1" "${S[@]}" --set batch_size=8 2>/dev/null
for st in ddp zero2; do
    "${MPIRUN[@]}" "$t" --out "$d/moe.$st" "${S[@]}" --set batch_size=4 \
        --set distributed.strategy=$st --set distributed.bucket_mb=0.05 2>/dev/null
    r=$(compare "$d/moe.1" "$d/moe.$st")
    echo "ok   llama_moe $st: 2 ranks x 4 = 1 rank x 8: $r"
done
rc=0
"$TRAINC" plan specs/mlp_fashion.json --ranks 2 --chunk-kb 3 >/dev/null 2>"$d/chunk.err" || rc=$?
[ $rc = 1 ] && grep -q "chunk-kb expects a multiple of 4" "$d/chunk.err" || { echo "FAIL: --chunk-kb 3: exit $rc"; exit 1; }
rc=0
"$TRAINC" plan specs/mlp_fashion.json --chunk-kb 64 >/dev/null 2>"$d/chunk.err" || rc=$?
[ $rc = 1 ] && grep -q "add --ranks N" "$d/chunk.err" || { echo "FAIL: --chunk-kb without --ranks: exit $rc"; exit 1; }
echo "ok   trainc plan --ranks 2: zero2's gradient peak per rank between the shard and the whole region, --json the same figures; --chunk-kb 3, or without --ranks: exit 1"

# accumulate: the earlier micro-batches accumulate locally, the last one reduce-scatters
t="$d/mlp_fashion"
S=(--set loader.shuffle=false --set max_steps=8 --set log_every=1 --set data.val=null --threads 1 --quiet --set accumulate=2)
"$t" --out "$d/acc.1" "${S[@]}" --set batch_size=16 2>/dev/null
"${MPIRUN[@]}" "$t" --out "$d/acc.2" "${S[@]}" --set batch_size=8 --set distributed.strategy=zero2 \
    --set distributed.bucket_mb=0.2 2>/dev/null
r=$(compare "$d/acc.1" "$d/acc.2")
echo "ok   zero2 with accumulate 2: $r"

# SIGTERM to rank 1 alone: the ranks agree to stop at the same step, both shards go into
# the checkpoint, both exit 130; --resume is bit-identical to the run left alone
S=(--set max_steps=2000 --set log_every=1 --set validate.every_steps=100 --set validate.batches=5
   --set checkpoint.every_steps=50 --set batch_size=32 --threads 1 --quiet --set distributed.strategy=zero2)
"${MPIRUN[@]}" "$t" --out "$d/sig.ref" "${S[@]}" 2>/dev/null
"${MPIRUN[@]}" "${RANKED[@]}" "$t" --out "$d/sig.cut" "${S[@]}" >"$d/sig.log" 2>&1 &
pid=$!
wait_for $pid "300 steps of sig.cut" logged "$d/sig.cut/metrics.jsonl" 300
rank1=""
for p in $(pgrep -f "^$t --out $d/sig.cut"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && rank1=$p
done
[ -n "$rank1" ] || { echo "FAIL: rank 1 not found"; exit 1; }
kill -TERM "$rank1"
wait $pid || true
grep -q "rank 0 exit 130" "$d/sig.log" && grep -q "rank 1 exit 130" "$d/sig.log" ||
    { echo "FAIL: exits after SIGTERM to rank 1:"; cat "$d/sig.log"; exit 1; }
tail -n 1 "$d/sig.cut/metrics.jsonl" | grep -q '"reason":"interrupted"' || { echo "FAIL: no interrupted record"; exit 1; }
cp -r "$d/sig.cut" "$d/sig.cut1"
"${MPIRUN[@]}" "$t" --resume "$d/sig.cut" "${S[@]}" 2>/dev/null
cmp "$d/sig.ref/model.safetensors" "$d/sig.cut/model.safetensors"
"${MPIRUN[@]}" "$t" --resume "$d/sig.cut1" "${S[@]}" --set distributed.strategy=zero1 2>/dev/null
cmp "$d/sig.ref/model.safetensors" "$d/sig.cut1/model.safetensors"
echo "ok   zero2: SIGTERM to rank 1 at step $(grep -o '"resumed_from":[0-9]*' "$d/sig.cut/metrics.jsonl" | cut -d: -f2): both ranks exit 130; resumed bit-identical (as zero2 and as zero1)"
rc=0
"$t" --resume "$d/sig.cut" "${S[@]}" >"$d/sig.np1.log" 2>&1 || rc=$?
[ $rc -eq 1 ] && grep -q "written by a run on 2 ranks and this one has 1" "$d/sig.np1.log" ||
    { echo "FAIL: resume on 1 rank: exit $rc"; cat "$d/sig.np1.log"; exit 1; }
echo "ok   zero2: resuming a 2-rank checkpoint on 1 rank is refused (exit 1)"

# a checkpoint's gathers of the optimizer state wait on rank 0's disk (it writes the
# weights first, then each chunk), not under the watchdog: strace makes two of rank 0's
# fsyncs there (checkpoints/, model.safetensors) take 1.5 s each, past TRAINC_DIST_TIMEOUT=1
# (rank 1 ended the job, exit 2, in MPI_Gatherv)
if command -v strace >/dev/null; then
    rc=0
    C=(--set max_steps=2 --set data.val=null --threads 1 --quiet --set distributed.strategy=zero2)
    TRAINC_DIST_TIMEOUT=1 timeout 60 mpirun --oversubscribe --allow-run-as-root -x TRAINC_DIST_TIMEOUT \
        -np 1 strace -f -o /dev/null -e trace=fsync -e inject=fsync:delay_exit=1500000:when=3..4 \
        "$t" --out "$d/slowck" "${C[@]}" : -np 1 "$t" --out "$d/slowck" "${C[@]}" 2>"$d/slowck.log" || rc=$?
    [ $rc -eq 0 ] && [ -s "$d/slowck/checkpoints/step_00000002/exp_avg.safetensors" ] ||
        { echo "FAIL: zero2, rank 0's checkpoint past TRAINC_DIST_TIMEOUT: rc=$rc"; tail -5 "$d/slowck.log"; exit 1; }
    echo "ok   zero2: a checkpoint's gathers wait on rank 0's slow disk (3 s, strace) without the watchdog (TRAINC_DIST_TIMEOUT=1)"
    # rank 0's own wait in them is timed: rank 1 killed while rank 0 writes the weights
    # (mpirun --enable-recovery lets rank 0 go on) ends the job, exit 2, not a hang. The
    # two fsyncs take 4 s each: the kill must land before rank 0 reaches the gathers, and
    # on a loaded machine the poll for the folder can take seconds (with 2 s each, rank 0
    # was sometimes past them, and failed in a later collective instead)
    C=(--set max_steps=100000 --set checkpoint.every_steps=5 --set data.val=null --threads 1 --quiet
       --set distributed.strategy=zero2)
    TRAINC_DIST_TIMEOUT=2 timeout 60 mpirun --oversubscribe --allow-run-as-root --enable-recovery \
        -x TRAINC_DIST_TIMEOUT -np 1 "${RANKED[@]}" strace -f -o /dev/null -e trace=fsync \
        -e inject=fsync:delay_exit=4000000:when=3..4 "$t" --out "$d/killck" "${C[@]}" : \
        -np 1 "${RANKED[@]}" "$t" --out "$d/killck" "${C[@]}" >"$d/killck.log" 2>&1 &
    pid=$!
    wait_for $pid "killck's first checkpoint" test -d "$d/killck/checkpoints"
    for p in $(pgrep -f "^$t --out $d/killck"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && kill -9 "$p"
    done
    start=$SECONDS
    wait $pid || true
    grep -q "rank 0 exit 2" "$d/killck.log" && grep -q "rank 0 of 2: MPI_Gatherv" "$d/killck.log" &&
        [ $((SECONDS - start)) -le 30 ] ||
        { echo "FAIL: rank 1 killed in rank 0's checkpoint ($((SECONDS - start)) s):"; tail -n 20 "$d/killck.log"; exit 1; }
    echo "ok   zero2: rank 1 killed during rank 0's checkpoint: rank 0 exits 2 in $((SECONDS - start)) s (its gather is timed)"
else
    echo "skip zero2's slow checkpoint: no strace"
fi

# early stopping decided on agreed validation numbers: both ranks stop at the same step
# (a rank that went on would wait in a collective and leave with exit 2)
TRAINC_DIST_TIMEOUT=20 "${MPIRUN[@]}" "${RANKED[@]}" "$t" --out "$d/es" --set epochs=20 \
    --set validate.every_steps=20 --set validate.batches=4 --set early_stopping.patience=1 \
    --set early_stopping.min_delta=0.05 --set batch_size=32 --threads 1 --quiet \
    --set distributed.strategy=zero2 >"$d/es.log" 2>&1
tail -n 1 "$d/es/metrics.jsonl" | grep -q '"reason":"early_stopping"'
grep -q "rank 0 exit 0" "$d/es.log" && grep -q "rank 1 exit 0" "$d/es.log"
echo "ok   zero2: early stopping agreed, both ranks exit 0 ($(tail -n 1 "$d/es/metrics.jsonl" | grep -o '"step":[0-9]*'))"

# a rank that dies: mpirun told to let the job go on (--enable-recovery), so only the
# survivor's watchdog ends it: exit 2 with a message, within TRAINC_DIST_TIMEOUT
log="$d/kill.log"
TRAINC_DIST_TIMEOUT=5 timeout 120 "${MPIRUN[@]}" --enable-recovery "${RANKED[@]}" "$t" --out "$d/kill" \
    --set epochs=100 --set data.val=null --set batch_size=32 --threads 1 --quiet \
    --set distributed.strategy=zero2 >"$log" 2>&1 &
pid=$!
wait_for $pid "20 steps of kill" logged "$d/kill/metrics.jsonl" 20
victim=""
for p in $(pgrep -f "^$t --out $d/kill"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && victim=$p
done
[ -n "$victim" ] || { echo "FAIL: rank 1 not found"; exit 1; }
kill -9 "$victim"
start=$SECONDS
wait $pid || true
secs=$((SECONDS - start))
grep -q "rank 0 exit 2" "$log" && grep -qE "has not completed after 5(\.[0-9]+)? s" "$log" && [ $secs -le 30 ] ||
    { echo "FAIL: after a killed rank ($secs s):"; tail -n 20 "$log"; exit 1; }
echo "ok   zero2: rank 1 killed, rank 0 exits 2 in $secs s: $(grep -o 'rank 0 of 2: [^(]*' "$log" | head -n 1)"
