"""A torch-struct LinearChainCRF training step (partition + backward) with torch-struct's own semiring products
and with jitbmm's (jitbmm.torch_struct.patch), medians of CUDA-synchronised wall times, float32, default tuning.

    python3 bench/torch_struct_crf.py [--states 16,32,128] [--batch 32,64] [--length 32,128]"""

import argparse
import warnings
import sys
from pathlib import Path

import torch
import torch_struct

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
import jitbmm.torch_struct as jts  # noqa: E402
from chain_timing import wall_ms  # noqa: E402


def step_ms(pot, reps):
    def step():
        p = pot.detach().requires_grad_(True)
        torch_struct.LinearChainCRF(p).partition.sum().backward()

    return wall_ms(step, reps)


def main():
    warnings.filterwarnings("ignore", message=".*arg_constraints.*")
    ap = argparse.ArgumentParser()
    ap.add_argument("--states", default="16,32,128")
    ap.add_argument("--batch", default="32,64")
    ap.add_argument("--length", default="32,128")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    print(f"{'B':>4} {'T':>5} {'C':>5} {'torch-struct ms':>16} {'with jitbmm ms':>15} {'ratio':>7}")
    for c in map(int, args.states.split(",")):
        for b in map(int, args.batch.split(",")):
            for t in map(int, args.length.split(",")):
                pot = torch.randn(b, t - 1, c, c, device="cuda")
                own = ours = None
                try:
                    own = step_ms(pot, args.reps)
                except torch.OutOfMemoryError:  # torch-struct's own product holds B·C³ terms per step
                    torch.cuda.empty_cache()
                with jts.patched():
                    ours = step_ms(pot, args.reps)
                own_text = f"{own:16.3f}" if own else f"{'out of memory':>16}"
                ratio = f"{ours / own:7.2f}" if own else f"{'-':>7}"
                print(f"{b:>4} {t:>5} {c:>5} {own_text} {ours:>15.3f} {ratio}")


if __name__ == "__main__":
    main()
