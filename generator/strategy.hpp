// A strategy is one entry of data. Each lives in its own file, generator/strategies/<name>.cpp, and registers
// itself: which spec fields it reads, its defaults and when it is the default choice, its fit rules, its tuning
// candidates, the device code it renders (entry headers and named entry points) and the launches a problem needs
// (entry, grid, block, workspace, order). kernel_spec.cpp prints, parses and checks any spec through the table,
// emit_source.cpp renders any entry, and one executor in runtime/ runs the launches.
// To add a strategy: docs/architecture.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "generator/entry_point.hpp"
#include "jitbmm/kernel_spec.hpp"

namespace jitbmm {

// The spec fields a strategy reads (and prints): the linear family's block, or the tiled family's block tile,
// thread tile and min_blocks; split_k also its k_chunk, exp_matmul its math.
enum FieldGroup : unsigned { kBlockFields = 1, kTileFields = 2, kKChunkField = 4, kMathField = 8 };

// What a spec renders to: the entry headers (paths under templates/; the generator adds what they #include), the
// argument block and the entry points (the first is the main one).
struct Rendering {
  std::vector<const char*> headers;
  const char* params = "BmmParams"; // or "GradParams": the struct of templates/core/params.cuh every entry takes
  std::vector<EntryPoint> entries;
};

// One launch of a plan.
struct Launch {
  std::string entry; // an EntryPoint suffix
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned dynamic_shared = 0; // bytes of dynamic shared memory per block
  // exp_matmul's repair pass: BmmParams.repair_flags points this many bytes into the workspace.
  static constexpr std::size_t kNoFlags = SIZE_MAX;
  std::size_t repair_flags_at = kNoFlags;
  // A persistent launch: its kernel loops over grid[0] tiles (grid[1] = grid[2] = 1), and the runtime launches at
  // most this many blocks an SM of the device (0: the grid as it is).
  unsigned blocks_per_sm = 0;
  // exp_matmul's prepare pass: its grid[0] where b's factors and maxima are still in the workspace from the plan's
  // previous call (SemiringBMM::run_same_b), the blocks that prepare a alone; 0: the launch always runs whole.
  unsigned grid_same_b = 0;
};

// The launches of one call, in order, and the scratch they share.
struct LaunchPlan {
  std::vector<Launch> launches;
  std::size_t workspace_bytes = 0;
  std::size_t zero_bytes = 0; // the workspace's first bytes zeroed on the stream before the first launch (atomics)
  long long k_chunk = 0;       // BmmParams.k_chunk
};

// Where a call of a strategy with an exact repair pass leaves its counts in the workspace (the prepare pass zeroes
// them, the product's guard adds to them).
struct RepairCounts {
  std::size_t outputs_at = 0; // uint64: the outputs the guard sent to the repair pass
  std::size_t flags_at = 0;   // uint32 per repair tile: nonzero where the tile was repaired
  int64_t tiles = 0;
};

struct StrategyDef {
  Strategy id;
  const char* name; // its spelling in specs, names and the CLI
  bool backward;  // a gradient pass's strategy (spec.pass grad_a / grad_b), else a forward one
  unsigned fields; // FieldGroup bits
  // When this strategy is the default: default_spec(problem) takes the forward entry of highest rank,
  // default_grad_spec(problem, pass) the backward entry of highest rank (the same for both passes); below 0 never.
  int (*default_rank)(const Problem&);
  // Fills the parameters the strategy reads (the problem's fields are already set).
  void (*defaults)(KernelSpec&, const Problem&);
  // Throws std::invalid_argument naming the field when the spec cannot compute the problem (the checks common to
  // every strategy have passed).
  void (*check)(const KernelSpec&, const Problem&);
  // Whether 32-bit index math is too narrow for this problem (before the common check of sizes and strides).
  bool (*needs_index64)(const KernelSpec&, const Problem&);
  // Variants worth timing, from the strategy's default for the problem (they need not all fit: the tuner filters).
  std::vector<KernelSpec> (*candidates)(const KernelSpec& base, const Problem&);
  Rendering (*render)(const KernelSpec&);
  // The launches for a problem the spec fits (forward: one with outputs); `problem` is the forward problem for
  // backward passes, whose plan is empty when the gradient is.
  LaunchPlan (*launches)(const KernelSpec&, const Problem&);
  // Static shared memory per block (its one formula; the fit rules and the tuner's device limit read it), or null
  // for none.
  int (*shared_bytes)(const KernelSpec&);
  // Dynamic shared memory of the main entry's block (opted in beyond 48 KiB at launch), or null for none.
  int (*dynamic_shared_bytes)(const KernelSpec&) = nullptr;
  // For a strategy whose guard sends inexact outputs to an exact repair pass (exp_matmul), where a call's repair
  // counts are; null for the others. A plan the tuner gave such a strategy watches the count after its calls and may
  // move to the variant fastest on wide-range data (runtime/repair_watch.hpp); run_with_repair_report reads them.
  RepairCounts (*repair_counts)(const KernelSpec&, const Problem&) = nullptr;
  // For a backward strategy whose pass can take what the other pass of the same backward call left in their shared
  // workspace (exp_matmul: line maxima and G's maximum), its launches when it runs second, after that pass of the
  // same strategy; null for the others.
  LaunchPlan (*second_pass_launches)(const KernelSpec&, const Problem&) = nullptr;
  // Whether its unit takes NVRTC seconds to compile (exp_matmul: the product on tensor cores, its prepare and its
  // repairs): a plan that chose it runs a stand-in of the default variants while it builds
  // (runtime/product_stand_in.hpp).
  bool compiles_long = false;
};

// Registration from a strategy's own file: `const RegisterStrategy registered{{...}};` (the table keeps a copy).
struct RegisterStrategy {
  explicit RegisterStrategy(const StrategyDef& def);
};

// The entry of a spec's strategy and pass; std::invalid_argument naming the strategy when there is none.
const StrategyDef& strategy_def(Strategy strategy, Pass pass);
const StrategyDef& strategy_def(const KernelSpec& spec);
// Every registered entry, in the order of the Strategy enum (forward before backward).
std::vector<const StrategyDef*> strategy_defs();

} // namespace jitbmm
