// Strategy "split_k": the tiled kernel over chunks of k_chunk terms (grid z: batch × chunk), each chunk's partial
// state into the workspace, then a ⊕ pass over the chunks (templates/tiled/combine.cuh). The default for few outputs with
// long K.
#include "generator/strategies/common.hpp"

#include <algorithm>

#include "support/checked_size.hpp"

namespace jitbmm::strategies {
namespace {

int64_t chunks_of(const KernelSpec& spec, const Problem& p) {
  return p.shape.K > 0 ? (p.shape.K + spec.k_chunk - 1) / spec.k_chunk : 1;
}

int rank(const Problem& p) {
  const Shape& s = p.shape;
  const bool empty = s.K == 0 || outputs_of(p) == 0;
  return !empty && s.M >= 16 && s.N >= 16 && s.K >= 4096 ? 40 : -1;
}

void defaults(KernelSpec& spec, const Problem& p) {
  default_tiles(spec, p);
  // Enough chunks that chunks × outputs fills the GPU a few times over; chunks a multiple of tile_k.
  const Shape& s = p.shape;
  const int64_t outputs = std::max<int64_t>(1, outputs_of(p));
  const int64_t want = std::clamp<int64_t>((int64_t(1) << 21) / outputs, 1, std::max<int64_t>(1, s.K / 256));
  int64_t chunk = (s.K + want - 1) / want;
  chunk = (chunk + spec.tile_k - 1) / spec.tile_k * spec.tile_k;
  spec.k_chunk = static_cast<int>(std::clamp<int64_t>(chunk, spec.tile_k, int64_t(1) << 30));
}

void check(const KernelSpec& spec, const Problem& p) {
  check_tiles(spec, p, tiled_shared_bytes(spec));
  if (spec.k_chunk < 1) reject("k_chunk", "must be positive");
  // The partial results of every chunk: [chunks][B][M][N] accumulators (and argmaxes).
  const Shape& s = p.shape;
  const auto partials = try_product(
      {chunks_of(spec, p), s.B, s.M, s.N, dtype_info(p.dtype).acc_bytes + (p.with_argmax ? 4 : 0)});
  if (!partials || *partials > kMaxOperandBytes)
    reject("k_chunk", "split_k's partial results for " + to_string(s) + " exceed 2^62 bytes; use a larger k_chunk");
}

// The chunks' count is (K + k_chunk - 1) / k_chunk and a chunk ends at k_begin + k_chunk, in the index type.
bool index64(const KernelSpec& spec, const Problem& p) {
  return !fits_index32(p, chunks_of(spec, p), false) || p.shape.K + spec.k_chunk >= kIndex32Limit;
}

std::vector<KernelSpec> candidates(const KernelSpec& base, const Problem& p) {
  std::vector<KernelSpec> out;
  const Shape& s = p.shape;
  if (s.M < 8 || s.N < 8 || s.K < 1024) return out;
  for (int64_t chunks : {8, 32, 128}) {
    KernelSpec sk = base;
    const int64_t chunk = std::max<int64_t>(256, (s.K / chunks + sk.tile_k - 1) / sk.tile_k * sk.tile_k);
    if (chunk >= s.K) continue;
    sk.k_chunk = static_cast<int>(chunk);
    out.push_back(sk);
    sk.tile_m = sk.tile_n = 32, sk.thread_m = sk.thread_n = 2;
    out.push_back(sk);
  }
  return out;
}

Rendering render(const KernelSpec& s) {
  return {{tiled_header(s), "tiled/combine.cuh"},
          "BmmParams",
          {main_entry(s, tiled_call(s)),
           {"_combine", 256, 1,
            "jb::combine_kernel<" + semiring_type(s) + ", " + dtype_info(s.out_dtype).device_type + ", " +
                index_type(s) + ", " + acc_type(s) + ">"}}};
}

LaunchPlan launches(const KernelSpec& spec, const Problem& p) {
  const int64_t chunks = chunks_of(spec, p), outputs = outputs_of(p);
  LaunchPlan plan;
  Launch main;
  tile_grid(main, spec, p.shape.M, p.shape.N, p.shape.B * chunks);
  Launch combine;
  combine.entry = "_combine";
  combine.block[0] = 256;
  combine.grid[0] = grid_stride_blocks(outputs, 256);
  plan.launches = {main, combine};
  plan.k_chunk = spec.k_chunk;
  const int64_t per_output = dtype_info(spec.dtype).acc_bytes + (spec.with_argmax ? 4 : 0);
  plan.workspace_bytes = static_cast<std::size_t>(checked_product({chunks, outputs, per_output}, "split_k workspace"));
  return plan;
}

const RegisterStrategy registered{{Strategy::split_k, "split_k", false, kTileFields | kKChunkField, rank, defaults,
                                   check, index64, candidates, render, launches, tiled_shared_bytes}};

} // namespace
} // namespace jitbmm::strategies
