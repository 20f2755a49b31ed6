// The argument block of the chunked strategy's kernels (templates/chain/chunks.cuh). Plain C++ with no device code,
// so the host (runtime/chain_chunked.cpp) includes this same file.
#pragma once

namespace jb {

// A chain's T − 1 steps cut into `chunks` chunks of L steps per sequence (the last one filled with the semiring's
// identity), numbered b·chunks + k. The HMM form (emissions not null) reads potentials[b][t][c][p] as
// transitions[c][p] (s_t = 0) plus emissions[b][t + 1][c]; with fold_first (log, whose chain of chunks starts from
// messages of 0) step 0 adds initial[p] + emissions[b][0][p] as well. A call covers the `count` chunks from `first` on (the main entry, chunk_pad;
// "_unpad", "_offsets"), or `count` matrices [C][C] ("_normalize", "_restore"). Every matrix of a chunk's tree is kept
// relative to its largest entry, its shift: a product of many steps grows with their number, and its terms would round
// by that size.
struct ChunkParams {
  const void* potentials;   // storage type, by s_b, s_t, s_c, s_p (potentials[b][t][c][p])
  const long long* lengths; // [B], each in [1, T], or null
  void* matrices;           // accumulator type, [count][C][C] (the tree's level 0 for chunk_pad, grad's for "_unpad")
  void* shifts;             // accumulator type, one per matrix: its largest entry, subtracted where finite (else 0)
  double* offsets;          // [B][chunks]: the shifts of a chunk's whole tree, summed
  void* score;              // "_score": [B], the accumulator type
  const void* grad_score;   // "_unpad": [B], the accumulator type
  void* grad;               // "_unpad": [B][T − 1][C][C] contiguous, storage type
  const void* emissions;    // the HMM form: [B][T][C] by e_b, e_t, e_c, or null (the CRF form)
  const void* initial;      // the HMM form: [C] or [B][C] by i_b, i_c
  // max_plus (templates/chain/chunk_viterbi.cuh): every chunk's first messages, rel [B][chunks + 1][C] (accumulator
  // type) relative to their largest, taken out into starts [B][chunks + 1]; with a path, back-pointers back [B][T][C],
  // each chunk's map from the states of its last position to those of its first, ends [B·chunks][C], and path
  // [B][T] (int32, the caller's).
  void* rel;
  double* starts;
  unsigned short* back;
  unsigned short* ends;
  int* path;
  // The HMM form's log backward (templates/chain/chunk_hmm.cuh): grad (the transitions', [B][C][C] with
  // batched_transitions, else [C][C]), grad_emissions [B][T][C] and grad_initial ([B][C] with batched_initial, else
  // [C]), contiguous, in the storage type, each null when not asked for; partials [count][C][C] (each chunk's sum of its
  // steps' gradients) and sums (the transitions' [groups][C][C], then the initial table's [groups][C]) in the
  // accumulator type.
  void* grad_emissions;
  void* grad_initial;
  void* partials;
  void* sums;
  int fold_first, batched_transitions, batched_initial;
  long long B, T, L, chunks, first, count;
  long long s_b, s_t, s_c, s_p;
  long long e_b, e_t, e_c, i_b, i_c;
  int levels; // "_offsets": the tree's levels above the steps (log2 L); shifts holds them all, level by level
};

} // namespace jb
