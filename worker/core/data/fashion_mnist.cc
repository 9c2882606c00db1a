#include "worker/core/data/fashion_mnist.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/huge_pages.h"
#include "common/logging.h"
#include "common/status.h"

namespace kubetrain::worker {
namespace {

struct SplitFiles {
  std::string images;
  std::string labels;
};

SplitFiles FilesOf(absl::string_view dir, absl::string_view prefix) {
  return {absl::StrCat(dir, "/", prefix, "-images-idx3-ubyte.gz"),
          absl::StrCat(dir, "/", prefix, "-labels-idx1-ubyte.gz")};
}

// Checked before reading anything so a missing installation is one clear error, not four.
absl::Status CheckInstalled(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    std::error_code ignored;
    if (!std::filesystem::exists(path, ignored)) {
      return absl::NotFoundError(
          absl::StrCat("Fashion-MNIST file ", path,
                       " not found; install the Debian package dataset-fashion-mnist "
                       "(apt-get install dataset-fashion-mnist) or point --data-dir at a copy"));
    }
  }
  return absl::OkStatus();
}

struct RawSplit {
  IdxArray images;
  IdxArray labels;
};

absl::StatusOr<RawSplit> ReadSplit(const SplitFiles& files, const std::atomic<bool>* stop) {
  RawSplit raw;
  ASSIGN_OR_RETURN(raw.images, ReadIdx(files.images, kIdxImagesMagic, stop));
  ASSIGN_OR_RETURN(raw.labels, ReadIdx(files.labels, kIdxLabelsMagic, stop));
  return raw;
}

}  // namespace

Normalization ComputeNormalization(const IdxArray& images) {
  // Integer histogram first: exact and cheaper than summing 47M floats.
  int64_t histogram[256] = {};
  for (uint8_t p : images.data) ++histogram[p];
  double sum = 0.0, sum_sq = 0.0;
  for (int v = 0; v < 256; ++v) {
    const double x = v / 255.0;
    sum += histogram[v] * x;
    sum_sq += histogram[v] * x * x;
  }
  const double n = std::max<double>(1.0, static_cast<double>(images.data.size()));
  const double mean = sum / n;
  const double var = std::max(0.0, sum_sq / n - mean * mean);
  return {static_cast<float>(mean), static_cast<float>(var > 0.0 ? std::sqrt(var) : 1.0)};
}

absl::StatusOr<Dataset> MakeDataset(const IdxArray& images, const IdxArray& labels,
                                    const Normalization& norm, absl::string_view images_file,
                                    absl::string_view labels_file) {
  if (images.dims.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(images_file, ": holds ", images.dims.size(),
                                                   " dimensions; images are [n, height, width]"));
  }
  if (labels.dims.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(labels_file, ": holds ", labels.dims.size(), " dimensions; labels are [n]"));
  }
  if (images.dims[0] != labels.dims[0]) {
    return absl::InvalidArgumentError(
        absl::StrCat(labels_file, " holds ", labels.dims[0], " labels but ", images_file, " holds ",
                     images.dims[0], " images: the two files are not of one data set"));
  }
  Dataset data;
  data.height = static_cast<int>(images.dims[1]);
  data.width = static_cast<int>(images.dims[2]);
  // One lookup table turns every byte into its normalised float.
  float table[256];
  for (int v = 0; v < 256; ++v) table[v] = (v / 255.0f - norm.mean) / norm.stddev;
  // 188 MB for the training images: on huge pages where the kernel has them, so that the first
  // touch is a few hundred faults, not 46,000 (docs/architecture.md §8).
  ResizeOnHugePages(data.images, images.data.size());
  for (size_t i = 0; i < images.data.size(); ++i) data.images[i] = table[images.data[i]];
  data.labels.resize(labels.data.size());
  for (size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= data.num_classes) {
      return absl::InvalidArgumentError(absl::StrCat(labels_file, ": label ", labels.data[i],
                                                     " of example ", i, " is out of range (0 to ",
                                                     data.num_classes - 1, ")"));
    }
    data.labels[i] = labels.data[i];
  }
  return data;
}

absl::StatusOr<FashionMnist> LoadFashionMnist(absl::string_view dir,
                                              const std::atomic<bool>* stop) {
  const absl::Time started = absl::Now();
  const SplitFiles train_files = FilesOf(dir, "train");
  const SplitFiles test_files = FilesOf(dir, "t10k");
  RETURN_IF_ERROR(CheckInstalled(
      {train_files.images, train_files.labels, test_files.images, test_files.labels}));
  ASSIGN_OR_RETURN(RawSplit train, ReadSplit(train_files, stop));
  ASSIGN_OR_RETURN(RawSplit test, ReadSplit(test_files, stop));
  if (stop != nullptr && stop->load()) return absl::CancelledError("stopped while loading");
  FashionMnist out;
  out.normalization = ComputeNormalization(train.images);
  ASSIGN_OR_RETURN(out.train, MakeDataset(train.images, train.labels, out.normalization,
                                          train_files.images, train_files.labels));
  ASSIGN_OR_RETURN(out.test, MakeDataset(test.images, test.labels, out.normalization,
                                         test_files.images, test_files.labels));
  log::Info("Loaded Fashion-MNIST", {{"dir", std::string(dir)},
                                     {"train", out.train.size()},
                                     {"test", out.test.size()},
                                     {"mean", out.normalization.mean},
                                     {"stddev", out.normalization.stddev},
                                     {"seconds", absl::ToDoubleSeconds(absl::Now() - started)}});
  return out;
}

}  // namespace kubetrain::worker
