// The C ABI of the products: problems, plans (jitbmm_plan wraps a SemiringBMM), their runs, backwards and
// workspaces, the structured semirings' products (jitbmm_entropy_product and jitbmm_kmax_product wrap an
// EntropyProduct and a KMaxProduct), and the CPU reference. Each call converts its C arguments and calls the C++ API (runtime/c_api_status).
#include <cstddef>
#include <string>

#include "jitbmm/c_api.h"
#include "jitbmm/entropy_product.hpp"
#include "jitbmm/kmax_product.hpp"
#include "jitbmm/plan.hpp"
#include "jitbmm/reference.hpp"
#include "runtime/c_api_status.hpp"

struct jitbmm_plan {
  jitbmm::SemiringBMM plan;
};

struct jitbmm_entropy_product {
  jitbmm::EntropyProduct plan;
};

struct jitbmm_kmax_product {
  jitbmm::KMaxProduct plan;
};

template <> struct jitbmm::c_api::IsHandle<jitbmm_plan> : std::true_type {};
template <> struct jitbmm::c_api::IsHandle<jitbmm_entropy_product> : std::true_type {};
template <> struct jitbmm::c_api::IsHandle<jitbmm_kmax_product> : std::true_type {};

using jitbmm::c_api::guarded;
using jitbmm::c_api::destroy;
using jitbmm::c_api::hand_out;
using jitbmm::c_api::parsed;
using jitbmm::c_api::require;

namespace {

jitbmm::Problem to_problem(const jitbmm_problem* c) {
  jitbmm::Problem p;
  jitbmm::c_api::read_semiring_and_dtype(c, p);
  if (c->out_dtype) p.out_dtype = parsed("problem.out_dtype", [&] { return jitbmm::parse_dtype(c->out_dtype); });
  p.shape = {c->B, c->M, c->K, c->N};
  p.a_strides = jitbmm::Strides{c->a_strides[0], c->a_strides[1], c->a_strides[2]};
  p.b_strides = jitbmm::Strides{c->b_strides[0], c->b_strides[1], c->b_strides[2]};
  p.out_strides = jitbmm::Strides{c->out_strides[0], c->out_strides[1], c->out_strides[2]};
  p.with_argmax = c->with_argmax != 0;
  if (c->precision) p.precision = jitbmm::parse_precision(c->precision);
  jitbmm::validate(p);
  return p;
}

} // namespace

extern "C" {

jitbmm_status jitbmm_problem_row_major(jitbmm_problem* problem, const char* semiring, const char* dtype, int64_t B,
                                       int64_t M, int64_t K, int64_t N) {
  return guarded([&] {
    require(problem, "problem");
    require(semiring, "semiring");
    require(dtype, "dtype");
    jitbmm::Problem p; // its default strides are the row-major ones: the rule is written once, there
    p.semiring = jitbmm::parse_semiring(semiring);
    p.dtype = jitbmm::parse_dtype(dtype);
    p.shape = {B, M, K, N};
    jitbmm::validate(p);
    jitbmm_problem c{};
    c.semiring = semiring;
    c.dtype = dtype;
    c.B = B, c.M = M, c.K = K, c.N = N;
    const jitbmm::Strides strides[3] = {p.a(), p.b(), p.out()};
    int64_t* fields[3] = {c.a_strides, c.b_strides, c.out_strides};
    for (int i = 0; i < 3; ++i)
      fields[i][0] = strides[i].batch, fields[i][1] = strides[i].row, fields[i][2] = strides[i].col;
    *problem = c;
  });
}

jitbmm_status jitbmm_plan_create(const jitbmm_problem* problem, jitbmm_plan** plan) {
  return guarded([&] {
    require(plan, "plan");
    *plan = nullptr;
    const jitbmm::Problem p = to_problem(problem);
    hand_out(new jitbmm_plan{jitbmm::SemiringBMM::get(p)}, plan);
  });
}

jitbmm_status jitbmm_plan_create_on_stream(const jitbmm_problem* problem, void* stream, jitbmm_plan** plan) {
  return guarded([&] {
    require(plan, "plan");
    *plan = nullptr;
    const jitbmm::Problem p = to_problem(problem);
    hand_out(new jitbmm_plan{jitbmm::SemiringBMM::get(p, static_cast<jitbmm::Stream>(stream))}, plan);
  });
}

jitbmm_status jitbmm_plan_prepare(const jitbmm_problem* problem, int grad_a, int grad_b) {
  return guarded([&] { jitbmm::SemiringBMM::prepare(to_problem(problem), grad_a != 0, grad_b != 0); });
}

jitbmm_status jitbmm_plan_run(const jitbmm_plan* plan, const void* a, const void* b, void* out, int32_t* argmax,
                              void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan(a, b, out, argmax, static_cast<jitbmm::Stream>(stream));
  });
}

jitbmm_status jitbmm_plan_backward(const jitbmm_plan* plan, const void* a, const void* b, const void* out,
                                   const int32_t* argmax, const void* grad_out, void* grad_a, void* grad_b,
                                   void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan.backward(a, b, out, argmax, grad_out, grad_a, grad_b, static_cast<jitbmm::Stream>(stream));
  });
}

