"""jitbmm.torch's products of torch-struct's structured semirings, each one kernel instead of the expanded
[size, ..., M, K, N] tensors of torch-struct's generic product: the expectation (entropy) semiring's pairs
(include/jitbmm/entropy_product.hpp; operators jitbmm::entropy_bmm and jitbmm::entropy_bmm_backward) and the k-max
semiring's k-vectors (include/jitbmm/kmax_product.hpp; jitbmm::kmax_bmm, its gradient a scatter to where each value
came from)."""

import torch

import jitbmm

from ._torch_support import LibraryPlan, cached, refuse_tangents, stored, stream

_plans = {}
_DTYPES = {torch.float32: "f32", torch.float64: "f64"}
MAX_K = 16  # KMaxProduct::kMaxK


def _flattened(a, b, size, what):
    """a [size, ..., M, K] and b [size, ..., K, N] checked, their batch dimensions broadcast and flattened:
    (a [size, B, M, K], b [size, B, K, N], contiguous; the batch shape)."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if not t.is_cuda:
            raise ValueError(f"{name}: jitbmm has no CPU kernels; expected a CUDA tensor, got one on {t.device}")
        if t.dtype not in _DTYPES:
            raise ValueError(f"{name}: expected float32 or float64, got {t.dtype}")
        if t.dim() < 3 or t.shape[0] != size:
            raise ValueError(f"{name}: expected [{size}, ..., rows, columns] (the semiring's {what} first), got shape "
                             f"{tuple(t.shape)}")
    if a.dtype != b.dtype or a.device != b.device:
        raise ValueError(f"b: expected a's dtype and device ({a.dtype}, {a.device}), got {b.dtype}, {b.device}")
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
    if b.shape[-2] != K:
        raise ValueError(f"b: its rows ({b.shape[-2]}) must equal a's columns ({K})")
    try:
        batch = torch.broadcast_shapes(a.shape[1:-2], b.shape[1:-2])
    except RuntimeError:
        raise ValueError(f"a, b: batch dimensions {tuple(a.shape[1:-2])} and {tuple(b.shape[1:-2])} do not "
                         "broadcast") from None
    B = 1
    for d in batch:
        B *= d

    def flat(t, rows, cols):  # [size, *batch, rows, cols] as [size, B, rows, cols], the semiring's dimension first
        t = t.reshape(size, *([1] * (len(batch) - (t.dim() - 3))), *t.shape[1:])
        return stored(t.expand(size, *batch, rows, cols).reshape(size, B, rows, cols)).contiguous()

    return flat(a, M, K), flat(b, K, N), batch


def _planned(kind, t, *sizes):
    """The library's plan of `kind` ("entropy_product" or "kmax_product") for t's dtype and device and `sizes`."""
    key = (kind, _DTYPES[t.dtype], t.device.index, *sizes)
    return cached(_plans, key, lambda: LibraryPlan(kind, t.device.index, _DTYPES[t.dtype].encode(), *sizes))


def _product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _, B, M, K = a.shape
    N = b.shape[-1]
    plan = _planned("entropy_product", a, B, M, K, N)
    out = a.new_empty((2, B, M, N))
    status = jitbmm._lib.jitbmm_entropy_product_run(plan.handle, a.data_ptr(), b.data_ptr(), out.data_ptr(),
                                                    stream(plan.device))
    if status:
        jitbmm._check(status)
    return out


_op = torch.library.custom_op("jitbmm::entropy_bmm", _product, mutates_args=(), device_types="cuda")


@_op.register_fake
def _(a, b):
    return a.new_empty((2, a.shape[1], a.shape[2], b.shape[-1]))


def _gradients(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, grad: torch.Tensor, need_a: bool,
               need_b: bool) -> tuple[torch.Tensor, torch.Tensor]:
    _, B, M, K = a.shape
    plan = _planned("entropy_product", a, B, M, K, b.shape[-1])
    ga = torch.empty_like(a) if need_a else a.new_empty((0,))
    gb = torch.empty_like(b) if need_b else b.new_empty((0,))
    status = jitbmm._lib.jitbmm_entropy_product_backward(
        plan.handle, a.data_ptr(), b.data_ptr(), out.data_ptr(), grad.data_ptr(),
        ga.data_ptr() if need_a else None, gb.data_ptr() if need_b else None, stream(plan.device))
    if status:
        jitbmm._check(status)
    return ga, gb


_backward_op = torch.library.custom_op("jitbmm::entropy_bmm_backward", _gradients, mutates_args=(),
                                       device_types="cuda")


@_backward_op.register_fake
def _(a, b, out, grad, need_a, need_b):
    return (torch.empty_like(a) if need_a else a.new_empty((0,)),
            torch.empty_like(b) if need_b else b.new_empty((0,)))


def _setup(ctx, inputs, output):
    a, b = inputs
    ctx.save_for_backward(a, b, output)


def _backward(ctx, grad):
    a, b, out = ctx.saved_tensors
    need_a, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    ga, gb = _backward_op(a, b, out, grad.contiguous(), need_a, need_b)
    return (ga if need_a else None), (gb if need_b else None)


_op.register_autograd(_backward, setup_context=_setup)


def entropy_semiring_bmm(a, b):
    """torch-struct's EntropySemiring.matmul in one kernel: pairs a [2, ..., M, K] and b [2, ..., K, N] (the log
    weights at [0], the values at [1]; batch dimensions broadcast as in torch.matmul), CUDA float32 or float64 of one
    dtype, give [2, ..., M, N]: with x0 = a[0, i, k] + b[0, k, j] and x1 = a[1, i, k] + b[1, k, j], out[0] = logsumexp_k
    x0 and out[1] = Σ_k p_k (x1 - log p_k), p = softmax_k x0. A term of weight 0 adds nothing whatever its value (no
    term: -inf and 0). Differentiable once with respect to both (docs/python-and-pytorch.md)."""
    refuse_tangents(a, b)
    a3, b3, batch = _flattened(a, b, 2, "pairs")
    return _op(a3, b3).view(2, *batch, a.shape[-2], b.shape[-1])


def _kmax(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    k, B, M, K = a.shape
    N = b.shape[-1]
    plan = _planned("kmax_product", a, k, B, M, K, N)
    out = a.new_empty((k, B, M, N))
    index = a.new_empty((k, B, M, N), dtype=torch.int32)
    status = jitbmm._lib.jitbmm_kmax_product_run(plan.handle, a.data_ptr(), b.data_ptr(), out.data_ptr(),
                                                 index.data_ptr(), stream(plan.device))
    if status:
        jitbmm._check(status)
    return out, index


_kmax_op = torch.library.custom_op("jitbmm::kmax_bmm", _kmax, mutates_args=(), device_types="cuda")


@_kmax_op.register_fake
def _(a, b):
    shape = (a.shape[0], a.shape[1], a.shape[2], b.shape[-1])
    return a.new_empty(shape), a.new_empty(shape, dtype=torch.int32)


def _kmax_setup(ctx, inputs, output):
    a, b = inputs
    ctx.shapes = a.shape, b.shape
    ctx.save_for_backward(output[1])


def _kmax_backward(ctx, grad, _grad_index):
    """Each output's gradient to the two entries its value is the sum of (none where its index is -1)."""
    (index,) = ctx.saved_tensors
    (k, B, M, K), N = ctx.shapes[0], ctx.shapes[1][-1]
    if grad is None:
        return None, None
    if K == 0:  # no entry to send a gradient to (every index is -1, but a scatter into nothing would be refused)
        return grad.new_zeros(k, B, M, K), grad.new_zeros(k, B, K, N)
    taken = index >= 0
    at = index.clamp(min=0).long()
    kk, r1, r2 = at // (k * k), (at // k) % k, at % k
    batch = torch.arange(B, device=index.device).view(1, B, 1, 1)
    i = torch.arange(M, device=index.device).view(1, 1, M, 1)
    j = torch.arange(N, device=index.device).view(1, 1, 1, N)
    g = torch.where(taken, grad, torch.zeros((), dtype=grad.dtype, device=grad.device))
    grad_a = torch.zeros(k * B * M * K, dtype=grad.dtype, device=grad.device)
    grad_b = torch.zeros(k * B * K * N, dtype=grad.dtype, device=grad.device)
    grad_a.scatter_add_(0, (((r1 * B + batch) * M + i) * K + kk).reshape(-1), g.reshape(-1))
    grad_b.scatter_add_(0, (((r2 * B + batch) * K + kk) * N + j).reshape(-1), g.reshape(-1))
    return grad_a.view(k, B, M, K), grad_b.view(k, B, K, N)


