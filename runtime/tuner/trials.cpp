// Trials: random inputs for one pass of a problem on the device, one launch of a candidate on them, and the check
// of its output against the CPU reference on sampled elements; and the size limit on problems worth a trial.
#include "runtime/tuner/trials.hpp"

#include "runtime/tuner/search_space.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <tuple>

#include "runtime/jit.hpp"
#include "runtime/grad_launch.hpp"
#include "support/checked_size.hpp"
#include "support/layout.hpp"
#include "runtime/launch.hpp"
#include "runtime/scratch.hpp"
#include "runtime/tuner/cpu_pool.hpp"
#include "support/host_memory.hpp"

namespace jitbmm {

namespace {

// A check's poison and its wait, on the legacy stream, where its launches run, never the whole context: a check of a
// brought-in decision may run in a background build while another thread captures a graph in the context (a first
// call captured waits for that build), and CUDA refuses a context-wide synchronize then, ending the capture.
void poison(const DeviceBuffer& d, unsigned char value) {
  if (d.size())
    check(driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(d.get()), value, d.size(), nullptr),
          "cuMemsetD8Async");
}
void wait_for_legacy_stream() { check(driver().cuStreamSynchronize(nullptr), "cuStreamSynchronize"); }

// One forward of `spec` on a problem with outputs and terms, through the executor plans use (runtime/launch), not
// the public SemiringBMM::get: the tuner sits beneath the plans.
void launch_forward(const DeviceInfo& device, const Problem& p, const KernelSpec& spec, const void* a, const void* b,
                    void* out, int32_t* argmax, Stream stream) {
  if (spec.pass != Pass::forward) // its kernel would read a forward's parameters as a backward pass's
    throw std::invalid_argument("spec.pass: " + std::string(pass_name(spec.pass)) + " is not a forward");
  const LaunchPlan plan = strategy_def(spec).launches(spec, p);
  jb::BmmParams params = bmm_params(p);
  params.a = a, params.b = b, params.out = out, params.argmax = argmax;
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  Scratch scratch(device, {}, ScratchSize().add(plan.workspace_bytes, "workspace").bytes(), cu_stream);
  run_launches(*load_kernel(device, spec), plan, params, scratch.take(plan.workspace_bytes), cu_stream);
}

} // namespace

