// train/training_progress.hpp: the training position, one type with one encoding per medium.
//
// What must be identical on every rank after each committed step: the data cursor, the steps
// committed, and what those steps fed to the model (samples_seen and samples_digest: a
// data::SampleTally counted from the rows actually consumed, summed over the ranks). It is
// restored with the model after a failure, on --resume and when a spare or a respawned process
// joins. Two encodings, used everywhere the position travels or is stored:
//   words()/from_words()  kWords int64 words, for collectives: the progress agreement after a
//                         recovery, rank 0's verdict on a checkpoint it read at start-up
//   write_to()/read_from() the fields of a checkpoint record (JSON; samples_digest as 16 hex
//                         digits, absent in records written before it existed, where it reads 0)
// describe() is the text every message about a position uses.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "ftcc/data/sampler.hpp"

namespace ftcc::train {

struct TrainProgress {
  data::Cursor cursor;
  std::int64_t step = 0;  // global steps committed
  std::int64_t samples_seen = 0;
  std::uint64_t samples_digest = 0;

  data::SampleTally tally() const { return {samples_seen, samples_digest}; }
  void add(const data::SampleTally& t) {
    samples_seen += t.count;
    samples_digest += t.digest;
  }
  bool operator==(const TrainProgress&) const = default;

  static constexpr std::size_t kWords = 5;  // step, cursor epoch, cursor step, samples, digest
  using Words = std::array<std::int64_t, kWords>;
  Words words() const;
  // Pre: w points at kWords words written by words().
  static TrainProgress from_words(const std::int64_t* w);

  // Adds step, epoch, cursor_step, samples_seen and samples_digest to `record`.
  void write_to(nlohmann::json& record) const;
  // Reads them back; throws nlohmann::json's exceptions when a field is missing or of the wrong
  // type, and ftcc::InvalidArgument when samples_digest is not 16 hex digits.
  static TrainProgress read_from(const nlohmann::json& record);

  // "step S (epoch E, batch C), N samples seen (digest D)"
  std::string describe() const;
};

}  // namespace ftcc::train
