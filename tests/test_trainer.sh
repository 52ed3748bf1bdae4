#!/bin/bash
# Tests examples/trainer/dp_trainer under collrun: the same maths on 1 to 4 ranks, ddp
# against ps, learning (synthetic set and the scikit-learn digits when present),
# bitwise resume from a checkpoint, bitwise --no-overlap, --elastic shrinking after a
# death and growing back with collrun --respawn, and refused input.
# Usage: test_trainer.sh PATH/TO/collrun PATH/TO/dp_trainer
# COLL_DIGITS_CSV names the digits file when it is not where Debian's
# python3-sklearn puts it.
set -u

if [ $# -ne 2 ]; then
    echo "usage: $0 COLLRUN DP_TRAINER" >&2
    exit 2
fi
COLLRUN=$1
TRAINER=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export COLL_SOCKET_IFNAME=${COLL_SOCKET_IFNAME:-lo}
unset COLL_ALGO
failures=0
# A small model, so the whole script takes seconds: 200 steps are 6 epochs of the
# synthetic set.
SMALL=(--hidden "64,32" --steps 200 --batch 256)
TOL=1e-4
ACC_BAR=0.90   # measured: 0.947 synthetic, 0.967 digits

ok() { echo "ok:   $*"; }
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# train NAME N ARGS...: runs dp_trainer on N ranks; stdout (rank 0's, unprefixed) in
# $TMP/NAME.out, stderr in $TMP/NAME.err, exit code in rc.  Adds --dump-params
# $TMP/NAME.bin.
train() {
    local name=$1 n=$2
    shift 2
    rc=0
    "$COLLRUN" -n "$n" --timeout 120 -- "$TRAINER" "$@" --dump-params "$TMP/$name.bin" \
        >"$TMP/$name.raw" 2>"$TMP/$name.err" </dev/null || rc=$?
    sed -n 's/^\[0\] //p' "$TMP/$name.raw" >"$TMP/$name.out"
    if [ "$rc" -ne 0 ] || grep -q "Sanitizer\|runtime error" "$TMP/$name.err"; then
        fail "$name: exit $rc"
        sed 's/^/    | /' "$TMP/$name.err" | head -n 10
        return 1
    fi
    return 0
}

final_loss() { awk '/^final loss/ { print $3 }' "$TMP/$1.out"; }
final_acc() { awk '/^final loss/ { print $5 }' "$TMP/$1.out"; }

# relerr A B: ||a - b||_2 / ||b||_2 of two float32 files, or of two numbers.
relerr() {
    python3 - "$@" <<'EOF'
import array, math, os, sys
def load(x):
    if os.path.exists(x):
        a = array.array("f")
        with open(x, "rb") as f:
            a.frombytes(f.read())
        return a
    return [float(x)]
a, b = load(sys.argv[1]), load(sys.argv[2])
if len(a) != len(b) or len(b) == 0:
    print("inf")
else:
    num = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))
    den = math.sqrt(sum(y * y for y in b)) or 1.0
    print("%.3g" % (num / den))
EOF
}

# close DESC A B: passes when relerr(A, B) <= TOL.
close() {
    local e
    e=$(relerr "$2" "$3")
    if python3 -c "import sys; sys.exit(0 if float('$e') <= $TOL else 1)"; then
        ok "$1 (relative difference $e)"
    else
        fail "$1: relative difference $e > $TOL"
    fi
}

same_bits() {
    if cmp -s "$2" "$3"; then ok "$1: bitwise identical"; else fail "$1: parameters differ"; fi
}

# ---- 1. ddp on 1..4 ranks: the same global batch gives the same model ----
for n in 1 2 3 4; do
    train ddp$n $n "${SMALL[@]}" --mode ddp && ok "ddp on $n ranks: exit 0, ranks bitwise equal"
done
for n in 2 3 4; do
    close "ddp $n ranks vs 1 rank: parameters" "$TMP/ddp$n.bin" "$TMP/ddp1.bin"
    close "ddp $n ranks vs 1 rank: final loss" "$(final_loss ddp$n)" "$(final_loss ddp1)"
