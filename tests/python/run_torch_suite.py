#!/usr/bin/python3
"""Run PyTorch's own distributed test suite against the torch.distributed backend "collective".

The suite is the one shipped with torch (torch/testing/_internal/distributed/
distributed_test.py, class DistributedTest._DistTestBase).  Every test starts WORLD_SIZE
processes, forked from the one that imported the suite and collective.torch (which
registers the backend), or with --start spawn as torch's own runner does (each
re-imports this file and torch: about ten times slower on two cores); each joins the
process group through a FileStore (file:// init method, as the suite's TestDistBackend
does) and runs the one test.

Usage (Debian's /usr/bin/python3, which has torch; collective must be importable, e.g.
PYTHONPATH=build/python, or --build-dir build):

    /usr/bin/python3 tests/python/run_torch_suite.py                # ~40 tests, world size 3
    /usr/bin/python3 tests/python/run_torch_suite.py --full         # all; or COLL_TORCH_SUITE_FULL=1
    /usr/bin/python3 tests/python/run_torch_suite.py -n 2,4 -k 'test_all_reduce_*'
    /usr/bin/python3 tests/python/run_torch_suite.py --backend gloo --list

Options:
    --backend NAME     collective (default) or gloo (to check the runner itself)
    -n, --world-sizes  comma-separated world sizes (default 3; with --full 2,3,4,8: torch
                       2.x runs its tests of subgroups at 8 ranks or more only)
    --full             every test of the suite (the default: QUICK, about 20 s);
                       COLL_TORCH_SUITE_FULL=1 does the same (about 4 minutes on two cores)
    --smoke            one test of each family (SMOKE, about 15 s) instead of QUICK;
                       --full (or COLL_TORCH_SUITE_FULL=1) still runs them all
    -k PATTERN         run only the tests matching this fnmatch pattern, among all of
                       them (repeatable; a pattern without '*' matches a name exactly)
    --family NAME      run only this family (repeatable); --list shows each test's family
    --list             print the selected tests and exit
    --start HOW        fork (the default; spawn where torch sees a CUDA device) or
                       spawn: how each test's processes start
    --timeout S        per-test limit (the suite's own default is 300 s; here 120)
    --gloo-gated       run only the tests the suite reserves for Gloo (see GLOO_GATED),
                       against the backend anyway: which of them it would pass
    --build-dir DIR    a meson build directory: DIR/python goes on PYTHONPATH
    --python PATH      run under this Python and its torch (torch_python.py)
    --json FILE        write the results (one record per test and world size)
    -v                 print every test's result and the full traceback of failures

Exit status: 0 when no selected test failed (skips and the expected failures of KNOWN are
fine), 1 otherwise, 3 when the backend (or the suite) cannot be imported, 77 (meson's
"skipped") when torch cannot be imported; 2 for bad usage.

How the suite decides what runs: the tests compare the BACKEND string at import time
(decorators such as sandcastle_skip_if(BACKEND != "gloo", ...)) and look BACKEND up in
common_distributed.DistTestCases (backend_feature: which backends support DDP,
subgroups, ...; skip_collective: which lack a collective).  Before importing the suite
this runner adds "collective" to the sets where it stands for a CPU backend with Gloo's
features (ddp, subgroup, plugin, and gpu on a machine without CUDA, see _import_suite),
and to skip_collective for what it lacks (LACKS).  Tests guarded by BACKEND == "gloo"
(timeouts, sparse allreduce, Gloo's batch_isend_irecv, get_future, all_reduce_coalesced,
monitored_barrier) are therefore skipped for collective, with the suite's own reason;
--gloo-gated runs them.  docs/python.md lists the results.
"""
import argparse
import fnmatch
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
# Set by the driver for the worker process; the processes the suite starts inherit it.
WORKER_ENV = "COLL_TORCH_SUITE_WORKER"

# ---------------------------------------------------------------------------------------
# The selection.  Families are fnmatch patterns on the test method names of
# DistributedTest._DistTestBase.  Tests that need GPUs (the suite's skip_if_no_gpu and
# skip_if_lt_x_gpu wrappers) are recorded as skipped without being started when torch sees
# no CUDA device: started, they would only spawn processes that exit with "no CUDA".

# The suite's wrappers that skip a test on a machine without enough GPUs, whatever the
# backend (the nccl_* ones skip only for NCCL).
GPU_WRAPPERS = ("skip_if_no_gpu.", "skip_if_lt_x_gpu.")

