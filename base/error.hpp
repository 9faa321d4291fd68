// base/error.hpp: the one error type every ftcc layer throws, and the checks that build it.
//
// ftcc::Error is a std::runtime_error whose message says what failed, where (file:line) and,
// where the check knows it, what to do. FTCC_CHECK(cond) << "context" throws when cond is false:
//
//   FTCC_CHECK(a.cols() == b.rows()) << "matmul: inner dims differ: " << a.cols() << " vs " << b.rows();
//   FTCC_CHECK_EQ(x, y) << "...";   // also prints both values
//
// FTCC_REQUIRE(cond) << "..." is the same without file:line, for validating user input.
// FTCC_INVARIANT(cond) << "..." guards ftcc's own invariants (not the caller's input): it throws
// InternalError, which a job reports as an internal error (exit status 1), never as a
// configuration error (2).
// Layers derive their own typed errors from Error (comm::CommError, nn::FormatError ...).
// Header-only and dependency-free so that comm/ (MPI only) and tensor/ can both use it.
#pragma once

#if __cplusplus < 202002L
#error "ftcc needs C++20 or newer: compile with -std=c++20 (or a later standard)"
#endif

#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace ftcc {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Shape, dtype or argument mistakes made by the caller.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// An invariant inside ftcc failed: a bug in ftcc, not a mistake in the caller's input or a fault
// of the job's environment (recovery::run_job reports it as exit status 1, "internal error").
class InternalError : public Error {
 public:
  using Error::Error;
};

// A file or folder could not be read or written (full disk, permissions, a vanished mount):
// the job's environment failed, not the caller's input (run_job reports it as a job error, 4).
class IoError : public Error {
 public:
  using Error::Error;
};

namespace detail {

// Collects the message of a failed check and throws E from its destructor's caller:
// `CheckMessage<E>(...) << a << b` evaluates the stream then throws in ~Thrower.
template <class E>
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* expr) {
    os_ << file << ':' << line << (std::is_same_v<E, InternalError> ? ": internal invariant failed (a bug in ftcc): "
                                                                      : ": check failed: ")
        << expr << ": ";
  }
  // For checks of user input whose message already says what and where (a flag, a file).
  CheckFailure() = default;
  template <class T>
  CheckFailure& operator<<(const T& v) {
    os_ << v;
    return *this;
  }
  [[noreturn]] void raise() const { throw E(os_.str()); }

 private:
  std::ostringstream os_;
};

template <class E>
struct Raiser {
  // `Raiser{} & failure` lets the macro below end with the caller's `<< ...` chain.
  [[noreturn]] void operator&(const CheckFailure<E>& f) const { f.raise(); }
};

template <class A, class B>
std::string both_values(const A& a, const B& b) {
  std::ostringstream os;
  os << "(" << a << " vs " << b << ") ";
  return os.str();
}

}  // namespace detail
}  // namespace ftcc

// FTCC_CHECK_T(ErrorType, cond) << "message": throw ErrorType with file:line when cond is false.
#define FTCC_CHECK_T(E, cond) \
  if (cond) {                 \
  } else                      \
    ::ftcc::detail::Raiser<E>{} & ::ftcc::detail::CheckFailure<E>(__FILE__, __LINE__, #cond)

#define FTCC_CHECK(cond) FTCC_CHECK_T(::ftcc::InvalidArgument, cond)

// FTCC_INVARIANT(cond) << "message": ftcc's own invariant (InternalError, exit status 1 in a job).
#define FTCC_INVARIANT(cond) FTCC_CHECK_T(::ftcc::InternalError, cond)

// FTCC_REQUIRE(cond) << "--batch must be > 0": user-input validation. Throws InvalidArgument
// with exactly the message (no file:line or expression): it is what a CLI user reads.
#define FTCC_REQUIRE(cond) \
  if (cond) {              \
  } else                   \
    ::ftcc::detail::Raiser<::ftcc::InvalidArgument>{} & ::ftcc::detail::CheckFailure<::ftcc::InvalidArgument>()

#define FTCC_CHECK_EQ(a, b) \
  FTCC_CHECK((a) == (b)) << ::ftcc::detail::both_values((a), (b))

// FTCC_INVARIANT_EQ(a, b) << "context": FTCC_INVARIANT(a == b), the message with both values.
#define FTCC_INVARIANT_EQ(a, b) \
  FTCC_INVARIANT((a) == (b)) << ::ftcc::detail::both_values((a), (b))
