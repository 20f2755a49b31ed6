#!/usr/bin/env python3
"""jitbmm against its peers on one GPU, in one run: time and peak memory of the forward (alone, or a training step's,
which keeps what the backward needs: the selecting semirings' argmax) and of forward + backward.

Peers (see ../shared/PERF.md): torch naive (expand + logsumexp / max), torch.compile of it, and the exp-matmul
trick (log semiring only; not exact). Writes results.md, results.json and PNG plots (time and memory against
problem size, log scale) to --out. Needs torch with a CUDA GPU; matplotlib for the plots (skipped, with a note,
without it). Example:

    python3 bench/compare.py --shapes 8x64x64x64,64x128x128x128,64x256x256x256,64x512x512x512 \\
        --semirings log,max_plus --out bench/compare
"""

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

# Times the variants plans choose, not a stand-in of quick builds that runs while those build
# (docs/caching-and-tuning.md, "First calls").
os.environ.setdefault("JITBMM_STAND_IN", "off")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

import torch  # noqa: E402

import jitbmm  # noqa: E402
import jitbmm.torch as jt  # noqa: E402


def naive(semiring):
    def f(a, b):
        t = a.unsqueeze(-1) + b.unsqueeze(-3)
        if semiring == "log":
            return torch.logsumexp(t, dim=-2)
        return t.max(-2).values if semiring == "max_plus" else t.min(-2).values
    return f


def exp_matmul(a, b):
    ra = a.max(-1, keepdim=True).values
    cb = b.max(-2, keepdim=True).values
    return torch.log(torch.bmm(torch.exp(a - ra), torch.exp(b - cb))) + ra + cb


@contextlib.contextmanager
def tf32_matmuls():
    """cuBLAS allowed TF32 tensor cores (torch.backends.cuda.matmul.allow_tf32), restored after."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def exp_matmul_tf32(a, b):
    """The trick with TF32 allowed, as a practitioner who turns TF32 on gets it: for its backward's products too,
    which measure() runs inside its `context`."""
    with tf32_matmuls():
        return exp_matmul(a, b)


exp_matmul_tf32.context = tf32_matmuls


DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
PEERS = ("jitbmm", "torch naive", "torch.compile", "exp-matmul (inexact)", "exp-matmul TF32 (inexact)")


def peers(semiring, precision, wanted):
    out = {"jitbmm": lambda a, b: jt.semiring_bmm(a, b, semiring, precision=precision), "torch naive": naive(semiring)}
    if "torch.compile" in wanted:  # compiled lazily, on its first call, but made only when asked for
        out["torch.compile"] = torch.compile(naive(semiring), dynamic=False)
    if semiring == "log":
        out["exp-matmul (inexact)"] = exp_matmul
        out["exp-matmul TF32 (inexact)"] = exp_matmul_tf32
    return {name: fn for name, fn in out.items() if name in wanted}


# The passes a row can time: inference (nothing saved for a backward), the forward of a training step (the inputs
# require grad, so what the backward needs is kept: the selecting semirings' argmax), and forward + backward.
PASSES = ("fwd", "fwd-train", "fwd+bwd")


def measure(fn, a, b, pass_, reps):
    """Median ms of `reps` timed calls after warm-up, and the peak memory they allocate beyond the inputs. A peer's
    `context` (TF32 allowed) holds for its whole step, the backward's products included."""
    context = getattr(fn, "context", contextlib.nullcontext)

    def once():
        with context():
            if pass_ == "fwd":
                with torch.no_grad():
                    return fn(a, b)
            out = fn(a, b)
            if pass_ == "fwd+bwd":
                out.backward(torch.ones_like(out))
            return out
    for _ in range(2):
        once()
    torch.cuda.synchronize()
    a.grad = b.grad = None
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        once()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
        a.grad = b.grad = None
    return statistics.median(times), torch.cuda.max_memory_allocated() - base


