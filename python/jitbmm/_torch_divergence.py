"""jitbmm.torch's entropy, cross-entropy and KL of linear-chain CRFs (include/jitbmm/chain_expectation.hpp,
docs/distributions.md "Entropy, cross-entropy and KL"): each is log-partitions and one expectation E_p[F] of a path's
sum of a field f under the chain p, computed with its conditional messages in fused kernels, a block (or a cluster of
blocks) a sequence, and differentiated by a fused backward. For the cross-entropy and KL the field is the second chain q
itself, whose log-partition the same kernels compute beside.

The operators are jitbmm::chain_divergence (potentials, field or None for p itself, lengths, kind, keep → the
quantity, log Z, E_p[F], saved messages) and jitbmm::chain_divergence_backward; torch.compile and torch.export trace
them as single nodes. The HMM form's (_torch_hmm_divergence) shares the field kinds, plans, outputs, upstream gradients
and the quantities in torch operations with them."""

import ctypes
from typing import Optional

import torch

import jitbmm

from ._torch_chain_second_order import crf_score, second_order
from ._torch_chain_checks import _check_crf, _check_tensor
from ._torch_operator import Operator
from ._torch_support import (LibraryPlan, address, cached, chain_key, chain_problem, score_dtype, stored,
                             stream, traced_bytes)

_plans = {}

# What the field is (ExpectationField): the field as given; a second chain q (log Z_q beside); q read as p - q.
GIVEN, CHAIN, DIFFERENCE = 0, 1, 2


def expectation_plan(device, problem, kind):
    """The C library's ChainExpectation plan of `problem` (a jitbmm_chain_problem, either form) and field `kind` on
    `device`, with the bytes of its saving forward's `saved` and of its backward's scratch."""
    plan = LibraryPlan("chain_expectation", device, ctypes.byref(problem), kind)
    saved, workspace = ctypes.c_size_t(), ctypes.c_size_t()
    jitbmm._check(jitbmm._lib.jitbmm_chain_expectation_bytes(plan.handle, ctypes.byref(saved),
                                                             ctypes.byref(workspace)))
    plan.saved, plan.workspace = saved.value, workspace.value
    return plan


def fake_saved(inputs, kind, keep, problem):
    """The bytes of `saved` a fake (traced) forward gives: none unless `keep`, else the library's for problem() and
    field `kind` (traced_bytes)."""
    def size():
        n = ctypes.c_size_t()
        jitbmm._check(jitbmm._library().jitbmm_chain_expectation_saved_bytes(ctypes.byref(problem()), kind,
                                                                             ctypes.byref(n)))
        return n.value

    return traced_bytes(inputs, size) if keep else 0


def _problem(potentials, lengths):
    """The CRF form's jitbmm_chain_problem of potentials and lengths."""
    dtype, _device, B, T, C, with_lengths = chain_key(potentials, lengths)
    return chain_problem("log", dtype, B, T, C, with_lengths)


def _planned(potentials, lengths, kind):
    key = chain_key(potentials, lengths) + (kind,)
    return cached(_plans, key, lambda: expectation_plan(key[1], _problem(potentials, lengths), kind))


def _outputs(like, B, kind, saved):
    """The library's outputs for B sequences, uninitialised: log Z_p [B] (with a chain as the field [2, B]: log Z_p,
    then log Z_q) and E_p[F] [B] in like's score_dtype, and `saved` bytes of what the backward reads (both sweeps'
    messages; none where nothing is kept)."""
    dtype = score_dtype(like)
    return (like.new_empty((B,) if kind == GIVEN else (2, B), dtype=dtype), like.new_empty((B,), dtype=dtype),
            like.new_empty((saved,), dtype=torch.uint8))


def _value(kind, log_z, mean):
    """The quantity of a kind from the library's log-partitions and expectation: the entropy log Z − E_p[F] (the
    field p itself), the cross-entropy log Z_q − E_p[F] or KL(p ‖ q) = E_p[F] − log Z_p + log Z_q."""
    if kind == GIVEN:
        return log_z - mean
    if kind == CHAIN:
        return torch.sub(log_z[1], mean)
    return torch.add(mean, log_z[1]).sub_(log_z[0])


# The gradients of a kind's quantity with respect to log Z ([1 or 2, B]) and E_p[F] ([1, B]), as rows of one tensor,
# are its gradient times these signs: the entropy's (its field being p itself, the gradients through log Z_p and
# through the field cancel, so neither is asked for: -Cov_p(1_e, F) is the whole of it), the cross-entropy's after
# a row of zeros for log Z_p (a product with 0 would make NaN of an infinite gradient), KL's.
_SIGNS = {GIVEN: (-1,), CHAIN: (1, -1), DIFFERENCE: (-1, 1, 1)}
_signs = {}


