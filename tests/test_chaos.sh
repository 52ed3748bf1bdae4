#!/bin/bash
# Chaos soak (meson -Dslow_tests=true): 4 ranks of dp_trainer --elastic train 1000
# steps under collrun --keep-going --respawn while this driver picks a random rank
# 3 times, at steps of about 200, 500 and 800:
#   1. SIGKILL: the others fail within milliseconds and shrink; collrun starts a
#      replacement, which joins at the next step boundary (collCommGrow);
#   2. SIGSTOP: the others fail at their timeout (COLL_TIMEOUT_MS, 2 s here), blame
#      it and shrink without it; the driver then kills it and collrun replaces it;
#   3. SIGKILL again.
# The global batch never changes, so the run must end with the accuracy of an
# uninterrupted 4-rank run and its parameters within 1e-4 of it (relative 2-norm:
# the sums differ in their last bits in the steps made with 3 ranks).  Prints, per fault, the time to
# detect it, to shrink and to grow back, and the step the job went on from.
# Usage: test_chaos.sh PATH/TO/collrun PATH/TO/dp_trainer
set -u
COLLRUN=$1
TRAINER=$2
TMP=$(mktemp -d)
CR=
cleanup() {
    [ -n "$CR" ] && kill -9 "$CR" 2>/dev/null
    pkill -9 -f "$TMP/" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }

ARGS=(--hidden 256,256 --steps 1000 --seed 7)
export COLL_TIMEOUT_MS=2000
# The planner measures the machine at every init (and so after every shrink and
# grow) and may pick another allreduce, whose sums differ in their last bits:
# the ring everywhere keeps the 4-rank steps bitwise those of the uninterrupted run.
export COLL_ALGO=allreduce:ring

now() { date +%s.%N; }
count() { grep -c "$1" "$TMP/chaos.out" 2>/dev/null || true; }
# wait_count PATTERN N SECONDS: until PATTERN appears N times in the run's output.
wait_count() {
    local end=$((SECONDS + $3))
    while [ "$(count "$1")" -lt "$2" ]; do
        [ $SECONDS -ge $end ] && return 1
        kill -0 "$CR" 2>/dev/null || return 1
        sleep 0.05
    done
}
# The step rank 0 reported last.
last_step() {
    sed -n 's/^epoch [0-9]* step \([0-9]*\) .*/\1/p' "$TMP/chaos.out" | tail -n 1
}
# relerr A B: ||a - b|| / ||b|| of two float32 files.
relerr() {
    /usr/bin/python3 -c 'import sys, numpy as np
a = np.fromfile(sys.argv[1], np.float32); b = np.fromfile(sys.argv[2], np.float32)
print("%.3g" % (np.linalg.norm(a - b) / np.linalg.norm(b)) if a.shape == b.shape else "inf")' "$1" "$2"
}

# ---- the uninterrupted run ----
t0=$SECONDS
if ! "$COLLRUN" -n 4 --no-prefix --timeout 600 -- "$TRAINER" "${ARGS[@]}" \
        --dump-params "$TMP/ref.bin" >"$TMP/ref.out" 2>"$TMP/ref.err" </dev/null; then
    fail "the uninterrupted run failed"
    tail -n 5 "$TMP/ref.err"
    exit 1
fi
ref_acc=$(sed -n 's/^final loss .* accuracy //p' "$TMP/ref.out")
echo "uninterrupted: accuracy $ref_acc in $((SECONDS - t0)) s"

# ---- the run under faults ----
"$COLLRUN" -n 4 --no-prefix --keep-going --respawn --timeout 900 -- "$TRAINER" "${ARGS[@]}" \
    --elastic --dump-params "$TMP/chaos.bin" >"$TMP/chaos.out" 2>"$TMP/chaos.err" </dev/null &
CR=$!

printf '%-7s %-8s %10s %10s %12s %10s %s\n' fault signal "detect s" "shrink s" "grow s" \
    "back s" "steps"
