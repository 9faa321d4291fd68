// safetensors: round trips (model + optimizer, float64, metadata), the exact byte layout, and every
// way a file can be bad, each refused with a message naming the tensor (or file part) and problem.
#include <gtest/gtest.h>

#include <cstring>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "ftcc/nn/safetensors.hpp"
#include "ftcc/nn/sequential.hpp"
#include "ftcc/optim/adam.hpp"
#include "ftcc/optim/checkpoint.hpp"
#include "ftcc/optim/sgd.hpp"
#include "ftcc/tensor/ops.hpp"
#include "test_util.hpp"

namespace ftcc {
namespace {

using tensor::Tensor;

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ftcc_st_" + std::to_string(::getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static std::string read(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  static void write(const std::string& p, const std::string& bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  // A file with the given JSON header and data bytes.
  static std::string file_with(const std::string& header, const std::string& data) {
    std::uint64_t n = header.size();
    std::string out(reinterpret_cast<const char*>(&n), 8);
    return out + header + data;
  }
  // Expects load (and load_into the two-tensor target when given) to throw FormatError whose
  // message contains every fragment.
  void expect_refused(const std::string& bytes, std::initializer_list<const char*> fragments) {
    std::string p = path("bad.safetensors");
    write(p, bytes);
    try {
      nn::SafetensorsContents c = nn::load_safetensors(p);
      nn::load_into(c, targets_, p);
      FAIL() << "accepted a bad file";
    } catch (const nn::FormatError& e) {
      for (const char* f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
    }
  }

  std::filesystem::path dir_;
  nn::NamedTensors targets_{{"w", Tensor::zeros({2, 3})}, {"b", Tensor::zeros({2})}};
};

TEST_F(Safetensors, ModelAndAdamStateRoundTrip) {
  auto model = nn::mlp({5, 4, 3}, nn::Activation::ReLU, 11);
  optim::Adam opt(model->named_parameters(), {});
  Tensor x = test::random_tensor({6, 5}, 1, -1, 1, tensor::DType::f32);
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    tensor::sum((*model)(x)).backward();
    opt.step();
  }
  optim::save_checkpoint(path("ck.safetensors"), *model, &opt, {{"epoch", "3"}});

  auto model2 = nn::mlp({5, 4, 3}, nn::Activation::ReLU, 99);
  optim::Adam opt2(model2->named_parameters(), {});
  nn::Metadata meta = optim::load_checkpoint(path("ck.safetensors"), *model2, &opt2);
  EXPECT_EQ(meta.at("epoch"), "3");
  EXPECT_EQ(meta.at("optimizer"), "Adam");
  EXPECT_EQ(nn::pack_bytes(model2->named_parameters()), nn::pack_bytes(model->named_parameters()));
  EXPECT_EQ(nn::pack_bytes(opt2.state_dict()), nn::pack_bytes(opt.state_dict()));
  EXPECT_EQ(opt2.step_count(), 3);

  // The wrong optimizer type, and a model of another shape, are refused by name.
  optim::SGD sgd(model2->named_parameters(), {.lr = 0.1});
  EXPECT_THROW(optim::load_checkpoint(path("ck.safetensors"), *model2, &sgd), nn::FormatError);
  auto other = nn::mlp({5, 6, 3}, nn::Activation::ReLU, 1);
  try {
    optim::load_checkpoint(path("ck.safetensors"), *other, nullptr);
    FAIL();
  } catch (const nn::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("'0.weight': shape [4, 5] in the file, [6, 5] expected"), std::string::npos)
        << e.what();
  }
}

TEST_F(Safetensors, LayoutIsTheSpecsAndFloat64RoundTrips) {
  Tensor d = test::random_tensor({3}, 5);  // float64
  Tensor f = Tensor::full({2, 1}, 1.5);
  nn::save_safetensors(path("a.safetensors"), {{"d", d}, {"f", f}}, {{"k", "v"}});
  std::string bytes = read(path("a.safetensors"));
  std::uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 3 * 8 + 2 * 4);
  std::string header = bytes.substr(8, n);
  EXPECT_NE(header.find(R"("d":{"data_offsets":[0,24],"dtype":"F64","shape":[3]})"), std::string::npos) << header;
  EXPECT_NE(header.find(R"("f":{"data_offsets":[24,32],"dtype":"F32","shape":[2,1]})"), std::string::npos) << header;
  EXPECT_NE(header.find(R"("__metadata__":{"k":"v"})"), std::string::npos) << header;
  auto c = nn::load_safetensors(path("a.safetensors"));
  EXPECT_EQ(c.find("d")->to_vector_f64(), d.to_vector_f64());
  EXPECT_EQ(c.find("f")->to_vector(), f.to_vector());
  EXPECT_EQ(c.metadata.at("k"), "v");
}

