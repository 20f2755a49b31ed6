// KernelSpec: identity, printing, the default choice per problem, and the checks every strategy shares. What each
// strategy supports lives in its own entry of the strategy table (generator/strategies/).
#include "jitbmm/kernel_spec.hpp"

#include <algorithm>
#include <iterator>
#include <set>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "generator/strategies/common.hpp"
#include "generator/strategy.hpp"
#include "support/checked_size.hpp"
#include "support/enum_names.hpp"

namespace jitbmm {

using strategies::reject;

namespace {

constexpr EnumName<Math> kMaths[] = {{Math::fma, "fma"},
                                     {Math::tf32x3, "tf32x3"},
                                     {Math::tf32, "tf32"},
                                     {Math::wgmma_tf32x3, "wgmma_tf32x3"},
                                     {Math::wgmma_tf32, "wgmma_tf32"},
                                     {Math::bf16, "bf16"},
                                     {Math::wgmma_bf16, "wgmma_bf16"},
                                     {Math::wgmma_bf16_fused, "wgmma_bf16_fused"}};
// Row i holds value i: math_count() lists the values by index (the CLI's help lists them all).
constexpr bool maths_in_order() {
  for (std::size_t i = 0; i < std::size(kMaths); ++i)
    if (static_cast<std::size_t>(kMaths[i].value) != i) return false;
  return true;
}
static_assert(maths_in_order());
constexpr EnumName<Pass> kPasses[] = {{Pass::forward, "forward"}, {Pass::grad_a, "grad_a"}, {Pass::grad_b, "grad_b"}};

// An enum field holds one of its values (a spec built from garbage ints, or a damaged one, names the field).
template <class E> void check_enum(const char* field, E value, const char* (*name)(E)) {
  try {
    name(value);
  } catch (const std::invalid_argument&) {
    reject(field, "unknown enum value " + std::to_string(static_cast<int>(value)));
  }
}
const char* semiring_text(Semiring s) { return semiring_info(s).name; }
const char* dtype_text(DType d) { return dtype_info(d).name; }

// The fields a spec's strategy reads; an unknown strategy reads none.
unsigned fields_of(const KernelSpec& s) {
  for (const StrategyDef* d : strategy_defs())
    if (d->id == s.strategy) return d->fields;
  return 0;
}

// Every field within the range any strategy could use, before any arithmetic on them: enums named, sizes bounded
// (no product of two of them can then overflow an int).
void check_fields(const KernelSpec& spec) {
  check_enum("semiring", spec.semiring, semiring_text);
  check_enum("dtype", spec.dtype, dtype_text);
  check_enum("out_dtype", spec.out_dtype, dtype_text);
  check_enum("strategy", spec.strategy, strategy_name);
  check_enum("pass", spec.pass, pass_name);
  check_enum("math", spec.math, math_name);
  const auto in = [](const char* field, int v, int lo, int hi) {
    if (v < lo || v > hi)
      reject(field, std::to_string(v) + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
  };
  const unsigned fields = fields_of(spec);
  if (fields & kTileFields) {
    in("tile_m", spec.tile_m, 1, 1024);
    in("tile_n", spec.tile_n, 1, 1024);
    in("tile_k", spec.tile_k, 1, 64); // 64 for wgmma_bf16 only (check_tiles)
    in("thread_m", spec.thread_m, 1, 64);
    in("thread_n", spec.thread_n, 1, 64);
    in("min_blocks", spec.min_blocks, 1, 2048);
  } else {
    in("block_x", spec.block_x, 1, 1024);
    in("block_y", spec.block_y, 1, 1024);
  }
  if (fields & kKChunkField) in("k_chunk", spec.k_chunk, 1, 1 << 30);
}

// The backward strategy whose rank for the problem is highest (each strategy's file says when it is the default):
// for the selecting semirings the forward's argmax routes G, binned per line (histogram) where K fits its bins, else
// sent with atomics (scatter); the tiled reduction of gradient weights for the others.
Strategy backward_strategy(const Problem& p) {
  const StrategyDef* best = nullptr;
  int best_rank = -1;
  for (const StrategyDef* d : strategy_defs()) {
    if (!d->backward) continue;
    const int rank = d->default_rank(p);
    if (rank > best_rank) best = d, best_rank = rank;
  }
  if (!best) throw std::logic_error("default_grad_spec: no backward strategy takes " + describe(p));
  return best->id;
}

} // namespace

const char* strategy_name(Strategy strategy) {
  for (const StrategyDef* d : strategy_defs())
    if (d->id == strategy) return d->name;
  throw std::invalid_argument("strategy: unknown enum value " + std::to_string(static_cast<int>(strategy)));
}
Strategy parse_strategy(const std::string& name) {
  std::vector<const StrategyDef*> defs = strategy_defs();
  std::string expected;
  for (std::size_t i = 0; i < defs.size(); ++i) {
    if (name == defs[i]->name) return defs[i]->id;
    if (i > 0 && defs[i]->id == defs[i - 1]->id) continue; // a forward and a backward entry share a name
    expected += std::string(expected.empty() ? "" : ", ") + defs[i]->name;
  }
  const auto comma = expected.rfind(", ");
  if (comma != std::string::npos) expected.replace(comma, 2, " or ");
  throw std::invalid_argument("strategy: unsupported '" + name + "' (expected " + expected + ")");
}
const char* math_name(Math math) { return enum_name(kMaths, math, "math"); }
int math_count() { return static_cast<int>(std::size(kMaths)); }
Math parse_math(const std::string& name) { return parse_enum(kMaths, name, "math"); }
bool single_tf32(Math math) { return math == Math::tf32 || math == Math::wgmma_tf32; }
bool bf16_factors(Math math) {
  return math == Math::bf16 || math == Math::wgmma_bf16 || math == Math::wgmma_bf16_fused;
}
bool uses_wgmma(Math math) {
  return math == Math::wgmma_tf32x3 || math == Math::wgmma_tf32 || math == Math::wgmma_bf16 ||
         math == Math::wgmma_bf16_fused;
}
const char* pass_name(Pass pass) { return enum_name(kPasses, pass, "pass"); }
Pass parse_pass(const std::string& name) { return parse_enum(kPasses, name, "pass"); }

bool KernelSpec::is_tiled() const { return (fields_of(*this) & kTileFields) != 0; }

int KernelSpec::threads() const {
  // In 64 bits and clamped, so fields out of range (check_spec_fits names them) cannot overflow here. The wgmma
  // forms add a producer warpgroup to the threads that hold the outputs (templates/exp_matmul/pipeline.cuh).
  const int64_t producer = arch_specific(*this) ? 128 : 0;
  const int64_t tiled = thread_m > 0 && thread_n > 0 ? int64_t(tile_m / thread_m) * (tile_n / thread_n) + producer : 0;
  const int64_t t = is_tiled() ? tiled : int64_t(block_x) * block_y;
  return static_cast<int>(std::clamp<int64_t>(t, 0, INT32_MAX));
}

std::string to_string(const KernelSpec& s) {
  const unsigned fields = fields_of(s);
  std::ostringstream os;
  os << "semiring=" << semiring_info(s.semiring).name << " dtype=" << dtype_info(s.dtype).name
     << " out=" << dtype_info(s.out_dtype).name << " argmax=" << s.with_argmax
     << " strategy=" << strategy_name(s.strategy);
  if (s.pass != Pass::forward) os << " pass=" << pass_name(s.pass);
  os << " index64=" << s.index64;
  if (fields & kTileFields)
    os << " tile=" << s.tile_m << 'x' << s.tile_n << 'x' << s.tile_k << " thread=" << s.thread_m << 'x' << s.thread_n
       << " min_blocks=" << s.min_blocks;
  else
    os << " block=" << s.block_x << 'x' << s.block_y;
  if (fields & kKChunkField) os << " k_chunk=" << s.k_chunk;
  if (fields & kMathField) os << " math=" << math_name(s.math);
  return os.str();
}

namespace {

int parse_int(const std::string& field, const std::string& text) {
  std::size_t used = 0;
  int v = 0;
  try {
    v = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size())
    throw std::invalid_argument("spec." + field + ": not an integer: '" + text + "'");
  return v;
}

// "AxBxC" into exactly `n` integers.
std::vector<int> parse_dims(const std::string& field, const std::string& text, std::size_t n) {
  std::vector<int> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t x = text.find('x', pos);
    out.push_back(parse_int(field, text.substr(pos, x == std::string::npos ? std::string::npos : x - pos)));
    if (x == std::string::npos) break;
    pos = x + 1;
  }
  if (out.size() != n) throw std::invalid_argument("spec." + field + ": expected " + std::to_string(n) + " sizes");
  return out;
}

bool parse_bool(const std::string& field, const std::string& text) {
  if (text != "0" && text != "1") throw std::invalid_argument("spec." + field + ": expected 0 or 1");
  return text == "1";
}

} // namespace

KernelSpec parse_spec(const std::string& text) {
  KernelSpec spec;
  std::istringstream in(text);
  std::string item;
  std::set<std::string> seen;
  while (in >> item) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("spec: expected key=value, got '" + item + "'");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (!seen.insert(key).second) throw std::invalid_argument("spec." + key + ": given twice");
    if (key == "semiring")
      spec.semiring = parse_semiring(value);
    else if (key == "dtype")
      spec.dtype = parse_dtype(value);
    else if (key == "out")
      spec.out_dtype = parse_dtype(value);
    else if (key == "argmax")
      spec.with_argmax = parse_bool(key, value);
    else if (key == "strategy")
      spec.strategy = parse_strategy(value);
    else if (key == "pass")
      spec.pass = parse_pass(value);
    else if (key == "index64")
      spec.index64 = parse_bool(key, value);
    else if (key == "block") {
      const auto d = parse_dims(key, value, 2);
      spec.block_x = d[0], spec.block_y = d[1];
    } else if (key == "tile") {
      const auto d = parse_dims(key, value, 3);
      spec.tile_m = d[0], spec.tile_n = d[1], spec.tile_k = d[2];
    } else if (key == "thread") {
      const auto d = parse_dims(key, value, 2);
      spec.thread_m = d[0], spec.thread_n = d[1];
    } else if (key == "min_blocks")
      spec.min_blocks = parse_int(key, value);
    else if (key == "k_chunk")
      spec.k_chunk = parse_int(key, value);
    else if (key == "math")
      spec.math = parse_math(value);
    else
      throw std::invalid_argument("spec: unknown field '" + key + "'");
  }
  for (const char* required : {"semiring", "dtype", "out", "argmax", "strategy", "index64"})
    if (!seen.count(required)) throw std::invalid_argument(std::string("spec.") + required + ": missing");
  if (to_string(spec) != text) throw std::invalid_argument("spec: '" + text + "' is not in canonical form");
  return spec;
}

