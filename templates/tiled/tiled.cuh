// Strategy "tiled": GEMM-style register tiling. A block computes a BM×BN tile of outputs; K is staged through
// shared memory BK at a time (double-buffered: core/kslice.cuh); each thread owns TM×TN outputs in registers. Operands
// are kept in the accumulator type in shared memory, A transposed ([BK][BM]) so a thread's TM rows are one vector
// load (the tile's staging: tiled/tile.cuh).
//
// Out-of-range elements are padded with the semiring's "pad" pair, whose product never wins and adds nothing
// (only pad ⊗ pad ever reaches a stored output: k ≥ K pads both operands at once).
//
// Split-K: BmmParams.k_chunk > 0 cuts K into chunks; blockIdx.z enumerates (batch, chunk) and each chunk's
// result (an ordinary semiring value) goes to the workspace, which tiled/combine.cuh reduces with ⊕.
#pragma once

#include "core/params.cuh"
#include "core/semirings.cuh"
#include "core/kslice.cuh"
#include "tiled/tile.cuh"

namespace jb {

// Per-term policies for the generic tiled path: one accumulator per output, updated for every term. init() takes
// the first k of the block's range. A policy with kCleanSlices also has update_clean(), for slices in which no
// operand is suspect() (its loader votes on every slice), and its term loop branches on the vote. kFetch: when the
// next slice is fetched (core/kslice.cuh): before the terms where the policy's registers allow it, so the loads overlap
// the terms. kChunk: Tile's CHUNK. kUnroll: the k loop's unrolling (8 for the fast policies: faster than 4, and full
// unrolling is slower).
template <class S, class T> struct GenericTerm {
  typedef typename S::State Acc;
  enum { kCleanSlices = false, kFetch = kFetchAfterUse, kChunk = 16, kUnroll = 4 };
  static __device__ __forceinline__ Acc init(int) { return S::init(); }
  static __device__ __forceinline__ void update(Acc& acc, T a, T b, int k) { S::add_term(acc, a, b, k); }
  static __device__ __forceinline__ T value(const Acc& acc) { return S::finalize(acc); }
  static __device__ __forceinline__ int arg(const Acc& acc) { return S::arg(acc); }
};

// Fast per-term policies (f32 accumulators, no argmax): one add or multiply and one NaN-propagating max/min.
// Same results as the Select structs' values: NaN wins, ties are equal values, K = 0 is handled by the caller. The
// next slice's loads are in flight during the terms (1–5% faster on the H100; their registers fit at 2 blocks an SM).
struct MaxPlusTerm {
  typedef float Acc;
  enum { kCleanSlices = false, kFetch = kFetchBeforeUse, kChunk = 16, kUnroll = 8 };
  static __device__ __forceinline__ Acc init(int) { return Num<float>::neg_inf(); }
  static __device__ __forceinline__ void update(Acc& v, float a, float b, int) { v = max_nan(v, a + b); }
  static __device__ __forceinline__ float value(Acc v) { return v; }
  static __device__ __forceinline__ int arg(Acc) { return -1; }
};
struct MinPlusTerm {
  typedef float Acc;
  enum { kCleanSlices = false, kFetch = kFetchBeforeUse, kChunk = 16, kUnroll = 8 };
  static __device__ __forceinline__ Acc init(int) { return Num<float>::inf(); }
  static __device__ __forceinline__ void update(Acc& v, float a, float b, int) { v = min_nan(v, a + b); }
  static __device__ __forceinline__ float value(Acc v) { return v; }
  static __device__ __forceinline__ int arg(Acc) { return -1; }
};
struct MaxTimesTerm {
  typedef float Acc;
  enum { kCleanSlices = false, kFetch = kFetchBeforeUse, kChunk = 16, kUnroll = 8 };
  static __device__ __forceinline__ Acc init(int) { return Num<float>::neg_inf(); }
  static __device__ __forceinline__ void update(Acc& v, float a, float b, int) { v = max_nan(v, a * b); }
  static __device__ __forceinline__ float value(Acc v) { return v; }
  static __device__ __forceinline__ int arg(Acc) { return -1; }
};

// The fast argmax policy (f32 accumulators; max_plus, min_plus, max_times with argmax): the value and its k in two
// registers, started at the operation's worst value and the range's first k. A term replaces them when it is
// strictly better or is the first NaN; k ascends, so ties keep the smallest k and a NaN stays. Over a non-empty
// range that is Select's state exactly (an all-worst range keeps its first k, as Select's first term does). In a
// slice where no operand is suspect no term is NaN, and the test is one comparison.
template <class Op> struct SelectTerm {
  struct Acc {
    float v;
    int k;
  };
  // Measured 5% slower with the loads before the terms. Its 128 registers at 2 blocks an SM leave no room for the
  // chunked fetch's addresses (44–56 bytes spilled): element by element.
  enum { kCleanSlices = true, kFetch = kFetchAfterUse, kChunk = 0, kUnroll = 4 };
  static __device__ __forceinline__ Acc init(int k_first) { return {Op::worst(), k_first}; }
  static __device__ __forceinline__ void update(Acc& acc, float a, float b, int k) {
    const float t = Op::times(a, b);
    const bool take = Op::better(t, acc.v) || (is_nan(t) && !is_nan(acc.v));
    acc.v = take ? t : acc.v;
    acc.k = take ? k : acc.k;
  }
  static __device__ __forceinline__ void update_clean(Acc& acc, float a, float b, int k) {
    const float t = Op::times(a, b);
    const bool take = Op::better(t, acc.v);
    acc.v = take ? t : acc.v;
    acc.k = take ? k : acc.k;
  }
  static __device__ __forceinline__ bool suspect(float x) { return Op::suspect(x); }
  static __device__ __forceinline__ float value(const Acc& acc) { return acc.v; }
  static __device__ __forceinline__ int arg(const Acc& acc) { return acc.k; }
};

// kslice_loop's loader for a Tile G: a slice of the block's rows of A and columns of B through the registers ra, rb
// (Tile::fetch, padded with pad_a / pad_b outside the matrices and from k_end on), then into a shared-memory buffer.
template <class G, class In, class I> struct TileLoader : KSliceLoader {
  typedef typename G::Value T;
  typedef TileRegs<G, In> Regs;
  typedef typename Regs::Word W;
  enum { kSliceK = G::kSliceK };
  typename G::Smem& sm;
  const In *A, *B;
  I m0, n0, k_end;
  T pad_a, pad_b;
  W (&ra)[Regs::kA];
  W (&rb)[Regs::kB];
  __device__ __forceinline__ TileLoader(typename G::Smem& sm, const In* A, const In* B, const TileCoords<I>& t, T pad_a,
                                        T pad_b, W (&ra)[Regs::kA], W (&rb)[Regs::kB])
      : sm(sm), A(A), B(B), m0(t.m0), n0(t.n0), k_end(t.k_end), pad_a(pad_a), pad_b(pad_b), ra(ra), rb(rb) {}
  __device__ __forceinline__ void fetch(const BmmParams& p, int, I k0) {
    G::fetch(p, A, B, m0, n0, k0, k_end, pad_a, pad_b, ra, rb);
  }
  __device__ __forceinline__ void land(int buf) { G::template store<In>(sm, buf, ra, rb); }
};

// TileLoader whose slice barrier also votes: clean is true when no operand staged for the slice (pads included) is
// P::suspect. Pads can only be flagged needlessly (max_times pads a with −inf), never missed.
template <class P, class G, class In, class I> struct VotingTileLoader : TileLoader<G, In, I> {
  typedef TileLoader<G, In, I> Base;
  bool fetched_clean = true, clean = false;
  using Base::Base;
  static_assert(G::kVec == 1, "votes on the values as fetched: element by element");
  __device__ __forceinline__ void fetch(const BmmParams& p, int buf, I k0) {
    Base::fetch(p, buf, k0);
    bool ok = true;
#pragma unroll
    for (int l = 0; l < G::kLoadA; ++l) ok &= !P::suspect(this->ra[l]);
#pragma unroll
    for (int l = 0; l < G::kLoadB; ++l) ok &= !P::suspect(this->rb[l]);
    fetched_clean = ok;
  }
  __device__ __forceinline__ void slice_barrier() { clean = !__syncthreads_or(!fetched_clean); }
};

template <class G, class In, class I> __device__ __forceinline__ bool slice_clean(const TileLoader<G, In, I>&) {
  return false;
}
template <class P, class G, class In, class I>
__device__ __forceinline__ bool slice_clean(const VotingTileLoader<P, G, In, I>& ld) {
  return ld.clean;
}

template <bool VOTE, class P, class G, class In, class I> struct TermLoader { typedef TileLoader<G, In, I> type; };
template <class P, class G, class In, class I> struct TermLoader<true, P, G, In, I> {
  typedef VotingTileLoader<P, G, In, I> type;
};

template <bool CLEAN> struct TermUpdate {
  template <class P, class A, class T> static __device__ __forceinline__ void run(A& acc, T a, T b, int k) {
    P::update(acc, a, b, k);
  }
};
template <> struct TermUpdate<true> {
  template <class P, class A, class T> static __device__ __forceinline__ void run(A& acc, T a, T b, int k) {
    P::update_clean(acc, a, b, k);
  }
};

// One staged slice's terms for a thread's TM × TN outputs; CLEAN: through P::update_clean.
template <bool CLEAN, class P, class G, int TM, int TN, class I>
__device__ __forceinline__ void tile_terms(const typename G::Smem& sm, int buf, I k0, typename P::Acc (&acc)[TM][TN]) {
  typedef typename G::Value T;
#pragma unroll(P::kUnroll)
  for (int k = 0; k < G::kSliceK; ++k)
    G::for_each_term(sm, buf, k, [&](int r, int c, T a, T b) {
      TermUpdate<CLEAN>::template run<P>(acc[r][c], a, b, (int)(k0 + k));
    });
}

// Where a finished value goes: the output (converted to Out), or, under split-K, the workspace in the
// accumulator type laid out [chunk][batch][M][N] (argmax likewise, after the values).
template <class T, class Out, class I>
__device__ __forceinline__ void emit(const BmmParams& p, const TileCoords<I>& t, I i, I j, T value, int arg) {
  if (p.k_chunk > 0) {
    const I flat = ((t.chunk * (I)p.B + t.batch) * (I)p.M + i) * (I)p.N + j;
    static_cast<T*>(p.workspace)[flat] = value;
    if (p.argmax) {
      const I chunks = ((I)p.K + (I)p.k_chunk - 1) / (I)p.k_chunk;
      int* ws_arg = reinterpret_cast<int*>(static_cast<T*>(p.workspace) + chunks * (I)p.B * (I)p.M * (I)p.N);
      ws_arg[flat] = arg;
    }
    return;
  }
  static_cast<Out*>(p.out)[t.batch * (I)p.out_batch + i * (I)p.out_row + j * (I)p.out_col] = from_acc<Out>(value);
  if (p.argmax) p.argmax[(t.batch * (I)p.M + i) * (I)p.N + j] = arg;
}

// A thread's TM rows of outputs from column c0 on, each row NV words V already as the output holds them (a word one
// output, or a packed pair of half outputs), stored in pieces of up to 16 bytes where the rows lie whole in the
// output: no split-K (its workspace), K > 0, contiguous columns, inside M and N, aligned. Returns whether it stored
// them; where not, the caller stores value by value (emit). The same for every thread of a block but at the edges.
template <class Out, int TM, int NV, class V, class I>
__device__ __forceinline__ bool store_whole_rows(const BmmParams& p, const TileCoords<I>& t, I r0, I c0,
                                                 const V (&v)[TM][NV]) {
  constexpr int kCols = NV * (int)(sizeof(V) / sizeof(Out)); // outputs a row
  constexpr int kMax = 16 / (int)sizeof(V);
  constexpr int kWords = NV % kMax == 0 ? kMax : NV % 2 == 0 && kMax >= 2 ? 2 : 1; // words a store
  static_assert(sizeof(V) % sizeof(Out) == 0, "whole outputs a word");
  typedef Chunk<V, kWords> Piece;
  Out* at = static_cast<Out*>(p.out) + t.batch * (I)p.out_batch + r0 * (I)p.out_row + c0;
  const bool whole = t.k_begin < t.k_end && p.k_chunk == 0 && p.out_col == 1 && r0 + TM <= (I)p.M &&
                     c0 + kCols <= (I)p.N &&
                     ((unsigned long long)at | (unsigned long long)p.out_row * sizeof(Out)) % sizeof(Piece) == 0;
  if (!whole) return false;
#pragma unroll
  for (int r = 0; r < TM; ++r)
#pragma unroll
    for (int q = 0; q < NV; q += kWords) {
      Piece x;
#pragma unroll
      for (int w = 0; w < kWords; ++w) x.v[w] = v[r][q + w];
      reinterpret_cast<Piece*>(at + r * (I)p.out_row)[q / kWords] = x;
    }
  return true;
}

// The generic tiled kernel: any semiring through a per-term policy P. WHOLE_ROWS: outputs in the accumulator type
// leave a row at a time (store_whole_rows) where they can, not value by value (the generator's choice, as measured).
template <class P, class S, class In, class Out, class I, int BM, int BN, int BK, int TM, int TN, bool WHOLE_ROWS>
__device__ __forceinline__ void tiled_kernel(const BmmParams p) {
  typedef typename Acc<In>::type T;
  typedef Tile<T, BM, BN, BK, TM, TN, P::kChunk> G;
  __shared__ __align__(16) typename G::Smem sm;
  const In* A0 = static_cast<const In*>(p.a);
  const In* B0 = static_cast<const In*>(p.b);
  const T pad_a = S::pad_a(), pad_b = S::pad_b();
  const I chunks = p.k_chunk > 0 ? ((I)p.K + (I)p.k_chunk - 1) / (I)p.k_chunk : 1;
  // The policy's fetch order, but after the terms at more than 32 outputs a thread: with the next slice's registers
  // live across the terms, 128×128 t8×8 at 2 blocks an SM spills 52 bytes (8 with them after).
  constexpr KSliceFetch kTileFetch = P::kFetch == kFetchBeforeUse && TM * TN <= 32 ? kFetchBeforeUse : kFetchAfterUse;
  for (I z = blockIdx.z; z < (I)p.B * chunks; z += gridDim.z) {
    const TileCoords<I> t = tile_coords<I, BM, BN>(p, z);
    typename P::Acc acc[TM][TN];
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
      for (int c = 0; c < TN; ++c) acc[r][c] = P::init((int)t.k_begin);
    typedef TileRegs<G, In> Regs;
    typename Regs::Word ra[Regs::kA], rb[Regs::kB];
    typename TermLoader<P::kCleanSlices != 0, P, G, In, I>::type ld(
        sm, A0 + t.batch * (I)p.a_batch, B0 + t.batch * (I)p.b_batch, t, pad_a, pad_b, ra, rb);
    for (auto slice = kslice_loop<kTileFetch, kBarrierBetweenSlices>(ld, p, t.k_begin, t.k_end); slice.valid();
         slice.finish(p)) {
      slice.start(p);
      if (P::kCleanSlices && slice_clean(ld))
        tile_terms<P::kCleanSlices != 0, P, G>(sm, slice.buf, slice.k0, acc);
      else
        tile_terms<false, P, G>(sm, slice.buf, slice.k0, acc);
    }
    const I r0 = t.m0 + (threadIdx.x / (BN / TN)) * TM, c0 = t.n0 + (threadIdx.x % (BN / TN)) * TN;
    const bool empty = t.k_begin >= t.k_end; // K = 0: the semiring zero
    // Outputs in the accumulator type and no argmax: whole rows in stores of up to 16 bytes, as the packed kernel's.
    if (WHOLE_ROWS && SameType<T, Out>::value && !p.argmax) {
      T v[TM][TN];
#pragma unroll
      for (int r = 0; r < TM; ++r)
#pragma unroll
        for (int c = 0; c < TN; ++c) v[r][c] = P::value(acc[r][c]);
      if (store_whole_rows<Out>(p, t, r0, c0, v)) continue;
    }
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
      for (int c = 0; c < TN; ++c)
        if (r0 + r < (I)p.M && c0 + c < (I)p.N)
          emit<T, Out, I>(p, t, r0 + r, c0 + c, empty ? S::finalize(S::init()) : P::value(acc[r][c]),
                          empty ? -1 : P::arg(acc[r][c]));
  }
}

} // namespace jb
