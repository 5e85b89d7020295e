#!/usr/bin/env bash
# Bad input met at run time (data files, options, weights): exit 1, a message that
# names the place, and no output folder. With TRAINC=build/asan/trainc and
# TRAINC_CFLAGS=<the sanitizer flags> the trainer is built with them too (tests/run_all.sh
# does both), and a sanitizer report is a failure.
set -u
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
# (a folder of its own under the sanitizers: run_all.sh runs both at once)
d=$(pwd)/build/tests/bad_runtime${TRAINC_CFLAGS:+_sanitized}
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
np.save(f"{d}/x_empty.npy", np.zeros((0, 1, 28, 28), np.uint8))
np.save(f"{d}/y_empty.npy", np.zeros((0,), np.int32))
open(f"{d}/x_trunc.npy", "wb").write(open(f"{d}/x_ok.npy", "rb").read()[:500])
open(f"{d}/x_magic.npy", "wb").write(b"NOTNUMPY" + bytes(100))
h = json.dumps({"1.weight": {"dtype": "F32", "shape": [3, 3], "data_offsets": [0, 36]}}).encode()
open(f"{d}/w_shape.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + bytes(36))
open(f"{d}/w_trunc.safetensors", "wb").write(struct.pack("<Q", 10 ** 9) + b"{}")
PY
pass=0; fail=0
t() {   # t NAME EXPECTED_SUBSTRING ARGS... (the trainer: $TR, else mlp_fashion's)
    local name=$1 want=$2; shift 2
    local out="$d/out_$name"
    ${TR:-"$d/trainer"} --out "$out" --quiet "$@" >"$d/$name.stdout" 2>"$d/$name.stderr"
    local rc=$?
    if [ $rc -ne 1 ]; then echo "FAIL $name: exit $rc, expected 1"; cat "$d/$name.stderr"; fail=$((fail+1)); return; fi
    if ! grep -qF -- "$want" "$d/$name.stderr"; then echo "FAIL $name: stderr lacks '$want':"; cat "$d/$name.stderr"; fail=$((fail+1)); return; fi
    # SPEC.md section 6: "FILE: error: ..." where the place is a file
    case $want in *.npy|*.safetensors|*.bin)
        if ! grep -qE "^[^ ]*${want//./\\.}: error: " "$d/$name.stderr"; then echo "FAIL $name: no line '...$want: error: ...':"; cat "$d/$name.stderr"; fail=$((fail+1)); return; fi;;
    esac
    if [ -e "$out" ]; then echo "FAIL $name: output folder was created"; fail=$((fail+1)); return; fi
    if grep -qE 'runtime error:|Sanitizer' "$d/$name.stderr"; then echo "FAIL $name: sanitizer report"; cat "$d/$name.stderr"; fail=$((fail+1)); return; fi
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
t batch_too_big     "specs/mlp_fashion.json: error: \$.train.batch_size: the training data has 10 rows" --set data.train.x=$d/x_ok.npy $X
# a rule between fields broken by --set names its place as a spec value's would (SPEC.md
# section 6: FILE: error: $.train.KEY: MESSAGE), in a built trainer and in trainc run
t set_rule_place    "specs/mlp_fashion.json: error: \$.train.schedule.gamma: schedule.every_steps and schedule.gamma apply to schedule.type step only" \
                    --set schedule.gamma=0.5
TR="$TRAINC run specs/mlp_fashion.json"
t run_rule_place    "specs/mlp_fashion.json: error: \$.train.recompute: recompute auto needs memory_budget_mb" \
                    --set recompute=auto
unset TR
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
t empty_dataset     "x_empty.npy"         --set data.train.x=$d/x_empty.npy --set data.train.y=$d/y_empty.npy --set data.val=null

# ids an embedding cannot look up (vocab 8, below the 16 classes of the targets) and
# labels past the classes of a u8 target: refused when the files are opened (train or
# val, npy or token shards), naming file, row and element, before anything is written,
# instead of failing in the embedding's kernel (exit 2) after some steps
cat >"$d/emb.json" <<'JSON'
{"trainc": 1, "model": {"name": "emb", "inputs": {"x": {"shape": [4], "dtype": "i32"},
  "y": {"shape": [4], "dtype": "i32", "classes": 16}},
 "layers": [{"op": "embedding", "vocab": 8, "dim": 4, "input": "x"}, {"op": "linear", "out": 16}],
 "loss": {"op": "cross_entropy", "target": "y"}},
 "train": {"data": {"train": {"x": "e_x.npy", "y": "e_y.npy"}, "val": {"x": "e_x.npy", "y": "e_y.npy"}},
  "batch_size": 2, "epochs": 1, "log_every": 1, "loader": {"shuffle": false}}}
JSON
# the same with u16 ids and u8 labels (read as i32 by the kernels)
sed 's/"emb"/"emb16"/; s/"i32"},/"u16"},/; s/"dtype": "i32", "classes"/"dtype": "u8", "classes"/; s/e_\([xy]\).npy/e16_\1.npy/g' \
    "$d/emb.json" >"$d/emb16.json"
cat >"$d/tok.json" <<'JSON'
{"trainc": 1, "model": {"name": "tok", "inputs": {"x": {"shape": [4], "dtype": "i32"},
  "y": {"shape": [4], "dtype": "i32", "classes": 16}},
 "layers": [{"op": "embedding", "vocab": 8, "dim": 4, "input": "x"}, {"op": "linear", "out": 16}],
 "loss": {"op": "cross_entropy", "target": "y"}},
 "train": {"data": {"train": {"tokens": "t_ok.bin"}, "val": {"tokens": "t_ok.bin"}}, "batch_size": 1, "epochs": 1}}
JSON
cat >"$d/reg.json" <<'JSON'
{"trainc": 1, "model": {"name": "reg", "inputs": {"x": {"shape": [3], "dtype": "f32"}, "y": {"shape": [2], "dtype": "f32"}},
 "layers": [{"op": "linear", "out": 2}], "loss": {"op": "mse", "target": "y"}},
 "train": {"data": {"train": {"x": "r_x.npy", "y": "r_y.npy"}, "val": {"x": "r_x.npy", "y": "r_y.npy"}},
  "batch_size": 2, "epochs": 2, "early_stopping": {"monitor": "val_loss"}}}
JSON
$PY - "$d" <<'PY'
import numpy as np, sys
d = sys.argv[1]
x = np.arange(40).reshape(10, 4) % 8
np.save(f"{d}/e_x.npy", x.astype(np.int32))
np.save(f"{d}/e_y.npy", (x * 2).astype(np.int32))
np.save(f"{d}/e16_x.npy", x.astype(np.uint16))
np.save(f"{d}/e16_y.npy", (x * 2).astype(np.uint8))
x[5, 1] = 8
np.save(f"{d}/e16_x8.npy", x.astype(np.uint16))
x[5, 1] = 9                        # row 5, element 1: past vocab 8, within the 16 classes
np.save(f"{d}/e_x9.npy", x.astype(np.int32))
x[5, 1] = -1
np.save(f"{d}/e_xneg.npy", x.astype(np.int32))
y = (np.arange(40).reshape(10, 4) * 2 % 16).astype(np.uint8)
y[9, 3] = 16
np.save(f"{d}/e_y16.npy", y)
def shard(name, tok):
    h = np.zeros(256, np.int32)
    h[:3] = [20240520, 1, len(tok)]
    open(f"{d}/{name}", "wb").write(h.tobytes() + np.array(tok, np.uint16).tobytes())
shard("t_ok.bin", [i % 8 for i in range(41)])
shard("t_bad.bin", [i % 8 for i in range(20)] + [15] + [1] * 20)   # 15: a class, not an id
np.save(f"{d}/r_x.npy", np.ones((6, 3), np.float32))
np.save(f"{d}/r_y.npy", np.ones((6, 2), np.float32))
PY
for m in emb emb16 tok reg; do
    "$TRAINC" build "$d/$m.json" -o "$d/$m" >"$d/build_$m.log" 2>&1 || { echo "FAIL: build $m"; cat "$d/build_$m.log"; fail=$((fail+1)); }
done
TR=$d/emb
t emb_id_range      "e_x9.npy: error: \$.train.data.train.x: row 5, element 1: id 9 is outside [0, 8) (model input 'x' feeds an embedding with vocab 8)" \
                    --set data.train.x=$d/e_x9.npy
t emb_id_negative   "e_xneg.npy: error: \$.train.data.train.x: row 5, element 1: id -1 is outside [0, 8)" --set data.train.x=$d/e_xneg.npy
t emb_id_range_val  "e_x9.npy: error: \$.train.data.val.x: row 5, element 1: id 9" --set data.val.x=$d/e_x9.npy
TR=$d/emb16
t u16_id_range      "e16_x8.npy: error: \$.train.data.train.x: row 5, element 1: id 8 is outside [0, 8)" --set data.train.x=$d/e16_x8.npy
t u8_label_range    "e_y16.npy: error: \$.train.data.val.y: row 9, element 3: label 16 is outside [0, 16)" --set data.val.y=$d/e_y16.npy
TR=$d/tok
t tok_id_range      "t_bad.bin: error: token 15 at position 20 is outside the vocabulary [0, 8) (model input 'x' feeds an embedding with vocab 8)" \
                    --set data.train.tokens=$d/t_bad.bin
t tok_id_range_val  "t_bad.bin: error: token 15 at position 20" --set data.val.tokens=$d/t_bad.bin
# a shard's largest token is remembered in the cache folder by the file's identity
# (device, inode, size, mtime, ctime): read once, not at every start; a shard
# rewritten in place (same inode, same size) is read again and its bad token found;
# a damaged entry is a miss
export TRAINC_CACHE_DIR=$d/cache
rm -rf "$d/cache"; cp "$d/t_ok.bin" "$d/t_cache.bin"
"$d/tok" --out "$d/out_cache_ok" --quiet --set data.train.tokens=$d/t_cache.bin --set data.val=null \
    --set max_steps=1 >/dev/null 2>&1 && [ "$(cat "$d"/cache/shards/* | grep -c " 7$")" = 1 ] ||
    { echo "FAIL shard cache: no entry after a run"; ls -R "$d/cache"; fail=$((fail+1)); }
$PY -c "
import sys
f = open(sys.argv[1], 'r+b'); f.seek(1024 + 2 * 20); f.write((15).to_bytes(2, 'little')); f.close()" "$d/t_cache.bin"
t tok_cache_rewritten "t_cache.bin: error: token 15 at position 20" --set data.train.tokens=$d/t_cache.bin
for e in "$d"/cache/shards/*; do echo "trainc-shard-max 1 garbage" > "$e"; done
t tok_cache_damaged "t_cache.bin: error: token 15 at position 20" --set data.train.tokens=$d/t_cache.bin
unset TRAINC_CACHE_DIR
# the rules between model and training spec that trainc check applies to the spec file
# hold after --set too: val_acc monitored for an mse model (it has no accuracy), in a
# built trainer and in trainc run
TR=$d/reg
t set_val_acc_mse   "early_stopping.monitor val_acc needs a cross_entropy or dpo loss" \
                    --set early_stopping.monitor=val_acc --set early_stopping.mode=max
TR="$TRAINC run $d/reg.json"
t run_val_acc_mse   "early_stopping.monitor val_acc needs a cross_entropy or dpo loss" --set early_stopping.monitor=val_acc
# and a batch that the plan recompute auto chose for memory_budget_mb no longer fits
# (device cpu: no GPU workspace in the count)
# (trainc check: "6 MiB does not fit with any recomputation: batch_size 1024 needs
# 10.3 MiB", rounded up)
"$TRAINC" build specs/mlp_fashion.json --set device=cpu --set recompute=auto --set memory_budget_mb=6 -o "$d/auto" \
    >"$d/build_auto.log" 2>&1 || { echo "FAIL: build auto"; cat "$d/build_auto.log"; fail=$((fail+1)); }
TR=$d/auto
t set_batch_over_budget "memory_budget_mb: 6 MiB does not fit this trainer's plan (recompute auto chose it when compiling) at batch_size 1024: it needs 10.3 MiB" \
                    --set batch_size=1024
# a smaller budget than the plan needs, given to the built trainer; and another policy
# (compiled in: refused with the build command that makes one)
t set_budget_under_plan "memory_budget_mb: 4 MiB does not fit this trainer's plan (recompute auto chose it when compiling) at batch_size 64" \
                    --set memory_budget_mb=4
t set_policy_built  "--set recompute=full: this trainer's recomputation plan (auto) is compiled into it; rebuild it with trainc build ... --set recompute=full" \
                    --set recompute=full
unset TR
t set_policy_none   "--set recompute=selective: this trainer's recomputation plan (none) is compiled into it" \
                    --set recompute=selective
t set_freeze_built  "--set freeze=1.*: which parameters this trainer freezes (none) is compiled into it; rebuild it with trainc build ... --set freeze=..." \
                    --set 'freeze=1.*'
t set_lora_built    "--set lora...: this trainer's LoRA adapters (none) are compiled into it; rebuild it with trainc build ... --set lora.rank=..." \
                    --set lora.rank=4
# a budget the auto plan fits, and one given to a trainer of another policy (which, as
# with trainc run, does not read it): they train
for a in "auto --set memory_budget_mb=7" "trainer --set memory_budget_mb=1"; do
    set -- $a
    "$d/$1" "${@:2}" --set max_steps=2 --out "$d/budget_$1" --quiet >"$d/budget_$1.log" 2>&1 &&
        echo "ok   $1 $3: trains" && pass=$((pass+1)) || { echo "FAIL $1 $3"; cat "$d/budget_$1.log"; fail=$((fail+1)); }
done
# the good files of these models train (the bad ones above differ in one value)
for m in emb emb16 tok; do
    "$d/$m" --out "$d/good_$m" --quiet >"$d/good_$m.log" 2>&1 && echo "ok   good_$m" && pass=$((pass+1)) ||
        { echo "FAIL good_$m"; cat "$d/good_$m.log"; fail=$((fail+1)); }
done

# weights with a tensor missing or one too many: from a real model.safetensors
"$d/trainer" --out "$d/good" --quiet --set max_steps=1 --set data.val=null >/dev/null 2>&1 || { echo "FAIL: a 1-step run"; fail=$((fail+1)); }
$PY - "$d" <<'PY'
import json, struct, sys
d = sys.argv[1]
b = open(f"{d}/good/model.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); data = b[8 + n:]
def put(name, hdr, extra=b""):
    t = json.dumps(hdr).encode()
    open(f"{d}/{name}", "wb").write(struct.pack("<Q", len(t)) + t + data + extra)
names = sorted(k for k in h if k != "__metadata__")
put("w_missing.safetensors", {k: v for k, v in h.items() if k != names[-1]})
ex = dict(h); ex["extra.weight"] = {"dtype": "F32", "shape": [1], "data_offsets": [len(data), len(data) + 4]}
put("w_extra.safetensors", ex, bytes(4))
open(f"{d}/missing_name", "w").write(names[-1])
PY
t init_missing_tensor "$(cat "$d/missing_name")" --init $d/w_missing.safetensors
t init_extra_tensor "extra.weight"        --init $d/w_extra.safetensors

# an output folder that cannot be created (its parent is a file): exit 1, nothing made
echo x > "$d/afile"
"$d/trainer" --out "$d/afile/run" --quiet --set max_steps=1 >/dev/null 2>"$d/unwritable.stderr"
rc=$?
if [ $rc -eq 1 ] && grep -qF "cannot create the output folder $d/afile/run" "$d/unwritable.stderr" &&
   [ -f "$d/afile" ]; then echo "ok   unwritable_out"; pass=$((pass+1))
else echo "FAIL unwritable_out: exit $rc"; cat "$d/unwritable.stderr"; fail=$((fail+1)); fi

# A full disk while writing a checkpoint (simulated with a file size limit: writes past
# 300 KiB fail with EFBIG, as with ENOSPC): exit 2 with a message, no half-written
# checkpoint folder, and the last complete checkpoint of the run stays usable.
o="$d/full"; rm -rf "$o"
"$d/trainer" --out "$o" --quiet --set max_steps=10 --set checkpoint.every_steps=10 --set data.val=null >/dev/null 2>&1
(ulimit -f 300; "$d/trainer" --out "$o" --resume "$o" --quiet --set max_steps=30 \
    --set checkpoint.every_steps=10 --set data.val=null >/dev/null 2>"$d/full.stderr")
rc=$?
left=$(find "$o/checkpoints" -name '.tmp*' | wc -l)
# and a crash between writing and renaming a newer one leaves a stale temporary folder
# (here made by hand): --resume must skip it
mkdir -p "$o/checkpoints/.tmp_step_00000025" && echo '{"trainc_checkpoint": 1, "lo' > "$o/checkpoints/.tmp_step_00000025/state.json"
if [ $rc -eq 2 ] && grep -qF "cannot write a checkpoint in $o/checkpoints" "$d/full.stderr" &&
   grep -qF "disk full" "$d/full.stderr" && [ "$left" = 0 ] &&
   [ -d "$o/checkpoints/step_00000010" ] &&
   "$d/trainer" --out "$o" --resume "$o" --quiet --set max_steps=30 --set checkpoint.every_steps=10 \
       --set data.val=null >/dev/null 2>"$d/full2.stderr" && [ -f "$o/model.safetensors" ] &&
   grep -q "step_00000010 from step 10" "$d/full2.stderr"; then
    echo "ok   checkpoint_disk_full"; pass=$((pass+1))
else echo "FAIL checkpoint_disk_full: exit $rc, $left temporary folders left"; cat "$d/full.stderr"; fail=$((fail+1)); fi

# A full disk while writing metrics.jsonl, with no checkpoints (a 4 KiB file size limit):
# exit 2, and the file ends with its last whole record, not half of the next one
o="$d/fullm"; rm -rf "$o"
(ulimit -f 4; "$d/trainer" --out "$o" --quiet --set max_steps=200 --set log_every=1 --set checkpoint=null \
    --set data.val=null >/dev/null 2>"$d/fullm.stderr")
rc=$?
if [ $rc -eq 2 ] && grep -qF "$o/metrics.jsonl: write failed" "$d/fullm.stderr" &&
   [ "$(tail -c 1 "$o/metrics.jsonl" | od -An -c | tr -d ' ')" = '\n' ] &&
   $PY -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]" "$o/metrics.jsonl"; then
    echo "ok   metrics_disk_full"; pass=$((pass+1))
else echo "FAIL metrics_disk_full: exit $rc"; cat "$d/fullm.stderr"; tail -c 80 "$o/metrics.jsonl"; fail=$((fail+1)); fi

# A damaged checkpoint (state.json's loop counters edited by hand or by a bad disk):
# --resume exits 1 naming the file and the field, and touches nothing in the run
# (metrics.jsonl and the checkpoints as they were), instead of starting the loader at
# batch -1, dividing by AdamW's bias correction at updates -1 or truncating
# metrics.jsonl to -1 bytes (each of these aborted, diverged or failed with exit 2).
o="$d/damaged"; rm -rf "$o"
"$d/trainer" --out "$o" --quiet --set max_steps=20 --set checkpoint.every_steps=10 --set data.val=null >/dev/null 2>&1
st="$o/checkpoints/step_00000020/state.json"
cp "$st" "$d/state.good"
damaged() {   # damaged KEY=VALUE MESSAGE: state.json's loop KEY set to VALUE; --resume exits
              # 1 saying MESSAGE, the run untouched, no sanitizer report
    local kv=$1 msg=$2 k=${1%=*} v=${1#*=}
    $PY - "$d/state.good" "$st" "$k" "$v" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); k, v = sys.argv[3], sys.argv[4]
s.pop("state_xxh64", None)   # edited by hand: unsealed, or the edit is taken for damage
if k in ("ranks", "trainc_checkpoint"):   # top-level fields
    s[k] = float(v)
else:
    s["loop"][k] = v if isinstance(s["loop"][k], str) else float(v)
json.dump(s, open(sys.argv[2], "w"))
PY
    local before after rc
    before=$(cat "$o/metrics.jsonl" "$st" | md5sum; ls "$o/checkpoints")
    "$d/trainer" --resume "$o" --quiet --set max_steps=30 --set checkpoint.every_steps=10 \
        --set data.val=null >/dev/null 2>"$d/damaged.stderr"
    rc=$?
    after=$(cat "$o/metrics.jsonl" "$st" | md5sum; ls "$o/checkpoints")
    if [ $rc -eq 1 ] && grep -qF "$msg" "$d/damaged.stderr" && [ "$before" = "$after" ] &&
       ! grep -qE 'runtime error:|Sanitizer' "$d/damaged.stderr"; then
        echo "ok   damaged_checkpoint $kv"; pass=$((pass+1))
    else echo "FAIL damaged_checkpoint $kv: exit $rc"; cat "$d/damaged.stderr"; fail=$((fail+1)); fi
}
for kv in step=-5 step=10 epoch=-1 epoch=21 batch=-1 updates=-1 updates=21 skipped=1 \
          last_val_step=21 best_step=-2 metrics_bytes=-1 es_wait=-1 loss_scale=0 elapsed=-1; do
    damaged "$kv" "$st: error: field '${kv%=*}' is"
done
# counters each within range but not together: a place in the epoch the step does not
# put a run at, updates that leave a step unaccounted for, a metrics.jsonl length that
# would cut a record in half
damaged batch=7 "epoch 0, batch 7 is not where step 20 puts"
damaged epoch=1 "epoch 1, batch 20 is not where step 20 puts"
damaged updates=19 "field 'skipped' is 0, expected the step less the updates"
damaged metrics_bytes=10 "metrics_bytes 10 does not end a record"
damaged ranks=0 "ranks 0 is not a number of ranks"
damaged trainc_checkpoint=2 "a checkpoint of another format (trainc_checkpoint is not 1)"
cp "$d/state.good" "$st"
if "$d/trainer" --resume "$o" --quiet --set max_steps=30 --set data.val=null >/dev/null 2>"$d/damaged.stderr"; then
    echo "ok   damaged_checkpoint mended: resumes"; pass=$((pass+1))
else echo "FAIL damaged_checkpoint: the mended checkpoint does not resume"; cat "$d/damaged.stderr"; fail=$((fail+1)); fi

# --resume of a run on a read-only file system (a bind mount made read-only, where this
# test may mount): exit 1 before anything changes, the hint names --out (it exited 2 with
# "cannot truncate metrics.jsonl" alone)
o="$d/ro_run"; rm -rf "$o" "$d/ro_mnt"; mkdir -p "$d/ro_mnt"
"$d/trainer" --out "$o" --quiet --set max_steps=4 --set checkpoint.every_steps=2 --set data.val=null >/dev/null 2>&1
if mount --bind "$o" "$d/ro_mnt" 2>/dev/null && mount -o remount,bind,ro "$d/ro_mnt" 2>/dev/null; then
    "$d/trainer" --resume "$d/ro_mnt" --quiet --set max_steps=6 >/dev/null 2>"$d/ro.stderr"; rc=$?
    umount "$d/ro_mnt"
    if [ $rc -eq 1 ] && grep -qF "the folder is on a read-only file system" "$d/ro.stderr" &&
       grep -qF -- "--out DIR writes the rest of the run into DIR" "$d/ro.stderr"; then
        echo "ok   resume_read_only"; pass=$((pass+1))
    else echo "FAIL resume_read_only: exit $rc"; cat "$d/ro.stderr"; fail=$((fail+1)); fi
else
    umount "$d/ro_mnt" 2>/dev/null
    echo "skip resume_read_only (no bind mount here)"
fi

# One bit flipped in state.json within what a run can reach (log_n "4" read as "5": the
# step-24 record's loss is then a mean over 5 batches, written without a word; batch "20"
# as "21": refused with exit 1, though the checkpoint before was intact): its own hash
# (state_xxh64, its last field) finds either, and the resume goes on from the checkpoint
# before, bit for bit; xxhsum prints the same hash of the bytes before the field
o="$d/sealed"; rm -rf "$d/sealed_ref"
S=(--quiet --threads 1 --set checkpoint.every_steps=10 --set data.val=null --set log_every=8)
"$d/trainer" --out "$d/sealed_ref" "${S[@]}" --set max_steps=30 >/dev/null 2>&1
for flip in 's/"log_n":\t"4"/"log_n":\t"5"/' 's/"batch":\t"20"/"batch":\t"21"/'; do
    rm -rf "$o"
    "$d/trainer" --out "$o" "${S[@]}" --set max_steps=20 >/dev/null 2>&1
    st="$o/checkpoints/step_00000020/state.json"
    seal=$(xxhsum -H1 <(head -c -38 "$st") | cut -d' ' -f1)
    grep -q "\"state_xxh64\":.\"$seal\"" "$st" || { echo "FAIL sealed_state: xxhsum $seal is not the field"; tail -n 2 "$st"; fail=$((fail+1)); }
    cp "$st" "$d/sealed.before"; sed -i "$flip" "$st"
    cmp -s "$st" "$d/sealed.before" && { echo "FAIL sealed_state: '$flip' changed nothing"; fail=$((fail+1)); }
    if "$d/trainer" --resume "$o" "${S[@]}" --set max_steps=30 >/dev/null 2>"$d/sealed.stderr" &&
       grep -qF "step_00000020/state.json: its bytes changed after the checkpoint was written" "$d/sealed.stderr" &&
       grep -qF "taking step_00000010 instead" "$d/sealed.stderr" &&
       cmp -s "$d/sealed_ref/model.safetensors" "$o/model.safetensors" &&
       [ "$(grep -v event "$d/sealed_ref/metrics.jsonl" | sed 's/,"samples_per_s.*//')" = \
         "$(grep -v event "$o/metrics.jsonl" | sed 's/,"samples_per_s.*//')" ]; then
        echo "ok   sealed_state $flip: resumed from the checkpoint before, bit for bit"; pass=$((pass+1))
    else echo "FAIL sealed_state $flip"; cat "$d/sealed.stderr"; fail=$((fail+1)); fi
