// exp_matmul's first pass, sweep 1 (exp_matmul/prepare.cuh): how a block reads an operand's lines in 16-byte chunks,
// and what it folds from them, per line its max and where it holds values other than −inf (EmLine).
#pragma once

#include "exp_matmul/factors.cuh"

namespace jb {

// A line's EmLine as one lane sees it, and the merge of two lanes' views.
struct EmLineAcc {
  unsigned long long chunks = 0ull;
  int first = 0x7fffffff, last = -1;
  // The values at k + u for the bits u of `held` (a mask of V ≤ 32 bits, k a multiple of V).
  template <int V, class I> __device__ __forceinline__ void add(I k, unsigned held, int chunk_shift) {
    if (held == 0u) return;
    if (chunk_shift >= em_log2_ceil(V)) // one K chunk holds them all
      chunks |= 1ull << (int)(k >> chunk_shift);
    else
#pragma unroll
      for (int u = 0; u < V; ++u)
        if (held >> u & 1u) chunks |= 1ull << (int)((k + u) >> chunk_shift);
    first = min(first, saturate(k + (I)(__ffs(held) - 1)));
    last = max(last, saturate(k + (I)(31 - __clz(held))));
  }
  // Every value at [k, k + V): the chunks from k's to k + V − 1's.
  template <int V, class I> __device__ __forceinline__ void add_all(I k, int chunk_shift) {
    const int from = (int)(k >> chunk_shift), to = (int)((k + (I)(V - 1)) >> chunk_shift);
    chunks |= (~0ull >> (63 - to)) & (~0ull << from);
    first = min(first, saturate(k));
    last = max(last, saturate(k + (I)(V - 1)));
  }
  // The value at k (one line's, held).
  template <class I> __device__ __forceinline__ void add_one(I k, int chunk_shift) {
    chunks |= 1ull << (int)(k >> chunk_shift);
    first = min(first, saturate(k));
    last = max(last, saturate(k));
  }
  // Every value at [0, K).
  template <class I> __device__ __forceinline__ void add_line(I K, int chunk_shift) {
    if (K <= (I)0) return;
    chunks = ~0ull >> (63 - (int)((K - (I)1) >> chunk_shift));
    first = 0;
    last = saturate(K - (I)1);
  }
  template <class I> static __device__ __forceinline__ int saturate(I k) {
    return k < (I)0x7fffffff ? (int)k : 0x7fffffff;
  }
  __device__ __forceinline__ void merge(const EmLine& o) {
    chunks |= o.chunks, first = min(first, o.first), last = max(last, o.last);
  }
  __device__ __forceinline__ void merge_xor(int lane_mask) {
    EmLine o;
    o.chunks = __shfl_xor_sync(0xffffffffu, chunks, lane_mask);
    o.first = __shfl_xor_sync(0xffffffffu, first, lane_mask);
    o.last = __shfl_xor_sync(0xffffffffu, last, lane_mask);
    merge(o);
  }
  __device__ __forceinline__ EmLine line() const {
    EmLine l;
    l.chunks = chunks, l.first = first, l.last = last;
    return l;
  }
};

// The least of l and x passing over NaN: −inf exactly when either is, whatever NaN the other holds.
template <class T> __device__ __forceinline__ T em_least(T l, T x) { return x < l ? x : l == l ? l : x; }

// A whole chunk at once (every value inside K): its max (NaN if it holds one) and whether every value is other
// than −inf. The least value is −inf exactly when one is (a plain min passes over NaN, and all NaN are held).
template <class In, class T> struct EmChunkSummary {
  static __device__ __forceinline__ void of(const EmChunk& c, T& mx, bool& all_held) {
    constexpr int V = 16 / sizeof(In);
    T lo = to_acc(EmBits<In>::at(c, 0));
    mx = lo;
#pragma unroll
    for (int u = 1; u < V; ++u) {
      const T x = to_acc(EmBits<In>::at(c, u));
      mx = Num<T>::max(mx, x);
      lo = em_least(lo, x);
    }
    all_held = lo != Num<T>::neg_inf();
  }
};
#if JB_HAS_HALF_PAIRS
// Half types: the 8 values as 4 packed pairs, 3 pairwise max.NaN and 3 min an answer.
template <class H> struct EmHalfSummary {
  static __device__ __forceinline__ void of(const EmChunk& c, float& mx, bool& all_held) {
    typedef HalfPairs<H> P;
    const unsigned hi = P::max(P::max(c.w[0], c.w[1]), P::max(c.w[2], c.w[3]));
    const unsigned lo = P::least(P::least(c.w[0], c.w[1]), P::least(c.w[2], c.w[3]));
    H h0, h1;
    h0.bits = (unsigned short)(hi & 0xffffu), h1.bits = (unsigned short)(hi >> 16);
    mx = max_nan(to_acc(h0), to_acc(h1));
    all_held = (lo & 0xffffu) != P::neg_inf_bits() && lo >> 16 != P::neg_inf_bits();
  }
};
template <> struct EmChunkSummary<f16, float> : EmHalfSummary<f16> {};
template <> struct EmChunkSummary<bf16, float> : EmHalfSummary<bf16> {};
#endif

// Value u of a chunk across the chunks added: its max (NaN if any is) and whether every one is other than −inf (the
// least, passing over NaN, is −inf exactly when one is). Sweep 1 where a chunk holds V lines at one k (EmFoldStats).
template <class In, class T> struct EmFold {
  static constexpr int V = 16 / sizeof(In);
  T hi[V], lo[V];
  __device__ __forceinline__ EmFold() {
#pragma unroll
    for (int u = 0; u < V; ++u) hi[u] = Num<T>::neg_inf(), lo[u] = Num<T>::inf();
  }
  __device__ __forceinline__ void add(const EmChunk& c) {
#pragma unroll
    for (int u = 0; u < V; ++u) {
      const T x = (T)to_acc(EmBits<In>::at(c, u));
      hi[u] = Num<T>::max(hi[u], x), lo[u] = em_least(lo[u], x);
    }
  }
  __device__ __forceinline__ void merge_xor(int lane_mask) {
#pragma unroll
    for (int u = 0; u < V; ++u) {
      const T h = __shfl_xor_sync(0xffffffffu, hi[u], lane_mask), l = __shfl_xor_sync(0xffffffffu, lo[u], lane_mask);
      hi[u] = Num<T>::max(hi[u], h), lo[u] = em_least(lo[u], l);
    }
  }
  __device__ __forceinline__ T max(int u) const { return hi[u]; }
  __device__ __forceinline__ bool held(int u) const { return lo[u] != Num<T>::neg_inf(); }
};
#if JB_HAS_HALF_PAIRS
// Half types: the values kept packed, 4 pairwise max.NaN and 4 min a chunk.
template <class H> struct EmHalfFold {
  static constexpr int V = 8;
  typedef HalfPairs<H> P;
  EmChunk hi, lo;
  __device__ __forceinline__ EmHalfFold() {
    const unsigned neg_inf = P::neg_inf_bits() * 0x10001u, inf = (P::neg_inf_bits() & 0x7fffu) * 0x10001u;
#pragma unroll
    for (int w = 0; w < 4; ++w) hi.w[w] = neg_inf, lo.w[w] = inf;
  }
  __device__ __forceinline__ void add(const EmChunk& c) {
#pragma unroll
    for (int w = 0; w < 4; ++w) hi.w[w] = P::max(hi.w[w], c.w[w]), lo.w[w] = P::least(lo.w[w], c.w[w]);
  }
  __device__ __forceinline__ void merge_xor(int lane_mask) {
    EmChunk h, l;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      h.w[w] = __shfl_xor_sync(0xffffffffu, hi.w[w], lane_mask);
      l.w[w] = __shfl_xor_sync(0xffffffffu, lo.w[w], lane_mask);
    }
#pragma unroll
    for (int w = 0; w < 4; ++w) hi.w[w] = P::max(hi.w[w], h.w[w]), lo.w[w] = P::least(lo.w[w], l.w[w]);
  }
  __device__ __forceinline__ float max(int u) const { return to_acc(EmBits<H>::at(hi, u)); }
  __device__ __forceinline__ bool held(int u) const { return EmBits<H>::at(lo, u).bits != P::neg_inf_bits(); }
};
template <> struct EmFold<f16, float> : EmHalfFold<f16> {};
template <> struct EmFold<bf16, float> : EmHalfFold<bf16> {};
#endif

