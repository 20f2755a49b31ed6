// Trials: one pass of a problem set up on the device with random inputs, so that candidates can be launched on it
// and their outputs checked against the CPU reference on sampled elements; and which problems are small enough.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "jitbmm/kernel_spec.hpp"
#include "jitbmm/reference.hpp"
#include "runtime/device.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/tuner/tuning_db.hpp"

namespace jitbmm {

// The memory one trial of a pass takes: on the device its operands, output and argmax, and for a backward grad_out
// and the gradient; on the host the operands the reference reads, and for a backward grad_out, the forward's values
// and argmax as the reference reads them, and the gradient read back. Nothing when a size overflows.
struct TrialBytes {
  int64_t device = 0, host = 0;
};
std::optional<TrialBytes> trial_bytes(const Problem& problem, Pass pass = Pass::forward);

// Above this many bytes of trial buffers (host and device together), a problem is not tuned on any machine:
// choose() takes a stored decision or the default spec instead.
constexpr int64_t kMaxTuningBytes = int64_t(1) << 34;
// Whether choose() may tune the problem at all: it has outputs and terms, and its trial fits kMaxTuningBytes.
bool tunable(const Problem& problem, Pass pass = Pass::forward);

// A trial may take this share of the device's free memory (the rest is for the candidates' workspaces and the
// caller's own allocations, which a framework's caching allocator may make at any time) and of the host's
// available memory.
constexpr double kTrialDeviceShare = 0.5;
constexpr double kTrialHostShare = 0.5;
// Why a trial needing `need` does not fit `device_free` and `host_available` bytes now (the shares above), or "".
std::string trial_memory_refusal(const TrialBytes& need, std::size_t device_free, std::size_t host_available);
// The same for one pass of `problem`, with the free memory of `device` (its context made current for the query, so
// a plan made without one current is sized too) and the host's available memory, read now (what the process cannot
// read counts as unlimited).
std::string trial_memory_refusal(const Problem& problem, Pass pass, const DeviceInfo& device);

// `elements` random values in `dtype`, back to back: normal times `spread` (Box–Muller on two 24-bit uniforms of one
// draw, in float: tails to 5.8σ; several times faster than std::normal_distribution<double>, which took about 1 s on
// one thread for the two operands of 64x512^3), their magnitudes with `non_negative` (max_times). Drawn in chunks on
// the tuner's CPU pool, each chunk seeded from one draw of `rng` and its index, so the values do not depend on the
// number of threads. The products' trials and the chains' (chain_trials.hpp) draw their inputs so.
std::vector<unsigned char> random_values(DType dtype, int64_t elements, std::mt19937_64& rng, bool non_negative = false,
                                         double spread = 1);

// The forward: random a and b (normal, times `spread`), and the reference's value of 24 sampled outputs.
struct ForwardTrial {
  ForwardTrial(const Problem& problem, const DeviceInfo& device, std::mt19937_64& rng, double spread = 1);
  Problem p;
  const DeviceInfo& device;
  std::vector<unsigned char> ha, hb;
  DeviceBuffer a, b, out, arg;
  std::vector<std::pair<int64_t, reference::Element>> samples; // output index, its reference value
};

// A backward pass: random a, b and grad_out; out (and argmax) from the default forward on the GPU, which the CPU
// reference then uses too; 24 sampled gradient elements.
struct BackwardTrial {
  BackwardTrial(const Problem& problem, Pass pass, const DeviceInfo& device, std::mt19937_64& rng);
  Problem p; // the forward problem without argmax
  Pass pass;
  const DeviceInfo& device;
  std::vector<unsigned char> ha, hb, hg;
  std::vector<double> out_values, grad_out;
  std::vector<int32_t> argmax;
  DeviceBuffer a, b, out, arg, g, grad;
  std::vector<std::array<int64_t, 3>> samples; // batch, row, col of the gradient
};

// Launches `spec` (compiled and loaded through runtime/jit) once on the trial's buffers, on `stream`, without
// waiting for it, through the executor plans use (runtime/launch).
void run_candidate(const ForwardTrial& trial, const KernelSpec& spec, Stream stream);
void run_candidate(const BackwardTrial& trial, const KernelSpec& spec, Stream stream);

// Poisons the output (an unwritten element cannot pass), runs `spec` once and compares the samples with the CPU
// reference: "" when all are close, else the first that is not.
std::string verify_candidate(ForwardTrial& trial, const KernelSpec& spec);
std::string verify_candidate(BackwardTrial& trial, const KernelSpec& spec);

// Checks `spec` against the CPU reference as a tuned candidate is checked, on fresh random inputs of `range` (a wide
// decision on wide-range data, whose repairs it serves): on one batch of `problem` when the spec fits that as it is
// (a kernel's code does not depend on B), on two for the gradient of an operand shared by the batches (its sum over
// them is launches of their own), else on the whole problem. "" when correct, else what was wrong or why it cannot
// be checked (the problem is not tunable(), or its trial does not fit the free memory).
std::string check_on_trial(const Problem& problem, Pass pass, const DeviceInfo& device, const KernelSpec& spec,
                           InputRange range = InputRange::normal);
// The kernels that check loads: `spec`'s, and for a backward pass the default forward that makes its trial's
// outputs (so that they can be built ahead, runtime/tuner/build_ahead.hpp).
std::vector<KernelSpec> check_kernels(const Problem& problem, Pass pass, const KernelSpec& spec);

// One pass's trial behind one interface, for the tuner's loop; it owns the trial's buffers.
struct Trial {
  std::function<void(const KernelSpec&, Stream)> run;
  std::function<std::string(const KernelSpec&)> verify;
};
// In the current context (the device's). A forward trial on wide-range inputs when `range` is wide (backward trials
// are always on normal inputs).
Trial make_trial(const Problem& problem, Pass pass, const DeviceInfo& device, std::mt19937_64& rng,
                 InputRange range = InputRange::normal);

} // namespace jitbmm
