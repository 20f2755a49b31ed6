"""jitbmm.torch's linear-chain CRF kernels (chain_log_partition, chain_viterbi) on the GPU machine: scores, edge
marginals, Viterbi paths and their gradients against a float64 torch forward algorithm written here (and against
torch-struct's LinearChainCRF where it is installed), on odd sizes, ragged lengths, large potentials and banded -inf
masks; length-1 and all -inf sequences; strides; errors; opcheck, torch.compile, torch.export and CUDA graphs.

Run as a program (the python_torch_chain CTest entry): it exits 77 ("skipped") where torch or a CUDA GPU is missing,
and fails if any test is skipped where both exist. torch-struct is the oracle written by others, so its comparisons
are among them: where torch and a GPU exist and torch-struct cannot be imported, the run fails and says why
(scripts/gpu-check and scripts/gpu-torch install it from .whl/ on the GPU machine, which has no package index)."""

import math
import sys
import unittest

import package_under_test  # noqa: E402

package_under_test.import_path()

from torch_cases import HALF_ROUNDING, HAVE_CUDA, GpuCase, gpu_main, torch  # noqa: E402

try:
    import torch_struct

    TORCH_STRUCT_MISSING = ""
except Exception as e:  # ImportError, or an incompatibility with this torch
    torch_struct = None
    TORCH_STRUCT_MISSING = f"torch-struct cannot be imported ({type(e).__name__}: {e}); pip install torch-struct"

# (B, T, C): T positions, potentials [B, T - 1, C, C]. Odd sizes, each of 1, 2, 31, 33, 129 in every role.
SHAPES = ((1, 2, 1), (2, 31, 2), (31, 33, 31), (33, 129, 33), (3, 31, 129), (129, 2, 3), (33, 2, 129))
SCALES = (1.0, 10.0, 50.0)


def full_lengths(pot):
    return torch.full((pot.shape[0],), pot.shape[1] + 1, dtype=torch.int64, device=pot.device)


def reference_scores(pot, lengths, semiring):
    """score [B] by the forward algorithm one position at a time, in pot's dtype (float64 in the tests):
    alpha_{t+1}[c] = ⊕_p alpha_t[p] ⊗ pot[t, c, p] from alpha_0 = 0, and score = ⊕_c alpha at the sequence's last
    position. Differentiable: its gradient is the edge marginals (log) or the best path's indicator (max)."""
    reduce = torch.logsumexp if semiring == "log" else (lambda x, dim: x.max(dim).values)
    lengths = full_lengths(pot) if lengths is None else lengths
    alpha = pot.new_zeros(pot.shape[0], pot.shape[-1])
    scores = [reduce(alpha, -1)]
    for t in range(pot.shape[1]):
        alpha = reduce(alpha[:, None, :] + pot[:, t], -1)
        scores.append(reduce(alpha, -1))
    return torch.stack(scores, 1).gather(1, (lengths - 1)[:, None]).squeeze(1)


def reference_paths(pot, lengths):
    """The Viterbi path [B, T] (int64, -1 past a length) of float64 potentials on the CPU: each step's best previous
    state and the best last state by the first largest value (ties: the smallest state)."""
    pot = pot.detach().double().cpu()
    B, n, C, _ = pot.shape
    lengths = (full_lengths(pot) if lengths is None else lengths).cpu()
    states = torch.arange(C)

    def first_max(x):  # [..., C] -> the first index of the largest value
        return torch.where(x == x.max(-1, keepdim=True).values, states, C).min(-1).values

    delta, back = pot.new_zeros(B, C), []
    deltas = [delta]
    for t in range(n):
        terms = delta[:, None, :] + pot[:, t]  # [B, c, p]
        back.append(first_max(terms))
        delta = terms.max(-1).values
        deltas.append(delta)
    path = torch.full((B, n + 1), -1, dtype=torch.int64)
    for b in range(B):
        last = int(lengths[b]) - 1
        path[b, last] = first_max(deltas[last][b])
        for t in range(last, 0, -1):
            path[b, t - 1] = back[t - 1][b, path[b, t]]
    return path


