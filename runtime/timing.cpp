#include "runtime/timing.hpp"

#include <algorithm>

#include "runtime/driver_api.hpp"
#include "runtime/events.hpp"

namespace jitbmm {

Timing time_launches(const std::function<void(Stream)>& launch, int warmup, int runs, Stream stream,
                     const BeforeRun& before_run) {
  const DriverApi& d = driver();
  auto s = reinterpret_cast<CUstream>(stream);
  if (warmup > 0) {
    for (int i = 0; i < warmup; ++i) launch(stream);
    check(d.cuStreamSynchronize(s), "cuStreamSynchronize");
  }
  Event start, stop;
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    if (before_run) before_run(i);
    check(d.cuEventRecord(start.get(), s), "cuEventRecord");
    launch(stream);
    check(d.cuEventRecord(stop.get(), s), "cuEventRecord");
    check(d.cuEventSynchronize(stop.get()), "cuEventSynchronize");
    float elapsed = 0;
    check(d.cuEventElapsedTime(&elapsed, start.get(), stop.get()), "cuEventElapsedTime");
    ms.push_back(elapsed);
  }
  Timing t;
  t.runs = runs;
  if (ms.empty()) return t;
  std::sort(ms.begin(), ms.end());
  const std::size_t half = ms.size() / 2; // an even count's median: its two middle runs' mean
  t.median_ms = ms.size() % 2 ? ms[half] : (ms[half - 1] + ms[half]) / 2;
  t.min_ms = ms.front();
  t.max_ms = ms.back();
  return t;
}

L2Flush::L2Flush() : buffer_(std::size_t(256) << 20) {}

void L2Flush::operator()(int run) const {
  check(driver().cuMemsetD8(reinterpret_cast<CUdeviceptr>(buffer_.get()), static_cast<unsigned char>(run),
                            buffer_.size()),
        "cuMemsetD8(L2 flush)");
}

} // namespace jitbmm
