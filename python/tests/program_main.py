"""The main of a test program run as a CTest entry (the jitbmm.torch and jitbmm.jax programs): 77 ("skipped") with
the reason where what it needs is missing; otherwise every test runs, in a jitbmm cache of its own (tests count the
decisions they store, and a user's cache or an earlier run's may hold them), removed once the builds jitbmm still
runs in the background have ended, and the run fails if a test is skipped or none ran."""

import os
import sys
import tempfile
import unittest


def run(missing=None):
    """Runs the calling program's tests; `missing`: why it cannot run here (it is then skipped), or None."""
    if missing:
        print(f"SKIPPED: {missing}")
        return 77
    with tempfile.TemporaryDirectory() as cache:
        os.environ["JITBMM_CACHE_DIR"] = cache
        result = unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[1:], exit=False).result
        if "jitbmm" in sys.modules:  # builds still running in the background write into the cache
            sys.modules["jitbmm"].wait_for_builds()
    if result.skipped:
        print(f"FAILED: {len(result.skipped)} tests skipped where they should run: {result.skipped}")
        return 1
    if result.testsRun == 0:
        print("FAILED: no test ran")
        return 1
    return 0 if result.wasSuccessful() else 1
