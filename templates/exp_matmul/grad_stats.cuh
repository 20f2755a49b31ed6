// The first launch of a log gradient pass by exp_matmul (exp_matmul/grad.cuh): the line maxima of its operands, the
// factors V and each batch's largest finite |G|, read through shared memory so that every read coalesces.
#pragma once

#include "core/dtypes.cuh"
#include "core/numbers.cuh"
#include "exp_matmul/factors.cuh"
#include "exp_matmul/grad_view.cuh"

namespace jb {

// The stats launch reads lines of a strided matrix (rows of x, columns of y) 32 at a time through shared memory,
// kEgK of their elements per step, along whichever direction is contiguous in memory, so that every read coalesces
// and each thread has 8 loads in flight. Line l's element k is at off(l) + k·ks; a line that is not real reads −inf.
constexpr int kEgK = 64;
template <class T> struct EgLineSmem {
  T tile[32][kEgK + 1]; // [line][k]: conflict-free both ways
  T part[8][32];        // per warp, per line: the partial maxima
};
struct EgLines {
  long long lines; // in all batches
  long long batch_lines, line_stride, batch_stride, k_stride, real_lines, K;
  // Along k (a warp reads 32 consecutive k of one line) when k is the denser direction, else along the lines.
  __device__ __forceinline__ bool along_k() const { return k_stride <= line_stride; }
};
// This thread's line offsets for the block's lines [l0, l0 + 32): along k, lines warp + 8u (u < 4); along the
// lines, its lane's line in off[0]. −1: not a real line.
template <class I> __device__ __forceinline__ void eg_line_offsets(const EgLines& L, I l0, I (&off)[4]) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const I l = l0 + (L.along_k() ? warp + 8 * u : lane), batch = l / (I)L.batch_lines, j = l % (I)L.batch_lines;
    off[u] = l < (I)L.lines && j < (I)L.real_lines ? batch * (I)L.batch_stride + j * (I)L.line_stride : (I)-1;
  }
}
// Step k0: tile[line][k − k0] = the value, −inf past K or off a real line. Ends with a barrier.
template <class In, class I, class T>
__device__ __forceinline__ void eg_load_lines(EgLineSmem<T>& sm, const EgLines& L, const In* X, const I (&off)[4],
                                              I k0) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const I ks = (I)L.k_stride, K = (I)L.K;
  T v[8];
  if (L.along_k()) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const I k = k0 + 32 * (e % 2) + lane, o = off[e / 2];
      v[e] = o >= 0 && k < K ? to_acc(X[o + k * ks]) : Num<T>::neg_inf();
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) sm.tile[warp + 8 * (e / 2)][32 * (e % 2) + lane] = v[e];
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const I k = k0 + warp + 8 * e;
      v[e] = off[0] >= 0 && k < K ? to_acc(X[off[0] + k * ks]) : Num<T>::neg_inf();
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) sm.tile[lane][warp + 8 * e] = v[e];
  }
  __syncthreads();
}
// The max of the block's line lane over all k, in every thread (lines not real: −inf).
template <class In, class I, class T>
__device__ __forceinline__ T eg_lines_max(EgLineSmem<T>& sm, const EgLines& L, const In* X, const I (&off)[4]) {
  typedef Num<T> R;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  T mx = Num<T>::neg_inf();
  for (I k0 = 0; k0 < (I)L.K; k0 += kEgK) {
    eg_load_lines<In, I, T>(sm, L, X, off, k0);
#pragma unroll
    for (int e = 0; e < 8; ++e) mx = R::max(mx, sm.tile[lane][warp + 8 * e]);
    __syncthreads(); // the tile is rewritten by the next step
  }
  sm.part[warp][lane] = mx;
  __syncthreads();
  mx = sm.part[0][lane];
#pragma unroll
  for (int w = 1; w < 8; ++w) mx = R::max(mx, sm.part[w][lane]);
  __syncthreads(); // part[] is rewritten by the next lines
  return mx;
}

