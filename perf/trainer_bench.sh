#!/usr/bin/env bash
# Benchmarks examples/trainer/dp_trainer: examples/s and the share of step time spent
# waiting on communication, for 1, 2 and 4 ranks in ddp (overlapping backward, and
# --no-overlap) and ps, the runs interleaved so that drifts of the machine spread
# evenly; then the per-epoch training loss of a 4-rank ddp run and a 4-rank ps run, as
# a CSV and as docs/img/trainer_loss.svg.
#
#   perf/trainer_bench.sh                 # about 10-20 s per run, REPS=3: ~8 minutes
#   REPS=1 STEPS=100 perf/trainer_bench.sh
#
# Environment: BUILD_DIR (build), REPS (3), STEPS (3000), HIDDEN (256,128),
# BATCH (256), BUCKET_MB (0.1: the default model then has two buckets, so ddp has
# something to overlap; at the trainer's default of 1 MiB it has one), RANKS ("1 2 4"),
# OUT (BUILD_DIR/trainer_bench: CSVs and logs), SVG (docs/img/trainer_loss.svg).
# The table gives the median over the repetitions of each run's mean over its epochs
# after the first (the first includes warming up).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
reps=${REPS:-3}
steps=${STEPS:-3000}
hidden=${HIDDEN:-256,128}
batch=${BATCH:-256}
bucket=${BUCKET_MB:-0.1}
ranks=${RANKS:-1 2 4}
out=${OUT:-$build/trainer_bench}
svg=${SVG:-docs/img/trainer_loss.svg}
collrun=$build/tools/collrun
trainer=$build/examples/trainer/dp_trainer
export COLL_SOCKET_IFNAME=${COLL_SOCKET_IFNAME:-lo}

for f in "$collrun" "$trainer"; do
    [ -x "$f" ] || { echo "trainer_bench: $f not built (ninja -C $build)" >&2; exit 1; }
done
mkdir -p "$out"
variants=("ddp:--mode ddp" "ddp --no-overlap:--mode ddp --no-overlap" "ps:--mode ps")

# run LOG N ARGS...: one training run, rank 0's lines (unprefixed) in LOG.
run() {
    local log=$1 n=$2
    shift 2
    "$collrun" -n "$n" --timeout 600 -- "$trainer" --hidden "$hidden" --batch "$batch" \
        --steps "$steps" --bucket-mb "$bucket" "$@" | sed -n 's/^\[0\] //p' >"$log"
}

# mean_after_first LOG FIELD: the mean of an epoch line's field over epochs 2..,
# or over all when there is only one.
mean_after_first() {
    awk -v f="$2" '/^epoch/ { v[n++] = $f + 0 }
        END { s = 0; k = 0; for (i = (n > 1); i < n; i++) { s += v[i]; k++ }
              if (k) printf "%.1f\n", s / k; else print "nan" }' "$1"
}

median() { sort -g | awk '{ v[n++] = $1 } END { print n ? v[int((n - 1) / 2)] : "nan" }'; }

echo "# dp_trainer: --hidden $hidden --batch $batch --steps $steps --bucket-mb $bucket," \
     "$reps repetitions, $(nproc) cores" >&2
for rep in $(seq 1 "$reps"); do
    for n in $ranks; do
        for v in "${variants[@]}"; do
            name=${v%%:*}
            log="$out/${name// /_}-n$n-rep$rep.log"
            # shellcheck disable=SC2086
            run "$log" "$n" ${v#*:}
            echo "rep $rep, $n ranks, $name: $(tail -n 1 "$log")" >&2
        done
    done
done

echo
echo "| ranks | mode | examples/s | comm-wait % |"
echo "|---:|---|---:|---:|"
for n in $ranks; do
    for v in "${variants[@]}"; do
        name=${v%%:*}
        logs=("$out/${name// /_}-n$n-rep"*.log)
        eps=$(for l in "${logs[@]}"; do mean_after_first "$l" 10; done | median)
        wait=$(for l in "${logs[@]}"; do
            mean_after_first "$l" 12 | tr -d '%'; done | median)
        echo "| $n | $name | $eps | $wait |"
    done
done

# The loss curves: the first repetition's 4-rank runs (or the most ranks run).
nmax=$(echo "$ranks" | tr ' ' '\n' | sort -n | tail -n 1)
csv=$out/trainer_loss.csv
echo "epoch,step,ddp_loss,ps_loss,ddp_acc,ps_acc" >"$csv"
paste -d' ' <(awk '/^epoch/ { print $2, $4, $6, $8 }' "$out/ddp-n$nmax-rep1.log") \
            <(awk '/^epoch/ { print $6, $8 }' "$out/ps-n$nmax-rep1.log") |
    awk '{ printf "%s,%s,%s,%s,%s,%s\n", $1, $2, $3, $5, $4, $6 }' >>"$csv"
python3 perf/plot_loss.py -o "$svg" \
    --title "dp_trainer, $nmax ranks: training loss (epoch means; --hidden $hidden)" "$csv"
echo
echo "loss per epoch: $csv; plot: $svg"
