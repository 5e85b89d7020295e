#!/usr/bin/env bash
# The distributed layer (runtime/dist.c) and the loader's DistributedSampler mode
# (tests/unit/test_dist.c) without a launcher and under mpirun with 1, 2 and 3 ranks;
# then a dead or stuck peer: the survivor must leave with exit 2 and a message naming
# the collective within TRAINC_DIST_TIMEOUT, never hang.
set -u
cd "$(dirname "$0")/.."
T=build/tests
mkdir -p "$T"
pass=0; fail=0
ok()  { echo "ok   $1"; pass=$((pass+1)); }
bad() { echo "FAIL $1"; fail=$((fail+1)); }

MPIRUN=(mpirun --oversubscribe --allow-run-as-root)
# Containers often forbid the cross-memory attach (process_vm_readv) that Open MPI's
# shared-memory transport uses for large messages; plain copies work everywhere.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# Open MPI leaks by design (LSan reports it at exit); our own code is leak-checked in
# the run without a launcher, where MPI is never initialized.
MPI_ASAN="detect_leaks=0"

SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
MPI_CFLAGS=$(mpicc --showme:compile 2>/dev/null || pkg-config --cflags ompi-c)
MPI_LIBS=$(mpicc --showme:link 2>/dev/null || pkg-config --libs ompi-c)
BIN=$T/test_dist
# shellcheck disable=SC2086
if cc -std=gnu11 -O1 -g $SAN -Wall -Wextra -Wno-unused-parameter -Iruntime $MPI_CFLAGS \
      tests/unit/test_dist.c runtime/dist.c runtime/data.c runtime/augment.c runtime/rng.c runtime/util.c $MPI_LIBS \
      -lpthread -lm -o $BIN 2>$T/dist_build.log; then
    ok dist/build
else
    bad dist/build; cat $T/dist_build.log; echo "dist: $pass passed, $fail failed"; exit 1
fi

# unit NAME COMMAND...: the test program's own ok/FAIL lines, then its status.
unit() {
    local name=$1; shift
    local log=$T/dist_$name.log
    timeout 300 "$@" >"$log" 2>&1
    local rc=$?
    sed 's/^/    /' "$log" | grep -E "^    (ok|FAIL|world)" || true
    if [ $rc -eq 0 ] && ! grep -q "^FAIL" "$log" && [ "$(grep -c '^ok' "$log")" -ge 13 ]; then
        ok "dist/$name"
    else
        bad "dist/$name (exit $rc)"; tail -n 20 "$log" | sed 's/^/    /'
    fi
}
unit plain   $BIN
unit np1     env ASAN_OPTIONS=$MPI_ASAN "${MPIRUN[@]}" -np 1 $BIN
unit np2     env ASAN_OPTIONS=$MPI_ASAN "${MPIRUN[@]}" -np 2 $BIN
unit np3     env ASAN_OPTIONS=$MPI_ASAN "${MPIRUN[@]}" -np 3 $BIN

# fault NAME kill|hang|mismatch [MPIRUN_OPTIONS...]: runs that fault on 2 ranks, each in a
# shell that reports its rank's exit status; leaves the output in $log, mpirun's
# status in $rc and the wall time in $secs.
fault() {
    local name=$1 how=$2; shift 2
    log=$T/dist_$name.log
    local t0; t0=$(date +%s.%N)
    # shellcheck disable=SC2016
    env ASAN_OPTIONS=$MPI_ASAN TRAINC_DIST_TIMEOUT=5 timeout 120 "${MPIRUN[@]}" "$@" -np 2 \
        sh -c '"$0" "$1"; echo "rank $OMPI_COMM_WORLD_RANK exit $?"' $BIN "$how" >"$log" 2>&1
    rc=$?
    secs=$(echo "$(date +%s.%N) $t0" | awk '{printf "%d", $1 - $2}')
}
# expect NAME STRING...: passes when $log holds every STRING.
expect() {
    local name=$1; shift
    local why=""
    for want in "$@"; do
        grep -qF -- "$want" "$log" || why="$why; lacks '$want'"
    done
    if [ -z "$why" ]; then ok "dist/$name (${secs} s)"; else
        bad "dist/$name (mpirun exit $rc, ${secs} s$why)"; tail -n 25 "$log" | sed 's/^/    /'
    fi
}
MSG="has not completed after 5"   # 5 s, or 5.01 s where the watchdog woke late

