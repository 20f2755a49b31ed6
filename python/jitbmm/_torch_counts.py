"""jitbmm.torch's count of a CRF's paths and the log-probability of given paths, from the fused log-partition
(docs/distributions.md, "Counts and log-probabilities"): a log-partition of the chain's structure, and a gather beside
the chain's own."""

import math

import torch

from ._torch_chain_checks import _check_crf
from ._torch_chains import chain_log_partition
from ._torch_support import score_dtype


def chain_log_count(potentials, lengths=None):
    """log of the number of paths of each sequence whose every edge's potential is other than -inf: torch-struct's
    LinearChainCRF(...).count in log space, so long chains do not overflow. NaN and +inf count as edges; log C for one
    position; -inf where no path is left. Arguments as chain_log_partition's; returns [B] in the potentials' dtype
    (float32 for half inputs). Not differentiable (a count is piecewise constant)."""
    _check_crf(potentials, lengths)
    return log_count(potentials, lengths).to(score_dtype(potentials))


def log_count(potentials, lengths):
    """chain_log_count's log in float64 (its structure's log-partition in float64: a count beyond float32's 24 bits of
    precision rounds once, in the caller's exp, not in the log), for checked arguments."""
    with torch.no_grad():
        structure = torch.zeros(potentials.shape, dtype=torch.float64, device=potentials.device)
        return chain_log_partition(structure.masked_fill_(potentials == -math.inf, -math.inf), lengths)


def chain_log_prob(potentials, value, lengths=None):
    """log p(value): Σ value·potentials over each sequence's steps, minus log Z (torch-struct's log_prob), for events
    value [..., B, T - 1, C, C] (a path's edge indicators, any leading sample dimensions), returned as [..., B]. A
    value of 0 adds nothing whatever its potential (where torch's 0·(-inf) would give NaN), and steps from lengths[b] - 1
    on are not read. NaN where the sequence has no distribution (log Z -inf, +inf or NaN); -inf for an event of
    probability 0. Differentiable with respect to both (the log-partition's gradient from the fused backward)."""
    _check_crf(potentials, lengths)
    return log_prob(potentials, value, lengths)


def log_prob(potentials, value, lengths, every_step=False):
    """chain_log_prob, or with every_step value read at the steps past each length too (torch-struct's own score
    reads them, while its log Z does not)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"value: expected a torch.Tensor, got {type(value).__name__}")
    if value.dim() < 4 or value.shape[-4:] != potentials.shape:
        raise ValueError(f"value: expected [..., {', '.join(map(str, potentials.shape))}] (events of the potentials' "
                         f"shape), got shape {tuple(value.shape)}")
    if value.device != potentials.device:
        raise ValueError(f"value: on {value.device}, expected the potentials' device {potentials.device}")
    if value.is_complex():  # its cast to the score's dtype would drop the imaginary part
        raise TypeError(f"value: unsupported dtype {value.dtype} (expected a real or boolean tensor)")
    dtype = score_dtype(potentials)
    pot, value = potentials.to(dtype), value.to(dtype)
    within = torch.ones((), dtype=torch.bool, device=pot.device)
    if lengths is not None and not every_step:  # only the steps before each sequence's last position
        within = (torch.arange(pot.shape[1], device=pot.device) < (lengths - 1)[:, None])[:, :, None, None]
    read = (value != 0) & within
    # The potentials not read are masked before the product too, so that no gradient meets 0·(±inf or NaN); where the
    # value is 0 it adds nothing, yet its derivative is the potential (where finite, inside the length): a relaxed or
    # straight-through event is differentiated there too.
    zero = torch.zeros((), dtype=dtype, device=pot.device)
    safe = torch.where(within & torch.isfinite(pot), pot, zero)
    terms = torch.where(read, value * torch.where(read, pot, zero), value * safe)
    log_z = chain_log_partition(potentials, lengths)
    out = terms.sum((-1, -2, -3)) - log_z
    return torch.where(torch.isfinite(log_z), out, torch.full_like(out, math.nan))
