"""jitbmm.torch.chain_kbest on the GPU machine: the k best paths of small chains against every path enumerated in
float64 (scores, and paths in the tie order: states read from the last position back, smaller first), the first
against chain_viterbi, fewer paths than k, ragged lengths, half inputs, the scores' gradient (each path's edge
indicator, by gradcheck), torch-struct's kmax and topk routed by patch(chains=True) against its own, and bad
arguments.

Run as a program (the python_torch_kbest CTest entry): it exits 77 ("skipped") where torch or a CUDA GPU is missing,
and fails if any test is skipped where both exist."""

import itertools
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


def every_path(pot, L):
    """[(score, states)] of every path of one sequence's first L positions (pot: nested lists [T - 1][C][C]), in the
    k-best order."""
    C = len(pot[0]) if pot else 0
    paths = []
    for states in itertools.product(range(C), repeat=L):
        score = sum(pot[t][states[t + 1]][states[t]] for t in range(L - 1))
        if score != -math.inf:
            paths.append((score, states))
    paths.sort(key=lambda x: (-x[0], tuple(reversed(x[1]))))
    return paths


class KBestTest(GpuCase):
    def test_against_every_path(self):
        jt = self.jt
        g = torch.Generator().manual_seed(5)
        for integers in (False, True):  # integers tie everywhere
            for k in (1, 4, 16):
                B, T, C = 4, 5, 3
                pot = torch.randint(0, 3, (B, T - 1, C, C), generator=g).double() if integers else \
                    torch.randn(B, T - 1, C, C, generator=g, dtype=torch.float64)
                pot[pot.abs() > (2.5 if integers else 1.6)] = -math.inf  # a few edges gone
                lengths = torch.tensor([5, 3, 1, 4])
                scores, paths = jt.chain_kbest(pot.to(self.dev), k, lengths.to(self.dev))
                self.assertEqual(scores.shape, (k, B))
                self.assertEqual(paths.shape, (k, B, T))
                self.assertEqual(paths.dtype, torch.int64)
                for b in range(B):
                    L = int(lengths[b])
                    want = every_path(pot[b].tolist(), L)
                    for i in range(k):
                        if i < len(want):
                            self.assertAlmostEqual(scores[i, b].item(), float(want[i][0]), places=12)
                            self.assertEqual(paths[i, b, :L].tolist(), list(want[i][1]), (integers, k, b, i))
                            self.assertTrue((paths[i, b, L:] == -1).all())
                        else:
                            self.assertEqual(scores[i, b].item(), -math.inf)
                            self.assertTrue((paths[i, b] == -1).all())

    def test_viterbi_half_and_gradient(self):
        jt = self.jt
        pot = torch.randn(6, 30, 20, 20, device=self.dev)
        lengths = torch.tensor([31, 2, 17, 1, 30, 25], device=self.dev)
        scores, paths = jt.chain_kbest(pot, 5, lengths)
        best, path = jt.chain_viterbi(pot, lengths)
        torch.testing.assert_close(scores[0], best)  # Viterbi sums with shifts of its own: rounding apart
        self.assertTrue(torch.equal(paths[0], path.long()))
        self.assertTrue((scores[:-1] >= scores[1:]).all())
        for dtype in (torch.float16, torch.bfloat16):
            half = pot.to(dtype)
            s, p = jt.chain_kbest(half, 5, lengths)
            self.assertEqual(s.dtype, torch.float32)
            s32, p32 = jt.chain_kbest(half.float(), 5, lengths)
            self.assertTrue(torch.equal(s, s32) and torch.equal(p, p32))
        # The gradient of score i is path i's edge indicator.
        small = torch.randn(2, 4, 3, 3, dtype=torch.float64, device=self.dev, requires_grad=True)
        self.assertTrue(torch.autograd.gradcheck(lambda x: jt.chain_kbest(x, 4)[0], (small,)))
        (grad,) = torch.autograd.grad(jt.chain_kbest(small, 4)[0][2].sum(), small)
        from jitbmm._torch_samples import edge_indicators
        self.assertTrue(torch.equal(grad, edge_indicators(jt.chain_kbest(small, 4)[1][2], 3, torch.float64)))
        none = torch.randn(0, 4, 3, 3, device=self.dev, requires_grad=True)  # no sequence: a gradient of no element
        jt.chain_kbest(none, 2)[0].sum().backward()
        self.assertEqual(none.grad.shape, none.shape)

    def test_registered_operator(self):
        """The registered operator, which torch.compile and torch.export trace, passes opcheck, and its autograd
        gives what the eager path (the same implementation called directly) gives."""
        from jitbmm import _torch_kbest
        pot = torch.randn(3, 5, 4, 4, dtype=torch.float64, device=self.dev, requires_grad=True)
        lengths = torch.tensor([6, 2, 4], device=self.dev)
        torch.library.opcheck(torch.ops.jitbmm.chain_kbest.default, (pot, lengths, 3))
        r = torch.randn(3, 3, dtype=torch.float64, device=self.dev)
        scores, paths = torch.ops.jitbmm.chain_kbest(pot, lengths, 3)
        (want,) = torch.autograd.grad((scores * r).sum(), pot)
        eager, eager_paths = _torch_kbest._kbest_op(pot, lengths, 3)
        self.assertTrue(torch.equal(eager, scores) and torch.equal(eager_paths, paths))
        (got,) = torch.autograd.grad((eager * r).sum(), pot)
        self.assertTrue(torch.equal(got, want))
        compiled = torch.compile(lambda x: self.jt.chain_kbest(x, 3, lengths)[0].sum(), fullgraph=True)
        (got,) = torch.autograd.grad(compiled(pot), pot)
        (want,) = torch.autograd.grad(self.jt.chain_kbest(pot, 3, lengths)[0].sum(), pot)
        torch.testing.assert_close(got, want)

    def test_arguments(self):
        jt = self.jt
        pot = torch.randn(2, 3, 4, 4, device=self.dev)
        for k in (0, 17, 2.0, True):
            with self.assertRaisesRegex(ValueError, "k:"):
                jt.chain_kbest(pot, k)
        with self.assertRaisesRegex(ValueError, "potentials"):
            jt.chain_kbest(pot[0], 2)
        scores, paths = jt.chain_kbest(pot[:0], 3)
        self.assertEqual((scores.shape, paths.shape), ((3, 0), (3, 0, 4)))
        bad = jt.chain_kbest(pot, 2, torch.tensor([0, 4], device=self.dev))
        self.assertTrue(torch.isnan(bad[0][:, 0]).all() and (bad[1][:, 0] == -1).all())
        self.assertFalse(torch.isnan(bad[0][:, 1]).any())

    @unittest.skipIf(torch_struct is None, "torch-struct is not installed")
    def test_torch_struct_routed(self):
        import jitbmm.torch_struct as jts
        crf = torch_struct.LinearChainCRF
        pot = torch.randn(3, 9, 6, 6, device=self.dev)
        lengths = torch.tensor([10, 7, 4], device=self.dev)
        want_kmax, want_topk = crf(pot, lengths).kmax(4), crf(pot, lengths).topk(4)
        with jts.patched(chains=True):
            got_kmax, got_topk = crf(pot, lengths).kmax(4), crf(pot, lengths).topk(4)
            self.assertIn("kmax", crf.__dict__)  # the route is the class's own attribute while patched
        torch.testing.assert_close(got_kmax, want_kmax, rtol=1e-5, atol=1e-5)
        self.assertEqual(got_topk.shape, want_topk.shape)
        torch.testing.assert_close(got_topk, want_topk.to(got_topk.dtype))
        self.assertNotIn("kmax", crf.__dict__)
        self.assertNotIn("topk", crf.__dict__)


if __name__ == "__main__":
    sys.exit(gpu_main())
