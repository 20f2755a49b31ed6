"""jitbmm.torch's chain entropy, cross-entropy and KL (chain_entropy, chain_cross_entropy, chain_kl) on the GPU
machine: values and both chains' gradients against a float64 torch reference written here (the log-partition by the
forward algorithm, its marginals by autograd, each quantity from them), gradcheck in float64, and torch-struct's
LinearChainCRF entropy, cross_entropy and kl where it is installed; ragged lengths, half inputs, one position, no
sequence, bad arguments; torch.compile.

Run as a program (the python_torch_divergence CTest entry): it exits 77 ("skipped") where torch or a CUDA GPU is
missing, and fails if any test is skipped where both exist (torch-struct included: scripts/gpu-torch installs it)."""

import math
import sys
import unittest

import package_under_test  # noqa: E402

package_under_test.import_path()

from torch_cases import HALF_ROUNDING, GpuCase, gpu_main, torch  # noqa: E402
from test_torch_chain import reference_scores  # noqa: E402

try:
    import torch_struct
except Exception:  # ImportError, or an incompatibility with this torch
    torch_struct = None

SHAPES = ((3, 7, 5), (5, 33, 33), (2, 64, 130), (4, 2, 1))  # (B, T, C); T = 1 in test_edges_of_the_domain


def reference(p, q, lengths):
    """(entropy, cross-entropy, KL) [B] of float64 chains p and q (finite potentials), differentiable: log Z by the
    forward algorithm, p's edge marginals as its gradient (kept in the graph), each quantity from them."""
    log_zp, log_zq = reference_scores(p, lengths, "log"), reference_scores(q, lengths, "log")
    (mu,) = torch.autograd.grad(log_zp.sum(), p, create_graph=True)
    expect = lambda f: (mu * f).flatten(1).sum(1)  # noqa: E731
    return log_zp - expect(p), log_zq - expect(q), expect(p - q) - log_zp + log_zq


