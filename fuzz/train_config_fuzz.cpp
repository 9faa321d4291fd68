// fuzz/train_config_fuzz.cpp: ftcc-train's configuration checks (TrainConfig::validate, which also
// parses every --inject spec) and canonical(). The CLI11 flag table lives in tools/ftcc_train.cpp
// (CLI11 itself is not ours); here the fuzzer fills the parsed struct directly: every numeric
// field from the input's bytes (NaN, inf, huge and negative values included), the strings and
// fault specs from its text. An accepted configuration must be one ftcc-train can run with:
// finite numbers, a representable hang timeout in ms, positive sizes.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "ftcc/base/error.hpp"
#include "ftcc/train/train_config.hpp"

namespace {

struct Reader {
  const std::uint8_t* p;
  std::size_t n;
  template <class T>
  T take() {
    T v{};
    const std::size_t k = n < sizeof(T) ? n : sizeof(T);
    std::memcpy(&v, p, k);
    p += k;
    n -= k;
    return v;
  }
  double real() {
    // Half the time a "nice" value from a small table, so the other fields can pass too.
    const std::uint8_t sel = take<std::uint8_t>();
    static const double nice[] = {0.0, 0.5, 1.0, 2.0, 0.05, 1e-9, 64, -1.0, 1e300, -0.0};
    if (sel < 128) return nice[sel % 10];
    if (sel < 140) return std::numeric_limits<double>::infinity();
    if (sel < 150) return std::numeric_limits<double>::quiet_NaN();
    return take<double>();
  }
  std::int64_t integer() {
    const std::uint8_t sel = take<std::uint8_t>();
    if (sel < 200) return static_cast<std::int64_t>(sel % 70) - 2;
    return take<std::int64_t>();
  }
  std::string text() {
    const std::uint8_t len = take<std::uint8_t>() % 48;
    std::string s;
    for (std::uint8_t i = 0; i < len && n; ++i) s.push_back(static_cast<char>(take<std::uint8_t>()));
    return s;
  }
  const char* pick(std::initializer_list<const char*> v) {
    const std::uint8_t i = take<std::uint8_t>();
    return v.begin()[i % v.size()];
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Reader r{data, size};
  ftcc::train::TrainConfig c;
  // The choices go through the parser ftcc-train uses (a wrong name is refused there).
  try {
    namespace t = ftcc::train;
    c.parallel = t::parse_choice<t::Parallel>("--parallel", r.pick({"dp", "pp", "tp", "xx"}));
    c.activation = t::parse_choice<t::Activation>("--activation", r.pick({"relu", "tanh", "sigmoid", ""}));
    c.optimizer = t::parse_choice<t::OptimizerKind>("--optimizer", r.pick({"sgd", "adam", "adamw", "rmsprop"}));
    c.device = t::parse_choice<t::Device>("--device", r.pick({"cpu", "cuda", "tpu"}));
    c.on_failure = t::parse_choice<t::OnFailure>("--on-failure", r.pick({"keep-global-batch", "keep-local-batch", "x"}));
  } catch (const ftcc::InvalidArgument&) {
    return 0;
  }
  const int nl = r.take<std::uint8_t>() % 5;
  for (int i = 0; i < nl; ++i) c.layers.push_back(r.integer());
  c.epochs = r.integer();
  c.steps = r.integer();
  c.batch = r.integer();
  c.micro_batch = r.integer();
  c.lr = r.real();
  c.momentum = r.real();
  c.weight_decay = r.real();
  c.hang_timeout_s = r.real();
  c.held_out = r.real();
  c.bucket_mb = r.real();
  c.checkpoint_every = r.integer();
  if (r.take<std::uint8_t>() & 1) c.checkpoint_dir = "ck";
  c.metrics_port = static_cast<int>(r.integer());
  c.micro_batches = static_cast<int>(r.integer());
  c.replicas = static_cast<int>(r.integer());
  c.replicate_every = static_cast<int>(r.integer());
  const int ni = r.take<std::uint8_t>() % 3;
  for (int i = 0; i < ni; ++i) c.inject.push_back(r.text());
  c.dataset = r.text();
  bool ok = true;
  try {
    c.validate();
  } catch (const ftcc::Error&) {
    ok = false;
  }
  (void)c.canonical();
  if (ok) {
    // What ftcc-train does next with these values must be defined behaviour.
    for (double v : {c.lr, c.momentum, c.weight_decay, c.hang_timeout_s, c.held_out, c.bucket_mb})
      if (!std::isfinite(v)) __builtin_trap();
    if (c.hang_timeout_s * 1000 > static_cast<double>(std::numeric_limits<long long>::max())) __builtin_trap();
  }
  return 0;
}
