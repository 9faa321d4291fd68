#include "ftcc/train/training_progress.hpp"

#include <bit>

namespace ftcc::train {

TrainProgress::Words TrainProgress::words() const {
  return {step, cursor.epoch, cursor.step, samples_seen, std::bit_cast<std::int64_t>(samples_digest)};
}

TrainProgress TrainProgress::from_words(const std::int64_t* w) {
  return TrainProgress{.cursor = {w[1], w[2]}, .step = w[0], .samples_seen = w[3],
                       .samples_digest = std::bit_cast<std::uint64_t>(w[4])};
}

void TrainProgress::write_to(nlohmann::json& record) const {
  record["step"] = step;
  record["epoch"] = cursor.epoch;
  record["cursor_step"] = cursor.step;
  record["samples_seen"] = samples_seen;
  record["samples_digest"] = data::digest_hex(samples_digest);
}

TrainProgress TrainProgress::read_from(const nlohmann::json& record) {
  TrainProgress p;
  p.step = record.at("step").get<std::int64_t>();
  p.cursor.epoch = record.at("epoch").get<std::int64_t>();
  p.cursor.step = record.at("cursor_step").get<std::int64_t>();
  p.samples_seen = record.at("samples_seen").get<std::int64_t>();
  if (record.contains("samples_digest"))
    p.samples_digest = data::parse_digest_hex(record.at("samples_digest").get<std::string>());
  return p;
}

std::string TrainProgress::describe() const {
  return "step " + std::to_string(step) + " (epoch " + std::to_string(cursor.epoch) + ", batch " +
         std::to_string(cursor.step) + "), " + std::to_string(samples_seen) + " samples seen (digest " +
         data::digest_hex(samples_digest) + ")";
}

}  // namespace ftcc::train
