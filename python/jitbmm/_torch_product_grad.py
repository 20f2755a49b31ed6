"""The semiring products' backward written with differentiable torch operations, which jitbmm.torch takes in place of
the fused backward kernels under create_graph=True (grad mode on during the backward), so that a loss on the
gradients (marginals) trains and every order of derivative exists."""

import math

import torch


def _sum_to(grad, like):
    """grad [B, rows, cols] summed over the batch where `like` is one matrix for every batch."""
    return grad.sum(0) if like.dim() == 2 else grad


def _log_parts(x):
    """(log x⁺, log x⁻): −inf where that part of x is 0, NaN where x is NaN. The logs only ever see positive values, so
    their gradients are finite everywhere (no 0·inf)."""
    nan = torch.isnan(x)
    parts = []
    for y in (x, -x):
        pos = y > 0
        part = torch.where(pos, torch.log(torch.where(pos, y, torch.ones_like(y))), torch.full_like(y, -math.inf))
        parts.append(torch.where(nan, torch.full_like(y, math.nan), part))
    return parts


def _signed_log(g, out):
    """(log g⁺ − out, log g⁻ − out), −inf where that part of g is 0 or out is −inf (no contribution, as in the fused
    backward), NaN where g or out is NaN. Masked after the difference, so that no gradient reaches out (or g) where
    a part is −inf."""
    nan = torch.isnan(g) | torch.isnan(out)
    live = out != -math.inf
    parts = []
    for x in (g, -g):
        pos = (x > 0) & live
        logx = torch.log(torch.where(pos, x, torch.ones_like(x))) - torch.where(live, out, torch.zeros_like(out))
        part = torch.where(pos, logx, torch.full_like(logx, -math.inf))
        parts.append(torch.where(nan, torch.full_like(logx, math.nan), part))
    return parts


def _weighted(bmm, g, a, b, out):
    """Σ_j g[i, j] · exp(a[i, k] + b[k, j] − out[i, j]), [B, M, K]: two exact log products of g's signed parts."""
    pos, neg = _signed_log(g, out)
    bt = b.transpose(-1, -2)
    return torch.exp(a + bmm(pos, bt, "log")) - torch.exp(a + bmm(neg, bt, "log"))


class _Weighted(torch.autograd.Function):
    """_weighted as a function of (g, a, b, out), F[i, k] = Σ_j g[i, j] · w[i, k, j] with w = exp(a + b − out), whose
    derivatives are written out: the formula reads g through its logs, which have none where g is 0 (a zero upstream
    gradient, as forward-mode tricks and Hessian-vector products feed), though F is linear in g. Each is exact log
    products again, so differentiable in turn: with respect to g, Σ_k v[i, k] · w[i, k, j] (the weights' other
    contraction); a, v · F; b, Σ_i v[i, k] · g[i, j] · w[i, k, j] (both signed); out, −g times the first. (Those read
    g's logs again: a third derivative through a g of 0 is lost.)"""

    @staticmethod
    def forward(ctx, bmm, g, a, b, out):
        ctx.bmm = bmm
        result = _weighted(bmm, g, a, b, out)
        ctx.save_for_backward(g, a, b, out, result)
        return result

    @staticmethod
    def backward(ctx, v):
        g, a, b, out, result = ctx.saved_tensors
        bmm, needs = ctx.bmm, ctx.needs_input_grad
        grad_g = grad_a = grad_b = grad_out = None
        if needs[1] or needs[4]:
            live = out != -math.inf
            shift = torch.where(live, out, torch.zeros_like(out))
            pos, neg = (torch.exp(bmm(a + part, b, "log") - shift) for part in _log_parts(v))
            other = torch.where(live, pos - neg, torch.zeros_like(out))
            other = torch.where(torch.isnan(out), torch.full_like(other, math.nan), other)
            grad_g = other if needs[1] else None
            grad_out = -g * other if needs[4] else None
        if needs[2]:
            grad_a = _sum_to(v * result, a)
        if needs[3]:
            (gp, gn), (vp, vn) = _signed_log(g, out), _log_parts(v)
            at = a.transpose(-1, -2)
            term = lambda vx, gx: torch.exp(b + bmm(at + vx.transpose(-1, -2), gx, "log"))  # noqa: E731
            grad_b = _sum_to(term(vp, gp) + term(vn, gn) - term(vp, gn) - term(vn, gp), b)
        return None, grad_g, grad_a, grad_b, grad_out


def log_backward(bmm, a, b, out, grad_out, need_a, need_b):
    """The log backward written with differentiable operations (for create_graph=True, e.g. a loss on marginals):
    with w = exp(a + b − out), grad_a = Σ_j G·w = exp(a + logbmm(log G − out, bᵀ)) and grad_b = exp(b + logbmm(aᵀ,
    log G − out)), G split into its positive and negative parts. Each logbmm is exact and itself differentiable
    this way, so every order of derivative exists; `out` carries the dependence through the forward, and _Weighted
    the one through G. bmm: jitbmm.torch.semiring_bmm."""
    grad_a = grad_b = None
    if need_a:
        grad_a = _sum_to(_Weighted.apply(bmm, grad_out, a, b, out), a)
    if need_b:  # the same sum over i, with a and b exchanged and everything transposed
        t = lambda x: x.transpose(-1, -2)  # noqa: E731
        grad_b = _sum_to(t(_Weighted.apply(bmm, t(grad_out), t(b), t(a), t(out))), b)
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

    def weighted(w):  # G = 0 contributes exactly 0, even next to inf or NaN, yet keeps its derivative w where finite
        return torch.where(g == 0, g * torch.where(torch.isfinite(w), w, torch.zeros_like(w)), g * w) if times else g

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
