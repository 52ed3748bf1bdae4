#!/bin/bash
# collCommInitFromEnv under the real torchrun: rank 0 serves the root on a port of the
# kernel's choice and publishes it through torchrun's own store (docs/env.md, "The root
# under torchrun").  For each torch found, with MASTER_PORT inside the ephemeral port
# range (where MASTER_PORT + 1, the old scheme, was often taken by a connection to the
# store):
#   - three runs of NPROC ranks of torchrun_child (two communicators each, keys root_0
#     and root_1), every rank's sums checked, and the root seen coming from the store,
#     while a socket of this script listens on MASTER_PORT + 1 (as the local port of a
#     connection to the store may hold it: the old scheme fails there every time);
#   - a restart: the last rank of attempt 0 exits 3 once its communicators are up,
#     torchrun (--max-restarts 1) starts the job again, and attempt 1 must not take
#     attempt 0's keys;
#   - --standalone: torch 1.13's c10d rendezvous leaves MASTER_PORT to rank 0 (no
#     agent store: the root is served there), 2.x's shares its rendezvous store;
#   - two hosts (network namespaces made by ../shared/tools/netns-cluster; skipped
#     without them), 2 ranks on each, MASTER_ADDR host 0's name: rank 0 serves the
#     root on the interface that reaches the store, host 0's eth0;
#   - torch 2.x: the same ranks started by this script against a store of torch's
#     classic server (use_libuv=False; torchrun's agent serves the libuv one), which
#     closes a client that does not validate first.
# The torches: each python of COLL_TEST_TORCH_PYTHONS (space-separated; default Debian's
# /usr/bin/python3, 1.13) that has torch; meson runs it once for the build's torch 2.13
# venv and once for Debian's.
# Exits 77 (skip) when no torch is installed.
# Usage: test_torchrun.sh TORCHRUN_CHILD
set -u
CHILD=$(realpath "$1")
NPROC=${COLL_TEST_TORCHRUN_NPROC:-4}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

pythons=()
for p in ${COLL_TEST_TORCH_PYTHONS:-/usr/bin/python3}; do
    if [ -x "$p" ] && "$p" -c 'import torch.distributed.run' 2>/dev/null; then
        pythons+=("$p")
    else
        echo "note: $p has no torch (./run.sh makes the torch venvs it can): not tested"
    fi
