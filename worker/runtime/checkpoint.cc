#include "worker/runtime/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "kubetrain/v1/checkpoint.pb.h"
#include "ps/wire.h"

namespace kubetrain::worker {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kManifest[] = "checkpoint.json";
// Starts every checkpoint file; a protobuf never starts with 'K' (field 9, a group), so files
// of the older format (the bare payload) are told apart.
constexpr absl::string_view kCheckpointMagic = "KTCKPT1\n";
constexpr size_t kHeaderBytes = 8 + 4 + 8;  // magic, CRC-32, payload length
constexpr uintmax_t kMaxManifestBytes = 1 << 20;
// Protobuf cannot parse more; a checkpoint of a known model is held to far less.
constexpr uintmax_t kMaxCheckpointBytes = uintmax_t{2} << 30;
// Bounds the name search when a directory already holds many checkpoints of one step.
constexpr int kMaxNameSuffix = 1000;

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

absl::StatusOr<std::vector<float>> Floats(const std::string& bytes, absl::string_view what) {
  if (bytes.size() % sizeof(float) != 0) {
    return absl::DataLossError(
        absl::StrCat(what, " is ", bytes.size(), " bytes, not a whole number of float32 values"));
  }
  std::vector<float> v(bytes.size() / sizeof(float));
  // memcpy from or to a null pointer is undefined even for zero bytes (an empty vector's data()).
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

void PutLittleEndian(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t GetLittleEndian(absl::string_view in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= uint64_t{static_cast<uint8_t>(in[i])} << (8 * i);
  return value;
}

uint32_t Crc32(absl::string_view data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (!data.empty()) {
    const uInt n = static_cast<uInt>(std::min<size_t>(data.size(), 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data()), n);
    data.remove_prefix(n);
  }
  return static_cast<uint32_t>(crc);
}

std::string Frame(const std::string& payload) {
  std::string out(kCheckpointMagic);
  out.reserve(kHeaderBytes + payload.size());
  PutLittleEndian(Crc32(payload), 4, &out);
  PutLittleEndian(payload.size(), 8, &out);
  out += payload;
  return out;
}

// The payload of a checkpoint file, its checksum verified. Files of the older format carry no
// checksum: they are read as they are, with a warning.
absl::StatusOr<absl::string_view> Unframe(absl::string_view data, const std::string& path) {
  // A bare payload may be empty too, but no checkpoint of a model is: an empty file is one whose
  // writing never began (a disk that was full, a run killed at that moment).
  if (data.empty()) {
    return absl::DataLossError(
        absl::StrCat(path,
                     " is empty (0 bytes): its writing was cut short (a full disk, a killed run); "
                     "delete it to resume from an earlier checkpoint"));
  }
  if (data.size() < kCheckpointMagic.size() && absl::StartsWith(kCheckpointMagic, data)) {
    return absl::DataLossError(absl::StrCat(path, " is truncated: ", data.size(), " bytes"));
  }
  if (!absl::StartsWith(data, kCheckpointMagic)) {
    log::Warn("Checkpoint has no checksum (older format); reading it unverified", {{"file", path}});
    return data;
  }
  if (data.size() < kHeaderBytes) {
    return absl::DataLossError(absl::StrCat(path, " is truncated: ", data.size(), " bytes"));
  }
  const uint32_t crc = static_cast<uint32_t>(GetLittleEndian(data.substr(8), 4));
  const uint64_t length = GetLittleEndian(data.substr(12), 8);
  absl::string_view payload = data.substr(kHeaderBytes);
  if (payload.size() != length) {
    return absl::DataLossError(absl::StrCat(path, " is truncated or padded: its header says ",
                                            length, " payload bytes, it holds ", payload.size()));
  }
  if (Crc32(payload) != crc) {
    return absl::DataLossError(absl::StrCat(path, " is corrupt: checksum mismatch"));
  }
  return payload;
}

// Reads a regular file of at most `max_bytes` (a FIFO or device would block or never end).
absl::StatusOr<std::string> ReadFile(const fs::path& path, uintmax_t max_bytes) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return absl::NotFoundError(absl::StrCat(path.string(), " not found"));
  if (!fs::is_regular_file(st)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path.string(), " is not a regular file; move it out of the directory"));
  }
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot read ", path.string()));
  if (size > max_bytes) {
    return absl::DataLossError(absl::StrCat(path.string(), " is ", size,
                                            " bytes, more than a checkpoint of this model can be (",
                                            max_bytes, ")"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::UnavailableError(absl::StrCat("cannot read ", path.string()));
  std::string data(size, '\0');
  in.read(data.data(), static_cast<std::streamsize>(size));
  data.resize(static_cast<size_t>(in.gcount()));
  return data;
}

// ckpt-<step>.pb or ckpt-<step>.<n>.pb: the names Save writes, and the only ones the manifest
// may name (so no entry can point outside the directory).
bool IsCheckpointName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "ckpt-") || !absl::ConsumeSuffix(&name, ".pb")) return false;
  std::vector<absl::string_view> parts = absl::StrSplit(name, '.');
  if (parts.size() > 2) return false;
  for (absl::string_view part : parts) {
    if (part.empty() || part.size() > 19) return false;
    for (char c : part) {
      if (!absl::ascii_isdigit(c)) return false;
    }
  }
  return true;
}

