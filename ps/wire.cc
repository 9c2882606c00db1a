#include "ps/wire.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kubetrain::ps {
namespace {

absl::StatusOr<UpdateMode> ModeFromProto(v1::UpdateMode mode) {
  switch (mode) {
    case v1::UPDATE_MODE_SYNC:
      return UpdateMode::kSync;
    case v1::UPDATE_MODE_ASYNC:
      return UpdateMode::kAsync;
    default:
      return absl::InvalidArgumentError("update mode not set (want SYNC or ASYNC)");
  }
}

// Each optimizer kind and its wire enum, read both ways.
constexpr std::pair<OptimizerKind, v1::OptimizerKind> kOptimizerKinds[] = {
    {OptimizerKind::kSgd, v1::OPTIMIZER_SGD},
    {OptimizerKind::kMomentum, v1::OPTIMIZER_MOMENTUM},
    {OptimizerKind::kAdam, v1::OPTIMIZER_ADAM},
    {OptimizerKind::kAdagrad, v1::OPTIMIZER_ADAGRAD},
};

absl::StatusOr<OptimizerKind> KindFromProto(v1::OptimizerKind kind) {
  for (const auto& [ours, wire] : kOptimizerKinds) {
    if (wire == kind) return ours;
  }
  return absl::InvalidArgumentError("optimizer kind not set");
}

v1::OptimizerKind KindToProto(OptimizerKind kind) {
  for (const auto& [ours, wire] : kOptimizerKinds) {
    if (ours == kind) return wire;
  }
  return v1::OPTIMIZER_UNSPECIFIED;
}

absl::StatusOr<std::vector<float>> FloatsFromBytes(const std::string& bytes, uint64_t length,
                                                   absl::string_view what) {
  // Compared by division: length * 4 wraps for a length near 2^62, and the vector below would
  // then be sized from the claim rather than from the bytes received.
  if (bytes.size() % sizeof(float) != 0 || bytes.size() / sizeof(float) != length) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has ", bytes.size(),
                                                   " value bytes for length ", length,
                                                   "; want 4 bytes (float32) per element"));
  }
  std::vector<float> out(length);
  // memcpy to or from a null pointer is undefined even for zero bytes (an empty vector's data()).
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

}  // namespace

void SetFloats(std::span<const float> values, std::string* out) {
  // resize + memcpy rather than assign(char*) keeps it to exactly one pass over the data.
  out->resize(values.size_bytes());
  if (!values.empty()) std::memcpy(out->data(), values.data(), values.size_bytes());
}

absl::Status CopyFloats(const std::string& bytes, std::span<float> out) {
  if (bytes.size() != out.size_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("got ", bytes.size(), " bytes, want ", out.size_bytes()));
  }
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return absl::OkStatus();
}

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return {static_cast<grpc::StatusCode>(status.code()), std::string(status.message())};
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return {static_cast<absl::StatusCode>(status.error_code()), status.error_message()};
}

v1::PartitionKey ToProto(const PartitionKey& key) {
  v1::PartitionKey out;
  out.set_variable(key.variable);
  out.set_index(key.index);
  return out;
}

PartitionKey FromProto(const v1::PartitionKey& key) { return {key.variable(), key.index()}; }

v1::TrainingConfig ToProto(const TrainingConfig& config) {
  v1::TrainingConfig out;
  out.set_mode(config.mode == UpdateMode::kSync ? v1::UPDATE_MODE_SYNC : v1::UPDATE_MODE_ASYNC);
  out.set_replicas_to_aggregate(static_cast<uint32_t>(config.replicas_to_aggregate));
  const OptimizerOptions& o = config.optimizer;
  v1::OptimizerConfig* opt = out.mutable_optimizer();
  opt->set_kind(KindToProto(o.kind));
  opt->set_learning_rate(o.learning_rate);
  opt->set_momentum(o.momentum);
  opt->set_beta1(o.beta1);
  opt->set_beta2(o.beta2);
  opt->set_epsilon(o.epsilon);
  opt->set_initial_accumulator(o.initial_accumulator);
  opt->set_warmup_steps(o.warmup_steps);
  opt->set_decay_steps(o.decay_steps);
  opt->set_min_lr_ratio(o.min_lr_ratio);
  out.set_elastic(config.elastic);
  out.set_backup_workers(static_cast<uint32_t>(config.backup_workers));
  out.set_min_members(static_cast<uint32_t>(config.min_members));
  out.set_member_timeout_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(config.member_timeout)));
  return out;
}

