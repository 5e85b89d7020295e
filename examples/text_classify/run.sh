#!/usr/bin/env bash
# Fine-tuning a Hugging Face text classifier with trainc, end to end, checking each step
# (examples/text_classify/README.md): a RoBERTa masked-LM folder with its tokenizer,
# import with a new classifier, text as padded rows, fine-tune, export, predict on text
# without labels, load the export in transformers and classify the raw text; then the
# same folder as a token classifier: words and their tags as rows, fine-tune, export, and
# transformers tags the words as trainc does; and as a question answerer: SQuAD-form
# examples as rows, fine-tune, the predictions read back as answers, export, and
# transformers' question-answering pipeline answers as trainc does.
#
#   bash examples/text_classify/run.sh [OUT]   (OUT: runs/text_classify; from the repository root)
#
# TRAINC (build/trainc) and HF_PYTHON (.venv/hf/bin/python: a python with transformers,
# `make deps` makes it) may be set. Exits 77 when HF_PYTHON has no transformers, nonzero
# when a check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-runs/text_classify}
TRAINC=${TRAINC:-build/trainc}
HF_PYTHON=${HF_PYTHON:-.venv/hf/bin/python}
HF="$HF_PYTHON examples/text_classify/hf.py"
M=$OUT/model   # import's folder: model.json, train.json, init.safetensors, data/
rm -rf "$OUT/hf" "$M" "$OUT/run" "$OUT/hf_tuned" "$OUT/text" "$OUT/new" "$OUT/tagger" \
    "$OUT/tag_run" "$OUT/hf_tagger" "$OUT/answerer" "$OUT/qa_run" "$OUT/hf_answerer"   # an earlier run's

step() { printf '\n== %s\n' "$*"; }
val_acc() { sed -n 's/.*"val_acc":\([0-9.e-]*\).*/\1/p' | tail -1; }

step "1. a Hugging Face model folder: a small random RoBERTa masked LM and its tokenizer"
$HF make "$OUT/hf"

step "2. trainc import hf, with a new classifier for five licenses"
$TRAINC import hf "$OUT/hf" -o "$M" --seq-len 64 --labels Apache-2.0,Artistic,GPL-3,LGPL-3,MPL-2.0

step "3. the text: which license each line is from, as padded rows"
$HF data "$OUT/text"
$TRAINC data classify "$OUT/text/train.jsonl" "$M/data" --val "$OUT/text/val.jsonl" \
    --tokenizer "$OUT/hf/tokenizer.json" --model "$M/model.json"

step "4. fine-tune on the CPU"
before=$($TRAINC run "$M/model.json" "$M/train.json" --init "$M/init.safetensors" --eval \
         --quiet | val_acc)
$TRAINC run "$M/model.json" "$M/train.json" --init "$M/init.safetensors" --out "$OUT/run" \
    --set epochs=12 --set optimizer.lr=3e-3 --set log_every=50
after=$(val_acc < "$OUT/run/metrics.jsonl")
echo "validation accuracy: $before before, $after after"
awk -v a="$before" -v b="$after" 'BEGIN { exit !(b > a + 0.15) }' ||
    { echo "FAIL: the accuracy did not rise by 0.15"; exit 1; }

step "5. trainc export hf, with the tokenizer"
$TRAINC export hf "$M/model.json" "$M/train.json" --weights "$OUT/run/model.safetensors" \
    -o "$OUT/hf_tuned" --tokenizer "$OUT/hf/tokenizer.json"

step "6. text without labels: the rows to predict on, and trainc's classes for them"
$HF unlabeled "$OUT/text/val.jsonl" "$OUT/text/new.jsonl"
$TRAINC data classify "$OUT/text/new.jsonl" "$OUT/new" --unlabeled \
    --tokenizer "$OUT/hf/tokenizer.json" --model "$M/model.json"
$TRAINC run "$M/model.json" "$M/train.json" --init "$OUT/run/model.safetensors" \
    --predict "$OUT/new/test_x.npy" --out "$OUT/new/predicted"

step "7. transformers: from_pretrained and the tokenizer classify the raw text as trainc does"
$HF check "$OUT/hf_tuned" "$OUT/text/val.jsonl" "$after" "$OUT/new/predicted/predictions.npy"

