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
    h = jj.chain_entropy(potentials, lengths)          # also chain_cross_entropy, chain_kl, chain_kbest
    paths = jj.chain_sample(potentials, 16, jax.random.key(0), lengths)
"""

import ctypes
import functools

import jax
import jax.numpy as jnp
import numpy as np

import jitbmm

from ._jax_distributions import chain_cross_entropy, chain_entropy, chain_kbest, chain_kl, chain_sample
from ._jax_support import (DTYPES, absent, call, check_array, check_crf, check_on_gpu, clipped_lengths, custom_vmap,
                           ffi_api_version, folded, lead, lengths_operand, per_row, saved_batched_apart, score_dtype,
                           workspace_bytes)

__all__ = ["semiring_bmm", "logbmm", "maxbmm", "minbmm", "prodmaxbmm", "chain_log_partition", "chain_viterbi",
           "chain_log_count", "chain_log_prob", "hmm_log_partition", "hmm_viterbi", "chain_entropy",
           "chain_cross_entropy", "chain_kl", "chain_kbest", "chain_sample", "ffi_api_version"]

_SEMIRINGS = ("log", "max_plus", "min_plus", "max_times", "plus_times")
_SELECTING = ("max_plus", "min_plus", "max_times")  # their backward reads the forward's argmax


# ---- Semiring products --------------------------------------------------------------------------------------------

# The handlers fold the leading dimensions into the batch, and read an operand of two dimensions as one matrix for
# every batch (a shared weight is not copied per batch; its gradient is the sum over the batch). A vmap rule moves a
# vmapped axis in front of a and b and calls the same handler, whose workspace is then sized for that larger batch.

def _batch(a, b):
    """The batch of a product: that of the operand with one, a shared matrix (two dimensions) standing for each."""
    return a.shape[:-2] if a.ndim > 2 else b.shape[:-2]


def _bmm_workspace(a, b, semiring, precision, with_argmax, backward):
    return workspace_bytes("bmm", semiring, precision, DTYPES[a.dtype], folded(_batch(a, b)), a.shape[-2],
                           a.shape[-1], b.shape[-1], int(a.ndim == 2), int(b.ndim == 2), int(with_argmax),
                           int(backward))


def _spread(x, batched, size, batch):
    """x, one matrix in each vmapped instance, as one per element of the instances' `batch` (copied), the vmapped
    axis in front."""
    x = lead(x, batched, size)
    return jnp.broadcast_to(x.reshape(size, *([1] * len(batch)), *x.shape[-2:]), (size, *batch, *x.shape[-2:]))


def _led(size, batched, a, b):
    """a and b of a vmapped forward with the vmapped axis in front. A shared matrix that is not vmapped stays one for
    every batch; one that is vmapped becomes one per element of the other's batch (the handler takes one batch)."""
    operands = (a, b)
    shared = [x.ndim - int(bx) == 2 for x, bx in zip(operands, batched)]
    led = []
    for i, (x, bx) in enumerate(zip(operands, batched)):
        other, other_batched = operands[1 - i], batched[1 - i]
        if shared[i] and not bx and other_batched:
            led.append(x)
        elif shared[i] and not shared[1 - i]:
            led.append(_spread(x, bx, size, other.shape[int(other_batched):-2]))
        else:
            led.append(lead(x, bx, size))
    return led


def _summed(grad, axes):
    """grad summed over `axes`, in float32 at least."""
    return grad.sum(axes, dtype=jnp.promote_types(grad.dtype, jnp.float32)).astype(grad.dtype)


@functools.lru_cache(maxsize=None)
def _bmm_forward(semiring, precision, with_argmax):
    @custom_vmap
    def forward(a, b):
        out = jax.ShapeDtypeStruct((*_batch(a, b), a.shape[-2], b.shape[-1]), a.dtype)
        argmax = jax.ShapeDtypeStruct(out.shape if with_argmax else (0,), jnp.int32)
        return call("bmm", (out, argmax), a, b, workspace=_bmm_workspace(a, b, semiring, precision, with_argmax, 0),
                    semiring=semiring, precision=precision)

    @forward.def_vmap
    def rule(size, batched, a, b):
        return forward(*_led(size, batched, a, b)), (True, with_argmax)

    return forward


