// Reader for IDX files (the MNIST / Fashion-MNIST container), gzip-compressed or plain.
//
// Format: big-endian magic 00 00 <type> <rank>, then `rank` big-endian int32 dimensions, then the
// row-major data. Only type 0x08 (unsigned byte) is supported: it is all (Fashion-)MNIST uses.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kubetrain::worker {

inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // uint8, rank 1
inline constexpr uint32_t kIdxImagesMagic = 0x00000803;  // uint8, rank 3

// The decoded contents of one IDX file. Plain value type.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // product(dims) bytes, row-major
};

// Reads `path` and checks its magic equals `expected_magic`.
// Errors: NOT_FOUND (no such file), INVALID_ARGUMENT (wrong magic or a negative dimension),
// DATA_LOSS (header or data shorter than declared, or a corrupt gzip stream), and CANCELLED
// soon after `stop` (when given) turns true.
absl::StatusOr<IdxArray> ReadIdx(absl::string_view path, uint32_t expected_magic,
                                 const std::atomic<bool>* stop = nullptr);

}  // namespace kubetrain::worker
