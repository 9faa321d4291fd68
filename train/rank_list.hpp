// train/rank_list.hpp: how lists of ranks (or buckets, or steps) read in ftcc-train's messages:
// "1, 2, 5"; empty for an empty list.
#pragma once

#include <string>
#include <vector>

namespace ftcc::train {

template <class T>
std::string joined(const std::vector<T>& v) {
  std::string out;
  for (const T& x : v) out += (out.empty() ? "" : ", ") + std::to_string(x);
  return out;
}

}  // namespace ftcc::train