done
if [ ${#pythons[@]} -eq 0 ]; then
    echo "SKIP: no torch: no python of COLL_TEST_TORCH_PYTHONS" \
         "(${COLL_TEST_TORCH_PYTHONS:-/usr/bin/python3}) can import torch.distributed.run"
    exit 77
fi

# A free port inside the ephemeral range, away from its edges, whose next port is
# free too.
ephemeral_port() {
    "$1" - <<'PY'
import random, socket
lo, hi = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
for _ in range(200):
    p = random.randrange(lo + 100, hi - 100)
    try:
        with socket.socket() as a, socket.socket() as b:
            a.bind(("127.0.0.1", p))
            b.bind(("127.0.0.1", p + 1))
        print(p)
        break
    except OSError:
        pass
PY
}

# Listens on 127.0.0.1:PORT in the background until release_port; holder is its pid.
holder=
hold_port() {
    "$1" -c 'import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
print("held", flush=True)
time.sleep(600)' "$2" >"$TMP/held" 2>&1 &
    holder=$!
    for _ in $(seq 50); do
        grep -q held "$TMP/held" && return 0
        sleep 0.1
    done
    echo "cannot hold port $2: $(cat "$TMP/held")"
    return 1
}
release_port() {
    [ -n "$holder" ] && kill "$holder" 2>/dev/null && wait "$holder" 2>/dev/null
    holder=
}
trap 'release_port; rm -rf "$TMP"' EXIT

# run NAME PYTHON WANT_ATTEMPT CHECK_STORE TORCHRUN_ARGS... : every rank of the
# attempt must print its line with the right sums; with CHECK_STORE yes, the root
# must have come through torchrun's store.
run() {
    local name=$1 py=$2 attempt=$3 check_store=$4
    shift 4
    local out=$TMP/out.$$.$RANDOM
    (cd "$TMP" && unset COLL_COMM_ID NCCL_COMM_ID &&
        COLL_TIMEOUT_MS=30000 COLL_DEBUG=INFO COLL_DEBUG_SUBSYS=ENV timeout 180 \
            "$py" -m torch.distributed.run "$@" "$CHILD") >"$out" 2>&1
    local rc=$?
    local want=$((NPROC * (NPROC + 1) / 2))
    local good
    good=$(grep -c "torchrun_child: rank [0-9]* of $NPROC attempt $attempt: sums $want $((10 * want)): ok" "$out")
    local via
    via=$(grep -c "through torchrun's store at" "$out")
    if [ $rc -ne 0 ] || [ "$good" -ne "$NPROC" ]; then
        fail "$name: exit $rc, $good of $NPROC ranks right"
        grep -v 'OMP_NUM_THREADS\|^\*\*\*\*' "$out" | grep -v 'COLL INFO ENV' | tail -n 15
        return
    fi
    if [ "$check_store" = yes ] && [ "$via" -lt $((2 * NPROC)) ]; then
        fail "$name: $via of $((2 * NPROC)) communicators' roots came through the store"
        grep 'COLL INFO ENV' "$out" | tail -n 8
        return
    fi
    if [ "$check_store" = no ] && [ "$via" -ne 0 ]; then
        fail "$name: the root came through a store, where torchrun serves none"
        return
    fi
    # The probe must leave no trace in torch's log (2.x's store warns when it writes
    # to a connection the client has closed).
    if grep -q 'Write to client failed\|invalid command\|Miscellaneous client' "$out"; then
        fail "$name: torch's store logged about the client"
        grep 'Write to client failed\|invalid command\|Miscellaneous client' "$out" | head -n 3
        return
    fi
    echo "ok:   $name: $NPROC ranks right, $via roots through the store"
}

# two_hosts PYTHON NODE_RANK_OPT MASTER_ADDR_OPT TORCHRUN_ARGS...: one torchrun on each
# of two namespaces, node 0's agent serving the store; run in a subshell (it exits 77
# when there are no namespaces).
two_hosts() {
    local py=$1 node_opt=$2 addr_opt=$3
    shift 3
    src=$(cd "$(dirname "$0")/.." && pwd)
    # shellcheck source=tests/netns_lib.sh
    . "$src/tests/netns_lib.sh"
    netns_find
    local dir node
    dir=$(mktemp -d /tmp/test_torchrun.XXXXXX)
    netns_up "trun$(($$ % 100000))x" 2 "$dir"
    for node in 0 1; do
        # Not COLL_SOCKET_IFNAME=lo (the tests' default): the hosts meet over eth0.
        "$tool" exec "${netns_prefix}$node" -- env -u COLL_SOCKET_IFNAME -u COLL_COMM_ID \
            COLL_TIMEOUT_MS=30000 COLL_DEBUG=INFO COLL_DEBUG_SUBSYS=ENV timeout 180 \
            "$py" -m torch.distributed.run "$@" --nnodes 2 "$node_opt" "$node" \
            "$addr_opt" "${netns_prefix}0" "$CHILD" >"$dir/out.$node" 2>&1 &
        pids+=($!)
    done
    local rc=0
    wait "${pids[0]}" || rc=1
    wait "${pids[1]}" || rc=1
    pids=()
    local want=$((NPROC * (NPROC + 1) / 2)) half=$((NPROC / 2)) good0 good1 via0 via1 line
    line="torchrun_child: rank [0-9]* of $NPROC attempt 0: sums $want $((10 * want)): ok"
    good0=$(grep -c "$line" "$dir/out.0")
    good1=$(grep -c "$line" "$dir/out.1")
    via0=$(grep -c "COLL INFO ENV root $root_ip:[0-9]* through torchrun's store" "$dir/out.0")
    via1=$(grep -c "COLL INFO ENV root $root_ip:[0-9]* through torchrun's store" "$dir/out.1")
    echo "two hosts: exit $rc, ranks right $good0 + $good1, roots on $root_ip through the store $via0 + $via1"
    if [ $rc -ne 0 ] || [ "$good0" -ne "$half" ] || [ "$good1" -ne "$half" ] ||
            [ "$via0" -ne "$NPROC" ] || [ "$via1" -ne "$NPROC" ]; then
        tail -n 8 "$dir/out.0" "$dir/out.1"
        return 1
    fi
}

# classic_store NAME PYTHON: a TCPStore of torch 2.x's classic server on a free port,
# and NPROC ranks of torchrun_child started here with torchrun's variables.
classic_store() {
    local name=$1 py=$2 port r rc=0
    port=$(ephemeral_port "$py")
    "$py" -c 'import datetime, sys, time
import torch.distributed as dist
s = dist.TCPStore("127.0.0.1", int(sys.argv[1]), 1, True, datetime.timedelta(seconds=60),
                  wait_for_workers=False, use_libuv=False)
print("store up, libuv", s.libuvBackend, flush=True)
time.sleep(120)' "$port" >"$TMP/store.out" 2>&1 &
    local store=$!
    for _ in $(seq 300); do grep -q 'store up' "$TMP/store.out" && break; sleep 0.1; done
    local ranks=()
    for r in $(seq 0 $((NPROC - 1))); do
        env -u COLL_COMM_ID RANK=$r WORLD_SIZE=$NPROC MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            TORCHELASTIC_RUN_ID=classic TORCHELASTIC_RESTART_COUNT=0 \
            TORCHELASTIC_USE_AGENT_STORE=True COLL_TIMEOUT_MS=30000 COLL_DEBUG=INFO \
            COLL_DEBUG_SUBSYS=ENV,BOOT timeout 120 "$CHILD" >"$TMP/classic.$r" 2>&1 &
        ranks+=($!)
    done
    for r in "${ranks[@]}"; do wait "$r" || rc=1; done
    kill "$store" 2>/dev/null
    wait "$store" 2>/dev/null
    local want=$((NPROC * (NPROC + 1) / 2)) good validated
    good=$(cat "$TMP"/classic.* | grep -c "attempt 0: sums $want $((10 * want)): ok")
    validated=$(cat "$TMP"/classic.* | grep -c "connected, torch 2.x (validated) dialect")
    rm -f "$TMP"/classic.*
    if [ $rc -ne 0 ] || [ "$good" -ne "$NPROC" ] || [ "$validated" -lt "$NPROC" ] ||
            ! grep -q 'libuv False' "$TMP/store.out"; then
        fail "$name: exit $rc, $good of $NPROC ranks right, $validated validated connections"
        cat "$TMP/store.out"
        return
    fi
    echo "ok:   $name: $NPROC ranks right, each connection validated"
}

for py in "${pythons[@]}"; do
    ver=$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)
    if [ -z "$ver" ]; then
        fail "$py: cannot import torch"
        continue
    fi
    case $ver in
    1.*) # torch 1.13's torchrun spells its options with underscores and, on Debian 12,
         # needs -r 1 -t 1 (docs/env.md); its agent looks at the workers every 5 s
         # unless told otherwise (2.x's every 0.1 s).
        opts=(--no_python -r 1 -t 1 --monitor_interval 0.5) nproc_opt=--nproc_per_node
        port_opt=--master_port restarts_opt=--max_restarts standalone_store=no
        node_opt=--node_rank addr_opt=--master_addr ;;
    *)  opts=(--no-python) nproc_opt=--nproc-per-node
        port_opt=--master-port restarts_opt=--max-restarts standalone_store=yes
        node_opt=--node-rank addr_opt=--master-addr ;;
    esac
    two_opts=("${opts[@]}" "$nproc_opt" $((NPROC / 2)))
    opts+=("$nproc_opt" "$NPROC")
    echo "torch $ver ($py)"
    for i in 1 2 3; do
        port=$(ephemeral_port "$py")
        hold_port "$py" $((port + 1)) || { fail "torch $ver: cannot hold a port"; continue; }
        run "torch $ver, MASTER_PORT $port (ephemeral, $((port + 1)) taken), run $i" "$py" 0 \
            yes "${opts[@]}" "$port_opt" "$port"
        release_port
    done
    port=$(ephemeral_port "$py")
    TORCHRUN_CHILD_FAIL_ATTEMPT0=1 run "torch $ver, MASTER_PORT $port, restart after attempt 0" \
        "$py" 1 yes "${opts[@]}" "$port_opt" "$port" "$restarts_opt" 1
    run "torch $ver, --standalone" "$py" 0 "$standalone_store" --standalone "${opts[@]}"
    case $ver in
    1.*) ;;
    *) classic_store "torch $ver, its classic store server" "$py" ;;
    esac
    if [ $((NPROC % 2)) -eq 0 ]; then
        (two_hosts "$py" "$node_opt" "$addr_opt" "${two_opts[@]}" "$port_opt" 29500) \
            >"$TMP/two.out" 2>&1
        rc=$?
        if [ $rc -eq 0 ]; then
            echo "ok:   torch $ver, $(grep '^two hosts' "$TMP/two.out")"
        elif [ $rc -eq 77 ]; then
            echo "skip: torch $ver, two hosts: $(grep SKIP "$TMP/two.out" | head -n 1)"
        else
            fail "torch $ver, two hosts"
            tail -n 20 "$TMP/two.out"
        fi
    fi
done

echo "torchrun: $failures failures"
[ "$failures" -eq 0 ]
