#!/usr/bin/env bash
# libcollective: set everything up on a Debian 12 machine, then
#   ./run.sh          build and run the main job (a 4-rank allreduce_perf sweep, the C
#                     trainer example on 4 ranks, then PyTorch's FSDP2 and a 2-D grid on
#                     the torch.distributed backend)
#   ./run.sh test     build and run the tests (gcc build; CI adds clang, sanitizers and the
#                     slower suites verbs and torch-more; ./run.sh test all runs those too)
# Environment: BUILD_DIR (default build), MESON_ARGS (extra meson options).
set -euo pipefail
cd "$(dirname "$0")"
mode=${1:-main}
build=${BUILD_DIR:-build}

# Debian packages the build and the tests need.
# python3-dev and -numpy: the Python package and its tests, for Debian's /usr/bin/python3;
# python3-torch, where apt has it (1.13 on Debian 12): Debian's PyTorch, one of the torch
# versions the backend is tested on.
pkgs=(gcc clang meson ninja-build pkg-config libhwloc-dev libibverbs-dev zlib1g-dev python3
      python3-dev python3-numpy python3-venv iproute2 procps psmisc)
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=()
for p in "${pkgs[@]}"; do
    installed "$p" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ] || ! installed python3-torch; then
    if [ "$(id -u)" = 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q >/dev/null
    fi
    if ! installed python3-torch && apt-cache show python3-torch >/dev/null 2>&1; then
        missing+=(python3-torch)
    fi
fi
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "run.sh: installing ${missing[*]}"
        apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "run.sh: missing packages; run as root:"
        echo "  apt-get update && apt-get install -y ${missing[*]}"
        exit 1
    fi
fi

# PyTorch 2.x from pip, each version in a virtual environment of its own under
# $build/venv/torch-X.Y (made once; never the system's site-packages), for the torch
# backend's tests (and the main job's PyTorch example).  The wheels are for CPython 3.11:
# the venvs are made from the first python3.11 or python3 on PATH that is 3.11.
# TORCH_VERSIONS picks the versions (default: the supported ones); an empty value skips
# them.  A version that cannot be installed is skipped, saying why; its tests then skip.
torch_versions=${TORCH_VERSIONS-2.13.0 2.14.1}
torch_venv() {
    local version=$1 venv=$build/venv/torch-${1%.*} py
    if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import sys, numpy, torch
sys.exit(not torch.__version__.startswith('$version'))" 2>/dev/null; then
        return 0
    fi
    for py in python3.11 python3; do
        if command -v "$py" >/dev/null &&
                "$py" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
            break
        fi
        py=
    done
    if [ -z "$py" ]; then
        echo "run.sh: torch $version skipped: no CPython 3.11 on PATH (its wheels are for 3.11)"
        return 1
    fi
    echo "run.sh: torch $version into $venv (pip, once)"
    rm -rf "$venv"
    mkdir -p "$build/venv"
    if ! "$py" -m venv "$venv" ||
            ! "$venv/bin/pip" install -q --disable-pip-version-check "torch==$version" numpy \
                >"$build/venv/torch-${version%.*}.log" 2>&1; then
        echo "run.sh: torch $version skipped: pip could not install it" \
             "($build/venv/torch-${version%.*}.log says why)"
        rm -rf "$venv"
        return 1
    fi
}

if [ ! -f "$build/build.ninja" ]; then
    # shellcheck disable=SC2086
    meson setup "$build" -Dwerror=true ${MESON_ARGS:-}
fi
ninja -C "$build"
for v in $torch_versions; do
    torch_venv "$v" || true
done

# A free TCP port on loopback, as PY's socket module finds one.
free_port() {
    "$1" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

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
    # The same three kinds of parallelism with PyTorch's own, on the torch.distributed
    # backend (examples/torch): FSDP2, then a 2-D grid (tensor 2 x FSDP2 2), torch 2.13.
    py=$build/venv/torch-2.13/bin/python
    if [ -x "$py" ]; then
        for m in fsdp 2d; do
            echo "== examples/torch/train.py, 4 ranks, --mode $m (torch 2.13, torchrun) =="
            PYTHONPATH=$PWD/$build/python OMP_NUM_THREADS=1 "$py" -m torch.distributed.run \
                --nproc-per-node 4 --master-addr 127.0.0.1 --master-port "$(free_port "$py")" \
                examples/torch/train.py --mode "$m"
        done
    else
        echo "== examples/torch skipped: no torch 2.13 venv (above: why) =="
    fi
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
    # Two slower groups are left to .ci/run, which runs them after this: the verbs
    # transport in a Soft-RoCE VM (suite verbs, about 8 minutes under emulation), and
    # the torch checks beyond the default run's (suite torch-more: the other rank counts
    # and torch versions, PyTorch's own suite).  `./run.sh test all` runs them too.
    skip=(--no-suite verbs --no-suite torch-more)
    if [ "${2:-}" = all ]; then
        skip=()
    fi
    # shellcheck disable=SC2086
    meson test -C "$build" --print-errorlogs --num-processes 1 "${skip[@]}" ${TEST_ARGS:-}
    ;;
*)
    echo "usage: ./run.sh [main|test [all]]" >&2
    exit 2
    ;;
esac
