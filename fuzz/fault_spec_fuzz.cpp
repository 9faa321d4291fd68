// fuzz/fault_spec_fuzz.cpp: the fault-injection spec parser (recovery/fault_spec.hpp), as fed by
// --inject. Input: one or more specs, one per line. A parsed spec must round-trip its fields.
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "ftcc/base/error.hpp"
#include "ftcc/recovery/fault_spec.hpp"

using namespace ftcc::recovery;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> specs;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) specs.push_back(line);
  try {
    const auto parsed = parse_fault_specs(specs);
    for (const auto& f : parsed) {
      if (f.rank < 0 || f.step < 0) __builtin_trap();                       // required fields
      if (f.kind == FaultKind::delay && f.delay_ms < 0) __builtin_trap();  // a negative delay
      (void)to_string(f.kind);
      (void)to_string(f.phase);
    }
  } catch (const ftcc::Error&) {
  }
  try {
    (void)parse_fault_spec(text);
  } catch (const ftcc::Error&) {
  }
  return 0;
}
