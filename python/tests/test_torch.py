"""jitbmm.torch on the GPU machine: values and gradients against a float64 torch reference, gradcheck, strides,
broadcasting, streams, errors, and a genbmm-style CRF example.

Run as a program (the python_torch CTest entry): it exits 77 ("skipped") where torch or a CUDA GPU is missing, and
fails if any test is skipped where both exist, so it never reports a pass without running everything. The clear
ImportError without torch is checked everywhere by test_torch_import.py."""

import ctypes
import math
import sys
import threading
import unittest

import package_under_test  # noqa: E402

package_under_test.import_path()

from torch_cases import HALF_ROUNDING, HAVE_CUDA, gpu_main, torch  # noqa: E402


def naive(a, b, semiring):
    """The float64 reference, written the way PyTorch users write it (it materializes B·M·K·N)."""
    if semiring == "plus_times":
        return a @ b
    if semiring == "max_times":
        return (a.unsqueeze(-1) * b.unsqueeze(-3)).max(-2).values
    t = a.unsqueeze(-1) + b.unsqueeze(-3)
    if semiring == "log":
        return torch.logsumexp(t, dim=-2)
    return t.max(-2).values if semiring == "max_plus" else t.min(-2).values


TOL = {"f32": (2e-5, 2e-5), "f64": (1e-10, 1e-10), "f16": (2e-2, 2e-2), "bf16": (5e-2, 5e-2)}
SEMIRINGS = ("log", "max_plus", "min_plus", "max_times", "plus_times")
SELECTING = ("max_plus", "min_plus", "max_times")
# Each semiring's zero: an output with no terms (K = 0).
ZERO = {"log": -math.inf, "max_plus": -math.inf, "min_plus": math.inf, "max_times": 0.0, "plus_times": 0.0}


def reference(a, b, semiring):
    """naive() broadcast over the batch dimensions, with K = 0 giving the semiring's zero (torch's max and min refuse
    an empty reduction)."""
    if a.shape[-1] == 0:
        batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        zero = torch.full((*batch, a.shape[-2], b.shape[-1]), ZERO[semiring], dtype=a.dtype, device=a.device)
        return zero + 0 * (a.sum() + b.sum())  # still a function of a and b, whose gradients are then zeros
    return naive(a, b, semiring)


def half_gradient_close(got, want, a64, b64, g, semiring, name, dtype, out):
    """A half dtype's gradient of log or plus_times, element by element: within its rounding to the dtype, plus a
    share of its scale (each element's sum of |contributions|: the gradient of the terms' sizes with |g|). That share
    is the TF32 forms' 2e-3 (a half gradient may take one TF32 product per term) and, for log, what the output's own
    rounding to the dtype (which the backward reads) moves the weights by. A rolled, doubled or zero gradient fails."""
    x, y = (a64.detach().abs() if semiring == "plus_times" else a64.detach()).requires_grad_(True), \
        (b64.detach().abs() if semiring == "plus_times" else b64.detach()).requires_grad_(True)
    scale = torch.autograd.grad(reference(x, y, semiring), (x, y), g.abs(), allow_unused=True)
    scale = scale[0 if name == "grad_a" else 1]
    scale = torch.zeros_like(want) if scale is None else scale
    finite = out[torch.isfinite(out)]
    moved = 4 * HALF_ROUNDING[dtype] * max(1.0, finite.abs().max().item() if finite.numel() else 0.0)
    allowed = HALF_ROUNDING[dtype] * want.abs() + (2e-3 + (moved if semiring == "log" else 0.0)) * scale + 2.0 ** -24
    alike = (torch.isnan(got.double()) & torch.isnan(want)) | (got.double() == want)  # NaN, or equal infinities
    bad = ~alike & ~((got.double() - want).abs() <= allowed)
    if bad.any():
        i = bad.nonzero()[0].tolist()
        raise AssertionError(f"{name}{i} = {got.double()[tuple(i)].item()}, reference {want[tuple(i)].item()} "
                             f"(scale {scale[tuple(i)].item()}): {int(bad.sum())} of {bad.numel()} outside")


