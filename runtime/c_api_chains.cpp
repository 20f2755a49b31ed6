// The C ABI of the chains: chain problems, chain plans (jitbmm_chain_plan wraps a ChainPlan), their runs in the
// CRF and HMM forms, backwards and workspaces, and the chain distributions (jitbmm_chain_expectation,
// jitbmm_chain_sampler and jitbmm_chain_kbest wrap ChainExpectation, ChainSampler and ChainKBest). Each call converts
// its C arguments and calls the C++ API (runtime/c_api_status).
#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include "jitbmm/c_api.h"
#include "jitbmm/chain.hpp"
#include "jitbmm/chain_expectation.hpp"
#include "jitbmm/chain_kbest.hpp"
#include "jitbmm/chain_samples.hpp"
#include "runtime/c_api_status.hpp"
#include "runtime/chain_plan.hpp"

struct jitbmm_chain_plan {
  jitbmm::ChainPlan plan;
  // What jitbmm_chain_plan_kernel_name points into: every name the plan has given (a stand-in's, then its chosen
  // strategy's), each valid while the plan lives.
  mutable std::mutex mutex;
  mutable std::set<std::string> kernel_names;
};

struct jitbmm_chain_expectation {
  jitbmm::ChainExpectation plan;
};

struct jitbmm_chain_sampler {
  jitbmm::ChainSampler plan;
};

struct jitbmm_chain_kbest {
  jitbmm::ChainKBest plan;
};

template <> struct jitbmm::c_api::IsHandle<jitbmm_chain_plan> : std::true_type {};
template <> struct jitbmm::c_api::IsHandle<jitbmm_chain_expectation> : std::true_type {};
template <> struct jitbmm::c_api::IsHandle<jitbmm_chain_sampler> : std::true_type {};
template <> struct jitbmm::c_api::IsHandle<jitbmm_chain_kbest> : std::true_type {};

using jitbmm::c_api::destroy;
using jitbmm::c_api::guarded;
using jitbmm::c_api::hand_out;
using jitbmm::c_api::require;

static_assert(JITBMM_MAX_CHAIN_STATES == jitbmm::kMaxChainStates, "the C ABI's chain state limit is the C++ one");

namespace {

jitbmm::ChainProblem to_chain_problem(const jitbmm_chain_problem* c) {
  jitbmm::ChainProblem p;
  jitbmm::c_api::read_semiring_and_dtype(c, p);
  p.B = c->B, p.T = c->T, p.C = c->C;
  for (int i = 0; i < 4; ++i) p.strides[i] = c->strides[i];
  p.with_lengths = c->with_lengths != 0;
  if (c->form && std::strcmp(c->form, "hmm") == 0)
    p.form = jitbmm::ChainForm::hmm;
  else if (c->form && std::strcmp(c->form, "crf") != 0)
    throw std::invalid_argument(std::string("problem.form: '") + c->form + "' (expected crf or hmm)");
  p.batched_transitions = c->batched_transitions != 0;
  p.batched_initial = c->batched_initial != 0;
  for (int i = 0; i < 3; ++i) p.emission_strides[i] = c->emission_strides[i];
  for (int i = 0; i < 3; ++i) p.transition_strides[i] = c->transition_strides[i];
  for (int i = 0; i < 2; ++i) p.initial_strides[i] = c->initial_strides[i];
  jitbmm::check_chain_problem(p);
  return p;
}

} // namespace

extern "C" {

jitbmm_status jitbmm_chain_plan_create(const jitbmm_chain_problem* problem, jitbmm_chain_plan** plan) {
  return guarded([&] {
    require(plan, "plan");
    *plan = nullptr;
    const jitbmm::ChainProblem p = to_chain_problem(problem);
    const jitbmm::ChainPlan chain = jitbmm::ChainPlan::get(p);
    hand_out(new jitbmm_chain_plan{chain, {}, {}}, plan);
  });
}

jitbmm_status jitbmm_chain_plan_saved_bytes(const jitbmm_chain_plan* plan, size_t* bytes) {
  return guarded([&] {
    require(plan, "plan");
    require(bytes, "bytes");
    *bytes = plan->plan.saved_bytes();
  });
}

jitbmm_status jitbmm_chain_problem_saved_bytes(const jitbmm_chain_problem* problem, size_t* bytes) {
  return guarded([&] {
    require(bytes, "bytes");
    *bytes = jitbmm::chain_saved_bytes(to_chain_problem(problem));
  });
}

jitbmm_status jitbmm_chain_plan_workspace_bytes(const jitbmm_chain_plan* plan, int with_path, size_t* bytes) {
  return guarded([&] {
    require(plan, "plan");
    require(bytes, "bytes");
    *bytes = plan->plan.workspace_bytes(with_path != 0);
  });
}

jitbmm_status jitbmm_chain_plan_run(const jitbmm_chain_plan* plan, const void* potentials, const int64_t* lengths,
                                    void* score, void* saved, void* alpha, int32_t* path, void* workspace,
                                    size_t workspace_bytes, void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan(potentials, lengths, score, saved, alpha, path, static_cast<jitbmm::Stream>(stream),
               jitbmm::Workspace{workspace, workspace_bytes});
  });
}

