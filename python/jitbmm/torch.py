"""PyTorch functions over jitbmm, with gradients from its fused backward kernels.

Drop-in for genbmm: ``jitbmm.torch.logbmm(a, b)``, ``maxbmm``, ``minbmm``, ``prodmaxbmm`` and
``semiring_bmm(a, b, semiring=...)`` take CUDA tensors ``a[..., M, K]`` and ``b[..., K, N]`` (any strides; batch
dimensions broadcast as in ``torch.matmul``) and return ``out[..., M, N]`` in their dtype, on the current CUDA
stream of their device. ``semiring`` is one of ``log``, ``max_plus``, ``min_plus``, ``max_times``, ``plus_times``.

Linear chains in fused kernels, which run the forward algorithm over all T positions at once instead of one
product a step: ``chain_log_partition(potentials, lengths=None)`` and ``chain_viterbi`` take torch-struct's
LinearChainCRF potentials ``[B, T - 1, C, C]``; ``hmm_log_partition(emissions, transitions, initial, lengths=None)``
and ``hmm_viterbi`` take an HMM's tables and never form the potentials. ``chain_entropy(potentials, lengths=None)``,
``chain_cross_entropy(potentials, other, lengths=None)`` and ``chain_kl`` give a CRF's distribution's entropy and its
cross-entropy and KL against another's, with fused backward kernels (``hmm_entropy``, ``hmm_cross_entropy`` and
``hmm_kl`` an HMM's, from its tables); ``chain_sample(potentials, n)`` draws exact paths, ``chain_kbest(potentials,
k)`` gives the k best paths and their scores (``hmm_sample`` and ``hmm_kbest`` the same from an HMM's tables),
``chain_log_count`` and ``chain_log_prob`` count paths and score given ones.
"""

import math
from typing import Optional

try:
    import torch
except ImportError as e:  # the rest of jitbmm works without torch; this module cannot
    raise ImportError("jitbmm.torch needs PyTorch (pip install torch); the jitbmm package itself does not") from e

import jitbmm

from . import SEMIRINGS, _SEMIRING_BACKWARD, _BACKWARD_ARGMAX_SCATTER
from . import _torch_chains, _torch_samples
from . import _torch_product_grad as _differentiable
from ._torch_product_kernels import KERNELS as _kernels, DTYPES as _DTYPES, kernels_for as _kernels_for
from ._torch_product_kernels import layout as _layout, batches as _batches, empty_grad as _empty_grad, sizes as _sizes
from ._torch_support import lock as _kernels_lock, PLAIN_TENSORS as _PLAIN_TENSORS, TABLE_ENTRIES as _FAST_ENTRIES
from ._torch_support import refuse_tangents, through_dispatcher
from ._torch_chains import chain_log_partition, chain_viterbi, hmm_log_partition, hmm_viterbi
from ._torch_divergence import chain_entropy, chain_cross_entropy, chain_kl
from ._torch_hmm_divergence import hmm_entropy, hmm_cross_entropy, hmm_kl
from ._torch_samples import chain_sample, hmm_sample
from ._torch_kbest import chain_kbest, hmm_kbest
from ._torch_structured import entropy_semiring_bmm, kmax_semiring_bmm
from ._torch_counts import chain_log_count, chain_log_prob

__all__ = ["logbmm", "maxbmm", "minbmm", "prodmaxbmm", "semiring_bmm", "share_choices", "chain_log_partition",
           "chain_viterbi", "hmm_log_partition", "hmm_viterbi", "chain_entropy", "chain_cross_entropy", "chain_kl",
           "hmm_entropy", "hmm_cross_entropy", "hmm_kl", "chain_sample", "chain_kbest", "hmm_sample", "hmm_kbest",
           "chain_log_count", "chain_log_prob", "entropy_semiring_bmm", "kmax_semiring_bmm"]

# The selecting semirings: their backward reads the forward's argmax, so a forward that will be differentiated
# saves it.
_SELECTING = tuple(s for s in SEMIRINGS if _SEMIRING_BACKWARD[s] == _BACKWARD_ARGMAX_SCATTER)


# The product and its backward. Operands are [B, rows, cols] or [rows, cols] (one matrix for every batch); without
# an argmax, the argmax output is an empty int32 tensor (operators return tensors only).
def _forward_impl(a: torch.Tensor, b: torch.Tensor, semiring: str, precision: str,
                  with_argmax: bool) -> tuple[torch.Tensor, torch.Tensor]:
    _check_operator(a, b, semiring)
    return _forward(a, b, semiring, precision, with_argmax)


