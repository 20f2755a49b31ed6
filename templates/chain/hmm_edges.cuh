// The HMM form's transitions' gradient (the sequential kernels' "_edges"): a sum over steps, as partial sums over
// ranges of steps, one block per range and tile of rows, which "_reduce" (templates/chain/hmm_backward.cuh) adds.
//
// A step's share of entry (c, p) is grad_score · 2^(x_p + y_c + a_cp) in log2 units: x_p = (alpha_t[p] + k)·log2 e,
// y_c = beta_{t+1}[c]·log2 e (the backward messages carry emissions[t + 1][c]), a_cp = transitions[c][p]·log2 e and
// k the messages' offsets less the score. Formed term by term, that is an exponential a term. But a_cp is the same
// at every step, so a block sums the factors instead: S[c][p] = Σ_steps X_p·Y_c, X_p = 2^(x_p − max_p x) and Y_c =
// ±2^(max_p x + y_c + log2 |grad_score| − M_c), a multiply-add a term, and the entry is 2^(a_cp + M_c)·S[c][p] at the
// end. M_c, row c's scale, is the largest exponent of its factors so far: a batch of steps that raises it first
// scales the row's sums down (as an online softmax does), so no factor exceeds 1 and no sum overflows.
//
// What that may lose: a factor below 2^-126 (f32; 2^-1022 f64) flushes to 0. A term it held is below 2^(a_cp + M_c
// − 126). The step that set M_c gave row c a term of 2^(M_c + a_cp*) at the source p* of its largest x, so where
// a_cp* is finite the row's largest term is at least 2^(min a + M_c) and a lost term is below 2^(max a − min a −
// 126) of it. A block therefore sums factors only where each of its rows' transitions is finite, or −inf throughout
// (a row that adds nothing), none is NaN or +inf, and the finite ones span at most EdgeSpan (64 in f32: a lost term
// is below 2^-62 of its row's largest term, far below the rounding of a sum). A row of both finite and −inf
// transitions (a banded or left-to-right table) could lose every term it takes: its sources may all lie far below
// p*, which it cannot move from. Otherwise the block forms each term. From a step whose exponents are NaN or +inf (a
// NaN or infinite grad_score, a +inf message: its terms are themselves NaN or infinite), a block turns its sums so
// far into entries and forms each term from there.
#pragma once

#include "chain/edge_params.cuh"
#include "chain/edge_tiles.cuh"
#include "chain/edge_vectors.cuh"
#include "chain/hmm_backward.cuh"
#include "chain/params.cuh"
#include "chain/reductions.cuh"
#include "core/async_copy.cuh"
#include "core/dtypes.cuh"
#include "core/numbers.cuh"

