// Strategy "exp_matmul" (log semiring): one exp per operand element and one multiply-add per term, exact on every
// input. The method, the headroom and the guard's bound are derived in exp_matmul/bounds.cuh. Three launches:
//   1. em_prepare_kernel (exp_matmul/prepare.cuh): per row of a and column of b its max and where it holds values
//      other than −inf; then the exponentiated operands 2^((x − max)·log2 e + h), padded, into the workspace;
//      clears the repair flags and counter.
//   2. this file: the product of the exponentiated operands, a register-tiled FP32/FP64 FMA kernel (math=fma) or
//      tensor cores (math=tf32x3: three TF32 products per term, fp32-level accuracy; math=tf32: one, the opt-in
//      fast precision). Each output is written (log2 s + shifts) or, when the guard fires, its tile is flagged
//      (exp_matmul/epilogue.cuh).
//   3. em_repair_kernel (exp_matmul/repair.cuh): an exact two-pass kernel (per output the max term, then
//      Σ 2^(t − max)) on the flagged tiles.
#pragma once

#include "core/async_copy.cuh"
#include "core/kslice.cuh"
#include "core/mma.cuh"
#include "tiled/tiled.cuh"
#include "exp_matmul/epilogue.cuh"

namespace jb {

// 16 bytes of T: the product's loads from the padded, aligned workspace.
template <class T> using EmVec = Chunk<T, 16 / sizeof(T)>; // tiled/tiled.cuh

// kslice_loop's loader for the FMA form: one K slice of the exponentiated operands through the registers ra, rb into
// a Tile G's shared memory, a's [BM][BK] block (k contiguous in the workspace) transposed to [BK][BM], b's [BK][BN]
// block as it is. No bounds checks: the workspace is padded.
template <class G, class I, int BM, int BN, int BK, int THREADS> struct EmLoader : KSliceLoader {
  typedef typename G::Value T;
  enum { kSliceK = BK };
  static constexpr int V = 16 / sizeof(T);
  static constexpr int kVecA = BM * BK / V, kVecB = BK * BN / V;
  static constexpr int kLoadA = (kVecA + THREADS - 1) / THREADS, kLoadB = (kVecB + THREADS - 1) / THREADS;
  static_assert(BK % V == 0 && BN % V == 0, "slices are whole 16-byte vectors");
  typename G::Smem& sm;
  const T *ea, *eb;
  I Kp, Np, m0, n0;
  EmVec<T> (&ra)[kLoadA];
  EmVec<T> (&rb)[kLoadB];

  __device__ __forceinline__ EmLoader(typename G::Smem& sm, const T* ea, const T* eb, I Kp, I Np, I m0, I n0,
                                      EmVec<T> (&ra)[kLoadA], EmVec<T> (&rb)[kLoadB])
      : sm(sm), ea(ea), eb(eb), Kp(Kp), Np(Np), m0(m0), n0(n0), ra(ra), rb(rb) {}
  __device__ __forceinline__ void fetch(const BmmParams&, int, I k0) {
#pragma unroll
    for (int l = 0; l < kLoadA; ++l) {
      const int idx = threadIdx.x + l * THREADS, r = idx / (BK / V), c = idx % (BK / V);
      if (kVecA % THREADS == 0 || idx < kVecA)
        ra[l] = *reinterpret_cast<const EmVec<T>*>(ea + (m0 + r) * Kp + k0 + c * V);
    }
#pragma unroll
    for (int l = 0; l < kLoadB; ++l) {
      const int idx = threadIdx.x + l * THREADS, r = idx / (BN / V), c = idx % (BN / V);
      if (kVecB % THREADS == 0 || idx < kVecB)
        rb[l] = *reinterpret_cast<const EmVec<T>*>(eb + (k0 + r) * Np + n0 + c * V);
    }
  }
  __device__ __forceinline__ void land(int buf) { store(sm.a[buf], sm.b[buf]); }
  template <int PAD_M, int PAD_N> __device__ __forceinline__ void store(T (*sa)[PAD_M], T (*sb)[PAD_N]) const {
#pragma unroll
    for (int l = 0; l < kLoadA; ++l) {
      const int idx = threadIdx.x + l * THREADS, r = idx / (BK / V), c = idx % (BK / V);
      if (kVecA % THREADS == 0 || idx < kVecA)
#pragma unroll
        for (int e = 0; e < V; ++e) sa[c * V + e][r] = ra[l].v[e];
    }
#pragma unroll
    for (int l = 0; l < kLoadB; ++l) {
      const int idx = threadIdx.x + l * THREADS, r = idx / (BN / V), c = idx % (BN / V);
      if (kVecB % THREADS == 0 || idx < kVecB) *reinterpret_cast<EmVec<T>*>(&sb[r][c * V]) = rb[l];
    }
  }
};

// Pass 2, math=fma: the tiled skeleton's shared-memory layout and fragments (tiled/tiled.cuh), an FMA per term.
template <class In, class Out, class I, int BM, int BN, int BK, int TM, int TN>
__device__ __forceinline__ void exp_matmul_fma_kernel(const BmmParams p) {
  typedef typename Acc<In>::type T;
  typedef Tile<T, BM, BN, BK, TM, TN> G;
  typedef EmLoader<G, I, BM, BN, BK, G::kThreads> L;
  static_assert((TM & (TM - 1)) == 0 && (TN & (TN - 1)) == 0, "a thread's outputs start 32-aligned or lie in one "
                                                              "32-block (EmFlagged)");
  __shared__ __align__(16) typename G::Smem sm;
  __shared__ T sh_a[BM], sh_b[BN];
  __shared__ EmLine line_a[BM], line_b[BN];
  const EmView<T> v = em_view<T>(p);
  const I Kp = (I)v.Kp, Np = (I)v.Np;
  const int r_base = (threadIdx.x / (BN / TN)) * TM, c_base = (threadIdx.x % (BN / TN)) * TN;
  for (I z = blockIdx.z; z < (I)p.B; z += gridDim.z) {
    const TileCoords<I> t = tile_coords<I, BM, BN>(p, z);
    const T* ea = v.ea + (v.a_batches == 1 ? 0 : t.batch) * (I)v.Mp * Kp;
    const T* eb = v.eb + (v.b_batches == 1 ? 0 : t.batch) * Kp * Np;
    // After the first barrier: the previous tile's epilogue may still read the staged lines.
    const auto stage_lines = [&](const BmmParams& p) {
      em_stage_lines<T, I, BM, BN, G::kThreads>(p, v, t.batch, t.m0, t.n0, sh_a, sh_b, line_a, line_b, threadIdx.x);
    };
    EmVec<T> ra[L::kLoadA], rb[L::kLoadB];
    L ld(sm, ea, eb, Kp, Np, t.m0, t.n0, ra, rb);
    auto slice = kslice_loop<kFetchBeforeUse, kBarrierEverySlice>(ld, p, (I)0, Kp, stage_lines);
    T s[TM][TN];
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
      for (int c = 0; c < TN; ++c) s[r][c] = (T)0;
    // The next slice's loads are in flight during the FMAs.
    for (; slice.valid(); slice.finish(p)) {
      slice.start(p);
#pragma unroll
      // Written out rather than through G::for_each_term, which numbers the PTX's registers otherwise and so moves
      // ptxas's allocation.
      for (int k = 0; k < BK; ++k) {
        T fa[TM], fb[TN];
        G::row_frag(sm, slice.buf, k, fa);
        G::col_frag(sm, slice.buf, k, fb);
#pragma unroll
        for (int r = 0; r < TM; ++r)
#pragma unroll
          for (int c = 0; c < TN; ++c) s[r][c] = fma(fa[r], fb[c], s[r][c]);
      }
    }
    // Each output's row and column read where it is finished (up to 64 outputs a thread leave no registers to hold
    // them all, as the tensor-core forms do).
    typedef EmFinish<T, Out, I> Finish;
    const Finish finish(p, v, t.batch, line_a, line_b);
    const auto row = [&](int q) {
      const int r = r_base + q / TN;
      return finish.row(t.m0 + r, r, sh_a[r]);
    };
    const auto col = [&](int q) {
      const int c = c_base + q % TN;
      return finish.col(t.n0 + c, c, sh_b[c]);
    };
    EmFlagged<em_blocks(TM), em_blocks(TN)> flagged;
    constexpr int kGroup = sizeof(T) == 8 ? 1 : TN;
#pragma unroll
    for (int r = 0; r < TM; ++r) // a row at a time, its sums dying as it is finished; f64 an output at a time
#pragma unroll
      for (int c0 = 0; c0 < TN; c0 += kGroup)
        em_outputs<kGroup>([&](int c) { return finish.common(s[r][c0 + c], row(r * TN + c0 + c), col(c0 + c)); },
                           [&](int c) {
                             flagged.n[r / 32][(c0 + c) / 32] +=
                                 finish.rare(s[r][c0 + c], row(r * TN + c0 + c), col(c0 + c));
                           });
    flagged.report(v, t.batch, t.m0 + r_base, t.n0 + c_base);
  }
}

// Four 8×4 tiles of 32-bit values from shared memory in one instruction: lane l names row l % 8 of tile l / 8,
// and receives from tile i the word (row l / 4, column l % 4) in r[i] — exactly an mma fragment's layout.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}

// Shared memory of the tensor-core kernel: a as [BM][BK] and b as [BN][BK] factors E (k contiguous, as the prepare
// pass stores them), rows padded by 16 bytes so that the 8 rows one ldmatrix tile reads hit 32 distinct banks.
template <class E, int BM, int BN, int BK> struct EmMmaSmem {
  static constexpr int kPitch = BK + 16 / sizeof(E);
  E a[2][BM][kPitch];
  E b[2][BN][kPitch];
};

// Copies one K slice of rows (a's rows or b's columns, each k-contiguous in the workspace) into shared memory with
// cp.async: 16 bytes per copy, straight from global to shared, no registers in between.
template <int ROWS, int BK, int THREADS, int PITCH, class E, class I>
__device__ __forceinline__ void em_copy_rows(E (*dst)[PITCH], const E* src, I Kp, I row0, I k0) {
  constexpr int kPer = 16 / sizeof(E), kVec = ROWS * BK / kPer, kLoad = (kVec + THREADS - 1) / THREADS;
  static_assert(BK % kPer == 0, "slices are whole 16-byte vectors");
#pragma unroll
  for (int l = 0; l < kLoad; ++l) {
    const int idx = threadIdx.x + l * THREADS;
    if (kVec % THREADS == 0 || idx < kVec)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(
                       smem_addr(&dst[idx / (BK / kPer)][idx % (BK / kPer) * kPer])),
                   "l"(src + (row0 + idx / (BK / kPer)) * Kp + k0 + idx % (BK / kPer) * kPer));
  }
}

