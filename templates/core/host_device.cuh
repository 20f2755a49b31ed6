// JB_HD: a function that both the kernels (NVRTC) and the host (the plans that size their launches) call, so that
// one definition serves both.
#pragma once

#if defined(__CUDACC__)
#define JB_HD __host__ __device__ __forceinline__
#else
#define JB_HD inline
#endif
