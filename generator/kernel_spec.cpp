// KernelSpec: identity, printing, the default choice per problem, and what each strategy supports.
#include "jitbmm/kernel_spec.hpp"

#include <algorithm>
#include <array>
#include <set>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "exp_matmul_bounds.cuh"
#include "runtime/checked_size.hpp"
#include "runtime/enum_names.hpp"
#include "runtime/layout.hpp"

namespace jitbmm {

namespace {

constexpr EnumName<Strategy> kStrategies[] = {
    {Strategy::linear, "linear"},   {Strategy::linear_two_pass, "linear_two_pass"},
    {Strategy::warp, "warp"},       {Strategy::block_tree, "block_tree"},
    {Strategy::tiled, "tiled"},     {Strategy::split_k, "split_k"},
    {Strategy::scatter, "scatter"}, {Strategy::exp_matmul, "exp_matmul"}};
constexpr EnumName<Math> kMaths[] = {{Math::fma, "fma"}, {Math::tf32x3, "tf32x3"}, {Math::tf32, "tf32"}};
constexpr EnumName<Pass> kPasses[] = {{Pass::forward, "forward"}, {Pass::grad_a, "grad_a"}, {Pass::grad_b, "grad_b"}};

bool power_of_two(int v) { return v > 0 && (v & (v - 1)) == 0; }

// 32-bit index variants add loop strides of up to 2^22 to indices before comparing them.
constexpr int64_t kIndex32Limit = (int64_t(1) << 31) - (int64_t(1) << 22);

int64_t chunks_of(const KernelSpec& spec, const Shape& s) {
  return spec.strategy == Strategy::split_k && s.K > 0 ? (s.K + spec.k_chunk - 1) / spec.k_chunk : 1;
}

bool fits_index32(const Problem& p, int64_t chunks, bool backward = false) {
  const Shape& s = p.shape;
  for (int64_t v : {s.B, s.M, s.N, s.K})
    if (v >= kIndex32Limit) return false;
  const auto outputs = try_product({s.B, s.M, s.N, chunks});
  if (!outputs) return false;
  // Backward workspaces are [B][M][K] and [B][K][N].
  if (backward) {
    const auto grads_a = try_product({s.B, s.M, s.K}), grads_b = try_product({s.B, s.K, s.N});
    if (!grads_a || !grads_b || *grads_a >= kIndex32Limit || *grads_b >= kIndex32Limit) return false;
  }
  return *outputs < kIndex32Limit && max_offset("a_strides", s.B, s.M, s.K, p.a()) < kIndex32Limit &&
         max_offset("b_strides", s.B, s.K, s.N, p.b()) < kIndex32Limit &&
         max_offset("out_strides", s.B, s.M, s.N, p.out()) < kIndex32Limit;
}

[[noreturn]] void reject(const std::string& field, const std::string& why) {
  throw std::invalid_argument("spec." + field + ": " + why);
}

// The linear kernel's grid holds one block per block_x columns in x (y and z are looped over).
constexpr int64_t kMaxGridX = INT32_MAX;

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
  if (spec.is_tiled()) {
    in("tile_m", spec.tile_m, 1, 1024);
    in("tile_n", spec.tile_n, 1, 1024);
    in("tile_k", spec.tile_k, 1, 32);
    in("thread_m", spec.thread_m, 1, 64);
    in("thread_n", spec.thread_n, 1, 64);
    in("min_blocks", spec.min_blocks, 1, 2048);
    if (spec.strategy == Strategy::split_k) in("k_chunk", spec.k_chunk, 1, 1 << 30);
  } else {
    in("block_x", spec.block_x, 1, 1024);
    in("block_y", spec.block_y, 1, 1024);
  }
}

// exp_matmul's workspace holds padded copies of the operands ([Mp][Kp] and [Kp][Np] per batch); their offsets
// must fit 32-bit index math too.
bool exp_matmul_fits_index32(const Problem& p) {
  const Shape& s = p.shape;
  const int64_t a_batches = p.a().batch == 0 ? 1 : s.B, b_batches = p.b().batch == 0 ? 1 : s.B;
  const auto ea = try_product({a_batches, jb::em_round_up(s.M, 128), jb::em_round_up(s.K, 32)});
  const auto eb = try_product({b_batches, jb::em_round_up(s.N, 128), jb::em_round_up(s.K, 32)});
  return ea && eb && *ea < kIndex32Limit && *eb < kIndex32Limit;
}

// exp_matmul's workspace (jb::em_workspace sums these without checks): each padded operand copy and the repair
// flags within 2^60 bytes, so the sum fits too.
void check_exp_matmul_workspace(const Problem& p) {
  const Shape& s = p.shape;
  const bool wide = dtype_info(p.dtype).size_bytes == 8;
  const int64_t acc = wide ? 8 : 4, rt = jb::em_repair_tile(wide), limit = int64_t(1) << 60;
  const int64_t a_batches = p.a().batch == 0 ? 1 : s.B, b_batches = p.b().batch == 0 ? 1 : s.B;
  const auto ea = try_product({a_batches, jb::em_round_up(s.M, 128), jb::em_round_up(s.K, 32), acc});
  const auto eb = try_product({b_batches, jb::em_round_up(s.N, 128), jb::em_round_up(s.K, 32), acc});
  const auto flags = try_product({s.B, (s.M + rt - 1) / rt, (s.N + rt - 1) / rt, 4});
  if (!ea || !eb || !flags || *ea > limit || *eb > limit || *flags > limit)
    throw std::invalid_argument("shape: exp_matmul's padded workspace for " + to_string(s) +
                                " exceeds 2^60 bytes; use tiled");
  if ((s.M + rt - 1) / rt > 65535)
    throw std::invalid_argument("shape.M: more than 65535 row tiles for exp_matmul's repair pass; use tiled");
}

// exp_matmul's own rules (the tile rules of the tiled strategies apply as well).
void check_exp_matmul(const KernelSpec& spec, const Problem& p) {
  if (spec.semiring != Semiring::log) reject("strategy", "exp_matmul computes the log semiring only");
  if (spec.pass != Pass::forward) reject("pass", "exp_matmul is a forward strategy");
  const int tm = spec.thread_m, tn = spec.thread_n, vec = spec.dtype == DType::f64 ? 2 : 4;
  // The exponentiated operands are padded to multiples of 128 (rows, columns) and 32 (K) and read 16 bytes at a time.
  if (spec.tile_m <= 0 || spec.tile_n <= 0 || 128 % spec.tile_m || 128 % spec.tile_n || spec.tile_n % vec)
    reject("tile",
           "exp_matmul needs tile_m and tile_n dividing 128 (and tile_n a multiple of " + std::to_string(vec) + ")");
  if (spec.tile_k <= 0 || 32 % spec.tile_k || spec.tile_k % vec)
    reject("tile", "exp_matmul needs tile_k dividing 32, a multiple of " + std::to_string(vec));
  check_exp_matmul_workspace(p);
  if (!spec.index64 && !exp_matmul_fits_index32(p))
    reject("index64", "exp_matmul's padded operand copies overflow 32-bit index math; use a 64-bit index variant");
  if (spec.math == Math::fma) {
    // A thread's outputs must fall in one repair tile (64 or 128 square): powers of two.
    if (!power_of_two(tm) || !power_of_two(tn)) reject("thread", "exp_matmul needs powers of two");
    return;
  }
  if (p.dtype == DType::f64) reject("math", std::string(math_name(spec.math)) + " has f32 accumulators; f64 uses fma");
  if (spec.math == Math::tf32 && p.precision != Precision::fast)
    reject("math", "tf32 (one TF32 product per term, about 1e-4 relative error) needs precision = fast");
  // mma m16n8k8: a warp's (8·thread_m) × (4·thread_n) outputs, within one 128×128 repair tile.
  const int wm = 8 * tm, wn = 4 * tn;
  if (tm < 2 || tn < 4 || tm % 2 || tn % 4 || 128 % wm || 128 % wn || spec.tile_m % wm || spec.tile_n % wn)
    reject("thread", "tensor-core exp_matmul needs thread_m even and thread_n a multiple of 4, with 8·thread_m and "
                     "4·thread_n dividing the block tile and 128");
  if (spec.tile_k % 8) reject("tile", "tensor-core exp_matmul needs tile_k a multiple of 8");
}

} // namespace

