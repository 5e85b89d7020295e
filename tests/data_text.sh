#!/usr/bin/env bash
# `trainc data text FILE DIR`: byte-level token shards (SPEC.md sections 1 and 5).
# The shards are read back independently (Python) and must hold the file's bytes.
set -u
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
SRC=/usr/share/common-licenses/GPL-3
d=build/tests/gpl
rm -rf "$d" "$d"_*
pass=0; fail=0
ok()  { echo "ok   $1"; pass=$((pass+1)); }
bad() { echo "FAIL $1"; fail=$((fail+1)); }

# check_shards NAME DIR VAL_FRAC: the shards of DIR are train_*.bin then val_*.bin,
# each a valid header + uint16 tokens; train is the first n - floor(n * F) bytes
# of SRC and val the rest, and nothing else (no .tmp) is left in DIR.
check_shards() {
    if $PY - "$SRC" "$2" "$3" <<'PY'; then ok "$1"; else bad "$1"; fi
import glob, os, struct, sys, math
src, d, frac = sys.argv[1], sys.argv[2], float(sys.argv[3])
data = open(src, "rb").read()
n_val = math.floor(len(data) * frac)
def read(pattern):
    out = b""
    for p in sorted(glob.glob(os.path.join(d, pattern))):
        b = open(p, "rb").read()
        magic, version, ntok = struct.unpack("<3i", b[:12])
        assert magic == 20240520 and version == 1, (p, magic, version)
        assert len(b) == 1024 + 2 * ntok, (p, len(b), ntok)
        assert b[12:1024] == bytes(1012), p
        toks = struct.unpack(f"<{ntok}H", b[1024:])
        assert max(toks, default=0) < 256, p
        print(f"{p}: {ntok} tokens")
        out += bytes(toks)
    return out
train, val = read("train_*.bin"), read("val_*.bin")
assert train == data[:len(data) - n_val], "train shards differ from the file's head"
assert val == data[len(data) - n_val:], "val shards differ from the file's tail"
assert len(train) + len(val) == os.path.getsize(src)
assert not [f for f in os.listdir(d) if f.endswith(".tmp")]
PY
}

# expect_fail NAME WORDS ARGS...: exit 1 with WORDS in stderr
expect_fail() {
    local name=$1 want=$2; shift 2
    "$TRAINC" data "$@" >"$d.stdout" 2>"$d.stderr"
    local rc=$?
    if [ $rc -ne 1 ]; then bad "$name (exit $rc, expected 1)"; cat "$d.stderr"; return; fi
    if ! grep -qF -- "$want" "$d.stderr"; then bad "$name (stderr lacks '$want')"; cat "$d.stderr"; return; fi
    ok "$name"
}

# the default: two shards whose token counts sum to the file size
if "$TRAINC" data text "$SRC" "$d" >"$d.stdout" 2>"$d.stderr"; then
    n=$(ls "$d" | wc -l)
    if [ "$n" -eq 2 ] && [ -f "$d/train_000000.bin" ] && [ -f "$d/val_000000.bin" ]; then
        ok "default: two shards"
    else
        bad "default: two shards (found: $(ls "$d"))"
    fi
    size=$(stat -c %s "$SRC")
    sum=$(awk '/^wrote .*: [0-9]+ tokens$/ {s += $(NF - 1)} END {print s + 0}' "$d.stdout")
    [ "$sum" = "$size" ] && ok "default: printed token counts sum to $size" \
                         || bad "default: printed counts sum to '$sum', file has $size"
    check_shards "default: shard contents" "$d" 0.1
else
    bad "default: exit $?"; cat "$d.stderr"
fi

# --val-frac 0: no val shard; 0.5: halves; --shard-tokens: several shards
"$TRAINC" data text "$SRC" "${d}_0" --val-frac 0 >/dev/null &&
    [ ! -e "${d}_0/val_000000.bin" ] && check_shards "val-frac 0" "${d}_0" 0 || bad "val-frac 0"
"$TRAINC" data text "$SRC" "${d}_half" --val-frac=0.5 >/dev/null &&
    check_shards "val-frac 0.5" "${d}_half" 0.5 || bad "val-frac 0.5"
