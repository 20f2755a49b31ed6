"""jitbmm.torch's linear chains (include/jitbmm/chain.hpp, docs/chains.md): the CRF form's chain_log_partition and
chain_viterbi, the HMM form's hmm_log_partition and hmm_viterbi, as registered operators with autograd.

Each form is a pair of operators, jitbmm::chain / jitbmm::chain_backward (potentials) and jitbmm::hmm /
jitbmm::hmm_backward (emissions, transitions, initial). The forward returns (score, aux): aux is what the backward
reads, the library's `saved` bytes for log and the int32 path [B, T] for max_plus, or empty when `keep` is off
(nothing will be differentiated; max_plus then skips the path)."""

import ctypes
from typing import Optional

import torch

import jitbmm

from ._torch_chain_checks import _check_backward_operands, _check_crf, _check_hmm
from ._torch_chain_second_order import crf_score, hmm_score, second_order
from ._torch_operator import Operator
from ._torch_support import DTYPE_NAMES, TABLE_ENTRIES, address, lock, score_dtype, stored, stream, traced_bytes


_plans = {}


class _Chain:
    """One chain plan as this module calls it: launches on the current stream of the inputs' device, every scratch
    buffer from PyTorch's caching allocator on that stream."""

    __slots__ = ("handle", "device", "B", "T", "hmm", "saved", "workspace", "backward_workspace", "scratch_always", "run",
                 "grad", "settled")

    def __init__(self, problem, device):
        lib = jitbmm._library()
        handle, n = ctypes.c_void_p(), ctypes.c_size_t()
        with torch.cuda.device(device):
            jitbmm._check(lib.jitbmm_chain_plan_create(ctypes.byref(problem), ctypes.byref(handle)))
        self.handle, self.device, self.B, self.T = handle, device, problem.B, problem.T
        self.hmm = problem.form == b"hmm"
        jitbmm._check(lib.jitbmm_chain_plan_saved_bytes(handle, ctypes.byref(n)))
        self.saved = n.value
        if self.hmm:
            self.run, self.grad = lib.jitbmm_chain_plan_run_hmm, lib.jitbmm_chain_plan_backward_hmm
        else:
            self.run, self.grad = lib.jitbmm_chain_plan_run, lib.jitbmm_chain_plan_backward_with_workspace
        self.settled = False
        self._describe()

    def _describe(self):
        """What the plan's calls take of the strategy it runs now: its scratch. While a stand-in runs the calls
        for the strategy the plan chose (ChainPlan::settled), asked again at each call until it settles. Each
        attribute is replaced whole, so that a call on another thread reads the old value or the new one."""
        lib, n, settled = jitbmm._library(), ctypes.c_size_t(), ctypes.c_int()
        jitbmm._check(lib.jitbmm_chain_plan_settled(self.handle, ctypes.byref(settled)))
        workspace = []  # bytes without and with the path
        for with_path in (0, 1):
            jitbmm._check(lib.jitbmm_chain_plan_workspace_bytes(self.handle, with_path, ctypes.byref(n)))
            workspace.append(n.value)
        self.workspace = workspace
        jitbmm._check(lib.jitbmm_chain_plan_backward_workspace_bytes(self.handle, ctypes.byref(n)))
        self.backward_workspace = n.value
        # Whose backward takes its scratch for any gradient: the chunked and the stepped strategies'; the sequential
        # HMM kernels take theirs for the transitions' partial sums alone.
        strategy = ctypes.c_char_p()
        jitbmm._check(lib.jitbmm_chain_plan_strategy(self.handle, ctypes.byref(strategy)))
        self.scratch_always = strategy.value != b"sequential"
        self.settled = bool(settled.value)

    def __del__(self):
        handle = getattr(self, "handle", None)
        if handle is not None and handle.value and jitbmm._lib is not None:
            jitbmm._lib.jitbmm_chain_plan_destroy(handle)

    def forward(self, inputs, lengths, semiring, keep):
        """(score [B], aux) of the chain given by `inputs` (the potentials, or the three tables)."""
        if not self.settled:
            self._describe()
        like = inputs[0]
        score = like.new_empty((self.B,), dtype=score_dtype(like))
        log, path = semiring == "log", keep and semiring == "max_plus"
        if log:
            aux = like.new_empty((self.saved if keep else 0,), dtype=torch.uint8)  # the forward writes every byte
        else:
            aux = like.new_empty((self.B, self.T) if path else (0,), dtype=torch.int32)
        ws = self.workspace[path]
        scratch = like.new_empty((ws,), dtype=torch.uint8) if ws else None
        status = self.run(self.handle, *(t.data_ptr() for t in inputs), address(lengths), score.data_ptr(),
                          aux.data_ptr() if log and keep else None, None, aux.data_ptr() if path else None,
                          address(scratch), ws, stream(self.device))
        if status:
            jitbmm._check(status)
        return score, aux

    def backward(self, inputs, lengths, aux, grad_score, semiring, needs):
        """The gradients of `inputs` times grad_score, each contiguous in its input's shape; an empty tensor for
        an input that `needs` says no to."""
        if not self.settled:
            self._describe()
        grads = [t.new_empty(t.shape if need else (0,)) for t, need in zip(inputs, needs)]
        log = semiring == "log"
        saved, path = (aux.data_ptr(), None) if log else (None, aux.data_ptr())
        grad_score = grad_score.contiguous()
        # The scratch from PyTorch's allocator, where its peak shows: the HMM form's transitions' partial sums, the
        # chunked strategy's tree, the stepped strategy's messages.
        ws = self.backward_workspace if (needs[1] if self.hmm and not self.scratch_always else any(needs)) else 0
        scratch = inputs[0].new_empty((ws,), dtype=torch.uint8) if ws else None
        if self.hmm:
            status = self.grad(self.handle, *(t.data_ptr() for t in inputs), address(lengths), saved, path,
                               grad_score.data_ptr(), *(g.data_ptr() if g.numel() else None for g in grads),
                               address(scratch), ws, stream(self.device))
        elif grads[0].numel():
            status = self.grad(self.handle, inputs[0].data_ptr(), address(lengths), saved, path,
                               grad_score.data_ptr(), grads[0].data_ptr(), address(scratch), ws,
                               stream(self.device))
        else:
            status = 0
        if status:
            jitbmm._check(status)
        return grads