jitbmm_status jitbmm_chain_plan_backward(const jitbmm_chain_plan* plan, const void* potentials, const int64_t* lengths,
                                         const void* saved, const int32_t* path, const void* grad_score,
                                         void* grad_potentials, void* stream) {
  return jitbmm_chain_plan_backward_with_workspace(plan, potentials, lengths, saved, path, grad_score, grad_potentials,
                                                   nullptr, 0, stream);
}

jitbmm_status jitbmm_chain_plan_backward_with_workspace(const jitbmm_chain_plan* plan, const void* potentials,
                                                        const int64_t* lengths, const void* saved, const int32_t* path,
                                                        const void* grad_score, void* grad_potentials, void* workspace,
                                                        size_t workspace_bytes, void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan.backward(potentials, lengths, saved, path, grad_score, grad_potentials,
                        static_cast<jitbmm::Stream>(stream), jitbmm::Workspace{workspace, workspace_bytes});
  });
}

jitbmm_status jitbmm_chain_plan_run_hmm(const jitbmm_chain_plan* plan, const void* emissions, const void* transitions,
                                        const void* initial, const int64_t* lengths, void* score, void* saved,
                                        void* alpha, int32_t* path, void* workspace, size_t workspace_bytes,
                                        void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan(jitbmm::HmmInputs{emissions, transitions, initial}, lengths, score, saved, alpha, path,
               static_cast<jitbmm::Stream>(stream), jitbmm::Workspace{workspace, workspace_bytes});
  });
}

jitbmm_status jitbmm_chain_plan_backward_workspace_bytes(const jitbmm_chain_plan* plan, size_t* bytes) {
  return guarded([&] {
    require(plan, "plan");
    require(bytes, "bytes");
    *bytes = plan->plan.backward_workspace_bytes();
  });
}

jitbmm_status jitbmm_chain_plan_backward_hmm(const jitbmm_chain_plan* plan, const void* emissions,
                                             const void* transitions, const void* initial, const int64_t* lengths,
                                             const void* saved, const int32_t* path, const void* grad_score,
                                             void* grad_emissions, void* grad_transitions, void* grad_initial,
                                             void* workspace, size_t workspace_bytes, void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan.backward(jitbmm::HmmInputs{emissions, transitions, initial}, lengths, saved, path, grad_score,
                        jitbmm::HmmGradients{grad_emissions, grad_transitions, grad_initial},
                        static_cast<jitbmm::Stream>(stream), jitbmm::Workspace{workspace, workspace_bytes});
  });
}

jitbmm_status jitbmm_chain_plan_kernel_name(const jitbmm_chain_plan* plan, const char** name) {
  return guarded([&] {
    require(plan, "plan");
    require(name, "name");
    std::lock_guard<std::mutex> lock(plan->mutex);
    *name = plan->kernel_names.insert(plan->plan.kernel_name()).first->c_str();
  });
}

jitbmm_status jitbmm_chain_plan_strategy(const jitbmm_chain_plan* plan, const char** strategy) {
  return guarded([&] {
    require(plan, "plan");
    require(strategy, "strategy");
    *strategy = plan->plan.strategy();
  });
}

jitbmm_status jitbmm_chain_plan_settled(const jitbmm_chain_plan* plan, int* settled) {
  return guarded([&] {
    require(plan, "plan");
    require(settled, "settled");
    *settled = plan->plan.settled() ? 1 : 0;
  });
}

void jitbmm_chain_plan_destroy(jitbmm_chain_plan* plan) { destroy(plan); }

