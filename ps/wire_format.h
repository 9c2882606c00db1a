// Protobuf's wire format, written into strings and read from the slices of a received gRPC
// message without joining them: what ps/tensor_coding.h builds its hand-written PushRequest and
// PullResponse coding on (https://protobuf.dev/programming-guides/encoding/).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/status.h"
#include "grpcpp/support/slice.h"

namespace kubetrain::ps::wire_format {

// Protobuf wire types.
inline constexpr uint32_t kVarint = 0;
inline constexpr uint32_t kLengthDelimited = 2;

// ---- Encoding ----

void PutVarint(uint64_t v, std::string& out);
void PutTag(uint32_t field, uint32_t wire_type, std::string& out);
// Like protobuf, proto3 scalars equal to their default are left out.
void PutVarintField(uint32_t field, uint64_t v, std::string& out);
void PutBytesField(uint32_t field, absl::string_view bytes, std::string& out);

// ---- Decoding ----

// INVALID_ARGUMENT "malformed ps message: <what>".
absl::Status Malformed(absl::string_view what);

// Reads protobuf wire format from the slices of a received message without joining them.
// Not thread-safe; the slices must outlive it.
class SliceReader {
 public:
  explicit SliceReader(const std::vector<grpc::Slice>& slices) : slices_(slices) {
    for (const grpc::Slice& s : slices_) size_ += s.size();
    SkipEmpty();
  }

  size_t position() const { return position_; }
  size_t size() const { return size_; }

  absl::StatusOr<uint64_t> Varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (position_ >= size_) return Malformed("truncated varint");
      const uint8_t byte = slices_[slice_].begin()[offset_];
      Advance(1);
      v |= uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80) == 0) return v;
    }
    return Malformed("varint longer than 10 bytes");
  }

  // The length of a length-delimited field, checked against what is left before `end`.
  absl::StatusOr<size_t> Length(size_t end) {
    ASSIGN_OR_RETURN(uint64_t n, Varint());
    if (position_ > end || n > end - position_) return Malformed("field runs past its message");
    return static_cast<size_t>(n);
  }

  void CopyTo(char* out, size_t n) {
    while (n > 0) {
      const grpc::Slice& s = slices_[slice_];
      const size_t take = std::min(n, s.size() - offset_);
      std::memcpy(out, s.begin() + offset_, take);
      out += take;
      n -= take;
      Advance(take);
    }
  }

  // The next `n` bytes, which the caller knows are there, as one piece per slice they lie in.
  template <typename Fn>
  void ForEachPiece(size_t n, Fn&& piece) {
    while (n > 0) {
      const grpc::Slice& s = slices_[slice_];
      const size_t take = std::min(n, s.size() - offset_);
      piece(absl::string_view(reinterpret_cast<const char*>(s.begin()) + offset_, take));
      n -= take;
      Advance(take);
    }
  }

  void Skip(size_t n) { Advance(n); }

  // Skips a field of any wire type this reader may meet (unknown fields from a newer peer).
  absl::Status SkipField(uint32_t wire_type, size_t end);

 private:
  // Callers have checked that `n` bytes are left.
  void Advance(size_t n) {
    position_ += n;
    while (n > 0) {
      const size_t take = std::min(n, slices_[slice_].size() - offset_);
      offset_ += take;
      n -= take;
      SkipEmpty();
    }
  }
  void SkipEmpty() {
    while (slice_ < slices_.size() && offset_ == slices_[slice_].size()) {
      ++slice_;
      offset_ = 0;
    }
  }

  const std::vector<grpc::Slice>& slices_;
  size_t slice_ = 0, offset_ = 0, position_ = 0, size_ = 0;
};

struct Tag {
  uint32_t field;
  uint32_t wire_type;
};

absl::StatusOr<Tag> ReadTag(SliceReader& r);
// INVALID_ARGUMENT unless `tag` has `wire_type`.
absl::Status Expect(const Tag& tag, uint32_t wire_type);
// A varint field's value into `*out`, converted to T as protobuf converts a uint64 for that
// field type (truncated to 32 bits, reinterpreted as signed, nonzero as true); INVALID_ARGUMENT
// unless `tag` is a varint.
template <typename T>
absl::Status ReadVarint(const Tag& tag, SliceReader& r, T* out) {
  RETURN_IF_ERROR(Expect(tag, kVarint));
  ASSIGN_OR_RETURN(uint64_t v, r.Varint());
  *out = static_cast<T>(v);
  return absl::OkStatus();
}
// A length-delimited field's bytes, copied; the field must end by `end`.
absl::StatusOr<std::string> ReadString(SliceReader& r, size_t end);

// Calls `field_fn(tag)` for each top-level field left in `r`; it reads the field's value from `r`.
template <typename FieldFn>
absl::Status ForEachField(SliceReader& r, FieldFn field_fn) {
  while (r.position() < r.size()) {
    ASSIGN_OR_RETURN(Tag tag, ReadTag(r));
    RETURN_IF_ERROR(field_fn(tag));
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::ps::wire_format
