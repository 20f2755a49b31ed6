"""What a chain's first call costs a user: each problem in a new process with empty caches (bench/fresh_process.py),
through jitbmm.torch, of one problem per strategy and form the plan takes by its rule. The first call (the plan: its
modules compiled, its products planned), which a stand-in serves while the chosen strategy is built
(docs/caching-and-tuning.md, "First calls"); a second call while the stand-in still runs them (its quick builds'
speed; "-" where the plan settled first); when, from the first call's start, the plan settled on the strategy it
chose (jitbmm.chain_strategy); a call after that; and in another new process with the stand-in off
(JITBMM_STAND_IN=off), the first call that waits for the chosen strategy. --compiles lists each NVRTC compile of the
stand-in's process and its time.

    python bench/chain_first_call.py [--compiles] [--json out.json]
"""

import argparse
import json
import subprocess
import sys
import tempfile

from fresh_process import compiles, fresh_env

# What the library's log (JITBMM_LOG=debug) says when a stand-in runs a plan's calls while its chosen strategy builds.
STAND_IN = "stands in while its chosen strategy is built"

# (what, form, semiring, B, T, C, with the backward)
PROBLEMS = [
    ("CRF log-partition", "crf", "log", 32, 512, 64, True),
    ("CRF log-partition, many states", "crf", "log", 4, 64, 1024, True),
    ("HMM log-likelihood, many states", "hmm", "log", 4, 64, 512, True),
    ("CRF log-partition, one long sequence", "crf", "log", 1, 4096, 64, True),
    ("HMM log-likelihood, wide batch (fused)", "hmm", "log", 512, 32, 512, True),
    ("HMM log-likelihood, wide batch (products)", "hmm", "log", 512, 32, 1024, True),
    ("HMM Viterbi, wide batch (fused)", "hmm", "max_plus", 512, 32, 512, False),
    ("HMM Viterbi, one long sequence", "hmm", "max_plus", 1, 16384, 64, False),
]

CHILD = r"""
import sys, time, torch
form, semiring = sys.argv[1], sys.argv[2]
B, T, C, backward = map(int, sys.argv[3:7])
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
import jitbmm, jitbmm.torch as jt
if form == "crf":
    x = torch.randn(B, T - 1, C, C, device="cuda", requires_grad=bool(backward))
    call = (lambda: jt.chain_log_partition(x)) if semiring == "log" else (lambda: jt.chain_viterbi(x)[0])
else:
    e = torch.randn(B, T, C, device="cuda", requires_grad=bool(backward))
    tr = torch.randn(C, C, device="cuda", requires_grad=bool(backward))
    ini = torch.randn(C, device="cuda", requires_grad=bool(backward))
    call = (lambda: jt.hmm_log_partition(e, tr, ini)) if semiring == "log" else (lambda: jt.hmm_viterbi(e, tr, ini)[0])
def once():
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = call()
    if backward:
        out.sum().backward()
    torch.cuda.synchronize()
    return time.perf_counter() - t
start = time.perf_counter()
first = once()
from jitbmm import _torch_chains
plan = next(iter(_torch_chains._plans.values()))
plan._describe()
again = float("nan") if plan.settled else once()
while not plan.settled:
    time.sleep(0.005)
    plan._describe()
settled = time.perf_counter() - start
second = once()
print(jitbmm.chain_strategy(semiring, "f32", B, T, C, form=form), f"{first:.4f} {again:.6f} {settled:.4f} {second:.6f}")
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compiles", action="store_true", help="list each problem's NVRTC compiles")
    parser.add_argument("--json", help="write the rows here too")
    args = parser.parse_args()
    rows = []
    print(f"{'problem':42} {'B×T×C':>12} {'strategy':>10} {'first call':>10} {'first s':>8} {'again ms':>8} "
          f"{'settled s':>9} {'then ms':>8} {'waiting s':>9}")
    for what, form, semiring, B, T, C, backward in PROBLEMS:
        runs = {}
        for stand_in in ("on", "off"):
            with tempfile.TemporaryDirectory() as cache:
                runs[stand_in] = subprocess.run(
                    [sys.executable, "-c", CHILD, form, semiring, str(B), str(T), str(C), str(int(backward))],
                    env=fresh_env(cache, JITBMM_STAND_IN=stand_in), capture_output=True, text=True)
        failed = [k for k, r in runs.items() if r.returncode != 0]
        if failed:
            print(f"{what}: failed\n{runs[failed[0]].stderr[-2000:]}")
            continue
        strategy, first, again, settled, second = runs["on"].stdout.split()[-5:]
        ran_first = "stand-in" if STAND_IN in runs["on"].stderr else "chosen"
        waiting = runs["off"].stdout.split()[-4]
        label = what + (" fwd+bwd" if backward else "")
        again_ms = "-" if again == "nan" else f"{float(again) * 1e3:.3f}"
        print(f"{label:42} {f'{B}×{T}×{C}':>12} {strategy:>10} {ran_first:>10} {float(first):8.3f} {again_ms:>8} "
              f"{float(settled):9.3f} {float(second) * 1e3:8.3f} {float(waiting):9.3f}")
        compiled = compiles(runs["on"].stderr)
        if args.compiles:
            for name, ms in compiled:
                print(f"    {ms:7d} ms  {name}")
        rows.append({"problem": label, "B": B, "T": T, "C": C, "strategy": strategy, "first_call_ran": ran_first,
                     "first_s": float(first), "stand_in_again_ms": float(again) * 1e3, "settled_s": float(settled),
                     "then_ms": float(second) * 1e3,
                     "waiting_first_s": float(waiting), "compiles_ms": compiled})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
