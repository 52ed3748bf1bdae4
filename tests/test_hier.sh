#!/bin/bash
# Collectives across simulated hosts: network namespaces made by
# ../shared/tools/netns-cluster (one NIC eth0 each, one switch, links left
# unshaped so that the sweep is quick).  Ranks in one namespace share memory,
# ranks in different ones talk TCP.  For each shape (ranks per host, uneven ones
# too) and numbering (block: host 0 takes ranks 0..L-1; rr: round-robin across
# the hosts) every rank runs test_sweep:
#   - every collective with COLL_ALGO=hier and --expect-algo hier: the
#     hierarchical allreduce, broadcast, reduce, allgather and reduce_scatter
#     ran every time (gather and scatter have none: the planner's), and every
#     result is exact and the allreduce's the same bytes on every rank
#     (test_sweep's checks); broadcast and reduce again with the hosts' step
#     forced to a tree and to a chain (COLL_HIER_ACROSS);
#   - every collective with the planner's choices (the flat ring follows the
#     hosts whatever the numbering).
# Then a partition: 2 hosts of 2 ranks loop hierarchical allreduces of 1 MiB
# (test_kill --one-rank) with COLL_TIMEOUT_MS=5000, and host 1's cable is
# pulled: every rank must end with an error within the timeout + 5 s, naming a
# rank.
# Afterwards no process may be left in the namespaces.  The cluster is always
# torn down (trap).  Exits 77 (skipped) with the reason when not root or when
# namespaces cannot be made.
#
#   test_hier.sh TEST_SWEEP TEST_KILL [--all]   (--all: every shape of 2-4 hosts x 1-3 ranks)
#   COLL_TEST_FULL=1: the 1M+3 counts of every collective on two shapes (else
#   the allreduce's on one); COLL_TEST_QUICK=1: none
#   NETNS_CLUSTER: the tool's path, if not found
set -u

sweep_bin=$1
kill_bin=$2
all=${3:-}
src=${COLL_SOURCE_ROOT:-$(dirname "$0")/..}
secret=00112233445566778899aabbccddeeff

. "$(dirname "$0")/netns_lib.sh"
netns_find
dir=$(mktemp -d /tmp/test_hier.XXXXXX)
netns_up "cr$(($$ % 100000))x" 4 "$dir" --rate 0
prefix=$netns_prefix
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
port=$((20000 + $$ % 20000))

