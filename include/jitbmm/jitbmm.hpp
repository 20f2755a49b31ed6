// jitbmm: batched semiring matrix products with kernels generated, compiled (NVRTC) and loaded at run time.
#pragma once

#include "jitbmm/chain.hpp"
#include "jitbmm/chain_expectation.hpp"
#include "jitbmm/chain_kbest.hpp"
#include "jitbmm/chain_samples.hpp"
#include "jitbmm/entropy_product.hpp"
#include "jitbmm/kmax_product.hpp"
#include "jitbmm/chain_problem.hpp"
#include "jitbmm/errors.hpp"
#include "jitbmm/kernel_spec.hpp"
#include "jitbmm/plan.hpp"
#include "jitbmm/reference.hpp"
#include "jitbmm/types.hpp"
#include "jitbmm/version.hpp"
