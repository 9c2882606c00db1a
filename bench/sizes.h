// Buffer sizes as the benches' --sizes flags take them and their tables name them, for the
// benches that time one exchange per size (allreduce_bench, network_bench).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace kubetrain::bench {

// "64K,1M,4096": comma-separated byte counts with binary K/M/G suffixes, each a positive multiple
// of 4 (a whole number of floats) and at most `max_bytes` (a whole number of GiB).
inline absl::StatusOr<std::vector<size_t>> ParseSizes(absl::string_view text, uint64_t max_bytes) {
  std::vector<size_t> sizes;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    int shift = 0;
    if (!item.empty()) {
      const char unit = absl::ascii_toupper(item.back());
      shift = unit == 'K' ? 10 : unit == 'M' ? 20 : unit == 'G' ? 30 : 0;
    }
    if (shift != 0) item.remove_suffix(1);
    uint64_t value = 0;
    if (!absl::SimpleAtoi(item, &value) || value == 0 || value > max_bytes >> shift ||
        ((value << shift) % sizeof(float)) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--sizes: \"", item, "\" is not a size such as 64K, 1M or 4096 (a multiple of 4 bytes, ",
          "at most ", max_bytes >> 30, "G)"));
    }
    sizes.push_back(static_cast<size_t>(value << shift));
  }
  if (sizes.empty()) return absl::InvalidArgumentError("--sizes is empty");
  return sizes;
}

// "64 MiB", "4 KiB", "100 B".
inline std::string SizeName(size_t bytes) {
  if (bytes % (size_t{1} << 20) == 0) return absl::StrCat(bytes >> 20, " MiB");
  if (bytes % (size_t{1} << 10) == 0) return absl::StrCat(bytes >> 10, " KiB");
  return absl::StrCat(bytes, " B");
}

}  // namespace kubetrain::bench
