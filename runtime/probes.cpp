#include "runtime/probes.hpp"

#include "runtime/jit.hpp"
#include "runtime/launch.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/timing.hpp"

namespace jitbmm {

namespace {

double measure(const DeviceInfo& device, const GeneratedKernel& probe) {
  ScopedContext scope(device.context);
  const auto kernel = load_generated(device, probe);
  DeviceBuffer sink(1024 * sizeof(float));
  const unsigned blocks = static_cast<unsigned>(device.sm_count) * 8, threads = 256;
  const unsigned grid[3] = {blocks, 1, 1}, block[3] = {threads, 1, 1};
  int iterations = 4096;
  void* args[] = {nullptr, &iterations};
  void* sink_ptr = sink.get();
  args[0] = &sink_ptr;
  const Timing t = time_launches(
      [&](Stream s) {
        launch(*kernel, "", grid, block, args, reinterpret_cast<CUstream>(s));
      },
      2, 9);
  const double ops = double(blocks) * threads * kExpProbeChains * iterations;
  return ops / (t.median_ms * 1e-3);
}

} // namespace

double measure_exp_per_second(const DeviceInfo& device) { return measure(device, emit_exp_probe()); }
double measure_fma_per_second(const DeviceInfo& device) { return measure(device, emit_fma_probe()); }

} // namespace jitbmm
