#!/usr/bin/env bash
# Allreduce busbw of libcollective beside its peers on this host, run interleaved in one go so
# that machine noise hits all alike.  Needs the peers built from ../shared/peers (this script
# builds them if missing).  Two modes:
#
# MODE=tcp (default): beside Open MPI (forced TCP) and Gloo (ring, ring-chunked) over TCP
#   loopback; ours runs with COLL_TRANSPORTS=tcp.  Prints a markdown table of the best busbw per
#   (n, size) and our ratio to the better peer.
# MODE=shm: beside Open MPI with its shared-memory BTL (pml ob1, btl self,vader); Gloo is
#   skipped (it has no shared-memory path); ours runs with COLL_TRANSPORTS=$OURS_TRANSPORTS
#   (default shm).  Prints the best busbw of both per (n, size) and our ratio to Open MPI, then
#   from 1 MiB up, ours again with buffers from collMemAlloc (allreduce_perf -R 1: the direct
#   allreduce) and its ratio to Open MPI; then the single-core ceilings of this machine
#   (memcpy, float32 a+=b, from the peers' ceil_memcpy and ceil_reduce) at 1 MiB and 64 MiB
#   and the fraction of them that the n=2 busbw reaches at 64 MiB.
#
#   perf/compare_peers.sh [BUILD_DIR]
#   MODE=shm perf/compare_peers.sh [BUILD_DIR]
#   MODE=shm OURS_TRANSPORTS=tcp REPS=1 NS="2" SIZES="-b 8 -e 1M -f 32" perf/compare_peers.sh
#   env: MODE=tcp|shm  NS="2 4 8"  REPS=3  PEERS=/path/to/shared/peers  PEERS_WORK=/tmp/coll-peers
#        OUT=dir
#        SIZES   a list of sizes ("8 64K 1M 64M") or a range in nccl-tests' words
#                ("-b 8 -e 256M -f 4"); each size runs as its own launch.  Default for tcp:
#                "8 64K 1M 64M"; for shm: 8 B, then 16 B .. 256 MiB by x4 (holds 1 MiB, 64 MiB)
#        OURS_TRANSPORTS  COLL_TRANSPORTS for ours (default: the mode's transport; shm mode with
#                OURS_TRANSPORTS=tcp tries the script out before the shm transport exists)
#        CEIL_RUNS=9  timed runs per ceiling size (shm mode; best of them is reported)
#        BASE_BUILD  another build of ours (say, of the commit before a change): every run of
#                ours is paired with the same run of it, the two in turn (the order swapped
#                every repetition), and a last table gives the best times and their ratio
#                before / after per (n, size) (above 1: faster now) with the lowest; the change is then judged in one sitting, beside the peers
#        NO_PEERS=1  ours only (with BASE_BUILD: before against after, no peers built or run)
#        BIND=1  each rank of ours bound to core COLL_RANK % (cores) with taskset: where the
#                kernel places the ranks changes from run to run (by 30-50% with 8 ranks on 2
#                cores), which otherwise swamps a before / after comparison
#        STAT=best|median  the statistic of the BASE_BUILD table over the REPS runs (default
#                best; median with BIND=1 is the steadier)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
MODE=${MODE:-tcp}
case $MODE in
tcp) SIZES=${SIZES:-"8 64K 1M 64M"} ;;
shm) SIZES=${SIZES:-"8 16 64 256 1K 4K 16K 64K 256K 1M 4M 16M 64M 256M"} ;;
*) echo "MODE must be tcp or shm, not '$MODE'" >&2; exit 2 ;;
esac
NS=${NS:-"2 4 8"}
REPS=${REPS:-3}
CEIL_RUNS=${CEIL_RUNS:-9}
PEERS=${PEERS:-$here/../shared/peers}
PEERS_WORK=${PEERS_WORK:-/tmp/coll-peers}
bytes_of() {
    local v=$1
    case $v in
    *K) echo $(( ${v%K} * 1024 )) ;;
    *M) echo $(( ${v%M} * 1048576 )) ;;
    *G) echo $(( ${v%G} * 1073741824 )) ;;
    *) echo "$v" ;;
    esac
}
label_of() { # bytes -> the shortest of 8, 64K, 1M, 2G
    local b=$1
    if [ "$b" -ge 1073741824 ] && [ $((b % 1073741824)) = 0 ]; then echo "$((b / 1073741824))G"
    elif [ "$b" -ge 1048576 ] && [ $((b % 1048576)) = 0 ]; then echo "$((b / 1048576))M"
    elif [ "$b" -ge 1024 ] && [ $((b % 1024)) = 0 ]; then echo "$((b / 1024))K"
    else echo "$b"; fi
}
expand_sizes() { # "-b MIN -e MAX -f F" -> "MIN MIN*F ... <= MAX" as labels; a list passes through
    case $1 in -*) ;; *) echo "$1"; return ;; esac
    local min=8 max=268435456 f=2 s out=""
    # shellcheck disable=SC2086
    set -- $1
    while [ $# -gt 0 ]; do
        [ $# -ge 2 ] || { echo "SIZES: '$1' lacks a value" >&2; return 2; }
        case $1 in
        -b) min=$(bytes_of "$2") ;;
        -e) max=$(bytes_of "$2") ;;
        -f) f=$2 ;;
        *) echo "SIZES: only -b, -e and -f are understood, not '$1'" >&2; return 2 ;;
        esac
        shift 2
    done
    if [ "$f" -lt 2 ] || [ "$min" -lt 1 ]; then echo "SIZES: need -f >= 2 and -b >= 1" >&2; return 2; fi
    for ((s = min; s <= max; s *= f)); do out="$out $(label_of "$s")"; done
    echo "${out# }"
}
SIZES=$(expand_sizes "$SIZES")
OUT=${OUT:-$(mktemp -d /tmp/coll-compare.XXXXXX)}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export COLL_SOCKET_IFNAME=lo
export COLL_TRANSPORTS=${OURS_TRANSPORTS:-$MODE}
ours=coll # log name of ours
[ "$MODE" = tcp ] || ours=coll_$MODE

