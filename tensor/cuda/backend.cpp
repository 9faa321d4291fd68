// Finding the CUDA backend (tensor/cuda/backend.hpp): registration, then libftcc_cuda.so next to
// the code of libftcc, then the ordinary dlopen search. Part of libftcc; links no CUDA library.
#include "ftcc/tensor/cuda/backend.hpp"

#include <atomic>
#include <cstring>
#include <string>

#include "ftcc/base/error.hpp"
#include "ftcc_config.hpp"

#if FTCC_HAVE_CUDA
#include <dlfcn.h>
#endif

namespace ftcc::tensor::cuda {
namespace {

constinit std::atomic<const Backend*> g_registered{nullptr};

// The outcome of the library search: the table and the path it came from, or why there is none.
struct Search {
  const Backend* table = nullptr;
  std::string origin;
};

constexpr const char* kLibrary = "libftcc_cuda.so";

#if FTCC_HAVE_CUDA
// An address inside libftcc's own code, for dladdr: the file that holds it (libftcc.so, or the
// executable when libftcc.a was linked in) tells where libftcc_cuda.so should lie.
const char anchor = 0;

// dlopen + dlsym + ABI check. On success the library stays loaded for the life of the process (the
// table points into it); on failure `why` gets one line and nothing stays loaded.
const Backend* open_table(const std::string& name, std::string& why) {
  void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();  // NOLINT(concurrency-mt-unsafe): glibc keeps dlerror's state per thread
    why = e != nullptr ? e : "dlopen failed";
    return nullptr;
  }
  using Entry = const Backend* (*)() noexcept;
  auto entry = reinterpret_cast<Entry>(dlsym(h, "ftcc_cuda_backend"));
  if (entry == nullptr) {
    why = name + " has no ftcc_cuda_backend entry point (not an ftcc CUDA library?)";
    dlclose(h);
    return nullptr;
  }
  const Backend* b = entry();
  if (b->abi != kBackendAbi) {
    why = name + " has backend ABI " + std::to_string(b->abi) + ", this libftcc (" + FTCC_VERSION + ") needs " +
          std::to_string(kBackendAbi) + ": install the libftcc_cuda.so built with this libftcc";
    dlclose(h);
    return nullptr;
  }
  return b;
}

Search search() {
  Search s;
  std::string tried;
  Dl_info info{};
  if (dladdr(&anchor, &info) != 0 && info.dli_fname != nullptr && std::strchr(info.dli_fname, '/') != nullptr) {
    std::string self = info.dli_fname;
    std::string path = self.substr(0, self.rfind('/') + 1) + kLibrary;
    std::string why;
    if ((s.table = open_table(path, why)) != nullptr) {
      s.origin = path;
      return s;
    }
    tried = "Next to " + self + ": " + why + "; ";
  }
  std::string why;
  if ((s.table = open_table(kLibrary, why)) != nullptr) {
    // The search found it; dladdr on the table names the file.
    s.origin = kLibrary;
    if (dladdr(s.table, &info) != 0 && info.dli_fname != nullptr) s.origin = info.dli_fname;
    return s;
  }
  s.origin = std::string("CUDA tensors need ") + kLibrary +
             " (an ftcc built with -Dcuda=enabled installs it next to libftcc; a program may also link it and call "
             "ftcc::tensor::cuda::register_backend). " +
             tried + "dlopen(\"" + kLibrary + "\") said: " + why;
  return s;
}
#else
Search search() {
  return {nullptr,
          "CUDA tensors need an ftcc built with CUDA: this one was built without it (meson -Dcuda=disabled, or no "
          "nvcc was found); rebuild with -Dcuda=enabled"};
}
#endif

// Searched once per process (thread-safe static); registration does not need it.
const Search& searched() {
  static const Search s = search();
  return s;
}

}  // namespace

void register_backend(const Backend& b) {
  FTCC_CHECK(b.abi == kBackendAbi) << "register_backend: backend ABI " << b.abi << ", this libftcc (" << FTCC_VERSION
                                   << ") needs " << kBackendAbi;
  g_registered.store(&b, std::memory_order_release);
}

const Backend* find_backend() noexcept {
  if (const Backend* b = g_registered.load(std::memory_order_acquire)) return b;
  try {
    return searched().table;
  } catch (...) {
    return nullptr;  // out of memory while composing the message; no backend either way
  }
}

const Backend& backend() {
  if (const Backend* b = find_backend()) return *b;
  throw Error(searched().origin);
}

std::string backend_origin() {
  if (g_registered.load(std::memory_order_acquire) != nullptr) return "registered by the program";
  return searched().origin;
}

}  // namespace ftcc::tensor::cuda
