"""jitbmm.jax on the GPU machine (the python_jax_gpu CTest entry): values against float64 numpy references and
gradients against jax.grad of float64 jnp references, for every semiring's product (odd shapes, broadcast batches,
±inf and NaN), CRF and HMM chains (ragged lengths, -inf masks, shared and per-sequence tables, half inputs), Viterbi
paths; the chains' entropy, cross-entropy, KL, k best paths and samples against the enumeration of every path;
check_grads in float64; jit, vmap (against the loop), grad of vmap, vmap of grad and checkpoint; empty batches; every
handler recorded into XLA's CUDA graphs (command buffers) and replayed on new inputs, against the same calls run
plainly; each chain strategy's first calls from empty caches, by its stand-in, plainly and in command buffers.
Exits 77 ("skipped") where jax or a CUDA device of jax's is missing, and fails if a test is skipped where both
exist."""

import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import package_under_test  # noqa: E402

package_under_test.import_path()

from jax_cases import (all_paths, hmm_potentials, jax, jnp, main, path_scores, reference_bmm,  # noqa: E402
                       reference_crf, reference_divergence, reference_hmm_divergence, reference_kbest)

try:
    from jax.test_util import check_grads
except ImportError:  # no jax: main() reports the program skipped
    check_grads = None

F32 = dict(rtol=2e-5, atol=2e-5)


def normal(key, shape, dtype=jnp.float32):
    return jax.random.normal(jax.random.PRNGKey(key), shape, jnp.float32).astype(dtype)


def jnp_chain(semiring):
    """The CRF score [B] of potentials [B, T - 1, C, C] as jnp operations (float64 reference for gradients)."""
    reduce = jax.nn.logsumexp if semiring == "log" else jnp.max

    def score(pot, lengths):
        B, n, C = pot.shape[0], pot.shape[1], pot.shape[-1]
        alpha = jnp.zeros((B, C), pot.dtype)
        scores = [reduce(alpha, -1)]
        for t in range(n):
            alpha = reduce(alpha[:, None, :] + pot[:, t], -1)
            scores.append(reduce(alpha, -1))
        scores = jnp.stack(scores, 1)
        return scores[:, -1] if lengths is None else scores[jnp.arange(B), lengths - 1]

    return score


def jnp_hmm(emissions, transitions, initial, lengths=None):
    B, T, C = emissions.shape
    transitions = jnp.broadcast_to(transitions, (B, C, C))
    alpha = initial + emissions[:, 0]
    scores = [jax.nn.logsumexp(alpha, -1)]
    for t in range(1, T):
        alpha = jax.nn.logsumexp(alpha[:, None, :] + transitions, -1) + emissions[:, t]
        scores.append(jax.nn.logsumexp(alpha, -1))
    scores = jnp.stack(scores, 1)
    return scores[:, -1] if lengths is None else scores[jnp.arange(B), lengths - 1]


def crf_of_hmm(emissions, transitions, initial):
    """The CRF potentials [B, T, C, C] of T + 1 positions that carry an HMM's distribution over paths, in jnp (so that
    jax.grad through them gives the tables' gradients): a first edge from state 0 of a position before the first,
    scoring initial + emissions[:, 0] (-inf from any other state), then transitions + emissions[:, t + 1]. Read to each
    length + 1."""
    B, T, C = emissions.shape
    t, i = jnp.broadcast_to(transitions, (B, C, C)), jnp.broadcast_to(initial, (B, C))
    first = jnp.where(jnp.arange(C) == 0, (i + emissions[:, 0])[:, :, None], -jnp.inf)
    return jnp.concatenate([first[:, None], t[:, None] + emissions[:, 1:, :, None]], 1)


class JaxGpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import jitbmm
        import jitbmm.jax as jj
        cls.jj = jj
        jitbmm.set_tune_policy("never")

    def assert_close(self, got, want, **tol):
        np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), **(tol or F32))

    def test_products_against_reference(self):
        jj = self.jj
        a, b = normal(1, (3, 17, 33)), normal(2, (1, 33, 5))
        a = a.at[0, 0, :].set(-jnp.inf).at[1, 2, 3].set(jnp.nan).at[2, 4, 0].set(jnp.inf)
        for semiring in ("log", "max_plus", "min_plus", "max_times", "plus_times"):
            with self.subTest(semiring=semiring):
                got = jj.semiring_bmm(a, b, semiring)
                self.assertEqual(got.shape, (3, 17, 5))
                want = reference_bmm(a, b, semiring)
                np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-5, atol=1e-5)

    def test_handlers_refuse_results_they_would_overrun(self):
        """A handler called directly (jax.ffi.ffi_call, not through jitbmm.jax) with a result of the wrong size or
        dtype, or an operand of too low a rank, is refused naming it, before anything is launched."""
        from jitbmm import _jax_support
        _jax_support.registered()
        f32, s32 = jnp.float32, jnp.int32
        a, b = normal(1, (2, 8, 8)), normal(2, (2, 8, 8))
        p = normal(3, (2, 4, 3, 3))
        hmm = (normal(4, (2, 5, 3)), normal(5, (3, 3)), normal(6, (3,)))
        none = jnp.zeros((0,), s32)
        cases = [
            ("bmm", "out", (jax.ShapeDtypeStruct((1,), f32), jax.ShapeDtypeStruct((0,), s32),
                            jax.ShapeDtypeStruct((0,), jnp.uint8)), (a, b), dict(semiring="log", precision="exact")),
            ("bmm", "argmax", (jax.ShapeDtypeStruct((2, 8, 8), f32), jax.ShapeDtypeStruct((2, 8, 8), jnp.int64),
                               jax.ShapeDtypeStruct((0,), jnp.uint8)), (a, b),
             dict(semiring="max_plus", precision="exact")),
            ("chain", "score", (jax.ShapeDtypeStruct((1,), f32), jax.ShapeDtypeStruct((0,), jnp.uint8),
                                jax.ShapeDtypeStruct((0,), s32), jax.ShapeDtypeStruct((0,), jnp.uint8)), (p, none),
             dict(semiring="log")),
            ("chain", "path", (jax.ShapeDtypeStruct((2,), f32), jax.ShapeDtypeStruct((0,), jnp.uint8),
                               jax.ShapeDtypeStruct((2, 4), s32), jax.ShapeDtypeStruct((0,), jnp.uint8)), (p, none),
             dict(semiring="max_plus")),
            ("chain", "lengths", (jax.ShapeDtypeStruct((2,), f32), jax.ShapeDtypeStruct((0,), jnp.uint8),
                                  jax.ShapeDtypeStruct((0,), s32), jax.ShapeDtypeStruct((0,), jnp.uint8)),
             (p, jnp.int32(3)), dict(semiring="log")),
            ("hmm_expectation", "log_z", (jax.ShapeDtypeStruct((2,), f32), jax.ShapeDtypeStruct((2,), f32),
                                          jax.ShapeDtypeStruct((0,), f32)),
             (*hmm, *hmm, none), dict(kind=np.int32(2))),
            ("hmm_expectation", "q_transitions", (jax.ShapeDtypeStruct((2, 2), f32), jax.ShapeDtypeStruct((2,), f32),
                                                  jax.ShapeDtypeStruct((0,), f32)),
             (*hmm, hmm[0], hmm[1][0], hmm[2], none), dict(kind=np.int32(1))),
        ]
        for target, name, results, operands, attrs in cases:
            with self.subTest(target=target, name=name):
                call = jax.ffi.ffi_call(f"jitbmm_{target}", results)
                with self.assertRaisesRegex(Exception, name):
                    jax.block_until_ready(call(*operands, **attrs))

    def test_product_gradients(self):
        """Every batch its own b, then one b for every batch (its gradient the sum over the batch), then one a."""
        jj = self.jj
        g = normal(5, (2, 9, 6))
        operands = ((normal(3, (2, 9, 13)), normal(4, (2, 13, 6))), (normal(3, (2, 9, 13)), normal(4, (13, 6))),
                    (normal(3, (9, 13)), normal(4, (2, 13, 6))))
        for semiring, ref in (("log", lambda a, b: jax.nn.logsumexp(a[..., :, :, None] + b[..., None, :, :], -2)),
                              ("max_plus", lambda a, b: jnp.max(a[..., :, :, None] + b[..., None, :, :], -2)),
                              ("plus_times", lambda a, b: a @ b)):
            for a, b in operands:
                with self.subTest(semiring=semiring, a=a.shape, b=b.shape):
                    got = jax.grad(lambda a, b: (jj.semiring_bmm(a, b, semiring) * g).sum(), argnums=(0, 1))(a, b)
                    a64, b64, g64 = (x.astype(jnp.float64) for x in (a, b, g))
                    want = jax.grad(lambda a, b: (ref(a, b) * g64).sum(), argnums=(0, 1))(a64, b64)
                    for x, y in zip(got, want):
                        self.assert_close(x, y, rtol=1e-4, atol=1e-4)
        a, b = normal(3, (2, 9, 13)), normal(4, (2, 13, 6))
        a64, b64 = a.astype(jnp.float64), b.astype(jnp.float64)
        check_grads(jj.logbmm, (a64, b64), order=1, modes=["rev"])

    def test_half_products(self):
        for dtype, tol in ((jnp.float16, 2e-3), (jnp.bfloat16, 1.6e-2)):
            a, b = normal(6, (4, 16, 24), dtype), normal(7, (4, 24, 8), dtype)
            got = self.jj.logbmm(a, b)
            self.assertEqual(got.dtype, dtype)
            self.assert_close(got, reference_bmm(a, b, "log"), rtol=tol, atol=tol)

    def test_jit_vmap_checkpoint_products(self):
        jj = self.jj
        a, b = normal(8, (5, 3, 7, 11)), normal(9, (11, 4))
        direct = jj.logbmm(a, b)
        self.assert_close(jax.jit(jj.logbmm)(a, b), direct)
        self.assert_close(jax.vmap(jj.logbmm, (0, None))(a, b), direct)
        per_instance = jax.vmap(jax.grad(lambda a, b: jj.logbmm(a, b).sum(), (0, 1)), (0, None))(a, b)
        summed = jax.grad(lambda a, b: jax.vmap(jj.logbmm, (0, None))(a, b).sum(), (0, 1))(a, b)
        plain = jax.grad(lambda a, b: jj.logbmm(a, b).sum(), (0, 1))(a, b)
        self.assertEqual(per_instance[1].shape, (5, 11, 4))
        self.assert_close(per_instance[0], plain[0])
        self.assert_close(per_instance[1].sum(0), plain[1], rtol=1e-4, atol=1e-4)
        self.assert_close(summed[1], plain[1], rtol=1e-4, atol=1e-4)
        f = lambda a: jax.checkpoint(jj.logbmm)(a, b).sum()  # noqa: E731
        self.assert_close(jax.grad(f)(a), jax.grad(lambda a: jj.logbmm(a, b).sum())(a))
        empty = jj.logbmm(jnp.zeros((0, 7, 11), jnp.float32), normal(10, (0, 11, 4)))
        self.assertEqual(empty.shape, (0, 7, 4))

    def test_chains_against_reference(self):
        jj = self.jj
        for B, T, C in ((5, 9, 1), (4, 17, 33), (3, 6, 130)):
            pot = normal(11 + C, (B, T - 1, C, C))
            pot = pot.at[0, 0, 0, :].set(-jnp.inf)
            lengths = jnp.asarray(np.arange(B) % T + 1)
            for semiring in ("log", "max_plus"):
                with self.subTest(B=B, T=T, C=C, semiring=semiring):
                    want, want_path = reference_crf(pot, lengths, semiring)
                    if semiring == "log":
                        got = jj.chain_log_partition(pot, lengths)
                    else:
                        got, path = jj.chain_viterbi(pot, lengths)
                        np.testing.assert_array_equal(np.asarray(path), want_path)
                    self.assert_close(got, want, rtol=1e-5, atol=1e-5)

    def test_chain_gradients(self):
        jj = self.jj
        pot, lengths = normal(20, (4, 11, 6, 6)), jnp.asarray([12, 1, 7, 3])
        got = jax.grad(lambda p: jj.chain_log_partition(p, lengths).sum())(pot)
        want = jax.grad(lambda p: jnp_chain("log")(p, lengths).sum())(pot.astype(jnp.float64))
        self.assert_close(got, want, rtol=1e-5, atol=1e-6)
        got = jax.grad(lambda p: jj.chain_viterbi(p, lengths)[0].sum())(pot)
        want = jax.grad(lambda p: jnp_chain("max_plus")(p, lengths).sum())(pot.astype(jnp.float64))
        self.assert_close(got, want, rtol=0, atol=0)
        check_grads(lambda p: jj.chain_log_partition(p, lengths), (pot.astype(jnp.float64),),
                                  order=1, modes=["rev"])

    def test_chain_transformations(self):
        jj = self.jj
        pot, lengths = normal(21, (3, 2, 7, 5, 5)), jnp.asarray([[8, 2], [5, 8], [1, 4]])
        loop = jnp.stack([jj.chain_log_partition(pot[i], lengths[i]) for i in range(3)])
        self.assert_close(jax.vmap(jj.chain_log_partition)(pot, lengths), loop)
        self.assert_close(jax.jit(jax.vmap(jj.chain_log_partition))(pot, lengths), loop)
        grad = jax.vmap(jax.grad(lambda p, n: jj.chain_log_partition(p, n).sum()))(pot, lengths)
        loop_grad = jnp.stack([jax.grad(lambda p: jj.chain_log_partition(p, lengths[i]).sum())(pot[i])
                               for i in range(3)])
        self.assert_close(grad, loop_grad)
        ckpt = jax.grad(lambda p: jax.checkpoint(jj.chain_log_partition)(p, lengths).sum())(pot)
        self.assert_close(ckpt, loop_grad)
        # One table of potentials, the lengths vmapped.
        shared = jax.vmap(jj.chain_log_partition, (None, 0))(pot[0], lengths)
        self.assert_close(shared, jnp.stack([jj.chain_log_partition(pot[0], lengths[i]) for i in range(3)]))
        self.assertEqual(jj.chain_log_partition(jnp.zeros((0, 4, 3, 3), jnp.float32)).shape, (0,))

    def test_chain_half_inputs(self):
        for dtype in (jnp.float16, jnp.bfloat16):
            pot = normal(22, (3, 9, 8, 8), dtype)
            got = self.jj.chain_log_partition(pot)
            self.assertEqual(got.dtype, jnp.float32)
            self.assert_close(got, reference_crf(pot, None, "log")[0], rtol=1e-5, atol=1e-4)

    def test_hmm(self):
        jj = self.jj
        B, T, C = 4, 12, 9
        e, lengths = normal(30, (B, T, C)), jnp.asarray([12, 5, 1, 9])
        for batched in (False, True):
            t = normal(31, (B, C, C) if batched else (C, C))
            i = normal(32, (B, C) if batched else (C,))
            with self.subTest(batched=batched):
                pot = hmm_potentials(e, t, i)
                want = reference_crf(pot, lengths, "log")[0]
                want[lengths == 1] = np.log(np.exp(np.broadcast_to(np.asarray(i, np.float64), (B, C)) +
                                                   np.asarray(e[:, 0], np.float64)).sum(-1))[lengths == 1]
                self.assert_close(jj.hmm_log_partition(e, t, i, lengths), want, rtol=1e-5, atol=1e-5)
                got = jax.grad(lambda *x: jj.hmm_log_partition(*x, lengths).sum(), argnums=(0, 1, 2))(e, t, i)
                ref = jax.grad(lambda *x: jnp_hmm(*x, lengths).sum(), argnums=(0, 1, 2))(
                    *(x.astype(jnp.float64) for x in (e, t, i)))
                for g, r in zip(got, ref):
                    self.assert_close(g, r, rtol=1e-4, atol=1e-5)
                score, path = jj.hmm_viterbi(e, t, i, lengths)
                vs, vp = reference_crf(pot, lengths, "max_plus")
                long = np.asarray(lengths) > 1
                self.assert_close(np.asarray(score)[long], vs[long], rtol=1e-5, atol=1e-5)
                np.testing.assert_array_equal(np.asarray(path)[long], vp[long])

    def test_hmm_gradients_of_no_sequence(self):
        """B = 0: the shared tables' gradients are zeros (written, not left as XLA's buffers held them)."""
        jj = self.jj
        transitions, initial = normal(3, (4, 4)), normal(4, (4,))
        none = jnp.zeros((0, 8, 4), transitions.dtype)
        grads = jax.grad(lambda t, i: jj.hmm_log_partition(none, t, i).sum(), (0, 1))(transitions, initial)
        for g in grads:
            np.testing.assert_array_equal(np.asarray(g), 0)

    def test_hmm_vmap_of_grad_per_instance(self):
        jj = self.jj
        e, t, i = normal(40, (3, 4, 10, 6)), normal(41, (6, 6)), normal(42, (6,))
        grads = jax.vmap(jax.grad(lambda *x: jj.hmm_log_partition(*x).sum(), argnums=(0, 1, 2)),
                         (0, None, None))(e, t, i)
        for v in range(3):
            want = jax.grad(lambda *x: jj.hmm_log_partition(*x).sum(), argnums=(0, 1, 2))(e[v], t, i)
            for g, w in zip(grads, want):
                self.assert_close(g[v], w)
        total = jax.grad(lambda t: jax.vmap(jj.hmm_log_partition, (0, None, None))(e, t, i).sum())(t)
        self.assert_close(total, grads[1].sum(0), rtol=1e-4, atol=1e-4)

    def test_divergences_against_enumeration(self):
        jj = self.jj
        B, T, C = 4, 5, 3
        lengths = jnp.asarray([5, 1, 3, 4])
        for dtype, tol in ((jnp.float32, dict(rtol=1e-4, atol=1e-4)), (jnp.float64, dict(rtol=1e-10, atol=1e-10))):
            p, q = normal(50, (B, T - 1, C, C), dtype) * 2, normal(51, (B, T - 1, C, C), dtype)
            p64, q64 = p.astype(jnp.float64), q.astype(jnp.float64)
            for kind, f in (("entropy", lambda p, q, n: jj.chain_entropy(p, n)),
                            ("cross_entropy", jj.chain_cross_entropy), ("kl", jj.chain_kl)):
                with self.subTest(kind=kind, dtype=dtype.__name__):
                    self.assert_close(f(p, q, lengths), reference_divergence(kind, p64, q64, lengths), **tol)
                    got = jax.grad(lambda p, q: f(p, q, lengths).sum(), argnums=(0, 1))(p, q)
                    want = jax.grad(lambda p, q: reference_divergence(kind, p, q, lengths).sum(), argnums=(0, 1))(p64,
                                                                                                            q64)
                    for g, w in zip(got, want):
                        self.assert_close(g, w, **tol)
        check_grads(lambda p, q: jj.chain_kl(p, q, lengths), (p64, q64), order=1, modes=["rev"])
        # Half potentials: float32 results, against the rounded inputs.
        h = normal(52, (B, T - 1, C, C), jnp.bfloat16)
        got = jj.chain_entropy(h, lengths)
        self.assertEqual(got.dtype, jnp.float32)
        self.assert_close(got, reference_divergence("entropy", h.astype(jnp.float64), None, lengths), rtol=1e-5,
                          atol=1e-4)

    def test_divergence_special_values_and_transformations(self):
        jj = self.jj
        p, q = normal(53, (2, 3, 4, 4, 4)), normal(54, (2, 3, 4, 4, 4))
        # q forbids an edge p allows: every path through it has weight under p only, so H(p, q) and KL are +inf.
        q_masked = q.at[0, 1, 0, 2, 1].set(-jnp.inf)
        self.assertTrue(np.isposinf(np.asarray(jj.chain_kl(p, q_masked)[0, 1])))
        self.assertTrue(np.isposinf(np.asarray(jj.chain_cross_entropy(p, q_masked)[0, 1])))
        self.assertTrue(np.isfinite(np.asarray(jj.chain_kl(p, q_masked)[1])).all())
        # One position: C equally likely paths of no edge.
        self.assert_close(jj.chain_entropy(p[0], jnp.asarray([1, 5, 2])[:3])[0], np.log(4.0))
        loop = jnp.stack([jj.chain_kl(p[i], q[i]) for i in range(2)])
        self.assert_close(jax.vmap(jj.chain_kl)(p, q), loop)
        self.assert_close(jax.jit(jj.chain_kl)(p, q), loop)
        grads = jax.vmap(jax.grad(lambda p, q: jj.chain_cross_entropy(p, q).sum(), argnums=(0, 1)), (0, None))(p, q[0])
        for i in range(2):
            want = jax.grad(lambda p, q: jj.chain_cross_entropy(p, q).sum(), argnums=(0, 1))(p[i], q[0])
            for g, w in zip(grads, want):
                self.assert_close(g[i], w)
        ckpt = jax.grad(lambda p: jax.checkpoint(jj.chain_entropy)(p).sum())(p)
        self.assert_close(ckpt, jax.grad(lambda p: jj.chain_entropy(p).sum())(p))
        nested = jax.vmap(jax.vmap(jax.grad(lambda p: jj.chain_entropy(p).sum())))(p[:, :, None])
        self.assert_close(nested[:, :, 0], jax.grad(lambda p: jj.chain_entropy(p).sum())(p))
        # jacrev: the backward a row of upstream gradients at a time, against the rows of grad.
        lengths = jnp.asarray([5, 2, 4])
        for f in (lambda p: jj.chain_entropy(p, lengths), lambda p: jj.chain_kl(p, q[0], lengths),
                  lambda p: jj.chain_log_partition(p, lengths)):
            jac = jax.jacrev(f)(p[0])
            for b in range(3):
                self.assert_close(jac[b], jax.grad(lambda p: f(p)[b])(p[0]))
        # Sequences of one position: C equally likely paths, vmapped beside an unbatched second chain.
        self.assert_close(jax.vmap(jj.chain_kl, (0, None))(p[:, :, :0], q[0, :, :0]), np.zeros((2, 3)))
        self.assertEqual(jj.chain_entropy(jnp.zeros((0, 4, 3, 3), jnp.float32)).shape, (0,))

    def test_hmm_divergences_against_crf(self):
        """hmm_entropy, hmm_cross_entropy and hmm_kl against chain_entropy, chain_cross_entropy and chain_kl of the
        same distributions as CRF potentials (crf_of_hmm): values and all six tables' gradients, with ragged lengths
        (one of 1), the tables shared, one per sequence, or mixed (p's shared where q's are not), in float32 and
        float64, and 130 states (a cluster of blocks a sequence from 128 states on sm_90); half inputs against the
        enumeration of every path; vmap and vmap of grad against the loop; the gradients of no sequence."""
        jj = self.jj
        kinds = (("entropy", lambda *x: jj.hmm_entropy(*x[:3], x[-1]), lambda p, q, n: jj.chain_entropy(p, n)),
                 ("cross_entropy", jj.hmm_cross_entropy, jj.chain_cross_entropy), ("kl", jj.hmm_kl, jj.chain_kl))

        def oracle(crf):  # the CRF form's of the formed potentials, a function of the six tables
            return lambda e, t, i, qe, qt, qi, n: crf(crf_of_hmm(e, t, i), crf_of_hmm(qe, qt, qi), n + 1)

        cases = []
        for dtype, tol in ((jnp.float32, dict(rtol=1e-4, atol=1e-4)), (jnp.float64, dict(rtol=1e-9, atol=1e-9))):
            B, T, C = 4, 6, 5
            e, qe = normal(90, (B, T, C), dtype) * 2, normal(91, (B, T, C), dtype)
            t, qt, bt, bqt = (normal(92 + j, shape, dtype) for j, shape in enumerate([(C, C), (C, C), (B, C, C),
                                                                                     (B, C, C)]))
            i, qi, bi, bqi = (normal(96 + j, shape, dtype) for j, shape in enumerate([(C,), (C,), (B, C), (B, C)]))
            lengths = jnp.asarray([6, 1, 3, 5])
            cases += [(f"shared, {dtype.__name__}", (e, t, i, qe, qt, qi), lengths, tol),
                      (f"one per sequence, {dtype.__name__}", (e, bt, bi, qe, bqt, bqi), lengths, tol),
                      (f"mixed, {dtype.__name__}", (e, t, bi, qe, bqt, qi), lengths, tol)]
        B, T, C = 3, 5, 130
        wide = (normal(100, (B, T, C)), normal(101, (C, C)), normal(102, (C,)), normal(103, (B, T, C)),
                normal(104, (C, C)), normal(105, (C,)))
        cases.append(("130 states", wide, jnp.asarray([5, 1, 4]), dict(rtol=1e-4, atol=1e-4)))
        for name, tables, lengths, tol in cases:
            for kind, ours, crf in kinds:
                with self.subTest(name, kind=kind):
                    self.assert_close(ours(*tables, lengths), oracle(crf)(*tables, lengths), **tol)
                    argnums = (0, 1, 2) if kind == "entropy" else tuple(range(6))
                    got = jax.grad(lambda *x: ours(*x, lengths).sum(), argnums)(*tables)
                    want = jax.grad(lambda *x: oracle(crf)(*x, lengths).sum(), argnums)(*tables)
                    for g, w in zip(got, want):
                        self.assertEqual(g.shape, w.shape)
                        self.assert_close(g, w, **tol)
        # Half tables: float32 results, against the enumeration of the rounded tables.
        e, t, i = (x.astype(jnp.bfloat16) for x in cases[0][1][:3])
        got = jj.hmm_entropy(e, t, i, cases[0][2])
        self.assertEqual(got.dtype, jnp.float32)
        want = reference_hmm_divergence("entropy", [x.astype(jnp.float64) for x in (e, t, i)], None, cases[0][2])
        self.assert_close(got, want, rtol=1e-5, atol=1e-4)
        # vmap against the loop, and vmap of grad with shared tables: each instance's gradients its own.
        e, t, i, qe, qt, qi = (x.astype(jnp.float32) for x in cases[0][1])
        es, qes = jnp.stack([e, e * 0.5]), jnp.stack([qe, qe + 1])
        axes = (0, None, None, 0, None, None)
        loop = jnp.stack([jj.hmm_kl(es[v], t, i, qes[v], qt, qi) for v in range(2)])
        self.assert_close(jax.vmap(jj.hmm_kl, axes)(es, t, i, qes, qt, qi), loop)
        self.assert_close(jax.jit(jax.vmap(jj.hmm_kl, axes))(es, t, i, qes, qt, qi), loop)
        cross = jax.grad(lambda *x: jj.hmm_cross_entropy(*x).sum(), tuple(range(6)))
        grads = jax.vmap(cross, axes)(es, t, i, qes, qt, qi)
        for v in range(2):
            for g, w in zip(grads, cross(es[v], t, i, qes[v], qt, qi)):
                self.assert_close(g[v], w)
        # No sequence: the shared tables' gradients are zeros (written, not left as XLA's buffers held them).
        none = jnp.zeros((0, T, 4), jnp.float32)
        t4, i4 = normal(106, (4, 4)), normal(107, (4,))
        for g in jax.grad(lambda *x: jj.hmm_kl(none, x[0], x[1], none, x[2], x[3]).sum(), (0, 1, 2, 3))(t4, i4, t4, i4):
            np.testing.assert_array_equal(np.asarray(g), 0)
        self.assertEqual(jj.hmm_entropy(none, t4, i4).shape, (0,))

    def test_count_and_log_prob(self):
        jj = self.jj
        B, T, C = 3, 5, 3
        lengths = jnp.asarray([5, 1, 4])
        p = normal(57, (B, T - 1, C, C)).at[0, 1, 2, 0].set(-jnp.inf).at[2, 0, :, 1].set(-jnp.inf)
        p64 = p.astype(jnp.float64)
        scores, canonical = path_scores(p64, lengths)
        finite = canonical & np.isfinite(np.asarray(scores))
        self.assert_close(jj.chain_log_count(p, lengths), np.log(finite.sum(-1)), rtol=1e-6, atol=1e-6)
        best = reference_kbest(p64, lengths, 1)[1][:, 0]
        value = np.zeros((B, T - 1, C, C), np.float32)
        for b, t in np.ndindex(B, T - 1):
            if t < int(lengths[b]) - 1:
                value[b, t, best[b, t + 1], best[b, t]] = 1
        log_z = jax.nn.logsumexp(jnp.where(canonical, scores, -jnp.inf), -1)
        want = (value * np.where(value != 0, np.asarray(p64), 0)).sum((-1, -2, -3)) - log_z
        self.assert_close(jj.chain_log_prob(p, jnp.asarray(value), lengths), want, rtol=1e-5, atol=1e-5)
        grad = jax.grad(lambda p: jj.chain_log_prob(p, jnp.asarray(value), lengths).sum())(p)
        marginals = jax.grad(lambda p: jj.chain_log_partition(p, lengths).sum())(p)
        self.assert_close(grad, value - marginals, rtol=1e-6, atol=1e-6)

    def test_kbest_against_enumeration(self):
        jj = self.jj
        B, T, C, k = 4, 5, 3, 6
        lengths = jnp.asarray([5, 1, 3, 4])  # the sequence of one position has 3 paths: the rest -inf and -1
        pot = normal(55, (B, T - 1, C, C))
        scores, paths = jj.chain_kbest(pot, k, lengths)
        want_scores, want_paths = reference_kbest(pot, lengths, k)
        self.assert_close(scores, want_scores, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(np.asarray(paths), want_paths)
        viterbi_score, viterbi_path = jj.chain_viterbi(pot, lengths)
        np.testing.assert_array_equal(np.asarray(paths[:, 0]), np.asarray(viterbi_path))
        # The gradient of the i-th score is the i-th path's edge indicator.
        weights = normal(56, (B, k))
        def weighted(p):
            s = jj.chain_kbest(p, k, lengths)[0]
            return (jnp.where(jnp.isfinite(s), s, 0) * weights).sum()

        got = jax.grad(weighted)(pot)
        want = np.zeros((B, T - 1, C, C))
        for b in range(B):
            for i in range(k):
                for t in range(int(lengths[b]) - 1):
                    if want_paths[b, i, t] >= 0:
                        want[b, t, want_paths[b, i, t + 1], want_paths[b, i, t]] += float(weights[b, i])
        self.assert_close(got, want, rtol=1e-6, atol=1e-6)
        vs, vp = jax.vmap(lambda p: jj.chain_kbest(p, 2))(pot.reshape(2, 2, T - 1, C, C))
        ls, lp = jj.chain_kbest(pot, 2)
        self.assert_close(vs.reshape(B, 2), ls)
        np.testing.assert_array_equal(np.asarray(vp).reshape(B, 2, T), np.asarray(lp))

    def test_samples_against_enumeration(self):
        """The frequencies of 40,000 sampled paths of small chains against their exact probabilities (every path
        enumerated), within 5 standard errors each (and 3 counts); -1 past each length; a key repeats its paths and
        another key does not; vmap over keys is the loop of calls."""
        jj = self.jj
        B, T, C, n = 3, 4, 3, 40000
        lengths = jnp.asarray([4, 2, 3])
        pot = normal(60, (B, T - 1, C, C))
        pot = pot.at[0, 1, 2, :].set(-jnp.inf)  # no path enters state 2 at position 2 of the first sequence
        key = jax.random.key(5)
        paths = np.asarray(jax.jit(lambda p, k: jj.chain_sample(p, n, k, lengths))(pot, key))
        self.assertEqual(paths.shape, (B, n, T))
        scores, canonical = path_scores(np.asarray(pot, np.float64), lengths)
        scores = np.where(canonical, np.asarray(scores), -np.inf)
        probability = np.exp(scores - np.logaddexp.reduce(scores, -1, keepdims=True))
        every = all_paths(T, C)
        for b in range(B):
            L = int(lengths[b])
            np.testing.assert_array_equal(paths[b, :, L:], -1)
            self.assertTrue((paths[b, :, :L] >= 0).all())
            index = (np.where(paths[b] < 0, 0, paths[b]) * C ** np.arange(T - 1, -1, -1)).sum(-1)
            frequency = np.bincount(index, minlength=len(every)) / n
            with self.subTest(sequence=b):
                np.testing.assert_array_equal(frequency[probability[b] == 0], 0)
                # 5 standard errors, and 3 counts more for the rarest paths, where a count is no longer normal.
                bound = 5 * np.sqrt(probability[b] * (1 - probability[b]) / n) + 3 / n
                self.assertTrue((np.abs(frequency - probability[b]) <= bound).all(),
                                np.abs(frequency - probability[b]) / bound)
        again = np.asarray(jj.chain_sample(pot, 64, key, lengths))
        np.testing.assert_array_equal(again, np.asarray(jj.chain_sample(pot, 64, key, lengths)))
        self.assertFalse((again == np.asarray(jj.chain_sample(pot, 64, jax.random.key(6), lengths))).all())
        keys = jax.random.split(jax.random.key(7), 3)
        looped = np.stack([np.asarray(jj.chain_sample(pot, 8, k, lengths)) for k in keys])
        np.testing.assert_array_equal(np.asarray(jax.vmap(lambda k: jj.chain_sample(pot, 8, k, lengths))(keys)),
                                      looped)
        self.assertEqual(jj.chain_sample(pot[:0], 4, key).shape, (0, 4, T))
        self.assertEqual(jj.chain_sample(pot, 0, key).shape, (B, 0, T))

    def test_hmm_kbest_and_samples(self):
        """The HMM form from its tables: hmm_kbest is chain_kbest of the formed potentials (lengths of 2 or more),
        hmm_viterbi's path first, its gradient the paths' states, moves and first states (against jax.grad of those
        paths' scores), its vmap the loop; hmm_sample's paths of small chains as often as their exact probabilities
        say (a length-1 sequence's state too), a key repeats its paths, vmap over keys is the loop of calls."""
        jj = self.jj
        B, T, C, k = 4, 6, 3, 5
        e, t, i = normal(70, (B, T, C)), normal(71, (C, C)), normal(72, (C,))
        lengths = jnp.asarray([6, 2, 4, 5])
        scores, paths = jj.hmm_kbest(e, t, i, k, lengths)
        want_scores, want_paths = jj.chain_kbest(jnp.asarray(hmm_potentials(e, t, i), jnp.float32), k, lengths)
        self.assert_close(scores, want_scores, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(np.asarray(paths), np.asarray(want_paths))
        np.testing.assert_array_equal(np.asarray(paths[:, 0]), np.asarray(jj.hmm_viterbi(e, t, i, lengths)[1]))
        weights = normal(73, (B, k))

        def weighted(e, t, i):
            s = jj.hmm_kbest(e, t, i, k, lengths)[0]
            return (jnp.where(jnp.isfinite(s), s, 0) * weights).sum()

        def scored(e, t, i):  # the same paths' scores as functions of the tables
            z, taken = jnp.maximum(paths, 0), paths >= 0
            em = jnp.take_along_axis(jnp.broadcast_to(e[:, None], (B, k, T, C)), z[..., None], -1)[..., 0]
            moves = t[z[..., 1:], z[..., :-1]]
            total = (jnp.where(taken, em, 0).sum(-1) + jnp.where(taken[..., 1:], moves, 0).sum(-1) +
                     jnp.where(taken[..., 0], i[z[..., 0]], 0))
            return (jnp.where(jnp.isfinite(scores), total, 0) * weights).sum()

        for got, want in zip(jax.grad(weighted, (0, 1, 2))(e, t, i), jax.grad(scored, (0, 1, 2))(e, t, i)):
            self.assert_close(got, want, rtol=1e-6, atol=1e-6)
        vs, vp = jax.vmap(lambda e: jj.hmm_kbest(e, t, i, 2))(e.reshape(2, 2, T, C))
        ls, lp = jj.hmm_kbest(e, t, i, 2)
        self.assert_close(vs.reshape(B, 2), ls)
        np.testing.assert_array_equal(np.asarray(vp).reshape(B, 2, T), np.asarray(lp))
        # Samples of chains of 3 positions and of 1, against every path's probability.
        n, short = 40000, jnp.asarray([3, 1])
        e2, t2, i2 = normal(74, (2, 3, C)), normal(75, (2, C, C)), normal(76, (2, C))
        key = jax.random.key(8)
        drawn = np.asarray(jax.jit(lambda e, t, i, key: jj.hmm_sample(e, t, i, n, key, short))(e2, t2, i2, key))
        self.assertEqual(drawn.shape, (2, n, 3))
        np.testing.assert_array_equal(drawn[1, :, 1:], -1)
        scores3, canonical = path_scores(hmm_potentials(e2, t2, i2)[:1], np.asarray([3]))
        first = np.asarray(i2[1] + e2[1, 0], np.float64)
        for b, logits in ((0, np.where(canonical[0], np.asarray(scores3[0]), -np.inf)), (1, first)):
            L = int(short[b])
            probability = np.exp(logits - np.logaddexp.reduce(logits))
            index = (drawn[b, :, :L] * C ** np.arange(L - 1, -1, -1)).sum(-1)
            frequency = np.bincount(index, minlength=len(probability)) / n
            bound = 5 * np.sqrt(probability * (1 - probability) / n) + 3 / n
            with self.subTest(sequence=b):
                self.assertTrue((np.abs(frequency - probability) <= bound).all(), np.abs(frequency - probability))
        again = np.asarray(jj.hmm_sample(e2, t2, i2, 64, key, short))
        np.testing.assert_array_equal(again, np.asarray(jj.hmm_sample(e2, t2, i2, 64, key, short)))
        keys = jax.random.split(jax.random.key(9), 3)
        looped = np.stack([np.asarray(jj.hmm_sample(e2, t2, i2, 8, k, short)) for k in keys])
        np.testing.assert_array_equal(np.asarray(jax.vmap(lambda k: jj.hmm_sample(e2, t2, i2, 8, k, short))(keys)),
                                      looped)
        self.assertEqual(jj.hmm_sample(e2[:0], t2[:0], i2[:0], 4, key).shape, (0, 4, 3))

    def test_inside_xla_cuda_graphs(self):
        """A jitted step calling every handler, with XLA recording custom calls into command buffers down to one
        command (its CUDA graphs, replayed on later calls): XLA must put the jitbmm calls in them, and each call's
        results on three draws of inputs must match the same step run without command buffers. A call being
        recorded says so at JITBMM_LOG=debug (its stream is being captured), whichever stage of XLA's compiler
        formed the command buffers, so that is what shows the calls were recorded."""
        with tempfile.TemporaryDirectory() as tmp:
            runs, recorded = {}, {}
            for name, flags in (("graphs", "--xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL "
                                           "--xla_gpu_graph_min_graph_size=1"),
                                ("plain", "--xla_gpu_enable_command_buffer=")):
                env = dict(os.environ, XLA_FLAGS=flags, JITBMM_STAND_IN="off", JITBMM_TUNE="never", JITBMM_LOG="debug",
                           XLA_PYTHON_CLIENT_PREALLOCATE="false", PYTHONPATH=os.pathsep.join(filter(None, sys.path)))
                done = subprocess.run([sys.executable, "-c", GRAPH_STEP, f"{tmp}/{name}.npz"], env=env,
                                      capture_output=True, text=True, timeout=600)
                self.assertEqual(done.returncode, 0, done.stderr[-3000:])
                runs[name] = np.load(f"{tmp}/{name}.npz")
                recorded[name] = {t for t in GRAPH_TARGETS
                                  if f"a call of jitbmm_{t} recorded into a CUDA graph" in done.stderr}
            self.assertEqual(recorded["graphs"], set(GRAPH_TARGETS), "the jitbmm calls XLA recorded into CUDA graphs")
            self.assertEqual(recorded["plain"], set(), "calls recorded without command buffers")
            self.assertEqual(sorted(runs["graphs"].files), sorted(runs["plain"].files))
            for key in runs["plain"].files:
                got, want = runs["graphs"][key], runs["plain"][key]
                with self.subTest(result=key):
                    if want.dtype.kind == "i":
                        np.testing.assert_array_equal(got, want)
                    else:
                        self.assert_close(got, want, rtol=1e-6, atol=1e-6)

    def test_first_calls_of_every_chain_strategy_from_empty_caches(self):
        """Each chain strategy's first calls under jit in a process of its own whose caches are empty, so that a
        stand-in runs the calls its chosen strategy is not built for yet: the stepped strategy's for an HMM of many
        sequences sharing a table, the chunked one's for one long CRF chain, the sequential one's for a batch of CRF
        chains. Every call takes its scratch from the workspace sized when it was traced, whichever strategy runs it;
        run plainly and with XLA recording the calls into command buffers, each call's values, gradients and Viterbi
        paths must match float64 references, on the first call and on calls after the plans had time to settle."""
        for name, flags in (("plain", "--xla_gpu_enable_command_buffer="),
                            ("graphs", "--xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL "
                                       "--xla_gpu_graph_min_graph_size=1")):
            with self.subTest(run=name), tempfile.TemporaryDirectory() as cache:
                env = dict(os.environ, XLA_FLAGS=flags, JITBMM_STAND_IN="on", JITBMM_CACHE_DIR=cache,
                           CUDA_CACHE_DISABLE="1", JITBMM_TUNE="never", XLA_PYTHON_CLIENT_PREALLOCATE="false",
                           PYTHONPATH=os.pathsep.join(filter(None, sys.path)))
                try:
                    done = subprocess.run([sys.executable, "-c", FIRST_CALLS], env=env, capture_output=True,
                                          text=True, timeout=300)
                except subprocess.TimeoutExpired as e:  # what it printed says how far it came
                    said = [x.decode() if isinstance(x, bytes) else x or "" for x in (e.stdout, e.stderr)]
                    self.fail(f"no answer within {e.timeout} s: " + said[0][-3000:] + said[1][-3000:])
                self.assertEqual(done.returncode, 0, done.stdout[-3000:] + done.stderr[-3000:])

# The calls of test_first_calls_of_every_chain_strategy_from_empty_caches, in a process of its own: three calls of one
# jitted step, the first at once, the others after waiting for the chosen strategies' builds; each against float64.
FIRST_CALLS = """
import time
begun = time.perf_counter()
import numpy as np
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
import jitbmm.jax as jj
from jax_cases import reference_crf

def crf(pot, lengths):  # float64 log partition of chains [B, T - 1, C, C], each read at its length
    B, C = pot.shape[0], pot.shape[-1]
    def step(alpha, p):
        alpha = jax.nn.logsumexp(alpha[:, None, :] + p, -1)
        return alpha, jax.nn.logsumexp(alpha, -1)
    _, later = jax.lax.scan(step, jnp.zeros((B, C), pot.dtype), pot.swapaxes(0, 1))
    scores = jnp.concatenate([jnp.full((1, B), jnp.log(C), pot.dtype), later], 0)
    return scores[lengths - 1, jnp.arange(B)]

def hmm(e, t, i):  # float64 log-likelihood of whole sequences sharing the table t [to, from]
    def step(alpha, et):
        return jax.nn.logsumexp(alpha[:, None, :] + t, -1) + et, None
    alpha, _ = jax.lax.scan(step, i + e[:, 0], e[:, 1:].swapaxes(0, 1))
    return jax.nn.logsumexp(alpha, -1)

rng = np.random.default_rng(0)
f32 = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)
chunked, chunked_lengths = f32(1, 1023, 40, 40), jnp.asarray([1024])
batch, batch_lengths = f32(16, 64, 40, 40), jnp.asarray(rng.integers(1, 66, 16))
e, t, i = f32(512, 9, 512), f32(512, 512), f32(512)

def step(chunked, batch, e, t, i):
    out = {}
    out["chunked"], out["chunked_grad"] = jax.value_and_grad(
        lambda p: jj.chain_log_partition(p, chunked_lengths).sum())(chunked)
    out["chunked_best"], out["chunked_path"] = jj.chain_viterbi(chunked, chunked_lengths)
    out["batch"], out["batch_grad"] = jax.value_and_grad(
        lambda p: jj.chain_log_partition(p, batch_lengths).sum())(batch)
    out["hmm"], grads = jax.value_and_grad(lambda *x: jj.hmm_log_partition(*x).sum(), (0, 1, 2))(e, t, i)
    out["hmm_grad_e"], out["hmm_grad_t"], out["hmm_grad_i"] = grads
    return out

# The float64 references run on the CPU: XLA's GPU compiler spent minutes on the scans' gradients, longer than
# this process may take.
f64 = lambda x: jax.device_put(np.asarray(x, np.float64), jax.devices("cpu")[0])
want = {}
want["chunked"], want["chunked_grad"] = jax.value_and_grad(lambda p: crf(p, chunked_lengths).sum())(f64(chunked))
best, path = reference_crf(chunked, chunked_lengths, "max_plus")
want["batch"], want["batch_grad"] = jax.value_and_grad(lambda p: crf(p, batch_lengths).sum())(f64(batch))
want["hmm"], grads = jax.value_and_grad(lambda *x: hmm(*x).sum(), (0, 1, 2))(f64(e), f64(t), f64(i))
want["hmm_grad_e"], want["hmm_grad_t"], want["hmm_grad_i"] = grads
scores = ("chunked", "batch", "hmm")

f = jax.jit(step)
failed = []
start = time.perf_counter()
print(f"references in {start - begun:.1f} s", flush=True)
for call, wait in enumerate((0, 60, 0)):
    time.sleep(wait)
    print(f"call {call} starts {time.perf_counter() - start:.1f} s in", flush=True)
    got = f(chunked, batch, e, t, i)
    jax.block_until_ready(got)
    print(f"call {call} done {time.perf_counter() - start:.1f} s in", flush=True)
    for key, ref in want.items():
        g, r = np.asarray(got[key], np.float64), np.asarray(ref, np.float64)
        error = float(np.abs(g - r).max()) / max(1.0, float(np.abs(r).max()))
        print(f"call {call} {key}: {error:.2e}")
        if not error <= (1e-5 if key in scores else 1e-4):
            failed.append(f"call {call} {key}")
    if not np.allclose(np.asarray(got["chunked_best"], np.float64), best, rtol=1e-5, atol=1e-5):
        failed.append(f"call {call} chunked_best")
    if not np.array_equal(np.asarray(got["chunked_path"]), path):
        failed.append(f"call {call} chunked_path")
assert not failed, failed
"""

# Every handler the step of test_inside_xla_cuda_graphs calls.
GRAPH_TARGETS = ("bmm", "bmm_backward", "chain", "chain_backward", "hmm", "hmm_backward", "chain_expectation",
                 "chain_expectation_backward", "hmm_expectation", "hmm_expectation_backward", "chain_kbest",
                 "chain_sample", "hmm_kbest", "hmm_sample")

# That step, in a process of its own (XLA reads XLA_FLAGS once): three draws of inputs through one jitted function,
# its results saved to argv[1].
GRAPH_STEP = """
import sys
import numpy as np
import jax, jax.numpy as jnp
import jitbmm.jax as jj

def step(a, p, e, t, i, lengths, key):
    prod = lambda a: jj.logbmm(a, a.swapaxes(-1, -2))
    out, g_a = prod(a), jax.grad(lambda a: prod(a).sum())(a)
    best = jj.maxbmm(a, a.swapaxes(-1, -2))
    g_best = jax.grad(lambda a: jj.maxbmm(a, a.swapaxes(-1, -2)).sum())(a)
    z, g_p = jax.value_and_grad(lambda p: jj.chain_log_partition(p, lengths).sum())(p)
    score, path = jj.chain_viterbi(p, lengths)
    h, g_h = jax.value_and_grad(lambda e, t, i: jj.hmm_log_partition(e, t, i, lengths).sum(), (0, 1, 2))(e, t, i)
    kl, g_kl = jax.value_and_grad(lambda p: jj.chain_kl(p, 0.5 * p, lengths).sum())(p)
    scores, paths = jj.chain_kbest(p, 3, lengths)
    samples = jj.chain_sample(p, 5, key, lengths)  # its seed read on the device: the key of each draw
    hmm_scores, hmm_paths = jj.hmm_kbest(e, t, i, 3, lengths)
    hmm_samples = jj.hmm_sample(e, t, i, 5, key, lengths)
    hmm_kl, g_hmm_kl = jax.value_and_grad(lambda e, t, i: jj.hmm_kl(e, t, i, 0.5 * e, t, 0.5 * i, lengths).sum(),
                                          (0, 1, 2))(e, t, i)
    return dict(out=out, g_a=g_a, best=best, g_best=g_best, z=z, g_p=g_p, score=score, path=path, h=h,
                g_e=g_h[0], g_t=g_h[1], g_i=g_h[2], kl=kl, g_kl=g_kl, scores=scores, paths=paths, samples=samples,
                hmm_scores=hmm_scores, hmm_paths=hmm_paths, hmm_samples=hmm_samples, hmm_kl=hmm_kl,
                g_hmm_kl_e=g_hmm_kl[0], g_hmm_kl_t=g_hmm_kl[1], g_hmm_kl_i=g_hmm_kl[2])

f = jax.jit(step)
saved = {}
for draw in range(3):
    rng = np.random.default_rng(draw)
    x = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)
    lengths = jnp.asarray(rng.integers(1, 17, 6), jnp.int32)
    results = f(x(4, 33, 40), x(6, 15, 9, 9), x(6, 16, 9), x(9, 9), x(9), lengths, jax.random.key(draw))
    saved.update({f"{k}_{draw}": np.asarray(v) for k, v in results.items()})
np.savez(sys.argv[1], **saved)
"""


if __name__ == "__main__":
    sys.exit(main(needs_gpu=True))
