"""jitbmm.torch's entropy, cross-entropy and KL of HMMs from their tables (include/jitbmm/chain_expectation.hpp,
docs/distributions.md "Entropy, cross-entropy and KL"): the CRF form's quantities (_torch_divergence), whose field
kinds, outputs and upstream gradients they share, computed without forming the potentials [B, T - 1, C, C]. The library
reads p's tables and the field's (q's) at one layout, so where the two are laid out differently they are brought to one
first.

The operators are jitbmm::hmm_divergence (p's three tables, q's or None for p itself, lengths, kind, keep → the
quantity, log Z, E_p[F], saved messages) and jitbmm::hmm_divergence_backward; torch.compile and torch.export trace
them as single nodes."""

import ctypes
from typing import Optional, Sequence

import torch

import jitbmm

from ._abi import _CHmmGradients, _CHmmTables
from ._torch_chain_second_order import hmm_score, second_order
from ._torch_chain_checks import _check_hmm
from ._torch_chains import _hmm_layout, _layout
from ._torch_divergence import (CHAIN, DIFFERENCE, GIVEN, _outputs, _upstream, _value, combined, expectation_plan,
                                expected, fake_saved)
from ._torch_operator import Operator
from ._torch_support import address, cached, stream

_plans = {}


def _field(emissions, transitions, initial):
    """q's tables, or None where none is given (the field is p's own)."""
    given = [t is not None for t in (emissions, transitions, initial)]
    if any(given) and not all(given):
        raise ValueError("q_emissions, q_transitions, q_initial: all three tables or none")
    return (emissions, transitions, initial) if all(given) else None


def _strides(t):
    """t's strides where they matter: along its dimensions of more than one element."""
    return tuple(s for s, n in zip(t.stride(), t.shape) if n > 1)


def _alike(tables, fields):
    """p's tables and the field's (None: p's own) as the library reads them, at one layout: each as _layout gives it,
    and a pair whose strides differ both copied contiguous."""
    tables = [_layout(t)[0] for t in tables]
    if fields is None:
        return tables, None
    fields = [_layout(f)[0] for f in fields]
    for i, (t, f) in enumerate(zip(tables, fields)):
        if t.shape != f.shape:
            raise ValueError(f"q_{('emissions', 'transitions', 'initial')[i]}: shape {tuple(f.shape)} differs from "
                             f"p's {tuple(t.shape)}")
        if _strides(t) != _strides(f):
            tables[i], fields[i] = t.contiguous(), f.contiguous()
    return tables, fields


def _matched(tables, fields):
    """p's tables and q's of one shape each: a table shared by the batch expanded to one a sequence where the other
    HMM's is per sequence (the expansion's gradient sums it back)."""
    tables, fields = list(tables), list(fields)
    for i in (1, 2):
        if tables[i].shape != fields[i].shape:
            shape = tables[i].shape if tables[i].dim() > fields[i].dim() else fields[i].shape
            tables[i], fields[i] = tables[i].expand(shape), fields[i].expand(shape)
    return tables, fields


def _laid_out(tables, fields, lengths):
    """(the plans' key, a thunk of the problem, p's tables, the field's, lengths) as the library reads them; the
    field p's own tables where `fields` is None."""
    tables, fields = _alike(tables, fields)
    key, problem, tables, lengths = _hmm_layout("log", *tables, lengths)
    return key, problem, tables, (tables if fields is None else fields), lengths


def _planned(tables, fields, lengths, kind):
    """(plan, p's tables, the field's, lengths) as the library reads them."""
    key, problem, tables, fields, lengths = _laid_out(tables, fields, lengths)
    plan = cached(_plans, (*key, kind), lambda: expectation_plan(tables[0].device.index, problem(), kind))
    return plan, tables, fields, lengths


def _c_tables(tables):
    """jitbmm_hmm_tables of three tensors."""
    return _CHmmTables(*(t.data_ptr() for t in tables))


