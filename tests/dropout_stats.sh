#!/usr/bin/env bash
# Dropout's kept fraction, scale, evaluation and masks against PyTorch (tests/dropout_stats.py).
set -eu
cd "$(dirname "$0")/.."
exec ${PYTHON:-/usr/bin/python3} tests/dropout_stats.py
