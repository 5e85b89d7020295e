#!/usr/bin/env bash
# --set options are applied first and the rules between keys checked once, after the
# last (spec.c: spec_sets_done; the trainer's configure), so their order never matters:
# recompute=auto before the memory_budget_mb it needs, on every command that compiles
# (trainc run too, which compiles with some --set keys and hands all of them to the
# trainer), and the keys auto's count reads (distributed.*) in any order.
set -u
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
auto="--set recompute=auto"
budget="--set memory_budget_mb=100"
for cmd in check plan emit; do
    out=; [ $cmd = emit ] && out="-o $d/emit"
    for order in "$auto $budget" "$budget $auto"; do
        "$TRAINC" $cmd specs/mlp_fashion.json $order $out >/dev/null 2>"$d/err" &&
            ok "trainc $cmd $order" || { bad "trainc $cmd $order"; cat "$d/err"; }
    done
done
i=0
for order in "$auto $budget" "$budget $auto"; do
    i=$((i + 1))
    "$TRAINC" run specs/mlp_fashion.json $order --set max_steps=1 --set data.val=null \
        --threads 1 --quiet --out "$d/run$i" >/dev/null 2>"$d/err" &&
        ok "trainc run $order" || { bad "trainc run $order"; cat "$d/err"; }
done
a=$(head -1 "$d/run1/metrics.jsonl" | grep -o '"arena_bytes":[0-9]*')
b=$(head -1 "$d/run2/metrics.jsonl" | grep -o '"arena_bytes":[0-9]*')
[ -n "$a" ] && [ "$a" = "$b" ] && ok "both orders run the same plan ($a)" || bad "the plans differ: '$a' vs '$b'"
# auto's count under ZeRO reads strategy, ranks and budget: each order, the same choice
plan() { "$TRAINC" plan specs/gpt_char.json --set device=cpu "$@" | grep '^  recompute  '; }
z1="--set distributed.strategy=zero1"; r4="--set distributed.ranks=4"; b80="--set memory_budget_mb=80"
first=$(plan $auto $b80 $z1 $r4)
for order in "$r4 $z1 $b80 $auto" "$b80 $r4 $auto $z1"; do
    got=$(plan $order)
    [ -n "$first" ] && [ "$got" = "$first" ] && ok "plan $order: the same choice" ||
        bad "plan $order: '$got' vs '$first'"
done
exit $fail