def _upstream(kind, grad_value):
    """(a tensor of the upstream gradients' rows, the address of grad_log_z or None, that of grad_mean)."""
    key = (grad_value.device, grad_value.dtype, kind)
    signs = _signs.get(key)
    if signs is None:
        signs = _signs.setdefault(key, torch.tensor(_SIGNS[kind], dtype=grad_value.dtype,
                                                    device=grad_value.device)[:, None])
    rows = grad_value * signs
    if kind == CHAIN:
        rows = torch.nn.functional.pad(rows, (0, 0, 1, 0))
    rows = rows.contiguous()
    at, row = rows.data_ptr(), rows.shape[1] * rows.element_size()
    return rows, (None if kind == GIVEN else at), at + (rows.shape[0] - 1) * row


def _forward(potentials: torch.Tensor, field: Optional[torch.Tensor], lengths: Optional[torch.Tensor], kind: int,
             keep: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    plan = _planned(potentials, lengths, kind)
    log_z, mean, saved = _outputs(potentials, potentials.shape[0], kind, plan.saved if keep else 0)
    status = jitbmm._lib.jitbmm_chain_expectation_run(
        plan.handle, potentials.data_ptr(), (potentials if field is None else field).data_ptr(), address(lengths),
        log_z.data_ptr(), mean.data_ptr(), saved.data_ptr() if keep else None, stream(plan.device))
    if status:
        jitbmm._check(status)
    return _value(kind, log_z, mean), log_z, mean, saved


def _backward(potentials: torch.Tensor, field: Optional[torch.Tensor], lengths: Optional[torch.Tensor], kind: int,
              saved: torch.Tensor, log_z: torch.Tensor, mean: torch.Tensor, grad_value: torch.Tensor,
              need_potentials: bool, need_field: bool) -> tuple[torch.Tensor, torch.Tensor]:
    plan = _planned(potentials, lengths, kind)
    need_field = need_field and field is not None
    grads = [t.new_empty(t.shape if need else (0,)) for t, need in ((potentials, need_potentials),
                                                                   (potentials if field is None else field,
                                                                    need_field))]
    rows, grad_log_z, grad_mean = _upstream(kind, grad_value)
    ws = plan.workspace
    scratch = potentials.new_empty((ws,), dtype=torch.uint8) if ws else None
    status = jitbmm._lib.jitbmm_chain_expectation_backward(
        plan.handle, potentials.data_ptr(), (potentials if field is None else field).data_ptr(), address(lengths),
        saved.data_ptr(), log_z.data_ptr(), mean.data_ptr(), grad_log_z, grad_mean,
        *(g.data_ptr() if g.numel() else None for g in grads), address(scratch), ws, stream(plan.device))
    if status:
        jitbmm._check(status)
    return tuple(grads)


_op = torch.library.custom_op("jitbmm::chain_divergence", _forward, mutates_args=(), device_types="cuda")
_backward_op = torch.library.custom_op("jitbmm::chain_divergence_backward", _backward, mutates_args=(),
                                       device_types="cuda")


@_op.register_fake
def _(potentials, field, lengths, kind, keep):
    saved = fake_saved((potentials, field), kind, keep, lambda: _problem(potentials, lengths))
    log_z, mean, saved = _outputs(potentials, potentials.shape[0], kind, saved)
    return mean.new_empty(mean.shape), log_z, mean, saved


@_backward_op.register_fake
def _(potentials, field, lengths, kind, saved, log_z, mean, grad_value, need_potentials, need_field):
    return tuple(t.new_empty(t.shape if need else (0,))
                 for t, need in ((potentials, need_potentials),
                                 (potentials if field is None else field, need_field and field is not None)))


def _setup_context(ctx, inputs, output):
    potentials, field, lengths, kind, _keep = inputs
    _quantity, log_z, mean, saved = output
    ctx.kind = kind
    ctx.save_for_backward(potentials, field, lengths, saved, log_z, mean)


def expected(mu, field):
    """μ·f, the terms of E_p[F] = Σ μ f over marginals μ: a marginal of 0 reads nothing of f, so that what p forbids
    adds nothing whatever the field holds there (-inf, NaN), as in the kernels."""
    return mu * torch.where(mu != 0, field, torch.zeros_like(field))


def combined(kind, log_partition, expectation):
    """The kind's quantity [B] in torch operations, as a function of p's inputs and q's (tuples; q None for the
    entropy), from log_partition(*inputs) and expectation(p, f) = (log Z_p, E_p[F]) of a field f given as inputs of
    p's shapes: for KL, p's minus q's, input by input (a path's score is linear in them)."""
    def quantity(p, q=None):
        if kind == GIVEN:
            log_z, mean = expectation(p, p)
            return log_z - mean
        if kind == CHAIN:
            return log_partition(*q) - expectation(p, q)[1]
        log_z, mean = expectation(p, tuple(a - b for a, b in zip(p, q)))
        return mean - log_z + log_partition(*q)

    return quantity


def _quantity(kind, lengths):
    """The kind's quantity [B] of (potentials[, field]) in torch operations, differentiable to any order: the forward
    algorithm's log-partitions (crf_score) and the expectation E_p[F] = Σ μ F over its marginals μ, the gradient of log
    Z_p taken with create_graph. What a backward with create_graph=True differentiates (second_order)."""
    log_partition = crf_score("log", lengths)

    def expectation(p, f):
        log_z = log_partition(*p)
        (mu,) = torch.autograd.grad(log_z.sum(), p, create_graph=True)
        return log_z, expected(mu, f[0]).sum((1, 2, 3))

    quantity = combined(kind, log_partition, expectation)
    return lambda potentials, field=None: quantity((potentials,), None if field is None else (field,))


def _gradients(ctx, grads, needs, backward):
    potentials, field, lengths, saved, log_z, mean = ctx.saved_tensors
    with torch.no_grad():  # the operator's output takes its derivatives from second_order, not from a graph
        gp, gf = backward(potentials, field, lengths, ctx.kind, saved, log_z, mean, grads[0], needs[0],
                          needs[1])
    # Differentiable again under create_graph=True, through the quantity in torch operations.
    inputs = (potentials,) if field is None else (potentials, field)
    which = tuple(i for i in range(len(inputs)) if needs[i])
    asked = iter(second_order(_quantity(ctx.kind, lengths), grads[0], inputs, which, tuple((gp, gf)[i] for i in which)))
    return (next(asked) if needs[0] else None, next(asked) if needs[1] and field is not None else None,
            None, None, None)


_divergence = Operator(_op, _forward, _setup_context, _gradients, _backward_op, _backward,
                       non_differentiable=(1, 2, 3))


def _divergence_of(kind, potentials, field, lengths):
    """The quantity of `kind` [B] (entropy where field is None); each input contiguous here."""
    keep = torch.is_grad_enabled() and (potentials.requires_grad or (field is not None and field.requires_grad))
    lengths = None if lengths is None else lengths.contiguous()  # the kernels read it as one array
    return _divergence(stored(potentials).contiguous(), None if field is None else stored(field).contiguous(), lengths,
                       kind,
                       keep)[0]


def _check_pair(potentials, other, lengths):
    _check_crf(potentials, lengths)
    _check_tensor(other, "other")
    if other.dtype != potentials.dtype:
        raise TypeError(f"other: dtype {other.dtype} differs from the potentials' {potentials.dtype}")
    if other.device != potentials.device or other.shape != potentials.shape:
        raise ValueError(f"other: expected the potentials' shape {tuple(potentials.shape)} on {potentials.device}, "
                         f"got {tuple(other.shape)} on {other.device}")


def chain_entropy(potentials, lengths=None):
    """H(p)[b] = -Σ_z p(z) log p(z) over the state paths z of sequence b of the linear-chain CRF p whose potentials
    are `potentials` (torch_struct.LinearChainCRF(potentials, lengths).entropy).

    potentials [B, T - 1, C, C] as chain_log_partition takes them (copied if not contiguous), with at most 1,024
    states; lengths likewise. Returns H [B] in the potentials' dtype (float32 for half inputs), exact to the
    accumulator's rounding: log Z minus the expected path score, both from one fused pass of conditional
    expectations. NaN for a sequence with no distribution (log Z -inf, +inf or NaN) or a length outside [1, T];
    log C for one position (its C paths of no edge are equally likely). Its gradient comes from a fused backward
    (the covariance of each edge with the path score); under create_graph=True that gradient is differentiable again,
    through the forward algorithm in torch operations (a step at a time, much slower than the fused one)."""
    _check_crf(potentials, lengths)
    return _divergence_of(GIVEN, potentials, None, lengths)


def chain_cross_entropy(potentials, other, lengths=None):
    """H(p, q)[b] = -Σ_z p(z) log q(z), p the chain of `potentials` and q that of `other` (the same shape, dtype and
    device; torch_struct's p.cross_entropy(q)): log Z_q minus p's expectation of q's path score. +inf where p gives
    weight to a path q gives none; NaN where either has no distribution. Arguments, dtype and gradients (with respect
    to both) as chain_entropy's."""
    _check_pair(potentials, other, lengths)
    return _divergence_of(CHAIN, potentials, other, lengths)


def chain_kl(potentials, other, lengths=None):
    """KL(p ‖ q)[b] = Σ_z p(z) log(p(z) / q(z)) (torch_struct's p.kl(q)): p's expectation of the difference of the
    path scores, minus log Z_p, plus log Z_q, all from one fused pass (the difference formed in the accumulator
    type). +inf where p gives weight to a path q gives none. Arguments and gradients as chain_cross_entropy's."""
    _check_pair(potentials, other, lengths)
    return _divergence_of(DIFFERENCE, potentials, other, lengths)
