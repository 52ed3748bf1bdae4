#!/bin/bash
# collrun --hosts across two simulated hosts: network namespaces made by
# ../shared/tools/netns-cluster (one NIC eth0 each, on one switch), reached through
# ../shared/tools/netns-rsh as the remote shell.  collrun itself runs outside them.
#
#   collective  4 ranks, 2 per host, run test_kill --one-rank (checked float32 allreduces;
#               shared memory within a host, TCP between them): every rank succeeds, and
#               its lines carry "[rank host] " with the right host
#   environment each rank (a shell) prints its host name, rank, local rank and size and
#               COLL_COMM_ID: block mapping, then --map rr; COLL_COMM_ID is the first
#               host's name; a rank on localhost runs outside the cluster
#   bindings    --bind core --report-bindings: each rank runs on the CPUs it reports
#   failure     one remote rank exits 3: collrun exits 3 at once (another rank ignores
#               SIGTERM: then within the grace period)
#   signals     SIGTERM to collrun: exit 143 at once; SIGKILL to collrun: the helpers
#               stop their ranks when the lifeline closes
#
# After each case no process may be left in either namespace (`ip netns pids`): at once
# when collrun has exited, within 5 s after SIGKILL.  The cluster is always torn down
# (trap).  Exits 77 (skipped) with the reason when not root or when namespaces cannot be
# made.
#
#   test_collrun_hosts.sh COLLRUN COLLRUN_CHILD TEST_KILL   (NETNS_CLUSTER: the tool)
set -u

