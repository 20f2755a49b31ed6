"""jitbmm.torch's HMM-form chains (hmm_log_partition, hmm_viterbi) on the GPU machine: scores and the gradients of
all three tables against a float64 torch forward algorithm written here, and against the CRF form on the
potentials the tables form; Viterbi paths; shared and per-sequence tables, odd sizes, ragged lengths, large
scores, banded -inf transitions; length-1 and all -inf sequences; strides; errors; the peak memory of a training
step; opcheck, torch.compile, torch.export and CUDA graphs.

Run as a program (the python_torch_hmm CTest entry): it exits 77 ("skipped") where torch or a CUDA GPU is missing,
and fails if any test is skipped where both exist."""

import math
import sys
import unittest

import package_under_test  # noqa: E402

package_under_test.import_path()

from torch_cases import HALF_ROUNDING, HAVE_CUDA, GpuCase, formed, gpu_main, torch  # noqa: E402

# (B, T, C), with whether transitions and initial are per sequence. Odd sizes, each of 1, 2, 31, 33, 129 in every
# role; 257 and 1000 states stream the transitions through shared memory instead of registers.
CASES = (((1, 1, 1), False, False), ((2, 2, 31), True, True), ((31, 33, 2), False, True),
         ((3, 129, 33), True, False), ((33, 2, 129), False, False), ((2, 31, 257), True, True),
         ((2, 5, 1000), False, False))
SCALES = (1.0, 10.0, 50.0)


def full(tables, lengths):
    B, T = tables[0].shape[:2]
    return torch.full((B,), T, dtype=torch.int64, device=tables[0].device) if lengths is None else lengths


def expanded(emissions, transitions, initial):
    B, _, C = emissions.shape
    return transitions.expand(B, C, C), initial.expand(B, C)


def reference_scores(emissions, transitions, initial, lengths, semiring):
    """score [B] by the HMM's forward algorithm one position at a time (float64 in the tests): alpha_0 = initial +
    emissions[:, 0], alpha_t[c] = (⊕_p alpha_{t-1}[p] ⊗ transitions[c, p]) ⊗ emissions[:, t, c].
    Differentiable."""
    reduce = torch.logsumexp if semiring == "log" else (lambda x, dim: x.max(dim).values)
    trans, init = expanded(emissions, transitions, initial)
    alpha = init + emissions[:, 0]
    scores = [reduce(alpha, -1)]
    for t in range(1, emissions.shape[1]):
        alpha = reduce(alpha[:, None, :] + trans, -1) + emissions[:, t]
        scores.append(reduce(alpha, -1))
    lengths = full((emissions,), lengths)
    return torch.stack(scores, 1).gather(1, (lengths - 1)[:, None]).squeeze(1)


def first_max(x):
    """The first index of the largest value along the last dimension (ties: the smallest state)."""
    states = torch.arange(x.shape[-1], device=x.device)
    return torch.where(x == x.max(-1, keepdim=True).values, states, x.shape[-1]).min(-1).values


def reference_paths(emissions, transitions, initial, lengths):
    """The Viterbi path [B, T] (int64, -1 past a length) in float64 on the CPU."""
    e, t, i = (x.detach().double().cpu() for x in (emissions, transitions, initial))
    trans, init = expanded(e, t, i)
    B, T, _ = e.shape
    lengths = full((e,), lengths).cpu()
    delta, back = init + e[:, 0], []
    deltas = [delta]
    for s in range(1, T):
        terms = delta[:, None, :] + trans
        back.append(first_max(terms))
        delta = terms.max(-1).values + e[:, s]
        deltas.append(delta)
    path = torch.full((B, T), -1, dtype=torch.int64)
    for b in range(B):
        last = int(lengths[b]) - 1
        path[b, last] = first_max(deltas[last][b])
        for s in range(last, 0, -1):
            path[b, s - 1] = back[s - 1][b, path[b, s]]
    return path


