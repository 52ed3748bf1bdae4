#!/usr/bin/env bash
# collBarrier beside MPI_Barrier (Open MPI over shared memory: pml ob1, btl self,vader), the two
# in turn REPS times per rank count, in one sitting; prints a markdown table of the best time of
# each and the ratio ours / Open MPI (below 1: ours is faster).  Ours runs barrier_perf with
# COLL_TRANSPORTS=shm (the planner picks the algorithm: ll among the ranks of one host).
#
#   perf/barrier_bench.sh [BUILD_DIR]
#   env: NS="2 4 8"  REPS=5  ITERS=20000 (divided by n/2 above 2 ranks)  OUT=dir
# Needs openmpi-bin and libopenmpi-dev (mpicc.openmpi).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
NS=${NS:-"2 4 8"}
REPS=${REPS:-5}
ITERS=${ITERS:-20000}
OUT=${OUT:-$(mktemp -d /tmp/coll-barrier.XXXXXX)}
mkdir -p "$OUT"
command -v mpicc.openmpi >/dev/null || { echo "barrier_bench: needs mpicc.openmpi (apt install libopenmpi-dev openmpi-bin)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # as root in the test machines
mpicc.openmpi -O2 -o "$OUT/mpi_barrier" "$here/perf/peers/mpi_barrier.c"
for n in $NS; do
    it=$(( n > 2 ? ITERS * 2 / n : ITERS ))
    for rep in $(seq "$REPS"); do
        COLL_TRANSPORTS=shm "$build/tools/collrun" -n "$n" --no-prefix -- \
            "$build/perf/barrier_perf" -b 0 -e 0 -n "$it" -w 500 |
            awk -v n="$n" '$1 == "0" && NF >= 10 {print "ours", n, $6}' >>"$OUT/times"
        mpirun.openmpi -np "$n" --oversubscribe --mca pml ob1 --mca btl self,vader \
            "$OUT/mpi_barrier" "$it" 500 |
            awk -v n="$n" '/^mpi_barrier/ {print "ompi", n, $5}' >>"$OUT/times"
    done
done
echo "| n | collBarrier us (best of $REPS) | MPI_Barrier us (best of $REPS) | ours / Open MPI |"
echo "|---:|---:|---:|---:|"
for n in $NS; do
    awk -v n="$n" '$2 == n {if (!($1 in m) || $3 + 0 < m[$1]) m[$1] = $3 + 0}
        END {printf "| %d | %.2f | %.2f | %.2f |\n", n, m["ours"], m["ompi"], m["ours"] / m["ompi"]}' \
        "$OUT/times"
done
echo
echo "# raw times: $OUT/times"
