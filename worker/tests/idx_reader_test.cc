#include "worker/core/data/idx_reader.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <string>
#include <vector>

namespace kubetrain::worker {
namespace {

std::vector<uint8_t> BigEndian(uint32_t v) {
  return {static_cast<uint8_t>(v >> 24), static_cast<uint8_t>(v >> 16),
          static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v)};
}

// Header for `magic` with `dims`, followed by `data`.
std::vector<uint8_t> IdxBytes(uint32_t magic, const std::vector<uint32_t>& dims,
                              const std::vector<uint8_t>& data) {
  std::vector<uint8_t> bytes = BigEndian(magic);
  for (uint32_t d : dims) {
    auto b = BigEndian(d);
    bytes.insert(bytes.end(), b.begin(), b.end());
  }
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

std::string TempPath(const std::string& name) { return ::testing::TempDir() + "/" + name; }

std::string WriteGz(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = TempPath(name);
  gzFile f = gzopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  gzclose(f);
  return path;
}

std::string WritePlain(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = TempPath(name);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  return path;
}

std::vector<uint8_t> Iota(int n) {
  std::vector<uint8_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7);
  return v;
}

TEST(IdxReader, ReadsGzipImages) {
  const std::vector<uint8_t> pixels = Iota(3 * 2 * 4);
  const std::string path = WriteGz("images.gz", IdxBytes(kIdxImagesMagic, {3, 2, 4}, pixels));
  auto array = ReadIdx(path, kIdxImagesMagic);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->dims, (std::vector<int64_t>{3, 2, 4}));
  EXPECT_EQ(array->data, pixels);
}

TEST(IdxReader, ReadsGzipLabels) {
  const std::vector<uint8_t> labels = {9, 0, 3, 3, 1};
  const std::string path = WriteGz("labels.gz", IdxBytes(kIdxLabelsMagic, {5}, labels));
  auto array = ReadIdx(path, kIdxLabelsMagic);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->dims, (std::vector<int64_t>{5}));
  EXPECT_EQ(array->data, labels);
}

TEST(IdxReader, ReadsUncompressedFile) {
  const std::vector<uint8_t> labels = {1, 2};
  const std::string path = WritePlain("labels.idx", IdxBytes(kIdxLabelsMagic, {2}, labels));
  auto array = ReadIdx(path, kIdxLabelsMagic);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->data, labels);
}

TEST(IdxReader, CutGzipStreamIsDataLoss) {
  const std::string full = WriteGz("full.gz", IdxBytes(kIdxImagesMagic, {4, 28, 28}, Iota(3136)));
  std::FILE* f = std::fopen(full.c_str(), "rb");
  std::vector<uint8_t> bytes(4096);
  bytes.resize(std::fread(bytes.data(), 1, bytes.size(), f));
  std::fclose(f);
  bytes.resize(bytes.size() / 2);
  const std::string path = WritePlain("cut.gz", bytes);
  auto array = ReadIdx(path, kIdxImagesMagic);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kDataLoss) << array.status();
}

// A file the reader refuses: its bytes (gzipped or not), the magic the read expects, and the
// error, whose message is "IDX file <path>" and then `after_path`.
struct RefusedCase {
  const char* name;
  bool gzip;
  std::vector<uint8_t> bytes;
  uint32_t magic;
  absl::StatusCode code;
  std::string after_path;
};

class IdxReaderRefuses : public ::testing::TestWithParam<RefusedCase> {};

TEST_P(IdxReaderRefuses, NamingTheFile) {
  const RefusedCase& c = GetParam();
  const std::string path = c.gzip ? WriteGz(std::string(c.name) + ".gz", c.bytes)
                                  : WritePlain(std::string(c.name) + ".idx", c.bytes);
  auto array = ReadIdx(path, c.magic);
  EXPECT_EQ(array.status().code(), c.code);
  EXPECT_EQ(array.status().message(), "IDX file " + path + c.after_path);
}

// The first `n` of `bytes`.
std::vector<uint8_t> Prefix(std::vector<uint8_t> bytes, size_t n) {
  bytes.resize(n);
  return bytes;
}

// The header of 1000x28x28 images and half of their pixels, incompressible enough that the
// header passes the size check of a gzip file.
std::vector<uint8_t> HalfOfItsImages() {
  std::vector<uint8_t> bytes = IdxBytes(kIdxImagesMagic, {1000, 28, 28}, {});
  uint32_t x = 12345;
  for (int i = 0; i < 500 * 28 * 28; ++i) {
    x = x * 1664525u + 1013904223u;
    bytes.push_back(static_cast<uint8_t>(x >> 24));
  }
  return bytes;
}

