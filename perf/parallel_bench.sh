#!/usr/bin/env bash
# Measures the three kinds of parallelism of examples/trainer/dp_trainer
# (docs/parallelism.md), each figure from the trainer's own reports:
#
#   1. pipeline: the idle share of the stages against the theory (P-1)/(M+P-1), and
#      the activations held at the peak, gpipe against 1f1b, for P in {2,4} and M in
#      {1,2,4,8}, on a model of four layers of equal work (--hidden 2048,32,2048,32);
#   2. data: the master-node scheme (--mode ps, naive) against ring all-reduce (ddp):
#      bytes the busiest rank sends per step, and examples/s, for 2, 4 and 8 ranks;
#   3. bytes per step of every rank of one tp 2 x pp 2 x dp 2 grid against the
#      formulas (ring all-reduce pinned);
#   4. the loss curve of the 1-rank run beside grids of each kind.
#
# The runs of a part are interleaved over REPS repetitions and each figure is the
# median, so that the machine's drifts spread evenly.
#
#   perf/parallel_bench.sh                 # about 10 minutes on 2 cores
#   REPS=1 STEPS=8 perf/parallel_bench.sh  # a quick look
#
# Environment: BUILD_DIR (build), REPS (3), STEPS (16: pipeline runs), DP_STEPS (200),
# RATE (200mbit: the shaped links), OUT (BUILD_DIR/parallel_bench: CSVs and logs),
# IMG (docs/img), ANALYSE_ONLY (1: only read the logs already in OUT again).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
reps=${REPS:-3}
steps=${STEPS:-16}
dp_steps=${DP_STEPS:-200}
out=${OUT:-$build/parallel_bench}
img=${IMG:-docs/img}
collrun=$build/tools/collrun
trainer=$build/examples/trainer/dp_trainer
py=/usr/bin/python3
[ -x "$py" ] || py=python3
export COLL_SOCKET_IFNAME=${COLL_SOCKET_IFNAME:-lo}
unset COLL_ALGO
for f in "$collrun" "$trainer"; do
    [ -x "$f" ] || { echo "parallel_bench: $f not built (ninja -C $build)" >&2; exit 1; }
done
mkdir -p "$out" "$img"
balanced=(--hidden 2048,32,2048,32)

# run LOG N ARGS...: one training run, every rank's lines (prefixed [r]) in LOG.
run() {
    local log=$1 n=$2
    shift 2
    "$collrun" -n "$n" --timeout 900 -- "$trainer" "$@" >"$log"
}

echo "# dp_trainer parallel_bench: $reps repetitions, $(nproc) cores, $(date -u +%F)" >&2
if [ "${ANALYSE_ONLY:-0}" != 1 ]; then

# ---- 1. the pipeline ----
for rep in $(seq 1 "$reps"); do
    for P in 2 4; do for M in 1 2 4 8; do for s in gpipe 1f1b; do
        run "$out/pipe-$P-$M-$s-$rep.log" "$P" "${balanced[@]}" --pp "$P" \
            --micro-batches "$M" --schedule "$s" --steps "$steps"
    done; done; done
    echo "pipeline: repetition $rep done" >&2
done

# ---- 2. master node against ring all-reduce ----
for rep in $(seq 1 "$reps"); do
    for n in 2 4 8; do
        COLL_ALGO=allreduce:ring run "$out/dp-$n-ddp-$rep.log" "$n" --mode ddp --rank-report \
            --steps "$dp_steps"
        run "$out/dp-$n-ps-$rep.log" "$n" --mode ps --algo naive --rank-report --steps "$dp_steps"
    done
    echo "data parallel: repetition $rep done" >&2
done

# ---- 2b. the same over shaped links: one rank per simulated host ----
# (../shared/tools/netns-cluster: each host's NIC limited to RATE in both
# directions, so the master's link carries its n-fold load; needs root)
netns=${NETNS_CLUSTER:-}
for d in ../shared/tools; do
    [ -z "$netns" ] && [ -x "$d/netns-cluster" ] && netns=$d/netns-cluster
