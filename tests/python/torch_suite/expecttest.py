"""Stand-in for the `expecttest` module, which PyTorch's test utilities import.

Debian ships torch's test utilities (torch.testing._internal) without the
`expecttest` package they import.  The distributed suite uses none of its
inline-expectation features, only its TestCase as a base class and its ACCEPT
flag, so these two names are all that run_torch_suite.py needs.  The runner puts
this directory on sys.path only when no real `expecttest` can be imported.
"""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    """unittest.TestCase; assertExpectedInline is not supported here."""

    def assertExpectedInline(self, actual, expect, skip=0):  # noqa: N802 (unittest style)
        self.assertEqual(str(actual).strip(), str(expect).strip())