// Identity is the fields the strategy reads (the ones to_string prints): others cannot make two specs differ.
namespace {
template <class F> void for_identity(const KernelSpec& s, F&& f) {
  const unsigned fields = fields_of(s);
  f(static_cast<int>(s.semiring)), f(static_cast<int>(s.dtype)), f(static_cast<int>(s.out_dtype));
  f(s.with_argmax), f(static_cast<int>(s.strategy)), f(static_cast<int>(s.pass)), f(s.index64);
  if (fields & kTileFields)
    f(s.tile_m), f(s.tile_n), f(s.tile_k), f(s.thread_m), f(s.thread_n), f(s.min_blocks);
  else
    f(s.block_x), f(s.block_y);
  if (fields & kKChunkField) f(s.k_chunk);
  if (fields & kMathField) f(static_cast<int>(s.math));
}
std::vector<int> identity(const KernelSpec& s) {
  std::vector<int> v;
  v.reserve(16);
  for_identity(s, [&](int x) { v.push_back(x); });
  return v;
}
} // namespace

bool KernelSpec::operator==(const KernelSpec& o) const { return identity(*this) == identity(o); }
std::size_t hash_value(const KernelSpec& s) {
  std::size_t h = 1469598103934665603ull; // FNV-1a over the identity's ints
  for_identity(s, [&](int x) {
    for (int byte = 0; byte < 4; ++byte) h = (h ^ ((static_cast<unsigned>(x) >> (8 * byte)) & 0xff)) * 1099511628211ull;
  });
  return h;
}

