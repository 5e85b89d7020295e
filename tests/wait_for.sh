# wait_for.sh, sourced by the tests that start a run in the background and act when
# it gets somewhere (a signal at a step, a second trainer while a checkpoint exists):
#
#   wait_for PID WHAT COMMAND...   polls COMMAND until it succeeds; when process PID
#                                  ends first, or after WAIT_LIMIT seconds (300), the
#                                  script stops: exit 1 and "FAIL: WHAT: ..." with why
#   logged FILE N                  FILE (a metrics.jsonl) holds N step records or more
#
# A trainer that dies at its start (a bad build, a refused option) so ends the test with
# a line naming what was awaited, where a bare loop waited for ever.
wait_for() {
    local pid=$1 what=$2 t0=$SECONDS; shift 2
    until "$@"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            "$@" && return 0   # it got there, then ended
            echo "FAIL: $what: process $pid ended before that"
            exit 1
        fi
        if [ $((SECONDS - t0)) -ge "${WAIT_LIMIT:-300}" ]; then
            echo "FAIL: $what: not after ${WAIT_LIMIT:-300} s"
            kill -TERM "$pid" 2>/dev/null
            exit 1
        fi
        sleep 0.02
    done
}

logged() {
    local n
    n=$(grep -c '"loss"' "$1" 2>/dev/null) || true
    [ "${n:-0}" -ge "$2" ]
}
