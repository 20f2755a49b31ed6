"""jitbmm.torch.chain_log_count and chain_log_prob on the GPU machine: against enumerating every path of small chains
(masked, ragged, one position), the probabilities of all paths summing to 1, torch-struct's count and log_prob (and
the routes of patch(chains=True)) where it is installed, gradients, bad arguments.

Run as a program (the python_torch_counts CTest entry): it exits 77 ("skipped") where torch or a CUDA GPU is missing,
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


def every_path(pot, b, L):
    """(states, score) of every path of sequence b over its first L positions, float64 on the CPU."""
    C = pot.shape[-1]
    for states in itertools.product(range(C), repeat=L):
        score = sum(pot[b, t, states[t + 1], states[t]].item() for t in range(L - 1))
        yield states, score


def indicators(states, T, C):
    v = torch.zeros(T - 1, C, C, dtype=torch.float64)
    for t in range(len(states) - 1):
        v[t, states[t + 1], states[t]] = 1
    return v


class CountTest(GpuCase):
    def test_against_every_path(self):
        jt = self.jt
        g = torch.Generator().manual_seed(11)
        for C, T in ((1, 4), (2, 5), (3, 4), (3, 1)):
            pot = torch.randn(3, T - 1, C, C, generator=g, dtype=torch.float64)
            pot[torch.rand(pot.shape, generator=g) < 0.3] = -math.inf
            lengths = torch.tensor([T, max(1, T - 1), max(1, T - 2)])
            got_count = jt.chain_log_count(pot.cuda(), lengths.cuda()).cpu()
            for b in range(3):
                L = int(lengths[b])
                paths = list(every_path(pot, b, L))
                alive = sum(1 for _, s in paths if s != -math.inf)
                if not alive:
                    self.assertEqual(got_count[b].item(), -math.inf)
                    continue
                self.assertAlmostEqual(got_count[b].item(), math.log(alive), places=10)
                values = torch.stack([indicators(s, T, C) for s, _ in paths])[:, None].expand(-1, 3, -1, -1, -1)
                lp = jt.chain_log_prob(pot.cuda(), values.cuda(), lengths.cuda()).cpu()[:, b]
                for (states, score), x in zip(paths, lp):
                    if score == -math.inf:
                        self.assertEqual(x.item(), -math.inf)
                self.assertAlmostEqual(torch.logsumexp(lp, 0).item(), 0.0, places=10)  # the probabilities sum to 1

    def test_gradient_and_edges(self):
        jt = self.jt
        pot = torch.randn(2, 4, 3, 3, dtype=torch.float64, device=self.dev, requires_grad=True)
        value = torch.zeros(2, 4, 3, 3, dtype=torch.float64, device=self.dev)
        value[:, :, 0, 0] = 1
        self.assertTrue(torch.autograd.gradcheck(lambda p: jt.chain_log_prob(p, value), (pot,)))
        p = pot.detach().clone()
        p[0] = -math.inf
        self.assertTrue(math.isnan(jt.chain_log_prob(p, value)[0].item()))
        with self.assertRaisesRegex(ValueError, "value"):
            jt.chain_log_prob(p, value[:, :3])
        with self.assertRaisesRegex(TypeError, "value"):
            jt.chain_log_prob(p, [1.0])
        with self.assertRaisesRegex(TypeError, "^value: unsupported dtype"):
            jt.chain_log_prob(p, value.to(torch.complex64))

    def test_gradient_of_relaxed_events(self):
        """The gradient with respect to value (relaxed events, e.g. Gumbel-softmax paths, or straight-through one-hot
        ones) is the potential inside each length, where value is 0 too: 0 at a forbidden (-inf) edge of weight 0 and
        at steps past a length whatever they hold, never 0·inf = NaN."""
        jt = self.jt
        g = torch.Generator().manual_seed(3)
        pot = torch.randn(2, 4, 3, 3, generator=g, dtype=torch.float64)
        pot[0, 1, 2, 0] = -math.inf
        pot[1, 3] = math.inf  # past sequence 1's length
        value = torch.rand(5, 2, 4, 3, 3, generator=g, dtype=torch.float64)
        value[:, 0, 1, 2, 0] = 0
        lengths = torch.tensor([5, 4])
        value = value.to(self.dev).requires_grad_()
        jt.chain_log_prob(pot.to(self.dev), value, lengths.to(self.dev)).sum().backward()
        grad = value.grad.cpu()
        self.assertFalse(torch.isnan(grad).any().item())
        read = pot.clone()
        read[0, 1, 2, 0] = 0
        read[1, 3] = 0
        torch.testing.assert_close(grad, read.expand_as(grad), rtol=0, atol=0)
        hard = torch.zeros(2, 4, 3, 3, dtype=torch.float64, device=self.dev)
        hard[:, :, 1, 1] = 1  # a one-hot event: zeros at every other edge
        hard.requires_grad_()
        jt.chain_log_prob(pot.to(self.dev), hard, lengths.to(self.dev)).sum().backward()
        torch.testing.assert_close(hard.grad.cpu(), read, rtol=0, atol=0)

    @unittest.skipIf(torch_struct is None, "torch-struct is not installed")
    def test_torch_struct(self):
        import jitbmm.torch_struct as jts
        jt = self.jt
        pot = torch.randn(3, 6, 4, 4, dtype=torch.float64, device=self.dev)
        pot[:, :, 0, 1] = -math.inf
        lengths = torch.tensor([7, 5, 3], device=self.dev)
        crf = torch_struct.LinearChainCRF
        value = crf(pot, lengths).argmax
        # torch-struct's log_prob multiplies every potential by its indicator, so a -inf potential makes it NaN even
        # where the path does not take that edge; -1e4 for -inf gives it the same partition (e^-1e4 is 0 in double)
        # and the same score of a path that avoids those edges.
        want_count, want_lp = crf(pot, lengths).count, crf(pot.clamp(min=-1e4), lengths).log_prob(value)
        self.assertTrue(torch.isfinite(want_lp).all())
        torch.testing.assert_close(torch.exp(jt.chain_log_count(pot, lengths)), want_count, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(jt.chain_log_prob(pot, value, lengths), want_lp, rtol=1e-9, atol=1e-9)
        # torch-struct's own: a value read past each length (its to_event ignores lengths); a length of 0, which it
        # takes as one position; a float32 count beyond 24 bits, which its products hold exactly.
        finite = pot.clamp(min=-1e4)
        full = crf(finite).argmax
        short = torch.tensor([7, 0, 3], device=self.dev)
        native = (crf(finite, lengths).log_prob(full), crf(finite, short).partition, crf(finite, short).entropy)
        many = torch.randn(2, 29, 2, 2, device=self.dev)
        with jts.patched(chains=True):
            torch.testing.assert_close(crf(pot, lengths).count, want_count, rtol=1e-9, atol=1e-9)
            torch.testing.assert_close(crf(pot, lengths).log_prob(value), want_lp, rtol=1e-9, atol=1e-9)
            routed = (crf(finite, lengths).log_prob(full), crf(finite, short).partition, crf(finite, short).entropy)
            for name, got, want in zip(("log_prob past the lengths", "partition", "entropy"), routed, native):
                with self.subTest(name):
                    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)
            self.assertTrue(torch.equal(crf(many).count, torch.full((2,), 2.0 ** 30, device=self.dev)))
            for C, N in ((3, 4), (5, 6), (7, 10), (3, 33)):  # whole numbers in float64: exp(log 3) is not 3, and
                # 3**33 (beyond what the log keeps exact) is torch-struct's own sum
                every = torch.zeros(1, N - 1, C, C, dtype=torch.float64, device=self.dev)
                self.assertEqual(crf(every).count.item(), float(C ** N), (C, N))
        self.assertNotIn("count", crf.__dict__)


if __name__ == "__main__":
    sys.exit(gpu_main())