class StreamGate:
    """Holds a CUDA stream until release(): a host function queued on it (libc's sem_wait) waits on a semaphore that
    only release() posts, so work queued behind it cannot start however slow the machine. A timer releases it after
    `limit` seconds, so that a call that waits on the held stream fails the test (timed_out) instead of hanging."""

    def __init__(self, stream, limit=60.0):
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._cuda = ctypes.CDLL("libcuda.so.1")
        self._sem = ctypes.create_string_buffer(64)  # sem_t is 32 bytes on x86-64 Linux
        if self._libc.sem_init(self._sem, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "sem_init")
        fn = ctypes.cast(self._libc.sem_wait, ctypes.c_void_p)
        result = self._cuda.cuLaunchHostFunc(ctypes.c_void_p(stream.cuda_stream), fn, self._sem)
        if result != 0:
            raise RuntimeError(f"cuLaunchHostFunc failed: CUresult {result}")
        self._stream = stream
        self._lock = threading.Lock()
        self._released = False
        self.timed_out = False
        self._timer = threading.Timer(limit, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def _expire(self):
        self.timed_out = True
        self.release()

    def release(self):
        with self._lock:
            if not self._released:
                self._released = True
                self._libc.sem_post(self._sem)

    def close(self):
        self.release()
        self._timer.cancel()
        self._stream.synchronize()  # the host function has returned: the semaphore is free to go
        self._libc.sem_destroy(self._sem)


class TorchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import jitbmm
        import jitbmm.torch as jt
        cls.jt = jt
        jitbmm.set_tune_policy("never")  # tests choose nothing; tuning is measured elsewhere
        cls.dev = torch.device("cuda")

    def rand(self, *shape, dtype=None, positive=False, requires_grad=False):
        dtype = dtype or torch.float32
        t = torch.randn(*shape, dtype=torch.float64, device=self.dev)
        t = (t.abs() if positive else t).to(dtype)
        return t.requires_grad_(requires_grad)

    def check_values_and_grads(self, a, b, semiring, dtype_name):
        out = self.jt.semiring_bmm(a, b, semiring)
        a64 = a.detach().double().requires_grad_(True)
        b64 = b.detach().double().requires_grad_(True)
        want = naive(a64, b64, semiring)
        rtol, atol = TOL[dtype_name]
        self.assertEqual(out.dtype, a.dtype)
        self.assertEqual(tuple(out.shape), tuple(want.shape))
        torch.testing.assert_close(out.double(), want, rtol=rtol, atol=atol)
        g = torch.randn_like(want)
        out.backward(g.to(out.dtype))
        want.backward(g.to(out.dtype).double())
        if dtype_name in ("f16", "bf16") and semiring in ("max_plus", "min_plus", "max_times"):
            # Half-precision terms tie often, and torch's reference breaks ties its own way: check that every
            # output sends its gradient somewhere (max_times: times a partner, so only finiteness).
            self.assertTrue(torch.isfinite(a.grad).all().item() and torch.isfinite(b.grad).all().item())
            if semiring != "max_times":
                total = g.to(out.dtype).double().sum()
                torch.testing.assert_close(a.grad.double().sum(), total, rtol=1e-2, atol=1e-1)
                torch.testing.assert_close(b.grad.double().sum(), total, rtol=1e-2, atol=1e-1)
            return
        torch.testing.assert_close(a.grad.double(), a64.grad, rtol=rtol * 5, atol=atol * 5)
        torch.testing.assert_close(b.grad.double(), b64.grad, rtol=rtol * 5, atol=atol * 5)

    def test_values_and_gradients_every_semiring_and_dtype(self):
        torch.manual_seed(0)
        for semiring in ("log", "max_plus", "min_plus", "max_times", "plus_times"):
            for dtype, name in ((torch.float32, "f32"), (torch.float64, "f64"), (torch.float16, "f16"),
                                (torch.bfloat16, "bf16")):
                with self.subTest(semiring=semiring, dtype=name):
                    pos = semiring == "max_times"
                    a = self.rand(3, 17, 33, dtype=dtype, positive=pos, requires_grad=True)
                    b = self.rand(3, 33, 29, dtype=dtype, positive=pos, requires_grad=True)
                    self.check_values_and_grads(a, b, semiring, name)

    def test_non_contiguous_and_broadcast_inputs(self):
        torch.manual_seed(1)
        for semiring in ("log", "max_plus", "plus_times"):
            with self.subTest(semiring=semiring, case="transposed"):
                a = self.rand(4, 19, 23).transpose(1, 2).detach().requires_grad_(True)  # [4, 23, 19], col-major
                b = self.rand(4, 29, 19)[:, ::2, :].transpose(1, 2).detach().requires_grad_(True)  # [4, 19, 15]
                self.check_values_and_grads(a, b, semiring, "f32")
            with self.subTest(semiring=semiring, case="one a for every batch"):
                a = self.rand(7, 11, requires_grad=True)
                b = self.rand(5, 11, 9, requires_grad=True)
                self.check_values_and_grads(a, b, semiring, "f32")
            with self.subTest(semiring=semiring, case="batch dims broadcast both ways"):
                a = self.rand(2, 1, 6, 8, requires_grad=True)
                b = self.rand(1, 3, 8, 5, requires_grad=True)
                self.check_values_and_grads(a, b, semiring, "f32")
            with self.subTest(semiring=semiring, case="both one matrix for every batch"):
                x, y = self.rand(1, 6, 8, requires_grad=True), self.rand(1, 8, 5, requires_grad=True)
                out = self.jt.semiring_bmm(x.expand(4, 6, 8), y.expand(4, 8, 5), semiring)
                x64, y64 = (t.detach().double().requires_grad_(True) for t in (x, y))
                want = naive(x64.expand(4, 6, 8), y64.expand(4, 8, 5), semiring)
                self.assertEqual(out.shape, (4, 6, 5))
                torch.testing.assert_close(out.double(), want, rtol=2e-5, atol=2e-5)
                out.sum().backward()
                want.sum().backward()
                torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-4, atol=1e-4)
                torch.testing.assert_close(y.grad.double(), y64.grad, rtol=1e-4, atol=1e-4)
            with self.subTest(semiring=semiring, case="expanded view"):
                base = self.rand(1, 6, 8, requires_grad=True)
                b = self.rand(4, 8, 5, requires_grad=True)
                out = self.jt.semiring_bmm(base.expand(4, 6, 8), b, semiring)
                base64 = base.detach().double().requires_grad_(True)
                want = naive(base64.expand(4, 6, 8), b.detach().double(), semiring)
                torch.testing.assert_close(out.double(), want, rtol=2e-5, atol=2e-5)
                out.sum().backward()
                want.sum().backward()
                torch.testing.assert_close(base.grad.double(), base64.grad, rtol=1e-4, atol=1e-4)

    def test_views_whose_memory_is_not_their_values_and_forward_mode(self):
        """A view with the negative bit (a complex tensor's conj().imag, whose memory holds the values' negatives) is
        read as its values, by the general path and the per-call one, products and chains alike; forward-mode AD,
        which no kernel supports, is refused rather than dropping the tangent."""
        jt = self.jt
        a = torch.randn(2, 5, 7, dtype=torch.complex64, device=self.dev).conj().imag
        b = self.rand(2, 7, 3)
        self.assertTrue(a.is_neg())
        for _ in range(2):
            torch.testing.assert_close(jt.logbmm(a, b), jt.logbmm(a.resolve_neg(), b))
        p = torch.randn(2, 4, 3, 3, dtype=torch.complex64, device=self.dev).conj().imag
        torch.testing.assert_close(jt.chain_log_partition(p), jt.chain_log_partition(p.resolve_neg()))
        import torch.autograd.forward_ad as fwad
        x = self.rand(2, 5, 7)
        jt.logbmm(x, b)  # the per-call path knows this call now
        with fwad.dual_level():
            with self.assertRaisesRegex(NotImplementedError, "forward-mode"):
                jt.logbmm(fwad.make_dual(x, torch.ones_like(x)), b)
            with self.assertRaisesRegex(NotImplementedError, "forward-mode"):
                jt.chain_log_partition(fwad.make_dual(p.resolve_neg(), torch.ones_like(p)))

    def test_gradcheck_fp64(self):
        torch.manual_seed(2)
        for semiring in ("log", "max_plus", "min_plus", "max_times", "plus_times"):
            with self.subTest(semiring=semiring):
                pos = semiring == "max_times"
                a = self.rand(2, 4, 5, dtype=torch.float64, positive=pos, requires_grad=True)
                b = self.rand(2, 5, 3, dtype=torch.float64, positive=pos, requires_grad=True)
                self.assertTrue(torch.autograd.gradcheck(
                    lambda x, y: self.jt.semiring_bmm(x, y, semiring), (a, b), eps=1e-6, atol=1e-6))

    def test_genbmm_names_and_a_crf_forward_algorithm(self):
        # genbmm-style usage: the log-partition of a linear-chain CRF by repeated log-semiring products.
        torch.manual_seed(3)
        batch, length, tags = 8, 12, 16
        potentials = self.rand(batch, length, tags, tags, requires_grad=True)

        def log_partition(bmm, pots):
            alpha = pots[:, 0]
            for t in range(1, length):
                alpha = bmm(alpha, pots[:, t])
            return torch.logsumexp(alpha, dim=(-2, -1)).sum()

        got = log_partition(self.jt.logbmm, potentials)
        pots64 = potentials.detach().double().requires_grad_(True)
        want = log_partition(lambda x, y: naive(x, y, "log"), pots64)
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-4)
        got.backward()
        want.backward()
        torch.testing.assert_close(potentials.grad.double(), pots64.grad, rtol=1e-4, atol=1e-5)
        # The other genbmm names.
        a, b = self.rand(2, 5, 6), self.rand(2, 6, 7)
        torch.testing.assert_close(self.jt.maxbmm(a, b), naive(a, b, "max_plus"))
        torch.testing.assert_close(self.jt.minbmm(a, b), naive(a, b, "min_plus"))
        pa, pb = a.abs(), b.abs()
        torch.testing.assert_close(self.jt.prodmaxbmm(pa, pb), naive(pa, pb, "max_times"))

    def test_runs_on_the_current_stream(self):
        # The current stream s is held while the product is queued on it, behind a copy that gives `a` its values
        # (NaN until then). A kernel launched anywhere but s would run now, on NaN, and say so in its output: the
        # legacy default stream is drained before s is released.
        torch.manual_seed(6)
        for semiring in ("log", "max_plus"):
            with self.subTest(semiring=semiring):
                a_true, b = self.rand(16, 64, 64), self.rand(16, 64, 64)
                a = torch.full_like(a_true, math.nan, requires_grad=False)
                g = torch.randn(16, 64, 64, device=self.dev)
                torch.cuda.synchronize()
                s = torch.cuda.Stream()
                # Every plan and kernel (forward with argmax, backward) loaded before the stream is held: loading a
                # module may synchronise the context.
                self.jt.semiring_bmm(a_true.detach().requires_grad_(True), b, semiring).backward(g)
                torch.cuda.synchronize()
                gate = StreamGate(s)
                try:
                    with torch.cuda.stream(s):
                        a.copy_(a_true)
                        leaf = a.detach().requires_grad_(True)
                        out = self.jt.semiring_bmm(leaf, b, semiring)
                        out.backward(g)
                    self.assertFalse(s.query(), "the held stream reports its work done")
                    torch.cuda.default_stream(self.dev).synchronize()  # a kernel sent there has run by now
                finally:
                    gate.release()
                    gate.close()
                self.assertFalse(gate.timed_out, "a call waited on the held stream")
                torch.cuda.synchronize()
                a64 = a_true.double().requires_grad_(True)
                want = naive(a64, b.double(), semiring)
                torch.testing.assert_close(out.double(), want, rtol=2e-5, atol=2e-5)
                want.backward(g.double())
                self.assertFalse(torch.isnan(leaf.grad).any().item(), "the backward read a before its copy")
                torch.testing.assert_close(leaf.grad.double(), a64.grad, rtol=1e-4, atol=1e-4)

    def test_clear_errors(self):
        jt = self.jt
        with self.assertRaisesRegex(ValueError, "CUDA"):
            jt.logbmm(torch.zeros(2, 3, 4), torch.zeros(2, 4, 5))
        with self.assertRaisesRegex(ValueError, "shape"):
            jt.logbmm(self.rand(2, 3, 4), self.rand(2, 5, 5))
        with self.assertRaisesRegex(ValueError, "broadcast"):
            jt.logbmm(self.rand(2, 3, 4), self.rand(3, 4, 5))
        with self.assertRaisesRegex(TypeError, "dtype"):
            jt.logbmm(torch.zeros(2, 3, 4, dtype=torch.int32, device=self.dev), self.rand(2, 4, 5))
        with self.assertRaisesRegex(TypeError, "different dtypes"):
            jt.logbmm(self.rand(2, 3, 4), self.rand(2, 4, 5, dtype=torch.float64))
        with self.assertRaisesRegex(ValueError, "semiring"):
            jt.semiring_bmm(self.rand(2, 3, 4), self.rand(2, 4, 5), "sum")
        with self.assertRaisesRegex(ValueError, "2 dimensions"):
            jt.logbmm(self.rand(4), self.rand(4, 5))
        with self.assertRaisesRegex(ValueError, "precision"):
            jt.logbmm(self.rand(2, 3, 4), self.rand(2, 4, 5), precision="rough")
        # The registered operators called directly check their operands too (no read past b's batches, say).
        op, backward_op = torch.ops.jitbmm.semiring_bmm, torch.ops.jitbmm.semiring_bmm_backward
        for a, b in ((self.rand(4, 3, 5), self.rand(2, 5, 2)), (self.rand(4, 3, 5), self.rand(4, 6, 2)),
                     (self.rand(2, 2, 3, 5), self.rand(2, 5, 2)), (self.rand(4, 3, 5), self.rand(4, 5, 2).double())):
            with self.subTest(a=tuple(a.shape), b=tuple(b.shape), dtype=b.dtype):
                with self.assertRaises((ValueError, TypeError)):
                    op(a, b, "log", "exact", False)
        a, b, wrong = self.rand(4, 3, 5), self.rand(4, 5, 2), self.rand(4, 3, 3)
        none = torch.empty(0, dtype=torch.int32, device=self.dev)
        with self.assertRaisesRegex(ValueError, "out: expected"):
            backward_op(a, b, wrong, none, wrong, "log", "exact", True, True)
        out, argmax = op(a, b, "max_plus", "exact", True)
        for name, args in (("grad_out", (out, argmax, out.double())), ("out", (out.half(), argmax, out)),
                           ("argmax", (out, argmax.long(), out)), ("argmax", (out, argmax[:1], out))):
            with self.subTest(name=name), self.assertRaisesRegex(ValueError, f"^{name}: expected"):
                backward_op(a, b, *args, "max_plus", "exact", True, True)
        with self.assertRaisesRegex(ValueError, "^semiring: unsupported"):
            op(a, b, "bogus", "exact", False)
        for shape in ((2, 3, 4), (0, 3, 4)):  # an empty product too, which makes no plan
            with self.assertRaisesRegex(ValueError, "precision: fast is for the log semiring only, not max_plus"):
                jt.semiring_bmm(self.rand(*shape), self.rand(shape[0], 4, 5), "max_plus", precision="fast")

    def test_workspaces_come_from_pytorch_and_reserved_memory_stays_flat(self):
        # Few outputs with a long K: split-K (under tuning policy never, as here), whose partial results need a
        # workspace every call. It must come from PyTorch's caching allocator: two allocations a call (the output
        # and the workspace) and no growth of reserved memory across 1000 calls. Likewise the backward's
        # workspaces (max_plus scatters into an accumulator).
        torch.manual_seed(7)
        for semiring in ("log", "max_plus"):
            with self.subTest(semiring=semiring):
                a = self.rand(2, 16, 8192, requires_grad=True)
                b = self.rand(2, 8192, 16, requires_grad=True)
                kernels = self.jt._kernels_for(semiring, torch.float32, a.device.index, (2, 16, 8192, 16),
                                               tuple(a.stride()), tuple(b.stride()), False, "exact")
                self.assertGreater(kernels.workspace, 0, "the test needs a plan with a workspace")
                want = naive(a.detach().double(), b.detach().double(), semiring)
                with torch.no_grad():
                    self.jt.semiring_bmm(a, b, semiring)
                torch.cuda.synchronize()
                reserved = torch.cuda.memory_reserved(self.dev)
                allocations = torch.cuda.memory_stats(self.dev)["allocation.all.allocated"]
                with torch.no_grad():
                    for _ in range(1000):
                        out = self.jt.semiring_bmm(a, b, semiring)
                torch.cuda.synchronize()
                made = torch.cuda.memory_stats(self.dev)["allocation.all.allocated"] - allocations
                self.assertGreaterEqual(made, 2000, "the workspace did not come from PyTorch")
                self.assertEqual(torch.cuda.memory_reserved(self.dev), reserved)
                torch.testing.assert_close(out.double(), want, rtol=2e-5, atol=2e-5)
                for _ in range(3):  # the backward's plans and workspaces settle
                    self.jt.semiring_bmm(a, b, semiring).sum().backward()
                torch.cuda.synchronize()
                reserved = torch.cuda.memory_reserved(self.dev)
                for _ in range(1000):
                    a.grad = b.grad = None
                    self.jt.semiring_bmm(a, b, semiring).sum().backward()
                torch.cuda.synchronize()
                self.assertEqual(torch.cuda.memory_reserved(self.dev), reserved)

    def test_repeated_calls_take_the_per_call_path_and_stay_right(self):
        # The second call of a layout is one lookup and one foreign call; layouts the kernels cannot take as they
        # are (a broadcast copy, a 1-batch view) keep the general path. Values and gradients right either way.
        torch.manual_seed(8)
        cases = {
            "contiguous": (lambda: self.rand(3, 9, 10), lambda: self.rand(3, 10, 7), True),
            "one a for every batch": (lambda: self.rand(9, 10), lambda: self.rand(3, 10, 7), True),
            "transposed b": (lambda: self.rand(3, 9, 10), lambda: self.rand(3, 7, 10).transpose(1, 2), True),
            "both 2-D": (lambda: self.rand(9, 10), lambda: self.rand(10, 7), True),
            "batch of one against three": (lambda: self.rand(1, 9, 10), lambda: self.rand(3, 10, 7), True),
            "4-D, a strided batch view": (lambda: self.rand(2, 6, 9, 10)[:, ::2], lambda: self.rand(2, 3, 10, 7), True),
            "expanded a": (lambda: self.rand(1, 9, 10).expand(3, 9, 10), lambda: self.rand(3, 10, 7), False),
            "batch dims broadcast both ways": (lambda: self.rand(2, 1, 9, 10), lambda: self.rand(1, 3, 10, 7), False),
        }
        for semiring in ("log", "max_plus"):
            for name, (make_a, make_b, fast) in cases.items():
                for grad in (False, True):
                    with self.subTest(semiring=semiring, case=name, grad=grad):
                        for _ in range(2):
                            a, b = make_a(), make_b()
                            if grad:  # leaves of the same layout
                                a = a.detach().requires_grad_(True)
                                b = b.detach().requires_grad_(True)
                            self.check_values_and_grads(a, b, semiring, "f32") if grad else \
                                torch.testing.assert_close(
                                    self.jt.semiring_bmm(a, b, semiring).double(),
                                    naive(a.double(), b.double(), semiring), rtol=2e-5, atol=2e-5)
                        key = self.jt._key(a, b, semiring, "exact")
                        self.assertEqual(key in self.jt._fast, fast)

    def test_the_per_call_path_under_saved_tensor_hooks_and_checkpointing(self):
        """A saved-tensor hook that gives the operands back in another layout (save_on_cpu returns them contiguous)
        does not meet the per-call path's kernels reading them in the first call's; and a non-reentrant checkpoint,
        whose forward takes the general path and whose recomputation the per-call path, saves alike in both."""
        from torch.utils.checkpoint import checkpoint
        torch.manual_seed(9)
        for semiring in ("log", "max_plus", "plus_times"):
            for name, make_a in (("transposed", lambda: self.rand(4, 5, 3).transpose(1, 2)),
                                 ("row-sliced", lambda: self.rand(4, 6, 5)[:, ::2])):
                with self.subTest(semiring=semiring, a=name):
                    b = self.rand(4, 5, 2).requires_grad_(True)
                    for step in range(3):  # the first call takes the general path, the others the per-call one
                        a = make_a().detach().requires_grad_(True)
                        with torch.autograd.graph.save_on_cpu(pin_memory=True):
                            out = self.jt.semiring_bmm(a, b, semiring)
                        weights = torch.rand_like(out)
                        got = torch.autograd.grad((out * weights).sum(), (a, b))
                        want = torch.autograd.grad((naive(a.double(), b.double(), semiring) * weights).sum(), (a, b))
                        for g, w in zip(got, want):  # want: a's and b's own dtype
                            torch.testing.assert_close(g.double(), w.double(), rtol=1e-4, atol=1e-4)
        for semiring in ("log", "max_plus"):
            with self.subTest(semiring=semiring, checkpoint=True):
                a, b = self.rand(2, 2, 3, 5).requires_grad_(True), self.rand(2, 2, 5, 4).requires_grad_(True)
                for step in range(2):
                    out = checkpoint(lambda a, b: self.jt.semiring_bmm(a, b, semiring), a, b, use_reentrant=False)
                    got = torch.autograd.grad(out.sum(), (a, b))
                    want = torch.autograd.grad(naive(a.double(), b.double(), semiring).sum(), (a, b))
                    for g, w in zip(got, want):
                        torch.testing.assert_close(g.double(), w.double(), rtol=1e-4, atol=1e-4)

    def test_an_output_changed_in_place_where_the_backward_does_not_read_it(self):
        """Only log's backward reads the output: the others' output may be changed in place (out.relu_()), as
        torch.matmul's may; log's is an error, on either path."""
        a, b = self.rand(3, 4, 5, requires_grad=True), self.rand(3, 5, 2, requires_grad=True)
        for semiring in ("plus_times", "max_plus", "log"):
            for step in range(2):  # the general path, then the per-call path
                with self.subTest(semiring=semiring, step=step):
                    out = self.jt.semiring_bmm(a, b, semiring)
                    out.relu_()
                    if semiring == "log":
                        with self.assertRaisesRegex(RuntimeError, "inplace"):
                            out.sum().backward()
                    else:
                        out.sum().backward()

    def test_dispatch_modes_see_the_operator(self):
        """Under a dispatch mode (make_fx, FlopCounterMode, a logging mode) a product and a chain go through the
        registered operators, so that the mode sees them: make_fx's graph computes the product, not an empty
        buffer."""
        from torch.fx.experimental.proxy_tensor import make_fx
        from torch.utils._python_dispatch import TorchDispatchMode
        a, b = self.rand(3, 4, 5), self.rand(3, 5, 2)
        graph = make_fx(lambda a, b: self.jt.logbmm(a, b))(a, b)
        self.assertIn("jitbmm.semiring_bmm", str(graph.code))
        torch.testing.assert_close(graph(a, b), self.jt.logbmm(a, b))

        class Seen(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.ops = []

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                self.ops.append(str(func))
                return func(*args, **(kwargs or {}))

        potentials = self.rand(2, 3, 4, 4)
        with Seen() as seen:
            self.jt.logbmm(a, b)
            self.jt.chain_log_partition(potentials)
        self.assertTrue(any("jitbmm.semiring_bmm" in op for op in seen.ops), seen.ops)
        self.assertTrue(any("jitbmm.chain" in op for op in seen.ops), seen.ops)

    def test_tuned_log_and_precision_fast(self):
        # With tuning on, a product this size runs exp_matmul (tensor cores); fast may use one TF32 product a term.
        import jitbmm
        torch.manual_seed(5)
        a, b = self.rand(2, 128, 256), self.rand(2, 256, 128)
        want = naive(a.double(), b.double(), "log")
        jitbmm.set_tune_policy("exact")
        try:
            exact = self.jt.logbmm(a, b)
            fast = self.jt.logbmm(a, b, precision="fast")
        finally:
            jitbmm.set_tune_policy("never")
        torch.testing.assert_close(exact.double(), want, rtol=2e-5, atol=2e-5)
        torch.testing.assert_close(fast.double(), want, rtol=2e-3, atol=2e-3)

    def test_edge_values_follow_the_contract(self):
        a = torch.tensor([[[0.0, -math.inf], [-math.inf, -math.inf]]], device=self.dev, requires_grad=True)
        b = torch.tensor([[[0.0], [1.0]]], device=self.dev)
        out = self.jt.logbmm(a, b)
        self.assertEqual(out[0, 0, 0].item(), 0.0)
        self.assertEqual(out[0, 1, 0].item(), -math.inf)
        out.sum().backward()
        self.assertFalse(torch.isnan(a.grad).any().item())  # an all -inf row has gradient 0, not NaN
        self.assertEqual(a.grad[0, 1].abs().sum().item(), 0.0)


class OperatorTest(unittest.TestCase):
    """jitbmm.torch as registered operators: opcheck, double backward, torch.compile (default and fullgraph, no graph
    break), torch.export, CUDA-graph capture and autocast."""

    @classmethod
    def setUpClass(cls):
        import jitbmm
        import jitbmm.torch as jt
        cls.jt = jt
        jitbmm.set_tune_policy("never")
        cls.dev = torch.device("cuda")

    def rand(self, *shape, dtype=None, requires_grad=False):
        t = torch.randn(*shape, dtype=dtype or torch.float32, device=self.dev)
        return t.requires_grad_(requires_grad)

    def test_tensor_subclasses_take_the_registered_operator(self):
        """A tensor subclass (here FakeTensor, as tracing makes them) goes through the registered operator, which
        dispatches it, never through the eager paths that read data_ptr()."""
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode():
            a, b = torch.empty(4, 8, 16, device=self.dev), torch.empty(4, 16, 8, device=self.dev)
            self.assertEqual(self.jt.logbmm(a, b).shape, (4, 8, 8))
            self.assertEqual(self.jt.maxbmm(a.requires_grad_(), b).shape, (4, 8, 8))

    def test_opcheck_every_semiring(self):
        torch.manual_seed(10)
        for semiring in ("log", "max_plus", "min_plus", "max_times", "plus_times"):
            for a_shape in ((3, 5, 7), (5, 7)):  # batched, and one matrix for every batch
                with self.subTest(semiring=semiring, a=a_shape):
                    a = self.rand(*a_shape, requires_grad=True)
                    b = self.rand(3, 7, 4, requires_grad=True)
                    if semiring == "max_times":
                        a, b = a.detach().abs().requires_grad_(), b.detach().abs().requires_grad_()
                    argmax = semiring in ("max_plus", "min_plus", "max_times")
                    torch.library.opcheck(torch.ops.jitbmm.semiring_bmm.default, (a, b, semiring, "exact", argmax))
                    out, arg = torch.ops.jitbmm.semiring_bmm(a.detach(), b.detach(), semiring, "exact", argmax)
                    g = torch.randn_like(out)
                    torch.library.opcheck(torch.ops.jitbmm.semiring_bmm_backward.default,
                                          (a.detach(), b.detach(), out, arg, g, semiring, "exact", True, True))

    def test_double_backward_gradgradcheck_fp64(self):
        torch.manual_seed(11)
        for semiring in ("log", "plus_times", "max_plus", "max_times"):
            for a_shape in ((2, 4, 5), (4, 5)):
                with self.subTest(semiring=semiring, a=a_shape):
                    pos = semiring == "max_times"
                    a = self.rand(*a_shape, dtype=torch.float64)
                    b = self.rand(2, 5, 3, dtype=torch.float64)
                    if pos:
                        a, b = a.abs(), b.abs()
                    a.requires_grad_(), b.requires_grad_()
                    f = lambda x, y: self.jt.semiring_bmm(x, y, semiring)
                    self.assertTrue(torch.autograd.gradgradcheck(f, (a, b), eps=1e-6, atol=1e-5))

    def test_jvp_and_hvp_through_zero_upstream_gradients(self):
        # torch.autograd.functional's jvp and hvp differentiate a backward with respect to an upstream gradient of
        # zeros: a gradient linear in it must keep its derivative there.
        torch.manual_seed(13)
        for semiring in ("log", "max_times", "max_plus"):
            with self.subTest(semiring=semiring):
                a, b = self.rand(2, 4, 5, dtype=torch.float64), self.rand(2, 5, 3, dtype=torch.float64)
                if semiring == "max_times":
                    a, b = a.abs(), b.abs()
                va, vb = torch.randn_like(a), torch.randn_like(b)
                _, got = torch.autograd.functional.jvp(lambda x, y: self.jt.semiring_bmm(x, y, semiring), (a, b),
                                                       (va, vb))
                _, want = torch.autograd.functional.jvp(lambda x, y: naive(x, y, semiring), (a, b), (va, vb))
                torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
        a, b = self.rand(4, 5, dtype=torch.float64), self.rand(5, 3, dtype=torch.float64)
        v = torch.randn_like(a)
        _, got = torch.autograd.functional.hvp(lambda x: self.jt.logbmm(x, b).logsumexp((0, 1)), a, v)
        _, want = torch.autograd.functional.hvp(lambda x: naive(x, b, "log").logsumexp((0, 1)), a, v)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)

    def test_loss_on_marginals_trains(self):
        # pytorch-struct's marginals: the gradient of the log partition, with create_graph=True, then a loss on it.
        torch.manual_seed(12)
        a = self.rand(4, 6, 8, dtype=torch.float64, requires_grad=True)
        b = self.rand(4, 8, 5, dtype=torch.float64, requires_grad=True)
        for impl in ("jitbmm", "torch"):
            a.grad = b.grad = None
            out = self.jt.logbmm(a, b) if impl == "jitbmm" else torch.logsumexp(a.unsqueeze(-1) + b.unsqueeze(-3), -2)
            marg_a, marg_b = torch.autograd.grad(out.logsumexp((-1, -2)).sum(), (a, b), create_graph=True)
            ((marg_a ** 2).sum() + (marg_b * b).sum()).backward()
            if impl == "jitbmm":
                got = (marg_a.detach(), a.grad.clone(), b.grad.clone())
            else:
                for x, y in zip(got, (marg_a.detach(), a.grad, b.grad)):
                    torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-12)

    def test_double_backward_with_infinities_and_nan(self):
        # Masked entries (-inf, as a CRF's forbidden transitions) in the second-order path: the marginals equal the
        # fused backward's, the loss on them matches torch's composition where that is finite, and an output whose
        # terms are all -inf contributes nothing (no NaN from 0 * inf). A NaN input poisons exactly what it reaches.
        torch.manual_seed(14)
        a = self.rand(3, 6, 8, dtype=torch.float64)
        b = self.rand(3, 8, 5, dtype=torch.float64)
        a[torch.rand_like(a) < 0.25] = -math.inf
        b[torch.rand_like(b) < 0.25] = -math.inf
        a[0, 2, :] = -math.inf  # out[0, 2, :] = -inf: no contribution
        a.requires_grad_(), b.requires_grad_()
        results = {}
        for impl in ("jitbmm", "torch"):
            a.grad = b.grad = None
            out = self.jt.logbmm(a, b) if impl == "jitbmm" else torch.logsumexp(a.unsqueeze(-1) + b.unsqueeze(-3), -2)
            live = out.detach() > -math.inf
            loss = torch.where(live, out, torch.zeros_like(out)).sum()
            marg_a, marg_b = torch.autograd.grad(loss, (a, b), create_graph=True)
            ((marg_a ** 2).sum() + (marg_b ** 2).sum()).backward()
            results[impl] = (marg_a.detach(), marg_b.detach(), a.grad.clone(), b.grad.clone())
        first = torch.autograd.grad(torch.where(live, self.jt.logbmm(a, b), 0).sum(), (a, b))
        for got, want in zip(results["jitbmm"][:2], first):
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        for got in results["jitbmm"]:
            self.assertFalse(torch.isnan(got).any().item(), "NaN from an all -inf output")
        finite = [torch.isfinite(t) for t in results["torch"]]
        for got, want, ok in zip(results["jitbmm"], results["torch"], finite):
            torch.testing.assert_close(got[ok], want[ok], rtol=1e-9, atol=1e-12)
        a2 = a.detach().clone()
        a2[1, 3, 4] = math.nan
        a2.requires_grad_()
        out = self.jt.logbmm(a2, b)
        marg_a, = torch.autograd.grad(out.nan_to_num(0, 0, 0).sum(), (a2,), create_graph=True)
        (marg_a ** 2).sum().backward()
        self.assertTrue(torch.isnan(out[1, 3]).all().item())
        self.assertTrue(torch.isnan(a2.grad[1, 3]).any().item())
        self.assertFalse(torch.isnan(a2.grad[0]).any().item() or torch.isnan(a2.grad[2]).any().item())

    def crf_partition(self, potentials):
        """A linear-chain CRF's log partition by the forward algorithm: one log-semiring product a step."""
        alpha = potentials[:, 0].logsumexp(-2, keepdim=True)  # [B, 1, T]
        for t in range(1, potentials.shape[1]):
            alpha = self.jt.logbmm(alpha, potentials[:, t])
        return alpha.logsumexp(-1).squeeze(-1)

    def test_compile_default_and_fullgraph_without_graph_breaks(self):
        import torch._dynamo
        torch.manual_seed(13)
        potentials = self.rand(4, 6, 5, 5, requires_grad=True)
        want = self.crf_partition(potentials)
        (want_grad,) = torch.autograd.grad(want.sum(), potentials)
        explanation = torch._dynamo.explain(self.crf_partition)(potentials)
        self.assertEqual(explanation.graph_break_count, 0, explanation.break_reasons)
        for fullgraph in (False, True):
            with self.subTest(fullgraph=fullgraph):
                torch._dynamo.reset()
                compiled = torch.compile(self.crf_partition, fullgraph=fullgraph)
                got = compiled(potentials)
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
                (got_grad,) = torch.autograd.grad(got.sum(), potentials)
                torch.testing.assert_close(got_grad, want_grad, rtol=1e-4, atol=1e-5)

    def test_compiled_backward_uses_the_fused_kernels(self):
        torch._dynamo.reset()
        a = self.rand(2, 16, 16, requires_grad=True)
        b = self.rand(2, 16, 16, requires_grad=True)
        compiled = torch.compile(lambda x, y: self.jt.logbmm(x, y).sum(), fullgraph=True)
        compiled(a, b).backward()  # compile first
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            compiled(a, b).backward()
        names = {e.key for e in prof.key_averages()}
        self.assertIn("jitbmm::semiring_bmm_backward", names, sorted(n for n in names if "jitbmm" in n))

    def test_export(self):
        class Step(torch.nn.Module):
            def forward(self, x, y):
                import jitbmm.torch as jt
                return jt.logbmm(x, y).relu()

        a, b = self.rand(3, 5, 7), self.rand(3, 7, 4)
        exported = torch.export.export(Step(), (a, b))
        self.assertIn("jitbmm.semiring_bmm", str(exported.graph))
        torch.testing.assert_close(exported.module()(a, b), Step()(a, b))

    def test_cuda_graph_capture(self):
        a, b = self.rand(8, 32, 32), self.rand(8, 32, 32)
        for semiring in ("log", "max_plus"):
            with self.subTest(semiring=semiring):
                self.jt.semiring_bmm(a, b, semiring)  # plan made (and kernel loaded) outside the capture
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    self.jt.semiring_bmm(a, b, semiring)
                torch.cuda.current_stream().wait_stream(stream)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    out = self.jt.semiring_bmm(a, b, semiring)
                a.copy_(torch.randn_like(a))  # new inputs in the captured buffers
                graph.replay()
                torch.cuda.synchronize()
                torch.testing.assert_close(out, self.jt.semiring_bmm(a, b, semiring))

    def test_first_call_inside_a_capture_tunes_nothing(self):
        # A shape first seen inside a CUDA-graph capture, forward and backward, under a tuning policy: tuning
        # would launch and synchronise and so break the capture; the plan takes the default variant instead. The
        # first call outside the capture then tunes (a decision appears in the cache) and agrees with the replay.
        # Policy exact: bucket runs a problem this small on its default at first use, tuning nothing either way.
        import glob
        import os
        import jitbmm
        a, b = self.rand(3, 40, 24, requires_grad=True), self.rand(3, 24, 56, requires_grad=True)
        cache = jitbmm.cache_dir()
        decisions = lambda: len(glob.glob(os.path.join(cache, "*.tune"))) if cache else 0
        before = decisions()
        jitbmm.set_tune_policy("exact")
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = self.jt.logbmm(a, b)
                ga, gb = torch.autograd.grad(out.sum(), (a, b))
            self.assertEqual(decisions(), before)
            with torch.no_grad():
                a.copy_(torch.randn_like(a))
            graph.replay()
            torch.cuda.synchronize()
            want = self.jt.logbmm(a, b)
            want_ga, want_gb = torch.autograd.grad(want.sum(), (a, b))
        finally:
            jitbmm.set_tune_policy("never")
        if cache:
            self.assertGreater(decisions(), before)
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ga, want_ga, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(gb, want_gb, rtol=1e-5, atol=1e-5)

    def test_autocast_keeps_the_input_dtype(self):
        # The operators are not autocast-listed: under autocast they run in their inputs' dtype (as documented).
        a, b = self.rand(2, 8, 8), self.rand(2, 8, 8)
        with torch.autocast("cuda", dtype=torch.float16):
            out = self.jt.logbmm(a, b)
            self.assertEqual(out.dtype, torch.float32)
            h = torch.nn.functional.linear(a, torch.eye(8, device=self.dev))  # float16 under autocast
            with self.assertRaisesRegex(TypeError, "different dtypes"):
                self.jt.logbmm(h, b)
        torch.testing.assert_close(out, self.jt.logbmm(a, b))


