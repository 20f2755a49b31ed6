"""jitbmm.jax's own work, without a GPU (the python_jax_contract CTest entry, run in CI): its handlers replaced by a
jnp model of the contract they keep (the C ABI's, include/jitbmm/c_api.h: the batch folded, log_z's two rows first,
the saved messages' size, the upstream gradients of log Z and E_p[F]), so that what the module adds around the
kernels runs on the CPU: the entropy's, cross-entropy's and KL's upstream gradients, the k best paths' gradient, the
vmap rules under vmap, nested vmap, vmap of grad and jacrev (which runs a backward a row at a time), and the count and
log-probability of paths, against the enumeration of every path; the HMM form's k best paths' gradient and vmap. The
handlers themselves are python_jax_gpu's. Exits 77 ("skipped") without jax."""

import sys
import unittest
from unittest import mock

import numpy as np

import package_under_test  # noqa: E402

package_under_test.import_path()

from jax_cases import (hmm_potentials, jax, jnp, main, path_scores, reference_divergence,  # noqa: E402
                       reference_hmm_divergence, reference_kbest)


def log_partition(p, L):
    """log Z [B] of chains p [B, T - 1, C, C] read to lengths L [B], in jnp."""
    alpha = jnp.zeros((p.shape[0], p.shape[-1]), p.dtype)
    for t in range(p.shape[1]):
        alpha = jnp.where((t < L - 1)[:, None], jax.nn.logsumexp(alpha[:, None, :] + p[:, t], -1), alpha)
    return jax.nn.logsumexp(alpha, -1)


def expectation(kind, p, f, L):
    """(log Z [B] or [2, B], E_p[F] [B]) as the library computes them: F a path's sum of f (p itself, q, or p - q)."""
    marginals = jax.grad(lambda p: log_partition(p, L).sum())(p)
    if kind == 0:
        return log_partition(p, L), (marginals * jax.lax.stop_gradient(p)).sum((1, 2, 3))
    field = f if kind == 1 else p - f
    return jnp.stack([log_partition(p, L), log_partition(f, L)]), (marginals * field).sum((1, 2, 3))


def hmm_log_partition(e, t, i, L):
    """log Z [B] of HMMs whose tables are one per sequence (e [B, T, C], t [B, C, C], i [B, C]) read to lengths L."""
    alpha = i + e[:, 0]
    for s in range(1, e.shape[1]):
        alpha = jnp.where((s < L)[:, None], jax.nn.logsumexp(alpha[:, None, :] + t, -1) + e[:, s], alpha)
    return jax.nn.logsumexp(alpha, -1)


def hmm_expectation(kind, p, f, L):
    """(log Z [B] or [2, B], E_p[F] [B]) of HMMs p and a field f (three tables each, one per sequence) as the library
    computes them: F a path's score under the field's tables (p's own, q's, or p's minus q's), whose expectation is the
    tables' expected counts (log Z's gradients) times the field's entries."""
    counts = jax.grad(lambda *x: hmm_log_partition(*x, L).sum(), (0, 1, 2))(*p)

    def expected(field):
        return sum((c * x).sum(tuple(range(1, x.ndim))) for c, x in zip(counts, field))

    if kind == 0:
        return hmm_log_partition(*p, L), expected(jax.lax.stop_gradient(p))
    field = f if kind == 1 else tuple(a - b for a, b in zip(p, f))
    return jnp.stack([hmm_log_partition(*p, L), hmm_log_partition(*f, L)]), expected(field)


def score_bytes(dtype):
    """The bytes of a score (and of a saved message) of inputs of `dtype`: float32 for half inputs."""
    return 4 if dtype in (jnp.float16, jnp.bfloat16) else jnp.dtype(dtype).itemsize