def path_indicator(path, like):
    """The edge indicator [B, T - 1, C, C] of paths [B, T] (-1: past the sequence's end)."""
    path, out = path.cpu(), torch.zeros(like.shape, dtype=like.dtype)
    for b, t in zip(*torch.nonzero(path[:, 1:] >= 0, as_tuple=True)):
        out[b, t, path[b, t + 1], path[b, t]] = 1
    return out.to(like.device)


def path_score(pot, path):
    """The score of given paths, in float64."""
    pot, path = pot.detach().double().cpu(), path.cpu()
    total = pot.new_zeros(pot.shape[0])
    for b, t in zip(*torch.nonzero(path[:, 1:] >= 0, as_tuple=True)):
        total[b] += pot[b, t, path[b, t + 1], path[b, t]]
    return total


@unittest.skipUnless(HAVE_CUDA, "needs torch and a CUDA GPU")  # run as a program, main() says why first
class ChainTest(GpuCase):
    def potentials(self, B, T, C, dtype=None, scale=1.0):
        torch.manual_seed(1000 * B + 10 * T + C)
        return torch.randn(B, T - 1, C, C, dtype=torch.float64, device=self.dev).mul_(scale).to(dtype or torch.float64)

    def lengths(self, B, T, ragged):
        if not ragged:
            return None
        lengths = torch.randint(1, T + 1, (B,), device=self.dev)
        lengths[0] = T  # torch-struct's rule: the longest sequence fills the potentials
        return lengths

    @staticmethod
    def tolerance(dtype, scale, T):
        """float32 rounds every step of a chain; the scores' absolute error grows with the potentials and T."""
        if dtype == torch.float64:
            return dict(rtol=1e-9, atol=1e-9 * scale * T)
        return dict(rtol=2e-5, atol=1e-5 + 4e-6 * scale * T)

    def ours(self, fn, pot, lengths, weights):
        """(score, extra outputs, d(weights · score)/d potentials) of one of jitbmm's chain functions."""
        p = pot.detach().requires_grad_(True)
        out = fn(p, lengths)
        score = out[0] if isinstance(out, tuple) else out
        (grad,) = torch.autograd.grad(score, p, weights)
        return score.detach(), out[1:] if isinstance(out, tuple) else (), grad

    def reference(self, pot, lengths, semiring, weights):
        p = pot.detach().double().requires_grad_(True)
        score = reference_scores(p, lengths, semiring)
        (grad,) = torch.autograd.grad(score, p, weights.double())
        return score.detach(), grad

    def test_log_partition_and_marginals(self):
        for dtype in (torch.float64, torch.float32):
            for B, T, C in SHAPES:
                for scale in SCALES:
                    for ragged in (False, True):
                        with self.subTest(dtype=dtype, B=B, T=T, C=C, scale=scale, ragged=ragged):
                            pot = self.potentials(B, T, C, dtype, scale)
                            lengths = self.lengths(B, T, ragged)
                            w = torch.randn(B, dtype=dtype, device=self.dev)
                            score, _, grad = self.ours(self.jt.chain_log_partition, pot, lengths, w)
                            want, want_grad = self.reference(pot, lengths, "log", w)
                            self.assertEqual(score.dtype, dtype)
                            self.assertEqual(grad.shape, pot.shape)
                            tol = self.tolerance(dtype, scale, T)
                            torch.testing.assert_close(score.double(), want, **tol)
                            torch.testing.assert_close(grad.double(), want_grad, **tol)

    def test_long_chains_of_few_sequences(self):
        """Few sequences of a long chain take the chunked strategy (docs/chains.md, "Strategies"): the same contract,
        ragged lengths included, and under CUDA graph capture."""
        for B, T, C in ((1, 1024, 32), (2, 1100, 33)):
            for ragged in (False, True):
                with self.subTest(B=B, T=T, C=C, ragged=ragged):
                    pot = self.potentials(B, T, C, torch.float32)
                    lengths = self.lengths(B, T, ragged)
                    w = torch.randn(B, device=self.dev)
                    score, _, grad = self.ours(self.jt.chain_log_partition, pot, lengths, w)
                    want, want_grad = self.reference(pot, lengths, "log", w)
                    tol = self.tolerance(torch.float32, 1.0, T)
                    torch.testing.assert_close(score.double(), want, **tol)
                    torch.testing.assert_close(grad.double(), want_grad, **tol)
        pot = torch.randn(1, 1023, 32, 32, device=self.dev, requires_grad=True)

        def step():
            score = self.jt.chain_log_partition(pot)
            return (score, *torch.autograd.grad(score.sum(), pot))

        self.assert_graph_replays(step, lambda: pot.copy_(torch.randn_like(pot)))

    def test_half_potentials(self):
        """float16 and bfloat16 potentials are computed in float32: the score (float32) within float32's tolerance of
        the float64 chain of the values they hold, the gradients (in their dtype) also within their rounding."""
        rounding = HALF_ROUNDING
        for dtype in (torch.float16, torch.bfloat16):
            for B, T, C in SHAPES:
                for scale in (1.0, 10.0):
                    with self.subTest(dtype=dtype, B=B, T=T, C=C, scale=scale):
                        pot = self.potentials(B, T, C, dtype, scale)
                        lengths = self.lengths(B, T, True)
                        w = torch.randn(B, dtype=torch.float32, device=self.dev)
                        score, _, grad = self.ours(self.jt.chain_log_partition, pot, lengths, w)
                        want, want_grad = self.reference(pot, lengths, "log", w)
                        self.assertEqual((score.dtype, grad.dtype, grad.shape), (torch.float32, dtype, pot.shape))
                        tol = self.tolerance(torch.float32, scale, T)
                        torch.testing.assert_close(score.double(), want, **tol)
                        torch.testing.assert_close(grad.double(), want_grad, rtol=rounding[dtype],
                                                   atol=tol["atol"] + rounding[dtype])
                        best, (path,), best_grad = self.ours(self.jt.chain_viterbi, pot, lengths, w)
                        want_best = reference_scores(pot.double(), lengths, "max")
                        self.assertEqual(best.dtype, torch.float32)
                        torch.testing.assert_close(best.double(), want_best, **tol)
                        torch.testing.assert_close(path_score(pot, path), want_best.cpu(), **tol)
                        indicator = (path_indicator(path, pot) * w[:, None, None, None]).to(dtype)
                        self.assertTrue(torch.equal(best_grad, indicator))

    def check_viterbi(self, pot, lengths, exact_path, scale=1.0):
        B, T = pot.shape[0], pot.shape[1] + 1
        w = torch.randn(B, dtype=pot.dtype, device=self.dev)
        score, (path,), grad = self.ours(self.jt.chain_viterbi, pot, lengths, w)
        want = reference_scores(pot.double(), lengths, "max")
        want_path = reference_paths(pot, lengths)
        self.assertEqual((path.dtype, path.shape), (torch.int64, (B, T)))
        torch.testing.assert_close(score.double(), want, **self.tolerance(pot.dtype, scale, T))
        if exact_path:
            self.assertTrue(torch.equal(path.cpu(), want_path), (path, want_path))
        else:  # float32: a path whose score ties the best within rounding may win
            self.assertTrue(torch.equal(path.cpu() < 0, want_path < 0))
            torch.testing.assert_close(path_score(pot, path), want.cpu(), **self.tolerance(pot.dtype, scale, T))
        torch.testing.assert_close(grad, path_indicator(path, pot) * w[:, None, None, None], rtol=0, atol=0)

    def test_viterbi_scores_paths_and_gradient(self):
        for dtype in (torch.float64, torch.float32):
            for B, T, C in SHAPES:
                for scale in SCALES:
                    for ragged in (False, True):
                        with self.subTest(dtype=dtype, B=B, T=T, C=C, scale=scale, ragged=ragged):
                            self.check_viterbi(self.potentials(B, T, C, dtype, scale), self.lengths(B, T, ragged),
                                               exact_path=dtype == torch.float64, scale=scale)

    def test_viterbi_ties_go_to_the_smallest_state(self):
        # Small integers: every sum is exact in float32 too, and many paths tie.
        for dtype in (torch.float32, torch.float64):
            for B, T, C in ((5, 33, 3), (3, 31, 33), (2, 2, 129)):
                with self.subTest(dtype=dtype, B=B, T=T, C=C):
                    torch.manual_seed(B + T + C)
                    pot = torch.randint(-2, 2, (B, T - 1, C, C), device=self.dev).to(dtype)
                    self.check_viterbi(pot, self.lengths(B, T, True), exact_path=True)
                    self.check_viterbi(torch.zeros_like(pot), None, exact_path=True)  # path 0, 0, ...

    def test_banded_masks(self):
        # Forbidden transitions (-inf) outside a band |c - p| <= width: every state stays reachable.
        for dtype in (torch.float64, torch.float32):
            for (B, T, C), width in (((3, 33, 31), 1), ((2, 129, 33), 3), ((1, 31, 129), 0)):
                with self.subTest(dtype=dtype, B=B, T=T, C=C, width=width):
                    pot = self.potentials(B, T, C, dtype, 10.0)
                    states = torch.arange(C, device=self.dev)
                    pot = pot.masked_fill((states[:, None] - states[None, :]).abs() > width, -math.inf)
                    lengths = self.lengths(B, T, True)
                    w = torch.randn(B, dtype=dtype, device=self.dev)
                    score, _, grad = self.ours(self.jt.chain_log_partition, pot, lengths, w)
                    want, want_grad = self.reference(pot, lengths, "log", w)
                    tol = self.tolerance(dtype, 10.0, T)
                    torch.testing.assert_close(score.double(), want, **tol)
                    torch.testing.assert_close(grad.double(), want_grad, **tol)
                    self.assertFalse(torch.isnan(grad).any().item())
                    self.check_viterbi(pot, lengths, exact_path=dtype == torch.float64, scale=10.0)

    def test_length_one(self):
        for dtype in (torch.float32, torch.float64):
            for B, T, C in ((3, 1, 5), (4, 9, 7)):  # no edge at all; every length 1 within T = 9
                with self.subTest(dtype=dtype, T=T):
                    pot = self.potentials(B, T, C, dtype)
                    lengths = torch.ones(B, dtype=torch.int64, device=self.dev)
                    w = torch.ones(B, dtype=dtype, device=self.dev)
                    score, _, grad = self.ours(self.jt.chain_log_partition, pot, lengths, w)
                    torch.testing.assert_close(score, torch.full_like(score, math.log(C)))
                    self.assertEqual(grad.abs().sum().item(), 0.0)
                    score, (path,), grad = self.ours(self.jt.chain_viterbi, pot, lengths, w)
                    self.assertEqual(score.abs().sum().item(), 0.0)
                    self.assertTrue(torch.equal(path[:, 0], torch.zeros_like(path[:, 0])))
                    self.assertTrue(bool((path[:, 1:] == -1).all()))
                    self.assertEqual(grad.abs().sum().item(), 0.0)

    def test_all_neg_inf_sequence(self):
        for dtype in (torch.float32, torch.float64):
            with self.subTest(dtype=dtype):
                pot = self.potentials(3, 17, 6, dtype)
                pot[1] = -math.inf
                w = torch.ones(3, dtype=dtype, device=self.dev)
                score, _, grad = self.ours(self.jt.chain_log_partition, pot, None, w)
                self.assertEqual(score[1].item(), -math.inf)
                self.assertEqual(grad[1].abs().sum().item(), 0.0)
                self.assertFalse(torch.isnan(grad).any().item())
                keep = torch.tensor([0, 2], device=self.dev)
                want, want_grad = self.reference(pot[keep], None, "log", w[keep])
                torch.testing.assert_close(score[keep].double(), want, **self.tolerance(dtype, 1.0, 17))
                torch.testing.assert_close(grad[keep].double(), want_grad, **self.tolerance(dtype, 1.0, 17))

    def test_strides(self):
        # Any layout reads as its contiguous copy: transposed (c, p), every other step, a batch broadcast; the
        # lengths a strided view.
        base = self.potentials(4, 11, 9)
        layouts = {"transposed": base.transpose(2, 3).contiguous().transpose(2, 3),
                   "strided": self.potentials(4, 21, 9)[:, ::2],
                   "broadcast": base[:1].expand(4, -1, -1, -1),
                   "one element": base[:1, :1, :1, :1].expand(4, 10, 9, 9)}
        lengths = torch.tensor([[11, 0], [3, 0], [7, 0], [1, 0]], device=self.dev)[:, 0]
        for name, pot in layouts.items():
            for fn in (self.jt.chain_log_partition, self.jt.chain_viterbi):
                with self.subTest(layout=name, fn=fn.__name__):
                    w = torch.randn(4, dtype=pot.dtype, device=self.dev)
                    got = self.ours(fn, pot, lengths, w)
                    want = self.ours(fn, pot.contiguous(), lengths, w)
                    for x, y in zip((got[0], *got[1], got[2]), (want[0], *want[1], want[2])):
                        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)

    def test_second_derivatives(self):
        # With create_graph=True, d/dθ <marginals, r> and its derivative with respect to grad_score w, against
        # differentiating the reference twice; max_plus's is 0 with respect to the potentials (its gradient is
        # piecewise constant).
        viterbi = (lambda p, n: self.jt.chain_viterbi(p, n)[0])
        for semiring, fn in (("log", self.jt.chain_log_partition), ("max", viterbi)):
            for B, T, C in ((3, 9, 5), (2, 33, 31)):
                with self.subTest(semiring=semiring, B=B, T=T, C=C):
                    pot = self.potentials(B, T, C, torch.float64, 3.0)
                    lengths = self.lengths(B, T, True)
                    r = torch.randn_like(pot)
                    w = torch.randn(B, dtype=torch.float64, device=self.dev)

                    def twice(score_fn):
                        p, v = pot.detach().requires_grad_(True), w.detach().requires_grad_(True)
                        (m,) = torch.autograd.grad(score_fn(p, lengths), p, v, create_graph=True)
                        again = torch.autograd.grad((m * r).sum(), (p, v), allow_unused=True)
                        return (m, *(torch.zeros_like(x) if g is None else g for g, x in zip(again, (p, v))))

                    got, want = twice(fn), twice(lambda p, n: reference_scores(p, n, semiring))
                    for name, g, x in zip(("first", "second", "d/dw"), got, want):
                        torch.testing.assert_close(g, x, rtol=1e-9, atol=1e-9, msg=name)

    def test_second_derivatives_through_the_operators(self):
        # A tensor subclass takes the registered operators, whose backward's output has no autograd formula of its
        # own: a second derivative must come from the torch composition, as the eager path's does.
        class Sub(torch.Tensor):
            pass

        pot = self.potentials(2, 7, 4, torch.float64, 2.0)
        tables = (torch.randn(2, 7, 4, dtype=torch.float64, device=self.dev),
                  torch.randn(4, 4, dtype=torch.float64, device=self.dev),
                  torch.randn(4, dtype=torch.float64, device=self.dev))
        cases = (("chain_log_partition", lambda xs: self.jt.chain_log_partition(xs[0]), (pot,)),
                 ("chain_entropy", lambda xs: self.jt.chain_entropy(xs[0]), (pot,)),
                 ("chain_kl", lambda xs: self.jt.chain_kl(xs[0], xs[1]), (pot, pot * 0.5)),
                 ("hmm_log_partition", lambda xs: self.jt.hmm_log_partition(*xs), tables))
        for name, fn, inputs in cases:
            with self.subTest(name=name):
                def twice(wrap):
                    xs = [wrap(x.detach().clone()).requires_grad_(True) for x in inputs]
                    gs = torch.autograd.grad(fn(xs).sum(), xs, create_graph=True)
                    again = torch.autograd.grad(sum((g * g).sum() for g in gs), xs)
                    return [g.as_subclass(torch.Tensor) for g in (*gs, *again)]

                got, want = twice(lambda x: x.as_subclass(Sub)), twice(lambda x: x)
                for g, w in zip(got, want):
                    torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-9)

    def test_empty_batch_and_no_grad(self):
        pot = self.potentials(1, 5, 3)[:0]
        self.assertEqual(self.jt.chain_log_partition(pot).shape, (0,))
        score, path = self.jt.chain_viterbi(pot)
        self.assertEqual((score.shape, path.shape), ((0,), (0, 5)))
        pot = self.potentials(2, 5, 3).requires_grad_(True)
        with torch.no_grad():
            torch.testing.assert_close(self.jt.chain_log_partition(pot), reference_scores(pot, None, "log"))

    def test_errors_name_the_argument(self):
        pot = self.potentials(2, 5, 3, torch.float32)
        lengths = torch.tensor([5, 3], device=self.dev)
        cases = ((TypeError, "potentials", (pot.tolist(), None)),
                 (ValueError, "potentials.*cpu", (pot.cpu(), None)),
                 (TypeError, "potentials.*dtype", (pot.to(torch.complex64), None)),
                 (TypeError, "potentials.*dtype", (pot.int(), None)),
                 (ValueError, "potentials.*shape", (pot[0], None)),
                 (ValueError, "potentials.*shape", (pot[..., :2], None)),
                 (TypeError, "lengths", (pot, [5, 3])),
                 (ValueError, "lengths.*device", (pot, lengths.cpu())),
                 (TypeError, "lengths.*int64", (pot, lengths.int())),
                 (ValueError, "lengths.*shape", (pot, lengths[:1])),
                 (ValueError, "lengths.*shape", (pot, lengths[None])))
        for fn in (self.jt.chain_log_partition, self.jt.chain_viterbi):
            for error, pattern, args in cases:
                with self.subTest(fn=fn.__name__, pattern=pattern):
                    with self.assertRaisesRegex(error, pattern):
                        fn(*args)
        with self.assertRaisesRegex(ValueError, "C"):  # more states than the kernels take (one value, broadcast)
            big = 16385  # one more than JITBMM_MAX_CHAIN_STATES
            self.jt.chain_log_partition(torch.zeros(1, device=self.dev).expand(1, 1, big, big))
        # A length outside [1, T] cannot be checked without waiting for the device: that sequence scores NaN.
        score = self.jt.chain_log_partition(pot, torch.tensor([5, 6], device=self.dev))
        self.assertTrue(math.isnan(score[1].item()) and not math.isnan(score[0].item()))


