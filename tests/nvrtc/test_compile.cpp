// Compile-only: every generated variant must compile with NVRTC for every supported architecture that has what it
// needs (archs.hpp: sm_75 to sm_90, and sm_70 with an NVRTC that targets it) with no spills in any of its entries
// beyond the older architectures' bound (all of them with JITBMM_NVRTC_SWEEP=full, else the subset sweep.hpp
// chooses). No GPU needed.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <ctime>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "generator/embedded_templates.hpp"
#include "generator/emit_source.hpp"
#include "generator/needed_features.hpp"
#include "generator/strategy.hpp"
#include "jitbmm/errors.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "runtime/tuner/search_space.hpp"
#include "nvrtc/archs.hpp"
#include "nvrtc/compile_pool.hpp"
#include "nvrtc/spec_features.hpp"
#include "nvrtc/sweep.hpp"
#include "variants.hpp"

using namespace jitbmm;

namespace {

// NVRTC serves binaries from the CUDA compute cache without running ptxas, and then its log has no ptxas report
// (seen on the GPU machine: every kernel of a second process). With the cache off every compile runs ptxas, so
// every kernel below must report. Set before main, before any NVRTC call can read it.
const bool kComputeCacheOff = ::setenv("CUDA_CACHE_DISABLE", "1", 1) == 0;

struct Outcome {
  std::string name, arch, error;
  PtxasResources res;    // the main entry's
  PtxasResources module; // every entry's (prepare, repair, ...) and their callees' spills
  std::size_t cubin_bytes = 0;
  double cpu_seconds = 0; // NVRTC and ptxas run on the calling thread: this thread's CPU time is the compile's
};

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

Outcome compile_one(const KernelSpec& spec, const std::string& arch) {
  Outcome o;
  o.arch = arch;
  const double start = thread_cpu_seconds();
  try {
    const GeneratedKernel k = emit_kernel(spec);
    o.name = k.name;
    const CompiledKernel c = compile_to_cubin(k, arch, PtxasReport::wanted);
    o.res = parse_ptxas_log(c.log, k.name);
    o.module = parse_ptxas_log(c.log);
    o.cubin_bytes = c.binary.size();
  } catch (const std::exception& e) {
    o.error = e.what();
  }
  o.cpu_seconds = thread_cpu_seconds() - start;
  return o;
}

// The largest tiles: in each strategy and pass, the largest variant (variant_size), on the oldest architecture of
// those with the Ampere instructions or their older equivalents (the device code differs; the architectures of one
// kind differ in ptxas's register allocation alone, and the cover reaches each of them). Each math's and dtype's
// smaller tiles are in the cover.
void mark_largest(const std::vector<std::pair<KernelSpec, int>>& jobs, std::vector<test::SweepItem>& items) {
  std::map<std::string, std::size_t> largest;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const auto& [s, sm] = jobs[i];
    const bool ampere = arch_features(sm).has(kNanMinMax | kHalfPairs | kAsyncCopy);
    const std::string group = std::string(strategy_name(s.strategy)) + "/" + pass_name(s.pass) + "/" +
                              (ampere ? "ampere" : "older");
    const auto it = largest.find(group);
    if (it == largest.end() || test::variant_size(jobs[it->second].first) < test::variant_size(s)) largest[group] = i;
  }
  for (const auto& [group, i] : largest) items[i].largest = true;
}

// The strategies with their passes ("strategy+pass=tiled/forward") and the maths ("math=tf32") the tuner offers on
// architecture `sm` for problems of each semiring and dtype (half ones with half and f32 outputs), with argmax
// where the semiring has it, at both precisions.
std::set<std::string> offered_by_tuner(int sm) {
  DeviceLimits limits;
  limits.max_dynamic_shared_bytes = 227 * 1024; // an H100's: every tile the tuner has fits
  limits.features = arch_features(sm);
  std::set<std::string> out;
  for (const KernelSpec& kind : test::problem_kinds())
    for (Precision precision : {Precision::exact, Precision::fast}) {
      if (precision == Precision::fast && kind.semiring != Semiring::log) continue;
      Problem p;
      p.semiring = kind.semiring, p.dtype = kind.dtype, p.out_dtype = kind.out_dtype, p.with_argmax = kind.with_argmax;
      p.precision = precision;
      p.shape = {4, 512, 512, 512};
      for (Pass pass : {Pass::forward, Pass::grad_a, Pass::grad_b}) {
        if (pass != Pass::forward && kind.with_argmax) continue;
        for (const KernelSpec& spec : tuning_candidates(p, limits, pass)) {
          out.insert(std::string("strategy+pass=") + strategy_name(spec.strategy) + "/" + pass_name(spec.pass));
          if (strategy_def(spec).fields & kMathField) out.insert(std::string("math=") + math_name(spec.math));
        }
      }
    }
  return out;
}

} // namespace

