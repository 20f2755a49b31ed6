// The tuning policy's names and where the process's policy comes from.
#include "runtime/tuner/policy.hpp"

#include <atomic>
#include <cstdlib>

#include "support/enum_names.hpp"
#include "support/env_words.hpp"

namespace jitbmm {

namespace {

constexpr EnumName<TunePolicy> kPolicyNames[] = {
    {TunePolicy::never, "never"}, {TunePolicy::bucket, "bucket"}, {TunePolicy::exact, "exact"}};

std::atomic<int> g_policy_override{-1};
thread_local bool t_tuning_held = false;
thread_local bool t_launches_held = false;

} // namespace

const char* tune_policy_name(TunePolicy policy) { return enum_name(kPolicyNames, policy, "JITBMM_TUNE"); }

TunePolicy parse_tune_policy(const std::string& text) { return parse_env_enum(kPolicyNames, text, "JITBMM_TUNE"); }

void set_tune_policy(std::optional<TunePolicy> policy) { g_policy_override = policy ? static_cast<int>(*policy) : -1; }

TuningHold::TuningHold(bool hold, bool capturing)
    : previous_(t_tuning_held), previous_capturing_(t_launches_held) {
  t_tuning_held = previous_ || hold;
  t_launches_held = previous_capturing_ || (hold && capturing);
}
TuningHold::~TuningHold() {
  t_tuning_held = previous_;
  t_launches_held = previous_capturing_;
}
bool TuningHold::active() { return t_tuning_held; }
bool TuningHold::capturing() { return t_launches_held; }

TunePolicy tune_policy_from_env() {
  if (const int v = g_policy_override.load(); v >= 0) return static_cast<TunePolicy>(v);
  const char* v = std::getenv("JITBMM_TUNE");
  return v && *v ? parse_tune_policy(v) : TunePolicy::bucket;
}

bool is_small_problem(const Problem& p) {
  const Shape& s = p.shape;
  return double(s.B) * double(s.M) * double(s.N) * double(s.K) < kSmallProblemTerms;
}

} // namespace jitbmm
