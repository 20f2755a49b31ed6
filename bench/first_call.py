"""What a first call of a small problem costs, and what running its default variant gives up.

1. The light set against the full search: for small problems (fewer than 2^22 terms, whose first plan times only the
   default and the light variants), each pass (forward, grad_a, grad_b) tuned over its whole search space by
   `jitbmm tune`, which times every candidate alike; the default's and the best light variant's medians against
   the best one's.
2. First calls through jitbmm.torch, each in a fresh process (torch and its CUDA context ready first, so the figure
   is jitbmm's): forward + backward of a new problem with an empty cache, again with its binaries on disk, and a new
   shape whose family has decisions on disk (tuned in part 1).

    python bench/first_call.py --cli build/jitbmm [--json out.json]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

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


PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")


def first_call(semiring, shape, cache):
    path = os.environ.get("PYTHONPATH")
    env = dict(os.environ, JITBMM_CACHE_DIR=cache, PYTHONPATH=PYTHON_DIR + (os.pathsep + path if path else ""))
    env["JITBMM_LOG"] = "debug"
    r = subprocess.run([sys.executable, "-c", CHILD, semiring, shape], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"first call of {semiring} {shape} failed:\n{r.stderr[-3000:]}")
    out = r.stdout.split()
    compiles = [int(m) for m in re.findall(r"NVRTC compiled \S+ for \S+ in ([0-9]+) ms", r.stderr)]
    plans = re.findall(r"plan (.*)", r.stderr)
    return {"import_s": float(out[0]), "first_s": float(out[1]), "second_s": float(out[2]),
            "compiles": len(compiles), "compile_ms": compiles, "plans": plans}


def summarize(rows):
    worst = max(r["ratio"] for r in rows if r["ratio"])
    light = sorted(r["light_ratio"] for r in rows)
    missing = [r for r in rows if not r["ratio"]]
    print(f"defaults: worst {worst:.2f}x the best ({len(missing)} not among the timed candidates); the light set's "
          f"best: worst {light[-1]:.2f}x, {sum(x <= 1.10 for x in light)} of {len(light)} within 10%")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--json")
    ap.add_argument("--shapes", help="comma-separated BxMxKxN: only part 1, on these shapes")
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
    results = {}
    with tempfile.TemporaryDirectory() as empty, tempfile.TemporaryDirectory() as tuned:
        rows = []
        for semiring, shape in (("log", "3x6x6x6"), ("max_plus", "8x64x64x64"), ("log", "2x128x128x64")):
            cold = first_call(semiring, shape, os.path.join(empty, semiring + shape))
            warm = first_call(semiring, shape, os.path.join(empty, semiring + shape))
            rows.append({"semiring": semiring, "shape": shape, "empty_cache": cold, "binaries_on_disk": warm})
            print(f"first call {semiring} {shape}: empty cache {cold['first_s'] * 1e3:.0f} ms (import "
                  f"{cold['import_s'] * 1e3:.0f} ms; NVRTC {cold['compile_ms']} ms), binaries on disk "
                  f"{warm['first_s'] * 1e3:.0f} ms, second call {warm['second_s'] * 1e3:.2f} ms", flush=True)
            for line in cold["plans"]:
                print("   ", line, flush=True)
        results["first_calls"] = rows
        results["defaults"] = defaults_against_search(args.cli, tuned)
        family = []
        for semiring, shape in (("log", "8x32x32x33"), ("max_plus", "8x64x64x66"), ("log", "16x64x64x60")):
            f = first_call(semiring, shape, tuned)
            family.append({"semiring": semiring, "shape": shape, **f})
            print(f"first call {semiring} {shape}, its family tuned on disk: {f['first_s'] * 1e3:.0f} ms "
                  f"({f['compiles']} compiles)", flush=True)
            for line in f["plans"]:
                print("   ", line, flush=True)
        results["family_on_disk"] = family
    summarize(results["defaults"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
