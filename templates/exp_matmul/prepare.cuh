// exp_matmul's first pass (the overview is in exp_matmul/product.cuh): per row of a and column of b, the max (natural
// units) and where it holds values other than −inf (sweep 1: exp_matmul/line_stats.cuh); the exponentiated operands,
// padded, into the workspace (sweep 2: their stores in exp_matmul/factors.cuh).
#pragma once

#include "core/async_copy.cuh"
#include "exp_matmul/factors.cuh"
#include "exp_matmul/line_stats.cuh"

namespace jb {

// A chunk's factors into the workspace (0 past K and on padding lines): the chunk at k = k0 + s·STEP.
template <class In, int FORM, int STEP, class T, class I>
__device__ __forceinline__ void em_put_factors(const EmLines<In, T>& L, I line, I k0, I s, I K,
                                               bool real, T mx, const EmChunk& c) {
  constexpr int V = 16 / sizeof(In);
  const I k = k0 + s * (I)STEP;
  if (k >= (I)L.Kp) return; // Kp is a multiple of 32, k of V: a chunk is in or out as a whole
  // The factors (em_shifted), the test of the max taken once a chunk; value by value only for a chunk K cuts.
  const bool live = real && fabs(mx) < Num<T>::inf();
  T f[V];
  if (live && k + (I)V <= K) {
#pragma unroll
    for (int u = 0; u < V; ++u)
      f[u] = Num<T>::exp2(em_shifted((T)to_acc(EmBits<In>::at(c, u)), mx, L.headroom));
  } else {
#pragma unroll
    for (int u = 0; u < V; ++u)
      f[u] = live && k + u < K ? Num<T>::exp2(em_shifted((T)to_acc(EmBits<In>::at(c, u)), mx, L.headroom)) : (T)0;
  }
  em_put_chunk<FORM, STEP>(L.factors, L.b_side, line, k0, s, (I)L.Kp, (I)L.Np, f);
}

// Sweep 2 where the loads run along the lines, for 2-byte inputs (16-byte loads; not FORM 0, whose b is stored as it
// lies): a step is 64 k of the block's 32 lines, a thread's load 8 lines at one k. KBATCH steps' loads go to shared
// memory as they are (tile: [k][group of 8 lines], the group's slot swizzled by (k / 2) % 4 so that the 8 rows an
// ldmatrix phase reads hit distinct banks), one barrier, and each warp reads 8 lines × 32 k of a step back transposed
// with one ldmatrix.trans: lane l gets line l / 4 of its group, k = 8i + 2(l % 4) and + 1 in word i. The line's 4
// lanes then swap words (em_quad_transpose) so that lane l holds k = 8(l % 4) ... + 7, a chunk em_put_factors stores
// in one piece. Two buffers, so that one barrier a batch suffices.
template <class T, int KBATCH> struct EmTransposeStage {
  EmChunk tile[2][KBATCH][64][4];
  T line_max[32];
  bool real[32];
};
// Steps a batch: 4 (42 KB of shared memory a block), or 2 (26 KB) where an SM has 100 KB (sm_86, sm_89, sm_120 and
// later), so that the 3 blocks of the launch bounds fit. On an H100 the two run alike.
__device__ constexpr int em_transpose_steps() {
#if __CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 890 || __CUDA_ARCH__ >= 1200
  return 2;
#else
  return 4;
#endif
}
template <int FORM, class In> __device__ constexpr bool em_transposes() {
  return sizeof(In) == 2 && FORM != 0 && em_stores_factors(FORM);
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}
// Four adjacent lanes (q = lane % 4) holding words w[i] = W_q[i] end holding w[j] = W_j[q]: two exchanges of two
// words each, with the lane one and then two apart.
__device__ __forceinline__ void em_quad_transpose(unsigned (&w)[4]) {
  const int q = threadIdx.x % 4;
#pragma unroll
  for (int m = 1; m <= 2; m *= 2) {
    const bool upper = (q & m) != 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (i & m) continue; // the pairs (i, i + m)
      const unsigned got = __shfl_xor_sync(0xffffffffu, upper ? w[i] : w[i + m], m);
      if (upper) w[i] = got;
      else w[i + m] = got;
    }
  }
}
template <int KBATCH, int FORM, class In, class T, class W, class I>
__device__ __forceinline__ void em_transpose_factors(const EmLines<In, T>& L, const W& w, I l0, I out_steps, I K,
                                                     EmTransposeStage<T, KBATCH>& ts) {
  static_assert(W::V == 8 && W::kStep == 64, "em_transpose_factors: 2-byte inputs");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int put_k = threadIdx.x / 4, put_g = threadIdx.x % 4;   // this thread's load: 8 lines at one k
  const int group = warp % 4, half = warp / 4;                   // this warp's 8 lines and 32 k of a step
  const int row_k = half * 32 + (lane / 8) * 8 + lane % 8;       // the tile row this lane names to ldmatrix
  const int my = group * 8 + lane / 4;                           // its line
  const I k_first = (I)(half * 32 + 8 * (lane % 4));             // its chunk's k in step s: s·64 + k_first
  auto swz = [](int k, int g) { return g ^ ((k >> 1) & 3); };
  __syncthreads(); // line_max and real are in
  const T mx = ts.line_max[my];
  const bool real = ts.real[my];
  for (I s = 0, b = 0; s < out_steps; s += KBATCH, b ^= 1) {
    EmChunk c[KBATCH];
#pragma unroll
    for (int q = 0; q < KBATCH; ++q) c[q] = w.fetch(s + q); // zero past K
#pragma unroll
    for (int q = 0; q < KBATCH; ++q) ts.tile[b][q][put_k][swz(put_k, put_g)] = c[q];
    __syncthreads(); // the batch is in; the other buffer's reads (the batch before) are done
#pragma unroll
    for (int q = 0; q < KBATCH; ++q) {
      if (s + q >= out_steps) break;
      EmChunk x;
      ldmatrix_x4_trans(x.w, &ts.tile[b][q][row_k][swz(row_k, group)]);
      em_quad_transpose(x.w);
      em_put_factors<In, FORM, W::kStep>(L, l0 + (I)my, k_first, s + q, K, real, mx, x);
    }
  }
}

