#!/bin/bash
# tools/collinfo and COLL_TOPO_DUMP_FILE (docs/topology.md).
#
#   test_collinfo.sh local COLLRUN COLLINFO
#     alone: text and --json (valid JSON, rank 0 of 1, no peers), the sysfs source
#     (COLL_TOPO_HWLOC=0) against the default one, a bad argument (exit 2);
#     collrun -n 3 --json: 3 ranks on 1 host, 3 pairs over shm, or tcp with
#     COLL_TRANSPORTS=tcp; collrun -n 2 --bind core: one PU per rank, apart; the
#     text form; COLL_TOPO_DUMP_FILE with %h and %r: one valid file per rank, and
#     an unwritable path that leaves init alone.
#   test_collinfo.sh netns COLLRUN COLLINFO
#     two hosts in network namespaces (../shared/tools/netns-cluster), two ranks on
#     each started by hand (COLL_COMM_ID, COLL_RANK, COLL_NRANKS): collinfo must
#     report 2 hosts, shm within each and tcp between them.  Needs root; exits 77
#     (skipped) with the reason otherwise.
#
# JSON is checked with /usr/bin/python3 (json.tool, then the fields).
set -u
mode=$1 collrun=$2 collinfo=$3
src=${COLL_SOURCE_ROOT:-$(dirname "$0")/..}
py=/usr/bin/python3
skip() { echo "SKIP: $*"; exit 77; }
[ -x "$py" ] || skip "$py is missing"
dir=$(mktemp -d /tmp/test_collinfo.XXXXXX)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# The launcher variables of an outer launcher must not reach collinfo alone.
unset COLL_RANK COLL_NRANKS COLL_COMM_ID RANK WORLD_SIZE OMPI_COMM_WORLD_RANK SLURM_PROCID \
      PMI_RANK COLL_TOPO_DUMP_FILE

# check NAME FILE PYTHON: json.tool accepts FILE, then PYTHON (with d = the document)
# runs without an assertion failing.
check() {
    local name=$1 file=$2 code=$3
    if ! "$py" -m json.tool "$file" >/dev/null 2>"$dir/json.err"; then
        fail "$name: invalid JSON: $(cat "$dir/json.err")"
        sed 's/^/    /' "$file" | head -40
        return
    fi
    if ! "$py" -c "import json, sys
d = json.load(open(sys.argv[1]))
$code" "$file" 2>"$dir/py.err"; then
        fail "$name: $(tail -3 "$dir/py.err")"
        sed 's/^/    /' "$file" | head -40
    fi
}

