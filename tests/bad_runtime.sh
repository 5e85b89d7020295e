#!/usr/bin/env bash
# Bad input met at run time (data files, options, weights): exit 1, a message that
# names the place, and no output folder.
set -u
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=$(pwd)/build/tests/bad_runtime
rm -rf "$d"; mkdir -p "$d"
"$TRAINC" build specs/mlp_fashion.json -o "$d/trainer" || exit 1
$PY - "$d" <<'PY'
import numpy as np, sys, struct, json
d = sys.argv[1]
np.save(f"{d}/x_f32.npy", np.zeros((10, 1, 28, 28), np.float32))
np.save(f"{d}/x_shape.npy", np.zeros((10, 28, 28), np.uint8))
np.save(f"{d}/x_ok.npy", np.zeros((10, 1, 28, 28), np.uint8))
np.save(f"{d}/y_ok.npy", np.zeros((10,), np.int32))
np.save(f"{d}/y_big.npy", np.full((10,), 12, np.int32))
np.save(f"{d}/y_short.npy", np.zeros((9,), np.int32))
np.save(f"{d}/x_be.npy", np.zeros((10, 1, 28, 28), ">f4"))
open(f"{d}/x_trunc.npy", "wb").write(open(f"{d}/x_ok.npy", "rb").read()[:500])
open(f"{d}/x_magic.npy", "wb").write(b"NOTNUMPY" + bytes(100))
h = json.dumps({"1.weight": {"dtype": "F32", "shape": [3, 3], "data_offsets": [0, 36]}}).encode()
open(f"{d}/w_shape.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + bytes(36))
open(f"{d}/w_trunc.safetensors", "wb").write(struct.pack("<Q", 10 ** 9) + b"{}")
PY
pass=0; fail=0
t() {   # t NAME EXPECTED_SUBSTRING ARGS...
    local name=$1 want=$2; shift 2
    local out="$d/out_$name"
    "$d/trainer" --out "$out" --quiet "$@" >"$d/$name.stdout" 2>"$d/$name.stderr"
    local rc=$?
    if [ $rc -ne 1 ]; then echo "FAIL $name: exit $rc, expected 1"; cat "$d/$name.stderr"; fail=$((fail+1)); return; fi
    if ! grep -qF -- "$want" "$d/$name.stderr"; then echo "FAIL $name: stderr lacks '$want':"; cat "$d/$name.stderr"; fail=$((fail+1)); return; fi
    if [ -e "$out" ]; then echo "FAIL $name: output folder was created"; fail=$((fail+1)); return; fi
    echo "ok   $name"; pass=$((pass+1))
}
X="--set data.train.y=$d/y_ok.npy --set data.val=null"
t missing_file      "nope.npy"            --set data.train.x=$d/nope.npy $X
t npy_dtype         "x_f32.npy"           --set data.train.x=$d/x_f32.npy $X
t npy_shape         "x_shape.npy"         --set data.train.x=$d/x_shape.npy $X
t npy_truncated     "x_trunc.npy"         --set data.train.x=$d/x_trunc.npy $X
t npy_magic         "x_magic.npy"         --set data.train.x=$d/x_magic.npy $X
t npy_big_endian    ">f4"                 --set data.train.x=$d/x_be.npy $X
t label_range       "y_big.npy"           --set data.train.x=$d/x_ok.npy --set data.train.y=$d/y_big.npy --set data.val=null
t row_mismatch      "y_short.npy"         --set data.train.x=$d/x_ok.npy --set data.train.y=$d/y_short.npy --set data.val=null
t batch_too_big     "batch_size"          --set data.train.x=$d/x_ok.npy $X
t set_unknown_key   "did you mean 'batch_size'" --set batchsize=3
t set_bad_value     "batch_size"          --set batch_size=-3
t set_bad_enum      "optimizer.type"      --set optimizer.type=adam
t set_no_equals     "KEY=VALUE"           --set batch_size
t unknown_option    "did you mean '--threads'" --thread 2
t bad_threads       "--threads"           --threads zero
t init_missing      "nope.safetensors"    --init $d/nope.safetensors
t init_shape        "1.weight"            --init $d/w_shape.safetensors
t init_truncated    "w_trunc.safetensors" --init $d/w_trunc.safetensors
t device_cuda       "CUDA"                --device cuda
t resume_absent     "no complete checkpoint" --resume $d
echo "bad-runtime: $pass passed, $fail failed"
[ $fail -eq 0 ]
