// The hand-written PushRequest and PullResponse coding (see tensor_coding.h), on the wire-format
// primitives of wire_format.h.
#include "ps/tensor_coding.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>
#include <utility>
#include <vector>

#include <grpc/slice.h>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "ps/gradient_bytes.h"
#include "ps/half_float.h"
#include "ps/wire_format.h"

namespace kubetrain::ps {
namespace {

using wire_format::Expect;
using wire_format::ForEachField;
using wire_format::kLengthDelimited;
using wire_format::kVarint;
using wire_format::Malformed;
using wire_format::PutBytesField;
using wire_format::PutTag;
using wire_format::PutVarint;
using wire_format::PutVarintField;
using wire_format::ReadString;
using wire_format::ReadTag;
using wire_format::SliceReader;
using wire_format::Tag;

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian float32; a big-endian build needs byte swaps");

// The field numbers of ps.proto this file encodes.
namespace key_field {
constexpr uint32_t kVariable = 1, kIndex = 2;
}
namespace partition_field {
constexpr uint32_t kKey = 1, kOffset = 2, kLength = 3, kValues = 4, kEncoding = 5;
}
namespace push_field {
constexpr uint32_t kRunId = 1, kWorker = 2, kStep = 3, kGradients = 4, kShmRegion = 5,
                   kPullMinStep = 6, kPullEncoding = 7;
}
namespace pull_field {
constexpr uint32_t kGlobalStep = 1, kValues = 2, kRunId = 3, kGradientsApplied = 4, kPushStale = 5;
}

// ---- Encoding ----

// Everything of a Partition field but the values: its tag and length (as field `field` of the
// enclosing message), key, offset, length, and the values' tag and length. The values' bytes
// follow on the wire.
std::string PartitionHeader(uint32_t field, const PartitionKey& key, uint64_t offset,
                            uint64_t length, size_t value_bytes,
                            WireFloat encoding = WireFloat::kFloat32) {
  std::string key_msg;
  PutBytesField(key_field::kVariable, key.variable, key_msg);
  PutVarintField(key_field::kIndex, key.index, key_msg);
  std::string inner;
  PutBytesField(partition_field::kKey, key_msg, inner);
  PutVarintField(partition_field::kOffset, offset, inner);
  PutVarintField(partition_field::kLength, length, inner);
  PutVarintField(partition_field::kEncoding, static_cast<uint32_t>(encoding), inner);
  if (value_bytes > 0) {
    PutTag(partition_field::kValues, kLengthDelimited, inner);
    PutVarint(value_bytes, inner);
  }
  std::string out;
  PutTag(field, kLengthDelimited, out);
  PutVarint(inner.size() + value_bytes, out);
  out += inner;
  return out;
}

absl::string_view AsBytes(std::span<const float> values) {
  return {reinterpret_cast<const char*>(values.data()), values.size_bytes()};
}

// A slice of `values` coded as `wire`'s 16-bit floats (the one copy a compressed tensor makes).
grpc::Slice CompressedSlice(WireFloat wire, std::span<const float> values) {
  // Never an inlined slice: those keep their bytes inside the slice struct, at an odd address
  // where 16-bit stores are undefined (UBSan: misaligned address). A heap slice's bytes follow
  // its refcount, 8-byte aligned, and are coded in place: no second copy of the tensor.
  grpc::Slice slice(grpc_slice_malloc_large(values.size() * sizeof(uint16_t)),
                    grpc::Slice::STEAL_REF);
  auto* out = reinterpret_cast<uint16_t*>(const_cast<uint8_t*>(slice.begin()));
  Compress(wire, values, {out, values.size()});
  return slice;
}

// The encoding field's value, or INVALID_ARGUMENT naming the partition (a peer from a newer
// image that codes values some other way).
absl::StatusOr<WireFloat> ReadEncoding(uint64_t v, absl::string_view what) {
  if (v > static_cast<uint32_t>(WireFloat::kBFloat16)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": value encoding ", v,
        " is not one this ps build knows (float32, fp16, bf16); run every task of the job from "
        "one image"));
  }
  return static_cast<WireFloat>(v);
}

