// The stepped strategy's fused forms on the host (chain_fused_steps.hpp).
#include "runtime/chain_fused_steps.hpp"

#include <algorithm>
#include <iterator>
#include <limits>

#include "generator/step_source.hpp"
#include "jitbmm/errors.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/launch.hpp"
#include "runtime/scratch.hpp"
#include "runtime/tuner/build_ahead.hpp"
#include "support/checked_size.hpp"
#include "support/log.hpp"

namespace jitbmm {

namespace {

// A position's row tiles (sequences) and column tiles (states) of the fused form, and all its tiles.
int64_t fused_column_tiles(const ChainProblem& p) { return (p.C + jb::kFusedCols - 1) / jb::kFusedCols; }
int64_t fused_row_tiles(const ChainProblem& p) { return (p.B + jb::kFusedRows - 1) / jb::kFusedRows; }
int64_t fused_tiles(const ChainProblem& p) { return fused_row_tiles(p) * fused_column_tiles(p); }

std::size_t piece_bytes(std::initializer_list<int64_t> sizes) {
  return std::size_t(checked_product(sizes, "chain: workspace"));
}

// A fused pass's scratch after its table, counted and carved in one order (templates/chain/params.cuh names them).
struct FusedPieces {
  std::size_t sizes[10];
  explicit FusedPieces(const ChainProblem& p) {
    const int64_t tiles = fused_column_tiles(p);
    const bool log = p.semiring == Semiring::log;
    const int64_t factors = p.T > 1 && log ? p.C : 0; // no step, no table; max_plus reads the table itself
    // The barriers: a slot of 64 words for the grid, one for each row of tiles.
    const int64_t barriers = 1 + fused_row_tiles(p);
    const std::size_t list[10] = {piece_bytes({factors, p.C, 4}), piece_bytes({p.C, 4}),
                                  piece_bytes({2, p.B, p.C, 4}),  piece_bytes({2, p.B, tiles, 4}),
                                  piece_bytes({p.B, tiles, 4}),   piece_bytes({log ? 0 : p.B, tiles, 4}),
                                  piece_bytes({p.B, 4}),          piece_bytes({p.B, 8}),
                                  piece_bytes({2, p.B, 8}),       piece_bytes({barriers, 64, 4})};
    std::copy(std::begin(list), std::end(list), sizes);
  }
  std::size_t bytes() const {
    ScratchSize size;
    for (const std::size_t n : sizes) size.add(n, "workspace");
    return size.bytes();
  }
  void carve(char* at, jb::ChainParams& q) const {
    void* pieces[10];
    for (int i = 0; i < 10; ++i) { // null where the semiring takes no such piece
      pieces[i] = sizes[i] ? at : nullptr;
      at += ScratchSize().add(sizes[i], "workspace").bytes();
    }
    q.factors = pieces[0];
    q.col_max = pieces[1];
    q.msg = pieces[2];
    q.row_maxima = pieces[3];
    q.row_sums = pieces[4];
    q.row_args = static_cast<int*>(pieces[5]);
    q.ends = pieces[6];
    q.end_offsets = static_cast<double*>(pieces[7]);
    q.offsets = static_cast<double*>(pieces[8]);
    q.barrier = static_cast<unsigned*>(pieces[9]);
  }
};

} // namespace

bool shared_table(const ChainProblem& p) { return p.form == ChainForm::hmm && !p.batched_transitions; }

bool fused_steps_apply(const ChainProblem& p) {
  return shared_table(p) && (p.semiring == Semiring::log || p.semiring == Semiring::max_plus) && p.dtype != DType::f64;
}

bool default_fused_steps(const ChainProblem& p, int sm_count) {
  // The fused form computes a block of 32 × 64 outputs an SM: it wins against a product and its launches a position
  // where each SM has at most one such tile of a step and there are enough of them (up to about 576 states its resident
  // entries keep the tile's table side in shared memory and, from sm_80 on, form the terms on tensor cores); with more
  // tiles than SMs a block forms several one after another in FMA, and the log products win. Log's floor of 16 tiles
  // was measured against the sequential kernels, which the plan takes below it (at B = 64, C = 512 the fused form was
  // three times faster forward and five times with the backward; the products' form was not measured there).
  // Fewer than 64 sequences leave most of a tile's rows empty; not measured, they keep the products. max_plus's fused
  // form takes more instructions a term than log's one multiply-add (a max, and a source kept a four), so a step of its
  // own is no faster than the tiled max-plus product; but it keeps the back-pointers at little cost, where the product
  // that keeps them is much slower. Rated with the path (a Viterbi decode, and the backward, read it), it wins from 128
  // states up to two tiles an SM. From kFusedLogStates states log's products in parts win even there: the fused form's
  // streaming entries stage a tile's table side through shared memory every position, where the products make the
  // table's factors once a pass (measured at 64 × 4096; at 64 × 1024 the fused form still wins, and between them
  // nothing was measured). Fitted on jitbmm bench --chain C --hmm --stepped on an H200 (132 SMs, T = 32;
  // bench/RESULTS.md).
  const int64_t tiles = fused_tiles(p), sms = std::max(1, sm_count);
  if (p.semiring == Semiring::max_plus)
    return fused_steps_apply(p) && p.B >= 64 && p.C >= 128 && tiles >= 32 && tiles <= 2 * sms;
  constexpr int64_t kFusedLogStates = 4096;
  return fused_steps_apply(p) && p.B >= 64 && p.C < kFusedLogStates && tiles >= 16 && tiles <= sms;
}

namespace {

// The units of the passes a plan of `problem` runs: the forward's, and log's backward messages'; `paired`: log's
// resident entries compiled for two blocks an SM.
std::vector<GeneratedKernel> pass_units(const ChainProblem& problem, bool resident, bool paired = false) {
  std::vector<GeneratedKernel> out;
  for (const bool beta : {false, true})
    if (!beta || problem.semiring == Semiring::log)
      out.push_back(emit_fused_step_kernel(problem.semiring, problem.dtype, beta, resident, paired));
  return out;
}

// A resident block's dynamic shared memory: its tile's table side.
int64_t resident_bytes(const ChainProblem& problem) {
  return jb::fused_resident_floats(problem.C) * int64_t(sizeof(float));
}

bool resident_fits(const ChainProblem& problem, const DeviceInfo& device, bool streamed) {
  return !streamed && resident_bytes(problem) <= device.max_shared_per_block_optin &&
         jb::fused_sources(problem.C) <= jb::kFusedResidentSources;
}

// Whether a saving forward of `problem` may run its passes side by side in the paired entries: log's resident passes
// of few states whose tiles take more than half the SMs (and at most all of them, a block each), where blocks of the
// others, each a whole SM's registers, cannot hold both passes at once. The paired entries form a pass more slowly
// alone (a few words a thread kept in local memory), so the forward alone, and a saving forward whose passes run one
// after the other, keep the others.
bool paired_saving(const ChainProblem& problem, const DeviceInfo& device, bool streamed) {
  return resident_fits(problem, device, streamed) && fused_step_paired(problem.semiring, problem.C) &&
         2 * fused_tiles(problem) > std::max(1, device.sm_count) && fused_tiles(problem) <= device.sm_count;
}

// How many clusters of a row of tiles each the device holds at once of the log resident passes (the fewer of the
// two passes' units): 0 where the GPU has no clusters, a row is not a portable cluster (at most 8 blocks: up to 512
// states), or the driver cannot say.
int64_t held_row_clusters(const ChainProblem& problem, const DeviceInfo& device,
                          const std::shared_ptr<const LoadedKernel> (&kernels)[2], int threads, unsigned shared) {
  const int64_t row = fused_column_tiles(problem), tiles = fused_tiles(problem);
  if (problem.semiring != Semiring::log || !device.features.has(kClusters) || row > 8) return 0;
  int64_t fewest = std::numeric_limits<int64_t>::max();
  for (const auto& kernel : kernels) {
    if (!kernel) continue;
    try {
      fewest = std::min<int64_t>(
          fewest, max_active_clusters(*kernel, "", unsigned(tiles), unsigned(threads), unsigned(row), shared));
    } catch (const CudaError&) { // a driver or partition that does not place clusters
      return 0;
    }
  }
  return fewest == std::numeric_limits<int64_t>::max() ? 0 : fewest;
}

} // namespace

std::vector<GeneratedKernel> FusedSteps::units(const ChainProblem& problem, const DeviceInfo& device, bool streamed) {
  std::vector<GeneratedKernel> out = pass_units(problem, resident_fits(problem, device, streamed));
  if (paired_saving(problem, device, streamed))
    for (GeneratedKernel& unit : pass_units(problem, true, true)) out.push_back(std::move(unit));
  return out;
}

FusedSteps::FusedSteps(const ChainProblem& problem, const DeviceInfo& device, bool streamed) : problem_(problem) {
  ScopedContext scope(device.context);
  const int64_t tiles = fused_tiles(problem), sms = std::max(1, device.sm_count);
  const auto load = [&](bool resident, bool paired, std::shared_ptr<const LoadedKernel>(&into)[2]) {
    const std::vector<GeneratedKernel> units = pass_units(problem, resident, paired);
    build_ahead(device, units);
    for (std::size_t i = 0; i < units.size(); ++i) into[i] = load_generated(device, units[i]);
  };
  // Every block resident at once (the grid barrier), each owning its tiles for the whole pass: `threads` and
  // `shared` bytes of dynamic shared memory a block. The passes' dynamic shared memory's limit is raised once, to
  // all the device allows: plans of other sizes share the units and take other amounts, so that no plan's launch
  // depends on another's setting.
  const auto blocks = [&](int threads, unsigned shared, const std::shared_ptr<const LoadedKernel>(&kernels)[2]) {
    int per_sm = 1 << 30;
    for (const auto& kernel : kernels) {
      if (!kernel) continue; // max_plus has no backward messages
      const CUfunction f = kernel->function;
      int n = 0, fixed = 0;
      check(driver().cuFuncGetAttribute(&fixed, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f), "cuFuncGetAttribute");
      if (shared && int64_t(shared) + fixed > device.max_shared_per_block_optin) return int64_t(0);
      if (shared)
        check(driver().cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                          device.max_shared_per_block_optin - fixed),
              "cuFuncSetAttribute");
      check(driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, threads, shared),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor");
      per_sm = std::min(per_sm, n);
    }
    return int64_t(per_sm) * sms;
  };
  // The resident passes where every tile can have a block to itself with its table's side in shared memory: the
  // sources of a product are then read from shared memory alone.
  if (resident_fits(problem, device, streamed)) {
    load(true, false, kernels_);
    const int threads = jb::fused_resident_threads(problem.semiring == Semiring::log);
    const unsigned shared = unsigned(resident_bytes(problem));
    if (blocks(threads, shared, kernels_) >= tiles) {
      block_ = threads;
      shared_ = shared;
      grid_ = int(tiles);
      // The blocks of a row of tiles (the sequences whose messages they read) meet at a cluster's barrier where the
      // device holds every row's cluster at once (a row left to a second wave would double the pass), else in global
      // memory. Log's two passes run side by side where both passes' clusters fit at once: a pass's time is mostly
      // its positions' waits, which the other pass's blocks fill.
      const int64_t rows = fused_row_tiles(problem),
                    held = held_row_clusters(problem, device, kernels_, threads, shared);
      cluster_ = held >= rows ? int(fused_column_tiles(problem)) : 0;
      side_by_side_ = cluster_ > 0 && kernels_[1] && held >= 2 * rows;
      if (!side_by_side_ && paired_saving(problem, device, streamed)) {
        load(true, true, paired_);
        side_by_side_ = blocks(threads, shared, paired_) >= 2 * tiles &&
                        held_row_clusters(problem, device, paired_, threads, shared) >= 2 * rows;
        if (!side_by_side_) paired_[0] = paired_[1] = nullptr;
      }
      log_message(LogLevel::debug, "fused steps " + name() + ": " + std::to_string(grid_) + " blocks, " +
                                       (cluster_ ? "each row of tiles a cluster of " + std::to_string(cluster_)
                                                 : std::string("one cooperative grid")) +
                                       (side_by_side_ ? ", the two passes side by side" : "") +
                                       (paired_[0] ? " in the paired entries" : ""));
      return;
    }
    kernels_[0] = kernels_[1] = nullptr;
  }
  load(false, false, kernels_);
  grid_ = int(std::clamp<int64_t>(tiles, 1, std::max<int64_t>(1, blocks(jb::kFusedBlock, 0, kernels_))));
}

