// The exp-matmul backward's arithmetic: its exponent offsets, its guard and its workspace layout. Plain C++ compiled
// both by the host (the strategy sizes the workspace; the host tests check the bounds) and by NVRTC
// (templates/exp_matmul/grad.cuh), so the two never disagree.
//
// Both gradients are one computation. grad_a[i,k] = Σ_j G[i,j]·2^((a[i,k] + b[k,j] − out[i,j])') with d' = d·log2 e;
// grad_b is the same with the problem transposed (rows j, reduction i: x = bᵀ, y = aᵀ, out and G transposed), so
// the kernels see one canonical form: x [Mx][Kx], y [Kx][Nx], out and G [Mx][Nx], the result [Mx][Kx], the
// reduction over j < Nx. With the line maxima r_i = max_k x[i,k], c_j = max_k y[k,j] and
// x_ij = ((r_i + c_j) − out_ij)' (natural units until each difference is taken, so offsets that cancel in x + y
// cancel exactly):
//   result[i,k] = 2^((x[i,k] − r_i)' + E) · Σ_j H[i,j]·V[k,j],
//   H[i,j] = G[i,j]·2^(x_ij − E − F),   V[k,j] = 2^((y[k,j] − c_j)' + F),
// two exponentiated operands and a dense product, as in the forward. E and F are offsets chosen below so that no
// value the result depends on overflows or underflows.
//
// What may be lost. A term's weight w = 2^((x−r)')·2^(x_ij)·2^((y−c)') ≤ 1. The contract's floor lets each term lose
// 2^-λ·|G| (λ = −floor + 2: the reference's floor is 2^-120·Σ|G| in f32, 2^-1000 in f64), so only terms with
// w ≥ 2^-λ must survive. With the smallest normal 2^m, the largest finite below 2^Mx, R = Nx (lR = ceil log2 R),
// lK = ceil log2 Kx, and per batch |G| < 2^γ (γ from the largest finite |G|):
//   - out ≤ (max term) + lK, so x_ij ≥ −lK; an output is safe when X_min ≤ x_ij ≤ X_max (X_min = −lK − 1 leaves
//     room for rounding; a caller's out that is not the forward's falls outside and is recomputed).
//   - V flushes only when 2^((y−c)') < 2^(m−F); then w < 2^(X_max + m − F): F = X_max + m + λ makes that 2^-λ.
//   - E = lR + γ + X_max − (Mx − 2) keeps Σ_j H·V below 2^(Mx−2): H ≤ 2^(γ + X_max − E − F), V ≤ 2^F, R terms.
//   - A product H·V = G·2^(x_ij + (y − c)' − E) of a term that matters is at least |G|·2^(−λ−E); it must stay normal
//     (each of the up-to-three TF32 partial products loses at most 2^m when it flushes, 3·2^(m+E) < 2^-λ·|G| in
//     the result) for every |G| ≥ 2^γlo, γlo = E + λ + m + 2. Smaller nonzero |G| is not safe.
//   - H is then at least 2^(1 − lK − X_max) for safe outputs: normal while lK + X_max ≤ −m − 1 (eg_fits).
// So the guard gives up the outputs with x_ij outside [X_min, X_max], |G| outside [2^γlo, 2^γ) or non-finite
// values anywhere (G, out, r_i, c_j); G = 0 and out = −inf contribute exactly 0 and are safe. The given-up outputs
// contribute nothing to the product; the direct backward (templates/grad/backward.cuh) adds their exact contributions.
// In f32: X_max = 64 (natural units: r_i + c_j − out ≤ 44), F = 60, and |G| may span 64 − lR binades per batch.
// It builds on exp_matmul/bounds.cuh (JB_HD, em_log2_ceil, em_round_up).
#pragma once

#include "exp_matmul/bounds.cuh"

