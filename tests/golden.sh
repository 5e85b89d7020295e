#!/usr/bin/env bash
# generated/<name>/ must be byte for byte what `trainc emit specs/<name>.json` writes today,
# however the spec's path is spelled.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
for spec in specs/*.json; do
    name=$(basename "$spec" .json)
    "$TRAINC" emit "$spec" -o "$tmp/$name"
    # the same file spelled otherwise (absolute, through ..) is the same input: same bytes
    "$TRAINC" emit "$PWD/specs/../$spec" -o "$tmp/$name.again"
    diff -r "$tmp/$name" "$tmp/$name.again" >/dev/null ||
        { echo "FAIL $name: emit is not deterministic (specs/ spelled $PWD/specs/../specs/)"; fail=1; }
    if [ ! -d "generated/$name" ]; then echo "FAIL $name: generated/$name is missing (run: make regen)"; fail=1; continue; fi
    if diff -ru "generated/$name" "$tmp/$name"; then echo "ok   $name"; else echo "FAIL $name: generated/$name is stale (run: make regen)"; fail=1; fi
done
# names a reader can map back to the spec: no tensor id left as a suffix (graph.c
# makes d_residual_attn_out_h_3_attn_179 and linear_h_3_fc_re_230 where a name
# repeats; emit_c.c's tidy_names keeps the plain name, or numbers replays x_re2, ...)
for pol in none selective full; do
    "$TRAINC" emit specs/gpt_char.json -o "$tmp/names_$pol" --set recompute=$pol
    if grep -nE '\b[a-z][a-z0-9_]*_[0-9]{3,}\b' "$tmp/names_$pol"/{host.c,model.h,kernels_cpu.c}; then
        echo "FAIL gpt_char recompute=$pol: a tensor name ends in its id (above)"; fail=1
    fi
done
# a description that names a tensor names the one the call reads: a replay's "from X as
# stored" names the replayed X_re it launches on (recompute.c), not the forward's X
${PYTHON:-/usr/bin/python3} - "$tmp"/names_*/host.c <<'PY' || fail=1
import re, sys
bad = 0
for f in sys.argv[1:]:
    for m in re.finditer(r'RT_AT\(\d+, (".*?")\);\n\s*(?:/\*.*?\*/\n\s*)?(rt_\w+\(.*?\);)', open(f).read(), re.S):
        what = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1)))
        for x in re.findall(r'from (\w+) as stored', what):
            if not re.search(r'\b%s\b' % x, m.group(2)):
                print("FAIL %s: '%s' but the call reads no %s" % (f, what, x)); bad = 1
sys.exit(bad)
PY
# a gradient with two contributions (a residual's input) is named for the sum, its
# parts d_x_part (autodiff.c): here the layernorm's part of d_dropout_2, summed with the
# residual's in the dropout's backward loop
cat > "$tmp/part.json" <<'EOF'
{"trainc": 1, "model": {"name": "part",
 "inputs": {"x": {"shape": [784], "dtype": "f32"}, "y": {"shape": [], "dtype": "i32", "classes": 10}},
 "layers": [{"op": "linear", "out": 64}, {"op": "relu"}, {"op": "dropout", "p": 0.1},
            {"op": "residual", "name": "res", "body": [{"op": "layernorm"}, {"op": "linear", "out": 64}]},
            {"op": "linear", "out": 10}],
 "loss": {"op": "cross_entropy", "target": "y"}},
 "train": {"data": {"train": {"x": "x.npy", "y": "y.npy"}}, "batch_size": 4}}
EOF
"$TRAINC" emit "$tmp/part.json" -o "$tmp/part"
grep -qE 'v0 = d_residual_res\[i\] \+ d_dropout_2_part\[i\]; /\* sum of gradient contributions' "$tmp/part/kernels_cpu.c" ||
    { echo "FAIL: the layernorm's part of d_dropout_2 is not named d_dropout_2_part"; grep -n 'sum of' "$tmp/part/kernels_cpu.c"; fail=1; }
# a GEMM whose bias stays out of its epilogue (a tanh follows: no cuBLASLt epilogue for
# it) says the loop after it adds the bias, and that loop does (ops/linear.c)
sed 's/{"op": "relu"}/{"op": "tanh"}/' "$tmp/part.json" > "$tmp/tanh.json"
"$TRAINC" emit "$tmp/tanh.json" -o "$tmp/tanh"
${PYTHON:-/usr/bin/python3} - "$tmp/tanh/host.c" <<'PY' || fail=1
import re, sys
ats = ["".join(re.findall(r'"((?:[^"\\]|\\.)*)"', a))
       for a in re.findall(r'RT_AT\(\d+, (".*?")\);', open(sys.argv[1]).read(), re.S)]
later = [i for i, a in enumerate(ats) if "+ b in the loop after it" in a]
ok = later and all(i + 1 < len(ats) and "linear epilogue: + bias" in ats[i + 1] for i in later)
if not ok:
    print("FAIL tanh.json: a GEMM's bias said to come in the loop after it:", ats[:4])
sys.exit(0 if ok else 1)
PY
# no fused CUDA kernel printed twice: one that is another's code over other tensors
# (gpt2_124m's GELU of blocks 10 and 11, whose longer names wrapped its signature
# otherwise) is launched as that one (emit_c.c: gpu_shape_text)
${PYTHON:-/usr/bin/python3} - generated/*/kernels_cuda.cu <<'PY' || fail=1
import re, sys
bad = 0
for f in sys.argv[1:]:
    seen = {}
    for name, params, body in re.findall(r'extern "C" __global__ void (\w+)\((.*?)\)\n\{(.*?)\n\}', open(f).read(), re.S):
        names = re.findall(r'(\w+)\s*(?:,|$)', params.replace("\n", " "))
        text = re.sub(r"/\*.*?\*/", "", params + body, flags=re.S)
        for k, n in enumerate(names):
            text = re.sub(r"(?<![A-Za-z0-9])%s(?!\w)" % n, "$%d" % k, text)
        text = " ".join(text.split())
        if text in seen:
            print("FAIL %s: %s is %s again" % (f, name, seen[text])); bad = 1
        seen.setdefault(text, name)
sys.exit(bad)
PY
# a row a sample reads as the batch size: "e->B", not "e->B * 1" (emit_c.c: drop_times_one)
if grep -nE 'e->B \* 1\b' generated/*/host.c; then echo "FAIL: e->B * 1 in host.c (above)"; fail=1; fi
exit $fail
