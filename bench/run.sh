#!/usr/bin/env bash
# make bench: trainc vs PyTorch on the CPU, same specs, same batch size, one run
# (MLP and CNN: bench.py; gpt_char: gpt_cpu.py), then gpt_char per recompute policy.
set -eu
cd "$(dirname "$0")/.."
${PYTHON:-/usr/bin/python3} bench/bench.py "$@"
${PYTHON:-/usr/bin/python3} bench/gpt_cpu.py
bash bench/recompute.sh
