// jitbmm's own stream-ordered memory pool, one per device: where a call takes its scratch memory (split-K partials,
// exp_matmul factors, backward accumulators) when the caller gives no Workspace.
//
// The device's default pool returns its memory to the driver at every synchronisation, so the next call maps it
// again, which costs a large problem's call about as much as a small kernel. This pool keeps what it has mapped for
// the next call (its release threshold is unlimited) until trim_pools() (the public release_pool_memory()) gives the
// unused part back.
#pragma once

#include <cstddef>

#include "runtime/device.hpp"

namespace jitbmm {

// `bytes` of device memory on `device`, usable by work on `stream` from this point of its order (during stream
// capture: owned by the graph). Throws CudaError naming the size when the pool cannot grow.
CUdeviceptr pool_allocate(const DeviceInfo& device, std::size_t bytes, CUstream stream);

// Returns an allocation to its pool once the work before this point on `stream` is done.
void pool_free(CUdeviceptr ptr, CUstream stream);

// Gives back to the driver the memory of every device's pool that no call is using (release_pool_memory()).
void trim_pools();

// The bytes all pools hold, in use or kept (Stats::pool_reserved_bytes).
std::size_t pool_reserved_bytes();

} // namespace jitbmm
