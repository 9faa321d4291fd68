#include "ftcc/tensor/host_buffers.hpp"

#include <cstdlib>
#include <mutex>
#include <new>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ftcc::tensor {
namespace {

std::size_t rounded(std::size_t bytes) { return bytes == 0 ? 64 : (bytes + 63) / 64 * 64; }

struct Cache {
  std::mutex mu;
  std::unordered_map<std::size_t, std::vector<void*>> free;  // rounded size -> free buffers
  HostBufferStats stats;
};

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

bool caching() {
  static const bool on = [] {
    if (kSanitized) return false;
    // NOLINTNEXTLINE(concurrency-mt-unsafe): read once; nothing in ftcc calls setenv
    const char* env = std::getenv("FTCC_NO_HOST_CACHE");
    return env == nullptr || std::string_view(env) != "1";
  }();
  return on;
}

// Never destroyed: a tensor in a static object may be freed after this translation unit's statics.
Cache& cache() {
  static auto* c = new Cache;
  return *c;
}

}  // namespace

void* host_buffer_alloc(std::size_t bytes) {
  const std::size_t size = rounded(bytes);
  Cache& c = cache();
  {
    std::lock_guard lock(c.mu);
    if (!caching()) {
      ++c.stats.system_allocs;
    } else if (auto it = c.free.find(size); it != c.free.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.stats.cached_bytes -= size;
      ++c.stats.reused;
      return p;
    } else {
      ++c.stats.system_allocs;
    }
  }
  void* p = std::aligned_alloc(64, size);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void host_buffer_free(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  const std::size_t size = rounded(bytes);
  Cache& c = cache();
  {
    std::lock_guard lock(c.mu);
    if (caching() && c.stats.cached_bytes + size <= kMaxCachedHostBytes) {
      try {
        c.free[size].push_back(p);
        c.stats.cached_bytes += size;
        return;
      } catch (const std::bad_alloc&) {  // no room for the list entry: give the buffer back
      }
    }
  }
  std::free(p);
}

HostBufferStats host_buffer_stats() {
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  HostBufferStats s = c.stats;
  s.caching = caching();
  return s;
}

void host_buffers_release() noexcept {
  Cache& c = cache();
  std::unordered_map<std::size_t, std::vector<void*>> drop;
  {
    std::lock_guard lock(c.mu);
    drop.swap(c.free);
    c.stats.cached_bytes = 0;
  }
  for (auto& [size, list] : drop)
    for (void* p : list) std::free(p);
}

}  // namespace ftcc::tensor
