"""jitbmm from Python: batched semiring matrix products with JIT-compiled GPU kernels.

This module is pure Python over the C ABI (include/jitbmm/c_api.h) through ctypes; it needs neither torch nor a GPU
to import. ``jitbmm.torch`` holds the PyTorch functions.

The shared library ``libjitbmm_c.so`` (the C ABI with its C++ runtime linked in and hidden, so it coexists with
PyTorch's libraries) is found, in order, at ``$JITBMM_LIBRARY``, next to this package (where the wheel puts it), or
in the source tree's build directories (``build/``, ``build-gpu/``). ``jitbmm.__version__`` is the library's
version (include/jitbmm/version.hpp, the one place it is written).
"""

import copy
import ctypes
import os
from pathlib import Path

from ._abi import _CChainProblem, _CProblem, _chain_problem, _declare  # noqa: F401 (used as jitbmm._...)
from ._arguments import _INT64_MAX, _UINTPTR_MAX, _OPERANDS, _checked, _choice, _flag, _integer  # noqa: F401 (as above)
from ._arguments import _pointer, _shape, _stride_property, _strides

__all__ = ["JitbmmError", "NoDriverError", "NoNvrtcError", "UnsupportedDeviceError", "CudaError", "CompileError",
           "LibraryNotFoundError", "Problem", "Plan", "prepare", "reference", "version", "cache_dir", "set_tune_policy",
           "release_pool_memory", "wait_for_builds", "export_choices", "import_choices", "chain_strategy", "SEMIRINGS",
           "DTYPES"]
# SEMIRINGS and DTYPES come from the library's own tables (_read_tables below).


class JitbmmError(RuntimeError):
    """A failure inside jitbmm (see the subclasses)."""


class NoDriverError(JitbmmError):
    """No CUDA driver or GPU on this machine."""


class NoNvrtcError(JitbmmError):
    """NVRTC, which compiles jitbmm's kernels, could not be loaded; the message names every place tried
    (docs/install.md)."""


class UnsupportedDeviceError(JitbmmError):
    """The GPU is older than the architectures jitbmm compiles for with this NVRTC; the message names the device,
    its architecture and the oldest one supported (docs/install.md)."""


class CudaError(JitbmmError):
    """A CUDA driver call failed."""


class CompileError(JitbmmError):
    """NVRTC rejected a generated kernel."""


class LibraryNotFoundError(ImportError):
    """libjitbmm_c.so could not be found or loaded."""


def _candidates():
    env = os.environ.get("JITBMM_LIBRARY")
    if env:
        yield Path(env).absolute()  # the file checked is the one loaded (a bare name would be searched for)
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
            try:
                _declare(lib)
            except AttributeError as e:  # a symbol this package calls is missing: another jitbmm's library
                raise LibraryNotFoundError(f"jitbmm: {path} is not this jitbmm's C library ({e}); rebuild it "
                                           "(scripts/build) or point JITBMM_LIBRARY at the one it came with") from e
            _read_tables(lib)
            _lib = lib
            return lib
    raise LibraryNotFoundError("jitbmm: libjitbmm_c.so not found (tried " + ", ".join(tried) +
                               "); build it (scripts/build) or set JITBMM_LIBRARY")


# The C ABI's jitbmm_backward_kind values: how a semiring's backward sends grad_out to the operands.
_BACKWARD_MARGINAL = 0
_BACKWARD_ARGMAX_SCATTER = 1
_TABLES = ("SEMIRINGS", "DTYPES", "_SEMIRING_BACKWARD")


def _read_tables(lib):
    """SEMIRINGS, DTYPES and each semiring's backward kind from the library's own tables (the C ABI's index i is the
    C++ enum value i); read once, when the library loads."""
    semirings = tuple(lib.jitbmm_semiring_name(i).decode() for i in range(lib.jitbmm_semiring_count()))
    globals().update(SEMIRINGS=semirings,
                     DTYPES=tuple(lib.jitbmm_dtype_name(i).decode() for i in range(lib.jitbmm_dtype_count())),
                     _SEMIRING_BACKWARD={name: lib.jitbmm_semiring_backward(i) for i, name in enumerate(semirings)})


