#include "worker/core/data/idx_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/huge_pages.h"
#include "common/status.h"

namespace kubetrain::worker {
namespace {

struct GzCloser {
  void operator()(gzFile file) const { gzclose(file); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Deflate cannot compress better than about 1032:1, so a gzip file of n bytes holds at most
// this many times n bytes: a header claiming more is a lie we can refuse before reading.
constexpr uint64_t kMaxDeflateRatio = 1032;
// Data is read in chunks of this size, so memory grows with what the file really holds, not
// with what its header claims.
constexpr size_t kReadChunk = size_t{4} << 20;

const char* FileKind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

struct OpenedFile {
  GzFile file;
  uint64_t bytes = 0;  // size on disk
  bool gzip = false;   // starts with the gzip magic
};

absl::StatusOr<OpenedFile> Open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat("IDX file ", path, " not found"));
    return absl::PermissionDeniedError(
        absl::StrCat("cannot open IDX file ", path, ": ", std::strerror(err)));
  }
  struct stat st;
  const bool stat_ok = fstat(fd, &st) == 0;
  if (!stat_ok || !S_ISREG(st.st_mode)) {
    const char* kind = stat_ok ? FileKind(st.st_mode) : "unreadable";
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        "IDX file ", path, " is ", kind,
        ", not a regular file; replace it with the IDX file or point --data-dir elsewhere"));
  }
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  OpenedFile out;
  out.bytes = static_cast<uint64_t>(st.st_size);
  uint8_t magic[2] = {};
  out.gzip = pread(fd, magic, sizeof(magic), 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  out.file.reset(gzdopen(fd, "rb"));  // takes the descriptor; reads plain files transparently
  if (out.file == nullptr) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot open IDX file ", path));
  }
  gzbuffer(out.file.get(), 1 << 20);
  return out;
}

// One gzread of the bytes [done, end) of `out` (at most INT_MAX / 2 of them): how many arrived,
// or why none did (a corrupt stream, or its end before the `size` bytes of `what` expected).
absl::StatusOr<size_t> ReadSome(gzFile file, const std::string& path, uint8_t* out, size_t done,
                                size_t end, size_t size, absl::string_view what) {
  const unsigned chunk = static_cast<unsigned>(std::min<size_t>(end - done, INT_MAX / 2));
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
  return static_cast<size_t>(got);
}

// Reads exactly `size` bytes or explains what went wrong.
absl::Status ReadExactly(gzFile file, const std::string& path, uint8_t* out, size_t size,
                         absl::string_view what) {
  size_t done = 0;
  while (done < size) {
    ASSIGN_OR_RETURN(const size_t got, ReadSome(file, path, out, done, size, size, what));
    done += got;
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

// The data size the header declares, checked against what a file of `opened.bytes` can hold.
absl::StatusOr<size_t> DeclaredSize(const std::string& path, const std::vector<int64_t>& dims,
                                    const OpenedFile& opened) {
  const std::string shape = absl::StrJoin(dims, "x");
  uint64_t size = 1;
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(size, static_cast<uint64_t>(d), &size)) {
      return absl::DataLossError(
          absl::StrCat("IDX file ", path, " declares an impossible shape ", shape));
    }
  }
  const uint64_t header = 4 + 4 * dims.size();
  const uint64_t on_disk = opened.bytes > header ? opened.bytes - header : 0;
  if (!opened.gzip && size > on_disk) {
    return absl::DataLossError(absl::StrCat("IDX file ", path,
                                            " is truncated: its header declares ", shape, " = ",
                                            size, " data bytes, the file holds ", on_disk));
  }
  uint64_t most = 0;
  if (opened.gzip &&
      (__builtin_mul_overflow(opened.bytes, kMaxDeflateRatio, &most) || size > most)) {
    return absl::DataLossError(
        absl::StrCat("IDX file ", path, " is truncated: its header declares ", shape, " = ", size,
                     " data bytes, more than a gzip file of ", opened.bytes, " bytes can hold"));
  }
  if (size > SIZE_MAX) {
    return absl::DataLossError(
        absl::StrCat("IDX file ", path, " declares an impossible shape ", shape));
  }
  return static_cast<size_t>(size);
}

// Reads the `size` data bytes into `data`, growing it chunk by chunk: a gzip stream may still
// decompress to less than its header declares, and memory should follow what really arrives. The
// memory is on huge pages where the kernel has them (common/huge_pages.h): Fashion-MNIST's
// training images are 47 MB.
absl::Status ReadData(gzFile file, const std::string& path, size_t size, std::vector<uint8_t>& data,
                      const std::atomic<bool>* stop) {
  size_t done = 0;
  while (done < size) {
    if (stop != nullptr && stop->load()) {
      return absl::CancelledError(absl::StrCat("stopped while reading IDX file ", path));
    }
    if (data.size() == done) ResizeOnHugePages(data, done + std::min(kReadChunk, size - done));
    ASSIGN_OR_RETURN(const size_t got,
                     ReadSome(file, path, data.data(), done, data.size(), size, "data"));
    done += got;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<IdxArray> ReadIdx(absl::string_view path_view, uint32_t expected_magic,
                                 const std::atomic<bool>* stop) {
  const std::string path(path_view);
  ASSIGN_OR_RETURN(OpenedFile opened, Open(path));
  gzFile file = opened.file.get();
  ASSIGN_OR_RETURN(uint32_t magic, ReadBigEndian32(file, path, "header"));
  if (magic != expected_magic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "IDX file %s has magic 0x%08x, expected 0x%08x", path, magic, expected_magic));
  }
  IdxArray array;
  ASSIGN_OR_RETURN(array.dims, ReadDims(file, path, static_cast<int>(magic & 0xff)));
  ASSIGN_OR_RETURN(const size_t size, DeclaredSize(path, array.dims, opened));
  RETURN_IF_ERROR(ReadData(file, path, size, array.data, stop));
  return array;
}

}  // namespace kubetrain::worker
