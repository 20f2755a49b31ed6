"""jitbmm from Python: batched semiring matrix products with JIT-compiled GPU kernels.

This module is pure Python over the C ABI (include/jitbmm/c_api.h) through ctypes; it needs neither torch nor a GPU
to import. ``jitbmm.torch`` holds the PyTorch functions.

The shared library ``libjitbmm_c.so`` (the C ABI with its C++ runtime linked in and hidden, so it coexists with
PyTorch's libraries) is found, in order, at ``$JITBMM_LIBRARY``, next to this package, or in the source tree's
build directories (``build/``, ``build-gpu/``).
"""

import ctypes
import os
from pathlib import Path

__all__ = ["JitbmmError", "NoDriverError", "CudaError", "CompileError", "LibraryNotFoundError", "Problem", "Plan",
           "reference", "version", "cache_dir", "set_tune_policy", "SEMIRINGS", "DTYPES"]

SEMIRINGS = ("log", "max_plus", "min_plus", "max_times", "plus_times")
DTYPES = ("f32", "f64", "f16", "bf16")


class JitbmmError(RuntimeError):
    """A failure inside jitbmm (see the subclasses)."""


class NoDriverError(JitbmmError):
    """No CUDA driver or GPU on this machine."""


class CudaError(JitbmmError):
    """A CUDA driver call failed."""


class CompileError(JitbmmError):
    """NVRTC rejected a generated kernel."""


class LibraryNotFoundError(ImportError):
    """libjitbmm_c.so could not be found or loaded."""


def _candidates():
    env = os.environ.get("JITBMM_LIBRARY")
    if env:
        yield Path(env)
        return
    here = Path(__file__).resolve().parent
    yield here / "libjitbmm_c.so"
    root = here.parent.parent
    for build in ("build", "build-gpu"):
        yield root / build / "libjitbmm_c.so"


_lib = None


def _library():
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for path in _candidates():
        tried.append(str(path))
        if path.exists():
            try:
                lib = ctypes.CDLL(str(path), mode=os.RTLD_LOCAL)
            except OSError as e:
                raise LibraryNotFoundError(f"jitbmm: could not load {path}: {e}") from e
            _declare(lib)
            _lib = lib
            return lib
    raise LibraryNotFoundError("jitbmm: libjitbmm_c.so not found (tried " + ", ".join(tried) +
                               "); build it (scripts/build) or set JITBMM_LIBRARY")


class _CProblem(ctypes.Structure):
    _fields_ = [("semiring", ctypes.c_char_p), ("dtype", ctypes.c_char_p), ("out_dtype", ctypes.c_char_p),
                ("B", ctypes.c_int64), ("M", ctypes.c_int64), ("K", ctypes.c_int64), ("N", ctypes.c_int64),
                ("a_strides", ctypes.c_int64 * 3), ("b_strides", ctypes.c_int64 * 3),
                ("out_strides", ctypes.c_int64 * 3), ("with_argmax", ctypes.c_int), ("precision", ctypes.c_char_p)]


def _declare(lib):
    status = ctypes.c_int
    lib.jitbmm_version.restype = ctypes.c_char_p
    lib.jitbmm_last_error.restype = ctypes.c_char_p
    lib.jitbmm_plan_create.argtypes = [ctypes.POINTER(_CProblem), ctypes.POINTER(ctypes.c_void_p)]
    lib.jitbmm_plan_create.restype = status
    lib.jitbmm_plan_run.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_void_p, ctypes.c_void_p]
    lib.jitbmm_plan_run.restype = status
    lib.jitbmm_plan_backward.argtypes = [ctypes.c_void_p] * 9
    lib.jitbmm_plan_backward.restype = status
    lib.jitbmm_set_tune_policy.argtypes = [ctypes.c_char_p]
    lib.jitbmm_set_tune_policy.restype = status
    lib.jitbmm_plan_kernel_name.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p)]
    lib.jitbmm_plan_kernel_name.restype = status
    lib.jitbmm_plan_destroy.argtypes = [ctypes.c_void_p]
    lib.jitbmm_plan_destroy.restype = None
    lib.jitbmm_reference.argtypes = [ctypes.POINTER(_CProblem), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_void_p]
    lib.jitbmm_reference.restype = status
    lib.jitbmm_cache_dir.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
    lib.jitbmm_cache_dir.restype = status