def __getattr__(name):
    """SEMIRINGS, DTYPES (tuples of names, in the C ABI's order) and __version__ load the library on first use, so
    that importing jitbmm needs no library (PEP 562)."""
    if name == "__version__":
        return version()
    if name in _TABLES:
        _library()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _table(name):
    """One of the tables above, from code in this package (a bare global name does not reach __getattr__)."""
    return globals()[name] if name in globals() else __getattr__(name)


# The C ABI's jitbmm_status values other than JITBMM_OK (0), by the exception each becomes (others: JitbmmError).
_STATUS_ERRORS = {1: ValueError, 2: NoDriverError, 3: CudaError, 4: CompileError, 6: NoNvrtcError,
                  7: UnsupportedDeviceError}


def _check(status):
    if status == 0:
        return
    # A path in a message is bytes as the file system has them: any that are not UTF-8 are shown escaped.
    message = _library().jitbmm_last_error().decode(errors="backslashreplace")
    raise _STATUS_ERRORS.get(status, JitbmmError)(message)


def release_pool_memory():
    """Gives back to the driver the scratch memory jitbmm's pools keep for calls made without a workspace
    (docs/cpp-api.md, Workspaces), all of it that no call is using, on every device."""
    _check(_library().jitbmm_release_pool_memory())


def wait_for_builds():
    """Waits until every build this process runs in the background has ended, built or failed: the chosen variants
    or strategy a stand-in serves for (docs/caching-and-tuning.md, "First calls"). Call it before removing the cache
    directory the process used (a build writes there); the process waits for them at its end in any case. Returns at
    once where the library was never loaded: no build can have started."""
    if _lib is not None:
        _check(_lib.jitbmm_wait_for_builds())


def version():
    return _library().jitbmm_version().decode()


def cache_dir():
    out = ctypes.c_char_p()
    _check(_library().jitbmm_cache_dir(ctypes.byref(out)))
    return os.fsdecode(out.value)


def export_choices():
    """The kernel variants this process settled on (by a stored decision or tuning), as text: one line per pass and
    problem. jitbmm.torch.share_choices sends rank 0's to every rank."""
    out = ctypes.c_char_p()
    _check(_library().jitbmm_export_choices(ctypes.byref(out)))
    return out.value.decode()


def import_choices(text):
    """Stores another process's export_choices() text as this machine's decisions for the current device, so plans
    made from now on in this process (and later ones) use those variants; returns how many. Malformed text raises
    ValueError naming the line, and nothing is stored."""
    if not isinstance(text, str):
        raise TypeError(f"text: expected a str, got {type(text).__name__}")
    if "\0" in text:  # the C ABI reads the text up to its first NUL: the rest would go unread, and unrefused
        raise ValueError("text: contains a NUL character; choices are lines of text")
    n = ctypes.c_size_t()
    _check(_library().jitbmm_import_choices(text.encode(), ctypes.byref(n)))
    return n.value


_TUNE_POLICIES = ("never", "bucket", "exact")


def set_tune_policy(policy):
    """The tuning policy of this process: "never", "bucket" or "exact"
    (docs/caching-and-tuning.md); None: back to $JITBMM_TUNE."""
    if policy is not None and (not isinstance(policy, str) or policy not in _TUNE_POLICIES):
        raise ValueError(f"policy: expected one of {', '.join(_TUNE_POLICIES)} or None, got {policy!r}")
    _check(_library().jitbmm_set_tune_policy(policy.encode() if policy is not None else None))


