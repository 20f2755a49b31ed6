// The CLI flags that describe a problem and a kernel variant, shared by inspect, bench and tune. Every number is
// parsed whole and range-checked (support/parse_number.hpp), and a variant flag the chosen strategy does not read is
// an error naming the strategies that do (variant_flags below reads which from the strategy table).
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cli/args.hpp"
#include "generator/arch_features.hpp"
#include "generator/strategy.hpp"
#include "jitbmm/kernel_spec.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "support/parse_number.hpp"

namespace jitbmm::cli {

// The library's errors name a field ("dtype: unsupported 'x' ...", "shape.M: ...", "spec.thread: ..."); the user
// typed flags, so the CLI's errors name the flag instead. The field of a message: its start of letters, digits, '_'
// and '.' before ": ".
inline std::string error_field(const std::string& message) {
  std::size_t i = 0;
  while (i < message.size() && (std::isalpha(static_cast<unsigned char>(message[i])) ||
                                std::isdigit(static_cast<unsigned char>(message[i])) || message[i] == '_' ||
                                message[i] == '.'))
    ++i;
  return i > 0 && message.compare(i, 2, ": ") == 0 ? message.substr(0, i) : "";
}

// The flag's value parsed by `parse` (a library parser such as parse_dtype), its error addressed to the flag:
// "--out-dtype: unsupported 'bogus' (expected f32, f64, f16 or bf16)".
template <class Parse>
auto parse_flag(const Args& args, const std::string& flag, const std::string& fallback, Parse parse) {
  const std::string text = args.get(flag, fallback);
  try {
    return parse(text);
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what(), field = error_field(message);
    throw std::invalid_argument(flag + ": " + (field.empty() ? message : message.substr(field.size() + 2)));
  }
}

// Which flags set a field that validate() or check_spec_fits() names, most direct first.
inline std::vector<std::string> flags_setting(const std::string& field) {
  const std::string f = field.rfind("spec.", 0) == 0 ? field.substr(5) : field;
  const auto is = [&](const char* name) { return f == name || f.rfind(std::string(name) + "_", 0) == 0; };
  if (f == "shape" || f.rfind("shape.", 0) == 0) return {"--shape"};
  if (f == "out_dtype") return {"--out-dtype", "--dtype"};
  if (f == "with_argmax") return {"--argmax"};
  if (f == "a_strides") return {"--a-layout"};
  if (f == "b_strides") return {"--b-layout"};
  if (is("tile")) return {"--tile", "--thread", "--min-blocks"};
  if (is("thread")) return {"--thread", "--tile", "--min-blocks"};
  if (f == "min_blocks") return {"--min-blocks", "--tile", "--thread"};
  if (is("block")) return {"--block"};
  if (f == "k_chunk") return {"--k-chunk"};
  for (const char* plain : {"semiring", "dtype", "precision", "strategy", "pass", "math", "index64"})
    if (f == plain) return {std::string("--") + plain};
  return {};
}

// Re-addresses an error of validate() or check_spec_fits() to the first flag given that sets its field:
// "--tile: 1 threads per block; need a multiple of 32, at most 1024 (tile 7x7x7, thread 4x4, min-blocks 1)". An
// error about a field no flag given sets (a default's) is left as the library wrote it.
[[noreturn]] inline void throw_for_flag(const Args& args, const std::invalid_argument& e,
                                        const KernelSpec* spec = nullptr) {
  const std::string message = e.what(), field = error_field(message);
  for (const std::string& flag : flags_setting(field)) {
    if (!args.has(flag)) continue;
    const std::string plain = field.rfind("spec.", 0) == 0 ? field.substr(5) : field;
    std::string why = message.substr(field.size() + 2);
    const bool tiles = flag == "--tile" || flag == "--thread" || flag == "--min-blocks";
    if (tiles && spec)
      why += " (tile " + std::to_string(spec->tile_m) + "x" + std::to_string(spec->tile_n) + "x" +
             std::to_string(spec->tile_k) + ", thread " + std::to_string(spec->thread_m) + "x" +
             std::to_string(spec->thread_n) + ", min-blocks " + std::to_string(spec->min_blocks) + ")";
    else if (plain.find('.') != std::string::npos) // a part of what the flag sets: "(shape.M)"
      why += " (" + plain + ")";
    throw std::invalid_argument(flag + ": " + why);
  }
  throw e;
}

inline std::set<std::string> problem_flags() {
  return {"--semiring", "--dtype", "--out-dtype", "--shape", "--precision", "--a-layout", "--b-layout"};
}

// --a-layout / --b-layout: row (row-major, the default), col (column-major: the operand transposed in memory) or
// broadcast (one row-major matrix for every batch: batch stride 0).
inline std::optional<Strides> operand_layout(const Args& args, const std::string& flag, int64_t rows, int64_t cols) {
  const std::string text = args.get(flag, "row");
  if (text == "row") return std::nullopt;
  if (text == "col") return column_major(rows, cols);
  if (text == "broadcast") return Strides{0, cols, 1};
  throw std::invalid_argument(flag + ": expected row, col or broadcast, got '" + text + "'");
}
inline std::set<std::string> problem_switches() { return {"--argmax"}; }

// A variant flag and the strategies whose kernels read the KernelSpec fields it sets: the strategy table's field
// groups (generator/strategy.hpp), which to_string(KernelSpec) prints too.
struct VariantFlag {
  const char* flag;
  std::vector<Strategy> used_by;
};
inline const std::vector<VariantFlag>& variant_flags() {
  static const std::vector<VariantFlag> table = [] {
    const std::pair<const char*, unsigned> fields[] = {{"--block", kBlockFields},     {"--tile", kTileFields},
                                                       {"--thread", kTileFields},     {"--min-blocks", kTileFields},
                                                       {"--k-chunk", kKChunkField}, {"--math", kMathField}};
    std::vector<VariantFlag> out;
    for (const auto& [flag, group] : fields) {
      VariantFlag v{flag, {}};
      for (const StrategyDef* d : strategy_defs())
        if ((d->fields & group) && std::find(v.used_by.begin(), v.used_by.end(), d->id) == v.used_by.end())
          v.used_by.push_back(d->id);
      out.push_back(v);
    }
    return out;
  }();
  return table;
}

inline std::set<std::string> spec_flags() {
  std::set<std::string> flags = problem_flags();
  flags.insert({"--strategy", "--pass"});
  for (const VariantFlag& v : variant_flags()) flags.insert(v.flag);
  return flags;
}
inline std::set<std::string> spec_switches() { return {"--argmax", "--index64"}; }

// "--semiring log --dtype f32" for the flags of `defaults` not given, on stderr, so a bare command says what it ran.
inline void note_defaults(const Args& args, const std::vector<std::pair<std::string, std::string>>& defaults,
                          const std::string& who) {
  std::string used;
  for (const auto& [flag, value] : defaults)
    if (!args.has(flag)) used += " " + flag + " " + value;
  if (!used.empty()) std::fprintf(stderr, "jitbmm %s: defaults used:%s\n", who.c_str(), used.c_str());
}

// The problem of the flags; --semiring, --dtype and --shape default to log, f32 and `shape`, announced on stderr.
inline Problem problem_from(const Args& args, const std::string& who,
                            std::vector<std::pair<std::string, std::string>> more_defaults = {},
                            const std::string& shape = "64x512x512x512") {
  more_defaults.insert(more_defaults.begin(), {{"--semiring", "log"}, {"--dtype", "f32"}, {"--shape", shape}});
  note_defaults(args, more_defaults, who);
  Problem p;
  p.semiring = parse_flag(args, "--semiring", "log", parse_semiring);
  p.dtype = parse_flag(args, "--dtype", "f32", parse_dtype);
  if (args.has("--out-dtype")) p.out_dtype = parse_flag(args, "--out-dtype", "", parse_dtype);
  p.shape = parse_flag(args, "--shape", shape, parse_shape);
  p.with_argmax = args.has("--argmax");
  p.precision = parse_flag(args, "--precision", "exact", parse_precision);
  try {
    p.a_strides = operand_layout(args, "--a-layout", p.shape.M, p.shape.K);
    p.b_strides = operand_layout(args, "--b-layout", p.shape.K, p.shape.N);
    validate(p);
  } catch (const std::invalid_argument& e) {
    throw_for_flag(args, e);
  }
  return p;
}

// "128x64x16" → {128, 64, 16}: exactly `count` positive integers (each at most `hi`) joined by 'x'.
inline std::vector<int> parse_dims(const Args& args, const std::string& flag, const char* form, std::size_t count,
                                   int hi = 65536) {
  const std::string text = args.get(flag, "");
  std::vector<int> dims;
  std::size_t pos = 0;
  while (true) {
    const std::size_t x = text.find('x', pos);
    const std::string part = text.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
    if (dims.size() == count) throw std::invalid_argument(flag + ": expected " + form + ", got '" + text + "'");
    dims.push_back(parse_int(part, flag + " (" + form + ")", 1, hi));
    if (x == std::string::npos) break;
    pos = x + 1;
  }
  if (dims.size() != count) throw std::invalid_argument(flag + ": expected " + form + ", got '" + text + "'");
  return dims;
}

// A variant flag given for a strategy whose kernels do not read it: an error, never silently dropped.
inline void require_used_by(const Args& args, const KernelSpec& spec, bool strategy_given) {
  for (const VariantFlag& v : variant_flags()) {
    if (!args.has(v.flag) || std::find(v.used_by.begin(), v.used_by.end(), spec.strategy) != v.used_by.end()) continue;
    std::string users;
    for (Strategy s : v.used_by) users += (users.empty() ? "" : ", ") + std::string(strategy_name(s));
    const std::string name = strategy_name(spec.strategy);
    const std::string why = spec.pass != Pass::forward ? "; '" + name + "' is the " + pass_name(spec.pass) + " kernel's"
                            : strategy_given           ? ""
                                             : "; '" + name + "' is this problem's default: choose one with --strategy";
    throw std::invalid_argument(std::string(v.flag) + ": not used by strategy '" + name + "' (used by " + users + ")" +
                                why);
  }
}

// The default spec for the problem (or for --strategy), with any tuning flag given overriding its field.
inline KernelSpec spec_from(const Args& args, const Problem& p) {
  const Pass pass = parse_flag(args, "--pass", "forward", parse_pass);
  if (pass != Pass::forward && args.has("--argmax"))
    throw std::invalid_argument("--argmax: backward kernels read the forward's argmax; drop --argmax with --pass");
  const bool strategy_given = args.has("--strategy");
  const Strategy strategy = parse_flag(args, "--strategy", "tiled", parse_strategy);
  KernelSpec spec;
  try {
    spec = pass != Pass::forward ? (strategy_given ? default_grad_spec(p, pass, strategy) : default_grad_spec(p, pass))
           : strategy_given      ? default_spec(p, strategy)
                                 : default_spec(p);
  } catch (const std::invalid_argument& e) {
    throw_for_flag(args, e);
  }
  require_used_by(args, spec, args.has("--strategy"));
  if (args.has("--block")) {
    const auto b = parse_dims(args, "--block", "XxY", 2);
    spec.block_x = b[0], spec.block_y = b[1];
  }
  if (args.has("--tile")) {
    const auto t = parse_dims(args, "--tile", "MxNxK", 3);
    spec.tile_m = t[0], spec.tile_n = t[1], spec.tile_k = t[2];
  }
  if (args.has("--thread")) {
    const auto t = parse_dims(args, "--thread", "MxN", 2);
    spec.thread_m = t[0], spec.thread_n = t[1];
  }
  if (args.has("--min-blocks")) spec.min_blocks = parse_int(args.get("--min-blocks", ""), "--min-blocks", 1, 2048);
  if (args.has("--k-chunk")) spec.k_chunk = parse_int(args.get("--k-chunk", ""), "--k-chunk", 1, 1 << 30);
  if (args.has("--index64")) spec.index64 = true;
  if (args.has("--math")) spec.math = parse_flag(args, "--math", "", parse_math);
  try {
    check_spec_fits(spec, p);
  } catch (const std::invalid_argument& e) {
    throw_for_flag(args, e, &spec);
  }
  return spec;
}

// --arch (default sm_90): "sm_" and an architecture as the library reads one (parse_sm), its "a" form only from
// sm_90 on, where architecture-specific targets begin.
inline std::string arch_from(const Args& args) {
  const std::string arch = args.get("--arch", "sm_90");
  const auto refused = [&] {
    return std::invalid_argument("--arch: expected sm_XY (e.g. sm_90, sm_90a), got '" + arch + "'");
  };
  if (arch.rfind("sm_", 0) != 0) throw refused();
  int sm = 0;
  try {
    sm = parse_sm(arch, "--arch");
  } catch (const std::invalid_argument&) {
    throw refused();
  }
  if (arch.back() == 'a' && sm < 90) throw refused();
  return arch;
}

// An --arch this NVRTC cannot target is the flag's error, naming those it can; NVRTC's own refusal names no flag
// and comes with an empty log. Asks NVRTC, so only where NVRTC is about to compile.
inline void require_nvrtc_targets(const std::string& arch) {
  const std::vector<int> supported = nvrtc_supported_archs();
  const int number = std::stoi(arch.substr(3));
  if (std::find(supported.begin(), supported.end(), number) != supported.end()) return;
  std::string names;
  for (int a : supported) names += (names.empty() ? "sm_" : ", sm_") + std::to_string(a);
  throw std::invalid_argument("--arch: NVRTC " + nvrtc_version() + " cannot compile for '" + arch + "' (it targets " +
                              names + ")");
}

// --reps: launches timed per variant.
inline int reps_from(const Args& args) { return parse_int(args.get("--reps", "20"), "--reps", 1, 1000000); }

} // namespace jitbmm::cli
