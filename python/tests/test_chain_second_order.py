"""The chains' second derivatives (jitbmm.torch under create_graph=True) come from the forward algorithm written in
torch operations: its scores, its first and second derivatives against central finite differences, and the rules
for -inf (an unreachable state, a sequence without a path: zeros, never NaN), and torch-struct's own second derivative
where it is installed, on the CPU in float64. The fused kernels' side of it is tested on the GPU
(test_torch_chain.py, test_torch_hmm.py).

Run as a program (the python_chain_second_order CTest entry): it exits 77 ("skipped") where torch is missing."""

import math
import sys
import unittest

import package_under_test  # noqa: E402

package_under_test.import_path()

try:
    import torch
except ImportError:
    torch = None
try:
    import torch_struct
except Exception:  # not installed, or incompatible with this torch
    torch_struct = None


def finite_difference(f, xs, k, direction, eps=1e-5):
    """The derivative of f(xs) along `direction` in xs[k], by central differences."""
    plus = [x.detach().clone() for x in xs]
    minus = [x.detach().clone() for x in xs]
    plus[k] += eps * direction
    minus[k] -= eps * direction
    return (f(plus) - f(minus)) / (2 * eps)


@unittest.skipIf(torch is None, "needs torch")
class SecondOrderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from jitbmm import _torch_chain_second_order
        cls.tc = _torch_chain_second_order
        torch.manual_seed(2026)

    def check(self, score, inputs, which, tol=1e-6):
        """The gradients of w · score for the inputs numbered in `which` (as the kernels give them, here from the
        same composition), differentiated again: against finite differences of <those gradients, v> in every
        input and in w."""
        B = inputs[0].shape[0]
        w = torch.randn(B, dtype=torch.float64)

        def first(xs, w):
            xs = [x.detach().requires_grad_(True) for x in xs]
            gs = torch.autograd.grad(score(*xs), [xs[i] for i in which], w, allow_unused=True)
            return [torch.zeros_like(xs[i]) if g is None else g for g, i in zip(gs, which)]

        vs = [torch.randn_like(g) for g in first(inputs, w)]

        def loss(xs, w):
            return sum((g * v).sum() for g, v in zip(first(xs, w), vs))

        xs = [x.detach().requires_grad_(True) for x in inputs]
        v_w = w.detach().requires_grad_(True)
        grads = self.tc.second_order(score, v_w, xs, which, tuple(first(xs, w)))
        got = torch.autograd.grad(sum((g * v).sum() for g, v in zip(grads, vs)), [*xs, v_w], allow_unused=True)
        for k, x in enumerate(inputs):
            d = torch.randn_like(x)
            want = finite_difference(lambda ys: loss(ys, w), inputs, k, d)
            self.assertAlmostEqual(float((got[k] * d).sum()), float(want), delta=tol * max(1.0, abs(float(want))))
        want = finite_difference(lambda ys: loss(inputs, ys[0]), [w], 0, torch.ones_like(w))
        self.assertAlmostEqual(float(got[-1].sum()), float(want), delta=tol * max(1.0, abs(float(want))))
        return got

    def test_logsumexp_rules(self):
        inf = math.inf
        x = torch.tensor([[-inf, -inf], [inf, 0.0], [math.nan, 0.0], [0.5, -1.0]], dtype=torch.float64,
                         requires_grad=True)
        out = self.tc.logsumexp(x, -1)
        self.assertEqual(out[:3].tolist()[:2], [-inf, inf])
        self.assertTrue(math.isnan(out[2].item()))
        self.assertAlmostEqual(out[3].item(), torch.logsumexp(x[3], -1).item(), places=12)
        (g,) = torch.autograd.grad(out[0] + out[3], x, create_graph=True)
        self.assertEqual(g[0].tolist(), [0.0, 0.0])  # torch.logsumexp gives NaN there
        (h,) = torch.autograd.grad(g.sum(), x)
        self.assertFalse(torch.isnan(h[0]).any().item())

    def test_crf_form(self):
        pot = torch.randn(3, 5, 4, 4, dtype=torch.float64)
        for lengths in (None, torch.tensor([6, 1, 4])):
            with self.subTest(lengths=lengths):
                self.check(self.tc.crf_score("log", lengths), (pot,), (0,))

    def test_hmm_form(self):
        tables = (torch.randn(3, 6, 4, dtype=torch.float64), torch.randn(4, 4, dtype=torch.float64),
                  torch.randn(3, 4, dtype=torch.float64))
        for which in ((0, 1, 2), (1,), (0, 2)):
            with self.subTest(which=which):
                self.check(self.tc.hmm_score("log", torch.tensor([6, 2, 5])), tables, which)

    def test_unreachable_states_and_sequences_without_a_path(self):
        e, t, i = torch.randn(3, 6, 4, dtype=torch.float64), torch.randn(4, 4, dtype=torch.float64), \
            torch.randn(3, 4, dtype=torch.float64)
        t[0, 1:] = -math.inf  # nothing moves to state 0
        e[:, 0, 0] = -math.inf  # and it is not a start: unreachable everywhere
        self.check(self.tc.hmm_score("log", None), (e, t, i), (0, 1, 2))
        e[1, 3] = -math.inf  # sequence 1 has no path
        got = self.check(self.tc.hmm_score("log", None), (e, t, i), (0, 1, 2))
        self.assertFalse(any(torch.isnan(g).any().item() for g in got))
        self.assertEqual(got[0][1].abs().sum().item(), 0.0)

    def test_steps_past_a_length_are_not_read(self):
        # NaN and +inf past each length (the kernels read nothing there) reach no derivative; the second derivative
        # of the steps read is the one of the chain cut at its length.
        lengths = torch.tensor([2, 5, 4])
        pot = torch.randn(3, 4, 3, 3, dtype=torch.float64)
        cut = pot.clone()
        pot[0, 1:], pot[2, 3] = math.nan, math.inf
        cut[0, 1:], cut[2, 3] = 0, 0
        torch.manual_seed(1)  # check() draws its directions: the same for both
        got = self.check(self.tc.crf_score("log", lengths), (pot,), (0,))
        self.assertFalse(torch.isnan(got[0]).any().item())
        self.assertEqual(got[0][0, 1:].abs().sum().item(), 0.0)
        torch.manual_seed(1)
        want = self.check(self.tc.crf_score("log", lengths), (cut,), (0,))
        torch.testing.assert_close(got[0], want[0])
        e, t, i = torch.randn(3, 5, 4, dtype=torch.float64), torch.randn(4, 4, dtype=torch.float64), \
            torch.randn(3, 4, dtype=torch.float64)
        e[0, 2:] = math.nan
        got = self.check(self.tc.hmm_score("log", lengths), (e, t, i), (0, 1, 2))
        self.assertFalse(any(torch.isnan(g).any().item() for g in got))

    def test_every_order(self):
        # A derivative of the second derivative (create_graph again) reaches the inputs: the third order of the
        # forward algorithm itself.
        pot = torch.randn(2, 3, 3, 3, dtype=torch.float64, requires_grad=True)
        score = self.tc.crf_score("log", None)
        w = torch.randn(2, dtype=torch.float64)
        (first,) = torch.autograd.grad(score(pot), pot, w, create_graph=True)
        (grad,) = self.tc.second_order(score, w, (pot,), (0,), (first.detach(),))
        v, u = torch.randn_like(pot), torch.randn_like(pot)
        (second,) = torch.autograd.grad((grad * v).sum(), pot, create_graph=True)
        (third,) = torch.autograd.grad((second * u).sum(), pot)
        (want2,) = torch.autograd.grad((first * v).sum(), pot, create_graph=True)
        (want3,) = torch.autograd.grad((want2 * u).sum(), pot)
        torch.testing.assert_close(third, want3)

    def test_max_plus_is_piecewise_linear(self):
        pot = torch.randn(3, 5, 4, 4, dtype=torch.float64)
        got = self.check(self.tc.crf_score("max_plus", None), (pot,), (0,))
        self.assertEqual(got[0].abs().max().item(), 0.0)

    @unittest.skipIf(torch_struct is None, "torch-struct is not installed")
    def test_torch_struct_convention(self):
        # A loss on torch-struct's LinearChainCRF marginals, differentiated by torch-struct itself, against the
        # composition's (its potentials' index order and lengths).
        import warnings
        warnings.filterwarnings("ignore", message=".*arg_constraints.*")
        pot = torch.randn(3, 8, 5, 5, dtype=torch.float64)
        lengths = torch.tensor([9, 6, 9])
        own = torch_struct.LinearChainCRF(pot.clone().requires_grad_(True), lengths=lengths)
        r = torch.randn_like(pot)
        (want,) = torch.autograd.grad((own.marginals * r).sum(), own.log_potentials)
        score = self.tc.crf_score("log", lengths)
        p = pot.clone().requires_grad_(True)
        first = torch.autograd.grad(score(p), p, torch.ones(3, dtype=torch.float64))
        (m,) = self.tc.second_order(score, torch.ones(3, dtype=torch.float64), [p], (0,), first)
        torch.testing.assert_close(m, own.marginals.detach(), rtol=1e-10, atol=1e-12)
        (got,) = torch.autograd.grad((m * r).sum(), p)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def main():
    if torch is None:
        print("SKIPPED: torch is not installed here")
        return 77
    result = unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[1:], exit=False).result
    if torch_struct is None:
        print("NOTE: torch-struct is not installed: its comparison did not run")
    skipped = [s for s in result.skipped if "torch-struct" not in s[1]]
    if skipped or result.testsRun == 0:
        print(f"FAILED: {len(skipped)} skipped, {result.testsRun} run")
        return 1
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
