// The DefaultTolerationSeconds admission plugin (see default_tolerations.h).
#include "localkube/default_tolerations.h"

#include <atomic>
#include <string>

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

std::atomic<int64_t> not_ready_seconds{300};
std::atomic<int64_t> unreachable_seconds{300};

// Whether `tolerations` already tolerate the NoExecute taint `key` in the plugin's sense.
bool Tolerates(const json& tolerations, const std::string& key) {
  for (const json& t : tolerations) {
    if (!t.is_object()) continue;
    std::string k = t.value("key", ""), effect = t.value("effect", "");
    if ((k == key || k.empty()) && (effect == "NoExecute" || effect.empty())) return true;
  }
  return false;
}

}  // namespace

void SetDefaultTolerationSeconds(int64_t not_ready, int64_t unreachable) {
  not_ready_seconds = not_ready;
  unreachable_seconds = unreachable;
}

void AdmitPodDefaultTolerations(json* pod) {
  if (!pod->contains("spec") || !(*pod)["spec"].is_object()) return;  // validation reports it
  json& spec = (*pod)["spec"];
  if (!spec.contains("tolerations") || spec["tolerations"].is_null()) {
    spec["tolerations"] = json::array();
  }
  if (!spec["tolerations"].is_array()) return;  // validation reports it
  json& tolerations = spec["tolerations"];
  const bool not_ready = Tolerates(tolerations, kTaintNotReady);
  const bool unreachable = Tolerates(tolerations, kTaintUnreachable);
  if (!not_ready) {
    tolerations.push_back({{"key", kTaintNotReady},
                           {"operator", "Exists"},
                           {"effect", "NoExecute"},
                           {"tolerationSeconds", not_ready_seconds.load()}});
  }
  if (!unreachable) {
    tolerations.push_back({{"key", kTaintUnreachable},
                           {"operator", "Exists"},
                           {"effect", "NoExecute"},
                           {"tolerationSeconds", unreachable_seconds.load()}});
  }
}

}  // namespace kubetrain::localkube
