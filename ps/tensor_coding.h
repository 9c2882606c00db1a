// Hand-written encoding of the two hot ps messages, PushRequest and PullResponse, straight between
// gRPC byte buffers and tensor memory (what TensorFlow's grpc_tensor_coding does for RecvTensor).
//
// The bytes on the wire are exactly ps.proto's (tensor data in `bytes` fields, little-endian
// float32), so a protobuf peer reads them and they read protobuf's; only the copies go away:
//   push, client: the gradient bytes are gRPC slices over the caller's memory (no copy);
//   push, server: gradients are viewed inside the received slices, and summed from there;
//   pull, server: one copy of each partition, made under the store's lock, becomes a slice
//     that every pull of the same values shares (ps/pull_cache.h);
//   pull, client: bytes go from the received slices into the caller's spans (one copy).
// The generated protobuf path did two copies on each side of each direction.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/impl/serialization_traits.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "ps/half_float.h"
#include "ps/partition.h"
#include "ps/shared_memory.h"
#include "ps/store.h"

namespace kubetrain::ps {

// gRPC paths of the methods coded here (the generated stub and service use the same).
// PushAndPull takes a PushRequest and answers a PullResponse.
inline constexpr char kPushMethod[] = "/kubetrain.v1.ParameterServer/Push";
inline constexpr char kPullMethod[] = "/kubetrain.v1.ParameterServer/Pull";
inline constexpr char kPushAndPullMethod[] = "/kubetrain.v1.ParameterServer/PushAndPull";

// Counts zero-copy slices over caller memory that gRPC still references, so the caller can wait
// until gRPC is done with the memory before handing it back. gRPC drops its references once the
// bytes are written or the call is cancelled. Thread-safe; must outlive every slice it pinned
// (call WaitUntilReleased before destroying it).
class SlicePins {
 public:
  SlicePins() = default;
  SlicePins(const SlicePins&) = delete;
  SlicePins& operator=(const SlicePins&) = delete;
  ~SlicePins();

  // A slice over `bytes` whose release this object counts. `bytes` must stay valid until
  // WaitUntilReleased returns.
  grpc::Slice Pin(absl::string_view bytes);
  void WaitUntilReleased();

 private:
  static void Release(void* self);

  absl::Mutex mu_;
  int pinned_ ABSL_GUARDED_BY(mu_) = 0;
};

// One partition's tensor bytes to encode, viewing memory owned elsewhere.
struct PartitionView {
  const PartitionKey* key = nullptr;
  uint64_t offset = 0;
  std::span<const float> values;
  // How the values travel (--gradient-compression). Float32 is sent from `values` in place;
  // 16 bits are coded into a slice of their own. Values in shared memory stay float32.
  WireFloat wire = WireFloat::kFloat32;
};

struct PushHeader {
  std::string run_id;
  uint32_t worker = 0;
  int64_t step = 0;
  // Non-zero: the gradients are in this shared-memory region (ps/shared_memory.h); only their
  // partition headers are encoded and nothing is pinned.
  uint64_t shm_region = 0;
  // PushAndPull: the step its pull waits for (0: none).
  int64_t pull_min_step = 0;
  // PushAndPull: how its pull's values are to be coded.
  WireFloat pull_wire = WireFloat::kFloat32;
};

// A kubetrain.v1.PushRequest whose gradient bytes are slices pinned by `pins` (not copied).
grpc::ByteBuffer EncodePushRequest(const PushHeader& header,
                                   std::span<const PartitionView> gradients, SlicePins& pins);

// A parsed PushRequest, its gradients viewing the received bytes (in as many pieces as slices
// they span; 16-bit values stay 16-bit until the store reads them). Owns the received buffer.
// Not thread-safe; gRPC deserialises one per call.
class PushFrame {
 public:
  // Takes `buffer`'s slices (leaving it empty) and parses them. INVALID_ARGUMENT on malformed
  // bytes or a gradient whose byte count is not 4 × its length (2 × for 16-bit values).
  absl::Status Parse(grpc::ByteBuffer& buffer);
  // The store's arguments; views into this frame, valid while it lives.
  const PushArgs& args() const { return args_; }
  uint32_t worker() const { return worker_; }
  size_t byte_size() const { return byte_size_; }
  // The shared-memory region the request names; 0: its values are all in the request.
  uint64_t shm_region() const { return shm_region_; }
  // PushAndPull: the step its pull waits for (0: none).
  int64_t pull_min_step() const { return pull_min_step_; }
  // PushAndPull: how its pull's values are to be coded.
  WireFloat pull_wire() const { return pull_wire_; }
  // Points the gradients the request carried no bytes for at their slots in `region`, which
  // must outlive the frame's use. INVALID_ARGUMENT for a partition without a slot of its size.
  absl::Status BindRegion(const ShmRegion& region);

