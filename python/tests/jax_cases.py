"""What the jitbmm.jax test programs share: jax (None where it is missing), whether it has a CUDA device, and the
float64 references (numpy, written out) the GPU tests compare against. Imports without jax (the programs then report
themselves skipped)."""

import numpy as np

import program_main

try:
    import jax
    jax.config.update("jax_enable_x64", True)  # float64 references and check_grads in float64
    import jax.numpy as jnp
    HAVE_GPU = any(d.platform == "gpu" for d in jax.devices()) if jax.default_backend() != "cpu" else False
except ImportError:
    jax = jnp = None
    HAVE_GPU = False


def main(needs_gpu):
    """The main of a jitbmm.jax test program (program_main.run): skipped where jax (or, for the GPU tests, a CUDA
    device of jax's) is missing."""
    missing = ("jax is not installed here" if jax is None else
               "jax sees no CUDA GPU here" if needs_gpu and not HAVE_GPU else None)
    return program_main.run(missing)


def reference_bmm(a, b, semiring):
    """⊕_k a[..., i, k] ⊗ b[..., k, j] in float64 numpy (batches broadcast), NaN winning and -inf sums empty."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        if semiring == "max_times":
            terms = a[..., :, :, None] * b[..., None, :, :]
        elif semiring == "plus_times":
            return np.matmul(a, b)
        else:
            terms = a[..., :, :, None] + b[..., None, :, :]
        if semiring == "log":
            m = np.max(np.where(np.isnan(terms), -np.inf, terms), axis=-2, keepdims=True)
            m = np.where(np.isfinite(m), m, 0.0)
            out = np.log(np.sum(np.exp(terms - m), axis=-2)) + m.squeeze(-2)
            return np.where(np.isnan(terms).any(-2), np.nan, out)
        reduce = np.min if semiring == "min_plus" else np.max
        out = reduce(np.where(np.isnan(terms), 0.0, terms), axis=-2)
        return np.where(np.isnan(terms).any(-2), np.nan, out)


def reference_crf(potentials, lengths, semiring):
    """(score [B], path [B, T] or None) of chains [B, T - 1, C, C] in float64 numpy: the forward recursion read at
    each sequence's length; Viterbi's path with ties to the smallest state, -1 past the length."""
    pot = np.asarray(potentials, np.float64)
    B, n, C = pot.shape[0], pot.shape[1], pot.shape[-1]
    T = n + 1
    L = np.full(B, T) if lengths is None else np.asarray(lengths)
    scores, paths = np.zeros(B), np.full((B, T), -1, np.int64)
    for b in range(B):
        alpha, back = np.zeros(C), []
        for t in range(L[b] - 1):
            terms = alpha[None, :] + pot[b, t]
            if semiring == "log":
                m = terms.max(-1, keepdims=True)
                alpha = np.log(np.exp(terms - m).sum(-1)) + m[:, 0]
            else:
                back.append(terms.argmax(-1))
                alpha = terms.max(-1)
        if semiring == "log":
            m = alpha.max()
            scores[b] = np.log(np.exp(alpha - m).sum()) + m
        else:
            scores[b], state = alpha.max(), int(alpha.argmax())
            paths[b, L[b] - 1] = state
            for t in range(L[b] - 2, -1, -1):
                state = int(back[t][state])
                paths[b, t] = state
    return scores, (paths if semiring == "max_plus" else None)


def hmm_potentials(emissions, transitions, initial):
    """The CRF potentials [B, T - 1, C, C] of an HMM's tables (float64), the first position's scores folded into the
    first step, so that reference_crf gives the HMM's score; T = 1 needs reference_hmm."""
    e, t, i = (np.asarray(x, np.float64) for x in (emissions, transitions, initial))
    B, T, C = e.shape
    t = np.broadcast_to(t, (B, C, C))
    i = np.broadcast_to(i, (B, C))
    pot = t[:, None] + e[:, 1:, :, None]
    pot[:, 0] += (i + e[:, 0])[:, None, :]
    return pot


def all_paths(T, C):
    """Every state path of T positions over C states, [C^T, T] (the brute-force references' domain)."""
    grids = np.meshgrid(*([np.arange(C)] * T), indexing="ij")
    return np.stack([g.reshape(-1) for g in grids], -1)


