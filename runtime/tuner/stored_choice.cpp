// The stored-decision steps of the choice cascade (stored_choice in choose.hpp): the user's cache, then the decisions
// shipped with jitbmm, each read exact, bucket, nearest bucket.
#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cache/disk_cache.hpp"
#include "jitbmm/kernel_spec.hpp"
#include "runtime/tuner/choose.hpp"
#include "runtime/tuner/decisions_file.hpp"
#include "runtime/tuner/search_space.hpp"
#include "runtime/tuner/tuning_db.hpp"
#include "support/log.hpp"

namespace jitbmm {

namespace {

bool rejected_spec(const std::vector<KernelSpec>& rejected, const KernelSpec& spec) {
  return std::find(rejected.begin(), rejected.end(), spec) != rejected.end();
}

// Where a cascade reads decisions: a key's decision, and the bucket decisions of a family.
struct DecisionSource {
  const char* prefix; // put before the step's name in Choice::source ("" for the user's cache, "shipped ")
  // A stored decision that does not decode, or is not what its key stands for, is nothing: the disk cache moves it
  // aside and warns once naming the file; a decisions file was refused whole when read.
  std::function<std::optional<Decision>(const std::string& key)> load;
  std::function<std::vector<Decision>(const std::string& family)> buckets;
};

// The cascade of one source: the exact decision, then (unless `policy` is exact) the bucket's, then the nearest tuned
// bucket within kNearBucketDistance.
std::optional<Choice> cascade(const DecisionSource& from, const Problem& p, const TuningDevice& td, TunePolicy policy,
                              Pass pass, const std::vector<KernelSpec>& rejected, InputRange range) {
  const std::string family = tuning_family(p, td, pass, range);
  // A decision's spec is of the pass its key names (the key hashes the pass, the spec says it again): one of another
  // pass, which an edited or foreign file can hold, would be launched with this pass's parameters.
  auto usable = [&](const KernelSpec& spec) { return spec.pass == pass ? fitting(spec, p) : std::nullopt; };
  // An exact or bucket decision is this problem's own (its key says so: DecisionSource::load checked it): one that
  // no longer fits is stale, and said so.
  auto own = [&](bool bucket, const char* step) -> std::optional<Choice> {
    const std::string key = tuning_key(p, td, bucket, pass, range);
    const auto d = from.load(key);
    if (!d) return std::nullopt;
    const std::string source = std::string(from.prefix) + step;
    const auto spec = usable(d->spec);
    if (!spec) {
      std::string why = "a variant of the pass " + std::string(pass_name(d->spec.pass)) + ", not " + pass_name(pass);
      try {
        if (d->spec.pass == pass) check_spec_fits(d->spec, p);
      } catch (const std::invalid_argument& e) {
        why = e.what();
      }
      warn_once(key, "ignoring the stored tuning decision " + key.substr(0, 16) + " (" + source + ", tuned for " +
                         d->problem + "): " + to_string(d->spec) + " no longer fits (" + why + "); deciding again");
      return std::nullopt;
    }
    if (rejected_spec(rejected, *spec)) return std::nullopt;
    return Choice{*spec, source, d, true};
  };
  if (auto c = own(false, "exact")) return c;
  if (policy == TunePolicy::exact) return std::nullopt;
  if (auto c = own(true, "bucket")) return c;
  // Another bucket's decision may not fit this shape: that is no defect of the decision, so no warning.
  std::vector<Decision> buckets = from.buckets(family);
  buckets.erase(std::remove_if(buckets.begin(), buckets.end(),
                               [&](const Decision& d) {
                                 const auto spec = fitting(d.spec, p);
                                 return d.spec.pass != pass || (spec && rejected_spec(rejected, *spec));
                               }),
                buckets.end());
  const auto near = nearest_decision(buckets, p.shape);
  if (!near) return std::nullopt;
  if (bucket_distance(near->shape, shape_bucket(p.shape)) > kNearBucketDistance) return std::nullopt;
  if (auto spec = usable(near->spec)) return Choice{*spec, std::string(from.prefix) + "nearest bucket", near, true};
  return std::nullopt;
}

} // namespace

std::optional<Choice> stored_choice(DiskCache* disk, const Problem& p, const TuningDevice& td, TunePolicy policy,
                                    Pass pass, const std::vector<KernelSpec>& rejected, InputRange range,
                                    const DecisionSet* shipped) {
  const DecisionSource user{"", [&](const std::string& key) { return load_decision(disk, key); },
                            [&](const std::string& family) { return family_buckets(disk, family); }};
  if (auto c = cascade(user, p, td, policy, pass, rejected, range)) return c;
  if (!shipped || shipped->products.empty()) return std::nullopt;
  const DecisionSource from_shipped{"shipped ",
                                    [&](const std::string& key) -> std::optional<Decision> {
                                      const auto it = shipped->products.find(key);
                                      if (it == shipped->products.end()) return std::nullopt;
                                      return it->second;
                                    },
                                    [&](const std::string& family) { return set_buckets(*shipped, {family}); }};
  return cascade(from_shipped, p, td, policy, pass, rejected, range);
}

} // namespace jitbmm