@unittest.skipUnless(HAVE_CUDA, "needs torch and a CUDA GPU")  # run as a program, main() says why first
class ChainOperatorTest(GpuCase):
    """The chain as registered operators: opcheck, torch.compile (fullgraph), torch.export and CUDA graphs."""

    def test_opcheck(self):
        torch.manual_seed(20)
        pot = torch.randn(3, 6, 5, 5, device=self.dev, dtype=torch.float64, requires_grad=True)
        for semiring in ("log", "max_plus"):
            for lengths in (None, torch.tensor([7, 2, 5], device=self.dev)):
                with self.subTest(semiring=semiring, lengths=lengths is not None):
                    torch.library.opcheck(torch.ops.jitbmm.chain.default, (pot, lengths, semiring, True))
                    score, aux = torch.ops.jitbmm.chain(pot.detach(), lengths, semiring, True)
                    torch.library.opcheck(torch.ops.jitbmm.chain_backward.default,
                                          (pot.detach(), lengths, aux, torch.randn_like(score), semiring))

    def test_called_directly_the_operators_check_their_operands(self):
        ops, dev = torch.ops.jitbmm, self.dev
        pot = torch.randn(2, 3, 4, 4, device=dev)
        score, aux = ops.chain(pot, None, "log", True)
        _, path = ops.chain(pot, None, "max_plus", True)
        em, tr, init = torch.randn(2, 5, 3, device=dev), torch.randn(3, 3, device=dev), torch.randn(3, device=dev)
        h_score, h_aux = ops.hmm(em, tr, init, None, "log", True)
        cases = [
            ("potentials", lambda: ops.chain(torch.randn(4, 3, 3, device=dev), None, "log", False)),
            ("potentials", lambda: ops.chain(torch.randn(2, 4, 3, 100, device=dev), None, "log", False)),
            ("lengths", lambda: ops.chain(pot, torch.ones(2, dtype=torch.int32, device=dev), "log", False)),
            ("grad_score", lambda: ops.chain_backward(pot, None, aux, torch.randn(3, device=dev), "log")),
            ("aux", lambda: ops.chain_backward(pot, None, aux[:-1], score, "log")),
            ("aux", lambda: ops.chain_backward(pot, None, path[:, :-1].contiguous(), score, "max_plus")),
            ("transitions", lambda: ops.hmm(em, torch.randn(5, 5, device=dev), init, None, "log", True)),
            ("grad_score", lambda: ops.hmm_backward(em, tr, init, None, h_aux, h_score.double(), "log", True, True,
                                                    True)),
            ("aux", lambda: ops.hmm_backward(em, tr, init, None, h_aux[:1], h_score, "log", True, True, True)),
        ]
        for name, call in cases:
            with self.subTest(name=name), self.assertRaisesRegex((ValueError, TypeError), f"^{name}:"):
                call()

    def test_compile_fullgraph(self):
        torch.manual_seed(21)
        pot = torch.randn(4, 12, 7, 7, device=self.dev, requires_grad=True)
        lengths = torch.tensor([13, 5, 1, 9], device=self.dev)

        def step(p, n):
            score, path = self.jt.chain_viterbi(p, n)
            return self.jt.chain_log_partition(p, n).sum() + 0.5 * score.sum(), path

        torch.compiler.reset()
        want, want_path = step(pot, lengths)
        (want_grad,) = torch.autograd.grad(want, pot)
        compiled = torch.compile(step, fullgraph=True)
        got, got_path = compiled(pot, lengths)
        (got_grad,) = torch.autograd.grad(got, pot)
        torch.testing.assert_close(got, want)
        self.assertTrue(torch.equal(got_path, want_path))
        torch.testing.assert_close(got_grad, want_grad)

    def test_export(self):
        class Crf(torch.nn.Module):
            def forward(self, p, n):
                import jitbmm.torch as jt
                return jt.chain_log_partition(p, n) - jt.chain_viterbi(p, n)[0]

        pot = torch.randn(3, 8, 5, 5, device=self.dev)
        lengths = torch.tensor([9, 4, 2], device=self.dev)
        exported = torch.export.export(Crf(), (pot, lengths))
        self.assertIn("jitbmm.chain", str(exported.graph))
        torch.testing.assert_close(exported.module()(pot, lengths), Crf()(pot, lengths))

    def test_cuda_graph_capture(self):
        pot = torch.randn(8, 31, 16, 16, device=self.dev, requires_grad=True)
        lengths = torch.randint(1, 33, (8,), device=self.dev)

        def step():
            score = self.jt.chain_log_partition(pot, lengths)
            return (score, *torch.autograd.grad(score.sum(), pot), *self.jt.chain_viterbi(pot.detach(), lengths))

        self.assert_graph_replays(step, lambda: pot.copy_(torch.randn_like(pot)))


