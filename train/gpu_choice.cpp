#include "ftcc/train/gpu_choice.hpp"

#include "ftcc/base/error.hpp"

namespace ftcc::train {

int gpu_for_rank(const std::vector<std::string>& host_of, int me, int devices) {
  FTCC_INVARIANT(me >= 0 && me < static_cast<int>(host_of.size()) && devices >= 1)
      << "gpu_for_rank: process " << me << " of " << host_of.size() << ", " << devices << " device(s)";
  int before = 0;  // processes of this host with a lower original rank
  for (int i = 0; i < me; ++i)
    if (host_of[static_cast<std::size_t>(i)] == host_of[static_cast<std::size_t>(me)]) ++before;
  return before % devices;
}

}  // namespace ftcc::train
