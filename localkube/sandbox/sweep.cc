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
  ASSIGN_OR_RETURN(json links, RunToolJson("ip", {"link", "show"}));
  ASSIGN_OR_RETURN(json rules, RunToolJson("ip", {"rule", "show"}));
  // Everything goes in one `ip` batch. The instance's links go first, in one kernel call when
  // they are all in its link group and the group holds nothing else: the kernel then waits out
  // one RCU grace period for all of them rather than one per link, 80 against 370 ms for 9
  // sandboxes on 3 nodes (architecture.md §9 "Stopping"). A veth's deletion takes its peer out
  // of the sandbox's namespace at once, whereas a namespace that goes first is cleaned up by the
  // kernel later, with the host end still there meanwhile.
  const std::string group = absl::StrCat(LinkGroup(prefix));
  std::vector<std::string> grouped, by_name;  // the instance's links, in its group or not
  bool group_is_ours = true;
  for (const json& link : links) {
    if (!link.is_object() || !link.contains("ifname") || !link["ifname"].is_string()) continue;
    const std::string name = link["ifname"].get<std::string>();
    const bool in_group = link.contains("group") && link["group"] == group;
    if (InstanceOfLink(family, name) == std::string(prefix)) {
      (in_group ? grouped : by_name).push_back(name);
    } else if (in_group) {
      group_is_ours = false;  // someone else's link in the group: delete by name only
    }
  }
  std::vector<std::vector<std::string>> commands;
  if (group_is_ours && !grouped.empty()) {
    commands.push_back({"link", "del", "group", group});
  } else {
    by_name.insert(by_name.end(), grouped.begin(), grouped.end());
  }
  // By name, host veth ends before the bridges they are ports of, then the ifbs.
  for (const char kind : {'v', 'b', 'i'}) {
    for (const std::string& name : by_name) {
      if (name[prefix.size()] == kind) commands.push_back({"link", "del", name});
    }
  }
  for (const std::string& ns : ListNetns()) {
    if (InstanceOfNetns(family, ns) == std::string(prefix)) {
      commands.push_back({"netns", "del", ns});
    }
  }
  for (const json& rule : rules) {
    if (!rule.is_object() || !rule.contains("iif") || !rule["iif"].is_string() ||
        !rule.contains("priority")) {
      continue;
    }
    const std::string iif = rule["iif"].get<std::string>();
    if (InstanceOfLink(family, iif) != std::string(prefix)) continue;
    commands.push_back({"rule", "del", "pref", rule["priority"].dump(), "iif", iif});
  }
  return RunIpBatch(commands);  // what was already gone is no failure there
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
