#include "train/train_config.hpp"

#include <cmath>
#include <sstream>
#include <utility>

#include "base/error.hpp"
#include "recovery/fault_spec.hpp"

namespace ftcc::train {
namespace {

bool one_of(const std::string& v, std::initializer_list<const char*> allowed) {
  for (const char* a : allowed)
    if (v == a) return true;
  return false;
}

}  // namespace

void TrainConfig::validate() const {
  FTCC_REQUIRE(one_of(parallel, {"dp", "pp", "tp"})) << "--parallel '" << parallel << "': expected dp, pp or tp";
  FTCC_REQUIRE(one_of(activation, {"relu", "tanh", "sigmoid"}))
      << "--activation '" << activation << "': expected relu, tanh or sigmoid";
  FTCC_REQUIRE(one_of(optimizer, {"sgd", "adam", "adamw"})) << "--optimizer '" << optimizer << "': expected sgd, adam or adamw";
  FTCC_REQUIRE(one_of(device, {"cpu", "cuda"})) << "--device '" << device << "': expected cpu or cuda";
  FTCC_REQUIRE(one_of(on_failure, {"keep-global-batch", "keep-local-batch"}))
      << "--on-failure '" << on_failure << "': expected keep-global-batch or keep-local-batch";
  FTCC_REQUIRE(epochs >= 0 && steps >= 0) << "--epochs and --steps must be >= 0";
  FTCC_REQUIRE(!(epochs > 0 && steps > 0)) << "give --epochs or --steps, not both";
  FTCC_REQUIRE(batch > 0) << "--batch must be > 0, got " << batch;
  FTCC_REQUIRE(micro_batch > 0) << "--micro-batch must be > 0, got " << micro_batch;
  FTCC_REQUIRE(lr > 0) << "--lr must be > 0, got " << lr;
  FTCC_REQUIRE(momentum >= 0 && momentum < 1) << "--momentum must be in [0, 1), got " << momentum;
  FTCC_REQUIRE(weight_decay >= 0) << "--weight-decay must be >= 0";
  // Non-finite values pass the range checks below (inf > 0) and then overflow the conversions
  // to milliseconds and bytes (undefined behaviour); found by fuzz/train_config_fuzz.cpp.
  for (const auto& [flag, v] : {std::pair<const char*, double>{"--lr", lr}, {"--momentum", momentum},
                                {"--weight-decay", weight_decay}, {"--hang-timeout", hang_timeout_s},
                                {"--held-out", held_out}, {"--bucket-mb", bucket_mb}})
    FTCC_REQUIRE(std::isfinite(v)) << flag << " must be a finite number, got " << v;
  FTCC_REQUIRE(hang_timeout_s >= 0 && hang_timeout_s <= 1e6) << "--hang-timeout must be in [0, 1e6] seconds";
  FTCC_REQUIRE(checkpoint_every >= 0) << "--checkpoint-every must be >= 0";
  FTCC_REQUIRE(checkpoint_every == 0 || !checkpoint_dir.empty()) << "--checkpoint-every needs --checkpoint-dir";
  FTCC_REQUIRE(held_out > 0 && held_out < 1) << "--held-out must be in (0, 1), got " << held_out;
  FTCC_REQUIRE(bucket_mb > 0 && bucket_mb <= 1e6) << "--bucket-mb must be in (0, 1e6]";
  FTCC_REQUIRE(metrics_port < 65536) << "--metrics-port must be < 65536";
  FTCC_REQUIRE(micro_batches > 0) << "--micro-batches must be > 0";
  FTCC_REQUIRE(replicas >= 0 && replicate_every > 0) << "--replicas >= 0 and --replicate-every > 0";
  if (!layers.empty()) {
    FTCC_REQUIRE(layers.size() >= 2) << "--layers needs at least two widths (input,output), got " << layers.size();
    for (auto w : layers) FTCC_REQUIRE(w > 0) << "--layers widths must be > 0, got " << w;
  }
  recovery::parse_fault_specs(inject);  // throws with the grammar
}

std::string TrainConfig::canonical() const {
  std::ostringstream os;
  os.precision(17);
  os << "parallel=" << parallel << " layers=";
  for (auto w : layers) os << w << ',';
  os << " activation=" << activation << " dataset=" << dataset << " epochs=" << epochs << " steps=" << steps
     << " batch=" << batch << " micro_batch=" << micro_batch << " lr=" << lr << " optimizer=" << optimizer
     << " momentum=" << momentum << " weight_decay=" << weight_decay << " seed=" << seed << " device=" << device
     << " deterministic=" << deterministic << " on_failure=" << on_failure << " hang_timeout=" << hang_timeout_s
     << " checkpoint_every=" << checkpoint_every << " resume=" << resume << " held_out=" << held_out
     << " bucket_mb=" << bucket_mb << " micro_batches=" << micro_batches << " replicas=" << replicas
     << " replicate_every=" << replicate_every << " inject=";
  for (const auto& s : inject) os << s << ';';
  return os.str();
}

}  // namespace ftcc::train
