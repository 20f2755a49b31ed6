// ChainTrial: a chain problem's inputs on the device, and one variant's timings on them.
#include "cli/chain_trial.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "jitbmm/reference.hpp"
#include "runtime/chain_plan.hpp"
#include "runtime/timing.hpp"

namespace jitbmm::cli {

namespace {

// The three tables laid one after the other in `base`, as inputs or as their gradients.
std::pair<HmmInputs, HmmGradients> tables_at(unsigned char* base, const ChainProblem& p) {
  const int64_t bytes = dtype_info(p.dtype).size_bytes;
  unsigned char* transitions = base + p.B * p.T * p.C * bytes;
  unsigned char* initial = transitions + p.C * p.C * bytes;
  return {HmmInputs{base, transitions, initial}, HmmGradients{base, transitions, initial}};
}

} // namespace

ChainTrial::ChainTrial(const ChainProblem& p, bool tune_products) : p_(p), tune_products_(tune_products) {
  const DType out = chain_output_dtype(p);
  const int bytes = dtype_info(p.dtype).size_bytes, out_bytes = dtype_info(out).size_bytes;
  const bool hmm = p.form == ChainForm::hmm;
  const int64_t n_input = hmm ? p.B * p.T * p.C + p.C * p.C + p.C : p.B * (p.T - 1) * p.C * p.C;
  std::vector<unsigned char> host(std::size_t(n_input) * bytes); // only until uploaded and scored on the CPU
  std::mt19937_64 rng(2024);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int64_t i = 0; i < n_input; ++i) store_element(p.dtype, host.data(), i, normal(rng));
  inputs_ = DeviceBuffer(host.size() + 1);
  inputs_.upload(host.data(), host.size());
  grad_ = DeviceBuffer(host.size() + 1);
  score_ = DeviceBuffer(p.B * out_bytes);
  grad_score_ = DeviceBuffer(p.B * out_bytes);
  path_ = DeviceBuffer(p.semiring == Semiring::log ? 0 : p.B * p.T * 4);
  std::vector<unsigned char> ones(p.B * out_bytes);
  for (int64_t b = 0; b < p.B; ++b) store_element(out, ones.data(), b, 1.0);
  grad_score_.upload(ones.data(), ones.size());
  // The first sequence's score on the CPU.
  ChainProblem first = p;
  first.B = 1;
  if (hmm) {
    // The first sequence's emissions lead the buffer; the tables follow all B sequences'.
    const HmmInputs all = tables_at(host.data(), p).first;
    reference::chain_forward(first, all, nullptr, &want_, nullptr, nullptr);
  } else {
    reference::chain_forward(first, host.data(), nullptr, &want_, nullptr, nullptr);
  }
}

ChainRow ChainTrial::measure(const ChainSpec& spec, int reps, int64_t chunk, bool stepped) {
  const bool log = p_.semiring == Semiring::log, hmm = p_.form == ChainForm::hmm;
  const ChainPlan plan = chain_plan_for(p_, spec, chunk, tune_products_, stepped);
  DeviceBuffer saved(plan.saved_bytes() + 1), workspace(plan.workspace_bytes(true) + 1),
      backward_workspace(plan.backward_workspace_bytes() + 1);
  const Workspace ws{workspace.get(), plan.workspace_bytes(true)};
  const Workspace bws{backward_workspace.get(), plan.backward_workspace_bytes()};
  const HmmInputs inputs = tables_at(static_cast<unsigned char*>(inputs_.get()), p_).first;
  const HmmGradients grads = tables_at(static_cast<unsigned char*>(grad_.get()), p_).second;
  // The forward with `saved` or the best path as asked, and the backward from them, in either form.
  auto forward = [&](Stream st, void* keep, int32_t* best) {
    if (hmm)
      plan(inputs, nullptr, score_.get(), keep, nullptr, best, st, ws);
    else
      plan(inputs_.get(), nullptr, score_.get(), keep, nullptr, best, st, ws);
  };
  auto backward = [&](Stream st, const void* keep, const int32_t* best) {
    if (hmm)
      plan.backward(inputs, nullptr, keep, best, grad_score_.get(), grads, st, bws);
    else
      plan.backward(inputs_.get(), nullptr, keep, best, grad_score_.get(), grad_.get(), st, bws);
  };
  ChainRow row{spec, chunk, stepped};
  row.forward_ms = time_launches([&](Stream st) { forward(st, nullptr, nullptr); }, 3, reps).median_ms;
  void* keep = log ? saved.get() : nullptr;
  auto* best = log ? nullptr : static_cast<int32_t*>(path_.get());
  row.saving_ms = time_launches([&](Stream st) { forward(st, keep, best); }, 3, reps).median_ms;
  row.backward_ms = time_launches([&](Stream st) { backward(st, keep, best); }, 3, reps).median_ms;
  const DType out = chain_output_dtype(p_);
  std::vector<unsigned char> got(dtype_info(out).size_bytes);
  score_.download(got.data(), got.size());
  const double tolerance = out == DType::f32 ? 1e-5 : 1e-11;
  row.checked = std::fabs(load_element(out, got.data(), 0) - want_) <= tolerance * std::max(1.0, std::fabs(want_));
  return row;
}

} // namespace jitbmm::cli
