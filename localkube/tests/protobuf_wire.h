// Encoders of protobuf wire fields, for building the Kubernetes protobuf bodies clients send
// (localkube/protobuf.h) in tests and fuzz targets.
#pragma once

#include <cstdint>
#include <string>

namespace kubetrain::localkube::testing {

// `v` as a base-128 varint.
inline std::string Varint(uint64_t v) {
  std::string out;
  do {
    uint8_t b = v & 0x7f;
    v >>= 7;
    out.push_back(static_cast<char>(v ? b | 0x80 : b));
  } while (v);
  return out;
}

// Field `field`, length-delimited (wire type 2): a string, bytes or an embedded message.
inline std::string Len(int field, const std::string& value) {
  return Varint(static_cast<uint64_t>(field) << 3 | 2) + Varint(value.size()) + value;
}

// Field `field`, a varint (wire type 0).
inline std::string Int(int field, int64_t value) {
  return Varint(static_cast<uint64_t>(field) << 3) + Varint(static_cast<uint64_t>(value));
}

}  // namespace kubetrain::localkube::testing
