// The exp-matmul strategy's arithmetic: the headroom, the guard threshold and the workspace layout. Plain C++
// compiled both by the host (plan.cpp sizes the workspace; the host tests check the guard's bound) and by NVRTC
// (templates/exp_matmul/product.cuh), so the two can never disagree.
//
// The method: with A = max_k a[i,k] and B = max_k b[k,j] (the stats pass; natural units, so that offsets of rows and
// columns that cancel in a + b cancel exactly) and d' = d·log2 e for a shift d,
//   out[i,j] = A + B + (log2 s − 2h) · ln 2,   s = Σ_k 2^((a[i,k] − A)' + h) · 2^((b[k,j] − B)' + h),
// so s is an ordinary matrix product of two exponentiated operands: one FMA per term, one exp per operand element.
//
// Headroom h. Every factor is at most 2^h, every product at most 2^2h and s at most K·2^2h; h is the largest value
// that keeps K·2^2h below 2^(max_exp − 2), so s cannot overflow. The larger h, the smaller the share of terms that
// underflow (a factor or product below the format's smallest normal 2^min_exp is flushed or denormal).
//
// What can be lost. A term is lost (or loses its precision) only where a factor, a partial product (3xTF32 forms
// three) or the product falls below 2^min_exp; the other factor is then at most 2^h, so each term loses at most
// 3·2^(h + min_exp) < 2^(h + min_exp + 2), and all K terms together less than L = 2^(lk + h + min_exp + 2),
// lk = ceil(log2 K). Every term is non-negative, so the rounding of the sum itself is relative to s, as in any
// positive sum; only L is absolute.
//
// The guard. An output whose s ≥ 2^(guard_bits) · L = 2^em_guard_log2(K) has lost at most 2^-guard_bits of its value
// (2^-30 in float, below its 2^-24 rounding; 2^-60 in double): it is exact to the dtype. Any other output, and
// any output whose row or column holds +inf (the shift is then meaningless), is recomputed by the direct kernel.
// An output whose every term is −inf is recognised without recomputation: each row and column records where it
// holds values other than −inf (EmLine below); when they cannot meet, the output is exactly −inf.
#pragma once

#include "core/host_device.cuh"

