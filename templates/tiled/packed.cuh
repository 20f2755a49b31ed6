// The tiled kernel on packed half pairs: max_plus, min_plus and max_times without argmax, when the output has the
// inputs' half type (f16 or bf16). Two adjacent columns share a 32-bit register, so one add (or multiply) and one
// max (or min) instruction make two terms: twice the f32 path's rate.
//
// Exact as the contract reads it: each term a ⊗ b is rounded once to the half type, and rounding is monotone, so the
// largest rounded term is the rounded largest term, the value the output would hold anyway (the f32 path rounds the
// f32 result, which may itself be a rounded sum: never closer). Overflow rounds to ±inf as the output's rounding
// does. The max/min propagate NaN (max.NaN / min.NaN), as the f32 policies do.
//
// Staging: A's slice is stored transposed as pairs (a, a), so a thread's row fragment is ready to meet a pair of
// columns; B's slice as halves, read two at a time.
//
// Without the half-pair instructions (JB_HAS_HALF_PAIRS) a pair would go through f32 a half at a time
// (core/half_pairs.cuh), several times the f32 policy's instructions for the same outputs, so the kernel is then the
// generic tiled kernel with the policy's f32 twin (InF32).
#pragma once

#include "tiled/tiled.cuh"
#include "core/half_pairs.cuh"

