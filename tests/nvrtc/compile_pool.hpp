// Compiles many kernels on every core (NVRTC is thread-safe), each for one architecture, showing the sweeps' progress
// lines (sweep.hpp); what NVRTC said is checked afterwards, on the test's thread.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "generator/arch_features.hpp"
#include "nvrtc/sweep.hpp"
#include "runtime/nvrtc_compiler.hpp"

namespace jitbmm::test {

// Runs fn(i) for each i in [0, n) on every core; `name` names the progress lines.
template <class F> void on_every_core(std::size_t n, const std::string& name, F fn) {
  const unsigned workers = std::max(2u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  std::atomic<std::size_t> next{0};
  SweepProgress progress(name, n);
  for (unsigned w = 0; w < workers; ++w)
    pool.emplace_back([&] {
      for (std::size_t i; (i = next.fetch_add(1)) < n;) {
        fn(i);
        progress.one_done();
      }
    });
  for (auto& t : pool) t.join();
}

struct ArchCompile {
  const GeneratedKernel* kernel = nullptr;
  int sm = 0;
  std::string log, error; // ptxas's report, or what NVRTC or jitbmm refused
};

// Each kernel for its architecture, with ptxas's report.
inline std::vector<ArchCompile> compile_on_archs(const std::vector<std::pair<GeneratedKernel, int>>& jobs,
                                                 const std::string& name) {
  std::vector<ArchCompile> out;
  for (const auto& [kernel, sm] : jobs) out.push_back({&kernel, sm, "", ""});
  on_every_core(out.size(), name, [&](std::size_t i) {
    try {
      out[i].log = compile_to_cubin(*out[i].kernel, sm_name(out[i].sm), PtxasReport::wanted).log;
    } catch (const std::exception& e) {
      out[i].error = e.what();
    }
  });
  return out;
}

// Kernels, each for its architecture: `add` them, then `check` compiles them on every core and finds, on the test's
// thread, registers and no spill in every entry of each.
class NoSpills {
public:
  explicit NoSpills(std::string name) : name_(std::move(name)) {}
  void add(GeneratedKernel kernel, int sm) { jobs_.emplace_back(std::move(kernel), sm); }
  void check() const {
    for (const test::ArchCompile& c : test::compile_on_archs(jobs_, name_)) {
      CAPTURE(c.kernel->name);
      CAPTURE(c.sm);
      CHECK_MESSAGE(c.error.empty(), c.error);
      if (!c.error.empty()) continue;
      for (const std::string& entry : c.kernel->entries) {
        CAPTURE(entry);
        const PtxasResources r = parse_ptxas_log(c.log, c.kernel->name + entry);
        CHECK(r.registers > 0);
        CHECK(r.spill_store_bytes == 0);
        CHECK(r.spill_load_bytes == 0);
      }
    }
  }

private:
  std::string name_;
  std::vector<std::pair<GeneratedKernel, int>> jobs_;
};

} // namespace jitbmm::test
