#!/bin/bash
# Tests tools/collrun: the environment given to ranks, output prefixing, exit codes,
# killing the other ranks, timeouts, signals and that no process outlives collrun.
# Usage: test_collrun.sh PATH/TO/collrun PATH/TO/collrun_child
# The ranks are tests/collrun_child, whose arguments say what each rank does.
set -eu

if [ $# -ne 2 ]; then
    echo "usage: $0 COLLRUN COLLRUN_CHILD" >&2
    exit 2
fi
COLLRUN=$1
CHILD=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
unset COLLRUN_TIMEOUT
failures=0
pidn=0

ok() { echo "ok:   $*"; }
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
now_ms() { date +%s%3N; }
dump() {
    sed 's/^/    out| /' "$TMP/out" | head -n 20
    sed 's/^/    err| /' "$TMP/err" | head -n 20
}

# run ARGS...: runs collrun with its output in $TMP/out and $TMP/err; sets rc and elapsed (ms).
run() {
    local t0
    t0=$(now_ms)
    rc=0
    "$COLLRUN" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null || rc=$?
    elapsed=$(($(now_ms) - t0))
}

# check DESCRIPTION COMMAND...: passes when the command succeeds.
check() {
    local desc=$1
    shift
    if "$@"; then
        ok "$desc"
    else
        fail "$desc"
        dump
    fi
}

expect_rc() { check "$2 (exit $rc, want $1)" test "$rc" -eq "$1"; }
expect_fast() { check "$2 (took ${elapsed} ms, want < $1)" test "$elapsed" -lt "$1"; }
has_err() { grep -qF -- "$1" "$TMP/err"; }
has_out() { grep -qxF -- "$1" "$TMP/out"; }
rc_and_out() { test "$rc" -eq "$1" && grep -q -- "$2" "$TMP/out"; }
usage_error() { test "$rc" -eq 2 && has_err "Usage:"; }
count_pids() { find "$PIDS" -type f | wc -l; }

# Each case that forks gives the ranks a fresh directory where every process it starts
# leaves a file named by its pid.
new_piddir() {
    pidn=$((pidn + 1))
    PIDS=$TMP/pids.$pidn
    mkdir "$PIDS"
}

# A pid counts as alive when it exists and is not a zombie waiting for some other reaper.
alive() {
    kill -0 "$1" 2>/dev/null || return 1
    local state
    state=$(sed 's/.*) \(.\).*/\1/' "/proc/$1/stat" 2>/dev/null) || return 1
    [ "$state" != Z ]
}

# wait_pids N: waits up to 5 s until N processes have recorded their pid.
wait_pids() {
    for _ in $(seq 100); do
        [ "$(count_pids)" -ge "$1" ] && return 0
        sleep 0.05
    done
}

# no_orphans WANT_COUNT: exactly WANT_COUNT processes were recorded and none is alive.
no_orphans() {
    local n=0 p
    for f in "$PIDS"/*; do
        [ -e "$f" ] || continue
        n=$((n + 1))
        p=${f##*/}
        if alive "$p"; then
            echo "    process $p is still alive"
            return 1
        fi
    done
    if [ "$n" -ne "$1" ]; then
        echo "    $n processes recorded, want $1"
        return 1
    fi
}

echo "# environment of each rank"
run -n 4 "$CHILD" env
expect_rc 0 "all ranks exit 0"
rank_env() {
    has_out "[$1] COLL_RANK=$1" && has_out "[$1] COLL_NRANKS=4" &&
        has_out "[$1] COLL_LOCAL_RANK=$1" && has_out "[$1] COLL_LOCAL_SIZE=4"
}
for r in 0 1 2 3; do
    check "rank $r: COLL_RANK, COLL_NRANKS, COLL_LOCAL_RANK, COLL_LOCAL_SIZE" rank_env $r
done
# "uniq -c" gives "COUNT VALUE": one distinct value, seen by all 4 ranks.
ids=$(sed -n 's/^\[[0-9]\] COLL_COMM_ID=//p' "$TMP/out" | sort | uniq -c | tr -s ' ')
check "one COLL_COMM_ID 127.0.0.1:PORT for all ranks ($ids)" \
    grep -qxE ' ?4 127\.0\.0\.1:[0-9]+' <<<"$ids"