class EmptyDimensionsTest(unittest.TestCase):
    """B, M, K or N = 0 through every path of jitbmm.torch: the semiring's zero for K = 0, empty outputs otherwise,
    and zero (or empty) gradients, as torch's own composition gives them."""

    # (a's shape, b's shape): each size zero alone, together, in 2-D operands and in broadcast batch dimensions.
    CASES = {
        "K = 0": ((2, 3, 0), (2, 0, 4)),
        "M = 0": ((2, 0, 4), (2, 4, 5)),
        "N = 0": ((2, 3, 4), (2, 4, 0)),
        "B = 0": ((0, 3, 4), (0, 4, 5)),
        "M = N = 0": ((2, 0, 4), (2, 4, 0)),
        "M = K = 0": ((2, 0, 0), (2, 0, 5)),
        "B = K = 0": ((0, 3, 0), (0, 0, 5)),
        "all 0": ((0, 0, 0), (0, 0, 0)),
        "2-D, K = 0": ((3, 0), (0, 5)),
        "2-D, M = 0": ((0, 4), (4, 5)),
        "2-D a, B = 0": ((3, 4), (0, 4, 5)),
        "2-D a, K = 0": ((3, 0), (2, 0, 5)),
        "broadcast to B = 0": ((2, 1, 3, 4), (1, 0, 4, 5)),
        "broadcast, K = 0": ((1, 3, 0), (4, 0, 2)),
        "broadcast, N = 0": ((2, 1, 3, 4), (1, 3, 4, 0)),
    }

    @classmethod
    def setUpClass(cls):
        import jitbmm
        import jitbmm.torch as jt
        cls.jitbmm, cls.jt = jitbmm, jt
        jitbmm.set_tune_policy("never")
        cls.dev = torch.device("cuda")

    def operands(self, a_shape, b_shape, semiring, dtype=None, requires_grad=True):
        a = torch.randn(*a_shape, dtype=dtype, device=self.dev)
        b = torch.randn(*b_shape, dtype=dtype, device=self.dev)
        if semiring == "max_times":
            a, b = a.abs(), b.abs()
        return a.requires_grad_(requires_grad), b.requires_grad_(requires_grad)

    def check(self, a, b, semiring, out, grads=None, g=None):
        """out (and the gradients (grad_a, grad_b) for the upstream gradient g) against torch in float64."""
        a64 = a.detach().double().requires_grad_(True)
        b64 = b.detach().double().requires_grad_(True)
        want = reference(a64, b64, semiring)
        self.assertEqual(out.dtype, a.dtype)
        self.assertEqual(tuple(out.shape), tuple(want.shape))
        torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)
        if grads is not None:
            want_a, want_b = torch.autograd.grad(want, (a64, b64), g.double(), allow_unused=True)
            for got, want_grad, t in zip(grads, (want_a, want_b), (a, b)):
                self.assertEqual(tuple(got.shape), tuple(t.shape))
                self.assertEqual(got.dtype, t.dtype)
                self.assertEqual(got.count_nonzero().item(), 0)  # nothing reaches an operand of an empty product
                if want_grad is not None:
                    torch.testing.assert_close(got.double(), want_grad, rtol=0, atol=0)

    def test_every_empty_case_every_semiring_with_and_without_gradients(self):
        for semiring in SEMIRINGS:
            for name, (a_shape, b_shape) in self.CASES.items():
                with self.subTest(semiring=semiring, case=name):
                    for _ in range(2):  # the second call of a layout: remembered plans and the per-call table
                        a, b = self.operands(a_shape, b_shape, semiring)
                        out = self.jt.semiring_bmm(a, b, semiring)
                        g = torch.randn_like(out)
                        grads = torch.autograd.grad(out, (a, b), g)
                        self.check(a, b, semiring, out, grads, g)
                        with torch.no_grad():
                            self.check(a, b, semiring, self.jt.semiring_bmm(a, b, semiring))
                        plain_a, plain_b = a.detach(), b.detach()
                        self.check(plain_a, plain_b, semiring, self.jt.semiring_bmm(plain_a, plain_b, semiring))

    def test_k_zero_gives_the_semirings_zero_in_every_dtype(self):
        for semiring in SEMIRINGS:
            for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
                for grad in (False, True):
                    with self.subTest(semiring=semiring, dtype=dtype, grad=grad):
                        a, b = self.operands((2, 3, 0), (2, 0, 4), semiring, dtype, requires_grad=grad)
                        out = self.jt.semiring_bmm(a, b, semiring)
                        self.assertEqual(out.dtype, dtype)
                        self.assertTrue(torch.equal(out, torch.full((2, 3, 4), ZERO[semiring], dtype=dtype,
                                                                    device=self.dev)), out)
                        if grad:
                            out.sum().backward()
                            self.assertEqual((a.grad.shape, b.grad.shape), (a.shape, b.shape))

    def test_transposed_and_strided_empty_views(self):
        for semiring in ("log", "max_plus", "plus_times"):
            with self.subTest(semiring=semiring):
                base_a = torch.randn(2, 6, 3, device=self.dev)
                base_b = torch.randn(2, 5, 6, device=self.dev)
                a = base_a[:, :0].transpose(1, 2).detach().requires_grad_(True)  # [2, 3, 0], strided
                b = base_b[:, :, :0].transpose(1, 2).detach().requires_grad_(True)  # [2, 0, 5]
                out = self.jt.semiring_bmm(a, b, semiring)
                g = torch.randn_like(out)
                self.check(a, b, semiring, out, torch.autograd.grad(out, (a, b), g), g)
                a = base_a.transpose(1, 2)[:, :0].detach().requires_grad_(True)  # [2, 0, 6], M = 0
                b = base_b.transpose(1, 2).detach().requires_grad_(True)  # [2, 6, 5], column-major
                out = self.jt.semiring_bmm(a, b, semiring)
                g = torch.randn_like(out)
                self.check(a, b, semiring, out, torch.autograd.grad(out, (a, b), g), g)

    def test_double_backward_with_empty_dimensions(self):
        for semiring in ("log", "plus_times", "max_plus", "max_times"):
            for name in ("K = 0", "M = 0", "N = 0", "2-D a, B = 0", "broadcast, K = 0"):
                with self.subTest(semiring=semiring, case=name):
                    a, b = self.operands(*self.CASES[name], semiring, dtype=torch.float64)
                    out = self.jt.semiring_bmm(a, b, semiring)
                    g = torch.randn_like(out)
                    grads = torch.autograd.grad(out, (a, b), g, create_graph=True)
                    self.check(a, b, semiring, out, grads, g)
                    loss = sum((x ** 2).sum() for x in grads) + out.sum()
                    second = torch.autograd.grad(loss, (a, b), allow_unused=True)
                    for got, t in zip(second, (a, b)):
                        if got is not None:
                            self.assertEqual(tuple(got.shape), tuple(t.shape))
                            self.assertEqual(got.count_nonzero().item(), 0)

    def test_compile_fullgraph_with_empty_dimensions(self):
        # The fake implementations give the shapes and layouts the real ones return; fullgraph: no graph break.
        import torch._dynamo
        cases = [(semiring, name, "aot_eager") for semiring in SEMIRINGS
                 for name in ("K = 0", "M = 0", "N = 0", "B = 0", "2-D a, B = 0", "broadcast, K = 0")]
        cases += [("log", "K = 0", "inductor"), ("max_plus", "M = 0", "inductor")]
        for semiring, name, backend in cases:
            with self.subTest(semiring=semiring, case=name, backend=backend):
                torch._dynamo.reset()
                a, b = self.operands(*self.CASES[name], semiring)
                compiled = torch.compile(lambda x, y: self.jt.semiring_bmm(x, y, semiring) * 2, fullgraph=True,
                                         backend=backend)
                out = compiled(a, b)
                g = torch.randn_like(out)
                grads = torch.autograd.grad(out, (a, b), g)
                self.check(a, b, semiring, out / 2, [x / 2 for x in grads], g)

    def test_the_c_abi_backward_with_empty_dimensions(self):
        # The plan's own backward (the C ABI, below jitbmm.torch): gradients of an operand that is not empty while
        # the output is (M = 0: grad_b; N = 0: grad_a) are zeros, written over whatever the buffer held.
        for semiring in SEMIRINGS:
            for B, M, K, N in ((2, 0, 4, 5), (2, 3, 4, 0)):
                with self.subTest(semiring=semiring, shape=(B, M, K, N)):
                    p = self.jitbmm.Problem(semiring, "f32", B, M, K, N)
                    plan = self.jitbmm.Plan(p, torch.cuda.current_stream().cuda_stream)
                    a = torch.randn(B, M, K, device=self.dev)
                    b = torch.randn(B, K, N, device=self.dev)
                    out = torch.empty(B, M, N, device=self.dev)
                    grad_a, grad_b = torch.full_like(a, math.nan), torch.full_like(b, math.nan)
                    stream = torch.cuda.current_stream().cuda_stream
                    plan(a.data_ptr() or None, b.data_ptr() or None, out.data_ptr() or None, stream=stream)
                    plan.backward(a.data_ptr() or None, b.data_ptr() or None, out.data_ptr() or None, None,
                                  out.data_ptr() or None, grad_a.data_ptr() or None, grad_b.data_ptr() or None,
                                  stream=stream)
                    torch.cuda.synchronize()
                    self.assertEqual(grad_a.count_nonzero().item(), 0, grad_a)
                    self.assertEqual(grad_b.count_nonzero().item(), 0, grad_b)


