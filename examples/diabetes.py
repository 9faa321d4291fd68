"""The diabetes data set (442 patients, 10 features, 1 target; scikit-learn's copy, in
data/datasets/), standardized, as float32 tensors. FTCC_DATA_DIR overrides the folder."""
import gzip
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def load():
    folder = os.environ.get("FTCC_DATA_DIR") or os.path.join(os.path.dirname(HERE), "data", "datasets")

    def table(name):
        with gzip.open(os.path.join(folder, name), "rt") as f:
            return torch.tensor([[float(v) for v in line.split()] for line in f if line.strip()], dtype=torch.float64)

    x, y = table("diabetes_data_raw.csv.gz"), table("diabetes_target.csv.gz")
    if x.shape != (442, 10) or y.shape != (442, 1):
        raise ValueError(f"diabetes in {folder}: expected 442 x 10 features and 442 targets, got {tuple(x.shape)} "
                         f"and {tuple(y.shape)}")
    x = (x - x.mean(0)) / x.std(0)
    y = (y - y.mean()) / y.std()
    return x.float(), y.float()
