#!/bin/bash
# collrun status and collinfo --status (docs/collrun.md, "Status of a running job").
#
#   test_status.sh COLLRUN COLLINFO STATUS_CHILD
#
# 1. A 4-rank job of status_child (checked allreduces in a loop, 12 s of rank 0's
#    clock) under collrun, with a run directory of its own (XDG_RUNTIME_DIR): `collrun
#    status` shows all 4 ranks answering, and names nobody; --json parses and agrees.
# 2. Rank 2 stopped (SIGSTOP): `collrun status`, run within 2 s of the stop, reports it
#    as "no answer" and names it as the rank the others wait for; --json says the same
#    (verdict.rank 2, the others waiting in a call).
# 3. collinfo --status on rank 0's listener with the job's COLL_SECRET: the same ranks
#    and verdict; with a wrong COLL_SECRET: nothing on stdout, an error naming the
#    secret, exit 1, and the rank logs the dropped connection.
# 4. collrun status with the pid of no job, or with no job running: exit 1.
# 5. SIGCONT: the job goes on and ends with right sums (exit 0), and its files in the
#    run directory are gone.
# JSON is checked with /usr/bin/python3.  About 15 s.
set -u
collrun=$1 collinfo=$2 child=$3
py=/usr/bin/python3
skip() { echo "SKIP: $*"; exit 77; }
[ -x "$py" ] || skip "$py is missing"
dir=$(mktemp -d /tmp/test_status.XXXXXX)
export XDG_RUNTIME_DIR=$dir/run
mkdir -m 700 "$XDG_RUNTIME_DIR"
run=$XDG_RUNTIME_DIR/collrun
export COLL_TIMEOUT_MS=60000
unset COLL_SECRET COLL_COMM_ID COLL_RANK COLL_NRANKS COLL_STATUS_FILE RANK WORLD_SIZE
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
job= stopped=
cleanup() {
    [ -n "$stopped" ] && kill -CONT "$stopped" 2>/dev/null
    [ -n "$job" ] && kill "$job" 2>/dev/null && wait "$job" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
# check NAME FILE PYTHON: FILE is valid JSON and PYTHON (d = the document) passes.
check_json() {
    local name=$1 file=$2 code=$3
    if ! "$py" -c "import json, sys
d = json.load(open(sys.argv[1]))
$code" "$file" 2>"$dir/py.err"; then
        fail "$name: $(tail -3 "$dir/py.err")"
        sed 's/^/    /' "$file" | head -60
    fi
}
show() { sed 's/^/    /' "$1"; }

# --- 4 (first half): no job yet ---
"$collrun" status >"$dir/none.out" 2>"$dir/none.err"
rc=$?
[ $rc -eq 1 ] && grep -q "no collrun job of this user" "$dir/none.err" ||
    { fail "status without a job: exit $rc, want 1 and 'no collrun job'"; show "$dir/none.err"; }

# --- 1: a healthy job ---
"$collrun" -n 4 --timeout 80 "$child" 12 >"$dir/job.out" 2>&1 &
job=$!
for _ in $(seq 200); do
    [ -f "$run/$job.ranks" ] && [ -f "$run/$job.job" ] && break
    sleep 0.05
done
[ -f "$run/$job.ranks" ] || { fail "rank 0 wrote no $run/$job.ranks within 10 s"; show "$dir/job.out"; exit 1; }
mode=$(stat -c %a "$run/$job.job" "$run/$job.ranks" "$run" | tr '\n' ' ')
[ "$mode" = "600 600 700 " ] || fail "modes of the job file, ranks file, run directory: $mode"

"$collrun" status >"$dir/ok.out" 2>"$dir/ok.err"
rc=$?
lines=$(grep -cE '^[0-3] +[^ ]+:[0-9]+ +(in call|idle) ' "$dir/ok.out")
if [ $rc -ne 0 ] || [ "$lines" != 4 ] || grep -q "no answer" "$dir/ok.out" ||
    ! grep -q "^verdict: " "$dir/ok.out"; then
    fail "healthy job: exit $rc, $lines of 4 ranks answering"
    show "$dir/ok.out"; show "$dir/ok.err"
fi
"$collrun" status --json >"$dir/ok.json" 2>"$dir/ok.err" || fail "status --json exited $?"
check_json "healthy --json" "$dir/ok.json" "
assert d['nranks'] == 4 and len(d['ranks']) == 4
for k, r in enumerate(d['ranks']):
    assert r['rank'] == k and r['answered'] and r['state'] in ('in call', 'idle'), r
    assert r['error'] is None and r['calls'] > 0, r
assert d['verdict']['rank'] is None, d['verdict']
"
pid2=$("$py" -c "import json; print(json.load(open('$dir/ok.json'))['ranks'][2]['pid'])" 2>/dev/null)
addr0=$("$py" -c "import json; print(json.load(open('$dir/ok.json'))['ranks'][0]['addr'])" 2>/dev/null)
[ -n "$pid2" ] && [ -n "$addr0" ] || { fail "no pid of rank 2 or address of rank 0"; exit 1; }
grep -q "^rank 2 $pid2 " "$run/$job.job" || fail "the job file does not list rank 2's pid $pid2"

# --- 2: rank 2 stopped ---
kill -STOP "$pid2" && stopped=$pid2
t0=$(date +%s%N)
sleep 0.2
"$collrun" status >"$dir/stop.out" 2>"$dir/stop.err"
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
echo "collrun status named the stopped rank after ${ms} ms:"
show "$dir/stop.out"
[ $ms -lt 2000 ] || fail "collrun status took until ${ms} ms after the stop (want < 2000)"
[ $rc -eq 0 ] || fail "status of the stopped job exited $rc: $(cat "$dir/stop.err")"
grep -qE '^2 +[^ ]+:'"$pid2"' +no answer ' "$dir/stop.out" || fail "rank 2 not reported as 'no answer'"
grep -qE '^verdict: rank 2 \([^)]*\) is the one the others wait for' "$dir/stop.out" ||
    fail "the verdict does not name rank 2"
"$collrun" status "$job" --json >"$dir/stop.json" 2>"$dir/stop.err" || fail "status PID --json exited $?"
check_json "stopped --json" "$dir/stop.json" "
v = d['verdict']
assert v['rank'] == 2 and v['waiters'] == 3, v
r2 = d['ranks'][2]
assert not r2['answered'] and r2['state'] == 'no answer' and 'within' in r2['why'], r2
for k in (0, 1, 3):
    r = d['ranks'][k]
    assert r['answered'] and r['state'] == 'in call', r
    assert r['call']['running_ms'] >= 0 and r['call']['waits_for'] is not None, r['call']
    assert r['call']['name'] == 'allreduce' and r['call']['dtype'] == 'float32', r['call']
"

# --- 3: collinfo --status, right and wrong secret ---
secret=$(sed -n 's/^secret //p' "$run/$job.job")
COLL_SECRET=$secret "$collinfo" --status "$addr0" >"$dir/ci.out" 2>"$dir/ci.err"
rc=$?
if [ $rc -ne 0 ] || [ "$(grep -cE '^[0-3] +[^ ]+:[0-9]+ ' "$dir/ci.out")" != 4 ] ||
    ! grep -qE '^verdict: rank 2 ' "$dir/ci.out"; then
    fail "collinfo --status $addr0: exit $rc, want 4 ranks and rank 2 named"
    show "$dir/ci.out"; show "$dir/ci.err"
fi
COLL_SECRET=$secret "$collinfo" --status "$addr0" --json >"$dir/ci.json" 2>"$dir/ci.err" ||
    fail "collinfo --status --json exited $?"
check_json "collinfo --status --json" "$dir/ci.json" "
assert d['nranks'] == 4 and d['verdict']['rank'] == 2, d['verdict']
"
COLL_SECRET=00112233445566778899aabbccddeeff "$collinfo" --status "$addr0" \
    >"$dir/bad.out" 2>"$dir/bad.err"
rc=$?
if [ $rc -ne 1 ] || [ -s "$dir/bad.out" ] || ! grep -q "COLL_SECRET" "$dir/bad.err"; then
    fail "a wrong COLL_SECRET: exit $rc (want 1), stdout $(wc -c <"$dir/bad.out") bytes (want 0)"
    show "$dir/bad.err"
fi
echo "wrong secret: $(cat "$dir/bad.err")"

# --- 4 (second half): no such job ---
"$collrun" status 1 >/dev/null 2>"$dir/pid1.err"
rc=$?
[ $rc -eq 1 ] || fail "collrun status 1 (no job): exit $rc, want 1"

# --- 5: the job goes on and ends ---
kill -CONT "$pid2" && stopped=
wait "$job"
rc=$?
job=
[ $rc -eq 0 ] || { fail "the job exited $rc after SIGCONT"; tail -20 "$dir/job.out"; }
[ "$(grep -c 'allreduces$' "$dir/job.out")" = 4 ] || fail "not every rank finished its loop"
grep -q "did not show the communicator's secret" "$dir/job.out" ||
    fail "rank 0 did not log the connection with the wrong secret"
left=$(ls "$run")
[ -z "$left" ] || fail "files left in the run directory: $left"

if [ $failures -ne 0 ]; then
    echo "job output (last lines):"
    tail -20 "$dir/job.out" 2>/dev/null
    echo "$failures failure(s)"
    exit 1
fi
echo "PASS"
