#!/usr/bin/env bash
# loader.augment (random crop with zero padding, horizontal flip): the transform and its
# draws against PyTorch's (tests/augment.py, through tests/augment_check.c), then in
# training on Fashion-MNIST, a small CNN with a crop of padding 2 and flips, threads 1:
#   - runs with 0 and 3 loader workers give the same records and weights bit for bit
#     (each image's draw depends on (seed, epoch, index) only, not on the thread);
#   - a run stopped mid-epoch (max_steps 175: batch 19 of epoch 1, 156 batches an
#     epoch) and resumed to step 200 gives the records and weights of the run straight
#     to 200 (the draws of epoch 1 continue where they stopped);
#   - without loader.augment the losses differ from the first step on (it is on), and
#     validation is never augmented: an --eval of the same weights gives the same
#     numbers with and without it.
# And an input shifted by channel: a crop refused without "fill": "raw", flips alone
# and "fill": "raw" taken.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=$(pwd)/build/tests/augment
rm -rf "$d"; mkdir -p "$d"
cc -std=gnu11 -O1 -Iruntime tests/augment_check.c build/librt.a -lcjson -lopenblas -lz -lm \
    -lpthread -ldl $(mpicc --showme:link 2>/dev/null || echo -lmpi) -o "$d/augment_check"
$PY tests/augment.py "$d/augment_check" "$d"

$PY - "$d" "$(pwd)/data/fashion" <<'PY'
import json, sys
d, data = sys.argv[1], sys.argv[2]
conv = lambda out, **k: dict({"op": "conv2d", "out": out, "kernel": 3, "padding": 1}, **k)
spec = {"trainc": 1,
        "model": {"name": "aug_cnn",
                  "inputs": {"x": {"shape": [1, 28, 28], "dtype": "u8", "scale": 1 / 255},
                             "y": {"shape": [], "dtype": "i32", "classes": 10}},
                  "layers": [conv(8, stride=2), {"op": "relu"}, conv(8, stride=2), {"op": "relu"},
                             {"op": "flatten"}, {"op": "linear", "out": 10}],
                  "loss": {"op": "cross_entropy", "target": "y", "label_smoothing": 0.1}},
        "train": {"data": {"train": {"x": f"{data}/test_x.npy", "y": f"{data}/test_y.npy"},
                           "val": {"x": f"{data}/test_x.npy", "y": f"{data}/test_y.npy"}},
                  "batch_size": 64, "epochs": 5, "log_every": 1,
                  "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": True},
                  "validate": {"every_steps": 20, "batches": 4},
                  "loader": {"augment": {"random_crop": {"padding": 2}, "hflip": True}}}}
json.dump(spec, open(f"{d}/aug.json", "w"), indent=1)
PY
# 10000 rows (the test set as training data), batch 64: 156 batches an epoch
"$TRAINC" build "$d/aug.json" -o "$d/trainer"
common=(--threads 1 --quiet --set checkpoint.every_steps=10)
"$d/trainer" --out "$d/ref" "${common[@]}" --set max_steps=200 --set loader.workers=0
"$d/trainer" --out "$d/workers" "${common[@]}" --set max_steps=200 --set loader.workers=3
"$d/trainer" --out "$d/cut" "${common[@]}" --set max_steps=175 --set loader.workers=0
"$d/trainer" --resume "$d/cut" "${common[@]}" --set max_steps=200 --set loader.workers=0
"$d/trainer" --out "$d/plain" "${common[@]}" --set max_steps=5 --set loader.augment=null
$PY - "$d" <<'PY'
import json, sys
d = sys.argv[1]
def recs(run):
    out = []
    for l in open(f"{d}/{run}/metrics.jsonl"):
        r = json.loads(l)
        if "event" not in r:
            out.append({k: r[k] for k in ("step", "epoch", "loss", "grad_norm", "val_loss", "val_acc") if k in r})
    return out