@functools.lru_cache(maxsize=None)
def _bmm_backward(semiring, precision):
    @custom_vmap
    def backward(a, b, out, argmax, grad_out):
        grads = (jax.ShapeDtypeStruct(a.shape, a.dtype), jax.ShapeDtypeStruct(b.shape, b.dtype))
        size = _bmm_workspace(a, b, semiring, precision, not absent(argmax), 1)
        return call("bmm_backward", grads, a, b, out, argmax, grad_out, workspace=size, semiring=semiring,
                    precision=precision)

    @backward.def_vmap
    def rule(size, batched, a, b, out, argmax, grad_out):
        # Each vmapped instance's gradient of a shared matrix is its own sum over the instance's batch: the matrix is
        # spread over that batch and the gradient summed back. A vmapped pullback (jax.jacrev) has only grad_out
        # batched: every operand goes to the vmapped size.
        batch = out.shape[int(batched[2]):-2]
        shared = [x.ndim - int(bx) == 2 for x, bx in zip((a, b), batched)]
        a, b = (_spread(x, bx, size, batch) if sh else lead(x, bx, size) for x, bx, sh in zip((a, b), batched, shared))
        grads = backward(a, b, *(lead(x, bx, size) for x, bx in zip((out, argmax, grad_out), batched[2:])))
        axes = tuple(range(1, 1 + len(batch)))
        return tuple(_summed(g, axes) if sh else g for g, sh in zip(grads, shared)), (True, True)

    return backward


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _bmm(a, b, semiring, precision):
    return _bmm_forward(semiring, precision, False)(a, b)[0]


def _bmm_fwd(a, b, semiring, precision):
    out, argmax = _bmm_forward(semiring, precision, semiring in _SELECTING)(a, b)
    return out, (a, b, out, argmax)


def _bmm_bwd(semiring, precision, saved, grad_out):
    a, b, out, argmax = saved
    return _bmm_backward(semiring, precision)(a, b, out, argmax, grad_out.astype(out.dtype))


_bmm.defvjp(_bmm_fwd, _bmm_bwd)


def semiring_bmm(a, b, semiring="log", precision="exact"):
    """out[..., i, j] = ⊕_k a[..., i, k] ⊗ b[..., k, j] over `semiring` ("log", "max_plus", "min_plus", "max_times",
    "plus_times"), the batch dimensions broadcast as numpy does. a [..., M, K] and b [..., K, N] of one dtype
    (float32, float64 with x64 enabled, float16, bfloat16); out in that dtype. precision="fast" lets the log
    semiring use one TF32 product per term (about 1e-4 relative error). Differentiable in a and b (the selecting
    semirings' gradient goes to the argmax; ties: the smallest k)."""
    a, b = check_array(a, "a"), check_array(b, "b")
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
    check_on_gpu(a=a, b=b)
    return _bmm(_operand(a, batch), _operand(b, batch), semiring, precision)


def _operand(x, batch):
    """x for a product of `batch`: as it is where it has that batch; one matrix for every batch (two dimensions,
    not copied) where it has no batch of its own; else broadcast to it (copied)."""
    if x.shape[:-2] == batch:
        return x
    if folded(x.shape[:-2]) == 1:
        return x.reshape(x.shape[-2:])
    return jnp.broadcast_to(x, (*batch, *x.shape[-2:]))


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
    problem = jitbmm._chain_problem(semiring, dtype, B, T, C, with_lengths, form, batched_transitions,
                                    batched_initial)
    n = ctypes.c_size_t()
    jitbmm._check(jitbmm._library().jitbmm_chain_problem_saved_bytes(ctypes.byref(problem), ctypes.byref(n)))
    return n.value


# A chain's pass as jitbmm_xla_chain_workspace names it.
_FORWARD, _FORWARD_WITH_PATH, _BACKWARD = 0, 1, 2


def _crf_problem(potentials, lengths, semiring):
    """(semiring, dtype, form, B, T, C, with lengths): what _saved_bytes and workspace_bytes take of a CRF call."""
    batch, T, C = potentials.shape[:-3], potentials.shape[-3] + 1, potentials.shape[-1]
    return semiring, DTYPES[potentials.dtype], "crf", folded(batch), T, C, lengths.size > 0


def _hmm_problem(emissions, transitions, initial, lengths, semiring):
    batch, (T, C) = emissions.shape[:-2], emissions.shape[-2:]
    return (semiring, DTYPES[emissions.dtype], "hmm", folded(batch), T, C, lengths.size > 0, transitions.ndim > 2,
            initial.ndim > 1)


