// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of TFRecord framing.
// Debian 12 packages no C or C++ CRC-32C library (Google's crc32c is packaged from Debian 13 on;
// abseil's absl/crc arrived after the 20220623 release Debian 12 ships), so it is computed here
// with a byte table; tests/crc32c_test.cc checks it against RFC 3720's published vectors.
#pragma once

#include <cstdint>

#include "absl/strings/string_view.h"

namespace kubetrain::summary {

// The CRC-32C of `data`, continuing from `crc` (the CRC of the bytes before; 0 to start).
uint32_t Crc32cExtend(uint32_t crc, absl::string_view data);
inline uint32_t Crc32c(absl::string_view data) { return Crc32cExtend(0, data); }

// TFRecord stores CRCs masked (rotated right by 15, plus a constant), so that a CRC computed
// over data that itself holds CRCs does not degenerate.
inline uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t UnmaskCrc(uint32_t masked) {
  uint32_t rotated = masked - 0xa282ead8u;
  return (rotated >> 17) | (rotated << 15);
}

}  // namespace kubetrain::summary
