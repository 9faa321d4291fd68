#include "ftcc/nn/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace ftcc::nn {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; add byte swapping");

namespace {

using json = nlohmann::json;

// Refuse headers beyond this: the format's reference implementation uses the same 100 MB bound,
// and a garbage length must not make us allocate gigabytes.
constexpr std::uint64_t kMaxHeader = 100ull << 20;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw FormatError("safetensors file '" + path + "': " + what);
}

std::string dtype_tag(tensor::DType t) { return t == tensor::DType::f32 ? "F32" : "F64"; }

bool parse_dtype(const std::string& tag, tensor::DType* out) {
  if (tag == "F32") *out = tensor::DType::f32;
  else if (tag == "F64") *out = tensor::DType::f64;
  else return false;
  return true;
}

struct Entry {
  std::string name;
  tensor::DType dtype;
  tensor::Shape shape;
  std::uint64_t begin, end;
};

}  // namespace

const Tensor* SafetensorsContents::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata) {
  json header = json::object();
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    FTCC_CHECK(name != "__metadata__" && !name.empty()) << "save_safetensors: invalid tensor name '" << name << "'";
    FTCC_CHECK(!header.contains(name)) << "save_safetensors: tensor '" << name << "' appears twice";
    json shape = json::array();
    for (auto d : t.shape()) shape.push_back(d);
    header[name] = {{"dtype", dtype_tag(t.dtype())}, {"shape", shape}, {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned for mmap readers
  std::uint64_t n = text.size();

  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error("save_safetensors: cannot open '" + tmp + "' for writing");
    out.write(reinterpret_cast<const char*>(&n), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& [name, t] : tensors) {
      Tensor host = t.device() == tensor::Device::CPU ? t : t.to(tensor::Device::CPU);
      out.write(static_cast<const char*>(host.raw_data()), static_cast<std::streamsize>(host.nbytes()));
    }
    out.flush();
    if (!out) throw Error("save_safetensors: write to '" + tmp + "' failed (disk full?)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error("save_safetensors: cannot rename '" + tmp + "' to '" + path + "'");
}

SafetensorsContents load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw FormatError("safetensors file '" + path + "': cannot open");
  const std::uint64_t file_size = static_cast<std::uint64_t>(in.tellg());
  in.seekg(0);
  if (file_size < 8) fail(path, "truncated: " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length");
  std::uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  if (n > kMaxHeader) fail(path, "header length " + std::to_string(n) + " exceeds the 100 MB limit (corrupt file?)");
  if (n > file_size - 8)
    fail(path, "truncated: header length " + std::to_string(n) + " but only " + std::to_string(file_size - 8) +
                   " bytes follow");
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    fail(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail(path, "header is not a JSON object");

  SafetensorsContents out;
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(path, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) fail(path, "__metadata__ value '" + m.key() + "' is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) { fail(path, std::string("tensor '").append(name).append("': ").append(what)); };
    if (!v.is_object()) bad("entry is not an object");
    if (!v.contains("dtype") || !v["dtype"].is_string()) bad("missing or non-string dtype");
    if (!v.contains("shape") || !v["shape"].is_array()) bad("missing or non-array shape");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      bad("data_offsets must be an array [begin, end]");
    Entry e;
    e.name = name;
    std::string tag = v["dtype"].get<std::string>();
    if (!parse_dtype(tag, &e.dtype)) bad("unsupported dtype " + tag + " (ftcc reads F32 and F64)");
    if (v["shape"].size() > static_cast<std::size_t>(tensor::kMaxDims))
      bad("shape has " + std::to_string(v["shape"].size()) + " dimensions, at most 4 are supported");
    std::int64_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) bad("shape entries must be non-negative integers");
      const auto extent = d.get<std::uint64_t>();
      // Checked here, before the byte count: [2^32, 2^32] used to wrap to 0 bytes and pass.
      if (extent > static_cast<std::uint64_t>(tensor::kMaxNumel) ||
          __builtin_mul_overflow(numel, static_cast<std::int64_t>(extent), &numel) || numel > tensor::kMaxNumel)
        bad("shape has more than 2^60 elements");
      e.shape.push_back(static_cast<std::int64_t>(extent));
    }
    for (const auto& o : v["data_offsets"])
      if (!o.is_number_unsigned()) bad("data_offsets must be non-negative integers");
    e.begin = v["data_offsets"][0].get<std::uint64_t>();
    e.end = v["data_offsets"][1].get<std::uint64_t>();
    if (e.end < e.begin) bad("data_offsets end < begin");
    std::uint64_t want = static_cast<std::uint64_t>(tensor::shape_numel(e.shape)) * tensor::dtype_size(e.dtype);
    if (e.end - e.begin != want)
      bad("shape " + tensor::shape_str(e.shape) + " of " + tag + " needs " + std::to_string(want) +
          " bytes but data_offsets span " + std::to_string(e.end - e.begin));
    entries.push_back(std::move(e));
  }

  // The data section must be exactly the tensors, back to back: anything else is corruption.
  const std::uint64_t data_size = file_size - 8 - n;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t expect = 0;
  for (const Entry& e : entries) {
    if (e.end > data_size)
      fail(path, "truncated: tensor '" + e.name + "' needs data up to byte " + std::to_string(e.end) + ", the file has " +
                     std::to_string(data_size));
    if (e.begin < expect) fail(path, "tensor '" + e.name + "' overlaps the previous tensor's data");
    if (e.begin > expect) fail(path, "gap in the data before tensor '" + e.name + "'");
    expect = e.end;
  }
  if (expect != data_size)
    fail(path, std::to_string(data_size - expect) + " unexpected bytes after the last tensor's data");

  const std::uint64_t data_start = 8 + n;
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    in.seekg(static_cast<std::streamoff>(data_start + e.begin));
    in.read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(e.end - e.begin));
    if (!in) fail(path, "read error in tensor '" + e.name + "'");
    out.tensors.emplace_back(e.name, t);
  }
  return out;
}

void load_into(const SafetensorsContents& file, const NamedTensors& targets, const std::string& path, bool strict,
               const std::string& prefix_filter) {
  auto in_scope = [&](const std::string& name) { return name.rfind(prefix_filter, 0) == 0; };
  std::vector<std::pair<const Tensor*, const Tensor*>> plan;
  for (const auto& [name, target] : targets) {
    const Tensor* src = file.find(name);
    if (src == nullptr) {
      if (strict) fail(path, "missing tensor '" + name + "'");
      continue;
    }
    if (src->dtype() != target.dtype())
      fail(path, "tensor '" + name + "': dtype " + dtype_tag(src->dtype()) + " in the file, " +
                     dtype_tag(target.dtype()) + " expected");
    if (src->shape() != target.shape())
      fail(path, "tensor '" + name + "': shape " + tensor::shape_str(src->shape()) + " in the file, " +
                     tensor::shape_str(target.shape()) + " expected");
    plan.emplace_back(src, &target);
  }
  if (strict) {
    for (const auto& entry : file.tensors) {
      const std::string& name = entry.first;  // not a structured binding: clang < 16 cannot capture those
      if (!in_scope(name)) continue;
      bool known = std::any_of(targets.begin(), targets.end(), [&](const NamedTensor& x) { return x.first == name; });
      if (!known) fail(path, "unexpected tensor '" + name + "' (not in the model/optimizer)");
    }
  }
  for (auto [src, dst] : plan) dst->copy_(*src);
}

}  // namespace ftcc::nn