def path_gradients(path, emissions, transitions, initial, w):
    """The gradients of w · (the score of the paths): the states' indicator (emissions), the transition counts
    (transitions, summed over the batch for a shared table) and the first state's indicator (initial)."""
    B, T, C = emissions.shape
    path, w = path.cpu(), w.detach().double().cpu()
    ge, gt, gi = torch.zeros(B, T, C, dtype=torch.float64), torch.zeros(B, C, C, dtype=torch.float64), \
        torch.zeros(B, C, dtype=torch.float64)
    for b in range(B):
        gi[b, path[b, 0]] = w[b]
        for s in range(T):
            if path[b, s] >= 0:
                ge[b, s, path[b, s]] = w[b]
                if s > 0:
                    gt[b, path[b, s], path[b, s - 1]] += w[b]
    gt = gt if transitions.dim() == 3 else gt.sum(0)
    gi = gi if initial.dim() == 2 else gi.sum(0)
    return tuple(g.to(emissions.device) for g in (ge, gt, gi))


def path_score(path, emissions, transitions, initial):
    e, t, i = (x.detach().double().cpu() for x in (emissions, transitions, initial))
    trans, init = expanded(e, t, i)
    path, total = path.cpu(), torch.zeros(e.shape[0], dtype=torch.float64)
    for b in range(e.shape[0]):
        total[b] = init[b, path[b, 0]] + e[b, 0, path[b, 0]]
        for s in range(1, e.shape[1]):
            if path[b, s] >= 0:
                total[b] += trans[b, path[b, s], path[b, s - 1]] + e[b, s, path[b, s]]
    return total