// One operand's lines as pass 1 walks them: rows of a or columns of b, counted across its batches, each padded to
// `padded` a batch. Strides in elements.
template <class In, class T> struct EmLines {
  const In* x;
  long long batch_stride, line_stride, k_stride;
  long long count, padded, batches; // real lines a batch (M or N), padded (Mp or Np), batches (1: broadcast)
  T* max;                           // per real line, [batches][count]
  EmLine* info;                     // likewise
  T* factors;                       // ea or eb
  bool b_side;                      // FORM 0 stores b's factors [Kp][Np]
  long long Kp, Np;                 // the workspace's padded K and columns of b (em_workspace)
  int headroom;                     // h (em_headroom)
};

// Pass 1 reads a line's K in chunks, a block 32 lines at a time: thread t takes line t / 8 and chunks t % 8,
// t % 8 + 8, ... (8V k a step). Where k is contiguous (a row of a as it usually lies) a thread loads its chunks
// itself. Where the lines are (a column of b), the block loads each step's 32 × 8V values along the lines and hands
// the chunks over in shared memory (EmStage: 16-byte slots swizzled so that neither side has bank conflicts); with
// 16-byte loads, sweep 1 needs no hand-over (em_fold_stats), for 2-byte inputs only where no value is −inf.
// 16-byte loads where the layout allows them (aligned, V dividing the strides), else one value a load.
template <class In> struct EmStage {
  EmChunk chunk[32][8];
  static __device__ __forceinline__ int swizzle(int line) { return (line ^ (line >> 3)) & 7; }
  __device__ __forceinline__ void put(int line, int k, In x) {
    constexpr int V = 16 / sizeof(In);
    reinterpret_cast<In*>(&chunk[line][(k / V) ^ swizzle(line)])[k % V] = x;
  }
  __device__ __forceinline__ EmChunk get(int line, int c) const { return chunk[line][c ^ swizzle(line)]; }
};

