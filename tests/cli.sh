#!/usr/bin/env bash
# The command line as users type it: a spec file of any name; --NAME=VALUE for every
# option that takes a value (trainc's commands and a trainer's); --set values in the
# spec's JSON forms ([0.8, 0.9], "sgd"), which train exactly as the plain forms; an
# option name where a value belongs refused; output paths that cannot be written
# (a file where a folder belongs, a missing folder) refused with exit 1 before any work;
# a SIGTERM while trainc run compiles or loads data still stops with a checkpoint;
# --fast-dev-run keeps nothing.
set -u
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=$(pwd)/build/tests/cli
rm -rf "$d"; mkdir -p "$d"
pass=0; fail=0
ok()  { echo "ok   $1"; pass=$((pass+1)); }
bad() { echo "FAIL $1"; fail=$((fail+1)); }
expect1() {   # expect1 NAME SUBSTRING COMMAND...: exit 1 and SUBSTRING on stderr
    local name=$1 want=$2; shift 2
    "$@" >"$d/$name.out" 2>"$d/$name.err"
    local rc=$?
    if [ $rc -eq 1 ] && grep -qF -- "$want" "$d/$name.err"; then ok "$name"
    else bad "$name: exit $rc, stderr:"; cat "$d/$name.err"; fi
}

# trainc COMMAND --help is trainc help COMMAND
for c in check emit build run plan import export; do
    "$TRAINC" $c --help > "$d/help_$c.out" 2>&1 && "$TRAINC" help $c | cmp -s - "$d/help_$c.out" &&
        ok "trainc $c --help" || bad "trainc $c --help"
done

# a spec file need not end in .json
sed 's|\.\./data/fashion|../../../data/fashion|g' specs/mlp_fashion.json > "$d/mlp.spec"
"$TRAINC" check "$d/mlp.spec" >"$d/check.out" 2>"$d/check.err" && ok "check a spec named mlp.spec" ||
    { bad "check mlp.spec"; cat "$d/check.err"; }
# check lists the data files with their sizes, resolved from the spec's folder; one
# that is not there is a note (exit 0), token globs count their shards
grep -Eq '^  data +train\.x +\.\./\.\./\.\./data/fashion/train_x\.npy: 44\.9 MiB$' "$d/check.out" &&
    "$TRAINC" check "$d/mlp.spec" --set data.val.x=nowhere.npy >"$d/check2.out" &&
    grep -Eq '^ +val\.x +/.*/nowhere\.npy: not found \(.*/nowhere\.npy; the run needs it\)$' "$d/check2.out" &&
    "$TRAINC" check specs/gpt_char.json | grep -Eq '^  data +train\.tokens +\.\./data/text/train_\*\.bin: [0-9.]+ KiB$' &&
    ok "check: data files, a missing one a note" || { bad "check's data lines"; cat "$d/check.out" "$d/check2.out"; }

# a relative data path given with --set is from the current folder, not the spec's
# (a shipped trainer's spec folder is on another machine): check and a trainer
mkdir -p "$d/here" && cp data/fashion/test_x.npy data/fashion/test_y.npy "$d/here/"
(cd "$d/here" && "$OLDPWD/$TRAINC" check ../mlp.spec --set data.val.x=test_x.npy > ../check3.out &&
    grep -Eq "^ +val\.x +$d/here/test_x\.npy: 7\.5 MiB$" ../check3.out &&
    "$OLDPWD/$TRAINC" run ../mlp.spec --out ../relrun --quiet --threads 1 --set max_steps=1 \
        --set data.val.x=test_x.npy --set 'data.val.y="test_y.npy"' 2>/dev/null &&
    grep -q '"val_loss"' ../relrun/metrics.jsonl) &&
    ok "--set data paths are relative to the current folder" || { bad "--set data paths from the current folder"; cat "$d/check3.out"; }

