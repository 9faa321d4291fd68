// nn/format_error.hpp: the error thrown for unreadable or mismatched files (safetensors, and the
// data/ readers reuse it): the message names the file, the tensor and what is wrong with it.
#pragma once

#include "ftcc/base/error.hpp"

namespace ftcc::nn {

class FormatError : public ftcc::Error {
 public:
  using Error::Error;
};

}  // namespace ftcc::nn
