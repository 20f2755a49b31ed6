"""The log product's derivatives of every order (jitbmm.torch under create_graph=True) come from its backward written
as exact log products (jitbmm._torch_product_grad): here on the CPU in float64, with a plain logsumexp product in
place of jitbmm's kernels, against torch's own derivatives of that product: gradients, second derivatives,
forward-mode tricks through an upstream gradient of zeros (jvp, hvp, vhp), a third order, −inf and shared (2-D)
operands. The kernels' side of it is tested on the GPU (test_torch.py).

Run as a program (the python_product_second_order CTest entry): it exits 77 ("skipped") where torch is missing."""

import math
import sys
import unittest

import package_under_test  # noqa: E402

package_under_test.import_path()

try:
    import torch
except ImportError:
    torch = None


def naive(a, b, semiring="log"):
    """The log product by torch's logsumexp: [.., M, K] ⊗ [.., K, N], 2-D operands shared by every batch."""
    assert semiring == "log"
    return (a.unsqueeze(-1) + b.unsqueeze(-3)).logsumexp(-2)


if torch is not None:
    class _Product(torch.autograd.Function):
        """naive's values with jitbmm.torch's backward: under grad mode (create_graph) its differentiable form, else
        the same formulas with no graph, as the fused kernels would give them."""

        @staticmethod
        def forward(ctx, a, b):
            out = naive(a, b)
            ctx.save_for_backward(a, b, out)
            return out

        @staticmethod
        def backward(ctx, grad_out):
            from jitbmm import _torch_product_grad
            a, b, out = ctx.saved_tensors
            return _torch_product_grad.log_backward(naive, a, b, out, grad_out, *ctx.needs_input_grad)


def product(a, b):
    return _Product.apply(a, b)


@unittest.skipIf(torch is None, "needs torch")
class ProductSecondOrderTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(2026)

    def operands(self, a_shape=(2, 4, 5), b_shape=(2, 5, 3)):
        return (torch.randn(*a_shape, dtype=torch.float64, requires_grad=True),
                torch.randn(*b_shape, dtype=torch.float64, requires_grad=True))

    def test_gradcheck_and_gradgradcheck(self):
        for a_shape, b_shape in (((2, 4, 5), (2, 5, 3)), ((4, 5), (2, 5, 3)), ((2, 4, 5), (5, 3)), ((4, 5), (5, 3))):
            with self.subTest(a=a_shape, b=b_shape):
                a, b = self.operands(a_shape, b_shape)
                self.assertTrue(torch.autograd.gradcheck(product, (a, b)))
                self.assertTrue(torch.autograd.gradgradcheck(product, (a, b)))

    def test_jvp_hvp_and_vhp_through_zero_upstream_gradients(self):
        # torch.autograd.functional differentiates a backward with respect to an upstream gradient of zeros: a
        # gradient linear in it keeps its derivative there.
        for a_shape, b_shape in (((2, 4, 5), (2, 5, 3)), ((4, 5), (5, 3))):
            with self.subTest(a=a_shape, b=b_shape):
                a, b = (x.detach() for x in self.operands(a_shape, b_shape))
                va, vb = torch.randn_like(a), torch.randn_like(b)
                _, got = torch.autograd.functional.jvp(product, (a, b), (va, vb))
                _, want = torch.autograd.functional.jvp(naive, (a, b), (va, vb))
                torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)
                for f in (torch.autograd.functional.hvp, torch.autograd.functional.vhp):
                    def loss(fn):
                        return lambda x, y: fn(x, y).logsumexp((-2, -1)).sum() + (fn(x, y) ** 2).sum()
                    _, got = f(loss(product), (a, b), (va, vb))
                    _, want = f(loss(naive), (a, b), (va, vb))
                    for g, w in zip(got, want):
                        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-9)

    def test_third_order(self):
        a, b = self.operands()
        u, v, s = torch.randn(2, 4, 3, dtype=torch.float64), torch.randn(2, 4, 5, dtype=torch.float64), \
            torch.randn(2, 5, 3, dtype=torch.float64)

        def third(fn):
            x, y = a.detach().requires_grad_(), b.detach().requires_grad_()
            ga, gb = torch.autograd.grad(fn(x, y), (x, y), u, create_graph=True)
            ha, hb = torch.autograd.grad((ga * v).sum() + (gb * s).sum(), (x, y), create_graph=True)
            return torch.autograd.grad((ha * ha).sum() + (hb * hb * s).sum(), (x, y))

        for g, w in zip(third(product), third(naive)):
            torch.testing.assert_close(g, w, rtol=1e-8, atol=1e-9)

    def test_minus_inf_and_zero_upstream_entries(self):
        # −inf entries (structural zeros, an output row of −inf) give no NaN; zeros of the upstream gradient give
        # zero first derivatives where they sit, and keep their second derivatives.
        a, b = (x.detach() for x in self.operands())
        a[0, 1] = -math.inf  # an output row of −inf
        a[1, 2, 3] = -math.inf
        b[1, :, 2] = -math.inf  # an output column of −inf
        g = torch.randn(2, 4, 3, dtype=torch.float64)
        g[0, 0] = 0.0
        x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
        out = product(x, y)
        ga, gb = torch.autograd.grad(out, (x, y), g, create_graph=True)
        for t in (ga, gb):
            self.assertFalse(torch.isnan(t).any().item())
        self.assertEqual(ga[0, 1].abs().sum().item(), 0.0)
        self.assertEqual(gb[1, :, 2].abs().sum().item(), 0.0)
        xn, yn = a.clone().requires_grad_(), b.clone().requires_grad_()
        wa, wb = torch.autograd.grad(naive(xn, yn), (xn, yn), g)
        finite = torch.isfinite(wa)
        torch.testing.assert_close(ga[finite], wa[finite], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(gb[torch.isfinite(wb)], wb[torch.isfinite(wb)], rtol=1e-10, atol=1e-12)
        h = torch.autograd.grad((ga ** 2).sum() + (gb ** 2).sum(), (x, y))
        for t in h:
            self.assertFalse(torch.isnan(t).any().item())


if __name__ == "__main__":
    if torch is None:
        print("torch is not installed: skipped")
        sys.exit(77)
    unittest.main(verbosity=2)
