#include "runtime/autotune.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "cache/disk_cache.hpp"
#include "cache/kernel_cache.hpp"
#include "cache/sha256.hpp"
#include "jitbmm/plan.hpp"
#include "jitbmm/reference.hpp"
#include "jitbmm/version.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/layout.hpp"
#include "runtime/nvrtc_compiler.hpp"

namespace jitbmm {

TunePolicy parse_tune_policy(const std::string& text) {
  if (text == "never") return TunePolicy::never;
  if (text == "bucket") return TunePolicy::bucket;
  if (text == "exact") return TunePolicy::exact;
  throw std::invalid_argument("JITBMM_TUNE: expected never, bucket or exact, got '" + text + "'");
}

TunePolicy tune_policy_from_env() {
  const char* v = std::getenv("JITBMM_TUNE");
  return v && *v ? parse_tune_policy(v) : TunePolicy::bucket;
}

namespace {

int64_t round_up_pow2(int64_t v) {
  int64_t p = 1;
  while (p < v) p <<= 1;
  return v == 0 ? 0 : p;
}

// "rm" row-major contiguous, "cm" column-major contiguous, "s" anything else; "b" when broadcast over the batch.
std::string layout_kind(const Strides& st, int64_t rows, int64_t cols) {
  std::string kind = st.col == 1 && st.row == cols ? "rm" : st.row == 1 && st.col == rows ? "cm" : "s";
  return st.batch == 0 ? kind + "b" : kind;
}

void add_tiles(std::vector<KernelSpec>& out, KernelSpec base, bool wide) {
  struct T {
    int m, n, k, tm, tn, mb;
  };
  static const T narrow_tiles[] = {{128, 64, 16, 8, 4, 2}, {128, 128, 16, 8, 8, 1}, {128, 128, 16, 8, 8, 2},
                                   {64, 128, 16, 4, 8, 2}, {64, 64, 16, 4, 4, 1},   {64, 64, 16, 4, 4, 2},
                                   {32, 32, 16, 2, 2, 1},  {128, 64, 24, 8, 4, 2}};
  static const T wide_tiles[] = {{64, 64, 8, 4, 4, 1}, {64, 32, 8, 4, 2, 1}, {32, 32, 8, 2, 2, 1}};
  auto push = [&](const T& t) {
    KernelSpec s = base;
    s.tile_m = t.m, s.tile_n = t.n, s.tile_k = t.k, s.thread_m = t.tm, s.thread_n = t.tn, s.min_blocks = t.mb;
    out.push_back(s);
  };
  if (wide)
    for (const T& t : wide_tiles) push(t);
  else
    for (const T& t : narrow_tiles) push(t);
}

} // namespace

std::vector<KernelSpec> tuning_candidates(const Problem& p, const DeviceLimits& limits) {
  validate(p);
  const Shape& s = p.shape;
  const int64_t outputs = s.B * s.M * s.N;
  const bool wide = p.dtype == DType::f64;
  std::vector<KernelSpec> raw;
  KernelSpec base = default_spec(p, Strategy::linear);
  raw.push_back(base);
  base.block_x = 64, base.block_y = 4;
  raw.push_back(base);
  if (p.semiring == Semiring::log) {
    KernelSpec two = default_spec(p, Strategy::linear_two_pass);
    raw.push_back(two);
  }
  if (s.K >= 16)
    for (int lanes : {4, 8, 16, 32}) {
      if (lanes > 2 * s.K) break;
      KernelSpec w = default_spec(p, Strategy::warp);
      w.block_x = lanes, w.block_y = 256 / lanes;
      raw.push_back(w);
    }
  if (s.K >= 256 && outputs <= (int64_t(1) << 15))
    for (int threads : {64, 256}) {
      KernelSpec t = default_spec(p, Strategy::block_tree);
      t.block_x = threads, t.block_y = 1;
      raw.push_back(t);
    }
  if (s.M >= 8 && s.N >= 8) add_tiles(raw, default_spec(p, Strategy::tiled), wide);
  if (s.M >= 8 && s.N >= 8 && s.K >= 1024)
    for (int64_t chunks : {8, 32, 128}) {
      KernelSpec sk = default_spec(p, Strategy::split_k);
      const int64_t chunk = std::max<int64_t>(256, (s.K / chunks + sk.tile_k - 1) / sk.tile_k * sk.tile_k);
      if (chunk >= s.K) continue;
      sk.k_chunk = static_cast<int>(chunk);
      raw.push_back(sk);
      sk.tile_m = sk.tile_n = 32, sk.thread_m = sk.thread_n = 2;
      raw.push_back(sk);
    }
  // Keep what fits the problem and the device, once each.
  std::vector<KernelSpec> out;
  for (KernelSpec spec : raw) {
    try {
      check_spec_fits(spec, p);
    } catch (const std::invalid_argument&) {
      spec.index64 = true; // a variant that only needs wider indices is still a candidate
      try {
        check_spec_fits(spec, p);
      } catch (const std::invalid_argument&) {
        continue;
      }
    }
    if (spec.threads() > limits.max_threads_per_block) continue;
    if (spec.is_tiled()) {
      const int acc = wide ? 8 : 4;
      if (2 * spec.tile_k * (spec.tile_m + 4 + spec.tile_n + 4) * acc > limits.max_static_shared_bytes) continue;
    }
    if (std::find(out.begin(), out.end(), spec) == out.end()) out.push_back(spec);
  }
  return out;
}

Shape shape_bucket(const Shape& s) {
  return {round_up_pow2(s.B), round_up_pow2(s.M), round_up_pow2(s.K), round_up_pow2(s.N)};
}

namespace {

std::string family_text(const Problem& p, const TuningDevice& d) {
  std::ostringstream os;
  os << "jitbmm-tune v" << kCacheFormatVersion << '\n'
     << d.name << '\n'
     << d.sm_count << ' ' << d.arch << ' ' << d.driver_version << ' ' << d.nvrtc_version << ' ' << kVersion << '\n'
     << semiring_info(p.semiring).name << ' ' << dtype_info(p.dtype).name << ' ' << dtype_info(p.output_dtype()).name
     << ' ' << p.with_argmax << ' ' << layout_kind(p.a(), p.shape.M, p.shape.K) << ' '
     << layout_kind(p.b(), p.shape.K, p.shape.N) << ' ' << layout_kind(p.out(), p.shape.M, p.shape.N) << '\n';
  return os.str();
}

} // namespace

std::string tuning_family(const Problem& p, const TuningDevice& d) { return sha256_hex(family_text(p, d)); }

std::string tuning_key(const Problem& p, const TuningDevice& d, bool bucket) {
  const Shape shape = bucket ? shape_bucket(p.shape) : p.shape;
  return sha256_hex(family_text(p, d) + (bucket ? "bucket " : "exact ") + to_string(shape));
}

std::string encode_decision(const Decision& d) {
  std::ostringstream os;
  os << "spec " << to_string(d.spec) << '\n'
     << "problem " << d.problem << '\n'
     << "family " << d.family << '\n'
     << "scope " << (d.bucket ? "bucket" : "exact") << '\n'
     << "shape " << to_string(d.shape) << '\n';
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.3f", d.seconds);
  os << "seconds " << seconds << '\n';
  for (const CandidateResult& c : d.ranking) {
    char ms[32];
    std::snprintf(ms, sizeof ms, "%.5f", c.median_ms);
    os << "candidate " << ms << ' ' << to_string(c.spec) << '\n';
  }
  return os.str();
}

std::optional<Decision> decode_decision(const std::string& text) {
  if (text.size() > 64 * 1024 || text.empty() || text.back() != '\n') return std::nullopt; // whole lines only
  Decision d;
  std::istringstream in(text);
  std::string line;
  auto field = [&](const char* name) -> std::optional<std::string> {
    const std::string prefix = std::string(name) + ' ';
    if (!std::getline(in, line) || line.rfind(prefix, 0) != 0) return std::nullopt;
    return line.substr(prefix.size());
  };
  try {
    const auto spec = field("spec"), problem = field("problem"), family = field("family"), scope = field("scope"),
               shape = field("shape"), seconds = field("seconds");
    if (!spec || !problem || !family || !scope || !shape || !seconds) return std::nullopt;
    if (family->size() != 64 || family->find_first_not_of("0123456789abcdef") != std::string::npos)
      return std::nullopt;
    if (*scope != "bucket" && *scope != "exact") return std::nullopt;
    d.spec = parse_spec(*spec);
    d.problem = *problem;
    d.family = *family;
    d.bucket = *scope == "bucket";
    d.shape = parse_shape(*shape);
    std::size_t used = 0;
    d.seconds = std::stod(*seconds, &used);
    if (used != seconds->size()) return std::nullopt;
    while (std::getline(in, line)) {
      if (line.rfind("candidate ", 0) != 0 || d.ranking.size() >= 16) return std::nullopt;
      const std::string rest = line.substr(10);
      const auto space = rest.find(' ');
      if (space == std::string::npos) return std::nullopt;
      CandidateResult c;
      c.median_ms = std::stod(rest.substr(0, space), &used);
      if (used != space) return std::nullopt;
      c.spec = parse_spec(rest.substr(space + 1));
      d.ranking.push_back(c);
    }
  } catch (const std::exception&) { // parse_spec/parse_shape (invalid_argument), stod (out_of_range)
    return std::nullopt;
  }
  return d;
}

std::optional<Decision> nearest_decision(const std::vector<Decision>& tuned, const Shape& s) {
  auto lg = [](int64_t v) { return std::log2(double(std::max<int64_t>(v, 1))); };
  std::optional<Decision> best;
  double best_distance = 0;
  for (const Decision& d : tuned) {
    const double distance = std::fabs(lg(d.shape.B) - lg(s.B)) + std::fabs(lg(d.shape.M) - lg(s.M)) +
                            std::fabs(lg(d.shape.K) - lg(s.K)) + std::fabs(lg(d.shape.N) - lg(s.N));
    if (!best || distance < best_distance) best = d, best_distance = distance;
  }
  return best;
}

namespace {

TuningDevice tuning_device(const DeviceInfo& d) {
  return {d.name, d.arch(), nvrtc_version(), d.sm_count, d.driver_version};
}

// The spec of a decision adjusted to the problem (index width), or nothing when it cannot run it.
std::optional<KernelSpec> fitting(KernelSpec spec, const Problem& p) {
  try {
    check_spec_fits(spec, p);
    return spec;
  } catch (const std::invalid_argument&) {
  }
  try {
    spec.index64 = true;
    check_spec_fits(spec, p);
    return spec;
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
}

// A stored decision, if present and readable.
std::optional<Decision> load_decision(DiskCache* disk, const std::string& key) {
  if (!disk) return std::nullopt;
  const std::optional<std::string> text = disk->get(key, "tune");
  return text ? decode_decision(*text) : std::nullopt;
}

// Every bucket decision of a family in the cache.
std::vector<Decision> family_buckets(DiskCache* disk, const std::string& family) {
  std::vector<Decision> out;
  if (!disk) return out;
  for (const DiskCache::Entry& e : disk->list())
    if (e.kind == "tune")
      if (auto d = load_decision(disk, e.key); d && d->bucket && d->family == family) out.push_back(*d);
  return out;
}

// Random inputs laid out as the problem says, never zeros; non-negative for max_times.
std::vector<unsigned char> random_operand(const Problem& p, int64_t elements, std::mt19937_64& rng) {
  std::vector<unsigned char> bytes(elements * dtype_info(p.dtype).size_bytes);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int64_t i = 0; i < elements; ++i) {
    const double v = normal(rng);
    store_element(p.dtype, bytes.data(), i, p.semiring == Semiring::max_times ? std::fabs(v) : v);
  }
  return bytes;
}

} // namespace

TuneReport autotune(const Problem& p, const DeviceInfo& device, bool progress) {
  const auto t0 = std::chrono::steady_clock::now();
  ScopedContext scope(device.context);
  const Shape& s = p.shape;
  TuneReport report;
  for (const KernelSpec& spec : tuning_candidates(p, {device.max_threads_per_block, 48 * 1024}))
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
  const int64_t na = max_offset("a", s.B, s.M, s.K, p.a()) + 1, nb = max_offset("b", s.B, s.K, s.N, p.b()) + 1;
  const int64_t no = max_offset("out", s.B, s.M, s.N, p.out()) + 1, outputs = s.B * s.M * s.N;
  const std::vector<unsigned char> ha = random_operand(p, na, rng), hb = random_operand(p, nb, rng);
  const int out_bytes = dtype_info(p.output_dtype()).size_bytes;
  DeviceBuffer a(ha.size()), b(hb.size()), out(no * out_bytes), arg(p.with_argmax ? outputs * 4 : 0);
  DeviceBuffer flush(std::size_t(256) << 20); // larger than any L2: written between timed runs
  a.upload(ha.data(), ha.size());
  b.upload(hb.data(), hb.size());
  // Sampled outputs and their reference values, checked for every candidate before it may be timed.
  std::uniform_int_distribution<int64_t> pick(0, std::max<int64_t>(0, outputs - 1));
  std::vector<std::pair<int64_t, reference::Element>> samples;
  for (int n = 0; n < 24 && outputs > 0; ++n) {
    const int64_t o = pick(rng);
    samples.emplace_back(o, reference::element(p, ha.data(), hb.data(), o / (s.M * s.N), o / s.N % s.M, o % s.N));
  }
  const DriverApi& d = driver();
  auto time_runs = [&](const SemiringBMM& plan, int runs) {
    std::vector<double> ms;
    CUevent start = nullptr, stop = nullptr;
    check(d.cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate");
    check(d.cuEventCreate(&stop, CU_EVENT_DEFAULT), "cuEventCreate");
    auto* argp = p.with_argmax ? static_cast<int32_t*>(arg.get()) : nullptr;
    for (int r = 0; r < runs; ++r) {
      check(d.cuMemsetD8(reinterpret_cast<CUdeviceptr>(flush.get()), static_cast<unsigned char>(r), flush.size()),
            "cuMemsetD8(L2 flush)");
      check(d.cuEventRecord(start, nullptr), "cuEventRecord");
      plan(a.get(), b.get(), out.get(), argp, nullptr);
      check(d.cuEventRecord(stop, nullptr), "cuEventRecord");
      check(d.cuEventSynchronize(stop), "cuEventSynchronize");
      float elapsed = 0;
      check(d.cuEventElapsedTime(&elapsed, start, stop), "cuEventElapsedTime");
      ms.push_back(elapsed);
    }
    d.cuEventDestroy(start);
    d.cuEventDestroy(stop);
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  double best_ms = -1;
  std::size_t done = 0;
  for (CandidateResult& c : report.candidates) {
    ++done;
    if (c.status != "ok") continue;
    try {
      const SemiringBMM plan = SemiringBMM::get(p, c.spec);
      out.fill_bytes(0x7f); // poison: an unwritten output cannot pass the check
      plan(a.get(), b.get(), out.get(), p.with_argmax ? static_cast<int32_t*>(arg.get()) : nullptr, nullptr);
      check(d.cuCtxSynchronize(), "cuCtxSynchronize");
      std::vector<unsigned char> ho(no * out_bytes);
      out.download(ho.data(), ho.size());
      for (const auto& [o, want] : samples) {
        const Strides so = p.out();
        const int64_t at = o / (s.M * s.N) * so.batch + o / s.N % s.M * so.row + o % s.N * so.col;
        if (!reference::close(p.output_dtype(), load_element(p.output_dtype(), ho.data(), at), want,
                              reference::tolerance(p.output_dtype()))) {
          c.status = "wrong result at output " + std::to_string(o);
          break;
        }
      }
      if (c.status != "ok") continue;
      c.median_ms = time_runs(plan, 5);
      if (best_ms < 0 || c.median_ms < best_ms) best_ms = c.median_ms;
    } catch (const std::exception& e) {
      c.status = std::string("launch failed: ") + e.what();
    }
    if (progress)
      std::fprintf(stderr, "\rjitbmm: tuning %s [%zu/%zu] best %.4f ms   ", describe(p).c_str(), done,
                   report.candidates.size(), best_ms);
  }
  std::vector<CandidateResult*> timed;
  for (CandidateResult& c : report.candidates)
    if (c.median_ms >= 0) timed.push_back(&c);
  if (timed.empty()) throw std::runtime_error("autotune: no correct candidate for " + describe(p));
  std::sort(timed.begin(), timed.end(), [](auto* x, auto* y) { return x->median_ms < y->median_ms; });
  // Re-time the best three interleaved, so drift between the first pass's measurements cannot decide.
  timed.resize(std::min<std::size_t>(3, timed.size()));
  std::vector<std::vector<double>> again(timed.size());
  for (int round = 0; round < 3; ++round)
    for (std::size_t i = 0; i < timed.size(); ++i)
      again[i].push_back(time_runs(SemiringBMM::get(p, timed[i]->spec), 3));
  std::size_t winner = 0;
  for (std::size_t i = 0; i < timed.size(); ++i) {
    std::sort(again[i].begin(), again[i].end());
    timed[i]->median_ms = again[i][1];
    if (timed[i]->median_ms < timed[winner]->median_ms) winner = i;
  }
  report.best = timed[winner]->spec;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (progress)
    std::fprintf(stderr, "\rjitbmm: tuned %s in %.1f s: %zu candidates, best %.4f ms (%s)\n", describe(p).c_str(),
                 report.seconds, report.candidates.size(), timed[winner]->median_ms, to_string(report.best).c_str());
  return report;
}

void store_decision(const Problem& p, const DeviceInfo& device, const TuneReport& report, bool bucket) {
  DiskCache* disk = DiskCache::process_cache();
  if (!disk) return;
  const TuningDevice td = tuning_device(device);
  Decision d;
  d.spec = report.best;
  d.problem = describe(p);
  d.family = tuning_family(p, td);
  d.seconds = report.seconds;
  for (const CandidateResult& c : report.candidates)
    if (c.median_ms >= 0) d.ranking.push_back(c);
  std::sort(d.ranking.begin(), d.ranking.end(), [](auto& x, auto& y) { return x.median_ms < y.median_ms; });
  d.ranking.resize(std::min<std::size_t>(d.ranking.size(), 5));
  d.shape = p.shape;
  disk->put(tuning_key(p, td, false), "tune", encode_decision(d));
  if (bucket) {
    d.bucket = true;
    d.shape = shape_bucket(p.shape);
    disk->put(tuning_key(p, td, true), "tune", encode_decision(d));
  }
}

Choice choose(const Problem& p, const DeviceInfo& device, TunePolicy policy) {
  // Decisions already made in this process, per context, problem and policy.
  static std::mutex mutex;
  static std::map<std::string, Choice> made;
  std::ostringstream id;
  id << device.context << ' ' << int(policy) << ' ' << describe(p) << ' ' << p.with_argmax << ' '
     << dtype_info(p.output_dtype()).name;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = made.find(id.str()); it != made.end()) return it->second;
  }
  const Choice choice = [&]() -> Choice {
    DiskCache* disk = DiskCache::process_cache();
    const TuningDevice td = tuning_device(device);
    auto use = [&](std::optional<Decision> d, const char* source) -> std::optional<Choice> {
      if (!d) return std::nullopt;
      if (auto spec = fitting(d->spec, p)) return Choice{*spec, source, d};
      return std::nullopt;
    };
    if (auto c = use(load_decision(disk, tuning_key(p, td, false)), "exact")) return *c;
    if (policy != TunePolicy::exact) {
      if (auto c = use(load_decision(disk, tuning_key(p, td, true)), "bucket")) return *c;
      if (auto c = use(nearest_decision(family_buckets(disk, tuning_family(p, td)), p.shape), "nearest bucket"))
        return *c;
    }
    const Shape& s = p.shape;
    if (policy == TunePolicy::never || s.B * s.M * s.N == 0 || s.K == 0) return {default_spec(p), "default", {}};
    const TuneReport report = autotune(p, device, true);
    store_decision(p, device, report, policy == TunePolicy::bucket);
    return {report.best, "tuned now", {}};
  }();
  std::lock_guard<std::mutex> lock(mutex);
  made.emplace(id.str(), choice);
  return choice;
}

} // namespace jitbmm