// kslice_loop's loader for the tensor-core form: a's rows and b's columns of one K slice straight into buffer buf
// with cp.async; land() waits for every copy in flight.
template <class E, int BM, int BN, int BK, int THREADS, class I> struct EmMmaLoader : KSliceLoader {
  enum { kAsyncCopy = true, kSliceK = BK };
  EmMmaSmem<E, BM, BN, BK>& sm;
  const E *ea, *eb;
  I Kp, m0, n0;
  __device__ __forceinline__ EmMmaLoader(EmMmaSmem<E, BM, BN, BK>& sm, const E* ea, const E* eb, I Kp, I m0, I n0)
      : sm(sm), ea(ea), eb(eb), Kp(Kp), m0(m0), n0(n0) {}
  template <class P> __device__ __forceinline__ void fetch(const P&, int buf, I k0) {
    em_copy_rows<BM, BK, THREADS>(sm.a[buf], ea, Kp, m0, k0);
    em_copy_rows<BN, BK, THREADS>(sm.b[buf], eb, Kp, n0, k0);
    copy_commit();
  }
  __device__ __forceinline__ void land(int) { copy_wait_all(); }
};

// Where one warp's outputs and ldmatrix rows lie in a block tile of the tensor-core product: a warp covers a
// (8·TM)×(4·TN) tile. This lane's ldmatrix rows: for a, tile lane/8 is (rows +8 if odd, k +4 if ≥ 2); for b (two n8
// tiles per call), (k +4 if odd, columns +8 if ≥ 2).
struct EmWarpTile {
  int wm0, wn0, a_row, a_k, b_row, b_k;
};
template <int BN, int TM, int TN> __device__ __forceinline__ EmWarpTile em_warp_tile() {
  constexpr int WM = 8 * TM, WN = 4 * TN, WARPS_N = BN / WN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  EmWarpTile w;
  w.wm0 = (warp / WARPS_N) * WM, w.wn0 = (warp % WARPS_N) * WN;
  w.a_row = (lane / 8 % 2) * 8 + lane % 8, w.a_k = (lane / 16) * 4;
  w.b_row = (lane / 16) * 8 + lane % 8, w.b_k = (lane / 8 % 2) * 4;
  return w;
}

