#!/usr/bin/env bash
# generated/<name>/ must be byte for byte what `trainc emit specs/<name>.json` writes today.
set -eu
cd "$(dirname "$0")/.."
TRAINC=${TRAINC:-build/trainc}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
for spec in specs/*.json; do
    name=$(basename "$spec" .json)
    "$TRAINC" emit "$spec" -o "$tmp/$name"
    "$TRAINC" emit "$spec" -o "$tmp/$name.again"
    diff -r "$tmp/$name" "$tmp/$name.again" >/dev/null || { echo "FAIL $name: emit is not deterministic"; fail=1; }
    if [ ! -d "generated/$name" ]; then echo "FAIL $name: generated/$name is missing (run: make regen)"; fail=1; continue; fi
    if diff -ru "generated/$name" "$tmp/$name"; then echo "ok   $name"; else echo "FAIL $name: generated/$name is stale (run: make regen)"; fail=1; fi
done
exit $fail
