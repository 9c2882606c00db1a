#include "worker/data/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"

namespace kubetrain::worker {
namespace {

struct GzCloser {
  void operator()(gzFile file) const { gzclose(file); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

absl::StatusOr<GzFile> Open(const std::string& path) {
  // gzopen reads plain files transparently; check existence first for a precise error code.
  std::FILE* probe = std::fopen(path.c_str(), "rb");
  if (probe == nullptr) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("IDX file ", path, " not found"));
    return absl::PermissionDeniedError(absl::StrCat("cannot open IDX file ", path));
  }
  std::fclose(probe);
  GzFile file(gzopen(path.c_str(), "rb"));
  if (file == nullptr) return absl::UnavailableError(absl::StrCat("cannot open IDX file ", path));
  gzbuffer(file.get(), 1 << 20);
  return file;
}

// Reads exactly `size` bytes or explains what went wrong.
absl::Status ReadExactly(gzFile file, const std::string& path, uint8_t* out, size_t size,
                         absl::string_view what) {
  size_t done = 0;
  while (done < size) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(size - done, INT_MAX / 2));
    const int got = gzread(file, out + done, chunk);
    if (got < 0) {
      int code = 0;
      return absl::DataLossError(
          absl::StrCat("IDX file ", path, " is corrupt: ", gzerror(file, &code)));
    }
    if (got == 0) {
      return absl::DataLossError(absl::StrCat("IDX file ", path, " is truncated: expected ", size,
                                              " ", what, " bytes, read ", done));
    }
    done += static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> ReadBigEndian32(gzFile file, const std::string& path,
                                         absl::string_view what) {
  uint8_t b[4];
  RETURN_IF_ERROR(ReadExactly(file, path, b, sizeof(b), what));
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

absl::StatusOr<std::vector<int64_t>> ReadDims(gzFile file, const std::string& path, int rank) {
  std::vector<int64_t> dims;
  for (int i = 0; i < rank; ++i) {
    ASSIGN_OR_RETURN(uint32_t dim, ReadBigEndian32(file, path, "header"));
    if (dim > INT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat("IDX file ", path, " has a negative dimension ", static_cast<int32_t>(dim)));
    }
    dims.push_back(dim);
  }
  return dims;
}

}  // namespace

absl::StatusOr<IdxArray> ReadIdx(absl::string_view path_view, uint32_t expected_magic) {
  const std::string path(path_view);
  ASSIGN_OR_RETURN(GzFile file, Open(path));
  ASSIGN_OR_RETURN(uint32_t magic, ReadBigEndian32(file.get(), path, "header"));
  if (magic != expected_magic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "IDX file %s has magic 0x%08x, expected 0x%08x", path, magic, expected_magic));
  }
  IdxArray array;
  ASSIGN_OR_RETURN(array.dims, ReadDims(file.get(), path, static_cast<int>(magic & 0xff)));
  size_t size = 1;
  for (int64_t d : array.dims) size *= static_cast<size_t>(d);
  array.data.resize(size);
  RETURN_IF_ERROR(ReadExactly(file.get(), path, array.data.data(), size, "data"));
  return array;
}

}  // namespace kubetrain::worker