def _check_operator(a, b, semiring, out=None, grad_out=None, argmax=None):
    """The registered operators' own checks, for a caller of torch.ops.jitbmm.* (semiring_bmm checks more, and
    reshapes before it calls them), kept to comparisons: a known semiring; a [B, M, K] or [M, K] and b [B, K, N] or
    [K, N] of one batch, dtype and device (the dispatcher routes only CUDA tensors here); out and grad_out [B, M, N]
    of theirs; argmax the forward's, int32 [B, M, N] or empty."""
    if (semiring not in SEMIRINGS or a.dtype != b.dtype or a.dtype not in _DTYPES or a.device != b.device
            or not 2 <= a.dim() <= 3 or not 2 <= b.dim() <= 3 or a.shape[-1] != b.shape[-2]
            or (a.dim() == 3 and b.dim() == 3 and a.shape[0] != b.shape[0])):
        _check(a, b, semiring)  # names what is wrong, where it can
        raise ValueError(f"a, b: the operator takes [B, M, K] or [M, K] and [B, K, N] or [K, N] of one B, dtype and "
                         f"device, got {tuple(a.shape)} and {tuple(b.shape)}")
    shape = (_batches(a, b), a.shape[-2], b.shape[-1])
    for name, t in (("out", out), ("grad_out", grad_out)):
        if t is not None and (tuple(t.shape) != shape or t.dtype != a.dtype or t.device != a.device):
            raise ValueError(f"{name}: expected {shape} of {a.dtype} on {a.device}, got {tuple(t.shape)} of {t.dtype} "
                             f"on {t.device}")
    if argmax is not None and (argmax.dtype != torch.int32 or argmax.device != a.device
                               or (argmax.numel() and tuple(argmax.shape) != shape)):
        raise ValueError(f"argmax: expected the forward's int32 {shape} (or an empty tensor), got "
                         f"{tuple(argmax.shape)} of {argmax.dtype} on {argmax.device}")


def _forward(a, b, semiring, precision, with_argmax, grads=None):
    """The operator's body; `grads` (need_a, need_b) where the eager path knows the call will be differentiated."""
    batches, M, K, N = _sizes(a, b)
    a, a_strides = _layout(a, batches)
    b, b_strides = _layout(b, batches)
    # Empty sizes too: the plan launches nothing for an empty output, and with K = 0 writes the semiring's zero
    # (and argmax -1), as the C++ API does.
    kernels = _kernels_for(semiring, a.dtype, a.device.index, (batches, M, K, N), a_strides, b_strides, with_argmax,
                           precision, grads)
    out, argmax = kernels.forward(a, b, (batches, M, N))
    return out, argmax if argmax is not None else a.new_empty((0,), dtype=torch.int32)


# The same as registered operators (namespace jitbmm): what torch.compile and torch.export trace, as single nodes
# with fake implementations (their bodies, with the plan cache and ctypes, run only eagerly); opcheck tests them.
# Eager calls skip the dispatcher (_SemiringBMM, and the per-call path below): on an H100 the operator cost 72 µs per
# 8x64^3 forward call against 18 µs for a repeated call (bench/torch_percall.py).
_bmm_op = torch.library.custom_op("jitbmm::semiring_bmm", _forward_impl, mutates_args=(), device_types="cuda")


@_bmm_op.register_fake
def _(a, b, semiring, precision, with_argmax):
    _check_operator(a, b, semiring)
    shape = (_batches(a, b), a.shape[-2], b.shape[-1])
    return a.new_empty(shape), a.new_empty(shape if with_argmax else (0,), dtype=torch.int32)


def _backward_impl(a: torch.Tensor, b: torch.Tensor, out: Optional[torch.Tensor], argmax: torch.Tensor,
                   grad_out: torch.Tensor, semiring: str, precision: str, need_a: bool,
                   need_b: bool) -> tuple[torch.Tensor, torch.Tensor]:
    _check_operator(a, b, semiring, out, grad_out, argmax)
    batches, M, K, N = _sizes(a, b)
    if 0 in (batches, M, K, N):
        # No term reaches a or b (K = 0 leaves them empty; no output, none is summed): the gradients are zero in
        # the layouts the kernels would write, as the fake implementation gives. An operand shared by every batch
        # of an empty batch (B = 0) is not empty, so this is not left to kernels that would write nothing.
        return ((_empty_grad(a).zero_() if need_a else a.new_empty((0,))),
                (_empty_grad(b).zero_() if need_b else b.new_empty((0,))))
    a, a_strides = _layout(a, batches)
    b, b_strides = _layout(b, batches)
    with_argmax = argmax.numel() > 0
    kernels = _kernels_for(semiring, a.dtype, a.device.index, (batches, M, K, N), a_strides, b_strides, with_argmax,
                           precision)
    grad_a, grad_b = kernels.backward(a, b, out, argmax if with_argmax else None, grad_out, need_a, need_b)
    return (grad_a if need_a else a.new_empty((0,))), (grad_b if need_b else b.new_empty((0,)))


