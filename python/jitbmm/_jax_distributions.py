"""jitbmm.jax's distributions of linear chains (docs/jax.md; docs/distributions.md, "Entropy, cross-entropy and KL",
"Samples" and "The k best paths"), the same kernels as jitbmm.torch's: the entropy, cross-entropy and KL, each
log-partitions and one expectation E_p[F] of a path's sum of a field f, from fused passes of conditional messages with
a fused backward; the k best paths, Viterbi keeping k paths a state; and exact samples, their seed drawn from a JAX
key and read by the kernel on the device. Each takes potentials [..., T - 1, C, C] with any leading dimensions, which
the handlers fold into the batch (the k best paths and the samples also an HMM's tables, as hmm_viterbi takes them;
the entropy, cross-entropy and KL of HMMs are _jax_hmm_divergence's), under jit, grad, vmap (a rule that folds the
vmapped axis in, as the chains' do; the samples a call per vmapped instance) and jax.checkpoint."""

import ctypes
import functools

import jax
import jax.numpy as jnp
import numpy as np

import jitbmm

from ._jax_chains import _check_hmm, _hmm_lead, _hmm_problem
from ._jax_support import (DTYPES, absent, call, check_array, check_crf, check_on_gpu, custom_vmap, folded, lead,
                           lengths_operand, per_row, saved_batched_apart, score_dtype, workspace_bytes)

# What the field is (the library's ExpectationField): p's own potentials (the entropy); a second chain q, whose
# log-partition comes beside (the cross-entropy); q read as the difference p - q (KL).
GIVEN, CHAIN, DIFFERENCE = 0, 1, 2
MAX_STATES = 1024  # ChainExpectation's and ChainKBest's limit
MAX_K = 16  # ChainKBest::kMaxKBest


def _problem(potentials, lengths, semiring):
    """A CRF call's problem as workspace_bytes takes it."""
    return (semiring, DTYPES[potentials.dtype], "crf", folded(potentials.shape[:-3]), potentials.shape[-3] + 1,
            potentials.shape[-1], lengths.size > 0)


def _check_states(x, what, name="potentials"):
    """The states of x (its last dimension: potentials', or an HMM's emissions') within the distributions' limit."""
    if x.shape[-1] > MAX_STATES:
        raise ValueError(f"{name}: {x.shape[-1]} states; {what} takes at most {MAX_STATES}")


# ---- Entropy, cross-entropy, KL -----------------------------------------------------------------------------------

@functools.lru_cache(maxsize=4096)
def _saved_bytes(kind, semiring, dtype, form, B, T, C, with_lengths, batched_transitions=False, batched_initial=False):
    """The library's bytes of a saving forward's messages (both sweeps', and the HMM form's copies of its tables) of a
    problem as workspace_bytes takes it, and field `kind`, without a plan (nothing compiled, no GPU needed)."""
    problem = jitbmm._chain_problem(semiring, dtype, B, T, C, with_lengths, form, batched_transitions,
                                    batched_initial)
    n = ctypes.c_size_t()
    jitbmm._check(jitbmm._library().jitbmm_chain_expectation_saved_bytes(ctypes.byref(problem), kind,
                                                                         ctypes.byref(n)))
    return n.value


def _expectation_results(batch, dtype, kind, keep, problem):
    """log Z [...] (with a chain as the field [2, ...]: log Z_p, then log Z_q), E_p[F] [...], and what the backward
    reads (the library's saved bytes of `problem`, as workspace_bytes takes it) as one uint8 operand, or none; of
    chains over `batch`, their inputs in `dtype`. Either form's."""
    dtype = score_dtype(dtype)
    return (jax.ShapeDtypeStruct(batch if kind == GIVEN else (2, *batch), dtype), jax.ShapeDtypeStruct(batch, dtype),
            jax.ShapeDtypeStruct((_saved_bytes(kind, *problem),) if keep else (0,), jnp.uint8))


