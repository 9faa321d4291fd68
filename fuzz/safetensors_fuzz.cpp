// fuzz/safetensors_fuzz.cpp: the safetensors reader (nn/safetensors.hpp) on arbitrary files, then
// load_into() of whatever it accepted into a fixed target (a 2x3 F32 "w"), as a checkpoint load does.
#include <cstdint>

#include "ftcc/base/error.hpp"
#include "fuzz_util.hpp"
#include "ftcc/nn/safetensors.hpp"
#include "ftcc/tensor/tensor.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = ftcc::fuzz::write_file("in.safetensors", data, size);
  try {
    const auto file = ftcc::nn::load_safetensors(path);
    for (const auto& [name, t] : file.tensors) (void)t.numel();
    ftcc::nn::NamedTensors targets;
    targets.emplace_back("w", ftcc::tensor::Tensor::zeros({2, 3}));
    ftcc::nn::load_into(file, targets, path, /*strict=*/false);
  } catch (const ftcc::Error&) {
  }
  return 0;
}
