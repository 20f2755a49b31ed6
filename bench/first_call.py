"""What a user's first calls cost: a new process with empty caches (bench/fresh_process.py), on a GPU whose
decisions jitbmm ships.

1. First calls (each in a new process, empty caches): C++ `JitLogBMM::get` to the first result (`jitbmm bench
   --first-call`), and through jitbmm.torch a first training step (the forward that keeps what the backward reads,
   then the backward; by a stand-in of quick builds where the chosen kernels compile for seconds) and after it a
   forward without grad, and when the plans settled on their chosen kernels, at 64x512^3 log f32, log bf16,
   max_plus f32 (with argmax), and a shape between the grid's points (64x384^3, which takes its bucket's decision).
   The NVRTC compiles and the plans' choices are listed. --without-shipped repeats them with the shipped decisions off (what a GPU
   jitbmm has not tuned gets).
2. The tiny double backward: forward, create_graph backward and backward of the gradients of log f32 3x6x6x6 in a
   new process, through jitbmm.torch and through PyTorch's own (a[..., None] + b[:, None]).logsumexp(-2).
3. --shapes: the small problems' defaults and light variants against the full search (`jitbmm tune`).

    python bench/first_call.py --cli build/jitbmm [--without-shipped] [--json out.json]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

from fresh_process import compiles as compiled, fresh_env

SHAPES = ["3x6x6x6", "8x32x32x32", "8x64x64x64", "16x64x64x64", "2x128x128x64"]
SEMIRINGS = ["log", "max_plus"]
PASSES = ["forward", "grad_a", "grad_b"]

CHILD = r"""
import sys, time, torch
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
t0 = time.perf_counter()
import jitbmm.torch as jt
t1 = time.perf_counter()
B, M, K, N = map(int, sys.argv[2].split("x"))
a = torch.randn(B, M, K, device="cuda", requires_grad=True)
b = torch.randn(B, K, N, device="cuda", requires_grad=True)
torch.cuda.synchronize()
t2 = time.perf_counter()
jt.semiring_bmm(a, b, sys.argv[1]).sum().backward()
torch.cuda.synchronize()
t3 = time.perf_counter()
jt.semiring_bmm(a, b, sys.argv[1]).sum().backward()
torch.cuda.synchronize()
t4 = time.perf_counter()
print(f"{t1 - t0:.4f} {t3 - t2:.4f} {t4 - t3:.4f}")
"""


def run(cmd, env):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
    return r.stdout


def _light(spec):
    """Whether a small problem's first plan times this variant (runtime/tuner/search_space.hpp,
    small_problem_candidates): a direct kernel, or the plain tiled kernel with a tile of at most 32x32 outputs."""
    tile = re.search(r"tile=([0-9]+)x([0-9]+)x", spec)
    return tile is None or ("strategy=tiled " in spec and int(tile.group(1)) * int(tile.group(2)) <= 32 * 32)


def default_spec(cli, semiring, shape, pass_, env):
    text = run([cli, "inspect", "--semiring", semiring, "--shape", shape, "--pass", pass_, "--emit", "cuda"]
               if pass_ != "forward" else
               [cli, "inspect", "--semiring", semiring, "--shape", shape, "--emit", "cuda"], env)
    return re.search(r"// spec: (.*)", text).group(1).strip()


def defaults_against_search(cli, cache):
    env = dict(os.environ, JITBMM_CACHE_DIR=cache)
    rows = []
    for shape in SHAPES:
        for semiring in SEMIRINGS:
            for pass_ in PASSES:
                out = run([cli, "tune", "--semiring", semiring, "--shape", shape, "--pass", pass_], env)
                times = {}
                for line in out.splitlines():
                    m = re.match(r"\s*(-?[0-9.]+)\s+(semiring=\S.*?)(\s+\[.*\])?$", line)
                    if m and float(m.group(1)) > 0:
                        times[m.group(2).strip()] = float(m.group(1))
                best_spec, best = min(times.items(), key=lambda kv: kv[1])
                light = min(ms for spec, ms in times.items() if _light(spec))
                spec = default_spec(cli, semiring, shape, pass_, env)
                d = times.get(spec)
                rows.append({"shape": shape, "semiring": semiring, "pass": pass_, "default_ms": d, "best_ms": best,
                             "ratio": d / best if d else None, "light_ms": light, "light_ratio": light / best,
                             "default": spec, "best": best_spec})
                print(f"{semiring:8s} {shape:14s} {pass_:7s} default {d if d else float('nan'):.4f} ms  "
                      f"light set {light:.4f}  best {best:.4f} ms  ratio {d / best if d else float('nan'):.2f} / "
                      f"{light / best:.2f}  best: {best_spec.split('strategy=')[1]}", flush=True)
    return rows


def first_call(semiring, shape, cache):
    r = subprocess.run([sys.executable, "-c", CHILD, semiring, shape], env=fresh_env(cache), capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError(f"first call of {semiring} {shape} failed:\n{r.stderr[-3000:]}")
    out = r.stdout.split()
    compiles = [ms for _, ms in compiled(r.stderr)]
    plans = re.findall(r"plan (.*)", r.stderr)
    return {"import_s": float(out[0]), "first_s": float(out[1]), "second_s": float(out[2]),
            "compiles": len(compiles), "compile_ms": compiles, "plans": plans}


def summarize(rows):
    worst = max(r["ratio"] for r in rows if r["ratio"])
    light = sorted(r["light_ratio"] for r in rows)
    missing = [r for r in rows if not r["ratio"]]
    print(f"defaults: worst {worst:.2f}x the best ({len(missing)} not among the timed candidates); the light set's "
          f"best: worst {light[-1]:.2f}x, {sum(x <= 1.10 for x in light)} of {len(light)} within 10%")


TORCH_CHILD = r"""
import sys, time
t0 = time.perf_counter()
import torch
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
t1 = time.perf_counter()
import jitbmm.torch as jt
semiring, dtype, shape = sys.argv[1], getattr(torch, sys.argv[2]), sys.argv[3]
B, M, K, N = map(int, shape.split("x"))
a = torch.randn(B, M, K, device="cuda", dtype=dtype, requires_grad=True)
b = torch.randn(B, K, N, device="cuda", dtype=dtype, requires_grad=True)
torch.cuda.synchronize()
t2 = time.perf_counter()
out = jt.semiring_bmm(a, b, semiring)  # a training step's forward: max_plus keeps its argmax
torch.cuda.synchronize()
t3 = time.perf_counter()
stood_in = int(not all(k.plan.settled for k in jt._kernels.values()))  # quick builds ran it
out.float().sum().backward()
torch.cuda.synchronize()
t4 = time.perf_counter()
with torch.no_grad():  # then an evaluation's: max_plus without its argmax is another plan
    jt.semiring_bmm(a, b, semiring)
