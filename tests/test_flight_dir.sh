#!/bin/bash
# COLL_FLIGHT_DIR (lib/engine/flight.c) and collinfo --flight (tools/flight_report.c).
#
#   test_flight_dir.sh COLLRUN COLLINFO TEST_FLIGHT_DIR
#
# 1. behind: 4 ranks under collrun run 3 allreduces; rank 2 skips the fourth and,
#    once the others have failed it (COLL_TIMEOUT_MS 4 s) and written their records,
#    calls collCommAbort.  Four files, ranks 0,1,3 "failed" and rank 2 "aborted";
#    collinfo says rank 2 is behind: the others are in allreduce #4, rank 2
#    completed #3 and has not started #4.  --json parses and says the same.
# 2. exit: rank 2 exits after allreduce #3 (TCP); the others fail #4.  Three files;
#    collinfo says rank 2 is missing, a suspect, and the others are in allreduce #4.
# 3. A COLL_FLIGHT_DIR that cannot be written (under a regular file): the job
#    ends as in 2, and each failing rank logs one WARN naming the directory and
#    the errno.
# 4. Hand-written records: a rank ahead, a mismatch, the wait with no byte
#    received; then malformed files, each named with its line, and collinfo
#    exits 1 without crashing and still reports the valid ones.
#
# JSON is checked with /usr/bin/python3.  About 6 s.
set -u
collrun=$1 collinfo=$2 prog=$3
py=/usr/bin/python3
skip() { echo "SKIP: $*"; exit 77; }
[ -x "$py" ] || skip "$py is missing"
dir=$(mktemp -d /tmp/test_flight_dir.XXXXXX)
trap 'rm -rf "$dir"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
unset COLL_RANK COLL_NRANKS COLL_COMM_ID COLL_DEBUG_FILE COLL_TRANSPORTS COLL_ALGO
export COLL_TIMEOUT_MS=4000 COLL_DEBUG=WARN

# expect NAME FILE TEXT: FILE holds TEXT (a fixed string).
expect() {
    if ! grep -qF -- "$3" "$2"; then
        fail "$1: no \"$3\" in:"
        sed 's/^/    /' "$2" | head -60
    fi
}

# check_json NAME FILE PYTHON: the document parses, and PYTHON (with d) asserts hold.
check_json() {
    if ! "$py" -c 'import json,sys; json.load(sys.stdin)' <"$2" 2>"$dir/py.err"; then
        fail "$1: invalid JSON: $(tail -2 "$dir/py.err")"
        sed 's/^/    /' "$2" | head -40
        return
    fi
    if ! "$py" -c "import json, sys
d = json.load(open(sys.argv[1]))
$3" "$2" 2>"$dir/py.err"; then
        fail "$1: $(tail -3 "$dir/py.err")"
        sed 's/^/    /' "$2" | head -60
    fi
}

# run NAME MODE FLIGHT_DIR [ENV...]: the job, its output in $dir/NAME.out.
run() {
    local name=$1 mode=$2 fdir=$3
    shift 3
    local t0=$SECONDS
    env COLL_FLIGHT_DIR="$fdir" "$@" "$collrun" -n 4 --timeout 60 "$prog" --mode "$mode" \
        >"$dir/$name.out" 2>&1
    local rc=$?
    echo "$name: collrun exited $rc in $((SECONDS - t0)) s"
    if [ $rc -ne 0 ]; then
        fail "$name: collrun exited $rc"
        sed 's/^/    /' "$dir/$name.out" | tail -40
    fi
}

