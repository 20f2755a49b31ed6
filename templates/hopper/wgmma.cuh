// Hopper's warpgroup tensor-core instructions (wgmma, sm_90a only): shared-memory matrix descriptors, the TF32
// product of a 64×N tile over k = 8 and the BF16 one over k = 16, and the fences that order them. A warpgroup is 4
// consecutive warps starting at a warp index divisible by 4; its 128 threads issue each instruction together.
//
// Operand layout (K-major, 128-byte swizzle): a tile of R rows × 32 k is [R][32] 4-byte values (TF32), or R × 64
// k of 2-byte ones (BF16), each row 128 bytes, with row r's 16-byte chunk c stored at chunk c ^ (r % 8) (em_sw128_at
// in exp_matmul/bounds.cuh, which the workspace's panels share). The tile starts 1024-byte aligned; 8-row groups are
// 1024 bytes apart (the descriptor's stride offset). A k step inside the tile (8 TF32 or 16 BF16 values: 32 bytes) is
// the descriptor of the tile's start plus 32·step bytes: the hardware applies the swizzle to the address.
//
// Accumulator fragment (as mma.sync's m16n8 C, repeated over N/8): warp w of the group holds rows 16w..16w+15;
// register 4n + e of lane l is row 16w + l/4 + 8·(e/2), column 8n + 2·(l%4) + e%2.
#pragma once

#include "core/dtypes.cuh"

namespace jb {

// The descriptor of a swizzled K-major tile (or a k step into one) at shared address `addr`.
__device__ __forceinline__ unsigned long long wg_descriptor(unsigned addr) {
  constexpr unsigned long long kLeading = 1, kStride = 1024 >> 4, kSwizzle128 = 1;
  return (unsigned long long)((addr >> 4) & 0x3fff) | (kLeading << 16) | (kStride << 32) | (kSwizzle128 << 62);
}

// The descriptor of an N-major BF16 operand (b as its rows of n lie; the fused product, exp_matmul/fused.cuh) at
// shared address `addr`: blocks of 64 n (128 bytes a k), each 64 k long (8 KiB), 128-byte swizzled by k % 8 (chunk c
// of row k at c ^ (k % 8)). The leading offset steps to the next 64 n (8 KiB), the stride offset to the next 8 k
// (1 KiB); a k step (16 k) is 2 KiB further on.
__device__ __forceinline__ unsigned long long wg_descriptor_n_major(unsigned addr) {
  constexpr unsigned long long kLeading = 8192 >> 4, kStride = 1024 >> 4, kSwizzle128 = 1;
  return (unsigned long long)((addr >> 4) & 0x3fff) | (kLeading << 16) | (kStride << 32) | (kSwizzle128 << 62);
}

// Where accumulator register 4·c8 + e of this lane lies in warpgroup warp-row block `warp`: row and column of the
// 64×N tile (the layout above).
__device__ __forceinline__ int wg_frag_row(int warp, int lane, int e) { return 16 * warp + lane / 4 + 8 * (e / 2); }
__device__ __forceinline__ int wg_frag_col(int lane, int c8, int e) { return 8 * c8 + 2 * (lane % 4) + e % 2; }

// The epilogue's step over the accumulators, 32 columns (16 registers) at a time: the next block's registers move
// to the front. An epilogue that walks them in a loop that is not unrolled, always reading registers 0..15, keeps
// every index a compile-time constant (so they stay registers) while its code is one block's: unrolled over all N/8
// fragments, the finishing code of 128 outputs outgrew the instruction cache (Nsight Compute at 4×2048³, BF16
// 128×256: "no instruction" the top stall, the epilogue more than half the product's time).
template <int R> __device__ __forceinline__ void wg_next_block(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i + 16 < R; ++i) d[i] = d[i + 16];
}
// Runs block(0) .. block(N/32 − 1), each finishing registers 0..15 and calling wg_next_block. The loop's registers
// all stay live across it, so at N = 256 (128 accumulators) the first two blocks run unrolled before it: their
// registers are free by then, and the loop fits beside the rest without spilling.
template <int N, class Block> __device__ __forceinline__ void wg_epilogue_blocks(const Block& block) {
  constexpr int kPeeled = N > 192 ? (N - 192) / 32 : 0;
#pragma unroll
  for (int b = 0; b < kPeeled; ++b) block(b);
#pragma unroll 1
  for (int b = kPeeled; b < N / 32; ++b) block(b);
}