v1::Checkpoint ToCheckpoint(const ps::ModelState& state, const std::string& model) {
  v1::Checkpoint ckpt;
  ckpt.set_global_step(state.global_step);
  ckpt.set_gradients_applied(state.gradients_applied);
  *ckpt.mutable_config() = ps::ToProto(state.config);
  ckpt.set_run_id(state.run_id);
  ckpt.set_model(model);
  ckpt.set_unix_millis(absl::ToUnixMillis(absl::Now()));
  for (const ps::VariableState& v : state.variables) {
    v1::VariableCheckpoint* out = ckpt.add_variables();
    out->set_name(v.name);
    out->set_values(Bytes(v.values));
    for (const auto& [name, slot] : v.slots) (*out->mutable_slots())[name] = Bytes(slot);
  }
  return ckpt;
}

absl::StatusOr<ps::ModelState> FromCheckpoint(const v1::Checkpoint& ckpt) {
  ps::ModelState state;
  ASSIGN_OR_RETURN(state.config, ps::FromProto(ckpt.config()));
  state.global_step = ckpt.global_step();
  state.gradients_applied = std::max<int64_t>(0, ckpt.gradients_applied());
  state.run_id = ckpt.run_id();
  for (const v1::VariableCheckpoint& v : ckpt.variables()) {
    ps::VariableState var{v.name(), {}, {}};
    ASSIGN_OR_RETURN(var.values, Floats(v.values(), absl::StrCat("variable ", v.name())));
    for (const auto& [name, slot] : v.slots()) {
      ASSIGN_OR_RETURN(var.slots[name],
                       Floats(slot, absl::StrCat("slot ", name, " of variable ", v.name())));
    }
    state.variables.push_back(std::move(var));
  }
  return state;
}

// The first NaN or infinite value of `state`, described, or "" when every value is finite.
std::string FirstNonFinite(const ps::ModelState& state) {
  auto find = [](const std::vector<float>& values) -> int64_t {
    for (size_t i = 0; i < values.size(); ++i) {
      if (!std::isfinite(values[i])) return static_cast<int64_t>(i);
    }
    return -1;
  };
  for (const ps::VariableState& v : state.variables) {
    if (int64_t i = find(v.values); i >= 0) {
      return absl::StrCat("variable ", v.name, " holds ", v.values[i], " at index ", i);
    }
    for (const auto& [name, slot] : v.slots) {
      if (int64_t i = find(slot); i >= 0) {
        return absl::StrCat("slot ", name, " of variable ", v.name, " holds ", slot[i],
                            " at index ", i);
      }
    }
  }
  return "";
}

// Refuses a checkpoint that cannot be this job's: out-of-range step, another model's
// variables, NaN or infinite values.
absl::Status CheckFits(const ps::ModelState& state, const CheckpointExpectation& expected,
                       const std::string& path) {
  if (state.global_step < 0) {
    return absl::DataLossError(
        absl::StrCat(path, " has a negative global step ", state.global_step));
  }
  if (expected.max_step >= 0 && state.global_step > expected.max_step) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is at global step ", state.global_step, ", beyond the ", expected.max_step,
        " steps this job trains; raise --epochs to continue it, or use another --checkpoint-dir"));
  }
  if (!expected.variables.empty()) {
    const std::string fix = "; it was written for another model, use another --checkpoint-dir";
    for (const ps::VariableSpec& spec : expected.variables) {
      const ps::VariableState* saved = nullptr;
      for (const ps::VariableState& v : state.variables) {
        if (v.name == spec.name) saved = &v;
      }
      if (saved == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat(
            path, " lacks variable ", spec.name, " of the ", expected.model, " model", fix));
      }
      if (saved->values.size() != spec.elements) {
        return absl::FailedPreconditionError(
            absl::StrCat(path, ": variable ", spec.name, " has ", saved->values.size(),
                         " values, the ", expected.model, " model's has ", spec.elements, fix));
      }
    }
    for (const ps::VariableState& v : state.variables) {
      bool known = false;
      for (const ps::VariableSpec& spec : expected.variables) known |= spec.name == v.name;
      if (!known) {
        return absl::FailedPreconditionError(absl::StrCat(
            path, " holds variable ", v.name, ", which the ", expected.model, " model lacks", fix));
      }
    }
  }
  for (const ps::VariableState& v : state.variables) {
    for (const auto& [name, slot] : v.slots) {
      if (slot.size() != v.values.size()) {
        return absl::DataLossError(absl::StrCat(path, ": slot ", name, " of variable ", v.name,
                                                " has ", slot.size(), " values, the variable ",
                                                v.values.size()));
      }
    }
  }
  if (std::string bad = FirstNonFinite(state); !bad.empty()) {
    return absl::DataLossError(absl::StrCat(
        path, ": ", bad,
        " (training had diverged); delete it to resume from an earlier checkpoint, or use "
        "another --checkpoint-dir"));
  }
  return absl::OkStatus();
}

