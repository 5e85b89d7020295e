#!/usr/bin/env bash
# Where a training step's GPU time goes, by kernel, with Nsight Compute (on the GPU
# machine, after tests/gpu/pack.sh, with build/devpack.tar.xz copied there):
#
#   bash bench/gpu_profile.sh TRAINER BATCH [--set ...]     table under $OUT/profile.TRAINER.txt
#   PTAG=TAG bash bench/gpu_profile.sh ...                  under $OUT/profile.TRAINER.TAG.txt
#                                                           (one trainer twice, an env apart)
#
# TRAINER is one of the pack's trainers (gpt2_124m_none, mlp_fashion, ...). The first
# step is skipped (kernel cache, first-touch); ncu times every kernel of the next
# step (gpu__time_duration, clocks left alone) and the table sums them per kernel
# name. cuBLASLt's kernels appear under their own names.
#
#   DETAIL="NAME:SKIP ..." bash bench/gpu_profile.sh TRAINER BATCH
#
# then also profiles, for each NAME (a regular expression over kernel names), its
# launch SKIP + 1 in full detail (Nsight Compute's sections: speed of light, compute and
# memory workload, occupancy, warp states and stall reasons, the source lines where
# warps stall most): $OUT/detail.TRAINER.NAME.txt. SKIP passes over the first step's
# launches (GPT-2: 12 attention launches of each kind a step).
set -u
. bench/gpu_env.sh
T=$1 B=$2; shift 2
case $T in
gpt2*) gpt2_shards
    X=(--set "data.train.tokens=$D/data/gpt2/train_*.bin" --set data.val=null) ;;
gpt_char) X=(--set "data.train.tokens=$D/data/text/train_*.bin" --set data.val=null) ;;
wide_mlp*) wide_data
    X=(--set data.train.x=$D/data/wide/train_x.npy --set data.train.y=$D/data/wide/train_y.npy --set data.val=null) ;;
*) X=(--set data.train.x=$D/data/fashion/train_x.npy --set data.train.y=$D/data/fashion/train_y.npy --set data.val=null) ;;
esac
X+=(--set validate.every_steps=null --set validate.batches=null --set checkpoint=null --set log_every=1
    --set batch_size=$B --set max_steps=2 --device cuda --quiet)
# the first run fills the kernel cache and gives the number of launches in a step
"$S/$T" "${X[@]}" "$@" --out "$D/p0" >/dev/null 2>&1 || { echo "$T failed to run"; exit 1; }
ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
    "$S/$T" "${X[@]}" "$@" --out "$D/p1" > "$D/ncu.csv" 2>"$D/ncu.err"
python3 - "$D/ncu.csv" "$T" "$B" <<'PY' | tee "$OUT/profile.$T${PTAG:+.$PTAG}.txt"
import csv, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
h = rows[0]; rows = rows[1:]
ki, ni, vi = h.index("ID"), h.index("Kernel Name"), h.index("Metric Value")
ks = [(int(r[ki]), r[ni], float(r[vi].replace(",", ""))) for r in rows if r[vi].replace(",", "").replace(".", "").isdigit()]
# two steps: the second is what follows the first step's optimizer launch, up to and
# including its own (the first step has launches of its own: the 16-bit parameter
# copy, the kernel cache's first touches)
opt = [i for i, (_, n, _) in enumerate(ks) if n.startswith(("rt_adamw", "rt_sgd"))]
step = ks[opt[0] + 1:opt[1] + 1] if len(opt) >= 2 else ks[len(ks) // 2:]
tot = collections.defaultdict(float); cnt = collections.Counter()
for _, n, t in step:
    n = n.split("(")[0][:70]; tot[n] += t; cnt[n] += 1
all_ = sum(tot.values())
print(f"{sys.argv[2]} batch {sys.argv[3]}: {len(step)} kernels, {all_ / 1e6:.3f} ms of kernel time in a step")
for n, t in sorted(tot.items(), key=lambda x: -x[1]):
    print(f"{t / 1e6:9.3f} ms {100 * t / all_:5.1f}% {cnt[n]:4d}x  {n}")
PY
set -f   # (the names are regular expressions: no file-name expansion of [0-9])
for d in ${DETAIL:-}; do
    k=${d%:*} skip=${d##*:}
    f="$OUT/detail.$T.$(echo "$k" | tr -c 'a-zA-Z0-9_\n' '_').txt"
    ncu --clock-control none -k "regex:$k" --launch-skip "$skip" --launch-count 1 \
        --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
        --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
        --section SourceCounters "$S/$T" "${X[@]}" "$@" --out "$D/p2" > "$f" 2>&1
    echo "detail $k (launch $((skip + 1))): $(grep -c . "$f") lines in $(basename "$f")"
done
