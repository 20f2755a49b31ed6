"""jitbmm for JAX (docs/jax.md): the same kernels as jitbmm.torch, called as XLA foreign functions.

libjitbmm_c.so carries XLA FFI handlers (built where jaxlib's FFI headers were found); this module registers them
with JAX on first use and calls them through ``jax.ffi.ffi_call``. Every function works under ``jit``, ``grad``
(``jax.custom_vjp`` over the fused backward kernels), ``vmap`` (vmapped axes are folded into the kernels' batch, not
looped over) and ``jax.checkpoint``. Shapes and dtypes are checked when a call is traced, with errors naming the
argument. Arrays must live on a CUDA device: jitbmm has no CPU kernels.

    import jax, jax.numpy as jnp
    import jitbmm.jax as jj
    out = jj.logbmm(a, b)                               # log Σ_k exp(a[..., i, k] + b[..., k, j])
    ll = jj.hmm_log_partition(emissions, transitions, initial, lengths)
    grads = jax.grad(lambda e: jj.hmm_log_partition(e, transitions, initial).sum())(emissions)
"""

import ctypes
import functools
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import custom_batching

import jitbmm

__all__ = ["semiring_bmm", "logbmm", "maxbmm", "minbmm", "prodmaxbmm", "chain_log_partition", "chain_viterbi",
           "hmm_log_partition", "hmm_viterbi", "ffi_api_version"]

_SEMIRINGS = ("log", "max_plus", "min_plus", "max_times", "plus_times")
_SELECTING = ("max_plus", "min_plus", "max_times")  # their backward reads the forward's argmax
_DTYPES = {jnp.dtype(jnp.float32): "f32", jnp.dtype(jnp.float64): "f64", jnp.dtype(jnp.float16): "f16",
           jnp.dtype(jnp.bfloat16): "bf16"}
_TARGETS = ("bmm", "bmm_backward", "chain", "chain_backward", "hmm", "hmm_backward")


# ---- Registration -------------------------------------------------------------------------------------------------

