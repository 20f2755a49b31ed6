// How the threads of an "_edges" block (templates/chain/hmm_edges.cuh) hold and sum their tile of the transitions'
// gradient: rows × sources in registers, a batch of steps' factors at a time from shared memory. The narrow and wide
// kinds sum by multiply-adds, the mma kind on the tensor cores; edge_shape (chain/edge_params.cuh) gives each its
// shape.
#pragma once

#include "chain/edge_params.cuh"
#include "chain/edge_vectors.cuh"
#include "core/mma.cuh"

namespace jb {

// How a block's NT threads hold its tile of ROWS rows × C sources (edge_shape): a thread's NR consecutive rows × NQ
// consecutive sources, so that a step's factors are its vector reads of shared memory (edge_read) for NQ · NR
// multiply-adds, and the lanes of a warp read consecutive sources, with the same rows where LR is 1.
template <int C, int NT, int ROWS, class T, bool LOG> struct EdgeTile {
  static constexpr EdgeShape shape = edge_shape(C, NT, ROWS, int(sizeof(T)), LOG);
  enum : int { LQ = shape.LQ, LR = shape.LR, WR = shape.WR, WQ = shape.WQ, NQ = shape.NQ, NR = shape.NR };
  int q0, r0; // the thread's first source and row
  __device__ __forceinline__ EdgeTile(int tid)
      : q0((tid % 32 % LQ + LQ * (tid / 32 % WQ)) * NQ), r0((tid % 32 / LQ + LR * (tid / 32 / WQ)) * NR) {}
  static constexpr bool kNanFactors = true; // a NaN step's X factors (NaN) are summed as any others
  __device__ __forceinline__ int q(int jq) const { return q0 + jq; }
  __device__ __forceinline__ int r(int jr) const { return r0 + jr; }
  // The steps of a batch of n whose factors are formed: n.
  static __device__ __forceinline__ int padded(int n) { return n; }
  // The thread's sources of a staged row of CQ, its rows of a staged row of RP.
  __device__ __forceinline__ void read_sources(const T* row, T (&x)[NQ]) const { edge_read(row + q0, x); }
  __device__ __forceinline__ void read_rows(const T* row, T (&y)[NR]) const { edge_read(row + r0, y); }
  // acc[jr][jq] += Σ_u X_u[q(jq)]·Y_u[r(jr)] over the n steps of factors staged in xf (rows CQ apart) and yf (RP).
  __device__ __forceinline__ void sum(T (&acc)[NR][NQ], const T* xf, const T* yf, int n) const {
    const T* xp = xf + q0;
    const T* yp = yf + r0;
#pragma unroll 2
    for (int u = 0; u < n; ++u, xp += CQ, yp += RP) {
      T x[NQ], y[NR];
      edge_read(xp, x);
      edge_read(yp, y);
#pragma unroll
      for (int jr = 0; jr < NR; ++jr)
#pragma unroll
        for (int jq = 0; jq < NQ; ++jq) acc[jr][jq] += x[jq] * y[jr];
    }
  }

private:
  enum : int { CQ = shape.CQ, RP = shape.RP };
};

// The mma kind's tile (edge_shape): warp w holds rows [32·(w / WQ), +32) × sources [32·(w % WQ), +32) as the
// accumulators of two m16 × four n8 fragments of mma.sync m16n8k8 (rows the fragments' M, sources their N, steps
// their K): lane (g, t) = (lane / 4, lane % 4) holds rows g and g + 8 of each m16 and sources 2t and 2t + 1 of each
// n8, the pairs jr = 2·m + half and jq = 2·n + column. A batch's factors, each in [−1, 1] and finite, are split into
// two TF32 parts and a term is three products (core/mma.cuh: within a few 2^-22 of it); the tensor cores add with
// truncation, so each 8 steps' products are summed from zero and added to the f32 sums with a rounded add, and the
// truncation never compounds over the steps. Flushing loses less than 2^-126 of a product and of an 8-step sum, as
// it does of the narrow blocks' factors (chain/hmm_edges.cuh). Without TF32 mma.sync the same layout sums by
// multiply-adds.
template <int C, int NT, int ROWS, class T> struct EdgeMmaTile {
  static constexpr EdgeShape shape = edge_shape(C, NT, ROWS, int(sizeof(T)), true, kEdgeMma);
  enum : int { NQ = 8, NR = 4, WQ = shape.WQ, CQ = shape.CQ, RP = shape.RP };
  static_assert(sizeof(T) == 4 && C % 32 == 0 && ROWS % 32 == 0 && NT == ROWS * C / 32 && shape.EB % 8 == 0,
                "f32 sums; whole warps of 32 rows × 32 sources; batches of whole mma steps");
  // A NaN's TF32 split may not be a NaN (core/mma.cuh): a batch with a NaN step (mode 2) is summed term by term.
  static constexpr bool kNanFactors = false;
  // The warp's first source and row; the lane's group and index in it: from the thread's index at each use, which
  // costs less than the registers that would hold them.
  __device__ __forceinline__ EdgeMmaTile(int) {}
  static __device__ __forceinline__ int tid() { return int(threadIdx.x); }
  static __device__ __forceinline__ int q0() { return tid() / 32 % WQ * 32; }
  static __device__ __forceinline__ int r0() { return tid() / 32 / WQ * 32; }
  static __device__ __forceinline__ int g() { return tid() % 32 / 4; }
  static __device__ __forceinline__ int t() { return tid() % 4; }
  __device__ __forceinline__ int q(int jq) const { return q0() + (jq >> 1) * 8 + 2 * t() + (jq & 1); }
  __device__ __forceinline__ int r(int jr) const { return r0() + (jr >> 1) * 16 + g() + (jr & 1) * 8; }
  // A batch's factors are formed for whole mma steps, those past its n steps 0.
  static __device__ __forceinline__ int padded(int n) { return (n + 7) / 8 * 8; }
  __device__ __forceinline__ void read_sources(const T* row, T (&x)[NQ]) const {
#pragma unroll
    for (int n = 0; n < NQ / 2; ++n) {
      const float2 v = *reinterpret_cast<const float2*>(row + q(2 * n));
      x[2 * n] = v.x, x[2 * n + 1] = v.y;
    }
  }
  __device__ __forceinline__ void read_rows(const T* row, T (&y)[NR]) const {
#pragma unroll
    for (int jr = 0; jr < NR; ++jr) y[jr] = row[r(jr)];
  }
  __device__ __forceinline__ void sum(T (&acc)[NR][NQ], const T* xf, const T* yf, int n) const {
    if constexpr (JB_HAS_MMA_TF32_BF16) {
#pragma unroll 1
      for (int k = 0; k < n; k += 8) {
        // A (m16 × k8, the Y factors): a0 (row g, step t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4); B (k8 ×
        // n8, the X factors): b0 (step t, source g), b1 (t + 4, g).
        const T* ya = yf + (k + t()) * RP + r0() + g();
        const T* xb = xf + (k + t()) * CQ + q0() + g();
        // One m16 at a time, each n8's X split again for the second: fewer registers held across the products.
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          const Tf32Pair a0 = finite_tf32_split(ya[m * 16]), a1 = finite_tf32_split(ya[m * 16 + 8]),
                         a2 = finite_tf32_split(ya[4 * RP + m * 16]), a3 = finite_tf32_split(ya[4 * RP + m * 16 + 8]);
          const unsigned ah[4] = {a0.hi, a1.hi, a2.hi, a3.hi}, al[4] = {a0.lo, a1.lo, a2.lo, a3.lo};
#pragma unroll
          for (int nn = 0; nn < 4; ++nn) {
            const Tf32Pair x = finite_tf32_split(xb[nn * 8]), y = finite_tf32_split(xb[4 * CQ + nn * 8]);
            float d[4] = {0.f, 0.f, 0.f, 0.f};
            mma_tf32(d, al, x.hi, y.hi);
            mma_tf32(d, ah, x.lo, y.lo);
            mma_tf32(d, ah, x.hi, y.hi);
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[2 * m + e / 2][2 * nn + e % 2] += d[e];
          }
        }
      }
    } else {
      for (int u = 0; u < n; ++u) {
        T x[NQ], y[NR];
        read_sources(xf + u * CQ, x);
        read_rows(yf + u * RP, y);
#pragma unroll
        for (int jr = 0; jr < NR; ++jr)
#pragma unroll
          for (int jq = 0; jq < NQ; ++jq) acc[jr][jq] += x[jq] * y[jr];
      }
    }
  }
};

// The tile of a kind of block: the mma kind's, or the narrow and wide kinds' (which differ in C, NT and ROWS alone).
template <int KIND, int C, int NT, int ROWS, class T, bool LOG> struct EdgeTileOf {
  using type = EdgeTile<C, NT, ROWS, T, LOG>;
};
template <int C, int NT, int ROWS, class T, bool LOG> struct EdgeTileOf<kEdgeMma, C, NT, ROWS, T, LOG> {
  using type = EdgeMmaTile<C, NT, ROWS, T>;
};

} // namespace jb