def hmm_model(target, results, *args, **attrs):
    """The contract of jitbmm_xla_hmm_expectation and its backward, as model's below of the CRF form's: the tables
    folded into the batch (a shared one read for every sequence), q's absent for the entropy."""
    kind, (tables, lengths) = int(attrs["kind"]), (args[:6], args[6])
    *batch, T, C = tables[0].shape
    B = int(np.prod(batch, dtype=np.int64))
    L = jnp.full((B,), T) if lengths.shape == (0,) else lengths.reshape(B, 2)[:, 0]
    assert (kind == 0) == all(x.shape == (0,) for x in tables[3:]), "the entropy alone takes no second chain"
    assert kind == 0 or all(p.shape == q.shape for p, q in zip(tables[:3], tables[3:])), "q's tables laid out as p's"

    def unfold(e, t, i):
        return (e.reshape(B, T, C), t.reshape(B, C, C) if t.ndim > 2 else jnp.broadcast_to(t, (B, C, C)),
                i.reshape(B, C) if i.ndim > 1 else jnp.broadcast_to(i, (B, C)))

    def forward(*x):  # p's tables, then q's but for the entropy
        p = unfold(*x[:3])
        return hmm_expectation(kind, p, p if kind == 0 else unfold(*x[3:]), L)

    # Both sweeps' messages in the score dtype, then copies of p's and q's transition tables (stored [to][from]).
    copies = 0 if B == 0 or T == 1 or C == 1 else 2 * (B if tables[1].ndim > 2 else 1)
    tables_kept = copies * C * C * tables[0].dtype.itemsize
    saved_size = 2 * (2 if kind == 0 else 3) * B * T * C * score_bytes(tables[0].dtype) + tables_kept
    differentiated = tables[:3] if kind == 0 else tables
    if target == "hmm_expectation":
        assert results[2].shape in ((0,), (saved_size,)), (results[2].shape, saved_size)
        log_z, mean = forward(*differentiated)
        return (log_z.reshape(results[0].shape), mean.reshape(results[1].shape),
                jnp.zeros(results[2].shape, results[2].dtype))
    saved, log_z, mean, grad_log_z, grad_mean = args[7:]
    if not (saved.shape == (saved_size,) and log_z.size == (1 if kind == 0 else 2) * B and mean.size == B and
            (grad_log_z.shape == (0,) or grad_log_z.size == log_z.size)):
        return tuple(jnp.full(r.shape, jnp.nan, r.dtype) for r in results)  # another problem's, as model's below
    cotangent = (jnp.zeros(log_z.shape) if grad_log_z.shape == (0,) else grad_log_z).reshape(-1, B)
    cotangent = (cotangent[0] if kind == 0 else cotangent, grad_mean.reshape(B))
    want, pullback = jax.vjp(forward, *differentiated)
    same = jnp.allclose(log_z.reshape(-1), want[0].reshape(-1)) & jnp.allclose(mean.reshape(-1), want[1])
    grads = [jnp.where(same, g, jnp.nan) for g in pullback(cotangent)]
    return (*grads, *[jnp.zeros((0,), x.dtype) for x in tables[len(grads):]])


def unfold(pot, lengths):
    B, n, C = int(np.prod(pot.shape[:-3], dtype=np.int64)), pot.shape[-3], pot.shape[-1]
    L = jnp.full((B,), n + 1) if lengths.shape == (0,) else lengths.reshape(B, 2)[:, 0]
    return pot.reshape(B, n, C, C), L, B


def product(semiring, a, b):
    """out [B, M, N] and argmax of the folded product as the handlers give them: an operand of two dimensions is one
    matrix for every batch."""
    a3, b3 = (x.reshape(-1, *x.shape[-2:]) if x.ndim > 2 else x[None] for x in (a, b))
    assert a.ndim == 2 or b.ndim == 2 or a3.shape[0] == b3.shape[0], "a, b: one batch"
    terms = a3[:, :, :, None] + b3[:, None, :, :]
    return (jax.nn.logsumexp(terms, 2) if semiring == "log" else terms.max(2)), terms.argmax(2).astype(jnp.int32)


operand_shapes = []  # of every product call: (target, a's shape, b's shape)


