#!/usr/bin/env bash
# What a --sample draw costs with --top-k and --top-p (bench/sample_draw.c), for
# runtime/sampling.c as it is and as it was at commit BASE (default 7111768: every id
# sorted), alternating, ROUNDS rounds (default 3). Same picks: the same draws.
#   bash bench/sample_draw.sh [BASE] [ROUNDS]
set -eu
cd "$(dirname "$0")/.."
base=${1:-7111768}; rounds=${2:-3}
d=build/bench/sample_draw
mkdir -p "$d"
git show "$base:runtime/sampling.c" > "$d/sampling_base.c"
cp runtime/sampling.h "$d/sampling.h"
for v in base now; do
    src=runtime/sampling.c; [ $v = base ] && src=$d/sampling_base.c
    cc -std=gnu11 -O2 -ffp-contract=off -fno-math-errno -I"$d" -Iruntime bench/sample_draw.c "$src" \
        runtime/rng.c runtime/util.c -lm -o "$d/sample_draw_$v"
done
for r in $(seq "$rounds"); do
    for v in base now; do
        for kp in "0 1" "50 1" "0 0.9" "50 0.95"; do
            # shellcheck disable=SC2086
            echo "{\"round\":$r,\"sampling\":\"$v\",\"result\":$("$d/sample_draw_$v" $kp)}"
        done
    done
done
