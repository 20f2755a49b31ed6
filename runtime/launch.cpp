// Kernel launches (launch.hpp).
#include "runtime/launch.hpp"

#include <algorithm>
#include <stdexcept>

#include "generator/strategies/common.hpp"
#include "runtime/driver_api.hpp"
#include "templates/core/limits.cuh"

namespace jitbmm {

void launch(CUfunction f, const unsigned (&grid)[3], const unsigned (&block)[3], void** args, CUstream stream,
            const std::string& name, const std::string& suffix, unsigned dynamic_shared) {
  if (dynamic_shared > jb::kMaxStaticSharedBytes)
    check(driver().cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(dynamic_shared)),
          ("cuFuncSetAttribute(" + name + suffix + ", dynamic shared memory)").c_str());
  const CUresult r = driver().cuLaunchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2], dynamic_shared,
                                             stream, args, nullptr);
  if (r != CUDA_SUCCESS) check(r, ("cuLaunchKernel(" + name + suffix + ")").c_str()); // the text only on failure
}

void launch_cooperative(CUfunction f, unsigned grid, unsigned block, void** args, CUstream stream,
                        const std::string& name, const std::string& suffix, unsigned dynamic_shared) {
  const CUresult r = driver().cuLaunchCooperativeKernel(f, grid, 1, 1, block, 1, 1, dynamic_shared, stream, args);
  if (r != CUDA_SUCCESS) check(r, ("cuLaunchCooperativeKernel(" + name + suffix + ")").c_str());
}

namespace {
// Sizes and strides: the part both argument blocks share, field for field.
template <class Params> Params shaped(const Problem& p) {
  Params q{};
  q.B = p.shape.B, q.M = p.shape.M, q.N = p.shape.N, q.K = p.shape.K;
  const Strides a = p.a(), b = p.b(), o = p.out();
  q.a_batch = a.batch, q.a_row = a.row, q.a_col = a.col;
  q.b_batch = b.batch, q.b_row = b.row, q.b_col = b.col;
  q.out_batch = o.batch, q.out_row = o.row, q.out_col = o.col;
  return q;
}
} // namespace

jb::BmmParams bmm_params(const Problem& p) { return shaped<jb::BmmParams>(p); }

jb::GradParams grad_params(const Problem& p, const KernelSpec& spec) {
  jb::GradParams q = shaped<jb::GradParams>(p);
  q.workspace_slices = strategies::grad_accumulator(p, spec).slices;
  return q;
}

namespace {

// exp_matmul's repair pass reads its flags from BmmParams; no backward launch has any.
void point_repair_flags(jb::BmmParams& q, const Launch& l, void* workspace) {
  q.repair_flags = reinterpret_cast<const unsigned*>(static_cast<const char*>(workspace) + l.repair_flags_at);
}
void point_repair_flags(jb::GradParams&, const Launch&, void*) {
  throw std::logic_error("run_launches: a backward launch asks for repair flags");
}

template <class Params>
void run(const LoadedKernel& kernel, const LaunchPlan& plan, Params params, void* workspace, CUstream stream,
         bool same_b) {
  if (plan.workspace_bytes) {
    if (!workspace) throw std::logic_error("run_launches: no workspace for " + kernel.generated.name);
    params.workspace = workspace;
    if (plan.zero_bytes)
      check(driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(workspace), 0, plan.zero_bytes, stream),
            "cuMemsetD8Async");
  }
  for (const Launch& l : plan.launches) {
    Params q = params;
    if (l.repair_flags_at != Launch::kNoFlags) point_repair_flags(q, l, workspace);
    void* args[] = {&q};
    unsigned grid[3] = {same_b && l.grid_same_b ? l.grid_same_b : l.grid[0], l.grid[1], l.grid[2]};
    if (l.blocks_per_sm && kernel.sm_count > 0)
      grid[0] = std::min(grid[0], l.blocks_per_sm * static_cast<unsigned>(kernel.sm_count));
    launch(kernel.entry(l.entry), grid, l.block, args, stream, kernel.generated.name, l.entry, l.dynamic_shared);
  }
}

} // namespace

void run_launches(const LoadedKernel& kernel, const LaunchPlan& plan, jb::BmmParams params, void* workspace,
                  CUstream stream, bool same_b) {
  params.k_chunk = plan.k_chunk;
  run(kernel, plan, params, workspace, stream, same_b);
}

void run_launches(const LoadedKernel& kernel, const LaunchPlan& plan, jb::GradParams params, void* workspace,
                  CUstream stream) {
  run(kernel, plan, params, workspace, stream, false);
}

} // namespace jitbmm
