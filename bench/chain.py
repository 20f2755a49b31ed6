"""Linear-chain CRFs and HMMs: jitbmm's fused chain kernels (jitbmm.torch.chain_log_partition, chain_viterbi, and
the HMM form's hmm_log_partition, hmm_viterbi) beside every peer, in one run, by sections (--sections, all by
default):

- chains: against torch-struct's LinearChainCRF with its own semiring products, the same with jitbmm's
  (jitbmm.torch_struct.patch), and a loop of one jitbmm.torch.logbmm a step (--shapes, --long-c, --dtype);
- crf-layer: against pytorch-crf's CRF layer (bench/chain_peers.py);
- torbi: Viterbi against torbi's decoder, paths compared (bench/chain_peers.py);
- hmm-wide: the HMM form at wide batches and up to 4,096 states against a loop of jitbmm's products
  (bench/chain_wide.py);
- pyjuice: PyJuice's HMM at the same shapes, against the fused chain's times of hmm-wide (bench/chain_wide.py).

    python3 bench/chain.py [--sections chains,crf-layer,torbi,hmm-wide,pyjuice] [--shapes "32,128,32;..."]
                           [--long-c 64] [--dtype f32] [--reps 10] [--json out.json]

Section chains: for each (B, T, C), potentials [B, T - 1, C, C] (standard normal), every sequence of length T: the
log-partition's forward (under torch.no_grad) and forward + backward (the marginals), and the Viterbi score and path
(jitbmm) against torch-struct's argmax (with jitbmm's products). The HMM rows take an HMM's tables instead (emissions
[B, T, C], transitions [C, C], initial [C], standard normal): jitbmm's HMM form, which never forms the potentials,
against forming them (differentiably) and running jitbmm's CRF form or torch-struct on them (Viterbi: torch-struct's
argmax on them); forward + backward gives the gradients of all three tables. The other sections run f32 (torbi takes
nothing else). Each figure is the median of --reps CUDA-event times after warm-up calls (bench/warm_up.py),
and the peak device memory the call adds (torch.cuda.max_memory_allocated over what was allocated before it); a peer
that runs out of memory shows OOM, a shape a peer refuses its error's first line, a peer that is not installed the
reason it is left out. terms/s = B·(T − 1)·C² / time. --json writes every row of every section."""

import argparse
import contextlib
import json
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
import jitbmm  # noqa: E402
import jitbmm.torch as jt  # noqa: E402
from chain_peers import crf_layer_section, torbi_section, version  # noqa: E402
from chain_timing import FUSED, cell, forward_backward, forward_only, measure  # noqa: E402
from chain_wide import hmm_wide_section, pyjuice_section  # noqa: E402

try:
    import torch_struct
    import jitbmm.torch_struct as jts
except Exception:  # not installed, or incompatible with this torch: its peers are left out
    torch_struct = jts = None

DEFAULT_SHAPES = "32,128,32;32,512,64;8,1024,128;16,256,256"
LONG_T = (1024, 2048, 4096)  # at B = 16, C = --long-c
DTYPES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}
PASSES = {"log": ("fwd", "fwd+bwd"), "viterbi": ("score+path",), "hmm": ("fwd", "fwd+bwd"),
          "hmm-vit": ("score+path",)}


def logbmm_loop(pot):
    """The forward algorithm as one product a step: alpha [B, 1, C] times pot[:, t] transposed (rows p, columns c)."""
    alpha = pot.new_zeros(pot.shape[0], 1, pot.shape[-1])
    for t in range(pot.shape[1]):
        alpha = jt.logbmm(alpha, pot[:, t].transpose(-1, -2))
    return alpha.logsumexp(-1).squeeze(-1)


def torch_struct_partition(pot):
    return torch_struct.LinearChainCRF(pot).partition


def torch_struct_argmax(pot):
    return torch_struct.LinearChainCRF(pot).argmax