def _crf_results(potentials, lengths, semiring, with_path, keep):
    """The forward's results: the score, the saved messages (none unless `keep`: a call that is not differentiated
    writes none, and a long log chain's then runs on its stand-in) and the best path where wanted."""
    batch, T = potentials.shape[:-3], potentials.shape[-3] + 1
    n = _saved_bytes(*_crf_problem(potentials, lengths, semiring), False, False) if keep else 0
    return (jax.ShapeDtypeStruct(batch, score_dtype(potentials.dtype)), jax.ShapeDtypeStruct((n,), jnp.uint8),
            jax.ShapeDtypeStruct((*batch, T) if with_path else (0,), jnp.int32))


def _hmm_results(emissions, transitions, initial, lengths, semiring, with_path, keep):
    batch, T = emissions.shape[:-2], emissions.shape[-2]
    n = _saved_bytes(*_hmm_problem(emissions, transitions, initial, lengths, semiring)) if keep else 0
    return (jax.ShapeDtypeStruct(batch, score_dtype(emissions.dtype)), jax.ShapeDtypeStruct((n,), jnp.uint8),
            jax.ShapeDtypeStruct((*batch, T) if with_path else (0,), jnp.int32))


@functools.lru_cache(maxsize=None)
def _crf_forward(semiring, with_path, keep):
    @custom_vmap
    def forward(potentials, lengths):
        size = workspace_bytes("chain", *_crf_problem(potentials, lengths, semiring), False, False,
                               _FORWARD_WITH_PATH if with_path else _FORWARD)
        return call("chain", _crf_results(potentials, lengths, semiring, with_path, keep), potentials, lengths,
                    workspace=size, semiring=semiring)

    @forward.def_vmap
    def rule(size, batched, potentials, lengths):
        potentials, lengths = lead(potentials, batched[0], size), lead(lengths, batched[1], size)
        return forward(potentials, lengths), (True, False, with_path)

    return forward


@functools.lru_cache(maxsize=None)
def _crf_backward(semiring):
    @custom_vmap
    def backward(potentials, lengths, saved, path, grad_score):
        grad = jax.ShapeDtypeStruct(potentials.shape, potentials.dtype)
        size = workspace_bytes("chain", *_crf_problem(potentials, lengths, semiring), False, False, _BACKWARD)
        return call("chain_backward", grad, potentials, lengths, saved, path, grad_score, workspace=size,
                    semiring=semiring)

    @backward.def_vmap
    def rule(size, batched, potentials, lengths, saved, path, grad_score):
        if batched[2]:
            raise saved_batched_apart()
        if not any(batched[:4]):
            return per_row(size, backward, (potentials, lengths, saved, path, grad_score),
                           (None,) * 4 + (batched[4],)), True
        potentials, lengths, path, grad_score = (lead(x, b, size) for x, b in zip(
            (potentials, lengths, path, grad_score), (batched[0], batched[1], batched[3], batched[4])))
        return backward(potentials, lengths, saved, path, grad_score), True

    return backward


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _crf(potentials, lengths, semiring):
    score, _, path = _crf_forward(semiring, semiring == "max_plus", False)(potentials, lengths)
    return score, path


def _crf_fwd(potentials, lengths, semiring):
    score, saved, path = _crf_forward(semiring, semiring == "max_plus", True)(potentials, lengths)
    return (score, path), (potentials, lengths, saved, path)


def _crf_bwd(semiring, residuals, cotangents):
    potentials, lengths, saved, path = residuals
    grad_score = cotangents[0].astype(score_dtype(potentials.dtype))
    return _crf_backward(semiring)(potentials, lengths, saved, path, grad_score), None


_crf.defvjp(_crf_fwd, _crf_bwd)


def chain_log_partition(potentials, lengths=None):
    """score[...] = log Σ over the state paths z of each sequence of exp Σ_t potentials[..., t, z[t + 1], z[t]]: a
    linear-chain CRF's log-partition. potentials [..., T - 1, C, C] (float32, float64, float16 or bfloat16; half
    inputs computed in float32, the score float32); lengths None or an integer array of the batch's shape, each in
    [1, T] (outside: NaN). Differentiable in potentials (the edge marginals, by the fused backward)."""
    potentials = check_crf(potentials)
    pairs = lengths_operand(lengths, potentials.shape[:-3])
    check_on_gpu(potentials=potentials, lengths=lengths)
    return _crf(potentials, pairs, "log")[0]