// A store of 8 or 16 bytes where `go` holds (one predicated instruction); `at` is global memory aligned to the size.
__device__ __forceinline__ void wg_store_if(bool go, void* at, unsigned x, unsigned y) {
  asm volatile("{\n.reg .pred p;\n.reg .u64 g;\nsetp.ne.b32 p, %0, 0;\ncvta.to.global.u64 g, %1;\n"
               "@p st.global.v2.b32 [g], {%2, %3};\n}\n" ::"r"((int)go),
               "l"(at), "r"(x), "r"(y)
               : "memory");
}
__device__ __forceinline__ void wg_store_if(bool go, void* at, unsigned x, unsigned y, unsigned z, unsigned w) {
  asm volatile("{\n.reg .pred p;\n.reg .u64 g;\nsetp.ne.b32 p, %0, 0;\ncvta.to.global.u64 g, %1;\n"
               "@p st.global.v4.b32 [g], {%2, %3, %4, %5};\n}\n" ::"r"((int)go),
               "l"(at), "r"(x), "r"(y), "r"(z), "r"(w)
               : "memory");
}

// Stores a warp's 16 × 32 block of outputs, 2- or 4-byte values of Out, in whole 32-byte sectors. value(r) is the
// lane's output in the block's fragment register r (4·c8 + e: row l/4 + 8·(e/2), column 8·c8 + 2·(l%4) + e%2, as
// above), asked for as it is stored, so few are live at once; row[h] points at the block's first column in the lane's
// row h (16-byte aligned), written where in[h] holds. The fragment's own stores would write 4 or 8 bytes of each
// sector. Here lanes l and l ^ 1 trade pairs: of groups c8 = 2i and 2i + 1, lane l keeps c8 = 2i + l % 2, whose
// columns 8·c8 + 4·(l%4/2) .. + 3 it then holds, and the quad's four lanes store 16 consecutive columns at once.
template <class Out, class Value>
__device__ __forceinline__ void wg_store_block(const Value& value, Out* const (&row)[2], const bool (&in)[2]) {
  static_assert(sizeof(Out) == 2 || sizeof(Out) == 4, "2- or 4-byte outputs");
  const int c = threadIdx.x % 4;
  const bool lo = c & 1;
  // A pair of adjacent outputs as the words it is stored in.
  struct Pair {
    unsigned w[sizeof(Out) / 2];
  };
  const auto pair = [&](int r) {
    Pair x;
    if constexpr (sizeof(Out) == 2)
      x.w[0] = pack_pair<Out>(value(r), value(r + 1));
    else
      x.w[0] = __float_as_uint(value(r)), x.w[1] = __float_as_uint(value(r + 1));
    return x;
  };
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const Pair even = pair(8 * i + 2 * h), odd = pair(8 * i + 2 * h + 4); // groups 2i and 2i + 1
      Pair keep, got;
#pragma unroll
      for (int u = 0; u < (int)sizeof(Out) / 2; ++u) {
        keep.w[u] = lo ? odd.w[u] : even.w[u];
        got.w[u] = __shfl_xor_sync(0xffffffffu, lo ? even.w[u] : odd.w[u], 1);
      }
      const Pair& first = lo ? got : keep; // the pair of the even lane: the lower columns
      const Pair& second = lo ? keep : got;
      Out* const at = row[h] + 8 * (2 * i + lo) + 4 * (c / 2);
      if constexpr (sizeof(Out) == 2) wg_store_if(in[h], at, first.w[0], second.w[0]);
      else wg_store_if(in[h], at, first.w[0], first.w[1], second.w[0], second.w[1]);
    }
}

// Moves registers between a block's warpgroups (sm_90a; the kernel must be compiled with a register cap, as
// __launch_bounds__(threads, 1) sets): each thread of the calling warpgroup gives its count up to N, or raises it to
// N. Every warpgroup's role must be one branch of the kernel for ptxas to apply it.
template <int N> __device__ __forceinline__ void wg_release_registers() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
#endif
}
template <int N> __device__ __forceinline__ void wg_claim_registers() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
#endif
}

// Before the first wgmma that reads registers other instructions wrote (the accumulators after an epilogue or an add).
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Waits until at most N committed groups of this warpgroup are still in flight.
template <int N> __device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Shared memory written by the generic proxy (stores, cp.async) that the tensor cores read next.
__device__ __forceinline__ void wg_fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// Keeps the compiler from moving a register's uses across an asynchronous wgmma that writes it.
template <int R> __device__ __forceinline__ void wg_pin(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The accumulator operands of one 64×N wgmma, N/2 registers of d: their names in the instruction and their
// constraints (d[0..7] at JB_WG_D8(0)). Macros, because an asm statement takes only literals.
#define JB_WG_D8(o)                                                                                                    \
  "+f"(d[o]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]), "+f"(d[o + 6]),          \
      "+f"(d[o + 7])
#define JB_WG_D32 JB_WG_D8(0), JB_WG_D8(8), JB_WG_D8(16), JB_WG_D8(24)
#define JB_WG_D64 JB_WG_D32, JB_WG_D8(32), JB_WG_D8(40), JB_WG_D8(48), JB_WG_D8(56)
#define JB_WG_D128                                                                                                     \
  JB_WG_D64, JB_WG_D8(64), JB_WG_D8(72), JB_WG_D8(80), JB_WG_D8(88), JB_WG_D8(96), JB_WG_D8(104), JB_WG_D8(112),       \
      JB_WG_D8(120)
