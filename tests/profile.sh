#!/usr/bin/env bash
# --profile (runtime/prof.c): profile.json names every instruction of plan.json's list
# once, with plan.json's pass and "from: what" as its label (inside a repeat "from"
# ends with the iteration, " #3"), each in the kind of its pass and "what" (a repeat's
# blocks sum there), calls per step as the
# program runs them (accumulate 2: two), times that add up (forward + backward = the
# instructions' sum; the gradients' norm and the update one more entry, index null, pass
# "optimizer"; + other = the step); a profiled run's numbers are an unprofiled
# one's, bit for bit; too short a run says so and writes no profile; --profile with
# --eval is refused; a GAN's four functions are profiled as one step. (The times themselves are the machine's: not judged here.)
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=$(pwd)/build/tests/profile
rm -rf "$d"; mkdir -p "$d"
"$TRAINC" build specs/cnn_fashion.json -o "$d/t"
"$TRAINC" emit specs/cnn_fashion.json -o "$d/emit"
q=(--quiet --threads 2 --set data.val=null --set log_every=1)

# check PROFILE PLAN STEPS CALLS
check() {
    $PY - "$@" <<'PY'
import json, sys
prof, plan = (json.load(open(f)) for f in sys.argv[1:3])
steps, calls = int(sys.argv[3]), float(sys.argv[4])
ins = {i["index"]: i for i in plan["instructions"]}
opt = [i for i in prof["instructions"] if i["index"] is None]
assert len(opt) == 1 and opt[0]["pass"] == "optimizer" and opt[0]["ms"] > 0, opt
assert opt[0]["label"] == "step: the gradients' norm and the optimizer's update", opt
assert abs(opt[0]["ms"] - prof["optimizer_ms"]) <= 1e-9, (opt, prof)
got = {i["index"]: i for i in prof["instructions"] if i["index"] is not None}
assert prof["steps"] == steps and prof["device"] == "cpu", (prof["steps"], prof["device"])
assert sorted(got) == sorted(ins), (sorted(set(got) ^ set(ins)))
for k, g in got.items():
    p = ins[k]
    assert g["pass"] == p["pass"], (k, g, p)
    assert g["label"] == f'{p["from"]}: {p["what"]}', (g["label"], p)
    assert g["calls_per_step"] == calls and g["ms"] >= 0, g
for pas in ("forward", "backward"):
    s = sum(g["ms"] for g in got.values() if g["pass"] == pas)
    assert abs(s - prof[pas + "_ms"]) <= 1e-6 * max(s, 1e-9), (pas, s, prof)
# the kinds: every instruction in the one of its pass and "what", their times summed
kinds = {(k["pass"], k["what"]): k for k in prof["kinds"] if k["pass"] != "optimizer"}
assert len(kinds) == len(prof["kinds"]) - 1, "a kind listed twice"
for (pas, what), k in kinds.items():
    mine = [g for g in got.values() if g["pass"] == pas and ins[g["index"]]["what"] == what]
    assert len(mine) == k["instructions"] > 0, (k, len(mine))
    assert abs(sum(g["ms"] for g in mine) - k["ms"]) <= 1e-6 * max(k["ms"], 1e-9), k
assert sum(k["instructions"] for k in kinds.values()) == len(got)
total = prof["forward_ms"] + prof["backward_ms"] + prof["optimizer_ms"] + prof["other_ms"]
assert abs(total - prof["step_ms"]) <= 1e-6 * prof["step_ms"] and prof["step_ms"] > 0, prof
most = max(k["instructions"] for k in kinds.values())
print(f'{len(got)} instructions of {len(kinds)} kinds (at most {most} of one), {prof["step_ms"]:.2f} ms a step')
PY
}

"$d/t" --out "$d/plain" "${q[@]}" --set max_steps=20
"$d/t" --out "$d/prof" "${q[@]}" --set max_steps=20 --profile 2>"$d/prof.log"
r=$(check "$d/prof/profile.json" "$d/emit/plan.json" 18 1)
grep -q "trainc: profile of 18 steps (CPU time)" "$d/prof.log"
echo "ok   --profile: $r; the table printed"
cmp "$d/plain/model.safetensors" "$d/prof/model.safetensors"
diff <(grep -v '"event"' "$d/plain/metrics.jsonl" | sed 's/"samples_per_s.*//') \
     <(grep -v '"event"' "$d/prof/metrics.jsonl" | sed 's/"samples_per_s.*//')
echo "ok   --profile leaves the numbers alone: losses and final weights bit-identical"

# a repeat: each block's instructions are labelled with the iteration (" #2"), and the
# table sums each kind of work over the blocks
"$TRAINC" build specs/gpt_char.json -o "$d/g"
"$TRAINC" emit specs/gpt_char.json -o "$d/gemit"
"$d/g" --out "$d/gprof" "${q[@]}" --set max_steps=4 --set batch_size=2 --profile 2>"$d/gprof.log"
r=$(check "$d/gprof/profile.json" "$d/gemit/plan.json" 2 1)
grep -q '#3: attention' "$d/gprof/profile.json"
grep -q "what (the same work summed over the model)" "$d/gprof.log"
# (the kinds' sums in the JSON: the printed table holds the ten costliest, an order the
# machine's load can change)
grep -E -q '\{"pass":"backward","instructions":4,"ms":[0-9.e+-]+,"what":"attention backward' \
    "$d/gprof/profile.json"
echo "ok   --profile of gpt_char's 4 blocks: $r; the table by kind printed"

"$d/t" --out "$d/acc" "${q[@]}" --set max_steps=5 --set accumulate=2 --profile 2>/dev/null
r=$(check "$d/acc/profile.json" "$d/emit/plan.json" 3 2)
echo "ok   --profile with accumulate 2: every instruction twice a step ($r)"

# a GAN (runtime/gan_step.c): its four functions' instructions, each once a step, the
# two networks' updates the optimizer's entry; the numbers an unprofiled run's
"$TRAINC" build specs/dcgan_fashion.json -o "$d/gan" 2>/dev/null
"$TRAINC" emit specs/dcgan_fashion.json -o "$d/ganemit" >/dev/null
gq=(--quiet --threads 2 --set log_every=1 --set checkpoint=null --set batch_size=16 --set max_steps=5)
"$d/gan" --out "$d/ganplain" "${gq[@]}"
"$d/gan" --out "$d/ganprof" "${gq[@]}" --profile 2>"$d/ganprof.log"
r=$(check "$d/ganprof/profile.json" "$d/ganemit/plan.json" 3 1)
grep -q "trainc: profile of 3 steps (CPU time)" "$d/ganprof.log"
cmp "$d/ganplain/model.safetensors" "$d/ganprof/model.safetensors"
echo "ok   --profile of a GAN: $r; the weights an unprofiled run's"

"$d/t" --out "$d/short" "${q[@]}" --set max_steps=2 --profile 2>"$d/short.log"
grep -q "no step was profiled" "$d/short.log" && [ ! -e "$d/short/profile.json" ]
echo "ok   --profile on 2 steps: none profiled, said so, no profile.json"

set +e
"$d/t" --out "$d/bad" "${q[@]}" --profile --eval 2>"$d/bad.log"; rc=$?
set -e
[ $rc -eq 1 ] && grep -q "profile times training: not with --eval" "$d/bad.log" && [ ! -e "$d/bad" ]
echo "ok   --profile --eval: exit 1, nothing written"
