// The tile every tiled kernel shares (the strategy is described in tiled/tiled.cuh): its geometry, how its slices of
// A and B are fetched and staged in shared memory (Tile), which tile, batch and K range a block takes (tile_coords,
// TileList), and the small type tools they use.
#pragma once

#include "core/params.cuh"
#include "core/dtypes.cuh"

namespace jb {

// An operand element as a tile stages it: in the accumulator type (to_acc), or as its raw bits (unsigned short: the
// packed half kernel, tiled/packed.cuh).
template <class T> struct Staged {
  template <class In> static __device__ __forceinline__ T of(In x) { return to_acc(x); }
};
template <> struct Staged<unsigned short> {
  template <class In> static __device__ __forceinline__ unsigned short of(In x) { return x.bits; }
};
// The In value a staged pad stands for (the semirings' pads, ±inf, 0 and 1, are exact in every input type).
template <class In> __device__ __forceinline__ In staged_pad(float x) { return from_acc<In>(x); }
template <class In> __device__ __forceinline__ In staged_pad(double x) { return from_acc<In>(x); }
template <class In> __device__ __forceinline__ In staged_pad(unsigned short bits) {
  In h;
  h.bits = bits;
  return h;
}

template <bool C, class X, class Y> struct IfType { typedef X type; };
template <class X, class Y> struct IfType<false, X, Y> { typedef Y type; };
template <class X, class Y> struct SameType { enum { value = false }; };
template <class X> struct SameType<X, X> { enum { value = true }; };

// V elements of T as one load or store (V · sizeof(T) bytes, aligned as much).
template <class T, int V> struct alignas(sizeof(T) * V) Chunk { T v[V]; };

// The tile geometry and the shared-memory staging shared by every tiled kernel.
//
// A thread fetches a slice in chunks of kVec consecutive elements: A's along k (a chunk's elements go to kVec rows of
// the transposed slice, one line; consecutive threads take consecutive lines, so the stores meet no bank twice), B's
// along n (one vector store). Where the tile and slice lie in the matrices, in the usual layout (A's k or B's n
// contiguous) with aligned rows, a chunk is one load of kVec · sizeof(In) bytes from its own pointer; anywhere else
// (partial tiles and slices, other layouts, unaligned rows) its elements are loaded one by one and padded. The test
// is per operand and slice, uniform over the block.
//
// CHUNK: bytes a chunk (16), or 0 for element by element only, for kernels whose registers have no room for the
// chunks' addresses.
template <class T, int BM, int BN, int BK, int TM, int TN, int CHUNK = 16> struct Tile {
  typedef T Value;
  enum { kSliceK = BK };
  static constexpr int kThreads = (BM / TM) * (BN / TN);
  // CHUNK bytes of T a chunk where the tile divides into them, else one element (fetch_elements).
  static constexpr int kV = CHUNK > (int)sizeof(T) ? CHUNK / (int)sizeof(T) : 1;
  // +4 elements (+16 bytes for 2-byte T): conflict-free transposed stores, rows 16 B aligned.
  static constexpr int kPadM = BM + 4, kPadN = BN + (kV > 4 ? kV : 4);
  static constexpr int kVec = BK % kV == 0 && BM % kV == 0 && BN % kV == 0 ? kV : 1;
  static constexpr int kChunksA = (BM * BK / kVec + kThreads - 1) / kThreads;
  static constexpr int kChunksB = (BK * BN / kVec + kThreads - 1) / kThreads;
  static constexpr int kLoadA = kChunksA * kVec;
  static constexpr int kLoadB = kChunksB * kVec;
  static_assert(BM % TM == 0 && BN % TN == 0, "tile must divide into thread tiles");

  struct Smem {
    T a[2][BK][kPadM];
    T b[2][BK][kPadN];
  };

  // Where this thread's chunk l of A lies in the slice: line (row of the tile) and first k; of B: k and first column.
  // valid: the tile has that many chunks (the last round of threads may run out).
  struct Place {
    int line, k;
    bool valid;
  };
  static __device__ __forceinline__ Place a_chunk(int l) {
    const int idx = threadIdx.x + l * kThreads;
    return {idx % BM, idx / BM * kVec, idx < BM * BK / kVec};
  }
  static __device__ __forceinline__ Place b_chunk(int l) {
    const int idx = threadIdx.x + l * kThreads; // n fastest
    return {idx % (BN / kVec) * kVec, idx / (BN / kVec), idx < BK * BN / kVec};
  }

  // The registers a thread fetches a slice into (TileRegs). In chunks, the chunks as loaded, kWords 32-bit words
  // each, converted to T only when the slice lands (store_as): converted on arrival, every warp waited out its loads
  // at the top of every slice, since the values had to be in place where the chunk and element paths meet. Element
  // by element (kVec = 1), the values in T as fetched.
  template <class In> struct Regs {
    static constexpr bool kRaw = kVec > 1;
    static constexpr int kWords = kRaw ? kVec * (int)sizeof(In) / 4 : 1;
    typedef typename IfType<kRaw, unsigned, T>::type Word;
    static constexpr int kA = kRaw ? kChunksA * kWords : kLoadA, kB = kRaw ? kChunksB * kWords : kLoadB;
    static_assert(!kRaw || kVec * sizeof(In) % 4 == 0, "a chunk is whole words");
    // A chunk's words and its elements.
    union Raw {
      Chunk<unsigned, kWords> w;
      Chunk<In, kVec> v;
    };
  };

  // One operand chunk into words r: kVec elements from at(0) on (one vector load) when `whole`, else element by
  // element: at(e) where in(e), the pad elsewhere.
  template <class In, class At, class InRange>
  static __device__ __forceinline__ void chunk(At at, bool whole, InRange in, In pad, unsigned* r) {
    typedef Regs<In> R;
    typename R::Raw c;
    if (whole) {
      c.w = *reinterpret_cast<const Chunk<unsigned, R::kWords>*>(at(0));
    } else {
#pragma unroll
      for (int e = 0; e < kVec; ++e) c.v.v[e] = in(e) ? *at(e) : pad;
    }
#pragma unroll
    for (int w = 0; w < R::kWords; ++w) r[w] = c.w.v[w];
  }
  // Chunk words r's elements, converted.
  template <class In> static __device__ __forceinline__ void unpack(const unsigned* r, T (&x)[kVec]) {
    typedef Regs<In> R;
    typename R::Raw c;
#pragma unroll
    for (int w = 0; w < R::kWords; ++w) c.w.v[w] = r[w];
#pragma unroll
    for (int e = 0; e < kVec; ++e) x[e] = Staged<T>::of(c.v.v[e]);
  }

  // Whether chunks at p, p + stride, ... (kVec elements of In each) can be loaded whole: aligned to their size.
  template <class In, class I> static __device__ __forceinline__ bool aligned(const In* p, I stride) {
    return kVec > 1 && ((unsigned long long)p | (unsigned long long)stride * sizeof(In)) % (kVec * sizeof(In)) == 0;
  }

  // fetch() a value a load (kVec = 1): A's k fastest (consecutive threads read consecutive k of one row), B's n
  // fastest, as the kernels at 128 registers were measured (ptxas spills them written otherwise).
  template <class In, class I>
  static __device__ __forceinline__ void fetch_elements(const BmmParams& p, const In* A, const In* B, I m0, I n0, I k0,
                                                        I k_end, T pad_a, T pad_b, T (&ra)[kLoadA], T (&rb)[kLoadB]) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int l = 0; l < kLoadA; ++l) {
      const int idx = tid + l * kThreads; // k fastest: consecutive threads read consecutive k of one row
      const int r = idx / BK, c = idx % BK;
      const I i = m0 + r, k = k0 + c;
      ra[l] = (idx < BM * BK && i < (I)p.M && k < k_end) ? Staged<T>::of(A[i * (I)p.a_row + k * (I)p.a_col]) : pad_a;
    }
#pragma unroll
    for (int l = 0; l < kLoadB; ++l) {
      const int idx = tid + l * kThreads; // n fastest
      const int r = idx / BN, c = idx % BN;
      const I k = k0 + r, j = n0 + c;
      rb[l] = (idx < BK * BN && k < k_end && j < (I)p.N) ? Staged<T>::of(B[k * (I)p.b_row + j * (I)p.b_col]) : pad_b;
    }
  }
  // Fetches one K slice of A (rows m0.., k0..) and B (k0.., cols n0..) into registers, padding outside.
  template <class In, class I>
  static __device__ __forceinline__ void fetch(const BmmParams& p, const In* A, const In* B, I m0, I n0, I k0, I k_end,
                                               T pad_a, T pad_b, typename Regs<In>::Word (&ra)[Regs<In>::kA],
                                               typename Regs<In>::Word (&rb)[Regs<In>::kB]) {
    if constexpr (kVec == 1) {
      fetch_elements(p, A, B, m0, n0, k0, k_end, pad_a, pad_b, ra, rb);
    } else {
      constexpr int kWords = Regs<In>::kWords;
      const I a_row = (I)p.a_row, a_col = (I)p.a_col, b_row = (I)p.b_row, b_col = (I)p.b_col;
      const bool full_k = k0 + BK <= k_end;
      const bool a_whole = full_k && a_col == 1 && m0 + BM <= (I)p.M && aligned(A + m0 * a_row + k0, a_row);
      const bool b_whole = full_k && b_col == 1 && n0 + BN <= (I)p.N && aligned(B + k0 * b_row + n0, b_row);
#pragma unroll
      for (int l = 0; l < kChunksA; ++l) {
        const Place c = a_chunk(l);
        const I i = m0 + c.line, k = k0 + c.k;
        chunk<In>([&](int e) { return A + i * a_row + (k + e) * a_col; }, a_whole && c.valid,
                  [&](int e) { return c.valid && i < (I)p.M && k + e < k_end; }, staged_pad<In>(pad_a),
                  &ra[l * kWords]);
      }
#pragma unroll
      for (int l = 0; l < kChunksB; ++l) {
        const Place c = b_chunk(l);
        const I k = k0 + c.k, j = n0 + c.line;
        chunk<In>([&](int e) { return B + k * b_row + (j + e) * b_col; }, b_whole && c.valid,
                  [&](int e) { return c.valid && k < k_end && j + e < (I)p.N; }, staged_pad<In>(pad_b),
                  &rb[l * kWords]);
      }
    }
  }

  // Stores a fetched slice in buffer buf of shared memory laid out as Smem's [BK][lines] (PackedTile's too), each
  // value of A through as_a (PackedTile's pairs) and of B through as_b.
  template <class In, class S, class AsA, class AsB>
  static __device__ __forceinline__ void store_as(S& sm, int buf, const typename Regs<In>::Word (&ra)[Regs<In>::kA],
                                                  const typename Regs<In>::Word (&rb)[Regs<In>::kB], AsA as_a,
                                                  AsB as_b) {
    const int tid = threadIdx.x;
    if constexpr (kVec == 1) { // fetch_elements' places
#pragma unroll
      for (int l = 0; l < kLoadA; ++l) {
        const int idx = tid + l * kThreads;
        if (idx < BM * BK) sm.a[buf][idx % BK][idx / BK] = as_a(ra[l]);
      }
#pragma unroll
      for (int l = 0; l < kLoadB; ++l) {
        const int idx = tid + l * kThreads;
        if (idx < BK * BN) sm.b[buf][idx / BN][idx % BN] = as_b(rb[l]);
      }
    } else {
      constexpr int kWords = Regs<In>::kWords;
#pragma unroll
      for (int l = 0; l < kChunksA; ++l) {
        const Place c = a_chunk(l);
        if (c.valid) {
          T x[kVec];
          unpack<In>(&ra[l * kWords], x);
#pragma unroll
          for (int e = 0; e < kVec; ++e) sm.a[buf][c.k + e][c.line] = as_a(x[e]);
        }
      }
#pragma unroll
      for (int l = 0; l < kChunksB; ++l) {
        const Place c = b_chunk(l);
        if (c.valid) {
          T x[kVec];
          unpack<In>(&rb[l * kWords], x);
#pragma unroll
          for (int e = 0; e < kVec; ++e) x[e] = as_b(x[e]);
          store_chunk(&sm.b[buf][c.k][c.line], x);
        }
      }
    }
  }
  template <class In>
  static __device__ __forceinline__ void store(Smem& sm, int buf, const typename Regs<In>::Word (&ra)[Regs<In>::kA],
                                               const typename Regs<In>::Word (&rb)[Regs<In>::kB]) {
    const auto same = [](T x) { return x; };
    store_as<In>(sm, buf, ra, rb, same, same);
  }

  template <class V> static __device__ __forceinline__ void store_chunk(V* at, const V* r) {
    Chunk<V, kVec> c;
#pragma unroll
    for (int e = 0; e < kVec; ++e) c.v[e] = r[e];
    *reinterpret_cast<Chunk<V, kVec>*>(at) = c;
  }

  // This thread's TM rows / TN columns at slice position k.
  static __device__ __forceinline__ void row_frag(const Smem& sm, int buf, int k, T (&fa)[TM]) {
    const int r0 = (threadIdx.x / (BN / TN)) * TM;
#pragma unroll
    for (int r = 0; r < TM; ++r) fa[r] = sm.a[buf][k][r0 + r];
  }
  static __device__ __forceinline__ void col_frag(const Smem& sm, int buf, int k, T (&fb)[TN]) {
    const int c0 = (threadIdx.x % (BN / TN)) * TN;
#pragma unroll
    for (int c = 0; c < TN; ++c) fb[c] = sm.b[buf][k][c0 + c];
  }
  // f(r, c, a, b) for each of this thread's TM × TN terms at slice position k: the kernels' term loops.
  template <class F> static __device__ __forceinline__ void for_each_term(const Smem& sm, int buf, int k, F&& f) {
    T fa[TM], fb[TN];
    row_frag(sm, buf, k, fa);
    col_frag(sm, buf, k, fb);
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
      for (int c = 0; c < TN; ++c) f(r, c, fa[r], fb[c]);
  }
};

