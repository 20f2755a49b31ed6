// Strategy "histogram" (a gradient pass of the selecting semirings: max_plus, min_plus, max_times): the same sums as
// "scatter" (G[i,j] goes to the forward's argmax k, times the partner operand for max_times), gathered per gradient
// line in shared-memory bins instead of sent with atomics to a zeroed workspace. No workspace, no zeroing, no store
// pass, no atomics; each bin's sum is taken in an order fixed by the data alone, so the gradients are deterministic.
//
// grad_a[i,k] = Σ_j [argmax[i,j] = k]·w: a warp takes a gradient row i, its lanes 32 consecutive j of G's row i at a
// time (coalesced). Lanes that hit the same k are summed in registers first (sum_over_peers), and one of them adds to
// the bin, so no two lanes write one bin at once.
// grad_b[k,j] = Σ_i [argmax[i,j] = k]·w: a warp takes 8 columns j and walks the rows i, four at a time (a quarter
// warp a row, 32 bytes of each row of argmax); the quarters add to the bins in turn, in ascending i.
//
// Bins: each warp has K_c of them per line (1 line for grad_a, 8 for grad_b), K_c = the dynamic shared memory the
// host gave the block / (warps · lines · sizeof(accumulator)). When K_c < K the warp takes K in chunks of K_c (grid
// y), reading its lines again for each chunk. A broadcast gradient (its operand's batch stride is 0:
// GradParams.workspace_slices = 1) sums every batch's lines into the same bins. Every gradient element is written
// (zero where no output chose it), so the gradient needs no zeroing either.
#pragma once

#include "core/params.cuh"
#include "core/dtypes.cuh"
#include "core/numbers.cuh"

