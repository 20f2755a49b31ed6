// The "_edges" blocks' moves of consecutive values (templates/chain/hmm_edges.cuh): vector loads and stores of
// shared and global memory, and the staging loop that keeps several loads in flight.
#pragma once

#include "core/host_device.cuh"

namespace jb {

// The loads a thread of "_edges" keeps in flight while staging a batch of steps' messages without cp.async.
enum EdgeLoads : int { kEdgeLoads = 4 };

// V consecutive values of T, moved as one load or store of V · sizeof(T) bytes (at most 16): a step's messages are
// staged, and its factors read, a vector at a time rather than a value at a time, which would spend more instructions
// on addresses than on the sums.
template <class T, int V> struct EdgeVec { T v[V]; };
template <class T, int V> struct EdgeWord;
template <> struct EdgeWord<float, 1> { using type = float; };
template <> struct EdgeWord<float, 2> { using type = float2; };
template <> struct EdgeWord<float, 4> { using type = float4; };
template <> struct EdgeWord<double, 1> { using type = double; };
template <> struct EdgeWord<double, 2> { using type = double2; };
// The widest such vector of T whose length divides n.
template <class T> JB_HD constexpr int edge_width(int n) {
  return sizeof(T) == 4 && n % 4 == 0 ? 4 : sizeof(T) <= 8 && n % 2 == 0 ? 2 : 1;
}
// The V values at `at` (aligned to V · sizeof(T) bytes).
template <class T, int V> __device__ __forceinline__ EdgeVec<T, V> edge_load(const T* at) {
  using W = typename EdgeWord<T, V>::type;
  const W w = *reinterpret_cast<const W*>(at);
  EdgeVec<T, V> r;
  if constexpr (V == 1) {
    r.v[0] = w;
  } else if constexpr (V == 2) {
    r.v[0] = w.x, r.v[1] = w.y;
  } else {
    r.v[0] = w.x, r.v[1] = w.y, r.v[2] = w.z, r.v[3] = w.w;
  }
  return r;
}
template <class T, int V> __device__ __forceinline__ void edge_store(T* at, const EdgeVec<T, V>& r) {
  using W = typename EdgeWord<T, V>::type;
  W w;
  if constexpr (V == 1) {
    w = r.v[0];
  } else if constexpr (V == 2) {
    w.x = r.v[0], w.y = r.v[1];
  } else {
    w.x = r.v[0], w.y = r.v[1], w.z = r.v[2], w.w = r.v[3];
  }
  *reinterpret_cast<W*>(at) = w;
}
// N consecutive values at `at` (aligned to the widest vector whose length divides N) into v.
template <class T, int N> __device__ __forceinline__ void edge_read(const T* at, T (&v)[N]) {
  constexpr int V = edge_width<T>(N);
#pragma unroll
  for (int k = 0; k < N; k += V) {
    const EdgeVec<T, V> w = edge_load<T, V>(at + k);
#pragma unroll
    for (int j = 0; j < V; ++j) v[k + j] = w.v[j];
  }
}

// Items 0 to count − 1 into shared memory, store(x, load(x)), by a block of NT threads with kEdgeLoads loads a thread
// in flight before any is stored (a store waits for its load); a clamped index keeps the loads unconditional and in
// range.
template <int NT, class Load, class Store>
__device__ __forceinline__ void edge_stage(int count, Load load, Store store) {
  for (int x0 = threadIdx.x; x0 < count; x0 += kEdgeLoads * NT) {
    decltype(load(0)) v[kEdgeLoads];
#pragma unroll
    for (int k = 0; k < kEdgeLoads; ++k) v[k] = load(x0 + k * NT < count ? x0 + k * NT : count - 1);
#pragma unroll
    for (int k = 0; k < kEdgeLoads; ++k)
      if (x0 + k * NT < count) store(x0 + k * NT, v[k]);
  }
}

} // namespace jb
