"""Tuning never turns a valid call into an error, on the GPU machine: with PyTorch holding all of the device's memory
but 1 GiB (a caching allocator that has grown), the first forward and backward of new problems through jitbmm.torch
succeed and match a float64 reference (the output and both gradients), with an empty cache and the default policy (bucket). A problem whose trial
would not fit what is free runs its default variants; one whose trial fits tunes as usual.

Run as a program (the python_memory_pressure CTest entry): exits 77 ("skipped") where torch or a CUDA GPU is
missing. Each case runs in a fresh process of its own, so nothing planned before it helps it."""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

import package_under_test  # noqa: E402

package_under_test.import_path()

try:
    import torch
except ImportError:
    torch = None

_GIB = 1 << 30

# (B, M, K, N): a small problem (not tuned on first use), one whose trials fit in the room left (tuned), and one
# whose output and argmax take half of it (its trials cannot fit: the default variants).
_CASES = [(3, 6, 6, 6), (4, 256, 16, 256), (4, 4096, 8, 4096)]


def _child(shape, semiring):
    """In the child: hold all of the device's memory but 1 GiB beyond the problem's own tensors, then the first
    forward and backward; prints one JSON line."""
    import jitbmm.torch as jt
    B, M, K, N = shape
    dev = torch.device("cuda")
    torch.manual_seed(0)
    a = torch.randn(B, M, K, device=dev, requires_grad=True)
    b = torch.randn(B, K, N, device=dev, requires_grad=True)
    g = torch.randn(B, M, N, device=dev)
    free, _ = torch.cuda.mem_get_info()
    filler = torch.empty(max(0, free - _GIB), dtype=torch.uint8, device=dev)
    free_before = torch.cuda.mem_get_info()[0]
    t0 = time.perf_counter()
    out = jt.semiring_bmm(a, b, semiring)
    out.backward(g)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    del filler  # the reference after the filler is gone
    error, grad_error = _errors(a.detach(), b.detach(), g, out.detach(), a.grad, b.grad, semiring)
    finite = bool(torch.isfinite(a.grad).all() and torch.isfinite(b.grad).all())
    print(json.dumps({"free_mib": free_before >> 20, "seconds": seconds, "error": error, "grad_error": grad_error,
                      "finite_grads": finite}))


def _errors(a, b, g, out, grad_a, grad_b, semiring, few=3):
    """The largest error of out on a few rows, and of the gradients relative to their size, against float64 autograd
    of the expanded terms: grad_a on those rows (which only they reach) and grad_b on a few columns (which only
    theirs reach), so that the reference stays small at every shape."""
    def product(x, y):
        terms = x.unsqueeze(-1) + y.unsqueeze(-3)
        return torch.logsumexp(terms, -2) if semiring == "log" else terms.max(-2).values

    def relative(got, want):
        return ((got.double() - want).abs().max() / want.abs().max().clamp_min(1.0)).item()

    rows, cols = slice(0, min(a.shape[-2], few)), slice(0, min(b.shape[-1], few))
    a_rows, b64 = a[:, rows].double().requires_grad_(True), b.double()
    ref = product(a_rows, b64)
    error = (out[:, rows].double() - ref).abs().max().item()
    (ref_grad_a,) = torch.autograd.grad((ref * g[:, rows].double()).sum(), a_rows)
    b_cols = b[:, :, cols].double().requires_grad_(True)
    (ref_grad_b,) = torch.autograd.grad((product(a.double(), b_cols) * g[:, :, cols].double()).sum(), b_cols)
    return error, max(relative(grad_a[:, rows], ref_grad_a), relative(grad_b[:, :, cols], ref_grad_b))


class MemoryPressureTest(unittest.TestCase):
    def run_case(self, shape, semiring):
        env = dict(os.environ)
        with tempfile.TemporaryDirectory() as cache:
            env.update(JITBMM_CACHE_DIR=cache, JITBMM_TUNE="bucket")
            r = subprocess.run([sys.executable, __file__, "--child", semiring, *map(str, shape)], env=env,
                               capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr[-4000:])
        result = json.loads(r.stdout.strip().splitlines()[-1])
        print(f"  {semiring} {'x'.join(map(str, shape))}: {result['free_mib']} MiB free, first forward + backward "
              f"{result['seconds']:.2f} s, max error {result['error']:.2e}, of the gradients {result['grad_error']:.2e}",
              file=sys.stderr)
        for line in r.stderr.splitlines():
            if "not tuning" in line or "tuning" in line and "failed" in line:
                print("   ", line, file=sys.stderr)
        self.assertLess(result["error"], 1e-4)
        self.assertLess(result["grad_error"], 1e-4)
        self.assertTrue(result["finite_grads"])

    def test_first_calls_succeed_with_one_gib_free(self):
        for shape in _CASES:
            for semiring in ("log", "max_plus"):
                with self.subTest(shape=shape, semiring=semiring):
                    self.run_case(shape, semiring)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(tuple(int(x) for x in sys.argv[3:7]), sys.argv[2])
        sys.exit(0)
    if torch is None or not torch.cuda.is_available():
        print("skipped: needs torch and a CUDA GPU", file=sys.stderr)
        sys.exit(77)
    result = unittest.main(exit=False, verbosity=2).result
    sys.exit(0 if result.wasSuccessful() and not result.skipped else 1)