need=(mpi_coll_perf_ompi)
if [ "$MODE" = tcp ]; then need+=(gloo_coll_perf); else need+=(ceil_memcpy ceil_reduce); fi
missing=0
NO_PEERS=${NO_PEERS:-0}
[ "$NO_PEERS" = 1 ] && need=()
for b in "${need[@]}"; do [ -x "$PEERS_WORK/bin/$b" ] || missing=1; done
if [ "$missing" = 1 ]; then
    # build.sh builds every peer, Gloo's too, so it needs libgloo-dev in both modes
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

BIND=${BIND:-0}
STAT=${STAT:-best}
case $STAT in best | median) ;; *) echo "STAT must be best or median, not '$STAT'" >&2; exit 2 ;; esac
run_ours_one() { # build name-suffix n size bytes [allreduce_perf args]
    local bd=$1 suffix=$2 n=$3 size=$4 b=$5
    shift 5
    local bind=()
    # shellcheck disable=SC2016
    [ "$BIND" = 1 ] && bind=(sh -c 'exec taskset -c $((COLL_RANK % $(getconf _NPROCESSORS_ONLN))) "$0" "$@"')
    # shellcheck disable=SC2046
    run "$ours$suffix" "$n" "$size" "$bd/tools/collrun" -n "$n" --no-prefix -- "${bind[@]}" \
        "$bd/perf/allreduce_perf" -b "$b" -e "$b" "$@" $(iters_for "$size")
}
rep_no=0 # the repetition under way: BASE_BUILD runs first on the even ones
run_ours() { # name-suffix n size bytes [allreduce_perf args]: ours, and BASE_BUILD in turn
    local suffix=$1
    shift
    if [ -n "${BASE_BUILD:-}" ] && [ $((rep_no % 2)) = 0 ]; then
        run_ours_one "$BASE_BUILD" "${suffix}_base" "$@"
    fi
    run_ours_one "$build" "$suffix" "$@"
    if [ -n "${BASE_BUILD:-}" ] && [ $((rep_no % 2)) = 1 ]; then
        run_ours_one "$BASE_BUILD" "${suffix}_base" "$@"
    fi
}

# Single-core ceilings (shm mode): best of CEIL_RUNS runs at 1 MiB and at 64 MiB, before the
# sweeps so that they do not share the CPUs with them.
CEIL_BYTES="1048576 67108864"
if [ "$MODE" = shm ] && [ "$NO_PEERS" != 1 ]; then
    echo "# ours: COLL_TRANSPORTS=$COLL_TRANSPORTS; Open MPI: --mca pml ob1 --mca btl self,vader"
    echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    for b in $CEIL_BYTES; do
        "$pb/ceil_memcpy" -b "$b" -e "$b" -r "$CEIL_RUNS" >> "$OUT/ceil_memcpy.log" 2>&1 ||
            echo "# ceil_memcpy $b failed rc=$?" >&2
        "$pb/ceil_reduce" -b "$b" -e "$b" -r "$CEIL_RUNS" >> "$OUT/ceil_reduce.log" 2>&1 ||
            echo "# ceil_reduce $b failed rc=$?" >&2
    done
