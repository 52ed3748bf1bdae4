#!/usr/bin/env bash
# Allreduce busbw of every algorithm forced (-A) and of the planner's choice, side by side
# in one run, for several rank counts over TCP loopback.  Writes JSON per run, an SVG plot
# per rank count (perf/plot_busbw.py) and a markdown table of the planner against the best
# forced algorithm at each size: "best / pick (forced)" compares the forced runs of the
# best algorithm and of the one the planner picked (free of the launch-to-launch noise
# between separate runs), "best forced / auto" the planner's own run.
#
#   perf/algo_sweep.sh [BUILD_DIR]
#   env: NS="2 4 8"  ALGOS="ring tree naive rd"  SIZES="-b 8 -e 64M -f 4"  REPS=2  ITERS=10
#        OUT=dir  RUN=0 (tabulate and plot what OUT already holds)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
NS=${NS:-"2 4 8"}
ALGOS=${ALGOS:-"ring tree naive rd"}
SIZES=${SIZES:-"-b 8 -e 64M -f 4"}
REPS=${REPS:-2}
ITERS=${ITERS:-10}
OUT=${OUT:-$(mktemp -d /tmp/coll-algos.XXXXXX)}
mkdir -p "$OUT"
export COLL_SOCKET_IFNAME=${COLL_SOCKET_IFNAME:-lo}
echo "# results in $OUT"

for rep in $(seq "$REPS"); do
    [ "${RUN:-1}" = 0 ] && break
    for n in $NS; do
        for algo in $ALGOS auto; do
            args=()
            [ "$algo" = auto ] || args=(-A "$algo")
            # shellcheck disable=SC2086
            timeout 900 "$build/tools/collrun" -n "$n" --no-prefix -- "$build/perf/allreduce_perf" \
                $SIZES -n "$ITERS" -w 3 -c 0 "${args[@]}" -J "$OUT/$algo.n$n.rep$rep.json" \
                > "$OUT/$algo.n$n.rep$rep.log" 2>&1 || echo "# $algo n=$n rep=$rep failed" >&2
        done
    done
done

python3 - "$OUT" "$NS" "$ALGOS" "$REPS" <<'PY'
import json, os, sys
out, ns, algos, reps = sys.argv[1], sys.argv[2].split(), sys.argv[3].split() + ["auto"], int(sys.argv[4])
def best(algo, n):
    """size -> (lowest time us, its busbw) over the repetitions"""
    b = {}
    for rep in range(1, reps + 1):
        p = f"{out}/{algo}.n{n}.rep{rep}.json"
        if not os.path.exists(p):
            continue
        for r in json.load(open(p))["results"]:
            t, bw = r["oop"]["time_us"], r["oop"]["busbw"]
            if r["size"] not in b or t < b[r["size"]][0]:
                b[r["size"]] = (t, bw)
    return b
def picks(n):
    """the planner's algorithm by size, from the first repetition's JSON"""
    p = f"{out}/auto.n{n}.rep1.json"
    if not os.path.exists(p):
        return []
    steps = []
    for part in json.load(open(p)).get("algorithms", "").split(","):
        w = part.split()
        if len(w) == 3 and w[1] == "from":
            steps.append((int(w[2]), w[0]))
    return steps
def pick_at(steps, size):
    name = None
    for start, algo in steps:
        if size >= start:
            name = algo
    return name
for n in ns:
    data = {a: best(a, n) for a in algos}
    steps = picks(n)
    for a in algos:
        json.dump({"results": [{"size": s, "oop": {"busbw": v[1]}, "ip": {"busbw": v[1]}}
                               for s, v in sorted(data[a].items())]},
                  open(f"{out}/best.{a}.n{n}.json", "w"))
    print(f"\n### {n} ranks: time per call in us (best of {reps}); planner against the best forced\n")
    print("| size | " + " | ".join(algos) + " | best forced | planner's pick | best / pick (forced) "
          "| best forced / auto |")
    print("|---:|" + "---:|" * (len(algos) + 4))
    for s in sorted(data["auto"]):
        forced = {a: data[a][s][0] for a in algos if a != "auto" and s in data[a]}
        if not forced:
            continue
        ba = min(forced, key=forced.get)
        ratio = forced[ba] / data["auto"][s][0]
        pk = pick_at(steps, s)
        regret = f"{forced[ba] / forced[pk]:.2f}" if pk in forced else "-"
        cells = " | ".join(f"{data[a][s][0]:.1f}" if s in data[a] else "-" for a in algos)
        print(f"| {s} | {cells} | {ba} | {pk or '-'} | {regret} | {ratio:.2f} |")
PY
for n in $NS; do
    series=()
    for a in $ALGOS auto; do series+=("$a=$OUT/best.$a.n$n.json"); done
    python3 "$here/perf/plot_busbw.py" -o "$OUT/allreduce_n$n.svg" \
        --title "allreduce busbw, $n ranks, TCP loopback" "${series[@]}"
done
echo "# plots: $OUT/allreduce_n*.svg"