secrets=$(sed -n 's/^\[[0-9]\] COLL_SECRET=//p' "$TMP/out" | sort | uniq -c | tr -s ' ')
check "one COLL_SECRET of 32 hex digits for all ranks" grep -qxE ' ?4 [0-9a-f]{32}' <<<"$secrets"
first_secret=$secrets
run -n 1 "$CHILD" env
secrets=$(sed -n 's/^\[[0-9]\] COLL_SECRET=//p' "$TMP/out" | sort | uniq -c)
check "a new secret for each run" test "$secrets" != "$first_secret"

echo "# output"
run -n 2 "$CHILD" out:hello err:oops partial:tail
expect_rc 0 "prefixed run"
check "stdout lines prefixed with [rank], a final partial line completed" \
    test "$(sort "$TMP/out" | tr '\n' '|')" = "[0] hello|[0] tail|[1] hello|[1] tail|"
check "stdout ends with a newline" test -z "$(tail -c 1 "$TMP/out")"
check "stderr lines prefixed and kept on stderr" \
    test "$(sort "$TMP/err" | tr '\n' '|')" = "[0] oops|[1] oops|"
run -n 2 --no-prefix -- "$CHILD" out:hello err:oops
check "--no-prefix: output unchanged" \
    test "$(tr '\n' '|' <"$TMP/out")/$(tr '\n' '|' <"$TMP/err")" = "hello|hello|/oops|oops|"
run -n 4 "$CHILD" lines:3000:200
expect_rc 0 "4 ranks x 3000 lines of 220 bytes"
bad=$(grep -cvE '^\[([0-3])\] rank \1 line [0-9]+ x{200}$' "$TMP/out" || true)
check "no line interleaved with another ($bad bad lines)" test "$bad" -eq 0
check "no line lost" test "$(wc -l <"$TMP/out")" -eq 12000

echo "# failures"
new_piddir
run -n 3 "$CHILD" @2:ignoreterm "piddir:$PIDS" wait:3 @1:exit:3 @2:sleep:0.5 @2:exit:5 \
    @0:sleep:30
expect_rc 3 "exit code of the first failing rank"
check "failure reported" has_err "collrun: rank 1 exited with code 3"
check "later exits not reported as failures" test "$(grep -c "rank 2" "$TMP/err")" -eq 0
expect_fast 2000 "sleeping rank stopped at once"
check "no orphan" no_orphans 3

new_piddir
run -n 3 "$CHILD" "piddir:$PIDS" wait:3 @1:raise:10 sleep:30
expect_rc 138 "death by SIGUSR1 gives 128+10"
check "signal death reported" has_err "collrun: rank 1 killed by signal SIGUSR1"
expect_fast 1500 "other ranks stopped at once"
check "no orphan" no_orphans 3

new_piddir
run -n 2 "$CHILD" ignoreterm "piddir:$PIDS" fork:30 wait:4 @1:exit:2 sleep:30
expect_rc 2 "ranks and grandchildren ignoring SIGTERM"
check "SIGKILL after the grace period (${elapsed} ms)" \
    test "$elapsed" -ge 1500 -a "$elapsed" -lt 5000
check "SIGKILL announced" has_err "SIGKILL"
check "no orphan" no_orphans 4

new_piddir
run -n 2 "$CHILD" "piddir:$PIDS" fork:30
expect_rc 0 "ranks succeed but leave grandchildren behind"
expect_fast 1500 "grandchildren stopped at once"
check "no orphan" no_orphans 4

echo "# timeouts"
new_piddir
run -n 2 --timeout 1 "$CHILD" "piddir:$PIDS" fork:30 sleep:30
expect_rc 124 "--timeout 1"
check "timeout reported" has_err "collrun: timeout after 1 s"
check "stopped after the timeout (${elapsed} ms)" test "$elapsed" -ge 900 -a "$elapsed" -lt 3000
check "no orphan" no_orphans 4
rc=0
COLLRUN_TIMEOUT=0.3 "$COLLRUN" -n 2 "$CHILD" sleep:30 >"$TMP/out" 2>"$TMP/err" || rc=$?
expect_rc 124 "COLLRUN_TIMEOUT=0.3"
rc=0
COLLRUN_TIMEOUT=0.3 "$COLLRUN" --timeout 0 -n 1 "$CHILD" sleep:0.6 >"$TMP/out" 2>"$TMP/err" ||
    rc=$?
