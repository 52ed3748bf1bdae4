#!/bin/bash
# Tests tools/collrun: the environment given to ranks, output prefixing, exit codes,
# killing the other ranks, timeouts, signals and that no process outlives collrun; binding
# to CPUs (--bind, --report-bindings); --hosts with this host, and with remote ranks
# started through two stand-in remote shells on this host (one that runs the command in
# its own process, as tools/netns-rsh does, and one that behaves as ssh does: the command
# in a session of its own, ended only through its stdin).  tests/test_collrun_hosts.sh
# runs --hosts across network namespaces.
# Usage: test_collrun.sh PATH/TO/collrun PATH/TO/collrun_child
# The ranks are tests/collrun_child, whose arguments say what each rank does, or sh.
set -eu

if [ $# -ne 2 ]; then
    echo "usage: $0 COLLRUN COLLRUN_CHILD" >&2
    exit 2
fi
COLLRUN=$1
CHILD=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
unset COLLRUN_TIMEOUT
failures=0
pidn=0

ok() { echo "ok:   $*"; }
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
now_ms() { date +%s%3N; }
dump() {
    sed 's/^/    out| /' "$TMP/out" | head -n 20
    sed 's/^/    err| /' "$TMP/err" | head -n 20
}

# run ARGS...: runs collrun with its output in $TMP/out and $TMP/err; sets rc and elapsed (ms).
run() {
    local t0
    t0=$(now_ms)
    rc=0
    "$COLLRUN" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null || rc=$?
    elapsed=$(($(now_ms) - t0))
}

# check DESCRIPTION COMMAND...: passes when the command succeeds.
check() {
    local desc=$1
    shift
    if "$@"; then
        ok "$desc"
    else
        fail "$desc"
        dump
    fi
}

expect_rc() { check "$2 (exit $rc, want $1)" test "$rc" -eq "$1"; }
expect_fast() { check "$2 (took ${elapsed} ms, want < $1)" test "$elapsed" -lt "$1"; }
has_err() { grep -qF -- "$1" "$TMP/err"; }
has_out() { grep -qxF -- "$1" "$TMP/out"; }
rc_and_out() { test "$rc" -eq "$1" && grep -q -- "$2" "$TMP/out"; }
usage_error() { test "$rc" -eq 2 && has_err "Usage:"; }
count_pids() { find "$PIDS" -type f | wc -l; }

# Each case that forks gives the ranks a fresh directory where every process it starts
# leaves a file named by its pid.
new_piddir() {
    pidn=$((pidn + 1))
    PIDS=$TMP/pids.$pidn
    mkdir "$PIDS"
}

# A pid counts as alive when it exists and is not a zombie waiting for some other reaper.
alive() {
    kill -0 "$1" 2>/dev/null || return 1
    local state
    state=$(sed 's/.*) \(.\).*/\1/' "/proc/$1/stat" 2>/dev/null) || return 1
    [ "$state" != Z ]
}

# wait_pids N: waits up to 5 s until N processes have recorded their pid.
wait_pids() {
    for _ in $(seq 100); do
        [ "$(count_pids)" -ge "$1" ] && return 0
        sleep 0.05
    done
}

# no_orphans WANT_COUNT: exactly WANT_COUNT processes were recorded and none is alive.
no_orphans() {
    local n=0 p
    for f in "$PIDS"/*; do
        [ -e "$f" ] || continue
        n=$((n + 1))
        p=${f##*/}
        if alive "$p"; then
            echo "    process $p is still alive"
            return 1
        fi
    done
    if [ "$n" -ne "$1" ]; then
        echo "    $n processes recorded, want $1"
        return 1
    fi
}

echo "# environment of each rank"
run -n 4 "$CHILD" env
expect_rc 0 "all ranks exit 0"
rank_env() {
    has_out "[$1] COLL_RANK=$1" && has_out "[$1] COLL_NRANKS=4" &&
        has_out "[$1] COLL_LOCAL_RANK=$1" && has_out "[$1] COLL_LOCAL_SIZE=4"
}
for r in 0 1 2 3; do
    check "rank $r: COLL_RANK, COLL_NRANKS, COLL_LOCAL_RANK, COLL_LOCAL_SIZE" rank_env $r
