// The table the strategies of generator/strategies/ register into, and its lookups.
#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>

#include "generator/strategy.hpp"

namespace jitbmm {

namespace {

// Filled while the library's static objects are constructed; read-only afterwards. The entries are copies, at
// stable addresses.
std::vector<std::unique_ptr<const StrategyDef>>& owned() {
  static std::vector<std::unique_ptr<const StrategyDef>> defs;
  return defs;
}
std::vector<const StrategyDef*>& table() {
  static std::vector<const StrategyDef*> defs;
  return defs;
}

} // namespace

RegisterStrategy::RegisterStrategy(const StrategyDef& def) {
  auto& defs = table();
  for (const StrategyDef* d : defs)
    if (d->id == def.id && d->backward == def.backward)
      throw std::logic_error(std::string("strategy ") + def.name + " registered twice");
  owned().push_back(std::make_unique<const StrategyDef>(def));
  defs.push_back(owned().back().get());
  std::stable_sort(defs.begin(), defs.end(), [](const StrategyDef* x, const StrategyDef* y) {
    return x->id != y->id ? static_cast<int>(x->id) < static_cast<int>(y->id) : !x->backward && y->backward;
  });
}

std::vector<const StrategyDef*> strategy_defs() { return table(); }

const StrategyDef& strategy_def(Strategy strategy, Pass pass) {
  const bool backward = pass != Pass::forward;
  const StrategyDef* other = nullptr;
  for (const StrategyDef* d : table())
    if (d->id == strategy) {
      if (d->backward == backward) return *d;
      other = d;
    }
  if (!other) throw std::invalid_argument("strategy: unknown enum value " + std::to_string(static_cast<int>(strategy)));
  throw std::invalid_argument(std::string("strategy: ") + other->name + " is a " +
                              (backward ? "forward" : "backward") + " strategy");
}

const StrategyDef& strategy_def(const KernelSpec& spec) { return strategy_def(spec.strategy, spec.pass); }

} // namespace jitbmm
