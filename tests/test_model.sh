#!/bin/bash
# The planner's measurements across runs (COLL_MODEL_FILE, docs/algorithms.md):
#
#   test_model.sh COLLRUN TEST_MODEL
#
# 1. With no file: the run measures and writes COLL_MODEL_FILE (its header, a
#    plan: entry and an ll: entry for 4 ranks).
# 2. Again with the file: nothing is measured (the log says every figure came
#    from the process's store, filled from the file), and every call at every
#    size chooses the algorithm the first run chose.
# 3. A file this library did not write: a warning, the machine measured, the
#    file written anew.
# 4. COLL_MODEL_REMEASURE=1: measured though the file has the figures (the
#    splits may then choose otherwise: only their results are checked).
set -u
collrun=$1 test_model=$2
dir=$(mktemp -d /tmp/test_model.XXXXXX)
trap 'rm -rf "$dir"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
unset COLL_RANK COLL_NRANKS COLL_COMM_ID COLL_LINK_LATENCY_NS COLL_LINK_BW_MBS \
      COLL_MODEL_REMEASURE COLL_ALGO
model=$dir/model

# run NAME [ARG...]: the 4-rank test with the model file, its log in $dir/NAME.log
run() {
    local name=$1
    shift
    if ! env COLL_MODEL_FILE="$model" COLL_DEBUG=INFO COLL_DEBUG_SUBSYS=ALGO \
            "$collrun" -n 4 --timeout 120 "$test_model" --out "$dir/$name.algos" "$@" \
            >"$dir/$name.log" 2>&1; then
        fail "$name: the run failed"
        grep -v "COLL INFO" "$dir/$name.log" | tail -20
        return 1
    fi
}

if run first; then
    head -1 "$model" | grep -q '^# libcollective machine model 1$' ||
        fail "first: $model has no header: $(head -1 "$model")"
    grep -q '^plan:shm ' "$model" || fail "first: no plan:shm entry in $model"
    grep -q '^ll:4 ' "$model" || fail "first: no ll:4 entry in $model"
    grep -q 'machine model: .*(measured)' "$dir/first.log" || fail "first: nothing measured"
fi

if run second; then
    grep -q 'entries from COLL_MODEL_FILE' "$dir/second.log" || fail "second: the file not read"
    if grep -q '(measured)' "$dir/second.log"; then
        fail "second: measured again though the file has the figures:"
        grep '(measured)' "$dir/second.log" | head -3
    fi
    if ! cmp -s "$dir/first.algos" "$dir/second.algos"; then
        fail "second: other algorithms than the first run's:"
        diff "$dir/first.algos" "$dir/second.algos" | head -20
    fi
    [ "$(wc -l <"$dir/second.algos")" -eq 55 ] ||
        fail "second: $(wc -l <"$dir/second.algos") calls recorded, want 55"
fi

echo "not a model" >"$model"
if run garbage; then
    grep -q 'COLL_MODEL_FILE=.*not read' "$dir/garbage.log" || fail "garbage: no warning"
    grep -q 'machine model: .*(measured)' "$dir/garbage.log" || fail "garbage: nothing measured"
    head -1 "$model" | grep -q '^# libcollective machine model 1$' ||
        fail "garbage: the file was not written anew"
fi

if run remeasure --remeasure; then
    grep -q 'machine model: .*(measured)' "$dir/remeasure.log" ||
        fail "remeasure: nothing measured with COLL_MODEL_REMEASURE=1"
fi

echo "$failures failures"
[ "$failures" -eq 0 ]
