# Sourced by the tests that run ranks on simulated hosts: network namespaces made
# by ../shared/tools/netns-cluster (README-netns-cluster.md there).
#
#   . "$(dirname "$0")/netns_lib.sh"
#   netns_find [PROGRAM...]   sets $tool, or skips (exit 77) with the reason: the tool
#                             is not found (NETNS_CLUSTER names it), not root, or a
#                             program it or the test needs is missing
#   netns_up PREFIX N DIR [OPTION...]
#                             makes cluster PREFIX of N hosts (netns-cluster up
#                             options after N), sets $root_ip (host 0's address),
#                             and on exit kills the pids in $pids, runs
#                             netns_on_exit when the test defines it, tears the
#                             cluster down and removes DIR (kept when KEEP is set);
#                             skips when the cluster cannot be made
# Both expect $src, the source tree's root.

netns_skip() {
    echo "SKIP: $*"
    exit 77
}

netns_find() {
    tool=${NETNS_CLUSTER:-}
    if [ -z "$tool" ]; then
        for d in "$src/../shared/tools" "$src/../../shared/tools"; do
            [ -x "$d/netns-cluster" ] && tool=$d/netns-cluster && break
        done
    fi
    [ -n "$tool" ] && [ -x "$tool" ] ||
        netns_skip "netns-cluster not found (set NETNS_CLUSTER to its path)"
    [ "$(id -u)" = 0 ] || netns_skip "needs root for network namespaces"
    local p
    for p in ip tc unshare flock awk "$@"; do
        command -v "$p" >/dev/null || netns_skip "$p is not installed"
    done
}

netns_up() {
    netns_prefix=$1
    netns_dir=$3
    local n=$2
    shift 3
    pids=()
    trap netns_cleanup EXIT
    trap 'exit 1' INT TERM HUP
    if ! "$tool" up -n "$n" --prefix "$netns_prefix" "$@" >"$netns_dir/up.out" \
        2>"$netns_dir/up.err"; then
        netns_skip "netns-cluster cannot make the cluster: $(tail -1 "$netns_dir/up.err")"
    fi
    root_ip=$(awk 'NR == 1 { print $1 }' "$netns_dir/up.out")
    [ -n "$root_ip" ] || { echo "FAIL: no address for host 0"; exit 1; }
}

netns_cleanup() {
    local p
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    declare -F netns_on_exit >/dev/null && netns_on_exit
    "$tool" down --prefix "$netns_prefix" --kill >/dev/null 2>&1
    [ -n "${KEEP:-}" ] || rm -rf "$netns_dir"
}
