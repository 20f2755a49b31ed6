"""The semiring products' backward written with differentiable torch operations, which jitbmm.torch takes in place of
the fused backward kernels under create_graph=True (grad mode on during the backward), so that a loss on the
gradients (marginals) trains and every order of derivative exists."""

import math

import torch


def _sum_to(grad, like):
    """grad [B, rows, cols] summed over the batch where `like` is one matrix for every batch."""
    return grad.sum(0) if like.dim() == 2 else grad


def _signed_log(g, out):
    """(log g⁺ − out, log g⁻ − out), −inf where that part of g is 0 or out is −inf (no contribution, as in the
    fused backward), NaN where g or out is NaN. The logs only ever see positive values, so their gradients are
    finite everywhere (no 0·inf)."""
    nan = torch.isnan(g) | torch.isnan(out)
    live = out != -math.inf
    parts = []
    for x in (g, -g):
        pos = (x > 0) & live
        logx = torch.log(torch.where(pos, x, torch.ones_like(x))) - torch.where(live, out, torch.zeros_like(out))
        part = torch.where(pos, logx, torch.full_like(logx, -math.inf))
        parts.append(torch.where(nan, torch.full_like(logx, math.nan), part))
    return parts


def log_backward(bmm, a, b, out, grad_out, need_a, need_b):
    """The log backward written with differentiable operations (for create_graph=True, e.g. a loss on marginals):
    with w = exp(a + b − out), grad_a = Σ_j G·w = exp(a + logbmm(log G − out, bᵀ)) and grad_b = exp(b + logbmm(aᵀ,
    log G − out)), G split into its positive and negative parts. Each logbmm is exact and itself differentiable
    this way, so every order of derivative exists; `out` carries the dependence through the forward. bmm:
    jitbmm.torch.semiring_bmm."""
    pos, neg = _signed_log(grad_out, out)
    grad_a = grad_b = None
    if need_a:
        bt = b.transpose(-1, -2)
        grad_a = _sum_to(torch.exp(a + bmm(pos, bt, "log")) - torch.exp(a + bmm(neg, bt, "log")), a)
    if need_b:
        at = a.transpose(-1, -2)
        grad_b = _sum_to(torch.exp(b + bmm(at, pos, "log")) - torch.exp(b + bmm(at, neg, "log")), b)
    return grad_a, grad_b


def selecting_backward(a, b, argmax, grad_out, semiring, need_a, need_b):
    """The selecting semirings' backward as differentiable gathers and scatters: G goes to the argmax k (times the
    partner value for max_times). Its derivative with respect to a and b is zero almost everywhere for max_plus and
    min_plus (the argmax is piecewise constant); with respect to G it is the gather of the upstream gradients."""
    B, M, N = grad_out.shape
    K = a.shape[-1]
    if K == 0:  # nothing selected anywhere
        return (torch.zeros_like(a) if need_a else None), (torch.zeros_like(b) if need_b else None)
    k = argmax.long()
    found = k >= 0
    k = k.clamp(min=0)
    g = torch.where(found, grad_out, torch.zeros_like(grad_out))
    a3, b3 = a.expand(B, M, K), b.expand(B, K, N)
    times = semiring == "max_times"

    def weighted(w):  # G = 0 contributes exactly 0, even next to inf or NaN
        return torch.where(g == 0, torch.zeros_like(g), g * w) if times else g

    grad_a = grad_b = None
    if need_a:
        grad_a = _sum_to(a3.new_zeros(B, M, K).scatter_add(2, k, weighted(b3.gather(1, k))), a)  # × b[k*, j]
    if need_b:
        grad_b = _sum_to(b3.new_zeros(B, K, N).scatter_add(1, k, weighted(a3.gather(2, k))), b)  # × a[i, k*]
    return grad_a, grad_b


def plus_times_backward(bmm, a, b, grad_out, need_a, need_b):
    """grad_a = G·bᵀ and grad_b = aᵀ·G, through jitbmm's own products (bmm: jitbmm.torch.semiring_bmm), so
    differentiable again."""
    grad_a = _sum_to(bmm(grad_out, b.transpose(-1, -2), "plus_times"), a) if need_a else None
    grad_b = _sum_to(bmm(a.transpose(-1, -2), grad_out, "plus_times"), b) if need_b else None
    return grad_a, grad_b
