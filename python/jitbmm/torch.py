"""PyTorch functions over jitbmm, with gradients from its fused backward kernels.

Drop-in for genbmm: ``jitbmm.torch.logbmm(a, b)``, ``maxbmm``, ``minbmm``, ``prodmaxbmm`` and
``semiring_bmm(a, b, semiring=...)`` take CUDA tensors ``a[..., M, K]`` and ``b[..., K, N]`` (any strides; batch
dimensions broadcast as in ``torch.matmul``) and return ``out[..., M, N]`` in their dtype, on the current CUDA
stream of their device. ``semiring`` is one of ``log``, ``max_plus``, ``min_plus``, ``max_times``, ``plus_times``.
"""

import threading

try:
    import torch
except ImportError as e:  # the rest of jitbmm works without torch; this module cannot
    raise ImportError("jitbmm.torch needs PyTorch (pip install torch); the jitbmm package itself does not") from e

from . import Plan, Problem, SEMIRINGS

__all__ = ["logbmm", "maxbmm", "minbmm", "prodmaxbmm", "semiring_bmm"]

_DTYPES = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16"}
_SELECTING = ("max_plus", "min_plus", "max_times")
_plans = {}
_plans_lock = threading.Lock()


def _plan(semiring, dtype, device, shape, a_strides, b_strides, with_argmax, precision):
    key = (semiring, dtype, device, shape, a_strides, b_strides, with_argmax, precision)
    with _plans_lock:
        plan = _plans.get(key)
    if plan is None:
        B, M, K, N = shape
        plan = Plan(Problem(semiring, _DTYPES[dtype], B, M, K, N, a_strides=a_strides, b_strides=b_strides,
                            out_strides=(M * N, N, 1), with_argmax=with_argmax, precision=precision))
        with _plans_lock:
            plan = _plans.setdefault(key, plan)
    return plan


def _writable(t):
    """Whether t's elements sit at distinct addresses (a batch stride of 0, a broadcast, aside): its gradient can
    then be written in its own layout."""
    dims = sorted((abs(st), n) for i, (st, n) in enumerate(zip(t.stride(), t.shape))
                  if n > 1 and not (t.dim() == 3 and i == 0 and st == 0))
    span = 1
    for stride, n in dims:
        if stride < span:
            return False
        span += stride * (n - 1)
    return True


def _layout(t, batches):
    """(tensor, strides) for the kernel: a 2-D t is one matrix for every batch (batch stride 0). A layout whose
    gradient could not be written in place (overlapping elements) is copied first."""
    if not _writable(t) or (t.dim() == 3 and t.shape[0] > 1 and t.stride(0) == 0):
        t = t.contiguous()
    if t.dim() == 2:
        return t, (0, t.stride(0), t.stride(1))
    return t, (t.stride(0), t.stride(1), t.stride(2))


class _SemiringBMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, semiring, wants_grad, precision):
        batches = a.shape[0] if a.dim() == 3 else b.shape[0] if b.dim() == 3 else 1
        M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
        a, a_strides = _layout(a, batches)
        b, b_strides = _layout(b, batches)
        with_argmax = semiring in _SELECTING and wants_grad
        device = a.device
        with torch.cuda.device(device):
            plan = _plan(semiring, a.dtype, device.index, (batches, M, K, N), a_strides, b_strides, with_argmax,
                         precision)
            out = torch.empty((batches, M, N), dtype=a.dtype, device=device)
            argmax = torch.empty((batches, M, N), dtype=torch.int32, device=device) if with_argmax else None
            stream = torch.cuda.current_stream(device).cuda_stream
            plan(a.data_ptr(), b.data_ptr(), out.data_ptr(), argmax.data_ptr() if argmax is not None else None,
                 stream)
        ctx.plan = plan
        ctx.save_for_backward(a, b, out, argmax)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        a, b, out, argmax = ctx.saved_tensors
        need_a, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_out = grad_out.contiguous()  # out's layout
        with torch.cuda.device(a.device):
            grad_a = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device) if need_a else None
            grad_b = torch.empty_strided(b.shape, b.stride(), dtype=b.dtype, device=b.device) if need_b else None
            stream = torch.cuda.current_stream(a.device).cuda_stream
            ctx.plan.backward(a.data_ptr(), b.data_ptr(), out.data_ptr(),
                              argmax.data_ptr() if argmax is not None else None, grad_out.data_ptr(),
                              grad_a.data_ptr() if grad_a is not None else None,
                              grad_b.data_ptr() if grad_b is not None else None, stream)
        return grad_a, grad_b, None, None, None