"$TRAINC" data text --shard-tokens 4096 "$SRC" "${d}_split" --val-frac 0.25 >/dev/null &&
    [ -f "${d}_split/train_000006.bin" ] && [ ! -e "${d}_split/train_000007.bin" ] &&
    [ -f "${d}_split/val_000002.bin" ] && check_shards "shard-tokens" "${d}_split" 0.25 ||
    bad "shard-tokens"
# converting again replaces the shards (atomically, by rename)
"$TRAINC" data text "$SRC" "$d" >/dev/null && check_shards "again" "$d" 0.1 || bad "again"
# into the folder of a conversion with more shards: every shard it did not write is
# named (a glob for training would take them), none removed
touch "${d}_split/train_000042.bin"
"$TRAINC" data text "$SRC" "${d}_split" >/dev/null 2>"$d.stale" &&
    [ "$(grep -c "^  ${d}_split/train_0000[0-9][0-9].bin$" "$d.stale")" -eq 7 ] &&
    grep -q "^  ${d}_split/val_000001.bin$" "$d.stale" && grep -q "train_000042.bin" "$d.stale" &&
    [ -f "${d}_split/train_000006.bin" ] && ok "stale shards named, all of them" ||
    { bad "stale shards"; cat "$d.stale"; }

# bad input
: >"$d.empty"
printf x >"$d.one"
expect_fail missing_file   "nope.txt: cannot open"           text "$d/nope.txt" "${d}_x"
expect_fail empty_file     "is empty"                        text "$d.empty" "${d}_x"
expect_fail folder         "not a regular file"              text build "${d}_x"
expect_fail val_frac_big   "--val-frac must be a number in [0, 0.5], got '0.6'" text "$SRC" "${d}_x" --val-frac 0.6
expect_fail val_frac_neg   "got '-0.1'"                      text "$SRC" "${d}_x" --val-frac -0.1
expect_fail val_frac_word  "got 'lots'"                      text "$SRC" "${d}_x" --val-frac=lots
expect_fail val_frac_none  "--val-frac needs a value"        text "$SRC" "${d}_x" --val-frac
expect_fail val_too_small  "leaves no byte for validation"   text "$d.one" "${d}_x"
expect_fail shard_tokens   "--shard-tokens must be"          text "$SRC" "${d}_x" --shard-tokens 0
expect_fail unknown_option "unknown option '--vall-frac'"    text "$SRC" "${d}_x" --vall-frac 0.1
expect_fail no_dir         "missing the output folder"       text "$SRC"
expect_fail extra_arg      "unexpected argument 'more'"      text "$SRC" "${d}_x" more
expect_fail unknown_kind   "(known: fashion-mnist, text, sft, classify, tags, mlm, pairs, qa, images)" texts "$SRC" "${d}_x"
[ ! -e "${d}_x" ] && ok "bad input writes nothing" || bad "bad input wrote ${d}_x"
"$TRAINC" data fashion-mnist --help | grep -q "trainc data text FILE DIR" &&
    "$TRAINC" data fashion-mnist --help | grep -q "trainc data sft FILE.jsonl DIR" &&
    ok "usage lists the kinds" || bad "usage lists the kinds"
# a write that fails midway (here: shard 1's temporary name is taken by a folder; a
# full disk alike) leaves the folder as it was: shard 0, written before, is removed
mkdir -p "${d}_mid/train_000001.bin.part.tmp"
if "$TRAINC" data text "$SRC" "${d}_mid" --shard-tokens 10000 >/dev/null 2>"$d.mid.err"; then
    bad "a failed write exits 1"
elif grep -q "the files written before it are removed" "$d.mid.err" &&
     [ "$(ls "${d}_mid")" = "train_000001.bin.part.tmp" ]; then
    ok "a failed write leaves the folder as it was"
else bad "a failed write left: $(ls "${d}_mid") ($(cat "$d.mid.err"))"; fi
rm -rf "${d}_mid"

echo "data-text: $pass passed, $fail failed"
[ $fail -eq 0 ]
