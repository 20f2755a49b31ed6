"""What a chain's first call costs a user: each problem in a new process with empty caches (bench/fresh_process.py),
through jitbmm.torch, the first call (the plan: its modules compiled, its products planned) and the second, of one
problem per strategy and form the plan takes by its rule. The strategy is the plan's own (jitbmm.chain_strategy);
--compiles lists each NVRTC compile of the process and its time.

    python bench/chain_first_call.py [--compiles] [--json out.json]
"""

import argparse
import json
import subprocess
import sys
import tempfile

from fresh_process import compiles, fresh_env

# (what, form, semiring, B, T, C, with the backward)
PROBLEMS = [
    ("CRF log-partition", "crf", "log", 32, 512, 64, True),
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
first, second = once(), once()
print(jitbmm.chain_strategy(semiring, "f32", B, T, C, form=form), f"{first:.4f} {second:.4f}")
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compiles", action="store_true", help="list each problem's NVRTC compiles")
    parser.add_argument("--json", help="write the rows here too")
    args = parser.parse_args()
    rows = []
    print(f"{'problem':42} {'B×T×C':>12} {'strategy':>10} {'first s':>8} {'second ms':>10}")
    for what, form, semiring, B, T, C, backward in PROBLEMS:
        with tempfile.TemporaryDirectory() as cache:
            r = subprocess.run([sys.executable, "-c", CHILD, form, semiring, str(B), str(T), str(C), str(int(backward))],
                               env=fresh_env(cache), capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{what}: failed\n{r.stderr[-2000:]}")
            continue
        strategy, first, second = r.stdout.split()[-3:]
        label = what + (" fwd+bwd" if backward else "")
        print(f"{label:42} {f'{B}×{T}×{C}':>12} {strategy:>10} {float(first):8.3f} {float(second) * 1e3:10.3f}")
        compiled = compiles(r.stderr)
        if args.compiles:
            for name, ms in compiled:
                print(f"    {ms:7d} ms  {name}")
        rows.append({"problem": label, "B": B, "T": T, "C": C, "strategy": strategy, "first_s": float(first),
                     "second_ms": float(second) * 1e3, "compiles_ms": compiled})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
