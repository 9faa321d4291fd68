#include "ftcc/data/table.hpp"

#include <zlib.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "ftcc/base/error.hpp"

namespace ftcc::data {

namespace {

// strerror shares one static buffer between threads; strerror_r does not. glibc with _GNU_SOURCE
// (g++'s default) has the GNU strerror_r, which returns the text; POSIX's returns 0 and fills buf.
[[maybe_unused]] const char* strerror_r_text(const char* text, const char* /*buf*/) { return text; }
[[maybe_unused]] const char* strerror_r_text(int rc, const char* buf) { return rc == 0 ? buf : "unknown error"; }
std::string errno_text(int err) {
  char buf[256] = {};
  return strerror_r_text(strerror_r(err, buf, sizeof buf), buf);
}

// Whole file through zlib: gzread passes non-gzip files through unchanged.
std::string read_all(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw FormatError("cannot open '" + path + "': " + errno_text(errno));
  std::unique_ptr<gzFile_s, int (*)(gzFile)> guard(f, gzclose);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    int n = gzread(f, buf, sizeof buf);
    if (n < 0) {
      int code = 0;
      const char* msg = gzerror(f, &code);
      throw FormatError("'" + path + "': decompression failed: " + (msg ? msg : "unknown zlib error"));
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  // A gzip stream cut short reads as a clean end in some zlib versions; gzerror still knows.
  int code = 0;
  gzerror(f, &code);
  if (code != Z_OK && code != Z_STREAM_END) throw FormatError("'" + path + "': truncated or corrupt gzip data");
  return out;
}

}  // namespace

Table read_csv(const std::string& path, const CsvOptions& options) {
  std::string text = read_all(path);
  Table t;
  std::istringstream lines(text);
  std::string line;
  std::int64_t lineno = 0;
  bool header_skipped = !options.has_header;
  char delim = options.delimiter;
  while (std::getline(lines, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    if (!header_skipped) {
      header_skipped = true;
      continue;
    }
    if (delim == 0) delim = line.find(',') != std::string::npos ? ',' : ' ';
    std::int64_t fields = 0;
    std::size_t pos = 0;
    while (pos <= line.size()) {
      std::size_t end;
      if (delim == ' ') {
        pos = line.find_first_not_of(" \t", pos);
        if (pos == std::string::npos) break;
        end = line.find_first_of(" \t", pos);
      } else {
        end = line.find(delim, pos);
      }
      if (end == std::string::npos) end = line.size();
      std::string_view field(line.data() + pos, end - pos);
      while (!field.empty() && (field.front() == ' ' || field.front() == '\t')) field.remove_prefix(1);
      while (!field.empty() && (field.back() == ' ' || field.back() == '\t')) field.remove_suffix(1);
      double v = 0;
      auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
      if (field.empty() || ec != std::errc() || ptr != field.data() + field.size())
        throw FormatError("'" + path + "' line " + std::to_string(lineno) + " field " + std::to_string(fields + 1) +
                          ": not a number: '" + std::string(field) + "'");
      t.values.push_back(v);
      ++fields;
      pos = end + 1;
    }
    if (t.rows == 0) t.cols = fields;
    if (fields != t.cols)
      throw FormatError("'" + path + "' line " + std::to_string(lineno) + ": " + std::to_string(fields) +
                        " fields, expected " + std::to_string(t.cols));
    ++t.rows;
  }
  if (t.rows == 0) throw FormatError("'" + path + "': no data rows");
  return t;
}

tensor::Tensor columns(const Table& t, std::int64_t c0, std::int64_t c1) {
  FTCC_CHECK(0 <= c0 && c0 <= c1 && c1 <= t.cols) << "columns(" << c0 << ", " << c1 << ") of a table with " << t.cols;
  tensor::Tensor out = tensor::Tensor::empty({t.rows, c1 - c0});
  float* p = out.data();
  for (std::int64_t r = 0; r < t.rows; ++r)
    for (std::int64_t c = c0; c < c1; ++c) *p++ = static_cast<float>(t.at(r, c));
  return out;
}

// ---- .npy -------------------------------------------------------------------------------------
// Magic "\x93NUMPY", major, minor, header length (2 bytes in v1, 4 in v2/v3), then a Python dict
// literal {'descr': '<f4', 'fortran_order': False, 'shape': (r, c), } padded to 64 bytes.

namespace {
std::string dict_value(const std::string& header, const std::string& key, const std::string& path) {
  std::size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) throw FormatError("'" + path + "': .npy header has no '" + key + "'");
  // Every find below can fail on a malformed header (found by fuzz/table_fuzz.cpp): say so instead
  // of indexing at npos or wrapping npos + 1 to 0.
  const auto bad = [&] { return FormatError("'" + path + "': .npy header: malformed '" + key + "' entry"); };
  std::size_t colon = header.find(':', k);
  if (colon == std::string::npos) throw bad();
  std::size_t start = header.find_first_not_of(' ', colon + 1);
  if (start == std::string::npos) throw bad();
  std::size_t end;
  if (header[start] == '(') {
    end = header.find(')', start);
    if (end == std::string::npos) throw bad();
    ++end;
  } else {
    const std::size_t from = header[start] == '\'' ? header.find('\'', start + 1) : start;
    if (from == std::string::npos) throw bad();
    end = header.find_first_of(",}", from);
    if (end == std::string::npos) throw bad();
  }
  return header.substr(start, end - start);
}
}  // namespace

tensor::Tensor read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw FormatError("cannot open '" + path + "'");
  const std::uint64_t size = static_cast<std::uint64_t>(in.tellg());
  in.seekg(0);
  char magic[8];
  if (size < 10 || !in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    throw FormatError("'" + path + "': not a .npy file (bad magic)");
  int major = static_cast<unsigned char>(magic[6]);
  std::uint32_t hlen = 0;
  if (major == 1) {
    unsigned char b[2];
    in.read(reinterpret_cast<char*>(b), 2);
    hlen = b[0] | (b[1] << 8);
  } else if (major == 2 || major == 3) {
    unsigned char b[4];
    in.read(reinterpret_cast<char*>(b), 4);
    hlen = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<std::uint32_t>(b[3]) << 24);
  } else {
    throw FormatError("'" + path + "': unsupported .npy version " + std::to_string(major));
  }
  // In 64 bits: 12u + a 32-bit header length wrapped around, passed the check below and asked
  // for a 4 GiB header string (found by fuzz/table_fuzz.cpp).
  const std::uint64_t data_start = std::uint64_t{major == 1 ? 10u : 12u} + hlen;
  if (data_start > size) throw FormatError("'" + path + "': truncated .npy header");
  std::string header(hlen, '\0');
  in.read(header.data(), hlen);
  std::string descr = dict_value(header, "descr", path);
  std::string fortran = dict_value(header, "fortran_order", path);
  std::string shape_s = dict_value(header, "shape", path);
  tensor::DType dtype;
  if (descr == "'<f4'") dtype = tensor::DType::f32;
  else if (descr == "'<f8'") dtype = tensor::DType::f64;
  else throw FormatError("'" + path + "': unsupported dtype " + descr + " (float32/float64 little-endian only)");
  if (fortran != "False") throw FormatError("'" + path + "': Fortran-order arrays are not supported");
  // Dimensions: non-negative decimal integers (std::stoll threw std::invalid_argument past the
  // FormatError contract), and the byte count is checked against the file before allocating, so
  // a header claiming a huge shape cannot ask for terabytes (both found by fuzz/table_fuzz.cpp).
  if (shape_s.empty() || shape_s.front() != '(' || shape_s.back() != ')')
    throw FormatError("'" + path + "': shape " + shape_s + ": a tuple expected");
  tensor::Shape shape;
  const std::uint64_t avail = size - data_start;
  std::uint64_t need = dtype == tensor::DType::f32 ? 4 : 8;
  for (std::size_t i = 1; i < shape_s.size();) {
    const std::size_t j = shape_s.find_first_of(",)", i);
    const std::size_t b = shape_s.find_first_not_of(' ', i);
    if (b < j) {
      const std::size_t e = shape_s.find_last_not_of(' ', j - 1) + 1;
      std::int64_t d = -1;
      const auto [ptr, ec] = std::from_chars(shape_s.data() + b, shape_s.data() + e, d);
      if (ec != std::errc() || ptr != shape_s.data() + e || d < 0)
        throw FormatError(std::string("'").append(path).append("': shape ").append(shape_s).append(": bad dimension '")
                              .append(shape_s, b, e - b).append("'"));
      const auto ud = static_cast<std::uint64_t>(d);
      need = (ud != 0 && need > avail / ud) ? avail + 1 : need * ud;  // saturate: more than the file holds
      shape.push_back(d);
    }
    i = j + 1;
  }
  if (shape.empty() || shape.size() > 2) throw FormatError("'" + path + "': shape " + shape_s + ": 1-D or 2-D expected");
  if (need != avail)
    throw FormatError("'" + path + "': data is " + std::to_string(avail) + " bytes, shape " + shape_s + " needs " +
                      (need > avail ? "more" : std::to_string(need)));
  tensor::Tensor t = tensor::Tensor::empty(shape, dtype);
  in.seekg(static_cast<std::streamoff>(data_start));
  in.read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(t.nbytes()));
  return t;
}

