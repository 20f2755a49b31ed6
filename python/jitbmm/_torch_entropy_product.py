"""jitbmm.torch's product of the expectation (entropy) semiring (include/jitbmm/entropy_product.hpp): torch-struct's
EntropySemiring.matmul in one kernel, with its gradients, instead of the expanded [2, ..., M, K, N] tensors of
torch-struct's generic product. The operators are jitbmm::entropy_bmm and jitbmm::entropy_bmm_backward."""

import ctypes

import torch

import jitbmm

from ._torch_support import LibraryPlan, cached, stream

_plans = {}
_DTYPES = {torch.float32: "f32", torch.float64: "f64"}


def _planned(t, B, M, K, N):
    def make():
        plan = LibraryPlan("entropy_product", t.device.index, _DTYPES[t.dtype].encode(), B, M, K, N)
        return plan

    return cached(_plans, (_DTYPES[t.dtype], t.device.index, B, M, K, N), make)


def _product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _, B, M, K = a.shape
    N = b.shape[-1]
    plan = _planned(a, B, M, K, N)
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
    plan = _planned(a, B, M, K, b.shape[-1])
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
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if not t.is_cuda:
            raise ValueError(f"{name}: jitbmm has no CPU kernels; expected a CUDA tensor, got one on {t.device}")
        if t.dtype not in _DTYPES:
            raise ValueError(f"{name}: expected float32 or float64, got {t.dtype}")
        if t.dim() < 3 or t.shape[0] != 2:
            raise ValueError(f"{name}: expected [2, ..., rows, columns] (the semiring's pairs first), got shape "
                             f"{tuple(t.shape)}")
    if a.dtype != b.dtype or a.device != b.device:
        raise ValueError(f"b: expected a's dtype and device ({a.dtype}, {a.device}), got {b.dtype}, {b.device}")
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
    if b.shape[-2] != K:
        raise ValueError(f"b: its rows ({b.shape[-2]}) must equal a's columns ({K})")
    batch = torch.broadcast_shapes(a.shape[1:-2], b.shape[1:-2])
    B = 1
    for d in batch:
        B *= d
    def flat(t, rows, cols):  # [2, *batch, rows, cols] as [2, B, rows, cols], the pair dimension kept first
        t = t.reshape(2, *([1] * (len(batch) - (t.dim() - 3))), *t.shape[1:])
        return t.expand(2, *batch, rows, cols).reshape(2, B, rows, cols).contiguous()

    a3, b3 = flat(a, M, K), flat(b, K, N)
    out = _op(a3, b3)
    return out.view(2, *batch, M, N)
