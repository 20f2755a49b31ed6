#include "runtime/autotune.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <tuple>

#include "cache/disk_cache.hpp"
#include "cache/kernel_cache.hpp"
#include "cache/sha256.hpp"
#include "jitbmm/errors.hpp"
#include "jitbmm/plan.hpp"
#include "jitbmm/reference.hpp"
#include "jitbmm/version.hpp"
#include "runtime/backward.hpp"
#include "runtime/checked_size.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/layout.hpp"
#include "runtime/log.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "runtime/scratch.hpp"
#include "runtime/timing.hpp"
#include "runtime/tuner/search_space.hpp"
#include "runtime/tuner/tuning_db.hpp"

namespace jitbmm {

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

// Random inputs laid out as the problem says, never zeros; non-negative for max_times.
std::vector<unsigned char> random_operand(const Problem& p, int64_t elements, std::mt19937_64& rng) {
  std::vector<unsigned char> bytes(
      static_cast<std::size_t>(checked_mul(elements, dtype_info(p.dtype).size_bytes, "autotune: operand bytes")));
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int64_t i = 0; i < elements; ++i) {
    const double v = normal(rng);
    store_element(p.dtype, bytes.data(), i, p.semiring == Semiring::max_times ? std::fabs(v) : v);
  }
  return bytes;
}

} // namespace

namespace {

// What the tuner needs from one kind of kernel: run a candidate once on the prepared inputs, and check its
// output against the CPU reference on sampled elements ("" when right, else why not).
struct Trial {
  std::function<void(const KernelSpec&)> run;
  std::function<std::string(const KernelSpec&)> verify;
};

std::vector<unsigned char> download(const DeviceBuffer& buffer) {
  std::vector<unsigned char> host(buffer.size());
  buffer.download(host.data(), host.size());
  return host;
}

// Inputs and checks for the forward: random a and b, outputs poisoned before every candidate.
struct ForwardTrial {
  const Problem& p;
  std::mt19937_64& rng;
  std::vector<unsigned char> ha, hb;
  DeviceBuffer a, b, out, arg;
  std::vector<std::pair<int64_t, reference::Element>> samples;

  ForwardTrial(const Problem& problem, std::mt19937_64& random) : p(problem), rng(random) {
    const Shape& s = p.shape;
    ha = random_operand(p, elements_of("a", s.B, s.M, s.K, p.a()), rng);
    hb = random_operand(p, elements_of("b", s.B, s.K, s.N, p.b()), rng);
    const int64_t outputs = checked_product({s.B, s.M, s.N}, "shape: B*M*N");
    a = DeviceBuffer(ha.size()), b = DeviceBuffer(hb.size());
    out = DeviceBuffer(bytes_of("out", elements_of("out", s.B, s.M, s.N, p.out()), p.output_dtype()));
    arg = DeviceBuffer(p.with_argmax ? bytes_of("argmax", outputs, 4) : 0);
    a.upload(ha.data(), ha.size());
    b.upload(hb.data(), hb.size());
    std::uniform_int_distribution<int64_t> pick(0, std::max<int64_t>(0, outputs - 1));
    for (int n = 0; n < 24 && outputs > 0; ++n) {
      const int64_t o = pick(rng);
      samples.emplace_back(o, reference::element(p, ha.data(), hb.data(), o / (s.M * s.N), o / s.N % s.M, o % s.N));
    }
  }
  void run(const KernelSpec& spec) {
    SemiringBMM::get(p, spec)(a.get(), b.get(), out.get(), p.with_argmax ? static_cast<int32_t*>(arg.get()) : nullptr,
                              nullptr);
  }
  std::string verify(const KernelSpec& spec) {
    out.fill_bytes(0x7f); // poison: an unwritten output cannot pass the check
    run(spec);
    check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
    const std::vector<unsigned char> ho = download(out);
    const Shape& s = p.shape;
    const Strides so = p.out();
    for (const auto& [o, want] : samples) {
      const int64_t at = o / (s.M * s.N) * so.batch + o / s.N % s.M * so.row + o % s.N * so.col;
      if (!reference::close(p.output_dtype(), load_element(p.output_dtype(), ho.data(), at), want,
                            reference::tolerance(p)))
        return "wrong result at output " + std::to_string(o);
    }
    return "";
  }
};

// Inputs and checks for a backward pass: random a, b and grad_out; out (and argmax) from the forward on the GPU,
// which the CPU reference then uses too; the gradient poisoned before every candidate.
struct BackwardTrial {
  const Problem p; // without argmax
  Pass pass;
  const DeviceInfo& device;
  std::vector<unsigned char> ha, hb, hg;
  std::vector<double> out_values, grad_out;
  std::vector<int32_t> argmax;
  DeviceBuffer a, b, out, arg, g, grad;
  std::vector<std::array<int64_t, 3>> samples; // batch, row, col of the gradient

