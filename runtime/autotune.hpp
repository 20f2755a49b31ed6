// The autotuner, for code that uses several of its parts (cli/, tests/, the plans): each part has its own header
// under runtime/tuner/ —
//   policy        when tuning may run ($JITBMM_TUNE, set_tune_policy)
//   search_space  the candidate specs for a problem, bounded by the device
//   tuning_db     stored decisions: keys, shape buckets, text, the disk cache's kind "tune"
//   trials        random inputs per pass, one launch of a candidate, the check against the CPU reference
//   autotune      compile in parallel, time (runtime/timing.hpp), rank, store the winner
//   family_model  what a new bucket of a tuned family times: the variants its family's timings predict best
//   choose        the choice cascade: stored decision, tuning, default
//   plan_with_choice  planning with the cascade's spec, and again without a stored one that fails to compile
//   shared_choices  one process's settled choices exported as text and imported elsewhere (every rank alike)
//   build_ahead   the kernels a first call will load, compiled all at once on the CPU pool
#pragma once

#include "runtime/tuner/autotune.hpp"     // IWYU pragma: export
#include "runtime/tuner/build_ahead.hpp"  // IWYU pragma: export
#include "runtime/tuner/choose.hpp"       // IWYU pragma: export
#include "runtime/tuner/family_model.hpp" // IWYU pragma: export
#include "runtime/tuner/plan_with_choice.hpp" // IWYU pragma: export
#include "runtime/tuner/policy.hpp"       // IWYU pragma: export
#include "runtime/tuner/search_space.hpp" // IWYU pragma: export
#include "runtime/tuner/shared_choices.hpp" // IWYU pragma: export
#include "runtime/tuner/trials.hpp"       // IWYU pragma: export
#include "runtime/tuner/tuning_db.hpp"    // IWYU pragma: export
