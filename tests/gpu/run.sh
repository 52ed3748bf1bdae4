#!/bin/bash
# The GPU checks, for a machine with an NVIDIA GPU.  From the repository root:
#   tests/gpu/run.sh
#       compiles tests/gpu/probe.cu and runs it (facts about the CUDA stack, and checks of
#       what the library's CUDA support relies on), then the library's gpu test suite if
#       build-gpu configures with -Dcuda=enabled and has one, then allreduce_perf -D 1
#       (device buffers) with 2 and 4 processes on the GPU, then the torch.distributed
#       backend on CUDA tensors (tests/python/test_torch_device.py) with the python3 whose
#       torch sees the GPU;
#   tests/gpu/run.sh --build-only [FILE]
#       only compiles the probe, to FILE (default tests/gpu/probe.bin), no GPU needed: for a
#       GPU machine without the CUDA toolkit, where run.sh falls back to that file.
# Results go to ${OUT:-/tmp}: gpu-probe (the binary), gpu-probe.log (everything printed
# here), gpu-testlog.txt (meson's log of the gpu suite, when it ran).
# Exit: 0 every check passed, 1 something failed, 77 no GPU here (or no probe to run).
set -u

cd "$(dirname "$0")/../.." || exit 2
out_dir=${OUT:-/tmp}
mkdir -p "$out_dir" || exit 2
log=$out_dir/gpu-probe.log
probe=$out_dir/gpu-probe
src=tests/gpu/probe.cu
prebuilt=tests/gpu/probe.bin
probe_timeout=150 # the probe's own alarm ends it at 120 s
nvcc_flags=(-O2 -gencode 'arch=compute_90,code=sm_90' -gencode 'arch=compute_90,code=compute_90'
            -Xcompiler -Wall)

find_nvcc() {
    if [ -x /usr/local/cuda/bin/nvcc ]; then
        echo /usr/local/cuda/bin/nvcc
    else
        command -v nvcc
    fi
}

# build OUTPUT: the one compile command, shown before it runs.
build() {
    echo "+ $nvcc ${nvcc_flags[*]} $src -o $1 -lcuda"
    "$nvcc" "${nvcc_flags[@]}" "$src" -o "$1" -lcuda
}

if [ "${1:-}" = --build-only ]; then
    if ! nvcc=$(find_nvcc); then
        echo "no nvcc (neither /usr/local/cuda/bin/nvcc nor on PATH): cannot build the probe"
        exit 77
    fi
    build "${2:-$prebuilt}"
    exit
fi

: >"$log"
say() { echo "$*" | tee -a "$log"; }
# logged CMD...: runs CMD with its output shown and kept in the log; returns CMD's status.
logged() {
    "$@" 2>&1 | tee -a "$log"
    return "${PIPESTATUS[0]}"
}

# ---- a GPU? ----
if ! command -v nvidia-smi >/dev/null 2>&1; then
    say "no GPU: nvidia-smi is not installed (no NVIDIA driver here)"
    exit 77
fi
gpus=$(timeout 60 nvidia-smi -L 2>&1)
rc=$?
if [ $rc -ne 0 ] || ! grep -q '^GPU [0-9]' <<<"$gpus"; then
    say "no GPU: nvidia-smi -L exited with $rc and lists none:"
    say "$gpus"
    exit 77
fi
say "$gpus"
timeout 60 nvidia-smi 2>&1 | head -n 20 | tee -a "$log"

# ---- the probe: built here if there is a toolkit, else the prebuilt one ----
if nvcc=$(find_nvcc); then
    logged "$nvcc" --version
    if ! logged build "$probe"; then
        if [ -x "$prebuilt" ]; then
            say "the probe did not compile with this toolkit; running the prebuilt $prebuilt"
            cp "$prebuilt" "$probe" || exit 1
        else
            say "the probe did not compile (above)"
            exit 1
        fi
    fi
elif [ -x "$prebuilt" ]; then
    say "no nvcc here: running the prebuilt $prebuilt"
    cp "$prebuilt" "$probe" || exit 1
else
    say "no nvcc here and no prebuilt $prebuilt (tests/gpu/run.sh --build-only makes one" \
        "on a machine with the toolkit): cannot probe"
    exit 77
fi

say "+ timeout $probe_timeout $probe"
timeout -k 5 "$probe_timeout" "$probe" 2>&1 | tee -a "$log"
status=${PIPESTATUS[0]}
case $status in
0) say "probe: every check passed" ;;
1) say "probe: some checks failed (CHECK ...: FAIL above)" ;;
77)
    # nvidia-smi sees a GPU, so this is a failure to investigate, not a skip: typically a
    # driver older than the runtime the probe was built with (see driver_version above).
    say "probe: nvidia-smi lists a GPU but CUDA finds no usable device (device_count above)"
    status=1
    ;;