def _log_z_in_front(log_z, kind):
    """A vmapped log Z of two rows [2, size, ...] with the vmapped axis first, as vmap returns it."""
    return log_z if kind == GIVEN else jnp.moveaxis(log_z, 1, 0)


def _log_z_rows_first(log_z, kind):
    """The inverse: [size, 2, ...] as the handler lays out its two rows, [2, size, ...]."""
    return log_z if kind == GIVEN or absent(log_z) else jnp.moveaxis(log_z, 0, 1)


@functools.lru_cache(maxsize=None)
def _expectation(kind, keep):
    @custom_vmap
    def forward(potentials, field, lengths):
        # The forward takes no scratch; asking the backward's makes the plan both run, now, as every handler's is.
        problem = _problem(potentials, lengths, "log")
        workspace_bytes("chain_expectation", *problem, kind)
        results = _expectation_results(potentials.shape[:-3], potentials.dtype, kind, keep, problem)
        return call("chain_expectation", results, potentials, field, lengths, kind=np.int32(kind))

    @forward.def_vmap
    def rule(size, batched, potentials, field, lengths):
        potentials, field, lengths = (lead(x, b, size) for x, b in zip((potentials, field, lengths), batched))
        log_z, mean, saved = forward(potentials, field, lengths)
        return (_log_z_in_front(log_z, kind), mean, saved), (True, True, False)

    return forward


@functools.lru_cache(maxsize=None)
def _expectation_backward(kind):
    @custom_vmap
    def backward(potentials, field, lengths, saved, log_z, mean, grad_log_z, grad_mean):
        grads = (jax.ShapeDtypeStruct(potentials.shape, potentials.dtype),
                 jax.ShapeDtypeStruct(field.shape, field.dtype))
        size = workspace_bytes("chain_expectation", *_problem(potentials, lengths, "log"), kind)
        return call("chain_expectation_backward", grads, potentials, field, lengths, saved, log_z, mean, grad_log_z,
                    grad_mean, workspace=size, kind=np.int32(kind))

    @backward.def_vmap
    def rule(size, batched, potentials, field, lengths, saved, log_z, mean, grad_log_z, grad_mean):
        if batched[3]:
            raise saved_batched_apart()
        if not any(batched[:6]):
            results = per_row(size, backward, (potentials, field, lengths, saved, log_z, mean, grad_log_z, grad_mean),
                              (None,) * 6 + tuple(batched[6:]))
            return results, (True, True)
        upstream = (lead(grad_log_z, batched[6], size), lead(grad_mean, batched[7], size))
        potentials, field, lengths, log_z, mean = (
            lead(x, b, size) for x, b in zip((potentials, field, lengths, log_z, mean), (*batched[:3], *batched[4:6])))
        # The entropy's absent second chain has no gradient, nor a vmapped axis.
        return backward(potentials, field, lengths, saved, _log_z_rows_first(log_z, kind), mean,
                        _log_z_rows_first(upstream[0], kind), upstream[1]), (True, kind != GIVEN)

    return backward


def _value(kind, log_z, mean):
    """The entropy log Z - E_p[F] (the field p itself), the cross-entropy log Z_q - E_p[F], or KL(p ‖ q) =
    E_p[F] - log Z_p + log Z_q."""
    if kind == GIVEN:
        return log_z - mean
    if kind == CHAIN:
        return log_z[1] - mean
    return mean + log_z[1] - log_z[0]


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _divergence(potentials, field, lengths, kind):
    log_z, mean, _ = _expectation(kind, False)(potentials, field, lengths)
    return _value(kind, log_z, mean)


def _divergence_fwd(potentials, field, lengths, kind):
    log_z, mean, saved = _expectation(kind, True)(potentials, field, lengths)
    return _value(kind, log_z, mean), (potentials, field, lengths, saved, log_z, mean)