_kmax_op.register_autograd(_kmax_backward, setup_context=_kmax_setup)


def kmax_semiring_bmm(a, b):
    """torch-struct's KMaxSemiring(k).matmul in one kernel: k-vectors a [k, ..., M, K] and b [k, ..., K, N] (batch
    dimensions broadcast as in torch.matmul), CUDA float32 or float64 of one dtype, 1 <= k <= 16, give [k, ..., M, N]:
    the k largest of a[r1, i, kk] + b[r2, kk, j] over kk, r1 and r2, in non-increasing order (NaN first; equal values
    in the order of (kk, r1, r2)); -inf where fewer than k are other than -inf. Differentiable: each value's gradient
    goes to the two entries it is the sum of."""
    k = a.shape[0] if isinstance(a, torch.Tensor) and a.dim() > 0 else 0
    if not 1 <= k <= MAX_K:
        raise ValueError(f"a: its first dimension is the semiring's k, 1 to {MAX_K}, got shape "
                         f"{tuple(a.shape) if isinstance(a, torch.Tensor) else type(a).__name__}")
    refuse_tangents(a, b)
    a3, b3, batch = _flattened(a, b, k, "k-vectors")
    out, _ = _kmax_op(a3, b3)
    return out.view(k, *batch, a.shape[-2], b.shape[-1])