done
# "uniq -c" gives "COUNT VALUE": one distinct value, seen by all 4 ranks.
ids=$(sed -n 's/^\[[0-9]\] COLL_COMM_ID=//p' "$TMP/out" | sort | uniq -c | tr -s ' ')
check "one COLL_COMM_ID 127.0.0.1:PORT for all ranks ($ids)" \
    grep -qxE ' ?4 127\.0\.0\.1:[0-9]+' <<<"$ids"
# Outside the kernel's ephemeral ports, which another socket's connection could take
# between collrun's choice and rank 0's listen (a sweep once failed on that).
port=${ids##*:}
check "the port is one of 61000-65535 ($port)" test "$port" -ge 61000 -a "$port" -le 65535
secrets=$(sed -n 's/^\[[0-9]\] COLL_SECRET=//p' "$TMP/out" | sort | uniq -c | tr -s ' ')
check "one COLL_SECRET of 32 hex digits for all ranks" grep -qxE ' ?4 [0-9a-f]{32}' <<<"$secrets"
first_secret=$secrets
run -n 1 "$CHILD" env
secrets=$(sed -n 's/^\[[0-9]\] COLL_SECRET=//p' "$TMP/out" | sort | uniq -c)
check "a new secret for each run" test "$secrets" != "$first_secret"

echo "# output"
run -n 2 "$CHILD" out:hello err:oops partial:tail
expect_rc 0 "prefixed run"
check "stdout lines prefixed with [rank], a final partial line completed" \
    test "$(sort "$TMP/out" | tr '\n' '|')" = "[0] hello|[0] tail|[1] hello|[1] tail|"
check "stdout ends with a newline" test -z "$(tail -c 1 "$TMP/out")"
check "stderr lines prefixed and kept on stderr" \
    test "$(sort "$TMP/err" | tr '\n' '|')" = "[0] oops|[1] oops|"
run -n 2 --no-prefix -- "$CHILD" out:hello err:oops
check "--no-prefix: output unchanged" \
    test "$(tr '\n' '|' <"$TMP/out")/$(tr '\n' '|' <"$TMP/err")" = "hello|hello|/oops|oops|"
run -n 4 "$CHILD" lines:3000:200
expect_rc 0 "4 ranks x 3000 lines of 220 bytes"
bad=$(grep -cvE '^\[([0-3])\] rank \1 line [0-9]+ x{200}$' "$TMP/out" || true)
check "no line interleaved with another ($bad bad lines)" test "$bad" -eq 0
check "no line lost" test "$(wc -l <"$TMP/out")" -eq 12000

echo "# failures"
new_piddir
run -n 3 "$CHILD" @2:ignoreterm "piddir:$PIDS" wait:3 @1:exit:3 @2:sleep:0.5 @2:exit:5 \
    @0:sleep:30
expect_rc 3 "exit code of the first failing rank"
check "failure reported" has_err "collrun: rank 1 exited with code 3"
check "later exits not reported as failures" test "$(grep -c "rank 2" "$TMP/err")" -eq 0
expect_fast 2000 "sleeping rank stopped at once"
check "no orphan" no_orphans 3

new_piddir
run -n 3 "$CHILD" "piddir:$PIDS" wait:3 @1:raise:10 sleep:30
expect_rc 138 "death by SIGUSR1 gives 128+10"
check "signal death reported" has_err "collrun: rank 1 killed by signal SIGUSR1"
expect_fast 1500 "other ranks stopped at once"
check "no orphan" no_orphans 3

new_piddir
run -n 2 "$CHILD" ignoreterm "piddir:$PIDS" fork:30 wait:4 @1:exit:2 sleep:30
expect_rc 2 "ranks and grandchildren ignoring SIGTERM"
check "SIGKILL after the grace period (${elapsed} ms)" \
    test "$elapsed" -ge 1500 -a "$elapsed" -lt 5000
check "SIGKILL announced" has_err "SIGKILL"
check "no orphan" no_orphans 4

new_piddir
run -n 2 "$CHILD" "piddir:$PIDS" fork:30
expect_rc 0 "ranks succeed but leave grandchildren behind"
expect_fast 1500 "grandchildren stopped at once"
check "no orphan" no_orphans 4

echo "# timeouts"
new_piddir
run -n 2 --timeout 1 "$CHILD" "piddir:$PIDS" fork:30 sleep:30
expect_rc 124 "--timeout 1"
check "timeout reported" has_err "collrun: timeout after 1 s"
check "stopped after the timeout (${elapsed} ms)" test "$elapsed" -ge 900 -a "$elapsed" -lt 3000
check "no orphan" no_orphans 4
rc=0
COLLRUN_TIMEOUT=0.3 "$COLLRUN" -n 2 "$CHILD" sleep:30 >"$TMP/out" 2>"$TMP/err" || rc=$?
expect_rc 124 "COLLRUN_TIMEOUT=0.3"
rc=0
COLLRUN_TIMEOUT=0.3 "$COLLRUN" --timeout 0 -n 1 "$CHILD" sleep:0.6 >"$TMP/out" 2>"$TMP/err" ||
    rc=$?
expect_rc 0 "--timeout 0 overrides COLLRUN_TIMEOUT"

echo "# signals to collrun"
new_piddir
"$COLLRUN" -n 3 "$CHILD" "piddir:$PIDS" fork:30 sleep:30 >"$TMP/out" 2>"$TMP/err" &
cpid=$!
wait_pids 6
t0=$(now_ms)
kill -TERM "$cpid"
rc=0
wait "$cpid" || rc=$?
elapsed=$(($(now_ms) - t0))
expect_rc 143 "SIGTERM to collrun gives 128+15"
expect_fast 1500 "ranks stopped at once"
check "no orphan" no_orphans 6

# Without job control, bash starts background commands with SIGINT ignored; with it
# (set -m, in a subshell) collrun gets SIGINT the way a terminal would send it.  That
# fails when this script itself was started with SIGINT ignored, which collrun honours.
sigign=$(sed -n 's/^SigIgn:[[:space:]]*//p' /proc/$$/status)
if (((0x$sigign >> 1) & 1)); then
    echo "skip: SIGINT test (this shell was started with SIGINT ignored)"
else
    new_piddir
    result=$(
        set -m
        "$COLLRUN" -n 2 "$CHILD" "piddir:$PIDS" sleep:30 >"$TMP/out" 2>"$TMP/err" &
        cpid=$!
        wait_pids 2
        t0=$(now_ms)
        kill -INT "$cpid"
        rc=0
        wait "$cpid" || rc=$?
        echo "$rc $(($(now_ms) - t0))"
    ) 2>/dev/null
    rc=${result% *}
    elapsed=${result#* }
    expect_rc 130 "SIGINT to collrun, forwarded to the ranks, gives 128+2"
    expect_fast 1500 "ranks stopped at once"
    check "no orphan" no_orphans 2
fi

new_piddir
(
    "$COLLRUN" -n 2 "$CHILD" "piddir:$PIDS" sleep:30 >"$TMP/out" 2>"$TMP/err" &
    cpid=$!
    wait_pids 2
    kill -KILL "$cpid"
    wait "$cpid" || true
) 2>/dev/null # no "Killed" notice
for _ in $(seq 40); do
    no_orphans 2 >/dev/null && break
    sleep 0.05
done
check "SIGKILL to collrun: the ranks die with it" no_orphans 2

echo "# binding"
# CPU lists are compared expanded ("0-2,5" -> "0 1 2 5").
expand_cpus() {
    local part a b c out=()
    local -a parts
    IFS=, read -ra parts <<<"$1"
    for part in "${parts[@]}"; do
        a=${part%-*}
        b=${part#*-}
        for ((c = a; c <= b; c++)); do out+=("$c"); done
    done
    echo "${out[*]}"
}
allowed=$(expand_cpus "$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)")
# The allowed CPUs by core (hardware threads of one core together) and by NUMA node, as
# collrun groups them.
cores=()
seen=" "
for c in $allowed; do
    case $seen in *" $c "*) continue ;; esac
    sib=$(cat "/sys/devices/system/cpu/cpu$c/topology/thread_siblings_list" 2>/dev/null ||
        echo "$c")
    core=""
    for s in $(expand_cpus "$sib"); do
        case " $allowed " in *" $s "*) core="$core $s" && seen="$seen$s " ;; esac
    done
    case $core in *" $c"*) ;; *) core="$core $c" && seen="$seen$c " ;; esac
    cores+=("$(tr ' ' '\n' <<<"$core" | sed '/^$/d' | sort -n | tr '\n' ' ' | sed 's/ $//')")
