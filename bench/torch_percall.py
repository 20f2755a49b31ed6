"""Per-call cost of jitbmm.torch against torch.bmm and expand+logsumexp in the same loop.

    python3 bench/torch_percall.py [--module path/to/torch.py]

Forward: 1000 calls, one synchronisation, wall time per call; forward + backward likewise (200 calls); each
loop five times, the implementations taking turns, and the median of the five reported. Large
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
from chain_timing import wall_ms  # noqa: E402


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

    class NoTable(dict):  # the per-call table switched off: every call takes the general path
        def __setitem__(self, key, value):
            pass

    def general(x, y):
        table, jt._fast = jt._fast, NoTable()
        try:
            return jt.logbmm(x, y)
        finally:
            jt._fast = table

    def operator(x, y):  # the registered operator through the dispatcher, as compiled code calls it
        return torch.ops.jitbmm.semiring_bmm(x, y, "log", "exact", False)[0]

    class PythonBmm(torch.autograd.Function):  # what any backward written in Python costs, around torch.bmm
        @staticmethod
        def forward(ctx, x, y):
            ctx.save_for_backward(x, y)
            return torch.bmm(x, y)

        @staticmethod
        def backward(ctx, g):
            x, y = ctx.saved_tensors
            return torch.bmm(g, y.transpose(1, 2)), torch.bmm(x.transpose(1, 2), g)

    peers = (("torch.bmm", torch.bmm), ("expand+logsumexp", naive),
             ("torch.bmm in a Python Function", PythonBmm.apply))
    ours = [(args.label, jt.logbmm)]
    if hasattr(jt, "_fast"):
        ours.append((args.label + " general path", general))
    forwards = ours + list(peers)
    if hasattr(torch.ops.jitbmm, "semiring_bmm"):
        forwards.append(("registered operator", operator))

    def medians(runs, calls, grad):
        times = {name: [] for name, _ in runs}
        for _ in range(5):
            for name, f in runs:
                with torch.set_grad_enabled(grad):
                    times[name].append(per_call_us(fb(f) if grad else (lambda f=f: f(a, b)), calls))
        return {name: statistics.median(t) for name, t in times.items()}

    fwd = medians(forwards, 1000, False)
    both = medians(ours + list(peers), 200, True)
    print("8x64^3 f32 per call (us)           forward   fwd+bwd")
    for name in fwd:
        print(f"  {name:32s} {fwd[name]:8.1f} {both.get(name, float('nan')):9.1f}")
    fr, br = fwd[args.label] / fwd["torch.bmm"], both[args.label] / both["torch.bmm"]
    print(f"  ratio to torch.bmm               {fr:8.2f} {br:9.2f}   (targets 1.5 / 1.3: "
          f"{'met' if fr <= 1.5 else 'missed'} / {'met' if br <= 1.3 else 'missed'})")
    for shape in ((64, 512, 512, 512), (4, 2048, 2048, 2048)):
        B, M, K, N = shape
        x = torch.randn(B, M, K, device=dev)
        y = torch.randn(B, K, N, device=dev)
        with torch.no_grad():
            ms = wall_ms(lambda: jt.logbmm(x, y), 20, warmups=1)
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
              f"{stream_ms:.3f} ms/call; ratio {ms / stream_ms:.2f} (target 1.05: "
              f"{'met' if ms / stream_ms <= 1.05 else 'missed'})")


if __name__ == "__main__":
    main()
