#!/usr/bin/env bash
# Never losing a run, where the machine or the user works against it:
#  - a checkpoint rewritten by a resume of a finished run goes aside by rename before
#    the new one takes its name: the states a crash can leave (the old one aside, the
#    new one complete under its temporary name) resume from the newest complete
#    checkpoint, bit-identically, and the leftovers are removed by the next checkpoint;
#  - a resume into the same folder spelled otherwise (DIR/) still truncates
#    metrics.jsonl to the checkpoint: no record twice;
#  - two trainers into one folder: the second exits 1 ("in use") and touches nothing,
#    the first ends as if alone; a --resume says so before reading the checkpoints;
#  - a final weights write cut short ("checkpoint": null, SIGKILL) leaves NAME.tmp: the
#    next run into the folder removes it (moving the run aside or resuming in place);
#  - --resume A --out B holds A's lock while it reads A: refused while a run works in
#    A, and a trainer into A meanwhile is refused;
#  - the output folder moved away during a run: exit 2 and nothing written into a new
#    folder of that name;
#  - a run stopped by max_time and resumed with the same max_time takes no step more;
#  - (with strace) every folder a run makes (OUT and the folders above it, checkpoints/)
#    is fsynced into the folder it is in before anything goes into it: a power loss
#    cannot take a checkpoint's folder with a name it never had on the disk.
set -eu
cd "$(dirname "$0")/.."
. tests/wait_for.sh
TRAINC=${TRAINC:-build/trainc}
PY=${PYTHON:-/usr/bin/python3}
d=$(pwd)/build/tests/robust
rm -rf "$d"; mkdir -p "$d"
sed 's|\.\./data/fashion|../../../data/fashion|g' specs/mlp_fashion.json > "$d/mlp.json"
"$TRAINC" build "$d/mlp.json" -o "$d/t" 2>/dev/null
S=(--threads 1 --quiet --set max_steps=20 --set log_every=1 --set validate.every_steps=10
   --set validate.batches=5 --set checkpoint.every_steps=5 --set checkpoint.keep=2)
records() { $PY -c '
import json, sys
print([{k: v for k, v in json.loads(l).items() if k not in ("time_s", "samples_per_s")}
       for l in open(sys.argv[1]) if "\"event\"" not in l])' "$1/metrics.jsonl"; }
"$d/t" --out "$d/ref" "${S[@]}"

# a crash between the renames of a rewrite: step_20 aside, the new step_20 under .tmp_
"$d/t" --out "$d/crash" "${S[@]}"
c=$d/crash/checkpoints
mv "$c/step_00000020" "$c/.old_step_00000020"
cp -r "$c/.old_step_00000020" "$c/.tmp_step_00000020"
"$d/t" --resume "$d/crash" "${S[@]}" 2>/dev/null
cmp "$d/ref/model.safetensors" "$d/crash/model.safetensors"
[ "$(records "$d/ref")" = "$(records "$d/crash")" ]
[ "$(ls -A "$c")" = "$(printf 'step_00000015\nstep_00000020')" ] ||
    { echo "FAIL: leftovers in $c: $(ls -A "$c")"; exit 1; }
# and the rewrite itself (a resume of the finished run) leaves nothing aside
"$d/t" --resume "$d/crash" "${S[@]}" 2>/dev/null
[ "$(ls -A "$c")" = "$(printf 'step_00000015\nstep_00000020')" ]
echo "ok   a crash between a rewrite's renames: resumes from step 15 bit-identically, leftovers removed"

# resume into the folder spelled DIR/: the records after the checkpoint are not doubled
# (step 12's checkpoint removed, as by a crash before it: the resume goes on from 10)
"$d/t" --out "$d/sp" "${S[@]}" --set max_steps=12
rm -rf "$d/sp/checkpoints/step_00000012"
"$d/t" --resume "$d/sp" --out "$d/sp/" "${S[@]}" 2>/dev/null
$PY - "$d/sp/metrics.jsonl" <<'PY'
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1]) if '"loss"' in l and '"event"' not in l]
assert steps == list(range(1, 21)), steps
PY
echo "ok   --resume DIR --out DIR/: metrics.jsonl truncated to the checkpoint, no step twice"

