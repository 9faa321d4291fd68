// fuzz/fuzz_util.hpp: helpers shared by the libFuzzer targets.
//
// The readers under test take file paths (as ftcc does: a dataset, a checkpoint folder), so each
// input is written to a private scratch folder first (one per fuzzing process, under $TMPDIR).
// Expected rejections (ftcc::Error and its subclasses: FormatError, InvalidArgument) are the
// readers' documented way to refuse input; anything else escaping, or a sanitizer report, is a bug.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace ftcc::fuzz {

inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* t = std::getenv("TMPDIR");
    std::string d = std::string(t && *t ? t : "/tmp") + "/ftcc-fuzz-" + std::to_string(::getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline std::string write_file(const std::string& name, const std::uint8_t* data, std::size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

}  // namespace ftcc::fuzz
