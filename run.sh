#!/usr/bin/env bash
# libcollective: set everything up on a Debian 12 machine, then
#   ./run.sh          build and run the main job (a 4-rank allreduce_perf sweep)
#   ./run.sh test     build and run every test (gcc build; CI adds clang and sanitizers)
# Environment: BUILD_DIR (default build), MESON_ARGS (extra meson options).
set -euo pipefail
cd "$(dirname "$0")"
mode=${1:-main}
build=${BUILD_DIR:-build}

# Debian packages the build and the tests need.
pkgs=(gcc clang meson ninja-build pkg-config libhwloc-dev libibverbs-dev python3 iproute2
      procps psmisc)
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
    ;;
test)
    meson test -C "$build" --print-errorlogs --num-processes 1 ${TEST_ARGS:-}
    ;;
*)
    echo "usage: ./run.sh [main|test]" >&2
    exit 2
    ;;
esac