namespace jb {

__device__ __forceinline__ unsigned dynamic_shared_bytes() {
  unsigned bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
  return bytes;
}

// x summed over the lanes of `peers` (this lane's __match_any_sync group; the whole warp calls it), the sum landing
// in the group's lowest lane (the other lanes end with partial sums). A tree over the lanes' ranks in the group:
// each round, a lane of even rank adds the partial sum of the next lane still in the group above it, and the lanes
// of odd rank leave. The order of the additions depends only on the group.
template <class T> __device__ __forceinline__ T sum_over_peers(unsigned peers, T x) {
  const unsigned lane = threadIdx.x % 32;
  unsigned above = peers & (0xfffffffeu << lane); // the group's lanes above this one
  unsigned rank = __popc(peers & ((1u << lane) - 1u));
  while (__any_sync(0xffffffffu, above != 0u)) {
    const T next = __shfl_sync(0xffffffffu, x, above ? __ffs(above) - 1 : lane);
    const bool stays = (rank & 1u) == 0u;
    const unsigned staying = __ballot_sync(0xffffffffu, stays); // every lane votes: not inside the condition below
    if (stays && above) x += next;
    above = stays ? above & staying : 0u;
    rank /= 2;
  }
  return x;
}

// The k chunk a warp's bins hold, from the dynamic shared memory of the launch.
template <class T> __device__ __forceinline__ long long grad_bins_per_line(int lines) {
  return dynamic_shared_bytes() / ((blockDim.x / 32) * lines * sizeof(T));
}

// One G term routed to its bin: its weight (G, times the partner for max_times) and its bin (k − k0), or bin −1
// when the term adds nothing to this chunk (no argmax term, k outside the chunk, G = 0).
template <class T> struct GradTerm {
  T w;
  int bin;
};

// G[bt,i,j] and its argmax k, as loaded; k = −1 outside the outputs.
template <class T> struct GradSource {
  int k;
  T g;
};
template <class Out, class I, class T>
__device__ __forceinline__ GradSource<T> grad_source(const GradParams& p, I bt, I i, I j) {
  if (i >= (I)p.M || j >= (I)p.N) return {-1, T(0)};
  const Out* G = static_cast<const Out*>(p.grad_out);
  return {p.argmax[(bt * (I)p.M + i) * (I)p.N + j],
          to_acc(G[bt * (I)p.out_batch + i * (I)p.out_row + j * (I)p.out_col])};
}

template <class In, class I, bool GA, bool kTimes, class T>
__device__ __forceinline__ GradTerm<T> grad_term(const GradParams& p, I bt, I i, I j, GradSource<T> src, I k0, I kn) {
  GradTerm<T> t = {src.g, -1};
  const I k = src.k;
  if (k < k0 || k >= k0 + kn || src.g == T(0)) return t;
  if (kTimes)
    t.w *= GA ? to_acc(static_cast<const In*>(p.b)[bt * (I)p.b_batch + k * (I)p.b_row + j * (I)p.b_col])
              : to_acc(static_cast<const In*>(p.a)[bt * (I)p.a_batch + i * (I)p.a_row + k * (I)p.a_col]);
  t.bin = (int)(k - k0);
  return t;
}

// The batches whose lines go into slice s's bins: s alone, or all of them for a broadcast gradient.
template <class I> struct GradBatches { I first, end; };
template <class I> __device__ __forceinline__ GradBatches<I> grad_batches(const GradParams& p, I s) {
  return p.workspace_slices == 1 ? GradBatches<I>{0, (I)p.B} : GradBatches<I>{s, s + 1};
}

// Where a lane's source of a walk's step lies: G[bt, i, j].
template <class I> struct GradAt { I i, j; };

// One line's sources for one chunk of k, in steps of the warp's 32 sources (at(step): this lane's), kUnroll steps at a
// time, the next group's loads issued before the current group is binned (bin(term): the whole warp calls it).
template <int kUnroll, class In, class Out, class I, bool GA, bool kTimes, class At, class Bin>
__device__ __forceinline__ void grad_walk(const GradParams& p, I bt, I steps, I k0, I kn, At at, Bin bin) {
  typedef typename Acc<In>::type T;
  GradSource<T> next[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) next[u] = grad_source<Out, I, T>(p, bt, at(u).i, at(u).j);
  for (I step = 0; step < steps; step += kUnroll) {
    GradSource<T> src[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) src[u] = next[u];
    if (step + kUnroll < steps)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        next[u] = grad_source<Out, I, T>(p, bt, at(step + kUnroll + u).i, at(step + kUnroll + u).j);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      bin(grad_term<In, I, GA, kTimes>(p, bt, at(step + u).i, at(step + u).j, src[u], k0, kn));
  }
}

// grad_a: a warp a gradient row (slice s, row i), a step 32 consecutive j; bins[k − k0].
template <class In, class Out, class I, bool kTimes>
__device__ __forceinline__ void grad_rows_kernel(const GradParams p) {
  typedef typename Acc<In>::type T;
  extern __shared__ __align__(16) unsigned char grad_bins_smem[];
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const I kc = (I)grad_bins_per_line<T>(1);
  T* bins = reinterpret_cast<T*>(grad_bins_smem) + warp * kc;
  const I M = (I)p.M, N = (I)p.N, K = (I)p.K, rows = (I)p.workspace_slices * M;
  for (I k0 = (I)blockIdx.y * kc; k0 < K; k0 += (I)gridDim.y * kc) {
    const I kn = min(kc, K - k0);
    for (I r = (I)blockIdx.x * warps + warp; r < rows; r += (I)gridDim.x * warps) {
      const I s = r / M, i = r % M;
      for (I k = lane; k < kn; k += 32) bins[k] = T(0);
      __syncwarp();
      const GradBatches<I> batches = grad_batches(p, s);
      for (I bt = batches.first; bt < batches.end; ++bt)
        grad_walk<4, In, Out, I, true, kTimes>(
            p, bt, (N + 31) / 32, k0, kn,
            [&](I step) {
              return GradAt<I>{i, step * 32 + lane};
            },
            [&](const GradTerm<T>& t) {
              const unsigned peers = __match_any_sync(0xffffffffu, t.bin);
              const T w = sum_over_peers(peers, t.w);
              if (t.bin >= 0 && lane == __ffs(peers) - 1) bins[t.bin] += w;
              __syncwarp();
            });
      In* grad = static_cast<In*>(p.grad) + s * (I)p.a_batch + i * (I)p.a_row;
      for (I k = lane; k < kn; k += 32) grad[(k0 + k) * (I)p.a_col] = from_acc<In>(bins[k]);
      __syncwarp();
    }
  }
}

// grad_b: a warp 8 columns of a slice, a step 4 rows (lane: column lane % 8, row lane / 8); bins[k − k0][column]. A
// warp's bins are large, so few warps fit an SM: 8 steps' loads at a time.
template <class In, class Out, class I, bool kTimes>
__device__ __forceinline__ void grad_cols_kernel(const GradParams p) {
  typedef typename Acc<In>::type T;
  extern __shared__ __align__(16) unsigned char grad_bins_smem[];
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int quarter = lane / 8, col = lane % 8;
  const I kc = (I)grad_bins_per_line<T>(8);
  T* bins = reinterpret_cast<T*>(grad_bins_smem) + warp * kc * 8;
  const I M = (I)p.M, N = (I)p.N, K = (I)p.K, groups = (N + 7) / 8, lines = (I)p.workspace_slices * groups;
  for (I k0 = (I)blockIdx.y * kc; k0 < K; k0 += (I)gridDim.y * kc) {
    const I kn = min(kc, K - k0);
    for (I l = (I)blockIdx.x * warps + warp; l < lines; l += (I)gridDim.x * warps) {
      const I s = l / groups, j0 = l % groups * 8, j = j0 + col;
      for (I e = lane; e < kn * 8; e += 32) bins[e] = T(0);
      __syncwarp();
      const GradBatches<I> batches = grad_batches(p, s);
      for (I bt = batches.first; bt < batches.end; ++bt)
        grad_walk<8, In, Out, I, false, kTimes>(
            p, bt, (M + 3) / 4, k0, kn,
            [&](I step) {
              return GradAt<I>{step * 4 + quarter, j};
            },
            [&](const GradTerm<T>& t) {
#pragma unroll
              for (int turn = 0; turn < 4; ++turn) { // the rows in turn, ascending; a turn's lanes differ in column
                if (quarter == turn && t.bin >= 0) bins[t.bin * 8 + col] += t.w;
                __syncwarp();
              }
            });
      In* grad = static_cast<In*>(p.grad) + s * (I)p.b_batch;
      for (I e = lane; e < kn * 8; e += 32) {
        const I jj = j0 + e % 8;
        if (jj < N) grad[(k0 + e / 8) * (I)p.b_row + jj * (I)p.b_col] = from_acc<In>(bins[e]);
      }
      __syncwarp();
    }
  }
}

} // namespace jb