def ffi_api_version():
    """(major, minor) of the XLA FFI API the library's handlers were compiled against."""
    lib = _handlers()
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.jitbmm_xla_ffi_api_version(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def _handlers():
    lib = jitbmm._library()
    if not hasattr(lib, "jitbmm_xla_bmm"):
        raise RuntimeError("jitbmm.jax: this libjitbmm_c.so was built without XLA's FFI headers, so it has no JAX "
                           "handlers: install jaxlib before building jitbmm (or set JITBMM_XLA_FFI_INCLUDE); "
                           "docs/jax.md")
    lib.jitbmm_xla_ffi_api_version.argtypes = [ctypes.POINTER(ctypes.c_int)] * 2
    lib.jitbmm_xla_ffi_api_version.restype = ctypes.c_int
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
def _registered():
    """Registers every handler with JAX for CUDA, once; refuses handlers of another FFI API major version than
    this jaxlib's, or of a newer minor one (an older XLA cannot run them)."""
    lib = _handlers()
    ours, theirs = ffi_api_version(), _jaxlib_api_version()
    if theirs is not None and (ours[0] != theirs[0] or ours[1] > theirs[1]):
        raise RuntimeError(f"jitbmm.jax: the library's handlers were built for XLA FFI API {ours[0]}.{ours[1]}, "
                           f"but this jaxlib ({jax.__version__}) speaks {theirs[0]}.{theirs[1]}: rebuild jitbmm "
                           f"against this jaxlib")
    for target in _TARGETS:
        jax.ffi.register_ffi_target(f"jitbmm_{target}", jax.ffi.pycapsule(getattr(lib, f"jitbmm_xla_{target}")),
                                    platform="CUDA")
    return True


def _call(target, results, *args, vmap_method=None, **attrs):
    _registered()
    return jax.ffi.ffi_call(f"jitbmm_{target}", results, vmap_method=vmap_method)(*args, **attrs)


# ---- Checks at trace time -----------------------------------------------------------------------------------------

def _array(x, name):
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise TypeError(f"{name}: expected a JAX array, got {type(x).__name__}")
    x = jnp.asarray(x)
    if x.dtype not in _DTYPES:
        raise TypeError(f"{name}: unsupported dtype {x.dtype} (expected float32, float64, float16 or bfloat16)")
    return x


def _on_gpu(**arrays):
    """Concrete arrays must be on a CUDA device (traced ones run where jit places them); checked after their shapes."""
    for name, x in arrays.items():
        devices = getattr(x, "devices", None)
        if x is None or isinstance(x, jax.core.Tracer) or devices is None:
            continue
        for d in devices():
            if d.platform != "gpu":
                raise ValueError(f"{name}: on {d.platform} ({d}); jitbmm has CUDA kernels only: put it on a GPU")


def _lengths(lengths, batch, name="lengths"):
    """lengths [*batch] of any integer dtype as the handlers read them: int32 pairs [*batch, 2] holding each as an
    int64 (low half, then the sign), or an empty array for none."""
    if lengths is None:
        return jnp.zeros((0,), jnp.int32)
    if not hasattr(lengths, "shape"):
        raise TypeError(f"{name}: expected an integer JAX array or None, got {type(lengths).__name__}")
    lengths = jnp.asarray(lengths)
    if not jnp.issubdtype(lengths.dtype, jnp.integer):
        raise TypeError(f"{name}: expected an integer dtype, got {lengths.dtype}")
    if lengths.shape != tuple(batch):
        raise ValueError(f"{name}: expected shape {tuple(batch)} (the batch), got {lengths.shape}")
    # Beyond int32 a length is out of range anyway (the kernels give NaN): clipped, never wrapped into range.
    low = jnp.clip(lengths, -1, np.iinfo(np.int32).max).astype(jnp.int32)
    return jnp.stack([low, jnp.where(low < 0, -1, 0).astype(jnp.int32)], -1)


def _score_dtype(dtype):
    return jnp.float32 if dtype in (jnp.float16, jnp.bfloat16) else dtype


# ---- Semiring products --------------------------------------------------------------------------------------------

def _bmm_call(a, b, semiring, precision, with_argmax):
    out = jax.ShapeDtypeStruct((*a.shape[:-1], b.shape[-1]), a.dtype)
    argmax = jax.ShapeDtypeStruct(out.shape if with_argmax else (0,), jnp.int32)
    return _call("bmm", (out, argmax), a, b, vmap_method="broadcast_all", semiring=semiring, precision=precision)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _bmm(a, b, semiring, precision):
    return _bmm_call(a, b, semiring, precision, False)[0]


def _bmm_fwd(a, b, semiring, precision):
    out, argmax = _bmm_call(a, b, semiring, precision, semiring in _SELECTING)
    return out, (a, b, out, argmax)


def _bmm_bwd(semiring, precision, saved, grad_out):
    a, b, out, argmax = saved
    grads = (jax.ShapeDtypeStruct(a.shape, a.dtype), jax.ShapeDtypeStruct(b.shape, b.dtype))
    return _call("bmm_backward", grads, a, b, out, argmax, grad_out.astype(out.dtype), vmap_method="broadcast_all",
                 semiring=semiring, precision=precision)


_bmm.defvjp(_bmm_fwd, _bmm_bwd)


def semiring_bmm(a, b, semiring="log", precision="exact"):
    """out[..., i, j] = ⊕_k a[..., i, k] ⊗ b[..., k, j] over `semiring` ("log", "max_plus", "min_plus", "max_times",
    "plus_times"), the batch dimensions broadcast as numpy does. a [..., M, K] and b [..., K, N] of one dtype
    (float32, float64 with x64 enabled, float16, bfloat16); out in that dtype. precision="fast" lets the log
    semiring use one TF32 product per term (about 1e-4 relative error). Differentiable in a and b (the selecting
    semirings' gradient goes to the argmax; ties: the smallest k)."""
    a, b = _array(a, "a"), _array(b, "b")
    if semiring not in _SEMIRINGS:
        raise ValueError(f"semiring: unsupported {semiring!r} (expected one of {', '.join(_SEMIRINGS)})")
    if precision not in ("exact", "fast"):
        raise ValueError(f"precision: unsupported {precision!r} (expected 'exact' or 'fast')")
    if precision == "fast" and semiring != "log":
        raise ValueError(f"precision: fast is for the log semiring only, not {semiring}")
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"a, b: expected at least 2 dimensions, got shapes {a.shape} and {b.shape}")
    if a.dtype != b.dtype:
        raise TypeError(f"b: dtype {b.dtype} differs from a's {a.dtype}")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"b: {b.shape[-2]} rows, but a has {a.shape[-1]} columns (shapes {a.shape}, {b.shape})")
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ValueError(f"a, b: batch dimensions {a.shape[:-2]} and {b.shape[:-2]} do not broadcast") from None
    _on_gpu(a=a, b=b)
    a = jnp.broadcast_to(a, (*batch, *a.shape[-2:]))
    b = jnp.broadcast_to(b, (*batch, *b.shape[-2:]))
    return _bmm(a, b, semiring, precision)