124 | 137)
    say "probe: still running after $probe_timeout s; killed"
    status=1
    ;;
*)
    say "probe: ended with status $status"
    status=1
    ;;
esac

# ---- the library's own gpu suite, when it has one ----
# Prints why it skips, and returns 1 only when tests built and ran and failed (or the build
# failed).
gpu_suite() {
    local setup=() tests rc
    if ! command -v meson >/dev/null 2>&1 || ! command -v ninja >/dev/null 2>&1; then
        say "gpu suite: skipped: meson or ninja is not installed"
        return 0
    fi
    if [ -d build-gpu/meson-private ]; then
        setup=(meson setup --reconfigure build-gpu)
    else
        setup=(meson setup build-gpu)
    fi
    say "+ ${setup[*]} -Dcuda=enabled -Dpython=disabled"
    if ! logged timeout 300 "${setup[@]}" -Dcuda=enabled -Dpython=disabled; then
        say "gpu suite: skipped: build-gpu does not configure with -Dcuda=enabled (above)"
        return 0
    fi
    # --no-rebuild: listing must not build; there is nothing to build for if the list is empty.
    if ! tests=$(meson test -C build-gpu --no-rebuild --suite gpu --list 2>/dev/null) ||
        [ -z "$tests" ]; then
        say "gpu suite: skipped: the build defines no tests in the suite gpu"
        return 0
    fi
    say "gpu suite: $(wc -l <<<"$tests") tests"
    say "+ ninja -C build-gpu"
    if ! logged timeout "${GPU_BUILD_TIMEOUT:-300}" ninja -C build-gpu; then
        say "gpu suite: the build failed (above)"
        return 1
    fi
    say "+ meson test -C build-gpu --no-rebuild --suite gpu --print-errorlogs"
    logged timeout "${GPU_TEST_TIMEOUT:-300}" \
        meson test -C build-gpu --no-rebuild --suite gpu --print-errorlogs
    rc=$?
    cp build-gpu/meson-logs/testlog.txt "$out_dir/gpu-testlog.txt" 2>/dev/null
    if [ $rc -eq 0 ]; then
        say "gpu suite: passed"
    else
        say "gpu suite: failed (status $rc)"
    fi
    return $rc
}

# ---- the benchmark: allreduce on device buffers, 2 and 4 processes on the one GPU ----
# Beside the probe's device-to-device copy bandwidth (PROBE lines above), the ceiling.
gpu_bench() {
    local perf=build-gpu/perf/allreduce_perf collrun=build-gpu/tools/collrun n
    if [ ! -x "$perf" ] || [ ! -x "$collrun" ]; then
        say "benchmark: skipped: $perf or $collrun was not built"
        return 0
    fi
    for n in 2 4; do
        say "+ $collrun -n $n $perf -D 1 -b 1M -e 256M -f 4 -n 5 -w 2 -c 1"
        if ! logged timeout "${GPU_BENCH_TIMEOUT:-150}" "$collrun" -n "$n" --timeout 140 \
            "$perf" -D 1 -b 1M -e 256M -f 4 -n 5 -w 2 -c 1; then
            say "benchmark: allreduce_perf -D 1 with $n processes failed"
            return 1
        fi
    done
}

# ---- the torch.distributed backend on CUDA tensors, with the torch that is there ----
# The same calls as tests/python/test_torch_device.py makes against the stand-in driver,
# on real CUDA tensors (2 ranks on the one GPU), with the package built for that python.
gpu_torch() {
    local py
    py=$(command -v python3) || { say "torch: skipped: no python3"; return 0; }
    if ! "$py" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
        say "torch: skipped: $py has no torch that sees the GPU"
        return 0
    fi
    local setup=(meson setup build-gpu-torch)
    [ -d build-gpu-torch/meson-private ] && setup=(meson setup --reconfigure build-gpu-torch)
    say "+ ${setup[*]} -Dpython=enabled -Dpython_interpreter=$py"
    if ! logged timeout 300 "${setup[@]}" -Dpython=enabled "-Dpython_interpreter=$py"; then
        say "torch: the package did not configure for $py (above)"
        return 1
    fi
    if ! logged timeout "${GPU_BUILD_TIMEOUT:-300}" ninja -C build-gpu-torch; then
        say "torch: the build failed (above)"
        return 1
    fi
    say "+ $py tests/python/test_torch_device.py --nproc 2"
    PYTHONPATH=build-gpu-torch/python logged timeout 240 "$py" \
        tests/python/test_torch_device.py --nproc 2 --timeout 200
}

if ! gpu_suite; then
    status=1
elif ! gpu_bench; then
    status=1
elif ! gpu_torch; then
    status=1
fi
say "exit $status (log: $log)"
exit "$status"
