"""bench/chain.py's section "hmm-wide": the HMM form at wide batches and many states, with transitions shared by
the batch, where each step is one product [B × C] · [C × C]. jitbmm's fused chain (jitbmm.torch.hmm_log_partition)
against a Python loop of jitbmm's own products over the steps (jitbmm.torch.logbmm), forward and forward + backward
through autograd, and each against the rate of that one product alone: terms/s = B·(T − 1)·C² / time."""

import torch

import jitbmm.torch as jt
from chain_peers import hmm_tables, relative_difference
from chain_timing import attempt, first_line, forward_backward, forward_only, ms, row

# (B, T, C, with the backward): the backward at C = 2048 is left out to keep the run short.
WIDE = ((512, 32, 512, True), (512, 32, 1024, True), (512, 32, 2048, False), (64, 32, 4096, True))
FUSED, LOOP = "jitbmm chain", "logbmm loop"


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
    print("\nHMM form, wide batches, shared transitions, f32: jitbmm's fused chain against a loop of jitbmm.torch.logbmm"
          " over the steps; ms, e12 terms/s (B·(T − 1)·C² / time), and the forward's fraction of the rate of one step's"
          " product [B × C] · [C × C] alone")
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
            print(f"{B:>4} {T:>3} {C:>5} {peer:<13} {ms(fwd)} {ms(fwd_bwd)} {rate(terms, fwd)} {rate(terms, fwd_bwd)} "
                  f"{fraction}  {notes}")
        del tables, alpha, step


def score_check(tables):
    try:
        with torch.no_grad():
            return f"{relative_difference(jt.hmm_log_partition(*tables), hmm_logbmm_loop(*tables)):.1e}"
    except (ValueError, RuntimeError) as e:
        return first_line(e)
