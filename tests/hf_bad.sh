#!/usr/bin/env bash
# trainc import hf and export hf on bad input, without transformers: a tiny Llama
# folder written here (tests/st_check.py's safetensors writer) imports, stored in F32
# or F16, and each broken copy of it (a tensor missing, misshapen, left over, stored as
# I32; no config.json; only pytorch_model.bin; an index naming a shard that is not
# there; a config value trainc cannot express; PEFT adapter files that do not pair or
# fit, for --adapter) exits 1 naming what is wrong, with nothing written; export refuses a spec that is no causal language model, layers no
# family has together and a weights file that does not fit, and gives the folder's tensors back bit for bit,
# also from a model spec whose embedding reads an input not named x.
set -u
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=build/tests/hf_bad
rm -rf "$d"; mkdir -p "$d"
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails + 1)); }

# make SRC [EDIT]: a Llama folder (d 16, 2 heads, 1 kv head, 1 layer, vocabulary 32,
# intermediate 24) with EDIT (python statements over `cfg` and `t`; `after`, a function
# of the weights file's path, runs once it is written) applied
make_folder() {
    mkdir -p "$1"
    $PY - "$1" "${2:-}" <<'PY'
import json, os, sys
import numpy as np
sys.path.insert(0, "tests")
import st_check
out, edit = sys.argv[1], sys.argv[2]
r = np.random.default_rng(0)
f = lambda *s: r.standard_normal(s).astype(np.float32)
cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32,
       "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 1,
       "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 16,
       "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
       "torch_dtype": "float32"}
p = "model.layers.0."
t = {"model.embed_tokens.weight": f(32, 16), p + "input_layernorm.weight": f(16),
     p + "self_attn.q_proj.weight": f(16, 16), p + "self_attn.k_proj.weight": f(8, 16),
     p + "self_attn.v_proj.weight": f(8, 16), p + "self_attn.o_proj.weight": f(16, 16),
     p + "post_attention_layernorm.weight": f(16), p + "mlp.gate_proj.weight": f(24, 16),
     p + "mlp.up_proj.weight": f(24, 16), p + "mlp.down_proj.weight": f(16, 24),
     "model.norm.weight": f(16), "lm_head.weight": f(32, 16)}
after = None
exec(edit)
json.dump(cfg, open(os.path.join(out, "config.json"), "w"))
if t is not None:
    st_check.save(os.path.join(out, "model.safetensors"), t)
if after:
    after(os.path.join(out, "model.safetensors"))
PY
}

# refused NAME WORDS... -- ARGS: exit 1, stderr holding every word, OUT not made
refused() {
    local name=$1; shift
    local words=()
    while [ "$1" != -- ]; do words+=("$1"); shift; done; shift
    "$TRAINC" "$@" >"$d/out.txt" 2>"$d/err.txt"
    local rc=$? all=1
    for w in "${words[@]}"; do grep -qF -- "$w" "$d/err.txt" || all=0; done
    if [ $rc -eq 1 ] && [ $all = 1 ] && [ ! -e "$d/out" ]; then ok "$name: $(head -c 160 "$d/err.txt")"
    else bad "$name: exit $rc, wanted 1 and '${words[*]}': $(cat "$d/err.txt")"; fi
}

make_folder "$d/good"
if "$TRAINC" import hf "$d/good" -o "$d/good_out" >/dev/null &&
   "$TRAINC" check "$d/good_out/model.json" "$d/good_out/train.json" >/dev/null; then
    ok "a Llama folder imports; its model.json and train.json check"
else bad "the good folder did not import and check"; fi

# F16 tensors read as fp32: the same weights as the F32 folder of the same values
make_folder "$d/f16" 't = {n: a.astype(np.float16) for n, a in t.items()}'
make_folder "$d/f16_as_f32" 't = {n: a.astype(np.float16).astype(np.float32) for n, a in t.items()}'
if "$TRAINC" import hf "$d/f16" -o "$d/f16_out" >/dev/null &&
   "$TRAINC" import hf "$d/f16_as_f32" -o "$d/f16_as_f32_out" >/dev/null &&
   cmp -s "$d/f16_out/init.safetensors" "$d/f16_as_f32_out/init.safetensors"; then
    ok "an F16 folder imports to the fp32 of its values"
