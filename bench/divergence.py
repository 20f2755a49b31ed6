"""Entropy, cross-entropy and KL of linear-chain CRFs, forward + backward (a training loss's step), in jitbmm
(jitbmm.torch.chain_entropy, chain_cross_entropy, chain_kl) and in torch-struct 0.5 (LinearChainCRF's entropy,
cross_entropy, kl, with its own products), beside jitbmm's fused log-partition forward + backward (the physical
reference the targets are set against); n exact samples (jitbmm.torch.chain_sample, torch-struct's sample((n,)))
beside the log-partition's forward alone; the k best paths (jitbmm.torch.chain_kbest, scores and paths in one call;
torch-struct's kmax(k) and topk(k)) beside the fused Viterbi with its path. The "÷ own" column is the time over that
row's own reference above it. Medians of CUDA-synchronised wall times of one step each, float32,
potentials ~ N(0, 1); torch-struct's peak memory where it runs, "oom" where it does not.

    python3 bench/divergence.py [--shapes 16x64x16,32x128x32,32x512x64,8x1024x128] [--reps 10] [--no-peer]
                                [--hmm [--kernels]] [--losses]

With --hmm: the HMM form's entropy, cross-entropy and KL forward + backward, samples and k best paths from its tables
(jitbmm.torch.hmm_entropy, hmm_cross_entropy, hmm_kl, hmm_sample, hmm_kbest) against the CRF form's on the potentials
formed from them, beside the HMM form's log-likelihood forward + backward, forward alone and Viterbi; --kernels adds
each loss's and the log-likelihood's forward + backward GPU time by kernel (torch.profiler, ms a call), their entries
(the expectations' sweeps, _saving, _transitions, _nodes; the log-likelihood's passes) named as launched."""

import argparse
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import jitbmm.torch as jt  # noqa: E402
from chain_timing import kernel_ms, wall_ms  # noqa: E402


def crf(p):
    """torch-struct's LinearChainCRF of p, imported where the peer runs (never with --no-peer)."""
    import torch_struct

    return torch_struct.LinearChainCRF(p)


def losses(p, q):
    """Each quantity as a function of two leaf tensors, jitbmm's and torch-struct's."""
    return {
        "entropy": (lambda a, b: jt.chain_entropy(a), lambda a, b: crf(a).entropy),
        "cross-entropy": (lambda a, b: jt.chain_cross_entropy(a, b), lambda a, b: crf(a).cross_entropy(crf(b))),
        "KL": (lambda a, b: jt.chain_kl(a, b), lambda a, b: crf(a).kl(crf(b))),
    }


def their_samples(p, n):
    """torch-struct's n samples: it draws them as the gradient of a sampling semiring's partition, so the potentials
    must take a gradient."""
    import torch_struct

    return torch_struct.LinearChainCRF(p.detach().requires_grad_(True)).sample((n,))


def their_kbest(p, k, paths):
    """torch-struct's k best scores (kmax) or paths as edge indicators (topk)."""
    import torch_struct

    d = torch_struct.LinearChainCRF(p)
    return d.topk(k) if paths else d.kmax(k)


def step_of(fn, p, q):
    def step():
        a, b = p.detach().requires_grad_(True), q.detach().requires_grad_(True)
        fn(a, b).sum().backward()

    return step


