#!/bin/bash
# Tests model parallelism in examples/trainer/dp_trainer (docs/parallelism.md): grids
# of T tensor x P pipeline x D data-parallel ranks end within 1e-4 (norm-wise relative)
# of the 1-rank run with the same global batch and seed, epoch by epoch; each rank holds
# its share of the parameters; the pipeline holds the micro-batches each schedule says;
# every rank sends the bytes the formulas say; a checkpoint written on one grid resumes
# on another; bad grids and flags are refused on every rank.
# Usage: test_parallel.sh [--full] PATH/TO/collrun PATH/TO/dp_trainer
#   --full: every grid with T in {1,2,4}, P in {1,2,4}, D in {1,2}, T x P x D <= 8 that
#           the default model allows, both schedules, and the P = 4 grids on a deeper
#           model; prints the table (meson: -Dslow_tests=true, test 'parallel-full').
set -u

full=0
if [ "${1:-}" = "--full" ]; then
    full=1
    shift
fi
if [ $# -ne 2 ]; then
    echo "usage: $0 [--full] COLLRUN DP_TRAINER" >&2
    exit 2
fi
COLLRUN=$1
TRAINER=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export COLL_SOCKET_IFNAME=${COLL_SOCKET_IFNAME:-lo}
unset COLL_ALGO
failures=0
TOL=1e-4
STEPS=64                       # two epochs of the synthetic set at batch 256
DEEP=(--hidden 64,64,64)       # four weight layers: room for four stages
BALANCED=(--hidden 2048,32,2048,32) # four layers of equal work: even shares

ok() { echo "ok:   $*"; }
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# train NAME N ARGS...: dp_trainer on N ranks; rank 0's lines in $TMP/NAME.out, every
# rank's in $TMP/NAME.all, stderr in $TMP/NAME.err; adds --dump-params $TMP/NAME.bin.
train() {
    local name=$1 n=$2
    shift 2
    local rc=0
    "$COLLRUN" -n "$n" --timeout 300 -- "$TRAINER" "$@" --dump-params "$TMP/$name.bin" \
        >"$TMP/$name.all" 2>"$TMP/$name.err" </dev/null || rc=$?
    sed -n 's/^\[0\] //p' "$TMP/$name.all" >"$TMP/$name.out"
    if [ "$rc" -ne 0 ] || grep -q "Sanitizer\|runtime error" "$TMP/$name.err"; then
        fail "$name: exit $rc"
        grep -v "COLL WARN" "$TMP/$name.err" | sed 's/^/    | /' | head -n 10
        return 1
    fi
    return 0
}

# compare NAME REF [tail]: parameters, every epoch's loss and accuracy and the final
# line of run NAME against run REF within TOL (with tail: only the last epoch and the
# final line, for a resumed run, which prints only its own epochs); prints the worst
# relative difference.
compare() {
    python3 - "$TMP/$1" "$TMP/$2" "$TOL" "${3:-all}" <<'EOF'
import array, math, re, sys
run, ref, tol, which = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
def floats(p):
    a = array.array("f")
    with open(p + ".bin", "rb") as f:
        a.frombytes(f.read())
    return a
def losses(p):
    v = []
    for line in open(p + ".out"):
        m = re.match(r"(?:epoch \d+ step \d+ loss|final loss) (\S+) acc\S* (\S+)", line)
        if m:
            v += [float(m.group(1)), float(m.group(2))]
    return v[-4:] if which == "tail" else v
a, b = floats(run), floats(ref)
if len(a) != len(b) or not b:
    print("params: %d floats against %d" % (len(a), len(b)))
    sys.exit(1)
p = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b))) / math.sqrt(sum(y * y for y in b))
la, lb = losses(run), losses(ref)
if len(la) != len(lb) or len(lb) < 4:
    print("loss curve: %d values against %d" % (len(la), len(lb)))
    sys.exit(1)
c = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(la, lb))
what = "last epoch and final line" if which == "tail" else "loss curve"
print("params %.2g, %s %.2g (%d points)" % (p, what, c, len(la) // 2))
sys.exit(0 if p <= tol and c <= tol else 1)
EOF
}

# grid NAME T P D SCHEDULE REF ARGS...: one grid against the 1-rank run REF.
grid() {
    local name=$1 T=$2 P=$3 D=$4 sched=$5 ref=$6
    shift 6
    local n=$((T * P * D)) res
    train "$name" "$n" --steps "$STEPS" --tp "$T" --pp "$P" --schedule "$sched" "$@" || return 1
    if res=$(compare "$name" "$ref"); then
        ok "tp $T x pp $P x dp $D, $sched $*: $res"
        echo "| $T | $P | $D | $sched | $* | $res |" >>"$TMP/table"
    else
        fail "tp $T x pp $P x dp $D, $sched $*: $res (tolerance $TOL)"
        return 1
    fi
}

# ---- 1. grids against the 1-rank run ----
train ref1 1 --steps "$STEPS" || exit 1
train deep1 1 --steps "$STEPS" "${DEEP[@]}" || exit 1
if [ "$full" -eq 1 ]; then
    for T in 1 2 4; do for P in 1 2; do for D in 1 2; do
        [ $((T * P * D)) -le 8 ] && [ $((T * P * D)) -gt 1 ] || continue
        for s in gpipe 1f1b; do grid "g$T$P$D$s" $T $P $D $s ref1; done
    done; done; done
    for T in 1 2; do for D in 1 2; do
        [ $((T * 4 * D)) -le 8 ] || continue
        for s in gpipe 1f1b; do for M in 1 4 8; do
            grid "d$T$D$s$M" $T 4 $D $s deep1 "${DEEP[@]}" --micro-batches $M
        done; done
    done; done
else
    grid t2 2 1 1 1f1b ref1
    grid t4d2 4 1 2 1f1b ref1
    grid p2g 1 2 1 gpipe ref1
    grid p2d2 1 2 2 1f1b ref1 --micro-batches 8
    grid t2p2 2 2 1 gpipe ref1
    grid t2p2d2 2 2 2 1f1b ref1
    grid t4p2 4 2 1 1f1b ref1 --micro-batches 2
    grid p4g 1 4 1 gpipe deep1 "${DEEP[@]}" --micro-batches 8
    grid t2p4 2 4 1 1f1b deep1 "${DEEP[@]}" --micro-batches 4
    grid p4m1 1 4 2 1f1b deep1 "${DEEP[@]}" --micro-batches 1
fi

# ---- 2. shares of the parameters, held micro-batches, bytes sent ----
# rank_lines NAME: "rank t p d params whole peak M tensor ftensor pipe fpipe data fdata"
# from each rank's report line.
rank_lines() {
    python3 - "$TMP/$1.all" <<'EOF'
import re, sys
pat = re.compile(r"rank (\d+) \(tp (\d+)/\d+ pp (\d+)/\d+ dp (\d+)/\d+\): params (\d+) of "
                 r"(\d+) .* tensor (\d+) \(ring formula (\d+)\) pipeline (\d+) \((\d+)\) "
                 r"data (\d+) \((\d+)\); held (\d+) of (\d+) ")
for line in open(sys.argv[1]):
    m = pat.search(line)
    if m:
        g = m.groups()
        print(" ".join(g[:6] + g[12:14] + g[6:12]))
EOF
}

# shares NAME T P: replica 0's ranks hold the whole model once, plus the layers every
# tensor rank keeps whole (their count from the model's widths in $TMP/NAME.widths),
# and each holds about 1/(T x P).
shares() {
    python3 - "$TMP/$1" "$2" "$3" <<'EOF'
import sys
base, T, P = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [list(map(int, l.split())) for l in open(base + ".ranks")]
widths = list(map(int, open(base + ".widths").read().split(",")))
nl = len(widths) - 1
# what stays whole on every tensor rank: the biases of row-split layers, an odd last
# hidden layer, the head
repl = 0
if T > 1:
    for l in range(nl):
        pair = l < 2 * ((nl - 1) // 2)
        if pair and l % 2 == 1:
            repl += widths[l + 1]
        elif not pair:
            repl += (widths[l] + 1) * widths[l + 1]
held = sum(r[4] for r in rows if r[3] == 0)
whole = rows[0][5]
want = whole + (T - 1) * repl
shares = ["%.1f%%" % (100.0 * r[4] / whole) for r in rows if r[3] == 0]
print("replica 0 holds %d = whole %d + %d x %d kept whole; shares %s (1/(TxP) = %.1f%%)"
      % (held, whole, T - 1, repl, " ".join(shares), 100.0 / (T * P)))
sys.exit(0 if held == want else 1)
EOF
}

# checks NAME SCHEDULE P M: every stage's peak of held micro-batches (gpipe M, 1f1b
# min(P - p, M)), and the bytes each rank sent per step against the formulas (1%).
checks() {
    python3 - "$TMP/$1" "$2" "$3" "$4" <<'EOF'
import sys
base, sched, P, M = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
bad = []
for r in (list(map(int, l.split())) for l in open(base + ".ranks")):
    rank, p, peak = r[0], r[2], r[6]
    want = M if sched == "gpipe" else min(P - p, M)
    if peak != want:
        bad.append("rank %d (stage %d) held %d micro-batches, want %d" % (rank, p, peak, want))
    for what, got, f in (("tensor", r[8], r[9]), ("pipeline", r[10], r[11]),
                         ("data", r[12], r[13])):
        if abs(got - f) > 0.01 * f + 64:
            bad.append("rank %d %s: %d bytes/step, formula %d" % (rank, what, got, f))
print("; ".join(bad) if bad else "every rank: held micro-batches and bytes/step as the formulas")
sys.exit(1 if bad else 0)
EOF
}

# measure NAME T P D SCHEDULE M ARGS...: the per-rank checks of one run (ring pinned,
# so the allreduce formula is the ring's).
measure() {
    local name=$1 T=$2 P=$3 D=$4 sched=$5 M=$6 res
    shift 6
    COLL_ALGO=allreduce:ring train "$name" $((T * P * D)) --steps 8 --tp "$T" --pp "$P" \
        --schedule "$sched" --micro-batches "$M" "$@" || return
    rank_lines "$name" >"$TMP/$name.ranks"
    if [ "$(wc -l <"$TMP/$name.ranks")" -ne $((T * P * D)) ]; then
        fail "$name: not one 'rank' line per rank"
        return
    fi
    if res=$(checks "$name" "$sched" "$P" "$M"); then
        ok "tp $T x pp $P x dp $D $sched M=$M $*: $res"
    else
        fail "tp $T x pp $P x dp $D $sched M=$M $*: $res"
    fi
}

measure m-t2p2d2 2 2 2 1f1b 4
measure m-p4g 1 4 1 gpipe 6 "${DEEP[@]}"
measure m-p4 1 4 2 1f1b 6 "${DEEP[@]}"
measure m-t4p2 4 2 1 gpipe 3
echo 32,2048,32,2048,32,10 >"$TMP/m-bal.widths"
measure m-bal 2 2 2 1f1b 4 "${BALANCED[@]}" --batch 64 &&
    if res=$(shares m-bal 2 2); then ok "balanced model, tp 2 x pp 2: $res"; else fail "$res"; fi
echo 32,2048,32,2048,32,10 >"$TMP/m-bal4.widths"
measure m-bal4 2 4 1 gpipe 2 "${BALANCED[@]}" --batch 64 &&
    if res=$(shares m-bal4 2 4); then ok "balanced model, tp 2 x pp 4: $res"; else fail "$res"; fi

# ---- 3. a checkpoint written on one grid resumes on another ----
# ck FROM_ARGS | TO_ARGS: step 32 on one grid, then on to STEPS on another; must end
# where the uninterrupted 1-rank run ends.
ck() {
    local name=$1 n1=$2 a1=$3 n2=$4 a2=$5 ref=$6 res
    # shellcheck disable=SC2086
    train "$name-a" "$n1" --steps 32 $a1 --checkpoint "$TMP/$name.ck" || return
    # shellcheck disable=SC2086
    train "$name" "$n2" --steps "$STEPS" $a2 --resume "$TMP/$name.ck" || return
    if res=$(compare "$name" "$ref" tail); then
        ok "checkpoint on '$a1' ($n1 ranks), resumed on '$a2' ($n2 ranks): $res"
    else
        fail "checkpoint on '$a1' ($n1 ranks), resumed on '$a2' ($n2 ranks): $res"
    fi
}
ck ck-a 4 "--tp 2 --pp 2" 4 "--pp 2 --micro-batches 2" ref1
ck ck-b 1 "" 8 "--tp 2 --pp 2 --schedule gpipe" ref1
ck ck-c 8 "--tp 2 --pp 4 ${DEEP[*]}" 1 "${DEEP[*]}" deep1

# ---- 4. refused grids and flags: every rank exits 2 naming the flag ----
refused() {
    local want=$1 n=$2
    shift 2
    local rc=0
    timeout 120 "$COLLRUN" -n "$n" --keep-going --timeout 60 -- "$TRAINER" --steps 2 "$@" \
        >"$TMP/bad.out" 2>"$TMP/bad.err" </dev/null || rc=$?
    local said
    said=$(grep -cF -- "$want" "$TMP/bad.err")
    if [ "$rc" -ne 2 ] || grep -q "Sanitizer\|runtime error" "$TMP/bad.err"; then
        fail "'$*' on $n ranks: exit $rc (want 2)"
        sed 's/^/    | /' "$TMP/bad.err" | head -n 5
    elif [ "$said" -lt "$n" ]; then
        fail "'$*' on $n ranks: $said of the ranks named '$want'"
        sed 's/^/    | /' "$TMP/bad.err" | head -n 5
    else
        ok "'$*' refused on all $n ranks: $(grep -F -- "$want" "$TMP/bad.err" | head -n 1)"
    fi
}
refused --tp 3 --tp 3 --pp 1                 # 3 does not divide 256
refused --tp 3 --tp 2                        # 2 does not divide 3 ranks
refused --pp 2 --pp 4                        # the default model has 3 layers
refused --tp 2 --tp 2 --hidden 64            # no pair to split
refused --tp 4 --tp 0
refused --pp 2 --pp 65
refused --micro-batches 2 --pp 2 --micro-batches 300
refused --schedule 2 --pp 2 --schedule zigzag
refused --mode 2 --tp 2 --mode ps
refused --elastic 2 --pp 2 --elastic

if [ "$full" -eq 1 ] && [ -s "$TMP/table" ]; then
    echo "| T | P | D | schedule | flags | against 1 rank |"
    echo "|---|---|---|---|---|---|"
    cat "$TMP/table"
fi
echo "parallel: $failures failures"
[ "$failures" -eq 0 ]
