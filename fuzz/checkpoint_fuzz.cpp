// fuzz/checkpoint_fuzz.cpp: checkpoint metadata (train/checkpoint_store.hpp). The input is the
// JSON of ckpt-0000000007.json in a folder that also holds ckpt-0000000007.safetensors (the
// bytes "ftcc", SHA-256 eac20520...) and an older valid checkpoint 3; newest_valid() must return
// one of them or nothing, and report every skip, without crashing.
#include <cstdint>
#include <filesystem>
#include <string>

#include "ftcc/base/error.hpp"
#include "fuzz_util.hpp"
#include "ftcc/train/checkpoint_store.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string dir = [] {
    const std::string d = ftcc::fuzz::scratch_dir() + "/ck";
    std::filesystem::create_directories(d);
    const std::uint8_t body[] = {'f', 't', 'c', 'c'};
    ftcc::fuzz::write_file("ck/ckpt-0000000007.safetensors", body, sizeof body);
    ftcc::fuzz::write_file("ck/ckpt-0000000003.safetensors", body, sizeof body);
    const std::string meta =
        R"({"format":"ftcc-train-checkpoint-1","step":3,"epoch":0,"cursor_step":3,"samples_seen":192,)"
        R"("world_size":4,"seed":42,"config_hash":"x","file":"ckpt-0000000003.safetensors",)"
        R"("sha256":"eac20520b8dfa41a15dac50644397ae393e352f438adf73cdea3636cdd9c859e"})";
    ftcc::fuzz::write_file("ck/ckpt-0000000003.json", reinterpret_cast<const std::uint8_t*>(meta.data()), meta.size());
    return d;
  }();
  ftcc::fuzz::write_file("ck/ckpt-0000000007.json", data, size);
  try {
    ftcc::train::CheckpointStore store(dir);
    int skipped = 0;
    const auto info = store.newest_valid([&](const std::string&) { ++skipped; });
    if (info && info->path.empty()) __builtin_trap();
  } catch (const ftcc::Error&) {
  }
  return 0;
}
