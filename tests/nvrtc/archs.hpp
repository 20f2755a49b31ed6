// The architectures the NVRTC compile tests build for: every one jitbmm supports (generator/arch_features.hpp), as the
// GPUs people have them: Turing (sm_75), Ampere (sm_80, sm_86), Ada (sm_89), Hopper (sm_90), and Volta (sm_70) where
// the NVRTC in use still targets it (12.x does, 13 does not). An NVRTC without one of the others is a failure; one
// without sm_70 is a line saying so, never a silent pass:
//   JITBMM_NVRTC_LIBRARY=<a libnvrtc.so.12> build/tests/jitbmm_test_nvrtc
// compiles the same tests for sm_70 too (scripts/test-sm70 fetches NVRTC 12 and does that). $JITBMM_NVRTC_ARCHS
// ("sm_70" or "sm_75,sm_90") compiles for those alone, each of which NVRTC must target.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "generator/arch_features.hpp"
#include "runtime/nvrtc_compiler.hpp"

namespace jitbmm::test {

// "sm_70, sm_75, ..."
inline std::string sm_names(const std::vector<int>& sms) {
  std::string out;
  for (int sm : sms) out += (out.empty() ? "" : ", ") + sm_name(sm);
  return out;
}

// The spill bytes a kernel may have on architecture `sm` beyond those it may have on sm_90. Tiles, register bounds
// and the chains' rule were chosen by timing them on sm_90 GPUs; ptxas for the older architectures, and their code
// without the Ampere instructions, keep a few more registers live in the tightest of them (the argmax tiles at their
// register bound, exp_matmul's FMA repair pass, the 128-state chain forwards: 12 to 36 bytes). Not timed on those
// GPUs: a bound, so that a template or rule that needs more shows.
constexpr int kOlderArchSpillBytes = 64;

// The shared memory a block may take (opt-in) on each architecture's GPUs, the least among them.
inline int shared_optin_bytes(int sm) { return least_shared_optin_bytes(sm); }
inline int older_arch_spill_bytes(int sm) { return sm < 90 ? kOlderArchSpillBytes : 0; }

// The spill bytes the tiled argmax kernel may have on sm_90 in its widest thread tile at its register bound (32
// outputs a thread, each a value and a k, at 2 blocks an SM: 128 registers), where ptxas for sm_90 stores up to 48
// bytes in local memory and loads up to 76. Timed, it is still faster than the tiles that do not spill (1 block an SM,
// a 4 × 4 thread tile; bench/RESULTS.md, "Viterbi and argmax"), so it stays: a bound, so that more shows.
constexpr int kArgmaxTileSpillBytes = 96;
inline int argmax_tile_spill_bytes(const KernelSpec& spec, int sm) {
  const bool widest = spec.strategy == Strategy::tiled && spec.with_argmax && spec.thread_m * spec.thread_n >= 32 &&
                      spec.min_blocks >= 2;
  return sm >= 90 && widest ? kArgmaxTileSpillBytes : 0;
}

// The kind of architecture `sm` is among `sms`: the oldest of them with the same features ("sm_80" for sm_86 and
// sm_89), whose device code is the same.
inline std::string feature_kind(int sm, const std::vector<int>& sms) {
  for (int other : sms)
    if (arch_features(other).bits == arch_features(sm).bits) return sm_name(std::min(other, sm));
  return sm_name(sm);
}

struct TestArchs {
  std::vector<int> sms;           // to compile for, oldest first
  std::vector<int> missing;       // of sm_75 and later, NVRTC cannot target these: a failure
  std::string note;               // what this NVRTC leaves out, and how to compile for it anyway
};

inline TestArchs test_archs() {
  TestArchs out;
  const std::vector<int> nvrtc = nvrtc_supported_archs();
  const auto targets = [&](int sm) { return std::find(nvrtc.begin(), nvrtc.end(), sm) != nvrtc.end(); };
  if (const char* chosen = std::getenv("JITBMM_NVRTC_ARCHS"); chosen && *chosen) {
    std::istringstream names(chosen);
    for (std::string name; std::getline(names, name, ',');) {
      const int sm = parse_sm(name, "JITBMM_NVRTC_ARCHS");
      (targets(sm) ? out.sms : out.missing).push_back(sm);
    }
    out.note = "JITBMM_NVRTC_ARCHS: compiling for " + sm_names(out.sms) + " alone";
    return out;
  }
  for (int sm : {70, 75, 80, 86, 89, 90}) {
    if (targets(sm))
      out.sms.push_back(sm);
    else if (sm > kOldestSm)
      out.missing.push_back(sm);
    else
      out.note = sm_name(sm) + " skipped: NVRTC " + nvrtc_version() + " cannot target it (NVRTC 12.x can: run with "
                 "JITBMM_NVRTC_LIBRARY naming its libnvrtc.so.12, as scripts/test-sm70 does)";
  }
  return out;
}

} // namespace jitbmm::test
