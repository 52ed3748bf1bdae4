#!/usr/bin/env bash
# Allreduce on simulated hosts: a netns cluster (../shared/tools/netns-cluster) of HOSTS hosts
# with shaped links, PER_HOST ranks on each, our allreduce_perf with the flat ring
# (COLL_ALGO=ring), the hierarchical allreduce (COLL_ALGO=hier) and the planner (COLL_ALGO
# unset), beside Gloo (ring, ring-chunked) and Open MPI (its own choice of algorithm, and its
# ring) on the same cluster.  Every configuration's repetition k runs before any repetition
# k+1, so that machine noise hits all alike; each figure is the median time of REPS runs, given as busbw
# (GB/s, 1e9 B) and as busbw / the link rate.  A second table gives, per (ranks per host,
# size), the alpha-beta bound of the hierarchical allreduce as a busbw,
#     bound = link x (2(n-1)/n) / (2(H-1)/H)     (n ranks, H hosts: each host's link must carry
#                                                 2(H-1)/H of the buffer each way, whatever n)
# and hier / bound, hier / flat ring, and ours best / better peer.
#
#   sudo nice -n 5 perf/multihost_bench.sh
#   env: HOSTS=4  PER_HOST="1 2 4"  SIZES="1M 16M 64M"  REPS=3  RATE=1gbit (tc units:
#        kbit, mbit, gbit; bit/s)  BUILD=build-perf (relative to the source root, or absolute)
#        NO_PEERS=1 (ours only)  GLOO_ALGOS="ring ringchunked"  OMPI_ALGOS="default ring"
#        (default: coll/tuned's own choice; ring: coll_tuned_allreduce_algorithm 4)
#        PEERS=../shared/peers  PEERS_WORK=/tmp/coll-peers (the peers are built there if
#        missing, as perf/compare_peers.sh does)  OUT=dir (logs; default a new /tmp dir)
#        TIMEOUT=300 (seconds per run)
#        TABLE_ONLY=1 with OUT=<a run's logs> (and its HOSTS, PER_HOST, SIZES, REPS, RATE):
#        print the tables again from those logs, running nothing
#
# Needs root (network namespaces): exits 77 otherwise.  The cluster gets a prefix of its own
# (mhb<pid>x) and is torn down on exit, error or interrupt.  How the peers are run:
#   Open MPI: mpirun.openmpi runs *inside host 0* (netns-cluster exec), since its daemons must
#     reach it over the cluster's network, and starts the others through netns-rsh
#     (--mca plm_rsh_agent), with pml ob1, btl self,vader,tcp on eth0 (vader between ranks of
#     one simulated host: each has its own host name), and mpi_yield_when_idle 1: Open MPI
#     sees 1-4 ranks on a host that it believes has its own cores, so it busy-polls, while all
#     the hosts' ranks share this machine's cores (without it: 2x to 7x slower here).
#   Gloo: one process per rank, each started with netns-cluster exec in its host, GLOO_HOST =
#     that host's address, rendezvous through a FileStore directory under /tmp (the simulated
#     hosts share the file system).
# The simulated hosts share this machine's CPUs: on a small machine the intra-host work of all
# hosts (reductions, shm copies, TCP stacks, the bridge) competes for the same cores.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
tools=$(cd "$here/../shared/tools" 2>/dev/null && pwd) || { echo "no ../shared/tools" >&2; exit 1; }
cluster=$tools/netns-cluster
rsh=$tools/netns-rsh