def formed(emissions, transitions, initial):
    """The potentials [B, T - 1, C, C] of an HMM's tables: transitions[c, p] + emissions[:, t + 1, c], with
    initial[p] + emissions[:, 0, p] in the first step."""
    pot = transitions + emissions[:, 1:, :, None]
    return torch.cat((pot[:, :1] + (initial + emissions[:, 0])[:, None, None, :], pot[:, 1:]), 1)


def on_formed(fn):
    return lambda e, t, i: fn(formed(e, t, i))


# The peers: (name, the function of potentials, a context it runs in). torch-struct's semirings are patched only
# while "torch-struct + jitbmm" runs, and restored after.
def log_peers():
    peers = [(FUSED, jt.chain_log_partition, contextlib.nullcontext)]
    if torch_struct is not None:
        peers += [("torch-struct", torch_struct_partition, contextlib.nullcontext),
                  ("torch-struct + jitbmm", torch_struct_partition, jts.patched)]
    return peers + [("logbmm loop", logbmm_loop, contextlib.nullcontext)]


def viterbi_peers():
    peers = [(FUSED, jt.chain_viterbi, contextlib.nullcontext)]
    if torch_struct is not None:
        peers.append(("torch-struct + jitbmm", torch_struct_argmax, jts.patched))
    return peers


def hmm_peers():
    peers = [(FUSED, jt.hmm_log_partition, contextlib.nullcontext),
             ("jitbmm chain on formed", on_formed(jt.chain_log_partition), contextlib.nullcontext)]
    if torch_struct is not None:
        peers.append(("torch-struct + jitbmm", on_formed(torch_struct_partition), jts.patched))
    return peers


def hmm_viterbi_peers():
    peers = [(FUSED, jt.hmm_viterbi, contextlib.nullcontext)]
    if torch_struct is not None:
        peers.append(("torch-struct + jitbmm", on_formed(torch_struct_argmax), jts.patched))
    return peers


def viterbi(fn, inputs):
    def run():
        fn(*(x.detach().requires_grad_(True) for x in inputs))  # torch-struct's argmax is a gradient: it needs one
    return run


def chains_section(args, rows):
    """The section "chains": every shape of --shapes and --long-c, then the forward + backward's summary."""
    shapes = [tuple(map(int, s.split(","))) for s in args.shapes.split(";") if s]
    shapes += [(16, T, args.long_c) for T in LONG_T if args.long_c]
    dtype = DTYPES[args.dtype]
    summary = []
    print(f"\nlinear chains, {args.dtype}: jitbmm against torch-struct\n{'B':>4} {'T':>5} {'C':>4} {'task':<8} "
          f"{'peer':<22} {'fwd ms':>9} {'fwd MiB':>9} {'f+b ms':>9} {'f+b MiB':>9} {'Gterms/s (fwd, f+b)'}")
    for B, T, C in shapes:
        torch.manual_seed(0)
        pot = (torch.randn(B, T - 1, C, C, device="cuda", dtype=dtype),)
        tables = tuple(torch.randn(*shape, device="cuda", dtype=dtype) for shape in ((B, T, C), (C, C), (C,)))
        terms = B * (T - 1) * C * C
        best = {"log": {}, "hmm": {}}
        tasks = [("log", peer, (forward_only(fn, pot), forward_backward(fn, pot)), ctx)
                 for peer, fn, ctx in log_peers()]
        tasks += [("viterbi", peer, (viterbi(fn, pot),), ctx) for peer, fn, ctx in viterbi_peers()]
        tasks += [("hmm", peer, (forward_only(fn, tables), forward_backward(fn, tables)), ctx)
                  for peer, fn, ctx in hmm_peers()]
        tasks += [("hmm-vit", peer, (viterbi(fn, tables),), ctx) for peer, fn, ctx in hmm_viterbi_peers()]
        for task, peer, runs, ctx in tasks:
            with ctx():
                results = [measure(run, args.reps) for run in runs]
            fused = peer == FUSED
            for name, r in zip(PASSES[task], results):
                rows.append({"section": "chains", "B": B, "T": T, "C": C, "task": task, "peer": peer, "pass": name,
                             "ms": r and r[0], "peak_mib": r and r[1],
                             "terms_per_s": terms / r[0] * 1e3 if fused and r else None})
            if task in best:
                best[task][peer] = results[1] and results[1][0]
            rate = " ".join(f"{terms / r[0] / 1e6:8.2f}" if r else f"{'-':>8}" for r in results) if fused else ""
            print(f"{B:>4} {T:>5} {C:>4} {task:<8} {peer:<22} {' '.join(cell(r) for r in results):<39} {rate}")
        for task, times in best.items():
            peers = {k: v for k, v in times.items() if k != FUSED and v}
            fastest = min(peers, key=peers.get) if peers else None
            summary.append((task, B, T, C, times.get(FUSED), fastest, peers.get(fastest)))
        del pot, tables
    for form, title in (("log", "CRF form"), ("hmm", "HMM form")):
        print(f"\nlog-partition forward + backward, {title}\n{'B':>4} {'T':>5} {'C':>4} {'jitbmm fused ms':>16} "
              f"{'fastest other':<22} {'its ms':>9} {'speed-up':>9}")
        for task, B, T, C, ours, name, theirs in summary:
            if task != form:
                continue
            ours_text = f"{ours:16.3f}" if ours else f"{'OOM':>16}"
            speedup = f"{theirs / ours:9.1f}" if ours and theirs else f"{'-':>9}"
            print(f"{B:>4} {T:>5} {C:>4} {ours_text} {name or '(all OOM)':<22} "
                  f"{f'{theirs:9.3f}' if theirs else '-':>9} {speedup}")


