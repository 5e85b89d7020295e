#!/usr/bin/env bash
# Data-parallel scaling across the GPUs of one machine:
# the same trainer on 1, 2, 4, ... GPUs (one rank each, mpirun), per-rank batch fixed
# (weak scaling, as DDP is used), throughput from the trainer's own records, and the
# scaling efficiency  E(N) = throughput(N) / (N x throughput(1)).
#
#   TRAINER=/tmp/devpack/ship/gpt2_124m_none bash bench/gpu_ddp.sh --set batch_size=16
#   STRATEGIES="ddp zero1 zero2" NS="1 2 4 8" STEPS=30 bash bench/gpu_ddp.sh ...
#
# Needs Open MPI's mpirun on the machine (a shipped --bundle has MPI's libraries, not
# its launcher). NS defaults to 1 2 4 ... up to the GPUs nvidia-smi lists (GPUS=N to
# say how many there are). The first 5 steps are warm-up (kernel cache, NCCL's
# connections); the rate is the records' after them. Results: $OUT/ddp_scaling.jsonl,
# one line per run, and a table on stdout. Runs that fail are reported, not hidden.
set -u
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
TRAINER=${TRAINER:?"TRAINER=path of a trainer built with --device cuda (or both)"}
STEPS=${STEPS:-30}
STRATEGIES=${STRATEGIES:-ddp}
command -v mpirun >/dev/null || { echo "bench/gpu_ddp.sh: no mpirun on this machine (Open MPI's launcher is needed for several ranks)"; exit 2; }
if [ -z "${GPUS:-}" ]; then
    GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU') || GPUS=0
fi
[ "$GPUS" -ge 1 ] || { echo "bench/gpu_ddp.sh: no GPU found (nvidia-smi -L; GPUS=N overrides)"; exit 2; }
if [ -z "${NS:-}" ]; then
    NS=""; n=1
    while [ $n -le "$GPUS" ]; do NS="$NS $n"; n=$((n * 2)); done
fi
MPIRUN=(mpirun --oversubscribe --allow-run-as-root -x LD_LIBRARY_PATH -x TRAINC_CACHE_DIR)
res=$OUT/ddp_scaling.jsonl
: >"$res"
for strategy in $STRATEGIES; do
    for n in $NS; do
        dir=$OUT/ddp_${strategy}_$n
        rm -rf "$dir"
        "${MPIRUN[@]}" -np "$n" "$TRAINER" --device cuda --out "$dir" --set max_steps="$STEPS" \
            --set log_every=1 --set data.val=null --set validate.every_steps=null --set checkpoint=null \
            --set validate.batches=null --set distributed.strategy="$strategy" --quiet \
            "$@" >"$dir.log" 2>&1
        rc=$?
        python3 - "$dir" "$strategy" "$n" "$rc" >>"$res" <<'PY'
import json, sys
d, strategy, n, rc = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
out = {"strategy": strategy, "gpus": n, "rc": rc}
try:
    recs = [json.loads(l) for l in open(d + "/metrics.jsonl")]
    start = [r for r in recs if r.get("event") == "start"][0]
    steps = [r for r in recs if "step" in r and "event" not in r][5:]
    key = "tokens_per_s" if "tokens_per_s" in steps[0] else "samples_per_s"
    out.update(unit=key, rate=sum(r[key] for r in steps) / len(steps), steps=len(steps),
               batch_per_rank=start["batch_size"], gpu=start.get("gpu"),
               device_bytes=start.get("device_bytes"), optimizer_bytes=start.get("optimizer_bytes"),
               grad_bytes=start.get("grad_bytes"))
    mem = [r for r in recs if r.get("event") == "device_memory"]
    if mem:   # what the device held after the first step; zero2: the gradients mapped at most
        out.update(used_bytes=mem[0]["used_bytes"], grad_peak_bytes=mem[0].get("grad_peak_bytes"))
except Exception as e:   # a failed run is a row that says so
    out["error"] = repr(e)
print(json.dumps(out))
PY
    done
done
python3 - "$res" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("%-8s %5s %14s %10s %16s %16s" % ("strategy", "GPUs", "rate", "efficiency", "optimizer bytes",
                                        "gradient bytes"))
for r in rows:
    if "rate" not in r:
        print("%-8s %5d   failed (exit %d): %s" % (r["strategy"], r["gpus"], r["rc"], r.get("error", "")))
        continue
    one = [x for x in rows if x["strategy"] == r["strategy"] and x["gpus"] == 1 and "rate" in x]
    eff = r["rate"] / (r["gpus"] * one[0]["rate"]) if one else float("nan")
    r["efficiency"] = eff
    grads = r.get("grad_peak_bytes") or r.get("grad_bytes") or 0   # zero2: mapped at most
    print("%-8s %5d %14.1f %10.3f %16d %16d   (%s, batch %d a rank)" % (r["strategy"], r["gpus"], r["rate"],
          eff, r["optimizer_bytes"] or 0, grads, r["unit"], r["batch_per_rank"]))
PY