def _layout(t):
    """(t, its strides) as the library reads them: t as it is, but copied where it is broadcast from one element
    along every dimension (to the library, all-zero strides mean contiguous)."""
    t = stored(t)
    if t.numel() > 1 and not any(t.stride()):
        t = t.contiguous()
    return t, tuple(t.stride())


def _planned(layout):
    """(plan, inputs, lengths) of a layout from _crf_layout or _hmm_layout: its plan made once per key."""
    key, problem, inputs, lengths = layout
    chain = _plans.get(key)
    if chain is None:
        chain = _Chain(problem(), inputs[0].device.index)
        with lock:
            if len(_plans) >= TABLE_ENTRIES:  # shapes that vary without end: start again
                _plans.clear()
            chain = _plans.setdefault(key, chain)
    return chain, inputs, lengths


def _saved_bytes(problem):
    """The library's saved bytes of a problem, without a plan (nothing compiled, no GPU needed)."""
    n = ctypes.c_size_t()
    jitbmm._check(jitbmm._library().jitbmm_chain_problem_saved_bytes(ctypes.byref(problem), ctypes.byref(n)))
    return n.value


def _crf_layout(semiring, potentials, lengths):
    """(the plan's key, a function making its problem, (potentials,), lengths), laid out for the library."""
    potentials, strides = _layout(potentials)
    B, n, C = potentials.shape[0], potentials.shape[1], potentials.shape[-1]
    dtype, with_lengths = DTYPE_NAMES[potentials.dtype], lengths is not None
    key = ("crf", semiring, dtype, potentials.device.index, B, n + 1, C, strides, with_lengths)

    def problem():
        return jitbmm._CChainProblem(semiring.encode(), dtype.encode(), B, n + 1, C, (ctypes.c_int64 * 4)(*strides),
                                     int(with_lengths))

    return key, problem, (potentials,), lengths.contiguous() if with_lengths else None


def _hmm_layout(semiring, emissions, transitions, initial, lengths):
    """(the plan's key, a function making its problem, (emissions, transitions, initial), lengths), laid out for
    the library; a shared table's batch stride is 0."""
    (emissions, e_strides), (transitions, t_strides), (initial, i_strides) = map(
        _layout, (emissions, transitions, initial))
    batched_t, batched_i = transitions.dim() == 3, initial.dim() == 2
    t_strides, i_strides = t_strides if batched_t else (0, *t_strides), i_strides if batched_i else (0, *i_strides)
    B, T, C = emissions.shape
    dtype, with_lengths = DTYPE_NAMES[emissions.dtype], lengths is not None
    key = ("hmm", semiring, dtype, emissions.device.index, B, T, C, e_strides, batched_t, t_strides, batched_i,
           i_strides, with_lengths)

    def problem():
        return jitbmm._CChainProblem(semiring.encode(), dtype.encode(), B, T, C, (ctypes.c_int64 * 4)(),
                                     int(with_lengths), b"hmm", int(batched_t), int(batched_i),
                                     (ctypes.c_int64 * 3)(*e_strides), (ctypes.c_int64 * 3)(*t_strides),
                                     (ctypes.c_int64 * 2)(*i_strides))

    return key, problem, (emissions, transitions, initial), lengths.contiguous() if with_lengths else None