def model(target, results, *args, vmap_method=None, **attrs):
    """The handlers' contract in jnp; a result or operand of the wrong size fails when the call is traced."""
    del vmap_method
    if target in ("hmm_expectation", "hmm_expectation_backward"):
        return hmm_model(target, results, *args, **attrs)
    if target in ("bmm", "bmm_backward"):
        a, b, semiring = args[0], args[1], attrs["semiring"]
        operand_shapes.append((target, a.shape, b.shape))
        if target == "bmm":
            out, argmax = product(semiring, a, b)
            return out.reshape(results[0].shape), (argmax.reshape(results[1].shape) if results[1].shape != (0,) else
                                                   jnp.zeros((0,), jnp.int32))
        out, grad_out = args[2], args[4]
        _, pullback = jax.vjp(lambda a, b: product(semiring, a, b)[0], a, b)
        return pullback(grad_out.reshape(-1, *out.shape[-2:]).astype(a.dtype))
    if target in ("chain_expectation", "chain_expectation_backward"):
        kind = int(attrs["kind"])
        pot, field, lengths = args[:3]
        p, L, B = unfold(pot, lengths)
        f = p if kind == 0 else field.reshape(p.shape)
        assert (kind == 0) == (field.shape == (0,)), "the entropy alone takes no second chain"
        saved_size = 2 * (2 if kind == 0 else 3) * B * (p.shape[1] + 1) * p.shape[-1] * score_bytes(pot.dtype)
        if target == "chain_expectation":
            assert results[2].shape in ((0,), (saved_size,)), (results[2].shape, saved_size)
            log_z, mean = expectation(kind, p, f, L)
            return (log_z.reshape(results[0].shape), mean.reshape(results[1].shape),
                    jnp.zeros(results[2].shape, results[2].dtype))
        saved, log_z, mean, grad_log_z, grad_mean = args[3:]
        if not (saved.shape == (saved_size,) and log_z.size == (1 if kind == 0 else 2) * B and mean.size == B and
                (grad_log_z.shape == (0,) or grad_log_z.size == log_z.size)):
            # Operands of another problem than the potentials': a handler would refuse them. (custom_vmap traces the
            # unbatched body once for its results' shapes, with the forward's saved messages of the whole batch:
            # that trace's values are never used, so it gets NaN rather than an error.)
            return tuple(jnp.full(r.shape, jnp.nan, r.dtype) for r in results)
        cotangent = (jnp.zeros(log_z.shape) if grad_log_z.shape == (0,) else grad_log_z).reshape(-1, B)
        cotangent = (cotangent[0] if kind == 0 else cotangent, grad_mean.reshape(B))
        # log_z and mean must be this problem's forward's, in its layout: NaN otherwise.
        forward, pullback = jax.vjp(lambda p, f: expectation(kind, p, f, L), p, f)
        same = jnp.allclose(log_z.reshape(-1), forward[0].reshape(-1)) & jnp.allclose(mean.reshape(-1), forward[1])
        gp, gf = (jnp.where(same, g, jnp.nan) for g in pullback(cotangent))
        if kind == 0:  # the field is p itself, held fixed: its gradient is not asked for
            (gp,) = jax.vjp(lambda p: expectation(0, p, p, L), p)[1](cotangent)
            return jnp.where(same, gp, jnp.nan).reshape(pot.shape), jnp.zeros((0,), pot.dtype)
        return gp.reshape(pot.shape), gf.reshape(field.shape)
    if target == "chain_kbest":
        pot, lengths = args
        k, (B, n, C) = int(attrs["k"]), (int(np.prod(pot.shape[:-3], dtype=np.int64)), pot.shape[-3], pot.shape[-1])

        def host(p, l):
            scores, paths = reference_kbest(np.asarray(p).reshape(B, n, C, C),
                                            None if l.shape == (0,) else np.asarray(l).reshape(B, 2)[:, 0], k)
            return scores.astype(results[0].dtype).reshape(results[0].shape), paths.astype(np.int32).reshape(
                results[1].shape)

        return jax.pure_callback(host, results, pot, lengths)
    if target == "hmm_kbest":  # the CRF form's on the formed potentials (the tests' lengths are at least 2)
        e, t, i, lengths = args
        k, (T, C) = int(attrs["k"]), e.shape[-2:]
        B = int(np.prod(e.shape[:-2], dtype=np.int64))

        def host(e, t, i, l):
            t, i = np.asarray(t), np.asarray(i)
            pot = hmm_potentials(np.asarray(e).reshape(B, T, C), t.reshape(B, C, C) if t.ndim > 2 else t,
                                 i.reshape(B, C) if i.ndim > 1 else i)
            scores, paths = reference_kbest(pot, None if l.shape == (0,) else np.asarray(l).reshape(B, 2)[:, 0], k)
            return scores.astype(results[0].dtype).reshape(results[0].shape), paths.astype(np.int32).reshape(
                results[1].shape)

        return jax.pure_callback(host, results, e, t, i, lengths)
    if target in ("chain", "chain_backward"):  # the log-partition's, for the chains' vmap rules
        pot, lengths = args[:2]
        p, L, B = unfold(pot, lengths)
        if target == "chain":
            return (log_partition(p, L).reshape(results[0].shape), jnp.zeros(results[1].shape, results[1].dtype),
                    jnp.zeros(results[2].shape, results[2].dtype))
        saved, grad_score = args[2], args[4]
        import jitbmm._jax_chains as chains
        if saved.size != chains._saved_bytes("log", "f64", "crf", B, p.shape[1] + 1, p.shape[-1], lengths.shape != (0,),
                                             False, False):
            return jnp.full(results.shape, jnp.nan, results.dtype)  # another problem's messages, as above
        marginals = jax.grad(lambda p: log_partition(p, L).sum())(p)
        return (marginals * grad_score.reshape(B, 1, 1, 1)).reshape(pot.shape)
    raise NotImplementedError(target)


