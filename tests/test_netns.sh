#!/bin/bash
# Network faults between hosts: four simulated hosts in network namespaces
# (../shared/tools/netns-cluster: one NIC eth0 each, on one switch, 1 Gbit/s
# links), one rank per host over TCP (COLL_TRANSPORTS=tcp, COLL_SOCKET_IFNAME=eth0,
# the root at the first host's address).  Each rank is `test_kill --one-rank`: a
# loop of checked float32 allreduces of 1 MiB.
#
#   clean      the loop, unshaped: every rank completes with right sums
#   loss       the same with 5 % packet loss on host 1's link (both directions):
#              it must still complete with right sums, only slower; the slowdown
#              against the clean run is printed
#   partition  host 2's cable is pulled (netns-cluster link 2 down) while the
#              ranks loop with COLL_TIMEOUT_MS=5000: every rank, rank 2 included,
#              must end with an error within the timeout + 5 s of the cut, naming
#              a rank; rank 3, which receives from rank 2 in the ring, names it
#              when it timed out itself.  Who times out first is a race; the
#              others hear of it by its failure notice, which names the rank it
#              came from (rank 1 may have handed all its data to the kernel and
#              wait only on rank 0).
#
# Afterwards no process may be left in the namespaces and nothing of the library
# in /dev/shm.  The cluster is always torn down (trap).  Exits 77 (skipped) with
# the reason when not root or when namespaces cannot be made.
#
#   test_netns.sh TEST_KILL        (NETNS_CLUSTER: the tool's path, if not found)
set -u

kill_bin=$1
src=${COLL_SOURCE_ROOT:-$(dirname "$0")/..}
timeout_ms=5000
slack_s=5
count=262144 # 1 MiB of float32
iters=100
secret=00112233445566778899aabbccddeeff

. "$(dirname "$0")/netns_lib.sh"
netns_find
dir=$(mktemp -d /tmp/test_netns.XXXXXX)
netns_up "cf$(($$ % 100000))x" 4 "$dir"
prefix=$netns_prefix
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
now() { date +%s.%N; }

# start TAG ITERS TIMEOUT_MS PORT: one rank per host, in the background.
start() {
    local tag=$1 n=$2 tmo=$3 port=$4
    pids=()
    for i in 0 1 2 3; do
        "$tool" exec -i "$i" --prefix "$prefix" -- env COLL_RANK="$i" COLL_NRANKS=4 \
            COLL_COMM_ID="$root_ip:$port" COLL_SECRET="$secret" COLL_TRANSPORTS=tcp \
            COLL_SOCKET_IFNAME=eth0 COLL_TIMEOUT_MS="$tmo" \
            "$kill_bin" --one-rank "$n" --count "$count" >"$dir/$tag.$i" 2>&1 &
        pids+=($!)
    done
}

# finish TAG LIMIT_S: waits for the ranks, killing them after LIMIT_S; exit codes
# land in $dir/TAG.rc.I.
finish() {
    local tag=$1 limit=$2 t0
    t0=$(now)
    while :; do
        local left=0
        for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && left=$((left + 1)); done
        [ "$left" = 0 ] && break
        if awk -v a="$(now)" -v b="$t0" -v l="$limit" 'BEGIN { exit !(a - b > l) }'; then
            fail "$tag: ranks still running after ${limit} s; killing them"
            for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
            break
        fi
        sleep 0.1
    done
    for i in 0 1 2 3; do
        wait "${pids[$i]}"
        echo $? >"$dir/$tag.rc.$i"
    done
    pids=()
}

# The loop's time: the slowest rank's "in S s".
loop_time() {
    sed -n 's/.* ok after [0-9]* allreduces in \([0-9.]*\) s.*/\1/p' "$dir/$1".[0-3] |
        sort -g | tail -1
}

expect_ok() {
    local tag=$1
    for i in 0 1 2 3; do
        rc=$(cat "$dir/$tag.rc.$i")
        if [ "$rc" != 0 ] || ! grep -q " ok after $iters allreduces" "$dir/$tag.$i"; then
            fail "$tag: rank $i exited $rc:"
            sed 's/^/    /' "$dir/$tag.$i"
        fi
    done
}