@unittest.skipUnless(HAVE_CUDA, "needs torch and a CUDA GPU")  # run as a program, main() says why first
class HmmTest(GpuCase):
    def tables(self, B, T, C, batched_t, batched_i, dtype=None, scale=1.0):
        dtype = dtype or torch.float64
        torch.manual_seed(1000 * B + 10 * T + C)

        def draw(*shape):
            return torch.randn(*shape, dtype=torch.float64, device=self.dev).mul_(scale).to(dtype)

        return (draw(B, T, C), draw(*((B, C, C) if batched_t else (C, C))), draw(*((B, C) if batched_i else (C,))))

    def lengths(self, B, T, ragged):
        if not ragged:
            return None
        lengths = torch.randint(1, T + 1, (B,), device=self.dev)
        lengths[0] = T
        return lengths

    @staticmethod
    def tolerance(dtype, scale, T, size=1.0):
        """float32 rounds every step; the error grows with the scores' spread and T, and a gradient's with its size
        (a shared table's sums over the batch and the steps)."""
        if dtype == torch.float64:
            return dict(rtol=1e-9, atol=1e-9 * scale * T * max(1.0, size))
        return dict(rtol=2e-5, atol=(1e-5 + 4e-6 * scale * T) * max(1.0, size))

    def ours(self, fn, tables, lengths, w):
        """(score, extra outputs, the three gradients of w · score) of one of jitbmm's HMM functions."""
        xs = [x.detach().requires_grad_(True) for x in tables]
        out = fn(*xs, lengths)
        score = out[0] if isinstance(out, tuple) else out
        grads = torch.autograd.grad(score, xs, w)
        return score.detach(), out[1:] if isinstance(out, tuple) else (), grads

    def reference(self, tables, lengths, semiring, w):
        xs = [x.detach().double().requires_grad_(True) for x in tables]
        score = reference_scores(*xs, lengths, semiring)
        grads = torch.autograd.grad(score, xs, w.double(), allow_unused=True)  # T = 1 reads no transitions
        return score.detach(), [torch.zeros_like(x) if g is None else g for x, g in zip(xs, grads)]

    def assert_log(self, tables, lengths, scale):
        dtype, T = tables[0].dtype, tables[0].shape[1]
        w = torch.randn(tables[0].shape[0], dtype=dtype, device=self.dev)
        score, _, grads = self.ours(self.jt.hmm_log_partition, tables, lengths, w)
        want, want_grads = self.reference(tables, lengths, "log", w)
        self.assertEqual(score.dtype, dtype)
        torch.testing.assert_close(score.double(), want, **self.tolerance(dtype, scale, T))
        for name, g, x, wg in zip(("emissions", "transitions", "initial"), grads, tables, want_grads):
            self.assertEqual((g.shape, g.dtype), (x.shape, dtype), name)
            size = wg.abs().max().item() if wg.numel() else 0.0
            torch.testing.assert_close(g.double(), wg, **self.tolerance(dtype, scale, T, size), msg=name)

    def for_each_case(self, check):
        """check(tables, lengths, scale) for every dtype, case, scale and lengths, each in its subTest."""
        for dtype in (torch.float64, torch.float32):
            for (B, T, C), batched_t, batched_i in CASES:
                for scale in SCALES if C < 1000 else (1.0,):
                    for ragged in (False, True):
                        with self.subTest(dtype=dtype, B=B, T=T, C=C, batched=(batched_t, batched_i), scale=scale,
                                          ragged=ragged):
                            check(self.tables(B, T, C, batched_t, batched_i, dtype, scale),
                                  self.lengths(B, T, ragged), scale)

    def test_log_partition_and_gradients(self):
        self.for_each_case(self.assert_log)

    def test_same_as_the_crf_form_on_formed_potentials(self):
        # potentials[b, t, c, p] = transitions[c, p] + emissions[b, t + 1, c], with initial + emissions[:, 0]
        # folded into the first step: the same chain (T >= 2, finite tables).
        for dtype in (torch.float64, torch.float32):
            for (B, T, C), batched_t, batched_i in CASES[1:5]:
                with self.subTest(dtype=dtype, B=B, T=T, C=C):
                    e, t, i = self.tables(B, T, C, batched_t, batched_i, dtype, 10.0)
                    pot = formed(e, t, i)
                    lengths = self.lengths(B, T, True)
                    lengths = lengths.clamp(min=2) if lengths is not None else None
                    tol = self.tolerance(dtype, 10.0, T)
                    torch.testing.assert_close(self.jt.hmm_log_partition(e, t, i, lengths),
                                               self.jt.chain_log_partition(pot, lengths), **tol)
                    torch.testing.assert_close(self.jt.hmm_viterbi(e, t, i, lengths)[0],
                                               self.jt.chain_viterbi(pot, lengths)[0], **tol)

    def test_half_tables(self):
        """float16 and bfloat16 tables are computed in float32: the score (float32) within float32's tolerance of the
        float64 chain of the values they hold, the gradients (in their dtype) also within their rounding."""
        rounding = HALF_ROUNDING
        for dtype in (torch.float16, torch.bfloat16):
            for (B, T, C), batched_t, batched_i in CASES[:5]:
                with self.subTest(dtype=dtype, B=B, T=T, C=C, batched=(batched_t, batched_i)):
                    tables = self.tables(B, T, C, batched_t, batched_i, dtype, 10.0)
                    lengths = self.lengths(B, T, True)
                    w = torch.randn(B, dtype=torch.float32, device=self.dev)
                    tol = self.tolerance(torch.float32, 10.0, T)
                    for semiring, fn in (("log", self.jt.hmm_log_partition), ("max", self.jt.hmm_viterbi)):
                        score, extra, grads = self.ours(fn, tables, lengths, w)
                        want, want_grads = self.reference(tables, lengths, semiring, w)
                        self.assertEqual(score.dtype, torch.float32)
                        torch.testing.assert_close(score.double(), want, **tol)
                        if semiring == "max":  # a path that ties within rounding may win: its own indicator
                            path = extra[0]
                            self.assertTrue(torch.equal(path.cpu() < 0, reference_paths(*tables, lengths) < 0))
                            torch.testing.assert_close(path_score(path, *tables), want.cpu(), **tol)
                            want_grads = path_gradients(path, *tables, w)
                        for name, g, x, wg in zip(("emissions", "transitions", "initial"), grads, tables, want_grads):
                            self.assertEqual((g.shape, g.dtype), (x.shape, dtype), name)
                            size = wg.abs().max().item() if wg.numel() else 0.0
                            atol = self.tolerance(torch.float32, 10.0, T, size)["atol"]
                            torch.testing.assert_close(g.double(), wg, rtol=rounding[dtype],
                                                       atol=atol + rounding[dtype] * max(1.0, size), msg=name)

    def check_viterbi(self, tables, lengths, exact_path, scale=1.0):
        e, t, i = tables
        B, T = e.shape[:2]
        w = torch.randn(B, dtype=e.dtype, device=self.dev)
        score, (path,), grads = self.ours(self.jt.hmm_viterbi, tables, lengths, w)
        want = reference_scores(*(x.double() for x in tables), lengths, "max")
        want_path = reference_paths(*tables, lengths)
        self.assertEqual((path.dtype, path.shape), (torch.int64, (B, T)))
        tol = self.tolerance(e.dtype, scale, T)
        torch.testing.assert_close(score.double(), want, **tol)
        if exact_path:
            self.assertTrue(torch.equal(path.cpu(), want_path), (path, want_path))
        else:  # float32: a path whose score ties the best within rounding may win
            self.assertTrue(torch.equal(path.cpu() < 0, want_path < 0))
            torch.testing.assert_close(path_score(path, *tables), want.cpu(), **tol)
        # A shared table's counts sum w over the batch and the steps, rounded in the dtype.
        eps = 1e-6 if e.dtype == torch.float32 else 1e-12
        for name, g, wg in zip(("emissions", "transitions", "initial"), grads, path_gradients(path, *tables, w)):
            torch.testing.assert_close(g.double(), wg, rtol=eps, atol=eps * B * T, msg=name)

    def test_viterbi_scores_paths_and_gradients(self):
        self.for_each_case(lambda tables, lengths, scale:
                           self.check_viterbi(tables, lengths, tables[0].dtype == torch.float64, scale))

    def test_viterbi_ties_go_to_the_smallest_state(self):
        for dtype in (torch.float32, torch.float64):
            for B, T, C in ((5, 33, 3), (3, 31, 33)):
                with self.subTest(dtype=dtype, B=B, T=T, C=C):
                    torch.manual_seed(B + T + C)
                    tables = [torch.randint(-2, 2, shape, device=self.dev).to(dtype)
                              for shape in ((B, T, C), (C, C), (C,))]
                    self.check_viterbi(tables, self.lengths(B, T, True), exact_path=True)
                    self.check_viterbi([torch.zeros_like(x) for x in tables], None, exact_path=True)

    def test_banded_transitions(self):
        # Forbidden transitions (-inf) outside a band |c - p| <= width: every state stays reachable.
        for dtype in (torch.float64, torch.float32):
            for (B, T, C), width in (((3, 33, 31), 1), ((2, 129, 33), 3), ((1, 31, 129), 0)):
                with self.subTest(dtype=dtype, B=B, T=T, C=C, width=width):
                    e, t, i = self.tables(B, T, C, False, False, dtype, 10.0)
                    states = torch.arange(C, device=self.dev)
                    t = t.masked_fill((states[:, None] - states[None, :]).abs() > width, -math.inf)
                    lengths = self.lengths(B, T, True)
                    self.assert_log((e, t, i), lengths, 10.0)
                    self.check_viterbi((e, t, i), lengths, dtype == torch.float64, 10.0)

    def test_length_one_and_all_neg_inf(self):
        for dtype in (torch.float32, torch.float64):
            with self.subTest(dtype=dtype):
                e, t, i = self.tables(3, 9, 7, False, True, dtype)
                ones = torch.ones(3, dtype=torch.int64, device=self.dev)
                w = torch.ones(3, dtype=dtype, device=self.dev)
                score, _, (ge, gt, gi) = self.ours(self.jt.hmm_log_partition, (e, t, i), ones, w)
                torch.testing.assert_close(score, torch.logsumexp(i + e[:, 0], -1))
                torch.testing.assert_close(gi, torch.softmax(i + e[:, 0], -1))
                self.assertEqual((ge[:, 1:].abs().sum().item(), gt.abs().sum().item()), (0.0, 0.0))
                e = e.clone()
                e[1, 4] = -math.inf  # no path through position 4: sequence 1 scores -inf
                score, _, grads = self.ours(self.jt.hmm_log_partition, (e, t, i), None, w)
                self.assertEqual(score[1].item(), -math.inf)
                self.assertEqual(grads[0][1].abs().sum().item(), 0.0)
                self.assertEqual(grads[2][1].abs().sum().item(), 0.0)
                self.assertFalse(any(torch.isnan(g).any().item() for g in grads))
                keep = torch.tensor([0, 2], device=self.dev)
                want, want_grads = self.reference((e[keep], t, i[keep]), None, "log", w[keep])
                torch.testing.assert_close(score[keep].double(), want, **self.tolerance(dtype, 1.0, 9))
                torch.testing.assert_close(grads[1].double(), want_grads[1], **self.tolerance(dtype, 1.0, 9, 9.0))

    def test_strides_and_broadcasts(self):
        # Any layout reads as its contiguous copy: transitions given (from, to) and passed transposed, every other
        # position, a batch broadcast, a table broadcast from one element.
        e, t, i = self.tables(4, 21, 9, True, True)
        layouts = {"transposed": (e, t.transpose(1, 2).contiguous().transpose(1, 2), i),
                   "strided": (e[:, ::2], t, i[:, ::1]),
                   "broadcast batch": (e[:1].expand(4, -1, -1), t[0], i[:1].expand(4, -1)),
                   "one element": (e[:1, :1, :1].expand(4, 21, 9), t[0, :1, :1].expand(9, 9)[None].expand(4, 9, 9),
                                   i[0, :1].expand(9))}
        lengths = torch.tensor([[11, 0], [3, 0], [7, 0], [1, 0]], device=self.dev)[:, 0]
        for name, tables in layouts.items():
            for fn in (self.jt.hmm_log_partition, self.jt.hmm_viterbi):
                with self.subTest(layout=name, fn=fn.__name__):
                    w = torch.randn(4, dtype=e.dtype, device=self.dev)
                    got = self.ours(fn, tables, lengths, w)
                    want = self.ours(fn, [x.contiguous() for x in tables], lengths, w)
                    for x, y in zip((got[0], *got[1], *got[2]), (want[0], *want[1], *want[2])):
                        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)

    def test_only_the_gradients_asked_for(self):
        e, t, i = self.tables(3, 17, 6, False, False)
        w = torch.randn(3, dtype=e.dtype, device=self.dev)
        _, want = self.reference((e, t, i), None, "log", w)
        for k in range(3):
            xs = [x.detach().requires_grad_(j == k) for j, x in enumerate((e, t, i))]
            (g,) = torch.autograd.grad(self.jt.hmm_log_partition(*xs), xs[k], w)
            torch.testing.assert_close(g, want[k], rtol=1e-9, atol=1e-9)

    def test_second_derivatives(self):
        # With create_graph=True, the derivatives of <gradients, r> with respect to the three tables and to
        # grad_score w, against differentiating the reference twice (max_plus: 0 with respect to the tables).
        for semiring, fn in (("log", self.jt.hmm_log_partition), ("max", lambda *a: self.jt.hmm_viterbi(*a)[0])):
            for (B, T, C), batched_t, batched_i in CASES[1:4]:
                with self.subTest(semiring=semiring, B=B, T=T, C=C):
                    tables = self.tables(B, T, C, batched_t, batched_i, torch.float64, 3.0)
                    lengths = self.lengths(B, T, True)
                    rs = [torch.randn_like(x) for x in tables]
                    w = torch.randn(B, dtype=torch.float64, device=self.dev)

                    def twice(score_fn):
                        xs = [x.detach().requires_grad_(True) for x in tables]
                        v = w.detach().requires_grad_(True)
                        gs = torch.autograd.grad(score_fn(*xs, lengths), xs, v, create_graph=True, allow_unused=True)
                        loss = sum((g * r).sum() for g, r in zip(gs, rs) if g is not None)
                        again = torch.autograd.grad(loss, (*xs, v), allow_unused=True)
                        return [torch.zeros_like(x) if g is None else g for g, x in zip(again, (*xs, v))]

                    got = twice(fn)
                    want = twice(lambda *a: reference_scores(*a, semiring))
                    for name, g, x in zip(("emissions", "transitions", "initial", "d/dw"), got, want):
                        torch.testing.assert_close(g, x, rtol=1e-9, atol=1e-9, msg=name)

    def test_peak_memory_of_a_training_step(self):
        """A forward + backward of shared f32 tables of 31 states or more adds at most 4x their bytes at its peak
        (the saved messages, 2·B·T doubles of offsets, the emissions' gradient and the transitions' partial sums):
        nothing of aux's size is filled for its gradient, and the partial sums stay within half the tables."""
        for B, T, C in ((32, 128, 32), (32, 512, 64), (8, 1024, 128), (16, 256, 256), (4, 300, 31)):
            with self.subTest(B=B, T=T, C=C):
                tables = [x.detach().requires_grad_(True) for x in self.tables(B, T, C, False, False, torch.float32)]
                tables_bytes = sum(x.numel() * x.element_size() for x in tables)
                for _ in range(2):  # the second step runs on plans and allocator segments the first made
                    torch.cuda.synchronize()
                    base = torch.cuda.memory_allocated()
                    torch.cuda.reset_peak_memory_stats()
                    torch.autograd.grad(self.jt.hmm_log_partition(*tables).sum(), tables)
                    torch.cuda.synchronize()
                    added = torch.cuda.max_memory_allocated() - base
                self.assertLessEqual(added, 4 * tables_bytes, f"{added} bytes at the peak, tables {tables_bytes}")

    def test_empty_batch_and_no_grad(self):
        e, t, i = self.tables(1, 5, 3, False, False)
        score, _, grads = self.ours(self.jt.hmm_log_partition, (e[:0], t, i), None, e.new_ones(0))
        self.assertEqual(score.shape, (0,))
        self.assertEqual([g.abs().sum().item() for g in grads], [0.0, 0.0, 0.0])
        score, path = self.jt.hmm_viterbi(e[:0], t, i)
        self.assertEqual((score.shape, path.shape), ((0,), (0, 5)))
        with torch.no_grad():
            e.requires_grad_(True)
            torch.testing.assert_close(self.jt.hmm_log_partition(e, t, i), reference_scores(e, t, i, None, "log"))

    def test_errors_name_the_argument(self):
        e, t, i = self.tables(2, 5, 3, False, False, torch.float32)
        lengths = torch.tensor([5, 3], device=self.dev)
        cases = ((TypeError, "emissions", (e.tolist(), t, i)),
                 (ValueError, "emissions.*cpu", (e.cpu(), t, i)),
                 (TypeError, "emissions.*dtype", (e.to(torch.complex64), t, i)),
                 (ValueError, "emissions.*shape", (e[0], t, i)),
                 (ValueError, "emissions.*at least 1", (e[:, :0], t, i)),
                 (ValueError, "emissions.*at least 1", (e[..., :0], t[:0, :0], i[:0])),
                 (TypeError, "transitions", (e, None, i)),
                 (ValueError, "transitions.*device", (e, t.cpu(), i)),
                 (TypeError, "transitions.*dtype", (e, t.double(), i)),
                 (ValueError, "transitions.*shape", (e, t[:2], i)),
                 (ValueError, "transitions.*shape", (e, t.expand(3, 3, 3), i)),
                 (ValueError, "initial.*shape", (e, t, i[:2])),
                 (TypeError, "initial.*dtype", (e, t, i.int())),
                 (ValueError, "initial.*device", (e, t, i.cpu())),
                 (TypeError, "lengths", (e, t, i, [5, 3])),
                 (ValueError, "lengths.*device", (e, t, i, lengths.cpu())),
                 (TypeError, "lengths.*int64", (e, t, i, lengths.int())),
                 (ValueError, "lengths.*shape", (e, t, i, lengths[:1])))
        for fn in (self.jt.hmm_log_partition, self.jt.hmm_viterbi):
            for error, pattern, args in cases:
                with self.subTest(fn=fn.__name__, pattern=pattern):
                    with self.assertRaisesRegex(error, pattern):
                        fn(*args)
        with self.assertRaisesRegex(ValueError, "C"):  # more states than the kernels take (one value, broadcast)
            big = 16385  # one more than JITBMM_MAX_CHAIN_STATES
            self.jt.hmm_log_partition(e.new_zeros(1, 1, big), e.new_zeros(1).expand(big, big), e.new_zeros(big))
        score = self.jt.hmm_log_partition(e, t, i, torch.tensor([5, 6], device=self.dev))
        self.assertTrue(math.isnan(score[1].item()) and not math.isnan(score[0].item()))