namespace jb {

// The offsets of one pass (all exponents, log2 units).
struct EgBounds {
  int x_min, x_max; // the safe range of x_ij = r_i + c_j − out'_ij
  int f;            // V's offset
  int lambda, m;    // 2^-λ: the weight a lost term may have; 2^m: the smallest normal
  int limit;        // Mx − 2: Σ H·V stays below 2^limit
  int lr;           // ceil log2 of the reduction length
};
JB_HD EgBounds eg_bounds(long long Kx, long long Nx, bool wide) {
  EgBounds b;
  b.m = wide ? -1022 : -126;
  b.limit = wide ? 1022 : 126;
  b.lambda = wide ? 1002 : 122;
  b.x_max = wide ? 512 : 64;
  b.x_min = -em_log2_ceil(Kx) - 1;
  b.f = b.x_max + b.m + b.lambda;
  b.lr = em_log2_ceil(Nx);
  return b;
}
// E for a batch whose finite |G| are all below 2^gamma.
JB_HD int eg_e(const EgBounds& b, int gamma) { return b.lr + gamma + b.x_max - b.limit; }
// The smallest safe |G| is 2^eg_gamma_lo.
JB_HD int eg_gamma_lo(const EgBounds& b, int e) { return e + b.lambda + b.m + 2; }
// Whether the bounds leave any room: G must span at least one binade, and H must stay normal for safe outputs.
JB_HD bool eg_fits(long long Kx, long long Nx, bool wide) {
  const EgBounds b = eg_bounds(Kx, Nx, wide);
  const int span = 0 - eg_gamma_lo(b, eg_e(b, 0)); // γ − γlo, the same for every γ
  const int lk = -b.x_min - 1;
  return span >= 8 && lk + b.x_max <= -b.m - 1;
}

JB_HD long long eg_align(long long bytes) { return (bytes + 255) / 256 * 256; }

// The canonical dimensions of a pass (GA: grad_a; else grad_b, the problem transposed).
struct EgDims {
  long long Mx, Nx, Kx;           // result rows, reduction, result columns
  long long x_batches, y_batches; // 1 for an operand broadcast over the batch
  bool broadcast;                 // the result is summed over the batch (x broadcast, B > 1)
  bool ga;                        // x is a (grad_a), else b
};
JB_HD EgDims eg_dims(long long B, long long M, long long N, long long K, long long a_batch, long long b_batch,
                     bool ga) {
  EgDims d;
  d.Mx = ga ? M : N;
  d.Nx = ga ? N : M;
  d.Kx = K;
  const long long ab = a_batch == 0 ? 1 : B, bb = b_batch == 0 ? 1 : B;
  d.x_batches = ga ? ab : bb;
  d.y_batches = ga ? bb : ab;
  d.broadcast = d.x_batches == 1 && B > 1;
  d.ga = ga;
  return d;
}

// The workspace, in byte offsets from its start. Both passes of one backward call use it, one after the other, and
// the second may take the first's line maxima and G maximum as they lie (eg_stats_kernel's SECOND). So everything up
// to them lies the same in both: sized for either pass, the line maxima by operand (x's rows are a's rows in grad_a,
// b's columns in grad_b). The first `pass_zeroed` bytes must be zero before each pass; the first `zeroed` before a
// pass that computes G's maximum:
//   rowflag  [B][max(Mx, Nx)] u32: whether a row holds an output given up to the direct backward
//   acc      [Mx][Kx] accumulator: the broadcast result, summed over the batch (either pass's size; none when
//            neither operand is broadcast)
//   gmax     [B] u32: the largest finite |G| of each batch, as float bits (atomicMax)
// then
//   the line maxima: a's rows [a_batches][M], then b's columns [b_batches][N] (r: x's rows; c: y's columns)
//   mask     [B][Mx][Nxp/32] u32: one bit per output given up
//   h        [B][Mxp][Nxp], v [y_batches][Kxp][Nxp]: the product's operands, rows padded to 128, the reduction to
//            32, padding 0
struct EgWorkspace {
  long long Mxp, Nxp, Kxp, words; // words: mask words per row
  long long rowflag, acc, pass_zeroed, gmax, zeroed, r, c, mask, h, v, bytes;
};
JB_HD EgWorkspace eg_workspace(long long B, const EgDims& d, bool wide) {
  const long long t = wide ? 8 : 4;
  EgWorkspace w;
  w.Mxp = em_round_up(d.Mx, 128);
  w.Kxp = em_round_up(d.Kx, 128);
  w.Nxp = em_round_up(d.Nx, 32);
  w.words = w.Nxp / 32;
  const long long acc_x = d.broadcast ? d.Mx * d.Kx : 0, acc_y = d.y_batches == 1 && B > 1 ? d.Nx * d.Kx : 0;
  w.rowflag = 0;
  w.acc = eg_align(w.rowflag + B * (d.Mx > d.Nx ? d.Mx : d.Nx) * 4);
  w.pass_zeroed = eg_align(w.acc + (acc_x > acc_y ? acc_x : acc_y) * t);
  w.gmax = w.pass_zeroed;
  w.zeroed = eg_align(w.gmax + B * 4);
  const long long x_lines = eg_align(d.x_batches * d.Mx * t), y_lines = eg_align(d.y_batches * d.Nx * t);
  w.r = d.ga ? w.zeroed : w.zeroed + y_lines; // a's rows first
  w.c = d.ga ? w.zeroed + x_lines : w.zeroed;
  w.mask = w.zeroed + x_lines + y_lines;
  w.h = eg_align(w.mask + B * d.Mx * w.words * 4);
  w.v = eg_align(w.h + B * w.Mxp * w.Nxp * t);
  w.bytes = eg_align(w.v + d.y_batches * w.Kxp * w.Nxp * t);
  return w;
}

// The H launch's tile: kEgHRows rows (Mxp is a multiple) × 32 columns (one mask word, one panel line a row).
constexpr int kEgHRows = 64;
JB_HD long long eg_h_tiles(long long B, const EgWorkspace& w) { return B * (w.Mxp / kEgHRows) * (w.Nxp / 32); }

// The _stats launch's grid: blocks of 32 rows of x; blocks of 32 (padded) columns of y; blocks of 2048 values of one
// batch of G. Each part is capped (the kernel loops over the rest). A second pass (SECOND) has the column blocks
// only.
struct EgStatsGrid {
  long long row_blocks, col_blocks, g_blocks;
};
JB_HD long long eg_clamp(long long v, long long cap) { return v < 1 ? 1 : v > cap ? cap : v; }
JB_HD EgStatsGrid eg_stats_grid(long long B, const EgDims& d, const EgWorkspace& w) {
  EgStatsGrid g;
  g.row_blocks = eg_clamp((d.x_batches * d.Mx + 31) / 32, 1LL << 16);
  g.col_blocks = eg_clamp(d.y_batches * w.Nxp / 32, 1LL << 16);
  g.g_blocks = eg_clamp(B * ((d.Mx * d.Nx + 2047) / 2048), 1LL << 16);
  return g;
}

} // namespace jb
