// Strategy "tiled" for a gradient pass (log and plus_times): a register-tiled reduction over j for grad_a (over i
// for grad_b) of G·w, w the semiring's gradient weight, into the operand's layout; a gradient broadcast over the
// batch is accumulated atomically into the workspace, then stored (templates/grad/backward.cuh, grad/store.cuh).
#include "generator/strategies/common.hpp"

namespace jitbmm::strategies {
namespace {

// The default backward of the semirings whose gradient gathers weighted terms (all but the selecting ones).
int rank(const Problem& p) { return semiring_info(p.semiring).backward == BackwardKind::argmax_scatter ? -1 : 0; }

// The forward tiled defaults over the gradient's rows × cols, then the backward's own measured best.
void defaults(KernelSpec& spec, const Problem& p) {
  // Its rows are the operand's (grad_b's: K), a block a tile of at most 128 of them on the grid's y.
  const bool operand_rows_k = spec.pass == Pass::grad_b;
  const int64_t rows = operand_rows_k ? p.shape.K : p.shape.M;
  if ((rows + 127) / 128 > kMaxGridYZ)
    throw std::invalid_argument(std::string(operand_rows_k ? "shape.K" : "shape.M") + ": the tiled gradient of " +
                                (operand_rows_k ? "b" : "a") + " takes at most 65535 tiles of 128 of its rows (got " +
                                std::to_string(rows) + "); split the problem along them");
  Problem as_output = p;
  as_output.shape = spec.pass == Pass::grad_a ? Shape{p.shape.B, p.shape.M, p.shape.N, p.shape.K}
                                              : Shape{p.shape.B, p.shape.K, p.shape.M, p.shape.N};
  as_output.a_strides.reset(), as_output.b_strides.reset(), as_output.out_strides.reset();
  const KernelSpec t = default_spec(as_output, Strategy::tiled);
  spec.tile_m = t.tile_m, spec.tile_n = t.tile_n, spec.tile_k = t.tile_k;
  spec.thread_m = t.thread_m, spec.thread_n = t.thread_n, spec.min_blocks = t.min_blocks;
  // The tuner's choice on the H100: 8 outputs per thread (the per-output constants double the registers per
  // output), 3 blocks per SM, the long side of the tile along the operand's columns for grad_a.
  const bool ga = spec.pass == Pass::grad_a;
  if (!dtype_info(p.dtype).wide_acc() && spec.tile_m >= 64 && spec.tile_n >= 64) {
    spec.tile_m = ga ? 32 : 64, spec.tile_n = ga ? 64 : 32;
    spec.thread_m = ga ? 2 : 4, spec.thread_n = ga ? 4 : 2;
    spec.tile_k = 16, spec.min_blocks = 3;
  }
  if (p.dtype == DType::bf16) spec.min_blocks = 1; // its conversions need more than 128 registers
  fit_row_tiles(spec, ga ? p.shape.M : p.shape.K);
}

void check(const KernelSpec& spec, const Problem& p) { check_tiles(spec, p, tiled_shared_bytes(spec)); }

// At most 16 outputs per thread: the per-output constants double the registers per output.
std::vector<KernelSpec> candidates(const KernelSpec& base, const Problem& p) {
  std::vector<KernelSpec> out = {base};
  if (dtype_info(p.dtype).wide_acc())
    add_tiles(out, base, forward_tiles(true)); // the forward's f64 tiles have at most 16 outputs per thread
  else
    add_tiles(out, base,
              {{64, 64, 16, 4, 4, 2}, {64, 64, 8, 4, 4, 2}, {64, 32, 16, 4, 2, 3}, {32, 64, 16, 2, 4, 3},
               {64, 32, 32, 4, 2, 3}, {32, 64, 32, 2, 4, 3}, {32, 32, 16, 2, 2, 3}, {128, 32, 16, 4, 4, 2}});
  return out;
}

Rendering render(const KernelSpec& s) {
  const char* weights = semiring_info(s.semiring).grad; // the semiring's gradient weights (templates/grad/backward.cuh)
  if (!weights)
    reject("strategy", std::string("the backward of ") + semiring_info(s.semiring).name + " is not a tiled reduction");
  return {{"grad/backward.cuh"},
          "GradParams",
          {main_entry(s, "jb::grad_tiled_kernel<" + std::string(weights) + ", " + io_types(s) + ", " + tile_args(s) + ", " +
                             (s.pass == Pass::grad_a ? "true" : "false") + ">"),
           grad_store_entry(s)}};
}

LaunchPlan launches(const KernelSpec& spec, const Problem& p) {
  const Shape& s = p.shape;
  const bool ga = spec.pass == Pass::grad_a;
  const int64_t rows = ga ? s.M : s.K, cols = ga ? s.K : s.N;
  if (s.B == 0 || rows == 0 || cols == 0) return {};
  Launch main;
  tile_grid(main, spec, rows, cols, s.B);
  return grad_plan(spec, p, main);
}

const RegisterStrategy registered{{Strategy::tiled, "tiled", true, kTileFields, rank, defaults, check, needs_index64,
                                   candidates, render, launches, tiled_shared_bytes}};

} // namespace
} // namespace jitbmm::strategies
