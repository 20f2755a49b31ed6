// The argument block of the k-best kernel (templates/chain/kbest.cuh), and the shape of its block. Plain C++ with no
// device code, so the host (runtime/chain_kbest.cpp) includes this same file.
#pragma once

#include "core/host_device.cuh"

namespace jb {

// The k best paths of B chains of T positions over C states: in the CRF form, potentials contiguous [B][T − 1][C][C]
// in the storage type, index order (to, from); in the HMM form (the kernel's HMM instance), its tables in the storage
// type at element strides (b, t, c) for emissions, (b, to, from) for transitions and (b, c) for initial, a shared
// table's b stride 0. scores [B][k] in the accumulator type, paths [B][k][T] (int32); back [B][T − 1][C][k] (int32),
// scratch: where each kept path of each (position, state) came from.
struct KBestParams {
  const void* potentials;   // the CRF form's potentials, the HMM form's transitions
  const long long* lengths; // [B], each in [1, T], or null
  void* scores;
  int* paths;
  int* back;
  long long B, T;
  const void* emissions; // the HMM form's
  const void* initial;
  long long emission_strides[3], transition_strides[3], initial_strides[2];
};

// The most paths a kernel keeps per (position, state), and the most states: a lane holds its sources' potentials and
// rank heads in registers, up to 32 of each at 1,024 states; the most blocks a sequence's cluster takes.
enum KBestLimits : int { kMaxKBest = 16, kMaxKBestStates = 1024, kMaxKBestCluster = 8 };

// The lanes that choose one target state's paths (a power of two, 4 to 32): about four sources a lane, so that a
// lane's winner is found again in a few reads once it has been taken.
JB_HD constexpr int kbest_lanes(int states) { return states >= 128 ? 32 : states >= 64 ? 16 : states >= 32 ? 8 : 4; }
// Threads of a block (a multiple of 32 and of the lanes): every target state of the block's share of a step (a
// cluster's blocks split the states) at once where that fits 1,024 threads, fewer where a lane holds many sources'
// potentials and rank heads in registers.
JB_HD constexpr int kbest_threads(int states, int cluster = 1) {
  const int most = states > 512 ? 256 : states > 256 ? 512 : 1024;
  const int all = ((states + cluster - 1) / cluster * kbest_lanes(states) + 31) / 32 * 32;
  return all > most ? most : all < 64 ? 64 : all;
}
// Dynamic shared memory of a block (all it has): two positions' lists of k scores a state in the accumulator type,
// then the k best paths' last entries.
JB_HD constexpr unsigned kbest_shared_bytes(int states, int k, int acc_bytes) {
  return 2u * unsigned(states) * unsigned(k) * unsigned(acc_bytes) + 4u * unsigned(k);
}

} // namespace jb
