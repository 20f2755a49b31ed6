// What several strategies share: the spelling of their device types, the forward templates, the
// 32-bit index rule, and the tiled family's tile defaults, fit rules, tile tables and gradient accumulator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "generator/launch_grid.hpp"
#include "generator/strategy.hpp"

namespace jitbmm::strategies {

[[noreturn]] void reject(const std::string& field, const std::string& why); // "spec.<field>: <why>"
bool power_of_two(int v);

// Device spellings: "float"; "jb::LogSemiring<float>"; "jb::f32, jb::f32, int"; "128, 64, 16, 8, 4".
std::string acc_type(const KernelSpec& s);
std::string semiring_type(const KernelSpec& s);
std::string io_types(const KernelSpec& s);
std::string index_type(const KernelSpec& s);
std::string tile_args(const KernelSpec& s);
EntryPoint main_entry(const KernelSpec& s, std::string call); // threads, and min_blocks for the tiled family

// The largest element index (exclusive) a 32-bit index variant addresses: its loops add a step of up to
// kMaxGridStrideStep to an index before comparing it with its bound, and the sum must still fit in int.
constexpr int64_t kIndex32Limit = (int64_t(1) << 31) - kMaxGridStrideStep;
// Whether every size, the B·M·N·chunks outputs (and, backward, the [B][M][K] and [B][K][N] gradients) and every
// operand offset fit 32-bit index math.
bool fits_index32(const Problem& p, int64_t chunks, bool backward);
bool needs_index64(const KernelSpec& s, const Problem& p); // !fits_index32 for one chunk

// The forward outputs B·M·N (validate() has bounded them).
int64_t outputs_of(const Problem& p);

// The tiled family: the tile a problem gets by default (tiled, split_k), the rules every tile obeys, the shared
// memory of the direct and backward tiled kernels.
void default_tiles(KernelSpec& s, const Problem& p);
// A default tile made taller (up to 128 rows, its threads as many, each with more rows) where `rows` would take more
// row tiles than a grid's y holds: so that a problem the strategy ranks (at 128 rows a tile) gets a default that fits.
void fit_row_tiles(KernelSpec& s, int64_t rows);
void check_tiles(const KernelSpec& s, const Problem& p, int shared_bytes);
// The same over a grid of rows (grid y, tile_m each) and columns (grid x, tile_n each) named by the sizes they are:
// check_tiles(s, p, ...) takes the pass's (a forward's M × N, grad_a's M × K, grad_b's K × N).
struct TileGrid {
  int64_t rows;
  const char* rows_name;
  int64_t cols;
  const char* cols_name;
};
void check_tiles(const KernelSpec& s, const TileGrid& grid, int shared_bytes);
int tiled_shared_bytes(const KernelSpec& s);
// Whether the tiled kernel runs on packed half pairs (templates/tiled/packed.cuh): a half output from the same half
// inputs, a max/min semiring, no argmax.
bool packed_tiles(const KernelSpec& s);
// Whether a term of the tiled kernel is two instructions, an add (or multiply) and a max (or min): the semiring's
// fast policy in f32 accumulators without argmax, or packed half pairs. Such kernels need fewer registers than the
// others and run 3 blocks an SM (with 32-bit indices), where the extra warps hide the slices' loads.
bool fast_tiles(const KernelSpec& s);
// The direct tiled kernel's device call (tiled, split_k) and the template that defines it: the log form for f32
// accumulators, the packed half pairs, else the generic one with the semiring's per-term policy.
std::string tiled_call(const KernelSpec& s);
const char* tiled_header(const KernelSpec& s);
// A 2D tile grid over rows × cols and the batch (or batch × chunks) in z.
void tile_grid(Launch& l, const KernelSpec& s, int64_t rows, int64_t cols, int64_t z);
// A forward tiled kernel's one launch: an M × N tile grid over the batch (tiled, tiled_online).
LaunchPlan forward_tile_launches(const KernelSpec& s, const Problem& p);

// A tile set for candidates: block tile (m, n, k), outputs per thread (tm, tn), blocks per SM.
struct TileChoice {
  int m, n, k, tm, tn, mb;
};
void add_tiles(std::vector<KernelSpec>& out, const KernelSpec& base, const std::vector<TileChoice>& tiles);
// The forward tiles (f64, with 8-byte accumulators, gets smaller ones).
const std::vector<TileChoice>& forward_tiles(bool wide);

// What a gradient pass accumulates into: batch slices (1 when the operand is broadcast over the batch), elements,
// and whether the kernel accumulates atomically into a workspace (scatter always; histogram never; the others for a
// broadcast operand).
struct GradAccumulator {
  int64_t slices = 0, items = 0;
  bool needed = false;
};
GradAccumulator grad_accumulator(const Problem& p, const KernelSpec& s);
// The backward's plan around its main launch: the zeroed accumulator and the store pass, when it accumulates.
LaunchPlan grad_plan(const KernelSpec& s, const Problem& p, const Launch& main);
// The exp_matmul family (forward and backward): the tiles over its padded operands (rows to 128, the reduction to 32,
// read 16 bytes at a time) and the math forms' rules (tensor cores: f32 accumulators, the mma warp geometry; one TF32
// product only where single_tf32_allowed).
void check_exp_matmul_tiles(const KernelSpec& spec, const Problem& p);
// Whether one TF32 product per term (about 1e-4 relative, 1e-3 in the log) keeps a kernel inside its contract: at
// precision fast, or when what the kernel writes is f16 or bf16 (the forward's output, a gradient's operand dtype),
// whose tolerance is 1e-2.
bool single_tf32_allowed(const KernelSpec& spec, const Problem& p);
// The exp_matmul family's wgmma forms (templates/exp_matmul/pipeline.cuh): their K-slice stages, the dynamic shared memory
// that holds them (0 for the other forms), the static rest (three barriers a stage), and their source files.
bool split_wgmma(const KernelSpec& s); // wgmma_tf32x3: the TF32 split in shared memory
int wgmma_stages(const KernelSpec& s);
int wgmma_dynamic_shared_bytes(const KernelSpec& s);
int wgmma_static_shared_bytes(const KernelSpec& s);
// The wgmma candidates of the forward and both gradient passes: 32-k slices (the workspace's panels), two consumer
// warpgroups (or one at 128×64 tiles); wgmma_tf32 where `single` (one TF32 product allowed and wanted).
void add_wgmma_tiles(std::vector<KernelSpec>& out, KernelSpec base, bool single);
// "BM, BN, STAGES, SPLIT": the wgmma kernels' template arguments after the I/O types.
std::string wgmma_tile_args(const KernelSpec& s);
// How the product reads its exponentiated operands (templates/exp_matmul/factors.cuh: FORM), by math form.
int em_form(const KernelSpec& s);

EntryPoint grad_store_entry(const KernelSpec& s);

} // namespace jitbmm::strategies
