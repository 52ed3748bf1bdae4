#!/bin/bash
# Many ranks on one host (docs/transports.md, "Ring size" and "Descriptors"):
# all-to-all and the naive allreduce (a star: the root waits on every peer) as
# 96 and 128 threads in one process, and as 96 processes under collrun, checked
# (-c 1: every element against its expected value) and under a per-call limit
# (-T) that a wait missing its wake-ups (seen 100 ms late) would exceed, with
# COLL_SPIN_US=0 so that every wait blocks in poll().  Also the smallest ring:
# COLL_SHM_BUDGET_MB=1 puts 12 ranks on the floor of 2 slots of 4 KiB.
# Usage: test_many.sh quick|full COLLRUN ALLTOALL_PERF ALLREDUCE_PERF
#   quick: threads with small messages, the floor, the descriptor limit (default suite)
#   full:  up to 256 KiB per peer as 96 threads and as 96 processes, 128 KiB as
#          128 threads (slow_tests)
# Message sizes: the perf tools hold 3 buffers of the whole size per rank, so 1 MiB
# per peer would take 3 x 96 MiB x 96 ranks = 27 GiB; 256 KiB per peer (24 MiB
# buffers, 7 GiB in all) already spans 2.7 rings of 96 ranks (4 x 24 KiB).
set -u

