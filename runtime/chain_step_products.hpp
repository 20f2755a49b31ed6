// The variants of the stepped strategy's products (runtime/chain_stepped.hpp): a stored decision for the product's
// problem where one exists (`jitbmm tune` of that shape), else a rule fitted on the step shapes.
#pragma once

#include "jitbmm/plan.hpp"
#include "runtime/device.hpp"

namespace jitbmm {

// The plan of one of a chain's products on `stream` (nothing tuned: a chain plan tunes nothing unless asked, and
// `tune` says it is). The step products of an HMM's shared table are one wide product of every sequence's messages
// ([B × C] · [C × C]), where the products' own default (a bmm of many batches in mind) leaves most SMs idle: the
// rule takes smaller tiles there, and exp_matmul's tensor cores for log.
SemiringBMM step_product_plan(const Problem& problem, const DeviceInfo& device, bool tune, Stream stream);

} // namespace jitbmm
