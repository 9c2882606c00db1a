// The set-up the pod sandbox suites share: a kubelet running pods in sandboxes
// (pod_sandbox.h, localkube-pod-init) over an API server in memory, in a folder of its own under
// the temp directory. Skips without root.
#pragma once

#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "localkube/kubelet.h"
#include "localkube/tests/kubelet_fixture.h"

namespace kubetrain::localkube::testing {

class SandboxKubeletTest : public KubeletTest {
 protected:
  // `suite` names the folder; `nodes` are the kubelet's nodes (none: it runs every pod).
  SandboxKubeletTest(std::string suite, std::vector<std::string> nodes)
      : suite_(std::move(suite)), nodes_(std::move(nodes)) {}

  void SetUp() override {
    if (geteuid() != 0)
      GTEST_SKIP() << "pod sandboxes need root (network, mount and PID namespaces)";
    std::random_device random;
    tag_ = absl::StrCat(getpid(), "-", random() % 1000000);
    dir_ = (std::filesystem::temp_directory_path() / absl::StrCat(suite_, "-", tag_)).string();
    std::filesystem::create_directories(dir_);
    KubeletOptions options;
    options.log_dir = dir_ + "/logs";
    options.node_names = nodes_;
    options.image_map = image_map_;
    options.pod_network.mode = "sandbox";
    options.pod_network.pod_init = LOCALKUBE_POD_INIT_BINARY;
    kubelet_ = std::make_unique<Kubelet>(options, api_.get());
    ASSERT_THAT(kubelet_->pod_network_status(), ::kubetrain::testing::IsOk());
    ASSERT_NE(kubelet_->pod_network(), nullptr);
    api_->EnableGracefulPodDeletion();
    kubelet_->Start();
  }
  void TearDown() override {
    KubeletTest::TearDown();
    kubelet_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  const std::string suite_;
  const std::vector<std::string> nodes_;
  // Set before SetUp: (image prefix, directory of programs), as localkube's --image-map.
  std::vector<std::pair<std::string, std::string>> image_map_;
  std::string tag_;
};

}  // namespace kubetrain::localkube::testing