def _upstream(kind, grad, dtype):
    """The upstream gradients of log Z and E_p[F] (in `dtype`) from the quantity's: for the entropy only E_p[F]'s
    (its field being p itself, the gradients through log Z_p and through the field cancel, which leaves
    -Cov_p(edge, F), and the field's gradient is not asked for); for the cross-entropy log Z_q's and E_p[F]'s beside
    a row of zeros for log Z_p (zeros, not the gradient times 0, which would make NaN of an infinite gradient); for KL
    all three."""
    g = grad.astype(dtype)
    if kind == GIVEN:
        return jnp.zeros((0,), g.dtype), -g
    if kind == CHAIN:
        return jnp.stack([jnp.zeros_like(g), g]), -g
    return jnp.stack([-g, g]), g


def _divergence_bwd(kind, residuals, grad):
    potentials, field, lengths, saved, log_z, mean = residuals
    grad_p, grad_q = _expectation_backward(kind)(potentials, field, lengths, saved, log_z, mean,
                                                 *_upstream(kind, grad, mean.dtype))
    return grad_p, (None if kind == GIVEN else grad_q), None


_divergence.defvjp(_divergence_fwd, _divergence_bwd)


def _operands(potentials, other, lengths, what, paired=True):
    """The checked operands of a quantity of one chain (paired False: other is None) or of two."""
    potentials = check_crf(potentials)
    _check_states(potentials, what)
    if paired:
        other = check_array(other, "other")
        if other.dtype != potentials.dtype:
            raise TypeError(f"other: dtype {other.dtype} differs from the potentials' {potentials.dtype}")
        if other.shape != potentials.shape:
            raise ValueError(f"other: expected the potentials' shape {potentials.shape}, got {other.shape}")
    pairs = lengths_operand(lengths, potentials.shape[:-3])
    check_on_gpu(potentials=potentials, other=other, lengths=lengths)
    return potentials, (jnp.zeros((0,), potentials.dtype) if other is None else other), pairs


def chain_entropy(potentials, lengths=None):
    """H(p)[...] = -Σ_z p(z) log p(z) over the state paths z of each sequence of the linear-chain CRF p whose
    potentials are `potentials` [..., T - 1, C, C] (float32, float64 with x64 enabled, float16 or bfloat16; at most
    1,024 states), read as chain_log_partition reads them; lengths likewise. H in the potentials' dtype (float32 for
    half inputs): log Z minus the expected path score, both from one fused pass. NaN for a sequence with no
    distribution (log Z -inf, +inf or NaN) or a length outside [1, T]; log C for one position. Differentiable in
    potentials by a fused backward (the covariance of each edge with the path score), without second derivatives."""
    potentials, field, pairs = _operands(potentials, None, lengths, "the entropy", paired=False)
    return _divergence(potentials, field, pairs, GIVEN)


def chain_cross_entropy(potentials, other, lengths=None):
    """H(p, q)[...] = -Σ_z p(z) log q(z), p the chain of `potentials` and q that of `other` (the same shape and
    dtype): log Z_q minus p's expectation of q's path score. +inf where p gives weight to a path q gives none; NaN
    where either has no distribution. Arguments as chain_entropy's; differentiable in both chains' potentials."""
    potentials, other, pairs = _operands(potentials, other, lengths, "the cross-entropy")
    return _divergence(potentials, other, pairs, CHAIN)


def chain_kl(potentials, other, lengths=None):
    """KL(p ‖ q)[...] = Σ_z p(z) log(p(z) / q(z)): p's expectation of the difference of the path scores, minus
    log Z_p, plus log Z_q, from one fused pass (the difference formed in the accumulator's type). +inf where p gives
    weight to a path q gives none. Arguments and gradients as chain_cross_entropy's."""
    potentials, other, pairs = _operands(potentials, other, lengths, "KL")
    return _divergence(potentials, other, pairs, DIFFERENCE)


