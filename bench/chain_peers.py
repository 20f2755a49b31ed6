"""bench/chain.py's sections against the libraries a user would otherwise take, each on an HMM's tables beside
jitbmm's HMM form: pytorch-crf's CRF layer (section "crf-layer": the log-partition, forward and forward + backward)
and torbi's Viterbi decoder (section "torbi": the best paths, which both must agree on). A library that is not
installed, or whose compiled operator does not match this torch, is left out with the reason printed."""

import importlib.metadata
import importlib.util
from pathlib import Path

import torch

import jitbmm.torch as jt
from chain_timing import FUSED, attempt, first_line, forward_backward, forward_only, ms, row

try:
    import torchcrf
except ImportError:
    torchcrf = None

LAYER_SHAPES = ((32, 128, 32), (64, 256, 64), (16, 512, 128))
# torbi's own benchmark grid (B, T, C): 1440 states is its pitch tracker's.
TORBI_GRID = ((1, 4096, 256), (1, 16384, 64), (512, 32, 512), (16, 1024, 1024), (64, 512, 128), (1, 2000, 1440))


def version(distribution):
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def hmm_tables(B, T, C, log_probabilities=False):
    """emissions [B, T, C], transitions [C, C] read [to, from] (jitbmm's and torbi's order), initial [C]: standard
    normal, or their log-softmax (each column of transitions a distribution over the next state)."""
    torch.manual_seed(0)
    tables = [torch.randn(*shape, device="cuda") for shape in ((B, T, C), (C, C), (C,))]
    if log_probabilities:
        tables = [t.log_softmax(0 if t.dim() < 3 else -1) for t in tables]
    return tables


def relative_difference(ours, theirs):
    return ((ours.double() - theirs.double()).abs().max() / theirs.double().abs().max().clamp_min(1e-300)).item()


# --- pytorch-crf -------------------------------------------------------------------------------------------------

def pytorch_crf_layer(transitions, initial):
    """pytorch-crf's CRF layer holding an HMM's tables (its transitions are read [from, to]; its end transitions are
    zero and not learnt, as the HMM form has none), and its log-partition: the normalizer its log-likelihood
    subtracts, as a function of emissions [B, T, C]."""
    C = initial.shape[0]
    crf = torchcrf.CRF(C, batch_first=True).to(initial.device)
    with torch.no_grad():
        crf.transitions.copy_(transitions.t())
        crf.start_transitions.copy_(initial)
        crf.end_transitions.zero_()
    crf.end_transitions.requires_grad_(False)

    def partition(emissions):
        mask = torch.ones(emissions.shape[1], emissions.shape[0], dtype=torch.bool, device=emissions.device)
        return crf._compute_normalizer(emissions.transpose(0, 1), mask)  # time-major, as the layer computes it

    return crf, partition


def layer_forward_backward(crf, partition, emissions):
    """The layer's forward and the gradients of emissions, transitions and initial (jitbmm's forward + backward
    takes the same three)."""
    def run():
        e = emissions.detach().requires_grad_(True)
        torch.autograd.grad(partition(e).sum(), (e, crf.transitions, crf.start_transitions))
    return run


def crf_layer_section(args, rows):
    print("\npytorch-crf's CRF layer against jitbmm's HMM form (jitbmm.torch.hmm_log_partition): the log-partition of"
          " emissions, transitions and initial, f32, ms")
    if torchcrf is None:
        print("  pytorch-crf absent (pip package pytorch-crf, module torchcrf): section skipped")
        return
    print(f"{'B':>4} {'T':>5} {'C':>4} {'jitbmm fwd':>10} {'f+b':>9} {'pytorch-crf fwd':>15} {'f+b':>9} "
          f"{'ratio fwd':>9} {'f+b':>7} {'score rel diff':>14}  (ratio: pytorch-crf's time / jitbmm's)")
    for B, T, C in LAYER_SHAPES:
        tables = hmm_tables(B, T, C)
        crf, partition = pytorch_crf_layer(*tables[1:])
        runs = {FUSED: (forward_only(jt.hmm_log_partition, tables), forward_backward(jt.hmm_log_partition, tables)),
                "pytorch-crf": (forward_only(partition, tables[:1]),
                                layer_forward_backward(crf, partition, tables[0]))}
        results = {}
        for peer, (fwd, fwd_bwd) in runs.items():
            results[peer] = [attempt(fwd, args.reps), attempt(fwd_bwd, args.reps)]
            rows += [row("crf-layer", B, T, C, peer, step, *r) for step, r in zip(("fwd", "fwd+bwd"), results[peer])]
        try:
            with torch.no_grad():
                check = f"{relative_difference(jt.hmm_log_partition(*tables), partition(tables[0])):14.1e}"
        except (ValueError, RuntimeError) as e:
            check = first_line(e)
        ours, theirs = results[FUSED], results["pytorch-crf"]
        ratios = [f"{t[0][0] / o[0][0]:{w}.1f}" if o[0] and t[0] else f"{'-':>{w}}"
                  for o, t, w in zip(ours, theirs, (9, 7))]
        notes = "; ".join(f"{peer}: {why}" for peer, rs in results.items() for _, why in rs if why)
        print(f"{B:>4} {T:>5} {C:>4} {ms(ours[0][0], 10)} {ms(ours[1][0])} {ms(theirs[0][0], 15)} {ms(theirs[1][0])} "
              f"{ratios[0]} {ratios[1]} {check}  {notes}")
        del tables, crf