# --- 1. behind ---
mkdir "$dir/behind"
run behind behind "$dir/behind" COLL_ALGO=ring
nfiles=$(ls "$dir/behind" | grep -c '^flight-.*\.txt$')
[ "$nfiles" -eq 4 ] || fail "behind: $nfiles record files, not 4: $(ls -a "$dir/behind")"
ls -a "$dir/behind" | grep -q '\.tmp$' && fail "behind: a temporary file was left"
for r in 0 1 2 3; do
    f=$(ls "$dir/behind"/flight-*-$r-of-4-*.txt 2>/dev/null | head -1)
    if [ -z "$f" ]; then
        fail "behind: no file for rank $r"
        continue
    fi
    head -1 "$f" | grep -qx 'COLL-FLIGHT 1' || fail "behind: $f: first line $(head -1 "$f")"
    grep -qx "rank $r" "$f" || fail "behind: $f has no \"rank $r\""
    grep -qx "nranks 4" "$f" || fail "behind: $f has no \"nranks 4\""
    want=failed
    [ $r -eq 2 ] && want=aborted
    grep -qx "reason $want" "$f" || fail "behind: $f: not \"reason $want\": $(grep ^reason "$f")"
    grep -q '^call seq=3 name=allreduce algo=ring state=done .* count=4096 dtype=float32 op=sum' \
        "$f" || fail "behind: $f: no done allreduce #3"
    tail -1 "$f" | grep -qx end || fail "behind: $f: the last line is not \"end\""
done
# One communicator: every file names the same one.
ncomm=$(cat "$dir"/behind/flight-*.txt | grep '^comm ' | sort -u | wc -l)
[ "$ncomm" -eq 1 ] || fail "behind: the files name $ncomm communicators"
"$collinfo" --flight "$dir/behind" >"$dir/behind.txt" 2>"$dir/behind.err" ||
    fail "behind: collinfo --flight exited $?: $(cat "$dir/behind.err")"
cat "$dir/behind.txt"
expect behind "$dir/behind.txt" "rank 2 is behind: ranks 0,1,3 are in allreduce #4 (failed), rank 2 completed #3 and has not started #4"
expect behind "$dir/behind.txt" "suspects: rank 2"
# Rank 3 receives from rank 2 in the ring: its last wait was for rank 2.
expect behind "$dir/behind.txt" "rank 3 waits for rank 2: received 0 of 0 B posted from it; rank 2 is not in #4 (likely cause: rank 2)"
expect behind "$dir/behind.txt" "records of ranks 0-3"
"$collinfo" --flight "$dir/behind" --json >"$dir/behind.json" 2>"$dir/behind.err" ||
    fail "behind: collinfo --flight --json exited $?: $(cat "$dir/behind.err")"
check_json "behind --json" "$dir/behind.json" "
c = d['communicators']
assert len(c) == 1, c
c = c[0]
assert c['nranks'] == 4 and c['missing'] == [] and c['ranks_with_records'] == [0, 1, 2, 3]
assert c['behind'] == [2] and c['ahead'] == [], (c['behind'], c['ahead'])
m = c['majority']
assert m['ranks'] == [0, 1, 3] and m['in_call'] and m['seq'] == 4 and m['name'] == 'allreduce', m
r2 = [r for r in c['ranks'] if r['rank'] == 2][0]
assert r2['reason'] == 'aborted' and r2['last_completed'] == 3 and r2['in_progress'] is None, r2
r0 = [r for r in c['ranks'] if r['rank'] == 0][0]
assert r0['in_progress']['seq'] == 4 and r0['in_progress']['state'] == 'failed', r0
assert 2 in c['suspects'], c['suspects']
"

# --- 2. exit: rank 2 leaves no record ---
mkdir "$dir/exit"
run exit exit "$dir/exit" COLL_TRANSPORTS=tcp COLL_ALGO=ring
nfiles=$(ls "$dir/exit" | grep -c '^flight-.*\.txt$')
[ "$nfiles" -eq 3 ] || fail "exit: $nfiles record files, not 3: $(ls -a "$dir/exit")"
ls "$dir/exit" | grep -q -- '-2-of-4-' && fail "exit: rank 2, which exited, wrote a record"
"$collinfo" --flight "$dir/exit" >"$dir/exit.txt" 2>"$dir/exit.err" ||
    fail "exit: collinfo --flight exited $?: $(cat "$dir/exit.err")"
cat "$dir/exit.txt"
expect exit "$dir/exit.txt" "records of ranks 0,1,3; missing: rank 2"
expect exit "$dir/exit.txt" "rank 2 wrote no record"
expect exit "$dir/exit.txt" "the ranks with a record, ranks 0,1,3 are in allreduce #4 (failed)"
expect exit "$dir/exit.txt" "suspects: rank 2"
expect exit "$dir/exit.txt" "rank 3 waits for rank 2: received 0 of "
"$collinfo" --flight "$dir/exit" --json >"$dir/exit.json" 2>"$dir/exit.err" ||
    fail "exit: collinfo --flight --json exited $?"
