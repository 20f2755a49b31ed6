// KernelSpec: everything that decides the text of one generated kernel. Two equal specs generate the same source;
// anything that changes the source is a field here. Runtime values (sizes, strides, pointers) are not.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "jitbmm/types.hpp"

namespace jitbmm {

// Each strategy is one entry of the strategy table, in its own file generator/strategies/<name>.cpp.
enum class Strategy {
  linear,          // one thread per output, one pass over K with the semiring's online state
  linear_two_pass, // log only: one thread per output, max over K, then Σ exp(t − max)
  warp,            // `lanes` lanes of a warp per output, combined with warp shuffles
  block_tree,      // a block per output, shared-memory tree then warp shuffle
  tiled,           // register-tiled GEMM-style kernel (tile_* / thread_* below)
  split_k,         // tiled over K chunks of `k_chunk`, then a ⊕ pass over the chunks
  scatter,         // backward of the selecting semirings: G sent to the forward's argmax (block_x threads)
  exp_matmul,      // log only: exponentiated operands through a dense matrix product, exact by a guard and a repair
                   // pass (templates/exp_matmul/product.cuh); tile_* / thread_* / math below
  tiled_online,    // log only: tiled with each output's scale kept online, exact on any data in one pass
                   // (templates/tiled/online.cuh); tile_* / thread_* below
  histogram,       // backward of the selecting semirings: scatter's sums binned per gradient line in shared memory,
                   // no atomics, deterministic (templates/grad/histogram.cuh; block_x threads)
  tiled_refine,    // max_plus, min_plus, max_times with argmax: tiled at the speed without argmax, noting each
                   // output's group of 16 k, then the argmax found within it (templates/tiled/refine.cuh)
};
const char* strategy_name(Strategy strategy);
Strategy parse_strategy(const std::string& name);

// What a kernel computes: the product, or the gradient of a loss with respect to a or b (templates/grad/backward.cuh).
// Backward kernels: log and plus_times use `tiled` (a register-tiled reduction over j for grad_a, over i for
// grad_b); max_plus, min_plus and max_times use `histogram`, or `scatter` where K is long (histogram.cpp says when).
enum class Pass { forward, grad_a, grad_b };
const char* pass_name(Pass pass);
Pass parse_pass(const std::string& name);

// exp_matmul's matrix product: FP32/FP64 FMA on the CUDA cores, or tensor cores with TF32 operands: three TF32
// products per term (fp32-level accuracy) or one (about 1e-4 relative: at Precision::fast, or for a kernel whose
// result is f16 or bf16, inside their 1e-2; see single_tf32_allowed), through mma.sync
// (any GPU from sm_80) or through Hopper's warpgroup instructions (wgmma_*: sm_90 only, see arch_specific); or, for
// f16 and bf16 outputs only, BF16 tensor cores: one product of factors rounded to BF16 (about 4e-3 in the log,
// inside the half types' 1e-2: templates/exp_matmul/bf16.cuh), through mma.sync (bf16) or wgmma (wgmma_bf16; and
// wgmma_bf16_fused, whose product makes the factors itself from a and b: templates/exp_matmul/fused.cuh).
enum class Math { fma, tf32x3, tf32, wgmma_tf32x3, wgmma_tf32, bf16, wgmma_bf16, wgmma_bf16_fused };
const char* math_name(Math math);
Math parse_math(const std::string& name);
int math_count(); // the Math values are 0 .. math_count() - 1
// One TF32 product per term (tf32, wgmma_tf32).
bool single_tf32(Math math);
// Factors rounded to BF16 (bf16, wgmma_bf16, wgmma_bf16_fused): for f16 and bf16 outputs only.
bool bf16_factors(Math math);
bool uses_wgmma(Math math);

struct KernelSpec {
  Semiring semiring = Semiring::log;
  DType dtype = DType::f32;
  DType out_dtype = DType::f32;
  bool with_argmax = false;
  Strategy strategy = Strategy::linear;
  Pass pass = Pass::forward;
  bool index64 = false; // 64-bit element offsets; otherwise every offset must fit in int32
  // linear, linear_two_pass: threads (block_x along N, block_y along M). warp: block_x = lanes per output
  // (2..32, power of two), block_y = outputs per block. block_tree: block_x = threads per output (≥ 64, power of 2).
  int block_x = 32;
  int block_y = 8;
  // tiled, split_k: outputs per block (tile_m × tile_n), K slice staged in shared memory, outputs per thread.
  int tile_m = 128, tile_n = 128, tile_k = 16, thread_m = 8, thread_n = 8;
  // tiled, split_k: __launch_bounds__ minimum blocks per SM (caps registers at 64K / (threads · min_blocks)).
  int min_blocks = 1;
  // exp_matmul: the product's arithmetic. tf32x3 and tf32 read thread_m × thread_n as mma fragments: a warp
  // computes (8·thread_m) × (4·thread_n) outputs. wgmma_*: a warpgroup computes 64 × tile_n outputs, each thread
  // 2 × (tile_n / 4) of them (thread must be 2 × tile_n/4).
  Math math = Math::fma;
  // split_k: K per chunk (a launch-time value, kept here so a spec says everything about how a problem runs).
  int k_chunk = 1024;