done

# metrics.jsonl cut in the middle of a line (by hand, a copy stopped short: shorter than
# the checkpoint's length, so the resume keeps it as it is): the resume cuts the torn
# line off before appending, so every line is whole JSON (the start record was glued to
# the half line)
o="$d/torn"; rm -rf "$o"
"$d/trainer" --out "$o" --quiet --set max_steps=20 --set checkpoint.every_steps=10 --set log_every=1 \
    --set data.val=null >/dev/null 2>&1
truncate -s 300 "$o/metrics.jsonl"
if "$d/trainer" --resume "$o" --quiet --set max_steps=30 >/dev/null 2>"$d/torn.stderr" &&
   grep -qF "ended in the middle of a line: cut back to its last whole record" "$d/torn.stderr" &&
   $PY -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]" "$o/metrics.jsonl"; then
    echo "ok   resume_torn_metrics"; pass=$((pass+1))
else echo "FAIL resume_torn_metrics"; cat "$d/torn.stderr"; head -c 600 "$o/metrics.jsonl"; fail=$((fail+1)); fi

# special files where a regular one belongs: refused at once (exit 1), never read or
# waited on forever, never replaced (timeout: a hang is a failure, not a wait)
mkfifo "$d/fifo.npy" "$d/fifo.safetensors" "$d/fifo_exe"
special() {   # special NAME EXPECTED CMD...
    local name=$1 want=$2; shift 2
    timeout -k 2 20 "$@" >"$d/$name.stdout" 2>"$d/$name.stderr"
    local rc=$?
    if [ $rc -eq 1 ] && grep -qF -- "$want" "$d/$name.stderr"; then echo "ok   $name"; pass=$((pass+1))
    else echo "FAIL $name: exit $rc, expected 1 and '$want'"; cat "$d/$name.stderr"; fail=$((fail+1)); fi
}
special fifo_data "fifo.npy: error: not a regular file" \
    "$d/trainer" --out "$d/out_fifo_data" --quiet --set data.train.x=$d/fifo.npy $X
