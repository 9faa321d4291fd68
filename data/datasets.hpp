// data/datasets.hpp: the two data sets shipped in data/datasets/ (scikit-learn, BSD-3; see
// data/datasets/LICENSE-sklearn).
//
//   diabetes: 442 samples x 10 raw features (age, sex, bmi, bp, s1..s6) -> 1 target
//             (disease progression after one year). Raw, unscaled: standardize before training.
//   digits:   1797 samples x 64 pixel intensities (0..16, 8x8 images) -> 10 classes, targets
//             one-hot [1797, 10] (for MSE training) and labels 0..9.
//
// default_dataset_dir(): $FTCC_DATA_DIR if set; else the installation's share/ftcc/datasets,
// found relative to the file holding this code (libftcc.so, or the program libftcc.a or the layers
// were linked into), so a moved or DESTDIR installation uses its own copy; else, for a program run
// from the build folder, the source tree's data/datasets. Otherwise the installation's path, which
// the loaders then name in their "cannot open" error: never a checkout's copy by accident.
#pragma once

#include <string>

#include "ftcc/data/dataset.hpp"

namespace ftcc::data {

std::string default_dataset_dir();
Dataset load_diabetes(const std::string& dir = default_dataset_dir());
Dataset load_digits(const std::string& dir = default_dataset_dir());

}  // namespace ftcc::data
