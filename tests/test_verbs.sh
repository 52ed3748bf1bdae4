#!/usr/bin/env bash
# The verbs transport on a real verbs stack: Soft-RoCE (rxe0) inside a throw-away
# VM (../shared/tools/rxe-vm), booted once for all of these:
#
#   sweep-verbs-n{2,3,4}        tests/test_sweep with COLL_TRANSPORTS=verbs (n = 2:
#                               allreduce with the 1M+3 count; 3, 4: all, without)
#   sweep-verbs-ALGO-n{3,4}     the same with COLL_ALGO forced (ring, tree, naive,
#                               rd; the collectives of the `forced` table in
#                               tests/meson.build), without the 1M+3 count
#   sweep-verbs-tiny-n3         2 slots of 4 KiB: every message wraps the ring
#   p2p-verbs-n3                tests/test_p2p
#   kill-verbs                  tests/test_kill: a rank dies mid-allreduce
#   transport-verbs             tests/test_transport --transport verbs: the
#                               transport interface driven directly
#   transport-verbs-tiny        the same with 2 slots of 4 KiB
#   bad-hca, bad-gid            a COLL_IB_HCA / COLL_IB_GID_INDEX that names
#                               nothing fails init with COLL_TRANSPORTS=verbs,
#                               and the message names the parameter
#   rdv-verbs-n2                tests/test_rdv: registered and ordinary buffers on
#                               both sides, sizes around COLL_IB_RDV_BYTES, buffers
#                               reallocated between calls; the log must show
#                               messages read in place and declined
#   rdv-verbs-ring-n3           the same with COLL_ALGO=ring (allgather, broadcast)
#   rdv-verbs-tiny-n3           2 slots of 4 KiB and a threshold of 5000 bytes:
#                               announcements wrap the ring between streamed pieces
#   rdv-verbs-off-n2            COLL_IB_RDV_BYTES=-1: registered buffers, no
#                               announcement (the log shows none)
#   rdv-bench                   not a test, and only with COLL_TEST_VERBS_BENCH=1
#                               (about 2 minutes under TCG): sendrecv_perf and
#                               all_gather_perf (ring) -n 2 -R 1 from 1 MiB, the
#                               rendezvous against the slots (COLL_IB_RDV_BYTES=-1):
#                               the ratio of their out-of-place times per size
#
# Prints one line per test and a summary; exits 1 when any failed, 77 (skipped)
# with the reason when the VM cannot be booted (no rxe-vm, not root, no qemu)
# or the library was built without verbs.
#
#   [COLL_TEST_VERBS_ONLY=WORD] test_verbs.sh COLLRUN TEST_SWEEP TEST_P2P TEST_KILL ALLREDUCE_PERF
#                 TEST_TRANSPORT TEST_RDV SENDRECV_PERF ALL_GATHER_PERF HAVE_VERBS
set -u