FAMILIES = {
    "all_reduce": ["test_all_reduce_*", "test_sparse_all_reduce_*"],
    "broadcast": ["test_broadcast", "test_broadcast_group", "test_broadcast_full_group",
                  "test_broadcast_object_list"],
    "reduce": ["test_reduce_*"],
    "all_gather": ["test_all_gather*"],
    "gather": ["test_gather*"],
    "scatter": ["test_scatter*"],
    "all_to_all": ["test_all_to_all*"],
    "barrier": ["test_barrier*", "test_monitored_barrier*"],
    "send_recv": ["test_send_recv*", "test_isend*", "test_irecv*", "test_batch_isend_irecv*"],
    "group": ["test_*_group", "test_*_group_*", "test_destroy_*", "test_get_rank*",
              "test_get_backend", "test_Backend_enum_class", "test_new_subgroups*",
              "test_dump_DDP_relevant_env_vars"],
    "ddp_cpu": ["test_DistributedDataParallelCPU*"],
    "ddp": ["test_ddp_*", "test_DistributedDataParallel*", "test_accumulate_gradients_*",
            "test_get_future", "test_static_graph_api_cpu", "test_invalid_static_graph",
            "test_detect_ddp_is_actually_static", "test_different_graph_across_ranks",
            "test_output_unused_in_loss_*", "test_undefined_grad_parity_unused_parameters",
            "test_verify_model_across_rank_*", "test_compute_bucket_assignment_*",
            "test_stateless_api_with_ddp", "test_post_localSGD_*", "test_DistributedSampler_*"],
    "model_averaging": ["test_average_parameters", "test_periodic_model_averager*",
                        "test_*_hierarchical_model_averager*"],
}

# The default (meson) selection: one or two tests of each family, about 3 minutes at
# world size 3 on two busy cores.
QUICK = [
    "test_get_backend", "test_get_rank_size_group", "test_destroy_group",
    "test_all_reduce_sum", "test_all_reduce_product", "test_all_reduce_max",
    "test_all_reduce_sum_async", "test_all_reduce_sum_complex", "test_all_reduce_group_sum",
    "test_all_reduce_full_group_min",
    "test_broadcast", "test_broadcast_group", "test_broadcast_object_list",
    "test_reduce_sum", "test_reduce_group_product", "test_reduce_full_group_max",
    "test_all_gather", "test_all_gather_group", "test_all_gather_coalesced_simple",
    "test_all_gather_object_default_pg",
    "test_gather", "test_gather_full_group", "test_gather_object",
    "test_scatter", "test_scatter_group",
    "test_barrier", "test_barrier_group",
    "test_send_recv", "test_isend", "test_irecv", "test_send_recv_with_tag",
    "test_send_recv_any_source",
    "test_DistributedDataParallelCPU", "test_DistributedDataParallelCPU_grad_is_view",
    "test_ddp_logging_data_cpu", "test_static_graph_api_cpu",
]


# The smallest selection (--smoke): one test of each family, for the torch versions
# after the first, whose quick selection the default run leaves out (about a minute at
# world size 3 on two cores).
SMOKE = [
    "test_get_backend", "test_destroy_group", "test_all_reduce_sum", "test_all_reduce_sum_async",
    "test_broadcast", "test_reduce_sum", "test_all_gather", "test_all_gather_object_default_pg",
    "test_gather", "test_scatter", "test_barrier", "test_send_recv", "test_irecv",
    "test_send_recv_any_source",
    "test_DistributedDataParallelCPU",
]


def _matches(name, patterns):
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def select(all_names, full, families=None, patterns=None, smoke=False):
    """The tests to run, in the suite's order (full and no family: all of them)."""
    fams = families or list(FAMILIES)
    default = SMOKE if smoke else QUICK
    chosen = []
    for name in all_names:
        if families:
            if not any(_matches(name, FAMILIES[f]) for f in fams):
                continue
        elif not full and not patterns and name not in default:
            continue
        if patterns and not _matches(name, patterns):
            continue
        chosen.append(name)
    return chosen


def family_of(name):
    for fam, pats in FAMILIES.items():
        if _matches(name, pats):
            return fam
    return "-"


def gpu_gate(fn):
    """The name of the suite's GPU-count wrapper around a test function, or None."""
    while fn is not None:
        code = getattr(fn, "__code__", None)
        qual = getattr(code, "co_qualname", "") if code else ""
        for w in GPU_WRAPPERS:
            if qual.startswith(w):
                return w.rstrip(".")
        fn = getattr(fn, "__wrapped__", None)
    return None