# two trainers, one folder
"$d/t" --out "$d/two" --threads 1 --quiet --set max_steps=400 --set data.val=null \
    --set checkpoint.every_steps=100 &
pid=$!
wait_for $pid "two's first record" test -s "$d/two/metrics.jsonl"
rc=0
"$d/t" --out "$d/two" --threads 1 --quiet --set max_steps=5 2>"$d/two.err" || rc=$?
wait $pid
[ $rc -eq 1 ] && grep -q "is in use" "$d/two.err" && [ ! -e "$d/two.1" ] &&
    tail -n 1 "$d/two/metrics.jsonl" | grep -q '"reason":"max_steps","step":400' ||
    { echo "FAIL: a second trainer into a busy folder: rc=$rc"; cat "$d/two.err"; exit 1; }
echo "ok   a second trainer into a folder in use: exit 1, the first run whole"

# a --resume of a folder in use: exit 1 before it cuts metrics.jsonl back to the
# checkpoint (the run holding the folder is paused past its checkpoint meanwhile)
"$d/t" --out "$d/busy" --threads 1 --quiet --set max_steps=1000000 --set data.val=null \
    --set checkpoint.every_steps=20 --set log_every=5 &
pid=$!
wait_for $pid "busy's step 25" grep -qs '"step":25,' "$d/busy/metrics.jsonl"
kill -STOP $pid
before=$(md5sum < "$d/busy/metrics.jsonl")
rc=0
"$d/t" --resume "$d/busy" --threads 1 --quiet 2>"$d/busy.err" || rc=$?
after=$(md5sum < "$d/busy/metrics.jsonl")
kill -CONT $pid; kill -TERM $pid; wait $pid || true
[ $rc -eq 1 ] && grep -q "is in use" "$d/busy.err" && [ "$before" = "$after" ] ||
    { echo "FAIL: --resume of a folder in use: rc=$rc, metrics.jsonl changed: $([ "$before" = "$after" ] || echo yes)"; cat "$d/busy.err"; exit 1; }
$PY - "$d/busy/metrics.jsonl" <<'PY'
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1]) if '"loss"' in l and '"event"' not in l]
assert steps == list(range(5, 5 * len(steps) + 1, 5)) and len(steps) >= 5, steps
PY
echo "ok   --resume of a folder in use: exit 1, the running run's records untouched"

# a --resume of a folder in use is refused before it reads the checkpoints: before the
# run's first one ("no complete checkpoint" was the answer), and while the run writes
# and prunes one every step (its newest was read half removed: "damaged", "no intact
# checkpoint", "state.json: cannot open"), always "in use"
"$d/t" --out "$d/early" --threads 1 --quiet --set max_steps=1000000 --set data.val=null \
    --set checkpoint.every_steps=1000000 &
pid=$!
wait_for $pid "early's first record" test -s "$d/early/metrics.jsonl"
rc=0
"$d/t" --resume "$d/early" --threads 1 --quiet 2>"$d/early.err" || rc=$?
kill -TERM $pid; wait $pid || true
[ $rc -eq 1 ] && grep -q "is in use" "$d/early.err" ||
    { echo "FAIL: --resume of a folder in use before its first checkpoint: rc=$rc"; cat "$d/early.err"; exit 1; }
"$d/t" --out "$d/churn" --threads 1 --quiet --set max_steps=1000000 --set data.val=null \
    --set checkpoint.every_steps=1 --set checkpoint.keep=1 &
pid=$!
checkpointed() { ls "$1/checkpoints" 2>/dev/null | grep -q '^step_'; }
wait_for $pid "churn's first checkpoint" checkpointed "$d/churn"
for i in $(seq 1 20); do
    "$d/t" --resume "$d/churn" --threads 1 --quiet 2>>"$d/churn.err" && break
