// The architecture features the device code may use, as the host's feature table gives them
// (generator/arch_features.cpp): each JB_HAS_* macro is a -D option of every compile (runtime/nvrtc_compiler.cpp),
// so no template asks __CUDA_ARCH__ which instructions it has, and a feature level compiles a GPU's kernels with an
// older architecture's code paths. Where a feature is absent, the template that would use it has an older
// equivalent with the same results, or no spec that needs it is compiled (generator/arch_features.hpp).
#pragma once

#if defined(__CUDA_ARCH__) &&                                                                                      \
    !(defined(JB_HAS_NAN_MINMAX) && defined(JB_HAS_HALF_PAIRS) && defined(JB_HAS_ASYNC_COPY) &&                    \
      defined(JB_HAS_MMA_TF32_BF16) && defined(JB_HAS_WGMMA) && defined(JB_HAS_CLUSTERS) && defined(JB_HAS_BULK_COPY))
#error "jitbmm's device code is compiled with its feature options (-DJB_HAS_*=0|1): compile it through jitbmm"
#endif
