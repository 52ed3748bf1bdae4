"""Which Python (and so which torch) a torch test runs under.

The torch tests run once per supported torch version: Debian's /usr/bin/python3 with
python3-torch, and one virtual environment per pip version that ./run.sh makes under
BUILD/venv/torch-X.Y (tests/python/meson.build names them).  meson starts each test with
/usr/bin/python3 and `--python PATH`; the test calls reexec(sys.argv) first, which takes
--python out of the arguments and starts the test again under PATH, or exits 77 (meson's
"skipped") saying why when PATH is not there.
"""
import os
import sys


def reexec(argv):
    """Returns argv without --python PATH once running under PATH (execs it if need be)."""
    args = list(argv[1:])
    python = None
    for i, a in enumerate(args):
        if a == "--python" and i + 1 < len(args):
            python = args[i + 1]
            del args[i:i + 2]
            break
        if a.startswith("--python="):
            python = a.split("=", 1)[1]
            del args[i]
            break
    if python is None or os.path.realpath(python) == os.path.realpath(sys.executable):
        return [argv[0]] + args
    if not os.path.exists(python):
        venv = os.path.dirname(os.path.dirname(python))
        print(f"SKIP: {python} is not there: ./run.sh makes the torch virtual environment "
              f"{venv} when pip can install that torch (its log beside it says why not)")
        sys.stdout.flush()
        os._exit(77)
    sys.stdout.flush()
    os.execv(python, [python, os.path.abspath(argv[0])] + args)
    return None  # not reached