# --- torbi -------------------------------------------------------------------------------------------------------

def torbi_decoder():
    """(torch.ops.torbi.viterbi_decode, torbi's version), or (None, why it is absent). The operator's library is
    loaded as torbi's own __init__ picks it among the builds its wheel ships (_C.pt<torch major><minor><cu and the
    CUDA version, or cpu>*.so), without importing the package: its __init__ goes on to import torchutil, and through
    it apprise, for its command-line tools, none of which the decoder needs."""
    spec = importlib.util.find_spec("torbi")
    if spec is None or not spec.submodule_search_locations:
        return None, "torbi absent (pip package torbi)"
    folder, found = Path(next(iter(spec.submodule_search_locations))), version("torbi")
    cuda = "cu" + torch.version.cuda.replace(".", "") if torch.version.cuda else "cpu"
    build = "pt" + "".join(torch.__version__.split("+")[0].split(".")[:2]) + cuda
    libraries = sorted(folder.glob(f"_C.{build}*.so"))
    if len(libraries) != 1:
        shipped = sorted({p.name.split(".")[1] for p in folder.glob("_C.*.so")})
        return None, f"torbi {found} ships no operator built for {build} (it ships {', '.join(shipped) or 'none'})"
    try:
        torch.ops.load_library(str(libraries[0]))
        return torch.ops.torbi.viterbi_decode, found
    except (OSError, RuntimeError, AttributeError) as e:
        return None, f"torbi {found}: {libraries[0].name} does not load: {first_line(e)}"


def path_scores(emissions, transitions, initial, path):
    """Each sequence's score along its path [B, T], in float64."""
    e = emissions.double().gather(2, path.unsqueeze(-1)).squeeze(-1).sum(1)
    return initial.double()[path[:, 0]] + e + transitions.double()[path[:, 1:], path[:, :-1]].sum(1)


def compare_paths(tables, ours, theirs):
    """"paths differ in N of B" and, where some differ, the range of jitbmm's path's score minus torbi's over those
    sequences (about 0 where both are best paths of scores tied up to rounding; negative: jitbmm's is not best)."""
    differ = (ours != theirs).any(1)
    text = f"paths differ in {int(differ.sum())} of {ours.shape[0]}"
    if differ.any():
        gap = (path_scores(*tables, ours) - path_scores(*tables, theirs))[differ]
        text += f" (score of jitbmm's path - torbi's: {gap.min().item():.2e} to {gap.max().item():.2e})"
    return text


def torbi_section(args, rows):
    print("\ntorbi's Viterbi decoder (torch.ops.torbi.viterbi_decode) against jitbmm's (jitbmm.torch.hmm_viterbi): "
          "best paths of log-probability tables, f32, ms")
    decode, found = torbi_decoder()
    if decode is None:
        print(f"  {found}: section skipped")
        return
    print(f"  torbi {found}")
    print(f"{'B':>4} {'T':>6} {'C':>5} {'jitbmm':>9} {'torbi':>9} {'torbi / jitbmm':>14}  paths")
    for B, T, C in TORBI_GRID:
        tables = hmm_tables(B, T, C, log_probabilities=True)
        frames = torch.full((B,), T, dtype=torch.int32, device="cuda")
        ours, why_ours = attempt(forward_only(jt.hmm_viterbi, tables), args.reps)
        theirs, why_theirs = attempt(forward_only(decode, (tables[0], frames, *tables[1:])), args.reps)
        rows += [row("torbi", B, T, C, FUSED, "path", ours, why_ours),
                 row("torbi", B, T, C, "torbi", "path", theirs, why_theirs)]
        if ours and theirs:
            with torch.no_grad():
                theirs_path = decode(tables[0], frames, *tables[1:]).long()
                paths = compare_paths(tables, jt.hmm_viterbi(*tables)[1], theirs_path)
            rows[-1]["paths"] = paths
        else:
            paths = "; ".join(f"{peer}: {why}" for peer, why in (("jitbmm", why_ours), ("torbi", why_theirs)) if why)
        ratio = f"{theirs[0] / ours[0]:14.2f}" if ours and theirs else f"{'-':>14}"
        print(f"{B:>4} {T:>6} {C:>5} {ms(ours)} {ms(theirs)} {ratio}  {paths}")
        del tables, frames
