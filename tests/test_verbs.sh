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
#
# Prints one line per test and a summary; exits 1 when any failed, 77 (skipped)
# with the reason when the VM cannot be booted (no rxe-vm, not root, no qemu)
# or the library was built without verbs.
#
#   test_verbs.sh COLLRUN TEST_SWEEP TEST_P2P TEST_KILL ALLREDUCE_PERF TEST_TRANSPORT HAVE_VERBS
set -u

if [ "${1:-}" = "--inside" ]; then
    shift
    collrun=$1 sweep=$2 p2p=$3 kill=$4 perf=$5 transport=$6
    logdir=$(mktemp -d /tmp/test_verbs.XXXXXX)
    export COLL_TRANSPORTS=verbs COLL_TIMEOUT_MS=60000
    unset COLL_ALGO COLL_IB_HCA COLL_IB_GID_INDEX COLL_IB_NSLOTS COLL_IB_SLOT_BYTES
    failed=0 passed=0 names=""
    # run NAME SECONDS ENV... -- CMD...: one test with its own environment.
    run() {
        local name=$1 limit=$2
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
    echo "verbs: $passed passed, $failed failed in $((SECONDS - t_all)) s${names:+ (failed:$names)}"
    rm -rf "$logdir"
    [ $failed -eq 0 ]
    exit $?
fi

if [ $# -ne 7 ]; then
    echo "usage: $0 COLLRUN TEST_SWEEP TEST_P2P TEST_KILL ALLREDUCE_PERF TEST_TRANSPORT HAVE_VERBS" >&2
    exit 2
fi
skip() {
    echo "SKIP: $*"
    exit 77
}
[ "$7" = "true" ] || skip "libcollective was built without verbs (libibverbs-dev not found)"
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
    "$(abs "$4")" "$(abs "$5")" "$(abs "$6")"
rc=$?
case $rc in
125) skip "rxe-vm could not boot the VM or set up rxe0 (its message is above)" ;;
124) echo "FAIL: the VM ran past 900 s"; exit 1 ;;
esac
exit $rc