std::size_t FusedSteps::workspace_bytes(const ChainProblem& problem) { return FusedPieces(problem).bytes(); }

void FusedSteps::pass(jb::ChainParams params, bool beta, const void* table, void* scratch, CUstream stream,
                      bool beside) const {
  const ChainProblem& p = problem_;
  const FusedPieces pieces(p);
  params.beta = beta;
  pieces.carve(static_cast<char*>(scratch), params);
  const bool paired = beside && paired_[0];
  const LoadedKernel& kernel = *(paired ? paired_ : kernels_)[beta ? 1 : 0];
  if (p.T > 1) {
    params.table = table;
    const unsigned grid[3] = {unsigned((p.C + 31) / 32), 1, 1}, block[3] = {256, 1, 1};
    void* args[] = {&params};
    jitbmm::launch(kernel, "_factors", grid, block, args, stream);
  }
  check(driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(params.barrier), 0, pieces.sizes[9], stream),
        "cuMemsetD8Async");
  // The paired entries' clusters: a row of tiles each, as the others' where they are clusters (held_row_clusters).
  const int cluster = paired ? int(fused_column_tiles(p)) : cluster_;
  params.cluster_rows = cluster > 0;
  void* args[] = {&params};
  if (cluster)
    launch_clustered(kernel, "", unsigned(grid_), unsigned(block_), unsigned(cluster), args, stream, shared_);
  else
    launch_cooperative(kernel, "", unsigned(grid_), unsigned(block_), args, stream, shared_);
}

} // namespace jitbmm