# What the backend does not do, told to the suite through DistTestCases.skip_collective
# (the suite then skips those tests, as it does for NCCL).
LACKS = {
    "collective": [],
}

# Expected failures (known limitations, or a test that does not apply), for which the
# suite has no switch: a test matching the pattern that fails with the text given is
# reported as "expected" and does not fail the run; one that fails otherwise is a failure,
# and one that passes is noted.
KNOWN = {
    "collective": [
        ("test_sparse_all_reduce_sum", "only dense (strided) tensors",
         "sparse tensors: only dense (strided) tensors are supported"),
        ("test_monitored_barrier_*", "monitored",
         "monitored_barrier: a Gloo-only API in torch.distributed"),
        # --gloo-gated only: for a backend other than mpi or gloo the helper builds a CUDA
        # model, and without a GPU it fails before any collective.
        ("test_accumulate_gradients_no_sync*", "'ddp_model'",
         "not applicable: the suite's CPU variant is for mpi and gloo only"),
    ],
}


def classify(backend, records):
    """Turn the failures listed in KNOWN into outcome "expected"."""
    for r in records:
        for pattern, text, why in KNOWN.get(backend, ()):
            if fnmatch.fnmatchcase(r["test"], pattern):
                if r["outcome"] == "fail" and text in r["detail"]:
                    r["outcome"], r["why"] = "expected", why
                elif r["outcome"] == "pass":
                    r["why"] = f"passes, though listed as an expected failure ({why})"
                break
    return records


# ---------------------------------------------------------------------------------------
# The worker: imports the suite with BACKEND and WORLD_SIZE from the environment.  This
# part also runs in every process the suite starts (spawned ones re-import this file).

def _import_suite():
    """Prepare the environment the suite expects, then import it.  Returns the module."""
    # torch's common_utils parses sys.argv at import; it must see none of our flags.
    sys.argv = sys.argv[:1]
    try:
        import expecttest  # noqa: F401
    except ImportError:
        sys.path.insert(0, os.path.join(HERE, "torch_suite"))
    os.environ.setdefault("TEMP_DIR", tempfile.gettempdir())
    # The suite's TestDistBackend joins through the file of each test (file://); its
    # INIT_METHOD, read at import, gates and re-initializes the timeout tests.  The
    # processes of one test inherit the INIT_METHOD that setUp sets for that test.
    os.environ.setdefault("INIT_METHOD", "file://" + os.path.join(os.environ["TEMP_DIR"],
                                                                  "init_file"))
    os.environ.setdefault("COLL_SOCKET_IFNAME", "lo")

    import torch.distributed as dist  # noqa: F401

    backend = os.environ["BACKEND"]
    if backend == "collective":
        import collective.torch  # noqa: F401  (registers the backend)

    # The suite turns on DDP's ReplicatedTensor mode in every process it starts; the
    # module that mode imports (torch.distributed._shard) fails to import on Python 3.11
    # (a dataclass with a mutable default).  Plain DDP is what is being tested: keep the
    # mode off whatever the suite asks.
    # (torch 1.13 only: 2.x has no such mode.)
    try:
        import torch.nn.parallel._replicated_tensor_ddp_utils as rt
    except ImportError:
        rt = None
    if rt is not None:
        set_mode = rt._set_ddp_with_replicated_tensor
        rt._set_ddp_with_replicated_tensor = lambda value: set_mode(False)

    import torch
    from torch.testing._internal import common_distributed as cd
    if backend not in ("gloo", "nccl", "mpi", "ucc"):
        # A CPU backend with Gloo's features: DDP, subgroups; a registered plugin.
        features = ["ddp", "subgroup", "plugin"]
        # "gpu" ({nccl, gloo}) also gates CPU tests: the object collectives
        # (all_gather_object, gather_object, broadcast_object_list).  Every GPU test it
        # gates also needs GPUs (skip_if_lt_x_gpu), so without CUDA it decides only those
        # CPU tests.  "cuda" gates GPU tests only and is left alone.
        if not torch.cuda.is_available():
            features.append("gpu")
        for feature in features:
            cd.DistTestCases.backend_feature[feature].add(backend)
        # What the backend lacks, in the suite's own terms (as NCCL does).
        for what in LACKS.get(backend, ()):
            cd.DistTestCases.skip_collective[what].add(backend)

    import logging
    logging.getLogger().setLevel(logging.WARNING)

    from torch.testing._internal.distributed import distributed_test as dt
    dt.DEFAULT_TIMEOUT = int(os.environ.get("COLL_TORCH_SUITE_TIMEOUT", "120"))
    dt.CUSTOMIZED_TIMEOUT = {}
    return dt