absl::StatusOr<TrainingConfig> FromProto(const v1::TrainingConfig& config) {
  TrainingConfig out;
  auto mode = ModeFromProto(config.mode());
  if (!mode.ok()) return mode.status();
  auto kind = KindFromProto(config.optimizer().kind());
  if (!kind.ok()) return kind.status();
  out.mode = *mode;
  out.replicas_to_aggregate = static_cast<int>(config.replicas_to_aggregate());
  const v1::OptimizerConfig& o = config.optimizer();
  out.optimizer = {.kind = *kind,
                   .learning_rate = o.learning_rate(),
                   .warmup_steps = o.warmup_steps(),
                   .decay_steps = o.decay_steps(),
                   .min_lr_ratio = o.min_lr_ratio(),
                   .momentum = o.momentum(),
                   .beta1 = o.beta1(),
                   .beta2 = o.beta2(),
                   .epsilon = o.epsilon(),
                   .initial_accumulator = o.initial_accumulator()};
  out.elastic = config.elastic();
  if (config.backup_workers() > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("backup_workers: ", config.backup_workers(), " is over the limit of 1024"));
  }
  out.backup_workers = static_cast<int>(config.backup_workers());
  if (config.min_members() > 100000) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_members: ", config.min_members(), " is over the limit of 100000"));
  }
  out.min_members = std::max(1, static_cast<int>(config.min_members()));
  if (config.member_timeout_ms() > 0) {
    out.member_timeout = absl::Milliseconds(config.member_timeout_ms());
  }
  return out;
}

void ToProto(const PartitionState& state, v1::PartitionState* out) {
  v1::Partition* p = out->mutable_partition();
  *p->mutable_key() = ToProto(state.key);
  p->set_offset(state.offset);
  p->set_length(state.values.size());
  SetFloats(state.values, p->mutable_values());
  for (const auto& [name, values] : state.slots) {
    v1::Slot* slot = out->add_slots();
    slot->set_name(name);
    SetFloats(values, slot->mutable_values());
  }
}

absl::StatusOr<PartitionState> FromProto(const v1::PartitionState& state) {
  const v1::Partition& p = state.partition();
  PartitionState out;
  out.key = FromProto(p.key());
  out.offset = p.offset();
  const std::string name = absl::StrCat("partition ", out.key.variable, "/", out.key.index);
  auto values = FloatsFromBytes(p.values(), p.length(), name);
  if (!values.ok()) return values.status();
  out.values = *std::move(values);
  for (const v1::Slot& slot : state.slots()) {
    auto slot_values = FloatsFromBytes(slot.values(), p.length(),
                                       absl::StrCat("slot ", slot.name(), " of ", name));
    if (!slot_values.ok()) return slot_values.status();
    if (!out.slots.emplace(slot.name(), *std::move(slot_values)).second) {
      return absl::InvalidArgumentError(absl::StrCat("slot ", slot.name(), " twice in ", name));
    }
  }
  return out;
}

absl::StatusOr<ShardState> ShardStateFromInit(const v1::InitRequest& request) {
  ShardState state;
  auto config = FromProto(request.config());
  if (!config.ok()) return config.status();
  state.config = *config;
  state.global_step = request.global_step();
  state.run_id = request.run_id();
  state.gradients_applied = request.gradients_applied();
  state.partitions.reserve(request.partitions_size());
  for (const v1::PartitionState& p : request.partitions()) {
    auto partition = FromProto(p);
    if (!partition.ok()) return partition.status();
    state.partitions.push_back(*std::move(partition));
  }
  return state;
}

void ShardStateToExport(const ShardState& state, v1::ExportResponse* out) {
  *out->mutable_config() = ToProto(state.config);
  out->set_global_step(state.global_step);
  out->set_run_id(state.run_id);
  out->set_gradients_applied(state.gradients_applied);
  for (const PartitionState& p : state.partitions) ToProto(p, out->add_partitions());
}

}  // namespace kubetrain::ps