const char* strategy_name(Strategy strategy) { return enum_name(kStrategies, strategy, "strategy"); }
Strategy parse_strategy(const std::string& name) { return parse_enum(kStrategies, name, "strategy"); }
const char* math_name(Math math) { return enum_name(kMaths, math, "math"); }
Math parse_math(const std::string& name) { return parse_enum(kMaths, name, "math"); }
const char* pass_name(Pass pass) { return enum_name(kPasses, pass, "pass"); }
Pass parse_pass(const std::string& name) { return parse_enum(kPasses, name, "pass"); }

int KernelSpec::threads() const {
  // In 64 bits and clamped, so fields out of range (check_spec_fits names them) cannot overflow here.
  const int64_t t = is_tiled() ? (thread_m > 0 && thread_n > 0 ? int64_t(tile_m / thread_m) * (tile_n / thread_n) : 0)
                               : int64_t(block_x) * block_y;
  return static_cast<int>(std::clamp<int64_t>(t, 0, INT32_MAX));
}

namespace {

// The field groups a strategy reads, beyond those every spec has (semiring, dtypes, argmax, strategy, pass,
// index64). The one rule for what a spec prints, compares and hashes: a field outside them cannot tell two specs
// apart.
struct FieldGroups {
  bool block;   // block_x, block_y
  bool tile;    // tile_m, tile_n, tile_k, thread_m, thread_n, min_blocks
  bool k_chunk; // k_chunk
  bool math;    // math
};
FieldGroups field_groups(const KernelSpec& s) {
  return {!s.is_tiled(), s.is_tiled(), s.strategy == Strategy::split_k, s.strategy == Strategy::exp_matmul};
}

} // namespace