  BackwardTrial(const Problem& problem, Pass which, const DeviceInfo& dev, std::mt19937_64& rng)
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
      const int64_t at = o / (s.M * s.N) * so.batch + o / s.N % s.M * so.row + o % s.N * so.col;
      store_element(od, hg.data(), at, normal(rng));
      grad_out[o] = load_element(od, hg.data(), at);
    }
    a = DeviceBuffer(ha.size()), b = DeviceBuffer(hb.size()), g = DeviceBuffer(hg.size());
    a.upload(ha.data(), ha.size());
    b.upload(hb.data(), hb.size());
    g.upload(hg.data(), hg.size());
    // The forward's results, as the backward will read them.
    Problem fwd = p;
    const bool sel = semiring_info(p.semiring).has_argmax;
    fwd.with_argmax = sel;
    out = DeviceBuffer(bytes_of("out", out_elems, od));
    arg = DeviceBuffer(sel ? bytes_of("argmax", outputs, 4) : 0);
    SemiringBMM::get(fwd, default_spec(fwd))(a.get(), b.get(), out.get(),
                                             sel ? static_cast<int32_t*>(arg.get()) : nullptr, nullptr);
    check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
    const std::vector<unsigned char> ho = download(out);
    out_values.resize(outputs);
    for (int64_t o = 0; o < outputs; ++o)
      out_values[o] =
          load_element(od, ho.data(), o / (s.M * s.N) * so.batch + o / s.N % s.M * so.row + o % s.N * so.col);
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
  void run(const KernelSpec& spec) {
    const std::size_t bytes = grad_workspace_bytes(p, spec);
    Scratch scratch(device, {}, ScratchSize().add(bytes, "backward workspace").bytes(), nullptr);
    launch_grad(p, spec, *load_kernel(device, spec),
                {a.get(), b.get(), out.get(), g.get(), argmax.empty() ? nullptr : static_cast<int32_t*>(arg.get()),
                 grad.get(), scratch.take(bytes)},
                nullptr);
  }
  std::string verify(const KernelSpec& spec) {
    grad.fill_bytes(0x7f);
    run(spec);
    check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
    const std::vector<unsigned char> hd = download(grad);
    const Strides sd = pass == Pass::grad_a ? p.a() : p.b();
    const bool broadcast = sd.batch == 0;
    for (const auto& [bt, r, c] : samples) {
      reference::GradElement want;
      for (int64_t z = broadcast ? 0 : bt; z < (broadcast ? p.shape.B : bt + 1); ++z) {
        const auto part =
            reference::gradient_element(p, ha.data(), hb.data(), out_values.data(),
                                        argmax.empty() ? nullptr : argmax.data(), grad_out.data(), pass, z, r, c);
        want.value += part.value, want.scale += part.scale, want.floor += part.floor;
      }
      const double got = load_element(p.dtype, hd.data(), bt * sd.batch + r * sd.row + c * sd.col);
      if (!reference::close_gradient(p.dtype, got, want, reference::tolerance(p.dtype)))
        return "wrong gradient at " + std::to_string(bt) + "," + std::to_string(r) + "," + std::to_string(c);
    }
    return "";
  }
};

} // namespace