else bad "an F16 folder did not import to the fp32 of its values"; fi

make_folder "$d/missing" 'del t[p + "self_attn.k_proj.weight"]'
refused "a tensor missing" "model.layers.0.self_attn.k_proj.weight" -- import hf "$d/missing" -o "$d/out"
make_folder "$d/shape" 't[p + "mlp.up_proj.weight"] = f(24, 8)'
refused "a tensor misshapen" "mlp.up_proj.weight" "[24, 8]" "[24, 16]" -- import hf "$d/shape" -o "$d/out"
make_folder "$d/extra" 't[p + "mlp.up_proj.bias"] = f(24)'
refused "a tensor left over" "mlp.up_proj.bias" "no place" -- import hf "$d/extra" -o "$d/out"
# F32 relabelled I32 in the header: the same length, the same bytes
make_folder "$d/i32" 'def after(path):
    b = open(path, "rb").read()
    k = b.index(b"\"model.norm.weight\":{\"dtype\":\"F32\"")
    open(path, "wb").write(b[:k + 30] + b"I" + b[k + 31:])'
refused "an I32 tensor" "model.norm.weight" "I32" -- import hf "$d/i32" -o "$d/out"
make_folder "$d/heads" 'cfg["num_key_value_heads"] = 3'
refused "kv heads not dividing heads" "num_key_value_heads" -- import hf "$d/heads" -o "$d/out"
make_folder "$d/act" 'cfg["hidden_act"] = "swiglu_9000"'
refused "hidden_act unknown" "hidden_act" "swiglu_9000" -- import hf "$d/act" -o "$d/out"
make_folder "$d/arch" 'cfg["architectures"] = ["LlamaForQuestionAnswering"]'
refused "a question answering head" "LlamaForQuestionAnswering" -- import hf "$d/arch" -o "$d/out"
make_folder "$d/tokcls" 'cfg["architectures"] = ["LlamaForTokenClassification"]'
refused "a token classifier without its score" "no tensor 'score.weight'" -- import hf "$d/tokcls" -o "$d/out"
make_folder "$d/seqcls" 'cfg["architectures"] = ["LlamaForSequenceClassification"]'
refused "a sequence classifier without its score" "no tensor 'score.weight'" -- import hf "$d/seqcls" -o "$d/out"
make_folder "$d/mlp_bias" 'cfg["mlp_bias"] = True'
refused "mlp_bias" "mlp_bias" -- import hf "$d/mlp_bias" -o "$d/out"
make_folder "$d/window" 'cfg["sliding_window"] = 8'
refused "a Llama with a sliding_window" "sliding_window" "does not know for llama" -- import hf "$d/window" -o "$d/out"
make_folder "$d/noweights" 't = None; open(os.path.join(out, "pytorch_model.bin"), "w").write("x")'
refused "only pytorch_model.bin" "pytorch_model.bin" "safe_serialization" -- import hf "$d/noweights" -o "$d/out"
make_folder "$d/index" 't = None; json.dump({"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}}, open(os.path.join(out, "model.safetensors.index.json"), "w"))'
refused "an index naming a missing shard" "model-00001-of-00002.safetensors" -- import hf "$d/index" -o "$d/out"
mkdir -p "$d/empty"
refused "no config.json" "config.json" -- import hf "$d/empty" -o "$d/out"
refused "import of another format" "hf" -- import onnx "$d/good" -o "$d/out"
refused "an unknown option" "--sequence-len" -- import hf "$d/good" -o "$d/out" --sequence-len 8