jitbmm_status jitbmm_chain_expectation_create(const jitbmm_chain_problem* problem, int field,
                                              jitbmm_chain_expectation** plan) {
  return guarded([&] {
    require(plan, "plan");
    *plan = nullptr;
    hand_out(new jitbmm_chain_expectation{jitbmm::ChainExpectation::get(to_chain_problem(problem),
                                                                        static_cast<jitbmm::ExpectationField>(field))},
             plan);
  });
}

jitbmm_status jitbmm_chain_expectation_bytes(const jitbmm_chain_expectation* plan, size_t* saved_bytes,
                                             size_t* backward_workspace_bytes) {
  return guarded([&] {
    require(plan, "plan");
    require(saved_bytes, "saved_bytes");
    require(backward_workspace_bytes, "backward_workspace_bytes");
    *saved_bytes = plan->plan.saved_bytes();
    *backward_workspace_bytes = plan->plan.backward_workspace_bytes();
  });
}

jitbmm_status jitbmm_chain_expectation_saved_bytes(const jitbmm_chain_problem* problem, int field, size_t* bytes) {
  return guarded([&] {
    require(bytes, "bytes");
    *bytes =
        jitbmm::ChainExpectation::saved_bytes(to_chain_problem(problem), static_cast<jitbmm::ExpectationField>(field));
  });
}

jitbmm_status jitbmm_chain_expectation_run(const jitbmm_chain_expectation* plan, const void* potentials,
                                           const void* field, const int64_t* lengths, void* log_z, void* mean,
                                           void* saved, void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan(potentials, field, lengths, log_z, mean, saved, static_cast<jitbmm::Stream>(stream));
  });
}

jitbmm_status jitbmm_chain_expectation_backward(const jitbmm_chain_expectation* plan, const void* potentials,
                                                const void* field, const int64_t* lengths, const void* saved,
                                                const void* log_z, const void* mean, const void* grad_log_z,
                                                const void* grad_mean, void* grad_potentials, void* grad_field,
                                                void* workspace, size_t workspace_bytes, void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan.backward(potentials, field, lengths, saved, log_z, mean, grad_log_z, grad_mean, grad_potentials,
                        grad_field, static_cast<jitbmm::Stream>(stream), jitbmm::Workspace{workspace, workspace_bytes});
  });
}

namespace {

jitbmm::HmmInputs tables_of(const jitbmm_hmm_tables* t, const char* name) {
  require(t, name);
  return {t->emissions, t->transitions, t->initial};
}

jitbmm::HmmGradients gradients_of(const jitbmm_hmm_gradients* g) {
  return g ? jitbmm::HmmGradients{g->emissions, g->transitions, g->initial} : jitbmm::HmmGradients{};
}

} // namespace

jitbmm_status jitbmm_chain_expectation_run_hmm(const jitbmm_chain_expectation* plan, const jitbmm_hmm_tables* hmm,
                                               const jitbmm_hmm_tables* field, const int64_t* lengths, void* log_z,
                                               void* mean, void* saved, void* stream) {
  return guarded([&] {
    require(plan, "plan");
    const jitbmm::HmmInputs p = tables_of(hmm, "hmm"), f = tables_of(field, "field"); // named in this order
    plan->plan(p, f, lengths, log_z, mean, saved, static_cast<jitbmm::Stream>(stream));
  });
}

jitbmm_status jitbmm_chain_expectation_backward_hmm(const jitbmm_chain_expectation* plan, const jitbmm_hmm_tables* hmm,
                                                    const jitbmm_hmm_tables* field, const int64_t* lengths,
                                                    const void* saved, const void* log_z, const void* mean,
                                                    const void* grad_log_z, const void* grad_mean,
                                                    const jitbmm_hmm_gradients* grad_hmm,
                                                    const jitbmm_hmm_gradients* grad_field, void* workspace,
                                                    size_t workspace_bytes, void* stream) {
  return guarded([&] {
    require(plan, "plan");
    const jitbmm::HmmInputs p = tables_of(hmm, "hmm"), f = tables_of(field, "field"); // named in this order
    plan->plan.backward(p, f, lengths, saved, log_z, mean, grad_log_z, grad_mean, gradients_of(grad_hmm),
                        gradients_of(grad_field), static_cast<jitbmm::Stream>(stream),
                        jitbmm::Workspace{workspace, workspace_bytes});
  });
}

void jitbmm_chain_expectation_destroy(jitbmm_chain_expectation* plan) { destroy(plan); }