def _fake_aux(inputs, semiring, keep, B, T, saved):
    """The fake (traced) aux of a forward: `saved()` gives the library's saved bytes where the inputs' sizes and
    strides are known (without a plan: tracing compiles nothing and needs no GPU)."""
    like = inputs[0]
    if semiring == "max_plus":
        return like.new_empty((B, T) if keep else (0,), dtype=torch.int32)
    return like.new_empty((traced_bytes(inputs, saved) if keep else 0,), dtype=torch.uint8)


# The CRF form: potentials [B, T - 1, C, C].
def _crf_forward(potentials: torch.Tensor, lengths: Optional[torch.Tensor], semiring: str,
                 keep: bool) -> tuple[torch.Tensor, torch.Tensor]:
    chain, inputs, lengths = _planned(_crf_layout(semiring, potentials, lengths))
    return chain.forward(inputs, lengths, semiring, keep)


def _crf_backward(potentials: torch.Tensor, lengths: Optional[torch.Tensor], aux: torch.Tensor,
                  grad_score: torch.Tensor, semiring: str) -> torch.Tensor:
    chain, inputs, lengths = _planned(_crf_layout(semiring, potentials, lengths))
    return chain.backward(inputs, lengths, aux, grad_score, semiring, (True,))[0]


# The operators, for callers of torch.ops.jitbmm.* too: the public functions' checks first, and a backward's own
# operands (in eager mode those functions check once and call the implementations above directly).
def _crf_checked(potentials: torch.Tensor, lengths: Optional[torch.Tensor], semiring: str,
                 keep: bool) -> tuple[torch.Tensor, torch.Tensor]:
    _check_crf(potentials, lengths)
    return _crf_forward(potentials, lengths, semiring, keep)


def _crf_backward_checked(potentials: torch.Tensor, lengths: Optional[torch.Tensor], aux: torch.Tensor,
                          grad_score: torch.Tensor, semiring: str) -> torch.Tensor:
    _check_crf(potentials, lengths)
    layout = _crf_layout(semiring, potentials, lengths)
    _check_backward_operands(potentials, aux, grad_score, semiring, _planned(layout)[0])
    return _crf_backward(potentials, lengths, aux, grad_score, semiring)


_crf_op = torch.library.custom_op("jitbmm::chain", _crf_checked, mutates_args=(), device_types="cuda")
_crf_backward_op = torch.library.custom_op("jitbmm::chain_backward", _crf_backward_checked, mutates_args=(),
                                           device_types="cuda")


@_crf_op.register_fake
def _(potentials, lengths, semiring, keep):
    _check_crf(potentials, lengths)
    B, T = potentials.shape[0], potentials.shape[1] + 1
    return potentials.new_empty((B,), dtype=score_dtype(potentials)), _fake_aux(
        (potentials,), semiring, keep, B, T, lambda: _saved_bytes(_crf_layout(semiring, potentials, lengths)[1]()))


@_crf_backward_op.register_fake
def _(potentials, lengths, aux, grad_score, semiring):
    _check_crf(potentials, lengths)
    _check_backward_operands(potentials, aux, grad_score, semiring, None)
    return potentials.new_empty(potentials.shape)


def _crf_gradients(ctx, grads, needs, backward):
    potentials, lengths, aux = ctx.saved_tensors
    grad_score = grads[0]
    with torch.no_grad():  # the operator's output takes its derivatives from second_order, not from a graph
        grad = backward(potentials, lengths, aux, grad_score, ctx.semiring)
    (grad,) = second_order(crf_score(ctx.semiring, lengths), grad_score, (potentials,), (0,), (grad,),
                           constant=ctx.semiring == "max_plus")
    return grad, None, None, None


