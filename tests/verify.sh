#!/usr/bin/env bash
# The verifier between passes and --dump-after (compiler/verify.c):
#   - every spec in specs/ under every recomputation policy and precision compiles with
#     the verifier's checks after each pass (def before use, the gradient hooks around
#     every parameter gradient write, no two live buffers sharing arena bytes, ...);
#     a broken rule aborts, so this fails on one (tried: memplan placing every buffer at
#     offset 0, and lower.c leaving out one rt_grad_begin, each abort naming the pass);
#   - the same with train.lora for the specs with linear layers, in bf16-mixed;
#   - --dump-after=PASS prints the graph or program after each pass to stderr, for
#     every command that compiles, and leaves stdout as it was;
#   - an unknown pass: exit 1 naming the passes.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
d=build/tests/verify
rm -rf "$d"; mkdir -p "$d"
n=0
for spec in specs/*.json; do
    for pol in none selective full; do
        for prec in fp32 bf16-mixed fp16-mixed; do
            "$TRAINC" check "$spec" --set recompute=$pol --set precision=$prec >"$d/out" 2>"$d/err" ||
                { echo "FAIL: $spec recompute=$pol precision=$prec:"; cat "$d/err"; exit 1; }
            n=$((n + 1))
        done
    done
done
"$TRAINC" check specs/gpt2_124m.json --set recompute=auto --set memory_budget_mb=20000 >/dev/null
# train.lora on every spec with linear layers to adapt: its nodes through every pass, and
# the frozen weights a GPU holds in 16 bits alone read by GEMMs alone (tried: an
# embedding's weight let into that group aborts, naming the embedding's instruction)
for spec in mlp_fashion gpt_char llama_char moe_char gemma3_270m gpt2_124m llama3_1b; do
    for pol in none full; do
        "$TRAINC" check specs/$spec.json --set lora.rank=4 --set lora.dropout=0.1 \
            --set recompute=$pol --set precision=bf16-mixed >"$d/out" 2>"$d/err" ||
            { echo "FAIL: $spec lora recompute=$pol:"; cat "$d/err"; exit 1; }
        n=$((n + 1))
    done
done
# train.freeze drops the instructions that write only frozen gradients, and with them
# what fed them alone (a loop that writes nothing is refused): a conv_transpose2d whose
# bias is frozen keeps no layout change of dy for the bias's row sum
cat >"$d/convt_freeze.json" <<'EOF'
{"trainc": 1,
 "model": {"name": "convt_freeze",
           "inputs": {"x": {"shape": [4, 4, 4], "dtype": "f32"}, "y": {"shape": [], "dtype": "i32", "classes": 5}},
           "layers": [{"op": "conv_transpose2d", "out": 3, "kernel": 3, "stride": 2, "padding": 1},
                      {"op": "leaky_relu"}, {"op": "flatten"}, {"op": "linear", "out": 5}],
           "loss": {"op": "cross_entropy", "target": "y"}},
 "train": {"data": {"train": {"x": "x.npy", "y": "y.npy"}}, "batch_size": 4, "epochs": 1,
           "optimizer": {"type": "sgd", "lr": 0.1}, "freeze": ["0.bias"]}}
EOF
"$TRAINC" check "$d/convt_freeze.json" --dump-after=memplan >/dev/null 2>"$d/convt_freeze.txt"
! grep -q "conv_transpose2d backward: \[B, out, OHW\] -> \[out, B, OHW\]" "$d/convt_freeze.txt" ||
    { echo "FAIL: a frozen conv_transpose2d bias: dy still turned to the GEMM's layout"; exit 1; }
echo "ok   the verifier after every pass: $n spec x policy x precision compiles, gpt2_124m under auto, a frozen conv_transpose2d bias"

passes="graph autodiff lower fusion residual recompute gemm-epilogues layernorm-sums grad-epilogues grad-hooks memplan"
"$TRAINC" check specs/gpt_char.json --set recompute=selective >"$d/plain"
for p in $passes; do
    "$TRAINC" check specs/gpt_char.json --set recompute=selective --dump-after=$p >"$d/out" 2>"$d/$p.txt"
    cmp -s "$d/plain" "$d/out" || { echo "FAIL: --dump-after=$p changed stdout"; exit 1; }
    grep -q "^== after $p: " "$d/$p.txt" || { echo "FAIL: --dump-after=$p printed:"; head -3 "$d/$p.txt"; exit 1; }
done
grep -q "rt_grad_begin" "$d/grad-hooks.txt" && ! grep -q "rt_grad_begin" "$d/grad-epilogues.txt"
grep -q "(recomputed)" "$d/recompute.txt" && ! grep -q "(recomputed)" "$d/residual.txt"
grep -q " @[0-9]* [0-9]*\.\.[0-9]*" "$d/memplan.txt"
grep -q "validation program" "$d/memplan.txt" && grep -q "the decode program of gpt_char" "$d/memplan.txt"
echo "ok   --dump-after: each of the $(echo $passes | wc -w) passes printed to stderr, stdout unchanged"
# the other commands that compile take it too (and a trainer never sees it)
"$TRAINC" plan specs/mlp_fashion.json --json --dump-after fusion 2>"$d/plan.txt" | python3 -c 'import json, sys; json.load(sys.stdin)'
grep -q "^== after fusion" "$d/plan.txt"
"$TRAINC" emit specs/mlp_fashion.json -o "$d/emit" --dump-after=memplan 2>"$d/emit.txt"
grep -q "^== after memplan" "$d/emit.txt" && [ -s "$d/emit/host.c" ]
"$TRAINC" run specs/mlp_fashion.json --dump-after=lower --set max_steps=1 --set data.val=null \
    --set validate.every_epochs=null --quiet --out "$d/run" 2>"$d/run.txt"
grep -q "^== after lower" "$d/run.txt" && [ -s "$d/run/model.safetensors" ]
echo "ok   --dump-after with plan --json, emit and run"
# plans compiled only to be compared (full's two ways, auto's candidates) are not
# dumped: one training program, the one emitted (its arena a row is plan.json's)
for a in "recompute=full" "recompute=auto --set memory_budget_mb=40 --set device=cpu"; do
    "$TRAINC" emit specs/gpt_char.json --set $a -o "$d/kept" --dump-after=memplan 2>"$d/kept.txt"
    n=$(grep -c "^== after memplan: the training program" "$d/kept.txt")
    row=$(sed -n 's/^== after memplan: the training program.*arena \([0-9]*\) bytes a row.*/\1/p' "$d/kept.txt")
    want=$(python3 -c 'import json, sys; p = json.load(open(sys.argv[1])); print(p["arena_bytes"] // p["batch_size"])' "$d/kept/plan.json")
    [ "$n" = 1 ] && [ "$row" = "$want" ] ||
        { echo "FAIL: --set $a --dump-after memplan: $n training programs, arena $row a row (plan.json: $want)"; exit 1; }
done
echo "ok   --dump-after shows the plan kept, once (full's two ways, auto's candidates)"

set +e
"$TRAINC" check specs/mlp_fashion.json --dump-after=fusoin >"$d/bad.out" 2>"$d/bad.err"
rc=$?
set -e
[ $rc = 1 ] && grep -q "no such pass (the passes, in order: graph, autodiff" "$d/bad.err" ||
    { echo "FAIL: an unknown pass exited $rc:"; cat "$d/bad.err"; exit 1; }
echo "ok   --dump-after with an unknown pass: exit 1, the passes named"
