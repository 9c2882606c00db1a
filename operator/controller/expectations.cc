#include "operator/controller/expectations.h"

namespace kubetrain::controller {

using nlohmann::json;

void Expectations::StatusWritten(const std::string& key, const std::set<std::string>& older,
                                 json written) {
  std::lock_guard<std::mutex> lock(mu_);
  Write& w = writes_[key];
  w.older_versions.insert(older.begin(), older.end());
  w.status = written.value("status", json::object());
  w.annotations = written.value("metadata", json::object()).value("annotations", json());
  w.resource_version = written.value("metadata", json::object()).value("resourceVersion", "");
}

json Expectations::NewestJob(const std::string& key, json cached) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = writes_.find(key);
  if (it == writes_.end()) return cached;
  const json& meta = cached.value("metadata", json::object());
  if (it->second.older_versions.count(meta.value("resourceVersion", ""))) {
    cached["status"] = it->second.status;
    cached["metadata"]["resourceVersion"] = it->second.resource_version;
    if (it->second.annotations.is_null()) {
      cached["metadata"].erase("annotations");
    } else {
      cached["metadata"]["annotations"] = it->second.annotations;
    }
    return cached;
  }
  writes_.erase(it);
  return cached;
}

void Expectations::PodDeleted(const std::string& key, const std::string& uid) {
  std::lock_guard<std::mutex> lock(mu_);
  deleted_pods_[key].insert(uid);
}

std::set<std::string> Expectations::PodsGoing(const std::string& key,
                                              const std::set<std::string>& present) {
  std::lock_guard<std::mutex> lock(mu_);
  return Going(deleted_pods_, key, present);
}

void Expectations::ServiceDeleted(const std::string& key, const std::string& uid) {
  std::lock_guard<std::mutex> lock(mu_);
  deleted_services_[key].insert(uid);
}

std::set<std::string> Expectations::ServicesGoing(const std::string& key,
                                                  const std::set<std::string>& present) {
  std::lock_guard<std::mutex> lock(mu_);
  return Going(deleted_services_, key, present);
}

std::set<std::string> Expectations::Going(Deletions& deleted, const std::string& key,
                                          const std::set<std::string>& present) {
  auto it = deleted.find(key);
  if (it == deleted.end()) return {};
  std::set<std::string> going;
  for (const std::string& uid : it->second) {
    if (present.count(uid)) going.insert(uid);
  }
  if (going.empty()) {
    deleted.erase(it);
  } else {
    it->second = going;
  }
  return going;
}

void Expectations::Forget(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  writes_.erase(key);
  deleted_pods_.erase(key);
  deleted_services_.erase(key);
}

}  // namespace kubetrain::controller
