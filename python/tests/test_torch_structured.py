"""jitbmm.torch's structured semirings' products on the GPU machine. entropy_semiring_bmm: against its definition in
float64 torch and against torch-struct's own EntropySemiring.matmul (values and gradients, broadcast batches,
torch-struct's -1e5 zeros), gradcheck, torch-struct's SemiMarkovCRF and LinearChainCRF entropies with the product
routed by patch() against native, and bad arguments. kmax_semiring_bmm: against every candidate sorted in float64
torch, torch-struct's KMaxSemiring(k).matmul, SemiMarkovCRF's kmax routed against native, and its gradient.

Run as a program (the python_torch_structured CTest entry): it exits 77 ("skipped") where torch or a CUDA GPU is
missing, and fails if any test is skipped where both exist."""

import math
import sys
import unittest

import package_under_test  # noqa: E402

package_under_test.import_path()

from torch_cases import GpuCase, gpu_main, torch  # noqa: E402

try:
    import torch_struct
except Exception:
    torch_struct = None


def definition(a, b):
    """The product from its definition in float64 torch (terms of weight 0 dropped)."""
    x0 = a[0].unsqueeze(-1) + b[0].unsqueeze(-3)  # [..., M, K, N]
    x1 = a[1].unsqueeze(-1) + b[1].unsqueeze(-3)
    z = torch.logsumexp(x0, dim=-2)
    p = torch.exp(x0 - z.unsqueeze(-2))
    h = torch.where(p > 0, p * (x1 - (x0 - z.unsqueeze(-2))), torch.zeros((), dtype=a.dtype, device=a.device))
    return torch.stack((z, h.sum(-2)))


class EntropyProductTest(GpuCase):
    def test_definition_and_gradients(self):
        jt = self.jt
        g = torch.Generator(device=self.dev).manual_seed(2)
        for dtype in (torch.float32, torch.float64):
            for sa, sb in (((2, 3, 5, 7), (2, 3, 7, 4)), ((2, 4, 1, 6, 9), (2, 5, 9, 2)), ((2, 1, 1), (2, 1, 1))):
                a = torch.randn(sa, generator=g, device=self.dev, dtype=dtype)
                b = torch.randn(sb, generator=g, device=self.dev, dtype=dtype)
                a[0][a[0] > 1.5] = -math.inf  # terms of weight 0
                got = jt.entropy_semiring_bmm(a, b)
                want = definition(a.double(), b.double())
                tol = 1e-5 if dtype == torch.float32 else 1e-11
                torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)
        a = torch.randn(2, 3, 4, 5, dtype=torch.float64, device=self.dev, requires_grad=True)
        b = torch.randn(2, 1, 5, 3, dtype=torch.float64, device=self.dev, requires_grad=True)
        self.assertTrue(torch.autograd.gradcheck(jt.entropy_semiring_bmm, (a, b)))

    @unittest.skipIf(torch_struct is None, "torch-struct is not installed")
    def test_torch_struct(self):
        import jitbmm.torch_struct as jts
        jt = self.jt
        E = torch_struct.EntropySemiring
        a = torch.randn(2, 4, 6, 8, dtype=torch.float64, device=self.dev, requires_grad=True)
        b = torch.randn(2, 4, 8, 3, dtype=torch.float64, device=self.dev, requires_grad=True)
        with torch.no_grad():
            a[0, :, :, 0] = -1e5  # torch-struct's zero
        want = E.matmul(a, b)
        want_grads = torch.autograd.grad(want.sum(), (a, b))
        got = jt.entropy_semiring_bmm(a, b)
        torch.testing.assert_close(got, want)
        for g_got, g_want in zip(torch.autograd.grad(got.sum(), (a, b)), want_grads):
            torch.testing.assert_close(g_got, g_want)
        # Whole structures: SemiMarkovCRF's and LinearChainCRF's entropies (the latter's products, without chains=True).
        pot = torch.randn(3, 12, 4, 5, 5, dtype=torch.float64, device=self.dev, requires_grad=True)
        crf_pot = torch.randn(3, 9, 6, 6, dtype=torch.float64, device=self.dev, requires_grad=True)
        lengths = torch.tensor([13, 9, 6], device=self.dev)
        native = (torch_struct.SemiMarkovCRF(pot, lengths).entropy, torch_struct.LinearChainCRF(crf_pot).entropy)
        native_grads = torch.autograd.grad(sum(x.sum() for x in native), (pot, crf_pot))
        with jts.patched():
            self.assertIn("matmul", E.__dict__)
            routed = (torch_struct.SemiMarkovCRF(pot, lengths).entropy, torch_struct.LinearChainCRF(crf_pot).entropy)
            routed_grads = torch.autograd.grad(sum(x.sum() for x in routed), (pot, crf_pot))
        self.assertNotIn("matmul", E.__dict__)  # inherited again
        for x, y in zip(routed + routed_grads, native + native_grads):
            torch.testing.assert_close(x, y)

    def test_arguments(self):
        jt = self.jt
        a = torch.randn(2, 3, 4, device=self.dev)
        with self.assertRaisesRegex(ValueError, "b: its rows"):
            jt.entropy_semiring_bmm(a, torch.randn(2, 5, 2, device=self.dev))
        with self.assertRaisesRegex(ValueError, "a: expected \\[2"):
            jt.entropy_semiring_bmm(torch.randn(3, 3, 4, device=self.dev), torch.randn(2, 4, 2, device=self.dev))
        with self.assertRaisesRegex(ValueError, "float32 or float64"):
            jt.entropy_semiring_bmm(a.half(), a.half())
        with self.assertRaisesRegex(ValueError, "CPU"):
            jt.entropy_semiring_bmm(a.cpu(), a.cpu())
        empty = jt.entropy_semiring_bmm(torch.randn(2, 0, 3, 4, device=self.dev), torch.randn(2, 0, 4, 5,
                                                                                           device=self.dev))
        self.assertEqual(empty.shape, (2, 0, 3, 5))
        none = jt.entropy_semiring_bmm(torch.randn(2, 3, 0, device=self.dev), torch.randn(2, 0, 2, device=self.dev))
        self.assertTrue((none[0] == -math.inf).all() and (none[1] == 0).all())


