// The tuning database: decisions stored in the disk cache (kind "tune"), their keys (device, versions, problem
// family, exact shape or shape bucket), their text, and the distance between shape buckets.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "jitbmm/kernel_spec.hpp"
#include "runtime/device.hpp"
#include "runtime/tuner/decision_text.hpp"

namespace jitbmm {

class DiskCache;

constexpr const char* kDecisionKind = "tune"; // the disk cache's kind for a product's decision

// Each size rounded up to a power of two: problems in one bucket share a stored decision under `bucket`.
Shape shape_bucket(const Shape& shape);

// What the tuner times candidates on: randn inputs (normal), or randn·kWideSpread (wide: row and column maxima far
// apart, so most of exp_matmul's outputs fail its shift and go to the exact repair; runtime/repair_watch.hpp). A
// plan's own decision is tuned on normal data; the wide decision is the variant it moves to on wide data.
enum class InputRange { normal, wide };
constexpr double kWideSpread = 50;
const char* input_range_name(InputRange range); // "normal", "wide"
InputRange parse_input_range(const std::string& text); // std::invalid_argument naming --data

// The key of a stored decision: device (name, SM count, arch, the driver's CUDA major version), NVRTC and jitbmm
// versions, and the problem (semiring, dtypes, argmax, layout kind, and the exact shape or its bucket), and the input
// range when wide. Only the driver's major version counts: the kernels are compiled by NVRTC, not by the driver, so
// a decision stays good across the driver's minor releases, and one shipped with jitbmm serves them all.
struct TuningDevice {
  std::string name, arch, nvrtc_version;
  int sm_count = 0, driver_version = 0;
};
TuningDevice tuning_device(const DeviceInfo& device); // with this process's NVRTC version
constexpr int driver_major(int driver_version) { return driver_version / 1000; } // 13000 (CUDA 13.0) → 13
// The lines of a key that name the device and the versions (every kind of decision's key starts with them).
std::string tuning_device_text(const TuningDevice& device);
std::string tuning_key(const Problem& problem, const TuningDevice& device, bool bucket, Pass pass = Pass::forward,
                       InputRange range = InputRange::normal);
// The key is the family's hash with the scope and the shape (the exact shape or the bucket's), so a stored
// decision's own lines name the one key it may be stored under: a reader checks that, wherever the text came from.
// The key without the shape: decisions of one family may stand in for each other (nearest bucket).
std::string tuning_family(const Problem& problem, const TuningDevice& device, Pass pass = Pass::forward,
                          InputRange range = InputRange::normal);

struct CandidateResult {
  KernelSpec spec;
  double median_ms = -1; // -1: not timed
  std::string status;    // "ok", or why the candidate was skipped
};

// A stored decision: the winner, what it was tuned for, and the best candidates' timings (for inspect --tuned).
struct Decision {
  KernelSpec spec;
  std::string problem;                  // describe() of the tuned problem
  std::string family;                   // tuning_family()
  bool bucket = false;                  // stored for the shape's bucket (else for the exact shape)
  Shape shape;                          // the bucket's shape, or the exact shape
  double seconds = 0;                   // how long tuning took
  std::optional<Shape> measured;        // the shape the ranking was timed on (absent in older decisions)
  std::string reason;                   // why these candidates were timed, one line ("" in older decisions)
  std::string origin;                   // "" when tuned on this machine, else where it came from ("imported from …")
  std::vector<CandidateResult> ranking; // every candidate timed (up to kRankingKept), fastest first
};
constexpr std::size_t kRankingKept = 64; // what a decision keeps of its ranking: the family model's observations
                                         // (every variant: the H100 search spaces recorded hold 14 to 33)
// A line-based text; decode is strict (every line checked, sizes bounded, durations finite and not negative, every
// spec canonical and one that can exist, candidates of the decision's own problem kind) and returns nothing on any
// defect.
std::string encode_decision(const Decision& d);
std::optional<Decision> decode_decision(const std::string& text);
std::string decision_key(const std::string& family, bool bucket, const Shape& shape);
std::string decision_key(const Decision& d); // the key `d` may be stored under
// The decision whose bucket is closest to `shape` (sum over B, M, K, N of |log2 ratio|; ties: the first), if any.
std::optional<Decision> nearest_decision(const std::vector<Decision>& tuned, const Shape& shape);
double bucket_distance(const Shape& x, const Shape& y); // Σ over B, M, K, N of |log2 ratio| (sizes below 1 count as 1)
// Up to this distance a borrowed decision is used as it is; farther, `bucket` tunes the new bucket (the family
// model's candidates: family_model.hpp) and `never` uses the default spec.
constexpr double kNearBucketDistance = 3.0;

// The decision stored under `key`, if any (none without a disk cache). One that is stored but does not decode, or
// whose key is another (decision_key), is nothing too: it is moved aside (DiskCache::discard), so no later process
// reads it, and sets `*unreadable` when given.
std::optional<Decision> load_decision(DiskCache* disk, const std::string& key, bool* unreadable = nullptr);
// Every readable bucket decision of a family in the cache.
std::vector<Decision> family_buckets(DiskCache* disk, const std::string& family);
// Every readable bucket decision of any of these families (the cache listed once).
std::vector<Decision> families_buckets(DiskCache* disk, const std::vector<std::string>& families);
// Stores `decision` under `key`, replacing any. False where the cache keeps nothing (read-only, not trusted, a failed
// write: DiskCache::put).
bool put_decision(DiskCache& disk, const std::string& key, const Decision& decision);

} // namespace jitbmm
