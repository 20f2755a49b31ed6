"""torch-struct's semiring products through jitbmm, in one line:

    import jitbmm.torch_struct
    jitbmm.torch_struct.patch()          # LogSemiring and MaxSemiring; patch(std=True) adds StdSemiring,
                                         # patch(chains=True) sends LinearChainCRF to the fused chain kernels

After patch(), ``LogSemiring.matmul``, ``MaxSemiring.matmul`` (and with std=True ``StdSemiring.matmul``) run
``jitbmm.torch.semiring_bmm`` (log, max_plus, plus_times) on CUDA tensors of float32/float64/float16/bfloat16
with equal dtypes, ``EntropySemiring.matmul`` (every structure's entropy) ``jitbmm.torch.entropy_semiring_bmm`` on
CUDA float32/float64 pairs, and the products of the classes ``KMaxSemiring(k)`` makes (every structure's kmax and topk,
k <= 16) ``jitbmm.torch.kmax_semiring_bmm``; anything else (CPU tensors, genbmm banded matrices, mixed dtypes) goes to torch-struct's own
matmul as before. Every structure built on these semirings (LinearChainCRF, SemiMarkovCRF, ...) then uses jitbmm for
its partition, its marginals (gradients, also create_graph=True) and its argmax (MaxSemiring's gradient: ties go to
the smallest k). StdSemiring is opt-in because torch-struct already runs it through cuBLAS (torch.matmul), which
jitbmm's plus_times kernels do not beat. unpatch() restores torch-struct's methods; patched() is a context manager.

With chains=True, LinearChainCRF goes further: its log-partition (LogSemiring) and best score (MaxSemiring), and so
its partition, marginals, max and argmax, run jitbmm's fused chain kernels (jitbmm.torch.chain_log_partition,
chain_viterbi; docs/chains.md) where the potentials fit them (a CUDA float32/float64/float16/bfloat16 [B, N - 1, C,
C] with C within the kernels' limit; half potentials are computed in float32 and the score returned in their dtype,
as torch-struct returns it), one kernel for the whole chain instead of torch-struct's log-depth scan of products.
Its entropy, cross_entropy(other) and kl(other) run jitbmm's chain expectations (jitbmm.torch.chain_entropy,
chain_cross_entropy, chain_kl; up to 1,024 states, the other distribution a LinearChainCRF or HMM of the same
shape); kmax(k) and topk(k) its k-best kernel (jitbmm.torch.chain_kbest; k <= 16, up to 1,024 states);
sample((n,)) its sampler (jitbmm.torch.chain_sample); count and log_prob(value) its log-partition
(jitbmm.torch.chain_log_count, chain_log_prob): each returned in torch-struct's shapes and the potentials' dtype, with its conventions (a length below
1 is one position, log_prob reads the value at every step); anything else, torch-struct's own semirings.
torch_struct.HMM, a chain of the potentials it forms from its tables, takes every one of these routes too. A GPU jitbmm
does not support, or a machine without NVRTC, gives every route back to torch-struct, with a warning.
It is not the default because a loss on the marginals differentiates them again, which the chain does through the
forward algorithm in torch operations, a position at a time (exact, but slower than the products' scan there).
"""

import contextlib
import importlib
import warnings

import torch

import jitbmm

from . import torch as _jt
from . import _torch_counts as _jt_counts
from . import _torch_kbest as _jt_kbest
from . import _torch_structured as _jt_structured
from ._torch_samples import edge_indicators
from ._torch_support import DTYPE_NAMES

__all__ = ["patch", "unpatch", "patched"]

_ROUTES = {"LogSemiring": "log", "MaxSemiring": "max_plus", "StdSemiring": "plus_times"}
_CHAIN_ROUTES = {"LogSemiring": _jt.chain_log_partition, "MaxSemiring": lambda p, n: _jt.chain_viterbi(p, n)[0]}
_originals = {}
# The largest count whose exp of a float64 log-partition is within a small fraction of the whole number: the log's
# error, some ulps of a value of 25, is a relative error of the count near 1e-14.
_EXACT_COUNT = 2.0 ** 36