namespace jb {

// The widest span of a block's finite transitions, in log2 units, over which it sums factors (above).
template <class T> struct EdgeSpan {
  enum : int { value = sizeof(T) == 8 ? 900 : 64 };
};

// A batch's scalars as loaded, a step each: its sequence's length as read (with lengths), grad_score and score, and
// its offsets (the forward messages' at the step's position, the backward's at the next).
template <class T, int N> struct EdgeLoaded {
  long long length[N];
  double z[N], offset[N], beta_offset[N];
  T g[N];
};

// A step as staged: its mode (HmmSequence's, 0 past the length), whether its exponents leave the factors' range
// (log: `odd`), and its move's states (max_plus).
struct EdgeStep {
  int mode, odd, to, from;
};

// Entry v of row scale m and transition a (log2 units) of the factors' sums, as a term-by-term sum's value: its
// exponent rounded as a term's own is (a + m of the size of a term's exponent), and in f32 the exp unit's log2
// (absolute error below 2^-22; a sum below 2^-126 of its row's scale, flushed, is one of the lost terms above).
__device__ __forceinline__ float edge_log2(float x) { return lg2_approx(x); }
__device__ __forceinline__ double edge_log2(double x) { return ::log2(x); }
template <class T> __device__ __forceinline__ T edge_entry(T v, T a, T m) {
  const T e = Num<T>::exp2(a + m + edge_log2(v < T(0) ? -v : v));
  return v > T(0) ? e : v < T(0) ? (e > T(0) ? -e : T(0)) : v; // 0 stays +0; NaN stays NaN
}

// Block (x, y) = (group · chunks + chunk, tile) sums the steps [chunk · p.chunk, (chunk + 1) · p.chunk) of its group
// into rows [y · ROWS, (y + 1) · ROWS) of the table, its entries held in registers (the kind's tile). EB steps are
// staged in shared memory at a time. With one chunk the sums are the gradient; otherwise partial sums for hmm_reduce.
//
// A step's largest x is its offsets' part alone, k·log2 e: the saving forward keeps each position's messages
// relative to their largest (ChainOutputs::position), so a step's largest relative message is 0 wherever its score
// is finite (mode 1). Any x above that (a NaN or infinite message) takes the step term by term, as an odd one.
template <class S, bool LOG, int C, int NT, int ROWS, int KIND = kEdgeNarrow>
__device__ __forceinline__ void hmm_edges(const ChainParams& p) {
  using T = typename Acc<S>::type;
  static_assert(KIND != kEdgeMma || LOG, "the mma kind sums factors: log alone");
  using Tile = typename EdgeTileOf<KIND, C, NT, ROWS, T, LOG>::type;
  // The staged rows' lengths and the steps staged at a time (edge_shape); the padding holds 0.
  constexpr int NQ = Tile::NQ, NR = Tile::NR, CQ = Tile::shape.CQ, RR = Tile::shape.RR, RP = Tile::shape.RP;
  constexpr int EB = Tile::shape.EB;
  // The rows' scales and factors: RG lanes a row (a power of two, at most 16), each a share of the batch's steps.
  constexpr int RG = edge_pow2_at_most(NT / ROWS);
  // A step's messages are staged, and their factors formed, VS at a time: a vector's length that divides both C and
  // ROWS, so that every vector of a step's messages, the forward's and its tile's share of the backward's, starts
  // aligned to its size (the saved messages start so: chain_plan's kSavedAlignment).
  constexpr int VS = edge_width<T>(C) < edge_width<T>(ROWS) ? edge_width<T>(C) : edge_width<T>(ROWS);
  constexpr int XV = C / VS, YV = ROWS / VS; // a step's vectors of each
  static_assert(NT % 32 == 0 && ROWS <= NT, "whole warps; a row's lanes");
  static_assert(CQ % VS == 0 && RR % VS == 0 && CQ % NQ == 0 && RR % NR == 0, "rows of whole vectors");
  // Staged as loaded: x and y (the forward's and the backward's relative messages).
  __shared__ __align__(16) T xs[LOG ? EB : 1][LOG ? CQ : 1], ys[LOG ? EB : 1][LOG ? RP : 1];
  __shared__ __align__(16) T xf[LOG ? EB : 1][LOG ? CQ : 1], yf[LOG ? EB : 1][LOG ? RP : 1]; // their factors X and Y
  // A step's scalars: k·log2 e, grad_score, k, and w = k·log2 e + log2 |grad_score| where the step is summed (mode
  // 1), NaN where it adds nothing (a NaN w of a summed step makes it odd, which leaves the factors' sums anyway).
  __shared__ T sx[EB], g_s[EB], w_s[EB], k_s[EB];
  __shared__ EdgeStep step_s[EB];
  __shared__ long long seq_s[2][EB], row_s[2][EB]; // a batch's steps' sequences and rows b·T + t, two batches apart
  __shared__ EdgeLoaded<T, LOG ? EB : 1> raw_s;      // log: a batch's scalars as copied
  __shared__ T row_scale[RR], row_next[RR], row_rescale[RR];
  __shared__ int row_kinds[RR]; // a row's transitions: 1 some finite, 2 some −inf
  __shared__ T warp_lo[NT / 32], warp_hi[NT / 32];
  __shared__ int warp_bad[NT / 32];
  const Tile tile(threadIdx.x);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, c0 = blockIdx.y * ROWS;
  const long long group = blockIdx.x / p.chunks, chunk = blockIdx.x % p.chunks;
  const long long steps = p.batched_transitions ? p.T - 1 : p.B * (p.T - 1);
  const long long i0 = chunk * p.chunk, i1 = i0 + p.chunk < steps ? i0 + p.chunk : steps;
  auto row_in = [&](int jr) { return tile.r(jr) < ROWS && c0 + tile.r(jr) < C; };
  // The sequences and rows of the batch from step i, into slot `slot`.
  auto rows_of = [&](long long i, int slot) {
    if (tid < EB && i + tid < i1) {
      const long long b = p.batched_transitions ? group : (i + tid) / (p.T - 1),
                      t = p.batched_transitions ? i + tid : (i + tid) % (p.T - 1);
      seq_s[slot][tid] = b;
      row_s[slot][tid] = b * p.T + t;
    }
  };
  rows_of(i0, 0);

  T a[NR][NQ], acc[NR][NQ]; // a: log's transitions in log2 units
  bool factored = false;
  if constexpr (LOG) {
    for (int x = tid; x < RR; x += NT) row_scale[x] = Num<T>::neg_inf(), row_rescale[x] = T(1), row_kinds[x] = 0;
    if constexpr (CQ > C)
      for (int x = tid; x < EB * (CQ - C); x += NT)
        xs[x / (CQ - C)][C + x % (CQ - C)] = xf[x / (CQ - C)][C + x % (CQ - C)] = T(0);
    if constexpr (RR > ROWS)
      for (int x = tid; x < EB * (RR - ROWS); x += NT)
        ys[x / (RR - ROWS)][ROWS + x % (RR - ROWS)] = yf[x / (RR - ROWS)][ROWS + x % (RR - ROWS)] = T(0);
    __syncthreads();
    const S* trans = static_cast<const S*>(p.potentials) + (p.batched_transitions ? group * p.s_b : 0);
    T lo = Num<T>::inf(), hi = Num<T>::neg_inf();
    int bad = 0;
#pragma unroll
    for (int jr = 0; jr < NR; ++jr)
#pragma unroll
      for (int jq = 0; jq < NQ; ++jq) {
        const bool in = i0 < i1 && row_in(jr) && tile.q(jq) < C;
        const T v =
            in ? to_acc(trans[(long long)(c0 + tile.r(jr)) * p.s_c + (long long)tile.q(jq) * p.s_p]) * Num<T>::log2e()
               : Num<T>::neg_inf();
        a[jr][jq] = v;
        if (v != v || v == Num<T>::inf()) {
          bad = 1;
        } else if (in) {
          atomicOr(&row_kinds[tile.r(jr)], v > Num<T>::neg_inf() ? 1 : 2);
          if (v > Num<T>::neg_inf()) lo = lo < v ? lo : v, hi = hi > v ? hi : v;
        }
      }
    lo = group_reduce<32>(lo, [](T x, T y) { return x < y ? x : y; });
    hi = group_reduce<32>(hi, [](T x, T y) { return x > y ? x : y; });
    bad = __any_sync(0xffffffffu, bad);
    if (lane == 0) warp_lo[warp] = lo, warp_hi[warp] = hi, warp_bad[warp] = bad;
    __syncthreads();
    for (int w = 0; w < NT / 32; ++w)
      lo = lo < warp_lo[w] ? lo : warp_lo[w], hi = hi > warp_hi[w] ? hi : warp_hi[w], bad |= warp_bad[w];
    int mixed = 0; // a row of both finite and −inf transitions
#pragma unroll
    for (int jr = 0; jr < NR; ++jr) mixed |= row_in(jr) && row_kinds[tile.r(jr)] == 3;
    factored = !__syncthreads_or(mixed) && !bad && (hi < lo || hi - lo <= T(EdgeSpan<T>::value));
  } else {
    __syncthreads();
  }
#pragma unroll
  for (int jr = 0; jr < NR; ++jr)
#pragma unroll
    for (int jq = 0; jq < NQ; ++jq) acc[jr][jq] = T(0);
  // The sums so far as a term-by-term sum's entries (factored: from here on term by term).
  auto to_entries = [&] {
#pragma unroll
    for (int jr = 0; jr < NR; ++jr)
#pragma unroll
      for (int jq = 0; jq < NQ; ++jq) acc[jr][jq] = edge_entry(acc[jr][jq], a[jr][jq], row_scale[tile.r(jr)]);
  };

  // Log: batch i's values (slot's rows) into shared memory as loaded, by copies that hold no registers (cp.async;
  // without it loads, kEdgeLoads a thread in flight, and stores): a thread a step's scalars (raw_s), and a step's C
  // forward messages as XV vectors, then its tile's ROWS backward ones as YV (rows past C read row C − VS's, which
  // the factors take as −inf). Where the factors are summed, the next batch's copies are issued before the sums,
  // which read the factors alone, so that its loads fly meanwhile (measured as fast or faster, the more so for the
  // wide blocks, fewer an SM).
#if JB_HAS_ASYNC_COPY
  constexpr bool kCopies = true;
#else
  constexpr bool kCopies = false;
#endif
  auto stage = [&](long long i, int slot) {
    if constexpr (LOG) {
      const int n = i1 - i < EB ? int(i1 - i) : EB;
      if (tid < n) {
        const long long b = seq_s[slot][tid], at = row_s[slot][tid];
        if (p.lengths) copy_async<8>(&raw_s.length[tid], p.lengths + b);
        copy_async<int(sizeof(T))>(&raw_s.g[tid], static_cast<const T*>(p.grad_score) + b);
        copy_async<8>(&raw_s.z[tid], p.logz + b);
        copy_async<8>(&raw_s.offset[tid], p.offset + at);
        copy_async<8>(&raw_s.beta_offset[tid], p.beta_offset + at + 1);
      }
      const T* rel = static_cast<const T*>(p.rel);
      const T* beta = static_cast<const T*>(p.beta_rel);
      const long long* rows = row_s[slot];
      auto from = [&](int x) {
        if (x < n * XV) return rel + rows[x / XV] * C + x % XV * VS;
        const int u = (x - n * XV) / YV, r = c0 + (x - n * XV) % YV * VS;
        return beta + (rows[u] + 1) * C + (r < C ? r : C - VS);
      };
      auto to = [&](int x) {
        if (x < n * XV) return &xs[x / XV][x % XV * VS];
        return &ys[(x - n * XV) / YV][(x - n * XV) % YV * VS];
      };
      if constexpr (kCopies) {
        for (int x = tid; x < n * (XV + YV); x += NT) copy_async<VS * int(sizeof(T))>(to(x), from(x));
        copy_commit();
      } else {
        edge_stage<NT>(
            n * (XV + YV), [&](int x) { return edge_load<T, VS>(from(x)); },
            [&](int x, EdgeVec<T, VS> v) { edge_store<T, VS>(to(x), v); });
      }
    }
  };

  int slot = 0;
  bool ahead = false; // log: this batch's copies were issued during the batch before
  for (long long i = i0; i < i1; i += EB, slot ^= 1) {
    const int n = i1 - i < EB ? int(i1 - i) : EB;
    // Term by term, the previous batch read what this one stages; factored, it read only the factors.
    if (!factored) __syncthreads();
    // A thread a step's scalars: log's from its copies, once they have landed; max_plus's loaded, with its path.
    if constexpr (LOG) {
      if (!ahead) stage(i, slot);
      copy_wait_all();
      __syncthreads();
      if (tid < n) {
        const long long b = seq_s[slot][tid], at = row_s[slot][tid];
        const HmmSequence<T, LOG> s(p, p.lengths ? raw_s.length[tid] : p.T, raw_s.g[tid], raw_s.z[tid]);
        EdgeStep st{s.mode == 1 && at - b * p.T + 1 >= s.L ? 0 : s.mode, 0, -1, -1};
        const T k = T(raw_s.offset[tid] + raw_s.beta_offset[tid] - s.z), g_abs = s.g < T(0) ? -s.g : s.g;
        k_s[tid] = k;
        sx[tid] = k * Num<T>::log2e();
        w_s[tid] = st.mode == 1 ? k * Num<T>::log2e() + Num<T>::log2(g_abs) : Num<T>::nan();
        st.odd = st.mode == 1 && !(g_abs < Num<T>::inf() && k * Num<T>::log2e() < Num<T>::inf());
        step_s[tid] = st;
        g_s[tid] = s.g;
      }
    } else if (tid < n) {
      const long long b = seq_s[slot][tid], at = row_s[slot][tid];
      const HmmSequence<T, LOG> s(p, b);
      EdgeStep st{s.mode == 1 && at - b * p.T + 1 >= s.L ? 0 : s.mode, 0, -1, -1};
      if (st.mode == 1) {
        st.to = p.path[at + 1];
        st.from = p.path[at];
        if (st.to < 0 || st.from < 0 || st.to >= C || st.from >= C) st.mode = 0;
      }
      step_s[tid] = st;
      g_s[tid] = s.g;
    }
    __syncthreads();
    // The next batch's rows: this batch's were read above.
    rows_of(i + EB, slot ^ 1);
    ahead = false;
    if constexpr (LOG) {
      if (factored) {
        // Each row's scale, raised to the batch's largest exponent where it is larger (its RG lanes a share of the
        // steps each), and its factors Y; a step that adds nothing has Y = 0, as have the steps from n to the tile's
        // padded count. Rows past C are −inf.
        const int nf = Tile::padded(n);
        int odd = 0;
        {
          const int r = tid / RG, j = tid % RG;
          const bool in = r < ROWS;
          const T m = in ? row_scale[r] : T(0);
          auto y_of = [&](int u) { return c0 + r < C ? ys[u][r] * Num<T>::log2e() : Num<T>::neg_inf(); };
          T top = Num<T>::neg_inf();
          for (int u = j; in && u < n; u += RG) {
            const T w = w_s[u];
            if (w == w) {
              const T y = y_of(u);
              odd |= y != y || y == Num<T>::inf();
              top = Num<T>::max(top, w + y);
            }
          }
          top = group_reduce<RG>(top, [](T x, T y) { return Num<T>::max(x, y); });
          const T next = top > m ? top : m;
          if (in && j == 0) row_rescale[r] = top > m ? Num<T>::exp2(m - top) : T(1), row_next[r] = next;
          for (int u = j; in && u < nf; u += RG) {
            const T w = u < n ? w_s[u] : Num<T>::nan(), y = w + y_of(u);
            const T f = w == w && y > Num<T>::neg_inf() ? Num<T>::exp2(y - next) : T(0);
            yf[u][r] = u < n && g_s[u] < T(0) ? -f : f;
          }
        }
        // X, VS at a time: a NaN step (mode 2) has X = NaN, so that every step is a multiply-add of each entry (where
        // the tile's factors cannot be NaN, it leaves the factors' sums).
        for (int x = tid; x < nf * XV; x += NT) {
          const int u = x / XV, q = x % XV * VS, mode = u < n ? step_s[u].mode : 0;
          if constexpr (!Tile::kNanFactors) odd |= mode == 2;
          const T top = sx[u], k = k_s[u];
          const EdgeVec<T, VS> v = edge_load<T, VS>(&xs[u][q]);
          EdgeVec<T, VS> f;
#pragma unroll
          for (int j = 0; j < VS; ++j) {
            const T e = (v.v[j] + k) * Num<T>::log2e();
            odd |= mode == 1 && !(e <= top);
            f.v[j] = mode == 1 && top > Num<T>::neg_inf() ? Num<T>::exp2(e - top) : mode == 2 ? Num<T>::nan() : T(0);
          }
          edge_store<T, VS>(&xf[u][q], f);
        }
        if (tid < n) odd |= step_s[tid].odd;
        if (__syncthreads_or(odd)) {
          to_entries();
          factored = false;
        } else {
          // The values staged are read: the next batch's copies fly while the factors are summed.
          if (i + EB < i1) stage(i + EB, slot ^ 1), ahead = true;
          if (tid % RG == 0 && tid / RG < ROWS) row_scale[tid / RG] = row_next[tid / RG];
#pragma unroll
          for (int jr = 0; jr < NR; ++jr) {
            const T scale = row_rescale[tile.r(jr)];
#pragma unroll
            for (int jq = 0; jq < NQ; ++jq) acc[jr][jq] *= scale;
          }
          tile.sum(acc, &xf[0][0], &yf[0][0], nf);
          continue;
        }
      }
    }
#pragma unroll 1
    for (int u = 0; u < n; ++u) {
      const EdgeStep st = step_s[u];
      if (st.mode == 0) continue;
      const T g = st.mode == 2 ? Num<T>::nan() : g_s[u];
      if constexpr (LOG) {
        const T k = k_s[u];
        T x[NQ], y[NR];
        tile.read_sources(xs[u], x);
        tile.read_rows(ys[u], y);
#pragma unroll
        for (int jq = 0; jq < NQ; ++jq) x[jq] = (x[jq] + k) * Num<T>::log2e();
#pragma unroll
        for (int jr = 0; jr < NR; ++jr) y[jr] *= Num<T>::log2e(); // rows past C are never written
#pragma unroll
        for (int jr = 0; jr < NR; ++jr)
#pragma unroll
          for (int jq = 0; jq < NQ; ++jq) acc[jr][jq] += g * Num<T>::exp2(x[jq] + (a[jr][jq] + y[jr]));
      } else {
#pragma unroll
        for (int jr = 0; jr < NR; ++jr)
#pragma unroll
          for (int jq = 0; jq < NQ; ++jq)
            if (st.mode == 2 || (c0 + tile.r(jr) == st.to && tile.q(jq) == st.from)) acc[jr][jq] += g;
      }
    }
  }
  if (LOG && factored) __syncthreads(); // the rows' last scales are written
  // The partial sums in T, the gradient itself in S.
  const long long at = (p.chunks > 1 ? blockIdx.x : group) * (long long)(C * C) + (long long)c0 * C;
#pragma unroll
  for (int jr = 0; jr < NR; ++jr)
#pragma unroll
    for (int jq = 0; jq < NQ; ++jq) {
      if (!row_in(jr) || tile.q(jq) >= C) continue;
      const int e = tile.r(jr) * C + tile.q(jq);
      T v = acc[jr][jq];
      if (LOG && factored) v = edge_entry(v, a[jr][jq], row_scale[tile.r(jr)]);
      if (p.chunks > 1)
        static_cast<T*>(p.partials)[at + e] = v;
      else
        static_cast<S*>(p.grad)[at + e] = from_acc<S>(v);
    }
}

} // namespace jb
