// The structured distributions' modules: a chain's expectations, samples and k best paths, generated from
// templates/chain/ beside the chain plan's own module (generator/chain_source.hpp), and the expectation semiring's
// product (templates/structured/).
#pragma once

#include "generator/emit_source.hpp"
#include "jitbmm/chain_problem.hpp"

namespace jitbmm {

// The expectation module for chains of C states (at most jb::kMaxExpectStates) whose inputs are
// `dtype` (templates/chain/expectation.cuh): the main entry the forward (log Z and E_p[F], saving the messages),
// "_beta" the backward messages, "_edges" the gradients. What entropy, cross-entropy and KL are computed from. Its
// forward and backward messages take a sequence a cluster of `cluster` blocks (a power of two up to
// jb::kMaxExpectCluster; more than 1 needs clusters, sm_90), jb::expect_threads(C, wide, cluster) threads each.
// `field`: what the field is (jb::ExpectField: given, a second chain q, or q read as the difference p − q). `hmm`:
// the HMM form's module (templates/chain/expect_hmm.cuh; its name ends "_hmm"), whose messages read the tables and
// whose gradients are "_nodes" (emissions and initial), "_transitions" and "_reduce" instead of "_edges".
GeneratedKernel emit_expect_kernel(DType dtype, int C, int cluster = 1, int field = 0, bool hmm = false);

// The sampling module for chains of C states whose inputs are `dtype` (templates/chain/samples.cuh), of either form
// (the rows it reads are given with their strides): its main entry draws paths backward from the chain plan's forward
// messages, a warp a path.
GeneratedKernel emit_sample_kernel(DType dtype, int C);

// The k-best module for chains of C states (at most jb::kMaxKBestStates) in the CRF form, or with `hmm` the HMM
// form, whose inputs are `dtype`, keeping k paths (1 to jb::kMaxKBest) a state (templates/chain/kbest.cuh): its main
// entry, a cluster of `cluster` blocks a sequence (as emit_expect_kernel's) of jb::kbest_threads(C, cluster) threads
// with jb::kbest_shared_bytes of dynamic shared memory each, writes the k best scores and paths.
GeneratedKernel emit_kbest_kernel(DType dtype, int C, int k, int cluster = 1, bool hmm = false);

// The blocks of a sequence's cluster in the expectation sweeps and the k best paths, for B chains of C states on a
// device whose clusters may take `cluster_sms` SMs (0: no clusters): 1 below 128 states, else doubling while the
// launch's clusters still fit at once.
int distribution_cluster(int64_t B, int C, int cluster_sms);

// The expectation (entropy) semiring's product of pairs in `dtype` (f32 or f64; templates/structured/
// entropy_product.cuh): the main entry the product, "_grad_a" and "_grad_b" its gradients, each a thread an element
// in blocks of jb::kEntropyTile² threads.
GeneratedKernel emit_entropy_product_kernel(DType dtype);

// The k-max semiring's product of k-vectors in `dtype` (f32 or f64), k from 1 to jb::kMaxKMax
// (templates/structured/kmax_product.cuh): its main entry, a thread an output in blocks of jb::kKMaxTile² threads,
// writes the k largest sums and where each came from.
GeneratedKernel emit_kmax_product_kernel(DType dtype, int k);

} // namespace jitbmm
