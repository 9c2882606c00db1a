#include "operator/kube/testing/fake_api.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status.h"

namespace kubetrain::kube::testing {

using nlohmann::json;

class FakeApiClient::View : public ObjectCache {
 public:
  View(FakeApiClient& api, std::string plural) : api_(api), plural_(std::move(plural)) {}

  std::optional<json> Get(const std::string& key) const override {
    std::lock_guard<std::mutex> lock(api_.mu_);
    const Store& store = api_.frozen_ ? *api_.frozen_ : api_.objects_;
    auto kind = store.find(plural_);
    if (kind == store.end()) return std::nullopt;
    auto it = kind->second.find(key);
    if (it == kind->second.end()) return std::nullopt;
    return it->second;
  }

  std::vector<json> ListByLabel(const std::string& ns, const std::string& key,
                                const std::string& value) const override {
    std::lock_guard<std::mutex> lock(api_.mu_);
    const Store& store = api_.frozen_ ? *api_.frozen_ : api_.objects_;
    std::vector<json> out;
    auto kind = store.find(plural_);
    if (kind == store.end()) return out;
    for (const auto& [k, obj] : kind->second) {
      const json& meta = obj["metadata"];
      if (meta.value("namespace", "") != ns) continue;
      const json labels = meta.value("labels", json::object());
      if (labels.contains(key) && labels[key] == value) out.push_back(obj);
    }
    return out;
  }

 private:
  FakeApiClient& api_;
  const std::string plural_;
};

namespace {

std::string Key(const std::string& ns, const std::string& name) {
  return ns.empty() ? name : ns + "/" + name;
}

absl::Status NotFound(const Resource& r, const std::string& name) {
  return absl::NotFoundError(absl::StrCat(r.plural, " \"", name, "\" not found"));
}

}  // namespace

FakeApiClient::FakeApiClient(const Clock* clock)
    : clock_(clock != nullptr ? *clock : Clock::Real()) {}

FakeApiClient::~FakeApiClient() = default;

absl::Status FakeApiClient::Injected(const std::string& verb, const std::string& plural) {
  auto it = failures_.find(verb + " " + plural);
  if (it == failures_.end() || it->second.empty()) return absl::OkStatus();
  absl::Status error = it->second.front();
  it->second.pop_front();
  return error;
}

void FakeApiClient::Record(const std::string& verb, const Resource& r, const std::string& ns,
                           const std::string& name) {
  requests_.push_back(absl::StrCat(verb, " ", r.plural, " ", Key(ns, name)));
}

absl::Status FakeApiClient::Received(const std::string& verb, const Resource& r,
                                     const std::string& ns, const std::string& name) {
  Record(verb, r, ns, name);
  return Injected(verb, r.plural);
}

absl::StatusOr<std::map<std::string, json>::iterator> FakeApiClient::Stored(
    const Resource& r, const std::string& ns, const std::string& name) {
  auto& kind = objects_[r.plural];
  auto it = kind.find(Key(ns, name));
  if (it == kind.end()) return NotFound(r, name);
  return it;
}

std::string FakeApiClient::NextVersion() { return std::to_string(++version_); }

absl::StatusOr<json> FakeApiClient::Get(const Resource& r, const std::string& ns,
                                        const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(Received("get", r, ns, name));
  ASSIGN_OR_RETURN(auto it, Stored(r, ns, name));
  return it->second;
}

absl::StatusOr<json> FakeApiClient::Create(const Resource& r, const std::string& ns,
                                           const json& object, const CreateOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  json obj = object;
  json& meta = obj["metadata"];
  std::string name = meta.value("name", "");
  if (name.empty() && meta.contains("generateName")) {
    name = absl::StrCat(meta.value("generateName", ""), uid_ + 1);
  }
  Record(options.dry_run ? "create-dry-run" : "create", r, ns, name);
  if (absl::Status s = Injected("create", r.plural); !s.ok()) return s;
  auto& kind = objects_[r.plural];
  if (kind.count(Key(ns, name))) {
    return absl::AlreadyExistsError(absl::StrCat(r.plural, " \"", name, "\" already exists"));
  }
  meta["name"] = name;
  if (r.namespaced) meta["namespace"] = ns;
  meta["uid"] = absl::StrCat("uid-", ++uid_);
  meta["creationTimestamp"] = kube::FormatTime(clock_.Now());
  meta["generation"] = 1;
  if (r.plural == "pods" && !obj.contains("status")) obj["status"] = {{"phase", "Pending"}};
  if (options.dry_run) return obj;
  meta["resourceVersion"] = NextVersion();
  kind[Key(ns, name)] = obj;
  return obj;
}

absl::StatusOr<json> FakeApiClient::UpdateStatus(const Resource& r, const std::string& ns,
                                                 const json& object) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string name = object["metadata"].value("name", "");
  RETURN_IF_ERROR(Received("update", r, ns, name));
  ASSIGN_OR_RETURN(auto it, Stored(r, ns, name));
  std::string version = object["metadata"].value("resourceVersion", "");
  if (!version.empty() && version != it->second["metadata"].value("resourceVersion", "")) {
    return absl::AbortedError(absl::StrCat("Operation cannot be fulfilled on ", r.plural, " \"",
                                           name, "\": the object has been modified"));
  }
  it->second["status"] = object.value("status", json::object());
  it->second["metadata"]["resourceVersion"] = NextVersion();
  return it->second;
}

