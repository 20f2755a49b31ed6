// The tuning database: stored decisions' keys (a hash of the device, the versions and the problem's family, plus
// the exact shape or its bucket), their line-based text, the nearest bucket, and their place in the disk cache.
#include "runtime/tuner/tuning_db.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "cache/disk_cache.hpp"
#include "support/sha256.hpp"
#include "jitbmm/version.hpp"
#include "support/checked_size.hpp"
#include "runtime/tuner/decision_text.hpp"
#include "runtime/nvrtc_compiler.hpp"

namespace jitbmm {

namespace {


// "rm" row-major contiguous, "cm" column-major contiguous, "s" anything else; "b" when broadcast over the batch.
std::string layout_kind(const Strides& st, int64_t rows, int64_t cols) {
  std::string kind = st.col == 1 && st.row == cols ? "rm" : st.row == 1 && st.col == rows ? "cm" : "s";
  return st.batch == 0 ? kind + "b" : kind;
}

std::string family_text(const Problem& p, const TuningDevice& d, Pass pass, InputRange range) {
  std::ostringstream os;
  os << tuning_device_text(d) << semiring_info(p.semiring).name << ' ' << dtype_info(p.dtype).name << ' '
     << dtype_info(p.output_dtype()).name << ' ' << p.with_argmax << ' ' << layout_kind(p.a(), p.shape.M, p.shape.K) << ' '
     << layout_kind(p.b(), p.shape.K, p.shape.N) << ' ' << layout_kind(p.out(), p.shape.M, p.shape.N) << '\n';
  if (p.precision != Precision::exact) os << "precision " << precision_name(p.precision) << '\n';
  if (pass != Pass::forward) os << "pass " << pass_name(pass) << '\n';
  if (range != InputRange::normal) os << "data " << input_range_name(range) << '\n';
  return os.str();
}

// A spec a decision names: in canonical form, one that can exist, and (when `of` is given) of the same problem
// kind as the decision's own spec, since every candidate was timed on that problem.
KernelSpec parse_stored_spec(const std::string& text, const KernelSpec* of = nullptr) {
  KernelSpec spec = parse_spec(text);
  check_spec_exists(spec);
  if (of && (spec.semiring != of->semiring || spec.dtype != of->dtype || spec.out_dtype != of->out_dtype ||
             spec.with_argmax != of->with_argmax || spec.pass != of->pass))
    throw std::invalid_argument("candidate: '" + text + "' is not of the decision's problem");
  return spec;
}

} // namespace

Shape shape_bucket(const Shape& s) {
  return {checked_round_up_pow2(s.B, "shape.B"), checked_round_up_pow2(s.M, "shape.M"),
          checked_round_up_pow2(s.K, "shape.K"), checked_round_up_pow2(s.N, "shape.N")};
}

const char* input_range_name(InputRange range) { return range == InputRange::wide ? "wide" : "normal"; }

InputRange parse_input_range(const std::string& text) {
  if (text == "normal") return InputRange::normal;
  if (text == "wide") return InputRange::wide;
  throw std::invalid_argument("--data: expected normal or wide, got '" + text + "'");
}

std::string tuning_device_text(const TuningDevice& d) {
  std::ostringstream os;
  os << "jitbmm-tune v" << kCacheFormatVersion << '\n'
     << d.name << '\n'
     << d.sm_count << ' ' << d.arch << ' ' << driver_major(d.driver_version) << ' ' << d.nvrtc_version << ' '
     << kVersion << '\n';
  return os.str();
}

std::string tuning_family(const Problem& p, const TuningDevice& d, Pass pass, InputRange range) {
  return sha256_hex(family_text(p, d, pass, range));
}

std::string decision_key(const std::string& family, bool bucket, const Shape& shape) {
  return sha256_hex(family + (bucket ? " bucket " : " exact ") + to_string(shape));
}

std::string decision_key(const Decision& d) { return decision_key(d.family, d.bucket, d.shape); }

std::string tuning_key(const Problem& p, const TuningDevice& d, bool bucket, Pass pass, InputRange range) {
  return decision_key(tuning_family(p, d, pass, range), bucket, bucket ? shape_bucket(p.shape) : p.shape);
}

std::string encode_decision(const Decision& d) {
  std::ostringstream os;
  os << "spec " << to_string(d.spec) << '\n'
     << "problem " << d.problem << '\n'
     << "family " << d.family << '\n'
     << "scope " << (d.bucket ? "bucket" : "exact") << '\n'
     << "shape " << to_string(d.shape) << '\n';
  os << "seconds " << format_duration(d.seconds, 3) << '\n';
  if (d.measured) os << "measured " << to_string(*d.measured) << '\n';
  // Each on a line of its own, its control characters replaced: an origin lost would make an imported decision
  // look tuned here, and skip the check that decisions brought from elsewhere get (a file path may hold a newline).
  const auto one_line = [](std::string s) {
    for (char& c : s)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    return s;
  };
  if (!d.reason.empty()) os << "reason " << one_line(d.reason) << '\n';
  if (!d.origin.empty()) os << "origin " << one_line(d.origin) << '\n';
  for (const CandidateResult& c : d.ranking) {
    os << "candidate " << format_duration(c.median_ms, 5) << ' ' << to_string(c.spec) << '\n';
  }
  return os.str();
}

std::optional<Decision> decode_decision(const std::string& text) {
  FieldReader in(text, 64 * 1024);
  if (!in.usable()) return std::nullopt;
  Decision d;
  std::string line;
  try {
    const auto spec = in.field("spec"), problem = in.field("problem"), family = in.field("family"),
               scope = in.field("scope"), shape = in.field("shape"), seconds = in.field("seconds");
    if (!spec || !problem || !family || !scope || !shape || !seconds) return std::nullopt;
    if (family->size() != 64 || family->find_first_not_of("0123456789abcdef") != std::string::npos) return std::nullopt;
    if (*scope != "bucket" && *scope != "exact") return std::nullopt;
    d.spec = parse_stored_spec(*spec);
    d.problem = *problem;
    d.family = *family;
    d.bucket = *scope == "bucket";
    d.shape = parse_shape(*shape);
    const std::optional<double> tuned_for = parse_duration(*seconds);
    if (!tuned_for) return std::nullopt;
    d.seconds = *tuned_for;
    // Optional lines (absent from decisions stored before they existed), each at most once, in this order, before
    // the candidates.
    while (in.next(line)) {
      // Where each may still come: not after itself, a later optional line or a candidate.
      const bool origin_may = d.ranking.empty() && d.origin.empty();
      const bool reason_may = origin_may && d.reason.empty();
      const bool measured_may = reason_may && !d.measured;
      if (const auto measured = field_value(line, "measured"); measured && measured_may) {
        d.measured = parse_shape(*measured);
        continue;
      }
      if (const auto reason = field_value(line, "reason"); reason && reason_may) {
        d.reason = *reason;
        continue;
      }
      if (const auto origin = field_value(line, "origin"); origin && origin_may) {
        d.origin = *origin;
        continue;
      }
      const auto rest = field_value(line, "candidate");
      if (!rest || d.ranking.size() >= kRankingKept) return std::nullopt;
      const auto space = rest->find(' ');
      if (space == std::string::npos) return std::nullopt;
      CandidateResult c;
      const std::optional<double> ms = parse_duration(rest->substr(0, space));
      if (!ms) return std::nullopt;
      c.median_ms = *ms;
      c.spec = parse_stored_spec(rest->substr(space + 1), &d.spec);
      d.ranking.push_back(c);
    }
  } catch (const std::exception&) { // parse_spec, check_spec_exists, parse_shape (invalid_argument)
    return std::nullopt;
  }
  return d;
}

double bucket_distance(const Shape& x, const Shape& s) {
  auto lg = [](int64_t v) { return std::log2(double(std::max<int64_t>(v, 1))); };
  return std::fabs(lg(x.B) - lg(s.B)) + std::fabs(lg(x.M) - lg(s.M)) + std::fabs(lg(x.K) - lg(s.K)) +
         std::fabs(lg(x.N) - lg(s.N));
}

std::optional<Decision> nearest_decision(const std::vector<Decision>& tuned, const Shape& s) {
  std::optional<Decision> best;
  double best_distance = 0;
  for (const Decision& d : tuned) {
    const double distance = bucket_distance(d.shape, s);
    if (!best || distance < best_distance) best = d, best_distance = distance;
  }
  return best;
}

TuningDevice tuning_device(const DeviceInfo& d) {
  return {d.name, d.arch_and_level(), nvrtc_version(), d.sm_count, d.driver_version};
}

std::optional<Decision> load_decision(DiskCache* disk, const std::string& key, bool* unreadable) {
  if (!disk) return std::nullopt;
  std::string shared;
  const std::optional<std::string> text = disk->get(key, kDecisionKind, &shared);
  if (!text) return std::nullopt;
  auto d = decode_decision(*text);
  // One that does not decode, or is not what its key stands for (its family, scope or shape is another's), is moved
  // aside, so that the next process neither reads it nor warns about it again.
  const char* why = !d ? "does not parse as a tuning decision"
                  : decision_key(*d) != key ? "its family, scope or shape is not what its key stands for"
                                            : nullptr;
  if (why) {
    disk->discard(key, kDecisionKind, *text, why);
    if (unreadable) *unreadable = true;
    return std::nullopt;
  }
  // One from the trusted shared cache was tuned on another machine (as its admins fill it): brought in, so checked
  // on first use as an imported one is.
  if (!shared.empty() && d->origin.empty()) d->origin = "the shared cache " + shared;
  return d;
}

std::vector<Decision> family_buckets(DiskCache* disk, const std::string& family) {
  return families_buckets(disk, {family});
}

std::vector<Decision> families_buckets(DiskCache* disk, const std::vector<std::string>& families) {
  std::vector<Decision> out;
  if (!disk) return out;
  for (const DiskCache::Entry& e : disk->list())
    if (e.kind == kDecisionKind)
      if (auto d = load_decision(disk, e.key);
          d && d->bucket && std::find(families.begin(), families.end(), d->family) != families.end())
        out.push_back(*d);
  return out;
}

bool put_decision(DiskCache& disk, const std::string& key, const Decision& decision) {
  return disk.put(key, kDecisionKind, encode_decision(decision));
}

} // namespace jitbmm