namespace jb {

// A half value's bits from a float that the half type holds exactly (the semirings' pads and zeros).
__device__ __forceinline__ unsigned short half_bits(float x, f16) { return from_acc<f16>(x).bits; }
__device__ __forceinline__ unsigned short half_bits(float x, bf16) { return from_acc<bf16>(x).bits; }
__device__ __forceinline__ unsigned pair_of(unsigned short h) { return (unsigned)h * 0x10001u; }

// The per-pair policies: the accumulator pair's start, and one term pair folded in.
template <class H> struct PackedMaxPlus {
  typedef MaxPlusTerm InF32;
  static __device__ __forceinline__ unsigned init() { return pair_of(half_bits(Num<float>::neg_inf(), H())); }
  static __device__ __forceinline__ unsigned update(unsigned acc, unsigned a2, unsigned b2) {
    return HalfPairs<H>::max(acc, HalfPairs<H>::add(a2, b2));
  }
};
template <class H> struct PackedMinPlus {
  typedef MinPlusTerm InF32;
  static __device__ __forceinline__ unsigned init() { return pair_of(half_bits(Num<float>::inf(), H())); }
  static __device__ __forceinline__ unsigned update(unsigned acc, unsigned a2, unsigned b2) {
    return HalfPairs<H>::min(acc, HalfPairs<H>::add(a2, b2));
  }
};
template <class H> struct PackedMaxTimes { // from −inf, not the semiring's zero: products may be negative
  typedef MaxTimesTerm InF32;
  static __device__ __forceinline__ unsigned init() { return pair_of(half_bits(Num<float>::neg_inf(), H())); }
  static __device__ __forceinline__ unsigned update(unsigned acc, unsigned a2, unsigned b2) {
    return HalfPairs<H>::max(acc, HalfPairs<H>::mul(a2, b2));
  }
};

// The tile geometry and staging of the packed kernel (cf. Tile in tiled/tiled.cuh, whose chunks of raw half bits it
// fetches): halves in registers, A's slice as pairs [BK][BM], B's as halves [BK][BN].
template <int BM, int BN, int BK, int TM, int TN> struct PackedTile {
  typedef unsigned short Value;
  typedef Tile<Value, BM, BN, BK, TM, TN> Halves;
  enum { kSliceK = BK };
  static constexpr int kThreads = Halves::kThreads;
  static constexpr int kPadM = BM + 4, kPadN = Halves::kPadN; // conflict-free transposed stores; rows 16 B aligned
  static_assert(BM % TM == 0 && BN % TN == 0 && TN % 2 == 0, "tile must divide into thread tiles of column pairs");

  struct Smem {
    unsigned a[2][BK][kPadM];
    unsigned short b[2][BK][kPadN];
  };

  template <class In> using Regs = typename Halves::template Regs<In>;
  template <class In, class I>
  static __device__ __forceinline__ void fetch(const BmmParams& p, const In* A, const In* B, I m0, I n0, I k0, I k_end,
                                               Value pad_a, Value pad_b, typename Regs<In>::Word (&ra)[Regs<In>::kA],
                                               typename Regs<In>::Word (&rb)[Regs<In>::kB]) {
    Halves::fetch(p, A, B, m0, n0, k0, k_end, pad_a, pad_b, ra, rb);
  }

  // Where Tile::store puts each value, A's halves as pairs.
  template <class In>
  static __device__ __forceinline__ void store(Smem& sm, int buf, const typename Regs<In>::Word (&ra)[Regs<In>::kA],
                                               const typename Regs<In>::Word (&rb)[Regs<In>::kB]) {
    Halves::template store_as<In>(sm, buf, ra, rb, [](Value h) { return pair_of(h); }, [](Value h) { return h; });
  }

  static __device__ __forceinline__ void row_frag(const Smem& sm, int buf, int k, unsigned (&fa)[TM]) {
    const int r0 = (threadIdx.x / (BN / TN)) * TM;
#pragma unroll
    for (int r = 0; r < TM; ++r) fa[r] = sm.a[buf][k][r0 + r];
  }
  // Columns c0 + 2q and c0 + 2q + 1 in pair q (the lower column in the low half).
  static __device__ __forceinline__ void col_frag(const Smem& sm, int buf, int k, unsigned (&fb)[TN / 2]) {
    const int c0 = (threadIdx.x % (BN / TN)) * TN;
    const unsigned* row = reinterpret_cast<const unsigned*>(&sm.b[buf][k][c0]);
#pragma unroll
    for (int q = 0; q < TN / 2; ++q) fb[q] = row[q];
  }
};

template <class P, class S, class In, class Out, class I, int BM, int BN, int BK, int TM, int TN>
__device__ __forceinline__ void packed_tiled_kernel(const BmmParams p) {
#if !JB_HAS_HALF_PAIRS
  tiled_kernel<typename P::InF32, S, In, Out, I, BM, BN, BK, TM, TN, false>(p);
#else
  typedef PackedTile<BM, BN, BK, TM, TN> G;
  typedef typename Acc<In>::type T;
  __shared__ __align__(16) typename G::Smem sm;
  const In* A0 = static_cast<const In*>(p.a);
  const In* B0 = static_cast<const In*>(p.b);
  const unsigned short pad_a = half_bits(S::pad_a(), In()), pad_b = half_bits(S::pad_b(), In());
  const I chunks = p.k_chunk > 0 ? ((I)p.K + (I)p.k_chunk - 1) / (I)p.k_chunk : 1;
  for (I z = blockIdx.z; z < (I)p.B * chunks; z += gridDim.z) {
    const TileCoords<I> t = tile_coords<I, BM, BN>(p, z);
    unsigned acc[TM][TN / 2];
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
      for (int q = 0; q < TN / 2; ++q) acc[r][q] = P::init();
    typedef TileRegs<G, In> Regs;
    typename Regs::Word ra[Regs::kA], rb[Regs::kB];
    TileLoader<G, In, I> ld(sm, A0 + t.batch * (I)p.a_batch, B0 + t.batch * (I)p.b_batch, t, pad_a, pad_b, ra, rb);
    // The next slice's loads in flight during the terms: 6% faster than after them (H100, bf16 64×512³).
    for (auto slice = kslice_loop<kFetchBeforeUse, kBarrierBetweenSlices>(ld, p, t.k_begin, t.k_end); slice.valid();
         slice.finish(p)) {
      slice.start(p);
#pragma unroll 8 // as the f32 fast policies (1.5% faster than 4 at 64×512³; tiled/tiled.cuh)
      for (int k = 0; k < BK; ++k) {
        unsigned fa[TM], fb[TN / 2];
        G::row_frag(sm, slice.buf, k, fa);
        G::col_frag(sm, slice.buf, k, fb);
#pragma unroll
        for (int r = 0; r < TM; ++r)
#pragma unroll
          for (int q = 0; q < TN / 2; ++q) acc[r][q] = P::update(acc[r][q], fa[r], fb[q]);
      }
    }
    const I r0 = t.m0 + (threadIdx.x / (BN / TN)) * TM, c0 = t.n0 + (threadIdx.x % (BN / TN)) * TN;
    const bool empty = t.k_begin >= t.k_end; // K = 0: the semiring zero
    // A thread's TN columns of a row are TN / 2 pairs already packed as the output holds them (Out is the inputs'
    // half type): whole rows go out in stores of up to 16 bytes, the rest value by value.
    if (store_whole_rows<Out>(p, t, r0, c0, acc)) continue;
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
      for (int c = 0; c < TN; ++c)
        if (r0 + r < (I)p.M && c0 + c < (I)p.N) {
          In h;
          h.bits = (unsigned short)(acc[r][c / 2] >> (16 * (c % 2)));
          emit<T, Out, I>(p, t, r0 + r, c0 + c, empty ? S::finalize(S::init()) : to_acc(h), -1);
        }
  }
#endif
}

} // namespace jb
