"""jitbmm.torch's k best paths of linear chains, in the CRF and the HMM form (include/jitbmm/chain_kbest.hpp,
docs/distributions.md "The k best paths"): Viterbi that keeps the k best paths ending in every state, one fused kernel a
call. The operators are jitbmm::chain_kbest and jitbmm::hmm_kbest; their scores' gradient is each path's indicator (its
edges; the HMM form's states and moves), a scatter of the paths they returned."""

import ctypes
import math
from typing import Optional

import torch

import jitbmm

from ._torch_chain_checks import _check_crf, _check_hmm
from ._torch_chains import _hmm_layout
from ._torch_operator import Operator
from ._torch_support import LibraryPlan, address, cached, chain_key, chain_problem, stored, stream

_plans = {}
MAX_K = 16  # ChainKBest::kMaxKBest


def _planned(potentials, lengths, k):
    def make(dtype, device, B, T, C, with_lengths, k):
        problem = chain_problem("max_plus", dtype, B, T, C, with_lengths)
        plan = LibraryPlan("chain_kbest", device, ctypes.byref(problem), k)
        workspace = ctypes.c_size_t()
        jitbmm._check(jitbmm._lib.jitbmm_chain_kbest_workspace_bytes(plan.handle, ctypes.byref(workspace)))
        plan.workspace = workspace.value
        return plan

    key = chain_key(potentials, lengths, k)
    return cached(_plans, key, lambda: make(*key))


