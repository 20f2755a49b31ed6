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
    kl = jj.hmm_kl(e, t, i, q_e, q_t, q_i, lengths)    # also hmm_entropy, hmm_cross_entropy, from HMMs' tables
    paths = jj.chain_sample(potentials, 16, jax.random.key(0), lengths)   # hmm_sample, hmm_kbest from an HMM's tables
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ._jax_chains import (chain_log_count, chain_log_partition, chain_log_prob, chain_viterbi, hmm_log_partition,
                          hmm_viterbi)
from ._jax_distributions import (chain_cross_entropy, chain_entropy, chain_kbest, chain_kl, chain_sample, hmm_kbest,
                                 hmm_sample)
from ._jax_hmm_divergence import hmm_cross_entropy, hmm_entropy, hmm_kl
from ._jax_support import (DTYPES, absent, call, check_array, check_on_gpu, custom_vmap, ffi_api_version, folded, lead,
                           workspace_bytes)

__all__ = ["semiring_bmm", "logbmm", "maxbmm", "minbmm", "prodmaxbmm", "chain_log_partition", "chain_viterbi",
           "chain_log_count", "chain_log_prob", "hmm_log_partition", "hmm_viterbi", "chain_entropy",
           "chain_cross_entropy", "chain_kl", "chain_kbest", "chain_sample", "hmm_kbest", "hmm_sample", "hmm_entropy",
           "hmm_cross_entropy", "hmm_kl", "ffi_api_version"]

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
