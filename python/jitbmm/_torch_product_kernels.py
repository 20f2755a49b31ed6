"""The semiring products' kernels as jitbmm.torch calls them: one plan per problem and device (the table of them),
launched on PyTorch's current stream with PyTorch's memory, and the layouts the kernels take operands in."""

import torch

import jitbmm

from . import Plan, Problem, prepare as _prepare, DTYPES as _LIBRARY_DTYPES
from ._torch_support import lock as _kernels_lock, stream as _stream, stored, DTYPE_NAMES as _DTYPE_NAMES
from ._torch_support import TABLE_ENTRIES

# The library's dtypes (jitbmm.DTYPES) by their torch dtype.
DTYPES = {t: name for t, name in _DTYPE_NAMES.items() if name in _LIBRARY_DTYPES}
# The plans made, by problem and device, up to TABLE_ENTRIES (jitbmm.torch.share_choices empties it).
KERNELS = {}


class Kernels:
    """One jitbmm plan as jitbmm.torch calls it: every launch on the current stream of the operands' device, every
    workspace from PyTorch's caching allocator on that stream (so memory stats, empty_cache, CUDA-graph pools and
    expandable segments see it), the foreign functions looked up once."""

    __slots__ = ("plan", "handle", "device", "with_argmax", "workspace", "backward_workspace", "run", "grad")

    def __init__(self, plan, device, with_argmax):
        lib = jitbmm._library()
        self.plan, self.handle, self.device, self.with_argmax = plan, plan._handle, device, with_argmax
        self.workspace = plan.workspace_bytes
        self.backward_workspace = {}  # (need_a, need_b) → bytes, asked on the first backward
        self.run, self.grad = lib.jitbmm_plan_run_with_workspace, lib.jitbmm_plan_backward_with_workspace

    def forward(self, a, b, out_shape):
        """(out, argmax or None) for operands in the plan's layout; out (and argmax) contiguous in out_shape."""
        out = a.new_empty(out_shape)
        argmax = a.new_empty(out_shape, dtype=torch.int32) if self.with_argmax else None
        ws = self.workspace
        scratch = a.new_empty((ws,), dtype=torch.uint8) if ws else None
        status = self.run(self.handle, a.data_ptr(), b.data_ptr(), out.data_ptr(),
                          argmax.data_ptr() if argmax is not None else None,
                          scratch.data_ptr() if ws else None, ws, _stream(self.device))
        if status:
            jitbmm._check(status)
        return out, argmax

    def backward(self, a, b, out, argmax, grad_out, need_a, need_b):
        """(grad_a or None, grad_b or None) in a's and b's own layouts; grad_out in any layout of out's shape; out
        None but for log, whose backward alone reads it."""
        ws = self.backward_workspace.get((need_a, need_b))
        if ws is None:
            with torch.cuda.device(self.device):
                ws = self.plan.backward_workspace_bytes(need_a, need_b, argmax is not None, _stream(self.device))
            self.backward_workspace[(need_a, need_b)] = ws
        grad_out = grad_out.contiguous()  # out's layout
        grad_a = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device) if need_a else None
        grad_b = torch.empty_strided(b.shape, b.stride(), dtype=b.dtype, device=b.device) if need_b else None
        scratch = a.new_empty((ws,), dtype=torch.uint8) if ws else None
        status = self.grad(self.handle, a.data_ptr(), b.data_ptr(), out.data_ptr() if out is not None else None,
                           argmax.data_ptr() if argmax is not None else None, grad_out.data_ptr(),
                           grad_a.data_ptr() if need_a else None, grad_b.data_ptr() if need_b else None,
                           scratch.data_ptr() if ws else None, ws, _stream(self.device))
        if status:
            jitbmm._check(status)
        return grad_a, grad_b


def kernels_for(semiring, dtype, device, shape, a_strides, b_strides, with_argmax, precision, grads=None):
    """The kernels of a call; `grads` (need_a, need_b) for a first call that will be differentiated: its backward's
    kernels are compiled beside the forward's (jitbmm.prepare)."""
    key = (semiring, dtype, device, shape, a_strides, b_strides, with_argmax, precision)
    kernels = KERNELS.get(key)
    if kernels is None:
        B, M, K, N = shape
        problem = Problem(semiring, DTYPES[dtype], B, M, K, N, a_strides=a_strides, b_strides=b_strides,
                          out_strides=(M * N, N, 1), with_argmax=with_argmax, precision=precision)
        with torch.cuda.device(device):  # the plan is made for the current device, for its current stream
            # Inside a capture the plan takes a stored decision or the default at once: nothing to build ahead.
            if grads and any(grads) and not torch.cuda.is_current_stream_capturing():
                _prepare(problem, *grads)
            plan = Plan(problem, _stream(device))
            kernels = Kernels(plan, device, with_argmax)
            # Inside a CUDA-graph capture the plan tuned nothing (a stored decision or the default): it serves
            # the capture, and the next call outside one plans (and tunes) again.
            if torch.cuda.is_current_stream_capturing():
                return kernels
        with _kernels_lock:
            if len(KERNELS) >= TABLE_ENTRIES:  # shapes that vary without end: start again
                KERNELS.clear()
            kernels = KERNELS.setdefault(key, kernels)
    return kernels


def writable(t):
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


def layout(t, batches):
    """(tensor, strides) for the kernel: a 2-D t is one matrix for every batch (batch stride 0). A layout whose
    gradient could not be written in place (overlapping elements) is copied first."""
    t = stored(t)
    if not writable(t) or (t.dim() == 3 and t.shape[0] > 1 and t.stride(0) == 0):
        t = t.contiguous()
    if t.dim() == 2:
        return t, (0, t.stride(0), t.stride(1))
    return t, (t.stride(0), t.stride(1), t.stride(2))


def batches(a, b):
    return a.shape[0] if a.dim() == 3 else b.shape[0] if b.dim() == 3 else 1


def empty_grad(t):
    """The gradient of t in the layout the backward kernel writes: t's own, or contiguous where layout copies."""
    t, _ = layout(t, None)
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)


def sizes(a, b):
    """(B, M, K, N) of the product of a and b as the kernels see them."""
    return batches(a, b), a.shape[-2], a.shape[-1], b.shape[-1]