def _check(a, b, semiring):
    if semiring not in SEMIRINGS:
        raise ValueError(f"semiring: unsupported {semiring!r} (expected one of {', '.join(SEMIRINGS)})")
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cuda":
            raise ValueError(f"{name}: jitbmm runs on CUDA tensors; this one is on {t.device}")
        if t.dtype not in _DTYPES:
            raise TypeError(f"{name}: unsupported dtype {t.dtype} (expected float32, float64, float16 or bfloat16)")
        if t.dim() < 2:
            raise ValueError(f"{name}: expected at least 2 dimensions ([..., rows, cols]), got shape "
                             f"{tuple(t.shape)}")
    if a.device != b.device:
        raise ValueError(f"a and b are on different devices ({a.device} and {b.device})")
    if a.dtype != b.dtype:
        raise TypeError(f"a and b have different dtypes ({a.dtype} and {b.dtype})")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"shape: a is [..., {a.shape[-2]}, {a.shape[-1]}] and b is [..., {b.shape[-2]}, "
                         f"{b.shape[-1]}]: a's last dimension must equal b's second to last")


def _matrices(t, batch, rows, cols):
    """t as one matrix shared by every batch (2-D: its batch dimensions are all 1 or all stride 0), else as
    [B, rows, cols] over the broadcast batch shape (a view where the strides allow, else a copy). Autograd carries
    the gradient back through the indexing, expand and reshape."""
    lead = t.dim() - 2
    if t.numel() > 0 and all(n == 1 or st == 0 for n, st in zip(t.shape[:lead], t.stride()[:lead])):
        return t[(0,) * lead] if lead else t
    return t.expand(*batch, rows, cols).reshape(-1, rows, cols)


def semiring_bmm(a, b, semiring="log", precision="exact"):
    """out[..., i, j] = ⊕_k a[..., i, k] ⊗ b[..., k, j] over `semiring` (see the README for ±inf and NaN).
    precision="fast" lets the log semiring use one TF32 tensor-core product per term (about 1e-4 relative
    error); "exact" (the default) keeps every output within the dtype's own rounding."""
    _check(a, b, semiring)
    if precision not in ("exact", "fast"):
        raise ValueError(f"precision: unsupported {precision!r} (expected 'exact' or 'fast')")
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
    try:
        batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except RuntimeError as e:
        raise ValueError(f"shape: batch dimensions {tuple(a.shape[:-2])} and {tuple(b.shape[:-2])} do not "
                         f"broadcast") from e
    # Under torch.no_grad() (forward runs with grad mode off, so this is decided here) nothing is saved for a
    # backward: the selecting semirings then skip the argmax.
    wants_grad = torch.is_grad_enabled() and (a.requires_grad or b.requires_grad)
    out = _SemiringBMM.apply(_matrices(a, batch, M, K), _matrices(b, batch, K, N), semiring, wants_grad, precision)
    return out.reshape(*batch, M, N)


def logbmm(a, b, precision="exact"):
    """log Σ_k exp(a[..., i, k] + b[..., k, j]): genbmm.logbmm. precision="fast": see semiring_bmm."""
    return semiring_bmm(a, b, "log", precision)


def maxbmm(a, b):
    """max_k a[..., i, k] + b[..., k, j] (Viterbi): genbmm.maxbmm; the gradient goes to the argmax (ties: smallest k)."""
    return semiring_bmm(a, b, "max_plus")


def minbmm(a, b):
    """min_k a[..., i, k] + b[..., k, j] (shortest paths)."""
    return semiring_bmm(a, b, "min_plus")


def prodmaxbmm(a, b):
    """max_k a[..., i, k] · b[..., k, j]: genbmm.prodmaxbmm."""
    return semiring_bmm(a, b, "max_times")
