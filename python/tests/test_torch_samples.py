"""jitbmm.torch.chain_sample on the GPU machine: each step's edge frequencies of many samples against the exact edge
marginals (the gradient of chain_log_partition) by Pearson's χ², with the power to reject a nearby temperature; the
same generator state the same paths; -1 past lengths and where no path exists; torch-struct's sample routed by
patch(chains=True) as edge indicators of its shape; bad arguments. hmm_sample, the HMM form's, against the edge
marginals of the formed potentials and, at length 1, the first state's distribution.

Run as a program (the python_torch_samples CTest entry): it exits 77 ("skipped") where torch or a CUDA GPU is
missing, and fails if any test is skipped where both exist."""

import math
import sys
import unittest

import package_under_test  # noqa: E402

package_under_test.import_path()

from torch_cases import GpuCase, formed, gpu_main, torch  # noqa: E402

if torch is not None:
    from jitbmm._torch_samples import edge_indicators

try:
    import torch_struct
except Exception:
    torch_struct = None


def chi2_ok(counts, probs, z=5.0):
    """Pearson's χ² of counts against probs, categories pooled to expect at least 5 (tests/samples_fit.hpp's test)."""
    n = counts.sum().item()
    if (counts[probs == 0] > 0).any():
        return False
    order = torch.argsort(probs)
    pools, expected, drawn = [], 0.0, 0.0
    for i in order.tolist():
        if probs[i] <= 0:
            continue
        expected += n * probs[i].item()
        drawn += counts[i].item()
        if expected >= 5:
            pools.append((expected, drawn))
            expected, drawn = 0.0, 0.0
    if expected > 0:
        if pools:
            e, d = pools.pop()
            pools.append((e + expected, d + drawn))
        else:
            pools.append((expected, drawn))
    k = len(pools) - 1
    if k <= 0:
        return True
    chi2 = sum((d - e) ** 2 / e for e, d in pools)
    v = 2.0 / (9.0 * k)
    return ((chi2 / k) ** (1 / 3) - (1 - v)) / math.sqrt(v) <= z


