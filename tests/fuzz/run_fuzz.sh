#!/usr/bin/env bash
# Runs every fuzz target for DURATION seconds each, one after the other, from the
# seed corpus (fuzz_seeds) plus what earlier runs kept, and prints per target the
# executions, the time and the corpus size.  Exits 1 on a finding (the crashing
# input is left in $FUZZ_ARTIFACTS) or when a target cannot run.
#
#   tests/fuzz/run_fuzz.sh DURATION     (FUZZ_BUILD_DIR: the build's tests/fuzz,
#                                        default build-fuzz/tests/fuzz)
#   FUZZ_CORPUS=DIR keeps the corpus there (default: $FUZZ_BUILD_DIR/corpus)
set -uo pipefail
duration=${1:?usage: run_fuzz.sh DURATION}
here=$(cd "$(dirname "$0")" && pwd)
bdir=${FUZZ_BUILD_DIR:-$here/../../build-fuzz/tests/fuzz}
corpus=${FUZZ_CORPUS:-$bdir/corpus}
artifacts=${FUZZ_ARTIFACTS:-$bdir/artifacts}
mkdir -p "$corpus" "$artifacts" || exit 1
"$bdir/fuzz_seeds" "$corpus" || { echo "fuzz: cannot write the seed corpus"; exit 1; }
status=0
for t in boot_root boot_rank hello id shrink status torch_store; do
    exe=$bdir/fuzz_$t
    log=$bdir/fuzz_$t.log
    if [ ! -x "$exe" ]; then
        echo "fuzz_$t: not built"
        status=1
        continue
    fi
    start=$(date +%s)
    "$exe" -max_total_time="$duration" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$artifacts/$t-" "$corpus/$t" >"$log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    execs=$(awk '/stat::number_of_executed_units:/ {print $2}' "$log" | tail -1)
    files=$(find "$corpus/$t" -type f | wc -l)
    bytes=$(du -sb "$corpus/$t" | cut -f1)
    printf 'fuzz_%-10s rc %d, %s s, %s executions, corpus %s files (%s bytes)\n' \
        "$t" "$rc" "$secs" "${execs:-?}" "$files" "$bytes"
    if [ "$rc" -ne 0 ]; then
        echo "fuzz_$t: finding, see $log and $artifacts"
        tail -30 "$log"
        status=1
    fi
done
exit $status