local_tests() {
    # Alone, text.
    if ! "$collinfo" >"$dir/alone.txt" 2>"$dir/alone.err"; then
        fail "collinfo alone exited $?: $(cat "$dir/alone.err")"
    fi
    grep -q "^host $(hostname)" "$dir/alone.txt" || fail "alone: no host line"
    grep -q "binding: cpus" "$dir/alone.txt" || fail "alone: no binding line"
    grep -q "interface for the bootstrap and TCP" "$dir/alone.txt" || fail "alone: no interface"

    # Alone, JSON, both sources.
    "$collinfo" --json >"$dir/alone.json" 2>"$dir/alone.err" || fail "collinfo --json exited $?"
    check "alone --json" "$dir/alone.json" "
import socket
assert d['rank'] == 0 and d['nranks'] == 1 and d['peers'] == [], d['peers']
t, s = d['topology'], d['summary']
assert t['host'] == socket.gethostname() == s['host']
assert t['pus'] >= 1 and t['cores'] >= 1 and len(t['numa_nodes']) >= 1
assert s['host_pus'] == t['pus'] and s['host_cores'] == t['cores']
assert t['binding']['pus'] >= 1
assert any(n['name'] == 'lo' and n['loopback'] for n in t['netdevs'])
"
    COLL_TOPO_HWLOC=0 "$collinfo" --json >"$dir/sysfs.json" 2>"$dir/sysfs.err" ||
        fail "COLL_TOPO_HWLOC=0 collinfo --json exited $?"
    check "sysfs against default" "$dir/sysfs.json" "
a = d['topology']
b = json.load(open('$dir/alone.json'))['topology']
assert a['source'] == 'sysfs'
for k in ('packages', 'numa_nodes', 'cores', 'pus', 'binding'):
    if k == 'numa_nodes':  # memory may differ by hwloc's huge pages
        assert [(n['id'], n['cpus']) for n in a[k]] == [(n['id'], n['cpus']) for n in b[k]], k
    else:
        assert a[k] == b[k], (k, a[k], b[k])
print('sources: default', b['source'], 'and sysfs agree')
"
    "$collinfo" --bogus >/dev/null 2>"$dir/bogus.err"
    rc=$?
    [ "$rc" = 2 ] && grep -q -- --bogus "$dir/bogus.err" || fail "--bogus: exit $rc, want 2"

    # Three ranks on this host: shm between all, or tcp when forced.
    if ! "$collrun" -n 3 --timeout 60 --no-prefix "$collinfo" --json >"$dir/n3.json" \
            2>"$dir/n3.err"; then
        fail "collrun -n 3 collinfo --json failed: $(tail -3 "$dir/n3.err")"
    fi
    check "collrun -n 3" "$dir/n3.json" "
import socket
assert d['nranks'] == 3 and len(d['ranks']) == 3
assert len(d['hosts']) == 1 and d['hosts'][0]['ranks'] == [0, 1, 2], d['hosts']
assert d['hosts'][0]['host'] == socket.gethostname()
assert [r['rank'] for r in d['ranks']] == [0, 1, 2]
assert len({r['summary']['pid'] for r in d['ranks']}) == 3
assert all(r['host_index'] == 0 for r in d['ranks'])
pairs = {(p['a'], p['b']): p['transport'] for p in d['pairs']}
assert pairs == {(0, 1): 'shm', (0, 2): 'shm', (1, 2): 'shm'}, pairs
assert not any('reverse' in p for p in d['pairs'])
"
    COLL_TRANSPORTS=tcp "$collrun" -n 3 --timeout 60 --no-prefix "$collinfo" --json \
        >"$dir/tcp.json" 2>"$dir/tcp.err" || fail "COLL_TRANSPORTS=tcp collinfo failed"
    check "collrun -n 3 tcp" "$dir/tcp.json" "
assert [p['transport'] for p in d['pairs']] == ['tcp'] * 3, d['pairs']
assert all(r['summary']['netdev'] == 'lo' for r in d['ranks'])  # COLL_SOCKET_IFNAME=lo
"

    # Bound to a core each (when the host has two): one PU each, on different cores.
    cores=$("$py" -c "import json; print(json.load(open('$dir/alone.json'))['topology']['cores'])")
    if [ "${cores:-0}" -ge 2 ]; then
        "$collrun" -n 2 --bind core --timeout 60 --no-prefix "$collinfo" --json \
            >"$dir/bind.json" 2>"$dir/bind.err" || fail "collrun --bind core collinfo failed"
        check "collrun -n 2 --bind core" "$dir/bind.json" "
s = [r['summary'] for r in d['ranks']]
assert all(x['cores'] == 1 for x in s), s
assert s[0]['first_core'] != s[1]['first_core'], s
assert all(x['numa'] >= 0 for x in s), s
"
    else
        echo "note: one core here; the binding case is skipped"
    fi

    # Text under collrun: rank 0 prints, with the table of transports.
    "$collrun" -n 3 --timeout 60 "$collinfo" >"$dir/n3.txt" 2>&1 || fail "collrun collinfo (text) failed"
    grep -q "^\[0\] collinfo: 3 ranks on 1 host" "$dir/n3.txt" || fail "text: no summary line"
    grep -q "^\[0\] .*rank 2: pid" "$dir/n3.txt" || fail "text: no line for rank 2"
    grep -q "^\[0\] *1 *shm *- *shm" "$dir/n3.txt" || fail "text: no transport row for rank 1"
    if grep -q "^\[[12]\]" "$dir/n3.txt"; then fail "text: ranks 1 and 2 printed"; fi
    [ "$failures" = 0 ] || sed 's/^/    /' "$dir/n3.txt"

    # COLL_TOPO_DUMP_FILE: one file per rank, as collinfo --json writes one rank.
    COLL_TOPO_DUMP_FILE="$dir/dump.%h.%r.json" "$collrun" -n 3 --timeout 60 "$collinfo" \
        >/dev/null 2>"$dir/dump.err" || fail "collinfo with COLL_TOPO_DUMP_FILE failed"
    for r in 0 1 2; do
        f="$dir/dump.$(hostname).$r.json"
        if [ ! -f "$f" ]; then
            fail "COLL_TOPO_DUMP_FILE: no $f"
            continue
        fi
        check "dump of rank $r" "$f" "
assert d['rank'] == $r and d['nranks'] == 3
assert sorted(p['rank'] for p in d['peers']) == sorted({0, 1, 2} - {$r})
assert all(p['transport'] == 'shm' for p in d['peers']), d['peers']
assert d['summary']['pid'] > 0 and d['topology']['pus'] >= 1
assert set(d) == set(json.load(open('$dir/alone.json'))), 'not the keys of collinfo --json'
"
    done
    if ls "$dir"/*.tmp >/dev/null 2>&1; then fail "temporary dump files left: $(ls "$dir"/*.tmp)"; fi
    COLL_TOPO_DUMP_FILE=/nonexistent/dir/dump.json "$collinfo" --json >/dev/null 2>&1 ||
        fail "alone with a bad dump path failed"
    COLL_TOPO_DUMP_FILE=/nonexistent/dir/dump.json "$collrun" -n 2 --timeout 60 "$collinfo" \
        >/dev/null 2>"$dir/baddump.err" || fail "init failed with an unwritable dump path"
    grep -q "COLL_TOPO_DUMP_FILE: cannot open /nonexistent/dir/dump.json" "$dir/baddump.err" ||
        fail "no warning for an unwritable dump path: $(head -3 "$dir/baddump.err")"
}

netns_tests() {
    . "$(dirname "$0")/netns_lib.sh"
    netns_find timeout
    netns_up "ci$(($$ % 100000))x" 2 "$dir"
    prefix=$netns_prefix
    port=$((20000 + $$ % 20000))
    # Ranks 0 and 1 on host 0, 2 and 3 on host 1.
    for r in 0 1 2 3; do
        "$tool" exec -i $((r / 2)) --prefix "$prefix" -- env COLL_RANK=$r COLL_NRANKS=4 \
            COLL_COMM_ID="$root_ip:$port" COLL_SECRET=00112233445566778899aabbccddeeff \
            COLL_SOCKET_IFNAME=eth0 COLL_TIMEOUT_MS=30000 \
            COLL_TOPO_DUMP_FILE="$dir/netns.%h.%r.json" \
            timeout 60 "$collinfo" --json >"$dir/netns.out.$r" 2>"$dir/netns.err.$r" &
        pids+=($!)
    done
    for r in 0 1 2 3; do
        wait "${pids[$r]}" || fail "netns: rank $r exited $?: $(tail -3 "$dir/netns.err.$r")"
    done
    pids=()
    check "netns: 2 hosts" "$dir/netns.out.0" "
assert d['nranks'] == 4
assert [h['ranks'] for h in d['hosts']] == [[0, 1], [2, 3]], d['hosts']
assert d['hosts'][0]['host'] != d['hosts'][1]['host']
assert d['hosts'][0]['netns'] != d['hosts'][1]['netns']
pairs = {(p['a'], p['b']): p['transport'] for p in d['pairs']}
want = {(0, 1): 'shm', (2, 3): 'shm', (0, 2): 'tcp', (0, 3): 'tcp', (1, 2): 'tcp', (1, 3): 'tcp'}
assert pairs == want, pairs
assert all(r['summary']['netdev'] == 'eth0' for r in d['ranks']), [r['summary'] for r in d['ranks']]
print('netns:', ', '.join('%d-%d %s' % (a, b, t) for (a, b), t in sorted(pairs.items())))
"
    for r in 1 2 3; do
        [ -s "$dir/netns.out.$r" ] && fail "netns: rank $r printed: $(head -2 "$dir/netns.out.$r")"
    done
    ndump=$(ls "$dir"/netns.*.json 2>/dev/null | wc -l)
    [ "$ndump" = 4 ] || fail "netns: $ndump dump files, want 4"
    for f in "$dir"/netns.*.json; do
        check "netns dump $(basename "$f")" "$f" "
eth0 = [n for n in d['topology']['netdevs'] if n['name'] == 'eth0']
assert eth0 and eth0[0]['addresses'] and eth0[0]['numa'] == -1, eth0  # a veth: virtual
assert {p['transport'] for p in d['peers']} == {'shm', 'tcp'}, d['peers']
"
    done
}

case $mode in
local) local_tests; rm -rf "$dir" ;;
netns) netns_tests ;;
*) echo "usage: test_collinfo.sh local|netns COLLRUN COLLINFO"; exit 2 ;;
esac
[ "$failures" = 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "ok"