class Problem:
    """out[B,M,N] = ⊕_k a[B,M,K] ⊗ b[B,K,N]; strides in elements (batch, row, col), default row-major.

    Sizes are integers in [0, 2**63 - 1], strides exactly three non-negative integers; anything else (floats, bools,
    two or four strides, values that do not fit int64) raises TypeError or ValueError naming the argument, both in
    the constructor and on every later assignment of an attribute (the C structure is only ever built from checked
    values). Strides given as None are the row-major ones of the current shape."""

    semiring = _checked("semiring", lambda self, v: _choice(v, "semiring", _table("SEMIRINGS")))
    dtype = _checked("dtype", lambda self, v: _choice(v, "dtype", _table("DTYPES")))
    out_dtype = _checked("out_dtype", lambda self, v: _choice(v, "out_dtype", _table("DTYPES"), allow_none=True))
    shape = _checked("shape", lambda self, v: _shape(v, self._row_major_operands()))
    a_strides = _stride_property("a")
    b_strides = _stride_property("b")
    out_strides = _stride_property("out")
    with_argmax = _checked("with_argmax", lambda self, v: _flag(v, "with_argmax"))
    precision = _checked("precision", lambda self, v: _choice(v, "precision", ("exact", "fast")))

    def __init__(self, semiring, dtype, B, M, K, N, a_strides=None, b_strides=None, out_strides=None,
                 out_dtype=None, with_argmax=False, precision="exact"):
        self.semiring = semiring
        self.dtype = dtype
        self.out_dtype = out_dtype
        shape = _shape((B, M, K, N))  # the sizes are named before any stride
        self._a_strides = None if a_strides is None else _strides(a_strides, "a_strides")
        self._b_strides = None if b_strides is None else _strides(b_strides, "b_strides")
        self._out_strides = None if out_strides is None else _strides(out_strides, "out_strides")
        self.shape = shape  # the row-major strides of the operands given none must fit
        self.with_argmax = with_argmax
        self.precision = precision

    def _row_major_operands(self):
        return tuple(o for o in _OPERANDS if getattr(self, f"_{o}_strides", None) is None)

    def _c(self):
        # Every field checked again (cheap), so only checked values reach C whatever was written to the object.
        B, M, K, N = _shape(self._shape, self._row_major_operands())
        a_strides, b_strides, out_strides = (_strides(getattr(self, o + "_strides"), o + "_strides") for o in _OPERANDS)
        out_dtype = _choice(self._out_dtype, "out_dtype", _table("DTYPES"), allow_none=True)
        return _CProblem(_choice(self._semiring, "semiring", _table("SEMIRINGS")).encode(),
                         _choice(self._dtype, "dtype", _table("DTYPES")).encode(),
                         out_dtype.encode() if out_dtype else None, B, M, K, N,
                         (ctypes.c_int64 * 3)(*a_strides), (ctypes.c_int64 * 3)(*b_strides),
                         (ctypes.c_int64 * 3)(*out_strides), int(_flag(self._with_argmax, "with_argmax")),
                         _choice(self._precision, "precision", ("exact", "fast")).encode())