class SampleTest(GpuCase):
    def test_edges_fit_the_marginals(self):
        jt = self.jt
        g = torch.Generator(device=self.dev).manual_seed(3)
        for dtype, (B, T, C), n in ((torch.float32, (3, 12, 7), 40000), (torch.float64, (2, 6, 30), 100000)):
            pot = (1.5 * torch.randn(B, T - 1, C, C, generator=g, device=self.dev)).to(dtype)
            lengths = torch.tensor([T] + [max(1, T - 3 * i) for i in range(1, B)], device=self.dev)
            p = pot.double().requires_grad_(True)
            (mu,) = torch.autograd.grad(jt.chain_log_partition(p, lengths).sum(), p)
            hot = (1.5 * pot.double()).requires_grad_(True)
            (mu_hot,) = torch.autograd.grad(jt.chain_log_partition(hot, lengths).sum(), hot)
            paths = jt.chain_sample(pot, n, lengths, generator=torch.Generator().manual_seed(1))
            self.assertEqual(paths.shape, (n, B, T))
            events = edge_indicators(paths, C, torch.float64).sum(0)  # [B, T - 1, C, C]
            fitted = rejected = 0
            for b in range(B):
                for t in range(int(lengths[b]) - 1):
                    counts = events[b, t].flatten()
                    self.assertTrue(chi2_ok(counts, mu[b, t].flatten()), (dtype, b, t))
                    fitted += 1
                    rejected += not chi2_ok(counts, mu_hot[b, t].flatten())
                L = int(lengths[b])
                self.assertTrue((paths[:, b, L:] == -1).all())
                self.assertTrue(((paths[:, b, :L] >= 0) & (paths[:, b, :L] < C)).all())
            self.assertGreaterEqual(rejected, fitted // 2)

    def test_repeats_and_no_path(self):
        jt = self.jt
        pot = torch.randn(3, 5, 4, 4, device=self.dev)
        pot[1] = -math.inf  # no path
        lengths = torch.tensor([6, 6, 9], device=self.dev)  # the last outside [1, T]
        torch.manual_seed(7)
        first = jt.chain_sample(pot, 50, lengths)
        torch.manual_seed(7)
        again = jt.chain_sample(pot, 50, lengths)
        self.assertTrue(torch.equal(first, again))
        self.assertFalse(torch.equal(first, jt.chain_sample(pot, 50, lengths)))
        self.assertTrue((first[:, 1:] == -1).all())
        self.assertEqual(jt.chain_sample(pot, 0).shape, (0, 3, 6))
        self.assertEqual(jt.chain_sample(pot[:0], 4).shape, (4, 0, 6))
        with self.assertRaisesRegex(ValueError, "n:"):
            jt.chain_sample(pot, -1)
        # The registered operator (what torch.compile traces) draws what the eager path draws from a seed.
        from jitbmm import _torch_samples
        torch.library.opcheck(torch.ops.jitbmm.chain_sample.default, (pot, lengths, 7, 1234))
        self.assertTrue(torch.equal(torch.ops.jitbmm.chain_sample(pot, lengths, 7, 1234),
                                    _torch_samples._sample_op(pot, lengths, 7, 1234)))

    @unittest.skipIf(torch_struct is None, "torch-struct is not installed")
    def test_torch_struct_sample_routed(self):
        import jitbmm.torch_struct as jts
        pot = torch.randn(2, 7, 5, 5, device=self.dev)
        with jts.patched(chains=True):
            s = torch_struct.LinearChainCRF(pot).sample((30,))
        self.assertEqual(s.shape, (30, 2, 7, 5, 5))
        self.assertTrue((s.sum((-1, -2)) == 1).all())  # one edge a step
        self.assertNotIn("sample", torch_struct.LinearChainCRF.__dict__)


class HmmSampleTest(GpuCase):
    def test_edges_fit_the_marginals(self):
        """hmm_sample's paths: each step's moves as often as the edge marginals of the formed potentials say, a
        length-1 sequence's state as often as softmax(initial + emissions[:, 0]) says, in shared and per-sequence
        tables and at any strides."""
        jt = self.jt
        g = torch.Generator(device=self.dev).manual_seed(4)
        for dtype, (B, T, C), batched, n in ((torch.float32, (3, 10, 6), False, 40000),
                                             (torch.float64, (2, 5, 33), True, 100000)):
            e = (1.5 * torch.randn(B, T, C, generator=g, device=self.dev)).to(dtype)
            t = (1.5 * torch.randn(*((B, C, C) if batched else (C, C)), generator=g, device=self.dev)).to(dtype)
            i = torch.randn(*((B, C) if batched else (C,)), generator=g, device=self.dev).to(dtype)
            t = t.transpose(-1, -2).contiguous().transpose(-1, -2)  # column-major: read at its strides
            lengths = torch.tensor([T] + [max(1, T - 4 * j) for j in range(1, B)], device=self.dev)
            lengths[-1] = 1
            paths = jt.hmm_sample(e, t, i, n, lengths, generator=torch.Generator().manual_seed(2))
            self.assertEqual((paths.shape, paths.dtype), ((n, B, T), torch.int64))
            pot = formed(e.double(), t.double(), i.double()).requires_grad_(True)
            (mu,) = torch.autograd.grad(jt.chain_log_partition(pot, lengths.clamp(min=2)).sum(), pot)
            events = edge_indicators(paths, C, torch.float64).sum(0)  # [B, T - 1, C, C]
            for b in range(B):
                L = int(lengths[b])
                self.assertTrue((paths[:, b, L:] == -1).all())
                self.assertTrue(((paths[:, b, :L] >= 0) & (paths[:, b, :L] < C)).all())
                for s in range(L - 1):
                    self.assertTrue(chi2_ok(events[b, s].flatten(), mu[b, s].flatten()), (dtype, b, s))
                if L == 1:
                    first = (i.expand(B, C)[b] + e[b, 0]).double().softmax(0)
                    counts = torch.bincount(paths[:, b, 0], minlength=C).double()
                    self.assertTrue(chi2_ok(counts, first), (dtype, b))

    def test_repeats_no_path_and_operator(self):
        jt = self.jt
        e, t, i = (torch.randn(*shape, device=self.dev) for shape in ((3, 6, 4), (4, 4), (4,)))
        e[1, 2] = -math.inf  # no path
        lengths = torch.tensor([6, 6, 9], device=self.dev)  # the last outside [1, T]
        torch.manual_seed(7)
        first = jt.hmm_sample(e, t, i, 50, lengths)
        torch.manual_seed(7)
        self.assertTrue(torch.equal(first, jt.hmm_sample(e, t, i, 50, lengths)))
        self.assertFalse(torch.equal(first, jt.hmm_sample(e, t, i, 50, lengths)))
        self.assertTrue((first[:, 1:] == -1).all())
        self.assertTrue((first[:, 0] >= 0).all())
        self.assertEqual(jt.hmm_sample(e, t, i, 0).shape, (0, 3, 6))
        self.assertEqual(jt.hmm_sample(e[:0], t, i, 4).shape, (4, 0, 6))
        with self.assertRaisesRegex(ValueError, "n:"):
            jt.hmm_sample(e, t, i, -1)
        with self.assertRaisesRegex(ValueError, "initial"):
            jt.hmm_sample(e, t, i[:3], 2)
        from jitbmm import _torch_samples
        torch.library.opcheck(torch.ops.jitbmm.hmm_sample.default, (e, t, i, lengths, 7, 1234))
        self.assertTrue(torch.equal(torch.ops.jitbmm.hmm_sample(e, t, i, lengths, 7, 1234),
                                    _torch_samples._sample_hmm_op(e, t, i, lengths, 7, 1234)))


if __name__ == "__main__":
    sys.exit(gpu_main())