def parse_shape(text):
    B, M, K, N = (int(x) for x in text.split("x"))
    return B, M, K, N


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="8x64x64x64,64x128x128x128,64x256x256x256,64x512x512x512")
    ap.add_argument("--semirings", default="log,max_plus")
    ap.add_argument("--out", default="bench/compare")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--tune", default="bucket", help="jitbmm tuning policy for the run (never, bucket, exact)")
    ap.add_argument("--precision", default="exact", choices=("exact", "fast"), help="jitbmm's precision")
    ap.add_argument("--dtype", default="f32", choices=tuple(DTYPES), help="the inputs' dtype (every peer gets them)")
    ap.add_argument("--passes", default="fwd,fwd+bwd", help=f"comma-separated, from: {', '.join(PASSES)}")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="inputs are randn times this (50: wide-range data)")
    ap.add_argument("--peers", default=",".join(PEERS[:4]),
                    help=f"comma-separated, from: {', '.join(PEERS)} (jitbmm is one of them)")
    args = ap.parse_args()
    wanted = args.peers.split(",")
    unknown = [p for p in wanted if p not in PEERS]
    if unknown:
        ap.error(f"--peers: unknown {', '.join(unknown)} (expected some of: {', '.join(PEERS)})")
    passes = args.passes.split(",")
    unknown = [p for p in passes if p not in PASSES]
    if unknown:
        ap.error(f"--passes: unknown {', '.join(unknown)} (expected some of: {', '.join(PASSES)})")
    dtype = DTYPES[args.dtype]
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    jitbmm.set_tune_policy(args.tune)
    dev = torch.device("cuda")
    gpu = torch.cuda.get_device_name(dev)
    rows, failed = [], False
    torch._dynamo.config.recompile_limit = 64
    for semiring in args.semirings.split(","):
        for shape_text in args.shapes.split(","):
            torch._dynamo.reset()
            fns = peers(semiring, args.precision, wanted)  # a fresh torch.compile per shape: its own shape
            B, M, K, N = parse_shape(shape_text)
            terms = B * M * K * N
            torch.manual_seed(0)
            a = (torch.randn(B, M, K, device=dev) * args.scale).to(dtype).requires_grad_()
            b = (torch.randn(B, K, N, device=dev) * args.scale).to(dtype).requires_grad_()
            # One check per shape: the first batch of the timed call's output (its plan, of all B batches) against
            # float64; a failure fails the run.
            if M * K * N <= 2**27:
                want = naive(semiring)(a.detach().double()[:1], b.detach().double()[:1])
                with torch.no_grad():
                    got = jt.semiring_bmm(a, b, semiring, precision=args.precision)[:1].double()
                err = ((got - want).abs() / want.abs().clamp(min=1)).max().item()
                allowed = {"f32": 2e-3 if args.precision == "fast" else 1e-5}.get(args.dtype, 1e-2)
                failed = failed or not err <= allowed
                print(f"check {semiring} {shape_text} {args.dtype} {args.precision} randn*{args.scale:g}: max rel. "
                      f"error vs float64 {err:.2e}{'' if err <= allowed else f' > {allowed:g}: FAILED'}", flush=True)
            for name, fn in fns.items():
                for pass_ in passes:
                    row = {"semiring": semiring, "shape": shape_text, "terms": terms, "scale": args.scale,
                           "dtype": args.dtype, "impl": f"jitbmm {args.precision}" if name == "jitbmm" else name,
                           "pass": pass_}
                    t0 = time.time()
                    try:
                        ms, peak = measure(fn, a, b, pass_, args.reps)
                        row.update(ms=ms, peak_bytes=peak, terms_per_s=terms / (ms * 1e-3))
                    except torch.cuda.OutOfMemoryError:
                        row.update(ms=None, peak_bytes=None, note="out of memory")
                    except Exception as e:  # a peer that fails is reported, not fatal
                        row.update(ms=None, peak_bytes=None, note=f"failed: {type(e).__name__}: {str(e)[:120]}")
                    torch.cuda.empty_cache()
                    rows.append(row)
                    shown = f"{row['ms']:.3f} ms, {row['peak_bytes'] / 1e6:.0f} MB" if row["ms"] else row["note"]
                    print(f"{semiring:9s} {shape_text:18s} {name:22s} {row['pass']:9s} {shown}  "
                          f"({time.time() - t0:.0f} s)", flush=True)
            del a, b
            torch.cuda.empty_cache()
    (out_dir / "results.json").write_text(json.dumps({"gpu": gpu, "rows": rows}, indent=1))
    write_markdown(out_dir / "results.md", gpu, rows)
    plot(out_dir, gpu, rows)
    if failed:
        sys.exit("compare.py: a check against float64 failed (above)")


def write_markdown(path, gpu, rows):
    dtypes = ", ".join(dict.fromkeys(r.get("dtype", "f32") for r in rows))
    lines = [f"# jitbmm and its peers on {gpu}", "",
             f"{dtypes} inputs, median of timed runs (CUDA events); peak = torch allocator memory beyond the inputs "
             "(jitbmm's own backward workspace for max_plus, B·max(M·K, K·N)·4 bytes, is not in it). "
             "Generated by bench/compare.py. Inputs: randn × " +
             ", ".join(sorted({f"{r.get('scale', 1.0):g}" for r in rows})) + ".", "",
             "| semiring | shape B×M×K×N | implementation | pass | time ms | terms/s | peak MB |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["ms"] is None:
            lines.append(f"| {r['semiring']} | {r['shape']} | {r['impl']} | {r['pass']} | {r['note']} | | |")
        else:
            lines.append(f"| {r['semiring']} | {r['shape']} | {r['impl']} | {r['pass']} | {r['ms']:.3f} | "
                         f"{r['terms_per_s']:.3g} | {r['peak_bytes'] / 1e6:.0f} |")
    path.write_text("\n".join(lines) + "\n")


def plot(out_dir, gpu, rows):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plots (results.md and results.json are written)")
        return
    for semiring in sorted({r["semiring"] for r in rows}):
        for metric, label in (("ms", "time (ms)"), ("peak_bytes", "peak memory (bytes)")):
            passes = [p for p in PASSES if any(r["pass"] == p for r in rows)]
            fig, axes = plt.subplots(1, len(passes), figsize=(6 * len(passes), 4.5), squeeze=False)
            for ax, pas in zip(axes[0], passes):
                for impl in dict.fromkeys(r["impl"] for r in rows if r["semiring"] == semiring):
                    pts = [(r["terms"], r[metric]) for r in rows if r["semiring"] == semiring and r["impl"] == impl
                           and r["pass"] == pas and r[metric]]
                    if pts:
                        ax.plot(*zip(*pts), marker="o", label=impl)
                ax.set_xscale("log")
                ax.set_yscale("log")
                ax.set_xlabel("terms B·M·K·N")
                ax.set_ylabel(label)
                ax.set_title(f"{semiring} {pas}")
                ax.grid(True, which="both", alpha=0.3)
                ax.legend()
            fig.suptitle(f"{gpu}, {', '.join(dict.fromkeys(r.get('dtype', 'f32') for r in rows))} "
                         "(missing points: out of memory)")
            fig.tight_layout()
            name = f"{semiring}-{'time' if metric == 'ms' else 'memory'}.png"
            fig.savefig(out_dir / name, dpi=110)
            plt.close(fig)
            print(f"wrote {out_dir / name}")


if __name__ == "__main__":
    main()