def logbmm(a, b, precision="exact"):
    """log Σ_k exp(a[..., i, k] + b[..., k, j]); see semiring_bmm."""
    return semiring_bmm(a, b, "log", precision)


def maxbmm(a, b):
    """max_k a[..., i, k] + b[..., k, j] (Viterbi); the gradient goes to the argmax (ties: the smallest k)."""
    return semiring_bmm(a, b, "max_plus")


def minbmm(a, b):
    """min_k a[..., i, k] + b[..., k, j] (shortest paths)."""
    return semiring_bmm(a, b, "min_plus")


def prodmaxbmm(a, b):
    """max_k a[..., i, k] · b[..., k, j]."""
    return semiring_bmm(a, b, "max_times")


# ---- Chains -------------------------------------------------------------------------------------------------------
# Each call passes its operands with any leading dimensions, which the handlers fold into the batch; a vmap rule
# (custom_vmap) moves a vmapped axis in front and calls the same handler, so the forward's saved messages (whose size
# the library gives for the whole folded batch) are one unbatched operand of the backward.

@functools.lru_cache(maxsize=4096)
def _saved_bytes(semiring, dtype, form, B, T, C, with_lengths, batched_transitions, batched_initial):
    """The library's saved bytes of a problem, without a plan (nothing compiled, no GPU needed)."""
    if semiring != "log" or B == 0:
        return 0
    zero3, zero2 = (ctypes.c_int64 * 3)(), (ctypes.c_int64 * 2)()
    problem = jitbmm._CChainProblem(semiring.encode(), dtype.encode(), B, T, C, (ctypes.c_int64 * 4)(),
                                    int(with_lengths), form.encode(), int(batched_transitions),
                                    int(batched_initial), zero3, zero3, zero2)
    n = ctypes.c_size_t()
    jitbmm._check(jitbmm._library().jitbmm_chain_problem_saved_bytes(ctypes.byref(problem), ctypes.byref(n)))
    return n.value


def _folded(shape):
    return int(np.prod(shape, dtype=np.int64))


def _crf_results(potentials, lengths, semiring, with_path):
    batch, T, C = potentials.shape[:-3], potentials.shape[-3] + 1, potentials.shape[-1]
    n = _saved_bytes(semiring, _DTYPES[potentials.dtype], "crf", _folded(batch), T, C, lengths.size > 0, False,
                     False)
    return (jax.ShapeDtypeStruct(batch, _score_dtype(potentials.dtype)), jax.ShapeDtypeStruct((n,), jnp.uint8),
            jax.ShapeDtypeStruct((*batch, T) if with_path else (0,), jnp.int32))


def _hmm_results(emissions, transitions, initial, lengths, semiring, with_path):
    batch, (T, C) = emissions.shape[:-2], emissions.shape[-2:]
    n = _saved_bytes(semiring, _DTYPES[emissions.dtype], "hmm", _folded(batch), T, C, lengths.size > 0,
                     transitions.ndim > 2, initial.ndim > 1)
    return (jax.ShapeDtypeStruct(batch, _score_dtype(emissions.dtype)), jax.ShapeDtypeStruct((n,), jnp.uint8),
            jax.ShapeDtypeStruct((*batch, T) if with_path else (0,), jnp.int32))


def _lead(x, batched, size):
    """x with the vmapped axis in front: as it is where batched, else broadcast to `size` there (an absent operand's
    array of no elements stays as it is)."""
    if batched or x.size == 0:
        return x
    return jnp.broadcast_to(x, (size, *x.shape))


@functools.lru_cache(maxsize=None)
def _crf_forward(semiring, with_path):
    @custom_batching.custom_vmap
    def forward(potentials, lengths):
        return _call("chain", _crf_results(potentials, lengths, semiring, with_path), potentials, lengths,
                     semiring=semiring)

    @forward.def_vmap
    def rule(size, batched, potentials, lengths):
        potentials, lengths = _lead(potentials, batched[0], size), _lead(lengths, batched[1], size)
        return forward(potentials, lengths), (True, False, with_path)

    return forward


@functools.lru_cache(maxsize=None)
def _crf_backward(semiring):
    @custom_batching.custom_vmap
    def backward(potentials, lengths, saved, path, grad_score):
        grad = jax.ShapeDtypeStruct(potentials.shape, potentials.dtype)
        return _call("chain_backward", grad, potentials, lengths, saved, path, grad_score, semiring=semiring)

    @backward.def_vmap
    def rule(size, batched, potentials, lengths, saved, path, grad_score):
        if batched[2]:
            raise NotImplementedError("jitbmm.jax: a chain's saved messages batched apart from its forward")
        potentials, lengths, path, grad_score = (_lead(x, b, size) for x, b in zip(
            (potentials, lengths, path, grad_score), (batched[0], batched[1], batched[3], batched[4])))
        return backward(potentials, lengths, saved, path, grad_score), True

    return backward


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _crf(potentials, lengths, semiring):
    score, _, path = _crf_forward(semiring, semiring == "max_plus")(potentials, lengths)
    return score, path


