// nn/safetensors.hpp: read and write the safetensors format (Hugging Face), so PyTorch users can
// open ftcc weights (safetensors.torch.load_file) and ftcc can open theirs.
//
// Layout: 8-byte little-endian header length N; N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [out, in], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}
// padded with spaces to a multiple of 8; then the raw little-endian data, each tensor at
// [begin, end) relative to the end of the header. Tensors are written in list order, contiguous.
// Dtypes: F32 and F64 (others are refused on load, naming the tensor and the dtype).
//
// Loading validates everything before any tensor is touched and throws nn::FormatError with the
// path, the tensor and the problem: a file too short for its header, a header that is not JSON or
// not an object, a missing/ill-typed dtype, shape or data_offsets, an unsupported dtype, offsets
// out of order, overlapping, leaving gaps or beyond the end of the file (truncated), a byte count
// that does not match shape x dtype, trailing bytes. load_into() also refuses missing and
// unexpected names and shape or dtype mismatches.
#pragma once

#include <map>
#include <string>

#include "ftcc/nn/format_error.hpp"
#include "ftcc/nn/named_tensors.hpp"

namespace ftcc::nn {

using Metadata = std::map<std::string, std::string>;

struct SafetensorsContents {
  NamedTensors tensors;  // CPU tensors, in file (offset) order
  Metadata metadata;
  const Tensor* find(const std::string& name) const;
};

// Writes atomically (temporary file + rename): a crash mid-write never leaves a torn file at path.
void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata = {});
SafetensorsContents load_safetensors(const std::string& path);

// Copies the file's tensors into `targets` (any device) by name. strict: every target must be in
// the file and, unless `prefix_filter` selects a subset, every file tensor must be a target.
// Only names starting with prefix_filter are considered when it is non-empty; the prefix is not
// stripped. Validates all names, shapes and dtypes before copying anything.
void load_into(const SafetensorsContents& file, const NamedTensors& targets, const std::string& path_for_errors,
               bool strict = true, const std::string& prefix_filter = "");

}  // namespace ftcc::nn
