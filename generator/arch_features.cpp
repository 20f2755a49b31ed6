// The architecture feature table (generator/arch_features.hpp): the one place an architecture's number decides
// what jitbmm's kernels may use.
#include "generator/arch_features.hpp"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace jitbmm {

const std::vector<FeatureInfo>& feature_table() {
  // PTX ISA: max.NaN/min.NaN, the f16x2/bf16x2 min/max/fma, cvt.rn.bf16(x2) and cp.async from sm_80; mma.sync
  // m16n8k8.tf32 and m16n8k16.bf16 from sm_80; wgmma only on sm_90a; clusters and the bulk copies from sm_90.
  // never destroyed: a background build may still use it as the process exits
  static const std::vector<FeatureInfo>& table = *new std::vector<FeatureInfo>{
      {kNanMinMax, "max.NaN", "JB_HAS_NAN_MINMAX", 80},
      {kHalfPairs, "half pairs", "JB_HAS_HALF_PAIRS", 80},
      {kAsyncCopy, "cp.async", "JB_HAS_ASYNC_COPY", 80},
      {kMmaTf32Bf16, "TF32/BF16 mma", "JB_HAS_MMA_TF32_BF16", 80},
      {kWgmma, "wgmma", "JB_HAS_WGMMA", 90, 90},
      {kClusters, "clusters", "JB_HAS_CLUSTERS", 90},
      {kBulkCopy, "TMA", "JB_HAS_BULK_COPY", 90},
  };
  return table;
}

ArchFeatures arch_features(int sm) {
  ArchFeatures f{sm, 0};
  for (const FeatureInfo& info : feature_table())
    if (info.only ? sm == info.only : sm >= info.since) f.bits |= info.bit;
  return f;
}

ArchFeatures capped_features(int sm, int level) {
  const int used = std::min(sm, level);
  return {used, arch_features(sm).bits & arch_features(level).bits};
}

int floor_sm(const std::vector<int>& nvrtc_archs) {
  int oldest = 0;
  for (int a : nvrtc_archs)
    if (a >= kOldestSm && (oldest == 0 || a < oldest)) oldest = a;
  return oldest == 0 ? kOldestSm : oldest;
}

int parse_sm(const std::string& text, const std::string& what) {
  std::string digits;
  for (const char* prefix : {"sm_", "compute_"})
    if (text.rfind(prefix, 0) == 0) digits = text.substr(std::string(prefix).size());
  if (!digits.empty() && digits.back() == 'a') digits.pop_back();
  const bool ok = digits.size() >= 2 && digits.size() <= 3 &&
                  std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); }) &&
                  digits[0] != '0';
  if (!ok) throw std::invalid_argument(what + ": expected an architecture such as sm_75 or sm_90, got '" + text + "'");
  return std::stoi(digits);
}

std::string sm_name(int sm) { return "sm_" + std::to_string(sm); }

int least_shared_optin_bytes(int sm) {
  switch (sm) {
  case 70: return 96 * 1024;          // V100
  case 75: return 64 * 1024;          // T4, RTX 20xx
  case 80: return 163 * 1024;         // A100
  case 86: case 89: return 99 * 1024; // RTX 30xx, A10, RTX 40xx, L4, L40
  default: return 227 * 1024;         // H100, H200
  }
}

std::vector<std::string> feature_defines(const ArchFeatures& features) {
  std::vector<std::string> out;
  for (const FeatureInfo& info : feature_table())
    out.push_back(std::string("-D") + info.macro + "=" + (features.has(info.bit) ? "1" : "0"));
  return out;
}

namespace {

std::string where(const FeatureInfo& info) {
  return info.only ? sm_name(info.only) + " alone" : sm_name(info.since) + " and later";
}

} // namespace

std::string missing_features(unsigned needed, const ArchFeatures& have) {
  std::string out;
  for (const FeatureInfo& info : feature_table())
    if ((needed & info.bit) && !have.has(info.bit))
      out += (out.empty() ? "" : ", ") + std::string(info.name) + " (" + where(info) + ")";
  return out;
}

std::string feature_names(unsigned bits) {
  std::string out;
  for (const FeatureInfo& info : feature_table())
    if (bits & info.bit) out += (out.empty() ? "" : ", ") + std::string(info.name);
  return out.empty() ? "none" : out;
}

} // namespace jitbmm