TuneReport autotune(const Problem& p, const DeviceInfo& device, bool progress, Pass pass,
                    const std::vector<KernelSpec>& only) {
  const auto t0 = std::chrono::steady_clock::now();
  ScopedContext scope(device.context);
  TuneReport report;
  for (const KernelSpec& spec :
       only.empty() ? tuning_candidates(p, {device.max_threads_per_block, 48 * 1024}, pass) : only)
    report.candidates.push_back({spec, -1, "ok"});
  // Compile every candidate on all cores (the kernel cache is thread-safe); a failure only skips that candidate.
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < std::max(1u, std::thread::hardware_concurrency()); ++w)
    pool.emplace_back([&] {
      for (std::size_t i; (i = next.fetch_add(1)) < report.candidates.size();) try {
          load_kernel(device, report.candidates[i].spec);
        } catch (const std::exception& e) {
          report.candidates[i].status = std::string("compile failed: ") + e.what();
        }
    });
  for (auto& t : pool) t.join();

  std::mt19937_64 rng(20261122);
  std::unique_ptr<ForwardTrial> fwd;
  std::unique_ptr<BackwardTrial> bwd;
  Trial trial;
  if (pass == Pass::forward) {
    fwd = std::make_unique<ForwardTrial>(p, rng);
    trial = {[&](const KernelSpec& k) { fwd->run(k); }, [&](const KernelSpec& k) { return fwd->verify(k); }};
  } else {
    bwd = std::make_unique<BackwardTrial>(p, pass, device, rng);
    trial = {[&](const KernelSpec& k) { bwd->run(k); }, [&](const KernelSpec& k) { return bwd->verify(k); }};
  }
  const L2Flush flush;
  auto time_runs = [&](const KernelSpec& spec, int runs) {
    return time_launches([&](Stream) { trial.run(spec); }, 0, runs, nullptr, std::ref(flush)).median_ms;
  };
  const std::string what = describe(p) + (pass == Pass::forward ? "" : std::string(" ") + pass_name(pass));
  double best_ms = -1;
  std::size_t done = 0;
  for (CandidateResult& c : report.candidates) {
    ++done;
    if (c.status != "ok") continue;
    try {
      const std::string wrong = trial.verify(c.spec);
      if (!wrong.empty()) {
        c.status = wrong;
        continue;
      }
      c.median_ms = time_runs(c.spec, 5);
      if (best_ms < 0 || c.median_ms < best_ms) best_ms = c.median_ms;
    } catch (const std::exception& e) {
      c.status = std::string("launch failed: ") + e.what();
    }
    if (progress && log_enabled(LogLevel::info))
      std::fprintf(stderr, "\rjitbmm: tuning %s [%zu/%zu] best %.4f ms   ", what.c_str(), done,
                   report.candidates.size(), best_ms);
  }
  std::vector<CandidateResult*> timed;
  for (CandidateResult& c : report.candidates)
    if (c.median_ms >= 0) timed.push_back(&c);
  if (timed.empty()) throw std::runtime_error("autotune: no correct candidate for " + what);
  std::sort(timed.begin(), timed.end(), [](auto* x, auto* y) { return x->median_ms < y->median_ms; });
  // Re-time the best three interleaved, so drift between the first pass's measurements cannot decide.
  timed.resize(std::min<std::size_t>(3, timed.size()));
  std::vector<std::vector<double>> again(timed.size());
  for (int round = 0; round < 3; ++round)
    for (std::size_t i = 0; i < timed.size(); ++i) again[i].push_back(time_runs(timed[i]->spec, 3));
  std::size_t winner = 0;
  for (std::size_t i = 0; i < timed.size(); ++i) {
    std::sort(again[i].begin(), again[i].end());
    timed[i]->median_ms = again[i][1];
    if (timed[i]->median_ms < timed[winner]->median_ms) winner = i;
  }
  report.best = timed[winner]->spec;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (progress && log_enabled(LogLevel::info))
    std::fprintf(stderr, "\rjitbmm: tuned %s in %.1f s: %zu candidates, best %.4f ms (%s)\n", what.c_str(),
                 report.seconds, report.candidates.size(), timed[winner]->median_ms, to_string(report.best).c_str());
  return report;
}