special fifo_init "fifo.safetensors: error: not a regular file" \
    "$d/trainer" --out "$d/out_fifo_init" --quiet --init "$d/fifo.safetensors"
special build_over_fifo "fifo_exe exists and is not a regular file" "$TRAINC" build specs/mlp_fashion.json -o "$d/fifo_exe"
[ -p "$d/fifo_exe" ] || { echo "FAIL build_over_fifo: the FIFO was replaced"; fail=$((fail+1)); }
special spec_device "/dev/zero: more than 64 MiB: not a spec file" "$TRAINC" check /dev/zero
# a NUL escape in a weights file's names (1.weight\u0000x would read as 1.weight)
$PY - "$o/model.safetensors" "$d/w_nul.safetensors" <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", d[:8])[0]
h = d[8:8 + n].decode().replace('"1.weight"', '"1.weight\\u0000x"', 1).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + d[8 + n:])
PY
t init_nul_name "w_nul.safetensors" --init "$d/w_nul.safetensors"
# a checkpoint's file or metrics.jsonl turned into a link to a device: the checkpoint
# is damaged (its hash cannot be read), metrics.jsonl is refused before anything moves
r=$d/special_run
"$d/trainer" --out "$r" --quiet --set max_steps=2 --set data.val=null 2>/dev/null
ln -sf /dev/zero "$r/checkpoints/step_00000002/exp_avg.safetensors"
special resume_device_file "exp_avg.safetensors: not a regular file" \
    "$d/trainer" --resume "$r" --quiet --set max_steps=4 --set data.val=null
rm -rf "$r"
"$d/trainer" --out "$r" --quiet --set max_steps=2 --set data.val=null 2>/dev/null
ln -sf /dev/zero "$r/metrics.jsonl"
before=$(ls "$r")
special resume_device_metrics "metrics.jsonl: error: not a regular file" \
    "$d/trainer" --resume "$r" --quiet --set max_steps=4 --set data.val=null
[ "$before" = "$(printf 'checkpoints\n%s\nloss.svg\nmetrics.jsonl\nmodel.safetensors' \
    "$(cd "$r" && echo events.out.tfevents.*)")" ] && [ "$(ls "$r")" = "$before" ] ||
    { echo "FAIL resume_device_metrics: the folder changed: $(ls "$r")"; fail=$((fail+1)); }

echo "bad-runtime: $pass passed, $fail failed"
[ $fail -eq 0 ]
