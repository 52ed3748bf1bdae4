#!/bin/bash
# Memory of an all-to-all against the ranks on one host: the shared-memory rings
# grow with the square of the ranks until COLL_SHM_BUDGET_MB caps them (docs/
# transports.md, "Ring size").  For each rank count, alltoall_perf runs (checked,
# -c 1) and is sampled every 0.1 s; a row gives
#   rings MiB    the shared memory reserved for the rings: the sizes of the distinct
#                memfd segments (libcollective-shm) mapped, from /proc/PID/maps
#   maps         how many such mappings (a ring is mapped at both ends)
#   RssShmem MiB the largest shared memory resident (/proc/PID/status), summed
#                over the rank processes
#   VmHWM MiB    the peak resident set (/proc/PID/status), summed over them; it
#                includes the perf tool's 3 buffers of ranks x per-peer bytes
#   ring         the geometry the library chose (its INFO line)
# With -p the ranks are processes under collrun (RssShmem and VmHWM then count a
# page once per process that maps it), else threads of one process (-t; they share
# bells, so 128 threads hold under 2048 descriptors).
# Usage: perf/shm_memory.sh [-p] [-s BYTES_PER_PEER] [-n "8 16 32 ..."] [BUILD_DIR]
set -u
procs=0
per_peer=32768
counts="8 16 32 64 96 128"
while getopts "ps:n:h" o; do
    case $o in
    p) procs=1 ;;
    s) per_peer=$OPTARG ;;
    n) counts=$OPTARG ;;
    *) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
build=${1:-build}
a2a=$build/perf/alltoall_perf
collrun=$build/tools/collrun
if [ ! -x "$a2a" ] || { [ $procs = 1 ] && [ ! -x "$collrun" ]; }; then
    echo "shm_memory.sh: no $a2a (or $collrun); give the build directory" >&2
    exit 2
fi
case $per_peer in '' | *[!0-9]*) echo "shm_memory.sh: -s takes bytes per peer" >&2; exit 2 ;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# sample PID...: appends "rings_kib maps rssshmem_kib hwm_kib" for the processes.
sample() {
    local rings=0 maps=0 shm=0 hwm=0 p
    : >"$tmp/maps"
    for p in "$@"; do
        [ -r "/proc/$p/status" ] || continue
        local s h
        s=$(awk '/^RssShmem:/ {print $2}' "/proc/$p/status" 2>/dev/null)
        h=$(awk '/^VmHWM:/ {print $2}' "/proc/$p/status" 2>/dev/null)
        shm=$((shm + ${s:-0}))
        hwm=$((hwm + ${h:-0}))
        grep 'memfd:libcollective-shm' "/proc/$p/maps" >>"$tmp/maps" 2>/dev/null
    done
    maps=$(wc -l <"$tmp/maps")
    # distinct segments, by inode; a size from its address range
    local -A seg=()
    local range inode rest
    while read -r range _ _ _ inode rest; do
        seg[$inode]=$(((16#${range#*-} - 16#${range%-*}) / 1024))
    done <"$tmp/maps"
    for p in "${seg[@]}"; do
        rings=$((rings + p))
    done
    echo "$rings $maps $shm $hwm"
}

printf '# all-to-all, %d B per peer, %s\n' "$per_peer" \
    "$([ $procs = 1 ] && echo "ranks as processes (collrun)" || echo "ranks as threads of one process")"
printf '%6s %10s %7s %13s %10s  %s\n' ranks "rings MiB" maps "RssShmem MiB" "VmHWM MiB" ring
for n in $counts; do
    bytes=$((per_peer * n))
    # long enough for the 0.1 s samples to see every ring made
    iters=$((4000 / n > 20 ? 4000 / n : 20))
    args=(-b "$bytes" -e "$bytes" -c 1 -n "$iters" -w 2 -T 120)
    if [ $procs = 1 ]; then
        COLL_DEBUG=INFO COLL_DEBUG_SUBSYS=SHM "$collrun" -n "$n" --timeout 600 "$a2a" "${args[@]}" \
            >"$tmp/out" 2>"$tmp/err" &
    else
        COLL_DEBUG=INFO COLL_DEBUG_SUBSYS=SHM "$a2a" -t "$n" "${args[@]}" >"$tmp/out" 2>"$tmp/err" &
    fi
    top=$!
    best="0 0 0 0"
    while kill -0 "$top" 2>/dev/null; do
        if [ $procs = 1 ]; then
            pids=$(pgrep -P "$top" | tr '\n' ' ')
        else
            pids=$top
        fi
        # shellcheck disable=SC2086
        cur=$(sample $pids)
        # keep the largest of each column
        best=$(echo "$best $cur" | awk '{for (i = 1; i <= 4; i++) printf "%d ", ($i > $(i+4) ? $i : $(i+4))}')
        sleep 0.1
    done
    rc=0
    wait "$top" || rc=$?
    ring=$(grep -o 'rings of [0-9]* slots of [0-9]* KiB' "$tmp/err" | head -n 1 | sed 's/rings of //')
    read -r rk mp sh hw <<<"$best"
    if [ $rc -ne 0 ] || ! grep -q '# Out of bounds values : 0 OK' "$tmp/out"; then
        why=$(grep -o 'RLIMIT_NOFILE = [0-9]*' "$tmp/err" | head -n 1)
        printf '%6d  failed (exit %d%s)\n' "$n" "$rc" "${why:+, $why}"
        continue
    fi
    awk -v n="$n" -v rk="$rk" -v mp="$mp" -v sh="$sh" -v hw="$hw" -v ring="${ring:-?}" \
        'BEGIN {printf "%6d %10.1f %7d %13.1f %10.1f  %s\n", n, rk / 1024, mp, sh / 1024, hw / 1024, ring}'
done