 private:
  std::vector<grpc::Slice> slices_;  // the gradients' values are viewed in these
  PushArgs args_;
  std::vector<uint64_t> lengths_;  // per gradient: its float count
  std::vector<bool> elsewhere_;    // per gradient: no bytes in the request (shared memory)
  uint32_t worker_ = 0;
  size_t byte_size_ = 0;
  uint64_t shm_region_ = 0;
  int64_t pull_min_step_ = 0;
  WireFloat pull_wire_ = WireFloat::kFloat32;
};

// `values` coded as `wire` in a slice of their own: the one copy a pulled partition makes.
grpc::Slice EncodeValues(WireFloat wire, std::span<const float> values);

// A kubetrain.v1.PullResponse under construction on the server. Each Add copies one partition's
// values into a slice gRPC then sends without copying again. Not thread-safe.
class PullFrame {
 public:
  // `wire`: the values are coded as 16-bit floats (the pull asked for them so).
  void Add(const PartitionKey& key, uint64_t offset, std::span<const float> values,
           WireFloat wire = WireFloat::kFloat32);
  // `length` values already coded as `wire` in `encoded` (EncodeValues; PullCache), referenced.
  void AddEncoded(const PartitionKey& key, uint64_t offset, uint64_t length, WireFloat wire,
                  grpc::Slice encoded);
  // A partition whose values the server wrote into the client's shared memory: no bytes.
  void AddShared(const PartitionKey& key, uint64_t offset, uint64_t length);
  // `push_stale`: the answer of a PushAndPull whose push was dropped as stale.
  void Finish(int64_t global_step, std::string run_id, int64_t gradients_applied = 0,
              bool push_stale = false);
  void Clear() { *this = PullFrame(); }
  grpc::ByteBuffer Encode() const;
  size_t byte_size() const;

 private:
  struct Entry {
    std::string header;  // the Partition's field tag, length and every field but the values
    grpc::Slice values;
  };
  std::vector<Entry> entries_;
  int64_t global_step_ = 0;
  std::string run_id_;
  int64_t gradients_applied_ = 0;
  bool push_stale_ = false;
};

struct PullHeader {
  int64_t global_step = 0;
  std::string run_id;
  int64_t gradients_applied = 0;
  bool push_stale = false;  // PushAndPull
};

// Where a pulled partition's values go: a span of exactly `length` floats, or an error (unknown
// partition, wrong ps) that ends decoding.
using PullDestination = absl::FunctionRef<absl::StatusOr<std::span<float>>(
    const PartitionKey& key, uint64_t offset, uint64_t length)>;

// Where a partition answered without bytes (a pull through shared memory) was written: its
// `length` floats, or an error.
using PullSource = absl::FunctionRef<absl::StatusOr<std::span<const float>>(const PartitionKey& key,
                                                                            uint64_t length)>;

// Decodes a PullResponse, copying each partition's bytes straight into its destination (from
// `shared` for a partition without bytes, when given). INVALID_ARGUMENT on malformed bytes or a
// partition whose byte count differs from 4 × length (2 × for 16-bit values, widened on the way)
// or from its destination's size.
absl::StatusOr<PullHeader> DecodePullResponse(const grpc::ByteBuffer& buffer,
                                              PullDestination destination,
                                              std::optional<PullSource> shared = std::nullopt);

}  // namespace kubetrain::ps

// gRPC (de)serialises the server's custom request and response types with these.
namespace grpc {

template <>
class SerializationTraits<kubetrain::ps::PushFrame, void> {
 public:
  static Status Deserialize(ByteBuffer* buffer, kubetrain::ps::PushFrame* frame);
};

template <>
class SerializationTraits<kubetrain::ps::PullFrame, void> {
 public:
  static Status Serialize(const kubetrain::ps::PullFrame& frame, ByteBuffer* buffer,
                          bool* own_buffer);
};

}  // namespace grpc