check_json "exit --json" "$dir/exit.json" "
c = d['communicators'][0]
assert c['missing'] == [2] and c['behind'] == [] and c['ahead'] == [], c
assert c['majority']['seq'] == 4 and c['majority']['name'] == 'allreduce', c['majority']
assert c['suspects'][0] == 2, c['suspects']
"

# --- 3. a directory that cannot be written ---
: >"$dir/plain"
run unwritable exit "$dir/plain/sub" COLL_TRANSPORTS=tcp
nwarn=$(grep -c "COLL_FLIGHT_DIR $dir/plain/sub: rank [0-9]'s flight record is not written: .*(errno 20)" \
    "$dir/unwritable.out")
[ "$nwarn" -eq 3 ] || {
    fail "unwritable: $nwarn WARN lines naming the directory and errno 20, not 3 (one per failing rank)"
    sed 's/^/    /' "$dir/unwritable.out" | grep -v '^ *[a-z0-9.-]*:[0-9]*:[0-9]* \[[0-9]\] COLL WARN   #' | tail -30
}

# --- 4. hand-written records ---
# rec FILE COMM RANK NRANKS REASON: a header; the caller adds calls, then "end".
rec() {
    printf 'COLL-FLIGHT 1\ncomm %s\nrank %d\nnranks %d\nhost h%d\npid %d\nreason %s\nwhy x\n' \
        "$2" "$3" "$4" "$3" $((100 + $3)) "$5" >"$1"
    printf 'written_us 1\ncalls 9\n' >>"$1"
}
call() { # FILE SEQ NAME STATE [EXTRA]
    echo "call seq=$2 name=$3 algo=ring state=$4 result=collSuccess count=1024 dtype=float32 op=sum root=-1 peer=-1 start_us=1 end_us=2 ${5:-}" >>"$1"
}
s=$dir/synth
mkdir "$s"
# Communicator a: ranks 0 and 2 in allreduce #8; rank 1 completed #8 and is in #9.
A=00000000000000aa
for r in 0 1 2; do
    rec "$s/flight-$A-$r-of-3-1.txt" $A $r 3 failed
    call "$s/flight-$A-$r-of-3-1.txt" 7 allreduce done
done
call "$s/flight-$A-0-of-3-1.txt" 8 allreduce running
echo "peer rank=2 sent=4096 sent_posted=4096 recvd=0 recvd_posted=4096" >>"$s/flight-$A-0-of-3-1.txt"
call "$s/flight-$A-1-of-3-1.txt" 8 allreduce done
call "$s/flight-$A-1-of-3-1.txt" 9 allreduce running
call "$s/flight-$A-2-of-3-1.txt" 8 allreduce running
echo "peer rank=0 sent=0 sent_posted=0 recvd=4096 recvd_posted=4096" >>"$s/flight-$A-2-of-3-1.txt"
# Communicator b: all in #5, rank 2 in a broadcast.
B=00000000000000bb
for r in 0 1 2; do
    rec "$s/flight-$B-$r-of-3-1.txt" $B $r 3 failed
    if [ $r -eq 2 ]; then
        echo "call seq=5 name=broadcast algo=ring state=running result=collSuccess count=1024 dtype=float32 op=- root=0 peer=-1 start_us=1 end_us=0" >>"$s/flight-$B-$r-of-3-1.txt"
    else
        call "$s/flight-$B-$r-of-3-1.txt" 5 allreduce running
    fi
done
for f in "$s"/flight-*.txt; do echo end >>"$f"; done
"$collinfo" --flight "$s" >"$dir/synth.txt" 2>"$dir/synth.err" ||
    fail "synth: collinfo --flight exited $?: $(cat "$dir/synth.err")"