void store_decision(const Problem& p, const DeviceInfo& device, const TuneReport& report, bool bucket, Pass pass,
                    bool exact) {
  DiskCache* disk = DiskCache::process_cache();
  if (!disk) return;
  const TuningDevice td = tuning_device(device);
  Decision d;
  d.spec = report.best;
  d.problem = describe(p);
  d.family = tuning_family(p, td, pass);
  d.seconds = report.seconds;
  for (const CandidateResult& c : report.candidates)
    if (c.median_ms >= 0) d.ranking.push_back(c);
  std::sort(d.ranking.begin(), d.ranking.end(), [](auto& x, auto& y) { return x.median_ms < y.median_ms; });
  d.ranking.resize(std::min<std::size_t>(d.ranking.size(), 5));
  d.shape = p.shape;
  if (exact) put_decision(*disk, tuning_key(p, td, false, pass), d);
  if (bucket) {
    d.bucket = true;
    d.shape = shape_bucket(p.shape);
    put_decision(*disk, tuning_key(p, td, true, pass), d);
  }
}

namespace {

// Each unusable stored decision is reported once per process, however often the problem is decided again.
void warn_once(const std::string& topic, const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> said;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!said.insert(topic).second) return;
  }
  log_message(LogLevel::warn, message);
}

// A stored decision under `key`, if present; one that does not decode is ignored with a warning.
std::optional<Decision> load_decision_or_warn(DiskCache* disk, const std::string& key, const char* source) {
  if (!disk) return std::nullopt;
  bool unreadable = false;
  auto d = load_decision(disk, key, &unreadable);
  if (unreadable)
    warn_once(key, std::string("ignoring the stored tuning decision ") + key.substr(0, 16) + " (" + source +
                       "): it does not parse; deciding again");
  return d;
}

bool is_rejected(const std::vector<KernelSpec>& rejected, const KernelSpec& spec) {
  return std::find(rejected.begin(), rejected.end(), spec) != rejected.end();
}

} // namespace

std::optional<Choice> stored_choice(DiskCache* disk, const Problem& p, const TuningDevice& td, TunePolicy policy,
                                    Pass pass, const std::vector<KernelSpec>& rejected, std::optional<Decision>* far) {
  // An exact or bucket decision is this problem's own: one that no longer fits is stale, and said so.
  auto own = [&](const std::string& key, const char* source) -> std::optional<Choice> {
    const auto d = load_decision_or_warn(disk, key, source);
    if (!d) return std::nullopt;
    const auto spec = fitting(d->spec, p);
    if (!spec) {
      std::string why;
      try {
        check_spec_fits(d->spec, p);
      } catch (const std::invalid_argument& e) {
        why = e.what();
      }
      warn_once(key, std::string("ignoring the stored tuning decision ") + key.substr(0, 16) + " (" + source +
                         ", tuned for " + d->problem + "): " + to_string(d->spec) + " no longer fits (" + why +
                         "); deciding again");
      return std::nullopt;
    }
    if (is_rejected(rejected, *spec)) return std::nullopt;
    return Choice{*spec, source, d, true};
  };
  if (auto c = own(tuning_key(p, td, false, pass), "exact")) return c;
  if (policy == TunePolicy::exact) return std::nullopt;
  if (auto c = own(tuning_key(p, td, true, pass), "bucket")) return c;
  // Another bucket's decision may not fit this shape: that is no defect of the decision, so no warning.
  std::vector<Decision> family = family_buckets(disk, tuning_family(p, td, pass));
  family.erase(std::remove_if(family.begin(), family.end(),
                              [&](const Decision& d) {
                                const auto spec = fitting(d.spec, p);
                                return spec && is_rejected(rejected, *spec);
                              }),
               family.end());
  const auto near = nearest_decision(family, p.shape);
  if (!near) return std::nullopt;
  if (bucket_distance(near->shape, shape_bucket(p.shape)) > kNearBucketDistance) {
    if (far) *far = near;
    return std::nullopt;
  }
  if (auto spec = fitting(near->spec, p)) return Choice{*spec, "nearest bucket", near, true};
  return std::nullopt;
}