if [ $# -ne 3 ]; then
    echo "usage: $0 COLLRUN COLLRUN_CHILD TEST_KILL" >&2
    exit 2
fi
collrun=$1
child=$2
kill_bin=$3
src=${COLL_SOURCE_ROOT:-$(dirname "$0")/..}

. "$(dirname "$0")/netns_lib.sh"
netns_find
rsh=$(dirname "$tool")/netns-rsh
[ -x "$rsh" ] || netns_skip "netns-rsh not found next to $tool"
dir=$(mktemp -d /tmp/test_collrun_hosts.XXXXXX)
cpid=
netns_on_exit() {
    [ -n "$cpid" ] && kill -KILL "$cpid" 2>/dev/null
}
netns_up "cw$(($$ % 100000))x" 2 "$dir"
prefix=$netns_prefix
h0=${prefix}0
h1=${prefix}1
# netns-rsh finds the tool through NETNS_CLUSTER when it is not next to it.
export NETNS_CLUSTER=$tool
# The ranks talk over the cluster's NIC; the test environment's loopback setting and
# collrun's own defaults from the caller must not apply.
export COLL_SOCKET_IFNAME=eth0 COLL_TIMEOUT_MS=30000
unset COLL_COMM_ID COLLRUN_TIMEOUT

failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
ok() { echo "ok:   $*"; }
now_ms() { date +%s%3N; }
dump() {
    sed 's/^/    out| /' "$dir/out" | head -n 20
    sed 's/^/    err| /' "$dir/err" | head -n 20
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
# run ARGS...: collrun on the cluster, output in $dir/out and $dir/err; sets rc, elapsed.
run() {
    local t0
    t0=$(now_ms)
    rc=0
    "$collrun" --rsh "$rsh" --timeout 60 "$@" >"$dir/out" 2>"$dir/err" </dev/null || rc=$?
    elapsed=$(($(now_ms) - t0))
}
has_out() { grep -qxF -- "$1" "$dir/out"; }
has_err() { grep -qF -- "$1" "$dir/err"; }
# empty_now: no process in either host's namespace.
empty_now() {
    local left
    for h in "$h0" "$h1"; do
        left=$(ip netns pids "$h" 2>/dev/null)
        if [ -n "$left" ]; then
            echo "    processes left in $h:"
            for p in $left; do echo "      $p $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"; done
            return 1
        fi
    done
}
# empty_within MS: empty_now within MS milliseconds.
empty_within() {
    local t0
    t0=$(now_ms)
    until empty_now >/dev/null; do
        [ $(($(now_ms) - t0)) -lt "$1" ] || { empty_now; return 1; }
        sleep 0.05
    done
}
# wait_lines N PATTERN: waits up to 10 s until $dir/out has N lines matching PATTERN.
wait_lines() {
    for _ in $(seq 200); do
        [ "$(grep -c -- "$2" "$dir/out" 2>/dev/null)" -ge "$1" ] && return 0
        sleep 0.05
    done
    return 1
}

echo "# collective: 2 ranks on each of $h0 and $h1"
run --hosts "$h0:2,$h1:2" "$kill_bin" --one-rank 20 --count 4096
check "exit 0 (exit $rc)" test "$rc" -eq 0
rank_ok() { grep -q "^\[$1 $2\] rank $1: ok after 20 allreduces" "$dir/out"; }
for r in 0 1; do check "rank $r on $h0 succeeds" rank_ok "$r" "$h0"; done
for r in 2 3; do check "rank $r on $h1 succeeds" rank_ok "$r" "$h1"; done
check "nothing left in the namespaces" empty_now

echo "# environment and mapping"
# shellcheck disable=SC2016 # expanded by the rank's shell
SHOW=(sh -c 'echo "host=$(cat /proc/sys/kernel/hostname)" \
    "local=$COLL_LOCAL_RANK/$COLL_LOCAL_SIZE of=$COLL_NRANKS id=$COLL_COMM_ID"')
# shows RANK HOST LOCAL_RANK LOCAL_SIZE: the rank's line says so; its COLL_COMM_ID is
# the first host's name and a port.
shows() {
    grep -qE "^\[$1 $2\] host=$2 local=$3/$4 of=4 id=$h0:[0-9]+$" "$dir/out"
}
run --hosts "$h0:2,$h1:2" "${SHOW[@]}"
check "block mapping: exit 0 (exit $rc)" test "$rc" -eq 0
check "block: rank 0 on $h0" shows 0 "$h0" 0 2
check "block: rank 1 on $h0" shows 1 "$h0" 1 2
check "block: rank 2 on $h1" shows 2 "$h1" 0 2
check "block: rank 3 on $h1" shows 3 "$h1" 1 2
check "one COLL_COMM_ID" test "$(sed 's/.* id=//' "$dir/out" | sort -u | wc -l)" -eq 1
run --hosts "$h0:2,$h1:2" --map rr "${SHOW[@]}"
check "--map rr: rank 0 on $h0" shows 0 "$h0" 0 2
check "--map rr: rank 1 on $h1" shows 1 "$h1" 0 2
check "--map rr: rank 2 on $h0" shows 2 "$h0" 1 2
check "--map rr: rank 3 on $h1" shows 3 "$h1" 1 2
me=$(uname -n)
# shellcheck disable=SC2016 # expanded by the rank's shell
run --hosts "localhost:1,$h1:1" \
    sh -c 'echo "host=$(cat /proc/sys/kernel/hostname) id=$COLL_COMM_ID"'
check "localhost: rank 0 runs here, named as this host in COLL_COMM_ID" \
    grep -qE "^\[0 localhost\] host=$me id=$me:[0-9]+$" "$dir/out"
check "rank 1 runs on $h1" grep -qE "^\[1 $h1\] host=$h1 id=$me:[0-9]+$" "$dir/out"
check "nothing left in the namespaces" empty_now

echo "# bindings"
run --hosts "$h0:2,$h1:2" --bind core --report-bindings \
    sh -c 'grep Cpus_allowed_list /proc/self/status'
bound() { # RANK HOST: the rank runs on the CPUs it reports
    local want got
    want=$(sed -n "s/^\[$1 $2\] collrun: rank $1 on $2: cpus \([^ ]*\) (core)$/\1/p" "$dir/err")
    got=$(sed -n "s/^\[$1 $2\] Cpus_allowed_list:[[:space:]]*//p" "$dir/out")
    [ -n "$want" ] && [ "$want" = "$got" ]
}
for r in 0 1; do check "rank $r on $h0 bound as reported" bound "$r" "$h0"; done
for r in 2 3; do check "rank $r on $h1 bound as reported" bound "$r" "$h1"; done

echo "# failure"
run --hosts "$h0:2,$h1:2" "$child" @3:exit:3 sleep:30
check "a remote rank's code: exit $rc, want 3" test "$rc" -eq 3
check "reported" has_err "collrun: rank 3 exited with code 3"
check "fast (${elapsed} ms, want < 3000)" test "$elapsed" -lt 3000
check "nothing left in the namespaces once collrun exits" empty_now
run --hosts "$h0:2,$h1:2" "$child" @1:ignoreterm fork:30 @3:exit:3 sleep:30
check "with a rank ignoring SIGTERM: exit $rc, want 3" test "$rc" -eq 3
check "within the grace period (${elapsed} ms, want < 5000)" test "$elapsed" -lt 5000
check "nothing left in the namespaces once collrun exits" empty_now

echo "# signals"
"$collrun" --rsh "$rsh" --hosts "$h0:2,$h1:2" "$child" @2:fork:30 out:ready sleep:30 \
    >"$dir/out" 2>"$dir/err" </dev/null &
cpid=$!
check "4 ranks started" wait_lines 4 ' ready$'
t0=$(now_ms)
kill -TERM "$cpid"
rc=0
wait "$cpid" || rc=$?
cpid=
elapsed=$(($(now_ms) - t0))
check "SIGTERM to collrun: exit $rc, want 143" test "$rc" -eq 143
check "fast (${elapsed} ms, want < 2000)" test "$elapsed" -lt 2000
check "nothing left in the namespaces once collrun exits" empty_now

"$collrun" --rsh "$rsh" --hosts "$h0:2,$h1:2" "$child" @2:fork:30 out:ready sleep:30 \
    >"$dir/out" 2>"$dir/err" </dev/null &
cpid=$!
check "4 ranks started" wait_lines 4 ' ready$'
kill -KILL "$cpid"
{ wait "$cpid"; } 2>/dev/null # no "Killed" notice
cpid=
check "SIGKILL to collrun: nothing left in the namespaces within 5 s" empty_within 5000

if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "test_collrun_hosts: all passed"