done
rate=${RATE:-200mbit}
: >"$out/links.done"
if [ -n "$netns" ] && [ "$(id -u)" = 0 ]; then
    prefix=pb$(($$ % 100000))x
    trap '"$netns" down --prefix "$prefix" --kill >/dev/null 2>&1' EXIT
    if "$netns" up -n 8 --prefix "$prefix" --rate "$rate" >"$out/links.hosts" 2>"$out/links.err"; then
        root_ip=$(awk 'NR == 1 { print $1 }' "$out/links.hosts")
        port=29600
        for rep in $(seq 1 "$reps"); do
            for n in 2 4 8; do
                for scheme in ddp ps; do
                    port=$((port + 1))
                    pids=()
                    for i in $(seq 0 $((n - 1))); do
                        algo=()
                        [ "$scheme" = ddp ] && algo=(COLL_ALGO=allreduce:ring)
                        "$netns" exec -i "$i" --prefix "$prefix" -- env "${algo[@]}" \
                            COLL_RANK="$i" COLL_NRANKS="$n" COLL_COMM_ID="$root_ip:$port" \
                            COLL_SECRET=0123456789abcdef COLL_TRANSPORTS=tcp \
                            COLL_SOCKET_IFNAME=eth0 "$trainer" --mode "$scheme" --rank-report \
                            --steps 64 >"$out/net-$n-$scheme-$rep.$i" 2>&1 &
                        pids+=($!)
                    done
                    wait "${pids[@]}"
                    sed 's/^/[0] /' "$out/net-$n-$scheme-$rep.0" >"$out/net-$n-$scheme-$rep.log"
                    for i in $(seq 1 $((n - 1))); do
                        grep "^rank" "$out/net-$n-$scheme-$rep.$i" | sed "s/^/[$i] /" \
                            >>"$out/net-$n-$scheme-$rep.log"
                    done
                done
            done
            echo "shaped links: repetition $rep done" >&2
        done
        echo "$rate" >"$out/links.done"
    else
        echo "parallel_bench: netns-cluster up failed (shaped links skipped): $(tail -1 "$out/links.err")" >&2
    fi
    "$netns" down --prefix "$prefix" --kill >/dev/null 2>&1 || true
    trap - EXIT
else
    echo "parallel_bench: shaped links skipped (needs root and ../shared/tools/netns-cluster)" >&2
fi

# ---- 3. bytes of one grid ----
COLL_ALGO=allreduce:ring run "$out/bytes.log" 8 "${balanced[@]}" --tp 2 --pp 2 --batch 64 \
    --steps 8