@unittest.skipUnless(HAVE_CUDA, "needs torch and a CUDA GPU")  # run as a program, main() says why first
@unittest.skipIf(torch_struct is None, TORCH_STRUCT_MISSING)
class TorchStructTest(unittest.TestCase):
    """The same numbers as torch_struct.LinearChainCRF: partition and marginals, max and argmax."""

    @classmethod
    def setUpClass(cls):
        import warnings
        import jitbmm.torch as jt
        warnings.filterwarnings("ignore", message=".*arg_constraints.*")
        cls.jt = jt
        cls.dev = torch.device("cuda")

    def test_linear_chain_crf(self):
        for B, T, C in ((4, 9, 5), (3, 33, 31), (2, 129, 33)):
            for ragged in (False, True):
                with self.subTest(B=B, T=T, C=C, ragged=ragged):
                    torch.manual_seed(B * T * C)
                    pot = torch.randn(B, T - 1, C, C, dtype=torch.float64, device=self.dev)
                    lengths = torch.tensor([T - (i % 4 if ragged else 0) for i in range(B)], device=self.dev)
                    dist = torch_struct.LinearChainCRF(pot.clone().requires_grad_(True), lengths=lengths)
                    p = pot.clone().requires_grad_(True)
                    score = self.jt.chain_log_partition(p, lengths)
                    (marginals,) = torch.autograd.grad(score.sum(), p)
                    torch.testing.assert_close(score, dist.partition.detach(), rtol=1e-10, atol=1e-10)
                    torch.testing.assert_close(marginals, dist.marginals.detach(), rtol=1e-8, atol=1e-10)
                    best, path = self.jt.chain_viterbi(pot, lengths)
                    torch.testing.assert_close(best, dist.max.detach(), rtol=1e-10, atol=1e-10)
                    torch.testing.assert_close(path_indicator(path.cpu(), pot), dist.argmax.detach())

    def test_patch_routes_linear_chain_crf_to_the_chain(self):
        """After jitbmm.torch_struct.patch(chains=True), LinearChainCRF's partition, marginals, max and argmax come from the
        chain kernels (counted), equal to torch-struct's own; more states than the kernels hold fall back."""
        import jitbmm.torch_struct as jts
        calls = []
        routes = dict(jts._CHAIN_ROUTES)
        counted = {k: (lambda f, k=k: lambda *a: calls.append(k) or f(*a))(f) for k, f in routes.items()}
        torch.manual_seed(7)
        for B, T, C, ragged in ((3, 17, 5, False), (4, 40, 33, True)):
            with self.subTest(B=B, T=T, C=C, ragged=ragged):
                pot = torch.randn(B, T - 1, C, C, dtype=torch.float64, device=self.dev)
                lengths = torch.tensor([T - (i % 3 if ragged else 0) for i in range(B)], device=self.dev)
                own = torch_struct.LinearChainCRF(pot.clone().requires_grad_(True), lengths=lengths)
                want = (own.partition.detach(), own.marginals.detach(), own.max.detach(), own.argmax.detach())
                calls.clear()
                jts._CHAIN_ROUTES.update(counted)
                try:
                    with jts.patched(chains=True):
                        dist = torch_struct.LinearChainCRF(pot.clone().requires_grad_(True), lengths=lengths)
                        got = (dist.partition.detach(), dist.marginals.detach(), dist.max.detach(),
                               dist.argmax.detach())
                        r = torch.randn_like(pot)  # a loss on the marginals: differentiated again
                        (again,) = torch.autograd.grad((dist.marginals * r).sum(), dist.log_potentials)
                    (own_again,) = torch.autograd.grad((own.marginals * r).sum(), own.log_potentials)
                    torch.testing.assert_close(again, own_again, rtol=1e-8, atol=1e-10)
                finally:
                    jts._CHAIN_ROUTES.update(routes)
                self.assertEqual(sorted(set(calls)), ["LogSemiring", "MaxSemiring"])
                for g, w in zip(got, want):
                    torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-10)
        # 1100 states: more than the chain kernels hold; torch-struct's own scan (with jitbmm's products) serves it.
        pot = torch.randn(1, 2, 1100, 1100, dtype=torch.float32, device=self.dev)
        with jts.patched(chains=True):
            got = torch_struct.LinearChainCRF(pot).partition
        torch.testing.assert_close(got, torch_struct.LinearChainCRF(pot).partition, rtol=1e-5, atol=1e-4)


def main():
    if torch is not None and torch_struct is None:
        print(f"ERROR: {TORCH_STRUCT_MISSING}: its comparisons cannot run")
    return gpu_main()


if __name__ == "__main__":
    sys.exit(main())
