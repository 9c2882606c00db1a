#include "worker/summary/tfrecord.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/summary/crc32c.h"

namespace kubetrain::summary {
namespace {

void PutLittleEndian(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xFFu));
}

uint64_t GetLittleEndian(absl::string_view bytes, int n) {
  uint64_t value = 0;
  for (int i = n - 1; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  return value;
}

}  // namespace

void AppendTfRecord(absl::string_view data, std::string* out) {
  const size_t start = out->size();
  out->reserve(start + data.size() + kTfRecordOverhead);
  PutLittleEndian(data.size(), 8, out);
  PutLittleEndian(MaskCrc(Crc32c(absl::string_view(*out).substr(start, 8))), 4, out);
  out->append(data.data(), data.size());
  PutLittleEndian(MaskCrc(Crc32c(data)), 4, out);
}

absl::StatusOr<std::vector<std::string>> ReadTfRecords(absl::string_view file,
                                                       absl::string_view source,
                                                       size_t max_record_bytes) {
  std::vector<std::string> records;
  size_t offset = 0;
  while (offset < file.size()) {
    absl::string_view rest = file.substr(offset);
    auto fail = [&](absl::string_view what) {
      return absl::DataLossError(absl::StrCat(source, ": record ", records.size(), " at byte ",
                                              offset, " ", what,
                                              "; the file is damaged or not a TFRecord file"));
    };
    if (rest.size() < 12) return fail("is truncated in its header");
    if (MaskCrc(Crc32c(rest.substr(0, 8))) != GetLittleEndian(rest.substr(8), 4)) {
      return fail("has a bad length CRC");
    }
    const uint64_t length = GetLittleEndian(rest, 8);
    if (length > max_record_bytes) {
      return fail(absl::StrCat("claims ", length, " bytes, over the limit of ", max_record_bytes));
    }
    if (rest.size() - 12 < length + 4) return fail("is truncated in its data");
    absl::string_view data = rest.substr(12, length);
    if (MaskCrc(Crc32c(data)) != GetLittleEndian(rest.substr(12 + length), 4)) {
      return fail("has a bad data CRC");
    }
    records.emplace_back(data);
    offset += kTfRecordOverhead + length;
  }
  return records;
}

}  // namespace kubetrain::summary