// The tensor-core product of one block tile: acc = Σ_k a[m0 + r][k]·b[n0 + c][k] over the padded reduction
// [0, Kp), both operands k-contiguous rows of length Kp, as mma fragments (element e of acc[m][n] is row
// wm0 + m·16 + lane/4 + 8·(e/2), column wn0 + n·8 + 2·(lane%4) + e%2). With SPLIT each factor x (finite) is
// hi + lo (hi = tf32(x), lo = tf32(x − hi): core/mma.cuh) and a term is hi·hi + hi·lo + lo·hi (the lo·lo part is
// below 2^-22 of the term). Tensor cores add with truncation, so SPLIT sums each k-step's three products from zero
// and adds that to the f32 accumulator with a rounded add: the truncation then never compounds over K. Without
// SPLIT the operands arrive rounded to TF32 (FORM 1). stage(p) runs between the first barrier and the first slice's
// landing (what the epilogue reads, staged while the copies are in flight).
template <int BM, int BN, int BK, int TM, int TN, bool SPLIT, int THREADS, class I, class P, class Stage>
__device__ __forceinline__ void em_mma_tile(EmMmaSmem<float, BM, BN, BK>& sm, const P& p, const float* ea,
                                            const float* eb, I Kp, I m0, I n0, const EmWarpTile& w, const Stage& stage,
                                            float (&acc)[TM / 2][TN / 2][4]) {
  constexpr int MT = TM / 2, NT = TN / 2;
  EmMmaLoader<float, BM, BN, BK, THREADS, I> ld(sm, ea, eb, Kp, m0, n0);
  auto slice = kslice_loop<kFetchBeforeUse, kBarrierEverySlice>(ld, p, (I)0, Kp, stage);
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.f;
  // The next slice's copies land during the mma.
  for (; slice.valid(); slice.finish(p)) {
    slice.start(p);
    // SPLIT holds twice the fragments: one k-step at a time, or ptxas hoists the next step's loads and spills.
#pragma unroll(SPLIT ? 1 : BK / 8)
    for (int kk = 0; kk < BK; kk += 8) {
      unsigned bh[NT][2], bl[NT][2];
#pragma unroll
      for (int n = 0; n < NT; n += 2) {
        unsigned r[4];
        ldmatrix_x4(r, &sm.b[slice.buf][w.wn0 + n * 8 + w.b_row][kk + w.b_k]);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const Tf32Pair x = finite_tf32_split(__uint_as_float(r[e]));
          bh[n + e / 2][e % 2] = SPLIT ? x.hi : r[e];
          bl[n + e / 2][e % 2] = SPLIT ? x.lo : 0u;
        }
      }
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        unsigned ah[4], al[4];
        ldmatrix_x4(ah, &sm.a[slice.buf][w.wm0 + m * 16 + w.a_row][kk + w.a_k]);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (SPLIT) {
            const Tf32Pair x = finite_tf32_split(__uint_as_float(ah[e]));
            ah[e] = x.hi;
            al[e] = x.lo;
          }
        }
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          if (SPLIT) {
            float d[4] = {0.f, 0.f, 0.f, 0.f};
            mma_tf32(d, al, bh[n][0], bh[n][1]);
            mma_tf32(d, ah, bl[n][0], bl[n][1]);
            mma_tf32(d, ah, bh[n][0], bh[n][1]);
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[m][n][e] += d[e];
          } else {
            mma_tf32(acc[m][n], ah, bh[n][0], bh[n][1]);
          }
        }
      }
    }
  }
}

