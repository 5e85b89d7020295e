#!/usr/bin/env bash
# specs/dcgan_fashion.json, a convolutional GAN, trained briefly on the CPU
# (examples/dcgan/README.md): the untrained generator's samples, a short training run
# with a sample grid, the grid again from the saved weights, and checks of what came
# out (examples/dcgan/check.py): the files, finite losses, and samples that resemble
# Fashion-MNIST more than the untrained generator's noise.
#
#   bash examples/dcgan/run.sh [OUT]      (OUT: runs/dcgan; from the repository root)
#
# STEPS (300) and BATCH (128, the spec's) set the run's length; SMOKE=1 makes it 30
# steps of 32 and checks only that the samples moved away from noise (under a minute).
# TRAINC (build/trainc) and PYTHON (/usr/bin/python3, with numpy) may be set. Exits
# nonzero when a check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-runs/dcgan}
TRAINC=${TRAINC:-build/trainc}
PYTHON=${PYTHON:-/usr/bin/python3}
SPEC=specs/dcgan_fashion.json
REAL=data/fashion/train_x.npy   # what the spec trains on
if [ "${SMOKE:-0}" = 1 ]; then
    STEPS=${STEPS:-30} BATCH=${BATCH:-32} LOG=10 CHECK=--smoke
else
    STEPS=${STEPS:-300} BATCH=${BATCH:-128} LOG=50 CHECK=
fi
rm -rf "$OUT/step0" "$OUT/run" "$OUT/eval"   # this script's, from an earlier run
mkdir -p "$OUT"

step() { printf '\n== %s\n' "$*"; }

[ -e "$REAL" ] || { step "Fashion-MNIST as .npy"; $TRAINC data fashion-mnist data/fashion; }

step "1. the untrained generator: 64 samples of the spec's initial weights"
$TRAINC run $SPEC --eval --sample 64 --out "$OUT/step0" --quiet

step "2. train $STEPS steps of $BATCH on the CPU, then 64 samples"
start=$(date +%s)
$TRAINC run $SPEC --out "$OUT/run" --set max_steps="$STEPS" --set batch_size="$BATCH" \
    --set log_every=$LOG --sample 64
echo "trained and sampled in $(($(date +%s) - start)) s"

step "3. the same samples from the saved weights alone"
# (at the run's batch size: the GEMMs' sums, so the last bits, depend on it)
$TRAINC run $SPEC --eval --init "$OUT/run/model.safetensors" --sample 64 --out "$OUT/eval" \
    --set batch_size="$BATCH" --quiet

step "4. checks"
$PYTHON examples/dcgan/check.py "$OUT" "$REAL" $CHECK
echo "ok: the grid is $OUT/run/samples.png, the losses $OUT/run/loss.svg"
