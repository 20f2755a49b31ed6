#include "runtime/device_pool.hpp"

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace jitbmm {
namespace {

std::mutex g_pools_mutex;
std::unordered_map<CUdevice, CUmemoryPool>& pools() {
  static auto* p = new std::unordered_map<CUdevice, CUmemoryPool>; // never destroyed: pools live with the process
  return *p;
}

CUmemoryPool pool_of(const DeviceInfo& device) {
  std::lock_guard<std::mutex> lock(g_pools_mutex);
  CUmemoryPool& pool = pools()[device.device];
  if (pool) return pool;
  const DriverApi& d = driver();
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = device.device;
  CUmemoryPool created = nullptr;
  check(d.cuMemPoolCreate(&created, &props),
        ("cuMemPoolCreate(device " + std::to_string(device.ordinal) + ")").c_str());
  std::uint64_t keep_all = UINT64_MAX;
  check(d.cuMemPoolSetAttribute(created, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all),
        "cuMemPoolSetAttribute(release threshold)");
  pool = created;
  return pool;
}

} // namespace

CUdeviceptr pool_allocate(const DeviceInfo& device, std::size_t bytes, CUstream stream) {
  CUdeviceptr ptr = 0;
  check(driver().cuMemAllocFromPoolAsync(&ptr, bytes, pool_of(device), stream),
        ("cuMemAllocFromPoolAsync(" + std::to_string(bytes) + " bytes of scratch)").c_str());
  return ptr;
}

void pool_free(CUdeviceptr ptr, CUstream stream) {
  if (ptr) check(driver().cuMemFreeAsync(ptr, stream), "cuMemFreeAsync(scratch)");
}

void trim_pools() {
  std::lock_guard<std::mutex> lock(g_pools_mutex);
  for (const auto& entry : pools()) check(driver().cuMemPoolTrimTo(entry.second, 0), "cuMemPoolTrimTo");
}

std::size_t pool_reserved_bytes() {
  std::lock_guard<std::mutex> lock(g_pools_mutex);
  std::size_t total = 0;
  for (const auto& entry : pools()) {
    std::uint64_t reserved = 0;
    check(driver().cuMemPoolGetAttribute(entry.second, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved),
          "cuMemPoolGetAttribute(reserved)");
    total += static_cast<std::size_t>(reserved);
  }
  return total;
}

} // namespace jitbmm