// The product of the tensor-core kernel below, through TF32 (one product a term, or SPLIT: three): the factor type,
// its FORM (exp_matmul/factors.cuh) and the tile's product.
template <bool SPLIT> struct EmTf32Product {
  typedef float Factor;
  enum { kForm = SPLIT ? 2 : 1, kStepK = 8 };
  template <int BM, int BN, int BK, int TM, int TN, int THREADS, class I, class P, class Stage>
  static __device__ __forceinline__ void tile(EmMmaSmem<float, BM, BN, BK>& sm, const P& p, const float* ea,
                                              const float* eb, I Kp, I m0, I n0, const EmWarpTile& w,
                                              const Stage& stage, float (&acc)[TM / 2][TN / 2][4]) {
    em_mma_tile<BM, BN, BK, TM, TN, SPLIT, THREADS>(sm, p, ea, eb, Kp, m0, n0, w, stage, acc);
  }
};

// Pass 2, math=tf32x3, tf32 or bf16 (Product: EmTf32Product, EmBf16Product): the product of a block tile, then each
// output written or its repair tile flagged.
template <class In, class Out, class I, int BM, int BN, int BK, int TM, int TN, class Product>
__device__ __forceinline__ void exp_matmul_mma_kernel(const BmmParams p) {
  typedef float T;
  typedef typename Product::Factor E;
  constexpr int WM = 8 * TM, WN = 4 * TN, MT = WM / 16, NT = WN / 8;
  constexpr int kThreads = (BM / WM) * (BN / WN) * 32;
  typedef EmMmaSmem<E, BM, BN, BK> S;
  static_assert(TM % 2 == 0 && TN % 4 == 0 && BM % WM == 0 && BN % WN == 0 && BK % Product::kStepK == 0,
                "mma tile geometry");
  __shared__ __align__(16) S sm;
  __shared__ T sh_a[BM], sh_b[BN];
  __shared__ EmLine line_a[BM], line_b[BN];
  const EmView<T> v = em_view<T, Product::kForm>(p);
  const I Kp = (I)v.Kp;
  const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const EmWarpTile w = em_warp_tile<BN, TM, TN>();
  const int wm0 = w.wm0, wn0 = w.wn0;
  for (I z = blockIdx.z; z < (I)p.B; z += gridDim.z) {
    const TileCoords<I> t = tile_coords<I, BM, BN>(p, z);
    const E* ea = reinterpret_cast<const E*>(v.ea) + (v.a_batches == 1 ? 0 : t.batch) * (I)v.Mp * Kp;
    const E* eb = reinterpret_cast<const E*>(v.eb) + (v.b_batches == 1 ? 0 : t.batch) * (I)v.Np * Kp;
    // After the first barrier (the previous tile's epilogue may still read the staged lines), while the first
    // slice's copies are in flight.
    const auto stage_lines = [&](const BmmParams& p) {
      em_stage_lines<T, I, BM, BN, kThreads>(p, v, t.batch, t.m0, t.n0, sh_a, sh_b, line_a, line_b, threadIdx.x);
    };
    float acc[MT][NT][4];
    Product::template tile<BM, BN, BK, TM, TN, kThreads>(sm, p, ea, eb, Kp, t.m0, t.n0, w, stage_lines, acc);
    // The warp's WM × WN outputs start at a multiple of WM, WN (powers of two): 32-aligned, or in one 32-block.
    // Each output's row and column read where it is finished (sides held for every output spill at 2 blocks an SM).
    typedef EmFinish<T, Out, I> Finish;
    const Finish finish(p, v, t.batch, line_a, line_b);
    const auto row = [&](int m, int e) {
      const int r = wm0 + m * 16 + g + 8 * (e / 2);
      return finish.row(t.m0 + r, r, sh_a[r]);
    };
    const auto col = [&](int n, int e) {
      const int c = wn0 + n * 8 + 2 * q + e % 2;
      return finish.col(t.n0 + c, c, sh_b[c]);
    };
    EmFlagged<em_blocks(WM), em_blocks(WN)> flagged;
    // A fragment at a time (its sums die as it is finished). g < 8 and 2q + 1 < 8 never carry into the next 32-block.
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int n = 0; n < NT; ++n)
        em_outputs<4>([&](int e) { return finish.common(acc[m][n][e], row(m, e), col(n, e)); },
                      [&](int e) {
                        flagged.n[(m * 16 + 8 * (e / 2)) / 32][n * 8 / 32] +=
                            finish.rare(acc[m][n][e], row(m, e), col(n, e));
                      });
    flagged.report(v, t.batch, t.m0 + wm0, t.n0 + wn0);
  }
}

} // namespace jb