def _crf_fwd(potentials, lengths, semiring):
    score, saved, path = _crf_forward(semiring, semiring == "max_plus")(potentials, lengths)
    return (score, path), (potentials, lengths, saved, path)


def _crf_bwd(semiring, residuals, cotangents):
    potentials, lengths, saved, path = residuals
    grad_score = cotangents[0].astype(_score_dtype(potentials.dtype))
    return _crf_backward(semiring)(potentials, lengths, saved, path, grad_score), None


_crf.defvjp(_crf_fwd, _crf_bwd)


def _check_crf(potentials):
    potentials = _array(potentials, "potentials")
    if potentials.ndim < 3 or potentials.shape[-1] != potentials.shape[-2]:
        raise ValueError(f"potentials: expected [..., T - 1, C, C], got shape {potentials.shape}")
    if potentials.shape[-1] == 0:
        raise ValueError("potentials: C (the states, the last two dimensions) must be at least 1")
    return potentials


def chain_log_partition(potentials, lengths=None):
    """score[...] = log Σ over the state paths z of each sequence of exp Σ_t potentials[..., t, z[t + 1], z[t]]: a
    linear-chain CRF's log-partition. potentials [..., T - 1, C, C] (float32, float64, float16 or bfloat16; half
    inputs computed in float32, the score float32); lengths None or an integer array of the batch's shape, each in
    [1, T] (outside: NaN). Differentiable in potentials (the edge marginals, by the fused backward)."""
    potentials = _check_crf(potentials)
    pairs = _lengths(lengths, potentials.shape[:-3])
    _on_gpu(potentials=potentials, lengths=lengths)
    return _crf(potentials, pairs, "log")[0]


def chain_viterbi(potentials, lengths=None):
    """(score [...], path [..., T] int32) of each sequence's best state path (ties: the smallest state; -1 from the
    sequence's length on). Arguments as chain_log_partition's. The gradient of score is the path's edge indicator."""
    potentials = _check_crf(potentials)
    pairs = _lengths(lengths, potentials.shape[:-3])
    _on_gpu(potentials=potentials, lengths=lengths)
    return _crf(potentials, pairs, "max_plus")


@functools.lru_cache(maxsize=None)
def _hmm_forward(semiring, with_path):
    @custom_batching.custom_vmap
    def forward(emissions, transitions, initial, lengths):
        return _call("hmm", _hmm_results(emissions, transitions, initial, lengths, semiring, with_path), emissions,
                     transitions, initial, lengths, semiring=semiring)

    @forward.def_vmap
    def rule(size, batched, emissions, transitions, initial, lengths):
        emissions, transitions, initial, lengths = _hmm_lead(size, batched, emissions, transitions, initial, lengths)
        return forward(emissions, transitions, initial, lengths), (True, False, with_path)

    return forward


def _hmm_lead(size, batched, emissions, transitions, initial, lengths):
    """The HMM's operands with the vmapped axis in front, each table one per sequence [size, *batch, ...]: under vmap
    a shared table's gradient differs between the vmapped instances, which one shared operand cannot give. The
    forward and the backward lay them out alike, so both make one problem (the saved messages' layout)."""
    emissions = _lead(emissions, batched[0], size)
    batch = emissions.shape[1:-2]

    def per_sequence(x, is_batched, rank):  # rank: a shared table's (2 for transitions, 1 for initial)
        shared = x.ndim - is_batched == rank
        x = _lead(x, is_batched, size)
        if not shared:
            return x
        return jnp.broadcast_to(x.reshape(size, *([1] * len(batch)), *x.shape[1:]), (size, *batch, *x.shape[1:]))

    return (emissions, per_sequence(transitions, batched[1], 2), per_sequence(initial, batched[2], 1),
            _lead(lengths, batched[3], size))


