// tests/train/env_number_test.cpp: base/env_number.hpp, numeric environment variables parsed like
// flags (FTCC_COMM_TIMEOUT_S's "5abc", "0", "inf", "1e12" used to become 5, 300 s, an immediate
// timeout).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "ftcc/base/env_number.hpp"
#include "ftcc/base/error.hpp"

namespace {

std::string refusal(const char* text, double min = 0.001, double max = 1e6) {
  try {
    ftcc::parse_env_seconds("FTCC_X_S", text, min, max);
  } catch (const ftcc::InvalidArgument& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(EnvSeconds, AcceptsAWholeFiniteNumberInRange) {
  EXPECT_EQ(ftcc::parse_env_seconds("FTCC_X_S", "2.5", 0.001, 1e6), 2.5);
  EXPECT_EQ(ftcc::parse_env_seconds("FTCC_X_S", "300", 0.001, 1e6), 300);
  EXPECT_EQ(ftcc::parse_env_seconds("FTCC_X_S", "1e6", 0.001, 1e6), 1e6);     // the bounds are in
  EXPECT_EQ(ftcc::parse_env_seconds("FTCC_X_S", "0.001", 0.001, 1e6), 0.001);
  EXPECT_EQ(ftcc::parse_env_seconds("FTCC_X_S", "0", 0, 10), 0);             // where 0 is allowed
}

TEST(EnvSeconds, RefusesWithOneLineNamingTheVariableTheTextAndTheRange) {
  EXPECT_EQ(refusal("5abc"), "FTCC_X_S='5abc': not a number of seconds; use a value from 0.001 to 1e+06");
  for (const char* text : {"abc", "5 ", " 5", "5s", "", "-", "1,5", "0x"})
    EXPECT_NE(refusal(text).find("not a number of seconds; use a value from 0.001 to 1e+06"), std::string::npos)
        << "'" << text << "': " << refusal(text);
  EXPECT_EQ(refusal("inf"), "FTCC_X_S='inf': not a finite number of seconds; use a value from 0.001 to 1e+06");
  EXPECT_EQ(refusal("nan"), "FTCC_X_S='nan': not a finite number of seconds; use a value from 0.001 to 1e+06");
  EXPECT_EQ(refusal("0"), "FTCC_X_S='0': out of range; use a value from 0.001 to 1e+06");
  EXPECT_EQ(refusal("1e12"), "FTCC_X_S='1e12': out of range; use a value from 0.001 to 1e+06");
  EXPECT_EQ(refusal("-3"), "FTCC_X_S='-3': out of range; use a value from 0.001 to 1e+06");
  EXPECT_EQ(refusal("1e400"), "FTCC_X_S='1e400': not a finite number of seconds; use a value from 0.001 to 1e+06");
}

TEST(EnvSeconds, UnsetOrEmptyIsTheFallback) {
  ::unsetenv("FTCC_TEST_ENV_SECONDS");
  EXPECT_EQ(ftcc::env_seconds("FTCC_TEST_ENV_SECONDS", 300, 0.001, 1e6), 300);
  ::setenv("FTCC_TEST_ENV_SECONDS", "", 1);
  EXPECT_EQ(ftcc::env_seconds("FTCC_TEST_ENV_SECONDS", 300, 0.001, 1e6), 300);
  ::setenv("FTCC_TEST_ENV_SECONDS", "7.5", 1);
  EXPECT_EQ(ftcc::env_seconds("FTCC_TEST_ENV_SECONDS", 300, 0.001, 1e6), 7.5);
  ::setenv("FTCC_TEST_ENV_SECONDS", "5abc", 1);
  EXPECT_THROW(ftcc::env_seconds("FTCC_TEST_ENV_SECONDS", 300, 0.001, 1e6), ftcc::InvalidArgument);
  ::unsetenv("FTCC_TEST_ENV_SECONDS");
}

}  // namespace
