// Planning with the choice cascade's spec: a stored decision's spec that fails to compile or load is rejected, with a
// warning naming the decision, and the choice made again.
#include "runtime/tuner/plan_with_choice.hpp"

#include <algorithm>
#include <exception>
#include <string>

#include "jitbmm/errors.hpp"
#include "support/log.hpp"

namespace jitbmm {

KernelSpec plan_with_choice(const std::function<Choice(const std::vector<KernelSpec>& rejected)>& decide,
                            const std::function<void(const KernelSpec&)>& plan) {
  std::vector<KernelSpec> rejected;
  for (;;) {
    const Choice choice = decide(rejected);
    // Only a stored decision may be wrong about what compiles: the default, a spec tuned now (which compiled to be
    // timed) and one already rejected propagate their errors.
    const bool stored = choice.stored && std::find(rejected.begin(), rejected.end(), choice.spec) == rejected.end();
    if (!stored) {
      plan(choice.spec);
      return choice.spec;
    }
    try {
      plan(choice.spec);
      return choice.spec;
    } catch (const std::exception& e) {
      if (!dynamic_cast<const CompileError*>(&e) && !dynamic_cast<const CudaError*>(&e)) throw;
      log_message(LogLevel::warn, "ignoring the stored tuning decision (" + choice.source + ", tuned for " +
                                      choice.decision->problem + "): " + to_string(choice.spec) +
                                      " failed to compile or load (" + e.what() + "); deciding again without it");
      rejected.push_back(choice.spec);
    }
  }
}

} // namespace jitbmm
