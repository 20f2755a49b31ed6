"""jitbmm.torch's exact samples of linear-chain paths, in the CRF and the HMM form (include/jitbmm/chain_samples.hpp,
docs/distributions.md "Samples"): the chain's forward messages from its fused forward, then each path drawn from the
last position back, a warp a path. The operators are jitbmm::chain_sample and jitbmm::hmm_sample; torch.compile traces
each as one node (torch.export cannot: the seed is drawn from the generator on the host)."""

import ctypes
from typing import Optional

import torch

import jitbmm

from ._torch_chain_checks import _check_crf, _check_hmm
from ._torch_chains import _hmm_layout
from ._torch_operator import Operator
from ._torch_support import LibraryPlan, address, cached, chain_key, chain_problem, stored, stream

_plans = {}


def _planned(potentials, lengths):
    def make(dtype, device, B, T, C, with_lengths):
        plan = LibraryPlan("chain_sampler", device, ctypes.byref(chain_problem("log", dtype, B, T, C, with_lengths)))
        workspace = ctypes.c_size_t()
        jitbmm._check(jitbmm._lib.jitbmm_chain_sampler_workspace_bytes(plan.handle, ctypes.byref(workspace)))
        plan.workspace = workspace.value
        return plan

    key = chain_key(potentials, lengths)
    return cached(_plans, key, lambda: make(*key))


def _sample(potentials: torch.Tensor, lengths: Optional[torch.Tensor], n: int, seed: int) -> torch.Tensor:
    plan = _planned(potentials, lengths)
    B, T = potentials.shape[0], potentials.shape[1] + 1
    paths = potentials.new_empty((B, n, T), dtype=torch.int32)
    ws = plan.workspace
    scratch = potentials.new_empty((ws,), dtype=torch.uint8) if ws else None
    status = jitbmm._lib.jitbmm_chain_sampler_run(plan.handle, potentials.data_ptr(), address(lengths), n, seed,
                                                  paths.data_ptr(), address(scratch), ws, stream(plan.device))
    if status:
        jitbmm._check(status)
    return paths


_op = torch.library.custom_op("jitbmm::chain_sample", _sample, mutates_args=(), device_types="cuda")


@_op.register_fake
def _(potentials, lengths, n, seed):
    return potentials.new_empty((potentials.shape[0], n, potentials.shape[1] + 1), dtype=torch.int32)


_sample_op = Operator(_op, _sample)


def chain_sample(potentials, n, lengths=None, generator=None):
    """n exact samples of each sequence's state path from the linear-chain CRF of `potentials`, p(z) ∝
    exp Σ_t potentials[b, t, z[t + 1], z[t]] (torch_struct.LinearChainCRF(...).sample((n,)) gives the same
    distribution as edge indicators).

    potentials and lengths as chain_log_partition takes them (copied if not contiguous); n >= 0. generator: the torch
    generator the seed is drawn from (None: torch's default CPU generator), so torch.manual_seed repeats a run
    exactly. Returns paths [n, B, T] (int64): path[i, b, t] the state at position t of sample i of sequence b; -1 past
    lengths[b], and throughout for a sequence without a distribution (log Z -inf, +inf or NaN) or of a length outside
    [1, T]. A path of probability 0 is never drawn. Not differentiable."""
    _check_crf(potentials, lengths)
    seed = _seed(n, generator)
    lengths = None if lengths is None else lengths.contiguous()
    return _sample_op(stored(potentials).contiguous(), lengths, n, seed).permute(1, 0, 2).long()


def _seed(n, generator):
    """The seed of a call's draws, from the generator (None: torch's default CPU generator), once n is checked."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n: the number of samples, an int >= 0, got {n!r}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator or None, got {type(generator).__name__}")
    device = generator.device if generator is not None else torch.device("cpu")
    return int(torch.randint(0, 2**63 - 1, (1,), generator=generator, device=device).item())


def edge_indicators(paths, C, dtype):
    """paths [..., T] (int, -1 past a length) as edge indicators [..., T - 1, C, C] in dtype: 1 at [t, z[t + 1], z[t]]
    for each step of the path (torch-struct's events)."""
    frm, to = paths[..., :-1], paths[..., 1:]
    valid = (frm >= 0) & (to >= 0)
    index = (to.clamp(min=0) * C + frm.clamp(min=0)).unsqueeze(-1)
    out = torch.zeros((*frm.shape, C * C), dtype=dtype, device=paths.device)
    out.scatter_(-1, index, valid.unsqueeze(-1).to(dtype))
    return out.view(*frm.shape, C, C)


# The HMM form: emissions [B, T, C], transitions [C, C] or [B, C, C], initial [C] or [B, C].
def _planned_hmm(layout):
    key, problem, tables, lengths = layout

    def make():
        plan = LibraryPlan("chain_sampler", tables[0].device.index, ctypes.byref(problem()))
        workspace = ctypes.c_size_t()
        jitbmm._check(jitbmm._lib.jitbmm_chain_sampler_workspace_bytes(plan.handle, ctypes.byref(workspace)))
        plan.workspace = workspace.value
        return plan

    return cached(_plans, key, make), tables, lengths


def _sample_hmm(emissions: torch.Tensor, transitions: torch.Tensor, initial: torch.Tensor,
                lengths: Optional[torch.Tensor], n: int, seed: int) -> torch.Tensor:
    plan, tables, lengths = _planned_hmm(_hmm_layout("log", emissions, transitions, initial, lengths))
    B, T = emissions.shape[0], emissions.shape[1]
    paths = emissions.new_empty((B, n, T), dtype=torch.int32)
    ws = plan.workspace
    scratch = emissions.new_empty((ws,), dtype=torch.uint8) if ws else None
    status = jitbmm._lib.jitbmm_chain_sampler_run_hmm(plan.handle, *(t.data_ptr() for t in tables), address(lengths),
                                                      n, seed, paths.data_ptr(), address(scratch), ws,
                                                      stream(plan.device))
    if status:
        jitbmm._check(status)
    return paths


_hmm_op = torch.library.custom_op("jitbmm::hmm_sample", _sample_hmm, mutates_args=(), device_types="cuda")


@_hmm_op.register_fake
def _(emissions, transitions, initial, lengths, n, seed):
    return emissions.new_empty((emissions.shape[0], n, emissions.shape[1]), dtype=torch.int32)


_sample_hmm_op = Operator(_hmm_op, _sample_hmm)


def hmm_sample(emissions, transitions, initial, n, lengths=None, generator=None):
    """n exact samples of each sequence's state path from an HMM's posterior over paths given its tables, p(z) ∝
    exp(initial[z[0]] + emissions[b, 0, z[0]] + Σ_{t ≥ 1} (transitions[z[t], z[t - 1]] + emissions[b, t, z[t]])),
    without forming the potentials [B, T - 1, C, C]: the HMM form's fused forward, then each path drawn from the last
    position back.

    emissions, transitions, initial and lengths as hmm_log_partition takes them (any strides); n >= 0; generator as
    chain_sample's. Returns paths [n, B, T] (int64), as chain_sample's: -1 past lengths[b], and throughout for a
    sequence without a distribution or of a length outside [1, T]; a length-1 sequence's state is drawn from
    initial + emissions[b, 0]. Not differentiable."""
    _check_hmm(emissions, transitions, initial, lengths)
    seed = _seed(n, generator)
    return _sample_hmm_op(emissions, transitions, initial, lengths, n, seed).permute(1, 0, 2).long()