# What makes a route give way to torch-struct's own computation: inputs the kernels do not hold (ValueError: more
# states than a chain kernel holds, a product beyond a kernel's sizes, operands torch-struct's generic product
# broadcasts and jitbmm's does not, ...), and a machine jitbmm cannot run on (a GPU it does not support, no NVRTC),
# which _gave_way says.
_UNSUPPORTED = (jitbmm.UnsupportedDeviceError, jitbmm.NoNvrtcError)
_GIVES_WAY = (ValueError, *_UNSUPPORTED)


def _gave_way(error):
    if not isinstance(error, ValueError):
        warnings.warn(f"jitbmm.torch_struct: {error}; torch-struct's own computation runs instead", RuntimeWarning,
                      stacklevel=3)


def _lengths(checked, device):
    """torch-struct's checked lengths as the kernels take them. A length below 1 (torch-struct asserts only that the
    longest is N) is one position there, every step its mask's identity, as a length of 1 is in the kernels. Floating
    lengths that are not whole numbers (2.5, NaN), and a 0 in an unsigned dtype, are a ValueError: torch-struct's own
    masks read them in a way of their own, so its computation takes them (the routes give way)."""
    if checked.is_floating_point() and bool((~torch.isfinite(checked) | (checked != checked.round())).any()):
        raise ValueError("lengths: not whole numbers; torch-struct's own computation takes them")
    if not checked.is_floating_point() and not checked.is_signed() and bool((checked == 0).any()):
        # torch-struct's lengths - 1 wraps around in an unsigned dtype: a 0 reads the whole chain there
        raise ValueError("lengths: an unsigned 0; torch-struct's own computation takes it")
    return checked.to(device=device, dtype=torch.int64).clamp(min=1)


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
            try:
                return _jt.semiring_bmm(a, b, semiring)
            except _GIVES_WAY as e:
                _gave_way(e)
        return original.__func__(cls, a, b)

    matmul.__doc__ = f"torch-struct's matmul through jitbmm ({semiring}) on CUDA tensors; see jitbmm.torch_struct."
    return classmethod(matmul)


def _entropy_routed(ts, original):
    """EntropySemiring's matmul (torch-struct's generic product of pairs, which it inherits) through
    jitbmm.torch.entropy_semiring_bmm on CUDA float32/float64 pairs."""
    inherited = original if original is not None else ts.Semiring.__dict__["matmul"]

    def matmul(cls, a, b):
        if (isinstance(a, torch.Tensor) and type(a) is type(b) and a.is_cuda and b.is_cuda and a.dtype == b.dtype
                and a.dtype in (torch.float32, torch.float64) and a.dim() >= 3 and b.dim() >= 3
                and a.shape[0] == 2 and b.shape[0] == 2):
            try:
                return _jt.entropy_semiring_bmm(a, b)
            except _GIVES_WAY as e:
                _gave_way(e)
        return inherited.__func__(cls, a, b)

    matmul.__doc__ = "torch-struct's EntropySemiring.matmul through jitbmm on CUDA tensors; see jitbmm.torch_struct."
    return classmethod(matmul)


def _kmax_factory(ts, original):
    """torch-struct's KMaxSemiring(k) factory, whose classes' matmul runs jitbmm.torch.kmax_semiring_bmm on CUDA
    float32/float64 k-vectors (k <= 16); anything else their inherited product."""
    inherited = ts.Semiring.__dict__["matmul"]

    def KMaxSemiring(k):
        cls = original(k)
        if isinstance(k, int) and 1 <= k <= _jt_structured.MAX_K:
            def matmul(c, a, b):
                if (isinstance(a, torch.Tensor) and type(a) is type(b) and a.is_cuda and b.is_cuda
                        and a.dtype == b.dtype and a.dtype in (torch.float32, torch.float64) and a.dim() >= 3
                        and b.dim() >= 3 and a.shape[0] == k and b.shape[0] == k):
                    try:
                        return _jt.kmax_semiring_bmm(a, b)
                    except _GIVES_WAY as e:
                        _gave_way(e)
                return inherited.__func__(c, a, b)

            cls.matmul = classmethod(matmul)
        return cls

    KMaxSemiring.__doc__ = original.__doc__
    return KMaxSemiring


