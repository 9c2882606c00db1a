// Conversions between the store's C++ types and the kubetrain.v1 wire messages, shared by the
// service and the client so both ends agree on one encoding (little-endian float32 `bytes`).
#pragma once

#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/support/status.h"
#include "kubetrain/v1/ps.pb.h"
#include "ps/store.h"

namespace kubetrain::ps {

// Replaces `*out` with the bytes of `values`: one memcpy, no per-element encoding.
void SetFloats(std::span<const float> values, std::string* out);
// Copies `bytes` into `out`; INVALID_ARGUMENT unless the sizes match exactly.
absl::Status CopyFloats(const std::string& bytes, std::span<float> out);

// gRPC and absl share the canonical code numbering, so codes map one to one.
grpc::Status ToGrpc(const absl::Status& status);
absl::Status FromGrpc(const grpc::Status& status);

v1::PartitionKey ToProto(const PartitionKey& key);
PartitionKey FromProto(const v1::PartitionKey& key);

v1::TrainingConfig ToProto(const TrainingConfig& config);
// INVALID_ARGUMENT for an unspecified mode or optimizer.
absl::StatusOr<TrainingConfig> FromProto(const v1::TrainingConfig& config);

void ToProto(const PartitionState& state, v1::PartitionState* out);
// INVALID_ARGUMENT when a byte length is not 4 × length.
absl::StatusOr<PartitionState> FromProto(const v1::PartitionState& state);

// The shard state an Init carries (Export answers with the same fields).
absl::StatusOr<ShardState> ShardStateFromInit(const v1::InitRequest& request);
void ShardStateToExport(const ShardState& state, v1::ExportResponse* out);

}  // namespace kubetrain::ps
