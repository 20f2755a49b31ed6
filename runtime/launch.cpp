// Kernel launches (launch.hpp).
#include "runtime/launch.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <stdexcept>

#include "generator/strategies/common.hpp"
#include "runtime/driver_api.hpp"
#include "support/env_words.hpp"
#include "templates/core/limits.cuh"

namespace jitbmm {

bool dependent_launch_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("JITBMM_DEPENDENT_LAUNCH");
    return !v || !*v || parse_env_switch(v, "JITBMM_DEPENDENT_LAUNCH");
  }();
  return enabled;
}

namespace {
// Cleared for the rest of the process when the driver refuses a dependent launch that it makes plainly.
std::atomic<bool> dependent_launches{true};
} // namespace

void launch(const LoadedKernel& kernel, const std::string& suffix, const unsigned (&grid)[3],
            const unsigned (&block)[3], void** args, CUstream stream, unsigned dynamic_shared) {
  const CUfunction f = kernel.entry(suffix);
  const DriverApi& d = driver();
  if (dynamic_shared > jb::kMaxStaticSharedBytes)
    check(d.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(dynamic_shared)),
          ("cuFuncSetAttribute(" + kernel.generated.name + suffix + ", dynamic shared memory)").c_str());
  bool refused = false;
  if (dependent_launch_enabled() && kernel.dependent_launch && dependent_launches.load(std::memory_order_relaxed)) {
    CUlaunchAttribute overlap{};
    overlap.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    overlap.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig config{};
    config.gridDimX = grid[0], config.gridDimY = grid[1], config.gridDimZ = grid[2];
    config.blockDimX = block[0], config.blockDimY = block[1], config.blockDimZ = block[2];
    config.sharedMemBytes = dynamic_shared;
    config.hStream = stream;
    config.attrs = &overlap;
    config.numAttrs = 1;
    if (d.cuLaunchKernelEx(&config, f, args, nullptr) == CUDA_SUCCESS) return;
    refused = true; // a refused launch enqueues nothing: made plainly below
  }
  const CUresult r = d.cuLaunchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2], dynamic_shared,
                                      stream, args, nullptr);
  if (r != CUDA_SUCCESS) check(r, ("cuLaunchKernel(" + kernel.generated.name + suffix + ")").c_str());
  if (refused) dependent_launches.store(false, std::memory_order_relaxed); // the attribute was what failed
}

namespace {
CUlaunchConfig clustered_config(unsigned grid, unsigned block, unsigned dynamic_shared, CUstream stream,
                                CUlaunchAttribute& cluster_dim, unsigned cluster) {
  cluster_dim = CUlaunchAttribute{};
  cluster_dim.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  cluster_dim.value.clusterDim.x = cluster, cluster_dim.value.clusterDim.y = 1, cluster_dim.value.clusterDim.z = 1;
  CUlaunchConfig config{};
  config.gridDimX = grid, config.gridDimY = 1, config.gridDimZ = 1;
  config.blockDimX = block, config.blockDimY = 1, config.blockDimZ = 1;
  config.sharedMemBytes = dynamic_shared;
  config.hStream = stream;
  config.attrs = &cluster_dim;
  config.numAttrs = 1;
  return config;
}
} // namespace

void launch_clustered(const LoadedKernel& kernel, const std::string& suffix, unsigned grid, unsigned block,
                      unsigned cluster, void** args, CUstream stream, unsigned dynamic_shared) {
  CUlaunchAttribute attribute;
  const CUlaunchConfig config = clustered_config(grid, block, dynamic_shared, stream, attribute, cluster);
  const CUresult r = driver().cuLaunchKernelEx(&config, kernel.entry(suffix), args, nullptr);
  if (r != CUDA_SUCCESS) check(r, ("cuLaunchKernelEx(" + kernel.generated.name + suffix + ", clusters)").c_str());
}

int max_active_clusters(const LoadedKernel& kernel, const std::string& suffix, unsigned grid, unsigned block,
                        unsigned cluster, unsigned dynamic_shared) {
  CUlaunchAttribute attribute;
  const CUlaunchConfig config = clustered_config(grid, block, dynamic_shared, nullptr, attribute, cluster);
  int clusters = 0;
  check(driver().cuOccupancyMaxActiveClusters(&clusters, kernel.entry(suffix), &config),
        ("cuOccupancyMaxActiveClusters(" + kernel.generated.name + suffix + ")").c_str());
  return clusters;
}

void launch_cooperative(const LoadedKernel& kernel, const std::string& suffix, unsigned grid, unsigned block,
                        void** args, CUstream stream, unsigned dynamic_shared) {
  const CUresult r = driver().cuLaunchCooperativeKernel(kernel.entry(suffix), grid, 1, 1, block, 1, 1, dynamic_shared,
                                                        stream, args);
  if (r != CUDA_SUCCESS) check(r, ("cuLaunchCooperativeKernel(" + kernel.generated.name + suffix + ")").c_str());
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
    launch(kernel, l.entry, grid, l.block, args, stream, l.dynamic_shared);
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