absl::StatusOr<json> FakeApiClient::Patch(const Resource& r, const std::string& ns,
                                          const std::string& name, PatchType type,
                                          const std::string& body, const std::string& subresource) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(Received("patch", r, ns, name));
  if (type != PatchType::kMerge || !subresource.empty()) {
    return absl::UnimplementedError("the fake API server applies merge patches only");
  }
  ASSIGN_OR_RETURN(auto it, Stored(r, ns, name));
  json patch = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (patch.is_discarded()) return absl::InvalidArgumentError("the patch is not JSON");
  json before_spec = it->second.value("spec", json());
  it->second.merge_patch(patch);
  if (it->second.value("spec", json()) != before_spec) {
    it->second["metadata"]["generation"] = it->second["metadata"].value("generation", 1) + 1;
  }
  it->second["metadata"]["resourceVersion"] = NextVersion();
  return it->second;
}

absl::Status FakeApiClient::Delete(const Resource& r, const std::string& ns,
                                   const std::string& name, const DeleteOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(Received("delete", r, ns, name));
  ASSIGN_OR_RETURN(auto it, Stored(r, ns, name));
  if (!options.precondition_uid.empty() &&
      options.precondition_uid != it->second["metadata"].value("uid", "")) {
    return absl::AbortedError(
        absl::StrCat("Precondition failed: UID in precondition: ", options.precondition_uid));
  }
  DeleteLocked(r, it, options.grace_period_seconds);
  return absl::OkStatus();
}

void FakeApiClient::DeleteLocked(const Resource& r, std::map<std::string, json>::iterator it,
                                 std::optional<int64_t> grace_seconds) {
  if (r.plural == "pods") {
    json& meta = it->second["metadata"];
    // The pod's grace period, or the delete's; 0 removes it at once (a forced delete).
    const int64_t grace = grace_seconds.value_or(
        it->second.value("spec", json::object()).value("terminationGracePeriodSeconds", 30));
    if (grace == 0) {
      objects_[r.plural].erase(it);
      return;
    }
    if (!meta.contains("deletionTimestamp")) {
      // As the API server sets it: when the grace period ends.
      meta["deletionTimestamp"] = kube::FormatTime(clock_.Now() + absl::Seconds(grace));
      meta["deletionGracePeriodSeconds"] = grace;
      meta["resourceVersion"] = NextVersion();
    }
    return;
  }
  objects_[r.plural].erase(it);
}

absl::StatusOr<std::vector<json>> FakeApiClient::DeleteCollection(const Resource& r,
                                                                  const std::string& ns,
                                                                  const ListOptions& selectors,
                                                                  const DeleteOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(Received("deletecollection", r, ns,
                           absl::StrCat("?labelSelector=", selectors.label_selector,
                                        "&fieldSelector=", selectors.field_selector)));
  if (!options.precondition_uid.empty()) {
    return absl::InvalidArgumentError("deletecollection takes no uid precondition");
  }
  // Every term must hold: `path=value` or `path!=value`, the path a label key or a dotted field.
  auto matches = [](const json& obj, const std::string& selector, bool labels) {
    for (absl::string_view term : absl::StrSplit(selector, ',', absl::SkipEmpty())) {
      bool negate = absl::StrContains(term, "!=");
      std::pair<std::string, std::string> kv =
          absl::StrSplit(term, absl::MaxSplits(negate ? "!=" : "=", 1));
      std::string actual;
      if (labels) {
        const json l = obj["metadata"].value("labels", json::object());
        actual =
            l.contains(kv.first) && l[kv.first].is_string() ? l[kv.first].get<std::string>() : "";
      } else {
        const json* at = &obj;
        for (absl::string_view part : absl::StrSplit(kv.first, '.')) {
          std::string key(part);
          if (!at->is_object() || !at->contains(key)) {
            at = nullptr;
            break;
          }
          at = &(*at)[key];
        }
        actual = at != nullptr && at->is_string() ? at->get<std::string>() : "";
      }
      if ((actual == kv.second) == negate) return false;
    }
    return true;
  };
  std::vector<json> deleted;
  auto& kind = objects_[r.plural];
  for (auto it = kind.begin(); it != kind.end();) {
    auto next = std::next(it);
    const json& obj = it->second;
    if ((!r.namespaced || obj["metadata"].value("namespace", "") == ns) &&
        matches(obj, selectors.label_selector, true) &&
        matches(obj, selectors.field_selector, false)) {
      std::string key = it->first;
      json before = it->second;
      DeleteLocked(r, it, options.grace_period_seconds);
      auto still = kind.find(key);
      deleted.push_back(still != kind.end() ? still->second : before);
    }
    it = next;
  }
  return deleted;
}

