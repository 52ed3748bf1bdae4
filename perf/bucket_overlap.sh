#!/usr/bin/env bash
# Gradient buckets on a stream with consecutive calls overlapped (COLL_STREAM_OVERLAP,
# default 4) and not (1), side by side in one sitting: for each transport, rank count
# and bucket size, the two runs alternate REPS times and the medians of their round
# times are compared.  ratio = time without overlap / time with it (above 1: overlap
# is faster).
#
#   perf/bucket_overlap.sh [BUILD]        (default build-perf)
#   env: TRANSPORTS="shm tcp"  NS="2 4"  SIZES="64K 1M 4M"  BUCKETS=8  REPS=5  ROUNDS=20
#        OVERLAP=4
set -euo pipefail
build=${1:-build-perf}
here=$(cd "$(dirname "$0")/.." && pwd)
collrun=$build/tools/collrun
bench=$build/perf/bucket_bench
for f in "$collrun" "$bench"; do
    [ -x "$f" ] || { echo "bucket_overlap: $f not found: build $build first" >&2; exit 2; }
done
TRANSPORTS=${TRANSPORTS:-shm tcp}
NS=${NS:-2 4}
SIZES=${SIZES:-64K 1M 4M}
BUCKETS=${BUCKETS:-8}
REPS=${REPS:-5}
ROUNDS=${ROUNDS:-20}
OVERLAP=${OVERLAP:-4}

median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

run() { # overlap transport n size -> median_us of one run
    COLL_STREAM_OVERLAP=$1 COLL_TRANSPORTS=$2 "$collrun" -n "$3" --timeout 300 \
        "$bench" -k "$BUCKETS" -s "$4" -r "$ROUNDS" | sed -n 's/.*median_us \([0-9.]*\).*/\1/p'
}

cd "$here"
printf '# %d buckets per round, %d rounds per run, %d runs each way, alternating\n' \
    "$BUCKETS" "$ROUNDS" "$REPS"
printf '%-5s %3s %6s %14s %14s %7s\n' transport n bytes "off_us" "on_us" ratio
for tp in $TRANSPORTS; do
    for n in $NS; do
        for size in $SIZES; do
            off=() on=()
            for _ in $(seq "$REPS"); do
                off+=("$(run 1 "$tp" "$n" "$size")")
                on+=("$(run "$OVERLAP" "$tp" "$n" "$size")")
            done
            mo=$(printf '%s\n' "${off[@]}" | median)
            mn=$(printf '%s\n' "${on[@]}" | median)
            printf '%-5s %3d %6s %14.1f %14.1f %7.3f\n' "$tp" "$n" "$size" "$mo" "$mn" \
                "$(awk -v a="$mo" -v b="$mn" 'BEGIN {print a / b}')"
        done
    done
done
