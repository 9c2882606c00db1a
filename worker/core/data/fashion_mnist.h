// Loads Fashion-MNIST (Debian package `dataset-fashion-mnist`) from its four IDX .gz files.
#pragma once

#include <atomic>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/core/data/dataset.h"
#include "worker/core/data/idx_reader.h"

namespace kubetrain::worker {

inline constexpr absl::string_view kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// The two splits plus the normalisation (train statistics) applied to both.
struct FashionMnist {
  Dataset train;
  Dataset test;
  Normalization normalization;
};

// Reads train-{images,labels} and t10k-{images,labels} under `dir`. A missing file is one
// NOT_FOUND error that names the path and the Debian package to install; malformed files give
// the IdxReader errors; images and labels that disagree give INVALID_ARGUMENT. CANCELLED soon
// after `stop` (when given) turns true: loading takes about a second.
absl::StatusOr<FashionMnist> LoadFashionMnist(absl::string_view dir = kDefaultFashionMnistDir,
                                              const std::atomic<bool>* stop = nullptr);

// Converts raw uint8 IDX images [n, h, w] and labels [n] into a Dataset, scaling pixels by
// `norm`. Exposed for tests and for other IDX datasets of the same layout. `images_file` and
// `labels_file` name the files they came from: each error names the file at fault.
absl::StatusOr<Dataset> MakeDataset(const IdxArray& images, const IdxArray& labels,
                                    const Normalization& norm, absl::string_view images_file,
                                    absl::string_view labels_file);

// Mean and standard deviation of pixel/255 over every pixel of `images`.
Normalization ComputeNormalization(const IdxArray& images);

}  // namespace kubetrain::worker