done
kill -TERM $pid; wait $pid || true
[ "$(grep -c "is in use" "$d/churn.err")" = 20 ] && ! grep -q "damaged\|cannot open\|resuming" "$d/churn.err" ||
    { echo "FAIL: --resume of a folder whose run checkpoints every step:"; sort "$d/churn.err" | uniq -c; exit 1; }
echo "ok   --resume of a folder in use, before its first checkpoint and while it prunes: exit 1, in use"

# a final write cut short ("checkpoint": null, SIGKILL while model.safetensors is
# written: its .tmp stays, as large as the weights): the next run into the folder
# removes it, whether it moves the earlier run aside or resumes in place
"$d/t" --out "$d/cut" --threads 1 --quiet --set max_steps=3 --set data.val=null --set checkpoint=null
head -c 4000 "$d/cut/model.safetensors" > "$d/cut/model.safetensors.tmp"
rm "$d/cut/model.safetensors"
"$d/t" --out "$d/cut" --threads 1 --quiet --set max_steps=3 --set data.val=null 2>/dev/null
cp "$d/cut/model.safetensors" "$d/cut/best.safetensors.tmp"
"$d/t" --resume "$d/cut" --threads 1 --quiet --set max_steps=4 2>/dev/null
[ -e "$d/cut.1/metrics.jsonl" ] && [ -e "$d/cut/model.safetensors" ] && [ ! -e "$d/cut.1/model.safetensors.tmp" ] &&
    [ ! -e "$d/cut/model.safetensors.tmp" ] && [ ! -e "$d/cut/best.safetensors.tmp" ] ||
    { echo "FAIL: a cut final write's .tmp left behind:"; ls "$d/cut" "$d/cut.1"; exit 1; }
echo "ok   a final write cut short: the next run into the folder removes its .tmp"

# --resume A --out B holds A's lock while it reads A: refused while a run works in A
# (it read the checkpoints that run writes and prunes), and a trainer into A meanwhile
# is refused (it could move A aside under the read); B's run then goes on alone
"$d/t" --out "$d/ra" --threads 1 --quiet --set max_steps=1000000 --set data.val=null \
    --set checkpoint.every_steps=5 &
pid=$!
wait_for $pid "ra's first checkpoint" checkpointed "$d/ra"
rc=0
"$d/t" --resume "$d/ra" --out "$d/rb" --threads 1 --quiet --set max_steps=1000000 2>"$d/rb.err" || rc=$?
kill -TERM $pid; wait $pid || true
[ $rc -eq 1 ] && grep -q "ra is in use" "$d/rb.err" && [ ! -e "$d/rb" ] ||
    { echo "FAIL: --resume A --out B while a run works in A: rc=$rc"; cat "$d/rb.err"; exit 1; }
if command -v strace >/dev/null; then
    # the resume paused 3 s after its first flock (A's, before it reads A)
    "$d/t" --out "$d/rc" --threads 1 --quiet --set max_steps=10 --set data.val=null 2>/dev/null
    strace -f -e trace=flock -e inject=flock:delay_exit=3000000 -o "$d/rd.trace" \
        "$d/t" --resume "$d/rc" --out "$d/rd" --threads 1 --quiet --set max_steps=12 2>"$d/rd.err" &
    pid=$!
    wait_for $pid "the resume's first flock" grep -qs 'flock(' "$d/rd.trace"
    rc=0
    "$d/t" --out "$d/rc" --threads 1 --quiet --set max_steps=2 2>"$d/rc2.err" || rc=$?
    rc2=0; wait $pid || rc2=$?
    [ $rc -eq 1 ] && grep -q "rc is in use" "$d/rc2.err" && [ ! -e "$d/rc.1" ] && [ $rc2 -eq 0 ] &&
        grep -q '"reason":"max_steps","step":12' "$d/rd/metrics.jsonl" ||
        { echo "FAIL: a trainer into A while --resume A --out B reads it: rc=$rc, resume rc=$rc2"
          cat "$d/rc2.err" "$d/rd.err"; exit 1; }