def _chain_routed(ts, original):
    def logpartition(self, log_potentials, lengths=None, force_grad=False):
        name = next((n for n in _CHAIN_ROUTES if self.semiring is getattr(ts, n)), None)
        p = log_potentials
        if (name is None or not isinstance(p, torch.Tensor) or not p.is_cuda or p.dtype not in DTYPE_NAMES
                or p.dim() != 4 or p.shape[2] != p.shape[3]):
            return original(self, log_potentials, lengths, force_grad)
        # torch-struct's own checks (one length equals N) and conversion (a leading semiring dimension): the
        # marginals are the gradient with respect to the converted tensor it returns.
        edge, _, _, _, checked = self._check_potentials(log_potentials, lengths)
        try:
            given = None if lengths is None else _lengths(checked, p.device)
            score = _CHAIN_ROUTES[name](edge[0], given)
        except _GIVES_WAY as e:  # more states than the chain kernels hold, say: torch-struct's scan, as before
            _gave_way(e)
            return original(self, log_potentials, lengths, force_grad)
        return score.unsqueeze(0).to(p.dtype), [edge]

    logpartition.__doc__ = "LinearChain's logpartition through jitbmm's fused chain where it fits; see jitbmm.torch_struct."
    return logpartition


def _chain_distributions(ts):
    """torch-struct's distributions over the paths of a linear chain, whose log_potentials are [B, N - 1, C, C]:
    LinearChainCRF, and HMM, which forms them from its tables."""
    return (ts.LinearChainCRF, ts.HMM)


