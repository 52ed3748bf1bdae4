#!/bin/bash
# Installing as Python users do (docs/python.md, "Install and import"): from a copy of
# the source tree, so that nothing is written into it,
#   1. `pip install .` into a fresh virtual environment of PYTHON (default: the python3
#      first on PATH), then the checks below;
#   2. `python -m build --wheel` into a scratch directory, that wheel installed into a
#      second fresh environment of PYTHON, the same checks, and the wheel's contents;
#   3. the same wheel (cp311-abi3: one build for every CPython from 3.11 on) installed
#      into a fresh environment of each of EXTRA_PYTHONS (default: /usr/bin/python3),
#      made with --system-site-packages so that the interpreter's own torch, if any, is
#      seen, and the same checks.
# The checks, run from outside the source tree: `import collective` finds the installed
# package and its _core.abi3.so; `import collective.torch` registers the backend where
# torch is installed and, where it is not, fails on `import torch` alone (the backend's
# modules are all installed and compile); collrun and allreduce_perf are the
# environment's own (its bin/), and `collrun -n 2 allreduce_perf -b 8 -e 1M -f 4`
# passes its checks; a 2-rank program (no numpy needed) checks allreduce, allgather,
# broadcast, an async handle, and raw() with int streams; where torch is installed, a
# 2-rank torch.distributed all_reduce on the backend.
# Exit 0: passed; 1: failed; 77: skipped (pip cannot get the build dependencies, or no
# Python 3.11 or later).  Prints each part and its time.
# Usage: test_install.sh [SOURCE_ROOT]
#   PYTHON=python3  EXTRA_PYTHONS="/usr/bin/python3"  JOBS=2 (ninja -j for the builds)
#   TORCH_PYTHONS="/path/to/venv-with-torch/bin/python ...": also run the checks with these
#   interpreters (of the wheel's Python version or later) on the wheel's installed package.
#   KEEP=1 keeps the scratch directory.
set -u
unset PYTHONPATH      # the installed package, not a build tree's
SRC=$(cd "${1:-$(dirname "$0")/../..}" && pwd) || exit 1
PYTHON=${PYTHON:-python3}
EXTRA_PYTHONS=${EXTRA_PYTHONS-/usr/bin/python3}
TORCH_PYTHONS=${TORCH_PYTHONS:-}
JOBS=${JOBS:-2}
T=$(mktemp -d "${TMPDIR:-/tmp}/test_install.XXXXXX") || exit 1
if [ "${KEEP:-0}" = 1 ]; then
    trap 'echo "kept $T"' EXIT
else
    trap 'rm -rf "$T"' EXIT
fi
cd "$T" || exit 1

failures=0
failed=""
t0=$EPOCHREALTIME
part_start=$t0
part() { part_start=$EPOCHREALTIME; echo "== $*"; }
since() { awk -v a="$EPOCHREALTIME" -v b="$1" 'BEGIN { printf "%.1f s", a - b }'; }
took() { since "$part_start"; }
ok() { echo "ok:   $* ($(took))"; }
fail() { echo "FAIL: $* ($(took))"; failures=$((failures + 1)); failed="$failed; $*"; }
skip() { echo "SKIP: $*"; exit 77; }
# Runs a command with its output in $T/log; shows the log's end when it fails.
logged() {
    if "$@" >"$T/log" 2>&1; then
        return 0
    fi
    sed 's/^/    | /' "$T/log" | tail -n 25
    return 1
}

# --- what is needed -----------------------------------------------------------------
part "preflight: $PYTHON, and pip's access to the build dependencies"
PY=$(command -v "$PYTHON") || skip "$PYTHON not found"
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
    skip "$PY is Python $("$PY" -c 'import platform; print(platform.python_version())'); the package needs 3.11 or later"