uintmax_t MaxCheckpointBytes(const CheckpointExpectation& expected) {
  if (expected.variables.empty()) return kMaxCheckpointBytes;
  uintmax_t elements = 0;
  for (const ps::VariableSpec& v : expected.variables) elements += v.elements;
  // Values plus a few optimizer slots, with room for names and framing.
  return std::min(kMaxCheckpointBytes, elements * sizeof(float) * 8 + (uintmax_t{1} << 20));
}

struct Loaded {
  ps::ModelState state;
  int64_t unix_millis = 0;
};

// Reads, verifies and checks one checkpoint file.
absl::StatusOr<Loaded> LoadFile(const fs::path& file, const CheckpointExpectation& expected) {
  const std::string path = file.string();
  ASSIGN_OR_RETURN(std::string data, ReadFile(file, MaxCheckpointBytes(expected)));
  ASSIGN_OR_RETURN(absl::string_view payload, Unframe(data, path));
  v1::Checkpoint ckpt;
  if (!ckpt.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return absl::DataLossError(absl::StrCat(path, ": not a kubetrain checkpoint"));
  }
  if (ckpt.model() != expected.model) {
    return absl::FailedPreconditionError(absl::StrCat(path, " holds a ", ckpt.model(),
                                                      " model, this run trains ", expected.model,
                                                      "; use another --checkpoint-dir"));
  }
  Loaded loaded;
  loaded.unix_millis = ckpt.unix_millis();
  ASSIGN_OR_RETURN(loaded.state, FromCheckpoint(ckpt), path);
  RETURN_IF_ERROR(CheckFits(loaded.state, expected, path));
  return loaded;
}

// The manifest, NOT_FOUND when there is none, or an error saying why it cannot be used.
absl::StatusOr<json> ReadManifest(const fs::path& dir) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(dir / kManifest, kMaxManifestBytes));
  json manifest = json::parse(text, nullptr, false);
  if (!manifest.is_object() || !manifest.contains("all") || !manifest["all"].is_array()) {
    return absl::DataLossError("not a JSON object with an \"all\" array");
  }
  if (manifest.contains("latest") && (!manifest["latest"].is_string() ||
                                      !IsCheckpointName(manifest["latest"].get<std::string>()))) {
    return absl::DataLossError(
        absl::StrCat("\"latest\" is ", manifest["latest"].dump(), ", not a checkpoint file name"));
  }
  return manifest;
}

