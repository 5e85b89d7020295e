#!/usr/bin/env bash
# trainc's BPE tokenizer against Hugging Face `tokenizers`, single-threaded, on the
# same ~MB megabytes of text (bench/tokenizer.py says how); record the figures in
# bench/RESULTS.md with the date, the commit and this command.
#   usage: HF_PYTHON=.venv/hf/bin/python bench/tokenizer.sh [MB [REPS]]
set -eu
cd "$(dirname "$0")/.."
HF_PYTHON=${HF_PYTHON:-.venv/hf/bin/python}
export TRAINC=${TRAINC:-build/trainc}
exec "$HF_PYTHON" bench/tokenizer.py "$@"