def _forward(emissions: torch.Tensor, transitions: torch.Tensor, initial: torch.Tensor,
             q_emissions: Optional[torch.Tensor], q_transitions: Optional[torch.Tensor],
             q_initial: Optional[torch.Tensor], lengths: Optional[torch.Tensor], kind: int,
             keep: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    plan, tables, fields, lengths = _planned((emissions, transitions, initial),
                                             _field(q_emissions, q_transitions, q_initial), lengths, kind)
    log_z, mean, saved = _outputs(emissions, emissions.shape[0], kind, plan.saved if keep else 0)
    status = jitbmm._lib.jitbmm_chain_expectation_run_hmm(
        plan.handle, ctypes.byref(_c_tables(tables)), ctypes.byref(_c_tables(fields)), address(lengths),
        log_z.data_ptr(), mean.data_ptr(), saved.data_ptr() if keep else None, stream(plan.device))
    if status:
        jitbmm._check(status)
    return _value(kind, log_z, mean), log_z, mean, saved


def _gradient_buffers(inputs, needs):
    """Each of the six tables' gradients, uninitialised and contiguous where `needs` asks for it, else empty (a field
    of None, p's own, takes none)."""
    return tuple(t.new_empty(t.shape) if t is not None and need else inputs[0].new_empty((0,))
                 for t, need in zip(inputs, needs))


def _backward(emissions: torch.Tensor, transitions: torch.Tensor, initial: torch.Tensor,
              q_emissions: Optional[torch.Tensor], q_transitions: Optional[torch.Tensor],
              q_initial: Optional[torch.Tensor], lengths: Optional[torch.Tensor], kind: int, saved: torch.Tensor,
              log_z: torch.Tensor, mean: torch.Tensor, grad_value: torch.Tensor,
              needs: Sequence[bool]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                              torch.Tensor]:
    inputs = (emissions, transitions, initial, q_emissions, q_transitions, q_initial)
    plan, tables, fields, lengths = _planned(inputs[:3], _field(*inputs[3:]), lengths, kind)
    grads = _gradient_buffers(inputs, needs)
    grad_p, grad_q = (_CHmmGradients(*(g.data_ptr() if g.numel() else None for g in part))
                      for part in (grads[:3], grads[3:]))
    rows, grad_log_z, grad_mean = _upstream(kind, grad_value)
    ws = plan.workspace
    scratch = emissions.new_empty((ws,), dtype=torch.uint8) if ws else None
    status = jitbmm._lib.jitbmm_chain_expectation_backward_hmm(
        plan.handle, ctypes.byref(_c_tables(tables)), ctypes.byref(_c_tables(fields)), address(lengths),
        saved.data_ptr(), log_z.data_ptr(), mean.data_ptr(), grad_log_z, grad_mean, ctypes.byref(grad_p),
        ctypes.byref(grad_q), address(scratch), ws, stream(plan.device))
    if status:
        jitbmm._check(status)
    return grads


_op = torch.library.custom_op("jitbmm::hmm_divergence", _forward, mutates_args=(), device_types="cuda")
_backward_op = torch.library.custom_op("jitbmm::hmm_divergence_backward", _backward, mutates_args=(),
                                       device_types="cuda")


@_op.register_fake
def _(emissions, transitions, initial, q_emissions, q_transitions, q_initial, lengths, kind, keep):
    tables, fields = (emissions, transitions, initial), _field(q_emissions, q_transitions, q_initial)
    saved = fake_saved((*tables, *(fields or ())), kind, keep, lambda: _laid_out(tables, fields, lengths)[1]())
    log_z, mean, saved = _outputs(emissions, emissions.shape[0], kind, saved)
    return mean.new_empty(mean.shape), log_z, mean, saved


@_backward_op.register_fake
def _(emissions, transitions, initial, q_emissions, q_transitions, q_initial, lengths, kind, saved, log_z, mean,
      grad_value, needs):
    return _gradient_buffers((emissions, transitions, initial, q_emissions, q_transitions, q_initial), needs)


def _setup_context(ctx, inputs, output):
    *tables, lengths, kind, _keep = inputs
    ctx.kind = kind
    ctx.save_for_backward(*tables, lengths, *output[1:])


def _per_sequence(tables):
    """An HMM's tables with the shared ones expanded to one a sequence."""
    emissions, transitions, initial = tables
    B, _, C = emissions.shape
    return emissions, transitions.expand(B, C, C), initial.expand(B, C)


def _quantity(kind, lengths):
    """The kind's quantity [B] of p's tables (then q's) in torch operations, differentiable to any order: the forward
    algorithm's log-partitions (hmm_score) and E_p[F] = Σ μ f over each table's marginals μ, a sequence's own (the
    gradients of log Z_p with respect to the tables expanded to one a sequence, taken with create_graph). What a
    backward with create_graph=True differentiates (second_order)."""
    log_partition = hmm_score("log", lengths)

    def expectation(p, f):
        p, f = _per_sequence(p), _per_sequence(f)
        log_z = log_partition(*p)
        mu = torch.autograd.grad(log_z.sum(), p, create_graph=True, allow_unused=True)  # T = 1 reads no transition
        return log_z, sum(expected(m, x).flatten(1).sum(1) for m, x in zip(mu, f) if m is not None)

    quantity = combined(kind, log_partition, expectation)
    return lambda *tables: quantity(tables[:3], tables[3:] or None)


def _gradients(ctx, grads, needs, backward):
    *inputs, lengths, log_z, mean, saved = ctx.saved_tensors
    present = inputs if inputs[3] is not None else inputs[:3]
    needs = [bool(need) and i < len(present) for i, need in enumerate(needs[:6])]
    with torch.no_grad():  # the operator's output takes its derivatives from second_order, not from a graph
        found = backward(*inputs, lengths, ctx.kind, saved, log_z, mean, grads[0], needs)
    # Differentiable again under create_graph=True, through the quantity in torch operations.
    which = tuple(i for i, need in enumerate(needs) if need)
    asked = iter(second_order(_quantity(ctx.kind, lengths), grads[0], tuple(present), which,
                              tuple(found[i] for i in which)))
    return (*(next(asked) if need else None for need in needs), None, None, None)


_divergence = Operator(_op, _forward, _setup_context, _gradients, _backward_op, _backward,
                       non_differentiable=(1, 2, 3))


def _divergence_of(kind, tables, fields, lengths):
    """The quantity of `kind` [B] of p's tables and q's (None: the entropy, whose field is p's own), q's brought to
    p's layout here, where autograd sees the copies and expansions."""
    if fields is not None:
        tables, fields = _alike(*_matched(tables, fields))
    inputs = (*tables, *(fields or (None,) * 3))
    keep = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in inputs)
    return _divergence(*inputs, lengths, kind, keep)[0]