# A killed peer, with mpirun told not to end the job itself (--enable-recovery): only
# the watchdog stands between rank 0 and a hang.
fault kill_watchdog kill --enable-recovery
if [ "$secs" -ge 5 ] && [ "$secs" -le 30 ]; then
    expect kill_watchdog "rank 0 of 2: MPI_Allreduce" "$MSG" "rank 0 exit 2"
else bad "dist/kill_watchdog: took $secs s (want 5..30)"; sed 's/^/    /' "$log" | tail -n 25; fi

# The same under a plain mpirun: it notices the death and ends the job (nonzero).
fault kill_mpirun kill
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$secs" -le 30 ]; then ok "dist/kill_mpirun (exit $rc, $secs s)"
else bad "dist/kill_mpirun (mpirun exit $rc, $secs s)"; tail -n 25 "$log" | sed 's/^/    /'; fi

# A peer that hangs without dying: nothing but the watchdog notices; its MPI_Abort
# ends every rank and mpirun exits 2.
fault hang hang
if [ $rc -eq 2 ] && [ "$secs" -ge 5 ] && [ "$secs" -le 30 ]; then
    expect hang "rank 0 of 2: MPI_Allreduce" "$MSG"
else bad "dist/hang (mpirun exit $rc, $secs s; want 2 within 5..30 s)"; tail -n 25 "$log" | sed 's/^/    /'; fi

# Ranks that disagree (broadcast sizes): MPI reports an error, which must become
# exit 2 with a message naming the call, not a crash or a hang.
fault mismatch mismatch
expect mismatch "rank 1 of 2: MPI_Bcast failed" "rank 1 exit 2"

# Each message in one write (strace): the ranks' stderr meet in mpirun's, so a line
# written in pieces (the watchdog's and rt_fail's were, 3 and 3 writes) can carry
# another rank's between them.
if command -v strace >/dev/null; then
    for how in hang mismatch; do
        rm -f "$T/dist_w_$how".*
        # shellcheck disable=SC2016
        env ASAN_OPTIONS=$MPI_ASAN TRAINC_DIST_TIMEOUT=5 timeout 120 "${MPIRUN[@]}" -np 2 sh -c \
            'strace -f -qq -s 4000 -e trace=write -o "$0.$OMPI_COMM_WORLD_RANK" "$1" "$2"' \
            "$T/dist_w_$how" $BIN "$how" >/dev/null 2>&1 || true
    done
    if grep -qE 'write\(2, "trainc: error: rank 0 of 2: MPI_Allreduce .* in seconds\)\\n"' "$T"/dist_w_hang.* &&
       grep -qE 'write\(2, "trainc: error: rank 1 of 2: MPI_Bcast failed: .*\\n"' "$T"/dist_w_mismatch.*; then
        ok "dist/one_write (the watchdog's and rt_fail's messages)"
    else bad "dist/one_write"; grep -h 'write(2' "$T"/dist_w_* | head -n 8 | sed 's/^/    /'; fi
else
    echo "skip dist/one_write: no strace"
fi

# A bad timeout is bad input (exit 1), named.
log=$T/dist_bad_timeout.log; secs=0
env TRAINC_DIST_TIMEOUT=soon timeout 60 "${MPIRUN[@]}" -np 1 $BIN >"$log" 2>&1; rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ]; then expect bad_timeout "TRAINC_DIST_TIMEOUT=soon"
else bad "dist/bad_timeout (mpirun exit $rc)"; fi

echo "dist: $pass passed, $fail failed"
[ $fail -eq 0 ]
