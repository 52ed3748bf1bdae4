#!/usr/bin/env bash
# The cost of making communicators (perf/comm_bench.c), two builds side by side: for each
# rank count the two runs alternate REPS times, and the medians of their per-run medians
# are compared.  ratio = BASE's time / NEW's (above 1: NEW is faster).
#
#   perf/comm_bench.sh NEW_BUILD [BASE_BUILD]     (one build alone without BASE_BUILD)
#   env: NS="2 4 8"  REPS=3  R=9 (communicators of each kind per run)
set -euo pipefail
new=$1 base=${2:-}
NS=${NS:-2 4 8}
REPS=${REPS:-3}
R=${R:-9}
for b in "$new" $base; do
    [ -x "$b/perf/comm_bench" ] || { echo "comm_bench.sh: $b/perf/comm_bench not found" >&2; exit 2; }
done
unset COLL_COMM_ID COLL_RANK COLL_NRANKS
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for rep in $(seq "$REPS"); do
    for n in $NS; do
        for which in new base; do
            b=$new
            [ "$which" = base ] && b=$base
            [ -n "$b" ] || continue
            "$b/perf/comm_bench" -n "$n" -r "$R" |
                awk -v w="$which" -v n="$n" '$1 ~ /^(first|split-halves|split-whole|new-from-id)$/ {print w, n, $1, $2}' >>"$out/all"
        done
    done
done
printf '# %d runs of each build alternating, %d communicators of each kind per run; ms, medians\n' "$REPS" "$R"
printf '%3s %-13s %9s %9s %7s\n' n kind base_ms new_ms ratio
for n in $NS; do
    for kind in first split-halves split-whole new-from-id; do
        nm=$(awk -v n="$n" -v k="$kind" '$1 == "new" && $2 == n && $3 == k {print $4}' "$out/all" | median)
        if [ -n "$base" ]; then
            bm=$(awk -v n="$n" -v k="$kind" '$1 == "base" && $2 == n && $3 == k {print $4}' "$out/all" | median)
            printf '%3s %-13s %9.2f %9.2f %7.2f\n' "$n" "$kind" "$bm" "$nm" "$(echo "$bm / $nm" | bc -l)"
        else
            printf '%3s %-13s %9s %9.2f\n' "$n" "$kind" - "$nm"
        fi
    done
done
