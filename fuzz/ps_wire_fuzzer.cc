// The parameter server's wire decoding, on bytes as gRPC delivers them (split into slices), each
// decoded message then handed to a shard store the way the service does.
//
// Input: a mode byte, a slice-size byte (0: one slice), then the message bytes. Modes:
//   0 PushRequest (PushFrame::Parse, then ShardStore::Push)
//   1 PullResponse (DecodePullResponse into the client's buffers)
//   2 InitRequest (protobuf, ShardStateFromInit, then ShardStore::Init and Export)
//   3 PartitionState (FromProto)
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "fuzz/protobuf_fuzz_util.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "kubetrain/v1/ps.pb.h"
#include "ps/store.h"
#include "ps/tensor_coding.h"
#include "ps/wire.h"

namespace {

namespace ps = kubetrain::ps;

grpc::ByteBuffer Sliced(absl::string_view bytes, size_t chunk) {
  if (chunk == 0) chunk = bytes.size() + 1;
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += chunk) {
    slices.emplace_back(bytes.data() + at, std::min(chunk, bytes.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// A shard holding two small partitions, async so every valid push applies at once.
ps::ShardState SmallShard() {
  ps::ShardState state;
  state.config.mode = ps::UpdateMode::kAsync;
  state.run_id = "run-1";
  state.partitions.push_back({{"dense/kernel", 0}, 0, std::vector<float>(6, 0.5f), {}});
  state.partitions.push_back({{"dense/bias", 0}, 0, std::vector<float>(2, 0.0f), {}});
  return state;
}

void Push(const grpc::ByteBuffer& message) {
  grpc::ByteBuffer buffer = message;
  ps::PushFrame frame;
  if (!frame.Parse(buffer).ok()) return;
  // Values in a shared-memory region: the service finds no region here (ABORTED) and stops.
  if (frame.shm_region() != 0) return;
  ps::ShardStore store;
  if (!store.Init(SmallShard()).ok()) kubetrain::fuzz::Fail("a fixed shard does not Init");
  (void)store.Push(frame.args());
}

void Pull(const grpc::ByteBuffer& message) {
  std::map<std::pair<std::string, uint32_t>, std::vector<float>> buffers;
  (void)ps::DecodePullResponse(message,
                               [&](const ps::PartitionKey& key, uint64_t offset,
                                   uint64_t length) -> absl::StatusOr<std::span<float>> {
                                 (void)offset;
                                 // The client knows its partitions' sizes; anything larger is not
                                 // one of them.
                                 if (length > 4096) return absl::NotFoundError("no such partition");
                                 std::vector<float>& values = buffers[{key.variable, key.index}];
                                 values.assign(length, 0.0f);
                                 return std::span<float>(values);
                               });
}

void Init(absl::string_view bytes) {
  kubetrain::v1::InitRequest request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  absl::StatusOr<ps::ShardState> state = ps::ShardStateFromInit(request);
  if (!state.ok()) return;
  ps::ShardStore store;
  if (!store.Init(*std::move(state)).ok()) return;
  absl::StatusOr<ps::ShardState> exported = store.Export();
  if (exported.ok()) {
    kubetrain::v1::ExportResponse response;
    ps::ShardStateToExport(*exported, &response);
  }
}

void Partition(absl::string_view bytes) {
  kubetrain::v1::PartitionState state;
  if (!state.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  (void)ps::FromProto(state);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kubetrain::fuzz::QuietProtobufLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t mode = data[0] % 4;
  const size_t chunk = data[1];
  const absl::string_view bytes(reinterpret_cast<const char*>(data + 2), size - 2);
  switch (mode) {
    case 0:
      Push(Sliced(bytes, chunk));
      break;
    case 1:
      Pull(Sliced(bytes, chunk));
      break;
    case 2:
      Init(bytes);
      break;
    case 3:
      Partition(bytes);
      break;
  }
  return 0;
}
