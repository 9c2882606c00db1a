#include "localkube/sandbox/sweep.h"

#include <stdlib.h>
#include <unistd.h>
#include <filesystem>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/logging.h"
#include "common/status.h"
#include "localkube/sandbox/lock_file.h"
#include "localkube/sandbox/names.h"
#include "localkube/sandbox/tools.h"

namespace kubetrain::sandbox {
namespace {

using json = nlohmann::json;

// Keeps the first error of several independent removals.
void Keep(absl::Status* first, absl::Status status) {
  if (status.ok() || absl::IsNotFound(status)) return;
  if (first->ok()) *first = std::move(status);
}

// Runs `ip` commands (each its argument list) through one `ip -force -batch`, as one child
// process instead of one each: a network of many sandboxes is removed within the 2 s a program
// has after SIGTERM. When the batch reports a failure (an object already gone is one), each
// command runs again on its own, so that what was gone is told from what could not be removed.
absl::Status RunIpBatch(const std::vector<std::vector<std::string>>& commands) {
  if (commands.empty()) return absl::OkStatus();
  char path[] = "/tmp/kubetrain-ip-batch.XXXXXX";
  int fd = mkstemp(path);
  bool batched = false;
  if (fd >= 0) {
    std::string text;
    for (const auto& command : commands) text += absl::StrJoin(command, " ") + "\n";
    batched = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    close(fd);
    batched = batched && RunTool("ip", {"-force", "-batch", path}).ok();
    unlink(path);
  }
  if (batched) return absl::OkStatus();
  absl::Status first;
  for (const auto& command : commands) Keep(&first, RunTool("ip", command).status());
  return first;
}

std::vector<std::string> Field(const json& rows, const char* key) {
  std::vector<std::string> values;
  for (const json& row : rows) {
    if (row.is_object() && row.contains(key) && row[key].is_string()) {
      values.push_back(row[key].get<std::string>());
    }
  }
  return values;
}

// Instance prefixes of `family` that have a lock file in `lock_dir`.
std::set<std::string> LockedPrefixes(absl::string_view family, absl::string_view lock_dir) {
  std::set<std::string> prefixes;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(lock_dir), ec)) {
    const std::string file = entry.path().filename().string();
    absl::string_view prefix = file;
    if (!absl::ConsumeSuffix(&prefix, ".lock")) continue;
    if (ValidatePrefix(family, prefix).ok()) prefixes.insert(std::string(prefix));
  }
  return prefixes;
}

}  // namespace

std::string InstanceLockPath(absl::string_view lock_dir, absl::string_view prefix) {
  return absl::StrCat(lock_dir, "/", prefix, ".lock");
}

std::string BlockLockPath(absl::string_view lock_dir, int block) {
  return absl::StrFormat("%s/block-%02d.lock", lock_dir, block);
}

absl::Status RemoveInstanceObjects(absl::string_view family, absl::string_view prefix) {
  absl::Status first;
  ASSIGN_OR_RETURN(json links, RunToolJson("ip", {"link", "show"}));
  std::vector<std::string> names = Field(links, "ifname");
  // Host veth ends first: deleting one takes its peer out of the namespace at once, whereas a
  // deleted namespace is cleaned up by the kernel later.
  std::vector<std::vector<std::string>> commands;
  for (const std::string kind : {"v", "b", "i"}) {
    for (const std::string& name : names) {
      if (InstanceOfLink(family, name) == std::string(prefix) &&
          name.substr(prefix.size(), 1) == kind) {
        commands.push_back({"link", "del", name});
      }
    }
    if (kind != "v") continue;
    for (const std::string& ns : ListNetns()) {
      if (InstanceOfNetns(family, ns) == std::string(prefix)) {
        commands.push_back({"netns", "del", ns});
      }
    }
  }
  Keep(&first, RunIpBatch(commands));
  ASSIGN_OR_RETURN(json rules, RunToolJson("ip", {"rule", "show"}));
  for (const json& rule : rules) {
    if (!rule.contains("iif") || !rule["iif"].is_string() || !rule.contains("priority")) continue;
    const std::string iif = rule["iif"].get<std::string>();
    if (InstanceOfLink(family, iif) != std::string(prefix)) continue;
    Keep(&first,
         RunTool("ip", {"rule", "del", "pref", rule["priority"].dump(), "iif", iif}).status());
  }
  return first;
}

absl::StatusOr<std::vector<std::string>> SweepStale(absl::string_view family,
                                                    absl::string_view lock_dir) {
  RETURN_IF_ERROR(ValidateFamily(family));
  std::set<std::string> prefixes = LockedPrefixes(family, lock_dir);
  ASSIGN_OR_RETURN(json links, RunToolJson("ip", {"link", "show"}));
  for (const std::string& name : Field(links, "ifname")) {
    if (auto prefix = InstanceOfLink(family, name)) prefixes.insert(*prefix);
  }
  for (const std::string& name : ListNetns()) {
    if (auto prefix = InstanceOfNetns(family, name)) prefixes.insert(*prefix);
  }
  ASSIGN_OR_RETURN(json rules, RunToolJson("ip", {"rule", "show"}));
  for (const std::string& iif : Field(rules, "iif")) {
    if (auto prefix = InstanceOfLink(family, iif)) prefixes.insert(*prefix);
  }
  std::error_code ec;
  std::filesystem::create_directories(std::string(lock_dir), ec);
  std::vector<std::string> swept;
  absl::Status first;
  for (const std::string& prefix : prefixes) {
    absl::StatusOr<std::unique_ptr<LockFile>> lock =
        LockFile::TryAcquire(InstanceLockPath(lock_dir, prefix));
    Keep(&first, lock.status());
    if (!lock.ok() || *lock == nullptr) continue;  // a live instance's
    absl::Status removed = RemoveInstanceObjects(family, prefix);
    if (!removed.ok()) {
      log::Warn("Failed to sweep a stale sandbox network", {{"prefix", prefix}, {"err", removed}});
      Keep(&first, removed);  // what is left still carries the prefix: the next sweep retries
      continue;
    }
    log::Info("Swept a stale sandbox network", {{"prefix", prefix}});
    swept.push_back(prefix);
  }
  for (int block = 0; block < kBlocks; ++block) {
    const std::string path = BlockLockPath(lock_dir, block);
    if (!std::filesystem::exists(path, ec)) continue;
    absl::StatusOr<std::unique_ptr<LockFile>> lock = LockFile::TryAcquire(path);
    Keep(&first, lock.status());  // taken and dropped: the file goes with it
  }
  if (!first.ok()) return first;
  return swept;
}

}  // namespace kubetrain::sandbox
