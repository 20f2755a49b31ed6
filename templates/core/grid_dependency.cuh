// Programmatic dependent launch (sm_90 on): how a kernel waits for the kernel before it in its stream, and how it lets
// the next one be scheduled. Every generated unit's entry point waits first and lets the next kernel launch last
// (generator/emit_source.cpp), so no entry reads or writes anything before the kernels before it have finished.
// Launched with the dependency (runtime/launch.cpp), a kernel keeps the stream's order: only its launch, and its
// blocks' dispatch, overlap the end of the kernel before it. The next kernel is let in only once every block has done
// its work, not as each begins: blocks dispatched early would wait on whichever SMs had room then, and a grid of one
// wave, crowded onto some SMs, runs up to twice as long. The frame of each unit inlines this file; templates do not
// include it.
#pragma once

namespace jb {

// Returns once the grids this one depends on have finished and their writes are visible; at once where there are
// none (a launch without the dependency) and below sm_90, where there is no such launch.
__device__ __forceinline__ void wait_for_prior_grids() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the stream's next kernel be scheduled once every block of this grid has called this or ended.
__device__ __forceinline__ void let_dependent_grids_launch() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

} // namespace jb