def main():
    warnings.filterwarnings("ignore", message=".*arg_constraints.*")
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="16x64x16,32x128x32,32x512x64,8x1024x128")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--no-peer", action="store_true", help="leave torch-struct out")
    ap.add_argument("--hmm", action="store_true", help="the HMM form's distributions instead")
    ap.add_argument("--kernels", action="store_true", help="with --hmm: the losses' GPU time by kernel too")
    ap.add_argument("--losses", action="store_true", help="the losses alone, not the samples and k best paths")
    args = ap.parse_args()
    if args.hmm:
        return hmm_section(args)
    if not args.no_peer:
        try:
            import torch_struct  # noqa: F401
        except ImportError:
            print("torch-struct is not installed: its columns are left out, as with --no-peer")
            args.no_peer = True
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; fwd+bwd ms, medians of {args.reps} "
          f"(torch-struct's of {max(3, args.reps // 3)})")
    print(f"{'B×T×C':>12} {'quantity':>14} {'jitbmm':>9} {'÷ own':>8} {'torch-struct':>13} {'speed-up':>9} "
          f"{'peer peak GB':>13}")
    for shape in args.shapes.split(","):
        B, T, C = map(int, shape.split("x"))
        g = torch.Generator(device="cuda").manual_seed(0)
        p, q = (torch.randn(B, T - 1, C, C, device="cuda", generator=g) for _ in range(2))

        def peer(fn):
            """(ms, peak GB) of torch-struct's fn, or ("oom", None)."""
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            try:
                return wall_ms(fn, max(3, args.reps // 3)), torch.cuda.max_memory_allocated() / 1e9
            except torch.OutOfMemoryError:
                return "oom", None
            finally:
                torch.cuda.empty_cache()

        def row(name, own, reference, theirs):
            peer_text, ratio, peak = f"{'-':>13}", f"{'-':>9}", f"{'-':>13}"
            if theirs is not None and not args.no_peer:
                ms, gb = peer(theirs)
                peer_text = f"{ms:13.3f}" if gb is not None else f"{ms:>13}"
                if gb is not None:
                    ratio, peak = f"{ms / own:8.1f}×", f"{gb:13.2f}"
            print(f"{shape:>12} {name:>14} {own:9.3f} {own / reference:7.2f}× {peer_text} {ratio} {peak}")

        partition = wall_ms(step_of(lambda a, b: jt.chain_log_partition(a), p, q), args.reps)
        print(f"{shape:>12} {'log Z':>14} {partition:9.3f}")
        for name, (ours, theirs) in losses(p, q).items():
            row(name, wall_ms(step_of(ours, p, q), args.reps), partition, step_of(theirs, p, q))
        if args.losses:
            continue
        # Samples against the log-partition's forward alone; torch-struct draws ten a pass of its own, so a thousand
        # would take it minutes: its figure for 16 alone.
        with torch.no_grad():
            forward = wall_ms(lambda: jt.chain_log_partition(p), args.reps)
        print(f"{shape:>12} {'log Z forward':>14} {forward:9.3f}")
        for n in (16, 1024):
            theirs = (lambda: their_samples(p, n)) if n == 16 else None
            row(f"sample {n}", wall_ms(lambda: jt.chain_sample(p, n), args.reps), forward, theirs)
        # The k best paths (scores and paths in one call) against the fused Viterbi with its path; torch-struct's
        # kmax (scores) and topk (edge indicators) for k = 4.
        with torch.no_grad():
            viterbi = wall_ms(lambda: jt.chain_viterbi(p), args.reps)
            print(f"{shape:>12} {'Viterbi':>14} {viterbi:9.3f}")
            for k in (4, 16):
                own = wall_ms(lambda: jt.chain_kbest(p, k), args.reps)
                row(f"kmax {k}", own, viterbi, (lambda: their_kbest(p, k, False)) if k == 4 else None)
                if k == 4:
                    row(f"topk {k}", own, viterbi, lambda: their_kbest(p, k, True))

def formed(emissions, transitions, initial):
    """An HMM's potentials [B, T - 1, C, C], as a user forms them for the CRF form: transitions[c, p] +
    emissions[:, t + 1, c], the first step adding initial[p] + emissions[:, 0, p]."""
    pot = transitions + emissions[:, 1:, :, None]
    return torch.cat((pot[:, :1] + (initial + emissions[:, 0])[:, None, None, :], pot[:, 1:]), 1)


def hmm_losses():
    """The HMM form's entropy, cross-entropy and KL as functions of p's and q's tables, and the CRF form's on the
    potentials formed from them."""
    return {
        "entropy": (lambda p, q: jt.hmm_entropy(*p), lambda p, q: jt.chain_entropy(formed(*p))),
        "cross-entropy": (lambda p, q: jt.hmm_cross_entropy(*p, *q),
                          lambda p, q: jt.chain_cross_entropy(formed(*p), formed(*q))),
        "KL": (lambda p, q: jt.hmm_kl(*p, *q), lambda p, q: jt.chain_kl(formed(*p), formed(*q))),
    }


def tables_step(fn, p, q):
    """A training step of fn over p's and q's tables: leaves made afresh, forward and backward."""
    def step():
        a, b = ([t.detach().requires_grad_(True) for t in x] for x in (p, q))
        fn(a, b).sum().backward()

    return step


def hmm_section(args):
    """--hmm: the HMM form's distributions from its tables (emissions [B, T, C], transitions [C, C], initial [C],
    ~ N(0, 1)), against the CRF form's on the potentials formed from them (forming included), each beside the HMM
    form's own reference: its log-likelihood's forward + backward, its forward alone, its Viterbi with the path."""
    print(f"\nthe HMM form's distributions; ms, medians of {args.reps}; the peer: forming the potentials and the CRF "
          f"form's kernels")
    print(f"{'B×T×C':>12} {'quantity':>14} {'HMM form':>9} {'÷ own':>8} {'formed + CRF':>13} {'speed-up':>9} "
          f"{'its peak GB':>12}")
    for shape in args.shapes.split(","):
        B, T, C = map(int, shape.split("x"))
        g = torch.Generator(device="cuda").manual_seed(0)
        tables, other = ([torch.randn(*s, device="cuda", generator=g) for s in ((B, T, C), (C, C), (C,))]
                         for _ in range(2))

        def peer(fn):
            torch.cuda.empty_cache()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            try:
                return wall_ms(fn, args.reps), (torch.cuda.max_memory_allocated() - base) / 1e9
            except torch.OutOfMemoryError:
                return "oom", None
            finally:
                torch.cuda.empty_cache()

        def row(name, own, reference, theirs):
            ms, gb = peer(theirs)
            text = f"{ms:13.3f} {ms / own:8.1f}× {gb:12.2f}" if gb is not None else f"{ms:>13} {'-':>9} {'-':>12}"
            print(f"{shape:>12} {name:>14} {own:9.3f} {own / reference:7.2f}× {text}")

        likelihood = wall_ms(tables_step(lambda p, q: jt.hmm_log_partition(*p), tables, other), args.reps)
        print(f"{shape:>12} {'log Z':>14} {likelihood:9.3f}")
        for name, (ours, theirs) in hmm_losses().items():
            row(name, wall_ms(tables_step(ours, tables, other), args.reps), likelihood,
                tables_step(theirs, tables, other))
        if not args.losses:
            with torch.no_grad():
                forward = wall_ms(lambda: jt.hmm_log_partition(*tables), args.reps)
                print(f"{shape:>12} {'log Z forward':>14} {forward:9.3f}")
                for n in (16, 1024):
                    row(f"sample {n}", wall_ms(lambda: jt.hmm_sample(*tables, n), args.reps), forward,
                        lambda: jt.chain_sample(formed(*tables), n))
                viterbi = wall_ms(lambda: jt.hmm_viterbi(*tables), args.reps)
                print(f"{shape:>12} {'Viterbi':>14} {viterbi:9.3f}")
                for k in (4, 16):
                    row(f"k best {k}", wall_ms(lambda: jt.hmm_kbest(*tables, k), args.reps), viterbi,
                        lambda: jt.chain_kbest(formed(*tables), k))
        if args.kernels:
            steps = {"log Z": lambda p, q: jt.hmm_log_partition(*p)}
            steps.update({name: ours for name, (ours, _) in hmm_losses().items()})
            for name, fn in steps.items():
                times = kernel_ms(tables_step(fn, tables, other))
                parts = "; ".join(f"{kernel[:64]} {ms:.3f}" for kernel, ms in list(times.items())[:5])
                print(f"{shape:>12} {name:>14} GPU {sum(times.values()):.3f} ms: {parts}")


if __name__ == "__main__":
    main()
