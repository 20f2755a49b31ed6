// A fuzz of the C ABI (include/jitbmm/c_api.h): random problems, most of them hostile, through plan creation, launch,
// backward, kernel name and the CPU reference, and random chain problems through the chain plans' calls. Each call
// must return a status (never crash, hang, or let an exception out: that aborts), every failure must carry a message,
// and no plan may be made for a problem no device could hold.
// Run it with $JITBMM_LIBCUDA naming libjitbmm_fake_cuda.so (plans are made, launches do nothing) or a missing library
// (every plan fails with JITBMM_NO_DRIVER after validation); tests/fake_driver/CMakeLists.txt runs both.
//
// $JITBMM_FUZZ_CASES (default 3000) cases from $JITBMM_FUZZ_SEED (default 20261124); case i uses seed + i, so
// `JITBMM_FUZZ_CASE=i` reruns exactly one case and `JITBMM_FUZZ_TRACE=1` prints each case before running it. The run
// counts its cases by family (bmm cases of small sizes and from the edges, chain cases of each form, plans made) and
// prints the counts; with $JITBMM_FUZZ_EVERY_FAMILY=1 a family no case reached is a finding, so that a shorter run
// (scripts/sanitize-host without --full) still shows that it covered each.
// The watchdog looks at a case every $JITBMM_FUZZ_CASE_SECONDS (default 120; a fraction is allowed): it is moving
// when a call returned or, under the fake driver, a module was loaded since the last look, or when the process
// computed (used CPU time for at least 5% of the interval) and the case has used less than 120 CPU-seconds.
// Otherwise it is a hang: blocked (no CPU used) or spinning. A case's first compiles take seconds of CPU each, and
// on a busy machine many times that of wall time: they are computing, not time against the case, however slowly the
// machine runs them.
// Exit status: 0 when every case held, 1 with a list of the findings otherwise.
#include <dlfcn.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "jitbmm/c_api.h"
#include "jitbmm/chain_problem.hpp"

extern "C" void __sanitizer_set_death_callback(void (*)(void)) __attribute__((weak));

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
// The library's own bound on the bytes an operand's strides may address (kMaxOperandBytes, support/problem.cpp):
// a plan beyond it is a finding. Plans beyond what any GPU can address (2^49 bytes of virtual memory on an H100)
// are counted and the first one printed, but they hold the library's contract.
constexpr double kLimitBytes = double(1ull << 62);
constexpr double kAddressableBytes = double(1ull << 49);

// The case being run, for the crash and hang messages (written before each case, read by signal handlers).
bool g_fake_driver = false; // $JITBMM_LIBCUDA names libjitbmm_fake_cuda.so
char g_case_text[1024] = "(before the first case)";
uint64_t g_case_seed = 0;
// The watchdog's view of progress: calls returned, and the fake driver's count of modules loaded (null without it).
volatile sig_atomic_t g_calls_returned = 0;
long (*g_modules_loaded)() = nullptr;
// The fake driver's own allocator: buffers whose memsets it checks against its allocations must be real ones.
int (*g_mem_alloc)(unsigned long long*, std::size_t) = nullptr;
int (*g_mem_free)(unsigned long long) = nullptr;
double g_case_seconds = 120;
constexpr double kCaseCpuSeconds = 120; // far more than a case's compiles take
long g_progress_seen = -1;
double g_cpu_at_case = 0, g_cpu_at_look = 0;
long progress() { return g_calls_returned + (g_modules_loaded ? g_modules_loaded() : 0); }
double cpu_seconds() { // async-signal-safe
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}
void look_again_in(double seconds) { // SIGALRM then; 0: never
  itimerval t{};
  t.it_value.tv_sec = static_cast<time_t>(seconds);
  t.it_value.tv_usec = static_cast<suseconds_t>((seconds - double(t.it_value.tv_sec)) * 1e6);
  ::setitimer(ITIMER_REAL, &t, nullptr);
}
void watch_case() {
  g_progress_seen = progress();
  g_cpu_at_case = g_cpu_at_look = cpu_seconds();
  look_again_in(g_case_seconds);
}
// The watchdog's look (see the file's comment): true when the case is moving.
bool case_moving() {
  const double cpu = cpu_seconds();
  const bool returned = progress() != g_progress_seen;
  const bool computing = cpu - g_cpu_at_look >= 0.05 * g_case_seconds && cpu - g_cpu_at_case < kCaseCpuSeconds;
  g_progress_seen = progress();
  g_cpu_at_look = cpu;
  return returned || computing;
}