# --- clean, then 5 % loss on host 1 ---
start clean "$iters" 60000 29500
finish clean 60
expect_ok clean
t_clean=$(loop_time clean)

"$tool" shape 1 --prefix "$prefix" --loss 5% >/dev/null 2>"$dir/shape.err" ||
    fail "netns-cluster shape 1 --loss 5%: $(cat "$dir/shape.err")"
start loss "$iters" 60000 29501
finish loss 90
expect_ok loss
t_loss=$(loop_time loss)
"$tool" shape 1 --prefix "$prefix" --loss 0 >/dev/null 2>&1
if [ -n "$t_clean" ] && [ -n "$t_loss" ]; then
    echo "loss: $iters allreduces of 1 MiB on 4 hosts: clean $t_clean s, 5 % loss on host 1" \
        "$t_loss s: $(awk -v a="$t_loss" -v b="$t_clean" 'BEGIN { printf "%.1f", a / b }')x slower"
fi

# --- partition: host 2's cable pulled mid-loop ---
start part 100000000 "$timeout_ms" 29502
for _ in $(seq 300); do
    [ "$(cat "$dir"/part.[0-3] 2>/dev/null | grep -c ': running$')" = 4 ] && break
    sleep 0.1
done
[ "$(cat "$dir"/part.[0-3] | grep -c ': running$')" = 4 ] || fail "partition: the ranks did not start"
sleep 0.5
t_cut=$(now)
"$tool" link 2 down --prefix "$prefix" >/dev/null 2>"$dir/link.err" ||
    fail "netns-cluster link 2 down: $(cat "$dir/link.err")"
finish part $((timeout_ms / 1000 + slack_s + 20))
"$tool" link 2 up --prefix "$prefix" >/dev/null 2>&1
bound=$((timeout_ms / 1000 + slack_s))
for i in 0 1 2 3; do
    rc=$(cat "$dir/part.rc.$i")
    line=$(grep ' error after ' "$dir/part.$i")
    msg=$(sed -n 's/^rank [0-9]*: message: //p' "$dir/part.$i")
    t_err=$(sed -n 's/.* error after .* at \([0-9.]*\): .*/\1/p' "$dir/part.$i")
    if [ "$rc" != 3 ] || [ -z "$t_err" ]; then
        fail "partition: rank $i exited $rc, want 3 (an error):"
        sed 's/^/    /' "$dir/part.$i"
        continue
    fi
    after=$(awk -v a="$t_err" -v b="$t_cut" 'BEGIN { printf "%.2f", a - b }')
    echo "partition: rank $i$([ $i = 2 ] && echo ' (cut off)'): error ${after} s after the cut: $msg"
    awk -v a="$after" -v b="$bound" 'BEGIN { exit !(a > b) }' &&
        fail "partition: rank $i got its error ${after} s after the cut, want under $bound s"
    case "$msg" in *"rank "*) ;; *) fail "partition: rank $i: '$msg' names no rank" ;; esac
    # Rank 3 receives from rank 2 in the ring, so it waits on it whenever it waits.
    if [ "$i" = 3 ] && [[ "$line" == *"timed out"* ]]; then
        case "$msg" in *"rank 2 "*) ;; *) fail "partition: rank $i timed out, but '$msg' does not name rank 2" ;; esac
    fi
done

# --- nothing left ---
for i in 0 1 2 3; do
    left=$(ip netns pids "$prefix$i" 2>/dev/null)
    [ -z "$left" ] || fail "processes left in host $i: $left"
done
# (the host's ledger of shared memory, libcollective-ledger-*, is meant to stay)
if ls /dev/shm 2>/dev/null | grep -v '^libcollective-ledger-' | grep -q -e libcollective -e '^coll-'; then
    fail "/dev/shm holds segments of the library: $(ls /dev/shm | grep -v '^libcollective-ledger-' | grep -e libcollective -e '^coll-')"
fi
[ "$failures" = 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "test_netns: all passed"