// How a block reads an operand's lines (EmLineWalk): staged (the lines, not k, are contiguous), and with 16-byte
// loads (the base aligned and V dividing the strides and the count along the loads).
template <class In, class T, class I> __device__ __forceinline__ void em_walk_mode(const EmLines<In, T>& L, I K,
                                                                                   bool& staged, bool& vector) {
  constexpr int V = 16 / sizeof(In);
  staged = L.k_stride != 1 && L.line_stride == 1;
  vector = reinterpret_cast<unsigned long long>(L.x) % 16 == 0 && L.batch_stride % V == 0 &&
           (staged ? L.k_stride % V == 0 && L.count % V == 0 : L.k_stride == 1 && L.line_stride % V == 0 && K % V == 0);
}

template <class In, class I, bool STAGED, bool VECTOR> struct EmLineWalk {
  static constexpr int V = 16 / sizeof(In), kStep = 8 * V;
  const In* x;
  I batch_stride, line_stride, k_stride, count, padded, K;
  int row, sub;       // this thread's line in the block's 32 and its first chunk
  I line;             // its line, counted across the batches
  bool real;          // its line is a real one
  const In* src;      // its line (real lines only)
  const In* step_src; // staged: the lines this thread loads (vector: its group of V; else its lane's)
  bool step_real;

  template <class T>
  __device__ __forceinline__ EmLineWalk(const EmLines<In, T>& L, I K)
      : x(L.x), batch_stride((I)L.batch_stride), line_stride((I)L.line_stride), k_stride((I)L.k_stride),
        count((I)L.count), padded((I)L.padded), K(K), row(threadIdx.x / 8), sub(threadIdx.x % 8) {}
  __device__ __forceinline__ const In* line_at(I l, bool& is_real) const {
    const I batch = l / padded, j = l % padded;
    is_real = j < count;
    return x + batch * batch_stride + j * line_stride;
  }
  // The block's lines [l0, l0 + 32): one batch, as padded is a multiple of 128.
  __device__ __forceinline__ void lines(I l0) {
    line = l0 + row;
    src = line_at(line, real);
    if (STAGED) step_src = line_at(l0 + (VECTOR ? threadIdx.x % (32 / V) * V : threadIdx.x % 32), step_real);
  }
  __device__ __forceinline__ I steps() const { return (K + kStep - 1) / kStep; }
  // Step s's loads: this thread's chunk (not staged), or its share of the step's values (staged).
  __device__ __forceinline__ EmChunk fetch(I s) const {
    EmChunk c = {{0u, 0u, 0u, 0u}};
    const I k0 = s * kStep;
    if (!STAGED) {
      const I k = k0 + sub * V;
      if (real && k < K) {
        if (VECTOR)
          c = *reinterpret_cast<const EmChunk*>(src + k);
        else
#pragma unroll
          for (int u = 0; u < V; ++u)
            if (k + u < K) EmBits<In>::set(c, u, src[(k + u) * k_stride]);
      }
    } else if (VECTOR) { // 32 / V threads a k, V lines each
      const I k = k0 + threadIdx.x / (32 / V);
      if (step_real && k < K) c = *reinterpret_cast<const EmChunk*>(step_src + k * k_stride);
    } else { // a warp a k, lanes along the lines
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const I k = k0 + threadIdx.x / 32 + 8 * e;
        if (step_real && k < K) EmBits<In>::set(c, e, step_src[k * k_stride]);
      }
    }
    return c;
  }
  // Steps [s, s + N)'s loads (fetch), those before steps(); the others are left as they were.
  template <int N> __device__ __forceinline__ void fetch_batch(I s, EmChunk (&c)[N]) const {
#pragma unroll
    for (int q = 0; q < N; ++q)
      if (s + q < steps()) c[q] = fetch(s + q);
  }
  // Whether fetch(s) loaded values, staged with 16-byte loads: its lines are real and its k is inside K.
  __device__ __forceinline__ bool fetches(I s) const {
    static_assert(STAGED && VECTOR, "fetches: the staged 16-byte walk only");
    return step_real && s * kStep + (I)(threadIdx.x / (32 / V)) < K;
  }
  // This thread's chunk of a step from what fetch loaded. Staged: a barrier-bounded exchange, so every thread of the
  // block calls it for the same steps.
  __device__ __forceinline__ EmChunk land(EmStage<In>& stage, EmChunk c) const {
    if (!STAGED) return c;
    __syncthreads(); // the previous step's chunks are read
    if (VECTOR) {
      const int g = threadIdx.x % (32 / V), k = threadIdx.x / (32 / V);
#pragma unroll
      for (int u = 0; u < V; ++u) stage.put(g * V + u, k, EmBits<In>::at(c, u));
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) stage.put(threadIdx.x % 32, threadIdx.x / 32 + 8 * e, EmBits<In>::at(c, e));
    }
    __syncthreads();
    return stage.get(row, sub);
  }
};

