// train/training_data.hpp: the --dataset argument turned into standardized train/held-out sets.
//
//   diabetes                 442 x 10 -> 1 (regression; eval metric: held-out MSE)
//   digits                   1797 x 64 -> 10 one-hot (classification; eval metric: accuracy)
//   synthetic:N:IN:OUT       N samples of IN standard-normal features from Philox(seed), targets
//                            from a fixed random linear teacher plus tanh (regression)
//   PATH.csv / PATH.csv.gz   numeric table, the last column is the target (regression)
//   PATH.npy                 2-D float array, the last column is the target (regression)
// Every rank loads the same data and gets the same split (seeded), so ids mean the same samples.
// Features are standardized with statistics of the training part only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ftcc/comm/communicator.hpp"
#include "ftcc/data/dataset.hpp"

namespace ftcc::train {

struct TrainingData {
  std::string name;
  data::Dataset train, test;
  bool classification = false;
  int classes = 0;
};

// Whether --dataset `spec` names a classification set (targets are one-hot class rows; eval metric
// accuracy): digits. What load_training_data sets as `classification`.
bool is_classification_dataset(const std::string& spec);

// share: the ranks of the job; they then make synthetic data together (each rank 1/size of the
// rows, one allgather; the same bits as one rank alone). Other datasets are read by every rank.
// A failure of a rank meanwhile throws comm::FaultDetected (a collective, comm/collectives.hpp).
TrainingData load_training_data(const std::string& spec, std::uint64_t seed, double held_out,
                                comm::Communicator* share = nullptr);

// synthetic:N:IN:OUT parsed and size-checked (each of N x IN, N x OUT, IN x OUT at most 2^31
// values, computed without overflow); throws InvalidArgument naming the spec.
struct SyntheticShape {
  std::int64_t n = 0, in = 0, out = 0;
};
SyntheticShape parse_synthetic_spec(const std::string& spec);

// The model's layer widths: `layers` (from --layers) checked against the data (first = features,
// last = target columns), or {features, 64, targets} when empty. Throws InvalidArgument naming
// `dataset` on a mismatch.
std::vector<std::int64_t> model_widths(const std::vector<std::int64_t>& layers, const TrainingData& td,
                                       const std::string& dataset);

}  // namespace ftcc::train