# The skip reasons with which the suite reserves a test for Gloo (or for the backends
# with Work.get_future, which it lists as mpi, nccl and gloo).  --gloo-gated runs these
# tests against the backend anyway, to see which of them it passes.
# (torch 2.x words two of them differently from 1.13.)
GLOO_GATED = ("Only gloo backend supports timeouts", "GLOO Batch Send Recv CPU",
              "Only Gloo backend support sparse all reduce",
              "Only Gloo backend supports sparse all reduce",
              "Test requires backend to be one of {'gloo'}",
              "Test requires backend %s to be one of {'gloo'}" % os.environ.get("BACKEND"),
              "get_future is only supported on mpi, nccl and gloo")


def _unskipped(fn):
    """fn without the suite's skip mark (a new function object that calls it)."""
    while getattr(fn, "__unittest_skip__", False) and "skip_wrapper" in getattr(
            getattr(fn, "__code__", None), "co_name", ""):
        fn = fn.__wrapped__  # unittest.skip's wrapper only raises SkipTest

    def test(self):
        return fn(self)
    test.__name__ = test.__qualname__ = fn.__name__
    return test


if os.environ.get(WORKER_ENV):
    _dt = _import_suite()
    # With a CUDA device torch has initialized CUDA here, which a forked child cannot
    # use: the ranks are spawned then, as torch's runner does.
    import torch as _torch
    _CUDA = _torch.cuda.is_available()

    class TorchSuite(_dt.TestDistBackend, _dt.DistributedTest._DistTestBase):
        """The suite's tests, each run by WORLD_SIZE processes."""

        def setUp(self):
            super().setUp()
            if os.environ.get("COLL_TORCH_SUITE_START") == "spawn" or _CUDA:
                self._spawn_processes()
            else:
                # Forked: the suite, torch and the backend are imported once, here (no
                # group or thread exists yet).  torch 2.x's test base has no fork method
                # of its own; its process starter takes any Process.
                import torch.multiprocessing as tmp
                self._start_processes(tmp.get_context("fork").Process)

    GATED = []  # the tests run by --gloo-gated
    if os.environ.get("COLL_TORCH_SUITE_GLOO_GATED"):
        for _name in dir(TorchSuite):
            _fn = getattr(TorchSuite, _name)
            if _name.startswith("test") and getattr(_fn, "__unittest_skip_why__", "") in GLOO_GATED:
                setattr(TorchSuite, _name, _unskipped(_fn))
                GATED.append(_name)


class _Recorder:
    """Collects one record per test from a unittest run."""

    def __init__(self):
        import unittest

        records = self.records = []

        class Result(unittest.TextTestResult):
            def startTest(self, test):
                self._t0 = time.time()
                super().startTest(test)

            def _add(self, test, outcome, detail=""):
                name = test.id().split(".")[-1]
                secs = round(time.time() - self._t0, 1)
                records.append({"test": name, "outcome": outcome, "detail": detail,
                                "seconds": secs})
                # One line per test as it ends, so that a run cut short still says how far
                # it got and how long each test took.
                print(f"#   {outcome:5s} {secs:6.1f}s {name}", flush=True)

            def addSuccess(self, test):
                super().addSuccess(test)
                self._add(test, "pass")

            def addFailure(self, test, err):
                super().addFailure(test, err)
                self._add(test, "fail", self._exc_info_to_string(err, test))

            def addError(self, test, err):
                super().addError(test, err)
                self._add(test, "fail", self._exc_info_to_string(err, test))

            def addSkip(self, test, reason):
                super().addSkip(test, reason)
                self._add(test, "skip", reason)

            def addExpectedFailure(self, test, err):
                super().addExpectedFailure(test, err)
                self._add(test, "xfail", self._exc_info_to_string(err, test))

            def addUnexpectedSuccess(self, test):
                super().addUnexpectedSuccess(test)
                self._add(test, "fail", "unexpected success")

        self.result_class = Result


