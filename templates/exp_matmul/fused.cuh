// exp_matmul's wgmma product that makes its own factors (math wgmma_bf16_fused, FORM 7; sm_90a). Its prepare pass
// stores only each line's max and mask (em_stores_factors); the producer warpgroup reads a and b as they lie and
// turns each slice into the factors FORM 6's prepare pass would have stored: 2^em_shifted(x, max, h) on the exp unit,
// rounded to BF16 (EmStore<6>::pair), 0 past K and on lines whose max is not finite. The consumers multiply the same
// values as wgmma_bf16's, so the bound of exp_matmul/bf16.cuh and the guard hold as they are; what changes is that
// the factors never cross device memory (the workspace holds no copy of a or b). The price: a slice of b is made by
// each of the tiles that read it, M / BM of them (a's by N / BN), and by the producer's four warps alone while the
// consumers wait: their instruction stream, more than the exp unit, makes this form slower than wgmma_bf16.
//
// The stage: a's BM rows K-major, as in every wgmma form (hopper/wgmma.cuh); b's BN columns N-major (wg_descriptor_n_major),
// so that a row-major b lands as it lies. Each producer thread copies its own 16-byte chunks of a slice (8 k of a row
// of a, or 8 n of a row of b) into the stage by cp.async and, kLead slices later, rewrites the same chunks as
// factors: no other thread touches them before the stage is handed over, so the producers need no barrier there,
// and the next slices' copies land meanwhile. An operand whose contiguous dimension is not k (a) or n (b), or whose
// start or strides are not 16-byte multiples, is read a value at a time (correct, not fast).
#pragma once

#include "exp_matmul/product.cuh"
#include "exp_matmul/pipeline.cuh"

namespace jb {

// A chunk's 16 bytes stored at shared address dst.
__device__ __forceinline__ void em_store_chunk(unsigned dst, const EmChunk& c) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(dst), "r"(c.w[0]), "r"(c.w[1]), "r"(c.w[2]), "r"(c.w[3])
               : "memory");
}

// 16 bytes at shared address dst: `count` (0..8) 2-byte values base[0], base[step], …, then zeros. vec: the values
// lie together and 16-byte aligned, and one cp.async moves them (its source size; `any` is a valid address to name
// when there are none); otherwise they are loaded one by one and stored at once.
template <class In, class I>
__device__ __forceinline__ void em_fetch_chunk(unsigned dst, const In* base, I step, int count, bool vec,
                                               const In* any) {
  if (vec) {
    copy_async_prefix(dst, count > 0 ? base : any, 2 * count);
    return;
  }
  EmChunk c = {{0u, 0u, 0u, 0u}};
#pragma unroll
  for (int u = 0; u < 8; ++u)
    if (u < count) EmBits<In>::set(c, u, base[(I)u * step]);
  em_store_chunk(dst, c);
}

// The chunk of 8 inputs at shared address dst rewritten as their factors 2^em_shifted(x, shift(u), h) in BF16; those
// from `count` on (values past K) as 0.
template <class In, class Shift>
__device__ __forceinline__ void em_make_chunk(unsigned dst, const Shift& shift, int headroom, int count) {
  EmChunk c;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(c.w[0]), "=r"(c.w[1]), "=r"(c.w[2]), "=r"(c.w[3])
               : "r"(dst)
               : "memory");
  float f[8];
#pragma unroll
  for (int u = 0; u < 8; ++u) f[u] = Num<float>::exp2(em_shifted(to_acc(EmBits<In>::at(c, u)), shift(u), headroom));
  if (count < 8)
#pragma unroll
    for (int u = 0; u < 8; ++u) f[u] = u < count ? f[u] : 0.f;
#pragma unroll
  for (int e = 0; e < 4; ++e) c.w[e] = EmStore<6>::pair(f[2 * e], f[2 * e + 1]);
  em_store_chunk(dst, c);
}