void say_case(const char* what) {
  char line[1280];
  const int n = std::snprintf(line, sizeof line, "\nfuzz_c_api: %s in case seed %" PRIu64 ": %s\n", what, g_case_seed,
                              g_case_text);
  (void)!::write(2, line, static_cast<std::size_t>(n));
}
void on_death() { say_case("sanitizer report"); }
void on_signal(int sig) {
  if (sig == SIGALRM && case_moving()) {
    look_again_in(g_case_seconds);
    return;
  }
  say_case(sig == SIGALRM ? "hang (no call returned, no module loaded and no computing in the watchdog's last look)"
                          : "fatal signal");
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

struct Fuzzer {
  std::mt19937_64 rng;
  explicit Fuzzer(uint64_t seed) : rng(seed) {}

  uint64_t below(uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }
  template <class T, std::size_t N> T pick(const T (&options)[N]) { return options[below(N)]; }

  // A size: mostly ones a kernel can run, some at every edge of int32 and int64.
  int64_t dim() {
    switch (below(12)) {
    case 0:
      return 0;
    case 1:
      return 1;
    case 2:
    case 3:
    case 4:
      return 1 + static_cast<int64_t>(below(8));
    case 5:
    case 6:
      return 1 + static_cast<int64_t>(below(300));
    case 7:
      return pick<int64_t>({65535, 65536, 65537, (1 << 20) + 1, 3000000});
    case 8:
      return pick<int64_t>(
          {INT32_MAX, int64_t(INT32_MAX) + 1, int64_t(INT32_MAX) + 2, int64_t(1) << 32, (int64_t(1) << 32) + 1});
    case 9:
      return pick<int64_t>({int64_t(1) << 62, (int64_t(1) << 62) + 1, kMax, kMax - 1, int64_t(1) << 40});
    case 10:
      return pick<int64_t>({-1, -2, kMin, kMin + 1, -(int64_t(1) << 31)});
    default:
      return static_cast<int64_t>(rng()); // anything
    }
  }
  // A stride: mostly what the dims imply; some broadcast, huge, negative or random.
  int64_t stride(int64_t natural) {
    switch (below(10)) {
    case 0:
      return 0;
    case 1:
      return pick<int64_t>({1, 2, 7, 1024});
    case 2:
      return pick<int64_t>({-1, -1024, kMin, kMin + 1});
    case 3:
      return pick<int64_t>({kMax, kMax / 2, int64_t(1) << 31, int64_t(1) << 32, int64_t(1) << 62});
    case 4:
      return static_cast<int64_t>(rng());
    default:
      return natural;
    }
  }
};

const char* kSemirings[] = {"log", "max_plus", "min_plus", "max_times",  "plus_times",  "",
                            "LOG", "sum",      "log ",     "max_plus\n", "plus_times;", "\xff\xfe"};
const char* kDTypes[] = {"f32", "f64", "f16", "bf16", "int32", "", "F32", "f32 ", "float", "bf16\t", "f8"};
const char* kPrecisions[] = {"exact", "fast", "", "FAST", "approximate"};

// Wrapping products: strides as a caller would compute them, without undefined behaviour in the fuzz itself.
int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

int dtype_bytes(const char* name) {
  if (!name) return 0;
  const std::string s = name;
  return s == "f64" ? 8 : s == "f32" ? 4 : s == "f16" || s == "bf16" ? 2 : 0;
}

// The furthest byte an operand's strides reach, in double (no overflow): the size a device would need.
double span_bytes(int64_t batches, int64_t rows, int64_t cols, const int64_t st[3], int bytes) {
  if (batches <= 0 || rows <= 0 || cols <= 0) return 0;
  return (double(batches - 1) * std::abs(double(st[0])) + double(rows - 1) * std::abs(double(st[1])) +
          double(cols - 1) * std::abs(double(st[2])) + 1) *
         bytes;
}

// Contiguous row-major sizes of a [d0][d1][d2] operand when they are small and the strides are non-negative.
int64_t small_storage(int64_t d0, int64_t d1, int64_t d2, const int64_t st[3]) {
  if (d0 < 0 || d1 < 0 || d2 < 0 || st[0] < 0 || st[1] < 0 || st[2] < 0) return -1;
  if (d0 == 0 || d1 == 0 || d2 == 0) return 0;
  const double last = double(d0 - 1) * double(st[0]) + double(d1 - 1) * double(st[1]) + double(d2 - 1) * double(st[2]);
  return last < 1 << 20 ? static_cast<int64_t>(last) + 1 : -1;
}

std::string text(const char* s) {
  if (!s) return "NULL";
  std::string out = "\"";
  for (const char* p = s; *p; ++p) {
    if (*p >= 32 && *p < 127)
      out += *p;
    else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned char>(*p));
      out += hex;
    }
  }
  return out + "\"";
}