def worker_main(cfg):
    import unittest

    loader = unittest.TestLoader()
    names = loader.getTestCaseNames(TorchSuite)
    if os.environ.get("COLL_TORCH_SUITE_GLOO_GATED"):
        chosen = [n for n in select(names, True, cfg["families"], cfg["patterns"]) if n in GATED]
    else:
        chosen = select(names, cfg["full"], cfg["families"], cfg["patterns"], cfg["smoke"])
    if cfg["list"]:
        import torch
        for n in chosen:
            gate = gpu_gate(getattr(TorchSuite, n))
            why = getattr(getattr(TorchSuite, n), "__unittest_skip_why__", None)
            note = (f"  [skipped: {why}]" if why else
                    f"  [needs GPUs: {gate}]" if gate and not torch.cuda.is_available() else "")
            print(f"{family_of(n):16s} {n}{note}")
        print(f"# {len(chosen)} of the suite's {len(names)} tests selected")
        return 0
    rec = _Recorder()
    import torch
    run = []
    for n in chosen:
        gate = gpu_gate(getattr(TorchSuite, n))
        if gate and not torch.cuda.is_available():
            rec.records.append({"test": n, "outcome": "skip", "seconds": 0.0,
                                "detail": f"needs GPUs ({gate}); torch sees no CUDA device"})
        else:
            run.append(n)
    suite = unittest.TestSuite(TorchSuite(n) for n in run)
    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2,
                                     resultclass=rec.result_class)
    runner.run(suite)
    with open(cfg["out"], "w") as f:
        json.dump(rec.records, f)
    return 0


# ---------------------------------------------------------------------------------------
# The driver: one worker process per world size, then the summary.

def cause_of(detail):
    """The last line of each failing process' traceback, or the error's last line."""
    causes = []
    lines = detail.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Process ") and "exited with error code" in line:
            # The traceback of this process runs to the next "Process" line.
            tail = [ln for ln in lines[i + 1:] if ln.strip()]
            for j, ln in enumerate(tail):
                if ln.startswith("Process ") and "exited with error code" in ln:
                    tail = tail[:j]
                    break
            if tail:
                causes.append(f"rank {line.split()[1]}: {tail[-1].strip()}")
    if not causes:
        rest = [ln for ln in lines if ln.strip()]
        causes.append(rest[-1].strip() if rest else "?")
    uniq = []
    for c in causes:
        if c.split(": ", 1)[-1] not in [u.split(": ", 1)[-1] for u in uniq]:
            uniq.append(c)
    return "; ".join(uniq)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", default=os.environ.get("COLL_TORCH_SUITE_BACKEND", "collective"))
    p.add_argument("-n", "--world-sizes", default=None)
    p.add_argument("--full", action="store_true",
                   default=os.environ.get("COLL_TORCH_SUITE_FULL", "") not in ("", "0"))
    p.add_argument("--smoke", action="store_true",
                   help="one test of each family (SMOKE) instead of the quick selection")
    p.add_argument("-k", dest="patterns", action="append", default=[])
    p.add_argument("--family", dest="families", action="append", default=[])
    p.add_argument("--list", action="store_true")
    p.add_argument("--start", choices=["fork", "spawn"], default="fork")
    p.add_argument("--timeout", type=int, default=120)
    p.add_argument("--json", default=None)
    p.add_argument("--build-dir", default=None,
                   help="a meson build dir whose python/ holds the collective package")
    p.add_argument("--gloo-gated", action="store_true",
                   help="also run the tests the suite reserves for Gloo; select them with "
                        "--family gloo_gated")
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args(argv)
    for f in a.families:
        if f not in FAMILIES:
            p.error(f"unknown family {f!r}; families: {', '.join(FAMILIES)}")
    if a.world_sizes is None:
        a.world_sizes = "2,3,4,8" if a.full else "3"
    try:
        a.world_sizes = [int(x) for x in a.world_sizes.split(",") if x]
    except ValueError:
        p.error("--world-sizes takes integers, e.g. 2,4")
    if not a.world_sizes or min(a.world_sizes) < 2:
        p.error("world sizes must be 2 or more")
    return a