// The newest valid checkpoint among the files of `dir`, for when the manifest cannot say.
absl::StatusOr<std::optional<ps::ModelState>> Scan(const fs::path& dir,
                                                   const CheckpointExpectation& expected,
                                                   std::string* path) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  std::optional<Loaded> best;
  std::string best_path;
  std::vector<std::string> refused;
  int seen = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!IsCheckpointName(name)) continue;
    if (++seen > 10 * kMaxNameSuffix) break;
    absl::StatusOr<Loaded> loaded = LoadFile(it->path(), expected);
    if (!loaded.ok()) {
      log::Warn("Skipping a checkpoint that cannot be restored",
                {{"file", it->path().string()}, {"error", loaded.status()}});
      refused.push_back(std::string(loaded.status().message()));
      continue;
    }
    if (!best || std::make_pair(loaded->state.global_step, loaded->unix_millis) >
                     std::make_pair(best->state.global_step, best->unix_millis)) {
      best = std::move(*loaded);
      best_path = it->path().string();
    }
  }
  if (best) {
    log::Warn("Restoring the newest valid checkpoint found in the directory",
              {{"file", best_path}, {"global_step", best->state.global_step}});
    if (path != nullptr) *path = best_path;
    return std::move(best->state);
  }
  if (!refused.empty()) {
    if (refused.size() > 3) refused.resize(3);
    return absl::DataLossError(
        absl::StrCat("no usable checkpoint in ", dir.string(), ", though it holds ", seen,
                     " checkpoint file(s): ", absl::StrJoin(refused, "; "),
                     ". Move them away to start afresh, or use another --checkpoint-dir"));
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<std::string> Checkpointer::Save(const ps::ModelState& state,
                                               const std::string& model) {
  if (std::string bad = FirstNonFinite(state); !bad.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("not checkpointing step ", state.global_step, ": ", bad,
                     "; training has diverged (try a lower --lr)"));
  }
  ASSIGN_OR_RETURN(const CheckpointDir* dir, Dir());
  // Never over another run's file: a later run starting at a step an earlier one reached gets
  // a name of its own.
  std::string name = absl::StrCat("ckpt-", state.global_step, ".pb");
  for (int n = 1; !written_.contains(name) && dir->Exists(name); ++n) {
    if (n > kMaxNameSuffix) {
      return absl::FailedPreconditionError(
          absl::StrCat(dir->path(), " already holds ", kMaxNameSuffix, " checkpoints of step ",
                       state.global_step, "; use another --checkpoint-dir"));
    }
    name = absl::StrCat("ckpt-", state.global_step, ".", n, ".pb");
  }
  std::string data;
  ToCheckpoint(state, model).SerializeToString(&data);
  RETURN_IF_ERROR(dir->WriteAtomically(name, Frame(data)));

  json all = json::array();
  absl::StatusOr<json> manifest = ReadManifest(dir->path());
  if (manifest.ok()) {
    for (const json& entry : (*manifest)["all"]) {
      if (entry.is_string() && IsCheckpointName(entry.get<std::string>()) && entry != name) {
        all.push_back(entry);
      }
    }
  } else if (!absl::IsNotFound(manifest.status())) {
    // The checkpoints it listed are kept rather than rotated: nothing says which are whose.
    log::Warn("Replacing an unreadable checkpoint manifest; the checkpoints it listed are kept",
              {{"file", dir->PathOf(kManifest)}, {"error", manifest.status()}});
  }
  all.push_back(name);
  std::vector<std::string> dropped;
  while (static_cast<int>(all.size()) > std::max(options_.keep, 1)) {
    dropped.push_back(all.front().get<std::string>());
    all.erase(all.begin());
  }
  // The manifest before any deletion: when it cannot be written, the directory stays as it was
  // (the new file, which nothing lists, goes too; a file this Checkpointer wrote before and now
  // rewrote keeps its new contents, as valid as the old).
  if (absl::Status s =
          dir->WriteAtomically(kManifest, json{{"latest", name}, {"all", all}}.dump(2));
      !s.ok()) {
    if (!written_.contains(name)) dir->Remove(name);
    return s;
  }
  written_.insert(name);
  for (const std::string& old : dropped) dir->Remove(old);
  return dir->PathOf(name);
}

absl::Status Checkpointer::Open() const { return Dir().status(); }

absl::StatusOr<const CheckpointDir*> Checkpointer::Dir() const {
  std::lock_guard<std::mutex> lock(dir_mu_);
  if (dir_ == nullptr) {
    ASSIGN_OR_RETURN(dir_, CheckpointDir::Open(options_.dir, options_.job));
  }
  return dir_.get();
}

absl::StatusOr<std::optional<ps::ModelState>> Checkpointer::LoadLatest(
    const CheckpointExpectation& expected, std::string* path) const {
  // Nothing is read from a directory that another user could have planted a checkpoint in.
  RETURN_IF_ERROR(Open());
  const fs::path dir(options_.dir);
  const std::string manifest_path = (dir / kManifest).string();
  absl::StatusOr<json> manifest = ReadManifest(dir);
  if (!manifest.ok()) {
    if (!absl::IsNotFound(manifest.status())) {
      log::Warn("Checkpoint manifest is unreadable; looking for the newest valid checkpoint",
                {{"file", manifest_path}, {"error", manifest.status()}});
    }
    return Scan(dir, expected, path);
  }
  if (!manifest->contains("latest")) return Scan(dir, expected, path);
  const fs::path latest = dir / (*manifest)["latest"].get<std::string>();
  std::error_code ec;
  if (!fs::exists(latest, ec)) {
    log::Warn("Checkpoint manifest names a missing file; looking for the newest valid checkpoint",
              {{"file", manifest_path}, {"missing", latest.string()}});
    return Scan(dir, expected, path);
  }
  ASSIGN_OR_RETURN(Loaded loaded, LoadFile(latest, expected));
  if (path != nullptr) *path = latest.string();
  return std::move(loaded.state);
}

}  // namespace kubetrain::worker