_bmm_backward_op = torch.library.custom_op("jitbmm::semiring_bmm_backward", _backward_impl, mutates_args=(),
                                           device_types="cuda")


@_bmm_backward_op.register_fake
def _(a, b, out, argmax, grad_out, semiring, precision, need_a, need_b):
    _check_operator(a, b, semiring, out, grad_out, argmax)
    return (_empty_grad(a) if need_a else a.new_empty((0,)), _empty_grad(b) if need_b else b.new_empty((0,)))


def _gradients(ctx, grad_out, fused):
    """The fused backward kernels (`fused`: the operator when traced, its body when eager); under
    create_graph=True (grad mode on during the backward) the same gradients through differentiable operations
    instead, so a loss on the gradients (marginals) trains. The saved output is [B, M, N]."""
    a, b, out, argmax = ctx.saved_tensors
    need_a, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    if torch.is_grad_enabled():
        if ctx.semiring == "log":
            grad_a, grad_b = _differentiable.log_backward(semiring_bmm, a, b, out, grad_out, need_a, need_b)
        elif ctx.semiring == "plus_times":
            grad_a, grad_b = _differentiable.plus_times_backward(semiring_bmm, a, b, grad_out, need_a, need_b)
        else:
            grad_a, grad_b = _differentiable.selecting_backward(a, b, argmax, grad_out, ctx.semiring, need_a, need_b)
    else:
        grad_a, grad_b = fused(a, b, out, argmax, grad_out, ctx.semiring, ctx.precision, need_a, need_b)
    return (grad_a if need_a else None), (grad_b if need_b else None), None, None, None


def _setup_context(ctx, inputs, output):
    a, b, semiring, precision, _ = inputs
    out, argmax = output
    ctx.semiring, ctx.precision = semiring, precision
    ctx.save_for_backward(a, b, _read_by_backward(out, semiring), argmax)


def _read_by_backward(out, semiring):
    """out where the backward reads it (log's), else None: saved only there, so that an in-place change of the
    output (out.relu_()) is an error only where it would change the gradient, as for torch.matmul."""
    return out if semiring == "log" else None


_bmm_op.register_autograd(lambda ctx, grad_out, _grad_argmax: _gradients(ctx, grad_out, _bmm_backward_op),
                          setup_context=_setup_context)


class _SemiringBMM(torch.autograd.Function):
    """The eager path: the operator's body and backward without the dispatcher; `grads` (need_a, need_b) for a
    call that will be differentiated (a first such call builds the backward's kernels with the forward's), else
    None."""

    @staticmethod
    def forward(ctx, a, b, semiring, precision, with_argmax, grads):
        out, argmax = _forward(a, b, semiring, precision, with_argmax, grads)
        _setup_context(ctx, (a, b, semiring, precision, with_argmax), (out, argmax))
        return out

    @staticmethod
    def backward(ctx, grad_out):
        return (*_gradients(ctx, grad_out, _backward_impl), None)


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


def _broadcast(x, y):
    """The batch shape x and y broadcast to, as torch.matmul's. (torch.broadcast_shapes would do, but its first
    call imports sympy: 2.7 s of a first call on an H100 machine.)"""
    n = max(len(x), len(y))
    px, py = (1,) * (n - len(x)) + x, (1,) * (n - len(y)) + y
    if any(p != q and p != 1 and q != 1 for p, q in zip(px, py)):
        raise ValueError(f"shape: batch dimensions {x} and {y} do not broadcast")
    return torch.Size(q if p == 1 else p for p, q in zip(px, py))


def _matrices(t, batch, rows, cols):
    """t as one matrix shared by every batch (2-D: its batch dimensions are all 1 or all stride 0), else as
    [B, rows, cols] over the broadcast batch shape (a view where the strides allow, else a copy). Autograd carries
    the gradient back through the indexing, expand and reshape."""
    lead = t.dim() - 2
    # A leaf whose batch elements share memory still has a gradient per element: it takes the copy below.
    shared_ok = not (t.requires_grad and t.is_leaf)
    if lead == 0 or (t.numel() > 0 and all(n == 1 or (st == 0 and shared_ok)
                                           for n, st in zip(t.shape[:lead], t.stride()[:lead]))):
        return t[(0,) * lead] if lead else t
    # flatten, not reshape(-1, rows, cols): a -1 beside an empty M, K or N could be any size.
    return t.expand(*batch, rows, cols).flatten(0, -3)


# The per-call path. A call whose operands have the tensor types, shapes, strides, dtypes and devices of an earlier
# call that the kernels took as they were, or as views keeping every element (no broadcast copy, no one matrix of
# an expanded batch), is one dictionary lookup and one foreign call: everything the general path below checked and
# decided follows from that key.
_fast = {}


class _Fast:
    """A remembered call: its kernels, the output's shape (the caller's, and the kernels' [B, M, N], one memory
    layout), the 3-D (or 2-D) views of a and b the kernels take (None: the operand as it is), their strides there,
    and an empty int32 tensor, the argmax saved where there is none (as the general path saves it)."""
    __slots__ = ("kernels", "out_shape", "kernel_out_shape", "a_view", "b_view", "strides", "no_argmax")

    def __init__(self, kernels, out_shape, kernel_out_shape, a_view, b_view, strides, no_argmax):
        self.kernels, self.out_shape, self.kernel_out_shape = kernels, out_shape, kernel_out_shape
        self.a_view, self.b_view, self.strides, self.no_argmax = a_view, b_view, strides, no_argmax


class _FastBMM(torch.autograd.Function):
    """The per-call path with gradients: the operands are the kernels' own, so are their gradients. It saves what
    the general path saves (its output [B, M, N], an argmax tensor), so that a recomputation (non-reentrant
    checkpointing) that takes the other path saves the same; the caller views the output in its own shape. The
    saved output is the output itself, not a view made of it here, so that under create_graph=True the log
    backward differentiates through it."""

    @staticmethod
    def forward(ctx, a, b, semiring, precision, fast):
        out, argmax = fast.kernels.forward(a, b, fast.kernel_out_shape)
        ctx.semiring, ctx.precision, ctx.fast = semiring, precision, fast
        ctx.save_for_backward(a, b, _read_by_backward(out, semiring), fast.no_argmax if argmax is None else argmax)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        fast = ctx.fast

        def fused(a, b, out, argmax, g, semiring, precision, need_a, need_b):
            if (a.stride(), b.stride()) != fast.strides or (out is not None and not out.is_contiguous()):
                # A saved-tensor hook (torch.autograd.graph.save_on_cpu, offloading) gave them back in another
                # layout than the kernels' plan reads: the general backward lays them out again.
                return _backward_impl(a, b, None if out is None else out.contiguous(), argmax.contiguous(), g,
                                      semiring, precision, need_a, need_b)
            return fast.kernels.backward(a, b, out, argmax if argmax.numel() else None, g, need_a, need_b)

        return _gradients(ctx, grad_out, fused)


def _key(a, b, semiring, precision):
    """What decides everything about a call but its data; None for arguments that are not tensors."""
    try:
        wants_grad = torch.is_grad_enabled() and (a.requires_grad or b.requires_grad)
        return (type(a), type(b), a.shape, b.shape, a.stride(), b.stride(), a.dtype, b.dtype, a.device, b.device,
                a.is_neg(), b.is_neg(), semiring, precision, wants_grad)
    except (AttributeError, TypeError):
        return None


def semiring_bmm(a, b, semiring="log", precision="exact"):
    """out[..., i, j] = ⊕_k a[..., i, k] ⊗ b[..., k, j] over `semiring` (README.md: ±inf and NaN).
    precision="fast" lets the log semiring use one TF32 tensor-core product per term (about 1e-4 relative
    error; other semirings refuse it); "exact" (the default) keeps every output within the dtype's own rounding."""
    refuse_tangents(a, b)
    if through_dispatcher():  # torch.compile, torch.export, a dispatch mode: the registered operator
        return _general(a, b, semiring, precision, None)
    key = _key(a, b, semiring, precision)
    try:
        fast = _fast.get(key)
    except TypeError:  # an unhashable semiring or precision: the general path names it
        fast = None
    if fast is None:
        return _general(a, b, semiring, precision, key)
    if fast.a_view is not None:
        a = a.view(fast.a_view)
    if fast.b_view is not None:
        b = b.view(fast.b_view)
    if key[-1]:
        out = _FastBMM.apply(a, b, semiring, precision, fast)
        return out if fast.out_shape == fast.kernel_out_shape else out.view(fast.out_shape)
    return fast.kernels.forward(a, b, fast.out_shape)[0]


def _general(a, b, semiring, precision, key):
    """Every check, broadcast and layout decision; remembers the call for the per-call path when it can."""
    _check(a, b, semiring)
    if precision not in ("exact", "fast"):
        raise ValueError(f"precision: unsupported {precision!r} (expected 'exact' or 'fast')")
    if precision == "fast" and semiring != "log":  # as validate() says too, but also for empty tensors (no plan)
        raise ValueError(f"precision: fast is for the log semiring only, not {semiring}")
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = _broadcast(tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    # Under torch.no_grad() (forward runs with grad mode off, so this is decided here) nothing is saved for a
    # backward: the selecting semirings then skip the argmax.
    wants_grad = torch.is_grad_enabled() and (a.requires_grad or b.requires_grad)
    with_argmax = semiring in _SELECTING and wants_grad
    am, bm = _matrices(a, batch, M, K), _matrices(b, batch, K, N)
    # Compiling, or a tensor subclass (FakeTensor, a wrapper that dispatches): the registered operator.
    if key is None or type(a) not in _PLAIN_TENSORS or type(b) not in _PLAIN_TENSORS:
        out, _ = _bmm_op(am, bm, semiring, precision, with_argmax)
        return _batched(out, batch, M, N)
    out = _SemiringBMM.apply(am, bm, semiring, precision, with_argmax,
                             (a.requires_grad, b.requires_grad) if wants_grad else None)
    if not torch.cuda.is_current_stream_capturing():  # a capture's plans are not kept (_kernels_for)
        _remember(key, a, b, am, bm, batch, semiring, precision, with_argmax)
    return _batched(out, batch, M, N)


def _batched(out, batch, M, N):
    """The kernels' [B, M, N] in the broadcast batch shape; where both operands are one matrix for every batch, their
    one product, the same in each (its gradient the sum over them)."""
    count = math.prod(batch)
    if out.shape[0] != count:
        out = out.expand(count, M, N).contiguous()
    return out.reshape(*batch, M, N)


def _remember(key, a, b, am, bm, batch, semiring, precision, with_argmax):
    """Enters the call into the per-call table when the kernels take a and b themselves, or views of them with all
    their elements (a reshape of the batch dimensions; not a copy, not one matrix of an expanded batch)."""
    if type(a) not in _PLAIN_TENSORS or type(b) not in _PLAIN_TENSORS or a.numel() == 0 or b.numel() == 0:
        return
    batches = _batches(am, bm)
    (ak, a_strides), (bk, b_strides) = _layout(am, batches), _layout(bm, batches)
    views = []
    for t, k in ((a, ak), (b, bk)):
        if k.data_ptr() != t.data_ptr() or k.numel() != t.numel():
            return
        if k.shape == t.shape and k.stride() == t.stride():
            views.append(None)
            continue
        try:
            v = t.view(k.shape)
        except RuntimeError:
            return
        if v.stride() != k.stride():
            return
        views.append(tuple(k.shape))
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
    kernels = _kernels_for(semiring, a.dtype, a.device.index, (batches, M, K, N), a_strides, b_strides, with_argmax,
                           precision)
    if len(_fast) >= _FAST_ENTRIES:
        _fast.clear()
    _fast[key] = _Fast(kernels, (*batch, M, N), (batches, M, N), *views, (ak.stride(), bk.stride()),
                       a.new_empty((0,), dtype=torch.int32))


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


def share_choices(src=0, group=None):
    """Makes rank `src`'s kernel variants every rank's, so every rank of a job rounds alike. Call it on every rank of
    an initialised torch.distributed job (it is a collective), after a step that planned the problems (the first
    training step, forward and backward): rank `src` (a global rank) exports the variants it settled on
    (jitbmm.export_choices), torch.distributed.broadcast_object_list sends them, and every other rank stores them
    as its machine's decisions for its current CUDA device and forgets its own plans, so its next calls plan again
    with `src`'s variants. Returns how many choices this rank imported (0 on `src`)."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("share_choices: torch.distributed is not initialised (call init_process_group first)")
    with torch.cuda.device(torch.cuda.current_device()):  # the export names this device, as the import is made on it
        box = [jitbmm.export_choices() if dist.get_rank() == src else None]
    dist.broadcast_object_list(box, src=src, group=group)
    if dist.get_rank() == src:
        return 0
    with torch.cuda.device(torch.cuda.current_device()):
        n = jitbmm.import_choices(box[0])
    with _kernels_lock:
        _kernels.clear()
        _torch_chains._plans.clear()  # a chain's plan holds the products its steps chose
        _torch_samples._plans.clear()  # so does a sampler's, over more than 1,024 states
    _fast.clear()
    return n