def driver_main(argv):
    a = parse_args(argv)
    import importlib.util
    if importlib.util.find_spec("torch") is None:
        print(f"torch cannot be imported by {sys.executable}: skipped")
        return 77  # meson's "skipped"
    env = dict(os.environ)
    # The worker runs in a temporary directory: relative PYTHONPATH entries must not move.
    if env.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) if p else p
                                            for p in env["PYTHONPATH"].split(os.pathsep))
    if a.build_dir:
        pkg = os.path.join(os.path.abspath(a.build_dir), "python")
        env["PYTHONPATH"] = pkg + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env[WORKER_ENV] = "1"
    env["BACKEND"] = a.backend
    env["COLL_TORCH_SUITE_TIMEOUT"] = str(a.timeout)
    env["COLL_TORCH_SUITE_START"] = a.start
    if a.gloo_gated:
        env["COLL_TORCH_SUITE_GLOO_GATED"] = "1"
    env.setdefault("COLL_SOCKET_IFNAME", "lo")
    # The library's own timeout: a hung collective fails the test instead of running into
    # the suite's limit.
    env.setdefault("COLL_TIMEOUT_MS", str(min(a.timeout, 60) * 1000))

    records = []
    t_start = time.time()
    for ws in a.world_sizes:
        env["WORLD_SIZE"] = str(ws)
        with tempfile.TemporaryDirectory(prefix="coll-torch-suite-") as tmp:
            out = os.path.join(tmp, "results.json")
            cfg = {"full": a.full, "families": a.families, "patterns": a.patterns,
                   "list": a.list, "out": out, "smoke": a.smoke}
            env["COLL_TORCH_SUITE_CFG"] = json.dumps(cfg)
            env["TEMP_DIR"] = tmp
            print(f"# backend {a.backend}, world size {ws}", flush=True)
            proc = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env,
                                  cwd=tmp, stderr=None if a.verbose else subprocess.PIPE,
                                  text=True)
            if proc.returncode != 0:
                if proc.stderr:
                    sys.stderr.write(proc.stderr[-6000:])
                print(f"# the worker for world size {ws} exited with status {proc.returncode}")
                return 3
            if a.list:
                return 0
            with open(out) as f:
                for r in classify(a.backend, json.load(f)):
                    r["world_size"] = ws
                    records.append(r)

    elapsed = time.time() - t_start
    report(a, records, elapsed)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(records, f, indent=1)
    return 1 if any(r["outcome"] == "fail" for r in records) else 0


def report(a, records, elapsed):
    print()
    print(f"## PyTorch distributed suite, backend {a.backend}")
    for ws in a.world_sizes:
        rs = [r for r in records if r["world_size"] == ws]
        counts = {k: sum(1 for r in rs if r["outcome"] == k)
                  for k in ("pass", "fail", "expected", "skip")}
        print(f"world size {ws}: {len(rs)} tests: {counts['pass']} passed, "
              f"{counts['fail']} failed, {counts['expected']} expected failures, "
              f"{counts['skip']} skipped")
    if a.verbose:
        for r in records:
            print(f"  [{r['world_size']}] {r['outcome']:5s} {r['seconds']:6.1f}s {r['test']}")
    fails = [r for r in records if r["outcome"] == "fail"]
    if fails:
        print("\nFailures:")
        for r in fails:
            print(f"  [{r['world_size']}] {r['test']}: {cause_of(r['detail'])}")
        print("\nTracebacks of the failures" + ("" if a.verbose else " (their last 30 lines)") + ":")
        for r in fails:
            lines = r["detail"].rstrip().splitlines()
            if not a.verbose:
                lines = lines[-30:]
            print(f"--- [{r['world_size']}] {r['test']}\n    " + "\n    ".join(lines))
    lims = [r for r in records if r["outcome"] == "expected"]
    if lims:
        print("\nExpected failures:")
        for r in lims:
            print(f"  [{r['world_size']}] {r['test']}: {r['why']}")
    for r in records:
        if r["outcome"] == "pass" and r.get("why"):
            print(f"  note: [{r['world_size']}] {r['test']} {r['why']}")
    skips = {}
    for r in records:
        if r["outcome"] == "skip":
            skips.setdefault(r["detail"], set()).add(r["test"])
    if skips:
        print("\nSkipped (reason: tests):")
        for why, names in sorted(skips.items()):
            names = sorted(names)
            shown = names if a.verbose or len(names) <= 8 else names[:6] + [
                f"... ({len(names) - 6} more; -v lists them)"]
            print(f"  {why} [{len(names)}]: {', '.join(shown)}")
    print(f"\n# {len(records)} results in {elapsed:.0f} s")


if __name__ == "__main__":
    if os.environ.get(WORKER_ENV):
        sys.exit(worker_main(json.loads(os.environ["COLL_TORCH_SUITE_CFG"])))
    sys.path.insert(0, HERE)
    from torch_python import reexec

    sys.exit(driver_main(reexec(sys.argv)[1:]))
