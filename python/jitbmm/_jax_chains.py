"""jitbmm.jax's linear chains (docs/jax.md): chain_log_partition, chain_viterbi, chain_log_count, chain_log_prob and
the HMM form's hmm_log_partition and hmm_viterbi, each an XLA foreign function call of the library's chain handlers
with a custom_vjp over the fused backward and a vmap rule that folds vmapped axes into the batch."""

import ctypes
import functools

import jax
import jax.numpy as jnp

import jitbmm

from ._jax_support import (DTYPES, call, check_array, check_crf, check_on_gpu, clipped_lengths, custom_vmap, folded,
                           lead, lengths_operand, per_row, saved_batched_apart, score_dtype, workspace_bytes)


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


def _check_hmm(emissions, transitions, initial, prefix=""):
    """An HMM's tables, checked, each error naming the argument (prefix + "emissions" and so on)."""
    e, t, i = (prefix + name for name in ("emissions", "transitions", "initial"))
    emissions, transitions, initial = (check_array(x, n) for x, n in ((emissions, e), (transitions, t),
                                                                      (initial, i)))
    if emissions.ndim < 2 or emissions.shape[-1] == 0 or emissions.shape[-2] == 0:
        raise ValueError(f"{e}: expected [..., T, C] with T, C >= 1, got shape {emissions.shape}")
    batch, C = emissions.shape[:-2], emissions.shape[-1]
    for x, name in ((transitions, t), (initial, i)):
        if x.dtype != emissions.dtype:
            raise TypeError(f"{name}: dtype {x.dtype} differs from the {e}' {emissions.dtype}")
    if transitions.shape != (C, C) and transitions.shape != (*batch, C, C):
        raise ValueError(f"{t}: expected [{C}, {C}] (shared) or {(*batch, C, C)} (one per sequence), got "
                         f"shape {transitions.shape}")
    if initial.shape != (C,) and initial.shape != (*batch, C):
        raise ValueError(f"{i}: expected [{C}] (shared) or {(*batch, C)} (one per sequence), got shape "
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