# import --adapter: PEFT's adapter files (written here: no peft needed) beside the good
# folder; a merge of B = 0 gives the plain import's bytes; broken ones exit 1
# adapter NAME EDIT: DIR/NAME with adapter_config.json and adapter_model.safetensors
# (lora_A [2, 16], lora_B [8, 2] on k_proj, an embedding's pair), EDIT applied to `cfg`
# and `t`
adapter() {
    mkdir -p "$d/$1"
    $PY - "$d/$1" "$2" <<'PY'
import json, os, sys
import numpy as np
sys.path.insert(0, "tests")
import st_check
out, edit = sys.argv[1:3]
m = "base_model.model.model."
cfg = {"peft_type": "LORA", "r": 2, "lora_alpha": 4, "bias": "none", "use_rslora": False,
       "target_modules": ["k_proj", "embed_tokens"], "task_type": "CAUSAL_LM"}
t = {m + "layers.0.self_attn.k_proj.lora_A.weight": np.ones((2, 16), np.float32),
     m + "layers.0.self_attn.k_proj.lora_B.weight": np.zeros((8, 2), np.float32),
     m + "embed_tokens.lora_embedding_A": np.ones((2, 32), np.float32),
     m + "embed_tokens.lora_embedding_B": np.zeros((16, 2), np.float32)}
exec(edit)
json.dump(cfg, open(os.path.join(out, "adapter_config.json"), "w"))
if t is not None:
    st_check.save(os.path.join(out, "adapter_model.safetensors"), t)
PY
}
adapter zero ''
if "$TRAINC" import hf "$d/good" --adapter "$d/zero" -o "$d/zero_out" >/dev/null &&
   cmp -s "$d/zero_out/init.safetensors" "$d/good_out/init.safetensors"; then
    ok "import --adapter of adapters with B zero: the plain import's bytes"
else bad "import --adapter of adapters with B zero did not give the plain import's bytes"; fi
# bad_adapter NAME EDIT WHAT WORDS...: adapter NAME EDIT, then import --adapter of it refused
bad_adapter() {
    local name=$1 edit=$2 what=$3; shift 3
    adapter "$name" "$edit"
    refused "$what" "$@" -- import hf "$d/good" --adapter "$d/$name" -o "$d/out"
}
bad_adapter dora 'cfg["use_dora"] = True' \
    "--adapter with use_dora" "use_dora"
bad_adapter lone 'del t[m + "layers.0.self_attn.k_proj.lora_B.weight"]' \
    "--adapter, an A without its B" "k_proj.lora_A.weight" "no lora_B.weight"
bad_adapter loneB 'del t[m + "embed_tokens.lora_embedding_A"]' \
    "--adapter, a B without its A" "lora_embedding_B" "no lora_A"
bad_adapter rank 't[m + "layers.0.self_attn.k_proj.lora_B.weight"] = np.zeros((8, 3), np.float32)' \
    "--adapter, ranks apart" "not a rank-r pair"
bad_adapter shape 't[m + "layers.0.self_attn.k_proj.lora_B.weight"] = np.zeros((16, 2), np.float32)' \
    "--adapter, B for another weight" "do not fit" "k_proj.weight"
bad_adapter name 't["k_proj.lora_A.weight"] = np.ones((2, 16), np.float32)' \
    "--adapter, a tensor of no adapter" "k_proj.lora_A.weight" "not a LoRA adapter"
bad_adapter bin 't = None; open(os.path.join(out, "adapter_model.bin"), "w").write("x")' \
    "--adapter, adapter_model.bin alone" "adapter_model.bin" "safe_serialization"
bad_adapter notjson 'cfg = []' \
    "--adapter, a config not an object" "adapter_config.json"
refused "--adapter without its folder" "--adapter" -- import hf "$d/good" -o "$d/out" --adapter

g=$d/good_out
refused "export of an MLP" "layers[0]" "flatten" -- export hf specs/mlp_fashion.json --weights "$g/init.safetensors" -o "$d/out"
refused "export with the weights of another model" "embed.weight" "the spec's model has it" -- \
    export hf "$g/model.json" "$g/train.json" --weights "$d/good/model.safetensors" -o "$d/out"