std::string describe(const jitbmm_problem& p) {
  char line[900];
  std::snprintf(line, sizeof line,
                "semiring=%s dtype=%s out_dtype=%s precision=%s B=%" PRId64 " M=%" PRId64 " K=%" PRId64 " N=%" PRId64
                " a_strides=%" PRId64 ",%" PRId64 ",%" PRId64 " b_strides=%" PRId64 ",%" PRId64 ",%" PRId64
                " out_strides=%" PRId64 ",%" PRId64 ",%" PRId64 " with_argmax=%d",
                text(p.semiring).c_str(), text(p.dtype).c_str(), text(p.out_dtype).c_str(), text(p.precision).c_str(),
                p.B, p.M, p.K, p.N, p.a_strides[0], p.a_strides[1], p.a_strides[2], p.b_strides[0], p.b_strides[1],
                p.b_strides[2], p.out_strides[0], p.out_strides[1], p.out_strides[2], p.with_argmax);
  return line;
}

std::string describe(const jitbmm_chain_problem& p) {
  char line[600];
  std::snprintf(
      line, sizeof line,
      "chain semiring=%s dtype=%s B=%" PRId64 " T=%" PRId64 " C=%" PRId64 " strides=%" PRId64 ",%" PRId64 ",%" PRId64
      ",%" PRId64 " with_lengths=%d form=%s batched=%d,%d emission_strides=%" PRId64 ",%" PRId64 ",%" PRId64
      " transition_strides=%" PRId64 ",%" PRId64 ",%" PRId64 " initial_strides=%" PRId64 ",%" PRId64,
      text(p.semiring).c_str(), text(p.dtype).c_str(), p.B, p.T, p.C, p.strides[0], p.strides[1], p.strides[2],
      p.strides[3], p.with_lengths, text(p.form).c_str(), p.batched_transitions, p.batched_initial,
      p.emission_strides[0], p.emission_strides[1], p.emission_strides[2], p.transition_strides[0],
      p.transition_strides[1], p.transition_strides[2], p.initial_strides[0], p.initial_strides[1]);
  return line;
}

struct Findings {
  std::vector<std::string> lines;
  long calls = 0, ok = 0, plans = 0, unaddressable = 0;
  std::map<std::string, long> families; // cases by family (see the file's comment)
  std::string first_unaddressable;
  template <class Problem> void add(uint64_t seed, const std::string& what, const Problem& p) {
    if (lines.size() < 200) lines.push_back("seed " + std::to_string(seed) + ": " + what + "\n    " + describe(p));
  }
};

// Every status is a known one, and every failure carries a message.
template <class Problem>
bool check_status(Findings& f, uint64_t seed, const char* call, jitbmm_status s, const Problem& p) {
  ++f.calls;
  g_calls_returned = g_calls_returned + 1;
  if (s < JITBMM_OK || s > JITBMM_UNSUPPORTED_DEVICE) {
    f.add(seed, std::string(call) + " returned unknown status " + std::to_string(int(s)), p);
    return false;
  }
  if (s == JITBMM_OK) {
    ++f.ok;
    return true;
  }
  const char* message = jitbmm_last_error();
  if (!message || !*message)
    f.add(seed, std::string(call) + " failed (status " + std::to_string(int(s)) + ") with no message", p);
  if (s == JITBMM_INTERNAL_ERROR) f.add(seed, std::string(call) + " internal error: " + (message ? message : ""), p);
  // The fake driver refuses only what a GPU would (a launch geometry past the device's limits, a copy outside an
  // allocation): the library should have refused the problem itself, naming the size. Running out of memory is
  // an answer a GPU gives too.
  if (s == JITBMM_CUDA_ERROR && g_fake_driver && message && !std::strstr(message, "CUDA_ERROR_OUT_OF_MEMORY"))
    f.add(seed, std::string(call) + " reached the driver with a request it refused: " + (message ? message : ""), p);
  return false;
}