TEST_CASE("every variant the tuner may offer, forward and backward, compiles for every supported architecture "
          "without spills") {
  const test::TestArchs archs = test::test_archs();
  CHECK_MESSAGE(archs.missing.empty(), "NVRTC " << nvrtc_version() << " cannot target " << test::sm_names(archs.missing));
  if (!archs.note.empty()) MESSAGE(archs.note);
  // Each variant on each architecture whose features it needs (as the tuner offers them: search_space.cpp).
  std::vector<std::pair<KernelSpec, int>> all;
  std::vector<test::SweepItem> items;
  std::vector<KernelSpec> variants = test::all_variants();
  for (const KernelSpec& spec : test::grad_variants()) variants.push_back(spec);
  for (const KernelSpec& spec : variants) {
    const std::vector<std::string> features = test::variant_features(spec);
    for (int sm : archs.sms)
      if (arch_features(sm).has(needed_features(spec))) {
        all.emplace_back(spec, sm);
        items.push_back(test::on_arch(features, sm_name(sm), test::kArchPaired, test::feature_kind(sm, archs.sms)));
        items.back().cost = test::variant_cost(spec);
      }
  }
  mark_largest(all, items);
  test::SweepPlan plan = test::sweep_plan_from_env();
  plan.sample_share /= 4; // of five architectures' variants: about as many drawn as for one
  const test::SweepChoice choice = test::select_sweep(items, plan);
  MESSAGE(test::describe(choice, plan, all.size(), "kernels"));
  // The subset reaches every feature the whole sweep does, and the whole sweep every strategy of the table.
  std::set<std::string> reached, every;
  for (std::size_t i : choice.chosen) reached.insert(items[i].features.begin(), items[i].features.end());
  for (const test::SweepItem& item : items) every.insert(item.features.begin(), item.features.end());
  CHECK(reached == every);
  // And on each architecture, every strategy, pass and math the tuner offers there.
  for (int sm : archs.sms)
    for (const std::string& offered : offered_by_tuner(sm)) {
      CAPTURE(offered);
      CHECK(every.count(test::feature_kind(sm, archs.sms) + " " + offered));
    }
  std::vector<std::pair<KernelSpec, int>> jobs;
  for (std::size_t i : choice.chosen) jobs.push_back(all[i]);
  std::ostringstream per_arch;
  for (int sm : archs.sms) {
    const auto on = [sm](const std::pair<KernelSpec, int>& job) { return job.second == sm; };
    per_arch << (sm == archs.sms.front() ? "" : ", ") << sm_name(sm) << " " << std::count_if(jobs.begin(), jobs.end(), on)
             << " of " << std::count_if(all.begin(), all.end(), on);
  }
  MESSAGE("variants compiled per architecture: " << per_arch.str());
  std::vector<Outcome> outcomes(jobs.size());
  test::on_every_core(jobs.size(), "jitbmm_test_nvrtc kernels",
                      [&](std::size_t i) { outcomes[i] = compile_one(jobs[i].first, sm_name(jobs[i].second)); });
  REQUIRE(kComputeCacheOff);
  int without_report = 0;
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    const Outcome& o = outcomes[i];
    CAPTURE(o.name);
    CAPTURE(o.arch);
    CHECK_MESSAGE(o.error.empty(), o.error);
    CHECK(o.cubin_bytes > 0);
    // A missing report would leave spills unknown: that is a failure, not a pass (see kComputeCacheOff).
    CHECK_MESSAGE(o.res.registers >= 1, "no ptxas report in NVRTC's log");
    without_report += o.res.registers < 1;
    CHECK(o.res.stack_bytes >= 0);
    const int sm = parse_sm(o.arch, "arch");
    const int allowed = test::older_arch_spill_bytes(sm) + test::argmax_tile_spill_bytes(jobs[i].first, sm);
    CHECK(o.module.spill_store_bytes <= allowed); // the main entry's and every other's
    CHECK(o.module.spill_load_bytes <= allowed);
  }
  CHECK(without_report == 0);
  // What a cold tuning pays per candidate: the distribution of compile times, and the slowest kernels.
  std::vector<const Outcome*> by_time;
  for (const Outcome& o : outcomes) by_time.push_back(&o);
  std::sort(by_time.begin(), by_time.end(), [](auto* x, auto* y) { return x->cpu_seconds < y->cpu_seconds; });
  double total = 0;
  for (const Outcome* o : by_time) total += o->cpu_seconds;
  const auto at = [&](double q) { return by_time[std::size_t(q * (by_time.size() - 1))]->cpu_seconds; };
  std::ostringstream os;
  os << std::fixed << std::setprecision(3) << jobs.size() << " kernels compiled, each with ptxas's report; CPU s per"
     << " kernel: median " << at(0.5) << ", p90 " << at(0.9) << ", max " << at(1.0) << ", total " << total
     << "; slowest:";
  for (std::size_t i = by_time.size(); i-- > 0 && i + 5 >= by_time.size();)
    os << "\n  " << by_time[i]->cpu_seconds << " " << by_time[i]->name << " " << by_time[i]->arch;
  MESSAGE(os.str());
}