# run TAG NUMBERING "L0 L1 ..." ENV... -- SWEEP_ARGS...: host i gets Li ranks,
# numbered block-wise or round-robin; waits for all and checks every exit.
run() {
    local tag=$1 numbering=$2 shape=$3
    shift 3
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    local -a sizes=($shape) left=($shape) host_of=()
    local H=${#sizes[@]} N=0 h r
    for h in "${sizes[@]}"; do N=$((N + h)); done
    if [ "$numbering" = block ]; then
        for ((h = 0; h < H; h++)); do
            for ((r = 0; r < sizes[h]; r++)); do host_of+=("$h"); done
        done
    else
        while [ ${#host_of[@]} -lt "$N" ]; do
            for ((h = 0; h < H; h++)); do
                [ "${left[h]}" -gt 0 ] && host_of+=("$h") && left[h]=$((left[h] - 1))
            done
        done
    fi
    port=$((port + 1))
    pids=()
    local t0=$SECONDS
    for ((r = 0; r < N; r++)); do
        "$tool" exec -i "${host_of[r]}" --prefix "$prefix" -- env COLL_RANK="$r" \
            COLL_NRANKS="$N" COLL_COMM_ID="$root_ip:$port" COLL_SECRET="$secret" \
            COLL_SOCKET_IFNAME=eth0 COLL_TIMEOUT_MS=60000 "${envs[@]}" \
            "$sweep_bin" "$@" >"$dir/$tag.$r" 2>&1 &
        pids+=($!)
    done
    local bad=0
    for ((r = 0; r < N; r++)); do
        if ! wait "${pids[r]}"; then
            bad=1
            fail "$tag: rank $r (host ${host_of[r]}) failed:"
            tail -5 "$dir/$tag.$r" | sed 's/^/    /'
        fi
    done
    pids=()
    [ $bad = 0 ] && echo "ok   $tag: $N ranks on hosts of $shape ($numbering), $((SECONDS - t0)) s"
}

if [ "$all" = --all ]; then
    shapes=("1 1" "2 2" "3 3" "1 1 1" "2 2 2" "3 3 3" "1 1 1 1" "2 2 2 2" "3 3 3 3"
            "3 1" "2 1 2" "1 3 2 2")
else
    shapes=("2 2" "3 1" "2 2 2" "1 3 2" "2 2 2 2")
fi
for shape in "${shapes[@]}"; do
    for numbering in block rr; do
        name=$(echo "$shape" | tr ' ' x).$numbering
        run "hier.$name" "$numbering" "$shape" COLL_ALGO=hier -- --quick --expect-algo hier
    done
done
# Broadcast and reduce with the hosts' step over a binomial tree, and as a chain,
# whatever the model would pick (COLL_HIER_ACROSS), on uneven hosts.
for how in tree chain; do
    run "hier-$how.1x3x2x2.rr" rr "1 3 2 2" COLL_ALGO=hier COLL_HIER_ACROSS=$how -- \
        --quick --coll broadcast,reduce --expect-algo hier
done
# The 1M+3 counts too (every type with sum, every op with float32 and int32;
# some element sizes for the copies): the allreduce on uneven hosts; every
# collective on even and uneven ones with COLL_TEST_FULL=1 or --all; none with
# COLL_TEST_QUICK=1 (the sanitizer pass of .ci/run).
big_shapes=("1 3 2") big_colls=allreduce
if [ "${COLL_TEST_FULL:-0}" = 1 ] || [ "$all" = --all ]; then
    big_shapes=("2 2" "1 3 2") big_colls=allreduce,broadcast,reduce,allgather,reduce_scatter
elif [ "${COLL_TEST_QUICK:-0}" = 1 ]; then
    big_shapes=()
fi
for shape in "${big_shapes[@]}"; do
    name=$(echo "$shape" | tr ' ' x).rr
    run "hier-big.$name" rr "$shape" COLL_ALGO=hier -- --coll "$big_colls" --expect-algo hier
done
# Every collective with the planner's choices, on two shapes.
for shape in "2 2" "1 2 1"; do
    for numbering in block rr; do
        name=$(echo "$shape" | tr ' ' x).$numbering
        run "plan.$name" "$numbering" "$shape" -- --quick
    done
done

# --- partition: host 1's cable pulled mid-loop (ranks 2 and 3 are there) ---
timeout_ms=5000
slack_s=5
port=$((port + 1))
pids=()
for r in 0 1 2 3; do
    "$tool" exec -i $((r / 2)) --prefix "$prefix" -- env COLL_RANK="$r" COLL_NRANKS=4 \
        COLL_COMM_ID="$root_ip:$port" COLL_SECRET="$secret" COLL_SOCKET_IFNAME=eth0 \
        COLL_TIMEOUT_MS="$timeout_ms" COLL_ALGO=allreduce:hier \
        "$kill_bin" --one-rank 100000000 --count 262144 >"$dir/part.$r" 2>&1 &
    pids+=($!)
done
for _ in $(seq 300); do
    [ "$(cat "$dir"/part.[0-3] 2>/dev/null | grep -c ': running$')" = 4 ] && break
    sleep 0.1
done
[ "$(cat "$dir"/part.[0-3] | grep -c ': running$')" = 4 ] || fail "partition: the ranks did not start"
sleep 0.5
t_cut=$(date +%s.%N)
"$tool" link 1 down --prefix "$prefix" >/dev/null 2>"$dir/link.err" ||
    fail "netns-cluster link 1 down: $(cat "$dir/link.err")"
limit=$((timeout_ms / 1000 + slack_s + 20))
for _ in $(seq $((limit * 10))); do
    left=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && left=$((left + 1)); done
    [ "$left" = 0 ] && break
    sleep 0.1
done
for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
"$tool" link 1 up --prefix "$prefix" >/dev/null 2>&1
bound=$((timeout_ms / 1000 + slack_s))
for r in 0 1 2 3; do
    wait "${pids[r]}"
    rc=$?
    msg=$(sed -n 's/^rank [0-9]*: message: //p' "$dir/part.$r")
    t_err=$(sed -n 's/.* error after .* at \([0-9.]*\): .*/\1/p' "$dir/part.$r")
    if [ "$rc" != 3 ] || [ -z "$t_err" ]; then
        fail "partition: rank $r exited $rc, want 3 (an error):"
        sed 's/^/    /' "$dir/part.$r" | tail -5
        continue
    fi
    after=$(awk -v a="$t_err" -v b="$t_cut" 'BEGIN { printf "%.2f", a - b }')
    echo "partition: rank $r$([ $r -ge 2 ] && echo ' (cut off)'): error ${after} s after the cut: $msg"
    awk -v a="$after" -v b="$bound" 'BEGIN { exit !(a > b) }' &&
        fail "partition: rank $r got its error ${after} s after the cut, want under $bound s"
    case "$msg" in *"rank "*) ;; *) fail "partition: rank $r: '$msg' names no rank" ;; esac
done
pids=()

for i in 0 1 2 3; do
    left=$(ip netns pids "$prefix$i" 2>/dev/null | wc -l)
    [ "$left" = 0 ] || fail "$left process(es) left in host $i"
done
echo "$failures failure(s)"
[ "$failures" = 0 ]