# a spec folder named with " and \ (and a space): the folder is one C string to the
# compiler (build) and to libtcc (run), its data found there; \x is no escape
w="$d/q\"uo\\x te"
mkdir -p "$w" && for f in train_x train_y test_x test_y; do ln -sf "$(pwd)/data/fashion/$f.npy" "$w/$f.npy"; done
sed 's|\.\./data/fashion/||g' specs/mlp_fashion.json > "$w/mlp.json"
"$TRAINC" build "$w/mlp.json" -o "$d/quoted_dir" 2>"$d/quoted.err" &&
    "$d/quoted_dir" --out "$d/quoted_run" --quiet --threads 1 --set max_steps=2 2>>"$d/quoted.err" &&
    grep -q '"val_loss"' "$d/quoted_run/metrics.jsonl" &&
    "$TRAINC" run "$w/mlp.json" --out "$d/quoted_jit" --quiet --threads 1 --set max_steps=2 2>>"$d/quoted.err" &&
    grep -q '"val_loss"' "$d/quoted_jit/metrics.jsonl" &&
    ok "a spec folder named with \" and \\: build and run train from its data" ||
    { bad "a spec folder named with \" and \\"; cat "$d/quoted.err"; }

# --set optimizer.type resets the optimizer's other keys; it is applied before them, so
# the order of --set options does not matter (momentum kept, nesterov checked)
for order in "optimizer.momentum=0.9 optimizer.type=sgd" "optimizer.type=sgd optimizer.momentum=0.9"; do
    set -- $order
    "$TRAINC" emit "$d/mlp.spec" -o "$d/order" --set "$1" --set "$2" && grep -q '"optimizer.momentum=0.9"' "$d/order/host.c" &&
        "$TRAINC" run "$d/mlp.spec" --out "$d/order_run" --quiet --threads 1 --set max_steps=1 --set data.val=null \
            --set "$1" --set "$2" 2>/dev/null &&
        grep -q '"optimizer_bytes":1077312,' "$d/order_run/metrics.jsonl" &&
        ok "--set $1 --set $2: sgd with momentum 0.9" || { bad "--set $1 --set $2"; head -1 "$d/order_run/metrics.jsonl"; }
done
expect1 set_order_nesterov "optimizer.nesterov needs optimizer.momentum > 0" \
    "$TRAINC" check "$d/mlp.spec" --set optimizer.nesterov=true --set optimizer.type=sgd

S=(--quiet --threads 1 --set max_steps=5 --set log_every=1 --set data.val=null)
losses() { $PY -c 'import json,sys; print([json.loads(l)["loss"] for l in open(sys.argv[1]) if "\"loss\"" in l])' "$1/metrics.jsonl"; }
same() {   # same NAME RUN_A RUN_B: the same per-step losses and the same weights
    if [ -s "$2/metrics.jsonl" ] && [ "$(losses "$2")" = "$(losses "$3")" ] &&
       cmp -s "$2/model.safetensors" "$3/model.safetensors"; then ok "$1"
    else bad "$1: $(losses "$2" 2>&1) vs $(losses "$3" 2>&1)"; fi
}

# trainc run: --set in JSON form and --NAME=VALUE train as the plain forms do
"$TRAINC" run "$d/mlp.spec" --out "$d/plain" "${S[@]}" --set optimizer.betas=0.8,0.95 \
    --set schedule.final_lr_frac=0.5 --set schedule.type=linear 2>/dev/null
"$TRAINC" run "$d/mlp.spec" --out="$d/json" "${S[@]}" --set='optimizer.betas=[0.8, 0.95]' \
    --set 'schedule.type="linear"' --set=schedule.final_lr_frac=0.5 2>/dev/null
same "trainc run: --set [0.8, 0.95], \"linear\", --out=DIR, --set=K=V" "$d/plain" "$d/json"

# emit's and build's -o is also --out (and so --out=DIR)
"$TRAINC" emit "$d/mlp.spec" --out="$d/emit_out" && [ -s "$d/emit_out/host.c" ] &&
    ok "emit --out=DIR" || bad "emit --out=DIR"

