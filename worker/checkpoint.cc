#include "worker/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status.h"
#include "kubetrain/v1/checkpoint.pb.h"
#include "ps/wire.h"

namespace kubetrain::worker {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kManifest[] = "checkpoint.json";

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

// Writes `data` to `path` atomically: temporary file, fsync, rename, fsync of the directory.
absl::Status WriteAtomically(const fs::path& path, const std::string& data) {
  fs::path tmp = path;
  tmp += ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot write ", tmp.string(), ": ", std::strerror(errno)));
  }
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      return absl::UnavailableError(
          absl::StrCat("writing ", tmp.string(), ": ", std::strerror(err)));
    }
    done += n;
  }
  bool synced = fsync(fd) == 0;
  close(fd);
  if (!synced) return absl::UnavailableError(absl::StrCat("fsync ", tmp.string(), " failed"));
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec)
    return absl::UnavailableError(absl::StrCat("rename to ", path.string(), ": ", ec.message()));
  int dir = open(path.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    fsync(dir);
    close(dir);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path.string()));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

v1::Checkpoint ToCheckpoint(const ps::ModelState& state, const std::string& model) {
  v1::Checkpoint ckpt;
  ckpt.set_global_step(state.global_step);
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
  state.run_id = ckpt.run_id();
  for (const v1::VariableCheckpoint& v : ckpt.variables()) {
    ps::VariableState var{v.name(), Floats(v.values()), {}};
    for (const auto& [name, slot] : v.slots()) var.slots[name] = Floats(slot);
    state.variables.push_back(std::move(var));
  }
  return state;
}

json ReadManifest(const fs::path& dir) {
  absl::StatusOr<std::string> text = ReadFile(dir / kManifest);
  if (!text.ok()) return {{"all", json::array()}};
  json manifest = json::parse(*text, nullptr, false);
  if (!manifest.is_object() || !manifest.contains("all") || !manifest["all"].is_array()) {
    return {{"all", json::array()}};
  }
  return manifest;
}

}  // namespace

absl::StatusOr<std::string> Checkpointer::Save(const ps::ModelState& state,
                                               const std::string& model) {
  fs::path dir(options_.dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create checkpoint directory ", dir.string(), ": ", ec.message()));
  }
  std::string name = absl::StrCat("ckpt-", state.global_step, ".pb");
  std::string data;
  ToCheckpoint(state, model).SerializeToString(&data);
  RETURN_IF_ERROR(WriteAtomically(dir / name, data));

  json manifest = ReadManifest(dir);
  json all = json::array();
  for (const json& entry : manifest["all"]) {
    if (entry.is_string() && entry != name) all.push_back(entry);
  }
  all.push_back(name);
  while (static_cast<int>(all.size()) > std::max(options_.keep, 1)) {
    fs::remove(dir / all.front().get<std::string>(), ec);
    all.erase(all.begin());
  }
  RETURN_IF_ERROR(WriteAtomically(dir / kManifest, json{{"latest", name}, {"all", all}}.dump(2)));
  return (dir / name).string();
}

absl::StatusOr<std::optional<ps::ModelState>> Checkpointer::LoadLatest(
    const std::string& model) const {
  fs::path dir(options_.dir);
  json manifest = ReadManifest(dir);
  if (!manifest.contains("latest") || !manifest["latest"].is_string()) return std::nullopt;
  fs::path path = dir / manifest["latest"].get<std::string>();
  ASSIGN_OR_RETURN(std::string data, ReadFile(path));
  v1::Checkpoint ckpt;
  if (!ckpt.ParseFromString(data)) {
    return absl::DataLossError(absl::StrCat(path.string(), ": not a kubetrain checkpoint"));
  }
  if (ckpt.model() != model) {
    return absl::FailedPreconditionError(absl::StrCat(path.string(), " holds a ", ckpt.model(),
                                                      " model, this run trains ", model,
                                                      "; use another --checkpoint-dir"));
  }
  ASSIGN_OR_RETURN(ps::ModelState state, FromCheckpoint(ckpt), path.string());
  return state;
}

}  // namespace kubetrain::worker