bool tunable(const Problem& p, Pass pass) {
  const Shape& s = p.shape;
  const auto outputs = try_product({s.B, s.M, s.N});
  if (!outputs || *outputs == 0 || s.K == 0) return false;
  // Candidates are checked against the CPU reference, one output's (one gradient element's) terms at a time.
  if (s.K > reference::kMaxReferenceK || (pass != Pass::forward && std::max(s.M, s.N) > reference::kMaxReferenceK))
    return false;
  // The trial's buffers: both operands on the host and the device, the output (and, backward, grad_out and the
  // gradient) on the device. Past kMaxTuningBytes, tuning would compete with the caller's own data for memory.
  int64_t total = 0;
  const int64_t in = dtype_info(p.dtype).size_bytes, out = dtype_info(p.output_dtype()).size_bytes;
  for (const auto& [rows, cols, st, bytes, copies] :
       {std::tuple{s.M, s.K, p.a(), in, 2}, std::tuple{s.K, s.N, p.b(), in, 2},
        std::tuple{s.M, s.N, p.out(), out + 4, pass == Pass::forward ? 1 : 3}}) {
    const auto part = try_product({max_offset("shape", s.B, rows, cols, st) + 1, bytes, copies});
    if (!part || __builtin_add_overflow(total, *part, &total)) return false;
  }
  return total <= kMaxTuningBytes;
}

Choice choose(const Problem& problem, const DeviceInfo& device, TunePolicy policy, Pass pass,
              const std::vector<KernelSpec>& rejected) {
  const Problem p = pass == Pass::forward ? problem : grad_problem(problem);
  // Decisions already made in this process, per context, problem, pass and policy.
  static std::mutex mutex;
  static std::map<std::string, Choice> made;
  std::ostringstream id;
  id << device.context << ' ' << int(policy) << ' ' << pass_name(pass) << ' ' << describe(p) << ' ' << p.with_argmax
     << ' ' << dtype_info(p.output_dtype()).name;
  if (rejected.empty()) {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = made.find(id.str()); it != made.end()) return it->second;
  }
  const Choice choice = [&]() -> Choice {
    DiskCache* disk = DiskCache::process_cache();
    const TuningDevice td = tuning_device(device);
    const bool tune = policy != TunePolicy::never && tunable(p, pass);
    std::optional<Decision> far;
    if (auto c = stored_choice(disk, p, td, policy, pass, rejected, &far)) return *c;
    const KernelSpec fallback = pass == Pass::forward ? default_spec(p) : default_grad_spec(p, pass);
    if (far && policy == TunePolicy::bucket && tune) {
      // Far from anything tuned: time the borrowed spec against the default (no full tuning), keep the winner.
      std::vector<KernelSpec> two = {fallback};
      if (auto spec = fitting(far->spec, p); spec && *spec != fallback) two.push_back(*spec);
      const TuneReport report = autotune(p, device, false, pass, two);
      store_decision(p, device, report, true, pass, false);
      return {report.best, "nearest bucket, checked against the default", far};
    }
    if (!tune) return {fallback, "default", {}};
    const TuneReport report = autotune(p, device, true, pass);
    store_decision(p, device, report, policy == TunePolicy::bucket, pass);
    return {report.best, "tuned now", {}};
  }();
  if (log_enabled(LogLevel::debug))
    log_message(LogLevel::debug, "plan " + describe(p) +
                                     (pass == Pass::forward ? "" : std::string(" ") + pass_name(pass)) + ": " +
                                     to_string(choice.spec) + " (" + choice.source + ")");
  std::lock_guard<std::mutex> lock(mutex);
  made[id.str()] = choice; // a choice made again (a stored decision rejected) replaces the first
  return choice;
}

KernelSpec plan_with_choice(const std::function<Choice(const std::vector<KernelSpec>& rejected)>& decide,
                            const std::function<void(const KernelSpec&)>& plan) {
  std::vector<KernelSpec> rejected;
  for (;;) {
    const Choice choice = decide(rejected);
    // Only a stored decision may be wrong about what compiles: the default, a spec tuned now (which compiled to be
    // timed) and one already rejected propagate their errors.
    const bool stored = choice.stored && !is_rejected(rejected, choice.spec);
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