# Each section prints its rows and its table and appends its rows to the run's JSON rows.
SECTIONS = {"chains": chains_section, "crf-layer": crf_layer_section, "torbi": torbi_section,
            "hmm-wide": hmm_wide_section, "pyjuice": pyjuice_section}


def sections(text):
    names = [name for name in text.split(",") if name]
    unknown = [name for name in names if name not in SECTIONS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown section(s) {', '.join(unknown) or '(none given)'}; expected a "
                                         f"comma list of {', '.join(SECTIONS)}")
    return names


def main():
    warnings.filterwarnings("ignore", message=".*arg_constraints.*")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sections", type=sections, default=list(SECTIONS),
                    help=f"comma list of the sections to run, in this order (default: {','.join(SECTIONS)})")
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="chains: B,T,C;B,T,C;...")
    ap.add_argument("--long-c", type=int, default=64,
                    help="chains: C of the long sequences (B = 16, T up to 4096); 0: none")
    ap.add_argument("--dtype", choices=DTYPES, default="f32", help="chains: the inputs' dtype (other sections: f32)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json", help="also write every row of every section here")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench/chain.py: needs a CUDA GPU")
    versions = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "jitbmm": jitbmm.version(),
                "torch_struct": version("torch-struct") if torch_struct else None,
                "pytorch_crf": version("pytorch-crf"), "torbi": version("torbi"), "pyjuice": version("pyjuice")}
    print(f"{versions['gpu']} | torch {versions['torch']} | jitbmm {versions['jitbmm']} | "
          + " | ".join(f"{name} {versions[key] or 'absent'}" for name, key in
                       (("torch-struct", "torch_struct"), ("pytorch-crf", "pytorch_crf"), ("torbi", "torbi"),
                        ("PyJuice", "pyjuice")))
          + f" | median of {args.reps} | sections {','.join(args.sections)}")
    rows = []
    for name in args.sections:
        SECTIONS[name](args, rows)
        if args.json:  # after each section, so that a run stopped in a later one keeps the rows of those before
            Path(args.json).write_text(json.dumps(dict(versions, dtype=args.dtype, reps=args.reps,
                                                       sections=args.sections, rows=rows), indent=1))


if __name__ == "__main__":
    main()
