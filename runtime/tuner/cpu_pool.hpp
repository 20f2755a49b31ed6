// The tuner's CPU work spread over threads (NVRTC compilations, drawing the trial's random operands) so that the
// processes of one machine share its CPUs between them: a process tuning alone (the others waiting on its tuning
// lock) uses every CPU it may run on, and eight tuning at once do not start eight times as many threads as there are
// CPUs.
//
// How: the calling thread always works; each extra thread (up to usable_cpus() − 1, never more than the items) first
// takes one of the machine's CPU tokens in the cache directory (DiskCache::try_cpu_token, one per CPU; an flock, so
// a process that dies gives its tokens back), polling while items remain, and holds it until the items run out. So
// the processes sharing a cache directory run at most about (CPUs + processes) threads in all. Without a writable
// cache directory there are no tokens: the pool is this process's fair share, compile_threads().
#pragma once

#include <cstddef>
#include <functional>

namespace jitbmm {

class DiskCache;

// Calls work(i) once for every i < count, on this thread and the pool's; returns when all are done. The first
// exception work throws is rethrown here after the others have finished (items not yet started are skipped). The
// tokens are `tokens`' (the process's cache by default; null: none).
void for_each_on_cpus(std::size_t count, const std::function<void(std::size_t)>& work, DiskCache* tokens);
void for_each_on_cpus(std::size_t count, const std::function<void(std::size_t)>& work);

} // namespace jitbmm