jitbmm_status jitbmm_chain_sampler_create(const jitbmm_chain_problem* problem, jitbmm_chain_sampler** plan) {
  return guarded([&] {
    require(plan, "plan");
    *plan = nullptr;
    hand_out(new jitbmm_chain_sampler{jitbmm::ChainSampler::get(to_chain_problem(problem))}, plan);
  });
}

jitbmm_status jitbmm_chain_sampler_workspace_bytes(const jitbmm_chain_sampler* plan, size_t* bytes) {
  return guarded([&] {
    require(plan, "plan");
    require(bytes, "bytes");
    *bytes = plan->plan.workspace_bytes();
  });
}

jitbmm_status jitbmm_chain_sampler_run(const jitbmm_chain_sampler* plan, const void* potentials, const int64_t* lengths,
                                       int64_t n, uint64_t seed, int32_t* paths, void* workspace,
                                       size_t workspace_bytes, void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan(potentials, lengths, n, seed, paths, static_cast<jitbmm::Stream>(stream),
               jitbmm::Workspace{workspace, workspace_bytes});
  });
}

jitbmm_status jitbmm_chain_sampler_run_device_seed(const jitbmm_chain_sampler* plan, const void* potentials,
                                                   const int64_t* lengths, int64_t n, const uint64_t* seed,
                                                   int32_t* paths, void* workspace, size_t workspace_bytes,
                                                   void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan.with_device_seed(potentials, lengths, n, seed, paths, static_cast<jitbmm::Stream>(stream),
                                jitbmm::Workspace{workspace, workspace_bytes});
  });
}

jitbmm_status jitbmm_chain_sampler_run_hmm(const jitbmm_chain_sampler* plan, const void* emissions,
                                           const void* transitions, const void* initial, const int64_t* lengths,
                                           int64_t n, uint64_t seed, int32_t* paths, void* workspace,
                                           size_t workspace_bytes, void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan(jitbmm::HmmInputs{emissions, transitions, initial}, lengths, n, seed, paths,
               static_cast<jitbmm::Stream>(stream), jitbmm::Workspace{workspace, workspace_bytes});
  });
}

jitbmm_status jitbmm_chain_sampler_run_hmm_device_seed(const jitbmm_chain_sampler* plan, const void* emissions,
                                                       const void* transitions, const void* initial,
                                                       const int64_t* lengths, int64_t n, const uint64_t* seed,
                                                       int32_t* paths, void* workspace, size_t workspace_bytes,
                                                       void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan.with_device_seed(jitbmm::HmmInputs{emissions, transitions, initial}, lengths, n, seed, paths,
                                static_cast<jitbmm::Stream>(stream), jitbmm::Workspace{workspace, workspace_bytes});
  });
}

void jitbmm_chain_sampler_destroy(jitbmm_chain_sampler* plan) { destroy(plan); }

jitbmm_status jitbmm_chain_kbest_create(const jitbmm_chain_problem* problem, int k, jitbmm_chain_kbest** plan) {
  return guarded([&] {
    require(plan, "plan");
    *plan = nullptr;
    hand_out(new jitbmm_chain_kbest{jitbmm::ChainKBest::get(to_chain_problem(problem), k)}, plan);
  });
}

jitbmm_status jitbmm_chain_kbest_workspace_bytes(const jitbmm_chain_kbest* plan, size_t* bytes) {
  return guarded([&] {
    require(plan, "plan");
    require(bytes, "bytes");
    *bytes = plan->plan.workspace_bytes();
  });
}

jitbmm_status jitbmm_chain_kbest_run(const jitbmm_chain_kbest* plan, const void* potentials, const int64_t* lengths,
                                     void* scores, int32_t* paths, void* workspace, size_t workspace_bytes,
                                     void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan(potentials, lengths, scores, paths, static_cast<jitbmm::Stream>(stream),
               jitbmm::Workspace{workspace, workspace_bytes});
  });
}

jitbmm_status jitbmm_chain_kbest_run_hmm(const jitbmm_chain_kbest* plan, const void* emissions, const void* transitions,
                                         const void* initial, const int64_t* lengths, void* scores, int32_t* paths,
                                         void* workspace, size_t workspace_bytes, void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan(jitbmm::HmmInputs{emissions, transitions, initial}, lengths, scores, paths,
               static_cast<jitbmm::Stream>(stream), jitbmm::Workspace{workspace, workspace_bytes});
  });
}

void jitbmm_chain_kbest_destroy(jitbmm_chain_kbest* plan) { destroy(plan); }

} // extern "C"