// Pass 1 for one operand's lines (EmLines, given field by field), blocks [blk, …) of `blocks`: per real line its max
// and EmLine, then its factors 2^((x − max)·log2 e + h) (0 past K, on padding lines, and for a line whose max is not
// finite). Not inlined, and given scalars: ptxas spills when it allocates the four ways of reading in one function
// (none alone needs more than 96 registers), and a struct argument would pass through the stack (local memory).
template <class In, class I, class T, int FORM, bool STAGED, bool VECTOR>
__device__ __noinline__ void em_prepare_lines(const In* x, long long batch_stride, long long line_stride,
                                              long long k_stride, long long count, long long padded,
                                              long long batches, T* max, EmLine* info, T* factors, bool b_side,
                                              long long Kp, long long Np, int headroom, I K, int chunk_shift,
                                              long long blk, long long blocks) {
  const EmLines<In, T> L = {x,   batch_stride, line_stride, k_stride, count, padded, batches, max, info, factors,
                            b_side, Kp,         Np,          headroom};
  __shared__ EmStage<In> stage; // STAGED only
  __shared__ EmFoldPart<T, em_folds_lines<In>()> part; // STAGED and VECTOR only
  typedef EmLineWalk<In, I, STAGED, VECTOR> W;
  // Every line is read twice, the second time mostly from L2: sweep 1 its max and EmLine, sweep 2 its factors, each
  // with kBatch steps' loads in flight a thread: 4 with 16-byte loads, 2 with one value a load (V registers a
  // chunk). Keeping a line in registers between the sweeps (up to 512 k) needed 128 registers, 2 blocks an SM; read
  // twice, a thread takes at most 80 and the SM 3 blocks (the launch bounds: exp_matmul.cpp): more warps hide the
  // pass's memory latency better than a line kept in registers saves.
  constexpr int kBatch = VECTOR ? 4 : 2;
  W w(L, K);
  const I steps = w.steps(), out_steps = ((I)L.Kp + W::kStep - 1) / W::kStep, lines = (I)(L.batches * L.padded);
  for (I l0 = (I)blk * 32; l0 < lines; l0 += (I)blocks * 32) {
    w.lines(l0);
    const I k_first = w.sub * W::V; // this thread's k in step s: s·kStep + k_first
    EmLineStats<In, T> st;
    // Sweep 1 (stats) or 2 (factors) over steps [from, to).
    auto stream = [&](bool factors, I from, I to) {
      for (I s = from; s < to; s += kBatch) {
        EmChunk c[kBatch];
        w.fetch_batch(s, c);
#pragma unroll
        for (int q = 0; q < kBatch; ++q)
          if (s + q < to) {
            if (s + q < steps) c[q] = w.land(stage, c[q]);
            if (factors) {
              if constexpr (em_stores_factors(FORM))
                em_put_factors<In, FORM, W::kStep>(L, w.line, k_first, s + q, K, w.real, st.mx, c[q]);
            } else if (w.real)
              st.add(c[q], (s + q) * W::kStep + k_first, K, chunk_shift);
          }
      }
    };
    auto finish_stats = [&] {
#pragma unroll
      for (int o = 1; o < 8; o *= 2) { // the line's 8 threads are adjacent lanes
        st.mx = Num<T>::max(st.mx, __shfl_xor_sync(0xffffffffu, st.mx, o));
        st.acc.merge_xor(o);
      }
      if (w.real && w.sub == 0) {
        const I at = w.line / (I)L.padded * (I)L.count + w.line % (I)L.padded;
        L.max[at] = st.mx, L.info[at] = st.acc.line();
      }
    };
    if constexpr (STAGED && VECTOR) { // sweep 1 by folding where it can (em_fold_stats), staged where not
      if (!em_fold_stats<kBatch>(w, steps, K, chunk_shift, part, st)) {
        st = EmLineStats<In, T>();
        stream(false, 0, steps);
      }
    } else {
      stream(false, 0, steps);
    }
    finish_stats();
    if constexpr (STAGED && VECTOR && em_transposes<FORM, In>()) { // sweep 2 through ldmatrix.trans
      constexpr int kSteps = em_transpose_steps();
      __shared__ EmTransposeStage<T, kSteps> ts;
      if (w.sub == 0) ts.line_max[w.row] = st.mx, ts.real[w.row] = w.real;
      em_transpose_factors<kSteps, FORM>(L, w, l0, out_steps, K, ts);
    } else if (em_stores_factors(FORM)) {
      stream(true, 0, out_steps); // FORM 7: the product makes its own
    }
  } // the next lines' sweep 1 has barriers (em_fold_stats, land()) before anything rewrites shared memory
}

