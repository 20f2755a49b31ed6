#include "runtime/tuner/chain_trials.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "jitbmm/reference.hpp"
#include "runtime/timing.hpp"
#include "runtime/tuner/trials.hpp"

namespace jitbmm {

namespace {

// The three tables laid one after the other in `base`, as inputs or as their gradients.
std::pair<HmmInputs, HmmGradients> tables_at(unsigned char* base, const ChainProblem& p) {
  const int64_t bytes = dtype_info(p.dtype).size_bytes;
  unsigned char* transitions = base + p.B * p.T * p.C * bytes;
  unsigned char* initial = transitions + p.C * p.C * bytes;
  return {HmmInputs{base, transitions, initial}, HmmGradients{base, transitions, initial}};
}

// The values of one step of the first sequence's gradient (crf: [C][C] of the potentials; hmm: [C] of the emissions)
// as a distribution over that step's edges or states: log's are marginals, which sum to 1; max_plus's the best
// path's indicator, one 1 among zeros. Large steps (more than 4M values) are not read. The backward is checked by
// what every correct gradient is, where the CPU reference's gradients would cost minutes at the tuned sizes.
bool step_is_a_distribution(const DeviceBuffer& grad, const ChainProblem& p, int64_t step) {
  const int64_t values = p.form == ChainForm::hmm ? p.C : p.C * p.C;
  if (values > (int64_t(1) << 22)) return true;
  const int bytes = dtype_info(p.dtype).size_bytes;
  std::vector<unsigned char> host(std::size_t(values * bytes));
  grad.download(host.data(), host.size(), std::size_t(step * values * bytes));
  // Loose: a wrong kernel's step is far from a distribution, while C² marginals each rounded (in the gradient's
  // dtype, from exponents read to a few units in the last place) may sum a little off 1.
  const double tolerance = p.dtype == DType::f64 ? 1e-9 : p.dtype == DType::f32 ? 1e-3 : 5e-2;
  double sum = 0;
  int64_t ones = 0;
  for (int64_t i = 0; i < values; ++i) {
    const double v = load_element(p.dtype, host.data(), i);
    if (!(v >= -tolerance && v <= 1 + tolerance)) return false; // NaN too
    if (p.semiring != Semiring::log && v != 0 && v != 1) return false;
    sum += v;
    ones += v == 1;
  }
  return p.semiring == Semiring::log ? std::fabs(sum - 1) <= tolerance : ones == 1;
}

} // namespace

ChainTrial::ChainTrial(const ChainProblem& p) : p_(p) {
  const DType out = chain_output_dtype(p);
  const int out_bytes = dtype_info(out).size_bytes;
  const bool hmm = p.form == ChainForm::hmm;
  const int64_t n_input = hmm ? p.B * p.T * p.C + p.C * p.C + p.C : p.B * (p.T - 1) * p.C * p.C;
  std::mt19937_64 rng(2024);
  // Only until uploaded and scored on the CPU.
  std::vector<unsigned char> host = random_values(p.dtype, n_input, rng);
  inputs_ = DeviceBuffer(host.size() + 1);
  inputs_.upload(host.data(), host.size());
  grad_ = DeviceBuffer(host.size() + 1);
  score_ = DeviceBuffer(p.B * out_bytes);
  grad_score_ = DeviceBuffer(p.B * out_bytes);
  path_ = DeviceBuffer(p.semiring == Semiring::log ? 0 : p.B * p.T * 4);
  std::vector<unsigned char> ones(p.B * out_bytes);
  for (int64_t b = 0; b < p.B; ++b) store_element(out, ones.data(), b, 1.0);
  grad_score_.upload(ones.data(), ones.size());
  buffers_.potentials = inputs_.get();
  buffers_.hmm = tables_at(static_cast<unsigned char*>(inputs_.get()), p).first;
  buffers_.grad_potentials = grad_.get();
  buffers_.grad_hmm = tables_at(static_cast<unsigned char*>(grad_.get()), p).second;
  buffers_.score = score_.get();
  buffers_.grad_score = grad_score_.get();
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

ChainMeasure ChainTrial::measure(const ChainCandidate& c, int reps) {
  const bool log = p_.semiring == Semiring::log;
  DeviceBuffer saved(c.saved_bytes + 1), workspace(c.workspace_bytes + 1),
      backward_workspace(c.backward_workspace_bytes + 1);
  const Workspace ws{workspace.get(), c.workspace_bytes};
  const Workspace bws{backward_workspace.get(), c.backward_workspace_bytes};
  void* keep = log ? saved.get() : nullptr;
  auto* best = log ? nullptr : static_cast<int32_t*>(path_.get());
  const DType out = chain_output_dtype(p_);
  auto score_checked = [&] { // the first sequence's, against the CPU reference
    std::vector<unsigned char> got(dtype_info(out).size_bytes);
    score_.download(got.data(), got.size());
    const reference::Element want{want_, -1, std::max(1.0, std::fabs(want_))};
    return reference::close(out, load_element(out, got.data(), 0), want, reference::tolerance(out));
  };
  ChainMeasure m;
  // Each of the three calls is checked after it is timed (both forwards, whose variants differ, and the backward,
  // whose time decides the strategy): a wrong one is no candidate.
  score_.fill_bytes(0xff);
  m.forward_ms = time_launches([&](Stream st) { c.forward(buffers_, nullptr, nullptr, st, ws); }, 3, reps).median_ms;
  bool checked = score_checked();
  score_.fill_bytes(0xff);
  m.saving_ms = time_launches([&](Stream st) { c.forward(buffers_, keep, best, st, ws); }, 3, reps).median_ms;
  checked = checked && score_checked();
  grad_.fill_bytes(0xff);
  m.backward_ms = time_launches([&](Stream st) { c.backward(buffers_, keep, best, st, bws); }, 3, reps).median_ms;
  const int64_t steps = p_.form == ChainForm::hmm ? p_.T : p_.T - 1; // the emissions' positions, or the edges'
  for (const int64_t step : {int64_t(0), steps - 1})
    checked = checked && (steps < 1 || step_is_a_distribution(grad_, p_, step));
  m.checked = checked;
  return m;
}

} // namespace jitbmm