TEST_CASE("every template compiles on its own, with what it includes: no template relies on another's inclusion") {
  for (const EmbeddedTemplate& t : embedded_templates()) {
    CAPTURE(std::string(t.name));
    GeneratedKernel k{"template_alone", inline_templates({t.name}) + "extern \"C\" __global__ void template_alone() {}\n"};
    k.needs = kWgmma; // the Hopper templates need sm_90a; the others compile for it as well
    CHECK_NOTHROW(compile_to_ptx(k, "compute_90"));
  }
}

TEST_CASE("PTX for a virtual architecture needs no GPU") {
  const CompiledKernel ptx = compile_to_ptx(emit_kernel(KernelSpec{}), "compute_90");
  CHECK(ptx.binary.find(".target sm_90") != std::string::npos);
  CHECK(ptx.binary.find(".entry " + ptx.name) != std::string::npos);
}

TEST_CASE("no path of the compiling machine is in the PTX or the cubin: the same bytes from any directory") {
  const GeneratedKernel kernel = emit_kernel(KernelSpec{});
  const std::string before = std::filesystem::current_path().string();
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("jitbmm-cwd-" + std::to_string(::getpid()) + "-Zq7Wd")).string();
  std::filesystem::create_directories(dir);
  std::filesystem::current_path(dir);
  CompiledKernel ptx, cubin;
  try {
    ptx = compile_to_ptx(kernel, "compute_90");
    cubin = compile_to_cubin(kernel, "sm_90");
  } catch (...) {
    std::filesystem::current_path(before);
    std::filesystem::remove_all(dir);
    throw;
  }
  std::filesystem::current_path(before);
  std::filesystem::remove_all(dir);
  REQUIRE(ptx.binary.find(".loc") != std::string::npos); // line info is there, under a name of no directory
  CHECK(ptx.binary.find("Zq7Wd") == std::string::npos);
  CHECK(cubin.binary.find("Zq7Wd") == std::string::npos);
  CHECK(compile_to_cubin(kernel, "sm_90").binary == cubin.binary); // and the same bytes from the test's directory
}