sigs=(KILL STOP KILL)
targets=(200 500 800)
for i in 0 1 2; do
    # wait for the target step
    end=$((SECONDS + 300))
    while [ "$(last_step)" = "" ] || [ "$(last_step)" -lt "${targets[$i]}" ]; do
        if [ $SECONDS -ge $end ] || ! kill -0 "$CR" 2>/dev/null; then
            fail "fault $((i + 1)): the run did not reach step ${targets[$i]}"
            break 2
        fi
        sleep 0.05
    done
    mapfile -t pids < <(pgrep -P "$CR")
    if [ "${#pids[@]}" -ne 4 ]; then
        fail "fault $((i + 1)): ${#pids[@]} ranks running, not 4"
        break
    fi
    victim=${pids[$((RANDOM % 4))]}
    shrinks=$(count '^elastic: 3 of 4 ranks remain')
    grows=$(count '^elastic: grew from 3 to 4')
    t_kill=$(now)
    kill -"${sigs[$i]}" "$victim"
    if ! wait_count '^elastic: 3 of 4 ranks remain' $((shrinks + 1)) 60; then
        fail "fault $((i + 1)) (SIG${sigs[$i]}): the others did not shrink"
        break
    fi
    [ "${sigs[$i]}" = STOP ] && kill -KILL "$victim"
    if ! wait_count '^elastic: grew from 3 to 4' $((grows + 1)) 120; then
        fail "fault $((i + 1)) (SIG${sigs[$i]}): no replacement joined"
        break
    fi
    t_back=$(now)
    # The first rank to report the failure, and what it says.
    detect=$(sed -n 's/.* failed in step \([0-9]*\) at \([0-9.]*\):.*/\2 \1/p' "$TMP/chaos.err" |
             awk -v k="$t_kill" '$1 > k' | sort -n | head -n 1)
    shrink_line=$(grep '^elastic: 3 of 4 ranks remain' "$TMP/chaos.out" | tail -n 1)
    grow_line=$(grep '^elastic: grew from 3 to 4' "$TMP/chaos.out" | tail -n 1)
    d=$(echo "$detect $t_kill" | awk '{printf "%.3f", $1 - $3}')
    failed_in=$(echo "$detect" | awk '{print $2}')
    shrink_s=$(echo "$shrink_line" | sed -n 's/.* after \([0-9.]*\) s.*/\1/p')
    from=$(echo "$shrink_line" | sed -n 's/.*continuing from step \([0-9]*\).*/\1/p')
    grow_s=$(echo "$grow_line" | sed -n 's/.* in \([0-9.]*\) s$/\1/p')
    grow_at=$(echo "$grow_line" | sed -n 's/.* at step \([0-9]*\) .*/\1/p')
    back=$(echo "$t_back $t_kill" | awk '{printf "%.2f", $1 - $2}')
    printf '%-7s %-8s %10s %10s %12s %10s %s\n' "$((i + 1))" "SIG${sigs[$i]}" "$d" "$shrink_s" \
        "$grow_s" "$back" "failed in $failed_in, went on from $from, 4 ranks again at $grow_at"
done

if ! wait "$CR"; then
    : # collrun's status is the killed ranks'; the output says how the run ended
fi
CR=
acc=$(sed -n 's/^final loss .* accuracy //p' "$TMP/chaos.out")
if [ -z "$acc" ]; then
    fail "the run under faults did not finish"
    grep -v 'COLL WARN' "$TMP/chaos.err" | tail -n 15
else
    err=$(relerr "$TMP/chaos.bin" "$TMP/ref.bin")
    echo "under faults: accuracy $acc (uninterrupted $ref_acc), parameters within $err"
    [ "$acc" = "$ref_acc" ] || fail "accuracy $acc, uninterrupted $ref_acc"
    awk -v e="$err" 'BEGIN { exit !(e <= 1e-4) }' || fail "parameters differ by $err (> 1e-4)"
    [ "$(count '^elastic: grew from 3 to 4')" -eq 3 ] || fail "not 3 grows"
fi
echo "chaos: $failures failures"
[ "$failures" -eq 0 ]
