"""A plan that meets wide-range data, through jitbmm.torch as a user calls it.

    python3 bench/wide_switch.py [--shape 64x512x512x512] [--spread 50] [--calls 6]

The process tunes the shape on randn (its first call), then calls logbmm on randn*spread inputs of the same shape,
synchronising after each call (as a training step that reads its loss does), and prints each call's wall time, the
variant the plan runs after it (from jitbmm's info log) and the largest relative error of a sampled output against
float64. Run it with an empty JITBMM_CACHE_DIR to see the wide-data tuning happen (once per machine and bucket), or
with a filled one to see a stored wide-data decision used at once."""

import argparse
import os
import sys
import time
from pathlib import Path

import torch

# Times the variants plans choose, not a stand-in of quick builds that runs while those build
# (docs/caching-and-tuning.md, "First calls").
os.environ.setdefault("JITBMM_STAND_IN", "off")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
import jitbmm.torch as jt  # noqa: E402


def sampled_error(a, b, out, n=64):
    """The largest relative error of n sampled outputs against float64 (log-sum-exp computed exactly)."""
    g = torch.Generator().manual_seed(0)
    B, M, N = out.shape
    worst = 0.0
    for _ in range(n):
        i, r, c = (int(torch.randint(x, (1,), generator=g)) for x in (B, M, N))
        want = torch.logsumexp(a[i, r, :].double() + b[i, :, c].double(), 0).item()
        got = out[i, r, c].item()
        worst = max(worst, abs(got - want) / max(1.0, abs(want)))
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="64x512x512x512")
    ap.add_argument("--spread", type=float, default=50.0)
    ap.add_argument("--calls", type=int, default=6)
    args = ap.parse_args()
    B, M, K, N = map(int, args.shape.split("x"))
    torch.manual_seed(1)
    a, b = torch.randn(B, M, K, device="cuda"), torch.randn(B, K, N, device="cuda")
    t0 = time.perf_counter()
    jt.logbmm(a, b)
    torch.cuda.synchronize()
    print(f"randn: first call (plans, tunes if the cache lacks it) {time.perf_counter() - t0:.2f} s", flush=True)
    for _ in range(3):
        t0 = time.perf_counter()
        jt.logbmm(a, b)
        torch.cuda.synchronize()
    print(f"randn: a call {1000 * (time.perf_counter() - t0):.3f} ms", flush=True)
    wa, wb = a * args.spread, b * args.spread
    for call in range(1, args.calls + 1):
        t0 = time.perf_counter()
        out = jt.logbmm(wa, wb)
        torch.cuda.synchronize()
        ms = 1000 * (time.perf_counter() - t0)
        print(f"randn*{args.spread:g} call {call}: {ms:.3f} ms, max rel error {sampled_error(wa, wb, out):.2e}",
              flush=True)
    terms = B * M * N * K
    print(f"last call: {terms / (ms / 1000) / 1e12:.2f}e12 terms/s")


if __name__ == "__main__":
    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA device")
        sys.exit(0)
    main()