ref, workers, cut, plain = recs("ref"), recs("workers"), recs("cut"), recs("plain")
assert len([r for r in ref if "loss" in r]) == 200, len(ref)
assert ref == workers, next((a, b) for a, b in zip(ref, workers) if a != b)
print("ok   0 and 3 loader workers: the same", len(ref), "records")
assert ref == cut, next(((a, b) for a, b in zip(ref, cut) if a != b), (len(ref), len(cut)))
starts = [json.loads(l) for l in open(f"{d}/cut/metrics.jsonl") if '"start"' in l]
assert len(starts) == 2 and starts[1].get("resumed_from") == 175, starts
print("ok   stopped at step 175 (batch 19 of epoch 1), resumed: the same records as straight through")
a = [r["loss"] for r in ref if "loss" in r][:5]
b = [r["loss"] for r in plain if "loss" in r]
assert all(x != y for x, y in zip(a, b)), (a, b)
print("ok   augmentation changes every one of the first 5 losses:", a[0], "vs", b[0])
PY
cmp "$d/ref/model.safetensors" "$d/workers/model.safetensors"
cmp "$d/ref/model.safetensors" "$d/cut/model.safetensors"
# validation is not augmented: --eval of the same weights with and without it
"$d/trainer" --init "$d/ref/model.safetensors" --eval --threads 1 --quiet > "$d/eval_aug.txt"
"$d/trainer" --init "$d/ref/model.safetensors" --eval --threads 1 --quiet --set loader.augment=null > "$d/eval_plain.txt"
# (the records' time_s aside: it is the clock's)
diff <(sed 's/,"time_s":[0-9.e+-]*//' "$d/eval_aug.txt") <(sed 's/,"time_s":[0-9.e+-]*//' "$d/eval_plain.txt")
echo "ok   --eval: the same numbers with and without loader.augment"
# the same images on the GPU: with the data kept on the device (loader.on_gpu always)
# the crops and flips run there (data.cuh's rt_gather_augment), here on the fake GPU of
# tests/fake_gpu.sh (kernels emulated on the CPU, GEMMs by OpenBLAS in another order):
# every loss and validation number within 1e-6 of the CPU's (other images would be
# off by 1e-3 and more: without augmentation the first loss moves by 1e-3)
. tests/fake_gpu/libs.sh   # gpu, fbuild
fbuild "$d/aug.json" -o "$d/trainer_both"
sets=(--threads 1 --quiet --set max_steps=10 --set validate.every_steps=5)
"$d/trainer_both" --device cpu --out "$d/cpu" "${sets[@]}"
gpu "$d/trainer_both" --device cuda --out "$d/gpu" "${sets[@]}" \
    --set loader.on_gpu=always
$PY - "$d" <<'PY'
import json, sys
d = sys.argv[1]
def nums(run):
    rs = [json.loads(l) for l in open(f"{d}/{run}/metrics.jsonl")]
    start = [r for r in rs if r.get("event") == "start"][0]
    return start, [(r["step"], k, r[k]) for r in rs if "event" not in r for k in ("loss", "val_loss", "val_acc") if k in r]
(sc, a), (sg, b) = nums("cpu"), nums("gpu")
assert sc["device"] == "cpu" and sg["device"] == "cuda" and sg["device_data_bytes"] > 0, (sc, sg)
assert [x[:2] for x in a] == [x[:2] for x in b] and len(a) >= 12, (a, b)
worst = max(abs(x[2] - y[2]) / max(abs(x[2]), 1e-6) for x, y in zip(a, b))
assert worst <= 1e-6, (worst, a, b)
print(f"ok   fake GPU, data and augmentation on the device: {len(a)} numbers within {worst:.1e} of the CPU's")
PY

# an input shifted by channel (ImageNet's normalization): a crop's zero padding needs a
# shift of 0 (refused, naming "fill": "raw"), flips alone pad nothing, and "fill": "raw"
# pads raw 0s (black pixels before scale and shift, as torchvision's RandomCrop before
# Normalize): the checks pass and a run trains
$PY - "$d" <<'PY'
import json, sys
d = sys.argv[1]
s = json.load(open(f"{d}/aug.json"))
s["model"]["inputs"]["x"].update(scale=[0.0171], shift=[-2.0])
for name, aug in (("crop", {"random_crop": {"padding": 2}}), ("flip", {"hflip": True}),
                  ("raw", {"random_crop": {"padding": 2, "fill": "raw"}, "hflip": True})):
    t = json.loads(json.dumps(s))
    t["train"]["loader"]["augment"] = aug
    json.dump(t, open(f"{d}/shifted_{name}.json", "w"))
PY
if "$TRAINC" check "$d/shifted_crop.json" > "$d/crop.log" 2>&1 ||
   ! grep -q 'random_crop: random_crop pads with zeros.*"fill": "raw" pads with raw 0s' "$d/crop.log"; then
    cat "$d/crop.log"; echo "FAIL: a crop's zero padding of a shifted input"; exit 1
fi
"$TRAINC" check "$d/shifted_flip.json" > /dev/null
"$TRAINC" run "$d/shifted_raw.json" --threads 1 --quiet --out "$d/raw" --set max_steps=3 \
    --set validate.every_steps=null --set validate.every_epochs=null
echo "ok   a shifted input: a crop's zero padding refused (fill raw named), flips alone and fill raw train"

# random_resized_crop (torchvision's RandomResizedCrop, Pillow's bilinear), flips and
# color_jitter (brightness and contrast) on the same CNN, epochs of 20 batches: 0 and 3
# loader workers, and a run stopped in epoch 1 (step 30) and resumed, give the records
# and weights of the run straight to step 50; on the fake GPU (the crops resampled and
# jittered on the device, data.cuh's rt_gather_resized_crop and rt_color_jitter) every
# number within 1e-6 of the CPU's. An f32 image input, random_crop beside it, and
# color_jitter on 2 channels are refused.
$PY - "$d" <<'PY'
import json, sys
d = sys.argv[1]
s = json.load(open(f"{d}/aug.json"))
s["model"]["name"] = "rrc_cnn"
s["train"]["loader"]["augment"] = {"random_resized_crop": {"scale": [0.25, 1]}, "hflip": True,
                                   "color_jitter": {"brightness": 0.4, "contrast": 0.4}}
