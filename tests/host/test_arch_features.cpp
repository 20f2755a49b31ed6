// The architecture feature table (generator/arch_features.hpp): what each architecture gets, what a feature level
// leaves, the floor, the macros the device code sees, and what specs need, checked without a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "generator/arch_features.hpp"
#include "generator/chain_source.hpp"
#include "generator/embedded_templates.hpp"
#include "generator/emit_source.hpp"
#include "generator/needed_features.hpp"
#include "jitbmm/kernel_spec.hpp"
#include "runtime/device.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "tests/process_state.hpp"

using namespace jitbmm;

namespace {

constexpr unsigned kAmpere = kNanMinMax | kHalfPairs | kAsyncCopy | kMmaTf32Bf16;
constexpr unsigned kAll = kAmpere | kWgmma | kClusters | kBulkCopy;
constexpr unsigned kWgmmaNeeds = kWgmma | kBulkCopy | kAsyncCopy;

// The message of the std::invalid_argument `f` throws ("" when it throws none).
template <class F> std::string invalid_argument_of(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

KernelSpec exp_matmul_spec(Math math) {
  KernelSpec s;
  s.strategy = Strategy::exp_matmul;
  s.math = math;
  return s;
}

ChainProblem crf_chain(int64_t C) {
  ChainProblem p;
  p.B = 2, p.T = 64, p.C = C;
  return p;
}

} // namespace

TEST_CASE("each architecture's features: none before sm_80, wgmma on sm_90 alone, clusters and TMA from sm_90") {
  const std::vector<std::pair<int, unsigned>> expected = {
      {70, 0},       {75, 0},    {80, kAmpere},         {86, kAmpere},
      {89, kAmpere}, {90, kAll}, {100, kAll & ~kWgmma}, {120, kAll & ~kWgmma},
  };
  for (const auto& [sm, bits] : expected) {
    CAPTURE(sm);
    CHECK(arch_features(sm) == ArchFeatures{sm, bits});
  }
  CHECK(arch_features(90).has(kWgmma | kClusters));
  CHECK_FALSE(arch_features(100).has(kWgmma | kClusters));
  CHECK(arch_features(100).has(kClusters));
}

TEST_CASE("the table: one bit, name and macro per feature, every bit of the enum listed") {
  std::set<unsigned> bits;
  std::set<std::string> names, macros;
  for (const FeatureInfo& f : feature_table()) {
    CAPTURE(f.name);
    CHECK(bits.insert(f.bit).second);
    CHECK(names.insert(f.name).second);
    CHECK(macros.insert(f.macro).second);
    CHECK(std::string(f.macro).rfind("JB_HAS_", 0) == 0);
    CHECK(f.since >= kOldestSm);
  }
  unsigned all = 0;
  for (unsigned b : bits) all |= b;
  CHECK(all == kAll);
}

TEST_CASE("a feature level leaves the features both the GPU and the level have") {
  CHECK(capped_features(90, 75) == ArchFeatures{75, 0});
  CHECK(capped_features(90, 80) == ArchFeatures{80, kAmpere});
  CHECK(capped_features(90, 90) == arch_features(90));
  CHECK(capped_features(86, 80) == ArchFeatures{80, kAmpere});
  // wgmma is sm_90's alone: an sm_100 GPU at level sm_90 has none, but keeps clusters and TMA.
  const ArchFeatures blackwell_at_hopper = capped_features(100, 90);
  CHECK(blackwell_at_hopper.sm == 90);
  CHECK_FALSE(blackwell_at_hopper.has(kWgmma));
  CHECK(blackwell_at_hopper.has(kClusters | kBulkCopy | kAmpere));
}

TEST_CASE("features_in_use: the GPU's own, or the level JITBMM_FEATURES names; a level it cannot be is refused") {
  {
    const test::ScopedEnv unset("JITBMM_FEATURES", nullptr);
    CHECK(features_in_use(90) == arch_features(90));
  }
  {
    const test::ScopedEnv empty("JITBMM_FEATURES", "");
    CHECK(features_in_use(86) == arch_features(86));
  }
  {
    const test::ScopedEnv level("JITBMM_FEATURES", "sm_75");
    CHECK(features_in_use(90) == ArchFeatures{75, 0});
    CHECK(features_in_use(75) == arch_features(75));
  }
  {
    const test::ScopedEnv level("JITBMM_FEATURES", "sm_90");
    CHECK(features_in_use(100) == capped_features(100, 90));
    const std::string above = invalid_argument_of([] { features_in_use(86); });
    CHECK(above.rfind("JITBMM_FEATURES: level sm_90 is above this GPU's architecture, sm_86", 0) == 0);
  }
  {
    const test::ScopedEnv low("JITBMM_FEATURES", "sm_61");
    CHECK(invalid_argument_of([] { features_in_use(90); }) ==
          "JITBMM_FEATURES: sm_61 is below jitbmm's floor, " + sm_name(kOldestSm));
  }
  {
    const test::ScopedEnv bad("JITBMM_FEATURES", "turing");
    CHECK(invalid_argument_of([] { features_in_use(90); }).rfind("JITBMM_FEATURES: expected an architecture", 0) == 0);
  }
}

TEST_CASE("parse_sm reads sm_XY, compute_XY and sm_XYa; anything else is an error naming the argument and text") {
  CHECK(parse_sm("sm_75", "--arch") == 75);
  CHECK(parse_sm("sm_120", "--arch") == 120);
  CHECK(parse_sm("compute_80", "--arch") == 80);
  CHECK(parse_sm("sm_90a", "--arch") == 90);
  CHECK(sm_name(86) == "sm_86");
  for (const char* bad : {"", "sm_", "sm_7", "sm_1000", "sm_075", "75", "sm75", "sm_75x", "sm_7a5", "compute_", "SM_75",
                          " sm_75", "sm_-75", "sm_aa"}) {
    CAPTURE(bad);
    CHECK(invalid_argument_of([&] { parse_sm(bad, "JITBMM_FEATURES"); }) ==
          std::string("JITBMM_FEATURES: expected an architecture such as sm_75 or sm_90, got '") + bad + "'");
  }
}

TEST_CASE("the floor: the oldest architecture both jitbmm and the NVRTC in use target") {
  // nvrtcGetSupportedArchs of NVRTC 13.0 and of 12.8, which still targets Volta.
  CHECK(floor_sm({75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121}) == 75);
  CHECK(floor_sm({50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 120}) == 70);
  CHECK(floor_sm({90, 80, 100}) == 80); // order does not matter
  CHECK(floor_sm({}) == kOldestSm);
  // This machine's NVRTC: its floor is one of the architectures it targets, never below jitbmm's oldest.
  const std::vector<int> here = nvrtc_supported_archs();
  const int floor = floor_sm(here);
  CHECK(floor >= kOldestSm);
  CHECK(std::find(here.begin(), here.end(), floor) != here.end());
}

TEST_CASE("feature_defines: every JB_HAS_* macro once, 1 where the features have it and 0 elsewhere") {
  for (int sm : {70, 75, 80, 90, 100}) {
    CAPTURE(sm);
    const ArchFeatures f = arch_features(sm);
    const std::vector<std::string> defines = feature_defines(f);
    REQUIRE(defines.size() == feature_table().size());
    std::set<std::string> seen;
    for (std::size_t i = 0; i < defines.size(); ++i) {
      const FeatureInfo& info = feature_table()[i];
      CHECK(defines[i] == std::string("-D") + info.macro + "=" + (f.has(info.bit) ? "1" : "0"));
      CHECK(seen.insert(info.macro).second);
    }
  }
  for (const std::string& d : feature_defines(arch_features(75))) CHECK(d.substr(d.size() - 2) == "=0");
  for (const std::string& d : feature_defines(arch_features(90))) CHECK(d.substr(d.size() - 2) == "=1");
}

TEST_CASE("the device code's feature macros are the table's: features.cuh checks all of them, templates use no other") {
  std::set<std::string> table;
  for (const FeatureInfo& f : feature_table()) table.insert(f.macro);
  // core/features.cuh's #error fires unless every one is defined: it must name exactly the table's macros.
  const std::string check(template_text("core/features.cuh"));
  const std::regex defined_macro(R"(defined\((JB_HAS_[A-Z0-9_]+)\))");
  std::set<std::string> checked;
  for (std::sregex_iterator m(check.begin(), check.end(), defined_macro), end; m != end; ++m)
    checked.insert((*m)[1].str());
  CHECK(checked == table);
  CHECK(check.find("#error") != std::string::npos);
  // A template that tested a macro the table does not define would see it as 0 everywhere, silently.
  const std::regex any_macro(R"(JB_HAS_[A-Z0-9_]+)");
  for (const EmbeddedTemplate& t : embedded_templates()) {
    const std::string text = t.text;
    for (std::sregex_iterator m(text.begin(), text.end(), any_macro), end; m != end; ++m) {
      CAPTURE(t.name);
      CHECK(table.count(m->str()) == 1);
    }
  }
}

TEST_CASE("needed_features: exp_matmul's mma forms need TF32/BF16 mma, its wgmma forms wgmma, TMA and cp.async") {
  const std::vector<std::pair<Math, unsigned>> expected = {
      {Math::fma, 0},
      {Math::tf32x3, kMmaTf32Bf16},
      {Math::tf32, kMmaTf32Bf16},
      {Math::bf16, kMmaTf32Bf16},
      {Math::wgmma_tf32x3, kWgmmaNeeds},
      {Math::wgmma_tf32, kWgmmaNeeds},
      {Math::wgmma_bf16, kWgmmaNeeds},
      {Math::wgmma_bf16_fused, kWgmmaNeeds},
  };
  REQUIRE(static_cast<int>(expected.size()) == math_count());
  for (const auto& [math, needs] : expected) {
    CAPTURE(math_name(math));
    CHECK(needed_features(exp_matmul_spec(math)) == needs);
    // Where the level has them the tuner may offer it; sm_75 has none of them, sm_100 no wgmma.
    CHECK(arch_features(75).has(needed_features(exp_matmul_spec(math))) == (needs == 0));
    CHECK(arch_features(100).has(needs) == !uses_wgmma(math));
    CHECK(arch_features(90).has(needs));
  }
  // Strategies without a math field need nothing, whatever the field holds.
  KernelSpec tiled;
  tiled.strategy = Strategy::tiled;
  tiled.math = Math::wgmma_bf16;
  CHECK(needed_features(tiled) == 0);
  // The emitted kernel carries its spec's needs.
  Problem p;
  p.shape = {2, 64, 64, 64};
  KernelSpec em = default_spec(p, Strategy::exp_matmul);
  em.math = Math::tf32x3;
  CHECK(emit_kernel(em).needs == kMmaTf32Bf16);
  CHECK(emit_kernel(default_spec(p)).needs == 0);
}

TEST_CASE("a chain unit needs clusters where its loop is split over more than one block, and nothing else") {
  const ChainProblem p = crf_chain(128);
  for (const GeneratedKernel& unit : emit_chain_units(default_chain_spec(p))) CHECK(unit.needs == 0);
  CHECK(emit_chain_kernel(clustered_chain_spec(p, 2)).needs == kClusters);
  CHECK(emit_chain_kernel(clustered_chain_spec(p, 2), ChainUnit::saving).needs == kClusters);
  CHECK(emit_chain_kernel(clustered_chain_spec(p, 2), ChainUnit::backward).needs == 0);
  const ChainSpec saving_alone = clustered_chain_spec(p, 1, 4); // the saving forward's cluster alone
  CHECK(emit_chain_kernel(saving_alone).needs == 0);
  CHECK(emit_chain_kernel(saving_alone, ChainUnit::saving).needs == kClusters);
}

TEST_CASE("missing_features names each missing feature with the architectures that have it; feature_names lists") {
  CHECK(missing_features(kMmaTf32Bf16, arch_features(75)) == "TF32/BF16 mma (sm_80 and later)");
  CHECK(missing_features(kWgmmaNeeds, arch_features(80)) == "wgmma (sm_90 alone), TMA (sm_90 and later)");
  CHECK(missing_features(kWgmmaNeeds, arch_features(100)) == "wgmma (sm_90 alone)");
  CHECK(missing_features(kWgmmaNeeds, arch_features(75)) ==
        "cp.async (sm_80 and later), wgmma (sm_90 alone), TMA (sm_90 and later)");
  CHECK(missing_features(kClusters, {}) == "clusters (sm_90 and later)");
  CHECK(missing_features(kWgmmaNeeds, arch_features(90)).empty());
  CHECK(missing_features(0, arch_features(70)).empty());
  CHECK(feature_names(0) == "none");
  CHECK(feature_names(arch_features(80).bits) == "max.NaN, half pairs, cp.async, TF32/BF16 mma");
  CHECK(feature_names(arch_features(90).bits) == "max.NaN, half pairs, cp.async, TF32/BF16 mma, wgmma, clusters, TMA");
}

TEST_CASE("kernel_target refuses a kernel whose needs the GPU's features at its level lack, naming both") {
  GeneratedKernel k;
  k.name = "log_f32_exp_matmul_wgmma_tf32x3_test";
  k.needs = kWgmmaNeeds;
  CHECK(kernel_target(k, "sm_90", arch_features(90)) == "sm_90a");
  const std::string at_level = invalid_argument_of([&] { kernel_target(k, "sm_90", capped_features(90, 80)); });
  CHECK(at_level.find("kernel " + k.name + " needs wgmma (sm_90 alone), TMA (sm_90 and later)") == 0);
  CHECK(at_level.find("feature level sm_80 on sm_90 lacks") != std::string::npos);
  CHECK(invalid_argument_of([&] { kernel_target(k, "sm_100", arch_features(100)); }).find("sm_100 lacks") !=
        std::string::npos);
  k.needs = kMmaTf32Bf16;
  CHECK(kernel_target(k, "sm_86", arch_features(86)) == "sm_86");
  CHECK(invalid_argument_of([&] {
          kernel_target(k, "sm_90", capped_features(90, 75));
        }).find("needs TF32/BF16 mma (sm_80 and later)") != std::string::npos);
}
