"""Per-call cost of jitbmm.torch against torch.bmm and expand+logsumexp in the same loop (issue 15's measure).

    python3 bench/torch_percall.py [--module path/to/torch.py]

Forward: 1000 calls, one synchronisation, wall time per call; forward + backward likewise (200 calls). Large
shapes: one synchronised call at a time, median of 20, next to the kernels' own CUDA-event time. --module loads
another jitbmm.torch implementation (e.g. an older one) in place of the package's, to compare in one run."""

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
import jitbmm  # noqa: E402


def load(module_path):
    if not module_path:
        import jitbmm.torch as jt
        return jt
    spec = importlib.util.spec_from_file_location("jitbmm._bench_torch", module_path,
                                                  submodule_search_locations=None)
    mod = importlib.util.module_from_spec(spec)
    mod.__package__ = "jitbmm"
    spec.loader.exec_module(mod)
    return mod


def per_call_us(fn, calls):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def synced_ms(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--module", default="")
    ap.add_argument("--label", default="jitbmm.torch")
    args = ap.parse_args()
    jt = load(args.module)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    a = torch.randn(8, 64, 64, device=dev, requires_grad=True)
    b = torch.randn(8, 64, 64, device=dev, requires_grad=True)

    def naive(x, y):
        return torch.logsumexp(x.unsqueeze(-1) + y.unsqueeze(-3), dim=-2)

    def fb(f):
        def run():
            f(a, b).sum().backward()
        return run

    with torch.no_grad():
        fwd = {name: per_call_us(lambda f=f: f(a, b), 1000)
               for name, f in ((args.label, jt.logbmm), ("torch.bmm", torch.bmm), ("expand+logsumexp", naive))}
    both = {name: per_call_us(fb(f), 200)
            for name, f in ((args.label, jt.logbmm), ("torch.bmm", torch.bmm), ("expand+logsumexp", naive))}
    print(f"8x64^3 f32 per call (us)   forward   fwd+bwd")
    for name in fwd:
        print(f"  {name:24s} {fwd[name]:8.1f} {both[name]:9.1f}")
    print(f"  ratio to torch.bmm       {fwd[args.label] / fwd['torch.bmm']:8.2f} "
          f"{both[args.label] / both['torch.bmm']:9.2f}")
    for shape in ((64, 512, 512, 512), (4, 2048, 2048, 2048)):
        B, M, K, N = shape
        x = torch.randn(B, M, K, device=dev)
        y = torch.randn(B, K, N, device=dev)
        with torch.no_grad():
            ms = synced_ms(lambda: jt.logbmm(x, y))
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            jt.logbmm(x, y)
            torch.cuda.synchronize()
            start.record()
            for _ in range(10):
                jt.logbmm(x, y)
            end.record()
            end.synchronize()
            stream_ms = start.elapsed_time(end) / 10
        print(f"{B}x{M}x{K}x{N} log f32: synchronised call {ms:.3f} ms; back-to-back on the stream "
              f"{stream_ms:.3f} ms/call; ratio {ms / stream_ms:.2f}")


if __name__ == "__main__":
    main()