jitbmm_status jitbmm_plan_workspace_bytes(const jitbmm_plan* plan, size_t* bytes) {
  return guarded([&] {
    require(plan, "plan");
    require(bytes, "bytes");
    *bytes = plan->plan.workspace_bytes();
  });
}

jitbmm_status jitbmm_plan_backward_workspace_bytes(const jitbmm_plan* plan, int grad_a, int grad_b, int argmax_given,
                                                   size_t* bytes) {
  return guarded([&] {
    require(plan, "plan");
    require(bytes, "bytes");
    *bytes = plan->plan.backward_workspace_bytes(grad_a != 0, grad_b != 0, argmax_given != 0);
  });
}

jitbmm_status jitbmm_plan_backward_workspace_bytes_on_stream(const jitbmm_plan* plan, int grad_a, int grad_b,
                                                             int argmax_given, void* stream, size_t* bytes) {
  return guarded([&] {
    require(plan, "plan");
    require(bytes, "bytes");
    *bytes = plan->plan.backward_workspace_bytes(grad_a != 0, grad_b != 0, argmax_given != 0,
                                                 static_cast<jitbmm::Stream>(stream));
  });
}

jitbmm_status jitbmm_plan_run_with_workspace(const jitbmm_plan* plan, const void* a, const void* b, void* out,
                                             int32_t* argmax, void* workspace, size_t workspace_bytes, void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan(a, b, out, argmax, static_cast<jitbmm::Stream>(stream), jitbmm::Workspace{workspace, workspace_bytes});
  });
}

jitbmm_status jitbmm_plan_backward_with_workspace(const jitbmm_plan* plan, const void* a, const void* b,
                                                  const void* out, const int32_t* argmax, const void* grad_out,
                                                  void* grad_a, void* grad_b, void* workspace, size_t workspace_bytes,
                                                  void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan.backward(a, b, out, argmax, grad_out, grad_a, grad_b, static_cast<jitbmm::Stream>(stream),
                        jitbmm::Workspace{workspace, workspace_bytes});
  });
}

jitbmm_status jitbmm_plan_kernel_name(const jitbmm_plan* plan, const char** name) {
  return guarded([&] {
    require(plan, "plan");
    require(name, "name");
    *name = plan->plan.kernel_name().c_str();
  });
}

jitbmm_status jitbmm_plan_settled(const jitbmm_plan* plan, int* settled) {
  return guarded([&] {
    require(plan, "plan");
    require(settled, "settled");
    *settled = plan->plan.settled() ? 1 : 0;
  });
}

void jitbmm_plan_destroy(jitbmm_plan* plan) { destroy(plan); }

jitbmm_status jitbmm_reference(const jitbmm_problem* problem, const void* a, const void* b, double* out,
                               int32_t* argmax) {
  return guarded([&] {
    const jitbmm::Problem p = to_problem(problem);
    const bool empty = p.shape.B == 0 || p.shape.M == 0 || p.shape.N == 0; // no product: B*M may overflow
    if (!empty) require(out, "out");
    if (!empty && p.shape.K > 0) {
      require(a, "a");
      require(b, "b");
    }
    const auto elements = jitbmm::reference::compute(p, a, b);
    for (std::size_t i = 0; i < elements.size(); ++i) {
      out[i] = elements[i].value;
      if (argmax) argmax[i] = elements[i].argmax;
    }
  });
}

jitbmm_status jitbmm_entropy_product_create(const char* dtype, int64_t B, int64_t M, int64_t K, int64_t N,
                                            jitbmm_entropy_product** plan) {
  return guarded([&] {
    require(plan, "plan");
    *plan = nullptr;
    require(dtype, "dtype");
    hand_out(new jitbmm_entropy_product{jitbmm::EntropyProduct::get(jitbmm::parse_dtype(dtype), B, M, K, N)}, plan);
  });
}

jitbmm_status jitbmm_entropy_product_run(const jitbmm_entropy_product* plan, const void* a, const void* b, void* out,
                                         void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan(a, b, out, static_cast<jitbmm::Stream>(stream));
  });
}

jitbmm_status jitbmm_entropy_product_backward(const jitbmm_entropy_product* plan, const void* a, const void* b,
                                              const void* out, const void* grad_out, void* grad_a, void* grad_b,
                                              void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan.backward(a, b, out, grad_out, grad_a, grad_b, static_cast<jitbmm::Stream>(stream));
  });
}

void jitbmm_entropy_product_destroy(jitbmm_entropy_product* plan) { destroy(plan); }

jitbmm_status jitbmm_kmax_product_create(const char* dtype, int k, int64_t B, int64_t M, int64_t K, int64_t N,
                                         jitbmm_kmax_product** plan) {
  return guarded([&] {
    require(plan, "plan");
    *plan = nullptr;
    require(dtype, "dtype");
    hand_out(new jitbmm_kmax_product{jitbmm::KMaxProduct::get(jitbmm::parse_dtype(dtype), k, B, M, K, N)}, plan);
  });
}

jitbmm_status jitbmm_kmax_product_run(const jitbmm_kmax_product* plan, const void* a, const void* b, void* out,
                                      int32_t* index, void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan(a, b, out, index, static_cast<jitbmm::Stream>(stream));
  });
}

void jitbmm_kmax_product_destroy(jitbmm_kmax_product* plan) { destroy(plan); }

} // extern "C"
