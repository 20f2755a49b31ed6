// The epilogue every exp_matmul product shares (the overview is in exp_matmul/product.cuh): the block's line maxima
// staged (em_stage_lines), tiles whose sums are all 0 found before any is formed (em_tile_void), each output's log s
// plus its shifts written or reported for repair (EmFinish), and the repair tiles flagged (EmFlagged).
#pragma once

#include "core/async_copy.cuh"
#include "exp_matmul/factors.cuh"

namespace jb {

// The block's row and column maxima and masks, staged in shared memory for the epilogue by THREADS threads, this
// one numbered tid among them. ASYNC: the lines inside the output by cp.async (copy_async), committed as one
// group, so that their loads hold no registers and the thread goes on; it calls copy_wait_all before the barrier
// that precedes their use.
template <class T, class I, int BM, int BN, int THREADS, bool ASYNC = false>
__device__ __forceinline__ void em_stage_lines(const BmmParams& p, const EmView<T>& v, I batch, I m0, I n0, T* sh_a,
                                               T* sh_b, EmLine* line_a, EmLine* line_b, int tid) {
  const EmLine none = {0ull, 0x7fffffff, -1};
  const I ab = v.a_batches == 1 ? 0 : batch, bb = v.b_batches == 1 ? 0 : batch;
  const auto stage = [&](T* max_at, EmLine* line_at, bool in, const T* max_from, const EmLine* line_from) {
    if (ASYNC && in) {
      copy_async<sizeof(T)>(max_at, max_from);
      copy_async<sizeof(EmLine)>(line_at, line_from);
    } else {
      *max_at = in ? *max_from : (T)0;
      *line_at = in ? *line_from : none;
    }
  };
  for (int l = tid; l < BM + BN; l += THREADS) {
    if (l < BM) {
      const I i = m0 + l;
      stage(&sh_a[l], &line_a[l], i < (I)p.M, &v.row_max[ab * (I)p.M + i], &v.row_line[ab * (I)p.M + i]);
    } else {
      const I j = n0 + (l - BM);
      stage(&sh_b[l - BM], &line_b[l - BM], j < (I)p.N, &v.col_max[bb * (I)p.N + j], &v.col_line[bb * (I)p.N + j]);
    }
  }
  if (ASYNC) copy_commit();
}
// Whether every line this thread staged (em_stage_lines, its copies landed) has a max below +inf: no NaN or +inf in
// the row or column (lines outside the output hold 0).
template <class T, int BM, int BN, int THREADS>
__device__ __forceinline__ bool em_staged_plain(const T* sh_a, const T* sh_b, int tid) {
  bool plain = true;
  for (int l = tid; l < BM + BN; l += THREADS) plain &= (l < BM ? sh_a[l] : sh_b[l - BM]) < Num<T>::inf();
  return plain;
}

// Whether a tile's sums are all 0 before any is formed: every line of a in it, or every line of b, has a max that is
// not finite, so its factors are 0 (em_put_factors) whatever the other side's are. Masked operands (a log semiring's
// structural zeros, −inf) give such tiles, and the epilogue then writes them exactly as it would the products' zeros.
// In two steps, so that a consumer can load the next tile's maxima while it finishes the tile before: a lane's
// share of the tile's line maxima (lines outside the output count as −inf, as their factors are 0), then the
// verdict, a whole warp's; every warp reading the same tile reads the same maxima, so all agree.
template <class T, int BM, int BN> struct EmTileLines {
  T row[BM / 32], col[BN / 32];
};
template <class T, class I, int BM, int BN>
__device__ __forceinline__ EmTileLines<T, BM, BN> em_tile_lines(const BmmParams& p, const EmView<T>& v, I batch, I m0,
                                                                I n0) {
  const int lane = threadIdx.x % 32;
  const I ab = v.a_batches == 1 ? 0 : batch, bb = v.b_batches == 1 ? 0 : batch;
  EmTileLines<T, BM, BN> x;
#pragma unroll
  for (int i = 0; i < BM / 32; ++i) {
    const I r = m0 + (I)(lane + 32 * i);
    x.row[i] = r < (I)p.M ? v.row_max[ab * (I)p.M + r] : Num<T>::neg_inf();
  }
#pragma unroll
  for (int i = 0; i < BN / 32; ++i) {
    const I c = n0 + (I)(lane + 32 * i);
    x.col[i] = c < (I)p.N ? v.col_max[bb * (I)p.N + c] : Num<T>::neg_inf();
  }
  return x;
}
template <class T, int BM, int BN> __device__ __forceinline__ bool em_tile_void(const EmTileLines<T, BM, BN>& x) {
  bool rows = true, cols = true;
#pragma unroll
  for (int i = 0; i < BM / 32; ++i) rows &= !(fabs(x.row[i]) < Num<T>::inf());
#pragma unroll
  for (int i = 0; i < BN / 32; ++i) cols &= !(fabs(x.col[i]) < Num<T>::inf());
  return __all_sync(0xffffffffu, rows) || __all_sync(0xffffffffu, cols);
}

// log s plus the shift (am + bm), for s in the guard's range, a positive normal number: s = f · 2^e with f in
// [0.5, 1), so log s = (e + log2 f) · ln 2 and log2 s − 2h = (e − 2h) + log2 f keeps all its digits although log2 s
// itself lies near 2h (a plain log2(s) would carry its rounding at the scale of 2h). `ebias` is 2^23 + 126 + 2h: e − 2h
// is the exponent field minus 126 + 2h, exact in f32 as 2^23 + field − ebias. log2 f on the exp unit (lg2.approx,
// absolute error below 2^-22 on [0.5, 1); 1.2e-7 after the ln 2) is far inside f32's 1e-5 of max(1, |out|).
__device__ __forceinline__ float em_log(float s, float shift, float ebias) {
  const unsigned u = __float_as_uint(s);
  const float e = __uint_as_float((u >> 23) + 0x4b000000u) - ebias;
  return fmaf(e + lg2_approx(__uint_as_float((u & 0x007fffffu) | 0x3f000000u)), Num<float>::ln2(), shift);
}
// The same for an f16 or bf16 output (the wgmma epilogue's, any form), in three instructions: lg2 of s itself, `shift`
// holding −2h·ln 2 besides the maxima (EmFinish::half_shift). Its rounding at the scale of log2 s (below 2^-17 in log2
// units, as log2 s < 128) and lg2.approx's own 2^-22 add under 1e-5 to the output: nothing beside the 1e-2 of the half
// types' contract (of which the BF16 forms' bound, exp_matmul/bf16.cuh, leaves 0.0061 to spare).
__device__ __forceinline__ float em_log_half(float s, float shift) {
  return fmaf(lg2_approx(s), Num<float>::ln2(), shift);
}
// Whether s lies in [lo, +inf), lo_bits the bits of a positive normal lo: one unsigned compare of the bits (0,
// negative values and NaN fall outside).
__device__ __forceinline__ bool em_in_range(float s, unsigned lo_bits) {
  return __float_as_uint(s) - lo_bits < 0x7f800000u - lo_bits;
}
__device__ __forceinline__ double em_log(double s, double shift, double ebias) {
  int e;
  const double f = frexp(s, &e);
  return shift + ((double)e - (ebias - 8388734.0) + ::log2(f)) * Num<double>::ln2(); // 8388734 = 2^23 + 126
}

// A store when `go` holds, as one predicated instruction: a branch around it would cost the epilogue a convergence
// barrier per output. (The output is global memory; nothing the kernel reads aliases it.)
#define JB_EM_STORE_IF(TYPE, PTX, CONSTRAINT, VALUE)                                                                   \
  __device__ __forceinline__ void em_store_if(bool go, TYPE* at, TYPE v) {                                             \
    asm volatile("{\n.reg .pred p;\n.reg .u64 g;\nsetp.ne.b32 p, %0, 0;\ncvta.to.global.u64 g, %1;\n"                  \
                 "@p st.global." PTX " [g], %2;\n}\n" ::"r"((int)go),                                                  \
                 "l"(at), CONSTRAINT(VALUE));                                                                          \
  }
JB_EM_STORE_IF(float, "f32", "f", v)
JB_EM_STORE_IF(double, "f64", "d", v)
JB_EM_STORE_IF(f16, "b16", "h", v.bits)
JB_EM_STORE_IF(bf16, "b16", "h", v.bits)
#undef JB_EM_STORE_IF

// The epilogue of every exp_matmul product, per output: log s + the shifts written, or the output reported for
// repair. common() takes the usual case, s in [threshold, +inf) in a plain row and column (inside the output, its max
// neither NaN nor +inf), in a few instructions and no branch (em_log, a predicated store); rare() decides the rest,
// in the order NaN, +inf, all terms −inf, the guard.
template <class T, class Out, class I> struct EmFinish {
  // A row of a or column of b: its max (natural units), its place in the tile (its staged EmLine), where its outputs
  // lie (a row: its pointer into the output; a column: its offset j·out_col), whether it lies inside the output and
  // whether it is plain.
  struct Row {
    T max;
    Out* at;
    int line;
    bool in, plain;
  };
  struct Col {
    T max;
    I offset;
    int line;
    bool in, plain;
  };
  Out* out;               // the tile's batch of the output
  T threshold, lo, ebias; // lo: the threshold, raised to 2^-126 for f32 (em_log's bit arithmetic needs a normal s)
  const EmLine *line_a, *line_b;
  const BmmParams& p; // the kernel's parameters: read where used, holding no registers
  int headroom;
  __device__ __forceinline__ EmFinish(const BmmParams& p, const EmView<T>& v, I batch, const EmLine* line_a,
                                      const EmLine* line_b)
      : out(static_cast<Out*>(p.out) + batch * (I)p.out_batch), threshold(Num<T>::pow2(v.guard)),
        lo(sizeof(T) == 4 && threshold < (T)1.17549435e-38f ? (T)1.17549435e-38f : threshold),
        ebias((T)(8388608 + 126 + 2 * v.headroom)), line_a(line_a), line_b(line_b), p(p), headroom(v.headroom) {}
  // Row i of the output, line `line` of the tile's staged ones, with its max.
  __device__ __forceinline__ Row row(I i, int line, T max) const {
    const bool in = i < (I)p.M;
    return Row{max, out + i * (I)p.out_row, line, in, in && max < Num<T>::inf()};
  }
  // A column's part of em_log_half's shift: its max less 2h·ln 2.
  __device__ __forceinline__ T half_shift(T col_max) const { return col_max - (T)(2 * headroom) * Num<T>::ln2(); }
  __device__ __forceinline__ Col col(I j, int line, T max) const {
    const bool in = j < (I)p.N;
    return Col{max, j * (I)p.out_col, line, in, in && max < Num<T>::inf()};
  }
  // Whether common() takes the output. (NaN and +inf sums fail s < inf, and 0 fails s ≥ lo > 0.) & rather than &&:
  // no branches.
  __device__ __forceinline__ bool usual(T s, const Row& a, const Col& b) const {
    return a.plain & b.plain & (s >= lo) & (s < Num<T>::inf());
  }
  // Writes the output when usual() holds, and says whether it did.
  __device__ __forceinline__ bool common(T s, const Row& a, const Col& b) const {
    const bool go = usual(s, a, b);
    if (sizeof(T) == 8) { // f64's log2 is a long library routine: only where it is used
      if (go) a.at[b.offset] = from_acc<Out>(em_log(s, a.max + b.max, ebias));
    } else // f32's is a few instructions: computed for every output, the store alone predicated
      em_store_if(go, a.at + b.offset, from_acc<Out>(em_log(s, a.max + b.max, ebias)));
    return go;
  }
  // Any other output: written (returns false), outside the output (false), or reported for repair (true). Nothing
  // for an output common() took.
  __device__ __forceinline__ bool rare(T s, const Row& a, const Col& b) const {
    if (!a.in || !b.in || usual(s, a, b)) return false;
    T value;
    if (a.max != a.max || b.max != b.max)
      value = Num<T>::nan(); // a NaN in the row of a or the column of b
    else if (a.max == Num<T>::inf() || b.max == Num<T>::inf())
      return true; // +inf in the row or column: the shift says nothing
    else if (em_all_neg_inf(line_a[a.line], line_b[b.line]))
      value = Num<T>::neg_inf(); // every term is −inf
    else if (s >= threshold) {
      int e; // as em_log, for what it leaves: s = +inf, or in [threshold, lo)
      const T f = frexp(s, &e);
      value = (a.max + b.max) + ((T)(e - 2 * headroom) + Num<T>::log2(f)) * Num<T>::ln2();
    } else
      return true; // the guard: too much of s may have underflowed
    a.at[b.offset] = from_acc<Out>(value);
    return false;
  }
};

// N of a thread's outputs, numbered q at compile time: common(q) for each (branch-free), then, if it left any,
// rare(q) for each (which passes over those common() took). Their sums stay live until the end: the kernels pass a
// group at a time.
template <int N, class Common, class Rare>
__device__ __forceinline__ void em_outputs(const Common& common, const Rare& rare) {
  bool all = true;
#pragma unroll
  for (int q = 0; q < N; ++q) all &= common(q);
  if (!all)
#pragma unroll
    for (int q = 0; q < N; ++q) rare(q);
}

// A thread's flagged outputs, counted per 32×32 block of the output (the smallest repair tile) they lie in: RT × CT
// blocks from the one holding (i0, j0). The kernels index the counts by compile-time offsets, so they stay in
// registers. report(), after the epilogue, by every lane of the warp: flags the repair tile of each block that has
// flagged outputs (a plain store: every writer writes 1) and adds them to the count.
template <int RT, int CT> struct EmFlagged {
  unsigned n[RT][CT];
  __device__ __forceinline__ EmFlagged() {
#pragma unroll
    for (int a = 0; a < RT; ++a)
#pragma unroll
      for (int b = 0; b < CT; ++b) n[a][b] = 0u;
  }
  template <class T, class I> __device__ __forceinline__ void report(const EmView<T>& v, I batch, I i0, I j0) const {
    unsigned total = 0u;
#pragma unroll
    for (int a = 0; a < RT; ++a)
#pragma unroll
      for (int b = 0; b < CT; ++b)
        if (n[a][b]) {
          const I ti = (i0 + 32 * a) >> v.repair_shift, tj = (j0 + 32 * b) >> v.repair_shift;
          v.flags[(batch * (I)v.tiles_m + ti) * (I)v.tiles_n + tj] = 1u;
          total += n[a][b];
        }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) total += __shfl_xor_sync(0xffffffffu, total, o);
    if (threadIdx.x % 32 == 0 && total) atomicAdd(v.repaired, (unsigned long long)total);
  }
};
// How many 32-blocks a span of `extent` outputs, starting 32-aligned (or inside one block when shorter), covers.
__host__ __device__ constexpr int em_blocks(int extent) { return extent > 32 ? extent / 32 : 1; }

} // namespace jb