fi

for rep_no in $(seq "$REPS"); do
    for n in $NS; do
        for size in $SIZES; do
            b=$(bytes_of "$size")
            run_ours "" "$n" "$size" "$b"
            if [ "$MODE" = shm ] && [ "$b" -ge 1048576 ]; then
                # the same with buffers from collMemAlloc: the direct allreduce
                run_ours _mem "$n" "$size" "$b" -R 1
            fi
            [ "$NO_PEERS" = 1 ] && continue
            if [ "$MODE" = shm ]; then
                run ompi_shm "$n" "$size" mpirun.openmpi -np "$n" --oversubscribe --mca pml ob1 \
                    --mca btl self,vader \
                    "$pb/mpi_coll_perf_ompi" -c allreduce -b "$b" -e "$b" -T 0.5
                continue
            fi
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
    [ -f "$log" ] || { echo "-"; return; }
    awk -v s="$b" '$1 == s {if (m == "" || $6 + 0 < m) m = $6 + 0} END {if (m == "") print "-"; else print m}' "$log"
}
mediantime() { # median time (us) over the reps
    local log="$OUT/$1.n$2.$3.log" b
    b=$(bytes_of "$3")
    [ -f "$log" ] || { echo "-"; return; }
    awk -v s="$b" '$1 == s {print $6 + 0}' "$log" | sort -g |
        awk '{v[NR] = $1} END {if (NR == 0) print "-"; else print v[int((NR + 1) / 2)]}'
}
stattime() { if [ "$STAT" = median ]; then mediantime "$@"; else besttime "$@"; fi; }

# After / before (BASE_BUILD): one row per (n, size) with the best (STAT) time of each (busbw has
# two decimals, too few at small sizes), the speed ratio before time / after time (above 1:
# faster now), and the lowest ratio last.
base_table() {
    [ -n "${BASE_BUILD:-}" ] || return 0
    echo
    echo "## This build against BASE_BUILD ($BASE_BUILD), the same runs in turn"
    echo
    echo "$STAT time of $REPS runs each$([ "$BIND" = 1 ] && echo ", ranks bound to cores")"
    echo
    echo "| n | size | before us | after us | before / after | -R 1 before us | -R 1 after us | before / after |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
    local lo=99 at="" n size a z r ma mz mr x
    for n in $NS; do
        for size in $SIZES; do
            a=$(stattime "${ours}_base" "$n" "$size"); z=$(stattime "$ours" "$n" "$size")
            ma=$(stattime "${ours}_mem_base" "$n" "$size"); mz=$(stattime "${ours}_mem" "$n" "$size")
            r=$(frac "$a" "$z"); mr=$(frac "$ma" "$mz")
            for x in $r $mr; do
                if [ "$x" != "-" ] && awk -v x="$x" -v l="$lo" 'BEGIN {exit !(x < l)}'; then
                    lo=$x; at="n=$n size=$size"
                fi
            done
            echo "| $n | $size | $a | $z | $r | $ma | $mz | $mr |"
        done
    done
    echo
    echo "lowest before / after: $lo ($at)"
}
frac() { awk -v a="$1" -v b="$2" 'BEGIN {if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-"}'; }

echo
if [ "$MODE" = tcp ]; then
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
    base_table
    exit 0
fi

echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| n | size | libcollective busbw ($COLL_TRANSPORTS) | Open MPI vader busbw | ratio (ours / Open MPI) | 8 B time us (coll / ompi) | ours, collMemAlloc buffers (-R 1) | ratio (-R 1 / Open MPI) |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
for n in $NS; do
    for size in $SIZES; do
        c=$(best coll_shm "$n" "$size"); o=$(best ompi_shm "$n" "$size")
        ratio=$(awk -v c="$c" -v o="$o" 'BEGIN {
            if (o + 0 > 0 && c + 0 > 0) printf "%.2f", c / o; else print "-" }')
        t="-"
        if [ "$(bytes_of "$size")" = 8 ]; then t="$(besttime coll_shm "$n" "$size") / $(besttime ompi_shm "$n" "$size")"; fi
        m=$(best coll_shm_mem "$n" "$size")
        mratio=$(awk -v c="$m" -v o="$o" 'BEGIN {
            if (o + 0 > 0 && c + 0 > 0) printf "%.2f", c / o; else print "-" }')
        echo "| $n | $size | $c | $o | $ratio | $t | $m | $mratio |"
    done
