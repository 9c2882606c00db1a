// The set-up the kubelet suites share: a kubelet (kubelet_, which each suite makes and starts its
// own way) over an API server in memory, its files in dir_, and its pods in namespace default;
// the kubelet stops at the end of each test.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"
#include "localkube/api.h"
#include "localkube/kubelet.h"
#include "localkube/tests/host.h"
#include "localkube/tests/test_objects.h"

namespace kubetrain::localkube::testing {

class KubeletTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (kubelet_) kubelet_->Stop();
  }

  // Object `name` of the core (v1) `resource` in namespace default; the collection when unnamed.
  Target Of(const std::string& resource, const std::string& name = "") {
    return Target{registry_.Find("", "v1", resource), "default", name, ""};
  }
  // What `container` of pod `pod` has written so far; empty before it has a log.
  std::string Log(const std::string& pod, const std::string& container = "c") {
    auto path = kubelet_->LogPath("default", pod, container, false);
    return path.ok() ? ReadFile(*path) : "";
  }
  // Pod `name` once `done` holds for it (null when it did not within `timeout`).
  nlohmann::json WaitPod(const std::string& name,
                         const std::function<bool(const nlohmann::json&)>& done,
                         absl::Duration timeout = absl::Seconds(30)) {
    return WaitForPod(*api_, Of("pods", name), done, timeout);
  }

  std::string dir_;
  Registry registry_;
  Store store_;
  std::unique_ptr<Api> api_ = std::make_unique<Api>(&registry_, &store_);
  std::unique_ptr<Kubelet> kubelet_;
};

}  // namespace kubetrain::localkube::testing
