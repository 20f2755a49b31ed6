// exp_matmul's first pass (the overview is in exp_matmul/product.cuh): per row of a and column of b, the max (natural units)
// and where it holds values other than −inf; the exponentiated operands, padded, into the workspace.
#pragma once

#include "core/async_copy.cuh"
#include "core/params.cuh"
#include "core/dtypes.cuh"
#include "exp_matmul/bounds.cuh"
#include "core/numbers.cuh"
#include "core/half_pairs.cuh"

namespace jb {

// The workspace, typed (exp_matmul/bounds.cuh: em_workspace).
template <class T> struct EmView {
  T *row_max, *col_max, *ea, *eb;
  EmLine *row_line, *col_line;
  unsigned long long* repaired;
  unsigned* flags;
  long long Mp, Np, Kp;
  long long a_batches, b_batches; // 1 for an operand broadcast over the batch
  long long tiles_m, tiles_n;     // repair tiles
  int repair_shift;               // log2 of their size (em_repair_tile)
  int headroom, guard;            // h and log2 of the guard threshold
};
// FORM: how the factors are stored (em_store_form), which sets their size.
template <class T, int FORM = 0> __device__ __forceinline__ EmView<T> em_view(const BmmParams& p) {
  const bool wide = sizeof(T) == 8;
  EmView<T> v;
  v.a_batches = p.a_batch == 0 ? 1 : p.B;
  v.b_batches = p.b_batch == 0 ? 1 : p.B;
  const EmWorkspace w = em_workspace(p.B, p.M, p.N, p.K, v.a_batches, v.b_batches, wide, em_factor_bytes(FORM, wide),
                                     em_stores_factors(FORM));
  char* base = static_cast<char*>(p.workspace);
  v.row_max = reinterpret_cast<T*>(base + w.row_max);
  v.col_max = reinterpret_cast<T*>(base + w.col_max);
  v.ea = reinterpret_cast<T*>(base + w.ea);
  v.eb = reinterpret_cast<T*>(base + w.eb);
  v.row_line = reinterpret_cast<EmLine*>(base + w.row_line);
  v.col_line = reinterpret_cast<EmLine*>(base + w.col_line);
  v.repaired = reinterpret_cast<unsigned long long*>(base + w.repaired);
  v.flags = reinterpret_cast<unsigned*>(base + w.flags);
  v.Mp = w.Mp, v.Np = w.Np, v.Kp = w.Kp;
  const int rt = em_repair_tile(p.B, p.M, p.N);
  v.repair_shift = em_log2_ceil(rt);
  v.tiles_m = (p.M + rt - 1) / rt;
  v.tiles_n = (p.N + rt - 1) / rt;
  v.headroom = em_headroom(p.K, wide);
  v.guard = em_guard_log2(p.K, wide);
  return v;
}

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

// One operand element's factor is 2^em_shifted(x, max, h) (0 for −inf), on a line whose max is finite. The shift is
// taken in natural units and only the difference is scaled: rounded to log2 units first, x and max would each carry
// an error of |x|·2^-24 (10^-3 at ±1e4), which rows and columns whose offsets cancel in a + b would keep in their
// outputs. The headroom is added after the shift: for a huge max, max − h would round back to max and silently drop
// h. A row or column whose max is not finite gets factors of 0 (em_put_factors): its outputs are NaN, −inf or
// repaired, and never read its products.
template <class T> __device__ __forceinline__ T em_shifted(T x, T line_max, int headroom) {
  return (x - line_max) * Num<T>::log2e() + (T)headroom;
}

// How the product reads the exponentiated operands. FORM 0 (math=fma): a as [Mp][Kp], b as [Kp][Np], fp32/fp64.
// FORM 1 (tf32), 2 (tf32x3) and 5 (bf16): b transposed to [Np][Kp], so both operands reach the tensor cores
// k-contiguous; FORM 3 (wgmma_tf32x3), 4 (wgmma_tf32) and 6 (wgmma_bf16): both in the swizzled panels a bulk copy
// moves as they lie (em_panel_at, 64 k a line for FORM 6). FORM 1 and 4 store the values rounded to TF32 (the
// product then converts nothing), FORM 5 and 6 rounded to BF16 (to nearest even) in 2-byte slots.
template <int FORM> __device__ __forceinline__ float em_store_form(float x) {
  return FORM == 1 || FORM == 4 ? __uint_as_float(to_tf32(x)) : x;
}
template <int FORM> __device__ __forceinline__ double em_store_form(double x) { return x; }
// A factor's slot in the workspace: its type and its value.
template <int FORM> struct EmStore {
  template <class T> using Slot = T;
  template <class T> static __device__ __forceinline__ T slot(T x) { return em_store_form<FORM>(x); }
};
template <> struct EmStore<5> {
  template <class T> using Slot = bf16;
  static __device__ __forceinline__ bf16 slot(float x) { return from_acc<bf16>(x); }
  // Two factors, rounded as slot() rounds them (to nearest even; factors are finite), lo in the low half.
  static __device__ __forceinline__ unsigned pair(float lo, float hi) { return pack_pair<bf16>(lo, hi); }
};
template <> struct EmStore<6> : EmStore<5> {};
// k a panel line in the wgmma forms (em_panel_at), 0 where a line is Kp slots in a row.
template <int FORM> __device__ constexpr int em_panel_k() { return FORM == 3 || FORM == 4 ? 32 : FORM == 6 ? 64 : 0; }
// Where element k of line `line` (a row of a or a column of b, counted across the batch) of a tensor-core form lies,
// in slots. A line's 16 bytes from an aligned k lie together in every form (FORM 0's b aside).
template <int FORM, class I> __device__ __forceinline__ I em_at(I line, I k, I Kp) {
  constexpr int P = em_panel_k<FORM>();
  return P == 0 ? line * Kp + k : (I)em_panel_at<P == 0 ? 32 : P>(line, k, Kp);
}
// em_at(line, k + s·STEP) less em_at(line, k), for every k and s, when STEP is whole panel lines (or the form has
// none); -1 when it depends on k.
template <int FORM, int STEP, class I> __device__ __forceinline__ I em_step_slots(I Kp) {
  constexpr int P = em_panel_k<FORM>();
  return P == 0 ? (I)STEP : STEP % P == 0 ? (I)(STEP / P * 128 * P) : (I)-1;
}
template <int FORM, class T, class I> __device__ __forceinline__ void em_put(T* base, I line, I k, I Kp, T x) {
  typedef typename EmStore<FORM>::template Slot<T> S;
  reinterpret_cast<S*>(base)[em_at<FORM>(line, k, Kp)] = EmStore<FORM>::slot(x);
}

// 16 bytes of input (16 / sizeof(In) values) or of factors, as 32-bit words (registers): at and set value u.
struct __align__(16) EmChunk {
  unsigned w[4];
};
struct __align__(8) EmHalfChunk {
  unsigned w[2];
};
template <class In> struct EmBits;
template <> struct EmBits<float> {
  static __device__ __forceinline__ float at(const EmChunk& c, int u) { return __uint_as_float(c.w[u]); }
  static __device__ __forceinline__ void set(EmChunk& c, int u, float x) { c.w[u] = __float_as_uint(x); }
};
template <> struct EmBits<double> {
  static __device__ __forceinline__ double at(const EmChunk& c, int u) {
    return __hiloint2double((int)c.w[2 * u + 1], (int)c.w[2 * u]);
  }
  static __device__ __forceinline__ void set(EmChunk& c, int u, double x) {
    c.w[2 * u] = (unsigned)__double2loint(x), c.w[2 * u + 1] = (unsigned)__double2hiint(x);
  }
};
template <class H> struct EmHalfBits { // f16, bf16: two a word, the first in the low half
  static __device__ __forceinline__ H at(const EmChunk& c, int u) {
    H h;
    h.bits = (unsigned short)(c.w[u / 2] >> (16 * (u % 2)));
    return h;
  }
  static __device__ __forceinline__ void set(EmChunk& c, int u, H x) { c.w[u / 2] |= (unsigned)x.bits << (16 * (u % 2)); }
};
template <> struct EmBits<f16> : EmHalfBits<f16> {};
template <> struct EmBits<bf16> : EmHalfBits<bf16> {};

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

// V consecutive factors of line `line` from k = k0 + s·STEP (k0 a multiple of V) into the workspace, 16 bytes (or
// all V) a store. Where em_step_slots allows, the address is the one at k0 (the same for every s, which the
// compiler computes once) plus s steps.
template <int FORM, int STEP, class T, class I, int V>
__device__ __forceinline__ void em_put_chunk(T* base, bool b_side, I line, I k0, I s, I Kp, I Np, const T (&f)[V]) {
  typedef typename EmStore<FORM>::template Slot<T> S;
  S* out = reinterpret_cast<S*>(base);
  const I k = k0 + s * (I)STEP, step = em_step_slots<FORM, STEP>(Kp);
  if (FORM == 0 && b_side) { // [Kp][Np]: the values lie a line apart
#pragma unroll
    for (int u = 0; u < V; ++u) out[((line / Np) * Kp + k + u) * Np + line % Np] = EmStore<FORM>::slot(f[u]);
    return;
  }
  constexpr int kPiece = V * (int)sizeof(S) < 16 ? V : 16 / (int)sizeof(S); // 16 or 8 bytes
#pragma unroll
  for (int q = 0; q < V / kPiece; ++q) {
    EmChunk c = {{0u, 0u, 0u, 0u}};
    if constexpr (sizeof(S) == 2) {
#pragma unroll
      for (int e = 0; e < kPiece; e += 2) c.w[e / 2] = EmStore<FORM>::pair(f[q * kPiece + e], f[q * kPiece + e + 1]);
    } else {
#pragma unroll
      for (int e = 0; e < kPiece; ++e) EmBits<S>::set(c, e, EmStore<FORM>::slot(f[q * kPiece + e]));
    }
    S* at = out + (step >= 0 ? em_at<FORM>(line, k0 + (I)(q * kPiece), Kp) + s * step
                             : em_at<FORM>(line, k + (I)(q * kPiece), Kp));
    if (kPiece * sizeof(S) == 16)
      *reinterpret_cast<EmChunk*>(at) = c;
    else
      *reinterpret_cast<EmHalfChunk*>(at) = EmHalfChunk{{c.w[0], c.w[1]}};
  }
}

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