namespace jb {

// ceil(log2(max(k, 1))).
JB_HD int em_log2_ceil(long long k) {
#ifdef __CUDA_ARCH__
  return k <= 1 ? 0 : min(62, 64 - __clzll(k - 1)); // every thread of a kernel takes it: no loop
#else
  int l = 0;
  while (l < 62 && (1LL << l) < k) ++l;
  return l;
#endif
}

// Exponent range of the accumulator: smallest normal 2^min_exp, largest finite below 2^max_exp; guard_bits is how
// far below the value the lost mass must stay.
struct EmFormat {
  int min_exp, max_exp, guard_bits;
};
JB_HD EmFormat em_format(bool wide) {
  EmFormat f;
  f.min_exp = wide ? -1022 : -126;
  f.max_exp = wide ? 1024 : 128;
  f.guard_bits = wide ? 60 : 30;
  return f;
}

JB_HD int em_headroom(long long K, bool wide) { return (em_format(wide).max_exp - 2 - em_log2_ceil(K)) / 2; }

// s ≥ 2^em_guard_log2(K): the output is exact; below, it is recomputed.
JB_HD int em_guard_log2(long long K, bool wide) {
  const EmFormat f = em_format(wide);
  return em_log2_ceil(K) + em_headroom(K, wide) + f.min_exp + 2 + f.guard_bits;
}

// The repair pass's tile (the exact two-pass kernel run on flagged tiles only), which is also the grain of the
// flags: 64×64, or 32×32 when the problem has fewer than 512 tiles of 64×64 (about a wave of them on an H100).
// Sized to the problem, so that a small one still spreads its repair over many blocks (at 8×256², 512 blocks of
// 32×32 rather than 128 of 64×64 for 132 SMs), and a finer grain repairs fewer outputs around each flagged one.
JB_HD int em_repair_tile(long long B, long long M, long long N) {
  return B * ((M + 63) / 64) * ((N + 63) / 64) >= 512 ? 64 : 32;
}

// The exponentiated operands are stored padded, so the product's loads need no bounds checks: rows and columns to
// a multiple of 128 (any block tile up to 128 divides it), K to a whole 128-byte line of factors: a multiple of 32
// (any tile_k up to 32), or of 64 for 2-byte factors (a wgmma_bf16 panel's line). Padding holds 0 (the factor of
// −inf).
JB_HD long long em_round_up(long long v, long long to) { return (v + to - 1) / to * to; }
JB_HD int em_k_align(int factor_bytes) { return factor_bytes == 2 ? 64 : 32; }

// The workspace, in byte offsets from its start:
//   row_max, row_line  per row of a (a_batches × M): its max, and its EmLine (where it holds values other than
//                      −inf); col_max, col_line likewise per column of b (b_batches × N)
//   repaired           the number of outputs the guard sent to repair (one 64-bit counter)
//   flags              one per repair tile of the output (B × tiles_m × tiles_n)
//   ea                 2^((a − max)' + h), [a_batches][Mp][Kp]; eb likewise, [b_batches][Kp][Np] (FORM 0) or
//                      [b_batches][Np][Kp] (the tensor-core forms), or both in panels (the wgmma forms: em_panel_at);
//                      in the accumulator type, or in BF16 (FORM 5 and 6: em_factor_bytes); none for FORM 7
// a_batches (b_batches) is 1 when that operand is broadcast over the batch, else B. The prepare pass writes all of it.
struct EmWorkspace {
  long long Mp, Np, Kp;
  long long row_max, col_max, row_line, col_line, repaired, flags, tiles, ea, eb, bytes;
};

// Where a row of a (column of b) holds values other than −inf: which of 64 chunks of K (each a power of two long),
// and the first and last such k (saturated at 2^31 − 1, which only makes the test below weaker). An output is exactly
// −inf when its row and column share no such chunk, or their [first, last] ranges do not meet: CRF-style block and band
// masks.
struct EmLine {
  unsigned long long chunks;
  int first, last;
};
JB_HD bool em_all_neg_inf(const EmLine& a, const EmLine& b) {
  return (a.chunks & b.chunks) == 0ull || a.last < b.first || b.last < a.first;
}
JB_HD long long em_align(long long bytes) { return (bytes + 15) / 16 * 16; }
// The size of one factor: the accumulator's, or 2 for FORM 5, 6 and 7 (math bf16, wgmma_bf16 and wgmma_bf16_fused:
// factors rounded to BF16). FORM 7 stores none: its product makes them from a and b (exp_matmul/fused.cuh).
JB_HD int em_factor_bytes(int form, bool wide) { return form >= 5 && form <= 7 ? 2 : wide ? 8 : 4; }
JB_HD constexpr bool em_stores_factors(int form) { return form != 7; }
// factor_bytes 0: the accumulator's size (the parts before ea do not depend on it); stored false: ea and eb empty
// (Kp is still K padded for factor_bytes: the product's slices).
JB_HD EmWorkspace em_workspace(long long B, long long M, long long N, long long K, long long a_batches,
                               long long b_batches, bool wide, int factor_bytes = 0, bool stored = true) {
  const long long acc = wide ? 8 : 4, rt = em_repair_tile(B, M, N), fb = factor_bytes > 0 ? factor_bytes : acc;
  EmWorkspace w;
  w.Mp = em_round_up(M, 128);
  w.Np = em_round_up(N, 128);
  w.Kp = em_round_up(K, em_k_align((int)fb));
  w.row_max = 0;
  w.col_max = em_align(w.row_max + a_batches * M * acc);
  w.row_line = em_align(w.col_max + b_batches * N * acc);
  w.col_line = em_align(w.row_line + a_batches * M * 16);
  w.repaired = em_align(w.col_line + b_batches * N * 16);
  w.flags = w.repaired + 16;
  w.tiles = B * ((M + rt - 1) / rt) * ((N + rt - 1) / rt);
  w.ea = em_align(w.flags + w.tiles * 4);
  w.eb = em_align(w.ea + (stored ? a_batches * w.Mp * w.Kp * fb : 0));
  w.bytes = em_align(w.eb + (stored ? b_batches * w.Kp * w.Np * fb : 0));
  return w;
}

// The wgmma forms' operand layout, which a K slice's bulk copy moves as it lies. Lines (rows of a, columns of b,
// counted across the batch) are grouped in panels of 128, each panel's K in slices of one 128-byte line: PER values
// (32 of 4 bytes, or 64 BF16 for wgmma_bf16). A slice is 128 lines × PER k, 16 KiB contiguous, every line's 16-byte
// chunks swizzled by line % 8 (wgmma's 128-byte swizzle, templates/hopper/wgmma.cuh), so any 64 consecutive lines of a
// panel copy straight into a wgmma tile. Offsets in values; Kp is a multiple of PER and the padded line counts of 128.
// Lines, k and Kp are never negative: unsigned, the divisions and remainders are shifts and masks.
template <int PER = 32> JB_HD int em_sw128_at(int row, int k) {
  constexpr unsigned kChunk = PER / 8; // values a 16-byte chunk
  const unsigned r = (unsigned)row, c = (unsigned)k;
  return (int)(r * PER + (((c / kChunk) ^ (r % 8)) * kChunk) + c % kChunk);
}
template <int PER = 32> JB_HD long long em_panel_at(long long line, long long k, long long Kp) {
  const unsigned long long l = (unsigned long long)line, c = (unsigned long long)k, kp = (unsigned long long)Kp;
  return (long long)(((l / 128) * (kp / PER) + c / PER) * (128 * PER) +
                     em_sw128_at<PER>((int)(l % 128), (int)(c % PER)));
}

// The Hopper product (math wgmma_*, templates/exp_matmul/wgmma.cuh): a stage holds one slice (a 128-byte line: 32
// k, or 64 for wgmma_bf16) of a's BM rows and b's BN columns, and for wgmma_tf32x3 their TF32 low parts beside them.
// Stages start 1024-byte aligned (the swizzle's period); as many as fit in 200 KiB of shared memory, at most 4; the
// kernel needs 3 (one slice in the tensor cores, one being split into TF32 parts or waited for, one landing).
// wgmma_bf16_fused (exp_matmul/fused.cuh): the slices its producer copies ahead of the one it makes, and so the
// tiles whose line shifts it keeps (one more).
JB_HD constexpr int em_made_lead(int stages) { return stages - 2 < 2 ? stages - 2 : 2; }
JB_HD int em_wg_stage_bytes(int bm, int bn, bool split) { return (split ? 2 : 1) * (bm + bn) * 32 * 4; }
JB_HD int em_wg_stages(int stage_bytes) {
  const int s = stage_bytes > 0 ? 200 * 1024 / stage_bytes : 0;
  return s > 4 ? 4 : s;
}

// The prepare pass's grid: blocks of 32 (padded) rows of a, then blocks of 32 (padded) columns of b. Each part is
// capped (the kernel loops over the rest).
struct EmStatsGrid {
  long long row_blocks, col_blocks;
};
JB_HD EmStatsGrid em_stats_grid(long long M, long long N, long long a_batches, long long b_batches) {
  const long long cap = 1LL << 16;
  EmStatsGrid g;
  g.row_blocks = (a_batches * em_round_up(M, 128) + 31) / 32;
  g.col_blocks = (b_batches * em_round_up(N, 128) + 31) / 32;
  if (g.row_blocks > cap) g.row_blocks = cap;
  if (g.col_blocks > cap) g.col_blocks = cap;
  if (g.row_blocks < 1) g.row_blocks = 1;
  if (g.col_blocks < 1) g.col_blocks = 1;
  return g;
}

} // namespace jb