# a built trainer (--device=cpu, -o into a folder that exists)
"$TRAINC" build "$d/mlp.spec" --device=cpu -o "$d/trainer" 2>/dev/null && ok "build --device=cpu" ||
    bad "build --device=cpu"
"$d/trainer" --out="$d/t_json" "${S[@]}" --set='optimizer.betas=[0.8,0.95]' --set 'schedule.type="linear"' \
    --set schedule.final_lr_frac=0.5 2>/dev/null
same "trainer: --set in JSON form, --out=DIR" "$d/plain" "$d/t_json"

# refused options make no output folder: the trainer runs in an empty folder, where
# its default --out (runs/NAME) would appear
mkdir -p "$d/cwd" && cd "$d/cwd"
expect1 value_is_option   "--resume needs a value, got the option --quiet" "$d/trainer" --resume --quiet
expect1 set_group_null    "schedule is a group of keys"  "$d/trainer" --set schedule=null
expect1 set_object        "an object is set key by key"  "$d/trainer" --set 'early_stopping={"patience": 5}'
expect1 set_list_for_int  "got [32]"                     "$d/trainer" --set 'batch_size=[32]'
expect1 set_string_for_int 'got "32"'                    "$d/trainer" --set 'batch_size="32"'
expect1 flag_with_value   "did you mean '--quiet'"       "$d/trainer" --quiet=1
# (checked before training: a step, then the refusal, would leave runs/NAME)
expect1 sample_not_tokens "--sample needs a token model"  "$d/trainer" --set max_steps=1 --sample 5
expect1 sample_opt_alone  "--temperature is an option of --sample" "$d/trainer" --temperature 0.5
expect1 top_p_range       "--top-p: expected a number in (0, 1], got '0'" "$d/trainer" --sample 1 --top-p 0
expect1 min_p_range       "--min-p: expected a number in [0, 1], got '1.5'" "$d/trainer" --sample 1 --min-p 1.5
expect1 penalty_range     "--repetition-penalty: expected a number > 0, got '-1'" "$d/trainer" --sample 1 --repetition-penalty -1
expect1 top_k_alone       "--top-k is an option of --sample" "$d/trainer" --top-k 5
expect1 chat_unknown      "--chat: unknown format 'vicuna' (known: llama3, chatml, gemma, phi3, mistral, llama2, zephyr)" "$d/trainer" --sample 1 --chat vicuna
expect1 stop_nine         "--stop: at most 8 tokens"     "$d/trainer" --sample 1 $(for i in 1 2 3 4 5 6 7 8 9; do echo --stop $i; done)
expect1 sample_too_many   "from 0 to 100000000"          "$d/trainer" --sample 1000000000
expect1 num_samples_zero  "--num-samples: expected an integer from 1, got '0'" "$d/trainer" --sample 1 --num-samples 0
expect1 num_samples_alone "--num-samples is an option of --sample" "$d/trainer" --num-samples 2
expect1 sample_seed_range "from 0 to 9223372036854775807" "$d/trainer" --sample 1 --sample-seed 99999999999999999999
cd - >/dev/null
[ -z "$(ls -A "$d/cwd")" ] && ok "refused trainer options: no output folder" ||
    bad "refused trainer options made $(ls -A "$d/cwd")"
# and that is where a folder appears: one step there makes runs/mlp_fashion
(cd "$d/cwd" && "$d/trainer" --quiet --threads 1 --set max_steps=1 --set data.val=null >/dev/null 2>&1) &&
    [ -s "$d/cwd/runs/mlp_fashion/metrics.jsonl" ] && ok "a trainer without --out writes runs/NAME in the current folder" ||
    bad "a trainer without --out: $(ls -R "$d/cwd")"

