// What each GPU architecture's instructions allow: one table of features, read by the compile options (the device
// code sees each feature as a JB_HAS_* macro, templates/core/features.cuh), by the specs that need a feature
// (generator/needed_features.hpp: the tuner offers them only where it is present, and compiling one elsewhere is an
// error naming it) and by the chains' clusters. Nothing else in jitbmm asks an architecture's number what it can do.
//
// A feature level caps what is used: kernels compiled for one GPU with the features of an older architecture (the
// runtime's JITBMM_FEATURES=sm_75 runs the Turing code paths on a Hopper GPU).
#pragma once

#include <string>
#include <vector>

namespace jitbmm {

// The features, one bit each. Every one but the last three has an older equivalent in the templates, with the same
// results (NaN and ties included): a feature only makes a kernel faster, except those whose kernels need it.
enum Feature : unsigned {
  kNanMinMax = 1u << 0,   // max.NaN / min.NaN on f32
  kHalfPairs = 1u << 1,   // packed f16x2 / bf16x2 max, min and bf16 fma; one-instruction bf16 and pair conversions
  kAsyncCopy = 1u << 2,   // cp.async from global to shared memory
  kMmaTf32Bf16 = 1u << 3, // mma.sync with TF32 and BF16 operands (exp_matmul's tf32x3, tf32 and bf16 math)
  kWgmma = 1u << 4,       // Hopper's warpgroup mma and bulk copies (sm_90a: sm_90 alone)
  kClusters = 1u << 5,    // thread-block clusters and distributed shared memory (a chain's blocks per sequence)
  kBulkCopy = 1u << 6,    // the tensor memory accelerator's bulk copies and transaction barriers
};

struct FeatureInfo {
  Feature bit;
  const char* name;  // as `jitbmm info` lists it
  const char* macro; // the device code's JB_HAS_* macro
  int since;         // the first architecture that has it (75 for sm_75)
  int only = 0;      // where nonzero, the one architecture that has it
};
const std::vector<FeatureInfo>& feature_table();

// What an architecture offers, or the features a level allows.
struct ArchFeatures {
  int sm = 0;         // 75 for sm_75: the architecture (or the level) the bits are those of
  unsigned bits = 0;  // Feature bits
  bool has(unsigned needed) const { return (bits & needed) == needed; }
  bool operator==(const ArchFeatures& o) const { return sm == o.sm && bits == o.bits; }
};
ArchFeatures arch_features(int sm);
// The features of a GPU of architecture `sm` at level `level` (every feature of both: wgmma is sm_90's alone, so
// an sm_100 GPU at level sm_90 has none).
ArchFeatures capped_features(int sm, int level);

// The oldest architecture jitbmm supports, whatever NVRTC can target: the oldest it is compiled and tested for.
constexpr int kOldestSm = 70;
// The floor with an NVRTC that targets `nvrtc_archs` (nvrtcGetSupportedArchs): the oldest architecture both allow.
int floor_sm(const std::vector<int>& nvrtc_archs);

// The shared memory a block may take (opt-in) on the GPUs of architecture `sm`, the least among them (what the driver
// says such a device has, DeviceInfo::max_shared_per_block_optin): for what is built for an architecture offline.
int least_shared_optin_bytes(int sm);

// 75 from "sm_75" (also "compute_75" and "sm_90a"); std::invalid_argument naming `what` otherwise.
int parse_sm(const std::string& text, const std::string& what);
std::string sm_name(int sm); // "sm_75"

// The -D options that give the device code its features: every JB_HAS_* macro, 0 or 1.
std::vector<std::string> feature_defines(const ArchFeatures& features);

// The names of the `needed` features that `have` lacks, each with the architectures that have it, joined by ", "
// ("mma.sync on TF32 and BF16 (sm_80 and later)"); empty when none is missing.
std::string missing_features(unsigned needed, const ArchFeatures& have);
// The features' names, joined by ", " ("none" for no bits).
std::string feature_names(unsigned bits);

} // namespace jitbmm