void write_npy(const std::string& path, const tensor::Tensor& t) {
  FTCC_CHECK(t.dim() >= 1 && t.dim() <= 2) << "write_npy: 1-D or 2-D tensors only";
  std::ostringstream shape_os;  // (a GCC 12 -Wrestrict false positive fires on the string-+ chain)
  shape_os << '(' << t.size(0) << (t.dim() == 1 ? "," : ", ");
  if (t.dim() == 2) shape_os << t.size(1);
  shape_os << ')';
  std::string shape = shape_os.str();
  std::string header = std::string("{'descr': '") + (t.dtype() == tensor::DType::f32 ? "<f4" : "<f8") +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad so that the data starts on a 64-byte boundary, ending the header with a newline.
  std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("write_npy: cannot open '" + path + "'");
  out.write("\x93NUMPY\x01\x00", 8);
  unsigned char len[2] = {static_cast<unsigned char>(header.size() & 0xff), static_cast<unsigned char>(header.size() >> 8)};
  out.write(reinterpret_cast<const char*>(len), 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  tensor::Tensor host = t.to(tensor::Device::CPU);
  out.write(static_cast<const char*>(host.raw_data()), static_cast<std::streamsize>(host.nbytes()));
  if (!out) throw Error("write_npy: write to '" + path + "' failed");
}

}  // namespace ftcc::data
