#!/bin/bash
# shellcheck disable=SC2016 # checks and the ranks' commands expand later, in eval or sh
# Tests collrun's spellings of other launchers (docs/collrun.md, "Coming from mpirun"):
# mpirun's -np, --np, -H and --host; -x VAR[=VALUE] on ranks of this host and on remote
# ranks (through a stand-in remote shell on this host that starts the command with an
# empty environment, as a remote login would not have collrun's); other launchers'
# options refused with collrun's counterpart; and the perf tools under nccl-tests' names
# in the build directory (each runs, all_reduce_perf under collrun).  About 2 s.
# Usage: test_collrun_spellings.sh PATH/TO/collrun PATH/TO/collrun_child PATH/TO/all_reduce_perf
set -eu

if [ $# -ne 3 ]; then
    echo "usage: $0 COLLRUN COLLRUN_CHILD ALL_REDUCE_PERF" >&2
    exit 2
fi
COLLRUN=$1
CHILD=$2
PERF_DIR=$(dirname "$3")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
unset COLLRUN_TIMEOUT FOO BAR QUOTED
failures=0

ok() { echo "ok:   $*"; }
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
dump() {
    sed 's/^/    out| /' "$TMP/out" | head -n 20
    sed 's/^/    err| /' "$TMP/err" | head -n 20
}
# run ARGS...: runs collrun with its output in $TMP/out and $TMP/err; sets rc.
run() {
    rc=0
    "$COLLRUN" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null || rc=$?
}
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
has_err() { grep -qF -- "$1" "$TMP/err"; }
has_out() { grep -qxF -- "$1" "$TMP/out"; }
lines() { test "$(wc -l <"$TMP/out")" -eq "$1"; }
# usage_named TEXT...: exit 2, the usage, and every TEXT in the message.
usage_named() {
    test "$rc" -eq 2 && has_err "Usage:" || return 1
    for t in "$@"; do
        has_err "$t" || return 1
    done
}
# Prints FOO, BAR and QUOTED as each rank sees them ("-" when unset).
SHOW=(sh -c 'printf "FOO=%s BAR=%s QUOTED=%s\n" "${FOO--}" "${BAR--}" "${QUOTED--}"')

echo "# -np, --np"
for np in "-np 2" "--np 2" "--np=2" "-n 2" "-n2"; do
    # shellcheck disable=SC2086 # the option and its value are meant to be split
    run $np "$CHILD" env
    check "$np: two ranks" eval 'test $rc -eq 0 && has_out "[0] COLL_NRANKS=2" &&
        has_out "[1] COLL_RANK=1" && ! grep -q "^\[2\]" "$TMP/out"'
done
run -np
check "-np without a number" usage_named "option -np needs a number of ranks"
run -np 0 "$CHILD"
check "-np 0" usage_named "invalid number of ranks '0'"

echo "# -H, --host"
run -H localhost:2 "$CHILD" env
check "-H localhost:2: two ranks here" eval 'test $rc -eq 0 &&
    has_out "[1 localhost] COLL_NRANKS=2" && has_out "[1 localhost] COLL_LOCAL_SIZE=2"'
run --host localhost,localhost "$CHILD" env
check "--host localhost,localhost: one slot each, one host" eval 'test $rc -eq 0 &&
    has_out "[1 localhost] COLL_NRANKS=2" && has_out "[1 localhost] COLL_LOCAL_RANK=1" &&
    has_out "[0 localhost] COLL_LOCAL_SIZE=2"'
run -np 1 --host=localhost:2 "$CHILD" env
check "-np 1 --host=localhost:2: one rank" eval 'test $rc -eq 0 &&
    has_out "[0 localhost] COLL_NRANKS=1"'
run -np 3 -H localhost,localhost "$CHILD" env
check "-np 3 beyond -H's 2 slots" usage_named "-n 3 is more than the 2 slots"
run -H "$CHILD"
check "-H without hosts" usage_named "invalid host"

echo "# -x on this host"
run -n 3 -x FOO=bar "${SHOW[@]}"
check "-x FOO=bar reaches every rank" eval 'test $rc -eq 0 && lines 3 &&
    has_out "[0] FOO=bar BAR=- QUOTED=-" && has_out "[1] FOO=bar BAR=- QUOTED=-" &&
    has_out "[2] FOO=bar BAR=- QUOTED=-"'
rc=0
FOO=here BAR=old "$COLLRUN" -n 2 -x FOO -x BAR=new -x "QUOTED=a 'b' \$c" "${SHOW[@]}" \
    >"$TMP/out" 2>"$TMP/err" </dev/null || rc=$?
check "-x FOO (exported), -x BAR=new over BAR=old, quotes" eval 'test $rc -eq 0 &&
    has_out "[0] FOO=here BAR=new QUOTED=a '"'b'"' \$c" &&
    has_out "[1] FOO=here BAR=new QUOTED=a '"'b'"' \$c" && ! test -s "$TMP/err"'
run -n 1 -x FOO "${SHOW[@]}"
check "-x FOO (not set): a note, no value" eval 'test $rc -eq 0 &&
    has_out "[0] FOO=- BAR=- QUOTED=-" && has_err "-x FOO: FOO is not set here"'
run -n 1 -x FOO=bar "$CHILD" env
check "-x does not change what collrun sets" eval 'test $rc -eq 0 && has_out "[0] COLL_RANK=0"'
for bad in "COLL_RANK=3" "COLL_COMM_ID" "1FOO=x" "=x" "FO-O=x"; do
    run -n 1 -x "$bad" "$CHILD"
    check "-x $bad refused" usage_named "$bad"
done
run -n 1 -x
check "-x without a variable" usage_named "option -x needs a variable"

echo "# -x on remote ranks"
# fakersh HOST COMMAND runs COMMAND here with an environment of PATH alone.
cat >"$TMP/fakersh" <<'EOF'
#!/bin/sh
exec env -i PATH="$PATH" sh -c "$2"
EOF
chmod +x "$TMP/fakersh"
rc=0
FOO=here COLL_TEST_EXTRA=x "$COLLRUN" --hosts localhost,fakeA:2 --rsh "$TMP/fakersh" \
    "${SHOW[@]}" >"$TMP/out" 2>"$TMP/err" </dev/null || rc=$?
check "without -x, remote ranks do not get FOO (the stand-in is a fair test)" eval \
    'test $rc -eq 0 && has_out "[0 localhost] FOO=here BAR=- QUOTED=-" &&
    has_out "[2 fakeA] FOO=- BAR=- QUOTED=-"'
rc=0
FOO=here BAR=old "$COLLRUN" -H localhost,fakeA:2 --rsh "$TMP/fakersh" -x FOO -x BAR=new \
    -x "QUOTED=a 'b' \$c" "${SHOW[@]}" >"$TMP/out" 2>"$TMP/err" </dev/null || rc=$?
check "-x FOO, -x BAR=new, quotes: on every rank, remote ones included" eval 'test $rc -eq 0 &&
    has_out "[0 localhost] FOO=here BAR=new QUOTED=a '"'b'"' \$c" &&
    has_out "[1 fakeA] FOO=here BAR=new QUOTED=a '"'b'"' \$c" &&
    has_out "[2 fakeA] FOO=here BAR=new QUOTED=a '"'b'"' \$c"'
rc=0
COLL_DEBUG=WARN "$COLLRUN" -H fakeA --rsh "$TMP/fakersh" -x COLL_DEBUG=INFO sh -c \
    'echo "COLL_DEBUG=$COLL_DEBUG"' >"$TMP/out" 2>"$TMP/err" </dev/null || rc=$?
check "-x COLL_DEBUG=INFO wins over collrun's COLL_DEBUG on a remote rank" eval \
    'test $rc -eq 0 && has_out "[0 fakeA] COLL_DEBUG=INFO"'

echo "# other launchers' options"
# OPTION|TEXT: the message names OPTION and says TEXT.
while IFS='|' read -r opt text; do
    # shellcheck disable=SC2086 # an option with its value is meant to be split
    run $opt -n 2 "$CHILD"
    check "$opt refused: $text" usage_named "unknown option '${opt%% *}'" "$text"
done <<'EOF'
--oversubscribe|(mpirun's): collrun needs none
-oversubscribe|(mpirun's): collrun needs none
--bind-to core|collrun's is --bind none|core|numa
--map-by node|collrun's is --map block|rr
-N 2|--hosts host:N
--nproc_per_node=2|(torchrun's): collrun's is -n N
--nproc-per-node 2|(torchrun's): collrun's is -n N
--hostfile hosts|collrun has no host file
--ntasks-per-node=2|(srun's)
-npernode 2|(mpirun's)
EOF
run --bogus -n 2 "$CHILD"
check "--bogus refused, with a pointer to --help" \
    usage_named "collrun: unknown option '--bogus'" "Try 'collrun --help'"
run -nabc "$CHILD"
check "-nabc refused" usage_named "unknown option '-nabc'"
run --help
check "--help names -np, -H and -x" eval 'test $rc -eq 0 && grep -q -- "-n N, -np N" "$TMP/out" &&
    grep -q -- "-H LIST" "$TMP/out" && grep -q -- "-x VAR\[=VAL\]" "$TMP/out"'

echo "# the perf tools under nccl-tests' names"
for name in all_reduce_perf all_gather_perf broadcast_perf reduce_perf reduce_scatter_perf \
    alltoall_perf sendrecv_perf gather_perf scatter_perf; do
    rc=0
    "$PERF_DIR/$name" --help >"$TMP/out" 2>"$TMP/err" </dev/null || rc=$?
    check "$name --help" eval 'test $rc -eq 0 && grep -q "^Usage: $name " "$TMP/out"'
done
run -n 2 --timeout 60 "$PERF_DIR/all_reduce_perf" -b 8 -e 8 -n 2 -w 1
check "collrun -n 2 all_reduce_perf -b 8 -e 8 -n 2 -w 1" eval 'test $rc -eq 0 &&
    has_out "[0] # Out of bounds values : 0 OK"'

if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "all checks passed"
