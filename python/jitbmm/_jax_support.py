"""What jitbmm.jax's modules share (docs/jax.md): the registration of the library's XLA FFI handlers with JAX, their
calls, and the checks a call makes when it is traced, with errors naming the argument."""

import contextvars
import ctypes
import functools
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import custom_batching
from jaxlib import xla_client

import jitbmm

DTYPES = {jnp.dtype(jnp.float32): "f32", jnp.dtype(jnp.float64): "f64", jnp.dtype(jnp.float16): "f16",
           jnp.dtype(jnp.bfloat16): "bf16"}
_TARGETS = ("bmm", "bmm_backward", "chain", "chain_backward", "hmm", "hmm_backward", "chain_expectation",
            "chain_expectation_backward", "hmm_expectation", "hmm_expectation_backward", "chain_kbest",
            "chain_sample", "hmm_kbest", "hmm_sample")


# ---- Registration -------------------------------------------------------------------------------------------------

def ffi_api_version():
    """(major, minor) of the XLA FFI API the library's handlers were compiled against."""
    lib = _handlers()
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.jitbmm_xla_ffi_api_version(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


@functools.lru_cache(maxsize=None)
def _handlers():
    lib = jitbmm._library()
    if not hasattr(lib, "jitbmm_xla_bmm"):
        raise RuntimeError("jitbmm.jax: this libjitbmm_c.so was built without XLA's FFI headers, so it has no JAX "
                           "handlers: install jaxlib before building jitbmm (or set JITBMM_XLA_FFI_INCLUDE); "
                           "docs/jax.md")
    lib.jitbmm_xla_ffi_api_version.argtypes = [ctypes.POINTER(ctypes.c_int)] * 2
    lib.jitbmm_xla_ffi_api_version.restype = ctypes.c_int
    size, problem = ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(jitbmm._CChainProblem)
    lib.jitbmm_xla_bmm_workspace.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                             *[ctypes.c_int64] * 4, *[ctypes.c_int] * 4, size]
    for name in ("chain", "chain_expectation", "chain_kbest", "chain_sample"):
        getattr(lib, f"jitbmm_xla_{name}_workspace").argtypes = [ctypes.c_int, problem, ctypes.c_int, size]
    for name in ("bmm", "chain", "chain_expectation", "chain_kbest", "chain_sample"):
        getattr(lib, f"jitbmm_xla_{name}_workspace").restype = ctypes.c_int
    lib.jitbmm_xla_plan_tables_emptied.argtypes = []
    lib.jitbmm_xla_plan_tables_emptied.restype = ctypes.c_ulonglong
    return lib


def _jaxlib_api_version():
    """The XLA FFI API version of the installed jaxlib's headers, or None where it ships none."""
    try:
        header = Path(jax.ffi.include_dir()) / "xla" / "ffi" / "api" / "c_api.h"
        text = header.read_text()
    except (AttributeError, OSError):
        return None
    found = [re.search(rf"#define XLA_FFI_API_{part}\s+(\d+)", text) for part in ("MAJOR", "MINOR")]
    return tuple(int(m.group(1)) for m in found) if all(found) else None


@functools.lru_cache(maxsize=None)
def registered():
    """Registers every handler with JAX for CUDA, once; refuses handlers of another FFI API major version than
    this jaxlib's, or of a newer minor one (an older XLA cannot run them)."""
    lib = _handlers()
    ours, theirs = ffi_api_version(), _jaxlib_api_version()
    if theirs is not None and (ours[0] != theirs[0] or ours[1] > theirs[1]):
        raise RuntimeError(f"jitbmm.jax: the library's handlers were built for XLA FFI API {ours[0]}.{ours[1]}, "
                           f"but this jaxlib ({jax.__version__}) speaks {theirs[0]}.{theirs[1]}: rebuild jitbmm "
                           f"against this jaxlib")
    # A call launches the same kernels every time (its plan was made when it was traced, its scratch is a result), so
    # XLA may record it into its CUDA graphs.
    traits = getattr(getattr(xla_client, "CustomCallTargetTraits", None), "COMMAND_BUFFER_COMPATIBLE", None)
    for target in _TARGETS:
        jax.ffi.register_ffi_target(f"jitbmm_{target}", jax.ffi.pycapsule(getattr(lib, f"jitbmm_xla_{target}")),
                                    platform="CUDA", **({} if traits is None else {"traits": traits}))
    return True


def call(target, results, *args, workspace=None, vmap_method=None, **attrs):
    """The handler's results, `results` (one or a tuple). A handler that takes scratch has a last result more, its
    workspace of `workspace` bytes (workspace_bytes), which XLA allocates and the caller never sees."""
    registered()
    if workspace is None:
        return jax.ffi.ffi_call(f"jitbmm_{target}", results, vmap_method=vmap_method)(*args, **attrs)
    single = not isinstance(results, tuple)
    declared = (*((results,) if single else results), jax.ShapeDtypeStruct((workspace,), jnp.uint8))
    out = jax.ffi.ffi_call(f"jitbmm_{target}", declared, vmap_method=vmap_method)(*args, **attrs)[:-1]
    return out[0] if single else out


