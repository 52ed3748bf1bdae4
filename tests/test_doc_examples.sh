#!/bin/bash
# Runs the code of docs/porting.md as a reader would: every ```c block is compiled
# against include/collective.h and the built library and run on 2 ranks under
# collrun; every ```python block that imports collective.torch runs on 2 ranks
# under torchrun (skipped without torch); every ```sh line of porting.md and of the
# README that starts build/tools/collrun or torchrun is checked to name options that
# exist (collrun --help, torchrun --help).  Exits 77 (skip) only when nothing could run.
# Usage: test_doc_examples.sh SOURCE_ROOT BUILD_ROOT
set -u
SRC=$1
BUILD=$2
DOC=$SRC/docs/porting.md
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
# shellcheck source=tests/sanitizer_flags.sh
. "$SRC/tests/sanitizer_flags.sh"
ran=0
ok() { echo "ok:   $*"; ran=$((ran + 1)); }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# blocks LANG [DOC]: writes each ```LANG block of DOC (porting.md) to $TMP/LANG.N,
# prints N.
blocks() {
    awk -v lang="$1" -v dir="$TMP" '
        $0 == "```" lang { n++; f = dir "/" lang "." n; inb = 1; next }
        inb && $0 == "```" { inb = 0; close(f); next }
        inb { print > f }
        END { print n + 0 }' "${2:-$DOC}"
}

nc=$(blocks c)
for k in $(seq 1 "$nc"); do
    f=$TMP/c.$k
    # shellcheck disable=SC2086
    if ! cc $SANFLAGS -std=c11 -Wall -Werror -x c "$f" -I"$SRC/include" -L"$BUILD/lib" -lcollective \
            -Wl,-rpath,"$BUILD/lib" -o "$TMP/c$k" 2>"$TMP/cc.err"; then
        fail "porting.md C block $k does not compile"
        sed 's/^/    | /' "$TMP/cc.err" | head -n 10
        continue
    fi
    if "$BUILD/tools/collrun" -n 2 --timeout 60 "$TMP/c$k" >"$TMP/out" 2>&1; then
        ok "porting.md C block $k: compiled and ran on 2 ranks"
    else
        fail "porting.md C block $k: exit $? on 2 ranks"
        sed 's/^/    | /' "$TMP/out" | head -n 10
    fi
done

np=$(blocks python)
for k in $(seq 1 "$np"); do
    f=$TMP/python.$k
    grep -q 'collective.torch' "$f" || continue
    if [ -n "$SANFLAGS" ] || ! /usr/bin/python3 -c 'import torch' 2>/dev/null ||
            ! command -v torchrun >/dev/null; then
        echo "skip: porting.md Python block $k (no torch or torchrun, or a sanitizer build)"
        continue
    fi
    cp "$f" "$TMP/prog$k.py"
    port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    if (cd "$TMP" && unset COLL_COMM_ID && PYTHONPATH=$BUILD/python timeout 120 torchrun \
            --nproc_per_node 2 -r 1 -t 1 --master_port "$port" "prog$k.py") >"$TMP/out" 2>&1; then
        ok "porting.md Python block $k: ran on 2 ranks under torchrun"
    else
        fail "porting.md Python block $k under torchrun"
        grep -v '^\*\*\*\|OMP_NUM_THREADS' "$TMP/out" | sed 's/^/    | /' | tail -n 10
    fi
done

# The launcher lines: every option they pass exists.
collrun_help=$("$BUILD/tools/collrun" --help 2>&1)
torchrun_help=$(torchrun --help 2>&1 || true)
for doc in "$DOC" "$SRC/README.md"; do
name=$(basename "$doc")
nsh=$(blocks sh "$doc")
for k in $(seq 1 "$nsh"); do
    while read -r line; do
        prog=${line%% *}
        # the launcher's own words: up to the program (the first word with a / or a .)
        own=$(echo "${line%%#*}" | awk '{ for (i = 2; i <= NF && $i !~ /[\/.]/; i++) print $i }')
        for opt in $(echo "$own" | grep -E '^--?[a-z_-]+' | sed 's/=.*//'); do
            case $prog in
            build/tools/collrun)
                grep -q -- "$opt" <<<"$collrun_help" ||
                    fail "$name: collrun has no option $opt ($line)" ;;
            torchrun)
                [ -z "$torchrun_help" ] && continue
                grep -q -- "$opt" <<<"$torchrun_help" ||
                    fail "$name: torchrun has no option $opt ($line)" ;;
            esac
        done
        case $prog in build/tools/collrun | torchrun) ok "$name: $prog options of '$line'" ;; esac
    done < <(grep -E '^(build/tools/collrun|torchrun) ' "$TMP/sh.$k")
done
done

echo "doc examples: $ran checked, $failures failures"
[ "$failures" -eq 0 ] || exit 1
[ "$ran" -gt 0 ] || exit 77
