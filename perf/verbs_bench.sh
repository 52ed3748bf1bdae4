#!/usr/bin/env bash
# Allreduce over verbs against the link's ceiling, on Soft-RoCE in one VM boot
# (../shared/tools/rxe-vm):
#
#   1. ib_write_bw -a (perftest; RC RDMA writes, server and client on rxe0): what
#      the link itself moves at each message size;
#   2. allreduce_perf under collrun -n 2, -b 8 -e 64M -f 4, with
#      COLL_TRANSPORTS=verbs and COLL_TRANSPORTS=tcp, interleaved (verbs, tcp,
#      verbs, tcp) so that a change in the host's load hits both alike; the best
#      out-of-place busbw of each transport per size is kept.
#
# Prints one table: size, ib_write_bw GB/s, verbs busbw, tcp busbw, verbs / ib_write_bw,
# verbs / tcp.  Soft-RoCE is the CPU doing the device's work, so the absolute
# figures say little; the ratio to ib_write_bw is the one to watch.
#
#   perf/verbs_bench.sh [BUILD_DIR]      (default: build; run from the source root)
#   ITERS=5 ROUNDS=2 perf/verbs_bench.sh
set -u

if [ "${1:-}" = "--inside" ]; then
    build=$2
    iters=${ITERS:-5} rounds=${ROUNDS:-2}
    out=$(mktemp -d /tmp/verbs_bench.XXXXXX)
    dev=${RXE_VM_DEV:-rxe0} gid=${RXE_VM_GID_INDEX:-1} ip=${RXE_VM_IP:-127.0.0.1}
    # perftest: 2 B to 8 MiB (the device's largest message); 100 writes per size keeps
    # the emulated run short.
    ib_write_bw -d "$dev" -x "$gid" -F -a -n 100 --report_gbits >"$out/server.txt" 2>&1 &
    server=$!
    # The server takes a while to listen on an emulated, busy machine: try again.
    for try in 1 2 3 4 5 6; do
        sleep 2
        ib_write_bw -d "$dev" -x "$gid" -F -a -n 100 --report_gbits "$ip" >"$out/ib.txt" 2>&1 &&
            break
    done
    sleep 1
    kill "$server" 2>/dev/null
    wait
    # "#bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]" -> bytes GB/s
    awk '$1 ~ /^[0-9]+$/ && NF >= 5 { printf "%s %.4f\n", $1, $4 / 8 }' "$out/ib.txt" >"$out/ib.tab"
    if [ ! -s "$out/ib.tab" ]; then
        echo "ib_write_bw gave no figures:" >&2
        cat "$out/ib.txt" "$out/server.txt" >&2
    fi
    for r in $(seq "$rounds"); do
        for tp in verbs tcp; do
            COLL_TRANSPORTS=$tp timeout 600 "$build/tools/collrun" -n 2 --timeout 600 \
                "$build/perf/allreduce_perf" -b 8 -e 64M -f 4 -n "$iters" -w 1 \
                >"$out/$tp.$r.txt" 2>&1 || { echo "allreduce_perf over $tp failed:" >&2;
                                               tail -20 "$out/$tp.$r.txt" >&2; }
        done
    done
    # Out-of-place busbw from the time (field 7 of "[0] size count type redop root time
    # algbw busbw ..."; the printed busbw has two decimals, too few here): with 2 ranks
    # busbw = algbw = size / time.
    for tp in verbs tcp; do
        cat "$out/$tp".*.txt | awk '$1 == "[0]" && $2 ~ /^[0-9]+$/ && NF >= 13 && $7 > 0 {
            bw = $2 / ($7 * 1000); if (!($2 in best) || bw > best[$2]) best[$2] = bw }
            END { for (s in best) printf "%s %.5f\n", s, best[s] }' | sort -n >"$out/$tp.tab"
    done
    echo "# allreduce, 2 ranks, out-of-place busbw (best of $rounds interleaved runs of $iters" \
        "iterations), against ib_write_bw at the same size (8 MiB for larger sizes)"
    printf '%12s %14s %12s %12s %14s %10s\n' size ib_write_bw verbs tcp verbs/ib_write verbs/tcp
    printf '%12s %14s %12s %12s %14s %10s\n' "(B)" "(GB/s)" "(GB/s)" "(GB/s)" "" ""
    awk 'FILENAME ~ /ib.tab$/ { ib[$1] = $2; if ($1 + 0 > ibmax) ibmax = $1 + 0; next }
         FILENAME ~ /tcp.tab$/ { tcp[$1] = $2; next }
         { size = $1 + 0; v = $2; s = size; if (s > ibmax) s = ibmax; i = ib[s]
           t = 0; if (size in tcp) t = tcp[size]
           ri = "-"; if (i > 0) ri = sprintf("%.2f", v / i)
           rt = "-"; if (t > 0) rt = sprintf("%.2f", v / t)
           printf "%12d %14.5f %12.5f %12.5f %14s %10s\n", size, i, v, t, ri, rt }' \
        "$out/ib.tab" "$out/tcp.tab" "$out/verbs.tab"
    echo "# raw output: $out"
    exit 0
fi

build=$(cd "${1:-build}" && pwd) || exit 1
src=$(cd "$(dirname "$0")/.." && pwd)
vm=${RXE_VM:-$src/../shared/tools/rxe-vm}
[ -f "$vm" ] || { echo "rxe-vm not found at $vm (set RXE_VM)" >&2; exit 1; }
[ -x "$build/perf/allreduce_perf" ] || { echo "no $build/perf/allreduce_perf: build first" >&2; exit 1; }
if ! command -v ib_write_bw >/dev/null; then
    # The VM runs on the host's root file system: installing here installs there.
    echo "verbs_bench: installing perftest" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends perftest >/dev/null ||
        { echo "cannot install perftest (apt-get install perftest as root)" >&2; exit 1; }
fi
exec bash "$vm" --timeout 1800 -- bash "$src/perf/verbs_bench.sh" --inside "$build"