# ---- 4. loss curves ----
for g in "1:" "2:--tp 2" "2:--pp 2" "2:--mode ps" "8:--tp 2 --pp 2"; do
    n=${g%%:*}
    # shellcheck disable=SC2086
    run "$out/loss-$n$(echo "${g#*:}" | tr -d ' -').log" "$n" ${g#*:} --steps 300
done

fi

"$py" - "$out" "$reps" "$img" <<'EOF'
import csv, os, re, statistics, sys
sys.path.insert(0, "perf")
import svgplot
out, reps, img = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rank_re = re.compile(r"^\[\d+\] rank (\d+) \(tp (\d+)/(\d+) pp (\d+)/(\d+) dp (\d+)/(\d+)\): "
                     r"params (\d+) of (\d+) .* tensor (\d+) \(ring formula (\d+)\) pipeline (\d+) "
                     r"\((\d+)\) data (\d+) \((\d+)\); held (\d+) of (\d+) micro-batches "
                     r"\(([\d.]+) KiB of activations\); pipe-idle ([\d.]+)%")
def ranks(path):
    rows = []
    for line in open(path):
        m = rank_re.match(line)
        if m:
            g = m.groups()
            rows.append(dict(rank=int(g[0]), t=int(g[1]), p=int(g[3]), d=int(g[5]),
                             params=int(g[7]), whole=int(g[8]), tensor=int(g[9]),
                             ftensor=int(g[10]), pipe=int(g[11]), fpipe=int(g[12]),
                             data=int(g[13]), fdata=int(g[14]), held=int(g[15]),
                             act_kib=float(g[17]), idle=float(g[18])))
    return sorted(rows, key=lambda r: r["rank"])
def epochs(path):
    v = []
    for line in open(path):
        m = re.match(r"^\[0\] epoch (\d+) step (\d+) loss (\S+) .* examples/s (\d+)", line)
        if m:
            v.append((int(m.group(2)), float(m.group(3)), float(m.group(4))))
    return v
med = statistics.median

# 1. pipeline.  Besides the theory for equal stages, the same timeline with the
# stages' measured work: stage p is busy c_p = (1 - idle_p) x step / M per
# micro-batch, and a step takes the fill and drain through every stage once plus
# M - 1 passes of the slowest, sum(c) + (M - 1) max(c).
rows = []
for P in (2, 4):
    for M in (1, 2, 4, 8):
        for s in ("gpipe", "1f1b"):
            stage_idle = [[] for _ in range(P)]
            peak, act = 0, 0.0
            for rep in range(1, reps + 1):
                rr = ranks(f"{out}/pipe-{P}-{M}-{s}-{rep}.log")
                for r in rr:
                    stage_idle[r["p"]].append(r["idle"])
                peak = max(r["held"] for r in rr)
                act = max(r["act_kib"] for r in rr)
            idle = [med(v) for v in stage_idle]
            c = [(100.0 - i) / M for i in idle]  # per micro-batch, in % of the step
            model = sum(c) + (M - 1) * max(c)
            rows.append(dict(P=P, M=M, schedule=s, idle=sum(idle) / P,
                             theory=100.0 * (P - 1) / (M + P - 1), busiest=min(idle),
                             stages=" ".join(f"{i:.0f}" for i in idle),
                             model_vs_measured=model / 100.0, peak=peak, act_kib=act))
with open(f"{out}/pipeline.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
print("| P | M | schedule | idle share, mean of stages | theory (P-1)/(M+P-1) | stages' idle % "
      "| step from the stages' work / measured | peak micro-batches held | peak activations KiB |")
print("|---:|---:|---|---:|---:|---|---:|---:|---:|")
for r in rows:
    print(f"| {r['P']} | {r['M']} | {r['schedule']} | {r['idle']:.1f}% | {r['theory']:.1f}% "
          f"| {r['stages']} | {r['model_vs_measured']:.2f} | {r['peak']} | {r['act_kib']:.0f} |")
series = []
for P in (2, 4):
    series.append((f"theory P={P}", [(r["M"], r["theory"]) for r in rows
                                      if r["P"] == P and r["schedule"] == "gpipe"]))
    for s in ("gpipe", "1f1b"):
        series.append((f"{s} P={P}", [(r["M"], r["idle"]) for r in rows
                                       if r["P"] == P and r["schedule"] == s]))
px, py = svgplot.x_span(1, 8), svgplot.y_span(0, 100)
svgplot.write(f"{img}/pipeline_idle.svg", "Pipeline idle share: measured against (P-1)/(M+P-1)",
              "micro-batches M", "idle share of step time (%)", series, px, py,
              [(m, str(m)) for m in (1, 2, 4, 8)], [(v, f"{v}%") for v in range(0, 101, 20)],
              dashed=True)
amax = max(r["act_kib"] for r in rows)
series = [(f"{s} P={P}", [(r["M"], r["act_kib"]) for r in rows if r["P"] == P and r["schedule"] == s])
          for P in (2, 4) for s in ("gpipe", "1f1b")]
svgplot.write(f"{img}/pipeline_activations.svg", "Activations held at the peak (stage 0)",
              "micro-batches M", "KiB", series, svgplot.x_span(1, 8), svgplot.y_span(0, amax * 1.1),
              [(m, str(m)) for m in (1, 2, 4, 8)],
              [(amax * k / 4, f"{amax * k / 4:.0f}") for k in range(5)], dashed=True)

# 2. master node against ring, on one host and over shaped links
def dp_table(stem, where):
  print()
  print(f"{where}:")
  print()
  print("| ranks | scheme | busiest rank's bytes/step | others' bytes/step | formula (busiest) "
        "| examples/s | ps / ddp examples/s |")
  print("|---:|---|---:|---:|---:|---:|---:|")
  series = {"ddp": [], "ps": []}
  for n in (2, 4, 8):
    eps = {}
    for scheme in ("ddp", "ps"):
        busiest, others, form, ex = [], [], 0, []
        for rep in range(1, reps + 1):
            path = f"{out}/{stem}-{n}-{scheme}-{rep}.log"
            rr = ranks(path)
            busiest.append(max(r["data"] for r in rr))
            others.append(med([r["data"] for r in rr if r["rank"] != 0]))
            form = max(r["fdata"] for r in rr)
            e = epochs(path)
            e = e[1:] if len(e) > 1 else e
            ex.append(sum(x[2] for x in e) / len(e))
        eps[scheme] = med(ex)
        series[scheme].append((n, med(busiest) / 1024.0, eps[scheme]))
        ratio = f"{eps['ps'] / eps['ddp']:.2f}" if scheme == "ps" else ""
        print(f"| {n} | {scheme} | {med(busiest):.0f} | {med(others):.0f} | {form} "
              f"| {eps[scheme]:.0f} | {ratio} |")
  return series
series = dp_table("dp", "One host, shared memory")
bytes_series = {k: [(n, b) for n, b, _ in v] for k, v in series.items()}
rate = open(f"{out}/links.done").read().strip()
if rate:
    net = dp_table("net", f"One rank per simulated host, TCP over links of {rate}")
    emax = max(e for v in net.values() for _, _, e in v)
    svgplot.write(f"{img}/parallel_master_links.svg",
                  f"Master node against ring all-reduce, one rank per host ({rate} links)",
                  "ranks", "examples/s", [("ring all-reduce (ddp)", [(n, e) for n, _, e in net["ddp"]]),
                                          ("master node (ps)", [(n, e) for n, _, e in net["ps"]])],
                  svgplot.x_span(2, 8), svgplot.y_span(0, emax * 1.1),
                  [(n, str(n)) for n in (2, 4, 8)],
                  [(emax * k / 4, f"{emax * k / 4:.0f}") for k in range(5)])
bmax = max(y for s in bytes_series.values() for _, y in s)
svgplot.write(f"{img}/parallel_master_bytes.svg",
              "Bytes the busiest rank sends per step (default model, 167 KiB of gradient)",
              "ranks", "KiB per step", [("ring all-reduce (ddp)", bytes_series["ddp"]),
                                        ("master node (ps)", bytes_series["ps"])],
              svgplot.x_span(2, 8), svgplot.y_span(0, bmax * 1.1),
              [(n, str(n)) for n in (2, 4, 8)],
              [(bmax * k / 4, f"{bmax * k / 4:.0f}") for k in range(5)])

# 3. one grid's bytes
print()
print("| rank | tp | pp | dp | params (share) | tensor B/step (formula) | pipeline (formula) "
      "| data (formula) |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in ranks(f"{out}/bytes.log"):
    print(f"| {r['rank']} | {r['t']} | {r['p']} | {r['d']} | {r['params']} "
          f"({100.0 * r['params'] / r['whole']:.1f}%) | {r['tensor']} ({r['ftensor']}) "
          f"| {r['pipe']} ({r['fpipe']}) | {r['data']} ({r['fdata']}) |")

# 4. loss curves
curves = []
for name, label in (("1", "1 rank"), ("2tp2", "tp 2"), ("2pp2", "pp 2"),
                    ("2modeps", "ps, 2 ranks"), ("8tp2pp2", "tp 2 x pp 2 x dp 2")):
    e = epochs(f"{out}/loss-{name}.log")
    curves.append((label, [(s, l) for s, l, _ in e]))
lmax = max(l for _, c in curves for _, l in c)
svgplot.write(f"{img}/parallel_loss.svg", "Training loss: one rank and grids of each kind",
              "step", "mean training loss of the epoch", curves, svgplot.x_span(0, 300),
              svgplot.y_span(0, lmax * 1.05), [(s, str(s)) for s in range(0, 301, 50)],
              [(lmax * k / 4, f"{lmax * k / 4:.2f}") for k in range(5)], dashed=True)
print()
print("loss at the end of each epoch:", "; ".join(
    f"{label}: " + " ".join(f"{l:.4f}" for _, l in c) for label, c in curves))
EOF
