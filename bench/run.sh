#!/usr/bin/env bash
# make bench: trainc vs PyTorch on the CPU, same specs, same batch size, one run.
set -eu
cd "$(dirname "$0")/.."
${PYTHON:-/usr/bin/python3} bench/bench.py "$@"
bash bench/recompute.sh