// Which tile, batch and K range this block works on. Returns false when blockIdx.z has no work.
template <class I> struct TileCoords { I m0, n0, batch, chunk, k_begin, k_end; };
template <class I, int BM, int BN> __device__ __forceinline__ TileCoords<I> tile_coords(const BmmParams& p, I z) {
  TileCoords<I> t;
  const I chunks = p.k_chunk > 0 ? ((I)p.K + (I)p.k_chunk - 1) / (I)p.k_chunk : 1;
  t.batch = z / (chunks > 0 ? chunks : 1);
  t.chunk = chunks > 0 ? z % chunks : 0;
  t.k_begin = p.k_chunk > 0 ? t.chunk * (I)p.k_chunk : 0;
  t.k_end = p.k_chunk > 0 ? min((I)p.K, t.k_begin + (I)p.k_chunk) : (I)p.K;
  t.m0 = (I)blockIdx.y * BM;
  t.n0 = (I)blockIdx.x * BN;
  return t;
}

// A grid's tiles as one list: B × tiles_m × tiles_n of them, numbered n fastest, then m, then the batch (neighbouring
// tiles share a batch's operands in L2), each over the whole of K; for kernels whose blocks walk the list (block b
// runs tiles b, b + gridDim.x, …). Computed from the parameters where used, so that nothing of it is held in
// registers across a tile's work.
template <class I, int BM, int BN> struct TileList {
  static __device__ __forceinline__ I tiles_n(const BmmParams& p) { return ((I)p.N + BN - 1) / BN; }
  static __device__ __forceinline__ I per_batch(const BmmParams& p) { return tiles_n(p) * (((I)p.M + BM - 1) / BM); }
  static __device__ __forceinline__ I total(const BmmParams& p) { return per_batch(p) * (I)p.B; }
  static __device__ __forceinline__ TileCoords<I> at(const BmmParams& p, I u) {
    TileCoords<I> t{};
    const I r = u % per_batch(p);
    t.batch = u / per_batch(p), t.m0 = r / tiles_n(p) * BM, t.n0 = r % tiles_n(p) * BN;
    t.chunk = 0, t.k_begin = 0, t.k_end = (I)p.K;
    return t;
  }
};

// The staging registers of a Tile G's slices of In (Tile::Regs): the kernel declares them as
//   typedef TileRegs<G, In> Regs;
//   typename Regs::Word ra[Regs::kA], rb[Regs::kB];
template <class G, class In> using TileRegs = typename G::template Regs<In>;

} // namespace jb
