"""jitbmm.jax without a GPU (the python_jax CTest entry, run in CI): the module imports, the library carries the
XLA FFI handlers and registers them, every function traces under jit, grad, vmap and checkpoint to the right shapes
and dtypes (abstract evaluation, nothing launched), each call declares the workspace the library sizes for it (on
the fake driver's device, which the CTest entry gives: JITBMM_LIBCUDA), and bad arguments raise errors naming the
argument, CPU arrays among them. Exits 77 ("skipped") where jax is not installed."""

import sys
import unittest
from unittest import mock

import package_under_test  # noqa: E402

package_under_test.import_path()

from jax_cases import jax, jnp, main  # noqa: E402


def spec(shape, dtype=None):
    return jax.ShapeDtypeStruct(shape, dtype or jnp.float32)


class TraceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import jitbmm.jax as jj
        cls.jj = jj

    def test_handlers_registered(self):
        major, minor = self.jj.ffi_api_version()
        self.assertEqual(major, 0)
        self.assertGreaterEqual(minor, 1)
        from jitbmm._jax_support import registered
        self.assertTrue(registered())

    def test_products_trace(self):
        jj = self.jj
        for f in (jj.logbmm, jj.maxbmm, jj.minbmm, jj.prodmaxbmm):
            out = jax.eval_shape(f, spec((4, 1, 8, 16)), spec((3, 16, 5)))
            self.assertEqual((out.shape, out.dtype), ((4, 3, 8, 5), jnp.float32))
        for dtype in (jnp.float16, jnp.bfloat16, jnp.float64):
            self.assertEqual(jax.eval_shape(jj.logbmm, spec((8, 3), dtype), spec((3, 2), dtype)).dtype, dtype)
        grads = jax.eval_shape(jax.grad(lambda a, b: jj.maxbmm(a, b).sum(), argnums=(0, 1)), spec((2, 8, 16)),
                               spec((16, 5)))
        self.assertEqual([g.shape for g in grads], [(2, 8, 16), (16, 5)])
        vm = jax.eval_shape(jax.vmap(jax.grad(lambda a, b: jj.logbmm(a, b).sum()), (0, None)), spec((6, 8, 16)),
                            spec((16, 5)))
        self.assertEqual(vm.shape, (6, 8, 16))
        jitted = jax.jit(lambda a, b: jj.semiring_bmm(a, b, "plus_times"))
        self.assertEqual(jax.eval_shape(jitted, spec((0, 8, 16)), spec((16, 5))).shape, (0, 8, 5))

    def test_a_shared_matrix_is_not_copied(self):
        """A matrix without a batch of its own (a weight shared by every batch) reaches the handlers as it is, under
        jit, grad and a vmap of the forward that does not map it: nothing the size of the batch times the matrix is
        formed. (A backward under vmap gives each vmapped instance its own gradient of the matrix, so there it is
        spread over the instances' batch: python_jax_contract checks its values.)"""
        import re
        jj = self.jj
        x, w, xs = spec((64, 8, 16)), spec((16, 5)), spec((6, 64, 8, 16))
        cases = (("forward", jax.jit(lambda x, w: jj.logbmm(x, w)).trace(x, w)),
                 ("grad", jax.jit(jax.grad(lambda x, w: jj.maxbmm(x, w).sum(), (0, 1))).trace(x, w)),
                 ("grad, the matrix first", jax.jit(jax.grad(lambda x, w: jj.logbmm(w.T, x.swapaxes(-1, -2)).sum(),
                                                             (0, 1))).trace(x, w)),
                 ("vmap", jax.jit(jax.vmap(lambda x, w: jj.logbmm(x, w), (0, None))).trace(xs, w)))
        for name, traced in cases:
            text = traced.lower(lowering_platforms=("cuda",)).as_text()
            calls = [line for line in text.splitlines() if "stablehlo.custom_call @jitbmm_bmm" in line]
            with self.subTest(name):
                self.assertTrue(calls)
                for line in calls:
                    self.assertRegex(line, r"tensor<(16x5|5x16)xf32>")
                shapes = set(re.findall(r"tensor<((?:\d+x)+)f32>", text))
                copies = [s for s in shapes if s.endswith(("16x5x", "5x16x")) and s.count("x") > 2]
                self.assertEqual(copies, [])

    def test_chains_trace(self):
        jj = self.jj
        p, lengths = spec((3, 9, 7, 7)), spec((3,), jnp.int32)
        self.assertEqual(jax.eval_shape(jj.chain_log_partition, p, lengths).shape, (3,))
        score, path = jax.eval_shape(jj.chain_viterbi, p)
        self.assertEqual((score.shape, path.shape, path.dtype), ((3,), (3, 10), jnp.int32))
        self.assertEqual(jax.eval_shape(jj.chain_log_partition, spec((3, 9, 7, 7), jnp.bfloat16)).dtype, jnp.float32)
        g = jax.eval_shape(jax.grad(lambda p: jax.checkpoint(jj.chain_log_partition)(p).sum()), p)
        self.assertEqual(g.shape, (3, 9, 7, 7))
        vv = jax.eval_shape(jax.vmap(jax.vmap(jax.grad(lambda p: jj.chain_log_partition(p).sum()))),
                            spec((2, 4, 3, 9, 7, 7)))
        self.assertEqual(vv.shape, (2, 4, 3, 9, 7, 7))

    def test_hmm_traces(self):
        jj = self.jj
        e, t, i = spec((3, 10, 7)), spec((7, 7)), spec((7,))
        self.assertEqual(jax.eval_shape(jj.hmm_log_partition, e, t, i).shape, (3,))
        grads = jax.eval_shape(jax.grad(lambda *x: jj.hmm_log_partition(*x).sum(), argnums=(0, 1, 2)), e, t, i)
        self.assertEqual([g.shape for g in grads], [(3, 10, 7), (7, 7), (7,)])
        # vmap of grad: a shared table's gradient is each vmapped instance's own.
        per = jax.eval_shape(jax.vmap(jax.grad(lambda *x: jj.hmm_log_partition(*x).sum(), argnums=(0, 1, 2)),
                                      (0, None, None)), spec((2, 3, 10, 7)), t, i)
        self.assertEqual([g.shape for g in per], [(2, 3, 10, 7), (2, 7, 7), (2, 7)])
        score, path = jax.eval_shape(jax.vmap(jj.hmm_viterbi, (0, None, None)), spec((2, 3, 10, 7)), t, i)
        self.assertEqual((score.shape, path.shape), ((2, 3), (2, 3, 10)))
        # Vmapped with nothing differentiated, a shared table reaches the handler as one table, not a copy per
        # sequence; differentiated, one per sequence (each instance's gradient its own).
        import re

        def tables(f):
            text = jax.jit(f).trace(spec((2, 3, 10, 7)), t, i).lower(lowering_platforms=("cuda",)).as_text()
            return [m.group(1) for m in re.finditer(r"custom_call @jitbmm_hmm\(.*?tensor<[0-9x]+xf32>, "
                                                    r"tensor<([0-9x]+)xf32>", text)]
        self.assertEqual(tables(jax.vmap(jj.hmm_log_partition, (0, None, None))), ["7x7"])
        grad = jax.vmap(jax.grad(lambda *x: jj.hmm_log_partition(*x).sum(), argnums=(0, 1, 2)), (0, None, None))
        self.assertEqual(tables(grad), ["2x3x7x7"])
        # jacrev over an empty batch: its backward a row at a time, of no rows.
        self.assertEqual(jax.eval_shape(jax.jacrev(jj.chain_log_partition), spec((0, 4, 5, 5))).shape,
                         (0, 0, 4, 5, 5))

    def test_distributions_trace(self):
        jj = self.jj
        p, q, lengths = spec((2, 3, 9, 7, 7)), spec((2, 3, 9, 7, 7)), spec((2, 3), jnp.int32)
        for value in (jax.eval_shape(jj.chain_entropy, p, lengths), jax.eval_shape(jj.chain_cross_entropy, p, q),
                      jax.eval_shape(jj.chain_kl, p, q, lengths)):
            self.assertEqual((value.shape, value.dtype), ((2, 3), jnp.float32))
        self.assertEqual(jax.eval_shape(jj.chain_entropy, spec((3, 9, 7, 7), jnp.float16)).dtype, jnp.float32)
        g = jax.eval_shape(jax.grad(lambda p: jax.checkpoint(jj.chain_entropy)(p).sum()), p)
        self.assertEqual(g.shape, p.shape)
        gp, gq = jax.eval_shape(jax.grad(lambda p, q: jj.chain_kl(p, q).sum(), argnums=(0, 1)), p, q)
        self.assertEqual((gp.shape, gq.shape), (p.shape, q.shape))
        # vmap of grad: the vmapped axis folded into the batch, the two log-partitions' rows kept apart from it.
        vg = jax.eval_shape(jax.vmap(jax.grad(lambda p, q: jj.chain_cross_entropy(p, q).sum(), argnums=(0, 1)),
                                     (0, None)), spec((4, 3, 9, 7, 7)), spec((3, 9, 7, 7)))
        self.assertEqual([x.shape for x in vg], [(4, 3, 9, 7, 7), (4, 3, 9, 7, 7)])
        scores, paths = jax.eval_shape(lambda p: jj.chain_kbest(p, 4, jnp.full((2, 3), 5)), p)
        self.assertEqual((scores.shape, scores.dtype, paths.shape, paths.dtype),
                         ((2, 3, 4), jnp.float32, (2, 3, 4, 10), jnp.int32))
        g = jax.eval_shape(jax.vmap(jax.grad(lambda p: jj.chain_kbest(p, 2)[0].sum())), spec((4, 9, 7, 7)))
        self.assertEqual(g.shape, (4, 9, 7, 7))
        key = jax.random.key(0)
        paths = jax.eval_shape(lambda p, l: jj.chain_sample(p, 5, key, l), p, lengths)
        self.assertEqual((paths.shape, paths.dtype), ((2, 3, 5, 10), jnp.int32))
        keys = jax.random.split(jax.random.PRNGKey(1), 4)  # a key a vmapped instance: a call each
        paths = jax.eval_shape(jax.vmap(lambda k, p: jj.chain_sample(p, 2, k)), keys, spec((4, 9, 7, 7)))
        self.assertEqual(paths.shape, (4, 2, 10))
        g = jax.eval_shape(jax.grad(lambda p: jj.chain_log_partition(p).sum() + 0 * jj.chain_sample(p, 2, key).sum()),
                           spec((3, 9, 7, 7)))  # the samples carry no gradient
        self.assertEqual(g.shape, (3, 9, 7, 7))
        self.assertEqual(jax.eval_shape(jj.chain_log_count, p, lengths).shape, (2, 3))
        logp = jax.eval_shape(jj.chain_log_prob, p, spec((5, 2, 3, 9, 7, 7)), lengths)
        self.assertEqual((logp.shape, logp.dtype), ((5, 2, 3), jnp.float32))
        for events in (jnp.bool_, jnp.int32):  # edge indicators as jitbmm.torch takes them
            logp = jax.eval_shape(jj.chain_log_prob, p, spec((2, 3, 9, 7, 7), events), lengths)
            self.assertEqual((logp.shape, logp.dtype), ((2, 3), jnp.float32))
        nested = jax.eval_shape(jax.vmap(jax.vmap(jax.grad(lambda p: jj.chain_entropy(p).sum()))),
                                spec((2, 4, 3, 9, 7, 7)))
        self.assertEqual(nested.shape, (2, 4, 3, 9, 7, 7))
        # jacrev: only the upstream gradients vmapped, the backward run a row at a time.
        for f in (jj.chain_entropy, lambda p: jj.chain_kl(p, p), jj.chain_log_partition):
            self.assertEqual(jax.eval_shape(jax.jacrev(f), spec((3, 9, 7, 7))).shape, (3, 3, 9, 7, 7))
        jac = jax.eval_shape(jax.jacrev(jj.hmm_log_partition, argnums=(0, 1)), spec((3, 10, 7)), spec((7, 7)),
                             spec((7,)))
        self.assertEqual([j.shape for j in jac], [(3, 3, 10, 7), (3, 7, 7)])
        # The HMM form's k best paths and samples, from its tables (shared, and one per sequence under vmap).
        e, t, i = spec((2, 3, 10, 7)), spec((7, 7)), spec((7,))
        scores, paths = jax.eval_shape(lambda e, t, i: jj.hmm_kbest(e, t, i, 4, jnp.full((2, 3), 5)), e, t, i)
        self.assertEqual((scores.shape, scores.dtype, paths.shape, paths.dtype),
                         ((2, 3, 4), jnp.float32, (2, 3, 4, 10), jnp.int32))
        g = jax.eval_shape(jax.vmap(jax.grad(lambda e, t, i: jj.hmm_kbest(e, t, i, 2)[0].sum(), (0, 1, 2))),
                           spec((4, 3, 10, 7)), spec((4, 7, 7)), spec((4, 7)))
        self.assertEqual([x.shape for x in g], [(4, 3, 10, 7), (4, 7, 7), (4, 7)])
        paths = jax.eval_shape(lambda e, t, i, l: jj.hmm_sample(e, t, i, 5, key, l), e, t, i, lengths)
        self.assertEqual((paths.shape, paths.dtype), ((2, 3, 5, 10), jnp.int32))
        # Sequences of one position: potentials of no elements are operands, not absent ones.
        one = jax.eval_shape(jax.vmap(jj.chain_kl, (0, None)), spec((2, 3, 0, 4, 4)), spec((3, 0, 4, 4)))
        self.assertEqual(one.shape, (2, 3))

    def test_hmm_divergences_trace(self):
        """The HMM form's entropy, cross-entropy and KL from the tables: values of the batch's shape, every table's
        gradient of its table's shape (a table p shares and q does not is broadcast for the call, its gradient summed
        back), vmap of grad (each instance's gradient of a shared table its own), jacrev and sequences of one
        position."""
        jj = self.jj
        e, t, i, bt, bi = spec((2, 3, 10, 7)), spec((7, 7)), spec((7,)), spec((2, 3, 7, 7)), spec((2, 3, 7))
        lengths = spec((2, 3), jnp.int32)
        for value in (jax.eval_shape(jj.hmm_entropy, e, t, i, lengths),
                      jax.eval_shape(jj.hmm_cross_entropy, e, t, i, e, bt, i),
                      jax.eval_shape(jj.hmm_kl, e, bt, bi, e, t, bi, lengths)):
            self.assertEqual((value.shape, value.dtype), ((2, 3), jnp.float32))
        self.assertEqual(jax.eval_shape(jj.hmm_kl, *(spec(x.shape, jnp.bfloat16) for x in (e, t, i, e, t, i))).dtype,
                         jnp.float32)
        six = tuple(range(6))
        grads = jax.eval_shape(jax.grad(lambda *x: jax.checkpoint(jj.hmm_kl)(*x).sum(), six), e, t, bi, e, bt, i)
        self.assertEqual([g.shape for g in grads], [e.shape, t.shape, bi.shape, e.shape, bt.shape, i.shape])
        grads = jax.eval_shape(jax.grad(lambda *x: jj.hmm_entropy(*x).sum(), (0, 1, 2)), e, t, i)
        self.assertEqual([g.shape for g in grads], [e.shape, t.shape, i.shape])
        per = jax.eval_shape(jax.vmap(jax.grad(lambda *x: jj.hmm_cross_entropy(*x).sum(), six),
                                      (0, None, None, None, None, 0)), spec((4, 3, 10, 7)), t, i, spec((3, 10, 7)), t,
                             spec((4, 7)))
        self.assertEqual([g.shape for g in per], [(4, 3, 10, 7), (4, 7, 7), (4, 7), (4, 3, 10, 7), (4, 7, 7), (4, 7)])
        nested = jax.eval_shape(jax.vmap(jax.vmap(jax.grad(lambda *x: jj.hmm_entropy(*x).sum(), (0, 1, 2)))),
                                spec((2, 4, 3, 10, 7)), spec((2, 4, 7, 7)), spec((2, 4, 7)))
        self.assertEqual([g.shape for g in nested], [(2, 4, 3, 10, 7), (2, 4, 7, 7), (2, 4, 7)])
        jac = jax.eval_shape(jax.jacrev(jj.hmm_kl, argnums=(0, 1, 5)), spec((3, 10, 7)), t, i, spec((3, 10, 7)), t, i)
        self.assertEqual([j.shape for j in jac], [(3, 3, 10, 7), (3, 7, 7), (3, 7)])
        one = jax.eval_shape(jax.vmap(jj.hmm_entropy, (0, None, None)), spec((2, 3, 1, 4)), spec((4, 4)), spec((4,)))
        self.assertEqual(one.shape, (2, 3))

    def test_lowers_for_cuda(self):
        """Lowered for CUDA (no GPU needed): each distribution's custom calls carry the int32 attribute its handler
        binds."""
        import re
        jj, p = self.jj, spec((3, 9, 7, 7))
        lowered = {
            "kind = 0": jax.jit(jax.grad(lambda p: jj.chain_entropy(p).sum())).trace(p),
            "kind = 2": jax.jit(jax.grad(lambda p, q: jj.chain_kl(p, q).sum(), argnums=(0, 1))).trace(p, p),
            "k = 4": jax.jit(jax.grad(lambda p: jj.chain_kbest(p, 4)[0].sum())).trace(p),
            "kind = 1": jax.jit(jax.grad(lambda e, t, i: jj.hmm_cross_entropy(e, t, i, e, t, i).sum(),
                                         (0, 1, 2))).trace(spec((3, 10, 7)), spec((7, 7)), spec((7,))),
        }
        for attribute, traced in lowered.items():
            text = traced.lower(lowering_platforms=("cuda",)).as_text()
            calls = [line for line in text.splitlines() if "stablehlo.custom_call @jitbmm_" in line]
            with self.subTest(attribute=attribute):
                self.assertTrue(calls)
                for line in calls:
                    self.assertRegex(line, re.escape(attribute) + " : i32")

    def test_workspace_results(self):
        """Each call of a handler that takes scratch (all but the expectations' forward) has its workspace as its
        last result, uint8, which XLA allocates: sized by the library's plan where JAX has a GPU, none here. The
        expectations' forward's last result is what its backward reads, uint8 too, sized without a plan."""
        jj, a, p = self.jj, spec((2, 5, 6)), spec((3, 9, 7, 7))
        e, t, i = spec((3, 8, 5)), spec((5, 5)), spec((5,))
        traced = [jax.jit(jax.grad(lambda a: jj.logbmm(a, a.swapaxes(-1, -2)).sum())).trace(a),
                  jax.jit(jax.grad(lambda a: jj.maxbmm(a, a.swapaxes(-1, -2)).sum())).trace(a),
                  jax.jit(jax.grad(lambda p: jj.chain_log_partition(p).sum())).trace(p),
                  jax.jit(lambda p: jj.chain_viterbi(p)).trace(p),
                  jax.jit(jax.grad(lambda e, t, i: jj.hmm_log_partition(e, t, i).sum())).trace(e, t, i),
                  jax.jit(jax.grad(lambda p: jj.chain_kl(p, p).sum())).trace(p),
                  jax.jit(lambda p: jj.chain_kbest(p, 3)).trace(p),
                  jax.jit(lambda p: jj.chain_sample(p, 3, jax.random.key(0))).trace(p),
                  jax.jit(lambda e, t, i: jj.hmm_kbest(e, t, i, 3)).trace(e, t, i),
                  jax.jit(lambda e, t, i: jj.hmm_sample(e, t, i, 3, jax.random.key(0))).trace(e, t, i),
                  jax.jit(jax.grad(lambda e, t, i: jj.hmm_kl(e, t, i, e, t, i).sum(), (0, 1, 2))).trace(e, t, i)]
        for each in traced:
            text = each.lower(lowering_platforms=("cuda",)).as_text()
            calls = [line for line in text.splitlines() if "stablehlo.custom_call @jitbmm_" in line]
            self.assertTrue(calls)
            for line in calls:
                target = line.split("@")[1].split("(")[0]
                with self.subTest(call=target):
                    if target in ("jitbmm_chain_expectation", "jitbmm_hmm_expectation"):
                        self.assertRegex(line, r"tensor<[1-9]\d*xui8>\)?$")
                    else:
                        self.assertRegex(line, r"tensor<0xui8>\)?$")

    def test_saved_messages_only_where_differentiated(self):
        """A log chain's forward declares its saved messages (a uint8 result of the library's size, which the backward
        reads) under grad, and none where nothing differentiates it: that forward writes none, and a long chain's
        runs on its stand-in."""
        import re
        jj, p = self.jj, spec((3, 9, 7, 7))
        e, t, i = spec((3, 10, 7)), spec((7, 7)), spec((7,))
        for name, plain, differentiated in (
                ("chain", jax.jit(lambda p: jj.chain_log_partition(p)).trace(p),
                 jax.jit(jax.grad(lambda p: jj.chain_log_partition(p).sum())).trace(p)),
                ("hmm", jax.jit(lambda e, t, i: jj.hmm_log_partition(e, t, i)).trace(e, t, i),
                 jax.jit(jax.grad(lambda e, t, i: jj.hmm_log_partition(e, t, i).sum())).trace(e, t, i))):
            saved = []
            for traced in (plain, differentiated):
                text = traced.lower(lowering_platforms=("cuda",)).as_text()
                line = next(x for x in text.splitlines() if f"stablehlo.custom_call @jitbmm_{name}(" in x)
                saved.append(int(re.search(r"-> \(tensor<3xf32>, tensor<(\d+)xui8>", line).group(1)))
            with self.subTest(form=name):
                self.assertEqual(saved[0], 0)
                self.assertGreater(saved[1], 3 * 10 * 7 * 4)

    def test_workspace_sized_by_the_library(self):
        """With JAX naming device 0 (the fake driver's, which the python_jax CTest entry gives, or a real one),
        tracing makes each problem's plan (compiling its kernels) and declares the workspace its calls take: the
        bytes the library gives for the folded problem, with 255 to align it, under vmap for the larger batch."""
        import re
        from jitbmm import _jax_support
        jj = self.jj
        p, e, t, i = spec((3, 9, 7, 7)), spec((3, 10, 7)), spec((7, 7)), spec((7,))
        lengths = jax.ShapeDtypeStruct((3,), jnp.int32)
        device = mock.patch.object(_jax_support, "workspace_device", lambda: 0)
        device.start()
        self.addCleanup(device.stop)
        cases = [  # (traced, the workspace_bytes arguments of each custom call it makes, by target)
            (jax.jit(jax.vmap(lambda p, l: jj.chain_kbest(p, 3, l))).trace(spec((2, 3, 9, 7, 7)),
                                                                          jax.ShapeDtypeStruct((2, 3), jnp.int32)),
             {"chain_kbest": ("chain_kbest", "max_plus", "f32", "crf", 6, 10, 7, True, 3)}),
            (jax.jit(lambda p, l: jj.chain_sample(p, 5, jax.random.key(0), l)).trace(p, lengths),
             {"chain_sample": ("chain_sample", "log", "f32", "crf", 3, 10, 7, True, 5)}),
            (jax.jit(lambda e, t, i, l: jj.hmm_kbest(e, t, i, 3, l)).trace(e, spec((3, 7, 7)), i, lengths),
             {"hmm_kbest": ("chain_kbest", "max_plus", "f32", "hmm", 3, 10, 7, True, True, False, 3)}),
            (jax.jit(lambda e, t, i: jj.hmm_sample(e, t, i, 5, jax.random.key(0))).trace(e, t, i),
             {"hmm_sample": ("chain_sample", "log", "f32", "hmm", 3, 10, 7, False, False, False, 5)}),
            (jax.jit(jax.grad(lambda p, l: jj.chain_kl(p, p, l).sum())).trace(p, lengths),
             {"chain_expectation_backward": ("chain_expectation", "log", "f32", "crf", 3, 10, 7, True, 2)}),
            (jax.jit(jax.grad(lambda e, t, i, l: jj.hmm_entropy(e, t, i, l).sum())).trace(e, spec((3, 7, 7)), i,
                                                                                          lengths),
             {"hmm_expectation_backward": ("chain_expectation", "log", "f32", "hmm", 3, 10, 7, True, True, False, 0)}),
            (jax.jit(jax.grad(lambda e, t, i: jj.hmm_kl(e, t, i, e, t, i).sum(), (0, 1, 2))).trace(e, t, i),
             {"hmm_expectation_backward": ("chain_expectation", "log", "f32", "hmm", 3, 10, 7, False, False, False,
                                           2)}),
            (jax.jit(lambda p: jj.chain_viterbi(p)).trace(p),
             {"chain": ("chain", "max_plus", "f32", "crf", 3, 10, 7, False, False, False, 1)}),
            (jax.jit(jax.grad(lambda e, t, i: jj.hmm_log_partition(e, t, i).sum(), (0, 1, 2))).trace(e, t, i),
             {"hmm": ("chain", "log", "f32", "hmm", 3, 10, 7, False, False, False, 0),
              "hmm_backward": ("chain", "log", "f32", "hmm", 3, 10, 7, False, False, False, 2)}),
            (jax.jit(jax.grad(lambda a: jj.logbmm(a, a.swapaxes(-1, -2)).sum())).trace(spec((2, 40, 70))),
             {"bmm": ("bmm", "log", "exact", "f32", 2, 40, 70, 40, 0, 0, 0, 0),
              "bmm_backward": ("bmm", "log", "exact", "f32", 2, 40, 70, 40, 0, 0, 0, 1)}),
            (jax.jit(jax.grad(lambda x, w: jj.maxbmm(x, w).sum(), (0, 1))).trace(spec((3, 2, 40, 70)),
                                                                                 spec((70, 24))),
             {"bmm": ("bmm", "max_plus", "exact", "f32", 6, 40, 70, 24, 0, 1, 1, 0),
              "bmm_backward": ("bmm", "max_plus", "exact", "f32", 6, 40, 70, 24, 0, 1, 1, 1)}),
        ]
        for traced, wanted in cases:
            text = traced.lower(lowering_platforms=("cuda",)).as_text()
            for line in text.splitlines():
                found = re.search(r"custom_call @jitbmm_(\w+)\(.*tensor<(\d+)xui8>\)?$", line)
                if not found or found.group(1) not in wanted:
                    continue
                target, declared = found.group(1), int(found.group(2))
                with self.subTest(call=target):
                    self.assertEqual(declared, _jax_support.workspace_bytes(*wanted.pop(target)))
                    if target in ("chain_kbest", "hmm_backward", "chain_sample", "hmm_kbest", "hmm_sample"):
                        self.assertGreater(declared, 255)  # back-pointers, messages, sums, forward messages
                    if target == "hmm_expectation_backward":
                        self.assertGreater(declared, 0)  # the first positions' gradients of a shared initial table
            self.assertEqual(wanted, {}, "a call without its workspace result")

    def test_vmapped_calls_plan_only_their_batch(self):
        """custom_vmap traces a call's body at the unbatched shapes before a vmap rule takes the call over: that body
        makes no plan (nor tunes, nor compiles), so under vmap only the problems of the batch the calls run are
        planned, through every layer (custom_vjp, nested vmap, grad inside and outside)."""
        from jitbmm import _jax_support
        jj = self.jj
        device = mock.patch.object(_jax_support, "workspace_device", lambda: 0)
        device.start()
        self.addCleanup(device.stop)
        p, e, t, i = spec((4, 3, 9, 7, 7)), spec((4, 3, 10, 7)), spec((7, 7)), spec((7,))
        hmm = jax.grad(lambda e, t, i: jj.hmm_log_partition(e, t, i).sum(), (0, 1, 2))
        cases = (("chain", jax.vmap(jj.chain_log_partition), (p,), {12}),
                 ("chain, nested", jax.vmap(jax.vmap(jj.chain_log_partition)), (spec((2, 2, 3, 9, 7, 7)),), {12}),
                 ("hmm, grad in vmap", jax.vmap(hmm, (0, None, None)), (e, t, i), {12}),
                 ("product", jax.vmap(jj.logbmm, (0, None)), (spec((6, 64, 8, 16)), spec((16, 5))), {384}),
                 ("kl, grad of vmap", jax.grad(lambda p: jax.vmap(jj.chain_kl)(p, p).sum()), (p,), {12}),
                 ("k best", jax.vmap(lambda p: jj.chain_kbest(p, 2)), (p,), {12}),
                 ("hmm kl, grad in vmap", jax.vmap(jax.grad(lambda e, t, i: jj.hmm_kl(e, t, i, e, t, i).sum(), (0, 1)),
                                                   (0, None, None)), (e, t, i), {12}),
                 # jacrev's rows: the rule runs the backward a row at a time at the very shapes of the vmapped
                 # body it took over, and each of those calls must be sized
                 ("kl, jacrev",
                  jax.jacrev(lambda p: jj.chain_kl(p, jnp.zeros((3, 9, 7, 7), p.dtype), jnp.asarray([10, 2, 5]))),
                  (spec((3, 9, 7, 7)),), {3}))
        real = _jax_support._workspace_bytes
        for name, f, args, batches in cases:
            asked = []
            with mock.patch.object(_jax_support, "_workspace_bytes",
                                   lambda d, target, problem, e: asked.append(problem[3]) or real(d, target, problem, e)):
                text = jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
            with self.subTest(name):
                self.assertTrue(asked)
                self.assertEqual(set(asked), batches)
                # and every call that runs was sized: one question a call
                self.assertEqual(len(asked), text.count("stablehlo.custom_call @jitbmm_"))

    def test_a_forward_alone_plans_when_traced(self):
        """An entropy, cross-entropy or KL traced without its gradient (so with no workspace to declare) still has its
        plan made then, as every handler's is, and not in its first call."""
        from jitbmm import _jax_distributions, _jax_hmm_divergence
        asked, real = [], _jax_distributions.workspace_bytes
        p, e, t, i = spec((3, 9, 7, 7)), spec((3, 10, 7)), spec((7, 7)), spec((7,))
        with mock.patch.object(_jax_distributions, "workspace_bytes", lambda *a: asked.append(a) or real(*a)), \
                mock.patch.object(_jax_hmm_divergence, "workspace_bytes", lambda *a: asked.append(a) or real(*a)):
            for f in (lambda p: self.jj.chain_entropy(p), lambda p: self.jj.chain_kl(p, p * 2)):
                jax.jit(f).trace(p)
            jax.jit(lambda e, t, i: self.jj.hmm_cross_entropy(e, t, i, e, t, i * 2)).trace(e, t, i)
        self.assertEqual([(a[0], a[3], a[-1]) for a in asked], [("chain_expectation", "crf", 0),
                                                                 ("chain_expectation", "crf", 2),
                                                                 ("chain_expectation", "hmm", 1)])

    def test_plans_asked_again_once_a_table_starts_again(self):
        """A table of the handlers' plans starts again past its bound; what tracing learnt of the plans is then asked
        anew, so that the next trace of a problem makes its plan again, not the call."""
        from jitbmm import _jax_support
        device = mock.patch.object(_jax_support, "workspace_device", lambda: 0)
        device.start()
        self.addCleanup(device.stop)
        emptied = _jax_support._handlers().jitbmm_xla_plan_tables_emptied
        info = _jax_support._workspace_bytes.cache_info

        def ask(B):
            return _jax_support.workspace_bytes("chain", "max_plus", "f32", "crf", B, 4, 3, False, 1)

        ask(1)
        before, misses = emptied(), info().misses
        ask(1)
        self.assertEqual(info().misses, misses, "a size known, not asked again")
        for B in range(2, 20000):
            ask(B)
            if B % 64 == 0:
                ask(1)  # the first problem stays among the sizes known
            if emptied() != before:
                break
        self.assertEqual(emptied(), before + 1)
        misses = info().misses
        ask(1)
        self.assertEqual(info().misses, misses + 1, "a size known before the table started again, not asked again")

    def test_workspace_functions_at_the_c_abi(self):
        """The jitbmm_xla_*_workspace functions as C callers reach them: a chain's strides are ignored (the handlers'
        buffers are contiguous), so a problem given with strides neither is refused for them nor stores a plan that
        reads them; an empty batch's problem is still checked, naming what is wrong; an OK leaves no message."""
        import ctypes
        import jitbmm
        from jitbmm import _jax_support
        lib = _jax_support._handlers()
        n = ctypes.c_size_t()

        def workspace(chain, function="jitbmm_xla_chain_workspace", last=0):
            status = getattr(lib, function)(0, ctypes.byref(chain), last, ctypes.byref(n))
            return status, jitbmm._library().jitbmm_last_error().decode()

        plain = jitbmm._chain_problem("log", "f32", 4, 8, 5, False, "crf")
        strided = jitbmm._chain_problem("log", "f32", 4, 8, 5, False, "crf")
        strided.strides[:] = [-1, 1, 1, 1]
        self.assertEqual(workspace(strided), (0, ""))
        expected = n.value
        self.assertEqual(workspace(plain), (0, ""))
        self.assertEqual(n.value, expected)
        jitbmm._library().jitbmm_plan_create(None, None)  # leaves a message behind
        for function in ("jitbmm_xla_chain_workspace", "jitbmm_xla_chain_kbest_workspace"):
            with self.subTest(function=function):
                self.assertEqual(workspace(jitbmm._chain_problem("log", "f32", 0, 8, 5, False, "crf"), function, 2),
                                 (0, ""))
                status, message = workspace(jitbmm._chain_problem("log", "nope", 0, 8, 5, False, "crf"), function, 2)
                self.assertNotEqual(status, 0)
                self.assertIn("dtype", message)
                status, message = workspace(jitbmm._chain_problem("log", "f32", 0, 0, 5, False, "crf"), function, 2)
                self.assertNotEqual(status, 0)
                self.assertIn("T", message)

    def test_bad_arguments(self):
        jj, ones = self.jj, jnp.ones
        cases = [
            (lambda: jj.logbmm(ones((2, 3)), ones((4, 4))), ValueError, "b: 4 rows"),
            (lambda: jj.logbmm(ones((2, 3), jnp.int32), ones((3, 4))), TypeError, "a: unsupported dtype"),
            (lambda: jj.logbmm(ones((2, 3)), ones((3, 4), jnp.float16)), TypeError, "b: dtype"),
            (lambda: jj.logbmm(ones((2, 2, 3)), ones((3, 3, 4))), ValueError, "do not broadcast"),
            (lambda: jj.semiring_bmm(ones((2, 3)), ones((3, 4)), "foo"), ValueError, "semiring"),
            (lambda: jj.semiring_bmm(ones((2, 3)), ones((3, 4)), "max_plus", "fast"), ValueError, "precision"),
            (lambda: jj.logbmm([1.0], ones((3, 4))), TypeError, "a: expected a JAX array"),
            (lambda: jj.chain_kl(ones((2, 3, 4, 4)), None), TypeError, "other: expected a JAX array"),
            (lambda: jj.chain_cross_entropy(ones((2, 3, 4, 4)), None), TypeError, "other: expected a JAX array"),
            (lambda: jj.chain_log_partition(ones((2, 3, 4, 5))), ValueError, "potentials"),
            (lambda: jj.chain_log_partition(ones((2, 3, 4, 4)), ones(3, jnp.int32)), ValueError, "lengths"),
            (lambda: jj.chain_log_partition(ones((2, 3, 4, 4)), ones(2)), TypeError, "lengths"),
            (lambda: jj.chain_sample(ones((2, 3, 4, 4)), -1, jax.random.key(0)), ValueError, "n: "),
            (lambda: jj.chain_sample(ones((2, 3, 4, 4)), 2, "seed"), TypeError, "key: "),
            (lambda: jj.hmm_log_partition(ones((2, 3, 4)), ones((4, 5)), ones(4)), ValueError, "transitions"),
            (lambda: jj.hmm_log_partition(ones((2, 3, 4)), ones((4, 4)), ones(5)), ValueError, "initial"),
            (lambda: jj.hmm_viterbi(ones((2, 3, 4)), ones((4, 4), jnp.float16), ones(4)), TypeError, "transitions"),
            (lambda: jj.chain_kl(ones((2, 3, 4, 4)), ones((2, 3, 5, 5))), ValueError, "other: expected"),
            (lambda: jj.chain_cross_entropy(ones((2, 3, 4, 4)), ones((2, 3, 4, 4), jnp.float16)), TypeError, "other"),
            (lambda: jax.eval_shape(jj.chain_entropy, spec((1, 2, 1025, 1025))), ValueError, "1025 states"),
            (lambda: jj.chain_log_prob(ones((2, 3, 4, 4)), ones((2, 3, 4, 5))), ValueError, "value: expected"),
            (lambda: jj.chain_kbest(ones((2, 3, 4, 4)), 17), ValueError, "k: the number"),
            (lambda: jj.chain_kbest(ones((2, 3, 4, 4)), True), ValueError, "k: the number"),
            (lambda: jj.chain_kbest(ones((2, 3, 4, 4)), 2, ones(3, jnp.int32)), ValueError, "lengths"),
            (lambda: jj.hmm_kl(ones((2, 3, 4)), ones((4, 4)), ones(4), ones((2, 3, 5)), ones((5, 5)), ones(5)),
             ValueError, "q_emissions: expected the emissions' shape"),
            (lambda: jj.hmm_kl(ones((2, 3, 4)), ones((4, 4)), ones(4), ones((2, 3, 4)), ones((4, 5)), ones(4)),
             ValueError, "q_transitions: expected"),
            (lambda: jj.hmm_cross_entropy(ones((2, 3, 4)), ones((4, 4)), ones(4), ones((2, 3, 4)), ones((4, 4)),
                                          ones(3)), ValueError, "q_initial: expected"),
            (lambda: jj.hmm_cross_entropy(ones((2, 3, 4)), ones((4, 4)), ones(4), ones((2, 3, 4), jnp.float16),
                                          ones((4, 4), jnp.float16), ones(4, jnp.float16)), TypeError, "q_emissions"),
            (lambda: jj.hmm_kl(ones((2, 3, 4)), ones((4, 4)), ones(4), ones((2, 3, 4)), ones((4, 4), jnp.float16),
                               ones(4)), TypeError, "q_transitions: dtype"),
            (lambda: jj.hmm_kl(ones((2, 3, 4)), ones((4, 4)), ones(4), None, ones((4, 4)), ones(4)), TypeError,
             "q_emissions: expected a JAX array"),
            (lambda: jj.hmm_entropy(ones((2, 3, 4)), ones((4, 4)), ones(5)), ValueError, "initial"),
            (lambda: jj.hmm_entropy(ones((2, 3, 4)), ones((4, 4)), ones(4), ones(3, jnp.int32)), ValueError,
             "lengths"),
            (lambda: jax.eval_shape(jj.hmm_entropy, spec((2, 3, 1025)), spec((1025, 1025)), spec((1025,))),
             ValueError, "emissions: 1025 states"),
        ]
        for call, error, words in cases:
            with self.subTest(words=words), self.assertRaisesRegex(error, words):
                call()

    def test_cpu_arrays_refused(self):
        cpu = jax.devices("cpu")[0]
        a = jax.device_put(jnp.ones((2, 3)), cpu)
        with self.assertRaisesRegex(ValueError, "a: on cpu.*CUDA kernels only"):
            self.jj.logbmm(a, a.T)
        with self.assertRaisesRegex(ValueError, "potentials: on cpu"):
            self.jj.chain_log_partition(jax.device_put(jnp.ones((2, 3, 4, 4)), cpu))
        q = jax.device_put(jnp.ones((2, 3, 4), jnp.float32), cpu)  # p's traced, q's a concrete array on the CPU
        with self.assertRaisesRegex(ValueError, "q_emissions: on cpu"):
            jax.jit(lambda e, t, i: self.jj.hmm_kl(e, t, i, q, t, i)).trace(spec((2, 3, 4)), spec((4, 4)), spec((4,)))


if __name__ == "__main__":
    sys.exit(main(needs_gpu=False))
