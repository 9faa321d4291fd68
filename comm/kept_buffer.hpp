// comm/kept_buffer.hpp: memory for a collective's buffers that outlives the collective's failure.
//
// A collective that threw may leave behind a send that MPI still reads (docs/collectives.md,
// "Keep the buffers of a collective that threw alive"), so a buffer on the stack of the frame a
// failure unwinds is a use-after-free waiting for a late message. KeptBuffer<T> holds one T on the
// heap:
//   * its scope ends normally: the T is freed;
//   * its scope ends by an exception (the failure unwinding it): the T goes to a process-wide list
//     and is never freed (a bounded leak: one per failure and buffer, still reachable, so leak
//     checkers do not report it).
// Declare it in the scope the failure leaves: a failure caught inside that scope ends it normally.
// Not copyable or movable (its address is the buffer's identity). Thread-safe.
#pragma once

#include <cstddef>
#include <exception>
#include <memory>
#include <utility>

namespace ftcc::comm {

namespace detail {
void keep_forever(std::shared_ptr<const void> buffer);
}

// How many buffers were kept after a failure in this process (for tests and diagnostics).
std::size_t kept_buffer_count();

template <class T>
class KeptBuffer {
 public:
  template <class... Args>
  explicit KeptBuffer(Args&&... args)
      : value_(std::make_shared<T>(std::forward<Args>(args)...)), exceptions_(std::uncaught_exceptions()) {}
  KeptBuffer(const KeptBuffer&) = delete;
  KeptBuffer& operator=(const KeptBuffer&) = delete;
  ~KeptBuffer() {
    if (std::uncaught_exceptions() > exceptions_) detail::keep_forever(std::move(value_));
  }

  T& operator*() const { return *value_; }
  T* operator->() const { return value_.get(); }
  T* get() const { return value_.get(); }

 private:
  std::shared_ptr<T> value_;
  int exceptions_;  // in flight when constructed: more at destruction means an exception unwinds us
};

}  // namespace ftcc::comm
