"""A chain's gradients under create_graph=True (torch-struct's marginals ask for it): the fused kernels' first
derivatives, whose own derivatives come from the forward algorithm written in torch operations (crf_score,
hmm_score), differentiable to any order."""

import math

import torch

from ._torch_support import score_dtype


def logsumexp(x, dim):
    """log Σ exp(x) along dim, whose derivatives are 0, not NaN, where every term is -inf (an unreachable state, a
    sequence without a path)."""
    m = x.detach().amax(dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    s = (x - m).exp().sum(dim)
    none = s == 0
    return torch.where(none, torch.full_like(s, -math.inf), torch.where(none, torch.ones_like(s), s).log()) + m[..., 0]


def _reduction(semiring):
    return logsumexp if semiring == "log" else (lambda x, dim: x.max(dim).values)


def _at_lengths(scores, lengths):
    """scores [B, T] (each prefix's score) at each sequence's length; NaN for a length outside [1, T], as the
    kernels give."""
    if lengths is None:
        return scores[:, -1]
    T = scores.shape[1]
    picked = scores.gather(1, (lengths.clamp(1, T) - 1)[:, None])[:, 0]
    return torch.where((lengths >= 1) & (lengths <= T), picked, torch.full_like(picked, math.nan))


def _unread(x, lengths, first):
    """x [B, T', ...] with its steps from position lengths[b] - first on (those the kernels do not read) made 0, so
    that no NaN or inf there reaches a derivative through 0·NaN."""
    if lengths is None:
        return x
    read = torch.arange(x.shape[1], device=x.device) < (lengths - first)[:, None]
    read = read.view(*read.shape, *(1,) * (x.dim() - 2))
    return torch.where(read, x, torch.zeros((), dtype=x.dtype, device=x.device))


def crf_score(semiring, lengths):
    """The score [B] of potentials, a position at a time (torch-struct's LinearChainCRF recursion)."""
    reduce = _reduction(semiring)

    def score(potentials):
        # Half inputs computed in float32, as the kernels do; the steps past each length not read.
        potentials = _unread(potentials.to(score_dtype(potentials)), lengths, 1)
        alpha = potentials.new_zeros(potentials.shape[0], potentials.shape[-1])
        scores = [reduce(alpha, -1)]
        for t in range(potentials.shape[1]):
            alpha = reduce(alpha[:, None, :] + potentials[:, t], -1)
            scores.append(reduce(alpha, -1))
        return _at_lengths(torch.stack(scores, 1), lengths)

    return score


def hmm_score(semiring, lengths):
    """The score [B] of an HMM's tables, a position at a time (the emission added after each step's reduction)."""
    reduce = _reduction(semiring)

    def score(emissions, transitions, initial):
        emissions, transitions, initial = (t.to(score_dtype(t)) for t in (emissions, transitions, initial))
        emissions = _unread(emissions, lengths, 0)
        B, T, C = emissions.shape
        transitions, initial = transitions.expand(B, C, C), initial.expand(B, C)
        alpha = initial + emissions[:, 0]
        scores = [reduce(alpha, -1)]
        for t in range(1, T):
            alpha = reduce(alpha[:, None, :] + transitions, -1) + emissions[:, t]
            scores.append(reduce(alpha, -1))
        return _at_lengths(torch.stack(scores, 1), lengths)

    return score


class _SecondOrder(torch.autograd.Function):
    """A chain's gradients under create_graph=True (torch-struct's marginals ask for it): the fused kernels' values,
    whose own derivatives (with respect to the inputs and to grad_score) come from differentiating `score`, the
    forward algorithm in torch operations, twice: a few launches a position and the memory of every step, so much
    slower than the fused first derivative, but exact."""

    @staticmethod
    def forward(ctx, score, which, grad_score, *tensors):
        """tensors: the inputs, then their gradients from the kernels for the inputs numbered in `which`."""
        inputs, grads = tensors[:len(tensors) - len(which)], tensors[len(tensors) - len(which):]
        ctx.score, ctx.which, ctx.count = score, which, len(grads)
        ctx.save_for_backward(grad_score, *inputs)
        return grads

    @staticmethod
    def backward(ctx, *vs):
        higher = torch.is_grad_enabled()
        grad_score, *inputs = ctx.saved_tensors
        # The saved tensors themselves where they require grad, so that a derivative of these (create_graph again)
        # reaches them: every order exists.
        own = lambda x: x if higher and x.requires_grad else x.detach().requires_grad_(True)  # noqa: E731
        with torch.enable_grad():
            w = own(grad_score)
            xs = [own(x) for x in inputs]
            first = torch.autograd.grad(ctx.score(*xs), [xs[i] for i in ctx.which], w, create_graph=True,
                                        allow_unused=True)
            pairs = [(f, v) for f, v in zip(first, vs) if f is not None and v is not None and f.requires_grad]
            found = torch.autograd.grad([f for f, _ in pairs], [w, *xs], [v for _, v in pairs], allow_unused=True,
                                        create_graph=higher) if pairs else (None,) * (1 + len(xs))
        found = [torch.zeros_like(x) if g is None else g for g, x in zip(found, (w, *xs))]
        return (None, None, *found, *(None,) * ctx.count)


def second_order(score, grad_score, inputs, which, grads, constant=False):
    """The kernels' gradients `grads` (of the inputs numbered in `which`), differentiable again where grad mode is
    on (a backward with create_graph=True). constant: the gradients do not vary with the inputs (max_plus's, a best
    path's indicator, piecewise constant), so they are returned as they are unless grad_score itself takes a
    gradient (torch-struct's argmax is such a constant)."""
    if not torch.is_grad_enabled() or (constant and not grad_score.requires_grad):
        return grads
    return _SecondOrder.apply(score, which, grad_score, *inputs, *grads)