refused "export without --weights" "--weights" -- export hf "$g/model.json" "$g/train.json" -o "$d/out"
# attention options no family has together: a scale (Granite's) with a window
# (Mistral's); a soft-cap (Gemma 2's) on the Llama
# the Llama's spec with its norms made NORM and its attention's options updated by ATT:
# a windowed attention with a scale, a soft-cap; layernorms and a window (StableLM has
# none); a partial rope on rmsnorms with a window (GLM's, which has none); qk_norm over
# all heads in Llama's blocks (OLMo 2's alone)
$PY - "$g/model.json" "$g" <<'PY'
import json, sys
for out, norm, att in (("scaled", "rmsnorm", {"scale": 0.3, "window": 8}),
                       ("capped", "rmsnorm", {"softcap": 50}),
                       ("lnorm", "layernorm", {"window": 4}),
                       ("partial", "rmsnorm", {"rope": {"theta": 10000, "dims": 4}, "window": 8}),
                       ("allheads", "rmsnorm", {"qk_norm": "all_heads"})):
    s = json.load(open(sys.argv[1]))
    def walk(layers):
        for l in layers:
            if l["op"] == "rmsnorm":
                l["op"] = norm
            if l["op"] == "attention":
                l.update(att)
            walk(l.get("body", []))
    walk(s["model"]["layers"])
    json.dump(s, open("%s/%s.json" % (sys.argv[2], out), "w"))
PY
refused "export of a windowed attention with a scale" "Granite" "window" -- \
    export hf "$g/scaled.json" "$g/train.json" --weights "$g/init.safetensors" -o "$d/out"
refused "export of a Llama with a soft-cap" "softcap" "Gemma 2" -- \
    export hf "$g/capped.json" "$g/train.json" --weights "$g/init.safetensors" -o "$d/out"
# a norm closing each branch without Gemma's embedding scale: no family has that
$PY - "$g/model.json" "$g/postnorm.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
for r in s["model"]["layers"][1]["body"]:
    r["body"].append({"op": "rmsnorm"})
json.dump(s, open(sys.argv[2], "w"))
PY
refused "export of a Llama with norms closing its branches" "only Gemma 2 and 3" -- \
    export hf "$g/postnorm.json" "$g/train.json" --weights "$g/init.safetensors" -o "$d/out"
# qk_norm "all_heads" is OLMo 2's (norms after the branches alone), and OLMo 2's is that
$PY - "$g/postnorm.json" "$g/olmo2_head.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
for r in s["model"]["layers"][1]["body"]:
    r["body"] = r["body"][1:]
    if r["body"][0]["op"] == "attention":
        r["body"][0]["qk_norm"] = True
json.dump(s, open(sys.argv[2], "w"))
PY
refused "export of a Llama with qk_norm over all heads" "all_heads" "only OLMo 2" -- \
    export hf "$g/allheads.json" "$g/train.json" --weights "$g/init.safetensors" -o "$d/out"
refused "export of OLMo 2's blocks with a per-head qk_norm" "OLMo 2" "all_heads" -- \
    export hf "$g/olmo2_head.json" "$g/train.json" --weights "$g/init.safetensors" -o "$d/out"
# a mixture of experts is Mixtral's (its weights renormalized, no qk_norm, no bias) or
# OLMoE's (qk_norm over all heads): not with the weights as the router gives them alone,
# nor with attention biases; with a shared expert Qwen2-MoE's (gated, bias "qkv"); with
# Granite's factors (here the attention's scale) Granite-MoE's (renormalized)
$PY - "$g/model.json" "$g" <<'PY'
import json, sys
for out, moe, att in (("moe_unnormed", {"norm_topk": False}, {}),
                      ("moe_bias", {}, {"bias": True}),
                      ("moe_shared_ungated", {"shared": 8}, {"bias": "qkv"}),
                      ("moe_shared_unbiased", {"shared": 8, "shared_gate": True}, {}),
                      ("moe_granite_unnormed", {"norm_topk": False}, {"scale": 0.4})):
    s = json.load(open(sys.argv[1]))
    rep = s["model"]["layers"][1]
    attn, mlp = rep["body"]
    mlp["body"][1:] = [dict({"op": "moe", "name": "moe", "experts": 4, "top_k": 2, "hidden": 8}, **moe)]
    attn["body"][1].update(att)
    json.dump(s, open("%s/%s.json" % (sys.argv[2], out), "w"))
PY
refused "export of a mixture of experts without renormalized weights or qk_norm" "Mixtral" "norm_topk" -- \
    export hf "$g/moe_unnormed.json" "$g/train.json" --weights "$g/init.safetensors" -o "$d/out"