namespace {

// The elements a strided operand spans (at least 1), and their bytes: checked, since they size buffers.
int64_t elements_of(const char* what, int64_t batches, int64_t rows, int64_t cols, const Strides& st) {
  return checked_add(max_offset(what, batches, rows, cols, st), 1, what);
}
std::size_t bytes_of(const char* what, int64_t elements, int element_bytes) {
  return static_cast<std::size_t>(checked_mul(elements, element_bytes, what));
}
std::size_t bytes_of(const char* what, int64_t elements, DType dtype) {
  return bytes_of(what, elements, dtype_info(dtype).size_bytes);
}

// splitmix64: one 64-bit draw per call, from a state advanced by a constant.
uint64_t next_draw(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A problem's operand: random values, non-negative for a semiring that needs it (max_times).
std::vector<unsigned char> random_operand(const Problem& p, int64_t elements, std::mt19937_64& rng,
                                          double spread = 1) {
  return random_values(p.dtype, elements, rng, semiring_info(p.semiring).nonnegative_inputs, spread);
}

std::vector<unsigned char> download(const DeviceBuffer& buffer) {
  std::vector<unsigned char> host(buffer.size());
  buffer.download(host.data(), host.size());
  return host;
}

} // namespace

std::vector<unsigned char> random_values(DType dtype, int64_t elements, std::mt19937_64& rng, bool non_negative,
                                         double spread) {
  constexpr int64_t kChunk = int64_t(1) << 18;
  std::vector<unsigned char> bytes(
      static_cast<std::size_t>(checked_mul(elements, dtype_info(dtype).size_bytes, "trials: random values")));
  const uint64_t seed = rng();
  const int64_t chunks = (elements + kChunk - 1) / kChunk;
  for_each_on_cpus(static_cast<std::size_t>(chunks), [&](std::size_t chunk) {
    const int64_t c = static_cast<int64_t>(chunk);
    uint64_t state = seed ^ (static_cast<uint64_t>(c) * 0xD1B54A32D192ED03ull);
    const int64_t end = std::min(elements, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; i += 2) {
      const uint64_t x = next_draw(state);
      const float u1 = (static_cast<float>(x >> 40) + 0.5f) * 0x1p-24f; // (0, 1)
      const float u2 = static_cast<float>(x & 0xFFFFFFu) * 0x1p-24f;     // [0, 1)
      const float r = std::sqrt(-2.0f * std::log(u1)) * static_cast<float>(spread);
      const float angle = 6.2831853f * u2;
      const float pair[2] = {r * std::cos(angle), r * std::sin(angle)};
      for (int h = 0; h < 2 && i + h < end; ++h)
        store_element(dtype, bytes.data(), i + h, non_negative ? std::fabs(pair[h]) : pair[h]);
    }
  });
  return bytes;
}

std::optional<TrialBytes> trial_bytes(const Problem& p, Pass pass) {
  const Shape& s = p.shape;
  const int64_t in = dtype_info(p.dtype).size_bytes, od = dtype_info(p.output_dtype()).size_bytes;
  const bool fwd = pass == Pass::forward, ga = pass == Pass::grad_a;
  const bool sel = semiring_info(p.semiring).backward == BackwardKind::argmax_scatter;
  const auto span = [&](int64_t rows, int64_t cols, const Strides& st, int64_t bytes) {
    return try_product({max_offset("shape", s.B, rows, cols, st) + 1, bytes});
  };
  const auto a = span(s.M, s.K, p.a(), in), b = span(s.K, s.N, p.b(), in), out = span(s.M, s.N, p.out(), od);
  const auto outputs = try_product({s.B, s.M, s.N});
  const auto grad = ga ? a : b;
  if (!a || !b || !out || !outputs || !grad) return std::nullopt;
  TrialBytes t;
  const auto add = [](int64_t& total, std::optional<int64_t> part) {
    return part && !__builtin_add_overflow(total, *part, &total);
  };
  const bool ok =
      fwd ? add(t.device, *a) && add(t.device, *b) && add(t.device, *out) &&
                add(t.device, p.with_argmax ? try_product({*outputs, 4}) : std::optional<int64_t>(0)) && add(t.host, *a) && add(t.host, *b)
          // device: a, b, grad_out and out in out's layout, argmax, the gradient; host: a, b, grad_out in out's
          // layout and as doubles, out read back and as doubles, argmax, the gradient read back.
          : add(t.device, *a) && add(t.device, *b) && add(t.device, *out) && add(t.device, *out) &&
                add(t.device, sel ? try_product({*outputs, 4}) : std::optional<int64_t>(0)) && add(t.device, *grad) && add(t.host, *a) &&
                add(t.host, *b) && add(t.host, *out) && add(t.host, *out) &&
                add(t.host, try_product({*outputs, sel ? 8 + 8 + 4 : 8 + 8})) && add(t.host, *grad);
  if (!ok) return std::nullopt;
  return t;
}

bool tunable(const Problem& p, Pass pass) {
  const Shape& s = p.shape;
  const auto outputs = try_product({s.B, s.M, s.N});
  if (!outputs || *outputs == 0 || s.K == 0) return false;
  // Candidates are checked against the CPU reference, one output's (one gradient element's) terms at a time.
  if (s.K > reference::kMaxReferenceK || (pass != Pass::forward && std::max(s.M, s.N) > reference::kMaxReferenceK))
    return false;
  const auto bytes = trial_bytes(p, pass);
  int64_t total = 0;
  return bytes && !__builtin_add_overflow(bytes->device, bytes->host, &total) && total <= kMaxTuningBytes;
}

std::string trial_memory_refusal(const TrialBytes& need, std::size_t device_free, std::size_t host_available) {
  const auto mib = [](double bytes) { return std::to_string(static_cast<long long>(std::ceil(bytes / (1 << 20)))); };
  // The share is said, not only the free memory: a trial refused with more free than it needs is otherwise a puzzle.
  const auto share = [](double fraction) {
    return fraction == 0.5 ? std::string("half") : std::to_string(std::lround(fraction * 100)) + "%";
  };
  if (static_cast<double>(need.device) > kTrialDeviceShare * static_cast<double>(device_free))
    return "its trial needs " + mib(static_cast<double>(need.device)) + " MiB of device memory and may take at most " +
           share(kTrialDeviceShare) + " of the " + mib(static_cast<double>(device_free)) + " MiB free";
  if (static_cast<double>(need.host) > kTrialHostShare * static_cast<double>(host_available))
    return "its trial needs " + mib(static_cast<double>(need.host)) + " MiB of host memory and may take at most " +
           share(kTrialHostShare) + " of the " + mib(static_cast<double>(host_available)) + " MiB available";
  return "";
}

std::string trial_memory_refusal(const Problem& p, Pass pass, const DeviceInfo& device) {
  const auto need = trial_bytes(p, pass);
  if (!need) return "its trial's size does not fit 64 bits";
  ScopedContext scope(device.context);
  std::size_t free = 0, total = 0;
  if (driver().cuMemGetInfo(&free, &total) != CUDA_SUCCESS) free = SIZE_MAX;
  return trial_memory_refusal(*need, free, host_available_bytes().value_or(SIZE_MAX));
}

ForwardTrial::ForwardTrial(const Problem& problem, const DeviceInfo& dev, std::mt19937_64& rng, double spread)
    : p(problem), device(dev) {
  const Shape& s = p.shape;
  ha = random_operand(p, elements_of("a", s.B, s.M, s.K, p.a()), rng, spread);
  hb = random_operand(p, elements_of("b", s.B, s.K, s.N, p.b()), rng, spread);
  const int64_t outputs = checked_product({s.B, s.M, s.N}, "shape: B*M*N");
  a = DeviceBuffer(ha.size()), b = DeviceBuffer(hb.size());
  out = DeviceBuffer(bytes_of("out", elements_of("out", s.B, s.M, s.N, p.out()), p.output_dtype()));
  arg = DeviceBuffer(p.with_argmax ? bytes_of("argmax", outputs, 4) : 0);
  a.upload(ha.data(), ha.size());
  b.upload(hb.data(), hb.size());
  std::uniform_int_distribution<int64_t> pick(0, std::max<int64_t>(0, outputs - 1));
  for (int n = 0; n < 24 && outputs > 0; ++n) {
    const int64_t o = pick(rng);
    const MatrixIndex at = index_of(s.M, s.N, o);
    samples.emplace_back(o, reference::element(p, ha.data(), hb.data(), at.batch, at.row, at.col));
  }
}

void run_candidate(const ForwardTrial& trial, const KernelSpec& spec, Stream stream) {
  const Problem& p = trial.p;
  launch_forward(trial.device, p, spec, trial.a.get(), trial.b.get(), trial.out.get(),
                 p.with_argmax ? static_cast<int32_t*>(trial.arg.get()) : nullptr, stream);
}

std::string verify_candidate(ForwardTrial& trial, const KernelSpec& spec) {
  poison(trial.out, 0x7f); // an unwritten output cannot pass the check
  if (trial.p.with_argmax) poison(trial.arg, 0x7f);
  run_candidate(trial, spec, nullptr);
  wait_for_legacy_stream();
  const Problem& p = trial.p;
  const Shape& s = p.shape;
  const Strides so = p.out();
  const DType od = p.output_dtype();
  const int size = dtype_info(od).size_bytes;
  for (const auto& [o, want] : trial.samples) { // only the sampled elements come back (the output can be GBs)
    const int64_t at = offset_of(so, s.M, s.N, o);
    unsigned char got[8];
    trial.out.download(got, static_cast<std::size_t>(size), static_cast<std::size_t>(at) * size);
    if (!reference::close(od, load_element(od, got, 0), want, reference::tolerance(p)))
      return "wrong result at output " + std::to_string(o);
    if (!p.with_argmax) continue;
    int32_t arg = 0; // [B][M][N], contiguous
    trial.arg.download(&arg, sizeof arg, static_cast<std::size_t>(o) * sizeof arg);
    const MatrixIndex i = index_of(s.M, s.N, o);
    const int32_t expected = reference::kernel_argmax(p, trial.ha.data(), trial.hb.data(), i.batch, i.row, i.col, want);
    if (arg != expected)
      return "wrong argmax at output " + std::to_string(o) + " (k " + std::to_string(arg) + ", expected " +
             std::to_string(expected) + ")";
  }
  return "";
}

namespace {

// What a check of `spec` runs on: one batch of `problem` when the spec fits that as it is, else the whole problem. The
// gradient of an operand shared by every batch is summed over the batches by launches one batch does not make (an
// accumulator, then its store): two batches make them.
Problem checked_problem(const Problem& problem, Pass pass, const KernelSpec& spec) {
  if (problem.shape.B <= 1) return problem;
  const bool summed =
      (pass == Pass::grad_a && problem.a().batch == 0) || (pass == Pass::grad_b && problem.b().batch == 0);
  Problem few = problem;
  few.shape.B = summed ? 2 : 1;
  return fitting(spec, few) == spec ? few : problem;
}

// The forward whose results a backward trial of `grad` (a grad_problem) reads: with the argmax the selecting
// semirings' backward scatters by.
Problem trial_forward(const Problem& grad) {
  Problem fwd = grad;
  fwd.with_argmax = semiring_info(grad.semiring).backward == BackwardKind::argmax_scatter;
  return fwd;
}

} // namespace

BackwardTrial::BackwardTrial(const Problem& problem, Pass which, const DeviceInfo& dev, std::mt19937_64& rng)
    : p(grad_problem(problem)), pass(which), device(dev) {
  const Shape& s = p.shape;
  ha = random_operand(p, elements_of("a", s.B, s.M, s.K, p.a()), rng);
  hb = random_operand(p, elements_of("b", s.B, s.K, s.N, p.b()), rng);
  const int64_t outputs = checked_product({s.B, s.M, s.N}, "shape: B*M*N");
  const int64_t out_elems = elements_of("out", s.B, s.M, s.N, p.out());
  const DType od = p.output_dtype();
  // grad_out in out's layout, and contiguous in double for the reference.
  hg.assign(bytes_of("out", out_elems, od), 0);
  grad_out.resize(outputs);
  std::normal_distribution<double> normal(0.0, 1.0);
  const Strides so = p.out();
  for (int64_t o = 0; o < outputs; ++o) {
    const int64_t at = offset_of(so, s.M, s.N, o);
    store_element(od, hg.data(), at, normal(rng));
    grad_out[o] = load_element(od, hg.data(), at);
  }
  a = DeviceBuffer(ha.size()), b = DeviceBuffer(hb.size()), g = DeviceBuffer(hg.size());
  a.upload(ha.data(), ha.size());
  b.upload(hb.data(), hb.size());
  g.upload(hg.data(), hg.size());
  // The forward's results, as the backward will read them.
  const Problem fwd = trial_forward(p);
  const bool sel = fwd.with_argmax;
  out = DeviceBuffer(bytes_of("out", out_elems, od));
  arg = DeviceBuffer(sel ? bytes_of("argmax", outputs, 4) : 0);
  launch_forward(device, fwd, default_spec(fwd), a.get(), b.get(), out.get(),
                 sel ? static_cast<int32_t*>(arg.get()) : nullptr, nullptr);
  wait_for_legacy_stream();
  const std::vector<unsigned char> ho = download(out);
  out_values.resize(outputs);
  for (int64_t o = 0; o < outputs; ++o)
    out_values[o] = load_element(od, ho.data(), offset_of(so, s.M, s.N, o));
  if (sel) {
    argmax.resize(outputs);
    arg.download(argmax.data(), bytes_of("argmax", outputs, 4));
  }
  const Strides sd = pass == Pass::grad_a ? p.a() : p.b();
  const int64_t rows = pass == Pass::grad_a ? s.M : s.K, cols = pass == Pass::grad_a ? s.K : s.N;
  grad = DeviceBuffer(bytes_of("grad", elements_of("grad", s.B, rows, cols, sd), p.dtype));
  const int64_t grads = checked_product({s.B, rows, cols}, "shape: gradient elements");
  std::uniform_int_distribution<int64_t> pick(0, std::max<int64_t>(0, grads - 1));
  for (int n = 0; n < 24 && grads > 0; ++n) {
    const int64_t e = pick(rng);
    samples.push_back({e / (rows * cols), e / cols % rows, e % cols});
  }
}

void run_candidate(const BackwardTrial& trial, const KernelSpec& spec, Stream stream) {
  const std::size_t bytes = grad_workspace_bytes(trial.p, spec);
  Scratch scratch(trial.device, {}, ScratchSize().add(bytes, "backward workspace").bytes(), stream);
  launch_grad(trial.p, spec, *load_kernel(trial.device, spec),
              {trial.a.get(), trial.b.get(), trial.out.get(), trial.g.get(),
               trial.argmax.empty() ? nullptr : static_cast<int32_t*>(trial.arg.get()), trial.grad.get(),
               scratch.take(bytes)},
              stream);
}

std::string verify_candidate(BackwardTrial& trial, const KernelSpec& spec) {
  poison(trial.grad, 0x7f); // an unwritten element cannot pass the check
  run_candidate(trial, spec, nullptr);
  wait_for_legacy_stream();
  const std::vector<unsigned char> hd = download(trial.grad);
  const Problem& p = trial.p;
  const Strides sd = trial.pass == Pass::grad_a ? p.a() : p.b();
  const bool broadcast = sd.batch == 0;
  const int32_t* argmax = trial.argmax.empty() ? nullptr : trial.argmax.data();
  for (const auto& [bt, r, c] : trial.samples) {
    reference::GradElement want;
    for (int64_t z = broadcast ? 0 : bt; z < (broadcast ? p.shape.B : bt + 1); ++z) {
      const auto part = reference::gradient_element(p, trial.ha.data(), trial.hb.data(), trial.out_values.data(),
                                                    argmax, trial.grad_out.data(), trial.pass, z, r, c);
      want.value += part.value, want.scale += part.scale, want.floor += part.floor;
    }
    const double got = load_element(p.dtype, hd.data(), offset_of(sd, {bt, r, c}));
    if (!reference::close_gradient(p.dtype, got, want, reference::tolerance(p.dtype)))
      return "wrong gradient at " + std::to_string(bt) + "," + std::to_string(r) + "," + std::to_string(c);
  }
  return "";
}

std::vector<KernelSpec> check_kernels(const Problem& problem, Pass pass, const KernelSpec& spec) {
  if (pass == Pass::forward) return {spec};
  return {spec, default_spec(trial_forward(grad_problem(checked_problem(problem, pass, spec))))};
}

std::string check_on_trial(const Problem& problem, Pass pass, const DeviceInfo& device, const KernelSpec& spec,
                           InputRange range) {
  const Problem p = checked_problem(problem, pass, spec);
  if (!tunable(p, pass)) return "this problem cannot be checked against the CPU reference";
  if (std::string why = trial_memory_refusal(p, pass, device); !why.empty()) return "not checked: " + why;
  ScopedContext scope(device.context);
  std::mt19937_64 rng(std::random_device{}());
  return make_trial(p, pass, device, rng, range).verify(spec);
}

Trial make_trial(const Problem& problem, Pass pass, const DeviceInfo& device, std::mt19937_64& rng,
                 InputRange range) {
  if (pass == Pass::forward) {
    const auto t =
        std::make_shared<ForwardTrial>(problem, device, rng, range == InputRange::wide ? kWideSpread : 1.0);
    return {[t](const KernelSpec& spec, Stream stream) { run_candidate(*t, spec, stream); },
            [t](const KernelSpec& spec) { return verify_candidate(*t, spec); }};
  }
  const auto t = std::make_shared<BackwardTrial>(problem, pass, device, rng);
  return {[t](const KernelSpec& spec, Stream stream) { run_candidate(*t, spec, stream); },
          [t](const KernelSpec& spec) { return verify_candidate(*t, spec); }};
}

} // namespace jitbmm
