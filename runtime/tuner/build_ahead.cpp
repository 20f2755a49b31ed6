// Building ahead (build_ahead.hpp).
#include "runtime/tuner/build_ahead.hpp"

#include <algorithm>
#include <string>

#include "runtime/background_build.hpp"
#include "runtime/jit.hpp"
#include "runtime/tuner/cpu_pool.hpp"
#include "support/log.hpp"

namespace jitbmm {

void build_ahead(const DeviceInfo& device, const std::vector<GeneratedKernel>& generated,
                 const std::vector<KernelSpec>& specs) {
  // What this process has built, or is building, is left out: a plan made again finds its kernels at once.
  std::vector<KernelSpec> unique;
  for (const KernelSpec& spec : specs)
    if (std::find(unique.begin(), unique.end(), spec) == unique.end() && !kernel_known(device, spec))
      unique.push_back(spec);
  std::vector<const GeneratedKernel*> units;
  for (const GeneratedKernel& kernel : generated)
    if (!kernel_known(device, kernel)) units.push_back(&kernel);
  const std::size_t count = units.size() + unique.size();
  if (count < 2) return;
  if (log_enabled(LogLevel::debug))
    log_message(LogLevel::debug, "building " + std::to_string(count) + " kernels ahead");
  // The products' kernels first: they are the longest compiles, so where the items outnumber the threads the rest
  // fill in beside them. The pool's threads build as the asking thread does: quick builds where it makes them, and
  // in a background build's relaxed capture mode, so that their module loads break no graph another thread captures.
  const bool quick = QuickBuild::active(), background = in_background_build();
  for_each_on_cpus(count, [&](std::size_t i) {
    const QuickBuild scope(quick);
    try {
      const BuildCaptureMode mode(background);
      if (i < unique.size())
        load_kernel(device, unique[i]);
      else
        load_generated(device, *units[i - unique.size()]);
    } catch (const std::exception& e) { // the load that needs it meets the failure again, and reports it
      if (log_enabled(LogLevel::debug)) log_message(LogLevel::debug, std::string("building ahead: ") + e.what());
    }
  });
}

} // namespace jitbmm
