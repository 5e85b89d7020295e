#!/usr/bin/env bash
# bad_input.sh: every spec in tests/bad/ must be rejected with the right message.
#
# For each tests/bad/NAME.json, NAME.expect holds two lines: the exit code, and a
# substring that stderr must contain (with its place: "$.model.layers[1].strde" or
# ":3:5:"). Runs `$TRAINC check NAME.json` (TRAINC defaults to build/trainc). A bad
# spec must print nothing on stdout, and a sanitizer report on stderr is a failure too.
set -u
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
if [ ! -x "$TRAINC" ]; then
    echo "bad-input: $TRAINC not built" >&2
    exit 2
fi
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for spec in tests/bad/*.json; do
    name=$(basename "$spec" .json)
    expect=tests/bad/$name.expect
    if [ ! -f "$expect" ]; then
        echo "FAIL bad/$name: no $expect"
        fail=$((fail + 1))
        continue
    fi
    want_rc=$(sed -n 1p "$expect")
    want_err=$(sed -n 2p "$expect")
    timeout 30 "$TRAINC" check "$spec" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    why=""
    if [ "$rc" != "$want_rc" ]; then
        why="exit code $rc, expected $want_rc"
    elif ! grep -qF -- "$want_err" "$tmp/err"; then
        why="stderr lacks '$want_err'; got: $(head -c 400 "$tmp/err")"
    elif grep -qE 'runtime error:|Sanitizer' "$tmp/err"; then
        why="sanitizer report: $(grep -m1 -E 'runtime error:|Sanitizer' "$tmp/err")"
    elif [ -s "$tmp/out" ]; then
        why="printed on stdout: $(head -c 200 "$tmp/out")"
    fi
    if [ -z "$why" ]; then
        echo "ok bad/$name"
        pass=$((pass + 1))
    else
        echo "FAIL bad/$name: $why"
        fail=$((fail + 1))
    fi
done
# the command line itself: --version, help, help COMMAND (each command's usage names its
# own options), a mistyped command or help topic (exit 1, did you mean)
cli() {   # cli NAME WANT_RC WANT_TEXT ARGS...
    local name=$1 rc0=$2 want=$3; shift 3
    local out rc=0
    out=$("$TRAINC" "$@" 2>&1) || rc=$?
    if [ $rc -eq "$rc0" ] && printf '%s' "$out" | grep -qF -- "$want"; then pass=$((pass + 1))
    else echo "FAIL cli/$name: exit $rc, wanted $rc0 and '$want':"; printf '%s\n' "$out"; fail=$((fail + 1)); fi
}
cli version      0 "trainc 0."                 --version
cli help         0 "trainc help COMMAND"        help
cli help_build   0 'rpath $ORIGIN/lib'         help build
cli help_run     0 "--eval"                     help run
cli help_plan    0 "the lower bound"            help plan
cli help_data    0 "default 0.1"                help data
cli help_typo    1 "did you mean 'plan'?"       help plna
cli command_typo 1 "did you mean 'build'?"      biuld specs/mlp_fashion.json
# --set's keys: a training key's last part, a prefix of one key, another case
cli set_last_part 1 "--set lr: unknown key 'lr'; did you mean 'optimizer.lr'?" \
    run specs/mlp_fashion.json --set lr=0.1
cli set_prefix   1 "did you mean 'checkpoint.every_steps'?" \
    run specs/mlp_fashion.json --set checkpoint.every_st=5
cli set_case     1 "did you mean 'batch_size'?"  run specs/mlp_fashion.json --set BATCH_SIZE=8
cli set_data_group 1 "'data' is a group, set file by file: data.train.INPUT=PATH" \
    run specs/mlp_fashion.json --set data=null
# trainc's own commands: an option's missing value refused as a trainer refuses it (not
# built with --set taken for nothing, nor -o swallowed by --set); a mistyped option with
# the closest of the command's own, or the command whose option it is
S=specs/mlp_fashion.json
cli build_set_no_value 1 "trainc: error: --set needs a value"   build $S -o "$tmp/built" --set
cli emit_set_no_value  1 "trainc: error: --set needs a value"   emit $S -o "$tmp/emitted" --set
cli check_set_no_value 1 "trainc: error: --set needs a value"   check $S --set
cli plan_set_no_value  1 "trainc: error: --set needs a value"   plan $S --set
cli set_swallows_o     1 "--set needs a value, got the option -o" build $S --set -o "$tmp/built"
cli build_typo 1 "build: unknown option '--devic'; did you mean '--device'?" build $S -o "$tmp/built" --devic cpu
cli build_typo_eq 1 "build: unknown option '--devic=cpu'; did you mean '--device'?" build $S -o "$tmp/built" --devic=cpu
cli plan_typo  1 "plan: unknown option '--jsn'; did you mean '--json'?"     plan $S --jsn
cli emit_typo  1 "emit: unknown option '--jsn' ('--json' is an option of trainc plan)" emit $S -o "$tmp/emitted" --jsn
cli check_other 1 "check: unknown option '--json' ('--json' is an option of trainc plan)" check $S --json
cli check_third 1 "check: unexpected argument 'x.json'" check $S $S x.json
if [ -e "$tmp/built" ] || [ -e "$tmp/emitted" ]; then
    echo "FAIL cli/options: something was written: $(ls "$tmp")"; fail=$((fail + 1)); fi
echo "bad-input: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