def random_operand(shape, rng, semiring, dtype, device):
    """A tensor of `shape` in a random layout: contiguous, transposed (column-major matrices), a strided slice of a
    larger tensor, or an expanded batch (stride 0); all of them views the kernels must read as they are."""
    layout = rng.choice(("contiguous", "transposed", "sliced", "expanded"))
    *batch, rows, cols = shape
    if layout == "transposed":
        t = torch.randn(*batch, cols, rows, dtype=torch.float64, device=device).transpose(-1, -2)
    elif layout == "sliced":
        t = torch.randn(*batch, rows, 2 * cols + 1, dtype=torch.float64, device=device)[..., 1::2]
    elif layout == "expanded" and batch:
        t = torch.randn(*([1] * len(batch)), rows, cols, dtype=torch.float64, device=device).expand(*shape)
    else:
        layout = "contiguous"
        t = torch.randn(*shape, dtype=torch.float64, device=device)
    if semiring == "max_times":
        t = t.abs()
    return t.to(dtype), layout


class FuzzTest(unittest.TestCase):
    """Random calls of jitbmm.torch against torch in float64: shapes with zeros, broadcast batch dimensions,
    transposed, strided and expanded views, every semiring and dtype, with and without gradients. Every failure is
    counted and listed; valid input must give none."""

    CASES = 400
    SIZES = (0, 1, 2, 3, 5, 8)  # few sizes, so that few kernels are compiled

    def test_fuzz_against_torch(self):
        import random
        import jitbmm
        import jitbmm.torch as jt
        jitbmm.set_tune_policy("never")  # the default variant of each shape: compiles, no tuning
        try:
            failures = self.run_cases(jt, random.Random(20261201))
        finally:
            jitbmm.set_tune_policy("never")  # the policy the other tests of this program run under
        self.assertEqual(failures, [], f"{len(failures)} of {self.CASES} cases failed:\n" + "\n".join(failures[:20]))

    def run_cases(self, jt, rng):
        device = torch.device("cuda")
        dtypes = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}
        failures = []
        counts = {"an empty size": 0, "gradients": 0, "a broadcast batch": 0}
        for case in range(self.CASES):
            semiring = rng.choice(SEMIRINGS)
            dtype_name = rng.choice(("f32", "f32", "f64", "f64", "f16", "bf16"))
            dtype = dtypes[dtype_name]
            M, K, N = (rng.choice(self.SIZES) for _ in range(3))
            batch = tuple(rng.choice(self.SIZES[:4]) for _ in range(rng.randint(0, 2)))
            a_batch = tuple(n if rng.random() < 0.7 else 1 for n in batch)[rng.randint(0, len(batch)):]
            b_batch = tuple(n if rng.random() < 0.7 else 1 for n in batch)[rng.randint(0, len(batch)):]
            grad = rng.random() < 0.5
            a, a_layout = random_operand((*a_batch, M, K), rng, semiring, dtype, device)
            b, b_layout = random_operand((*b_batch, K, N), rng, semiring, dtype, device)
            what = (f"case {case}: {semiring} {dtype_name} a{tuple(a.shape)} {a_layout} b{tuple(b.shape)} {b_layout} "
                    f"grad={grad}")
            counts["an empty size"] += 0 in (*batch, M, K, N)
            counts["gradients"] += grad
            counts["a broadcast batch"] += a_batch != b_batch
            try:
                self.one_case(jt, a, b, semiring, dtype_name, grad)
            except Exception as e:  # noqa: BLE001 (every failure is a finding, listed with its case)
                failures.append(f"{what}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        print(f"\nfuzz: {self.CASES} cases, " + ", ".join(f"{n} with {what}" for what, n in counts.items()) +
              f"; {len(failures)} failed", file=sys.stderr)
        return failures

    def one_case(self, jt, a, b, semiring, dtype_name, grad):
        if grad:
            a, b = a.detach().requires_grad_(True), b.detach().requires_grad_(True)
        out = jt.semiring_bmm(a, b, semiring)
        a64 = a.detach().double().requires_grad_(True)
        b64 = b.detach().double().requires_grad_(True)
        want = reference(a64, b64, semiring)
        if out.dtype != a.dtype or tuple(out.shape) != tuple(want.shape):
            raise AssertionError(f"out is {out.dtype} {tuple(out.shape)}, expected {a.dtype} {tuple(want.shape)}")
        rtol, atol = TOL[dtype_name]
        # Half inputs: the reference sees the rounded inputs, the kernel accumulates in float32.
        torch.testing.assert_close(out.double(), want, rtol=rtol, atol=atol, equal_nan=True)
        if not grad:
            return
        g = torch.randn_like(want)
        got_a, got_b = torch.autograd.grad(out, (a, b), g.to(out.dtype))
        want_a, want_b = torch.autograd.grad(want, (a64, b64), g.to(out.dtype).double(), allow_unused=True)
        for name, got, want_grad, t in (("grad_a", got_a, want_a, a), ("grad_b", got_b, want_b, b)):
            if tuple(got.shape) != tuple(t.shape) or got.dtype != t.dtype:
                raise AssertionError(f"{name} is {got.dtype} {tuple(got.shape)}, expected {t.dtype} {tuple(t.shape)}")
            if want_grad is None:
                want_grad = torch.zeros_like(a64 if name == "grad_a" else b64)
            if dtype_name in ("f16", "bf16"):
                if semiring in ("log", "plus_times"):
                    half_gradient_close(got, want_grad, a64, b64, g.to(out.dtype).double(), semiring, name,
                                        t.dtype, out.detach().double())
                elif semiring in ("max_plus", "min_plus"):  # ties in half precision go their own way in torch:
                    # the total a gradient carries is the same (max_times's carries the partner, which a tie moves)
                    torch.testing.assert_close(got.double().sum(), want_grad.sum(), rtol=5e-2, atol=1e-1)
                continue
            torch.testing.assert_close(got.double(), want_grad, rtol=rtol * 5, atol=atol * 5)