def chain_viterbi(potentials, lengths=None):
    """(score [...], path [..., T] int32) of each sequence's best state path (ties: the smallest state; -1 from the
    sequence's length on). Arguments as chain_log_partition's. The gradient of score is the path's edge indicator."""
    potentials = check_crf(potentials)
    pairs = lengths_operand(lengths, potentials.shape[:-3])
    check_on_gpu(potentials=potentials, lengths=lengths)
    return _crf(potentials, pairs, "max_plus")


def chain_log_count(potentials, lengths=None):
    """log of the number of paths of each sequence whose every edge's potential is other than -inf (torch-struct's
    count, in log space so that long chains do not overflow): the log-partition of the chain's structure. NaN and +inf
    count as edges; log C for one position; -inf where no path is left. Arguments as chain_log_partition's; [...] in
    the potentials' dtype (float32 for half inputs). Not differentiable (a count is piecewise constant: its gradient is
    0)."""
    potentials = check_crf(potentials)
    structure = jnp.where(potentials == -jnp.inf, -jnp.inf, jnp.zeros((), potentials.dtype))
    return jax.lax.stop_gradient(chain_log_partition(jax.lax.stop_gradient(structure), lengths))


def chain_log_prob(potentials, value, lengths=None):
    """log p(value) [..., *batch]: Σ value·potentials over each sequence's steps, minus log Z, for events value [...,
    *potentials.shape] (a path's edge indicators, with any leading sample dimensions). A value of 0 adds nothing
    whatever its potential (where 0·(-inf) would give NaN), and steps from a sequence's length on are not read. NaN
    where the sequence has no distribution (log Z -inf, +inf or NaN); -inf for an event of probability 0.
    Differentiable in both (the log-partition's gradient from the fused backward)."""
    potentials = check_crf(potentials)
    if not hasattr(value, "shape") or not hasattr(value, "dtype"):
        raise TypeError(f"value: expected a JAX array, got {type(value).__name__}")
    value = jnp.asarray(value)  # edge indicators of any real dtype (bool and integers too), as jitbmm.torch takes
    if not (value.dtype in DTYPES or value.dtype == jnp.bool_ or jnp.issubdtype(value.dtype, jnp.integer)):
        raise TypeError(f"value: unsupported dtype {value.dtype} (expected a float, integer or bool array)")
    if value.ndim < potentials.ndim or value.shape[value.ndim - potentials.ndim:] != potentials.shape:
        raise ValueError(f"value: expected [..., {', '.join(map(str, potentials.shape))}] (events of the potentials' "
                         f"shape), got shape {value.shape}")
    log_z = chain_log_partition(potentials, lengths)  # checks lengths
    dtype = score_dtype(potentials.dtype)
    pot, value = potentials.astype(dtype), value.astype(dtype)
    within = True
    if lengths is not None:  # only the steps before each sequence's last position
        last = clipped_lengths(lengths, pot.shape[:-3]) - 1
        within = (jnp.arange(pot.shape[-3]) < last[..., None])[..., None, None]
    # A step past the length is not read: neither its potential (-inf padding there would make value's gradient NaN,
    # 0 · -inf) nor its value.
    taken = (value != 0) & within
    # Neither 0·(-inf) nor its gradient; where value is 0 its derivative is the potential (finite, inside the length),
    # as jitbmm.torch's is.
    safe = jnp.where(within & jnp.isfinite(pot), pot, 0)
    terms = jnp.where(taken, value * jnp.where(taken, pot, 0), value * safe)
    terms = jnp.where(within, terms, 0)
    out = terms.sum((-1, -2, -3)) - log_z
    return jnp.where(jnp.isfinite(log_z), out, jnp.nan)


@functools.lru_cache(maxsize=None)
def _hmm_forward(semiring, with_path, keep):
    @custom_vmap
    def forward(emissions, transitions, initial, lengths):
        size = workspace_bytes("chain", *_hmm_problem(emissions, transitions, initial, lengths, semiring),
                               _FORWARD_WITH_PATH if with_path else _FORWARD)
        return call("hmm", _hmm_results(emissions, transitions, initial, lengths, semiring, with_path, keep),
                    emissions, transitions, initial, lengths, workspace=size, semiring=semiring)

    @forward.def_vmap
    def rule(size, batched, emissions, transitions, initial, lengths):
        emissions, transitions, initial, lengths = _hmm_lead(size, batched, emissions, transitions, initial, lengths,
                                                             share=not keep)
        return forward(emissions, transitions, initial, lengths), (True, False, with_path)

    return forward