# ---- Workspaces, sized at trace time ------------------------------------------------------------------------------

def workspace_device():
    """The CUDA ordinal of the device the calls being traced will run on: JAX's default device where it is a GPU,
    else this process's first GPU (in a run of many processes jax.devices() lists every process's, the first of
    them perhaps another's); None where JAX has no GPU (nothing traced then can run)."""
    default = jax.config.jax_default_device
    if default is not None and getattr(default, "platform", None) == "gpu":
        device = default
    else:
        try:
            device = jax.local_devices(backend="gpu")[0]
        except (RuntimeError, IndexError):
            return None
    ordinal = getattr(device, "local_hardware_id", None)
    return device.id if ordinal is None else ordinal


# Set while custom_vmap traces the body of a call whose arguments are vmapped: that body's problem never runs.
_VMAPPED_BODY = contextvars.ContextVar("jitbmm_vmapped_body", default=False)


def _vmapped(args):
    """Whether any of args is a vmap's tracer with a vmapped axis (its batch_dim an axis, not None: JAX does not
    export the class), so that a custom_vmap call of it goes to its rule."""
    return any(isinstance(x, jax.core.Tracer) and isinstance(getattr(x, "batch_dim", None), int)
               for x in jax.tree_util.tree_leaves(args))


def _traced_with(fun, vmapped_body):
    """fun, run with _VMAPPED_BODY set to vmapped_body while it runs (while JAX traces it)."""
    @functools.wraps(fun)
    def body(*args, **kwargs):
        token = _VMAPPED_BODY.set(vmapped_body)
        try:
            return fun(*args, **kwargs)
        finally:
            _VMAPPED_BODY.reset(token)
    return body


class custom_vmap(custom_batching.custom_vmap):
    """jax.custom_batching.custom_vmap whose body sizes no workspace (workspace_bytes gives 0 and makes no plan) in a
    call whose arguments are vmapped. custom_vmap traces the body at the unbatched shapes on every call, but a
    vmapped call is then taken over by its rule, which calls again with the batch's shapes: only that problem runs,
    and only its plan is made and tuned. The two bodies are two functions, each tracing as it always does, since JAX
    may keep a body's trace by its function and shapes and use it again: a vmapped call's body of 0 bytes must never
    be the one a plain call of the same shapes runs (jax.jacrev's rows, a call in a scan of a rule)."""

    def __init__(self, fun):
        super().__init__(_traced_with(fun, False))
        self._unplanned = custom_batching.custom_vmap(_traced_with(fun, True))

    def def_vmap(self, rule):
        self._unplanned.def_vmap(rule)
        return super().def_vmap(rule)

    def __call__(self, *args, **kwargs):
        if _vmapped((args, kwargs)):
            return self._unplanned(*args, **kwargs)
        return super().__call__(*args, **kwargs)


def workspace_bytes(target, *problem):
    """The bytes of the workspace result of a call of handler family `target` ("bmm", "chain", "chain_expectation",
    "chain_kbest", "chain_sample") of `problem` (the arguments of its jitbmm_xla_*_workspace function after the
    device; a chain's problem as (semiring, dtype, form, B, T, C, with_lengths[, batched_transitions,
    batched_initial]), then its last argument): the library makes the problem's
    plan on the device now, as the handler's calls will find it, and says what its calls take. Tracing is where a
    plan is made, tuned and compiled, so that a call only launches; a trace without a GPU sizes nothing, nor does the
    body of a vmapped call (custom_vmap above)."""
    if _VMAPPED_BODY.get():
        return 0
    device = workspace_device()
    if device is None:
        return 0
    # Known sizes stand for plans the handlers' tables hold: once a table has started again, each is asked anew.
    return _workspace_bytes(device, target, problem, _handlers().jitbmm_xla_plan_tables_emptied())


@functools.lru_cache(maxsize=4096)
def _workspace_bytes(device, target, problem, _tables_emptied):
    lib = _handlers()
    n = ctypes.c_size_t()
    if target == "bmm":
        semiring, precision, dtype, *rest = problem
        status = lib.jitbmm_xla_bmm_workspace(device, semiring.encode(), precision.encode(), dtype.encode(), *rest,
                                              ctypes.byref(n))
    else:
        (semiring, dtype, form, B, T, C, with_lengths, *batched), last = problem[:-1], problem[-1]
        chain = jitbmm._chain_problem(semiring, dtype, B, T, C, with_lengths, form, *batched)
        status = getattr(lib, f"jitbmm_xla_{target}_workspace")(device, ctypes.byref(chain), last, ctypes.byref(n))
    jitbmm._check(status)
    return n.value


# ---- Checks at trace time -----------------------------------------------------------------------------------------

def check_array(x, name):
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise TypeError(f"{name}: expected a JAX array, got {type(x).__name__}")
    x = jnp.asarray(x)
    if x.dtype not in DTYPES:
        raise TypeError(f"{name}: unsupported dtype {x.dtype} (expected float32, float64, float16 or bfloat16)")
    return x


