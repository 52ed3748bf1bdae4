#!/usr/bin/env bash
# Allreduce busbw of libcollective beside Open MPI (forced TCP) and Gloo (ring, ring-chunked)
# on this host over TCP loopback, run interleaved in one go so that machine noise hits all
# alike.  Prints a markdown table of the best busbw per (n, size) and our ratio to the better
# peer.  Needs the peers built from ../shared/peers (this script builds them if missing).
#
#   perf/compare_peers.sh [BUILD_DIR]
#   env: NS="2 4 8"  SIZES="8 64K 1M 64M"  REPS=3  PEERS=/path/to/shared/peers  OUT=dir
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
NS=${NS:-"2 4 8"}
SIZES=${SIZES:-"8 64K 1M 64M"}
REPS=${REPS:-3}
PEERS=${PEERS:-$here/../shared/peers}
PEERS_WORK=${PEERS_WORK:-/tmp/coll-peers}
OUT=${OUT:-$(mktemp -d /tmp/coll-compare.XXXXXX)}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export COLL_SOCKET_IFNAME=lo

if [ ! -x "$PEERS_WORK/bin/mpi_coll_perf_ompi" ] || [ ! -x "$PEERS_WORK/bin/gloo_coll_perf" ]; then
    if ! command -v mpicc.openmpi >/dev/null || ! dpkg -s libgloo-dev >/dev/null 2>&1; then
        [ "$(id -u)" = 0 ] || { echo "need: apt-get install openmpi-bin libopenmpi-dev libgloo-dev g++"; exit 1; }
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q openmpi-bin libopenmpi-dev libgloo-dev g++ >/dev/null
    fi
    PEERS_WORK=$PEERS_WORK bash "$PEERS/build.sh" >/dev/null
fi
pb=$PEERS_WORK/bin
echo "# results in $OUT"

# busbw (GB/s) of the out-of-place row whose size is $2 in log $1
busbw_of() { awk -v s="$2" '$1 == s && $1 ~ /^[0-9]+$/ {print $8; exit}' "$1"; }
bytes_of() {
    local v=$1
    case $v in
    *K) echo $(( ${v%K} * 1024 )) ;;
    *M) echo $(( ${v%M} * 1048576 )) ;;
    *G) echo $(( ${v%G} * 1073741824 )) ;;
    *) echo "$v" ;;
    esac
}
iters_for() { # fewer iterations for large messages
    local b; b=$(bytes_of "$1")
    if [ "$b" -ge 16777216 ]; then echo "-n 10 -w 3"; elif [ "$b" -ge 1048576 ]; then echo "-n 50 -w 10"; else echo "-n 500 -w 50"; fi
}

run() { # name n size cmd...
    local name=$1 n=$2 size=$3
    shift 3
    local log="$OUT/$name.n$n.$size.log"
    timeout 600 "$@" >> "$log" 2>&1 || echo "# $name n=$n size=$size failed rc=$?" >&2
}

for rep in $(seq "$REPS"); do
    for n in $NS; do
        for size in $SIZES; do
            b=$(bytes_of "$size")
            # shellcheck disable=SC2046
            run coll "$n" "$size" "$build/tools/collrun" -n "$n" --no-prefix -- \
                "$build/perf/allreduce_perf" -b "$b" -e "$b" $(iters_for "$size")
            run ompi_tcp "$n" "$size" mpirun.openmpi -np "$n" --oversubscribe --mca pml ob1 \
                --mca btl tcp,self --mca btl_tcp_if_include lo \
                "$pb/mpi_coll_perf_ompi" -c allreduce -b "$b" -e "$b" -T 0.5
            run gloo_ring "$n" "$size" bash "$PEERS_WORK/scripts/gloo_run.sh" "$n" -c allreduce \
                -a ring -b "$b" -e "$b" -T 0.5
            run gloo_ringchunked "$n" "$size" bash "$PEERS_WORK/scripts/gloo_run.sh" "$n" \
                -c allreduce -a ringchunked -b "$b" -e "$b" -T 0.5
        done
    done
done

best() { # name n size -> best busbw over the reps
    local log="$OUT/$1.n$2.$3.log" b
    b=$(bytes_of "$3")
    [ -f "$log" ] || { echo "-"; return; }
    awk -v s="$b" 'BEGIN {m = -1} $1 == s {if ($8 + 0 > m) m = $8 + 0}
        END {if (m < 0) print "-"; else printf "%.2f", m}' "$log"
}
besttime() { # lowest time (us) over the reps
    local log="$OUT/$1.n$2.$3.log" b
    b=$(bytes_of "$3")
    awk -v s="$b" '$1 == s {if (m == "" || $6 + 0 < m) m = $6 + 0} END {if (m == "") print "-"; else print m}' "$log"
}

echo
echo "| n | size | libcollective busbw | Open MPI tcp | Gloo ring | Gloo ring-chunked | ratio to better peer | 8 B time us (coll / ompi) |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
for n in $NS; do
    for size in $SIZES; do
        c=$(best coll "$n" "$size"); o=$(best ompi_tcp "$n" "$size")
        g=$(best gloo_ring "$n" "$size"); gc=$(best gloo_ringchunked "$n" "$size")
        ratio=$(awk -v c="$c" -v o="$o" -v g="$g" -v h="$gc" 'BEGIN {
            m = 0; if (o + 0 > m) m = o + 0; if (g + 0 > m) m = g + 0; if (h + 0 > m) m = h + 0;
            if (m > 0 && c + 0 > 0) printf "%.2f", c / m; else print "-" }')
        t="-"
        if [ "$size" = 8 ]; then t="$(besttime coll "$n" 8) / $(besttime ompi_tcp "$n" 8)"; fi
        echo "| $n | $size | $c | $o | $g | $gc | $ratio | $t |"
    done
done
