"""jitbmm.torch's k best paths of linear-chain CRFs (include/jitbmm/chain_kbest.hpp, docs/chains.md "The k best
paths"): Viterbi that keeps the k best paths ending in every state, one fused kernel a call. The operator is
jitbmm::chain_kbest; its scores' gradient is each path's edge indicator, a scatter of the paths it returned."""

import ctypes
from typing import Optional

import torch

import jitbmm

from ._torch_chains import _check_crf
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
    B, T = potentials.shape[0], potentials.shape[1] + 1
    scores = potentials.new_empty((B, k), dtype=_score_type(potentials.dtype))
    paths = potentials.new_empty((B, k, T), dtype=torch.int32)
    ws = plan.workspace
    scratch = potentials.new_empty((ws,), dtype=torch.uint8) if ws else None
    status = jitbmm._lib.jitbmm_chain_kbest_run(plan.handle, potentials.data_ptr(), address(lengths),
                                                scores.data_ptr(), paths.data_ptr(), address(scratch), ws,
                                                stream(plan.device))
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
    last position back, smaller first, so paths[0] is chain_viterbi's path (but where an edge of +inf or NaN leaves a
    state no finite path reaches: a prefix of -inf is no path here, docs/chains.md). A sequence with fewer than k paths
    of score other than -inf gives -inf and a path of -1 for the rest; -1 past lengths[b]. Differentiable in the
    scores: the gradient of scores[i, b] is path i's edge indicator."""
    _check_crf(potentials, lengths)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise ValueError(f"k: the number of best paths, an int from 1 to {MAX_K}, got {k!r}")
    lengths = None if lengths is None else lengths.contiguous()
    scores, paths = _kbest_op(stored(potentials).contiguous(), lengths, k)
    return scores.t(), paths.permute(1, 0, 2).long()