if [ $# -ne 4 ] || { [ "$1" != quick ] && [ "$1" != full ]; }; then
    echo "usage: $0 quick|full COLLRUN ALLTOALL_PERF ALLREDUCE_PERF" >&2
    exit 2
fi
MODE=$1
COLLRUN=$2
A2A=$3
AR=$4
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0

# check NAME CMD...: runs CMD (a perf tool); passes when it exits 0 and reports
# no wrong element.
check() {
    local name=$1 t0 rc=0
    shift
    t0=$(date +%s%3N)
    "$@" >"$TMP/out" 2>"$TMP/err" </dev/null || rc=$?
    local ms=$(($(date +%s%3N) - t0))
    if [ $rc -eq 0 ] && grep -q '# Out of bounds values : 0 OK' "$TMP/out"; then
        echo "ok:   $name ($ms ms)"
        return 0
    fi
    echo "FAIL: $name: exit $rc after $ms ms"
    grep -v '^#  Rank' "$TMP/out" | tail -n 15 | sed 's/^/    out| /'
    grep -v 'flight' "$TMP/err" | head -n 10 | cut -c1-400 | sed 's/^/    err| /'
    failures=$((failures + 1))
    return 1
}

# The default COLL_TIMEOUT_MS of the tests is 60 s; -T fails a call that takes
# longer than that many seconds.
a2a_small=(-b 96 -e 96K -f 32 -c 1 -n 3 -w 1 -T 20)
naive=(-b 8 -e 64K -f 8 -c 1 -n 5 -w 1 -d float -o sum -T 20)

# refused: 24 processes whose open files limit (48) cannot hold a socket per
# direction to each of their 23 peers fail at once, naming RLIMIT_NOFILE.
# (Threads of one process share bells and need a few descriptors per rank.)
refused() {
    local t0 rc=0 ms
    t0=$(date +%s%3N)
    "$COLLRUN" -n 24 --timeout 60 -- bash -c 'ulimit -n 48 && exec "$@"' _ \
        "$A2A" -b 24K -e 24K -c 1 -n 1 -w 1 -T 20 >"$TMP/out" 2>"$TMP/err" </dev/null || rc=$?
    ms=$(($(date +%s%3N) - t0))
    if [ $rc -ne 0 ] && [ $ms -lt 30000 ] && grep -q 'RLIMIT_NOFILE = 48' "$TMP/err" &&
       grep -q 'ulimit -Hn' "$TMP/err"; then
        echo "ok:   alltoall, 24 processes, RLIMIT_NOFILE 48: fails in $ms ms naming it"
    else
        echo "FAIL: alltoall, 24 processes, RLIMIT_NOFILE 48: exit $rc after $ms ms," \
             "no error naming RLIMIT_NOFILE"
        grep -v 'flight' "$TMP/err" | head -n 5 | cut -c1-400 | sed 's/^/    err| /'
        failures=$((failures + 1))
    fi
}

if [ "$MODE" = quick ]; then
    # Threads of one process: a bell per rank, not a socket per direction of each
    # pair (96 threads held ~18 500 descriptors, 128 threads would need ~33 000).
    check "alltoall, 96 threads, 0-1 KiB per peer" "$A2A" -t 96 "${a2a_small[@]}"
    check "alltoall, 96 threads, 0-1 KiB per peer, every wait blocking" \
        env COLL_SPIN_US=0 "$A2A" -t 96 "${a2a_small[@]}"
    # 96 threads fit an open files limit of 1024
    check "alltoall, 96 threads, RLIMIT_NOFILE 1024" \
        bash -c 'ulimit -n 1024 && exec "$@"' _ "$A2A" -t 96 "${a2a_small[@]}"
    # 128 threads: every wait blocking, the harder case of the two above.
    check "alltoall, 128 threads, 0-1 KiB per peer, every wait blocking" \
        env COLL_SPIN_US=0 "$A2A" -t 128 -b 128 -e 128K -f 32 -c 1 -n 2 -w 1 -T 20
    # Processes still hold a socket per direction: past the limit, a clear error.
    refused
    # The star needs a socket per peer at the root only.
    check "naive allreduce, 96 threads, every wait blocking" \
        env COLL_SPIN_US=0 COLL_ALGO=naive "$AR" -t 96 "${naive[@]}"

    # The floor: with a 1 MiB budget, the 132 rings of 12 ranks get 7.9 KiB each,
    # less than the floor of 2 slots of 4 KiB (and a control page): every ring is
    # the floor (a WARN says the budget cannot hold it), and messages of up to
    # 1 MiB per peer stream through it.
    floor_env=(env COLL_SHM_BUDGET_MB=1 COLL_DEBUG=INFO COLL_DEBUG_SUBSYS=SHM)
    if check "alltoall, 12 processes on the floor ring, 4 B-1 MiB per peer" \
        "${floor_env[@]}" "$COLLRUN" -n 12 --timeout 120 "$A2A" -b 48 -e 12M -f 8 -c 1 -n 2 -w 1; then
        if ! grep -q 'rings of 2 slots of 4 KiB per peer' "$TMP/err" ||
           ! grep -q 'cannot hold a ring for each of the 132 pairs' "$TMP/err"; then
            echo "FAIL: the floor run did not report rings of 2 slots of 4 KiB over the budget"
            failures=$((failures + 1))
        fi
    fi
    check "allreduce (auto), 12 processes on the floor ring, 8 B-8 MiB" \
        "${floor_env[@]}" "$COLLRUN" -n 12 --timeout 120 "$AR" -b 8 -e 8M -f 16 -c 1 -n 2 -w 1 \
        -d float -o sum
    # Up to 16 ranks nothing changes: the ring is the configured 16 x 256 KiB.
    if check "alltoall, 16 threads, the full ring" env COLL_DEBUG=INFO COLL_DEBUG_SUBSYS=SHM \
        "$A2A" -t 16 -b 16 -e 16K -f 32 -c 1 -n 2 -w 1; then
        if ! grep -q 'rings of 16 slots of 256 KiB per peer$' "$TMP/err"; then
            echo "FAIL: 16 ranks did not keep rings of 16 slots of 256 KiB"
            failures=$((failures + 1))
        fi
    fi
else
    a2a_big=(-b 96 -e 24M -f 4 -c 1 -n 1 -w 1 -T 60)
    check "alltoall, 96 threads, 0-256 KiB per peer" "$A2A" -t 96 "${a2a_big[@]}"
    check "alltoall, 128 threads, 0-128 KiB per peer" \
        "$A2A" -t 128 -b 128 -e 16M -f 4 -c 1 -n 1 -w 1 -T 60
    check "alltoall, 96 processes, 0-256 KiB per peer" \
        "$COLLRUN" -n 96 --timeout 900 "$A2A" "${a2a_big[@]}"
    check "naive allreduce, 96 processes, every wait blocking" \
        env COLL_SPIN_US=0 COLL_ALGO=naive "$COLLRUN" -n 96 --timeout 600 "$AR" "${naive[@]}"
    check "naive allreduce, 128 threads, 8 B-4 MiB" \
        env COLL_ALGO=naive "$AR" -t 128 -b 8 -e 4M -f 8 -c 1 -n 1 -w 1 -d float -o sum -T 60
fi

if [ $failures -ne 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "all checks passed"
