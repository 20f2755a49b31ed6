"""The torch-struct recipe (jitbmm.torch_struct.patch) on the GPU machine: LinearChainCRF partition, marginals and
argmax with jitbmm against torch-struct's own results, and a loss on marginals.

Run as a program (the python_torch_struct CTest entry): exits 77 ("skipped") where torch, a CUDA GPU or
torch-struct is missing, saying which; fails if any test is skipped where all three exist."""

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
except Exception:  # ImportError, or an incompatibility with this torch
    torch_struct = None


class TorchStructTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import jitbmm
        import jitbmm.torch_struct as jts
        cls.jts = jts
        jitbmm.set_tune_policy("never")
        cls.dev = torch.device("cuda")

    def potentials(self, batch, n, c, dtype=None):
        torch.manual_seed(batch * 1000 + n * 10 + c)
        return torch.randn(batch, n - 1, c, c, dtype=dtype or torch.float64, device=self.dev)

    def test_patch_routes_and_unpatch_restores(self):
        original = torch_struct.LogSemiring.__dict__["matmul"]
        with self.jts.patched():
            self.assertIsNot(torch_struct.LogSemiring.__dict__["matmul"], original)
            a = torch.randn(2, 3, 4, device=self.dev)
            b = torch.randn(2, 4, 5, device=self.dev)
            torch.testing.assert_close(torch_struct.LogSemiring.matmul(a, b),
                                       torch.logsumexp(a.unsqueeze(-1) + b.unsqueeze(-3), -2))
            cpu = torch_struct.LogSemiring.matmul(a.cpu(), b.cpu())  # CPU: torch-struct's own
            torch.testing.assert_close(cpu, torch.logsumexp(a.cpu().unsqueeze(-1) + b.cpu().unsqueeze(-3), -2))
            std = torch_struct.StdSemiring.__dict__["matmul"].__func__
            self.assertEqual(std.__module__, "torch_struct.semirings.semirings")  # opt-in only
        self.assertIs(torch_struct.LogSemiring.__dict__["matmul"], original)
        # patch() after patch(std=True) sets the routes anew: StdSemiring is torch-struct's own again.
        std = torch_struct.StdSemiring.__dict__["matmul"]
        try:
            self.jts.patch(std=True)
            self.assertIsNot(torch_struct.StdSemiring.__dict__["matmul"], std)
            self.jts.patch()
            self.assertIs(torch_struct.StdSemiring.__dict__["matmul"], std)
        finally:
            self.jts.unpatch()

    def test_patched_restores_the_routes_before_it(self):
        """Leaving patched() leaves the routes as they were before the block: an earlier patch()'s, or none."""
        log, crf = torch_struct.LogSemiring.__dict__["matmul"], torch_struct.LinearChainCRF
        try:
            self.jts.patch(chains=True)
            routed = torch_struct.LogSemiring.__dict__["matmul"]
            with self.jts.patched():
                self.assertNotIn("entropy", crf.__dict__)  # the block's own routes: no chains
            self.assertIn("entropy", crf.__dict__)
            self.assertIn("entropy", torch_struct.HMM.__dict__)
            self.assertIsNot(torch_struct.LogSemiring.__dict__["matmul"], log)
            with self.jts.patched(std=True, chains=True):
                pass
            self.assertIsNot(torch_struct.LogSemiring.__dict__["matmul"], routed)  # set anew, as patch() does
            self.assertNotIn("StdSemiring", self.jts._originals)
            self.assertIn("entropy", crf.__dict__)
        finally:
            self.jts.unpatch()
        self.assertIs(torch_struct.LogSemiring.__dict__["matmul"], log)
        self.assertNotIn("entropy", crf.__dict__)
        self.assertNotIn("entropy", torch_struct.HMM.__dict__)

    def test_hmm_takes_the_chain_routes(self):
        """torch_struct.HMM forms the potentials of a chain from its tables: its distribution properties take the
        chain routes (one of them the fused kernels', not torch-struct's scan) and agree with torch-struct's own,
        a LinearChainCRF of another shape's divergence from it included."""
        from jitbmm import _torch_divergence
        torch.manual_seed(5)
        C, V, B, N = 5, 7, 3, 9
        transition = torch.randn(C, C, dtype=torch.float64, device=self.dev).log_softmax(0)
        emission = torch.randn(V, C, dtype=torch.float64, device=self.dev).log_softmax(0)
        init = torch.randn(C, dtype=torch.float64, device=self.dev).log_softmax(0)
        observations = torch.randint(0, V, (B, N), device=self.dev)
        lengths = torch.tensor([N, 4, 6], device=self.dev)

        def results():
            hmm = torch_struct.HMM(transition, emission, init, observations, lengths)
            other = torch_struct.LinearChainCRF(hmm.log_potentials.detach() * 0.5, lengths)
            return (hmm.entropy, hmm.kl(other), other.cross_entropy(hmm), hmm.kmax(3), hmm.count,
                    hmm.log_prob(hmm.argmax.detach()))

        want = results()
        _torch_divergence._plans.clear()
        with self.jts.patched(chains=True):
            got = results()
            self.assertTrue(_torch_divergence._plans, "the entropy did not reach the chain expectations")
        for name, g, w in zip(("entropy", "kl", "cross_entropy", "kmax", "count", "log_prob"), got, want):
            with self.subTest(name):
                torch.testing.assert_close(g, w, rtol=1e-8, atol=1e-8)

    def test_an_unsigned_length_of_0_gives_way_to_torch_struct(self):
        """torch-struct's lengths - 1 wraps around in uint8, so a 0 reads the whole chain: its own computation takes
        such lengths (the kernels would read one position)."""
        pot = self.potentials(3, 5, 4)
        lengths = torch.tensor([5, 0, 1], dtype=torch.uint8, device=self.dev)
        want = torch_struct.LinearChainCRF(pot, lengths=lengths).partition
        with self.jts.patched(chains=True):
            got = torch_struct.LinearChainCRF(pot, lengths=lengths).partition
            ones = torch.tensor([5, 1, 2], dtype=torch.uint8, device=self.dev)
            torch.testing.assert_close(torch_struct.LinearChainCRF(pot, lengths=ones).partition,
                                       self.jts._jt.chain_log_partition(pot, ones.long()))
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)

    def test_routed_properties_touch_what_torch_struct_touches(self):
        # argmax is a constant, as torch-struct's (no second-order graph for a loss on it); count leaves the
        # potentials as they were; kl and cross_entropy make the other chain's potentials require grad, as
        # torch-struct's own do, so that a backward reaches them.
        pot = self.potentials(3, 9, 5)
        for routed in (False, True):
            with self.subTest(routed=routed):
                def results():
                    p = pot.clone().requires_grad_(True)
                    argmax = torch_struct.LinearChainCRF(p).argmax
                    loss = (argmax * p).sum()
                    loss.backward()
                    fresh = pot.clone()
                    torch_struct.LinearChainCRF(fresh).count
                    q, r = pot.clone(), pot.clone() * 2
                    torch_struct.LinearChainCRF(q).kl(torch_struct.LinearChainCRF(r)).sum().backward()
                    return argmax.requires_grad, p.grad - argmax.detach(), fresh.requires_grad, r.grad
                if routed:
                    with self.jts.patched(chains=True):
                        got = results()
                else:
                    got = results()
                self.assertFalse(got[0])
                torch.testing.assert_close(got[1], torch.zeros_like(pot))  # the loss's gradient: the path itself
                self.assertFalse(got[2])
                self.assertIsNotNone(got[3])

    def run_both(self, fn):
        want = fn()
        with self.jts.patched(std=True):
            got = fn()
        return got, want

    def test_linear_chain_crf_partition_marginals_argmax(self):
        for batch, n, c in ((4, 9, 5), (3, 16, 16), (2, 33, 32)):
            for ragged in (False, True):
                with self.subTest(batch=batch, n=n, c=c, ragged=ragged):
                    pot = self.potentials(batch, n, c)
                    lengths = torch.tensor([n - (i % 3 if ragged else 0) for i in range(batch)], device=self.dev)
                    lengths[0] = n

                    def results():
                        p = pot.clone().requires_grad_(True)
                        dist = torch_struct.LinearChainCRF(p, lengths=lengths)
                        return dist.partition.detach(), dist.marginals.detach(), dist.argmax.detach()

                    (z, marg, arg), (z_ts, marg_ts, arg_ts) = self.run_both(results)
                    torch.testing.assert_close(z, z_ts, rtol=1e-10, atol=1e-10)
                    torch.testing.assert_close(marg, marg_ts, rtol=1e-8, atol=1e-10)
                    torch.testing.assert_close(arg, arg_ts)  # random potentials: no ties

    def test_lengths_that_are_not_whole_numbers_give_way_to_torch_struct(self):
        # torch-struct's masks read 2.5 and NaN in a way of their own; a route that truncated them answered otherwise.
        pot = self.potentials(3, 9, 5)
        for lengths in ([9.0, 2.5, 4.0], [9.0, float("nan"), 4.0], [9.0, 3.0, 4.0]):
            with self.subTest(lengths=lengths):
                given = torch.tensor(lengths, dtype=torch.float64, device=self.dev)

                def results():
                    dist = torch_struct.LinearChainCRF(pot, lengths=given)
                    return dist.partition.detach(), dist.entropy.detach()

                z_ts, h_ts = results()
                with self.jts.patched(chains=True):
                    z, h = results()
                torch.testing.assert_close(z, z_ts, rtol=1e-10, atol=1e-10, equal_nan=True)
                torch.testing.assert_close(h, h_ts, rtol=1e-8, atol=1e-8, equal_nan=True)

    def test_float32_training_step_and_loss_on_marginals(self):
        pot = self.potentials(8, 20, 16, dtype=torch.float32)

        def step():
            p = pot.clone().requires_grad_(True)
            dist = torch_struct.LinearChainCRF(p)
            (dist.partition.sum() + (dist.marginals ** 2).sum()).backward()  # marginals: create_graph=True inside
            return dist.partition.detach(), p.grad

        (z, g), (z_ts, g_ts) = self.run_both(step)
        torch.testing.assert_close(z, z_ts, rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(g, g_ts, rtol=1e-4, atol=1e-5)


def main():
    for missing, why in ((torch is None, "torch is not installed here"),
                         (torch is not None and not torch.cuda.is_available(), "torch sees no CUDA GPU here"),
                         (torch_struct is None, "torch-struct is not installed (pip install torch-struct)")):
        if missing:
            print(f"SKIPPED: {why}")
            return 77
    result = unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[1:], exit=False).result
    if result.skipped or result.testsRun == 0:
        print(f"FAILED: {len(result.skipped)} skipped, {result.testsRun} run")
        return 1
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