logged "$PY" -m venv "$T/tools" || skip "$PY -m venv failed (no venv module?)"
# The build dependencies come from pip's index (PyPI, or what pip.conf names): without
# it nothing can be built, which is no failure of the package.
if ! logged "$T/tools/bin/pip" download --quiet --no-deps --dest "$T/probe" meson-python meson; then
    skip "pip cannot download meson-python and meson (no network to PyPI, or no index that has them)"
fi
logged "$T/tools/bin/pip" install --quiet build || skip "pip cannot install the build frontend (build)"
echo "   $PY: Python $("$PY" -c 'import platform; print(platform.python_version())'); build dependencies reachable ($(took))"

# A copy of the source tree: the files git tracks and the untracked ones it does not
# ignore (no build directories), or everything but build*/ outside a git checkout.
part "copy of the source tree"
mkdir "$T/src"
if git -C "$SRC" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$SRC" && git ls-files -z -co --exclude-standard | xargs -0 tar -cf - 2>/dev/null) |
        tar -xf - -C "$T/src"
else
    (cd "$SRC" && tar -cf - --exclude='./build*' --exclude='./.mesonpy-*' .) | tar -xf - -C "$T/src"
fi
[ -f "$T/src/pyproject.toml" ] && ok "copied $(find "$T/src" -type f | wc -l) files" ||
    { fail "copy of $SRC (no pyproject.toml)"; exit 1; }

# --- the checks, for an environment ------------------------------------------------
cat >"$T/check_import.py" <<'EOF'
"""Where the package comes from, its extension, and collective.torch."""
import importlib.util, pathlib, sys
site = pathlib.Path(sys.argv[1]).resolve()
import collective
from collective import _core
pkg = pathlib.Path(collective.__file__).resolve().parent
assert site in pkg.parents, f"collective comes from {pkg}, not from {site}"
assert _core.__file__.endswith("_core.abi3.so"), _core.__file__
torch_files = sorted(p.name for p in (pkg / "torch").glob("*.py"))
assert "__init__.py" in torch_files, f"collective/torch has {torch_files}"
for name in torch_files:
    path = pkg / "torch" / name
    compile(path.read_text(), str(path), "exec")
have_torch = importlib.util.find_spec("torch") is not None
try:
    import collective.torch
except ModuleNotFoundError as e:
    if have_torch or e.name != "torch":
        raise
    print(f"   collective from {pkg}, {pathlib.Path(_core.__file__).name}; collective.torch "
          f"({len(torch_files)} modules) stops at 'import torch': no torch here")
else:
    import torch, torch.distributed as dist
    assert hasattr(dist.Backend, "COLLECTIVE"), "the backend 'collective' is not registered"
    print(f"   collective from {pkg}, {pathlib.Path(_core.__file__).name}; "
          f"collective.torch imported with torch {torch.__version__}")
EOF
cat >"$T/prog.py" <<'EOF'
"""2 ranks under collrun, buffers without numpy: the package's calls and raw()."""
import array
import collective
from collective import _core

with collective.Communicator.from_env() as comm:
    r, n = comm.rank, comm.size
    x = array.array("f", [r + 1.0] * 8)
    comm.allreduce(x)
    assert list(x) == [n * (n + 1) / 2] * 8, x
    y, out = array.array("i", [r] * 3), array.array("i", [0] * (3 * n))
    comm.allgather(y, out)
    assert list(out) == [i for i in range(n) for _ in range(3)], out
    b = bytearray(b"hello" if r == 0 else bytes(5))
    comm.broadcast(b, root=0)
    assert b == b"hello", b
    h = comm.allreduce(array.array("d", [1.0] * 4), async_=True)
    assert list(h.wait()) == [float(n)] * 4
    z = array.array("f", [1.0] * 4)
    addr, count = z.buffer_info()
    args = (_core.FUNCS["allreduce"], addr, addr, count, _core.DTYPES["float32"],
            _core.OPS["sum"], 0)
    comm.raw(*args, stream=0)                     # an int stream: 0 is NULL (blocks here)
    assert list(z) == [float(n)] * 4, z
    s = _core.Stream()
    comm.raw(*args, stream=s.ptr)                 # an int stream: a collStream_t's address
    s.synchronize()
    assert list(z) == [float(n * n)] * 4, z
    try:
        comm.raw(*args, stream=-1)
    except collective.InvalidArgument as e:
        assert "stream" in str(e), e
    else:
        raise AssertionError("raw(stream=-1) was not refused")
    s.destroy()
    comm.barrier()
