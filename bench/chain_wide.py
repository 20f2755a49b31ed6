"""bench/chain.py's sections "hmm-wide" and "pyjuice": the HMM form at wide batches and many states, with
transitions shared by the batch, where each step is one product [B × C] · [C × C]. jitbmm's fused chain
(jitbmm.torch.hmm_log_partition) against a Python loop of jitbmm's own products over the steps (jitbmm.torch.logbmm),
forward and forward + backward through autograd, and each against the rate of that one product alone; then PyJuice's
HMM at the same shapes where it is installed. terms/s = B·(T − 1)·C² / time."""

import time

import torch

import jitbmm.torch as jt
from chain_peers import hmm_tables, relative_difference
from chain_timing import FUSED, attempt, first_line, forward_backward, forward_only, ms, row

# (B, T, C, with the backward): the backward at C = 2048 is left out to keep the run short.
WIDE = ((512, 32, 512, True), (512, 32, 1024, True), (512, 32, 2048, False), (64, 32, 4096, True))
LOOP = "logbmm loop"


def hmm_logbmm_loop(emissions, transitions, initial):
    """The HMM form's forward algorithm, one product a step: alpha'[b, c] = log Σ_p exp(alpha[b, p] +
    transitions[c, p]) + emissions[b, t, c], i.e. alpha [B, C] times transitions transposed in the log semiring."""
    alpha, step = initial + emissions[:, 0], transitions.t()
    for t in range(1, emissions.shape[1]):
        alpha = jt.logbmm(alpha, step) + emissions[:, t]
    return alpha.logsumexp(-1)


def rate(terms, result):
    return f"{terms / result[0] / 1e9:9.2f}" if result else f"{'-':>9}"


def hmm_wide_section(args, rows):
    print("\nHMM form, wide batches, shared transitions, f32: jitbmm's fused chain against a loop of "
          "jitbmm.torch.logbmm over the steps; ms, e12 terms/s (B·(T − 1)·C² / time), and the forward's fraction of "
          "the rate of one step's product [B × C] · [C × C] alone")
    print(f"{'B':>4} {'T':>3} {'C':>5} {'peer':<13} {'fwd ms':>9} {'f+b ms':>9} {'fwd e12/s':>9} {'f+b e12/s':>9} "
          f"{'of product':>10}  notes")
    for B, T, C, with_backward in WIDE:
        tables = hmm_tables(B, T, C)
        terms = B * (T - 1) * C * C
        alpha, step = tables[2] + tables[0][:, 0], tables[1].t()
        product, why = attempt(forward_only(jt.logbmm, (alpha, step)), args.reps)
        rows.append(row("hmm-wide", B, T, C, "one logbmm step", "fwd", product, why,
                        terms_per_s=product and B * C * C / product[0] * 1e3))
        print(f"{B:>4} {T:>3} {C:>5} {'one product':<13} {ms(product)} {'':>9} {rate(B * C * C, product)} {'':>9} "
              f"{'':>10}  {why or ''}")
        fused_ran = False
        for peer, fn in ((FUSED, jt.hmm_log_partition), (LOOP, hmm_logbmm_loop)):
            runs = [("fwd", forward_only(fn, tables))]
            runs += [("fwd+bwd", forward_backward(fn, tables))] if with_backward else []
            results = {step_name: attempt(run, args.reps) for step_name, run in runs}
            for step_name, (result, why) in results.items():
                rows.append(row("hmm-wide", B, T, C, peer, step_name, result, why,
                                terms_per_s=result and terms / result[0] * 1e3))
            fwd, fwd_bwd = results["fwd"][0], results.get("fwd+bwd", (None, None))[0]
            # (terms / fwd) / (B·C² / one product's time)
            fraction = f"{(T - 1) * product[0] / fwd[0]:10.2f}" if fwd and product else f"{'-':>10}"
            notes = "; ".join(f"{s}: {why}" for s, (_, why) in results.items() if why)
            fused_ran = fused_ran or (peer == FUSED and fwd is not None)
            if peer == LOOP and fwd and fused_ran:
                notes = (notes + "; " if notes else "") + "score rel diff to the fused chain " + score_check(tables)
            print(f"{B:>4} {T:>3} {C:>5} {peer:<13} {ms(fwd)} {ms(fwd_bwd)} {rate(terms, fwd)} "
                  f"{rate(terms, fwd_bwd)} {fraction}  {notes}")
        del tables, alpha, step


