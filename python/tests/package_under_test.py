"""Which jitbmm the tests import: the source tree's python/jitbmm (the default, with the library from the build,
JITBMM_LIBRARY), or with JITBMM_TEST_INSTALLED=1 the installed package (scripts/check-wheel), which must then come
from outside the source tree and find its own library."""

import os
import sys
from pathlib import Path

SOURCE_PYTHON = Path(__file__).resolve().parent.parent  # python/ of the source tree
SOURCE_ROOT = SOURCE_PYTHON.parent
INSTALLED = os.environ.get("JITBMM_TEST_INSTALLED") == "1"


def import_path():
    """Put the source tree's package first on sys.path unless the installed one is under test."""
    if not INSTALLED and str(SOURCE_PYTHON) not in sys.path:
        sys.path.insert(0, str(SOURCE_PYTHON))


def child_env(**extra):
    """The environment for a child Python that must import the same jitbmm as this process."""
    env = dict(os.environ, **extra)
    if not INSTALLED:
        env["PYTHONPATH"] = str(SOURCE_PYTHON)
    return env


def gpu_main(torch, may_skip=None):
    """The main of a GPU test program (run as a CTest entry): it returns 77 ("skipped") where torch or a CUDA GPU
    is missing; otherwise it runs every test, in a jitbmm cache of its own (tests count the decisions they store,
    and a user's cache or an earlier run's may hold them), and fails the run if a test is skipped (unless its reason
    contains `may_skip`) or none ran."""
    import tempfile
    import unittest
    if torch is None:
        print("SKIPPED: torch is not installed here")
        return 77
    if not torch.cuda.is_available():
        print("SKIPPED: torch sees no CUDA GPU here")
        return 77
    with tempfile.TemporaryDirectory() as cache:
        os.environ["JITBMM_CACHE_DIR"] = cache
        result = unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[1:], exit=False).result
    skipped = [s for s in result.skipped if not (may_skip and may_skip in s[1])]
    if skipped:
        print(f"FAILED: {len(skipped)} tests skipped where torch and a GPU exist: {skipped}")
        return 1
    if result.testsRun == 0:
        print("FAILED: no test ran")
        return 1
    return 0 if result.wasSuccessful() else 1