// Launch 1, 256 threads a block. Blocks [0, row_blocks): 32 rows of x each, their maxima r. Then blocks of 32
// (padded) columns of y: the maxima c, then the columns' factors V[k][j] = 2^((y − c)' + F) (0 for padding and for a
// column whose max is not finite: its outputs are given up). Then blocks over G, 2048 values each: each batch's
// largest finite |G|. SECOND: the other pass of the same backward call ran first in this workspace, so r, c and G's
// maxima are there already (its c is this pass's r and the other way round, eg_workspace): the column blocks only,
// their factors from the c found.
template <class In, class Out, class I, bool GA, int FORM, bool SECOND>
__device__ __forceinline__ void eg_stats_kernel(const GradParams p0) {
  typedef typename Acc<In>::type T;
  typedef Num<T> R;
  const T kLog2e = Num<T>::log2e();
  const GradParams p = eg_canonical<GA>(p0);
  const EgView<T> e = eg_view<T>(p, GA);
  const EgStatsGrid g = eg_stats_grid(p.B, e.d, e.w);
  __shared__ EgLineSmem<T> sm;
  const I Mx = (I)e.d.Mx, Nx = (I)e.d.Nx, Kx = (I)e.d.Kx, Kxp = (I)e.w.Kxp, Nxp = (I)e.w.Nxp;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const long long blk = blockIdx.x;
  I off[4];
  const long long col0 = SECOND ? 0 : g.row_blocks; // the first column block
  if (!SECOND && blk < g.row_blocks) {
    const EgLines L = {e.d.x_batches * e.d.Mx, e.d.Mx, p.a_row, p.a_batch, p.a_col, e.d.Mx, e.d.Kx};
    for (I l0 = (I)blk * 32; l0 < (I)e.d.x_batches * Mx; l0 += (I)g.row_blocks * 32) {
      eg_line_offsets<I>(L, l0, off);
      const T mx = eg_lines_max<In, I, T>(sm, L, static_cast<const In*>(p.a), off);
      if (warp == 0 && l0 + lane < (I)e.d.x_batches * Mx) e.r[l0 + lane] = mx;
    }
    return;
  }
  if (blk < col0 + g.col_blocks) {
    const EgLines L = {e.d.y_batches * e.w.Nxp, e.w.Nxp, p.b_col, p.b_batch, p.b_row, e.d.Nx, e.d.Kx};
    const In* Y = static_cast<const In*>(p.b);
    for (I c0 = (I)(blk - col0) * 32; c0 < (I)e.d.y_batches * Nxp; c0 += (I)g.col_blocks * 32) {
      eg_line_offsets<I>(L, c0, off);
      const I c = c0 + lane, batch = c / Nxp, j = c % Nxp; // Nxp is a multiple of 32: one batch per block
      const bool real = j < Nx;
      T mx;
      if (SECOND) {
        mx = real ? e.c[batch * Nx + j] : Num<T>::neg_inf();
      } else {
        mx = eg_lines_max<In, I, T>(sm, L, Y, off);
        if (real && warp == 0) e.c[batch * Nx + j] = mx;
      }
      const bool finite = fabs(mx) < Num<T>::inf();
      for (I k0 = 0; k0 < Kxp; k0 += kEgK) {
        eg_load_lines<In, I, T>(sm, L, Y, off, k0);
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          const I k = k0 + warp + 8 * u;
          em_put<FORM>(e.v, batch * Kxp + k, j, Nxp,
                       real && finite && k < Kx ? R::exp2((sm.tile[lane][warp + 8 * u] - mx) * kLog2e + (T)e.b.f)
                                                : (T)0);
        }
        __syncthreads(); // the tile is rewritten by the next step
      }
    }
    return;
  }
  if (SECOND) return; // (its grid has no other blocks)
  // G in its own memory order (the maximum does not care), so the reads coalesce whichever pass this is: blocks of
  // 2048 values of one batch, 8 loads in flight a thread, one atomic a block.
  const Out* G = static_cast<const Out*>(p0.grad_out);
  const I M = (I)p0.M, N = (I)p0.N, per_batch = M * N, chunks = (per_batch + 2047) / 2048;
  const bool rows_first = p0.out_col <= p0.out_row; // o runs along j within a row of G, else along i
  for (I q = (I)(blk - g.row_blocks - g.col_blocks); q < (I)p0.B * chunks; q += (I)g.g_blocks) {
    const I z = q / chunks, o0 = q % chunks * 2048;
    float mx = 0.f;
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const I o = o0 + u * 256 + (I)threadIdx.x;
      if (o < per_batch) {
        const I i = rows_first ? o / N : o % M, j = rows_first ? o % N : o / M;
        const float v = fabsf((float)to_acc(G[z * (I)p0.out_batch + i * (I)p0.out_row + j * (I)p0.out_col]));
        if (v < Num<float>::inf()) mx = fmaxf(mx, v); // NaN compares false: skipped
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (lane == 0) sm.part[warp][0] = mx;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < 8; ++w) mx = fmaxf(mx, sm.part[w][0]);
      if (mx > 0.f) atomicMax(&e.gmax[z], __float_as_uint(mx));
    }
    __syncthreads(); // part[] is rewritten by the next chunk
  }
}

} // namespace jb