KernelSpec default_spec(const Problem& problem, Strategy strategy) {
  validate(problem);
  const StrategyDef& def = strategy_def(strategy, Pass::forward);
  KernelSpec spec;
  spec.semiring = problem.semiring;
  spec.dtype = problem.dtype;
  spec.out_dtype = problem.output_dtype();
  spec.with_argmax = problem.with_argmax;
  spec.strategy = strategy;
  def.defaults(spec, problem);
  spec.index64 = def.needs_index64(spec, problem);
  check_spec_fits(spec, problem);
  return spec;
}

KernelSpec default_grad_spec(const Problem& problem, Pass pass) {
  return default_grad_spec(problem, pass, backward_strategy(problem));
}

KernelSpec default_grad_spec(const Problem& problem, Pass pass, Strategy strategy) {
  if (pass == Pass::forward) throw std::invalid_argument("pass: default_grad_spec is for grad_a or grad_b");
  Problem p = problem;
  p.with_argmax = false;
  validate(p);
  KernelSpec spec;
  spec.semiring = p.semiring, spec.dtype = p.dtype, spec.out_dtype = p.output_dtype();
  spec.strategy = strategy;
  spec.pass = pass;
  const StrategyDef& def = strategy_def(spec);
  def.defaults(spec, p);
  spec.index64 = def.needs_index64(spec, p);
  check_spec_fits(spec, p);
  return spec;
}