# output paths: exit 1, named, before compiling
touch "$d/a_file"
expect1 emit_into_file    "emit: cannot write $d/a_file"  "$TRAINC" emit "$d/mlp.spec" -o "$d/a_file"
expect1 build_no_folder   "no folder $d/nowhere"          "$TRAINC" build "$d/mlp.spec" -o "$d/nowhere/t"
expect1 build_onto_folder "Is a directory"                "$TRAINC" build "$d/mlp.spec" -o "$d"
expect1 bundle_into_file  "cannot write $d/a_file"        "$TRAINC" build "$d/mlp.spec" --bundle "$d/a_file"
expect1 run_value_option  "--out needs a value, got the option --quiet" "$TRAINC" run "$d/mlp.spec" --out --quiet
expect1 build_value_option "-o needs a value, got the option --device" "$TRAINC" build "$d/mlp.spec" -o --device cpu
expect1 data_value_option "--from needs a folder, got the option --quiet" "$TRAINC" data fashion-mnist "$d/fm" --from --quiet

# build's temporary files (its folder in $TMPDIR, the executable linked beside -o) are
# gone after a build that fails (a C compiler that cannot start, an --arch refused) and
# after one stopped by SIGINT while linking; $CC is split at spaces as make does
tmpd="$d/tmpdir"; od="$d/outdir"; rm -rf "$tmpd" "$od"; mkdir -p "$tmpd" "$od"
left() { ls -A "$tmpd" "$od" | grep -c trainc; }
TMPDIR="$tmpd" CC="no-such-cc -O2" "$TRAINC" build "$d/mlp.spec" -o "$od/t" >/dev/null 2>"$d/nocc.err"; rc=$?
[ $rc -eq 2 ] && grep -q "cannot start the C compiler no-such-cc: No such file" "$d/nocc.err" && [ "$(left)" = 0 ] &&
    ok "CC that cannot start: exit 2, nothing left in TMPDIR or beside -o" ||
    { bad "CC that cannot start: exit $rc, $(left) left"; cat "$d/nocc.err"; }
TMPDIR="$tmpd" "$TRAINC" build "$d/mlp.spec" -o "$od/t" --device cuda --arch sm_75 >/dev/null 2>&1; rc=$?
[ $rc -eq 1 ] && [ "$(left)" = 0 ] && ok "--arch sm_75: exit 1, nothing left" || bad "--arch sm_75: exit $rc, $(left) left"
printf '#!/bin/sh\ncc "$@" || exit $?\nexec sleep 61.5\n' > "$d/slowcc"; chmod +x "$d/slowcc"
TMPDIR="$tmpd" CC="$d/slowcc" "$TRAINC" build "$d/mlp.spec" -o "$od/t" >/dev/null 2>&1 &
pid=$!
for i in $(seq 300); do [ -n "$(find "$tmpd" -name trainer -size +100k)" ] && break; sleep 0.1; done
linked=$(find "$tmpd" -name trainer -size +100k | wc -l)
kill -INT $pid; rc=0; wait $pid || rc=$?
sleep 0.2
[ "$linked" = 1 ] && [ $rc -eq 130 ] && [ "$(left)" = 0 ] && [ ! -e "$od/t" ] && ! pgrep -fx "sleep 61.5" >/dev/null &&
    ok "SIGINT while linking: exit 130, the linked file and the folder removed, the compiler stopped" ||
    bad "SIGINT while linking: exit $rc, $linked linked, $(left) left: $(ls -A "$tmpd" "$od")"
