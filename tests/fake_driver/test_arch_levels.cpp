// Feature levels and the floor on the fake driver (test_with_fake_driver.cpp says how it runs): JITBMM_FEATURES on a
// fake sm_90, and a fake GPU below the floor ($JITBMM_FAKE_CUDA_SM). A process describes its device once, so each
// case runs helper processes of this program with the variables set.
#include <doctest/doctest.h>

#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

#include "generator/arch_features.hpp"
#include "jitbmm/c_api.h"
#include "jitbmm/chain.hpp"
#include "jitbmm/errors.hpp"
#include "jitbmm/plan.hpp"
#include "runtime/autotune.hpp"
#include "runtime/device.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "tests/fake_driver/helper_process.hpp"

using namespace jitbmm;

namespace {

Problem small_log_problem() {
  Problem p;
  p.shape = {2, 3, 4, 5};
  return p;
}

// What `f` threw, as "<kind>: <message>" ("none" when it threw nothing).
template <class F> std::string outcome(F f) {
  try {
    f();
    return "none";
  } catch (const std::invalid_argument& e) {
    return std::string("invalid_argument: ") + e.what();
  } catch (const UnsupportedDeviceError& e) {
    return std::string("unsupported_device: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("error: ") + e.what();
  }
}

// --device-level: the device as this process describes it ("arch", the feature "level", its "features" and the
// "tuning" arch its decisions are kept under, the tuning "key" of small_log_problem, a "plan"'s kernel), or the
// error describing it threw.
int device_level() {
  const std::string thrown = outcome([] {
    const auto device = current_device();
    const TuningDevice td = tuning_device(*device);
    std::printf("arch %s\nlevel %s\nfeatures %s\ntuning %s\nkey %s\n", device->arch().c_str(),
                sm_name(device->features.sm).c_str(), feature_names(device->features.bits).c_str(), td.arch.c_str(),
                tuning_key(small_log_problem(), td, true).c_str());
    std::printf("plan %s\n", SemiringBMM::get(small_log_problem()).kernel_name().c_str());
  });
  if (thrown != "none") std::printf("%s\n", thrown.c_str());
  return 0;
}

// --old-device: each way of planning, and what it threw; then the NVRTC compiles the process made.
int old_device() {
  ChainProblem chain;
  chain.B = 2, chain.T = 8, chain.C = 4;
  std::printf("products %s\n", outcome([] { SemiringBMM::get(small_log_problem()); }).c_str());
  std::printf("chain %s\n", outcome([&] { ChainPlan::get(chain); }).c_str());
  jitbmm_problem p;
  jitbmm_plan* plan = nullptr;
  jitbmm_status s = jitbmm_problem_row_major(&p, "log", "f32", 2, 3, 4, 5);
  if (s == JITBMM_OK) s = jitbmm_plan_create(&p, &plan);
  jitbmm_plan_destroy(plan);
  std::printf("c_abi %d: %s\ncompiles %ld\n", static_cast<int>(s), jitbmm_last_error(), nvrtc_compile_count());
  return 0;
}

} // namespace

int test::arch_level_helper(const std::string& mode) {
  return mode == "--device-level" ? device_level() : old_device();
}

TEST_CASE("JITBMM_FEATURES on a fake sm_90: the level's features, decisions kept apart, plans compiled for sm_90") {
  const test::HelperRun own = test::run_helper({"--device-level"}, {{"JITBMM_FEATURES", ""}});
  INFO(own.output);
  CHECK(test::line_of(own.output, "level") == "sm_90");
  CHECK(test::line_of(own.output, "tuning") == "sm_90");
  CHECK(test::line_of(own.output, "features") == feature_names(arch_features(90).bits));
  for (const char* level : {"sm_75", "sm_80"}) {
    const test::HelperRun r = test::run_helper({"--device-level"}, {{"JITBMM_FEATURES", level}});
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(test::line_of(r.output, "arch") == "sm_90");
    CHECK(test::line_of(r.output, "level") == level);
    CHECK(test::line_of(r.output, "features") == feature_names(arch_features(parse_sm(level, "level")).bits));
    CHECK(test::line_of(r.output, "tuning") == std::string("sm_90@") + level);
    CHECK(test::line_of(r.output, "key") != test::line_of(own.output, "key")); // no decision of the GPU's own serves a level
    CHECK(test::line_of(r.output, "plan").rfind("log_f32_", 0) == 0);
  }
  // The GPU's own architecture as the level is no level at all.
  const test::HelperRun same = test::run_helper({"--device-level"}, {{"JITBMM_FEATURES", "sm_90"}});
  CHECK(test::line_of(same.output, "tuning") == "sm_90");
  CHECK(test::line_of(same.output, "key") == test::line_of(own.output, "key"));
}

TEST_CASE("JITBMM_FEATURES above the GPU, below the floor or malformed is an error naming it, also at the C ABI") {
  const std::pair<const char*, const char*> refused[] = {
      {"sm_100", "JITBMM_FEATURES: level sm_100 is above this GPU's architecture, sm_90"},
      {"sm_61", "JITBMM_FEATURES: sm_61 is below jitbmm's floor, sm_70"},
      {"turing", "JITBMM_FEATURES: expected an architecture such as sm_75 or sm_90, got 'turing'"},
      {"sm75", "JITBMM_FEATURES: expected an architecture such as sm_75 or sm_90, got 'sm75'"},
  };
  for (const auto& [value, message] : refused) {
    CAPTURE(value);
    const test::HelperRun r = test::run_helper({"--device-level"}, {{"JITBMM_FEATURES", value}});
    CHECK_MESSAGE(r.output.rfind(std::string("invalid_argument: ") + message, 0) == 0, r.output);
    const test::HelperRun c = test::run_helper({"--c-plan"}, {{"JITBMM_FEATURES", value}});
    CHECK_MESSAGE(c.output.rfind("status " + std::to_string(JITBMM_INVALID_ARGUMENT) + ": " + message, 0) == 0,
                  c.output);
  }
}

TEST_CASE("a GPU below the floor: every way of planning fails at once with UnsupportedDeviceError (status 7 at the C "
          "ABI) naming the device, its arch and the floor") {
  const test::HelperRun r =
      test::run_helper({"--old-device"}, {{"JITBMM_FAKE_CUDA_SM", "61"}, {"JITBMM_CACHE", "off"}});
  INFO(r.output);
  REQUIRE(r.status == 0);
  const std::string floor = sm_name(floor_sm(nvrtc_supported_archs()));
  const std::string refusal =
      "device 0 (Fake sm_61) is sm_61; jitbmm needs " + floor + " or later with NVRTC " + nvrtc_version();
  CHECK(test::line_of(r.output, "products").rfind("unsupported_device: " + refusal, 0) == 0);
  CHECK(test::line_of(r.output, "chain").rfind("unsupported_device: " + refusal, 0) == 0);
  // The C ABI gives the refusal its own status, with the whole message.
  CHECK(test::line_of(r.output, "c_abi") == std::to_string(JITBMM_UNSUPPORTED_DEVICE) +
                                          ": device 0 (Fake sm_61) is sm_61; jitbmm needs " +
                                          supported_architectures());
  CHECK(test::line_of(r.output, "c_abi").rfind("7: " + refusal, 0) == 0); // the value is part of the ABI
  CHECK(test::line_of(r.output, "compiles") == "0"); // refused before any kernel was compiled, not by NVRTC or ptxas
  // The fake at a supported architecture plans (the same helper, so the refusal above is the architecture's).
  const test::HelperRun ok = test::run_helper({"--old-device"}, {{"JITBMM_FAKE_CUDA_SM", "80"}});
  CHECK_MESSAGE(test::line_of(ok.output, "products") == "none", ok.output);
  CHECK_MESSAGE(test::line_of(ok.output, "c_abi").rfind("0:", 0) == 0, ok.output);
}