class Plan:
    """A compiled kernel for one Problem on the current CUDA device (raises NoDriverError without a GPU), for calls
    on `stream` (an integer CUstream handle; None: the default stream): while that stream is being captured into a
    CUDA graph, the variant is a stored decision's or the default, and nothing is tuned."""

    def __init__(self, problem, stream=None):
        if not isinstance(problem, Problem):
            raise TypeError(f"problem: expected a jitbmm.Problem, got {type(problem).__name__}")
        self._c_problem = problem._c()
        self.problem = copy.copy(problem)  # the plan's, as made: later changes to the caller's do not show here
        handle = ctypes.c_void_p()
        _check(_library().jitbmm_plan_create_on_stream(ctypes.byref(self._c_problem), _pointer(stream, "stream"),
                                                       ctypes.byref(handle)))
        self._handle = handle
        self._workspace_bytes = None
        self._backward_workspace_bytes = {}

    @property
    def workspace_bytes(self):
        """The scratch bytes one forward call takes (0 for most direct kernels)."""
        if self._workspace_bytes is None:
            n = ctypes.c_size_t()
            _check(_library().jitbmm_plan_workspace_bytes(self._handle, ctypes.byref(n)))
            self._workspace_bytes = n.value
        return self._workspace_bytes

    def backward_workspace_bytes(self, grad_a=True, grad_b=True, argmax_given=True, stream=None):
        """The scratch bytes one backward call takes for the gradients asked for (chooses the passes' kernels, for
        calls on `stream`: nothing is tuned while it is being captured); argmax_given: the selecting semirings get
        the forward's argmax (else they recompute it)."""
        key = (_flag(grad_a, "grad_a"), _flag(grad_b, "grad_b"), _flag(argmax_given, "argmax_given"))
        if key not in self._backward_workspace_bytes:
            n = ctypes.c_size_t()
            _check(_library().jitbmm_plan_backward_workspace_bytes_on_stream(
                self._handle, *map(int, key), _pointer(stream, "stream"), ctypes.byref(n)))
            self._backward_workspace_bytes[key] = n.value
        return self._backward_workspace_bytes[key]

    @property
    def kernel_name(self):
        """The kernel calls run now."""
        name = ctypes.c_char_p()
        _check(_library().jitbmm_plan_kernel_name(self._handle, ctypes.byref(name)))
        return name.value.decode()

    @property
    def settled(self):
        """False while a stand-in (quick builds of the default variants) runs the calls for the variant the plan
        chose, which is being built in the background (docs/caching-and-tuning.md, "First calls"); then True."""
        settled = ctypes.c_int()
        _check(_library().jitbmm_plan_settled(self._handle, ctypes.byref(settled)))
        return bool(settled.value)

    def __call__(self, a_ptr, b_ptr, out_ptr, argmax_ptr=None, stream=None, workspace_ptr=None, workspace_bytes=0):
        """Launch on device pointers (integers), on `stream` (an integer CUstream handle; None: default stream).
        workspace_ptr / workspace_bytes: the call's scratch (at least `workspace_bytes` of this plan, 256-byte
        aligned, stream-ordered; docs/cpp-api.md, Workspaces); None: jitbmm's own pool."""
        _check(_library().jitbmm_plan_run_with_workspace(
            self._handle, _pointer(a_ptr, "a_ptr"), _pointer(b_ptr, "b_ptr"), _pointer(out_ptr, "out_ptr"),
            _pointer(argmax_ptr, "argmax_ptr"), _pointer(workspace_ptr, "workspace_ptr"),
            _integer(workspace_bytes, "workspace_bytes", 0, _UINTPTR_MAX), _pointer(stream, "stream")))

    def backward(self, a_ptr, b_ptr, out_ptr, argmax_ptr, grad_out_ptr, grad_a_ptr, grad_b_ptr, stream=None,
                 workspace_ptr=None, workspace_bytes=0):
        """Gradients on device pointers: grad_out laid out like out, grad_a / grad_b (0 or None: not wanted) in a's
        and b's layouts. log reads out; the selecting semirings read argmax (None: recomputed). workspace: as for
        a call, sized by backward_workspace_bytes."""
        _check(_library().jitbmm_plan_backward_with_workspace(
            self._handle, _pointer(a_ptr, "a_ptr"), _pointer(b_ptr, "b_ptr"), _pointer(out_ptr, "out_ptr"),
            _pointer(argmax_ptr, "argmax_ptr"), _pointer(grad_out_ptr, "grad_out_ptr"),
            _pointer(grad_a_ptr, "grad_a_ptr"), _pointer(grad_b_ptr, "grad_b_ptr"),
            _pointer(workspace_ptr, "workspace_ptr"), _integer(workspace_bytes, "workspace_bytes", 0, _UINTPTR_MAX),
            _pointer(stream, "stream")))

    def __copy__(self):
        raise TypeError("a jitbmm.Plan owns its C plan and cannot be copied: make another with Plan(problem)")

    __deepcopy__ = __reduce__ = lambda self, *_: self.__copy__()  # noqa: E731

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle is not None and handle.value and _lib is not None:
            _lib.jitbmm_plan_destroy(handle)


def prepare(problem, grad_a=True, grad_b=True):
    """Compiles at once, on the CPU's cores, the kernels a Plan of `problem` and a backward writing the gradients
    named will load, so that a first training step waits for its longest compile rather than for the sum of them;
    plans and launches nothing (jitbmm.torch does this itself for a first call that will be differentiated)."""
    if not isinstance(problem, Problem):
        raise TypeError(f"problem: expected a jitbmm.Problem, got {type(problem).__name__}")
    c, a, b = problem._c(), int(_flag(grad_a, "grad_a")), int(_flag(grad_b, "grad_b"))
    _check(_library().jitbmm_plan_prepare(ctypes.byref(c), a, b))


def reference(problem, a_ptr, b_ptr, out_ptr, argmax_ptr=None):
    """The CPU reference on host memory at the integer addresses given (not buffers: ctypes.addressof of a ctypes
    array, an array.array's buffer_info()[0], a NumPy array's ctypes.data): a and b hold the problem's dtype, out is
    double[B*M*N], argmax int32[B*M*N]."""
    if not isinstance(problem, Problem):
        raise TypeError(f"problem: expected a jitbmm.Problem, got {type(problem).__name__}")
    c = problem._c()
    _check(_library().jitbmm_reference(ctypes.byref(c), _pointer(a_ptr, "a_ptr"), _pointer(b_ptr, "b_ptr"),
                                       _pointer(out_ptr, "out_ptr"), _pointer(argmax_ptr, "argmax_ptr")))


from ._chains import chain_strategy  # noqa: E402  (it reads this module's helpers when called)