if [ "${1:-}" = "--inside" ]; then
    shift
    collrun=$1 sweep=$2 p2p=$3 kill=$4 perf=$5 transport=$6 rdv=$7 srperf=$8 agperf=$9
    logdir=$(mktemp -d /tmp/test_verbs.XXXXXX)
    export COLL_TRANSPORTS=verbs COLL_TIMEOUT_MS=60000
    unset COLL_ALGO COLL_IB_HCA COLL_IB_GID_INDEX COLL_IB_NSLOTS COLL_IB_SLOT_BYTES \
        COLL_IB_RDV_BYTES COLL_REG_CACHE_ENTRIES COLL_REG_CACHE_BYTES
    failed=0 passed=0 names=""
    # COLL_TEST_VERBS_ONLY=WORD runs only the tests whose names contain WORD.
    selected() { [ -z "${COLL_TEST_VERBS_ONLY:-}" ] || [[ $1 == *"$COLL_TEST_VERBS_ONLY"* ]]; }
    # run NAME SECONDS ENV... -- CMD...: one test with its own environment.
    run() {
        local name=$1 limit=$2
        selected "$name" || return 0
        shift 2
        local envs=()
        while [ "$1" != "--" ]; do envs+=("$1"); shift; done
        shift
        local t0=$SECONDS
        env "${envs[@]}" timeout "$limit" "$@" >"$logdir/$name.log" 2>&1
        local rc=$?
        if [ $rc -eq 0 ]; then
            passed=$((passed + 1))
            printf '  ok    %-28s %4d s\n' "$name" $((SECONDS - t0))
        else
            failed=$((failed + 1))
            names="$names $name"
            printf '  FAIL  %-28s %4d s (exit %d)\n' "$name" $((SECONDS - t0)) $rc
            tail -n 15 "$logdir/$name.log" | sed 's/^/        /'
        fi
    }
    # must_fail NAME PATTERN ENV...: init fails and stderr matches PATTERN.
    must_fail() {
        local name=$1 pattern=$2
        selected "$name" || return 0
        shift 2
        local t0=$SECONDS
        env "$@" timeout 60 "$collrun" -n 2 --timeout 60 "$perf" -b 8 -e 8 -n 1 -w 0 \
            >"$logdir/$name.log" 2>&1
        local rc=$?
        if [ $rc -ne 0 ] && grep -q -- "$pattern" "$logdir/$name.log"; then
            passed=$((passed + 1))
            printf '  ok    %-28s %4d s\n' "$name" $((SECONDS - t0))
        else
            failed=$((failed + 1))
            names="$names $name"
            printf '  FAIL  %-28s %4d s (exit %d, want a failure naming %s)\n' "$name" \
                $((SECONDS - t0)) $rc "$pattern"
            tail -n 15 "$logdir/$name.log" | sed 's/^/        /'
        fi
    }
    # log_has NAME PATTERN: the log of test NAME (which passed) matches PATTERN.
    log_has() {
        local name=$1 pattern=$2
        selected "$name" || return 0
        if grep -q -- "$pattern" "$logdir/$name.log"; then
            passed=$((passed + 1))
            printf '  ok    %-28s\n' "$name-log"
        else
            failed=$((failed + 1))
            names="$names $name-log"
            printf '  FAIL  %-28s (its log does not match %s)\n' "$name-log" "$pattern"
            grep "rendezvous" "$logdir/$name.log" | sed 's/^/        /'
        fi
    }
    # times LOG: "size time" (us, out of place) of each row of a perf tool's output
    # (its bandwidths have two decimals: too few at Soft-RoCE's speed).
    # The best of the logs given, per size.
    times() {
        awk '$1 ~ /^[0-9]+$/ && NF >= 12 && (!($1 in b) || $6 < b[$1]) { b[$1] = $6 }
             END { for (s in b) print s, b[s] }' "$@" | sort -n
    }
    t_all=$SECONDS
    echo "verbs tests on $(hostname), device ${RXE_VM_DEV:-?}, GID index ${RXE_VM_GID_INDEX:-?}"
    run sweep-verbs-n2 300 -- "$collrun" -n 2 --timeout 300 "$sweep" --big-subset --coll allreduce
    for n in 3 4; do
        run sweep-verbs-n$n 300 -- "$collrun" -n $n --timeout 300 "$sweep" --quick
    done
    for algo in ring tree naive rd; do
        case $algo in
        tree) coll=(--coll allreduce,broadcast,reduce) ;;
        rd) coll=(--coll allreduce,allgather) ;;
        *) coll=() ;;
        esac
        for n in 3 4; do
            run sweep-verbs-$algo-n$n 300 COLL_ALGO=$algo -- \
                "$collrun" -n $n --timeout 300 "$sweep" --quick "${coll[@]}"
        done
    done
    run sweep-verbs-tiny-n3 300 COLL_IB_SLOT_BYTES=4096 COLL_IB_NSLOTS=2 -- \
        "$collrun" -n 3 --timeout 300 "$sweep" --quick
    run p2p-verbs-n3 300 -- "$collrun" -n 3 --timeout 300 "$p2p"
    run kill-verbs 120 -- "$kill" --transport verbs
    run transport-verbs 300 -- "$transport" --transport verbs
    run transport-verbs-tiny 300 COLL_IB_SLOT_BYTES=4096 COLL_IB_NSLOTS=2 -- \
        "$transport" --transport verbs
    must_fail bad-hca COLL_IB_HCA COLL_IB_HCA=nosuchdev
    must_fail bad-gid COLL_IB_GID_INDEX COLL_IB_GID_INDEX=77
    # The rendezvous: the fini line of every rank counts what it read in place.
    dbg=(COLL_DEBUG=INFO COLL_DEBUG_SUBSYS=VERBS)
    run rdv-verbs-n2 300 "${dbg[@]}" -- "$collrun" -n 2 --timeout 300 "$rdv"
    log_has rdv-verbs-n2 "received [1-9][0-9]* in place, declined [1-9]"
    run rdv-verbs-ring-n3 300 COLL_ALGO=ring "${dbg[@]}" -- "$collrun" -n 3 --timeout 300 "$rdv"
    log_has rdv-verbs-ring-n3 "received [1-9][0-9]* in place"
    run rdv-verbs-tiny-n3 300 COLL_IB_SLOT_BYTES=4096 COLL_IB_NSLOTS=2 COLL_IB_RDV_BYTES=5000 \
        COLL_ALGO=ring "${dbg[@]}" -- "$collrun" -n 3 --timeout 300 "$rdv"
    log_has rdv-verbs-tiny-n3 "received [1-9][0-9]* in place"
    run rdv-verbs-off-n2 300 COLL_IB_RDV_BYTES=-1 "${dbg[@]}" -- \
        "$collrun" -n 2 --timeout 300 "$rdv"
    if selected rdv-verbs-off-n2 && grep -q "rendezvous: received" "$logdir/rdv-verbs-off-n2.log"; then
        failed=$((failed + 1))
        names="$names rdv-verbs-off-n2-log"
        echo "  FAIL  rdv-verbs-off-n2-log: announcements with COLL_IB_RDV_BYTES=-1"
    fi
    # The benchmark line: each tool with the rendezvous, then with the slots.  A
    # benchmark, not a test: the suite runs it only when asked.
    for tool in sendrecv all_gather; do
        [ "${COLL_TEST_VERBS_BENCH:-0}" = 1 ] && selected rdv-bench || break
        exe=$srperf
        [ $tool = all_gather ] && exe=$agperf
        # Interleaved, best of two: the host's load changes under an emulated VM.
        for round in 1 2; do
            for mode in rdv slots; do
                thr=131072
                [ $mode = slots ] && thr=-1
                env COLL_IB_RDV_BYTES=$thr COLL_ALGO=ring timeout 300 "$collrun" -n 2 \
                    --no-prefix --timeout 300 "$exe" -b 1M -e 16M -f 4 -n 3 -w 1 -R 1 \
                    >"$logdir/bench-$tool-$mode.$round.log" 2>&1
            done
        done
        line=$(paste -d ' ' <(times "$logdir"/bench-$tool-rdv.*.log) \
            <(times "$logdir"/bench-$tool-slots.*.log) |
            awk '$1 == $3 && $2 > 0 { printf " %sM %.2fx (%.0f / %.0f MB/s)", $1 / 1048576, \
                                          $4 / $2, $1 / $2, $1 / $4 }')
        echo "  bench $tool -n 2, rendezvous/slots bandwidth:${line:- (no figures)}"
    done
    echo "verbs: $passed passed, $failed failed in $((SECONDS - t_all)) s${names:+ (failed:$names)}"
    rm -rf "$logdir"
    [ $failed -eq 0 ]
    exit $?