def check_on_gpu(**arrays):
    """Concrete arrays must be on a CUDA device (traced ones run where jit places them); checked after their shapes."""
    for name, x in arrays.items():
        devices = getattr(x, "devices", None)
        if x is None or isinstance(x, jax.core.Tracer) or devices is None:
            continue
        for d in devices():
            if d.platform != "gpu":
                raise ValueError(f"{name}: on {d.platform} ({d}); jitbmm has CUDA kernels only: put it on a GPU")


def clipped_lengths(lengths, batch, name="lengths"):
    """lengths [*batch] of any integer dtype as int32, checked: beyond int32 a length is out of range anyway (the
    kernels give NaN), so it is clipped, never wrapped into range."""
    if not hasattr(lengths, "shape"):
        raise TypeError(f"{name}: expected an integer JAX array or None, got {type(lengths).__name__}")
    # Only a dtype wider than int32 is clipped, with bounds it holds (a clip casts its bounds to the array's dtype:
    # -1 in uint8 is 255, 2**31 - 1 in int16 is -1). A host array is clipped before JAX takes it, which without x64
    # would wrap a 64-bit one into int32 first.
    xp = jnp if isinstance(lengths, jax.Array) else np
    lengths = xp.asarray(lengths)
    if not np.issubdtype(lengths.dtype, np.integer):
        raise TypeError(f"{name}: expected an integer dtype, got {lengths.dtype}")
    if lengths.shape != tuple(batch):
        raise ValueError(f"{name}: expected shape {tuple(batch)} (the batch), got {lengths.shape}")
    info, top = np.iinfo(lengths.dtype), np.iinfo(np.int32).max
    if info.min < -1 or info.max > top:
        lengths = xp.clip(lengths, max(info.min, -1), min(info.max, top))
    return jnp.asarray(lengths.astype(np.int32))


def lengths_operand(lengths, batch, name="lengths"):
    """lengths [*batch] of any integer dtype as the handlers read them: int32 pairs [*batch, 2] holding each as an
    int64 (low half, then the sign), or an empty array for none."""
    if lengths is None:
        return jnp.zeros((0,), jnp.int32)
    low = clipped_lengths(lengths, batch, name)
    return jnp.stack([low, jnp.where(low < 0, -1, 0).astype(jnp.int32)], -1)


def score_dtype(dtype):
    return jnp.float32 if dtype in (jnp.float16, jnp.bfloat16) else dtype



def folded(shape):
    return int(np.prod(shape, dtype=np.int64))


def absent(x):
    """Whether x stands for an absent operand or result: an array of shape (0,), which the handlers read as none (a
    real operand with no elements, such as the potentials of sequences of one position, has more dimensions)."""
    return x.shape == (0,)


def lead(x, batched, size):
    """x with the vmapped axis in front: as it is where batched, else broadcast to `size` there (an absent operand
    stays as it is)."""
    if batched or absent(x):
        return x
    return jnp.broadcast_to(x, (size, *x.shape))


def saved_batched_apart():
    """The error of a backward whose forward's saved messages come vmapped apart from it: a pullback returned out of
    jax.vmap and called under another (the messages are the whole folded batch's, one buffer, not a row each)."""
    return NotImplementedError("jitbmm.jax: a pullback returned out of jax.vmap and called under another vmap is not "
                               "supported (its forward's saved messages are one buffer of the whole batch); call the "
                               "pullback inside the same vmap, or take jax.grad there")


def per_row(size, backward, operands, rows):
    """A backward's results where only its upstream gradients are vmapped (jax.jacrev, a vmapped pullback): the
    forward's operands and saved messages are one problem's, not the batch the handler would fold the vmapped axis
    into, so the backward runs once per row of the gradients (jax.lax.map), its results stacked with the vmapped axis
    first. rows[j]: None where operands[j] is the forward's; for an upstream gradient, whether it has the vmapped axis
    (led to `size` here, and taken a row at a time; an absent one has none and stays absent). A present gradient is
    told from an absent one before it is led: a scalar's rows at size 0 have the absent one's shape, (0,)."""
    taken = [row is not None and not (absent(x) and not row) for x, row in zip(operands, rows)]
    rows_of = tuple(lead(x, row, size) for x, row, take in zip(operands, rows, taken) if take)

    def one(xs):  # a row of each taken operand, in their order
        it = iter(xs)
        return backward(*(next(it) if take else x for x, take in zip(operands, taken)))

    return jax.lax.map(one, rows_of)


def check_crf(potentials):
    potentials = check_array(potentials, "potentials")
    if potentials.ndim < 3 or potentials.shape[-1] != potentials.shape[-2]:
        raise ValueError(f"potentials: expected [..., T - 1, C, C], got shape {potentials.shape}")
    if potentials.shape[-1] == 0:
        raise ValueError("potentials: C (the states, the last two dimensions) must be at least 1")
    return potentials