TEST_CASE("a source NVRTC rejects is a CompileError carrying the kernel name, options and log") {
  GeneratedKernel broken{"broken_kernel_0000", "extern \"C\" __global__ void broken_kernel_0000() { oops; }\n"};
  try {
    compile_to_cubin(broken, "sm_90");
    FAIL("expected CompileError");
  } catch (const CompileError& e) {
    const std::string what = e.what();
    CHECK(what.find("broken_kernel_0000") != std::string::npos);
    CHECK(what.find("--gpu-architecture=sm_90") != std::string::npos);
    CHECK(what.find("oops") != std::string::npos);
    CHECK(e.log().find("undefined") != std::string::npos);
  }
}

TEST_CASE("the ptxas log parser reads registers and spills") {
  const PtxasResources r = parse_ptxas_log(
      "ptxas info    : Function properties for k\nptxas         .     16 bytes stack frame, 8 bytes spill stores, "
      "4 bytes spill loads\nptxas info    : Used 137 registers, used 1 barriers, 33024 bytes smem\n");
  CHECK(r.registers == 137);
  CHECK(r.stack_bytes == 16);
  CHECK(r.spill_store_bytes == 8);
  CHECK(r.spill_load_bytes == 4);
  CHECK(r.shared_bytes == 33024);
}

TEST_CASE("an entry's spills include those of the functions it calls") {
  const std::string log =
      "ptxas info    : Compiling entry function 'mine' for 'sm_90'\nptxas info    : Function properties for mine\n"
      "ptxas         .     224 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\nptxas info    : Used 128 "
      "registers\nptxas info    : Function properties for _Z6calleev\nptxas         .     0 bytes stack frame, 16 bytes "
      "spill stores, 12 bytes spill loads\nptxas info    : Compiling entry function 'other' for 'sm_90'\nptxas         "
      ".     0 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\nptxas info    : Used 40 registers\n";
  const PtxasResources mine = parse_ptxas_log(log, "mine");
  CHECK(mine.registers == 128);
  CHECK(mine.stack_bytes == 224);
  CHECK(mine.spill_store_bytes == 16);
  CHECK(mine.spill_load_bytes == 12);
  CHECK(parse_ptxas_log(log, "other").spill_store_bytes == 4);
  CHECK(parse_ptxas_log(log).spill_store_bytes == 20); // the whole module
}

TEST_CASE("the parser reads only the named kernel's section of a log") {
  const std::string log =
      "ptxas info    : Compiling entry function 'other' for 'sm_90'\nptxas info    : Used 99 registers\n"
      "ptxas info    : Compiling entry function 'mine' for 'sm_90'\nptxas         .     0 bytes stack frame, 0 bytes "
      "spill stores, 0 bytes spill loads\nptxas info    : Used 40 registers\n";
  CHECK(parse_ptxas_log(log, "mine").registers == 40);
  CHECK(parse_ptxas_log(log, "other").registers == 99);
  CHECK(parse_ptxas_log(log, "absent").registers == -1);
}

TEST_CASE("a wgmma kernel builds for sm_90a, shows HGMMA-class code in its PTX, and names the GPU it cannot serve") {
  KernelSpec spec;
  spec.strategy = Strategy::exp_matmul;
  spec.math = Math::wgmma_tf32x3;
  spec.tile_m = spec.tile_n = 128, spec.tile_k = 32, spec.thread_m = 2, spec.thread_n = 32;
  const GeneratedKernel k = emit_kernel(spec);
  CHECK((k.needs & kWgmma) != 0);
  CHECK(kernel_target(k, "sm_90") == "sm_90a");
  CHECK(kernel_target(emit_kernel(KernelSpec{}), "sm_90") == "sm_90");
  const CompiledKernel ptx = compile_to_ptx(k, "compute_90");
  CHECK(ptx.binary.find(".target sm_90a") != std::string::npos);
  CHECK(ptx.binary.find("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32") != std::string::npos);
  const CompiledKernel cubin = compile_to_cubin(k, "sm_90", PtxasReport::wanted);
  CHECK(cubin.log.find("serialized") == std::string::npos); // ptxas did not have to fence every wgmma
  for (const char* arch : {"sm_80", "sm_89", "sm_100"}) {
    CAPTURE(arch);
    try {
      compile_to_cubin(k, arch);
      FAIL("expected std::invalid_argument");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find("wgmma") != std::string::npos);
      CHECK(std::string(e.what()).find(arch) != std::string::npos);
    }
  }
}