# ---- The k best paths ---------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _kbest_call(k):
    @custom_vmap
    def kbest(potentials, lengths):
        batch, T = potentials.shape[:-3], potentials.shape[-3] + 1
        results = (jax.ShapeDtypeStruct((*batch, k), score_dtype(potentials.dtype)),
                   jax.ShapeDtypeStruct((*batch, k, T), jnp.int32))
        size = workspace_bytes("chain_kbest", *_problem(potentials, lengths, "max_plus"), k)
        return call("chain_kbest", results, potentials, lengths, workspace=size, k=np.int32(k))

    @kbest.def_vmap
    def rule(size, batched, potentials, lengths):
        return kbest(lead(potentials, batched[0], size), lead(lengths, batched[1], size)), (True, True)

    return kbest


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _kbest(potentials, lengths, k):
    return _kbest_call(k)(potentials, lengths)


def _kbest_fwd(potentials, lengths, k):
    scores, paths = _kbest_call(k)(potentials, lengths)
    return (scores, paths), (potentials, paths)


def _kbest_bwd(k, residuals, cotangents):
    """The gradient of the i-th score is the i-th path's edge indicator: the scores' gradients added at the edges
    their paths take (none where a path is -1: past a length, or a path the sequence does not have)."""
    potentials, paths = residuals
    grad_scores = cotangents[0]
    *batch, steps, C, _ = potentials.shape
    B = folded(batch)
    if steps == 0 or B == 0:
        return jnp.zeros_like(potentials), None
    paths = paths.reshape(B, k, steps + 1)
    frm, to = paths[..., :-1], paths[..., 1:]
    taken = (frm >= 0) & (to >= 0)
    weight = jnp.where(taken, grad_scores.reshape(B, k, 1).astype(jnp.float32 if potentials.dtype in (
        jnp.float16, jnp.bfloat16) else potentials.dtype), 0)
    # An index a dimension (each within int32, as a flat index over (T - 1)·C² might not be without x64).
    b = jnp.broadcast_to(jnp.arange(B)[:, None, None], to.shape)
    t = jnp.broadcast_to(jnp.arange(steps)[None, None, :], to.shape)
    grad = jnp.zeros((B, steps, C, C), weight.dtype).at[b, t, jnp.maximum(to, 0), jnp.maximum(frm, 0)].add(weight)
    return grad.reshape(potentials.shape).astype(potentials.dtype), None


_kbest.defvjp(_kbest_fwd, _kbest_bwd)


def chain_kbest(potentials, k, lengths=None):
    """The k best state paths of each sequence's linear-chain CRF (max-plus over paths z of Σ_t potentials[...,
    t, z[t + 1], z[t]]), in order: (scores [..., k] in the potentials' dtype, float32 for half inputs; paths [..., k,
    T] int32). Batch first, as JAX's vmap reads arrays; jitbmm.torch's chain_kbest returns torch-struct's [k, ...]
    instead. Scores in non-increasing order, NaN first as Viterbi's winner; paths of equal score ordered by their
    states read from the last position back, smaller first, so paths[..., 0, :] is chain_viterbi's path (but after an
    edge of +inf or NaN out of a state no finite path reaches: docs/distributions.md). A sequence
    with fewer than k paths of score other than -inf gives -inf and a path of -1 for the rest; -1 past its length.
    potentials and lengths as chain_viterbi takes them (at most 1,024 states); 1 <= k <= 16. Differentiable in the
    scores: the gradient of scores[..., i] is path i's edge indicator."""
    potentials = check_crf(potentials)
    _check_states(potentials, "chain_kbest")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= MAX_K:
        raise ValueError(f"k: the number of best paths, an int from 1 to {MAX_K}, got {k!r}")
    pairs = lengths_operand(lengths, potentials.shape[:-3])
    check_on_gpu(potentials=potentials, lengths=lengths)
    return _kbest(potentials, pairs, int(k))


# ---- Exact samples ------------------------------------------------------------------------------------------------

def _sample_call(potentials, lengths, seed, n):
    batch, T = potentials.shape[:-3], potentials.shape[-3] + 1
    size = workspace_bytes("chain_sample", *_problem(potentials, lengths, "log"), n)
    # Under vmap a loop of calls: each vmapped instance draws as it would alone, from its own seed.
    return call("chain_sample", jax.ShapeDtypeStruct((*batch, n, T), jnp.int32), potentials, lengths, seed,
                workspace=size, vmap_method="sequential", n=np.int64(n))