done

# ---- 2. ps (reduce to rank 0 + broadcast) against ddp ----
for n in 2 4; do
    train ps$n $n "${SMALL[@]}" --mode ps && ok "ps on $n ranks: exit 0"
    close "ps $n ranks vs ddp $n ranks" "$TMP/ps$n.bin" "$TMP/ddp$n.bin"
    close "ps $n ranks vs ddp 1 rank" "$TMP/ps$n.bin" "$TMP/ddp1.bin"
    close "ps $n ranks vs ddp $n ranks: final loss" "$(final_loss ps$n)" "$(final_loss ddp$n)"
done
train psalgo 3 "${SMALL[@]}" --mode ps --algo tree --steps 40 &&
    grep -q "COLL_ALGO=reduce:tree;broadcast:tree" "$TMP/psalgo.out" &&
    ok "ps --algo tree sets COLL_ALGO=reduce:tree;broadcast:tree"

# ---- 3. it learns ----
# learns NAME: the first epoch's loss is above the last's, accuracy >= ACC_BAR.
learns() {
    local name=$1 first last acc
    first=$(awk '/^epoch/ { print $6; exit }' "$TMP/$name.out")
    last=$(awk '/^epoch/ { l = $6 } END { print l }' "$TMP/$name.out")
    acc=$(final_acc "$name")
    if [ -z "$first" ] || [ -z "$acc" ]; then
        fail "$name: no epoch or final line in the output"
        sed 's/^/    | /' "$TMP/$name.out" | head -n 10
    elif awk -v f="$first" -v l="$last" -v a="$acc" -v bar="$ACC_BAR" \
        'BEGIN { exit !(f > l && a >= bar) }'; then
        ok "$name learns: loss $first -> $last, held-out accuracy $acc >= $ACC_BAR"
    else
        fail "$name: loss $first -> $last, held-out accuracy $acc (want falling, >= $ACC_BAR)"
    fi
}
learns ddp4
DIGITS=${COLL_DIGITS_CSV:-/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz}
if [ -r "$DIGITS" ]; then
    train digits 2 --hidden 64,32 --steps 200 --batch 128 --data "$DIGITS" && learns digits
else
    echo "digits: skipped (file not found)"
fi

# ---- 4. checkpoint at step K, resume to N: bitwise the uninterrupted run ----
# With 3+ ranks the planner measures the machine at init and may choose another
# algorithm in the second run, whose sums differ in the last bits: pin the ring.
resume_case() {
    local n=$1 mode=$2
    local tag=resume-$n-$mode
    train "$tag-ck" "$n" "${SMALL[@]}" --mode "$mode" --steps 70 --checkpoint "$TMP/$tag.ck" \
        --checkpoint-every 35 || return
    train "$tag" "$n" "${SMALL[@]}" --mode "$mode" --resume "$TMP/$tag.ck" || return
    same_bits "$n ranks $mode, checkpoint at 70 + resume to 200${COLL_ALGO:+ (COLL_ALGO=$COLL_ALGO)}" \
        "$TMP/$tag.bin" "$TMP/$3.bin"
}
resume_case 1 ddp ddp1
resume_case 2 ddp ddp2
resume_case 2 ps ps2
export COLL_ALGO=ring
train ring4 4 "${SMALL[@]}" --mode ddp && resume_case 4 ddp ring4

# ---- 6. --no-overlap: the same buckets, launched later, the same bits ----
# One bucket per layer (--bucket-mb 0), so that overlap really splits the work.
train overlap4 4 "${SMALL[@]}" --bucket-mb 0 &&
    train nooverlap4 4 "${SMALL[@]}" --bucket-mb 0 --no-overlap &&
    same_bits "4 ranks (COLL_ALGO=ring), 3 buckets: --no-overlap vs overlap" \
        "$TMP/nooverlap4.bin" "$TMP/overlap4.bin"
