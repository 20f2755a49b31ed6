"""jitbmm.torch's chain entropy, cross-entropy and KL (chain_entropy, chain_cross_entropy, chain_kl) on the GPU
machine: values and both chains' gradients against a float64 torch reference written here (the log-partition by the
forward algorithm, its marginals by autograd, each quantity from them), gradcheck in float64, and torch-struct's
LinearChainCRF entropy, cross_entropy and kl where it is installed; ragged lengths, half inputs, one position, no
sequence, bad arguments; torch.compile. The HMM form's (hmm_entropy, hmm_cross_entropy, hmm_kl): values and the
gradients of all six tables against the CRF form's on the potentials the tables form, shared and per-sequence tables,
p and q laid out differently, half tables, gradcheck, the same edges, the registered operators and torch.compile.

Run as a program (the python_torch_divergence CTest entry): it exits 77 ("skipped") where torch or a CUDA GPU is
missing, and fails if any test is skipped where both exist (torch-struct included: scripts/gpu-torch installs it)."""

import math
import sys
import unittest

import package_under_test  # noqa: E402

package_under_test.import_path()

from torch_cases import HALF_ROUNDING, GpuCase, formed_with_start, gpu_main, torch  # noqa: E402
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


# The HMM form: (B, T, C) with whether transitions and initial are per sequence; one position, one state, 130 states
# (clustered from 128).
HMM_CASES = (((3, 7, 5), False, False), ((4, 9, 5), True, True), ((5, 1, 5), False, True), ((2, 33, 33), True, False),
             ((3, 12, 130), False, True), ((2, 4, 1), True, True))
TABLES = ("emissions", "transitions", "initial", "q_emissions", "q_transitions", "q_initial")