// The producer warpgroup's part (thread tid of 128): every slice of the block's tiles (TileList, persistent as the
// consumers walk them), copied, then made into factors and handed to the consumers through `split`.
template <class In, class I, int BM, int BN, int STAGES, class Pipe>
__device__ __forceinline__ void em_make_factors(Pipe& pipe, const BmmParams& p, const EmView<float>& v, int tid) {
  constexpr int kLead = em_made_lead(STAGES); // slices copied ahead of the one being made
  constexpr int kARows = 16, kBRow = BN / 8, kBRows = 128 / kBRow; // a pass of the warpgroup: rows of a, of b
  // Per tile, each line's max as the factors take it: +inf (every factor 0) outside the output or where the max is
  // not finite. kLead + 1 tiles' worth: a tile's are written when its first slice is copied, while the slices of
  // the kLead before it may still be made.
  __shared__ __align__(16) float shifts[kLead + 1][BM + BN];
  typedef TileList<I, BM, BN> Tiles;
  const In* const a = static_cast<const In*>(p.a);
  const In* const b = static_cast<const In*>(p.b);
  const auto aligned = [](const void* x, long long row, long long batch) {
    return reinterpret_cast<unsigned long long>(x) % 16 == 0 && row % 8 == 0 && batch % 8 == 0;
  };
  const bool a_vec = p.a_col == 1 && aligned(a, p.a_row, p.a_batch);
  const bool b_vec = p.b_col == 1 && aligned(b, p.b_row, p.b_batch);
  const I K = (I)p.K, slices = (I)v.Kp / 64;
  const I tiles = ((I)Tiles::total(p) - (I)blockIdx.x + (I)gridDim.x - 1) / (I)gridDim.x, total = tiles * slices;
  const int ca = tid % 8, cb = tid % kBRow; // a thread's chunk in a row of a, of b: the same every pass
  const auto producers_sync = [] { asm volatile("bar.sync 2, 128;" ::: "memory"); };
  // Shared addresses in a stage: a's chunk ca of row r, b's chunk cb of row (k) r.
  const auto a_chunk = [&](unsigned stage, int r) { return stage + r * 128 + ((ca ^ (r % 8)) << 4); };
  const auto b_chunk = [&](unsigned stage, int r) {
    return stage + Pipe::kA + (cb / 8) * 8192 + r * 128 + (((cb % 8) ^ (r % 8)) << 4);
  };
  const auto copy = [&](I q) {
    const I u = q / slices, k0 = q % slices * 64;
    const TileCoords<I> t = Tiles::at(p, (I)blockIdx.x + u * (I)gridDim.x);
    const unsigned m = pipe.n + (unsigned)q, st = m % STAGES, stage = pipe.smem + st * Pipe::kStage;
    if (k0 == 0) {
      float* const sh = shifts[u % (kLead + 1)];
      producers_sync(); // the tile kLead + 1 before this one is made by every thread
      for (int l = tid; l < BM + BN; l += 128) {
        float mx = Num<float>::inf();
        if (l < BM && t.m0 + l < (I)p.M) mx = v.row_max[(v.a_batches == 1 ? 0 : t.batch) * (I)p.M + t.m0 + l];
        if (l >= BM && t.n0 + (l - BM) < (I)p.N)
          mx = v.col_max[(v.b_batches == 1 ? 0 : t.batch) * (I)p.N + t.n0 + (l - BM)];
        sh[l] = fabsf(mx) < Num<float>::inf() ? mx : Num<float>::inf();
      }
      producers_sync();
    }
    if (m >= STAGES) mb_wait(pipe.empty + 8 * st, (m / STAGES) % 2 ^ 1u); // the stage's last slice is consumed
    const In* const at = a + t.batch * (I)p.a_batch + t.m0 * (I)p.a_row;
    const In* const bt = b + t.batch * (I)p.b_batch + t.n0 * (I)p.b_col;
    const I rows = (I)p.M - t.m0, cols = (I)p.N - t.n0;
#pragma unroll
    for (int e = 0; e < BM / kARows; ++e) {
      const int r = tid / 8 + kARows * e;
      const I k = k0 + 8 * ca;
      const int count = r < rows ? (int)max((I)0, min((I)8, K - k)) : 0;
      em_fetch_chunk(a_chunk(stage, r), at + (I)r * (I)p.a_row + k * (I)p.a_col, (I)p.a_col, count, a_vec, a);
    }
#pragma unroll 1
    for (int e = 0; e < 64 / kBRows; ++e) {
      const int r = tid / kBRow + kBRows * e;
      const I k = k0 + r, n = 8 * (I)cb;
      const int count = k < K ? (int)max((I)0, min((I)8, cols - n)) : 0;
      em_fetch_chunk(b_chunk(stage, r), bt + k * (I)p.b_row + n * (I)p.b_col, (I)p.b_col, count, b_vec, b);
    }
  };
  const auto make = [&](I q) {
    const I u = q / slices, k0 = q % slices * 64;
    const unsigned m = pipe.n + (unsigned)q, st = m % STAGES, stage = pipe.smem + st * Pipe::kStage;
    const float* const sh = shifts[u % (kLead + 1)];
#pragma unroll
    for (int e = 0; e < BM / kARows; ++e) {
      const int r = tid / 8 + kARows * e;
      const float mx = sh[r];
      em_make_chunk<In>(
          a_chunk(stage, r), [&](int) { return mx; }, v.headroom, (int)max((I)0, min((I)8, K - (k0 + 8 * ca))));
    }
    // b's chunk cb holds columns 8·cb .. 8·cb + 7 in every row: their shifts once a slice.
    const float4 s0 = *reinterpret_cast<const float4*>(sh + BM + 8 * cb);
    const float4 s1 = *reinterpret_cast<const float4*>(sh + BM + 8 * cb + 4);
    const auto col = [&](int u) {
      return u == 0   ? s0.x
             : u == 1 ? s0.y
             : u == 2 ? s0.z
             : u == 3 ? s0.w
             : u == 4 ? s1.x
             : u == 5 ? s1.y
             : u == 6 ? s1.z
                      : s1.w;
    };
#pragma unroll 2
    for (int e = 0; e < 64 / kBRows; ++e) {
      const int r = tid / kBRow + kBRows * e;
      em_make_chunk<In>(b_chunk(stage, r), col, v.headroom, k0 + r < K ? 8 : 0);
    }
    wg_fence_async_shared(); // the factors, written by ordinary stores, are read by the tensor cores next
    mb_arrive(pipe.split + 8 * st);
  };
  // Slice q's copies are one cp.async group; the slice kLead groups back is made once its group is in.
  for (I q = 0; q < total + kLead; ++q) {
    if (q < total) copy(q);
    copy_commit();
    if (q >= kLead) {
      copy_wait<kLead>();
      make(q - kLead);
    }
  }
  pipe.n += (unsigned)total;
}

} // namespace jb