# SIGKILL while linking (no handler runs): nothing beside -o (the executable is linked in
# TMPDIR and put there whole; a partial .trainc-XXXXXX as large as it stayed for good),
# and the next build removes the dead build's folder from TMPDIR (one each stayed)
printf '#!/bin/sh\ncc "$@" || exit $?\necho $$ > "%s"\nexec sleep 61.7\n' "$d/slowcc.pid" > "$d/slowcc9"
chmod +x "$d/slowcc9"; rm -f "$d/slowcc.pid"
TMPDIR="$tmpd" CC="$d/slowcc9" "$TRAINC" build "$d/mlp.spec" -o "$od/t" >/dev/null 2>&1 &
pid=$!
for i in $(seq 300); do [ -s "$d/slowcc.pid" ] && break; sleep 0.1; done
kill -KILL $pid; wait $pid 2>/dev/null
kill "$(cat "$d/slowcc.pid")" 2>/dev/null
stale=$(ls -A "$tmpd" | grep -c trainc-build-)
beside=$(ls -A "$od" | grep -c trainc)
TMPDIR="$tmpd" "$TRAINC" build "$d/mlp.spec" -o "$od/t" >/dev/null 2>"$d/after9.err"; rc=$?
[ "$stale" = 1 ] && [ "$beside" = 0 ] && [ $rc -eq 0 ] && [ "$(left)" = 0 ] && [ -x "$od/t" ] &&
    ok "SIGKILL while linking: nothing beside -o, the dead build's folder removed by the next build" ||
    bad "SIGKILL while linking: $stale folders in TMPDIR, $beside beside -o, then exit $rc and $(left) left: $(ls -A "$tmpd" "$od")"
rm -f "$od/t"
TMPDIR="$tmpd" CC="cc -m64" "$TRAINC" build "$d/mlp.spec" -o "$od/t" 2>"$d/ccwords.err" && [ -x "$od/t" ] &&
    [ "$(left)" = 0 ] && ok "CC=\"cc -m64\": built, nothing left" || { bad "CC=\"cc -m64\""; cat "$d/ccwords.err"; }
# an output name of 250 characters (its temporary name must fit too); -o where no file
# can be made: exit 1 naming it, before compiling
long="$od/$(printf 'a%.0s' $(seq 250))"
TMPDIR="$tmpd" "$TRAINC" build "$d/mlp.spec" -o "$long" 2>"$d/long.err" && [ -x "$long" ] &&
    ok "build -o a 250-character name" || { bad "build -o a 250-character name"; cat "$d/long.err"; }
expect1 build_into_proc "build: cannot write /proc/x: cannot create a file in /proc" "$TRAINC" build "$d/mlp.spec" -o /proc/x

# optimizer.lr 0 (as torch takes it): the weights stay as they were
"$d/trainer" --out "$d/lr0" "${S[@]}" --init "$d/plain/model.safetensors" --set optimizer.lr=0 2>/dev/null
$PY - "$d/plain/model.safetensors" "$d/lr0/model.safetensors" <<'PY' && ok "optimizer.lr=0 keeps the weights" || bad "optimizer.lr=0"
import sys
a, b = (open(p, "rb").read() for p in sys.argv[1:])
n = lambda x: int.from_bytes(x[:8], "little")
assert a[8 + n(a):] == b[8 + n(b):], "the tensors changed"
PY

# a NaN in --init's weights is bad input (exit 1, the tensor named, no folder), not a
# divergence at step 0
$PY - "$d/plain/model.safetensors" "$d/nan.safetensors" <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
lo, hi = json.loads(b[8:8 + n])["1.weight"]["data_offsets"]
b[8 + n + lo + 8:8 + n + lo + 12] = struct.pack("<f", float("nan"))   # 1.weight's third value
open(sys.argv[2], "wb").write(b)
PY
rc=0
"$d/trainer" --out "$d/nan" "${S[@]}" --init "$d/nan.safetensors" >/dev/null 2>"$d/nan.err" || rc=$?
[ $rc -eq 1 ] && grep -q "nan.safetensors: error: tensor '1.weight' holds nan at index 2: weights to start from must be finite" "$d/nan.err" &&
    [ ! -e "$d/nan" ] && ok "a NaN in --init's weights: exit 1, the tensor named, nothing written" ||
    { bad "a NaN in --init's weights: exit $rc"; cat "$d/nan.err"; }