HOSTS=${HOSTS:-4}
PER_HOST=${PER_HOST:-"1 2 4"}
SIZES=${SIZES:-"1M 16M 64M"}
REPS=${REPS:-3}
RATE=${RATE:-1gbit}
BUILD=${BUILD:-build-perf}
case $BUILD in /*) build=$BUILD ;; *) build=$here/$BUILD ;; esac
NO_PEERS=${NO_PEERS:-0}
GLOO_ALGOS=${GLOO_ALGOS:-"ring ringchunked"}
OMPI_ALGOS=${OMPI_ALGOS:-"default ring"}
PEERS=${PEERS:-$here/../shared/peers}
PEERS_WORK=${PEERS_WORK:-/tmp/coll-peers}
TIMEOUT=${TIMEOUT:-300}
TABLE_ONLY=${TABLE_ONLY:-0}

[ "$HOSTS" -ge 2 ] 2>/dev/null || { echo "HOSTS must be 2 or more, not '$HOSTS'" >&2; exit 2; }
if [ "$TABLE_ONLY" = 1 ]; then
    if [ -z "${OUT:-}" ] || [ ! -d "$OUT" ]; then echo "TABLE_ONLY=1 needs OUT=<the logs of a run>" >&2; exit 2; fi
else
    if [ "$(id -u)" != 0 ]; then
        echo "multihost_bench: skipped: needs root (network namespaces)" >&2
        exit 77
    fi
    for t in ip tc unshare flock; do
        command -v "$t" >/dev/null || { echo "multihost_bench: skipped: no '$t'" >&2; exit 77; }
    done
    for b in "$build/tools/collrun" "$build/perf/allreduce_perf"; do
        [ -x "$b" ] || { echo "missing $b (nice ninja -C $BUILD)" >&2; exit 1; }
    done
fi

bytes_of() {
    local v=$1
    case $v in
    *K) echo $(( ${v%K} * 1024 )) ;;
    *M) echo $(( ${v%M} * 1048576 )) ;;
    *G) echo $(( ${v%G} * 1073741824 )) ;;
    *) echo "$v" ;;
    esac
}
# RATE in tc's bit units -> bit/s ("" when unshaped or not understood)
rate_bits() {
    awk -v r="$1" 'BEGIN {
        r = tolower(r); m = 0
        if (r ~ /^[0-9.]+gbit$/) m = 1e9; else if (r ~ /^[0-9.]+mbit$/) m = 1e6
        else if (r ~ /^[0-9.]+kbit$/) m = 1e3; else if (r ~ /^[0-9.]+bit$/) m = 1
        if (m > 0 && r + 0 > 0) printf "%.0f", (r + 0) * m }'
}
link_bits=$(rate_bits "$RATE")
link_gbs=$(awk -v b="${link_bits:-0}" 'BEGIN {printf "%.6f", b / 8 / 1e9}') # GB/s, 1e9 B
iters_for() { # fewer iterations for large messages (64 MiB at 1 Gbit/s: about 1 s per call)
    local b; b=$(bytes_of "$1")
    if [ "$b" -ge 16777216 ]; then echo "-n 3 -w 1"; elif [ "$b" -ge 1048576 ]; then echo "-n 10 -w 2"
    else echo "-n 50 -w 5"; fi
}
peer_iters_for() { # the same for the peers' benchmarks: warm-up, then exactly N timed calls
    local n w
    # shellcheck disable=SC2046
    set -- $(iters_for "$1")
    n=$2 w=$4
    echo "-w $w -m $n -n $n"
}

# The peers: built as perf/compare_peers.sh builds them, when missing.
peer_note=""
ompi_ok=0 gloo_ok=0
if [ "$TABLE_ONLY" = 1 ]; then # the peers whose logs are there
    compgen -G "$OUT/gloo_*.log" >/dev/null && gloo_ok=1
    compgen -G "$OUT/ompi_*.log" >/dev/null && ompi_ok=1
    [ "$gloo_ok$ompi_ok" = 00 ] && NO_PEERS=1
elif [ "$NO_PEERS" != 1 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    if [ ! -x "$PEERS_WORK/bin/mpi_coll_perf_ompi" ] || [ ! -x "$PEERS_WORK/bin/gloo_coll_perf" ]; then
        if ! command -v mpicc.openmpi >/dev/null || ! dpkg -s libgloo-dev >/dev/null 2>&1; then
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q openmpi-bin libopenmpi-dev \
                libgloo-dev g++ >/dev/null || true
        fi
        PEERS_WORK=$PEERS_WORK bash "$PEERS/build.sh" >/dev/null 2>&1 || true
    fi
    if [ -x "$PEERS_WORK/bin/mpi_coll_perf_ompi" ] && command -v mpirun.openmpi >/dev/null; then
        ompi_ok=1
    else
        peer_note="$peer_note Open MPI left out: $PEERS_WORK/bin/mpi_coll_perf_ompi or mpirun.openmpi missing (build.sh of $PEERS failed)."
    fi
    if [ -x "$PEERS_WORK/bin/gloo_coll_perf" ]; then
        gloo_ok=1
    else
        peer_note="$peer_note Gloo left out: $PEERS_WORK/bin/gloo_coll_perf missing (build.sh of $PEERS failed)."
    fi
fi

OUT=${OUT:-$(mktemp -d /tmp/coll-multihost.XXXXXX)}
mkdir -p "$OUT"
prefix=mhb$$x
stores=()
child=""
# Run a command in the background and wait for it, so that a signal is handled at once (bash
# runs traps only after a foreground child ends).
bgwait() { "$@" & child=$!; wait "$child"; }
cleanup() {
    local rc=$?
    set +e
    trap - EXIT INT TERM HUP PIPE
    [ -n "$child" ] && kill -TERM "$child" 2>/dev/null
    "$cluster" down --prefix "$prefix" --kill >/dev/null 2>&1 || true
    for s in "${stores[@]}"; do rm -rf "$s"; done
    exit "$rc"
}
if [ "$TABLE_ONLY" != 1 ]; then
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
    trap 'exit 141' PIPE
    "$cluster" up -n "$HOSTS" --prefix "$prefix" --rate "$RATE" >/dev/null
fi
addr_of() { awk -v n="$prefix$1" '$2 == n {print $1; exit}' "/run/netns-cluster/$prefix/hosts"; }

unset COLL_ALGO
export COLL_SOCKET_IFNAME=eth0
fails=()
note_fail() { fails+=("$1"); echo "# $1" >&2; }

hostlist() { # ranks-per-host -> "p0:k,p1:k,..."
    local k=$1 h l=""
    for ((h = 0; h < HOSTS; h++)); do l="$l,$prefix$h:$k"; done
    echo "${l#,}"
}

run_ours() { # algo(ring|hier|plan) ppn size
    local algo=$1 ppn=$2 size=$3 b log env=()
    b=$(bytes_of "$size")
    log="$OUT/$algo.p$ppn.$size.log"
    [ "$algo" = plan ] || env=("COLL_ALGO=$algo")
    # shellcheck disable=SC2046
    bgwait env "${env[@]}" "$build/tools/collrun" --hosts "$(hostlist "$ppn")" --rsh "$rsh" \
        --timeout "$TIMEOUT" --no-prefix -- "$build/perf/allreduce_perf" -b "$b" -e "$b" \
        $(iters_for "$size") >> "$log" 2>&1 || note_fail "ours $algo ppn=$ppn size=$size failed rc=$?"
}

run_gloo() { # algo ppn size
    local algo=$1 ppn=$2 size=$3 b log store n r h pids=() rc=0
    b=$(bytes_of "$size")
    log="$OUT/gloo_$algo.p$ppn.$size.log"
    n=$((HOSTS * ppn))
    store=$(mktemp -d /tmp/coll-multihost-gloo.XXXXXX)
    stores+=("$store")
    for ((r = 0; r < n; r++)); do
        h=$((r / ppn))
        # shellcheck disable=SC2046
        "$cluster" exec "$prefix$h" -- env GLOO_RANK=$r GLOO_SIZE=$n GLOO_STORE="$store" \
            GLOO_PREFIX=run GLOO_HOST="$(addr_of "$h")" timeout "$TIMEOUT" \
            "$PEERS_WORK/bin/gloo_coll_perf" -c allreduce -a "$algo" -b "$b" -e "$b" \
            $(peer_iters_for "$size") > "$store/out.$r" 2>&1 &
        pids+=($!)
    done
    for ((r = 0; r < n; r++)); do wait "${pids[$r]}" || rc=$?; done
    cat "$store/out.0" >> "$log"
    if [ "$rc" != 0 ]; then
        for ((r = 1; r < n; r++)); do { echo "---- rank $r ----"; tail -5 "$store/out.$r"; } >> "$log"; done
        note_fail "gloo $algo ppn=$ppn size=$size failed rc=$rc"
    fi
    rm -rf "$store"
}

run_ompi() { # algo(default|ring) ppn size
    local algo=$1 ppn=$2 size=$3 b log alg=()
    b=$(bytes_of "$size")
    log="$OUT/ompi_$algo.p$ppn.$size.log"
    case $algo in
    default) ;;
    ring) alg=(--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4) ;;
    *) echo "OMPI_ALGOS: default or ring, not '$algo'" >&2; exit 2 ;;
    esac
    # shellcheck disable=SC2046
    bgwait timeout "$TIMEOUT" "$cluster" exec "${prefix}0" -- mpirun.openmpi --host "$(hostlist "$ppn")" \
        -np $((HOSTS * ppn)) --oversubscribe --mca plm_rsh_agent "$rsh" --mca pml ob1 \
        --mca btl self,vader,tcp --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
        --mca mpi_yield_when_idle 1 "${alg[@]}" "$PEERS_WORK/bin/mpi_coll_perf_ompi" -c allreduce -b "$b" -e "$b" \
        $(peer_iters_for "$size") >> "$log" 2>&1 || note_fail "ompi ppn=$ppn size=$size failed rc=$?"
}
peer_names() { # the log names of the peers run
    [ "$NO_PEERS" = 1 ] && return 0
    [ "$gloo_ok" = 1 ] && for a in $GLOO_ALGOS; do echo "gloo_$a"; done
    [ "$ompi_ok" = 1 ] && for a in $OMPI_ALGOS; do echo "ompi_$a"; done
    return 0
}
peer_label() { # log name -> column header
    case $1 in
    gloo_ring) echo "Gloo ring" ;; gloo_ringchunked) echo "Gloo ring-chunked" ;; gloo_*) echo "Gloo ${1#gloo_}" ;;
    ompi_default) echo "Open MPI" ;; ompi_ring) echo "Open MPI ring" ;;
    esac
}

measure() {
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "# logs in $OUT; cluster $prefix: $HOSTS hosts, links $RATE; PER_HOST=\"$PER_HOST\" SIZES=\"$SIZES\" REPS=$REPS" >&2
[ -n "$peer_note" ] && echo "#$peer_note" >&2
for ((rep = 1; rep <= REPS; rep++)); do
    for ppn in $PER_HOST; do
        for size in $SIZES; do
            echo "# rep $rep/$REPS: $HOSTS hosts x $ppn ranks, $size" >&2
            for algo in ring hier plan; do run_ours "$algo" "$ppn" "$size"; done
            [ "$NO_PEERS" = 1 ] && continue
            if [ "$gloo_ok" = 1 ]; then
                for a in $GLOO_ALGOS; do run_gloo "$a" "$ppn" "$size"; done
            fi
            if [ "$ompi_ok" = 1 ]; then
                for a in $OMPI_ALGOS; do run_ompi "$a" "$ppn" "$size"; done
            fi
        done
    done
done
# what the tables print besides the logs (TABLE_ONLY=1 prints them again from here)
{
    echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "machine=$(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'))"
    echo "load=before: $load_before, after: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "peer_note=$peer_note"
} > "$OUT/meta"
}
[ "$TABLE_ONLY" = 1 ] || measure
meta() { sed -n "s/^$1=//p" "$OUT/meta" 2>/dev/null; }
[ "$TABLE_ONLY" = 1 ] && peer_note=$(meta peer_note)

# median out-of-place time (us) over the runs in log NAME.pPPN.SIZE.log ("" when none)
median_time() {
    local log="$OUT/$1.p$2.$3.log" b
    b=$(bytes_of "$3")
    [ -f "$log" ] || return 0
    awk -v s="$b" '$1 == s && $1 ~ /^[0-9]+$/ {print $6 + 0}' "$log" | sort -g |
        awk '{v[NR] = $1} END {if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'
}
nruns() { local b; b=$(bytes_of "$3"); awk -v s="$b" '$1 == s && $1 ~ /^[0-9]+$/' "$OUT/$1.p$2.$3.log" 2>/dev/null | wc -l; }
# busbw (GB/s) from a time (us): bytes / time x 2(n-1)/n, as nccl-tests computes it
busbw() { # time bytes n
    awk -v t="$1" -v b="$2" -v n="$3" 'BEGIN {if (t + 0 > 0) printf "%.4f", b / (t * 1e3) * 2 * (n - 1) / n}'
}
cell() { # busbw -> "0.117 (0.94)"
    [ -n "$1" ] || { echo "-"; return; }
    awk -v x="$1" -v l="$link_gbs" 'BEGIN {
        if (l > 0) printf "%.3f (%.2f)", x, x / l; else printf "%.3f", x }'
}
frac() { awk -v a="$1" -v b="$2" 'BEGIN {if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-"}'; }
maxof() { echo "$*" | awk 'BEGIN {m = 0} {for (i = 1; i <= NF; i++) if ($i + 0 > m) m = $i + 0} END {if (m > 0) print m}'; }
best_peer() { # ppn size -> the label of the fastest peer
    local p m=0 w="-"
    for p in $peers; do
        if awk -v x="${B["$p $1 $2"]}" -v m="$m" 'BEGIN {exit !(x + 0 > m + 0)}'; then m=${B["$p $1 $2"]}; w=$(peer_label "$p"); fi
    done
    echo "$w"
}
planner_algo() { # what the planner chose ("Algorithm by size" lines): "ring", or "hier 2/3" when
    # the runs differ (it measures the machine at init, so close calls can go either way)
    grep -h "Algorithm by size" "$OUT/plan.p$1.$2.log" 2>/dev/null | sed 's/.*(bytes): //' |
        awk '{c[$1]++; t++} END {k = 0; for (a in c) k++
            if (k == 1) for (a in c) print a
            else {s = ""; for (a in c) s = s (s == "" ? "" : ", ") a " " c[a] "/" t; print s}}'
}

peers=$(peer_names)
peers_hdr="" peers_sep=""
for p in $peers; do peers_hdr="$peers_hdr $(peer_label "$p") |"; peers_sep="$peers_sep---:|"; done
declare -A B # busbw by "name ppn size"
for ppn in $PER_HOST; do
    n=$((HOSTS * ppn))
    for size in $SIZES; do
        b=$(bytes_of "$size")
        for name in ring hier plan $peers; do
            B["$name $ppn $size"]=$(busbw "$(median_time "$name" "$ppn" "$size")" "$b" "$n")
        done
    done
done

echo "## allreduce on $HOSTS simulated hosts, links $RATE"
echo
echo "Run ending $(meta date), on $(meta machine), shared by all the simulated hosts;"
echo "load average $(meta load)."
echo "busbw in GB/s (1e9 B) from the median out-of-place time of $REPS runs (interleaved),"
echo "and in brackets busbw / the link rate ($RATE = ${link_gbs:-?} GB/s; tbf lets about 0.956 of it through as TCP goodput)."
[ -n "$peer_note" ] && { echo; echo "**Peers:**$peer_note"; }
echo
echo "| hosts x ranks | n | size | flat ring | hier | planner (its choice) |$peers_hdr"
echo "|---|---:|---:|---:|---:|---:|$peers_sep"
for ppn in $PER_HOST; do
    n=$((HOSTS * ppn))
    for size in $SIZES; do
        row="| $HOSTS x $ppn | $n | $size | $(cell "${B["ring $ppn $size"]}") | $(cell "${B["hier $ppn $size"]}")"
        row="$row | $(cell "${B["plan $ppn $size"]}") $(planner_algo "$ppn" "$size") |"
        for p in $peers; do row="$row $(cell "${B["$p $ppn $size"]}") |"; done
        echo "$row"
    done
done
echo
echo "Hierarchical allreduce against its alpha-beta bound, bound = link x (2(n-1)/n) / (2(H-1)/H) as busbw"
echo "(H = $HOSTS hosts); ours best = the best of flat ring, hier and planner; better peer = the best of the peers."
echo
echo "| hosts x ranks | size | hier bound GB/s | hier / bound | hier / flat ring | ours best / better peer (which) |"
echo "|---|---:|---:|---:|---:|---:|"
for ppn in $PER_HOST; do
    n=$((HOSTS * ppn))
    for size in $SIZES; do
        bound=$(awk -v l="$link_gbs" -v n="$n" -v H="$HOSTS" 'BEGIN {
            if (l > 0) printf "%.4f", l * (2 * (n - 1) / n) / (2 * (H - 1) / H) }')
        hier=${B["hier $ppn $size"]} ring=${B["ring $ppn $size"]}
        ours=$(maxof "$ring" "$hier" "${B["plan $ppn $size"]}")
        pr="-"
        if [ -n "$peers" ]; then
            pr=$(frac "$ours" "$(maxof "$(for p in $peers; do echo "${B["$p $ppn $size"]}"; done)")")
            pr="$pr ($(best_peer "$ppn" "$size"))"
        fi
        echo "| $HOSTS x $ppn | $size | ${bound:--} | $(frac "$hier" "$bound") | $(frac "$hier" "$ring") | $pr |"
    done
done
short=""
for ppn in $PER_HOST; do
    for size in $SIZES; do
        for name in ring hier plan $peers; do
            k=$(nruns "$name" "$ppn" "$size")
            [ "$k" -ge "$REPS" ] || short="$short $name/$ppn/$size:$k"
        done
    done
done
if [ ${#fails[@]} -gt 0 ] || [ -n "$short" ]; then
    echo
    echo "Runs that failed: ${#fails[@]}; configurations with fewer than $REPS results (name/ranks per host/size:count):${short:- none}"
    for f in "${fails[@]}"; do echo "- $f"; done
fi