def _check_pair(emissions, transitions, initial, q_emissions, q_transitions, q_initial, lengths):
    _check_hmm(emissions, transitions, initial, lengths)
    _check_hmm(q_emissions, q_transitions, q_initial, None, "q_", emissions)
    return (emissions, transitions, initial), (q_emissions, q_transitions, q_initial)


def hmm_entropy(emissions, transitions, initial, lengths=None):
    """H(p)[b] = -Σ_z p(z) log p(z) over the state paths z of sequence b, p the HMM's posterior over paths given its
    tables, p(z) ∝ exp(initial[z[0]] + emissions[b, 0, z[0]] + Σ_{t ≥ 1} (transitions[z[t], z[t - 1]] +
    emissions[b, t, z[t]])), without forming the potentials [B, T - 1, C, C]: chain_entropy of the chain they form.

    emissions, transitions, initial and lengths as hmm_log_partition takes them (any strides), with at most 1,024
    states. Returns H [B] in their dtype (float32 for half tables), as chain_entropy's: NaN for a sequence with no
    distribution or of a length outside [1, T]; a length-1 sequence's is that of its first state's distribution,
    softmax(initial + emissions[b, 0]). Its gradients with respect to the three tables (summed over the batch for a
    shared one) come from a fused backward; under create_graph=True they are differentiable again, as
    chain_entropy's."""
    _check_hmm(emissions, transitions, initial, lengths)
    return _divergence_of(GIVEN, (emissions, transitions, initial), None, lengths)


def hmm_cross_entropy(emissions, transitions, initial, q_emissions, q_transitions, q_initial, lengths=None):
    """H(p, q)[b] = -Σ_z p(z) log q(z), p the HMM of emissions, transitions and initial and q that of q_emissions,
    q_transitions and q_initial (torch_struct's p.cross_entropy(q)): log Z_q minus p's expectation of q's path score.
    q_emissions of the emissions' shape, q's tables of their dtype and device; each of q's transitions and initial
    shared or per sequence whatever p's is, at any strides (where p's and q's layouts differ, a copy or a shared
    table's expansion brings them to one). +inf where p gives weight to a path q gives none; NaN where either has no
    distribution. Arguments, dtype and gradients (with respect to all six tables) as hmm_entropy's."""
    p, q = _check_pair(emissions, transitions, initial, q_emissions, q_transitions, q_initial, lengths)
    return _divergence_of(CHAIN, p, q, lengths)


def hmm_kl(emissions, transitions, initial, q_emissions, q_transitions, q_initial, lengths=None):
    """KL(p ‖ q)[b] = Σ_z p(z) log(p(z) / q(z)) of the HMMs p of (emissions, transitions, initial) and q of
    (q_emissions, q_transitions, q_initial) (torch_struct's p.kl(q)): p's expectation of the difference of the path
    scores, minus log Z_p, plus log Z_q, all from one fused pass (the difference formed in the accumulator type).
    +inf where p gives weight to a path q gives none. Arguments and gradients as hmm_cross_entropy's."""
    p, q = _check_pair(emissions, transitions, initial, q_emissions, q_transitions, q_initial, lengths)
    return _divergence_of(DIFFERENCE, p, q, lengths)