torch.cuda.synchronize()
t5 = time.perf_counter()
while not all(k.plan.settled for k in jt._kernels.values()):
    time.sleep(0.005)
t6 = time.perf_counter()
print(f"{t1 - t0:.4f} {t2 - t1:.4f} {t3 - t2:.4f} {t4 - t3:.4f} {t5 - t4:.4f} {stood_in} {t6 - t2:.4f}")
"""

# The tiny double backward (genbmm's hypothesis test): forward, create_graph backward, backward of the gradients,
# from `import torch` on, through jitbmm.torch or through PyTorch's own operations.
DOUBLE_CHILD = r"""
import sys, time
t0 = time.perf_counter()
import torch
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
t1 = time.perf_counter()
if sys.argv[1] == "jitbmm":
    import jitbmm.torch as jt
    f = jt.logbmm
else:
    f = lambda a, b: (a[..., None] + b[:, None]).logsumexp(-2)
a = torch.randn(3, 6, 6, device="cuda", requires_grad=True)
b = torch.randn(3, 6, 6, device="cuda", requires_grad=True)
t2 = time.perf_counter()
out = f(a, b)
ga, gb = torch.autograd.grad(out.sum(), (a, b), create_graph=True)
(ga.square().sum() + gb.square().sum()).backward()
torch.cuda.synchronize()
t3 = time.perf_counter()
print(f"{t1 - t0:.4f} {t3 - t2:.4f} {t3 - t0:.4f} {t2 - t1:.4f}")
"""


def child(code, args, cache, shipped=True):
    env = fresh_env(cache, JITBMM_SHIPPED_DECISIONS="on" if shipped else "off")
    r = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{args} failed:\n{r.stderr[-3000:]}")
    compiles = [ms for _, ms in compiled(r.stderr)]
    return [float(x) for x in r.stdout.split()], compiles, re.findall(r"plan (.*)", r.stderr)


def first_calls(cli, shipped):
    """Each case in a new process with an empty cache: C++ (jitbmm bench --first-call) and jitbmm.torch."""
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for n, (semiring, dtype, shape) in enumerate(FIRST_CALLS):
            cache = os.path.join(root, str(n))
            if semiring == "log" and dtype == "float32":
                env = fresh_env(cache + "-cli", JITBMM_SHIPPED_DECISIONS="on" if shipped else "off")
                out = run([cli, "bench", "--first-call", "--semiring", semiring, "--shape", shape], env)
                m = re.search(r"; total ([0-9.]+) ms", out)
                cpp = float(m.group(1)) / 1e3 if m else None
            else:
                cpp = None
            t, compiles, plans = child(TORCH_CHILD, [semiring, dtype, shape], cache, shipped)
            row = {"semiring": semiring, "dtype": dtype, "shape": shape, "shipped": shipped, "cpp_get_s": cpp,
                   "torch_ready_s": t[0], "inputs_s": t[1], "forward_train_s": t[2], "backward_s": t[3],
                   "forward_no_grad_s": t[4], "stand_in": bool(t[5]), "settled_s": t[6], "compiles_ms": compiles,
                   "plans": plans}
            rows.append(row)
            print(f"{semiring:8s} {dtype:9s} {shape:17s} shipped {'on ' if shipped else 'off'}  "
                  f"C++ get+first result {cpp if cpp is not None else float('nan'):6.3f} s  torch: training "
                  f"forward {t[2]:6.3f} s, backward {t[3]:6.3f} s (a first step {t[2] + t[3]:6.3f} s"
                  f"{', by a stand-in' if t[5] else ''}), then a forward without grad {t[4]:6.3f} s; chosen kernels "
                  f"from {t[6]:6.3f} s; {len(compiles)} NVRTC compiles, {sum(compiles) / 1e3:.2f} s",
                  flush=True)
            for line in plans:
                print("   ", line, flush=True)
    return rows


def double_backward():
    rows = {}
    with tempfile.TemporaryDirectory() as cache:
        for who, shipped in (("torch", True), ("jitbmm", True), ("jitbmm", False)):
            name = who if who == "torch" else f"jitbmm, shipped {'on' if shipped else 'off'}"
            t, compiles, plans = child(DOUBLE_CHILD, [who], os.path.join(cache, name), shipped)
            rows[name] = {"torch_ready_s": t[0], "three_calls_s": t[1], "total_s": t[2], "import_and_inputs_s": t[3],
                          "compiles_ms": compiles, "plans": plans}
            print(f"tiny double backward (3x6x6x6) through {name:19s}: {t[1]:.3f} s for the three calls, after "
                  f"{t[3]:.3f} s of imports and inputs ({t[2]:.3f} s from import torch); {len(compiles)} NVRTC "
                  f"compiles, {sum(compiles) / 1e3:.2f} s", flush=True)
            for line in plans:
                print("   ", line, flush=True)
    for name in ("jitbmm, shipped on", "jitbmm, shipped off"):
        d = rows[name]["three_calls_s"] - rows["torch"]["three_calls_s"]
        print(f"tiny double backward: jitbmm.torch ({name[8:]}) costs {d:+.3f} s against PyTorch's own operations",
              flush=True)
    return rows


FIRST_CALLS = [("log", "float32", "64x512x512x512"), ("log", "bfloat16", "64x512x512x512"),
               ("max_plus", "float32", "64x512x512x512"), ("log", "float32", "64x384x384x384")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--json")
    ap.add_argument("--shapes", help="comma-separated BxMxKxN: the defaults against the full search on these shapes")
    ap.add_argument("--without-shipped", action="store_true",
                    help="also time the first calls with the shipped decisions off (JITBMM_SHIPPED_DECISIONS=off)")
    args = ap.parse_args()
    if args.shapes:
        SHAPES[:] = args.shapes.split(",")
        with tempfile.TemporaryDirectory() as cache:
            rows = defaults_against_search(args.cli, cache)
        summarize(rows)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"defaults": rows}, f, indent=1)
        return
    results = {"first_calls": first_calls(args.cli, True)}
    if args.without_shipped:
        results["first_calls_without_shipped"] = first_calls(args.cli, False)
    results["double_backward"] = double_backward()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
