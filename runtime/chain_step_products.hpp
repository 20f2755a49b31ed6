// The variants of the stepped strategy's products (runtime/chain_stepped.hpp): a stored decision for the product's
// problem where one exists (`jitbmm tune` of that shape), else a rule fitted on the step shapes.
#pragma once

#include <vector>

#include "jitbmm/plan.hpp"
#include "runtime/device.hpp"

namespace jitbmm {

// The plan of one of a chain's products on `stream` (nothing tuned: a chain plan tunes nothing unless asked, and
// `tune` says it is). The step products of an HMM's shared table are one wide product of every sequence's messages
// ([B × C] · [C × C]), where the products' own default (a bmm of many batches in mind) leaves most SMs idle: the
// rule takes smaller tiles there, and exp_matmul's tensor cores for log.
// `quick`: the products' default variant in its family's smallest tile instead, whose kernel compiles fastest, and a
// quick build of it (a stand-in's, runtime/chain_stand_in.hpp).
SemiringBMM step_product_plan(const Problem& problem, const DeviceInfo& device, bool tune, Stream stream,
                              bool quick = false);
// The kernels step_product_plan(problem, device, tune, quick) loads, where they are known without tuning (for
// building them ahead with the chain's other kernels, runtime/tuner/build_ahead.hpp).
std::vector<KernelSpec> step_product_kernels(const Problem& problem, const DeviceInfo& device, bool tune,
                                             bool quick = false);

// The parts the log step product of `rows` sequences' messages and one shared table of `states` states (accumulated
// in `dtype`) sums its sources in: a power of two dividing the states (1: whole sums, as where wgmma is absent),
// each part a batch of the product [rows × states / parts] · [states / parts × states], so that a step of few output
// tiles still fills the GPU. The step adds the parts' results (templates/chain/steps.cuh). `passes` 2: the forward
// and the backward messages' steps are one product, their parts the batches of each in turn.
int64_t step_parts(int64_t rows, int64_t states, DType dtype, const DeviceInfo& device, int passes = 1);

} // namespace jitbmm