def score_check(tables):
    try:
        with torch.no_grad():
            return f"{relative_difference(jt.hmm_log_partition(*tables), hmm_logbmm_loop(*tables)):.1e}"
    except (ValueError, RuntimeError) as e:
        return first_line(e)


# --- PyJuice -----------------------------------------------------------------------------------------------------

SYMBOLS = 256  # PyJuice's HMM observes symbols through a [C, SYMBOLS] table; the gather costs the same at any size


def load_pyjuice():
    """(the pyjuice module, None) or (None, why it is absent); imported only when its section runs (it imports
    Triton, numba and matplotlib)."""
    try:
        import pyjuice
        return pyjuice, None
    except Exception as e:  # not installed, or its own imports fail here
        return None, "PyJuice absent (pip package pyjuice): " + first_line(e)


def pyjuice_runs(pyjuice, B, T, C):
    """((forward, forward + backward), compile seconds) of PyJuice's HMM of T steps and C states, compiled to its
    circuit's layers, over B random sequences of symbols, on its own random parameters (its time does not depend on
    their values); its backward computes the flows of every node and parameter, its counterpart of the gradients
    of the emissions and the transitions. (None, why) where it does not compile."""
    start = time.perf_counter()
    try:
        pc = pyjuice.compile(pyjuice.structures.HMM(T, C, SYMBOLS), verbose=False)
        pc.to(torch.device("cuda"))
    except Exception as e:  # a peer's own errors are of any type
        return None, "failed to compile: " + first_line(e)
    seconds = time.perf_counter() - start
    x = torch.randint(SYMBOLS, (B, T), device="cuda")

    def forward_backward():
        pc(x)
        pc.backward(x, flows_memory=1.0)

    return (lambda: pc(x), forward_backward), seconds


def pyjuice_section(args, rows):
    print("\nPyJuice's HMM (pyjuice.structures.HMM) at the wide rows' shapes, its own f32 parameters: ms, e12 "
          "terms/s, and its time over jitbmm's fused chain's in this run's hmm-wide section")
    pyjuice, why = load_pyjuice()
    if pyjuice is None:
        print(f"  {why}: section skipped")
        return
    fused = {(r["B"], r["T"], r["C"], r["pass"]): r["ms"] for r in rows
             if r["section"] == "hmm-wide" and r["peer"] == FUSED and r["ms"]}
    print(f"{'B':>4} {'T':>3} {'C':>5} {'fwd ms':>9} {'f+b ms':>9} {'fwd e12/s':>9} {'f+b e12/s':>9} "
          f"{'/ jitbmm fwd':>12} {'f+b':>7} {'compile s':>9}  notes")
    for B, T, C, with_backward in WIDE:
        terms = B * (T - 1) * C * C
        runs, compiled = pyjuice_runs(pyjuice, B, T, C)
        results = {}
        if runs:
            results = {"fwd": attempt(runs[0], args.reps)}
            results.update({"fwd+bwd": attempt(runs[1], args.reps)} if with_backward else {})
        else:
            results = {"fwd": (None, compiled)}
        for step_name, (result, why) in results.items():
            rows.append(row("pyjuice", B, T, C, "PyJuice HMM", step_name, result, why,
                            terms_per_s=result and terms / result[0] * 1e3))
        times = [results.get(s, (None, None))[0] for s in ("fwd", "fwd+bwd")]
        ratios = [f"{t[0] / fused[(B, T, C, s)]:{w}.2f}" if t and (B, T, C, s) in fused else f"{'-':>{w}}"
                  for t, s, w in zip(times, ("fwd", "fwd+bwd"), (12, 7))]
        notes = "; ".join(f"{s}: {why}" for s, (_, why) in results.items() if why)
        seconds = f"{compiled:9.1f}" if runs else f"{'-':>9}"
        print(f"{B:>4} {T:>3} {C:>5} {ms(times[0])} {ms(times[1])} {rate(terms, times[0])} {rate(terms, times[1])} "
              f"{ratios[0]} {ratios[1]} {seconds}  {notes}")
        runs = None
