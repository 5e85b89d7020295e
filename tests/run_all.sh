#!/usr/bin/env bash
# The whole test suite (`make test`). Each check prints "ok NAME" or "FAIL NAME";
# the last line is "N passed, M failed" and the exit status is nonzero on failure.
set -u
cd "$(dirname "$0")/.."
export TRAINC=${TRAINC:-build/trainc}
export PYTHON=${PYTHON:-/usr/bin/python3}
T=build/tests
mkdir -p "$T"
pass=0; fail=0; failed=()

check() {   # check NAME COMMAND...: runs COMMAND, logs to build/tests/NAME.log
    local name=$1; shift
    local log="$T/${name//\//_}.log"
    local t0=$SECONDS
    if "$@" >"$log" 2>&1; then
        pass=$((pass + 1)); echo "ok   $name ($((SECONDS - t0)) s)"
    else
        fail=$((fail + 1)); failed+=("$name"); echo "FAIL $name ($((SECONDS - t0)) s); last lines of $log:"
        tail -n 15 "$log" | sed 's/^/    /'
    fi
}

SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
UCC="cc -std=gnu11 -O1 -g $SAN -Iruntime -Icompiler"

# unit tests of the runtime, under AddressSanitizer and UBSan
check unit/build_data     $UCC tests/unit/test_data.c runtime/data.c runtime/rng.c runtime/init.c runtime/kernels.c runtime/util.c -lopenblas -lpthread -lm -o $T/test_data
check unit/data           $T/test_data
check unit/build_tokens   $UCC tests/unit/test_tokens.c runtime/data.c runtime/rng.c runtime/util.c -lpthread -lm -o $T/test_tokens
check unit/tokens         $T/test_tokens
check unit/build_io       $UCC tests/unit/test_io.c runtime/safetensors.c runtime/metrics.c runtime/util.c -lcjson -lm -o $T/test_io
check unit/io             $T/test_io
check unit/build_half     $UCC tests/unit/test_half.c -lm -o $T/test_half
check unit/half           $T/test_half
check unit/build_kernels  $UCC tests/unit/test_kernels.c runtime/kernels.c runtime/util.c -lopenblas -lpthread -lm -o $T/test_kernels
check unit/kernels        $T/test_kernels
check unit/build_attention $UCC tests/unit/test_attention.c runtime/attention.c runtime/kernels.c runtime/util.c -lopenblas -lpthread -lm -o $T/test_attention
check unit/attention      $T/test_attention
check unit/build_config   $UCC tests/unit/test_spec.c runtime/config.c runtime/util.c -lm -o $T/test_spec
check unit/config         $T/test_spec
check unit/build_es       $UCC tests/unit/test_earlystop.c runtime/earlystop.c runtime/config.c runtime/util.c -lm -o $T/test_es
check unit/earlystop      $T/test_es
check unit/build_lrfind   $UCC tests/unit/test_lrfind.c runtime/lrfind.c runtime/metrics.c runtime/util.c -lcjson -lm -o $T/test_lrfind
check unit/lrfind         $T/test_lrfind

# the distributed layer and the DistributedSampler, with mpirun (1-3 ranks, a dead peer)
check dist                bash tests/dist.sh

# the parser and checker under sanitizers, on the bad-input corpus
check asan/build          make -s B=build/asan CFLAGS="-O1 -g $SAN" build/asan/trainc
# (leak checking off: the compiler exits on the first error without freeing, by design)
check bad/specs           env TRAINC=build/asan/trainc ASAN_OPTIONS=detect_leaks=0 bash tests/bad_input.sh
check bad/runtime         bash tests/bad_runtime.sh
check cli                 bash tests/cli.sh
# the same with the trainer and its runtime under the sanitizers (sanitizer exit code 86)
check asan/runtime        env TRAINC=build/asan/trainc TRAINC_CFLAGS="$SAN" ASAN_OPTIONS=detect_leaks=0:exitcode=86 UBSAN_OPTIONS=exitcode=86 bash tests/bad_runtime.sh
check data/text           bash tests/data_text.sh
check data/fashion        bash tests/data_fashion.sh

# compiler output
check golden              bash tests/golden.sh
check verify              bash tests/verify.sh
check nvrtc               bash tests/nvrtc.sh
check nvrtc_templates     bash tests/nvrtc_templates.sh
check gpu_emu             bash tests/gpu_emu.sh
check cuda_host           bash tests/cuda_host.sh
check fake_gpu            bash tests/fake_gpu.sh
check fake_ddp            bash tests/fake_ddp.sh
check fake_gpu/random     $PYTHON tests/random_models.py 24 7 --fake-gpu=24
check fake_gpu/odd        $PYTHON tests/random_models.py 6 3 --fake-gpu=6 --odd
check gradcheck           bash tests/gradcheck.sh
check vocab_pad           bash tests/vocab_pad.sh

# whole runs
check jit_vs_build        bash tests/jit_vs_build.sh
check resume              bash tests/resume.sh
check robust              bash tests/robust.sh
check control             bash tests/control.sh
check int_dtypes          bash tests/int_dtypes.sh
check lr_find             bash tests/lr_find.sh
check profile             bash tests/profile.sh
check scaler              bash tests/scaler.sh
check recompute           bash tests/recompute.sh
check dropout_keys        bash tests/dropout_keys.sh
check init_gpt2           bash tests/init_gpt2.sh
check ddp                 bash tests/ddp.sh
check zero                bash tests/zero.sh
check parity/mlp_adamw    $PYTHON tests/torch_parity.py mlp adamw
check parity/mlp_sgd      $PYTHON tests/torch_parity.py mlp sgd
check parity/cnn_adamw    $PYTHON tests/torch_parity.py cnn adamw
check parity/cnn_sgd      $PYTHON tests/torch_parity.py cnn sgd
check parity/gpt_char     $PYTHON tests/gpt_parity.py
check parity/random       env RANDOM_MODELS_ASAN=build/asan/trainc $PYTHON tests/random_models.py 90 1
check learn/mlp           bash tests/learn.sh mlp_fashion 0.85
check learn/cnn           bash tests/learn.sh cnn_fashion 0.88
check learn/gpt_char      bash tests/gpt_learn.sh

echo
[ $fail -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