// One line's max and EmLine as one thread sees them: its chunks' values.
template <class In, class T> struct EmLineStats {
  T mx = Num<T>::neg_inf();
  EmLineAcc acc;
  template <class I> __device__ __forceinline__ void add(const EmChunk& c, I k, I K, int chunk_shift) {
    constexpr int V = 16 / sizeof(In);
    if (k + (I)V <= K) { // the usual chunk: its summary, and value by value only when it holds −inf
      T cm;
      bool all_held;
      EmChunkSummary<In, T>::of(c, cm, all_held);
      mx = Num<T>::max(mx, cm);
      if (all_held) {
        acc.add_all<V>(k, chunk_shift);
        return;
      }
    }
    unsigned held = 0u; // values other than −inf
#pragma unroll
    for (int u = 0; u < V; ++u)
      if (k + u < K) {
        const T x = to_acc(EmBits<In>::at(c, u));
        mx = Num<T>::max(mx, x);
        held |= (unsigned)(x != Num<T>::neg_inf()) << u;
      }
    acc.add<V>(k, held, chunk_shift);
  }
};

// Sweep 1 folds each line's EmLine exactly (EmFoldLines) where a thread's V lines fit in registers beside its loads:
// 4- and 8-byte inputs. 2-byte inputs (V = 8) fold only whether a line holds −inf, and recompute the EmLines of a
// block that holds one (em_fold_stats).
template <class In> __device__ constexpr bool em_folds_lines() { return sizeof(In) >= 4; }

