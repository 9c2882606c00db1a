// The root-ca-cert-publisher: a deleted or changed kube-root-ca.crt ConfigMap comes back as it
// must be, so pods that mount it (every pod with a ServiceAccount token) keep starting.
#include "localkube/root_ca_publisher.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <memory>

#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "localkube/api.h"
#include "localkube/kubelet.h"
#include "localkube/namespace_companions.h"
#include "localkube/service_accounts.h"
#include "localkube/tests/host.h"
#include "localkube/tests/kubelet_fixture.h"

namespace kubetrain::localkube {
// Named, so the unity build keeps these helpers apart from other tests'.
namespace root_ca_publisher_test {
namespace {

using ::kubetrain::testing::IsOk;
using nlohmann::json;
namespace fs = std::filesystem;

constexpr char kPem[] = "-----BEGIN CERTIFICATE-----\nroot\n-----END CERTIFICATE-----\n";

class RootCaPublisherTest : public testing::KubeletTest {
 protected:
  void SetUp() override {
    dir_ = testing::TestDir("root_ca_test");
    tokens_ = std::make_unique<ServiceAccountTokens>(&store_);
    KubeletOptions options;
    options.log_dir = dir_ + "/logs";
    options.hosts_file = dir_ + "/hosts";
    options.service_account_token = [this](const std::string& ns, const std::string& sa,
                                           const std::string& audience, int64_t seconds) {
      return tokens_->IssueToken(ns, sa, audience, seconds);
    };
    kubelet_ = std::make_unique<Kubelet>(options, api_.get());
    kubelet_->SetApiServer("127.0.0.1", 6443);
    api_->EnableGracefulPodDeletion();
    publisher_ = std::make_unique<RootCaPublisher>(api_.get(), kPem);
    ASSERT_THAT(publisher_->Start(), IsOk());
    kubelet_->Start();
  }
  void TearDown() override {
    publisher_->Stop();
    KubeletTest::TearDown();
    fs::remove_all(dir_);
  }
  // The first store event after `after` that `match` accepts (null after 10 s without one).
  json WaitEvent(int64_t after, const std::function<bool(const StoreEvent&)>& match) {
    absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      std::vector<StoreEvent> events;
      int64_t scanned = after;
      if (!store_.EventsAfter("", after, &events, &scanned).ok()) return nullptr;
      for (const StoreEvent& e : events) {
        if (match(e)) return e.object;
      }
      after = scanned;
      store_.WaitForChange(after, deadline);
    }
    return nullptr;
  }
  static bool IsRootCa(const StoreEvent& e, const char* type) {
    return e.storage_key == "/configmaps" && e.type == type &&
           e.object["metadata"].value("name", "") == kRootCaConfigMap &&
           e.object["metadata"].value("namespace", "") == "default";
  }

  std::unique_ptr<ServiceAccountTokens> tokens_;
  std::unique_ptr<RootCaPublisher> publisher_;
};

TEST_F(RootCaPublisherTest, DeletedConfigMapComesBackAndNewPodsStart) {
  int64_t before = store_.Revision();
  ASSERT_THAT(api_->Delete(Of("configmaps", kRootCaConfigMap), DeleteOptions{}).status(), IsOk());
  json cm = WaitEvent(before, [](const StoreEvent& e) { return IsRootCa(e, "ADDED"); });
  ASSERT_FALSE(cm.is_null()) << "kube-root-ca.crt was not created again";
  EXPECT_EQ(cm["data"], json({{"ca.crt", kPem}}));
  EXPECT_FALSE(cm["metadata"]["annotations"].value("kubernetes.io/description", "").empty());
  EXPECT_EQ(cm["metadata"]["managedFields"][0]["manager"], "kube-controller-manager");

  // A pod with the ServiceAccount token volume (which projects kube-root-ca.crt) starts.
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", "after"}, {"namespace", "default"}}},
              {"spec",
               {{"restartPolicy", "Never"},
                {"containers", {{{"name", "c"}, {"image", "busybox"}, {"command", {"true"}}}}}}}};
  before = store_.Revision();
  ASSERT_THAT(api_->Create(Of("pods"), pod, WriteOptions{}).status(), IsOk());
  json done = WaitEvent(before, [](const StoreEvent& e) {
    return e.storage_key == "/pods" && e.object["metadata"].value("name", "") == "after" &&
           e.object["status"].value("phase", "") == "Succeeded";
  });
  ASSERT_FALSE(done.is_null()) << "the pod did not run";
}

TEST_F(RootCaPublisherTest, ChangedDataAndAnnotationAreRestored) {
  auto cm = api_->Get(Of("configmaps", kRootCaConfigMap));
  ASSERT_THAT(cm.status(), IsOk());
  json changed = *cm;
  changed["data"] = {{"ca.crt", "forged"}, {"extra", "x"}};
  changed["metadata"].erase("annotations");
  changed["metadata"]["labels"] = {{"kept", "yes"}};
  int64_t before = store_.Revision();
  bool created = false;
  ASSERT_THAT(
      api_->Update(Of("configmaps", kRootCaConfigMap), changed, WriteOptions{}, &created).status(),
      IsOk());
  json restored = WaitEvent(before, [](const StoreEvent& e) {
    return IsRootCa(e, "MODIFIED") && e.object["data"].value("ca.crt", "") == kPem;
  });
  ASSERT_FALSE(restored.is_null()) << "kube-root-ca.crt keeps the forged data";
  EXPECT_EQ(restored["data"], json({{"ca.crt", kPem}}));
  EXPECT_FALSE(restored["metadata"]["annotations"].value("kubernetes.io/description", "").empty());
  // What the controller does not own stays.
  EXPECT_EQ(restored["metadata"]["labels"]["kept"], "yes");
}

// A namespace being deleted takes its ConfigMap with it for good.
TEST_F(RootCaPublisherTest, TerminatingNamespaceIsLeftEmpty) {
  Target namespaces{registry_.Find("", "v1", "namespaces"), "", "", ""};
  ASSERT_THAT(
      api_->Create(namespaces,
                   {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "gone"}}}},
                   WriteOptions{})
          .status(),
      IsOk());
  ASSERT_TRUE(store_.Get("/configmaps", "gone", kRootCaConfigMap).has_value());
  int64_t before = store_.Revision();
  namespaces.name = "gone";
  ASSERT_THAT(api_->Delete(namespaces, DeleteOptions{}).status(), IsOk());
  json removed = WaitEvent(before, [](const StoreEvent& e) {
    return e.storage_key == "/namespaces" && e.type == "DELETED" &&
           e.object["metadata"].value("name", "") == "gone";
  });
  ASSERT_FALSE(removed.is_null());
  // The publisher has seen every event up to the namespace's removal once a later change to
  // another namespace's ConfigMap is handled.
  before = store_.Revision();
  ASSERT_THAT(api_->Delete(Of("configmaps", kRootCaConfigMap), DeleteOptions{}).status(), IsOk());
  ASSERT_FALSE(
      WaitEvent(before, [](const StoreEvent& e) { return IsRootCa(e, "ADDED"); }).is_null());
  EXPECT_FALSE(store_.Get("/configmaps", "gone", kRootCaConfigMap).has_value());
}

}  // namespace
}  // namespace root_ca_publisher_test
}  // namespace kubetrain::localkube