  bool operator==(const KernelSpec& o) const;
  bool operator!=(const KernelSpec& o) const { return !(*this == o); }
  int threads() const;
  // The strategy reads the tiled family's fields (tile_*, thread_*, min_blocks) rather than block_x / block_y.
  bool is_tiled() const;
};

// "semiring=log dtype=f32 out=f32 argmax=0 strategy=tiled index64=0 tile=128x128x16 thread=8x8": printed into every
// generated source, so a kernel can always be traced back to its spec. Only the fields the strategy uses appear;
// backward specs add "pass=grad_a" or "pass=grad_b" after the strategy; exp_matmul adds "math=…" at the end.
std::string to_string(const KernelSpec& spec);
std::size_t hash_value(const KernelSpec& spec);
// The inverse of to_string; strict (unknown keys, bad numbers and missing fields are std::invalid_argument), so it
// can read stored tuning decisions without trusting them.
KernelSpec parse_spec(const std::string& text);

// The default backward spec (pass grad_a or grad_b) for a problem; with_argmax of the problem is ignored. With a
// strategy: that backward strategy's defaults (tiled, scatter, exp_matmul; std::invalid_argument when it cannot
// compute the problem).
KernelSpec default_grad_spec(const Problem& problem, Pass pass);
KernelSpec default_grad_spec(const Problem& problem, Pass pass, Strategy strategy);

// A sensible spec for a problem until the autotuner chooses: the tiled kernel for large outputs, split-K for
// few outputs with long K, warp shuffles for few outputs with moderate K, linear otherwise.
KernelSpec default_spec(const Problem& problem);
// The default parameters of one strategy for a problem (the strategy must support it).
KernelSpec default_spec(const Problem& problem, Strategy strategy);

// Throws std::invalid_argument naming the field when `spec` cannot compute `problem` (dtype mismatch, a strategy
// that does not support the semiring or pass, tile parameters out of range, 32-bit indices too narrow). For a
// backward spec, `problem` is the forward problem without argmax.
void check_spec_fits(const KernelSpec& spec, const Problem& problem);
// Throws std::invalid_argument naming the field when `spec` describes no kernel whatever the problem: a field out
// of range, an enum holding none of its values, a thread count no block can have, a strategy without that pass.
// The part of check_spec_fits that needs no problem (a stored decision's specs are checked with it when read).
void check_spec_exists(const KernelSpec& spec);
// Whether the spec's kernel is built for its GPU's architecture-specific target (NVRTC sm_90a): the wgmma forms,
// which run on sm_90 GPUs only (compiling one for another GPU is std::invalid_argument naming the spec).
bool arch_specific(const KernelSpec& spec);
// The dynamic shared memory a block of the spec's main kernel takes (beyond 48 KiB, opted in at launch), 0 for most.
int dynamic_shared_memory_bytes(const KernelSpec& spec);

// The static shared memory a block of the spec's kernel takes (0 for strategies without shared tiles), from its
// strategy's one formula: check_spec_fits allows at most 48 KiB; the tuner drops candidates above a smaller
// device's limit.
int shared_memory_bytes(const KernelSpec& spec);

} // namespace jitbmm

template <> struct std::hash<jitbmm::KernelSpec> {
  std::size_t operator()(const jitbmm::KernelSpec& spec) const { return jitbmm::hash_value(spec); }
};