done

if [ "$NO_PEERS" = 1 ]; then # no ceilings measured, nothing to plot against
    base_table
    exit 0
fi

# ceiling value: memcpy -> bytes copied / s; sum -> float32 a+=b output bytes / s; sumrw -> 3x that
ceil_of() { # kind bytes -> best GB/s
    case $1 in
    memcpy) awk -v s="$2" '$1 == s {if ($3 + 0 > m) m = $3 + 0} END {if (m == "") print "-"; else printf "%.2f", m}' "$OUT/ceil_memcpy.log" ;;
    sum) awk -v s="$2" '$1 == "a+=b" && $2 == s {if ($6 + 0 > m) m = $6 + 0} END {if (m == "") print "-"; else printf "%.2f", m}' "$OUT/ceil_reduce.log" ;;
    sumrw) awk -v s="$2" '$1 == "a+=b" && $2 == s {if ($4 + 0 > m) m = $4 + 0} END {if (m == "") print "-"; else printf "%.2f", m}' "$OUT/ceil_reduce.log" ;;
    esac
}
echo
echo "## Ceilings: one core of this machine (best of $CEIL_RUNS runs; GB = 1e9 B)"
echo
echo "| kernel | GB/s counts | 1 MiB GB/s | 64 MiB GB/s |"
echo "|---|---|---:|---:|"
echo "| memcpy (glibc) | bytes copied / s | $(ceil_of memcpy 1048576) | $(ceil_of memcpy 67108864) |"
echo "| float32 \`a+=b\` | output bytes / s | $(ceil_of sum 1048576) | $(ceil_of sum 67108864) |"
echo "| float32 \`a+=b\` | bytes read + written / s (3x output) | $(ceil_of sumrw 1048576) | $(ceil_of sumrw 67108864) |"
echo
m64=$(ceil_of memcpy 67108864); s64=$(ceil_of sum 67108864)
c64=$(best coll_shm 2 64M); o64=$(best ompi_shm 2 64M); r64=$(best coll_shm_mem 2 64M)
echo "Fraction of the 64 MiB ceilings reached by the n=2 allreduce at 64 MiB (n=2: busbw = algbw = bytes / time):"
echo
echo "| fraction | formula | libcollective ($COLL_TRANSPORTS) | libcollective, collMemAlloc | Open MPI vader |"
echo "|---|---|---:|---:|---:|"
echo "| busbw at 64 MiB | - | $c64 | $r64 | $o64 |"
echo "| of memcpy | busbw / memcpy GB/s (64 MiB, = $m64) | $(frac "$c64" "$m64") | $(frac "$r64" "$m64") | $(frac "$o64" "$m64") |"
echo "| of \`a+=b\` | busbw / a+=b output GB/s (64 MiB, = $s64) | $(frac "$c64" "$s64") | $(frac "$r64" "$s64") | $(frac "$o64" "$s64") |"
if [[ " $NS " != *" 2 "* ]]; then echo; echo "(n=2 not in NS: no fraction)"
elif [ "$c64" = "-" ] && [ "$o64" = "-" ]; then echo; echo "(64M not measured: add it to SIZES)"; fi

# Plots: busbw against size, ours and Open MPI, one chart per rank count (perf/plot_busbw.py).
for n in $NS; do
    for who in coll_shm coll_shm_mem ompi_shm; do
        {
            echo '{"results": ['
            sep=""
            for size in $SIZES; do
                bw=$(best "$who" "$n" "$size")
                [ "$bw" = "-" ] && continue
                printf '%s{"size": %s, "oop": {"busbw": %s}}' "$sep" "$(bytes_of "$size")" "$bw"
                sep=", "
            done
            echo ']}'
        } > "$OUT/plot.$who.n$n.json"
    done
    python3 "$here/perf/plot_busbw.py" -o "$OUT/shm_allreduce_n$n.svg" \
        --title "allreduce busbw, $n ranks, shared memory" \
        "libcollective=$OUT/plot.coll_shm.n$n.json" \
        "libcollective, collMemAlloc=$OUT/plot.coll_shm_mem.n$n.json" \
        "Open MPI vader=$OUT/plot.ompi_shm.n$n.json"
done
echo
echo "# plots: $OUT/shm_allreduce_n*.svg"
base_table
