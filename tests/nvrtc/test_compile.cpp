// Compile-only: every generated variant must compile with NVRTC for sm_80 and sm_90 with no spills in any of its
// entries (all of them with JITBMM_NVRTC_SWEEP=full, else the subset sweep.hpp chooses). No GPU needed.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <ctime>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>
#include <future>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "generator/embedded_templates.hpp"
#include "generator/emit_source.hpp"
#include "generator/strategy.hpp"
#include "jitbmm/errors.hpp"
#include "runtime/nvrtc_compiler.hpp"
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

// A variant's features (sweep.hpp): its spec's fields but the sizes, its entry headers and the templates it inlines.
test::SweepItem sweep_item(const KernelSpec& spec, const std::string& arch) {
  test::SweepItem item;
  std::istringstream fields(to_string(spec));
  for (std::string f; fields >> f;)
    if (f.rfind("tile=", 0) && f.rfind("thread=", 0) && f.rfind("block=", 0) && f.rfind("k_chunk=", 0) &&
        f.rfind("min_blocks=", 0))
      item.features.push_back(f);
  item.features.push_back(std::string("pass=") + pass_name(spec.pass));
  item.features.push_back(std::string("strategy+pass=") + strategy_name(spec.strategy) + "/" + pass_name(spec.pass));
  item.features.push_back("arch=" + arch);
  for (const char* header : strategy_def(spec).render(spec).headers)
    item.features.push_back(std::string("header:") + header);
  for (std::string& t : test::inlined_templates(emit_kernel(spec).source)) item.features.push_back(std::move(t));
  return item;
}

// The largest tiles: in each strategy and pass, the variant of the most outputs a thread, then a block, then the
// widest accumulator and argmax: the first to spill. (Each math's and dtype's smaller tiles are in the cover.)
void mark_largest(const std::vector<std::pair<KernelSpec, std::string>>& jobs, std::vector<test::SweepItem>& items) {
  const auto size = [](const KernelSpec& s) {
    return std::make_tuple(s.thread_m * s.thread_n, s.tile_m * s.tile_n * s.tile_k + s.block_x * s.block_y,
                           dtype_info(s.dtype).acc_bytes, s.with_argmax);
  };
  std::map<std::string, std::size_t> largest;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const KernelSpec& s = jobs[i].first;
    const std::string group = std::string(strategy_name(s.strategy)) + "/" + pass_name(s.pass);
    const auto it = largest.find(group);
    if (it == largest.end() || size(jobs[it->second].first) < size(s)) largest[group] = i;
  }
  for (const auto& [group, i] : largest) items[i].largest = true;
}

} // namespace

TEST_CASE(
    "every generated variant, forward and backward, compiles for sm_90 (a third also for sm_80), without spills") {
  std::vector<std::pair<KernelSpec, std::string>> all;
  // Every variant for sm_90; every third also for sm_80 (the tiled kernels take seconds each to compile).
  int n = 0;
  for (const KernelSpec& spec : test::all_variants()) {
    all.emplace_back(spec, "sm_90");
    if (n++ % 3 == 0 && !arch_specific(spec)) all.emplace_back(spec, "sm_80"); // wgmma: sm_90 alone
  }
  for (const KernelSpec& spec : test::grad_variants()) all.emplace_back(spec, "sm_90");
  std::vector<test::SweepItem> items;
  for (const auto& [spec, arch] : all) items.push_back(sweep_item(spec, arch));
  mark_largest(all, items);
  const test::SweepPlan plan = test::sweep_plan_from_env();
  const test::SweepChoice choice = test::select_sweep(items, plan);
  MESSAGE(test::describe(choice, plan, all.size(), "kernels"));
  // The subset reaches every feature the whole sweep does, and the whole sweep every strategy of the table.
  std::set<std::string> reached, every;
  for (std::size_t i : choice.chosen) reached.insert(items[i].features.begin(), items[i].features.end());
  for (const test::SweepItem& item : items) every.insert(item.features.begin(), item.features.end());
  CHECK(reached == every);
  for (const StrategyDef* def : strategy_defs())
    CHECK_MESSAGE(every.count(std::string("strategy+pass=") + def->name + "/" +
                              (def->backward ? "grad_a" : "forward")),
                  def->name);
  std::vector<std::pair<KernelSpec, std::string>> jobs;
  for (std::size_t i : choice.chosen) jobs.push_back(all[i]);
  // NVRTC is thread-safe: compile on every core.
  const unsigned workers = std::max(2u, std::thread::hardware_concurrency());
  std::vector<Outcome> outcomes(jobs.size());
  std::vector<std::thread> pool;
  std::atomic<std::size_t> next{0};
  test::SweepProgress progress("jitbmm_test_nvrtc kernels", jobs.size());
  for (unsigned w = 0; w < workers; ++w)
    pool.emplace_back([&] {
      for (std::size_t i; (i = next.fetch_add(1)) < jobs.size();) {
        outcomes[i] = compile_one(jobs[i].first, jobs[i].second);
        progress.one_done();
      }
    });
  for (auto& t : pool) t.join();
  REQUIRE(kComputeCacheOff);
  int without_report = 0;
  for (const Outcome& o : outcomes) {
    CAPTURE(o.name);
    CAPTURE(o.arch);
    CHECK_MESSAGE(o.error.empty(), o.error);
    CHECK(o.cubin_bytes > 0);
    // A missing report would leave spills unknown: that is a failure, not a pass (see kComputeCacheOff).
    CHECK_MESSAGE(o.res.registers >= 1, "no ptxas report in NVRTC's log");
    without_report += o.res.registers < 1;
    CHECK(o.res.stack_bytes >= 0);
    CHECK(o.res.spill_store_bytes == 0);
    CHECK(o.res.spill_load_bytes == 0);
    CHECK(o.module.spill_store_bytes == 0);
    CHECK(o.module.spill_load_bytes == 0);
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