def _distribution_routes(ts):
    """The chain distributions' entropy, cross_entropy(other) and kl(other) through jitbmm's chain expectations
    (jitbmm.torch.chain_entropy, chain_cross_entropy, chain_kl), and their other properties through the kernels
    below, where the potentials fit them, else torch-struct's own (inherited) ones: {name: attribute to set on each
    of _chain_distributions}."""
    base, chains = ts.StructDistribution, _chain_distributions(ts)

    def routed(d, other, marks=True):
        """(the potentials and the other's as the kernels take them, lengths), or None where they do not fit. As
        torch-struct's own computations do, the potentials are made to require grad (unless `marks` is False: count
        reads a copy of them), and with another chain its potentials too."""
        p = d.log_potentials
        if (not isinstance(p, torch.Tensor) or not p.is_cuda or p.dtype not in DTYPE_NAMES or p.dim() != 4
                or p.shape[2] != p.shape[3]):
            return None
        if other is not None and ((type(other) is not type(d) and not {type(d), type(other)} <= set(chains))
                                  or other.log_potentials.shape != p.shape or other.log_potentials.dtype != p.dtype
                                  or other.log_potentials.device != p.device):
            return None
        # torch-struct's own checks (one length equals N); its conversion's [0] is the potentials themselves.
        _, _, _, _, checked = d._struct()._check_potentials(p if marks else p.detach(), d.lengths)
        try:
            lengths = None if d.lengths is None else _lengths(checked, p.device)
        except ValueError:
            return None
        if other is not None:
            other.log_potentials.requires_grad_(True)
        return p, None if other is None else other.log_potentials, lengths

    def entropy(self):
        args = routed(self, None)
        try:
            if args is not None:
                return _jt.chain_entropy(args[0], args[2]).to(args[0].dtype)
        except _GIVES_WAY as e:
            _gave_way(e)
        return base.__dict__["entropy"].wrapped(self)  # the lazy property's own function

    def pairwise(name, ours):
        def method(self, other):
            args = routed(self, other)
            try:
                if args is not None:
                    return ours(*args).to(args[0].dtype)
            except _GIVES_WAY as e:
                _gave_way(e)
            return getattr(base, name)(self, other)

        method.__doc__ = f"A linear chain's {name} through jitbmm's chain expectations where it fits."
        return method

    def sample(self, sample_shape=torch.Size()):
        args = routed(self, None)
        try:
            if args is not None and len(sample_shape) == 1:
                paths = _jt.chain_sample(args[0], int(sample_shape[0]), args[2])
                return edge_indicators(paths, args[0].shape[-1], args[0].dtype)
        except _GIVES_WAY as e:
            _gave_way(e)
        return base.sample(self, sample_shape)

    def count(self):
        args = routed(self, None, marks=False)
        try:
            if args is not None:
                # From the log in float64, rounded to the whole number it is (exp(log 3) is 3.0000000000000004)
                # where the log's own rounding leaves the count within a fraction of it. Beyond that a float64
                # count goes to torch-struct's sum, which is exact up to 2**53.
                count = torch.exp(_jt_counts.log_count(args[0], args[2]))
                if args[0].dtype == torch.float64 and bool((count >= _EXACT_COUNT).any()):
                    return base.__dict__["count"].wrapped(self)
                return torch.where(count < _EXACT_COUNT, count.round(), count).to(args[0].dtype)
        except _GIVES_WAY as e:
            _gave_way(e)
        return base.__dict__["count"].wrapped(self)

    def log_prob(self, value):
        args = routed(self, None)
        try:
            if args is not None and isinstance(value, torch.Tensor):
                # torch-struct's score reads value at every step, those past a length too.
                return _jt_counts.log_prob(args[0], value, args[2], every_step=True).to(args[0].dtype)
        except _GIVES_WAY as e:
            _gave_way(e)
        return base.log_prob(self, value)

    def kmax(self, k):
        args = routed(self, None)
        try:
            if args is not None and isinstance(k, int) and not isinstance(k, bool) and 1 <= k <= _jt_kbest.MAX_K:
                return _jt.chain_kbest(args[0], k, args[2])[0].to(args[0].dtype)
        except _GIVES_WAY as e:
            _gave_way(e)
        return base.kmax(self, k)

    def topk(self, k):
        args = routed(self, None)
        try:
            if args is not None and isinstance(k, int) and not isinstance(k, bool) and 1 <= k <= _jt_kbest.MAX_K:
                paths = _jt.chain_kbest(args[0], k, args[2])[1]
                return edge_indicators(paths, args[0].shape[-1], args[0].dtype)
        except _GIVES_WAY as e:
            _gave_way(e)
        return base.topk(self, k)

    kmax.__doc__ = "A linear chain's kmax(k) through jitbmm's k-best kernel where it fits (k <= 16, C <= 1024)."
    topk.__doc__ = "A linear chain's topk(k) (edge indicators) through jitbmm's k-best kernel where it fits."
    entropy.__doc__ = "A linear chain's entropy through jitbmm's chain expectations where it fits."
    count.__doc__ = "A linear chain's count of paths through jitbmm's log-partition of its structure where it fits."
    log_prob.__doc__ = "A linear chain's log_prob through jitbmm's fused log-partition where it fits."
    sample.__doc__ = "A linear chain's samples (edge indicators) through jitbmm's chain sampler where it fits."
    return {"entropy": torch.distributions.utils.lazy_property(entropy),
            "cross_entropy": pairwise("cross_entropy", _jt.chain_cross_entropy),
            "kl": pairwise("kl", _jt.chain_kl), "sample": sample,
            "count": torch.distributions.utils.lazy_property(count), "log_prob": log_prob, "kmax": kmax, "topk": topk}


