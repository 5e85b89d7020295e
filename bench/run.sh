#!/usr/bin/env bash
# make bench: trainc vs PyTorch on the CPU, same specs, same batch size, one run
# (MLP and CNN: bench.py; gpt_char: gpt_cpu.py; resnet_fashion_cpu and llama_char:
# cpu_models.py), then gpt_char per recompute policy.
# PyTorch's matrix products run on the system's OpenBLAS too: where trainc chose
# OpenBLAS's kernels for this CPU (runtime/blas.c; --version says "OpenBLAS took ..."),
# every process here gets the same core through OPENBLAS_CORETYPE.
set -eu
cd "$(dirname "$0")/.."
core=$(build/trainc --version | sed -n 's/^CPU GEMMs: OpenBLAS \([^ ]*\) (OpenBLAS took .*/\1/p')
if [ -n "$core" ]; then
    export OPENBLAS_CORETYPE=$core
    echo "OpenBLAS core for every process: $core (chosen by trainc; OpenBLAS's own choice lacks AVX2)"
fi
# llama_char's PyTorch side is transformers' LlamaForCausalLM: the venv make deps makes
[ -x .venv/hf/bin/python ] && export HF_PYTHON=${HF_PYTHON:-.venv/hf/bin/python}
${PYTHON:-/usr/bin/python3} bench/bench.py "$@"
${PYTHON:-/usr/bin/python3} bench/gpt_cpu.py
${PYTHON:-/usr/bin/python3} bench/cpu_models.py
bash bench/recompute.sh