// em_prepare_lines for the way these lines are read (em_walk_mode).
template <class In, class I, class T, int FORM>
__device__ __forceinline__ void em_prepare_operand(const EmLines<In, T>& L, I K, int chunk_shift, long long blk,
                                                   long long blocks) {
  bool staged, vector;
  em_walk_mode(L, K, staged, vector);
#define JB_EM_LINES(S, V)                                                                                             \
  em_prepare_lines<In, I, T, FORM, S, V>(L.x, L.batch_stride, L.line_stride, L.k_stride, L.count, L.padded, L.batches, \
                                         L.max, L.info, L.factors, L.b_side, L.Kp, L.Np, L.headroom, K, chunk_shift,   \
                                         blk, blocks)
  if (staged && vector) JB_EM_LINES(true, true);
  else if (staged) JB_EM_LINES(true, false);
  else if (vector) JB_EM_LINES(false, true);
  else JB_EM_LINES(false, false);
#undef JB_EM_LINES
}

// Pass 1: the repair flags cleared; blocks [0, row_blocks) walk the rows of a, the blocks after them the columns of
// b (em_stats_grid).
template <class In, class I, class T, int FORM> __device__ __forceinline__ void em_prepare_kernel(const BmmParams p) {
  const EmView<T> v = em_view<T, FORM>(p);
  const EmStatsGrid g = em_stats_grid(p.M, p.N, v.a_batches, v.b_batches);
  const I K = (I)p.K;
  const int chunk = max(0, em_log2_ceil(p.K) - 6); // chunks of 2^chunk k, at most 64 of them
  {
    const I total = (I)v.tiles_m * (I)v.tiles_n * (I)p.B;
    for (I f = (I)blockIdx.x * blockDim.x + threadIdx.x; f < total; f += (I)gridDim.x * blockDim.x) v.flags[f] = 0u;
    if (blockIdx.x == 0 && threadIdx.x == 0) *v.repaired = 0ull;
  }
  if ((long long)blockIdx.x < g.row_blocks) {
    const EmLines<In, T> a = {static_cast<const In*>(p.a), p.a_batch, p.a_row, p.a_col, p.M, v.Mp, v.a_batches,
                              v.row_max, v.row_line, v.ea, false, v.Kp, v.Np, v.headroom};
    em_prepare_operand<In, I, T, FORM>(a, K, chunk, blockIdx.x, g.row_blocks);
  } else {
    const EmLines<In, T> b = {static_cast<const In*>(p.b), p.b_batch, p.b_col, p.b_row, p.N, v.Np, v.b_batches,
                              v.col_max, v.col_line, v.eb, true, v.Kp, v.Np, v.headroom};
    em_prepare_operand<In, I, T, FORM>(b, K, chunk, blockIdx.x - g.row_blocks, g.col_blocks);
  }
}

} // namespace jb