void run_case(uint64_t seed, Findings& f) {
  Fuzzer z(seed);
  jitbmm_problem p{};
  p.semiring = z.chance(0.85) ? z.pick(kSemirings) : (z.chance(0.5) ? nullptr : kSemirings[0]);
  if (z.chance(0.8)) p.semiring = kSemirings[z.below(5)]; // mostly valid, so the sizes get tested
  p.dtype = z.chance(0.8) ? kDTypes[z.below(4)] : (z.chance(0.9) ? z.pick(kDTypes) : nullptr);
  p.out_dtype = z.chance(0.8) ? nullptr : z.pick(kDTypes);
  p.precision = z.chance(0.7) ? nullptr : z.pick(kPrecisions);
  p.with_argmax = z.chance(0.7) ? 0 : z.chance(0.8) ? 1 : static_cast<int>(z.rng());
  // Half the cases keep every size small, so plans are made and launched; the rest draw each size from the edges.
  const bool tame = z.chance(0.5);
  ++f.families[tame ? "bmm small" : "bmm edges"];
  auto size = [&] { return tame ? (z.chance(0.1) ? 0 : 1 + static_cast<int64_t>(z.below(70))) : z.dim(); };
  p.B = size(), p.M = size(), p.K = size(), p.N = size();
  const int64_t a_nat[3] = {wrap_mul(p.M, p.K), p.K, 1}, b_nat[3] = {wrap_mul(p.K, p.N), p.N, 1},
                o_nat[3] = {wrap_mul(p.M, p.N), p.N, 1};
  const bool keep = tame && z.chance(0.7);
  for (int i = 0; i < 3; ++i) {
    p.a_strides[i] = keep ? a_nat[i] : z.stride(a_nat[i]);
    p.b_strides[i] = keep ? b_nat[i] : z.stride(b_nat[i]);
    p.out_strides[i] = keep ? o_nat[i] : z.stride(o_nat[i]);
  }
  const std::string desc = describe(p);
  std::snprintf(g_case_text, sizeof g_case_text, "%s", desc.c_str());
  g_case_seed = seed;
  if (std::getenv("JITBMM_FUZZ_TRACE")) std::fprintf(stderr, "case %" PRIu64 ": %s\n", seed, desc.c_str());

  // Sentinels for device pointers: the fake driver never dereferences a kernel argument.
  void* const device = reinterpret_cast<void*>(uintptr_t(1) << 40);
  auto maybe = [&](double p_null) -> void* { return z.chance(p_null) ? nullptr : device; };

  jitbmm_plan* plan = nullptr;
  const bool null_problem = z.chance(0.02), null_out = z.chance(0.02);
  const jitbmm_status created = jitbmm_plan_create(null_problem ? nullptr : &p, null_out ? nullptr : &plan);
  if (check_status(f, seed, "jitbmm_plan_create", created, p)) {
    if (null_problem || null_out) f.add(seed, "jitbmm_plan_create succeeded with a null argument", p);
    ++f.plans;
    ++f.families["bmm plan made"];
    const int bytes = dtype_bytes(p.dtype), out_bytes = p.out_dtype ? dtype_bytes(p.out_dtype) : bytes;
    const double worst =
        std::max({span_bytes(p.B, p.M, p.K, p.a_strides, bytes), span_bytes(p.B, p.K, p.N, p.b_strides, bytes),
                  span_bytes(p.B, p.M, p.N, p.out_strides, out_bytes),
                  p.with_argmax ? double(p.B) * double(p.M) * double(p.N) * 4 : 0.0});
    if (worst > kLimitBytes)
      f.add(seed, "a plan was made for a problem reaching " + std::to_string(worst) + " bytes", p);
    else if (worst > kAddressableBytes && f.unaddressable++ == 0)
      f.first_unaddressable = "seed " + std::to_string(seed) + " (" + std::to_string(worst) + " bytes): " + describe(p);
    if (p.B < 0 || p.M < 0 || p.K < 0 || p.N < 0) f.add(seed, "a plan was made with a negative size", p);
    const char* name = nullptr;
    check_status(f, seed, "jitbmm_plan_kernel_name", jitbmm_plan_kernel_name(plan, z.chance(0.1) ? nullptr : &name), p);
    int settled = 0;
    check_status(f, seed, "jitbmm_plan_settled", jitbmm_plan_settled(plan, z.chance(0.1) ? nullptr : &settled), p);
    for (int launch = 0; launch < 2; ++launch)
      check_status(f, seed, "jitbmm_plan_run",
                   jitbmm_plan_run(plan, maybe(0.05), maybe(0.05), maybe(0.05),
                                   static_cast<int32_t*>(maybe(p.with_argmax ? 0.1 : 0.8)), nullptr),
                   p);
    // With no batch, a broadcast operand's gradient (one matrix) is zeroed by a memset, which the fake driver
    // checks against its allocations: the made-up device address is not one, so such a gradient is left out then.
    auto unless_zeroed = [&](void* grad, const int64_t st[3]) { return p.B == 0 && st[0] == 0 ? nullptr : grad; };
    check_status(f, seed, "jitbmm_plan_backward",
                 jitbmm_plan_backward(plan, maybe(0.05), maybe(0.05), maybe(0.1), static_cast<int32_t*>(maybe(0.5)),
                                      maybe(0.05), unless_zeroed(maybe(0.3), p.a_strides),
                                      unless_zeroed(maybe(0.3), p.b_strides), nullptr),
                 p);
    jitbmm_plan_destroy(plan);
  } else if (plan) {
    f.add(seed, "jitbmm_plan_create failed but set the plan", p);
  }

  // The reference, with real host buffers where the problem is small, and with null pointers otherwise (which must
  // be refused unless the output is empty).
  const int64_t sa = small_storage(p.B, p.M, p.K, p.a_strides), sb = small_storage(p.B, p.K, p.N, p.b_strides);
  const double outputs = double(p.B) * double(p.M) * double(p.N); // 0 for an empty output, whatever the others
  const bool small = sa >= 0 && sb >= 0 && p.B >= 0 && p.M >= 0 && p.N >= 0 && p.K >= 0 &&
                     outputs * double(std::max<int64_t>(p.K, 1)) <= 20000;
  if (small) {
    std::vector<double> a(static_cast<std::size_t>(sa) + 1), b(static_cast<std::size_t>(sb) + 1); // ≥ 8 bytes/elem
    std::vector<double> out(static_cast<std::size_t>(outputs) + 1);
    std::vector<int32_t> argmax(out.size());
    const jitbmm_status s =
        jitbmm_reference(&p, a.data(), b.data(), out.data(), z.chance(0.5) ? argmax.data() : nullptr);
    check_status(f, seed, "jitbmm_reference", s, p);
  } else {
    const jitbmm_status s = jitbmm_reference(&p, nullptr, nullptr, nullptr, nullptr);
    if (check_status(f, seed, "jitbmm_reference(null buffers)", s, p) && p.B != 0 && p.M != 0 && p.N != 0)
      f.add(seed, "jitbmm_reference accepted null buffers for a non-empty output", p);
  }
}