class ContractTest(unittest.TestCase):
    def setUp(self):
        import jitbmm._jax_chains as chains
        import jitbmm._jax_distributions as distributions
        import jitbmm._jax_hmm_divergence as hmm_divergence
        import jitbmm.jax as jj
        self.jj = jj
        for module in (jj, chains, distributions, hmm_divergence):
            for name, value in (("call", model), ("check_on_gpu", lambda **arrays: None)):
                patch = mock.patch.object(module, name, value)
                patch.start()
                self.addCleanup(patch.stop)
        key = jax.random.split(jax.random.PRNGKey(7), 2)
        self.p = jax.random.normal(key[0], (2, 3, 3, 3, 3), jnp.float64) * 2
        self.q = jax.random.normal(key[1], (2, 3, 3, 3, 3), jnp.float64)
        self.lengths = jnp.asarray([4, 1, 3])

    def close(self, got, want):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-9, atol=1e-9)

    def functions(self):
        jj, L = self.jj, self.lengths
        return (("entropy", lambda p, q: jj.chain_entropy(p, L)),
                ("cross_entropy", lambda p, q: jj.chain_cross_entropy(p, q, L)),
                ("kl", lambda p, q: jj.chain_kl(p, q, L)))

    def test_values_and_gradients(self):
        p, q, L = self.p[0], self.q[0], self.lengths
        kinds = self.functions()

        def each(divergence):  # every kind's value and gradients, in one compile
            return [(divergence(kind, f)(p, q), jax.grad(lambda p, q: divergence(kind, f)(p, q).sum(),
                                                         argnums=(0, 1))(p, q)) for kind, f in kinds]

        got = jax.jit(lambda: each(lambda kind, f: f))()
        want = jax.jit(lambda: each(lambda kind, f: lambda p, q: reference_divergence(kind, p, q, L)))()
        for (kind, _), (value, grads), (want_value, want_grads) in zip(kinds, got, want):
            with self.subTest(kind=kind):
                self.close(value, want_value)
                self.close(grads[0], want_grads[0])
                if kind != "entropy":
                    self.close(grads[1], want_grads[1])

    def test_hmm_divergences(self):
        """hmm_entropy, hmm_cross_entropy and hmm_kl against the enumeration of every path: values and every table's
        gradient, the tables shared, one per sequence, or mixed (a table p shares and q has one of per sequence: the
        shared one broadcast, its gradient summed back), ragged lengths with one of 1; then the vmap rules: vmap of
        grad with shared tables (each instance's gradient its own), a vmapped forward where only some tables are
        vmapped, jacrev (the backward a row at a time) and nested vmap."""
        jj, L = self.jj, self.lengths
        B, T, C = 3, 4, 3
        key = jax.random.split(jax.random.PRNGKey(11), 10)
        normal = [jax.random.normal(k, shape, jnp.float64) for k, shape in zip(key, [(B, T, C), (B, T, C), (C, C),
                  (C, C), (C,), (C,), (B, C, C), (B, C, C), (B, C), (B, C)])]
        e, qe, (t, qt), (i, qi), (bt, bqt), (bi, bqi) = normal[0] * 2, normal[1], normal[2:4], normal[4:6], \
            normal[6:8], normal[8:10]
        kinds = (("entropy", lambda *x: jj.hmm_entropy(*x[:3], L)),
                 ("cross_entropy", lambda *x: jj.hmm_cross_entropy(*x, L)), ("kl", lambda *x: jj.hmm_kl(*x, L)))

        def reference(kind):
            return lambda *x: reference_hmm_divergence(kind, x[:3], None if kind == "entropy" else x[3:], L)

        def each(divergence, tables):  # every kind's value and gradients, in one compile
            return [(divergence(kind, f)(*tables), jax.grad(lambda *x: divergence(kind, f)(*x).sum(),
                                                            argnums=tuple(range(6)))(*tables)) for kind, f in kinds]

        for layout, tables in (("shared", (e, t, i, qe, qt, qi)), ("one per sequence", (e, bt, bi, qe, bqt, bqi)),
                               ("mixed", (e, t, bi, qe, bqt, qi))):
            got = jax.jit(lambda *x: each(lambda kind, f: f, x))(*tables)
            want = jax.jit(lambda *x: each(lambda kind, f: reference(kind), x))(*tables)
            for (kind, _), (value, grads), (want_value, want_grads) in zip(kinds, got, want):
                with self.subTest(layout=layout, kind=kind):
                    self.close(value, want_value)
                    for g, w in zip(grads[:3] if kind == "entropy" else grads, want_grads):
                        self.close(g, w)
        # vmap of grad, the tables shared: each vmapped instance's gradients its own.
        es, qes = jnp.stack([e, e * 0.5]), jnp.stack([qe, -qe])
        axes = (0, None, None, 0, None, None)
        cross = jax.grad(lambda *x: jj.hmm_cross_entropy(*x, L).sum(), argnums=tuple(range(6)))
        want = jax.grad(lambda *x: reference("cross_entropy")(*x).sum(), argnums=tuple(range(6)))
        for g, w in zip(jax.jit(jax.vmap(cross, axes))(es, t, i, qes, qt, qi),
                        jax.jit(jax.vmap(want, axes))(es, t, i, qes, qt, qi)):
            self.close(g, w)
        # Vmapped forwards: p's transitions alone vmapped (q's then one per sequence too), and the emissions alone
        # (each pair of shared tables stays one).
        ts = jnp.stack([t, t.T])
        kl = jax.jit(jax.vmap(lambda t: jj.hmm_kl(e, t, i, qe, qt, qi, L)))(ts)
        self.close(kl, jnp.stack([reference("kl")(e, x, i, qe, qt, qi) for x in ts]))
        kl = jax.jit(jax.vmap(lambda e: jj.hmm_kl(e, t, i, qe, qt, qi, L)))(es)
        self.close(kl, jnp.stack([reference("kl")(x, t, i, qe, qt, qi) for x in es]))
        for f in (lambda e, t: jj.hmm_kl(e, t, i, qe, qt, qi, L), lambda e, t: jj.hmm_entropy(e, t, i, L)):
            jac = jax.jit(jax.jacrev(f, argnums=(0, 1)))(e, t)
            row = jax.jit(lambda e, t, b: jax.grad(lambda e, t: f(e, t)[b], argnums=(0, 1))(e, t))
            for b in range(B):
                for j, r in zip(jac, row(e, t, b)):
                    self.close(j[b], r)
        nested = jax.jit(jax.vmap(jax.vmap(jax.grad(lambda *x: jj.hmm_entropy(*x).sum(), argnums=(0, 1, 2)))))(
            e[:, None], bt[:, None], bi[:, None])  # one sequence an instance, of T positions
        want = jax.grad(lambda *x: reference_hmm_divergence("entropy", x, None, None).sum(), argnums=(0, 1, 2))(
            e, bt, bi)
        for g, w in zip(nested, want):
            self.close(g[:, 0], w)

    def test_lengths_of_every_integer_dtype(self):
        """Lengths of any integer dtype reach the handlers as the same int64 values (int32 pairs); one outside int32's
        range is clipped out of range, never wrapped into it."""
        from jitbmm._jax_support import lengths_operand
        p, L = self.p[0], self.lengths
        want = self.jj.chain_entropy(p, L)
        for dtype in (jnp.int8, jnp.int16, jnp.int32, jnp.int64, jnp.uint8, jnp.uint16, jnp.uint32, jnp.uint64):
            with self.subTest(dtype=dtype.__name__):
                self.close(self.jj.chain_entropy(p, L.astype(dtype)), want)
                info = jnp.iinfo(dtype)
                edge = [info.min, info.max]
                top = min(int(info.max), 2**31 - 1)
                self.assertEqual(lengths_operand(jnp.asarray(edge, dtype), (2,)).tolist(),
                                 [[-1, -1] if info.min < 0 else [0, 0], [top, 0]])
        # A host array of 64-bit lengths, which JAX without x64 would wrap into int32: clipped first.
        for dtype in (np.int64, np.uint64):
            with self.subTest(host=np.dtype(dtype).name):
                self.assertEqual(lengths_operand(np.array([2**32 + 3, 3], dtype), (2,)).tolist(), [[2**31 - 1, 0],
                                                                                                   [3, 0]])

    def test_vmap_rules(self):
        """Each rule once: the two rows of log Z under vmap of grad (the cross-entropy), a backward a row of upstream
        gradients at a time (jacrev of KL and of the log-partition), nested vmap of the entropy's gradient, and
        sequences of one position beside an unbatched second chain."""
        jj, p, q, L = self.jj, self.p, self.q, self.lengths
        kl = jax.jit(jax.vmap(lambda p, q: jj.chain_kl(p, q, L)))(p, q)
        self.close(kl, jax.jit(jax.vmap(lambda p, q: reference_divergence("kl", p, q, L)))(p, q))
        cross = jax.jit(lambda p, q: jj.chain_cross_entropy(p, q, L).sum())
        grads = jax.jit(jax.vmap(jax.grad(cross, argnums=(0, 1)), (0, None)))(p, q[0])
        want = jax.jit(jax.vmap(jax.grad(lambda p, q: reference_divergence("cross_entropy", p, q, L).sum(),
                                         argnums=(0, 1)), (0, None)))(p, q[0])  # the reference's own vmap
        self.close(grads[0], want[0])
        self.close(grads[1], want[1])
        for f in (lambda p: jj.chain_kl(p, q[0], L), lambda p: jj.chain_log_partition(p, L)):
            jac = jax.jit(jax.jacrev(f))(p[0])
            row = jax.jit(lambda p, b: jax.grad(lambda p: f(p)[b])(p))  # b traced: one compile for the three
            for b in range(3):
                self.close(jac[b], row(p[0], b))
        nested = jax.jit(jax.vmap(jax.vmap(jax.grad(lambda p: jj.chain_entropy(p).sum()))))(p[:, :, None])
        self.close(nested[:, :, 0], jax.jit(jax.grad(lambda p: reference_divergence("entropy", p, None, None).sum()))(
            p.reshape(6, 3, 3, 3)).reshape(p.shape))
        self.close(jax.vmap(jj.chain_kl, (0, None))(p[:, :, :0], q[0, :, :0]), np.zeros((2, 3)))
        with self.assertRaisesRegex(NotImplementedError, "pullback returned out of jax.vmap"):
            pullbacks = jax.vmap(lambda p: jax.vjp(lambda p: jj.chain_log_partition(p, L), p)[1])(p)
            jax.vmap(lambda pullback, g: pullback(g))(pullbacks, jnp.ones((2, 3)))
        for f in (jj.chain_log_partition, jj.chain_entropy):  # a pullback vmapped over no rows: a scalar's rows
            with self.subTest(f"{f.__name__}'s pullback over no rows"):  # have the shape of an absent operand
                pullback = jax.vjp(f, p[0, 0])[1]
                self.assertEqual(jax.jit(jax.vmap(pullback))(jnp.zeros((0,)))[0].shape, (0, *p.shape[2:]))
                self.assertEqual(jax.jacrev(lambda x: f(x)[None][:0])(p[0, 0]).shape, (0, *p.shape[2:]))

    def test_a_shared_matrix(self):
        """A product with a matrix shared by every batch, on either side: values and gradients (the matrix's the sum
        over the batch) against jnp under jit, grad, vmap of the forward, vmap of grad (each instance's own gradient)
        and grad of vmap; the handlers get the matrix as it is wherever nothing asks for one per instance. A batch
        broadcast only in part is copied to the whole batch."""
        jj = self.jj
        key = jax.random.split(jax.random.PRNGKey(3), 3)
        xs, w = jax.random.normal(key[0], (2, 3, 4, 5), jnp.float64), jax.random.normal(key[1], (5, 6), jnp.float64)
        weights = jax.random.normal(key[2], (2, 3, 4, 6), jnp.float64)

        def reference(semiring, a, b):
            terms = a[..., :, :, None] + b[..., None, :, :]
            return jax.nn.logsumexp(terms, -2) if semiring == "log" else terms.max(-2)

        for semiring in ("log", "max_plus"):
            def ours(x, w):
                return jj.semiring_bmm(x, w, semiring)

            def theirs(x, w):
                return reference(semiring, x, w)

            def loss(f):
                return lambda x, w: (f(x, w) * weights[0]).sum()

            def flipped(f):  # the matrix on the left: (x w)^T = w^T x^T
                return lambda x, w: f(w.T, x.swapaxes(-1, -2)).swapaxes(-1, -2)

            for side, f, g in (("right", ours, theirs), ("left", flipped(ours), flipped(theirs))):
                with self.subTest(semiring=semiring, matrix=side):
                    operand_shapes.clear()
                    x = xs[0]
                    self.close(jax.jit(f)(x, w), g(x, w))
                    for got, want in zip(jax.jit(jax.grad(loss(f), (0, 1)))(x, w), jax.grad(loss(g), (0, 1))(x, w)):
                        self.close(got, want)
                    self.close(jax.jit(jax.vmap(f, (0, None)))(xs, w), jax.vmap(g, (0, None))(xs, w))
                    self.assertTrue(all((5, 6) in shapes or (6, 5) in shapes for _, *shapes in operand_shapes),
                                    operand_shapes)
                    per_instance = jax.jit(jax.vmap(jax.grad(loss(f), (0, 1)), (0, None)))(xs, w)
                    for got, want in zip(per_instance, jax.vmap(jax.grad(loss(g), (0, 1)), (0, None))(xs, w)):
                        self.close(got, want)

                    def summed(h):
                        return lambda xs, w: (jax.vmap(h, (0, None))(xs, w) * weights).sum()

                    for got, want in zip(jax.jit(jax.grad(summed(f), (0, 1)))(xs, w),
                                         jax.grad(summed(g), (0, 1))(xs, w)):
                        self.close(got, want)
            with self.subTest(semiring=semiring, broadcast="in part"):
                a, b = xs[:, :1], jax.random.normal(key[1], (3, 5, 6), jnp.float64)
                self.close(jax.jit(ours)(a, b), theirs(a, b))
                for got, want in zip(jax.grad(lambda a, b: ours(a, b).sum(), (0, 1))(a, b),
                                     jax.grad(lambda a, b: theirs(a, b).sum(), (0, 1))(a, b)):
                    self.close(got, want)

    def test_count_and_log_prob(self):
        jj, L = self.jj, self.lengths
        p = self.p[0].at[0, 1, 2, 0].set(-jnp.inf).at[2, 0, 1, 1].set(-jnp.inf)  # edges no path may take
        scores, canonical = path_scores(p, L)
        finite = canonical & np.isfinite(np.asarray(scores))
        self.close(jax.jit(lambda p: jj.chain_log_count(p, L))(p), np.log(finite.sum(-1)))
        self.close(jax.jit(jax.grad(lambda p: jj.chain_log_count(p, L).sum()))(p), np.zeros(p.shape))
        # The events: each sequence's best path's edges (zero past its length), and a second sample of the first
        # path of all_paths, which may take a -inf edge.
        T, C = p.shape[1] + 1, p.shape[-1]
        paths = np.stack([reference_kbest(p, L, 1)[1][:, 0], np.zeros((3, T), np.int64)])
        value = np.zeros((2, *p.shape))
        for s_, b, t in np.ndindex(2, 3, T - 1):
            if t < int(L[b]) - 1:
                value[s_, b, t, paths[s_, b, t + 1], paths[s_, b, t]] = 1
        value = jnp.asarray(value)

        # The derivative with respect to value is the potential inside each length where finite, value 0 or not.
        within = (np.arange(T - 1)[None, :] < (np.asarray(L) - 1)[:, None])[:, :, None, None]

        def reference(p, value):
            log_z = jax.nn.logsumexp(jnp.where(canonical, path_scores(p, L)[0], -jnp.inf), -1)
            taken = value != 0
            terms = jnp.where(taken, value * jnp.where(taken, p, 0), value * jnp.where(within & jnp.isfinite(p), p, 0))
            return terms.sum((-1, -2, -3)) - log_z

        self.close(jax.jit(lambda p, v: jj.chain_log_prob(p, v, L))(p, value), jax.jit(reference)(p, value))
        got = jax.jit(jax.grad(lambda p, v: jj.chain_log_prob(p, v, L)[0].sum(), argnums=(0, 1)))(p, value)
        want = jax.jit(jax.grad(lambda p, v: reference(p, v)[0].sum(), argnums=(0, 1)))(p, value)
        self.close(got[0], want[0])
        self.close(got[1], want[1])
        # Potentials padded with -inf past each length and a relaxed event (0.1 everywhere): value's gradient is the
        # potential inside the length and 0 past it, never NaN (0 · -inf).
        inside = jnp.asarray(np.broadcast_to(within, p.shape))
        padded = jnp.where(inside, self.p[0], -jnp.inf)
        g = jax.jit(jax.grad(lambda v: jj.chain_log_prob(padded, v, L).sum()))(jnp.full(p.shape, 0.1))
        self.close(g, jnp.where(inside, self.p[0], 0))

    def test_kbest_gradient(self):
        jj, p, L, k = self.jj, self.p[0], self.lengths, 5
        scores, paths = jj.chain_kbest(p, k, L)
        want_scores, want_paths = reference_kbest(p, L, k)
        self.close(scores, want_scores)
        np.testing.assert_array_equal(np.asarray(paths), want_paths)
        weights = jnp.arange(1.0, 3 * k + 1).reshape(3, k)
        def weighted(p):
            s = jj.chain_kbest(p, k, L)[0]
            return (jnp.where(jnp.isfinite(s), s, 0) * weights).sum()

        got = jax.grad(weighted)(p)
        want = np.zeros(p.shape)
        for b in range(3):
            for i in range(k):
                for t in range(int(L[b]) - 1):
                    if want_paths[b, i, t] >= 0:
                        want[b, t, want_paths[b, i, t + 1], want_paths[b, i, t]] += float(weights[b, i])
        self.close(got, want)
        vs, vp = jax.vmap(lambda p: jj.chain_kbest(p, 2))(self.p)
        for i in range(2):
            s, q = jj.chain_kbest(self.p[i], 2)
            self.close(vs[i], s)
            np.testing.assert_array_equal(np.asarray(vp[i]), np.asarray(q))


    def test_hmm_kbest_gradient_and_vmap(self):
        """hmm_kbest's gradient: each path's states, moves and first state (the transitions' and the initial table's
        summed over the sequences where shared, each sequence's own where not); its vmap rule, which makes a shared
        table every instance's."""
        jj = self.jj
        key = jax.random.split(jax.random.PRNGKey(3), 3)
        e = jax.random.normal(key[0], (2, 3, 4, 3), jnp.float64)
        L = jnp.asarray([[4, 2, 3], [3, 4, 2]])
        k = 4
        for batched in (False, True):
            t = jax.random.normal(key[1], (2, 3, 3, 3) if batched else (3, 3), jnp.float64)
            i = jax.random.normal(key[2], (2, 3, 3) if batched else (3,), jnp.float64)
            scores, paths = jj.hmm_kbest(e, t, i, k, L)
            self.assertEqual((scores.shape, paths.shape), ((2, 3, k), (2, 3, k, 4)))
            weights = jnp.arange(1.0, 6 * k + 1).reshape(2, 3, k)

            def weighted(e, t, i):
                s = jj.hmm_kbest(e, t, i, k, L)[0]
                return (jnp.where(jnp.isfinite(s), s, 0) * weights).sum()

            got = jax.grad(weighted, argnums=(0, 1, 2))(e, t, i)
            want = [np.zeros(x.shape) for x in (e, t, i)]
            for a in range(2):
                for b in range(3):
                    for r in range(k):
                        z, w = np.asarray(paths[a, b, r]), float(weights[a, b, r])
                        if z[0] < 0:
                            continue
                        (want[2][a, b] if batched else want[2])[z[0]] += w
                        for s in range(int(L[a, b])):
                            want[0][a, b, s, z[s]] += w
                            if s > 0:
                                (want[1][a, b] if batched else want[1])[z[s], z[s - 1]] += w
            for g, w in zip(got, want):
                self.close(g, w)
            axis = 0 if batched else None
            vs, vp = jax.vmap(lambda e, t, i: jj.hmm_kbest(e, t, i, 2), in_axes=(0, axis, axis))(e, t, i)
            for a in range(2):
                s, q = jj.hmm_kbest(e[a], t[a] if batched else t, i[a] if batched else i, 2)
                self.close(vs[a], s)
                np.testing.assert_array_equal(np.asarray(vp[a]), np.asarray(q))


if __name__ == "__main__":
    sys.exit(main(needs_gpu=False))