print(f"rank {r} of {n}: ok")
EOF
cat >"$T/prog_torch.py" <<'EOF'
"""2 ranks under collrun: torch.distributed on the backend "collective"."""
import os, sys
os.environ.pop("COLL_COMM_ID", None)              # collrun's; the backend makes its own ids
import torch
import torch.distributed as dist
import collective.torch  # noqa: F401  (registers "collective")

rank, size = int(os.environ["COLL_RANK"]), int(os.environ["COLL_NRANKS"])
dist.init_process_group("collective", init_method="file://" + sys.argv[1], rank=rank,
                        world_size=size)
t = torch.full((4,), float(rank + 1))
dist.all_reduce(t)
assert t.tolist() == [size * (size + 1) / 2] * 4, t
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank} of {size}: torch {torch.__version__}: ok")
EOF

# check VENV WHAT [PYTHON]: the checks above with VENV's bin/ and python, or with PYTHON
# (another interpreter: TORCH_PYTHONS) and VENV's site-packages on its PYTHONPATH.
check() {
    local v=$1 what=$2 py=${3:-$1/bin/python} bin site
    bin=$1/bin
    site=$("$v/bin/python" -c 'import sysconfig; print(sysconfig.get_path("platlib"))')
    if [ $# -ge 3 ]; then
        export PYTHONPATH=$site
    fi
    part "$what: import"
    if logged "$py" "$T/check_import.py" "$site"; then
        cat "$T/log"
        ok "$what: import collective, collective.torch"
    else
        fail "$what: import collective, collective.torch"
    fi
    part "$what: collrun -n 2 allreduce_perf -b 8 -e 1M -f 4"
    if [ "$(PATH=$bin:$PATH command -v collrun)" != "$bin/collrun" ] ||
        [ "$(PATH=$bin:$PATH command -v allreduce_perf)" != "$bin/allreduce_perf" ]; then
        fail "$what: collrun and allreduce_perf are not in $bin"
    elif PATH=$bin:$PATH logged collrun -n 2 --timeout 120 allreduce_perf -b 8 -e 1M -f 4 &&
        grep -q "Out of bounds values : 0 OK" "$T/log"; then
        ok "$what: $(grep -c '^\[0\] *[0-9]' "$T/log") sizes, 0 wrong, from $bin"
    else
        grep -q "Out of bounds" "$T/log" && sed 's/^/    | /' "$T/log" | tail -n 12
        fail "$what: collrun -n 2 allreduce_perf"
    fi
    part "$what: a 2-rank Python program"
    if PATH=$bin:$PATH logged collrun -n 2 --timeout 120 "$py" "$T/prog.py"; then
        ok "$what: collrun -n 2 python prog.py"
    else
        fail "$what: collrun -n 2 python prog.py"
    fi
    if "$py" -c 'import torch' >/dev/null 2>&1; then
        part "$what: a 2-rank torch.distributed program"
        rm -f "$T/store"
        if PATH=$bin:$PATH logged collrun -n 2 --timeout 120 "$py" "$T/prog_torch.py" \
            "$T/store"; then
            ok "$what: $(grep -o 'torch [^:]*' "$T/log" | head -n 1), all_reduce on \"collective\""
        else
            fail "$what: collrun -n 2 python prog_torch.py"
        fi
    fi
    unset PYTHONPATH
}

# --- 1. pip install . ----------------------------------------------------------------
part "1. pip install . (fresh venv of $PY, ninja -j$JOBS)"
"$PY" -m venv "$T/venv-pip"
if logged "$T/venv-pip/bin/pip" install --config-settings=compile-args=-j"$JOBS" "$T/src"; then
    ok "pip install ."
    check "$T/venv-pip" "pip install ."
else
    fail "pip install ."
fi

# --- 2. python -m build --wheel, installed ----------------------------------------
part "2. python -m build --wheel"
if logged "$T/tools/bin/python" -m build --wheel --outdir "$T/dist" \
    --config-setting=compile-args=-j"$JOBS" "$T/src"; then
    whl=$(ls "$T"/dist/*.whl)
    ok "$(basename "$whl")"
else
    whl=""
    fail "python -m build --wheel"
fi
if [ -n "$whl" ]; then
    part "wheel contents"
    "$T/tools/bin/python" - "$whl" >"$T/log" 2>&1 <<'EOF'
import re, sys, zipfile
name = sys.argv[1].rsplit("/", 1)[-1]
files = zipfile.ZipFile(sys.argv[1]).namelist()
want = [r"-cp3\d+-abi3-linux_\w+\.whl$", "collective/_core.abi3.so", "collective/__init__.py",
        "collective/torch/__init__.py", r"\.libcollective\.mesonpy\.libs/libcollective\.so",
        "/scripts/collrun$", "/scripts/collinfo$", "/scripts/allreduce_perf$",
        "/scripts/alltoall_perf$", "/headers/collective.h$"]
missing = [w for w in want if not any(re.search(w, f) for f in files + [name])]
unwanted = [f for f in files if re.search(r"(^|/)(test_\w+|dp_trainer|\w+_example|fuzz_\w+|"
                                          r"\w+\.a|\w+\.pc|libnccl[^/]*)$", f)]
print(f"   {len(files)} files; scripts: " +
      " ".join(sorted(f.rsplit("/", 1)[1] for f in files if "/scripts/" in f)))
if missing or unwanted:
    sys.exit(f"missing {missing}, unwanted {unwanted}")
EOF
    rc=$?
    cat "$T/log"
    [ $rc = 0 ] && ok "the package, libcollective.so, the tools; no tests, examples, static library" ||
        fail "wheel contents"
    part "2. the wheel into a fresh venv of $PY"
    "$PY" -m venv "$T/venv-whl"
    if logged "$T/venv-whl/bin/pip" install --no-index "$whl"; then
        ok "pip install $(basename "$whl")"
        check "$T/venv-whl" "wheel"
        # The installed package with interpreters that have torch (a venv of theirs
        # cannot be made fresh with their torch in it): PYTHONPATH names it.
        for tp in $TORCH_PYTHONS; do
            check "$T/venv-whl" "wheel with $tp" "$tp"
        done
    else
        fail "pip install of the wheel"
    fi
    # --- 3. the same wheel in other interpreters ---------------------------------
    for xp in $EXTRA_PYTHONS; do
        xpy=$(command -v "$xp") || { echo "   ($xp not found: left out)"; continue; }
        [ "$(readlink -f "$xpy")" = "$(readlink -f "$PY")" ] && continue
        "$xpy" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
            { echo "   ($xpy is older than 3.11: left out)"; continue; }
        xv=$("$xpy" -c 'import platform; print(platform.python_version())')
        part "3. the wheel into a fresh venv of $xpy ($xv, --system-site-packages)"
        if ! logged "$xpy" -m venv --system-site-packages "$T/venv-x"; then
            echo "   ($xpy -m venv failed: left out)"
            continue
        fi
        if logged "$T/venv-x/bin/pip" install --no-index "$whl"; then
            ok "pip install $(basename "$whl") with Python $xv"
            check "$T/venv-x" "wheel, Python $xv"
        else
            fail "pip install of the wheel with $xpy"
        fi
        rm -rf "$T/venv-x"
    done
fi

total=$(since "$t0")
if [ $failures -gt 0 ]; then
    echo "test_install: $failures failed${failed} ($total)"
    exit 1
fi
echo "test_install: passed ($total)"
exit 0