#define JB_WG_LIST32                                                                                                   \
  "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,"                     \
  "%26,%27,%28,%29,%30,%31"
#define JB_WG_LIST64                                                                                                   \
  JB_WG_LIST32 ",%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,"                         \
               "%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define JB_WG_LIST128                                                                                                  \
  JB_WG_LIST64 ",%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,"     \
               "%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,"    \
               "%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
// NAME(d, a, b, accumulate), overloaded on d's R registers (N = 2R): D (+)= A·Bᵀ by the instruction SHAPE_TYPES (its
// operands after the predicate: TAIL) for descriptors a and b; R accumulator registers, whose constraints are D and
// names LIST; "%A" is a's operand number, R, and b and accumulate follow it.
#define JB_WG_MMA(NAME, R, SHAPE_TYPES, TAIL, D, LIST, A, B, ACC)                                                      \
  __device__ __forceinline__ void NAME(float(&d)[R], unsigned long long a, unsigned long long b, int accumulate) {     \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" ACC ", 0;\n"                                                     \
                 "wgmma.mma_async.sync.aligned." SHAPE_TYPES " {" LIST "}, %" A ", %" B ", p, " TAIL ";\n}\n"          \
                 : D                                                                                                   \
                 : "l"(a), "l"(b), "r"(accumulate));                                                                   \
  }
// TF32: k = 8 a step; the scales of a and b are 1 (K-major operands take no transpose immediates).
JB_WG_MMA(wg_mma_tf32, 32, "m64n64k8.f32.tf32.tf32", "1, 1", JB_WG_D32, JB_WG_LIST32, "32", "33", "34")
JB_WG_MMA(wg_mma_tf32, 64, "m64n128k8.f32.tf32.tf32", "1, 1", JB_WG_D64, JB_WG_LIST64, "64", "65", "66")
JB_WG_MMA(wg_mma_tf32, 128, "m64n256k8.f32.tf32.tf32", "1, 1", JB_WG_D128, JB_WG_LIST128, "128", "129", "130")
// BF16: k = 16 a step (the same 32 bytes of each line); scales 1, both operands K-major (transpose 0).
JB_WG_MMA(wg_mma_bf16, 32, "m64n64k16.f32.bf16.bf16", "1, 1, 0, 0", JB_WG_D32, JB_WG_LIST32, "32", "33", "34")
JB_WG_MMA(wg_mma_bf16, 64, "m64n128k16.f32.bf16.bf16", "1, 1, 0, 0", JB_WG_D64, JB_WG_LIST64, "64", "65", "66")
JB_WG_MMA(wg_mma_bf16, 128, "m64n256k16.f32.bf16.bf16", "1, 1, 0, 0", JB_WG_D128, JB_WG_LIST128, "128", "129", "130")
// BF16 with b N-major (transpose 1: wg_descriptor_n_major).
JB_WG_MMA(wg_mma_bf16_nb, 32, "m64n64k16.f32.bf16.bf16", "1, 1, 0, 1", JB_WG_D32, JB_WG_LIST32, "32", "33", "34")
JB_WG_MMA(wg_mma_bf16_nb, 64, "m64n128k16.f32.bf16.bf16", "1, 1, 0, 1", JB_WG_D64, JB_WG_LIST64, "64", "65", "66")
JB_WG_MMA(wg_mma_bf16_nb, 128, "m64n256k16.f32.bf16.bf16", "1, 1, 0, 1", JB_WG_D128, JB_WG_LIST128, "128", "129", "130")
#undef JB_WG_MMA
#undef JB_WG_LIST128
#undef JB_WG_LIST64
#undef JB_WG_LIST32
#undef JB_WG_D128
#undef JB_WG_D64
#undef JB_WG_D32
#undef JB_WG_D8
#endif

// The arithmetic of a wgmma product: what its operands' 4-byte or 2-byte values are, and the 64×N product of
// descriptors a (64 rows) and b (N rows) over one k step, 32 bytes of every line (accumulate = 0 overwrites d).
// Either way a 128-byte line is 4 steps. B_N: b is N-major (BF16 only).
template <class F> struct WgMma {
  typedef F Factor;
  template <int N, bool B_N = false>
  static __device__ __forceinline__ void mma(float (&d)[N / 2], unsigned long long a, unsigned long long b,
                                             int accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(!B_N || sizeof(F) == 2, "N-major operands are BF16");
    if constexpr (sizeof(F) == 4)
      wg_mma_tf32(d, a, b, accumulate);
    else if constexpr (B_N)
      wg_mma_bf16_nb(d, a, b, accumulate);
    else
      wg_mma_bf16(d, a, b, accumulate);
#else
    static_assert(N < 0, "wgmma needs the sm_90a target");
#endif
  }
};
typedef WgMma<float> WgTf32;
typedef WgMma<unsigned short> WgBf16; // BF16 bits

} // namespace jb