cat "$dir/synth.txt"
expect synth "$dir/synth.txt" "rank 1 is ahead: ranks 0,2 are in allreduce #8 (running), rank 1 is in allreduce #9 (running)"
expect synth "$dir/synth.txt" "rank 0 waits for rank 2: received 0 of 4096 B posted from it; rank 2 posted nothing to send to rank 0 (likely cause: rank 2)"
expect synth "$dir/synth.txt" "all ranks are in #5 (running), not all in the same call"
expect synth "$dir/synth.txt" "mismatch in #5: ranks 0,1 called allreduce 1024 x float32 sum; rank 2 called broadcast 1024 x float32 root 0"
"$collinfo" --flight "$s" --json >"$dir/synth.json" 2>/dev/null
check_json "synth --json" "$dir/synth.json" "
c = {x['comm']: x for x in d['communicators']}
a, b = c['$A'], c['$B']
assert a['ahead'] == [1] and a['behind'] == [] and a['likely_cause'] == 2, a
assert b['mismatches'][0]['seq'] == 5 and len(b['mismatches'][0]['calls']) == 3, b['mismatches']
"

# Malformed files: each is named with its line; the good ones are still reported.
printf 'COLL-FLIGHT 1\ncomm 00000000000000aa\nrank 0\n' >"$s/flight-cut.txt"
printf 'hello\n' >"$s/flight-notrec.txt"
printf 'COLL-FLIGHT 7\n' >"$s/flight-v7.txt"
printf 'COLL-FLIGHT 1\ncomm 00000000000000cc\nrank 0\nnranks 2\nreason failed\npeer rank=1 sent=1 sent_posted=1 recvd=1 recvd_posted=1\nend\n' >"$s/flight-peer.txt"
printf 'COLL-FLIGHT 1\ncomm 00000000000000cc\nrank 5\nnranks 2\nreason failed\nend\n' >"$s/flight-rank.txt"
printf 'COLL-FLIGHT 1\ncomm 00000000000000cc\nrank 0\nnranks 2\nreason failed\ncall seq=x name=a state=done\nend\n' >"$s/flight-seq.txt"
printf 'COLL-FLIGHT 1\ncomm 0\0\nend\n' >"$s/flight-nul.txt"
: >"$s/flight-empty.txt"
head -c 200000 /dev/zero | tr '\0' 'a' >"$s/flight-long.txt"
"$collinfo" --flight "$s" >"$dir/bad.txt" 2>"$dir/bad.err"
rc=$?
[ $rc -eq 1 ] || fail "malformed: collinfo exited $rc, not 1"
cat "$dir/bad.err"
expect malformed "$dir/bad.err" "$s/flight-cut.txt:3: no end line: the file is cut short"
expect malformed "$dir/bad.err" "$s/flight-notrec.txt:1: not a flight record"
expect malformed "$dir/bad.err" "$s/flight-v7.txt:1: format version 7; this collinfo reads version 1"
expect malformed "$dir/bad.err" "$s/flight-peer.txt:6: a peer line before any call line"
expect malformed "$dir/bad.err" "$s/flight-rank.txt: rank 5 of 2 ranks"
expect malformed "$dir/bad.err" "$s/flight-seq.txt:6: call: bad seq=x"
expect malformed "$dir/bad.err" "$s/flight-nul.txt:2: a NUL byte"
expect malformed "$dir/bad.err" "$s/flight-empty.txt: empty file"
expect malformed "$dir/bad.err" "$s/flight-long.txt:1: line longer than"
expect malformed "$dir/bad.txt" "rank 1 is ahead"
"$collinfo" --flight "$s" --json >"$dir/bad.json" 2>/dev/null
check_json "malformed --json" "$dir/bad.json" "
assert len(d['errors']) == 9, d['errors']
assert len(d['communicators']) == 2
"
# A directory that does not exist, and one without records.
"$collinfo" --flight "$dir/none" >/dev/null 2>"$dir/none.err"
rc=$?
[ $rc -eq 1 ] || fail "missing directory: collinfo exited $rc, not 1"
expect "missing directory" "$dir/none.err" "cannot open the directory $dir/none"
mkdir "$dir/empty"
"$collinfo" --flight "$dir/empty" >/dev/null 2>"$dir/empty.err"
rc=$?
[ $rc -eq 1 ] || fail "empty directory: collinfo exited $rc, not 1"
expect "empty directory" "$dir/empty.err" "no flight records"
"$collinfo" --flight >/dev/null 2>&1
rc=$?
[ $rc -eq 2 ] || fail "--flight without a directory: collinfo exited $rc, not 2"

if [ $failures -ne 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "all passed"