@functools.lru_cache(maxsize=None)
def _hmm_backward(semiring):
    @custom_batching.custom_vmap
    def backward(emissions, transitions, initial, lengths, saved, path, grad_score):
        grads = tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (emissions, transitions, initial))
        return _call("hmm_backward", grads, emissions, transitions, initial, lengths, saved, path, grad_score,
                     semiring=semiring)

    @backward.def_vmap
    def rule(size, batched, emissions, transitions, initial, lengths, saved, path, grad_score):
        if batched[4]:
            raise NotImplementedError("jitbmm.jax: an HMM's saved messages batched apart from its forward")
        shared = (transitions.ndim - batched[1] == 2, initial.ndim - batched[2] == 1)
        operands = _hmm_lead(size, batched[:4], emissions, transitions, initial, lengths)
        path, grad_score = _lead(path, batched[5], size), _lead(grad_score, batched[6], size)
        g_e, g_t, g_i = backward(*operands, saved, path, grad_score)
        sequences = tuple(range(1, operands[0].ndim - 2))  # a shared table's gradient: its sequences' sum
        return (g_e, g_t.sum(sequences) if shared[0] else g_t, g_i.sum(sequences) if shared[1] else g_i), (True,) * 3

    return backward


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _hmm(emissions, transitions, initial, lengths, semiring):
    score, _, path = _hmm_forward(semiring, semiring == "max_plus")(emissions, transitions, initial, lengths)
    return score, path


def _hmm_fwd(emissions, transitions, initial, lengths, semiring):
    score, saved, path = _hmm_forward(semiring, semiring == "max_plus")(emissions, transitions, initial, lengths)
    return (score, path), (emissions, transitions, initial, lengths, saved, path)


def _hmm_bwd(semiring, residuals, cotangents):
    emissions, transitions, initial, lengths, saved, path = residuals
    grad_score = cotangents[0].astype(_score_dtype(emissions.dtype))
    return (*_hmm_backward(semiring)(emissions, transitions, initial, lengths, saved, path, grad_score), None)


_hmm.defvjp(_hmm_fwd, _hmm_bwd)


def _check_hmm(emissions, transitions, initial):
    emissions, transitions, initial = (_array(x, n) for x, n in ((emissions, "emissions"),
                                                                 (transitions, "transitions"), (initial, "initial")))
    if emissions.ndim < 2 or emissions.shape[-1] == 0 or emissions.shape[-2] == 0:
        raise ValueError(f"emissions: expected [..., T, C] with T, C >= 1, got shape {emissions.shape}")
    batch, C = emissions.shape[:-2], emissions.shape[-1]
    for x, name in ((transitions, "transitions"), (initial, "initial")):
        if x.dtype != emissions.dtype:
            raise TypeError(f"{name}: dtype {x.dtype} differs from the emissions' {emissions.dtype}")
    if transitions.shape != (C, C) and transitions.shape != (*batch, C, C):
        raise ValueError(f"transitions: expected [{C}, {C}] (shared) or {(*batch, C, C)} (one per sequence), got "
                         f"shape {transitions.shape}")
    if initial.shape != (C,) and initial.shape != (*batch, C):
        raise ValueError(f"initial: expected [{C}] (shared) or {(*batch, C)} (one per sequence), got shape "
                         f"{initial.shape}")
    return emissions, transitions, initial


def hmm_log_partition(emissions, transitions, initial, lengths=None):
    """score[...] = log Σ over the state paths z of exp(initial[z[0]] + emissions[..., 0, z[0]] + Σ_{t ≥ 1}
    (transitions[z[t], z[t - 1]] + emissions[..., t, z[t]])): an HMM's log-likelihood when the tables hold
    log-probabilities. emissions [..., T, C]; transitions [C, C] shared or [..., C, C] one per sequence (read [to,
    from]); initial [C] or [..., C]; one dtype; lengths as chain_log_partition's. Differentiable in all three."""
    emissions, transitions, initial = _check_hmm(emissions, transitions, initial)
    pairs = _lengths(lengths, emissions.shape[:-2])
    _on_gpu(emissions=emissions, transitions=transitions, initial=initial, lengths=lengths)
    return _hmm(emissions, transitions, initial, pairs, "log")[0]


def hmm_viterbi(emissions, transitions, initial, lengths=None):
    """(score [...], path [..., T] int32) of each sequence's best state path under an HMM's tables (ties: the
    smallest state; -1 from the sequence's length on). Arguments as hmm_log_partition's; the gradients of score are
    the path's state indicator, transition counts and first state's indicator."""
    emissions, transitions, initial = _check_hmm(emissions, transitions, initial)
    pairs = _lengths(lengths, emissions.shape[:-2])
    _on_gpu(emissions=emissions, transitions=transitions, initial=initial, lengths=lengths)
    return _hmm(emissions, transitions, initial, pairs, "max_plus")
