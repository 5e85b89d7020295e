#!/usr/bin/env bash
# recompute auto under ZeRO counts a rank's shard of the optimizer state for
# distributed.ranks (the rank count is not known when compiling: mpirun decides it),
# the same bytes as trainc plan --ranks's table; ddp, or no distributed.ranks, counts
# the whole state. gpt_char on the CPU at batch 16 with AdamW: recompute none takes
# 82.1 MiB (6.4 MiB of it the optimizer state), 77.3 MiB with zero1 over 4 ranks.
set -u
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
policy() {   # the policy auto picks for gpt_char on the CPU under an 80 MiB budget
    "$TRAINC" plan specs/gpt_char.json --set device=cpu --set recompute=auto \
        --set memory_budget_mb=80 "$@" | sed -n 's/^  recompute  *\([a-z]*\) (chosen by auto)$/\1/p'
}
for s in zero1 zero2; do
    p=$(policy --set distributed.strategy=$s --set distributed.ranks=4)
    [ "$p" = none ] && ok "$s over 4 ranks: auto keeps everything (recompute none fits 80 MiB)" ||
        bad "$s over 4 ranks: auto chose '$p', not none"
done
for args in "--set distributed.strategy=ddp --set distributed.ranks=4" \
            "--set distributed.strategy=zero1"; do
    p=$(policy $args)
    [ -n "$p" ] && [ "$p" != none ] && ok "$args: auto recomputes ($p): the whole state counted" ||
        bad "$args: auto chose '$p'"
done
# the total auto counts is the arena plus plan --ranks's zero1 row, byte for byte
out=$("$TRAINC" plan specs/gpt_char.json --set device=cpu --set distributed.strategy=zero1 \
      --set distributed.ranks=4 --ranks 4)
total=$(echo "$out" | sed -n 's/^  total  *\([0-9]*\) bytes.*/\1/p')
arena=$(echo "$out" | sed -n 's/^  arena  *\([0-9]*\) bytes.*/\1/p')
row=$(echo "$out" | awk '$1 == "zero1" {print $5}')
[ -n "$total" ] && [ -n "$row" ] && [ "$total" -eq $((arena + row)) ] &&
    ok "total $total = arena $arena + plan --ranks 4's zero1 row $row" ||
    bad "total '$total' is not arena '$arena' + zero1 row '$row'"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
rc=0
"$TRAINC" check specs/gpt_char.json --set distributed.ranks=0 2>"$d/zero.err" >/dev/null || rc=$?
[ $rc -eq 1 ] && ok "distributed.ranks=0 refused (exit 1)" || bad "distributed.ranks=0: exit $rc"
# the trainer counts the ranks it has: planned for 4, run on 1, the whole state is
# 82.1 MiB and does not fit: exit 1 before the first step, saying why
rc=0
"$TRAINC" run specs/gpt_char.json --set device=cpu --set recompute=auto --set memory_budget_mb=80 \
    --set distributed.strategy=zero1 --set distributed.ranks=4 --set max_steps=1 --quiet \
    --out "$d/run" 2>"$d/run.err" >/dev/null || rc=$?
[ $rc -eq 1 ] && grep -q "it needs 82.2 MiB.*planned for distributed.ranks 4 and this run has 1" "$d/run.err" &&
    ok "planned for 4 ranks, run on 1: exit 1, the ranks named" ||
    { bad "planned for 4 ranks, run on 1: exit $rc"; cat "$d/run.err"; }
exit $fail
