#!/usr/bin/env bash
# Finite-difference gradient check of every op and loss (tests/gradcheck.py).
set -eu
cd "$(dirname "$0")/.."
exec ${PYTHON:-/usr/bin/python3} tests/gradcheck.py
