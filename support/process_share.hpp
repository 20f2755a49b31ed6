// This process's place among the processes a launcher started on the machine (torchrun and others that set RANK,
// LOCAL_RANK and LOCAL_WORLD_SIZE), and its share of the CPUs: what the tuner needs so that 8 ranks tuning at once do
// not start 8 × all-cores NVRTC threads, and so that one machine's progress is printed once.
//
// A variable that is absent, or not a whole number in range, counts as absent (one warning for a malformed one):
// these belong to the launcher, and jitbmm runs on without them.
#pragma once

#include <optional>
#include <string>

namespace jitbmm {

std::optional<int> global_rank(); // $RANK
std::optional<int> local_rank();  // $LOCAL_RANK
int local_world_size();           // $LOCAL_WORLD_SIZE, else 1

// Whether this process prints progress for the machine: no launcher, or local rank 0.
bool is_local_leader();

// "rank 3" under a launcher ($RANK, else $LOCAL_RANK), else "": the tag that jitbmm's messages carry.
std::string rank_tag();

// The CPUs this process may run on: its affinity mask when a launcher narrowed it, else the machine's; at least 1.
unsigned usable_cpus();

// This process's fair share of them: usable_cpus() when a launcher narrowed the mask, else the machine's CPUs divided
// among the local processes ($LOCAL_WORLD_SIZE); at least 1. What the tuner's pools use when they cannot coordinate
// with the other processes (runtime/tuner/cpu_pool.hpp).
unsigned compile_threads();

} // namespace jitbmm