s["train"]["limit_train_batches"] = 20
json.dump(s, open(f"{d}/rrc.json", "w"), indent=1)
s["model"]["inputs"]["x"]["dtype"] = "f32"
json.dump(s, open(f"{d}/rrc_f32.json", "w"))
s["model"]["inputs"]["x"]["dtype"] = "u8"
s["train"]["loader"]["augment"]["random_crop"] = {"padding": 2}
json.dump(s, open(f"{d}/rrc_both.json", "w"))
s["train"]["loader"]["augment"] = {"color_jitter": {"saturation": 0.4}}
s["model"]["inputs"]["x"]["shape"] = [2, 14, 28]
json.dump(s, open(f"{d}/jitter_2ch.json", "w"))
PY
fbuild "$d/rrc.json" -o "$d/rrc_trainer"
rrc=(--threads 1 --quiet --set checkpoint.every_steps=10 --set validate.every_steps=25)
"$d/rrc_trainer" --device cpu --out "$d/rrc_ref" "${rrc[@]}" --set max_steps=50 --set loader.workers=0
"$d/rrc_trainer" --device cpu --out "$d/rrc_workers" "${rrc[@]}" --set max_steps=50 --set loader.workers=3
"$d/rrc_trainer" --device cpu --out "$d/rrc_cut" "${rrc[@]}" --set max_steps=30 --set loader.workers=0
"$d/rrc_trainer" --device cpu --resume "$d/rrc_cut" "${rrc[@]}" --set max_steps=50 --set loader.workers=0
"$d/rrc_trainer" --device cpu --out "$d/rrc_plain" "${rrc[@]}" --set max_steps=3 --set loader.augment=null
gpu "$d/rrc_trainer" --device cuda --out "$d/rrc_gpu" "${rrc[@]}" --set max_steps=10 --set loader.on_gpu=always
$PY - "$d" <<'PY'
import json, sys
d = sys.argv[1]
def recs(run):
    return [{k: r[k] for k in ("step", "epoch", "loss", "grad_norm", "val_loss", "val_acc") if k in r}
            for r in map(json.loads, open(f"{d}/{run}/metrics.jsonl")) if "event" not in r]
ref, workers, cut, plain, gpu = (recs(r) for r in ("rrc_ref", "rrc_workers", "rrc_cut", "rrc_plain", "rrc_gpu"))
start = [json.loads(l) for l in open(f"{d}/rrc_gpu/metrics.jsonl") if '"start"' in l][0]
assert start["device"] == "cuda" and start["device_data_bytes"] > 0, start
assert len([r for r in ref if "loss" in r]) == 50 and ref == workers and ref == cut, \
    next(((a, b) for a, b in zip(ref, cut) if a != b), (len(ref), len(workers), len(cut)))
losses = lambda rs: [r["loss"] for r in rs if "loss" in r]
assert all(a != b for a, b in zip(losses(ref), losses(plain))), (ref[:3], plain)
cpu = [(r["step"], k, r[k]) for r in ref[:10] for k in ("loss",)]
g = [(r["step"], "loss", r["loss"]) for r in gpu if "loss" in r]
assert [x[:2] for x in cpu] == [x[:2] for x in g], (cpu, g)
worst = max(abs(x[2] - y[2]) / abs(x[2]) for x, y in zip(cpu, g))
assert worst <= 1e-6, (worst, cpu, g)
print(f"ok   random_resized_crop and color_jitter: 0 and 3 workers and a resume at step 30 (epoch 1) the same "
      f"{len(ref)} records; every loss differs from unaugmented; the fake GPU's 10 losses within {worst:.1e}")
PY
cmp "$d/rrc_ref/model.safetensors" "$d/rrc_workers/model.safetensors"
cmp "$d/rrc_ref/model.safetensors" "$d/rrc_cut/model.safetensors"
for bad in rrc_f32 rrc_both jitter_2ch; do
    if "$TRAINC" check "$d/$bad.json" > "$d/$bad.log" 2>&1; then
        echo "FAIL: $bad accepted"; exit 1
    fi
done
grep -q "random_resized_crop resamples 8-bit images.*input 'x' is f32" "$d/rrc_f32.log" &&
    grep -q "random_resized_crop and random_crop together" "$d/rrc_both.log" &&
    grep -q "color_jitter works on 8-bit images of 1 or 3 channels.*u8 \[2, ...\]" "$d/jitter_2ch.log" ||
    { cat "$d/rrc_f32.log" "$d/rrc_both.log" "$d/jitter_2ch.log"; echo "FAIL: the refusals' messages"; exit 1; }
echo "ok   random_resized_crop: an f32 input and random_crop beside it refused, named; color_jitter on 2 channels too"