absl::StatusOr<std::string> FakeApiClient::GetLog(const std::string& ns, const std::string& pod,
                                                  const std::string& /*container*/, int tail_lines,
                                                  int64_t limit_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(Received("log", Resource::Pods(), ns, pod));
  if (!objects_["pods"].count(Key(ns, pod))) return NotFound(Resource::Pods(), pod);
  std::vector<std::string> lines = absl::StrSplit(logs_[Key(ns, pod)], '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  size_t from = lines.size() > static_cast<size_t>(tail_lines) ? lines.size() - tail_lines : 0;
  std::string out;
  for (size_t i = from; i < lines.size(); ++i) absl::StrAppend(&out, lines[i], "\n");
  if (static_cast<int64_t>(out.size()) > limit_bytes) out.erase(0, out.size() - limit_bytes);
  return out;
}

void FakeApiClient::FailNext(const std::string& verb, const std::string& plural, absl::Status error,
                             int times) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int i = 0; i < times; ++i) failures_[verb + " " + plural].push_back(error);
}

void FakeApiClient::SetPodPhase(const std::string& ns, const std::string& name,
                                const std::string& phase, std::optional<int> exit_code) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects_["pods"].find(Key(ns, name));
  if (it == objects_["pods"].end()) return;
  json& pod = it->second;
  // The status of the pod's first container (a training pod has one: kubetrain or tensorflow).
  std::string container_name = "kubetrain";
  const json& containers = pod["spec"].value("containers", json::array());
  if (!containers.empty()) container_name = containers[0].value("name", container_name);
  json container = {{"name", container_name}, {"ready", phase == "Running"}, {"restartCount", 0}};
  if (exit_code) {
    container["state"] = {{"terminated", {{"exitCode", *exit_code}}}};
  } else if (phase == "Running") {
    container["state"] = {{"running", json::object()}};
  }
  pod["status"] = {{"phase", phase}, {"containerStatuses", json::array({container})}};
  if (phase == "Running") pod["status"]["podIP"] = "127.0.0.1";
  pod["metadata"]["resourceVersion"] = NextVersion();
}

void FakeApiClient::FinishDeletions() {
  std::lock_guard<std::mutex> lock(mu_);
  auto& pods = objects_["pods"];
  for (auto it = pods.begin(); it != pods.end();) {
    it = it->second["metadata"].contains("deletionTimestamp") ? pods.erase(it) : std::next(it);
  }
}

void FakeApiClient::SetLog(const std::string& ns, const std::string& pod, const std::string& text) {
  std::lock_guard<std::mutex> lock(mu_);
  logs_[Key(ns, pod)] = text;
}

std::optional<json> FakeApiClient::Object(const Resource& r, const std::string& ns,
                                          const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto kind = objects_.find(r.plural);
  if (kind == objects_.end()) return std::nullopt;
  auto it = kind->second.find(Key(ns, name));
  if (it == kind->second.end()) return std::nullopt;
  return it->second;
}

std::vector<json> FakeApiClient::Objects(const Resource& r) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<json> out;
  auto kind = objects_.find(r.plural);
  if (kind == objects_.end()) return out;
  for (const auto& [key, obj] : kind->second) out.push_back(obj);
  return out;
}

std::vector<std::string> FakeApiClient::Requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

const ObjectCache& FakeApiClient::Cache(const Resource& r) {
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<View>& view = views_[r.plural];
  if (!view) view = std::make_unique<View>(*this, r.plural);
  return *view;
}

void FakeApiClient::Freeze() {
  std::lock_guard<std::mutex> lock(mu_);
  frozen_ = objects_;
}

void FakeApiClient::Thaw() {
  std::lock_guard<std::mutex> lock(mu_);
  frozen_.reset();
}

}  // namespace kubetrain::kube::testing
