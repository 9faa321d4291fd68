// train/gpu_choice.hpp: which GPU a rank trains on (--device cuda).
//
// The ranks of one host take that host's GPUs in turn, in the order of their original ranks: the
// k-th rank of a host (counting from 0) uses device k % devices, as one process per GPU does with
// torchrun's LOCAL_RANK or NCCL. Hot spares count like the others (a spare that takes a lost rank's
// place keeps its own device); a process started by a respawn comes after every original rank.
// CUDA_VISIBLE_DEVICES still decides which devices a process sees, and so where `devices` comes from.
#pragma once

#include <string>
#include <vector>

namespace ftcc::train {

// host_of[i]: an identity of the host of the job's i-th process (in original-rank order); me: this
// process's index there; devices: the GPUs this process sees (>= 1). Returns a device ordinal in
// [0, devices). Throws ftcc::InternalError when me is not an index of host_of or devices < 1.
int gpu_for_rank(const std::vector<std::string>& host_of, int me, int devices);

}  // namespace ftcc::train