def _share_choices_rank(rank, world, init_file, caches, results):
    """One rank of test_share_choices_makes_rank_0s_variants_everyones, in its own process with its own cache
    directory (standing in for its own machine): rank 0 tunes, rank 1 may not (policy never: the default)."""
    import os
    os.environ["JITBMM_CACHE_DIR"] = caches[rank]
    import torch.distributed as dist
    import jitbmm
    import jitbmm.torch as jt
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    try:
        jitbmm.set_tune_policy("exact" if rank == 0 else "never")
        torch.manual_seed(0)
        a = torch.randn(2, 33, 17, device="cuda")
        b = torch.randn(2, 17, 40, device="cuda")
        jt.logbmm(a, b)
        torch.cuda.synchronize()
        imported = jt.share_choices()
        jt.logbmm(a, b)  # rank 1 plans again, with rank 0's variant
        torch.cuda.synchronize()
        results[rank] = (imported, jitbmm.export_choices())
    finally:
        dist.destroy_process_group()


class DistributedTest(unittest.TestCase):
    """jitbmm.torch.share_choices over torch.distributed (gloo), two processes on one GPU."""

    def test_share_choices_makes_rank_0s_variants_everyones(self):
        import tempfile
        import torch.multiprocessing as mp
        with tempfile.TemporaryDirectory() as tmp:
            caches = [f"{tmp}/cache0", f"{tmp}/cache1"]
            results = mp.Manager().dict()
            mp.spawn(_share_choices_rank, args=(2, f"{tmp}/init", caches, results), nprocs=2, join=True)
            imported0, choices0 = results[0]
            imported1, choices1 = results[1]
        self.assertEqual(imported0, 0)
        self.assertEqual(imported1, 1)  # the one forward choice rank 0 tuned
        self.assertIn("choice forward log f32 f32 2 33 17 40", choices0)
        self.assertEqual(choices1, choices0)  # rank 1 now runs exactly rank 0's variant

    def test_share_choices_needs_an_initialised_job(self):
        import jitbmm.torch as jt
        with self.assertRaisesRegex(RuntimeError, "not initialised"):
            jt.share_choices()


def main():
    return gpu_main()


if __name__ == "__main__":
    sys.exit(main())