expect_rc 0 "--timeout 0 overrides COLLRUN_TIMEOUT"

echo "# signals to collrun"
new_piddir
"$COLLRUN" -n 3 "$CHILD" "piddir:$PIDS" fork:30 sleep:30 >"$TMP/out" 2>"$TMP/err" &
cpid=$!
wait_pids 6
t0=$(now_ms)
kill -TERM "$cpid"
rc=0
wait "$cpid" || rc=$?
elapsed=$(($(now_ms) - t0))
expect_rc 143 "SIGTERM to collrun gives 128+15"
expect_fast 1500 "ranks stopped at once"
check "no orphan" no_orphans 6

# Without job control, bash starts background commands with SIGINT ignored; with it
# (set -m, in a subshell) collrun gets SIGINT the way a terminal would send it.  That
# fails when this script itself was started with SIGINT ignored, which collrun honours.
sigign=$(sed -n 's/^SigIgn:[[:space:]]*//p' /proc/$$/status)
if (((0x$sigign >> 1) & 1)); then
    echo "skip: SIGINT test (this shell was started with SIGINT ignored)"
else
    new_piddir
    result=$(
        set -m
        "$COLLRUN" -n 2 "$CHILD" "piddir:$PIDS" sleep:30 >"$TMP/out" 2>"$TMP/err" &
        cpid=$!
        wait_pids 2
        t0=$(now_ms)
        kill -INT "$cpid"
        rc=0
        wait "$cpid" || rc=$?
        echo "$rc $(($(now_ms) - t0))"
    ) 2>/dev/null
    rc=${result% *}
    elapsed=${result#* }
    expect_rc 130 "SIGINT to collrun, forwarded to the ranks, gives 128+2"
    expect_fast 1500 "ranks stopped at once"
    check "no orphan" no_orphans 2
fi

new_piddir
(
    "$COLLRUN" -n 2 "$CHILD" "piddir:$PIDS" sleep:30 >"$TMP/out" 2>"$TMP/err" &
    cpid=$!
    wait_pids 2
    kill -KILL "$cpid"
    wait "$cpid" || true
) 2>/dev/null # no "Killed" notice
for _ in $(seq 40); do
    no_orphans 2 >/dev/null && break
    sleep 0.05
done
check "SIGKILL to collrun: the ranks die with it" no_orphans 2

echo "# arguments"
for args in "-n 0 $CHILD" "-n abc $CHILD" "-n 2" "--bogus -n 2 $CHILD" "$CHILD" \
    "-n 2 --timeout -1 $CHILD" "-n 2 --timeout" "-n"; do
    # shellcheck disable=SC2086 # the arguments are meant to be split
    run $args
    check "collrun $args: usage error" usage_error
done
run -n 0 "$CHILD"
check "-n 0 named" has_err "invalid number of ranks '0'"
run -n 2 --bogus "$CHILD"
check "unknown option named" has_err "unknown option '--bogus'"
run -n 2
check "missing program named" has_err "missing the program"
rc=0
COLLRUN_TIMEOUT=soon "$COLLRUN" -n 1 "$CHILD" >"$TMP/out" 2>"$TMP/err" || rc=$?
expect_rc 2 "invalid COLLRUN_TIMEOUT"
run -n 2 "$TMP/nonexistent"
expect_rc 127 "missing program"
check "missing program reported once" \
    test "$(cat "$TMP/err")" = "collrun: cannot execute $TMP/nonexistent: No such file or directory"
touch "$TMP/plain"
run -n 2 "$TMP/plain"
expect_rc 127 "program not executable"
check "permission problem reported" has_err "Permission denied"
run --help
check "--help" rc_and_out 0 "^Usage: collrun"
run --version
check "--version" rc_and_out 0 "^collrun"
run --env
check "--env lists COLL_TIMEOUT_MS" rc_and_out 0 "COLL_TIMEOUT_MS"

if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "all checks passed"