@unittest.skipUnless(HAVE_CUDA, "needs torch and a CUDA GPU")  # run as a program, main() says why first
class HmmOperatorTest(GpuCase):
    """The HMM form as registered operators: opcheck, torch.compile (fullgraph), torch.export and CUDA graphs."""

    def test_opcheck(self):
        torch.manual_seed(20)
        B, T, C = 3, 7, 5
        for batched in (False, True):
            tables = [torch.randn(*shape, device=self.dev, dtype=torch.float64, requires_grad=True)
                      for shape in ((B, T, C), (B, C, C) if batched else (C, C), (B, C) if batched else (C,))]
            for semiring in ("log", "max_plus"):
                for lengths in (None, torch.tensor([7, 2, 5], device=self.dev)):
                    with self.subTest(batched=batched, semiring=semiring, lengths=lengths is not None):
                        torch.library.opcheck(torch.ops.jitbmm.hmm.default, (*tables, lengths, semiring, True))
                        plain = [x.detach() for x in tables]
                        score, aux = torch.ops.jitbmm.hmm(*plain, lengths, semiring, True)
                        torch.library.opcheck(torch.ops.jitbmm.hmm_backward.default,
                                              (*plain, lengths, aux, torch.randn_like(score), semiring, True, False,
                                               True))

    def test_compile_fullgraph(self):
        torch.manual_seed(21)
        tables = [torch.randn(*shape, device=self.dev, requires_grad=True) for shape in ((4, 13, 7), (7, 7), (4, 7))]
        lengths = torch.tensor([13, 5, 1, 9], device=self.dev)

        def step(e, t, i, n):
            score, path = self.jt.hmm_viterbi(e, t, i, n)
            return self.jt.hmm_log_partition(e, t, i, n).sum() + 0.5 * score.sum(), path

        torch.compiler.reset()
        want, want_path = step(*tables, lengths)
        want_grads = torch.autograd.grad(want, tables)
        got, got_path = torch.compile(step, fullgraph=True)(*tables, lengths)
        got_grads = torch.autograd.grad(got, tables)
        torch.testing.assert_close(got, want)
        self.assertTrue(torch.equal(got_path, want_path))
        for g, w in zip(got_grads, want_grads):
            torch.testing.assert_close(g, w)

    def test_export(self):
        class Hmm(torch.nn.Module):
            def forward(self, e, t, i, n):
                import jitbmm.torch as jt
                return jt.hmm_log_partition(e, t, i, n) - jt.hmm_viterbi(e, t, i, n)[0]

        args = (torch.randn(3, 9, 5, device=self.dev), torch.randn(5, 5, device=self.dev),
                torch.randn(5, device=self.dev), torch.tensor([9, 4, 2], device=self.dev))
        exported = torch.export.export(Hmm(), args)
        self.assertIn("jitbmm.hmm", str(exported.graph))
        torch.testing.assert_close(exported.module()(*args), Hmm()(*args))

    def test_cuda_graph_capture(self):
        tables = [torch.randn(*shape, device=self.dev, requires_grad=True) for shape in ((8, 31, 16), (16, 16), (16,))]
        lengths = torch.randint(1, 32, (8,), device=self.dev)

        def step():
            score = self.jt.hmm_log_partition(*tables, lengths)
            return (score, *torch.autograd.grad(score.sum(), tables),
                    *self.jt.hmm_viterbi(*(x.detach() for x in tables), lengths))

        self.assert_graph_replays(step, lambda: [x.copy_(torch.randn_like(x)) for x in tables])


def main():
    return gpu_main()


if __name__ == "__main__":
    sys.exit(main())