def _seed_bits(n, key):
    """The kernel's seed, 64 random bits of `key` as two uint32, once n is checked."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n: the number of samples, an int >= 0, got {n!r}")
    try:
        return jax.random.bits(key, (2,), jnp.uint32)
    except (TypeError, ValueError) as e:
        raise TypeError(f"key: expected a JAX PRNG key (jax.random.key or jax.random.PRNGKey): {e}") from None


def chain_sample(potentials, n, key, lengths=None):
    """n exact samples of each sequence's state path from the linear-chain CRF of `potentials`, p(z) ∝ exp Σ_t
    potentials[..., t, z[t + 1], z[t]], by forward filtering and backward sampling: paths [..., n, T] int32 (batch
    first, as chain_kbest's; jitbmm.torch's chain_sample returns [n, ...]), path[..., i, t] the state at position t of
    sample i; -1 past the sequence's length, and throughout for a sequence without a distribution (log Z -inf, +inf or
    NaN) or of a length outside [1, T]. A path of probability 0 is never drawn. `key`: a JAX PRNG key (jax.random.key
    or PRNGKey), from which 64 random bits become the kernel's seed on the device: the same key draws the same paths.
    potentials and lengths as chain_log_partition takes them; n >= 0. Not differentiable (the paths are integers: the
    potentials' gradient through them is none)."""
    potentials = check_crf(potentials)
    seed = _seed_bits(n, key)
    pairs = lengths_operand(lengths, potentials.shape[:-3])
    check_on_gpu(potentials=potentials, lengths=lengths)
    return _sample_call(jax.lax.stop_gradient(potentials), pairs, seed, int(n))


# ---- The HMM form's k best paths and samples, from its tables -----------------------------------------------------

@functools.lru_cache(maxsize=None)
def _hmm_kbest_call(k):
    @custom_vmap
    def kbest(emissions, transitions, initial, lengths):
        batch, T = emissions.shape[:-2], emissions.shape[-2]
        results = (jax.ShapeDtypeStruct((*batch, k), score_dtype(emissions.dtype)),
                   jax.ShapeDtypeStruct((*batch, k, T), jnp.int32))
        size = workspace_bytes("chain_kbest", *_hmm_problem(emissions, transitions, initial, lengths, "max_plus"), k)
        return call("hmm_kbest", results, emissions, transitions, initial, lengths, workspace=size, k=np.int32(k))

    @kbest.def_vmap
    def rule(size, batched, emissions, transitions, initial, lengths):
        return kbest(*_hmm_lead(size, batched, emissions, transitions, initial, lengths, share=True)), (True, True)

    return kbest


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _hmm_kbest(emissions, transitions, initial, lengths, k):
    return _hmm_kbest_call(k)(emissions, transitions, initial, lengths)


def _hmm_kbest_fwd(emissions, transitions, initial, lengths, k):
    scores, paths = _hmm_kbest_call(k)(emissions, transitions, initial, lengths)
    return (scores, paths), (emissions, transitions, initial, paths)


def _hmm_kbest_bwd(k, residuals, cotangents):
    """The gradient of the i-th score is the i-th path's states (emissions, and initial at its first), and its moves
    (transitions), each summed over the sequences where the table is shared; none where a path is -1."""
    emissions, transitions, initial, paths = residuals
    *batch, T, C = emissions.shape
    B = folded(batch)
    acc = jnp.float32 if emissions.dtype in (jnp.float16, jnp.bfloat16) else emissions.dtype
    g = cotangents[0].reshape(B, k, 1).astype(acc)
    paths = paths.reshape(B, k, T)
    b = jnp.broadcast_to(jnp.arange(B)[:, None, None], paths.shape)
    t = jnp.broadcast_to(jnp.arange(T)[None, None, :], paths.shape)
    state = jnp.maximum(paths, 0)
    grad_e = jnp.zeros((B, T, C), acc).at[b, t, state].add(jnp.where(paths >= 0, g, 0))
    frm, to = state[..., :-1], state[..., 1:]
    moved = jnp.where((paths[..., :-1] >= 0) & (paths[..., 1:] >= 0), g, 0)
    if transitions.ndim > 2:
        grad_t = jnp.zeros((B, C, C), acc).at[b[..., 1:], to, frm].add(moved)
    else:
        grad_t = jnp.zeros((C, C), acc).at[to, frm].add(moved)
    first = jnp.where(paths[..., 0] >= 0, g[..., 0], 0)
    if initial.ndim > 1:
        grad_i = jnp.zeros((B, C), acc).at[b[..., 0], state[..., 0]].add(first)
    else:
        grad_i = jnp.zeros((C,), acc).at[state[..., 0]].add(first)
    return (grad_e.reshape(emissions.shape).astype(emissions.dtype),
            grad_t.reshape(transitions.shape).astype(transitions.dtype),
            grad_i.reshape(initial.shape).astype(initial.dtype), None)


_hmm_kbest.defvjp(_hmm_kbest_fwd, _hmm_kbest_bwd)


def hmm_kbest(emissions, transitions, initial, k, lengths=None):
    """The k best state paths of each sequence under an HMM's tables (max-plus over paths z of initial[z[0]] +
    emissions[..., 0, z[0]] + Σ_{t ≥ 1} (transitions[z[t], z[t - 1]] + emissions[..., t, z[t]])), in order, without
    forming the potentials: (scores [..., k], paths [..., k, T] int32), as chain_kbest's; paths[..., 0, :] is
    hmm_viterbi's path, and a length-1 sequence's paths are its k best states by initial + emissions[..., 0, :].
    Arguments as hmm_viterbi's (at most 1,024 states); 1 <= k <= 16. Differentiable in the scores: the gradient of
    scores[..., i] is path i's states (emissions), moves (transitions, summed over the sequences for a shared table)
    and first state (initial)."""
    emissions, transitions, initial = _check_hmm(emissions, transitions, initial)
    _check_states(emissions, "hmm_kbest", "emissions")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= MAX_K:
        raise ValueError(f"k: the number of best paths, an int from 1 to {MAX_K}, got {k!r}")
    pairs = lengths_operand(lengths, emissions.shape[:-2])
    check_on_gpu(emissions=emissions, transitions=transitions, initial=initial, lengths=lengths)
    return _hmm_kbest(emissions, transitions, initial, pairs, int(k))


def _hmm_sample_call(emissions, transitions, initial, lengths, seed, n):
    batch, T = emissions.shape[:-2], emissions.shape[-2]
    size = workspace_bytes("chain_sample", *_hmm_problem(emissions, transitions, initial, lengths, "log"), n)
    return call("hmm_sample", jax.ShapeDtypeStruct((*batch, n, T), jnp.int32), emissions, transitions, initial,
                lengths, seed, workspace=size, vmap_method="sequential", n=np.int64(n))


def hmm_sample(emissions, transitions, initial, n, key, lengths=None):
    """n exact samples of each sequence's state path from an HMM's posterior over paths given its tables, without
    forming the potentials: paths [..., n, T] int32 as chain_sample's (-1 past a length, and throughout for a sequence
    without a distribution; a length-1 sequence's state drawn from initial + emissions[..., 0, :]). Arguments as
    hmm_log_partition's; n >= 0; key as chain_sample's. Not differentiable."""
    emissions, transitions, initial = _check_hmm(emissions, transitions, initial)
    seed = _seed_bits(n, key)
    pairs = lengths_operand(lengths, emissions.shape[:-2])
    check_on_gpu(emissions=emissions, transitions=transitions, initial=initial, lengths=lengths)
    tables = (jax.lax.stop_gradient(x) for x in (emissions, transitions, initial))
    return _hmm_sample_call(*tables, pairs, seed, int(n))
