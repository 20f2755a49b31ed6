"""jitbmm.torch's chain inputs checked, each error naming the argument: the CRF form's potentials, the HMM form's
tables, lengths, and a backward operator's own operands (_torch_chains.py and the distributions call them)."""

import torch

from ._torch_support import DTYPE_NAMES, score_dtype


def _check_tensor(t, name, like=None):
    """t: a CUDA tensor of a chain dtype, on like's device and of like's dtype."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if like is None and t.device.type != "cuda":
        raise ValueError(f"{name}: jitbmm runs on CUDA tensors; this one is on {t.device}")
    if like is not None and t.device != like.device:
        raise ValueError(f"{name}: on {t.device}, expected the emissions' device {like.device}")
    if t.dtype not in DTYPE_NAMES:
        raise TypeError(f"{name}: unsupported dtype {t.dtype} (expected float32, float64, float16 or bfloat16)")
    if like is not None and t.dtype != like.dtype:
        raise TypeError(f"{name}: dtype {t.dtype} differs from the emissions' {like.dtype}")


def _check_lengths(lengths, like):
    if lengths is None:
        return
    if not isinstance(lengths, torch.Tensor):
        raise TypeError(f"lengths: expected a torch.Tensor or None, got {type(lengths).__name__}")
    if lengths.device != like.device:
        raise ValueError(f"lengths: on {lengths.device}, expected the inputs' device {like.device}")
    if lengths.dtype != torch.int64:
        raise TypeError(f"lengths: expected dtype int64, got {lengths.dtype}")
    if lengths.shape != like.shape[:1]:
        raise ValueError(f"lengths: expected shape ({like.shape[0]},), got {tuple(lengths.shape)}")


def _check_backward_operands(like, aux, grad_score, semiring, chain):
    """A backward operator's own operands: grad_score [B] in the score's dtype, and aux as the forward returned it
    (log: its saved bytes, uint8, at least the plan's; max_plus: the int32 path [B, T]). `chain` None where no plan
    is made (tracing): the types alone."""
    B, log = like.shape[0], semiring == "log"
    if (not isinstance(grad_score, torch.Tensor) or grad_score.shape != (B,) or grad_score.dtype != score_dtype(like)
            or grad_score.device != like.device):
        got = (tuple(grad_score.shape), grad_score.dtype) if isinstance(grad_score, torch.Tensor) else type(grad_score)
        raise ValueError(f"grad_score: expected [{B}] of {score_dtype(like)} on {like.device}, got {got}")
    want = torch.uint8 if log else torch.int32
    if not isinstance(aux, torch.Tensor) or aux.dtype != want or aux.device != like.device or not aux.is_contiguous():
        raise ValueError(f"aux: expected the forward's own {want} result on {like.device}")
    if chain is not None and (aux.numel() < chain.saved if log else tuple(aux.shape) != (chain.B, chain.T)):
        size = f"at least {chain.saved} bytes" if log else f"shape {(chain.B, chain.T)}"
        raise ValueError(f"aux: expected the forward's own result ({size}), got shape {tuple(aux.shape)}")


def _check_crf(potentials, lengths):
    _check_tensor(potentials, "potentials")
    if potentials.dim() != 4 or potentials.shape[2] != potentials.shape[3]:
        raise ValueError(f"potentials: expected [B, T - 1, C, C], got shape {tuple(potentials.shape)}")
    _check_lengths(lengths, potentials)


def _check_hmm(emissions, transitions, initial, lengths, prefix="", like=None):
    """An HMM's tables, named with `prefix` (q_ for a second HMM's, which takes the first's emissions `like`: their
    shape, dtype and device)."""
    _check_tensor(emissions, prefix + "emissions", like)
    if emissions.dim() != 3 or (like is not None and emissions.shape != like.shape):
        want = "[B, T, C]" if like is None else f"the emissions' shape {tuple(like.shape)}"
        raise ValueError(f"{prefix}emissions: expected {want}, got shape {tuple(emissions.shape)}")
    B, T, C = emissions.shape
    if T < 1 or C < 1:
        raise ValueError(f"{prefix}emissions: T and C (its last two dimensions) must be at least 1, got shape "
                         f"{tuple(emissions.shape)}")
    _check_tensor(transitions, prefix + "transitions", emissions)
    if transitions.shape not in ((C, C), (B, C, C)):
        raise ValueError(f"{prefix}transitions: expected [C, C] or [B, C, C] with B, C = {B}, {C} (the emissions'), "
                         f"got shape {tuple(transitions.shape)}")
    _check_tensor(initial, prefix + "initial", emissions)
    if initial.shape not in ((C,), (B, C)):
        raise ValueError(f"{prefix}initial: expected [C] or [B, C] with B, C = {B}, {C} (the emissions'), got shape "
                         f"{tuple(initial.shape)}")
    _check_lengths(lengths, emissions)
