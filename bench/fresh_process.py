"""The environment of a user's very first process, for the first-call benchmarks: jitbmm's cache empty, and the CUDA
driver's compute cache empty too. NVRTC (12.9 and later) keeps the PTX and cubin of what it compiles in the driver's
cache and serves a source it has compiled before from there, so a first call measured on a machine that has run the
test suites would be served compiles that a user's machine does not have. NVRTC's log of each compile is kept
(JITBMM_LOG=debug) and read back by `compiles`."""

import os
import re

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")
COMPILE = re.compile(r"NVRTC compiled (\S+)( \(a quick build\))? for \S+ in ([0-9]+) ms")


def fresh_env(root, **extra):
    """The environment of a new process whose caches are two new folders under `root` (a folder of its own)."""
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, JITBMM_CACHE_DIR=os.path.join(root, "jitbmm"), CUDA_CACHE_PATH=os.path.join(root, "driver"),
                PYTHONPATH=PYTHON_DIR + (os.pathsep + path if path else ""), JITBMM_LOG="debug", **extra)


def compiles(stderr):
    """(kernel, ms) of each NVRTC compile a process's stderr logged; a quick build's kernel (a stand-in's, with less
    optimisation) named "<kernel> (quick)"."""
    return [(name + (" (quick)" if quick else ""), int(ms)) for name, quick, ms in COMPILE.findall(stderr)]