done
ncores=${#cores[@]}
nodes=()
node_ids=()
if [ -r /sys/devices/system/node/online ]; then
    for k in $(expand_cpus "$(cat /sys/devices/system/node/online)"); do
        set=""
        for c in $(expand_cpus "$(cat "/sys/devices/system/node/node$k/cpulist" 2>/dev/null)"); do
            case " $allowed " in *" $c "*) set="$set $c" ;; esac
        done
        if [ -n "$set" ]; then
            nodes+=("${set# }")
            node_ids+=("$k")
        fi
    done
fi
if [ ${#nodes[@]} -eq 0 ]; then
    nodes=("$allowed")
    node_ids=(0)
fi
echo "  allowed CPUs: $allowed; cores: $ncores; NUMA nodes: ${#nodes[@]}"
AFFINITY=(sh -c 'grep Cpus_allowed_list /proc/self/status')
# rank_cpus PREFIX: the CPUs the rank printed under that prefix, expanded.
rank_cpus() {
    local p=${1//[/\\[}
    p=${p//]/\\]}
    expand_cpus "$(sed -n "s/^$p Cpus_allowed_list:[[:space:]]*//p" "$TMP/out")"
}
# reported R: "CPUS (HOW)" from the --report-bindings line of rank R, CPUs expanded.
reported() {
    local line
    line=$(grep -E "collrun: rank $1 on [^ ]+: cpus " "$TMP/err" | sed 's/.*: cpus //')
    echo "$(expand_cpus "${line%% *}") ${line#* }"
}
# bound_as PREFIX RANK WANT_CPUS HOW: the rank runs on WANT_CPUS and reports it.
bound_as() {
    local got rep
    got=$(rank_cpus "$1")
    rep=$(reported "$2")
    if [ "$got" != "$3" ] || [ "$rep" != "$3 ($4)" ]; then
        echo "    rank $2: runs on '$got', reports '$rep'; want '$3' ($4)"
        return 1
    fi
}

run -n 1 --report-bindings "${AFFINITY[@]}"
expect_rc 0 "-n 1 with the default binding"
check "default with ranks <= cores: rank 0 bound to the first core" \
    bound_as "[0]" 0 "${cores[0]}" core
run -n "$ncores" --bind core --report-bindings "${AFFINITY[@]}"
for ((r = 0; r < ncores; r++)); do
    check "--bind core -n $ncores: rank $r on core $r" bound_as "[$r]" "$r" "${cores[$r]}" core
done
n=$((ncores + 1))
run -n "$n" --report-bindings "${AFFINITY[@]}"
for ((r = 0; r < n; r++)); do
    check "default with more ranks than cores: rank $r not bound" bound_as "[$r]" "$r" "$allowed" \
        "not bound"
done
run -n "$n" --bind core "${AFFINITY[@]}"
check "--bind core -n $n: rank $n wraps around to core 0" \
    test "$(rank_cpus "[$ncores]")" = "${cores[0]}"
check "no report without --report-bindings" test "$(grep -c 'cpus' "$TMP/err")" -eq 0
run -n 1 --bind none --report-bindings "${AFFINITY[@]}"
check "--bind none" bound_as "[0]" 0 "$allowed" "not bound"
run -n 2 --bind numa --report-bindings "${AFFINITY[@]}"
for r in 0 1; do
    k=$((r % ${#nodes[@]}))
    check "--bind numa: rank $r on node ${node_ids[$k]}" bound_as "[$r]" "$r" "${nodes[$k]}" \
        "numa node ${node_ids[$k]}"
done
last=${allowed##* }
if command -v taskset >/dev/null && [ "$ncores" -ge 2 ]; then
    rc=0
    taskset -c "$last" "$COLLRUN" -n 2 --bind core --report-bindings "${AFFINITY[@]}" \
        >"$TMP/out" 2>"$TMP/err" </dev/null || rc=$?
    expect_rc 0 "launcher bound to CPU $last by taskset"
    for r in 0 1; do
        check "bound launcher: rank $r bound within its CPU $last" bound_as "[$r]" "$r" "$last" core
    done
else
    echo "skip: bound launcher (no taskset, or one core)"
fi

echo "# --hosts on this host"
two_out() { has_out "$1" && has_out "$2"; }
run --hosts localhost:2 --rsh "$TMP/nonexistent" "$CHILD" env
expect_rc 0 "--hosts localhost:2 runs here, without the remote shell"
check "prefix [rank host]" has_out "[1 localhost] COLL_RANK=1"
check "local rank and size" has_out "[1 localhost] COLL_LOCAL_RANK=1"
check "COLL_COMM_ID on 127.0.0.1" grep -qE '^\[0 localhost\] COLL_COMM_ID=127\.0\.0\.1:[0-9]+$' \
    "$TMP/out"
me=$(uname -n)
run --hosts "localhost,$me" "$CHILD" env
check "localhost and $me are one host" \
    two_out "[1 $me] COLL_LOCAL_RANK=1" "[1 $me] COLL_LOCAL_SIZE=2"
run -n 1 --port 23456 "$CHILD" env
check "--port" has_out "[0] COLL_COMM_ID=127.0.0.1:23456"

echo "# remote ranks through stand-in remote shells"
# fakersh HOST COMMAND runs COMMAND here, in its own process (as tools/netns-rsh does in
# a network namespace), and logs HOST.  fakessh HOST COMMAND does what ssh does: the
# command runs in a session of its own, whose stdin closes when the client ends, and the
# client exits with the command's status.
cat >"$TMP/fakersh" <<EOF
#!/bin/sh
echo "\$1" >>"$TMP/rsh.log"
exec sh -c "\$2"
EOF
cat >"$TMP/fakessh" <<EOF
#!/bin/sh
fifo=$TMP/fifo.\$\$
mkfifo "\$fifo" || exit 255
setsid sh -c "\$2" <"\$fifo" &
exec 4>"\$fifo"
rm -f "\$fifo"
wait \$!
EOF
chmod +x "$TMP/fakersh" "$TMP/fakessh"
RSH=(--rsh "$TMP/fakersh")

rc=0
COLL_TEST_EXTRA="a 'b' \$c *" "$COLLRUN" --hosts localhost:1,fakeA:2,fakeB "${RSH[@]}" \
    "$CHILD" env >"$TMP/out" 2>"$TMP/err" </dev/null || rc=$?
expect_rc 0 "localhost:1,fakeA:2,fakeB"
rank_env_h() { # RANK HOST LOCAL_RANK LOCAL_SIZE [NRANKS, default 4]
    has_out "[$1 $2] COLL_RANK=$1" && has_out "[$1 $2] COLL_NRANKS=${5:-4}" &&
        has_out "[$1 $2] COLL_LOCAL_RANK=$3" && has_out "[$1 $2] COLL_LOCAL_SIZE=$4"
}
check "rank 0 on localhost" rank_env_h 0 localhost 0 1
check "rank 1 on fakeA" rank_env_h 1 fakeA 0 2
check "rank 2 on fakeA" rank_env_h 2 fakeA 1 2
check "rank 3 on fakeB" rank_env_h 3 fakeB 0 1
ids=$(sed -n 's/^\[[0-9] [a-zA-Z]*\] COLL_COMM_ID=//p' "$TMP/out" | sort | uniq -c | tr -s ' ')
port=${ids##*:}
check "one COLL_COMM_ID, this host's name and a port of 61000-65535 ($ids)" \
    test "${ids% *}" = " 4" -a "${ids#* 4 }" = "$me:$port" -a "$port" -ge 61000 -a "$port" -le 65535
secrets=$(sed -n 's/^\[[0-9] [a-zA-Z]*\] COLL_SECRET=//p' "$TMP/out" | sort | uniq -c | tr -s ' ')
check "one COLL_SECRET for all" grep -qxE ' ?4 [0-9a-f]{32}' <<<"$secrets"
check "other COLL_* variables reach remote ranks unchanged" \
    has_out "[3 fakeB] COLL_TEST_EXTRA=a 'b' \$c *"
check "the remote shell called once per remote rank" \
    test "$(sort "$TMP/rsh.log" | tr '\n' ' ')" = "fakeA fakeA fakeB "

run --hosts fakeA:2,fakeB:2 --map rr "${RSH[@]}" "$CHILD" env
rr_ok() {
    rank_env_h 0 fakeA 0 2 && rank_env_h 2 fakeA 1 2 && rank_env_h 1 fakeB 0 2 &&
        rank_env_h 3 fakeB 1 2
}
check "--map rr: 0 and 2 on fakeA, 1 and 3 on fakeB" rr_ok
check "COLL_COMM_ID names the first host" grep -qE '^\[3 fakeB\] COLL_COMM_ID=fakeA:[0-9]+$' \
    "$TMP/out"
run -n 3 --hosts fakeA:2,fakeB:2 --port 23456 "${RSH[@]}" "$CHILD" env
check "-n 3 of 4 slots, block: rank 2 alone on fakeB" rank_env_h 2 fakeB 0 1 3
check "--port" has_out "[2 fakeB] COLL_COMM_ID=fakeA:23456"
rc=0
COLL_COMM_ID=root.example:4242 "$COLLRUN" --hosts fakeA,fakeB "${RSH[@]}" "$CHILD" env \
    >"$TMP/out" 2>"$TMP/err" </dev/null || rc=$?
check "COLL_COMM_ID given to collrun is used" has_out "[1 fakeB] COLL_COMM_ID=root.example:4242"

# shellcheck disable=SC2016 # the $x is an argument, not expanded
run --hosts fakeA "${RSH[@]}" sh -c 'pwd -P; printf "<%s>\n" "$@"' sh "it's" '"q" $x \ *' ''
expect_rc 0 "a shell as the remote rank"
check "remote rank starts in this directory" has_out "[0 fakeA] $(pwd -P)"
check "arguments arrive unchanged" \
    test "$(sed -n 's/^\[0 fakeA\] <//p' "$TMP/out" | tr '\n' '|')" = "it's>|\"q\" \$x \\ *>|>|"

new_piddir
run --hosts localhost:1,fakeA:2 "${RSH[@]}" "$CHILD" "piddir:$PIDS" wait:3 @2:exit:3 sleep:30
expect_rc 3 "a remote rank's exit code"
check "failure reported" has_err "collrun: rank 2 exited with code 3"
expect_fast 2000 "all ranks stopped at once"
check "no orphan" no_orphans 3

new_piddir
run --hosts fakeA:3 "${RSH[@]}" "$CHILD" "piddir:$PIDS" wait:3 @1:raise:10 sleep:30
expect_rc 138 "a remote rank's death by SIGUSR1"
check "signal death reported" has_err "collrun: rank 1 killed by signal SIGUSR1"
check "no orphan" no_orphans 3

new_piddir
run --hosts fakeA:2 "${RSH[@]}" "$CHILD" @1:ignoreterm "piddir:$PIDS" fork:30 wait:4 @0:exit:2 \
    sleep:30
expect_rc 2 "a remote rank and its child ignoring SIGTERM"
check "SIGKILL from the helper after its grace period (${elapsed} ms)" \
    test "$elapsed" -ge 1200 -a "$elapsed" -lt 4000
check "no orphan" no_orphans 4

run --hosts fakeA "${RSH[@]}" "$TMP/nonexistent"
expect_rc 127 "a missing program on the remote host"
check "missing program reported" has_err "collrun: cannot execute $TMP/nonexistent"
run --hosts fakeA --rsh "$TMP/nonexistent" "$CHILD"
expect_rc 127 "a missing remote shell"
check "missing remote shell reported" \
    test "$(cat "$TMP/err")" = "collrun: cannot execute $TMP/nonexistent: No such file or directory"

run --hosts fakeA:1 --bind core --report-bindings "${RSH[@]}" "${AFFINITY[@]}"
check "--report-bindings on a remote host: the helper binds and reports" \
    bound_as "[0 fakeA]" 0 "${cores[0]}" core

new_piddir
"$COLLRUN" --hosts fakeA:2,fakeB "${RSH[@]}" "$CHILD" "piddir:$PIDS" fork:30 sleep:30 \
    >"$TMP/out" 2>"$TMP/err" </dev/null &
cpid=$!
wait_pids 6
t0=$(now_ms)
kill -TERM "$cpid"
rc=0
wait "$cpid" || rc=$?
elapsed=$(($(now_ms) - t0))
expect_rc 143 "SIGTERM to collrun with remote ranks"
expect_fast 1500 "remote ranks stopped at once"
check "no orphan" no_orphans 6

# wait_orphans N MS: no_orphans N within MS milliseconds.
wait_orphans() {
    local t0
    t0=$(now_ms)
    until no_orphans "$1" >/dev/null; do
        [ $(($(now_ms) - t0)) -lt "$2" ] || { no_orphans "$1"; return 1; }
        sleep 0.05
    done
}
new_piddir
(
    "$COLLRUN" --hosts fakeA:2 "${RSH[@]}" "$CHILD" "piddir:$PIDS" fork:30 sleep:30 \
        >"$TMP/out" 2>"$TMP/err" </dev/null &
    cpid=$!
    wait_pids 4
    kill -KILL "$cpid"
    wait "$cpid" || true
) 2>/dev/null
check "SIGKILL to collrun: the helpers stop their ranks when the lifeline closes" \
    wait_orphans 4 3000

if command -v setsid >/dev/null && command -v mkfifo >/dev/null; then
    SSH=(--rsh "$TMP/fakessh")
    run --hosts fakeA:2 "${SSH[@]}" "$CHILD" out:hello
    expect_rc 0 "ssh-like remote shell"
    check "output of both ranks" two_out "[0 fakeA] hello" "[1 fakeA] hello"

    new_piddir
    run --hosts fakeA:2,fakeB "${SSH[@]}" "$CHILD" "piddir:$PIDS" fork:30 wait:6 @2:exit:3 \
        sleep:30
    expect_rc 3 "ssh-like: a remote rank's exit code"
    expect_fast 2000 "ssh-like: collrun ends at once"
    check "ssh-like: the other ranks end when their client does" wait_orphans 6 3000

    new_piddir
    "$COLLRUN" --hosts fakeA:2 "${SSH[@]}" "$CHILD" "piddir:$PIDS" sleep:30 \
        >"$TMP/out" 2>"$TMP/err" </dev/null &
    cpid=$!
    wait_pids 2
    kill -TERM "$cpid"
    rc=0
    wait "$cpid" || rc=$?
    expect_rc 143 "ssh-like: SIGTERM to collrun"
    check "ssh-like: remote ranks end" wait_orphans 2 3000

    new_piddir
    (
        "$COLLRUN" --hosts fakeA:2 "${SSH[@]}" "$CHILD" "piddir:$PIDS" sleep:30 \
            >"$TMP/out" 2>"$TMP/err" </dev/null &
        cpid=$!
        wait_pids 2
        kill -KILL "$cpid"
        wait "$cpid" || true
    ) 2>/dev/null
    check "ssh-like: SIGKILL to collrun, remote ranks end" wait_orphans 2 3000
else
    echo "skip: ssh-like remote shell (no setsid or mkfifo)"
fi

echo "# arguments"
for args in "-n 0 $CHILD" "-n abc $CHILD" "-n 2" "--bogus -n 2 $CHILD" "$CHILD" \
    "-n 2 --timeout -1 $CHILD" "-n 2 --timeout" "-n" "--hosts" "--hosts a:0 $CHILD" \
    "--hosts a:x $CHILD" "--hosts -a $CHILD" "--hosts a,,b $CHILD" "--hosts a:2 -n 3 $CHILD" \
    "--hosts a;b $CHILD" "--hosts [::1 $CHILD" "--map rr -n 2 $CHILD" "--rsh rsh -n 2 $CHILD" \
    "--hosts a --map zz $CHILD" "-n 2 --bind bogus $CHILD" "-n 2 --port 0 $CHILD" \
    "-n 2 --port 70000 $CHILD" "--hosts a"; do
    # shellcheck disable=SC2086 # the arguments are meant to be split
    run $args
    check "collrun $args: usage error" usage_error
done
run -n 0 "$CHILD"
check "-n 0 named" has_err "invalid number of ranks '0'"
run -n 2 --bogus "$CHILD"
check "unknown option named" has_err "unknown option '--bogus'"
run -n 2
check "missing program named" has_err "missing the program"
run --hosts a:2 -n 3 "$CHILD"
check "-n beyond the slots named" has_err "-n 3 is more than the 2 slots of --hosts"
run --hosts a:0 "$CHILD"
check "bad slot count named" has_err "invalid number of ranks '0' for host 'a'"
rc=0
COLLRUN_TIMEOUT=soon "$COLLRUN" -n 1 "$CHILD" >"$TMP/out" 2>"$TMP/err" || rc=$?
expect_rc 2 "invalid COLLRUN_TIMEOUT"
run -n 2 "$TMP/nonexistent"
expect_rc 127 "missing program"
check "missing program reported once" \
    test "$(cat "$TMP/err")" = "collrun: cannot execute $TMP/nonexistent: No such file or directory"
touch "$TMP/plain"
run -n 2 "$TMP/plain"
expect_rc 127 "program not executable"
check "permission problem reported" has_err "Permission denied"
run --help
check "--help" rc_and_out 0 "^Usage: collrun"
run --version
check "--version" rc_and_out 0 "^collrun"
run --env
check "--env lists COLL_TIMEOUT_MS" rc_and_out 0 "COLL_TIMEOUT_MS"

if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "all checks passed"
