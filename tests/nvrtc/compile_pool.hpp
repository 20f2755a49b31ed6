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

// The features a kernel of a fixed set stands for in a sweep (sweep.hpp): the words of its name (its family,
// semiring, dtype, form, pass, state count, shape: "name:f64", "name:c33"; the name's hash left out) and the templates
// it inlines, each on the architecture it is compiled for.
inline SweepItem kernel_features(const GeneratedKernel& kernel, int sm) {
  std::vector<std::string> features;
  std::string name = kernel.name;
  if (const std::size_t last = name.rfind('_');
      last != std::string::npos && name.size() - last == 9 &&
      name.find_first_not_of("0123456789abcdef", last + 1) == std::string::npos)
    name.erase(last);
  for (std::size_t from = 0; from <= name.size();) {
    const std::size_t to = std::min(name.find('_', from), name.size());
    if (to > from) features.push_back("name:" + name.substr(from, to - from));
    from = to + 1;
  }
  for (std::string& t : inlined_templates(kernel.source)) features.push_back(std::move(t));
  return on_arch(features, sm_name(sm), {"name:", "template:"});
}

// A fixed set of kernels, each for its architecture: `add` them, then `check` compiles the sweep's subset of them
// (sweep.hpp; every one with JITBMM_NVRTC_SWEEP=full) on every core and finds, on the test's thread, registers and
// no spill in every entry of each (at most the bound `add` gives its bounded entries). The subset reaches every word of
// the names and every template on each architecture, and takes those added as `largest` (the most registers a thread:
// the first to spill) always.
class NoSpills {
public:
  explicit NoSpills(std::string name) : name_(std::move(name)) {}
  // `bounded`: entries (by their suffix) allowed up to `bound` bytes of spills, each load and store, not none.
  void add(GeneratedKernel kernel, int sm, bool largest = false, std::vector<std::string> bounded = {}, int bound = 0) {
    items_.push_back(kernel_features(kernel, sm));
    items_.back().largest = largest;
    jobs_.emplace_back(std::move(kernel), sm);
    bounds_.push_back({std::move(bounded), bound});
  }
  void check() const {
    const SweepPlan plan = sweep_plan_from_env();
    const SweepChoice choice = select_sweep(items_, plan);
    MESSAGE(describe(choice, plan, items_.size(), name_.c_str()));
    std::vector<std::pair<GeneratedKernel, int>> chosen;
    for (std::size_t i : choice.chosen) chosen.push_back(jobs_[i]);
    std::size_t at = 0;
    for (const test::ArchCompile& c : test::compile_on_archs(chosen, name_)) {
      const Bound& bound = bounds_[choice.chosen[at++]];
      CAPTURE(c.kernel->name);
      CAPTURE(c.sm);
      CHECK_MESSAGE(c.error.empty(), c.error);
      if (!c.error.empty()) continue;
      for (const std::string& entry : c.kernel->entries) {
        CAPTURE(entry);
        const PtxasResources r = parse_ptxas_log(c.log, c.kernel->name + entry);
        const bool bounded = std::find(bound.entries.begin(), bound.entries.end(), entry) != bound.entries.end();
        const int allowed = bounded ? bound.bytes : 0;
        CHECK(r.registers > 0);
        CHECK(r.spill_store_bytes <= allowed);
        CHECK(r.spill_load_bytes <= allowed);
      }
    }
  }

private:
  struct Bound {
    std::vector<std::string> entries;
    int bytes = 0;
  };
  std::string name_;
  std::vector<std::pair<GeneratedKernel, int>> jobs_;
  std::vector<SweepItem> items_;
  std::vector<Bound> bounds_;
};

} // namespace jitbmm::test
