"""jitbmm.torch.chain_kbest on the GPU machine: the k best paths of small chains against every path enumerated in
float64 (scores, and paths in the tie order: states read from the last position back, smaller first), the first
against chain_viterbi, fewer paths than k, ragged lengths, half inputs, the scores' gradient (each path's edge
indicator, by gradcheck), torch-struct's kmax and topk routed by patch(chains=True) against its own, and bad
arguments. hmm_kbest, the HMM form's, against chain_kbest on the formed potentials, hmm_viterbi, its gradient (the
paths' states and moves, by gradcheck), strides, half tables and its registered operator.

Run as a program (the python_torch_kbest CTest entry): it exits 77 ("skipped") where torch or a CUDA GPU is missing,
and fails if any test is skipped where both exist."""

import itertools
import math
import sys
import unittest

import package_under_test  # noqa: E402

package_under_test.import_path()

from torch_cases import GpuCase, formed, gpu_main, torch  # noqa: E402

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


class HmmKBestTest(GpuCase):
    def tables(self, g, B, T, C, batched, integers):
        """Float64 tables, integers 0 to 2 (which tie everywhere) or normal, a tenth of them -inf."""
        def make(*shape):
            x = torch.randint(0, 3, shape, generator=g).double() if integers else \
                torch.randn(*shape, generator=g, dtype=torch.float64)
            x[torch.rand(*shape, generator=g) < 0.1] = -math.inf  # a few states and moves gone
            return x.to(self.dev)
        return make(B, T, C), make(*((B, C, C) if batched else (C, C))), make(*((B, C) if batched else (C,)))

    def test_the_crf_forms_paths_on_formed_potentials(self):
        """At lengths of 2 or more, the HMM form's k best are the CRF form's on the formed potentials (the same
        scores, exactly where the tables are integers, and the same paths in the same tie order); a length-1
        sequence's are its best states by initial + emissions[:, 0], ties to the smaller."""
        jt = self.jt
        g = torch.Generator().manual_seed(11)
        for (B, T, C), batched, integers, k in (((4, 6, 3), False, True, 4), ((3, 9, 5), True, True, 16),
                                                ((5, 7, 20), False, False, 3), ((2, 12, 70), True, False, 5),
                                                ((3, 4, 130), False, True, 2), ((2, 1, 6), True, True, 8)):
            e, t, i = self.tables(g, B, T, C, batched, integers)
            lengths = torch.randint(2 if T > 1 else 1, T + 1, (B,), generator=g).to(self.dev)
            scores, paths = jt.hmm_kbest(e, t, i, k, lengths)
            self.assertEqual((scores.shape, paths.shape), ((k, B), (k, B, T)))
            if T > 1:
                want_scores, want_paths = jt.chain_kbest(formed(e, t, i), k, lengths)
                self.assertTrue(torch.equal(paths, want_paths), (B, T, C, batched, k))
                if integers:
                    self.assertTrue(torch.equal(scores, want_scores))
                else:
                    torch.testing.assert_close(scores, want_scores, rtol=1e-12, atol=1e-12)
            else:  # one position: the best states
                first = i.expand(B, C) + e[:, 0]
                for b in range(B):
                    order = sorted((x for x in range(C) if first[b, x] != -math.inf),
                                   key=lambda x: (-first[b, x].item(), x))[:k]
                    self.assertEqual(paths[:len(order), b, 0].tolist(), order)
                    self.assertTrue((paths[len(order):, b] == -1).all())
                    self.assertTrue((scores[len(order):, b] == -math.inf).all())
            best, path = jt.hmm_viterbi(e, t, i, lengths)
            has = best != -math.inf
            if integers:
                self.assertTrue(torch.equal(scores[0][has], best[has]))
            else:  # Viterbi sums with shifts of its own: rounding apart
                torch.testing.assert_close(scores[0][has], best[has], rtol=1e-12, atol=1e-12)
            self.assertTrue(torch.equal(paths[0][has], path[has]))

    def test_gradient_strides_half_and_operator(self):
        jt = self.jt
        g = torch.Generator().manual_seed(12)
        # The gradient of score i: path i's states, moves and first state (gradcheck, tables shared and per sequence).
        for batched in (False, True):
            tables = [x.clone().requires_grad_(True) for x in self.tables(g, 3, 5, 4, batched, False)]
            with torch.no_grad():
                for x in tables:
                    x.nan_to_num_(neginf=-3.0)  # finite differences need every path finite
            lengths = torch.tensor([5, 1, 3], device=self.dev)
            self.assertTrue(torch.autograd.gradcheck(lambda *x: jt.hmm_kbest(*x, 3, lengths)[0], tables))
        # Any strides: a transposed [from, to] table and broadcast tables read in place.
        e = torch.randn(4, 8, 6, device=self.dev)
        frm_to = torch.randn(6, 6, device=self.dev)
        init = torch.zeros((), device=self.dev).expand(6)
        got = jt.hmm_kbest(e, frm_to.t(), init, 4)
        want = jt.hmm_kbest(e, frm_to.t().contiguous(), init.contiguous(), 4)
        self.assertTrue(torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]))
        for dtype in (torch.float16, torch.bfloat16):
            half = [x.to(dtype) for x in (e, frm_to.t(), init)]
            s, p = jt.hmm_kbest(*half, 4)
            s32, p32 = jt.hmm_kbest(*(x.float() for x in half), 4)
            self.assertEqual(s.dtype, torch.float32)
            self.assertTrue(torch.equal(s, s32) and torch.equal(p, p32))
        # The registered operator, and its autograd against the eager path's.
        from jitbmm import _torch_kbest
        tables = [x.detach().requires_grad_(True) for x in self.tables(g, 3, 6, 4, True, False)]
        lengths = torch.tensor([6, 2, 4], device=self.dev)
        torch.library.opcheck(torch.ops.jitbmm.hmm_kbest.default, (*tables, lengths, 3))
        r = torch.randn(3, 3, dtype=torch.float64, device=self.dev)
        scores, paths = torch.ops.jitbmm.hmm_kbest(*tables, lengths, 3)
        want = torch.autograd.grad((scores.nan_to_num(neginf=0) * r).sum(), tables, allow_unused=True)
        eager, eager_paths = _torch_kbest._kbest_hmm_op(*tables, lengths, 3)
        self.assertTrue(torch.equal(eager, scores) and torch.equal(eager_paths, paths))
        got = torch.autograd.grad((eager.nan_to_num(neginf=0) * r).sum(), tables, allow_unused=True)
        for a, b in zip(got, want):  # a move taken twice is counted by CUDA's scatter_add_, in no fixed order
            torch.testing.assert_close(a, b, rtol=1e-14, atol=1e-14)

    def test_arguments(self):
        jt = self.jt
        e, t, i = (torch.randn(*shape, device=self.dev) for shape in ((2, 3, 4), (4, 4), (4,)))
        for k in (0, 17, 2.0, True):
            with self.assertRaisesRegex(ValueError, "k:"):
                jt.hmm_kbest(e, t, i, k)
        with self.assertRaisesRegex(ValueError, "transitions"):
            jt.hmm_kbest(e, t[:3], i, 2)
        scores, paths = jt.hmm_kbest(e[:0], t, i, 3)
        self.assertEqual((scores.shape, paths.shape), ((3, 0), (3, 0, 3)))
        bad = jt.hmm_kbest(e, t, i, 2, torch.tensor([0, 3], device=self.dev))
        self.assertTrue(torch.isnan(bad[0][:, 0]).all() and (bad[1][:, 0] == -1).all())
        self.assertFalse(torch.isnan(bad[0][:, 1]).any())


if __name__ == "__main__":
    sys.exit(gpu_main())
