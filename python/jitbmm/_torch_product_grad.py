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


def _signed(x):
    """x as (sign, log of that part) pairs; None stands for ones: one pair, no log."""
    if x is None:
        return ((1, None),)
    pos, neg = _log_parts(x)
    return (1, pos), (-1, neg)


def _signed_minus_out(y, out):
    """y's parts less out, −inf where that part of y is 0 or out is −inf (no contribution, as in the fused backward),
    NaN where y or out is NaN."""
    nan = torch.isnan(y) | torch.isnan(out)
    live = out != -math.inf
    shift = torch.where(live, out, torch.zeros_like(out))
    pairs = []
    for sign, part in _signed(y):
        part = torch.where(live, part - shift, torch.full_like(part, -math.inf))
        pairs.append((sign, torch.where(nan, torch.full_like(part, math.nan), part)))
    return pairs


def _plus(t, part):
    return t if part is None else t + part


def _times(x, t):
    return t if x is None else x * t


def _partial(which, bmm, x, y, z, a, b, out):
    """One partial derivative of T(x, y, z) = Σ_ikj x[i, k] · y[i, j] · z[k, j] · w[i, k, j], w = exp(a[i, k] +
    b[k, j] − out[i, j]) (x or z None: ones), with respect to `which` of x [i, k], y [i, j], z [k, j], the other two
    given: exact log products of their signed parts."""
    t = lambda m: m.transpose(-1, -2)  # noqa: E731
    if which == "y":
        live = out != -math.inf
        shift = torch.where(live, out, torch.zeros_like(out))
        total = sum(sx * sz * torch.exp(bmm(_plus(a, lx), _plus(b, lz), "log") - shift)
                    for sx, lx in _signed(x) for sz, lz in _signed(z))
        total = torch.where(live, total, torch.zeros_like(total))
        return torch.where(torch.isnan(out), torch.full_like(total, math.nan), total)
    ys = _signed_minus_out(y, out)
    if which == "x":
        return sum(sy * sz * torch.exp(a + bmm(ly, t(_plus(b, lz)), "log")) for sy, ly in ys for sz, lz in _signed(z))
    return sum(sx * sy * torch.exp(b + bmm(t(_plus(a, lx)), ly, "log")) for sx, lx in _signed(x) for sy, ly in ys)


class _Partial(torch.autograd.Function):
    """_partial as a function of (x, y, z, a, b, out), with its derivatives written out: the formula reads x, y and z
    through their logs, which have no derivative where they are 0, though T is linear in each (an upstream gradient
    of zeros, as forward-mode tricks and Hessian-vector products feed, must keep its derivative). Each derivative is
    another of T's partials, times an argument where a, b or out shares its indices, so every order exists. With
    u the upstream gradient of the partial with respect to x: to y, ∂_y T(u, ·, z); to z and b, ∂_z T(u, y, ·) (b's
    times z); to a, u times the partial; to out, −y times ∂_y T(u, ·, z); and the same, roles exchanged, for y and
    z."""

    @staticmethod
    def forward(ctx, which, bmm, x, y, z, a, b, out):
        ctx.which, ctx.bmm = which, bmm
        result = _partial(which, bmm, x, y, z, a, b, out)
        ctx.save_for_backward(x, y, z, a, b, out, result)
        return result

    @staticmethod
    def backward(ctx, u):
        x, y, z, a, b, out, result = ctx.saved_tensors
        need_x, need_y, need_z, need_a, need_b, need_out = ctx.needs_input_grad[2:]
        args = {"x": x, "y": y, "z": z}
        args[ctx.which] = u

        def partial(which):  # T's partial with u in place of the argument this one was taken by
            return _Partial.apply(which, ctx.bmm, *(None if k == which else args[k] for k in "xyz"), a, b, out)

        grads = dict.fromkeys("xyzabo")
        by_x = partial("x") if ctx.which != "x" and (need_x or need_a) else None
        by_y = partial("y") if ctx.which != "y" and (need_y or need_out) else None
        by_z = partial("z") if ctx.which != "z" and (need_z or need_b) else None
        grads["x"], grads["y"], grads["z"] = by_x, by_y, by_z
        if need_a:
            grads["a"] = u * result if ctx.which == "x" else _times(x, by_x)
        if need_b:
            grads["b"] = u * result if ctx.which == "z" else _times(z, by_z)
        if need_out:
            grads["o"] = -(u * result if ctx.which == "y" else y * by_y)
        likes = (x, y, z, a, b, out)
        return None, None, *(None if g is None or not need else g.sum_to_size(like.shape)
                             for g, need, like in zip(grads.values(), ctx.needs_input_grad[2:], likes))


def log_backward(bmm, a, b, out, grad_out, need_a, need_b):
    """The log backward written with differentiable operations (for create_graph=True, e.g. a loss on marginals):
    with w = exp(a + b − out), grad_a = Σ_j G·w = exp(a + logbmm(log G − out, bᵀ)) and grad_b = exp(b + logbmm(aᵀ,
    log G − out)), G split into its positive and negative parts: the partials of Σ G·w with respect to a's and b's
    places (_Partial), themselves differentiable, so every order of derivative exists. bmm:
    jitbmm.torch.semiring_bmm."""
    grad_a = _Partial.apply("x", bmm, None, grad_out, None, a, b, out).sum_to_size(a.shape) if need_a else None
    grad_b = _Partial.apply("z", bmm, None, grad_out, None, a, b, out).sum_to_size(b.shape) if need_b else None
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