// A chain problem (jitbmm_chain_problem) through create, the byte counts, run, backward, kernel name and destroy.
// Valid state counts are few, since each compiles a module; the other sizes and the strides come from the edges.
void run_chain_case(uint64_t seed, Findings& f) {
  Fuzzer z(seed ^ 0x636861696eull); // "chain": a stream of its own, so the bmm case's draws stay as they were
  jitbmm_chain_problem p{};
  p.semiring = z.chance(0.85) ? (z.chance(0.5) ? "log" : "max_plus") : (z.chance(0.8) ? z.pick(kSemirings) : nullptr);
  p.dtype = z.chance(0.85) ? (z.chance(0.5) ? "f32" : "f64") : (z.chance(0.8) ? z.pick(kDTypes) : nullptr);
  const bool tame = z.chance(0.5);
  p.B = tame ? static_cast<int64_t>(z.below(40)) : z.dim();
  p.T = tame ? 1 + static_cast<int64_t>(z.below(70)) : z.dim();
  p.C = z.chance(0.8) ? z.pick<int64_t>({1, 3, 33}) : z.pick<int64_t>({0, -1, 1025, 16385, 65536, kMax, kMin});
  p.with_lengths = z.chance(0.5) ? 0 : z.chance(0.8) ? 1 : static_cast<int>(z.rng());
  const int64_t steps = static_cast<int64_t>(static_cast<uint64_t>(p.T) - 1); // T - 1, wrapping as a caller's would
  const int64_t nat[4] = {wrap_mul(wrap_mul(steps, p.C), p.C), wrap_mul(p.C, p.C), p.C, 1};
  const bool keep = tame && z.chance(0.6);
  for (int i = 0; i < 4; ++i) p.strides[i] = keep ? (z.chance(0.5) ? 0 : nat[i]) : z.stride(nat[i]);
  // The HMM form: its tables' strides drawn the same way (the potentials' must then be 0, mostly kept so).
  const bool hmm = z.chance(0.3);
  const int64_t nat_em[3] = {wrap_mul(p.T, p.C), p.C, 1}, nat_tr[3] = {wrap_mul(p.C, p.C), p.C, 1},
                nat_in[2] = {p.C, 1};
  if (hmm) {
    p.form = z.chance(0.95) ? "hmm" : "markov";
    if (z.chance(0.9)) std::fill(p.strides, p.strides + 4, 0);
    p.batched_transitions = z.chance(0.5);
    p.batched_initial = z.chance(0.5);
    for (int i = 0; i < 3; ++i) p.emission_strides[i] = keep ? (z.chance(0.5) ? 0 : nat_em[i]) : z.stride(nat_em[i]);
    for (int i = 0; i < 3; ++i) p.transition_strides[i] = keep ? 0 : z.stride(nat_tr[i]);
    for (int i = 0; i < 2; ++i) p.initial_strides[i] = keep ? 0 : z.stride(nat_in[i]);
  }
  const bool markov = hmm && std::strcmp(p.form, "markov") == 0; // a form no plan takes
  ++f.families[markov ? "chain markov" : std::string(hmm ? "chain hmm" : "chain crf") + (tame ? " small" : " edges")];
  const std::string desc = describe(p);
  std::snprintf(g_case_text, sizeof g_case_text, "%s", desc.c_str());
  if (std::getenv("JITBMM_FUZZ_TRACE")) std::fprintf(stderr, "chain case %" PRIu64 ": %s\n", seed, desc.c_str());

  // The expectations' saved bytes without a plan, of every field kind and one that is none: any problem is sized or
  // refused naming what is wrong (no draw from the fuzzer, so every seed's case stays what it was).
  std::size_t expectation_bytes = 0;
  check_status(f, seed, "jitbmm_chain_expectation_saved_bytes",
               jitbmm_chain_expectation_saved_bytes(&p, static_cast<int>(seed % 4), &expectation_bytes), p);

  void* const device = reinterpret_cast<void*>(uintptr_t(1) << 40);
  auto maybe = [&](double p_null) -> void* { return z.chance(p_null) ? nullptr : device; };
  jitbmm_chain_plan* plan = nullptr;
  const bool null_problem = z.chance(0.02), null_out = z.chance(0.02);
  const char* create = "jitbmm_chain_plan_create";
  const jitbmm_status created = jitbmm_chain_plan_create(null_problem ? nullptr : &p, null_out ? nullptr : &plan);
  if (!check_status(f, seed, create, created, p)) {
    if (plan) f.add(seed, std::string(create) + " failed but set the plan", p);
    return;
  }
  if (null_problem || null_out) f.add(seed, std::string(create) + " succeeded with a null argument", p);
  ++f.plans;
  ++f.families[hmm ? "chain hmm plan made" : "chain crf plan made"];
  if (p.B < 0 || p.T < 1 || p.C < 1 || p.C > JITBMM_MAX_CHAIN_STATES)
    f.add(seed, "a chain plan was made with sizes out of range", p);
  // The bytes an input of `extents` at `given` strides (all 0: `natural`) reaches.
  auto span = [&](std::initializer_list<int64_t> extents, const int64_t* given, const int64_t* natural) {
    const std::size_t n = extents.size();
    const bool any = std::any_of(given, given + n, [](int64_t v) { return v != 0; });
    double last = 0;
    std::size_t i = 0;
    for (int64_t e : extents) {
      if (e <= 0) return 0.0;
      last += double(e - 1) * double(any ? given[i] : natural[i]);
      ++i;
    }
    return (last + 1) * dtype_bytes(p.dtype);
  };
  const int64_t one = 1;
  const double reach =
      hmm ? std::max({span({p.B, p.T, p.C}, p.emission_strides, nat_em),
                      span({p.batched_transitions ? p.B : one, p.C, p.C}, p.transition_strides, nat_tr),
                      span({p.batched_initial ? p.B : one, p.C}, p.initial_strides, nat_in)})
          : span({p.B, p.T - 1, p.C, p.C}, p.strides, nat);
  if (reach > kLimitBytes)
    f.add(seed, "a chain plan was made for inputs reaching " + std::to_string(reach) + " bytes", p);
  size_t bytes = 0;
  check_status(f, seed, "jitbmm_chain_plan_saved_bytes", jitbmm_chain_plan_saved_bytes(plan, &bytes), p);
  size_t planless = 0;
  check_status(f, seed, "jitbmm_chain_problem_saved_bytes", jitbmm_chain_problem_saved_bytes(&p, &planless), p);
  if (planless != bytes) f.add(seed, "jitbmm_chain_problem_saved_bytes differs from the plan's saved bytes", p);
  check_status(f, seed, "jitbmm_chain_plan_workspace_bytes",
               jitbmm_chain_plan_workspace_bytes(plan, static_cast<int>(z.rng()), z.chance(0.1) ? nullptr : &bytes), p);
  const char* name = nullptr;
  check_status(f, seed, "jitbmm_chain_plan_kernel_name",
               jitbmm_chain_plan_kernel_name(plan, z.chance(0.1) ? nullptr : &name), p);
  // The strategy's name (no draw from the fuzzer, so every seed's case stays what it was): one of three, the stepped
  // one beyond the sequential kernels' states; a null out refused.
  const char* strategy = nullptr;
  if (check_status(f, seed, "jitbmm_chain_plan_strategy", jitbmm_chain_plan_strategy(plan, &strategy), p)) {
    const std::string named = strategy ? strategy : "(null)";
    if (named != "sequential" && named != "chunked" && named != "stepped")
      f.add(seed, "jitbmm_chain_plan_strategy named '" + named + "'", p);
    else if (p.C > jitbmm::kMaxSequentialChainStates && named != "stepped")
      f.add(seed, "jitbmm_chain_plan_strategy named '" + named + "' beyond the sequential kernels' states", p);
  }
  if (check_status(f, seed, "jitbmm_chain_plan_strategy", jitbmm_chain_plan_strategy(plan, nullptr), p))
    f.add(seed, "jitbmm_chain_plan_strategy succeeded with a null strategy", p);
  const bool log = std::strcmp(p.semiring, "log") == 0;
  auto* lengths = static_cast<const int64_t*>(maybe(p.with_lengths ? 0.1 : 0.9));
  if (hmm) {
    const jitbmm_status ran = jitbmm_chain_plan_run_hmm(
        plan, maybe(0.05), maybe(0.05), maybe(0.05), lengths, maybe(0.05), maybe(log ? 0.3 : 0.9), maybe(0.7),
        static_cast<int32_t*>(maybe(log ? 0.9 : 0.4)), nullptr, 0, nullptr);
    if (check_status(f, seed, "jitbmm_chain_plan_run_hmm", ran, p) && p.B > 0 &&
        (p.with_lengths != 0) != (lengths != nullptr))
      f.add(seed, "jitbmm_chain_plan_run_hmm accepted lengths that disagree with with_lengths", p);
    check_status(f, seed, "jitbmm_chain_plan_backward_workspace_bytes",
                 jitbmm_chain_plan_backward_workspace_bytes(plan, z.chance(0.1) ? nullptr : &bytes), p);
    // With no sequence, the shared tables' gradients are zeroed by a memset, which the fake driver checks against
    // its allocations: the made-up device address is not one, so those two are left out then.
    void* const table_grad = p.B == 0 ? nullptr : device;
    check_status(f, seed, "jitbmm_chain_plan_backward_hmm",
                 jitbmm_chain_plan_backward_hmm(plan, maybe(0.05), maybe(0.05), maybe(0.05), lengths,
                                                maybe(log ? 0.1 : 0.9), static_cast<int32_t*>(maybe(log ? 0.9 : 0.1)),
                                                maybe(0.05), maybe(0.3), z.chance(0.3) ? nullptr : table_grad,
                                                z.chance(0.3) ? nullptr : table_grad, nullptr, 0, nullptr),
                 p);
    jitbmm_chain_plan_destroy(plan);
    return;
  }
  // `saved` is written whole (a strategy zeroes what it leaves of it), which the fake driver checks against its
  // allocations: a real one where it fits, else none, the made-up address being none.
  // (Drawn last argument first, as the call's arguments were, so that each seed's case stays what it was.)
  auto* const path = static_cast<int32_t*>(maybe(log ? 0.9 : 0.4));
  void* const alpha = maybe(0.7);
  void* saved = maybe(log ? 0.3 : 0.9);
  void* const score = maybe(0.05);
  void* const potentials = maybe(0.05);
  unsigned long long saved_allocation = 0;
  if (saved && g_mem_alloc && planless > 0) {
    saved = nullptr;
    if (planless <= (std::size_t(256) << 20) && g_mem_alloc(&saved_allocation, planless) == 0)
      saved = reinterpret_cast<void*>(saved_allocation);
  }
  const jitbmm_status ran =
      jitbmm_chain_plan_run(plan, potentials, lengths, score, saved, alpha, path, nullptr, 0, nullptr);
  if (saved_allocation) g_mem_free(saved_allocation);
  if (check_status(f, seed, "jitbmm_chain_plan_run", ran, p) && p.B > 0 &&
      (p.with_lengths != 0) != (lengths != nullptr))
    f.add(seed, "jitbmm_chain_plan_run accepted lengths that disagree with with_lengths", p);
  check_status(f, seed, "jitbmm_chain_plan_backward",
               jitbmm_chain_plan_backward(plan, maybe(0.05), lengths, maybe(log ? 0.1 : 0.9),
                                          static_cast<int32_t*>(maybe(log ? 0.9 : 0.1)), maybe(0.05), maybe(0.05),
                                          nullptr),
               p);
  check_status(f, seed, "jitbmm_chain_plan_backward_with_workspace",
               jitbmm_chain_plan_backward_with_workspace(plan, maybe(0.05), lengths, maybe(log ? 0.1 : 0.9),
                                                         static_cast<int32_t*>(maybe(log ? 0.9 : 0.1)), maybe(0.05),
                                                         maybe(0.05), nullptr, 0, nullptr),
               p);
  jitbmm_chain_plan_destroy(plan);
}

} // namespace