step "8. a tag for each word: the same folder imported as a token classifier"
T=$OUT/tagger   # the second import's folder
$TRAINC import hf "$OUT/hf" -o "$T" --seq-len 64 --task token --labels O,B-ORG,I-ORG,NUM
$HF tags "$OUT/text"
$TRAINC data tags "$OUT/text/tags_train.jsonl" "$T/data" --val "$OUT/text/tags_val.jsonl" \
    --tokenizer "$OUT/hf/tokenizer.json" --model "$T/model.json"

step "9. fine-tune the tagger, export it"
untrained=$($TRAINC run "$T/model.json" "$T/train.json" --init "$T/init.safetensors" --eval \
            --quiet | val_acc)
$TRAINC run "$T/model.json" "$T/train.json" --init "$T/init.safetensors" --out "$OUT/tag_run" \
    --set epochs=4 --set optimizer.lr=3e-3 --set log_every=50
tagged=$(val_acc < "$OUT/tag_run/metrics.jsonl")
echo "validation accuracy of the tags (each word's first piece): $untrained before, $tagged after"
awk -v a="$tagged" 'BEGIN { exit !(a > 0.95) }' || { echo "FAIL: the tags' accuracy is not over 0.95"; exit 1; }
$TRAINC export hf "$T/model.json" "$T/train.json" --weights "$OUT/tag_run/model.safetensors" \
    -o "$OUT/hf_tagger" --tokenizer "$OUT/hf/tokenizer.json"

step "10. transformers tags the words as trainc does"
$TRAINC run "$T/model.json" "$T/train.json" --init "$OUT/tag_run/model.safetensors" \
    --predict "$T/data/val_x.npy" --out "$OUT/tag_run/predicted"
$HF check_tags "$OUT/hf_tagger" "$OUT/text/tags_val.jsonl" \
    "$OUT/tag_run/predicted/predictions.npy" "$T/data/val_words.npy"

step "11. an answer's span: the same folder imported as a question answerer"
Q=$OUT/answerer   # the third import's folder
$TRAINC import hf "$OUT/hf" -o "$Q" --seq-len 64 --task qa
$HF squad "$OUT/text"
$TRAINC data qa "$OUT/text/qa_train.jsonl" "$Q/data" --val "$OUT/text/qa_val.jsonl" \
    --tokenizer "$OUT/hf/tokenizer.json" --model "$Q/model.json" --stride 16

step "12. fine-tune the question answerer; its answers, read back from its predictions"
em() { sed -n 's/.*exact match \([0-9.]*\).*/\1/p'; }
$TRAINC run "$Q/model.json" "$Q/train.json" --init "$Q/init.safetensors" \
    --predict "$Q/data/val_x.npy" --out "$OUT/qa_run/untrained"
untrained=$($TRAINC data qa "$OUT/text/qa_val.jsonl" "$Q/data" --part val \
            --answers "$OUT/qa_run/untrained/predictions.npy" | em)
$TRAINC run "$Q/model.json" "$Q/train.json" --init "$Q/init.safetensors" --out "$OUT/qa_run" \
    --set epochs=10 --set optimizer.lr=3e-3 --set log_every=50
$TRAINC run "$Q/model.json" "$Q/train.json" --init "$OUT/qa_run/model.safetensors" \
    --predict "$Q/data/val_x.npy" --out "$OUT/qa_run/predicted"
trained=$($TRAINC data qa "$OUT/text/qa_val.jsonl" "$Q/data" --part val \
          --answers "$OUT/qa_run/predicted/predictions.npy" | em)
echo "exact match of the validation answers (SQuAD's): $untrained before, $trained after"
awk -v a="$untrained" -v b="$trained" 'BEGIN { exit !(b > a + 40) }' ||
    { echo "FAIL: the exact match did not rise by 40 points"; exit 1; }

step "13. export the question answerer; transformers' pipeline answers as trainc does"
$TRAINC export hf "$Q/model.json" "$Q/train.json" --weights "$OUT/qa_run/model.safetensors" \
    -o "$OUT/hf_answerer" --tokenizer "$OUT/hf/tokenizer.json"
$HF check_qa "$OUT/hf_answerer" "$OUT/text/qa_val.jsonl" "$Q/data/val_answers.jsonl"
echo "ok: fine-tuned, exported and loaded back ($OUT/hf_tuned, $OUT/hf_tagger, $OUT/hf_answerer)"
