// The C ABI of the library as a whole: its version, the tables of semirings and dtypes, the tuning policy and the
// decisions' export and import, the scratch pool, the background builds and the disk cache.
#include <cstddef>
#include <optional>
#include <string>

#include "cache/disk_cache.hpp"
#include "jitbmm/c_api.h"
#include "jitbmm/plan.hpp"
#include "jitbmm/version.hpp"
#include "runtime/autotune.hpp"
#include "runtime/c_api_status.hpp"

using jitbmm::c_api::guarded;
using jitbmm::c_api::parsed;
using jitbmm::c_api::require;

namespace {

// The table rows the listing functions read; nullptr for an index outside the table.
const jitbmm::SemiringInfo* semiring_row(int index) {
  if (index < 0 || index >= jitbmm::semiring_count()) return nullptr;
  return &jitbmm::semiring_info(static_cast<jitbmm::Semiring>(index));
}
const jitbmm::DTypeInfo* dtype_row(int index) {
  if (index < 0 || index >= jitbmm::dtype_count()) return nullptr;
  return &jitbmm::dtype_info(static_cast<jitbmm::DType>(index));
}
static_assert(JITBMM_BACKWARD_MARGINAL == static_cast<int>(jitbmm::BackwardKind::marginal));
static_assert(JITBMM_BACKWARD_ARGMAX_SCATTER == static_cast<int>(jitbmm::BackwardKind::argmax_scatter));

} // namespace

extern "C" {

const char* jitbmm_version(void) { return jitbmm::kVersion; }

int jitbmm_semiring_count(void) { return jitbmm::semiring_count(); }
const char* jitbmm_semiring_name(int index) { return semiring_row(index) ? semiring_row(index)->name : nullptr; }
int jitbmm_semiring_has_argmax(int index) { return semiring_row(index) ? semiring_row(index)->has_argmax : -1; }
int jitbmm_semiring_backward(int index) {
  return semiring_row(index) ? static_cast<int>(semiring_row(index)->backward) : -1;
}
int jitbmm_dtype_count(void) { return jitbmm::dtype_count(); }
const char* jitbmm_dtype_name(int index) { return dtype_row(index) ? dtype_row(index)->name : nullptr; }
int jitbmm_dtype_size(int index) { return dtype_row(index) ? dtype_row(index)->size_bytes : -1; }

jitbmm_status jitbmm_release_pool_memory(void) {
  return guarded([] { jitbmm::release_pool_memory(); });
}

jitbmm_status jitbmm_wait_for_builds(void) {
  return guarded([] { jitbmm::wait_for_builds(); });
}

jitbmm_status jitbmm_set_tune_policy(const char* policy) {
  return guarded([&] {
    if (policy)
      jitbmm::set_tune_policy(parsed("policy", [&] { return jitbmm::parse_tune_policy(policy); }));
    else
      jitbmm::set_tune_policy(std::nullopt);
  });
}

jitbmm_status jitbmm_export_choices(const char** text) {
  return guarded([&] {
    require(text, "text");
    thread_local std::string exported;
    exported = jitbmm::export_choices();
    *text = exported.c_str();
  });
}

jitbmm_status jitbmm_import_choices(const char* text, size_t* stored) {
  return guarded([&] {
    require(text, "text");
    const std::size_t n = jitbmm::import_choices(text);
    if (stored) *stored = n;
  });
}

jitbmm_status jitbmm_cache_dir(const char** dir) {
  return guarded([&] {
    require(dir, "dir");
    const jitbmm::DiskCache* cache = jitbmm::DiskCache::process_cache();
    // Where the user's directory is refused, the trusted one serves alone: that is the one in use.
    const jitbmm::DiskCache* used = !cache || cache->usable() ? cache : cache->fallback();
    *dir = used ? used->dir().c_str() : "";
  });
}

} // extern "C"