# a NaN weight is not hidden by a relu (torch.relu keeps NaN; x > 0 ? x : 0 made it 0,
# and the run went on with finite losses and gradients): a checkpoint's weight made NaN
# (its recorded hash mended to match) resumes into a NaN loss, diverged, exit 3
"$d/trainer" --out "$d/nanck" "${S[@]}" --set checkpoint.every_steps=5 2>/dev/null
ck="$d/nanck/checkpoints/step_00000005"
$PY - "$ck/model.safetensors" "$ck/nan.tmp" <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
lo, hi = json.loads(b[8:8 + n])["1.weight"]["data_offsets"]
b[8 + n + lo:8 + n + lo + 4] = struct.pack("<f", float("nan"))
open(sys.argv[2], "wb").write(b)
PY
mv "$ck/nan.tmp" "$ck/model.safetensors"
$PY - "$ck/state.json" "$(xxhsum -H1 "$ck/model.safetensors" | cut -d' ' -f1)" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); s["files"]["model.safetensors"]["xxh64"] = sys.argv[2]
s.pop("state_xxh64", None)   # edited by hand: unsealed
json.dump(s, open(sys.argv[1], "w"))
PY
rc=0
"$d/trainer" --resume "$d/nanck" "${S[@]}" --set max_steps=10 >/dev/null 2>"$d/nanck.err" || rc=$?
[ $rc -eq 3 ] && tail -n 1 "$d/nanck/metrics.jsonl" | grep -q '"reason":"diverged"' &&
    ok "a NaN weight before a relu: diverged, exit 3" || { bad "a NaN weight before a relu: exit $rc"; cat "$d/nanck.err"; }

# a new run into a folder holding an earlier one moves that one aside whole (OUT.1, then
# OUT.2), so neither its files nor its checkpoints are lost or mixed with the new run's;
# a --resume of the folder moves nothing; the folder a run works in is not moved
R=(--quiet --threads 1 --set data.val=null --set checkpoint.every_steps=2)
"$d/trainer" --out "$d/again" "${R[@]}" --set max_steps=3 2>/dev/null
"$d/trainer" --out "$d/again/" "${R[@]}" --set max_steps=4 2>"$d/again.err"
"$d/trainer" --resume "$d/again" --quiet --set max_steps=6 2>/dev/null
"$d/trainer" --out "$d/again" "${R[@]}" --set max_steps=2 2>/dev/null
last() { tail -n 1 "$1/metrics.jsonl" | grep -o '"step":[0-9]*'; }
if grep -q "held an earlier run: moved it to $d/again.1" "$d/again.err" &&
   [ "$(last "$d/again.1")" = '"step":3' ] && [ "$(last "$d/again.2")" = '"step":6' ] &&
   [ "$(last "$d/again")" = '"step":2' ] && [ ! -e "$d/again.3" ] &&
   [ "$(ls "$d/again/checkpoints")" = step_00000002 ]; then ok "a new run into an earlier run's folder moves that aside"
else bad "earlier runs: $(ls -d "$d"/again*)"; fi
# an earlier run whose metrics.jsonl was removed still counts: its checkpoints would
# otherwise mix with the new run's
rm -rf "$d/nomet" "$d/nomet.1"
"$d/trainer" --out "$d/nomet" "${R[@]}" --set max_steps=3 2>/dev/null
rm "$d/nomet/metrics.jsonl"
"$d/trainer" --out "$d/nomet" "${R[@]}" --set max_steps=2 2>"$d/nomet.err"
grep -q "held an earlier run: moved it to $d/nomet.1" "$d/nomet.err" &&
    [ "$(ls "$d/nomet/checkpoints")" = step_00000002 ] && [ -d "$d/nomet.1/checkpoints/step_00000003" ] &&
    ok "a folder with an earlier run's checkpoints but no metrics.jsonl: moved aside" ||
    bad "an earlier run without metrics.jsonl: $(ls "$d/nomet/checkpoints" | tr '\n' ' ')"
mkdir -p "$d/here" && cp -r "$d/again/." "$d/here/"
( cd "$d/here" && "$d/trainer" --out . "${R[@]}" --set max_steps=1 >/dev/null 2>"$d/here.err" ); rc=$?
[ $rc -eq 1 ] && grep -q "the folder a run works in cannot be moved aside" "$d/here.err" &&
    ok "--out . holding an earlier run: exit 1" || bad "--out . holding an earlier run: exit $rc"