// ---- Decoding ----

absl::StatusOr<PartitionKey> ReadKey(SliceReader& r, size_t end) {
  ASSIGN_OR_RETURN(size_t n, r.Length(end));
  const size_t key_end = r.position() + n;
  PartitionKey key;
  while (r.position() < key_end) {
    ASSIGN_OR_RETURN(Tag tag, ReadTag(r));
    if (tag.field == key_field::kVariable) {
      RETURN_IF_ERROR(Expect(tag, kLengthDelimited));
      ASSIGN_OR_RETURN(key.variable, ReadString(r, key_end));
    } else if (tag.field == key_field::kIndex) {
      RETURN_IF_ERROR(ReadVarint(tag, r, &key.index));
    } else {
      RETURN_IF_ERROR(r.SkipField(tag.wire_type, key_end));
    }
  }
  if (r.position() != key_end) return Malformed("partition key runs past its length");
  return key;
}

absl::Status CheckValueBytes(const PartitionKey& key, size_t bytes, uint64_t length,
                             WireFloat encoding = WireFloat::kFloat32) {
  const size_t width = WireFloatBytes(encoding);
  if (bytes % width != 0 || bytes / width != length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "partition ", key.variable, "/", key.index, " has ", bytes, " value bytes for ", length,
        encoding == WireFloat::kFloat32
            ? std::string(" floats")
            : absl::StrCat(" ", WireFloatName(encoding), " values (2 bytes each)")));
  }
  return absl::OkStatus();
}

// A Partition's fields; the values are located (position and size) and skipped, since their
// destination may depend on fields that come after them.
struct PartitionFields {
  PartitionKey key;
  uint64_t offset = 0;
  uint64_t length = 0;
  size_t values_position = 0;
  size_t values_bytes = 0;
  WireFloat encoding = WireFloat::kFloat32;
};

// `values_elsewhere`: a partition without value bytes is accepted (they are in shared memory).
absl::StatusOr<PartitionFields> ReadPartition(SliceReader& r, size_t end,
                                              bool values_elsewhere = false) {
  PartitionFields p;
  while (r.position() < end) {
    ASSIGN_OR_RETURN(Tag tag, ReadTag(r));
    switch (tag.field) {
      case partition_field::kKey: {
        RETURN_IF_ERROR(Expect(tag, kLengthDelimited));
        ASSIGN_OR_RETURN(p.key, ReadKey(r, end));
        break;
      }
      case partition_field::kOffset:
        RETURN_IF_ERROR(ReadVarint(tag, r, &p.offset));
        break;
      case partition_field::kLength:
        RETURN_IF_ERROR(ReadVarint(tag, r, &p.length));
        break;
      case partition_field::kValues: {
        RETURN_IF_ERROR(Expect(tag, kLengthDelimited));
        ASSIGN_OR_RETURN(p.values_bytes, r.Length(end));
        p.values_position = r.position();
        r.Skip(p.values_bytes);
        break;
      }
      case partition_field::kEncoding: {
        RETURN_IF_ERROR(Expect(tag, kVarint));
        ASSIGN_OR_RETURN(uint64_t v, r.Varint());
        ASSIGN_OR_RETURN(p.encoding, ReadEncoding(v, "partition"));
        break;
      }
      default: {
        RETURN_IF_ERROR(r.SkipField(tag.wire_type, end));
      }
    }
  }
  if (r.position() != end) return Malformed("partition runs past its length");
  if (values_elsewhere && p.values_bytes == 0) return p;
  RETURN_IF_ERROR(CheckValueBytes(p.key, p.values_bytes, p.length, p.encoding));
  return p;
}

}  // namespace

// ---- SlicePins ----

SlicePins::~SlicePins() { WaitUntilReleased(); }

grpc::Slice SlicePins::Pin(absl::string_view bytes) {
  {
    absl::MutexLock lock(&mu_);
    ++pinned_;
  }
  // gRPC never writes through a send slice; the cast only satisfies the constructor's signature.
  return grpc::Slice(const_cast<char*>(bytes.data()), bytes.size(), &SlicePins::Release, this);
}