def _check(status):
    if status == 0:
        return
    message = _library().jitbmm_last_error().decode()
    if status == 1:
        raise ValueError(message)
    raise {2: NoDriverError, 3: CudaError, 4: CompileError}.get(status, JitbmmError)(message)


def version():
    return _library().jitbmm_version().decode()


def cache_dir():
    out = ctypes.c_char_p()
    _check(_library().jitbmm_cache_dir(ctypes.byref(out)))
    return out.value.decode()


def set_tune_policy(policy):
    """The tuning policy of this process: "never", "bucket" or "exact" (README, Caches); None: back to $JITBMM_TUNE."""
    _check(_library().jitbmm_set_tune_policy(policy.encode() if policy is not None else None))


def _row_major(batches, rows, cols):
    return (rows * cols, cols, 1)


class Problem:
    """out[B,M,N] = ⊕_k a[B,M,K] ⊗ b[B,K,N]; strides in elements (batch, row, col), default row-major."""

    def __init__(self, semiring, dtype, B, M, K, N, a_strides=None, b_strides=None, out_strides=None,
                 out_dtype=None, with_argmax=False, precision="exact"):
        if semiring not in SEMIRINGS:
            raise ValueError(f"semiring: unsupported {semiring!r} (expected one of {', '.join(SEMIRINGS)})")
        if dtype not in DTYPES:
            raise ValueError(f"dtype: unsupported {dtype!r} (expected one of {', '.join(DTYPES)})")
        self.semiring, self.dtype, self.out_dtype = semiring, dtype, out_dtype
        self.shape = (B, M, K, N)
        self.a_strides = tuple(a_strides or _row_major(B, M, K))
        self.b_strides = tuple(b_strides or _row_major(B, K, N))
        self.out_strides = tuple(out_strides or _row_major(B, M, N))
        self.with_argmax = bool(with_argmax)
        if precision not in ("exact", "fast"):
            raise ValueError(f"precision: unsupported {precision!r} (expected 'exact' or 'fast')")
        self.precision = precision

    def _c(self):
        B, M, K, N = self.shape
        return _CProblem(self.semiring.encode(), self.dtype.encode(),
                         self.out_dtype.encode() if self.out_dtype else None, B, M, K, N,
                         (ctypes.c_int64 * 3)(*self.a_strides), (ctypes.c_int64 * 3)(*self.b_strides),
                         (ctypes.c_int64 * 3)(*self.out_strides), int(self.with_argmax),
                         self.precision.encode())


class Plan:
    """A compiled kernel for one Problem on the current CUDA device (raises NoDriverError without a GPU)."""

    def __init__(self, problem):
        self.problem = problem
        self._c_problem = problem._c()
        handle = ctypes.c_void_p()
        _check(_library().jitbmm_plan_create(ctypes.byref(self._c_problem), ctypes.byref(handle)))
        self._handle = handle

    @property
    def kernel_name(self):
        name = ctypes.c_char_p()
        _check(_library().jitbmm_plan_kernel_name(self._handle, ctypes.byref(name)))
        return name.value.decode()

    def __call__(self, a_ptr, b_ptr, out_ptr, argmax_ptr=None, stream=None):
        """Launch on device pointers (integers), on `stream` (an integer CUstream handle; None: default stream)."""
        _check(_library().jitbmm_plan_run(self._handle, a_ptr, b_ptr, out_ptr, argmax_ptr, stream))

    def backward(self, a_ptr, b_ptr, out_ptr, argmax_ptr, grad_out_ptr, grad_a_ptr, grad_b_ptr, stream=None):
        """Gradients on device pointers: grad_out laid out like out, grad_a / grad_b (0 or None: not wanted) in a's
        and b's layouts. log reads out; the selecting semirings read argmax (None: recomputed)."""
        _check(_library().jitbmm_plan_backward(self._handle, a_ptr, b_ptr, out_ptr, argmax_ptr, grad_out_ptr,
                                               grad_a_ptr or None, grad_b_ptr or None, stream))

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle is not None and handle.value and _lib is not None:
            _lib.jitbmm_plan_destroy(handle)


def reference(problem, a_ptr, b_ptr, out_ptr, argmax_ptr=None):
    """The CPU reference on host memory (addresses as integers): out is double[B*M*N], argmax int32[B*M*N]."""
    c = problem._c()
    _check(_library().jitbmm_reference(ctypes.byref(c), a_ptr, b_ptr, out_ptr, argmax_ptr))
