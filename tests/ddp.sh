#!/usr/bin/env bash
# DDP over MPI on the CPU: 2 ranks with batch B each match 1 rank with batch 2B step by
# step (shuffle off: DistributedSampler's rank r takes samples r, r+2, ..., so the two
# ranks' batches together are the one rank's batch), for the MLP and gpt_char, with
# one gradient bucket and with many (overlapped with backward); only rank 0 writes.
set -eu
cd "$(dirname "$0")/.."
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

# signals: SIGTERM to mpirun reaches every rank; they stop at the same step, rank 0
# writes the checkpoint, and a 2-rank --resume is bit-identical to the run left alone
t="$d/mlp_fashion"
S=(--set max_steps=2500 --set log_every=1 --set validate.every_steps=100 --set validate.batches=5
   --set checkpoint.every_steps=50 --set batch_size=32 --threads 1 --quiet)
"${MPIRUN[@]}" "$t" --out "$d/sig.ref" "${S[@]}" 2>/dev/null
"${MPIRUN[@]}" "$t" --out "$d/sig.cut" "${S[@]}" 2>/dev/null &
pid=$!
n=0
while [ "$n" -lt 300 ]; do sleep 0.02; n=$(grep -c '"loss"' "$d/sig.cut/metrics.jsonl" 2>/dev/null) || true; n=${n:-0}; done
kill -TERM $pid
wait $pid || true
tail -n 1 "$d/sig.cut/metrics.jsonl" | grep -q '"reason":"interrupted"' || { echo "FAIL: no interrupted record"; exit 1; }
"${MPIRUN[@]}" "$t" --resume "$d/sig.cut" "${S[@]}" 2>/dev/null
cmp "$d/sig.ref/model.safetensors" "$d/sig.cut/model.safetensors"
echo "ok   2 ranks: SIGTERM at step $(grep -o '"resumed_from":[0-9]*' "$d/sig.cut/metrics.jsonl"), resumed bit-identical"

# early stopping decided on agreed validation numbers: both ranks stop together
"${MPIRUN[@]}" "$t" --out "$d/es" --set epochs=20 --set validate.every_steps=20 --set validate.batches=4 \
    --set early_stopping.patience=1 --set early_stopping.min_delta=0.05 --set batch_size=32 --threads 1 --quiet 2>/dev/null
tail -n 1 "$d/es/metrics.jsonl" | grep -q '"reason":"early_stopping"'
echo "ok   2 ranks: early stopping agreed ($(tail -n 1 "$d/es/metrics.jsonl" | grep -o '"step":[0-9]*'))"

# a rank that dies ends the job (mpirun stops the others) well within 60 s
"${MPIRUN[@]}" "$t" --out "$d/kill" --set epochs=100 --set data.val=null --set batch_size=32 --threads 1 --quiet \
    >"$d/kill.log" 2>&1 &
pid=$!
while [ "$(pgrep -f "^$t --out $d/kill" | wc -l)" -lt 2 ]; do sleep 0.1; done
sleep 0.5
victim=$(pgrep -f "^$t --out $d/kill" | tail -n 1)
kill -9 "$victim"
start=$SECONDS
rc=0
wait $pid || rc=$?
[ $rc -ne 0 ] && [ $((SECONDS - start)) -lt 60 ] || { echo "FAIL: job after a killed rank: rc=$rc, $((SECONDS - start)) s"; exit 1; }
echo "ok   2 ranks: a killed rank ends the job in $((SECONDS - start)) s (exit $rc)"