class HmmDivergenceTest(GpuCase):
    """hmm_entropy, hmm_cross_entropy and hmm_kl against chain_entropy, chain_cross_entropy and chain_kl on the
    potentials the tables form with a start position (formed_with_start, every length one more)."""

    def tables(self, B, T, C, batched_transitions, batched_initial, dtype=None, seed=0, scale=1.5):
        g = torch.Generator(device=self.dev).manual_seed(seed * 7919 + B * 10007 + T * 101 + C)

        def make(*shape):
            return (scale * torch.randn(*shape, generator=g, device=self.dev, dtype=torch.float64)).to(
                dtype or torch.float32)

        return [make(B, T, C), make(*((B, C, C) if batched_transitions else (C, C))),
                make(*((B, C) if batched_initial else (C,)))]

    def lengths(self, B, T, seed=0):
        """Ragged lengths in [1, T], the first 1."""
        g = torch.Generator(device=self.dev).manual_seed(seed + 5)
        lengths = torch.randint(1, T + 1, (B,), generator=g, device=self.dev)
        lengths[:1] = 1
        return lengths

    def functions(self):
        """(name, the HMM form's, the CRF form's, whether it takes q)."""
        jt = self.jt
        return (("entropy", jt.hmm_entropy, jt.chain_entropy, False),
                ("cross-entropy", jt.hmm_cross_entropy, jt.chain_cross_entropy, True),
                ("KL", jt.hmm_kl, jt.chain_kl, True))

    def check(self, p, q, lengths, rtol, grad_rtol):
        """Values and the gradients of p's tables and q's, at a random upstream gradient."""
        B = p[0].shape[0]
        crf_lengths = None if lengths is None else lengths + 1
        for name, ours, theirs, with_q in self.functions():
            with self.subTest(name):
                leaves = [x.detach().clone().requires_grad_(True) for x in (*p, *(q if with_q else ()))]
                got = ours(*leaves, lengths)
                want = theirs(*(formed_with_start(*leaves[k:k + 3]) for k in range(0, len(leaves), 3)), crf_lengths)
                self.assertEqual(got.dtype, want.dtype)
                torch.testing.assert_close(got, want, rtol=rtol, atol=rtol)
                r = torch.randn(B, dtype=got.dtype, device=self.dev)
                grads = torch.autograd.grad((got * r).sum(), leaves)
                want_grads = torch.autograd.grad((want * r).sum(), leaves)
                for table, g, w in zip(TABLES, grads, want_grads):
                    scale = max(1.0, w.abs().max().item()) if w.numel() else 1.0
                    torch.testing.assert_close(g, w, rtol=grad_rtol, atol=grad_rtol * scale, msg=table)

    def test_hmm_against_the_crf_form(self):
        for (B, T, C), batched_t, batched_i in HMM_CASES:
            with self.subTest(shape=(B, T, C), batched=(batched_t, batched_i)):
                # q shares what p does not: a shared table of one against a per-sequence one of the other.
                p = self.tables(B, T, C, batched_t, batched_i, torch.float64, seed=1)
                q = self.tables(B, T, C, not batched_t, batched_i, torch.float64, seed=2)
                lengths = self.lengths(B, T)
                self.check(p, q, lengths, 1e-9, 1e-8)
                self.check(p, q, None, 1e-9, 1e-8)
                if C in (5, 130):
                    self.check([x.float() for x in p], [x.float() for x in q], lengths, 5e-5, 3e-4)

    def test_hmm_layouts(self):
        """p's and q's tables at any strides and either sharing give what their contiguous per-sequence copies give,
        and a shared table's gradient is the sum of its sequences'."""
        B, T, C = 4, 10, 6
        leaves = self.tables(B, T, C, True, True, torch.float64, seed=3) + self.tables(B, T, C, True, True,
                                                                                        torch.float64, seed=4)
        lengths = self.lengths(B, T, seed=1)

        def strided(x):  # x's values at every other element of a wider tensor
            return torch.stack((x, x), 1).flatten(1, 2)[:, ::2]

        def transposed(x):  # x's values, laid out [from, to]
            return x.transpose(-1, -2).contiguous().transpose(-1, -2)

        layouts = {
            "p shared, q per sequence": lambda e, t, i, qe, qt, qi: (e, t[0], i[0], qe, qt, qi),
            "p per sequence, q shared": lambda e, t, i, qe, qt, qi: (e, t, i, qe, qt[1], qi[2]),
            "q strided and transposed": lambda e, t, i, qe, qt, qi: (e, t, i, strided(qe), transposed(qt), qi),
            "p transposed, q shared": lambda e, t, i, qe, qt, qi: (e, transposed(t), i, qe, qt[0], qi),
            "batch broadcasts": lambda e, t, i, qe, qt, qi: (e[:1].expand(B, -1, -1), t, i[:1].expand(B, -1), qe,
                                                             qt[:1].expand(B, -1, -1), qi),
            "one element": lambda e, t, i, qe, qt, qi: (e, t, i[0, :1].expand(C), qe, qt, qi[0, :1].expand(B, C)),
        }
        shapes = ((B, T, C), (B, C, C), (B, C)) * 2
        for layout, view in layouts.items():
            for name, ours, _, with_q in self.functions():
                with self.subTest(layout=layout, fn=name):
                    xs = [x.detach().clone().requires_grad_(True) for x in leaves]
                    tables = view(*xs)[:6 if with_q else 3]
                    got = ours(*tables, lengths)
                    want = ours(*(t.expand(shape).contiguous() for t, shape in zip(tables, shapes)), lengths)
                    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
                    r = torch.randn(B, dtype=got.dtype, device=self.dev)
                    n = len(tables)
                    grads = torch.autograd.grad((got * r).sum(), xs[:n], retain_graph=True, allow_unused=True)
                    want_grads = torch.autograd.grad((want * r).sum(), xs[:n], allow_unused=True)
                    for table, g, w in zip(TABLES, grads, want_grads):
                        self.assertEqual(g is None, w is None)
                        if g is not None:
                            torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10, msg=table)

    def test_hmm_half_tables(self):
        """float16 and bfloat16 tables computed in float32: what their float32 values give, the gradients in the
        half type."""
        for dtype in (torch.float16, torch.bfloat16):
            p = self.tables(3, 9, 8, False, True, dtype, seed=5)
            q = self.tables(3, 9, 8, True, False, dtype, seed=6)
            lengths = self.lengths(3, 9, seed=2)
            for name, ours, _, with_q in self.functions():
                with self.subTest(dtype=dtype, fn=name):
                    half = [x.clone().requires_grad_(True) for x in (*p, *(q if with_q else ()))]
                    wide = [x.detach().float().requires_grad_(True) for x in half]
                    got, want = ours(*half, lengths), ours(*wide, lengths)
                    self.assertEqual(got.dtype, torch.float32)
                    torch.testing.assert_close(got, want, rtol=4 * HALF_ROUNDING[dtype], atol=4 * HALF_ROUNDING[dtype])
                    r = torch.randn(3, device=self.dev)
                    grads = torch.autograd.grad((got * r).sum(), half)
                    want_grads = torch.autograd.grad((want * r).sum(), wide)
                    for table, g, w in zip(TABLES, grads, want_grads):
                        self.assertEqual(g.dtype, dtype)
                        tol = 8 * HALF_ROUNDING[dtype]
                        torch.testing.assert_close(g.float(), w, rtol=tol, atol=tol * max(1.0, w.abs().max().item()),
                                                   msg=table)

    def test_hmm_gradcheck(self):
        jt = self.jt
        lengths = torch.tensor([4, 1, 3], device=self.dev)
        for batched in (False, True):
            with self.subTest(batched=batched):
                p = [x.requires_grad_(True) for x in self.tables(3, 4, 3, batched, not batched, torch.float64, seed=7)]
                q = [x.requires_grad_(True) for x in self.tables(3, 4, 3, not batched, batched, torch.float64, seed=8)]
                self.assertTrue(torch.autograd.gradcheck(lambda *x: jt.hmm_entropy(*x, lengths), p))
                self.assertTrue(torch.autograd.gradcheck(lambda *x: jt.hmm_cross_entropy(*x, lengths), p + q))
                self.assertTrue(torch.autograd.gradcheck(lambda *x: jt.hmm_kl(*x, lengths), p + q))
                # Second derivatives, through the quantities in torch operations.
                self.assertTrue(torch.autograd.gradgradcheck(lambda *x: jt.hmm_entropy(*x, lengths), p))
                self.assertTrue(torch.autograd.gradgradcheck(lambda *x: jt.hmm_kl(*x, lengths), p + q))

    def test_hmm_edges_of_the_domain(self):
        jt = self.jt
        # One position: the distribution of the first state, softmax(initial + emissions[:, 0]).
        p = self.tables(3, 1, 4, False, True, seed=9)
        q = self.tables(3, 1, 4, True, False, seed=10)
        lp, lq = (torch.log_softmax(x[2] + x[0][:, 0], -1) for x in (p, q))
        torch.testing.assert_close(jt.hmm_entropy(*p), -(lp.exp() * lp).sum(-1))
        torch.testing.assert_close(jt.hmm_cross_entropy(*p, *q), -(lp.exp() * lq).sum(-1))
        torch.testing.assert_close(jt.hmm_kl(*p, *q), (lp.exp() * (lp - lq)).sum(-1))
        # No sequence: nothing to return; a shared table's gradient is zeros, a per-sequence one's empty.
        for batched in (False, True):
            p = [x.requires_grad_(True) for x in self.tables(0, 5, 4, False, False, seed=11)]
            q = [x.requires_grad_(True) for x in self.tables(0, 5, 4, batched, batched, seed=12)]
            for value, leaves in ((jt.hmm_entropy(*p), p), (jt.hmm_kl(*p, *q), p + q)):
                self.assertEqual(value.shape, (0,))
                for g, x in zip(torch.autograd.grad(value.sum(), leaves), leaves):
                    self.assertEqual(g.shape, x.shape)
                    self.assertEqual(g.abs().sum().item(), 0.0)
        # q forbids a move or a first state p allows: the cross-entropy and KL are +inf; forbidden alike, finite.
        p = self.tables(2, 4, 3, False, False, seed=13)
        for table, index in ((1, (0, 1)), (2, (2,))):
            with self.subTest(table=TABLES[table]):
                q = self.tables(2, 4, 3, False, False, seed=14)
                q[table][index] = float("-inf")
                self.assertTrue(torch.isposinf(jt.hmm_cross_entropy(*p, *q)).all())
                self.assertTrue(torch.isposinf(jt.hmm_kl(*p, *q)).all())
                masked = [x.clone() for x in p]
                masked[table][index] = float("-inf")
                self.assertTrue(torch.isfinite(jt.hmm_kl(*masked, *q)).all())
                self.assertTrue(torch.isfinite(jt.hmm_entropy(*masked)).all())
        # A length outside [1, T] gives NaN; the other sequences are untouched.
        q = self.tables(2, 4, 3, True, True, seed=15)
        kl = jt.hmm_kl(*p, *q, torch.tensor([3, 5], device=self.dev))
        self.assertTrue(math.isnan(kl[1].item()))
        torch.testing.assert_close(kl[0], jt.hmm_kl(*p, *q, torch.tensor([3, 3], device=self.dev))[0])

    def test_hmm_bad_arguments_name_themselves(self):
        jt = self.jt
        p = self.tables(2, 5, 4, False, False, seed=16)
        q = self.tables(2, 5, 4, True, True, seed=17)
        cases = ((ValueError, "emissions.*cpu", jt.hmm_entropy, (p[0].cpu(), *p[1:])),
                 (ValueError, "transitions.*shape", jt.hmm_entropy, (p[0], p[1][:2], p[2])),
                 (TypeError, "lengths.*int64", jt.hmm_entropy, (*p, torch.ones(2, dtype=torch.int32,
                                                                             device=self.dev))),
                 (TypeError, "q_emissions", jt.hmm_kl, (*p, None, *q[1:])),
                 (ValueError, "q_emissions.*shape", jt.hmm_kl, (*p, q[0][:, :3], *q[1:])),
                 (ValueError, "q_emissions.*cpu", jt.hmm_kl, (*p, q[0].cpu(), *q[1:])),
                 (TypeError, "q_transitions.*dtype", jt.hmm_cross_entropy, (*p, q[0], q[1].double(), q[2])),
                 (ValueError, "q_transitions.*shape", jt.hmm_cross_entropy, (*p, q[0], q[1][:, :3], q[2])),
                 (ValueError, "q_initial.*device", jt.hmm_kl, (*p, *q[:2], q[2].cpu())),
                 (ValueError, "q_initial.*shape", jt.hmm_kl, (*p, *q[:2], q[2][:, :3])))
        for error, pattern, fn, args in cases:
            with self.subTest(pattern=pattern):
                with self.assertRaisesRegex(error, pattern):
                    fn(*args)
        big = 1025  # one more state than the expectations take (one value, broadcast)
        with self.assertRaisesRegex(Exception, "chain.C"):
            jt.hmm_entropy(torch.zeros(1, 1, big, device=self.dev), torch.zeros(1, device=self.dev).expand(big, big),
                           torch.zeros(big, device=self.dev))

    def test_hmm_registered_operators(self):
        """The registered operators pass opcheck, and their autograd gives what the eager path gives."""
        from jitbmm import _torch_divergence as d
        from jitbmm import _torch_hmm_divergence as h
        p = self.tables(3, 6, 5, False, True, torch.float64, seed=18)
        q = self.tables(3, 6, 5, False, True, torch.float64, seed=19)
        lengths = torch.tensor([6, 1, 4], device=self.dev)
        r = torch.randn(3, dtype=torch.float64, device=self.dev)
        for kind, other in ((d.GIVEN, None), (d.CHAIN, q), (d.DIFFERENCE, q)):
            with self.subTest(kind=kind):
                a = [x.clone().requires_grad_(True) for x in p]
                b = [None] * 3 if other is None else [x.clone().requires_grad_(True) for x in other]
                leaves = [x for x in a + b if x is not None]
                torch.library.opcheck(torch.ops.jitbmm.hmm_divergence.default, (*a, *b, lengths, kind, True))
                value, log_z, mean, saved = torch.ops.jitbmm.hmm_divergence(*a, *b, lengths, kind, True)
                plain = [None if x is None else x.detach() for x in a + b]
                needs = [True, False, True] + [other is not None] * 3
                torch.library.opcheck(torch.ops.jitbmm.hmm_divergence_backward.default,
                                      (*plain, lengths, kind, saved.detach(), log_z.detach(), mean.detach(), r, needs))
                want = torch.autograd.grad((value * r).sum(), leaves)
                eager = h._divergence(*a, *b, lengths, kind, True)[0]
                self.assertIsNotNone(eager.grad_fn)
                torch.testing.assert_close(eager, value, rtol=0, atol=0)
                for got, w in zip(torch.autograd.grad((eager * r).sum(), leaves), want):
                    torch.testing.assert_close(got, w, rtol=0, atol=0)

    def test_hmm_compile(self):
        jt = self.jt
        p = self.tables(2, 6, 5, False, True, seed=20)
        q = self.tables(2, 6, 5, True, False, seed=21)
        lengths = torch.tensor([6, 2], device=self.dev)
        fn = torch.compile(lambda *x: jt.hmm_kl(*x, lengths) + jt.hmm_entropy(*x[:3], lengths), fullgraph=True)
        torch.testing.assert_close(fn(*p, *q), jt.hmm_kl(*p, *q, lengths) + jt.hmm_entropy(*p, lengths))


if __name__ == "__main__":
    sys.exit(gpu_main())