// The forward strategy whose rank for the problem is highest (each strategy's file says when it is the default).
KernelSpec default_spec(const Problem& problem) {
  validate(problem);
  const StrategyDef* best = nullptr;
  int best_rank = -1;
  for (const StrategyDef* d : strategy_defs()) {
    if (d->backward) continue;
    const int rank = d->default_rank(problem);
    if (rank > best_rank) best = d, best_rank = rank;
  }
  if (!best) throw std::logic_error("default_spec: no strategy takes " + describe(problem));
  return default_spec(problem, best->id);
}

int shared_memory_bytes(const KernelSpec& spec) {
  const StrategyDef& def = strategy_def(spec);
  return def.shared_bytes ? def.shared_bytes(spec) : 0;
}

int dynamic_shared_memory_bytes(const KernelSpec& spec) {
  const StrategyDef& def = strategy_def(spec);
  return def.dynamic_shared_bytes ? def.dynamic_shared_bytes(spec) : 0;
}

bool arch_specific(const KernelSpec& spec) { return (fields_of(spec) & kMathField) && uses_wgmma(spec.math); }

void check_spec_exists(const KernelSpec& spec) {
  check_fields(spec);
  const int threads = spec.threads();
  if (threads <= 0 || threads > 1024 || threads % 32 != 0)
    reject(spec.is_tiled() ? "thread" : "block",
           std::to_string(threads) + " threads per block; need a multiple of 32, at most 1024");
  try {
    strategy_def(spec);
  } catch (const std::invalid_argument& e) { // "strategy: scatter is a backward strategy"
    throw std::invalid_argument(std::string("spec.") + e.what());
  }
}

void check_spec_fits(const KernelSpec& spec, const Problem& p) {
  validate(p);
  check_fields(spec);
  const Shape& s = p.shape;
  if (spec.semiring != p.semiring) reject("semiring", "differs from the problem's");
  if (spec.dtype != p.dtype) reject("dtype", "differs from the problem's");
  if (spec.out_dtype != p.output_dtype()) reject("out_dtype", "differs from the problem's");
  if (spec.with_argmax != p.with_argmax) reject("with_argmax", "differs from the problem's");
  if (p.with_argmax && s.K > INT32_MAX) throw std::invalid_argument("shape.K: argmax is int32, so K must be < 2^31");
  check_spec_exists(spec);
  const StrategyDef* def = &strategy_def(spec);
  def->check(spec, p);
  if (spec.pass != Pass::forward) {
    if (p.with_argmax) reject("pass", "backward kernels are planned for the problem without argmax");
    // The selecting semirings scatter G to the argmax; the others gather (tiled, or exp_matmul for log: its own
    // check names the semirings it computes).
    const bool scatter = semiring_info(p.semiring).backward == BackwardKind::argmax_scatter;
    if (scatter != (spec.strategy == Strategy::scatter || spec.strategy == Strategy::histogram))
      reject("strategy", std::string("the backward of ") + semiring_info(p.semiring).name + " uses " +
                             (scatter ? "histogram or scatter" : "a gather (tiled, or exp_matmul for log)"));
  }
  if (!spec.index64 && def->needs_index64(spec, p))
    reject("index64", "this problem's sizes or strides overflow 32-bit index math (" + describe(p) +
                          "); use a 64-bit index variant");
}

} // namespace jitbmm