def path_scores(potentials, lengths):
    """(scores [B, P], canonical [B, P]) of every path of all_paths under chains [B, T - 1, C, C] in jnp (float64
    for gradients): a path's score sums its edges before its sequence's length; the paths that agree up to the length
    are one path, represented by the one whose later states are all 0 (canonical), so that each path counts once."""
    B, n, C = potentials.shape[0], potentials.shape[1], potentials.shape[-1]
    T = n + 1
    paths = all_paths(T, C)
    L = np.full(B, T) if lengths is None else np.asarray(lengths)
    edges = potentials[:, np.arange(n)[None, :], paths[:, 1:], paths[:, :-1]]  # [B, P, T - 1]
    inside = (np.arange(n)[None, :] < (L - 1)[:, None])[:, None, :]
    scores = jnp.where(inside, edges, 0).sum(-1)
    canonical = np.all((paths[None, :, :] == 0) | (np.arange(T)[None, None, :] < L[:, None, None]), -1)
    return scores, canonical


def hmm_path_scores(emissions, transitions, initial, lengths):
    """(scores [B, P], canonical [B, P]) of every path of all_paths under an HMM's tables in jnp (float64 for
    gradients): emissions [B, T, C], transitions [C, C] or [B, C, C] (to, from), initial [C] or [B, C]. A path's
    score is its first state's initial and emission, then each later position's transition and emission before its
    sequence's length; canonical as path_scores'."""
    B, T, C = emissions.shape
    paths = all_paths(T, C)
    L = np.full(B, T) if lengths is None else np.asarray(lengths)
    t, i = jnp.broadcast_to(transitions, (B, C, C)), jnp.broadcast_to(initial, (B, C))
    inside = np.arange(T)[None, :] < L[:, None]  # [B, T]
    states = jnp.where(inside[:, None, :], emissions[:, np.arange(T)[None, :], paths], 0).sum(-1)
    moves = jnp.where(inside[:, None, 1:], t[:, paths[:, 1:], paths[:, :-1]], 0).sum(-1)
    canonical = np.all((paths[None, :, :] == 0) | (np.arange(T)[None, None, :] < L[:, None, None]), -1)
    return i[:, paths[:, 0]] + states + moves, canonical


def reference_divergence(kind, potentials, other, lengths):
    """The entropy of p, the cross-entropy H(p, q) or KL(p ‖ q) [B] by enumerating every path, in jnp (float64, with
    gradients): kind "entropy", "cross_entropy" or "kl"."""
    sp, canonical = path_scores(potentials, lengths)
    return _divergence_of_scores(kind, sp, None if other is None else path_scores(other, lengths)[0], canonical)


def reference_hmm_divergence(kind, tables, other, lengths):
    """The same of HMMs p and q given by their tables (emissions, transitions, initial), as hmm_path_scores reads
    them (other None for the entropy)."""
    sp, canonical = hmm_path_scores(*tables, lengths)
    return _divergence_of_scores(kind, sp, None if other is None else hmm_path_scores(*other, lengths)[0], canonical)


def _divergence_of_scores(kind, sp, sq, canonical):
    log_z = jax.nn.logsumexp(jnp.where(canonical, sp, -jnp.inf), -1)
    weight = jnp.where(canonical, jnp.exp(sp - log_z[:, None]), 0)
    if kind == "entropy":
        return log_z - (weight * sp).sum(-1)
    log_zq = jax.nn.logsumexp(jnp.where(canonical, sq, -jnp.inf), -1)
    if kind == "cross_entropy":
        return log_zq - (weight * sq).sum(-1)
    return (weight * (sp - sq)).sum(-1) - log_z + log_zq


def reference_kbest(potentials, lengths, k):
    """(scores [B, k], paths [B, k, T]) of the k best paths by enumeration, in float64 numpy: paths of equal score
    ordered by their states read from the last position back, smaller first; -1 past a length."""
    pot = np.asarray(potentials, np.float64)
    B, n = pot.shape[0], pot.shape[1]
    T = n + 1
    L = np.full(B, T) if lengths is None else np.asarray(lengths)
    scores, canonical = path_scores(pot, L)
    scores, paths = np.asarray(scores), all_paths(T, pot.shape[-1])
    best_scores, best_paths = np.full((B, k), -np.inf), np.full((B, k, T), -1, np.int64)
    for b in range(B):
        candidates = [(-scores[b, p], tuple(paths[p, :L[b]][::-1]), p) for p in np.flatnonzero(canonical[b])]
        for i, (_, _, p) in enumerate(sorted(candidates)[:k]):
            best_scores[b, i] = scores[b, p]
            best_paths[b, i, :L[b]] = paths[p, :L[b]]
    return best_scores, best_paths