std::string to_string(const KernelSpec& s) {
  const FieldGroups used = field_groups(s);
  std::ostringstream os;
  os << "semiring=" << semiring_info(s.semiring).name << " dtype=" << dtype_info(s.dtype).name
     << " out=" << dtype_info(s.out_dtype).name << " argmax=" << s.with_argmax
     << " strategy=" << strategy_name(s.strategy);
  if (s.pass != Pass::forward) os << " pass=" << pass_name(s.pass);
  os << " index64=" << s.index64;
  if (used.tile)
    os << " tile=" << s.tile_m << 'x' << s.tile_n << 'x' << s.tile_k << " thread=" << s.thread_m << 'x' << s.thread_n
       << " min_blocks=" << s.min_blocks;
  if (used.block) os << " block=" << s.block_x << 'x' << s.block_y;
  if (used.k_chunk) os << " k_chunk=" << s.k_chunk;
  if (used.math) os << " math=" << math_name(s.math);
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

namespace {

// Every field as an integer in one fixed order, those the strategy does not use (field_groups) as 0, so they
// cannot make two specs differ: what == compares and hash_value hashes, the fields to_string prints. The strategy
// is among them, so a 0 in an unused field never meets a used one.
std::array<int64_t, 17> identity_fields(const KernelSpec& s) {
  const FieldGroups used = field_groups(s);
  const auto when = [](bool on, int64_t v) { return on ? v : int64_t(0); };
  return {static_cast<int64_t>(s.semiring),
          static_cast<int64_t>(s.dtype),
          static_cast<int64_t>(s.out_dtype),
          s.with_argmax,
          static_cast<int64_t>(s.strategy),
          static_cast<int64_t>(s.pass),
          s.index64,
          when(used.block, s.block_x),
          when(used.block, s.block_y),
          when(used.tile, s.tile_m),
          when(used.tile, s.tile_n),
          when(used.tile, s.tile_k),
          when(used.tile, s.thread_m),
          when(used.tile, s.thread_n),
          when(used.tile, s.min_blocks),
          when(used.k_chunk, s.k_chunk),
          when(used.math, static_cast<int64_t>(s.math))};
}

} // namespace

bool KernelSpec::operator==(const KernelSpec& o) const { return identity_fields(*this) == identity_fields(o); }

std::size_t hash_value(const KernelSpec& s) {
  std::size_t h = 0;
  for (int64_t v : identity_fields(s)) // boost::hash_combine's mixing
    h ^= std::hash<int64_t>()(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

KernelSpec default_spec(const Problem& problem, Strategy strategy) {
  validate(problem);
  const Shape& s = problem.shape;
  KernelSpec spec;
  spec.semiring = problem.semiring;
  spec.dtype = problem.dtype;
  spec.out_dtype = problem.output_dtype();
  spec.with_argmax = problem.with_argmax;
  spec.strategy = strategy;
  const bool wide = problem.dtype == DType::f64;
  switch (strategy) {
  case Strategy::linear:
  case Strategy::linear_two_pass:
    spec.block_x = 32, spec.block_y = 8;
    break;
  case Strategy::warp:
    spec.block_x = s.K >= 512 ? 32 : s.K >= 64 ? 8 : 4, spec.block_y = 256 / spec.block_x;
    break;
  case Strategy::block_tree:
    spec.block_x = s.K >= 4096 ? 256 : 64, spec.block_y = 1;
    break;
  case Strategy::scatter: // backward only: default_grad_spec
    break;
  case Strategy::exp_matmul:
    if (wide) { // FP64 FMA
      spec.tile_m = spec.tile_n = 64, spec.tile_k = 8, spec.thread_m = spec.thread_n = 4;
    } else if (s.M >= 128 && s.N >= 128) { // tensor cores, fp32-level: warps of 64×32 outputs; measured best
      spec.math = Math::tf32x3;            // on the H100 (bench/RESULTS.md)
      spec.tile_m = spec.tile_n = 128, spec.tile_k = 16, spec.thread_m = spec.thread_n = 8, spec.min_blocks = 2;
    } else {
      spec.math = Math::tf32x3;
      spec.tile_m = spec.tile_n = 64, spec.tile_k = 16, spec.thread_m = 4, spec.thread_n = 4, spec.min_blocks = 2;
    }
    break;
  case Strategy::tiled:
  case Strategy::split_k:
    if (s.M >= 128 && s.N >= 64 && !wide) { // measured best on the H100 (bench/RESULTS.md)
      spec.tile_m = 128, spec.tile_n = 64, spec.thread_m = 8, spec.thread_n = 4, spec.min_blocks = 2;
    } else if (s.M >= 64 && s.N >= 64) {
      spec.tile_m = spec.tile_n = 64, spec.thread_m = spec.thread_n = 4;
    } else {
      spec.tile_m = spec.tile_n = 32, spec.thread_m = spec.thread_n = 2;
    }
    spec.tile_k = wide ? 8 : 16;
    if (strategy == Strategy::split_k) {
      // Enough chunks that chunks × outputs fills the GPU a few times over; chunks a multiple of tile_k.
      const int64_t outputs = std::max<int64_t>(1, checked_product({s.B, s.M, s.N}, "shape: B*M*N"));
      const int64_t want = std::clamp<int64_t>((int64_t(1) << 21) / outputs, 1, std::max<int64_t>(1, s.K / 256));
      int64_t chunk = (s.K + want - 1) / want;
      chunk = (chunk + spec.tile_k - 1) / spec.tile_k * spec.tile_k;
      spec.k_chunk = static_cast<int>(std::clamp<int64_t>(chunk, spec.tile_k, int64_t(1) << 30));
    }
    break;
  }
  spec.index64 = !fits_index32(problem, chunks_of(spec, s)) ||
                 (strategy == Strategy::exp_matmul && !exp_matmul_fits_index32(problem));
  check_spec_fits(spec, problem);
  return spec;
}

KernelSpec default_grad_spec(const Problem& problem, Pass pass) {
  if (pass == Pass::forward) throw std::invalid_argument("pass: default_grad_spec is for grad_a or grad_b");
  Problem p = problem;
  p.with_argmax = false;
  validate(p);
  const bool select = semiring_info(p.semiring).backward == BackwardKind::argmax_scatter;
  // The tiled defaults pick tiles from the output's rows and columns: M×K for grad_a, K×N for grad_b.
  Problem as_output = p;
  as_output.shape = pass == Pass::grad_a ? Shape{p.shape.B, p.shape.M, p.shape.N, p.shape.K}
                                         : Shape{p.shape.B, p.shape.K, p.shape.M, p.shape.N};
  as_output.a_strides.reset(), as_output.b_strides.reset(), as_output.out_strides.reset();
  KernelSpec spec;
  if (select) {
    spec.semiring = p.semiring, spec.dtype = p.dtype, spec.out_dtype = p.output_dtype();
    spec.strategy = Strategy::scatter;
    spec.block_x = 256, spec.block_y = 1;
  } else {
    spec = default_spec(as_output, Strategy::tiled);
    // Measured best on the H100 (bench/RESULTS.md): 8 outputs per thread (the per-output constants double the
    // registers per output), 3 blocks per SM, the long side of the tile along the operand's columns for grad_a.
    if (p.dtype != DType::f64 && spec.tile_m >= 64 && spec.tile_n >= 64) {
      spec.tile_m = pass == Pass::grad_a ? 32 : 64, spec.tile_n = pass == Pass::grad_a ? 64 : 32;
      spec.thread_m = pass == Pass::grad_a ? 2 : 4, spec.thread_n = pass == Pass::grad_a ? 4 : 2;
      spec.tile_k = 16, spec.min_blocks = 3;
    }
    if (p.dtype == DType::bf16) spec.min_blocks = 1; // its conversions need more than 128 registers
  }
  spec.pass = pass;
  spec.index64 = !fits_index32(p, 1, true);
  check_spec_fits(spec, p);
  return spec;
}

KernelSpec default_spec(const Problem& problem) {
  validate(problem);
  const Shape& s = problem.shape;
  const int64_t outputs = checked_product({s.B, s.M, s.N}, "shape: B*M*N");
  // Order matters: many outputs → tiled; few outputs with long K → split-K, else warp; then tiled, then linear.
  Strategy strategy = Strategy::linear;
  if (s.K == 0 || outputs == 0)
    strategy = Strategy::linear;
  else if (s.M >= 16 && s.N >= 16 && outputs >= (int64_t(1) << 16) && (s.M + 127) / 128 <= 65535)
    strategy = Strategy::tiled;
  else if (s.M >= 16 && s.N >= 16 && s.K >= 4096)
    strategy = Strategy::split_k;
  else if (s.K >= 32 && outputs < (int64_t(1) << 18))
    strategy = Strategy::warp;                                 // few outputs: parallel K
  else if (s.M >= 16 && s.N >= 16 && (s.M + 31) / 32 <= 65535) // NOLINT(bugprone-branch-clone): see the order
    strategy = Strategy::tiled;
  if (strategy == Strategy::linear && (s.N + 31) / 32 > kMaxGridX) strategy = Strategy::warp; // loops over outputs
  return default_spec(problem, strategy);
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
  const int threads = spec.threads();
  if (threads <= 0 || threads > 1024 || threads % 32 != 0)
    reject(spec.is_tiled() ? "thread" : "block",
           std::to_string(threads) + " threads per block; need a multiple of 32, at most 1024");
  switch (spec.strategy) {
  case Strategy::linear:
    if ((s.N + spec.block_x - 1) / spec.block_x > kMaxGridX)
      throw std::invalid_argument("shape.N: more than 2^31 - 1 column blocks for the linear strategy; use warp");
    break;
  case Strategy::scatter:
    if (spec.pass == Pass::forward) reject("strategy", "scatter is a backward strategy");
    if (spec.block_y != 1) reject("block", "scatter needs block_y = 1");
    break;
  case Strategy::linear_two_pass:
    if (spec.semiring != Semiring::log) reject("strategy", "linear_two_pass is the log semiring's two-pass form");
    break;
  case Strategy::warp:
    if (!power_of_two(spec.block_x) || spec.block_x < 2 || spec.block_x > 32)
      reject("block", "warp lanes per output (block_x) must be a power of two in 2..32");
    break;
  case Strategy::block_tree:
    if (!power_of_two(spec.block_x) || spec.block_x < 64 || spec.block_y != 1)
      reject("block", "block_tree needs block_x a power of two in 64..1024 and block_y = 1");
    break;
  case Strategy::tiled:
  case Strategy::split_k:
  case Strategy::exp_matmul: {
    if (spec.strategy == Strategy::exp_matmul) check_exp_matmul(spec, p);
    if (spec.thread_m <= 0 || spec.thread_n <= 0 || spec.tile_m % spec.thread_m || spec.tile_n % spec.thread_n)
      reject("thread", "thread tile must divide the block tile");
    if (spec.thread_m * spec.thread_n > 64) reject("thread", "at most 64 outputs per thread (registers)");
    if (spec.tile_k < 1 || spec.tile_k > 32) reject("tile", "tile_k must be in 1..32");
    const int acc = spec.dtype == DType::f64 ? 8 : 4;
    // Forward: a and b slices. Backward: grad_out and out on the G side (rows for grad_a), the operand on the other.
    const int g_side = spec.pass == Pass::grad_a ? spec.tile_m : spec.tile_n;
    int smem = spec.pass == Pass::forward
                   ? 2 * spec.tile_k * (spec.tile_m + 4 + spec.tile_n + 4) * acc
                   : 2 * spec.tile_k * (2 * (g_side + 4) + (spec.tile_m + spec.tile_n - g_side + 4)) * acc;
    if (spec.strategy == Strategy::exp_matmul) { // the row and column maxima and masks; mma rows are k-major
      if (spec.math != Math::fma) smem = 2 * (spec.tile_m + spec.tile_n) * (spec.tile_k + 4) * acc;
      smem += (spec.tile_m + spec.tile_n) * (acc + 16);
    }
    if (smem > 48 * 1024) reject("tile", std::to_string(smem) + " bytes of shared memory; at most 48 KiB");
    const int64_t rows = spec.pass == Pass::grad_b ? s.K : s.M;
    if ((rows + spec.tile_m - 1) / spec.tile_m > 65535)
      throw std::invalid_argument(std::string(spec.pass == Pass::grad_b ? "shape.K" : "shape.M") +
                                  ": more than 65535 row tiles for the tiled strategy; use linear or warp");
    if (spec.pass != Pass::forward) { // the backward grid's x holds one block per tile_n columns, unlooped
      const int64_t cols = spec.pass == Pass::grad_a ? s.K : s.N;
      if ((cols + spec.tile_n - 1) / spec.tile_n > kMaxGridX)
        throw std::invalid_argument(std::string(spec.pass == Pass::grad_a ? "shape.K" : "shape.N") +
                                    ": more than 2^31 - 1 column tiles for the backward's tiled kernel");
    }
    if (spec.strategy == Strategy::split_k) {
      if (spec.k_chunk < 1) reject("k_chunk", "must be positive");
      // The partial results of every chunk: [chunks][B][M][N] accumulators (and argmaxes).
      const auto partials =
          try_product({chunks_of(spec, s), s.B, s.M, s.N, (acc == 8 ? 8 : 4) + (p.with_argmax ? 4 : 0)});
      if (!partials || *partials > kMaxOperandBytes)
        reject("k_chunk", "split_k's partial results for " + to_string(s) + " exceed 2^62 bytes; use a larger k_chunk");
    }
    if (spec.min_blocks < 1 || spec.min_blocks * threads > 2048) reject("min_blocks", "must be in 1..2048/threads");
    break;
  }
  }
  if (spec.pass != Pass::forward) {
    if (p.with_argmax) reject("pass", "backward kernels are planned for the problem without argmax");
    const bool select = semiring_info(p.semiring).backward == BackwardKind::argmax_scatter;
    if (spec.strategy != (select ? Strategy::scatter : Strategy::tiled))
      reject("strategy", std::string("the backward of ") + semiring_info(p.semiring).name + " uses " +
                             (select ? "scatter" : "tiled"));
  }
  if (!spec.index64 && !fits_index32(p, chunks_of(spec, s), spec.pass != Pass::forward))
    reject("index64", "this problem's sizes or strides overflow 32-bit index math (" + describe(p) +
                          "); use a 64-bit index variant");
}

} // namespace jitbmm
