#!/usr/bin/env bash
# `trainc run`'s CPU kernels rebuilt by the C compiler (compiler/jit_cc.c): a run that
# switches to them part-way, a run that loads them from the cache before its first
# step, and a run whose compiler fails all end with the weights of libtcc's kernels
# alone, bit for bit; a run that ends before its compile leaves nothing behind.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
out=build/tests/jit_cc
rm -rf "$out"; mkdir -p "$out"
export TRAINC_CACHE_DIR=$PWD/$out/cache
spec=specs/resnet_fashion_cpu.json
sets=(--set max_steps=120 --set log_every=1 --set data.val=null --set checkpoint=null
      --set loader.augment=null --threads 2 --quiet)
run() {   # NAME [ENV=VALUE ...]: trainc run with those variables, stderr kept
    local name=$1; shift
    env "$@" "$TRAINC" run "$spec" --out "$out/$name" "${sets[@]}" 2> "$out/$name.err"
}
same() {
    cmp "$out/tcc/model.safetensors" "$out/$1/model.safetensors"
    echo "ok $1: the same weights as libtcc's kernels"
}

run tcc TRAINC_JIT_CC=0
ls "$out/cache/cpu" 2> /dev/null && { echo "FAIL: TRAINC_JIT_CC=0 compiled"; exit 1; }

run swap TRAINC_JIT_CC=1
grep -q "the CPU kernels now run as the C compiler built them" "$out/swap.err" || {
    cat "$out/swap.err"; echo "FAIL: the run never switched to the compiled kernels"; exit 1; }
same swap
ls "$out"/cache/cpu/*.so > /dev/null

run cached TRAINC_JIT_CC=1
grep -q "the CPU kernels run as the C compiler built them (.*/cache/cpu/.*\.so)" \
    "$out/cached.err" || { cat "$out/cached.err"; echo "FAIL: the cache was not used"; exit 1; }
same cached

# a compiler that fails: libtcc's kernels throughout, nothing in the cache
export TRAINC_CACHE_DIR=$PWD/$out/cache2
run failing TRAINC_JIT_CC=1 CC=false
grep -q "C compiler built them" "$out/failing.err" && { echo "FAIL: switched"; exit 1; }
same failing
[ -z "$(ls -A "$out/cache2/cpu")" ] || { ls -l "$out/cache2/cpu"; echo "FAIL: files left"; exit 1; }

# a run over before its compile: the compiler killed, no library, no temporary files
export TRAINC_CACHE_DIR=$PWD/$out/cache3
TRAINC_JIT_CC=1 "$TRAINC" run "$spec" --out "$out/short" --set max_steps=1 --quiet \
    --set data.val=null --set checkpoint=null 2> "$out/short.err"
sleep 1
if pgrep -f "$out/cache3" > /dev/null; then echo "FAIL: the compiler outlived the run"; exit 1; fi
[ -z "$(ls -A "$out/cache3/cpu" 2> /dev/null)" ] || {
    ls -l "$out/cache3/cpu"; echo "FAIL: files left"; exit 1; }
echo "ok short: nothing left behind"