# The HMM form: emissions [B, T, C], transitions [C, C] or [B, C, C], initial [C] or [B, C].
def _hmm_forward(emissions: torch.Tensor, transitions: torch.Tensor, initial: torch.Tensor,
                 lengths: Optional[torch.Tensor], semiring: str, keep: bool) -> tuple[torch.Tensor, torch.Tensor]:
    chain, inputs, lengths = _planned(_hmm_layout(semiring, emissions, transitions, initial, lengths))
    return chain.forward(inputs, lengths, semiring, keep)


def _hmm_backward(emissions: torch.Tensor, transitions: torch.Tensor, initial: torch.Tensor,
                  lengths: Optional[torch.Tensor], aux: torch.Tensor, grad_score: torch.Tensor, semiring: str,
                  need_emissions: bool, need_transitions: bool,
                  need_initial: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    chain, inputs, lengths = _planned(_hmm_layout(semiring, emissions, transitions, initial, lengths))
    return tuple(chain.backward(inputs, lengths, aux, grad_score, semiring,
                                (need_emissions, need_transitions, need_initial)))


def _hmm_checked(emissions: torch.Tensor, transitions: torch.Tensor, initial: torch.Tensor,
                 lengths: Optional[torch.Tensor], semiring: str, keep: bool) -> tuple[torch.Tensor, torch.Tensor]:
    _check_hmm(emissions, transitions, initial, lengths)
    return _hmm_forward(emissions, transitions, initial, lengths, semiring, keep)


def _hmm_backward_checked(emissions: torch.Tensor, transitions: torch.Tensor, initial: torch.Tensor,
                          lengths: Optional[torch.Tensor], aux: torch.Tensor, grad_score: torch.Tensor, semiring: str,
                          need_emissions: bool, need_transitions: bool,
                          need_initial: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_hmm(emissions, transitions, initial, lengths)
    layout = _hmm_layout(semiring, emissions, transitions, initial, lengths)
    _check_backward_operands(emissions, aux, grad_score, semiring, _planned(layout)[0])
    return _hmm_backward(emissions, transitions, initial, lengths, aux, grad_score, semiring, need_emissions,
                         need_transitions, need_initial)


_hmm_op = torch.library.custom_op("jitbmm::hmm", _hmm_checked, mutates_args=(), device_types="cuda")
_hmm_backward_op = torch.library.custom_op("jitbmm::hmm_backward", _hmm_backward_checked, mutates_args=(),
                                           device_types="cuda")


@_hmm_op.register_fake
def _(emissions, transitions, initial, lengths, semiring, keep):
    _check_hmm(emissions, transitions, initial, lengths)
    B, T = emissions.shape[0], emissions.shape[1]
    return emissions.new_empty((B,), dtype=score_dtype(emissions)), _fake_aux(
        (emissions, transitions, initial), semiring, keep, B, T,
        lambda: _saved_bytes(_hmm_layout(semiring, emissions, transitions, initial, lengths)[1]()))


@_hmm_backward_op.register_fake
def _(emissions, transitions, initial, lengths, aux, grad_score, semiring, need_emissions, need_transitions,
      need_initial):
    _check_hmm(emissions, transitions, initial, lengths)
    _check_backward_operands(emissions, aux, grad_score, semiring, None)
    needs = (need_emissions, need_transitions, need_initial)
    return tuple(t.new_empty(t.shape if need else (0,)) for t, need in zip((emissions, transitions, initial), needs))


def _hmm_gradients(ctx, grads, needs, backward):
    *tables, lengths, aux = ctx.saved_tensors
    grad_score = grads[0]
    needs = tuple(needs[:3])
    with torch.no_grad():  # as _crf_gradients'
        grads = backward(*tables, lengths, aux, grad_score, ctx.semiring, *needs)
    which = tuple(i for i, need in enumerate(needs) if need)
    asked = iter(second_order(hmm_score(ctx.semiring, lengths), grad_score, tables, which,
                              tuple(grads[i] for i in which), constant=ctx.semiring == "max_plus"))
    return (*(next(asked) if need else None for need in needs), None, None, None)


# What both forms share: the context their backward reads.
def _setup_context(ctx, inputs, output):
    """inputs: the form's tensors, lengths, semiring, keep."""
    ctx.semiring = inputs[-2]
    ctx.save_for_backward(*inputs[:-2], output[1])


_CRF = Operator(_crf_op, _crf_forward, _setup_context, _crf_gradients, _crf_backward_op, _crf_backward,
                non_differentiable=(1,))
_HMM = Operator(_hmm_op, _hmm_forward, _setup_context, _hmm_gradients, _hmm_backward_op, _hmm_backward,
                non_differentiable=(1,))


# The public functions (jitbmm.torch re-exports them).
def chain_log_partition(potentials, lengths=None):
    """score[b] = log Σ over the state paths z of sequence b of exp Σ_t potentials[b, t, z[t + 1], z[t]]: a
    linear-chain CRF's log-partition (torch_struct.LinearChainCRF(potentials, lengths).partition).

    potentials: a CUDA tensor [B, T - 1, C, C] (float32, float64, float16 or bfloat16, any strides),
    potentials[b, t, c, p] scoring the edge from state p at position t to state c at t + 1. lengths: None (every
    sequence has T positions) or int64 [B] on the same device, each in [1, T] (a length outside gives a NaN score;
    the values are not checked on the host, which would wait for the device); sequence b's steps from lengths[b] - 1
    on are not read. A length-1 sequence scores log C. Returns score [B] in the potentials' dtype (float32 for
    float16 and bfloat16 potentials, which are read into float32 and computed in it), on the current CUDA stream.
    Its gradient with respect to the potentials (in their dtype) is the edge marginals (0 for a sequence whose score
    is -inf), from a fused backward kernel; under create_graph=True its own derivatives come from the forward
    algorithm in torch operations (exact, a few launches a position)."""
    _check_crf(potentials, lengths)
    keep = torch.is_grad_enabled() and potentials.requires_grad
    return _CRF(potentials, lengths, "log", keep)[0]


def chain_viterbi(potentials, lengths=None):
    """(score [B], path [B, T]) of each sequence's best state path (Viterbi): score[b] = max over z of
    Σ_t potentials[b, t, z[t + 1], z[t]], path[b, t] = that z[t] as int64 (ties: the smallest state; -1 from
    lengths[b] on). Arguments as chain_log_partition's; a length-1 sequence scores 0. The gradient of score is the
    best path's edge indicator (torch_struct.LinearChainCRF(...).argmax)."""
    _check_crf(potentials, lengths)
    score, path = _CRF(potentials, lengths, "max_plus", True)
    return score, path.long()


def hmm_log_partition(emissions, transitions, initial, lengths=None):
    """score[b] = log Σ over the state paths z of sequence b of exp(initial[z[0]] + emissions[b, 0, z[0]] +
    Σ_{t ≥ 1} (transitions[z[t], z[t - 1]] + emissions[b, t, z[t]])): an HMM's log-likelihood of its observations
    when the tables hold log-probabilities (emissions[b, t, c] = log p(x_t | c)), computed without forming the
    potentials [B, T - 1, C, C].

    emissions: a CUDA tensor [B, T, C] (float32, float64, float16 or bfloat16, T >= 1). transitions: [C, C] shared
    by the batch, or [B, C, C] per sequence; transitions[c, p] scores the step from state p to state c (to, from:
    pass ``table.T`` for a [from, to] table, no copy is made). initial: [C] or [B, C]. All of one dtype and device,
    any strides (broadcast views included). lengths as chain_log_partition's: emissions from lengths[b] on are not
    read. Returns score [B] in their dtype (float32 for half tables, computed in float32), on the current CUDA
    stream. Its gradients (in the tables' dtype), from fused backward kernels: the state marginals for emissions,
    the expected transition counts for transitions (summed over the batch for a shared table), the first position's
    state marginals for initial; each computed only where asked for; zero for a sequence whose score is -inf.
    Second derivatives as chain_log_partition's."""
    _check_hmm(emissions, transitions, initial, lengths)
    keep = torch.is_grad_enabled() and any(t.requires_grad for t in (emissions, transitions, initial))
    return _HMM(emissions, transitions, initial, lengths, "log", keep)[0]


def hmm_viterbi(emissions, transitions, initial, lengths=None):
    """(score [B], path [B, T]) of each sequence's best state path under an HMM's tables: score[b] = max over z of
    initial[z[0]] + emissions[b, 0, z[0]] + Σ_{t ≥ 1} (transitions[z[t], z[t - 1]] + emissions[b, t, z[t]]), path
    as chain_viterbi's (int64; ties: the smallest state; -1 from lengths[b] on). Arguments as hmm_log_partition's.
    The gradients of score are the best path's state indicator (emissions), its transition counts (transitions)
    and its first state's indicator (initial)."""
    _check_hmm(emissions, transitions, initial, lengths)
    score, path = _HMM(emissions, transitions, initial, lengths, "max_plus", True)
    return score, path.long()
