// A log gradient pass by exp_matmul (exp_matmul/grad.cuh) as each of its launches sees it: the argument block in
// canonical form, its workspace typed, and a batch's scale of G.
#pragma once

#include "core/params.cuh"
#include "exp_matmul/grad_bounds.cuh"

namespace jb {

// The pass's argument block in canonical form: grad_a as it is; grad_b with a and b, M and N, and out's row and
// column exchanged (x = bᵀ, y = aᵀ). The gradient keeps x's layout: b's, transposed.
template <bool GA> __device__ __forceinline__ GradParams eg_canonical(const GradParams& p) {
  if (GA) return p;
  GradParams q = p;
  q.a = p.b, q.b = p.a;
  q.M = p.N, q.N = p.M;
  q.a_batch = p.b_batch, q.a_row = p.b_col, q.a_col = p.b_row;
  q.b_batch = p.a_batch, q.b_row = p.a_col, q.b_col = p.a_row;
  q.out_row = p.out_col, q.out_col = p.out_row;
  return q;
}

// The workspace, typed (eg_workspace), of a canonical argument block (ga: of grad_a).
template <class T> struct EgView {
  EgDims d;
  EgWorkspace w;
  EgBounds b;
  unsigned *gmax, *rowflag, *mask;
  T *acc, *r, *c, *h, *v;
};
template <class T> __device__ __forceinline__ EgView<T> eg_view(const GradParams& q, bool ga) {
  EgView<T> e;
  e.d = eg_dims(q.B, q.M, q.N, q.K, q.a_batch, q.b_batch, true); // q is canonical already
  e.d.ga = ga;
  e.w = eg_workspace(q.B, e.d, sizeof(T) == 8);
  e.b = eg_bounds(q.K, q.N, sizeof(T) == 8);
  char* base = static_cast<char*>(q.workspace);
  e.gmax = reinterpret_cast<unsigned*>(base + e.w.gmax);
  e.rowflag = reinterpret_cast<unsigned*>(base + e.w.rowflag);
  e.mask = reinterpret_cast<unsigned*>(base + e.w.mask);
  e.acc = reinterpret_cast<T*>(base + e.w.acc);
  e.r = reinterpret_cast<T*>(base + e.w.r);
  e.c = reinterpret_cast<T*>(base + e.w.c);
  e.h = reinterpret_cast<T*>(base + e.w.h);
  e.v = reinterpret_cast<T*>(base + e.w.v);
  return e;
}

// γ of batch z: its finite |G| are below 2^γ (0 when it has none; its H is then all 0).
template <class T> __device__ __forceinline__ int eg_batch_gamma(const EgView<T>& e, long long z) {
  int gamma = 0;
  const float g = __uint_as_float(e.gmax[z]);
  if (g > 0.f) frexpf(g, &gamma);
  return gamma;
}

} // namespace jb