def _hmm_lead(size, batched, emissions, transitions, initial, lengths, share=False):
    """The HMM's operands with the vmapped axis in front, each table one per sequence [size, *batch, ...]: under vmap
    a shared table's gradient differs between the vmapped instances, which one shared operand cannot give. The
    forward and the backward lay them out alike, so both make one problem (the saved messages' layout). share: no
    backward follows (nothing saved), so a table no instance has its own of stays one for all, not copied."""
    emissions = lead(emissions, batched[0], size)
    batch = emissions.shape[1:-2]

    def per_sequence(x, is_batched, rank):  # rank: a shared table's (2 for transitions, 1 for initial)
        shared = x.ndim - is_batched == rank
        if shared and share and not is_batched:
            return x
        x = lead(x, is_batched, size)
        if not shared:
            return x
        return jnp.broadcast_to(x.reshape(size, *([1] * len(batch)), *x.shape[1:]), (size, *batch, *x.shape[1:]))

    return (emissions, per_sequence(transitions, batched[1], 2), per_sequence(initial, batched[2], 1),
            lead(lengths, batched[3], size))


@functools.lru_cache(maxsize=None)
def _hmm_backward(semiring):
    @custom_vmap
    def backward(emissions, transitions, initial, lengths, saved, path, grad_score):
        grads = tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (emissions, transitions, initial))
        size = workspace_bytes("chain", *_hmm_problem(emissions, transitions, initial, lengths, semiring), _BACKWARD)
        return call("hmm_backward", grads, emissions, transitions, initial, lengths, saved, path, grad_score,
                    workspace=size, semiring=semiring)

    @backward.def_vmap
    def rule(size, batched, emissions, transitions, initial, lengths, saved, path, grad_score):
        if batched[4]:
            raise saved_batched_apart()
        if not any(batched[:6]):
            operands = (emissions, transitions, initial, lengths, saved, path, grad_score)
            return per_row(size, backward, operands, (None,) * 6 + (batched[6],)), (True,) * 3
        shared = (transitions.ndim - batched[1] == 2, initial.ndim - batched[2] == 1)
        operands = _hmm_lead(size, batched[:4], emissions, transitions, initial, lengths)
        path, grad_score = lead(path, batched[5], size), lead(grad_score, batched[6], size)
        g_e, g_t, g_i = backward(*operands, saved, path, grad_score)
        sequences = tuple(range(1, operands[0].ndim - 2))  # a shared table's gradient: its sequences' sum
        return (g_e, g_t.sum(sequences) if shared[0] else g_t, g_i.sum(sequences) if shared[1] else g_i), (True,) * 3

    return backward


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _hmm(emissions, transitions, initial, lengths, semiring):
    score, _, path = _hmm_forward(semiring, semiring == "max_plus", False)(emissions, transitions, initial, lengths)
    return score, path


def _hmm_fwd(emissions, transitions, initial, lengths, semiring):
    score, saved, path = _hmm_forward(semiring, semiring == "max_plus", True)(emissions, transitions, initial,
                                                                           lengths)
    return (score, path), (emissions, transitions, initial, lengths, saved, path)


def _hmm_bwd(semiring, residuals, cotangents):
    emissions, transitions, initial, lengths, saved, path = residuals
    grad_score = cotangents[0].astype(score_dtype(emissions.dtype))
    return (*_hmm_backward(semiring)(emissions, transitions, initial, lengths, saved, path, grad_score), None)


_hmm.defvjp(_hmm_fwd, _hmm_bwd)


def _check_hmm(emissions, transitions, initial):
    emissions, transitions, initial = (check_array(x, n) for x, n in ((emissions, "emissions"),
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
    pairs = lengths_operand(lengths, emissions.shape[:-2])
    check_on_gpu(emissions=emissions, transitions=transitions, initial=initial, lengths=lengths)
    return _hmm(emissions, transitions, initial, pairs, "log")[0]


def hmm_viterbi(emissions, transitions, initial, lengths=None):
    """(score [...], path [..., T] int32) of each sequence's best state path under an HMM's tables (ties: the
    smallest state; -1 from the sequence's length on). Arguments as hmm_log_partition's; the gradients of score are
    the path's state indicator, transition counts and first state's indicator."""
    emissions, transitions, initial = _check_hmm(emissions, transitions, initial)
    pairs = lengths_operand(lengths, emissions.shape[:-2])
    check_on_gpu(emissions=emissions, transitions=transitions, initial=initial, lengths=lengths)
    return _hmm(emissions, transitions, initial, pairs, "max_plus")