TEST_F(Safetensors, EveryBadFileIsRefused) {
  const std::string ok_header = R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"b":{"dtype":"F32","shape":[2],"data_offsets":[24,32]}})";
  const std::string data(32, '\0');
  // Sanity: the well-formed file loads.
  write(path("good.safetensors"), file_with(ok_header, data));
  nn::load_into(nn::load_safetensors(path("good.safetensors")), targets_, "good");

  expect_refused("abc", {"truncated", "shorter than the 8-byte header length"});
  expect_refused(file_with(ok_header, data).substr(0, 20), {"truncated: header length"});
  expect_refused(file_with(ok_header, data.substr(0, 30)), {"truncated: tensor 'b' needs data up to byte 32"});
  expect_refused(file_with(ok_header, data + "xx"), {"2 unexpected bytes after the last tensor"});
  expect_refused(file_with("{not json", data), {"header is not valid JSON"});
  expect_refused(file_with("[1,2]", data), {"header is not a JSON object"});
  {
    std::string huge(8, '\xff');
    expect_refused(huge + "{}", {"exceeds the 100 MB limit"});
  }
  expect_refused(file_with(R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}})", std::string(12, '\0')),
                 {"tensor 'w'", "unsupported dtype BF16"});
  expect_refused(file_with(R"({"w":{"shape":[2,3],"data_offsets":[0,24]}})", std::string(24, '\0')),
                 {"tensor 'w'", "missing or non-string dtype"});
  expect_refused(file_with(R"({"w":{"dtype":"F32","shape":[2,-3],"data_offsets":[0,24]}})", std::string(24, '\0')),
                 {"tensor 'w'", "non-negative integers"});
  expect_refused(file_with(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0]}})", std::string(24, '\0')),
                 {"tensor 'w'", "data_offsets must be an array"});
  expect_refused(file_with(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", std::string(20, '\0')),
                 {"tensor 'w'", "needs 24 bytes but data_offsets span 20"});
  expect_refused(file_with(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})",
                           std::string(24, '\0')),
                 {"overlaps"});
  expect_refused(file_with(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[8,32]}})", std::string(32, '\0')),
                 {"gap in the data before tensor 'w'"});
  expect_refused(file_with(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"__metadata__":{"a":1}})",
                           std::string(24, '\0')),
                 {"__metadata__ value 'a' is not a string"});
  // Shapes whose element count overflows: [2^32, 2^32] used to wrap to 0 bytes and match empty data.
  expect_refused(file_with(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", ""),
                 {"shape has more than 2^60 elements"});
  expect_refused(file_with(R"({"w":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,0]}})", ""),
                 {"shape has more than 2^60 elements"});
  // Well-formed files that do not match the model.
  expect_refused(file_with(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", std::string(24, '\0')),
                 {"missing tensor 'b'"});
  expect_refused(file_with(ok_header.substr(0, ok_header.size() - 1) + R"(,"extra":{"dtype":"F32","shape":[1],"data_offsets":[32,36]}})",
                           std::string(36, '\0')),
                 {"unexpected tensor 'extra'"});
  expect_refused(file_with(R"({"w":{"dtype":"F32","shape":[3,2],"data_offsets":[0,24]},"b":{"dtype":"F32","shape":[2],"data_offsets":[24,32]}})", data),
                 {"tensor 'w': shape [3, 2] in the file, [2, 3] expected"});
  expect_refused(file_with(R"({"w":{"dtype":"F64","shape":[2,3],"data_offsets":[0,48]},"b":{"dtype":"F32","shape":[2],"data_offsets":[48,56]}})",
                           std::string(56, '\0')),
                 {"tensor 'w': dtype F64 in the file, F32 expected"});
}

TEST_F(Safetensors, MissingFileAndAtomicWrite) {
  EXPECT_THROW(nn::load_safetensors(path("nope.safetensors")), nn::FormatError);
  nn::save_safetensors(path("x.safetensors"), targets_);
  EXPECT_FALSE(std::filesystem::exists(path("x.safetensors.tmp")));
  EXPECT_NO_THROW(nn::load_into(nn::load_safetensors(path("x.safetensors")), targets_, "x"));
}

}  // namespace
}  // namespace ftcc