else
    echo "skip a trainer into A while --resume A --out B reads it: no strace"
fi
echo "ok   --resume A --out B holds A while it reads it: a run into A refused"

# the output folder moved away during the run
"$d/t" --out "$d/mv" --threads 1 --quiet --set max_steps=3000 --set data.val=null \
    --set checkpoint.every_steps=20 2>"$d/mv.err" &
pid=$!
wait_for $pid "mv's first checkpoint" checkpointed "$d/mv"
mv "$d/mv" "$d/mv.moved"
rc=0; wait $pid || rc=$?
[ $rc -eq 2 ] && grep -q "was moved or removed during the run" "$d/mv.err" && [ ! -e "$d/mv" ] ||
    { echo "FAIL: the output folder moved away: rc=$rc"; cat "$d/mv.err"; ls "$d"; exit 1; }
echo "ok   the output folder moved during the run: exit 2, no new folder of its name"

# max_time spent: a bare resume ends at once (it took one step more each time)
"$d/t" --out "$d/mt" --threads 1 --quiet --set max_time=00:00:00:01 --set data.val=null \
    --set epochs=100 --set checkpoint.every_steps=100000 2>/dev/null
"$d/t" --resume "$d/mt" --threads 1 --quiet 2>/dev/null
[ "$(grep -o '"step":[0-9]*' "$d/mt/metrics.jsonl" | tail -n 1)" = \
  "$(grep '"reason"' "$d/mt/metrics.jsonl" | head -n 1 | grep -o '"step":[0-9]*')" ] ||
    { echo "FAIL: a resume after max_time went on"; tail -n 3 "$d/mt/metrics.jsonl"; exit 1; }
echo "ok   max_time spent: a resume ends at the same step"

# the folders a run makes, fsynced into their parents (strace: mkdir, then an fsync of
# the parent opened after it, before the next mkdir or the first checkpoint's)
if command -v strace >/dev/null; then
    rm -rf "$d/sync"
    strace -f -e trace=mkdir,openat,fsync -o "$d/sync.trace" "$d/t" --out "$d/sync/a/b" --threads 1 \
        --quiet --set max_steps=2 --set data.val=null --set checkpoint.every_steps=2 2>/dev/null
    $PY - "$d/sync.trace" "$d/sync/a/b" <<'PY'
import re, sys
lines = open(sys.argv[1]).read().splitlines()
out = sys.argv[2]
fds, made, synced = {}, [], set()
for l in lines:
    m = re.search(r'mkdir\("([^"]*)", [0-7]+\) += 0', l)
    if m:
        made.append(m.group(1))
    m = re.search(r'openat\(AT_FDCWD, "([^"]*)", [^)]*O_DIRECTORY[^)]*\) += (\d+)', l)
    if m:
        fds[m.group(2)] = m.group(1)
    m = re.search(r'fsync\((\d+)\) += 0', l)
    if m and m.group(1) in fds:
        for f in made:
            if f.rsplit("/", 1)[0] == fds[m.group(1)]:
                synced.add(f)
    if "/.tmp_step_" in l and "mkdir" in l:
        break   # the first checkpoint: everything above it must be on the disk by now
need = [f for f in made if f.startswith(out.rsplit("/", 2)[0] + "/") and "/.tmp_step_" not in f]
assert out + "/checkpoints" in need and out in need, need
missing = [f for f in need if f not in synced]
assert not missing, ("made but not fsynced into their folders before the first checkpoint", missing)
print(f"ok   the {len(need)} folders a run makes are fsynced into their parents before its first checkpoint")
PY
else
    echo "skip the folders' fsyncs: no strace"
fi
