// Protobuf's wire format over strings and gRPC slices (see wire_format.h).
#include "ps/wire_format.h"

#include "absl/strings/str_cat.h"

namespace kubetrain::ps::wire_format {

void PutVarint(uint64_t v, std::string& out) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void PutTag(uint32_t field, uint32_t wire_type, std::string& out) {
  PutVarint((uint64_t{field} << 3) | wire_type, out);
}

void PutVarintField(uint32_t field, uint64_t v, std::string& out) {
  if (v == 0) return;
  PutTag(field, kVarint, out);
  PutVarint(v, out);
}

void PutBytesField(uint32_t field, absl::string_view bytes, std::string& out) {
  if (bytes.empty()) return;
  PutTag(field, kLengthDelimited, out);
  PutVarint(bytes.size(), out);
  out.append(bytes.data(), bytes.size());
}

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed ps message: ", what));
}

absl::Status SliceReader::SkipField(uint32_t wire_type, size_t end) {
  switch (wire_type) {
    case kVarint: {
      return Varint().status();
    }
    case kLengthDelimited: {
      ASSIGN_OR_RETURN(size_t n, Length(end));
      Skip(n);
      return absl::OkStatus();
    }
    case 1:    // fixed64
    case 5: {  // fixed32
      const size_t n = wire_type == 1 ? 8 : 4;
      if (position_ > end || n > end - position_) return Malformed("truncated fixed field");
      Skip(n);
      return absl::OkStatus();
    }
    default: {
      return Malformed(absl::StrCat("unsupported wire type ", wire_type));
    }
  }
}

absl::StatusOr<Tag> ReadTag(SliceReader& r) {
  ASSIGN_OR_RETURN(uint64_t tag, r.Varint());
  return Tag{static_cast<uint32_t>(tag >> 3), static_cast<uint32_t>(tag & 7)};
}

absl::Status Expect(const Tag& tag, uint32_t wire_type) {
  if (tag.wire_type == wire_type) return absl::OkStatus();
  return Malformed(absl::StrCat("field ", tag.field, " has wire type ", tag.wire_type));
}

absl::StatusOr<std::string> ReadString(SliceReader& r, size_t end) {
  ASSIGN_OR_RETURN(size_t n, r.Length(end));
  std::string s(n, '\0');
  r.CopyTo(s.data(), n);
  return s;
}

}  // namespace kubetrain::ps::wire_format