unset COLL_ALGO
train nooverlap2 2 "${SMALL[@]}" --no-overlap &&
    same_bits "2 ranks: --no-overlap vs overlap" "$TMP/nooverlap2.bin" "$TMP/ddp2.bin"
grep -q "3 buckets" "$TMP/overlap4.out" || fail "--bucket-mb 0 did not give one bucket per layer"

# ---- 5. refused input: non-zero exit, a message naming the flag or file, no crash ----
printf '1,2,0\n3,4\n' >"$TMP/ragged.csv"
printf '1,2,0\n3,x,1\n' >"$TMP/text.csv"
printf '1,2,0\n3,4,1.5\n' >"$TMP/label.csv"
# half of a gzip stream: zlib reports the truncation
python3 -c 'import gzip, sys; d = gzip.compress(b"1,2,0\n3,4,1\n" * 2000); sys.stdout.buffer.write(d[: len(d) // 2])' \
    >"$TMP/garbled.csv.gz"
head -c 200 "$TMP/resume-2-ddp.ck" >"$TMP/short.ck"
printf 'DPTRCKPT and then garbage' >"$TMP/garbage.ck"
cp "$TMP/resume-2-ddp.ck" "$TMP/flipped.ck"
printf '\x55' | dd of="$TMP/flipped.ck" bs=1 seek=400 conv=notrunc 2>/dev/null
# refused WANT_IN_MESSAGE ARGS...
# ---- 7. --elastic: one of 4 ranks dies at step 100; the other 3 shrink and go on ----
# The maths does not depend on the number of ranks, so the survivors must end where
# the uninterrupted run ends, and the run must still learn.
rc=0
"$COLLRUN" -n 4 --keep-going --timeout 120 -- "$TRAINER" "${SMALL[@]}" --elastic \
    --fail-at 2:100 --dump-params "$TMP/elastic.bin" >"$TMP/elastic.raw" 2>"$TMP/elastic.err" \
    </dev/null || rc=$?
sed -n 's/^\[0\] //p' "$TMP/elastic.raw" >"$TMP/elastic.out"
if [ "$rc" -ne 137 ] || grep -q "Sanitizer\|runtime error" "$TMP/elastic.err"; then
    fail "elastic: collrun exit $rc (want 137: rank 2 killed, the others exit 0)"
    sed 's/^/    | /' "$TMP/elastic.err" | grep -v "COLL WARN" | head -n 10
elif ! grep -q "^elastic: 3 of 4 ranks remain; continuing from step 10[01]" "$TMP/elastic.out"; then
    fail "elastic: no 'elastic: 3 of 4 ranks remain' line"
    sed 's/^/    | /' "$TMP/elastic.out" | head -n 20
else
    ok "elastic: $(grep '^elastic:' "$TMP/elastic.out")"
    learns elastic
    close "elastic (4 ranks, then 3 from step 100) vs 1 rank: parameters" "$TMP/elastic.bin" \
        "$TMP/ddp1.bin"
    close "elastic vs 1 rank: final loss" "$(final_loss elastic)" "$(final_loss ddp1)"
fi

