// base/env_number.hpp: numeric settings read from the environment, checked as strictly as flags.
//
// An FTCC_* variable that holds a number is parsed whole, range-checked and refused with one line
// naming the variable, its text and the accepted range, like a bad flag: a typo must not become
// another value ("5abc" taken as 5, "0" silently meaning the default, "inf" or "1e12" overflowing
// a deadline into an immediate timeout).
//
//   const double t = ftcc::env_seconds("FTCC_COMM_TIMEOUT_S", 300, 0.001, 1e6);
//   // unset or empty: 300; "2.5": 2.5; "5abc", "nan", "0", "1e12": throws ftcc::InvalidArgument
//   // "FTCC_COMM_TIMEOUT_S='5abc': not a number of seconds; use a value from 0.001 to 1e+06"
//
// Header-only and dependency-free (base/error.hpp only), so comm/ and recovery/ can both use it.
// A program should read each variable once at start, on every rank before any communication, so
// that every rank refuses alike (tools/ftcc_train.cpp does it with its flags).
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ftcc/base/error.hpp"

namespace ftcc {
namespace detail {

inline std::string env_number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace detail

// `text` (the value of variable `name`) as a number of seconds in [min, max]. The whole text must
// be a decimal (or hexadecimal) floating-point number: no blanks, no unit, no trailing characters,
// finite. Throws ftcc::InvalidArgument otherwise.
inline double parse_env_seconds(const char* name, const std::string& text, double min, double max) {
  const std::string range = "; use a value from " + detail::env_number_text(min) + " to " + detail::env_number_text(max);
  const std::string shown = std::string(name) + "='" + text + "': ";
  const char* begin = text.c_str();
  char* end = nullptr;
  // strtod skips leading blanks and reads "inf", "nan" and "0x1p3"; blanks are refused first.
  const bool blank_first = !text.empty() && (text[0] == ' ' || text[0] == '\t' || text[0] == '\n');
  const double v = blank_first ? 0.0 : std::strtod(begin, &end);
  if (blank_first || end == begin || end != begin + text.size())
    throw InvalidArgument(shown + "not a number of seconds" + range);
  if (!std::isfinite(v)) throw InvalidArgument(shown + "not a finite number of seconds" + range);
  if (v < min || v > max) throw InvalidArgument(shown + "out of range" + range);
  return v;
}

// The environment variable `name` as a number of seconds: `fallback` when it is unset or empty,
// else parse_env_seconds (throws ftcc::InvalidArgument naming the variable, its text and the range).
inline double env_seconds(const char* name, double fallback, double min, double max) {
  const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): no setenv in ftcc
  if (v == nullptr || *v == '\0') return fallback;
  return parse_env_seconds(name, v, min, max);
}

}  // namespace ftcc
