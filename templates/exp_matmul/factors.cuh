// exp_matmul's workspace as its passes see it (the overview is in exp_matmul/product.cuh): the typed view (em_view), a
// factor's exponent (em_shifted), where and how each FORM stores the factors (em_at, em_put, em_put_chunk), and the
// 16-byte chunks the passes move, as words (EmChunk, EmBits).
#pragma once

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

} // namespace jb
