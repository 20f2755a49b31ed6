"""torch-struct's structures through its structured semirings' products: entropy forward + backward (a training
loss's step) through EntropySemiring, and kmax(4) through KMaxSemiring(4), torch-struct 0.5 native against the same
call with jitbmm.torch_struct.patch() (each product one jitbmm kernel: jitbmm.torch.entropy_semiring_bmm,
kmax_semiring_bmm), for SemiMarkovCRF and, without chains=True, LinearChainCRF. Medians of CUDA-synchronised wall
times, float32 potentials ~ N(0, 1).

    python3 bench/structured_semirings.py [--reps 10]"""

import argparse
import gc
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import jitbmm.torch_struct as jts  # noqa: E402
from chain_timing import wall_ms  # noqa: E402


def main():
    warnings.filterwarnings("ignore", message=".*arg_constraints.*")
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    import torch_struct

    g = torch.Generator(device="cuda").manual_seed(0)
    cases = [
        ("SemiMarkovCRF", "16×128×8×16", torch.randn(16, 127, 8, 16, 16, device="cuda", generator=g)),
        ("LinearChainCRF", "32×128×32", torch.randn(32, 127, 32, 32, device="cuda", generator=g)),
    ]
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; ms, medians of {args.reps}")
    print(f"{'structure':>15} {'B×N×(K×)C':>14} {'quantity':>18} {'native':>9} {'patched':>9} {'speed-up':>9}")
    for name, shape, pot in cases:
        cls = getattr(torch_struct, name)

        def entropy_step():
            p = pot.detach().requires_grad_(True)
            cls(p).entropy.sum().backward()

        for quantity, fn in (("entropy fwd+bwd", entropy_step), ("kmax(4)", lambda: cls(pot).kmax(4))):
            native = fits(fn, args.reps)
            with jts.patched():
                patched = fits(fn, args.reps)
            ratio = f"{native / patched:8.1f}×" if native and patched else "        —"
            print(f"{name:>15} {shape:>14} {quantity:>18} {show(native)} {show(patched)} {ratio}")


def fits(fn, reps):
    """The median ms of fn(), or None where the GPU's memory runs out (torch-struct's kmax expands k-vectors)."""
    try:
        return wall_ms(fn, reps)
    except torch.OutOfMemoryError:
        return None
    finally:
        gc.collect()
        torch.cuda.empty_cache()


def show(ms):
    return f"{ms:9.3f}" if ms is not None else f"{'OOM':>9}"


if __name__ == "__main__":
    main()