# a signal while trainc run compiles or loads data is kept: one step, a checkpoint, 130
"$TRAINC" run "$d/mlp.spec" --out "$d/early_sig" --quiet --set data.val=null 2>/dev/null &
pid=$!
sleep 0.3
kill -TERM $pid
rc=0; wait $pid || rc=$?
if [ $rc -eq 130 ] && tail -n 1 "$d/early_sig/metrics.jsonl" | grep -q '"reason":"interrupted"' &&
   ls "$d/early_sig/checkpoints" | grep -q step_; then ok "an early SIGTERM: exit 130, a checkpoint"
else bad "an early SIGTERM: exit $rc"; fi

# SIGHUP (the session gone) stops the run as SIGTERM does; with stderr a pipe whose
# reader has gone (Ctrl-C on `trainer 2>&1 | tee log` ends tee too), the messages that
# follow the signal fail, and the run still writes its checkpoint and exits 130
"$d/trainer" --out "$d/hup" --quiet --set data.val=null --set max_steps=100000 2>/dev/null &
pid=$!
sleep 1; kill -HUP $pid
rc=0; wait $pid || rc=$?
[ $rc -eq 130 ] && tail -n 1 "$d/hup/metrics.jsonl" | grep -q '"reason":"interrupted"' &&
    ok "SIGHUP: exit 130, a checkpoint" || bad "SIGHUP: exit $rc"
rm -f "$d/pipe"; mkfifo "$d/pipe"
cat "$d/pipe" >/dev/null & reader=$!
"$d/trainer" --out "$d/epipe" --quiet --set data.val=null --set max_steps=100000 2>"$d/pipe" &
pid=$!
sleep 1; kill $reader; wait $reader 2>/dev/null; kill -TERM $pid
rc=0; wait $pid || rc=$?
[ $rc -eq 130 ] && tail -n 1 "$d/epipe/metrics.jsonl" | grep -q '"reason":"interrupted"' &&
    ls "$d/epipe/checkpoints" | grep -q step_ && ok "stderr's reader gone, then SIGTERM: exit 130, a checkpoint" ||
    bad "stderr's reader gone, then SIGTERM: exit $rc (141: SIGPIPE)"

# emit writes its five files all or none: one that cannot be written (here its temporary
# name is a folder; a full disk alike) leaves none of the others
rm -rf "$d/emit_half"; mkdir -p "$d/emit_half/host.c.tmp"
rc=0; "$TRAINC" emit specs/mlp_fashion.json -o "$d/emit_half" 2>/dev/null || rc=$?
[ $rc -eq 1 ] && [ "$(ls "$d/emit_half")" = "host.c.tmp" ] &&
    ok "emit: a file it cannot write, none written" || bad "emit half-written: exit $rc, $(ls "$d/emit_half")"

# emit's bytes do not depend on how the spec's path is spelled (SPEC: same input, same
# bytes): "./specs//x.json" is the file "specs/x.json"
rm -rf "$d/emit_a" "$d/emit_b"
"$TRAINC" emit specs/mlp_fashion.json -o "$d/emit_a" >/dev/null &&
    "$TRAINC" emit .//specs/./mlp_fashion.json -o "$d/emit_b" >/dev/null &&
    diff -r "$d/emit_a" "$d/emit_b" >/dev/null &&
    ok "emit: the same bytes however the spec path is spelled" || bad "emit differs with ./ and // in the path"

# a trainer's --version names its model and the trainc that built it; --help lists the
# sampling options for token models only; one step is "1 step"
v=$("$d/trainer" --version) && echo "$v" | grep -q "^mlp_fashion trainer (spec hash [0-9a-f]*), built by trainc [0-9]" &&
    ! "$d/trainer" --help | grep -q -- "--sample" && "$TRAINC" help run | grep -q -- "--sample N" &&
    ok "trainer --version ($v); --help without --sample for a non-token model" ||
    bad "trainer --version / --help: '$v'"