def patch(std=False, chains=False):
    """Routes LogSemiring, MaxSemiring, EntropySemiring and KMaxSemiring(k) (and StdSemiring with std=True) matmul,
    and with chains=True LinearChain's logpartition, through jitbmm. Idempotent: a second call sets the routes anew."""
    ts = _semirings()
    for name, semiring in _ROUTES.items():
        if name == "StdSemiring" and not std:
            if name in _originals:  # routed by an earlier patch(std=True): torch-struct's own again
                setattr(getattr(ts, name), "matmul", _originals.pop(name))
            continue
        cls = getattr(ts, name)
        if name not in _originals:
            _originals[name] = cls.__dict__["matmul"]
        setattr(cls, "matmul", _routed(semiring, _originals[name]))
    if "KMaxSemiring" not in _originals:
        # The factory's defining module by its full name: torch_struct's star imports rebind the name
        # torch_struct.semirings to that inner module.
        _originals["KMaxSemiring"] = importlib.import_module("torch_struct.semirings.semirings").KMaxSemiring
    for module in _kmax_modules(ts):
        module.KMaxSemiring = _kmax_factory(ts, _originals["KMaxSemiring"])
    if "EntropySemiring" not in _originals:
        _originals["EntropySemiring"] = ts.EntropySemiring.__dict__.get("matmul")  # None: inherited
    ts.EntropySemiring.matmul = _entropy_routed(ts, _originals["EntropySemiring"])
    if chains and "LinearChain" not in _originals:
        if "logpartition" not in ts.LinearChain.__dict__:
            raise RuntimeError("jitbmm.torch_struct.patch(chains=True): this torch-struct's LinearChain has no "
                               "logpartition method to route (torch-struct 0.5 has)")
        _originals["LinearChain"] = ts.LinearChain.__dict__["logpartition"]
        ts.LinearChain.logpartition = _chain_routed(ts, _originals["LinearChain"])
        for name, attribute in _distribution_routes(ts).items():
            for cls in _chain_distributions(ts):
                setattr(cls, name, attribute)
    elif not chains and "LinearChain" in _originals:
        ts.LinearChain.logpartition = _originals.pop("LinearChain")
        _unroute_distribution(ts)


def _unroute_distribution(ts):
    """The chain distributions inherit torch-struct's own properties again."""
    for cls in _chain_distributions(ts):
        for name in ("entropy", "cross_entropy", "kl", "sample", "count", "log_prob", "kmax", "topk"):
            if name in cls.__dict__:
                delattr(cls, name)


def _kmax_modules(ts):
    """The modules that hold torch-struct's KMaxSemiring factory by name (where its distributions take it from)."""
    names = ("torch_struct", "torch_struct.semirings", "torch_struct.semirings.semirings", "torch_struct.distributions")
    return [m for m in (importlib.import_module(n) for n in names) if hasattr(m, "KMaxSemiring")]


def unpatch():
    """Restores torch-struct's own matmul methods."""
    ts = _semirings()
    for name, original in list(_originals.items()):
        if name == "KMaxSemiring":
            for module in _kmax_modules(ts):
                module.KMaxSemiring = original
        elif name == "EntropySemiring" and original is None:  # it inherits Semiring's again
            del ts.EntropySemiring.matmul
        else:
            setattr(getattr(ts, name), "logpartition" if name == "LinearChain" else "matmul", original)
        if name == "LinearChain":
            _unroute_distribution(ts)
        del _originals[name]


def _state():
    """The routes set now, as the arguments of patch() that set them; None where none is."""
    if not _originals:
        return None
    return {"std": "StdSemiring" in _originals, "chains": "LinearChain" in _originals}


@contextlib.contextmanager
def patched(std=False, chains=False):
    """patch(std, chains) within the block; on leaving it, the routes as they were before it (none, or an earlier
    patch()'s)."""
    before = _state()
    patch(std=std, chains=chains)
    try:
        yield
    finally:
        if before is None:
            unpatch()
        else:
            patch(**before)
