#!/usr/bin/env bash
# libcollective: set everything up on a Debian 12 machine, then
#   ./run.sh          build and run the main job (a 4-rank allreduce_perf sweep, then the
#                     data-parallel trainer example on 4 ranks)
#   ./run.sh test     build and run every test (gcc build; CI adds clang and sanitizers)
# Environment: BUILD_DIR (default build), MESON_ARGS (extra meson options).
set -euo pipefail
cd "$(dirname "$0")"
mode=${1:-main}
build=${BUILD_DIR:-build}

# Debian packages the build and the tests need.
# python3-dev, -numpy and -torch: the Python package, the torch.distributed backend and their
# tests (suite 'python'), all for Debian's /usr/bin/python3.
pkgs=(gcc clang meson ninja-build pkg-config libhwloc-dev libibverbs-dev zlib1g-dev python3
      python3-dev python3-numpy python3-torch iproute2 procps psmisc)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "run.sh: installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q >/dev/null
        apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "run.sh: missing packages; run as root:"
        echo "  apt-get update && apt-get install -y ${missing[*]}"
        exit 1
    fi
fi

if [ ! -f "$build/build.ninja" ]; then
    # shellcheck disable=SC2086
    meson setup "$build" -Dwerror=true ${MESON_ARGS:-}
fi
ninja -C "$build"

# Local runs stay on loopback.
export COLL_SOCKET_IFNAME=${COLL_SOCKET_IFNAME:-lo}

case "$mode" in
main)
    echo "== allreduce_perf, 4 ranks on this host (collrun) =="
    "$build/tools/collrun" -n 4 --timeout 600 -- "$build/perf/allreduce_perf" -b 8 -e 128M -f 4 \
        -n 20 -w 5
    echo "== dp_trainer, 4 ranks, ddp =="
    "$build/tools/collrun" -n 4 --timeout 600 -- "$build/examples/trainer/dp_trainer" --mode ddp
    echo "== dp_trainer, 4 ranks, tensor 2 x pipeline 2 (1f1b) =="
    "$build/tools/collrun" -n 4 --timeout 600 -- "$build/examples/trainer/dp_trainer" --tp 2 --pp 2
    ;;
test)
    # The trainer's test also learns the handwritten digits that Debian's python3-sklearn
    # ships.  Without that package, only its data file is taken (apt-get download and
    # dpkg-deb -x, none of its dependencies); the test skips the digits when it cannot.
    digits=usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz
    if [ ! -r "/$digits" ] && [ -z "${COLL_DIGITS_CSV:-}" ]; then
        cache=$build/digits
        if [ ! -r "$cache/$digits" ]; then
            (mkdir -p "$cache" && cd "$cache" && apt-get download -q python3-sklearn \
                >/dev/null 2>&1 && dpkg-deb -x python3-sklearn_*.deb . &&
                find . -type f ! -name digits.csv.gz -delete) ||
                echo "run.sh: the digits data could not be fetched; the trainer test skips it"
        fi
        if [ -r "$cache/$digits" ]; then
            COLL_DIGITS_CSV=$PWD/$cache/$digits
            export COLL_DIGITS_CSV
        fi
    fi
    meson test -C "$build" --print-errorlogs --num-processes 1 ${TEST_ARGS:-}
    ;;
*)
    echo "usage: ./run.sh [main|test]" >&2
    exit 2
    ;;
esac