fi

if [ $# -ne 10 ]; then
    echo "usage: $0 COLLRUN TEST_SWEEP TEST_P2P TEST_KILL ALLREDUCE_PERF TEST_TRANSPORT TEST_RDV" \
        "SENDRECV_PERF ALL_GATHER_PERF HAVE_VERBS" >&2
    exit 2
fi
skip() {
    echo "SKIP: $*"
    exit 77
}
[ "${10}" = "true" ] || skip "libcollective was built without verbs (libibverbs-dev not found)"
src=${COLL_SOURCE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
vm=${RXE_VM:-}
if [ -z "$vm" ]; then
    for d in "$src/../shared/tools" "$src/../../shared/tools"; do
        [ -f "$d/rxe-vm" ] && vm="$d/rxe-vm" && break
    done
fi
[ -n "$vm" ] && [ -f "$vm" ] || skip "rxe-vm not found (set RXE_VM to its path)"
[ "$(id -u)" = 0 ] || command -v qemu-system-x86_64 >/dev/null ||
    skip "rxe-vm needs root to install qemu, or qemu installed"
[ "$(uname -m)" = x86_64 ] || skip "rxe-vm runs on x86_64 hosts only"
# The VM sees the host's file system at the same paths: absolute paths work in it.
abs() { (cd "$(dirname "$1")" && echo "$(pwd)/$(basename "$1")"); }
self=$(abs "$0")
bash "$vm" --timeout 900 -- bash "$self" --inside "$(abs "$1")" "$(abs "$2")" "$(abs "$3")" \
    "$(abs "$4")" "$(abs "$5")" "$(abs "$6")" "$(abs "$7")" "$(abs "$8")" "$(abs "$9")"
rc=$?
case $rc in
125) skip "rxe-vm could not boot the VM or set up rxe0 (its message is above)" ;;
124) echo "FAIL: the VM ran past 900 s"; exit 1 ;;
esac
exit $rc
