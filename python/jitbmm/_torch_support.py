"""What jitbmm.torch's products and chains share: the library's name of each torch dtype, the current stream as the
library takes it, the lock of the tables of plans, those tables' bound, the tensor types the eager paths take, and the
chain distributions' plans of the C library (expectations, samplers, k best) with their table."""

import ctypes
import threading

import torch
import torch.autograd.forward_ad as _forward_ad

import jitbmm

_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # an int, without building a Stream object

# The torch dtypes jitbmm computes in, by their names in the library's table (jitbmm.DTYPES).
DTYPE_NAMES = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16"}
lock = threading.Lock()
TABLE_ENTRIES = 4096  # then a table of plans starts again (shapes that vary without end, e.g. every sequence length)
PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)  # subclasses go through the registered operators
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0)


def through_dispatcher():
    """Whether a call must go through the registered operators rather than the eager paths' direct calls: while
    torch.compile or torch.export traces, and while a dispatch mode is active (make_fx, FlopCounterMode, selective
    activation checkpointing, a logging mode), which sees only what reaches the dispatcher: a direct foreign call
    would be missing from its graph or its counts."""
    return torch.compiler.is_compiling() or _dispatch_modes() > 0


def stream(device_index):
    return _raw_stream(device_index) if _raw_stream else torch.cuda.current_stream(device_index).cuda_stream


def refuse_tangents(*tensors):
    """NotImplementedError where a tensor carries a forward-mode AD tangent (torch.autograd.forward_ad's dual
    tensors): no kernel has a forward-mode derivative, and a result without its tangent would be silently wrong."""
    if getattr(_forward_ad, "_current_level", -1) < 0:  # outside every dual level: nothing to look at
        return
    for t in tensors:
        if isinstance(t, torch.Tensor) and _forward_ad.unpack_dual(t).tangent is not None:
            raise NotImplementedError("jitbmm.torch: forward-mode AD (a dual tensor's tangent) is not supported; "
                                      "differentiate in reverse mode (backward, torch.autograd.grad)")


def traced_bytes(inputs, size):
    """The bytes a fake (traced) call gives a buffer the library sizes: size() where every input's sizes and strides
    are known (None inputs skipped; without a plan: tracing compiles nothing and needs no GPU), else a size known when
    it runs."""
    if all(isinstance(x, int) for t in inputs if t is not None for x in (*t.shape, *t.stride())):
        return size()
    return torch.library.get_ctx().new_dynamic_size()


def stored(t):
    """t with its values in memory as the kernels read them: a view with the negative bit set (a complex tensor's
    conj().imag, say), whose memory holds the values' negatives, is resolved into a copy; any other tensor is itself."""
    return t.resolve_neg()


def address(t):
    """A tensor's device address for the library, or None for no tensor."""
    return t.data_ptr() if t is not None else None


# The C library's chain problem in the CRF form with contiguous potentials (jitbmm_chain_problem).
chain_problem = jitbmm._chain_problem


class LibraryPlan:
    """A plan of the C library, jitbmm_<kind>_create(*args, &handle) on `device` and jitbmm_<kind>_destroy when it
    goes: its handle, its device and the scratch bytes each run takes, and where a forward keeps what its backward
    reads the bytes of that (both set by the caller)."""

    __slots__ = ("handle", "device", "workspace", "saved", "kind")

    def __init__(self, kind, device, *args):
        lib = jitbmm._library()
        handle = ctypes.c_void_p()
        with torch.cuda.device(device):
            jitbmm._check(getattr(lib, f"jitbmm_{kind}_create")(*args, ctypes.byref(handle)))
        self.handle, self.device, self.kind, self.workspace, self.saved = handle, device, kind, 0, 0

    def __del__(self):
        handle = getattr(self, "handle", None)
        if handle is not None and handle.value and jitbmm._lib is not None:
            getattr(jitbmm._lib, f"jitbmm_{self.kind}_destroy")(handle)


def cached(table, key, make):
    """table[key], made by make() the first time (the table starts again past TABLE_ENTRIES)."""
    plan = table.get(key)
    if plan is None:
        plan = make()
        with lock:
            if len(table) >= TABLE_ENTRIES:
                table.clear()
            plan = table.setdefault(key, plan)
    return plan


def chain_key(potentials, lengths, *more):
    """What a chain distribution's plan is made for: (dtype name, device, B, T, C, with lengths, *more)."""
    B, n, C = potentials.shape[0], potentials.shape[1], potentials.shape[-1]
    return (DTYPE_NAMES[potentials.dtype], potentials.device.index, B, n + 1, C, lengths is not None, *more)


def score_dtype(t):
    """The dtype of a chain's score (and of its gradient): the inputs', float32 for half inputs, which the kernels
    read into float32 and compute in it (the inputs' gradients keep the inputs' dtype)."""
    return torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype
