"""torch-struct's semiring products through jitbmm, in one line:

    import jitbmm.torch_struct
    jitbmm.torch_struct.patch()          # LogSemiring and MaxSemiring; patch(std=True) adds StdSemiring

After patch(), ``LogSemiring.matmul``, ``MaxSemiring.matmul`` (and with std=True ``StdSemiring.matmul``) run
``jitbmm.torch.semiring_bmm`` (log, max_plus, plus_times) on CUDA tensors of float32/float64/float16/bfloat16
with equal dtypes; anything else (CPU tensors, genbmm banded matrices, mixed dtypes) goes to torch-struct's own
matmul as before. Every structure built on these semirings (LinearChainCRF, SemiMarkovCRF, ...) then uses jitbmm for
its partition, its marginals (gradients, also create_graph=True) and its argmax (MaxSemiring's gradient: ties go to
the smallest k). StdSemiring is opt-in because torch-struct already runs it through cuBLAS (torch.matmul), which
jitbmm's plus_times kernels do not beat. unpatch() restores torch-struct's methods; patched() is a context manager.
"""

import contextlib

import torch

from . import torch as _jt

__all__ = ["patch", "unpatch", "patched"]

_ROUTES = {"LogSemiring": "log", "MaxSemiring": "max_plus", "StdSemiring": "plus_times"}
_originals = {}


def _semirings():
    try:
        import torch_struct
    except ImportError as e:
        raise ImportError("jitbmm.torch_struct needs torch-struct (pip install torch-struct)") from e
    return torch_struct


def _routed(semiring, original):
    def matmul(cls, a, b):
        if (isinstance(a, torch.Tensor) and type(a) is type(b) and a.is_cuda and b.is_cuda
                and a.dtype == b.dtype and a.dtype in _jt._DTYPES and a.dim() >= 2 and b.dim() >= 2):
            return _jt.semiring_bmm(a, b, semiring)
        return original.__func__(cls, a, b)

    matmul.__doc__ = f"torch-struct's matmul through jitbmm ({semiring}) on CUDA tensors; see jitbmm.torch_struct."
    return classmethod(matmul)


def patch(std=False):
    """Routes LogSemiring and MaxSemiring (and StdSemiring with std=True) matmul through jitbmm. Idempotent."""
    ts = _semirings()
    for name, semiring in _ROUTES.items():
        if name == "StdSemiring" and not std:
            continue
        cls = getattr(ts, name)
        if name not in _originals:
            _originals[name] = cls.__dict__["matmul"]
        setattr(cls, "matmul", _routed(semiring, _originals[name]))


def unpatch():
    """Restores torch-struct's own matmul methods."""
    ts = _semirings()
    for name, original in list(_originals.items()):
        setattr(getattr(ts, name), "matmul", original)
        del _originals[name]


@contextlib.contextmanager
def patched(std=False):
    patch(std=std)
    try:
        yield
    finally:
        unpatch()