class KMaxProductTest(GpuCase):
    def test_definition_and_gradient(self):
        jt = self.jt
        g = torch.Generator(device=self.dev).manual_seed(4)
        for k in (1, 3, 16):
            a = torch.randn(k, 2, 5, 7, generator=g, device=self.dev, dtype=torch.float64)
            b = torch.randn(k, 1, 7, 3, generator=g, device=self.dev, dtype=torch.float64)
            a[a > 1.8] = -math.inf
            got = jt.kmax_semiring_bmm(a, b)
            # Every candidate [..., M, N, K·k·k] sorted: the k largest, -inf past the finite ones.
            A = a.permute(1, 2, 3, 0)[:, :, None, :, :, None]  # [B, M, 1, K, k, 1]
            Bt = b.permute(1, 3, 2, 0)[:, None, :, :, None, :]  # [B, 1, N, K, 1, k]
            cand = (A + Bt).reshape(2, 5, 3, -1)  # [B, M, N, K·k·k], in the order (kk, r1, r2)
            want = torch.sort(cand, dim=-1, descending=True)[0][..., :k].permute(3, 0, 1, 2)
            torch.testing.assert_close(got, want)
        a = torch.randn(4, 2, 3, 5, dtype=torch.float64, device=self.dev, requires_grad=True)
        b = torch.randn(4, 2, 5, 2, dtype=torch.float64, device=self.dev, requires_grad=True)
        self.assertTrue(torch.autograd.gradcheck(jt.kmax_semiring_bmm, (a, b)))
        # K = 0: every output -inf, and a backward with nothing to send its gradient to (no scatter into nothing).
        a = torch.randn(3, 2, 4, 0, device=self.dev, requires_grad=True)
        b = torch.randn(3, 2, 0, 5, device=self.dev, requires_grad=True)
        out = jt.kmax_semiring_bmm(a, b)
        self.assertTrue(torch.all(out == -math.inf))
        out.sum().backward()
        self.assertEqual((a.grad.shape, b.grad.shape), (a.shape, b.shape))
        torch.cuda.synchronize()  # a device-side assert would show here

    @unittest.skipIf(torch_struct is None, "torch-struct is not installed")
    def test_torch_struct(self):
        import jitbmm.torch_struct as jts
        jt = self.jt
        KMax = torch_struct.KMaxSemiring(4)
        a = torch.randn(4, 3, 6, 8, dtype=torch.float64, device=self.dev)
        b = torch.randn(4, 3, 8, 5, dtype=torch.float64, device=self.dev)
        torch.testing.assert_close(jt.kmax_semiring_bmm(a, b), KMax.matmul(a, b))
        pot = torch.randn(3, 12, 4, 5, 5, dtype=torch.float64, device=self.dev)
        lengths = torch.tensor([13, 9, 6], device=self.dev)
        native = torch_struct.SemiMarkovCRF(pot, lengths).kmax(4)
        with jts.patched():
            self.assertIn("matmul", torch_struct.KMaxSemiring(4).__dict__)
            routed = torch_struct.SemiMarkovCRF(pot, lengths).kmax(4)
        self.assertNotIn("matmul", torch_struct.KMaxSemiring(4).__dict__)
        torch.testing.assert_close(routed, native)
        with self.assertRaisesRegex(ValueError, "k, 1 to 16"):
            jt.kmax_semiring_bmm(torch.randn(17, 2, 2, device=self.dev), torch.randn(17, 2, 2, device=self.dev))

if __name__ == "__main__":
    sys.exit(gpu_main())