int main() {
  const char* cases_env = std::getenv("JITBMM_FUZZ_CASES");
  const char* seed_env = std::getenv("JITBMM_FUZZ_SEED");
  const char* one_env = std::getenv("JITBMM_FUZZ_CASE");
  const long cases = cases_env && *cases_env ? std::strtol(cases_env, nullptr, 10) : 3000;
  const uint64_t base = seed_env && *seed_env ? std::strtoull(seed_env, nullptr, 10) : 20261124;
  const char* libcuda = std::getenv("JITBMM_LIBCUDA");
  g_fake_driver = libcuda && std::strstr(libcuda, "fake_cuda");
  if (g_fake_driver)
    if (void* driver = ::dlopen(libcuda, RTLD_NOW | RTLD_LOCAL)) // the handle the library's own dlopen gets too
    {
      g_modules_loaded = reinterpret_cast<long (*)()>(::dlsym(driver, "jitbmm_fake_cuda_modules_loaded"));
      g_mem_alloc = reinterpret_cast<int (*)(unsigned long long*, std::size_t)>(::dlsym(driver, "cuMemAlloc_v2"));
      g_mem_free = reinterpret_cast<int (*)(unsigned long long)>(::dlsym(driver, "cuMemFree_v2"));
    }
  if (const char* seconds = std::getenv("JITBMM_FUZZ_CASE_SECONDS"); seconds && *seconds)
    g_case_seconds = std::strtod(seconds, nullptr);
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(on_death);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM}) ::signal(sig, on_signal);

  Findings f;
  jitbmm_problem none{};
  if (jitbmm_set_tune_policy("never") != JITBMM_OK) { // the fake driver computes nothing: tuning could not succeed
    std::fprintf(stderr, "fuzz_c_api: cannot set the tuning policy: %s\n", jitbmm_last_error());
    return 1;
  }
  for (const char* bad : {"", "nevr", "bucket ", "exact\n", "\xff"})
    check_status(f, 0, "jitbmm_set_tune_policy(bad)", jitbmm_set_tune_policy(bad), none) &&
        (f.add(0, std::string("jitbmm_set_tune_policy accepted ") + text(bad), none), true);
  check_status(f, 0, "jitbmm_set_tune_policy(never)", jitbmm_set_tune_policy("never"), none);
  const char* dir = nullptr;
  check_status(f, 0, "jitbmm_cache_dir", jitbmm_cache_dir(&dir), none);
  if (jitbmm_cache_dir(nullptr) == JITBMM_OK) f.add(0, "jitbmm_cache_dir accepted a null pointer", none);
  if (jitbmm_plan_run(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr) == JITBMM_OK)
    f.add(0, "jitbmm_plan_run accepted a null plan", none);
  jitbmm_plan_destroy(nullptr);
  if (jitbmm_chain_plan_run(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr) ==
      JITBMM_OK)
    f.add(0, "jitbmm_chain_plan_run accepted a null plan", none);
  jitbmm_chain_plan_destroy(nullptr);

  const auto t0 = std::chrono::steady_clock::now();
  const long first = one_env && *one_env ? std::strtol(one_env, nullptr, 10) : 0;
  const long last = one_env && *one_env ? first + 1 : cases;
  for (long i = first; i < last; ++i) {
    watch_case();
    run_case(base + static_cast<uint64_t>(i), f);
    run_chain_case(base + static_cast<uint64_t>(i), f);
  }
  look_again_in(0);
  // What the cases' plans still build in the background ends here, inside the run (and its sanitizers' watch).
  if (jitbmm_wait_for_builds() != JITBMM_OK)
    f.add(0, std::string("jitbmm_wait_for_builds failed: ") + jitbmm_last_error(), none);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("fuzz_c_api: %ld cases (seeds %" PRIu64 "..%" PRIu64 "), %ld calls, %ld OK, %ld plans made, %.1f s\n",
              last - first, base + first, base + last - 1, f.calls, f.ok, f.plans, seconds);
  if (f.unaddressable)
    std::printf("fuzz_c_api: %ld plans address more than 2^49 bytes (within the library's 2^62), the first %s\n",
                f.unaddressable, f.first_unaddressable.c_str());
  std::string families;
  for (const auto& [family, n] : f.families)
    families += (families.empty() ? "" : ", ") + family + " " + std::to_string(n);
  std::printf("fuzz_c_api: cases by family: %s\n", families.c_str());
  if (const char* every = std::getenv("JITBMM_FUZZ_EVERY_FAMILY"); every && std::strcmp(every, "1") == 0) {
    std::vector<std::string> expected = {"bmm small",       "bmm edges",       "chain crf small", "chain crf edges",
                                         "chain hmm small", "chain hmm edges", "chain markov"};
    if (g_fake_driver)
      for (const char* made : {"bmm plan made", "chain crf plan made", "chain hmm plan made"}) expected.push_back(made);
    for (const std::string& family : expected)
      if (!f.families.count(family)) f.lines.push_back("no case of the family '" + family + "' in this run");
  }
  for (const std::string& line : f.lines) std::printf("FINDING %s\n", line.c_str());
  if (!f.lines.empty()) std::printf("fuzz_c_api: %zu findings\n", f.lines.size());
  return f.lines.empty() ? 0 : 1;
}