# --version names the OpenBLAS core the CPU's GEMMs run on: on a CPU with AVX2 and FMA
# never one without them (runtime/blas.c chooses again where OpenBLAS fell back to
# one: Debian 12's on Intel's Emerald Rapids took Prescott); OPENBLAS_CORETYPE rules
core=$("$d/trainer" --version | sed -n 's/^CPU GEMMs: OpenBLAS //p')
want=$(OPENBLAS_CORETYPE=Haswell "$d/trainer" --version | sed -n 's/^CPU GEMMs: OpenBLAS //p')
old='^(Unknown|Katmai|Coppermine|Northwood|Prescott|Banias|Atom|Core2|Penryn|Dunnington|Nehalem|Athlon|Opteron|Barcelona|Nano|Sandybridge|Bobcat|Bulldozer|Piledriver|Steamroller)( |$)'
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
    [ -n "$core" ] && ! echo "$core" | grep -Eq "$old" && [ "$want" = Haswell ] &&
        [ "$("$TRAINC" --version | sed -n 's/^CPU GEMMs: OpenBLAS //p')" = "$core" ] &&
        ok "--version: CPU GEMMs on OpenBLAS $core; OPENBLAS_CORETYPE=Haswell gives $want" ||
        bad "--version: CPU GEMMs on '$core' (a core without AVX2 on an AVX2 CPU?), OPENBLAS_CORETYPE=Haswell gave '$want'"
else
    echo "skip --version's OpenBLAS core: this CPU has no AVX2 and FMA"
fi
# --help's usage line names the command as it was typed: the trainer's path, or
# trainc run with its spec
u=$("$d/trainer" --help | head -1) && r=$("$TRAINC" run specs/mlp_fashion.json --help | head -1) &&
    [ "$u" = "usage: $d/trainer [options]   (mlp_fashion)" ] &&
    [ "$r" = "usage: trainc run SPEC... [options]   (mlp_fashion)" ] &&
    ok "--help's usage line: '$u', '$r'" || bad "--help's usage line: '$u', '$r'"
"$d/trainer" --out "$d/one_step" --quiet --set data.val=null --set max_steps=1 2>"$d/one_step.err" &&
    grep -q "max_steps after 1 step in" "$d/one_step.err" && ok "one step: '1 step'" ||
    bad "one step: $(cat "$d/one_step.err")"

# --fast-dev-run N (Lightning's fast_dev_run): N steps and N validation batches whatever
# the spec says of checkpoints, early stopping and validation's schedule, in a folder
# under $TMPDIR removed at the end; with --out, --resume or --eval, or N 0: exit 1
mkdir -p "$d/fdr_tmp"
TMPDIR="$d/fdr_tmp" "$d/trainer" --fast-dev-run 2 --quiet --set checkpoint.every_steps=1 \
    --set early_stopping.patience=0 --set validate.every_fraction=0.5 2>"$d/fdr.err" &&
    grep -q "max_steps after 2 steps" "$d/fdr.err" &&
    grep -q "fast dev run: 2 training steps and 2 validation batches ran; nothing kept ($d/fdr_tmp/trainc-fast-dev-run-" "$d/fdr.err" &&
    [ -z "$(ls -A "$d/fdr_tmp")" ] && ok "--fast-dev-run 2: 2 steps, 2 validation batches, its folder removed" ||
    bad "--fast-dev-run 2: $(cat "$d/fdr.err"; ls -A "$d/fdr_tmp")"
expect1 fdr_out "--fast-dev-run keeps nothing: not with --out" "$d/trainer" --fast-dev-run 1 --out "$d/fdr_out"
expect1 fdr_eval "--fast-dev-run keeps nothing: not with --eval" "$d/trainer" --fast-dev-run 1 --eval
expect1 fdr_zero "--fast-dev-run: expected an integer from 1, got '0'" "$d/trainer" --fast-dev-run 0

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