void SlicePins::Release(void* self) {
  auto* pins = static_cast<SlicePins*>(self);
  absl::MutexLock lock(&pins->mu_);
  --pins->pinned_;
}

void SlicePins::WaitUntilReleased() {
  absl::MutexLock lock(&mu_);
  // gRPC releases a send slice once its bytes are written or the stream is cancelled; for a call
  // that already finished this takes microseconds. Logged if slow, as it means a stuck socket.
  auto released = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pinned_ == 0; };
  if (mu_.AwaitWithTimeout(absl::Condition(&released), absl::Seconds(10))) return;
  log::Warn("Waiting for gRPC to release pushed gradient memory", {{"slices", pinned_}});
  mu_.Await(absl::Condition(&released));
}

// ---- Push ----

grpc::ByteBuffer EncodePushRequest(const PushHeader& header,
                                   std::span<const PartitionView> gradients, SlicePins& pins) {
  std::vector<grpc::Slice> slices;
  slices.reserve(2 * gradients.size() + 1);
  std::string head;
  PutBytesField(push_field::kRunId, header.run_id, head);
  PutVarintField(push_field::kWorker, header.worker, head);
  PutVarintField(push_field::kStep, static_cast<uint64_t>(header.step), head);
  const bool shared = header.shm_region != 0;
  for (const PartitionView& g : gradients) {
    // Values in shared memory stay float32: no link to save there.
    const WireFloat wire = shared ? WireFloat::kFloat32 : g.wire;
    head += PartitionHeader(push_field::kGradients, *g.key, g.offset, g.values.size(),
                            shared ? 0 : g.values.size() * WireFloatBytes(wire), wire);
    if (shared) continue;       // the values are in the region
    slices.emplace_back(head);  // copies the small header
    head.clear();
    if (g.values.empty()) continue;
    slices.push_back(wire == WireFloat::kFloat32 ? pins.Pin(AsBytes(g.values))
                                                 : CompressedSlice(wire, g.values));
  }
  PutVarintField(push_field::kShmRegion, header.shm_region, head);
  PutVarintField(push_field::kPullMinStep, static_cast<uint64_t>(header.pull_min_step), head);
  PutVarintField(push_field::kPullEncoding, static_cast<uint32_t>(header.pull_wire), head);
  if (!head.empty()) slices.emplace_back(head);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

absl::Status PushFrame::Parse(grpc::ByteBuffer& buffer) {
  *this = PushFrame();
  byte_size_ = buffer.Length();
  if (grpc::Status s = buffer.Dump(&slices_); !s.ok()) return Malformed(s.error_message());
  buffer.Clear();
  SliceReader r(slices_);
  RETURN_IF_ERROR(ForEachField(r, [&](const Tag& tag) -> absl::Status {
    switch (tag.field) {
      case push_field::kRunId: {
        RETURN_IF_ERROR(Expect(tag, kLengthDelimited));
        ASSIGN_OR_RETURN(args_.run_id, ReadString(r, r.size()));
        return absl::OkStatus();
      }
      case push_field::kWorker: {
        RETURN_IF_ERROR(ReadVarint(tag, r, &worker_));
        args_.worker = worker_;
        return absl::OkStatus();
      }
      case push_field::kStep:
        return ReadVarint(tag, r, &args_.step);
      case push_field::kGradients: {
        RETURN_IF_ERROR(Expect(tag, kLengthDelimited));
        ASSIGN_OR_RETURN(size_t n, r.Length(r.size()));
        const size_t end = r.position() + n;
        ASSIGN_OR_RETURN(PartitionFields p, ReadPartition(r, end, /*values_elsewhere=*/true));
        lengths_.push_back(p.length);
        elsewhere_.push_back(p.values_bytes == 0 && p.length > 0);
        // The values where ReadPartition found them, now that they are known to fit: viewed in
        // the received slices, never gathered (the store reads them in runs, widening 16-bit
        // ones on the way: ps/gradient_bytes.h).
        GradientRef& g = args_.gradients.emplace_back();
        g.key = std::move(p.key);
        g.values = GradientBytes(absl::string_view(), p.encoding);
        SliceReader values(slices_);
        values.Skip(p.values_position);
        values.ForEachPiece(p.values_bytes,
                            [&g](absl::string_view piece) { g.values.Append(piece); });
        return absl::OkStatus();
      }
      case push_field::kShmRegion:
        return ReadVarint(tag, r, &shm_region_);
      case push_field::kPullMinStep:
        return ReadVarint(tag, r, &pull_min_step_);
      case push_field::kPullEncoding: {
        RETURN_IF_ERROR(Expect(tag, kVarint));
        ASSIGN_OR_RETURN(uint64_t v, r.Varint());
        ASSIGN_OR_RETURN(pull_wire_, ReadEncoding(v, "PushAndPull's pull_encoding"));
        return absl::OkStatus();
      }
      default: {
        return r.SkipField(tag.wire_type, r.size());
      }
    }
  }));
  if (shm_region_ != 0) return absl::OkStatus();
  for (size_t i = 0; i < elsewhere_.size(); ++i) {  // no region: every value must be here
    if (elsewhere_[i]) RETURN_IF_ERROR(CheckValueBytes(args_.gradients[i].key, 0, lengths_[i]));
  }
  return absl::OkStatus();
}

absl::Status PushFrame::BindRegion(const ShmRegion& region) {
  for (size_t i = 0; i < elsewhere_.size(); ++i) {
    if (!elsewhere_[i]) continue;
    GradientRef& g = args_.gradients[i];
    ASSIGN_OR_RETURN(std::span<const float> values, region.Gradient(g.key, lengths_[i]));
    g.values = GradientBytes(AsBytes(values));
  }
  return absl::OkStatus();
}

// ---- Pull ----

grpc::Slice EncodeValues(WireFloat wire, std::span<const float> values) {
  if (values.empty()) return grpc::Slice();
  return wire == WireFloat::kFloat32 ? grpc::Slice(values.data(), values.size_bytes())
                                     : CompressedSlice(wire, values);
}

void PullFrame::Add(const PartitionKey& key, uint64_t offset, std::span<const float> values,
                    WireFloat wire) {
  AddEncoded(key, offset, values.size(), wire, EncodeValues(wire, values));
}

void PullFrame::AddEncoded(const PartitionKey& key, uint64_t offset, uint64_t length,
                           WireFloat wire, grpc::Slice encoded) {
  assert(encoded.size() == length * WireFloatBytes(wire));
  entries_.push_back({PartitionHeader(pull_field::kValues, key, offset, length,
                                      length * WireFloatBytes(wire), wire),
                      std::move(encoded)});
}

void PullFrame::AddShared(const PartitionKey& key, uint64_t offset, uint64_t length) {
  entries_.push_back({PartitionHeader(pull_field::kValues, key, offset, length, 0), grpc::Slice()});
}

void PullFrame::Finish(int64_t global_step, std::string run_id, int64_t gradients_applied,
                       bool push_stale) {
  global_step_ = global_step;
  run_id_ = std::move(run_id);
  gradients_applied_ = gradients_applied;
  push_stale_ = push_stale;
}

grpc::ByteBuffer PullFrame::Encode() const {
  std::vector<grpc::Slice> slices;
  slices.reserve(2 * entries_.size() + 1);
  std::string head;
  PutVarintField(pull_field::kGlobalStep, static_cast<uint64_t>(global_step_), head);
  for (const Entry& e : entries_) {
    head += e.header;
    slices.emplace_back(head);
    head.clear();
    if (e.values.size() > 0) slices.push_back(e.values);  // a reference, not a copy
  }
  PutBytesField(pull_field::kRunId, run_id_, head);
  PutVarintField(pull_field::kGradientsApplied, static_cast<uint64_t>(gradients_applied_), head);
  PutVarintField(pull_field::kPushStale, push_stale_ ? 1 : 0, head);
  if (!head.empty()) slices.emplace_back(head);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

size_t PullFrame::byte_size() const {
  size_t n = run_id_.size() + 29;
  for (const Entry& e : entries_) n += e.header.size() + e.values.size();
  return n;
}

absl::StatusOr<PullHeader> DecodePullResponse(const grpc::ByteBuffer& buffer,
                                              PullDestination destination,
                                              std::optional<PullSource> shared) {
  std::vector<grpc::Slice> slices;
  if (grpc::Status s = buffer.Dump(&slices); !s.ok()) return Malformed(s.error_message());
  SliceReader r(slices);
  PullHeader header;
  RETURN_IF_ERROR(ForEachField(r, [&](const Tag& tag) -> absl::Status {
    switch (tag.field) {
      case pull_field::kGlobalStep:
        return ReadVarint(tag, r, &header.global_step);
      case pull_field::kRunId: {
        RETURN_IF_ERROR(Expect(tag, kLengthDelimited));
        ASSIGN_OR_RETURN(header.run_id, ReadString(r, r.size()));
        return absl::OkStatus();
      }
      case pull_field::kGradientsApplied:
        return ReadVarint(tag, r, &header.gradients_applied);
      case pull_field::kPushStale:
        return ReadVarint(tag, r, &header.push_stale);
      case pull_field::kValues: {
        RETURN_IF_ERROR(Expect(tag, kLengthDelimited));
        ASSIGN_OR_RETURN(size_t n, r.Length(r.size()));
        ASSIGN_OR_RETURN(PartitionFields p, ReadPartition(r, r.position() + n, shared.has_value()));
        ASSIGN_OR_RETURN(std::span<float> out, destination(p.key, p.offset, p.length));
        if (p.values_bytes == 0 && p.length > 0) {  // the ps wrote them into shared memory
          ASSIGN_OR_RETURN(std::span<const float> in, (*shared)(p.key, p.length));
          if (in.size() != out.size()) {
            return absl::InvalidArgumentError(
                absl::StrCat("partition ", p.key.variable, "/", p.key.index, ": ", in.size(),
                             " floats in shared memory, want ", out.size()));
          }
          std::memcpy(out.data(), in.data(), out.size_bytes());
          return absl::OkStatus();
        }
        const size_t want = out.size() * WireFloatBytes(p.encoding);
        if (want != p.values_bytes) {
          return absl::InvalidArgumentError(absl::StrCat("partition ", p.key.variable, "/",
                                                         p.key.index, ": got ", p.values_bytes,
                                                         " bytes, want ", want));
        }
        SliceReader values(slices);
        values.Skip(p.values_position);
        if (p.encoding == WireFloat::kFloat32) {
          values.CopyTo(reinterpret_cast<char*>(out.data()), p.values_bytes);
        } else {
          // Widened a run at a time through a buffer that stays in cache, straight from the
          // received slices into the destination, as the ps reads a push (gradient_bytes.h).
          constexpr size_t kRun = GradientBytes::kRunValues;
          alignas(64) uint16_t narrow[kRun];
          for (size_t at = 0; at < out.size(); at += kRun) {
            const size_t n = std::min(kRun, out.size() - at);
            values.CopyTo(reinterpret_cast<char*>(narrow), n * sizeof(uint16_t));
            Decompress(p.encoding, {narrow, n}, out.subspan(at, n));
          }
        }
        return absl::OkStatus();
      }
      default: {
        return r.SkipField(tag.wire_type, r.size());
      }
    }
  }));
  return header;
}

}  // namespace kubetrain::ps

namespace grpc {

Status SerializationTraits<kubetrain::ps::PushFrame, void>::Deserialize(
    ByteBuffer* buffer, kubetrain::ps::PushFrame* frame) {
  absl::Status s = frame->Parse(*buffer);
  if (s.ok()) return Status::OK;
  return {static_cast<StatusCode>(s.code()), std::string(s.message())};
}

Status SerializationTraits<kubetrain::ps::PullFrame, void>::Serialize(
    const kubetrain::ps::PullFrame& frame, ByteBuffer* buffer, bool* own_buffer) {
  *buffer = frame.Encode();
  *own_buffer = true;
  return Status::OK;
}

}  // namespace grpc