def _score_type(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _kbest(potentials: torch.Tensor, lengths: Optional[torch.Tensor], k: int) -> tuple[torch.Tensor, torch.Tensor]:
    plan = _planned(potentials, lengths, k)
    return _run(plan, jitbmm._lib.jitbmm_chain_kbest_run, (potentials,), lengths, potentials.shape[1] + 1, k)


def _run(plan, run, inputs, lengths, T, k):
    """(scores [B, k], paths [B, k, T]) of run(plan, *inputs, lengths, scores, paths, scratch, its bytes, stream):
    either form's call of the library."""
    like = inputs[0]
    scores = like.new_empty((like.shape[0], k), dtype=_score_type(like.dtype))
    paths = like.new_empty((like.shape[0], k, T), dtype=torch.int32)
    ws = plan.workspace
    scratch = like.new_empty((ws,), dtype=torch.uint8) if ws else None
    status = run(plan.handle, *(t.data_ptr() for t in inputs), address(lengths), scores.data_ptr(), paths.data_ptr(),
                 address(scratch), ws, stream(plan.device))
    if status:
        jitbmm._check(status)
    return scores, paths


_op = torch.library.custom_op("jitbmm::chain_kbest", _kbest, mutates_args=(), device_types="cuda")


@_op.register_fake
def _(potentials, lengths, k):
    B, T = potentials.shape[0], potentials.shape[1] + 1
    return (potentials.new_empty((B, k), dtype=_score_type(potentials.dtype)),
            potentials.new_empty((B, k, T), dtype=torch.int32))


def _setup(ctx, inputs, output):
    potentials = inputs[0]
    ctx.shape, ctx.dtype = potentials.shape, potentials.dtype
    ctx.save_for_backward(output[1])


def _gradients(ctx, grads, needs, _backward):
    grad_scores = grads[0]
    (paths,) = ctx.saved_tensors
    B, steps, C = ctx.shape[0], ctx.shape[1], ctx.shape[-1]
    grad = torch.zeros((B, steps * C * C), dtype=grad_scores.dtype, device=grad_scores.device)
    if steps > 0:
        frm, to = paths[..., :-1].long(), paths[..., 1:].long()  # [B, k, T - 1]
        taken = (frm >= 0) & (to >= 0)
        index = torch.arange(steps, device=paths.device) * (C * C) + to.clamp(min=0) * C + frm.clamp(min=0)
        weight = torch.where(taken, grad_scores[..., None], torch.zeros((), dtype=grad_scores.dtype,
                                                                        device=grad_scores.device))
        grad.scatter_add_(1, index.flatten(1), weight.flatten(1))  # flatten: B may be 0
    return grad.view(ctx.shape).to(ctx.dtype), None, None


_kbest_op = Operator(_op, _kbest, _setup, _gradients, non_differentiable=(1,))


def chain_kbest(potentials, k, lengths=None):
    """The k best paths of each sequence's linear-chain CRF (max-plus over paths z of Σ_t potentials[b, t, z[t + 1],
    z[t]]), in order: torch_struct.LinearChainCRF(...).kmax(k) gives the same scores.

    potentials and lengths as chain_viterbi takes them (copied if not contiguous); 1 <= k <= 16, up to 1,024 states.
    Returns (scores [k, B] in the potentials' dtype, float32 for half inputs; paths [k, B, T], int64): scores in
    non-increasing order, NaN first as Viterbi's winner; paths of equal score ordered by their states read from the
    last position back, smaller first, so paths[0] is chain_viterbi's path (but where an edge of +inf or NaN leaves
    a state no finite path reaches: a prefix of -inf is no path here, docs/distributions.md). A sequence with fewer
    than k paths of score other than -inf gives -inf and a path of -1 for the rest; -1 past lengths[b].
    Differentiable in the scores: the gradient of scores[i, b] is path i's edge indicator."""
    _check_crf(potentials, lengths)
    _check_k(k)
    lengths = None if lengths is None else lengths.contiguous()
    scores, paths = _kbest_op(stored(potentials).contiguous(), lengths, k)
    return scores.t(), paths.permute(1, 0, 2).long()


def _check_k(k):
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise ValueError(f"k: the number of best paths, an int from 1 to {MAX_K}, got {k!r}")


# The HMM form: emissions [B, T, C], transitions [C, C] or [B, C, C], initial [C] or [B, C].
def _planned_hmm(layout, k):
    key, problem, tables, lengths = layout

    def make():
        plan = LibraryPlan("chain_kbest", tables[0].device.index, ctypes.byref(problem()), k)
        workspace = ctypes.c_size_t()
        jitbmm._check(jitbmm._lib.jitbmm_chain_kbest_workspace_bytes(plan.handle, ctypes.byref(workspace)))
        plan.workspace = workspace.value
        return plan

    return cached(_plans, (*key, k), make), tables, lengths


def _kbest_hmm(emissions: torch.Tensor, transitions: torch.Tensor, initial: torch.Tensor,
               lengths: Optional[torch.Tensor], k: int) -> tuple[torch.Tensor, torch.Tensor]:
    plan, tables, lengths = _planned_hmm(_hmm_layout("max_plus", emissions, transitions, initial, lengths), k)
    return _run(plan, jitbmm._lib.jitbmm_chain_kbest_run_hmm, tables, lengths, emissions.shape[1], k)


_hmm_op = torch.library.custom_op("jitbmm::hmm_kbest", _kbest_hmm, mutates_args=(), device_types="cuda")


@_hmm_op.register_fake
def _(emissions, transitions, initial, lengths, k):
    B, T = emissions.shape[0], emissions.shape[1]
    return (emissions.new_empty((B, k), dtype=_score_type(emissions.dtype)),
            emissions.new_empty((B, k, T), dtype=torch.int32))


def _setup_hmm(ctx, inputs, output):
    ctx.tables = [(t.shape, t.dtype) for t in inputs[:3]]
    ctx.save_for_backward(output[1])


def _counts(index, weight, shape, dtype, per_sequence):
    """Σ weight at index (each [B, ...], index into a flattened table of `shape`), per sequence (shape [B, ...]) or
    summed over them (a shared table's)."""
    n = math.prod(shape[1:]) if per_sequence else math.prod(shape)
    out = torch.zeros((index.shape[0], n) if per_sequence else (n,), dtype=weight.dtype, device=weight.device)
    if per_sequence:
        out.scatter_add_(1, index.flatten(1), weight.flatten(1))  # flatten(1): B may be 0
    else:
        out.scatter_add_(0, index.flatten(), weight.flatten())
    return out.view(shape).to(dtype)


def _hmm_gradients(ctx, grads, needs, _backward):
    """The gradient of scores[b, i] is path i's states (emissions, and initial at the first), and its moves
    (transitions), counted where the path has them."""
    grad_scores = grads[0]  # [B, k]
    (paths,) = ctx.saved_tensors
    (e_shape, e_dtype), (t_shape, t_dtype), (i_shape, i_dtype) = ctx.tables
    paths = paths.long()  # [B, k, T]
    B, T, C = e_shape
    zero = torch.zeros((), dtype=grad_scores.dtype, device=grad_scores.device)
    g = grad_scores[..., None].expand(paths.shape)
    out = [None, None, None]
    if needs[0]:
        index = torch.arange(T, device=paths.device) * C + paths.clamp(min=0)
        out[0] = _counts(index, torch.where(paths >= 0, g, zero), e_shape, e_dtype, True)
    if needs[1]:
        frm, to = paths[..., :-1], paths[..., 1:]
        out[1] = _counts(to.clamp(min=0) * C + frm.clamp(min=0), torch.where((frm >= 0) & (to >= 0), g[..., 1:], zero),
                         t_shape, t_dtype, len(t_shape) == 3)
    if needs[2]:
        first = paths[..., 0]
        out[2] = _counts(first.clamp(min=0), torch.where(first >= 0, grad_scores, zero), i_shape, i_dtype,
                         len(i_shape) == 2)
    return (*out, None, None)


_kbest_hmm_op = Operator(_hmm_op, _kbest_hmm, _setup_hmm, _hmm_gradients, non_differentiable=(1,))


def hmm_kbest(emissions, transitions, initial, k, lengths=None):
    """The k best state paths of each sequence under an HMM's tables (max-plus over paths z of initial[z[0]] +
    emissions[b, 0, z[0]] + Σ_{t ≥ 1} (transitions[z[t], z[t - 1]] + emissions[b, t, z[t]])), in order, without
    forming the potentials [B, T - 1, C, C].

    emissions, transitions, initial and lengths as hmm_viterbi takes them (any strides); 1 <= k <= 16, up to 1,024
    states. Returns (scores [k, B], paths [k, B, T]) as chain_kbest's: paths[0] is hmm_viterbi's path; a length-1
    sequence's paths are its k best states by initial + emissions[b, 0]. Differentiable in the scores: the gradient of
    scores[i, b] is path i's state indicator (emissions), its moves (transitions, summed over the batch for a shared
    table) and its first state (initial)."""
    _check_hmm(emissions, transitions, initial, lengths)
    _check_k(k)
    scores, paths = _kbest_hmm_op(emissions, transitions, initial, lengths, k)
    return scores.t(), paths.permute(1, 0, 2).long()
