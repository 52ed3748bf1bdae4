#!/bin/bash
# The README's path from a fresh machine to a user's own program, on this host: every
# command below must appear in README.md as written, and each runs here, with what a
# test must add (an install into a scratch directory instead of /usr/local, a free port,
# mpirun's permission to run as root and to put 4 ranks on fewer cores).  torchrun and
# mpirun are skipped when absent.  `collrun --hosts` runs on two network namespaces
# (netns-cluster; skipped without them), and so does the two-host mpirun line (mpirun
# in the first namespace, netns-rsh as its remote shell); the srun lines are not run
# (there is no Slurm here).
# Usage: test_user_path.sh SOURCE_ROOT BUILD_ROOT
set -u
SRC=$1
BUILD=$2
README=$SRC/README.md
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
# shellcheck source=tests/sanitizer_flags.sh
. "$SRC/tests/sanitizer_flags.sh"
ok() { echo "ok:   $*"; }
failed_steps=""
fail() { echo "FAIL: $*"; failures=$((failures + 1)); failed_steps="$failed_steps; $*"; }
free_port() {
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# torchrun's --master_port: a free port from the kernel (free_port), which is inside the
# ephemeral range, where MASTER_PORT + 1 is often the local port of a connection to
# torchrun's store.  The library's root no longer goes there: rank 0 serves it on a port
# of its own and publishes it through torchrun's store (docs/env.md, "The root under
# torchrun"); tests/test_torchrun.sh holds MASTER_PORT + 1 to make sure.

for cmd in 'meson install -C build' \
           'cp examples/allreduce_example.c myprog.c' \
           'cc -o myprog myprog.c $(pkg-config --cflags --libs collective)' \
           'collrun -n 4 ./myprog' \
           'torchrun --nproc_per_node 4 --no_python -r 1 -t 1 ./myprog' \
           'mpirun -np 4 -x COLL_COMM_ID=127.0.0.1:29500 ./myprog' \
           'COLL_TIMEOUT_MS=10000 collrun -n 4 --respawn build/examples/trainer/dp_trainer --elastic'; do
    grep -qF -- "$cmd" "$README" || fail "README.md no longer says: $cmd"
done

# meson install -C build (into a scratch root)
if ! meson install -C "$BUILD" --no-rebuild --quiet --destdir "$TMP/root" >"$TMP/log" 2>&1; then
    fail "meson install"
    tail -n 5 "$TMP/log"
    exit 1
fi
pc=$(find "$TMP/root" -name collective.pc | head -n 1)
libdir=$(dirname "$(find "$TMP/root" -name 'libcollective.so' | head -n 1)")
bin=$TMP/root/usr/local/bin
[ -n "$pc" ] && [ -x "$bin/collrun" ] && ok "installed: $(basename "$pc"), collrun, $(ls "$bin" | wc -l) programs" ||
    fail "the install lacks collective.pc or collrun"

# cp + cc with pkg-config
cd "$TMP" || exit 1
cp "$SRC/examples/allreduce_example.c" myprog.c
export PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR=$TMP/root
# shellcheck disable=SC2046
if cc $SANFLAGS -o myprog myprog.c $(pkg-config --cflags --libs collective) 2>"$TMP/cc.err"; then
    ok "cc -o myprog myprog.c \$(pkg-config --cflags --libs collective)"
else
    fail "the compile with pkg-config"
    head -n 5 "$TMP/cc.err"
fi
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# collrun -n 4 ./myprog
if "$bin/collrun" -n 4 --timeout 120 ./myprog >"$TMP/out" 2>&1; then
    ok "collrun -n 4 ./myprog: $(grep -c . "$TMP/out") lines, exit 0"
else
    fail "collrun -n 4 ./myprog"
    tail -n 5 "$TMP/out"
fi

# torchrun
if command -v torchrun >/dev/null; then
    if (unset COLL_COMM_ID; timeout 120 torchrun --nproc_per_node 4 --no_python -r 1 -t 1 \
            --master_port "$(free_port)" ./myprog) >"$TMP/out" 2>&1; then
        ok "torchrun --nproc_per_node 4 --no_python -r 1 -t 1 ./myprog"
    else
        fail "torchrun ./myprog"
        grep -v 'OMP_NUM_THREADS\|^\*\*\*' "$TMP/out" | tail -n 5
    fi
else
    echo "skip: torchrun is not installed"
fi

# mpirun
if command -v mpirun >/dev/null; then
    if OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
            OMPI_MCA_rmaps_base_oversubscribe=1 timeout 120 \
            mpirun -np 4 -x COLL_COMM_ID=127.0.0.1:"$(free_port)" ./myprog >"$TMP/out" 2>&1; then
        ok "mpirun -np 4 -x COLL_COMM_ID=... ./myprog"
    else
        fail "mpirun ./myprog"
        tail -n 5 "$TMP/out"
    fi
else
    echo "skip: mpirun is not installed"
fi

# Two hosts: `collrun --hosts node1:2,node2:2 ./myprog`, on two network namespaces
# made by netns-cluster, reached through netns-rsh; the secret exported and the
# interface named as the README says (the installed library's directory passed on
# with -x, where /usr/local would need none).  Skipped without namespaces.
two_hosts() {
    src=$SRC
    # shellcheck source=tests/netns_lib.sh
    . "$SRC/tests/netns_lib.sh"
    netns_find
    local rsh dir
    rsh=$(dirname "$tool")/netns-rsh
    [ -x "$rsh" ] || netns_skip "netns-rsh not found next to $tool"
    dir=$(mktemp -d /tmp/test_user_path.XXXXXX)
    netns_up "up$(($$ % 100000))x" 2 "$dir"
    export NETNS_CLUSTER=$tool
    COLL_SECRET=$(openssl rand -hex 16 2>/dev/null || od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
    export COLL_SECRET COLL_SOCKET_IFNAME=eth0
    unset COLL_COMM_ID
    "$bin/collrun" --rsh "$rsh" --timeout 120 --hosts "${netns_prefix}0:2,${netns_prefix}1:2" \
        -x LD_LIBRARY_PATH ./myprog >"$dir/out" 2>&1 || { tail -n 5 "$dir/out"; return 1; }
    echo "collrun: $(grep -c . "$dir/out") lines"
    # mpirun runs on the first host (the namespaces reach each other, not this one) and
    # starts the second host's ranks through netns-rsh, as it would through ssh.
    command -v mpirun >/dev/null || return 0
    timeout 120 "$rsh" "${netns_prefix}0" env OMPI_ALLOW_RUN_AS_ROOT=1 \
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
        NETNS_CLUSTER="$tool" COLL_SECRET="$COLL_SECRET" COLL_SOCKET_IFNAME=eth0 \
        LD_LIBRARY_PATH="$LD_LIBRARY_PATH" \
        mpirun --mca plm_rsh_agent "$rsh" -np 4 -H "${netns_prefix}0:2,${netns_prefix}1:2" \
        -x COLL_SECRET -x COLL_SOCKET_IFNAME -x LD_LIBRARY_PATH \
        -x COLL_COMM_ID="${netns_prefix}0:29500" "$PWD/myprog" >"$dir/mpi.out" 2>&1 ||
        { tail -n 5 "$dir/mpi.out"; return 1; }
    echo "mpirun: $(grep -c 'rank .* 0 wrong' "$dir/mpi.out") ranks right"
}
grep -qF 'collrun --hosts node1:2,node2:2 ./myprog' "$README" ||
    fail "README.md no longer says: collrun --hosts node1:2,node2:2 ./myprog"
grep -qF 'export COLL_SECRET=$(openssl rand -hex 16) COLL_SOCKET_IFNAME=eth0' "$README" ||
    fail "README.md no longer names the secret and the interface for two hosts"
grep -qF 'mpirun -np 4 -H node1:2,node2:2 -x COLL_SECRET -x COLL_SOCKET_IFNAME' "$README" ||
    fail "README.md no longer says: mpirun -np 4 -H node1:2,node2:2 ..."
(cd "$TMP" && two_hosts) >"$TMP/two.out" 2>&1
rc=$?
if [ $rc -eq 0 ]; then
    ok "two namespaces: $(grep -E '^(collrun|mpirun):' "$TMP/two.out" | tr '\n' ' ')"
elif [ $rc -eq 77 ]; then
    echo "skip: two hosts: $(grep SKIP "$TMP/two.out" | head -n 1)"
else
    fail "collrun --hosts on two namespaces"
    tail -n 8 "$TMP/two.out"
fi

# the elastic recipe
cd "$SRC" || exit 1
if COLL_TIMEOUT_MS=10000 "$BUILD/tools/collrun" -n 4 --respawn "$BUILD/examples/trainer/dp_trainer" \
        --elastic >"$TMP/out" 2>&1 && grep -q 'final loss' "$TMP/out"; then
    ok "the elastic recipe: $(grep 'final loss' "$TMP/out")"
else
    fail "the elastic recipe"
    tail -n 5 "$TMP/out"
fi

echo "user path: $failures failures${failed_steps:+ (${failed_steps#; })}"
[ "$failures" -eq 0 ]
