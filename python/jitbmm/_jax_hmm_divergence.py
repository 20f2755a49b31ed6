"""jitbmm.jax's entropy, cross-entropy and KL of HMMs (docs/jax.md; docs/distributions.md, "Entropy, cross-entropy and
KL") from their tables, as hmm_log_partition takes them, without forming the potentials: the same kernels as the CRF
form's in _jax_distributions, log-partitions and one expectation E_p[F] of a path's score under a field's tables (p's
own, or a second HMM q's of the same shapes) from fused passes, with a fused backward that gives every table's gradient.
Under jit, grad, vmap (a rule that folds the vmapped axis into the batch, as the chains' do) and jax.checkpoint."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ._jax_chains import _check_hmm, _hmm_lead, _hmm_problem
from ._jax_distributions import (CHAIN, DIFFERENCE, GIVEN, _check_states, _expectation_results, _log_z_in_front,
                                 _log_z_rows_first, _upstream, _value)
from ._jax_support import (absent, call, check_on_gpu, custom_vmap, lead, lengths_operand, per_row,
                           saved_batched_apart, workspace_bytes)

# The calls' operands: p's tables, q's (absent for the entropy, whose field is p's own tables), the lengths.
_TABLES = 6
_SHARED_RANK = (None, 2, 1) * 2  # a shared table's rank: transitions [C, C], initial [C]; emissions never shared


def _led(size, batched, operands, kind, share):
    """The tables and lengths with the vmapped axis in front, each table one per sequence as _hmm_lead leads an
    HMM's, p's and q's laid out alike (one problem reads both): where `share` (no backward follows) a pair of shared
    tables neither of which is vmapped stays one table."""
    p, q, lengths = operands[:3], operands[3:6], operands[6]
    if kind == GIVEN:
        *p, lengths = _hmm_lead(size, (*batched[:3], batched[6]), *p, lengths, share=share)
        return (*p, *q, lengths)
    share = share and tuple(batched[1:3]) == tuple(batched[4:6])  # the pairs alike: shared both, or neither
    *p, lengths = _hmm_lead(size, (*batched[:3], batched[6]), *p, lengths, share=share)
    *q, _ = _hmm_lead(size, (*batched[3:6], False), *q, jnp.zeros((0,), jnp.int32), share=share)
    return (*p, *q, lengths)


@functools.lru_cache(maxsize=None)
def _expectation(kind, keep):
    @custom_vmap
    def forward(emissions, transitions, initial, q_emissions, q_transitions, q_initial, lengths):
        # The forward takes no scratch; asking the backward's makes the plan both run, now, as every handler's is.
        problem = _hmm_problem(emissions, transitions, initial, lengths, "log")
        workspace_bytes("chain_expectation", *problem, kind)
        results = _expectation_results(emissions.shape[:-2], emissions.dtype, kind, keep, problem)
        return call("hmm_expectation", results, emissions, transitions, initial, q_emissions, q_transitions,
                    q_initial, lengths, kind=np.int32(kind))

    @forward.def_vmap
    def rule(size, batched, *operands):
        log_z, mean, saved = forward(*_led(size, batched, operands, kind, share=not keep))
        return (_log_z_in_front(log_z, kind), mean, saved), (True, True, False)

    return forward


@functools.lru_cache(maxsize=None)
def _expectation_backward(kind):
    @custom_vmap
    def backward(emissions, transitions, initial, q_emissions, q_transitions, q_initial, lengths, saved, log_z, mean,
                 grad_log_z, grad_mean):
        tables = (emissions, transitions, initial, q_emissions, q_transitions, q_initial)
        grads = tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in tables)
        size = workspace_bytes("chain_expectation", *_hmm_problem(emissions, transitions, initial, lengths, "log"),
                               kind)
        return call("hmm_expectation_backward", grads, *tables, lengths, saved, log_z, mean, grad_log_z, grad_mean,
                    workspace=size, kind=np.int32(kind))

    @backward.def_vmap
    def rule(size, batched, *operands):
        if batched[7]:
            raise saved_batched_apart()
        if not any(batched[:10]):
            return per_row(size, backward, operands, (None,) * 10 + tuple(batched[10:])), (True,) * _TABLES
        # A shared table becomes one per sequence, each vmapped instance's gradient of it then its sequences' sum.
        shared = [rank is not None and not absent(x) and x.ndim - b == rank
                  for x, b, rank in zip(operands, batched, _SHARED_RANK)]
        led = _led(size, batched, operands[:7], kind, share=False)
        log_z, mean, grad_log_z, grad_mean = (lead(x, b, size) for x, b in zip(operands[8:], batched[8:]))
        grads = backward(*led, operands[7], _log_z_rows_first(log_z, kind), mean,
                         _log_z_rows_first(grad_log_z, kind), grad_mean)
        sequences = tuple(range(1, led[0].ndim - 2))
        grads = tuple(g.sum(sequences) if sh else g for g, sh in zip(grads, shared))
        return grads, (True,) * 3 + (kind != GIVEN,) * 3  # the entropy's absent q has no gradient, nor vmapped axis

    return backward


@functools.partial(jax.custom_vjp, nondiff_argnums=(7,))
def _divergence(emissions, transitions, initial, q_emissions, q_transitions, q_initial, lengths, kind):
    log_z, mean, _ = _expectation(kind, False)(emissions, transitions, initial, q_emissions, q_transitions, q_initial,
                                               lengths)
    return _value(kind, log_z, mean)


def _divergence_fwd(emissions, transitions, initial, q_emissions, q_transitions, q_initial, lengths, kind):
    operands = (emissions, transitions, initial, q_emissions, q_transitions, q_initial, lengths)
    log_z, mean, saved = _expectation(kind, True)(*operands)
    return _value(kind, log_z, mean), (*operands, saved, log_z, mean)


def _divergence_bwd(kind, residuals, grad):
    *operands, saved, log_z, mean = residuals
    grads = _expectation_backward(kind)(*operands, saved, log_z, mean, *_upstream(kind, grad, mean.dtype))
    return (*grads[:3], *(grads[3:] if kind != GIVEN else (None,) * 3), None)


_divergence.defvjp(_divergence_fwd, _divergence_bwd)


def _alike(p, q, batch, rank):
    """A table of p's and q's of one layout: as they are where both are shared (of `rank` dimensions) or neither, else
    the shared one broadcast to one per sequence (its gradient summed back by JAX)."""
    if (p.ndim == rank) == (q.ndim == rank):
        return p, q
    return tuple(x if x.ndim > rank else jnp.broadcast_to(x, (*batch, *x.shape)) for x in (p, q))


def _operands(tables, q_tables, lengths, what):
    """The checked operands of a quantity of one HMM (q_tables None) or of two."""
    emissions, transitions, initial = _check_hmm(*tables)
    _check_states(emissions, what, "emissions")
    batch = emissions.shape[:-2]
    if q_tables is None:
        q_emissions = q_transitions = q_initial = jnp.zeros((0,), emissions.dtype)
    else:
        q_emissions, q_transitions, q_initial = _check_hmm(*q_tables, prefix="q_")
        if q_emissions.dtype != emissions.dtype:
            raise TypeError(f"q_emissions: dtype {q_emissions.dtype} differs from the emissions' {emissions.dtype}")
        if q_emissions.shape != emissions.shape:
            raise ValueError(f"q_emissions: expected the emissions' shape {emissions.shape}, got {q_emissions.shape}")
        transitions, q_transitions = _alike(transitions, q_transitions, batch, 2)
        initial, q_initial = _alike(initial, q_initial, batch, 1)
    pairs = lengths_operand(lengths, batch)
    check_on_gpu(emissions=emissions, transitions=transitions, initial=initial, q_emissions=q_emissions,
                 q_transitions=q_transitions, q_initial=q_initial, lengths=lengths)
    return emissions, transitions, initial, q_emissions, q_transitions, q_initial, pairs


def hmm_entropy(emissions, transitions, initial, lengths=None):
    """H(p)[...] = -Σ_z p(z) log p(z) over the state paths z of each sequence, p the posterior over paths of an HMM's
    tables (p(z) ∝ exp of z's score as hmm_log_partition scores it), without forming the potentials: log Z minus the
    expected path score, both from one fused pass. Arguments as hmm_log_partition's (at most 1,024 states); H in the
    emissions' dtype (float32 for half inputs). A length-1 sequence's is the entropy of its first state (initial +
    emissions[..., 0, :]); NaN for a sequence with no distribution (log Z -inf, +inf or NaN) or a length outside
    [1, T]. Differentiable in the three tables by a fused backward (a shared table's gradient summed over the
    sequences), without second derivatives."""
    return _divergence(*_operands((emissions, transitions, initial), None, lengths, "hmm_entropy"), GIVEN)


def hmm_cross_entropy(emissions, transitions, initial, q_emissions, q_transitions, q_initial, lengths=None):
    """H(p, q)[...] = -Σ_z p(z) log q(z), p the HMM of the first three tables and q that of q_emissions (the
    emissions' shape), q_transitions and q_initial (each shared or one per sequence, whether p's is or not), all of
    one dtype: log Z_q minus p's expectation of q's path score. +inf where p gives weight to a path q gives none; NaN
    where either has no distribution. Arguments otherwise as hmm_entropy's; differentiable in all six tables."""
    operands = _operands((emissions, transitions, initial), (q_emissions, q_transitions, q_initial), lengths,
                         "hmm_cross_entropy")
    return _divergence(*operands, CHAIN)


def hmm_kl(emissions, transitions, initial, q_emissions, q_transitions, q_initial, lengths=None):
    """KL(p ‖ q)[...] = Σ_z p(z) log(p(z) / q(z)) of two HMMs given by their tables: p's expectation of the difference
    of the path scores, minus log Z_p, plus log Z_q, from one fused pass (the difference formed in the accumulator's
    type). +inf where p gives weight to a path q gives none. Arguments and gradients as hmm_cross_entropy's."""
    operands = _operands((emissions, transitions, initial), (q_emissions, q_transitions, q_initial), lengths,
                         "hmm_kl")
    return _divergence(*operands, DIFFERENCE)