refused "export of a mixture of experts with attention biases" "Mixtral" "bias" -- \
    export hf "$g/moe_bias.json" "$g/train.json" --weights "$g/init.safetensors" -o "$d/out"
refused "export of Granite's factors over unrenormalized experts" "Granite-MoE" "norm_topk" -- \
    export hf "$g/moe_granite_unnormed.json" "$g/train.json" --weights "$g/init.safetensors" -o "$d/out"
refused "export of a shared expert without its gate" "Qwen2-MoE" "shared_gate" -- \
    export hf "$g/moe_shared_ungated.json" "$g/train.json" --weights "$g/init.safetensors" -o "$d/out"
refused "export of a gated shared expert without q, k and v biases" "Qwen2-MoE" "qkv" -- \
    export hf "$g/moe_shared_unbiased.json" "$g/train.json" --weights "$g/init.safetensors" -o "$d/out"
# layernorms without learned positions and a glu make the model StableLM, which has no
# window; a partial rope (rope dims) on rmsnorms is GLM's, which has no window
refused "export of a Llama with layernorms (StableLM's) and a window" "StableLM" "window" -- \
    export hf "$g/lnorm.json" "$g/train.json" --weights "$g/init.safetensors" -o "$d/out"
refused "export of a Llama with a partial rope and a window" "partial rope" "GLM" "window" -- \
    export hf "$g/partial.json" "$g/train.json" --weights "$g/init.safetensors" -o "$d/out"
# the branches in parallel (GPT-NeoX's block: the attention's residual the MLP's
# shortcut) are GPT-NeoX's, Falcon's, Phi's and Cohere's alone: not Llama's; layernorms
# without bias one after the other are no family's (Cohere's are off one norm)
$PY - "$g/model.json" "$g/parallel.json" "$g/nobias.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
rep = s["model"]["layers"][1]
attn, mlp = rep["body"]
rep["body"] = [dict(mlp, shortcut=[attn])]
json.dump(s, open(sys.argv[2], "w"))
for l in [s["model"]["layers"][2], mlp["body"][0], attn["body"][0]]:
    l.update(op="layernorm", bias=False)
rep["body"] = [attn, mlp]
json.dump(s, open(sys.argv[3], "w"))
PY
refused "export of a Llama with its branches in parallel" "in parallel" "only GPT-NeoX" -- \
    export hf "$g/parallel.json" "$g/train.json" --weights "$g/init.safetensors" -o "$d/out"
refused "export of layernorms without bias one after the other" "without bias" "Cohere" -- \
    export hf "$g/nobias.json" "$g/train.json" --weights "$g/init.safetensors" -o "$d/out"
if "$TRAINC" export hf "$g/model.json" "$g/train.json" --weights "$g/init.safetensors" -o "$d/back" >/dev/null &&
   $PY - "$d/good/model.safetensors" "$d/back/model.safetensors" <<'PY'
import sys
import numpy as np
sys.path.insert(0, "tests")
import st_check
a, b = st_check.load(sys.argv[1]), st_check.load(sys.argv[2])
assert a.keys() == b.keys(), (sorted(a), sorted(b))
assert all(np.array_equal(a[n], b[n]) for n in a)
PY
then ok "import then export: the folder's tensors bit for bit"
else bad "import then export did not give the folder's tensors back"; fi
# the model spec and the training spec as two files, the token input renamed and the
# embedding naming none (the first input feeds it): the same export as above
$PY - "$g/model.json" "$g/renamed.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
m = s["model"]
m["inputs"] = {"ids" if k == "x" else k: v for k, v in m["inputs"].items()}
del m["layers"][0]["input"]
json.dump(s, open(sys.argv[2], "w"))
PY
if "$TRAINC" export hf "$g/renamed.json" "$g/train.json" --weights "$g/init.safetensors" \
       -o "$d/renamed" >/dev/null &&
   cmp -s "$d/back/config.json" "$d/renamed/config.json" &&
   cmp -s "$d/back/model.safetensors" "$d/renamed/model.safetensors"
then ok "export of two spec files, the input renamed: the same config.json and tensors"
else bad "export of two spec files with the input renamed differs or failed"; fi

[ $fails = 0 ] && echo "all hf bad-input checks passed" || { echo "$fails failed"; exit 1; }
