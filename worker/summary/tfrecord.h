// TFRecord framing, the container of TensorFlow event files (TensorFlow's
// core/lib/io/record_writer.cc). Each record is
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes | data |
//   uint32 masked CRC-32C of data
// and a file is records back to back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kubetrain::summary {

// Bytes a record adds around its data.
inline constexpr size_t kTfRecordOverhead = 8 + 4 + 4;

// Appends `data` framed as one record to `out`.
void AppendTfRecord(absl::string_view data, std::string* out);

// Splits `file` into its records' data, checking both CRCs of each. DATA_LOSS naming the
// record's index and byte offset for a bad CRC, a truncated record, or a record longer than
// `max_record_bytes` (so a corrupt length never makes it allocate). `source` (a path) starts
// every message. Used by tests and the fuzz target; TensorBoard and TensorFlow read the files.
absl::StatusOr<std::vector<std::string>> ReadTfRecords(absl::string_view file,
                                                       absl::string_view source,
                                                       size_t max_record_bytes = 64 << 20);

}  // namespace kubetrain::summary