# ---- 8. --elastic under collrun --respawn: rank 2, then (another run) rank 0 dies at
# step 20, the other 3 shrink, and the process collrun starts in its place joins them
# (collCommGrow).  With rank 0 gone, another process becomes rank 0: it writes the
# dump and listens for the replacement.  The death comes early so that the replacement
# (a new process that loads the data and joins at a step boundary) has time to come
# in before the run ends, even on a loaded machine: 400 steps (it came in 2 to 132
# steps after the death here), against a 1-rank run of 400. ----
train ddp1_400 1 "${SMALL[@]}" --steps 400 --mode ddp
for victim in 2 0; do
    name=grow$victim
    rc=0
    "$COLLRUN" -n 4 --respawn --timeout 120 -- "$TRAINER" "${SMALL[@]}" --steps 400 --elastic \
        --fail-at $victim:20 --dump-params "$TMP/$name.bin" >"$TMP/$name.raw" \
        2>"$TMP/$name.err" </dev/null || rc=$?
    # rank 0's lines: from the slot that is rank 0 at the end (the last "elastic:" line's)
    slot=$(sed -n 's/^\[\([0-9]*\)\] elastic: grew.*/\1/p' "$TMP/$name.raw" | tail -n 1)
    sed -n "s/^\[${slot:-0}\] //p" "$TMP/$name.raw" >"$TMP/$name.out"
    if [ "$rc" -ne 137 ] || grep -q "Sanitizer\|runtime error\|SIGSEGV" "$TMP/$name.err"; then
        fail "$name: collrun exit $rc (want 137: rank $victim killed, the others and its" \
             "replacement exit 0)"
        sed 's/^/    | /' "$TMP/$name.err" | grep -v "COLL WARN" | head -n 10
    elif ! grep -q "elastic: 3 of 4 ranks remain; continuing from step 2[01]" "$TMP/$name.raw" ||
         ! grep -q "^elastic: grew from 3 to 4 ranks at step" "$TMP/$name.out" ||
         ! grep -q "^\[$victim\] elastic: joined as rank 3 of 4" "$TMP/$name.raw" ||
         ! grep -q "^collrun: starting a replacement for rank $victim" "$TMP/$name.err"; then
        fail "$name: no shrink, replacement and grow back to 4 ranks"
        sed 's/^/    | /' "$TMP/$name.raw" | grep elastic | head -n 20
    else
        ok "$name: $(grep '^elastic: grew' "$TMP/$name.out")"
        learns $name
        close "$name (4 ranks, 3 from step 20, 4 again) vs 1 rank: parameters" \
            "$TMP/$name.bin" "$TMP/ddp1_400.bin"
    fi
done

refused() {
    local want=$1
    shift
    local rc=0 t0=$SECONDS
    timeout 90 "$COLLRUN" -n 2 --timeout 60 -- "$TRAINER" --hidden 16 --steps 5 "$@" \
        >"$TMP/bad.out" 2>"$TMP/bad.err" </dev/null || rc=$?
    if [ "$rc" -eq 0 ] || [ "$rc" -ge 124 ] || grep -q "Sanitizer\|runtime error" "$TMP/bad.err"; then
        fail "'$*': exit $rc (want 1 or 2, no crash, no hang; took $((SECONDS - t0)) s)"
    elif ! grep -qF -- "$want" "$TMP/bad.err"; then
        fail "'$*': exit $rc but the message does not name '$want'"
        sed 's/^/    | /' "$TMP/bad.err" | head -n 5
    else
        ok "'$*' refused: exit $rc, $(grep -F -- "$want" "$TMP/bad.err" | head -n 1)"
    fi
}
refused --bogus --bogus
refused --steps --steps 0
refused --batch --batch abc
refused --mode --mode foo
refused --hidden --hidden ''
refused --algo --mode ps --algo rd
refused --batch --batch 1
refused /no/such/file.csv --data /no/such/file.csv
refused "ragged.csv:2" --data "$TMP/ragged.csv"
refused "text.csv:2" --data "$TMP/text.csv"
refused "label.csv:2" --data "$TMP/label.csv"
refused garbled.csv.gz --data "$TMP/garbled.csv.gz"
refused short.ck --hidden 64,32 --resume "$TMP/short.ck"
refused garbage.ck --hidden 64,32 --resume "$TMP/garbage.ck"
refused flipped.ck --hidden 64,32 --resume "$TMP/flipped.ck"
refused resume-2-ddp.ck --resume "$TMP/resume-2-ddp.ck"   # another --hidden
refused --fail-at --fail-at 2
refused --elastic --elastic --mode ps
refused --grow-listen --grow-listen 127.0.0.1:1
refused --join --join nowhere
refused --resume --join 127.0.0.1:1 --resume "$TMP/resume-2-ddp.ck"

echo "trainer: $failures failures"
[ "$failures" -eq 0 ]
