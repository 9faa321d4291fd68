// comm/kept_buffer.cpp: the process-wide list of buffers kept after a failure (kept_buffer.hpp).
#include "ftcc/comm/kept_buffer.hpp"

#include <mutex>
#include <vector>

namespace ftcc::comm {
namespace {

struct Kept {
  std::mutex mu;
  std::vector<std::shared_ptr<const void>> buffers;
};

Kept& kept() {
  static Kept* k = new Kept;  // never destroyed: a late MPI access at exit must still find the memory
  return *k;
}

}  // namespace

namespace detail {
void keep_forever(std::shared_ptr<const void> buffer) {
  Kept& k = kept();
  const std::lock_guard lock(k.mu);
  k.buffers.push_back(std::move(buffer));
}
}  // namespace detail

std::size_t kept_buffer_count() {
  Kept& k = kept();
  const std::lock_guard lock(k.mu);
  return k.buffers.size();
}

}  // namespace ftcc::comm