INSTANTIATE_TEST_SUITE_P(
    IdxReader, IdxReaderRefuses,
    ::testing::Values(
        RefusedCase{"BadMagicAsInvalidArgumentNamingBoth", true,
                    IdxBytes(kIdxImagesMagic, {1, 1, 1}, {5}), kIdxLabelsMagic,
                    absl::StatusCode::kInvalidArgument,
                    " has magic 0x00000803, expected 0x00000801"},
        RefusedCase{"TruncatedDataAsDataLoss", true, IdxBytes(kIdxImagesMagic, {3, 2, 4}, Iota(10)),
                    kIdxImagesMagic, absl::StatusCode::kDataLoss,
                    " is truncated: expected 24 data bytes, read 10"},
        // Magic, count, half of rows.
        RefusedCase{"TruncatedHeaderAsDataLoss", true,
                    Prefix(IdxBytes(kIdxImagesMagic, {3, 2, 4}, {}), 10), kIdxImagesMagic,
                    absl::StatusCode::kDataLoss, " is truncated: expected 4 header bytes, read 2"},
        // 16-byte header + 100 bytes: a 116-byte file claiming 2147483647 images of 28x28.
        RefusedCase{"HeaderClaimingMoreThanAPlainFileHoldsAsDataLoss", false,
                    IdxBytes(kIdxImagesMagic, {2147483647u, 28, 28}, Iota(100)), kIdxImagesMagic,
                    absl::StatusCode::kDataLoss,
                    " is truncated: its header declares 2147483647x28x28 = 1683627179248 data "
                    "bytes, the file holds 100"},
        RefusedCase{"OverflowingShapeAsDataLoss", false,
                    IdxBytes(kIdxImagesMagic, {2147483647u, 2147483647u, 2147483647u}, {}),
                    kIdxImagesMagic, absl::StatusCode::kDataLoss,
                    " declares an impossible shape 2147483647x2147483647x2147483647"},
        // The stream ends early, which the read reports.
        RefusedCase{"GzipShorterThanItsPlausibleClaimAsDataLoss", true, HalfOfItsImages(),
                    kIdxImagesMagic, absl::StatusCode::kDataLoss,
                    " is truncated: expected 784000 data bytes, read 392000"}),
    [](const ::testing::TestParamInfo<RefusedCase>& info) { return std::string(info.param.name); });

TEST(IdxReader, MissingFileIsNotFoundNamingPath) {
  const std::string path = TempPath("does-not-exist.gz");
  auto array = ReadIdx(path, kIdxImagesMagic);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(array.status().message(), "IDX file " + path + " not found");
}

TEST(IdxReader, HeaderClaimingMoreThanAGzipFileCanHoldIsDataLossNamingFile) {
  const std::string path =
      WriteGz("huge_claim.gz", IdxBytes(kIdxImagesMagic, {2147483647u, 28, 28}, Iota(100)));
  auto array = ReadIdx(path, kIdxImagesMagic);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(array.status().message().find("IDX file " + path +
                                          " is truncated: its header "
                                          "declares 2147483647x28x28 = 1683627179248 data bytes, "
                                          "more than a gzip file of "),
            std::string::npos)
      << array.status();
}

TEST(IdxReader, FifoIsRefusedNamingFile) {
  const std::string path = TempPath("fifo.gz");
  std::filesystem::remove(path);
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  auto read = std::async(std::launch::async, [&] { return ReadIdx(path, kIdxImagesMagic); });
  if (read.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    // Unblock the reader so the test ends, then fail.
    int fd = open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) close(fd);
    ADD_FAILURE() << "ReadIdx blocked on a FIFO";
  }
  auto array = read.get();
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(array.status().message(),
            "IDX file " + path +
                " is a FIFO, not a regular file; replace it with the IDX file or point "
                "--data-dir elsewhere");
  std::filesystem::remove(path);
}

TEST(IdxReader, DirectoryIsRefusedNamingFile) {
  const std::string path = TempPath("dir.gz");
  std::filesystem::create_directories(path);
  auto array = ReadIdx(path, kIdxImagesMagic);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(array.status().message().find("IDX file " + path + " is a directory"),
            std::string::npos)
      << array.status();
}

}  // namespace
}  // namespace kubetrain::worker