class DivergenceTest(GpuCase):
    def pair(self, B, T, C, dtype=None, scale=1.5):
        dtype = dtype or torch.float32
        g = torch.Generator(device=self.dev).manual_seed(B * 10007 + T * 101 + C)
        make = lambda: (scale * torch.randn(B, T - 1, C, C, generator=g, device=self.dev)).to(dtype)  # noqa: E731
        lengths = torch.randint(1, T + 1, (B,), generator=g, device=self.dev)
        return make(), make(), lengths

    def check(self, p, q, lengths, rtol, grad_rtol):
        jt = self.jt
        p64, q64 = (t.detach().double().requires_grad_(True) for t in (p, q))
        want = reference(p64, q64, lengths)
        ps, qs = p.detach().clone().requires_grad_(True), q.detach().clone().requires_grad_(True)
        got = (jt.chain_entropy(ps, lengths), jt.chain_cross_entropy(ps, qs, lengths), jt.chain_kl(ps, qs, lengths))
        for name, g, w in zip(("entropy", "cross-entropy", "KL"), got, want):
            with self.subTest(name):
                self.assertEqual(g.dtype, torch.float64 if p.dtype == torch.float64 else torch.float32)
                torch.testing.assert_close(g.double(), w.detach(), rtol=rtol, atol=rtol)
                r = torch.randn_like(w)
                gp_w, gq_w = torch.autograd.grad((w * r).sum(), (p64, q64), retain_graph=True, allow_unused=True)
                gq_w = torch.zeros_like(q64) if gq_w is None else gq_w
                gp, gq = torch.autograd.grad((g * r.to(g.dtype)).sum(), (ps, qs), allow_unused=True)
                gq = torch.zeros_like(qs) if gq is None else gq
                scale = max(1.0, gp_w.abs().max().item(), gq_w.abs().max().item())
                torch.testing.assert_close(gp.double(), gp_w, rtol=grad_rtol, atol=grad_rtol * scale)
                torch.testing.assert_close(gq.double(), gq_w, rtol=grad_rtol, atol=grad_rtol * scale)

    def test_against_float64(self):
        for B, T, C in SHAPES:
            with self.subTest(shape=(B, T, C)):
                p, q, lengths = self.pair(B, T, C)
                self.check(p, q, lengths, 2e-5, 1e-4)
                self.check(p, q, None, 2e-5, 1e-4)
                p, q, lengths = self.pair(B, T, C, torch.float64)
                self.check(p, q, lengths, 1e-10, 1e-9)

    def test_half_inputs(self):
        for dtype in (torch.float16, torch.bfloat16):
            p, q, lengths = self.pair(3, 9, 8, dtype)
            # KL's difference p - q is rounded to the half type once more; its gradient in the half type.
            self.check(p, q, lengths, 4 * HALF_ROUNDING[dtype], 8 * HALF_ROUNDING[dtype])

    def test_gradcheck(self):
        jt = self.jt
        p, q, lengths = self.pair(2, 5, 3, torch.float64)
        p.requires_grad_(True)
        q.requires_grad_(True)
        self.assertTrue(torch.autograd.gradcheck(lambda a: jt.chain_entropy(a, lengths), (p,)))
        self.assertTrue(torch.autograd.gradcheck(lambda a, b: jt.chain_cross_entropy(a, b, lengths), (p, q)))
        self.assertTrue(torch.autograd.gradcheck(lambda a, b: jt.chain_kl(a, b, lengths), (p, q)))
        # Second derivatives (a backward with create_graph=True: torch-struct's users take them, a gradient penalty
        # say), through the quantities in torch operations.
        self.assertTrue(torch.autograd.gradgradcheck(lambda a: jt.chain_entropy(a, lengths), (p,)))
        self.assertTrue(torch.autograd.gradgradcheck(lambda a, b: jt.chain_cross_entropy(a, b, lengths), (p, q)))
        self.assertTrue(torch.autograd.gradgradcheck(lambda a, b: jt.chain_kl(a, b, lengths), (p, q)))

    @unittest.skipIf(torch_struct is None, "torch-struct is not installed")
    def test_against_torch_struct(self):
        jt = self.jt
        for B, T, C in ((3, 8, 4), (2, 20, 9)):
            p, q, lengths = self.pair(B, T, C, torch.float64)
            lengths[0] = T  # torch-struct takes the longest length as its N
            dp = torch_struct.LinearChainCRF(p, lengths=lengths)
            dq = torch_struct.LinearChainCRF(q, lengths=lengths)
            torch.testing.assert_close(jt.chain_entropy(p, lengths), dp.entropy, rtol=1e-9, atol=1e-9)
            torch.testing.assert_close(jt.chain_cross_entropy(p, q, lengths), dp.cross_entropy(dq), rtol=1e-9,
                                       atol=1e-9)
            torch.testing.assert_close(jt.chain_kl(p, q, lengths), dp.kl(dq), rtol=1e-9, atol=1e-9)

    @unittest.skipIf(torch_struct is None, "torch-struct is not installed")
    def test_torch_struct_patched(self):
        """patch(chains=True) sends LinearChainCRF's entropy, cross_entropy and kl to jitbmm, with torch-struct's
        values and gradients; unpatched, torch-struct's own again."""
        import jitbmm.torch_struct as jts
        jt = self.jt
        p, q, lengths = self.pair(3, 9, 6, torch.float64)
        lengths[0] = 9
        crf = torch_struct.LinearChainCRF
        want = [crf(p, lengths).entropy, crf(p, lengths).cross_entropy(crf(q, lengths)),
                crf(p, lengths).kl(crf(q, lengths))]
        calls = []
        spies = {name: getattr(jt, name) for name in ("chain_entropy", "chain_cross_entropy", "chain_kl")}
        import jitbmm.torch_struct as module
        try:
            for name, fn in spies.items():
                setattr(module._jt, name, lambda *a, _fn=fn, _name=name: calls.append(_name) or _fn(*a))
            with jts.patched(chains=True):
                ps = p.clone().requires_grad_(True)
                got = [crf(ps, lengths).entropy, crf(ps, lengths).cross_entropy(crf(q, lengths)),
                       crf(ps, lengths).kl(crf(q, lengths))]
                (grad,) = torch.autograd.grad(sum(g.sum() for g in got), ps)
        finally:
            for name, fn in spies.items():
                setattr(module._jt, name, fn)
        self.assertEqual(calls, ["chain_entropy", "chain_cross_entropy", "chain_kl"])
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-9)
        pw = p.clone().requires_grad_(True)
        (want_grad,) = torch.autograd.grad(sum(x.sum() for x in (crf(pw, lengths).entropy,
                                                                 crf(pw, lengths).cross_entropy(crf(q, lengths)),
                                                                 crf(pw, lengths).kl(crf(q, lengths)))), pw)
        torch.testing.assert_close(grad, want_grad, rtol=1e-8, atol=1e-9)
        self.assertNotIn("entropy", crf.__dict__)  # unpatched: torch-struct's own again

    def test_edges_of_the_domain(self):
        jt = self.jt
        p, q, _ = self.pair(3, 1, 4)  # one position: no edge, C equally likely paths
        torch.testing.assert_close(jt.chain_entropy(p), torch.full((3,), math.log(4), device=self.dev))
        torch.testing.assert_close(jt.chain_kl(p, q), torch.zeros(3, device=self.dev))
        p, q, _ = self.pair(0, 5, 4)  # no sequence
        self.assertEqual(jt.chain_kl(p, q).shape, (0,))
        # q forbids an edge p allows: the cross-entropy and KL are +inf.
        p, q, _ = self.pair(2, 4, 3)
        q[:, :, 0, 1] = float("-inf")
        self.assertTrue(torch.isinf(jt.chain_cross_entropy(p, q)).all())
        self.assertTrue(torch.isinf(jt.chain_kl(p, q)).all())
        # Masked alike, both finite.
        p[:, :, 0, 1] = float("-inf")
        self.assertTrue(torch.isfinite(jt.chain_kl(p, q)).all())
        self.assertTrue(torch.isfinite(jt.chain_entropy(p)).all())
        # Non-contiguous views (the potentials, the lengths) are copied, not misread.
        p, q, lengths = self.pair(2, 6, 5)
        pt = p.transpose(2, 3).contiguous().transpose(2, 3)
        torch.testing.assert_close(jt.chain_entropy(pt, lengths), jt.chain_entropy(p, lengths))
        strided = torch.stack([lengths, lengths], 1)[:, 0]
        torch.testing.assert_close(jt.chain_kl(p, q, strided), jt.chain_kl(p, q, lengths))

    def test_bad_arguments_name_themselves(self):
        jt = self.jt
        p, q, lengths = self.pair(2, 5, 4)
        with self.assertRaisesRegex(ValueError, "other"):
            jt.chain_kl(p, q[:, :, :3, :3])
        with self.assertRaisesRegex(TypeError, "other"):
            jt.chain_cross_entropy(p, q.double())
        with self.assertRaisesRegex(ValueError, "potentials"):
            jt.chain_entropy(p[0])
        with self.assertRaisesRegex(Exception, "chain.C"):
            jt.chain_entropy(torch.zeros(1, 1, 1025, 1025, device=self.dev))

    def test_registered_operators(self):
        """The registered operators, which torch.compile and torch.export trace, pass opcheck, and their autograd
        gives what the eager path (the same implementations called directly) gives."""
        from jitbmm import _torch_divergence as d
        p, q, lengths = self.pair(3, 6, 5, torch.float64)
        r = torch.randn(3, dtype=torch.float64, device=self.dev)
        for kind, other in ((d.GIVEN, None), (d.CHAIN, q), (d.DIFFERENCE, q)):
            with self.subTest(kind=kind):
                a = p.clone().requires_grad_(True)
                b = None if other is None else other.clone().requires_grad_(True)
                leaves = [t for t in (a, b) if t is not None]
                torch.library.opcheck(torch.ops.jitbmm.chain_divergence.default, (a, b, lengths, kind, True))
                value, log_z, mean, saved = torch.ops.jitbmm.chain_divergence(a, b, lengths, kind, True)
                torch.library.opcheck(torch.ops.jitbmm.chain_divergence_backward.default,
                                      (a.detach(), None if b is None else b.detach(), lengths, kind, saved.detach(),
                                       log_z.detach(), mean.detach(), r, True, b is not None))
                want = torch.autograd.grad((value * r).sum(), leaves)
                eager = d._divergence(a, b, lengths, kind, True)[0]
                self.assertIsNotNone(eager.grad_fn)
                torch.testing.assert_close(eager, value, rtol=0, atol=0)
                for got, w in zip(torch.autograd.grad((eager * r).sum(), leaves), want):
                    torch.testing.assert_close(got, w, rtol=0, atol=0)

    def test_compile(self):
        jt = self.jt
        p, q, lengths = self.pair(2, 6, 5)
        fn = torch.compile(lambda a, b: jt.chain_kl(a, b, lengths) + jt.chain_entropy(a, lengths), fullgraph=True)
        torch.testing.assert_close(fn(p, q), jt.chain_kl(p, q, lengths) + jt.chain_entropy(p, lengths))


if __name__ == "__main__":
    sys.exit(gpu_main())
