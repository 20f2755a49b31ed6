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