// The EmLines of the V lines a thread folds, one value of each at k a step.
template <class In> struct EmFoldLines {
  static constexpr int V = 16 / sizeof(In);
  EmLineAcc acc[V];
  template <class I> __device__ __forceinline__ void add(const EmChunk& c, I k, int chunk_shift) {
#pragma unroll
    for (int u = 0; u < V; ++u)
      if (EmBits<In>::at(c, u) != Num<In>::neg_inf()) acc[u].add_one(k, chunk_shift);
  }
  __device__ __forceinline__ void merge_xor(int lane_mask) {
#pragma unroll
    for (int u = 0; u < V; ++u) acc[u].merge_xor(lane_mask);
  }
};

// The 8 warps' folds of the block's 32 lines (EmFoldStats): their max, and their EmLine (LINES) or whether every
// value is other than −inf.
template <class T, bool LINES> struct EmFoldPart {
  T mx[8][32];
  bool held[8][32];
  EmLine line[LINES ? 8 : 1][LINES ? 32 : 1];
};

// Sweep 1 where the loads run along the lines (staged, 16-byte loads), with no exchange: each thread folds the
// chunks it loads, V lines at one k each (EmFold, and EmFoldLines where em_folds_lines), KBATCH steps' loads in
// flight; a warp's threads of a group of lines merge their folds; the line's 8 threads each take one warp's
// (finish_stats merges them). With EmFoldLines, or where no real line of the block holds −inf (a line's EmLine is
// then all of [0, K)), this returns true; else false, for every thread of the block alike, and `st` is to be
// recomputed (sweep 1 staged).
template <int KBATCH, class In, class T, class W, class I, bool LINES>
__device__ __forceinline__ bool em_fold_stats(const W& w, I steps, I K, int chunk_shift, EmFoldPart<T, LINES>& part,
                                              EmLineStats<In, T>& st) {
  constexpr int V = W::V, G = 32 / V; // G groups of V lines; a warp's lanes g, g + G, ... load group g
  EmFold<In, T> fold;
  EmFoldLines<In> lines; // LINES only
  for (I s = 0; s < steps; s += KBATCH) {
    EmChunk c[KBATCH];
    w.fetch_batch(s, c);
#pragma unroll
    for (int q = 0; q < KBATCH; ++q)
      if (s + q < steps && w.fetches(s + q)) {
        fold.add(c[q]);
        if constexpr (LINES) lines.add(c[q], (s + q) * W::kStep + (I)(threadIdx.x / G), chunk_shift);
      }
  }
#pragma unroll
  for (int o = G; o < 32; o *= 2) {
    fold.merge_xor(o);
    if constexpr (LINES) lines.merge_xor(o);
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane < G)
#pragma unroll
    for (int u = 0; u < V; ++u) {
      part.mx[warp][lane * V + u] = fold.max(u);
      if constexpr (LINES) part.line[warp][lane * V + u] = lines.acc[u].line();
      else part.held[warp][lane * V + u] = fold.held(u);
    }
  __syncthreads();
  st.mx = part.mx[w.sub][w.row];
  if constexpr (LINES) {
    st.acc.merge(part.line[w.sub][w.row]);
    __syncthreads(); // every read of `part` is done
    return true;
  }
  const bool held = part.held[w.sub][w.row];
  if (__syncthreads_or(w.real && !held)) return false; // also: every read of `part` is done
  if (w.real) st.acc.add_line(K, chunk_shift);
  return true;
}

} // namespace jb
