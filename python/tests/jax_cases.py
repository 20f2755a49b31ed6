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
