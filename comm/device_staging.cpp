#include "ftcc/comm/device_staging.hpp"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "ftcc/comm/errors.hpp"

namespace ftcc::comm::detail {
namespace {

// The few driver entry points we need (CUDA driver API, stable ABI).
using CUresult = int;
using CUdeviceptr = unsigned long long;
constexpr int kPointerAttributeMemoryType = 2;  // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr unsigned kMemoryTypeDevice = 2;       // CU_MEMORYTYPE_DEVICE
constexpr unsigned kMemoryTypeUnified = 4;      // CU_MEMORYTYPE_UNIFIED

struct Driver {
  CUresult (*pointer_get_attribute)(void*, int, CUdeviceptr) = nullptr;
  CUresult (*memcpy_dtoh)(void*, CUdeviceptr, std::size_t) = nullptr;
  CUresult (*memcpy_htod)(CUdeviceptr, const void*, std::size_t) = nullptr;
  CUresult (*mem_alloc_host)(void**, std::size_t) = nullptr;
  CUresult (*mem_free_host)(void*) = nullptr;
};

// How many shared objects the process has loaded since it started (dl_iterate_phdr's dlpi_adds,
// read from the first object only): it changes exactly when a dlopen may have brought CUDA in.
unsigned long long objects_added() {
  unsigned long long adds = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t size, void* out) {
        if (size >= offsetof(dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds)
          *static_cast<unsigned long long*>(out) = info->dlpi_adds;
        return 1;  // the first object is enough
      },
      &adds);
  return adds;
}

// The driver's entry points once the process has loaded libcuda.so.1, else null. Looked up again
// whenever objects were loaded since the last look: a program typically runs collectives before it
// first touches CUDA (ftcc-train checks its configuration across the ranks before it moves the
// model to the GPU), and a "no CUDA" remembered from then would hand device pointers to MPI.
const Driver* driver() {
  static Driver d;
  static std::atomic<bool> found{false};
  static std::mutex m;
  static unsigned long long looked_at = ~0ULL;
  if (found.load(std::memory_order_acquire)) return &d;
  const unsigned long long adds = objects_added();
  const std::lock_guard<std::mutex> lock(m);
  if (found.load(std::memory_order_relaxed)) return &d;
  if (adds == looked_at) return nullptr;
  looked_at = adds;
  // RTLD_NOLOAD: only if the program already uses CUDA; never initialise CUDA ourselves.
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return nullptr;
  d.pointer_get_attribute = reinterpret_cast<decltype(d.pointer_get_attribute)>(dlsym(h, "cuPointerGetAttribute"));
  d.memcpy_dtoh = reinterpret_cast<decltype(d.memcpy_dtoh)>(dlsym(h, "cuMemcpyDtoH_v2"));
  d.memcpy_htod = reinterpret_cast<decltype(d.memcpy_htod)>(dlsym(h, "cuMemcpyHtoD_v2"));
  d.mem_alloc_host = reinterpret_cast<decltype(d.mem_alloc_host)>(dlsym(h, "cuMemAllocHost_v2"));
  d.mem_free_host = reinterpret_cast<decltype(d.mem_free_host)>(dlsym(h, "cuMemFreeHost"));
  if (!d.pointer_get_attribute || !d.memcpy_dtoh || !d.memcpy_htod || !d.mem_alloc_host || !d.mem_free_host) return nullptr;
  found.store(true, std::memory_order_release);
  return &d;
}

void check(CUresult rc, const char* what) {
  if (rc != 0) throw CommError("device staging", std::string(what) + " failed (CUresult " + std::to_string(rc) + ")");
}

// Pinned host memory, one growing block per thread (nonblocking allreduces run on their own).
struct Pinned {
  void* p = nullptr;
  std::size_t cap = 0;
  ~Pinned() {
    if (p) driver()->mem_free_host(p);  // p came from the driver: it is there
  }
  std::byte* get(std::size_t bytes) {
    if (bytes > cap) {
      if (p) driver()->mem_free_host(p);
      p = nullptr;
      cap = 0;
      check(driver()->mem_alloc_host(&p, bytes), "cuMemAllocHost");
      cap = bytes;
    }
    return static_cast<std::byte*>(p);
  }
};

}  // namespace

bool is_device_pointer(const void* p) {
  const Driver* d = p != nullptr ? driver() : nullptr;
  if (d == nullptr) return false;
  unsigned type = 0;
  if (d->pointer_get_attribute(&type, kPointerAttributeMemoryType, reinterpret_cast<CUdeviceptr>(p)) != 0)
    return false;  // not known to CUDA: ordinary host memory
  return type == kMemoryTypeDevice || type == kMemoryTypeUnified;
}

void with_host_buffers(const void* send, std::size_t send_bytes, void* recv, std::size_t recv_in_bytes,
                       std::size_t recv_out_bytes, const std::function<void(const void*, void*)>& fn) {
  const bool in_place = send == nullptr || send == recv;
  const bool dev_send = !in_place && is_device_pointer(send);
  const bool dev_recv = is_device_pointer(recv);
  if (!dev_send && !dev_recv) {
    fn(send, recv);
    return;
  }
  const Driver& d = *driver();  // is_device_pointer found it
  thread_local Pinned pinned;
  const std::size_t recv_bytes = std::max(recv_in_bytes, recv_out_bytes);
  std::byte* h = pinned.get((dev_send ? send_bytes : 0) + (dev_recv ? recv_bytes : 0) + 64);
  const void* hs = send;
  void* hr = recv;
  if (dev_recv) {
    hr = h;
    if (recv_in_bytes) check(d.memcpy_dtoh(hr, reinterpret_cast<CUdeviceptr>(recv), recv_in_bytes), "cuMemcpyDtoH");
    h += (recv_bytes + 63) / 64 * 64;
  }
  if (dev_send) {
    check(d.memcpy_dtoh(h, reinterpret_cast<CUdeviceptr>(send), send_bytes), "cuMemcpyDtoH");
    hs = h;
  } else if (in_place) {
    hs = send == nullptr ? nullptr : hr;
  }
  fn(hs, hr);
  if (dev_recv && recv_out_bytes)
    check(d.memcpy_htod(reinterpret_cast<CUdeviceptr>(recv), hr, recv_out_bytes), "cuMemcpyHtoD");
}

}  // namespace ftcc::comm::detail
